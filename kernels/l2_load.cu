// kernels/l2_load.cu — owns the CUDA L2 loads: whole 256-token chunks from
// the storage tier's pinned host landing buffer into device chunk buffers.
//
//   cbt_l2_load_cuda_kernel   zero-copy: CTAs read the mapped host pages
//                             directly over PCIe (16-byte streaming loads,
//                             4 in flight per thread) and write device memory
//   cbt_l2_load_cuda_memcpy   one cudaMemcpyAsync (copy engine) per chunk
//
// Kernel launch: each chunk is cut into `slices` equal 16-byte-multiple
// slices; CTA w copies slice w % slices of chunk w / slices with all 256
// threads. Ring: the CTA of slice 0 counts the chunk (tokens = chunks), every
// CTA adds its bytes (user = bytes), counted by thread 0.
#include "kernels_dev.cuh"

namespace {

using namespace cbtk;

struct L2Dev {
    void *const *dst;
    const void *const *src;
    uint64_t chunk_bytes;
    uint64_t slice_bytes;
    uint32_t slices; // per chunk
};

__global__ void __launch_bounds__(kThreads, kMinCtas) l2_load_kernel(const cbt_kspan span, const L2Dev p)
{
    CBT_KERNEL_SPAN_BEGIN(span);
    const uint32_t c = blockIdx.x / p.slices, s = blockIdx.x % p.slices;
    const uint64_t off = (uint64_t)s * p.slice_bytes;
    const uint64_t left = p.chunk_bytes - off;
    const uint64_t len = left < p.slice_bytes ? left : p.slice_bytes;
    unsigned char *d = static_cast<unsigned char *>(p.dst[c]) + off;
    const unsigned char *src = static_cast<const unsigned char *>(p.src[c]) + off;
    copy_bytes<true>(d, src, (uint32_t)len, threadIdx.x, kThreads);
    const bool lead = threadIdx.x == 0;
    CBT_KERNEL_SPAN_END_USER(span, lead && s == 0 ? 1u : 0u, lead ? len : 0u);
}

std::atomic<int> g_occ;

} // namespace

extern "C" cbt_status cbt_l2_load_cuda_kernel(void *const *dst, const void *const *src,
                                              uint32_t n_chunks, uint64_t chunk_bytes,
                                              cbt_kspan span, void *stream)
{
    if (!dst || !src || !n_chunks || !chunk_bytes || !span_ok(span))
        return CBT_ERR_INVAL;
    // slices: enough CTAs to keep every SM busy, none under 16 KB nor over
    // 1 GiB (a CTA's byte count travels through the ring as 32 bits, and a
    // CTA copies with 32-bit indices)
    const int sms = sm_count();
    const uint64_t resident = (uint64_t)(sms > 0 ? sms : 1) *
                              (uint64_t)resident_per_sm(reinterpret_cast<const void *>(&l2_load_kernel), g_occ);
    uint64_t slices = (resident + n_chunks - 1) / n_chunks;
    const uint64_t max_slices = (chunk_bytes + (16u << 10) - 1) / (16u << 10);
    const uint64_t min_slices = (chunk_bytes + (1ull << 30) - 1) >> 30;
    if (slices > max_slices)
        slices = max_slices;
    if (slices < min_slices)
        slices = min_slices;
    if (slices == 0)
        slices = 1;
    uint64_t slice_bytes = (chunk_bytes + slices - 1) / slices;
    slice_bytes = (slice_bytes + 15u) & ~15ull; // slices start 16-byte aligned
    slices = (chunk_bytes + slice_bytes - 1) / slice_bytes;
    const uint64_t grid = slices * n_chunks;
    if (grid > (uint64_t)INT32_MAX)
        return CBT_ERR_INVAL;
    L2Dev p{dst, src, chunk_bytes, slice_bytes, (uint32_t)slices};
    l2_load_kernel<<<(unsigned)grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(span, p);
    return launch_status();
}

extern "C" cbt_status cbt_l2_load_cuda_memcpy(void *const *dst, const void *const *src,
                                              uint32_t n_chunks, uint64_t chunk_bytes, void *stream)
{
    if (!dst || !src || !n_chunks || !chunk_bytes)
        return CBT_ERR_INVAL;
    for (uint32_t i = 0; i < n_chunks; i++)
        if (!dst[i] || !src[i])
            return CBT_ERR_INVAL;
    auto st = static_cast<cudaStream_t>(stream);
    for (uint32_t i = 0; i < n_chunks; i++)
        if (cudaMemcpyAsync(dst[i], src[i], (size_t)chunk_bytes, cudaMemcpyHostToDevice, st) !=
            cudaSuccess)
            return CBT_ERR_CUDA;
    return CBT_OK;
}
