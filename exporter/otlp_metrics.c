/* exporter/otlp_metrics.c — owns OTLP encoding of the lmcache_blend.* metrics
 * (otlp.h): one cbt_blend_snapshot as an ExportMetricsServiceRequest, in
 * protobuf bytes and in OTLP/JSON.
 *
 * Protobuf: the writer of otlp_encode.c (otlp_wire.h), not protobuf-c (the
 * generated code from exporter/proto/ is only the tests' decoder). As for
 * spans, one pass sizes every message exactly (a plan on the stack, no
 * allocation: the snapshot has a fixed shape), the buffer grows once, and a
 * second pass writes with minimal lengths, so the bytes are protobuf's
 * canonical encoding (fields in number order, packed repeated scalars).
 *
 * What goes out:
 *   ExportMetricsServiceRequest.resource_metrics[1]
 *     resource        the trace exporter's resource, attribute for attribute
 *     scope_metrics[1]
 *       scope         name "cbt", version CBT_VERSION_STRING
 *       metrics       every counter (CBT_BLEND_COUNTERS order), then every
 *                     histogram (CBT_BLEND_HISTOGRAMS order), zero or not:
 *                     a cumulative series exists from the set's creation
 *   A counter: Metric {name, description, unit, sum = Sum {
 *     data_points[1] = {start_time_unix_nano = s->start_ns,
 *                       time_unix_nano = s->time_ns, as_int},
 *     aggregation_temporality = CUMULATIVE (2), is_monotonic = true}}
 *   A histogram: Metric {name, description, unit "ms", histogram = Histogram {
 *     data_points[1] = {start, time, count, sum (always present),
 *       bucket_counts (CBT_BLEND_N_BOUNDS + 1), explicit_bounds
 *       (CBT_BLEND_N_BOUNDS, cbt_blend_bounds_ms()), exemplars, min and max
 *       (present only when count > 0)},
 *     aggregation_temporality = CUMULATIVE}}
 *   An exemplar (one per bucket that was hit, in bucket order): time_unix_nano,
 *     as_double (ms), span_id (8 bytes), trace_id (16 bytes) — ids left out
 *     when all zero — and filtered_attributes [request_id: string] when the
 *     span had a request_id.
 * Proto3 defaults (zero times, zero count, zero flags) are not written; a
 * oneof member (as_int, as_double) and a proto3 `optional` (sum, min, max)
 * always are when set, 0 included.
 *
 * OTLP/JSON: the same content through the proto3 JSON mapping with OTLP's
 * exceptions, as for spans: camelCase keys, ids as lowercase hex, 64-bit
 * integers (asInt, count, bucketCounts, *TimeUnixNano) as decimal strings,
 * the temporality enum as a number, doubles as numbers (NaN and the
 * infinities as strings).
 *
 * Strings that are not valid UTF-8 (a request_id can be anything a client
 * sent) are repaired in both, as for spans.
 */
#include <stdbool.h>
#include <string.h>

#include "cbt/otlp.h"
#include "otlp_wire.h"

/* AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE */
#define TEMPORALITY_CUMULATIVE 2u
#define N_BUCKETS (CBT_BLEND_N_BOUNDS + 1)
#define N_METRICS (CBT_BC_COUNT_ + CBT_BH_COUNT_)
/* the exemplar's one filtered attribute: the span attribute of that name */
static const char k_request_id[] = "request_id";

/* ---- the plan: every message's body length -------------------------------------------- */

typedef struct ex_plan {
    cbt_otlp_str rid;   /* request_id (rid.n == 0: no attribute) */
    uint32_t any_len;   /* AnyValue body */
    uint32_t kv_len;    /* KeyValue body */
    bool has_trace, has_span;
    uint32_t body;      /* Exemplar body */
} ex_plan;

typedef struct metric_plan {
    cbt_otlp_str name, desc, unit;
    uint32_t point;     /* NumberDataPoint / HistogramDataPoint body */
    uint32_t data;      /* Sum / Histogram body */
    uint32_t body;      /* Metric body */
    ex_plan ex[N_BUCKETS];
} metric_plan;

typedef struct req_plan {
    metric_plan m[N_METRICS];
    size_t res_len, scope_len, sm_len, rm_len, total;
} req_plan;

static cbt_otlp_str cstr(const char *s)
{
    return cbt_otlp_str_of(s ? s : "", s ? (uint32_t)strlen(s) : 0);
}

static inline bool nonzero(const uint8_t *p, size_t n)
{
    uint8_t acc = 0;
    for (size_t i = 0; i < n; i++)
        acc |= p[i];
    return acc != 0;
}

static uint32_t name_fields_len(const metric_plan *m)
{
    size_t z = 0;
    if (m->name.out)
        z += ld_size(m->name.out);
    if (m->desc.out)
        z += ld_size(m->desc.out);
    if (m->unit.out)
        z += ld_size(m->unit.out);
    return (uint32_t)z;
}

static void plan_exemplar(const cbt_blend_exemplar *x, ex_plan *p)
{
    p->rid = cbt_otlp_str_of(x->request_id, (uint32_t)strnlen(x->request_id,
                                                                sizeof x->request_id));
    p->has_trace = nonzero(x->trace_id, 16);
    p->has_span = nonzero(x->span_id, 8);
    size_t z = 9; /* as_double */
    if (x->time_ns)
        z += 9;
    if (p->has_span)
        z += 10;
    if (p->has_trace)
        z += 18;
    if (p->rid.n) {
        p->any_len = (uint32_t)ld_size(p->rid.out);                         /* string_value */
        p->kv_len = (uint32_t)(ld_size(sizeof k_request_id - 1) + ld_size(p->any_len));
        z += ld_size(p->kv_len);
    }
    p->body = (uint32_t)z;
}

static void plan_request(const cbt_otlp_resource *r, const cbt_blend_snapshot *s, req_plan *p)
{
    size_t times = (s->start_ns ? 9 : 0) + (s->time_ns ? 9 : 0);
    size_t sm = 0;
    for (unsigned c = 0; c < CBT_BC_COUNT_; c++) {
        metric_plan *m = &p->m[c];
        m->name = cstr(cbt_blend_counter_name((cbt_blend_counter)c));
        m->desc = cstr(cbt_blend_counter_desc((cbt_blend_counter)c));
        m->unit = cstr(cbt_blend_counter_unit((cbt_blend_counter)c));
        m->point = (uint32_t)(times + 9);                /* + as_int */
        m->data = (uint32_t)(ld_size(m->point) + 2 + 2); /* temporality, is_monotonic */
        m->body = name_fields_len(m) + (uint32_t)ld_size(m->data);
        sm += ld_size(m->body);
    }
    for (unsigned h = 0; h < CBT_BH_COUNT_; h++) {
        const cbt_blend_hist_point *hp = &s->hists[h];
        metric_plan *m = &p->m[CBT_BC_COUNT_ + h];
        m->name = cstr(cbt_blend_hist_name((cbt_blend_hist)h));
        m->desc = cstr(cbt_blend_hist_desc((cbt_blend_hist)h));
        m->unit = cstr("ms");
        size_t z = times + 9;               /* + sum */
        if (hp->count)
            z += 9 + 9 + 9;                 /* count, min, max */
        z += ld_size(N_BUCKETS * 8);        /* bucket_counts, packed fixed64 */
        z += ld_size(CBT_BLEND_N_BOUNDS * 8); /* explicit_bounds, packed double */
        for (unsigned b = 0; b < N_BUCKETS; b++) {
            if (!hp->exemplars[b].valid)
                continue;
            plan_exemplar(&hp->exemplars[b], &m->ex[b]);
            z += ld_size(m->ex[b].body);
        }
        m->point = (uint32_t)z;
        m->data = (uint32_t)(ld_size(m->point) + 2); /* temporality */
        m->body = name_fields_len(m) + (uint32_t)ld_size(m->data);
        sm += ld_size(m->body);
    }
    p->res_len = cbt_otlp_pb_resource_len(r);
    p->scope_len = cbt_otlp_pb_scope_len();
    p->sm_len = ld_size(p->scope_len) + sm;
    p->rm_len = ld_size(p->res_len) + ld_size(p->sm_len);
    p->total = ld_size(p->rm_len);
}

/* ---- protobuf: writing ---------------------------------------------------------------- */

static uint8_t *put_f64(uint8_t *w, unsigned field, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, 8);
    *w++ = (uint8_t)TAG(field, WT_I64);
    return put_fixed64(w, bits);
}

static uint8_t *put_fx64(uint8_t *w, unsigned field, uint64_t v)
{
    *w++ = (uint8_t)TAG(field, WT_I64);
    return put_fixed64(w, v);
}

static uint8_t *put_names(uint8_t *w, const metric_plan *m)
{
    if (m->name.out)
        w = cbt_otlp_put_str(w, 1, m->name); /* Metric.name */
    if (m->desc.out)
        w = cbt_otlp_put_str(w, 2, m->desc); /* Metric.description */
    if (m->unit.out)
        w = cbt_otlp_put_str(w, 3, m->unit); /* Metric.unit */
    return w;
}

static uint8_t *put_times(uint8_t *w, const cbt_blend_snapshot *s)
{
    if (s->start_ns)
        w = put_fx64(w, 2, s->start_ns); /* start_time_unix_nano */
    if (s->time_ns)
        w = put_fx64(w, 3, s->time_ns);  /* time_unix_nano */
    return w;
}

static uint8_t *put_exemplar(uint8_t *w, const cbt_blend_exemplar *x, const ex_plan *p)
{
    w = put_ld_head(w, 8, p->body); /* HistogramDataPoint.exemplars */
    if (x->time_ns)
        w = put_fx64(w, 2, x->time_ns);  /* Exemplar.time_unix_nano */
    w = put_f64(w, 3, x->value_ms);      /* Exemplar.as_double */
    if (p->has_span) {
        w = put_ld_head(w, 4, 8);        /* Exemplar.span_id */
        memcpy(w, x->span_id, 8);
        w += 8;
    }
    if (p->has_trace) {
        w = put_ld_head(w, 5, 16);       /* Exemplar.trace_id */
        memcpy(w, x->trace_id, 16);
        w += 16;
    }
    if (p->rid.n) {
        w = put_ld_head(w, 7, p->kv_len); /* Exemplar.filtered_attributes */
        w = cbt_otlp_put_str(w, 1, cbt_otlp_str_of(k_request_id, sizeof k_request_id - 1));
        w = put_ld_head(w, 2, p->any_len);  /* KeyValue.value */
        w = cbt_otlp_put_str(w, 1, p->rid); /* AnyValue.string_value */
    }
    return w;
}

/* as_int is signed 64-bit: a counter past INT64_MAX (2^63 tokens: never in
 * practice) saturates rather than turning negative */
static uint64_t as_int(uint64_t v) { return v > (uint64_t)INT64_MAX ? (uint64_t)INT64_MAX : v; }

static uint8_t *put_counter(uint8_t *w, const cbt_blend_snapshot *s, unsigned c,
                            const metric_plan *m)
{
    w = put_ld_head(w, 2, m->body); /* ScopeMetrics.metrics */
    w = put_names(w, m);
    w = put_ld_head(w, 7, m->data);  /* Metric.sum */
    w = put_ld_head(w, 1, m->point); /* Sum.data_points */
    w = put_times(w, s);
    w = put_fx64(w, 6, as_int(s->counters[c])); /* NumberDataPoint.as_int (sfixed64) */
    *w++ = TAG(2, WT_VARINT);           /* Sum.aggregation_temporality */
    *w++ = TEMPORALITY_CUMULATIVE;
    *w++ = TAG(3, WT_VARINT);           /* Sum.is_monotonic */
    *w++ = 1;
    return w;
}

static uint8_t *put_histogram(uint8_t *w, const cbt_blend_snapshot *s, unsigned h,
                              const metric_plan *m)
{
    const cbt_blend_hist_point *hp = &s->hists[h];
    const double *bounds = cbt_blend_bounds_ms();
    w = put_ld_head(w, 2, m->body);  /* ScopeMetrics.metrics */
    w = put_names(w, m);
    w = put_ld_head(w, 9, m->data);  /* Metric.histogram */
    w = put_ld_head(w, 1, m->point); /* Histogram.data_points */
    w = put_times(w, s);
    if (hp->count)
        w = put_fx64(w, 4, hp->count); /* count */
    w = put_f64(w, 5, hp->sum_ms);     /* sum */
    w = put_ld_head(w, 6, N_BUCKETS * 8); /* bucket_counts */
    for (unsigned b = 0; b < N_BUCKETS; b++)
        w = put_fixed64(w, hp->buckets[b]);
    w = put_ld_head(w, 7, CBT_BLEND_N_BOUNDS * 8); /* explicit_bounds */
    for (unsigned b = 0; b < CBT_BLEND_N_BOUNDS; b++) {
        uint64_t bits;
        memcpy(&bits, &bounds[b], 8);
        w = put_fixed64(w, bits);
    }
    for (unsigned b = 0; b < N_BUCKETS; b++)
        if (hp->exemplars[b].valid)
            w = put_exemplar(w, &hp->exemplars[b], &m->ex[b]);
    if (hp->count) {
        w = put_f64(w, 11, hp->min_ms); /* min */
        w = put_f64(w, 12, hp->max_ms); /* max */
    }
    *w++ = TAG(2, WT_VARINT); /* Histogram.aggregation_temporality */
    *w++ = TEMPORALITY_CUMULATIVE;
    return w;
}

cbt_status cbt_otlp_encode_metrics_proto(const cbt_otlp_resource *r, const cbt_blend_snapshot *s,
                                         cbt_buf *out)
{
    if (!r || !s || !out)
        return CBT_ERR_INVAL;
    req_plan p;
    plan_request(r, s, &p);
    cbt_status st = cbt_otlp_buf_reserve(out, p.total);
    if (st != CBT_OK)
        return st;
    uint8_t *w = out->data + out->len;
    uint8_t *const w0 = w;
    w = put_ld_head(w, 1, p.rm_len);       /* ExportMetricsServiceRequest.resource_metrics */
    w = cbt_otlp_pb_put_resource(w, 1, r); /* ResourceMetrics.resource */
    w = put_ld_head(w, 2, p.sm_len);       /* ResourceMetrics.scope_metrics */
    w = cbt_otlp_pb_put_scope(w, 1);       /* ScopeMetrics.scope */
    for (unsigned c = 0; c < CBT_BC_COUNT_; c++)
        w = put_counter(w, s, c, &p.m[c]);
    for (unsigned h = 0; h < CBT_BH_COUNT_; h++)
        w = put_histogram(w, s, h, &p.m[CBT_BC_COUNT_ + h]);
    out->len += (size_t)(w - w0);
    return CBT_OK;
}

/* ---- OTLP/JSON ------------------------------------------------------------------------- */

static inline void j_lit(cbt_jbuf *b, const char *s, size_t n) { cbt_jbuf_raw(b, s, n); }
#define J(b, lit) j_lit((b), (lit), sizeof(lit) - 1)

static void j_cstr(cbt_jbuf *b, const char *s)
{
    s = s ? s : "";
    cbt_otlp_json_str(b, s, strlen(s));
}

/* "key":"<decimal>" */
static void j_u64_str(cbt_jbuf *b, uint64_t v)
{
    J(b, "\"");
    cbt_otlp_json_u64(b, v);
    J(b, "\"");
}

static void j_names(cbt_jbuf *b, const char *name, const char *desc, const char *unit)
{
    J(b, "{\"name\":");
    j_cstr(b, name);
    J(b, ",\"description\":");
    j_cstr(b, desc);
    J(b, ",\"unit\":");
    j_cstr(b, unit);
}

static void j_times(cbt_jbuf *b, const cbt_blend_snapshot *s)
{
    J(b, "{\"startTimeUnixNano\":");
    j_u64_str(b, s->start_ns);
    J(b, ",\"timeUnixNano\":");
    j_u64_str(b, s->time_ns);
}

static void j_exemplar(cbt_jbuf *b, const cbt_blend_exemplar *x)
{
    J(b, "{\"timeUnixNano\":");
    j_u64_str(b, x->time_ns);
    J(b, ",\"asDouble\":");
    cbt_jbuf_f64(b, x->value_ms);
    if (nonzero(x->span_id, 8)) {
        J(b, ",\"spanId\":");
        cbt_jbuf_hex(b, x->span_id, 8);
    }
    if (nonzero(x->trace_id, 16)) {
        J(b, ",\"traceId\":");
        cbt_jbuf_hex(b, x->trace_id, 16);
    }
    size_t n = strnlen(x->request_id, sizeof x->request_id);
    if (n) {
        J(b, ",\"filteredAttributes\":[{\"key\":");
        cbt_otlp_json_str(b, k_request_id, sizeof k_request_id - 1);
        J(b, ",\"value\":{\"stringValue\":");
        cbt_otlp_json_str(b, x->request_id, n);
        J(b, "}}]");
    }
    J(b, "}");
}

static void j_counter(cbt_jbuf *b, const cbt_blend_snapshot *s, unsigned c)
{
    cbt_blend_counter k = (cbt_blend_counter)c;
    j_names(b, cbt_blend_counter_name(k), cbt_blend_counter_desc(k), cbt_blend_counter_unit(k));
    J(b, ",\"sum\":{\"dataPoints\":[");
    j_times(b, s);
    J(b, ",\"asInt\":");
    j_u64_str(b, as_int(s->counters[c]));
    J(b, "}],\"aggregationTemporality\":2,\"isMonotonic\":true}}");
}

static void j_histogram(cbt_jbuf *b, const cbt_blend_snapshot *s, unsigned h)
{
    const cbt_blend_hist_point *hp = &s->hists[h];
    const double *bounds = cbt_blend_bounds_ms();
    cbt_blend_hist k = (cbt_blend_hist)h;
    j_names(b, cbt_blend_hist_name(k), cbt_blend_hist_desc(k), "ms");
    J(b, ",\"histogram\":{\"dataPoints\":[");
    j_times(b, s);
    J(b, ",\"count\":");
    j_u64_str(b, hp->count);
    J(b, ",\"sum\":");
    cbt_jbuf_f64(b, hp->sum_ms);
    J(b, ",\"bucketCounts\":[");
    for (unsigned i = 0; i < N_BUCKETS; i++) {
        if (i)
            J(b, ",");
        j_u64_str(b, hp->buckets[i]);
    }
    J(b, "],\"explicitBounds\":[");
    for (unsigned i = 0; i < CBT_BLEND_N_BOUNDS; i++) {
        if (i)
            J(b, ",");
        cbt_jbuf_f64(b, bounds[i]);
    }
    J(b, "]");
    bool first = true;
    for (unsigned i = 0; i < N_BUCKETS; i++) {
        if (!hp->exemplars[i].valid)
            continue;
        if (first)
            J(b, ",\"exemplars\":[");
        else
            J(b, ",");
        first = false;
        j_exemplar(b, &hp->exemplars[i]);
    }
    if (!first)
        J(b, "]");
    if (hp->count) {
        J(b, ",\"min\":");
        cbt_jbuf_f64(b, hp->min_ms);
        J(b, ",\"max\":");
        cbt_jbuf_f64(b, hp->max_ms);
    }
    J(b, "}],\"aggregationTemporality\":2}}");
}

static void j_doc(cbt_jbuf *b, const cbt_otlp_resource *r, const cbt_blend_snapshot *s)
{
    J(b, "{\"resourceMetrics\":[{\"resource\":");
    cbt_otlp_json_resource(b, r);
    J(b, ",\"scopeMetrics\":[{\"scope\":");
    cbt_otlp_json_scope(b);
    J(b, ",\"metrics\":[");
    for (unsigned c = 0; c < CBT_BC_COUNT_; c++) {
        if (c)
            J(b, ",");
        j_counter(b, s, c);
    }
    for (unsigned h = 0; h < CBT_BH_COUNT_; h++) {
        J(b, ",");
        j_histogram(b, s, h);
    }
    J(b, "]}]}]}");
}

cbt_status cbt_otlp_encode_metrics_json(const cbt_otlp_resource *r, const cbt_blend_snapshot *s,
                                        cbt_buf *out)
{
    if (!r || !s || !out)
        return CBT_ERR_INVAL;
    /* a guess, then exactly what the first try said it needs (the bounded
     * writer counts past its end; the output is deterministic) */
    size_t want = 32768;
    for (int attempt = 0; attempt < 2; attempt++) {
        cbt_status st = cbt_otlp_buf_reserve(out, want);
        if (st != CBT_OK)
            return st;
        cbt_jbuf b = {(char *)out->data + out->len, out->cap - out->len, 0};
        j_doc(&b, r, s);
        if (b.need <= b.cap) {
            out->len += b.need;
            return CBT_OK;
        }
        want = b.need;
    }
    return CBT_ERR_NOMEM; /* not reached: the second try has the room it asked for */
}
