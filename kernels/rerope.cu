// kernels/rerope.cu — owns the standalone CUDA re-RoPE: keys
// [n_tokens][num_heads * head_dim] rotated in place from old to new
// positions (the same row math as the fused scatter, kernels_dev.cuh).
//
// Launch: CTAs of 8 warps, an even contiguous share of the tokens per CTA
// and per warp; a warp rotates one token row at a time (lane j: pairs j,
// j + 32, ... of every head). Tokens with p == q, or with a position outside
// the cos/sin cache, are not touched. Ring: tokens = keys examined, user =
// keys rotated (n_shifted), each counted by lane 0 of the warp that owns it.
#include "kernels_dev.cuh"
#include "kernels_impl.h"

namespace {

using namespace cbtk;

struct RerDev {
    unsigned char *keys;
    const int32_t *new_positions;
    uint32_t n_tokens;
    uint32_t row_bytes;
    RopeDev rope;
};

template <int DT>
__global__ void __launch_bounds__(kThreads, kMinCtas) rerope_kernel(const cbt_kspan span, const RerDev p)
{
    CBT_KERNEL_SPAN_BEGIN(span);
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const uint32_t c0 = split_begin(p.n_tokens, gridDim.x, blockIdx.x);
    const uint32_t c1 = split_begin(p.n_tokens, gridDim.x, blockIdx.x + 1u);
    const uint32_t t0 = c0 + split_begin(c1 - c0, kWarps, warp);
    const uint32_t t1 = c0 + split_begin(c1 - c0, kWarps, warp + 1u);
    unsigned tokens = 0, shifted = 0;
    for (uint32_t t = t0; t < t1; t++) {
        const int op = p.rope.old_positions[t], nq = p.new_positions[t];
        if (lane == 0)
            tokens++;
        if (op == nq || !rope_pos_ok(p.rope, op, nq))
            continue;
        if (lane == 0)
            shifted++;
        unsigned char *row = p.keys + (uint64_t)t * p.row_bytes;
        warp_rope_row<DT>(row, row, p.rope, op, nq, lane, false);
    }
    CBT_KERNEL_SPAN_END_USER(span, tokens, shifted);
}

std::atomic<int> g_occ[3];

template <int DT>
cbt_status launch(const cbt_kspan &span, const RerDev &p, cudaStream_t st, std::atomic<int> &occ)
{
    uint32_t grid = pick_grid((uint64_t)p.n_tokens * p.row_bytes, 32u << 10, sm_count(),
                              resident_per_sm(reinterpret_cast<const void *>(&rerope_kernel<DT>), occ));
    rerope_kernel<DT><<<grid, kThreads, 0, st>>>(span, p);
    return launch_status();
}

} // namespace

extern "C" cbt_status cbt_rerope_cuda(void *keys, uint32_t n_tokens, uint32_t num_heads,
                                      uint32_t head_dim, cbt_dtype dtype, const cbt_rope *rope,
                                      const int32_t *new_positions, cbt_kspan span, void *stream)
{
    if (!keys || !new_positions || !n_tokens || !num_heads || !head_dim || !rope)
        return CBT_ERR_INVAL;
    const uint32_t es = cbt_dtype_size(dtype);
    if (!es || (uint64_t)num_heads * head_dim * es > (uint64_t)INT32_MAX)
        return CBT_ERR_INVAL;
    if (cbt_rope_check_(rope, dtype, head_dim) != CBT_OK) // same rules as the reference
        return CBT_ERR_INVAL;
    if (!span_ok(span))
        return CBT_ERR_INVAL;
    RerDev p{};
    p.keys = static_cast<unsigned char *>(keys);
    p.new_positions = new_positions;
    p.n_tokens = n_tokens;
    p.row_bytes = num_heads * head_dim * es;
    p.rope.cos_sin = rope->cos_sin;
    p.rope.old_positions = rope->old_positions;
    p.rope.rot_dim = rope->rot_dim;
    p.rope.max_position = rope->max_position;
    p.rope.num_heads = num_heads;
    p.rope.head_dim = head_dim;
    p.rope.neox = rope->style == CBT_ROPE_NEOX;
    auto cs = static_cast<cudaStream_t>(stream);
    switch (dtype) {
    case CBT_DT_F32: return launch<CBT_DT_F32>(span, p, cs, g_occ[0]);
    case CBT_DT_F16: return launch<CBT_DT_F16>(span, p, cs, g_occ[1]);
    case CBT_DT_BF16: return launch<CBT_DT_BF16>(span, p, cs, g_occ[2]);
    case CBT_DT_U8: break; // moved, never rotated
    }
    return CBT_ERR_INVAL;
}
