/* exporter/otlp_encode.c — owns OTLP encoding of finished spans (otlp.h):
 * ExportTraceServiceRequest as protobuf bytes and as OTLP/JSON, and the
 * default resource. The wire primitives, strings, resource and scope are
 * shared with the metrics encoder (otlp_wire.h, exporter/otlp_metrics.c).
 *
 * Protobuf: a writer of our own, not protobuf-c (the generated code in
 * exporter/proto/ is only the tests' decoder). Field numbers and wire types
 * are those of exporter/proto/ (upstream opentelemetry-proto); keep the two
 * in step. Two passes, no allocation per span: the first sums every span's
 * exact encoded size (so the enclosing ResourceSpans / ScopeSpans lengths are
 * known and written minimal), the buffer grows once, the second writes.
 * Per span both passes build a small plan on the stack (attribute list,
 * string lengths after UTF-8 repair, nested lengths); a string is checked
 * for UTF-8 eight bytes at a time and copied with memcpy when valid.
 *
 * What goes out for a span:
 *   trace_id (16 bytes), span_id (8), parent_span_id (8, roots: omitted),
 *   name, kind, start/end_time_unix_nano (fixed64),
 *   attributes: int -> int_value, double -> double_value, bool ->
 *     bool_value, string -> string_value; an attribute that cannot be
 *     encoded (no key, unknown type, string outside the span's arena) is
 *     left out and counted as dropped,
 *   cbt.incomplete = true for CBT_SPANF_INCOMPLETE spans (an attribute of
 *     that key already on the span is replaced by it),
 *   dropped_attributes_count = attrs_dropped (at least 1 when the span is
 *     flagged CBT_SPANF_ATTRS_DROPPED) plus the ones left out above (an
 *     attribute tagged with an event the span does not hold among them),
 *   events (field 11), in the order they were added: Span.Event {
 *     time_unix_nano (fixed64), name, attributes (typed as the span's),
 *     dropped_attributes_count = the event's attrs_dropped plus its
 *     attributes left out as above },
 *   dropped_events_count (field 12) = events_dropped,
 *   status { code } when the status is not UNSET (no message),
 *   flags (field 16, fixed32) = the W3C trace flags (bit 0: sampled). Bits
 *     8-9 (SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE / IS_REMOTE) stay clear, i.e.
 *     "unknown": a subscriber may start a span under any context, including
 *     one that came from another process, and the span does not record it.
 * A string cut to fit the span (CBT_SPANF_ATTRS_TRUNCATED) goes out as
 * stored, ending in CBT_SPAN_TRUNC_MARK: OTLP has no count of truncated
 * values (OpenTelemetry SDKs truncate over-long values silently).
 * Proto3 defaults (zero kind, zero times, zero counts, zero flags, empty
 * name) are not written; an AnyValue's oneof member always is (false, 0 and
 * "" included).
 *
 * Resource attributes, in this order:
 *   service.name          r->service_name ("cbt" when empty)
 *   service.instance.id   r->service_instance_id (left out when empty)
 *   host.name             r->host_name (left out when empty)
 *   process.pid           r->pid, an int (left out when <= 0)
 *   cbt.gpu.name          r->gpu_name (left out when empty). OTel semantic
 *                         conventions have no resource key for a GPU's
 *                         model, so it lives in cbt's own namespace, as
 *                         cbt.incomplete does.
 *   r->extra[0..n_extra)  string values (OTEL_RESOURCE_ATTRIBUTES)
 * Keys are unique: an extra with the key of a built-in one replaces it
 * (the environment overrides what was detected), except service.name, where
 * r->service_name wins (OTEL_SERVICE_NAME's precedence; whoever fills the
 * resource puts the service name there). Between extras, the last wins.
 *
 * Scope: name "cbt", version CBT_VERSION_STRING. Zero spans still give one
 * ResourceSpans with one (empty) ScopeSpans.
 *
 * OTLP/JSON: the same content through the proto3 JSON mapping with OTLP's
 * exceptions: camelCase keys, trace/span ids as lowercase hex, int64 /
 * fixed64 (intValue, *TimeUnixNano) as decimal strings, enums (kind, code)
 * and 32-bit counts / flags as numbers, doubles as numbers (NaN and the
 * infinities as the strings "NaN", "Infinity", "-Infinity").
 *
 * Strings that are not valid UTF-8 are repaired in both: each byte that does
 * not start a valid sequence becomes U+FFFD (cbt_utf8_seq_len decides, as
 * for the JSON-lines sink).
 */
#include "cbt/otlp.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "internal/json.h"
#include "otlp_private.h"
#include "otlp_wire.h"

#ifdef CBT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

/* protobuf's own limit on a message; a request over it is refused */
#define OTLP_PB_MAX ((size_t)INT32_MAX)

/* ---- the byte buffer --------------------------------------------------------- */

void cbt_buf_free(cbt_buf *b)
{
    if (!b)
        return;
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

cbt_status cbt_otlp_buf_reserve(cbt_buf *b, size_t extra)
{
    if (extra > SIZE_MAX - b->len)
        return CBT_ERR_NOMEM;
    size_t need = b->len + extra;
    if (need <= b->cap)
        return CBT_OK;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    uint8_t *p = realloc(b->data, cap);
    if (!p)
        return CBT_ERR_NOMEM;
    b->data = p;
    b->cap = cap;
    return CBT_OK;
}

/* ---- strings: UTF-8 check and repair ------------------------------------------- */

static const uint8_t k_fffd[3] = {0xEF, 0xBF, 0xBD};

/* A string to write (otlp_wire.h): `out` is its length after repair. */
typedef cbt_otlp_str str_ref;

static uint32_t utf8_repaired_len(const char *s, uint32_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    uint32_t i = 0;
    /* ASCII fast path, eight bytes at a time */
    while (i + 8 <= n) {
        uint64_t w;
        memcpy(&w, u + i, 8);
        if (w & 0x8080808080808080ull)
            break;
        i += 8;
    }
    uint32_t out = i;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            out++;
            continue;
        }
        size_t l = cbt_utf8_seq_len(u + i, n - i);
        if (l == 0) {
            i++;
            out += 3;
        } else {
            i += (uint32_t)l;
            out += (uint32_t)l;
        }
    }
    return out;
}

static inline str_ref mkstr(const char *p, uint32_t n)
{
    str_ref r = {p, n, utf8_repaired_len(p, n)};
    return r;
}

static uint8_t *put_str_bytes(uint8_t *w, str_ref s)
{
    if (s.out == s.n) {
        memcpy(w, s.p, s.n);
        return w + s.n;
    }
    const unsigned char *u = (const unsigned char *)s.p;
    uint32_t i = 0;
    while (i < s.n) {
        if (u[i] < 0x80) {
            *w++ = u[i++];
            continue;
        }
        size_t l = cbt_utf8_seq_len(u + i, s.n - i);
        if (l == 0) {
            memcpy(w, k_fffd, 3);
            w += 3;
            i++;
        } else {
            memcpy(w, u + i, l);
            w += l;
            i += (uint32_t)l;
        }
    }
    return w;
}

/* ---- protobuf: strings (the wire primitives are in otlp_wire.h) ------------------------- */

static inline uint8_t *put_str_field(uint8_t *w, unsigned field, str_ref s)
{
    w = put_ld_head(w, field, s.out);
    return put_str_bytes(w, s);
}

/* ---- the attribute list both encoders write ---------------------------------------------- */

/* cbt_meta_type values (cbt/event.h) */
typedef struct attr_plan {
    str_ref key;
    uint8_t type;
    uint8_t owner;     /* 0: the span; k: event k - 1 */
    str_ref sval;      /* CBT_META_STR */
    int64_t i;
    double d;
    bool b;
    uint32_t any_len;  /* AnyValue body */
    uint32_t kv_len;   /* KeyValue body */
} attr_plan;

typedef struct event_plan {
    str_ref name;
    uint32_t dropped;
    size_t body; /* Span.Event message length (protobuf) */
} event_plan;

typedef struct span_plan {
    str_ref name;
    attr_plan a[CBT_SPAN_ATTR_MAX + 1]; /* the span's and its events', in span order */
    uint32_t n;
    uint32_t dropped;
    event_plan ev[CBT_SPAN_EVENTS_MAX];
    uint32_t n_ev;
    bool has_parent;
    size_t body; /* Span message length (protobuf) */
} span_plan;

static inline bool nonzero(const uint8_t *p, size_t n)
{
    uint8_t acc = 0;
    for (size_t i = 0; i < n; i++)
        acc |= p[i];
    return acc != 0;
}

static inline str_ref name_ref(cbt_name n)
{
    return mkstr(cbt_name_str(n), cbt_name_len(n));
}

static void kv_sizes(attr_plan *a)
{
    switch (a->type) {
    case CBT_META_I64: a->any_len = (uint32_t)(1 + vlen((uint64_t)a->i)); break;
    case CBT_META_F64: a->any_len = 9; break;
    case CBT_META_BOOL: a->any_len = 2; break;
    default: a->any_len = (uint32_t)ld_size(a->sval.out); break;
    }
    a->kv_len = (uint32_t)(ld_size(a->key.out) + ld_size(a->any_len));
}

/* The attributes and events to write, with their sizes; the span's size
 * when `pb`. */
static void plan_span(const cbt_span *s, span_plan *p, bool pb)
{
    p->name = name_ref(s->name);
    p->has_parent = nonzero(s->parent_span_id, 8);
    bool incomplete = (s->flags & CBT_SPANF_INCOMPLETE) != 0;
    uint32_t dropped = s->attrs_dropped;
    if (!dropped && (s->flags & CBT_SPANF_ATTRS_DROPPED))
        dropped = 1;
    p->n_ev = s->n_events < CBT_SPAN_EVENTS_MAX ? s->n_events : CBT_SPAN_EVENTS_MAX;
    for (uint32_t e = 0; e < p->n_ev; e++) {
        p->ev[e].name = name_ref(s->events[e].name);
        p->ev[e].dropped = s->events[e].attrs_dropped;
        p->ev[e].body = 0;
    }
    uint32_t na = s->n_attrs < CBT_SPAN_ATTR_MAX ? s->n_attrs : CBT_SPAN_ATTR_MAX;
    uint32_t k = 0;
    for (uint32_t i = 0; i < na; i++) {
        const cbt_attr *at = &s->attrs[i];
        if (at->owner > p->n_ev) {
            dropped++; /* tagged with an event the span does not hold */
            continue;
        }
        uint32_t *drop = at->owner ? &p->ev[at->owner - 1].dropped : &dropped;
        if (incomplete && at->owner == 0 && at->key == CBT_N_INCOMPLETE)
            continue; /* replaced below */
        uint32_t klen = cbt_name_len(at->key);
        attr_plan *a = &p->a[k];
        a->type = at->type;
        a->owner = at->owner;
        switch (at->type) {
        case CBT_META_I64: a->i = at->v.i64; break;
        case CBT_META_F64: a->d = at->v.f64; break;
        case CBT_META_BOOL: a->b = at->v.b; break;
        case CBT_META_STR:
            if ((uint32_t)at->str_off + at->str_len > CBT_SPAN_STR_ARENA) {
                (*drop)++;
                continue;
            }
            a->sval = mkstr(s->arena + at->str_off, at->str_len);
            break;
        default: (*drop)++; continue;
        }
        if (klen == 0) {
            (*drop)++;
            continue;
        }
        a->key = mkstr(cbt_name_str(at->key), klen);
        if (pb) {
            kv_sizes(a);
            if (a->owner)
                p->ev[a->owner - 1].body += ld_size(a->kv_len);
        }
        k++;
    }
    if (incomplete) {
        attr_plan *a = &p->a[k++];
        a->key = name_ref(CBT_N_INCOMPLETE);
        a->type = CBT_META_BOOL;
        a->owner = 0;
        a->b = true;
        if (pb)
            kv_sizes(a);
    }
    p->n = k;
    p->dropped = dropped;
    if (!pb)
        return;
    size_t z = 18 + 10; /* trace_id, span_id */
    if (p->has_parent)
        z += 10;
    if (p->name.out)
        z += ld_size(p->name.out);
    if (s->kind)
        z += 1 + vlen(s->kind);
    if (s->start_ns)
        z += 9;
    if (s->end_ns)
        z += 9;
    for (uint32_t i = 0; i < k; i++)
        if (p->a[i].owner == 0)
            z += ld_size(p->a[i].kv_len);
    if (dropped)
        z += 1 + vlen(dropped);
    for (uint32_t e = 0; e < p->n_ev; e++) {
        event_plan *ev = &p->ev[e];
        if (s->events[e].time_ns)
            ev->body += 9;
        if (ev->name.out)
            ev->body += ld_size(ev->name.out);
        if (ev->dropped)
            ev->body += 1 + vlen(ev->dropped);
        z += ld_size(ev->body);
    }
    if (s->events_dropped)
        z += 1 + vlen(s->events_dropped);
    if (s->status)
        z += 2 + (1 + vlen(s->status)); /* status { code } */
    if (s->ctx.trace_flags)
        z += 2 + 4; /* field 16: a two-byte tag */
    p->body = z;
}

static uint8_t *put_kv(uint8_t *w, unsigned field, const attr_plan *a)
{
    w = put_ld_head(w, field, a->kv_len);
    w = put_str_field(w, 1, a->key);   /* KeyValue.key */
    w = put_ld_head(w, 2, a->any_len); /* KeyValue.value */
    switch (a->type) {
    case CBT_META_I64:
        *w++ = TAG(3, WT_VARINT); /* AnyValue.int_value */
        w = put_varint(w, (uint64_t)a->i);
        break;
    case CBT_META_F64: {
        uint64_t bits;
        memcpy(&bits, &a->d, 8);
        *w++ = TAG(4, WT_I64); /* AnyValue.double_value */
        w = put_fixed64(w, bits);
        break;
    }
    case CBT_META_BOOL:
        *w++ = TAG(2, WT_VARINT); /* AnyValue.bool_value */
        *w++ = a->b ? 1 : 0;
        break;
    default:
        w = put_str_field(w, 1, a->sval); /* AnyValue.string_value */
        break;
    }
    return w;
}

static uint8_t *put_span(uint8_t *w, const cbt_span *s, const span_plan *p)
{
    w = put_ld_head(w, 1, 16); /* trace_id */
    memcpy(w, s->ctx.trace_id, 16);
    w += 16;
    w = put_ld_head(w, 2, 8); /* span_id */
    memcpy(w, s->ctx.span_id, 8);
    w += 8;
    if (p->has_parent) {
        w = put_ld_head(w, 4, 8); /* parent_span_id */
        memcpy(w, s->parent_span_id, 8);
        w += 8;
    }
    if (p->name.out)
        w = put_str_field(w, 5, p->name);
    if (s->kind) {
        *w++ = TAG(6, WT_VARINT);
        w = put_varint(w, s->kind);
    }
    if (s->start_ns) {
        *w++ = TAG(7, WT_I64);
        w = put_fixed64(w, s->start_ns);
    }
    if (s->end_ns) {
        *w++ = TAG(8, WT_I64);
        w = put_fixed64(w, s->end_ns);
    }
    for (uint32_t i = 0; i < p->n; i++)
        if (p->a[i].owner == 0)
            w = put_kv(w, 9, &p->a[i]);
    if (p->dropped) {
        *w++ = TAG(10, WT_VARINT);
        w = put_varint(w, p->dropped);
    }
    for (uint32_t e = 0; e < p->n_ev; e++) {
        const event_plan *ev = &p->ev[e];
        w = put_ld_head(w, 11, ev->body); /* Span.events */
        if (s->events[e].time_ns) {
            *w++ = TAG(1, WT_I64); /* Event.time_unix_nano */
            w = put_fixed64(w, s->events[e].time_ns);
        }
        if (ev->name.out)
            w = put_str_field(w, 2, ev->name); /* Event.name */
        for (uint32_t i = 0; i < p->n; i++)
            if (p->a[i].owner == e + 1)
                w = put_kv(w, 3, &p->a[i]); /* Event.attributes */
        if (ev->dropped) {
            *w++ = TAG(4, WT_VARINT); /* Event.dropped_attributes_count */
            w = put_varint(w, ev->dropped);
        }
    }
    if (s->events_dropped) {
        *w++ = TAG(12, WT_VARINT); /* dropped_events_count */
        w = put_varint(w, s->events_dropped);
    }
    if (s->status) {
        w = put_ld_head(w, 15, 1 + vlen(s->status)); /* Status */
        *w++ = TAG(3, WT_VARINT);                     /* Status.code */
        w = put_varint(w, s->status);
    }
    if (s->ctx.trace_flags) {
        w = put_varint(w, TAG(16u, WT_I32)); /* flags: tag 0x85 0x01 */
        w = put_fixed32(w, s->ctx.trace_flags);
    }
    return w;
}

/* ---- resource and scope --------------------------------------------------------------- */

#define RES_MAX (5 + CBT_OTLP_MAX_ATTRS)

typedef struct res_plan {
    attr_plan a[RES_MAX];
    uint32_t n;
    size_t body; /* Resource message length */
} res_plan;

static str_ref fixed_str(const char *s)
{
    return mkstr(s, (uint32_t)strnlen(s, CBT_OTLP_STR_MAX));
}

static bool str_eq(str_ref a, const char *b)
{
    size_t n = strlen(b);
    return a.n == n && memcmp(a.p, b, n) == 0;
}

static bool str_eq2(str_ref a, str_ref b)
{
    return a.n == b.n && memcmp(a.p, b.p, a.n) == 0;
}

/* Is `key` among the usable extras (non-empty key)? */
static bool extra_has(const cbt_otlp_resource *r, uint32_t n_extra, const char *key)
{
    for (uint32_t i = 0; i < n_extra; i++)
        if (strncmp(r->extra[i].key, key, CBT_OTLP_STR_MAX) == 0)
            return true;
    return false;
}

static void res_add_str(res_plan *p, const char *key, str_ref v)
{
    attr_plan *a = &p->a[p->n++];
    a->key = mkstr(key, (uint32_t)strlen(key));
    a->type = CBT_META_STR;
    a->sval = v;
}

static void plan_resource(const cbt_otlp_resource *r, res_plan *p)
{
    p->n = 0;
    uint32_t ne = r->n_extra < CBT_OTLP_MAX_ATTRS ? r->n_extra : CBT_OTLP_MAX_ATTRS;
    str_ref v = fixed_str(r->service_name);
    res_add_str(p, "service.name", v.n ? v : mkstr("cbt", 3));
    v = fixed_str(r->service_instance_id);
    if (v.n && !extra_has(r, ne, "service.instance.id"))
        res_add_str(p, "service.instance.id", v);
    v = fixed_str(r->host_name);
    if (v.n && !extra_has(r, ne, "host.name"))
        res_add_str(p, "host.name", v);
    if (r->pid > 0 && !extra_has(r, ne, "process.pid")) {
        attr_plan *a = &p->a[p->n++];
        a->key = mkstr("process.pid", 11);
        a->type = CBT_META_I64;
        a->i = r->pid;
    }
    v = fixed_str(r->gpu_name);
    if (v.n && !extra_has(r, ne, "cbt.gpu.name"))
        res_add_str(p, "cbt.gpu.name", v);
    for (uint32_t i = 0; i < ne; i++) {
        str_ref k = fixed_str(r->extra[i].key);
        if (!k.n || str_eq(k, "service.name"))
            continue;
        bool later = false;
        for (uint32_t j = i + 1; j < ne && !later; j++)
            later = str_eq2(k, fixed_str(r->extra[j].key));
        if (later)
            continue; /* the last one wins */
        attr_plan *a = &p->a[p->n++];
        a->key = k;
        a->type = CBT_META_STR;
        a->sval = fixed_str(r->extra[i].value);
    }
    size_t z = 0;
    for (uint32_t i = 0; i < p->n; i++) {
        kv_sizes(&p->a[i]);
        z += ld_size(p->a[i].kv_len);
    }
    p->body = z;
}

static const char k_scope_name[] = "cbt";
static const char k_scope_version[] = CBT_VERSION_STRING;

/* ---- what otlp_metrics.c shares (otlp_wire.h) ----------------------------------------------- */

cbt_otlp_str cbt_otlp_str_of(const char *p, uint32_t n) { return mkstr(p, n); }

uint8_t *cbt_otlp_put_str(uint8_t *w, unsigned field, cbt_otlp_str s)
{
    return put_str_field(w, field, s);
}

size_t cbt_otlp_pb_resource_len(const cbt_otlp_resource *r)
{
    res_plan rp;
    plan_resource(r, &rp);
    return rp.body;
}

uint8_t *cbt_otlp_pb_put_resource(uint8_t *w, unsigned field, const cbt_otlp_resource *r)
{
    res_plan rp;
    plan_resource(r, &rp);
    w = put_ld_head(w, field, rp.body);
    for (uint32_t i = 0; i < rp.n; i++)
        w = put_kv(w, 1, &rp.a[i]); /* Resource.attributes */
    return w;
}

size_t cbt_otlp_pb_scope_len(void)
{
    return ld_size(sizeof k_scope_name - 1) + ld_size(sizeof k_scope_version - 1);
}

uint8_t *cbt_otlp_pb_put_scope(uint8_t *w, unsigned field)
{
    w = put_ld_head(w, field, cbt_otlp_pb_scope_len());
    w = put_str_field(w, 1, mkstr(k_scope_name, sizeof k_scope_name - 1));       /* name */
    return put_str_field(w, 2, mkstr(k_scope_version, sizeof k_scope_version - 1)); /* version */
}

/* ---- protobuf: the request ---------------------------------------------------------------- */

/* The spans of an array (cbt_otlp_span_at). */
static const cbt_span *array_at(void *ctx, size_t i, cbt_span *scratch)
{
    (void)scratch;
    return (const cbt_span *)ctx + i;
}

cbt_status cbt_otlp_encode_proto(const cbt_otlp_resource *r, const cbt_span *spans, size_t n,
                                 cbt_buf *out)
{
    if (n && !spans)
        return CBT_ERR_INVAL;
    return cbt_otlp_encode_proto_at_(r, n, array_at, (void *)(uintptr_t)spans, out);
}

cbt_status cbt_otlp_encode_proto_at_(const cbt_otlp_resource *r, size_t n, cbt_otlp_span_at at,
                                     void *ctx, cbt_buf *out)
{
    if (!r || !out || (n && !at))
        return CBT_ERR_INVAL;
    cbt_span scratch; /* only its used parts are ever written or read */
    res_plan rp;
    plan_resource(r, &rp);
    str_ref sname = mkstr(k_scope_name, sizeof k_scope_name - 1);
    str_ref sver = mkstr(k_scope_version, sizeof k_scope_version - 1);
    size_t scope_len = ld_size(sname.out) + ld_size(sver.out);

    /* pass 1: the spans' sizes */
    span_plan sp;
    size_t spans_len = 0;
    for (size_t i = 0; i < n; i++) {
        plan_span(at(ctx, i, &scratch), &sp, true);
        spans_len += ld_size(sp.body);
        if (spans_len > OTLP_PB_MAX)
            return CBT_ERR_INVAL;
    }
    size_t ss_len = ld_size(scope_len) + spans_len;   /* ScopeSpans */
    size_t rs_len = ld_size(rp.body) + ld_size(ss_len); /* ResourceSpans */
    size_t total = ld_size(rs_len);                     /* ExportTraceServiceRequest */
    if (total > OTLP_PB_MAX)
        return CBT_ERR_INVAL;
    cbt_status st = cbt_otlp_buf_reserve(out, total);
    if (st != CBT_OK)
        return st;

    /* pass 2: write */
    uint8_t *w = out->data + out->len;
    uint8_t *const w0 = w;
    w = put_ld_head(w, 1, rs_len);  /* ExportTraceServiceRequest.resource_spans */
    w = put_ld_head(w, 1, rp.body); /* ResourceSpans.resource */
    for (uint32_t i = 0; i < rp.n; i++)
        w = put_kv(w, 1, &rp.a[i]); /* Resource.attributes */
    w = put_ld_head(w, 2, ss_len);    /* ResourceSpans.scope_spans */
    w = put_ld_head(w, 1, scope_len); /* ScopeSpans.scope */
    w = put_str_field(w, 1, sname);   /* InstrumentationScope.name */
    w = put_str_field(w, 2, sver);    /* InstrumentationScope.version */
    for (size_t i = 0; i < n; i++) {
        const cbt_span *s = at(ctx, i, &scratch);
        plan_span(s, &sp, true);
        w = put_ld_head(w, 2, sp.body); /* ScopeSpans.spans */
        w = put_span(w, s, &sp);
    }
    out->len += (size_t)(w - w0);
    return CBT_OK;
}

/* ---- OTLP/JSON --------------------------------------------------------------------------- */

static inline void j_lit(cbt_jbuf *b, const char *s, size_t n) { cbt_jbuf_raw(b, s, n); }
#define J(b, lit) j_lit((b), (lit), sizeof(lit) - 1)

/* A string: printable ASCII without quote or backslash goes out in one copy;
 * anything else through the escaping, repairing writer. */
static void j_str(cbt_jbuf *b, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n; i++) {
        if (u[i] < 0x20 || u[i] >= 0x7F || u[i] == '"' || u[i] == '\\') {
            cbt_jbuf_str(b, s, n);
            return;
        }
    }
    char q = '"';
    cbt_jbuf_raw(b, &q, 1);
    cbt_jbuf_raw(b, s, n);
    cbt_jbuf_raw(b, &q, 1);
}

static void j_u64(cbt_jbuf *b, uint64_t v)
{
    char tmp[20];
    size_t i = sizeof tmp;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    cbt_jbuf_raw(b, tmp + i, sizeof tmp - i);
}

static void j_i64(cbt_jbuf *b, int64_t v)
{
    if (v < 0) {
        J(b, "-");
        j_u64(b, (uint64_t)0 - (uint64_t)v);
    } else {
        j_u64(b, (uint64_t)v);
    }
}

static void j_kv(cbt_jbuf *b, const attr_plan *a)
{
    J(b, "{\"key\":");
    j_str(b, a->key.p, a->key.n);
    switch (a->type) {
    case CBT_META_I64:
        J(b, ",\"value\":{\"intValue\":\"");
        j_i64(b, a->i);
        J(b, "\"}}");
        break;
    case CBT_META_F64:
        J(b, ",\"value\":{\"doubleValue\":");
        cbt_jbuf_f64(b, a->d);
        J(b, "}}");
        break;
    case CBT_META_BOOL:
        if (a->b)
            J(b, ",\"value\":{\"boolValue\":true}}");
        else
            J(b, ",\"value\":{\"boolValue\":false}}");
        break;
    default:
        J(b, ",\"value\":{\"stringValue\":");
        j_str(b, a->sval.p, a->sval.n);
        J(b, "}}");
        break;
    }
}

void cbt_otlp_json_str(cbt_jbuf *b, const char *s, size_t n) { j_str(b, s, n); }
void cbt_otlp_json_u64(cbt_jbuf *b, uint64_t v) { j_u64(b, v); }

void cbt_otlp_json_resource(cbt_jbuf *b, const cbt_otlp_resource *r)
{
    res_plan rp;
    plan_resource(r, &rp);
    J(b, "{\"attributes\":[");
    for (uint32_t i = 0; i < rp.n; i++) {
        if (i)
            J(b, ",");
        j_kv(b, &rp.a[i]);
    }
    J(b, "]}");
}

void cbt_otlp_json_scope(cbt_jbuf *b)
{
    J(b, "{\"name\":");
    j_str(b, k_scope_name, sizeof k_scope_name - 1);
    J(b, ",\"version\":");
    j_str(b, k_scope_version, sizeof k_scope_version - 1);
    J(b, "}");
}

/* ,"attributes":[...] of `owner` (0: the span, k: event k - 1); nothing when
 * it has none. */
static void j_attrs(cbt_jbuf *b, const span_plan *p, uint32_t owner)
{
    bool first = true;
    for (uint32_t i = 0; i < p->n; i++) {
        if (p->a[i].owner != owner)
            continue;
        if (first)
            J(b, ",\"attributes\":[");
        else
            J(b, ",");
        first = false;
        j_kv(b, &p->a[i]);
    }
    if (!first)
        J(b, "]");
}

static void j_span(cbt_jbuf *b, const cbt_span *s)
{
    span_plan p;
    plan_span(s, &p, false);
    J(b, "{\"traceId\":");
    cbt_jbuf_hex(b, s->ctx.trace_id, 16);
    J(b, ",\"spanId\":");
    cbt_jbuf_hex(b, s->ctx.span_id, 8);
    if (p.has_parent) {
        J(b, ",\"parentSpanId\":");
        cbt_jbuf_hex(b, s->parent_span_id, 8);
    }
    if (s->ctx.trace_flags) {
        J(b, ",\"flags\":");
        j_u64(b, s->ctx.trace_flags);
    }
    J(b, ",\"name\":");
    j_str(b, p.name.p, p.name.n);
    if (s->kind) {
        J(b, ",\"kind\":");
        j_u64(b, s->kind);
    }
    J(b, ",\"startTimeUnixNano\":\"");
    j_u64(b, s->start_ns);
    J(b, "\",\"endTimeUnixNano\":\"");
    j_u64(b, s->end_ns);
    J(b, "\"");
    j_attrs(b, &p, 0);
    if (p.dropped) {
        J(b, ",\"droppedAttributesCount\":");
        j_u64(b, p.dropped);
    }
    if (p.n_ev) {
        J(b, ",\"events\":[");
        for (uint32_t e = 0; e < p.n_ev; e++) {
            if (e)
                J(b, ",");
            J(b, "{\"timeUnixNano\":\""); /* J takes a literal: sizeof is its length */
            j_u64(b, s->events[e].time_ns);
            J(b, "\",\"name\":");
            j_str(b, p.ev[e].name.p, p.ev[e].name.n);
            j_attrs(b, &p, e + 1);
            if (p.ev[e].dropped) {
                J(b, ",\"droppedAttributesCount\":");
                j_u64(b, p.ev[e].dropped);
            }
            J(b, "}");
        }
        J(b, "]");
    }
    if (s->events_dropped) {
        J(b, ",\"droppedEventsCount\":");
        j_u64(b, s->events_dropped);
    }
    if (s->status) {
        J(b, ",\"status\":{\"code\":");
        j_u64(b, s->status);
        J(b, "}");
    }
    J(b, "}");
}

/* The request's opening, up to the spans' '[': resource, scope. */
static void j_head(cbt_jbuf *b, const res_plan *rp)
{
    J(b, "{\"resourceSpans\":[{\"resource\":{\"attributes\":[");
    for (uint32_t i = 0; i < rp->n; i++) {
        if (i)
            J(b, ",");
        j_kv(b, &rp->a[i]);
    }
    J(b, "]},\"scopeSpans\":[{\"scope\":{\"name\":");
    j_str(b, k_scope_name, sizeof k_scope_name - 1);
    J(b, ",\"version\":");
    j_str(b, k_scope_version, sizeof k_scope_version - 1);
    J(b, "},\"spans\":[");
}

static const char k_json_tail[] = "]}]}]}";

static void j_doc(cbt_jbuf *b, const res_plan *rp, size_t n, cbt_otlp_span_at at, void *ctx,
                  cbt_span *scratch)
{
    j_head(b, rp);
    for (size_t i = 0; i < n; i++) {
        if (i)
            J(b, ",");
        j_span(b, at(ctx, i, scratch));
    }
    J(b, k_json_tail);
}

cbt_status cbt_otlp_encode_json(const cbt_otlp_resource *r, const cbt_span *spans, size_t n,
                                cbt_buf *out)
{
    if (n && !spans)
        return CBT_ERR_INVAL;
    return cbt_otlp_encode_json_at_(r, n, array_at, (void *)(uintptr_t)spans, out);
}

/* Append what `write` writes to `out`: a guess of `want` bytes, then (rarely)
 * exactly what the first try said it needs: the bounded writer counts past
 * its end, and the output is deterministic. */
typedef void (*j_writer)(cbt_jbuf *b, const void *arg);

static cbt_status j_append(cbt_buf *out, size_t want, j_writer write, const void *arg)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        cbt_status st = cbt_otlp_buf_reserve(out, want);
        if (st != CBT_OK)
            return st;
        cbt_jbuf b = {(char *)out->data + out->len, out->cap - out->len, 0};
        write(&b, arg);
        if (b.need <= b.cap) {
            out->len += b.need;
            return CBT_OK;
        }
        want = b.need;
    }
    return CBT_ERR_NOMEM; /* not reached: the second try has the room it asked for */
}

typedef struct doc_args {
    const res_plan *rp;
    size_t n;
    cbt_otlp_span_at at;
    void *ctx;
    cbt_span *scratch;
} doc_args;

static void w_doc(cbt_jbuf *b, const void *arg)
{
    const doc_args *d = arg;
    j_doc(b, d->rp, d->n, d->at, d->ctx, d->scratch);
}

cbt_status cbt_otlp_encode_json_at_(const cbt_otlp_resource *r, size_t n, cbt_otlp_span_at at,
                                    void *ctx, cbt_buf *out)
{
    if (!r || !out || (n && !at))
        return CBT_ERR_INVAL;
    cbt_span scratch;
    res_plan rp;
    plan_resource(r, &rp);
    if (n > (SIZE_MAX - 4096) / 1024)
        return CBT_ERR_NOMEM;
    doc_args d = {&rp, n, at, ctx, &scratch};
    return j_append(out, 4096 + n * 1024, w_doc, &d);
}

/* ---- OTLP/JSON in pieces (otlp_private.h): the OTLP JSON file ------------------------------ */

static void w_head(cbt_jbuf *b, const void *arg) { j_head(b, arg); }
static void w_span(cbt_jbuf *b, const void *arg) { j_span(b, arg); }

cbt_status cbt_otlp_json_head_(const cbt_otlp_resource *r, cbt_buf *out)
{
    if (!r || !out)
        return CBT_ERR_INVAL;
    res_plan rp;
    plan_resource(r, &rp);
    return j_append(out, 4096, w_head, &rp);
}

cbt_status cbt_otlp_json_span_(const cbt_span *s, cbt_buf *out)
{
    if (!s || !out)
        return CBT_ERR_INVAL;
    return j_append(out, 1024, w_span, s);
}

cbt_status cbt_otlp_json_tail_(cbt_buf *out)
{
    if (!out)
        return CBT_ERR_INVAL;
    cbt_status st = cbt_otlp_buf_reserve(out, sizeof k_json_tail - 1);
    if (st == CBT_OK) {
        memcpy(out->data + out->len, k_json_tail, sizeof k_json_tail - 1);
        out->len += sizeof k_json_tail - 1;
    }
    return st;
}

/* ---- the default resource ------------------------------------------------------------------- */

static void fill_random(uint8_t *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = getrandom(p + got, n - got, 0);
        if (k > 0) {
            got += (size_t)k;
        } else if (k < 0 && errno == EINTR) {
            continue;
        } else {
            break;
        }
    }
    if (got == n)
        return;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        while (got < n) {
            ssize_t k = read(fd, p + got, n - got);
            if (k > 0)
                got += (size_t)k;
            else if (!(k < 0 && errno == EINTR))
                break;
        }
        close(fd);
    }
    if (got == n)
        return;
    /* last resort: time and pid through splitmix64 (unique enough for an
     * instance id; not for secrets) */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    x ^= (uint64_t)getpid() << 32;
    for (; got < n; got++) {
        x += 0x9E3779B97F4A7C15ull;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        p[got] = (uint8_t)(z ^ (z >> 31));
    }
}

static void uuid_v4(char out[37])
{
    static const char hx[] = "0123456789abcdef";
    uint8_t u[16];
    fill_random(u, sizeof u);
    u[6] = (uint8_t)((u[6] & 0x0F) | 0x40); /* version 4 */
    u[8] = (uint8_t)((u[8] & 0x3F) | 0x80); /* variant 10 */
    size_t o = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            out[o++] = '-';
        out[o++] = hx[u[i] >> 4];
        out[o++] = hx[u[i] & 15];
    }
    out[o] = '\0';
}

static void gpu_name(char *out, size_t cap)
{
    out[0] = '\0';
#ifdef CBT_WITH_CUDA
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count <= 0) {
        (void)cudaGetLastError(); /* leave no error behind for the next runtime call */
        return;
    }
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess)
        dev = 0;
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    size_t l = strnlen(prop.name, sizeof prop.name);
    if (l >= cap)
        l = cap - 1;
    memcpy(out, prop.name, l);
    out[l] = '\0';
#else
    (void)cap;
#endif
}

void cbt_otlp_resource_default(cbt_otlp_resource *r)
{
    if (!r)
        return;
    cbt_otlp_resource_defaults_(r); /* service.name "cbt" (cbt/otlp.h) */
    char id[37];
    uuid_v4(id);
    memcpy(r->service_instance_id, id, sizeof id);
    if (gethostname(r->host_name, sizeof r->host_name) != 0)
        r->host_name[0] = '\0';
    r->host_name[sizeof r->host_name - 1] = '\0';
    r->pid = (int64_t)getpid();
    gpu_name(r->gpu_name, sizeof r->gpu_name);
}
