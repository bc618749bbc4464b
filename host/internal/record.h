/* host/internal/record.h — owns how an event is laid out as a variable-size
 * record of 64-byte cells: the one encoding of every queue that holds event
 * copies (each thread's lane and the shared bus, internal/bus.h; the CPU
 * stream's queued marks and the CUDA stream's pending marks, host/streams/),
 * and a plain FIFO of such records for a single-threaded holder (the CUDA
 * stream's pending marks).
 *
 * A record takes k whole cells (2 <= k <= CBT_REC_CELLS_MAX), is written from
 * the start of a cell and is contiguous in memory (the queues keep a slack of
 * CBT_REC_CELLS_MAX cells past their end for that, bus.h):
 *
 *   offset  bytes      what
 *   0       8          ticks: the publish stamp (clock.h)
 *   8       1          k, the record's cells
 *   9       1          CBT_RECF_MARK: the stream and mark pointers follow the head
 *   10      2          the event's str_used (its string bytes, below)
 *   12      4          zero
 *   16      88         the event's head and session (type .. session[64])
 *   104     16         [CBT_RECF_MARK] stream, mark (a pending CUDA mark)
 *   ...     24 * n     meta[0, n), n = n_meta
 *   ...     40         [CBT_EVF_TRACE] the trace block (cbt_event_trace, 38 bytes)
 *   ...     16         [CBT_EVF_ENQUEUED] enqueue_ns, stream, device (a stream's mark:
 *                      enqueue_ns in host ticks until the harvester maps it)
 *   ...     str_used   str[0, str_used): the long strings with their NULs
 *
 * So only what the event uses is copied: a 2-value event is 152 bytes (3
 * cells; 168, still 3, as a stream's reached mark), LMCache's cb.lookup.end
 * (12 values) with a 40-character model name 457 (8 cells), the largest
 * possible event 2608 (41). Every piece but
 * the string bytes is a constant-size copy, which the compiler turns into
 * vector moves rather than a memcpy call. Reading a record back writes only
 * those same parts of the cbt_event it fills; readers of an event never look
 * past n_meta and str_used (cbt/event.h).
 *
 * Nothing here commits a record or orders memory: that is the queue's job
 * (bus.h for the lanes and the bus, host/streams/stream.c for the CPU
 * stream's queue, a single thread for the FIFO below).
 */
#ifndef CBT_HOST_INTERNAL_RECORD_H
#define CBT_HOST_INTERNAL_RECORD_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cbt/event.h"
#include "cbt/status.h"

struct cbt_stream;

#define CBT_REC_CELL 64u /* bytes of a cell */
#define CBT_RECF_MARK 0x1u
/* The event's bytes every record carries: its head and session. */
#define CBT_REC_EV_HEAD offsetof(cbt_event, str_used)
/* The fixed part: 16 bytes of record head, then the event's head. */
#define CBT_REC_FIXED (16u + CBT_REC_EV_HEAD)
#define CBT_REC_MARK_BYTES 16u
#define CBT_REC_TRACE_BYTES ((sizeof(cbt_event_trace) + 7u) & ~(size_t)7u)
/* The stream block of CBT_EVF_ENQUEUED: enqueue_ns, stream, device. */
#define CBT_REC_ENQ_BYTES 16u
/* The most cells one record takes: every optional part at its largest. */
#define CBT_REC_CELLS_MAX                                                              \
    ((CBT_REC_FIXED + CBT_REC_MARK_BYTES + sizeof(cbt_meta) * CBT_EVENT_META_MAX +   \
      CBT_REC_TRACE_BYTES + CBT_REC_ENQ_BYTES + CBT_EVENT_STR_AREA + CBT_REC_CELL - 1) / \
     CBT_REC_CELL)

_Static_assert(CBT_REC_EV_HEAD == 88, "the event head is type .. session");
_Static_assert(sizeof(cbt_meta) == 24, "cbt_meta is 24 bytes");
_Static_assert(offsetof(cbt_event, meta) % 8 == 0, "meta is 8-byte aligned");
_Static_assert(CBT_EVENT_STR_AREA <= UINT16_MAX, "str_used is 16 bits");
_Static_assert(CBT_REC_CELLS_MAX <= UINT8_MAX, "k is 8 bits");
_Static_assert(offsetof(cbt_event, stream) == offsetof(cbt_event, enqueue_ns) + 8 &&
                   offsetof(cbt_event, device) == offsetof(cbt_event, enqueue_ns) + 12,
               "the stream block is one 16-byte copy");
_Static_assert(CBT_REC_ENQ_BYTES % CBT_EVF_ENQUEUED == 0, "the stream block is a multiple of its flag");

/* The values and string bytes an event says it holds, bounded by what it can
 * hold (an event built by hand may say more). */
static inline uint32_t cbt_rec_n_meta_(const cbt_event *ev)
{
    return ev->n_meta < CBT_EVENT_META_MAX ? ev->n_meta : CBT_EVENT_META_MAX;
}
static inline uint32_t cbt_rec_str_used_(const cbt_event *ev)
{
    return ev->str_used < CBT_EVENT_STR_AREA ? ev->str_used : CBT_EVENT_STR_AREA;
}

/* The size of the record of an event: its cells, and the values and string
 * bytes it carries (what the event says, bounded by what it can hold: an
 * event built by hand may say more). Worked out once, before the claim. */
typedef struct cbt_rec_size {
    uint32_t cells, n_meta, str_used;
} cbt_rec_size;

/* The size of the record of `ev` (with a stream mark when `mark`). On the
 * publish path, before the claim: kept short (one predicted branch for an
 * event that says more than it can hold; the trace block's and the stream
 * block's bytes as multiples of their flag bits). */
static inline cbt_rec_size cbt_rec_size_of(const cbt_event *ev, int mark)
{
    _Static_assert(CBT_REC_TRACE_BYTES % CBT_EVF_TRACE == 0, "the trace bytes are a multiple of its flag");
    cbt_rec_size z = {0, ev->n_meta, ev->str_used};
    if (__builtin_expect(z.n_meta > CBT_EVENT_META_MAX || z.str_used > CBT_EVENT_STR_AREA, 0)) {
        z.n_meta = cbt_rec_n_meta_(ev);
        z.str_used = cbt_rec_str_used_(ev);
    }
    uint32_t b = (uint32_t)CBT_REC_FIXED + (mark ? CBT_REC_MARK_BYTES : 0) +
                 (uint32_t)sizeof(cbt_meta) * z.n_meta +
                 (ev->flags & CBT_EVF_TRACE) * (uint32_t)(CBT_REC_TRACE_BYTES / CBT_EVF_TRACE) +
                 (ev->flags & CBT_EVF_ENQUEUED) * (CBT_REC_ENQ_BYTES / CBT_EVF_ENQUEUED) +
                 z.str_used;
    z.cells = (b + CBT_REC_CELL - 1) / CBT_REC_CELL;
    return z;
}

/* The cells the record of `ev` takes (with a stream mark when `mark`). */
static inline uint32_t cbt_rec_cells(const cbt_event *ev, int mark)
{
    return cbt_rec_size_of(ev, mark).cells;
}

/* Write the record of `ev` at `dst` (the start of a cell; z from
 * cbt_rec_size_of(ev, stream != NULL), all z.cells cells writable). */
static inline void cbt_rec_write(unsigned char *restrict dst, cbt_rec_size z,
                                 const cbt_event *restrict ev, uint64_t ticks,
                                 struct cbt_stream *stream, void *mark)
{
    /* restrict: the record never overlaps the event, so nothing read of ev
     * need be read again after a store */
    /* bytes 8..15 as one word: k, the mark flag, str_used, zero */
    uint64_t w = (uint64_t)z.cells | (stream ? (uint64_t)CBT_RECF_MARK << 8 : 0) |
                 (uint64_t)z.str_used << 16;
    memcpy(dst, &ticks, 8);
    memcpy(dst + 8, &w, 8);
    memcpy(dst + 16, ev, CBT_REC_EV_HEAD);
    if (__builtin_expect(ev->n_meta != z.n_meta, 0)) {
        /* n_meta as bounded, so that the reader agrees with the size */
        uint8_t n8 = (uint8_t)z.n_meta;
        memcpy(dst + 16 + offsetof(cbt_event, n_meta), &n8, 1);
    }
    unsigned char *p = dst + CBT_REC_FIXED;
    if (stream) {
        memcpy(p, &stream, sizeof stream);
        memcpy(p + 8, &mark, sizeof mark);
        p += CBT_REC_MARK_BYTES;
    }
    for (uint32_t i = 0; i < z.n_meta; i++, p += sizeof(cbt_meta))
        memcpy(p, &ev->meta[i], sizeof(cbt_meta));
    /* one test for both optional blocks: a plain publish carries neither */
    if (__builtin_expect((ev->flags & (CBT_EVF_TRACE | CBT_EVF_ENQUEUED)) != 0, 0)) {
        if (ev->flags & CBT_EVF_TRACE) {
            memcpy(p, &ev->trace, sizeof ev->trace);
            p += CBT_REC_TRACE_BYTES;
        }
        if (ev->flags & CBT_EVF_ENQUEUED) {
            memcpy(p, &ev->enqueue_ns, CBT_REC_ENQ_BYTES);
            p += CBT_REC_ENQ_BYTES;
        }
    }
    if (z.str_used)
        memcpy(p, ev->str, z.str_used);
}

/* The stamp and the cell count of the record at `src`. */
static inline uint64_t cbt_rec_ticks(const unsigned char *src)
{
    uint64_t t;
    memcpy(&t, src, 8);
    return t;
}
static inline uint32_t cbt_rec_cells_of(const unsigned char *src) { return src[8]; }

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the record head word is little-endian");

/* Read the record at `src` back into `ev` (only the parts it holds), its
 * stamp into *ticks and its mark into *stream / *mark (NULL when none).
 * Returns its cells. */
static inline uint32_t cbt_rec_read(const unsigned char *src, cbt_event *ev, uint64_t *ticks,
                                    struct cbt_stream **stream, void **mark)
{
    uint16_t s16;
    memcpy(ticks, src, 8);
    memcpy(&s16, src + 10, 2);
    memcpy(ev, src + 16, CBT_REC_EV_HEAD);
    ev->str_used = s16;
    const unsigned char *p = src + CBT_REC_FIXED;
    *stream = NULL;
    *mark = NULL;
    if (src[9] & CBT_RECF_MARK) {
        memcpy(stream, p, sizeof *stream);
        memcpy(mark, p + 8, sizeof *mark);
        p += CBT_REC_MARK_BYTES;
    }
    uint32_t n = cbt_rec_n_meta_(ev);
    for (uint32_t i = 0; i < n; i++, p += sizeof(cbt_meta))
        memcpy(&ev->meta[i], p, sizeof(cbt_meta));
    if (ev->flags & CBT_EVF_TRACE) {
        memcpy(&ev->trace, p, sizeof ev->trace);
        p += CBT_REC_TRACE_BYTES;
    }
    if (ev->flags & CBT_EVF_ENQUEUED) {
        memcpy(&ev->enqueue_ns, p, CBT_REC_ENQ_BYTES);
        p += CBT_REC_ENQ_BYTES;
    }
    if (s16)
        memcpy(ev->str, p, s16);
    return src[8];
}

/* Copy the used part of an event into another, without the flags in
 * `clear` (and the parts only they make valid, never read from src): the
 * same parts a record holds. */
static inline void cbt_event_copy_used_masked_(cbt_event *dst, const cbt_event *src,
                                               uint32_t clear)
{
    uint32_t n = cbt_rec_n_meta_(src), s = cbt_rec_str_used_(src);
    uint32_t flags = src->flags & ~clear;
    memcpy(dst, src, offsetof(cbt_event, meta));
    dst->flags = flags;
    for (uint32_t i = 0; i < n; i++)
        memcpy(&dst->meta[i], &src->meta[i], sizeof(cbt_meta));
    dst->n_meta = (uint8_t)n;
    dst->str_used = (uint16_t)s;
    if (flags & CBT_EVF_TRACE)
        memcpy(&dst->trace, &src->trace, sizeof src->trace);
    if (flags & CBT_EVF_ENQUEUED)
        memcpy(&dst->enqueue_ns, &src->enqueue_ns, CBT_REC_ENQ_BYTES);
    if (s)
        memcpy(dst->str, src->str, s);
}

/* Copy the used part of an event into another: the same parts a record
 * holds (the publish hook's copy, the stream backends' copies). */
static inline void cbt_event_copy_used_(cbt_event *dst, const cbt_event *src)
{
    cbt_event_copy_used_masked_(dst, src, 0);
}

/* ---- a FIFO of records, for one thread (or under its owner's lock) ----------------
 * `cells` cells plus a slack of CBT_REC_CELLS_MAX, positions counted in
 * cells as in the bus (bus.h): a record at position p starts at cell
 * p & mask and runs on into the slack when it starts near the end. */
typedef struct cbt_rec_fifo {
    unsigned char *cells; /* 64-byte aligned, inside raw */
    void *raw;
    uint64_t mask;       /* cells - 1 */
    uint64_t head, tail; /* positions: records in [head, tail) */
} cbt_rec_fifo;

/* cells: a power of two >= 64. CBT_ERR_INVAL / CBT_ERR_NOMEM. */
cbt_status cbt_rec_fifo_init(cbt_rec_fifo *f, uint32_t cells);
void cbt_rec_fifo_free(cbt_rec_fifo *f);
/* Append the record of `ev`, stamped `ticks`: CBT_ERR_FULL when its cells
 * are not free (nothing written). */
cbt_status cbt_rec_fifo_put(cbt_rec_fifo *f, const cbt_event *ev, uint64_t ticks);
/* The oldest record into `ev` (and *ticks); there must be one (its owner
 * knows: the streams count their marks). It stays until cbt_rec_fifo_drop.
 * Reads `head` and the record alone, never `tail`. */
void cbt_rec_fifo_oldest(const cbt_rec_fifo *f, cbt_event *ev, uint64_t *ticks);
/* Free the oldest record (there must be one). */
void cbt_rec_fifo_drop(cbt_rec_fifo *f);
/* Free every record. */
static inline void cbt_rec_fifo_clear(cbt_rec_fifo *f) { f->head = f->tail; }

#endif /* CBT_HOST_INTERNAL_RECORD_H */
