/* tests/test_cuda_marks.c — the CUDA stream backend's bookkeeping on the CPU,
 * no CUDA at all (host/internal/cuda_marks.h): the pool hands out every
 * index once and refuses past it; the pending FIFO resolves marks in stream
 * order, a pending one holding back those behind it even when they have
 * completed; ms -> ns is exact for exact floats (the 1e3 slip of issue 11
 * fails here); a mark's time from the reference's host stamp or through a
 * fitted device clock; re-anchoring keeps later marks' times; the pool
 * taken from and given back to by four threads at once never hands an
 * index to two of them. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "internal/cuda_marks.h"
#include "testutil.h"

static void pool_hands_out_each_index_once(void **state)
{
    (void)state;
    static cbt_evpool p;
    static uint8_t seen[CBT_STREAM_CUDA_POOL];
    memset(seen, 0, sizeof seen);
    cbt_evpool_init(&p, CBT_STREAM_CUDA_POOL);
    uint32_t idx = 0;
    for (uint32_t i = 0; i < CBT_STREAM_CUDA_POOL; i++) {
        assert_int_equal(cbt_evpool_take(&p, &idx), CBT_OK);
        assert_true(idx < CBT_STREAM_CUDA_POOL);
        assert_int_equal(seen[idx], 0);
        seen[idx] = 1;
    }
    assert_int_equal(cbt_evpool_take(&p, &idx), CBT_ERR_FULL);
    assert_int_equal(cbt_evpool_take(&p, &idx), CBT_ERR_FULL);
    cbt_evpool_put(&p, 17);
    assert_int_equal(cbt_evpool_take(&p, &idx), CBT_OK);
    assert_int_equal(idx, 17);
    assert_int_equal(cbt_evpool_take(&p, &idx), CBT_ERR_FULL);
    /* a small pool: exactly n */
    cbt_evpool_init(&p, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(cbt_evpool_take(&p, &idx), CBT_OK);
    assert_int_equal(cbt_evpool_take(&p, &idx), CBT_ERR_FULL);
}

/* ---- the FIFO against a fake event table ----------------------------------------------- */

typedef struct fake {
    cbt_mark_state st[16];
    uint64_t dns[16];
    uint32_t out[16], n_out;
    cbt_mark_state out_st[16];
    uint64_t out_dns[16];
} fake;

static cbt_mark_state fq(void *ctx, uint32_t ev, uint64_t *dns)
{
    fake *f = ctx;
    *dns = f->dns[ev];
    return f->st[ev];
}

static void fd(void *ctx, uint32_t ev, cbt_mark_state st, uint64_t dns)
{
    fake *f = ctx;
    f->out_st[f->n_out] = st;
    f->out_dns[f->n_out] = dns;
    f->out[f->n_out++] = ev;
}

static void fifo_resolves_in_stream_order(void **state)
{
    (void)state;
    static cbt_markq q;
    fake f;
    memset(&f, 0, sizeof f);
    cbt_markq_init(&q);
    /* recorded 5, 2, 9, 4 */
    uint32_t order[4] = {5, 2, 9, 4};
    for (int i = 0; i < 4; i++)
        assert_int_equal(cbt_markq_push(&q, order[i]), CBT_OK);
    /* the later ones complete first: nothing leaves while 5 is pending */
    f.st[2] = f.st[9] = CBT_MARK_DONE;
    f.dns[2] = 200, f.dns[9] = 300;
    assert_int_equal(cbt_markq_resolve(&q, fq, fd, &f), 4);
    assert_int_equal(f.n_out, 0);
    /* 5 completes: 5, 2, 9 leave in that order; 4 holds */
    f.st[5] = CBT_MARK_DONE;
    f.dns[5] = 100;
    assert_int_equal(cbt_markq_resolve(&q, fq, fd, &f), 1);
    assert_int_equal(f.n_out, 3);
    assert_int_equal(f.out[0], 5);
    assert_int_equal(f.out[1], 2);
    assert_int_equal(f.out[2], 9);
    assert_int_equal(f.out_dns[0], 100);
    assert_int_equal(f.out_dns[2], 300);
    /* a failed one leaves too, said so */
    f.st[4] = CBT_MARK_FAILED;
    assert_int_equal(cbt_markq_resolve(&q, fq, fd, &f), 0);
    assert_int_equal(f.out[3], 4);
    assert_int_equal(f.out_st[3], CBT_MARK_FAILED);
    assert_int_equal(cbt_markq_resolve(&q, fq, fd, &f), 0);
    assert_int_equal(f.n_out, 4);
}

static uint32_t g_dropped[CBT_STREAM_CUDA_POOL], g_n_dropped;
static void drop(void *ctx, uint32_t ev)
{
    (void)ctx;
    g_dropped[g_n_dropped++] = ev;
}

static uint32_t g_next;
static cbt_mark_state all_done(void *ctx, uint32_t ev, uint64_t *dns)
{
    (void)ctx;
    *dns = ev;
    return CBT_MARK_DONE;
}
static void in_order(void *ctx, uint32_t ev, cbt_mark_state st, uint64_t dns)
{
    (void)ctx;
    assert_int_equal(st, CBT_MARK_DONE);
    assert_int_equal(ev, g_next % CBT_STREAM_CUDA_POOL);
    assert_int_equal(dns, ev);
    g_next++;
}

/* Bounded by the pool, wrapping around; clear gives every index back. */
static void fifo_bounded_wraps_and_clears(void **state)
{
    (void)state;
    static cbt_markq q;
    cbt_markq_init(&q);
    for (uint32_t i = 0; i < CBT_STREAM_CUDA_POOL; i++)
        assert_int_equal(cbt_markq_push(&q, i % 16), CBT_OK);
    assert_int_equal(cbt_markq_push(&q, 1), CBT_ERR_FULL);
    cbt_markq_clear(&q, drop, NULL);
    assert_int_equal(g_n_dropped, CBT_STREAM_CUDA_POOL);
    assert_int_equal(g_dropped[17], 1);
    assert_int_equal(q.count, 0);
    /* wrap: three rounds of 700 push the head past the end; order holds */
    for (uint32_t r = 0; r < 3; r++) {
        for (uint32_t i = 0; i < 700; i++)
            assert_int_equal(cbt_markq_push(&q, (r * 700 + i) % CBT_STREAM_CUDA_POOL), CBT_OK);
        g_next = r * 700;
        assert_int_equal(cbt_markq_resolve(&q, all_done, in_order, NULL), 0);
        assert_int_equal(g_next, r * 700 + 700);
    }
}

static void ms_to_ns_exact(void **state)
{
    (void)state;
    assert_int_equal(cbt_cuda_ms_to_ns(1.0f), 1000000ull);
    assert_int_equal(cbt_cuda_ms_to_ns(2.5f), 2500000ull);
    assert_int_equal(cbt_cuda_ms_to_ns(0.125f), 125000ull);
    assert_int_equal(cbt_cuda_ms_to_ns(4096.0f), 4096000000ull);
    assert_int_equal(cbt_cuda_ms_to_ns(0.0f), 0);
    assert_int_equal(cbt_cuda_ms_to_ns(-0.5f), 0); /* never before the reference */
}

static void mark_time_host_and_device(void **state)
{
    (void)state;
    cbt_clock_map m;
    memset(&m, 0, sizeof m);
    m.base_ticks = 1000;
    m.base_unix = 1700000000000000000ull;
    m.ns_per_tick = 0.5; /* 2 ticks per ns */
    cbt_cuda_anchor a = {.ref_ticks = 3000, .ref_dev = 50000000000ull};
    /* unfitted (or no) device clock: the reference's host stamp + dns */
    uint64_t ref_unix = m.base_unix + 1000; /* (3000 - 1000) * 0.5 */
    assert_int_equal(cbt_cuda_mark_unix(&a, 2500000, &m, NULL), ref_unix + 2500000);
    cbt_devclock dc;
    cbt_devclock_init(&dc, 0.5);
    assert_int_equal(cbt_cuda_mark_unix(&a, 2500000, &m, &dc), ref_unix + 2500000);
    /* fitted: dev ns -> ticks by the line (here: dev0 at tick 3000, 2 ticks/ns) */
    dc.fitted = 1;
    dc.dev0 = a.ref_dev;
    dc.tick0 = 3000;
    dc.ticks_per_ns = 2.0;
    assert_int_equal(cbt_cuda_mark_unix(&a, 2500000, &m, &dc), ref_unix + 2500000);
    dc.tick0 = 3000 + 2 * 400; /* the device clock reads 400 ns early */
    assert_int_equal(cbt_cuda_mark_unix(&a, 2500000, &m, &dc), ref_unix + 2500000 + 400);
    /* re-anchoring on a mark 6 s later keeps a later mark's time */
    uint64_t later = cbt_cuda_mark_unix(&a, 6000000000ull + 1000, &m, NULL);
    cbt_cuda_anchor_move(&a, 6000000000ull, m.ns_per_tick);
    assert_int_equal(a.ref_dev, 56000000000ull);
    assert_int_equal(cbt_cuda_mark_unix(&a, 1000, &m, NULL), later);
}

/* ---- the pool from many threads ---------------------------------------------------------- */

enum { POOL_THREADS = 4, POOL_ROUNDS = 200000 };
static cbt_evpool g_mt_pool;
static _Atomic uint32_t g_owner[CBT_STREAM_CUDA_POOL]; /* 0 free, else the taker's number */
static _Atomic uint64_t g_mt_errors;

static void *pool_worker(void *p)
{
    uint32_t me = (uint32_t)(uintptr_t)p, held[8], n = 0;
    for (uint32_t r = 0; r < POOL_ROUNDS; r++) {
        /* hold up to 8 at a time, giving back in a pseudo-random order */
        if (n < 8 && (r % 3 != 0 || n == 0)) {
            uint32_t idx;
            if (cbt_evpool_take(&g_mt_pool, &idx) != CBT_OK)
                continue; /* the others hold the rest */
            uint32_t was = 0;
            if (idx >= CBT_STREAM_CUDA_POOL ||
                !atomic_compare_exchange_strong(&g_owner[idx], &was, me))
                atomic_fetch_add(&g_mt_errors, 1); /* handed out twice */
            held[n++] = idx;
        } else {
            uint32_t k = (r * 2654435761u) % n;
            uint32_t idx = held[k];
            held[k] = held[--n];
            uint32_t was = me;
            if (!atomic_compare_exchange_strong(&g_owner[idx], &was, 0))
                atomic_fetch_add(&g_mt_errors, 1);
            cbt_evpool_put(&g_mt_pool, idx);
        }
    }
    while (n) {
        uint32_t idx = held[--n];
        atomic_store(&g_owner[idx], 0);
        cbt_evpool_put(&g_mt_pool, idx);
    }
    return NULL;
}

/* A pool of 16 (so the threads contend for the top and run it dry) taken
 * from and given back to by 4 threads: no index is ever held by two, and
 * all 16 are there at the end. */
static void pool_many_threads(void **state)
{
    (void)state;
    cbt_evpool_init(&g_mt_pool, 16);
    pthread_t th[POOL_THREADS];
    for (uintptr_t i = 0; i < POOL_THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, pool_worker, (void *)(i + 1)), 0);
    for (int i = 0; i < POOL_THREADS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    assert_int_equal(atomic_load(&g_mt_errors), 0);
    static uint8_t seen[CBT_STREAM_CUDA_POOL];
    memset(seen, 0, sizeof seen);
    uint32_t idx, n = 0;
    while (cbt_evpool_take(&g_mt_pool, &idx) == CBT_OK) {
        assert_true(idx < 16);
        assert_int_equal(seen[idx], 0);
        seen[idx] = 1;
        n++;
    }
    assert_int_equal(n, 16);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pool_hands_out_each_index_once),
        cmocka_unit_test(pool_many_threads),
        cmocka_unit_test(fifo_resolves_in_stream_order),
        cmocka_unit_test(fifo_bounded_wraps_and_clears),
        cmocka_unit_test(ms_to_ns_exact),
        cmocka_unit_test(mark_time_host_and_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
