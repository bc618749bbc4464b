/* tests/test_otlp_metrics.c — the lmcache_blend.* metrics over OTLP: the
 * encoder (exporter/otlp_metrics.c), the exporter's metrics path
 * (exporter/otlp_http.c) and its environment (exporter/otlp_env.c).
 *
 * Encoding: a snapshot of a standalone set fed with known counts and
 * durations (values on bucket bounds, exemplars from hand-made spans) is
 * encoded and decoded with the protoc-c code generated from exporter/proto/,
 * and every field is compared with what was fed in: names, units,
 * descriptions, temporality, monotonic flag, int values, bucket counts,
 * bounds, sum / min / max, exemplar ids, value, time and request_id.
 * OTLP/JSON is checked for its mapping and parsed by Python's json module.
 *
 * Sending: the real tracer with the exporter as its sink and a real HTTP/1.1
 * server on 127.0.0.1 (tests/http_loopback.c): periodic exports whose
 * cumulative values grow while start_time stays put, a cbt_flush-triggered
 * export and the final one at shutdown, spans and metrics on one
 * connection, JSON + gzip, 503 then 200, 400 (counted, not retried), a
 * partial success, the collector down (failures counted, publishing not
 * blocked, shutdown bounded), OTEL_METRICS_EXPORTER=none and
 * OTEL_SDK_DISABLED, and the environment table of the new variables.
 * The exporter is freed by cbt_shutdown, so its stats are read before it.
 *
 * cbt's own health (the cbt.* instruments, otlp_private.h's self snapshot):
 * fixed figures encoded with and without the blend set, over HTTP and gRPC
 * failure codes, in protobuf and JSON; then a known workload through the
 * real tracer and exporter (self_metrics ON, no blend set, a 503 and a 400
 * from the collector) whose last metrics request must carry exactly the
 * counts the workload implies; OFF and AUTO; CBT_OTLP_SELF_METRICS.
 *
 * Also fixture generators for tests/otlp_decode.py --metrics (the official
 * opentelemetry-proto package decodes our bytes):
 *
 *   test_otlp_metrics --emit <file.pb> <file.json>
 *   test_otlp_metrics --emit-workload <file.pb> <file.json>
 *
 * --emit writes the fixed snapshot below (emit_set, then emit_self's health
 * figures) and exits 0; --emit-workload runs the known workload (run_workload)
 * twice, protobuf then JSON, and writes the last metrics request of each.
 * otlp_decode.py holds the same values, written out independently: change
 * both together.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#include "http_loopback.h"
#include "otlp_env_case.h"
#include "opentelemetry/proto/collector/metrics/v1/metrics_service.pb-c.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb-c.h"
#include "cbt/otlp.h"
#include "exporter/otlp_private.h" /* cbt_otlp_self_snapshot, cbt_otlp_encode_metrics_ */

typedef Opentelemetry__Proto__Collector__Metrics__V1__ExportMetricsServiceRequest pb_mreq;
typedef Opentelemetry__Proto__Metrics__V1__Metric pb_metric;
typedef Opentelemetry__Proto__Metrics__V1__NumberDataPoint pb_num;
typedef Opentelemetry__Proto__Metrics__V1__HistogramDataPoint pb_hist;
typedef Opentelemetry__Proto__Metrics__V1__Exemplar pb_ex;
typedef Opentelemetry__Proto__Common__V1__KeyValue pb_kv;

#define CUMULATIVE OPENTELEMETRY__PROTO__METRICS__V1__AGGREGATION_TEMPORALITY__AGGREGATION_TEMPORALITY_CUMULATIVE
#define DATA_SUM OPENTELEMETRY__PROTO__METRICS__V1__METRIC__DATA_SUM
#define DATA_HIST OPENTELEMETRY__PROTO__METRICS__V1__METRIC__DATA_HISTOGRAM
#define DATA_GAUGE OPENTELEMETRY__PROTO__METRICS__V1__METRIC__DATA_GAUGE
#define AS_DOUBLE OPENTELEMETRY__PROTO__METRICS__V1__NUMBER_DATA_POINT__VALUE_AS_DOUBLE
#define AS_INT OPENTELEMETRY__PROTO__METRICS__V1__NUMBER_DATA_POINT__VALUE_AS_INT
#define EX_AS_DOUBLE OPENTELEMETRY__PROTO__METRICS__V1__EXEMPLAR__VALUE_AS_DOUBLE
#define HAS_SUM OPENTELEMETRY__PROTO__METRICS__V1__HISTOGRAM_DATA_POINT___SUM_SUM
#define HAS_MIN OPENTELEMETRY__PROTO__METRICS__V1__HISTOGRAM_DATA_POINT___MIN_MIN
#define HAS_MAX OPENTELEMETRY__PROTO__METRICS__V1__HISTOGRAM_DATA_POINT___MAX_MAX
#define AV_STR OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE

#define N_BUCKETS (CBT_BLEND_N_BOUNDS + 1)
#define N_METRICS (CBT_BC_COUNT_ + CBT_BH_COUNT_)

/* ---- the fixed set (--emit; mirrored in tests/otlp_decode.py) ------------------------------
 *
 * Resource: as test_otlp_encode's fixed set (service.name "cbt-test", ...).
 * start_ns = T0, time_ns = T0 + 60 s (both overwritten after the snapshot).
 * Counters: counter c = (c + 1) * 1000 + 7, except chunks_evicted = 0 and
 *   l2_load_bytes = 5000000000000 (fed as 3e12 then 2e12).
 * lookup_duration: 0.05 (span A), 0.1, 0.07, 1.0 (span C), 10000.0,
 *   10000.5 (span B), 0.0, in that order. Buckets [2,2,0,0,1,0,0,0,0,0,0,0,
 *   0,0,0,1,1], count 7, min 0.0, max 10000.5, sum in that order.
 *   Exemplars: bucket 0 span A (0.05: the later 0.0 had no span), bucket 4
 *   span C, bucket 16 span B.
 * scatter_duration: 3.0 (span D): bucket 6.
 * Every other histogram: empty.
 * Spans: A trace 01..10 span a1..a8 end T0+1000 request_id "req-1";
 *   B trace 01..10 span b1..b8 end T0+2000, no request_id;
 *   C trace 21..30 span c1..c8 end T0+3000 request_id "req-3";
 *   D trace 31..40 span d1..d8 end T0+4000 request_id "req-4".
 */
#define T0 1700000000000000000ull
#define T_SNAP (T0 + 60000000000ull)

static hl_server *g_srv;
static cbt_blend_metrics *g_set;

static void ids(uint8_t *p, size_t n, uint8_t first)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(first + i);
}

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

/* A finished span as the CB subscriber would hand it to cbt_blend_observe. */
static void mk_span(cbt_span *s, uint8_t trace0, uint8_t span0, uint64_t end_ns, const char *rid)
{
    memset(s, 0, sizeof *s);
    ids(s->ctx.trace_id, 16, trace0);
    ids(s->ctx.span_id, 8, span0);
    s->start_ns = end_ns - 500;
    s->end_ns = end_ns;
    if (rid)
        assert_int_equal(cbt_span_set_str(s, CBT_N_REQUEST_ID, rid, strlen(rid)), CBT_OK);
}

static const double k_lookup_values[] = {0.05, 0.1, 0.07, 1.0, 10000.0, 10000.5, 0.0};

static uint64_t emit_counter(unsigned c)
{
    if (c == CBT_BC_CHUNKS_EVICTED)
        return 0;
    if (c == CBT_BC_L2_LOAD_BYTES)
        return 5000000000000ull;
    return (uint64_t)(c + 1) * 1000u + 7u;
}

/* Feed a fresh set the fixed values; *out is its snapshot with fixed times. */
static void emit_set(cbt_blend_snapshot *out)
{
    cbt_blend_metrics *m = NULL;
    assert_int_equal(cbt_blend_metrics_create(&m), CBT_OK);
    for (unsigned c = 0; c < CBT_BC_COUNT_; c++) {
        if (c == CBT_BC_L2_LOAD_BYTES) {
            cbt_blend_count(m, (cbt_blend_counter)c, 3000000000000ull);
            cbt_blend_count(m, (cbt_blend_counter)c, 2000000000000ull);
        } else if (emit_counter(c)) {
            cbt_blend_count(m, (cbt_blend_counter)c, emit_counter(c));
        }
    }
    cbt_span a, b, c, d;
    mk_span(&a, 0x01, 0xa1, T0 + 1000, "req-1");
    mk_span(&b, 0x01, 0xb1, T0 + 2000, NULL);
    mk_span(&c, 0x21, 0xc1, T0 + 3000, "req-3");
    mk_span(&d, 0x31, 0xd1, T0 + 4000, "req-4");
    const cbt_span *from[] = {&a, NULL, NULL, &c, NULL, &b, NULL};
    for (size_t i = 0; i < sizeof k_lookup_values / sizeof k_lookup_values[0]; i++)
        cbt_blend_observe(m, CBT_BH_LOOKUP, k_lookup_values[i], from[i]);
    cbt_blend_observe(m, CBT_BH_SCATTER, 3.0, &d);
    assert_int_equal(cbt_blend_snapshot_take(m, out), CBT_OK);
    cbt_blend_metrics_free(m);
    out->start_ns = T0;
    out->time_ns = T_SNAP;
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

static void emit_self(cbt_otlp_self_snapshot *s); /* the fixed health figures, below */

/* Outside cmocka: an assert that fails in emit_set aborts the process. The
 * request holds the fixed blend set and the fixed health figures. */
static int emit(const char *pb_path, const char *json_path)
{
    cbt_otlp_resource r;
    emit_resource(&r);
    static cbt_blend_snapshot s;
    emit_set(&s);
    static cbt_otlp_self_snapshot h;
    emit_self(&h);
    cbt_buf pb = {0}, js = {0};
    int rc = 1;
    if (cbt_otlp_encode_metrics_(&r, &s, &h, 0, &pb) != CBT_OK ||
        cbt_otlp_encode_metrics_(&r, &s, &h, 1, &js) != CBT_OK)
        fprintf(stderr, "test_otlp_metrics --emit: encoding failed\n");
    else if (write_file(pb_path, &pb) || write_file(json_path, &js))
        fprintf(stderr, "test_otlp_metrics --emit: cannot write %s / %s\n", pb_path, json_path);
    else
        rc = 0;
    cbt_buf_free(&pb);
    cbt_buf_free(&js);
    return rc;
}

/* ---- decoding ---------------------------------------------------------------------------- */

static pb_mreq *decode(const uint8_t *p, size_t n)
{
    pb_mreq *q =
        opentelemetry__proto__collector__metrics__v1__export_metrics_service_request__unpack(NULL, n,
                                                                                            p);
    assert_non_null(q);
    return q;
}

static void free_req(pb_mreq *q)
{
    opentelemetry__proto__collector__metrics__v1__export_metrics_service_request__free_unpacked(q,
                                                                                                 NULL);
}

/* The one ResourceMetrics / ScopeMetrics, scope "cbt" at CBT_VERSION_STRING;
 * returns the metric list and its length. */
static pb_metric **shape_n(const pb_mreq *q, size_t *n)
{
    assert_int_equal(q->n_resource_metrics, 1);
    const Opentelemetry__Proto__Metrics__V1__ResourceMetrics *rm = q->resource_metrics[0];
    assert_non_null(rm->resource);
    assert_string_equal(rm->schema_url, "");
    assert_int_equal(rm->n_scope_metrics, 1);
    const Opentelemetry__Proto__Metrics__V1__ScopeMetrics *sm = rm->scope_metrics[0];
    assert_non_null(sm->scope);
    assert_string_equal(sm->scope->name, "cbt");
    assert_string_equal(sm->scope->version, CBT_VERSION_STRING);
    *n = sm->n_metrics;
    return sm->metrics;
}

/* ... with N_METRICS metrics, the blend set alone (the public encoders) */
static pb_metric **check_shape(const pb_mreq *q)
{
    size_t n;
    pb_metric **ms = shape_n(q, &n);
    assert_int_equal(n, N_METRICS);
    return ms;
}

static const pb_metric *find_metric(const pb_mreq *q, const char *name)
{
    size_t n;
    pb_metric **ms = shape_n(q, &n);
    for (size_t i = 0; i < n; i++)
        if (strcmp(ms[i]->name, name) == 0)
            return ms[i];
    fail_msg("metric %s missing", name);
    return NULL;
}

static const pb_num *counter_point(const pb_metric *m)
{
    assert_int_equal(m->data_case, DATA_SUM);
    assert_int_equal(m->sum->aggregation_temporality, CUMULATIVE);
    assert_true(m->sum->is_monotonic);
    assert_int_equal(m->sum->n_data_points, 1);
    const pb_num *p = m->sum->data_points[0];
    assert_int_equal(p->value_case, AS_INT);
    assert_int_equal(p->n_attributes, 0);
    assert_int_equal(p->n_exemplars, 0);
    assert_int_equal(p->flags, 0);
    return p;
}

static const pb_hist *hist_point(const pb_metric *m)
{
    assert_int_equal(m->data_case, DATA_HIST);
    assert_int_equal(m->histogram->aggregation_temporality, CUMULATIVE);
    assert_int_equal(m->histogram->n_data_points, 1);
    const pb_hist *p = m->histogram->data_points[0];
    assert_int_equal(p->n_attributes, 0);
    assert_int_equal(p->flags, 0);
    assert_int_equal(p->n_explicit_bounds, CBT_BLEND_N_BOUNDS);
    const double *bounds = cbt_blend_bounds_ms();
    for (unsigned i = 0; i < CBT_BLEND_N_BOUNDS; i++)
        assert_true(p->explicit_bounds[i] == bounds[i]);
    assert_int_equal(p->n_bucket_counts, N_BUCKETS);
    return p;
}

static uint64_t counter_value(const pb_mreq *q, cbt_blend_counter c)
{
    return (uint64_t)counter_point(find_metric(q, cbt_blend_counter_name(c)))->as_int;
}

/* The whole decoded request against the snapshot it came from (the blend
 * set first; `extra` cbt.* instruments may follow it). */
static void check_against_plus(const pb_mreq *q, const cbt_blend_snapshot *s, size_t extra)
{
    size_t n;
    pb_metric **ms = shape_n(q, &n);
    assert_int_equal(n, N_METRICS + extra);
    for (unsigned c = 0; c < CBT_BC_COUNT_; c++) {
        const pb_metric *m = ms[c];
        cbt_blend_counter k = (cbt_blend_counter)c;
        assert_string_equal(m->name, cbt_blend_counter_name(k));
        assert_string_equal(m->description, cbt_blend_counter_desc(k));
        assert_string_equal(m->unit, cbt_blend_counter_unit(k));
        const pb_num *p = counter_point(m);
        assert_int_equal(p->start_time_unix_nano, s->start_ns);
        assert_int_equal(p->time_unix_nano, s->time_ns);
        assert_int_equal((uint64_t)p->as_int, s->counters[c]);
    }
    for (unsigned h = 0; h < CBT_BH_COUNT_; h++) {
        const pb_metric *m = ms[CBT_BC_COUNT_ + h];
        const cbt_blend_hist_point *sp = &s->hists[h];
        assert_string_equal(m->name, cbt_blend_hist_name((cbt_blend_hist)h));
        assert_string_equal(m->description, cbt_blend_hist_desc((cbt_blend_hist)h));
        assert_string_equal(m->unit, "ms");
        const pb_hist *p = hist_point(m);
        assert_int_equal(p->start_time_unix_nano, s->start_ns);
        assert_int_equal(p->time_unix_nano, s->time_ns);
        assert_int_equal(p->count, sp->count);
        assert_int_equal(p->_sum_case, HAS_SUM);
        assert_true(p->sum == sp->sum_ms);
        if (sp->count) {
            assert_int_equal(p->_min_case, HAS_MIN);
            assert_int_equal(p->_max_case, HAS_MAX);
            assert_true(p->min == sp->min_ms);
            assert_true(p->max == sp->max_ms);
        } else {
            assert_int_not_equal(p->_min_case, HAS_MIN);
            assert_int_not_equal(p->_max_case, HAS_MAX);
        }
        size_t k = 0;
        for (unsigned b = 0; b < N_BUCKETS; b++) {
            assert_int_equal(p->bucket_counts[b], sp->buckets[b]);
            const cbt_blend_exemplar *x = &sp->exemplars[b];
            if (!x->valid)
                continue;
            assert_true(k < p->n_exemplars);
            const pb_ex *e = p->exemplars[k++];
            assert_int_equal(e->value_case, EX_AS_DOUBLE);
            assert_true(e->as_double == x->value_ms);
            assert_int_equal(e->time_unix_nano, x->time_ns);
            assert_int_equal(e->trace_id.len, 16);
            assert_memory_equal(e->trace_id.data, x->trace_id, 16);
            assert_int_equal(e->span_id.len, 8);
            assert_memory_equal(e->span_id.data, x->span_id, 8);
            if (x->request_id[0]) {
                assert_int_equal(e->n_filtered_attributes, 1);
                assert_string_equal(e->filtered_attributes[0]->key, "request_id");
                assert_int_equal(e->filtered_attributes[0]->value->value_case, AV_STR);
                assert_string_equal(e->filtered_attributes[0]->value->string_value,
                                    x->request_id);
            } else {
                assert_int_equal(e->n_filtered_attributes, 0);
            }
        }
        assert_int_equal(p->n_exemplars, k);
    }
}

static void check_against(const pb_mreq *q, const cbt_blend_snapshot *s)
{
    check_against_plus(q, s, 0);
}

/* ---- cbt's own health: the cbt.* instruments ------------------------------------------------
 *
 * What docs/exporters.md promises, written out here (not read from the
 * encoder): each instrument's name, unit, kind and attribute key, in the
 * order they are sent, the tracer's first (present with a tracer), then the
 * exporter's. */
typedef struct self_want {
    const char *name, *unit;
    int gauge;       /* a Gauge, else a cumulative monotonic Sum */
    int dbl;         /* as_double (seconds), else as_int */
    const char *key; /* the points' attribute, NULL: one point, no attributes */
} self_want;

static const self_want k_self_tracer[] = {
    {"cbt.events.published", "{event}", 0, 0, NULL},
    {"cbt.events.dropped", "{event}", 0, 0, "cbt.drop.reason"},
    {"cbt.events.truncated_values", "{value}", 0, 0, NULL},
    {"cbt.spans.started", "{span}", 0, 0, NULL},
    {"cbt.spans.ended", "{span}", 0, 0, NULL},
    {"cbt.spans.dropped", "{span}", 0, 0, NULL},
    {"cbt.spans.unsampled", "{span}", 0, 0, NULL},
    {"cbt.spans.lost", "{span}", 0, 0, NULL},
    {"cbt.harvester.lag", "s", 1, 1, NULL},
    {"cbt.harvester.max_lag", "s", 1, 1, NULL},
    {"cbt.harvester.wakeups", "{wakeup}", 0, 0, NULL},
};
static const self_want k_self_exporter[] = {
    {"cbt.exporter.queue.size", "{span}", 1, 0, NULL},
    {"cbt.exporter.queue.capacity", "{span}", 1, 0, NULL},
    {"cbt.exporter.spans.exported", "{span}", 0, 0, NULL},
    {"cbt.exporter.spans.dropped", "{span}", 0, 0, NULL},
    {"cbt.exporter.retries", "{retry}", 0, 0, NULL},
    {"cbt.exporter.failures", "{export}", 0, 0, "error.type"},
};
#define N_SELF_TRACER (sizeof k_self_tracer / sizeof k_self_tracer[0])
#define N_SELF_EXPORTER (sizeof k_self_exporter / sizeof k_self_exporter[0])
#define N_SELF (N_SELF_TRACER + N_SELF_EXPORTER)

/* The fixed health figures (--emit; mirrored in tests/otlp_decode.py as
 * SELF_*): every field its own value, so a swapped field shows. Times: the
 * blend set's, T0 and T_SNAP. */
static void emit_self(cbt_otlp_self_snapshot *s)
{
    memset(s, 0, sizeof *s);
    s->start_ns = T0;
    s->time_ns = T_SNAP;
    s->have_tracer = 1;
    cbt_metrics *t = &s->tracer;
    t->published = 1001;
    t->dropped_full = 11;
    t->rejected = 12;
    t->session_too_long = 13;
    t->stream_marks_dropped = 14;
    t->meta_truncated = 15;
    t->spans_started = 2001;
    t->spans_ended = 1990;
    t->spans_dropped = 21;
    t->spans_unsampled = 22;
    t->sink_spans_lost = 23;
    t->lag_last_ns = 1500000;   /* 0.0015 s */
    t->lag_max_ns = 250000000;  /* 0.25 s */
    t->harvester_wakeups = 31;
    t->dispatched = 999999;     /* not an instrument: must not show up */
    cbt_otlp_stats *e = &s->exporter;
    e->queue_size = 7;
    e->queue_capacity = 32768;
    e->spans_exported = 1900;
    e->spans_dropped = 41;
    e->retries = 42;
    e->failures_by_http_class[0] = 51;
    e->failures_by_http_class[3] = 53;
    e->failures_by_http_class[4] = 54;
    e->failures_by_http_class[5] = 55;
}

/* The cbt.* instrument `name` in q, its kind checked against `w`. */
static const pb_metric *self_metric(const pb_mreq *q, const self_want *w)
{
    const pb_metric *m = find_metric(q, w->name);
    assert_string_equal(m->unit, w->unit);
    assert_true(m->description && strlen(m->description) > 10);
    if (w->gauge) {
        assert_int_equal(m->data_case, DATA_GAUGE);
        assert_true(m->gauge->n_data_points >= 1);
    } else {
        assert_int_equal(m->data_case, DATA_SUM);
        assert_int_equal(m->sum->aggregation_temporality, CUMULATIVE);
        assert_true(m->sum->is_monotonic);
        assert_true(m->sum->n_data_points >= 1);
    }
    return m;
}

static const self_want *want_of(const char *name)
{
    for (size_t i = 0; i < N_SELF_TRACER; i++)
        if (!strcmp(k_self_tracer[i].name, name))
            return &k_self_tracer[i];
    for (size_t i = 0; i < N_SELF_EXPORTER; i++)
        if (!strcmp(k_self_exporter[i].name, name))
            return &k_self_exporter[i];
    fail_msg("no instrument %s in the test's list", name);
    return NULL;
}

/* The point of instrument `name` whose attribute is `val` (NULL: the one
 * point without attributes); its value type and attribute key checked. */
static const pb_num *self_point(const pb_mreq *q, const char *name, const char *val)
{
    const self_want *w = want_of(name);
    const pb_metric *m = self_metric(q, w);
    size_t n = w->gauge ? m->gauge->n_data_points : m->sum->n_data_points;
    pb_num **pts = w->gauge ? m->gauge->data_points : m->sum->data_points;
    const pb_num *hit = NULL;
    for (size_t i = 0; i < n; i++) {
        const pb_num *p = pts[i];
        assert_int_equal(p->value_case, w->dbl ? AS_DOUBLE : AS_INT);
        assert_int_equal(p->n_exemplars, 0);
        assert_int_equal(p->flags, 0);
        if (!w->key) {
            assert_int_equal(n, 1);
            assert_int_equal(p->n_attributes, 0);
            hit = p;
            continue;
        }
        assert_int_equal(p->n_attributes, 1);
        assert_string_equal(p->attributes[0]->key, w->key);
        assert_int_equal(p->attributes[0]->value->value_case, AV_STR);
        if (val && !strcmp(p->attributes[0]->value->string_value, val)) {
            assert_null(hit); /* each value once */
            hit = p;
        }
    }
    if (!hit)
        fail_msg("%s has no point %s", name, val ? val : "(without attributes)");
    return hit;
}

static uint64_t self_int(const pb_mreq *q, const char *name, const char *val)
{
    return (uint64_t)self_point(q, name, val)->as_int;
}

static double self_double(const pb_mreq *q, const char *name)
{
    return self_point(q, name, NULL)->as_double;
}

/* The cbt.* instruments of q: present in the documented order after
 * `first` metrics (the blend set's, or none), each point's times (a Sum's
 * start_ns, a Gauge's none) and attribute values as documented; the
 * tracer's only `with_tracer`. Values are the caller's to check. */
static void check_self_shape(const pb_mreq *q, size_t first, int with_tracer, int grpc,
                             uint64_t start_ns, uint64_t time_ns)
{
    size_t n;
    pb_metric **ms = shape_n(q, &n);
    size_t want_n = first + (with_tracer ? N_SELF_TRACER : 0) + N_SELF_EXPORTER;
    assert_int_equal(n, want_n);
    size_t k = first;
    for (size_t i = 0; with_tracer && i < N_SELF_TRACER; i++)
        assert_string_equal(ms[k++]->name, k_self_tracer[i].name);
    for (size_t i = 0; i < N_SELF_EXPORTER; i++)
        assert_string_equal(ms[k++]->name, k_self_exporter[i].name);
    for (k = first; k < n; k++) {
        const self_want *w = want_of(ms[k]->name);
        const pb_metric *m = self_metric(q, w);
        size_t np = w->gauge ? m->gauge->n_data_points : m->sum->n_data_points;
        pb_num **pts = w->gauge ? m->gauge->data_points : m->sum->data_points;
        for (size_t i = 0; i < np; i++) {
            assert_int_equal(pts[i]->start_time_unix_nano, w->gauge ? 0 : start_ns);
            assert_int_equal(pts[i]->time_unix_nano, time_ns);
        }
    }
    if (with_tracer) {
        static const char *const reasons[] = {"queue_full", "rejected", "session_too_long",
                                              "stream_mark_lost"};
        assert_int_equal(find_metric(q, "cbt.events.dropped")->sum->n_data_points, 4);
        for (size_t i = 0; i < 4; i++)
            (void)self_point(q, "cbt.events.dropped", reasons[i]);
    }
    static const char *const http[] = {"transport", "3xx", "4xx", "5xx"};
    static const char *const codes[] = {
        "transport", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
        "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
        "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
    const pb_metric *f = find_metric(q, "cbt.exporter.failures");
    size_t nf = grpc ? sizeof codes / sizeof codes[0] : sizeof http / sizeof http[0];
    assert_int_equal(f->sum->n_data_points, nf);
    for (size_t i = 0; i < nf; i++)
        (void)self_point(q, "cbt.exporter.failures", grpc ? codes[i] : http[i]);
}

/* Every value of the fixed health figures (emit_self), written out. */
static void check_self_fixed(const pb_mreq *q)
{
    assert_int_equal(self_int(q, "cbt.events.published", NULL), 1001);
    assert_int_equal(self_int(q, "cbt.events.dropped", "queue_full"), 11);
    assert_int_equal(self_int(q, "cbt.events.dropped", "rejected"), 12);
    assert_int_equal(self_int(q, "cbt.events.dropped", "session_too_long"), 13);
    assert_int_equal(self_int(q, "cbt.events.dropped", "stream_mark_lost"), 14);
    assert_int_equal(self_int(q, "cbt.events.truncated_values", NULL), 15);
    assert_int_equal(self_int(q, "cbt.spans.started", NULL), 2001);
    assert_int_equal(self_int(q, "cbt.spans.ended", NULL), 1990);
    assert_int_equal(self_int(q, "cbt.spans.dropped", NULL), 21);
    assert_int_equal(self_int(q, "cbt.spans.unsampled", NULL), 22);
    assert_int_equal(self_int(q, "cbt.spans.lost", NULL), 23);
    assert_true(self_double(q, "cbt.harvester.lag") == 0.0015);
    assert_true(self_double(q, "cbt.harvester.max_lag") == 0.25);
    assert_int_equal(self_int(q, "cbt.harvester.wakeups", NULL), 31);
    assert_int_equal(self_int(q, "cbt.exporter.queue.size", NULL), 7);
    assert_int_equal(self_int(q, "cbt.exporter.queue.capacity", NULL), 32768);
    assert_int_equal(self_int(q, "cbt.exporter.spans.exported", NULL), 1900);
    assert_int_equal(self_int(q, "cbt.exporter.spans.dropped", NULL), 41);
    assert_int_equal(self_int(q, "cbt.exporter.retries", NULL), 42);
    assert_int_equal(self_int(q, "cbt.exporter.failures", "transport"), 51);
    assert_int_equal(self_int(q, "cbt.exporter.failures", "3xx"), 53);
    assert_int_equal(self_int(q, "cbt.exporter.failures", "4xx"), 54);
    assert_int_equal(self_int(q, "cbt.exporter.failures", "5xx"), 55);
}

/* ---- (a) encoding, decoded by protoc-c ------------------------------------------------------ */

static void fixed_set_every_field(void **state)
{
    (void)state;
    cbt_otlp_resource r;
    emit_resource(&r);
    static cbt_blend_snapshot s;
    emit_set(&s);
    cbt_buf b = {0};
    assert_int_equal(cbt_otlp_encode_metrics_proto(&r, &s, &b), CBT_OK);
    pb_mreq *q = decode(b.data, b.len);
    check_against(q, &s);

    /* and against the values fed in, written out here, not read back from s */
    for (unsigned c = 0; c < CBT_BC_COUNT_; c++)
        assert_int_equal(counter_value(q, (cbt_blend_counter)c), emit_counter(c));
    assert_int_equal(counter_value(q, CBT_BC_L2_LOAD_BYTES), 5000000000000ull);
    assert_int_equal(counter_value(q, CBT_BC_CHUNKS_EVICTED), 0);
    const pb_metric *bytes = find_metric(q, "lmcache_blend.l2_load_bytes");
    assert_string_equal(bytes->unit, "By");
    assert_int_equal(counter_point(bytes)->start_time_unix_nano, T0);
    assert_int_equal(counter_point(bytes)->time_unix_nano, T_SNAP);

    const pb_hist *lk = hist_point(find_metric(q, "lmcache_blend.lookup_duration"));
    static const uint64_t want[N_BUCKETS] = {2, 2, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1};
    for (unsigned i = 0; i < N_BUCKETS; i++)
        if (lk->bucket_counts[i] != want[i])
            fail_msg("lookup_duration bucket %u: %llu, want %llu", i,
                     (unsigned long long)lk->bucket_counts[i], (unsigned long long)want[i]);
    assert_int_equal(lk->count, 7);
    double sum = 0;
    for (size_t i = 0; i < sizeof k_lookup_values / sizeof k_lookup_values[0]; i++)
        sum += k_lookup_values[i];
    assert_true(lk->sum == sum);
    assert_true(lk->min == 0.0);
    assert_true(lk->max == 10000.5);
    assert_int_equal(lk->n_exemplars, 3);
    uint8_t id[16];
    /* bucket 0: span A, not the later span-less 0.0 */
    assert_true(lk->exemplars[0]->as_double == 0.05);
    assert_int_equal(lk->exemplars[0]->time_unix_nano, T0 + 1000);
    ids(id, 16, 0x01);
    assert_memory_equal(lk->exemplars[0]->trace_id.data, id, 16);
    ids(id, 8, 0xa1);
    assert_memory_equal(lk->exemplars[0]->span_id.data, id, 8);
    assert_string_equal(lk->exemplars[0]->filtered_attributes[0]->value->string_value, "req-1");
    /* bucket 4: span C */
    assert_true(lk->exemplars[1]->as_double == 1.0);
    ids(id, 16, 0x21);
    assert_memory_equal(lk->exemplars[1]->trace_id.data, id, 16);
    assert_string_equal(lk->exemplars[1]->filtered_attributes[0]->value->string_value, "req-3");
    /* bucket 16 (over the last bound): span B, no request_id */
    assert_true(lk->exemplars[2]->as_double == 10000.5);
    assert_int_equal(lk->exemplars[2]->time_unix_nano, T0 + 2000);
    ids(id, 8, 0xb1);
    assert_memory_equal(lk->exemplars[2]->span_id.data, id, 8);
    assert_int_equal(lk->exemplars[2]->n_filtered_attributes, 0);

    const pb_hist *sc = hist_point(find_metric(q, "lmcache_blend.scatter_duration"));
    assert_int_equal(sc->count, 1);
    assert_int_equal(sc->bucket_counts[6], 1);
    assert_int_equal(sc->n_exemplars, 1);
    assert_string_equal(sc->exemplars[0]->filtered_attributes[0]->value->string_value, "req-4");

    const pb_hist *em = hist_point(find_metric(q, "lmcache_blend.retrieve_duration"));
    assert_int_equal(em->count, 0);
    assert_int_equal(em->n_exemplars, 0);
    assert_int_not_equal(em->_min_case, HAS_MIN);
    free_req(q);
    cbt_buf_free(&b);
}

/* The resource is the trace exporter's, attribute for attribute. */
static void same_resource_as_traces(void **state)
{
    (void)state;
    cbt_otlp_resource r;
    cbt_otlp_resource_default(&r);
    strcpy(r.extra[0].key, "team");
    strcpy(r.extra[0].value, "kv");
    strcpy(r.extra[1].key, "host.name"); /* replaces the detected one */
    strcpy(r.extra[1].value, "from-env");
    r.n_extra = 2;
    static cbt_blend_snapshot s;
    emit_set(&s);
    cbt_buf mb = {0}, tb = {0};
    assert_int_equal(cbt_otlp_encode_metrics_proto(&r, &s, &mb), CBT_OK);
    assert_int_equal(cbt_otlp_encode_proto(&r, NULL, 0, &tb), CBT_OK);
    pb_mreq *mq = decode(mb.data, mb.len);
    Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceRequest *tq =
        opentelemetry__proto__collector__trace__v1__export_trace_service_request__unpack(
            NULL, tb.len, tb.data);
    assert_non_null(tq);
    const Opentelemetry__Proto__Resource__V1__Resource *a = mq->resource_metrics[0]->resource;
    const Opentelemetry__Proto__Resource__V1__Resource *t = tq->resource_spans[0]->resource;
    assert_true(a->n_attributes >= 4);
    assert_int_equal(a->n_attributes, t->n_attributes);
    int saw_host = 0;
    for (size_t i = 0; i < a->n_attributes; i++) {
        assert_string_equal(a->attributes[i]->key, t->attributes[i]->key);
        assert_int_equal(a->attributes[i]->value->value_case, t->attributes[i]->value->value_case);
        if (a->attributes[i]->value->value_case == AV_STR)
            assert_string_equal(a->attributes[i]->value->string_value,
                                t->attributes[i]->value->string_value);
        else
            assert_int_equal(a->attributes[i]->value->int_value, t->attributes[i]->value->int_value);
        if (strcmp(a->attributes[i]->key, "host.name") == 0) {
            assert_string_equal(a->attributes[i]->value->string_value, "from-env");
            saw_host++;
        }
    }
    assert_int_equal(saw_host, 1);
    assert_string_equal(mq->resource_metrics[0]->scope_metrics[0]->scope->version,
                        tq->resource_spans[0]->scope_spans[0]->scope->version);
    opentelemetry__proto__collector__trace__v1__export_trace_service_request__free_unpacked(tq,
                                                                                           NULL);
    free_req(mq);
    cbt_buf_free(&mb);
    cbt_buf_free(&tb);
}

/* Every bound observed once lands in its own bucket (bounds are inclusive
 * upper bounds); just above a bound lands in the next one. */
static void values_on_bounds(void **state)
{
    (void)state;
    cbt_blend_metrics *m = NULL;
    assert_int_equal(cbt_blend_metrics_create(&m), CBT_OK);
    const double *bounds = cbt_blend_bounds_ms();
    for (unsigned i = 0; i < CBT_BLEND_N_BOUNDS; i++) {
        cbt_blend_observe(m, CBT_BH_L2_LOAD, bounds[i], NULL);
        cbt_blend_observe(m, CBT_BH_RETRIEVE, nextafter(bounds[i], INFINITY), NULL);
    }
    cbt_blend_observe(m, CBT_BH_FINGERPRINT_MATCH, -3.0, NULL); /* counted as 0 ms */
    cbt_blend_observe(m, CBT_BH_FINGERPRINT_MATCH, NAN, NULL);
    static cbt_blend_snapshot s;
    assert_int_equal(cbt_blend_snapshot_take(m, &s), CBT_OK);
    cbt_blend_metrics_free(m);
    cbt_otlp_resource r;
    emit_resource(&r);
    cbt_buf b = {0};
    assert_int_equal(cbt_otlp_encode_metrics_proto(&r, &s, &b), CBT_OK);
    pb_mreq *q = decode(b.data, b.len);
    check_against(q, &s);
    const pb_hist *on = hist_point(find_metric(q, "lmcache_blend.l2_load_duration"));
    const pb_hist *above = hist_point(find_metric(q, "lmcache_blend.retrieve_duration"));
    for (unsigned i = 0; i < N_BUCKETS; i++) {
        if (on->bucket_counts[i] != (i < CBT_BLEND_N_BOUNDS ? 1u : 0u))
            fail_msg("a value equal to bound %u is not in bucket %u alone", i, i);
        if (above->bucket_counts[i] != (i > 0 ? 1u : 0u))
            fail_msg("a value just above bound %u is not in bucket %u", i ? i - 1 : 0, i);
    }
    assert_true(on->min == bounds[0]);
    assert_true(on->max == bounds[CBT_BLEND_N_BOUNDS - 1]);
    const pb_hist *fm = hist_point(find_metric(q, "lmcache_blend.fingerprint_match_duration"));
    assert_int_equal(fm->count, 2);
    assert_int_equal(fm->bucket_counts[0], 2);
    assert_true(fm->sum == 0.0 && fm->min == 0.0 && fm->max == 0.0);
    free_req(q);
    cbt_buf_free(&b);
}

/* A fresh set: every series present, zero, start == the set's creation. */
static void zero_set_exports_everything(void **state)
{
    (void)state;
    cbt_blend_metrics *m = NULL;
    assert_int_equal(cbt_blend_metrics_create(&m), CBT_OK);
    static cbt_blend_snapshot s;
    assert_int_equal(cbt_blend_snapshot_take(m, &s), CBT_OK);
    cbt_blend_metrics_free(m);
    assert_true(s.start_ns > T0 && s.time_ns >= s.start_ns);
    cbt_otlp_resource r;
    emit_resource(&r);
    cbt_buf b = {0};
    assert_int_equal(cbt_otlp_encode_metrics_proto(&r, &s, &b), CBT_OK);
    pb_mreq *q = decode(b.data, b.len);
    check_against(q, &s);
    pb_metric **ms = check_shape(q);
    for (unsigned c = 0; c < CBT_BC_COUNT_; c++)
        assert_int_equal(counter_point(ms[c])->as_int, 0);
    for (unsigned h = 0; h < CBT_BH_COUNT_; h++) {
        const pb_hist *p = hist_point(ms[CBT_BC_COUNT_ + h]);
        assert_int_equal(p->count, 0);
        assert_int_equal(p->_sum_case, HAS_SUM);
        for (unsigned i = 0; i < N_BUCKETS; i++)
            assert_int_equal(p->bucket_counts[i], 0);
    }
    free_req(q);
    cbt_buf_free(&b);
}

/* Appends after what the buffer holds; a request_id that is not UTF-8 is repaired. */
static void appends_and_repairs(void **state)
{
    (void)state;
    cbt_blend_metrics *m = NULL;
    assert_int_equal(cbt_blend_metrics_create(&m), CBT_OK);
    cbt_span sp;
    mk_span(&sp, 0x41, 0xe1, T0 + 5000, "r\xff-\xe2\x82");
    cbt_blend_observe(m, CBT_BH_SPARSE_PREFETCH, 7.5, &sp);
    static cbt_blend_snapshot s;
    assert_int_equal(cbt_blend_snapshot_take(m, &s), CBT_OK);
    cbt_blend_metrics_free(m);
    cbt_otlp_resource r;
    emit_resource(&r);
    static const char head[] = "prefix";
    cbt_buf b = {malloc(sizeof head - 1), sizeof head - 1, sizeof head - 1};
    assert_non_null(b.data);
    memcpy(b.data, head, sizeof head - 1);
    assert_int_equal(cbt_otlp_encode_metrics_proto(&r, &s, &b), CBT_OK);
    assert_memory_equal(b.data, head, sizeof head - 1);
    pb_mreq *q = decode(b.data + sizeof head - 1, b.len - (sizeof head - 1));
    const pb_hist *p = hist_point(find_metric(q, "lmcache_blend.sparse_prefetch_duration"));
    assert_int_equal(p->n_exemplars, 1);
    assert_string_equal(p->exemplars[0]->filtered_attributes[0]->value->string_value,
                        "r\xef\xbf\xbd-\xef\xbf\xbd\xef\xbf\xbd");
    free_req(q);
    cbt_buf_free(&b);
}

static void bad_arguments(void **state)
{
    (void)state;
    cbt_otlp_resource r;
    emit_resource(&r);
    static cbt_blend_snapshot s;
    memset(&s, 0, sizeof s);
    cbt_buf b = {0};
    assert_int_equal(cbt_otlp_encode_metrics_proto(NULL, &s, &b), CBT_ERR_INVAL);
    assert_int_equal(cbt_otlp_encode_metrics_proto(&r, NULL, &b), CBT_ERR_INVAL);
    assert_int_equal(cbt_otlp_encode_metrics_proto(&r, &s, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_otlp_encode_metrics_json(NULL, &s, &b), CBT_ERR_INVAL);
    assert_int_equal(cbt_otlp_encode_metrics_json(&r, NULL, &b), CBT_ERR_INVAL);
    assert_int_equal(b.len, 0);
}

/* ---- (b) OTLP/JSON ----------------------------------------------------------------------- */

static size_t count_of(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

static void json_mapping(void **state)
{
    (void)state;
    cbt_otlp_resource r;
    emit_resource(&r);
    static cbt_blend_snapshot s;
    emit_set(&s);
    cbt_buf b = {0};
    assert_int_equal(cbt_otlp_encode_metrics_json(&r, &s, &b), CBT_OK);
    char *js = strndup((const char *)b.data, b.len);
    assert_non_null(js);
    assert_int_equal(count_of(js, "\"aggregationTemporality\":2"), N_METRICS);
    assert_int_equal(count_of(js, "\"isMonotonic\":true"), CBT_BC_COUNT_);
    assert_int_equal(count_of(js, "\"startTimeUnixNano\":\"1700000000000000000\""), N_METRICS);
    assert_non_null(strstr(js, "\"asInt\":\"5000000000000\""));
    assert_non_null(strstr(js, "\"traceId\":\"0102030405060708090a0b0c0d0e0f10\""));
    assert_non_null(strstr(js, "\"spanId\":\"a1a2a3a4a5a6a7a8\""));
    assert_non_null(strstr(js, "\"bucketCounts\":[\"2\",\"2\",\"0\",\"0\",\"1\","));
    assert_non_null(strstr(js, "\"explicitBounds\":[0.05,0.1,0.25,0.5,1.0,2.5,"));
    assert_non_null(strstr(js, "{\"key\":\"request_id\",\"value\":{\"stringValue\":\"req-1\"}}"));
    assert_int_equal(count_of(js, "\"min\":"), 2); /* only the two histograms with values */
    assert_null(strstr(js, "resource_metrics")); /* camelCase only */

    /* Python's json module reads it, and sees what we wrote */
    char path[] = "/tmp/cbt-otlp-mjson-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, js, strlen(js)), (ssize_t)strlen(js));
    close(fd);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,sys\n"
             "d=json.load(open(sys.argv[1]))\n"
             "ms=d[\"resourceMetrics\"][0][\"scopeMetrics\"][0][\"metrics\"]\n"
             "assert len(ms)==%d, len(ms)\n"
             "h=[m for m in ms if m[\"name\"]==\"lmcache_blend.lookup_duration\"][0]\n"
             "p=h[\"histogram\"][\"dataPoints\"][0]\n"
             "assert p[\"count\"]==\"7\" and len(p[\"bucketCounts\"])==17\n"
             "assert len(p[\"explicitBounds\"])==16 and len(p[\"exemplars\"])==3\n"
             "assert p[\"max\"]==10000.5 and p[\"min\"]==0.0\n"
             "' %s",
             N_METRICS, path);
    int rc = system(cmd);
    unlink(path);
    assert_int_equal(rc, 0);
    free(js);
    cbt_buf_free(&b);
}

/* ---- (c) cbt's own health, encoded ------------------------------------------------------- */

/* The blend set and cbt's health in one request: the blend part exactly as
 * alone, then every cbt.* instrument in order with its fixed value. */
static void self_fixed_every_field(void **state)
{
    (void)state;
    cbt_otlp_resource r;
    emit_resource(&r);
    static cbt_blend_snapshot s;
    emit_set(&s);
    static cbt_otlp_self_snapshot h;
    emit_self(&h);
    cbt_buf b = {0};
    assert_int_equal(cbt_otlp_encode_metrics_(&r, &s, &h, 0, &b), CBT_OK);
    pb_mreq *q = decode(b.data, b.len);
    check_against_plus(q, &s, N_SELF);
    check_self_shape(q, N_METRICS, 1, 0, T0, T_SNAP);
    check_self_fixed(q);
    free_req(q);

    /* without self, the public encoder's bytes */
    cbt_buf pub = {0}, mine = {0};
    assert_int_equal(cbt_otlp_encode_metrics_proto(&r, &s, &pub), CBT_OK);
    assert_int_equal(cbt_otlp_encode_metrics_(&r, &s, NULL, 0, &mine), CBT_OK);
    assert_int_equal(pub.len, mine.len);
    assert_memory_equal(pub.data, mine.data, pub.len);
    cbt_buf_free(&pub);
    cbt_buf_free(&mine);
    cbt_buf_free(&b);
}

/* No blend set, no tracer: the exporter's six alone. Over gRPC the
 * failures go by status code, every code named (0, OK, stands for "no
 * status": transport). */
static void self_alone_grpc_codes(void **state)
{
    (void)state;
    cbt_otlp_resource r;
    emit_resource(&r);
    static cbt_otlp_self_snapshot h;
    emit_self(&h);
    h.have_tracer = 0;
    h.grpc = 1;
    for (unsigned c = 0; c < CBT_OTLP_GRPC_CODES; c++)
        h.failures_by_grpc_code[c] = 100 + c;
    cbt_buf b = {0};
    assert_int_equal(cbt_otlp_encode_metrics_(&r, NULL, &h, 0, &b), CBT_OK);
    pb_mreq *q = decode(b.data, b.len);
    check_self_shape(q, 0, 0, 1, T0, T_SNAP);
    assert_int_equal(self_int(q, "cbt.exporter.failures", "transport"), 100);
    assert_int_equal(self_int(q, "cbt.exporter.failures", "DEADLINE_EXCEEDED"), 104);
    assert_int_equal(self_int(q, "cbt.exporter.failures", "UNAVAILABLE"), 114);
    assert_int_equal(self_int(q, "cbt.exporter.failures", "UNAUTHENTICATED"), 116);
    assert_int_equal(self_int(q, "cbt.exporter.retries", NULL), 42);
    free_req(q);
    cbt_buf_free(&b);

    /* nothing to encode, or no resource: refused, nothing appended */
    assert_int_equal(cbt_otlp_encode_metrics_(&r, NULL, NULL, 0, &b), CBT_ERR_INVAL);
    assert_int_equal(cbt_otlp_encode_metrics_(NULL, NULL, &h, 1, &b), CBT_ERR_INVAL);
    assert_int_equal(b.len, 0);
}

/* OTLP/JSON of both sets: Gauges, doubles in seconds, attributes. The
 * official parser's view is tests/otlp_decode.py --metrics. */
static void self_json_mapping(void **state)
{
    (void)state;
    cbt_otlp_resource r;
    emit_resource(&r);
    static cbt_blend_snapshot s;
    emit_set(&s);
    static cbt_otlp_self_snapshot h;
    emit_self(&h);
    cbt_buf b = {0};
    assert_int_equal(cbt_otlp_encode_metrics_(&r, &s, &h, 1, &b), CBT_OK);
    char *js = strndup((const char *)b.data, b.len);
    assert_non_null(js);
    assert_int_equal(count_of(js, "\"gauge\":{\"dataPoints\":[{\"timeUnixNano\":"), 4);
    assert_non_null(strstr(js, "\"name\":\"cbt.harvester.lag\""));
    assert_non_null(strstr(js, "\"asDouble\":0.0015}"));
    assert_non_null(strstr(js, "\"asDouble\":0.25}"));
    assert_non_null(strstr(js, "\"asInt\":\"1001\""));
    assert_non_null(
        strstr(js, "\"asInt\":\"12\",\"attributes\":[{\"key\":\"cbt.drop.reason\","
                   "\"value\":{\"stringValue\":\"rejected\"}}]"));
    assert_non_null(
        strstr(js, "{\"key\":\"error.type\",\"value\":{\"stringValue\":\"4xx\"}}"));
    /* the blend Sums and the cbt.* Sums, each cumulative and monotonic */
    assert_int_equal(count_of(js, "\"isMonotonic\":true"), CBT_BC_COUNT_ + N_SELF - 4);
    free(js);
    cbt_buf_free(&b);
}

/* ---- (d) sending -------------------------------------------------------------------------- */

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(uint32_t ms)
{
    struct timespec d = {.tv_sec = ms / 1000u, .tv_nsec = (long)(ms % 1000u) * 1000000L};
    nanosleep(&d, NULL);
}

static int setup(void **state)
{
    (void)state;
    g_srv = hl_start();
    assert_non_null(g_srv);
    assert_int_equal(cbt_blend_metrics_create(&g_set), CBT_OK);
    return 0;
}

static int teardown(void **state)
{
    tu_teardown(state); /* the exporter first: it reads g_set and talks to the server */
    hl_stop(g_srv);
    g_srv = NULL;
    cbt_blend_metrics_free(g_set);
    g_set = NULL;
    return 0;
}

/* Test defaults: the loopback server, metrics from g_set, short bounds. */
static void test_config(cbt_otlp_config *c, uint32_t interval_ms)
{
    cbt_otlp_config_default(c);
    hl_url(g_srv, "/v1/traces", c->endpoint, sizeof c->endpoint);
    hl_url(g_srv, "/v1/metrics", c->metrics_endpoint, sizeof c->metrics_endpoint);
    c->metrics_interval_ms = interval_ms;
    c->blend = g_set;
    c->timeout_ms = 3000;
    c->schedule_delay_ms = 200;
    c->retry_budget_ms = 5000;
    c->shutdown_timeout_ms = 2000;
}

static cbt_otlp_exporter *start(const cbt_otlp_config *c)
{
    tu_start(NULL);
    cbt_otlp_exporter *e = NULL;
    cbt_sink sink;
    assert_int_equal(cbt_otlp_exporter_create(c, &e, &sink), CBT_OK);
    assert_non_null(e);
    assert_int_equal(cbt_add_sink(&sink), CBT_OK);
    return e;
}

static cbt_otlp_stats stats_of(cbt_otlp_exporter *e)
{
    cbt_otlp_stats s = CBT_STRUCT_INIT(cbt_otlp_stats);
    cbt_otlp_exporter_stats(e, &s);
    return s;
}

/* Poll until the exporter has finished at least `n` metrics exports (the
 * server sees the request before the exporter sees the answer). */
static void wait_exports(cbt_otlp_exporter *e, uint64_t n)
{
    for (int i = 0; i < 500 && stats_of(e).metrics_exports < n; i++)
        sleep_ms(10);
    if (stats_of(e).metrics_exports < n)
        fail_msg("%llu metrics exports after 5 s, want %llu",
                 (unsigned long long)stats_of(e).metrics_exports, (unsigned long long)n);
}

/* The metrics requests received so far, decoded, in arrival order (each a
 * POST to /v1/metrics with the protobuf content type, or `json`). */
#define MAX_MREQ 64
typedef struct mreqs {
    pb_mreq *q[MAX_MREQ];
    size_t n;
    size_t traces; /* requests to /v1/traces */
} mreqs;

static void mreqs_get(mreqs *out, int json)
{
    memset(out, 0, sizeof *out);
    uint32_t n = hl_request_count(g_srv);
    for (uint32_t i = 0; i < n; i++) {
        hl_request r;
        assert_true(hl_request_get(g_srv, i, &r));
        assert_string_equal(r.method, "POST");
        if (strcmp(r.path, "/v1/traces") == 0) {
            out->traces++;
            hl_request_free(&r);
            continue;
        }
        assert_string_equal(r.path, "/v1/metrics");
        assert_string_equal(hl_header_get(&r, "Content-Type"),
                            json ? "application/json" : "application/x-protobuf");
        if (!json && out->n < MAX_MREQ)
            out->q[out->n++] = decode(r.body, r.body_len);
        else if (json)
            out->n++;
        hl_request_free(&r);
    }
}

static void mreqs_free(mreqs *m)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->q[i])
            free_req(m->q[i]);
    memset(m, 0, sizeof *m);
}

static const pb_hist *lookup_point(const pb_mreq *q)
{
    return hist_point(find_metric(q, "lmcache_blend.lookup_duration"));
}

/* Wait (at most timeout_ms) until a metrics request carries lookup_requests == v. */
static int wait_value(uint64_t v, uint32_t timeout_ms)
{
    for (uint32_t t = 0; t <= timeout_ms; t += 20) {
        mreqs m;
        mreqs_get(&m, 0);
        int found = m.n && counter_value(m.q[m.n - 1], CBT_BC_LOOKUP_REQUESTS) == v;
        mreqs_free(&m);
        if (found)
            return 1;
        sleep_ms(20);
    }
    return 0;
}

static void periodic_cumulative(void **state)
{
    (void)state;
    cbt_blend_count(g_set, CBT_BC_LOOKUP_REQUESTS, 5); /* before the exporter starts */
    cbt_blend_observe(g_set, CBT_BH_LOOKUP, 2.0, NULL);
    cbt_otlp_config c;
    test_config(&c, 150);
    cbt_otlp_exporter *e = start(&c);
    assert_true(hl_wait_requests(g_srv, 1, 5000));
    cbt_blend_count(g_set, CBT_BC_LOOKUP_REQUESTS, 7);
    cbt_blend_observe(g_set, CBT_BH_LOOKUP, 30.0, NULL);
    if (!wait_value(12, 5000))
        fail_msg("no export carried the grown value 12");
    wait_exports(e, 2);
    assert_int_equal(stats_of(e).metrics_failures, 0);
    tu_stop(); /* + the final export (the exporter is gone now: no stats after this) */
    mreqs m;
    mreqs_get(&m, 0);
    assert_true(m.n >= 3);
    assert_int_equal(m.traces, 0); /* no spans: no trace requests */
    assert_int_equal(counter_value(m.q[0], CBT_BC_LOOKUP_REQUESTS), 5);
    assert_int_equal(lookup_point(m.q[0])->count, 1);
    uint64_t start0 = counter_point(find_metric(m.q[0], "lmcache_blend.lookup_requests"))
                          ->start_time_unix_nano;
    uint64_t prev_v = 0, prev_t = 0, prev_count = 0;
    for (size_t i = 0; i < m.n; i++) {
        const pb_num *p = counter_point(find_metric(m.q[i], "lmcache_blend.lookup_requests"));
        const pb_hist *h = lookup_point(m.q[i]);
        assert_int_equal(p->start_time_unix_nano, start0);  /* cumulative: one start */
        assert_int_equal(h->start_time_unix_nano, start0);
        assert_true(p->time_unix_nano > prev_t);            /* each export a new time */
        assert_true(p->time_unix_nano > start0);
        assert_true((uint64_t)p->as_int >= prev_v);         /* never goes down */
        assert_true(h->count >= prev_count);
        prev_v = (uint64_t)p->as_int;
        prev_t = p->time_unix_nano;
        prev_count = h->count;
    }
    assert_int_equal(prev_v, 12);
    assert_int_equal(prev_count, 2);
    assert_int_equal(lookup_point(m.q[m.n - 1])->bucket_counts[5], 1); /* 2.0 */
    assert_int_equal(lookup_point(m.q[m.n - 1])->bucket_counts[9], 1); /* 30.0 */
    mreqs_free(&m);
}

/* cbt_flush asks for an export (not waited for); shutdown sends the last
 * one; the tracer-less flush of cbt_shutdown adds none of its own. */
static void flush_and_shutdown_export(void **state)
{
    (void)state;
    cbt_otlp_config c;
    test_config(&c, 600000); /* the interval never fires here */
    cbt_otlp_exporter *e = start(&c);
    sleep_ms(300);
    assert_int_equal(hl_request_count(g_srv), 0);
    cbt_blend_count(g_set, CBT_BC_RETRIEVE_REQUESTS, 3);
    tu_flush();
    assert_true(hl_wait_requests(g_srv, 1, 5000));
    wait_exports(e, 1);
    sleep_ms(100);
    assert_int_equal(stats_of(e).metrics_exports, 1); /* one flush, one export */
    cbt_blend_count(g_set, CBT_BC_RETRIEVE_REQUESTS, 4);
    tu_stop();
    mreqs m;
    mreqs_get(&m, 0);
    assert_int_equal(m.n, 2);
    assert_int_equal(counter_value(m.q[0], CBT_BC_RETRIEVE_REQUESTS), 3);
    assert_int_equal(counter_value(m.q[1], CBT_BC_RETRIEVE_REQUESTS), 7);
    /* self_metrics AUTO: cbt's health follows the blend set in both, the
     * tracer's figures too in the one sent after the tracer was gone (read
     * at the final flush), with one start time */
    for (size_t i = 0; i < m.n; i++) {
        const pb_num *p = self_point(m.q[i], "cbt.spans.started", NULL);
        const pb_num *p0 = self_point(m.q[0], "cbt.spans.started", NULL);
        check_self_shape(m.q[i], N_METRICS, 1, 0, p0->start_time_unix_nano, p->time_unix_nano);
        assert_int_equal(self_int(m.q[i], "cbt.exporter.queue.capacity", NULL), 32768);
    }
    assert_int_equal(self_int(m.q[1], "cbt.events.published", NULL), 0);
    mreqs_free(&m);
}

/* Spans and metrics through one exporter, one kept-alive connection; the
 * tracer's own set (cbt_blend_metrics_current) works as `blend`. */
static void spans_and_metrics_together(void **state)
{
    (void)state;
    cbt_otlp_config c;
    test_config(&c, 600000);
    tu_start(NULL);
    c.blend = cbt_blend_metrics_current();
    assert_non_null(c.blend);
    cbt_otlp_exporter *e = NULL;
    cbt_sink sink;
    assert_int_equal(cbt_otlp_exporter_create(&c, &e, &sink), CBT_OK);
    assert_int_equal(cbt_add_sink(&sink), CBT_OK);
    tu_pub(CBT_EV_MP_REQUEST_START, "both-1");
    tu_pub(CBT_EV_MP_REQUEST_END, "both-1");
    tu_flush();
    assert_true(hl_wait_requests(g_srv, 2, 5000));
    wait_exports(e, 1);
    assert_int_equal(stats_of(e).spans_exported, 1);
    tu_stop();
    mreqs m;
    mreqs_get(&m, 0);
    assert_int_equal(m.traces, 1);
    assert_int_equal(m.n, 2); /* the flush's and the final one */
    assert_int_equal(hl_connection_count(g_srv), 1);
    mreqs_free(&m);
}

static void json_and_gzip(void **state)
{
    (void)state;
    cbt_otlp_config c;
    test_config(&c, 600000);
    c.protocol = CBT_OTLP_HTTP_JSON;
    c.gzip = 1;
    cbt_blend_count(g_set, CBT_BC_SCATTER_TOKENS, 256);
    cbt_otlp_exporter *e = start(&c);
    tu_flush();
    assert_true(hl_wait_requests(g_srv, 1, 5000));
    wait_exports(e, 1);
    hl_request r;
    assert_true(hl_request_get(g_srv, 0, &r));
    assert_string_equal(r.path, "/v1/metrics");
    assert_string_equal(hl_header_get(&r, "Content-Type"), "application/json");
    assert_true(r.gzip);
    assert_true(r.wire_len < r.body_len);
    char *js = strndup((const char *)r.body, r.body_len);
    assert_non_null(js);
    assert_true(strncmp(js, "{\"resourceMetrics\":[", 20) == 0);
    assert_non_null(strstr(js, "\"name\":\"lmcache_blend.scatter_tokens\",\"description\":"));
    assert_non_null(strstr(js, "\"asInt\":\"256\""));
    free(js);
    hl_request_free(&r);
    tu_stop();
}

static void retry_503_then_ok(void **state)
{
    (void)state;
    hl_step st;
    memset(&st, 0, sizeof st);
    st.action = HL_RESPOND;
    st.status = 503;
    st.times = 2;
    snprintf(st.retry_after, sizeof st.retry_after, "0");
    hl_script(g_srv, &st, 1);
    cbt_otlp_config c;
    test_config(&c, 600000);
    cbt_blend_count(g_set, CBT_BC_L2_LOAD_CHUNKS, 9);
    cbt_otlp_exporter *e = start(&c);
    tu_flush();
    assert_true(hl_wait_requests(g_srv, 3, 5000));
    wait_exports(e, 1);
    cbt_otlp_stats s = stats_of(e);
    assert_int_equal(s.retries, 2);
    assert_int_equal(s.metrics_failures, 0);
    mreqs m;
    mreqs_get(&m, 0);
    assert_int_equal(m.n, 3); /* the same snapshot three times */
    for (size_t i = 0; i < m.n; i++)
        assert_int_equal(counter_value(m.q[i], CBT_BC_L2_LOAD_CHUNKS), 9);
    assert_int_equal(counter_point(find_metric(m.q[0], "lmcache_blend.l2_load_chunks"))
                         ->time_unix_nano,
                     counter_point(find_metric(m.q[2], "lmcache_blend.l2_load_chunks"))
                         ->time_unix_nano);
    mreqs_free(&m);
    tu_stop();
}

static void status_400_counted(void **state)
{
    (void)state;
    hl_step st;
    memset(&st, 0, sizeof st);
    st.status = 400;
    st.times = 1;
    hl_script(g_srv, &st, 1);
    cbt_otlp_config c;
    test_config(&c, 600000);
    cbt_otlp_exporter *e = start(&c);
    tu_flush();
    assert_true(hl_wait_requests(g_srv, 1, 5000));
    for (int i = 0; i < 500 && stats_of(e).metrics_failures < 1; i++)
        sleep_ms(10);
    cbt_otlp_stats s = stats_of(e);
    assert_int_equal(s.metrics_failures, 1);
    assert_int_equal(s.metrics_exports, 0);
    assert_int_equal(s.retries, 0);
    tu_stop(); /* the final export goes out (and is answered 200) */
    assert_int_equal(hl_request_count(g_srv), 2);
}

/* A 200 with partial_success (rejected points) is still an accepted export. */
static void partial_success_accepted(void **state)
{
    (void)state;
    Opentelemetry__Proto__Collector__Metrics__V1__ExportMetricsPartialSuccess ps =
        OPENTELEMETRY__PROTO__COLLECTOR__METRICS__V1__EXPORT_METRICS_PARTIAL_SUCCESS__INIT;
    ps.rejected_data_points = 3;
    ps.error_message = (char *)"three points rejected";
    Opentelemetry__Proto__Collector__Metrics__V1__ExportMetricsServiceResponse resp =
        OPENTELEMETRY__PROTO__COLLECTOR__METRICS__V1__EXPORT_METRICS_SERVICE_RESPONSE__INIT;
    resp.partial_success = &ps;
    hl_step st;
    memset(&st, 0, sizeof st);
    st.status = 200;
    st.times = 1;
    st.body_len =
        opentelemetry__proto__collector__metrics__v1__export_metrics_service_response__pack(&resp,
                                                                                          st.body);
    assert_true(st.body_len > 0 && st.body_len < sizeof st.body);
    hl_script(g_srv, &st, 1);
    cbt_otlp_config c;
    test_config(&c, 600000);
    cbt_otlp_exporter *e = start(&c);
    tu_flush();
    wait_exports(e, 1);
    cbt_otlp_stats s = stats_of(e);
    assert_int_equal(s.metrics_failures, 0);
    assert_int_equal(s.retries, 0);
    tu_stop();
}

/* OTEL_SDK_DISABLED (config.disabled) silences metrics along with spans. */
static void sdk_disabled_sends_nothing(void **state)
{
    (void)state;
    cbt_otlp_config c;
    test_config(&c, 50);
    c.disabled = 1;
    cbt_blend_count(g_set, CBT_BC_LOOKUP_REQUESTS, 1);
    cbt_otlp_exporter *e = start(&c);
    tu_flush();
    sleep_ms(200);
    assert_int_equal(stats_of(e).metrics_exports, 0);
    tu_stop();
    assert_int_equal(hl_request_count(g_srv), 0);
}

/* Collector down: every export fails and is counted; publishing goes on;
 * cbt_shutdown stays within shutdown_timeout_ms (+1 s). */
static void collector_down(void **state)
{
    (void)state;
    cbt_otlp_config c;
    test_config(&c, 100);
    snprintf(c.metrics_endpoint, sizeof c.metrics_endpoint, "http://127.0.0.1:%u/v1/metrics",
             (unsigned)hl_closed_port());
    snprintf(c.endpoint, sizeof c.endpoint, "http://127.0.0.1:%u/v1/traces",
             (unsigned)hl_closed_port());
    c.retry_budget_ms = 300; /* span batches give up fast too: one thread sends both */
    c.shutdown_timeout_ms = 1000;
    cbt_otlp_exporter *e = start(&c);
    double t0 = mono_s();
    for (int i = 0; i < 200; i++) {
        cbt_blend_count(g_set, CBT_BC_LOOKUP_REQUESTS, 1);
        char sid[32];
        snprintf(sid, sizeof sid, "down-%d", i);
        tu_pub(CBT_EV_MP_REQUEST_START, sid);
        tu_pub(CBT_EV_MP_REQUEST_END, sid);
    }
    double took = mono_s() - t0;
    if (took > 0.5)
        fail_msg("200 publishes took %.3f s with the collector down", took);
    for (int i = 0; i < 300 && stats_of(e).metrics_failures < 2; i++)
        sleep_ms(10);
    cbt_otlp_stats s = stats_of(e);
    assert_true(s.metrics_failures >= 2);
    assert_int_equal(s.metrics_exports, 0);
    t0 = mono_s();
    tu_stop();
    double shut = mono_s() - t0;
    print_message("cbt_shutdown with the collector down: %.3f s (%llu metrics failures before)\n",
                  shut, (unsigned long long)s.metrics_failures);
    if (shut > (c.shutdown_timeout_ms + 1000) / 1000.0)
        fail_msg("cbt_shutdown took %.3f s (bound %u ms + 1 s)", shut, c.shutdown_timeout_ms);
}

/* Spans received by `srv` on /v1/traces so far. */
static size_t trace_spans_at(hl_server *srv)
{
    size_t spans = 0;
    uint32_t n = hl_request_count(srv);
    for (uint32_t i = 0; i < n; i++) {
        hl_request r;
        if (!hl_request_get(srv, i, &r))
            continue;
        if (strcmp(r.path, "/v1/traces") == 0) {
            Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceRequest *q =
                opentelemetry__proto__collector__trace__v1__export_trace_service_request__unpack(
                    NULL, r.body_len, r.body);
            assert_non_null(q);
            for (size_t a = 0; a < q->n_resource_spans; a++)
                for (size_t b = 0; b < q->resource_spans[a]->n_scope_spans; b++)
                    spans += q->resource_spans[a]->scope_spans[b]->n_spans;
            opentelemetry__proto__collector__trace__v1__export_trace_service_request__free_unpacked(
                q, NULL);
        }
        hl_request_free(&r);
    }
    return spans;
}

/* Spans first: a metrics collector that accepts and never answers must not
 * hold the span batches behind its POSTs. A flush with spans waiting returns
 * as soon as they are sent, and at shutdown every queued span goes out within
 * the bound although a metrics POST was hanging. */
static void stalled_metrics_never_hold_spans(void **state)
{
    (void)state;
    hl_server *stall = hl_start();
    assert_non_null(stall);
    hl_step st = {.action = HL_STALL, .times = 100000};
    hl_script(stall, &st, 1);
    cbt_otlp_config c;
    test_config(&c, 50);
    hl_url(stall, "/v1/metrics", c.metrics_endpoint, sizeof c.metrics_endpoint);
    c.timeout_ms = 2000;
    c.shutdown_timeout_ms = 1500;
    cbt_otlp_exporter *e = start(&c);
    assert_true(hl_wait_requests(stall, 1, 5000)); /* a metrics POST is hanging now */
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 5; i++) {
            char sid[32];
            snprintf(sid, sizeof sid, "stall-%d-%d", round, i);
            tu_pub(CBT_EV_MP_REQUEST_START, sid);
            tu_pub(CBT_EV_MP_REQUEST_END, sid);
        }
        double t0 = mono_s();
        tu_flush(); /* asserts the flush succeeded: the spans went out */
        double took = mono_s() - t0;
        if (took > 1.0)
            fail_msg("a flush with a hung metrics POST took %.3f s", took);
        assert_int_equal(stats_of(e).spans_exported, (uint64_t)(5 * (round + 1)));
        sleep_ms(80); /* let the next metrics export start and hang */
    }
    for (int i = 0; i < 100; i++) {
        char sid[32];
        snprintf(sid, sizeof sid, "stall-last-%d", i);
        tu_pub(CBT_EV_MP_REQUEST_START, sid);
        tu_pub(CBT_EV_MP_REQUEST_END, sid);
    }
    double t0 = mono_s();
    tu_stop();
    double shut = mono_s() - t0;
    if (shut > (c.shutdown_timeout_ms + 1000) / 1000.0)
        fail_msg("cbt_shutdown took %.3f s (bound %u ms + 1 s)", shut, c.shutdown_timeout_ms);
    assert_int_equal(trace_spans_at(g_srv), 115);
    hl_stop(stall);
}

/* ---- (e) cbt's own health after a known workload ------------------------------------------
 *
 * The real tracer and exporter, self_metrics ON and no blend set (so the
 * metrics export is the cbt.* instruments alone), max_queue 1000, batches
 * only on a flush. The loopback collector answers the first POST (the first
 * span batch) 503 with Retry-After 0, its retry 200, the flush's metrics
 * export 400, everything after 200. The events:
 *   5 MP requests (START, END: 5 request spans), a flush;
 *   2 events of an unknown type (refused: rejected);
 *   1 session of 64 characters (refused by cbt_event_init: session_too_long);
 *   3 more MP requests, the first with a 5000-byte string value on its
 *   START (1 value truncated); cbt_shutdown.
 * The last metrics request (the export at shutdown) then carries, written
 * out here: events.published 16; events.dropped queue_full 0, rejected 2,
 * session_too_long 1, stream_mark_lost 0; events.truncated_values 1;
 * spans.started 8, ended 8, dropped 0, unsampled 0, lost 0;
 * exporter.queue.size 0, queue.capacity 1000, spans.exported 8,
 * spans.dropped 0, retries 1; failures transport 0, 3xx 0, 4xx 1, 5xx 0
 * (tests/otlp_decode.py --metrics checks the same, WORKLOAD). */
#define WL_CAPACITY 1000

static void wl_requests(int from, int n, const char *long_value)
{
    for (int i = from; i < from + n; i++) {
        char sid[32];
        snprintf(sid, sizeof sid, "wl-%d", i);
        cbt_event e;
        assert_int_equal(cbt_event_init(&e, CBT_EV_MP_REQUEST_START, sid), CBT_OK);
        if (long_value && i == from) {
            cbt_name note;
            assert_int_equal(cbt_intern("note", &note), CBT_OK);
            assert_int_equal(cbt_event_str(&e, note, long_value), CBT_OK);
        }
        assert_int_equal(cbt_publish(&e), CBT_OK);
        tu_pub(CBT_EV_MP_REQUEST_END, sid);
    }
}

/* Run the workload against `srv`; returns the last metrics request's body
 * (malloc'd, *len) and leaves the tracer stopped. */
static uint8_t *run_workload(hl_server *srv, int json, size_t *len)
{
    hl_step steps[3];
    memset(steps, 0, sizeof steps);
    steps[0].status = 503;
    snprintf(steps[0].retry_after, sizeof steps[0].retry_after, "0");
    steps[1].status = 200;
    steps[2].status = 400;
    hl_script(srv, steps, 3);
    cbt_otlp_config c;
    cbt_otlp_config_default(&c);
    hl_url(srv, "/v1/traces", c.endpoint, sizeof c.endpoint);
    hl_url(srv, "/v1/metrics", c.metrics_endpoint, sizeof c.metrics_endpoint);
    c.protocol = json ? CBT_OTLP_HTTP_JSON : CBT_OTLP_HTTP_PROTOBUF;
    c.self_metrics = CBT_OTLP_SELF_METRICS_ON;
    c.blend = NULL;
    c.metrics_interval_ms = 600000; /* never periodic: a flush and shutdown only */
    c.schedule_delay_ms = 600000;   /* span batches only on a flush */
    c.max_queue = WL_CAPACITY;
    c.timeout_ms = 3000;
    c.retry_budget_ms = 5000;
    c.shutdown_timeout_ms = 3000;
    tu_start(NULL);
    cbt_otlp_exporter *e = NULL;
    cbt_sink sink;
    assert_int_equal(cbt_otlp_exporter_create(&c, &e, &sink), CBT_OK);
    assert_int_equal(cbt_add_sink(&sink), CBT_OK);

    wl_requests(0, 5, NULL);
    tu_flush(); /* the batch: 503, then 200; then the metrics export: 400 */
    cbt_otlp_stats st = stats_of(e);
    for (int i = 0; i < 500 && st.metrics_failures < 1; i++) {
        sleep_ms(10);
        st = stats_of(e);
    }
    assert_int_equal(st.metrics_failures, 1);
    assert_int_equal(st.spans_exported, 5);
    assert_int_equal(st.retries, 1);
    assert_int_equal(st.failures_by_http_class[4], 1);
    assert_int_equal(st.queue_capacity, WL_CAPACITY);

    cbt_event bad;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(cbt_event_init(&bad, (cbt_event_type)9999, "wl-bad"), CBT_OK);
        assert_int_equal(cbt_publish(&bad), CBT_ERR_UNKNOWN_EVENT);
    }
    char sid64[65];
    memset(sid64, 's', 64);
    sid64[64] = '\0';
    assert_int_equal(cbt_event_init(&bad, CBT_EV_MP_REQUEST_START, sid64),
                     CBT_ERR_SESSION_TOO_LONG);
    static char big[5001];
    memset(big, 'v', 5000);
    big[5000] = '\0';
    wl_requests(5, 3, big);
    cbt_metrics fin;
    tu_stop_final(&fin); /* the final flush, the final metrics export */
    /* the tracer agrees with what this test wrote down */
    assert_int_equal(fin.published, 16);
    assert_int_equal(fin.rejected, 2);
    assert_int_equal(fin.session_too_long, 1);
    assert_int_equal(fin.meta_truncated, 1);
    assert_int_equal(fin.spans_started, 8);

    uint8_t *body = NULL;
    uint32_t n = hl_request_count(srv);
    for (uint32_t i = 0; i < n; i++) {
        hl_request r;
        assert_true(hl_request_get(srv, i, &r));
        if (!strcmp(r.path, "/v1/metrics")) {
            free(body);
            body = malloc(r.body_len + 1);
            assert_non_null(body);
            memcpy(body, r.body, r.body_len);
            body[r.body_len] = 0;
            *len = r.body_len;
        }
        hl_request_free(&r);
    }
    assert_non_null(body);
    return body;
}

/* The workload's figures, as the decoded last request carries them. */
static void check_workload(const pb_mreq *q)
{
    size_t n;
    (void)shape_n(q, &n);
    assert_int_equal(n, N_SELF); /* no blend set: the cbt.* instruments alone */
    const pb_num *p = self_point(q, "cbt.events.published", NULL);
    check_self_shape(q, 0, 1, 0, p->start_time_unix_nano, p->time_unix_nano);
    assert_true(p->start_time_unix_nano > T0 && p->time_unix_nano > p->start_time_unix_nano);
    assert_int_equal(self_int(q, "cbt.events.published", NULL), 16);
    assert_int_equal(self_int(q, "cbt.events.dropped", "queue_full"), 0);
    assert_int_equal(self_int(q, "cbt.events.dropped", "rejected"), 2);
    assert_int_equal(self_int(q, "cbt.events.dropped", "session_too_long"), 1);
    assert_int_equal(self_int(q, "cbt.events.dropped", "stream_mark_lost"), 0);
    assert_int_equal(self_int(q, "cbt.events.truncated_values", NULL), 1);
    assert_int_equal(self_int(q, "cbt.spans.started", NULL), 8);
    assert_int_equal(self_int(q, "cbt.spans.ended", NULL), 8);
    assert_int_equal(self_int(q, "cbt.spans.dropped", NULL), 0);
    assert_int_equal(self_int(q, "cbt.spans.unsampled", NULL), 0);
    assert_int_equal(self_int(q, "cbt.spans.lost", NULL), 0);
    double lag = self_double(q, "cbt.harvester.lag"), max = self_double(q, "cbt.harvester.max_lag");
    assert_true(lag >= 0 && max >= lag && max < 10.0);
    (void)self_int(q, "cbt.harvester.wakeups", NULL); /* timing decides how many */
    assert_int_equal(self_int(q, "cbt.exporter.queue.size", NULL), 0);
    assert_int_equal(self_int(q, "cbt.exporter.queue.capacity", NULL), WL_CAPACITY);
    assert_int_equal(self_int(q, "cbt.exporter.spans.exported", NULL), 8);
    assert_int_equal(self_int(q, "cbt.exporter.spans.dropped", NULL), 0);
    assert_int_equal(self_int(q, "cbt.exporter.retries", NULL), 1);
    assert_int_equal(self_int(q, "cbt.exporter.failures", "transport"), 0);
    assert_int_equal(self_int(q, "cbt.exporter.failures", "3xx"), 0);
    assert_int_equal(self_int(q, "cbt.exporter.failures", "4xx"), 1);
    assert_int_equal(self_int(q, "cbt.exporter.failures", "5xx"), 0);
}

static void self_metrics_after_workload(void **state)
{
    (void)state;
    size_t len = 0;
    uint8_t *body = run_workload(g_srv, 0, &len);
    pb_mreq *q = decode(body, len);
    check_workload(q);
    free_req(q);
    free(body);
}

/* The same over OTLP/JSON: the figures in the text (the official parser's
 * view: tests/otlp_decode.py --metrics). */
static void self_metrics_after_workload_json(void **state)
{
    (void)state;
    size_t len = 0;
    char *js = (char *)run_workload(g_srv, 1, &len);
    assert_non_null(strstr(js, "\"name\":\"cbt.events.published\""));
    assert_non_null(strstr(js, "\"asInt\":\"16\""));
    assert_non_null(strstr(js, "\"asInt\":\"2\",\"attributes\":[{\"key\":\"cbt.drop.reason\","
                               "\"value\":{\"stringValue\":\"rejected\"}}]"));
    assert_non_null(strstr(js, "\"asInt\":\"1\",\"attributes\":[{\"key\":\"error.type\","
                               "\"value\":{\"stringValue\":\"4xx\"}}]"));
    assert_null(strstr(js, "lmcache_blend"));
    free(js);
}

/* self_metrics OFF: the blend set alone; AUTO without a blend set: no
 * metrics export at all (as before self-metrics existed). */
static void self_metrics_off_and_auto(void **state)
{
    (void)state;
    cbt_otlp_config c;
    test_config(&c, 600000);
    c.self_metrics = CBT_OTLP_SELF_METRICS_OFF;
    (void)start(&c);
    tu_flush();
    assert_true(hl_wait_requests(g_srv, 1, 5000));
    tu_stop();
    mreqs m;
    mreqs_get(&m, 0);
    assert_int_equal(m.n, 2); /* the flush's and the final one */
    for (size_t i = 0; i < m.n; i++)
        (void)check_shape(m.q[i]); /* N_METRICS: no cbt.* */
    mreqs_free(&m);

    hl_stop(g_srv);
    g_srv = hl_start();
    assert_non_null(g_srv);
    test_config(&c, 50);
    c.blend = NULL; /* AUTO: self-metrics ride with the blend set, and there is none */
    (void)start(&c);
    tu_flush();
    sleep_ms(200);
    tu_stop();
    assert_int_equal(hl_request_count(g_srv), 0);

    c.self_metrics = 7; /* not a value */
    cbt_otlp_exporter *e = NULL;
    cbt_sink sink;
    assert_int_equal(cbt_otlp_exporter_create(&c, &e, &sink), CBT_ERR_INVAL);
}

/* ---- the environment ------------------------------------------------------------------------- */


static void env_table(void **state)
{
    (void)state;
    cbt_otlp_config c;
    char *log;

    run_env(&ENV(.want = CBT_OK, .log_empty = 1), &c, &log);
    assert_string_equal(c.metrics_endpoint, "http://localhost:4318/v1/metrics");
    assert_int_equal(c.metrics_interval_ms, 60000);
    assert_null(c.blend);
    assert_int_equal(c.metrics_disabled, 0);
    free(log);

    /* the base gets /v1/metrics, as it gets /v1/traces */
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://col:4318"}}, .want = CBT_OK,
                 .log_empty = 1), &c, &log);
    assert_string_equal(c.metrics_endpoint, "http://col:4318/v1/metrics");
    assert_string_equal(c.endpoint, "http://col:4318/v1/traces");
    free(log);
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_ENDPOINT", "https://col:4318/base/"}},
                 .want = CBT_OK, .log_empty = 1), &c, &log);
    assert_string_equal(c.metrics_endpoint, "https://col:4318/base/v1/metrics");
    free(log);
    /* the signal's own URL, as is, wins */
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://col:4318"},
                         {"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://m:9090/custom"}},
                 .want = CBT_OK, .log_empty = 1), &c, &log);
    assert_string_equal(c.metrics_endpoint, "http://m:9090/custom");
    assert_string_equal(c.endpoint, "http://col:4318/v1/traces");
    free(log);
    /* a bad metrics URL turns the metrics off, reported; the spans still go,
     * even when OTEL_METRICS_EXPORTER asks for otlp */
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "m:9090"},
                         {"OTEL_METRICS_EXPORTER", "otlp"}},
                 .want = CBT_OK, .log_has = {"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "metrics export is off"}),
            &c, &log);
    assert_string_equal(c.metrics_endpoint, "http://localhost:4318/v1/metrics");
    assert_int_equal(c.metrics_disabled, 1);
    assert_string_equal(c.endpoint, "http://localhost:4318/v1/traces");
    free(log);
    /* a bad base: refused, reported once for both signals */
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_ENDPOINT", "col:4318"}}, .want = CBT_ERR_INVAL,
                 .log_has = {"OTEL_EXPORTER_OTLP_ENDPOINT"}), &c, &log);
    assert_int_equal(count_of(log, "OTEL_EXPORTER_OTLP_ENDPOINT"), 1);
    assert_string_equal(c.metrics_endpoint, "http://localhost:4318/v1/metrics");
    free(log);

    run_env(&ENV(.set = {{"OTEL_METRIC_EXPORT_INTERVAL", "1500"}}, .want = CBT_OK,
                 .log_empty = 1), &c, &log);
    assert_int_equal(c.metrics_interval_ms, 1500);
    free(log);
    run_env(&ENV(.set = {{"OTEL_METRIC_EXPORT_INTERVAL", " 250 "}}, .want = CBT_OK,
                 .log_empty = 1), &c, &log);
    assert_int_equal(c.metrics_interval_ms, 250);
    free(log);
    static const char *const bad[] = {"abc", "0", "-1", "1.5", "10s", "99999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        run_env(&ENV(.set = {{"OTEL_METRIC_EXPORT_INTERVAL", bad[i]}}, .want = CBT_OK,
                     .log_has = {"OTEL_METRIC_EXPORT_INTERVAL", "60000"}), &c, &log);
        assert_int_equal(c.metrics_interval_ms, 60000);
        free(log);
    }
    run_env(&ENV(.set = {{"OTEL_METRIC_EXPORT_INTERVAL", ""}}, .want = CBT_OK, .log_empty = 1),
            &c, &log); /* empty = unset */
    assert_int_equal(c.metrics_interval_ms, 60000);
    free(log);

    run_env(&ENV(.set = {{"OTEL_METRICS_EXPORTER", "none"}}, .want = CBT_OK, .log_empty = 1),
            &c, &log);
    assert_int_equal(c.metrics_disabled, 1);
    free(log);
    run_env(&ENV(.set = {{"OTEL_METRICS_EXPORTER", "otlp"}}, .want = CBT_OK, .log_empty = 1),
            &c, &log);
    assert_int_equal(c.metrics_disabled, 0);
    free(log);
    run_env(&ENV(.set = {{"OTEL_METRICS_EXPORTER", "prometheus"}}, .want = CBT_OK,
                 .log_has = {"OTEL_METRICS_EXPORTER", "prometheus", "otlp"}), &c, &log);
    assert_int_equal(c.metrics_disabled, 0);
    free(log);
    run_env(&ENV(.set = {{"OTEL_METRICS_EXPORTER", "otlp, none"}}, .want = CBT_OK,
                 .log_empty = 1), &c, &log);
    assert_int_equal(c.metrics_disabled, 0);
    free(log);

    /* cbt's own switch for the cbt.* instruments */
    run_env(&ENV(.want = CBT_OK, .log_empty = 1), &c, &log);
    assert_int_equal(c.self_metrics, CBT_OTLP_SELF_METRICS_AUTO);
    free(log);
    run_env(&ENV(.set = {{"CBT_OTLP_SELF_METRICS", "1"}}, .want = CBT_OK, .log_empty = 1), &c,
            &log);
    assert_int_equal(c.self_metrics, CBT_OTLP_SELF_METRICS_ON);
    free(log);
    run_env(&ENV(.set = {{"CBT_OTLP_SELF_METRICS", "0"}}, .want = CBT_OK, .log_empty = 1), &c,
            &log);
    assert_int_equal(c.self_metrics, CBT_OTLP_SELF_METRICS_OFF);
    free(log);
    run_env(&ENV(.set = {{"CBT_OTLP_SELF_METRICS", "yes"}}, .want = CBT_OK,
                 .log_has = {"CBT_OTLP_SELF_METRICS", "\"yes\"", "default"}), &c, &log);
    assert_int_equal(c.self_metrics, CBT_OTLP_SELF_METRICS_AUTO);
    free(log);

    /* the per-signal request settings: reported as not read, values never shown */
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_METRICS_HEADERS", "api-key=topsecret"},
                         {"OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "77"}},
                 .want = CBT_OK,
                 .log_has = {"OTEL_EXPORTER_OTLP_METRICS_HEADERS",
                             "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "OTEL_EXPORTER_OTLP_HEADERS"},
                 .log_lacks = {"topsecret"}), &c, &log);
    assert_int_equal(c.n_headers, 0);
    assert_int_equal(c.timeout_ms, 10000);
    free(log);
}

/* OTEL_METRICS_EXPORTER=none: blend set, nothing sent to /v1/metrics, spans still go. */
static void env_none_sends_nothing(void **state)
{
    (void)state;
    char base[128];
    hl_url(g_srv, "", base, sizeof base);
    clear_env();
    setenv("OTEL_EXPORTER_OTLP_ENDPOINT", base, 1);
    setenv("OTEL_METRICS_EXPORTER", "none", 1);
    setenv("OTEL_METRIC_EXPORT_INTERVAL", "50", 1);
    cbt_otlp_config c;
    cbt_otlp_config_default(&c);
    assert_int_equal(cbt_otlp_config_from_env(&c, NULL), CBT_OK);
    clear_env();
    assert_int_equal(c.metrics_interval_ms, 50);
    c.blend = g_set;
    c.timeout_ms = 3000;
    cbt_blend_count(g_set, CBT_BC_LOOKUP_REQUESTS, 1);
    cbt_otlp_exporter *e = start(&c);
    tu_pub(CBT_EV_MP_REQUEST_START, "none-1");
    tu_pub(CBT_EV_MP_REQUEST_END, "none-1");
    tu_flush();
    sleep_ms(300); /* six intervals */
    cbt_otlp_stats s = stats_of(e);
    assert_int_equal(s.metrics_exports, 0);
    assert_int_equal(s.metrics_failures, 0);
    tu_stop();
    mreqs m;
    mreqs_get(&m, 0);
    assert_int_equal(m.n, 0);
    assert_int_equal(m.traces, 1);
    mreqs_free(&m);

    /* and the same environment without "none" does send: the test can fail */
    setenv("OTEL_EXPORTER_OTLP_ENDPOINT", base, 1);
    setenv("OTEL_METRIC_EXPORT_INTERVAL", "50", 1);
    cbt_otlp_config_default(&c);
    assert_int_equal(cbt_otlp_config_from_env(&c, NULL), CBT_OK);
    clear_env();
    c.blend = g_set;
    (void)start(&c);
    sleep_ms(300);
    tu_stop();
    mreqs_get(&m, 0);
    assert_true(m.n >= 2);
    mreqs_free(&m);
}

static void bad_configs_refused(void **state)
{
    (void)state;
    cbt_otlp_exporter *e = NULL;
    cbt_sink sink;
    cbt_otlp_config c;
    test_config(&c, 1000);
    snprintf(c.metrics_endpoint, sizeof c.metrics_endpoint, "localhost:4318/v1/metrics");
    assert_int_equal(cbt_otlp_exporter_create(&c, &e, &sink), CBT_ERR_INVAL);
    assert_null(e);
    /* the metrics URL only matters when metrics go out */
    c.metrics_disabled = 1;
    assert_int_equal(cbt_otlp_exporter_create(&c, &e, &sink), CBT_OK);
    sink.destroy(sink.ctx);
    c.metrics_disabled = 0;
    c.blend = NULL;
    e = NULL;
    assert_int_equal(cbt_otlp_exporter_create(&c, &e, &sink), CBT_OK);
    sink.destroy(sink.ctx);
    assert_int_equal(hl_request_count(g_srv), 0);
}

/* loopback only: no proxy from the environment */
static void no_proxy(void)
{
    unsetenv("http_proxy");
    unsetenv("HTTP_PROXY");
    unsetenv("https_proxy");
    unsetenv("HTTPS_PROXY");
    unsetenv("all_proxy");
    unsetenv("ALL_PROXY");
    setenv("no_proxy", "127.0.0.1,localhost", 1);
}

/* The known workload's last metrics request, protobuf and OTLP/JSON (two
 * runs), for tests/otlp_decode.py --metrics. Outside cmocka: a failed
 * assert aborts the process. */
static int emit_workload(const char *pb_path, const char *json_path)
{
    no_proxy();
    int rc = 0;
    for (int json = 0; json < 2 && rc == 0; json++) {
        hl_server *srv = hl_start();
        if (!srv)
            return 1;
        size_t len = 0;
        uint8_t *body = run_workload(srv, json, &len);
        cbt_buf b = {body, len, len};
        if (write_file(json ? json_path : pb_path, &b)) {
            fprintf(stderr, "test_otlp_metrics --emit-workload: cannot write %s\n",
                    json ? json_path : pb_path);
            rc = 1;
        }
        free(body);
        hl_stop(srv);
    }
    return rc;
}

int main(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "--emit") || !strcmp(argv[1], "--emit-workload"))) {
        if (argc != 4) {
            fprintf(stderr, "usage: %s --emit|--emit-workload <file.pb> <file.json>\n", argv[0]);
            return 2;
        }
        return !strcmp(argv[1], "--emit") ? emit(argv[2], argv[3])
                                          : emit_workload(argv[2], argv[3]);
    }
    no_proxy();
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fixed_set_every_field),
        cmocka_unit_test(same_resource_as_traces),
        cmocka_unit_test(values_on_bounds),
        cmocka_unit_test(zero_set_exports_everything),
        cmocka_unit_test(appends_and_repairs),
        cmocka_unit_test(bad_arguments),
        cmocka_unit_test(json_mapping),
        cmocka_unit_test(self_fixed_every_field),
        cmocka_unit_test(self_alone_grpc_codes),
        cmocka_unit_test(self_json_mapping),
        T(periodic_cumulative),
        T(flush_and_shutdown_export),
        T(spans_and_metrics_together),
        T(json_and_gzip),
        T(retry_503_then_ok),
        T(status_400_counted),
        T(partial_success_accepted),
        T(sdk_disabled_sends_nothing),
        T(collector_down),
        T(stalled_metrics_never_hold_spans),
        T(self_metrics_after_workload),
        T(self_metrics_after_workload_json),
        T(self_metrics_off_and_auto),
        cmocka_unit_test(env_table),
        T(env_none_sends_nothing),
        T(bad_configs_refused),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
