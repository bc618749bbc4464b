/* kernels/cuda_none.c — the CUDA entry points of a build without CUDA: each
 * reports CBT_ERR_UNSUPPORTED (the C references still work). */
#include "cbt/kv_kernels.h"

cbt_status cbt_scatter_cuda(const cbt_kv_geom *g, const cbt_scatter_args *a, cbt_scatter_dir dir,
                            cbt_kspan span, uint32_t n_ctas, void *stream)
{
    (void)g, (void)a, (void)dir, (void)span, (void)n_ctas, (void)stream;
    return CBT_ERR_UNSUPPORTED;
}

cbt_status cbt_rerope_cuda(void *keys, uint32_t n_tokens, uint32_t num_heads, uint32_t head_dim,
                           cbt_dtype dtype, const cbt_rope *rope, const int32_t *new_positions,
                           cbt_kspan span, void *stream)
{
    (void)keys, (void)n_tokens, (void)num_heads, (void)head_dim, (void)dtype, (void)rope;
    (void)new_positions, (void)span, (void)stream;
    return CBT_ERR_UNSUPPORTED;
}

cbt_status cbt_l2_load_cuda_kernel(void *const *dst, const void *const *src, uint32_t n_chunks,
                                   uint64_t chunk_bytes, cbt_kspan span, void *stream)
{
    (void)dst, (void)src, (void)n_chunks, (void)chunk_bytes, (void)span, (void)stream;
    return CBT_ERR_UNSUPPORTED;
}

cbt_status cbt_l2_load_cuda_memcpy(void *const *dst, const void *const *src, uint32_t n_chunks,
                                   uint64_t chunk_bytes, void *stream)
{
    (void)dst, (void)src, (void)n_chunks, (void)chunk_bytes, (void)stream;
    return CBT_ERR_UNSUPPORTED;
}
