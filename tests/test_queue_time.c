/* tests/test_queue_time.c — queue time on stream-timed spans, on the CPU
 * backend (its worker is the stream; docs/spans.md, "Queue time"):
 * an operation enqueued behind a long one on one CpuStream carries a
 * cbt.queue_ns of at least the planted delay, an unqueued one a small one,
 * and both the exact difference of their stream reach and host enqueue
 * times; cbt.stream / cbt.device name the stream; the request root's
 * cbt.gpu_queue_ns sums its stream-timed children's queue times and
 * cbt.gpu_busy_ns is the union of their intervals, not the sum (exactly,
 * on explicit times, and on two real streams running at once), a nested
 * stream-timed span counted once, in its parent; kernel
 * spans measure cbt_launch_begin to their first CTA; pspans begun on a
 * stream carry it too; and no span that a stream did not time carries any
 * of these (the root, a host-side child, an event with the caller's own
 * time, a flag a caller set without one). */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stddef.h>
#include <time.h>

#include "cbt/cb.h"
#include "cbt/kernel_span.h"
#include "cbt/pspan.h"
#include "internal/clock.h"
#include "testutil.h"

#define MS 1000000ull

static const char *str_attr(const cbt_span *s, const char *key, size_t *len)
{
    const cbt_attr *a = cbt_span_attr(s, tu_name(key));
    assert_non_null(a);
    assert_int_equal(a->type, CBT_META_STR);
    *len = a->str_len;
    return cbt_attr_str(s, a);
}

/* None of the queue attributes: what a span no stream timed looks like. */
static void assert_no_queue(const cbt_span *s)
{
    assert_false(tu_has_attr(s, "cbt.queue_ns"));
    assert_false(tu_has_attr(s, "cbt.enqueue_ns"));
    assert_false(tu_has_attr(s, "cbt.stream"));
    assert_false(tu_has_attr(s, "cbt.device"));
    assert_false(tu_has_attr(s, "cbt.gpu_queue_ns"));
    assert_false(tu_has_attr(s, "cbt.gpu_busy_ns"));
}

/* The span's queue attributes agree with its own start: queue = start -
 * enqueue exactly, enqueue before start. Returns the queue time. */
static uint64_t checked_queue(const cbt_span *s, const cbt_stream *st)
{
    uint64_t q = (uint64_t)tu_attr_i64(s, "cbt.queue_ns");
    uint64_t enq = (uint64_t)tu_attr_i64(s, "cbt.enqueue_ns");
    assert_true(enq <= s->start_ns);
    assert_int_equal(q, s->start_ns - enq);
    assert_int_equal(tu_attr_i64(s, "cbt.stream"), cbt_stream_ordinal(st));
    size_t n;
    const char *dev = str_attr(s, "cbt.device", &n);
    assert_int_equal(n, 3);
    assert_memory_equal(dev, "cpu", 3);
    return q;
}

/* One MP store request on `s`: REQUEST_START, STORE_SUBMITTED, (the
 * stream busy for `busy_us` with someone else's work), STORE_START, END. */
static void store_request(cbt_stream *s, const char *sid, uint32_t busy_us)
{
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_START, sid);
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_END, sid);
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    if (busy_us)
        tu_enqueue_sleep(s, busy_us); /* the long one: not this request's */
    tu_pub_on(s, CBT_EV_MP_STORE_START, sid);
    tu_enqueue_sleep(s, 2000);
    tu_pub_on(s, CBT_EV_MP_STORE_END, sid);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
}

/* Behind 100 ms of other work on one CpuStream, the store waits at least
 * 100 ms; on the idle stream far less (a worker's wake-up). The root sums
 * it, and the host-side spans carry none of it. */
static void queued_behind_long_op(void **state)
{
    (void)state;
    tu_start(NULL);
    cbt_stream *s;
    assert_int_equal(cbt_stream_cpu_create(0, &s), CBT_OK);
    store_request(s, "queued", 100000);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    store_request(s, "idle", 0);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();

    const cbt_span *qs = tu_need_span("mp.store", "queued", 0);
    const cbt_span *is = tu_need_span("mp.store", "idle", 0);
    uint64_t qq = checked_queue(qs, s), iq = checked_queue(is, s);
    printf("# queued behind 100 ms: cbt.queue_ns %llu; on the idle stream %llu\n",
           (unsigned long long)qq, (unsigned long long)iq);
    assert_true(qq >= 100 * MS);
    assert_true(iq < 50 * MS); /* a wake-up, not a wait behind work */

    /* the events themselves carry it, on the host clock */
    const tu_event *ev = tu_event_find(CBT_EV_MP_STORE_START, "queued", 0);
    assert_non_null(ev);
    assert_true(ev->flags & CBT_EVF_ENQUEUED);
    assert_int_equal(ev->ts - ev->enqueue_ns, qq);
    assert_int_equal(ev->device, CBT_DEVICE_CPU);

    /* the root: the one stream-timed child's queue, its interval as busy */
    const cbt_span *root = tu_need_span("request", "queued", 0);
    assert_int_equal(tu_attr_i64(root, "cbt.gpu_queue_ns"), qq);
    assert_int_equal(tu_attr_i64(root, "cbt.gpu_busy_ns"), qs->end_ns - qs->start_ns);
    assert_false(tu_has_attr(root, "cbt.queue_ns"));
    assert_false(tu_has_attr(root, "cbt.enqueue_ns"));
    /* published on the host, not a stream: nothing measured */
    assert_no_queue(tu_need_span("mp.lookup_prefetch", "queued", 0));
    cbt_stream_destroy(s);
    tu_stop();
}

/* Explicit times, so the arithmetic is exact: a store [10, 30] enqueued at
 * 2 and a retrieve [20, 40] enqueued at 5 (ms): queue 8 + 15 = 23 ms, busy
 * the union [10, 40] = 30 ms (their sum would be 40). A caller sets
 * CBT_EVF_ENQUEUED with CBT_EVF_EXPLICIT_TS, as a replay of such events does. */
static void pub_at(cbt_event_type type, const char *sid, uint64_t t_ms, uint64_t enq_ms, uint32_t stream)
{
    static const uint64_t T0 = 1700000000000000000ull;
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, type, sid), CBT_OK);
    e.ts = T0 + t_ms * MS;
    e.flags |= CBT_EVF_EXPLICIT_TS;
    if (stream) {
        e.flags |= CBT_EVF_ENQUEUED;
        e.enqueue_ns = T0 + enq_ms * MS;
        e.stream = stream;
        e.device = 0;
        e.pair = stream;
    }
    assert_int_equal(cbt_publish(&e), CBT_OK);
}

static void root_busy_is_the_union(void **state)
{
    (void)state;
    tu_start(NULL);
    const char *sid = "union";
    pub_at(CBT_EV_MP_REQUEST_START, sid, 1, 0, 0);
    pub_at(CBT_EV_MP_STORE_SUBMITTED, sid, 1, 0, 0);
    pub_at(CBT_EV_MP_RETRIEVE_SUBMITTED, sid, 1, 0, 0);
    pub_at(CBT_EV_MP_STORE_START, sid, 10, 2, 7);
    pub_at(CBT_EV_MP_RETRIEVE_START, sid, 20, 5, 8);
    pub_at(CBT_EV_MP_REQUEST_END, sid, 25, 0, 0);
    pub_at(CBT_EV_MP_STORE_END, sid, 30, 0, 7);
    pub_at(CBT_EV_MP_RETRIEVE_END, sid, 40, 0, 8);
    tu_flush();
    const cbt_span *st = tu_need_span("mp.store", sid, 0);
    const cbt_span *rt = tu_need_span("mp.retrieve", sid, 0);
    assert_int_equal(tu_attr_i64(st, "cbt.queue_ns"), 8 * MS);
    assert_int_equal(tu_attr_i64(rt, "cbt.queue_ns"), 15 * MS);
    assert_int_equal(tu_attr_i64(st, "cbt.stream"), 7);
    size_t n;
    const char *dev = str_attr(rt, "cbt.device", &n);
    assert_int_equal(n, 6);
    assert_memory_equal(dev, "cuda:0", 6);
    const cbt_span *root = tu_need_span("request", sid, 0);
    assert_int_equal(tu_attr_i64(root, "cbt.gpu_queue_ns"), 23 * MS);
    assert_int_equal(tu_attr_i64(root, "cbt.gpu_busy_ns"), 30 * MS);
    assert_int_equal(tu_attr_i64(root, "cbt.gpu_tail_ns"), 15 * MS);

    /* a stream that reached the work "before" it was enqueued (clocks that
     * disagree): clamped at 0, the measured enqueue time kept */
    pub_at(CBT_EV_MP_REQUEST_START, "early", 100, 0, 0);
    pub_at(CBT_EV_MP_STORE_SUBMITTED, "early", 100, 0, 0);
    pub_at(CBT_EV_MP_STORE_START, "early", 110, 111, 7);
    pub_at(CBT_EV_MP_STORE_END, "early", 120, 0, 7);
    pub_at(CBT_EV_MP_REQUEST_END, "early", 121, 0, 0);
    tu_flush();
    const cbt_span *es = tu_need_span("mp.store", "early", 0);
    assert_int_equal(tu_attr_i64(es, "cbt.queue_ns"), 0);
    assert_int_equal((uint64_t)tu_attr_i64(es, "cbt.enqueue_ns"), es->start_ns + MS);
    assert_int_equal(tu_attr_i64(tu_need_span("request", "early", 0), "cbt.gpu_queue_ns"), 0);
    tu_stop();
}

/* Nested stream-timed spans (CacheBlend: cb.scatter inside cb.retrieve,
 * both through a stream) are one operation: the root counts the outer one
 * only. retrieve [10, 40] enqueued at 4, scatter [12, 30] enqueued at 5:
 * cb.request's queue is 6 ms (not 6 + 7) and its busy time 30 ms. */
static void nested_child_counts_once(void **state)
{
    (void)state;
    tu_start(NULL);
    cbt_subscriber cb;
    assert_int_equal(cbt_cb_subscriber_create(0, &cb), CBT_OK);
    assert_int_equal(cbt_add_subscriber(&cb), CBT_OK);
    const char *sid = "nest";
    pub_at(CBT_EV_CB_REQUEST_START, sid, 1, 0, 0);
    pub_at(CBT_EV_CB_RETRIEVE_SUBMITTED, sid, 2, 0, 0);
    pub_at(CBT_EV_CB_RETRIEVE_START, sid, 10, 4, 3);
    pub_at(CBT_EV_CB_SCATTER_START, sid, 12, 5, 3);
    pub_at(CBT_EV_CB_SCATTER_END, sid, 30, 0, 3);
    pub_at(CBT_EV_CB_RETRIEVE_END, sid, 40, 0, 3);
    pub_at(CBT_EV_CB_REQUEST_END, sid, 41, 0, 0);
    tu_flush();
    const cbt_span *sc = tu_find("cb.scatter", NULL, 0);
    assert_non_null(sc);
    assert_int_equal(tu_attr_i64(sc, "cbt.queue_ns"), 7 * MS);
    const cbt_span *root = tu_find("cb.request", NULL, 0);
    assert_non_null(root);
    assert_int_equal(tu_attr_i64(root, "cbt.gpu_queue_ns"), 6 * MS);
    assert_int_equal(tu_attr_i64(root, "cbt.gpu_busy_ns"), 30 * MS);
    tu_stop();
}

/* Two CpuStreams at once: a store on one and a retrieve on the other,
 * 60 ms each, overlapping. The root's busy time is the union of the two
 * spans' intervals, computed here from the spans themselves: less than
 * their sum, at least the longer one. */
static void root_busy_union_on_two_streams(void **state)
{
    (void)state;
    tu_start(NULL);
    cbt_stream *a, *b;
    assert_int_equal(cbt_stream_cpu_create(0, &a), CBT_OK);
    assert_int_equal(cbt_stream_cpu_create(0, &b), CBT_OK);
    const char *sid = "two";
    tu_gate *g = tu_gate_new(); /* hold both streams until both are queued */
    tu_gate_enqueue(g, a);
    tu_gate *h = tu_gate_new();
    tu_gate_enqueue(h, b);
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    tu_pub(CBT_EV_MP_RETRIEVE_SUBMITTED, sid);
    tu_pub_on(a, CBT_EV_MP_STORE_START, sid);
    tu_enqueue_sleep(a, 60000);
    tu_pub_on(a, CBT_EV_MP_STORE_END, sid);
    tu_pub_on(b, CBT_EV_MP_RETRIEVE_START, sid);
    tu_enqueue_sleep(b, 60000);
    tu_pub_on(b, CBT_EV_MP_RETRIEVE_END, sid);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_gate_open(g);
    tu_gate_open(h);
    cbt_stream_sync(a);
    cbt_stream_sync(b);
    tu_flush();
    const cbt_span *st = tu_need_span("mp.store", sid, 0);
    const cbt_span *rt = tu_need_span("mp.retrieve", sid, 0);
    const cbt_span *root = tu_need_span("request", sid, 0);
    uint64_t lo = st->start_ns < rt->start_ns ? st->start_ns : rt->start_ns;
    uint64_t hi = st->end_ns > rt->end_ns ? st->end_ns : rt->end_ns;
    uint64_t ds = st->end_ns - st->start_ns, dr = rt->end_ns - rt->start_ns;
    int overlap = st->start_ns <= rt->end_ns && rt->start_ns <= st->end_ns;
    uint64_t uni = overlap ? hi - lo : ds + dr;
    uint64_t busy = (uint64_t)tu_attr_i64(root, "cbt.gpu_busy_ns");
    printf("# two streams: store %.1f ms, retrieve %.1f ms, busy %.1f ms (union)\n", ds / 1e6,
           dr / 1e6, busy / 1e6);
    assert_true(overlap); /* both were held, then ran at once */
    assert_int_equal(busy, uni);
    assert_true(busy < ds + dr);
    assert_int_equal(tu_attr_i64(root, "cbt.gpu_queue_ns"),
                     tu_attr_i64(st, "cbt.queue_ns") + tu_attr_i64(rt, "cbt.queue_ns"));
    checked_queue(st, a);
    checked_queue(rt, b);
    tu_gate_free(g);
    tu_gate_free(h);
    cbt_stream_destroy(a);
    cbt_stream_destroy(b);
    tu_stop();
}

/* Spans a stream did not time carry none of it: a request with no stream
 * work (no gpu_* on its root), an event published on a stream with the
 * caller's own time (the stream did not time it), and CBT_EVF_ENQUEUED set
 * by a caller without an explicit time on a plain publish (not cbt's:
 * ignored). */
static void unmeasured_spans_have_none(void **state)
{
    (void)state;
    tu_start(NULL);
    tu_pub_mp_request("host-only"); /* its store published on the host */
    cbt_stream *s;
    assert_int_equal(cbt_stream_cpu_create(0, &s), CBT_OK);
    tu_pub(CBT_EV_MP_REQUEST_START, "explicit");
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, "explicit");
    cbt_event e;
    cbt_event_init(&e, CBT_EV_MP_STORE_START, "explicit");
    e.ts = cbt_clock_unix_now();
    e.flags |= CBT_EVF_EXPLICIT_TS;
    assert_int_equal(cbt_publish_on_stream(s, &e), CBT_OK);
    cbt_event_init(&e, CBT_EV_MP_STORE_END, "explicit");
    e.ts = cbt_clock_unix_now();
    e.flags |= CBT_EVF_EXPLICIT_TS;
    assert_int_equal(cbt_publish_on_stream(s, &e), CBT_OK);
    tu_pub(CBT_EV_MP_REQUEST_END, "explicit");
    cbt_stream_sync(s);
    /* a caller's flag with no explicit time on cbt_publish */
    tu_pub(CBT_EV_MP_REQUEST_START, "forged");
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, "forged");
    cbt_event_init(&e, CBT_EV_MP_STORE_START, "forged");
    e.flags |= CBT_EVF_ENQUEUED;
    e.enqueue_ns = 12345;
    e.stream = 99;
    assert_int_equal(cbt_publish(&e), CBT_OK);
    tu_pub(CBT_EV_MP_STORE_END, "forged");
    tu_pub(CBT_EV_MP_REQUEST_END, "forged");
    tu_flush();
    const char *sids[] = {"host-only", "explicit", "forged"};
    for (int i = 0; i < 3; i++) {
        assert_no_queue(tu_need_span("request", sids[i], 0));
        assert_no_queue(tu_need_span("mp.store", sids[i], 0));
    }
    const tu_event *fe = tu_event_find(CBT_EV_MP_STORE_START, "forged", 0);
    assert_non_null(fe);
    assert_false(fe->flags & CBT_EVF_ENQUEUED);
    cbt_stream_destroy(s);
    tu_stop();
}

/* An event a subscriber was handed (FROM_STREAM | ENQUEUED, no explicit
 * time), copied into a program's older, smaller cbt_event (one that ends
 * where the enqueue block begins) and published again, on both paths: the
 * event is placed so that its struct ends at a page nobody may read, so
 * reading the enqueue block the flags promise faults. Nothing reads it, and
 * the republished spans carry no queue time. */
static void republished_old_size_event(void **state)
{
    (void)state;
    tu_start(NULL);
    cbt_stream *s;
    assert_int_equal(cbt_stream_cpu_create(0, &s), CBT_OK);
    long pg = sysconf(_SC_PAGESIZE);
    size_t old_size = offsetof(cbt_event, enqueue_ns);
    size_t span = ((old_size + (size_t)pg - 1) / (size_t)pg + 1) * (size_t)pg;
    unsigned char *m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    assert_int_equal(mprotect(m + span - (size_t)pg, (size_t)pg, PROT_NONE), 0);
    /* 8-byte aligned, ending at the guard page (offsetof is a multiple of 8) */
    cbt_event *old = (cbt_event *)(void *)(m + span - (size_t)pg - old_size);
    const char *sids[] = {"republished", "republished-on"};
    for (int i = 0; i < 2; i++) {
        tu_pub(CBT_EV_MP_REQUEST_START, sids[i]);
        tu_pub(CBT_EV_MP_STORE_SUBMITTED, sids[i]);
        cbt_event full;
        cbt_event_init(&full, CBT_EV_MP_STORE_START, sids[i]);
        full.flags |= CBT_EVF_FROM_STREAM | CBT_EVF_ENQUEUED;
        memcpy(old, &full, old_size); /* the old program's copy: flags and all */
        assert_int_equal(i == 0 ? cbt_publish(old) : cbt_publish_on_stream(s, old), CBT_OK);
        cbt_event_init(&full, CBT_EV_MP_STORE_END, sids[i]);
        memcpy(old, &full, old_size);
        assert_int_equal(i == 0 ? cbt_publish(old) : cbt_publish_on_stream(s, old), CBT_OK);
        tu_pub(CBT_EV_MP_REQUEST_END, sids[i]);
    }
    cbt_stream_sync(s);
    tu_flush();
    assert_no_queue(tu_need_span("mp.store", "republished", 0));
    /* on a stream it is timed by that stream, afresh: its own enqueue time */
    const cbt_span *on = tu_need_span("mp.store", "republished-on", 0);
    checked_queue(on, s);
    munmap(m, span);
    cbt_stream_destroy(s);
    tu_stop();
}

/* ---- kernel spans and pspans ------------------------------------------------------- */

typedef struct kjob {
    cbt_kspan span;
} kjob;

static void sleepy_cta(void *a_, uint32_t cta, uint32_t n_ctas)
{
    (void)n_ctas;
    kjob *a = a_;
    CBT_KERNEL_SPAN_BEGIN(a->span);
    struct timespec d = {0, 200000};
    nanosleep(&d, NULL);
    CBT_KERNEL_SPAN_END(a->span, cta + 1);
}

/* A kernel launched behind 80 ms of work: cbt_launch_begin's host time to
 * its first CTA's begin is at least 80 ms; the same kernel on an idle
 * stream waits far less. A pspan begun on the stream behind the same work
 * waits as long. */
static void kernel_and_pspan_queue(void **state)
{
    (void)state;
    tu_start(NULL);
    cbt_stream *s;
    assert_int_equal(cbt_stream_cpu_create(0, &s), CBT_OK);
    const char *sids[2] = {"kq", "ki"};
    kjob jobs[2];
    for (int i = 0; i < 2; i++) {
        memset(&jobs[i], 0, sizeof jobs[i]);
        tu_pub(CBT_EV_MP_REQUEST_START, sids[i]);
        tu_pub(CBT_EV_MP_RETRIEVE_SUBMITTED, sids[i]);
        if (i == 0)
            tu_enqueue_sleep(s, 80000);
        tu_pub_on(s, CBT_EV_MP_RETRIEVE_START, sids[i]);
        cbt_launch_info li = cbt_launch_info_default(CBT_KOP_SCATTER, 2);
        assert_int_equal(cbt_launch_begin(s, sids[i], &li, &jobs[i].span), CBT_OK);
        assert_int_equal(cbt_cpu_launch(s, 2, sleepy_cta, &jobs[i]), CBT_OK);
        tu_pub_on(s, CBT_EV_MP_RETRIEVE_END, sids[i]);
        tu_pub(CBT_EV_MP_REQUEST_END, sids[i]);
        cbt_stream_sync(s);
    }
    /* a pspan begun on the stream behind 80 ms of work */
    tu_enqueue_sleep(s, 80000);
    cbt_pspan p;
    assert_int_equal(cbt_pspan_begin_on(&p, s, tu_name("cb.check"), CBT_SPAN_KIND_INTERNAL, "kp",
                                        NULL, NULL, 0),
                     CBT_OK);
    assert_int_equal(cbt_pspan_end_on(&p, NULL, 0), CBT_OK);
    cbt_pspan h;
    assert_int_equal(cbt_pspan_begin(&h, tu_name("cb.schedule"), CBT_SPAN_KIND_INTERNAL, "kp",
                                     NULL, NULL, 0),
                     CBT_OK);
    assert_int_equal(cbt_pspan_end(&h, NULL, 0), CBT_OK);
    cbt_stream_sync(s);
    for (int i = 0; i < 200 && (tu_count("cb.scatter", "kq") == 0 || tu_count("cb.scatter", "ki") == 0);
         i++) {
        tu_flush();
        struct timespec d = {0, 1000000};
        nanosleep(&d, NULL);
    }
    tu_flush();
    const cbt_span *kq = tu_need_span("cb.scatter", "kq", 0);
    const cbt_span *ki = tu_need_span("cb.scatter", "ki", 0);
    uint64_t q0 = checked_queue(kq, s), q1 = checked_queue(ki, s);
    printf("# kernel behind 80 ms: cbt.queue_ns %llu; on the idle stream %llu\n",
           (unsigned long long)q0, (unsigned long long)q1);
    assert_true(q0 >= 80 * MS);
    assert_true(q1 < 40 * MS);
    /* the retrieve that holds the kernel: queued too, and its root's */
    const cbt_span *rq = tu_need_span("mp.retrieve", "kq", 0);
    assert_true(checked_queue(rq, s) >= 80 * MS);
    assert_int_equal(tu_attr_i64(tu_need_span("request", "kq", 0), "cbt.gpu_queue_ns"),
                     tu_attr_i64(rq, "cbt.queue_ns"));
    const cbt_span *ps = tu_find("cb.check", NULL, 0);
    assert_non_null(ps);
    assert_true(checked_queue(ps, s) >= 80 * MS);
    const cbt_span *hs = tu_find("cb.schedule", NULL, 0);
    assert_non_null(hs);
    assert_no_queue(hs);
    cbt_stream_destroy(s);
    tu_stop();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(queued_behind_long_op, tu_teardown),
        cmocka_unit_test_teardown(root_busy_is_the_union, tu_teardown),
        cmocka_unit_test_teardown(nested_child_counts_once, tu_teardown),
        cmocka_unit_test_teardown(root_busy_union_on_two_streams, tu_teardown),
        cmocka_unit_test_teardown(unmeasured_spans_have_none, tu_teardown),
        cmocka_unit_test_teardown(republished_old_size_event, tu_teardown),
        cmocka_unit_test_teardown(kernel_and_pspan_queue, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
