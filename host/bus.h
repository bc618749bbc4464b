/* host/bus.h — owns the publish queue: bounded, lock-free, many producers, one consumer.
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
#ifndef CBT_HOST_BUS_H
#define CBT_HOST_BUS_H

#include <stdatomic.h>
#include <stdint.h>

#include "cbt/event.h"
#include "cbt/status.h"

struct cbt_stream;

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
    /* producers' index (positions claimed == events accepted), own line */
    _Alignas(64) _Atomic uint64_t tail;
    /* consumer's published index: positions below it are free; own line,
     * written once per batch */
    _Alignas(64) _Atomic uint64_t head;
    uint64_t next; /* consumer-private: next position to read */
    _Alignas(64) _Atomic uint64_t dropped;
    uint64_t mask;
    cbt_bus_slot *slots;
} cbt_bus;

/* capacity: a power of two >= 2. CBT_ERR_INVAL / CBT_ERR_NOMEM. */
cbt_status cbt_bus_init(cbt_bus *b, uint32_t capacity);
void cbt_bus_destroy(cbt_bus *b);

/* Producer: copy `ev` (only its used metadata) with the given stamp and
 * pending-mark fields. CBT_ERR_FULL: dropped and counted. Never blocks. */
cbt_status cbt_bus_push(cbt_bus *b, const cbt_event *ev, uint64_t ticks,
                        struct cbt_stream *stream, void *mark);

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

#endif /* CBT_HOST_BUS_H */
