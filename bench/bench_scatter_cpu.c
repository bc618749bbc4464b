/* bench/bench_scatter_cpu.c — the C reference scatter's throughput on the CPU.
 *
 * cbt_scatter_ref (retrieve: chunk -> paged, bf16, 32 layers x {K,V} x 8 heads
 * x 128 dims = 128 KiB per token, vLLM block_size 16, no re-RoPE, no span) on
 * 1, 2, 4, 8, 16 chunks of 256 tokens, against memcpy() of the same bytes on
 * the same thread: one memcpy of the whole buffer (the target's baseline), and
 * memcpy row by row (2 KiB, the scatter's unit, contiguous). glibc copies
 * large buffers with non-temporal stores, which skip the read-for-ownership
 * of the destination; 2 KiB copies cannot, so the row-wise figure is the
 * ceiling for a row-granular scatter on this machine. The block table is a
 * shuffled subset of a pool 1.5x the blocks needed; the data random. Buffer
 * sets are rotated so each size touches at least twice the last-level cache
 * (at most 1 GiB); the variants alternate, and the median of the runs is
 * reported. GB/s counts bytes read plus bytes written. The reference's output
 * is checked once per size (every token, first and last layer, K and V)
 * against the chunk.
 *
 * Usage: bench_scatter_cpu [--quick]. Exit status 0 unless the reference
 * fails or writes a wrong slot. Target (docs/performance.md): >= 60% of memcpy.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "cbt/kv_kernels.h"

#define LAYERS 32u
#define HEADS 8u
#define DIM 128u
#define BLOCK 16u
#define CHUNK 256u
#define HIDDEN ((size_t)HEADS * DIM)
#define ROW_BYTES (HIDDEN * 2u)                 /* one token, one layer, K or V */
#define TOK_BYTES ((size_t)LAYERS * 2u * ROW_BYTES) /* 128 KiB */

static uint64_t g_rng = 0x243F6A8885A308D3ull;
static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
static uint64_t rnd(void)
{
    g_rng = mix64(g_rng);
    return g_rng;
}

/* random finite bf16 values, two per 32-bit word */
static uint32_t bf16_bits(uint32_t h)
{
    return ((h >> 31) << 15) | ((118u + ((h >> 7) & 15u)) << 7) | (h & 0x7fu);
}
static void fill_random(void *p, size_t bytes)
{
    uint32_t *w = p;
    for (size_t i = 0; i < bytes / 4; i++) {
        uint64_t h = rnd();
        w[i] = bf16_bits((uint32_t)h) | (bf16_bits((uint32_t)(h >> 32)) << 16);
    }
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p) {
        fprintf(stderr, "bench_scatter_cpu: out of memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}

typedef struct set {
    unsigned char *chunk, *paged, *copy_dst;
    void *layers[LAYERS];
} set;

static size_t llc_bytes(void)
{
    long l3 = -1;
#ifdef _SC_LEVEL3_CACHE_SIZE
    l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    return l3 > 0 ? (size_t)l3 : (size_t)64 << 20;
}

typedef struct row {
    uint32_t chunks, tokens;
    size_t bytes;
    double s_copy, s_rows, s_ref;
} row;

static row measure(uint32_t n_chunks, int runs)
{
    cbt_kv_geom g;
    memset(&g, 0, sizeof g);
    g.num_layers = LAYERS;
    g.num_heads = HEADS;
    g.head_dim = DIM;
    g.dtype = CBT_DT_BF16;
    g.block_size = BLOCK;
    uint32_t n_tokens = n_chunks * CHUNK, n_table = n_tokens / BLOCK;
    g.num_blocks = n_table + n_table / 2;
    g.chunk_tokens = n_tokens;
    size_t chunk_bytes = (size_t)n_tokens * TOK_BYTES;
    size_t layer_bytes = 2u * (size_t)g.num_blocks * BLOCK * ROW_BYTES;

    int32_t *pos = xmalloc(n_tokens * sizeof *pos);
    int32_t *pool = xmalloc(g.num_blocks * sizeof *pool);
    for (uint32_t i = 0; i < n_tokens; i++)
        pos[i] = (int32_t)i;
    for (uint32_t i = 0; i < g.num_blocks; i++)
        pool[i] = (int32_t)i;
    for (uint32_t i = g.num_blocks - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(rnd() % (i + 1));
        int32_t t = pool[i];
        pool[i] = pool[j];
        pool[j] = t;
    }

    size_t want = 2 * llc_bytes();
    if (want > ((size_t)1 << 30))
        want = (size_t)1 << 30;
    size_t touched = 2 * chunk_bytes;
    int nsets = (int)((want + touched - 1) / touched);
    if (nsets < 1)
        nsets = 1;
    set *sets = xmalloc((size_t)nsets * sizeof *sets);
    for (int s = 0; s < nsets; s++) {
        sets[s].chunk = xmalloc(chunk_bytes);
        sets[s].paged = xmalloc(LAYERS * layer_bytes);
        sets[s].copy_dst = xmalloc(chunk_bytes);
        fill_random(sets[s].chunk, chunk_bytes);
        fill_random(sets[s].paged, LAYERS * layer_bytes);
        fill_random(sets[s].copy_dst, chunk_bytes);
        for (uint32_t l = 0; l < LAYERS; l++)
            sets[s].layers[l] = sets[s].paged + l * layer_bytes;
    }

    cbt_scatter_args a;
    memset(&a, 0, sizeof a);
    a.positions = pos;
    a.block_table = pool; /* the first n_table entries of the shuffled pool */
    a.n_table = n_table;
    a.n_tokens = n_tokens;

    /* correctness once: every token lands in its slot, first and last layer, K and V */
    a.chunk = sets[0].chunk;
    a.paged = sets[0].layers;
    cbt_scatter_result res;
    memset(&res, 0, sizeof res);
    cbt_status st = cbt_scatter_ref(&g, &a, CBT_SCATTER_RETRIEVE, NULL, 0, &res);
    if (st != CBT_OK) {
        fprintf(stderr, "bench_scatter_cpu: cbt_scatter_ref: %s\n", cbt_strerror(st));
        exit(2);
    }
    if (res.scattered != n_tokens || res.dropped != 0) {
        fprintf(stderr, "bench_scatter_cpu: CORRECTNESS FAILURE: scattered %u, dropped %u of %u\n",
                res.scattered, res.dropped, n_tokens);
        exit(1);
    }
    const uint32_t ls[2] = {0, LAYERS - 1};
    for (uint32_t i = 0; i < n_tokens; i++) {
        size_t slot = (size_t)pool[(uint32_t)pos[i] / BLOCK] * BLOCK + (uint32_t)pos[i] % BLOCK;
        for (int li = 0; li < 2; li++)
            for (uint32_t kv = 0; kv < 2; kv++) {
                uint32_t l = ls[li];
                const unsigned char *want_row =
                    sets[0].chunk + (((size_t)kv * LAYERS + l) * n_tokens + i) * ROW_BYTES;
                const unsigned char *got_row = (const unsigned char *)sets[0].layers[l] +
                                               ((size_t)kv * g.num_blocks * BLOCK + slot) * ROW_BYTES;
                if (memcmp(want_row, got_row, ROW_BYTES) != 0) {
                    fprintf(stderr,
                            "bench_scatter_cpu: CORRECTNESS FAILURE: token %u layer %u %s not at "
                            "slot %zu\n",
                            i, l, kv ? "V" : "K", slot);
                    exit(1);
                }
            }
    }

    /* warm-up, then alternate the two */
    double *tc = xmalloc((size_t)runs * sizeof *tc), *tr = xmalloc((size_t)runs * sizeof *tr);
    double *tw = xmalloc((size_t)runs * sizeof *tw);
    int s = 0;
    for (int w = 0; w < nsets; w++, s = (s + 1) % nsets) {
        memcpy(sets[s].copy_dst, sets[s].chunk, chunk_bytes);
        a.chunk = sets[s].chunk;
        a.paged = sets[s].layers;
        if (cbt_scatter_ref(&g, &a, CBT_SCATTER_RETRIEVE, NULL, 0, &res) != CBT_OK)
            exit(2);
    }
    for (int r = 0; r < runs; r++) {
        for (int j = 0; j < 3; j++) {
            int v = (r + j) % 3;
            double t0 = now_s();
            if (v == 0) {
                memcpy(sets[s].copy_dst, sets[s].chunk, chunk_bytes);
                tc[r] = now_s() - t0;
            } else if (v == 1) {
                for (size_t off = 0; off < chunk_bytes; off += ROW_BYTES)
                    memcpy(sets[s].copy_dst + off, sets[s].chunk + off, ROW_BYTES);
                tw[r] = now_s() - t0;
            } else {
                a.chunk = sets[s].chunk;
                a.paged = sets[s].layers;
                st = cbt_scatter_ref(&g, &a, CBT_SCATTER_RETRIEVE, NULL, 0, &res);
                tr[r] = now_s() - t0;
                if (st != CBT_OK)
                    exit(2);
            }
            s = (s + 1) % nsets;
        }
    }
    /* keep the copies observable */
    volatile unsigned char sink = sets[0].copy_dst[chunk_bytes / 2];
    (void)sink;

    row out = {n_chunks, n_tokens, chunk_bytes, median(tc, runs), median(tw, runs),
               median(tr, runs)};
    for (int k = 0; k < nsets; k++) {
        free(sets[k].chunk);
        free(sets[k].paged);
        free(sets[k].copy_dst);
    }
    free(sets);
    free(tc);
    free(tw);
    free(tr);
    free(pos);
    free(pool);
    return out;
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    int runs = quick ? 5 : 11;
    static const uint32_t sizes[] = {1, 2, 4, 8, 16};
    printf("bench_scatter_cpu: cbt_scatter_ref (retrieve, bf16, %u layers x {K,V} x %u heads x %u "
           "dims = %zu KiB per token, block_size %u, shuffled block table) against memcpy of the "
           "same bytes, one thread\n",
           LAYERS, HEADS, DIM, TOK_BYTES / 1024, BLOCK);
    printf("GB/s = (bytes read + bytes written) / median of %d runs; buffers rotated over >= 2x "
           "LLC (%zu MiB) where it fits in 1 GiB\n\n",
           runs, llc_bytes() >> 20);
    printf("%6s %7s %7s | %11s | %12s | %12s | %8s | %8s | %7s\n", "chunks", "tokens", "MiB",
           "memcpy GB/s", "2K-rows GB/s", "scatter GB/s", "% memcpy", "% rows", "Mtok/s");
    double worst = 1e9, worst_rows = 1e9;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        row r = measure(sizes[i], runs);
        double rw = 2.0 * (double)r.bytes;
        double pct = 100.0 * r.s_copy / r.s_ref;
        if (pct < worst)
            worst = pct;
        if (100.0 * r.s_rows / r.s_ref < worst_rows)
            worst_rows = 100.0 * r.s_rows / r.s_ref;
        printf("%6u %7u %7zu | %11.2f | %12.2f | %12.2f | %7.1f%% | %7.1f%% | %7.3f\n", r.chunks,
               r.tokens, r.bytes >> 20, rw / r.s_copy / 1e9, rw / r.s_rows / 1e9,
               rw / r.s_ref / 1e9, pct, 100.0 * r.s_rows / r.s_ref, r.tokens / r.s_ref / 1e6);
        fflush(stdout);
    }
    printf("\n(memcpy: one call for the whole buffer, non-temporal stores once it is large; "
           "2K-rows: memcpy per 2 KiB row, contiguous, the scatter's unit of copy)\n");
    printf("target: scatter_ref >= 60%% of memcpy: %s (lowest %.1f%%; against 2 KiB-row memcpy "
           "lowest %.1f%%)\n",
           worst >= 60.0 ? "ok" : "MISSED", worst, worst_rows);
    return 0;
}
