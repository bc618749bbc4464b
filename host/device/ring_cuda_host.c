/* host/device/ring_cuda_host.c — owns the host side of the CUDA placements of the
 * device ring: memory, the device-placement copy-out, the host half of the
 * %globaltimer clock probe, the reference stamp of CUDA streams (queued, never
 * waited for), and the frees.
 * The kernels are in host/device/ring_cuda.cu, reached only through
 * internal/ring_cuda.h, so this file is plain C: built into libcbt with the
 * CUDA runtime, and into the CUDA-double tests against tests/cuda_double/.
 *
 * Memory: records in pinned host memory mapped into the device (MAPPED) or in
 * device memory with a pinned staging copy (DEVICE); the claim counter and
 * fold slots always in device memory (their atomics stay on the GPU); the
 * cbt_ring_dev the kernels dereference in device memory too.
 *
 * Clock probe: the host writes ping = k into mapped memory between two tick
 * reads and waits (50 ms at most) for the kernel's reply (k, %globaltimer).
 *
 * Freeing: cudaFree and cudaFreeHost wait until the device has finished all
 * its pending work. When shutdown gave up on pending marks (a kernel still
 * running, perhaps for seconds), the frees go to a detached thread instead
 * (cbt_ring_free_path_): it waits for the ring's own stream, frees
 * everything and exits. An atexit handler waits up to 2 s for such threads,
 * so a process that exits soon after does not tear the CUDA runtime down
 * under one of them.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "internal/clock.h"
#include "internal/ring_host.h"
#include "internal/ring_cuda.h"
#include "internal/tracer.h"

typedef struct ring_cuda {
    int device;
    cudaStream_t stream;            /* probes and device-placement copies */
    cbt_ring_dev *d_view;           /* the struct kernels read */
    cbt_ring_rec *recs_dev;         /* what producers write (device or mapped pointer) */
    cbt_ring_rec *recs_host;        /* mapped host pointer, or the staging copy */
    unsigned long long *claim;      /* device */
    cbt_fold_slot *fold;            /* device */
    unsigned long long *claim_host; /* pinned, DEVICE placement copy-out */
    volatile unsigned int *ping;    /* mapped host memory */
    cbt_ring_pong *pong;            /* mapped host memory */
    unsigned int *ping_dev;
    cbt_ring_pong *pong_dev;
    unsigned int probe_seq;
} ring_cuda;

static void free_all(ring_cuda *c, int placement)
{
    if (!c)
        return;
    if (c->d_view)
        cudaFree(c->d_view);
    if (c->claim)
        cudaFree(c->claim);
    if (c->fold)
        cudaFree(c->fold);
    if (placement != CBT_RING_MAPPED && c->recs_dev)
        cudaFree(c->recs_dev); /* MAPPED: the device pointer of recs_host */
    if (c->recs_host)
        cudaFreeHost(c->recs_host);
    if (c->claim_host)
        cudaFreeHost(c->claim_host);
    if (c->ping)
        cudaFreeHost((void *)c->ping);
    if (c->pong)
        cudaFreeHost(c->pong);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    free(c);
}

/* ---- detached frees ------------------------------------------------------------------ */

#define EXIT_WAIT_MS 2000 /* how long exit waits for detached frees */

typedef struct deferred_free {
    ring_cuda *c;
    int placement;
} deferred_free;

/* process-wide: the detached threads outlive the tracer that started them */
static pthread_mutex_t g_df_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_df_cv = PTHREAD_COND_INITIALIZER;
static unsigned int g_df_running; /* under g_df_mu */
static pthread_once_t g_df_once = PTHREAD_ONCE_INIT;

static void deferred_wait_at_exit(void)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += EXIT_WAIT_MS / 1000;
    dl.tv_nsec += (long)(EXIT_WAIT_MS % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&g_df_mu);
    while (g_df_running && pthread_cond_timedwait(&g_df_cv, &g_df_mu, &dl) == 0)
        ;
    pthread_mutex_unlock(&g_df_mu);
}

static void deferred_register(void) { atexit(deferred_wait_at_exit); }

static void *deferred_main(void *arg)
{
    deferred_free *d = arg;
    cudaSetDevice(d->c->device);
    cudaStreamSynchronize(d->c->stream); /* the probe kernel has seen the stop */
    free_all(d->c, d->placement);        /* waits for the device: that is why we are here */
    cudaGetLastError();
    free(d);
    pthread_mutex_lock(&g_df_mu);
    g_df_running--;
    pthread_cond_broadcast(&g_df_cv);
    pthread_mutex_unlock(&g_df_mu);
    return NULL;
}

/* true when a detached thread took the frees over. */
static bool free_detached(ring_cuda *c, int placement)
{
    deferred_free *d = malloc(sizeof *d);
    if (!d)
        return false;
    d->c = c;
    d->placement = placement;
    pthread_once(&g_df_once, deferred_register);
    pthread_attr_t at;
    if (pthread_attr_init(&at) != 0) {
        free(d);
        return false;
    }
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_mutex_lock(&g_df_mu);
    g_df_running++;
    pthread_mutex_unlock(&g_df_mu);
    pthread_t th;
    int rc = pthread_create(&th, &at, deferred_main, d);
    pthread_attr_destroy(&at);
    if (rc != 0) {
        pthread_mutex_lock(&g_df_mu);
        g_df_running--;
        pthread_mutex_unlock(&g_df_mu);
        free(d);
        return false;
    }
    return true;
}

/* ---- create / destroy ---------------------------------------------------------------- */

cbt_status cbt_ring_create_cuda(uint32_t capacity, cbt_ring_placement placement,
                                double host_ns_per_tick, cbt_ring **out)
{
    if (!out || capacity < 2 || (capacity & (capacity - 1)) ||
        (placement != CBT_RING_MAPPED && placement != CBT_RING_DEVICE))
        return CBT_ERR_INVAL;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        cudaGetLastError();
        return CBT_ERR_NO_DEVICE;
    }
    ring_cuda *c = calloc(1, sizeof *c);
    cbt_ring *r = calloc(1, sizeof *r);
    if (!c || !r) {
        free(c);
        free(r);
        return CBT_ERR_NOMEM;
    }
    size_t bytes = (size_t)capacity * sizeof(cbt_ring_rec);
    bool ok = cudaGetDevice(&c->device) == cudaSuccess &&
              cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking) == cudaSuccess &&
              cudaMalloc((void **)&c->claim, sizeof *c->claim) == cudaSuccess &&
              cudaMalloc((void **)&c->fold, CBT_FOLD_SLOTS * sizeof(cbt_fold_slot)) ==
                  cudaSuccess &&
              cudaMemset(c->claim, 0, sizeof *c->claim) == cudaSuccess &&
              cudaMemset(c->fold, 0, CBT_FOLD_SLOTS * sizeof(cbt_fold_slot)) == cudaSuccess;
    if (ok && placement == CBT_RING_MAPPED) {
        ok = cudaHostAlloc((void **)&c->recs_host, bytes,
                           cudaHostAllocMapped | cudaHostAllocPortable) == cudaSuccess &&
             cudaHostGetDevicePointer((void **)&c->recs_dev, c->recs_host, 0) == cudaSuccess;
        if (ok)
            memset(c->recs_host, 0, bytes);
    } else if (ok) {
        ok = cudaMalloc((void **)&c->recs_dev, bytes) == cudaSuccess &&
             cudaMemset(c->recs_dev, 0, bytes) == cudaSuccess &&
             cudaMallocHost((void **)&c->recs_host, bytes) == cudaSuccess &&
             cudaMallocHost((void **)&c->claim_host, sizeof *c->claim_host) == cudaSuccess;
        if (ok)
            memset(c->recs_host, 0, bytes);
    }
    void *ping = NULL, *pong = NULL;
    ok = ok && cudaHostAlloc(&ping, sizeof(unsigned int), cudaHostAllocMapped) == cudaSuccess &&
         cudaHostAlloc(&pong, sizeof(cbt_ring_pong), cudaHostAllocMapped) == cudaSuccess;
    c->ping = ping;
    c->pong = pong;
    ok = ok && cudaHostGetDevicePointer((void **)&c->ping_dev, ping, 0) == cudaSuccess &&
         cudaHostGetDevicePointer((void **)&c->pong_dev, pong, 0) == cudaSuccess;
    cbt_ring_dev view;
    view.recs = c->recs_dev;
    view.claim = c->claim;
    view.fold = c->fold;
    view.mask = capacity - 1;
    view.reserved = 0;
    ok = ok && cudaMalloc((void **)&c->d_view, sizeof view) == cudaSuccess &&
         cudaMemcpy(c->d_view, &view, sizeof view, cudaMemcpyHostToDevice) == cudaSuccess;
    if (!ok) {
        cudaGetLastError();
        free_all(c, placement);
        free(r);
        return CBT_ERR_CUDA;
    }
    *c->ping = 0;
    c->pong->seq = 0;
    r->placement = placement;
    r->capacity = capacity;
    r->view = c->d_view;
    r->recs = c->recs_host;
    r->cuda = c;
    cbt_devclock_init(&r->clock, host_ns_per_tick);
    cbt_ring_calibrate(r, 32);
    *out = r;
    return CBT_OK;
}

void cbt_ring_cuda_destroy_(cbt_ring *r, int detached)
{
    ring_cuda *c = r->cuda;
    r->cuda = NULL;
    if (!c)
        return;
    /* a probe kernel still running returns at its next look */
    __atomic_store_n(c->ping, CBT_RING_PING_STOP, __ATOMIC_RELAXED);
    if (detached && free_detached(c, r->placement))
        return;
    /* here (also when no thread could start: then shutdown waits for the device) */
    cudaStreamSynchronize(c->stream);
    free_all(c, r->placement);
}

/* ---- harvesting ---------------------------------------------------------------------- */

/* DEVICE placement: copy the claim counter, then the unread window of
 * records (at their own slot indices) into the staging copy, then read it
 * with the same consumer protocol. */
uint32_t cbt_ring_cuda_poll_(cbt_ring *r, cbt_ring_rec *out, uint32_t max)
{
    ring_cuda *c = r->cuda;
    if (cudaMemcpyAsync(c->claim_host, c->claim, sizeof *c->claim, cudaMemcpyDeviceToHost,
                        c->stream) != cudaSuccess ||
        cudaStreamSynchronize(c->stream) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    unsigned long long claimed = *c->claim_host;
    if (claimed <= r->next)
        return 0;
    unsigned long long from = r->next;
    if (claimed - from > r->capacity)
        from = claimed - r->capacity; /* older positions are overwritten: read counts them */
    uint32_t mask = r->capacity - 1;
    unsigned long long count = claimed - from;
    uint32_t first = (uint32_t)(from & mask);
    uint32_t run1 = (uint32_t)(count < (unsigned long long)(r->capacity - first)
                                   ? count
                                   : r->capacity - first);
    cudaMemcpyAsync(c->recs_host + first, c->recs_dev + first, run1 * sizeof(cbt_ring_rec),
                    cudaMemcpyDeviceToHost, c->stream);
    if (count > run1)
        cudaMemcpyAsync(c->recs_host, c->recs_dev, (count - run1) * sizeof(cbt_ring_rec),
                        cudaMemcpyDeviceToHost, c->stream);
    if (cudaStreamSynchronize(c->stream) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return cbt_ring_read_(r, c->recs_host, out, max);
}

/* ---- the clock probe ----------------------------------------------------------------- */

uint32_t cbt_ring_cuda_probe_(void *ctx, uint32_t n, uint64_t *dev, uint64_t *lo, uint64_t *hi)
{
    cbt_ring *r = ctx;
    ring_cuda *c = r->cuda;
    unsigned int first = c->probe_seq + 1;
    if (first + n >= CBT_RING_PING_STOP)
        first = 1;
    if (cbt_ring_cuda_launch_probe_(c->stream, c->ping_dev, c->pong_dev, first, n) != CBT_OK)
        return 0;
    uint32_t got = 0;
    for (uint32_t i = 0; i < n; i++) {
        unsigned int k = first + i;
        uint64_t t_lo = cbt_clock_ticks_before_loads();
        /* release: our reads of the last reply come before this ping */
        __atomic_store_n(c->ping, k, __ATOMIC_RELEASE);
        uint64_t deadline = cbt_clock_unix_now() + 50000000ull; /* 50 ms */
        /* acquire: pairs with the kernel's system fence between writing t and
         * seq, so the t read below is the one this k answered with */
        while (__atomic_load_n(&c->pong->seq, __ATOMIC_ACQUIRE) != k) {
            if (cbt_clock_unix_now() > deadline) {
                __atomic_store_n(c->ping, CBT_RING_PING_STOP, __ATOMIC_RELAXED); /* it stops; no wait */
                c->probe_seq = k;
                return got;
            }
        }
        uint64_t t_hi = cbt_clock_ticks_ordered();
        dev[got] = __atomic_load_n(&c->pong->t, __ATOMIC_RELAXED);
        lo[got] = t_lo;
        hi[got] = t_hi;
        got++;
    }
    c->probe_seq = first + n - 1;
    return got;
}

/* ---- the reference stamp of a CUDA stream -------------------------------------------- */

cbt_status cbt_cuda_stamp_event_(void *stream, void *event, unsigned long long *stamp_dev)
{
    cudaStream_t s = stream;
    /* queued only: the caller reads the word after the event completes */
    if (cbt_ring_cuda_launch_stamp_(s, stamp_dev) != CBT_OK ||
        cudaEventRecord((cudaEvent_t)event, s) != cudaSuccess) {
        cudaGetLastError();
        return CBT_ERR_CUDA;
    }
    return CBT_OK;
}

void cbt_ring_cuda_bind_(cbt_ring *r)
{
    ring_cuda *c = r->cuda;
    if (c)
        cudaSetDevice(c->device);
}
