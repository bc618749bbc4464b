/* tests/test_otlp_http.c — the OTLP/HTTP exporter (exporter/otlp_http.c) and
 * its environment (exporter/otlp_env.c) against a real HTTP/1.1 server on
 * 127.0.0.1 (tests/http_loopback.c).
 *
 * Every case runs the real tracer (tu_start), publishes MP requests through
 * cbt, and adds the exporter with cbt_add_sink; what reaches the server is
 * decoded with the protoc-c code generated from exporter/proto/ and compared
 * with the spans the memory sink saw. The failure cases (collector down,
 * stalled, 4xx, 503 with Retry-After) pin the exporter's promises: publishing
 * never blocks, the queue stays within max_queue, retries are bounded, and
 * cbt_shutdown() returns within shutdown_timeout_ms (+1 s of slack).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"
#include "cbt/array.h"

/* A shutdown's bound is its shutdown_timeout_ms plus this much of the
 * machine's own time (draining, joining); a sanitizer build
 * (CBT_TEST_SLOW=3, tests/CMakeLists.txt) runs everything about 3x slower. */
#ifndef CBT_TEST_SLOW
#define CBT_TEST_SLOW 1u
#endif
#define SHUTDOWN_SLACK_MS (1000u * CBT_TEST_SLOW)

#include "http_loopback.h"
#include "otlp_env_case.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb-c.h"
#include "cbt/otlp.h"

typedef Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceRequest pb_request;
typedef Opentelemetry__Proto__Trace__V1__Span pb_span;
typedef Opentelemetry__Proto__Common__V1__KeyValue pb_kv;

static hl_server *g_srv;

/* ---- helpers ------------------------------------------------------------------ */

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
    return 0;
}

static int teardown(void **state)
{
    tu_teardown(state); /* the exporter first: it may be talking to the server */
    hl_stop(g_srv);
    g_srv = NULL;
    return 0;
}

/* Test defaults: the loopback server, short delays and bounds. */
static void test_config(cbt_otlp_config *c)
{
    cbt_otlp_config_default(c);
    hl_url(g_srv, "/v1/traces", c->endpoint, sizeof c->endpoint);
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

static void hex(const uint8_t *b, size_t n, char *out)
{
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[b[i] >> 4];
        out[2 * i + 1] = d[b[i] & 15];
    }
    out[2 * n] = '\0';
}

/* ---- decoding what the server received ----------------------------------------------- */

#define MAX_DECODED_REQ 256
#define MAX_DECODED_SPANS 4096

typedef struct decoded {
    pb_request *req[MAX_DECODED_REQ];
    size_t n_req;
    const pb_span *spans[MAX_DECODED_SPANS];
    size_t n_spans;
} decoded;

static decoded g_dec;

static void decoded_free(void)
{
    for (size_t i = 0; i < g_dec.n_req; i++)
        opentelemetry__proto__collector__trace__v1__export_trace_service_request__free_unpacked(
            g_dec.req[i], NULL);
    memset(&g_dec, 0, sizeof g_dec);
}

/* Decode every recorded request as protobuf; each must be a POST to
 * /v1/traces with the protobuf content type. */
static void decode_all(void)
{
    decoded_free();
    uint32_t n = hl_request_count(g_srv);
    for (uint32_t i = 0; i < n && i < MAX_DECODED_REQ; i++) {
        hl_request r;
        assert_true(hl_request_get(g_srv, i, &r));
        assert_string_equal(r.method, "POST");
        assert_string_equal(r.path, "/v1/traces");
        const char *ct = hl_header_get(&r, "Content-Type");
        assert_non_null(ct);
        assert_string_equal(ct, "application/x-protobuf");
        pb_request *pr = opentelemetry__proto__collector__trace__v1__export_trace_service_request__unpack(
            NULL, r.body_len, r.body);
        hl_request_free(&r);
        assert_non_null(pr);
        g_dec.req[g_dec.n_req++] = pr;
        assert_int_equal(pr->n_resource_spans, 1);
        for (size_t s = 0; s < pr->resource_spans[0]->n_scope_spans; s++) {
            const Opentelemetry__Proto__Trace__V1__ScopeSpans *ss = pr->resource_spans[0]->scope_spans[s];
            assert_non_null(ss->scope);
            assert_string_equal(ss->scope->name, "cbt");
            for (size_t k = 0; k < ss->n_spans && g_dec.n_spans < MAX_DECODED_SPANS; k++)
                g_dec.spans[g_dec.n_spans++] = ss->spans[k];
        }
    }
}

static const pb_span *decoded_find(const uint8_t span_id[8])
{
    for (size_t i = 0; i < g_dec.n_spans; i++)
        if (g_dec.spans[i]->span_id.len == 8 && memcmp(g_dec.spans[i]->span_id.data, span_id, 8) == 0)
            return g_dec.spans[i];
    return NULL;
}

static const pb_kv *pb_attr(const pb_span *s, const char *key)
{
    for (size_t i = 0; i < s->n_attributes; i++)
        if (strcmp(s->attributes[i]->key, key) == 0)
            return s->attributes[i];
    return NULL;
}

/* The decoded span matches the memory sink's: ids, parent, name, times. */
static const pb_span *check_same(const cbt_span *m, const char *name)
{
    const pb_span *p = decoded_find(m->ctx.span_id);
    if (!p)
        fail_msg("span %s was not exported", name);
    assert_int_equal(p->trace_id.len, 16);
    assert_memory_equal(p->trace_id.data, m->ctx.trace_id, 16);
    assert_string_equal(p->name, name);
    assert_int_equal(p->start_time_unix_nano, m->start_ns);
    assert_int_equal(p->end_time_unix_nano, m->end_ns);
    if (tu_is_root(m)) {
        assert_int_equal(p->parent_span_id.len, 0);
    } else {
        assert_int_equal(p->parent_span_id.len, 8);
        assert_memory_equal(p->parent_span_id.data, m->parent_span_id, 8);
    }
    return p;
}

/* The trees of request `sid` as the collector sees them. */
static void check_request_tree(const char *sid)
{
    const cbt_span *root = tu_find("request", sid, 0);
    const cbt_span *lp = tu_find("mp.lookup_prefetch", sid, 0);
    const cbt_span *st = tu_find("mp.store", sid, 0);
    assert_non_null(root);
    assert_non_null(lp);
    assert_non_null(st);
    assert_true(tu_is_child_of(lp, root));
    assert_true(tu_is_child_of(st, root));

    const pb_span *proot = check_same(root, "request");
    const pb_span *plp = check_same(lp, "mp.lookup_prefetch");
    const pb_span *pst = check_same(st, "mp.store");
    assert_memory_equal(plp->parent_span_id.data, proot->span_id.data, 8);
    assert_memory_equal(pst->parent_span_id.data, proot->span_id.data, 8);
    assert_memory_equal(plp->trace_id.data, proot->trace_id.data, 16);
    assert_int_equal(proot->kind, OPENTELEMETRY__PROTO__TRACE__V1__SPAN__SPAN_KIND__SPAN_KIND_SERVER);

    /* typed attributes */
    const pb_kv *a = pb_attr(proot, "session_id");
    assert_non_null(a);
    assert_int_equal(a->value->value_case, OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE);
    assert_string_equal(a->value->string_value, sid);
    a = pb_attr(proot, "hit_tokens");
    assert_non_null(a);
    assert_int_equal(a->value->value_case, OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE);
    assert_int_equal(a->value->int_value, 1536);
    a = pb_attr(proot, "hit_rate");
    assert_non_null(a);
    assert_int_equal(a->value->value_case, OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_DOUBLE_VALUE);
    assert_true(a->value->double_value == 0.75);
    a = pb_attr(plp, "num_tokens");
    assert_non_null(a);
    assert_int_equal(a->value->value_case, OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE);
    assert_int_equal(a->value->int_value, 2048);
    a = pb_attr(pst, "stored_count");
    assert_non_null(a);
    assert_int_equal(a->value->int_value, 3);
}

/* ---- (a) protobuf: the trees arrive ---------------------------------------------- */

static void proto_trees_arrive(void **state)
{
    (void)state;
    cbt_otlp_config c;
    test_config(&c);
    snprintf(c.resource.service_name, sizeof c.resource.service_name, "otlp-test");
    cbt_otlp_exporter *e = start(&c);
    tu_pub_mp_requests("a", 4);
    tu_flush();
    cbt_otlp_stats s = stats_of(e);
    assert_int_equal(s.spans_queued, 12);
    assert_int_equal(s.spans_exported, 12);
    assert_int_equal(s.spans_dropped, 0);
    assert_int_equal(s.batches_failed, 0);
    assert_true(s.batches_sent >= 1);
    assert_true(s.bytes_sent > 0);
    assert_int_equal(s.batches_sent, hl_request_count(g_srv));

    decode_all();
    assert_int_equal(g_dec.n_spans, 12);
    const Opentelemetry__Proto__Resource__V1__Resource *res = g_dec.req[0]->resource_spans[0]->resource;
    assert_non_null(res);
    int saw_name = 0;
    for (size_t i = 0; i < res->n_attributes; i++)
        if (strcmp(res->attributes[i]->key, "service.name") == 0) {
            assert_string_equal(res->attributes[i]->value->string_value, "otlp-test");
            saw_name = 1;
        }
    assert_true(saw_name);
    for (int i = 0; i < 4; i++) {
        char sid[16];
        snprintf(sid, sizeof sid, "a-%d", i);
        check_request_tree(sid);
    }
    hl_request r;
    assert_true(hl_request_get(g_srv, 0, &r));
    assert_null(hl_header_get(&r, "Content-Encoding"));
    const char *ua = hl_header_get(&r, "User-Agent");
    assert_non_null(ua);
    assert_true(strncmp(ua, "cbt-otlp/", 9) == 0);
    hl_request_free(&r);
    tu_stop();
    decoded_free();
}

/* ---- (b) gzip ------------------------------------------------------------------------- */

static void gzip_body(void **state)
{
    (void)state;
    cbt_otlp_config c;
    test_config(&c);
    c.gzip = 1;
    cbt_otlp_exporter *e = start(&c);
    tu_pub_mp_requests("gz", 3);
    tu_flush();
    assert_int_equal(stats_of(e).spans_exported, 9);
    uint32_t n = hl_request_count(g_srv);
    assert_true(n >= 1);
    for (uint32_t i = 0; i < n; i++) {
        hl_request r;
        assert_true(hl_request_get(g_srv, i, &r));
        const char *ce = hl_header_get(&r, "Content-Encoding");
        assert_non_null(ce);
        assert_string_equal(ce, "gzip");
        assert_true(r.gzip); /* the server inflated it */
        assert_true(r.wire_len < r.body_len);
        hl_request_free(&r);
    }
    decode_all(); /* decodes the inflated bodies */
    assert_int_equal(g_dec.n_spans, 9);
    for (int i = 0; i < 3; i++) {
        char sid[16];
        snprintf(sid, sizeof sid, "gz-%d", i);
        check_request_tree(sid);
    }
    tu_stop();
    decoded_free();
}

/* ---- (c) OTLP/JSON -------------------------------------------------------------------- */

static void json_body(void **state)
{
    (void)state;
    cbt_otlp_config c;
    test_config(&c);
    c.protocol = CBT_OTLP_HTTP_JSON;
    cbt_otlp_exporter *e = start(&c);
    tu_pub_mp_requests("js", 2);
    tu_flush();
    assert_int_equal(stats_of(e).spans_exported, 6);
    uint32_t n = hl_request_count(g_srv);
    assert_true(n >= 1);
    size_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        hl_request r;
        assert_true(hl_request_get(g_srv, i, &r));
        total += r.body_len;
        hl_request_free(&r);
    }
    char *all = calloc(total + 1, 1);
    assert_non_null(all);
    size_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        hl_request r;
        assert_true(hl_request_get(g_srv, i, &r));
        assert_string_equal(hl_header_get(&r, "Content-Type"), "application/json");
        assert_true(r.body_len > 0 && r.body[0] == '{');
        memcpy(all + off, r.body, r.body_len);
        off += r.body_len;
        hl_request_free(&r);
    }
    assert_non_null(strstr(all, "\"resourceSpans\""));
    for (int i = 0; i < 2; i++) {
        char sid[16], tid[33], sidhex[17], pid[17], want[128];
        snprintf(sid, sizeof sid, "js-%d", i);
        const cbt_span *root = tu_find("request", sid, 0);
        const cbt_span *st = tu_find("mp.store", sid, 0);
        assert_non_null(root);
        assert_non_null(st);
        hex(root->ctx.trace_id, 16, tid);
        hex(root->ctx.span_id, 8, sidhex);
        hex(st->parent_span_id, 8, pid);
        snprintf(want, sizeof want, "\"traceId\":\"%s\"", tid);
        if (!strstr(all, want))
            fail_msg("no %s in the JSON body", want);
        snprintf(want, sizeof want, "\"spanId\":\"%s\"", sidhex);
        assert_non_null(strstr(all, want));
        snprintf(want, sizeof want, "\"parentSpanId\":\"%s\"", pid);
        assert_non_null(strstr(all, want));
        assert_string_equal(pid, sidhex);
    }
    free(all);
    tu_stop();
}

/* ---- (d) retries: 503 then success, Retry-After ------------------------------------------ */

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
    test_config(&c);
    cbt_otlp_exporter *e = start(&c);
    tu_pub_mp_requests("r", 3);
    tu_flush();
    cbt_otlp_stats s = stats_of(e);
    assert_int_equal(s.spans_exported, 9);
    assert_int_equal(s.spans_dropped, 0);
    assert_int_equal(s.retries, 2);
    assert_int_equal(s.batches_sent, 1);
    assert_int_equal(s.batches_failed, 0);
    assert_int_equal(hl_request_count(g_srv), 3);
    assert_int_equal(hl_connection_count(g_srv), 1); /* 503s keep the connection */
    tu_stop();
}

/* Gap between the first and second request when the first got `retry_after`. */
static double retry_gap(const char *retry_after, int status)
{
    hl_step st;
    memset(&st, 0, sizeof st);
    st.status = status;
    st.times = 1;
    snprintf(st.retry_after, sizeof st.retry_after, "%s", retry_after);
    hl_script(g_srv, &st, 1);
    cbt_otlp_config c;
    test_config(&c);
    c.timeout_ms = 8000; /* the flush waits out a retry of up to 3 s */
    cbt_otlp_exporter *e = start(&c);
    tu_pub_mp_requests("ra", 1);
    tu_flush();
    cbt_otlp_stats s = stats_of(e);
    assert_int_equal(s.spans_exported, 3);
    assert_int_equal(s.retries, 1);
    assert_int_equal(hl_request_count(g_srv), 2);
    hl_request r0, r1;
    assert_true(hl_request_get(g_srv, 0, &r0));
    assert_true(hl_request_get(g_srv, 1, &r1));
    double gap = (double)(r1.arrived_ns - r0.arrived_ns) * 1e-9;
    /* the retry carries the same batch */
    assert_int_equal(r0.body_len, r1.body_len);
    assert_memory_equal(r0.body, r1.body, r0.body_len);
    hl_request_free(&r0);
    hl_request_free(&r1);
    tu_stop();
    return gap;
}

static void retry_after_seconds(void **state)
{
    (void)state;
    double gap = retry_gap("1", 503);
    print_message("Retry-After: 1: retried after %.3f s\n", gap);
    if (gap < 0.9 || gap > 3.0)
        fail_msg("Retry-After: 1 gave a %.3f s gap, expected about 1 s", gap);
}

static void retry_after_http_date(void **state)
{
    (void)state;
    char date[64];
    hl_http_date(3, date, sizeof date);
    double gap = retry_gap(date, 429);
    /* whole seconds: 1 to 3 s from when the answer was read, depending on
     * how long the set-up took and where the second boundaries fell */
    print_message("Retry-After: <HTTP date 3 s ahead>: retried after %.3f s\n", gap);
    if (gap < 0.9 || gap > 4.5)
        fail_msg("Retry-After: <date 3 s ahead> gave a %.3f s gap", gap);
}

/* An overloaded collector answering every request with `status` and
 * Retry-After `ra` ("0", a past date): the requests it gets in the 1 s after
 * the first. The backoff floor (100 ms, doubling) allows 4 (at 0, 0.1, 0.3
 * and 0.7 s); taking the collector's word for it gives thousands. */
static uint32_t requests_in_a_second(int status, const char *ra)
{
    hl_step st = hl_overloaded(status, ra);
    hl_script(g_srv, &st, 1);
    cbt_otlp_config c;
    test_config(&c);
    c.schedule_delay_ms = 10;
    c.retry_budget_ms = 60000;  /* the budget is not what stops the storm */
    c.shutdown_timeout_ms = 300;
    cbt_otlp_exporter *e = start(&c);
    tu_pub_mp_requests("storm", 1);
    assert_true(hl_wait_requests(g_srv, 1, 5000));
    hl_request r0;
    assert_true(hl_request_get(g_srv, 0, &r0));
    uint64_t t0 = r0.arrived_ns;
    hl_request_free(&r0);
    sleep_ms(1000);
    uint32_t n = 0, total = hl_request_count(g_srv);
    for (uint32_t i = 0; i < total; i++) { /* those recorded within 1 s of the first */
        hl_request r;
        if (!hl_request_get(g_srv, i, &r))
            break;
        if (r.arrived_ns - t0 <= 1000000000ull)
            n++;
        hl_request_free(&r);
    }
    cbt_otlp_stats s = stats_of(e);
    assert_int_equal(s.spans_exported, 0);
    tu_stop();
    print_message("%d with Retry-After: %s: %u requests in the first second\n", status, ra, n);
    return n;
}

static void retry_after_zero_no_storm(void **state)
{
    (void)state;
    uint32_t n = requests_in_a_second(503, "0");
    if (n < 3 || n > 12)
        fail_msg("Retry-After: 0 gave %u requests in 1 s; the backoff floor allows 4", n);
}

static void retry_after_past_date_no_storm(void **state)
{
    (void)state;
    char date[64];
    hl_http_date(-3600, date, sizeof date);
    uint32_t n = requests_in_a_second(429, date);
    if (n < 3 || n > 12)
        fail_msg("Retry-After: <an hour ago> gave %u requests in 1 s; the floor allows 4",
                 n);
}

/* A Retry-After longer than the step is honoured (not cut to the step). */
static void retry_after_longer_than_step(void **state)
{
    (void)state;
    uint32_t n = requests_in_a_second(503, "2");
    assert_int_equal(n, 1);
}

/* ---- final figures: what cbt_shutdown ends ------------------------------------------------ */

/* A collector that never answers (a stalled request in flight) or is not
 * there: the spans are dropped during cbt_shutdown, once its deadline has
 * passed. The stats read before shutdown said 0 dropped; final_stats, filled
 * when the exporter is destroyed, and cbt_shutdown_final's sink_spans_lost
 * (asked after the final flush) both say all 9. */
static void final_figures_after(int stalled)
{
    uint16_t port = 0;
    if (stalled) {
        hl_step st;
        memset(&st, 0, sizeof st);
        st.action = HL_STALL;
        st.times = 1000;
        hl_script(g_srv, &st, 1);
    } else {
        port = hl_closed_port();
    }
    cbt_otlp_config c;
    test_config(&c);
    if (!stalled)
        snprintf(c.endpoint, sizeof c.endpoint, "http://127.0.0.1:%u/v1/traces", (unsigned)port);
    c.timeout_ms = 10000; /* a request in flight outlives the shutdown deadline */
    c.schedule_delay_ms = 10;
    c.retry_budget_ms = 60000;
    c.shutdown_timeout_ms = 500;
    cbt_otlp_stats fin = CBT_STRUCT_INIT(cbt_otlp_stats);
    c.final_stats = &fin;
    cbt_otlp_exporter *e = start(&c);
    tu_pub_mp_requests("fin", 3);
    if (stalled)
        assert_true(hl_wait_requests(g_srv, 1, 5000)); /* the batch is in flight */
    else
        sleep_ms(300); /* a few refused connections */
    cbt_otlp_stats before = stats_of(e);
    assert_int_equal(before.spans_queued, 9);
    assert_int_equal(before.spans_dropped, 0);
    assert_int_equal(fin.spans_queued, 0); /* not filled yet */
    double t0 = mono_s();
    cbt_metrics m;
    tu_stop_final(&m);
    double took = mono_s() - t0;
    print_message("%s: cbt_shutdown_final %.3f s; final: %llu queued, %llu exported, %llu "
                  "dropped, %llu retries; sink_spans_lost %llu\n",
                  stalled ? "stalled" : "closed", took, (unsigned long long)fin.spans_queued,
                  (unsigned long long)fin.spans_exported, (unsigned long long)fin.spans_dropped,
                  (unsigned long long)fin.retries, (unsigned long long)m.sink_spans_lost);
    assert_int_equal(fin.version, CBT_OTLP_STATS_VERSION);
    assert_int_equal(fin.size, sizeof fin);
    assert_int_equal(fin.spans_queued, 9);
    assert_int_equal(fin.spans_exported, 0);
    assert_int_equal(fin.spans_dropped, 9);
    assert_int_equal(m.spans_ended, 9);
    assert_int_equal(m.sink_spans_lost, 9);
    if (took > (c.shutdown_timeout_ms + SHUTDOWN_SLACK_MS) / 1000.0)
        fail_msg("cbt_shutdown_final took %.3f s (bound %u ms + %u ms)", took,
                 c.shutdown_timeout_ms, SHUTDOWN_SLACK_MS);
}

static void final_stats_collector_stalled(void **state)
{
    (void)state;
    final_figures_after(1);
}

static void final_stats_collector_closed(void **state)
{
    (void)state;
    final_figures_after(0);
}

/* A long queue at the deadline: a stalled collector holds the first batch,
 * and 99999 spans (max_queue 131072) wait behind it in batches of one. When
 * the shutdown deadline passes during the final flush, the thread drops the
 * whole rest of the queue at once, without encoding a batch it may no longer
 * send, so that flush returns with the loss counted: the sink_spans_lost of
 * cbt_shutdown_final is already final_stats.spans_dropped (and spans ended -
 * exported). Encoding them one at a time until post() refused each (about
 * 20 us a span here: 2 s) outlasted the flush's 0.5 s grace, and destroy then
 * dropped the rest into final_stats only. */
#define LONG_Q_REQUESTS 33333
#define LONG_Q_SPANS (3u * LONG_Q_REQUESTS)
static void final_flush_drops_long_queue(void **state)
{
    (void)state;
    hl_step st;
    memset(&st, 0, sizeof st);
    st.action = HL_STALL;
    st.times = 1000;
    hl_script(g_srv, &st, 1);
    cbt_otlp_config c;
    test_config(&c);
    c.timeout_ms = 60000; /* the stalled request outlives the shutdown deadline */
    c.schedule_delay_ms = 10;
    c.retry_budget_ms = 60000;
    c.shutdown_timeout_ms = 300;
    c.max_batch = 1; /* a batch (an encode, a gzip) for each span */
    c.gzip = 1;
    c.max_queue = 131072;
    cbt_otlp_stats fin = CBT_STRUCT_INIT(cbt_otlp_stats);
    c.final_stats = &fin;
    cbt_otlp_exporter *e = start(&c);
    /* in steps the harvester keeps up with (a cbt_flush would wait on the
     * stalled exporter), so no lane overflows */
    double t0 = mono_s();
    for (uint32_t i = 0; i < LONG_Q_REQUESTS; i += 1000) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "long%u", i);
        uint32_t n = LONG_Q_REQUESTS - i < 1000 ? LONG_Q_REQUESTS - i : 1000;
        tu_pub_mp_requests(prefix, (int)n);
        while (stats_of(e).spans_queued < 3u * (i + n) && mono_s() - t0 < 60.0)
            sleep_ms(1);
    }
    assert_true(hl_wait_requests(g_srv, 1, 5000)); /* the first batch is in flight */
    cbt_otlp_stats before = stats_of(e);
    assert_int_equal(before.spans_queued, LONG_Q_SPANS);
    assert_int_equal(before.spans_dropped, 0);
    t0 = mono_s();
    cbt_metrics m;
    tu_stop_final(&m);
    double took = mono_s() - t0;
    print_message("%u spans queued behind a stalled batch: cbt_shutdown_final %.3f s; "
                  "final: %llu exported, %llu dropped; sink_spans_lost %llu\n",
                  LONG_Q_SPANS, took, (unsigned long long)fin.spans_exported,
                  (unsigned long long)fin.spans_dropped, (unsigned long long)m.sink_spans_lost);
    assert_int_equal(m.spans_ended, LONG_Q_SPANS);
    assert_int_equal(fin.spans_queued, LONG_Q_SPANS);
    assert_int_equal(fin.spans_exported, 0);
    assert_int_equal(fin.spans_dropped, LONG_Q_SPANS);
    assert_int_equal(m.sink_spans_lost, fin.spans_dropped);
    assert_int_equal(m.sink_spans_lost, m.spans_ended - fin.spans_exported);
    if (took > (c.shutdown_timeout_ms + SHUTDOWN_SLACK_MS) / 1000.0)
        fail_msg("cbt_shutdown_final took %.3f s (bound %u ms + %u ms)", took,
                 c.shutdown_timeout_ms, SHUTDOWN_SLACK_MS);
}

/* A connection closed without an answer is a connection failure: retried. */
static void closed_connection_retried(void **state)
{
    (void)state;
    hl_step st;
    memset(&st, 0, sizeof st);
    st.action = HL_CLOSE;
    st.times = 1;
    hl_script(g_srv, &st, 1);
    cbt_otlp_config c;
    test_config(&c);
    cbt_otlp_exporter *e = start(&c);
    tu_pub_mp_requests("cl", 2);
    tu_flush();
    cbt_otlp_stats s = stats_of(e);
    assert_int_equal(s.spans_exported, 6);
    assert_true(s.retries >= 1);
    assert_int_equal(hl_request_count(g_srv), 2);
    assert_int_equal(hl_connection_count(g_srv), 2);
    tu_stop();
}

/* A request that times out (CURLOPT_TIMEOUT_MS) is retried on a new connection. */
static void timeout_retried(void **state)
{
    (void)state;
    hl_step st;
    memset(&st, 0, sizeof st);
    st.action = HL_STALL;
    st.times = 1;
    hl_script(g_srv, &st, 1);
    cbt_otlp_config c;
    test_config(&c);
    c.timeout_ms = 300;
    cbt_otlp_exporter *e = start(&c);
    tu_pub_mp_requests("to", 1);
    for (int i = 0; i < 20 && stats_of(e).spans_exported < 3; i++) {
        assert_int_equal(cbt_flush(5000), CBT_OK); /* each flush waits up to 300 ms */
    }
    cbt_otlp_stats s = stats_of(e);
    assert_int_equal(s.spans_exported, 3);
    assert_true(s.retries >= 1);
    assert_int_equal(hl_request_count(g_srv), 2);
    assert_int_equal(hl_connection_count(g_srv), 2);
    tu_stop();
}

/* ---- (e) collector down, (f) collector stalls ---------------------------------------------- */

#define FLOOD_EVENTS 100000
#define FLOOD_SESSIONS 512

/* Publish FLOOD_EVENTS request start/end events; returns the seconds spent
 * in cbt_publish. A full lane drops (CBT_ERR_FULL): that is allowed. */
static double flood(void)
{
    static cbt_event evs[2 * FLOOD_SESSIONS];
    for (int i = 0; i < FLOOD_SESSIONS; i++) {
        char sid[32];
        snprintf(sid, sizeof sid, "flood-%d", i);
        assert_int_equal(cbt_event_init(&evs[2 * i], CBT_EV_MP_REQUEST_START, sid), CBT_OK);
        assert_int_equal(cbt_event_init(&evs[2 * i + 1], CBT_EV_MP_REQUEST_END, sid), CBT_OK);
    }
    double t0 = mono_s();
    for (int i = 0; i < FLOOD_EVENTS; i++) {
        cbt_status st = cbt_publish(&evs[i % (2 * FLOOD_SESSIONS)]);
        if (st != CBT_OK && st != CBT_ERR_FULL)
            fail_msg("cbt_publish: %s", cbt_strerror(st));
        if ((i & 1023) == 1023)
            sleep_ms(0); /* let the harvester run on 2 cores */
    }
    return mono_s() - t0;
}

static void flood_config(cbt_otlp_config *c, uint16_t port, uint32_t timeout_ms)
{
    test_config(c);
    snprintf(c->endpoint, sizeof c->endpoint, "http://127.0.0.1:%u/v1/traces", (unsigned)port);
    c->max_queue = 64;
    c->max_batch = 16;
    c->timeout_ms = timeout_ms;
    c->schedule_delay_ms = 50;
    c->retry_budget_ms = 60000; /* nothing gives up during the test */
    c->shutdown_timeout_ms = 1000;
}

static void collector_down(void **state)
{
    (void)state;
    cbt_otlp_config c;
    flood_config(&c, hl_closed_port(), 500);
    cbt_otlp_exporter *e = start(&c);
    double took = flood();
    print_message("100k publishes, collector down: %.3f s\n", took);
    if (took >= 1.0)
        fail_msg("100k publishes took %.3f s with the collector down", took);
    /* let everything reach the sink; our flush gives up after timeout_ms */
    assert_int_equal(cbt_flush(5000), CBT_OK);
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m), CBT_OK);
    cbt_otlp_stats s = stats_of(e);
    assert_true(m.spans_ended > c.max_queue);
    assert_int_equal(s.spans_queued, c.max_queue); /* full, and never more */
    assert_int_equal(s.spans_queued + s.spans_dropped, m.spans_ended);
    assert_true(s.spans_dropped > 0);
    assert_int_equal(s.spans_exported, 0);
    assert_int_equal(s.batches_sent, 0);
    double t0 = mono_s();
    tu_stop();
    double shut = mono_s() - t0;
    print_message("cbt_shutdown: %.3f s (spans offered %llu, queued %llu, dropped %llu)\n", shut,
                  (unsigned long long)(s.spans_queued + s.spans_dropped),
                  (unsigned long long)s.spans_queued, (unsigned long long)s.spans_dropped);
    if (shut > (c.shutdown_timeout_ms + SHUTDOWN_SLACK_MS) / 1000.0)
        fail_msg("cbt_shutdown took %.3f s (bound %u ms + %u ms)", shut, c.shutdown_timeout_ms,
                 SHUTDOWN_SLACK_MS);
}

static void collector_stalls(void **state)
{
    (void)state;
    hl_step st;
    memset(&st, 0, sizeof st);
    st.action = HL_STALL;
    st.times = 1000;
    hl_script(g_srv, &st, 1);
    cbt_otlp_config c;
    flood_config(&c, hl_port(g_srv), 10000); /* the transfer would wait 10 s */
    cbt_otlp_exporter *e = start(&c);
    double took = flood();
    print_message("100k publishes, collector stalled: %.3f s\n", took);
    if (took >= 1.0)
        fail_msg("100k publishes took %.3f s with the collector stalled", took);
    assert_true(hl_wait_requests(g_srv, 1, 3000));
    /* no cbt_flush: the exporter's flush would wait timeout_ms on the stalled POST */
    for (int i = 0; i < 100; i++) {
        cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
        assert_int_equal(cbt_metrics_get(&m), CBT_OK);
        if (m.queue_depth == 0)
            break;
        sleep_ms(10);
    }
    sleep_ms(100);
    cbt_otlp_stats s = stats_of(e);
    assert_true(s.spans_queued <= c.max_queue);
    assert_true(s.spans_dropped > 0);
    assert_int_equal(s.spans_exported, 0);
    double t0 = mono_s();
    tu_stop();
    double shut = mono_s() - t0;
    print_message("cbt_shutdown: %.3f s (spans offered %llu, queued %llu, dropped %llu)\n", shut,
                  (unsigned long long)(s.spans_queued + s.spans_dropped),
                  (unsigned long long)s.spans_queued, (unsigned long long)s.spans_dropped);
    if (shut > (c.shutdown_timeout_ms + SHUTDOWN_SLACK_MS) / 1000.0)
        fail_msg("cbt_shutdown took %.3f s (bound %u ms + %u ms)", shut, c.shutdown_timeout_ms,
                 SHUTDOWN_SLACK_MS);
}

/* ---- (g) keep-alive, (h) headers, (i) 400, partial success, disabled ------------------------ */

static void keep_alive(void **state)
{
    (void)state;
    cbt_otlp_config c;
    test_config(&c);
    c.max_batch = 3;
    c.schedule_delay_ms = 5000;
    cbt_otlp_exporter *e = start(&c);
    tu_pub_mp_requests("ka", 6);
    tu_flush();
    cbt_otlp_stats s = stats_of(e);
    assert_int_equal(s.spans_exported, 18);
    assert_true(s.batches_sent >= 6);
    assert_int_equal(hl_request_count(g_srv), s.batches_sent);
    assert_int_equal(hl_connection_count(g_srv), 1);
    for (uint32_t i = 0; i < hl_request_count(g_srv); i++) {
        hl_request r;
        assert_true(hl_request_get(g_srv, i, &r));
        assert_int_equal(r.conn_id, 1);
        hl_request_free(&r);
    }
    tu_stop();
}

static void config_headers_sent(void **state)
{
    (void)state;
    cbt_otlp_config c;
    test_config(&c);
    snprintf(c.headers[0].key, sizeof c.headers[0].key, "x-api-key");
    snprintf(c.headers[0].value, sizeof c.headers[0].value, "s3cr3t value");
    snprintf(c.headers[1].key, sizeof c.headers[1].key, "X-Tenant");
    snprintf(c.headers[1].value, sizeof c.headers[1].value, "acme");
    c.n_headers = 2;
    start(&c);
    tu_pub_mp_requests("h", 1);
    tu_flush();
    assert_true(hl_request_count(g_srv) >= 1);
    hl_request r;
    assert_true(hl_request_get(g_srv, 0, &r));
    assert_non_null(hl_header_get(&r, "x-api-key"));
    assert_string_equal(hl_header_get(&r, "X-API-KEY"), "s3cr3t value");
    assert_string_equal(hl_header_get(&r, "x-tenant"), "acme");
    assert_null(hl_header_get(&r, "Expect"));
    hl_request_free(&r);
    tu_stop();

    /* a header value with CR/LF is refused at create */
    cbt_otlp_config bad;
    test_config(&bad);
    snprintf(bad.headers[0].key, sizeof bad.headers[0].key, "x-evil");
    snprintf(bad.headers[0].value, sizeof bad.headers[0].value, "a\r\nInjected: yes");
    bad.n_headers = 1;
    cbt_otlp_exporter *e = NULL;
    cbt_sink sink;
    assert_int_equal(cbt_otlp_exporter_create(&bad, &e, &sink), CBT_ERR_INVAL);
    assert_null(e);
}

static void status_400_not_retried(void **state)
{
    (void)state;
    hl_step st;
    memset(&st, 0, sizeof st);
    st.status = 400;
    st.times = 1;
    hl_script(g_srv, &st, 1);
    cbt_otlp_config c;
    test_config(&c);
    cbt_otlp_exporter *e = start(&c);
    tu_pub_mp_requests("bad", 2);
    tu_flush();
    cbt_otlp_stats s = stats_of(e);
    assert_int_equal(hl_request_count(g_srv), 1);
    assert_int_equal(s.retries, 0);
    assert_int_equal(s.batches_failed, 1);
    assert_int_equal(s.batches_sent, 0);
    assert_int_equal(s.spans_dropped, 6);
    assert_int_equal(s.spans_exported, 0);
    /* the exporter carries on with the next batch */
    tu_pub_mp_requests("good", 1);
    tu_flush();
    s = stats_of(e);
    assert_int_equal(s.spans_exported, 3);
    assert_int_equal(s.batches_sent, 1);
    assert_int_equal(hl_request_count(g_srv), 2);
    tu_stop();
}

static void partial_success_counted(void **state)
{
    (void)state;
    Opentelemetry__Proto__Collector__Trace__V1__ExportTracePartialSuccess ps =
        OPENTELEMETRY__PROTO__COLLECTOR__TRACE__V1__EXPORT_TRACE_PARTIAL_SUCCESS__INIT;
    Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceResponse resp =
        OPENTELEMETRY__PROTO__COLLECTOR__TRACE__V1__EXPORT_TRACE_SERVICE_RESPONSE__INIT;
    ps.rejected_spans = 2;
    ps.error_message = (char *)"two spans were too old";
    resp.partial_success = &ps;
    hl_step st;
    memset(&st, 0, sizeof st);
    st.status = 200;
    st.times = 1;
    st.body_len = opentelemetry__proto__collector__trace__v1__export_trace_service_response__get_packed_size(&resp);
    assert_true(st.body_len <= sizeof st.body);
    opentelemetry__proto__collector__trace__v1__export_trace_service_response__pack(&resp, st.body);
    hl_script(g_srv, &st, 1);
    cbt_otlp_config c;
    test_config(&c);
    cbt_otlp_exporter *e = start(&c);
    tu_pub_mp_requests("ps", 2);
    tu_flush();
    cbt_otlp_stats s = stats_of(e);
    assert_int_equal(s.spans_exported, 4);
    assert_int_equal(s.spans_dropped, 2);
    assert_int_equal(s.spans_rejected, 2);
    assert_int_equal(s.batches_sent, 1);
    assert_int_equal(s.retries, 0);
    tu_stop();
}

/* The same over OTLP/JSON: rejectedSpans is an int64, a string in JSON. */
static void partial_success_json(void **state)
{
    (void)state;
    hl_step st;
    memset(&st, 0, sizeof st);
    st.status = 200;
    st.times = 1;
    snprintf(st.content_type, sizeof st.content_type, "application/json");
    st.body_len = (size_t)snprintf((char *)st.body, sizeof st.body,
                                   "{\"partialSuccess\":{\"rejectedSpans\":\"1\","
                                   "\"errorMessage\":\"one too big\"}}");
    hl_script(g_srv, &st, 1);
    cbt_otlp_config c;
    test_config(&c);
    c.protocol = CBT_OTLP_HTTP_JSON;
    cbt_otlp_exporter *e = start(&c);
    tu_pub_mp_requests("pj", 1);
    tu_flush();
    cbt_otlp_stats s = stats_of(e);
    assert_int_equal(s.spans_exported, 2);
    assert_int_equal(s.spans_dropped, 1);
    assert_int_equal(s.batches_sent, 1);
    tu_stop();
}

/* A batch whose request would pass max_message_bytes is halved until each
 * part fits (issue 21; OTLP/HTTP as gRPC): every span arrives, no request
 * is over the limit; a span alone over it is dropped and counted. */
static void oversized_batch_split(void **state)
{
    (void)state;
    cbt_otlp_config c;
    test_config(&c);
    c.max_message_bytes = 6000;
    cbt_otlp_exporter *e = start(&c);
    tu_pub_mp_requests("split", 40); /* 120 spans, about 25 KB in one batch */
    tu_flush();
    cbt_otlp_stats s = stats_of(e);
    assert_int_equal(s.spans_exported, 120);
    assert_int_equal(s.spans_dropped, 0);
    assert_true(s.batches_split >= 3);
    assert_int_equal(s.batches_sent, hl_request_count(g_srv));
    for (uint32_t i = 0; i < hl_request_count(g_srv); i++) {
        hl_request r;
        assert_true(hl_request_get(g_srv, i, &r));
        assert_true(r.body_len <= 6000);
        hl_request_free(&r);
    }
    decode_all();
    assert_int_equal(g_dec.n_spans, 120);
    decoded_free();
    tu_stop();

    uint32_t before = hl_request_count(g_srv);
    test_config(&c);
    c.max_message_bytes = 200; /* below any one span's request */
    e = start(&c);
    tu_pub_mp_requests("toolarge", 2);
    tu_flush();
    s = stats_of(e);
    assert_int_equal(s.spans_exported, 0);
    assert_int_equal(s.spans_dropped, 6);
    assert_int_equal(s.spans_too_large, 6);
    assert_int_equal(hl_request_count(g_srv), before); /* nothing sent */
    tu_stop();
}

/* ---- array attributes: a 128 k-token span against max_message_bytes ------------------- */

/* Sanitizer builds walk each element a few hundred times slower: there the
 * same cases run with an array ARR_SCALE times smaller and the sizes and
 * limits scaled alike (the same code paths; make test stays within CI's
 * time). The plain build sends the whole 128 k. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define ARR_SCALE 16u
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define ARR_SCALE 16u
#endif
#endif
#ifndef ARR_SCALE
#define ARR_SCALE 1u
#endif
#define BIG_IDS (131072 / ARR_SCALE) /* a 128 k-token prompt: about 0.7 MB of protobuf, 2.8 MB of JSON */

static cbt_event_type g_arr_type;
static cbt_name g_k_ids, g_k_words;

/* The subscriber: each "test.otlp.arrays" event becomes a span "arrays"
 * with the event's values (its arrays included). */
static cbt_status array_span(void *ctx, cbt_tracer *t, const cbt_event *ev)
{
    (void)ctx;
    if (ev->type != g_arr_type)
        return CBT_OK;
    cbt_span *s = cbt_span_start_for_event(t, tu_name("arrays"), CBT_SPAN_KIND_INTERNAL, NULL, ev);
    if (!s)
        return CBT_ERR_FULL;
    cbt_span_set_from_event(s, ev);
    cbt_span_end(t, s, ev->ts);
    return CBT_OK;
}

/* start(), then the subscriber; publish one array event of `n` ids (i * 3)
 * and a short string array, and one small MP request beside it. */
static cbt_otlp_exporter *start_arrays(const cbt_otlp_config *c, size_t n, const char *sid)
{
    cbt_otlp_exporter *e = start(c);
    assert_int_equal(cbt_event_type_register("test.otlp.arrays", &g_arr_type), CBT_OK);
    g_k_ids = tu_name("lmcache.input_ids");
    g_k_words = tu_name("words");
    cbt_subscriber sub;
    memset(&sub, 0, sizeof sub);
    sub.version = CBT_SUBSCRIBER_VERSION;
    sub.size = sizeof sub;
    sub.name = "test-otlp-arrays";
    sub.on_event = array_span;
    memset(sub.mask, 0xff, sizeof sub.mask);
    assert_int_equal(cbt_add_subscriber(&sub), CBT_OK);
    int64_t *ids = malloc(n * sizeof *ids);
    assert_non_null(ids);
    for (size_t i = 0; i < n; i++)
        ids[i] = (int64_t)i * 3;
    const char *const words[] = {"alpha", "", "gamma"};
    static cbt_event ev;
    assert_int_equal(cbt_event_init(&ev, g_arr_type, sid), CBT_OK);
    assert_int_equal(cbt_event_array_i64(&ev, g_k_ids, ids, n), CBT_OK);
    assert_int_equal(cbt_event_array_str(&ev, g_k_words, words, 3), CBT_OK);
    assert_int_equal(cbt_publish(&ev), CBT_OK);
    free(ids);
    tu_pub_mp_requests(sid, 1); /* 3 small spans in the same batch */
    tu_flush();
    return e;
}

/* The largest request the server recorded. */
static size_t largest_body(void)
{
    size_t big = 0;
    for (uint32_t i = 0; i < hl_request_count(g_srv); i++) {
        hl_request r;
        assert_true(hl_request_get(g_srv, i, &r));
        if (r.body_len > big)
            big = r.body_len;
        hl_request_free(&r);
    }
    return big;
}

/* Protobuf, the default max_message_bytes: the 128 k-element array arrives
 * whole, in order (AnyValue.array_value); JSON likewise (ints as strings).
 * Under a max_message_bytes the big span's request passes: that span alone
 * is dropped and counted (spans_too_large), its batch's small spans go out. */
static void array_span_sizes(void **state)
{
    (void)state;
    cbt_otlp_config c;
    test_config(&c);
    cbt_otlp_exporter *e = start_arrays(&c, BIG_IDS, "arr-pb");
    cbt_otlp_stats s = stats_of(e);
    assert_int_equal(s.spans_exported, 4);
    assert_int_equal(s.spans_dropped, 0);
    size_t pb_size = largest_body();
    assert_true(pb_size > 600000 / ARR_SCALE && pb_size < 1000000 / ARR_SCALE);
    decode_all();
    const pb_span *sp = NULL;
    for (size_t i = 0; i < g_dec.n_spans; i++)
        if (strcmp(g_dec.spans[i]->name, "arrays") == 0)
            sp = g_dec.spans[i];
    assert_non_null(sp);
    const pb_kv *kv = pb_attr(sp, "lmcache.input_ids");
    assert_non_null(kv);
    assert_int_equal(kv->value->value_case,
                     OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_ARRAY_VALUE);
    assert_int_equal(kv->value->array_value->n_values, BIG_IDS);
    for (size_t i = 0; i < BIG_IDS; i++) {
        const Opentelemetry__Proto__Common__V1__AnyValue *v = kv->value->array_value->values[i];
        if (v->value_case != OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE ||
            v->int_value != (int64_t)i * 3)
            fail_msg("element %zu of lmcache.input_ids is not %zu", i, i * 3);
    }
    kv = pb_attr(sp, "words");
    assert_non_null(kv);
    assert_int_equal(kv->value->array_value->n_values, 3);
    assert_string_equal(kv->value->array_value->values[0]->string_value, "alpha");
    assert_string_equal(kv->value->array_value->values[1]->string_value, "");
    assert_string_equal(kv->value->array_value->values[2]->string_value, "gamma");
    decoded_free();
    tu_stop();

    /* JSON, the default limit: whole */
    uint32_t before = hl_request_count(g_srv);
    test_config(&c);
    c.protocol = CBT_OTLP_HTTP_JSON;
    e = start_arrays(&c, BIG_IDS, "arr-js");
    s = stats_of(e);
    assert_int_equal(s.spans_exported, 4);
    assert_int_equal(s.spans_dropped, 0);
    uint32_t n = hl_request_count(g_srv);
    assert_true(n > before);
    size_t ints = 0, js_size = 0;
    for (uint32_t i = before; i < n; i++) {
        hl_request r;
        assert_true(hl_request_get(g_srv, i, &r));
        char *body = strndup((const char *)r.body, r.body_len);
        assert_non_null(body);
        if (r.body_len > js_size)
            js_size = r.body_len;
        const char *p = strstr(body, "{\"key\":\"lmcache.input_ids\",\"value\":{\"arrayValue\":"
                                     "{\"values\":[{\"intValue\":\"0\"},{\"intValue\":\"3\"},");
        const char *end = p ? strstr(p, "]}}") : NULL; /* the array's end */
        for (; p && (p = strstr(p, "{\"intValue\":\"")) != NULL && p < end; p++)
            ints++;
        free(body);
        hl_request_free(&r);
    }
    assert_int_equal(ints, BIG_IDS);
    assert_true(js_size > 2000000 / ARR_SCALE && js_size < c.max_message_bytes);
    tu_stop();

    /* over the limit: the big span dropped and counted, the rest sent */
    before = hl_request_count(g_srv);
    test_config(&c);
    c.protocol = CBT_OTLP_HTTP_JSON;
    c.max_message_bytes = (1u << 20) / ARR_SCALE; /* protobuf's 0.7 MB would fit; JSON's 2.8 MB does not */
    e = start_arrays(&c, BIG_IDS, "arr-big");
    s = stats_of(e);
    assert_int_equal(s.spans_too_large, 1);
    assert_int_equal(s.spans_dropped, 1);
    assert_int_equal(s.spans_exported, 3);
    assert_true(hl_request_count(g_srv) > before);
    for (uint32_t i = before; i < hl_request_count(g_srv); i++) {
        hl_request r;
        assert_true(hl_request_get(g_srv, i, &r));
        assert_true(r.body_len <= c.max_message_bytes);
        hl_request_free(&r);
    }
    tu_stop();

    /* protobuf under the same limit: fits */
    test_config(&c);
    c.max_message_bytes = (1u << 20) / ARR_SCALE;
    e = start_arrays(&c, BIG_IDS, "arr-pb1");
    s = stats_of(e);
    assert_int_equal(s.spans_too_large, 0);
    assert_int_equal(s.spans_exported, 4);
    tu_stop();
}

static void disabled_sends_nothing(void **state)
{
    (void)state;
    cbt_otlp_config c;
    test_config(&c);
    c.disabled = 1;
    cbt_otlp_exporter *e = start(&c);
    tu_pub_mp_requests("off", 2);
    tu_flush();
    assert_int_equal(tu_count("request", NULL), 2);
    cbt_otlp_stats s = stats_of(e);
    assert_int_equal(s.spans_queued, 0);
    assert_int_equal(s.spans_dropped, 0);
    assert_int_equal(s.batches_sent, 0);
    tu_stop();
    assert_int_equal(hl_request_count(g_srv), 0);
}

static void bad_configs_refused(void **state)
{
    (void)state;
    cbt_otlp_exporter *e = NULL;
    cbt_sink sink;
    cbt_otlp_config c;
    assert_int_equal(cbt_otlp_exporter_create(NULL, &e, &sink), CBT_ERR_INVAL);
    test_config(&c);
    c.size = 1;
    assert_int_equal(cbt_otlp_exporter_create(&c, &e, &sink), CBT_ERR_VERSION);
    test_config(&c);
    snprintf(c.endpoint, sizeof c.endpoint, "localhost:4318");
    assert_int_equal(cbt_otlp_exporter_create(&c, &e, &sink), CBT_ERR_INVAL);
    test_config(&c);
    c.max_queue = 0;
    assert_int_equal(cbt_otlp_exporter_create(&c, &e, &sink), CBT_ERR_INVAL);
    test_config(&c);
    c.max_batch = c.max_queue + 1;
    assert_int_equal(cbt_otlp_exporter_create(&c, &e, &sink), CBT_ERR_INVAL);
    test_config(&c);
    c.timeout_ms = 0;
    assert_int_equal(cbt_otlp_exporter_create(&c, &e, &sink), CBT_ERR_INVAL);
    assert_null(e);
}

/* ---- (j) the environment ----------------------------------------------------------------------- */


static void env_endpoints(void **state)
{
    (void)state;
    cbt_otlp_config c;
    char *log;

    run_env(&ENV(.want = CBT_OK, .log_empty = 1), &c, &log);
    assert_string_equal(c.endpoint, "http://localhost:4318/v1/traces");
    assert_int_equal(c.protocol, CBT_OTLP_HTTP_PROTOBUF);
    assert_int_equal(c.timeout_ms, 10000);
    assert_int_equal(c.max_queue, 32768);
    assert_int_equal(c.max_batch, 512);
    assert_int_equal(c.schedule_delay_ms, 5000);
    assert_int_equal(c.retry_budget_ms, 30000);
    assert_int_equal(c.shutdown_timeout_ms, 5000);
    assert_int_equal(c.verify_tls, 1);
    assert_int_equal(c.gzip, 0);
    assert_int_equal(c.disabled, 0);
    assert_string_equal(c.resource.service_name, "cbt");
    free(log);

    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://col:4318"}}, .want = CBT_OK,
                 .log_empty = 1), &c, &log);
    assert_string_equal(c.endpoint, "http://col:4318/v1/traces");
    free(log);
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_ENDPOINT", "https://col.example:4318/base/"}},
                 .want = CBT_OK), &c, &log);
    assert_string_equal(c.endpoint, "https://col.example:4318/base/v1/traces");
    free(log);
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://col:4318/base"},
                         {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:9999/custom"}},
                 .want = CBT_OK), &c, &log);
    assert_string_equal(c.endpoint, "http://t:9999/custom"); /* as is, and it wins */
    free(log);
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_ENDPOINT", "col:4318"}}, .want = CBT_ERR_INVAL,
                 .log_has = {"OTEL_EXPORTER_OTLP_ENDPOINT"}), &c, &log);
    assert_string_equal(c.endpoint, "http://localhost:4318/v1/traces");
    free(log);
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "ftp://col/v1/traces"}},
                 .want = CBT_ERR_INVAL, .log_has = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"}),
            &c, &log);
    free(log);
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://"}}, .want = CBT_ERR_INVAL),
            &c, &log);
    free(log);
    char longurl[1100];
    memset(longurl, 'a', sizeof longurl - 1);
    longurl[sizeof longurl - 1] = '\0';
    memcpy(longurl, "http://", 7);
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_ENDPOINT", longurl}}, .want = CBT_ERR_INVAL,
                 .log_has = {"OTEL_EXPORTER_OTLP_ENDPOINT", "longer"}), &c, &log);
    assert_string_equal(c.endpoint, "http://localhost:4318/v1/traces");
    free(log);
}

static void env_protocol_timeout_compression(void **state)
{
    (void)state;
    cbt_otlp_config c;
    char *log;
    /* grpc is supported now (issue 21): tests/test_otlp_grpc_unit.c has its cases */
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}}, .want = CBT_OK,
                 .log_empty = 1), &c, &log);
    assert_int_equal(c.protocol, CBT_OTLP_GRPC);
    free(log);
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/thrift"}},
                 .want = CBT_ERR_INVAL, .log_has = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"}),
            &c, &log);
    free(log);
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"}}, .want = CBT_OK,
                 .log_empty = 1), &c, &log);
    assert_int_equal(c.protocol, CBT_OTLP_HTTP_JSON);
    free(log);
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"},
                         {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"}},
                 .want = CBT_OK), &c, &log);
    assert_int_equal(c.protocol, CBT_OTLP_HTTP_PROTOBUF);
    free(log);

    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_TIMEOUT", "2500"}}, .want = CBT_OK,
                 .log_empty = 1), &c, &log);
    assert_int_equal(c.timeout_ms, 2500);
    free(log);
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_TIMEOUT", "2500"},
                         {"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "700"}}, .want = CBT_OK),
            &c, &log);
    assert_int_equal(c.timeout_ms, 700);
    free(log);
    static const char *const bad_timeouts[] = {"abc", "-5", "10s", "99999999999", "0", "1.5"};
    for (size_t i = 0; i < sizeof bad_timeouts / sizeof bad_timeouts[0]; i++) {
        run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_TIMEOUT", bad_timeouts[i]}}, .want = CBT_OK,
                     .log_has = {"OTEL_EXPORTER_OTLP_TIMEOUT"}), &c, &log);
        assert_int_equal(c.timeout_ms, 10000);
        free(log);
    }
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_TIMEOUT", ""}}, .want = CBT_OK, .log_empty = 1),
            &c, &log); /* empty = unset */
    assert_int_equal(c.timeout_ms, 10000);
    free(log);

    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"}}, .want = CBT_OK,
                 .log_empty = 1), &c, &log);
    assert_int_equal(c.gzip, 1);
    free(log);
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"},
                         {"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "none"}}, .want = CBT_OK),
            &c, &log);
    assert_int_equal(c.gzip, 0);
    free(log);
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "zstd"}}, .want = CBT_OK,
                 .log_has = {"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION"}), &c, &log);
    assert_int_equal(c.gzip, 0);
    free(log);
}

static void env_headers(void **state)
{
    (void)state;
    cbt_otlp_config c;
    char *log;
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_HEADERS", "api-key=secret%20one, x-b = 2 "}},
                 .want = CBT_OK, .log_empty = 1), &c, &log);
    assert_int_equal(c.n_headers, 2);
    assert_string_equal(c.headers[0].key, "api-key");
    assert_string_equal(c.headers[0].value, "secret one");
    assert_string_equal(c.headers[1].key, "x-b");
    assert_string_equal(c.headers[1].value, "2");
    free(log);
    /* the _TRACES_ list replaces the generic one */
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_HEADERS", "a=1,b=2"},
                         {"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "c=3"}}, .want = CBT_OK),
            &c, &log);
    assert_int_equal(c.n_headers, 1);
    assert_string_equal(c.headers[0].key, "c");
    free(log);
    /* malformed entries: reported by position and key, values never shown */
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_HEADERS",
                          "good=fine,novaluetopsecret1,bad key=topsecret2,k2=%zztopsecret3,"
                          "k3=top%0asecret4"}},
                 .want = CBT_OK,
                 .log_has = {"OTEL_EXPORTER_OTLP_HEADERS", "entry 2", "entry 3"},
                 .log_lacks = {"topsecret1", "topsecret2", "topsecret3", "secret4"}), &c, &log);
    assert_int_equal(c.n_headers, 1);
    assert_string_equal(c.headers[0].key, "good");
    assert_non_null(strstr(log, "entry 4"));
    assert_non_null(strstr(log, "entry 5"));
    free(log);
    /* an over-long value: reported, skipped, not shown */
    char big[400], val[300];
    memset(val, 'Q', sizeof val - 1);
    val[sizeof val - 1] = '\0';
    snprintf(big, sizeof big, "k=%s", val);
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_TRACES_HEADERS", big}}, .want = CBT_OK,
                 .log_has = {"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "longer"},
                 .log_lacks = {"QQQQ"}), &c, &log);
    assert_int_equal(c.n_headers, 0);
    free(log);
}

static void env_resource_and_disabled(void **state)
{
    (void)state;
    cbt_otlp_config c;
    char *log;
    run_env(&ENV(.set = {{"OTEL_SERVICE_NAME", "svc"},
                         {"OTEL_RESOURCE_ATTRIBUTES",
                          "service.name=other,deployment.environment=prod%2Cblue,bad,=x,team=ml"}},
                 .want = CBT_OK, .log_has = {"OTEL_RESOURCE_ATTRIBUTES", "entry 3", "entry 4"}),
            &c, &log);
    assert_string_equal(c.resource.service_name, "svc");
    assert_int_equal(c.resource.n_extra, 2);
    assert_string_equal(c.resource.extra[0].key, "deployment.environment");
    assert_string_equal(c.resource.extra[0].value, "prod,blue");
    assert_string_equal(c.resource.extra[1].key, "team");
    assert_string_equal(c.resource.extra[1].value, "ml");
    free(log);
    run_env(&ENV(.set = {{"OTEL_RESOURCE_ATTRIBUTES", "service.name=from%20attrs"}},
                 .want = CBT_OK, .log_empty = 1), &c, &log);
    assert_string_equal(c.resource.service_name, "from attrs");
    free(log);
    char longname[300];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    run_env(&ENV(.set = {{"OTEL_SERVICE_NAME", longname}}, .want = CBT_OK,
                 .log_has = {"OTEL_SERVICE_NAME"}), &c, &log);
    assert_string_equal(c.resource.service_name, "cbt");
    free(log);

    run_env(&ENV(.set = {{"OTEL_SDK_DISABLED", "TRUE"}}, .want = CBT_OK, .log_empty = 1), &c,
            &log);
    assert_int_equal(c.disabled, 1);
    free(log);
    run_env(&ENV(.set = {{"OTEL_SDK_DISABLED", "false"}}, .want = CBT_OK, .log_empty = 1), &c,
            &log);
    assert_int_equal(c.disabled, 0);
    free(log);
    run_env(&ENV(.set = {{"OTEL_SDK_DISABLED", "yes"}}, .want = CBT_OK,
                 .log_has = {"OTEL_SDK_DISABLED"}), &c, &log);
    assert_int_equal(c.disabled, 0);
    free(log);
}

/* The environment drives a real exporter end to end. */
static void env_drives_exporter(void **state)
{
    (void)state;
    char url[128];
    hl_url(g_srv, "", url, sizeof url);
    clear_env();
    setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url, 1);
    setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20tok", 1);
    setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip", 1);
    setenv("OTEL_SERVICE_NAME", "from-env", 1);
    cbt_otlp_config c;
    cbt_otlp_config_default(&c);
    assert_int_equal(cbt_otlp_config_from_env(&c, NULL), CBT_OK);
    clear_env();
    c.timeout_ms = 3000;
    cbt_otlp_exporter *e = start(&c);
    tu_pub_mp_requests("env", 1);
    tu_flush();
    assert_int_equal(stats_of(e).spans_exported, 3);
    hl_request r;
    assert_true(hl_request_get(g_srv, 0, &r));
    assert_string_equal(r.path, "/v1/traces");
    assert_string_equal(hl_header_get(&r, "Authorization"), "Bearer tok");
    assert_true(r.gzip);
    hl_request_free(&r);
    decode_all();
    const Opentelemetry__Proto__Resource__V1__Resource *res = g_dec.req[0]->resource_spans[0]->resource;
    int saw = 0;
    for (size_t i = 0; i < res->n_attributes; i++)
        if (strcmp(res->attributes[i]->key, "service.name") == 0)
            saw = strcmp(res->attributes[i]->value->string_value, "from-env") == 0;
    assert_true(saw);
    decoded_free();
    tu_stop();
}

int main(void)
{
    /* loopback only: no proxy from the environment */
    unsetenv("http_proxy");
    unsetenv("HTTP_PROXY");
    unsetenv("https_proxy");
    unsetenv("HTTPS_PROXY");
    unsetenv("all_proxy");
    unsetenv("ALL_PROXY");
    setenv("no_proxy", "127.0.0.1,localhost", 1);
    if (getenv("CBT_TEST_FILTER")) /* one case while working on it */
        cmocka_set_test_filter(getenv("CBT_TEST_FILTER"));
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(proto_trees_arrive),
        T(gzip_body),
        T(json_body),
        T(retry_503_then_ok),
        T(retry_after_seconds),
        T(retry_after_http_date),
        T(retry_after_zero_no_storm),
        T(retry_after_past_date_no_storm),
        T(retry_after_longer_than_step),
        T(final_stats_collector_stalled),
        T(final_stats_collector_closed),
        T(final_flush_drops_long_queue),
        T(closed_connection_retried),
        T(timeout_retried),
        T(collector_down),
        T(collector_stalls),
        T(keep_alive),
        T(config_headers_sent),
        T(status_400_not_retried),
        T(partial_success_counted),
        T(partial_success_json),
        T(oversized_batch_split),
        T(array_span_sizes),
        T(disabled_sends_nothing),
        T(bad_configs_refused),
        T(env_endpoints),
        T(env_protocol_timeout_compression),
        T(env_headers),
        T(env_resource_and_disabled),
        T(env_drives_exporter),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
