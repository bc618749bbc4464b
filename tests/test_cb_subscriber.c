/* tests/test_cb_subscriber.c — the CacheBlend V3 server-side subscriber
 * (host/builders/cb_subscriber.c, cbt/cb.h) against the cacheblend-v3-observability
 * seed (§2, §2.1, §3) and the CB path of the request-event-span seed: the
 * cb.request root, the lookup and retrieve subtrees, the V3 close rule, the
 * hit-rate attributes, the point events and shutdown.
 *
 * Races are forced with gates on CPU streams, never with sleeps: a stream is
 * held at a gate while the CPU publishes CB_REQUEST_END, tu_flush() waits
 * until that has been dispatched, and only then is the gate opened. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"
#include "cbt/cb.h"

/* ---- helpers ------------------------------------------------------------------ */

static void assert_str_attr(const cbt_span *s, const char *key, const char *want)
{
    const cbt_attr *a = cbt_span_attr(s, tu_name(key));
    if (!a)
        fail_msg("span %s has no attribute %s", cbt_name_str(s->name), key);
    assert_int_equal(a->type, CBT_META_STR);
    assert_int_equal(a->str_len, strlen(want));
    assert_memory_equal(cbt_attr_str(s, a), want, a->str_len);
}

/* session_id and request_id on every span */
static void assert_ids(const cbt_span *s, const char *sid)
{
    assert_str_attr(s, "session_id", sid);
    assert_str_attr(s, "request_id", sid);
}

static void start_cb(void)
{
    tu_start(NULL);
    cbt_subscriber sub;
    assert_int_equal(cbt_cb_subscriber_create(0, &sub), CBT_OK);
    assert_int_equal(cbt_add_subscriber(&sub), CBT_OK);
}

static cbt_cb_stats cb_stats(void)
{
    cbt_cb_stats st = CBT_STRUCT_INIT(cbt_cb_stats);
    memset(&st, 0xa5, sizeof st);
    assert_int_equal(cbt_cb_stats_get(NULL, &st), CBT_OK);
    return st;
}

static void assert_no_open_sessions(void)
{
    assert_int_equal(cb_stats().sessions_open, 0);
}

/* The one cb.request of `sid`: a complete SERVER root with these times. */
static const cbt_span *check_root(const char *sid, uint64_t start_ns, uint64_t end_ns)
{
    assert_int_equal(tu_count("cb.request", sid), 1);
    const cbt_span *r = tu_need_span("cb.request", sid, 0);
    assert_true(tu_is_root(r));
    assert_int_equal(r->kind, CBT_SPAN_KIND_SERVER);
    assert_ids(r, sid);
    assert_int_equal(r->start_ns, start_ns);
    assert_int_equal(r->end_ns, end_ns);
    assert_int_equal(r->flags & CBT_SPANF_INCOMPLETE, 0);
    return r;
}

static const cbt_span *check_cb_root(const char *sid)
{
    return check_root(sid, tu_event_ts(CBT_EV_CB_REQUEST_START, sid, 0),
                      tu_event_ts(CBT_EV_CB_REQUEST_END, sid, 0));
}

/* A deferred root: it ends at the last CB_RETRIEVE_END (the nth), not at
 * CB_REQUEST_END (the V3 rule; docs/spans.md). */
static const cbt_span *check_cb_root_deferred(const char *sid, uint32_t last_retrieve_end)
{
    const cbt_span *r = check_root(sid, tu_event_ts(CBT_EV_CB_REQUEST_START, sid, 0),
                                   tu_event_ts(CBT_EV_CB_RETRIEVE_END, sid, last_retrieve_end));
    int64_t tail = (int64_t)(tu_event_ts(CBT_EV_CB_RETRIEVE_END, sid, last_retrieve_end) -
                             tu_event_ts(CBT_EV_CB_REQUEST_END, sid, 0));
    assert_int_equal(tu_attr_i64(r, "cbt.gpu_tail_ns"), tail);
    return r;
}

/* The nth `name` span of `sid`: a complete child of `parent` timed by its
 * START/END events. */
static const cbt_span *check_child(const char *name, const char *sid, uint32_t nth,
                                   const cbt_span *parent, cbt_event_type start_type,
                                   uint32_t start_nth, cbt_event_type end_type, uint32_t end_nth)
{
    const cbt_span *c = tu_need_span(name, sid, nth);
    assert_false(tu_is_root(c));
    if (!tu_is_child_of(c, parent))
        fail_msg("%s is not a child of %s", name, cbt_name_str(parent->name));
    assert_ids(c, sid);
    assert_int_equal(c->start_ns, tu_event_ts(start_type, sid, start_nth));
    assert_int_equal(c->end_ns, tu_event_ts(end_type, sid, end_nth));
    assert_int_equal(c->flags & CBT_SPANF_INCOMPLETE, 0);
    return c;
}

/* Publish (on `s`, or on the CPU when NULL) with int metadata given as
 * key, value pairs ending with a NULL key. */
static void pub(cbt_stream *s, cbt_event_type type, const char *sid, ...)
{
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, type, sid), CBT_OK);
    va_list ap;
    va_start(ap, sid);
    const char *k;
    while ((k = va_arg(ap, const char *)) != NULL) {
        int64_t v = va_arg(ap, int64_t);
        assert_int_equal(cbt_event_i64(&e, tu_name(k), v), CBT_OK);
    }
    va_end(ap);
    if (s)
        assert_int_equal(cbt_publish_on_stream(s, &e), CBT_OK);
    else
        assert_int_equal(cbt_publish(&e), CBT_OK);
}

static cbt_stream *new_stream(void)
{
    cbt_stream *s = NULL;
    assert_int_equal(cbt_stream_cpu_create(0, &s), CBT_OK);
    assert_non_null(s);
    return s;
}

static void assert_f64(double got, double want)
{
    if (got != want)
        fail_msg("got %.17g, expected %.17g", got, want);
}

/* ---- root and close rule ------------------------------------------------------ */

/* CB events before CB_REQUEST_START are counted and ignored (no lazy root, no
 * state); CB_REQUEST_START opens the root, CB_REQUEST_END closes it. */
static void root_on_request_start_not_before(void **state)
{
    (void)state;
    const char *sid = "cb-rs";
    start_cb();
    pub(NULL, CBT_EV_CB_LOOKUP_START, sid, NULL);
    pub(NULL, CBT_EV_CB_LOOKUP_END, sid, "hit_tokens", (int64_t)0, "requested_tokens",
        (int64_t)256, NULL);
    pub(NULL, CBT_EV_CB_RETRIEVE_SUBMITTED, sid, NULL);
    pub(NULL, CBT_EV_CB_RETRIEVE_NOOP, sid, NULL);
    tu_flush();
    /* no root: as LMCache 0.5.6 does, each is a root of its own, here in the
     * trace derived from the request id; counted as no_root */
    assert_int_equal(tu_span_count(), 2);
    const cbt_span *lone = tu_need_span("cb.lookup", sid, 0);
    assert_true(tu_is_root(lone));
    uint8_t want_trace[16];
    cbt_trace_id_from_request(sid, strlen(sid), want_trace);
    assert_memory_equal(lone->ctx.trace_id, want_trace, 16);
    assert_true(tu_is_root(tu_need_span("cb.retrieve.noop", sid, 0)));
    cbt_cb_stats st = cb_stats();
    assert_int_equal(st.roots_opened, 0);
    assert_int_equal(st.no_root, 2);
    assert_int_equal(st.sessions_open, 1); /* the submitted retrieve is pending */

    pub(NULL, CBT_EV_CB_REQUEST_START, sid, NULL);
    tu_flush();
    st = cb_stats();
    assert_int_equal(st.roots_opened, 1);
    assert_int_equal(st.sessions_open, 1);
    assert_int_equal(tu_span_count(), 2); /* open: not in the sink yet */

    /* CB_REQUEST_START began the request afresh: the orphan's pending
     * retrieve does not hold the root open */
    pub(NULL, CBT_EV_CB_REQUEST_END, sid, NULL);
    tu_flush();
    assert_int_equal(tu_span_count(), 3);
    const cbt_span *root = check_cb_root(sid);
    assert_false(tu_has_attr(root, "hit_rate"));
    assert_int_equal(tu_count("request", sid), 0); /* the MP subscriber saw nothing */
    st = cb_stats();
    assert_int_equal(st.roots_closed, 1);
    assert_int_equal(st.roots_deferred, 0);
    assert_no_open_sessions();
    tu_stop();
}

/* No GPU op submitted: CB_REQUEST_END closes the root at once. */
static void immediate_close_without_gpu_ops(void **state)
{
    (void)state;
    const char *sid = "cb-imm";
    start_cb();
    pub(NULL, CBT_EV_CB_REQUEST_START, sid, NULL);
    pub(NULL, CBT_EV_CB_LOOKUP_START, sid, NULL);
    pub(NULL, CBT_EV_CB_LOOKUP_END, sid, "hit_tokens", (int64_t)0, "requested_tokens",
        (int64_t)256, NULL);
    pub(NULL, CBT_EV_CB_REQUEST_END, sid, NULL);
    tu_flush();
    const cbt_span *root = check_cb_root(sid);
    check_child("cb.lookup", sid, 0, root, CBT_EV_CB_LOOKUP_START, 0, CBT_EV_CB_LOOKUP_END, 0);
    assert_int_equal(tu_count("cb.retrieve", sid), 0);
    cbt_cb_stats st = cb_stats();
    assert_int_equal(st.roots_deferred, 0);
    assert_int_equal(st.roots_closed, 1);
    assert_no_open_sessions();
    tu_stop();
}

/* A retrieve submitted and started on a stream held at a gate; CB_REQUEST_END
 * is dispatched first: the root waits, then closes at the CB_REQUEST_END time. */
static void close_deferred_until_retrieve_ends(void **state)
{
    (void)state;
    const char *sid = "cb-def1";
    start_cb();
    cbt_stream *s = new_stream();
    tu_gate *g = tu_gate_new();
    tu_reached r;
    tu_reached_init(&r);

    pub(NULL, CBT_EV_CB_REQUEST_START, sid, NULL);
    pub(NULL, CBT_EV_CB_RETRIEVE_SUBMITTED, sid, NULL);
    pub(s, CBT_EV_CB_RETRIEVE_START, sid, NULL);
    tu_reached_enqueue(&r, s);
    tu_gate_enqueue(g, s);
    tu_enqueue_sleep(s, 2000);
    pub(s, CBT_EV_CB_RETRIEVE_END, sid, "scattered_tokens", (int64_t)512, NULL);
    tu_reached_wait(&r);
    pub(NULL, CBT_EV_CB_REQUEST_END, sid, NULL);
    tu_flush();
    assert_int_equal(tu_count("cb.request", sid), 0);
    assert_int_equal(tu_count("cb.retrieve", sid), 0);
    cbt_cb_stats st = cb_stats();
    assert_int_equal(st.roots_deferred, 1);
    assert_int_equal(st.roots_closed, 0);
    assert_int_equal(st.sessions_open, 1);

    tu_gate_open(g);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    assert_true(tu_event_pos(CBT_EV_CB_REQUEST_END, sid, 0) < tu_event_pos(CBT_EV_CB_RETRIEVE_END, sid, 0));
    const cbt_span *root = check_cb_root_deferred(sid, 0);
    const cbt_span *rt = check_child("cb.retrieve", sid, 0, root, CBT_EV_CB_RETRIEVE_START, 0,
                                     CBT_EV_CB_RETRIEVE_END, 0);
    assert_int_equal(tu_attr_i64(rt, "scattered_tokens"), 512);
    assert_true(root->end_ns == rt->end_ns); /* no child sticks out */
    assert_true(tu_attr_i64(root, "cbt.gpu_tail_ns") > 0);
    assert_no_open_sessions();
    cbt_stream_destroy(s);
    tu_gate_free(g);
    tu_reached_fini(&r);
    tu_stop();
}

/* Two GPU ops on two streams: the first to finish does not close the root. */
static void close_waits_for_all_gpu_ops(void **state)
{
    (void)state;
    const char *sid = "cb-def2";
    start_cb();
    cbt_stream *s1 = new_stream(), *s2 = new_stream();
    tu_gate *g1 = tu_gate_new(), *g2 = tu_gate_new();
    tu_reached r1, r2;
    tu_reached_init(&r1);
    tu_reached_init(&r2);

    pub(NULL, CBT_EV_CB_REQUEST_START, sid, NULL);
    pub(NULL, CBT_EV_CB_RETRIEVE_SUBMITTED, sid, NULL);
    pub(NULL, CBT_EV_CB_RETRIEVE_SUBMITTED, sid, NULL);
    pub(s1, CBT_EV_CB_RETRIEVE_START, sid, NULL);
    tu_reached_enqueue(&r1, s1);
    tu_gate_enqueue(g1, s1);
    pub(s1, CBT_EV_CB_RETRIEVE_END, sid, NULL);
    pub(s2, CBT_EV_CB_RETRIEVE_START, sid, NULL);
    tu_reached_enqueue(&r2, s2);
    tu_gate_enqueue(g2, s2);
    pub(s2, CBT_EV_CB_RETRIEVE_END, sid, NULL);
    tu_reached_wait(&r1);
    tu_reached_wait(&r2);
    pub(NULL, CBT_EV_CB_REQUEST_END, sid, NULL);
    tu_flush();
    assert_int_equal(cb_stats().roots_deferred, 1);

    tu_gate_open(g1);
    assert_int_equal(cbt_stream_sync(s1), CBT_OK);
    tu_flush();
    assert_int_equal(tu_count("cb.retrieve", sid), 1);
    assert_int_equal(tu_count("cb.request", sid), 0); /* one GPU op still pending */

    tu_gate_open(g2);
    assert_int_equal(cbt_stream_sync(s2), CBT_OK);
    tu_flush();
    const cbt_span *root = check_cb_root_deferred(sid, 1);
    assert_int_equal(tu_count("cb.retrieve", sid), 2);
    assert_true(tu_is_child_of(tu_need_span("cb.retrieve", sid, 0), root));
    assert_true(tu_is_child_of(tu_need_span("cb.retrieve", sid, 1), root));
    assert_int_equal(cb_stats().roots_closed, 1);
    assert_no_open_sessions();
    cbt_stream_destroy(s1);
    cbt_stream_destroy(s2);
    tu_gate_free(g1);
    tu_gate_free(g2);
    tu_reached_fini(&r1);
    tu_reached_fini(&r2);
    tu_stop();
}

/* ---- the span tree -------------------------------------------------------------- */

/* The §2 server tree: each sub-span under its parent; no cb.prefix_lookup. */
static void sub_span_parents(void **state)
{
    (void)state;
    const char *sid = "cb-tree";
    start_cb();
    cbt_stream *s = new_stream();
    pub(NULL, CBT_EV_CB_REQUEST_START, sid, NULL);
    pub(NULL, CBT_EV_CB_LOOKUP_START, sid, "prefix_chunks", (int64_t)2, NULL);
    pub(NULL, CBT_EV_CB_FINGERPRINT_MATCH_START, sid, "n_probes", (int64_t)40, NULL);
    pub(NULL, CBT_EV_CB_FINGERPRINT_MATCH_END, sid, "matches", (int64_t)3, NULL);
    pub(NULL, CBT_EV_CB_SPARSE_PREFETCH_START, sid, "n_keys", (int64_t)4, NULL);
    pub(NULL, CBT_EV_L2_LOAD_TASK_SUBMITTED, sid, "chunks", (int64_t)2, NULL);
    pub(NULL, CBT_EV_L2_LOAD_TASK_COMPLETED, sid, "bytes", (int64_t)4096, NULL);
    pub(NULL, CBT_EV_CB_SPARSE_PREFETCH_END, sid, "l1_hits", (int64_t)2, NULL);
    pub(NULL, CBT_EV_CB_CLASSIFY_START, sid, NULL);
    pub(NULL, CBT_EV_CB_CLASSIFY_END, sid, "stale_chunks", (int64_t)1, NULL);
    pub(NULL, CBT_EV_CB_LOOKUP_END, sid, "hit_tokens", (int64_t)512, "requested_tokens",
        (int64_t)1024, "fingerprint_hits", (int64_t)3, "storage_hits", (int64_t)2, NULL);
    pub(NULL, CBT_EV_CB_RETRIEVE_SUBMITTED, sid, NULL);
    pub(s, CBT_EV_CB_RETRIEVE_START, sid, NULL);
    pub(s, CBT_EV_CB_SCATTER_START, sid, NULL);
    tu_enqueue_sleep(s, 1000);
    pub(s, CBT_EV_CB_SCATTER_END, sid, "scattered_tokens", (int64_t)500, "slot_writes",
        (int64_t)32000, "n_shifted", (int64_t)244, "partial_blocks", (int64_t)1, NULL);
    pub(s, CBT_EV_CB_RETRIEVE_END, sid, NULL);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    pub(NULL, CBT_EV_CB_REQUEST_END, sid, NULL);
    tu_flush();

    const cbt_span *root = check_cb_root(sid);
    const cbt_span *lk = check_child("cb.lookup", sid, 0, root, CBT_EV_CB_LOOKUP_START, 0,
                                     CBT_EV_CB_LOOKUP_END, 0);
    assert_int_equal(tu_attr_i64(lk, "prefix_chunks"), 2);
    const cbt_span *fp = check_child("cb.fingerprint_match", sid, 0, lk,
                                     CBT_EV_CB_FINGERPRINT_MATCH_START, 0,
                                     CBT_EV_CB_FINGERPRINT_MATCH_END, 0);
    assert_int_equal(tu_attr_i64(fp, "n_probes"), 40);
    assert_int_equal(tu_attr_i64(fp, "matches"), 3);
    const cbt_span *sp = check_child("cb.sparse_prefetch", sid, 0, lk,
                                     CBT_EV_CB_SPARSE_PREFETCH_START, 0,
                                     CBT_EV_CB_SPARSE_PREFETCH_END, 0);
    const cbt_span *l2 = check_child("cb.l2_load", sid, 0, sp, CBT_EV_L2_LOAD_TASK_SUBMITTED, 0,
                                     CBT_EV_L2_LOAD_TASK_COMPLETED, 0);
    assert_int_equal(tu_attr_i64(l2, "chunks"), 2);
    assert_int_equal(tu_attr_i64(l2, "bytes"), 4096);
    const cbt_span *cl = check_child("cb.classify", sid, 0, lk, CBT_EV_CB_CLASSIFY_START, 0,
                                     CBT_EV_CB_CLASSIFY_END, 0);
    assert_int_equal(tu_attr_i64(cl, "stale_chunks"), 1);
    assert_int_equal(tu_count("cb.prefix_lookup", NULL), 0);
    assert_int_equal(tu_count("cb.coordinator_match", NULL), 0);

    const cbt_span *rt = check_child("cb.retrieve", sid, 0, root, CBT_EV_CB_RETRIEVE_START, 0,
                                     CBT_EV_CB_RETRIEVE_END, 0);
    const cbt_span *sc = check_child("cb.scatter", sid, 0, rt, CBT_EV_CB_SCATTER_START, 0,
                                     CBT_EV_CB_SCATTER_END, 0);
    assert_int_equal(tu_attr_i64(sc, "scattered_tokens"), 500);
    assert_int_equal(tu_attr_i64(sc, "slot_writes"), 32000);
    assert_int_equal(tu_attr_i64(sc, "n_shifted"), 244);
    /* LMCache's n_shifted counts matches, not tokens: no *_tokens mirror */
    assert_false(tu_has_attr(sc, "n_shifted_tokens"));
    assert_int_equal(tu_attr_i64(sc, "partial_blocks"), 1);
    assert_f64(tu_attr_f64(sc, "scatter_ms"), (double)(sc->end_ns - sc->start_ns) / 1e6);
    assert_true(tu_attr_f64(sc, "scatter_ms") >= 1.0);
    assert_int_equal(tu_count("cb.rerope", NULL), 0); /* re-RoPE is folded into cb.scatter */

    /* root attributes: stamped at CB_LOOKUP_END (and CB_CLASSIFY_END) */
    assert_int_equal(tu_attr_i64(root, "hit_tokens"), 512);
    assert_int_equal(tu_attr_i64(root, "requested_tokens"), 1024);
    assert_f64(tu_attr_f64(root, "hit_rate"), 0.5);
    assert_int_equal(tu_attr_i64(root, "fingerprint_hits"), 3);
    assert_int_equal(tu_attr_i64(root, "storage_hits"), 2);
    assert_int_equal(tu_attr_i64(root, "stale_chunks"), 1);
    assert_int_equal(tu_span_count(), 8);
    cbt_cb_stats st = cb_stats();
    assert_int_equal(st.children_opened, 7);
    assert_int_equal(st.children_closed, 7);
    assert_int_equal(st.unmatched_end, 0);
    assert_no_open_sessions();
    cbt_stream_destroy(s);
    tu_stop();
}

/* With a coordinator configured, cb.coordinator_match replaces the local
 * matcher under cb.lookup. */
static void coordinator_match_under_lookup(void **state)
{
    (void)state;
    const char *sid = "cb-coord";
    start_cb();
    pub(NULL, CBT_EV_CB_REQUEST_START, sid, NULL);
    pub(NULL, CBT_EV_CB_LOOKUP_START, sid, NULL);
    pub(NULL, CBT_EV_CB_COORDINATOR_MATCH_START, sid, NULL);
    pub(NULL, CBT_EV_CB_COORDINATOR_MATCH_END, sid, "matches", (int64_t)1, NULL);
    pub(NULL, CBT_EV_CB_LOOKUP_END, sid, "hit_tokens", (int64_t)256, "requested_tokens",
        (int64_t)1024, NULL);
    pub(NULL, CBT_EV_CB_REQUEST_END, sid, NULL);
    tu_flush();
    const cbt_span *root = check_cb_root(sid);
    const cbt_span *lk = check_child("cb.lookup", sid, 0, root, CBT_EV_CB_LOOKUP_START, 0,
                                     CBT_EV_CB_LOOKUP_END, 0);
    check_child("cb.coordinator_match", sid, 0, lk, CBT_EV_CB_COORDINATOR_MATCH_START, 0,
                CBT_EV_CB_COORDINATOR_MATCH_END, 0);
    assert_int_equal(tu_count("cb.fingerprint_match", sid), 0);
    assert_f64(tu_attr_f64(root, "hit_rate"), 0.25);
    assert_no_open_sessions();
    tu_stop();
}

/* cb.start_load_kv fires twice (partial, then full block allocation): two
 * cb.retrieve children, each with its own cb.scatter; the first scatters fewer
 * tokens. */
static void two_retrieves_from_start_load_kv_twice(void **state)
{
    (void)state;
    const char *sid = "cb-2x";
    start_cb();
    cbt_stream *s = new_stream();
    pub(NULL, CBT_EV_CB_REQUEST_START, sid, NULL);
    for (int pass = 0; pass < 2; pass++) {
        int64_t tokens = pass == 0 ? 300 : 724;
        pub(NULL, CBT_EV_CB_RETRIEVE_SUBMITTED, sid, NULL);
        pub(s, CBT_EV_CB_RETRIEVE_START, sid, NULL);
        pub(s, CBT_EV_CB_SCATTER_START, sid, NULL);
        pub(s, CBT_EV_CB_SCATTER_END, sid, "scattered_tokens", tokens, "slot_writes",
            tokens * 64, NULL);
        pub(s, CBT_EV_CB_RETRIEVE_END, sid, "scattered_tokens", tokens, NULL);
    }
    pub(NULL, CBT_EV_CB_REQUEST_END, sid, NULL);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    /* the CPU's CB_REQUEST_END may be dispatched before or after the last
     * stream END: the root ends at whichever is later */
    const cbt_span *root = tu_event_pos(CBT_EV_CB_REQUEST_END, sid, 0) <
                                   tu_event_pos(CBT_EV_CB_RETRIEVE_END, sid, 1)
                               ? check_cb_root_deferred(sid, 1)
                               : check_cb_root(sid);
    assert_int_equal(tu_count("cb.retrieve", sid), 2);
    const cbt_span *r1 = check_child("cb.retrieve", sid, 0, root, CBT_EV_CB_RETRIEVE_START, 0,
                                     CBT_EV_CB_RETRIEVE_END, 0);
    const cbt_span *r2 = check_child("cb.retrieve", sid, 1, root, CBT_EV_CB_RETRIEVE_START, 1,
                                     CBT_EV_CB_RETRIEVE_END, 1);
    const cbt_span *s1 = check_child("cb.scatter", sid, 0, r1, CBT_EV_CB_SCATTER_START, 0,
                                     CBT_EV_CB_SCATTER_END, 0);
    const cbt_span *s2 = check_child("cb.scatter", sid, 1, r2, CBT_EV_CB_SCATTER_START, 1,
                                     CBT_EV_CB_SCATTER_END, 1);
    assert_true(tu_attr_i64(r1, "scattered_tokens") < tu_attr_i64(r2, "scattered_tokens"));
    assert_int_equal(tu_attr_i64(s1, "scattered_tokens"), 300);
    assert_int_equal(tu_attr_i64(s2, "scattered_tokens"), 724);
    assert_int_equal(tu_attr_i64(s1, "slot_writes"), 300 * 64);
    assert_no_open_sessions();
    cbt_stream_destroy(s);
    tu_stop();
}

/* ---- hit rate --------------------------------------------------------------------- */

static const cbt_span *run_lookup(const char *sid, const char *k1, int64_t v1, const char *k2,
                                  int64_t v2, const char *k3, int64_t v3)
{
    start_cb();
    pub(NULL, CBT_EV_CB_REQUEST_START, sid, NULL);
    pub(NULL, CBT_EV_CB_LOOKUP_START, sid, NULL);
    pub(NULL, CBT_EV_CB_LOOKUP_END, sid, k1, v1, k2, v2, k3, v3, NULL);
    pub(NULL, CBT_EV_CB_REQUEST_END, sid, NULL);
    tu_flush();
    assert_no_open_sessions();
    return check_cb_root(sid);
}

static void assert_hit(const cbt_span *root, int64_t hit, int64_t req, double rate)
{
    assert_int_equal(tu_attr_i64(root, "hit_tokens"), hit);
    assert_int_equal(tu_attr_i64(root, "requested_tokens"), req);
    assert_f64(tu_attr_f64(root, "hit_rate"), rate);
}

static void hit_rate_half(void **state)
{
    (void)state;
    const cbt_span *root = run_lookup("cb-hr1", "hit_tokens", 512, "requested_tokens", 1024,
                                      NULL, 0);
    assert_hit(root, 512, 1024, 0.5);
    tu_stop();
}

static void hit_rate_zero_over_zero(void **state)
{
    (void)state;
    const cbt_span *root = run_lookup("cb-hr2", "hit_tokens", 0, "requested_tokens", 0, NULL, 0);
    assert_hit(root, 0, 0, 0.0);
    tu_stop();
}

static void hit_rate_zero_over_1024(void **state)
{
    (void)state;
    const cbt_span *root = run_lookup("cb-hr3", "hit_tokens", 0, "requested_tokens", 1024,
                                      NULL, 0);
    assert_hit(root, 0, 1024, 0.0);
    tu_stop();
}

static void hit_rate_full_with_prefix_hits(void **state)
{
    (void)state;
    const cbt_span *root = run_lookup("cb-hr4", "hit_tokens", 512, "requested_tokens", 512,
                                      "prefix_hits", 2);
    assert_hit(root, 512, 512, 1.0);
    assert_int_equal(tu_attr_i64(root, "prefix_hits"), 2);
    tu_stop();
}

/* V3: hit_tokens counts both reuse paths (disjoint ranges), both recorded. */
static void hit_rate_prefix_plus_non_prefix(void **state)
{
    (void)state;
    const cbt_span *root = run_lookup("cb-hr5", "prefix_hit_tokens", 256, "non_prefix_hit_tokens",
                                      256, "requested_tokens", 1024);
    assert_hit(root, 512, 1024, 0.5);
    assert_int_equal(tu_attr_i64(root, "prefix_hit_tokens"), 256);
    assert_int_equal(tu_attr_i64(root, "non_prefix_hit_tokens"), 256);
    tu_stop();
}

/* ---- point events, unmatched ends, shutdown ------------------------------------ */

/* Fingerprints registered, chunks evicted and a retrieve no-op (with its
 * reason) appear as zero-duration children of cb.request; a session-less
 * eviction as a zero-duration root of its own. */
static void point_events_appear(void **state)
{
    (void)state;
    const char *sid = "cb-pt";
    start_cb();
    pub(NULL, CBT_EV_CB_REQUEST_START, sid, NULL);
    pub(NULL, CBT_EV_CB_FINGERPRINTS_REGISTERED, sid, "chunks", (int64_t)4, NULL);
    pub(NULL, CBT_EV_CB_CHUNKS_EVICTED, sid, "chunks", (int64_t)2, NULL);
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, CBT_EV_CB_RETRIEVE_NOOP, sid), CBT_OK);
    assert_int_equal(cbt_event_str(&e, tu_name("reason"), "no_match"), CBT_OK);
    assert_int_equal(cbt_publish(&e), CBT_OK);
    pub(NULL, CBT_EV_CB_CHUNKS_EVICTED, NULL, "chunks", (int64_t)7, NULL);
    pub(NULL, CBT_EV_CB_REQUEST_END, sid, NULL);
    tu_flush();
    const cbt_span *root = check_cb_root(sid);

    const cbt_span *fr = tu_need_span("cb.fingerprints.registered", sid, 0);
    const cbt_span *ce = tu_need_span("cb.chunks.evicted", sid, 0);
    const cbt_span *no = tu_need_span("cb.retrieve.noop", sid, 0);
    const cbt_span *pts[] = {fr, ce, no};
    const cbt_event_type tys[] = {CBT_EV_CB_FINGERPRINTS_REGISTERED, CBT_EV_CB_CHUNKS_EVICTED,
                                  CBT_EV_CB_RETRIEVE_NOOP};
    for (int i = 0; i < 3; i++) {
        assert_true(tu_is_child_of(pts[i], root));
        assert_ids(pts[i], sid);
        assert_int_equal(pts[i]->start_ns, tu_event_ts(tys[i], sid, 0));
        assert_int_equal(pts[i]->end_ns, pts[i]->start_ns);
    }
    assert_int_equal(tu_attr_i64(fr, "chunks"), 4);
    assert_int_equal(tu_attr_i64(ce, "chunks"), 2);
    assert_str_attr(no, "reason", "no_match");

    assert_int_equal(tu_count("cb.chunks.evicted", NULL), 2);
    const cbt_span *g = tu_find("cb.chunks.evicted", NULL, 0);
    if (g == ce)
        g = tu_find("cb.chunks.evicted", NULL, 1);
    assert_true(tu_is_root(g));
    assert_int_equal(tu_attr_i64(g, "chunks"), 7);
    assert_int_equal(g->end_ns, g->start_ns);
    assert_int_equal(cb_stats().point_events, 4);
    assert_no_open_sessions();
    tu_stop();
}

/* An END with no open START is counted and ignored; the request still closes. */
static void unmatched_end_counted(void **state)
{
    (void)state;
    const char *sid = "cb-unm";
    start_cb();
    pub(NULL, CBT_EV_CB_REQUEST_START, sid, NULL);
    pub(NULL, CBT_EV_CB_SCATTER_END, sid, NULL);
    pub(NULL, CBT_EV_CB_LOOKUP_END, sid, NULL);
    pub(NULL, CBT_EV_CB_REQUEST_END, sid, NULL);
    pub(NULL, CBT_EV_CB_REQUEST_END, sid, NULL); /* a sibling's: not an error */
    pub(NULL, CBT_EV_CB_REQUEST_END, "cb-never", NULL);
    tu_flush();
    check_cb_root(sid);
    assert_int_equal(tu_span_count(), 1);
    cbt_cb_stats st = cb_stats();
    assert_int_equal(st.unmatched_end, 2);
    assert_int_equal(st.duplicate_request_end, 0);
    assert_int_equal(st.sibling_request_end, 1);
    assert_int_equal(st.request_end_unknown, 1);
    assert_int_equal(st.roots_closed, 1);
    assert_no_open_sessions();
    tu_stop();
}

/* One retrieve call of a fresh request, its CB_RETRIEVE_END carrying `k` as a
 * bool (str NULL) or a string; returns lmcache_blend.retrieve_failures and
 * retrieve_requests added by it. */
static void retrieve_with(const char *sid, const char *k, bool b, const char *str,
                          uint64_t *failures, uint64_t *requests)
{
    cbt_blend_metrics *m = cbt_blend_metrics_current();
    assert_non_null(m);
    cbt_blend_snapshot before, after;
    assert_int_equal(cbt_blend_snapshot_take(m, &before), CBT_OK);
    pub(NULL, CBT_EV_CB_REQUEST_START, sid, NULL);
    pub(NULL, CBT_EV_CB_RETRIEVE_SUBMITTED, sid, NULL);
    pub(NULL, CBT_EV_CB_RETRIEVE_START, sid, NULL);
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, CBT_EV_CB_RETRIEVE_END, sid), CBT_OK);
    if (k && str)
        assert_int_equal(cbt_event_str(&e, tu_name(k), str), CBT_OK);
    else if (k)
        assert_int_equal(cbt_event_bool(&e, tu_name(k), b), CBT_OK);
    assert_int_equal(cbt_publish(&e), CBT_OK);
    pub(NULL, CBT_EV_CB_REQUEST_END, sid, NULL);
    tu_flush();
    assert_int_equal(cbt_blend_snapshot_take(m, &after), CBT_OK);
    *failures = after.counters[CBT_BC_RETRIEVE_FAILURES] - before.counters[CBT_BC_RETRIEVE_FAILURES];
    *requests = after.counters[CBT_BC_RETRIEVE_REQUESTS] - before.counters[CBT_BC_RETRIEVE_REQUESTS];
}

/* The END's failure rule (failed = true, success = false as LMCache 0.5.6
 * sends it, an error / exception string) marks cb.retrieve ERROR and counts
 * in lmcache_blend.retrieve_failures; success = true does neither. */
static void retrieve_failure_status_and_metric(void **state)
{
    (void)state;
    static const struct {
        const char *sid, *k;
        bool b;
        const char *str;
        bool failed;
    } cases[] = {
        {"cbf-success-false", "success", false, NULL, true},
        {"cbf-success-true", "success", true, NULL, false},
        {"cbf-failed-true", "failed", true, NULL, true},
        {"cbf-error", "error", false, "read failed", true},
        {"cbf-exception", "exception", false, "RuntimeError", true},
        {"cbf-plain", NULL, false, NULL, false},
    };
    start_cb();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t failures = 0, requests = 0;
        retrieve_with(cases[i].sid, cases[i].k, cases[i].b, cases[i].str, &failures, &requests);
        const cbt_span *rt = tu_need_span("cb.retrieve", cases[i].sid, 0);
        int want = cases[i].failed ? CBT_SPAN_STATUS_ERROR : CBT_SPAN_STATUS_UNSET;
        if (rt->status != want)
            fail_msg("%s: status %d, expected %d", cases[i].sid, rt->status, want);
        assert_int_equal(requests, 1);
        if (failures != (cases[i].failed ? 1u : 0u))
            fail_msg("%s: retrieve_failures +%llu", cases[i].sid, (unsigned long long)failures);
        check_cb_root(cases[i].sid);
    }
    assert_no_open_sessions();
    tu_stop();
}

/* A CB_RETRIEVE_END without its START, after CB_RETRIEVE_SUBMITTED and a
 * deferred CB_REQUEST_END: the retrieve finished (LMCache 0.5.6 decrements
 * too), so it counts in the metrics and the root closes, not at shutdown;
 * the END still counts as unmatched. */
static void unmatched_end_retires_submitted(void **state)
{
    (void)state;
    const char *sid = "cb-unm-sub";
    start_cb();
    cbt_blend_metrics *m = cbt_blend_metrics_current();
    assert_non_null(m);
    cbt_blend_snapshot before, after;
    assert_int_equal(cbt_blend_snapshot_take(m, &before), CBT_OK);
    pub(NULL, CBT_EV_CB_REQUEST_START, sid, NULL);
    pub(NULL, CBT_EV_CB_RETRIEVE_SUBMITTED, sid, NULL);
    pub(NULL, CBT_EV_CB_REQUEST_END, sid, NULL);
    tu_flush();
    assert_int_equal(tu_count("cb.request", sid), 0);
    assert_int_equal(cb_stats().roots_deferred, 1);
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, CBT_EV_CB_RETRIEVE_END, sid), CBT_OK);
    assert_int_equal(cbt_event_bool(&e, tu_name("success"), false), CBT_OK);
    assert_int_equal(cbt_publish(&e), CBT_OK);
    tu_flush();
    check_cb_root_deferred(sid, 0);
    cbt_cb_stats st = cb_stats();
    assert_int_equal(st.unmatched_end, 1);
    assert_int_equal(st.roots_closed, 1);
    assert_int_equal(tu_count("cb.retrieve", sid), 0);
    assert_int_equal(cbt_blend_snapshot_take(m, &after), CBT_OK);
    assert_int_equal(after.counters[CBT_BC_RETRIEVE_REQUESTS] - before.counters[CBT_BC_RETRIEVE_REQUESTS], 1);
    assert_int_equal(after.counters[CBT_BC_RETRIEVE_FAILURES] - before.counters[CBT_BC_RETRIEVE_FAILURES], 1);
    assert_no_open_sessions();
    tu_stop();
    assert_int_equal(tu_count("cb.request", sid), 1);
    assert_int_equal(tu_need_span("cb.request", sid, 0)->flags & CBT_SPANF_INCOMPLETE, 0);
}

/* Shutdown ends every open span incomplete, children under their parents. */
static void shutdown_marks_incomplete(void **state)
{
    (void)state;
    const char *sid = "cb-shut";
    start_cb();
    cbt_stream *s = new_stream();
    pub(NULL, CBT_EV_CB_REQUEST_START, sid, NULL);
    pub(NULL, CBT_EV_CB_LOOKUP_START, sid, NULL);
    pub(NULL, CBT_EV_CB_SPARSE_PREFETCH_START, sid, NULL);
    pub(NULL, CBT_EV_L2_LOAD_TASK_SUBMITTED, sid, NULL);
    pub(NULL, CBT_EV_CB_RETRIEVE_SUBMITTED, sid, NULL);
    pub(s, CBT_EV_CB_RETRIEVE_START, sid, NULL);
    pub(s, CBT_EV_CB_SCATTER_START, sid, NULL);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    pub(NULL, CBT_EV_CB_REQUEST_END, sid, NULL); /* deferred: a GPU op is pending */
    tu_flush();
    assert_int_equal(tu_span_count(), 0);
    cbt_cb_stats st = cb_stats();
    assert_int_equal(st.sessions_open, 1);
    assert_int_equal(st.children_opened, 5);
    assert_int_equal(st.roots_deferred, 1);
    cbt_stream_destroy(s);
    tu_stop();

    assert_int_equal(tu_span_count(), 6);
    const cbt_span *root = tu_need_span("cb.request", sid, 0);
    assert_true(tu_is_root(root));
    assert_true(root->flags & CBT_SPANF_INCOMPLETE);
    assert_int_equal(root->start_ns, tu_event_ts(CBT_EV_CB_REQUEST_START, sid, 0));
    assert_int_equal(root->end_ns, tu_event_ts(CBT_EV_CB_REQUEST_END, sid, 0));
    const cbt_span *lk = tu_need_span("cb.lookup", sid, 0);
    const cbt_span *sp = tu_need_span("cb.sparse_prefetch", sid, 0);
    const cbt_span *l2 = tu_need_span("cb.l2_load", sid, 0);
    const cbt_span *rt = tu_need_span("cb.retrieve", sid, 0);
    const cbt_span *sc = tu_need_span("cb.scatter", sid, 0);
    assert_true(tu_is_child_of(lk, root));
    assert_true(tu_is_child_of(sp, lk));
    assert_true(tu_is_child_of(l2, sp));
    assert_true(tu_is_child_of(rt, root));
    assert_true(tu_is_child_of(sc, rt));
    const cbt_span *all[] = {lk, sp, l2, rt, sc};
    for (int i = 0; i < 5; i++) {
        assert_true(all[i]->flags & CBT_SPANF_INCOMPLETE);
        assert_true(all[i]->end_ns >= all[i]->start_ns);
    }
}

/* Many requests one after another hold no state once complete; an id may be
 * reused by a new request. */
static void no_state_left_after_requests(void **state)
{
    (void)state;
    start_cb();
    char sid[32];
    for (int i = 0; i < 50; i++) {
        snprintf(sid, sizeof sid, "cb-many-%d", i % 10);
        pub(NULL, CBT_EV_CB_REQUEST_START, sid, NULL);
        pub(NULL, CBT_EV_CB_LOOKUP_START, sid, NULL);
        pub(NULL, CBT_EV_CB_SPARSE_PREFETCH_START, sid, NULL);
        pub(NULL, CBT_EV_CB_SPARSE_PREFETCH_END, sid, NULL);
        pub(NULL, CBT_EV_CB_LOOKUP_END, sid, "hit_tokens", (int64_t)i, "requested_tokens",
            (int64_t)100, NULL);
        pub(NULL, CBT_EV_CB_RETRIEVE_SUBMITTED, sid, NULL);
        pub(NULL, CBT_EV_CB_REQUEST_END, sid, NULL);
        pub(NULL, CBT_EV_CB_RETRIEVE_START, sid, NULL);
        pub(NULL, CBT_EV_CB_RETRIEVE_END, sid, NULL);
    }
    tu_flush();
    cbt_cb_stats st = cb_stats();
    assert_int_equal(st.roots_opened, 50);
    assert_int_equal(st.roots_closed, 50);
    assert_int_equal(st.roots_deferred, 50);
    assert_int_equal(st.duplicate_request_end, 0);
    assert_int_equal(st.unmatched_end, 0);
    assert_int_equal(tu_count("cb.request", NULL), 50);
    assert_no_open_sessions();
    assert_int_equal(cbt_registry_count(cbt_tracer_get()), 0);
    tu_stop();
}

#define T(f) cmocka_unit_test_teardown(f, tu_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(root_on_request_start_not_before),
        T(immediate_close_without_gpu_ops),
        T(close_deferred_until_retrieve_ends),
        T(close_waits_for_all_gpu_ops),
        T(sub_span_parents),
        T(coordinator_match_under_lookup),
        T(two_retrieves_from_start_load_kv_twice),
        T(hit_rate_half),
        T(hit_rate_zero_over_zero),
        T(hit_rate_zero_over_1024),
        T(hit_rate_full_with_prefix_hits),
        T(hit_rate_prefix_plus_non_prefix),
        T(point_events_appear),
        T(unmatched_end_counted),
        T(retrieve_failure_status_and_metric),
        T(unmatched_end_retires_submitted),
        T(shutdown_marks_incomplete),
        T(no_state_left_after_requests),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
