/* tests/test_mp_scenarios.c — the MP subscriber (host/builders/mp_subscriber.c) against
 * the request-event-span seed: the root "request" span, its mp.* children, the
 * deferred close, hit-rate attributes, the registry, the seed's seven request
 * scenarios and its "Example 1" (an l1.read subscriber nesting under request).
 *
 * Every race is forced with gates on CPU streams, never with sleeps: a stream
 * is held at a gate while the CPU publishes REQUEST_END, tu_flush() waits until
 * REQUEST_END has been dispatched, and only then is the gate opened. A small
 * "tu_reached" work item tells the test thread that the stream has got past a
 * point (so a START mark is already on the bus before REQUEST_END is). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"

/* ---- helpers ------------------------------------------------------------------ */

static void assert_sid(const cbt_span *s, const char *sid)
{
    const cbt_attr *a = cbt_span_attr(s, CBT_N_SESSION_ID);
    assert_non_null(a);
    assert_int_equal(a->type, CBT_META_STR);
    assert_int_equal(a->str_len, strlen(sid));
    assert_memory_equal(cbt_attr_str(s, a), sid, a->str_len);
}

/* The one "request" span of `sid`: a SERVER root with these times. */
static const cbt_span *check_root(const char *sid, uint64_t start_ns, uint64_t end_ns)
{
    assert_int_equal(tu_count("request", sid), 1);
    const cbt_span *r = tu_need_span("request", sid, 0);
    assert_true(tu_is_root(r));
    assert_int_equal(r->kind, CBT_SPAN_KIND_SERVER);
    assert_sid(r, sid);
    assert_int_equal(r->start_ns, start_ns);
    assert_int_equal(r->end_ns, end_ns);
    assert_int_equal(r->flags & CBT_SPANF_INCOMPLETE, 0);
    return r;
}

/* The nth `name` span of `sid`: a child of `root` timed by its START/END events. */
static const cbt_span *check_child(const char *name, const char *sid, uint32_t nth,
                                   const cbt_span *root, cbt_event_type start_type,
                                   uint32_t start_nth, cbt_event_type end_type, uint32_t end_nth)
{
    const cbt_span *c = tu_need_span(name, sid, nth);
    assert_false(tu_is_root(c));
    assert_true(tu_is_child_of(c, root));
    assert_sid(c, sid);
    assert_int_equal(c->start_ns, tu_event_ts(start_type, sid, start_nth));
    assert_int_equal(c->end_ns, tu_event_ts(end_type, sid, end_nth));
    assert_int_equal(c->flags & CBT_SPANF_INCOMPLETE, 0);
    return c;
}

static cbt_mp_stats mp_stats(void)
{
    cbt_mp_stats st = CBT_STRUCT_INIT(cbt_mp_stats);
    memset(&st, 0xa5, sizeof st);
    assert_int_equal(cbt_mp_stats_get(NULL, &st), CBT_OK);
    return st;
}

static cbt_metrics metrics(void)
{
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    memset(&m, 0xa5, sizeof m);
    assert_int_equal(cbt_metrics_get(&m), CBT_OK);
    return m;
}

static void assert_no_open_sessions(void)
{
    assert_int_equal(mp_stats().sessions_open, 0);
}

static void assert_hit_attrs(const cbt_span *root, int64_t hit, int64_t req, double rate)
{
    assert_int_equal(tu_attr_i64(root, "hit_tokens"), hit);
    assert_int_equal(tu_attr_i64(root, "requested_tokens"), req);
    double got = tu_attr_f64(root, "hit_rate");
    if (got != rate)
        fail_msg("hit_rate %.17g, expected %.17g", got, rate);
}

static void assert_no_hit_attrs(const cbt_span *root)
{
    assert_false(tu_has_attr(root, "hit_tokens"));
    assert_false(tu_has_attr(root, "requested_tokens"));
    assert_false(tu_has_attr(root, "hit_rate"));
}

/* Publish on a stream with one int metadata value (k NULL: none). */
static void pub_on_i64(cbt_stream *s, cbt_event_type type, const char *sid, const char *k,
                       int64_t v)
{
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, type, sid), CBT_OK);
    if (k)
        assert_int_equal(cbt_event_i64(&e, tu_name(k), v), CBT_OK);
    assert_int_equal(cbt_publish_on_stream(s, &e), CBT_OK);
}

static cbt_stream *new_stream(void)
{
    cbt_stream *s = NULL;
    assert_int_equal(cbt_stream_cpu_create(0, &s), CBT_OK);
    assert_non_null(s);
    return s;
}

static cbt_event_type reg_type(const char *name)
{
    cbt_event_type ty = CBT_EV_INVALID;
    assert_int_equal(cbt_event_type_register(name, &ty), CBT_OK);
    assert_true(cbt_event_type_valid(ty));
    return ty;
}

/* ---- the original project's cases -------------------------------------------- */

/* No span exists before any event; REQUEST_START opens the root (still open, so
 * not yet in the sink); REQUEST_END closes it with both times exact. */
static void root_created_on_request_start(void **state)
{
    (void)state;
    const char *sid = "rs-1";
    tu_start(NULL);
    tu_flush();
    assert_int_equal(tu_span_count(), 0);
    assert_int_equal(metrics().spans_started, 0);
    assert_int_equal(mp_stats().roots_opened, 0);

    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_flush();
    cbt_mp_stats st = mp_stats();
    assert_int_equal(st.roots_opened, 1);
    assert_int_equal(st.roots_lazy, 0);
    assert_int_equal(st.roots_closed, 0);
    assert_int_equal(st.sessions_open, 1);
    assert_int_equal(metrics().spans_open, 1);
    assert_int_equal(tu_span_count(), 0); /* open spans are not in the sink */

    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    assert_int_equal(tu_span_count(), 1);
    check_root(sid, tu_event_ts(CBT_EV_MP_REQUEST_START, sid, 0), tu_event_ts(CBT_EV_MP_REQUEST_END, sid, 0));
    st = mp_stats();
    assert_int_equal(st.roots_closed, 1);
    assert_int_equal(st.roots_deferred, 0);
    assert_int_equal(metrics().spans_open, 0);
    assert_no_open_sessions();
    tu_stop();
}

/* No store or retrieve submitted: REQUEST_END closes the root at once. */
static void immediate_close_without_store(void **state)
{
    (void)state;
    const char *sid = "imm-1";
    tu_start(NULL);
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub_i64(CBT_EV_MP_LOOKUP_PREFETCH_START, sid, "num_tokens", 256, NULL, 0);
    tu_pub_i64(CBT_EV_MP_LOOKUP_PREFETCH_END, sid, "hit_tokens", 0, "requested_tokens", 256);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    const cbt_span *root = check_root(sid, tu_event_ts(CBT_EV_MP_REQUEST_START, sid, 0),
                                      tu_event_ts(CBT_EV_MP_REQUEST_END, sid, 0));
    check_child("mp.lookup_prefetch", sid, 0, root, CBT_EV_MP_LOOKUP_PREFETCH_START, 0,
                CBT_EV_MP_LOOKUP_PREFETCH_END, 0);
    assert_int_equal(tu_count("mp.store", sid), 0);
    assert_int_equal(tu_count("mp.retrieve", sid), 0);
    cbt_mp_stats st = mp_stats();
    assert_int_equal(st.roots_deferred, 0);
    assert_int_equal(st.roots_closed, 1);
    assert_no_open_sessions();
    tu_stop();
}

/* One store submitted; REQUEST_END arrives before the stream even starts it. */
static void deferred_until_one_store(void **state)
{
    (void)state;
    const char *sid = "def-1s";
    tu_start(NULL);
    cbt_stream *s = new_stream();
    tu_gate *g = tu_gate_new();

    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    tu_gate_enqueue(g, s);
    tu_pub_on(s, CBT_EV_MP_STORE_START, sid);
    tu_enqueue_sleep(s, 2000);
    pub_on_i64(s, CBT_EV_MP_STORE_END, sid, "stored_count", 3);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    assert_non_null(tu_event_find(CBT_EV_MP_REQUEST_END, sid, 0));
    assert_null(tu_event_find(CBT_EV_MP_STORE_START, sid, 0));
    assert_int_equal(tu_count("request", sid), 0);
    assert_int_equal(mp_stats().roots_deferred, 1);

    tu_gate_open(g);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    assert_true(tu_event_pos(CBT_EV_MP_REQUEST_END, sid, 0) < tu_event_pos(CBT_EV_MP_STORE_END, sid, 0));
    uint64_t end_ts = tu_event_ts(CBT_EV_MP_REQUEST_END, sid, 0);
    const cbt_span *root = check_root(sid, tu_event_ts(CBT_EV_MP_REQUEST_START, sid, 0), end_ts);
    const cbt_span *st = check_child("mp.store", sid, 0, root, CBT_EV_MP_STORE_START, 0,
                                     CBT_EV_MP_STORE_END, 0);
    assert_true(root->end_ns < st->end_ns); /* stamped at REQUEST_END, not STORE_END */
    assert_int_equal(tu_attr_i64(st, "stored_count"), 3);
    assert_int_equal(mp_stats().roots_closed, 1);
    assert_no_open_sessions();
    cbt_stream_destroy(s);
    tu_gate_free(g);
    tu_stop();
}

/* Two stores pending at REQUEST_END: the first END leaves the root open, the
 * second closes it. */
static void deferred_until_two_stores(void **state)
{
    (void)state;
    const char *sid = "def-2s";
    tu_start(NULL);
    cbt_stream *s = new_stream();
    tu_gate *g1 = tu_gate_new(), *g2 = tu_gate_new();
    tu_reached r0, r1;
    tu_reached_init(&r0);
    tu_reached_init(&r1);

    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    pub_on_i64(s, CBT_EV_MP_STORE_START, sid, "num_tokens", 100);
    pub_on_i64(s, CBT_EV_MP_STORE_START, sid, "num_tokens", 200);
    tu_reached_enqueue(&r0, s);
    tu_gate_enqueue(g1, s);
    tu_enqueue_sleep(s, 2000);
    pub_on_i64(s, CBT_EV_MP_STORE_END, sid, "stored_count", 1);
    tu_reached_enqueue(&r1, s);
    tu_gate_enqueue(g2, s);
    tu_enqueue_sleep(s, 2000);
    pub_on_i64(s, CBT_EV_MP_STORE_END, sid, "stored_count", 2);

    tu_reached_wait(&r0);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    assert_int_equal(tu_count("request", sid), 0);
    assert_int_equal(tu_count("mp.store", sid), 0);
    assert_int_equal(mp_stats().roots_deferred, 1);

    tu_gate_open(g1);
    tu_reached_wait(&r1);
    tu_flush();
    assert_int_equal(tu_count("mp.store", sid), 1);
    assert_int_equal(tu_count("request", sid), 0); /* one store still pending */
    assert_int_equal(mp_stats().roots_closed, 0);

    tu_gate_open(g2);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    uint32_t p_end = tu_event_pos(CBT_EV_MP_REQUEST_END, sid, 0);
    assert_true(tu_event_pos(CBT_EV_MP_STORE_START, sid, 1) < p_end);
    assert_true(p_end < tu_event_pos(CBT_EV_MP_STORE_END, sid, 0));
    const cbt_span *root = check_root(sid, tu_event_ts(CBT_EV_MP_REQUEST_START, sid, 0),
                                      tu_event_ts(CBT_EV_MP_REQUEST_END, sid, 0));
    /* same stream: first in, first out */
    const cbt_span *a = check_child("mp.store", sid, 0, root, CBT_EV_MP_STORE_START, 0,
                                    CBT_EV_MP_STORE_END, 0);
    const cbt_span *b = check_child("mp.store", sid, 1, root, CBT_EV_MP_STORE_START, 1,
                                    CBT_EV_MP_STORE_END, 1);
    assert_int_equal(tu_attr_i64(a, "num_tokens"), 100);
    assert_int_equal(tu_attr_i64(a, "stored_count"), 1);
    assert_int_equal(tu_attr_i64(b, "num_tokens"), 200);
    assert_int_equal(tu_attr_i64(b, "stored_count"), 2);
    assert_no_open_sessions();
    cbt_stream_destroy(s);
    tu_gate_free(g1);
    tu_gate_free(g2);
    tu_reached_fini(&r0);
    tu_reached_fini(&r1);
    tu_stop();
}

/* One retrieve pending at REQUEST_END. */
static void deferred_until_one_retrieve(void **state)
{
    (void)state;
    const char *sid = "def-1r";
    tu_start(NULL);
    cbt_stream *s = new_stream();
    tu_gate *g = tu_gate_new();
    tu_reached r;
    tu_reached_init(&r);

    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_RETRIEVE_SUBMITTED, sid);
    tu_pub_on(s, CBT_EV_MP_RETRIEVE_START, sid);
    tu_reached_enqueue(&r, s);
    tu_gate_enqueue(g, s);
    tu_enqueue_sleep(s, 2000);
    pub_on_i64(s, CBT_EV_MP_RETRIEVE_END, sid, "found_count", 9);
    tu_reached_wait(&r);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    assert_int_equal(tu_count("request", sid), 0);
    assert_int_equal(tu_count("mp.retrieve", sid), 0);
    assert_int_equal(mp_stats().roots_deferred, 1);

    tu_gate_open(g);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    assert_true(tu_event_pos(CBT_EV_MP_REQUEST_END, sid, 0) < tu_event_pos(CBT_EV_MP_RETRIEVE_END, sid, 0));
    const cbt_span *root = check_root(sid, tu_event_ts(CBT_EV_MP_REQUEST_START, sid, 0),
                                      tu_event_ts(CBT_EV_MP_REQUEST_END, sid, 0));
    const cbt_span *rt = check_child("mp.retrieve", sid, 0, root, CBT_EV_MP_RETRIEVE_START, 0,
                                     CBT_EV_MP_RETRIEVE_END, 0);
    assert_int_equal(tu_attr_i64(rt, "found_count"), 9);
    assert_no_open_sessions();
    cbt_stream_destroy(s);
    tu_gate_free(g);
    tu_reached_fini(&r);
    tu_stop();
}

/* A store and a retrieve pending on two streams; the store finishes first: the
 * root must wait for the retrieve too. */
static void deferred_until_store_and_retrieve(void **state)
{
    (void)state;
    const char *sid = "def-sr";
    tu_start(NULL);
    cbt_stream *ss = new_stream(), *sr = new_stream();
    tu_gate *gs = tu_gate_new(), *gr = tu_gate_new();
    tu_reached rs, rr;
    tu_reached_init(&rs);
    tu_reached_init(&rr);

    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_RETRIEVE_SUBMITTED, sid);
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    tu_pub_on(sr, CBT_EV_MP_RETRIEVE_START, sid);
    tu_reached_enqueue(&rr, sr);
    tu_gate_enqueue(gr, sr);
    tu_enqueue_sleep(sr, 2000);
    tu_pub_on(sr, CBT_EV_MP_RETRIEVE_END, sid);
    tu_pub_on(ss, CBT_EV_MP_STORE_START, sid);
    tu_reached_enqueue(&rs, ss);
    tu_gate_enqueue(gs, ss);
    tu_enqueue_sleep(ss, 2000);
    tu_pub_on(ss, CBT_EV_MP_STORE_END, sid);
    tu_reached_wait(&rr);
    tu_reached_wait(&rs);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    assert_int_equal(tu_count("request", sid), 0);

    tu_gate_open(gs);
    assert_int_equal(cbt_stream_sync(ss), CBT_OK);
    tu_flush();
    assert_int_equal(tu_count("mp.store", sid), 1);
    assert_int_equal(tu_count("request", sid), 0); /* retrieve still pending */

    tu_gate_open(gr);
    assert_int_equal(cbt_stream_sync(sr), CBT_OK);
    tu_flush();
    uint32_t p_end = tu_event_pos(CBT_EV_MP_REQUEST_END, sid, 0);
    assert_true(p_end < tu_event_pos(CBT_EV_MP_STORE_END, sid, 0));
    assert_true(p_end < tu_event_pos(CBT_EV_MP_RETRIEVE_END, sid, 0));
    const cbt_span *root = check_root(sid, tu_event_ts(CBT_EV_MP_REQUEST_START, sid, 0),
                                      tu_event_ts(CBT_EV_MP_REQUEST_END, sid, 0));
    check_child("mp.store", sid, 0, root, CBT_EV_MP_STORE_START, 0, CBT_EV_MP_STORE_END, 0);
    check_child("mp.retrieve", sid, 0, root, CBT_EV_MP_RETRIEVE_START, 0,
                CBT_EV_MP_RETRIEVE_END, 0);
    assert_int_equal(mp_stats().roots_deferred, 1);
    assert_no_open_sessions();
    cbt_stream_destroy(ss);
    cbt_stream_destroy(sr);
    tu_gate_free(gs);
    tu_gate_free(gr);
    tu_reached_fini(&rs);
    tu_reached_fini(&rr);
    tu_stop();
}

/* Store-only path: no REQUEST_START, the root opens lazily at STORE_START and
 * closes at once at REQUEST_END (nothing pending by then). */
static void lazy_root_store_only(void **state)
{
    (void)state;
    const char *sid = "lazy-1";
    tu_start(NULL);
    cbt_stream *s = new_stream();
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    tu_pub_on(s, CBT_EV_MP_STORE_START, sid);
    tu_enqueue_sleep(s, 2000);
    pub_on_i64(s, CBT_EV_MP_STORE_END, sid, "stored_count", 4);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    assert_int_equal(tu_count("mp.store", sid), 1);
    assert_int_equal(tu_count("request", sid), 0); /* no REQUEST_END yet */
    cbt_mp_stats st = mp_stats();
    assert_int_equal(st.roots_opened, 1);
    assert_int_equal(st.roots_lazy, 1);

    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    const cbt_span *root = check_root(sid, tu_event_ts(CBT_EV_MP_STORE_START, sid, 0),
                                      tu_event_ts(CBT_EV_MP_REQUEST_END, sid, 0));
    check_child("mp.store", sid, 0, root, CBT_EV_MP_STORE_START, 0, CBT_EV_MP_STORE_END, 0);
    assert_no_hit_attrs(root);
    st = mp_stats();
    assert_int_equal(st.roots_lazy, 1);
    assert_int_equal(st.roots_deferred, 0);
    assert_int_equal(st.roots_closed, 1);
    assert_no_open_sessions();
    cbt_stream_destroy(s);
    tu_stop();
}

/* Store-only path where REQUEST_END was deferred before the lazy root's START:
 * the root starts at min(START ts, REQUEST_END ts) = REQUEST_END ts. */
static void lazy_root_after_deferred_request_end(void **state)
{
    (void)state;
    const char *sid = "lazy-2";
    tu_start(NULL);
    cbt_stream *s = new_stream();
    tu_gate *g = tu_gate_new();
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    tu_gate_enqueue(g, s);
    tu_enqueue_sleep(s, 2000);
    tu_pub_on(s, CBT_EV_MP_STORE_START, sid);
    tu_enqueue_sleep(s, 2000);
    tu_pub_on(s, CBT_EV_MP_STORE_END, sid);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    cbt_mp_stats st = mp_stats();
    assert_int_equal(st.roots_opened, 0);
    assert_int_equal(st.roots_deferred, 1);
    assert_int_equal(st.request_end_unknown, 0);

    tu_gate_open(g);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    uint64_t end_ts = tu_event_ts(CBT_EV_MP_REQUEST_END, sid, 0);
    assert_true(end_ts < tu_event_ts(CBT_EV_MP_STORE_START, sid, 0));
    const cbt_span *root = check_root(sid, end_ts, end_ts);
    check_child("mp.store", sid, 0, root, CBT_EV_MP_STORE_START, 0, CBT_EV_MP_STORE_END, 0);
    st = mp_stats();
    assert_int_equal(st.roots_lazy, 1);
    assert_int_equal(st.roots_closed, 1);
    assert_no_open_sessions();
    cbt_stream_destroy(s);
    tu_gate_free(g);
    tu_stop();
}

/* A probe subscriber registered after the MP subscriber: it reads the registry
 * on the harvester thread. */
typedef struct probe_state {
    cbt_event_type probe_type;
    int n_start;
    cbt_status start_rc;
    cbt_span_ctx start_ctx;
    int n_probe;
    cbt_status probe_retrieve_rc[2];
    cbt_status probe_request_rc[2];
    cbt_span_ctx probe_request_ctx[2];
    uint32_t probe_registry_count[2];
} probe_state;

static probe_state g_probe;

static cbt_status probe_on_event(void *ctx, cbt_tracer *t, const cbt_event *ev)
{
    probe_state *p = ctx;
    cbt_span_ctx tmp;
    if (ev->type == CBT_EV_MP_RETRIEVE_START) {
        p->start_rc = cbt_registry_get(t, ev->session, CBT_N_RETRIEVE, &p->start_ctx);
        p->n_start++;
    } else if (ev->type == p->probe_type && p->n_probe < 2) {
        int i = p->n_probe++;
        p->probe_retrieve_rc[i] = cbt_registry_get(t, ev->session, CBT_N_RETRIEVE, &tmp);
        p->probe_request_rc[i] =
            cbt_registry_get(t, ev->session, CBT_N_REQUEST, &p->probe_request_ctx[i]);
        p->probe_registry_count[i] = cbt_registry_count(t);
    }
    return CBT_OK;
}

/* mp.retrieve is in the registry (under "retrieve") while open and gone after
 * its END; "request" stays until the root closes. */
static void retrieve_in_registry_while_open(void **state)
{
    (void)state;
    const char *sid = "reg-1";
    tu_start(NULL);
    memset(&g_probe, 0, sizeof g_probe);
    g_probe.probe_type = reg_type("TEST_PROBE");
    g_probe.start_rc = CBT_STATUS_COUNT_;
    cbt_subscriber sub;
    memset(&sub, 0, sizeof sub);
    sub.version = CBT_SUBSCRIBER_VERSION;
    sub.size = sizeof sub;
    sub.name = "test-probe";
    sub.ctx = &g_probe;
    sub.on_event = probe_on_event;
    cbt_subscriber_want(&sub, CBT_EV_MP_RETRIEVE_START);
    cbt_subscriber_want(&sub, g_probe.probe_type);
    assert_int_equal(cbt_add_subscriber(&sub), CBT_OK);

    cbt_stream *s = new_stream();
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_RETRIEVE_SUBMITTED, sid);
    tu_pub_on(s, CBT_EV_MP_RETRIEVE_START, sid);
    tu_enqueue_sleep(s, 2000);
    tu_pub_on(s, CBT_EV_MP_RETRIEVE_END, sid);
    tu_pub_on(s, g_probe.probe_type, sid);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_pub(g_probe.probe_type, sid);
    tu_flush();

    const cbt_span *root = check_root(sid, tu_event_ts(CBT_EV_MP_REQUEST_START, sid, 0),
                                      tu_event_ts(CBT_EV_MP_REQUEST_END, sid, 0));
    const cbt_span *rt = check_child("mp.retrieve", sid, 0, root, CBT_EV_MP_RETRIEVE_START, 0,
                                     CBT_EV_MP_RETRIEVE_END, 0);
    assert_int_equal(g_probe.n_start, 1);
    assert_int_equal(g_probe.start_rc, CBT_OK);
    assert_memory_equal(g_probe.start_ctx.span_id, rt->ctx.span_id, 8);
    assert_memory_equal(g_probe.start_ctx.trace_id, rt->ctx.trace_id, 16);
    assert_int_equal(g_probe.n_probe, 2);
    /* after RETRIEVE_END, root still open */
    assert_int_equal(g_probe.probe_retrieve_rc[0], CBT_ERR_NOT_FOUND);
    assert_int_equal(g_probe.probe_request_rc[0], CBT_OK);
    assert_memory_equal(g_probe.probe_request_ctx[0].span_id, root->ctx.span_id, 8);
    assert_int_equal(g_probe.probe_registry_count[0], 1);
    /* after REQUEST_END: nothing of this session left */
    assert_int_equal(g_probe.probe_retrieve_rc[1], CBT_ERR_NOT_FOUND);
    assert_int_equal(g_probe.probe_request_rc[1], CBT_ERR_NOT_FOUND);
    assert_int_equal(g_probe.probe_registry_count[1], 0);
    assert_no_open_sessions();
    cbt_stream_destroy(s);
    tu_stop();
}

/* Each child's start/end are its START/END event times; both events' metadata
 * become typed attributes. */
static void child_lifecycles(void **state)
{
    (void)state;
    const char *sid = "life-1";
    tu_start(NULL);
    cbt_stream *s = new_stream();
    cbt_name k_dev = tu_name("device"), k_frac = tu_name("frac"), k_ok = tu_name("ok");

    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub_i64(CBT_EV_MP_LOOKUP_PREFETCH_START, sid, "num_tokens", 2048, NULL, 0);
    tu_pub_i64(CBT_EV_MP_LOOKUP_PREFETCH_END, sid, "hit_tokens", 1536, "requested_tokens", 2048);
    tu_pub(CBT_EV_MP_RETRIEVE_SUBMITTED, sid);
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, CBT_EV_MP_RETRIEVE_START, sid), CBT_OK);
    assert_int_equal(cbt_event_str(&e, k_dev, "cuda:1"), CBT_OK);
    assert_int_equal(cbt_publish_on_stream(s, &e), CBT_OK);
    tu_enqueue_sleep(s, 2000);
    assert_int_equal(cbt_event_init(&e, CBT_EV_MP_RETRIEVE_END, sid), CBT_OK);
    assert_int_equal(cbt_event_i64(&e, CBT_N_FOUND_COUNT, 12), CBT_OK);
    assert_int_equal(cbt_event_f64(&e, k_frac, 0.75), CBT_OK);
    assert_int_equal(cbt_publish_on_stream(s, &e), CBT_OK);
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    pub_on_i64(s, CBT_EV_MP_STORE_START, sid, "num_tokens", 512);
    tu_enqueue_sleep(s, 2000);
    assert_int_equal(cbt_event_init(&e, CBT_EV_MP_STORE_END, sid), CBT_OK);
    assert_int_equal(cbt_event_i64(&e, CBT_N_STORED_COUNT, 8), CBT_OK);
    assert_int_equal(cbt_event_bool(&e, k_ok, true), CBT_OK);
    assert_int_equal(cbt_publish_on_stream(s, &e), CBT_OK);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();

    const cbt_span *root = check_root(sid, tu_event_ts(CBT_EV_MP_REQUEST_START, sid, 0),
                                      tu_event_ts(CBT_EV_MP_REQUEST_END, sid, 0));
    const cbt_span *lp = check_child("mp.lookup_prefetch", sid, 0, root,
                                     CBT_EV_MP_LOOKUP_PREFETCH_START, 0,
                                     CBT_EV_MP_LOOKUP_PREFETCH_END, 0);
    const cbt_span *rt = check_child("mp.retrieve", sid, 0, root, CBT_EV_MP_RETRIEVE_START, 0,
                                     CBT_EV_MP_RETRIEVE_END, 0);
    const cbt_span *st = check_child("mp.store", sid, 0, root, CBT_EV_MP_STORE_START, 0,
                                     CBT_EV_MP_STORE_END, 0);
    assert_true(rt->end_ns > rt->start_ns);
    assert_true(st->end_ns > st->start_ns);
    /* metadata of START and END, types kept */
    assert_int_equal(tu_attr_i64(lp, "num_tokens"), 2048);
    assert_int_equal(tu_attr_i64(lp, "hit_tokens"), 1536);
    assert_int_equal(tu_attr_i64(lp, "requested_tokens"), 2048);
    const cbt_attr *a = cbt_span_attr(rt, k_dev);
    assert_non_null(a);
    assert_int_equal(a->type, CBT_META_STR);
    assert_int_equal(a->str_len, 6);
    assert_memory_equal(cbt_attr_str(rt, a), "cuda:1", 6);
    assert_int_equal(tu_attr_i64(rt, "found_count"), 12);
    assert_true(tu_attr_f64(rt, "frac") == 0.75);
    assert_int_equal(tu_attr_i64(st, "num_tokens"), 512);
    assert_int_equal(tu_attr_i64(st, "stored_count"), 8);
    a = cbt_span_attr(st, k_ok);
    assert_non_null(a);
    assert_int_equal(a->type, CBT_META_BOOL);
    assert_true(a->v.b);
    /* metadata stays on its own span */
    assert_false(tu_has_attr(rt, "stored_count"));
    assert_false(tu_has_attr(st, "found_count"));
    assert_false(tu_has_attr(root, "num_tokens"));
    cbt_mp_stats ms = mp_stats();
    assert_int_equal(ms.children_opened, 3);
    assert_int_equal(ms.children_closed, 3);
    assert_no_open_sessions();
    cbt_stream_destroy(s);
    tu_stop();
}

/* An END with no START is ignored and counted, and nothing breaks. */
static void unmatched_end_does_not_crash(void **state)
{
    (void)state;
    const char *sid = "unm-1";
    tu_start(NULL);
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub_i64(CBT_EV_MP_STORE_END, sid, "stored_count", 1, NULL, 0);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    cbt_mp_stats st = mp_stats();
    assert_int_equal(st.unmatched_end, 1);
    assert_int_equal(st.children_closed, 0);
    assert_int_equal(metrics().subscriber_errors, 1);
    assert_int_equal(tu_count("mp.store", NULL), 0);
    check_root(sid, tu_event_ts(CBT_EV_MP_REQUEST_START, sid, 0), tu_event_ts(CBT_EV_MP_REQUEST_END, sid, 0));
    assert_no_open_sessions();
    tu_stop();
}

/* Publish on the CPU with one bool or one string metadata value. */
static void pub_bool(cbt_event_type type, const char *sid, const char *k, bool v)
{
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, type, sid), CBT_OK);
    assert_int_equal(cbt_event_bool(&e, tu_name(k), v), CBT_OK);
    assert_int_equal(cbt_publish(&e), CBT_OK);
}

static void pub_str(cbt_event_type type, const char *sid, const char *k, const char *v)
{
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, type, sid), CBT_OK);
    assert_int_equal(cbt_event_str(&e, tu_name(k), v), CBT_OK);
    assert_int_equal(cbt_publish(&e), CBT_OK);
}

/* One store request whose STORE_END carries what `end` publishes. */
static void store_request(const char *sid, void (*end)(const char *sid))
{
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    tu_pub(CBT_EV_MP_STORE_START, sid);
    end(sid);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
}
static void end_success_false(const char *sid) { pub_bool(CBT_EV_MP_STORE_END, sid, "success", false); }
static void end_success_true(const char *sid) { pub_bool(CBT_EV_MP_STORE_END, sid, "success", true); }
static void end_failed_true(const char *sid) { pub_bool(CBT_EV_MP_STORE_END, sid, "failed", true); }
static void end_failed_false(const char *sid) { pub_bool(CBT_EV_MP_STORE_END, sid, "failed", false); }
static void end_error_str(const char *sid) { pub_str(CBT_EV_MP_STORE_END, sid, "error", "disk full"); }
static void end_exception_str(const char *sid) { pub_str(CBT_EV_MP_STORE_END, sid, "exception", "ValueError"); }
static void end_error_empty(const char *sid) { pub_str(CBT_EV_MP_STORE_END, sid, "error", ""); }
static void end_plain(const char *sid) { tu_pub(CBT_EV_MP_STORE_END, sid); }

/* An END marks its span ERROR on failed = true, success = false (what
 * LMCache 0.5.6 sends) or a non-empty error / exception string; the text
 * stays an attribute. Anything else leaves the status UNSET. */
static void end_status_from_metadata(void **state)
{
    (void)state;
    static const struct {
        const char *sid;
        void (*end)(const char *);
        int status;
    } cases[] = {
        {"fs-success-false", end_success_false, CBT_SPAN_STATUS_ERROR},
        {"fs-success-true", end_success_true, CBT_SPAN_STATUS_UNSET},
        {"fs-failed-true", end_failed_true, CBT_SPAN_STATUS_ERROR},
        {"fs-failed-false", end_failed_false, CBT_SPAN_STATUS_UNSET},
        {"fs-error", end_error_str, CBT_SPAN_STATUS_ERROR},
        {"fs-exception", end_exception_str, CBT_SPAN_STATUS_ERROR},
        {"fs-error-empty", end_error_empty, CBT_SPAN_STATUS_UNSET},
        {"fs-plain", end_plain, CBT_SPAN_STATUS_UNSET},
    };
    tu_start(NULL);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        store_request(cases[i].sid, cases[i].end);
    tu_flush();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const cbt_span *sp = tu_need_span("mp.store", cases[i].sid, 0);
        if (sp->status != cases[i].status)
            fail_msg("%s: status %d, expected %d", cases[i].sid, sp->status, cases[i].status);
        const cbt_span *root = tu_need_span("request", cases[i].sid, 0);
        assert_int_equal(root->status, CBT_SPAN_STATUS_UNSET);
    }
    const cbt_span *sp = tu_need_span("mp.store", "fs-error", 0);
    const cbt_attr *a = cbt_span_attr(sp, tu_name("error"));
    assert_non_null(a);
    assert_int_equal(a->str_len, strlen("disk full"));
    assert_memory_equal(cbt_attr_str(sp, a), "disk full", a->str_len);
    assert_no_open_sessions();
    tu_stop();
}

/* An END whose START never came, after its SUBMITTED and a deferred
 * REQUEST_END: the op finished (LMCache 0.5.6 decrements too), so the root
 * closes at the REQUEST_END time instead of waiting for shutdown; the END is
 * still counted as unmatched. */
static void unmatched_end_retires_submitted(void **state)
{
    (void)state;
    const char *sid = "unm-sub";
    const char *sid2 = "unm-sub-r";
    tu_start(NULL);
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_pub(CBT_EV_MP_REQUEST_START, sid2);
    tu_pub(CBT_EV_MP_RETRIEVE_SUBMITTED, sid2);
    tu_pub(CBT_EV_MP_REQUEST_END, sid2);
    tu_flush();
    assert_int_equal(tu_count("request", NULL), 0);
    assert_int_equal(mp_stats().roots_deferred, 2);
    tu_pub(CBT_EV_MP_STORE_END, sid);      /* no STORE_START */
    tu_pub(CBT_EV_MP_RETRIEVE_END, sid2);  /* no RETRIEVE_START */
    tu_flush();
    cbt_mp_stats st = mp_stats();
    assert_int_equal(st.unmatched_end, 2);
    assert_int_equal(st.roots_closed, 2);
    assert_int_equal(st.children_closed, 0);
    assert_int_equal(tu_count("mp.store", NULL), 0);
    check_root(sid, tu_event_ts(CBT_EV_MP_REQUEST_START, sid, 0),
               tu_event_ts(CBT_EV_MP_REQUEST_END, sid, 0));
    check_root(sid2, tu_event_ts(CBT_EV_MP_REQUEST_START, sid2, 0),
               tu_event_ts(CBT_EV_MP_REQUEST_END, sid2, 0));
    assert_no_open_sessions();
    assert_int_equal(metrics().spans_open, 0);
    tu_stop();
    /* shutdown found nothing to end: still one complete root each */
    assert_int_equal(tu_count("request", sid), 1);
    assert_int_equal(tu_need_span("request", sid, 0)->flags & CBT_SPANF_INCOMPLETE, 0);
    assert_int_equal(tu_count("request", sid2), 1);
    assert_int_equal(tu_need_span("request", sid2, 0)->flags & CBT_SPANF_INCOMPLETE, 0);
}

/* STARTs that never END are ended at shutdown, flagged incomplete, and so is
 * their root. */
static void unmatched_start_cleaned_at_shutdown(void **state)
{
    (void)state;
    const char *sid = "unm-2";
    tu_start(NULL);
    cbt_stream *s = new_stream();
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_START, sid);
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    tu_pub_on(s, CBT_EV_MP_STORE_START, sid);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    assert_int_equal(tu_span_count(), 0);
    cbt_mp_stats st = mp_stats();
    assert_int_equal(st.sessions_open, 1); /* left open on purpose */
    assert_int_equal(st.children_opened, 2);
    assert_int_equal(metrics().spans_open, 3);
    cbt_stream_destroy(s);
    tu_stop();

    assert_int_equal(tu_span_count(), 3);
    const cbt_span *root = tu_need_span("request", sid, 0);
    assert_true(tu_is_root(root));
    assert_true(root->flags & CBT_SPANF_INCOMPLETE);
    assert_int_equal(root->start_ns, tu_event_ts(CBT_EV_MP_REQUEST_START, sid, 0));
    const cbt_span *lp = tu_need_span("mp.lookup_prefetch", sid, 0);
    const cbt_span *sp = tu_need_span("mp.store", sid, 0);
    assert_true(tu_is_child_of(lp, root));
    assert_true(tu_is_child_of(sp, root));
    assert_true(lp->flags & CBT_SPANF_INCOMPLETE);
    assert_true(sp->flags & CBT_SPANF_INCOMPLETE);
    assert_int_equal(lp->start_ns, tu_event_ts(CBT_EV_MP_LOOKUP_PREFETCH_START, sid, 0));
    assert_int_equal(sp->start_ns, tu_event_ts(CBT_EV_MP_STORE_START, sid, 0));
    assert_true(sp->end_ns >= sp->start_ns);
    assert_true(root->end_ns >= sp->start_ns);
}

/* Five sessions driven by five threads at once, each on its own stream. */
#define N_CONC 5

typedef struct conc_arg {
    char sid[16];
    int64_t n;
    atomic_int *errors;
} conc_arg;

static void conc_sleep_fn(void *arg)
{
    (void)arg;
    struct timespec d = {0, 2000000L};
    nanosleep(&d, NULL);
}

static int conc_pub(cbt_stream *s, cbt_event_type type, const char *sid, cbt_name k1, int64_t v1,
                    cbt_name k2, int64_t v2)
{
    cbt_event e;
    int bad = cbt_event_init(&e, type, sid) != CBT_OK;
    if (k1)
        bad |= cbt_event_i64(&e, k1, v1) != CBT_OK;
    if (k2)
        bad |= cbt_event_i64(&e, k2, v2) != CBT_OK;
    bad |= (s ? cbt_publish_on_stream(s, &e) : cbt_publish(&e)) != CBT_OK;
    return bad;
}

static void *conc_thread(void *argp)
{
    conc_arg *a = argp;
    const char *sid = a->sid;
    int bad = 0;
    cbt_stream *s = NULL;
    if (cbt_stream_cpu_create(0, &s) != CBT_OK) {
        atomic_fetch_add(a->errors, 1);
        return NULL;
    }
    bad |= conc_pub(NULL, CBT_EV_MP_REQUEST_START, sid, 0, 0, 0, 0);
    bad |= conc_pub(NULL, CBT_EV_MP_LOOKUP_PREFETCH_START, sid, 0, 0, 0, 0);
    bad |= conc_pub(NULL, CBT_EV_MP_LOOKUP_PREFETCH_END, sid, CBT_N_HIT_TOKENS, a->n * 16,
                    CBT_N_REQUESTED_TOKENS, 256);
    bad |= conc_pub(NULL, CBT_EV_MP_RETRIEVE_SUBMITTED, sid, 0, 0, 0, 0);
    bad |= conc_pub(s, CBT_EV_MP_RETRIEVE_START, sid, 0, 0, 0, 0);
    bad |= cbt_stream_enqueue(s, conc_sleep_fn, NULL) != CBT_OK;
    bad |= conc_pub(s, CBT_EV_MP_RETRIEVE_END, sid, CBT_N_FOUND_COUNT, a->n, 0, 0);
    bad |= conc_pub(NULL, CBT_EV_MP_STORE_SUBMITTED, sid, 0, 0, 0, 0);
    bad |= conc_pub(s, CBT_EV_MP_STORE_START, sid, 0, 0, 0, 0);
    bad |= cbt_stream_enqueue(s, conc_sleep_fn, NULL) != CBT_OK;
    bad |= conc_pub(s, CBT_EV_MP_STORE_END, sid, CBT_N_STORED_COUNT, a->n * 10, 0, 0);
    bad |= conc_pub(NULL, CBT_EV_MP_REQUEST_END, sid, 0, 0, 0, 0);
    bad |= cbt_stream_sync(s) != CBT_OK;
    cbt_stream_destroy(s);
    if (bad)
        atomic_fetch_add(a->errors, 1);
    return NULL;
}

static void five_concurrent_sessions(void **state)
{
    (void)state;
    tu_start(NULL);
    atomic_int errors = 0;
    conc_arg args[N_CONC];
    pthread_t th[N_CONC];
    for (int i = 0; i < N_CONC; i++) {
        snprintf(args[i].sid, sizeof args[i].sid, "conc-%d", i);
        args[i].n = i + 1;
        args[i].errors = &errors;
        assert_int_equal(pthread_create(&th[i], NULL, conc_thread, &args[i]), 0);
    }
    for (int i = 0; i < N_CONC; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    assert_int_equal(atomic_load(&errors), 0);
    tu_flush();

    assert_int_equal(tu_count("request", NULL), N_CONC);
    assert_int_equal(tu_count("mp.lookup_prefetch", NULL), N_CONC);
    assert_int_equal(tu_count("mp.retrieve", NULL), N_CONC);
    assert_int_equal(tu_count("mp.store", NULL), N_CONC);
    const cbt_span *roots[N_CONC];
    for (int i = 0; i < N_CONC; i++) {
        const char *sid = args[i].sid;
        const cbt_span *root = check_root(sid, tu_event_ts(CBT_EV_MP_REQUEST_START, sid, 0),
                                          tu_event_ts(CBT_EV_MP_REQUEST_END, sid, 0));
        roots[i] = root;
        check_child("mp.lookup_prefetch", sid, 0, root, CBT_EV_MP_LOOKUP_PREFETCH_START, 0,
                    CBT_EV_MP_LOOKUP_PREFETCH_END, 0);
        const cbt_span *rt = check_child("mp.retrieve", sid, 0, root, CBT_EV_MP_RETRIEVE_START, 0,
                                         CBT_EV_MP_RETRIEVE_END, 0);
        const cbt_span *st = check_child("mp.store", sid, 0, root, CBT_EV_MP_STORE_START, 0,
                                         CBT_EV_MP_STORE_END, 0);
        assert_hit_attrs(root, args[i].n * 16, 256, (double)(args[i].n * 16) / 256.0);
        assert_int_equal(tu_attr_i64(rt, "found_count"), args[i].n);
        assert_int_equal(tu_attr_i64(st, "stored_count"), args[i].n * 10);
    }
    for (int i = 0; i < N_CONC; i++)
        for (int j = i + 1; j < N_CONC; j++)
            assert_memory_not_equal(roots[i]->ctx.trace_id, roots[j]->ctx.trace_id, 16);
    cbt_mp_stats st = mp_stats();
    assert_int_equal(st.roots_opened, N_CONC);
    assert_int_equal(st.roots_closed, N_CONC);
    assert_int_equal(st.unmatched_end, 0);
    assert_no_open_sessions();
    tu_stop();
}

/* Root hit attributes from LOOKUP_PREFETCH_END metadata. */
static void run_hit_rate(const char *sid, int64_t hit, int64_t req, double rate)
{
    tu_start(NULL);
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_START, sid);
    tu_pub_i64(CBT_EV_MP_LOOKUP_PREFETCH_END, sid, "hit_tokens", hit, "requested_tokens", req);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    const cbt_span *root = check_root(sid, tu_event_ts(CBT_EV_MP_REQUEST_START, sid, 0),
                                      tu_event_ts(CBT_EV_MP_REQUEST_END, sid, 0));
    assert_hit_attrs(root, hit, req, rate);
    assert_no_open_sessions();
    tu_stop();
}

static void hit_rate_half(void **state)
{
    (void)state;
    run_hit_rate("hr-half", 512, 1024, 0.5);
}

static void hit_rate_zero_over_zero(void **state)
{
    (void)state;
    run_hit_rate("hr-zero", 0, 0, 0.0);
}

/* Store-only path: the root carries none of the three hit attributes. */
static void store_only_has_no_hit_attrs(void **state)
{
    (void)state;
    const char *sid = "no-hit";
    tu_start(NULL);
    cbt_stream *s = new_stream();
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    tu_pub_on(s, CBT_EV_MP_STORE_START, sid);
    tu_pub_on(s, CBT_EV_MP_STORE_END, sid);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    const cbt_span *root = tu_need_span("request", sid, 0);
    assert_no_hit_attrs(root);
    assert_sid(root, sid);
    assert_no_open_sessions();
    cbt_stream_destroy(s);
    tu_stop();
}

/* Two tensor-parallel stores of one session on two streams, ending in the
 * opposite order of their starts: each span ends at its own END. */
static void tensor_parallel_stores_do_not_cross(void **state)
{
    (void)state;
    const char *sid = "tp-1";
    tu_start(NULL);
    cbt_stream *sa = new_stream(), *sb = new_stream();
    uint32_t oa = cbt_stream_ordinal(sa), ob = cbt_stream_ordinal(sb);
    assert_int_not_equal(oa, ob);
    tu_gate *ga = tu_gate_new(), *gb = tu_gate_new();
    tu_reached ra, rb;
    tu_reached_init(&ra);
    tu_reached_init(&rb);

    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    pub_on_i64(sa, CBT_EV_MP_STORE_START, sid, "worker", 0);
    tu_reached_enqueue(&ra, sa);
    tu_gate_enqueue(ga, sa);
    tu_enqueue_sleep(sa, 2000);
    pub_on_i64(sa, CBT_EV_MP_STORE_END, sid, "stored_count", 10);
    tu_reached_wait(&ra); /* A's START is on the bus before B's */
    pub_on_i64(sb, CBT_EV_MP_STORE_START, sid, "worker", 1);
    tu_reached_enqueue(&rb, sb);
    tu_gate_enqueue(gb, sb);
    tu_enqueue_sleep(sb, 2000);
    pub_on_i64(sb, CBT_EV_MP_STORE_END, sid, "stored_count", 20);
    tu_reached_wait(&rb);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    assert_int_equal(tu_count("mp.store", sid), 0);

    tu_gate_open(gb); /* B, started second, ends first */
    assert_int_equal(cbt_stream_sync(sb), CBT_OK);
    tu_flush();
    assert_int_equal(tu_count("mp.store", sid), 1);
    assert_int_equal(tu_count("request", sid), 0);
    const tu_event *a_start = tu_event_find(CBT_EV_MP_STORE_START, sid, 0);
    const tu_event *b_start = tu_event_find(CBT_EV_MP_STORE_START, sid, 1);
    const tu_event *b_end = tu_event_find(CBT_EV_MP_STORE_END, sid, 0);
    assert_non_null(a_start);
    assert_non_null(b_start);
    assert_non_null(b_end);
    assert_int_equal(a_start->pair, oa);
    assert_int_equal(b_start->pair, ob);
    assert_int_equal(b_end->pair, ob);
    const cbt_span *first = tu_need_span("mp.store", sid, 0);
    assert_int_equal(first->start_ns, b_start->ts);
    assert_int_equal(first->end_ns, b_end->ts);
    assert_int_equal(tu_attr_i64(first, "worker"), 1);
    assert_int_equal(tu_attr_i64(first, "stored_count"), 20);

    tu_gate_open(ga);
    assert_int_equal(cbt_stream_sync(sa), CBT_OK);
    tu_flush();
    const tu_event *a_end = tu_event_find(CBT_EV_MP_STORE_END, sid, 1);
    assert_non_null(a_end);
    assert_int_equal(a_end->pair, oa);
    const cbt_span *root = check_root(sid, tu_event_ts(CBT_EV_MP_REQUEST_START, sid, 0),
                                      tu_event_ts(CBT_EV_MP_REQUEST_END, sid, 0));
    const cbt_span *b = tu_need_span("mp.store", sid, 0);
    const cbt_span *a = tu_need_span("mp.store", sid, 1);
    assert_true(tu_is_child_of(a, root));
    assert_true(tu_is_child_of(b, root));
    assert_int_equal(a->start_ns, a_start->ts);
    assert_int_equal(a->end_ns, a_end->ts);
    assert_int_equal(tu_attr_i64(a, "worker"), 0);
    assert_int_equal(tu_attr_i64(a, "stored_count"), 10);
    assert_int_equal(b->start_ns, b_start->ts);
    assert_int_equal(b->end_ns, b_end->ts);
    assert_no_open_sessions();
    cbt_stream_destroy(sa);
    cbt_stream_destroy(sb);
    tu_gate_free(ga);
    tu_gate_free(gb);
    tu_reached_fini(&ra);
    tu_reached_fini(&rb);
    tu_stop();
}

/* Seed "Example 1": an l1.read subscriber nesting under the registry's
 * "request" entry, with no change to the MP subscriber. */
typedef struct l1_state {
    cbt_event_type reserved, finished;
    cbt_name span_name;
    cbt_span *open;
    char sid[CBT_SESSION_MAX];
    cbt_status parent_rc;
} l1_state;

static l1_state g_l1;

static cbt_status l1_on_event(void *ctx, cbt_tracer *t, const cbt_event *ev)
{
    l1_state *l = ctx;
    if (ev->type == l->reserved) {
        cbt_span_ctx parent;
        l->parent_rc = cbt_registry_get(t, ev->session, CBT_N_REQUEST, &parent);
        if (l->parent_rc != CBT_OK || l->open)
            return CBT_ERR_NOT_FOUND;
        l->open = cbt_span_start(t, l->span_name, CBT_SPAN_KIND_INTERNAL, &parent, ev->ts);
        if (!l->open)
            return CBT_ERR_FULL;
        cbt_span_set_str(l->open, CBT_N_SESSION_ID, ev->session, ev->session_len);
        cbt_span_set_from_event(l->open, ev);
        memcpy(l->sid, ev->session, sizeof l->sid);
    } else if (ev->type == l->finished) {
        if (!l->open || strcmp(l->sid, ev->session) != 0)
            return CBT_ERR_UNMATCHED;
        cbt_span_set_from_event(l->open, ev);
        cbt_span_end(t, l->open, ev->ts);
        l->open = NULL;
    }
    return CBT_OK;
}

static void l1_on_shutdown(void *ctx, cbt_tracer *t, uint64_t now_ns)
{
    l1_state *l = ctx;
    if (l->open) {
        l->open->flags |= CBT_SPANF_INCOMPLETE;
        cbt_span_end(t, l->open, now_ns);
        l->open = NULL;
    }
}

static void l1_read_under_request(void **state)
{
    (void)state;
    const char *sid = "l1-1";
    tu_start(NULL);
    memset(&g_l1, 0, sizeof g_l1);
    g_l1.reserved = reg_type("L1_READ_RESERVED");
    g_l1.finished = reg_type("L1_READ_FINISHED");
    g_l1.span_name = tu_name("l1.read");
    g_l1.parent_rc = CBT_STATUS_COUNT_;
    cbt_subscriber sub;
    memset(&sub, 0, sizeof sub);
    sub.version = CBT_SUBSCRIBER_VERSION;
    sub.size = sizeof sub;
    sub.name = "l1";
    sub.ctx = &g_l1;
    sub.on_event = l1_on_event;
    sub.on_shutdown = l1_on_shutdown;
    cbt_subscriber_want(&sub, g_l1.reserved);
    cbt_subscriber_want(&sub, g_l1.finished);
    assert_int_equal(cbt_add_subscriber(&sub), CBT_OK);

    cbt_stream *s = new_stream();
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub_i64(g_l1.reserved, sid, "num_tokens", 64, NULL, 0);
    tu_enqueue_sleep(s, 2000);
    tu_pub_on(s, g_l1.finished, sid);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();

    assert_int_equal(g_l1.parent_rc, CBT_OK);
    const cbt_span *root = check_root(sid, tu_event_ts(CBT_EV_MP_REQUEST_START, sid, 0),
                                      tu_event_ts(CBT_EV_MP_REQUEST_END, sid, 0));
    assert_int_equal(tu_count("l1.read", sid), 1);
    const cbt_span *l1 = check_child("l1.read", sid, 0, root, g_l1.reserved, 0, g_l1.finished, 0);
    assert_int_equal(tu_attr_i64(l1, "num_tokens"), 64);
    assert_int_equal(metrics().subscriber_errors, 0);
    assert_no_open_sessions();
    cbt_stream_destroy(s);
    tu_stop();
}

/* ---- the seed's seven scenarios ------------------------------------------------ */

/* 1. Full hit: lookup_prefetch -> retrieve -> store; REQUEST_END published
 * while the retrieve is held (vLLM unblocked on its IPC event), so the root
 * waits for both the retrieve and the store. */
static void scenario_1_full_hit(void **state)
{
    (void)state;
    const char *sid = "sc1";
    tu_start(NULL);
    cbt_stream *s = new_stream();
    tu_gate *g1 = tu_gate_new(), *g2 = tu_gate_new();
    tu_reached r0, r1;
    tu_reached_init(&r0);
    tu_reached_init(&r1);

    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub_i64(CBT_EV_MP_LOOKUP_PREFETCH_START, sid, "num_tokens", 1024, NULL, 0);
    tu_pub_i64(CBT_EV_MP_LOOKUP_PREFETCH_END, sid, "hit_tokens", 1024, "requested_tokens", 1024);
    tu_pub(CBT_EV_MP_RETRIEVE_SUBMITTED, sid);
    tu_pub_on(s, CBT_EV_MP_RETRIEVE_START, sid);
    tu_reached_enqueue(&r0, s);
    tu_gate_enqueue(g1, s); /* the vLLM IPC event */
    tu_enqueue_sleep(s, 2000);
    pub_on_i64(s, CBT_EV_MP_RETRIEVE_END, sid, "found_count", 64);
    tu_reached_enqueue(&r1, s);
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    tu_gate_enqueue(g2, s);
    tu_pub_on(s, CBT_EV_MP_STORE_START, sid);
    tu_enqueue_sleep(s, 2000);
    pub_on_i64(s, CBT_EV_MP_STORE_END, sid, "stored_count", 64);
    tu_reached_wait(&r0);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    assert_int_equal(tu_count("request", sid), 0);
    assert_int_equal(tu_count("mp.lookup_prefetch", sid), 1);
    assert_int_equal(mp_stats().roots_deferred, 1);

    tu_gate_open(g1);
    tu_reached_wait(&r1);
    tu_flush();
    assert_int_equal(tu_count("mp.retrieve", sid), 1);
    assert_int_equal(tu_count("request", sid), 0); /* store still pending */

    tu_gate_open(g2);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    uint32_t p_end = tu_event_pos(CBT_EV_MP_REQUEST_END, sid, 0);
    assert_true(tu_event_pos(CBT_EV_MP_RETRIEVE_START, sid, 0) < p_end);
    assert_true(p_end < tu_event_pos(CBT_EV_MP_RETRIEVE_END, sid, 0));
    assert_true(p_end < tu_event_pos(CBT_EV_MP_STORE_END, sid, 0));
    const cbt_span *root = check_root(sid, tu_event_ts(CBT_EV_MP_REQUEST_START, sid, 0),
                                      tu_event_ts(CBT_EV_MP_REQUEST_END, sid, 0));
    check_child("mp.lookup_prefetch", sid, 0, root, CBT_EV_MP_LOOKUP_PREFETCH_START, 0,
                CBT_EV_MP_LOOKUP_PREFETCH_END, 0);
    const cbt_span *rt = check_child("mp.retrieve", sid, 0, root, CBT_EV_MP_RETRIEVE_START, 0,
                                     CBT_EV_MP_RETRIEVE_END, 0);
    const cbt_span *st = check_child("mp.store", sid, 0, root, CBT_EV_MP_STORE_START, 0,
                                     CBT_EV_MP_STORE_END, 0);
    assert_int_equal(tu_attr_i64(rt, "found_count"), 64);
    assert_int_equal(tu_attr_i64(st, "stored_count"), 64);
    assert_hit_attrs(root, 1024, 1024, 1.0);
    assert_int_equal(tu_span_count(), 4);
    assert_no_open_sessions();
    cbt_stream_destroy(s);
    tu_gate_free(g1);
    tu_gate_free(g2);
    tu_reached_fini(&r0);
    tu_reached_fini(&r1);
    tu_stop();
}

/* 2. Cache miss: lookup_prefetch -> store, no retrieve; the store finishes
 * after REQUEST_END. */
static void scenario_2_cache_miss(void **state)
{
    (void)state;
    const char *sid = "sc2";
    tu_start(NULL);
    cbt_stream *s = new_stream();
    tu_gate *g = tu_gate_new();
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_START, sid);
    tu_pub_i64(CBT_EV_MP_LOOKUP_PREFETCH_END, sid, "hit_tokens", 0, "requested_tokens", 768);
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    tu_gate_enqueue(g, s);
    tu_pub_on(s, CBT_EV_MP_STORE_START, sid);
    tu_enqueue_sleep(s, 2000);
    pub_on_i64(s, CBT_EV_MP_STORE_END, sid, "stored_count", 48);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    assert_int_equal(tu_count("request", sid), 0);

    tu_gate_open(g);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    assert_true(tu_event_pos(CBT_EV_MP_REQUEST_END, sid, 0) < tu_event_pos(CBT_EV_MP_STORE_END, sid, 0));
    const cbt_span *root = check_root(sid, tu_event_ts(CBT_EV_MP_REQUEST_START, sid, 0),
                                      tu_event_ts(CBT_EV_MP_REQUEST_END, sid, 0));
    check_child("mp.lookup_prefetch", sid, 0, root, CBT_EV_MP_LOOKUP_PREFETCH_START, 0,
                CBT_EV_MP_LOOKUP_PREFETCH_END, 0);
    const cbt_span *st = check_child("mp.store", sid, 0, root, CBT_EV_MP_STORE_START, 0,
                                     CBT_EV_MP_STORE_END, 0);
    assert_int_equal(tu_attr_i64(st, "stored_count"), 48);
    assert_int_equal(tu_count("mp.retrieve", sid), 0);
    assert_hit_attrs(root, 0, 768, 0.0);
    assert_int_equal(mp_stats().roots_deferred, 1);
    assert_no_open_sessions();
    cbt_stream_destroy(s);
    tu_gate_free(g);
    tu_stop();
}

/* 3. Lookup only: the root closes at once at REQUEST_END. */
static void scenario_3_lookup_only(void **state)
{
    (void)state;
    const char *sid = "sc3";
    tu_start(NULL);
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_START, sid);
    tu_pub_i64(CBT_EV_MP_LOOKUP_PREFETCH_END, sid, "hit_tokens", 300, "requested_tokens", 400);
    tu_flush();
    assert_int_equal(tu_count("mp.lookup_prefetch", sid), 1);
    assert_int_equal(tu_count("request", sid), 0);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    const cbt_span *root = check_root(sid, tu_event_ts(CBT_EV_MP_REQUEST_START, sid, 0),
                                      tu_event_ts(CBT_EV_MP_REQUEST_END, sid, 0));
    check_child("mp.lookup_prefetch", sid, 0, root, CBT_EV_MP_LOOKUP_PREFETCH_START, 0,
                CBT_EV_MP_LOOKUP_PREFETCH_END, 0);
    assert_hit_attrs(root, 300, 400, 0.75);
    assert_int_equal(tu_span_count(), 2);
    cbt_mp_stats st = mp_stats();
    assert_int_equal(st.roots_deferred, 0);
    assert_int_equal(st.roots_lazy, 0);
    assert_no_open_sessions();
    tu_stop();
}

/* 4. Store only: no REQUEST_START; the root opens lazily at STORE_START and
 * closes at once at REQUEST_END. */
static void scenario_4_store_only(void **state)
{
    (void)state;
    const char *sid = "sc4";
    tu_start(NULL);
    cbt_stream *s = new_stream();
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    tu_pub_on(s, CBT_EV_MP_STORE_START, sid);
    tu_enqueue_sleep(s, 2000);
    pub_on_i64(s, CBT_EV_MP_STORE_END, sid, "stored_count", 16);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    assert_null(tu_event_find(CBT_EV_MP_REQUEST_START, sid, 0));
    const cbt_span *root = check_root(sid, tu_event_ts(CBT_EV_MP_STORE_START, sid, 0),
                                      tu_event_ts(CBT_EV_MP_REQUEST_END, sid, 0));
    const cbt_span *st = check_child("mp.store", sid, 0, root, CBT_EV_MP_STORE_START, 0,
                                     CBT_EV_MP_STORE_END, 0);
    assert_int_equal(tu_attr_i64(st, "stored_count"), 16);
    assert_no_hit_attrs(root);
    assert_int_equal(tu_count("mp.lookup_prefetch", sid), 0);
    assert_int_equal(tu_count("mp.retrieve", sid), 0);
    cbt_mp_stats ms = mp_stats();
    assert_int_equal(ms.roots_lazy, 1);
    assert_int_equal(ms.roots_opened, 1);
    assert_int_equal(ms.roots_deferred, 0);
    assert_no_open_sessions();
    cbt_stream_destroy(s);
    tu_stop();
}

/* 5. REQUEST_END races the GPU store: STORE_START is on the bus, the store is
 * held, REQUEST_END is dispatched, then STORE_END closes the root stamped with
 * REQUEST_END's time. */
static void scenario_5_request_end_races_store(void **state)
{
    (void)state;
    const char *sid = "sc5";
    tu_start(NULL);
    cbt_stream *s = new_stream();
    tu_gate *g = tu_gate_new();
    tu_reached r;
    tu_reached_init(&r);

    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_START, sid);
    tu_pub_i64(CBT_EV_MP_LOOKUP_PREFETCH_END, sid, "hit_tokens", 256, "requested_tokens", 1024);
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    tu_pub_on(s, CBT_EV_MP_STORE_START, sid);
    tu_reached_enqueue(&r, s);
    tu_gate_enqueue(g, s);
    tu_enqueue_sleep(s, 2000);
    pub_on_i64(s, CBT_EV_MP_STORE_END, sid, "stored_count", 12);
    tu_reached_wait(&r);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    /* REQUEST_END dispatched, STORE_END still held: the root is deferred */
    assert_non_null(tu_event_find(CBT_EV_MP_REQUEST_END, sid, 0));
    assert_null(tu_event_find(CBT_EV_MP_STORE_END, sid, 0));
    assert_int_equal(tu_count("request", sid), 0);
    assert_int_equal(tu_count("mp.store", sid), 0);
    cbt_mp_stats ms = mp_stats();
    assert_int_equal(ms.roots_deferred, 1);
    assert_int_equal(ms.sessions_open, 1);

    tu_gate_open(g);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    uint32_t p_end = tu_event_pos(CBT_EV_MP_REQUEST_END, sid, 0);
    assert_true(tu_event_pos(CBT_EV_MP_STORE_START, sid, 0) < p_end);
    assert_true(p_end < tu_event_pos(CBT_EV_MP_STORE_END, sid, 0));
    const cbt_span *root = check_root(sid, tu_event_ts(CBT_EV_MP_REQUEST_START, sid, 0),
                                      tu_event_ts(CBT_EV_MP_REQUEST_END, sid, 0));
    check_child("mp.lookup_prefetch", sid, 0, root, CBT_EV_MP_LOOKUP_PREFETCH_START, 0,
                CBT_EV_MP_LOOKUP_PREFETCH_END, 0);
    const cbt_span *st = check_child("mp.store", sid, 0, root, CBT_EV_MP_STORE_START, 0,
                                     CBT_EV_MP_STORE_END, 0);
    assert_true(root->end_ns < st->end_ns);
    assert_int_equal(tu_attr_i64(st, "stored_count"), 12);
    assert_hit_attrs(root, 256, 1024, 0.25);
    assert_int_equal(tu_count("mp.retrieve", sid), 0);
    assert_int_equal(mp_stats().roots_closed, 1);
    assert_no_open_sessions();
    cbt_stream_destroy(s);
    tu_gate_free(g);
    tu_reached_fini(&r);
    tu_stop();
}

/* 6. REQUEST_END races the retrieve: RETRIEVE_START -> REQUEST_END ->
 * RETRIEVE_END on the bus; RETRIEVE_SUBMITTED keeps the root open. */
static void scenario_6_request_end_races_retrieve(void **state)
{
    (void)state;
    const char *sid = "sc6";
    tu_start(NULL);
    cbt_stream *s = new_stream();
    tu_gate *g = tu_gate_new();
    tu_reached r;
    tu_reached_init(&r);

    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_START, sid);
    tu_pub_i64(CBT_EV_MP_LOOKUP_PREFETCH_END, sid, "hit_tokens", 512, "requested_tokens", 512);
    tu_pub(CBT_EV_MP_RETRIEVE_SUBMITTED, sid);
    tu_pub_on(s, CBT_EV_MP_RETRIEVE_START, sid);
    tu_reached_enqueue(&r, s);
    tu_gate_enqueue(g, s); /* the IPC completion vLLM waits on */
    tu_enqueue_sleep(s, 2000);
    pub_on_i64(s, CBT_EV_MP_RETRIEVE_END, sid, "found_count", 32);
    tu_reached_wait(&r);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    assert_non_null(tu_event_find(CBT_EV_MP_REQUEST_END, sid, 0));
    assert_null(tu_event_find(CBT_EV_MP_RETRIEVE_END, sid, 0));
    assert_int_equal(tu_count("request", sid), 0);
    assert_int_equal(mp_stats().roots_deferred, 1);

    tu_gate_open(g);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    uint32_t p_end = tu_event_pos(CBT_EV_MP_REQUEST_END, sid, 0);
    assert_true(tu_event_pos(CBT_EV_MP_RETRIEVE_START, sid, 0) < p_end);
    assert_true(p_end < tu_event_pos(CBT_EV_MP_RETRIEVE_END, sid, 0));
    const cbt_span *root = check_root(sid, tu_event_ts(CBT_EV_MP_REQUEST_START, sid, 0),
                                      tu_event_ts(CBT_EV_MP_REQUEST_END, sid, 0));
    check_child("mp.lookup_prefetch", sid, 0, root, CBT_EV_MP_LOOKUP_PREFETCH_START, 0,
                CBT_EV_MP_LOOKUP_PREFETCH_END, 0);
    const cbt_span *rt = check_child("mp.retrieve", sid, 0, root, CBT_EV_MP_RETRIEVE_START, 0,
                                     CBT_EV_MP_RETRIEVE_END, 0);
    assert_true(root->end_ns < rt->end_ns);
    assert_int_equal(tu_attr_i64(rt, "found_count"), 32);
    assert_hit_attrs(root, 512, 512, 1.0);
    assert_int_equal(tu_count("mp.store", sid), 0);
    assert_no_open_sessions();
    cbt_stream_destroy(s);
    tu_gate_free(g);
    tu_reached_fini(&r);
    tu_stop();
}

/* 7. Multiple stores: two SUBMITTED, REQUEST_END, then S1 and S2 run one
 * after the other; S1_END leaves the root open, S2_END closes it. */
static void scenario_7_multiple_stores(void **state)
{
    (void)state;
    const char *sid = "sc7";
    tu_start(NULL);
    cbt_stream *s = new_stream();
    tu_gate *g1 = tu_gate_new(), *g2 = tu_gate_new();
    tu_reached r1;
    tu_reached_init(&r1);

    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_START, sid);
    tu_pub_i64(CBT_EV_MP_LOOKUP_PREFETCH_END, sid, "hit_tokens", 128, "requested_tokens", 512);
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    tu_gate_enqueue(g1, s);
    tu_pub_on(s, CBT_EV_MP_STORE_START, sid);
    tu_enqueue_sleep(s, 2000);
    pub_on_i64(s, CBT_EV_MP_STORE_END, sid, "stored_count", 5);
    tu_reached_enqueue(&r1, s);
    tu_gate_enqueue(g2, s);
    tu_pub_on(s, CBT_EV_MP_STORE_START, sid);
    tu_enqueue_sleep(s, 2000);
    pub_on_i64(s, CBT_EV_MP_STORE_END, sid, "stored_count", 6);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    assert_int_equal(tu_count("request", sid), 0);
    assert_int_equal(tu_count("mp.store", sid), 0);
    assert_int_equal(mp_stats().roots_deferred, 1);

    tu_gate_open(g1);
    tu_reached_wait(&r1);
    tu_flush();
    assert_int_equal(tu_count("mp.store", sid), 1);
    assert_int_equal(tu_count("request", sid), 0); /* S1_END: count 1, still open */

    tu_gate_open(g2);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    uint32_t p_end = tu_event_pos(CBT_EV_MP_REQUEST_END, sid, 0);
    assert_true(p_end < tu_event_pos(CBT_EV_MP_STORE_END, sid, 0));
    assert_true(tu_event_pos(CBT_EV_MP_STORE_END, sid, 0) < tu_event_pos(CBT_EV_MP_STORE_START, sid, 1));
    const cbt_span *root = check_root(sid, tu_event_ts(CBT_EV_MP_REQUEST_START, sid, 0),
                                      tu_event_ts(CBT_EV_MP_REQUEST_END, sid, 0));
    check_child("mp.lookup_prefetch", sid, 0, root, CBT_EV_MP_LOOKUP_PREFETCH_START, 0,
                CBT_EV_MP_LOOKUP_PREFETCH_END, 0);
    const cbt_span *s1 = check_child("mp.store", sid, 0, root, CBT_EV_MP_STORE_START, 0,
                                     CBT_EV_MP_STORE_END, 0);
    const cbt_span *s2 = check_child("mp.store", sid, 1, root, CBT_EV_MP_STORE_START, 1,
                                     CBT_EV_MP_STORE_END, 1);
    assert_int_equal(tu_attr_i64(s1, "stored_count"), 5);
    assert_int_equal(tu_attr_i64(s2, "stored_count"), 6);
    assert_true(root->end_ns < s2->end_ns);
    assert_hit_attrs(root, 128, 512, 0.25);
    assert_int_equal(tu_count("mp.store", sid), 2);
    assert_int_equal(mp_stats().roots_closed, 1);
    assert_no_open_sessions();
    cbt_stream_destroy(s);
    tu_gate_free(g1);
    tu_gate_free(g2);
    tu_reached_fini(&r1);
    tu_stop();
}

#define T(f) cmocka_unit_test_teardown(f, tu_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(root_created_on_request_start),
        T(immediate_close_without_store),
        T(deferred_until_one_store),
        T(deferred_until_two_stores),
        T(deferred_until_one_retrieve),
        T(deferred_until_store_and_retrieve),
        T(lazy_root_store_only),
        T(lazy_root_after_deferred_request_end),
        T(retrieve_in_registry_while_open),
        T(child_lifecycles),
        T(unmatched_end_does_not_crash),
        T(unmatched_start_cleaned_at_shutdown),
        T(end_status_from_metadata),
        T(unmatched_end_retires_submitted),
        T(five_concurrent_sessions),
        T(hit_rate_half),
        T(hit_rate_zero_over_zero),
        T(store_only_has_no_hit_attrs),
        T(tensor_parallel_stores_do_not_cross),
        T(l1_read_under_request),
        T(scenario_1_full_hit),
        T(scenario_2_cache_miss),
        T(scenario_3_lookup_only),
        T(scenario_4_store_only),
        T(scenario_5_request_end_races_store),
        T(scenario_6_request_end_races_retrieve),
        T(scenario_7_multiple_stores),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
