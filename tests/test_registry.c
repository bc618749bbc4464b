/* tests/test_registry.c — the (session, tag) hash table (host/internal/strtab.h)
 * against a reference model, and the public span registry (cbt/span.h) from
 * a subscriber on the harvester thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal/strtab.h"
#include "testutil.h"

/* ---- strtab vs a reference model ------------------------------------------ */

#define ST_CAP 64u
#define ST_LIMIT 48u
#define ST_KEYS 120
#define ST_OPS 200000

typedef struct st_val {
    uint64_t key_id;
    uint64_t version;
    uint64_t check; /* key_id ^ version ^ magic */
} st_val;

#define ST_MAGIC 0x5eed5eed12345678ull

typedef struct st_key {
    char s[CBT_SESSION_MAX];
    size_t len;
    uint16_t tag;
    uint32_t home;
    /* model */
    int present;
    uint64_t version;
} st_key;

static st_key g_keys[ST_KEYS];

static uint64_t g_rng;
static uint64_t rnd(void)
{
    /* splitmix64 */
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int is_cluster(uint32_t home) { return home >= ST_CAP - 3 || home <= 1; }

/* Half the keys have their home slot in {61, 62, 63, 0, 1}: long probe runs
 * that wrap around the end of the table; the rest are anywhere. Keys of
 * different tags may share a string. */
static void make_keys(void)
{
    int n = 0, tries = 0;
    while (n < ST_KEYS / 2) {
        st_key *k = &g_keys[n];
        memset(k, 0, sizeof *k);
        snprintf(k->s, sizeof k->s, "clu-%d", tries);
        k->len = strlen(k->s);
        k->tag = (uint16_t)(tries % 3);
        k->home = (uint32_t)cbt_strtab_hash(k->s, k->len, k->tag) & (ST_CAP - 1);
        tries++;
        if (is_cluster(k->home))
            n++;
    }
    for (int i = 0; n < ST_KEYS; i++, n++) {
        st_key *k = &g_keys[n];
        memset(k, 0, sizeof *k);
        if (i % 2 == 1) {
            /* same string as the previous key, another tag */
            memcpy(k->s, g_keys[n - 1].s, sizeof k->s);
            k->len = g_keys[n - 1].len;
            k->tag = 7;
        } else {
            /* lengths 1..63, arbitrary bytes (no NUL needed: keys are counted) */
            k->len = 1 + (size_t)(rnd() % 63);
            for (size_t j = 0; j < k->len; j++)
                k->s[j] = (char)(1 + rnd() % 255);
            k->tag = 0x8001;
        }
        k->home = (uint32_t)cbt_strtab_hash(k->s, k->len, k->tag) & (ST_CAP - 1);
    }
    /* no two keys equal */
    for (int a = 0; a < ST_KEYS; a++)
        for (int b = 0; b < a; b++)
            assert_false(g_keys[a].tag == g_keys[b].tag && g_keys[a].len == g_keys[b].len &&
                         memcmp(g_keys[a].s, g_keys[b].s, g_keys[a].len) == 0);
}

static uint32_t model_count(void)
{
    uint32_t c = 0;
    for (int i = 0; i < ST_KEYS; i++)
        c += (uint32_t)g_keys[i].present;
    return c;
}

static void check_key(cbt_strtab *t, int i)
{
    st_key *k = &g_keys[i];
    st_val *v = cbt_strtab_find(t, k->s, k->len, k->tag);
    if (!k->present) {
        assert_null(v);
        return;
    }
    assert_non_null(v);
    assert_true(v->key_id == (uint64_t)i);
    assert_true(v->version == k->version);
    assert_true(v->check == ((uint64_t)i ^ k->version ^ ST_MAGIC));
    const cbt_strtab_key *kk = cbt_strtab_key_of(t, v);
    assert_int_equal(kk->len, k->len);
    assert_int_equal(kk->tag, k->tag);
    assert_memory_equal(kk->s, k->s, k->len);
    assert_true(kk->hash != 0);
}

static void check_all(cbt_strtab *t)
{
    for (int i = 0; i < ST_KEYS; i++)
        check_key(t, i);
    assert_int_equal(t->count, model_count());
    /* every occupied slot holds a key the model has, with its value */
    uint32_t occupied = 0;
    for (uint32_t s = 0; s < ST_CAP; s++) {
        st_val *v = cbt_strtab_slot(t, s);
        if (!v)
            continue;
        occupied++;
        assert_true(v->key_id < ST_KEYS);
        assert_true(g_keys[v->key_id].present);
        assert_true(v->version == g_keys[v->key_id].version);
    }
    assert_int_equal(occupied, t->count);
}

static void strtab_random_vs_model(void **state)
{
    (void)state;
    const char *env = getenv("CBT_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 0) : 0x7ab1e5eedull;
    g_rng = seed;
    fprintf(stderr, "# strtab seed 0x%llx\n", (unsigned long long)seed);
    make_keys();
    cbt_strtab t;
    assert_int_equal(cbt_strtab_init(&t, ST_CAP, ST_LIMIT, sizeof(st_val)), CBT_OK);
    uint64_t version = 0;
    uint64_t full_refusals = 0, removals = 0, inserts = 0;
    for (int op = 0; op < ST_OPS; op++) {
        int i = (int)(rnd() % ST_KEYS);
        st_key *k = &g_keys[i];
        uint32_t r = (uint32_t)(rnd() % 100);
        /* bias: insert more while under half full, remove more when near full */
        uint32_t ins_pct = model_count() < ST_LIMIT / 2 ? 60 : 40;
        if (r < ins_pct) {
            int created = -1;
            st_val *v = cbt_strtab_upsert(&t, k->s, k->len, k->tag, &created);
            if (k->present) {
                assert_non_null(v);
                assert_int_equal(created, 0);
                assert_true(v->key_id == (uint64_t)i && v->version == k->version);
            } else if (model_count() >= ST_LIMIT) {
                assert_null(v);
                assert_int_equal(created, 0);
                full_refusals++;
            } else {
                assert_non_null(v);
                assert_int_equal(created, 1);
                /* a new value is zeroed */
                assert_true(v->key_id == 0 && v->version == 0 && v->check == 0);
                k->present = 1;
                inserts++;
            }
            if (v) {
                k->version = ++version;
                v->key_id = (uint64_t)i;
                v->version = k->version;
                v->check = (uint64_t)i ^ k->version ^ ST_MAGIC;
            }
        } else if (r < 80) {
            st_val *v = cbt_strtab_find(&t, k->s, k->len, k->tag);
            if (k->present) {
                assert_non_null(v);
                cbt_strtab_remove(&t, v);
                k->present = 0;
                removals++;
            } else {
                assert_null(v);
            }
        } else {
            check_key(&t, i);
        }
        assert_int_equal(t.count, model_count());
        check_key(&t, i);
        if ((op & 31) == 0)
            check_all(&t);
    }
    check_all(&t);
    fprintf(stderr, "# strtab: %llu inserts, %llu removals, %llu refused when full\n",
            (unsigned long long)inserts, (unsigned long long)removals,
            (unsigned long long)full_refusals);
    assert_true(full_refusals > 100);
    assert_true(removals > 10000);
    /* empty it completely: everything left must still be findable */
    for (int i = 0; i < ST_KEYS; i++) {
        if (!g_keys[i].present)
            continue;
        st_val *v = cbt_strtab_find(&t, g_keys[i].s, g_keys[i].len, g_keys[i].tag);
        assert_non_null(v);
        cbt_strtab_remove(&t, v);
        g_keys[i].present = 0;
        check_all(&t);
    }
    assert_int_equal(t.count, 0);
    cbt_strtab_free(&t);
}

/* Remove in every order within one wrapping cluster: the exhaustive small
 * case behind backward-shift deletion. */
static void strtab_cluster_removals(void **state)
{
    (void)state;
    g_rng = 99;
    make_keys();
    /* the first 6 cluster keys, all removal orders of them (720) */
    int idx[6] = {0, 1, 2, 3, 4, 5};
    int perm[6];
    int count = 0;
    for (int p = 0; p < 720; p++) {
        /* p -> permutation (factorial number system) */
        int pool[6];
        memcpy(pool, idx, sizeof pool);
        int rest = p, left = 6;
        for (int j = 0; j < 6; j++) {
            int f = 1;
            for (int q = 2; q < left; q++)
                f *= q;
            int pick = rest / f;
            rest %= f;
            perm[j] = pool[pick];
            memmove(&pool[pick], &pool[pick + 1], (size_t)(left - pick - 1) * sizeof(int));
            left--;
        }
        cbt_strtab t;
        assert_int_equal(cbt_strtab_init(&t, ST_CAP, ST_LIMIT, sizeof(st_val)), CBT_OK);
        for (int i = 0; i < ST_KEYS; i++)
            g_keys[i].present = 0;
        /* 6 cluster keys plus 10 spread keys */
        for (int i = 0; i < 6; i++) {
            st_val *v = cbt_strtab_upsert(&t, g_keys[i].s, g_keys[i].len, g_keys[i].tag, NULL);
            assert_non_null(v);
            g_keys[i].present = 1;
            g_keys[i].version = (uint64_t)p * 100 + (uint64_t)i;
            *v = (st_val){(uint64_t)i, g_keys[i].version, (uint64_t)i ^ g_keys[i].version ^ ST_MAGIC};
        }
        for (int i = ST_KEYS / 2; i < ST_KEYS / 2 + 10; i++) {
            st_val *v = cbt_strtab_upsert(&t, g_keys[i].s, g_keys[i].len, g_keys[i].tag, NULL);
            assert_non_null(v);
            g_keys[i].present = 1;
            g_keys[i].version = 7;
            *v = (st_val){(uint64_t)i, 7, (uint64_t)i ^ 7 ^ ST_MAGIC};
        }
        check_all(&t);
        for (int j = 0; j < 6; j++) {
            st_key *k = &g_keys[perm[j]];
            st_val *v = cbt_strtab_find(&t, k->s, k->len, k->tag);
            assert_non_null(v);
            cbt_strtab_remove(&t, v);
            k->present = 0;
            check_all(&t);
        }
        cbt_strtab_free(&t);
        count++;
    }
    assert_int_equal(count, 720);
}

static void strtab_limits(void **state)
{
    (void)state;
    cbt_strtab t;
    /* bad shapes */
    assert_int_equal(cbt_strtab_init(&t, 0, 1, 8), CBT_ERR_INVAL);
    assert_int_equal(cbt_strtab_init(&t, 1, 0, 8), CBT_ERR_INVAL);
    assert_int_equal(cbt_strtab_init(&t, 48, 8, 8), CBT_ERR_INVAL);
    assert_int_equal(cbt_strtab_init(&t, 64, 64, 8), CBT_ERR_INVAL);

    /* a full table refuses inserts but still finds and updates */
    assert_int_equal(cbt_strtab_init(&t, ST_CAP, ST_LIMIT, sizeof(uint64_t)), CBT_OK);
    char s[CBT_SESSION_MAX + 8];
    for (uint32_t i = 0; i < ST_LIMIT; i++) {
        snprintf(s, sizeof s, "full-%u", i);
        int created = 0;
        uint64_t *v = cbt_strtab_upsert(&t, s, strlen(s), 3, &created);
        assert_non_null(v);
        assert_int_equal(created, 1);
        *v = i + 1;
    }
    assert_int_equal(t.count, ST_LIMIT);
    int created = 5;
    assert_null(cbt_strtab_upsert(&t, "one-more", 8, 3, &created));
    assert_int_equal(created, 0);
    assert_null(cbt_strtab_upsert(&t, "full-0", 6, 4, NULL)); /* same string, other tag */
    assert_int_equal(t.count, ST_LIMIT);
    uint64_t *v = cbt_strtab_upsert(&t, "full-7", 6, 3, &created);
    assert_non_null(v);
    assert_int_equal(created, 0);
    assert_true(*v == 8);
    for (uint32_t i = 0; i < ST_LIMIT; i++) {
        snprintf(s, sizeof s, "full-%u", i);
        v = cbt_strtab_find(&t, s, strlen(s), 3);
        assert_non_null(v);
        assert_true(*v == i + 1);
    }
    /* free one: one insert fits again */
    cbt_strtab_remove(&t, cbt_strtab_find(&t, "full-20", 7, 3));
    assert_int_equal(t.count, ST_LIMIT - 1);
    assert_null(cbt_strtab_find(&t, "full-20", 7, 3));
    assert_non_null(cbt_strtab_upsert(&t, "one-more", 8, 3, &created));
    assert_int_equal(created, 1);
    assert_null(cbt_strtab_upsert(&t, "two-more", 8, 3, NULL));
    cbt_strtab_free(&t);

    /* key length: 63 bytes fit, 64 do not */
    assert_int_equal(cbt_strtab_init(&t, 16, 8, sizeof(uint64_t)), CBT_OK);
    memset(s, 'k', sizeof s);
    v = cbt_strtab_upsert(&t, s, 63, 0, &created);
    assert_non_null(v);
    assert_int_equal(created, 1);
    *v = 63;
    const cbt_strtab_key *kk = cbt_strtab_key_of(&t, v);
    assert_int_equal(kk->len, 63);
    assert_memory_equal(kk->s, s, 63);
    v = cbt_strtab_find(&t, s, 63, 0);
    assert_non_null(v);
    assert_true(*v == 63);
    created = 5;
    assert_null(cbt_strtab_upsert(&t, s, 64, 0, &created));
    assert_int_equal(created, 0);
    assert_null(cbt_strtab_find(&t, s, 64, 0));
    assert_null(cbt_strtab_upsert(&t, s, 200, 0, NULL));
    assert_int_equal(t.count, 1);
    /* a 62-byte prefix is another key */
    assert_null(cbt_strtab_find(&t, s, 62, 0));
    /* the empty key is a key */
    v = cbt_strtab_upsert(&t, "", 0, 0, &created);
    assert_non_null(v);
    assert_int_equal(created, 1);
    assert_int_equal(t.count, 2);
    assert_non_null(cbt_strtab_find(&t, "", 0, 0));
    cbt_strtab_free(&t);
}

/* ---- the public registry, exercised on the harvester thread ----------------- */

#define R_MAX 64

static cbt_event_type g_ev_probe;
static cbt_name k_step;

/* Results recorded by the subscriber, checked on the test thread after a
 * flush (the flush handshake orders them). */
static struct {
    int ran;
    cbt_status st[R_MAX];
    uint32_t cnt[R_MAX];
    cbt_span_ctx got[R_MAX];
} g_r;

static cbt_span_ctx mkctx(uint8_t seed)
{
    cbt_span_ctx c;
    for (int i = 0; i < 16; i++)
        c.trace_id[i] = (uint8_t)(seed * 16 + i + 1);
    for (int i = 0; i < 8; i++)
        c.span_id[i] = (uint8_t)(seed * 8 + i + 101);
    c.trace_flags = 1;
    return c;
}

static int ctx_eq(const cbt_span_ctx *a, const cbt_span_ctx *b)
{
    return memcmp(a->trace_id, b->trace_id, 16) == 0 &&
           memcmp(a->span_id, b->span_id, 8) == 0 && a->trace_flags == b->trace_flags;
}

static cbt_status api_on_event(void *ctx, cbt_tracer *t, const cbt_event *ev)
{
    (void)ctx;
    if (ev->type != g_ev_probe)
        return CBT_OK;
    cbt_span_ctx A = mkctx(1), B = mkctx(2), C = mkctx(3), out;
    char s63[64], s64[65];
    memset(s63, 's', 63);
    s63[63] = '\0';
    memset(s64, 'l', 64);
    s64[64] = '\0';
    int n = 0;
#define REC(expr)                                   \
    do {                                            \
        memset(&out, 0, sizeof out);                \
        g_r.st[n] = (expr);                         \
        g_r.got[n] = out;                           \
        g_r.cnt[n] = cbt_registry_count(t);         \
        n++;                                        \
    } while (0)
#define REC_VOID(expr)                              \
    do {                                            \
        expr;                                       \
        g_r.st[n] = CBT_OK;                         \
        g_r.cnt[n] = cbt_registry_count(t);         \
        n++;                                        \
    } while (0)
    REC(cbt_registry_get(t, "sA", CBT_N_REQUEST, &out));      /* 0: empty */
    REC(cbt_registry_put(t, "sA", CBT_N_REQUEST, &A));        /* 1 */
    REC(cbt_registry_get(t, "sA", CBT_N_REQUEST, &out));      /* 2: A */
    REC(cbt_registry_get(t, "sA", CBT_N_STORE, &out));        /* 3: other name */
    REC(cbt_registry_get(t, "sB", CBT_N_REQUEST, &out));      /* 4: other session */
    REC(cbt_registry_put(t, "sA", CBT_N_REQUEST, &B));        /* 5: replace */
    REC(cbt_registry_get(t, "sA", CBT_N_REQUEST, &out));      /* 6: B */
    REC_VOID(cbt_registry_remove(t, "sA", CBT_N_REQUEST, &A)); /* 7: not B: kept */
    REC(cbt_registry_get(t, "sA", CBT_N_REQUEST, &out));      /* 8: still B */
    REC(cbt_registry_put(t, "sA", CBT_N_STORE, &C));          /* 9 */
    REC(cbt_registry_put(t, "sB", CBT_N_REQUEST, &A));        /* 10 */
    REC_VOID(cbt_registry_remove(t, "sA", CBT_N_REQUEST, NULL)); /* 11: unconditional */
    REC(cbt_registry_get(t, "sA", CBT_N_REQUEST, &out));      /* 12: gone */
    REC(cbt_registry_get(t, "sA", CBT_N_STORE, &out));        /* 13: C stays */
    REC(cbt_registry_get(t, "sB", CBT_N_REQUEST, &out));      /* 14: A stays */
    REC_VOID(cbt_registry_remove(t, "sA", CBT_N_STORE, &C));  /* 15: matching ctx */
    REC(cbt_registry_get(t, "sA", CBT_N_STORE, &out));        /* 16: gone */
    REC_VOID(cbt_registry_remove(t, "nobody", CBT_N_STORE, NULL)); /* 17: absent: no-op */
    REC(cbt_registry_put(t, s63, CBT_N_RETRIEVE, &C));        /* 18: 63 bytes */
    REC(cbt_registry_get(t, s63, CBT_N_RETRIEVE, &out));      /* 19: C */
    REC(cbt_registry_put(t, s64, CBT_N_RETRIEVE, &C));        /* 20: 64 bytes */
    REC(cbt_registry_get(t, s64, CBT_N_RETRIEVE, &out));      /* 21 */
    REC(cbt_registry_put(t, NULL, CBT_N_RETRIEVE, &C));       /* 22 */
    REC(cbt_registry_put(t, "sC", CBT_N_RETRIEVE, NULL));     /* 23 */
    REC(cbt_registry_get(t, "sC", CBT_N_RETRIEVE, NULL));     /* 24 */
    REC(cbt_registry_put(NULL, "sC", CBT_N_RETRIEVE, &C));    /* 25 */
    REC_VOID(cbt_registry_remove(t, "sB", CBT_N_REQUEST, &A)); /* 26 */
    REC_VOID(cbt_registry_remove(t, s63, CBT_N_RETRIEVE, NULL)); /* 27 */
#undef REC
#undef REC_VOID
    g_r.ran = n;
    return CBT_OK;
}

static void add_probe_subscriber(cbt_status (*fn)(void *, cbt_tracer *, const cbt_event *))
{
    assert_int_equal(cbt_event_type_register("TEST_REGISTRY_PROBE", &g_ev_probe), CBT_OK);
    k_step = tu_name("step");
    cbt_subscriber sub;
    memset(&sub, 0, sizeof sub);
    sub.version = CBT_SUBSCRIBER_VERSION;
    sub.size = sizeof sub;
    sub.name = "registry-probe";
    sub.on_event = fn;
    cbt_subscriber_want(&sub, g_ev_probe);
    assert_int_equal(cbt_add_subscriber(&sub), CBT_OK);
}

static void registry_api(void **state)
{
    (void)state;
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    c.mp_subscriber = false;
    tu_start(&c);
    add_probe_subscriber(api_on_event);
    memset(&g_r, 0, sizeof g_r);
    tu_pub(g_ev_probe, "x");
    tu_flush();
    assert_int_equal(g_r.ran, 28);
    cbt_span_ctx A = mkctx(1), B = mkctx(2), C = mkctx(3);
    assert_int_equal(g_r.st[0], CBT_ERR_NOT_FOUND);
    assert_int_equal(g_r.cnt[0], 0);
    assert_int_equal(g_r.st[1], CBT_OK);
    assert_int_equal(g_r.cnt[1], 1);
    assert_int_equal(g_r.st[2], CBT_OK);
    assert_true(ctx_eq(&g_r.got[2], &A));
    assert_int_equal(g_r.st[3], CBT_ERR_NOT_FOUND);
    assert_int_equal(g_r.st[4], CBT_ERR_NOT_FOUND);
    assert_int_equal(g_r.st[5], CBT_OK);
    assert_int_equal(g_r.cnt[5], 1); /* replaced, not added */
    assert_int_equal(g_r.st[6], CBT_OK);
    assert_true(ctx_eq(&g_r.got[6], &B));
    assert_int_equal(g_r.cnt[7], 1); /* remove with a non-matching ctx keeps it */
    assert_int_equal(g_r.st[8], CBT_OK);
    assert_true(ctx_eq(&g_r.got[8], &B));
    assert_int_equal(g_r.st[9], CBT_OK);
    assert_int_equal(g_r.cnt[9], 2);
    assert_int_equal(g_r.st[10], CBT_OK);
    assert_int_equal(g_r.cnt[10], 3);
    assert_int_equal(g_r.cnt[11], 2); /* NULL ctx removes */
    assert_int_equal(g_r.st[12], CBT_ERR_NOT_FOUND);
    assert_int_equal(g_r.st[13], CBT_OK);
    assert_true(ctx_eq(&g_r.got[13], &C));
    assert_int_equal(g_r.st[14], CBT_OK);
    assert_true(ctx_eq(&g_r.got[14], &A));
    assert_int_equal(g_r.cnt[15], 1); /* matching ctx removes */
    assert_int_equal(g_r.st[16], CBT_ERR_NOT_FOUND);
    assert_int_equal(g_r.cnt[17], 1);
    assert_int_equal(g_r.st[18], CBT_OK);
    assert_int_equal(g_r.cnt[18], 2);
    assert_int_equal(g_r.st[19], CBT_OK);
    assert_true(ctx_eq(&g_r.got[19], &C));
    assert_int_not_equal(g_r.st[20], CBT_OK); /* no such session id */
    assert_int_equal(g_r.cnt[20], 2);
    assert_int_not_equal(g_r.st[21], CBT_OK);
    assert_int_equal(g_r.st[22], CBT_ERR_INVAL);
    assert_int_equal(g_r.st[23], CBT_ERR_INVAL);
    assert_int_equal(g_r.st[24], CBT_ERR_INVAL);
    assert_int_equal(g_r.st[25], CBT_ERR_INVAL);
    assert_int_equal(g_r.cnt[26], 1);
    assert_int_equal(g_r.cnt[27], 0);
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m), CBT_OK);
    assert_true(m.registry_full == 0);
    assert_true(m.subscriber_errors == 0);
    tu_stop();
}

/* registry_capacity 8: at most 7 entries. */
static struct {
    int ran;
    cbt_status put[10];
    uint32_t cnt[10];
    cbt_status replace_when_full, after_remove, again_full, get_kept[7];
    uint32_t cnt_end;
} g_f;

static cbt_status full_on_event(void *ctx, cbt_tracer *t, const cbt_event *ev)
{
    (void)ctx;
    if (ev->type != g_ev_probe)
        return CBT_OK;
    cbt_span_ctx c = mkctx(9), out;
    char sid[16];
    for (int i = 0; i < 9; i++) {
        snprintf(sid, sizeof sid, "f%d", i);
        g_f.put[i] = cbt_registry_put(t, sid, CBT_N_REQUEST, &c);
        g_f.cnt[i] = cbt_registry_count(t);
    }
    /* a put to a key already held is not an insert */
    g_f.replace_when_full = cbt_registry_put(t, "f3", CBT_N_REQUEST, &c);
    for (int i = 0; i < 7; i++) {
        snprintf(sid, sizeof sid, "f%d", i);
        g_f.get_kept[i] = cbt_registry_get(t, sid, CBT_N_REQUEST, &out);
    }
    cbt_registry_remove(t, "f0", CBT_N_REQUEST, NULL);
    g_f.after_remove = cbt_registry_put(t, "f8", CBT_N_REQUEST, &c);
    g_f.again_full = cbt_registry_put(t, "f9", CBT_N_REQUEST, &c);
    g_f.cnt_end = cbt_registry_count(t);
    g_f.ran = 1;
    return CBT_OK;
}

static void registry_full(void **state)
{
    (void)state;
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    c.mp_subscriber = false;
    c.registry_capacity = 8;
    tu_start(&c);
    add_probe_subscriber(full_on_event);
    memset(&g_f, 0, sizeof g_f);
    cbt_metrics m0 = CBT_STRUCT_INIT(cbt_metrics);
    cbt_metrics m1 = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m0), CBT_OK);
    tu_pub(g_ev_probe, "x");
    tu_flush();
    assert_int_equal(cbt_metrics_get(&m1), CBT_OK);
    assert_int_equal(g_f.ran, 1);
    for (int i = 0; i < 7; i++) {
        assert_int_equal(g_f.put[i], CBT_OK);
        assert_int_equal(g_f.cnt[i], (uint32_t)i + 1);
        assert_int_equal(g_f.get_kept[i], CBT_OK);
    }
    assert_int_equal(g_f.put[7], CBT_ERR_FULL);
    assert_int_equal(g_f.cnt[7], 7);
    assert_int_equal(g_f.put[8], CBT_ERR_FULL);
    assert_int_equal(g_f.cnt[8], 7);
    assert_int_equal(g_f.replace_when_full, CBT_OK);
    assert_int_equal(g_f.after_remove, CBT_OK);
    assert_int_equal(g_f.again_full, CBT_ERR_FULL);
    assert_int_equal(g_f.cnt_end, 7);
    /* three refusals, each counted */
    assert_int_equal(m1.registry_full - m0.registry_full, 3);
    tu_stop();
}

/* The seed's extension example: another subscriber finds the open "request"
 * and "store" spans of a live MP request in the registry and nests under
 * them; the entries go away when the spans end. */
static struct {
    int n;
    cbt_status req[4], store[4], lp[4];
    cbt_span_ctx req_ctx[4], store_ctx[4];
    uint32_t count[4];
} g_x;
static cbt_name k_l1;

static cbt_status ext_on_event(void *ctx, cbt_tracer *t, const cbt_event *ev)
{
    (void)ctx;
    if (ev->type != g_ev_probe || g_x.n >= 4)
        return CBT_OK;
    int i = g_x.n++;
    g_x.req[i] = cbt_registry_get(t, ev->session, CBT_N_REQUEST, &g_x.req_ctx[i]);
    g_x.store[i] = cbt_registry_get(t, ev->session, CBT_N_STORE, &g_x.store_ctx[i]);
    cbt_span_ctx lp;
    g_x.lp[i] = cbt_registry_get(t, ev->session, CBT_N_LOOKUP_PREFETCH, &lp);
    g_x.count[i] = cbt_registry_count(t);
    if (g_x.req[i] == CBT_OK) {
        /* an l1.read under the request, as in the seed */
        cbt_span *s = cbt_span_start(t, k_l1, CBT_SPAN_KIND_INTERNAL, &g_x.req_ctx[i], ev->ts);
        if (!s)
            return CBT_ERR_FULL;
        cbt_span_set_str(s, CBT_N_SESSION_ID, ev->session, ev->session_len);
        cbt_span_end(t, s, ev->ts + 10);
    }
    return CBT_OK;
}

static void registry_extension(void **state)
{
    (void)state;
    tu_start(NULL);
    k_l1 = tu_name("l1.read");
    add_probe_subscriber(ext_on_event);
    memset(&g_x, 0, sizeof g_x);
    const char *sid = "ext-1";
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_START, sid);
    tu_pub(g_ev_probe, sid); /* 0: request + lookup_prefetch open */
    tu_pub_i64(CBT_EV_MP_LOOKUP_PREFETCH_END, sid, "hit_tokens", 0, "requested_tokens", 256);
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    tu_pub(CBT_EV_MP_STORE_START, sid);
    tu_pub(g_ev_probe, sid); /* 1: request + store open */
    tu_pub(CBT_EV_MP_STORE_END, sid);
    tu_pub(g_ev_probe, sid); /* 2: request only */
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_pub(g_ev_probe, sid); /* 3: nothing */
    tu_flush();
    assert_int_equal(g_x.n, 4);
    assert_int_equal(g_x.req[0], CBT_OK);
    assert_int_equal(g_x.lp[0], CBT_OK);
    assert_int_equal(g_x.store[0], CBT_ERR_NOT_FOUND);
    assert_int_equal(g_x.count[0], 2);
    assert_int_equal(g_x.req[1], CBT_OK);
    assert_int_equal(g_x.lp[1], CBT_ERR_NOT_FOUND);
    assert_int_equal(g_x.store[1], CBT_OK);
    assert_int_equal(g_x.count[1], 2);
    assert_int_equal(g_x.req[2], CBT_OK);
    assert_int_equal(g_x.store[2], CBT_ERR_NOT_FOUND);
    assert_int_equal(g_x.count[2], 1);
    assert_int_equal(g_x.req[3], CBT_ERR_NOT_FOUND);
    assert_int_equal(g_x.store[3], CBT_ERR_NOT_FOUND);
    assert_int_equal(g_x.lp[3], CBT_ERR_NOT_FOUND);
    assert_int_equal(g_x.count[3], 0);

    const cbt_span *root = tu_find("request", sid, 0);
    const cbt_span *store = tu_find("mp.store", sid, 0);
    assert_non_null(root);
    assert_non_null(store);
    assert_null(tu_find("request", sid, 1));
    /* the registry held exactly these spans' contexts */
    for (int i = 0; i < 3; i++) {
        assert_memory_equal(g_x.req_ctx[i].span_id, root->ctx.span_id, 8);
        assert_memory_equal(g_x.req_ctx[i].trace_id, root->ctx.trace_id, 16);
    }
    assert_memory_equal(g_x.store_ctx[1].span_id, store->ctx.span_id, 8);
    /* three l1.read spans nested under the root */
    assert_int_equal(tu_count("l1.read", sid), 3);
    for (uint32_t i = 0; i < 3; i++) {
        const cbt_span *l1 = tu_find("l1.read", sid, i);
        assert_true(tu_is_child_of(l1, root));
    }
    assert_true(tu_is_child_of(store, root));
    tu_stop();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(strtab_limits),
        cmocka_unit_test(strtab_cluster_removals),
        cmocka_unit_test(strtab_random_vs_model),
        cmocka_unit_test(registry_api),
        cmocka_unit_test(registry_full),
        cmocka_unit_test(registry_extension),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
