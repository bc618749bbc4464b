/* host/streams/stream_cuda.c — owns the CUDA stream backend: pooled timing events as
 * stream marks, resolved to unix ns by the harvester without synchronising.
 *
 * Publish (caller's thread): take an event from the stream's pool (a
 * lock-free stack, internal/cuda_marks.h: a load and a CAS; an empty pool
 * drops the mark and counts it), cudaEventRecord it on the user's stream,
 * and push the event onto the bus with the pool index. No lock of cbt's is
 * taken in steady state, and nothing waits for the device; only the first
 * mark under a new tracer attaches the stream to it (below).
 * Harvest (harvester thread): the bus item moves to this stream's pending
 * FIFO (the pool index, and its event as a record of its used bytes in
 * `pend_recs`, internal/record.h: CBT_STREAM_CUDA_MARK_CELLS cells, 512
 * bytes per pooled event; a mark that finds no room is dropped and
 * counted); each poll queries the FIFO's head with cudaEventQuery and, once it
 * has completed, stamps it with the reference time plus
 * cudaEventElapsedTime(reference, mark), dispatches it, and returns the
 * event to the pool. Marks of one stream complete in stream order, so the
 * FIFO never waits behind a mark that cannot finish first.
 *
 * The reference. Creation launches a one-thread kernel that writes
 * %globaltimer into a mapped word (cbt_cuda_stamp_event_), records the
 * reference event right after it, and enqueues a host function that stamps
 * the host's ticks when the stream gets past the reference; then it returns,
 * without waiting for any of it (the stream may be busy for seconds). The
 * harvester resolves the anchor when it first needs it: once cudaEventQuery
 * says the reference completed and the host function has run, it reads the
 * mapped word (the reference's device time) and the host stamp; until then
 * the marks behind it stay pending (a mark recorded after the reference
 * completes after it and after the host function, stream order). A mark's
 * device time is that reading plus cudaEventElapsedTime(reference, mark),
 * and the device ring's clock calibration (host/device/devclock.c) turns it
 * into unix ns, the same mapping the kernel spans use, so the two sources
 * agree. Without a calibrated device ring the host stamp is used (a host
 * function runs tens of microseconds after its stream reaches it, about
 * what a wake-up from cudaEventSynchronize took).
 *
 * Attaching. The first mark under a tracer generation registers the stream
 * with that tracer (cbt_tracer_add_stream_, under its streams_lock) and
 * forgets what an earlier tracer left pending, under the stream's `attach`
 * mutex; other threads marking at that moment wait for it. Once per stream
 * and tracer: never in steady state.
 *
 * Queue time. Each mark carries the host's ticks just before its
 * cudaEventRecord (CBT_EVF_ENQUEUED; the stream's ordinal and its device
 * with them). mark_done maps them to unix ns with the host clock map, and
 * the mark's own time goes device ns -> host ticks (the device ring's fitted
 * clock) -> unix ns through the same map: both ends are on the host's
 * timeline, so ts - enqueue_ns is how long the mark waited behind the
 * stream's earlier work, up to the device clock fit's error (clamped at 0
 * by the span builders, docs/spans.md "Queue time"). Without a fitted ring
 * the mark's time comes from the reference's host-function stamp, which
 * runs tens of microseconds late: queue times are that much too long.
 *
 * The bookkeeping that needs no CUDA (the free list, the FIFO's resolution
 * in stream order, ms -> ns, the anchor) is internal/cuda_marks.h's, tested
 * on the CPU; this file is the CUDA calls around it, tested against a double
 * of the runtime (tests/cuda_double/, docs/testing.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "internal/arrays.h"
#include "internal/clock.h"
#include "internal/cuda_marks.h"
#include "internal/ring_host.h"
#include "internal/stream_impl.h"

struct cbt_cuda_pool {
    pthread_mutex_t attach; /* attach() only: never on the steady-state path */
    cbt_evpool free;        /* lock-free: publishers take, anyone gives back */
    cudaEvent_t ev[CBT_STREAM_CUDA_POOL]; /* ev[i] is the taker's while i is taken */
    cudaEvent_t ref;
    unsigned long long *stamp; /* mapped host word: the stamp kernel's %globaltimer */
    /* host ticks when the stream passed the reference (its host function);
     * 0 until then */
    _Atomic uint64_t ref_passed;
    /* the harvester's: the anchor is known (ref, ref_passed and stamp read) */
    int anchored;
    cbt_cuda_anchor anchor;
};

static void pool_free(struct cbt_cuda_pool *p, uint32_t n_created)
{
    for (uint32_t i = 0; i < n_created; i++)
        cudaEventDestroy(p->ev[i]);
    if (p->ref)
        cudaEventDestroy(p->ref);
    if (p->stamp)
        cudaFreeHost(p->stamp);
    pthread_mutex_destroy(&p->attach);
    free(p);
}

/* The host function behind the reference (a CUDA thread; no CUDA calls). */
static void CUDART_CB ref_passed(void *arg)
{
    struct cbt_cuda_pool *p = arg;
    /* release: pairs with the acquire in anchor_ready */
    atomic_store_explicit(&p->ref_passed, cbt_clock_ticks(), memory_order_release);
}

cbt_status cbt_cuda_stream_init_(cbt_stream *s, void *cuda_stream)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        cudaGetLastError(); /* clear the sticky "no device" error */
        return CBT_ERR_NO_DEVICE;
    }
    struct cbt_cuda_pool *p = calloc(1, sizeof *p);
    s->pending = calloc(1, sizeof *s->pending);
    if (!p || !s->pending || cbt_rec_fifo_init(&s->pend_recs, CBT_STREAM_CUDA_MARK_CELLS) != CBT_OK) {
        free(p);
        free(s->pending);
        cbt_rec_fifo_free(&s->pend_recs); /* zeroed by a failed init: a no-op then */
        return CBT_ERR_NOMEM;
    }
    pthread_mutex_init(&p->attach, NULL);
    uint32_t made = 0;
    for (; made < CBT_STREAM_CUDA_POOL; made++) {
        if (cudaEventCreateWithFlags(&p->ev[made], cudaEventDefault) != cudaSuccess)
            break;
    }
    cudaStream_t cs = (cudaStream_t)cuda_stream;
    unsigned long long *stamp_dev = NULL;
    /* the kernel, the reference and the host function are queued, not waited for */
    if (made < CBT_STREAM_CUDA_POOL || cudaEventCreate(&p->ref) != cudaSuccess ||
        cudaHostAlloc((void **)&p->stamp, sizeof *p->stamp, cudaHostAllocMapped) != cudaSuccess ||
        cudaHostGetDevicePointer((void **)&stamp_dev, p->stamp, 0) != cudaSuccess ||
        cbt_cuda_stamp_event_(cs, p->ref, stamp_dev) != CBT_OK ||
        cudaLaunchHostFunc(cs, ref_passed, p) != cudaSuccess) {
        /* nothing was queued that still uses p: the host function is the
         * last call, and cudaFreeHost waits for a stamp kernel queued */
        cudaGetLastError();
        pool_free(p, made);
        free(s->pending);
        cbt_rec_fifo_free(&s->pend_recs);
        return CBT_ERR_CUDA;
    }
    cbt_evpool_init(&p->free, CBT_STREAM_CUDA_POOL);
    cbt_markq_init(s->pending);
    /* the device the stream's work runs on: from CUDA 12.8 the stream is
     * asked; before it, the device current now, which is the stream's only
     * when the caller registers it on the device it was made on (documented
     * in docs/spans.md); only named on its marks (cbt.device), so a failure
     * leaves device 0 */
    int dev = 0;
#if CUDART_VERSION >= 12080
    cudaError_t de = cudaStreamGetDevice(cs, &dev);
#else
    cudaError_t de = cudaGetDevice(&dev);
#endif
    if (de != cudaSuccess) {
        cudaGetLastError();
        dev = 0;
    }
    s->device = dev;
    s->pool = p;
    s->cuda_stream = cuda_stream;
    return CBT_OK;
}

static void pool_put(void *ctx, uint32_t idx)
{
    cbt_evpool_put(&((struct cbt_cuda_pool *)ctx)->free, idx);
}

/* The first mark under tracer `t`: let its harvester poll us. Marks left from
 * an earlier tracer (shut down meanwhile: one tracer at a time) are forgotten
 * and their events returned to the pool. Serialised by p->attach, held
 * across cbt_tracer_add_stream_ (t->streams_lock); nothing else takes p->attach. */
/* Forget the marks still pending (a shutdown gave up on them, or the stream
 * goes): their events' array references go with them. */
static void pend_recs_discard(cbt_rec_fifo *f)
{
    while (f->head != f->tail) {
        cbt_event ev;
        uint64_t unused;
        cbt_rec_fifo_oldest(f, &ev, &unused);
        if (ev.flags & CBT_EVF_ARRAYS)
            cbt_arrays_release_event_(&ev);
        cbt_rec_fifo_drop(f);
    }
}

static cbt_status attach(cbt_stream *s, cbt_tracer *t)
{
    struct cbt_cuda_pool *p = s->pool;
    pthread_mutex_lock(&p->attach);
    if (atomic_load_explicit(&s->tracer_gen, memory_order_relaxed) == t->gen) {
        pthread_mutex_unlock(&p->attach); /* another thread attached meanwhile */
        return CBT_OK;
    }
    /* the old tracer's harvester is gone, the new one does not poll us yet:
     * the FIFO is ours */
    cbt_markq_clear(s->pending, pool_put, p);
    pend_recs_discard(&s->pend_recs);
    atomic_store_explicit(&s->in_flight, 0, memory_order_relaxed);
    if (cbt_tracer_add_stream_(t, s) != CBT_OK) {
        pthread_mutex_unlock(&p->attach);
        atomic_fetch_add_explicit(&t->bus.dropped, 1, memory_order_relaxed);
        return CBT_ERR_FULL;
    }
    /* release: pairs with the acquire in cbt_cuda_stream_mark_ (the cleared
     * FIFO and in_flight come before any mark of this generation) */
    atomic_store_explicit(&s->tracer_gen, t->gen, memory_order_release);
    pthread_mutex_unlock(&p->attach);
    return CBT_OK;
}

cbt_status cbt_cuda_stream_mark_(cbt_stream *s, cbt_tracer *t, const cbt_event *ev)
{
    struct cbt_cuda_pool *p = s->pool;
    /* acquire: pairs with the release store in attach() */
    if (__builtin_expect(atomic_load_explicit(&s->tracer_gen, memory_order_acquire) != t->gen, 0)) {
        cbt_status st = attach(s, t);
        if (st != CBT_OK)
            return st;
    }
    uint32_t idx = 0;
    if (cbt_evpool_take(&p->free, &idx) != CBT_OK) {
        atomic_fetch_add_explicit(&t->bus.dropped, 1, memory_order_relaxed);
        return CBT_ERR_FULL;
    }
    /* the enqueue time: before the record, so the device cannot reach the
     * mark before it (one rdtsc; no system call) */
    uint64_t enqueued = cbt_clock_ticks();
    if (cudaEventRecord(p->ev[idx], (cudaStream_t)s->cuda_stream) != cudaSuccess) {
        cbt_evpool_put(&p->free, idx);
        return CBT_ERR_CUDA;
    }
    cbt_event e;
    cbt_event_copy_used_(&e, ev);
    e.flags |= CBT_EVF_FROM_STREAM | CBT_EVF_ENQUEUED;
    e.enqueue_ns = enqueued; /* ticks until mark_done maps them */
    e.stream = s->ordinal;
    e.device = s->device;
    if (e.pair == 0)
        e.pair = s->ordinal;
    atomic_fetch_add_explicit(&s->in_flight, 1, memory_order_relaxed);
    cbt_status st = cbt_tracer_push_(t, &e, cbt_clock_ticks_ordered(), s, (void *)(uintptr_t)(idx + 1));
    if (st != CBT_OK) {
        atomic_fetch_sub_explicit(&s->in_flight, 1, memory_order_relaxed);
        cbt_evpool_put(&p->free, idx); /* the recorded event simply completes unobserved */
    }
    return st;
}

void cbt_stream_defer_(struct cbt_stream *s, cbt_tracer *t, const cbt_bus_item *item)
{
    uint32_t idx = (uint32_t)((uintptr_t)item->mark - 1);
    if (cbt_rec_fifo_put(&s->pend_recs, &item->ev, 0) != CBT_OK) {
        if (item->ev.flags & CBT_EVF_ARRAYS)
            cbt_arrays_release_event_(&item->ev);
        /* no room for its event: the mark is dropped, said so, and its CUDA
         * event completes unobserved */
        atomic_fetch_add_explicit(&t->bus.dropped, 1, memory_order_relaxed);
        cbt_stream_mark_lost_(s, t); /* accepted with CBT_OK: cbt/stream.h */
        cbt_evpool_put(&s->pool->free, idx);
        /* release: pairs with the acquire in cbt_tracer_detach_stream_ */
        atomic_fetch_sub_explicit(&s->in_flight, 1, memory_order_release);
        return;
    }
    (void)cbt_markq_push(s->pending, idx); /* room: the pool bounds the marks */
}

/* The harvester's poll of one stream: what cbt_markq_resolve asks and tells. */
typedef struct poll_ctx {
    struct cbt_stream *s;
    cbt_tracer *t;
    float ms; /* of the mark just queried */
} poll_ctx;

/* The harvester: is the anchor known? Resolves it the first time the
 * reference has completed and its host function has run. PENDING until
 * then, FAILED when querying the reference fails (the marks behind it fail
 * too: their times could not be known). */
static cbt_mark_state anchor_ready(struct cbt_cuda_pool *p)
{
    if (p->anchored)
        return CBT_MARK_DONE;
    cudaError_t q = cudaEventQuery(p->ref);
    if (q == cudaErrorNotReady)
        return CBT_MARK_PENDING;
    if (q != cudaSuccess) {
        cudaGetLastError();
        return CBT_MARK_FAILED;
    }
    /* acquire: pairs with the release in ref_passed */
    uint64_t host = atomic_load_explicit(&p->ref_passed, memory_order_acquire);
    if (host == 0)
        return CBT_MARK_PENDING; /* the host function runs right after the reference */
    /* the stamp kernel wrote it before the reference completed */
    p->anchor.ref_dev = *(volatile unsigned long long *)p->stamp;
    p->anchor.ref_ticks = host;
    p->anchored = 1;
    return CBT_MARK_DONE;
}

static cbt_mark_state query_mark(void *ctx, uint32_t idx, uint64_t *dns)
{
    poll_ctx *c = ctx;
    struct cbt_cuda_pool *p = c->s->pool;
    cudaError_t q = cudaEventQuery(p->ev[idx]);
    if (q == cudaErrorNotReady)
        return CBT_MARK_PENDING;
    c->ms = 0.0f;
    if (q != cudaSuccess) {
        cudaGetLastError();
        return CBT_MARK_FAILED;
    }
    cbt_mark_state a = anchor_ready(p);
    if (a != CBT_MARK_DONE)
        return a;
    if (cudaEventElapsedTime(&c->ms, p->ref, p->ev[idx]) != cudaSuccess) {
        cudaGetLastError();
        return CBT_MARK_FAILED;
    }
    *dns = cbt_cuda_ms_to_ns(c->ms);
    return CBT_MARK_DONE;
}

static void mark_done(void *ctx, uint32_t idx, cbt_mark_state st, uint64_t dns)
{
    poll_ctx *c = ctx;
    struct cbt_stream *s = c->s;
    cbt_tracer *t = c->t;
    struct cbt_cuda_pool *p = s->pool;
    if (st == CBT_MARK_DONE) {
        cbt_event ev;
        uint64_t unused;
        cbt_rec_fifo_oldest(&s->pend_recs, &ev, &unused);
        const cbt_devclock *dev = t->cuda_ring ? &t->cuda_ring->clock : NULL;
        ev.ts = cbt_cuda_mark_unix(&p->anchor, dns, &t->clock, dev);
        if (ev.flags & CBT_EVF_ENQUEUED) /* always, for our own marks */
            ev.enqueue_ns = cbt_clock_to_unix(&t->clock, ev.enqueue_ns);
        cbt_dispatch_(t, &ev, 0);
        if (c->ms > CBT_CUDA_REANCHOR_MS) {
            /* re-anchor on this mark before the float's resolution decays;
             * the index is ours until the give-back below, whose release
             * publishes the swapped handle to its next taker */
            cudaEvent_t old = p->ref;
            p->ref = p->ev[idx];
            p->ev[idx] = old;
            cbt_cuda_anchor_move(&p->anchor, dns, t->clock.ns_per_tick);
        }
    } else { /* the query or elapsed time failed: accepted with CBT_OK, lost */
        atomic_fetch_add_explicit(&t->bus.dropped, 1, memory_order_relaxed);
        cbt_event ev;
        uint64_t unused;
        cbt_rec_fifo_oldest(&s->pend_recs, &ev, &unused);
        if (ev.flags & CBT_EVF_ARRAYS)
            cbt_arrays_release_event_(&ev);
        cbt_stream_mark_lost_(s, t);
    }
    cbt_evpool_put(&p->free, idx);
    cbt_rec_fifo_drop(&s->pend_recs);
    /* release: pairs with the acquire in cbt_tracer_detach_stream_ */
    atomic_fetch_sub_explicit(&s->in_flight, 1, memory_order_release);
}

uint32_t cbt_stream_poll_(struct cbt_stream *s, cbt_tracer *t)
{
    poll_ctx c = {s, t, 0.0f};
    return cbt_markq_resolve(s->pending, query_mark, mark_done, &c);
}

cbt_status cbt_cuda_stream_enqueue_(cbt_stream *s, cbt_stream_fn fn, void *arg)
{
    return cudaLaunchHostFunc((cudaStream_t)s->cuda_stream, fn, arg) == cudaSuccess ? CBT_OK
                                                                                     : CBT_ERR_CUDA;
}

cbt_status cbt_cuda_stream_sync_(cbt_stream *s)
{
    return cudaStreamSynchronize((cudaStream_t)s->cuda_stream) == cudaSuccess ? CBT_OK
                                                                               : CBT_ERR_CUDA;
}

int cbt_cuda_stream_fini_(cbt_stream *s)
{
    /* every mark, the reference and its host function have completed */
    cudaStreamSynchronize((cudaStream_t)s->cuda_stream);
    /* wait until the harvester has dispatched them (only ours: other
     * streams' work does not hold us up) */
    uint64_t gen = atomic_load_explicit(&s->tracer_gen, memory_order_relaxed);
    if (gen && !cbt_tracer_detach_stream_(gen, s, &s->in_flight)) {
        fprintf(stderr, "cbt: stream %u: marks still in flight at destroy; leaking the stream\n",
                s->ordinal);
        return 0;
    }
    pool_free(s->pool, CBT_STREAM_CUDA_POOL);
    free(s->pending);
    pend_recs_discard(&s->pend_recs);
    cbt_rec_fifo_free(&s->pend_recs);
    return 1;
}
