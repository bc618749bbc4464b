/* host/internal/json.h — owns cbt's small JSON writer: a bounded buffer, escaping, UTF-8 repair.
 *
 * Used by the JSON-lines span sink and the trace-file writers. Writes never
 * overrun: once the buffer is full, `need` keeps counting the bytes a complete
 * write would take, so callers can retry with a larger buffer.
 */
#ifndef CBT_HOST_INTERNAL_JSON_H
#define CBT_HOST_INTERNAL_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "cbt/span.h"

/* Upper bounds of what one span becomes in JSON, whatever it holds: a name
 * (CBT_NAME_LEN_MAX - 1 bytes, each escaped to at most 6), and a whole span
 * through cbt_span_to_json (fixed fields, the name, every attribute with its
 * key and value, every string byte escaped to at most 6, every event) when
 * it holds no arrays (CBT_SPANF_ARRAYS). The JSON-lines sink and the trace
 * file size their line buffers by it, so no span without arrays is ever too
 * long for them. An array's elements are in the array store (cbt/array.h),
 * bounded only by it: a span with arrays may need more, up to
 * CBT_SPAN_JSON_BIG_MAX, which those two outputs take from the heap for
 * that span alone; a span longer still is counted lost there. */
#define CBT_JSON_NAME_MAX (6 * (CBT_NAME_LEN_MAX - 1) + 2)
#define CBT_SPAN_JSON_MAX                                                               \
    (512 + CBT_JSON_NAME_MAX + CBT_SPAN_ATTR_MAX * (CBT_JSON_NAME_MAX + 32) +          \
     6 * CBT_SPAN_STR_ARENA + CBT_SPAN_EVENTS_MAX * (CBT_JSON_NAME_MAX + 128))

/* The longest line the span file and the trace file write (64 MiB: an
 * 8 M-element int array, 60 times a 128 k-token prompt). */
#define CBT_SPAN_JSON_BIG_MAX (64u << 20)

typedef struct cbt_jbuf {
    char *p;
    size_t cap;
    size_t need; /* bytes a complete write takes (may exceed cap) */
} cbt_jbuf;

void cbt_jbuf_raw(cbt_jbuf *b, const char *s, size_t n);
void cbt_jbuf_cstr(cbt_jbuf *b, const char *s);
void cbt_jbuf_fmt(cbt_jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A JSON string: quotes, escapes, and U+FFFD for each invalid UTF-8 sequence. */
void cbt_jbuf_str(cbt_jbuf *b, const char *s, size_t n);
/* Lowercase hex of n bytes, quoted. */
void cbt_jbuf_hex(cbt_jbuf *b, const uint8_t *p, size_t n);
/* A double that always reads back as a double: 1.0 not 1; NaN/Inf as strings. */
void cbt_jbuf_f64(cbt_jbuf *b, double v);
/* An array value as a plain JSON array of its elements, in order: ints as
 * integers, doubles as cbt_jbuf_f64 writes them, bools, strings as
 * cbt_jbuf_str writes them; [] when empty. */
struct cbt_array;
void cbt_jbuf_array(cbt_jbuf *b, const struct cbt_array *arr);
/* One attribute of span `s` as a JSON member, "key":value (a string out of
 * the arena's bounds, or an array not in the store, as null; an array as
 * cbt_jbuf_array writes it): the span file and the trace file write
 * attributes the same way. */
void cbt_jbuf_attr(cbt_jbuf *b, const cbt_span *s, const cbt_attr *a);

/* Length of the longest valid UTF-8 prefix sequence at s (1..4), or 0 when the
 * bytes at s do not start a valid sequence within n. */
size_t cbt_utf8_seq_len(const unsigned char *s, size_t n);

#endif /* CBT_HOST_INTERNAL_JSON_H */
