/* cbt/kv_kernels.h — the KV-movement kernels cbt instruments, and their C
 * references.
 *
 *   scatter   token-granular move between LMCache's chunk layout and vLLM's
 *             paged layout, slot = block_table[pos / bs] * bs + pos % bs,
 *             both directions (retrieve: chunk -> paged; store: paged ->
 *             chunk), optionally re-RoPE'ing the keys on the way (fused)
 *   rerope    rotate keys of reused tokens from old to new positions
 *   l2_load   bring whole 256-token chunks from a pinned host staging area
 *             (the storage tier's landing buffer) into device chunk buffers
 *
 * Every function checks its arguments and returns a cbt_status; none asserts
 * or exits. The CUDA entry points are in every build of libcbt_kernels: in
 * a build without CUDA (CBT_WITH_CUDA undefined) each returns
 * CBT_ERR_UNSUPPORTED (kernels/cuda_none.c); with CUDA, a launch or copy the
 * CUDA runtime refuses returns CBT_ERR_CUDA, the CUDA error itself logged
 * nowhere (the launch's is read, and so cleared, with cudaGetLastError()).
 * The C references run the same algorithm, as emulated CTAs when given a
 * span, and are what the tests compare the GPU against.
 *
 * Layouts (elements of `dtype`; hidden = num_heads * head_dim):
 *   chunk  [2][num_layers][chunk_tokens][hidden]            K = [0], V = [1]
 *   paged  per layer l: paged[l] -> [2][num_blocks * block_size][hidden]
 * Token i of a call (0 <= i < n_tokens) is chunk row chunk_offset + i and
 * request position positions[i]; it is skipped (counted as dropped) when its
 * block index pos / block_size is >= n_table (the slot-bound guard: the
 * block table does not reach it yet), when block_table[...] < 0, or when the
 * slot is >= num_blocks * block_size.
 *
 * Re-RoPE: cos_sin is [max_position][rot_dim] of `dtype`, the first half of a
 * row cos, the second half sin. A key of a token at old position p (RoPE
 * applied at p) is rotated by -p and then by +q, its new position, on the
 * first rot_dim dims of every head: NeoX pairs (i, i + rot_dim/2), GPT-J
 * pairs (2i, 2i+1). Tokens with p == q are copied untouched; the others
 * count as n_shifted. Arithmetic in fp32.
 *
 * CBT_DISABLE does not affect this header: these kernels are workload code,
 * not instrumentation, and compiling them to no-ops would silently stop a
 * program's KV data movement. The declarations below are visible in every
 * build, and a program that uses the kernels links libcbt_kernels (and
 * through it libcbt) whatever CBT_DISABLE says. Their own CBT_KERNEL_SPAN
 * instrumentation is compiled into libcbt_kernels and costs one branch when
 * no tracer runs (the span's ring is NULL).
 */
#ifndef CBT_KV_KERNELS_H
#define CBT_KV_KERNELS_H

#include <stdint.h>

#include "cbt/api.h"
#include "cbt/status.h"
#include "cbt/ring.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cbt_dtype {
    CBT_DT_F32 = 0, /* 4 bytes */
    CBT_DT_F16 = 1, /* 2 bytes, IEEE half */
    CBT_DT_BF16 = 2, /* 2 bytes, bfloat16 */
    CBT_DT_U8 = 3,  /* 1 byte (fp8 and friends: moved, never rotated) */
} cbt_dtype;

typedef enum cbt_rope_style { CBT_ROPE_NEOX = 0, CBT_ROPE_GPTJ = 1 } cbt_rope_style;

typedef enum cbt_scatter_dir {
    CBT_SCATTER_RETRIEVE = 0, /* chunk -> paged (mp.retrieve) */
    CBT_SCATTER_STORE = 1,    /* paged -> chunk (mp.store) */
} cbt_scatter_dir;

typedef struct cbt_kv_geom {
    uint32_t num_layers;
    uint32_t num_heads;
    uint32_t head_dim;
    cbt_dtype dtype;
    uint32_t block_size;   /* tokens per vLLM block */
    uint32_t num_blocks;   /* blocks per layer in the paged cache */
    uint32_t chunk_tokens; /* rows in the chunk buffer */
} cbt_kv_geom;

typedef struct cbt_rope {
    const void *cos_sin;          /* [max_position][rot_dim] of the key dtype */
    uint32_t rot_dim;             /* even, <= head_dim */
    uint32_t max_position;
    cbt_rope_style style;
    const int32_t *old_positions; /* [n_tokens]: where each key was RoPE'd */
} cbt_rope;

typedef struct cbt_scatter_args {
    void *chunk;                 /* chunk layout buffer */
    void *const *paged;          /* [num_layers] pointers to each layer's paged cache */
    const int32_t *positions;    /* [n_tokens] request positions */
    const int32_t *block_table;  /* [n_table] block ids (negative: unallocated) */
    uint32_t n_table;
    uint32_t n_tokens;
    uint32_t chunk_offset;
    const cbt_rope *rope;        /* NULL: no re-RoPE. Retrieve only. */
} cbt_scatter_args;

/* What a scatter did (the C reference fills it; on the GPU the same counts
 * arrive through the ring: tokens = scattered, user = n_shifted). */
typedef struct cbt_scatter_result {
    uint32_t scattered;   /* tokens written */
    uint32_t dropped;     /* tokens skipped by the guards */
    uint32_t n_shifted;   /* tokens re-RoPE'd */
    uint64_t slot_writes; /* scattered * num_layers * 2 */
} cbt_scatter_result;

/* Bytes of one element of `d`. */
CBT_API uint32_t cbt_dtype_size(cbt_dtype d); /* 0 for an unknown dtype */

/* Check geometry and arguments. CBT_OK or CBT_ERR_INVAL (NULL pointers, zero
 * sizes, rot_dim odd or > head_dim, re-RoPE on a U8 cache or on a store,
 * chunk rows out of range). */
CBT_API cbt_status cbt_scatter_check(const cbt_kv_geom *g, const cbt_scatter_args *a,
                                     cbt_scatter_dir dir);

/* ---- C references (host memory) ------------------------------------------ */

/* The whole scatter on the calling thread. `span` may be NULL; when given,
 * the work runs as `n_ctas` emulated CTAs that stamp the ring through the
 * CBT_KERNEL_SPAN macros. */
CBT_API cbt_status cbt_scatter_ref(const cbt_kv_geom *g, const cbt_scatter_args *a,
                                   cbt_scatter_dir dir, const cbt_kspan *span, uint32_t n_ctas,
                                   cbt_scatter_result *res);

/* Standalone re-RoPE on keys [n_tokens][num_heads * head_dim] in place, from
 * rope->old_positions to new_positions. n_shifted may be NULL. */
CBT_API cbt_status cbt_rerope_ref(void *keys, uint32_t n_tokens, uint32_t num_heads,
                                  uint32_t head_dim, cbt_dtype dtype, const cbt_rope *rope,
                                  const int32_t *new_positions, const cbt_kspan *span,
                                  uint32_t *n_shifted);

/* L2 load: copy chunk_bytes from src[i] to dst[i] for i < n_chunks. */
CBT_API cbt_status cbt_l2_load_ref(void *const *dst, const void *const *src, uint32_t n_chunks,
                                   uint64_t chunk_bytes, const cbt_kspan *span);

/* ---- CUDA (device pointers; arrays of pointers live in device memory) ------ */

/* Scatter on `stream` (a cudaStream_t). Instrumented through `span` (pass a
 * span with ring == NULL for none). n_ctas 0 = chosen from the sizes. */
CBT_API cbt_status cbt_scatter_cuda(const cbt_kv_geom *g, const cbt_scatter_args *a,
                                    cbt_scatter_dir dir, cbt_kspan span, uint32_t n_ctas,
                                    void *stream);

CBT_API cbt_status cbt_rerope_cuda(void *keys, uint32_t n_tokens, uint32_t num_heads,
                                   uint32_t head_dim, cbt_dtype dtype, const cbt_rope *rope,
                                   const int32_t *new_positions, cbt_kspan span, void *stream);

/* Zero-copy: a coalesced kernel reads the mapped host staging area directly
 * (src[] are device-visible pointers to pinned, mapped host memory). */
CBT_API cbt_status cbt_l2_load_cuda_kernel(void *const *dst, const void *const *src,
                                           uint32_t n_chunks, uint64_t chunk_bytes, cbt_kspan span,
                                           void *stream);

/* Batched cudaMemcpyAsync, host-to-device, one per chunk. dst/src are host
 * arrays here (of device and pinned host pointers). Timed by stream marks,
 * not the ring. */
CBT_API cbt_status cbt_l2_load_cuda_memcpy(void *const *dst, const void *const *src,
                                           uint32_t n_chunks, uint64_t chunk_bytes, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* CBT_KV_KERNELS_H */
