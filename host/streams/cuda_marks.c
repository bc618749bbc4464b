/* host/streams/cuda_marks.c — owns the CUDA stream backend's CUDA-free
 * bookkeeping (internal/cuda_marks.h): the pool's free list (a lock-free
 * stack), the pending FIFO in stream order, a mark's time from its elapsed
 * milliseconds. */
#include "internal/cuda_marks.h"

_Atomic(cbt_evpool_hook) cbt_evpool_take_hook_; /* static storage: NULL */

#define EVPOOL_TAG_ONE (1ull << 32)

void cbt_evpool_init(cbt_evpool *p, uint32_t n)
{
    if (n > CBT_STREAM_CUDA_POOL)
        n = CBT_STREAM_CUDA_POOL;
    for (uint32_t i = 0; i < n; i++) /* i's successor below it: i + 1 (as index + 1: i + 2) */
        atomic_store_explicit(&p->next[i], i + 1 < n ? i + 2 : 0, memory_order_relaxed);
    atomic_store_explicit(&p->top, n ? 1u : 0u, memory_order_relaxed); /* index 0 on top */
}

cbt_status cbt_evpool_take(cbt_evpool *p, uint32_t *idx)
{
    /* acquire: pairs with the release CAS of the give-back that put this top
     * there (its next[] store, and the event behind the index) */
    uint64_t top = atomic_load_explicit(&p->top, memory_order_acquire);
    for (;;) {
        uint32_t i1 = (uint32_t)top;
        if (i1 == 0)
            return CBT_ERR_FULL;
        /* acquire: pairs with the release store of a test's hook */
        cbt_evpool_hook hook = atomic_load_explicit(&cbt_evpool_take_hook_, memory_order_acquire);
        if (__builtin_expect(hook != NULL, 0))
            hook();
        /* possibly stale when i1 was taken and given back meanwhile: then the
         * tag moved and the CAS below fails */
        uint32_t below = atomic_load_explicit(&p->next[i1 - 1], memory_order_relaxed);
        uint64_t want = ((top & ~0xffffffffull) + EVPOOL_TAG_ONE) | below;
        /* acquire (success and failure): as the load above, for the top we
         * took or the one we retry with */
        if (atomic_compare_exchange_weak_explicit(&p->top, &top, want, memory_order_acquire,
                                                  memory_order_acquire)) {
            *idx = i1 - 1;
            return CBT_OK;
        }
    }
}

void cbt_evpool_put(cbt_evpool *p, uint32_t idx)
{
    if (idx >= CBT_STREAM_CUDA_POOL)
        return;
    uint64_t top = atomic_load_explicit(&p->top, memory_order_relaxed);
    uint64_t want;
    do {
        atomic_store_explicit(&p->next[idx], (uint32_t)top, memory_order_relaxed);
        want = ((top & ~0xffffffffull) + EVPOOL_TAG_ONE) | (idx + 1);
        /* release: pairs with the acquires in cbt_evpool_take: next[idx] and
         * whatever the caller wrote about idx before giving it back */
    } while (!atomic_compare_exchange_weak_explicit(&p->top, &top, want, memory_order_release,
                                                    memory_order_relaxed));
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
