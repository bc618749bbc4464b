/* tests/test_xfer.c — the transfer-phase spans (host/builders/transfer_phase.c,
 * internal/xfer.h) against LMCache 0.5.6's TransferPhaseTracingSubscriber:
 * its verified case (docs/lmcache-0.5.6.md §2.4), skipped samples, the TTL,
 * the bounded table, shutdown, long keys, a batch naming many transfers.
 *
 * A test subscriber plays the part the MP builder will: on MP_*_START with a
 * transfer_key it captures the registry's `store` / `retrieve` context (the
 * real MP subscriber, registered first, has just opened that span), on
 * MP_*_END it marks the transfer ended, and it hands every
 * MP_TRANSFER_PHASE_SAMPLES event to cbt_xfer_on_event. A probe event runs
 * the module's other calls on the harvester thread, where they belong.
 * Every event carries an explicit time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal/xfer.h"
#include "testutil.h"

#define SEC 1000000000ull

static cbt_xfer *g_x;
static cbt_event_type g_probe;
static cbt_name k_step, k_idx;

enum { P_SAMPLE = 1, P_CAPTURE_FAKE, P_ENDED, P_BATCH_END };

/* what the probe steps use, indexed by the event's "idx" */
#define N_FIX 64
static cbt_xfer_sample g_samp[N_FIX];
static char g_key[N_FIX][160];
static const cbt_span_ctx g_fake_parent = {{0x21, 0x22, 0x23}, {0x31, 0x32}, 1};

/* The MP builder's part, reduced to what the module needs: one open
 * mp.store / mp.retrieve per session (the tracer runs without cbt's own MP
 * subscriber, which feeds a module of its own; test_tree covers that). */
#define N_OPEN 64
static struct {
    char sid[CBT_SESSION_MAX];
    cbt_span *sp;
} g_open[N_OPEN];

static cbt_status xsub_event(void *ctx, cbt_tracer *t, const cbt_event *ev)
{
    (void)ctx;
    size_t kl = 0;
    const char *key = cbt_event_get_str(ev, CBT_N_TRANSFER_KEY, &kl);
    switch (ev->type) {
    case CBT_EV_MP_STORE_START:
    case CBT_EV_MP_RETRIEVE_START: {
        bool store = ev->type == CBT_EV_MP_STORE_START;
        cbt_span *sp = cbt_span_start(t, store ? CBT_N_MP_STORE : CBT_N_MP_RETRIEVE,
                                      CBT_SPAN_KIND_INTERNAL, NULL, ev->ts);
        assert_non_null(sp);
        cbt_span_set_str(sp, CBT_N_SESSION_ID, ev->session, ev->session_len);
        for (int i = 0; i < N_OPEN; i++)
            if (!g_open[i].sp) {
                memcpy(g_open[i].sid, ev->session, ev->session_len + 1);
                g_open[i].sp = sp;
                break;
            }
        if (key)
            cbt_xfer_capture(g_x, key, kl, &sp->ctx, store ? CBT_XFER_D2H : CBT_XFER_H2D,
                             ev->session, ev->session_len, ev->ts);
        return CBT_OK;
    }
    case CBT_EV_MP_STORE_END:
    case CBT_EV_MP_RETRIEVE_END:
        for (int i = 0; i < N_OPEN; i++)
            if (g_open[i].sp && strcmp(g_open[i].sid, ev->session) == 0) {
                cbt_span_end(t, g_open[i].sp, ev->ts);
                g_open[i].sp = NULL;
                break;
            }
        cbt_xfer_ended(g_x, key, key ? kl : 0, ev->ts);
        return CBT_OK;
    case CBT_EV_MP_TRANSFER_PHASE_SAMPLES: return cbt_xfer_on_event(g_x, t, ev);
    default: break;
    }
    if (ev->type != g_probe)
        return CBT_OK;
    int64_t i = cbt_event_get_i64(ev, k_idx, -1);
    const char *k = i >= 0 ? g_key[i] : NULL;
    switch (cbt_event_get_i64(ev, k_step, 0)) {
    case P_SAMPLE: cbt_xfer_add_sample(g_x, &g_samp[i], ev->ts); break;
    case P_CAPTURE_FAKE:
        cbt_xfer_capture(g_x, k, strlen(k), &g_fake_parent, CBT_XFER_D2H, "fake", 4, ev->ts);
        break;
    case P_ENDED: cbt_xfer_ended(g_x, k, strlen(k), ev->ts); break;
    case P_BATCH_END: cbt_xfer_batch_end(g_x, t, k, k ? strlen(k) : 0, ev->ts); break;
    default: return CBT_ERR_INVAL;
    }
    return CBT_OK;
}

static void xsub_shutdown(void *ctx, cbt_tracer *t, uint64_t now_ns)
{
    (void)ctx, (void)now_ns;
    cbt_xfer_shutdown(g_x, t);
}

/* Tracer and memory sink without cbt's MP subscriber, and ours. */
static void start(uint32_t max_transfers, uint64_t ttl_ns)
{
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    c.mp_subscriber = false;
    memset(g_open, 0, sizeof g_open);
    tu_start(&c);
    assert_int_equal(cbt_event_type_register("TEST_XFER_PROBE", &g_probe), CBT_OK);
    k_step = tu_name("step");
    k_idx = tu_name("idx");
    assert_int_equal(cbt_xfer_create(max_transfers, ttl_ns, &g_x), CBT_OK);
    cbt_subscriber s;
    cbt_subscriber_init(&s, "xfer-test", NULL, xsub_event, xsub_shutdown, NULL);
    cbt_subscriber_want(&s, CBT_EV_MP_STORE_START);
    cbt_subscriber_want(&s, CBT_EV_MP_RETRIEVE_START);
    cbt_subscriber_want(&s, CBT_EV_MP_STORE_END);
    cbt_subscriber_want(&s, CBT_EV_MP_RETRIEVE_END);
    cbt_subscriber_want(&s, CBT_EV_MP_TRANSFER_PHASE_SAMPLES);
    cbt_subscriber_want(&s, g_probe);
    assert_int_equal(cbt_add_subscriber(&s), CBT_OK);
}

static void stop(cbt_xfer_stats *st)
{
    tu_stop();
    cbt_xfer_stats_get(g_x, st);
    cbt_xfer_destroy(g_x);
    g_x = NULL;
}

static void pub_at(cbt_event *ev, uint64_t ts)
{
    ev->ts = ts;
    ev->flags |= CBT_EVF_EXPLICIT_TS;
    assert_int_equal(cbt_publish(ev), CBT_OK);
}

/* An MP event, with a transfer key when `key` is not NULL. */
static void pub_mp(cbt_event_type type, const char *sid, const char *key, uint64_t ts)
{
    cbt_event ev;
    assert_int_equal(cbt_event_init(&ev, type, sid), CBT_OK);
    if (key)
        assert_int_equal(cbt_event_str(&ev, CBT_N_TRANSFER_KEY, key), CBT_OK);
    pub_at(&ev, ts);
}

/* One sample as a CBT_EV_MP_TRANSFER_PHASE_SAMPLES event: the six values the
 * rules require always, nbytes and device_index when an event holds eight. */
static void pub_sample(int64_t phase, int64_t dir, int64_t dev, double elapsed_ms, int64_t nbytes,
                       const char *key, double t0, double t1, uint64_t ts)
{
    cbt_event ev;
    assert_int_equal(cbt_event_init(&ev, CBT_EV_MP_TRANSFER_PHASE_SAMPLES, NULL), CBT_OK);
    assert_int_equal(cbt_event_i64(&ev, CBT_N_PHASE, phase), CBT_OK);
    assert_int_equal(cbt_event_i64(&ev, CBT_N_DIRECTION, dir), CBT_OK);
    assert_int_equal(cbt_event_f64(&ev, CBT_N_ELAPSED_MS, elapsed_ms), CBT_OK);
    assert_int_equal(cbt_event_str(&ev, CBT_N_TRANSFER_KEY, key), CBT_OK);
    assert_int_equal(cbt_event_f64(&ev, CBT_N_START_TIME_S, t0), CBT_OK);
    assert_int_equal(cbt_event_f64(&ev, CBT_N_END_TIME_S, t1), CBT_OK);
#if CBT_EVENT_META_MAX >= 8
    assert_int_equal(cbt_event_i64(&ev, CBT_N_NBYTES, nbytes), CBT_OK);
    assert_int_equal(cbt_event_i64(&ev, CBT_N_DEVICE_INDEX, dev), CBT_OK);
#else
    (void)dev, (void)nbytes;
#endif
    pub_at(&ev, ts);
}

/* The batch end: no phase, ended_transfer_key (NULL: absent). */
static void pub_batch_end(const char *ended_key, uint64_t ts)
{
    cbt_event ev;
    assert_int_equal(cbt_event_init(&ev, CBT_EV_MP_TRANSFER_PHASE_SAMPLES, NULL), CBT_OK);
    if (ended_key)
        assert_int_equal(cbt_event_str(&ev, CBT_N_ENDED_TRANSFER_KEY, ended_key), CBT_OK);
    pub_at(&ev, ts);
}

static void pub_probe(int step, int64_t idx, uint64_t ts)
{
    cbt_event ev;
    assert_int_equal(cbt_event_init(&ev, g_probe, NULL), CBT_OK);
    assert_int_equal(cbt_event_i64(&ev, k_step, step), CBT_OK);
    assert_int_equal(cbt_event_i64(&ev, k_idx, idx), CBT_OK);
    pub_at(&ev, ts);
}

static cbt_xfer_sample sample(int64_t phase, int64_t dir, int64_t dev, double elapsed_ms,
                              int64_t nbytes, const char *key, double t0, double t1)
{
    cbt_xfer_sample s = {phase, dir, dev, true, elapsed_ms, nbytes, key, strlen(key), t0, t1};
    return s;
}

static double attr_f64(const cbt_span *s, cbt_name key)
{
    const cbt_attr *a = cbt_span_attr(s, key);
    assert_non_null(a);
    assert_int_equal(a->type, CBT_META_F64);
    return a->v.f64;
}

static int64_t attr_i64(const cbt_span *s, cbt_name key)
{
    const cbt_attr *a = cbt_span_attr(s, key);
    assert_non_null(a);
    assert_int_equal(a->type, CBT_META_I64);
    return a->v.i64;
}

static void attr_str_is(const cbt_span *s, cbt_name key, const char *want)
{
    const cbt_attr *a = cbt_span_attr(s, key);
    assert_non_null(a);
    assert_int_equal(a->type, CBT_META_STR);
    assert_int_equal(a->str_len, strlen(want));
    assert_memory_equal(cbt_attr_str(s, a), want, a->str_len);
}

/* A phase span: INTERNAL, a child of `parent`, these times and totals. */
static void check_phase(const cbt_span *s, const cbt_span *parent, const char *sid,
                        uint64_t start_ns, uint64_t end_ns, int64_t dev, int64_t steps,
                        int64_t nbytes, double elapsed_s, double first_s, double last_s)
{
    assert_non_null(s);
    assert_true(tu_is_child_of(s, parent));
    assert_int_equal(s->kind, CBT_SPAN_KIND_INTERNAL);
    assert_true(s->start_ns == start_ns);
    assert_true(s->end_ns == end_ns);
    attr_str_is(s, CBT_N_SESSION_ID, sid);
    assert_true(attr_i64(s, CBT_N_DEVICE_INDEX) == dev);
    assert_true(attr_i64(s, CBT_N_NUM_STEPS) == steps);
    assert_true(attr_i64(s, CBT_N_NBYTES) == nbytes);
    assert_true(attr_f64(s, CBT_N_ELAPSED_SECONDS) == elapsed_s);
    assert_true(attr_f64(s, CBT_N_FIRST_START_S) == first_s);
    assert_true(attr_f64(s, CBT_N_LAST_END_S) == last_s);
}

/* ---- LMCache's verified case --------------------------------------------------
 * Two kernel sections of 0.5 s and 0.25 s starting at 2.10 s, one staging
 * section of 1.0 s (4e9 bytes) starting at 2.20 s, all D2H under the store
 * of r1 (transfer r1#0). LMCache: transfer.kernel_interval [2.10, 2.85],
 * transfer.staging [2.85, 3.85] under mp.store, throughput 4.0. The samples
 * arrive before the END (no spans yet: the batch ends, the transfer has not
 * ended), and the END's batch names the transfer by ended_transfer_key. */
static void verified_case(void **state)
{
    (void)state;
    start(0, 0);
    g_samp[0] = sample(CBT_XFER_KERNEL, CBT_XFER_D2H, 3, 500.0, 2000000000, "r1#0", 2.10, 2.60);
    g_samp[1] = sample(CBT_XFER_KERNEL, CBT_XFER_D2H, 3, 250.0, 2000000000, "r1#0", 2.60, 2.85);
    g_samp[2] = sample(CBT_XFER_STAGING, CBT_XFER_D2H, 3, 1000.0, 4000000000, "r1#0", 2.20, 3.20);
    pub_mp(CBT_EV_MP_REQUEST_START, "r1", NULL, 1 * SEC);
    pub_mp(CBT_EV_MP_STORE_SUBMITTED, "r1", NULL, 1 * SEC);
    pub_mp(CBT_EV_MP_STORE_START, "r1", "r1#0", 2 * SEC);
    for (int i = 0; i < 3; i++)
        pub_probe(P_SAMPLE, i, 3 * SEC);
    pub_batch_end(NULL, 3 * SEC);
    tu_flush();
    assert_int_equal(tu_count("transfer.kernel_interval", NULL), 0); /* not ended yet */
    pub_mp(CBT_EV_MP_STORE_END, "r1", "r1#0", 4 * SEC);
    pub_mp(CBT_EV_MP_REQUEST_END, "r1", NULL, 4 * SEC);
    pub_batch_end("r1#0", 4 * SEC);
    cbt_xfer_stats st;
    stop(&st);

    const cbt_span *store = tu_need_span("mp.store", "r1", 0);
    assert_int_equal(tu_count("transfer.kernel_interval", NULL), 1);
    assert_int_equal(tu_count("transfer.staging", NULL), 1);
    const cbt_span *k = tu_find("transfer.kernel_interval", "r1", 0);
    const cbt_span *s = tu_find("transfer.staging", "r1", 0);
    check_phase(k, store, "r1", 2100000000ull, 2850000000ull, 3, 2, 4000000000, 0.75, 2.10, 2.85);
    check_phase(s, store, "r1", 2850000000ull, 3850000000ull, 3, 1, 4000000000, 1.0, 2.20, 3.20);
    assert_true(attr_f64(s, CBT_N_THROUGHPUT_GBPS) == 4.0);
    assert_null(cbt_span_attr(k, CBT_N_THROUGHPUT_GBPS)); /* staging only */
    assert_int_equal(k->flags & CBT_SPANF_INCOMPLETE, 0);
    assert_int_equal(s->flags & CBT_SPANF_INCOMPLETE, 0);
    assert_true(st.spans == 2 && st.samples == 3);
    assert_true(st.samples_skipped == 0 && st.unknown_key == 0);
    assert_true(st.parents_expired == 0 && st.parents_full == 0);
}

/* The same case as events (the bridge's split form): the samples arrive
 * after the END and the batch end names no key; the samples named it. With
 * six values an event carries no nbytes or device_index: 0 and -1. */
static void verified_case_as_events(void **state)
{
    (void)state;
    start(0, 0);
    pub_mp(CBT_EV_MP_STORE_SUBMITTED, "r2", NULL, 1 * SEC);
    pub_mp(CBT_EV_MP_STORE_START, "r2", "r2#0", 2 * SEC);
    pub_mp(CBT_EV_MP_STORE_END, "r2", "r2#0", 4 * SEC);
    pub_sample(CBT_XFER_KERNEL, CBT_XFER_D2H, 1, 500.0, 2000000000, "r2#0", 2.10, 2.60, 4 * SEC);
    pub_sample(CBT_XFER_STAGING, CBT_XFER_D2H, 1, 1000.0, 4000000000, "r2#0", 2.20, 3.20, 4 * SEC);
    pub_sample(CBT_XFER_KERNEL, CBT_XFER_D2H, 1, 250.0, 2000000000, "r2#0", 2.60, 2.85, 4 * SEC);
    pub_batch_end("", 4 * SEC);
    cbt_xfer_stats st;
    stop(&st);
    const cbt_span *store = tu_need_span("mp.store", "r2", 0);
    const cbt_span *k = tu_find("transfer.kernel_interval", "r2", 0);
    const cbt_span *s = tu_find("transfer.staging", "r2", 0);
#if CBT_EVENT_META_MAX >= 8
    const int64_t dev = 1, knb = 4000000000, snb = 4000000000;
    const double gbps = 4.0;
#else
    const int64_t dev = -1, knb = 0, snb = 0;
    const double gbps = 0.0;
#endif
    check_phase(k, store, "r2", 2100000000ull, 2850000000ull, dev, 2, knb, 0.75, 2.10, 2.85);
    check_phase(s, store, "r2", 2850000000ull, 3850000000ull, dev, 1, snb, 1.0, 2.20, 3.20);
    assert_true(attr_f64(s, CBT_N_THROUGHPUT_GBPS) == gbps);
    assert_true(st.spans == 2 && st.samples == 3 && st.samples_skipped == 0);
    assert_int_equal(cbt_xfer_count(NULL), 0);
}

/* Samples the rules refuse are skipped and counted; one whose key was never
 * captured counts as unknown_key; the totals hold only the others. A
 * retrieve (H2D) nests under mp.retrieve; a staging phase that starts first
 * comes first. */
static void skipped_samples(void **state)
{
    (void)state;
    start(0, 0);
    pub_mp(CBT_EV_MP_RETRIEVE_SUBMITTED, "r3", NULL, 1 * SEC);
    pub_mp(CBT_EV_MP_RETRIEVE_START, "r3", "r3#0", 2 * SEC);
    pub_mp(CBT_EV_MP_RETRIEVE_END, "r3", "r3#0", 3 * SEC);
    uint64_t ts = 3 * SEC;
    /* kept: one kernel section, one staging section that starts earlier */
    pub_sample(CBT_XFER_KERNEL, CBT_XFER_H2D, 0, 100.0, 10, "r3#0", 5.0, 5.1, ts);
    pub_sample(CBT_XFER_STAGING, CBT_XFER_H2D, 0, 200.0, 20, "r3#0", 4.0, 4.2, ts);
    /* skipped */
    pub_sample(CBT_XFER_KERNEL, CBT_XFER_H2D, 0, 100.0, 10, "r3#0", 0.0, 5.1, ts);  /* t0 <= 0 */
    pub_sample(CBT_XFER_KERNEL, CBT_XFER_H2D, 0, 100.0, 10, "r3#0", -1.0, 5.1, ts); /* t0 < 0 */
    pub_sample(CBT_XFER_KERNEL, CBT_XFER_H2D, 0, 100.0, 10, "r3#0", 5.0, 4.9, ts);  /* t1 < t0 */
    pub_sample(CBT_XFER_KERNEL, CBT_XFER_D2H, 0, 100.0, 10, "r3#0", 5.0, 5.1, ts);  /* a store's */
    pub_sample(2, CBT_XFER_H2D, 0, 100.0, 10, "r3#0", 5.0, 5.1, ts);                /* phase 2 */
    pub_sample(CBT_XFER_KERNEL, 7, 0, 100.0, 10, "r3#0", 5.0, 5.1, ts);             /* direction 7 */
    pub_sample(CBT_XFER_KERNEL, CBT_XFER_H2D, 0, 100.0, 10, "r3#0", NAN, 5.1, ts);  /* NaN */
    pub_sample(CBT_XFER_KERNEL, CBT_XFER_H2D, 0, INFINITY, 10, "r3#0", 5.0, 5.1, ts);
    cbt_event ev; /* wrong types: phase a double; no transfer_key string */
    assert_int_equal(cbt_event_init(&ev, CBT_EV_MP_TRANSFER_PHASE_SAMPLES, NULL), CBT_OK);
    assert_int_equal(cbt_event_f64(&ev, CBT_N_PHASE, 0.0), CBT_OK);
    assert_int_equal(cbt_event_i64(&ev, CBT_N_DIRECTION, 0), CBT_OK);
    assert_int_equal(cbt_event_f64(&ev, CBT_N_ELAPSED_MS, 1.0), CBT_OK);
    assert_int_equal(cbt_event_str(&ev, CBT_N_TRANSFER_KEY, "r3#0"), CBT_OK);
    assert_int_equal(cbt_event_f64(&ev, CBT_N_START_TIME_S, 5.0), CBT_OK);
    assert_int_equal(cbt_event_i64(&ev, CBT_N_END_TIME_S, 6), CBT_OK); /* an int time is fine */
    pub_at(&ev, ts);
    assert_int_equal(cbt_event_init(&ev, CBT_EV_MP_TRANSFER_PHASE_SAMPLES, NULL), CBT_OK);
    assert_int_equal(cbt_event_i64(&ev, CBT_N_PHASE, 0), CBT_OK);
    assert_int_equal(cbt_event_i64(&ev, CBT_N_DIRECTION, 0), CBT_OK);
    assert_int_equal(cbt_event_f64(&ev, CBT_N_ELAPSED_MS, 1.0), CBT_OK);
    assert_int_equal(cbt_event_i64(&ev, CBT_N_TRANSFER_KEY, 30), CBT_OK);
    assert_int_equal(cbt_event_f64(&ev, CBT_N_START_TIME_S, 5.0), CBT_OK);
    assert_int_equal(cbt_event_f64(&ev, CBT_N_END_TIME_S, 6.0), CBT_OK);
    pub_at(&ev, ts);
    /* unknown keys */
    pub_sample(CBT_XFER_KERNEL, CBT_XFER_H2D, 0, 100.0, 10, "nobody#0", 5.0, 5.1, ts);
    pub_sample(CBT_XFER_KERNEL, CBT_XFER_H2D, 0, 100.0, 10, "", 5.0, 5.1, ts);
    pub_batch_end(NULL, ts);
    cbt_xfer_stats st;
    stop(&st);
    assert_true(st.samples == 2);
    assert_true(st.samples_skipped == 10);
    assert_true(st.unknown_key == 2);
    assert_true(st.spans == 2);
    const cbt_span *ret = tu_need_span("mp.retrieve", "r3", 0);
    const cbt_span *k = tu_find("transfer.kernel_interval", "r3", 0);
    const cbt_span *s = tu_find("transfer.staging", "r3", 0);
    /* staging first (4.0 s), 0.2 s; then kernel, 0.1 s */
    int64_t dev = CBT_EVENT_META_MAX >= 8 ? 0 : -1;
    int64_t knb = CBT_EVENT_META_MAX >= 8 ? 10 : 0, snb = CBT_EVENT_META_MAX >= 8 ? 20 : 0;
    check_phase(s, ret, "r3", 4000000000ull, (uint64_t)((4.0 + 0.2) * 1e9), dev, 1, snb, 0.2, 4.0,
                4.2);
    check_phase(k, ret, "r3", (uint64_t)((4.0 + 0.2) * 1e9), (uint64_t)((4.0 + 0.2 + 0.1) * 1e9),
                dev, 1, knb, 0.1, 5.0, 5.1);
    assert_true(attr_f64(s, CBT_N_THROUGHPUT_GBPS) == (double)snb / 0.2 / 1e9);
}

/* A captured transfer older than the TTL when an END or samples event comes
 * is dropped: its samples are then unknown. A younger one stays. */
static void parents_expire(void **state)
{
    (void)state;
    start(0, 1 * SEC); /* TTL 1 s */
    pub_mp(CBT_EV_MP_STORE_SUBMITTED, "r4", NULL, 1 * SEC);
    pub_mp(CBT_EV_MP_STORE_START, "r4", "r4#0", 1 * SEC);
    pub_mp(CBT_EV_MP_STORE_END, "r4", "r4#0", 1 * SEC + SEC / 2); /* 0.5 s: kept */
    pub_mp(CBT_EV_MP_STORE_SUBMITTED, "r5", NULL, 2 * SEC + SEC / 2);
    pub_mp(CBT_EV_MP_STORE_START, "r5", "r5#0", 2 * SEC + SEC / 2);
    /* at 3 s r4 (captured at 1 s) is 2 s old: gone; r5 is 0.5 s old */
    pub_sample(CBT_XFER_KERNEL, CBT_XFER_D2H, 0, 10.0, 1, "r4#0", 2.0, 2.01, 3 * SEC);
    pub_sample(CBT_XFER_KERNEL, CBT_XFER_D2H, 0, 10.0, 1, "r5#0", 2.0, 2.01, 3 * SEC);
    pub_batch_end("r4#0", 3 * SEC);
    pub_mp(CBT_EV_MP_STORE_END, "r5", "r5#0", 3 * SEC);
    pub_batch_end("r5#0", 3 * SEC);
    cbt_xfer_stats st;
    stop(&st);
    assert_true(st.parents_expired == 1);
    assert_true(st.unknown_key == 1);
    assert_true(st.samples == 1);
    assert_int_equal(tu_count("transfer.kernel_interval", "r4"), 0);
    assert_int_equal(tu_count("transfer.kernel_interval", "r5"), 1);
    assert_true(tu_is_child_of(tu_find("transfer.kernel_interval", "r5", 0),
                               tu_need_span("mp.store", "r5", 0)));
}

/* The table holds max_transfers; a capture past it is refused and counted,
 * unless expired transfers make room. A second capture of a key replaces
 * the first without taking a slot. */
static void table_full(void **state)
{
    (void)state;
    start(2, 10 * SEC);
    for (int i = 0; i < 4; i++)
        snprintf(g_key[i], sizeof g_key[i], "k%d", i);
    pub_probe(P_CAPTURE_FAKE, 0, 1 * SEC);
    pub_probe(P_CAPTURE_FAKE, 1, 1 * SEC);
    pub_probe(P_CAPTURE_FAKE, 1, 2 * SEC); /* again: replaces */
    pub_probe(P_CAPTURE_FAKE, 2, 3 * SEC); /* full */
    pub_probe(P_CAPTURE_FAKE, 3, 12 * SEC); /* k0 (1 s) has expired by 12 s: room */
    g_samp[0] = sample(CBT_XFER_KERNEL, CBT_XFER_D2H, 0, 5.0, 1, g_key[0], 1.0, 1.1);
    g_samp[1] = sample(CBT_XFER_KERNEL, CBT_XFER_D2H, 0, 5.0, 1, g_key[1], 1.0, 1.1);
    g_samp[2] = sample(CBT_XFER_KERNEL, CBT_XFER_D2H, 0, 5.0, 1, g_key[2], 1.0, 1.1);
    g_samp[3] = sample(CBT_XFER_KERNEL, CBT_XFER_D2H, 0, 5.0, 1, g_key[3], 1.0, 1.1);
    for (int i = 0; i < 4; i++)
        pub_probe(P_SAMPLE, i, 12 * SEC);
    for (int i = 0; i < 4; i++)
        pub_probe(P_ENDED, i, 12 * SEC);
    pub_probe(P_BATCH_END, -1, 12 * SEC);
    cbt_xfer_stats st;
    stop(&st);
    assert_true(st.parents_full == 1);
    assert_true(st.parents_expired == 1);
    assert_true(st.samples == 2);     /* k1 and k3 */
    assert_true(st.unknown_key == 2); /* k0 expired, k2 refused */
    assert_int_equal(tu_count("transfer.kernel_interval", "fake"), 2);
    const cbt_span *s = tu_find("transfer.kernel_interval", "fake", 0);
    assert_memory_equal(s->parent_span_id, g_fake_parent.span_id, 8);
    assert_memory_equal(s->ctx.trace_id, g_fake_parent.trace_id, 16);
}

/* Shutdown emits what is held, ended or not (the latter flagged
 * incomplete); a transfer with no samples emits nothing. */
static void shutdown_emits(void **state)
{
    (void)state;
    start(0, 0);
    pub_mp(CBT_EV_MP_STORE_SUBMITTED, "r6", NULL, 1 * SEC);
    pub_mp(CBT_EV_MP_STORE_START, "r6", "r6#0", 1 * SEC);
    pub_mp(CBT_EV_MP_STORE_SUBMITTED, "r7", NULL, 1 * SEC);
    pub_mp(CBT_EV_MP_STORE_START, "r7", "r7#0", 1 * SEC);
    pub_mp(CBT_EV_MP_STORE_END, "r7", "r7#0", 2 * SEC);
    pub_mp(CBT_EV_MP_STORE_SUBMITTED, "r8", NULL, 1 * SEC);
    pub_mp(CBT_EV_MP_STORE_START, "r8", "r8#0", 1 * SEC);
    pub_sample(CBT_XFER_KERNEL, CBT_XFER_D2H, 0, 10.0, 1, "r6#0", 1.5, 1.6, 2 * SEC);
    pub_sample(CBT_XFER_STAGING, CBT_XFER_D2H, 0, 10.0, 1, "r7#0", 1.5, 1.6, 2 * SEC);
    /* no batch end: r7 ended but no batch named it as ended */
    tu_flush();
    assert_int_equal(tu_count("transfer.kernel_interval", NULL), 0);
    assert_int_equal(tu_count("transfer.staging", NULL), 0);
    cbt_xfer_stats st;
    stop(&st);
    assert_true(st.spans == 2);
    const cbt_span *a = tu_find("transfer.kernel_interval", "r6", 0);
    const cbt_span *b = tu_find("transfer.staging", "r7", 0);
    assert_non_null(a);
    assert_non_null(b);
    assert_true(a->flags & CBT_SPANF_INCOMPLETE);   /* r6 never ended */
    assert_false(b->flags & CBT_SPANF_INCOMPLETE);  /* r7 did */
    assert_int_equal(tu_count("transfer.kernel_interval", "r8"), 0);
    assert_int_equal(tu_count("transfer.staging", "r8"), 0);
}

/* Keys longer than the table's string (CBT_SESSION_MAX - 1) are keyed by a
 * hash of all their bytes: two that differ only in their last byte stay two
 * transfers. */
static void long_keys(void **state)
{
    (void)state;
    start(0, 0);
    for (int i = 0; i < 2; i++) {
        memset(g_key[i], 'q', 150);
        g_key[i][150] = (char)('0' + i);
        g_key[i][151] = '\0';
        g_samp[i] = sample(CBT_XFER_KERNEL, CBT_XFER_D2H, i, 10.0 * (i + 1), 1, g_key[i], 1.0, 1.5);
        pub_probe(P_CAPTURE_FAKE, i, 1 * SEC);
    }
    for (int i = 0; i < 2; i++) {
        pub_probe(P_SAMPLE, i, 2 * SEC);
        pub_probe(P_ENDED, i, 2 * SEC);
    }
    pub_probe(P_BATCH_END, -1, 2 * SEC);
    cbt_xfer_stats st;
    stop(&st);
    assert_true(st.samples == 2 && st.unknown_key == 0 && st.spans == 2);
    assert_int_equal(tu_count("transfer.kernel_interval", "fake"), 2);
    for (int i = 0; i < 2; i++) {
        const cbt_span *s = tu_find("transfer.kernel_interval", "fake", (uint32_t)i);
        int64_t dev = attr_i64(s, CBT_N_DEVICE_INDEX);
        assert_true(attr_i64(s, CBT_N_NUM_STEPS) == 1);
        assert_true(attr_f64(s, CBT_N_ELAPSED_SECONDS) == 0.01 * (double)(dev + 1));
    }
}

/* One batch naming more transfers than its list holds: the batch end finds
 * the rest in the table. */
static void many_in_one_batch(void **state)
{
    (void)state;
    start(0, 0);
    enum { N = 50 };
    for (int i = 0; i < N; i++) {
        snprintf(g_key[i], sizeof g_key[i], "m%02d", i);
        g_samp[i] = sample(CBT_XFER_STAGING, CBT_XFER_D2H, 0, 1.0, 1000, g_key[i], 1.0, 1.001);
        pub_probe(P_CAPTURE_FAKE, i, 1 * SEC);
        pub_probe(P_ENDED, i, 1 * SEC);
    }
    for (int i = 0; i < N; i++)
        pub_probe(P_SAMPLE, i, 2 * SEC);
    pub_probe(P_BATCH_END, -1, 2 * SEC);
    tu_flush();
    assert_int_equal(tu_count("transfer.staging", "fake"), N);
    cbt_xfer_stats st;
    stop(&st);
    assert_true(st.spans == N && st.samples == N);
    assert_int_equal(tu_count("transfer.staging", "fake"), N); /* nothing left for shutdown */
}

static void create_arguments(void **state)
{
    (void)state;
    cbt_xfer *x = (cbt_xfer *)1;
    assert_int_equal(cbt_xfer_create(0, 0, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_xfer_create((1u << 22) + 1, 0, &x), CBT_ERR_INVAL);
    assert_null(x);
    assert_int_equal(cbt_xfer_create(1, 0, &x), CBT_OK);
    cbt_event ev;
    assert_int_equal(cbt_event_init(&ev, CBT_EV_MP_STORE_START, "r"), CBT_OK);
    assert_int_equal(cbt_xfer_on_event(x, NULL, &ev), CBT_ERR_INVAL);
    assert_int_equal(cbt_xfer_on_event(x, NULL, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_xfer_on_event(NULL, NULL, &ev), CBT_ERR_INVAL);
    /* captures without what they need are ignored */
    cbt_xfer_capture(x, "k", 1, NULL, CBT_XFER_D2H, "s", 1, 1);
    cbt_xfer_capture(x, "k", 1, &g_fake_parent, 5, "s", 1, 1);
    cbt_xfer_capture(x, "k", 1, &g_fake_parent, CBT_XFER_D2H, "", 0, 1);
    cbt_xfer_capture(x, "", 0, &g_fake_parent, CBT_XFER_D2H, "s", 1, 1);
    assert_int_equal(cbt_xfer_count(x), 0);
    cbt_xfer_capture(x, "k", 1, &g_fake_parent, CBT_XFER_D2H, "s", 1, 1);
    assert_int_equal(cbt_xfer_count(x), 1);
    cbt_xfer_stats st;
    cbt_xfer_stats_get(NULL, &st);
    assert_true(st.spans == 0);
    cbt_xfer_shutdown(x, NULL); /* no tracer: nothing to emit into */
    assert_int_equal(cbt_xfer_count(x), 0);
    cbt_xfer_destroy(x);
    cbt_xfer_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(verified_case, tu_teardown),
        cmocka_unit_test_teardown(verified_case_as_events, tu_teardown),
        cmocka_unit_test_teardown(skipped_samples, tu_teardown),
        cmocka_unit_test_teardown(parents_expire, tu_teardown),
        cmocka_unit_test_teardown(table_full, tu_teardown),
        cmocka_unit_test_teardown(shutdown_emits, tu_teardown),
        cmocka_unit_test_teardown(long_keys, tu_teardown),
        cmocka_unit_test_teardown(many_in_one_batch, tu_teardown),
        cmocka_unit_test(create_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
