/* tests/test_lanes.c — per-thread publish lanes: each thread gets its own,
 * exited threads give theirs back, threads past max_lanes share the bus, and
 * the harvester's merge keeps causal order across threads. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(threads_get_lanes_and_give_them_back),
        cmocka_unit_test(past_max_lanes_threads_share_the_bus),
        cmocka_unit_test(lanes_off),
        cmocka_unit_test(causal_order_across_lanes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
