/* tests/test_lanes.c — per-thread publish lanes: each thread gets its own,
 * exited threads give theirs back, threads past max_lanes share the bus, and
 * the harvester's merge keeps causal order across threads; big events (16
 * values, 256-byte strings, trace blocks) reach a subscriber intact through
 * small lanes that wrap many times, through the shared bus, through a CPU
 * stream and through the publish hook's copy. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "internal/publish_hook.h"
#include "internal/tracer.h"
#include "testutil.h"

#define N_THREADS 4
#define PER_THREAD 5000

typedef struct pub_arg {
    int id;
    int n;
    int ok;
} pub_arg;

static void *publisher(void *arg)
{
    pub_arg *a = arg;
    char sid[32];
    snprintf(sid, sizeof sid, "lane-%d", a->id);
    for (int i = 0; i < a->n; i++) {
        cbt_event e;
        cbt_event_init(&e, CBT_EV_L2_LOAD_TASK_SUBMITTED, sid);
        e.pair = (uint64_t)i;
        if (cbt_publish(&e) == CBT_OK)
            a->ok++;
    }
    return NULL;
}

static cbt_config small_lanes(uint32_t max_lanes)
{
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    c.lane_capacity = 1024;
    c.max_lanes = max_lanes;
    return c;
}

/* Several threads, each with its own lane: nothing lost, per-thread order kept,
 * and the lanes go back to the pool when the threads exit. */
static void threads_get_lanes_and_give_them_back(void **state)
{
    (void)state;
    cbt_config c = small_lanes(8);
    tu_start(&c);
    pthread_t th[N_THREADS];
    pub_arg args[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        args[i] = (pub_arg){.id = i, .n = PER_THREAD};
        assert_int_equal(pthread_create(&th[i], NULL, publisher, &args[i]), 0);
    }
    for (int i = 0; i < N_THREADS; i++)
        pthread_join(th[i], NULL);
    tu_flush();
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m), CBT_OK);
    uint64_t ok = 0;
    for (int i = 0; i < N_THREADS; i++)
        ok += (uint64_t)args[i].ok;
    assert_int_equal(m.published, ok);
    assert_int_equal(m.published + m.dropped_full, (uint64_t)N_THREADS * PER_THREAD);
    assert_int_equal(tu_event_count(), (uint32_t)ok);
    /* per-thread order survives the merge */
    int64_t last[N_THREADS];
    for (int i = 0; i < N_THREADS; i++)
        last[i] = -1;
    for (uint32_t k = 0; k < tu_event_count(); k++) {
        const tu_event *e = tu_event_at(k);
        int id = e->session[5] - '0';
        assert_true(id >= 0 && id < N_THREADS);
        assert_true((int64_t)e->pair > last[id]);
        last[id] = (int64_t)e->pair;
    }
    /* the exited threads' lanes are back in the pool (the harvester reaps
     * them once drained; a flush is one more round) */
    tu_flush();
    assert_int_equal(cbt_metrics_get(&m), CBT_OK);
    assert_int_equal(m.lanes, 0);
    tu_stop();
}

/* With max_lanes 1, a second thread publishes through the shared bus. */
static void past_max_lanes_threads_share_the_bus(void **state)
{
    (void)state;
    cbt_config c = small_lanes(1);
    tu_start(&c);
    tu_pub(CBT_EV_MP_REQUEST_START, "main"); /* the test thread takes the one lane */
    pub_arg a = {.id = 1, .n = 500};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, publisher, &a), 0);
    pthread_join(th, NULL);
    tu_flush();
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m), CBT_OK);
    assert_int_equal(a.ok, 500);
    assert_int_equal(m.published, 501);
    assert_int_equal(tu_event_count(), 501);
    tu_stop();
}

/* Lanes off entirely (lane_capacity 0): everything goes through the shared bus. */
static void lanes_off(void **state)
{
    (void)state;
    cbt_config c = small_lanes(8);
    c.lane_capacity = 0;
    tu_start(&c);
    pub_arg a = {.id = 2, .n = 300};
    publisher(&a);
    tu_flush();
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m), CBT_OK);
    assert_int_equal(m.lanes, 0);
    assert_int_equal(m.published, 300);
    assert_int_equal(tu_event_count(), 300);
    tu_stop();
}

/* Causal order across lanes: thread A publishes X(i), then hands a token to
 * thread B, which publishes Y(i). X(i) must be dispatched before Y(i), every
 * time, although they sit in different lanes. */
typedef struct pingpong {
    _Atomic int turn; /* 2i: A's turn for i; 2i+1: B's */
    int rounds;
} pingpong;

static void *ping(void *arg)
{
    pingpong *p = arg;
    for (int i = 0; i < p->rounds; i++) {
        while (atomic_load_explicit(&p->turn, memory_order_acquire) != 2 * i)
            ;
        cbt_event e;
        cbt_event_init(&e, CBT_EV_MP_STORE_SUBMITTED, "X");
        e.pair = (uint64_t)i;
        assert_int_equal(cbt_publish(&e), CBT_OK);
        atomic_store_explicit(&p->turn, 2 * i + 1, memory_order_release);
    }
    return NULL;
}

static void *pong(void *arg)
{
    pingpong *p = arg;
    for (int i = 0; i < p->rounds; i++) {
        while (atomic_load_explicit(&p->turn, memory_order_acquire) != 2 * i + 1)
            ;
        cbt_event e;
        cbt_event_init(&e, CBT_EV_MP_STORE_START, "Y");
        e.pair = (uint64_t)i;
        assert_int_equal(cbt_publish(&e), CBT_OK);
        atomic_store_explicit(&p->turn, 2 * i + 2, memory_order_release);
    }
    return NULL;
}

static void causal_order_across_lanes(void **state)
{
    (void)state;
    cbt_config c = small_lanes(8);
    c.lane_capacity = 8192;
    c.poll_interval_us = 1; /* the harvester runs hot, interleaving with both */
    tu_start(&c);
    pingpong p = {.rounds = 3000};
    atomic_init(&p.turn, 0);
    pthread_t a, b;
    assert_int_equal(pthread_create(&a, NULL, ping, &p), 0);
    assert_int_equal(pthread_create(&b, NULL, pong, &p), 0);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    tu_flush();
    assert_int_equal(tu_event_count(), 2u * (uint32_t)p.rounds);
    /* dispatch order must be X0 Y0 X1 Y1 ...: each event follows its cause */
    for (uint32_t k = 0; k < tu_event_count(); k++) {
        const tu_event *e = tu_event_at(k);
        assert_int_equal(e->pair, k / 2);
        assert_string_equal(e->session, (k % 2) ? "Y" : "X");
    }
    tu_stop();
}

/* ---- big events end to end ---- */

#define BIG_TYPE CBT_EV_L1_READ_RESERVED /* no builder consumes it */
#define BIG_PRODUCERS 4
#define BIG_PER 3000u

/* What the checking subscriber saw (harvester thread; read after a flush). */
typedef struct big_seen {
    uint8_t *seen[BIG_PRODUCERS + 1];
    int64_t last[BIG_PRODUCERS + 1];
    uint64_t ok, bad, dup, order, hooked;
    int hook_mode; /* every event carries the hook's extra string too */
    const char *first_bad;
} big_seen;
static big_seen g_big;

#define HOOK_STR_LEN 300
static cbt_name g_hook_key;
static char g_hook_str[HOOK_STR_LEN + 1];

static cbt_status big_on_event(void *ctx, cbt_tracer *t, const cbt_event *ev)
{
    (void)ctx, (void)t;
    big_seen *b = &g_big;
    uint32_t p;
    uint64_t s;
    if (!tu_big_ids(ev, &p, &s) || p > BIG_PRODUCERS || s >= BIG_PER) {
        b->bad++;
        b->first_bad = "ids";
        return CBT_OK;
    }
    const cbt_event *check = ev;
    static cbt_event stripped; /* the harvester is one thread */
    if (b->hook_mode) {
        /* the hook appended its value last: its string is the area's last */
        size_t len = 0;
        const cbt_meta *m = ev->n_meta ? &ev->meta[ev->n_meta - 1] : NULL;
        const char *v = m && m->key == g_hook_key ? cbt_event_meta_str(ev, m, &len) : NULL;
        if (!v || len != HOOK_STR_LEN || memcmp(v, g_hook_str, len) != 0) {
            b->bad++;
            b->first_bad = "hook value";
            return CBT_OK;
        }
        b->hooked++;
        stripped = *ev;
        stripped.n_meta--;
        stripped.str_used = m->area_off;
        check = &stripped;
    }
    const char *why = tu_big_check(check, BIG_TYPE, p, s);
    if (why) {
        b->bad++;
        if (!b->first_bad)
            b->first_bad = why;
    } else {
        b->ok++;
    }
    if (b->seen[p][s])
        b->dup++;
    b->seen[p][s] = 1;
    if ((int64_t)s <= b->last[p])
        b->order++;
    b->last[p] = (int64_t)s;
    return CBT_OK;
}

static void big_start(const cbt_config *c)
{
    tu_big_names();
    memset(&g_big, 0, sizeof g_big);
    for (int i = 0; i <= BIG_PRODUCERS; i++) {
        g_big.seen[i] = calloc(BIG_PER, 1);
        g_big.last[i] = -1;
    }
    tu_start(c);
    cbt_subscriber sub;
    cbt_subscriber_init(&sub, "big-check", NULL, big_on_event, NULL, NULL);
    cbt_subscriber_want(&sub, BIG_TYPE);
    assert_int_equal(cbt_add_subscriber(&sub), CBT_OK);
}

/* Everything published arrived, once, in order, intact. */
static void big_expect(int producers, uint32_t per)
{
    if (g_big.first_bad)
        fprintf(stderr, "# big events: first difference: %s\n", g_big.first_bad);
    assert_true(g_big.bad == 0);
    assert_true(g_big.dup == 0);
    assert_true(g_big.order == 0);
    assert_true(g_big.ok == (uint64_t)producers * per);
    for (int p = 0; p < producers; p++)
        for (uint32_t s = 0; s < per; s++)
            assert_int_equal(g_big.seen[p][s], 1);
    for (int i = 0; i <= BIG_PRODUCERS; i++)
        free(g_big.seen[i]);
}

typedef struct big_arg {
    uint32_t id;
    cbt_stream *stream; /* publish on it instead */
    uint64_t full;      /* CBT_ERR_FULL seen (and retried) */
    int other;
} big_arg;

static uint64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void *big_publisher(void *arg)
{
    big_arg *a = arg;
    static _Thread_local cbt_event ev;
    /* a consumer that stopped (a broken queue) must fail the test, not hang it */
    uint64_t give_up = mono_ns() + 30ull * 1000000000ull;
    for (uint32_t s = 0; s < BIG_PER && !a->other; s++) {
        tu_big_event(&ev, BIG_TYPE, a->id, s);
        for (;;) {
            cbt_status st = a->stream ? cbt_publish_on_stream(a->stream, &ev) : cbt_publish(&ev);
            if (st == CBT_OK)
                break;
            if (st != CBT_ERR_FULL || mono_ns() > give_up) {
                a->other++;
                break;
            }
            a->full++; /* the consumer frees cells as it goes: try again */
            sched_yield();
        }
    }
    return NULL;
}

static void run_publishers(int n, cbt_stream *stream, uint64_t *full)
{
    pthread_t th[BIG_PRODUCERS];
    big_arg args[BIG_PRODUCERS];
    for (int i = 0; i < n; i++) {
        args[i] = (big_arg){.id = (uint32_t)i, .stream = stream};
        assert_int_equal(pthread_create(&th[i], NULL, big_publisher, &args[i]), 0);
    }
    *full = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].other, 0);
        *full += args[i].full;
    }
}

/* Four threads with lanes of 256 cells (a few dozen big events): each lane
 * wraps many times while the harvester drains it; every record survives. */
static void big_events_through_small_lanes(void **state)
{
    (void)state;
    cbt_config c = small_lanes(8);
    c.lane_capacity = 256;
    c.poll_interval_us = 20;
    big_start(&c);
    uint64_t full = 0;
    run_publishers(BIG_PRODUCERS, NULL, &full);
    tu_flush();
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m), CBT_OK);
    assert_true(m.published == (uint64_t)BIG_PRODUCERS * BIG_PER);
    assert_true(m.dropped_full == full); /* every refusal counted */
    fprintf(stderr, "# lanes: %llu big events, %llu refused as full and retried\n",
            (unsigned long long)m.published, (unsigned long long)full);
    big_expect(BIG_PRODUCERS, BIG_PER);
    tu_stop();
}

/* max_lanes 1, taken by the test thread: the publishers share the bus (256
 * cells, a CAS claim of several cells per event). */
static void big_events_through_shared_bus(void **state)
{
    (void)state;
    cbt_config c = small_lanes(1);
    c.queue_capacity = 256;
    c.poll_interval_us = 20;
    big_start(&c);
    tu_pub(CBT_EV_MP_REQUEST_START, "main"); /* the one lane */
    uint64_t full = 0;
    run_publishers(BIG_PRODUCERS, NULL, &full);
    tu_flush();
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m), CBT_OK);
    assert_int_equal(m.lanes, 1);
    assert_true(m.published == (uint64_t)BIG_PRODUCERS * BIG_PER + 1);
    assert_true(m.dropped_full == full);
    big_expect(BIG_PRODUCERS, BIG_PER);
    tu_stop();
}

/* Through a CPU stream of 16 items (64 cells of queued marks): the marks'
 * events wait as records in the stream, then go through the worker's lane
 * (which drops what does not fit, so it is made big enough for all). */
static void big_events_through_cpu_stream(void **state)
{
    (void)state;
    cbt_config c = small_lanes(8);
    c.lane_capacity = 1u << 16;
    c.poll_interval_us = 20;
    big_start(&c);
    cbt_stream *s;
    assert_int_equal(cbt_stream_cpu_create(16, &s), CBT_OK);
    uint64_t full = 0;
    run_publishers(1, s, &full);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    cbt_stream_destroy(s);
    big_expect(1, BIG_PER);
    tu_stop();
}

/* The publish hook gets a copy of each event (strings included) and adds a
 * 300-byte string of its own to it: both reach the subscriber, for
 * cbt_publish and for a stream publish. */
static void hook_add_long_string(void *ctx, cbt_event *ev, int on_stream)
{
    (void)ctx, (void)on_stream;
    (void)cbt_event_str(ev, g_hook_key, g_hook_str);
}

static void long_strings_through_publish_hook(void **state)
{
    (void)state;
    g_hook_key = tu_name("test.hook.note");
    for (int i = 0; i < HOOK_STR_LEN; i++)
        g_hook_str[i] = (char)('0' + i % 10);
    cbt_config c = small_lanes(8);
    c.lane_capacity = 1u << 16; /* the stream worker's lane drops what does not fit */
    c.poll_interval_us = 20;
    big_start(&c);
    g_big.hook_mode = 1;
    assert_int_equal(cbt_publish_hook_install_(cbt_tracer_get(), hook_add_long_string, NULL),
                     CBT_OK);
    /* events with room for one more value (not the 16-value ones): seq % 17
     * != 16, so the hook's value always fits */
    cbt_stream *s;
    assert_int_equal(cbt_stream_cpu_create(0, &s), CBT_OK);
    static cbt_event ev;
    uint32_t n = 0;
    for (uint32_t q = 0; q < 400; q++) {
        if (q % 17 == 16)
            continue;
        tu_big_event(&ev, BIG_TYPE, q & 1, q);
        cbt_status st;
        while ((st = (q & 1) ? cbt_publish_on_stream(s, &ev) : cbt_publish(&ev)) == CBT_ERR_FULL)
            sched_yield(); /* the lane is 1024 cells: let the harvester catch up */
        assert_int_equal(st, CBT_OK);
        n++;
    }
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    cbt_stream_destroy(s);
    if (g_big.first_bad)
        fprintf(stderr, "# hook: first difference: %s\n", g_big.first_bad);
    assert_true(g_big.bad == 0);
    assert_true(g_big.hooked == n);
    assert_true(g_big.ok == n);
    for (int i = 0; i <= BIG_PRODUCERS; i++)
        free(g_big.seen[i]);
    tu_stop();
}

/* A lane in its first lap has the next 1 MiB past its producer faulted in by
 * the harvester (lane.c, "Populating"), so the producer takes no page
 * faults: after one publish and a flush every page of a 1 MiB lane is
 * resident (mincore), where a lane touched only by that publish would have
 * a few. Skipped where the kernel refuses MADV_POPULATE_WRITE (before 5.14).
 * Under TSan, whose calloc writes the zeroes itself, every page is resident
 * anyway: there the test cannot fail. */
static void new_lane_is_populated(void **state)
{
    (void)state;
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
    long pg = sysconf(_SC_PAGESIZE);
    void *probe = mmap(NULL, (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(probe != MAP_FAILED);
    int refused = madvise(probe, (size_t)pg, MADV_POPULATE_WRITE) != 0;
    munmap(probe, (size_t)pg);
    if (refused) {
        printf("SKIP: new_lane_is_populated: the kernel refuses MADV_POPULATE_WRITE\n");
        skip();
    }
    cbt_config c = cbt_config_default();
    c.lane_capacity = 1u << 14; /* 1 MiB */
    tu_start(&c);
    cbt_event e;
    cbt_event_init(&e, CBT_EV_MP_STORE_START, "pop");
    assert_int_equal(cbt_publish(&e), CBT_OK);
    assert_int_equal(cbt_flush(5000), CBT_OK);
    cbt_tracer *t = cbt_tracer_get();
    assert_int_equal(cbt_lanes_in_use_(t), 1);
    cbt_lane *lane = NULL;
    for (uint32_t i = 0; i < t->n_pool && !lane; i++)
        if (atomic_load(&t->lane_pool[i].state) == CBT_LANE_TAKEN)
            lane = &t->lane_pool[i];
    assert_non_null(lane);
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)lane->bus.cells;
    uintptr_t end = a + (uintptr_t)(lane->bus.mask + 1) * CBT_REC_CELL;
    a = (a + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    size_t pages = (size_t)((end - a) / (uintptr_t)page);
    unsigned char *vec = calloc(pages, 1);
    assert_non_null(vec);
    int rc = mincore((void *)a, pages * (size_t)page, vec);
    if (rc != 0) {
        free(vec);
        skip(); /* tu_teardown stops the tracer */
    }
    size_t resident = 0;
    for (size_t i = 0; i < pages; i++)
        resident += vec[i] & 1;
    free(vec);
    printf("# lane: %zu of %zu pages resident after one publish\n", resident, pages);
    assert_int_equal(resident, pages);
    tu_stop();
#else
    skip();
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(threads_get_lanes_and_give_them_back),
        cmocka_unit_test(past_max_lanes_threads_share_the_bus),
        cmocka_unit_test(lanes_off),
        cmocka_unit_test_teardown(new_lane_is_populated, tu_teardown),
        cmocka_unit_test(causal_order_across_lanes),
        cmocka_unit_test_teardown(big_events_through_small_lanes, tu_teardown),
        cmocka_unit_test_teardown(big_events_through_shared_bus, tu_teardown),
        cmocka_unit_test_teardown(big_events_through_cpu_stream, tu_teardown),
        cmocka_unit_test_teardown(long_strings_through_publish_hook, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
