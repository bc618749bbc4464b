/* cli/demo_gpu.h — owns the demo's GPU backend: the same workload as the
 * CPU backend's, on a CUDA stream with device buffers and the CUDA kernels
 * (cbt/kv_kernels.h). Built with CUDA only; elsewhere demo_gpu_present() is 0. */
#ifndef CBT_HOST_DEMO_GPU_H
#define CBT_HOST_DEMO_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "cbt.h"
#include "cbt/kv_kernels.h"

typedef struct demo_dev demo_dev;

/* 1 when this build has CUDA and a device is present. */
int demo_gpu_present(void);

/* Device copies of the worker's buffers (chunk, each paged layer, cos/sin,
 * positions, old positions), a pinned mapped staging area filled from
 * `staging`, and a CUDA stream wrapped as a cbt stream. Returns 0 or -1
 * (a CUDA error, printed). */
int demo_gpu_setup(demo_dev **out, const cbt_kv_geom *g, const void *chunk, uint64_t chunk_bytes,
                   const void *staging, uint64_t layer_bytes, const void *cos_sin,
                   uint64_t cs_bytes, const int32_t *positions, const int32_t *old_positions,
                   uint32_t n_pos, uint32_t n_table, uint32_t max_chunks, uint64_t chunk_stride,
                   cbt_stream **stream_out);

/* L2 load of `chunks` chunks of `chunk_bytes` from the staging area into the
 * device chunk buffer, by the zero-copy kernel. */
int demo_gpu_l2(demo_dev *d, uint32_t chunks, uint64_t chunk_bytes, cbt_kspan span);

/* The scatter `a` describes with the worker's host pointers, run on the
 * device copies: `pos_offset` is a->positions - the worker's positions,
 * `table` the request's block table (copied to the device on the stream). */
int demo_gpu_scatter(demo_dev *d, const cbt_kv_geom *g, const cbt_scatter_args *a,
                     uint32_t pos_offset, const int32_t *table, cbt_scatter_dir dir,
                     cbt_kspan span);

void demo_gpu_free(demo_dev *d);

#endif /* CBT_HOST_DEMO_GPU_H */
