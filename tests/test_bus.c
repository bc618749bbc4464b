/* tests/test_bus.c — the publish queue (host/internal/bus.h) driven directly: capacity
 * rules, full-queue drops, FIFO with metadata intact, wrap-around, and many
 * producers against one consumer. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal/bus.h"
#include "testutil.h"

static cbt_name k_prod, k_seq, k_f, k_b, k_s, k_x;

static void names_once(void)
{
    k_prod = tu_name("bus.producer");
    k_seq = tu_name("bus.seq");
    k_f = tu_name("bus.f64");
    k_b = tu_name("bus.bool");
    k_s = tu_name("bus.str");
    k_x = tu_name("bus.extra");
}

/* An event for (producer, seq) with `n_meta` used values; the unused meta
 * slots are filled with garbage that must not matter. */
static void make_event(cbt_event *ev, int producer, uint64_t seq, int n_meta)
{
    memset(ev, 0xee, sizeof *ev);
    char sid[40];
    snprintf(sid, sizeof sid, "p%d-s%llu", producer, (unsigned long long)seq);
    assert_int_equal(cbt_event_init(ev, CBT_EV_MP_STORE_START, sid), CBT_OK);
    memset(ev->meta, 0xee, sizeof ev->meta);
    ev->pair = seq * 3 + 1;
    ev->ts = seq + 1000;
    ev->flags = CBT_EVF_EXPLICIT_TS;
    if (n_meta >= 1)
        assert_int_equal(cbt_event_i64(ev, k_prod, producer), CBT_OK);
    if (n_meta >= 2)
        assert_int_equal(cbt_event_i64(ev, k_seq, (int64_t)seq), CBT_OK);
    if (n_meta >= 3)
        assert_int_equal(cbt_event_f64(ev, k_f, (double)seq + 0.5), CBT_OK);
    if (n_meta >= 4)
        assert_int_equal(cbt_event_bool(ev, k_b, (seq & 1) != 0), CBT_OK);
    if (n_meta >= 5)
        assert_int_equal(cbt_event_str(ev, k_s, "abcdefghijklmno"), CBT_OK);
    if (n_meta >= 6)
        assert_int_equal(cbt_event_i64(ev, k_x, -(int64_t)seq), CBT_OK);
    assert_int_equal(ev->n_meta, n_meta);
}

/* Check a popped item against what make_event(producer, seq, n_meta) built. */
static void check_item(const cbt_bus_item *it, int producer, uint64_t seq, int n_meta)
{
    char sid[40];
    snprintf(sid, sizeof sid, "p%d-s%llu", producer, (unsigned long long)seq);
    assert_int_equal(it->ev.type, CBT_EV_MP_STORE_START);
    assert_int_equal(it->ev.n_meta, n_meta);
    assert_int_equal(it->ev.session_len, strlen(sid));
    assert_string_equal(it->ev.session, sid);
    assert_true(it->ev.pair == seq * 3 + 1);
    assert_true(it->ev.ts == seq + 1000);
    assert_int_equal(it->ev.flags, CBT_EVF_EXPLICIT_TS);
    const cbt_meta *m;
    if (n_meta >= 1) {
        m = &it->ev.meta[0];
        assert_int_equal(m->key, k_prod);
        assert_int_equal(m->type, CBT_META_I64);
        assert_true(m->v.i64 == producer);
    }
    if (n_meta >= 2) {
        m = &it->ev.meta[1];
        assert_int_equal(m->key, k_seq);
        assert_int_equal(m->type, CBT_META_I64);
        assert_true(m->v.i64 == (int64_t)seq);
    }
    if (n_meta >= 3) {
        m = &it->ev.meta[2];
        assert_int_equal(m->key, k_f);
        assert_int_equal(m->type, CBT_META_F64);
        assert_true(m->v.f64 == (double)seq + 0.5);
    }
    if (n_meta >= 4) {
        m = &it->ev.meta[3];
        assert_int_equal(m->key, k_b);
        assert_int_equal(m->type, CBT_META_BOOL);
        assert_int_equal(m->v.b, (seq & 1) != 0);
    }
    if (n_meta >= 5) {
        m = &it->ev.meta[4];
        assert_int_equal(m->key, k_s);
        assert_int_equal(m->type, CBT_META_STR);
        assert_int_equal(m->len, 15);
        assert_string_equal(m->v.str, "abcdefghijklmno");
    }
    if (n_meta >= 6) {
        m = &it->ev.meta[5];
        assert_int_equal(m->key, k_x);
        assert_int_equal(m->type, CBT_META_I64);
        assert_true(m->v.i64 == -(int64_t)seq);
    }
}

static void capacity_rules(void **state)
{
    (void)state;
    static const uint32_t bad[] = {0, 1, 3, 5, 6, 7, 12, 100, 1000, 1023, 1025, 0x80000001u};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cbt_bus b;
        assert_int_equal(cbt_bus_init(&b, bad[i]), CBT_ERR_INVAL);
    }
    static const uint32_t good[] = {2, 4, 8, 64, 1024, 65536};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        cbt_bus b;
        assert_int_equal(cbt_bus_init(&b, good[i]), CBT_OK);
        assert_true(cbt_bus_depth(&b) == 0);
        cbt_bus_item out;
        assert_int_equal(cbt_bus_pop(&b, &out), 0); /* empty */
        cbt_bus_destroy(&b);
    }
}

static void full_then_drops(void **state)
{
    (void)state;
    names_once();
    enum { CAP = 16 };
    cbt_bus b;
    assert_int_equal(cbt_bus_init(&b, CAP), CBT_OK);
    cbt_event ev;
    for (uint64_t i = 0; i < CAP; i++) {
        make_event(&ev, 1, i, (int)(i % 7));
        assert_int_equal(cbt_bus_push(&b, &ev, 100 + i, NULL, NULL), CBT_OK);
        assert_true(cbt_bus_depth(&b) == i + 1);
    }
    assert_true(atomic_load(&b.dropped) == 0);
    assert_true(cbt_bus_accepted(&b) == (uint64_t)CAP);
    /* full: every further push is refused and counted, depth unchanged */
    for (uint64_t k = 1; k <= 5; k++) {
        make_event(&ev, 1, 999, 2);
        assert_int_equal(cbt_bus_push(&b, &ev, 1, NULL, NULL), CBT_ERR_FULL);
        assert_true(atomic_load(&b.dropped) == k);
        assert_true(cbt_bus_depth(&b) == CAP);
    }
    assert_true(cbt_bus_accepted(&b) == (uint64_t)CAP);

    /* pop one: until it is released its slot is not reusable */
    cbt_bus_item out;
    assert_int_equal(cbt_bus_pop(&b, &out), 1);
    check_item(&out, 1, 0, 0);
    assert_true(out.ticks == 100);
    make_event(&ev, 1, 999, 1);
    assert_int_equal(cbt_bus_push(&b, &ev, 1, NULL, NULL), CBT_ERR_FULL);
    assert_true(atomic_load(&b.dropped) == 6);
    cbt_bus_release(&b);
    assert_true(cbt_bus_depth(&b) == CAP - 1);
    /* released: one push fits again, the next does not */
    make_event(&ev, 1, CAP, 3);
    assert_int_equal(cbt_bus_push(&b, &ev, 100 + CAP, NULL, NULL), CBT_OK);
    assert_int_equal(cbt_bus_push(&b, &ev, 100 + CAP, NULL, NULL), CBT_ERR_FULL);
    assert_true(atomic_load(&b.dropped) == 7);

    /* everything accepted comes out in order, the drops never do */
    for (uint64_t i = 1; i <= CAP; i++) {
        memset(&out, 0, sizeof out);
        assert_int_equal(cbt_bus_pop(&b, &out), 1);
        check_item(&out, 1, i, i == CAP ? 3 : (int)(i % 7));
        assert_true(out.ticks == 100 + i);
    }
    assert_int_equal(cbt_bus_pop(&b, &out), 0);
    cbt_bus_release(&b);
    assert_true(cbt_bus_depth(&b) == 0);
    assert_true(cbt_bus_accepted(&b) == (uint64_t)CAP + 1);
    cbt_bus_destroy(&b);
}

/* FIFO with every field intact, for every meta count 0..6; the stream and
 * mark pointers and the ticks travel with the item. */
static void fifo_metadata(void **state)
{
    (void)state;
    names_once();
    cbt_bus b;
    assert_int_equal(cbt_bus_init(&b, 64), CBT_OK);
    int marks[40];
    cbt_event ev;
    for (uint64_t i = 0; i < 40; i++) {
        make_event(&ev, 7, i, (int)(i % 7));
        struct cbt_stream *fake_stream = (struct cbt_stream *)(uintptr_t)(0x1000 + i * 16);
        assert_int_equal(cbt_bus_push(&b, &ev, 0xabc000 + i, (i % 3) ? fake_stream : NULL,
                                      (i % 3) ? &marks[i] : NULL),
                         CBT_OK);
    }
    assert_true(cbt_bus_depth(&b) == 40);
    for (uint64_t i = 0; i < 40; i++) {
        cbt_bus_item out;
        memset(&out, 0x5a, sizeof out);
        assert_int_equal(cbt_bus_pop(&b, &out), 1);
        check_item(&out, 7, i, (int)(i % 7));
        assert_true(out.ticks == 0xabc000 + i);
        if (i % 3) {
            assert_ptr_equal(out.stream, (struct cbt_stream *)(uintptr_t)(0x1000 + i * 16));
            assert_ptr_equal(out.mark, &marks[i]);
        } else {
            assert_null(out.stream);
            assert_null(out.mark);
        }
        cbt_bus_release(&b);
        assert_true(cbt_bus_depth(&b) == 40 - i - 1);
    }
    cbt_bus_item out;
    assert_int_equal(cbt_bus_pop(&b, &out), 0);

    /* a 63-byte session survives the trip */
    char sid[64];
    memset(sid, 'q', 63);
    sid[63] = '\0';
    assert_int_equal(cbt_event_init(&ev, CBT_EV_MP_REQUEST_END, sid), CBT_OK);
    assert_int_equal(cbt_bus_push(&b, &ev, 5, NULL, NULL), CBT_OK);
    assert_int_equal(cbt_bus_pop(&b, &out), 1);
    cbt_bus_release(&b);
    assert_int_equal(out.ev.session_len, 63);
    assert_string_equal(out.ev.session, sid);
    assert_int_equal(out.ev.type, CBT_EV_MP_REQUEST_END);
    assert_int_equal(out.ev.n_meta, 0);
    cbt_bus_destroy(&b);
}

/* Many laps around a small ring with varying batch sizes; popped slots are
 * released only sometimes, so a push fits exactly when fewer than CAP items
 * are claimed and unreleased. */
static void wrap_around(void **state)
{
    (void)state;
    names_once();
    enum { CAP = 8 };
    cbt_bus b;
    assert_int_equal(cbt_bus_init(&b, CAP), CBT_OK);
    uint64_t next_push = 0, next_pop = 0, released = 0, drops = 0;
    uint32_t rng = 12345;
    cbt_event ev;
    for (int round = 0; round < 5000; round++) {
        rng = rng * 1103515245u + 12345u;
        uint32_t k = 1 + (rng >> 16) % (CAP + 2); /* sometimes more than fits */
        for (uint32_t i = 0; i < k; i++) {
            make_event(&ev, 3, next_push, (int)(next_push % 7));
            cbt_status st = cbt_bus_push(&b, &ev, next_push, NULL, NULL);
            if (next_push - released < CAP) {
                assert_int_equal(st, CBT_OK);
                next_push++;
            } else {
                assert_int_equal(st, CBT_ERR_FULL);
                drops++;
            }
        }
        assert_true(cbt_bus_depth(&b) == next_push - released);
        rng = rng * 1103515245u + 12345u;
        uint32_t p = (rng >> 16) % (CAP + 2);
        for (uint32_t i = 0; i < p; i++) {
            cbt_bus_item out;
            int got = cbt_bus_pop(&b, &out);
            if (next_pop < next_push) {
                assert_int_equal(got, 1);
                check_item(&out, 3, next_pop, (int)(next_pop % 7));
                assert_true(out.ticks == next_pop);
                next_pop++;
            } else {
                assert_int_equal(got, 0);
            }
        }
        if ((rng >> 8) % 4 != 0) {
            cbt_bus_release(&b);
            released = next_pop;
        }
    }
    assert_true(next_push > 20 * CAP); /* really many laps */
    assert_true(atomic_load(&b.dropped) == drops);
    assert_true(drops > 0);
    assert_true(cbt_bus_accepted(&b) == next_push);
    cbt_bus_destroy(&b);
}

/* ---- 4 producers x 100k pushes, 1 consumer ---- */

#define MP_PRODUCERS 4
#define MP_PUSHES 100000u

typedef struct prod_arg {
    cbt_bus *bus;
    int id;
    uint64_t accepted, dropped, other;
    uint8_t *ok; /* ok[seq] = 1 when push seq was accepted */
} prod_arg;

typedef struct cons_arg {
    cbt_bus *bus;
    _Atomic int *producers_done;
    uint64_t popped[MP_PRODUCERS];
    int64_t last[MP_PRODUCERS];
    uint8_t *seen[MP_PRODUCERS];
    uint64_t order_errors, dup_errors, content_errors, unknown_producer;
} cons_arg;

static void *producer(void *p)
{
    prod_arg *a = p;
    cbt_event ev;
    char sid[32];
    snprintf(sid, sizeof sid, "producer-%d", a->id);
    if (cbt_event_init(&ev, CBT_EV_MP_RETRIEVE_END, sid) != CBT_OK) {
        a->other++;
        return NULL;
    }
    for (uint32_t s = 0; s < MP_PUSHES; s++) {
        ev.n_meta = 0;
        cbt_event_i64(&ev, k_prod, a->id);
        cbt_event_i64(&ev, k_seq, (int64_t)s);
        ev.pair = ((uint64_t)a->id << 32) | s;
        cbt_status st = cbt_bus_push(a->bus, &ev, s, NULL, NULL);
        if (st == CBT_OK) {
            a->accepted++;
            a->ok[s] = 1;
        } else if (st == CBT_ERR_FULL) {
            a->dropped++;
        } else {
            a->other++;
        }
        if ((s & 1023) == 0)
            sched_yield();
    }
    return NULL;
}

static void consume_one(cons_arg *c, const cbt_bus_item *it)
{
    int64_t p = cbt_event_get_i64(&it->ev, k_prod, -1);
    int64_t s = cbt_event_get_i64(&it->ev, k_seq, -1);
    if (p < 0 || p >= MP_PRODUCERS || s < 0 || s >= (int64_t)MP_PUSHES) {
        c->unknown_producer++;
        return;
    }
    char sid[32];
    snprintf(sid, sizeof sid, "producer-%d", (int)p);
    if (it->ev.n_meta != 2 || it->ev.pair != (((uint64_t)p << 32) | (uint64_t)s) ||
        it->ticks != (uint64_t)s || strcmp(it->ev.session, sid) != 0 ||
        it->ev.type != CBT_EV_MP_RETRIEVE_END)
        c->content_errors++;
    if (s <= c->last[p])
        c->order_errors++;
    c->last[p] = s;
    if (c->seen[p][s])
        c->dup_errors++;
    c->seen[p][s] = 1;
    c->popped[p]++;
}

static void *consumer(void *p)
{
    cons_arg *c = p;
    cbt_bus_item it;
    for (;;) {
        int done = atomic_load(c->producers_done);
        int n = 0;
        while (cbt_bus_pop(c->bus, &it)) {
            consume_one(c, &it);
            n++;
        }
        if (n)
            cbt_bus_release(c->bus);
        if (done)
            break; /* drained after every producer had finished */
        if (n == 0)
            sched_yield();
    }
    return NULL;
}

static void many_producers_one_consumer(void **state)
{
    (void)state;
    names_once();
    cbt_bus b;
    assert_int_equal(cbt_bus_init(&b, 1024), CBT_OK);
    _Atomic int done = 0;
    static prod_arg pa[MP_PRODUCERS];
    static cons_arg ca;
    memset(&ca, 0, sizeof ca);
    ca.bus = &b;
    ca.producers_done = &done;
    for (int i = 0; i < MP_PRODUCERS; i++) {
        memset(&pa[i], 0, sizeof pa[i]);
        pa[i].bus = &b;
        pa[i].id = i;
        pa[i].ok = calloc(MP_PUSHES, 1);
        ca.seen[i] = calloc(MP_PUSHES, 1);
        ca.last[i] = -1;
        assert_non_null(pa[i].ok);
        assert_non_null(ca.seen[i]);
    }
    pthread_t ct, pt[MP_PRODUCERS];
    assert_int_equal(pthread_create(&ct, NULL, consumer, &ca), 0);
    for (int i = 0; i < MP_PRODUCERS; i++)
        assert_int_equal(pthread_create(&pt[i], NULL, producer, &pa[i]), 0);
    for (int i = 0; i < MP_PRODUCERS; i++)
        pthread_join(pt[i], NULL);
    atomic_store(&done, 1);
    pthread_join(ct, NULL);

    uint64_t acc = 0, drop = 0;
    for (int i = 0; i < MP_PRODUCERS; i++) {
        assert_true(pa[i].other == 0);
        assert_true(pa[i].accepted + pa[i].dropped == MP_PUSHES);
        acc += pa[i].accepted;
        drop += pa[i].dropped;
        /* exactly the accepted pushes came out, each once */
        assert_true(ca.popped[i] == pa[i].accepted);
        assert_int_equal(memcmp(pa[i].ok, ca.seen[i], MP_PUSHES), 0);
    }
    assert_true(ca.order_errors == 0);
    assert_true(ca.dup_errors == 0);
    assert_true(ca.content_errors == 0);
    assert_true(ca.unknown_producer == 0);
    assert_true(cbt_bus_accepted(&b) == acc);
    assert_true(atomic_load(&b.dropped) == drop);
    assert_true(acc + drop == (uint64_t)MP_PRODUCERS * MP_PUSHES);
    assert_true(acc > 0);
    assert_true(cbt_bus_depth(&b) == 0);
    cbt_bus_item it;
    assert_int_equal(cbt_bus_pop(&b, &it), 0);
    fprintf(stderr, "# bus: %llu accepted, %llu dropped of %u\n", (unsigned long long)acc,
            (unsigned long long)drop, MP_PRODUCERS * MP_PUSHES);
    for (int i = 0; i < MP_PRODUCERS; i++) {
        free(pa[i].ok);
        free(ca.seen[i]);
    }
    cbt_bus_destroy(&b);
}

/* ---- no drop while the queue is not full ----
 * Producers keep at most CAP items claimed-and-unreleased (a shared counter,
 * incremented before a push, decremented by the consumer after it released
 * what it popped). Then the queue is never full when a push claims its
 * position, so every push must be accepted: a CBT_ERR_FULL here is a drop of
 * an event that had room. */

#define NF_PRODUCERS 4
#define NF_PUSHES 200000u
#define NF_CAP 64

typedef struct nf_shared {
    cbt_bus bus;
    _Atomic int64_t inflight;
    _Atomic int done;
} nf_shared;

typedef struct nf_prod {
    nf_shared *sh;
    int id;
    uint64_t accepted, spurious_full, other;
} nf_prod;

static void *nf_producer(void *p)
{
    nf_prod *a = p;
    cbt_event ev;
    if (cbt_event_init(&ev, CBT_EV_MP_STORE_END, "nf") != CBT_OK) {
        a->other++;
        return NULL;
    }
    for (uint32_t s = 0; s < NF_PUSHES; s++) {
        while (atomic_fetch_add(&a->sh->inflight, 1) >= NF_CAP) {
            atomic_fetch_sub(&a->sh->inflight, 1);
            sched_yield();
        }
        ev.pair = ((uint64_t)a->id << 32) | s;
        cbt_status st = cbt_bus_push(&a->sh->bus, &ev, s + 1, NULL, NULL);
        if (st == CBT_OK) {
            a->accepted++;
        } else {
            atomic_fetch_sub(&a->sh->inflight, 1);
            if (st == CBT_ERR_FULL)
                a->spurious_full++;
            else
                a->other++;
        }
    }
    return NULL;
}

typedef struct nf_cons {
    nf_shared *sh;
    uint64_t popped, order_errors;
    int64_t last[NF_PRODUCERS];
} nf_cons;

static void *nf_consumer(void *p)
{
    nf_cons *c = p;
    cbt_bus_item it;
    for (int i = 0; i < NF_PRODUCERS; i++)
        c->last[i] = -1;
    for (;;) {
        int done = atomic_load(&c->sh->done);
        int64_t n = 0;
        while (n < 16 && cbt_bus_pop(&c->sh->bus, &it)) {
            uint32_t pr = (uint32_t)(it.ev.pair >> 32);
            int64_t sq = (int64_t)(it.ev.pair & 0xffffffffu);
            if (pr >= NF_PRODUCERS || sq <= c->last[pr])
                c->order_errors++;
            else
                c->last[pr] = sq;
            n++;
        }
        if (n) {
            cbt_bus_release(&c->sh->bus);
            atomic_fetch_sub(&c->sh->inflight, n);
            c->popped += (uint64_t)n;
        } else if (done) {
            break;
        } else {
            sched_yield();
        }
    }
    return NULL;
}

static void no_drop_while_not_full(void **state)
{
    (void)state;
    static nf_shared sh;
    memset(&sh, 0, sizeof sh);
    assert_int_equal(cbt_bus_init(&sh.bus, NF_CAP), CBT_OK);
    static nf_prod pa[NF_PRODUCERS];
    static nf_cons ca;
    memset(&ca, 0, sizeof ca);
    ca.sh = &sh;
    pthread_t ct, pt[NF_PRODUCERS];
    assert_int_equal(pthread_create(&ct, NULL, nf_consumer, &ca), 0);
    for (int i = 0; i < NF_PRODUCERS; i++) {
        memset(&pa[i], 0, sizeof pa[i]);
        pa[i].sh = &sh;
        pa[i].id = i;
        assert_int_equal(pthread_create(&pt[i], NULL, nf_producer, &pa[i]), 0);
    }
    for (int i = 0; i < NF_PRODUCERS; i++)
        pthread_join(pt[i], NULL);
    atomic_store(&sh.done, 1);
    pthread_join(ct, NULL);
    uint64_t acc = 0, spurious = 0;
    for (int i = 0; i < NF_PRODUCERS; i++) {
        assert_true(pa[i].other == 0);
        acc += pa[i].accepted;
        spurious += pa[i].spurious_full;
    }
    if (spurious)
        fprintf(stderr, "# bus: %llu pushes refused as full while at most %d of %d slots "
                        "were in use\n", (unsigned long long)spurious, NF_CAP - 1, NF_CAP);
    assert_true(ca.order_errors == 0);
    assert_true(ca.popped == acc);
    assert_true(atomic_load(&sh.bus.dropped) == spurious);
    assert_true(spurious == 0);
    assert_true(acc == (uint64_t)NF_PRODUCERS * NF_PUSHES);
    cbt_bus_destroy(&sh.bus);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(capacity_rules),
        cmocka_unit_test(full_then_drops),
        cmocka_unit_test(fifo_metadata),
        cmocka_unit_test(wrap_around),
        cmocka_unit_test(many_producers_one_consumer),
        cmocka_unit_test(no_drop_while_not_full),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
