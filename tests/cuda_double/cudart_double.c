/* tests/cuda_double/cudart_double.c — owns the double of the CUDA runtime
 * calls cbt's host code makes (cudadbl.h says what it proves and what not).
 *
 * Events: cudaEventRecord makes an event pending and gives the recording a
 * number (cudadbl_records); it completes only when the test calls
 * cudadbl_complete(number, ms). cudaEventSynchronize waits for that, as the
 * runtime's waits for the device (for at most CUDADBL_SYNC_CAP_MS, then
 * cudaErrorNotReady, so a test of code that should not have waited fails
 * instead of hanging); it and cudaStreamSynchronize are counted
 * (cudadbl_syncs). cudaEventElapsedTime is end.ms - start.ms, and
 * cudaErrorNotReady while either is pending, as the runtime's.
 * Memory: host memory from malloc, filled with 0xA5 (the runtime does not
 * zero it either), each allocation remembered with its kind, so a free of
 * the wrong kind or a copy outside device memory is refused and counted
 * (cudadbl_misuse). Streams: a stream's "kernels" are host threads
 * (launch_double.c); cudaStreamSynchronize joins them. A host function runs
 * at once: the double has no queued device work for it to wait behind.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "cudadbl.h"
#include "cudadbl_internal.h"

#define MAX_RECORDS 16384u
#define MAX_ALLOCS 256u

struct CUevent_st {
    int pending;     /* recorded, not complete */
    int recorded;    /* ever recorded */
    int fail;        /* the query fails */
    float ms;        /* device time of completion */
    uint32_t rec_no; /* its latest recording */
};

typedef struct alloc {
    char *p;
    size_t n;
    int kind; /* 1 device, 2 host (pinned / mapped) */
} alloc;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t done; /* an event completed or failed */
    int devices;
    uint32_t syncs;
    struct CUevent_st *rec[MAX_RECORDS];
    uint32_t n_rec;
    alloc allocs[MAX_ALLOCS];
    uint32_t n_live;
    int fail_alloc_in;
    uint32_t misuse;
    cudaError_t last;
} d = {.mu = PTHREAD_MUTEX_INITIALIZER, .done = PTHREAD_COND_INITIALIZER, .devices = 1,
       .fail_alloc_in = -1};

static cudaError_t err(cudaError_t e) /* under d.mu */
{
    if (e != cudaSuccess)
        d.last = e;
    return e;
}

void cudadbl_reset(void)
{
    pthread_mutex_lock(&d.mu);
    d.devices = 1;
    d.syncs = 0;
    d.n_rec = 0;
    d.fail_alloc_in = -1;
    d.misuse = 0;
    d.last = cudaSuccess;
    pthread_mutex_unlock(&d.mu);
    cudadbl_launch_reset_();
}

void cudadbl_set_devices(int n)
{
    pthread_mutex_lock(&d.mu);
    d.devices = n;
    pthread_mutex_unlock(&d.mu);
}

uint32_t cudadbl_syncs(void)
{
    pthread_mutex_lock(&d.mu);
    uint32_t n = d.syncs;
    pthread_mutex_unlock(&d.mu);
    return n;
}

uint32_t cudadbl_records(void)
{
    pthread_mutex_lock(&d.mu);
    uint32_t n = d.n_rec;
    pthread_mutex_unlock(&d.mu);
    return n;
}

static struct CUevent_st *recording(uint32_t rec) /* under d.mu */
{
    if (rec >= d.n_rec || !d.rec[rec] || d.rec[rec]->rec_no != rec)
        return NULL;
    return d.rec[rec];
}

int cudadbl_complete(uint32_t rec, float ms)
{
    pthread_mutex_lock(&d.mu);
    struct CUevent_st *e = recording(rec);
    if (e) {
        e->pending = 0;
        e->ms = ms;
        pthread_cond_broadcast(&d.done);
    }
    pthread_mutex_unlock(&d.mu);
    return e ? 0 : -1;
}

int cudadbl_fail(uint32_t rec)
{
    pthread_mutex_lock(&d.mu);
    struct CUevent_st *e = recording(rec);
    if (e) {
        e->fail = 1;
        pthread_cond_broadcast(&d.done);
    }
    pthread_mutex_unlock(&d.mu);
    return e ? 0 : -1;
}

uint32_t cudadbl_live_allocs(void)
{
    pthread_mutex_lock(&d.mu);
    uint32_t n = d.n_live;
    pthread_mutex_unlock(&d.mu);
    return n;
}

void cudadbl_fail_alloc_in(int k)
{
    pthread_mutex_lock(&d.mu);
    d.fail_alloc_in = k;
    pthread_mutex_unlock(&d.mu);
}

uint32_t cudadbl_misuse(void)
{
    pthread_mutex_lock(&d.mu);
    uint32_t n = d.misuse;
    pthread_mutex_unlock(&d.mu);
    return n;
}

/* ---- devices and errors ------------------------------------------------------------- */

cudaError_t cudaGetDeviceCount(int *count)
{
    pthread_mutex_lock(&d.mu);
    *count = d.devices;
    cudaError_t e = err(d.devices > 0 ? cudaSuccess : cudaErrorNoDevice);
    pthread_mutex_unlock(&d.mu);
    return e;
}

cudaError_t cudaGetDevice(int *device)
{
    *device = 0;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    pthread_mutex_lock(&d.mu);
    cudaError_t e = err(device >= 0 && device < d.devices ? cudaSuccess : cudaErrorInvalidDevice);
    pthread_mutex_unlock(&d.mu);
    return e;
}

cudaError_t cudaGetLastError(void)
{
    pthread_mutex_lock(&d.mu);
    cudaError_t e = d.last;
    d.last = cudaSuccess;
    pthread_mutex_unlock(&d.mu);
    return e;
}

/* ---- events ------------------------------------------------------------------------- */

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    (void)flags;
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e) {
        pthread_mutex_lock(&d.mu);
        cudaError_t r = err(cudaErrorMemoryAllocation);
        pthread_mutex_unlock(&d.mu);
        return r;
    }
    *event = e;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) { return cudaEventCreateWithFlags(event, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    pthread_mutex_lock(&d.mu);
    for (uint32_t i = 0; i < d.n_rec; i++) /* its recordings can no longer be completed */
        if (d.rec[i] == event)
            d.rec[i] = NULL;
    pthread_mutex_unlock(&d.mu);
    free(event);
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    (void)stream;
    pthread_mutex_lock(&d.mu);
    cudaError_t e = cudaSuccess;
    if (!event) {
        e = err(cudaErrorInvalidResourceHandle);
    } else if (d.n_rec >= MAX_RECORDS) {
        e = err(cudaErrorMemoryAllocation); /* bounded: the test records too much */
    } else {
        event->rec_no = d.n_rec;
        d.rec[d.n_rec++] = event;
        event->pending = 1;
        event->recorded = 1;
        event->fail = 0;
    }
    pthread_mutex_unlock(&d.mu);
    return e;
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
    pthread_mutex_lock(&d.mu);
    cudaError_t e = !event          ? err(cudaErrorInvalidResourceHandle)
                    : event->fail    ? err(cudaErrorLaunchFailure)
                    : event->pending ? cudaErrorNotReady /* not sticky, as the runtime's */
                                     : cudaSuccess;
    pthread_mutex_unlock(&d.mu);
    return e;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += CUDADBL_SYNC_CAP_MS / 1000;
    dl.tv_nsec += (long)(CUDADBL_SYNC_CAP_MS % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&d.mu);
    d.syncs++;
    cudaError_t e = cudaSuccess;
    if (!event) {
        e = err(cudaErrorInvalidResourceHandle);
    } else {
        /* until the test completes (or fails) it, as the device would */
        while (event->pending && !event->fail &&
               pthread_cond_timedwait(&d.done, &d.mu, &dl) != ETIMEDOUT)
            ;
        if (event->fail)
            e = err(cudaErrorLaunchFailure);
        else if (event->pending)
            e = cudaErrorNotReady; /* the cap: a real sync would still be waiting */
    }
    pthread_mutex_unlock(&d.mu);
    return e;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    pthread_mutex_lock(&d.mu);
    cudaError_t e = cudaSuccess;
    if (!start || !end || !start->recorded || !end->recorded)
        e = err(cudaErrorInvalidResourceHandle);
    else if (start->pending || end->pending)
        e = err(cudaErrorNotReady);
    else
        *ms = end->ms - start->ms;
    pthread_mutex_unlock(&d.mu);
    return e;
}

/* ---- streams ------------------------------------------------------------------------ */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags)
{
    (void)flags;
    cudaStream_t s = cudadbl_stream_new_();
    if (!s) {
        pthread_mutex_lock(&d.mu);
        cudaError_t r = err(cudaErrorMemoryAllocation);
        pthread_mutex_unlock(&d.mu);
        return r;
    }
    *stream = s;
    return cudaSuccess;
}

/* One device: every stream is on device 0. */
cudaError_t cudaStreamGetDevice(cudaStream_t stream, int *device)
{
    (void)stream;
    *device = 0;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    cudadbl_stream_join_(stream);
    cudadbl_stream_free_(stream);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    pthread_mutex_lock(&d.mu);
    d.syncs++;
    pthread_mutex_unlock(&d.mu);
    cudadbl_stream_join_(stream);
    return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *user)
{
    (void)stream;
    fn(user);
    return cudaSuccess;
}

/* ---- memory ------------------------------------------------------------------------- */

static cudaError_t do_alloc(void **out, size_t n, int kind)
{
    pthread_mutex_lock(&d.mu);
    cudaError_t e = cudaSuccess;
    int fail = d.fail_alloc_in == 0;
    if (d.fail_alloc_in >= 0)
        d.fail_alloc_in--;
    char *p = NULL;
    if (fail || d.n_live >= MAX_ALLOCS || !(p = malloc(n ? n : 1))) {
        e = err(cudaErrorMemoryAllocation);
    } else {
        memset(p, 0xA5, n);
        d.allocs[d.n_live++] = (alloc){p, n, kind};
        *out = p;
    }
    pthread_mutex_unlock(&d.mu);
    return e;
}

/* the allocation holding [p, p + n) (n 0: holding p), of `kind` (0: any);
 * under d.mu. A pointer one past the end of a block is not in it: the next
 * block may start there. */
static alloc *find(const void *p, size_t n, int kind)
{
    const char *c = p;
    for (uint32_t i = 0; i < d.n_live; i++) {
        alloc *a = &d.allocs[i];
        if (c >= a->p && c < a->p + (a->n ? a->n : 1) && c + n <= a->p + a->n + !a->n &&
            (!kind || a->kind == kind))
            return a;
    }
    return NULL;
}

/* the allocation starting at p, of `kind`; under d.mu */
static alloc *find_start(const void *p, int kind)
{
    for (uint32_t i = 0; i < d.n_live; i++)
        if (d.allocs[i].p == p && d.allocs[i].kind == kind)
            return &d.allocs[i];
    return NULL;
}

static cudaError_t do_free(void *p, int kind)
{
    if (!p)
        return cudaSuccess;
    pthread_mutex_lock(&d.mu);
    cudaError_t e = cudaSuccess;
    alloc *a = find_start(p, kind);
    if (!a) {
        d.misuse++;
        e = err(cudaErrorInvalidValue);
    } else {
        free(a->p);
        *a = d.allocs[--d.n_live];
    }
    pthread_mutex_unlock(&d.mu);
    return e;
}

cudaError_t cudaMalloc(void **ptr, size_t n) { return do_alloc(ptr, n, 1); }
cudaError_t cudaMallocHost(void **ptr, size_t n) { return do_alloc(ptr, n, 2); }
cudaError_t cudaHostAlloc(void **ptr, size_t n, unsigned int flags)
{
    (void)flags;
    return do_alloc(ptr, n, 2);
}
cudaError_t cudaFree(void *p) { return do_free(p, 1); }
cudaError_t cudaFreeHost(void *p) { return do_free(p, 2); }

cudaError_t cudaHostGetDevicePointer(void **dev, void *host, unsigned int flags)
{
    pthread_mutex_lock(&d.mu);
    cudaError_t e = cudaSuccess;
    if (flags != 0 || !find(host, 0, 2)) {
        d.misuse++;
        e = err(cudaErrorInvalidValue);
    } else {
        *dev = host; /* one address space: the device sees the host's pages */
    }
    pthread_mutex_unlock(&d.mu);
    return e;
}

cudaError_t cudaMemset(void *p, int v, size_t n)
{
    pthread_mutex_lock(&d.mu);
    cudaError_t e = cudaSuccess;
    if (!find(p, n, 1)) {
        d.misuse++;
        e = err(cudaErrorInvalidValue);
    } else {
        memset(p, v, n);
    }
    pthread_mutex_unlock(&d.mu);
    return e;
}

static cudaError_t copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    pthread_mutex_lock(&d.mu);
    cudaError_t e = cudaSuccess;
    int ok = kind == cudaMemcpyHostToDevice   ? find(dst, n, 1) != NULL
             : kind == cudaMemcpyDeviceToHost ? find(src, n, 1) != NULL
             : kind == cudaMemcpyDeviceToDevice ? find(src, n, 1) && find(dst, n, 1)
                                                : 1;
    if (!ok) {
        d.misuse++;
        e = err(cudaErrorInvalidValue);
    } else if (n) {
        memcpy(dst, src, n);
    }
    pthread_mutex_unlock(&d.mu);
    return e;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    return copy(dst, src, n, kind);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    (void)stream; /* done at once: a later cudaStreamSynchronize finds it finished */
    return copy(dst, src, n, kind);
}
