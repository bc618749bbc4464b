/* tests/test_bad_input.c — bad input is refused with an error code or dropped
 * and counted, never a crash: unknown event types, overlong session ids,
 * unmatched and duplicate events, full queues and streams, metadata limits,
 * NULL arguments, lifecycle misuse, and cbt_strerror for every code. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"

/* ---- helpers ------------------------------------------------------------------ */

static cbt_metrics metrics(void)
{
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    memset(&m, 0xa5, sizeof m);
    assert_int_equal(cbt_metrics_get(&m), CBT_OK);
    return m;
}

static cbt_mp_stats mp_stats(void)
{
    cbt_mp_stats st = CBT_STRUCT_INIT(cbt_mp_stats);
    memset(&st, 0xa5, sizeof st);
    assert_int_equal(cbt_mp_stats_get(NULL, &st), CBT_OK);
    return st;
}

static uint32_t count_events(cbt_event_type type, const char *sid)
{
    uint32_t n = 0;
    while (tu_event_find(type, sid, n))
        n++;
    return n;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A session id of `n` 'x' characters. */
static void make_sid(char *buf, size_t n)
{
    memset(buf, 'x', n);
    buf[n] = '\0';
}

static void noop_fn(void *arg) { (void)arg; }

static cbt_status noop_on_event(void *ctx, cbt_tracer *t, const cbt_event *ev)
{
    (void)ctx;
    (void)t;
    (void)ev;
    return CBT_OK;
}

/* ---- tests ---------------------------------------------------------------------- */

/* An undefined type and CBT_EV_INVALID are refused and counted as rejected. */
static void unknown_event_type(void **state)
{
    (void)state;
    tu_start(NULL);
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, (cbt_event_type)9999, "s"), CBT_OK);
    assert_false(cbt_event_type_valid((cbt_event_type)9999));
    assert_int_equal(cbt_publish(&e), CBT_ERR_UNKNOWN_EVENT);
    assert_int_equal(metrics().rejected, 1);

    assert_int_equal(cbt_event_init(&e, CBT_EV_INVALID, "s"), CBT_OK);
    assert_int_equal(cbt_publish(&e), CBT_ERR_UNKNOWN_EVENT);
    assert_int_equal(metrics().rejected, 2);

    cbt_stream *s;
    assert_int_equal(cbt_stream_cpu_create(0, &s), CBT_OK);
    assert_int_equal(cbt_event_init(&e, (cbt_event_type)9999, "s"), CBT_OK);
    assert_int_equal(cbt_publish_on_stream(s, &e), CBT_ERR_UNKNOWN_EVENT);
    assert_int_equal(metrics().rejected, 3);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    cbt_metrics m = metrics();
    assert_int_equal(m.published, 0);
    assert_int_equal(m.dispatched, 0);
    assert_int_equal(tu_event_count(), 0);
    assert_null(cbt_event_type_name((cbt_event_type)9999));
    assert_null(cbt_event_type_name(CBT_EV_INVALID));
    cbt_stream_destroy(s);
    tu_stop();
}

/* 64+ characters: refused at init and counted; the event then cannot be
 * published and nothing is dispatched. */
static void overlong_session_refused(void **state)
{
    (void)state;
    tu_start(NULL);
    char sid[200];
    cbt_event e;
    make_sid(sid, CBT_SESSION_MAX);
    assert_int_equal(cbt_event_init(&e, CBT_EV_MP_REQUEST_START, sid), CBT_ERR_SESSION_TOO_LONG);
    assert_int_equal(metrics().session_too_long, 1);
    assert_int_not_equal(cbt_publish(&e), CBT_OK);

    cbt_event e2;
    make_sid(sid, 150);
    assert_int_equal(cbt_event_init(&e2, CBT_EV_MP_STORE_START, sid), CBT_ERR_SESSION_TOO_LONG);
    assert_int_equal(metrics().session_too_long, 2);
    cbt_stream *s;
    assert_int_equal(cbt_stream_cpu_create(0, &s), CBT_OK);
    assert_int_not_equal(cbt_publish_on_stream(s, &e2), CBT_OK);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    cbt_metrics m = metrics();
    assert_int_equal(m.published, 0);
    assert_int_equal(m.dispatched, 0);
    assert_int_equal(m.session_too_long, 2);
    assert_int_equal(tu_event_count(), 0);
    assert_int_equal(tu_span_count(), 0);
    assert_int_equal(mp_stats().sessions_open, 0);
    cbt_stream_destroy(s);
    tu_stop();
}

/* Exactly CBT_SESSION_MAX - 1 = 63 characters is accepted end to end. */
static void session_63_chars_accepted(void **state)
{
    (void)state;
    tu_start(NULL);
    char sid[CBT_SESSION_MAX];
    make_sid(sid, CBT_SESSION_MAX - 1);
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, CBT_EV_MP_REQUEST_START, sid), CBT_OK);
    assert_int_equal(e.session_len, CBT_SESSION_MAX - 1);
    assert_string_equal(e.session, sid);
    assert_int_equal(cbt_publish(&e), CBT_OK);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    assert_int_equal(metrics().session_too_long, 0);
    assert_int_equal(tu_count("request", sid), 1);
    const cbt_span *root = tu_find("request", sid, 0);
    const cbt_attr *a = cbt_span_attr(root, CBT_N_SESSION_ID);
    assert_non_null(a);
    assert_int_equal(a->str_len, CBT_SESSION_MAX - 1);
    assert_int_equal(root->end_ns, tu_event_find(CBT_EV_MP_REQUEST_END, sid, 0)->ts);
    assert_int_equal(mp_stats().sessions_open, 0);
    tu_stop();
}

/* END without START, for all three operations: ignored and counted, both for
 * an unknown session and for a known one. */
static void end_without_start(void **state)
{
    (void)state;
    tu_start(NULL);
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_END, "ghost");
    tu_pub(CBT_EV_MP_STORE_END, "ghost");
    tu_pub(CBT_EV_MP_RETRIEVE_END, "ghost");
    tu_flush();
    cbt_mp_stats st = mp_stats();
    assert_int_equal(st.unmatched_end, 3);
    assert_int_equal(st.roots_opened, 0);
    assert_int_equal(st.children_closed, 0);
    assert_int_equal(st.sessions_open, 0);
    assert_int_equal(metrics().subscriber_errors, 3);
    assert_int_equal(tu_span_count(), 0);

    tu_pub(CBT_EV_MP_REQUEST_START, "known");
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_END, "known");
    tu_pub(CBT_EV_MP_STORE_END, "known");
    tu_pub(CBT_EV_MP_RETRIEVE_END, "known");
    tu_pub(CBT_EV_MP_REQUEST_END, "known");
    tu_flush();
    st = mp_stats();
    assert_int_equal(st.unmatched_end, 6);
    assert_int_equal(metrics().subscriber_errors, 6);
    assert_int_equal(tu_span_count(), 1);
    assert_int_equal(tu_count("request", "known"), 1);
    assert_int_equal(st.sessions_open, 0);
    tu_stop();
}

/* REQUEST_END twice after an immediate close: the second is a duplicate
 * (the session was seen), the root is closed once. */
static void request_end_twice(void **state)
{
    (void)state;
    const char *sid = "dup-1";
    tu_start(NULL);
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    assert_int_equal(count_events(CBT_EV_MP_REQUEST_END, sid), 2);
    assert_int_equal(tu_count("request", sid), 1);
    assert_int_equal(tu_find("request", sid, 0)->end_ns,
                     tu_event_find(CBT_EV_MP_REQUEST_END, sid, 0)->ts);
    cbt_mp_stats st = mp_stats();
    assert_int_equal(st.roots_closed, 1);
    assert_int_equal(st.sessions_open, 0);
    assert_int_equal(st.duplicate_request_end, 1);
    assert_int_equal(st.request_end_unknown, 0);
    tu_stop();
}

/* REQUEST_END twice while the close is deferred: the second is a duplicate,
 * the root ends once, at the first REQUEST_END. */
static void request_end_twice_deferred(void **state)
{
    (void)state;
    const char *sid = "dup-2";
    tu_start(NULL);
    cbt_stream *s;
    assert_int_equal(cbt_stream_cpu_create(0, &s), CBT_OK);
    tu_gate *g = tu_gate_new();
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    tu_gate_enqueue(g, s);
    tu_pub_on(s, CBT_EV_MP_STORE_START, sid);
    tu_pub_on(s, CBT_EV_MP_STORE_END, sid);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    assert_int_equal(tu_count("request", sid), 0);
    assert_int_equal(mp_stats().duplicate_request_end, 1);
    tu_gate_open(g);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    assert_int_equal(tu_count("request", sid), 1);
    assert_int_equal(tu_find("request", sid, 0)->end_ns,
                     tu_event_find(CBT_EV_MP_REQUEST_END, sid, 0)->ts);
    cbt_mp_stats st = mp_stats();
    assert_int_equal(st.duplicate_request_end, 1);
    assert_int_equal(st.roots_closed, 1);
    assert_int_equal(st.sessions_open, 0);
    cbt_stream_destroy(s);
    tu_gate_free(g);
    tu_stop();
}

/* REQUEST_END for a session never seen: counted, no span, no session kept. */
static void request_end_unknown_session(void **state)
{
    (void)state;
    tu_start(NULL);
    tu_pub(CBT_EV_MP_REQUEST_END, "never-seen");
    tu_flush();
    cbt_mp_stats st = mp_stats();
    assert_int_equal(st.request_end_unknown, 1);
    assert_int_equal(st.duplicate_request_end, 0);
    assert_int_equal(st.roots_opened, 0);
    assert_int_equal(st.sessions_open, 0);
    assert_int_equal(tu_span_count(), 0);
    tu_stop();
}

/* A 64-cell queue and lane and a harvester that sleeps 1 s: a burst of
 * 10,000 publishes never blocks, some are dropped, and every attempt is
 * counted exactly once. (With the default 16384-cell lane the burst of
 * 2-cell records could all fit whenever the harvester drained once.) */
static void full_queue_drops_and_counts(void **state)
{
    (void)state;
    cbt_config c = cbt_config_default();
    c.queue_capacity = 64;
    c.lane_capacity = 64;
    c.poll_interval_us = 1000000;
    tu_start(&c);
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, CBT_EV_L2_LOAD_TASK_SUBMITTED, "flood"), CBT_OK);
    const uint32_t attempts = 10000;
    uint32_t ok = 0, full = 0, other = 0;
    uint64_t t0 = now_ns();
    for (uint32_t i = 0; i < attempts; i++) {
        cbt_status st = cbt_publish(&e);
        if (st == CBT_OK)
            ok++;
        else if (st == CBT_ERR_FULL)
            full++;
        else
            other++;
    }
    uint64_t took = now_ns() - t0;
    assert_true(took < 1000000000ull);
    assert_int_equal(other, 0);
    assert_true(full > 0);
    assert_true(ok >= 64 / 2); /* a 2-cell record each */
    cbt_metrics m = metrics();
    assert_int_equal(m.published, ok);
    assert_int_equal(m.dropped_full, full);
    assert_int_equal(m.published + m.dropped_full, attempts);
    assert_int_equal(m.queue_capacity, 64);
    tu_flush();
    m = metrics();
    assert_int_equal(m.dispatched, ok);
    assert_int_equal(m.published + m.dropped_full, attempts);
    assert_int_equal(count_events(CBT_EV_L2_LOAD_TASK_SUBMITTED, "flood"), ok);
    tu_stop();
}

/* A 4-slot CPU stream held by a gate: the gate takes one slot, three marks fit,
 * the rest return CBT_ERR_FULL and are counted in dropped_full. */
static void full_cpu_stream_drops_and_counts(void **state)
{
    (void)state;
    tu_start(NULL);
    cbt_stream *s;
    assert_int_equal(cbt_stream_cpu_create(4, &s), CBT_OK);
    tu_gate *g = tu_gate_new();
    tu_gate_enqueue(g, s);
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, CBT_EV_L2_LOAD_TASK_COMPLETED, "fs"), CBT_OK);
    uint32_t ok = 0, full = 0;
    for (int i = 0; i < 10; i++) {
        cbt_status st = cbt_publish_on_stream(s, &e);
        if (st == CBT_OK)
            ok++;
        else if (st == CBT_ERR_FULL)
            full++;
        else
            fail_msg("unexpected status %d", (int)st);
    }
    assert_int_equal(ok, 3);
    assert_int_equal(full, 7);
    assert_int_equal(metrics().dropped_full, 7);
    assert_int_equal(cbt_stream_enqueue(s, noop_fn, NULL), CBT_ERR_FULL);
    tu_gate_open(g);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    assert_int_equal(count_events(CBT_EV_L2_LOAD_TASK_COMPLETED, "fs"), 3);
    cbt_metrics m = metrics();
    assert_int_equal(m.published, 3);
    assert_int_equal(m.dropped_full, 7);
    cbt_stream_destroy(s);
    tu_gate_free(g);
    tu_stop();
}

/* Metadata limits: a 17th value is refused (META_FULL); a string longer
 * than a value holds goes to the area, one the area cannot take even cut is
 * refused (META_TOO_LONG); the event is unchanged by a refusal. */
static void event_meta_limits(void **state)
{
    (void)state;
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, CBT_EV_MP_STORE_END, "m"), CBT_OK);
    cbt_name k[CBT_EVENT_META_MAX + 1];
    char name[16];
    for (int i = 0; i <= CBT_EVENT_META_MAX; i++) {
        snprintf(name, sizeof name, "bi_key_%d", i);
        k[i] = tu_name(name);
    }
    for (int i = 0; i < CBT_EVENT_META_MAX; i++)
        assert_int_equal(cbt_event_i64(&e, k[i], i * 10), CBT_OK);
    assert_int_equal(e.n_meta, CBT_EVENT_META_MAX);
    assert_int_equal(cbt_event_i64(&e, k[CBT_EVENT_META_MAX], 1), CBT_ERR_META_FULL);
    assert_int_equal(cbt_event_f64(&e, k[CBT_EVENT_META_MAX], 1.0), CBT_ERR_META_FULL);
    assert_int_equal(cbt_event_bool(&e, k[CBT_EVENT_META_MAX], true), CBT_ERR_META_FULL);
    assert_int_equal(cbt_event_str(&e, k[CBT_EVENT_META_MAX], "short"), CBT_ERR_META_FULL);
    assert_int_equal(cbt_event_str(&e, k[CBT_EVENT_META_MAX], "a string much longer than sixteen"),
                     CBT_ERR_META_FULL);
    assert_int_equal(e.n_meta, CBT_EVENT_META_MAX);
    assert_int_equal(e.str_used, 0);
    assert_null(cbt_event_find(&e, k[CBT_EVENT_META_MAX]));
    for (int i = 0; i < CBT_EVENT_META_MAX; i++)
        assert_int_equal(cbt_event_get_i64(&e, k[i], -1), i * 10);

    cbt_event f;
    assert_int_equal(cbt_event_init(&f, CBT_EV_MP_STORE_END, "m"), CBT_OK);
    char s16[CBT_META_INLINE_MAX + 1], s15[CBT_META_INLINE_MAX];
    memset(s16, 'a', CBT_META_INLINE_MAX);
    s16[CBT_META_INLINE_MAX] = '\0';
    memset(s15, 'b', CBT_META_INLINE_MAX - 1);
    s15[CBT_META_INLINE_MAX - 1] = '\0';
    assert_int_equal(cbt_event_str(&f, k[0], s15), CBT_OK);
    const cbt_meta *m = cbt_event_find(&f, k[0]);
    assert_non_null(m);
    assert_int_equal(m->type, CBT_META_STR);
    size_t len = 0;
    assert_string_equal(cbt_event_meta_str(&f, m, &len), s15);
    assert_int_equal(len, CBT_META_INLINE_MAX - 1);
    assert_int_equal(cbt_event_str(&f, k[1], s16), CBT_OK);
    assert_string_equal(cbt_event_get_str(&f, k[1], &len), s16);
    assert_int_equal(len, CBT_META_INLINE_MAX);
    /* fill the area, then one that cannot even be cut is refused */
    static char big[CBT_META_STR_MAX];
    memset(big, 'c', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(cbt_event_str(&f, k[2], big), CBT_OK);
    assert_int_equal(cbt_event_str(&f, k[3], big), CBT_OK); /* cut */
    assert_int_equal(f.str_used, CBT_EVENT_STR_AREA);
    assert_int_equal(f.n_meta, 4);
    cbt_event before = f;
    assert_int_equal(cbt_event_str(&f, k[4], s16), CBT_ERR_META_TOO_LONG);
    assert_memory_equal(&before, &f, sizeof f);
    assert_null(cbt_event_find(&f, k[4]));
    /* a standalone value holds only what fits inside it */
    cbt_meta sm = cbt_meta_str(k[0], s16);
    assert_int_equal(sm.type, CBT_META_NONE);
    sm = cbt_meta_str(k[0], s15);
    assert_int_equal(sm.type, CBT_META_STR);
    assert_string_equal(cbt_event_meta_str(NULL, &sm, NULL), s15);
}

/* NULL (and zero) arguments are refused with CBT_ERR_INVAL. */
static void null_arguments(void **state)
{
    (void)state;
    tu_start(NULL);
    cbt_event e;
    cbt_name k = tu_name("bi_null_key");
    cbt_name n;
    cbt_event_type ty;
    cbt_span_ctx ctx;
    cbt_stream *s = NULL;
    cbt_sink sink;
    cbt_memsink *ms = NULL;
    cbt_subscriber sub;

    assert_int_equal(cbt_event_init(NULL, CBT_EV_MP_REQUEST_START, "x"), CBT_ERR_INVAL);
    assert_int_equal(cbt_event_init(&e, CBT_EV_MP_REQUEST_START, "x"), CBT_OK);
    assert_int_equal(cbt_event_i64(NULL, k, 1), CBT_ERR_INVAL);
    assert_int_equal(cbt_event_f64(NULL, k, 1.0), CBT_ERR_INVAL);
    assert_int_equal(cbt_event_bool(NULL, k, true), CBT_ERR_INVAL);
    assert_int_equal(cbt_event_str(NULL, k, "v"), CBT_ERR_INVAL);
    assert_int_equal(cbt_event_str(&e, k, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_event_i64(&e, 0, 1), CBT_ERR_INVAL);
    assert_int_equal(e.n_meta, 0);
    assert_null(cbt_event_find(NULL, k));
    assert_int_equal(cbt_event_get_i64(NULL, k, 42), 42);
    assert_int_equal(cbt_event_type_register(NULL, &ty), CBT_ERR_INVAL);
    assert_int_equal(cbt_event_type_register("BI_TYPE", NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_event_type_register("", &ty), CBT_ERR_INVAL);
    assert_int_equal(cbt_intern(NULL, &n), CBT_ERR_INVAL);
    assert_int_equal(cbt_intern("", &n), CBT_ERR_INVAL);

    assert_int_equal(cbt_publish(NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_publish_checked(NULL), CBT_ERR_INVAL);

    assert_int_equal(cbt_stream_cpu_create(0, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_stream_cpu_create(0, &s), CBT_OK);
    assert_int_equal(cbt_stream_enqueue(NULL, noop_fn, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_stream_enqueue(s, NULL, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_publish_on_stream(NULL, &e), CBT_ERR_INVAL);
    assert_int_equal(cbt_publish_on_stream(s, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_stream_sync(NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_stream_ordinal(NULL), 0);
    assert_null(cbt_stream_cuda_handle(NULL));
    cbt_stream_destroy(NULL);

    assert_int_equal(cbt_metrics_get(NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_mp_stats_get(NULL, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_mp_subscriber_create(0, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_add_subscriber(NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_add_sink(NULL), CBT_ERR_INVAL);
    memset(&sub, 0, sizeof sub);
    sub.version = CBT_SUBSCRIBER_VERSION;
    sub.size = sizeof sub;
    assert_int_equal(cbt_add_subscriber(&sub), CBT_ERR_INVAL); /* no on_event */
    sub.on_event = noop_on_event;
    sub.version = CBT_SUBSCRIBER_VERSION + 1;
    assert_int_equal(cbt_add_subscriber(&sub), CBT_ERR_VERSION); /* from a newer cbt */
    assert_int_equal(cbt_mp_stats_get(&sub, &(cbt_mp_stats)CBT_STRUCT_INIT(cbt_mp_stats)), CBT_ERR_INVAL); /* not MP */
    assert_int_equal(cbt_memsink_create(1, NULL, &sink), CBT_ERR_INVAL);
    assert_int_equal(cbt_memsink_create(1, &ms, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_memsink_create(0, &ms, &sink), CBT_ERR_INVAL);
    assert_int_equal(cbt_registry_get(NULL, "x", CBT_N_REQUEST, &ctx), CBT_ERR_INVAL);
    assert_int_equal(cbt_registry_put(NULL, "x", CBT_N_REQUEST, &ctx), CBT_ERR_INVAL);
    assert_int_equal(cbt_span_set_i64(NULL, k, 1), CBT_ERR_INVAL);
    assert_null(cbt_span_attr(NULL, k));

    /* the tracer still works */
    tu_pub(CBT_EV_MP_REQUEST_START, "after-null");
    tu_pub(CBT_EV_MP_REQUEST_END, "after-null");
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    assert_int_equal(tu_count("request", "after-null"), 1);
    cbt_stream_destroy(s);
    tu_stop();
}

/* A second cbt_init while a tracer exists: CBT_ERR_ALREADY, tracer unchanged. */
static void init_twice(void **state)
{
    (void)state;
    tu_start(NULL);
    cbt_tracer *t = cbt_tracer_get();
    assert_non_null(t);
    assert_int_equal(cbt_init(NULL), CBT_ERR_ALREADY);
    cbt_config c = cbt_config_default();
    assert_int_equal(cbt_init(&c), CBT_ERR_ALREADY);
    assert_ptr_equal(cbt_tracer_get(), t);
    tu_pub(CBT_EV_MP_REQUEST_START, "twice");
    tu_pub(CBT_EV_MP_REQUEST_END, "twice");
    tu_flush();
    assert_int_equal(tu_count("request", "twice"), 1);
    tu_stop();
    assert_null(cbt_tracer_get());
}

/* Bad configuration fields are refused with CBT_ERR_INVAL and leave no tracer. */
static void bad_config(void **state)
{
    (void)state;
    cbt_config c = cbt_config_default();
    c.queue_capacity = 1000; /* not a power of two */
    assert_int_equal(cbt_init(&c), CBT_ERR_INVAL);
    assert_null(cbt_tracer_get());

    c = cbt_config_default();
    c.version = CBT_CONFIG_VERSION + 1;
    assert_int_equal(cbt_init(&c), CBT_ERR_VERSION);
    c = cbt_config_default();
    c.size = 4; /* not even the header */
    assert_int_equal(cbt_init(&c), CBT_ERR_VERSION);
    c = cbt_config_default();
    c.registry_capacity = 100;
    assert_int_equal(cbt_init(&c), CBT_ERR_INVAL);
    c = cbt_config_default();
    c.span_pool = 0;
    assert_int_equal(cbt_init(&c), CBT_ERR_INVAL);
    c = cbt_config_default();
    c.poll_interval_us = 0;
    assert_int_equal(cbt_init(&c), CBT_ERR_INVAL);
    assert_null(cbt_tracer_get());
    assert_int_equal(cbt_flush(10), CBT_ERR_NOT_INITIALIZED);

    /* a good config still works afterwards */
    tu_start(NULL);
    assert_non_null(cbt_tracer_get());
    tu_stop();
}

/* Calls that need a tracer refuse without one. */
static void not_initialized(void **state)
{
    (void)state;
    assert_null(cbt_tracer_get());
    assert_false(cbt_enabled());
    assert_int_equal(cbt_flush(10), CBT_ERR_NOT_INITIALIZED);
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m), CBT_ERR_NOT_INITIALIZED);
    cbt_mp_stats st = CBT_STRUCT_INIT(cbt_mp_stats);
    assert_int_equal(cbt_mp_stats_get(NULL, &st), CBT_ERR_NOT_INITIALIZED);
    cbt_subscriber sub;
    memset(&sub, 0, sizeof sub);
    sub.version = CBT_SUBSCRIBER_VERSION;
    sub.size = sizeof sub;
    sub.on_event = noop_on_event;
    assert_int_equal(cbt_add_subscriber(&sub), CBT_ERR_NOT_INITIALIZED);
    assert_int_equal(cbt_shutdown(), CBT_OK); /* idempotent */
    assert_int_equal(cbt_shutdown(), CBT_OK);
}

/* Publishing with no tracer returns CBT_OK and does nothing: nothing shows up
 * once a tracer is started afterwards. Also with a disabled config. */
static void publish_without_tracer(void **state)
{
    (void)state;
    assert_null(cbt_tracer_get());
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, CBT_EV_MP_REQUEST_START, "nt"), CBT_OK);
    assert_int_equal(cbt_publish(&e), CBT_OK);
    assert_int_equal(cbt_publish_checked(&e), CBT_OK);
    cbt_stream *s;
    assert_int_equal(cbt_stream_cpu_create(0, &s), CBT_OK);
    assert_int_equal(cbt_publish_on_stream(s, &e), CBT_OK);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    char longsid[100];
    make_sid(longsid, 80);
    cbt_event bad;
    assert_int_equal(cbt_event_init(&bad, CBT_EV_MP_REQUEST_START, longsid),
                     CBT_ERR_SESSION_TOO_LONG); /* still refused, counted nowhere */

    /* disabled by configuration: init succeeds, no tracer is installed */
    cbt_config c = cbt_config_default();
    c.enabled = false;
    assert_int_equal(cbt_init(&c), CBT_OK);
    assert_null(cbt_tracer_get());
    assert_false(cbt_enabled());
    assert_int_equal(cbt_publish(&e), CBT_OK);
    assert_int_equal(cbt_publish_on_stream(s, &e), CBT_OK);
    assert_int_equal(cbt_flush(10), CBT_ERR_NOT_INITIALIZED);
    assert_int_equal(cbt_shutdown(), CBT_OK);

    tu_start(NULL);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    cbt_metrics m = metrics();
    assert_int_equal(m.published, 0);
    assert_int_equal(m.dispatched, 0);
    assert_int_equal(m.session_too_long, 0);
    assert_int_equal(tu_event_count(), 0);
    assert_int_equal(tu_span_count(), 0);
    assert_int_equal(mp_stats().roots_opened, 0);
    cbt_stream_destroy(s);
    tu_stop();
}

/* Every status code has its own non-empty sentence; out-of-range codes get the
 * unknown-code sentence. */
static void strerror_every_code(void **state)
{
    (void)state;
    const char *unknown = cbt_strerror((cbt_status)(CBT_STATUS_COUNT_ + 5));
    assert_non_null(unknown);
    assert_true(unknown[0] != '\0');
    assert_string_equal(cbt_strerror(CBT_STATUS_COUNT_), unknown);
    assert_string_equal(cbt_strerror((cbt_status)(CBT_STATUS_COUNT_ + 1000)), unknown);
    const char *txt[CBT_STATUS_COUNT_];
    for (int i = 0; i < CBT_STATUS_COUNT_; i++) {
        txt[i] = cbt_strerror((cbt_status)i);
        assert_non_null(txt[i]);
        assert_true(txt[i][0] != '\0');
        if (strcmp(txt[i], unknown) == 0)
            fail_msg("status %d has the unknown-code text", i);
        for (int j = 0; j < i; j++)
            if (strcmp(txt[i], txt[j]) == 0)
                fail_msg("status %d and %d share the text '%s'", j, i, txt[i]);
    }
}

#define T(f) cmocka_unit_test_teardown(f, tu_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(unknown_event_type),
        T(overlong_session_refused),
        T(session_63_chars_accepted),
        T(end_without_start),
        T(request_end_twice),
        T(request_end_twice_deferred),
        T(request_end_unknown_session),
        T(full_queue_drops_and_counts),
        T(full_cpu_stream_drops_and_counts),
        T(event_meta_limits),
        T(null_arguments),
        T(init_twice),
        T(bad_config),
        T(not_initialized),
        T(publish_without_tracer),
        T(strerror_every_code),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
