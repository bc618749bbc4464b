/* tests/test_stream_queue.c — the CPU stream's lock-free queue (host/streams/stream.c):
 * publishers never wait for the worker, many producers keep their own order,
 * sync and destroy with producers racing, and marks lost after CBT_OK are
 * counted where cbt/stream.h says. */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"
#include "internal/stream_impl.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static cbt_config quiet_config(void)
{
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    c.mp_subscriber = false; /* the tests' sessions are not requests */
    return c;
}

static cbt_stream_stats stats_of(cbt_stream *s)
{
    cbt_stream_stats st = CBT_STRUCT_INIT(cbt_stream_stats);
    assert_int_equal(cbt_stream_stats_get(s, &st), CBT_OK);
    return st;
}

/* Events recorded for sessions starting with `prefix`. */
static uint32_t count_recorded(const char *prefix)
{
    uint32_t n = 0, len = (uint32_t)strlen(prefix);
    for (uint32_t i = 0; i < tu_event_count(); i++)
        if (strncmp(tu_event_at(i)->session, prefix, len) == 0)
            n++;
    return n;
}

/* ---- a worker stalled where the old queue held its lock ----------------------- */

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    cbt_stream *target;
    int stalled, released, used;
} g_stall = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0, 0};

/* The worker hook: the first item the target stream completes stalls it
 * (as a worker preempted there would) until released, at most 1.5 s. */
static void stall_hook(cbt_stream *s)
{
    pthread_mutex_lock(&g_stall.lock);
    if (s == g_stall.target && !g_stall.used) {
        g_stall.used = 1;
        g_stall.stalled = 1;
        pthread_cond_broadcast(&g_stall.cv);
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += 1;
        dl.tv_nsec += 500000000;
        if (dl.tv_nsec >= 1000000000) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000;
        }
        while (!g_stall.released)
            if (pthread_cond_timedwait(&g_stall.cv, &g_stall.lock, &dl) != 0)
                break;
        g_stall.stalled = 0;
    }
    pthread_mutex_unlock(&g_stall.lock);
}

static void noop(void *arg) { (void)arg; }

#define STALL_CAP 64
#define STALL_CALLS 100

typedef struct stall_producer {
    pthread_t th;
    cbt_stream *s;
    uint32_t id;
    cbt_status st[STALL_CALLS];
    uint64_t max_ns;
} stall_producer;

static void *stall_publish(void *arg)
{
    stall_producer *p = arg;
    for (int i = 0; i < STALL_CALLS; i++) {
        cbt_event e;
        cbt_event_init(&e, CBT_EV_MP_STORE_START, "lat");
        e.pair = p->id;
        uint64_t t0 = now_ns();
        p->st[i] = cbt_publish_on_stream(p->s, &e);
        uint64_t dt = now_ns() - t0;
        if (dt > p->max_ns)
            p->max_ns = dt;
        if (i % 8 == 0) { /* work too: cbt_stream_enqueue is the same path */
            t0 = now_ns();
            cbt_status st = cbt_stream_enqueue(p->s, noop, NULL);
            dt = now_ns() - t0;
            if (dt > p->max_ns)
                p->max_ns = dt;
            if (st != CBT_OK && st != CBT_ERR_FULL)
                p->max_ns = UINT64_MAX; /* fails the test below */
            if (st == CBT_OK) /* the queue still had room: it must have for the marks too */
                p->st[i] = p->st[i] == CBT_OK ? CBT_OK : (cbt_status)-1000;
        }
    }
    return NULL;
}

/* With the worker stalled mid-item, publishers' calls each return within
 * 50 ms (they take no lock and never wait for the worker): CBT_OK until the
 * queue is full, CBT_ERR_FULL after, and what they got in runs once the
 * worker goes on. */
static void publish_never_waits_for_stalled_worker(void **state)
{
    (void)state;
    cbt_config c = quiet_config();
    tu_start(&c);
    cbt_stream *s;
    assert_int_equal(cbt_stream_cpu_create(STALL_CAP, &s), CBT_OK);
    g_stall.target = s;
    g_stall.stalled = g_stall.released = g_stall.used = 0;
    atomic_store_explicit(&cbt_stream_worker_hook_, stall_hook, memory_order_release);
    assert_int_equal(cbt_stream_enqueue(s, noop, NULL), CBT_OK);
    pthread_mutex_lock(&g_stall.lock);
    while (!g_stall.stalled)
        pthread_cond_wait(&g_stall.cv, &g_stall.lock);
    pthread_mutex_unlock(&g_stall.lock);

    stall_producer p[2];
    memset(p, 0, sizeof p);
    for (uint32_t i = 0; i < 2; i++) {
        p[i].s = s;
        p[i].id = i + 1;
        assert_int_equal(pthread_create(&p[i].th, NULL, stall_publish, &p[i]), 0);
    }
    for (uint32_t i = 0; i < 2; i++)
        pthread_join(p[i].th, NULL);
    pthread_mutex_lock(&g_stall.lock);
    int still_stalled = g_stall.stalled;
    g_stall.released = 1;
    pthread_cond_broadcast(&g_stall.cv);
    pthread_mutex_unlock(&g_stall.lock);

    uint32_t ok = 0;
    for (uint32_t i = 0; i < 2; i++) {
        printf("producer %u: slowest call %.3f ms\n", i, (double)p[i].max_ns / 1e6);
        assert_true(p[i].max_ns < 50000000ull);
        int full = 0;
        for (int j = 0; j < STALL_CALLS; j++) {
            if (p[i].st[j] == CBT_OK) {
                assert_false(full); /* nothing is freed while the worker stalls */
                ok++;
            } else {
                assert_int_equal(p[i].st[j], CBT_ERR_FULL);
                full = 1;
            }
        }
    }
    /* the producers finished while the worker still stalled */
    assert_true(still_stalled);

    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    atomic_store_explicit(&cbt_stream_worker_hook_, NULL, memory_order_release);
    tu_flush();
    cbt_stream_stats st = stats_of(s);
    /* every slot but the stalled item's was taken, by marks or work */
    assert_int_equal(st.items_enqueued, STALL_CAP);
    assert_int_equal(st.items_completed, STALL_CAP);
    assert_int_equal(st.marks_published, ok);
    assert_int_equal(st.marks_dropped, 0);
    assert_true(ok > 0);
    assert_int_equal(count_recorded("lat"), ok);
    cbt_stream_destroy(s);
    tu_stop();
}

/* ---- many producers, one order each ------------------------------------------ */

#define FIFO_PRODUCERS 4
#define FIFO_ITEMS 300

typedef struct fifo_item {
    uint32_t producer, seq;
} fifo_item;

static fifo_item g_items[FIFO_PRODUCERS][FIFO_ITEMS];
static cbt_name g_blob;
static _Atomic uint32_t g_fifo_errors;

/* Work: publish from the worker thread, into the same lane the worker's
 * marks go into, so the dispatch order is the stream's execution order. */
static void fifo_work(void *arg)
{
    fifo_item *it = arg;
    cbt_event e;
    char sid[32];
    snprintf(sid, sizeof sid, "p%u-%u", it->producer, it->seq);
    cbt_event_init(&e, CBT_EV_MP_STORE_SUBMITTED, sid);
    if (cbt_publish(&e) != CBT_OK)
        atomic_fetch_add(&g_fifo_errors, 1);
}

typedef struct fifo_producer {
    pthread_t th;
    cbt_stream *s;
    uint32_t id;
} fifo_producer;

static void *fifo_publish(void *arg)
{
    fifo_producer *p = arg;
    char big[301];
    memset(big, 'x', 300);
    big[300] = 0;
    for (uint32_t j = 0; j < FIFO_ITEMS; j++) {
        fifo_item *it = &g_items[p->id][j];
        it->producer = p->id;
        it->seq = j;
        cbt_status st;
        if (j % 3 == 0) {
            while ((st = cbt_stream_enqueue(p->s, fifo_work, it)) == CBT_ERR_FULL)
                sched_yield();
        } else {
            cbt_event e;
            char sid[32];
            snprintf(sid, sizeof sid, "p%u-%u", p->id, j);
            cbt_event_init(&e, CBT_EV_MP_STORE_START, sid);
            if (j % 5 == 0) /* a mark of several slots */
                cbt_event_str(&e, g_blob, big);
            while ((st = cbt_publish_on_stream(p->s, &e)) == CBT_ERR_FULL)
                sched_yield();
        }
        if (st != CBT_OK)
            atomic_fetch_add(&g_fifo_errors, 1);
    }
    return NULL;
}

/* Several threads interleave work and marks (some of several slots) on one
 * small stream, wrapping it many times: each thread's items run in its
 * order, none is lost and none runs twice. */
static void many_producers_keep_their_order(void **state)
{
    (void)state;
    cbt_config c = quiet_config();
    tu_start(&c);
    g_blob = tu_name("blob");
    atomic_store(&g_fifo_errors, 0);
    cbt_stream *s;
    assert_int_equal(cbt_stream_cpu_create(48, &s), CBT_OK);
    fifo_producer p[FIFO_PRODUCERS];
    for (uint32_t i = 0; i < FIFO_PRODUCERS; i++) {
        p[i].s = s;
        p[i].id = i;
        assert_int_equal(pthread_create(&p[i].th, NULL, fifo_publish, &p[i]), 0);
    }
    for (uint32_t i = 0; i < FIFO_PRODUCERS; i++)
        pthread_join(p[i].th, NULL);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    assert_int_equal(atomic_load(&g_fifo_errors), 0);

    uint32_t next[FIFO_PRODUCERS] = {0};
    uint32_t seen = 0;
    for (uint32_t i = 0; i < tu_event_count(); i++) {
        const tu_event *e = tu_event_at(i);
        unsigned pr, sq;
        if (sscanf(e->session, "p%u-%u", &pr, &sq) != 2)
            continue;
        assert_true(pr < FIFO_PRODUCERS);
        if (sq != next[pr])
            fail_msg("producer %u: item %u ran where %u was due", pr, sq, next[pr]);
        assert_int_equal(e->type, sq % 3 == 0 ? CBT_EV_MP_STORE_SUBMITTED : CBT_EV_MP_STORE_START);
        next[pr]++;
        seen++;
    }
    for (uint32_t i = 0; i < FIFO_PRODUCERS; i++)
        assert_int_equal(next[i], FIFO_ITEMS);
    assert_int_equal(seen, FIFO_PRODUCERS * FIFO_ITEMS);
    cbt_stream_stats st = stats_of(s);
    assert_int_equal(st.items_enqueued, FIFO_PRODUCERS * FIFO_ITEMS);
    assert_int_equal(st.items_completed, FIFO_PRODUCERS * FIFO_ITEMS);
    assert_int_equal(st.marks_published, FIFO_PRODUCERS * (FIFO_ITEMS - FIFO_ITEMS / 3));
    assert_int_equal(st.marks_dropped, 0);
    cbt_stream_destroy(s);
    tu_stop();
}

/* ---- sync and destroy with producers racing ----------------------------------- */

#define RACE_PRODUCERS 3
#define RACE_ROUNDS 40
#define RACE_BATCH 10
#define RACE_TAIL 25

typedef struct race_producer {
    pthread_t th;
    cbt_stream *s;
    uint64_t ran;  /* written by the worker only */
    uint32_t bad;  /* sync returned before this producer's items ran */
    uint32_t errors;
} race_producer;

static void race_bump(void *arg) { ((race_producer *)arg)->ran++; }
static void race_slow_bump(void *arg)
{
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
    ((race_producer *)arg)->ran++;
}

static void race_put(race_producer *p, cbt_stream_fn fn)
{
    cbt_status st;
    while ((st = cbt_stream_enqueue(p->s, fn, p)) == CBT_ERR_FULL)
        sched_yield();
    if (st != CBT_OK)
        p->errors++;
}

static void *race_run(void *arg)
{
    race_producer *p = arg;
    for (uint32_t r = 0; r < RACE_ROUNDS; r++) {
        for (uint32_t i = 0; i < RACE_BATCH; i++)
            race_put(p, race_bump);
        /* the others keep enqueuing: sync waits for ours, not for theirs */
        if (cbt_stream_sync(p->s) != CBT_OK)
            p->errors++;
        if (p->ran != (uint64_t)(r + 1) * RACE_BATCH) /* read after sync: ordered by it */
            p->bad++;
    }
    /* a last batch, slow, not synced: destroy must run it */
    for (uint32_t i = 0; i < RACE_TAIL; i++)
        race_put(p, i % 5 == 0 ? race_slow_bump : race_bump);
    return NULL;
}

static void sync_and_destroy_with_producers_racing(void **state)
{
    (void)state;
    cbt_stream *s;
    assert_int_equal(cbt_stream_cpu_create(16, &s), CBT_OK);
    race_producer p[RACE_PRODUCERS];
    memset(p, 0, sizeof p);
    for (uint32_t i = 0; i < RACE_PRODUCERS; i++) {
        p[i].s = s;
        assert_int_equal(pthread_create(&p[i].th, NULL, race_run, &p[i]), 0);
    }
    /* a bystander syncing while they run returns too */
    for (int i = 0; i < 20; i++)
        assert_int_equal(cbt_stream_sync(s), CBT_OK);
    for (uint32_t i = 0; i < RACE_PRODUCERS; i++)
        pthread_join(p[i].th, NULL);
    cbt_stream_destroy(s); /* the worker is still behind: destroy drains it */
    for (uint32_t i = 0; i < RACE_PRODUCERS; i++) {
        assert_int_equal(p[i].errors, 0);
        assert_int_equal(p[i].bad, 0);
        assert_int_equal(p[i].ran, RACE_ROUNDS * RACE_BATCH + RACE_TAIL);
    }
}

/* ---- marks lost after CBT_OK are counted -------------------------------------- */

static cbt_status slow_on_event(void *ctx, cbt_tracer *t, const cbt_event *ev)
{
    (void)ctx, (void)t, (void)ev;
    struct timespec ts = {0, 1000000}; /* 1 ms: the harvester falls behind */
    nanosleep(&ts, NULL);
    return CBT_OK;
}

#define DROP_MARKS 300

/* A tiny tracer queue (no lanes, the 64-cell shared bus) behind a slow
 * subscriber: when the worker reaches the marks, most find no room. Each
 * was accepted with CBT_OK; each lost one is counted in the stream's
 * marks_dropped and in cbt_metrics.stream_marks_dropped, and the two
 * agree with what never reached a subscriber. */
static void marks_lost_after_ok_are_counted(void **state)
{
    (void)state;
    cbt_config c = quiet_config();
    c.lane_capacity = 0;
    c.queue_capacity = 64;
    tu_start(&c);
    cbt_subscriber slow;
    memset(&slow, 0, sizeof slow);
    slow.version = CBT_SUBSCRIBER_VERSION;
    slow.size = sizeof slow;
    slow.name = "slow";
    slow.on_event = slow_on_event;
    memset(slow.mask, 0xff, sizeof slow.mask);
    assert_int_equal(cbt_add_subscriber(&slow), CBT_OK);

    cbt_stream *s;
    assert_int_equal(cbt_stream_cpu_create(DROP_MARKS + 1, &s), CBT_OK);
    tu_gate *g = tu_gate_new();
    tu_gate_enqueue(g, s); /* hold the worker until every mark is queued */
    for (int i = 0; i < DROP_MARKS; i++) {
        cbt_event e;
        cbt_event_init(&e, CBT_EV_MP_STORE_START, "drop");
        assert_int_equal(cbt_publish_on_stream(s, &e), CBT_OK);
    }
    tu_gate_open(g);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();

    uint32_t reached = count_recorded("drop");
    cbt_stream_stats st = stats_of(s);
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m), CBT_OK);
    printf("marks: %u reached a subscriber, %llu dropped after CBT_OK\n", reached,
           (unsigned long long)st.marks_dropped);
    assert_true(st.marks_dropped > 0);
    assert_int_equal(st.marks_dropped + reached, DROP_MARKS);
    assert_int_equal(st.marks_published, reached);
    assert_int_equal(m.stream_marks_dropped, st.marks_dropped);
    assert_true(m.dropped_full >= st.marks_dropped); /* refused by the full queue */
    assert_int_equal(st.full_refusals, 0);
    assert_int_equal(st.items_enqueued, DROP_MARKS + 1);
    cbt_stream_destroy(s);
    tu_gate_free(g);
    tu_stop();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(publish_never_waits_for_stalled_worker, tu_teardown),
        cmocka_unit_test_teardown(many_producers_keep_their_order, tu_teardown),
        cmocka_unit_test(sync_and_destroy_with_producers_racing),
        cmocka_unit_test_teardown(marks_lost_after_ok_are_counted, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
