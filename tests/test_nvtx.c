/* tests/test_nvtx.c — cbt's NVTX ranges (exporter/nvtx.c) as an NVTX tool
 * sees them: the test injection library (nvtx_inject.c), loaded by NVTX
 * itself through NVTX_INJECTION64_PATH (set by ctest), records every call.
 *
 * Checked: domain "cbt" made once; span names registered; categories mp, cb,
 * kernel named; one range per span, START/END matched, nested in the request
 * range; messages "<span> <session>"; payload = the cbt range id = the span
 * attribute nvtx.range_id; ranges that cross threads; END without START,
 * full metadata, a full pairing table; nothing at all without enable; a
 * slow tool (the injection library stalls one thread's range start, or one
 * string registration, for 2.5 s) holds no other thread's publish up; six
 * threads opening and closing ranges at once, some across threads.
 * Tests share one process (NVTX initialises once): the first test must run
 * before anything calls NVTX, and each test uses session ids of its own. */
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "testutil.h"
#include "cbt/nvtx.h"
#include "nvtx_inject.h"
#include "cbt/pspan.h"

#define NVTX_NO_IMPL /* only the enum values */
#define NVTX_AS_SYSTEM_HEADER 1
#include "nvtx3/nvToolsExt.h"

static const char *g_path;

static uint64_t my_tid(void) { return (uint64_t)syscall(SYS_gettid); }

/* The injection library's log; NULL while NVTX has not loaded it. */
static const nvtx_log *nlog_or_null(void)
{
    void *h = dlopen(g_path, RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        return NULL;
    cbt_nvtx_log_fn f;
    void *sym = dlsym(h, "cbt_nvtx_log");
    assert_non_null(sym);
    memcpy(&f, &sym, sizeof f); /* object pointer -> function pointer, POSIX style */
    const nvtx_log *l = f();
    dlclose(h); /* drops the reference RTLD_NOLOAD took; NVTX holds its own */
    return l;
}

static const nvtx_log *nlog(void)
{
    const nvtx_log *l = nlog_or_null();
    assert_non_null(l);
    assert_true(l->initialized);
    return l;
}

static const void *cbt_domain(void)
{
    const nvtx_log *l = nlog();
    for (uint32_t i = 0; i < l->n_domains; i++)
        if (strcmp(l->domains[i].name, "cbt") == 0)
            return l->domains[i].handle;
    fail_msg("domain cbt was not created");
    return NULL;
}

static uint32_t count_ranges(const char *msg)
{
    const nvtx_log *l = nlog();
    uint32_t n = 0;
    for (uint32_t i = 0; i < l->n_ranges; i++)
        n += strcmp(l->ranges[i].message, msg) == 0;
    return n;
}

/* The i-th range whose message is `msg`. */
static const nvtx_log_range *range_at(const char *msg, uint32_t k)
{
    const nvtx_log *l = nlog();
    for (uint32_t i = 0; i < l->n_ranges; i++)
        if (strcmp(l->ranges[i].message, msg) == 0 && k-- == 0)
            return &l->ranges[i];
    return NULL;
}

/* The only range named `msg`, checked for the common properties. */
static const nvtx_log_range *one_range(const char *msg, uint32_t category)
{
    assert_int_equal(count_ranges(msg), 1);
    const nvtx_log_range *r = range_at(msg, 0);
    assert_non_null(r);
    assert_ptr_equal(r->domain, cbt_domain());
    assert_int_equal(r->category, category);
    assert_int_equal(r->message_type, NVTX_MESSAGE_TYPE_ASCII);
    assert_int_equal(r->payload_type, NVTX_PAYLOAD_TYPE_UNSIGNED_INT64);
    assert_true(r->payload != 0);
    assert_true(r->ended);
    assert_true(r->start_seq < r->end_seq);
    return r;
}

static const nvtx_log_mark *mark_named(const char *msg)
{
    const nvtx_log *l = nlog();
    for (uint32_t i = 0; i < l->n_marks; i++)
        if (strcmp(l->marks[i].message, msg) == 0)
            return &l->marks[i];
    return NULL;
}

static int has_string(const char *text)
{
    const nvtx_log *l = nlog();
    for (uint32_t i = 0; i < l->n_strings; i++)
        if (strcmp(l->strings[i].text, text) == 0 && l->strings[i].domain == cbt_domain())
            return 1;
    return 0;
}

static const char *category_name(uint32_t id)
{
    const nvtx_log *l = nlog();
    for (uint32_t i = 0; i < l->n_categories; i++)
        if (l->categories[i].id == id && l->categories[i].domain == cbt_domain())
            return l->categories[i].name;
    return NULL;
}

/* `inner` lies inside `outer`, in NVTX call order. */
static void assert_nested(const nvtx_log_range *outer, const nvtx_log_range *inner)
{
    assert_true(outer->start_seq < inner->start_seq);
    assert_true(inner->end_seq < outer->end_seq);
}

static void start_enabled(void)
{
    tu_start(NULL);
    assert_int_equal(cbt_nvtx_enable(), CBT_OK);
}

/* ---- tests -------------------------------------------------------------------- */

/* No tracer, a disabled tracer, a tracer without enable: no NVTX call at all
 * (NVTX loads the tool on the first call; it is still not loaded). Runs first. */
static void nothing_without_enable(void **state)
{
    (void)state;
    assert_null(nlog_or_null());
    assert_int_equal(cbt_nvtx_enable(), CBT_ERR_NOT_INITIALIZED);

    cbt_config c = cbt_config_default();
    c.enabled = false;
    assert_int_equal(cbt_init(&c), CBT_OK);
    assert_int_equal(cbt_nvtx_enable(), CBT_ERR_NOT_INITIALIZED);
    tu_pub(CBT_EV_MP_REQUEST_START, "q0");
    tu_pub(CBT_EV_MP_REQUEST_END, "q0");
    assert_int_equal(cbt_shutdown(), CBT_OK);

    tu_start(NULL);
    tu_pub(CBT_EV_MP_REQUEST_START, "q1");
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_START, "q1");
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_END, "q1");
    tu_pub(CBT_EV_MP_REQUEST_END, "q1");
    tu_flush();
    const cbt_span *lp = tu_find("mp.lookup_prefetch", "q1", 0);
    assert_non_null(lp);
    assert_false(tu_has_attr(lp, "nvtx.range_id"));
    tu_stop();

    assert_null(nlog_or_null());
}

/* An MP request: the domain, strings and categories; one range per span,
 * nested in the request; the store's range id on the mp.store span. */
static void mp_request(void **state)
{
    (void)state;
    start_enabled();
    assert_int_equal(cbt_nvtx_enable(), CBT_ERR_ALREADY);

    const nvtx_log *l = nlog();
    assert_int_equal(l->n_domains, 1);
    assert_string_equal(l->domains[0].name, "cbt");
    static const char *const names[] = {
        "request",         "mp.lookup_prefetch",   "mp.store",
        "mp.retrieve",     "cb.request",           "cb.lookup",
        "cb.retrieve",     "cb.fingerprint_match", "cb.coordinator_match",
        "cb.sparse_prefetch", "cb.classify",       "cb.scatter",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!has_string(names[i]))
            fail_msg("span name %s was not registered", names[i]);
    }
    assert_string_equal(category_name(1), "mp");
    assert_string_equal(category_name(2), "cb");
    assert_string_equal(category_name(3), "kernel");

    cbt_stream *s;
    assert_int_equal(cbt_stream_cpu_create(0, &s), CBT_OK);
    tu_pub(CBT_EV_MP_REQUEST_START, "m1");
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_START, "m1");
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_END, "m1");
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, "m1");
    tu_pub_on(s, CBT_EV_MP_STORE_START, "m1");
    tu_enqueue_sleep(s, 1000);
    tu_pub_on(s, CBT_EV_MP_STORE_END, "m1");
    tu_pub(CBT_EV_MP_REQUEST_END, "m1");
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();

    const nvtx_log_range *req = one_range("request m1", 1);
    const nvtx_log_range *lp = one_range("mp.lookup_prefetch m1", 1);
    const nvtx_log_range *st = one_range("mp.store m1", 1);
    assert_nested(req, lp);
    assert_nested(req, st);
    assert_true(lp->end_seq < st->start_seq);
    /* the payload is cbt's range id, one per range */
    assert_true(req->payload != lp->payload && lp->payload != st->payload &&
                req->payload != st->payload);
    /* publish_on_stream calls the hook on the publishing thread: all here */
    uint64_t me = my_tid();
    assert_int_equal(st->start_tid, me);
    assert_int_equal(st->end_tid, me);
    assert_int_equal(req->end_tid, me);

    const nvtx_log_mark *m = mark_named("mp.store.submitted m1");
    assert_non_null(m);
    assert_int_equal(m->category, 1);
    assert_ptr_equal(m->domain, cbt_domain());
    assert_true(req->start_seq < m->seq && m->seq < st->start_seq);

    /* Jaeger -> Nsight: the span carries the range's payload */
    const cbt_span *sp = tu_find("mp.store", "m1", 0);
    assert_non_null(sp);
    assert_int_equal((uint64_t)tu_attr_i64(sp, "nvtx.range_id"), st->payload);
    const cbt_span *lps = tu_find("mp.lookup_prefetch", "m1", 0);
    assert_non_null(lps);
    assert_int_equal((uint64_t)tu_attr_i64(lps, "nvtx.range_id"), lp->payload);

    cbt_stream_destroy(s);
    tu_stop();
}

/* A CacheBlend request: every cb.* range in category cb, inside cb.request;
 * point events are marks. */
static void cb_request(void **state)
{
    (void)state;
    start_enabled();
    static const struct {
        cbt_event_type start, end;
        const char *msg;
    } ops[] = {
        {CBT_EV_CB_LOOKUP_START, CBT_EV_CB_LOOKUP_END, "cb.lookup c1"},
        {CBT_EV_CB_FINGERPRINT_MATCH_START, CBT_EV_CB_FINGERPRINT_MATCH_END,
         "cb.fingerprint_match c1"},
        {CBT_EV_CB_COORDINATOR_MATCH_START, CBT_EV_CB_COORDINATOR_MATCH_END,
         "cb.coordinator_match c1"},
        {CBT_EV_CB_SPARSE_PREFETCH_START, CBT_EV_CB_SPARSE_PREFETCH_END, "cb.sparse_prefetch c1"},
        {CBT_EV_CB_CLASSIFY_START, CBT_EV_CB_CLASSIFY_END, "cb.classify c1"},
        {CBT_EV_CB_RETRIEVE_START, CBT_EV_CB_RETRIEVE_END, "cb.retrieve c1"},
        {CBT_EV_CB_SCATTER_START, CBT_EV_CB_SCATTER_END, "cb.scatter c1"},
    };
    const size_t n = sizeof ops / sizeof ops[0];
    tu_pub(CBT_EV_CB_REQUEST_START, "c1");
    tu_pub(CBT_EV_CB_RETRIEVE_SUBMITTED, "c1");
    tu_pub(CBT_EV_L2_LOAD_TASK_SUBMITTED, "c1");
    for (size_t i = 0; i < n; i++) {
        tu_pub(ops[i].start, "c1");
        tu_pub(ops[i].end, "c1");
    }
    tu_pub(CBT_EV_CB_RETRIEVE_NOOP, "c1");
    tu_pub(CBT_EV_CB_CHUNKS_EVICTED, ""); /* session-less: the registered name */
    tu_pub(CBT_EV_CB_REQUEST_END, "c1");
    tu_flush();

    const nvtx_log_range *req = one_range("cb.request c1", 2);
    for (size_t i = 0; i < n; i++) {
        const nvtx_log_range *r = one_range(ops[i].msg, 2);
        assert_nested(req, r);
    }
    const char *marks[] = {"cb.retrieve.submitted c1", "l2.load_task.submitted c1",
                           "cb.retrieve.noop c1"};
    for (size_t i = 0; i < 3; i++) {
        const nvtx_log_mark *m = mark_named(marks[i]);
        if (!m)
            fail_msg("no mark %s", marks[i]);
        assert_int_equal(m->category, 2);
        assert_int_equal(m->message_type, NVTX_MESSAGE_TYPE_ASCII);
    }
    const nvtx_log_mark *ev = mark_named("cb.chunks.evicted");
    assert_non_null(ev);
    assert_int_equal(ev->message_type, NVTX_MESSAGE_TYPE_REGISTERED);
    assert_true(has_string("cb.chunks.evicted"));
    tu_stop();
}

typedef struct pub_arg {
    cbt_event_type type[2];
    int n;
    const char *sid;
    uint64_t tid;
} pub_arg;

static void *pub_thread(void *p)
{
    pub_arg *a = p;
    a->tid = my_tid();
    for (int i = 0; i < a->n; i++) {
        cbt_event e;
        if (cbt_event_init(&e, a->type[i], a->sid) != CBT_OK || cbt_publish(&e) != CBT_OK)
            a->tid = 0;
    }
    return NULL;
}

/* START on one thread, END on another: one range, started and ended on the
 * publishing threads. */
static void cross_thread(void **state)
{
    (void)state;
    start_enabled();
    pub_arg a = {{CBT_EV_MP_STORE_SUBMITTED, CBT_EV_MP_STORE_START}, 2, "x1", 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, pub_thread, &a), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_true(a.tid != 0);
    tu_pub(CBT_EV_MP_STORE_END, "x1");
    tu_pub(CBT_EV_MP_REQUEST_END, "x1");
    tu_flush();

    const nvtx_log_range *r = one_range("mp.store x1", 1);
    assert_int_equal(r->start_tid, a.tid);
    assert_int_equal(r->end_tid, my_tid());
    assert_true(r->start_tid != r->end_tid);
    const cbt_span *sp = tu_find("mp.store", "x1", 0);
    assert_non_null(sp);
    assert_int_equal((uint64_t)tu_attr_i64(sp, "nvtx.range_id"), r->payload);
    tu_stop();
}

/* END with no START makes no NVTX call; two STARTs of one key end first in
 * first out. */
static void end_without_start_and_fifo(void **state)
{
    (void)state;
    start_enabled();
    const nvtx_log *l = nlog();
    uint64_t seq0 = l->seq;
    uint32_t bad0 = l->n_bad_ends;
    tu_pub(CBT_EV_MP_STORE_END, "u1");
    tu_pub(CBT_EV_CB_SCATTER_END, "u1");
    tu_pub(CBT_EV_MP_REQUEST_END, "u1");
    assert_int_equal(l->seq, seq0);
    assert_int_equal(l->n_bad_ends, bad0);

    /* a START of another session, or another pairing key, does not match */
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, CBT_EV_MP_RETRIEVE_START, "u2"), CBT_OK);
    e.pair = 7;
    assert_int_equal(cbt_publish(&e), CBT_OK);
    tu_pub(CBT_EV_MP_RETRIEVE_END, "u2"); /* pair 0: no match */
    assert_int_equal(l->seq, seq0 + 1);
    assert_int_equal(cbt_event_init(&e, CBT_EV_MP_RETRIEVE_END, "u2"), CBT_OK);
    e.pair = 7;
    assert_int_equal(cbt_publish(&e), CBT_OK);
    assert_true(one_range("mp.retrieve u2", 1)->ended);

    tu_pub(CBT_EV_MP_STORE_START, "u3");
    tu_pub(CBT_EV_MP_STORE_START, "u3");
    tu_pub(CBT_EV_MP_STORE_END, "u3");
    const nvtx_log_range *first = range_at("mp.store u3", 0);
    const nvtx_log_range *second = range_at("mp.store u3", 1);
    assert_non_null(first);
    assert_non_null(second);
    assert_true(first->ended);
    assert_false(second->ended);
    tu_pub(CBT_EV_MP_STORE_END, "u3");
    assert_true(second->ended);
    assert_int_equal(l->n_bad_ends, bad0);
    tu_flush();
    tu_stop();
}

/* A START whose metadata is full still opens its range; only the attribute
 * is missing. */
static void meta_full(void **state)
{
    (void)state;
    start_enabled();
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, CBT_EV_MP_STORE_SUBMITTED, "f1"), CBT_OK);
    assert_int_equal(cbt_publish(&e), CBT_OK);
    assert_int_equal(cbt_event_init(&e, CBT_EV_MP_STORE_START, "f1"), CBT_OK);
    for (int i = 0; i < CBT_EVENT_META_MAX; i++) {
        char k[16];
        snprintf(k, sizeof k, "nvtx_t_k%d", i);
        assert_int_equal(cbt_event_i64(&e, tu_name(k), i), CBT_OK);
    }
    assert_int_equal(cbt_publish(&e), CBT_OK);
    tu_pub(CBT_EV_MP_STORE_END, "f1");
    tu_pub(CBT_EV_MP_REQUEST_END, "f1");
    tu_flush();
    one_range("mp.store f1", 1);
    const cbt_span *sp = tu_find("mp.store", "f1", 0);
    assert_non_null(sp);
    assert_int_equal(tu_attr_i64(sp, "nvtx_t_k5"), 5);
    assert_false(tu_has_attr(sp, "nvtx.range_id"));
    tu_stop();
}

/* More open STARTs than the pairing table holds: the extra ones open no
 * range; their ENDs end nothing; the table works again once drained. */
static void table_full(void **state)
{
    (void)state;
    enum { N = 5000 };
    start_enabled();
    const nvtx_log *l = nlog();
    uint32_t r0 = l->n_ranges, bad0 = l->n_bad_ends;
    char sid[32];
    for (int i = 0; i < N; i++) {
        snprintf(sid, sizeof sid, "t%d", i);
        cbt_event e;
        assert_int_equal(cbt_event_init(&e, CBT_EV_CB_LOOKUP_START, sid), CBT_OK);
        (void)cbt_publish(&e); /* the queue may fill; the hook has run */
    }
    uint32_t opened = l->n_ranges - r0;
    assert_true(opened >= 1024 && opened < N);
    for (int i = 0; i < N; i++) {
        snprintf(sid, sizeof sid, "t%d", i);
        cbt_event e;
        assert_int_equal(cbt_event_init(&e, CBT_EV_CB_LOOKUP_END, sid), CBT_OK);
        (void)cbt_publish(&e);
    }
    assert_int_equal(l->n_ranges - r0, opened);
    for (uint32_t i = r0; i < r0 + opened; i++)
        assert_true(l->ranges[i].ended);
    assert_int_equal(l->n_bad_ends, bad0);
    /* the first `opened` sessions got the ranges, in order */
    snprintf(sid, sizeof sid, "cb.lookup t%u", opened - 1);
    assert_int_equal(count_ranges(sid), 1);
    snprintf(sid, sizeof sid, "cb.lookup t%u", opened);
    assert_int_equal(count_ranges(sid), 0);

    /* the flood above may have filled this thread's lane (a slow harvester,
     * e.g. under ASan): let it drain before publishing what must arrive */
    tu_flush();
    tu_pub(CBT_EV_CB_LOOKUP_START, "t-after");
    tu_pub(CBT_EV_CB_LOOKUP_END, "t-after");
    one_range("cb.lookup t-after", 2);
    tu_flush();
    tu_stop();
}

/* A new tracer takes a new hook state; the domain stays the same one. */
static void reenable_new_tracer(void **state)
{
    (void)state;
    start_enabled();
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_START, "r1"); /* left open at shutdown */
    tu_stop();
    start_enabled();
    assert_int_equal(cbt_nvtx_enable(), CBT_ERR_ALREADY);
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_END, "r1"); /* the old tracer's START is gone */
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_START, "r2");
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_END, "r2");
    tu_flush();
    assert_false(range_at("mp.lookup_prefetch r1", 0)->ended);
    one_range("mp.lookup_prefetch r2", 1);
    assert_int_equal(nlog()->n_domains, 1);
    tu_stop();
}

/* pspans (cbt/pspan.h): ranges named by the span, nested as begun, and two
 * pspans of one name and request ended out of order pair by their ids. */
static void pspans(void **state)
{
    (void)state;
    start_enabled();
    cbt_pspan ex, a, b;
    assert_int_equal(cbt_pspan_begin(&ex, CBT_N_CB_EXECUTE, CBT_SPAN_KIND_INTERNAL, "p1", NULL,
                                     NULL, 0), CBT_OK);
    assert_int_equal(cbt_pspan_begin(&a, CBT_N_CB_CHECK, CBT_SPAN_KIND_INTERNAL, "p1", &ex.ctx,
                                     NULL, 0), CBT_OK);
    assert_int_equal(cbt_pspan_begin(&b, CBT_N_CB_CHECK, CBT_SPAN_KIND_INTERNAL, "p1", &ex.ctx,
                                     NULL, 0), CBT_OK);
    assert_int_equal(cbt_pspan_end(&b, NULL, 0), CBT_OK); /* the newer one first */
    assert_int_equal(cbt_pspan_end(&a, NULL, 0), CBT_OK);
    assert_int_equal(cbt_pspan_end(&ex, NULL, 0), CBT_OK);
    tu_flush();
    const nvtx_log_range *e = one_range("cb.execute p1", 2);
    assert_int_equal(count_ranges("cb.check p1"), 2);
    const nvtx_log_range *r0 = range_at("cb.check p1", 0), *r1 = range_at("cb.check p1", 1);
    assert_true(r0->ended && r1->ended);
    /* id pairing, not first-in first-out: the range begun second ended first */
    const nvtx_log_range *first = r0->start_seq < r1->start_seq ? r0 : r1;
    const nvtx_log_range *second = first == r0 ? r1 : r0;
    assert_true(second->end_seq < first->end_seq);
    assert_nested(e, first);
    assert_nested(e, second);
    /* the span in the trace carries the range's payload, as the MP spans do */
    const cbt_span *sp = tu_find("cb.execute", NULL, 0);
    assert_non_null(sp);
    assert_int_equal(tu_attr_i64(sp, "nvtx.range_id"), (int64_t)e->payload);
    tu_stop();
}

/* ---- many threads on the table ------------------------------------------------------- */

enum { MT_THREADS = 4, MT_PAIRS = 300 };
static _Atomic int g_mt_opened; /* the opener's START of "mt-x<i>" returned for i < it */

static void *mt_own(void *p)
{
    int k = (int)(uintptr_t)p;
    char sid[32];
    for (int i = 0; i < MT_PAIRS; i++) {
        snprintf(sid, sizeof sid, "mt-%d-%d", k, i % 7); /* keys reused: FIFO per key */
        cbt_event e;
        cbt_event_init(&e, CBT_EV_CB_CLASSIFY_START, sid);
        (void)cbt_publish(&e);
        if (i % 3 == 2) { /* keep a few open across iterations */
            for (int j = 0; j < 3; j++) {
                snprintf(sid, sizeof sid, "mt-%d-%d", k, (i - j) % 7);
                cbt_event_init(&e, CBT_EV_CB_CLASSIFY_END, sid);
                (void)cbt_publish(&e);
            }
        }
    }
    return NULL;
}

static void *mt_opener(void *p)
{
    (void)p;
    char sid[32];
    for (int i = 0; i < MT_PAIRS; i++) {
        snprintf(sid, sizeof sid, "mt-x%d", i);
        cbt_event e;
        cbt_event_init(&e, CBT_EV_CB_SCATTER_START, sid);
        (void)cbt_publish(&e);
        atomic_store_explicit(&g_mt_opened, i + 1, memory_order_release);
    }
    return NULL;
}

static void *mt_closer(void *p)
{
    (void)p;
    char sid[32];
    for (int i = 0; i < MT_PAIRS; i++) {
        while (atomic_load_explicit(&g_mt_opened, memory_order_acquire) <= i)
            sched_yield();
        snprintf(sid, sizeof sid, "mt-x%d", i);
        cbt_event e;
        cbt_event_init(&e, CBT_EV_CB_SCATTER_END, sid);
        (void)cbt_publish(&e);
    }
    return NULL;
}

/* Four threads open and close ranges of their own keys (reusing each key,
 * several open at once), while one thread opens ranges another closes as
 * soon as each START has returned: every range is ended exactly once by the
 * tool's account, the cross-thread ones each by the closer. */
static void many_threads_share_the_table(void **state)
{
    (void)state;
    start_enabled();
    const nvtx_log *l = nlog();
    uint32_t r0 = l->n_ranges, bad0 = l->n_bad_ends;
    atomic_store(&g_mt_opened, 0);
    pthread_t th[MT_THREADS + 2];
    for (uintptr_t k = 0; k < MT_THREADS; k++)
        assert_int_equal(pthread_create(&th[k], NULL, mt_own, (void *)k), 0);
    assert_int_equal(pthread_create(&th[MT_THREADS], NULL, mt_opener, NULL), 0);
    assert_int_equal(pthread_create(&th[MT_THREADS + 1], NULL, mt_closer, NULL), 0);
    for (int k = 0; k < MT_THREADS + 2; k++)
        assert_int_equal(pthread_join(th[k], NULL), 0);
    assert_int_equal(l->n_bad_ends, bad0);
    assert_int_equal(l->n_ranges - r0, MT_THREADS * MT_PAIRS + MT_PAIRS);
    for (uint32_t i = r0; i < l->n_ranges; i++)
        if (!l->ranges[i].ended)
            fail_msg("range %s was never ended", l->ranges[i].message);
    tu_flush();
    tu_stop();
}

/* ---- a slow tool: one thread stalled inside NVTX ------------------------------------ */

static void *inject_sym(const char *name)
{
    void *h = dlopen(g_path, RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(h);
    void *sym = dlsym(h, name);
    assert_non_null(sym);
    dlclose(h);
    return sym;
}

static void inject_stall(const char *needle, unsigned ms)
{
    cbt_nvtx_inject_stall_fn f;
    void *sym = inject_sym("cbt_nvtx_inject_stall");
    memcpy(&f, &sym, sizeof f);
    f(needle, ms);
}

static int inject_stalling(void)
{
    cbt_nvtx_inject_stalling_fn f;
    void *sym = inject_sym("cbt_nvtx_inject_stalling");
    memcpy(&f, &sym, sizeof f);
    return f();
}

static void wait_stalling(void)
{
    for (int i = 0; i < 2000 && !inject_stalling(); i++) {
        struct timespec d = {0, 1000000};
        nanosleep(&d, NULL);
    }
    assert_true(inject_stalling());
}

/* ms one publish of (type, sid) took */
static double timed_pub(cbt_event_type type, const char *sid)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    tu_pub(type, sid);
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
}

#define STALL_MS 2500u /* the slow thread's stall */
#define BOUND_MS 200.0 /* what another thread's publish may take meanwhile */

/* A thread whose range start the tool stalls for 2.5 s: meanwhile another
 * thread opens and closes ranges of other sessions, each publish within
 * 200 ms, and they are finished before the stalled one is. The stalled
 * range then ends normally. With the pairing table under one mutex (held
 * across nvtxDomainRangeStartEx), every one of them waited the 2.5 s. */
static void slow_tool_range_holds_no_other_publish(void **state)
{
    (void)state;
    start_enabled();
    inject_stall("mp.store n-slow", STALL_MS);
    pub_arg a = {{CBT_EV_MP_STORE_START, CBT_EV_MP_STORE_START}, 1, "n-slow", 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, pub_thread, &a), 0);
    wait_stalling();
    double worst = 0.0;
    char sid[32];
    for (int i = 0; i < 4; i++) {
        snprintf(sid, sizeof sid, "n-fast%d", i);
        double m1 = timed_pub(CBT_EV_MP_STORE_START, sid);
        double m2 = timed_pub(CBT_EV_MP_STORE_END, sid);
        worst = m1 > worst ? m1 : worst;
        worst = m2 > worst ? m2 : worst;
    }
    int still = inject_stalling();
    printf("# 8 publishes while another thread's range start is stalled in the tool: "
           "slowest %.2f ms (bound %.0f ms)\n", worst, BOUND_MS);
    assert_true(worst < BOUND_MS);
    assert_true(still);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_true(a.tid != 0);
    tu_pub(CBT_EV_MP_STORE_END, "n-slow");
    for (int i = 0; i < 4; i++) {
        snprintf(sid, sizeof sid, "mp.store n-fast%d", i);
        one_range(sid, 1);
    }
    const nvtx_log_range *slow = one_range("mp.store n-slow", 1);
    assert_int_equal(slow->start_tid, a.tid);
    assert_true(range_at("mp.store n-fast3", 0)->end_seq < slow->start_seq); /* done before it */
    tu_flush();
    tu_stop();
}

/* Two types registered after enable (so their names are not registered
 * yet). A thread's first session-less mark of the first registers its name,
 * and the tool stalls that for 2.5 s: meanwhile another thread's marks of the
 * same type (its name as ASCII) and of the second (registered by that
 * thread) each return within 200 ms. With registration under one mutex,
 * both waited the 2.5 s. */
static void slow_tool_registration_holds_no_other_mark(void **state)
{
    (void)state;
    start_enabled();
    cbt_event_type ta, tb;
    assert_int_equal(cbt_event_type_register("test.nvtx_slow_a", &ta), CBT_OK);
    assert_int_equal(cbt_event_type_register("test.nvtx_slow_b", &tb), CBT_OK);
    inject_stall("test.nvtx_slow_a", STALL_MS);
    pub_arg a = {{ta, ta}, 1, "", 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, pub_thread, &a), 0);
    wait_stalling();
    double m_same = timed_pub(ta, "");
    double m_other = timed_pub(tb, "");
    int still = inject_stalling();
    printf("# marks while another thread registers a name in a stalled tool: the same type "
           "%.2f ms, another type %.2f ms (bound %.0f ms)\n", m_same, m_other, BOUND_MS);
    assert_true(m_same < BOUND_MS);
    assert_true(m_other < BOUND_MS);
    assert_true(still);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_true(a.tid != 0);
    /* the stalled thread's mark carries the registered name, ours the ASCII
     * one (the same text); the other type's is registered */
    const nvtx_log *l = nlog();
    int reg = 0, ascii = 0;
    for (uint32_t i = 0; i < l->n_marks; i++) {
        if (strcmp(l->marks[i].message, "test.nvtx_slow_a") != 0)
            continue;
        if (l->marks[i].message_type == NVTX_MESSAGE_TYPE_REGISTERED) {
            reg++;
            assert_int_equal(l->marks[i].tid, a.tid);
        } else {
            ascii++;
            assert_int_equal(l->marks[i].message_type, NVTX_MESSAGE_TYPE_ASCII);
            assert_int_equal(l->marks[i].tid, my_tid());
        }
    }
    assert_int_equal(reg, 1);
    assert_int_equal(ascii, 1);
    assert_true(has_string("test.nvtx_slow_a"));
    const nvtx_log_mark *mb = mark_named("test.nvtx_slow_b");
    assert_non_null(mb);
    assert_int_equal(mb->message_type, NVTX_MESSAGE_TYPE_REGISTERED);
    /* from now on the first type's marks carry the registered name */
    tu_pub(ta, "");
    assert_int_equal(l->marks[l->n_marks - 1].message_type, NVTX_MESSAGE_TYPE_REGISTERED);
    tu_flush();
    tu_stop();
}

#define T(f) cmocka_unit_test_teardown(f, tu_teardown)

int main(void)
{
    g_path = getenv("NVTX_INJECTION64_PATH");
    if (!g_path || !*g_path) {
        printf("SKIP: NVTX_INJECTION64_PATH is not set (ctest sets it to the "
               "cbt_nvtx_inject library)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        T(nothing_without_enable), /* first: before any NVTX call */
        T(mp_request),
        T(cb_request),
        T(cross_thread),
        T(end_without_start_and_fifo),
        T(meta_full),
        T(table_full),
        T(reenable_new_tracer),
        T(pspans),
        T(many_threads_share_the_table),
        T(slow_tool_range_holds_no_other_publish),
        T(slow_tool_registration_holds_no_other_mark),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
