/* tests/test_bus.c — the publish queue (host/internal/bus.h), in both modes
 * (many producers with commit words, a lane whose tail commits), and its records
 * (host/internal/record.h) driven directly: record sizes, capacity rules,
 * full-queue drops counted in cells, every field of mixed-size events
 * intact (16 values, 256-byte strings, trace blocks, mark pointers),
 * wrap-around into the slack, stale commit words and stale payload never
 * taken for a commit, and many (or one) producers racing one consumer. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal/bus.h"
#include "testutil.h"

#define EV_TYPE CBT_EV_MP_STORE_START

static int g_names_done;
static void names_once(void)
{
    if (!g_names_done)
        tu_big_names();
    g_names_done = 1;
}

/* The push of the queue's mode: a lane's (one producer) or the bus's. */
static cbt_status push(cbt_bus *b, const cbt_event *ev, uint64_t ticks, struct cbt_stream *s,
                       void *mark)
{
    return b->single_producer ? cbt_bus_push_spsc_(b, ev, ticks, s, mark)
                              : cbt_bus_push(b, ev, ticks, s, mark);
}

/* The mode a test runs in: its prestate (NULL: many producers). */
static int spsc_of(void **state) { return *state ? *(const int *)*state : 0; }
static const int k_spsc = 1, k_mpsc = 0;

static uint32_t cells_of(uint64_t seq, int with_mark)
{
    cbt_event ev;
    tu_big_event(&ev, EV_TYPE, 0, seq);
    return cbt_rec_cells(&ev, with_mark);
}

/* What an event costs in the queue: only its used parts, rounded to cells. */
static void record_sizes(void **state)
{
    (void)state;
    names_once();
    cbt_name k[CBT_EVENT_META_MAX];
    for (int i = 0; i < CBT_EVENT_META_MAX; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "bus.size.%d", i);
        k[i] = tu_name(nm);
    }
    cbt_event ev;
    /* no value: 104 bytes, 2 cells */
    assert_int_equal(cbt_event_init(&ev, EV_TYPE, "cmpl-3f5a9c2e-7d41-4b8e-9a1f-0c2d4e6f8a1b-0"),
                     CBT_OK);
    assert_int_equal(cbt_rec_cells(&ev, 0), 2);
    /* the benchmark's event, two values: 152 bytes, 3 cells (the old slot: 5) */
    cbt_event_i64(&ev, k[0], 4096);
    cbt_event_i64(&ev, k[1], 16);
    assert_int_equal(cbt_rec_cells(&ev, 0), 3);
    assert_int_equal(cbt_rec_cells(&ev, 1), 3); /* + 16 bytes of mark: 168 */
    /* cb.lookup.end: its 12 values (11 ints and a bool) and a 40-character
     * model name: 104 + 13 * 24 + 41 = 457 bytes, 8 cells */
    assert_int_equal(cbt_event_init(&ev, CBT_EV_CB_LOOKUP_END, "cmpl-1"), CBT_OK);
    for (int i = 0; i < 11; i++)
        cbt_event_i64(&ev, k[i], i);
    cbt_event_bool(&ev, k[11], true);
    cbt_event_str(&ev, k[12], "meta-llama/Llama-3.1-8B-Instruct-FP8-v02");
    assert_int_equal(ev.str_used, 41);
    assert_int_equal(cbt_rec_cells(&ev, 0), 8);
    /* the largest: 16 values, a trace context, a full string area */
    assert_int_equal(cbt_event_init(&ev, EV_TYPE, "x"), CBT_OK);
    char big[CBT_META_STR_MAX];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(cbt_event_str(&ev, k[0], big), CBT_OK);
    assert_int_equal(cbt_event_str(&ev, k[1], big), CBT_OK); /* cut: the area is full */
    assert_int_equal(ev.str_used, CBT_EVENT_STR_AREA);
    for (int i = 2; i < CBT_EVENT_META_MAX; i++)
        cbt_event_i64(&ev, k[i], i);
    cbt_event_trace_set(&ev, NULL, NULL);
    assert_int_equal(cbt_rec_cells(&ev, 1), CBT_REC_CELLS_MAX);
    assert_int_equal(CBT_REC_CELLS_MAX, 41);
    /* a hand-made event that claims more than it can hold is bounded */
    ev.n_meta = 200;
    ev.str_used = 60000;
    assert_int_equal(cbt_rec_cells(&ev, 1), CBT_REC_CELLS_MAX);
}

static void capacity_rules(void **state)
{
    (void)state;
    static const uint32_t bad[] = {0, 1, 2, 4, 16, 32, 63, 3, 100, 1000, 1023, 1025, 0x80000001u};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cbt_bus b;
        assert_int_equal(cbt_bus_init(&b, bad[i], 0), CBT_ERR_INVAL);
        assert_int_equal(cbt_bus_init(&b, bad[i], 1), CBT_ERR_INVAL);
    }
    static const uint32_t good[] = {64, 128, 1024, 65536};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        cbt_bus b;
        assert_int_equal(cbt_bus_init(&b, good[i], (int)(i & 1)), CBT_OK);
        assert_true(cbt_bus_depth(&b) == 0);
        assert_true(cbt_bus_cells_used(&b) == 0);
        cbt_bus_item out;
        assert_int_equal(cbt_bus_pop(&b, &out), 0); /* empty */
        assert_true(cbt_bus_drained(&b));
        cbt_bus_destroy(&b);
    }
    /* a lane has no commit words, and its one producer pushes its own way */
    cbt_bus b;
    assert_int_equal(cbt_bus_init(&b, 64, 1), CBT_OK);
    assert_null(b.seq);
    cbt_event ev;
    assert_int_equal(cbt_event_init(&ev, EV_TYPE, "x"), CBT_OK);
    assert_int_equal(cbt_bus_push(&b, &ev, 1, NULL, NULL), CBT_ERR_INVAL);
    cbt_bus_destroy(&b);
    assert_true(cbt_bus_bytes(1024, 1) + 1024 * 8 == cbt_bus_bytes(1024, 0));
}

/* A record fits exactly when its cells do: pushes are refused (and counted)
 * from the first that would pass head + capacity, and fit again once the
 * consumer releases enough cells. */
static void full_then_drops(void **state)
{
    int spsc = spsc_of(state);
    names_once();
    enum { CAP = 64 };
    cbt_bus b;
    assert_int_equal(cbt_bus_init(&b, CAP, spsc), CBT_OK);
    cbt_event ev;
    uint64_t used = 0, seq = 0;
    for (;; seq++) {
        uint32_t k = cells_of(seq, 0);
        if (used + k > CAP)
            break;
        tu_big_event(&ev, EV_TYPE, 1, seq);
        assert_int_equal(push(&b, &ev, 100 + seq, NULL, NULL), CBT_OK);
        used += k;
        assert_true(cbt_bus_depth(&b) == seq + 1);
        assert_true(cbt_bus_cells_used(&b) == used);
    }
    uint64_t n_in = seq;
    assert_true(n_in >= 3);
    assert_true(atomic_load(&b.dropped) == 0);
    assert_true(cbt_bus_accepted(&b) == n_in);
    /* full for this record: refused and counted, nothing changes */
    for (uint64_t d = 1; d <= 5; d++) {
        tu_big_event(&ev, EV_TYPE, 1, seq);
        assert_int_equal(push(&b, &ev, 1, NULL, NULL), CBT_ERR_FULL);
        assert_true(atomic_load(&b.dropped) == d);
        assert_true(cbt_bus_cells_used(&b) == used);
    }
    /* ... while a record small enough for what is left still fits */
    uint64_t left = CAP - used;
    cbt_event small;
    assert_int_equal(cbt_event_init(&small, EV_TYPE, "small"), CBT_OK);
    uint32_t ks = cbt_rec_cells(&small, 0);
    if (left >= ks) {
        assert_int_equal(push(&b, &small, 7, NULL, NULL), CBT_OK);
        used += ks;
    }
    uint64_t accepted = cbt_bus_accepted(&b);

    /* pop one: until it is released its cells are not reusable */
    cbt_bus_item out;
    assert_int_equal(cbt_bus_pop(&b, &out), 1);
    assert_null(tu_big_check(&out.ev, EV_TYPE, 1, 0));
    assert_true(out.ticks == 100);
    uint32_t k0 = cells_of(0, 0);
    tu_big_event(&ev, EV_TYPE, 1, seq);
    assert_int_equal(push(&b, &ev, 1, NULL, NULL), CBT_ERR_FULL);
    cbt_bus_release(&b);
    assert_true(cbt_bus_cells_used(&b) == used - k0);
    assert_true(cbt_bus_depth(&b) == accepted - 1);
    cbt_bus_destroy(&b);
}

/* Every field of every kind of event comes out as it went in, in order;
 * the stamp, the stream and mark pointers travel with it. The ring is small
 * (128 cells) and released after each pop, so records start at every cell
 * offset and many run into the slack. */
static void fifo_everything_intact(void **state)
{
    int spsc = spsc_of(state);
    names_once();
    cbt_bus b;
    assert_int_equal(cbt_bus_init(&b, 128, spsc), CBT_OK);
    int marks[8];
    cbt_event ev;
    for (uint64_t seq = 0; seq < 3000; seq++) {
        tu_big_event(&ev, EV_TYPE, 7, seq);
        struct cbt_stream *fake = (seq % 3) ? (struct cbt_stream *)(uintptr_t)(0x1000 + seq * 16)
                                            : NULL;
        assert_int_equal(push(&b, &ev, 0xabc000 + seq, fake, fake ? &marks[seq % 8] : NULL),
                         CBT_OK);
        cbt_bus_item out;
        memset(&out, 0x5a, sizeof out);
        assert_int_equal(cbt_bus_pop(&b, &out), 1);
        const char *why = tu_big_check(&out.ev, EV_TYPE, 7, seq);
        if (why)
            fail_msg("seq %llu: %s", (unsigned long long)seq, why);
        assert_true(out.ticks == 0xabc000 + seq);
        assert_ptr_equal(out.stream, fake);
        assert_ptr_equal(out.mark, fake ? &marks[seq % 8] : NULL);
        assert_int_equal(cbt_bus_pop(&b, &out), 0);
        cbt_bus_release(&b);
        assert_true(cbt_bus_drained(&b));
    }
    /* a 63-byte session survives the trip */
    char sid[64];
    memset(sid, 'q', 63);
    sid[63] = '\0';
    assert_int_equal(cbt_event_init(&ev, CBT_EV_MP_REQUEST_END, sid), CBT_OK);
    assert_int_equal(push(&b, &ev, 5, NULL, NULL), CBT_OK);
    cbt_bus_item out;
    assert_int_equal(cbt_bus_pop(&b, &out), 1);
    cbt_bus_release(&b);
    assert_int_equal(out.ev.session_len, 63);
    assert_string_equal(out.ev.session, sid);
    assert_int_equal(out.ev.type, CBT_EV_MP_REQUEST_END);
    assert_int_equal(out.ev.n_meta, 0);
    assert_int_equal(out.ev.str_used, 0);
    cbt_bus_destroy(&b);
}

/* Many laps around a small ring with mixed sizes and varying batches;
 * popped records are released only sometimes, so a push fits exactly when
 * its cells and those claimed-and-unreleased are at most the capacity. */
static void wrap_around(void **state)
{
    int spsc = spsc_of(state);
    names_once();
    enum { CAP = 64 };
    cbt_bus b;
    assert_int_equal(cbt_bus_init(&b, CAP, spsc), CBT_OK);
    uint64_t next_push = 0, next_pop = 0, drops = 0;
    uint64_t claimed = 0, released = 0, popped_cells = 0; /* cells */
    uint32_t rng = 12345;
    cbt_event ev;
    for (int round = 0; round < 20000; round++) {
        rng = rng * 1103515245u + 12345u;
        uint32_t n = 1 + (rng >> 16) % 6;
        for (uint32_t i = 0; i < n; i++) {
            tu_big_event(&ev, EV_TYPE, 3, next_push);
            uint32_t k = cbt_rec_cells(&ev, 0);
            cbt_status st = push(&b, &ev, next_push, NULL, NULL);
            if (claimed + k - released <= CAP) {
                assert_int_equal(st, CBT_OK);
                claimed += k;
                next_push++;
            } else {
                assert_int_equal(st, CBT_ERR_FULL);
                drops++;
                break; /* the producer's next event waits, so the sequence stays dense */
            }
        }
        assert_true(cbt_bus_cells_used(&b) == claimed - released);
        rng = rng * 1103515245u + 12345u;
        uint32_t p = (rng >> 16) % 6;
        for (uint32_t i = 0; i < p; i++) {
            cbt_bus_item out;
            int got = cbt_bus_pop(&b, &out);
            if (next_pop < next_push) {
                assert_int_equal(got, 1);
                const char *why = tu_big_check(&out.ev, EV_TYPE, 3, next_pop);
                if (why)
                    fail_msg("seq %llu: %s", (unsigned long long)next_pop, why);
                assert_true(out.ticks == next_pop);
                popped_cells += cbt_rec_cells(&out.ev, 0);
                next_pop++;
            } else {
                assert_int_equal(got, 0);
            }
        }
        if ((rng >> 8) % 4 != 0) {
            cbt_bus_release(&b);
            released = popped_cells;
        }
    }
    assert_true(claimed > 200 * CAP); /* really many laps */
    assert_true(atomic_load(&b.dropped) == drops);
    assert_true(drops > 0);
    assert_true(cbt_bus_accepted(&b) == next_push);
    cbt_bus_destroy(&b);
}

/* Nothing but a commit for `next` itself makes a record readable: not the
 * commit word an older lap left at that cell, and not payload of an older
 * record's continuation that happens to equal next + 1 (where a design
 * that kept the commit word in the record's first cell would be fooled). */
static void stale_words_never_commit(void **state)
{
    int spsc = spsc_of(state);
    enum { CAP = 64 };
    cbt_bus b;
    assert_int_equal(cbt_bus_init(&b, CAP, spsc), CBT_OK);
    /* record A at position 0, 3 cells; its second cell begins 64 bytes in,
     * at session[24..32) (record head 16 + event offset 24 + 24): junk past
     * the session's NUL, made to read 66 = position 65 + 1 */
    cbt_event a;
    assert_int_equal(cbt_event_init(&a, EV_TYPE, "a"), CBT_OK);
    cbt_event_i64(&a, tu_name("bus.stale.x"), 65 + 1);
    cbt_event_i64(&a, tu_name("bus.stale.y"), 65 + 1);
    uint64_t forged = 65 + 1;
    memcpy(a.session + 24, &forged, 8);
    assert_int_equal(cbt_rec_cells(&a, 0), 3);
    assert_int_equal(push(&b, &a, 1, NULL, NULL), CBT_OK);
    unsigned char *cell1 = b.cells + CBT_REC_CELL;
    assert_memory_equal(cell1, &forged, 8); /* the trap is set */
    /* fillers of 2 cells: positions 3, 5, ..., 63 (the last runs into the slack) */
    cbt_event f;
    assert_int_equal(cbt_event_init(&f, EV_TYPE, "f"), CBT_OK);
    assert_int_equal(cbt_rec_cells(&f, 0), 2);
    cbt_bus_item out;
    for (int i = 0; i < 31; i++) {
        assert_int_equal(push(&b, &f, 2 + (uint64_t)i, NULL, NULL), CBT_OK);
        while (cbt_bus_pop(&b, &out))
            ;
        cbt_bus_release(&b);
    }
    assert_true(b.next == 65);
    assert_memory_equal(cell1, &forged, 8); /* still there: cell 1 stood for no start */
    /* position 65 (cell 1) is claimed by no one: nothing to read */
    assert_int_equal(cbt_bus_pop(&b, &out), 0);
    uint64_t t;
    assert_int_equal(cbt_bus_peek(&b, &t), 0);
    /* fillers on from 65: they start at odd positions, so cell 1 is a start
     * now (position 65, commit word 66); at position 129 (cell 1 again) that
     * word is a lap old and must not pass for 130 (not even in its low bits,
     * 66 & 63 == 130 & 63) */
    for (int i = 0; i < 32; i++) {
        assert_int_equal(push(&b, &f, 100, NULL, NULL), CBT_OK);
        while (cbt_bus_pop(&b, &out))
            ;
        cbt_bus_release(&b);
    }
    assert_true(b.next == 129);
    if (!spsc)
        assert_true(atomic_load(&b.seq[1]) == 66);
    assert_int_equal(cbt_bus_pop(&b, &out), 0);
    assert_int_equal(cbt_bus_peek(&b, &t), 0);
    /* and a real commit there is read */
    assert_int_equal(push(&b, &a, 42, NULL, NULL), CBT_OK);
    assert_int_equal(cbt_bus_peek(&b, &t), 1);
    assert_true(t == 42);
    assert_int_equal(cbt_bus_pop(&b, &out), 1);
    assert_string_equal(out.ev.session, "a");
    assert_true(cbt_event_get_i64(&out.ev, tu_name("bus.stale.y"), 0) == 66);
    cbt_bus_release(&b);
    cbt_bus_destroy(&b);
}

/* ---- producers x pushes of mixed-size events, 1 consumer racing ---- */

#define MP_MAX 4
#define MP_PUSHES 40000u

typedef struct prod_arg {
    cbt_bus *bus;
    int retry; /* on CBT_ERR_FULL, try again (counted in dropped) until accepted */
    uint32_t id;
    uint64_t accepted, dropped, other;
    uint8_t *ok; /* ok[seq] = 1 when push seq was accepted */
} prod_arg;

typedef struct cons_arg {
    cbt_bus *bus;
    int n_prod;
    _Atomic int *producers_done;
    uint64_t popped[MP_MAX];
    int64_t last[MP_MAX];
    uint8_t *seen[MP_MAX];
    uint64_t order_errors, dup_errors, content_errors, unknown_producer;
    const char *first_error;
} cons_arg;

static void *producer(void *p)
{
    prod_arg *a = p;
    cbt_event ev;
    for (uint32_t s = 0; s < MP_PUSHES; s++) {
        tu_big_event(&ev, EV_TYPE, a->id, s);
        cbt_status st;
        while ((st = push(a->bus, &ev, s, NULL, NULL)) == CBT_ERR_FULL && a->retry) {
            a->dropped++;
            sched_yield();
        }
        if (st == CBT_OK) {
            a->accepted++;
            a->ok[s] = 1;
        } else if (st == CBT_ERR_FULL) {
            a->dropped++;
        } else {
            a->other++;
        }
        if ((s & 255) == 0)
            sched_yield();
    }
    return NULL;
}

static void consume_one(cons_arg *c, const cbt_bus_item *it)
{
    uint32_t p;
    uint64_t s;
    if (!tu_big_ids(&it->ev, &p, &s) || p >= (uint32_t)c->n_prod || s >= MP_PUSHES) {
        c->unknown_producer++;
        return;
    }
    const char *why = tu_big_check(&it->ev, EV_TYPE, p, s);
    if (why || it->ticks != s) {
        if (!c->first_error)
            c->first_error = why ? why : "ticks";
        c->content_errors++;
    }
    if ((int64_t)s <= c->last[p])
        c->order_errors++;
    c->last[p] = (int64_t)s;
    if (c->seen[p][s])
        c->dup_errors++;
    c->seen[p][s] = 1;
    c->popped[p]++;
}

static void *consumer(void *p)
{
    cons_arg *c = p;
    static cbt_bus_item it; /* one consumer: 2.6 KiB off the thread's stack */
    for (;;) {
        int done = atomic_load(c->producers_done);
        int n = 0;
        while (n < 64 && cbt_bus_pop(c->bus, &it)) {
            consume_one(c, &it);
            n++;
        }
        if (n)
            cbt_bus_release(c->bus);
        if (done && n == 0 && cbt_bus_drained(c->bus))
            break; /* drained after every producer had finished */
        if (n == 0)
            sched_yield();
    }
    return NULL;
}

/* retry: every push is retried until accepted, so the records run through
 * the ring a known number of times however the threads are scheduled; else
 * what does not fit is dropped, and the drops must add up. */
static void producers_race_one_consumer(int n_prod, uint32_t cells, int spsc, int retry)
{
    names_once();
    cbt_bus b;
    assert_int_equal(cbt_bus_init(&b, cells, spsc), CBT_OK);
    _Atomic int done = 0;
    static prod_arg pa[MP_MAX];
    static cons_arg ca;
    memset(&ca, 0, sizeof ca);
    ca.bus = &b;
    ca.n_prod = n_prod;
    ca.producers_done = &done;
    for (int i = 0; i < n_prod; i++) {
        memset(&pa[i], 0, sizeof pa[i]);
        pa[i].bus = &b;
        pa[i].id = (uint32_t)i;
        pa[i].retry = retry;
        pa[i].ok = calloc(MP_PUSHES, 1);
        ca.seen[i] = calloc(MP_PUSHES, 1);
        ca.last[i] = -1;
        assert_non_null(pa[i].ok);
        assert_non_null(ca.seen[i]);
    }
    pthread_t ct, pt[MP_MAX];
    assert_int_equal(pthread_create(&ct, NULL, consumer, &ca), 0);
    for (int i = 0; i < n_prod; i++)
        assert_int_equal(pthread_create(&pt[i], NULL, producer, &pa[i]), 0);
    for (int i = 0; i < n_prod; i++)
        pthread_join(pt[i], NULL);
    atomic_store(&done, 1);
    pthread_join(ct, NULL);

    uint64_t acc = 0, drop = 0;
    for (int i = 0; i < n_prod; i++) {
        assert_true(pa[i].other == 0);
        if (retry)
            assert_true(pa[i].accepted == MP_PUSHES);
        else
            assert_true(pa[i].accepted + pa[i].dropped == MP_PUSHES);
        acc += pa[i].accepted;
        drop += pa[i].dropped;
        /* exactly the accepted pushes came out, each once */
        assert_true(ca.popped[i] == pa[i].accepted);
        assert_int_equal(memcmp(pa[i].ok, ca.seen[i], MP_PUSHES), 0);
    }
    if (ca.first_error)
        fprintf(stderr, "# bus: first content error: %s\n", ca.first_error);
    assert_true(ca.content_errors == 0);
    assert_true(ca.order_errors == 0);
    assert_true(ca.dup_errors == 0);
    assert_true(ca.unknown_producer == 0);
    assert_true(cbt_bus_accepted(&b) == acc);
    assert_true(atomic_load(&b.dropped) == drop);
    if (!retry)
        assert_true(acc + drop == (uint64_t)n_prod * MP_PUSHES);
    assert_true(acc > 0);
    assert_true(cbt_bus_depth(&b) == 0);
    assert_true(cbt_bus_cells_used(&b) == 0);
    /* many laps: every record accepted, at 2 cells or more each */
    if (retry)
        assert_true(atomic_load(&b.tail) >= 2ull * MP_PUSHES * (uint64_t)n_prod);
    assert_true(atomic_load(&b.tail) > (retry ? 100ull : 1ull) * cells);
    cbt_bus_item *it = malloc(sizeof *it);
    assert_int_equal(cbt_bus_pop(&b, it), 0);
    free(it);
    fprintf(stderr, "# bus: %d producer(s): %llu accepted, %llu dropped of %u, %llu laps\n", n_prod,
            (unsigned long long)acc, (unsigned long long)drop, n_prod * MP_PUSHES,
            (unsigned long long)(atomic_load(&b.tail) / cells));
    for (int i = 0; i < n_prod; i++) {
        free(pa[i].ok);
        free(ca.seen[i]);
    }
    cbt_bus_destroy(&b);
}

static void many_producers_one_consumer(void **state)
{
    (void)state;
    producers_race_one_consumer(4, 1024, 0, 0); /* drops counted */
    producers_race_one_consumer(4, 1024, 0, 1); /* every record, many laps */
}

/* A lane's protocol (tail commits) with its one producer racing the
 * consumer around 256 cells, and the bus's with one producer. */
static void one_producer_one_consumer(void **state)
{
    (void)state;
    producers_race_one_consumer(1, 256, 1, 1);
    producers_race_one_consumer(1, 256, 0, 1);
    producers_race_one_consumer(1, 256, 1, 0);
}

/* ---- no drop while the queue is not full ----
 * Producers keep at most CAP cells claimed-and-unreleased (a shared counter,
 * raised by a record's cells before its push, lowered by the consumer after
 * it released what it popped). Then the queue is never full when a push
 * claims its cells, so every push must be accepted: a CBT_ERR_FULL here is a
 * drop of an event that had room. */

#define NF_PRODUCERS 4
#define NF_PUSHES 100000u
#define NF_CAP 256

typedef struct nf_shared {
    cbt_bus bus;
    _Atomic int64_t inflight; /* cells */
    _Atomic int done;
} nf_shared;

typedef struct nf_prod {
    nf_shared *sh;
    uint32_t id;
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
    cbt_name kv = 0;
    cbt_intern("bus.nf.v", &kv);
    for (uint32_t s = 0; s < NF_PUSHES; s++) {
        ev.n_meta = (uint8_t)(s % 5); /* 2 to 4 cells */
        for (uint32_t j = 0; j < ev.n_meta; j++) {
            ev.meta[j].key = kv;
            ev.meta[j].type = CBT_META_I64;
            ev.meta[j].v.i64 = s;
        }
        int64_t k = cbt_rec_cells(&ev, 0);
        while (atomic_fetch_add(&a->sh->inflight, k) + k > NF_CAP) {
            atomic_fetch_sub(&a->sh->inflight, k);
            sched_yield();
        }
        ev.pair = ((uint64_t)a->id << 32) | s;
        cbt_status st = cbt_bus_push(&a->sh->bus, &ev, s + 1, NULL, NULL);
        if (st == CBT_OK) {
            a->accepted++;
        } else {
            atomic_fetch_sub(&a->sh->inflight, k);
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
    static cbt_bus_item it;
    for (int i = 0; i < NF_PRODUCERS; i++)
        c->last[i] = -1;
    for (;;) {
        int done = atomic_load(&c->sh->done);
        int64_t n = 0, cells = 0;
        while (n < 16 && cbt_bus_pop(&c->sh->bus, &it)) {
            uint32_t pr = (uint32_t)(it.ev.pair >> 32);
            int64_t sq = (int64_t)(it.ev.pair & 0xffffffffu);
            if (pr >= NF_PRODUCERS || sq <= c->last[pr] || it.ev.n_meta != sq % 5)
                c->order_errors++;
            else
                c->last[pr] = sq;
            cells += cbt_rec_cells(&it.ev, 0);
            n++;
        }
        if (n) {
            cbt_bus_release(&c->sh->bus);
            atomic_fetch_sub(&c->sh->inflight, cells);
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
    assert_int_equal(cbt_bus_init(&sh.bus, NF_CAP, 0), CBT_OK);
    static nf_prod pa[NF_PRODUCERS];
    static nf_cons ca;
    memset(&ca, 0, sizeof ca);
    ca.sh = &sh;
    pthread_t ct, pt[NF_PRODUCERS];
    assert_int_equal(pthread_create(&ct, NULL, nf_consumer, &ca), 0);
    for (int i = 0; i < NF_PRODUCERS; i++) {
        memset(&pa[i], 0, sizeof pa[i]);
        pa[i].sh = &sh;
        pa[i].id = (uint32_t)i;
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
        fprintf(stderr, "# bus: %llu pushes refused as full while their cells were free\n",
                (unsigned long long)spurious);
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
        cmocka_unit_test(record_sizes),
        cmocka_unit_test(capacity_rules),
        cmocka_unit_test_prestate(full_then_drops, (void *)&k_mpsc),
        cmocka_unit_test_prestate(full_then_drops, (void *)&k_spsc),
        cmocka_unit_test_prestate(fifo_everything_intact, (void *)&k_mpsc),
        cmocka_unit_test_prestate(fifo_everything_intact, (void *)&k_spsc),
        cmocka_unit_test_prestate(wrap_around, (void *)&k_mpsc),
        cmocka_unit_test_prestate(wrap_around, (void *)&k_spsc),
        cmocka_unit_test_prestate(stale_words_never_commit, (void *)&k_mpsc),
        cmocka_unit_test_prestate(stale_words_never_commit, (void *)&k_spsc),
        cmocka_unit_test(many_producers_one_consumer),
        cmocka_unit_test(one_producer_one_consumer),
        cmocka_unit_test(no_drop_while_not_full),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
