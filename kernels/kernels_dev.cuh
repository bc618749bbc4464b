// kernels/kernels_dev.cuh — private to kernels/*.cu: the device building
// blocks the scatter, re-RoPE and L2 load kernels share (even work split,
// warp- and CTA-wide copies at the widest aligned width, the re-RoPE of one
// token row), and the host helpers that size and check launches.
#ifndef CBT_KERNELS_DEV_CUH
#define CBT_KERNELS_DEV_CUH

#include <atomic>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cbt/kernel_span.h"
#include "cbt/kv_kernels.h"

namespace cbtk {

constexpr unsigned kThreads = 256; // threads per CTA, every kernel here
constexpr unsigned kWarps = kThreads / 32;
// At least 4 resident CTAs (32 warps, 64 KB of 16-byte loads in flight per
// SM): caps registers at 64; without it ptxas settles on 48 and spills the
// span's clock and counters to the stack.
constexpr unsigned kMinCtas = 4;
constexpr unsigned kUnroll = 4; // independent 16-byte loads in flight per lane
constexpr unsigned kFull = 0xffffffffu;

// Even split of `total` over `parts`: where part k starts (k == parts: total).
// The same formula as cbt_split_begin() in kernels_impl.h, so CTA k of a
// launch and emulated CTA k of the C reference own the same items. 32-bit:
// a 64-bit division is a called subroutine on the GPU (stack, spills).
__host__ __device__ __forceinline__ uint32_t split_begin(uint32_t total, uint32_t parts,
                                                         uint32_t k)
{
    uint32_t base = total / parts, rem = total % parts;
    return k * base + (k < rem ? k : rem);
}

// ---- copies ------------------------------------------------------------------

// Stream = false: a source read-only for the whole kernel, through the
// non-coherent (texture) path. Stream = true: mapped host memory read once,
// evict-first.
template <typename V, bool Stream> __device__ __forceinline__ V load(const V *p)
{
    if constexpr (Stream)
        return __ldcs(p);
    else
        return __ldg(p);
}

__device__ __forceinline__ void st_global(uint4 *p, uint4 v)
{
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
}
__device__ __forceinline__ void st_global(uint2 *p, uint2 v)
{
    asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(v.x), "r"(v.y) : "memory");
}
__device__ __forceinline__ void st_global(unsigned int *p, unsigned int v)
{
    asm volatile("st.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void st_global(unsigned short *p, unsigned short v)
{
    asm volatile("st.global.u16 [%0], %1;" ::"l"(p), "h"(v) : "memory");
}
__device__ __forceinline__ void st_global(unsigned char *p, unsigned char v)
{
    asm volatile("st.global.u8 [%0], %1;" ::"l"(p), "r"((unsigned int)v) : "memory");
}

// `n` units of V from src to dst by `nthr` cooperating threads (a warp or a
// CTA), thread `t` of them; kUnroll loads in flight before the first store.
// Stores go out as st.global (STG): the pointers travel through shuffles and
// pointer arrays as integers, so a plain C++ store compiles to a generic ST.
template <typename V, bool Stream>
__device__ __forceinline__ void copy_units(void *dst, const void *src, uint32_t n, unsigned t,
                                           unsigned nthr)
{
    const V *s = static_cast<const V *>(src);
    V *d = static_cast<V *>(dst);
    uint32_t i = t;
#pragma unroll 1
    for (; i + nthr * (kUnroll - 1) < n; i += nthr * kUnroll) {
        V v[kUnroll];
#pragma unroll
        for (unsigned k = 0; k < kUnroll; k++)
            v[k] = load<V, Stream>(s + i + nthr * k);
#pragma unroll
        for (unsigned k = 0; k < kUnroll; k++)
            st_global(d + i + nthr * k, v[k]);
    }
#pragma unroll 1
    for (; i < n; i += nthr)
        st_global(d + i, load<V, Stream>(s + i));
}

// `bytes` (< 2^31) from src to dst at the widest width both pointers and the
// length allow: 16-byte vectors on the normal path (cudaMalloc'd buffers, rows
// of a multiple of 16 bytes), narrower only for odd geometry or pointers.
template <bool Stream>
__device__ __forceinline__ void copy_bytes(void *dst, const void *src, uint32_t bytes, unsigned t,
                                           unsigned nthr)
{
    uint32_t a = (uint32_t)(uintptr_t)dst | (uint32_t)(uintptr_t)src | bytes;
    if (!(a & 15u))
        copy_units<uint4, Stream>(dst, src, bytes >> 4, t, nthr);
    else if (!(a & 7u))
        copy_units<uint2, Stream>(dst, src, bytes >> 3, t, nthr);
    else if (!(a & 3u))
        copy_units<unsigned int, Stream>(dst, src, bytes >> 2, t, nthr);
    else if (!(a & 1u))
        copy_units<unsigned short, Stream>(dst, src, bytes >> 1, t, nthr);
    else
        copy_units<unsigned char, Stream>(dst, src, bytes, t, nthr);
}

// ---- re-RoPE -----------------------------------------------------------------

template <int DT> struct Elem;
template <> struct Elem<CBT_DT_F32> {
    using T = float;
    static __device__ __forceinline__ float to(T v) { return v; }
    static __device__ __forceinline__ T from(float v) { return v; }
};
template <> struct Elem<CBT_DT_F16> {
    using T = __half;
    static __device__ __forceinline__ float to(T v) { return __half2float(v); }
    static __device__ __forceinline__ T from(float v) { return __float2half_rn(v); }
};
template <> struct Elem<CBT_DT_BF16> {
    using T = __nv_bfloat16;
    static __device__ __forceinline__ float to(T v) { return __bfloat162float(v); }
    static __device__ __forceinline__ T from(float v) { return __float2bfloat16_rn(v); }
};

struct RopeDev {
    const void *cos_sin;
    const int32_t *old_positions;
    uint32_t rot_dim;
    uint32_t max_position;
    uint32_t num_heads;
    uint32_t head_dim;
    int neox;
};

__device__ __forceinline__ bool rope_pos_ok(const RopeDev &r, int p, int q)
{
    return p >= 0 && q >= 0 && (uint32_t)p < r.max_position && (uint32_t)q < r.max_position;
}

// One pair rotated from p to q, rounded like the C reference: every product
// and sum rounded to fp32 on its own (__fmul_rn / __fadd_rn are never fused).
__device__ __forceinline__ void rot_pair(float x1, float x2, float cp, float sp, float cq,
                                         float sq, float &z1, float &z2)
{
    float y1 = __fadd_rn(__fmul_rn(x1, cp), __fmul_rn(x2, sp));
    float y2 = __fsub_rn(__fmul_rn(x2, cp), __fmul_rn(x1, sp));
    z1 = __fsub_rn(__fmul_rn(y1, cq), __fmul_rn(y2, sq));
    z2 = __fadd_rn(__fmul_rn(y1, sq), __fmul_rn(y2, cq));
}

// The warp rotates one token's keys [num_heads][head_dim] from old position p
// to new position q (both inside the cache). Lane j takes pairs j, j+32, ...
// of every head, loading their four cos/sin values once for all heads; four
// heads' pairs are loaded before any is stored. dst may equal src (in place:
// each element is read and written by one lane). With copy_rest the dims
// past rot_dim are copied (dst != src).
template <int DT>
__device__ __forceinline__ void warp_rope_row(void *dst, const void *src, const RopeDev &r, int p,
                                              int q, unsigned lane, bool copy_rest)
{
    using E = Elem<DT>;
    using T = typename E::T;
    const T *s = static_cast<const T *>(src);
    T *d = static_cast<T *>(dst);
    const T *cs = static_cast<const T *>(r.cos_sin);
    const uint32_t half = r.rot_dim >> 1, hd = r.head_dim, nh = r.num_heads;
    const T *rp = cs + (uint64_t)p * r.rot_dim;
    const T *rq = cs + (uint64_t)q * r.rot_dim;
    for (uint32_t j = lane; j < half; j += 32u) {
        const float cp = E::to(__ldg(rp + j)), sp = E::to(__ldg(rp + half + j));
        const float cq = E::to(__ldg(rq + j)), sq = E::to(__ldg(rq + half + j));
        const uint64_t o1 = r.neox ? j : 2u * j;
        const uint64_t o2 = r.neox ? j + half : 2u * j + 1u;
        uint32_t h = 0;
        for (; h + 4u <= nh; h += 4u) {
            float x1[4], x2[4];
#pragma unroll
            for (unsigned k = 0; k < 4; k++) {
                x1[k] = E::to(s[(uint64_t)(h + k) * hd + o1]);
                x2[k] = E::to(s[(uint64_t)(h + k) * hd + o2]);
            }
#pragma unroll
            for (unsigned k = 0; k < 4; k++) {
                float z1, z2;
                rot_pair(x1[k], x2[k], cp, sp, cq, sq, z1, z2);
                d[(uint64_t)(h + k) * hd + o1] = E::from(z1);
                d[(uint64_t)(h + k) * hd + o2] = E::from(z2);
            }
        }
        for (; h < nh; h++) {
            float z1, z2;
            rot_pair(E::to(s[(uint64_t)h * hd + o1]), E::to(s[(uint64_t)h * hd + o2]), cp, sp, cq,
                     sq, z1, z2);
            d[(uint64_t)h * hd + o1] = E::from(z1);
            d[(uint64_t)h * hd + o2] = E::from(z2);
        }
    }
    if (copy_rest && r.rot_dim < hd)
        for (uint32_t h = 0; h < nh; h++)
            for (uint32_t e = r.rot_dim + lane; e < hd; e += 32u)
                d[(uint64_t)h * hd + e] = s[(uint64_t)h * hd + e];
}

// ---- host side -----------------------------------------------------------------

// Resident CTAs of kThreads for `fn` on one SM (cached per kernel: the
// answer depends on the kernel and the architecture only).
inline int resident_per_sm(const void *fn, std::atomic<int> &cache)
{
    int v = cache.load(std::memory_order_relaxed);
    if (v > 0)
        return v;
    int occ = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fn, (int)kThreads, 0) != cudaSuccess ||
        occ <= 0) {
        (void)cudaGetLastError();
        occ = 1;
    }
    cache.store(occ, std::memory_order_relaxed);
    return occ;
}

// Multiprocessors of the current device (132 on an H200), 0 on failure.
inline int sm_count()
{
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
        return 0;
    return n;
}

// Grid for `bytes` of work: every CTA resident at once (an even static split
// then finishes together: no tail wave), but no CTA under `min_cta_bytes`.
inline uint32_t pick_grid(uint64_t bytes, uint64_t min_cta_bytes, int sms, int per_sm)
{
    uint64_t by_work = (bytes + min_cta_bytes - 1) / min_cta_bytes;
    uint64_t resident = (uint64_t)(sms > 0 ? sms : 1) * (uint64_t)(per_sm > 0 ? per_sm : 1);
    uint64_t g = by_work < resident ? by_work : resident;
    return (uint32_t)(g ? g : 1);
}

inline bool span_ok(const cbt_kspan &s)
{
    return !s.ring || s.mode == CBT_REC_CTA || s.mode == CBT_REC_LAUNCH;
}

inline cbt_status launch_status()
{
    return cudaGetLastError() == cudaSuccess ? CBT_OK : CBT_ERR_CUDA;
}

} // namespace cbtk

#endif // CBT_KERNELS_DEV_CUH
