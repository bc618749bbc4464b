/* host/device/cupti.c — owns cbt's CUPTI subscription: kernel activity records in,
 * `gpu.kernel` spans out (cbt/cupti.h).
 *
 * Enabled: the runtime-API records of the kernel-launch calls only
 * (k_runtime_cbids, cuptiActivityEnableRuntimeApi; the whole
 * CUPTI_ACTIVITY_KIND_RUNTIME kind when CUPTI refuses that, said on stderr),
 * then the external correlations and the concurrent kernels (k_kinds).
 * CUPTI emits an external-correlation record with the API record of the call
 * made inside the push/pop scope, so without API records no kernel would
 * ever be joined to its launch; the API records themselves are discarded
 * (counted in api_records). Only the launch calls: the whole kind would
 * record every runtime call in the process (cbt's own event polling and ring
 * copies, the framework's queries) and fill the pool between flushes.
 *
 * CUPTI's thread hands us filled activity buffers (a fixed pool of BUF_COUNT
 * buffers of BUF_SIZE bytes; when all are in flight CUPTI drops records and
 * counts them, which we add to `dropped`). The completion callback walks the
 * buffer (cbt_cupti_walk_: no device needed, tests/test_cupti_records.c),
 * copies the fields we use out of each kernel and external-correlation record
 * into a chunk on its stack, moves each full chunk (32 records) into a
 * bounded queue under `g.mu` (never held across the walk) and returns the
 * buffer to the pool; it never touches the tracer. A kernel whose timestamps are unknown is skipped
 * (bad_timestamps); a record CUPTI cannot walk past ends the buffer
 * (truncated: the rest of it is lost, said once on stderr).
 *
 * Delivery: the harvester asks CUPTI for completed records every 100 ms
 * (cbt_cupti_periodic_: cuptiActivityFlushAll with CBT_CUPTI_FLUSH_FLAGS);
 * flushes are never forced (a forced flush hands back records still
 * incomplete). A default flush returns only buffers all of whose records are
 * complete, so what is bounded is this: once the kernels in a buffer have
 * all ended, their records come within about a period (plus a harvester
 * round); while kernels keep being launched, the buffer being filled always
 * holds one still running and comes back only when it is full, so a span then
 * lags its kernel by the time the workload takes to fill one BUF_SIZE buffer
 * (about 460 bracketed launches) — bounded in records, not in time. Hence
 * small buffers (32 x 128 KiB rather than 8 x 1 MiB: the same 4 MiB).
 *
 * The harvester (cbt_cupti_poll_, under t->lock, each round) drains the
 * queue: external-correlation records fill a map CUPTI correlation id ->
 * cbt launch id; a kernel record is joined through it to the parent its cbt
 * launch resolved (cbt_kspans_recent_), and ended as a span. A kernel whose
 * mapping or launch is not known yet waits (bounded) a little; past that it
 * becomes a span of its own trace.
 *
 * Process-wide state: CUPTI itself is a process-wide subscription, so it
 * outlives a tracer; records arriving while no tracer polls fill the queue
 * and are then counted dropped.
 */
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cbt/cupti.h"
#include "internal/abi.h"
#include "internal/cupti_records.h"
#include "internal/tracer.h"

#define BUF_SIZE (128u << 10) /* ~460 bracketed launches (216 + 40 + 24 bytes each) */
#define BUF_COUNT 32u        /* 4 MiB in all */
#define BUF_ALIGN 8u
#define Q_MAX 4096u
#define KNAME_MAX CBT_CUPTI_KNAME_MAX
#define CORR_SLOTS 8192u
#define HOLD_MAX 1024u
#define HOLD_UNMAPPED_NS 20000000ull /* a kernel with no external id yet: wait this long */
#define HOLD_UNKNOWN_NS 200000000ull /* an external id whose launch is not known yet */
#define CAL_SAMPLES 16

enum { REC_KERNEL = CBT_CUPTI_REC_KERNEL, REC_EXTCORR = CBT_CUPTI_REC_EXTCORR };

typedef cbt_cupti_krec krec;

typedef struct held {
    krec r;
    uint64_t since; /* unix ns */
} held;

static struct {
    pthread_mutex_t en_mu; /* enable / disable */
    pthread_mutex_t mu;    /* buffer pool and queue (CUPTI threads, harvester) */
    _Atomic int enabled;
    int whole_runtime; /* under en_mu: the RUNTIME kind was enabled, not the launch APIs */
    uint8_t *free_bufs[BUF_COUNT];
    uint32_t n_free;
    int allocated;
    krec *q;
    uint32_t q_head, q_n;
    /* calibration: CUPTI ns c0 was read between host ticks lo and hi */
    uint64_t c0, tick0;
    _Atomic uint64_t records, spans, dropped, unjoined, clock_checks;
    _Atomic uint64_t api_records, bad_timestamps, truncated;
    _Atomic int64_t clock_delta;
    _Atomic uint64_t next_flush; /* unix ns: the harvester's next default flush */
} g = {.en_mu = PTHREAD_MUTEX_INITIALIZER, .mu = PTHREAD_MUTEX_INITIALIZER};

/* harvester only */
static struct {
    struct {
        uint32_t corr;
        uint32_t launch_id;
    } map[CORR_SLOTS];
    held hold[HOLD_MAX];
    uint32_t n_hold;
    krec batch[256];
} h;

static cbt_name k_name, k_grid[3], k_block[3], k_stream, k_regs, k_smem_s, k_smem_d, k_corr;
static _Thread_local int tls_pushed;
static atomic_flag said_unavailable = ATOMIC_FLAG_INIT;
static atomic_flag said_truncated = ATOMIC_FLAG_INIT;

/* ---- record handling (no device: tests/test_cupti_records.c) ---------------------- */

/* The runtime calls that launch kernels: their API records (and so the
 * external correlations CUPTI emits with them) are all cbt asks for, through
 * cuptiActivityEnableRuntimeApi, so the harvester's own polling, the ring's
 * memcpy/sync and the application's other calls fill no buffer. CUDA 13's
 * <<<>>> goes through __cudaLaunchKernel. */
static const CUpti_CallbackId k_runtime_cbids[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000,
    CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000,
};
#define N_CBIDS (sizeof k_runtime_cbids / sizeof k_runtime_cbids[0])

/* after the API records, so no kernel is recorded before its correlations can be */
static const CUpti_ActivityKind k_kinds[] = {
    CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
};
#define N_KINDS (sizeof k_kinds / sizeof k_kinds[0])

uint32_t cbt_cupti_kinds_(const CUpti_ActivityKind **kinds)
{
    *kinds = k_kinds;
    return (uint32_t)N_KINDS;
}

uint32_t cbt_cupti_runtime_cbids_(const CUpti_CallbackId **cbids)
{
    *cbids = k_runtime_cbids;
    return (uint32_t)N_CBIDS;
}

static void api_undo(cbt_cupti_api_fn api, cbt_cupti_kind_fn disable, int whole_runtime)
{
    if (whole_runtime) {
        (void)disable(CUPTI_ACTIVITY_KIND_RUNTIME);
        return;
    }
    for (uint32_t i = N_CBIDS; i--;)
        (void)api(k_runtime_cbids[i], 0);
}

CUptiResult cbt_cupti_enable_kinds_(cbt_cupti_api_fn api, cbt_cupti_kind_fn enable,
                                    cbt_cupti_kind_fn disable, int *whole_runtime)
{
    CUptiResult r = CUPTI_SUCCESS;
    *whole_runtime = 0;
    for (uint32_t i = 0; i < N_CBIDS; i++) {
        if ((r = api(k_runtime_cbids[i], 1)) != CUPTI_SUCCESS) {
            while (i--)
                (void)api(k_runtime_cbids[i], 0);
            break;
        }
    }
    if (r != CUPTI_SUCCESS) { /* per-API enable refused: every runtime call, then */
        if ((r = enable(CUPTI_ACTIVITY_KIND_RUNTIME)) != CUPTI_SUCCESS)
            return r;
        *whole_runtime = 1;
    }
    for (uint32_t i = 0; i < N_KINDS; i++) {
        if ((r = enable(k_kinds[i])) != CUPTI_SUCCESS) {
            while (i--)
                (void)disable(k_kinds[i]);
            api_undo(api, disable, *whole_runtime);
            *whole_runtime = 0;
            return r;
        }
    }
    return CUPTI_SUCCESS;
}

void cbt_cupti_disable_kinds_(cbt_cupti_api_fn api, cbt_cupti_kind_fn disable, int whole_runtime)
{
    for (uint32_t i = N_KINDS; i--;)
        (void)disable(k_kinds[i]);
    api_undo(api, disable, whole_runtime);
}

int cbt_cupti_flush_due_(uint64_t *next, uint64_t now)
{
    if (*next && now < *next)
        return 0;
    *next = now + CBT_CUPTI_FLUSH_PERIOD_NS;
    return 1;
}

cbt_cupti_rec_class cbt_cupti_record_(const CUpti_Activity *rec, cbt_cupti_krec *r)
{
    memset(r, 0, sizeof *r);
    switch (rec->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL: {
        const cbt_cupti_kernel_rec *k = (const cbt_cupti_kernel_rec *)(const void *)rec;
        /* CUPTI_TIMESTAMP_UNKNOWN (0): no timing could be collected (or the
         * record is incomplete); such a kernel has no span to give */
        if (k->start == (uint64_t)CUPTI_TIMESTAMP_UNKNOWN ||
            k->end == (uint64_t)CUPTI_TIMESTAMP_UNKNOWN || k->end < k->start)
            return CBT_CUPTI_REC_BAD_TIME;
        r->kind = REC_KERNEL;
        r->regs = k->registersPerThread;
        r->corr = k->correlationId;
        r->start = k->start;
        r->end = k->end;
        r->device = k->deviceId;
        r->stream = k->streamId;
        r->grid[0] = k->gridX, r->grid[1] = k->gridY, r->grid[2] = k->gridZ;
        r->block[0] = k->blockX, r->block[1] = k->blockY, r->block[2] = k->blockZ;
        r->smem_static = k->staticSharedMemory;
        r->smem_dyn = k->dynamicSharedMemory;
        if (k->name) {
            size_t n = strlen(k->name);
            if (n > KNAME_MAX - 1)
                n = KNAME_MAX - 1;
            memcpy(r->name, k->name, n);
        }
        return CBT_CUPTI_REC_KERNEL;
    }
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const CUpti_ActivityExternalCorrelation *x =
            (const CUpti_ActivityExternalCorrelation *)(const void *)rec;
        if (x->externalKind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0)
            return CBT_CUPTI_REC_IGNORED;
        r->kind = REC_EXTCORR;
        r->corr = x->correlationId;
        r->ext = x->externalId;
        return CBT_CUPTI_REC_EXTCORR;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
        return CBT_CUPTI_REC_API;
    default:
        return CBT_CUPTI_REC_IGNORED;
    }
}

void cbt_cupti_walk_(uint8_t *buffer, size_t valid, cbt_cupti_next_fn next, void *next_ctx,
                     cbt_cupti_push_fn push, void *push_ctx, cbt_cupti_walk *w)
{
    memset(w, 0, sizeof *w);
    w->stop = CUPTI_ERROR_MAX_LIMIT_REACHED;
    if (!buffer || !valid)
        return;
    CUpti_Activity *rec = NULL;
    for (;;) {
        CUptiResult res = next(next_ctx, buffer, valid, &rec);
        if (res != CUPTI_SUCCESS) {
            w->stop = res;
            /* anything but the end: CUPTI cannot step past this record, so
             * the rest of the buffer is lost with it */
            w->truncated = res != CUPTI_ERROR_MAX_LIMIT_REACHED;
            return;
        }
        krec r;
        switch (cbt_cupti_record_(rec, &r)) {
        case CBT_CUPTI_REC_KERNEL:
            w->kernels++;
            if (!push(push_ctx, &r))
                w->refused++;
            break;
        case CBT_CUPTI_REC_EXTCORR:
            w->extcorr++;
            if (!push(push_ctx, &r))
                w->refused++;
            break;
        case CBT_CUPTI_REC_API:
            w->api++;
            break;
        case CBT_CUPTI_REC_BAD_TIME:
            w->bad_time++;
            break;
        case CBT_CUPTI_REC_IGNORED:
            w->ignored++;
            break;
        }
    }
}

/* ---- CUPTI's threads -------------------------------------------------------------- */

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    pthread_mutex_lock(&g.mu);
    if (g.n_free) {
        *buffer = g.free_bufs[--g.n_free];
        *size = BUF_SIZE;
    } else {
        *buffer = NULL; /* CUPTI drops and counts */
        *size = 0;
    }
    pthread_mutex_unlock(&g.mu);
    *max_records = 0;
}

/* Records walked out of a buffer go first into a chunk on the walking
 * thread's stack and only then, CHUNK at a time, into the queue under g.mu,
 * so g.mu is never held across a walk (the harvester takes it holding
 * t->lock). On the stack, not a static scratch: CUPTI does not promise one
 * completion thread (its worker, and any thread calling
 * cuptiActivityFlushAll: the harvester, cbt_cupti_disable) can deliver
 * at once. */
#define CHUNK 32u /* 32 x 200 bytes of stack */

typedef struct chunk {
    krec r[CHUNK];
    uint32_t n;
    uint64_t refused; /* entries the queue refused (full, or no queue yet) */
} chunk;

static void chunk_flush(chunk *c)
{
    if (!c->n)
        return;
    uint32_t i = 0;
    pthread_mutex_lock(&g.mu);
    for (; i < c->n && g.q && g.q_n < Q_MAX; i++) {
        g.q[(g.q_head + g.q_n) % Q_MAX] = c->r[i];
        g.q_n++;
    }
    pthread_mutex_unlock(&g.mu);
    c->refused += c->n - i;
    c->n = 0;
}

/* the walk's push: always taken here; the queue's refusals are counted in
 * chunk_flush */
static int push(void *ctx, const krec *r)
{
    chunk *c = ctx;
    if (c->n == CHUNK)
        chunk_flush(c);
    c->r[c->n++] = *r;
    return 1;
}

static CUptiResult next_record(void *ctx, uint8_t *buffer, size_t valid, CUpti_Activity **rec)
{
    (void)ctx;
    return cuptiActivityGetNextRecord(buffer, valid, rec);
}

static void walk_chunked(uint8_t *buffer, size_t valid, cbt_cupti_next_fn next, void *next_ctx,
                         cbt_cupti_walk *w)
{
    chunk c;
    c.n = 0;
    c.refused = 0;
    cbt_cupti_walk_(buffer, valid, next, next_ctx, push, &c, w);
    chunk_flush(&c);
    w->refused += c.refused;
}

static void count_walk(const cbt_cupti_walk *w)
{
    atomic_fetch_add_explicit(&g.records, w->kernels + w->bad_time, memory_order_relaxed);
    atomic_fetch_add_explicit(&g.dropped, w->refused, memory_order_relaxed);
    atomic_fetch_add_explicit(&g.api_records, w->api, memory_order_relaxed);
    atomic_fetch_add_explicit(&g.bad_timestamps, w->bad_time, memory_order_relaxed);
    if (w->truncated) {
        atomic_fetch_add_explicit(&g.truncated, w->truncated, memory_order_relaxed);
        if (!atomic_flag_test_and_set(&said_truncated)) {
            const char *s = NULL;
            if (cuptiGetResultString(w->stop, &s) != CUPTI_SUCCESS || !s)
                s = "unknown CUPTI error";
            fprintf(stderr,
                    "cbt: CUPTI: a bad activity record (%s) ended a buffer early; the rest of "
                    "it is lost (counted in cbt_cupti_stats.truncated)\n",
                    s);
        }
    }
}

void cbt_cupti_deliver_(uint8_t *buffer, size_t valid, cbt_cupti_next_fn next, void *next_ctx)
{
    cbt_cupti_walk w;
    walk_chunked(buffer, valid, next, next_ctx, &w);
    count_walk(&w);
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer,
                                      size_t size, size_t valid)
{
    (void)size;
    cbt_cupti_walk w;
    walk_chunked(buffer, valid, next_record, NULL, &w);
    if (buffer) {
        pthread_mutex_lock(&g.mu);
        g.free_bufs[g.n_free++] = buffer;
        pthread_mutex_unlock(&g.mu);
    }
    count_walk(&w);
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == CUPTI_SUCCESS && dropped)
        atomic_fetch_add_explicit(&g.dropped, dropped, memory_order_relaxed);
}

/* ---- the user's threads -------------------------------------------------------------- */

static cbt_status unavailable(CUptiResult r)
{
    const char *s = NULL;
    if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s)
        s = "unknown CUPTI error";
    if (!atomic_flag_test_and_set(&said_unavailable))
        fprintf(stderr, "cbt: CUPTI unavailable (%s); carrying on without kernel activity\n", s);
    return CBT_ERR_UNSUPPORTED;
}

static void intern_names(void)
{
    static const char *grid[3] = {"grid_x", "grid_y", "grid_z"};
    static const char *block[3] = {"block_x", "block_y", "block_z"};
    (void)cbt_intern("kernel.name", &k_name);
    for (int i = 0; i < 3; i++) {
        (void)cbt_intern(grid[i], &k_grid[i]);
        (void)cbt_intern(block[i], &k_block[i]);
    }
    (void)cbt_intern("stream", &k_stream);
    (void)cbt_intern("registers_per_thread", &k_regs);
    (void)cbt_intern("static_shared_memory", &k_smem_s);
    (void)cbt_intern("dynamic_shared_memory", &k_smem_d);
    (void)cbt_intern("correlation_id", &k_corr);
}

/* under g.mu */
static int alloc_pool(void)
{
    if (g.allocated)
        return 1;
    g.q = calloc(Q_MAX, sizeof *g.q);
    if (!g.q)
        return 0;
    for (uint32_t i = 0; i < BUF_COUNT; i++) {
        uint8_t *b = aligned_alloc(BUF_ALIGN, BUF_SIZE);
        if (!b) {
            for (uint32_t j = 0; j < g.n_free; j++)
                free(g.free_bufs[j]);
            g.n_free = 0;
            free(g.q);
            g.q = NULL;
            return 0;
        }
        g.free_bufs[g.n_free++] = b;
    }
    g.allocated = 1; /* kept for the life of the process: CUPTI may hold them */
    return 1;
}

int cbt_cupti_pool_init_(void)
{
    pthread_mutex_lock(&g.mu);
    int ok = alloc_pool();
    pthread_mutex_unlock(&g.mu);
    if (ok)
        intern_names(); /* idempotent: the names are process-wide */
    return ok;
}

static CUptiResult kind_enable(CUpti_ActivityKind k) { return cuptiActivityEnable(k); }
static CUptiResult kind_disable(CUpti_ActivityKind k) { return cuptiActivityDisable(k); }
static CUptiResult api_enable(CUpti_CallbackId cbid, uint8_t on)
{
    return cuptiActivityEnableRuntimeApi(cbid, on);
}

/* CUPTI ns <-> host ticks: the tightest of CAL_SAMPLES brackets. */
static void calibrate(void)
{
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < CAL_SAMPLES; i++) {
        uint64_t c = 0;
        uint64_t lo = cbt_clock_ticks_ordered();
        CUptiResult r = cuptiGetTimestamp(&c);
        uint64_t hi = cbt_clock_ticks_ordered();
        if (r != CUPTI_SUCCESS || hi < lo)
            continue;
        if (hi - lo < best) {
            best = hi - lo;
            g.c0 = c;
            g.tick0 = lo + (hi - lo) / 2;
        }
    }
}

cbt_status cbt_cupti_enable(void)
{
    if (!cbt_tracer_get())
        return CBT_ERR_NOT_INITIALIZED;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
        return CBT_ERR_NO_DEVICE;
    pthread_mutex_lock(&g.en_mu);
    cbt_status st = CBT_OK;
    CUptiResult r;
    if (atomic_load(&g.enabled)) {
        st = CBT_ERR_ALREADY;
        goto out;
    }
    if (!cbt_cupti_pool_init_()) {
        st = CBT_ERR_NOMEM;
        goto out;
    }
    calibrate(); /* before any record can reach the harvester (published through g.mu) */
    if ((r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed)) != CUPTI_SUCCESS) {
        st = unavailable(r);
        goto out;
    }
    /* the kernel-launch runtime APIs (or the whole RUNTIME kind), the
     * external correlations, the kernels; all or none */
    if ((r = cbt_cupti_enable_kinds_(api_enable, kind_enable, kind_disable, &g.whole_runtime)) !=
        CUPTI_SUCCESS) {
        st = unavailable(r);
        goto out;
    }
    if (g.whole_runtime)
        fprintf(stderr, "cbt: CUPTI: per-API runtime tracing refused; recording every runtime "
                        "API call (CUPTI_ACTIVITY_KIND_RUNTIME) for the external correlations\n");
    else
        fprintf(stderr, "cbt: CUPTI: recording the %u kernel-launch runtime APIs only "
                        "(cuptiActivityEnableRuntimeApi) for the external correlations\n",
                (unsigned)N_CBIDS);
    atomic_store(&g.next_flush, 0);
    atomic_store(&g.enabled, 1);
out:
    pthread_mutex_unlock(&g.en_mu);
    return st;
}

cbt_status cbt_cupti_disable(void)
{
    pthread_mutex_lock(&g.en_mu);
    cbt_status st = CBT_OK;
    if (!atomic_load(&g.enabled)) {
        st = CBT_ERR_NOT_FOUND;
    } else {
        /* completed records only: a forced flush would hand back kernels
         * still running, with no end time */
        (void)cuptiActivityFlushAll(CBT_CUPTI_FLUSH_FLAGS);
        cbt_cupti_disable_kinds_(api_enable, kind_disable, g.whole_runtime);
        g.whole_runtime = 0;
        atomic_store(&g.enabled, 0);
    }
    pthread_mutex_unlock(&g.en_mu);
    return st;
}

cbt_status cbt_cupti_flush(void)
{
    if (!atomic_load_explicit(&g.enabled, memory_order_acquire))
        return CBT_ERR_NOT_FOUND;
    /* not forced (CBT_CUPTI_FLUSH_FLAGS): completed records only */
    return cuptiActivityFlushAll(CBT_CUPTI_FLUSH_FLAGS) == CUPTI_SUCCESS ? CBT_OK
                                                                        : CBT_ERR_UNSUPPORTED;
}

int cbt_cupti_enabled_(void) { return atomic_load_explicit(&g.enabled, memory_order_relaxed); }

void cbt_cupti_periodic_(void)
{
    if (!atomic_load_explicit(&g.enabled, memory_order_acquire))
        return;
    /* harvester only: a plain load/store pair on the atomic is enough */
    uint64_t next = atomic_load_explicit(&g.next_flush, memory_order_relaxed);
    if (!cbt_cupti_flush_due_(&next, cbt_clock_unix_now()))
        return;
    atomic_store_explicit(&g.next_flush, next, memory_order_relaxed);
    (void)cuptiActivityFlushAll(CBT_CUPTI_FLUSH_FLAGS);
}

cbt_status cbt_cupti_launch_scope_begin(uint32_t launch_id)
{
    if (launch_id == 0 || !atomic_load_explicit(&g.enabled, memory_order_relaxed))
        return CBT_OK;
    if (tls_pushed)
        return CBT_ERR_ALREADY;
    if (cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0,
                                               launch_id) != CUPTI_SUCCESS)
        return CBT_ERR_UNSUPPORTED;
    tls_pushed = 1;
    return CBT_OK;
}

cbt_status cbt_cupti_launch_scope_end(void)
{
    if (!tls_pushed)
        return CBT_OK;
    uint64_t last = 0;
    tls_pushed = 0;
    return cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last) ==
                   CUPTI_SUCCESS
               ? CBT_OK
               : CBT_ERR_UNSUPPORTED;
}

cbt_status cbt_cupti_stats_get(cbt_cupti_stats *caller)
{
    cbt_status abi = cbt_abi_out_check_(caller);
    if (abi)
        return abi;
    cbt_cupti_stats full, *out = &full;
    memset(out, 0, sizeof *out);
    out->records = atomic_load_explicit(&g.records, memory_order_relaxed);
    out->spans = atomic_load_explicit(&g.spans, memory_order_relaxed);
    out->dropped = atomic_load_explicit(&g.dropped, memory_order_relaxed);
    out->unjoined = atomic_load_explicit(&g.unjoined, memory_order_relaxed);
    out->clock_checks = atomic_load_explicit(&g.clock_checks, memory_order_relaxed);
    out->clock_delta_ns = atomic_load_explicit(&g.clock_delta, memory_order_relaxed);
    out->enabled = atomic_load_explicit(&g.enabled, memory_order_relaxed);
    out->api_records = atomic_load_explicit(&g.api_records, memory_order_relaxed);
    out->bad_timestamps = atomic_load_explicit(&g.bad_timestamps, memory_order_relaxed);
    out->truncated = atomic_load_explicit(&g.truncated, memory_order_relaxed);
    cbt_abi_out_(caller, out, sizeof *out, CBT_CUPTI_STATS_VERSION);
    return CBT_OK;
}

/* ---- harvester ------------------------------------------------------------------------ */

static uint64_t cupti_to_unix(cbt_tracer *t, uint64_t c)
{
    double dticks = (double)(int64_t)(c - g.c0) / t->clock.ns_per_tick;
    int64_t ticks = (int64_t)g.tick0 + (int64_t)dticks;
    return cbt_clock_to_unix(&t->clock, ticks > 0 ? (uint64_t)ticks : 0);
}

static void emit(cbt_tracer *t, const krec *r, uint32_t launch_id, const cbt_span_ctx *parent,
                 uint64_t ring_start)
{
    uint64_t start = cupti_to_unix(t, r->start), end = cupti_to_unix(t, r->end);
    if (ring_start) {
        atomic_store_explicit(&g.clock_delta, (int64_t)(start - ring_start), memory_order_relaxed);
        atomic_fetch_add_explicit(&g.clock_checks, 1, memory_order_relaxed);
    }
    cbt_span *s = cbt_span_start(t, CBT_N_GPU_KERNEL, CBT_SPAN_KIND_INTERNAL,
                                 parent && cbt_span_ctx_valid(parent) ? parent : NULL, start);
    if (!s)
        return;
    cbt_span_set_str(s, k_name, r->name, strlen(r->name));
    for (int i = 0; i < 3; i++) {
        cbt_span_set_i64(s, k_grid[i], r->grid[i]);
        cbt_span_set_i64(s, k_block[i], r->block[i]);
    }
    cbt_span_set_i64(s, k_stream, r->stream);
    cbt_span_set_i64(s, k_regs, r->regs);
    cbt_span_set_i64(s, k_smem_s, r->smem_static);
    cbt_span_set_i64(s, k_smem_d, r->smem_dyn);
    cbt_span_set_i64(s, CBT_N_DEVICE, r->device);
    cbt_span_set_i64(s, k_corr, r->corr);
    if (launch_id)
        cbt_span_set_i64(s, CBT_N_LAUNCH_ID, launch_id);
    cbt_span_end(t, s, end >= start ? end : start);
    atomic_fetch_add_explicit(&g.spans, 1, memory_order_relaxed);
}

/* 1 when the record was turned into a span; 0 to wait (now == 0: never give up). */
static int try_kernel(cbt_tracer *t, const krec *r, uint64_t since, uint64_t now)
{
    uint32_t slot = r->corr % CORR_SLOTS;
    uint32_t id = h.map[slot].corr == r->corr ? h.map[slot].launch_id : 0;
    uint64_t waited = now > since ? now - since : 0;
    if (!id) {
        if (waited < HOLD_UNMAPPED_NS)
            return 0;
        emit(t, r, 0, NULL, 0);
        return 1;
    }
    cbt_span_ctx parent;
    uint64_t ring_start = 0;
    if (cbt_kspans_recent_(t, id, &parent, &ring_start)) {
        emit(t, r, id, &parent, ring_start);
        return 1;
    }
    if (waited < HOLD_UNKNOWN_NS)
        return 0;
    atomic_fetch_add_explicit(&g.unjoined, 1, memory_order_relaxed);
    emit(t, r, id, NULL, 0);
    return 1;
}

static void hold(cbt_tracer *t, const krec *r, uint64_t now)
{
    if (h.n_hold >= HOLD_MAX) { /* full: the oldest goes out as it is */
        const krec *o = &h.hold[0].r;
        try_kernel(t, o, 0, UINT64_MAX);
        h.hold[0] = h.hold[--h.n_hold];
    }
    h.hold[h.n_hold].r = *r;
    h.hold[h.n_hold].since = now;
    h.n_hold++;
}

void cbt_cupti_poll_(cbt_tracer *t)
{
    uint64_t now = cbt_clock_unix_now();
    for (int pass = 0; pass < 16; pass++) {
        uint32_t n = 0;
        pthread_mutex_lock(&g.mu);
        while (g.q && n < 256 && g.q_n) {
            h.batch[n++] = g.q[g.q_head];
            g.q_head = (g.q_head + 1) % Q_MAX;
            g.q_n--;
        }
        pthread_mutex_unlock(&g.mu);
        if (!n)
            break;
        /* correlations first: a batch often holds a kernel and its mapping */
        for (uint32_t i = 0; i < n; i++)
            if (h.batch[i].kind == REC_EXTCORR) {
                uint32_t slot = h.batch[i].corr % CORR_SLOTS;
                h.map[slot].corr = h.batch[i].corr;
                h.map[slot].launch_id = (uint32_t)h.batch[i].ext;
            }
        for (uint32_t i = 0; i < n; i++)
            if (h.batch[i].kind == REC_KERNEL && !try_kernel(t, &h.batch[i], now, now))
                hold(t, &h.batch[i], now);
    }
    for (uint32_t i = 0; i < h.n_hold;) {
        if (try_kernel(t, &h.hold[i].r, h.hold[i].since, now)) {
            h.hold[i] = h.hold[--h.n_hold];
            continue;
        }
        i++;
    }
}
