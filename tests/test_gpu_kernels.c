/* tests/test_gpu_kernels.c — the CUDA kernels of cbt/kv_kernels.h
 * against their C references, on a real GPU: random inputs (seed printed;
 * CBT_TEST_SEED overrides), outputs poisoned on both sides first, every dtype,
 * both scatter directions, the guards, odd geometry and unaligned pointers
 * (the narrow copy paths), fused and standalone re-RoPE, the L2 load kernel
 * and its cudaMemcpyAsync variant, and the ring records the GPU writes into
 * mapped pinned host memory. Exits 77 (skipped) with the reason when there is
 * no device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gpu_testutil.h"
#include "testutil.h"

#include "cbt/kv_kernels.h"
#include "kernels_impl.h"

#define POISON 0xA5
#define MAXL 32

#define CK(x)                                                                        \
    do {                                                                             \
        cudaError_t e_ = (x);                                                        \
        if (e_ != cudaSuccess)                                                       \
            fail_msg("%s:%d %s: %s", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
    } while (0)

static cudaStream_t g_st;

/* ---- random data ---------------------------------------------------------------- */

static uint64_t g_rng;

static uint64_t rnd(void)
{
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 0x2545F4914F6CDD1Dull;
}

static uint32_t rnd_below(uint32_t n) { return (uint32_t)(rnd() % n); }

/* Random nonzero elements, never the poison pattern. */
static void rnd_fill(void *buf, size_t n_elems, cbt_dtype dt)
{
    unsigned char *p = buf;
    uint32_t es = cbt_dtype_size(dt);
    for (size_t i = 0; i < n_elems; i++, p += es) {
        uint64_t r = rnd();
        switch (dt) {
        case CBT_DT_F32: {
            float f = (float)((double)((r >> 11) % 1000000u + 1u) * (4.0 / 1048576.0));
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
        case CBT_DT_U8: {
            unsigned char b = (unsigned char)(1u + (r >> 8) % 255u);
            p[0] = b == POISON ? 0x5a : b;
            break;
        }
        }
    }
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    assert_non_null(p);
    return p;
}

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

static void *to_dev(const void *h, size_t n)
{
    void *d = NULL;
    CK(cudaMalloc(&d, n ? n : 1));
    if (n)
        CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    return d;
}

static const cbt_dtype k_all_dt[] = {CBT_DT_F32, CBT_DT_F16, CBT_DT_BF16, CBT_DT_U8};
static const cbt_dtype k_float_dt[] = {CBT_DT_F32, CBT_DT_F16, CBT_DT_BF16};

/* ---- a ring the GPU writes into: records in mapped pinned host memory,
 * claim and fold slots in device memory ---------------------------------------------- */

typedef struct gring {
    cbt_ring_rec *recs; /* host view */
    unsigned long long *claim;
    cbt_fold_slot *fold;
    cbt_ring_dev *dev; /* the cbt_ring_dev itself, in device memory */
    uint32_t cap;
} gring;

static void gring_init(gring *r, uint32_t cap)
{
    r->cap = cap;
    CK(cudaHostAlloc((void **)&r->recs, cap * sizeof(cbt_ring_rec), cudaHostAllocMapped));
    memset(r->recs, 0, cap * sizeof(cbt_ring_rec));
    cbt_ring_rec *drecs = NULL;
    CK(cudaHostGetDevicePointer((void **)&drecs, r->recs, 0));
    CK(cudaMalloc((void **)&r->claim, sizeof *r->claim));
    CK(cudaMalloc((void **)&r->fold, CBT_FOLD_SLOTS * sizeof(cbt_fold_slot)));
    CK(cudaMemset(r->claim, 0, sizeof *r->claim));
    CK(cudaMemset(r->fold, 0, CBT_FOLD_SLOTS * sizeof(cbt_fold_slot)));
    cbt_ring_dev h = {drecs, r->claim, r->fold, cap - 1, 0};
    r->dev = to_dev(&h, sizeof h);
}

static void gring_reset(gring *r)
{
    memset(r->recs, 0, r->cap * sizeof(cbt_ring_rec));
    CK(cudaMemset(r->claim, 0, sizeof *r->claim));
    CK(cudaDeviceSynchronize());
}

static unsigned long long gring_claimed(const gring *r)
{
    unsigned long long c = 0;
    CK(cudaMemcpy(&c, r->claim, sizeof c, cudaMemcpyDeviceToHost));
    return c;
}

static void gring_free(gring *r)
{
    CK(cudaFreeHost(r->recs));
    CK(cudaFree(r->claim));
    CK(cudaFree(r->fold));
    CK(cudaFree(r->dev));
}

/* The smallest step of %globaltimer this device shows (group_setup,
 * cbt_test_gtimer_step in gpu_ring_kernels.cu): ~1 us on some GPUs. */
static unsigned long long g_gtimer_step_ns;
int cbt_test_gtimer_step(unsigned long long *step_ns);

/* The CUDA-event bracket of an empty launch on g_st (group_setup,
 * cbt_test_empty_kernel in gpu_ring_kernels.cu): the launch and event
 * overhead every bracket includes; the largest of 8, after a warm-up. */
static double g_empty_bracket_ns;
int cbt_test_empty_kernel(void *stream, unsigned int ctas, unsigned int threads);

/* A record's span must fit inside the CUDA-event bracket around its launch
 * (different clocks: compare durations, with 50 us of slack). A launch
 * record (`launch`) must span some time when its bracket, less an empty
 * launch's, is longer than two steps of %globaltimer: the kernel itself then
 * ran that long. A shorter launch (4 x 48 B of L2 load) and one CTA's
 * record may fall inside one tick. */
static void check_rec_time(const cbt_ring_rec *x, float bracket_ms, int launch)
{
    assert_true(x->t_begin > 0);
    double bracket_ns = (double)bracket_ms * 1e6;
    double step2 = 2.0 * (double)g_gtimer_step_ns;
    if (launch && bracket_ns - g_empty_bracket_ns > step2) {
        if (!(x->t_end > x->t_begin))
            fail_msg("launch record spans no time (t_begin %llu = t_end %llu), yet its bracket "
                     "%.0f ns less an empty launch's %.0f ns exceeds 2 x the %%globaltimer step "
                     "(%.0f ns)",
                     (unsigned long long)x->t_begin, (unsigned long long)x->t_end, bracket_ns,
                     g_empty_bracket_ns, step2);
    } else {
        assert_true(x->t_end >= x->t_begin);
    }
    double dur_ns = (double)(x->t_end - x->t_begin);
    if (dur_ns > bracket_ns + 50000.0)
        fail_msg("record spans %.0f ns, the event bracket %.0f ns", dur_ns, bracket_ns);
}

/* The largest event bracket of 8 empty launches on g_st, after a warm-up. */
static double empty_bracket_ns(double *min_ns)
{
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    assert_int_equal(cbt_test_empty_kernel(g_st, 1, 32), 0);
    CK(cudaStreamSynchronize(g_st));
    double mx = 0, mn = 1e300;
    for (int i = 0; i < 8; i++) {
        CK(cudaEventRecord(e0, g_st));
        assert_int_equal(cbt_test_empty_kernel(g_st, 1, 32), 0);
        CK(cudaEventRecord(e1, g_st));
        CK(cudaStreamSynchronize(g_st));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        double ns = (double)ms * 1e6;
        mx = ns > mx ? ns : mx;
        mn = ns < mn ? ns : mn;
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    *min_ns = mn;
    return mx;
}

/* ---- scatter ------------------------------------------------------------------------ */

typedef struct kvh {
    cbt_kv_geom g;
    uint32_t es;
    size_t row, chunk_bytes, layer_bytes;
    /* host copies (the reference runs on these) */
    unsigned char *chunk;
    void *paged[MAXL];
    /* device copies; the layer pointers may be offset by `shift` bytes */
    unsigned char *d_chunk_base, *d_chunk;
    unsigned char *d_paged_base[MAXL];
    void *d_paged[MAXL];
    void **d_paged_arr;
} kvh;

static void kvh_init(kvh *k, cbt_kv_geom g, size_t shift)
{
    memset(k, 0, sizeof *k);
    assert_true(g.num_layers <= MAXL);
    k->g = g;
    k->es = cbt_dtype_size(g.dtype);
    k->row = (size_t)g.num_heads * g.head_dim * k->es;
    k->chunk_bytes = 2u * g.num_layers * (size_t)g.chunk_tokens * k->row;
    k->layer_bytes = 2u * (size_t)g.num_blocks * g.block_size * k->row;
    k->chunk = xmalloc(k->chunk_bytes);
    CK(cudaMalloc((void **)&k->d_chunk_base, k->chunk_bytes + shift));
    k->d_chunk = k->d_chunk_base + shift;
    for (uint32_t l = 0; l < g.num_layers; l++) {
        k->paged[l] = xmalloc(k->layer_bytes);
        CK(cudaMalloc((void **)&k->d_paged_base[l], k->layer_bytes + shift));
        k->d_paged[l] = k->d_paged_base[l] + shift;
    }
    k->d_paged_arr = to_dev(k->d_paged, g.num_layers * sizeof(void *));
}

static void kvh_free(kvh *k)
{
    free(k->chunk);
    CK(cudaFree(k->d_chunk_base));
    for (uint32_t l = 0; l < k->g.num_layers; l++) {
        free(k->paged[l]);
        CK(cudaFree(k->d_paged_base[l]));
    }
    CK(cudaFree(k->d_paged_arr));
}

static void kvh_upload(kvh *k)
{
    CK(cudaMemcpy(k->d_chunk, k->chunk, k->chunk_bytes, cudaMemcpyHostToDevice));
    for (uint32_t l = 0; l < k->g.num_layers; l++)
        CK(cudaMemcpy(k->d_paged[l], k->paged[l], k->layer_bytes, cudaMemcpyHostToDevice));
}

static int64_t slot_of(const kvh *k, const int32_t *bt, uint32_t n_table, int32_t pos)
{
    if (pos < 0 || (uint32_t)pos / k->g.block_size >= n_table)
        return -1;
    int32_t b = bt[(uint32_t)pos / k->g.block_size];
    if (b < 0)
        return -1;
    int64_t s = (int64_t)b * k->g.block_size + (uint32_t)pos % k->g.block_size;
    return s < (int64_t)k->g.num_blocks * k->g.block_size ? s : -1;
}

/* Norm-wise relative error of row `got` against `want` (both of dt). */
static double row_rel_err(const void *got, const void *want, size_t n, cbt_dtype dt)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double g = cbt_elem_load(got, i, dt), w = cbt_elem_load(want, i, dt);
        if (isnan(g))
            return INFINITY;
        num += (g - w) * (g - w);
        den += w * w;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

typedef struct gcase {
    cbt_kv_geom g;
    uint32_t n_table, n_tokens, chunk_offset;
    int guards;      /* put guard cases into the table and positions */
    int rope;        /* 0 none, else 1 + style */
    uint32_t rot;    /* rot_dim when rope */
    uint32_t n_ctas; /* 0: the kernel's choice */
    uint8_t mode;    /* CBT_REC_LAUNCH / CBT_REC_CTA / 0 untraced */
    size_t shift;    /* device pointer misalignment, bytes */
} gcase;

static void run_gpu_scatter(const gcase *c, cbt_scatter_dir dir, gring *ring)
{
    kvh k;
    kvh_init(&k, c->g, c->shift);
    const uint32_t bs = c->g.block_size, nb = c->g.num_blocks, n = c->n_tokens;
    const uint32_t max_pos = c->n_table * bs + 64;

    /* block table: distinct random blocks; with guards some unallocated and
     * some past num_blocks */
    int32_t *table = xmalloc(c->n_table * sizeof *table);
    {
        int32_t *all = xmalloc(nb * sizeof *all);
        for (uint32_t i = 0; i < nb; i++)
            all[i] = (int32_t)i;
        for (uint32_t i = 0; i < c->n_table; i++) {
            uint32_t j = i + rnd_below(nb - i);
            int32_t t = all[i];
            all[i] = all[j];
            all[j] = t;
            table[i] = all[i];
        }
        free(all);
        if (c->guards && c->n_table > 4) {
            table[1] = -1;
            table[3] = (int32_t)(nb + 2);
        }
    }
    /* positions: a consecutive range from a mid-block start (partial blocks),
     * shuffled a little; with guards some past the table and negative */
    int32_t *pos = xmalloc(n * sizeof *pos);
    uint32_t start = rnd_below(bs);
    for (uint32_t i = 0; i < n; i++)
        pos[i] = (int32_t)((start + i) % (c->n_table * bs));
    for (uint32_t i = 0; i + 1 < n; i += 7) {
        int32_t t = pos[i];
        pos[i] = pos[i + 1];
        pos[i + 1] = t;
    }
    if (c->guards && n > 10) {
        pos[2] = (int32_t)(c->n_table * bs + 5); /* not reached by the table yet */
        pos[5] = -4;
        pos[n - 1] = (int32_t)(c->n_table * bs * 3);
    }
    int32_t *oldp = xmalloc(n * sizeof *oldp);
    void *cs = NULL;
    cbt_rope hr, dr;
    memset(&hr, 0, sizeof hr);
    dr = hr;
    if (c->rope) {
        for (uint32_t i = 0; i < n; i++)
            oldp[i] = i % 3 == 0 ? pos[i] : (int32_t)rnd_below(max_pos);
        if (n > 8)
            oldp[8] = (int32_t)max_pos + 1; /* cannot be rotated: dropped */
        cs = make_cos_sin(max_pos, c->rot, c->g.dtype);
        hr = (cbt_rope){cs, c->rot, max_pos, (cbt_rope_style)(c->rope - 1), oldp};
        dr = hr;
        dr.cos_sin = to_dev(cs, (size_t)max_pos * c->rot * k.es);
        dr.old_positions = to_dev(oldp, n * sizeof *oldp);
    }

    if (dir == CBT_SCATTER_RETRIEVE) {
        rnd_fill(k.chunk, k.chunk_bytes / k.es, c->g.dtype);
        for (uint32_t l = 0; l < c->g.num_layers; l++)
            memset(k.paged[l], POISON, k.layer_bytes);
    } else {
        memset(k.chunk, POISON, k.chunk_bytes);
        for (uint32_t l = 0; l < c->g.num_layers; l++)
            rnd_fill(k.paged[l], k.layer_bytes / k.es, c->g.dtype);
    }
    kvh_upload(&k);

    /* the reference, traced with the same CTA count into a host ring */
    static cbt_ring_rec hrecs[4096];
    static cbt_fold_slot hfold[CBT_FOLD_SLOTS];
    unsigned long long hclaim = 0;
    memset(hrecs, 0, sizeof hrecs);
    memset(hfold, 0, sizeof hfold);
    cbt_ring_dev hring = {hrecs, &hclaim, hfold, 4095, 0};
    cbt_kspan hspan = {&hring, 1, CBT_KOP_SCATTER, CBT_REC_CTA, 0};
    cbt_scatter_args ha = {k.chunk, k.paged, pos, table, c->n_table, n, c->chunk_offset,
                           c->rope ? &hr : NULL};
    cbt_scatter_result ref;
    assert_int_equal(cbt_scatter_ref(&k.g, &ha, dir, c->n_ctas ? &hspan : NULL,
                                     c->n_ctas ? c->n_ctas : 1, &ref),
                     CBT_OK);

    /* the GPU */
    int32_t *d_pos = to_dev(pos, n * sizeof *pos);
    int32_t *d_table = to_dev(table, c->n_table * sizeof *table);
    cbt_scatter_args da = {k.d_chunk, k.d_paged_arr, d_pos, d_table, c->n_table, n, c->chunk_offset,
                           c->rope ? &dr : NULL};
    cbt_kspan span = {NULL, 0, 0, 0, 0};
    if (c->mode) {
        gring_reset(ring);
        span = (cbt_kspan){ring->dev, 77, dir == CBT_SCATTER_STORE ? CBT_KOP_GATHER : CBT_KOP_SCATTER,
                           c->mode, 0};
    }
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0, g_st));
    assert_int_equal(cbt_scatter_cuda(&k.g, &da, dir, span, c->n_ctas, g_st), CBT_OK);
    CK(cudaEventRecord(e1, g_st));
    CK(cudaStreamSynchronize(g_st));
    CK(cudaGetLastError());
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));

    /* compare: re-RoPE'd key rows within tolerance (then taken as equal),
     * every other byte of both layouts exactly */
    unsigned char *got = xmalloc(k.chunk_bytes > k.layer_bytes ? k.chunk_bytes : k.layer_bytes);
    if (dir == CBT_SCATTER_STORE) {
        CK(cudaMemcpy(got, k.d_chunk, k.chunk_bytes, cudaMemcpyDeviceToHost));
        assert_memory_equal(got, k.chunk, k.chunk_bytes);
    } else {
        double tol = c->g.dtype == CBT_DT_F32 ? 1e-5 : 1e-2, worst = 0;
        for (uint32_t l = 0; l < c->g.num_layers; l++) {
            CK(cudaMemcpy(got, k.d_paged[l], k.layer_bytes, cudaMemcpyDeviceToHost));
            for (uint32_t i = 0; c->rope && i < n; i++) {
                int64_t s = slot_of(&k, table, c->n_table, pos[i]);
                if (s < 0 || oldp[i] == pos[i] || !cbt_rope_pos_ok(&hr, oldp[i], pos[i]))
                    continue;
                unsigned char *gr = got + (size_t)s * k.row; /* K: kv 0 */
                const unsigned char *wr = (const unsigned char *)k.paged[l] + (size_t)s * k.row;
                double e = row_rel_err(gr, wr, k.row / k.es, c->g.dtype);
                worst = e > worst ? e : worst;
                if (!(e < tol))
                    fail_msg("fused re-RoPE layer %u token %u: rel err %.3g", l, i, e);
                memcpy(gr, wr, k.row);
            }
            assert_memory_equal(got, k.paged[l], k.layer_bytes);
        }
        if (c->rope)
            printf("  fused re-RoPE dt=%d style=%d rot=%u: worst rel err vs reference %.3g\n",
                   (int)c->g.dtype, c->rope - 1, c->rot, worst);
    }
    /* the source side is untouched */
    if (dir == CBT_SCATTER_RETRIEVE) {
        CK(cudaMemcpy(got, k.d_chunk, k.chunk_bytes, cudaMemcpyDeviceToHost));
        assert_memory_equal(got, k.chunk, k.chunk_bytes);
    }

    /* the ring */
    if (c->mode == CBT_REC_LAUNCH) {
        assert_int_equal(gring_claimed(ring), 1);
        const cbt_ring_rec *x = &ring->recs[0];
        assert_int_equal(x->seq, 1);
        assert_int_equal(x->kind, CBT_REC_LAUNCH);
        assert_int_equal(x->launch_id, 77);
        assert_int_equal(x->op, span.op);
        assert_int_equal(x->tokens, ref.scattered);
        assert_true(x->user == ref.n_shifted);
        assert_int_equal(x->sm, 0xffff);
        if (c->n_ctas)
            assert_int_equal(x->cta, c->n_ctas);
        else
            assert_true(x->cta >= 1);
        check_rec_time(x, ms, 1);
    } else if (c->mode == CBT_REC_CTA) {
        assert_true(c->n_ctas > 0 && c->n_ctas <= ring->cap && c->n_ctas <= 4096);
        assert_int_equal(gring_claimed(ring), c->n_ctas);
        assert_int_equal(hclaim, c->n_ctas);
        uint64_t tok = 0, usr = 0, busy = 0;
        char *seen = xmalloc(c->n_ctas);
        memset(seen, 0, c->n_ctas);
        for (uint32_t j = 0; j < c->n_ctas; j++) {
            const cbt_ring_rec *x = &ring->recs[j];
            assert_int_equal(x->seq, j + 1);
            assert_int_equal(x->kind, CBT_REC_CTA);
            assert_int_equal(x->launch_id, 77);
            assert_true(x->cta < c->n_ctas);
            assert_false(seen[x->cta]);
            seen[x->cta] = 1;
            /* the same split as the reference: the same tokens per CTA */
            assert_int_equal(x->tokens, hrecs[x->cta].tokens);
            assert_true(x->user == hrecs[x->cta].user);
            tok += x->tokens;
            usr += x->user;
            check_rec_time(x, ms, 0);
            busy += x->t_end - x->t_begin;
        }
        free(seen);
        assert_true(busy > 0);
        assert_true(tok == ref.scattered);
        assert_true(usr == ref.n_shifted);
    }

    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    free(got);
    CK(cudaFree(d_pos));
    CK(cudaFree(d_table));
    if (c->rope) {
        CK(cudaFree((void *)dr.cos_sin));
        CK(cudaFree((void *)dr.old_positions));
        free(cs);
    }
    free(oldp);
    free(pos);
    free(table);
    kvh_free(&k);
}

static gring g_ring;

static void gpu_scatter_all_dtypes(void **state)
{
    (void)state;
    for (size_t d = 0; d < 4; d++)
        for (int dir = 0; dir < 2; dir++) {
            cbt_dtype dt = k_all_dt[d];
            /* 16-byte rows, cudaMalloc alignment */
            gcase a = {{4, 4, 64, dt, 16, 40, 300}, 24, 290, 5, 1, 0, 0, 0, CBT_REC_LAUNCH, 0};
            run_gpu_scatter(&a, (cbt_scatter_dir)dir, &g_ring);
            /* odd rows (3 x 5 elements): the narrow paths */
            gcase b = {{3, 3, 5, dt, 8, 20, 100}, 12, 90, 3, 1, 0, 0, 7, CBT_REC_CTA, 0};
            run_gpu_scatter(&b, (cbt_scatter_dir)dir, &g_ring);
            /* 16-byte rows, pointers off by one element: narrower vectors */
            gcase c = {{2, 2, 32, dt, 16, 16, 64}, 10, 60, 0, 1, 0, 0, 0, 0, cbt_dtype_size(dt)};
            run_gpu_scatter(&c, (cbt_scatter_dir)dir, &g_ring);
        }
}

/* The benchmark's shape: 32 layers, 8 KV heads x 128, bf16, two 256-token
 * chunks, a partial first and last block. */
static void gpu_scatter_model_shape(void **state)
{
    (void)state;
    for (int dir = 0; dir < 2; dir++) {
        gcase a = {{32, 8, 128, CBT_DT_BF16, 16, 64, 512}, 34, 500, 7, 1, 0, 0, 0, CBT_REC_LAUNCH, 0};
        run_gpu_scatter(&a, (cbt_scatter_dir)dir, &g_ring);
        gcase b = a;
        b.n_ctas = 132;
        b.mode = CBT_REC_CTA;
        run_gpu_scatter(&b, (cbt_scatter_dir)dir, &g_ring);
    }
}

static void gpu_scatter_fused_rerope(void **state)
{
    (void)state;
    for (size_t d = 0; d < 3; d++)
        for (int style = 1; style <= 2; style++)
            for (uint32_t rot = 64; rot <= 128; rot += 64) {
                gcase a = {{4, 8, 128, k_float_dt[d], 16, 32, 256}, 20, 250, 3, 1, style, rot, 0,
                           CBT_REC_LAUNCH, 0};
                run_gpu_scatter(&a, CBT_SCATTER_RETRIEVE, &g_ring);
                /* odd head count (not a multiple of the 4-head batch) */
                gcase b = {{2, 3, 16, k_float_dt[d], 8, 16, 64}, 10, 60, 2, 1, style, rot == 64 ? 8 : 16,
                           9, CBT_REC_CTA, 0};
                run_gpu_scatter(&b, CBT_SCATTER_RETRIEVE, &g_ring);
            }
}

/* ---- standalone re-RoPE ------------------------------------------------------------ */

static void gpu_rerope(void **state)
{
    (void)state;
    const uint32_t n = 300, max_pos = 1024;
    for (size_t d = 0; d < 3; d++)
        for (int style = 0; style < 2; style++)
            for (int v = 0; v < 2; v++) {
                cbt_dtype dt = k_float_dt[d];
                uint32_t heads = v ? 5 : 8, hd = v ? 24 : 128, rot = v ? 16 : 128;
                uint32_t es = cbt_dtype_size(dt);
                size_t row = (size_t)heads * hd * es;
                int32_t *oldp = xmalloc(n * sizeof *oldp), *newp = xmalloc(n * sizeof *newp);
                for (uint32_t i = 0; i < n; i++) {
                    oldp[i] = (int32_t)rnd_below(max_pos);
                    newp[i] = i % 4 == 0 ? oldp[i] : (int32_t)rnd_below(max_pos);
                }
                newp[5] = (int32_t)max_pos; /* outside the cache: untouched */
                void *cs = make_cos_sin(max_pos, rot, dt);
                unsigned char *keys = xmalloc(n * row), *got = xmalloc(n * row);
                rnd_fill(keys, n * row / es, dt);
                void *d_keys = to_dev(keys, n * row);
                cbt_rope hr = {cs, rot, max_pos, (cbt_rope_style)style, oldp};
                cbt_rope dr = hr;
                dr.cos_sin = to_dev(cs, (size_t)max_pos * rot * es);
                dr.old_positions = to_dev(oldp, n * sizeof *oldp);
                int32_t *d_new = to_dev(newp, n * sizeof *newp);
                uint32_t shifted = 0;
                assert_int_equal(cbt_rerope_ref(keys, n, heads, hd, dt, &hr, newp, NULL, &shifted), CBT_OK);

                gring_reset(&g_ring);
                cbt_kspan span = {g_ring.dev, 9, CBT_KOP_REROPE, CBT_REC_LAUNCH, 0};
                cudaEvent_t e0, e1;
                CK(cudaEventCreate(&e0));
                CK(cudaEventCreate(&e1));
                CK(cudaEventRecord(e0, g_st));
                assert_int_equal(cbt_rerope_cuda(d_keys, n, heads, hd, dt, &dr, d_new, span, g_st), CBT_OK);
                CK(cudaEventRecord(e1, g_st));
                CK(cudaStreamSynchronize(g_st));
                float ms = 0;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                CK(cudaMemcpy(got, d_keys, n * row, cudaMemcpyDeviceToHost));
                double tol = dt == CBT_DT_F32 ? 1e-5 : 1e-2;
                for (uint32_t i = 0; i < n; i++) {
                    if (oldp[i] == newp[i] || i == 5) {
                        assert_memory_equal(got + i * row, keys + i * row, row);
                        continue;
                    }
                    double e = row_rel_err(got + i * row, keys + i * row, row / es, dt);
                    if (!(e < tol))
                        fail_msg("re-RoPE token %u: rel err %.3g", i, e);
                }
                assert_int_equal(gring_claimed(&g_ring), 1);
                const cbt_ring_rec *x = &g_ring.recs[0];
                assert_int_equal(x->seq, 1);
                assert_int_equal(x->op, CBT_KOP_REROPE);
                assert_int_equal(x->tokens, n);
                assert_true(x->user == shifted);
                check_rec_time(x, ms, 1);
                CK(cudaEventDestroy(e0));
                CK(cudaEventDestroy(e1));
                CK(cudaFree(d_keys));
                CK(cudaFree((void *)dr.cos_sin));
                CK(cudaFree((void *)dr.old_positions));
                CK(cudaFree(d_new));
                free(keys);
                free(got);
                free(cs);
                free(oldp);
                free(newp);
            }
}

/* ---- L2 load ------------------------------------------------------------------------ */

static void gpu_l2_load(void **state)
{
    (void)state;
    const uint64_t sizes[] = {2u << 20, 100003u, 48u};
    const uint32_t n = 4;
    for (size_t si = 0; si < 3; si++) {
        uint64_t bytes = sizes[si];
        void *h_src[4], *d_src[4], *d_dst[4], *ref[4];
        for (uint32_t i = 0; i < n; i++) {
            CK(cudaHostAlloc(&h_src[i], bytes, cudaHostAllocMapped));
            rnd_fill(h_src[i], bytes, CBT_DT_U8);
            CK(cudaHostGetDevicePointer(&d_src[i], h_src[i], 0));
            CK(cudaMalloc(&d_dst[i], bytes + 64));
            ref[i] = xmalloc(bytes + 64);
            memset(ref[i], POISON, bytes + 64);
        }
        assert_int_equal(cbt_l2_load_ref(ref, (const void *const *)h_src, n, bytes, NULL), CBT_OK);
        void **d_dst_arr = to_dev(d_dst, sizeof d_dst), **d_src_arr = to_dev(d_src, sizeof d_src);
        unsigned char *got = xmalloc(bytes + 64);

        for (int variant = 0; variant < 2; variant++) {
            for (uint32_t i = 0; i < n; i++)
                CK(cudaMemset(d_dst[i], POISON, bytes + 64));
            CK(cudaDeviceSynchronize());
            gring_reset(&g_ring);
            cudaEvent_t e0, e1;
            CK(cudaEventCreate(&e0));
            CK(cudaEventCreate(&e1));
            CK(cudaEventRecord(e0, g_st));
            if (variant == 0) {
                cbt_kspan span = {g_ring.dev, 11, CBT_KOP_L2_LOAD, CBT_REC_LAUNCH, 0};
                assert_int_equal(cbt_l2_load_cuda_kernel(d_dst_arr, (const void *const *)d_src_arr, n,
                                                         bytes, span, g_st),
                                 CBT_OK);
            } else {
                assert_int_equal(cbt_l2_load_cuda_memcpy(d_dst, (const void *const *)h_src, n, bytes, g_st),
                                 CBT_OK);
            }
            CK(cudaEventRecord(e1, g_st));
            CK(cudaStreamSynchronize(g_st));
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            for (uint32_t i = 0; i < n; i++) {
                CK(cudaMemcpy(got, d_dst[i], bytes + 64, cudaMemcpyDeviceToHost));
                assert_memory_equal(got, ref[i], bytes + 64); /* the tail still poisoned */
            }
            if (variant == 0) {
                assert_int_equal(gring_claimed(&g_ring), 1);
                const cbt_ring_rec *x = &g_ring.recs[0];
                assert_int_equal(x->kind, CBT_REC_LAUNCH);
                assert_int_equal(x->op, CBT_KOP_L2_LOAD);
                assert_int_equal(x->tokens, n);
                assert_true(x->user == n * bytes);
                check_rec_time(x, ms, 1);
                printf("  l2 load %llu B x %u: kernel %.3f ms\n", (unsigned long long)bytes, n, (double)ms);
            } else {
                assert_int_equal(gring_claimed(&g_ring), 0);
                printf("  l2 load %llu B x %u: memcpy %.3f ms\n", (unsigned long long)bytes, n, (double)ms);
            }
            CK(cudaEventDestroy(e0));
            CK(cudaEventDestroy(e1));
        }
        free(got);
        CK(cudaFree(d_dst_arr));
        CK(cudaFree(d_src_arr));
        for (uint32_t i = 0; i < n; i++) {
            CK(cudaFreeHost(h_src[i]));
            CK(cudaFree(d_dst[i]));
            free(ref[i]);
        }
    }
}

/* Launch errors come back as CBT_ERR_CUDA, bad arguments as CBT_ERR_INVAL. */
static void gpu_errors(void **state)
{
    (void)state;
    cbt_kv_geom g = {2, 2, 8, CBT_DT_F16, 4, 8, 16};
    int32_t pos[2] = {0, 1}, table[1] = {0};
    void *paged[2] = {NULL, NULL};
    unsigned char chunk[16];
    cbt_scatter_args a = {chunk, paged, pos, table, 1, 2, 0, NULL};
    cbt_kspan bad = {g_ring.dev, 1, CBT_KOP_SCATTER, 7, 0};
    assert_int_equal(cbt_scatter_cuda(&g, &a, CBT_SCATTER_RETRIEVE, bad, 0, g_st), CBT_ERR_INVAL);
    cbt_kspan none = {NULL, 0, 0, 0, 0};
    assert_int_equal(cbt_scatter_cuda(&g, &a, CBT_SCATTER_RETRIEVE, none, 0x80000000u, g_st), CBT_ERR_INVAL);
    cbt_kv_geom big = g;
    big.num_layers = 0x10000;
    big.chunk_tokens = 0x10000;
    cbt_scatter_args ab = a;
    ab.n_tokens = 0x10000; /* 2^33 rows: too many for one launch */
    assert_int_equal(cbt_scatter_cuda(&big, &ab, CBT_SCATTER_RETRIEVE, none, 0, g_st), CBT_ERR_INVAL);
    CK(cudaGetLastError());
}

static int group_setup(void **state)
{
    (void)state;
    CK(cudaStreamCreateWithFlags(&g_st, cudaStreamNonBlocking));
    gring_init(&g_ring, 4096);
    if (cbt_test_gtimer_step(&g_gtimer_step_ns) != 0)
        fail_msg("cbt_test_gtimer_step failed");
    if (g_gtimer_step_ns == ~0ull) /* never moved in 4096 reads: no launch is held to > */
        printf("test_gpu_kernels: %%globaltimer did not tick in 4096 reads\n");
    else
        printf("test_gpu_kernels: %%globaltimer step %llu ns\n", g_gtimer_step_ns);
    double mn = 0;
    g_empty_bracket_ns = empty_bracket_ns(&mn);
    printf("test_gpu_kernels: empty-kernel event bracket %.0f ns (min %.0f of 8); a launch "
           "record must span time when its bracket exceeds %.0f ns\n",
           g_empty_bracket_ns, mn,
           g_gtimer_step_ns == ~0ull ? -1.0
                                    : g_empty_bracket_ns + 2.0 * (double)g_gtimer_step_ns);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    gring_free(&g_ring);
    CK(cudaStreamDestroy(g_st));
    return 0;
}

int main(void)
{
    if (!tu_gpu_or_skip("test_gpu_kernels"))
        return 77;
    const char *env = getenv("CBT_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 0) : 0x6770756b65726eull;
    g_rng = seed ? seed : 1;
    printf("test_gpu_kernels: seed 0x%llx (CBT_TEST_SEED to override)\n", (unsigned long long)g_rng);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gpu_scatter_all_dtypes),
        cmocka_unit_test(gpu_scatter_model_shape),
        cmocka_unit_test(gpu_scatter_fused_rerope),
        cmocka_unit_test(gpu_rerope),
        cmocka_unit_test(gpu_l2_load),
        cmocka_unit_test(gpu_errors),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
