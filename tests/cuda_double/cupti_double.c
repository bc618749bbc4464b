/* tests/cuda_double/cupti_double.c — owns the double of CUPTI's activity API as
 * cbt's host/device/cupti.c uses it (cudadbl.h says what it proves).
 *
 * cuptiActivityRegisterCallbacks keeps cbt's two buffer callbacks. A kernel
 * "launch" (cudadbl_cupti_launch) writes, laid out as CUPTI lays them out,
 * an external-correlation record (when an id is pushed on the thread), the
 * launch's runtime-API record and the kernel's record into a buffer taken
 * from the request callback; cuptiActivityFlushAll hands every buffer with
 * records to the completion callback, on the flushing thread (CUPTI may use
 * its own), and cuptiActivityGetNextRecord walks one. The activity clock
 * (cuptiGetTimestamp) is CLOCK_MONOTONIC plus an offset of its own.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cupti.h>

#include "cudadbl.h"

#define CUPTI_OFFSET_NS 3000000000000ull
#define MAX_DONE 64u
#define MAX_KINDS 64u

typedef struct buf {
    uint8_t *p;
    size_t size, used;
} buf;

static struct {
    pthread_mutex_t mu;
    CUpti_BuffersCallbackRequestFunc req;
    CUpti_BuffersCallbackCompleteFunc comp;
    int kind_on[MAX_KINDS];
    uint32_t apis_on;
    buf cur;
    buf done[MAX_DONE];
    uint32_t n_done;
    uint32_t next_corr;
    uint32_t flushes, completed;
} c = {.mu = PTHREAD_MUTEX_INITIALIZER, .next_corr = 1};

static _Thread_local uint64_t tls_ext[8];
static _Thread_local uint32_t tls_n_ext;

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t cudadbl_cupti_now(void) { return mono_ns() + CUPTI_OFFSET_NS; }

static size_t rec_size(CUpti_ActivityKind k)
{
    switch (k) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL:
        return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
        return sizeof(CUpti_ActivityExternalCorrelation);
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
        return sizeof(CUpti_ActivityAPI);
    default:
        return 0;
    }
}

/* ---- what cupti.c calls ------------------------------------------------------------- */

CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc req,
                                           CUpti_BuffersCallbackCompleteFunc comp)
{
    if (!req || !comp)
        return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&c.mu);
    c.req = req;
    c.comp = comp;
    pthread_mutex_unlock(&c.mu);
    return CUPTI_SUCCESS;
}

static CUptiResult set_kind(CUpti_ActivityKind k, int on)
{
    if ((unsigned)k >= MAX_KINDS)
        return CUPTI_ERROR_INVALID_KIND;
    pthread_mutex_lock(&c.mu);
    c.kind_on[k] = on;
    pthread_mutex_unlock(&c.mu);
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) { return set_kind(kind, 1); }
CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) { return set_kind(kind, 0); }

CUptiResult cuptiActivityEnableRuntimeApi(CUpti_CallbackId cbid, uint8_t enable)
{
    (void)cbid;
    pthread_mutex_lock(&c.mu);
    if (enable)
        c.apis_on++;
    else if (c.apis_on)
        c.apis_on--;
    pthread_mutex_unlock(&c.mu);
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityFlushAll(uint32_t flag)
{
    (void)flag;
    buf out[MAX_DONE + 1];
    uint32_t n = 0;
    pthread_mutex_lock(&c.mu);
    c.flushes++;
    CUpti_BuffersCallbackCompleteFunc comp = c.comp;
    for (uint32_t i = 0; i < c.n_done; i++)
        out[n++] = c.done[i];
    c.n_done = 0;
    if (c.cur.p && c.cur.used) {
        out[n++] = c.cur;
        memset(&c.cur, 0, sizeof c.cur);
    }
    c.completed += n;
    pthread_mutex_unlock(&c.mu);
    for (uint32_t i = 0; i < n; i++) /* outside the lock: cbt walks them with our iterator */
        comp(NULL, 0, out[i].p, out[i].size, out[i].used);
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, CUpti_Activity **rec)
{
    size_t off = 0;
    if (*rec) {
        size_t sz = rec_size((*rec)->kind);
        if (!sz)
            return CUPTI_ERROR_INVALID_KIND;
        off = (size_t)((uint8_t *)*rec - buffer) + sz;
    }
    if (off + sizeof(CUpti_Activity) > valid)
        return CUPTI_ERROR_MAX_LIMIT_REACHED;
    CUpti_Activity *a = (CUpti_Activity *)(void *)(buffer + off);
    if (!rec_size(a->kind) || off + rec_size(a->kind) > valid)
        return CUPTI_ERROR_INVALID_KIND;
    *rec = a;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext ctx, uint32_t stream, size_t *dropped)
{
    (void)ctx;
    (void)stream;
    *dropped = 0;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                   uint64_t id)
{
    if (kind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0 || tls_n_ext >= 8)
        return CUPTI_ERROR_INVALID_PARAMETER;
    tls_ext[tls_n_ext++] = id;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                  uint64_t *last)
{
    if (kind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0 || tls_n_ext == 0)
        return CUPTI_ERROR_QUEUE_EMPTY;
    *last = tls_ext[--tls_n_ext];
    return CUPTI_SUCCESS;
}

CUptiResult cuptiGetResultString(CUptiResult r, const char **s)
{
    *s = r == CUPTI_SUCCESS ? "CUPTI_SUCCESS (double)" : "a CUPTI error (double)";
    return CUPTI_SUCCESS;
}

CUptiResult cuptiGetTimestamp(uint64_t *t)
{
    *t = cudadbl_cupti_now();
    return CUPTI_SUCCESS;
}

/* ---- the test's side ---------------------------------------------------------------- */

/* Room for n bytes in the current buffer, asking cbt for one; under c.mu. */
static uint8_t *room(size_t n)
{
    if (c.cur.p && c.cur.used + n > c.cur.size) {
        if (c.n_done >= MAX_DONE)
            return NULL;
        c.done[c.n_done++] = c.cur;
        memset(&c.cur, 0, sizeof c.cur);
    }
    if (!c.cur.p) {
        size_t max_recs = 0;
        c.req(&c.cur.p, &c.cur.size, &max_recs);
        c.cur.used = 0;
        if (!c.cur.p || c.cur.size < n) {
            memset(&c.cur, 0, sizeof c.cur); /* cbt had none to give: records dropped */
            return NULL;
        }
    }
    uint8_t *p = c.cur.p + c.cur.used;
    c.cur.used += n;
    return p;
}

uint32_t cudadbl_cupti_launch(const char *name, uint64_t start, uint64_t end)
{
    pthread_mutex_lock(&c.mu);
    if (!c.req) {
        pthread_mutex_unlock(&c.mu);
        return 0;
    }
    uint32_t corr = c.next_corr++;
    uint8_t *p;
    if (tls_n_ext && c.kind_on[CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION] &&
        (p = room(sizeof(CUpti_ActivityExternalCorrelation)))) {
        CUpti_ActivityExternalCorrelation x;
        memset(&x, 0, sizeof x);
        x.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
        x.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
        x.externalId = tls_ext[tls_n_ext - 1];
        x.correlationId = corr;
        memcpy(p, &x, sizeof x);
    }
    if ((c.apis_on || c.kind_on[CUPTI_ACTIVITY_KIND_RUNTIME]) &&
        (p = room(sizeof(CUpti_ActivityAPI)))) {
        CUpti_ActivityAPI a;
        memset(&a, 0, sizeof a);
        a.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
        a.cbid = CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000;
        a.start = start > 1000 ? start - 1000 : 0;
        a.end = start;
        a.correlationId = corr;
        memcpy(p, &a, sizeof a);
    }
    if (c.kind_on[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL] &&
        (p = room(sizeof(CUpti_ActivityKernel10)))) {
        CUpti_ActivityKernel10 k;
        memset(&k, 0, sizeof k);
        k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        k.correlationId = corr;
        k.start = start;
        k.end = end;
        k.gridX = 264, k.gridY = 1, k.gridZ = 1;
        k.blockX = 256, k.blockY = 1, k.blockZ = 1;
        k.registersPerThread = 32;
        k.staticSharedMemory = 2048;
        k.dynamicSharedMemory = 0;
        k.deviceId = 0;
        k.streamId = 7;
        k.name = name; /* the caller's string: it must outlive the next flush */
        memcpy(p, &k, sizeof k);
    }
    pthread_mutex_unlock(&c.mu);
    return corr;
}

uint32_t cudadbl_cupti_kinds_enabled(void)
{
    pthread_mutex_lock(&c.mu);
    uint32_t n = 0;
    for (uint32_t i = 0; i < MAX_KINDS; i++)
        n += c.kind_on[i] != 0;
    pthread_mutex_unlock(&c.mu);
    return n;
}

uint32_t cudadbl_cupti_apis_enabled(void)
{
    pthread_mutex_lock(&c.mu);
    uint32_t n = c.apis_on;
    pthread_mutex_unlock(&c.mu);
    return n;
}

uint32_t cudadbl_cupti_flushes(void)
{
    pthread_mutex_lock(&c.mu);
    uint32_t n = c.flushes;
    pthread_mutex_unlock(&c.mu);
    return n;
}

uint32_t cudadbl_cupti_buffers_completed(void)
{
    pthread_mutex_lock(&c.mu);
    uint32_t n = c.completed;
    pthread_mutex_unlock(&c.mu);
    return n;
}
