/* host/internal/bus.h — owns the publish queue: bounded, lock-free, many producers, one consumer.
 *
 * Producers (any thread calling cbt_publish, CPU stream workers, CUDA stream
 * publishes) claim position `pos` by advancing `tail` with a CAS, but only
 * while pos - head < capacity; they fill the slot and commit it by storing
 * the slot's sequence word (pos + 1) last. The one consumer (the harvester)
 * trusts a slot only when its sequence word equals pos + 1, so a slot being
 * filled, or left from the previous lap, is never read. The consumer never
 * writes the slots: it frees them by publishing `head`, once per drained batch
 * (cbt_bus_release), so producers find slot lines and `head` in their own
 * caches instead of pulling lines the consumer just wrote. A full queue fails
 * the claim at once: the event is dropped and counted, the producer never
 * waits.
 */
#ifndef CBT_HOST_INTERNAL_BUS_H
#define CBT_HOST_INTERNAL_BUS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cbt/event.h"
#include "cbt/status.h"

struct cbt_stream;

/* Copy the used part of an event: the fixed header and session, then only
 * the metadata values it holds. Constant-size pieces, so the compiler emits
 * plain vector moves instead of a variable-length copy. */
static inline void cbt_event_copy_used_(cbt_event *dst, const cbt_event *src)
{
    _Static_assert(offsetof(cbt_event, meta) % 8 == 0, "meta is 8-byte aligned");
    memcpy(dst, src, offsetof(cbt_event, meta));
    uint32_t n = src->n_meta <= CBT_EVENT_META_MAX ? src->n_meta : CBT_EVENT_META_MAX;
    for (uint32_t i = 0; i < n; i++)
        memcpy(&dst->meta[i], &src->meta[i], sizeof(cbt_meta));
    dst->n_meta = (uint8_t)n;
    if (src->flags & CBT_EVF_TRACE)
        memcpy(&dst->trace, &src->trace, sizeof src->trace);
}

typedef struct cbt_bus_item {
    uint64_t ticks;            /* raw clock stamp (clock.h); 0 with CBT_EVF_EXPLICIT_TS */
    struct cbt_stream *stream; /* non-NULL: a CUDA mark still pending on this stream */
    void *mark;                /* the stream backend's pending-mark handle */
    cbt_event ev;
} cbt_bus_item;

typedef struct cbt_bus_slot {
    _Atomic uint64_t seq; /* == pos + 1: committed for position pos */
    cbt_bus_item item;
} __attribute__((aligned(64))) cbt_bus_slot;

typedef struct cbt_bus {
    /* producers' line: positions claimed (== events accepted), and in
     * single-producer mode that producer's last view of head */
    _Alignas(64) _Atomic uint64_t tail;
    uint64_t cached_head;
    /* consumer's published index: positions below it are free; written once
     * per batch, read by producers only when the bus looks full */
    _Alignas(64) _Atomic uint64_t head;
    /* consumer-private: next position to read */
    _Alignas(64) uint64_t next;
    /* read-mostly */
    _Alignas(64) _Atomic uint64_t dropped;
    uint64_t mask;
    cbt_bus_slot *slots; /* 64-byte aligned, inside raw */
    void *raw;
} cbt_bus;

/* capacity: a power of two >= 2. CBT_ERR_INVAL / CBT_ERR_NOMEM. */
cbt_status cbt_bus_init(cbt_bus *b, uint32_t capacity);
void cbt_bus_destroy(cbt_bus *b);

/* Producer: copy `ev` (only its used metadata) with the given stamp and
 * pending-mark fields. CBT_ERR_FULL: dropped and counted. Never blocks. */
cbt_status cbt_bus_push(cbt_bus *b, const cbt_event *ev, uint64_t ticks,
                        struct cbt_stream *stream, void *mark);

/* Consumer only: the stamp of the oldest committed item, without removing it.
 * Returns 0 when there is none. */
int cbt_bus_peek(cbt_bus *b, uint64_t *ticks);

/* Consumer only: copy the oldest committed item into *out. Returns 0 when
 * empty (or when the oldest claimed slot is not committed yet), 1 otherwise.
 * The slot is not reusable until cbt_bus_release(). */
int cbt_bus_pop(cbt_bus *b, cbt_bus_item *out);

/* Consumer only: free every slot popped so far (one release store). */
void cbt_bus_release(cbt_bus *b);

/* Events accepted so far (== positions claimed). */
uint64_t cbt_bus_accepted(cbt_bus *b);

/* Items claimed and not yet consumed (approximate while producers run). */
uint64_t cbt_bus_depth(cbt_bus *b);

/* Fill the slot of a claimed position and commit it (sequence word last).
 * Inline: it is the publish hot path. The many-producer claim is
 * cbt_bus_push (bus.c); a thread's own lane claims without a CAS
 * (host/core/lane.c) and commits through this same function. */
static inline void cbt_bus_fill_commit_(cbt_bus *b, uint64_t pos, const cbt_event *ev, uint64_t ticks,
                                   struct cbt_stream *stream, void *mark)
{
    cbt_bus_slot *s = &b->slots[pos & b->mask];
    /* ask for the lines of a slot a few positions ahead in write mode, so the
     * next publishes find them here rather than in the consumer's cache */
    const char *ahead = (const char *)&b->slots[(pos + 8) & b->mask];
    __builtin_prefetch(ahead, 1, 3);
    __builtin_prefetch(ahead + 64, 1, 3);
    __builtin_prefetch(ahead + 128, 1, 3);
    s->item.ticks = ticks;
    s->item.stream = stream;
    s->item.mark = mark;
    cbt_event_copy_used_(&s->item.ev, ev);
    /* release: commits the slot; pairs with the acquire in cbt_bus_pop/peek */
    atomic_store_explicit(&s->seq, pos + 1, memory_order_release);
}

#endif /* CBT_HOST_INTERNAL_BUS_H */
