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
    size_t len = 0;
    assert_string_equal(cbt_event_meta_str(&ev, m, &len), "hello");
    assert_int_equal(len, 5);
    assert_string_equal(cbt_event_get_str(&ev, ks, NULL), "hello");
    assert_null(cbt_event_get_str(&ev, ki, &len)); /* not a string */
    assert_int_equal(len, 0);
    assert_null(cbt_event_get_str(&ev, kx, NULL)); /* absent */
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
    size_t len = 0;
    assert_string_equal(cbt_event_meta_str(&ev, m, &len), "abc");
    assert_int_equal(len, 3);
    /* a long string over it goes to the area, and a short one over that
     * gives the area's bytes back (it was the last there) */
    const char *long1 = "a string value longer than fifteen";
    assert_int_equal(cbt_event_str(&ev, k, long1), CBT_OK);
    assert_int_equal(ev.n_meta, 2);
    assert_int_equal(ev.str_used, strlen(long1) + 1);
    assert_string_equal(cbt_event_get_str(&ev, k, &len), long1);
    assert_int_equal(len, strlen(long1));
    assert_int_equal(cbt_event_str(&ev, k, "short"), CBT_OK);
    assert_int_equal(ev.str_used, 0);
    assert_string_equal(cbt_event_get_str(&ev, k, NULL), "short");
    /* and an i64 over a long one does too */
    assert_int_equal(cbt_event_str(&ev, k2, long1), CBT_OK);
    assert_int_equal(cbt_event_i64(&ev, k2, 9), CBT_OK);
    assert_int_equal(ev.str_used, 0);
    assert_true(cbt_event_get_i64(&ev, k2, 0) == 9);
    assert_null(cbt_event_get_str(&ev, k2, NULL));
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

    /* a 17th long string is refused the same way, nothing copied */
    char s300[301];
    fill(s300, 's', 300);
    assert_int_equal(cbt_event_str(&ev, keys[CBT_EVENT_META_MAX], s300), CBT_ERR_META_FULL);
    assert_int_equal(ev.str_used, 0);
    assert_int_equal(ev.n_meta, CBT_EVENT_META_MAX);

    /* strings: up to 15 characters inside the value, longer ones in the area */
    char s15[CBT_META_INLINE_MAX], s16[CBT_META_INLINE_MAX + 1];
    fill(s15, 'x', CBT_META_INLINE_MAX - 1);
    fill(s16, 'y', CBT_META_INLINE_MAX);
    cbt_name ks = tu_name("lim_str"), ks2 = tu_name("lim_str2");
    assert_int_equal(cbt_event_init(&ev, CBT_EV_MP_STORE_START, "lim"), CBT_OK);
    assert_int_equal(cbt_event_str(&ev, ks, s15), CBT_OK);
    const cbt_meta *m = cbt_event_find(&ev, ks);
    assert_non_null(m);
    assert_int_equal(m->len, CBT_META_INLINE_MAX - 1);
    assert_int_equal(m->area_len, 0);
    assert_int_equal(ev.str_used, 0);
    size_t len = 0;
    assert_string_equal(cbt_event_meta_str(&ev, m, &len), s15);
    assert_int_equal(len, 15);
    assert_string_equal(cbt_event_meta_str(NULL, m, NULL), s15); /* inline: no event needed */
    assert_int_equal(cbt_event_str(&ev, ks2, s16), CBT_OK);
    m = cbt_event_find(&ev, ks2);
    assert_int_equal(m->area_len, 16);
    assert_int_equal(m->len, 0);
    assert_string_equal(m->v.str, ""); /* a reader of the union sees nothing */
    assert_int_equal(ev.str_used, 17);
    assert_string_equal(cbt_event_get_str(&ev, ks2, &len), s16);
    assert_int_equal(len, 16);
    assert_null(cbt_event_meta_str(NULL, m, &len)); /* in the area: needs its event */
    assert_int_equal(len, 0);
    /* the empty string is a valid value */
    cbt_name ks3 = tu_name("lim_str3");
    assert_int_equal(cbt_event_str(&ev, ks3, ""), CBT_OK);
    assert_string_equal(cbt_event_get_str(&ev, ks3, &len), "");
    assert_int_equal(len, 0);
}

/* 16 values and long strings: 256 bytes and up to CBT_META_STR_MAX - 1
 * stored whole; longer, or past what is left of the area, cut with the
 * marker and counted; refused only when not even the marker fits; a refusal
 * leaves the event as it was. */
static void long_strings_and_truncation(void **state)
{
    (void)state;
    tu_start(NULL);
    cbt_metrics m0 = CBT_STRUCT_INIT(cbt_metrics), m1 = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m0), CBT_OK);
    const size_t mark = strlen(CBT_META_TRUNC_MARK);
    assert_int_equal(mark, 14);
    cbt_name k[CBT_EVENT_META_MAX + 1];
    for (int i = 0; i <= CBT_EVENT_META_MAX; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "long_key_%d", i);
        k[i] = tu_name(nm);
    }
    static char s256[257], smax[CBT_META_STR_MAX], s2000[2001], s5000[5001];
    fill(s256, 'a', 256);
    fill(smax, 'b', CBT_META_STR_MAX - 1);
    fill(s2000, 'c', 2000);
    for (size_t i = 0; i < 5000; i++)
        s5000[i] = (char)('A' + i % 26);
    s5000[5000] = '\0';

    cbt_event ev;
    size_t len = 0;
    assert_int_equal(cbt_event_init(&ev, CBT_EV_TIMEOUT_RAISED, "long"), CBT_OK);
    /* 256 bytes and 1023 bytes: whole */
    assert_int_equal(cbt_event_str(&ev, k[0], s256), CBT_OK);
    assert_string_equal(cbt_event_get_str(&ev, k[0], &len), s256);
    assert_int_equal(len, 256);
    assert_int_equal(cbt_event_str(&ev, k[1], smax), CBT_OK);
    assert_string_equal(cbt_event_get_str(&ev, k[1], &len), smax);
    assert_int_equal(len, CBT_META_STR_MAX - 1);
    assert_int_equal(ev.str_used, 257 + CBT_META_STR_MAX);
    assert_int_equal(cbt_metrics_get(&m1), CBT_OK);
    assert_true(m1.meta_truncated == m0.meta_truncated);

    /* a stack trace of 5000 bytes: what is left of the area (767 bytes, the
     * NUL included) holds its first 752 and the marker */
    size_t left = CBT_EVENT_STR_AREA - ev.str_used;
    assert_int_equal(cbt_event_str(&ev, k[2], s5000), CBT_OK);
    const char *v = cbt_event_get_str(&ev, k[2], &len);
    assert_non_null(v);
    assert_int_equal(len, left - 1);
    assert_memory_equal(v, s5000, left - 1 - mark);
    assert_string_equal(v + left - 1 - mark, CBT_META_TRUNC_MARK);
    assert_int_equal(ev.str_used, CBT_EVENT_STR_AREA);
    assert_int_equal(cbt_metrics_get(&m1), CBT_OK);
    assert_true(m1.meta_truncated == m0.meta_truncated + 1);

    /* the area is full: a long string is refused, the event unchanged; a
     * short one still fits in its value */
    cbt_event before = ev;
    assert_int_equal(cbt_event_str(&ev, k[3], s256), CBT_ERR_META_TOO_LONG);
    assert_memory_equal(&before, &ev, sizeof ev);
    assert_int_equal(cbt_event_str(&ev, k[3], "fits inline"), CBT_OK);
    assert_string_equal(cbt_event_get_str(&ev, k[3], NULL), "fits inline");
    /* the earlier ones are intact */
    assert_string_equal(cbt_event_get_str(&ev, k[0], NULL), s256);
    assert_string_equal(cbt_event_get_str(&ev, k[1], NULL), smax);
    /* 16 values in all, the 17th refused */
    for (int i = 4; i < CBT_EVENT_META_MAX; i++)
        assert_int_equal(cbt_event_i64(&ev, k[i], i), CBT_OK);
    assert_int_equal(ev.n_meta, CBT_EVENT_META_MAX);
    assert_int_equal(cbt_event_i64(&ev, k[CBT_EVENT_META_MAX], 1), CBT_ERR_META_FULL);

    /* one longer than CBT_META_STR_MAX - 1 is cut to it, even with room */
    assert_int_equal(cbt_event_init(&ev, CBT_EV_TIMEOUT_RAISED, "long"), CBT_OK);
    assert_int_equal(cbt_event_str(&ev, k[0], s2000), CBT_OK);
    v = cbt_event_get_str(&ev, k[0], &len);
    assert_int_equal(len, CBT_META_STR_MAX - 1);
    assert_memory_equal(v, s2000, CBT_META_STR_MAX - 1 - mark);
    assert_string_equal(v + CBT_META_STR_MAX - 1 - mark, CBT_META_TRUNC_MARK);
    assert_int_equal(ev.str_used, CBT_META_STR_MAX);

    /* exactly the marker's room left (15 bytes): the marker alone; one byte
     * less: refused */
    assert_int_equal(cbt_event_init(&ev, CBT_EV_TIMEOUT_RAISED, "long"), CBT_OK);
    assert_int_equal(cbt_event_str(&ev, k[0], smax), CBT_OK);
    char fill_to[CBT_META_STR_MAX];
    size_t n = CBT_EVENT_STR_AREA - CBT_META_STR_MAX - (mark + 1) - 1;
    fill(fill_to, 'f', n);
    assert_int_equal(cbt_event_str(&ev, k[1], fill_to), CBT_OK);
    assert_int_equal(CBT_EVENT_STR_AREA - ev.str_used, mark + 1);
    before = ev;
    assert_int_equal(cbt_event_str(&ev, k[2], s256), CBT_OK);
    assert_string_equal(cbt_event_get_str(&ev, k[2], NULL), CBT_META_TRUNC_MARK);
    assert_int_equal(ev.str_used, CBT_EVENT_STR_AREA);
    ev = before;
    ev.str_used++; /* 14 left */
    before = ev;
    assert_int_equal(cbt_event_str(&ev, k[2], s256), CBT_ERR_META_TOO_LONG);
    assert_memory_equal(&before, &ev, sizeof ev);

    /* a cut never splits a UTF-8 character: 3-byte characters (U+20AC),
     * cut where the kept prefix would end inside one */
    static char euro[3 * 400 + 1];
    for (int i = 0; i < 400; i++)
        memcpy(euro + 3 * i, "\xe2\x82\xac", 3);
    euro[1200] = '\0';
    assert_int_equal(cbt_event_init(&ev, CBT_EV_TIMEOUT_RAISED, "utf8"), CBT_OK);
    assert_int_equal(cbt_event_str(&ev, k[0], euro), CBT_OK);
    v = cbt_event_get_str(&ev, k[0], &len);
    /* room for 1023 - 14 = 1009 prefix bytes: 336 whole characters (1008) */
    assert_int_equal(len, 1008 + mark);
    assert_memory_equal(v, euro, 1008);
    assert_string_equal(v + 1008, CBT_META_TRUNC_MARK);

    assert_int_equal(cbt_metrics_get(&m1), CBT_OK);
    assert_true(m1.meta_truncated == m0.meta_truncated + 4);
    tu_stop();
}

/* cbt_event_init writes the header only (the event is 2.6 KiB), and the
 * readers never go past n_meta and str_used: garbage in the rest is never
 * seen. A value that names bytes outside the used area is no string. */
static void init_sets_header_only(void **state)
{
    (void)state;
    cbt_event ev;
    memset(&ev, 0xa5, sizeof ev);
    assert_int_equal(cbt_event_init(&ev, CBT_EV_MP_STORE_START, "h"), CBT_OK);
    assert_int_equal(ev.n_meta, 0);
    assert_int_equal(ev.str_used, 0);
    /* the values and the area were not written */
    assert_int_equal((unsigned char)ev.str[0], 0xa5);
    assert_int_equal((unsigned char)ev.str[CBT_EVENT_STR_AREA - 1], 0xa5);
    assert_int_equal(((unsigned char *)ev.meta)[0], 0xa5);
    assert_null(cbt_event_find(&ev, tu_name("never_set")));
    cbt_name k = tu_name("hdr_key");
    assert_int_equal(cbt_event_str(&ev, k, "a long enough string value"), CBT_OK);
    cbt_meta *m = &ev.meta[0];
    size_t len = 9;
    /* forged: past the used area, or no NUL where it should end */
    m->area_len = 100;
    assert_null(cbt_event_meta_str(&ev, m, &len));
    assert_int_equal(len, 0);
    m->area_len = 26;
    assert_non_null(cbt_event_meta_str(&ev, m, NULL));
    ev.str[26] = 'x';
    assert_null(cbt_event_meta_str(&ev, m, NULL));
    m->area_len = 0;
    m->len = 200; /* inline but too long to be */
    assert_null(cbt_event_meta_str(&ev, m, NULL));
}

static void builtin_type_names(void **state)
{
    (void)state;
    static const struct {
        cbt_event_type id;
        const char *alias;
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
        assert_non_null(got); /* every built-in has a name (no hole in the table) */
        assert_true(cbt_event_type_valid(expect[i].id));
        /* the name and the old cbt name (alias) both find the type */
        cbt_event_type t = 0;
        assert_int_equal(cbt_event_type_by_name(got, &t), CBT_OK);
        assert_int_equal(t, expect[i].id);
        t = 0;
        assert_int_equal(cbt_event_type_by_name(expect[i].alias, &t), CBT_OK);
        assert_int_equal(t, expect[i].id);
        /* names are distinct */
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(cbt_event_type_name(expect[j].id), got);
    }
    assert_string_equal(cbt_event_type_name(CBT_EV_MP_STORE_START), "mp.store.start");
    assert_string_equal(cbt_event_type_name(CBT_EV_MP_REQUEST_END), "mp.request.end");
    assert_string_equal(cbt_event_type_name(CBT_EV_MP_RETRIEVE_SUBMITTED),
                        "mp.retrieve.submitted");
    assert_string_equal(cbt_event_type_name(CBT_EV_L2_LOAD_TASK_COMPLETED),
                        "l2.load_task.completed");
    /* cbt's own types: "cbt." names */
    assert_string_equal(cbt_event_type_name(CBT_EV_CB_CLASSIFY_START), "cbt.cb.classify.start");
    assert_string_equal(cbt_event_type_name(CBT_EV_CB_CLASSIFY_END), "cbt.cb.classify.end");
    assert_string_equal(cbt_event_type_name(CBT_EV_KERNEL_LAUNCH), "cbt.kernel.launch");
    assert_string_equal(cbt_event_type_name(CBT_EV_SPAN_BEGIN), "cbt.span.begin");
    assert_string_equal(cbt_event_type_name(CBT_EV_SPAN_END), "cbt.span.end");
    assert_null(cbt_event_type_name(CBT_EV_INVALID));
    assert_false(cbt_event_type_valid(CBT_EV_INVALID));
    assert_null(cbt_event_type_name(CBT_EVENT_TYPES_MAX - 1));
    assert_false(cbt_event_type_valid(CBT_EVENT_TYPES_MAX - 1));
    assert_false(cbt_event_type_valid(CBT_EVENT_TYPES_MAX + 5));
}

/* LMCache 0.5.6's EventType, all 63 members, as docs/lmcache-0.5.6.md §1
 * lists them (member name, value), with the cbt constant each must be. */
static const struct {
    cbt_event_type id;
    const char *member;
    const char *value;
} k_lmcache_056[] = {
#define E_(n, v) {CBT_EV_##n, #n, v},
    /* §1.1 MP server */
    E_(MP_REQUEST_START, "mp.request.start")
    E_(MP_LOOKUP_PREFETCH_START, "mp.lookup_prefetch.start")
    E_(MP_LOOKUP_PREFETCH_END, "mp.lookup_prefetch.end")
    E_(MP_LOOKUP, "mp.lookup")
    E_(MP_STORE_SUBMITTED, "mp.store.submitted")
    E_(MP_STORE_START, "mp.store.start")
    E_(MP_STORE_END, "mp.store.end")
    E_(MP_RETRIEVE_SUBMITTED, "mp.retrieve.submitted")
    E_(MP_RETRIEVE_START, "mp.retrieve.start")
    E_(MP_RETRIEVE_END, "mp.retrieve.end")
    E_(MP_REQUEST_END, "mp.request.end")
    E_(MP_VLLM_END_SESSION, "mp.vllm.end_session")
    E_(MP_VLLM_BLOCK_ALLOCATION, "mp.vllm.block_allocation")
    E_(MP_TOKENS, "mp.tokens")
    E_(MP_TRANSFER_PHASE_SAMPLES, "mp.transfer.phase_samples")
    /* §1.2 CacheBlend server */
    E_(CB_REQUEST_START, "cb.request.start")
    E_(CB_LOOKUP_START, "cb.lookup.start")
    E_(CB_PREFIX_LOOKUP_START, "cb.prefix_lookup.start")
    E_(CB_PREFIX_LOOKUP_END, "cb.prefix_lookup.end")
    E_(CB_FINGERPRINT_MATCH_START, "cb.fingerprint_match.start")
    E_(CB_FINGERPRINT_MATCH_END, "cb.fingerprint_match.end")
    E_(CB_COORDINATOR_MATCH_START, "cb.coordinator_match.start")
    E_(CB_COORDINATOR_MATCH_END, "cb.coordinator_match.end")
    E_(CB_SPARSE_PREFETCH_START, "cb.sparse_prefetch.start")
    E_(CB_SPARSE_PREFETCH_END, "cb.sparse_prefetch.end")
    E_(CB_LOOKUP_END, "cb.lookup.end")
    E_(CB_RETRIEVE_SUBMITTED, "cb.retrieve.submitted")
    E_(CB_RETRIEVE_START, "cb.retrieve.start")
    E_(CB_SCATTER_START, "cb.scatter.start")
    E_(CB_SCATTER_END, "cb.scatter.end")
    E_(CB_RETRIEVE_END, "cb.retrieve.end")
    E_(CB_RETRIEVE_NOOP, "cb.retrieve.noop")
    E_(CB_REQUEST_END, "cb.request.end")
    E_(CB_FINGERPRINTS_REGISTERED, "cb.fingerprints.registered")
    E_(CB_CHUNKS_EVICTED, "cb.chunks.evicted")
    /* §1.3 L1, StorageManager, L2, timeout, trace recording */
    E_(L1_READ_RESERVED, "l1.read.reserved")
    E_(L1_READ_FINISHED, "l1.read.finished")
    E_(L1_WRITE_RESERVED, "l1.write.reserved")
    E_(L1_WRITE_FINISHED, "l1.write.finished")
    E_(L1_WRITE_FINISHED_AND_READ_RESERVED, "l1.write_finished_and_read_reserved")
    E_(L1_KEYS_EVICTED, "l1.keys.evicted")
    E_(L1_KEYS_ACCESSED, "l1.keys.accessed")
    E_(L1_EVICTION_LOOP_TICK, "l1.eviction.loop_tick")
    E_(L1_ALLOCATION_FAILED, "l1.allocation.failed")
    E_(L1_READ_FAILED, "l1.read.failed")
    E_(SM_READ_PREFETCHED_FINISHED, "sm.read.prefetched_finished")
    E_(SM_WRITE_RESERVED, "sm.write.reserved")
    E_(SM_WRITE_FINISHED, "sm.write.finished")
    E_(SM_CAPACITY_CHANGED, "sm.capacity.changed")
    E_(L2_STORE_SUBMITTED, "l2.store.submitted")
    E_(L2_STORE_COMPLETED, "l2.store.completed")
    E_(L2_PREFETCH_LOOKUP_SUBMITTED, "l2.prefetch.lookup.submitted")
    E_(L2_PREFETCH_LOAD_SUBMITTED, "l2.prefetch.load.submitted")
    E_(L2_PREFETCH_LOAD_COMPLETED, "l2.prefetch.load.completed")
    E_(L2_LOAD_TASK_SUBMITTED, "l2.load_task.submitted")
    E_(L2_LOAD_TASK_COMPLETED, "l2.load_task.completed")
    E_(L2_KEYS_EVICTED, "l2.keys.evicted")
    E_(L2_KEYS_STORED, "l2.keys.stored")
    E_(L2_KEYS_ACCESSED, "l2.keys.accessed")
    E_(L2_KEYS_DELETED, "l2.keys.deleted")
    E_(L2_PREFETCH_FAILED, "l2.prefetch.failed")
    E_(TIMEOUT_RAISED, "timeout.raised")
    E_(TRACE_CALL, "trace.call")
#undef E_
};

/* Every 0.5.6 value names a distinct cbt type, that type's name is the value,
 * and the member name finds the same type. */
static void lmcache_values_map(void **state)
{
    (void)state;
    size_t n = sizeof k_lmcache_056 / sizeof k_lmcache_056[0];
    assert_int_equal(n, 63); /* EventType has 63 members in 0.5.6 */
    for (size_t i = 0; i < n; i++) {
        cbt_event_type t = 0;
        assert_int_equal(cbt_event_type_by_name(k_lmcache_056[i].value, &t), CBT_OK);
        if (t != k_lmcache_056[i].id)
            fail_msg("%s: type %u, want %u", k_lmcache_056[i].value, t, k_lmcache_056[i].id);
        assert_true(t > CBT_EV_INVALID && t < CBT_EV_BUILTIN_COUNT_);
        const char *back = cbt_event_type_name(t);
        assert_non_null(back);
        if (strcmp(back, k_lmcache_056[i].value) != 0)
            fail_msg("type %u: name %s, want %s", t, back, k_lmcache_056[i].value);
        t = 0;
        assert_int_equal(cbt_event_type_by_name(k_lmcache_056[i].member, &t), CBT_OK);
        assert_int_equal(t, k_lmcache_056[i].id);
        /* register, too, hands out the built-in */
        t = 0;
        assert_int_equal(cbt_event_type_register(k_lmcache_056[i].value, &t), CBT_OK);
        assert_int_equal(t, k_lmcache_056[i].id);
        for (size_t j = 0; j < i; j++)
            assert_int_not_equal(k_lmcache_056[j].id, k_lmcache_056[i].id);
    }
}

static void unknown_names_refused(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "mp.store",           /* a span name, not an event */
        "MP.STORE.START",     /* names are case-sensitive */
        "mp.store.start ",
        "mp_store_start",
        "l1.read",
        "mp.classify.start",
        "cb.classify.start",  /* cbt's own type is "cbt.cb.classify.start" */
        "CBT_EV_MP_STORE_START",
        "NO_SUCH_EVENT_TYPE",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cbt_event_type t = 7;
        if (cbt_event_type_by_name(bad[i], &t) != CBT_ERR_UNKNOWN_EVENT)
            fail_msg("'%s' was accepted", bad[i]);
        assert_int_equal(t, CBT_EV_INVALID);
    }
    cbt_event_type t = 7;
    assert_int_equal(cbt_event_type_by_name(NULL, &t), CBT_ERR_INVAL);
    assert_int_equal(t, CBT_EV_INVALID);
    assert_int_equal(cbt_event_type_by_name("mp.store.start", NULL), CBT_ERR_INVAL);
    /* a lookup registers nothing: still unknown after a second try */
    assert_int_equal(cbt_event_type_by_name("NO_SUCH_EVENT_TYPE", &t), CBT_ERR_UNKNOWN_EVENT);
}

static void type_register(void **state)
{
    (void)state;
    cbt_event_type a = 0, a2 = 0, b = 0, bi = 0;
    assert_false(cbt_event_type_valid(CBT_EV_BUILTIN_COUNT_ + 40));
    assert_int_equal(cbt_event_type_register("APP_READ_RESERVED", &a), CBT_OK);
    assert_true(a >= CBT_EV_BUILTIN_COUNT_);
    assert_true(cbt_event_type_valid(a));
    assert_string_equal(cbt_event_type_name(a), "APP_READ_RESERVED");
    assert_int_equal(cbt_event_type_register("APP_READ_RESERVED", &a2), CBT_OK);
    assert_int_equal(a2, a);
    assert_int_equal(cbt_event_type_register("APP_READ_FINISHED", &b), CBT_OK);
    assert_int_not_equal(b, a);
    assert_true(b >= CBT_EV_BUILTIN_COUNT_);
    assert_string_equal(cbt_event_type_name(b), "APP_READ_FINISHED");
    assert_string_equal(cbt_event_type_name(a), "APP_READ_RESERVED");
    /* a registered name is found by name */
    cbt_event_type f = 0;
    assert_int_equal(cbt_event_type_by_name("APP_READ_FINISHED", &f), CBT_OK);
    assert_int_equal(f, b);
    /* a built-in name or alias returns the built-in id */
    assert_int_equal(cbt_event_type_register("MP_STORE_START", &bi), CBT_OK);
    assert_int_equal(bi, CBT_EV_MP_STORE_START);
    assert_int_equal(cbt_event_type_register("mp.store.start", &bi), CBT_OK);
    assert_int_equal(bi, CBT_EV_MP_STORE_START);
    assert_int_equal(cbt_event_type_register("CB_REQUEST_END", &bi), CBT_OK);
    assert_int_equal(bi, CBT_EV_CB_REQUEST_END);
    /* the seed's registry example registers L1_READ_*: now built-ins */
    assert_int_equal(cbt_event_type_register("L1_READ_RESERVED", &bi), CBT_OK);
    assert_int_equal(bi, CBT_EV_L1_READ_RESERVED);
    assert_string_equal(cbt_event_type_name(bi), "l1.read.reserved");
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

/* A user subscriber that wants only the L1 / controller types. */
static int g_l1_seen, g_other_seen;
static int64_t g_l1_keys;
static cbt_status l1_on_event(void *ctx, cbt_tracer *t, const cbt_event *ev)
{
    (void)ctx, (void)t;
    if (ev->type == CBT_EV_L1_READ_RESERVED)
        g_l1_keys = cbt_event_get_i64(ev, tu_name("key_count"), -1);
    if (ev->type == CBT_EV_L1_READ_RESERVED || ev->type == CBT_EV_L1_EVICTION_LOOP_TICK ||
        ev->type == CBT_EV_L2_PREFETCH_FAILED)
        g_l1_seen++;
    else
        g_other_seen++;
    return CBT_OK;
}

/* Types no builder uses are accepted by cbt_publish and reach the user
 * subscribers that want them; the MP builder ignores them (no span, no error
 * counted) and still builds the request tree around them (the registry
 * example: l1.read under request). */
static void unbuilt_types_dispatched(void **state)
{
    (void)state;
    tu_start(NULL);
    cbt_subscriber sub;
    cbt_subscriber_init(&sub, "l1-user", NULL, l1_on_event, NULL, NULL);
    cbt_event_type l1 = 0;
    assert_int_equal(cbt_event_type_by_name("l1.read.reserved", &l1), CBT_OK);
    cbt_subscriber_want(&sub, l1);
    cbt_subscriber_want(&sub, CBT_EV_L1_EVICTION_LOOP_TICK);
    cbt_subscriber_want(&sub, CBT_EV_L2_PREFETCH_FAILED);
    assert_int_equal(cbt_add_subscriber(&sub), CBT_OK);
    g_l1_seen = g_other_seen = 0;
    g_l1_keys = 0;

    cbt_metrics m0 = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m0), CBT_OK);
    cbt_mp_stats s0 = CBT_STRUCT_INIT(cbt_mp_stats);
    assert_int_equal(cbt_mp_stats_get(NULL, &s0), CBT_OK);

    cbt_event ev;
    assert_int_equal(cbt_event_init(&ev, CBT_EV_MP_REQUEST_START, "l1-req"), CBT_OK);
    assert_int_equal(cbt_publish(&ev), CBT_OK);
    assert_int_equal(cbt_event_init(&ev, l1, "l1-req"), CBT_OK);
    assert_int_equal(cbt_event_i64(&ev, tu_name("key_count"), 4), CBT_OK);
    assert_int_equal(cbt_publish(&ev), CBT_OK);
    assert_int_equal(cbt_event_init(&ev, CBT_EV_L1_EVICTION_LOOP_TICK, NULL), CBT_OK);
    assert_int_equal(cbt_event_bool(&ev, tu_name("triggered"), false), CBT_OK);
    assert_int_equal(cbt_publish(&ev), CBT_OK);
    assert_int_equal(cbt_event_init(&ev, CBT_EV_L2_PREFETCH_FAILED, NULL), CBT_OK);
    assert_int_equal(cbt_publish(&ev), CBT_OK);
    /* not wanted by the user subscriber: not delivered to it */
    assert_int_equal(cbt_event_init(&ev, CBT_EV_SM_CAPACITY_CHANGED, NULL), CBT_OK);
    assert_int_equal(cbt_publish(&ev), CBT_OK);
    assert_int_equal(cbt_event_init(&ev, CBT_EV_MP_REQUEST_END, "l1-req"), CBT_OK);
    assert_int_equal(cbt_publish(&ev), CBT_OK);
    tu_flush();

    assert_int_equal(g_l1_seen, 3);
    assert_int_equal(g_other_seen, 0);
    const tu_event *e = tu_event_find(l1, "l1-req", 0);
    assert_non_null(e);
    assert_int_equal(g_l1_keys, 4);
    assert_non_null(tu_event_find(CBT_EV_SM_CAPACITY_CHANGED, "", 0));

    cbt_metrics m1 = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m1), CBT_OK);
    assert_true(m1.published - m0.published == 6);
    assert_true(m1.rejected == m0.rejected);
    assert_true(m1.subscriber_errors == m0.subscriber_errors);
    cbt_mp_stats s1 = CBT_STRUCT_INIT(cbt_mp_stats);
    assert_int_equal(cbt_mp_stats_get(NULL, &s1), CBT_OK);
    assert_true(s1.roots_opened - s0.roots_opened == 1);
    assert_true(s1.roots_closed - s0.roots_closed == 1);
    assert_true(s1.children_opened == s0.children_opened);
    assert_true(s1.unmatched_end == s0.unmatched_end);
    /* the request root and nothing else for it */
    const cbt_span *root = tu_find("request", "l1-req", 0);
    assert_non_null(root);
    assert_true(tu_is_root(root));
    assert_int_equal(tu_span_count(), 1);
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
        cmocka_unit_test_teardown(long_strings_and_truncation, tu_teardown),
        cmocka_unit_test(init_sets_header_only),
        cmocka_unit_test(builtin_type_names),
        cmocka_unit_test(lmcache_values_map),
        cmocka_unit_test(unknown_names_refused),
        cmocka_unit_test(type_register),
        cmocka_unit_test(unbuilt_types_dispatched),
        cmocka_unit_test(intern_basics),
        cmocka_unit_test(intern_concurrent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
