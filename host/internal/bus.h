/* host/internal/bus.h — owns the publish queue: bounded, lock-free, one
 * consumer, over one layout in two modes: many producers (the shared bus,
 * host/core/bus.c) and a single producer (a thread's lane, host/core/lane.c).
 *
 * Layout. The queue is an array of N 64-byte cells (N a power of two) plus a
 * slack of CBT_REC_CELLS_MAX cells past the end; in many-producer mode also
 * a separate array of N 64-bit commit words, one per cell. An event is
 * copied in as a record of k contiguous cells (internal/record.h: only the
 * parts it uses, so 3 cells for a 2-value event, 41 at most). Positions
 * count cells and only grow; the record at position p starts at cell
 * p & (N - 1) and, when it starts less than k cells before the end, runs on
 * into the slack instead of wrapping, so it is always written and read with
 * plain contiguous copies. The cells it covers in the slack stand for
 * positions p + j past the wrap, whose own cells at the start of the array
 * it leaves unused: position-wise, live records never overlap (they lie in
 * [head, head + N)), so neither do the cells they touch.
 *
 * Claim. A producer claims the k cells [pos, pos + k) by advancing `tail`
 * by k, only while pos + k - head <= N: with a CAS on the shared bus, with a
 * plain check on a lane (its thread is the only producer and keeps a cached
 * copy of head, reading the consumer's line only when the lane looks full).
 * A record that does not fit is dropped and counted (`dropped`) at once: the
 * producer never waits. `accepted` counts the events, `tail` the cells.
 *
 * Commit, single producer (a lane). The producer writes the record, then
 * publishes tail = pos + k with release order: tail is the commit. The
 * consumer loads tail with acquire order only when it has read everything
 * below the value it saw last (cached_tail), and trusts exactly the records
 * below it. Nothing in a cell is consulted to decide what is committed, so
 * no stale byte, user payload included, can pass for a commit; and the
 * consumer pulls tail's line once per catch-up, not once per record.
 *
 * Commit, many producers (the bus). Producers finish out of claim order, so
 * tail cannot say which records are complete. The producer writes the
 * record, then stores pos + 1 into the commit word of the record's first
 * cell, seq[pos & (N - 1)], with release order. The consumer, at position
 * `next` (always the start of a record: records are claimed back to back),
 * loads seq[next & (N - 1)] with acquire order and trusts the record only
 * when it equals next + 1; then it reads k from the record and moves next on
 * by k.
 *
 * Why no commit word is taken for another. Commit words are written only
 * for the first cell of a record, only with (that record's position) + 1.
 * The word at next & (N - 1) was last written either for `next` itself,
 * which is the commit we wait for, or for an older record start
 * p = next - m*N (m >= 1), whose value p + 1 differs; never for a later
 * position, since a producer may claim below head + N only and head <= next.
 * Zero (calloc) matches no position. Payload never looks like a commit,
 * because commit words are not in the cells: a first cell holding, from an
 * older lap, the continuation of another record (user data that may well
 * equal next + 1) is never consulted. (A commit word in the record's own
 * first cell would be exposed to exactly that false match;
 * tests/test_bus.c, stale_words_never_commit.)
 *
 * Release. The consumer never writes cells, commit words or tail: it frees
 * what it has read by publishing `head` (release), once per drained batch
 * (cbt_bus_release), so producers find the cells and `head` in their own
 * caches instead of pulling lines the consumer just wrote. A producer's
 * acquire of head orders the consumer's reads of a cell before the writes
 * of its next lap.
 */
#ifndef CBT_HOST_INTERNAL_BUS_H
#define CBT_HOST_INTERNAL_BUS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cbt/event.h"
#include "cbt/status.h"
#include "internal/record.h"

struct cbt_stream;

/* The fewest cells a queue may have: room for the largest record. */
#define CBT_BUS_CELLS_MIN 64u
_Static_assert(CBT_REC_CELLS_MAX <= CBT_BUS_CELLS_MIN, "the largest record fits the smallest queue");

/* How far ahead (in cells) a producer asks for the cells it will write next. */
#define CBT_BUS_PREFETCH_CELLS 32u

/* An event as the consumer gets it back. */
typedef struct cbt_bus_item {
    uint64_t ticks;            /* raw clock stamp (clock.h); 0 with CBT_EVF_EXPLICIT_TS */
    struct cbt_stream *stream; /* non-NULL: a CUDA mark still pending on this stream */
    void *mark;                /* the stream backend's pending-mark handle */
    cbt_event ev;
} cbt_bus_item;

typedef struct cbt_bus {
    /* cells claimed (many producers: the CAS target) or committed (single
     * producer), alone on its line: the consumer reads it, and a single
     * producer only ever stores to it, so a consumer's read never makes the
     * producer wait for a load */
    _Alignas(64) _Atomic uint64_t tail;
    /* producers' line: events accepted; in single-producer mode that
     * producer's own copy of tail and its last view of head (read by no one
     * else: the lane's next owner takes them over after its claiming CAS) */
    _Alignas(64) _Atomic uint64_t accepted;
    uint64_t own_tail;
    uint64_t cached_head;
    /* consumer's published index: positions below it are free; written once
     * per batch, read by producers only when the queue looks full */
    _Alignas(64) _Atomic uint64_t head;
    /* consumer-private: the next record's position, records popped, the
     * last tail seen (single producer); and the count as of the last
     * release, for cbt_bus_depth */
    _Alignas(64) uint64_t next;
    uint64_t n_popped;
    uint64_t cached_tail;
    _Atomic uint64_t popped;
    /* read-mostly */
    _Alignas(64) _Atomic uint64_t dropped;
    uint64_t mask;         /* cells - 1 */
    int single_producer;   /* a lane: tail commits; no commit words */
    unsigned char *cells;  /* mask + 1 + CBT_REC_CELLS_MAX cells, 64-byte aligned, in raw */
    _Atomic uint64_t *seq; /* many producers: mask + 1 commit words, in raw; else NULL */
    void *raw;
} cbt_bus;

/* Bytes a queue of `cells` cells allocates. */
static inline uint64_t cbt_bus_bytes(uint64_t cells, int single_producer)
{
    return (cells + CBT_REC_CELLS_MAX + 1) * CBT_REC_CELL +
           (single_producer ? 0 : cells * sizeof(uint64_t));
}

/* cells: a power of two in [CBT_BUS_CELLS_MIN, 2^31]. single_producer: a
 * lane, pushed only through cbt_bus_push_spsc_, by one thread at a time.
 * CBT_ERR_INVAL / CBT_ERR_NOMEM. */
cbt_status cbt_bus_init(cbt_bus *b, uint32_t cells, int single_producer);
void cbt_bus_destroy(cbt_bus *b);

/* Producer (any thread; many-producer mode): copy the record of `ev` with
 * the given stamp and pending-mark fields. CBT_ERR_FULL: dropped and
 * counted; CBT_ERR_INVAL on a single-producer queue. Never blocks. */
cbt_status cbt_bus_push(cbt_bus *b, const cbt_event *ev, uint64_t ticks,
                        struct cbt_stream *stream, void *mark);

/* Consumer only: the stamp of the oldest committed record, without removing
 * it. Returns 0 when there is none. */
int cbt_bus_peek(cbt_bus *b, uint64_t *ticks);

/* Consumer only: read the oldest committed record into *out. Returns 0 when
 * empty (or when the oldest claimed record is not committed yet), 1
 * otherwise. Its cells are not reusable until cbt_bus_release(). */
int cbt_bus_pop(cbt_bus *b, cbt_bus_item *out);

/* Consumer only: free every record popped so far (one release store). */
void cbt_bus_release(cbt_bus *b);

/* Consumer only: every claimed record has been popped (for a lane whose
 * thread has exited: nothing more comes). */
int cbt_bus_drained(cbt_bus *b);

/* Events accepted so far. */
uint64_t cbt_bus_accepted(cbt_bus *b);

/* Events accepted and not yet released by the consumer (approximate while
 * producers run). */
uint64_t cbt_bus_depth(cbt_bus *b);

/* Cells claimed and not yet released (approximate while producers run). */
uint64_t cbt_bus_cells_used(cbt_bus *b);

/* Write the record of a claimed position (no commit). Inline: it is the
 * publish hot path of both modes. */
static inline void cbt_bus_fill_(cbt_bus *b, uint64_t pos, cbt_rec_size z,
                                 const cbt_event *restrict ev, uint64_t ticks,
                                 struct cbt_stream *stream, void *mark)
{
    /* ask for the lines a few records ahead in write mode, so the next
     * publishes find them here rather than in the consumer's cache (ahead
     * may run into the slack: a hint, never a write) */
    const unsigned char *ahead = b->cells + ((pos + CBT_BUS_PREFETCH_CELLS) & b->mask) * CBT_REC_CELL;
    __builtin_prefetch(ahead, 1, 3);
    __builtin_prefetch(ahead + CBT_REC_CELL, 1, 3);
    __builtin_prefetch(ahead + 2 * CBT_REC_CELL, 1, 3);
    for (uint32_t j = 3; j < z.cells; j++) /* a record larger than the usual 3 cells */
        __builtin_prefetch(ahead + (size_t)j * CBT_REC_CELL, 1, 3);
    cbt_rec_write(b->cells + (pos & b->mask) * CBT_REC_CELL, z, ev, ticks, stream, mark);
}

/* Single producer (a lane's thread; host/core/lane.c): claim, write and
 * commit the record of `ev`. No CAS: the producer owns tail and accepted and
 * keeps a cached copy of head, reading the consumer's line only when the
 * lane looks full. CBT_ERR_FULL: dropped and counted. Inline: it is the
 * publish hot path. */
static inline cbt_status cbt_bus_push_spsc_(cbt_bus *b, const cbt_event *ev, uint64_t ticks,
                                            struct cbt_stream *stream, void *mark)
{
    cbt_rec_size z = cbt_rec_size_of(ev, stream != NULL);
    uint32_t k = z.cells;
    uint64_t pos = b->own_tail;
    if (pos + k - b->cached_head > b->mask + 1) {
        /* acquire: pairs with the release in cbt_bus_release */
        b->cached_head = atomic_load_explicit(&b->head, memory_order_acquire);
        if (pos + k - b->cached_head > b->mask + 1) {
            atomic_fetch_add_explicit(&b->dropped, 1, memory_order_relaxed);
            return CBT_ERR_FULL;
        }
    }
    cbt_bus_fill_(b, pos, z, ev, ticks, stream, mark);
    b->own_tail = pos + k;
    atomic_store_explicit(&b->accepted, atomic_load_explicit(&b->accepted, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    /* release: commits the record; pairs with the acquire in the consumer's
     * refresh of cached_tail (bus.c, committed) */
    atomic_store_explicit(&b->tail, pos + k, memory_order_release);
    return CBT_OK;
}

#endif /* CBT_HOST_INTERNAL_BUS_H */
