/* host/streams/stream_cuda.c — owns the CUDA stream backend: pooled timing events as
 * stream marks, resolved to unix ns by the harvester without synchronising.
 *
 * Publish (caller's thread): take an event from the stream's pool (a mutex
 * and a pop; an empty pool drops the mark and counts it), cudaEventRecord it
 * on the user's stream, and push the event onto the bus with the pool index.
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
 * The reference event is recorded once, at creation, right after a one-thread
 * kernel that reads %globaltimer (cbt_cuda_stamp_event_): so a mark's device
 * time is that reading plus cudaEventElapsedTime(reference, mark), and the
 * device ring's clock calibration (host/device/devclock.c) turns it into unix ns,
 * the same mapping the kernel spans use, so the two sources agree. Without a
 * calibrated device ring the reference's host completion stamp is used.
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

#include "internal/cuda_marks.h"
#include "internal/ring_host.h"
#include "internal/stream_impl.h"

struct cbt_cuda_pool {
    pthread_mutex_t lock;
    pthread_mutex_t attach; /* attach(): before lock, never under it */
    cudaEvent_t ev[CBT_STREAM_CUDA_POOL];
    cbt_evpool free; /* under lock */
    cudaEvent_t ref;
    cbt_cuda_anchor anchor; /* the reference's host and device stamps (harvester) */
};

static void pool_free(struct cbt_cuda_pool *p, uint32_t n_created)
{
    for (uint32_t i = 0; i < n_created; i++)
        cudaEventDestroy(p->ev[i]);
    if (p->ref)
        cudaEventDestroy(p->ref);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->attach);
    free(p);
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
    pthread_mutex_init(&p->lock, NULL);
    pthread_mutex_init(&p->attach, NULL);
    uint32_t made = 0;
    for (; made < CBT_STREAM_CUDA_POOL; made++) {
        if (cudaEventCreateWithFlags(&p->ev[made], cudaEventDefault) != cudaSuccess)
            break;
    }
    cudaStream_t cs = (cudaStream_t)cuda_stream;
    if (made < CBT_STREAM_CUDA_POOL || cudaEventCreate(&p->ref) != cudaSuccess ||
        cbt_cuda_stamp_event_(cs, p->ref, &p->anchor.ref_dev) != CBT_OK) {
        pool_free(p, made);
        free(s->pending);
        cbt_rec_fifo_free(&s->pend_recs);
        return CBT_ERR_CUDA;
    }
    p->anchor.ref_ticks = cbt_clock_ticks();
    cbt_evpool_init(&p->free, CBT_STREAM_CUDA_POOL);
    cbt_markq_init(s->pending);
    s->pool = p;
    s->cuda_stream = cuda_stream;
    return CBT_OK;
}

static void pool_put(struct cbt_cuda_pool *p, uint32_t idx)
{
    pthread_mutex_lock(&p->lock);
    cbt_evpool_put(&p->free, idx);
    pthread_mutex_unlock(&p->lock);
}

/* under p->lock */
static void pool_put_locked(void *ctx, uint32_t idx)
{
    cbt_evpool_put(&((struct cbt_cuda_pool *)ctx)->free, idx);
}

/* The first mark under tracer `t`: let its harvester poll us. Marks left from
 * an earlier tracer (shut down meanwhile: one tracer at a time) are forgotten
 * and their events returned to the pool. Serialised by p->attach, which is
 * held across cbt_tracer_add_stream_ (t->lock) while p->lock is not. */
static cbt_status attach(cbt_stream *s, cbt_tracer *t)
{
    struct cbt_cuda_pool *p = s->pool;
    pthread_mutex_lock(&p->attach);
    pthread_mutex_lock(&p->lock);
    if (s->tracer_gen == t->gen) { /* another thread attached meanwhile */
        pthread_mutex_unlock(&p->lock);
        pthread_mutex_unlock(&p->attach);
        return CBT_OK;
    }
    cbt_markq_clear(s->pending, pool_put_locked, p);
    cbt_rec_fifo_clear(&s->pend_recs);
    atomic_store_explicit(&s->in_flight, 0, memory_order_relaxed);
    pthread_mutex_unlock(&p->lock);
    if (cbt_tracer_add_stream_(t, s) != CBT_OK) {
        pthread_mutex_unlock(&p->attach);
        atomic_fetch_add_explicit(&t->bus.dropped, 1, memory_order_relaxed);
        return CBT_ERR_FULL;
    }
    pthread_mutex_lock(&p->lock);
    s->tracer_gen = t->gen;
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_unlock(&p->attach);
    return CBT_OK;
}

cbt_status cbt_cuda_stream_mark_(cbt_stream *s, cbt_tracer *t, const cbt_event *ev)
{
    struct cbt_cuda_pool *p = s->pool;
    pthread_mutex_lock(&p->lock);
    if (s->tracer_gen != t->gen) {
        /* never t->lock under p->lock: the harvester holds t->lock while it
         * returns events to the pool */
        pthread_mutex_unlock(&p->lock);
        cbt_status st = attach(s, t);
        if (st != CBT_OK)
            return st;
        pthread_mutex_lock(&p->lock);
    }
    uint32_t idx = 0;
    if (cbt_evpool_take(&p->free, &idx) != CBT_OK) {
        pthread_mutex_unlock(&p->lock);
        atomic_fetch_add_explicit(&t->bus.dropped, 1, memory_order_relaxed);
        return CBT_ERR_FULL;
    }
    pthread_mutex_unlock(&p->lock);
    if (cudaEventRecord(p->ev[idx], (cudaStream_t)s->cuda_stream) != cudaSuccess) {
        pool_put(p, idx);
        return CBT_ERR_CUDA;
    }
    cbt_event e;
    cbt_event_copy_used_(&e, ev);
    e.flags |= CBT_EVF_FROM_STREAM;
    if (e.pair == 0)
        e.pair = s->ordinal;
    atomic_fetch_add_explicit(&s->in_flight, 1, memory_order_relaxed);
    cbt_status st = cbt_tracer_push_(t, &e, cbt_clock_ticks_ordered(), s, (void *)(uintptr_t)(idx + 1));
    if (st != CBT_OK) {
        atomic_fetch_sub_explicit(&s->in_flight, 1, memory_order_relaxed);
        pool_put(p, idx); /* the recorded event simply completes unobserved */
    }
    return st;
}

void cbt_stream_defer_(struct cbt_stream *s, cbt_tracer *t, const cbt_bus_item *item)
{
    uint32_t idx = (uint32_t)((uintptr_t)item->mark - 1);
    if (cbt_rec_fifo_put(&s->pend_recs, &item->ev, 0) != CBT_OK) {
        /* no room for its event: the mark is dropped, said so, and its CUDA
         * event completes unobserved */
        atomic_fetch_add_explicit(&t->bus.dropped, 1, memory_order_relaxed);
        cbt_stream_mark_lost_(s, t); /* accepted with CBT_OK: cbt/stream.h */
        pool_put(s->pool, idx);
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

static cbt_mark_state query_mark(void *ctx, uint32_t idx, uint64_t *dns)
{
    poll_ctx *c = ctx;
    struct cbt_cuda_pool *p = c->s->pool;
    cudaError_t q = cudaEventQuery(p->ev[idx]);
    if (q == cudaErrorNotReady)
        return CBT_MARK_PENDING;
    c->ms = 0.0f;
    if (q != cudaSuccess || cudaEventElapsedTime(&c->ms, p->ref, p->ev[idx]) != cudaSuccess) {
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
        cbt_dispatch_(t, &ev, 0);
        if (c->ms > CBT_CUDA_REANCHOR_MS) {
            /* re-anchor on this mark before the float's resolution decays */
            cudaEvent_t old = p->ref;
            p->ref = p->ev[idx];
            p->ev[idx] = old;
            cbt_cuda_anchor_move(&p->anchor, dns, t->clock.ns_per_tick);
        }
    } else { /* the query or elapsed time failed: accepted with CBT_OK, lost */
        atomic_fetch_add_explicit(&t->bus.dropped, 1, memory_order_relaxed);
        cbt_stream_mark_lost_(s, t);
    }
    pool_put(p, idx);
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
    cudaStreamSynchronize((cudaStream_t)s->cuda_stream);
    /* every mark has completed; wait until the harvester has dispatched them
     * (only ours: other streams' work does not hold us up) */
    if (s->tracer_gen && !cbt_tracer_detach_stream_(s->tracer_gen, s, &s->in_flight)) {
        fprintf(stderr, "cbt: stream %u: marks still in flight at destroy; leaking the stream\n",
                s->ordinal);
        return 0;
    }
    pool_free(s->pool, CBT_STREAM_CUDA_POOL);
    free(s->pending);
    cbt_rec_fifo_free(&s->pend_recs);
    return 1;
}
