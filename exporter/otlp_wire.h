/* exporter/otlp_wire.h — what the two OTLP encoders share: protobuf wire
 * primitives, UTF-8-repairing strings, and the resource and scope every
 * request carries. otlp_encode.c (traces) defines the functions below;
 * otlp_metrics.c (metrics) uses them, so a span and a metric point name the
 * same resource byte for byte.
 *
 * Writers take a pointer into a buffer the caller has already sized (from the
 * matching *_len function) and return the pointer past what they wrote; none
 * checks bounds or allocates.
 */
#ifndef CBT_EXPORTER_OTLP_WIRE_H
#define CBT_EXPORTER_OTLP_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "internal/json.h"
#include "cbt/otlp.h"

/* ---- protobuf wire primitives ------------------------------------------------------- */

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };
#define TAG(field, wt) (((field) << 3) | (wt))

static inline size_t vlen(uint64_t v)
{
    /* 1 + floor(log2(v|1)) / 7 */
    return (size_t)(((63 - __builtin_clzll(v | 1)) * 9 + 73) / 64);
}

static inline uint8_t *put_varint(uint8_t *w, uint64_t v)
{
    while (v >= 0x80) {
        *w++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *w++ = (uint8_t)v;
    return w;
}

static inline uint8_t *put_fixed64(uint8_t *w, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        w[i] = (uint8_t)(v >> (8 * i));
    return w + 8;
}

static inline uint8_t *put_fixed32(uint8_t *w, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        w[i] = (uint8_t)(v >> (8 * i));
    return w + 4;
}

/* A length-delimited field of `len` body bytes: tag + length + body. */
static inline size_t ld_size(size_t len) { return 1 + vlen(len) + len; }

static inline uint8_t *put_ld_head(uint8_t *w, unsigned field, size_t len)
{
    *w++ = (uint8_t)TAG(field, WT_LEN);
    return put_varint(w, len);
}

/* ---- buffers and strings (otlp_encode.c) ------------------------------------------------ */

/* Room for `extra` more bytes after b->len: CBT_OK or CBT_ERR_NOMEM. */
cbt_status cbt_otlp_buf_reserve(cbt_buf *b, size_t extra);

/* A string to write: `out` is its length after UTF-8 repair (== n when
 * valid; each byte that starts no valid sequence becomes U+FFFD, 3 bytes). */
typedef struct cbt_otlp_str {
    const char *p;
    uint32_t n;
    uint32_t out;
} cbt_otlp_str;

cbt_otlp_str cbt_otlp_str_of(const char *p, uint32_t n);
/* tag + length + the repaired bytes */
uint8_t *cbt_otlp_put_str(uint8_t *w, unsigned field, cbt_otlp_str s);

/* ---- resource and scope (otlp_encode.c; rules at its top) --------------------------------- */

/* The Resource message's body length, and the whole field (tag, length,
 * attributes) as `field` of the enclosing message. */
size_t cbt_otlp_pb_resource_len(const cbt_otlp_resource *r);
uint8_t *cbt_otlp_pb_put_resource(uint8_t *w, unsigned field, const cbt_otlp_resource *r);
/* InstrumentationScope {name "cbt", version CBT_VERSION_STRING}: body length
 * and the whole field. */
size_t cbt_otlp_pb_scope_len(void);
uint8_t *cbt_otlp_pb_put_scope(uint8_t *w, unsigned field);

/* OTLP/JSON: {"attributes":[...]} and {"name":"cbt","version":"..."}; a
 * string (quoted, escaped, repaired); an unsigned decimal. */
void cbt_otlp_json_resource(cbt_jbuf *b, const cbt_otlp_resource *r);
void cbt_otlp_json_scope(cbt_jbuf *b);
void cbt_otlp_json_str(cbt_jbuf *b, const char *s, size_t n);
void cbt_otlp_json_u64(cbt_jbuf *b, uint64_t v);

#endif /* CBT_EXPORTER_OTLP_WIRE_H */
