// bench/bench_scatter_gpu.cu — the KV scatter's throughput on a GPU, with the
// instrumentation off, per launch and per CTA, against a device-to-device
// copy of the same bytes measured in the same run; and the L2 load (pinned
// host -> device) as a zero-copy kernel against batched cudaMemcpyAsync.
//
//   geometry   32 layers x {K,V} x 8 heads x 128 dims, bf16: 128 KiB per token,
//              32 MiB per 256-token chunk; vLLM block_size 16
//   sizes      1, 2, 4, 8, 16, 32, 64 chunks, retrieve (chunk -> paged), one
//              launch per size over a chunk buffer of n x 256 rows, request
//              positions 0..n*256-1, the block table a shuffled subset of a
//              pool 1.5x the blocks needed; plus one store row (paged -> chunk)
//   variants   copy   cudaMemcpyAsync device -> device of the same byte count
//              off    cbt_scatter_cuda with span.ring == NULL
//              launch span.mode = CBT_REC_LAUNCH (one record per launch)
//              cta    span.mode = CBT_REC_CTA (one record per CTA)
//              off2   "off" again: the run's noise floor
//   ring       allocated here in plain CUDA: records in mapped pinned host
//              memory (cudaHostAllocMapped), claim counter and fold slots in
//              device memory zeroed once, 1 << 20 records (it wraps; nobody
//              harvests it during the timing)
//
// Method (.library METHOD.md): random finite bf16 data, never zeros; a warm-up;
// each sample is K back-to-back launches (K chosen so a sample lasts a few ms)
// over buffer sets rotated so the bytes touched are >= 4x the L2; the five
// variants interleaved round by round; CUDA events; the median of the
// samples. GB/s counts bytes read plus bytes written (2 x the KV bytes moved).
// Once per size, before timing, each scatter variant's output is compared
// byte for byte, over the whole destination buffer (poisoned first), with
// cbt_scatter_ref run on the host; the ring's records of that launch are
// checked too (count, tokens, launch id, sequence word).
//
// Usage: bench_scatter_gpu [--quick] [--chunks N]. --chunks N: the retrieve
// of N chunks (1..64) alone, no other size and no store row (bench/gpu-check.sh
// points ncu at its first scatter launch: 8 chunks = 256 MiB, past the L2).
// Exit status: 0 (also when a target is
// missed, and "SKIP" when there is no device), 1 a correctness failure,
// 2 a CUDA or cbt error. Targets (docs/performance.md): scatter >= 90% of the
// copy from 8 chunks up; overhead <= 1% per launch, <= 3% per CTA.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cbt/kv_kernels.h"

namespace {

constexpr uint32_t kLayers = 32;
constexpr uint32_t kHeads = 8;
constexpr uint32_t kDim = 128;
constexpr uint32_t kBlock = 16;
constexpr uint32_t kChunkTokens = 256;
constexpr size_t kHidden = (size_t)kHeads * kDim;
constexpr size_t kTokBytes = (size_t)kLayers * 2 * kHidden * 2; // all layers, K and V, bf16
constexpr uint32_t kRingCap = 1u << 20;
constexpr unsigned char kPoison = 0xA7; // bf16 0xA7A7: outside the random data's exponents

void die_cuda(cudaError_t e, const char *what, const char *file, int line)
{
    fflush(stdout);
    fprintf(stderr, "bench_scatter_gpu: CUDA error %s (%s) at %s:%d: %s\n", cudaGetErrorName(e),
            cudaGetErrorString(e), file, line, what);
    exit(2);
}

#define CK(call)                                              \
    do {                                                      \
        cudaError_t ck_e_ = (call);                           \
        if (ck_e_ != cudaSuccess)                             \
            die_cuda(ck_e_, #call, __FILE__, __LINE__);       \
    } while (0)

void die_cbt(cbt_status st, const char *what)
{
    cudaError_t e = cudaGetLastError();
    fflush(stdout);
    fprintf(stderr, "bench_scatter_gpu: %s returned %d (%s); cudaGetLastError: %s\n", what, (int)st,
            cbt_strerror(st), cudaGetErrorString(e));
    exit(2);
}

void fail(const char *fmt, const char *a, unsigned long long x, unsigned long long y)
{
    fflush(stdout);
    fprintf(stderr, "bench_scatter_gpu: CORRECTNESS FAILURE: ");
    fprintf(stderr, fmt, a, x, y);
    fprintf(stderr, "\n");
    exit(1);
}

// ---- device helpers -----------------------------------------------------------

__host__ __device__ inline uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// A finite bf16 from 32 random bits: random sign and mantissa, exponent in
// [118, 133] (about 2^-9 .. 2^6).
__device__ inline uint32_t bf16_bits(uint32_t h)
{
    return ((h >> 31) << 15) | ((118u + ((h >> 7) & 15u)) << 7) | (h & 0x7fu);
}

__global__ void k_fill(uint32_t *p, size_t n_words, uint64_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n_words;
         i += (size_t)gridDim.x * blockDim.x) {
        uint64_t h = mix64(seed ^ (i * 0xD1B54A32D192ED03ull));
        p[i] = bf16_bits((uint32_t)h) | (bf16_bits((uint32_t)(h >> 32)) << 16);
    }
}

__global__ void k_compare(const uint4 *a, const uint4 *b, size_t n, unsigned long long *first_bad,
                          unsigned long long *n_bad)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint4 x = a[i], y = b[i];
        if (x.x != y.x || x.y != y.y || x.z != y.z || x.w != y.w) {
            atomicAdd(n_bad, 1ull);
            atomicMin(first_bad, (unsigned long long)i);
        }
    }
}

int g_sms = 132;

void fill_random(void *p, size_t bytes, uint64_t seed, cudaStream_t st)
{
    k_fill<<<g_sms * 8, 256, 0, st>>>(static_cast<uint32_t *>(p), bytes / 4, seed);
    CK(cudaGetLastError());
}

// Byte-exact comparison of two device-visible buffers of `bytes` (a multiple
// of 16). Returns the number of differing 16-byte words; *first = the first.
unsigned long long compare_dev(const void *a, const void *b, size_t bytes, unsigned long long *first,
                               cudaStream_t st)
{
    static unsigned long long *d = nullptr;
    if (!d)
        CK(cudaMalloc(&d, 2 * sizeof *d));
    unsigned long long init[2] = {~0ull, 0ull};
    CK(cudaMemcpyAsync(d, init, sizeof init, cudaMemcpyHostToDevice, st));
    k_compare<<<g_sms * 8, 256, 0, st>>>(static_cast<const uint4 *>(a), static_cast<const uint4 *>(b),
                                         bytes / 16, &d[0], &d[1]);
    CK(cudaGetLastError());
    unsigned long long out[2];
    CK(cudaMemcpyAsync(out, d, sizeof out, cudaMemcpyDeviceToHost, st));
    CK(cudaStreamSynchronize(st));
    *first = out[0];
    return out[1];
}

// ---- the ring, in plain CUDA --------------------------------------------------

struct Ring {
    cbt_ring_rec *recs_host = nullptr; // mapped pinned host memory
    unsigned long long *claim = nullptr;
    cbt_fold_slot *fold = nullptr;
    cbt_ring_dev *dev = nullptr; // the descriptor, in device memory
};

void ring_create(Ring &r)
{
    CK(cudaHostAlloc(&r.recs_host, (size_t)kRingCap * sizeof(cbt_ring_rec), cudaHostAllocMapped));
    memset(r.recs_host, 0, (size_t)kRingCap * sizeof(cbt_ring_rec));
    cbt_ring_rec *recs_dev = nullptr;
    CK(cudaHostGetDevicePointer(reinterpret_cast<void **>(&recs_dev), r.recs_host, 0));
    CK(cudaMalloc(&r.claim, sizeof *r.claim));
    CK(cudaMemset(r.claim, 0, sizeof *r.claim));
    CK(cudaMalloc(&r.fold, CBT_FOLD_SLOTS * sizeof(cbt_fold_slot)));
    CK(cudaMemset(r.fold, 0, CBT_FOLD_SLOTS * sizeof(cbt_fold_slot)));
    cbt_ring_dev h;
    memset(&h, 0, sizeof h);
    h.recs = recs_dev;
    h.claim = r.claim;
    h.fold = r.fold;
    h.mask = kRingCap - 1;
    CK(cudaMalloc(&r.dev, sizeof h));
    CK(cudaMemcpy(r.dev, &h, sizeof h, cudaMemcpyHostToDevice));
}

void ring_destroy(Ring &r)
{
    CK(cudaFree(r.dev));
    CK(cudaFree(r.fold));
    CK(cudaFree(r.claim));
    CK(cudaFreeHost(r.recs_host));
}

unsigned long long ring_claimed(const Ring &r)
{
    unsigned long long c;
    CK(cudaMemcpy(&c, r.claim, sizeof c, cudaMemcpyDeviceToHost));
    return c;
}

// ---- one benchmark case: a size and a direction -----------------------------------

enum Variant { V_COPY = 0, V_OFF, V_LAUNCH, V_CTA, V_OFF2, V_COUNT };
const char *const kVariantName[V_COUNT] = {"copy", "off", "per-launch", "per-CTA", "off (again)"};

struct Set {
    void *chunk = nullptr;
    void *paged = nullptr;       // all layers, contiguous: layer l at l * layer_bytes
    void **paged_ptrs = nullptr; // [kLayers] in device memory
    void *copy_dst = nullptr;
};

struct Case {
    uint32_t n_chunks = 0;
    cbt_scatter_dir dir = CBT_SCATTER_RETRIEVE;
    cbt_kv_geom g;
    uint32_t n_tokens = 0, n_table = 0;
    size_t chunk_bytes = 0, layer_bytes = 0, paged_bytes = 0;
    std::vector<Set> sets;
    int32_t *d_pos = nullptr, *d_table = nullptr;
    std::vector<int32_t> h_pos, h_table;
};

struct Row {
    uint32_t n_chunks;
    cbt_scatter_dir dir;
    uint32_t n_tokens;
    size_t bytes; // KV bytes moved one way
    double ms[V_COUNT];
    double host_us_per_launch; // enqueue cost on the host, off variant
    double dev_us_per_launch;
};

struct Bench {
    cudaStream_t st = nullptr;
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    Ring ring;
    uint32_t launch_id = 0;
    int rounds = 25;
    double sample_ms = 4.0;
    size_t l2_bytes = 50u << 20;
    uint64_t seed = 0x5EEDC0DEull;
};

uint64_t g_rng = 0x243F6A8885A308D3ull;
uint64_t rnd(void)
{
    g_rng = mix64(g_rng);
    return g_rng;
}

void case_create(Bench &b, Case &c, uint32_t n_chunks, cbt_scatter_dir dir)
{
    c.n_chunks = n_chunks;
    c.dir = dir;
    c.n_tokens = n_chunks * kChunkTokens;
    c.n_table = c.n_tokens / kBlock;
    memset(&c.g, 0, sizeof c.g);
    c.g.num_layers = kLayers;
    c.g.num_heads = kHeads;
    c.g.head_dim = kDim;
    c.g.dtype = CBT_DT_BF16;
    c.g.block_size = kBlock;
    c.g.num_blocks = c.n_table + c.n_table / 2; // a pool 1.5x what the request needs
    c.g.chunk_tokens = c.n_tokens;
    c.chunk_bytes = (size_t)c.n_tokens * kTokBytes;
    c.layer_bytes = 2 * (size_t)c.g.num_blocks * kBlock * kHidden * 2;
    c.paged_bytes = kLayers * c.layer_bytes;

    // positions 0..n-1; the block table a shuffled subset of the pool
    c.h_pos.resize(c.n_tokens);
    for (uint32_t i = 0; i < c.n_tokens; i++)
        c.h_pos[i] = (int32_t)i;
    std::vector<int32_t> pool(c.g.num_blocks);
    for (uint32_t i = 0; i < c.g.num_blocks; i++)
        pool[i] = (int32_t)i;
    for (uint32_t i = c.g.num_blocks - 1; i > 0; i--)
        std::swap(pool[i], pool[rnd() % (i + 1)]);
    c.h_table.assign(pool.begin(), pool.begin() + c.n_table);
    CK(cudaMalloc(&c.d_pos, c.n_tokens * sizeof(int32_t)));
    CK(cudaMalloc(&c.d_table, c.n_table * sizeof(int32_t)));
    CK(cudaMemcpy(c.d_pos, c.h_pos.data(), c.n_tokens * sizeof(int32_t), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(c.d_table, c.h_table.data(), c.n_table * sizeof(int32_t), cudaMemcpyHostToDevice));

    // enough sets that the bytes touched per round of launches are >= 4x L2
    size_t touched = 2 * c.chunk_bytes;
    size_t want = 4 * b.l2_bytes;
    int nsets = (int)std::min<size_t>(16, std::max<size_t>(1, (want + touched - 1) / touched));
    c.sets.resize((size_t)nsets);
    for (Set &s : c.sets) {
        CK(cudaMalloc(&s.chunk, c.chunk_bytes));
        CK(cudaMalloc(&s.paged, c.paged_bytes));
        CK(cudaMalloc(&s.copy_dst, c.chunk_bytes));
        fill_random(s.chunk, c.chunk_bytes, b.seed++, b.st);
        fill_random(s.paged, c.paged_bytes, b.seed++, b.st);
        fill_random(s.copy_dst, c.chunk_bytes, b.seed++, b.st);
        std::vector<void *> ptrs(kLayers);
        for (uint32_t l = 0; l < kLayers; l++)
            ptrs[l] = static_cast<char *>(s.paged) + l * c.layer_bytes;
        CK(cudaMalloc(&s.paged_ptrs, kLayers * sizeof(void *)));
        CK(cudaMemcpy(s.paged_ptrs, ptrs.data(), kLayers * sizeof(void *), cudaMemcpyHostToDevice));
    }
    CK(cudaStreamSynchronize(b.st));
}

void case_destroy(Case &c)
{
    for (Set &s : c.sets) {
        CK(cudaFree(s.chunk));
        CK(cudaFree(s.paged));
        CK(cudaFree(s.copy_dst));
        CK(cudaFree(s.paged_ptrs));
    }
    c.sets.clear();
    CK(cudaFree(c.d_pos));
    CK(cudaFree(c.d_table));
}

cbt_status scatter(Bench &b, Case &c, int set, const cbt_ring_dev *ring, uint8_t mode)
{
    cbt_scatter_args a;
    memset(&a, 0, sizeof a);
    a.chunk = c.sets[(size_t)set].chunk;
    a.paged = c.sets[(size_t)set].paged_ptrs;
    a.positions = c.d_pos;
    a.block_table = c.d_table;
    a.n_table = c.n_table;
    a.n_tokens = c.n_tokens;
    a.chunk_offset = 0;
    a.rope = nullptr;
    cbt_kspan sp;
    memset(&sp, 0, sizeof sp);
    sp.ring = ring;
    sp.launch_id = ++b.launch_id;
    sp.op = (uint8_t)(c.dir == CBT_SCATTER_RETRIEVE ? CBT_KOP_SCATTER : CBT_KOP_GATHER);
    sp.mode = mode;
    return cbt_scatter_cuda(&c.g, &a, c.dir, sp, 0, b.st);
}

void run_variant(Bench &b, Case &c, int v, int set)
{
    cbt_status st = CBT_OK;
    switch (v) {
    case V_COPY:
        CK(cudaMemcpyAsync(c.sets[(size_t)set].copy_dst, c.sets[(size_t)set].chunk, c.chunk_bytes,
                           cudaMemcpyDeviceToDevice, b.st));
        return;
    case V_OFF:
    case V_OFF2:
        st = scatter(b, c, set, nullptr, 0);
        break;
    case V_LAUNCH:
        st = scatter(b, c, set, b.ring.dev, (uint8_t)CBT_REC_LAUNCH);
        break;
    case V_CTA:
        st = scatter(b, c, set, b.ring.dev, (uint8_t)CBT_REC_CTA);
        break;
    default:
        break;
    }
    if (st != CBT_OK)
        die_cbt(st, "cbt_scatter_cuda");
}

// ms per launch of K back-to-back launches; *host_us = host enqueue us per launch
double time_batch(Bench &b, Case &c, int v, int k, int *set, double *host_us)
{
    CK(cudaEventRecord(b.e0, b.st));
    auto h0 = std::chrono::steady_clock::now();
    for (int i = 0; i < k; i++) {
        run_variant(b, c, v, *set);
        *set = (*set + 1) % (int)c.sets.size();
    }
    auto h1 = std::chrono::steady_clock::now();
    CK(cudaEventRecord(b.e1, b.st));
    CK(cudaEventSynchronize(b.e1));
    CK(cudaGetLastError());
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, b.e0, b.e1));
    if (host_us)
        *host_us = std::chrono::duration<double, std::micro>(h1 - h0).count() / k;
    return (double)ms / k;
}

double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// ---- correctness: each scatter variant against cbt_scatter_ref ----------------------

void check_ring(Bench &b, Case &c, uint8_t mode, unsigned long long before, const char *what)
{
    unsigned long long after = ring_claimed(b.ring);
    unsigned long long n = after - before;
    if (n == 0)
        fail("%s: the launch wrote no ring record (claim %llu -> %llu)", what, before, after);
    if (mode == CBT_REC_LAUNCH && n != 1)
        fail("%s: per-launch mode claimed %llu records, %llu expected", what, n, 1);
    if (n > kRingCap)
        fail("%s: %llu records claimed by one launch, ring holds %llu", what, n, kRingCap);
    unsigned long long tokens = 0;
    for (unsigned long long p = before; p < after; p++) {
        const volatile cbt_ring_rec *r = &b.ring.recs_host[p & (kRingCap - 1)];
        if (r->seq != (uint32_t)(p + 1))
            fail("%s: record %llu has sequence word %llu", what, p, r->seq);
        if (r->launch_id != b.launch_id)
            fail("%s: record's launch id %llu, expected %llu", what, r->launch_id, b.launch_id);
        if (r->kind != mode)
            fail("%s: record kind %llu, expected %llu", what, r->kind, mode);
        if (r->t_end < r->t_begin)
            fail("%s: record ends before it begins (%llu < %llu)", what, r->t_end, r->t_begin);
        if (r->user != 0)
            fail("%s: record reports %llu re-RoPE'd tokens, expected %llu", what, r->user, 0);
        tokens += r->tokens;
    }
    if (tokens != c.n_tokens)
        fail("%s: the ring counts %llu tokens, %llu scattered", what, tokens, c.n_tokens);
}

void verify(Bench &b, Case &c)
{
    Set &s = c.sets[0];
    const bool ret = c.dir == CBT_SCATTER_RETRIEVE;
    void *d_src = ret ? s.chunk : s.paged;
    void *d_dst = ret ? s.paged : s.chunk;
    size_t src_bytes = ret ? c.chunk_bytes : c.paged_bytes;
    size_t dst_bytes = ret ? c.paged_bytes : c.chunk_bytes;

    // the reference on the host: the same source, a poisoned destination
    unsigned char *h_src = static_cast<unsigned char *>(malloc(src_bytes));
    unsigned char *h_dst = static_cast<unsigned char *>(malloc(dst_bytes));
    if (!h_src || !h_dst) {
        fprintf(stderr, "bench_scatter_gpu: out of host memory (%zu + %zu bytes)\n", src_bytes,
                dst_bytes);
        exit(2);
    }
    CK(cudaMemcpy(h_src, d_src, src_bytes, cudaMemcpyDeviceToHost));
    memset(h_dst, kPoison, dst_bytes);
    unsigned char *h_chunk = ret ? h_src : h_dst;
    unsigned char *h_paged = ret ? h_dst : h_src;
    std::vector<void *> h_layers(kLayers);
    for (uint32_t l = 0; l < kLayers; l++)
        h_layers[l] = h_paged + l * c.layer_bytes;
    cbt_scatter_args a;
    memset(&a, 0, sizeof a);
    a.chunk = h_chunk;
    a.paged = h_layers.data();
    a.positions = c.h_pos.data();
    a.block_table = c.h_table.data();
    a.n_table = c.n_table;
    a.n_tokens = c.n_tokens;
    cbt_scatter_result res;
    memset(&res, 0, sizeof res);
    cbt_status st = cbt_scatter_ref(&c.g, &a, c.dir, nullptr, 0, &res);
    if (st != CBT_OK)
        die_cbt(st, "cbt_scatter_ref");
    if (res.scattered != c.n_tokens || res.dropped != 0)
        fail("%s: the reference scattered %llu tokens and dropped %llu", "cbt_scatter_ref",
             res.scattered, res.dropped);
    void *d_expect = nullptr;
    CK(cudaMalloc(&d_expect, dst_bytes));
    CK(cudaMemcpy(d_expect, h_dst, dst_bytes, cudaMemcpyHostToDevice));
    free(h_src);
    free(h_dst);

    const int vs[3] = {V_OFF, V_LAUNCH, V_CTA};
    for (int v : vs) {
        char what[96];
        snprintf(what, sizeof what, "%s %u chunks, %s", ret ? "retrieve" : "store", c.n_chunks,
                 kVariantName[v]);
        CK(cudaMemsetAsync(d_dst, kPoison, dst_bytes, b.st));
        CK(cudaStreamSynchronize(b.st));
        unsigned long long before = ring_claimed(b.ring);
        run_variant(b, c, v, 0);
        CK(cudaStreamSynchronize(b.st));
        CK(cudaGetLastError());
        unsigned long long first = 0;
        unsigned long long bad = compare_dev(d_dst, d_expect, dst_bytes, &first, b.st);
        if (bad)
            fail("%s: %llu 16-byte words differ from cbt_scatter_ref, the first at byte %llu", what,
                 bad, first * 16);
        if (v == V_LAUNCH)
            check_ring(b, c, CBT_REC_LAUNCH, before, what);
        else if (v == V_CTA)
            check_ring(b, c, CBT_REC_CTA, before, what);
        else if (ring_claimed(b.ring) != before)
            fail("%s: %llu ring records written with the ring off (claim was %llu)", what,
                 ring_claimed(b.ring) - before, before);
    }
    CK(cudaFree(d_expect));
}

Row measure(Bench &b, uint32_t n_chunks, cbt_scatter_dir dir)
{
    Case c;
    case_create(b, c, n_chunks, dir);
    verify(b, c);

    Row row;
    memset(&row, 0, sizeof row);
    row.n_chunks = n_chunks;
    row.dir = dir;
    row.n_tokens = c.n_tokens;
    row.bytes = c.chunk_bytes;

    int set = 0;
    for (int w = 0; w < 3; w++) // warm-up: every variant over every set
        for (int v = 0; v < V_COUNT; v++)
            time_batch(b, c, v, (int)c.sets.size(), &set, nullptr);
    double t1 = time_batch(b, c, V_COPY, (int)c.sets.size(), &set, nullptr);
    int k = (int)std::min(256.0, std::max(2.0, b.sample_ms / t1 + 0.999));

    std::vector<double> samples[V_COUNT];
    std::vector<double> host_us, dev_us;
    for (int r = 0; r < b.rounds; r++) {
        for (int j = 0; j < V_COUNT; j++) {
            int v = (r + j) % V_COUNT; // rotate the order: drift hits every variant alike
            double hu = 0;
            double ms = time_batch(b, c, v, k, &set, &hu);
            samples[v].push_back(ms);
            if (v == V_OFF) {
                host_us.push_back(hu);
                dev_us.push_back(ms * 1000.0);
            }
        }
    }
    for (int v = 0; v < V_COUNT; v++)
        row.ms[v] = median(samples[v]);
    row.host_us_per_launch = median(host_us);
    row.dev_us_per_launch = median(dev_us);
    case_destroy(c);
    return row;
}

// ---- L2 load: pinned host staging area -> device chunk buffers ------------------------

struct L2Row {
    uint32_t n_chunks;
    size_t bytes;
    double ms_kernel, ms_memcpy;
};

void measure_l2(Bench &b, const uint32_t *sizes, int n_sizes, std::vector<L2Row> &out)
{
    uint32_t max_chunks = 0;
    for (int i = 0; i < n_sizes; i++)
        max_chunks = std::max(max_chunks, sizes[i]);
    const uint64_t cb = (uint64_t)kChunkTokens * kTokBytes;
    const size_t total = (size_t)max_chunks * cb;

    unsigned char *h_src = nullptr, *h_src_dev = nullptr, *d_dst = nullptr;
    CK(cudaHostAlloc(&h_src, total, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer(reinterpret_cast<void **>(&h_src_dev), h_src, 0));
    CK(cudaMalloc(&d_dst, total));
    fill_random(d_dst, total, b.seed++, b.st); // random on the device, then into the staging area
    CK(cudaMemcpyAsync(h_src, d_dst, total, cudaMemcpyDeviceToHost, b.st));
    CK(cudaStreamSynchronize(b.st));

    std::vector<void *> h_dst_ptrs(max_chunks), h_src_ptrs(max_chunks), h_src_dptrs(max_chunks);
    for (uint32_t i = 0; i < max_chunks; i++) {
        h_dst_ptrs[i] = d_dst + i * cb;
        h_src_ptrs[i] = h_src + i * cb;
        h_src_dptrs[i] = h_src_dev + i * cb;
    }
    void **d_dst_ptrs = nullptr, **d_src_ptrs = nullptr;
    CK(cudaMalloc(&d_dst_ptrs, max_chunks * sizeof(void *)));
    CK(cudaMalloc(&d_src_ptrs, max_chunks * sizeof(void *)));
    CK(cudaMemcpy(d_dst_ptrs, h_dst_ptrs.data(), max_chunks * sizeof(void *), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_src_ptrs, h_src_dptrs.data(), max_chunks * sizeof(void *), cudaMemcpyHostToDevice));

    cbt_kspan off;
    memset(&off, 0, sizeof off);
    auto run = [&](int which, uint32_t n) {
        cbt_status st;
        if (which == 0)
            st = cbt_l2_load_cuda_kernel(d_dst_ptrs, d_src_ptrs, n, cb, off, b.st);
        else
            st = cbt_l2_load_cuda_memcpy(h_dst_ptrs.data(), h_src_ptrs.data(), n, cb, b.st);
        if (st != CBT_OK)
            die_cbt(st, which == 0 ? "cbt_l2_load_cuda_kernel" : "cbt_l2_load_cuda_memcpy");
    };

    for (int si = 0; si < n_sizes; si++) {
        uint32_t n = sizes[si];
        const size_t bytes = (size_t)n * cb;
        for (int which = 0; which < 2; which++) { // correctness first
            CK(cudaMemsetAsync(d_dst, kPoison, bytes, b.st));
            run(which, n);
            CK(cudaStreamSynchronize(b.st));
            CK(cudaGetLastError());
            unsigned long long first = 0;
            unsigned long long bad = compare_dev(d_dst, h_src_dev, bytes, &first, b.st);
            if (bad)
                fail("%s: %llu 16-byte words differ from the staging area, the first at byte %llu",
                     which == 0 ? "l2_load kernel" : "l2_load memcpy", bad, first * 16);
        }
        for (int w = 0; w < 2; w++)
            for (int which = 0; which < 2; which++)
                run(which, n);
        std::vector<double> s[2];
        int rounds = std::max(5, b.rounds / 2);
        for (int r = 0; r < rounds; r++)
            for (int j = 0; j < 2; j++) {
                int which = (r + j) % 2;
                CK(cudaEventRecord(b.e0, b.st));
                run(which, n);
                CK(cudaEventRecord(b.e1, b.st));
                CK(cudaEventSynchronize(b.e1));
                float ms = 0;
                CK(cudaEventElapsedTime(&ms, b.e0, b.e1));
                s[which].push_back(ms);
            }
        L2Row row;
        row.n_chunks = n;
        row.bytes = bytes;
        row.ms_kernel = median(s[0]);
        row.ms_memcpy = median(s[1]);
        out.push_back(row);
    }
    CK(cudaFree(d_dst_ptrs));
    CK(cudaFree(d_src_ptrs));
    CK(cudaFree(d_dst));
    CK(cudaFreeHost(h_src));
}

double gbps(size_t bytes, double ms)
{
    return (double)bytes / (ms * 1e-3) / 1e9;
}

} // namespace

int main(int argc, char **argv)
{
    bool quick = false;
    uint32_t only_chunks = 0; // --chunks N: that retrieve size alone
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = true;
        } else if (strcmp(argv[i], "--chunks") == 0 && i + 1 < argc && atoi(argv[i + 1]) >= 1 &&
                   atoi(argv[i + 1]) <= 64) {
            only_chunks = (uint32_t)atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_scatter_gpu [--quick] [--chunks N (1..64)]\n");
            return 2;
        }
    }
    int n_dev = 0;
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e != cudaSuccess || n_dev == 0) {
        printf("SKIP: bench_scatter_gpu needs a CUDA device (%s)\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "no device found");
        return 0;
    }
    e = cudaSetDeviceFlags(cudaDeviceMapHost); // implied with unified addressing; asked anyway
    if (e != cudaSuccess && e != cudaErrorSetOnActiveProcess)
        die_cuda(e, "cudaSetDeviceFlags(cudaDeviceMapHost)", __FILE__, __LINE__);
    (void)cudaGetLastError();
    CK(cudaSetDevice(0));
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    if (!p.canMapHostMemory) {
        fprintf(stderr, "bench_scatter_gpu: the device cannot map host memory (the ring needs it)\n");
        return 2;
    }
    g_sms = p.multiProcessorCount;
    int drv = 0, rt = 0;
    CK(cudaDriverGetVersion(&drv));
    CK(cudaRuntimeGetVersion(&rt));

    Bench b;
    b.rounds = quick ? 7 : 25;
    b.sample_ms = quick ? 2.0 : 4.0;
    b.l2_bytes = p.l2CacheSize > 0 ? (size_t)p.l2CacheSize : b.l2_bytes;
    CK(cudaStreamCreateWithFlags(&b.st, cudaStreamNonBlocking));
    CK(cudaEventCreate(&b.e0));
    CK(cudaEventCreate(&b.e1));
    ring_create(b.ring);

    printf("bench_scatter_gpu: KV scatter throughput, instrumentation off / per-launch / per-CTA, "
           "against a device-to-device copy of the same bytes\n");
    printf("device: %s (sm_%d%d, %d SMs, L2 %.1f MiB, %.1f GiB), driver %d.%d, runtime %d.%d\n",
           p.name, p.major, p.minor, p.multiProcessorCount, p.l2CacheSize / 1048576.0,
           (double)p.totalGlobalMem / (1u << 30), drv / 1000, drv % 1000 / 10, rt / 1000,
           rt % 1000 / 10);
    printf("geometry: %u layers x {K,V} x %u heads x %u dims, bf16 = %zu KiB per token; chunk = %u "
           "tokens = %zu MiB; block_size %u; block table shuffled over a pool 1.5x the blocks needed\n",
           kLayers, kHeads, kDim, kTokBytes / 1024, kChunkTokens, kChunkTokens * kTokBytes >> 20,
           kBlock);
    printf("method: GB/s = (bytes read + bytes written) / median of %d samples, each K back-to-back "
           "launches over buffer sets rotated to touch >= 4x L2; variants interleaved; every output "
           "checked against cbt_scatter_ref first; ring: %u records in mapped pinned host memory\n\n",
           b.rounds, kRingCap);

    std::vector<uint32_t> sizes = {1, 2, 4, 8, 16, 32, 64};
    if (only_chunks)
        sizes.assign(1, only_chunks);
    std::vector<Row> rows;
    printf("%-8s %6s %7s %7s | %9s | %9s %8s | %10s %7s | %10s %7s | %7s %6s\n", "dir", "chunks",
           "tokens", "MiB", "copy GB/s", "off GB/s", "% copy", "per-launch", "ovh", "per-CTA", "ovh",
           "Mtok/s", "noise");
    auto print_row = [&](const Row &r) {
        size_t rw = 2 * r.bytes;
        double off = r.ms[V_OFF];
        printf("%-8s %6u %7u %7zu | %9.1f | %9.1f %7.1f%% | %10.1f %+6.2f%% | %10.1f %+6.2f%% | %7.1f "
               "%5.2f%%\n",
               r.dir == CBT_SCATTER_RETRIEVE ? "retrieve" : "store", r.n_chunks, r.n_tokens,
               r.bytes >> 20, gbps(rw, r.ms[V_COPY]), gbps(rw, off), 100.0 * r.ms[V_COPY] / off,
               gbps(rw, r.ms[V_LAUNCH]), 100.0 * (r.ms[V_LAUNCH] - off) / off, gbps(rw, r.ms[V_CTA]),
               100.0 * (r.ms[V_CTA] - off) / off, r.n_tokens / (off * 1e-3) / 1e6,
               100.0 * std::abs(r.ms[V_OFF2] - off) / off);
        fflush(stdout);
    };
    for (uint32_t n : sizes) {
        rows.push_back(measure(b, n, CBT_SCATTER_RETRIEVE));
        print_row(rows.back());
    }
    if (!only_chunks) {
        rows.push_back(measure(b, 16, CBT_SCATTER_STORE));
        print_row(rows.back());
    }

    // targets
    double worst_pct = 1e9, worst_launch = -1e9, worst_cta = -1e9, max_noise = 0;
    uint32_t at_pct = 0, at_launch = 0, at_cta = 0;
    bool host_bound = false;
    for (const Row &r : rows) {
        double off = r.ms[V_OFF];
        double pct = 100.0 * r.ms[V_COPY] / off;
        double ol = 100.0 * (r.ms[V_LAUNCH] - off) / off;
        double oc = 100.0 * (r.ms[V_CTA] - off) / off;
        if (r.dir == CBT_SCATTER_RETRIEVE && r.n_chunks >= 8 && pct < worst_pct) {
            worst_pct = pct;
            at_pct = r.n_chunks;
        }
        if (ol > worst_launch) {
            worst_launch = ol;
            at_launch = r.n_chunks;
        }
        if (oc > worst_cta) {
            worst_cta = oc;
            at_cta = r.n_chunks;
        }
        max_noise = std::max(max_noise, 100.0 * std::abs(r.ms[V_OFF2] - off) / off);
        if (r.host_us_per_launch > 0.9 * r.dev_us_per_launch)
            host_bound = true;
    }
    printf("\n(MiB = KV bytes moved one way; GB/s counts them read and written; ovh = time vs off; "
           "noise = |off - off again| / off)\n");
    printf("targets: scatter off >= 90%% of copy from 8 chunks up: %s (lowest %.1f%% at %u chunks)\n",
           worst_pct >= 90.0 ? "ok" : "MISSED", worst_pct, at_pct);
    printf("         per-launch overhead <= 1%%: %s (highest %+.2f%% at %u chunks)\n",
           worst_launch <= 1.0 ? "ok" : "MISSED", worst_launch, at_launch);
    printf("         per-CTA overhead <= 3%%: %s (highest %+.2f%% at %u chunks)\n",
           worst_cta <= 3.0 ? "ok" : "MISSED", worst_cta, at_cta);
    printf("         noise floor (off vs off again): up to %.2f%%; overheads below it are noise\n",
           max_noise);
    if (host_bound)
        printf("note: at some size the host took nearly as long to enqueue a launch as the GPU to "
               "run it: those rows may be launch-bound\n");

    // L2 load
    const uint32_t l2_sizes[] = {8, 64};
    std::vector<L2Row> l2;
    measure_l2(b, l2_sizes, 2, l2);
    printf("\nL2 load: pinned host staging area -> device chunk buffers, chunks of %u tokens x %zu "
           "KiB; GB/s of bytes transferred (each byte once)\n",
           kChunkTokens, kTokBytes / 1024);
    printf("%6s %7s | %16s | %16s | %8s\n", "chunks", "MiB", "zero-copy GB/s", "memcpy GB/s",
           "kern/cpy");
    for (const L2Row &r : l2)
        printf("%6u %7zu | %16.1f | %16.1f | %7.1f%%\n", r.n_chunks, r.bytes >> 20,
               gbps(r.bytes, r.ms_kernel), gbps(r.bytes, r.ms_memcpy),
               100.0 * r.ms_memcpy / r.ms_kernel);

    // one-line results for scripts (bench/gpu-check.sh greps "SUMMARY ")
    printf("\n");
    for (const Row &r : rows) {
        if (!(r.n_chunks == 1 || r.n_chunks == 8 || r.n_chunks == 64 ||
              r.dir == CBT_SCATTER_STORE))
            continue;
        size_t rw = 2 * r.bytes;
        double off = r.ms[V_OFF];
        printf("SUMMARY scatter %-8s %2u ch: copy %7.1f GB/s, off %7.1f GB/s (%5.1f%% of copy), "
               "per-launch %+.2f%%, per-CTA %+.2f%%\n",
               r.dir == CBT_SCATTER_RETRIEVE ? "retrieve" : "store", r.n_chunks,
               gbps(rw, r.ms[V_COPY]), gbps(rw, off), 100.0 * r.ms[V_COPY] / off,
               100.0 * (r.ms[V_LAUNCH] - off) / off, 100.0 * (r.ms[V_CTA] - off) / off);
    }
    printf("SUMMARY targets: >=90%% of copy from 8 ch %s, per-launch <=1%% %s, per-CTA <=3%% %s "
           "(noise %.2f%%)\n",
           worst_pct >= 90.0 ? "ok" : "MISSED", worst_launch <= 1.0 ? "ok" : "MISSED",
           worst_cta <= 3.0 ? "ok" : "MISSED", max_noise);
    for (const L2Row &r : l2)
        printf("SUMMARY l2_load %2u ch: zero-copy kernel %.1f GB/s, batched memcpy %.1f GB/s\n",
               r.n_chunks, gbps(r.bytes, r.ms_kernel), gbps(r.bytes, r.ms_memcpy));
    printf("SUMMARY correctness: every scatter and L2-load output matched the reference\n");

    ring_destroy(b.ring);
    CK(cudaEventDestroy(b.e0));
    CK(cudaEventDestroy(b.e1));
    CK(cudaStreamDestroy(b.st));
    return 0;
}
