/* tests/test_events.c — building events (cbt/event.h), the event-type table
 * and the interned-name table (cbt/names.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* A string of `n` copies of `c` in buf (buf holds n + 1 bytes). */
static char *fill(char *buf, char c, size_t n)
{
    memset(buf, c, n);
    buf[n] = '\0';
    return buf;
}

static void init_copies_session(void **state)
{
    (void)state;
    cbt_event ev;
    memset(&ev, 0xa5, sizeof ev);
    assert_int_equal(cbt_event_init(&ev, CBT_EV_MP_STORE_START, "sess-1"), CBT_OK);
    assert_int_equal(ev.type, CBT_EV_MP_STORE_START);
    assert_string_equal(ev.session, "sess-1");
    assert_int_equal(ev.session_len, 6);
    assert_int_equal(ev.n_meta, 0);
    assert_int_equal(ev.flags, 0);
    assert_true(ev.ts == 0);
    assert_true(ev.pair == 0);

    /* session-less events: NULL and "" */
    memset(&ev, 0xa5, sizeof ev);
    assert_int_equal(cbt_event_init(&ev, CBT_EV_MP_REQUEST_END, NULL), CBT_OK);
    assert_int_equal(ev.type, CBT_EV_MP_REQUEST_END);
    assert_int_equal(ev.session_len, 0);
    assert_string_equal(ev.session, "");
    assert_int_equal(cbt_event_init(&ev, CBT_EV_MP_REQUEST_END, ""), CBT_OK);
    assert_int_equal(ev.session_len, 0);
    assert_string_equal(ev.session, "");

    assert_int_equal(cbt_event_init(NULL, CBT_EV_MP_REQUEST_END, "x"), CBT_ERR_INVAL);
}

static void session_length_limit(void **state)
{
    (void)state;
    char s63[64], s64[65], s200[201];
    fill(s63, 'a', 63);
    fill(s64, 'b', 64);
    fill(s200, 'c', 200);

    cbt_event ev;
    assert_int_equal(cbt_event_init(&ev, CBT_EV_MP_STORE_END, s63), CBT_OK);
    assert_int_equal(ev.session_len, 63);
    assert_int_equal(ev.type, CBT_EV_MP_STORE_END);
    assert_memory_equal(ev.session, s63, 64); /* including the NUL */

    assert_int_equal(cbt_event_init(&ev, CBT_EV_MP_STORE_END, s64), CBT_ERR_SESSION_TOO_LONG);
    assert_int_equal(ev.type, CBT_EV_INVALID);
    assert_int_equal(cbt_event_init(&ev, CBT_EV_MP_STORE_END, s200), CBT_ERR_SESSION_TOO_LONG);
    assert_int_equal(ev.type, CBT_EV_INVALID);
}

/* With a tracer: the refusal is counted, and publishing the invalid event is
 * refused and counted too. */
static void session_too_long_counted(void **state)
{
    (void)state;
    char s64[65];
    fill(s64, 'd', 64);
    tu_start(NULL);
    cbt_metrics m0 = CBT_STRUCT_INIT(cbt_metrics);
    cbt_metrics m1 = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m0), CBT_OK);
    cbt_event ev;
    assert_int_equal(cbt_event_init(&ev, CBT_EV_MP_REQUEST_START, s64), CBT_ERR_SESSION_TOO_LONG);
    assert_int_not_equal(cbt_publish(&ev), CBT_OK);
    tu_flush();
    assert_int_equal(cbt_metrics_get(&m1), CBT_OK);
    assert_int_equal(m1.session_too_long - m0.session_too_long, 1);
    assert_int_equal(m1.rejected - m0.rejected, 1);
    assert_int_equal(m1.published - m0.published, 0);
    assert_int_equal(tu_event_count(), 0);
    tu_stop();
}

static void metadata_values(void **state)
{
    (void)state;
    cbt_name ki = tu_name("ev_int"), kd = tu_name("ev_dbl"), kb = tu_name("ev_bool"),
             ks = tu_name("ev_str"), kx = tu_name("ev_absent");
    cbt_event ev;
    assert_int_equal(cbt_event_init(&ev, CBT_EV_MP_LOOKUP_PREFETCH_END, "m"), CBT_OK);
    assert_int_equal(cbt_event_i64(&ev, ki, -1234567890123LL), CBT_OK);
    assert_int_equal(cbt_event_f64(&ev, kd, 0.25), CBT_OK);
    assert_int_equal(cbt_event_bool(&ev, kb, true), CBT_OK);
    assert_int_equal(cbt_event_str(&ev, ks, "hello"), CBT_OK);
    assert_int_equal(ev.n_meta, 4);

    const cbt_meta *m = cbt_event_find(&ev, ki);
    assert_non_null(m);
    assert_int_equal(m->type, CBT_META_I64);
    assert_true(m->v.i64 == -1234567890123LL);
    m = cbt_event_find(&ev, kd);
    assert_non_null(m);
    assert_int_equal(m->type, CBT_META_F64);
    assert_true(m->v.f64 == 0.25);
    m = cbt_event_find(&ev, kb);
    assert_non_null(m);
    assert_int_equal(m->type, CBT_META_BOOL);
    assert_true(m->v.b);
    m = cbt_event_find(&ev, ks);
    assert_non_null(m);
    assert_int_equal(m->type, CBT_META_STR);
    assert_int_equal(m->len, 5);
    assert_string_equal(m->v.str, "hello");
    assert_null(cbt_event_find(&ev, kx));
    assert_null(cbt_event_find(NULL, ki));

    /* get_i64: int as is, bool as 0/1, double / string / absent -> default */
    assert_true(cbt_event_get_i64(&ev, ki, 99) == -1234567890123LL);
    assert_true(cbt_event_get_i64(&ev, kb, 99) == 1);
    assert_true(cbt_event_get_i64(&ev, kd, 99) == 99);
    assert_true(cbt_event_get_i64(&ev, ks, 99) == 99);
    assert_true(cbt_event_get_i64(&ev, kx, -5) == -5);
    assert_int_equal(cbt_event_bool(&ev, kb, false), CBT_OK);
    assert_true(cbt_event_get_i64(&ev, kb, 99) == 0);

    /* key 0 is "no name" */
    assert_int_equal(cbt_event_i64(&ev, 0, 1), CBT_ERR_INVAL);
    assert_int_equal(cbt_event_str(&ev, ks, NULL), CBT_ERR_INVAL);
    assert_int_equal(ev.n_meta, 4);
}

static void metadata_overwrite(void **state)
{
    (void)state;
    cbt_name k = tu_name("ov_key"), k2 = tu_name("ov_key2");
    cbt_event ev;
    assert_int_equal(cbt_event_init(&ev, CBT_EV_MP_STORE_END, "o"), CBT_OK);
    assert_int_equal(cbt_event_i64(&ev, k, 1), CBT_OK);
    assert_int_equal(cbt_event_i64(&ev, k2, 2), CBT_OK);
    assert_int_equal(cbt_event_i64(&ev, k, 3), CBT_OK);
    assert_int_equal(ev.n_meta, 2);
    assert_true(cbt_event_get_i64(&ev, k, 0) == 3);
    assert_true(cbt_event_get_i64(&ev, k2, 0) == 2);
    /* overwrite with another type */
    assert_int_equal(cbt_event_f64(&ev, k, 2.5), CBT_OK);
    assert_int_equal(ev.n_meta, 2);
    const cbt_meta *m = cbt_event_find(&ev, k);
    assert_non_null(m);
    assert_int_equal(m->type, CBT_META_F64);
    assert_true(m->v.f64 == 2.5);
    assert_int_equal(cbt_event_str(&ev, k, "abc"), CBT_OK);
    assert_int_equal(ev.n_meta, 2);
    m = cbt_event_find(&ev, k);
    assert_int_equal(m->type, CBT_META_STR);
    assert_string_equal(m->v.str, "abc");
    assert_int_equal(m->len, 3);
}

static void metadata_limits(void **state)
{
    (void)state;
    cbt_name keys[CBT_EVENT_META_MAX + 1];
    for (int i = 0; i <= CBT_EVENT_META_MAX; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "lim_key_%d", i);
        keys[i] = tu_name(nm);
    }
    cbt_event ev;
    assert_int_equal(cbt_event_init(&ev, CBT_EV_MP_STORE_START, "lim"), CBT_OK);
    for (int i = 0; i < CBT_EVENT_META_MAX; i++)
        assert_int_equal(cbt_event_i64(&ev, keys[i], i * 10), CBT_OK);
    assert_int_equal(ev.n_meta, CBT_EVENT_META_MAX);

    cbt_event before = ev;
    assert_int_equal(cbt_event_i64(&ev, keys[CBT_EVENT_META_MAX], 1), CBT_ERR_META_FULL);
    assert_int_equal(cbt_event_f64(&ev, keys[CBT_EVENT_META_MAX], 1.0), CBT_ERR_META_FULL);
    assert_int_equal(cbt_event_bool(&ev, keys[CBT_EVENT_META_MAX], true), CBT_ERR_META_FULL);
    assert_int_equal(cbt_event_str(&ev, keys[CBT_EVENT_META_MAX], "x"), CBT_ERR_META_FULL);
    assert_memory_equal(&before, &ev, sizeof ev);
    assert_null(cbt_event_find(&ev, keys[CBT_EVENT_META_MAX]));
    /* overwriting an existing key still works when full */
    assert_int_equal(cbt_event_i64(&ev, keys[2], 777), CBT_OK);
    assert_int_equal(ev.n_meta, CBT_EVENT_META_MAX);
    assert_true(cbt_event_get_i64(&ev, keys[2], 0) == 777);
    for (int i = 0; i < CBT_EVENT_META_MAX; i++)
        if (i != 2)
            assert_true(cbt_event_get_i64(&ev, keys[i], -1) == i * 10);

    /* strings: at most CBT_META_STR_MAX - 1 bytes */
    char s15[CBT_META_STR_MAX], s16[CBT_META_STR_MAX + 1];
    fill(s15, 'x', CBT_META_STR_MAX - 1);
    fill(s16, 'y', CBT_META_STR_MAX);
    cbt_name ks = tu_name("lim_str");
    assert_int_equal(cbt_event_init(&ev, CBT_EV_MP_STORE_START, "lim"), CBT_OK);
    assert_int_equal(cbt_event_str(&ev, ks, s15), CBT_OK);
    const cbt_meta *m = cbt_event_find(&ev, ks);
    assert_non_null(m);
    assert_int_equal(m->len, CBT_META_STR_MAX - 1);
    assert_string_equal(m->v.str, s15);
    before = ev;
    assert_int_equal(cbt_event_str(&ev, ks, s16), CBT_ERR_META_TOO_LONG);
    assert_memory_equal(&before, &ev, sizeof ev);
    cbt_name ks2 = tu_name("lim_str2");
    assert_int_equal(cbt_event_str(&ev, ks2, s16), CBT_ERR_META_TOO_LONG);
    assert_memory_equal(&before, &ev, sizeof ev);
    assert_int_equal(ev.n_meta, 1);
    /* the empty string is a valid value */
    assert_int_equal(cbt_event_str(&ev, ks2, ""), CBT_OK);
    m = cbt_event_find(&ev, ks2);
    assert_non_null(m);
    assert_int_equal(m->len, 0);
}

static void builtin_type_names(void **state)
{
    (void)state;
    static const struct {
        cbt_event_type id;
        const char *name;
    } expect[] = {
#define X_(n) {CBT_EV_##n, #n},
        CBT_BUILTIN_EVENTS(X_)
#undef X_
    };
    size_t n = sizeof expect / sizeof expect[0];
    assert_int_equal(n, CBT_EV_BUILTIN_COUNT_ - 1);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(expect[i].id, i + 1); /* ids are dense from 1 */
        const char *got = cbt_event_type_name(expect[i].id);
        assert_non_null(got);
        assert_string_equal(got, expect[i].name);
        assert_true(cbt_event_type_valid(expect[i].id));
    }
    assert_string_equal(cbt_event_type_name(CBT_EV_MP_STORE_START), "MP_STORE_START");
    assert_string_equal(cbt_event_type_name(CBT_EV_MP_REQUEST_END), "MP_REQUEST_END");
    assert_string_equal(cbt_event_type_name(CBT_EV_MP_RETRIEVE_SUBMITTED),
                        "MP_RETRIEVE_SUBMITTED");
    assert_string_equal(cbt_event_type_name(CBT_EV_L2_LOAD_TASK_COMPLETED),
                        "L2_LOAD_TASK_COMPLETED");
    assert_null(cbt_event_type_name(CBT_EV_INVALID));
    assert_false(cbt_event_type_valid(CBT_EV_INVALID));
    assert_null(cbt_event_type_name(CBT_EVENT_TYPES_MAX - 1));
    assert_false(cbt_event_type_valid(CBT_EVENT_TYPES_MAX - 1));
    assert_false(cbt_event_type_valid(CBT_EVENT_TYPES_MAX + 5));
}

static void type_register(void **state)
{
    (void)state;
    cbt_event_type a = 0, a2 = 0, b = 0, bi = 0;
    assert_false(cbt_event_type_valid(CBT_EV_BUILTIN_COUNT_ + 40));
    assert_int_equal(cbt_event_type_register("L1_READ_RESERVED", &a), CBT_OK);
    assert_true(a >= CBT_EV_BUILTIN_COUNT_);
    assert_true(cbt_event_type_valid(a));
    assert_string_equal(cbt_event_type_name(a), "L1_READ_RESERVED");
    assert_int_equal(cbt_event_type_register("L1_READ_RESERVED", &a2), CBT_OK);
    assert_int_equal(a2, a);
    assert_int_equal(cbt_event_type_register("L1_READ_FINISHED", &b), CBT_OK);
    assert_int_not_equal(b, a);
    assert_true(b >= CBT_EV_BUILTIN_COUNT_);
    assert_string_equal(cbt_event_type_name(b), "L1_READ_FINISHED");
    assert_string_equal(cbt_event_type_name(a), "L1_READ_RESERVED");
    /* a built-in name returns the built-in id */
    assert_int_equal(cbt_event_type_register("MP_STORE_START", &bi), CBT_OK);
    assert_int_equal(bi, CBT_EV_MP_STORE_START);
    assert_int_equal(cbt_event_type_register("CB_REQUEST_END", &bi), CBT_OK);
    assert_int_equal(bi, CBT_EV_CB_REQUEST_END);
    /* refusals */
    assert_int_equal(cbt_event_type_register(NULL, &bi), CBT_ERR_INVAL);
    assert_int_equal(cbt_event_type_register("", &bi), CBT_ERR_INVAL);
    assert_int_equal(cbt_event_type_register("X_TYPE", NULL), CBT_ERR_INVAL);

    /* a registered type can be published and is dispatched */
    tu_start(NULL);
    tu_pub(a, "reg-sess");
    tu_flush();
    const tu_event *e = tu_event_find(a, "reg-sess", 0);
    assert_non_null(e);
    assert_int_equal(e->type, a);
    tu_stop();
}

static void intern_basics(void **state)
{
    (void)state;
    cbt_name a = 0, b = 0, c = 0;
    assert_int_equal(cbt_intern("my.custom.name", &a), CBT_OK);
    assert_int_not_equal(a, 0);
    assert_int_equal(cbt_intern("my.custom.name", &b), CBT_OK);
    assert_int_equal(a, b);
    assert_int_equal(cbt_intern("my.custom.other", &c), CBT_OK);
    assert_int_not_equal(a, c);
    assert_string_equal(cbt_name_str(a), "my.custom.name");
    assert_int_equal(cbt_name_len(a), strlen("my.custom.name"));
    assert_string_equal(cbt_name_str(c), "my.custom.other");
    /* a fresh handle is past the well-known ones */
    assert_true(a >= CBT_N_WELL_KNOWN_COUNT_);

    /* well-known names have fixed handles */
    assert_string_equal(cbt_name_str(CBT_N_REQUEST), "request");
    assert_string_equal(cbt_name_str(CBT_N_MP_STORE), "mp.store");
    assert_string_equal(cbt_name_str(CBT_N_MP_RETRIEVE), "mp.retrieve");
    assert_string_equal(cbt_name_str(CBT_N_MP_LOOKUP_PREFETCH), "mp.lookup_prefetch");
    assert_string_equal(cbt_name_str(CBT_N_SESSION_ID), "session_id");
    assert_string_equal(cbt_name_str(CBT_N_HIT_RATE), "hit_rate");
    static const struct {
        cbt_name id;
        const char *s;
    } wk[] = {
#define X_(id, s) {CBT_N_##id, s},
        CBT_WELL_KNOWN_NAMES(X_)
#undef X_
    };
    for (size_t i = 0; i < sizeof wk / sizeof wk[0]; i++) {
        cbt_name h = 0;
        assert_int_equal(wk[i].id, i + 1);
        assert_string_equal(cbt_name_str(wk[i].id), wk[i].s);
        assert_int_equal(cbt_name_len(wk[i].id), strlen(wk[i].s));
        assert_int_equal(cbt_intern(wk[i].s, &h), CBT_OK);
        assert_int_equal(h, wk[i].id);
    }

    /* unknown handles */
    assert_string_equal(cbt_name_str(0), "");
    assert_int_equal(cbt_name_len(0), 0);
    assert_string_equal(cbt_name_str(CBT_NAMES_MAX - 1), "");
    assert_int_equal(cbt_name_len(CBT_NAMES_MAX - 1), 0);

    /* limits */
    char s63[64], s64[65];
    fill(s63, 'n', 63);
    fill(s64, 'm', 64);
    cbt_name h63 = 0, h = 0;
    assert_int_equal(cbt_intern(s63, &h63), CBT_OK);
    assert_int_not_equal(h63, 0);
    assert_string_equal(cbt_name_str(h63), s63);
    assert_int_equal(cbt_name_len(h63), 63);
    h = 4242;
    assert_int_not_equal(cbt_intern(s64, &h), CBT_OK);
    assert_int_equal(cbt_intern(s64, &h), CBT_ERR_META_TOO_LONG);
    assert_int_equal(cbt_intern("", &h), CBT_ERR_INVAL);
    assert_int_equal(cbt_intern(NULL, &h), CBT_ERR_INVAL);
    assert_int_equal(cbt_intern("x", NULL), CBT_ERR_INVAL);
    assert_int_equal(h, 4242); /* untouched by refusals */
}

#define CI_THREADS 4
#define CI_NAMES 200

typedef struct ci_arg {
    int id;
    pthread_barrier_t *bar;
    cbt_name handles[CI_NAMES];
    int errors;
} ci_arg;

static void ci_name(char *buf, size_t n, int i) { snprintf(buf, n, "concurrent.name.%03d", i); }

static void *ci_thread(void *p)
{
    ci_arg *a = p;
    pthread_barrier_wait(a->bar);
    /* each thread walks the names in its own order */
    for (int k = 0; k < CI_NAMES; k++) {
        int i = (a->id % 2) ? (CI_NAMES - 1 - k) : (k * 7 + a->id * 13) % CI_NAMES;
        char nm[48];
        ci_name(nm, sizeof nm, i);
        cbt_name h = 0;
        if (cbt_intern(nm, &h) != CBT_OK || h == 0) {
            a->errors++;
            continue;
        }
        /* a reader on another thread sees the string at once */
        if (strcmp(cbt_name_str(h), nm) != 0)
            a->errors++;
        a->handles[i] = h;
    }
    return NULL;
}

static void intern_concurrent(void **state)
{
    (void)state;
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, CI_THREADS);
    static ci_arg args[CI_THREADS];
    pthread_t th[CI_THREADS];
    for (int i = 0; i < CI_THREADS; i++) {
        memset(&args[i], 0, sizeof args[i]);
        args[i].id = i;
        args[i].bar = &bar;
        assert_int_equal(pthread_create(&th[i], NULL, ci_thread, &args[i]), 0);
    }
    for (int i = 0; i < CI_THREADS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&bar);
    /* (7k + 13 id) mod 200 covers every index since gcd(7, 200) = 1 */
    for (int t = 0; t < CI_THREADS; t++)
        assert_int_equal(args[t].errors, 0);
    for (int i = 0; i < CI_NAMES; i++) {
        assert_int_not_equal(args[0].handles[i], 0);
        for (int t = 1; t < CI_THREADS; t++)
            assert_int_equal(args[t].handles[i], args[0].handles[i]);
        char nm[48];
        ci_name(nm, sizeof nm, i);
        assert_string_equal(cbt_name_str(args[0].handles[i]), nm);
        cbt_name again = 0;
        assert_int_equal(cbt_intern(nm, &again), CBT_OK);
        assert_int_equal(again, args[0].handles[i]);
        /* distinct strings, distinct handles */
        for (int j = 0; j < i; j++)
            assert_int_not_equal(args[0].handles[j], args[0].handles[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(init_copies_session),
        cmocka_unit_test(session_length_limit),
        cmocka_unit_test(session_too_long_counted),
        cmocka_unit_test(metadata_values),
        cmocka_unit_test(metadata_overwrite),
        cmocka_unit_test(metadata_limits),
        cmocka_unit_test(builtin_type_names),
        cmocka_unit_test(type_register),
        cmocka_unit_test(intern_basics),
        cmocka_unit_test(intern_concurrent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
