/* tests/test_arrays.c — array values end to end through the real publish
 * path: set on an event (borrowed), copied into the store at the publish,
 * read by a subscriber, kept by a span, held by the memory sink, and given
 * back; the store full (dropped and counted, the event still out); many
 * threads at once; a CPU stream's mark whose caller's memory is gone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "cbt/array.h"

static cbt_name nm(const char *s)
{
    cbt_name n = 0;
    assert_int_equal(cbt_intern(s, &n), CBT_OK);
    return n;
}

/* One 1 MiB store for the whole binary: the first cbt_init reserves it. */
#define STORE_BYTES (1u << 20)

static cbt_event_type g_type;
static cbt_name k_ids, k_f, k_b, k_s, k_empty, k_big, k_name;

/* The subscriber: each "test.arrays" event becomes a span with its values. */
static cbt_status make_span(void *ctx, cbt_tracer *t, const cbt_event *ev)
{
    (void)ctx;
    if (ev->type != g_type)
        return CBT_OK;
    cbt_span *s = cbt_span_start_for_event(t, k_name, CBT_SPAN_KIND_INTERNAL, NULL, ev);
    if (!s)
        return CBT_ERR_FULL;
    cbt_span_set_from_event(s, ev);
    cbt_span_set_str(s, CBT_N_SESSION_ID, ev->session, ev->session_len);
    cbt_span_end(t, s, ev->ts);
    return CBT_OK;
}

static void start(void)
{
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    c.arrays_capacity = STORE_BYTES;
    tu_start(&c);
    assert_int_equal(cbt_event_type_register("test.arrays", &g_type), CBT_OK);
    k_ids = nm("token_ids");
    k_f = nm("floats");
    k_b = nm("bools");
    k_s = nm("strings");
    k_empty = nm("empty");
    k_big = nm("big");
    k_name = nm("arrays");
    cbt_subscriber sub;
    memset(&sub, 0, sizeof sub);
    sub.version = CBT_SUBSCRIBER_VERSION;
    sub.size = sizeof sub;
    sub.name = "test-arrays";
    sub.on_event = make_span;
    memset(sub.mask, 0xff, sizeof sub.mask);
    assert_int_equal(cbt_add_subscriber(&sub), CBT_OK);
}

static const cbt_attr *attr(const cbt_span *s, cbt_name k)
{
    const cbt_attr *a = cbt_span_attr(s, k);
    assert_non_null(a);
    return a;
}

static uint64_t store_used(void)
{
    cbt_arrays_stats st;
    cbt_arrays_stats_get(&st);
    return st.used;
}

static void test_roundtrip(void **state)
{
    (void)state;
    start();
    enum { N = 100000 }; /* 800 KB of ids: 196 chunks */
    int64_t *ids = malloc(N * sizeof *ids);
    assert_non_null(ids);
    for (int i = 0; i < N; i++)
        ids[i] = (int64_t)i * 7919 - 5;
    double fs[] = {1.5, -0.0, NAN, INFINITY, 1e300};
    bool bs[] = {true, false, true};
    static char longs[2000];
    memset(longs, 'x', sizeof longs - 1);
    /* enough strings to fill more than one chunk: elements never split */
    const char *ss[400];
    char buf[400][16];
    for (int i = 0; i < 400; i++) {
        snprintf(buf[i], sizeof buf[i], "s%d", i);
        ss[i] = buf[i];
    }
    ss[7] = "";
    ss[8] = longs;
    cbt_event ev;
    assert_int_equal(cbt_event_init(&ev, g_type, "req-1"), CBT_OK);
    assert_int_equal(cbt_event_array_i64(&ev, k_ids, ids, N), CBT_OK);
    assert_int_equal(cbt_event_array_f64(&ev, k_f, fs, 5), CBT_OK);
    assert_int_equal(cbt_event_array_bool(&ev, k_b, bs, 3), CBT_OK);
    assert_int_equal(cbt_event_array_str(&ev, k_s, ss, 400), CBT_OK);
    assert_int_equal(cbt_event_array_i64(&ev, k_empty, NULL, 0), CBT_OK);
    assert_int_equal(cbt_publish(&ev), CBT_OK);
    /* borrowed only until the publish returned */
    for (int i = 0; i < N; i++)
        ids[i] = -1;
    for (int i = 0; i < 5; i++)
        fs[i] = 0.25;
    tu_flush();
    free(ids);
    const cbt_span *s = tu_find("arrays", "req-1", 0);
    assert_non_null(s);
    assert_true(s->flags & CBT_SPANF_ARRAYS);
    assert_int_equal(s->attrs_dropped, 0);
    cbt_array a;
    cbt_array_iter it;
    int64_t v;
    assert_true(cbt_attr_array(attr(s, k_ids), &a));
    assert_int_equal(a.count, N);
    assert_int_equal(a.type, CBT_ARRAY_I64);
    cbt_array_iter_init(&it, &a);
    for (int i = 0; i < N; i++) {
        assert_true(cbt_array_next_i64(&it, &v));
        assert_int_equal(v, (int64_t)i * 7919 - 5);
    }
    assert_false(cbt_array_next_i64(&it, &v));
    double d;
    assert_true(cbt_attr_array(attr(s, k_f), &a));
    cbt_array_iter_init(&it, &a);
    assert_false(cbt_array_next_i64(&it, &v)); /* a typed walk never reinterprets */
    assert_true(cbt_array_next_f64(&it, &d) && d == 1.5);
    assert_true(cbt_array_next_f64(&it, &d) && d == 0.0 && signbit(d));
    assert_true(cbt_array_next_f64(&it, &d) && isnan(d));
    assert_true(cbt_array_next_f64(&it, &d) && isinf(d) && d > 0);
    assert_true(cbt_array_next_f64(&it, &d) && d == 1e300);
    assert_false(cbt_array_next_f64(&it, &d));
    bool b;
    assert_true(cbt_attr_array(attr(s, k_b), &a));
    cbt_array_iter_init(&it, &a);
    assert_true(cbt_array_next_bool(&it, &b) && b);
    assert_true(cbt_array_next_bool(&it, &b) && !b);
    assert_true(cbt_array_next_bool(&it, &b) && b);
    assert_false(cbt_array_next_bool(&it, &b));
    assert_true(cbt_attr_array(attr(s, k_s), &a));
    assert_int_equal(a.count, 400);
    cbt_array_iter_init(&it, &a);
    for (int i = 0; i < 400; i++) {
        const char *p;
        size_t len;
        assert_true(cbt_array_next_str(&it, &p, &len));
        if (i == 7) {
            assert_int_equal(len, 0);
        } else if (i == 8) { /* cut to CBT_META_STR_MAX - 1 with the mark */
            assert_int_equal(len, CBT_META_STR_MAX - 1);
            assert_memory_equal(p + len - strlen(CBT_META_TRUNC_MARK), CBT_META_TRUNC_MARK,
                                strlen(CBT_META_TRUNC_MARK));
        } else {
            assert_int_equal(len, strlen(buf[i]));
            assert_memory_equal(p, buf[i], len);
        }
    }
    const char *p;
    size_t len;
    assert_false(cbt_array_next_str(&it, &p, &len));
    assert_true(cbt_attr_array(attr(s, k_empty), &a));
    assert_int_equal(a.count, 0);
    cbt_array_iter_init(&it, &a);
    assert_false(cbt_array_next_i64(&it, &v));
    assert_true(store_used() > 0); /* the memory sink holds the span's */
    cbt_metrics m;
    tu_stop_final(&m); /* releases the memory sink */
    assert_int_equal(m.arrays_dropped, 0);
    assert_int_equal(m.arrays_capacity, STORE_BYTES);
    assert_true(m.arrays_stored >= 5);
    assert_true(m.meta_truncated >= 1);
    assert_int_equal(store_used(), 0); /* every reference given back */
}

static void test_full_is_dropped_and_counted(void **state)
{
    (void)state;
    start();
    enum { N = 200000 }; /* 1.6 MB: more than the whole store */
    int64_t *ids = calloc(N, sizeof *ids);
    assert_non_null(ids);
    cbt_arrays_stats before;
    cbt_arrays_stats_get(&before);
    cbt_event ev;
    assert_int_equal(cbt_event_init(&ev, g_type, "req-big"), CBT_OK);
    assert_int_equal(cbt_event_i64(&ev, nm("n"), 3), CBT_OK);
    assert_int_equal(cbt_event_array_i64(&ev, k_big, ids, N), CBT_OK);
    const char *bad[] = {"a", NULL};
    assert_int_equal(cbt_event_array_str(&ev, k_s, bad, 2), CBT_OK);
    assert_int_equal(cbt_publish(&ev), CBT_OK); /* the event goes out */
    free(ids);
    tu_flush();
    const cbt_span *s = tu_find("arrays", "req-big", 0);
    assert_non_null(s);
    assert_int_equal(tu_attr_i64(s, "n"), 3);
    assert_null(cbt_span_attr(s, k_big));
    assert_null(cbt_span_attr(s, k_s));
    assert_int_equal(s->attrs_dropped, 2);
    assert_true(s->flags & CBT_SPANF_ATTRS_DROPPED);
    cbt_metrics m;
    tu_stop_final(&m);
    assert_int_equal(m.arrays_dropped - before.dropped, 2);
    assert_int_equal(store_used(), 0);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    cbt_event ev;
    int64_t one = 1;
    cbt_name key = nm("token_ids");
    assert_int_equal(cbt_event_init(&ev, CBT_EV_MP_LOOKUP, "x"), CBT_OK);
    assert_int_equal(cbt_event_array_i64(&ev, key, NULL, 3), CBT_ERR_INVAL);
    assert_int_equal(cbt_event_array_i64(&ev, 0, &one, 1), CBT_ERR_INVAL);
    assert_int_equal(cbt_event_array_i64(NULL, key, &one, 1), CBT_ERR_INVAL);
    assert_int_equal(cbt_event_array_i64(&ev, key, &one, (size_t)CBT_ARRAY_COUNT_MAX + 1),
                     CBT_ERR_INVAL);
    assert_int_equal(ev.n_meta, 0);
    for (int i = 0; i < CBT_EVENT_META_MAX; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        assert_int_equal(cbt_event_i64(&ev, nm(k), i), CBT_OK);
    }
    assert_int_equal(cbt_event_array_i64(&ev, key, &one, 1), CBT_ERR_META_FULL);
}

/* Threads publish arrays whose contents say who sent them; the subscriber
 * checks every one it is handed. */
#define THREADS 4
#define PER_THREAD 1500
static _Atomic uint64_t g_seen, g_bad, g_dropped_seen;
static cbt_event_type g_mt;

static cbt_status check_mt(void *ctx, cbt_tracer *t, const cbt_event *ev)
{
    (void)ctx, (void)t;
    if (ev->type != g_mt)
        return CBT_OK;
    atomic_fetch_add(&g_seen, 1);
    int64_t who = cbt_event_get_i64(ev, nm("who"), -1);
    const cbt_meta *m = cbt_event_find(ev, k_ids);
    cbt_array a;
    if (!m || !cbt_meta_array(m, &a)) {
        atomic_fetch_add(&g_dropped_seen, 1);
        return CBT_OK;
    }
    cbt_array_iter it;
    cbt_array_iter_init(&it, &a);
    int64_t v;
    for (uint32_t i = 0; i < a.count; i++)
        if (!cbt_array_next_i64(&it, &v) || v != who * 1000003 + i)
            return atomic_fetch_add(&g_bad, 1), CBT_OK;
    if (a.count != (uint32_t)(who % 3001))
        atomic_fetch_add(&g_bad, 1);
    return CBT_OK;
}

static void *mt_thread(void *arg)
{
    int64_t base = (int64_t)(intptr_t)arg;
    int64_t *buf = malloc(3001 * sizeof *buf);
    for (int i = 0; i < PER_THREAD; i++) {
        int64_t who = base * PER_THREAD + i;
        uint32_t n = (uint32_t)(who % 3001);
        for (uint32_t j = 0; j < n; j++)
            buf[j] = who * 1000003 + j;
        cbt_event ev;
        cbt_event_init(&ev, g_mt, "mt");
        cbt_event_i64(&ev, nm("who"), who);
        cbt_event_array_i64(&ev, k_ids, buf, n);
        while (cbt_publish(&ev) != CBT_OK)
            ; /* a full lane: try again (the test wants every event) */
    }
    free(buf);
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    start();
    assert_int_equal(cbt_event_type_register("test.arrays.mt", &g_mt), CBT_OK);
    cbt_subscriber sub;
    memset(&sub, 0, sizeof sub);
    sub.version = CBT_SUBSCRIBER_VERSION;
    sub.size = sizeof sub;
    sub.name = "test-arrays-mt";
    sub.on_event = check_mt;
    memset(sub.mask, 0xff, sizeof sub.mask);
    assert_int_equal(cbt_add_subscriber(&sub), CBT_OK);
    cbt_arrays_stats before;
    cbt_arrays_stats_get(&before);
    pthread_t th[THREADS];
    for (intptr_t i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, mt_thread, (void *)i), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    cbt_metrics m;
    tu_stop_final(&m);
    cbt_arrays_stats after;
    cbt_arrays_stats_get(&after);
    assert_int_equal(atomic_load(&g_seen), THREADS * PER_THREAD);
    assert_int_equal(atomic_load(&g_bad), 0);
    /* every drop the subscriber saw was counted, and nothing else dropped */
    assert_int_equal(after.dropped - before.dropped, atomic_load(&g_dropped_seen));
    assert_int_equal(store_used(), 0);
}

static void test_stream_mark(void **state)
{
    (void)state;
    start();
    cbt_stream *st;
    assert_int_equal(cbt_stream_cpu_create(64, &st), CBT_OK);
    tu_gate *g = tu_gate_new();
    tu_gate_enqueue(g, st); /* the mark waits behind the gate */
    int64_t *ids = malloc(5000 * sizeof *ids);
    for (int i = 0; i < 5000; i++)
        ids[i] = 42 + i;
    cbt_event ev;
    assert_int_equal(cbt_event_init(&ev, g_type, "req-stream"), CBT_OK);
    assert_int_equal(cbt_event_array_i64(&ev, k_ids, ids, 5000), CBT_OK);
    assert_int_equal(cbt_publish_on_stream(st, &ev), CBT_OK);
    for (int i = 0; i < 5000; i++) /* changed before the stream gets there */
        ids[i] = -1;
    tu_gate_open(g);
    assert_int_equal(cbt_stream_sync(st), CBT_OK);
    tu_flush();
    const cbt_span *s = tu_find("arrays", "req-stream", 0);
    assert_non_null(s);
    cbt_array a;
    assert_true(cbt_attr_array(attr(s, k_ids), &a));
    assert_int_equal(a.count, 5000);
    cbt_array_iter it;
    cbt_array_iter_init(&it, &a);
    int64_t v;
    for (int i = 0; i < 5000; i++) {
        assert_true(cbt_array_next_i64(&it, &v));
        assert_int_equal(v, 42 + i);
    }
    free(ids);
    cbt_stream_destroy(st);
    tu_gate_free(g);
    tu_stop();
    assert_int_equal(store_used(), 0);
}

/* A span kept open across events (a program's subscriber): setting its own
 * array again must not free it (the review's reproducer), and a span still
 * open at shutdown gives its arrays back. */
static cbt_span *g_open;
static cbt_event_type g_keep, g_again, g_other;
static int64_t g_first = -1;

static cbt_status keep_open(void *ctx, cbt_tracer *t, const cbt_event *ev)
{
    (void)ctx;
    cbt_array a;
    if (ev->type == g_keep) {
        g_open = cbt_span_start_for_event(t, k_name, CBT_SPAN_KIND_INTERNAL, NULL, ev);
        if (g_open)
            cbt_span_set_from_event(g_open, ev);
    } else if (ev->type == g_again && g_open) {
        if (cbt_attr_array(cbt_span_attr(g_open, k_ids), &a))
            cbt_span_set_array(g_open, k_ids, &a); /* its own array, set again */
    } else if (ev->type == g_other && g_open) {
        /* another array now: the open span's chunks must not be these */
        cbt_array_iter it;
        if (cbt_attr_array(cbt_span_attr(g_open, k_ids), &a)) {
            cbt_array_iter_init(&it, &a);
            cbt_array_next_i64(&it, &g_first);
        }
    }
    return CBT_OK;
}

static void test_span_kept_open(void **state)
{
    (void)state;
    start();
    assert_int_equal(cbt_event_type_register("test.keep", &g_keep), CBT_OK);
    assert_int_equal(cbt_event_type_register("test.again", &g_again), CBT_OK);
    assert_int_equal(cbt_event_type_register("test.other", &g_other), CBT_OK);
    cbt_subscriber sub;
    memset(&sub, 0, sizeof sub);
    sub.version = CBT_SUBSCRIBER_VERSION;
    sub.size = sizeof sub;
    sub.name = "test-keep-open";
    sub.on_event = keep_open;
    memset(sub.mask, 0xff, sizeof sub.mask);
    assert_int_equal(cbt_add_subscriber(&sub), CBT_OK);
    int64_t mine[3] = {111, 112, 113}, theirs[3] = {999, 998, 997};
    cbt_event ev;
    cbt_event_init(&ev, g_keep, "k");
    cbt_event_array_i64(&ev, k_ids, mine, 3);
    assert_int_equal(cbt_publish(&ev), CBT_OK);
    tu_flush();
    cbt_event_init(&ev, g_again, "k");
    assert_int_equal(cbt_publish(&ev), CBT_OK);
    tu_flush();
    assert_int_equal(store_used(), 4096); /* the open span's one chunk, still taken */
    cbt_event_init(&ev, g_other, "k");
    cbt_event_array_i64(&ev, k_big, theirs, 3);
    assert_int_equal(cbt_publish(&ev), CBT_OK);
    tu_flush();
    assert_int_equal(g_first, 111);
    /* an empty array takes no chunk */
    cbt_event_init(&ev, g_type, "empty-only");
    cbt_event_array_str(&ev, k_empty, NULL, 0);
    assert_int_equal(cbt_publish(&ev), CBT_OK);
    tu_flush();
    assert_non_null(tu_find("arrays", "empty-only", 0));
    assert_int_equal(store_used(), 4096);
    tu_stop(); /* the span is still open: its array goes back with the pool */
    assert_int_equal(store_used(), 0);
    g_open = NULL;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_roundtrip, tu_teardown),
        cmocka_unit_test_teardown(test_full_is_dropped_and_counted, tu_teardown),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test_teardown(test_threads, tu_teardown),
        cmocka_unit_test_teardown(test_stream_mark, tu_teardown),
        cmocka_unit_test_teardown(test_span_kept_open, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
