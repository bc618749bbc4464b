/* host/core/bus.c — owns the publish queue (see bus.h for the layout and the
 * commit protocol) and its many-producer claim. */
#include "internal/bus.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

cbt_status cbt_bus_init(cbt_bus *b, uint32_t cells, int single_producer)
{
    if (cells < CBT_BUS_CELLS_MIN || cells > (1u << 31) || (cells & (cells - 1)) != 0)
        return CBT_ERR_INVAL;
    memset(b, 0, sizeof *b);
    /* calloc: a commit word of 0 never equals pos + 1, so every cell starts
     * uncommitted; large blocks come zeroed from the OS and their pages are
     * touched only when a cell is first used. Layout: the cells with their
     * slack (aligned to a cell), then the commit words (many producers). */
    b->raw = calloc(1, (size_t)cbt_bus_bytes(cells, single_producer));
    if (!b->raw)
        return CBT_ERR_NOMEM;
    uintptr_t p = ((uintptr_t)b->raw + CBT_REC_CELL - 1) & ~(uintptr_t)(CBT_REC_CELL - 1);
    b->cells = (unsigned char *)p;
    b->single_producer = single_producer != 0;
    if (!single_producer)
        b->seq = (_Atomic uint64_t *)(b->cells + ((size_t)cells + CBT_REC_CELLS_MAX) * CBT_REC_CELL);
    b->mask = cells - 1;
    return CBT_OK;
}

void cbt_bus_destroy(cbt_bus *b)
{
    free(b->raw);
    b->raw = NULL;
    b->cells = NULL;
    b->seq = NULL;
}

cbt_status cbt_bus_push(cbt_bus *b, const cbt_event *ev, uint64_t ticks,
                        struct cbt_stream *stream, void *mark)
{
    cbt_rec_size z = cbt_rec_size_of(ev, stream != NULL);
    uint32_t k = z.cells;
    if (b->single_producer) /* a lane: its one producer uses cbt_bus_push_spsc_ */
        return CBT_ERR_INVAL;
    uint64_t pos = atomic_load_explicit(&b->tail, memory_order_relaxed);
    for (;;) {
        /* acquire: pairs with the release in cbt_bus_release, so the
         * consumer's reads of the cells we may reuse happened before our writes */
        uint64_t head = atomic_load_explicit(&b->head, memory_order_acquire);
        /* signed: a stale `pos` may lag behind a head that moved on; the CAS
         * below then fails and refreshes it */
        if ((int64_t)(pos + k - head) > (int64_t)(b->mask + 1)) {
            atomic_fetch_add_explicit(&b->dropped, 1, memory_order_relaxed);
            return CBT_ERR_FULL;
        }
        if (atomic_compare_exchange_weak_explicit(&b->tail, &pos, pos + k, memory_order_relaxed,
                                                  memory_order_relaxed))
            break;
    }
    atomic_fetch_add_explicit(&b->accepted, 1, memory_order_relaxed);
    cbt_bus_fill_(b, pos, z, ev, ticks, stream, mark);
    /* release: commits the record; pairs with the acquire in committed() */
    atomic_store_explicit(&b->seq[pos & b->mask], pos + 1, memory_order_release);
    return CBT_OK;
}

/* Consumer: whether the record at `pos` (== next) is committed (bus.h). */
static inline int committed(cbt_bus *b, uint64_t pos)
{
    if (b->single_producer) {
        if (pos != b->cached_tail)
            return 1; /* below a tail acquired already */
        /* acquire: pairs with the release of tail in cbt_bus_push_spsc_ */
        b->cached_tail = atomic_load_explicit(&b->tail, memory_order_acquire);
        return pos != b->cached_tail;
    }
    /* acquire: pairs with the producer's release in cbt_bus_push */
    return atomic_load_explicit(&b->seq[pos & b->mask], memory_order_acquire) == pos + 1;
}

int cbt_bus_peek(cbt_bus *b, uint64_t *ticks)
{
    uint64_t pos = b->next;
    if (!committed(b, pos))
        return 0;
    *ticks = cbt_rec_ticks(b->cells + (pos & b->mask) * CBT_REC_CELL);
    return 1;
}

int cbt_bus_pop(cbt_bus *b, cbt_bus_item *out)
{
    uint64_t pos = b->next, i = pos & b->mask;
    const unsigned char *ahead = b->cells + ((pos + 8) & b->mask) * CBT_REC_CELL;
    __builtin_prefetch(ahead, 0, 3);
    __builtin_prefetch(ahead + CBT_REC_CELL, 0, 3);
    __builtin_prefetch(ahead + 2 * CBT_REC_CELL, 0, 3);
    if (!committed(b, pos))
        return 0;
    uint32_t k = cbt_rec_read(b->cells + i * CBT_REC_CELL, &out->ev, &out->ticks, &out->stream,
                              &out->mark);
    b->next = pos + k;
    b->n_popped++;
    return 1;
}

void cbt_bus_release(cbt_bus *b)
{
    /* release: our reads of the popped records happen before any producer
     * reuses their cells; pairs with the acquire in cbt_bus_push / lane_push */
    atomic_store_explicit(&b->head, b->next, memory_order_release);
    atomic_store_explicit(&b->popped, b->n_popped, memory_order_relaxed);
}

int cbt_bus_drained(cbt_bus *b)
{
    return b->next == atomic_load_explicit(&b->tail, memory_order_relaxed);
}

uint64_t cbt_bus_accepted(cbt_bus *b)
{
    return atomic_load_explicit(&b->accepted, memory_order_relaxed);
}

uint64_t cbt_bus_depth(cbt_bus *b)
{
    uint64_t a = atomic_load_explicit(&b->accepted, memory_order_relaxed);
    uint64_t p = atomic_load_explicit(&b->popped, memory_order_relaxed);
    return a > p ? a - p : 0;
}

uint64_t cbt_bus_cells_used(cbt_bus *b)
{
    uint64_t t = atomic_load_explicit(&b->tail, memory_order_relaxed);
    uint64_t h = atomic_load_explicit(&b->head, memory_order_relaxed);
    return t > h ? t - h : 0;
}
