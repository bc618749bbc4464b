/* tests/test_names.c — the name table's limits (cbt/names.h) and the
 * per-thread error detail (cbt_last_error, cbt/status.h).
 *
 * One process, one table: the cases run in order and build on each other.
 * The table starts with CBT_NAMES_CAPACITY=1500 from the environment (main
 * sets it before cbt's first call), so it spans two of its 1024-entry
 * chunks before it is full.
 *   builtins_distinct_and_fixed  every built-in name (LMCache's keys, CUPTI's,
 *                                NVTX's) once, at its handle
 *   env_capacity                 CBT_NAMES_CAPACITY is the starting capacity
 *   full_refuses_counts_explains 1500 names fit, the 1501st is CBT_ERR_FULL,
 *                                counted in names_refused since cbt_init,
 *                                explained by cbt_last_error, without the
 *                                table's mutex (another thread holding it
 *                                does not hold the refusal); names already
 *                                there and every built-in one still intern
 *   capacity_raised_by_config    names_capacity raises it at cbt_init (not
 *                                lowered by a smaller one); names survive
 *                                shutdown and init with their handles
 *   concurrent_across_chunks     threads interning into new chunks while
 *                                others read: one handle per name
 *   config_errors_name_field     each rule cbt_init checks: its field in
 *                                cbt_last_error_field, the value and rule in
 *                                cbt_last_error (issue 23's lane_capacity x
 *                                max_lanes case blames lane_capacity)
 *   event_types_full_explained   the event-type table's own limit
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal/names.h"
#include "testutil.h"

#define ENV_CAPACITY 1500u

static cbt_config quiet_config(void)
{
    cbt_config c = cbt_config_default();
    c.mp_subscriber = false;
    c.ring_capacity = 0;
    c.cuda_ring_capacity = 0;
    c.lane_capacity = 64;
    return c;
}

static cbt_metrics metrics(void)
{
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m), CBT_OK);
    return m;
}

static void user_name(char *buf, size_t n, const char *prefix, unsigned i)
{
    snprintf(buf, n, "%s.%05u", prefix, i);
}

static void builtins_distinct_and_fixed(void **state)
{
    (void)state;
    static const char *const wk[] = {
#define S_(id, s) s,
        CBT_WELL_KNOWN_NAMES(S_)
#undef S_
    };
    size_t n = sizeof wk / sizeof wk[0];
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < i; j++)
            if (strcmp(wk[i], wk[j]) == 0)
                fail_msg("built-in name '%s' listed twice (handles %zu and %zu)", wk[i], j + 1,
                         i + 1);
    /* the keys issue 23 found refused once the table was full */
    static const struct {
        cbt_name h;
        const char *s;
    } lm[] = {{CBT_N_ENGINE_ID, "engine_id"},      {CBT_N_MODEL_NAME, "model_name"},
              {CBT_N_WORKER_ID, "worker_id"},      {CBT_N_TOTAL_BYTES, "total_bytes"},
              {CBT_N_KERNEL_NAME, "kernel.name"},  {CBT_N_NVTX_RANGE_ID, "nvtx.range_id"},
              {CBT_N_REQUEST, "request"},          {CBT_N_CB_SCHEDULE, "cb.schedule"}};
    for (size_t i = 0; i < sizeof lm / sizeof lm[0]; i++) {
        cbt_name h = 0;
        assert_int_equal(cbt_intern(lm[i].s, &h), CBT_OK);
        assert_int_equal(h, lm[i].h);
        assert_string_equal(cbt_name_str(h), lm[i].s);
    }
    assert_true(CBT_NAMES_CAPACITY_MAX == CBT_NAMES_MAX - (CBT_N_WELL_KNOWN_COUNT_ - 1));
}

static void env_capacity(void **state)
{
    (void)state;
    cbt_config c = quiet_config();
    assert_int_equal(cbt_init(&c), CBT_OK);
    cbt_metrics m = metrics();
    assert_int_equal(m.names_capacity, ENV_CAPACITY);
    assert_int_equal(m.names_refused, 0);
    assert_int_equal(cbt_shutdown(), CBT_OK);
}

static cbt_name g_first; /* the first name of ours: kept across the cases */

/* A new name interned on its own thread, while the test holds the table's
 * mutex: a refusal must not need it. */
typedef struct {
    cbt_status st;
    int done;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} refuse_arg;

static void *refuse_thread(void *p)
{
    refuse_arg *a = p;
    cbt_name h;
    cbt_status st = cbt_intern("refused.while.locked", &h);
    pthread_mutex_lock(&a->mu);
    a->st = st;
    a->done = 1;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static void full_refuses_counts_explains(void **state)
{
    (void)state;
    cbt_config c = quiet_config();
    assert_int_equal(cbt_init(&c), CBT_OK);
    cbt_metrics m0 = metrics();
    unsigned room = (unsigned)(m0.names_capacity - m0.names_used);
    assert_true(room > 1100); /* past one chunk's worth from here */
    char nm[48];
    for (unsigned i = 0; i < room; i++) {
        cbt_name h = 0;
        user_name(nm, sizeof nm, "full", i);
        cbt_status st = cbt_intern(nm, &h);
        if (st != CBT_OK)
            fail_msg("name %u of %u refused: %s (%s)", i, room, cbt_strerror(st),
                     cbt_last_error());
        assert_string_equal(cbt_name_str(h), nm);
        if (i == 0)
            g_first = h;
    }
    cbt_metrics m = metrics();
    assert_int_equal(m.names_used, ENV_CAPACITY);
    assert_int_equal(m.names_refused, 0);

    /* full: a new name is refused, counted and explained; *out untouched */
    cbt_name h = 4242;
    user_name(nm, sizeof nm, "full", room);
    assert_int_equal(cbt_intern(nm, &h), CBT_ERR_FULL);
    assert_int_equal(h, 4242);
    assert_int_equal(cbt_intern("another.new.one", &h), CBT_ERR_FULL);
    const char *why = cbt_last_error();
    assert_non_null(strstr(why, "1500"));
    assert_non_null(strstr(why, "names_capacity"));
    assert_non_null(strstr(why, "CBT_NAMES_CAPACITY"));
    assert_string_equal(cbt_last_error_field(), "");
    m = metrics();
    assert_int_equal(m.names_refused, 2);
    assert_int_equal(m.names_used, ENV_CAPACITY);

    /* a refusal takes no lock: one comes back on every publish carrying the
     * refused key, from every thread (the brief's no-lock publish) */
    refuse_arg ra = {.st = CBT_OK};
    pthread_mutex_init(&ra.mu, NULL);
    pthread_cond_init(&ra.cv, NULL);
    cbt_names_hold_lock_(1);
    pthread_t rt;
    assert_int_equal(pthread_create(&rt, NULL, refuse_thread, &ra), 0);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10; /* generous: a refusal is a probe and an atomic add */
    pthread_mutex_lock(&ra.mu);
    while (!ra.done && pthread_cond_timedwait(&ra.cv, &ra.mu, &until) == 0) {
    }
    int refused_unlocked = ra.done;
    pthread_mutex_unlock(&ra.mu);
    cbt_names_hold_lock_(0); /* a refusal that waited for it ends now */
    pthread_join(rt, NULL);
    if (!refused_unlocked)
        fail_msg("cbt_intern of a new name on a full table waited for the table's mutex");
    assert_int_equal(ra.st, CBT_ERR_FULL);
    assert_int_equal(metrics().names_refused, 3);
    pthread_mutex_destroy(&ra.mu);
    pthread_cond_destroy(&ra.cv);

    /* what is there still resolves, built-in names always */
    user_name(nm, sizeof nm, "full", 0);
    assert_int_equal(cbt_intern(nm, &h), CBT_OK);
    assert_int_equal(h, g_first);
    assert_int_equal(cbt_intern("engine_id", &h), CBT_OK);
    assert_int_equal(h, CBT_N_ENGINE_ID);
    assert_int_equal(cbt_intern("cbt.late", &h), CBT_OK);
    assert_int_equal(h, CBT_N_LATE);
    /* registering a type needs a new name: refused, and said why */
    cbt_event_type t = CBT_EV_INVALID;
    assert_int_equal(cbt_event_type_register("my.new.type", &t), CBT_ERR_FULL);
    assert_non_null(strstr(cbt_last_error(), "name table is full"));
    assert_int_equal(cbt_shutdown(), CBT_OK);

    /* the count is the tracer's: a new one starts from zero */
    assert_int_equal(cbt_init(&c), CBT_OK);
    assert_int_equal(metrics().names_refused, 0);
    assert_int_equal(cbt_intern("yet.another", &h), CBT_ERR_FULL);
    assert_int_equal(metrics().names_refused, 1);
    assert_int_equal(cbt_shutdown(), CBT_OK);
}

static void capacity_raised_by_config(void **state)
{
    (void)state;
    cbt_config c = quiet_config();
    c.names_capacity = 4000;
    assert_int_equal(cbt_init(&c), CBT_OK);
    cbt_metrics m = metrics();
    assert_int_equal(m.names_capacity, 4000);
    cbt_name h = 0;
    assert_int_equal(cbt_intern("yet.another", &h), CBT_OK);
    /* the handles of before the shutdown still name their strings */
    char nm[48];
    user_name(nm, sizeof nm, "full", 0);
    assert_string_equal(cbt_name_str(g_first), nm);
    assert_int_equal(cbt_shutdown(), CBT_OK);

    /* a smaller capacity does not lower it: names are never freed */
    c.names_capacity = 10;
    assert_int_equal(cbt_init(&c), CBT_OK);
    assert_int_equal(metrics().names_capacity, 4000);
    assert_int_equal(cbt_shutdown(), CBT_OK);
    /* a disabled config raises it too (publishers intern without a tracer) */
    c.enabled = false;
    c.names_capacity = 6000;
    assert_int_equal(cbt_init(&c), CBT_OK);
    c.enabled = true;
    c.names_capacity = 0;
    assert_int_equal(cbt_init(&c), CBT_OK);
    assert_int_equal(metrics().names_capacity, 6000);
    assert_int_equal(cbt_shutdown(), CBT_OK);
}

#define CC_THREADS 4
#define CC_NAMES 1500 /* two chunk boundaries from where the table is */

typedef struct cc_arg {
    int id;
    pthread_barrier_t *bar;
    cbt_name *handles;
    int errors;
} cc_arg;

static void *cc_thread(void *p)
{
    cc_arg *a = p;
    pthread_barrier_wait(a->bar);
    for (int k = 0; k < CC_NAMES; k++) {
        int i = (a->id % 2) ? (CC_NAMES - 1 - k) : (k * 7 + a->id * 13) % CC_NAMES;
        char nm[48];
        user_name(nm, sizeof nm, "cc", (unsigned)i);
        cbt_name h = 0;
        if (cbt_intern(nm, &h) != CBT_OK || h == 0 || strcmp(cbt_name_str(h), nm) != 0 ||
            cbt_name_len(h) != strlen(nm)) {
            a->errors++;
            continue;
        }
        a->handles[i] = h;
    }
    return NULL;
}

static void concurrent_across_chunks(void **state)
{
    (void)state;
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, CC_THREADS);
    static cbt_name handles[CC_THREADS][CC_NAMES];
    cc_arg args[CC_THREADS];
    pthread_t th[CC_THREADS];
    for (int i = 0; i < CC_THREADS; i++) {
        args[i] = (cc_arg){.id = i, .bar = &bar, .handles = handles[i]};
        assert_int_equal(pthread_create(&th[i], NULL, cc_thread, &args[i]), 0);
    }
    for (int i = 0; i < CC_THREADS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&bar);
    for (int t = 0; t < CC_THREADS; t++)
        assert_int_equal(args[t].errors, 0);
    for (int i = 0; i < CC_NAMES; i++) {
        for (int t = 1; t < CC_THREADS; t++)
            assert_int_equal(handles[t][i], handles[0][i]);
        for (int j = 0; j < i; j++)
            if (handles[0][j] == handles[0][i])
                fail_msg("names %d and %d share handle %u", j, i, handles[0][i]);
    }
}

typedef struct bad_case {
    const char *field;
    void (*set)(cbt_config *);
    const char *says; /* in the detail */
} bad_case;

static void q_bad(cbt_config *c) { c->queue_capacity = 100; }
static void l_bad(cbt_config *c) { c->lane_capacity = 100; }
static void ml_bad(cbt_config *c) { c->max_lanes = 300; }
/* issue 23: cbt.init(queue_capacity=1<<20, lane_capacity=1<<22) blamed max_lanes */
static void lanes_4g(cbt_config *c)
{
    c->queue_capacity = 1u << 20;
    c->lane_capacity = 1u << 22;
}
static void r_bad(cbt_config *c) { c->ring_capacity = 3; }
static void cr_bad(cbt_config *c) { c->cuda_ring_capacity = 5; }
static void rp_bad(cbt_config *c) { c->ring_placement = 9; }
static void sp_bad(cbt_config *c) { c->span_pool = 0; }
static void rc_bad(cbt_config *c) { c->registry_capacity = 1000; }
static void ms_bad(cbt_config *c) { c->max_sessions = 0; }
static void is_bad(cbt_config *c) { c->idle_sleep_ms = 0; }
static void pi_bad(cbt_config *c) { c->poll_interval_us = 0; }
static void nc_bad(cbt_config *c) { c->names_capacity = CBT_NAMES_CAPACITY_MAX + 1; }

static void *last_error_there(void *unused)
{
    (void)unused;
    return (void *)cbt_last_error();
}

static void config_errors_name_field(void **state)
{
    (void)state;
    static const bad_case cases[] = {
        {"queue_capacity", q_bad, "queue_capacity 100"},
        {"lane_capacity", l_bad, "lane_capacity 100"},
        {"max_lanes", ml_bad, "max_lanes 300 must be at most 256"},
        {"lane_capacity", lanes_4g, "lane_capacity 4194304 cells x max_lanes 64"},
        {"ring_capacity", r_bad, "ring_capacity 3"},
        {"cuda_ring_capacity", cr_bad, "cuda_ring_capacity 5"},
        {"ring_placement", rp_bad, "ring_placement 9"},
        {"span_pool", sp_bad, "span_pool 0"},
        {"registry_capacity", rc_bad, "registry_capacity 1000"},
        {"max_sessions", ms_bad, "max_sessions 0"},
        {"idle_sleep_ms", is_bad, "idle_sleep_ms 0"},
        {"poll_interval_us", pi_bad, "poll_interval_us 0"},
        {"names_capacity", nc_bad, "names_capacity"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cbt_config c = cbt_config_default();
        cases[i].set(&c);
        assert_int_equal(cbt_init(&c), CBT_ERR_INVAL);
        assert_false(cbt_enabled());
        if (strcmp(cbt_last_error_field(), cases[i].field) != 0 ||
            !strstr(cbt_last_error(), cases[i].says))
            fail_msg("case %zu: field '%s', detail '%s'; want '%s' and '%s'", i,
                     cbt_last_error_field(), cbt_last_error(), cases[i].field, cases[i].says);
    }
    /* the 4 GiB case says what would fit */
    cbt_config c = cbt_config_default();
    lanes_4g(&c);
    assert_int_equal(cbt_init(&c), CBT_ERR_INVAL);
    assert_non_null(strstr(cbt_last_error(), "16"));
    assert_non_null(strstr(cbt_last_error(), "4096 MiB"));
    assert_non_null(strstr(cbt_last_error(), "at most 524288 with max_lanes 64"));
    /* ... and so it is: the largest that fits starts */
    c.lane_capacity = 524288;
    c.mp_subscriber = false;
    c.ring_capacity = c.cuda_ring_capacity = 0;
    assert_int_equal(cbt_init(&c), CBT_OK);
    assert_string_equal(cbt_last_error(), ""); /* cleared as cbt_init starts */
    assert_int_equal(cbt_shutdown(), CBT_OK);

    /* a config from a newer cbt: the sizes, and no field */
    c = cbt_config_default();
    c.size = (uint32_t)sizeof c + 8;
    assert_int_equal(cbt_init(&c), CBT_ERR_VERSION);
    assert_non_null(strstr(cbt_last_error(), "newer cbt"));
    assert_string_equal(cbt_last_error_field(), "");

    /* per thread: another thread's failure is not this one's */
    cbt_config bad = cbt_config_default();
    q_bad(&bad);
    assert_int_equal(cbt_init(&bad), CBT_ERR_INVAL);
    char mine[256];
    snprintf(mine, sizeof mine, "%s", cbt_last_error());
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, last_error_there, NULL), 0);
    void *theirs = NULL;
    pthread_join(th, &theirs);
    assert_string_equal((const char *)theirs, "");
    assert_string_equal(cbt_last_error(), mine);
}

static void event_types_full_explained(void **state)
{
    (void)state;
    char nm[48];
    cbt_status st = CBT_OK;
    for (unsigned i = 0; i < CBT_EVENT_TYPES_MAX && st == CBT_OK; i++) {
        cbt_event_type t;
        user_name(nm, sizeof nm, "type", i);
        st = cbt_event_type_register(nm, &t);
    }
    assert_int_equal(st, CBT_ERR_FULL);
    assert_non_null(strstr(cbt_last_error(), "event-type table is full"));
}

int main(void)
{
    /* before cbt's first call: the table reads it at its first use */
    char cap[16];
    snprintf(cap, sizeof cap, "%u", ENV_CAPACITY);
    setenv("CBT_NAMES_CAPACITY", cap, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(builtins_distinct_and_fixed),
        cmocka_unit_test(env_capacity),
        cmocka_unit_test(full_refuses_counts_explains),
        cmocka_unit_test(capacity_raised_by_config),
        cmocka_unit_test(concurrent_across_chunks),
        cmocka_unit_test(config_errors_name_field),
        cmocka_unit_test(event_types_full_explained),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
