/* tests/test_stream_cpu.c — the CPU stream backend: FIFO order, marks stamped
 * when reached, sync, bounded queue, large marks in several slots, works
 * without a tracer. (The queue's concurrency: tests/test_stream_queue.c.) */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"

typedef struct order_log {
    pthread_mutex_t lock;
    int seq[64];
    int n;
} order_log;

typedef struct order_item {
    order_log *log;
    int id;
} order_item;

static void log_fn(void *arg)
{
    order_item *it = arg;
    pthread_mutex_lock(&it->log->lock);
    it->log->seq[it->log->n++] = it->id;
    pthread_mutex_unlock(&it->log->lock);
}

/* Work runs in FIFO order on one worker. */
static void fifo_order(void **state)
{
    (void)state;
    cbt_stream *s;
    assert_int_equal(cbt_stream_cpu_create(0, &s), CBT_OK);
    order_log log = {.lock = PTHREAD_MUTEX_INITIALIZER};
    order_item items[32];
    for (int i = 0; i < 32; i++) {
        items[i] = (order_item){&log, i};
        assert_int_equal(cbt_stream_enqueue(s, log_fn, &items[i]), CBT_OK);
    }
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    assert_int_equal(log.n, 32);
    for (int i = 0; i < 32; i++)
        assert_int_equal(log.seq[i], i);
    cbt_stream_destroy(s);
}

/* A mark is stamped when the stream reaches it, not when it was enqueued:
 * the END after 20 ms of work must be >= 20 ms after the START. */
static void marks_stamped_when_reached(void **state)
{
    (void)state;
    tu_start(NULL);
    cbt_stream *s;
    assert_int_equal(cbt_stream_cpu_create(0, &s), CBT_OK);
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, "s1");
    tu_pub_on(s, CBT_EV_MP_STORE_START, "s1");
    tu_enqueue_sleep(s, 20000);
    tu_pub_on(s, CBT_EV_MP_STORE_END, "s1");
    tu_pub(CBT_EV_MP_REQUEST_END, "s1"); /* published while the stream works */
    cbt_stream_sync(s);
    tu_flush();
    const tu_event *st = tu_event_find(CBT_EV_MP_STORE_START, "s1", 0);
    const tu_event *en = tu_event_find(CBT_EV_MP_STORE_END, "s1", 0);
    const tu_event *re = tu_event_find(CBT_EV_MP_REQUEST_END, "s1", 0);
    assert_non_null(st);
    assert_non_null(en);
    assert_non_null(re);
    assert_true(en->ts >= st->ts + 20000000ull);
    /* REQUEST_END was published while the stream had not finished: it lies
     * before the END (the worker may not even have reached the START yet) */
    assert_true(re->ts < en->ts);
    /* the pairing key of a stream event defaults to the stream's ordinal */
    assert_int_equal(st->pair, cbt_stream_ordinal(s));
    assert_int_equal(en->pair, cbt_stream_ordinal(s));
    cbt_stream_destroy(s);
    tu_stop();
}

/* A full CPU stream refuses work with CBT_ERR_FULL and enqueues nothing. */
static void full_queue_refuses(void **state)
{
    (void)state;
    cbt_stream *s;
    assert_int_equal(cbt_stream_cpu_create(3, &s), CBT_OK);
    tu_gate *g = tu_gate_new();
    tu_gate_enqueue(g, s); /* the worker takes it and blocks; the ring keeps the slot */
    order_log log = {.lock = PTHREAD_MUTEX_INITIALIZER};
    order_item items[4];
    int accepted = 0, refused = 0;
    for (int i = 0; i < 4; i++) {
        items[i] = (order_item){&log, i};
        cbt_status st = cbt_stream_enqueue(s, log_fn, &items[i]);
        if (st == CBT_OK)
            accepted++;
        else {
            assert_int_equal(st, CBT_ERR_FULL);
            refused++;
        }
    }
    assert_int_equal(accepted, 2); /* capacity 3, one slot held by the gate */
    assert_int_equal(refused, 2);
    tu_gate_open(g);
    cbt_stream_sync(s);
    assert_int_equal(log.n, 2);
    cbt_stream_destroy(s);
    tu_gate_free(g);
}

/* The smallest queue: capacity 1 is refused (one slot cannot tell "committed
 * at p" from "free for p + 1"); with 2, the worker blocked on one item, one
 * more is accepted, the next refused, and both accepted ones run. */
static void smallest_queue(void **state)
{
    (void)state;
    cbt_stream *s = NULL;
    assert_int_equal(cbt_stream_cpu_create(1, &s), CBT_ERR_INVAL);
    assert_int_equal(cbt_stream_cpu_create(2, &s), CBT_OK);
    tu_gate *g = tu_gate_new();
    tu_gate_enqueue(g, s);
    order_log log = {.lock = PTHREAD_MUTEX_INITIALIZER};
    order_item items[3];
    int accepted = 0;
    for (int i = 0; i < 3; i++) {
        items[i] = (order_item){&log, i};
        cbt_status st = cbt_stream_enqueue(s, log_fn, &items[i]);
        if (st == CBT_OK)
            accepted++;
        else
            assert_int_equal(st, CBT_ERR_FULL);
    }
    assert_int_equal(accepted, 1);
    tu_gate_open(g);
    cbt_stream_sync(s);
    assert_int_equal(log.n, 1);
    for (int i = 0; i < 2; i++) /* and it goes on working past the wrap */
        assert_int_equal(cbt_stream_enqueue(s, log_fn, &items[i]), CBT_OK);
    cbt_stream_sync(s);
    assert_int_equal(log.n, 3);
    cbt_stream_destroy(s);
    tu_gate_free(g);
}

static uint64_t completed_of(cbt_stream *s)
{
    cbt_stream_stats st = CBT_STRUCT_INIT(cbt_stream_stats);
    assert_int_equal(cbt_stream_stats_get(s, &st), CBT_OK);
    return st.items_completed;
}

/* A mark whose record needs more than one slot's 256 bytes takes as many
 * consecutive slots, and is refused (CBT_ERR_FULL, counted) unless all of
 * them are free: here the first two are free and the third is still held
 * by the item the worker runs. A mark larger than the whole queue is always
 * refused. What was accepted arrives whole. */
static void large_marks_take_consecutive_slots(void **state)
{
    (void)state;
    tu_start(NULL);
    cbt_name blob = tu_name("blob");
    char str[601];
    memset(str, 'y', 600);
    str[600] = 0;
    cbt_event big3, big2, small;
    assert_int_equal(cbt_event_init(&big3, CBT_EV_MP_STORE_START, "big3"), CBT_OK);
    assert_int_equal(cbt_event_str(&big3, blob, str), CBT_OK); /* 11 cells: 3 slots */
    str[200] = 0;
    assert_int_equal(cbt_event_init(&big2, CBT_EV_MP_STORE_START, "big2"), CBT_OK);
    assert_int_equal(cbt_event_str(&big2, blob, str), CBT_OK); /* 5 cells: 2 slots */
    assert_int_equal(cbt_event_init(&small, CBT_EV_MP_STORE_START, "small"), CBT_OK);

    cbt_stream *tiny;
    assert_int_equal(cbt_stream_cpu_create(2, &tiny), CBT_OK);
    assert_int_equal(cbt_publish_on_stream(tiny, &big3), CBT_ERR_FULL); /* never fits */
    cbt_stream_destroy(tiny);

    cbt_stream *s;
    assert_int_equal(cbt_stream_cpu_create(4, &s), CBT_OK);
    tu_gate *g1 = tu_gate_new(), *g2 = tu_gate_new();
    tu_gate_enqueue(g1, s);                                    /* position 0 */
    tu_enqueue_sleep(s, 1);                                    /* 1 */
    tu_gate_enqueue(g2, s);                                    /* 2 */
    assert_int_equal(cbt_publish_on_stream(s, &small), CBT_OK); /* 3: full now */
    assert_int_equal(cbt_publish_on_stream(s, &small), CBT_ERR_FULL);
    tu_gate_open(g1); /* positions 0 and 1 run; the worker then holds 2 */
    for (int i = 0; i < 10000 && completed_of(s) < 2; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(completed_of(s), 2);
    struct timespec settle = {0, 20000000};
    nanosleep(&settle, NULL);
    /* slots 0 and 1 are free, slot 2 is not: 3 slots do not fit, 2 do */
    assert_int_equal(cbt_publish_on_stream(s, &big3), CBT_ERR_FULL);
    assert_int_equal(cbt_publish_on_stream(s, &big2), CBT_OK);
    assert_int_equal(cbt_publish_on_stream(s, &small), CBT_ERR_FULL);
    tu_gate_open(g2);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    assert_int_equal(cbt_publish_on_stream(s, &big3), CBT_OK); /* across the end: the slack */
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    assert_non_null(tu_event_find(CBT_EV_MP_STORE_START, "big2", 0));
    assert_non_null(tu_event_find(CBT_EV_MP_STORE_START, "big3", 0));
    assert_non_null(tu_event_find(CBT_EV_MP_STORE_START, "small", 0));
    assert_null(tu_event_find(CBT_EV_MP_STORE_START, "small", 1));
    cbt_stream_stats st = CBT_STRUCT_INIT(cbt_stream_stats);
    assert_int_equal(cbt_stream_stats_get(s, &st), CBT_OK);
    assert_int_equal(st.items_enqueued, 6);
    assert_int_equal(st.full_refusals, 3);
    assert_int_equal(st.marks_published, 3);
    cbt_stream_destroy(s);
    tu_gate_free(g1);
    tu_gate_free(g2);
    tu_stop();
}

/* Without a tracer, marks are no-ops and work still runs. */
static void no_tracer_still_runs_work(void **state)
{
    (void)state;
    assert_null(cbt_tracer_get());
    cbt_stream *s;
    assert_int_equal(cbt_stream_cpu_create(0, &s), CBT_OK);
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, CBT_EV_MP_STORE_START, "x"), CBT_OK);
    assert_int_equal(cbt_publish_on_stream(s, &e), CBT_OK);
    order_log log = {.lock = PTHREAD_MUTEX_INITIALIZER};
    order_item it = {&log, 7};
    assert_int_equal(cbt_stream_enqueue(s, log_fn, &it), CBT_OK);
    cbt_stream_sync(s);
    assert_int_equal(log.n, 1);
    assert_int_equal(log.seq[0], 7);
    cbt_stream_destroy(s);
}

/* Arguments are checked; a CUDA stream is refused cleanly without a device. */
static void bad_arguments(void **state)
{
    (void)state;
    cbt_stream *s = NULL;
    assert_int_equal(cbt_stream_cpu_create(0, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_stream_cpu_create((1u << 20) + 1, &s), CBT_ERR_INVAL);
    assert_int_equal(cbt_stream_enqueue(NULL, log_fn, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_stream_sync(NULL), CBT_ERR_INVAL);
    cbt_status st = cbt_stream_cuda_create(NULL, &s);
    assert_true(st == CBT_ERR_UNSUPPORTED || st == CBT_ERR_NO_DEVICE || st == CBT_OK);
    if (st == CBT_OK)
        cbt_stream_destroy(s);
    cbt_stream_destroy(NULL); /* ignored */
    assert_int_equal(cbt_stream_ordinal(NULL), 0);
}

/* Ordinals are distinct per stream. */
static void distinct_ordinals(void **state)
{
    (void)state;
    cbt_stream *a, *b;
    assert_int_equal(cbt_stream_cpu_create(0, &a), CBT_OK);
    assert_int_equal(cbt_stream_cpu_create(0, &b), CBT_OK);
    assert_true(cbt_stream_ordinal(a) != 0);
    assert_true(cbt_stream_ordinal(a) != cbt_stream_ordinal(b));
    assert_null(cbt_stream_cuda_handle(a));
    cbt_stream_destroy(a);
    cbt_stream_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fifo_order),
        cmocka_unit_test(marks_stamped_when_reached),
        cmocka_unit_test(full_queue_refuses),
        cmocka_unit_test(smallest_queue),
        cmocka_unit_test_teardown(large_marks_take_consecutive_slots, tu_teardown),
        cmocka_unit_test(no_tracer_still_runs_work),
        cmocka_unit_test(bad_arguments),
        cmocka_unit_test(distinct_ordinals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
