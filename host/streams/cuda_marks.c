/* host/streams/cuda_marks.c — owns the CUDA stream backend's CUDA-free
 * bookkeeping (internal/cuda_marks.h): the pool's free list, the pending
 * FIFO in stream order, a mark's time from its elapsed milliseconds. */
#include "internal/cuda_marks.h"

void cbt_evpool_init(cbt_evpool *p, uint32_t n)
{
    if (n > CBT_STREAM_CUDA_POOL)
        n = CBT_STREAM_CUDA_POOL;
    for (uint32_t i = 0; i < n; i++)
        p->free_idx[i] = n - 1 - i; /* a stack: index 0 on top */
    p->n_free = n;
}

cbt_status cbt_evpool_take(cbt_evpool *p, uint32_t *idx)
{
    if (p->n_free == 0)
        return CBT_ERR_FULL;
    *idx = p->free_idx[--p->n_free];
    return CBT_OK;
}

void cbt_evpool_put(cbt_evpool *p, uint32_t idx)
{
    if (p->n_free < CBT_STREAM_CUDA_POOL)
        p->free_idx[p->n_free++] = idx;
}

cbt_status cbt_markq_push(cbt_markq *q, uint32_t ev)
{
    if (q->count >= CBT_STREAM_CUDA_POOL)
        return CBT_ERR_FULL;
    q->ev[(q->head + q->count) % CBT_STREAM_CUDA_POOL] = ev;
    q->count++;
    return CBT_OK;
}

uint32_t cbt_markq_resolve(cbt_markq *q, cbt_mark_query_fn query, cbt_mark_done_fn done,
                           void *ctx)
{
    while (q->count) {
        uint32_t ev = q->ev[q->head];
        uint64_t dns = 0;
        cbt_mark_state st = query(ctx, ev, &dns);
        if (st == CBT_MARK_PENDING)
            break; /* stream order: nothing behind it has been reached first */
        q->head = (q->head + 1) % CBT_STREAM_CUDA_POOL;
        q->count--;
        done(ctx, ev, st, dns);
    }
    return q->count;
}

void cbt_markq_clear(cbt_markq *q, void (*drop)(void *ctx, uint32_t ev), void *ctx)
{
    while (q->count) {
        drop(ctx, q->ev[q->head]);
        q->head = (q->head + 1) % CBT_STREAM_CUDA_POOL;
        q->count--;
    }
}

uint64_t cbt_cuda_ms_to_ns(float ms)
{
    return ms > 0.0f ? (uint64_t)((double)ms * 1e6) : 0;
}

uint64_t cbt_cuda_mark_unix(const cbt_cuda_anchor *a, uint64_t dns, const cbt_clock_map *host,
                            const cbt_devclock *dev)
{
    if (dev && dev->fitted)
        return cbt_clock_to_unix(host, cbt_devclock_to_ticks(dev, a->ref_dev + dns));
    return cbt_clock_to_unix(host, a->ref_ticks) + dns;
}

void cbt_cuda_anchor_move(cbt_cuda_anchor *a, uint64_t dns, double ns_per_tick)
{
    a->ref_dev += dns;
    a->ref_ticks += (uint64_t)((double)dns / ns_per_tick);
}
