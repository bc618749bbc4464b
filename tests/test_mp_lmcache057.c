/* tests/test_mp_lmcache057.c — the MP subscriber's LMCache 0.5.7 behaviour
 * (host/builders/mp_subscriber.c; docs/lmcache-0.5.7.md, docs/spans.md):
 *   - honest root attributes: MP_LOOKUP_PREFETCH_END puts on the root only
 *     what it carried (a count its key, a rate both of its keys), never a 0
 *     nobody measured;
 *   - 0.5.7's request-level keys (apc_covered_tokens, prompt_tokens,
 *     engine_hit_tokens, request_hit_tokens) and their rates, and the
 *     early-exit reason load_policy_recompute;
 *   - token traces: with token_trace on, one zero-length "mp.request.trace"
 *     per MP_LOOKUP carrying token_ids, under "request", else "cb.request",
 *     else a root; off, nothing (the path does not even take MP_LOOKUP). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "cbt/array.h"

/* Publish `type` for `sid` with the NULL-terminated (key, value) int pairs,
 * then an optional string value. */
static void pub_ints(cbt_event_type type, const char *sid, const char *skey, const char *sval,
                     ...)
{
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, type, sid), CBT_OK);
    va_list ap;
    va_start(ap, sval);
    for (const char *k; (k = va_arg(ap, const char *));)
        assert_int_equal(cbt_event_i64(&e, tu_name(k), va_arg(ap, int64_t)), CBT_OK);
    va_end(ap);
    if (skey)
        assert_int_equal(cbt_event_str(&e, tu_name(skey), sval), CBT_OK);
    assert_int_equal(cbt_publish(&e), CBT_OK);
}

static const char *attr_str(const cbt_span *s, const char *key, size_t *len)
{
    const cbt_attr *a = cbt_span_attr(s, tu_name(key));
    assert_non_null(a);
    assert_int_equal(a->type, CBT_META_STR);
    *len = a->str_len;
    return cbt_attr_str(s, a);
}

static void assert_str_attr(const cbt_span *s, const char *key, const char *want)
{
    size_t n = 0;
    const char *v = attr_str(s, key, &n);
    assert_int_equal(n, strlen(want));
    assert_memory_equal(v, want, n);
}

static void assert_rate(const cbt_span *s, const char *key, double want)
{
    double got = tu_attr_f64(s, key);
    if (got != want)
        fail_msg("%s %.17g, expected %.17g", key, got, want);
}

static const char *const k_measured_only[] = {
    "l1_hit_tokens", "l2_hit_tokens", "l1_hit_rate", "l2_hit_rate", "l1_hit_keys",
    "l2_hit_keys", "apc_covered_tokens", "prompt_tokens", "engine_hit_tokens",
    "request_hit_tokens", "engine_hit_rate", "request_hit_rate", "early_exit_reason"};

/* The seed's lookup end (hit_tokens, requested_tokens only): the root gets
 * those two and hit_rate, and none of the attributes made of keys it did not
 * carry (cbt used to set l1_hit_tokens=0, l1_hit_rate=0.0, ... there). */
static void seed_lookup_end_sets_only_what_it_carried(void **state)
{
    (void)state;
    const char *sid = "honest-1";
    tu_start(NULL);
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_START, sid);
    tu_pub_i64(CBT_EV_MP_LOOKUP_PREFETCH_END, sid, "hit_tokens", 512, "requested_tokens", 1024);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    const cbt_span *root = tu_need_span("request", sid, 0);
    assert_int_equal(tu_attr_i64(root, "hit_tokens"), 512);
    assert_int_equal(tu_attr_i64(root, "requested_tokens"), 1024);
    assert_rate(root, "hit_rate", 0.5);
    for (size_t i = 0; i < sizeof k_measured_only / sizeof k_measured_only[0]; i++)
        if (tu_has_attr(root, k_measured_only[i]))
            fail_msg("the root has %s, which the event did not carry", k_measured_only[i]);
    tu_stop();
}

/* A lookup end with no values at all: no hit attribute, not even hit_rate. */
static void empty_lookup_end_sets_nothing(void **state)
{
    (void)state;
    const char *sid = "honest-2";
    tu_start(NULL);
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_START, sid);
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_END, sid);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    const cbt_span *root = tu_need_span("request", sid, 0);
    assert_false(tu_has_attr(root, "hit_tokens"));
    assert_false(tu_has_attr(root, "requested_tokens"));
    assert_false(tu_has_attr(root, "hit_rate"));
    /* hit_tokens alone: the count, no rate */
    tu_stop();
    tu_start(NULL);
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_START, sid);
    tu_pub_i64(CBT_EV_MP_LOOKUP_PREFETCH_END, sid, "hit_tokens", 256, "l1_hit_tokens", 256);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    root = tu_need_span("request", sid, 0);
    assert_int_equal(tu_attr_i64(root, "hit_tokens"), 256);
    assert_int_equal(tu_attr_i64(root, "l1_hit_tokens"), 256);
    assert_false(tu_has_attr(root, "hit_rate"));
    assert_false(tu_has_attr(root, "l1_hit_rate"));
    tu_stop();
}

/* LMCache 0.5.7's MP_LOOKUP_PREFETCH_END as _consume_prefetch_result sends
 * it (14 values): every count copied, the rates over requested_tokens and
 * over prompt_tokens. */
static void lmcache_057_lookup_end(void **state)
{
    (void)state;
    const char *sid = "v057-1";
    tu_start(NULL);
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_START, sid);
    pub_ints(CBT_EV_MP_LOOKUP_PREFETCH_END, sid, "early_exit_reason", "", "found_count",
             (int64_t)6, "requested_tokens", (int64_t)1024, "apc_covered_tokens", (int64_t)512,
             "hit_tokens", (int64_t)768, "l1_hit_tokens", (int64_t)512, "l2_hit_tokens",
             (int64_t)256, "prompt_tokens", (int64_t)1600, "engine_hit_tokens", (int64_t)400,
             "request_hit_tokens", (int64_t)1280, "l1_hit_keys", (int64_t)4, "l2_hit_keys",
             (int64_t)2, (const char *)NULL);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    const cbt_span *root = tu_need_span("request", sid, 0);
    assert_int_equal(tu_attr_i64(root, "hit_tokens"), 768);
    assert_int_equal(tu_attr_i64(root, "requested_tokens"), 1024);
    assert_rate(root, "hit_rate", 0.75);
    assert_rate(root, "l1_hit_rate", 0.5);
    assert_rate(root, "l2_hit_rate", 0.25);
    assert_int_equal(tu_attr_i64(root, "apc_covered_tokens"), 512);
    assert_int_equal(tu_attr_i64(root, "prompt_tokens"), 1600);
    assert_int_equal(tu_attr_i64(root, "engine_hit_tokens"), 400);
    assert_int_equal(tu_attr_i64(root, "request_hit_tokens"), 1280);
    assert_rate(root, "engine_hit_rate", 0.25);
    assert_rate(root, "request_hit_rate", 0.8);
    assert_int_equal(tu_attr_i64(root, "l1_hit_keys"), 4);
    assert_int_equal(tu_attr_i64(root, "l2_hit_keys"), 2);
    assert_str_attr(root, "early_exit_reason", "");
    tu_stop();
}

/* The load policy declined the lookup: requested_tokens stays, nothing hit,
 * the reason is load_policy_recompute; an empty prompt gives 0.0 rates. */
static void load_policy_recompute(void **state)
{
    (void)state;
    const char *sid = "v057-2";
    tu_start(NULL);
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_START, sid);
    pub_ints(CBT_EV_MP_LOOKUP_PREFETCH_END, sid, "early_exit_reason", "load_policy_recompute",
             "found_count", (int64_t)0, "requested_tokens", (int64_t)768, "apc_covered_tokens",
             (int64_t)256, "hit_tokens", (int64_t)0, "l1_hit_tokens", (int64_t)0,
             "l2_hit_tokens", (int64_t)0, "prompt_tokens", (int64_t)0, "engine_hit_tokens",
             (int64_t)0, "request_hit_tokens", (int64_t)256, (const char *)NULL);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    const cbt_span *root = tu_need_span("request", sid, 0);
    assert_str_attr(root, "early_exit_reason", "load_policy_recompute");
    assert_rate(root, "hit_rate", 0.0);
    assert_int_equal(tu_attr_i64(root, "apc_covered_tokens"), 256);
    assert_rate(root, "engine_hit_rate", 0.0);
    assert_rate(root, "request_hit_rate", 0.0); /* prompt 0: 0.0, not 256 (LMCache: / 1) */
    assert_false(tu_has_attr(root, "l1_hit_keys"));
    tu_stop();
}

/* ---- token traces ------------------------------------------------------------ */

static const int64_t k_ids[] = {128000, 9906, 11, 1917, 0, -1, 151643};
#define N_IDS (sizeof k_ids / sizeof k_ids[0])

/* cbt_init without its MP subscriber, then one with token_trace as given
 * (and a CacheBlend one when `cb`). */
static void start_token_trace(uint32_t token_trace, bool cb)
{
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    c.mp_subscriber = false;
    tu_start(&c);
    cbt_subscriber sub;
    cbt_tree_options o = CBT_STRUCT_INIT(cbt_tree_options);
    o.token_trace = token_trace;
    assert_int_equal(cbt_mp_subscriber_create_opts(&o, &sub), CBT_OK);
    assert_int_equal(cbt_add_subscriber(&sub), CBT_OK);
    if (cb) {
        cbt_tree_options co = CBT_STRUCT_INIT(cbt_tree_options);
        assert_int_equal(cbt_cb_subscriber_create_opts(&co, &sub), CBT_OK);
        assert_int_equal(cbt_add_subscriber(&sub), CBT_OK);
    }
}

/* MP_LOOKUP as modules/lookup.py publishes it (a subset: the values a cbt
 * event holds), token_ids an int array unless `no_ids`. */
static void pub_lookup(const char *sid, bool no_ids)
{
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, CBT_EV_MP_LOOKUP, sid), CBT_OK);
    assert_int_equal(cbt_event_str(&e, CBT_N_REQUEST_ID, sid), CBT_OK);
    assert_int_equal(cbt_event_str(&e, CBT_N_MODEL_NAME, "meta-llama/Llama-3.1-8B-Instruct"),
                     CBT_OK);
    assert_int_equal(cbt_event_i64(&e, CBT_N_CHUNK_SIZE, 256), CBT_OK);
    assert_int_equal(cbt_event_i64(&e, CBT_N_SEQ_LEN, (int64_t)N_IDS), CBT_OK);
    if (!no_ids)
        assert_int_equal(cbt_event_array_i64(&e, CBT_N_TOKEN_IDS, k_ids, N_IDS), CBT_OK);
    assert_int_equal(cbt_publish(&e), CBT_OK);
}

static uint64_t token_trace_spans(void)
{
    cbt_mp_stats st = CBT_STRUCT_INIT(cbt_mp_stats);
    assert_int_equal(cbt_mp_stats_get(NULL, &st), CBT_OK);
    return st.token_trace_spans;
}

/* The span's attributes: session_id, lmcache.model, lmcache.input_ids (the
 * ids in order); zero length at the MP_LOOKUP's time. */
static void check_trace_span(const cbt_span *t, const char *sid)
{
    assert_int_equal(t->kind, CBT_SPAN_KIND_INTERNAL);
    assert_int_equal(t->start_ns, t->end_ns);
    assert_int_equal(t->start_ns, tu_event_ts(CBT_EV_MP_LOOKUP, sid, 0));
    assert_str_attr(t, "session_id", sid);
    assert_str_attr(t, "lmcache.model", "meta-llama/Llama-3.1-8B-Instruct");
    const cbt_attr *a = cbt_span_attr(t, CBT_N_LMCACHE_INPUT_IDS);
    assert_non_null(a);
    cbt_array arr;
    assert_true(cbt_attr_array(a, &arr));
    assert_int_equal(arr.type, CBT_ARRAY_I64);
    assert_int_equal(arr.count, N_IDS);
    cbt_array_iter it;
    cbt_array_iter_init(&it, &arr);
    int64_t v;
    for (size_t i = 0; i < N_IDS; i++) {
        assert_true(cbt_array_next_i64(&it, &v));
        assert_int_equal(v, k_ids[i]);
    }
    assert_false(cbt_array_next_i64(&it, &v));
    assert_false(tu_has_attr(t, "token_ids"));
    assert_false(tu_has_attr(t, "chunk_size")); /* only the three LMCache sets */
}

/* On: one span per lookup under the open request; a lookup without
 * token_ids builds none. */
static void token_trace_under_request(void **state)
{
    (void)state;
    const char *sid = "tt-1";
    start_token_trace(CBT_TOKEN_TRACE_ON, false);
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_START, sid);
    pub_lookup(sid, false);
    pub_lookup(sid, true);
    tu_pub_i64(CBT_EV_MP_LOOKUP_PREFETCH_END, sid, "hit_tokens", 0, "requested_tokens", 256);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    const cbt_span *root = tu_need_span("request", sid, 0);
    assert_int_equal(tu_count("mp.request.trace", sid), 1);
    const cbt_span *t = tu_need_span("mp.request.trace", sid, 0);
    assert_true(tu_is_child_of(t, root));
    check_trace_span(t, sid);
    assert_int_equal(token_trace_spans(), 1);
    tu_stop();
}

/* A CacheBlend request's lookup: under cb.request; no request at all: a
 * root of its own. */
static void token_trace_under_cb_request_or_root(void **state)
{
    (void)state;
    start_token_trace(CBT_TOKEN_TRACE_ON, true);
    tu_pub(CBT_EV_CB_REQUEST_START, "tt-cb");
    tu_pub_i64(CBT_EV_CB_LOOKUP_START, "tt-cb", "num_tokens", 7, NULL, 0);
    pub_lookup("tt-cb", false);
    tu_pub(CBT_EV_CB_REQUEST_END, "tt-cb");
    pub_lookup("tt-none", false);
    tu_flush();
    const cbt_span *cbroot = tu_need_span("cb.request", "tt-cb", 0);
    const cbt_span *t = tu_need_span("mp.request.trace", "tt-cb", 0);
    assert_true(tu_is_child_of(t, cbroot));
    check_trace_span(t, "tt-cb");
    t = tu_need_span("mp.request.trace", "tt-none", 0);
    assert_true(tu_is_root(t));
    check_trace_span(t, "tt-none");
    assert_int_equal(tu_count("request", NULL), 0); /* no lazy MP root made for them */
    assert_int_equal(token_trace_spans(), 2);
    tu_stop();
}

/* Off (explicitly, and by default): no span, and the MP path never sees the
 * event (no unknown-event error from the subscriber either). */
static void token_trace_off(void **state)
{
    (void)state;
    for (int explicit_off = 0; explicit_off < 2; explicit_off++) {
        start_token_trace(explicit_off ? CBT_TOKEN_TRACE_OFF : CBT_TOKEN_TRACE_DEFAULT, false);
        tu_pub(CBT_EV_MP_REQUEST_START, "tt-off");
        pub_lookup("tt-off", false);
        tu_pub(CBT_EV_MP_REQUEST_END, "tt-off");
        tu_flush();
        assert_int_equal(tu_count("mp.request.trace", NULL), 0);
        assert_int_equal(token_trace_spans(), 0);
        cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
        assert_int_equal(cbt_metrics_get(&m), CBT_OK);
        assert_int_equal(m.subscriber_errors, 0);
        tu_stop();
    }
}

/* CBT_TOKEN_TRACE turns it on where the options leave it to the
 * environment; a malformed value fails the subscriber's creation. */
static void token_trace_env(void **state)
{
    (void)state;
    setenv("CBT_TOKEN_TRACE", "on", 1);
    start_token_trace(CBT_TOKEN_TRACE_DEFAULT, false);
    tu_pub(CBT_EV_MP_REQUEST_START, "tt-env");
    pub_lookup("tt-env", false);
    tu_pub(CBT_EV_MP_REQUEST_END, "tt-env");
    tu_flush();
    assert_int_equal(tu_count("mp.request.trace", "tt-env"), 1);
    tu_stop();
    setenv("CBT_TOKEN_TRACE", "yes please", 1);
    cbt_subscriber sub;
    cbt_tree_options o = CBT_STRUCT_INIT(cbt_tree_options);
    assert_int_equal(cbt_mp_subscriber_create_opts(&o, &sub), CBT_ERR_INVAL);
    o.token_trace = CBT_TOKEN_TRACE_OFF; /* the option wins over the environment */
    assert_int_equal(cbt_mp_subscriber_create_opts(&o, &sub), CBT_OK);
    sub.destroy(sub.ctx);
    o.token_trace = 3;
    assert_int_equal(cbt_mp_subscriber_create_opts(&o, &sub), CBT_ERR_INVAL);
    unsetenv("CBT_TOKEN_TRACE");
}

#define T(f) cmocka_unit_test_teardown(f, tu_teardown)

int main(void)
{
    unsetenv("CBT_TOKEN_TRACE");
    const struct CMUnitTest tests[] = {
        T(seed_lookup_end_sets_only_what_it_carried),
        T(empty_lookup_end_sets_nothing),
        T(lmcache_057_lookup_end),
        T(load_policy_recompute),
        T(token_trace_under_request),
        T(token_trace_under_cb_request_or_root),
        T(token_trace_off),
        T(token_trace_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
