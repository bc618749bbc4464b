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
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "internal/ring.h"
#include "internal/stream.h"

struct cbt_cuda_pool {
    pthread_mutex_t lock;
    cudaEvent_t ev[CBT_STREAM_CUDA_POOL];
    uint32_t free_idx[CBT_STREAM_CUDA_POOL];
    uint32_t n_free;
    cudaEvent_t ref;
    uint64_t ref_ticks;  /* host ticks just after the reference completed */
    uint64_t ref_dev;    /* %globaltimer just before the reference */
};

static void pool_free(struct cbt_cuda_pool *p, uint32_t n_created)
{
    for (uint32_t i = 0; i < n_created; i++)
        cudaEventDestroy(p->ev[i]);
    if (p->ref)
        cudaEventDestroy(p->ref);
    pthread_mutex_destroy(&p->lock);
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
    s->pending = calloc(CBT_STREAM_CUDA_POOL, sizeof *s->pending);
    if (!p || !s->pending || cbt_rec_fifo_init(&s->pend_recs, CBT_STREAM_CUDA_MARK_CELLS) != CBT_OK) {
        free(p);
        free(s->pending);
        cbt_rec_fifo_free(&s->pend_recs); /* zeroed by a failed init: a no-op then */
        return CBT_ERR_NOMEM;
    }
    pthread_mutex_init(&p->lock, NULL);
    uint32_t made = 0;
    for (; made < CBT_STREAM_CUDA_POOL; made++) {
        if (cudaEventCreateWithFlags(&p->ev[made], cudaEventDefault) != cudaSuccess)
            break;
        p->free_idx[made] = CBT_STREAM_CUDA_POOL - 1 - made;
    }
    cudaStream_t cs = (cudaStream_t)cuda_stream;
    if (made < CBT_STREAM_CUDA_POOL || cudaEventCreate(&p->ref) != cudaSuccess ||
        cbt_cuda_stamp_event_(cs, p->ref, &p->ref_dev) != CBT_OK) {
        pool_free(p, made);
        free(s->pending);
        cbt_rec_fifo_free(&s->pend_recs);
        return CBT_ERR_CUDA;
    }
    p->ref_ticks = cbt_clock_ticks();
    p->n_free = CBT_STREAM_CUDA_POOL;
    s->pool = p;
    s->cuda_stream = cuda_stream;
    return CBT_OK;
}

static void pool_put(struct cbt_cuda_pool *p, uint32_t idx)
{
    pthread_mutex_lock(&p->lock);
    p->free_idx[p->n_free++] = idx;
    pthread_mutex_unlock(&p->lock);
}

cbt_status cbt_cuda_stream_mark_(cbt_stream *s, cbt_tracer *t, const cbt_event *ev)
{
    struct cbt_cuda_pool *p = s->pool;
    pthread_mutex_lock(&p->lock);
    if (s->tracer_gen != t->gen) {
        /* first mark under this tracer: let its harvester poll us. Marks left
         * from an earlier tracer (shut down meanwhile: one tracer at a time)
         * are forgotten and their events returned to the pool. */
        while (s->pend_count) {
            p->free_idx[p->n_free++] = s->pending[s->pend_head].ev_index;
            s->pend_head = (s->pend_head + 1) % CBT_STREAM_CUDA_POOL;
            s->pend_count--;
        }
        cbt_rec_fifo_clear(&s->pend_recs);
        atomic_store_explicit(&s->in_flight, 0, memory_order_relaxed);
        if (cbt_tracer_add_stream_(t, s) != CBT_OK) {
            pthread_mutex_unlock(&p->lock);
            atomic_fetch_add_explicit(&t->bus.dropped, 1, memory_order_relaxed);
            return CBT_ERR_FULL;
        }
        s->tracer_gen = t->gen;
    }
    if (p->n_free == 0) {
        pthread_mutex_unlock(&p->lock);
        atomic_fetch_add_explicit(&t->bus.dropped, 1, memory_order_relaxed);
        return CBT_ERR_FULL;
    }
    uint32_t idx = p->free_idx[--p->n_free];
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
    uint32_t slot = (s->pend_head + s->pend_count) % CBT_STREAM_CUDA_POOL;
    s->pending[slot].ev_index = idx;
    s->pend_count++;
}

uint32_t cbt_stream_poll_(struct cbt_stream *s, cbt_tracer *t)
{
    struct cbt_cuda_pool *p = s->pool;
    while (s->pend_count) {
        cbt_pending_mark *m = &s->pending[s->pend_head];
        cudaError_t q = cudaEventQuery(p->ev[m->ev_index]);
        if (q == cudaErrorNotReady)
            break;
        float ms = 0.0f;
        if (q == cudaSuccess && cudaEventElapsedTime(&ms, p->ref, p->ev[m->ev_index]) == cudaSuccess) {
            cbt_event ev;
            uint64_t unused;
            cbt_rec_fifo_oldest(&s->pend_recs, &ev, &unused);
            /* marks recorded by several threads can be resolved a little out
             * of record order: never a negative elapsed time */
            uint64_t dns = ms > 0.0f ? (uint64_t)((double)ms * 1e6) : 0;
            if (t->cuda_ring && t->cuda_ring->clock.fitted)
                ev.ts = cbt_ring_dev_to_unix(t->cuda_ring, &t->clock, p->ref_dev + dns);
            else
                ev.ts = cbt_clock_to_unix(&t->clock, p->ref_ticks) + dns;
            cbt_dispatch_(t, &ev, 0);
            if (ms > 5000.0f) {
                /* cudaEventElapsedTime is a float of ms: re-anchor on this
                 * mark before its resolution decays (~1 us at 5 s) */
                cudaEvent_t old = p->ref;
                p->ref = p->ev[m->ev_index];
                p->ev[m->ev_index] = old;
                p->ref_dev += dns;
                p->ref_ticks += (uint64_t)((double)dns / t->clock.ns_per_tick);
            }
        } else {
            cudaGetLastError();
            atomic_fetch_add_explicit(&t->bus.dropped, 1, memory_order_relaxed);
        }
        pool_put(p, m->ev_index);
        cbt_rec_fifo_drop(&s->pend_recs);
        s->pend_head = (s->pend_head + 1) % CBT_STREAM_CUDA_POOL;
        s->pend_count--;
        /* release: pairs with the acquire in cbt_tracer_detach_stream_ */
        atomic_fetch_sub_explicit(&s->in_flight, 1, memory_order_release);
    }
    return s->pend_count;
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
