/* host/bus.c — owns the publish queue (see bus.h for the protocol). */
#include "bus.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

cbt_status cbt_bus_init(cbt_bus *b, uint32_t capacity)
{
    if (capacity < 2 || (capacity & (capacity - 1)) != 0)
        return CBT_ERR_INVAL;
    memset(b, 0, sizeof *b);
    b->slots = aligned_alloc(64, (size_t)capacity * sizeof(cbt_bus_slot));
    if (!b->slots)
        return CBT_ERR_NOMEM;
    for (uint64_t i = 0; i < capacity; i++)
        atomic_init(&b->slots[i].seq, i);
    b->mask = capacity - 1;
    return CBT_OK;
}

void cbt_bus_destroy(cbt_bus *b)
{
    free(b->slots);
    b->slots = NULL;
}

cbt_status cbt_bus_push(cbt_bus *b, const cbt_event *ev, uint64_t ticks,
                        struct cbt_stream *stream, void *mark)
{
    uint64_t pos = atomic_load_explicit(&b->tail, memory_order_relaxed);
    cbt_bus_slot *s;
    for (;;) {
        s = &b->slots[pos & b->mask];
        /* acquire: pairs with the consumer's release in cbt_bus_pop that
         * frees the slot for this lap */
        uint64_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
        int64_t dif = (int64_t)(seq - pos);
        if (dif == 0) {
            if (atomic_compare_exchange_weak_explicit(&b->tail, &pos, pos + 1,
                                                      memory_order_relaxed,
                                                      memory_order_relaxed))
                break;
        } else if (dif < 0) {
            /* the consumer has not freed this slot from the previous lap */
            atomic_fetch_add_explicit(&b->dropped, 1, memory_order_relaxed);
            return CBT_ERR_FULL;
        } else {
            pos = atomic_load_explicit(&b->tail, memory_order_relaxed);
        }
    }
    s->item.ticks = ticks;
    s->item.stream = stream;
    s->item.mark = mark;
    uint32_t n = ev->n_meta <= CBT_EVENT_META_MAX ? ev->n_meta : CBT_EVENT_META_MAX;
    memcpy(&s->item.ev, ev, offsetof(cbt_event, meta) + n * sizeof(cbt_meta));
    s->item.ev.n_meta = (uint8_t)n;
    /* release: commits the slot; pairs with the acquire in cbt_bus_pop */
    atomic_store_explicit(&s->seq, pos + 1, memory_order_release);
    atomic_fetch_add_explicit(&b->accepted, 1, memory_order_relaxed);
    return CBT_OK;
}

int cbt_bus_pop(cbt_bus *b, cbt_bus_item *out)
{
    uint64_t pos = atomic_load_explicit(&b->head, memory_order_relaxed);
    cbt_bus_slot *s = &b->slots[pos & b->mask];
    /* acquire: pairs with the producer's release in cbt_bus_push */
    if (atomic_load_explicit(&s->seq, memory_order_acquire) != pos + 1)
        return 0;
    uint32_t n = s->item.ev.n_meta;
    memcpy(out, &s->item, offsetof(cbt_bus_item, ev) + offsetof(cbt_event, meta) +
                              n * sizeof(cbt_meta));
    /* release: frees the slot for the producer one lap ahead; pairs with the
     * acquire in cbt_bus_push */
    atomic_store_explicit(&s->seq, pos + b->mask + 1, memory_order_release);
    atomic_store_explicit(&b->head, pos + 1, memory_order_release);
    return 1;
}

uint64_t cbt_bus_depth(cbt_bus *b)
{
    uint64_t t = atomic_load_explicit(&b->tail, memory_order_relaxed);
    uint64_t h = atomic_load_explicit(&b->head, memory_order_relaxed);
    return t > h ? t - h : 0;
}
