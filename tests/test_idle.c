/* tests/test_idle.c — the harvester's deep sleep (host/core/harvester.c,
 * "Sleeping"): once idle it sleeps on a futex for up to idle_sleep_ms, and
 * whatever it must see — a publish into a lane or the shared bus, a flush,
 * shutdown — wakes it at once.
 *
 * Each test sets idle_sleep_ms to 30 s, so a lost wake-up would hold an
 * event, a flush or a shutdown for up to 30 s; the bounds below (2–10 s) are
 * generous for a prompt wake and fail for a lost one. Nothing else here
 * measures time.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal/tracer.h"
#include "testutil.h"

#define LONG_SLEEP_MS 30000u

static void sleep_ms(uint32_t ms)
{
    struct timespec d = {.tv_sec = ms / 1000u, .tv_nsec = (long)(ms % 1000u) * 1000000L};
    nanosleep(&d, NULL);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static cbt_metrics metrics(void)
{
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m), CBT_OK);
    return m;
}

/* Events counted per publishing thread (the event's pair), by a subscriber
 * on the harvester. */
#define MAX_PUB 8
static _Atomic uint64_t g_seen[MAX_PUB];
static cbt_event_type g_type;

static cbt_status count_event(void *ctx, cbt_tracer *t, const cbt_event *ev)
{
    (void)ctx;
    (void)t;
    if (ev->pair < MAX_PUB)
        atomic_fetch_add_explicit(&g_seen[ev->pair], 1, memory_order_relaxed);
    return CBT_OK;
}

static void start(uint32_t max_lanes)
{
    if (!g_type)
        assert_int_equal(cbt_event_type_register("TEST_IDLE", &g_type), CBT_OK);
    for (int i = 0; i < MAX_PUB; i++)
        atomic_store(&g_seen[i], 0);
    cbt_config c = cbt_config_default();
    c.mp_subscriber = false;
    c.idle_sleep_ms = LONG_SLEEP_MS;
    c.max_lanes = max_lanes;
    /* no kernel rings: with one, the sleep is capped at 250 ms (records
     * need no publish) and a lost wake-up would cost only that */
    c.ring_capacity = 0;
    c.cuda_ring_capacity = 0;
    tu_start(&c);
    cbt_subscriber s;
    memset(&s, 0, sizeof s);
    s.version = CBT_SUBSCRIBER_VERSION;
    s.size = sizeof s;
    s.name = "idle-count";
    s.on_event = count_event;
    cbt_subscriber_want(&s, g_type);
    assert_int_equal(cbt_add_subscriber(&s), CBT_OK);
}

static cbt_status publish_one(uint64_t who)
{
    cbt_event e;
    cbt_event_init(&e, g_type, "idle");
    e.pair = who;
    return cbt_publish(&e);
}

/* Wait until publisher `who` has had `n` events dispatched; 1 if within ms. */
static int wait_seen(uint64_t who, uint64_t n, uint32_t ms)
{
    double end = now_s() + ms * 1e-3;
    while (atomic_load_explicit(&g_seen[who], memory_order_relaxed) < n) {
        if (now_s() > end)
            return 0;
        sleep_ms(1);
    }
    return 1;
}

/* A publish to a harvester in its long sleep is dispatched at once, without
 * a flush (a flush would wake it by itself), and counts a wake-up. */
static void publish_wakes_sleeping_harvester(void **state)
{
    (void)state;
    start(4);
    assert_int_equal(publish_one(0), CBT_OK);
    assert_true(wait_seen(0, 1, 2000)); /* the first lane's own path */
    for (int round = 0; round < 3; round++) {
        sleep_ms(300); /* > IDLE_AFTER_US: the harvester is in its 30 s sleep */
        uint64_t woken = metrics().harvester_wakeups;
        assert_int_equal(publish_one(0), CBT_OK);
        assert_true(wait_seen(0, (uint64_t)round + 2, 2000));
        assert_true(metrics().harvester_wakeups > woken);
    }
    tu_stop();
}

/* cbt_flush wakes it: a flush after an idle period completes at once. */
static void flush_wakes_sleeping_harvester(void **state)
{
    (void)state;
    start(4);
    assert_int_equal(cbt_flush(2000), CBT_OK);
    sleep_ms(300);
    assert_int_equal(cbt_flush(2000), CBT_OK);
    assert_int_equal(publish_one(1), CBT_OK);
    sleep_ms(300);
    assert_int_equal(cbt_flush(2000), CBT_OK);
    assert_true(atomic_load(&g_seen[1]) == 1);
    tu_stop();
}

static void *bus_thread(void *arg)
{
    (void)arg;
    publish_one(3);
    return NULL;
}

/* A thread with no lane publishes into the shared bus: that wakes it too. */
static void bus_publish_wakes_sleeping_harvester(void **state)
{
    (void)state;
    start(1);
    assert_int_equal(publish_one(2), CBT_OK); /* takes the one lane */
    assert_true(wait_seen(2, 1, 2000));
    sleep_ms(300);
    pthread_t th; /* a second thread finds no lane left: the shared bus */
    assert_int_equal(pthread_create(&th, NULL, bus_thread, NULL), 0);
    pthread_join(th, NULL);
    assert_true(wait_seen(3, 1, 2000));
    assert_true(metrics().lanes == 1);
    tu_stop();
}

/* cbt_shutdown wakes it: shutdown of an idle tracer does not wait 30 s. */
static void shutdown_wakes_sleeping_harvester(void **state)
{
    (void)state;
    start(4);
    sleep_ms(300);
    double t0 = now_s();
    tu_stop();
    assert_true(now_s() - t0 < 10.0);
}

/* Several threads publish sporadically — a burst, wait until the harvester
 * has dispatched it, then a pause long enough for it to go to sleep — with
 * two of them past max_lanes on the shared bus. Every burst is dispatched
 * within a bound far below the 30 s sleep, so no wake-up was lost, and in
 * the end every event reached the subscriber and nothing was dropped. */
#define STRESS_THREADS 4
#define STRESS_BURSTS 60

typedef struct stress_arg {
    uint64_t who;
    uint64_t sent;
    int late; /* a burst not dispatched within the bound */
} stress_arg;

static pthread_barrier_t g_bar; /* the threads' common long pauses */

static void *stress_thread(void *p)
{
    stress_arg *a = p;
    unsigned seed = (unsigned)a->who * 7919u + 1u;
    for (int b = 0; b < STRESS_BURSTS; b++) { /* on when late: the others wait at the barrier */
        int n = 1 + (int)(rand_r(&seed) % 8);
        for (int i = 0; i < n; i++)
            if (publish_one(a->who) == CBT_OK)
                a->sent++;
        if (!wait_seen(a->who, a->sent, 5000))
            a->late = 1;
        /* 0–5 ms: within a nap's reach; every 8th pause, all threads
         * together, 140–180 ms: past IDLE_AFTER_US (100 ms), where the
         * harvester goes to sleep deeply and the next burst must wake it */
        if (b % 8 == 7) {
            pthread_barrier_wait(&g_bar);
            sleep_ms(140u + (uint32_t)(rand_r(&seed) % 41));
        } else {
            sleep_ms((uint32_t)(rand_r(&seed) % 6));
        }
    }
    return NULL;
}

static void sporadic_publishers_all_dispatched(void **state)
{
    (void)state;
    start(2);
    pthread_barrier_init(&g_bar, NULL, STRESS_THREADS);
    pthread_t th[STRESS_THREADS];
    stress_arg a[STRESS_THREADS];
    for (int i = 0; i < STRESS_THREADS; i++) {
        a[i] = (stress_arg){.who = (uint64_t)i + 4, .sent = 0, .late = 0};
        assert_int_equal(pthread_create(&th[i], NULL, stress_thread, &a[i]), 0);
    }
    uint64_t total = 0;
    for (int i = 0; i < STRESS_THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_false(a[i].late);
        total += a[i].sent;
    }
    cbt_metrics m = metrics();
    assert_int_equal(m.dropped_full, 0);
    assert_int_equal(m.published, total);
    uint64_t seen = 0;
    for (int i = 0; i < STRESS_THREADS; i++)
        seen += atomic_load(&g_seen[a[i].who]);
    assert_int_equal(seen, total);
    assert_true(m.harvester_wakeups > 0);
    pthread_barrier_destroy(&g_bar);
    tu_stop();
}

/* Steady state: a thread publishing every 4 ms (250 events/s, a paced
 * server) never wakes the harvester — it naps on its own timer while work
 * flows, and publishers react only to the deep sleep it takes after 100 ms
 * with nothing to do — so a publish makes no system call (cbt.h, "Costs").
 * The first publish may wake the harvester from the sleep it started in;
 * from the 25th on (100 ms in) the wake-up count must not move. */
static void paced_publisher_never_wakes_harvester(void **state)
{
    (void)state;
    start(4);
    sleep_ms(300); /* asleep deeply: the first publish wakes it */
    uint64_t before = 0;
    for (int i = 0; i < 275; i++) {
        if (i == 25) {
            assert_true(wait_seen(0, 25, 5000));
            before = metrics().harvester_wakeups;
        }
        assert_int_equal(publish_one(0), CBT_OK);
        sleep_ms(4);
    }
    uint64_t after = metrics().harvester_wakeups;
    assert_true(wait_seen(0, 275, 5000));
    if (after != before)
        fail_msg("a paced publisher woke the harvester %llu times in 250 publishes",
                 (unsigned long long)(after - before));
    tu_stop();
}

/* The re-armed sleep (harvester.c, idle_sleep): a futex wait that returns
 * with the word still set re-sleeps without a new membarrier. Signals with
 * no SA_RESTART interrupt the harvester's wait every 0-3 ms (as a timeout
 * would) while sporadic publishers run: every burst is still dispatched
 * well inside the 30 s sleep, so no wake-up was lost on that path. */
static void on_usr1(int sig) { (void)sig; }

typedef struct storm_arg {
    pthread_t target;
    _Atomic int stop;
} storm_arg;

static void *storm_thread(void *p)
{
    storm_arg *a = p;
    unsigned seed = 99u;
    while (!atomic_load(&a->stop)) {
        pthread_kill(a->target, SIGUSR1);
        sleep_ms((uint32_t)(rand_r(&seed) % 4));
    }
    return NULL;
}

static void rearmed_sleep_loses_no_wakeup(void **state)
{
    (void)state;
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1; /* no SA_RESTART: the futex wait returns EINTR */
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
    start(2);
    storm_arg st = {.target = cbt_tracer_get()->harvester, .stop = 0};
    pthread_t storm;
    assert_int_equal(pthread_create(&storm, NULL, storm_thread, &st), 0);
    pthread_t th[STRESS_THREADS];
    stress_arg a[STRESS_THREADS];
    for (int i = 0; i < STRESS_THREADS; i++) {
        a[i] = (stress_arg){.who = (uint64_t)i + 4, .sent = 0, .late = 0};
        assert_int_equal(pthread_create(&th[i], NULL, stress_thread, &a[i]), 0);
    }
    int late = 0;
    for (int i = 0; i < STRESS_THREADS; i++) {
        pthread_join(th[i], NULL);
        late |= a[i].late;
    }
    atomic_store(&st.stop, 1);
    pthread_join(storm, NULL);
    tu_stop();
    sigaction(SIGUSR1, &old, NULL);
    assert_false(late);
}

/* A launch whose ring records never come (its kernel failed after the
 * launch event) keeps the harvester polling for 1 s at most, not forever:
 * afterwards it sleeps, and a publish wakes it (counted). With the default
 * rings, so the sleep is the ring-bounded one. */
static void unfinished_launch_lets_harvester_sleep(void **state)
{
    (void)state;
    if (!g_type)
        assert_int_equal(cbt_event_type_register("TEST_IDLE", &g_type), CBT_OK);
    cbt_config c = cbt_config_default();
    c.mp_subscriber = false;
    tu_start(&c);
    cbt_launch_info li = cbt_launch_info_default(CBT_KOP_SCATTER, 4);
    cbt_kspan sp;
    assert_int_equal(cbt_launch_begin(NULL, "stuck", &li, &sp), CBT_OK);
    /* the kernel never runs: no ring records */
    sleep_ms(1500);
    int woke = 0;
    for (int i = 0; i < 5 && !woke; i++) {
        uint64_t w = metrics().harvester_wakeups;
        assert_int_equal(publish_one(0), CBT_OK);
        assert_int_equal(cbt_flush(2000), CBT_OK);
        woke = metrics().harvester_wakeups > w;
        sleep_ms(300);
    }
    assert_true(woke);
    tu_stop();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(publish_wakes_sleeping_harvester, tu_teardown),
        cmocka_unit_test_teardown(flush_wakes_sleeping_harvester, tu_teardown),
        cmocka_unit_test_teardown(bus_publish_wakes_sleeping_harvester, tu_teardown),
        cmocka_unit_test_teardown(shutdown_wakes_sleeping_harvester, tu_teardown),
        cmocka_unit_test_teardown(sporadic_publishers_all_dispatched, tu_teardown),
        cmocka_unit_test_teardown(paced_publisher_never_wakes_harvester, tu_teardown),
        cmocka_unit_test_teardown(rearmed_sleep_loses_no_wakeup, tu_teardown),
        cmocka_unit_test_teardown(unfinished_launch_lets_harvester_sleep, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
