/* tests/test_kernels_ref.c — the C references of the KV-movement kernels
 * (cbt/kv_kernels.h) against formulas written here from the spec, on
 * random data (seed printed; CBT_TEST_SEED overrides) with outputs poisoned
 * first, so an element the reference forgot to write, or wrote where it must
 * not, fails. Also the fp16/bf16 conversions the references round with, the
 * argument checks, and the ring records the references stamp through the
 * CBT_KERNEL_SPAN macros. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "cbt/kv_kernels.h"
#include "kernels_impl.h"

#define POISON 0xA5u
#define MAXL 32

/* ---- random numbers ---------------------------------------------------------- */

static uint64_t g_rng;

static uint64_t rnd(void)
{
    /* xorshift64* */
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 0x2545F4914F6CDD1Dull;
}

static uint32_t rnd_below(uint32_t n) { return (uint32_t)(rnd() % n); }

/* ---- element codecs written here (independent of kernels_impl.h) --------------- */

static double t_f16(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0)
        v = ldexp((double)m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexp((double)(1024 + m), e - 25);
    return s ? -v : v;
}

static double t_bf16(uint16_t h)
{
    int s = h >> 15, e = (h >> 7) & 255, m = h & 127;
    double v;
    if (e == 0)
        v = ldexp((double)m, -133);
    else if (e == 255)
        v = m ? NAN : INFINITY;
    else
        v = ldexp((double)(128 + m), e - 134);
    return s ? -v : v;
}

static double t_load(const void *base, size_t i, cbt_dtype dt)
{
    const unsigned char *p = base;
    if (dt == CBT_DT_F32) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return dt == CBT_DT_F16 ? t_f16(h) : t_bf16(h);
}

/* One random element of `dt` at p: nonzero, |v| in about [2^-10, 4), never the
 * poison pattern. */
static void rnd_elem(unsigned char *p, cbt_dtype dt)
{
    for (;;) {
        uint64_t r = rnd();
        switch (dt) {
        case CBT_DT_F32: {
            float f = (float)ldexp((double)((r >> 11) % 1000000u + 1u), -20) * 4.0f;
            if (r & 1u)
                f = -f;
            memcpy(p, &f, 4);
            break;
        }
        case CBT_DT_F16: {
            uint16_t h = (uint16_t)(((r & 1u) << 15) | ((5u + (r >> 8) % 12u) << 10) | ((r >> 20) & 1023u));
            memcpy(p, &h, 2);
            break;
        }
        case CBT_DT_BF16: {
            uint16_t h = (uint16_t)(((r & 1u) << 15) | ((117u + (r >> 8) % 12u) << 7) | ((r >> 20) & 127u));
            memcpy(p, &h, 2);
            break;
        }
        case CBT_DT_U8:
            p[0] = (unsigned char)(1u + (r >> 8) % 255u);
            break;
        }
        uint32_t es = cbt_dtype_size(dt);
        int poison = 1;
        for (uint32_t k = 0; k < es; k++)
            poison &= p[k] == POISON;
        if (!poison)
            return;
    }
}

static void rnd_fill(void *buf, size_t n_elems, cbt_dtype dt)
{
    uint32_t es = cbt_dtype_size(dt);
    for (size_t i = 0; i < n_elems; i++)
        rnd_elem((unsigned char *)buf + i * es, dt);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    assert_non_null(p);
    return p;
}

static void *poisoned(size_t n)
{
    void *p = xmalloc(n);
    memset(p, POISON, n);
    return p;
}

static void *dup_buf(const void *src, size_t n)
{
    void *p = xmalloc(n);
    memcpy(p, src, n);
    return p;
}

static const cbt_dtype k_all_dt[] = {CBT_DT_F32, CBT_DT_F16, CBT_DT_BF16, CBT_DT_U8};
static const cbt_dtype k_float_dt[] = {CBT_DT_F32, CBT_DT_F16, CBT_DT_BF16};
static const char *dt_name(cbt_dtype d)
{
    return d == CBT_DT_F32 ? "f32" : d == CBT_DT_F16 ? "f16" : d == CBT_DT_BF16 ? "bf16" : "u8";
}

/* ---- KV buffers in both layouts -------------------------------------------------- */

typedef struct kvbuf {
    cbt_kv_geom g;
    uint32_t es;
    size_t hidden, row, chunk_bytes, layer_bytes;
    unsigned char *chunk;
    void *paged[MAXL];
} kvbuf;

static void kv_init(kvbuf *k, uint32_t L, uint32_t heads, uint32_t hd, cbt_dtype dt, uint32_t bs,
                    uint32_t nb, uint32_t C)
{
    assert_true(L <= MAXL);
    memset(k, 0, sizeof *k);
    k->g = (cbt_kv_geom){L, heads, hd, dt, bs, nb, C};
    k->es = cbt_dtype_size(dt);
    k->hidden = (size_t)heads * hd;
    k->row = k->hidden * k->es;
    k->chunk_bytes = 2u * L * (size_t)C * k->row;
    k->layer_bytes = 2u * (size_t)nb * bs * k->row;
    k->chunk = xmalloc(k->chunk_bytes);
    for (uint32_t l = 0; l < L; l++)
        k->paged[l] = xmalloc(k->layer_bytes);
}

static void kv_free(kvbuf *k)
{
    free(k->chunk);
    for (uint32_t l = 0; l < k->g.num_layers; l++)
        free(k->paged[l]);
}

/* chunk [2][L][C][hidden]; paged[l] [2][nb * bs][hidden] */
static unsigned char *crow(const kvbuf *k, const void *chunk, uint32_t kv, uint32_t l, uint32_t r)
{
    return (unsigned char *)chunk + (((size_t)kv * k->g.num_layers + l) * k->g.chunk_tokens + r) * k->row;
}

static unsigned char *prow(const kvbuf *k, const void *layer, uint32_t kv, int64_t slot)
{
    return (unsigned char *)layer + ((size_t)kv * k->g.num_blocks * k->g.block_size + (size_t)slot) * k->row;
}

/* The spec's slot: block_table[pos / bs] * bs + pos % bs, or -1 when a guard
 * drops the token. */
static int64_t t_slot(const kvbuf *k, const int32_t *bt, uint32_t n_table, int32_t pos)
{
    if (pos < 0)
        return -1;
    uint32_t b = (uint32_t)pos / k->g.block_size;
    if (b >= n_table || bt[b] < 0)
        return -1;
    int64_t s = (int64_t)bt[b] * k->g.block_size + (uint32_t)pos % k->g.block_size;
    if (s >= (int64_t)k->g.num_blocks * k->g.block_size)
        return -1;
    return s;
}

/* A block table of n_table distinct block ids drawn from [0, nb). */
static int32_t *rnd_table(uint32_t n_table, uint32_t nb)
{
    assert_true(n_table <= nb);
    int32_t *all = xmalloc(nb * sizeof *all);
    for (uint32_t i = 0; i < nb; i++)
        all[i] = (int32_t)i;
    for (uint32_t i = nb - 1; i > 0; i--) {
        uint32_t j = rnd_below(i + 1);
        int32_t t = all[i];
        all[i] = all[j];
        all[j] = t;
    }
    return all; /* the first n_table entries are the table */
}

/* n distinct positions from [0, limit), shuffled. */
static int32_t *rnd_positions(uint32_t n, uint32_t limit)
{
    assert_true(n <= limit);
    int32_t *all = xmalloc(limit * sizeof *all);
    for (uint32_t i = 0; i < limit; i++)
        all[i] = (int32_t)i;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t j = i + rnd_below(limit - i);
        int32_t t = all[i];
        all[i] = all[j];
        all[j] = t;
    }
    return all;
}

/* ---- re-RoPE in float64, from the spec ----------------------------------------------- */

/* cos/sin cache [max_pos][rot]: cos(p * theta_j) then sin, theta_j = 10000^(-2j/rot). */
static void *make_cos_sin(uint32_t max_pos, uint32_t rot, cbt_dtype dt)
{
    uint32_t es = cbt_dtype_size(dt), half = rot / 2;
    unsigned char *cs = xmalloc((size_t)max_pos * rot * es);
    for (uint32_t p = 0; p < max_pos; p++)
        for (uint32_t j = 0; j < half; j++) {
            double th = pow(10000.0, -2.0 * j / rot) * p;
            cbt_elem_store(cs, (size_t)p * rot + j, dt, (float)cos(th));
            cbt_elem_store(cs, (size_t)p * rot + half + j, dt, (float)sin(th));
        }
    return cs;
}

/* Check one token's keys `got` against in rotated from p to q in float64:
 * rotated dims within `tol` (norm-wise over the row), the others bit-equal. */
static void check_rope_row(const void *got, const void *in, uint32_t heads, uint32_t hd,
                           cbt_dtype dt, const cbt_rope *r, int32_t p, int32_t q, double tol)
{
    uint32_t half = r->rot_dim / 2, es = cbt_dtype_size(dt);
    double num = 0, den = 0;
    for (uint32_t h = 0; h < heads; h++) {
        size_t b = (size_t)h * hd;
        for (uint32_t j = 0; j < half; j++) {
            size_t i1 = r->style == CBT_ROPE_NEOX ? b + j : b + 2 * j;
            size_t i2 = r->style == CBT_ROPE_NEOX ? b + j + half : b + 2 * j + 1;
            double cp = t_load(r->cos_sin, (size_t)p * r->rot_dim + j, dt);
            double sp = t_load(r->cos_sin, (size_t)p * r->rot_dim + half + j, dt);
            double cq = t_load(r->cos_sin, (size_t)q * r->rot_dim + j, dt);
            double sq = t_load(r->cos_sin, (size_t)q * r->rot_dim + half + j, dt);
            double x1 = t_load(in, i1, dt), x2 = t_load(in, i2, dt);
            double y1 = x1 * cp + x2 * sp, y2 = x2 * cp - x1 * sp;
            double z1 = y1 * cq - y2 * sq, z2 = y1 * sq + y2 * cq;
            double g1 = t_load(got, i1, dt), g2 = t_load(got, i2, dt);
            assert_false(isnan(g1) || isnan(g2));
            num += (g1 - z1) * (g1 - z1) + (g2 - z2) * (g2 - z2);
            den += z1 * z1 + z2 * z2;
        }
        if (r->rot_dim < hd)
            assert_memory_equal((const unsigned char *)got + (b + r->rot_dim) * es,
                                (const unsigned char *)in + (b + r->rot_dim) * es,
                                (hd - r->rot_dim) * es);
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    if (!(rel < tol))
        fail_msg("re-RoPE %s p=%d q=%d: rel err %.3g >= %.3g", dt_name(dt), p, q, rel, tol);
}

static double rope_tol(cbt_dtype dt) { return dt == CBT_DT_F32 ? 1e-5 : 1e-2; }

/* ---- conversions --------------------------------------------------------------------------- */

static void f16_conversions(void **state)
{
    (void)state;
    /* decode: every half */
    for (uint32_t h = 0; h < 0x10000u; h++) {
        double want = t_f16((uint16_t)h);
        float got = cbt_f16_to_f32((uint16_t)h);
        if (isnan(want))
            assert_true(isnan(got));
        else
            assert_true((double)got == want);
    }
    /* encode: every finite half exactly, the midpoint to the next one (ties to
     * even: 0x7bff's upper neighbour is inf) and just either side of it */
    for (uint32_t h = 0; h < 0x7c00u; h++) {
        for (int sgn = 0; sgn < 2; sgn++) {
            uint16_t lo = (uint16_t)(h | (sgn ? 0x8000u : 0)), hi = (uint16_t)(lo + 1u);
            float v = (float)t_f16(lo);
            assert_int_equal(cbt_f32_to_f16(v), lo);
            double next = h == 0x7bffu ? 65536.0 * (sgn ? -1 : 1) : t_f16(hi);
            float mid = (float)((t_f16(lo) + next) / 2);
            assert_true((double)mid == (t_f16(lo) + next) / 2); /* exact in float */
            assert_int_equal(cbt_f32_to_f16(mid), (lo & 1u) ? hi : lo);
            float toward_lo = nextafterf(mid, 0.0f), toward_hi = nextafterf(mid, sgn ? -INFINITY : INFINITY);
            assert_int_equal(cbt_f32_to_f16(toward_lo), lo);
            assert_int_equal(cbt_f32_to_f16(toward_hi), hi);
        }
    }
    assert_int_equal(cbt_f32_to_f16(INFINITY), 0x7c00);
    assert_int_equal(cbt_f32_to_f16(-INFINITY), 0xfc00);
    assert_int_equal(cbt_f32_to_f16(1e9f), 0x7c00);
    assert_true(isnan(cbt_f16_to_f32(cbt_f32_to_f16(NAN))));
    assert_int_equal(cbt_f32_to_f16(1e-10f), 0);
}

static void bf16_conversions(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        double want = t_bf16((uint16_t)h);
        float got = cbt_bf16_to_f32((uint16_t)h);
        if (isnan(want))
            assert_true(isnan(got));
        else
            assert_true((double)got == want);
    }
    for (uint32_t h = 0; h < 0x7f80u; h++) {
        for (int sgn = 0; sgn < 2; sgn++) {
            uint16_t lo = (uint16_t)(h | (sgn ? 0x8000u : 0)), hi = (uint16_t)(lo + 1u);
            uint32_t bits = (uint32_t)lo << 16;
            float v, mid, below, above;
            memcpy(&v, &bits, 4);
            assert_int_equal(cbt_f32_to_bf16(v), lo);
            bits |= 0x8000u;
            memcpy(&mid, &bits, 4);
            assert_int_equal(cbt_f32_to_bf16(mid), (lo & 1u) ? hi : lo);
            bits -= 1u;
            memcpy(&below, &bits, 4);
            bits += 2u;
            memcpy(&above, &bits, 4);
            assert_int_equal(cbt_f32_to_bf16(below), lo);
            assert_int_equal(cbt_f32_to_bf16(above), hi);
        }
    }
    assert_int_equal(cbt_f32_to_bf16(INFINITY), 0x7f80);
    assert_true(isnan(cbt_bf16_to_f32(cbt_f32_to_bf16(NAN))));
    assert_int_equal(cbt_dtype_size(CBT_DT_F32), 4);
    assert_int_equal(cbt_dtype_size(CBT_DT_F16), 2);
    assert_int_equal(cbt_dtype_size(CBT_DT_BF16), 2);
    assert_int_equal(cbt_dtype_size(CBT_DT_U8), 1);
    assert_int_equal(cbt_dtype_size((cbt_dtype)9), 0);
}

/* ---- scatter -------------------------------------------------------------------------------- */

/* One scatter case: the reference against the spec's formula, every byte of
 * both layouts checked (written where the spec says, poison elsewhere). */
typedef struct scase {
    uint32_t L, heads, hd, bs, nb, C;
    uint32_t n_table, n_tokens, chunk_offset;
    const int32_t *positions; /* NULL: random distinct positions in the table */
    const int32_t *table;     /* NULL: random distinct blocks */
    uint32_t n_ctas;
    int expect_dropped; /* -1: don't care */
} scase;

static void run_scatter_case(const scase *c, cbt_dtype dt, cbt_scatter_dir dir, int traced)
{
    kvbuf k;
    kv_init(&k, c->L, c->heads, c->hd, dt, c->bs, c->nb, c->C);
    int32_t *table_own = NULL, *pos_own = NULL;
    const int32_t *table = c->table, *pos = c->positions;
    if (!table)
        table = table_own = rnd_table(c->n_table, c->nb);
    if (!pos)
        pos = pos_own = rnd_positions(c->n_tokens, c->n_table * c->bs);

    /* the source side random, the destination side poisoned */
    if (dir == CBT_SCATTER_RETRIEVE) {
        rnd_fill(k.chunk, k.chunk_bytes / k.es, dt);
        for (uint32_t l = 0; l < c->L; l++)
            memset(k.paged[l], POISON, k.layer_bytes);
    } else {
        memset(k.chunk, POISON, k.chunk_bytes);
        for (uint32_t l = 0; l < c->L; l++)
            rnd_fill(k.paged[l], k.layer_bytes / k.es, dt);
    }
    /* expected: a copy of the destination, then the spec's moves */
    void *exp_chunk = dup_buf(k.chunk, k.chunk_bytes);
    void *exp_paged[MAXL];
    for (uint32_t l = 0; l < c->L; l++)
        exp_paged[l] = dup_buf(k.paged[l], k.layer_bytes);
    uint32_t scattered = 0, dropped = 0;
    for (uint32_t i = 0; i < c->n_tokens; i++) {
        int64_t s = t_slot(&k, table, c->n_table, pos[i]);
        if (s < 0) {
            dropped++;
            continue;
        }
        scattered++;
        for (uint32_t l = 0; l < c->L; l++)
            for (uint32_t kv = 0; kv < 2; kv++) {
                unsigned char *cr = crow(&k, dir == CBT_SCATTER_RETRIEVE ? k.chunk : exp_chunk, kv,
                                         l, c->chunk_offset + i);
                unsigned char *pr = prow(&k, dir == CBT_SCATTER_RETRIEVE ? exp_paged[l] : k.paged[l],
                                         kv, s);
                for (size_t e = 0; e < k.row; e++) {
                    if (dir == CBT_SCATTER_RETRIEVE)
                        pr[e] = cr[e];
                    else
                        cr[e] = pr[e];
                }
            }
    }
    if (c->expect_dropped >= 0)
        assert_int_equal(dropped, (uint32_t)c->expect_dropped);

    cbt_scatter_args a = {k.chunk, k.paged, pos, table, c->n_table, c->n_tokens, c->chunk_offset, NULL};
    cbt_scatter_result res;
    memset(&res, 0xff, sizeof res);
    static cbt_ring_rec recs[256];
    static cbt_fold_slot fold[CBT_FOLD_SLOTS];
    unsigned long long claim = 0;
    memset(recs, 0, sizeof recs);
    memset(fold, 0, sizeof fold);
    cbt_ring_dev ring = {recs, &claim, fold, 255, 0};
    cbt_kspan span = {&ring, 7, CBT_KOP_SCATTER, CBT_REC_LAUNCH, 0};
    assert_int_equal(cbt_scatter_ref(&k.g, &a, dir, traced ? &span : NULL, c->n_ctas, &res), CBT_OK);
    assert_int_equal(res.scattered, scattered);
    assert_int_equal(res.dropped, dropped);
    assert_int_equal(res.n_shifted, 0);
    assert_true(res.slot_writes == (uint64_t)scattered * c->L * 2);
    assert_memory_equal(k.chunk, exp_chunk, k.chunk_bytes);
    for (uint32_t l = 0; l < c->L; l++)
        assert_memory_equal(k.paged[l], exp_paged[l], k.layer_bytes);
    if (traced) {
        assert_int_equal(claim, 1);
        assert_int_equal(recs[0].tokens, scattered);
    } else {
        assert_int_equal(claim, 0);
    }

    free(exp_chunk);
    for (uint32_t l = 0; l < c->L; l++)
        free(exp_paged[l]);
    free(table_own);
    free(pos_own);
    kv_free(&k);
}

static void scatter_all_dtypes_both_dirs(void **state)
{
    (void)state;
    /* 16-byte rows and odd rows (3 x 5 elements), chunk offsets, 1..5 CTAs */
    const scase cases[] = {
        {3, 2, 8, 4, 12, 20, 10, 13, 5, NULL, NULL, 3, 0},
        {2, 3, 5, 5, 9, 11, 9, 11, 0, NULL, NULL, 1, 0},
        {4, 1, 16, 16, 4, 40, 3, 37, 2, NULL, NULL, 5, 0},
        {1, 4, 4, 1, 30, 30, 30, 30, 0, NULL, NULL, 2, 0},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (size_t d = 0; d < 4; d++)
            for (int dir = 0; dir < 2; dir++)
                for (int traced = 0; traced < 2; traced++)
                    run_scatter_case(&cases[ci], k_all_dt[d], (cbt_scatter_dir)dir, traced);
}

/* The benchmark's shape (32 layers, 8 x 128 bf16, 256 tokens: 32 MiB moved)
 * takes the non-temporal store path of the reference; it must still write
 * exactly the spec's bytes. */
static void scatter_large_streaming_path(void **state)
{
    (void)state;
    const scase big = {32, 8, 128, 16, 24, 256, 20, 256, 0, NULL, NULL, 4, 0};
    for (int dir = 0; dir < 2; dir++)
        run_scatter_case(&big, CBT_DT_BF16, (cbt_scatter_dir)dir, dir);
}

/* Every guard: position past the table (slot-bound guard), negative block id,
 * slot past num_blocks * block_size, negative position. */
static void scatter_guards(void **state)
{
    (void)state;
    /* bs 4, nb 6, table of 5: block 2 unallocated, block 3 -> id 9 (past nb),
     * block 4 -> id 6 (== nb: slot 24.. >= 24) */
    static const int32_t table[] = {3, 0, -1, 9, 6};
    static const int32_t pos[] = {
        0, 1, 2, 3, /* block 0 -> id 3: kept */
        5, 7,       /* block 1 -> id 0: kept */
        8, 11,      /* block 2: unallocated: dropped */
        12, 15,     /* block 3: id 9, slots 36..39 >= 24: dropped */
        16, 19,     /* block 4: id 6, slots 24..27 >= 24: dropped */
        20, 40, 1000000, /* blocks 5, 10, 250000 >= n_table: dropped (not reached yet) */
        -1, -7,     /* negative positions: dropped */
        6,          /* kept */
    };
    const uint32_t n = sizeof pos / sizeof pos[0];
    scase c = {2, 2, 8, 4, 6, 24, 5, n, 1, pos, table, 3, 11};
    for (size_t d = 0; d < 4; d++)
        for (int dir = 0; dir < 2; dir++) {
            run_scatter_case(&c, k_all_dt[d], (cbt_scatter_dir)dir, 0);
            run_scatter_case(&c, k_all_dt[d], (cbt_scatter_dir)dir, 1);
        }
}

/* Token-granular: a range that starts and ends inside blocks, written in two
 * passes — first with the table only partly allocated (the slot-bound guard
 * drops the rest), then with all of it. */
static void scatter_partial_blocks_two_passes(void **state)
{
    (void)state;
    const uint32_t bs = 16, nb = 10, n = 37, start = 5; /* positions 5..41: blocks 0..2 */
    int32_t pos[37];
    for (uint32_t i = 0; i < n; i++)
        pos[i] = (int32_t)(start + i);
    static const int32_t table[] = {7, 2, 5};
    kvbuf k;
    kv_init(&k, 2, 2, 8, CBT_DT_BF16, bs, nb, 64);
    rnd_fill(k.chunk, k.chunk_bytes / k.es, CBT_DT_BF16);
    for (uint32_t l = 0; l < 2; l++)
        memset(k.paged[l], POISON, k.layer_bytes);
    cbt_scatter_args a = {k.chunk, k.paged, pos, table, 2, n, 3, NULL};
    cbt_scatter_result r1, r2;
    assert_int_equal(cbt_scatter_ref(&k.g, &a, CBT_SCATTER_RETRIEVE, NULL, 0, &r1), CBT_OK);
    assert_int_equal(r1.scattered, 32 - start); /* blocks 0 and 1 */
    assert_int_equal(r1.dropped, n - (32 - start));
    /* block 5's slots are still poisoned after pass 1 */
    for (uint32_t l = 0; l < 2; l++)
        for (uint32_t kv = 0; kv < 2; kv++)
            for (uint32_t s = 5 * bs; s < 6 * bs; s++)
                for (size_t e = 0; e < k.row; e++)
                    assert_int_equal(prow(&k, k.paged[l], kv, s)[e], POISON);
    a.n_table = 3;
    assert_int_equal(cbt_scatter_ref(&k.g, &a, CBT_SCATTER_RETRIEVE, NULL, 0, &r2), CBT_OK);
    assert_int_equal(r2.scattered, n);
    assert_int_equal(r2.dropped, 0);
    for (uint32_t l = 0; l < 2; l++)
        for (uint32_t kv = 0; kv < 2; kv++)
            for (uint32_t b = 0; b < nb; b++)
                for (uint32_t o = 0; o < bs; o++) {
                    int64_t s = (int64_t)b * bs + o;
                    /* which token (if any) owns this slot */
                    int owner = -1;
                    for (uint32_t t = 0; t < 3; t++)
                        if ((uint32_t)table[t] == b && t * bs + o >= start && t * bs + o < start + n)
                            owner = (int)(t * bs + o - start);
                    if (owner < 0) {
                        for (size_t e = 0; e < k.row; e++)
                            assert_int_equal(prow(&k, k.paged[l], kv, s)[e], POISON);
                    } else {
                        assert_memory_equal(prow(&k, k.paged[l], kv, s),
                                            crow(&k, k.chunk, kv, l, 3u + (uint32_t)owner), k.row);
                    }
                }
    kv_free(&k);
}

/* ---- re-RoPE ---------------------------------------------------------------------------------- */

static void rerope_vs_f64(void **state)
{
    (void)state;
    const uint32_t heads = 3, max_pos = 512;
    const uint32_t hds[] = {16, 24}, rots[] = {16, 8};
    for (size_t d = 0; d < 3; d++)
        for (int style = 0; style < 2; style++)
            for (size_t v = 0; v < 2; v++) {
                cbt_dtype dt = k_float_dt[d];
                uint32_t hd = hds[v], rot = rots[v], n = 40, es = cbt_dtype_size(dt);
                size_t row = (size_t)heads * hd * es;
                void *cs = make_cos_sin(max_pos, rot, dt);
                int32_t oldp[40], newp[40];
                uint32_t want_shift = 0;
                for (uint32_t i = 0; i < n; i++) {
                    oldp[i] = (int32_t)rnd_below(max_pos);
                    newp[i] = i % 5 == 0 ? oldp[i] : (int32_t)rnd_below(max_pos);
                    if (i == 7)
                        newp[i] = (int32_t)max_pos; /* outside the cache: untouched */
                    if (i == 11)
                        oldp[i] = -3;
                    want_shift += oldp[i] != newp[i] && i != 7 && i != 11;
                }
                unsigned char *in = xmalloc(n * row);
                rnd_fill(in, n * row / es, dt);
                unsigned char *keys = dup_buf(in, n * row);
                cbt_rope r = {cs, rot, max_pos, (cbt_rope_style)style, oldp};
                uint32_t shifted = 12345;
                assert_int_equal(cbt_rerope_ref(keys, n, heads, hd, dt, &r, newp, NULL, &shifted), CBT_OK);
                assert_int_equal(shifted, want_shift);
                for (uint32_t i = 0; i < n; i++) {
                    if (oldp[i] == newp[i] || i == 7 || i == 11)
                        assert_memory_equal(keys + i * row, in + i * row, row);
                    else
                        check_rope_row(keys + i * row, in + i * row, heads, hd, dt, &r, oldp[i],
                                       newp[i], rope_tol(dt));
                }
                /* rotating back restores the keys (within the dtype's rounding) */
                cbt_rope back = r;
                back.old_positions = newp;
                assert_int_equal(cbt_rerope_ref(keys, n, heads, hd, dt, &back, oldp, NULL, NULL), CBT_OK);
                for (uint32_t i = 0; i < n; i++) {
                    double num = 0, den = 0;
                    for (size_t e = 0; e < (size_t)heads * hd; e++) {
                        double g = t_load(keys + i * row, e, dt), w = t_load(in + i * row, e, dt);
                        num += (g - w) * (g - w);
                        den += w * w;
                    }
                    assert_true(sqrt(num / den) < 4 * rope_tol(dt));
                }
                free(in);
                free(keys);
                free(cs);
            }
}

/* Rotating by old == new leaves every key bit-identical and shifts nothing. */
static void rerope_identity(void **state)
{
    (void)state;
    for (size_t d = 0; d < 3; d++) {
        cbt_dtype dt = k_float_dt[d];
        uint32_t n = 33, heads = 2, hd = 8, es = cbt_dtype_size(dt);
        size_t row = (size_t)heads * hd * es;
        void *cs = make_cos_sin(64, hd, dt);
        int32_t p[33];
        for (uint32_t i = 0; i < n; i++)
            p[i] = (int32_t)rnd_below(64);
        unsigned char *in = xmalloc(n * row);
        rnd_fill(in, n * row / es, dt);
        unsigned char *keys = dup_buf(in, n * row);
        cbt_rope r = {cs, hd, 64, CBT_ROPE_NEOX, p};
        uint32_t shifted = 99;
        assert_int_equal(cbt_rerope_ref(keys, n, heads, hd, dt, &r, p, NULL, &shifted), CBT_OK);
        assert_int_equal(shifted, 0);
        assert_memory_equal(keys, in, n * row);
        free(in);
        free(keys);
        free(cs);
    }
}

/* Fused re-RoPE in the scatter == plain scatter, then the standalone re-RoPE
 * of the scattered keys; and against float64; V rows and unshifted tokens are
 * plain copies. */
static void scatter_fused_rerope(void **state)
{
    (void)state;
    const uint32_t L = 3, heads = 2, hd = 16, bs = 8, nb = 12, C = 48, n_table = 10, max_pos = 128;
    for (size_t d = 0; d < 3; d++)
        for (int style = 0; style < 2; style++)
            for (uint32_t rot = 8; rot <= 16; rot += 8) {
                cbt_dtype dt = k_float_dt[d];
                kvbuf k;
                kv_init(&k, L, heads, hd, dt, bs, nb, C);
                int32_t *table = rnd_table(n_table, nb);
                const uint32_t n = 41, off = 4;
                int32_t *pos = rnd_positions(n, n_table * bs);
                int32_t oldp[41];
                uint32_t want_shift = 0, want_drop = 0;
                for (uint32_t i = 0; i < n; i++) {
                    oldp[i] = i % 4 == 0 ? pos[i] : (int32_t)rnd_below(max_pos);
                    if (i == 9) {
                        oldp[i] = (int32_t)max_pos + 5; /* can't be rotated: dropped */
                        want_drop++;
                        continue;
                    }
                    want_shift += oldp[i] != pos[i];
                }
                void *cs = make_cos_sin(max_pos, rot, dt);
                cbt_rope r = {cs, rot, max_pos, (cbt_rope_style)style, oldp};
                rnd_fill(k.chunk, k.chunk_bytes / k.es, dt);
                void *fused[MAXL], *plain[MAXL];
                for (uint32_t l = 0; l < L; l++) {
                    fused[l] = poisoned(k.layer_bytes);
                    plain[l] = poisoned(k.layer_bytes);
                }
                cbt_scatter_args a = {k.chunk, fused, pos, table, n_table, n, off, &r};
                cbt_scatter_result res;
                assert_int_equal(cbt_scatter_ref(&k.g, &a, CBT_SCATTER_RETRIEVE, NULL, 0, &res), CBT_OK);
                assert_int_equal(res.n_shifted, want_shift);
                assert_int_equal(res.dropped, want_drop);
                assert_int_equal(res.scattered, n - want_drop);

                /* plain scatter of the same tokens minus the dropped one */
                int32_t pos2[41];
                memcpy(pos2, pos, sizeof pos2);
                pos2[9] = -1;
                cbt_scatter_args b = {k.chunk, plain, pos2, table, n_table, n, off, NULL};
                assert_int_equal(cbt_scatter_ref(&k.g, &b, CBT_SCATTER_RETRIEVE, NULL, 0, &res), CBT_OK);
                assert_int_equal(res.scattered, n - 1);

                /* standalone re-RoPE of each layer's scattered keys, gathered */
                unsigned char *keys = xmalloc(n * k.row);
                int32_t gold[41], gnew[41];
                int64_t gslot[41];
                uint32_t m = 0;
                for (uint32_t i = 0; i < n; i++) {
                    if (i == 9)
                        continue;
                    gslot[m] = t_slot(&k, table, n_table, pos[i]);
                    assert_true(gslot[m] >= 0);
                    gold[m] = oldp[i];
                    gnew[m] = pos[i];
                    m++;
                }
                cbt_rope gr = r;
                gr.old_positions = gold;
                for (uint32_t l = 0; l < L; l++) {
                    for (uint32_t t = 0; t < m; t++)
                        memcpy(keys + t * k.row, prow(&k, plain[l], 0, gslot[t]), k.row);
                    uint32_t sh = 0;
                    assert_int_equal(cbt_rerope_ref(keys, m, heads, hd, dt, &gr, gnew, NULL, &sh), CBT_OK);
                    assert_int_equal(sh, want_shift);
                    for (uint32_t t = 0; t < m; t++) {
                        /* against float64 first */
                        unsigned char *src = crow(&k, k.chunk, 0, l, off + (uint32_t)(t < 9 ? t : t + 1));
                        if (gold[t] != gnew[t])
                            check_rope_row(prow(&k, fused[l], 0, gslot[t]), src, heads, hd, dt, &r,
                                           gold[t], gnew[t], rope_tol(dt));
                        else
                            assert_memory_equal(prow(&k, fused[l], 0, gslot[t]), src, k.row);
                        memcpy(prow(&k, plain[l], 0, gslot[t]), keys + t * k.row, k.row);
                    }
                    assert_memory_equal(fused[l], plain[l], k.layer_bytes);
                }
                /* the dropped token's slots are still poisoned */
                int64_t s9 = t_slot(&k, table, n_table, pos[9]);
                for (uint32_t l = 0; l < L; l++)
                    for (uint32_t kv = 0; kv < 2; kv++)
                        for (size_t e = 0; e < k.row; e++)
                            assert_int_equal(prow(&k, fused[l], kv, s9)[e], POISON);
                for (uint32_t l = 0; l < L; l++) {
                    free(fused[l]);
                    free(plain[l]);
                }
                free(keys);
                free(cs);
                free(table);
                free(pos);
                kv_free(&k);
            }
}

/* ---- L2 load ----------------------------------------------------------------------------------- */

static void l2_load_copies(void **state)
{
    (void)state;
    const uint32_t n = 5;
    const uint64_t bytes = 4099; /* odd on purpose */
    void *src[5], *dst[5];
    for (uint32_t i = 0; i < n; i++) {
        src[i] = xmalloc(bytes);
        rnd_fill(src[i], bytes, CBT_DT_U8);
        dst[i] = poisoned(bytes + 16);
    }
    assert_int_equal(cbt_l2_load_ref(dst, (const void *const *)src, n, bytes, NULL), CBT_OK);
    for (uint32_t i = 0; i < n; i++) {
        assert_memory_equal(dst[i], src[i], bytes);
        for (uint32_t e = 0; e < 16; e++)
            assert_int_equal(((unsigned char *)dst[i])[bytes + e], POISON);
    }
    /* traced, per launch: one record, tokens = chunks, user = bytes */
    static cbt_ring_rec recs[64];
    static cbt_fold_slot fold[CBT_FOLD_SLOTS];
    unsigned long long claim = 0;
    memset(recs, 0, sizeof recs);
    memset(fold, 0, sizeof fold);
    cbt_ring_dev ring = {recs, &claim, fold, 63, 0};
    cbt_kspan span = {&ring, 5, CBT_KOP_L2_LOAD, CBT_REC_LAUNCH, 0};
    for (uint32_t i = 0; i < n; i++)
        memset(dst[i], POISON, bytes);
    assert_int_equal(cbt_l2_load_ref(dst, (const void *const *)src, n, bytes, &span), CBT_OK);
    for (uint32_t i = 0; i < n; i++)
        assert_memory_equal(dst[i], src[i], bytes);
    assert_int_equal(claim, 1);
    assert_int_equal(recs[0].seq, 1);
    assert_int_equal(recs[0].kind, CBT_REC_LAUNCH);
    assert_int_equal(recs[0].op, CBT_KOP_L2_LOAD);
    assert_int_equal(recs[0].tokens, n);
    assert_int_equal(recs[0].cta, n);
    assert_true(recs[0].user == n * bytes);
    /* per CTA: one per chunk */
    span.mode = CBT_REC_CTA;
    assert_int_equal(cbt_l2_load_ref(dst, (const void *const *)src, n, bytes, &span), CBT_OK);
    assert_int_equal(claim, 1 + n);
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(recs[1 + i].kind, CBT_REC_CTA);
        assert_int_equal(recs[1 + i].cta, i);
        assert_int_equal(recs[1 + i].tokens, 1);
        assert_true(recs[1 + i].user == bytes);
    }
    for (uint32_t i = 0; i < n; i++) {
        free(src[i]);
        free(dst[i]);
    }
}

/* ---- the ring records of the references --------------------------------------------------------- */

static cbt_ring_rec g_recs[1024];
static cbt_fold_slot g_fold[CBT_FOLD_SLOTS];

static void ring_records_of_scatter(void **state)
{
    (void)state;
    kvbuf k;
    const uint32_t n_table = 9, n = 72, max_pos = 200;
    kv_init(&k, 4, 2, 8, CBT_DT_F16, 8, 16, 80);
    int32_t *table = rnd_table(n_table, 16);
    table[4] = -1; /* positions 32..39 dropped */
    int32_t *pos = rnd_positions(n, n_table * 8);
    int32_t oldp[72];
    for (uint32_t i = 0; i < n; i++)
        oldp[i] = i % 3 ? (int32_t)rnd_below(max_pos) : pos[i];
    void *cs = make_cos_sin(max_pos, 8, CBT_DT_F16);
    cbt_rope r = {cs, 8, max_pos, CBT_ROPE_GPTJ, oldp};
    rnd_fill(k.chunk, k.chunk_bytes / k.es, CBT_DT_F16);
    cbt_scatter_args a = {k.chunk, k.paged, pos, table, n_table, n, 7, &r};
    cbt_scatter_result want;
    assert_int_equal(cbt_scatter_ref(&k.g, &a, CBT_SCATTER_RETRIEVE, NULL, 0, &want), CBT_OK);
    assert_true(want.dropped > 0 && want.n_shifted > 0 && want.scattered > want.n_shifted);

    unsigned long long claim = 0;
    memset(g_recs, 0, sizeof g_recs);
    memset(g_fold, 0, sizeof g_fold);
    cbt_ring_dev ring = {g_recs, &claim, g_fold, 1023, 0};
    cbt_kspan span = {&ring, 42, CBT_KOP_SCATTER, CBT_REC_LAUNCH, 0};
    cbt_scatter_result res;
    assert_int_equal(cbt_scatter_ref(&k.g, &a, CBT_SCATTER_RETRIEVE, &span, 4, &res), CBT_OK);
    assert_int_equal(res.scattered, want.scattered);
    assert_int_equal(res.dropped, want.dropped);
    assert_int_equal(res.n_shifted, want.n_shifted);
    assert_int_equal(res.dropped, 8);
    assert_int_equal(claim, 1);
    const cbt_ring_rec *x = &g_recs[0];
    assert_int_equal(x->seq, 1);
    assert_int_equal(x->launch_id, 42);
    assert_int_equal(x->kind, CBT_REC_LAUNCH);
    assert_int_equal(x->op, CBT_KOP_SCATTER);
    assert_int_equal(x->tokens, res.scattered);
    assert_true(x->user == res.n_shifted);
    assert_int_equal(x->cta, 4);
    assert_int_equal(x->sm, 0xffff);
    assert_true(x->t_begin > 0 && x->t_begin <= x->t_end);
    assert_int_equal(g_recs[1].seq, 0);
    /* the fold slot is clean again */
    const cbt_fold_slot *f = &g_fold[42];
    assert_true(f->nbegin == 0 && f->end == 0 && f->tokens == 0 && f->user == 0 && f->done == 0);

    /* per CTA: 4 records, tokens sum to scattered, user to n_shifted; then 16
     * CTAs. CTA c owns rows [c*R/N, (c+1)*R/N) and counts the tokens whose
     * layer-0 K row (row number = token index) falls there */
    span.mode = CBT_REC_CTA;
    const uint32_t ncs[2] = {4, 16};
    unsigned long long first = 1;
    for (int v = 0; v < 2; v++) {
        uint32_t N = ncs[v];
        assert_int_equal(cbt_scatter_ref(&k.g, &a, CBT_SCATTER_RETRIEVE, &span, N, &res), CBT_OK);
        assert_int_equal(claim, first + N);
        uint64_t tok = 0, usr = 0, rows = 4ull * 2 * n;
        int split_tokens = 0;
        for (uint32_t c = 0; c < N; c++) {
            const cbt_ring_rec *y = &g_recs[first + c];
            assert_int_equal(y->seq, first + c + 1);
            assert_int_equal(y->kind, CBT_REC_CTA);
            assert_int_equal(y->launch_id, 42);
            assert_int_equal(y->cta, c);
            assert_true(y->t_begin <= y->t_end);
            tok += y->tokens;
            usr += y->user;
            uint64_t r0 = c * (rows / N) + (c < rows % N ? c : rows % N);
            uint64_t r1 = (c + 1) * (rows / N) + (c + 1 < rows % N ? c + 1 : rows % N);
            uint32_t mine = 0;
            for (uint32_t i = 0; i < n; i++)
                if (i >= r0 && i < r1 && t_slot(&k, table, n_table, pos[i]) >= 0)
                    mine++;
            assert_int_equal(y->tokens, mine);
            split_tokens += mine > 0;
        }
        assert_true(tok == res.scattered);
        assert_true(usr == res.n_shifted);
        if (N == 16)
            assert_true(split_tokens >= 2); /* the tokens really are spread over CTAs */
        first += N;
    }

    /* more CTAs than rows: the idle ones still record (0 tokens) */
    span.mode = CBT_REC_LAUNCH;
    span.launch_id = 43;
    cbt_scatter_args one = a;
    one.n_tokens = 1;
    one.rope = NULL;
    assert_int_equal(cbt_scatter_ref(&k.g, &one, CBT_SCATTER_STORE, &span, 20, &res), CBT_OK);
    assert_int_equal(claim, first + 1);
    assert_int_equal(g_recs[first].cta, 20);
    assert_int_equal(g_recs[first].tokens, res.scattered);
    first++;

    /* standalone re-RoPE: one record, tokens = keys examined, user = rotated */
    span.op = CBT_KOP_REROPE;
    unsigned char *keys = xmalloc(n * k.row);
    rnd_fill(keys, n * k.hidden, CBT_DT_F16);
    uint32_t sh = 0;
    assert_int_equal(cbt_rerope_ref(keys, n, 2, 8, CBT_DT_F16, &r, pos, &span, &sh), CBT_OK);
    assert_int_equal(claim, first + 1);
    assert_int_equal(g_recs[first].op, CBT_KOP_REROPE);
    assert_int_equal(g_recs[first].tokens, n);
    assert_true(g_recs[first].user == sh && sh > 0);

    free(keys);
    free(cs);
    free(table);
    free(pos);
    kv_free(&k);
}

/* ---- argument checks ------------------------------------------------------------------------------ */

static void argument_checks(void **state)
{
    (void)state;
    kvbuf k;
    kv_init(&k, 2, 2, 8, CBT_DT_F16, 4, 8, 16);
    int32_t pos[4] = {0, 1, 2, 3}, table[2] = {1, 0}, oldp[4] = {0, 0, 0, 0};
    void *cs = make_cos_sin(16, 8, CBT_DT_F16);
    cbt_rope r = {cs, 8, 16, CBT_ROPE_NEOX, oldp};
    cbt_scatter_args a0 = {k.chunk, k.paged, pos, table, 2, 4, 12, &r};
    cbt_kv_geom g0 = k.g;
    assert_int_equal(cbt_scatter_check(&g0, &a0, CBT_SCATTER_RETRIEVE), CBT_OK);
    assert_int_equal(cbt_scatter_check(NULL, &a0, CBT_SCATTER_RETRIEVE), CBT_ERR_INVAL);
    assert_int_equal(cbt_scatter_check(&g0, NULL, CBT_SCATTER_RETRIEVE), CBT_ERR_INVAL);
    assert_int_equal(cbt_scatter_check(&g0, &a0, (cbt_scatter_dir)2), CBT_ERR_INVAL);
    assert_int_equal(cbt_scatter_check(&g0, &a0, CBT_SCATTER_STORE), CBT_ERR_INVAL); /* rope on a store */

#define BAD_G(stmt)                                                                      \
    do {                                                                                 \
        cbt_kv_geom g = g0;                                                              \
        stmt;                                                                            \
        assert_int_equal(cbt_scatter_check(&g, &a0, CBT_SCATTER_RETRIEVE), CBT_ERR_INVAL); \
        assert_int_equal(cbt_scatter_ref(&g, &a0, CBT_SCATTER_RETRIEVE, NULL, 0, NULL), CBT_ERR_INVAL); \
    } while (0)
#define BAD_A(stmt)                                                                      \
    do {                                                                                 \
        cbt_scatter_args a = a0;                                                         \
        cbt_rope rr = r;                                                                 \
        a.rope = a0.rope ? &rr : NULL;                                                   \
        stmt;                                                                            \
        assert_int_equal(cbt_scatter_check(&g0, &a, CBT_SCATTER_RETRIEVE), CBT_ERR_INVAL); \
        assert_int_equal(cbt_scatter_ref(&g0, &a, CBT_SCATTER_RETRIEVE, NULL, 0, NULL), CBT_ERR_INVAL); \
    } while (0)
    BAD_G(g.num_layers = 0);
    BAD_G(g.num_heads = 0);
    BAD_G(g.head_dim = 0);
    BAD_G(g.block_size = 0);
    BAD_G(g.num_blocks = 0);
    BAD_G(g.chunk_tokens = 0);
    BAD_G(g.dtype = (cbt_dtype)7);
    BAD_G(g.dtype = CBT_DT_U8);                      /* re-RoPE on a U8 cache */
    BAD_G(g.head_dim = 6);                           /* rot_dim 8 > head_dim */
    BAD_G(g.chunk_tokens = 15);                      /* offset 12 + 4 tokens > 15 rows */
    BAD_G((g.num_heads = 0x10000u, g.head_dim = 0x10000u)); /* row size overflows */
    BAD_G((g.num_blocks = 0xffffffffu, g.block_size = 0xffffffffu));
    BAD_A(a.chunk = NULL);
    BAD_A(a.paged = NULL);
    BAD_A(a.positions = NULL);
    BAD_A(a.block_table = NULL);
    BAD_A(a.n_table = 0);
    BAD_A(a.n_tokens = 0);
    BAD_A(a.chunk_offset = 13);
    BAD_A(a.chunk_offset = 0xffffffffu);
    BAD_A(rr.rot_dim = 7);
    BAD_A(rr.rot_dim = 0);
    BAD_A(rr.rot_dim = 10);
    BAD_A(rr.cos_sin = NULL);
    BAD_A(rr.old_positions = NULL);
    BAD_A(rr.max_position = 0);
    BAD_A(rr.style = (cbt_rope_style)3);
#undef BAD_G
#undef BAD_A
    /* the reference also refuses a NULL layer pointer and bad span handles */
    void *paged_hole[2] = {k.paged[0], NULL};
    cbt_scatter_args a1 = a0;
    a1.paged = paged_hole;
    assert_int_equal(cbt_scatter_ref(&g0, &a1, CBT_SCATTER_RETRIEVE, NULL, 0, NULL), CBT_ERR_INVAL);
    unsigned long long claim = 0;
    cbt_ring_dev ring = {g_recs, &claim, g_fold, 1023, 0};
    cbt_kspan bad_mode = {&ring, 1, CBT_KOP_SCATTER, 9, 0};
    assert_int_equal(cbt_scatter_ref(&g0, &a0, CBT_SCATTER_RETRIEVE, &bad_mode, 1, NULL), CBT_ERR_INVAL);
    cbt_ring_dev ring_norecs = {NULL, &claim, g_fold, 1023, 0};
    cbt_kspan s2 = {&ring_norecs, 1, CBT_KOP_SCATTER, CBT_REC_CTA, 0};
    assert_int_equal(cbt_scatter_ref(&g0, &a0, CBT_SCATTER_RETRIEVE, &s2, 1, NULL), CBT_ERR_INVAL);
    cbt_ring_dev ring_mask = {g_recs, &claim, g_fold, 1000, 0};
    cbt_kspan s3 = {&ring_mask, 1, CBT_KOP_SCATTER, CBT_REC_CTA, 0};
    assert_int_equal(cbt_scatter_ref(&g0, &a0, CBT_SCATTER_RETRIEVE, &s3, 1, NULL), CBT_ERR_INVAL);
    assert_int_equal(claim, 0);

    /* re-RoPE */
    unsigned char keys[4 * 32];
    memset(keys, 1, sizeof keys);
    assert_int_equal(cbt_rerope_ref(keys, 4, 2, 8, CBT_DT_F16, &r, pos, NULL, NULL), CBT_OK);
    assert_int_equal(cbt_rerope_ref(NULL, 4, 2, 8, CBT_DT_F16, &r, pos, NULL, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_rerope_ref(keys, 0, 2, 8, CBT_DT_F16, &r, pos, NULL, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_rerope_ref(keys, 4, 0, 8, CBT_DT_F16, &r, pos, NULL, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_rerope_ref(keys, 4, 2, 0, CBT_DT_F16, &r, pos, NULL, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_rerope_ref(keys, 4, 2, 8, CBT_DT_U8, &r, pos, NULL, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_rerope_ref(keys, 4, 2, 8, (cbt_dtype)5, &r, pos, NULL, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_rerope_ref(keys, 4, 2, 8, CBT_DT_F16, NULL, pos, NULL, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_rerope_ref(keys, 4, 2, 8, CBT_DT_F16, &r, NULL, NULL, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_rerope_ref(keys, 4, 2, 6, CBT_DT_F16, &r, pos, NULL, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_rerope_ref(keys, 4, 2, 8, CBT_DT_F16, &r, pos, &bad_mode, NULL), CBT_ERR_INVAL);

    /* L2 load */
    unsigned char b1[8], b2[8];
    void *d1[1] = {b1}, *dn[1] = {NULL};
    const void *s1[1] = {b2}, *sn[1] = {NULL};
    memset(b2, 3, sizeof b2);
    assert_int_equal(cbt_l2_load_ref(d1, s1, 1, 8, NULL), CBT_OK);
    assert_int_equal(cbt_l2_load_ref(NULL, s1, 1, 8, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_l2_load_ref(d1, NULL, 1, 8, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_l2_load_ref(d1, s1, 0, 8, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_l2_load_ref(d1, s1, 1, 0, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_l2_load_ref(dn, s1, 1, 8, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_l2_load_ref(d1, sn, 1, 8, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_l2_load_ref(d1, s1, 1, 8, &bad_mode), CBT_ERR_INVAL);

    /* the CUDA entry points refuse bad arguments before touching a device
     * (or, built without CUDA, are unsupported); none crashes on NULL */
    cbt_kspan none = {NULL, 0, 0, 0, 0};
    cbt_status st;
    st = cbt_scatter_cuda(NULL, &a0, CBT_SCATTER_RETRIEVE, none, 0, NULL);
    assert_true(st == CBT_ERR_INVAL || st == CBT_ERR_UNSUPPORTED);
    st = cbt_scatter_cuda(&g0, NULL, CBT_SCATTER_RETRIEVE, none, 0, NULL);
    assert_true(st == CBT_ERR_INVAL || st == CBT_ERR_UNSUPPORTED);
    st = cbt_scatter_cuda(&g0, &a0, CBT_SCATTER_STORE, none, 0, NULL); /* rope on a store */
    assert_true(st == CBT_ERR_INVAL || st == CBT_ERR_UNSUPPORTED);
    st = cbt_rerope_cuda(NULL, 4, 2, 8, CBT_DT_F16, &r, pos, none, NULL);
    assert_true(st == CBT_ERR_INVAL || st == CBT_ERR_UNSUPPORTED);
    st = cbt_rerope_cuda(keys, 4, 2, 8, CBT_DT_F16, NULL, pos, none, NULL);
    assert_true(st == CBT_ERR_INVAL || st == CBT_ERR_UNSUPPORTED);
    st = cbt_rerope_cuda(keys, 4, 2, 8, CBT_DT_U8, &r, pos, none, NULL);
    assert_true(st == CBT_ERR_INVAL || st == CBT_ERR_UNSUPPORTED);
    st = cbt_l2_load_cuda_kernel(NULL, s1, 1, 8, none, NULL);
    assert_true(st == CBT_ERR_INVAL || st == CBT_ERR_UNSUPPORTED);
    st = cbt_l2_load_cuda_kernel(d1, s1, 0, 8, none, NULL);
    assert_true(st == CBT_ERR_INVAL || st == CBT_ERR_UNSUPPORTED);
    st = cbt_l2_load_cuda_memcpy(dn, s1, 1, 8, NULL);
    assert_true(st == CBT_ERR_INVAL || st == CBT_ERR_UNSUPPORTED);
    st = cbt_l2_load_cuda_memcpy(NULL, NULL, 1, 8, NULL);
    assert_true(st == CBT_ERR_INVAL || st == CBT_ERR_UNSUPPORTED);
    free(cs);
    kv_free(&k);
}

int main(void)
{
    const char *env = getenv("CBT_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 0) : 0x6b65726e656c73ull;
    if (!seed)
        seed = 1;
    g_rng = seed;
    printf("test_kernels_ref: seed 0x%llx (CBT_TEST_SEED to override)\n", (unsigned long long)seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(f16_conversions),
        cmocka_unit_test(bf16_conversions),
        cmocka_unit_test(scatter_all_dtypes_both_dirs),
        cmocka_unit_test(scatter_guards),
        cmocka_unit_test(scatter_large_streaming_path),
        cmocka_unit_test(scatter_partial_blocks_two_passes),
        cmocka_unit_test(rerope_vs_f64),
        cmocka_unit_test(rerope_identity),
        cmocka_unit_test(scatter_fused_rerope),
        cmocka_unit_test(l2_load_copies),
        cmocka_unit_test(ring_records_of_scatter),
        cmocka_unit_test(argument_checks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
