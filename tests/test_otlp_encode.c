/* tests/test_otlp_encode.c — OTLP encoding (exporter/otlp_encode.c): the
 * protobuf bytes decoded by the protoc-c code generated from exporter/proto/
 * and compared field by field with the spans they came from; OTLP/JSON
 * checked for its mapping (hex ids, int64 as strings, camelCase, enums as
 * numbers) and parsed by Python's json module; the default resource.
 *
 * Also a fixture generator for tests/otlp_decode.py (the official
 * opentelemetry-proto package decodes our bytes):
 *
 *   test_otlp_encode --emit <file.pb> <file.json> [<file.otlp.jsonl>]
 *
 * writes the fixed set below (emit_resource, emit_spans) as protobuf and as
 * OTLP/JSON and exits 0; with a third path, also through the OTLP JSON file
 * sink (cbt_otlp_json_sink_create, called directly: no tracer), flushed after
 * the second and the fourth span, so its lines hold spans 0-1, 2-3 and the
 * rest. otlp_decode.py holds the same values, written out
 * independently; change both together.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "opentelemetry/proto/collector/trace/v1/trace_service.pb-c.h"
#include "cbt/otlp.h"
#include "testutil.h"

typedef Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceRequest pb_req;
typedef Opentelemetry__Proto__Trace__V1__Span pb_span;
typedef Opentelemetry__Proto__Common__V1__KeyValue pb_kv;
typedef Opentelemetry__Proto__Common__V1__AnyValue pb_any;

#define AV_STR OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE
#define AV_BOOL OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_BOOL_VALUE
#define AV_INT OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE
#define AV_DOUBLE OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_DOUBLE_VALUE

/* ---- the fixed set (--emit; mirrored in tests/otlp_decode.py) ----------------------------
 *
 * Resource: service.name "cbt-test", service.instance.id
 *   "00000000-0000-4000-8000-000000000001", host.name "emit-host", pid 4242,
 *   gpu "NVIDIA H200", extras deployment.environment=ci, team=kv.
 * Time base T = 1700000000000000000 ns.
 * Span 0 "request": trace 01..10, span a1..a8, root, SERVER, sampled, OK,
 *   T .. T+5000000; session_id "sess-0001", hit_tokens 256,
 *   requested_tokens 512, hit_rate 0.5.
 * Span 1 "mp.store": same trace, span b1..b8, parent a1..a8, INTERNAL,
 *   sampled, UNSET, T+1000 .. T+2000000; session_id = the 40 characters
 *   "0123456789abcdefghijklmnopqrstuvwxyzABCD", stored_count -7, device
 *   "cuda:0", worker true, num_tokens 0.
 * Span 2 "mp.retrieve": same trace, span c1..c8, parent a1..a8, CLIENT, not
 *   sampled, ERROR, incomplete, 3 attributes dropped, T+3000 .. T+4000000;
 *   found_count INT64_MAX, user_value INT64_MIN, gbps 1e-300, and
 *   cbt.incomplete true (added by the encoder).
 * Span 3 "cb.scatter": same trace, span d1..d8, parent c1..c8, PRODUCER,
 *   sampled, UNSET, T+5000 .. T+6000; device "gpu\xff\xfe0" (repaired to
 *   "gpu\uFFFD\uFFFD0"), note "h\u00e9llo \u2713 \"q\" \\ \n" (valid UTF-8),
 *   tail "ab\xe2\x82" (a cut sequence: "ab\uFFFD\uFFFD"), empty "",
 *   flag false, ratio -2.25.
 * Span 4 "cb.l2_load": trace f0..ff, span e1..e8, parent 11..18 (another
 *   process's span), CONSUMER, not sampled, OK, T+7000 .. T+7000 (zero
 *   length); no attributes; one span event "mark" at time 0 with no
 *   attributes (an empty Span.Event).
 * Span 5 "timeout": trace 01..10, span f1..f8, parent a1..a8, INTERNAL,
 *   sampled, ERROR, T+8000 .. T+8000; attributes session_id "sess-0001" and
 *   (set after the events, so the span's and the events' attributes
 *   interleave in cbt's array) count 7; 2 events dropped. Event 0
 *   "exception" at T+8000: exception.type "TimeoutError",
 *   exception.message "retrieve timed out after 30 s", exception.stacktrace
 *   "Traceback (most recent call last):\n  File \"x.py\", line 1\nTimeoutError".
 *   Event 1 "retry" at T+8500: attempt 2, backoff_s 0.5, final false, 1
 *   attribute dropped.
 */
#define T0 1700000000000000000ull
#define EMIT_N 6
#define EMIT_STACK "Traceback (most recent call last):\n  File \"x.py\", line 1\nTimeoutError"

static void ids(uint8_t *p, size_t n, uint8_t first)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(first + i);
}

static void set_str(cbt_span *s, const char *key, const char *v, size_t len)
{
    assert_int_equal(cbt_span_set_str(s, tu_name(key), v, len), CBT_OK);
}
#define SET_STR(s, k, lit) set_str((s), (k), (lit), sizeof(lit) - 1)

static void emit_resource(cbt_otlp_resource *r)
{
    memset(r, 0, sizeof *r);
    strcpy(r->service_name, "cbt-test");
    strcpy(r->service_instance_id, "00000000-0000-4000-8000-000000000001");
    strcpy(r->host_name, "emit-host");
    r->pid = 4242;
    strcpy(r->gpu_name, "NVIDIA H200");
    strcpy(r->extra[0].key, "deployment.environment");
    strcpy(r->extra[0].value, "ci");
    strcpy(r->extra[1].key, "team");
    strcpy(r->extra[1].value, "kv");
    r->n_extra = 2;
}

static void emit_spans(cbt_span sp[EMIT_N])
{
    memset(sp, 0, EMIT_N * sizeof *sp);
    cbt_span *s = &sp[0];
    ids(s->ctx.trace_id, 16, 0x01);
    ids(s->ctx.span_id, 8, 0xa1);
    s->ctx.trace_flags = 1;
    s->name = CBT_N_REQUEST;
    s->kind = CBT_SPAN_KIND_SERVER;
    s->status = CBT_SPAN_STATUS_OK;
    s->start_ns = T0;
    s->end_ns = T0 + 5000000;
    SET_STR(s, "session_id", "sess-0001");
    assert_int_equal(cbt_span_set_i64(s, CBT_N_HIT_TOKENS, 256), CBT_OK);
    assert_int_equal(cbt_span_set_i64(s, CBT_N_REQUESTED_TOKENS, 512), CBT_OK);
    assert_int_equal(cbt_span_set_f64(s, CBT_N_HIT_RATE, 0.5), CBT_OK);

    s = &sp[1];
    ids(s->ctx.trace_id, 16, 0x01);
    ids(s->ctx.span_id, 8, 0xb1);
    ids(s->parent_span_id, 8, 0xa1);
    s->ctx.trace_flags = 1;
    s->name = CBT_N_MP_STORE;
    s->kind = CBT_SPAN_KIND_INTERNAL;
    s->start_ns = T0 + 1000;
    s->end_ns = T0 + 2000000;
    SET_STR(s, "session_id", "0123456789abcdefghijklmnopqrstuvwxyzABCD");
    assert_int_equal(cbt_span_set_i64(s, CBT_N_STORED_COUNT, -7), CBT_OK);
    SET_STR(s, "device", "cuda:0");
    assert_int_equal(cbt_span_set_bool(s, CBT_N_WORKER, true), CBT_OK);
    assert_int_equal(cbt_span_set_i64(s, CBT_N_NUM_TOKENS, 0), CBT_OK);

    s = &sp[2];
    ids(s->ctx.trace_id, 16, 0x01);
    ids(s->ctx.span_id, 8, 0xc1);
    ids(s->parent_span_id, 8, 0xa1);
    s->name = CBT_N_MP_RETRIEVE;
    s->kind = CBT_SPAN_KIND_CLIENT;
    s->status = CBT_SPAN_STATUS_ERROR;
    s->flags = CBT_SPANF_INCOMPLETE | CBT_SPANF_ATTRS_DROPPED;
    s->attrs_dropped = 3;
    s->start_ns = T0 + 3000;
    s->end_ns = T0 + 4000000;
    assert_int_equal(cbt_span_set_i64(s, CBT_N_FOUND_COUNT, INT64_MAX), CBT_OK);
    assert_int_equal(cbt_span_set_i64(s, CBT_N_USER_VALUE, INT64_MIN), CBT_OK);
    assert_int_equal(cbt_span_set_f64(s, CBT_N_GBPS, 1e-300), CBT_OK);

    s = &sp[3];
    ids(s->ctx.trace_id, 16, 0x01);
    ids(s->ctx.span_id, 8, 0xd1);
    ids(s->parent_span_id, 8, 0xc1);
    s->ctx.trace_flags = 1;
    s->name = CBT_N_CB_SCATTER;
    s->kind = CBT_SPAN_KIND_PRODUCER;
    s->start_ns = T0 + 5000;
    s->end_ns = T0 + 6000;
    SET_STR(s, "device", "gpu\xff\xfe" "0");
    SET_STR(s, "note", "h\xc3\xa9llo \xe2\x9c\x93 \"q\" \\ \n");
    SET_STR(s, "tail", "ab\xe2\x82");
    SET_STR(s, "empty", "");
    assert_int_equal(cbt_span_set_bool(s, tu_name("flag"), false), CBT_OK);
    assert_int_equal(cbt_span_set_f64(s, tu_name("ratio"), -2.25), CBT_OK);

    s = &sp[4];
    ids(s->ctx.trace_id, 16, 0xf0);
    ids(s->ctx.span_id, 8, 0xe1);
    ids(s->parent_span_id, 8, 0x11);
    s->name = CBT_N_CB_L2_LOAD;
    s->kind = CBT_SPAN_KIND_CONSUMER;
    s->status = CBT_SPAN_STATUS_OK;
    s->start_ns = T0 + 7000;
    s->end_ns = T0 + 7000;
    assert_int_equal(cbt_span_add_event(s, tu_name("mark"), 0, NULL), CBT_OK);

    s = &sp[5];
    ids(s->ctx.trace_id, 16, 0x01);
    ids(s->ctx.span_id, 8, 0xf1);
    ids(s->parent_span_id, 8, 0xa1);
    s->ctx.trace_flags = 1;
    s->name = CBT_N_TIMEOUT;
    s->kind = CBT_SPAN_KIND_INTERNAL;
    s->status = CBT_SPAN_STATUS_ERROR;
    s->start_ns = T0 + 8000;
    s->end_ns = T0 + 8000;
    SET_STR(s, "session_id", "sess-0001");
    uint32_t ev;
    assert_int_equal(cbt_span_add_event(s, CBT_N_EXCEPTION, T0 + 8000, &ev), CBT_OK);
    assert_int_equal(cbt_span_event_set_str(s, ev, CBT_N_EXC_TYPE, "TimeoutError", 12), CBT_OK);
    assert_int_equal(cbt_span_event_set_str(s, ev, CBT_N_EXC_MESSAGE,
                                            "retrieve timed out after 30 s", 29),
                     CBT_OK);
    assert_int_equal(cbt_span_event_set_str(s, ev, CBT_N_EXC_STACKTRACE, EMIT_STACK,
                                            sizeof EMIT_STACK - 1),
                     CBT_OK);
    assert_int_equal(cbt_span_add_event(s, tu_name("retry"), T0 + 8500, &ev), CBT_OK);
    assert_int_equal(cbt_span_event_set_i64(s, ev, tu_name("attempt"), 2), CBT_OK);
    assert_int_equal(cbt_span_event_set_f64(s, ev, tu_name("backoff_s"), 0.5), CBT_OK);
    assert_int_equal(cbt_span_event_set_bool(s, ev, tu_name("final"), false), CBT_OK);
    s->events[ev].attrs_dropped = 1;
    s->events_dropped = 2;
    s->flags |= CBT_SPANF_EVENTS_DROPPED;
    assert_int_equal(cbt_span_set_i64(s, CBT_N_COUNT, 7), CBT_OK);
}

static int write_file(const char *path, const cbt_buf *b)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(b->data, 1, b->len, f);
    int rc = fclose(f);
    return (w == b->len && rc == 0) ? 0 : -1;
}

/* The fixed set through the OTLP JSON file sink, a flush after spans 1 and 3. */
static int emit_file(const char *path, const cbt_otlp_resource *r, const cbt_span *sp)
{
    cbt_sink k;
    if (cbt_otlp_json_sink_create(path, r, &k) != CBT_OK)
        return -1;
    int bad = !(k.flags & CBT_SINK_FLUSH_IDLE);
    for (int i = 0; i < EMIT_N; i++) {
        bad |= k.on_span(k.ctx, &sp[i]) != CBT_OK;
        if (i == 1 || i == 3)
            bad |= k.flush(k.ctx) != CBT_OK;
    }
    bad |= k.flush(k.ctx) != CBT_OK;
    bad |= k.spans_lost(k.ctx) != 0;
    k.destroy(k.ctx);
    return bad ? -1 : 0;
}

static int emit(const char *pb_path, const char *json_path, const char *file_path)
{
    cbt_otlp_resource r;
    emit_resource(&r);
    cbt_span sp[EMIT_N];
    emit_spans(sp);
    cbt_buf pb = {0}, js = {0};
    int rc = 1;
    if (cbt_otlp_encode_proto(&r, sp, EMIT_N, &pb) != CBT_OK ||
        cbt_otlp_encode_json(&r, sp, EMIT_N, &js) != CBT_OK)
        fprintf(stderr, "test_otlp_encode --emit: encoding failed\n");
    else if (write_file(pb_path, &pb) || write_file(json_path, &js))
        fprintf(stderr, "test_otlp_encode --emit: cannot write %s / %s\n", pb_path, json_path);
    else if (file_path && emit_file(file_path, &r, sp))
        fprintf(stderr, "test_otlp_encode --emit: the OTLP JSON file sink failed on %s\n",
                file_path);
    else
        rc = 0;
    cbt_buf_free(&pb);
    cbt_buf_free(&js);
    return rc;
}

/* ---- an independent UTF-8 repair, to say what the encoder must produce ---------------- */

/* Length of the valid sequence at s, or 0 (bit-by-bit, per RFC 3629). */
static size_t ref_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

/* The repaired string, NUL-terminated, in a static buffer. */
static const char *ref_repair(const char *s, size_t n)
{
    static char out[4096];
    size_t o = 0;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t l = ref_seq(u + i, n - i);
        assert_true(o + 4 < sizeof out);
        if (l == 0) {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        } else {
            memcpy(out + o, u + i, l);
            o += l;
            i += l;
        }
    }
    out[o] = '\0';
    return out;
}

/* ---- comparing a decoded span with its source -------------------------------------------- */

static pb_req *decode(const cbt_buf *b, size_t off, size_t len)
{
    pb_req *q = opentelemetry__proto__collector__trace__v1__export_trace_service_request__unpack(
        NULL, len, b->data + off);
    assert_non_null(q);
    return q;
}

static void free_req(pb_req *q)
{
    opentelemetry__proto__collector__trace__v1__export_trace_service_request__free_unpacked(q, NULL);
}

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

static void check_bytes(ProtobufCBinaryData d, const uint8_t *want, size_t n)
{
    assert_int_equal(d.len, n);
    if (n)
        assert_memory_equal(d.data, want, n);
}

static void check_kv_value(const pb_kv *kv, const cbt_span *s, const cbt_attr *a)
{
    assert_non_null(kv->value);
    const pb_any *v = kv->value;
    switch (a->type) {
    case CBT_META_I64:
        assert_int_equal(v->value_case, AV_INT);
        assert_true(v->int_value == a->v.i64);
        break;
    case CBT_META_F64:
        assert_int_equal(v->value_case, AV_DOUBLE);
        assert_memory_equal(&v->double_value, &a->v.f64, sizeof(double)); /* bit-exact */
        break;
    case CBT_META_BOOL:
        assert_int_equal(v->value_case, AV_BOOL);
        assert_int_equal(!!v->bool_value, !!a->v.b);
        break;
    case CBT_META_STR:
        assert_int_equal(v->value_case, AV_STR);
        assert_string_equal(v->string_value, ref_repair(cbt_attr_str(s, a), a->str_len));
        break;
    default: fail_msg("unexpected attribute type %u", a->type);
    }
}

/* Every field of the decoded span against the cbt_span it came from. */
static void check_span(const pb_span *d, const cbt_span *s)
{
    check_bytes(d->trace_id, s->ctx.trace_id, 16);
    check_bytes(d->span_id, s->ctx.span_id, 8);
    if (all_zero(s->parent_span_id, 8))
        assert_int_equal(d->parent_span_id.len, 0);
    else
        check_bytes(d->parent_span_id, s->parent_span_id, 8);
    assert_int_equal(d->flags, s->ctx.trace_flags);
    assert_string_equal(d->trace_state, "");
    assert_string_equal(d->name, ref_repair(cbt_name_str(s->name), cbt_name_len(s->name)));
    assert_int_equal(d->kind, s->kind);
    assert_true(d->start_time_unix_nano == s->start_ns);
    assert_true(d->end_time_unix_nano == s->end_ns);
    bool inc = (s->flags & CBT_SPANF_INCOMPLETE) != 0;
    size_t k = 0;
    for (uint16_t i = 0; i < s->n_attrs; i++) {
        const cbt_attr *a = &s->attrs[i];
        if (a->owner != 0)
            continue; /* an event's: below */
        if (inc && a->key == CBT_N_INCOMPLETE)
            continue;
        assert_true(k < d->n_attributes);
        assert_string_equal(d->attributes[k]->key,
                            ref_repair(cbt_name_str(a->key), cbt_name_len(a->key)));
        check_kv_value(d->attributes[k], s, a);
        k++;
    }
    if (inc) {
        assert_true(k < d->n_attributes);
        assert_string_equal(d->attributes[k]->key, "cbt.incomplete");
        assert_int_equal(d->attributes[k]->value->value_case, AV_BOOL);
        assert_true(d->attributes[k]->value->bool_value);
        k++;
    }
    assert_int_equal(d->n_attributes, k);
    uint32_t dropped = s->attrs_dropped;
    if (!dropped && (s->flags & CBT_SPANF_ATTRS_DROPPED))
        dropped = 1;
    assert_int_equal(d->dropped_attributes_count, dropped);
    assert_int_equal(d->n_events, s->n_events);
    for (uint32_t e = 0; e < s->n_events; e++) {
        const Opentelemetry__Proto__Trace__V1__Span__Event *de = d->events[e];
        const cbt_span_event *se = &s->events[e];
        assert_true(de->time_unix_nano == se->time_ns);
        assert_string_equal(de->name, ref_repair(cbt_name_str(se->name), cbt_name_len(se->name)));
        size_t j = 0;
        for (uint16_t i = 0; i < s->n_attrs; i++) {
            const cbt_attr *a = &s->attrs[i];
            if (a->owner != e + 1)
                continue;
            assert_true(j < de->n_attributes);
            assert_string_equal(de->attributes[j]->key,
                                ref_repair(cbt_name_str(a->key), cbt_name_len(a->key)));
            check_kv_value(de->attributes[j], s, a);
            j++;
        }
        assert_int_equal(de->n_attributes, j);
        assert_int_equal(de->dropped_attributes_count, se->attrs_dropped);
    }
    assert_int_equal(d->dropped_events_count, s->events_dropped);
    assert_int_equal(d->n_links, 0);
    if (s->status == CBT_SPAN_STATUS_UNSET) {
        assert_null(d->status);
    } else {
        assert_non_null(d->status);
        assert_int_equal(d->status->code, s->status);
        assert_string_equal(d->status->message, "");
    }
}

static const pb_kv *res_attr(const pb_req *q, size_t i)
{
    const Opentelemetry__Proto__Resource__V1__Resource *res = q->resource_spans[0]->resource;
    assert_non_null(res);
    assert_true(i < res->n_attributes);
    return res->attributes[i];
}

static void check_res_str(const pb_req *q, size_t i, const char *key, const char *val)
{
    const pb_kv *kv = res_attr(q, i);
    assert_string_equal(kv->key, key);
    assert_int_equal(kv->value->value_case, AV_STR);
    assert_string_equal(kv->value->string_value, val);
}

/* One ResourceSpans, one ScopeSpans ("cbt", CBT_VERSION_STRING) holding n spans. */
static const Opentelemetry__Proto__Trace__V1__ScopeSpans *check_shape(const pb_req *q, size_t n)
{
    assert_int_equal(q->n_resource_spans, 1);
    const Opentelemetry__Proto__Trace__V1__ResourceSpans *rs = q->resource_spans[0];
    assert_non_null(rs->resource);
    assert_string_equal(rs->schema_url, "");
    assert_int_equal(rs->n_scope_spans, 1);
    const Opentelemetry__Proto__Trace__V1__ScopeSpans *ss = rs->scope_spans[0];
    assert_non_null(ss->scope);
    assert_string_equal(ss->scope->name, "cbt");
    assert_string_equal(ss->scope->version, CBT_VERSION_STRING);
    assert_int_equal(ss->scope->n_attributes, 0);
    assert_int_equal(ss->n_spans, n);
    return ss;
}

static void check_all(const cbt_otlp_resource *r, const cbt_span *sp, size_t n)
{
    cbt_buf b = {0};
    assert_int_equal(cbt_otlp_encode_proto(r, sp, n, &b), CBT_OK);
    pb_req *q = decode(&b, 0, b.len);
    const Opentelemetry__Proto__Trace__V1__ScopeSpans *ss = check_shape(q, n);
    for (size_t i = 0; i < n; i++)
        check_span(ss->spans[i], &sp[i]);
    free_req(q);
    cbt_buf_free(&b);
}

/* ---- tests ------------------------------------------------------------------------------ */

static void fixed_set_every_field(void **state)
{
    (void)state;
    cbt_otlp_resource r;
    emit_resource(&r);
    cbt_span sp[EMIT_N];
    emit_spans(sp);
    check_all(&r, sp, EMIT_N);

    /* and the values spelled out, not only compared with their source */
    cbt_buf b = {0};
    assert_int_equal(cbt_otlp_encode_proto(&r, sp, EMIT_N, &b), CBT_OK);
    pb_req *q = decode(&b, 0, b.len);
    check_res_str(q, 0, "service.name", "cbt-test");
    check_res_str(q, 1, "service.instance.id", "00000000-0000-4000-8000-000000000001");
    check_res_str(q, 2, "host.name", "emit-host");
    const pb_kv *pid = res_attr(q, 3);
    assert_string_equal(pid->key, "process.pid");
    assert_int_equal(pid->value->value_case, AV_INT);
    assert_int_equal(pid->value->int_value, 4242);
    check_res_str(q, 4, "cbt.gpu.name", "NVIDIA H200");
    check_res_str(q, 5, "deployment.environment", "ci");
    check_res_str(q, 6, "team", "kv");
    assert_int_equal(q->resource_spans[0]->resource->n_attributes, 7);
    assert_int_equal(q->resource_spans[0]->resource->dropped_attributes_count, 0);

    const Opentelemetry__Proto__Trace__V1__ScopeSpans *ss = q->resource_spans[0]->scope_spans[0];
    const pb_span *d = ss->spans[0];
    assert_string_equal(d->name, "request");
    assert_int_equal(d->kind, OPENTELEMETRY__PROTO__TRACE__V1__SPAN__SPAN_KIND__SPAN_KIND_SERVER);
    assert_int_equal(d->parent_span_id.len, 0);
    assert_int_equal(d->flags, 1);
    assert_int_equal(d->status->code,
                     OPENTELEMETRY__PROTO__TRACE__V1__STATUS__STATUS_CODE__STATUS_CODE_OK);
    assert_string_equal(d->attributes[0]->key, "session_id");
    assert_string_equal(d->attributes[0]->value->string_value, "sess-0001");
    assert_int_equal(d->attributes[2]->value->int_value, 512);
    assert_true(d->attributes[3]->value->double_value == 0.5);

    d = ss->spans[1];
    assert_int_equal(d->attributes[1]->value->int_value, -7);
    assert_int_equal(d->attributes[4]->value->value_case, AV_INT); /* 0 is still set */
    assert_int_equal(d->attributes[4]->value->int_value, 0);

    d = ss->spans[2];
    assert_int_equal(d->flags, 0);
    assert_int_equal(d->dropped_attributes_count, 3);
    assert_true(d->attributes[0]->value->int_value == INT64_MAX);
    assert_true(d->attributes[1]->value->int_value == INT64_MIN);
    assert_string_equal(d->attributes[3]->key, "cbt.incomplete");
    assert_int_equal(d->status->code,
                     OPENTELEMETRY__PROTO__TRACE__V1__STATUS__STATUS_CODE__STATUS_CODE_ERROR);

    d = ss->spans[3];
    assert_string_equal(d->attributes[0]->value->string_value, "gpu\xEF\xBF\xBD\xEF\xBF\xBD" "0");
    assert_string_equal(d->attributes[1]->value->string_value, "h\xc3\xa9llo \xe2\x9c\x93 \"q\" \\ \n");
    assert_string_equal(d->attributes[2]->value->string_value, "ab\xEF\xBF\xBD\xEF\xBF\xBD");
    assert_int_equal(d->attributes[3]->value->value_case, AV_STR); /* "" is still set */
    assert_string_equal(d->attributes[3]->value->string_value, "");
    assert_int_equal(d->attributes[4]->value->value_case, AV_BOOL); /* false is still set */
    assert_false(d->attributes[4]->value->bool_value);
    assert_null(d->status);

    d = ss->spans[4];
    assert_int_equal(d->n_attributes, 0);
    assert_true(d->start_time_unix_nano == d->end_time_unix_nano);
    assert_int_equal(d->n_events, 1);
    assert_string_equal(d->events[0]->name, "mark");
    assert_true(d->events[0]->time_unix_nano == 0);
    assert_int_equal(d->events[0]->n_attributes, 0);

    d = ss->spans[5];
    assert_string_equal(d->name, "timeout");
    assert_int_equal(d->n_attributes, 2); /* the events' are not the span's */
    assert_string_equal(d->attributes[0]->key, "session_id");
    assert_string_equal(d->attributes[1]->key, "count");
    assert_int_equal(d->attributes[1]->value->int_value, 7);
    assert_int_equal(d->n_events, 2);
    assert_int_equal(d->dropped_events_count, 2);
    const Opentelemetry__Proto__Trace__V1__Span__Event *e = d->events[0];
    assert_string_equal(e->name, "exception");
    assert_true(e->time_unix_nano == T0 + 8000);
    assert_int_equal(e->n_attributes, 3);
    assert_string_equal(e->attributes[0]->key, "exception.type");
    assert_string_equal(e->attributes[0]->value->string_value, "TimeoutError");
    assert_string_equal(e->attributes[1]->key, "exception.message");
    assert_string_equal(e->attributes[1]->value->string_value, "retrieve timed out after 30 s");
    assert_string_equal(e->attributes[2]->key, "exception.stacktrace");
    assert_string_equal(e->attributes[2]->value->string_value, EMIT_STACK);
    assert_int_equal(e->dropped_attributes_count, 0);
    e = d->events[1];
    assert_string_equal(e->name, "retry");
    assert_true(e->time_unix_nano == T0 + 8500);
    assert_int_equal(e->n_attributes, 3);
    assert_int_equal(e->attributes[0]->value->int_value, 2);
    assert_true(e->attributes[1]->value->double_value == 0.5);
    assert_int_equal(e->attributes[2]->value->value_case, AV_BOOL);
    assert_false(e->attributes[2]->value->bool_value);
    assert_int_equal(e->dropped_attributes_count, 1);
    free_req(q);
    cbt_buf_free(&b);
}

static void invalid_utf8_repaired(void **state)
{
    (void)state;
    cbt_otlp_resource r;
    emit_resource(&r);
    strcpy(r.host_name, "h\xc0\xafst"); /* an overlong '/' */
    strcpy(r.extra[0].value, "v\xed\xa0\x80"); /* a surrogate */
    cbt_span s;
    memset(&s, 0, sizeof s);
    ids(s.ctx.trace_id, 16, 1);
    ids(s.ctx.span_id, 8, 9);
    s.name = tu_name("bad\xff" "name");
    s.start_ns = 1;
    s.end_ns = 2;
    const char bad[] = "\x80x\xf5\xf0\x9f\x98\x80\xf0\x9f\x98"; /* stray, F5, a valid emoji, a cut one */
    set_str(&s, "k\xfe", bad, sizeof bad - 1);
    check_all(&r, &s, 1);

    cbt_buf b = {0};
    assert_int_equal(cbt_otlp_encode_proto(&r, &s, 1, &b), CBT_OK);
    pb_req *q = decode(&b, 0, b.len);
    const pb_span *d = q->resource_spans[0]->scope_spans[0]->spans[0];
    assert_string_equal(d->name, "bad\xEF\xBF\xBDname");
    assert_string_equal(d->attributes[0]->key, "k\xEF\xBF\xBD");
    assert_string_equal(d->attributes[0]->value->string_value,
                        "\xEF\xBF\xBDx\xEF\xBF\xBD\xf0\x9f\x98\x80\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    check_res_str(q, 2, "host.name", "h\xEF\xBF\xBD\xEF\xBF\xBDst");
    check_res_str(q, 5, "deployment.environment", "v\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    free_req(q);

    /* JSON: the same repair, as escapes */
    b.len = 0;
    assert_int_equal(cbt_otlp_encode_json(&r, &s, 1, &b), CBT_OK);
    assert_int_equal(memchr(b.data, 0xff, b.len), NULL);
    char *js = strndup((const char *)b.data, b.len);
    assert_non_null(strstr(js, "\"name\":\"bad\\ufffdname\""));
    assert_non_null(strstr(js, "\"key\":\"k\\ufffd\""));
    free(js);
    cbt_buf_free(&b);
}

static void empty_span_list(void **state)
{
    (void)state;
    cbt_otlp_resource r;
    emit_resource(&r);
    cbt_buf b = {0};
    assert_int_equal(cbt_otlp_encode_proto(&r, NULL, 0, &b), CBT_OK);
    pb_req *q = decode(&b, 0, b.len);
    check_shape(q, 0);
    free_req(q);
    cbt_buf_free(&b);
    assert_int_equal(cbt_otlp_encode_json(&r, NULL, 0, &b), CBT_OK);
    char *js = strndup((const char *)b.data, b.len);
    assert_non_null(strstr(js, "\"spans\":[]"));
    free(js);
    cbt_buf_free(&b);
}

static void bad_arguments(void **state)
{
    (void)state;
    cbt_otlp_resource r;
    emit_resource(&r);
    cbt_span s;
    memset(&s, 0, sizeof s);
    cbt_buf b = {0};
    assert_int_equal(cbt_otlp_encode_proto(NULL, &s, 1, &b), CBT_ERR_INVAL);
    assert_int_equal(cbt_otlp_encode_proto(&r, NULL, 1, &b), CBT_ERR_INVAL);
    assert_int_equal(cbt_otlp_encode_proto(&r, &s, 1, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_otlp_encode_json(NULL, &s, 1, &b), CBT_ERR_INVAL);
    assert_int_equal(cbt_otlp_encode_json(&r, NULL, 1, &b), CBT_ERR_INVAL);
    assert_int_equal(cbt_otlp_encode_json(&r, &s, 1, NULL), CBT_ERR_INVAL);
    assert_int_equal(b.len, 0);
    cbt_buf_free(&b);
    cbt_buf_free(&b); /* idempotent */
    cbt_buf_free(NULL);
}

/* Attributes that cannot be encoded are left out and counted. */
static void broken_attributes_dropped(void **state)
{
    (void)state;
    cbt_otlp_resource r;
    emit_resource(&r);
    cbt_span s;
    memset(&s, 0, sizeof s);
    ids(s.ctx.trace_id, 16, 1);
    ids(s.ctx.span_id, 8, 9);
    s.name = CBT_N_REQUEST;
    s.attrs_dropped = 2;
    assert_int_equal(cbt_span_set_i64(&s, CBT_N_BYTES, 1), CBT_OK);
    assert_int_equal(cbt_span_set_i64(&s, CBT_N_TOKENS, 2), CBT_OK);
    assert_int_equal(cbt_span_set_i64(&s, CBT_N_CHUNKS, 3), CBT_OK);
    assert_int_equal(cbt_span_set_i64(&s, CBT_N_DROPPED, 4), CBT_OK);
    s.attrs[1].type = 99;           /* unknown type */
    s.attrs[2].type = CBT_META_STR; /* a string past the arena */
    s.attrs[2].str_off = CBT_SPAN_STR_ARENA - 2;
    s.attrs[2].str_len = 3;
    s.attrs[3].key = 0;             /* no key */
    cbt_buf b = {0};
    assert_int_equal(cbt_otlp_encode_proto(&r, &s, 1, &b), CBT_OK);
    pb_req *q = decode(&b, 0, b.len);
    const pb_span *d = q->resource_spans[0]->scope_spans[0]->spans[0];
    assert_int_equal(d->n_attributes, 1);
    assert_string_equal(d->attributes[0]->key, "bytes");
    assert_int_equal(d->dropped_attributes_count, 5);
    free_req(q);

    /* the flag alone reports at least one; a duplicate cbt.incomplete is replaced */
    memset(&s, 0, sizeof s);
    ids(s.ctx.trace_id, 16, 1);
    ids(s.ctx.span_id, 8, 9);
    s.name = CBT_N_REQUEST;
    s.flags = CBT_SPANF_ATTRS_DROPPED | CBT_SPANF_INCOMPLETE;
    assert_int_equal(cbt_span_set_bool(&s, CBT_N_INCOMPLETE, false), CBT_OK);
    b.len = 0;
    assert_int_equal(cbt_otlp_encode_proto(&r, &s, 1, &b), CBT_OK);
    q = decode(&b, 0, b.len);
    d = q->resource_spans[0]->scope_spans[0]->spans[0];
    assert_int_equal(d->dropped_attributes_count, 1);
    assert_int_equal(d->n_attributes, 1);
    assert_string_equal(d->attributes[0]->key, "cbt.incomplete");
    assert_true(d->attributes[0]->value->bool_value);
    free_req(q);
    cbt_buf_free(&b);
}

/* A span filled to the limits: 16 attributes, a full arena of bad bytes
 * (tripled by the repair), a 63-byte name. */
static void span_at_limits(void **state)
{
    (void)state;
    cbt_otlp_resource r;
    emit_resource(&r);
    cbt_span s;
    memset(&s, 0, sizeof s);
    ids(s.ctx.trace_id, 16, 0xff);
    ids(s.ctx.span_id, 8, 0xf7);
    memset(s.parent_span_id, 0xff, 8);
    s.ctx.trace_flags = 0xff;
    s.kind = 0xff; /* not a known kind: written as is */
    s.status = CBT_SPAN_STATUS_ERROR;
    s.flags = CBT_SPANF_INCOMPLETE;
    s.attrs_dropped = 65535;
    s.start_ns = UINT64_MAX - 1;
    s.end_ns = UINT64_MAX;
    char name[CBT_NAME_LEN_MAX];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    s.name = tu_name(name);
    char junk[CBT_SPAN_STR_ARENA / CBT_SPAN_ATTR_MAX];
    memset(junk, 0xff, sizeof junk);
    for (int i = 0; i < CBT_SPAN_ATTR_MAX; i++) {
        char key[16];
        snprintf(key, sizeof key, "limit.k%02d", i);
        set_str(&s, key, junk, sizeof junk);
    }
    assert_int_equal(s.n_attrs, CBT_SPAN_ATTR_MAX);
    assert_int_equal(s.arena_used, CBT_SPAN_STR_ARENA);
    check_all(&r, &s, 1);
    cbt_buf b = {0};
    assert_int_equal(cbt_otlp_encode_json(&r, &s, 1, &b), CBT_OK);
    cbt_buf_free(&b);
}

/* 10k spans, and encoding appends to what the buffer holds. */
static void many_spans(void **state)
{
    (void)state;
    enum { N = 10000 };
    cbt_otlp_resource r;
    cbt_otlp_resource_default(&r);
    cbt_span *sp = calloc(N, sizeof *sp);
    assert_non_null(sp);
    cbt_name keys[4] = {tu_name("many.i"), tu_name("many.d"), tu_name("many.b"), tu_name("many.s")};
    for (uint32_t i = 0; i < N; i++) {
        cbt_span *s = &sp[i];
        memcpy(s->ctx.trace_id, &i, sizeof i);
        s->ctx.trace_id[15] = 0x77;
        memcpy(s->ctx.span_id, &i, sizeof i);
        s->ctx.span_id[7] = 0x55;
        if (i % 3)
            memcpy(s->parent_span_id, &i, sizeof i), s->parent_span_id[6] = 1;
        s->ctx.trace_flags = (uint8_t)(i & 1);
        s->name = (cbt_name)(1 + i % (CBT_N_WELL_KNOWN_COUNT_ - 1));
        s->kind = (uint8_t)(i % 6);
        s->status = (uint8_t)(i % 3);
        s->flags = (i % 7 == 0) ? CBT_SPANF_INCOMPLETE : 0;
        s->start_ns = T0 + (uint64_t)i * 1000;
        s->end_ns = s->start_ns + (uint64_t)i * 37;
        s->attrs_dropped = (uint16_t)(i % 5);
        uint32_t na = i % 5;
        for (uint32_t k = 0; k < na; k++) {
            switch (k) {
            case 0: cbt_span_set_i64(s, keys[0], (int64_t)i * 1000003 - 5000000000ll); break;
            case 1: cbt_span_set_f64(s, keys[1], i / 7.0); break;
            case 2: cbt_span_set_bool(s, keys[2], i & 2); break;
            default: {
                char v[48];
                int l = snprintf(v, sizeof v, "session-%08u-%s", i, (i % 11) ? "ok" : "\xff");
                cbt_span_set_str(s, keys[3], v, (size_t)l);
            }
            }
        }
    }
    /* the buffer already holds something: encoding appends after it */
    const char prefix[] = "keep me";
    cbt_buf b = {malloc(8), sizeof prefix - 1, 8};
    assert_non_null(b.data);
    memcpy(b.data, prefix, sizeof prefix - 1);
    assert_int_equal(cbt_otlp_encode_proto(&r, sp, N, &b), CBT_OK);
    size_t len1 = b.len - (sizeof prefix - 1);
    assert_int_equal(cbt_otlp_encode_proto(&r, sp + 1, N - 1, &b), CBT_OK);
    assert_memory_equal(b.data, prefix, sizeof prefix - 1);
    pb_req *q = decode(&b, sizeof prefix - 1, len1);
    const Opentelemetry__Proto__Trace__V1__ScopeSpans *ss = check_shape(q, N);
    for (size_t i = 0; i < N; i++)
        check_span(ss->spans[i], &sp[i]);
    free_req(q);
    q = decode(&b, sizeof prefix - 1 + len1, b.len - (sizeof prefix - 1) - len1);
    ss = check_shape(q, N - 1);
    for (size_t i = 0; i + 1 < N; i++)
        check_span(ss->spans[i], &sp[i + 1]);
    free_req(q);
    print_message("10k spans: %zu bytes of protobuf (%.1f per span)\n", len1, (double)len1 / N);

    /* JSON: valid, and every span once */
    b.len = 0;
    assert_int_equal(cbt_otlp_encode_json(&r, sp, N, &b), CBT_OK);
    size_t count = 0;
    for (const char *p = (const char *)b.data, *end = p + b.len;
         (p = memmem(p, (size_t)(end - p), "\"spanId\":", 9)) != NULL; p += 9)
        count++;
    assert_int_equal(count, N);
    cbt_buf_free(&b);
    free(sp);
}

/* ---- JSON ------------------------------------------------------------------------------ */

static char *json_of(const cbt_otlp_resource *r, const cbt_span *sp, size_t n)
{
    cbt_buf b = {0};
    assert_int_equal(cbt_otlp_encode_json(r, sp, n, &b), CBT_OK);
    char *s = strndup((const char *)b.data, b.len);
    assert_non_null(s);
    cbt_buf_free(&b);
    return s;
}

/* `"key":"<n lowercase hex digits>"` occurs `times` times. */
static size_t count_hex_field(const char *js, const char *key, size_t digits)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    size_t found = 0;
    for (const char *p = js; (p = strstr(p, pat)) != NULL; p++) {
        const char *h = p + strlen(pat);
        size_t k = 0;
        while ((h[k] >= '0' && h[k] <= '9') || (h[k] >= 'a' && h[k] <= 'f'))
            k++;
        assert_int_equal(k, digits);
        assert_int_equal(h[k], '"');
        found++;
    }
    return found;
}

/* Python's json module accepts it (python3 is a build requirement). */
static void python_json_ok(const char *js)
{
    char path[] = "/tmp/cbt-otlp-json-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t len = strlen(js);
    assert_int_equal(write(fd, js, len), (ssize_t)len);
    close(fd);
    char cmd[256];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); "
             "sys.exit(0 if len(d[\"resourceSpans\"])==1 else 3)' %s",
             path);
    int rc = system(cmd);
    unlink(path);
    assert_int_equal(rc, 0);
}

static void json_mapping(void **state)
{
    (void)state;
    cbt_otlp_resource r;
    emit_resource(&r);
    cbt_span sp[EMIT_N];
    emit_spans(sp);
    char *js = json_of(&r, sp, EMIT_N);
    python_json_ok(js);
    assert_int_equal(js[0], '{');
    assert_non_null(strstr(js, "{\"resourceSpans\":[{\"resource\":{\"attributes\":["));
    assert_non_null(strstr(js, "\"scopeSpans\":[{\"scope\":{\"name\":\"cbt\",\"version\":\"" CBT_VERSION_STRING "\"}"));
    assert_int_equal(count_hex_field(js, "traceId", 32), EMIT_N);
    assert_int_equal(count_hex_field(js, "spanId", 16), EMIT_N);
    assert_int_equal(count_hex_field(js, "parentSpanId", 16), EMIT_N - 1); /* the root has none */
    assert_non_null(strstr(js, "\"traceId\":\"0102030405060708090a0b0c0d0e0f10\""));
    assert_non_null(strstr(js, "\"spanId\":\"a1a2a3a4a5a6a7a8\""));
    /* int64 as strings, doubles as numbers, enums and counts as numbers */
    assert_non_null(strstr(js, "{\"key\":\"requested_tokens\",\"value\":{\"intValue\":\"512\"}}"));
    assert_non_null(strstr(js, "\"intValue\":\"-7\""));
    assert_non_null(strstr(js, "\"intValue\":\"9223372036854775807\""));
    assert_non_null(strstr(js, "\"intValue\":\"-9223372036854775808\""));
    assert_non_null(strstr(js, "{\"key\":\"hit_rate\",\"value\":{\"doubleValue\":0.5}}"));
    assert_non_null(strstr(js, "\"doubleValue\":-2.25"));
    assert_non_null(strstr(js, "{\"key\":\"worker\",\"value\":{\"boolValue\":true}}"));
    assert_non_null(strstr(js, "{\"key\":\"flag\",\"value\":{\"boolValue\":false}}"));
    assert_non_null(strstr(js, "{\"key\":\"empty\",\"value\":{\"stringValue\":\"\"}}"));
    assert_non_null(strstr(js, "{\"key\":\"cbt.incomplete\",\"value\":{\"boolValue\":true}}"));
    assert_non_null(strstr(js, "\"startTimeUnixNano\":\"1700000000000000000\""));
    assert_non_null(strstr(js, "\"endTimeUnixNano\":\"1700000000005000000\""));
    assert_non_null(strstr(js, "\"kind\":2"));
    assert_non_null(strstr(js, "\"flags\":1,"));
    assert_non_null(strstr(js, "\"status\":{\"code\":1}"));
    assert_non_null(strstr(js, "\"status\":{\"code\":2}"));
    assert_non_null(strstr(js, "\"droppedAttributesCount\":3"));
    assert_non_null(strstr(js, "{\"key\":\"process.pid\",\"value\":{\"intValue\":\"4242\"}}"));
    assert_non_null(strstr(js, "{\"key\":\"cbt.gpu.name\",\"value\":{\"stringValue\":\"NVIDIA H200\"}}"));
    /* escapes and repair */
    assert_non_null(strstr(js, "\"stringValue\":\"gpu\\ufffd\\ufffd0\""));
    assert_non_null(strstr(js, "\"stringValue\":\"h\xc3\xa9llo \xe2\x9c\x93 \\\"q\\\" \\\\ \\u000a\""));
    assert_non_null(strstr(js, "\"stringValue\":\"ab\\ufffd\\ufffd\""));
    /* span events: after the span's attributes, times as strings */
    assert_non_null(strstr(js, "\"events\":[{\"timeUnixNano\":\"0\",\"name\":\"mark\"}]"));
    assert_non_null(strstr(js, "\"attributes\":[{\"key\":\"session_id\",\"value\":{\"stringValue\":"
                               "\"sess-0001\"}},{\"key\":\"count\",\"value\":{\"intValue\":\"7\"}}],"
                               "\"events\":[{\"timeUnixNano\":\"1700000000000008000\",\"name\":"
                               "\"exception\",\"attributes\":[{\"key\":\"exception.type\","));
    assert_non_null(strstr(js, "{\"timeUnixNano\":\"1700000000000008500\",\"name\":\"retry\","
                               "\"attributes\":[{\"key\":\"attempt\",\"value\":{\"intValue\":\"2\"}},"));
    assert_non_null(strstr(js, "{\"key\":\"final\",\"value\":{\"boolValue\":false}}],"
                               "\"droppedAttributesCount\":1}],\"droppedEventsCount\":2,"));
    /* camelCase only, and no proto enum names */
    const char *snake[] = {"trace_id", "span_id", "parent_span", "start_time", "end_time",
                           "dropped_", "resource_spans", "scope_spans", "int_value",
                           "string_value", "SPAN_KIND", "STATUS_CODE"};
    for (size_t i = 0; i < sizeof snake / sizeof snake[0]; i++)
        assert_null(strstr(js, snake[i]));
    free(js);

    /* doubles that are not numbers, and ones that look like integers */
    cbt_span s;
    memset(&s, 0, sizeof s);
    ids(s.ctx.trace_id, 16, 1);
    ids(s.ctx.span_id, 8, 9);
    s.name = CBT_N_REQUEST;
    assert_int_equal(cbt_span_set_f64(&s, tu_name("j.nan"), NAN), CBT_OK);
    assert_int_equal(cbt_span_set_f64(&s, tu_name("j.inf"), -INFINITY), CBT_OK);
    assert_int_equal(cbt_span_set_f64(&s, tu_name("j.one"), 1.0), CBT_OK);
    js = json_of(&r, &s, 1);
    python_json_ok(js);
    assert_non_null(strstr(js, "\"doubleValue\":\"NaN\""));
    assert_non_null(strstr(js, "\"doubleValue\":\"-Infinity\""));
    assert_non_null(strstr(js, "\"doubleValue\":1.0}"));
    assert_null(strstr(js, "parentSpanId"));
    assert_null(strstr(js, "\"status\""));
    assert_null(strstr(js, "\"flags\""));
    free(js);
}

/* JSON output past the first guess of its size (long strings in every span). */
static void json_grows(void **state)
{
    (void)state;
    cbt_otlp_resource r;
    emit_resource(&r);
    for (uint32_t i = 0; i < CBT_OTLP_MAX_ATTRS; i++) {
        snprintf(r.extra[i].key, sizeof r.extra[i].key, "x.%u", i);
        memset(r.extra[i].value, '\x01', CBT_OTLP_STR_MAX - 1); /* six bytes each as \u0001 */
        r.extra[i].value[CBT_OTLP_STR_MAX - 1] = '\0';
    }
    r.n_extra = CBT_OTLP_MAX_ATTRS;
    cbt_span s;
    memset(&s, 0, sizeof s);
    ids(s.ctx.trace_id, 16, 1);
    ids(s.ctx.span_id, 8, 9);
    s.name = CBT_N_REQUEST;
    char junk[CBT_SPAN_STR_ARENA / CBT_SPAN_ATTR_MAX];
    memset(junk, 0x02, sizeof junk);
    for (int i = 0; i < CBT_SPAN_ATTR_MAX; i++) {
        char key[16];
        snprintf(key, sizeof key, "grow.k%02d", i);
        set_str(&s, key, junk, sizeof junk);
    }
    cbt_span many[4] = {s, s, s, s};
    char *js = json_of(&r, many, 4);
    python_json_ok(js);
    assert_true(strlen(js) > 4096 + 4 * 1024);
    free(js);
}

/* ---- the resource ---------------------------------------------------------------------- */

static int is_uuid_v4(const char *s)
{
    if (strlen(s) != 36)
        return 0;
    for (int i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-')
                return 0;
        } else if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) {
            return 0;
        }
    }
    return s[14] == '4' && strchr("89ab", s[19]) != NULL;
}

static void resource_default(void **state)
{
    (void)state;
    cbt_otlp_resource a, b;
    memset(&a, 0x5a, sizeof a);
    cbt_otlp_resource_default(&a);
    cbt_otlp_resource_default(&b);
    cbt_otlp_resource_default(NULL);
    assert_string_equal(a.service_name, "cbt");
    assert_true(is_uuid_v4(a.service_instance_id));
    assert_true(is_uuid_v4(b.service_instance_id));
    assert_string_not_equal(a.service_instance_id, b.service_instance_id);
    char host[256] = {0};
    assert_int_equal(gethostname(host, sizeof host - 1), 0);
    assert_string_equal(a.host_name, host);
    assert_int_equal(a.pid, getpid());
    assert_int_equal(a.n_extra, 0);
#ifndef CBT_WITH_CUDA
    assert_string_equal(a.gpu_name, "");
#endif
    print_message("default resource: host %s, pid %lld, gpu \"%s\", instance %s\n", a.host_name,
                  (long long)a.pid, a.gpu_name, a.service_instance_id);

    /* what goes out */
    cbt_buf buf = {0};
    assert_int_equal(cbt_otlp_encode_proto(&a, NULL, 0, &buf), CBT_OK);
    pb_req *q = decode(&buf, 0, buf.len);
    check_res_str(q, 0, "service.name", "cbt");
    check_res_str(q, 1, "service.instance.id", a.service_instance_id);
    check_res_str(q, 2, "host.name", host);
    assert_string_equal(res_attr(q, 3)->key, "process.pid");
    assert_int_equal(res_attr(q, 3)->value->int_value, getpid());
    size_t n = q->resource_spans[0]->resource->n_attributes;
    assert_int_equal(n, a.gpu_name[0] ? 5 : 4);
    if (a.gpu_name[0])
        check_res_str(q, 4, "cbt.gpu.name", a.gpu_name);
    free_req(q);
    cbt_buf_free(&buf);
}

/* Extras replace detected values; service.name stays r->service_name; the
 * last of two equal extras wins; empty keys and values left out as said. */
static void resource_precedence(void **state)
{
    (void)state;
    cbt_otlp_resource r;
    memset(&r, 0, sizeof r); /* empty service name: "cbt"; nothing else built in */
    const char *kv[][2] = {
        {"host.name", "from-env"}, {"service.name", "ignored"}, {"a", "1"},
        {"", "no key"},            {"a", "2"},                  {"process.pid", "77"},
    };
    for (size_t i = 0; i < 6; i++) {
        strcpy(r.extra[i].key, kv[i][0]);
        strcpy(r.extra[i].value, kv[i][1]);
    }
    r.n_extra = 6;
    strcpy(r.host_name, "detected");
    r.pid = 12;
    cbt_buf b = {0};
    assert_int_equal(cbt_otlp_encode_proto(&r, NULL, 0, &b), CBT_OK);
    pb_req *q = decode(&b, 0, b.len);
    check_res_str(q, 0, "service.name", "cbt");
    check_res_str(q, 1, "host.name", "from-env");
    check_res_str(q, 2, "a", "2");
    check_res_str(q, 3, "process.pid", "77");
    assert_int_equal(q->resource_spans[0]->resource->n_attributes, 4);
    free_req(q);

    r.n_extra = 1000; /* clamped to CBT_OTLP_MAX_ATTRS */
    b.len = 0;
    assert_int_equal(cbt_otlp_encode_proto(&r, NULL, 0, &b), CBT_OK);
    q = decode(&b, 0, b.len);
    assert_int_equal(q->resource_spans[0]->resource->n_attributes, 4);
    free_req(q);
    cbt_buf_free(&b);
}

/* ---- spans made by the real tracer ---------------------------------------------------- */

static void tracer_spans(void **state)
{
    (void)state;
    tu_start(NULL);
    tu_pub(CBT_EV_MP_REQUEST_START, "otlp-1");
    tu_pub_i64(CBT_EV_MP_LOOKUP_PREFETCH_START, "otlp-1", "num_tokens", 256, NULL, 0);
    tu_pub_i64(CBT_EV_MP_LOOKUP_PREFETCH_END, "otlp-1", "hit_tokens", 128, "requested_tokens", 256);
    tu_pub(CBT_EV_MP_REQUEST_END, "otlp-1");
    tu_pub(CBT_EV_MP_REQUEST_START, "otlp-2"); /* never ends: incomplete at shutdown */
    tu_flush();
    tu_stop();
    uint32_t n = tu_span_count();
    assert_true(n >= 3);
    cbt_span *sp = calloc(n, sizeof *sp);
    assert_non_null(sp);
    int incomplete = 0, children = 0;
    for (uint32_t i = 0; i < n; i++) {
        sp[i] = *tu_span(i);
        incomplete += (sp[i].flags & CBT_SPANF_INCOMPLETE) != 0;
        children += !tu_is_root(&sp[i]);
    }
    assert_true(incomplete >= 1);
    assert_true(children >= 1);
    cbt_otlp_resource r;
    cbt_otlp_resource_default(&r);
    check_all(&r, sp, n);
    free(sp);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--emit") == 0) {
        if (argc != 4 && argc != 5) {
            fprintf(stderr, "usage: %s --emit <file.pb> <file.json> [<file.otlp.jsonl>]\n",
                    argv[0]);
            return 2;
        }
        return emit(argv[2], argv[3], argc == 5 ? argv[4] : NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fixed_set_every_field),
        cmocka_unit_test(invalid_utf8_repaired),
        cmocka_unit_test(empty_span_list),
        cmocka_unit_test(bad_arguments),
        cmocka_unit_test(broken_attributes_dropped),
        cmocka_unit_test(span_at_limits),
        cmocka_unit_test(many_spans),
        cmocka_unit_test(json_mapping),
        cmocka_unit_test(json_grows),
        cmocka_unit_test(resource_default),
        cmocka_unit_test(resource_precedence),
        cmocka_unit_test_teardown(tracer_spans, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
