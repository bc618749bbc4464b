/* tests/test_tree.c — the request-tree engine (host/builders/request_tree.c) through
 * both paths, with explicit timestamps so every time is known:
 *   CacheBlend TP=2 closes at the last CB_RETRIEVE_END, a sibling's
 *   CB_REQUEST_END is no error, the workers' spans never cross;
 *   a second retrieve pass after CB_REQUEST_END joins the closed root
 *   (late, counted), and past the grace window it is a request of its own;
 *   MP: END without START while deferred closes the root, under both
 *   root-end rules (option and CBT_MP_ROOT_END), and cbt.gpu_tail_ns;
 *   the timeout span; unmatched ENDs;
 *   no lockout: a burst of requests that never end, then well-formed ones,
 *   with the table full, the span pool exhausted, or the burst gone idle;
 *   children evicted when a session's slots are full or they go idle.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define T0 1700000000000000000ull
#define MS 1000000ull

/* Publish `type` for `sid` at T0 + t_ns with pairing key `pair` and int
 * values given as key, value pairs ending with a NULL key. */
static void at(cbt_event_type type, const char *sid, uint64_t t_ns, uint64_t pair, ...)
{
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, type, sid), CBT_OK);
    e.ts = T0 + t_ns;
    e.flags |= CBT_EVF_EXPLICIT_TS;
    e.pair = pair;
    va_list ap;
    va_start(ap, pair);
    for (const char *k; (k = va_arg(ap, const char *));)
        assert_int_equal(cbt_event_i64(&e, tu_name(k), va_arg(ap, int64_t)), CBT_OK);
    va_end(ap);
    assert_int_equal(cbt_publish(&e), CBT_OK);
}

static void start_with(uint32_t max_sessions, uint32_t span_pool, uint32_t idle_ms,
                       uint32_t grace_ms, uint32_t root_end, bool cb)
{
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    c.max_sessions = max_sessions ? max_sessions : 4096;
    c.span_pool = span_pool;
    c.session_idle_ms = idle_ms;
    c.late_grace_ms = grace_ms;
    c.mp_root_end = root_end;
    c.queue_capacity = 65536;
    tu_start(&c);
    if (cb) {
        cbt_subscriber sub;
        cbt_tree_options o = CBT_STRUCT_INIT(cbt_tree_options);
        o.max_sessions = max_sessions;
        o.idle_ms = idle_ms;
        o.grace_ms = grace_ms;
        assert_int_equal(cbt_cb_subscriber_create_opts(&o, &sub), CBT_OK);
        assert_int_equal(cbt_add_subscriber(&sub), CBT_OK);
    }
}

static cbt_cb_stats cb_stats(void)
{
    cbt_cb_stats st = CBT_STRUCT_INIT(cbt_cb_stats);
    assert_int_equal(cbt_cb_stats_get(NULL, &st), CBT_OK);
    return st;
}

static cbt_mp_stats mp_stats(void)
{
    cbt_mp_stats st = CBT_STRUCT_INIT(cbt_mp_stats);
    assert_int_equal(cbt_mp_stats_get(NULL, &st), CBT_OK);
    return st;
}

/* Spans ended incomplete by shutdown (no cbt.evicted reason). */
static uint32_t mp_stats_after_stop_incomplete(void)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < tu_span_count(); i++) {
        const cbt_span *s = tu_span(i);
        if ((s->flags & CBT_SPANF_INCOMPLETE) && !cbt_span_attr(s, CBT_N_EVICTED))
            n++;
    }
    return n;
}

/* A string attribute's value equals `want` (arena strings are length-counted). */
static void str_is(const cbt_span *s, const cbt_attr *a, const char *want)
{
    assert_non_null(a);
    assert_int_equal(a->type, CBT_META_STR);
    if (a->str_len != strlen(want) || memcmp(cbt_attr_str(s, a), want, a->str_len) != 0)
        fail_msg("'%.*s', want '%s'", (int)a->str_len, cbt_attr_str(s, a), want);
}

static void times(const cbt_span *s, uint64_t start, uint64_t end)
{
    if (s->start_ns != T0 + start || s->end_ns != T0 + end)
        fail_msg("%s: [%llu, %llu], want [%llu, %llu] (ns after T0)", cbt_name_str(s->name),
                 (unsigned long long)(s->start_ns - T0), (unsigned long long)(s->end_ns - T0),
                 (unsigned long long)start, (unsigned long long)end);
}

/* ---- CacheBlend ------------------------------------------------------------------ */

/* Two TP workers share the request id; each submits, retrieves (pair = its
 * worker) and sends its own CB_REQUEST_END, as LMCache 0.5.6 does. */
static void cb_tp_closes_at_last_retrieve(void **state)
{
    (void)state;
    const char *sid = "tp2";
    start_with(0, 8192, 0, 0, 0, true);
    at(CBT_EV_CB_REQUEST_START, sid, 1 * MS, 0, NULL);
    at(CBT_EV_CB_RETRIEVE_SUBMITTED, sid, 2 * MS, 0, NULL);
    at(CBT_EV_CB_RETRIEVE_SUBMITTED, sid, 2 * MS, 0, NULL);
    at(CBT_EV_CB_RETRIEVE_START, sid, 5 * MS, 1, "worker_id", (int64_t)0, NULL);
    at(CBT_EV_CB_RETRIEVE_START, sid, 5 * MS + 200000, 2, "worker_id", (int64_t)1, NULL);
    at(CBT_EV_CB_RETRIEVE_END, sid, 6 * MS, 1, "worker_id", (int64_t)0, NULL);
    at(CBT_EV_CB_REQUEST_END, sid, 6 * MS + 100000, 0, NULL);
    at(CBT_EV_CB_RETRIEVE_END, sid, 7 * MS, 2, "worker_id", (int64_t)1, NULL);
    at(CBT_EV_CB_REQUEST_END, sid, 7 * MS + 100000, 0, NULL);
    tu_flush();
    const cbt_span *root = tu_need_span("cb.request", sid, 0);
    times(root, 1 * MS, 7 * MS);
    assert_int_equal(tu_attr_i64(root, "cbt.gpu_tail_ns"), 7 * MS - (6 * MS + 100000));
    assert_int_equal(tu_count("cb.retrieve", sid), 2);
    for (uint32_t i = 0; i < 2; i++) {
        const cbt_span *r = tu_need_span("cb.retrieve", sid, i);
        assert_true(tu_is_child_of(r, root));
        /* each worker's START met its own END */
        int64_t w = tu_attr_i64(r, "worker_id");
        if (w == 0)
            times(r, 5 * MS, 6 * MS);
        else
            times(r, 5 * MS + 200000, 7 * MS);
        assert_false(tu_has_attr(r, "cbt.late"));
    }
    cbt_cb_stats st = cb_stats();
    assert_int_equal(st.roots_deferred, 1);
    assert_int_equal(st.sibling_request_end, 1);
    assert_int_equal(st.duplicate_request_end, 0);
    assert_int_equal(st.sessions_open, 0);
    tu_stop();
}

/* vLLM's partial-then-full allocation: a second start_load_kv call after the
 * first call's CB_REQUEST_END closed the root. Within the grace window its
 * cb.retrieve and cb.scatter join the closed root's trace under it. */
static void cb_second_pass_joins_closed_root(void **state)
{
    (void)state;
    const char *sid = "pass2";
    start_with(0, 8192, 0, 0, 0, true);
    at(CBT_EV_CB_REQUEST_START, sid, 1 * MS, 0, NULL);
    at(CBT_EV_CB_RETRIEVE_NOOP, sid, 4 * MS, 0, NULL);
    at(CBT_EV_CB_REQUEST_END, sid, 4 * MS + 100000, 0, NULL);
    at(CBT_EV_CB_RETRIEVE_SUBMITTED, sid, 5 * MS, 0, NULL);
    at(CBT_EV_CB_RETRIEVE_START, sid, 6 * MS, 0, NULL);
    at(CBT_EV_CB_SCATTER_START, sid, 6 * MS + 100000, 0, "scattered_tokens", (int64_t)512, NULL);
    at(CBT_EV_CB_SCATTER_END, sid, 6 * MS + 500000, 0, NULL);
    at(CBT_EV_CB_RETRIEVE_END, sid, 7 * MS, 0, NULL);
    at(CBT_EV_CB_REQUEST_END, sid, 7 * MS + 100000, 0, NULL);
    tu_flush();
    const cbt_span *root = tu_need_span("cb.request", sid, 0);
    times(root, 1 * MS, 4 * MS + 100000);
    const cbt_span *rt = tu_need_span("cb.retrieve", sid, 0);
    const cbt_span *sc = tu_need_span("cb.scatter", sid, 0);
    assert_true(tu_is_child_of(rt, root));
    assert_true(tu_is_child_of(sc, rt));
    assert_memory_equal(rt->ctx.trace_id, root->ctx.trace_id, 16);
    times(rt, 6 * MS, 7 * MS);
    const cbt_attr *late = cbt_span_attr(rt, CBT_N_LATE);
    assert_true(late && late->type == CBT_META_BOOL && late->v.b);
    assert_int_equal(tu_attr_i64(sc, "scattered_tokens"), 512);
    cbt_cb_stats st = cb_stats();
    assert_int_equal(st.late_children, 2); /* the retrieve and its scatter */
    assert_int_equal(st.sibling_request_end, 1);
    assert_int_equal(st.no_root, 0);
    assert_int_equal(st.sessions_open, 0);
    tu_stop();
}

/* Past the grace window the closed request is forgotten: a later retrieve of
 * the id is an orphan, a root of its own in the request's derived trace. */
static void cb_after_grace_is_orphan(void **state)
{
    (void)state;
    const char *sid = "pass2-late";
    start_with(0, 8192, 0, 100 /* ms */, 0, true);
    at(CBT_EV_CB_REQUEST_START, sid, 1 * MS, 0, NULL);
    at(CBT_EV_CB_REQUEST_END, sid, 2 * MS, 0, NULL);
    at(CBT_EV_CB_RETRIEVE_START, sid, 300 * MS, 0, NULL);
    at(CBT_EV_CB_RETRIEVE_END, sid, 301 * MS, 0, NULL);
    tu_flush();
    const cbt_span *root = tu_need_span("cb.request", sid, 0);
    const cbt_span *rt = tu_need_span("cb.retrieve", sid, 0);
    assert_true(tu_is_root(rt));
    assert_false(tu_has_attr(rt, "cbt.late"));
    assert_memory_equal(rt->ctx.trace_id, root->ctx.trace_id, 16); /* both derived from the id */
    cbt_cb_stats st = cb_stats();
    assert_int_equal(st.late_children, 0);
    assert_int_equal(st.no_root, 1);
    tu_stop();
}

/* ---- MP ----------------------------------------------------------------------------- */

/* REQUEST_END while a store is pending; the store's END arrives without its
 * START (the START was lost upstream): it still retires the SUBMITTED. */
static void mp_end_without_start_while_deferred(uint32_t root_end, uint64_t want_end)
{
    const char *sid = "mp-nostart";
    start_with(0, 8192, 0, 0, root_end, false);
    at(CBT_EV_MP_REQUEST_START, sid, 1 * MS, 0, NULL);
    at(CBT_EV_MP_STORE_SUBMITTED, sid, 2 * MS, 0, NULL);
    at(CBT_EV_MP_REQUEST_END, sid, 3 * MS, 0, NULL);
    tu_flush();
    assert_int_equal(tu_count("request", sid), 0);
    at(CBT_EV_MP_STORE_END, sid, 4 * MS, 0, "stored_count", (int64_t)1, NULL);
    tu_flush();
    const cbt_span *root = tu_need_span("request", sid, 0);
    times(root, 1 * MS, want_end);
    assert_int_equal(tu_attr_i64(root, "cbt.gpu_tail_ns"), 1 * MS);
    cbt_mp_stats st = mp_stats();
    assert_int_equal(st.unmatched_end, 1);
    assert_int_equal(st.roots_deferred, 1);
    assert_int_equal(st.sessions_open, 0);
    tu_stop();
}

static void mp_end_without_start_request_rule(void **state)
{
    (void)state;
    mp_end_without_start_while_deferred(CBT_ROOT_END_REQUEST, 3 * MS);
}

static void mp_end_without_start_transfer_rule(void **state)
{
    (void)state;
    mp_end_without_start_while_deferred(CBT_ROOT_END_TRANSFER, 4 * MS);
}

/* The environment picks the rule when the config leaves it 0; a bad value
 * refuses to start, naming the variable. */
static void mp_root_end_from_environment(void **state)
{
    (void)state;
    setenv("CBT_MP_ROOT_END", "transfer_end", 1);
    mp_end_without_start_while_deferred(0, 4 * MS);
    setenv("CBT_MP_ROOT_END", "request_end", 1);
    mp_end_without_start_while_deferred(0, 3 * MS);
    setenv("CBT_MP_ROOT_END", "sometimes", 1);
    cbt_config c = cbt_config_default();
    assert_int_equal(cbt_init(&c), CBT_ERR_INVAL);
    unsetenv("CBT_MP_ROOT_END");
    setenv("CBT_SESSION_IDLE_MS", "12x", 1);
    assert_int_equal(cbt_init(&c), CBT_ERR_INVAL);
    unsetenv("CBT_SESSION_IDLE_MS");
    cbt_subscriber sub;
    cbt_tree_options o = CBT_STRUCT_INIT(cbt_tree_options);
    o.root_end = 7;
    assert_int_equal(cbt_mp_subscriber_create_opts(&o, &sub), CBT_ERR_INVAL);
    o.root_end = 0;
    o.size = sizeof o + 8; /* from a newer header */
    assert_int_equal(cbt_cb_subscriber_create_opts(&o, &sub), CBT_ERR_VERSION);
}

/* TIMEOUT_RAISED: zero length, ERROR, under the open root; session-less: a
 * root of its own. */
static void mp_timeout_span(void **state)
{
    (void)state;
    const char *sid = "mp-to";
    start_with(0, 8192, 0, 0, 0, false);
    at(CBT_EV_MP_REQUEST_START, sid, 1 * MS, 0, NULL);
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, CBT_EV_TIMEOUT_RAISED, sid), CBT_OK);
    e.ts = T0 + 2 * MS;
    e.flags |= CBT_EVF_EXPLICIT_TS;
    assert_int_equal(cbt_event_str(&e, CBT_N_EXCEPTION_TYPE, "ShmTimeout"), CBT_OK);
    assert_int_equal(cbt_event_str(&e, CBT_N_MESSAGE, "waited 30 s"), CBT_OK);
    assert_int_equal(cbt_event_str(&e, CBT_N_STACKTRACE, "shm.py:212"), CBT_OK);
    assert_int_equal(cbt_publish(&e), CBT_OK);
    at(CBT_EV_MP_REQUEST_END, sid, 3 * MS, 0, NULL);
    at(CBT_EV_TIMEOUT_RAISED, NULL, 4 * MS, 0, NULL);
    tu_flush();
    const cbt_span *root = tu_need_span("request", sid, 0);
    const cbt_span *t1 = tu_need_span("timeout", sid, 0);
    assert_true(tu_is_child_of(t1, root));
    times(t1, 2 * MS, 2 * MS);
    assert_int_equal(t1->status, CBT_SPAN_STATUS_ERROR);
    /* the exception span event, OpenTelemetry's way */
    assert_int_equal(t1->n_events, 1);
    assert_int_equal(t1->events[0].name, CBT_N_EXCEPTION);
    assert_int_equal(t1->events[0].time_ns, T0 + 2 * MS);
    str_is(t1, cbt_span_event_attr(t1, 0, CBT_N_EXC_TYPE), "ShmTimeout");
    str_is(t1, cbt_span_event_attr(t1, 0, CBT_N_EXC_MESSAGE), "waited 30 s");
    str_is(t1, cbt_span_event_attr(t1, 0, CBT_N_EXC_STACKTRACE), "shm.py:212");
    assert_int_equal(tu_count("timeout", NULL), 2);
    const cbt_span *t2 = tu_find("timeout", NULL, 1);
    if (tu_is_child_of(t2, root))
        t2 = tu_find("timeout", NULL, 0);
    assert_true(tu_is_root(t2));
    /* no type sent: TimeoutError, as LMCache defaults it */
    str_is(t2, cbt_span_event_attr(t2, 0, CBT_N_EXC_TYPE), "TimeoutError");
    assert_int_equal(mp_stats().timeout_spans, 2);
    tu_stop();
}

/* LMCache 0.5.6's 12-value CB_LOOKUP_END and a 40-byte model name reach the
 * spans whole: every hit attribute on the root, typed, the rest on cb.lookup. */
static void cb_lookup_end_as_lmcache_sends_it(void **state)
{
    (void)state;
    const char *sid = "cmpl-3f7c1d2e9a8b4c5d6e7f8091a2b3c4d5-0";
    static const char model[] = "meta-llama/Llama-3.1-70B-Instruct-FP8-kv"; /* 40 bytes */
    start_with(0, 8192, 0, 0, 0, true);
    at(CBT_EV_CB_REQUEST_START, sid, 1 * MS, 0, NULL);
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, CBT_EV_CB_LOOKUP_START, sid), CBT_OK);
    e.ts = T0 + 2 * MS;
    e.flags |= CBT_EVF_EXPLICIT_TS;
    assert_int_equal(cbt_event_str(&e, tu_name("model_name"), model), CBT_OK);
    assert_int_equal(cbt_publish(&e), CBT_OK);
    at(CBT_EV_CB_LOOKUP_END, sid, 3 * MS, 0, "num_tokens", (int64_t)3840, "fingerprint_hits",
       (int64_t)3, "prefix_hits", (int64_t)5, "prefix_chunks", (int64_t)5, "storage_hits",
       (int64_t)2, "stale_chunks", (int64_t)1, "prefix_hit_tokens", (int64_t)1280,
       "segmented_prefix_hit_tokens", (int64_t)118, "non_prefix_hit_tokens", (int64_t)256,
       "hit_tokens", (int64_t)1654, "requested_tokens", (int64_t)3840, NULL);
    at(CBT_EV_CB_REQUEST_END, sid, 4 * MS, 0, NULL);
    tu_flush();
    const cbt_span *root = tu_need_span("cb.request", sid, 0);
    const cbt_span *lk = tu_need_span("cb.lookup", sid, 0);
    str_is(lk, cbt_span_attr(lk, tu_name("model_name")), model);
    assert_int_equal(tu_attr_i64(lk, "num_tokens"), 3840);
    assert_int_equal(tu_attr_i64(root, "hit_tokens"), 1654); /* the event's, as sent */
    assert_int_equal(tu_attr_i64(root, "requested_tokens"), 3840);
    assert_int_equal(tu_attr_i64(root, "segmented_prefix_hit_tokens"), 118);
    assert_true(tu_attr_f64(root, "hit_rate") == 1654.0 / 3840.0);
    assert_true(tu_attr_f64(root, "prefix_hit_rate") == 1280.0 / 3840.0);
    assert_true(tu_attr_f64(root, "segmented_prefix_hit_rate") == 118.0 / 3840.0);
    assert_true(tu_attr_f64(root, "non_prefix_hit_rate") == 256.0 / 3840.0);
    assert_int_equal(tu_attr_i64(root, "prefix_hits"), 5);
    assert_int_equal(root->attrs_dropped, 0);
    tu_stop();
}

/* A store's phase samples (one event each, then the batch end) become
 * transfer.kernel_interval and transfer.staging under its mp.store:
 * LMCache's verified case (docs/lmcache-0.5.6.md §2.4). */
static void mp_transfer_phase_spans(void **state)
{
    (void)state;
    const char *sid = "cmpl-xfer";
    const char *tk = "cmpl-xfer#0";
    start_with(0, 8192, 0, 0, CBT_ROOT_END_TRANSFER, false);
    at(CBT_EV_MP_REQUEST_START, sid, 1 * MS, 0, NULL);
    at(CBT_EV_MP_STORE_SUBMITTED, sid, 2 * MS, 0, NULL);
    cbt_event e;
    cbt_event_type types[2] = {CBT_EV_MP_STORE_START, CBT_EV_MP_STORE_END};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(cbt_event_init(&e, types[i], sid), CBT_OK);
        e.ts = T0 + (3 + (uint64_t)i) * MS;
        e.flags |= CBT_EVF_EXPLICIT_TS;
        assert_int_equal(cbt_event_str(&e, CBT_N_TRANSFER_KEY, tk), CBT_OK);
        assert_int_equal(cbt_publish(&e), CBT_OK);
    }
    /* (phase, elapsed ms, nbytes, start s, end s): two kernel sections and
     * one staging section of a D2H transfer */
    static const struct { int64_t phase; double ms; int64_t nbytes; double t0, t1; } smp[] = {
        {0, 500.0, 0, 2.10, 2.60}, {0, 250.0, 0, 2.60, 2.85}, {1, 1000.0, 4000000000, 2.90, 3.90},
    };
    for (int i = 0; i < 3; i++) {
        assert_int_equal(cbt_event_init(&e, CBT_EV_MP_TRANSFER_PHASE_SAMPLES, NULL), CBT_OK);
        e.ts = T0 + 5 * MS;
        e.flags |= CBT_EVF_EXPLICIT_TS;
        assert_int_equal(cbt_event_i64(&e, CBT_N_PHASE, smp[i].phase), CBT_OK);
        assert_int_equal(cbt_event_i64(&e, CBT_N_DIRECTION, 1), CBT_OK);
        assert_int_equal(cbt_event_i64(&e, CBT_N_DEVICE_INDEX, 0), CBT_OK);
        assert_int_equal(cbt_event_f64(&e, CBT_N_ELAPSED_MS, smp[i].ms), CBT_OK);
        assert_int_equal(cbt_event_i64(&e, CBT_N_NBYTES, smp[i].nbytes), CBT_OK);
        assert_int_equal(cbt_event_str(&e, CBT_N_TRANSFER_KEY, tk), CBT_OK);
        assert_int_equal(cbt_event_f64(&e, CBT_N_START_TIME_S, smp[i].t0), CBT_OK);
        assert_int_equal(cbt_event_f64(&e, CBT_N_END_TIME_S, smp[i].t1), CBT_OK);
        assert_int_equal(cbt_publish(&e), CBT_OK);
    }
    assert_int_equal(cbt_event_init(&e, CBT_EV_MP_TRANSFER_PHASE_SAMPLES, NULL), CBT_OK);
    e.ts = T0 + 5 * MS;
    e.flags |= CBT_EVF_EXPLICIT_TS;
    assert_int_equal(cbt_event_str(&e, CBT_N_ENDED_TRANSFER_KEY, tk), CBT_OK);
    assert_int_equal(cbt_publish(&e), CBT_OK);
    at(CBT_EV_MP_REQUEST_END, sid, 6 * MS, 0, NULL);
    tu_flush();
    const cbt_span *st = tu_need_span("mp.store", sid, 0);
    const cbt_span *k = tu_need_span("transfer.kernel_interval", sid, 0);
    const cbt_span *g = tu_need_span("transfer.staging", sid, 0);
    assert_true(tu_is_child_of(k, st));
    assert_true(tu_is_child_of(g, st));
    assert_int_equal(k->start_ns, (uint64_t)(2.10 * 1e9));
    assert_int_equal(k->end_ns, (uint64_t)(2.10 * 1e9) + 750000000ull);
    assert_int_equal(g->start_ns, k->end_ns);
    assert_int_equal(g->end_ns, g->start_ns + 1000000000ull);
    assert_int_equal(tu_attr_i64(k, "num_steps"), 2);
    assert_true(tu_attr_f64(g, "throughput_GB_per_second") == 4.0);
    assert_int_equal(mp_stats().transfer_spans, 2);
    tu_stop();
}

/* ---- no lockout ------------------------------------------------------------------ */

/* A burst of `burst` requests that start and never end, then `good`
 * well-formed ones, 1 us apart. Every well-formed one must be traced. */
static void burst_then_good(uint32_t burst, uint32_t good, uint64_t good_at)
{
    char sid[32];
    uint64_t t = 0;
    for (uint32_t i = 0; i < burst; i++) {
        snprintf(sid, sizeof sid, "stuck-%u", i);
        at(CBT_EV_MP_REQUEST_START, sid, t, 0, NULL);
        at(CBT_EV_MP_STORE_SUBMITTED, sid, t + 1, 0, NULL);
        at(CBT_EV_MP_STORE_START, sid, t + 2, 0, NULL);
        t += 1000;
        if (i % 512 == 511)
            tu_flush(); /* keep the queue from overflowing */
    }
    t = good_at > t ? good_at : t;
    for (uint32_t i = 0; i < good; i++) {
        snprintf(sid, sizeof sid, "good-%u", i);
        at(CBT_EV_MP_REQUEST_START, sid, t, 0, NULL);
        at(CBT_EV_MP_STORE_SUBMITTED, sid, t + 1, 0, NULL);
        at(CBT_EV_MP_STORE_START, sid, t + 2, 0, NULL);
        at(CBT_EV_MP_STORE_END, sid, t + 3, 0, NULL);
        at(CBT_EV_MP_REQUEST_END, sid, t + 4, 0, NULL);
        t += 1000;
        if (i % 512 == 511)
            tu_flush();
    }
    tu_flush();
}

static uint32_t complete_roots(const char *prefix)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < tu_span_count(); i++) {
        const cbt_span *s = tu_span(i);
        if (s->name != CBT_N_REQUEST || (s->flags & CBT_SPANF_INCOMPLETE))
            continue;
        const cbt_attr *a = cbt_span_attr(s, CBT_N_SESSION_ID);
        if (a && a->str_len >= strlen(prefix) &&
            strncmp(cbt_attr_str(s, a), prefix, strlen(prefix)) == 0)
            n++;
    }
    return n;
}

static uint32_t evicted_with(const char *why)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < tu_span_count(); i++) {
        const cbt_span *s = tu_span(i);
        const cbt_attr *a = cbt_span_attr(s, CBT_N_EVICTED);
        if (s->name == CBT_N_REQUEST && (s->flags & CBT_SPANF_INCOMPLETE) && a &&
            a->str_len == strlen(why) && memcmp(cbt_attr_str(s, a), why, a->str_len) == 0)
            n++;
    }
    return n;
}

/* The table (64 sessions) fills with requests that never end: each new one
 * evicts the oldest, ended incomplete and exported. */
static void lockout_table_full(void **state)
{
    (void)state;
    start_with(64, 8192, 0, 0, 0, false);
    burst_then_good(1000, 500, 0);
    assert_int_equal(complete_roots("good-"), 500);
    cbt_mp_stats st = mp_stats();
    /* 936 made room during the burst and one more for the first good one;
     * the good ones then take each other's closed slots, which ends nothing */
    assert_int_equal(st.evicted_full, 1000 - 64 + 1);
    assert_int_equal(evicted_with("table_full"), 1000 - 64 + 1);
    assert_int_equal(st.sessions_full, 0);
    assert_int_equal(st.evicted_idle, 0);
    tu_stop();
    /* the 63 stuck ones left end at shutdown, root and store each */
    assert_int_equal(mp_stats_after_stop_incomplete(), 2 * 63);
}

/* The span pool (256) fills first: the oldest stuck session is evicted to
 * free its spans. */
static void lockout_span_pool(void **state)
{
    (void)state;
    start_with(4096, 256, 0, 0, 0, false);
    burst_then_good(1000, 500, 0);
    assert_int_equal(complete_roots("good-"), 500);
    cbt_mp_stats st = mp_stats();
    assert_true(st.evicted_span_pool > 0);
    assert_int_equal(evicted_with("span_pool_full"), st.evicted_span_pool);
    assert_int_equal(st.evicted_full, 0);
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m), CBT_OK);
    assert_int_equal(m.spans_dropped, st.evicted_span_pool); /* each refusal evicted once */
    tu_stop();
}

/* The burst goes idle: 2 s later (event time) with a 1 s bound, every stuck
 * session is evicted as idle, exactly once, before the good ones start. */
static void lockout_idle(void **state)
{
    (void)state;
    start_with(4096, 8192, 1000, 0, 0, false);
    burst_then_good(300, 200, 2000 * MS);
    assert_int_equal(complete_roots("good-"), 200);
    cbt_mp_stats st = mp_stats();
    assert_int_equal(st.evicted_idle, 300);
    assert_int_equal(evicted_with("idle"), 300);
    assert_int_equal(tu_count("mp.store", NULL), 500); /* the stuck ones' stores too */
    assert_int_equal(st.sessions_open, 0);
    tu_stop();
}

/* Sessions that hold no span (only a SUBMITTED) free nothing when evicted:
 * an exhausted pool evicts one that holds spans, so the good request lives. */
static void span_pool_skips_spanless_sessions(void **state)
{
    (void)state;
    char sid[32];
    start_with(4096, 16, 0, 0, 0, false);
    for (int i = 0; i < 10; i++) {
        snprintf(sid, sizeof sid, "sub-only-%d", i);
        at(CBT_EV_MP_STORE_SUBMITTED, sid, (uint64_t)i, 0, NULL);
    }
    for (int i = 0; i < 16; i++) {
        snprintf(sid, sizeof sid, "stuck-%d", i);
        at(CBT_EV_MP_REQUEST_START, sid, 100 + (uint64_t)i, 0, NULL);
    }
    at(CBT_EV_MP_REQUEST_START, "good", 200, 0, NULL);
    at(CBT_EV_MP_REQUEST_END, "good", 300, 0, NULL);
    tu_flush();
    assert_int_equal(tu_count("request", "good"), 1);
    cbt_mp_stats st = mp_stats();
    assert_int_equal(st.evicted_span_pool, 1); /* one stuck root, not ten span-less sessions */
    assert_int_equal(st.request_end_unknown, 0);
    tu_stop();
}

/* One event stamped an hour ahead moves event time; a child opened after it
 * is aged from when the engine saw it, so it is not "idle" at birth. */
static void outlying_timestamp_evicts_nothing(void **state)
{
    (void)state;
    start_with(0, 8192, 1000, 0, 0, false);
    at(CBT_EV_MP_REQUEST_START, "ahead", 3600000 * MS, 0, NULL);
    at(CBT_EV_MP_REQUEST_START, "r", 1 * MS, 0, NULL);
    at(CBT_EV_MP_STORE_SUBMITTED, "r", 2 * MS, 0, NULL);
    at(CBT_EV_MP_STORE_START, "r", 2 * MS, 0, NULL);
    at(CBT_EV_MP_STORE_END, "r", 3 * MS, 0, NULL);
    at(CBT_EV_MP_REQUEST_END, "r", 4 * MS, 0, NULL);
    tu_flush();
    const cbt_span *st = tu_need_span("mp.store", "r", 0);
    assert_int_equal(st->flags & CBT_SPANF_INCOMPLETE, 0);
    times(st, 2 * MS, 3 * MS);
    assert_int_equal(mp_stats().children_evicted_idle, 0);
    tu_stop();
}

/* A session's child slots full: the oldest open child ends incomplete to
 * make room; an idle child ends on the session's next event. */
static void children_evicted(void **state)
{
    (void)state;
    const char *sid = "many";
    start_with(0, 8192, 1000, 0, 0, false);
    at(CBT_EV_MP_REQUEST_START, sid, 0, 0, NULL);
    for (uint64_t i = 0; i < 33; i++)
        at(CBT_EV_MP_STORE_START, sid, 1 + i, i, NULL);
    tu_flush();
    assert_int_equal(mp_stats().children_evicted_full, 1);
    const cbt_span *first = tu_need_span("mp.store", sid, 0);
    assert_true(first->flags & CBT_SPANF_INCOMPLETE);
    assert_int_equal(first->start_ns, T0 + 1);
    /* the session stays active (its events keep coming), its stores do not */
    at(CBT_EV_MP_RETRIEVE_SUBMITTED, sid, 600 * MS, 0, NULL);
    tu_flush();
    assert_int_equal(mp_stats().children_evicted_idle, 0);
    at(CBT_EV_MP_RETRIEVE_SUBMITTED, sid, 1200 * MS, 0, NULL);
    tu_flush();
    cbt_mp_stats st = mp_stats();
    assert_int_equal(st.children_evicted_idle, 32);
    assert_int_equal(st.evicted_idle, 0);
    assert_int_equal(tu_count("mp.store", sid), 33);
    assert_int_equal(tu_count("request", sid), 0); /* the request itself is still open */
    tu_stop();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(cb_tp_closes_at_last_retrieve, tu_teardown),
        cmocka_unit_test_teardown(cb_second_pass_joins_closed_root, tu_teardown),
        cmocka_unit_test_teardown(cb_after_grace_is_orphan, tu_teardown),
        cmocka_unit_test_teardown(mp_end_without_start_request_rule, tu_teardown),
        cmocka_unit_test_teardown(mp_end_without_start_transfer_rule, tu_teardown),
        cmocka_unit_test_teardown(mp_root_end_from_environment, tu_teardown),
        cmocka_unit_test_teardown(mp_timeout_span, tu_teardown),
        cmocka_unit_test_teardown(cb_lookup_end_as_lmcache_sends_it, tu_teardown),
        cmocka_unit_test_teardown(mp_transfer_phase_spans, tu_teardown),
        cmocka_unit_test_teardown(lockout_table_full, tu_teardown),
        cmocka_unit_test_teardown(lockout_span_pool, tu_teardown),
        cmocka_unit_test_teardown(lockout_idle, tu_teardown),
        cmocka_unit_test_teardown(children_evicted, tu_teardown),
        cmocka_unit_test_teardown(span_pool_skips_spanless_sessions, tu_teardown),
        cmocka_unit_test_teardown(outlying_timestamp_evicts_nothing, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
