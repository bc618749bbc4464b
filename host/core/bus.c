/* host/core/bus.c — owns the publish queue (see bus.h for the protocol). */
#include "internal/bus.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

cbt_status cbt_bus_init(cbt_bus *b, uint32_t capacity)
{
    if (capacity < 2 || (capacity & (capacity - 1)) != 0)
        return CBT_ERR_INVAL;
    memset(b, 0, sizeof *b);
    /* calloc: a sequence word of 0 never equals pos + 1, so every slot starts
     * uncommitted; large blocks come zeroed from the OS and their pages are
     * touched only when a slot is first used */
    b->raw = calloc((size_t)capacity + 1, sizeof(cbt_bus_slot));
    if (!b->raw)
        return CBT_ERR_NOMEM;
    uintptr_t p = ((uintptr_t)b->raw + 63) & ~(uintptr_t)63;
    b->slots = (cbt_bus_slot *)p;
    b->mask = capacity - 1;
    return CBT_OK;
}

void cbt_bus_destroy(cbt_bus *b)
{
    free(b->raw);
    b->raw = NULL;
    b->slots = NULL;
}

cbt_status cbt_bus_push(cbt_bus *b, const cbt_event *ev, uint64_t ticks,
                        struct cbt_stream *stream, void *mark)
{
    uint64_t pos = atomic_load_explicit(&b->tail, memory_order_relaxed);
    for (;;) {
        /* acquire: pairs with the release in cbt_bus_release, so the
         * consumer's reads of the slot we may reuse happened before our writes */
        uint64_t head = atomic_load_explicit(&b->head, memory_order_acquire);
        /* signed: a stale `pos` may lag behind a head that moved on; the CAS
         * below then fails and refreshes it */
        if ((int64_t)(pos - head) > (int64_t)b->mask) {
            atomic_fetch_add_explicit(&b->dropped, 1, memory_order_relaxed);
            return CBT_ERR_FULL;
        }
        if (atomic_compare_exchange_weak_explicit(&b->tail, &pos, pos + 1, memory_order_relaxed,
                                                  memory_order_relaxed))
            break;
    }
    cbt_bus_fill_commit_(b, pos, ev, ticks, stream, mark);
    return CBT_OK;
}

int cbt_bus_peek(cbt_bus *b, uint64_t *ticks)
{
    uint64_t pos = b->next;
    cbt_bus_slot *s = &b->slots[pos & b->mask];
    /* acquire: pairs with the producer's release in cbt_bus_fill_commit_ */
    if (atomic_load_explicit(&s->seq, memory_order_acquire) != pos + 1)
        return 0;
    *ticks = s->item.ticks;
    return 1;
}

int cbt_bus_pop(cbt_bus *b, cbt_bus_item *out)
{
    uint64_t pos = b->next;
    cbt_bus_slot *s = &b->slots[pos & b->mask];
    const char *ahead = (const char *)&b->slots[(pos + 4) & b->mask];
    __builtin_prefetch(ahead, 0, 3);
    __builtin_prefetch(ahead + 64, 0, 3);
    __builtin_prefetch(ahead + 128, 0, 3);
    /* acquire: pairs with the producer's release in cbt_bus_push */
    if (atomic_load_explicit(&s->seq, memory_order_acquire) != pos + 1)
        return 0;
    out->ticks = s->item.ticks;
    out->stream = s->item.stream;
    out->mark = s->item.mark;
    cbt_event_copy_used_(&out->ev, &s->item.ev);
    b->next = pos + 1;
    return 1;
}

void cbt_bus_release(cbt_bus *b)
{
    /* release: our reads of the popped slots happen before any producer
     * reuses them; pairs with the acquire in cbt_bus_push */
    atomic_store_explicit(&b->head, b->next, memory_order_release);
}

uint64_t cbt_bus_accepted(cbt_bus *b)
{
    return atomic_load_explicit(&b->tail, memory_order_relaxed);
}

uint64_t cbt_bus_depth(cbt_bus *b)
{
    uint64_t t = atomic_load_explicit(&b->tail, memory_order_relaxed);
    uint64_t h = atomic_load_explicit(&b->head, memory_order_relaxed);
    return t > h ? t - h : 0;
}
