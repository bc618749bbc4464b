// kernels/scatter.cu — owns the CUDA scatter: token-granular moves between
// LMCache's chunk layout and vLLM's paged layout, both directions, with the
// keys optionally re-RoPE'd on the way in (retrieve only).
//
// Work: R = num_layers * 2 * n_tokens rows, a row being one (layer, K|V,
// token) vector of hidden elements (2 KB for 8 heads x 128 in bf16), numbered
// r = (layer * 2 + kv) * n_tokens + i. CTA c owns an even, contiguous share
// of the rows and each of its 8 warps an even share of that (so a grid no
// larger than what is resident finishes together, with no tail wave). A warp
// takes its rows 32 at a time: lane k decodes row k, computes its slot on
// the device (positions -> block_table -> slot, with the guards) and its two
// row addresses; then the warp walks the 32 rows, broadcasting each row's
// addresses with a shuffle and copying it with 16-byte loads (4 in flight per
// lane, a 2 KB row in one go) — no index math per element. A token is
// counted (scattered, shifted) by the lane that decodes its layer-0 K row, so
// the ring's tokens == scattered and user == n_shifted exactly.
#include "kernels_dev.cuh"

namespace {

using namespace cbtk;

struct ScatterDev {
    unsigned char *chunk;
    unsigned char *const *paged;
    const int32_t *positions;
    const int32_t *block_table;
    uint32_t rows;  // num_layers * 2 * n_tokens (< 2^31: checked)
    uint64_t slots; // num_blocks * block_size (per layer, per K|V)
    uint32_t n_tokens;
    uint32_t n_table;
    uint32_t chunk_offset;
    uint32_t chunk_tokens;
    uint32_t num_layers;
    uint32_t block_size;
    uint32_t row_bytes;
    int store;
    RopeDev rope; // cos_sin == nullptr: no re-RoPE
};

// RDT < 0: plain copies; otherwise the key dtype of a fused re-RoPE.
template <int RDT>
__global__ void __launch_bounds__(kThreads, kMinCtas) scatter_kernel(const cbt_kspan span, const ScatterDev p)
{
    CBT_KERNEL_SPAN_BEGIN(span);
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const uint32_t c0 = split_begin(p.rows, gridDim.x, blockIdx.x);
    const uint32_t c1 = split_begin(p.rows, gridDim.x, blockIdx.x + 1u);
    const uint32_t r0 = c0 + split_begin(c1 - c0, kWarps, warp);
    const uint32_t r1 = c0 + split_begin(c1 - c0, kWarps, warp + 1u);
    unsigned tokens = 0, shifted = 0;

    for (uint32_t base = r0; base < r1; base += 32u) {
        // lane k: where row base + k goes (dst == nullptr: dropped)
        const unsigned char *src = nullptr;
        unsigned char *dst = nullptr;
        int oldp = 0, newp = -1; // newp >= 0: re-RoPE this row
        const uint32_t r = base + lane;
        if (r < r1) {
            const uint32_t q = r / p.n_tokens, i = r - q * p.n_tokens;
            const uint32_t kv = q & 1u, l = q >> 1;
            const int32_t pos = p.positions[i];
            int64_t slot = -1;
            bool shift = false;
            if (pos >= 0 && (uint32_t)pos / p.block_size < p.n_table) {
                const int32_t bid = p.block_table[(uint32_t)pos / p.block_size];
                if (bid >= 0) {
                    slot = (int64_t)bid * p.block_size + (uint32_t)pos % p.block_size;
                    if ((uint64_t)slot >= p.slots)
                        slot = -1;
                }
            }
            if (RDT >= 0 && slot >= 0) {
                const int32_t old = p.rope.old_positions[i];
                if (old != pos) {
                    if (rope_pos_ok(p.rope, old, pos)) {
                        shift = true;
                        if (kv == 0) {
                            oldp = old;
                            newp = pos;
                        }
                    } else {
                        slot = -1; // cannot be rotated: dropped like the reference
                    }
                }
            }
            if (slot >= 0) {
                if (l == 0 && kv == 0) {
                    tokens++;
                    shifted += shift ? 1u : 0u;
                }
                unsigned char *crow =
                    p.chunk + (((uint64_t)kv * p.num_layers + l) * p.chunk_tokens + p.chunk_offset + i) *
                                  p.row_bytes;
                unsigned char *prow = p.paged[l] + ((uint64_t)kv * p.slots + (uint64_t)slot) * p.row_bytes;
                src = p.store ? prow : crow;
                dst = p.store ? crow : prow;
            }
        }
        const unsigned n = r1 - base < 32u ? r1 - base : 32u;
        for (unsigned k = 0; k < n; k++) {
            auto *d = reinterpret_cast<unsigned char *>(
                __shfl_sync(kFull, reinterpret_cast<unsigned long long>(dst), (int)k));
            const auto *s = reinterpret_cast<const unsigned char *>(
                __shfl_sync(kFull, reinterpret_cast<unsigned long long>(src), (int)k));
            if (d == nullptr)
                continue; // dropped: the destination is left untouched
            if constexpr (RDT >= 0) {
                const int nq = __shfl_sync(kFull, newp, (int)k);
                const int op = __shfl_sync(kFull, oldp, (int)k);
                if (nq >= 0) {
                    warp_rope_row<RDT>(d, s, p.rope, op, nq, lane, true);
                    continue;
                }
            }
            copy_bytes<false>(d, s, p.row_bytes, lane, 32u);
        }
    }
    CBT_KERNEL_SPAN_END_USER(span, tokens, shifted);
}

std::atomic<int> g_occ[4];

template <int RDT>
cbt_status launch(const cbt_kspan &span, const ScatterDev &p, uint32_t n_ctas, cudaStream_t st,
                  std::atomic<int> &occ)
{
    if (n_ctas == 0)
        n_ctas = pick_grid((uint64_t)p.rows * p.row_bytes, 64u << 10, sm_count(),
                           resident_per_sm(reinterpret_cast<const void *>(&scatter_kernel<RDT>), occ));
    scatter_kernel<RDT><<<n_ctas, kThreads, 0, st>>>(span, p);
    return launch_status();
}

} // namespace

extern "C" cbt_status cbt_scatter_cuda(const cbt_kv_geom *g, const cbt_scatter_args *a,
                                       cbt_scatter_dir dir, cbt_kspan span, uint32_t n_ctas,
                                       void *stream)
{
    cbt_status st = cbt_scatter_check(g, a, dir);
    if (st)
        return st;
    if (!span_ok(span) || n_ctas > (uint32_t)INT32_MAX)
        return CBT_ERR_INVAL;
    ScatterDev p{};
    p.chunk = static_cast<unsigned char *>(a->chunk);
    p.paged = reinterpret_cast<unsigned char *const *>(a->paged);
    p.positions = a->positions;
    p.block_table = a->block_table;
    p.n_tokens = a->n_tokens;
    const uint64_t rows = (uint64_t)g->num_layers * 2u * a->n_tokens;
    if (rows > (uint64_t)INT32_MAX) // 32-bit row numbers on the device, with room to step
        return CBT_ERR_INVAL;
    p.rows = (uint32_t)rows;
    p.slots = (uint64_t)g->num_blocks * g->block_size;
    p.n_table = a->n_table;
    p.chunk_offset = a->chunk_offset;
    p.chunk_tokens = g->chunk_tokens;
    p.num_layers = g->num_layers;
    p.block_size = g->block_size;
    p.row_bytes = g->num_heads * g->head_dim * cbt_dtype_size(g->dtype);
    p.store = dir == CBT_SCATTER_STORE;
    p.rope.num_heads = g->num_heads;
    p.rope.head_dim = g->head_dim;
    auto cs = static_cast<cudaStream_t>(stream);
    if (!a->rope)
        return launch<-1>(span, p, n_ctas, cs, g_occ[0]);
    p.rope.cos_sin = a->rope->cos_sin;
    p.rope.old_positions = a->rope->old_positions;
    p.rope.rot_dim = a->rope->rot_dim;
    p.rope.max_position = a->rope->max_position;
    p.rope.neox = a->rope->style == CBT_ROPE_NEOX;
    switch (g->dtype) {
    case CBT_DT_F32: return launch<CBT_DT_F32>(span, p, n_ctas, cs, g_occ[1]);
    case CBT_DT_F16: return launch<CBT_DT_F16>(span, p, n_ctas, cs, g_occ[2]);
    case CBT_DT_BF16: return launch<CBT_DT_BF16>(span, p, n_ctas, cs, g_occ[3]);
    case CBT_DT_U8: break; // refused by cbt_scatter_check
    }
    return CBT_ERR_INVAL;
}
