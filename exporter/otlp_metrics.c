/* exporter/otlp_metrics.c — owns OTLP encoding of metrics (otlp.h): the
 * lmcache_blend.* set (one cbt_blend_snapshot) and cbt's own health, the
 * cbt.* instruments (one cbt_otlp_self_snapshot, otlp_private.h: the
 * tracer's cbt_metrics and the exporter's cbt_otlp_stats), as one
 * ExportMetricsServiceRequest, in protobuf bytes and in OTLP/JSON. The
 * names, units, descriptions and attributes of the cbt.* instruments are
 * defined here (self_build) and listed in docs/exporters.md.
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
 *   Then the cbt.* instruments (self_build's order), after the blend set in
 *     the same ScopeMetrics (or alone): a counter a cumulative monotonic Sum,
 *     a depth or a lag a Gauge; one NumberDataPoint per attribute value
 *     (cbt.drop.reason, error.type: every value, zero or not, so each series
 *     exists from the start), {start_time_unix_nano (Sums only; the
 *     exporter's creation), time_unix_nano, as_int or as_double (seconds),
 *     attributes [key: string]}.
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
#include "otlp_private.h"
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

/* ---- cbt's own health: the cbt.* instruments ----------------------------------------------
 *
 * self_build turns a cbt_otlp_self_snapshot into this list; both encoders
 * write the list. Names follow OpenTelemetry's semantic conventions: a
 * namespace (cbt.events, cbt.spans, cbt.harvester, cbt.exporter) and a noun,
 * UCUM units with annotations ({event}, {span}) for counts and seconds for
 * durations, a counter a cumulative monotonic Sum, a level (a depth, a lag)
 * a Gauge. A counter split by why has one low-cardinality string attribute:
 * cbt.drop.reason, or error.type for the exporter's failures (the
 * conventions' key for an operation's failure class).
 */
#define SELF_MAX_POINTS CBT_OTLP_GRPC_CODES
#define SELF_MAX_METRICS 17

typedef struct self_point {
    const char *key, *val; /* its one attribute; NULL: none */
    bool dbl;              /* as_double, else as_int */
    uint64_t i;
    double d;
} self_point;

typedef struct self_metric {
    const char *name, *desc, *unit;
    bool gauge; /* else a cumulative monotonic Sum */
    uint32_t n;
    self_point p[SELF_MAX_POINTS];
} self_metric;

typedef struct self_list {
    uint64_t start_ns, time_ns;
    uint32_t n;
    self_metric m[SELF_MAX_METRICS];
} self_list;

static self_metric *self_add(self_list *l, const char *name, const char *unit, bool gauge,
                             const char *desc)
{
    self_metric *m = &l->m[l->n++];
    memset(m, 0, sizeof *m);
    m->name = name;
    m->unit = unit;
    m->gauge = gauge;
    m->desc = desc;
    return m;
}

static void self_int(self_metric *m, const char *key, const char *val, uint64_t v)
{
    self_point *p = &m->p[m->n++];
    p->key = key;
    p->val = val;
    p->dbl = false;
    p->i = v;
}

static void self_seconds(self_metric *m, uint64_t ns)
{
    self_point *p = &m->p[m->n++];
    p->key = p->val = NULL;
    p->dbl = true;
    p->d = (double)ns / 1e9; /* correctly rounded: 1500000 ns is the double 0.0015 */
}

/* a counter with no attributes */
static void self_count(self_list *l, const char *name, const char *unit, uint64_t v,
                       const char *desc)
{
    self_int(self_add(l, name, unit, false, desc), NULL, NULL, v);
}

static const char k_reason[] = "cbt.drop.reason";
static const char k_error[] = "error.type";

/* error.type of failures_by_http_class[k] and of failures_by_grpc_code[c] */
static const char *const k_http_class[6] = {"transport", "1xx", "2xx", "3xx", "4xx", "5xx"};
static const char *const k_grpc_code[CBT_OTLP_GRPC_CODES] = {
    "transport",         "CANCELLED",          "UNKNOWN",      "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED", "NOT_FOUND",          "ALREADY_EXISTS", "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",     "OUT_OF_RANGE",
    "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",  "DATA_LOSS",
    "UNAUTHENTICATED"};

static void self_build(const cbt_otlp_self_snapshot *s, self_list *l)
{
    l->n = 0;
    l->start_ns = s->start_ns;
    l->time_ns = s->time_ns;
    if (s->have_tracer) {
        const cbt_metrics *t = &s->tracer;
        self_count(l, "cbt.events.published", "{event}", t->published,
                   "Events accepted into cbt's queues (the publishing threads' lanes and the "
                   "shared queue)");
        self_metric *m = self_add(l, "cbt.events.dropped", "{event}", false,
                                  "Events cbt did not take, by cbt.drop.reason: queue_full (a "
                                  "lane, the shared queue or the stream pool was full), rejected "
                                  "(an unknown type or an invalid session), session_too_long "
                                  "(refused by cbt_event_init), stream_mark_lost (a stream mark "
                                  "accepted, then lost: no room when the stream reached it)");
        self_int(m, k_reason, "queue_full", t->dropped_full);
        self_int(m, k_reason, "rejected", t->rejected);
        self_int(m, k_reason, "session_too_long", t->session_too_long);
        self_int(m, k_reason, "stream_mark_lost", t->stream_marks_dropped);
        self_count(l, "cbt.events.truncated_values", "{value}", t->meta_truncated,
                   "String values cut to fit an event (the event itself was published)");
        self_count(l, "cbt.spans.started", "{span}", t->spans_started, "Spans started");
        self_count(l, "cbt.spans.ended", "{span}", t->spans_ended, "Spans ended");
        self_count(l, "cbt.spans.dropped", "{span}", t->spans_dropped,
                   "Spans never started: the span pool was exhausted");
        self_count(l, "cbt.spans.unsampled", "{span}", t->spans_unsampled,
                   "Spans ended in a sampled-out trace, given to no sink");
        self_count(l, "cbt.spans.lost", "{span}", t->sink_spans_lost,
                   "Spans sinks accepted and will never deliver (a failed write or export, a "
                   "full exporter queue): the sum of every sink's spans_lost");
        self_seconds(self_add(l, "cbt.harvester.lag", "s", true,
                              "Oldest-event lag of the harvester's last round: its dispatch "
                              "time minus the stamp of the oldest event it dispatched"),
                     t->lag_last_ns);
        self_seconds(self_add(l, "cbt.harvester.max_lag", "s", true,
                              "The worst oldest-event lag of any harvester round since "
                              "cbt_init"),
                     t->lag_max_ns);
        self_count(l, "cbt.harvester.wakeups", "{wakeup}", t->harvester_wakeups,
                   "Times a publisher woke the idle harvester (the first publish after 100 ms "
                   "with nothing to do); 0 in steady state");
    }
    const cbt_otlp_stats *e = &s->exporter;
    self_int(self_add(l, "cbt.exporter.queue.size", "{span}", true,
                      "Spans in the OTLP exporter's queue, not yet exported or dropped"),
             NULL, NULL, e->queue_size);
    self_int(self_add(l, "cbt.exporter.queue.capacity", "{span}", true,
                      "Spans the OTLP exporter's queue holds at most (max_queue)"),
             NULL, NULL, e->queue_capacity);
    self_count(l, "cbt.exporter.spans.exported", "{span}", e->spans_exported,
               "Spans the collector accepted");
    self_count(l, "cbt.exporter.spans.dropped", "{span}", e->spans_dropped,
               "Spans the OTLP exporter dropped (its queue full, their batch failed for good, "
               "shutdown's deadline); part of cbt.spans.lost");
    self_count(l, "cbt.exporter.retries", "{retry}", e->retries,
               "Export requests (spans and metrics) sent again after a retryable failure");
    self_metric *f = self_add(l, "cbt.exporter.failures", "{export}", false,
                              "Exports (span batches and metric snapshots) that failed for good, "
                              "by error.type, the outcome of their last try: transport (no "
                              "response: the connection, a timeout, TLS, shutdown's deadline; "
                              "or nothing was sent), 3xx / 4xx / 5xx (the HTTP status class), "
                              "or the gRPC status code's name");
    if (s->grpc) {
        for (unsigned c = 0; c < CBT_OTLP_GRPC_CODES; c++)
            self_int(f, k_error, k_grpc_code[c], s->failures_by_grpc_code[c]);
    } else {
        /* 1xx and 2xx never end a try as a failure: written only if counted */
        for (unsigned k = 0; k < 6; k++)
            if ((k != 1 && k != 2) || e->failures_by_http_class[k])
                self_int(f, k_error, k_http_class[k], e->failures_by_http_class[k]);
    }
}

/* protobuf sizes of the list's messages: pure, so the writer asks again */
static uint32_t self_kv_any_len(const self_point *p)
{
    return (uint32_t)ld_size(cbt_otlp_str_of(p->val, (uint32_t)strlen(p->val)).out);
}

static uint32_t self_kv_len(const self_point *p)
{
    return (uint32_t)(ld_size(cbt_otlp_str_of(p->key, (uint32_t)strlen(p->key)).out) +
                      ld_size(self_kv_any_len(p)));
}

static uint32_t self_point_len(const self_list *l, const self_metric *m, const self_point *p)
{
    size_t z = 9; /* as_double or as_int */
    if (!m->gauge && l->start_ns)
        z += 9;
    if (l->time_ns)
        z += 9;
    if (p->key)
        z += ld_size(self_kv_len(p));
    return (uint32_t)z;
}

static uint32_t self_data_len(const self_list *l, const self_metric *m)
{
    size_t z = m->gauge ? 0 : 2 + 2; /* temporality, is_monotonic */
    for (uint32_t i = 0; i < m->n; i++)
        z += ld_size(self_point_len(l, m, &m->p[i]));
    return (uint32_t)z;
}

/* a string field, left out when empty (proto3's default) */
static size_t opt_str_len(const char *s)
{
    uint32_t n = cstr(s).out;
    return n ? ld_size(n) : 0;
}

static uint32_t self_body_len(const self_list *l, const self_metric *m)
{
    return (uint32_t)(opt_str_len(m->name) + opt_str_len(m->desc) + opt_str_len(m->unit) +
                      ld_size(self_data_len(l, m)));
}

static size_t self_list_len(const self_list *l)
{
    size_t z = 0;
    for (uint32_t i = 0; i < l->n; i++)
        z += ld_size(self_body_len(l, &l->m[i]));
    return z;
}

static size_t plan_blend(const cbt_blend_snapshot *s, req_plan *p);

/* The blend set `s` (NULL: none) and the cbt.* list `l` (NULL: none). */
static void plan_request(const cbt_otlp_resource *r, const cbt_blend_snapshot *s,
                         const self_list *l, req_plan *p)
{
    size_t sm = l ? self_list_len(l) : 0;
    if (s)
        sm += plan_blend(s, p);
    p->res_len = cbt_otlp_pb_resource_len(r);
    p->scope_len = cbt_otlp_pb_scope_len();
    p->sm_len = ld_size(p->scope_len) + sm;
    p->rm_len = ld_size(p->res_len) + ld_size(p->sm_len);
    p->total = ld_size(p->rm_len);
}

/* The blend set's metrics into p->m; returns their bytes in ScopeMetrics. */
static size_t plan_blend(const cbt_blend_snapshot *s, req_plan *p)
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
    return sm;
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

static uint8_t *put_opt_str(uint8_t *w, unsigned field, const char *s)
{
    cbt_otlp_str v = cstr(s);
    return v.out ? cbt_otlp_put_str(w, field, v) : w;
}

/* One cbt.* instrument (the sizes: self_body_len and below). */
static uint8_t *put_self_metric(uint8_t *w, const self_list *l, const self_metric *m)
{
    w = put_ld_head(w, 2, self_body_len(l, m)); /* ScopeMetrics.metrics */
    w = put_opt_str(w, 1, m->name);             /* Metric.name */
    w = put_opt_str(w, 2, m->desc);             /* Metric.description */
    w = put_opt_str(w, 3, m->unit);             /* Metric.unit */
    w = put_ld_head(w, m->gauge ? 5 : 7, self_data_len(l, m)); /* Metric.gauge / .sum */
    for (uint32_t i = 0; i < m->n; i++) {
        const self_point *p = &m->p[i];
        w = put_ld_head(w, 1, self_point_len(l, m, p)); /* Gauge / Sum .data_points */
        if (!m->gauge && l->start_ns)
            w = put_fx64(w, 2, l->start_ns); /* start_time_unix_nano */
        if (l->time_ns)
            w = put_fx64(w, 3, l->time_ns);  /* time_unix_nano */
        if (p->dbl)
            w = put_f64(w, 4, p->d);         /* as_double */
        else
            w = put_fx64(w, 6, as_int(p->i)); /* as_int (sfixed64) */
        if (p->key) {
            w = put_ld_head(w, 7, self_kv_len(p)); /* NumberDataPoint.attributes */
            w = cbt_otlp_put_str(w, 1, cstr(p->key));
            w = put_ld_head(w, 2, self_kv_any_len(p)); /* KeyValue.value */
            w = cbt_otlp_put_str(w, 1, cstr(p->val));  /* AnyValue.string_value */
        }
    }
    if (!m->gauge) {
        *w++ = TAG(2, WT_VARINT); /* Sum.aggregation_temporality */
        *w++ = TEMPORALITY_CUMULATIVE;
        *w++ = TAG(3, WT_VARINT); /* Sum.is_monotonic */
        *w++ = 1;
    }
    return w;
}

static cbt_status encode_proto(const cbt_otlp_resource *r, const cbt_blend_snapshot *s,
                               const self_list *l, cbt_buf *out)
{
    req_plan p;
    plan_request(r, s, l, &p);
    cbt_status st = cbt_otlp_buf_reserve(out, p.total);
    if (st != CBT_OK)
        return st;
    uint8_t *w = out->data + out->len;
    uint8_t *const w0 = w;
    w = put_ld_head(w, 1, p.rm_len);       /* ExportMetricsServiceRequest.resource_metrics */
    w = cbt_otlp_pb_put_resource(w, 1, r); /* ResourceMetrics.resource */
    w = put_ld_head(w, 2, p.sm_len);       /* ResourceMetrics.scope_metrics */
    w = cbt_otlp_pb_put_scope(w, 1);       /* ScopeMetrics.scope */
    if (s) {
        for (unsigned c = 0; c < CBT_BC_COUNT_; c++)
            w = put_counter(w, s, c, &p.m[c]);
        for (unsigned h = 0; h < CBT_BH_COUNT_; h++)
            w = put_histogram(w, s, h, &p.m[CBT_BC_COUNT_ + h]);
    }
    if (l)
        for (uint32_t i = 0; i < l->n; i++)
            w = put_self_metric(w, l, &l->m[i]);
    out->len += (size_t)(w - w0);
    return CBT_OK;
}

cbt_status cbt_otlp_encode_metrics_proto(const cbt_otlp_resource *r, const cbt_blend_snapshot *s,
                                         cbt_buf *out)
{
    if (!r || !s || !out)
        return CBT_ERR_INVAL;
    return encode_proto(r, s, NULL, out);
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

static void j_self_metric(cbt_jbuf *b, const self_list *l, const self_metric *m)
{
    j_names(b, m->name, m->desc, m->unit);
    if (m->gauge) /* (J takes a literal: no ?: inside it) */
        J(b, ",\"gauge\":{\"dataPoints\":[");
    else
        J(b, ",\"sum\":{\"dataPoints\":[");
    for (uint32_t i = 0; i < m->n; i++) {
        const self_point *p = &m->p[i];
        if (i)
            J(b, ",");
        J(b, "{");
        if (!m->gauge) {
            J(b, "\"startTimeUnixNano\":");
            j_u64_str(b, l->start_ns);
            J(b, ",");
        }
        J(b, "\"timeUnixNano\":");
        j_u64_str(b, l->time_ns);
        if (p->dbl) {
            J(b, ",\"asDouble\":");
            cbt_jbuf_f64(b, p->d);
        } else {
            J(b, ",\"asInt\":");
            j_u64_str(b, as_int(p->i));
        }
        if (p->key) {
            J(b, ",\"attributes\":[{\"key\":");
            j_cstr(b, p->key);
            J(b, ",\"value\":{\"stringValue\":");
            j_cstr(b, p->val);
            J(b, "}}]");
        }
        J(b, "}");
    }
    if (m->gauge)
        J(b, "]}}");
    else
        J(b, "],\"aggregationTemporality\":2,\"isMonotonic\":true}}");
}

static void j_doc(cbt_jbuf *b, const cbt_otlp_resource *r, const cbt_blend_snapshot *s,
                  const self_list *l)
{
    J(b, "{\"resourceMetrics\":[{\"resource\":");
    cbt_otlp_json_resource(b, r);
    J(b, ",\"scopeMetrics\":[{\"scope\":");
    cbt_otlp_json_scope(b);
    J(b, ",\"metrics\":[");
    bool first = true;
    if (s) {
        for (unsigned c = 0; c < CBT_BC_COUNT_; c++) {
            if (!first)
                J(b, ",");
            first = false;
            j_counter(b, s, c);
        }
        for (unsigned h = 0; h < CBT_BH_COUNT_; h++) {
            J(b, ",");
            j_histogram(b, s, h);
        }
    }
    for (uint32_t i = 0; l && i < l->n; i++) {
        if (!first)
            J(b, ",");
        first = false;
        j_self_metric(b, l, &l->m[i]);
    }
    J(b, "]}]}]}");
}

static cbt_status encode_json(const cbt_otlp_resource *r, const cbt_blend_snapshot *s,
                              const self_list *l, cbt_buf *out)
{
    /* a guess, then exactly what the first try said it needs (the bounded
     * writer counts past its end; the output is deterministic) */
    size_t want = 32768;
    for (int attempt = 0; attempt < 2; attempt++) {
        cbt_status st = cbt_otlp_buf_reserve(out, want);
        if (st != CBT_OK)
            return st;
        cbt_jbuf b = {(char *)out->data + out->len, out->cap - out->len, 0};
        j_doc(&b, r, s, l);
        if (b.need <= b.cap) {
            out->len += b.need;
            return CBT_OK;
        }
        want = b.need;
    }
    return CBT_ERR_NOMEM; /* not reached: the second try has the room it asked for */
}

cbt_status cbt_otlp_encode_metrics_json(const cbt_otlp_resource *r, const cbt_blend_snapshot *s,
                                        cbt_buf *out)
{
    if (!r || !s || !out)
        return CBT_ERR_INVAL;
    return encode_json(r, s, NULL, out);
}

/* ---- both sets in one request (otlp_private.h) ------------------------------------------ */

cbt_status cbt_otlp_encode_metrics_(const cbt_otlp_resource *r, const cbt_blend_snapshot *blend,
                                    const cbt_otlp_self_snapshot *self, int json, cbt_buf *out)
{
    if (!r || !out || (!blend && !self))
        return CBT_ERR_INVAL;
    self_list l; /* ~12 KiB: the exporter thread's stack, as the blend plan */
    if (self)
        self_build(self, &l);
    return json ? encode_json(r, blend, self ? &l : NULL, out)
                : encode_proto(r, blend, self ? &l : NULL, out);
}
