/* host/util/span_queue.c — owns the compact span record and the byte ring
 * that holds them (internal/span_queue.h): sizing a record, writing it, expanding it
 * back into a cbt_span.
 *
 * Record layout, at an 8-aligned position of the ring:
 *   uint32 size      bytes of the record, header included, a multiple of 8
 *   uint32 kind      REC_SPAN, or REC_SKIP (the bytes up to the ring's end
 *                    are unused; the next record is at the start)
 *   head             the cbt_span's bytes before `attrs`, n_attrs and
 *                    n_events clamped to their bounds
 *   attrs[n_attrs], events[n_events], arena[0..arena_bytes)
 * where arena_bytes is the extent of the arena the span uses: arena_used,
 * or the end of a string attribute that lies past it (but inside the
 * arena). The expansion is exact for every byte an encoder reads.
 */
#include "internal/span_queue.h"
#include "internal/arrays.h"

#include <stdlib.h>
#include <string.h>

/* REC_SPAN_ARRAYS: a span with array attributes; the record holds one
 * reference to each of its arrays, let go when the record is released. */
enum { REC_SPAN = 1, REC_SKIP = 2, REC_SPAN_ARRAYS = 3 };

#define HEAD_BYTES offsetof(cbt_span, attrs)

typedef struct rec_hdr {
    uint32_t size;
    uint32_t kind;
} rec_hdr;

static inline size_t align8(size_t n) { return (n + 7u) & ~(size_t)7u; }

typedef struct rec_shape {
    uint32_t n_attrs, n_events, arena;
} rec_shape;

static rec_shape shape_of(const cbt_span *s)
{
    rec_shape r;
    r.n_attrs = s->n_attrs < CBT_SPAN_ATTR_MAX ? s->n_attrs : CBT_SPAN_ATTR_MAX;
    r.n_events = s->n_events < CBT_SPAN_EVENTS_MAX ? s->n_events : CBT_SPAN_EVENTS_MAX;
    uint32_t a = s->arena_used < CBT_SPAN_STR_ARENA ? s->arena_used : CBT_SPAN_STR_ARENA;
    for (uint32_t i = 0; i < r.n_attrs; i++) {
        const cbt_attr *at = &s->attrs[i];
        uint32_t end = (uint32_t)at->str_off + at->str_len;
        if (at->type == CBT_META_STR && end > a && end <= CBT_SPAN_STR_ARENA)
            a = end;
    }
    r.arena = a;
    return r;
}

static size_t size_of_shape(rec_shape r)
{
    return align8(CBT_SPANQ_HEADER + HEAD_BYTES + r.n_attrs * sizeof(cbt_attr) +
                  r.n_events * sizeof(cbt_span_event) + r.arena);
}

size_t cbt_spanq_record_size(const cbt_span *s) { return size_of_shape(shape_of(s)); }

cbt_status cbt_spanq_init(cbt_spanq *q, size_t bytes)
{
    memset(q, 0, sizeof *q);
    if (bytes < 2 * CBT_SPANQ_RECORD_MAX)
        bytes = 2 * CBT_SPANQ_RECORD_MAX;
    bytes = align8(bytes);
    q->buf = malloc(bytes);
    if (!q->buf)
        return CBT_ERR_NOMEM;
    q->size = bytes;
    return CBT_OK;
}

void cbt_spanq_free(cbt_spanq *q)
{
    if (q->buf)
        cbt_spanq_release(q, q->tail);
    free(q->buf);
    memset(q, 0, sizeof *q);
}

static inline void put_hdr(uint8_t *p, uint32_t size, uint32_t kind)
{
    rec_hdr h = {size, kind};
    memcpy(p, &h, sizeof h);
}

static inline rec_hdr get_hdr(const uint8_t *p)
{
    rec_hdr h;
    memcpy(&h, p, sizeof h);
    return h;
}

int cbt_spanq_push(cbt_spanq *q, const cbt_span *s)
{
    rec_shape r = shape_of(s);
    size_t rec = size_of_shape(r);
    size_t pos = (size_t)(q->tail % q->size);
    size_t to_end = q->size - pos;
    size_t need = rec <= to_end ? rec : to_end + rec; /* a skip, then the record at 0 */
    if (need > q->size - cbt_spanq_used(q))
        return 0;
    if (rec > to_end) {
        put_hdr(q->buf + pos, (uint32_t)to_end, REC_SKIP);
        q->tail += to_end;
        pos = 0;
    }
    uint8_t *w = q->buf + pos;
    int arrays = (s->flags & CBT_SPANF_ARRAYS) != 0;
    if (arrays)
        cbt_arrays_ref_span_(s);
    put_hdr(w, (uint32_t)rec, arrays ? REC_SPAN_ARRAYS : REC_SPAN);
    w += CBT_SPANQ_HEADER;
    memcpy(w, s, HEAD_BYTES);
    uint16_t na = (uint16_t)r.n_attrs;
    uint8_t ne = (uint8_t)r.n_events;
    memcpy(w + offsetof(cbt_span, n_attrs), &na, sizeof na); /* the clamped counts */
    memcpy(w + offsetof(cbt_span, n_events), &ne, sizeof ne);
    w += HEAD_BYTES;
    memcpy(w, s->attrs, r.n_attrs * sizeof(cbt_attr));
    w += r.n_attrs * sizeof(cbt_attr);
    memcpy(w, s->events, r.n_events * sizeof(cbt_span_event));
    w += r.n_events * sizeof(cbt_span_event);
    memcpy(w, s->arena, r.arena);
    q->tail += rec;
    return 1;
}

/* The position of the span record at or after `pos` (past a skip). */
static uint64_t span_at(const cbt_spanq *q, uint64_t pos)
{
    rec_hdr h = get_hdr(q->buf + pos % q->size);
    return h.kind == REC_SKIP ? pos + h.size : pos;
}

void cbt_spanq_release(cbt_spanq *q, uint64_t pos)
{
    while (q->head < pos) {
        const uint8_t *p = q->buf + q->head % q->size;
        rec_hdr h = get_hdr(p);
        if (h.kind == REC_SPAN_ARRAYS) {
            uint16_t na;
            memcpy(&na, p + CBT_SPANQ_HEADER + offsetof(cbt_span, n_attrs), sizeof na);
            const uint8_t *a = p + CBT_SPANQ_HEADER + HEAD_BYTES;
            for (uint32_t i = 0; i < na; i++, a += sizeof(cbt_attr)) {
                cbt_attr at;
                memcpy(&at, a, sizeof at);
                if (at.type == CBT_META_ARRAY)
                    cbt_arrays_unref_(at.v.arr.handle);
            }
        }
        q->head += h.size;
    }
}

uint64_t cbt_spanq_next(const cbt_spanq *q, uint64_t pos)
{
    pos = span_at(q, pos);
    return pos + get_hdr(q->buf + pos % q->size).size;
}

uint64_t cbt_spanq_read(const cbt_spanq *q, uint64_t pos, cbt_span *out)
{
    pos = span_at(q, pos);
    const uint8_t *p = q->buf + pos % q->size;
    rec_hdr h = get_hdr(p);
    p += CBT_SPANQ_HEADER;
    memcpy(out, p, HEAD_BYTES);
    p += HEAD_BYTES;
    size_t na = out->n_attrs, ne = out->n_events; /* clamped by push */
    memcpy(out->attrs, p, na * sizeof(cbt_attr));
    p += na * sizeof(cbt_attr);
    memcpy(out->events, p, ne * sizeof(cbt_span_event));
    p += ne * sizeof(cbt_span_event);
    size_t used = (size_t)(p - (q->buf + pos % q->size));
    size_t arena = h.size > used ? h.size - used : 0; /* the arena bytes, then padding */
    if (arena > CBT_SPAN_STR_ARENA)
        arena = CBT_SPAN_STR_ARENA;
    memcpy(out->arena, p, arena);
    return pos + h.size;
}
