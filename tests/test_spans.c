/* tests/test_spans.c — span building on the harvester thread (typed
 * attributes, limits, ids, parents, the pool), trace/span id generation, the
 * JSON form of a span and the JSON-lines file sink. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal/json.h"
#include "internal/tracer.h"
#include "testutil.h"

static cbt_event_type g_ev;      /* the probe event the subscriber acts on */
static cbt_name k_step;          /* its "step" metadata: which scenario */
static cbt_name k_int, k_dbl, k_bool, k_str, k_str2, k_str3, k_late;
/* keys many_00.. : one past the attribute bound, and at least the 32 that
 * LMCache's spans need */
#define K_MANY ((CBT_SPAN_ATTR_MAX > 32 ? CBT_SPAN_ATTR_MAX : 32) + 1)
static cbt_name k_many[K_MANY];
static cbt_name n_attrs_span, n_many_span, n_arena_span, n_clamp_span, n_ids_span, n_pool_span;

static void names_once(void)
{
    assert_int_equal(cbt_event_type_register("TEST_SPAN_PROBE", &g_ev), CBT_OK);
    k_step = tu_name("step");
    k_int = tu_name("an_int");
    k_dbl = tu_name("a_double");
    k_bool = tu_name("a_bool");
    k_str = tu_name("a_string");
    k_str2 = tu_name("a_string2");
    k_str3 = tu_name("a_string3");
    k_late = tu_name("late_int");
    for (int i = 0; i < K_MANY; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "many_%02d", i);
        k_many[i] = tu_name(nm);
    }
    n_attrs_span = tu_name("test.attrs");
    n_many_span = tu_name("test.many");
    n_arena_span = tu_name("test.arena");
    n_clamp_span = tu_name("test.clamp");
    n_ids_span = tu_name("test.ids");
    n_pool_span = tu_name("test.pool");
}

/* What the subscriber saw, checked on the test thread after a flush. */
static struct {
    int ran[8];
    /* step 1: attributes */
    cbt_status a_st[12];
    cbt_span a_before_end;
    /* step 2: 17 attributes */
    cbt_status m_st[CBT_SPAN_ATTR_MAX + 1];
    cbt_status m_overwrite, m_str17;
    uint32_t m_flags_before, m_flags_after;
    cbt_span m_before_end;
    /* step 3: string arena */
    cbt_status ar_st[8];
    uint32_t ar_flags_full;
    cbt_span ar_before_end;
    /* step 5: ids */
    cbt_span_ctx root1, root2, child, zero_parent, grandchild;
    uint8_t root1_parent[8], root2_parent[8], child_parent[8], zero_parent_parent[8],
        grand_parent[8];
    int ids_null;
    /* step 6: pool */
    int pool_got[6];
    /* step 7: events */
    int ev_fresh;
} g;

/* step 3: a string of LONG_A bytes, then one of LONG_B that fills the arena
 * exactly, then LONG_B + 1 bytes under the second key */
#define LONG_A (CBT_SPAN_STR_ARENA - 48)
#define LONG_B 48
static char g_long_a[LONG_A], g_long_b[LONG_B], g_long_c[LONG_B + 1];

static cbt_status probe_on_event(void *ctx, cbt_tracer *t, const cbt_event *ev)
{
    (void)ctx;
    if (ev->type != g_ev)
        return CBT_OK;
    int step = (int)cbt_event_get_i64(ev, k_step, 0);
    switch (step) {
    case 1: { /* typed attributes and overwrite */
        cbt_span *s = cbt_span_start(t, n_attrs_span, CBT_SPAN_KIND_INTERNAL, NULL, 1000);
        if (!s)
            return CBT_ERR_FULL;
        g.a_st[0] = cbt_span_set_i64(s, k_int, 42);
        g.a_st[1] = cbt_span_set_f64(s, k_dbl, 0.1);
        g.a_st[2] = cbt_span_set_bool(s, k_bool, true);
        g.a_st[3] = cbt_span_set_str(s, k_str, "hello", 5);
        g.a_st[4] = cbt_span_set_i64(s, k_int, 7);              /* overwrite */
        g.a_st[5] = cbt_span_set_str(s, k_str, "bye", 3);        /* shorter */
        g.a_st[6] = cbt_span_set_str(s, k_str2, "xy", 2);
        g.a_st[7] = cbt_span_set_str(s, k_str2, "longer one", 10); /* longer */
        g.a_st[8] = cbt_span_set_bool(s, k_bool, false);
        g.a_st[9] = cbt_span_set_i64(s, 0, 1);                  /* key 0 */
        g.a_st[10] = cbt_span_set_i64(NULL, k_int, 1);
        g.a_st[11] = cbt_span_set_f64(s, k_late, 3.0);          /* a whole double */
        g.a_before_end = *s;
        cbt_span_end(t, s, 2000);
        break;
    }
    case 2: { /* 17 attributes */
        cbt_span *s = cbt_span_start(t, n_many_span, CBT_SPAN_KIND_INTERNAL, NULL, 1000);
        if (!s)
            return CBT_ERR_FULL;
        for (int i = 0; i < CBT_SPAN_ATTR_MAX; i++)
            g.m_st[i] = cbt_span_set_i64(s, k_many[i], 100 + i);
        g.m_flags_before = s->flags;
        g.m_st[CBT_SPAN_ATTR_MAX] = cbt_span_set_i64(s, k_many[CBT_SPAN_ATTR_MAX], 999);
        g.m_flags_after = s->flags;
        g.m_str17 = cbt_span_set_str(s, k_many[CBT_SPAN_ATTR_MAX], "x", 1);
        g.m_overwrite = cbt_span_set_i64(s, k_many[3], -3);
        g.m_before_end = *s;
        cbt_span_end(t, s, 2000);
        break;
    }
    case 3: { /* string arena: CBT_SPAN_STR_ARENA bytes in all */
        cbt_span *s = cbt_span_start(t, n_arena_span, CBT_SPAN_KIND_INTERNAL, NULL, 1000);
        if (!s)
            return CBT_ERR_FULL;
        g.ar_st[0] = cbt_span_set_str(s, k_str, g_long_a, LONG_A);
        g.ar_st[1] = cbt_span_set_str(s, k_str2, g_long_b, LONG_B); /* exactly full */
        g.ar_flags_full = s->flags;
        g.ar_st[2] = cbt_span_set_str(s, k_str3, "z", 1); /* no room, not even for the mark */
        g.ar_st[3] = cbt_span_set_str(s, k_str2, g_long_c, LONG_B + 1); /* grow: cut */
        g.ar_st[4] = cbt_span_set_str(s, k_str, "short", 5);    /* shrink: fits */
        g.ar_st[5] = cbt_span_set_i64(s, k_int, 5);             /* non-strings still fit */
        g.ar_before_end = *s;
        cbt_span_end(t, s, 2000);
        break;
    }
    case 4: { /* end before start is clamped */
        cbt_span *s = cbt_span_start(t, n_clamp_span, CBT_SPAN_KIND_INTERNAL, NULL, 5000);
        if (!s)
            return CBT_ERR_FULL;
        cbt_span_set_i64(s, k_int, 1);
        cbt_span_end(t, s, 4000);
        s = cbt_span_start(t, n_clamp_span, CBT_SPAN_KIND_INTERNAL, NULL, 6000);
        if (!s)
            return CBT_ERR_FULL;
        cbt_span_set_i64(s, k_int, 2);
        cbt_span_end(t, s, 6000);
        break;
    }
    case 5: { /* ids and parents */
        static const cbt_span_ctx zero;
        cbt_span *r1 = cbt_span_start(t, n_ids_span, CBT_SPAN_KIND_SERVER, NULL, 10);
        cbt_span *r2 = cbt_span_start(t, n_ids_span, CBT_SPAN_KIND_SERVER, NULL, 10);
        if (!r1 || !r2) {
            g.ids_null = 1;
            return CBT_ERR_FULL;
        }
        cbt_span *c = cbt_span_start(t, n_ids_span, CBT_SPAN_KIND_INTERNAL, &r1->ctx, 11);
        cbt_span *z = cbt_span_start(t, n_ids_span, CBT_SPAN_KIND_INTERNAL, &zero, 12);
        if (!c || !z) {
            g.ids_null = 1;
            return CBT_ERR_FULL;
        }
        cbt_span *gc = cbt_span_start(t, n_ids_span, CBT_SPAN_KIND_INTERNAL, &c->ctx, 13);
        if (!gc) {
            g.ids_null = 1;
            return CBT_ERR_FULL;
        }
        g.root1 = r1->ctx;
        g.root2 = r2->ctx;
        g.child = c->ctx;
        g.zero_parent = z->ctx;
        g.grandchild = gc->ctx;
        memcpy(g.root1_parent, r1->parent_span_id, 8);
        memcpy(g.root2_parent, r2->parent_span_id, 8);
        memcpy(g.child_parent, c->parent_span_id, 8);
        memcpy(g.zero_parent_parent, z->parent_span_id, 8);
        memcpy(g.grand_parent, gc->parent_span_id, 8);
        cbt_span_end(t, gc, 20);
        cbt_span_end(t, c, 20);
        cbt_span_end(t, z, 20);
        cbt_span_end(t, r2, 20);
        cbt_span_end(t, r1, 20);
        break;
    }
    case 6: { /* pool of 4 */
        cbt_span *s[5];
        for (int i = 0; i < 5; i++) {
            s[i] = cbt_span_start(t, n_pool_span, CBT_SPAN_KIND_INTERNAL, NULL, 100 + i);
            g.pool_got[i] = s[i] != NULL;
        }
        if (s[0])
            cbt_span_end(t, s[0], 200);
        cbt_span *again = cbt_span_start(t, n_pool_span, CBT_SPAN_KIND_INTERNAL, NULL, 300);
        g.pool_got[5] = again != NULL;
        for (int i = 1; i < 5; i++)
            if (s[i])
                cbt_span_end(t, s[i], 400);
        if (again)
            cbt_span_end(t, again, 400);
        break;
    }
    case 7: { /* a span with events, through the pool and the sinks */
        cbt_span *s = cbt_span_start(t, CBT_N_TIMEOUT, CBT_SPAN_KIND_INTERNAL, NULL, 7000);
        if (!s)
            return CBT_ERR_FULL;
        uint32_t e;
        cbt_span_set_str(s, CBT_N_SESSION_ID, "probe", 5);
        cbt_span_add_event(s, CBT_N_EXCEPTION, 7000, &e);
        cbt_span_event_set_str(s, e, CBT_N_EXC_TYPE, "TimeoutError", 12);
        cbt_span_event_set_str(s, e, CBT_N_EXC_MESSAGE, "slow", 4);
        cbt_span_set_i64(s, k_int, 1);
        cbt_span_end(t, s, 7000);
        /* the next span from the pool starts with no events */
        s = cbt_span_start(t, CBT_N_TIMEOUT, CBT_SPAN_KIND_INTERNAL, NULL, 8000);
        if (!s)
            return CBT_ERR_FULL;
        g.ev_fresh = s->n_events == 0 && s->events_dropped == 0 && s->attrs_truncated == 0;
        cbt_span_end(t, s, 8000);
        break;
    }
    default:
        return CBT_ERR_INVAL;
    }
    g.ran[step] = 1;
    return CBT_OK;
}

static void start_with_probe(const cbt_config *cfg)
{
    tu_start(cfg);
    names_once();
    cbt_subscriber sub;
    memset(&sub, 0, sizeof sub);
    sub.version = CBT_SUBSCRIBER_VERSION;
    sub.size = sizeof sub;
    sub.name = "span-probe";
    sub.on_event = probe_on_event;
    cbt_subscriber_want(&sub, g_ev);
    assert_int_equal(cbt_add_subscriber(&sub), CBT_OK);
    memset(&g, 0, sizeof g);
}

static void run_step(int step)
{
    cbt_event ev;
    assert_int_equal(cbt_event_init(&ev, g_ev, "probe"), CBT_OK);
    assert_int_equal(cbt_event_i64(&ev, k_step, step), CBT_OK);
    assert_int_equal(cbt_publish(&ev), CBT_OK);
    tu_flush();
    assert_int_equal(g.ran[step], 1);
}

static const cbt_span *find_by_name(cbt_name n, uint32_t i)
{
    for (uint32_t k = 0; k < tu_span_count(); k++)
        if (tu_span(k)->name == n && i-- == 0)
            return tu_span(k);
    return NULL;
}

static void str_attr_is(const cbt_span *s, cbt_name key, const char *want, size_t len)
{
    const cbt_attr *a = cbt_span_attr(s, key);
    assert_non_null(a);
    assert_int_equal(a->type, CBT_META_STR);
    assert_int_equal(a->str_len, len);
    assert_memory_equal(cbt_attr_str(s, a), want, len);
}

static void typed_attributes(void **state)
{
    (void)state;
    start_with_probe(NULL);
    run_step(1);
    for (int i = 0; i <= 8; i++)
        assert_int_equal(g.a_st[i], CBT_OK);
    assert_int_equal(g.a_st[9], CBT_ERR_INVAL);
    assert_int_equal(g.a_st[10], CBT_ERR_INVAL);
    assert_int_equal(g.a_st[11], CBT_OK);

    const cbt_span *s = find_by_name(n_attrs_span, 0);
    assert_non_null(s);
    assert_null(find_by_name(n_attrs_span, 1));
    /* the sink got what the subscriber built */
    assert_int_equal(s->n_attrs, g.a_before_end.n_attrs);
    assert_int_equal(s->n_attrs, 6); /* int, double, bool, str, str2, late */
    const cbt_attr *a = cbt_span_attr(s, k_int);
    assert_non_null(a);
    assert_int_equal(a->type, CBT_META_I64);
    assert_true(a->v.i64 == 7);
    a = cbt_span_attr(s, k_dbl);
    assert_non_null(a);
    assert_int_equal(a->type, CBT_META_F64);
    assert_true(a->v.f64 == 0.1);
    a = cbt_span_attr(s, k_bool);
    assert_non_null(a);
    assert_int_equal(a->type, CBT_META_BOOL);
    assert_false(a->v.b);
    a = cbt_span_attr(s, k_late);
    assert_non_null(a);
    assert_int_equal(a->type, CBT_META_F64); /* 3.0 stays a double */
    assert_true(a->v.f64 == 3.0);
    str_attr_is(s, k_str, "bye", 3);
    str_attr_is(s, k_str2, "longer one", 10);
    assert_null(cbt_span_attr(s, k_str3));
    assert_int_equal(s->flags & CBT_SPANF_ATTRS_DROPPED, 0);
    assert_int_equal(s->attrs_dropped, 0);
    assert_true(s->start_ns == 1000);
    assert_true(s->end_ns == 2000);
    assert_int_equal(s->kind, CBT_SPAN_KIND_INTERNAL);
    assert_true(tu_is_root(s));
    tu_stop();
}

static void seventeenth_attribute(void **state)
{
    (void)state;
    start_with_probe(NULL);
    run_step(2);
    for (int i = 0; i < CBT_SPAN_ATTR_MAX; i++)
        assert_int_equal(g.m_st[i], CBT_OK);
    assert_int_equal(g.m_flags_before & CBT_SPANF_ATTRS_DROPPED, 0);
    assert_int_equal(g.m_st[CBT_SPAN_ATTR_MAX], CBT_ERR_FULL);
    assert_true(g.m_flags_after & CBT_SPANF_ATTRS_DROPPED);
    assert_int_equal(g.m_str17, CBT_ERR_FULL);
    assert_int_equal(g.m_overwrite, CBT_OK); /* an existing key still updates */
    const cbt_span *s = find_by_name(n_many_span, 0);
    assert_non_null(s);
    assert_int_equal(s->n_attrs, CBT_SPAN_ATTR_MAX);
    assert_true(s->flags & CBT_SPANF_ATTRS_DROPPED);
    assert_true(s->attrs_dropped >= 1);
    assert_null(cbt_span_attr(s, k_many[CBT_SPAN_ATTR_MAX]));
    for (int i = 0; i < CBT_SPAN_ATTR_MAX; i++) {
        const cbt_attr *a = cbt_span_attr(s, k_many[i]);
        assert_non_null(a);
        assert_int_equal(a->type, CBT_META_I64);
        assert_true(a->v.i64 == (i == 3 ? -3 : 100 + i));
    }
    /* the JSON form reports the drop */
    char buf[8192];
    size_t n = cbt_span_to_json(s, buf, sizeof buf);
    assert_true(n < sizeof buf);
    char want[64];
    snprintf(want, sizeof want, "\"dropped_attributes\":%u", (unsigned)s->attrs_dropped);
    assert_non_null(strstr(buf, want));
    tu_stop();
}

static void string_arena(void **state)
{
    (void)state;
    memset(g_long_a, 'A', sizeof g_long_a);
    memset(g_long_b, 'B', sizeof g_long_b);
    memset(g_long_c, 'C', sizeof g_long_c);
    start_with_probe(NULL);
    run_step(3);
    assert_int_equal(g.ar_st[0], CBT_OK);
    assert_int_equal(g.ar_st[1], CBT_OK);
    assert_int_equal(g.ar_flags_full & (CBT_SPANF_ATTRS_DROPPED | CBT_SPANF_ATTRS_TRUNCATED), 0);
    assert_int_equal(g.ar_st[2], CBT_ERR_FULL);
    assert_int_equal(g.ar_st[3], CBT_OK); /* stored cut */
    assert_int_equal(g.ar_st[4], CBT_OK);
    assert_int_equal(g.ar_st[5], CBT_OK);
    const cbt_span *s = find_by_name(n_arena_span, 0);
    assert_non_null(s);
    assert_true(s->flags & CBT_SPANF_ATTRS_DROPPED);
    assert_true(s->flags & CBT_SPANF_ATTRS_TRUNCATED);
    assert_int_equal(s->attrs_dropped, 1);
    assert_int_equal(s->attrs_truncated, 1);
    str_attr_is(s, k_str, "short", 5);
    /* the grown value: what its old bytes left room for, then the mark */
    char want[LONG_B];
    memset(want, 'C', LONG_B - CBT_SPAN_TRUNC_MARK_LEN);
    memcpy(want + LONG_B - CBT_SPAN_TRUNC_MARK_LEN, CBT_SPAN_TRUNC_MARK, CBT_SPAN_TRUNC_MARK_LEN);
    str_attr_is(s, k_str2, want, LONG_B);
    assert_null(cbt_span_attr(s, k_str3));
    assert_int_equal(s->arena_used, 5 + LONG_B); /* the 'A's were given back */
    const cbt_attr *a = cbt_span_attr(s, k_int);
    assert_non_null(a);
    assert_true(a->v.i64 == 5);
    tu_stop();
}

/* ---- attributes and span events on a span value (no tracer needed) ---------- */

static int utf8_ok(const unsigned char *s, size_t n);

static void blank_span(cbt_span *s)
{
    names_once();
    memset(s, 0, sizeof *s);
    s->name = CBT_N_TIMEOUT;
    s->start_ns = 1000;
    s->end_ns = 1000;
}

/* LMCache 0.5.6's spans fit: 32 attributes, 16 of them 60-byte strings (an MP
 * child carries up to 13 with 40-byte model names), nothing flagged. */
static void thirty_two_attributes(void **state)
{
    (void)state;
    assert_int_equal(CBT_SPAN_ATTR_MAX, 32);
    assert_true(CBT_SPAN_STR_ARENA >= 1024);
    assert_true(sizeof(cbt_span) <= 3 * 1024);
    static cbt_span s;
    blank_span(&s);
    char v[60];
    for (int i = 0; i < 32; i++) {
        if (i % 2) {
            memset(v, 'a' + i % 26, sizeof v);
            assert_int_equal(cbt_span_set_str(&s, k_many[i], v, sizeof v), CBT_OK);
        } else {
            assert_int_equal(cbt_span_set_i64(&s, k_many[i], i), CBT_OK);
        }
    }
    assert_int_equal(s.n_attrs, 32);
    assert_int_equal(s.flags, 0);
    assert_int_equal(s.arena_used, 16 * 60);
    for (int i = 0; i < 32; i++) {
        const cbt_attr *a = cbt_span_attr(&s, k_many[i]);
        assert_non_null(a);
        if (i % 2) {
            memset(v, 'a' + i % 26, sizeof v);
            str_attr_is(&s, k_many[i], v, sizeof v);
        } else {
            assert_true(a->v.i64 == i);
        }
    }
}

/* Setting keys again and again, strings growing, shrinking and turning into
 * ints, never uses the arena up: it holds exactly the live values, and the
 * other strings survive the moves. */
static void overwrite_does_not_leak(void **state)
{
    (void)state;
    static cbt_span s;
    blank_span(&s);
    static char big[1500];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (char)('a' + i % 26);
    assert_int_equal(cbt_span_set_str(&s, k_str, "first", 5), CBT_OK);
    assert_int_equal(cbt_span_set_str(&s, k_str3, "last", 4), CBT_OK);
    size_t lens[] = {1, 700, 3, 1500, 0, 42, 1499};
    for (int round = 0; round < 1000; round++) {
        size_t n = lens[round % 7];
        assert_int_equal(cbt_span_set_str(&s, k_str2, big, n), CBT_OK);
        str_attr_is(&s, k_str2, big, n);
        if (round % 10 == 9) /* a string key set to an int gives its bytes back */
            assert_int_equal(cbt_span_set_i64(&s, k_str2, round), CBT_OK);
        const cbt_attr *a = cbt_span_attr(&s, k_str2);
        size_t live = 9 + (a->type == CBT_META_STR ? a->str_len : 0);
        assert_int_equal(s.arena_used, live);
        str_attr_is(&s, k_str, "first", 5);
        str_attr_is(&s, k_str3, "last", 4);
    }
    /* a value of the span itself may be set under another key */
    assert_int_equal(cbt_span_set_str(&s, k_str2, big, 600), CBT_OK);
    const cbt_attr *src = cbt_span_attr(&s, k_str2);
    assert_int_equal(cbt_span_set_str(&s, k_str, cbt_attr_str(&s, src), 600), CBT_OK);
    str_attr_is(&s, k_str, big, 600);
    str_attr_is(&s, k_str2, big, 600);
    assert_int_equal(s.n_attrs, 3);
    assert_int_equal(s.flags, 0);
    assert_int_equal(s.attrs_truncated, 0);
}

/* A string longer than what is left is cut at a character boundary and
 * marked; when not even the mark fits it is refused and an old value kept. */
static void long_string_truncated(void **state)
{
    (void)state;
    static cbt_span s;
    blank_span(&s);
    /* a value longer than the whole arena, of 3-byte characters (U+20AC) */
    static char euro[3 * 1000];
    for (int i = 0; i < 1000; i++)
        memcpy(euro + 3 * i, "\xe2\x82\xac", 3);
    assert_int_equal(cbt_span_set_str(&s, k_str, "x", 1), CBT_OK);
    assert_int_equal(cbt_span_set_str(&s, k_str2, euro, sizeof euro), CBT_OK);
    assert_true(s.flags & CBT_SPANF_ATTRS_TRUNCATED);
    assert_int_equal(s.flags & CBT_SPANF_ATTRS_DROPPED, 0);
    assert_int_equal(s.attrs_truncated, 1);
    const cbt_attr *a = cbt_span_attr(&s, k_str2);
    assert_non_null(a);
    const char *v = cbt_attr_str(&s, a);
    size_t kept = a->str_len - CBT_SPAN_TRUNC_MARK_LEN;
    assert_true(a->str_len <= CBT_SPAN_STR_ARENA - 1);
    assert_true(kept + 3 > CBT_SPAN_STR_ARENA - 1 - CBT_SPAN_TRUNC_MARK_LEN); /* as much as fits */
    assert_int_equal(kept % 3, 0); /* whole characters only */
    assert_memory_equal(v, euro, kept);
    assert_memory_equal(v + kept, CBT_SPAN_TRUNC_MARK, CBT_SPAN_TRUNC_MARK_LEN);
    assert_true(utf8_ok((const unsigned char *)v, a->str_len));
    str_attr_is(&s, k_str, "x", 1);
    /* the JSON form shows the mark */
    static char buf[CBT_SPAN_JSON_MAX];
    size_t n = cbt_span_to_json(&s, buf, sizeof buf);
    assert_true(n < sizeof buf);
    assert_non_null(strstr(buf, CBT_SPAN_TRUNC_MARK "\""));
    assert_non_null(strstr(buf, "\"truncated_attributes\":1}"));

    /* fill the arena to within 10 bytes: no room for the mark */
    blank_span(&s);
    static char fill[CBT_SPAN_STR_ARENA];
    memset(fill, 'f', sizeof fill);
    assert_int_equal(cbt_span_set_str(&s, k_str, fill, CBT_SPAN_STR_ARENA - 12), CBT_OK);
    assert_int_equal(cbt_span_set_str(&s, k_str2, "ke", 2), CBT_OK);
    assert_int_equal(s.flags, 0);
    assert_int_equal(cbt_span_set_str(&s, k_str2, fill, 20), CBT_ERR_FULL); /* 10 + 2 of room */
    str_attr_is(&s, k_str2, "ke", 2);
    assert_int_equal(cbt_span_set_str(&s, k_str3, "abc", 3), CBT_OK);       /* still fits */
    assert_int_equal(cbt_span_set_str(&s, k_str3, fill, 15), CBT_ERR_FULL); /* 7 + 3 of room */
    str_attr_is(&s, k_str3, "abc", 3);
    assert_int_equal(s.attrs_dropped, 2);
    assert_true(s.flags & CBT_SPANF_ATTRS_DROPPED);
    assert_int_equal(s.flags & CBT_SPANF_ATTRS_TRUNCATED, 0);
    /* shrink the first value by 6: 13 + 3 of room, two bytes and the mark */
    assert_int_equal(cbt_span_set_str(&s, k_str, fill, CBT_SPAN_STR_ARENA - 18), CBT_OK);
    assert_int_equal(cbt_span_set_str(&s, k_str3, fill, 20), CBT_OK);
    a = cbt_span_attr(&s, k_str3);
    assert_int_equal(a->str_len, 2 + CBT_SPAN_TRUNC_MARK_LEN);
    assert_memory_equal(cbt_attr_str(&s, a), "ff" CBT_SPAN_TRUNC_MARK, 2 + CBT_SPAN_TRUNC_MARK_LEN);
    assert_int_equal(s.arena_used, CBT_SPAN_STR_ARENA);
    str_attr_is(&s, k_str2, "ke", 2);
    /* 14 of room: the mark alone */
    assert_int_equal(cbt_span_set_str(&s, k_str, fill, CBT_SPAN_STR_ARENA - 30), CBT_OK);
    assert_int_equal(cbt_span_set_str(&s, k_str2, fill, 100), CBT_OK); /* 12 + 2 of room */
    a = cbt_span_attr(&s, k_str2);
    assert_int_equal(a->str_len, CBT_SPAN_TRUNC_MARK_LEN);
    assert_memory_equal(cbt_attr_str(&s, a), CBT_SPAN_TRUNC_MARK, CBT_SPAN_TRUNC_MARK_LEN);
    assert_int_equal(s.arena_used, CBT_SPAN_STR_ARENA);
    assert_int_equal(s.attrs_truncated, 2);
}

/* Span events: a name, a time and attributes of their own, sharing the
 * span's bounds; the fifth is refused and counted. */
static void span_events(void **state)
{
    (void)state;
    static cbt_span s;
    blank_span(&s);
    assert_int_equal(cbt_span_set_str(&s, CBT_N_SESSION_ID, "r1", 2), CBT_OK);
    uint32_t ev = 99;
    assert_int_equal(cbt_span_add_event(&s, CBT_N_EXCEPTION, 1500, &ev), CBT_OK);
    assert_int_equal(ev, 0);
    assert_int_equal(cbt_span_event_set_str(&s, ev, CBT_N_EXC_TYPE, "TimeoutError", 12), CBT_OK);
    assert_int_equal(cbt_span_event_set_str(&s, ev, CBT_N_EXC_MESSAGE, "late", 4), CBT_OK);
    assert_int_equal(cbt_span_event_set_str(&s, ev, CBT_N_EXC_MESSAGE, "too late", 8), CBT_OK);
    assert_int_equal(cbt_span_event_set_i64(&s, ev, CBT_N_COUNT, 3), CBT_OK);
    assert_int_equal(cbt_span_event_set_f64(&s, ev, CBT_N_HIT_RATE, 0.25), CBT_OK);
    assert_int_equal(cbt_span_event_set_bool(&s, ev, CBT_N_FAILED, true), CBT_OK);
    /* the same key on the span and on an event are two attributes */
    assert_int_equal(cbt_span_event_set_str(&s, ev, CBT_N_SESSION_ID, "ev", 2), CBT_OK);
    str_attr_is(&s, CBT_N_SESSION_ID, "r1", 2);
    assert_null(cbt_span_attr(&s, CBT_N_EXC_TYPE));
    const cbt_attr *a = cbt_span_event_attr(&s, 0, CBT_N_EXC_MESSAGE);
    assert_non_null(a);
    assert_int_equal(a->str_len, 8);
    assert_memory_equal(cbt_attr_str(&s, a), "too late", 8);
    a = cbt_span_event_attr(&s, 0, CBT_N_SESSION_ID);
    assert_memory_equal(cbt_attr_str(&s, a), "ev", 2);
    assert_true(cbt_span_event_attr(&s, 0, CBT_N_COUNT)->v.i64 == 3);
    assert_null(cbt_span_event_attr(&s, 1, CBT_N_COUNT)); /* no event 1 yet */
    for (uint32_t i = 1; i < CBT_SPAN_EVENTS_MAX; i++) {
        assert_int_equal(cbt_span_add_event(&s, CBT_N_EXCEPTION, 2000 + i, &ev), CBT_OK);
        assert_int_equal(ev, i);
    }
    assert_int_equal(s.flags, 0);
    assert_int_equal(cbt_span_add_event(&s, CBT_N_EXCEPTION, 9000, &ev), CBT_ERR_FULL);
    assert_int_equal(ev, UINT32_MAX);
    assert_int_equal(cbt_span_add_event(&s, CBT_N_EXCEPTION, 9000, NULL), CBT_ERR_FULL);
    assert_int_equal(s.events_dropped, 2);
    assert_true(s.flags & CBT_SPANF_EVENTS_DROPPED);
    assert_int_equal(s.n_events, CBT_SPAN_EVENTS_MAX);
    /* bad arguments */
    assert_int_equal(cbt_span_event_set_i64(&s, ev, CBT_N_COUNT, 1), CBT_ERR_INVAL);
    assert_int_equal(cbt_span_event_set_str(&s, CBT_SPAN_EVENTS_MAX, CBT_N_COUNT, "x", 1),
                     CBT_ERR_INVAL);
    assert_int_equal(cbt_span_event_set_i64(&s, 0, 0, 1), CBT_ERR_INVAL);
    assert_int_equal(cbt_span_event_set_str(&s, 0, CBT_N_COUNT, NULL, 1), CBT_ERR_INVAL);
    assert_int_equal(cbt_span_event_set_f64(NULL, 0, CBT_N_COUNT, 1), CBT_ERR_INVAL);
    assert_int_equal(cbt_span_add_event(&s, 0, 1, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_span_add_event(NULL, CBT_N_EXCEPTION, 1, NULL), CBT_ERR_INVAL);
    assert_null(cbt_span_event_attr(&s, CBT_SPAN_EVENTS_MAX, CBT_N_COUNT));
    /* the bound is shared: an event's attribute past it counts on the event */
    for (int i = 0; s.n_attrs < CBT_SPAN_ATTR_MAX; i++)
        assert_int_equal(cbt_span_set_i64(&s, k_many[i], i), CBT_OK);
    assert_int_equal(cbt_span_event_set_i64(&s, 2, CBT_N_COUNT, 1), CBT_ERR_FULL);
    assert_int_equal(s.events[2].attrs_dropped, 1);
    assert_int_equal(s.attrs_dropped, 0);
    assert_int_equal(s.flags & CBT_SPANF_ATTRS_DROPPED, 0);
    assert_int_equal(cbt_span_event_set_i64(&s, 0, CBT_N_COUNT, 4), CBT_OK); /* existing key */
    assert_true(cbt_span_event_attr(&s, 0, CBT_N_COUNT)->v.i64 == 4);
}

static void end_clamped_to_start(void **state)
{
    (void)state;
    start_with_probe(NULL);
    run_step(4);
    const cbt_span *s = find_by_name(n_clamp_span, 0);
    assert_non_null(s);
    assert_true(s->start_ns == 5000);
    assert_true(s->end_ns == 5000);
    s = find_by_name(n_clamp_span, 1);
    assert_non_null(s);
    assert_true(s->start_ns == 6000);
    assert_true(s->end_ns == 6000);
    tu_stop();
}

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

static void ids_and_parents(void **state)
{
    (void)state;
    start_with_probe(NULL);
    run_step(5);
    assert_int_equal(g.ids_null, 0);
    /* roots: fresh non-zero ids, no parent, a trace each */
    assert_false(all_zero(g.root1.trace_id, 16));
    assert_false(all_zero(g.root1.span_id, 8));
    assert_false(all_zero(g.root2.trace_id, 16));
    assert_false(all_zero(g.root2.span_id, 8));
    assert_true(all_zero(g.root1_parent, 8));
    assert_true(all_zero(g.root2_parent, 8));
    assert_memory_not_equal(g.root1.trace_id, g.root2.trace_id, 16);
    assert_true(cbt_span_ctx_valid(&g.root1));
    /* child: the parent's trace, the parent's span id as parent, its own id */
    assert_memory_equal(g.child.trace_id, g.root1.trace_id, 16);
    assert_memory_equal(g.child_parent, g.root1.span_id, 8);
    assert_false(all_zero(g.child.span_id, 8));
    /* grandchild: same trace, parent = child */
    assert_memory_equal(g.grandchild.trace_id, g.root1.trace_id, 16);
    assert_memory_equal(g.grand_parent, g.child.span_id, 8);
    /* an all-zero parent starts a new trace */
    assert_true(all_zero(g.zero_parent_parent, 8));
    assert_false(all_zero(g.zero_parent.trace_id, 16));
    assert_memory_not_equal(g.zero_parent.trace_id, g.root1.trace_id, 16);
    assert_memory_not_equal(g.zero_parent.trace_id, g.root2.trace_id, 16);
    /* span ids all distinct */
    const uint8_t *ids[5] = {g.root1.span_id, g.root2.span_id, g.child.span_id,
                             g.zero_parent.span_id, g.grandchild.span_id};
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < i; j++)
            assert_memory_not_equal(ids[i], ids[j], 8);
    /* the sink agrees */
    assert_int_equal(tu_count("test.ids", NULL), 5);
    int found_child = 0;
    for (uint32_t i = 0; i < 5; i++) {
        const cbt_span *s = find_by_name(n_ids_span, i);
        if (memcmp(s->ctx.span_id, g.child.span_id, 8) == 0) {
            found_child = 1;
            assert_memory_equal(s->parent_span_id, g.root1.span_id, 8);
            assert_memory_equal(s->ctx.trace_id, g.root1.trace_id, 16);
        }
    }
    assert_true(found_child);

    cbt_span_ctx zero;
    memset(&zero, 0, sizeof zero);
    assert_false(cbt_span_ctx_valid(&zero));
    assert_false(cbt_span_ctx_valid(NULL));
    tu_stop();
}

static void pool_exhaustion(void **state)
{
    (void)state;
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    c.span_pool = 4;
    c.mp_subscriber = false;
    start_with_probe(&c);
    cbt_metrics m0 = CBT_STRUCT_INIT(cbt_metrics);
    cbt_metrics m1 = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m0), CBT_OK);
    run_step(6);
    assert_int_equal(cbt_metrics_get(&m1), CBT_OK);
    for (int i = 0; i < 4; i++)
        assert_true(g.pool_got[i]);
    assert_false(g.pool_got[4]);
    assert_true(g.pool_got[5]); /* one ended: one start fits again */
    assert_int_equal(m1.spans_dropped - m0.spans_dropped, 1);
    assert_int_equal(m1.spans_started - m0.spans_started, 5);
    assert_int_equal(m1.spans_ended - m0.spans_ended, 5);
    assert_int_equal(m1.spans_open, 0);
    assert_int_equal(tu_count("test.pool", NULL), 5);
    tu_stop();
}

/* The in-memory sink keeps a span's events with their attributes. */
static void memsink_keeps_events(void **state)
{
    (void)state;
    start_with_probe(NULL);
    run_step(7);
    assert_true(g.ev_fresh);
    const cbt_span *s = tu_find("timeout", NULL, 0);
    assert_non_null(s);
    assert_int_equal(s->n_events, 1);
    assert_int_equal(s->events[0].name, CBT_N_EXCEPTION);
    assert_true(s->events[0].time_ns == 7000);
    const cbt_attr *a = cbt_span_event_attr(s, 0, CBT_N_EXC_MESSAGE);
    assert_non_null(a);
    assert_memory_equal(cbt_attr_str(s, a), "slow", 4);
    a = cbt_span_event_attr(s, 0, CBT_N_EXC_TYPE);
    assert_non_null(a);
    assert_memory_equal(cbt_attr_str(s, a), "TimeoutError", 12);
    str_attr_is(s, CBT_N_SESSION_ID, "probe", 5);
    assert_null(cbt_span_attr(s, CBT_N_EXC_TYPE));
    assert_non_null(tu_find("timeout", NULL, 1));
    assert_int_equal(tu_find("timeout", NULL, 1)->n_events, 0);
    tu_stop();
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void ids_unique(void **state)
{
    (void)state;
    enum { N = 100000 };
    uint64_t *v = malloc(N * sizeof *v);
    uint64_t *tv = malloc(N * sizeof *tv);
    assert_non_null(v);
    assert_non_null(tv);
    cbt_ids g1, g2;
    cbt_ids_seed(&g1);
    cbt_ids_seed(&g2);
    for (int i = 0; i < N; i++) {
        uint8_t id[8];
        cbt_ids_span(&g1, id);
        assert_false(all_zero(id, 8));
        memcpy(&v[i], id, 8);
    }
    qsort(v, N, sizeof *v, cmp_u64);
    for (int i = 1; i < N; i++)
        assert_true(v[i] != v[i - 1]);
    /* trace ids: non-zero, unique (compared on their first half, which
     * already must not collide in 100k draws) */
    for (int i = 0; i < N; i++) {
        uint8_t id[16];
        cbt_ids_trace(&g1, id);
        assert_false(all_zero(id, 16));
        assert_false(all_zero(id, 8));
        memcpy(&tv[i], id, 8);
    }
    qsort(tv, N, sizeof *tv, cmp_u64);
    for (int i = 1; i < N; i++)
        assert_true(tv[i] != tv[i - 1]);
    /* two generators seeded separately do not produce the same stream */
    int same = 0;
    for (int i = 0; i < 8; i++)
        same += cbt_ids_next(&g1) == cbt_ids_next(&g2);
    assert_true(same < 8);
    for (int i = 0; i < 1000; i++)
        assert_true(cbt_ids_next(&g2) != 0);
    free(v);
    free(tv);
}

/* ---- JSON ---------------------------------------------------------------------- */

/* A small strict JSON checker: one value, then optional '\n', then the end. */
typedef struct jp {
    const char *p, *end;
    int ok;
} jp;

static void jp_ws(jp *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\r'))
        j->p++;
}

static void jp_value(jp *j, int depth);

static void jp_string(jp *j)
{
    if (j->p >= j->end || *j->p != '"') {
        j->ok = 0;
        return;
    }
    j->p++;
    while (j->p < j->end && *j->p != '"') {
        unsigned char c = (unsigned char)*j->p;
        if (c < 0x20) {
            j->ok = 0;
            return;
        }
        if (c == '\\') {
            j->p++;
            if (j->p >= j->end) {
                j->ok = 0;
                return;
            }
            char e = *j->p;
            if (e == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (j->p + i >= j->end || !strchr("0123456789abcdefABCDEF", j->p[i]) ||
                        j->p[i] == '\0') {
                        j->ok = 0;
                        return;
                    }
                j->p += 4;
            } else if (!strchr("\"\\/bfnrt", e) || e == '\0') {
                j->ok = 0;
                return;
            }
        }
        j->p++;
    }
    if (j->p >= j->end) {
        j->ok = 0;
        return;
    }
    j->p++;
}

static void jp_number(jp *j)
{
    const char *s = j->p;
    if (j->p < j->end && *j->p == '-')
        j->p++;
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') {
        j->ok = 0;
        return;
    }
    if (*j->p == '0')
        j->p++;
    else
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
            j->p++;
    if (j->p < j->end && *j->p == '.') {
        j->p++;
        if (j->p >= j->end || *j->p < '0' || *j->p > '9')
            j->ok = 0;
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
            j->p++;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
            j->p++;
        if (j->p >= j->end || *j->p < '0' || *j->p > '9')
            j->ok = 0;
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
            j->p++;
    }
    if (j->p == s)
        j->ok = 0;
}

static void jp_lit(jp *j, const char *lit)
{
    size_t n = strlen(lit);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, lit, n) != 0) {
        j->ok = 0;
        return;
    }
    j->p += n;
}

static void jp_value(jp *j, int depth)
{
    jp_ws(j);
    if (!j->ok || j->p >= j->end || depth > 16) {
        j->ok = 0;
        return;
    }
    char c = *j->p;
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->p++;
        jp_ws(j);
        if (j->p < j->end && *j->p == close) {
            j->p++;
            return;
        }
        for (;;) {
            if (c == '{') {
                jp_ws(j);
                jp_string(j);
                jp_ws(j);
                if (!j->ok || j->p >= j->end || *j->p != ':') {
                    j->ok = 0;
                    return;
                }
                j->p++;
            }
            jp_value(j, depth + 1);
            jp_ws(j);
            if (!j->ok || j->p >= j->end) {
                j->ok = 0;
                return;
            }
            if (*j->p == ',') {
                j->p++;
                continue;
            }
            if (*j->p == close) {
                j->p++;
                return;
            }
            j->ok = 0;
            return;
        }
    } else if (c == '"') {
        jp_string(j);
    } else if (c == 't') {
        jp_lit(j, "true");
    } else if (c == 'f') {
        jp_lit(j, "false");
    } else if (c == 'n') {
        jp_lit(j, "null");
    } else {
        jp_number(j);
    }
}

/* Valid UTF-8 throughout (no overlongs, surrogates or stray bytes). */
static int utf8_ok(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        unsigned cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            len = 2, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return 0;
        }
        if (i + len > n)
            return 0;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += len;
    }
    return 1;
}

static int json_line_ok(const char *s, size_t n)
{
    jp j = {s, s + n, 1};
    jp_value(&j, 0);
    if (j.ok && j.p < j.end && *j.p == '\n')
        j.p++;
    return j.ok && j.p == j.end && utf8_ok((const unsigned char *)s, n);
}

/* The raw JSON text of the value of "key" inside `json` (first match), up to
 * the next ',' or '}' at depth 0 outside strings. */
static void json_value_of(const char *json, const char *key, char *out, size_t cap)
{
    char pat[96];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(json, pat);
    assert_non_null(p);
    p += strlen(pat);
    size_t i = 0;
    int in_str = 0, depth = 0;
    for (; p[i]; i++) {
        char c = p[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = 0;
            continue;
        }
        if (c == '"')
            in_str = 1;
        else if (c == '{' || c == '[')
            depth++;
        else if ((c == '}' || c == ']') && depth > 0)
            depth--;
        else if ((c == ',' || c == '}' || c == ']') && depth == 0)
            break;
    }
    assert_true(i < cap);
    memcpy(out, p, i);
    out[i] = '\0';
}

static int is_hex_string(const char *v, size_t digits)
{
    if (strlen(v) != digits + 2 || v[0] != '"' || v[digits + 1] != '"')
        return 0;
    for (size_t i = 1; i <= digits; i++)
        if (!strchr("0123456789abcdef", v[i]) || v[i] == '\0')
            return 0;
    return 1;
}

static void make_json_span(cbt_span *s, int child)
{
    memset(s, 0, sizeof *s);
    for (int i = 0; i < 16; i++)
        s->ctx.trace_id[i] = (uint8_t)(0x01 + i);
    for (int i = 0; i < 8; i++)
        s->ctx.span_id[i] = (uint8_t)(0xa1 + i);
    if (child)
        for (int i = 0; i < 8; i++)
            s->parent_span_id[i] = (uint8_t)(0xf0 + i);
    s->name = child ? CBT_N_MP_STORE : CBT_N_REQUEST;
    s->kind = child ? CBT_SPAN_KIND_INTERNAL : CBT_SPAN_KIND_SERVER;
    s->start_ns = 1700000000123456789ull;
    s->end_ns = 1700000000223456789ull;
}

static void span_json(void **state)
{
    (void)state;
    names_once();
    cbt_name k_ht = CBT_N_HIT_TOKENS, k_hr = CBT_N_HIT_RATE, k_ratio = tu_name("ratio"),
             k_neg = tu_name("neg"), k_big = tu_name("big"), k_flag = tu_name("flag"),
             k_bad = tu_name("bad_utf8"), k_esc = tu_name("escaped"), k_u8 = tu_name("utf8"),
             k_small = tu_name("small");
    cbt_span s;
    make_json_span(&s, 0);
    assert_int_equal(cbt_span_set_i64(&s, k_ht, 5), CBT_OK);
    assert_int_equal(cbt_span_set_f64(&s, k_hr, 1.0), CBT_OK);
    assert_int_equal(cbt_span_set_f64(&s, k_ratio, 0.1), CBT_OK);
    assert_int_equal(cbt_span_set_i64(&s, k_neg, -3), CBT_OK);
    assert_int_equal(cbt_span_set_i64(&s, k_big, 1000000000000000LL), CBT_OK);
    assert_int_equal(cbt_span_set_bool(&s, k_flag, true), CBT_OK);
    assert_int_equal(cbt_span_set_str(&s, k_bad, "a\xff" "b\xc3", 4), CBT_OK);
    static const char esc[] = "q\"x\n\t\\e\x01";
    assert_int_equal(cbt_span_set_str(&s, k_esc, esc, sizeof esc - 1), CBT_OK);
    static const char u8[] = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";
    assert_int_equal(cbt_span_set_str(&s, k_u8, u8, sizeof u8 - 1), CBT_OK);
    assert_int_equal(cbt_span_set_f64(&s, k_small, 1e-300), CBT_OK);

    char buf[8192];
    size_t n = cbt_span_to_json(&s, buf, sizeof buf);
    assert_true(n > 0 && n < sizeof buf);
    assert_int_equal(strlen(buf), n);
    assert_int_equal(buf[n - 1], '\n');
    assert_int_equal(buf[n - 2], '}');
    assert_true(strncmp(buf, "{\"trace_id\":\"", 13) == 0);
    if (!json_line_ok(buf, n))
        fail_msg("not valid JSON: %s", buf);

    char v[512];
    json_value_of(buf, "trace_id", v, sizeof v);
    assert_true(is_hex_string(v, 32));
    assert_string_equal(v, "\"0102030405060708090a0b0c0d0e0f10\"");
    json_value_of(buf, "span_id", v, sizeof v);
    assert_true(is_hex_string(v, 16));
    assert_string_equal(v, "\"a1a2a3a4a5a6a7a8\"");
    json_value_of(buf, "parent_span_id", v, sizeof v);
    assert_string_equal(v, "\"\""); /* a root */
    json_value_of(buf, "name", v, sizeof v);
    assert_string_equal(v, "\"request\"");
    json_value_of(buf, "start_ns", v, sizeof v);
    assert_string_equal(v, "1700000000123456789");
    json_value_of(buf, "end_ns", v, sizeof v);
    assert_string_equal(v, "1700000000223456789");
    json_value_of(buf, "attributes", v, sizeof v);
    assert_true(v[0] == '{');

    /* ints without '.', doubles always with '.' or an exponent */
    json_value_of(buf, "hit_tokens", v, sizeof v);
    assert_string_equal(v, "5");
    json_value_of(buf, "neg", v, sizeof v);
    assert_string_equal(v, "-3");
    json_value_of(buf, "big", v, sizeof v);
    assert_string_equal(v, "1000000000000000");
    json_value_of(buf, "hit_rate", v, sizeof v);
    assert_string_equal(v, "1.0");
    json_value_of(buf, "ratio", v, sizeof v);
    assert_string_equal(v, "0.1");
    json_value_of(buf, "small", v, sizeof v);
    assert_true(strpbrk(v, ".eE") != NULL);
    assert_true(strtod(v, NULL) == 1e-300);
    json_value_of(buf, "flag", v, sizeof v);
    assert_string_equal(v, "true");
    /* invalid UTF-8: each bad sequence becomes U+FFFD */
    json_value_of(buf, "bad_utf8", v, sizeof v);
    assert_string_equal(v, "\"a\\ufffdb\\ufffd\"");
    /* quotes, backslashes and control characters escaped */
    json_value_of(buf, "escaped", v, sizeof v);
    const char *want_a = "\"q\\\"x\\n\\t\\\\e\\u0001\"";
    const char *want_b = "\"q\\\"x\\u000a\\u0009\\\\e\\u0001\"";
    if (strcmp(v, want_a) != 0 && strcmp(v, want_b) != 0)
        fail_msg("escaped string written as %s", v);
    /* valid UTF-8 passes through */
    json_value_of(buf, "utf8", v, sizeof v);
    assert_string_equal(v, "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");

    /* a child names its parent */
    cbt_span c;
    make_json_span(&c, 1);
    char cbuf[1024];
    size_t cn = cbt_span_to_json(&c, cbuf, sizeof cbuf);
    assert_true(cn < sizeof cbuf);
    assert_true(json_line_ok(cbuf, cn));
    json_value_of(cbuf, "parent_span_id", v, sizeof v);
    assert_string_equal(v, "\"f0f1f2f3f4f5f6f7\"");
    json_value_of(cbuf, "name", v, sizeof v);
    assert_string_equal(v, "\"mp.store\"");

    /* too small: the needed length comes back and nothing past cap is written */
    char small[64];
    for (size_t cap = 0; cap < 40; cap += 7) {
        memset(small, 'Z', sizeof small);
        size_t need = cbt_span_to_json(&s, small, cap);
        assert_int_equal(need, n);
        for (size_t i = cap; i < sizeof small; i++)
            assert_int_equal(small[i], 'Z');
    }
    char *exact = malloc(n + 1 + 8);
    assert_non_null(exact);
    memset(exact, 'Z', n + 9);
    assert_int_equal(cbt_span_to_json(&s, exact, n + 1), n);
    assert_memory_equal(exact, buf, n + 1);
    assert_int_equal(exact[n + 1], 'Z');
    memset(exact, 'Z', n + 9);
    assert_int_equal(cbt_span_to_json(&s, exact, n - 1), n);
    for (size_t i = n - 1; i < n + 9; i++)
        assert_int_equal(exact[i], 'Z');
    free(exact);
}

/* Span events in the JSON form: an "events" array after the span's own
 * attributes, which do not include the events'. */
static void span_json_events(void **state)
{
    (void)state;
    names_once();
    static cbt_span s;
    make_json_span(&s, 0);
    char buf[4096], v[1024];
    size_t n = cbt_span_to_json(&s, buf, sizeof buf);
    assert_true(n < sizeof buf && json_line_ok(buf, n));
    json_value_of(buf, "events", v, sizeof v);
    assert_string_equal(v, "[]");
    json_value_of(buf, "dropped_events", v, sizeof v);
    assert_string_equal(v, "0");
    json_value_of(buf, "truncated_attributes", v, sizeof v);
    assert_string_equal(v, "0");

    assert_int_equal(cbt_span_set_i64(&s, CBT_N_HIT_TOKENS, 5), CBT_OK);
    uint32_t e0, e1;
    assert_int_equal(cbt_span_add_event(&s, CBT_N_EXCEPTION, 1700000000123456790ull, &e0), CBT_OK);
    assert_int_equal(cbt_span_event_set_str(&s, e0, CBT_N_EXC_TYPE, "TimeoutError", 12), CBT_OK);
    assert_int_equal(cbt_span_event_set_str(&s, e0, CBT_N_EXC_MESSAGE, "no \"reply\"", 10),
                     CBT_OK);
    assert_int_equal(cbt_span_event_set_str(&s, e0, CBT_N_EXC_STACKTRACE, "Traceback\n  x", 13),
                     CBT_OK);
    assert_int_equal(cbt_span_event_set_i64(&s, e0, CBT_N_COUNT, 2), CBT_OK);
    assert_int_equal(cbt_span_add_event(&s, tu_name("retry"), 1700000000123456800ull, &e1), CBT_OK);
    assert_int_equal(cbt_span_event_set_f64(&s, e1, CBT_N_HIT_RATE, 1.0), CBT_OK);
    assert_int_equal(cbt_span_event_set_bool(&s, e1, CBT_N_FAILED, false), CBT_OK);
    s.events[e1].attrs_dropped = 3;
    s.events_dropped = 1;
    n = cbt_span_to_json(&s, buf, sizeof buf);
    assert_true(n < sizeof buf);
    if (!json_line_ok(buf, n))
        fail_msg("not valid JSON: %s", buf);
    json_value_of(buf, "attributes", v, sizeof v);
    assert_string_equal(v, "{\"hit_tokens\":5}");
    json_value_of(buf, "events", v, sizeof v);
    assert_string_equal(v, "[{\"name\":\"exception\",\"time_unix_nano\":1700000000123456790,"
                           "\"attributes\":{\"exception.type\":\"TimeoutError\","
                           "\"exception.message\":\"no \\\"reply\\\"\","
                           "\"exception.stacktrace\":\"Traceback\\u000a  x\",\"count\":2},"
                           "\"dropped_attributes\":0},"
                           "{\"name\":\"retry\",\"time_unix_nano\":1700000000123456800,"
                           "\"attributes\":{\"hit_rate\":1.0,\"failed\":false},"
                           "\"dropped_attributes\":3}]");
    json_value_of(buf, "dropped_events", v, sizeof v);
    assert_string_equal(v, "1");
}

/* No span is longer in JSON than CBT_SPAN_JSON_MAX, the line buffer of the
 * JSON-lines sink and the trace file: a 63-byte name and 32 63-byte keys of
 * control characters (six bytes each when escaped), a full arena of them,
 * four events with such names. */
static void span_json_bound(void **state)
{
    (void)state;
    static cbt_span s;
    make_json_span(&s, 1);
    char nm[CBT_NAME_LEN_MAX];
    memset(nm, 0x01, sizeof nm - 1);
    nm[sizeof nm - 1] = '\0';
    s.name = tu_name(nm);
    s.flags = CBT_SPANF_INCOMPLETE;
    s.attrs_dropped = s.events_dropped = s.attrs_truncated = UINT16_MAX;
    char val[CBT_SPAN_STR_ARENA / CBT_SPAN_ATTR_MAX];
    memset(val, 0x02, sizeof val);
    for (int i = 0; i < CBT_SPAN_ATTR_MAX; i++) {
        nm[sizeof nm - 2] = (char)(0x03 + i);
        assert_int_equal(cbt_span_set_str(&s, tu_name(nm), val, sizeof val), CBT_OK);
    }
    assert_int_equal(s.arena_used, CBT_SPAN_STR_ARENA);
    for (int i = 0; i < CBT_SPAN_EVENTS_MAX; i++) {
        nm[sizeof nm - 2] = (char)(0x40 + i);
        assert_int_equal(cbt_span_add_event(&s, tu_name(nm), UINT64_MAX, NULL), CBT_OK);
        s.events[i].attrs_dropped = UINT16_MAX;
    }
    for (int i = 0; i < CBT_SPAN_ATTR_MAX; i += 2)
        s.attrs[i].owner = (uint8_t)(1 + (i / 2) % CBT_SPAN_EVENTS_MAX);
    static char buf[CBT_SPAN_JSON_MAX + 1];
    size_t n = cbt_span_to_json(&s, buf, sizeof buf);
    print_message("worst-case span: %zu JSON bytes (bound %d)\n", n, (int)CBT_SPAN_JSON_MAX);
    assert_true(n <= CBT_SPAN_JSON_MAX);
    assert_true(json_line_ok(buf, n));
}

/* The JSON-lines sink: one MP request, shut down, read the file back. */
static void jsonl_sink_file(void **state)
{
    (void)state;
    char path[] = "/tmp/cbt_test_spans_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    c.jsonl_path = path;
    tu_start(&c);
    const char *sid = "jsonl-\"req\"-1";
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_START, sid);
    tu_pub_i64(CBT_EV_MP_LOOKUP_PREFETCH_END, sid, "hit_tokens", 256, "requested_tokens", 512);
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    tu_pub(CBT_EV_MP_STORE_START, sid);
    tu_pub(CBT_EV_MP_STORE_END, sid);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_stop();
    assert_int_equal(tu_span_count(), 3);

    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[8192];
    int lines = 0, roots = 0, lps = 0, stores = 0;
    char root_id[64] = "", parents[2][64];
    while (fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        assert_true(n > 2 && line[n - 1] == '\n');
        assert_true(strncmp(line, "{\"trace_id\":\"", 13) == 0);
        assert_int_equal(line[n - 2], '}');
        if (!json_line_ok(line, n))
            fail_msg("line %d is not valid JSON: %s", lines + 1, line);
        char v[512];
        json_value_of(line, "session_id", v, sizeof v);
        assert_string_equal(v, "\"jsonl-\\\"req\\\"-1\"");
        json_value_of(line, "incomplete", v, sizeof v);
        assert_string_equal(v, "false");
        json_value_of(line, "name", v, sizeof v);
        if (strcmp(v, "\"request\"") == 0) {
            roots++;
            json_value_of(line, "span_id", root_id, sizeof root_id);
            json_value_of(line, "parent_span_id", v, sizeof v);
            assert_string_equal(v, "\"\"");
            json_value_of(line, "hit_rate", v, sizeof v);
            assert_string_equal(v, "0.5");
            json_value_of(line, "hit_tokens", v, sizeof v);
            assert_string_equal(v, "256");
        } else {
            if (strcmp(v, "\"mp.lookup_prefetch\"") == 0)
                lps++;
            else if (strcmp(v, "\"mp.store\"") == 0)
                stores++;
            else
                fail_msg("unexpected span %s", v);
            assert_true(lps + stores <= 2);
            json_value_of(line, "parent_span_id", parents[lps + stores - 1], 64);
        }
        lines++;
    }
    fclose(f);
    unlink(path);
    assert_int_equal(lines, 3);
    assert_int_equal(roots, 1);
    assert_int_equal(lps, 1);
    assert_int_equal(stores, 1);
    assert_true(is_hex_string(root_id, 16));
    assert_string_equal(parents[0], root_id);
    assert_string_equal(parents[1], root_id);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(typed_attributes),
        cmocka_unit_test(seventeenth_attribute),
        cmocka_unit_test(string_arena),
        cmocka_unit_test(thirty_two_attributes),
        cmocka_unit_test(overwrite_does_not_leak),
        cmocka_unit_test(long_string_truncated),
        cmocka_unit_test(span_events),
        cmocka_unit_test(end_clamped_to_start),
        cmocka_unit_test(ids_and_parents),
        cmocka_unit_test(pool_exhaustion),
        cmocka_unit_test(memsink_keeps_events),
        cmocka_unit_test(ids_unique),
        cmocka_unit_test(span_json),
        cmocka_unit_test(span_json_events),
        cmocka_unit_test(span_json_bound),
        cmocka_unit_test(jsonl_sink_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
