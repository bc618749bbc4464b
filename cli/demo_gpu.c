/* cli/demo_gpu.c — owns the demo's GPU backend (see demo_gpu.h). */
#include "demo_gpu.h"

#include <stdio.h>
#include <stdlib.h>

#ifdef CBT_WITH_CUDA
#include <cuda_runtime_api.h>

#define DEMO_MAX_LAYERS 64

struct demo_dev {
    cudaStream_t cs;
    void *chunk;
    void *paged[DEMO_MAX_LAYERS];
    void **paged_arr; /* device array of the layer pointers */
    void *cos_sin;
    int32_t *positions, *old_positions, *table;
    void *staging_host, *staging_dev; /* pinned, mapped */
    void **l2_dst, **l2_src;          /* device arrays */
    uint32_t n_table, layers;
};

static int ok(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 1;
    fprintf(stderr, "cbt demo: --gpu: %s: %s\n", what, cudaGetErrorString(e));
    return 0;
}

int demo_gpu_present(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n > 0;
}

int demo_gpu_setup(demo_dev **out, const cbt_kv_geom *g, const void *chunk, uint64_t chunk_bytes,
                   const void *staging, uint64_t layer_bytes, const void *cos_sin,
                   uint64_t cs_bytes, const int32_t *positions, const int32_t *old_positions,
                   uint32_t n_pos, uint32_t n_table, uint32_t max_chunks, uint64_t chunk_stride,
                   cbt_stream **stream_out)
{
    if (g->num_layers > DEMO_MAX_LAYERS || max_chunks > 64)
        return -1;
    demo_dev *d = calloc(1, sizeof *d);
    if (!d)
        return -1;
    *out = d;
    d->n_table = n_table;
    d->layers = g->num_layers;
    size_t pb = (size_t)n_pos * sizeof(int32_t);
    if (!ok(cudaStreamCreateWithFlags(&d->cs, cudaStreamNonBlocking), "stream") ||
        !ok(cudaMalloc(&d->chunk, chunk_bytes), "chunk buffer") ||
        !ok(cudaMemcpy(d->chunk, chunk, chunk_bytes, cudaMemcpyHostToDevice), "chunk copy") ||
        !ok(cudaMalloc((void **)&d->paged_arr, g->num_layers * sizeof(void *)), "layer table") ||
        !ok(cudaMalloc(&d->cos_sin, cs_bytes), "cos/sin") ||
        !ok(cudaMemcpy(d->cos_sin, cos_sin, cs_bytes, cudaMemcpyHostToDevice), "cos/sin copy") ||
        !ok(cudaMalloc((void **)&d->positions, pb), "positions") ||
        !ok(cudaMalloc((void **)&d->old_positions, pb), "old positions") ||
        !ok(cudaMalloc((void **)&d->table, n_table * sizeof(int32_t)), "block table") ||
        !ok(cudaMemcpy(d->positions, positions, pb, cudaMemcpyHostToDevice), "positions copy") ||
        !ok(cudaMemcpy(d->old_positions, old_positions, pb, cudaMemcpyHostToDevice), "copy") ||
        !ok(cudaHostAlloc(&d->staging_host, chunk_bytes, cudaHostAllocMapped), "staging") ||
        !ok(cudaHostGetDevicePointer(&d->staging_dev, d->staging_host, 0), "staging map") ||
        !ok(cudaMalloc((void **)&d->l2_dst, max_chunks * sizeof(void *)), "l2 table") ||
        !ok(cudaMalloc((void **)&d->l2_src, max_chunks * sizeof(void *)), "l2 table"))
        return -1;
    for (uint32_t l = 0; l < g->num_layers; l++)
        if (!ok(cudaMalloc(&d->paged[l], layer_bytes), "paged layer") ||
            !ok(cudaMemset(d->paged[l], 0, layer_bytes), "paged clear"))
            return -1;
    void *dst[64], *src[64];
    for (uint32_t k = 0; k < max_chunks; k++) {
        dst[k] = (char *)d->chunk + k * chunk_stride;
        src[k] = (char *)d->staging_dev + k * chunk_stride;
    }
    for (uint64_t i = 0; i < chunk_bytes; i++)
        ((unsigned char *)d->staging_host)[i] = ((const unsigned char *)staging)[i];
    if (!ok(cudaMemcpy(d->paged_arr, d->paged, g->num_layers * sizeof(void *),
                       cudaMemcpyHostToDevice), "layer table copy") ||
        !ok(cudaMemcpy(d->l2_dst, dst, max_chunks * sizeof(void *), cudaMemcpyHostToDevice), "l2") ||
        !ok(cudaMemcpy(d->l2_src, src, max_chunks * sizeof(void *), cudaMemcpyHostToDevice), "l2"))
        return -1;
    cbt_status st = cbt_stream_cuda_create(d->cs, stream_out);
    if (st != CBT_OK) {
        fprintf(stderr, "cbt demo: --gpu: stream: %s\n", cbt_strerror(st));
        return -1;
    }
    return 0;
}

int demo_gpu_l2(demo_dev *d, uint32_t chunks, uint64_t chunk_bytes, cbt_kspan span)
{
    cbt_status st = cbt_l2_load_cuda_kernel(d->l2_dst, (const void *const *)d->l2_src, chunks,
                                            chunk_bytes, span, d->cs);
    if (st != CBT_OK)
        fprintf(stderr, "cbt demo: --gpu: l2 load: %s\n", cbt_strerror(st));
    return st == CBT_OK ? 0 : -1;
}

int demo_gpu_scatter(demo_dev *d, const cbt_kv_geom *g, const cbt_scatter_args *a,
                     uint32_t pos_offset, const int32_t *table, cbt_scatter_dir dir,
                     cbt_kspan span)
{
    if (!ok(cudaMemcpyAsync(d->table, table, d->n_table * sizeof(int32_t), cudaMemcpyHostToDevice,
                            d->cs), "block table upload"))
        return -1;
    cbt_rope rope;
    cbt_scatter_args da = *a;
    da.chunk = d->chunk;
    da.paged = d->paged_arr;
    da.positions = d->positions + pos_offset;
    da.block_table = d->table;
    if (a->rope) {
        rope = *a->rope;
        rope.cos_sin = d->cos_sin;
        rope.old_positions = d->old_positions + pos_offset;
        da.rope = &rope;
    }
    cbt_status st = cbt_scatter_cuda(g, &da, dir, span, 0, d->cs);
    if (st != CBT_OK)
        fprintf(stderr, "cbt demo: --gpu: scatter: %s\n", cbt_strerror(st));
    return st == CBT_OK ? 0 : -1;
}

void demo_gpu_free(demo_dev *d)
{
    if (!d)
        return;
    if (d->cs)
        cudaStreamSynchronize(d->cs);
    cudaFree(d->chunk);
    for (uint32_t l = 0; l < d->layers; l++)
        cudaFree(d->paged[l]);
    cudaFree(d->paged_arr);
    cudaFree(d->cos_sin);
    cudaFree(d->positions);
    cudaFree(d->old_positions);
    cudaFree(d->table);
    cudaFree(d->l2_dst);
    cudaFree(d->l2_src);
    if (d->staging_host)
        cudaFreeHost(d->staging_host);
    if (d->cs)
        cudaStreamDestroy(d->cs);
    free(d);
}

#else /* no CUDA in this build */

int demo_gpu_present(void) { return 0; }
int demo_gpu_setup(demo_dev **out, const cbt_kv_geom *g, const void *chunk, uint64_t chunk_bytes,
                   const void *staging, uint64_t layer_bytes, const void *cos_sin,
                   uint64_t cs_bytes, const int32_t *positions, const int32_t *old_positions,
                   uint32_t n_pos, uint32_t n_table, uint32_t max_chunks, uint64_t chunk_stride,
                   cbt_stream **stream_out)
{
    (void)out, (void)g, (void)chunk, (void)chunk_bytes, (void)staging, (void)layer_bytes;
    (void)cos_sin, (void)cs_bytes, (void)positions, (void)old_positions, (void)n_pos;
    (void)n_table, (void)max_chunks, (void)chunk_stride, (void)stream_out;
    return -1;
}
int demo_gpu_l2(demo_dev *d, uint32_t chunks, uint64_t chunk_bytes, cbt_kspan span)
{
    (void)d, (void)chunks, (void)chunk_bytes, (void)span;
    return -1;
}
int demo_gpu_scatter(demo_dev *d, const cbt_kv_geom *g, const cbt_scatter_args *a,
                     uint32_t pos_offset, const int32_t *table, cbt_scatter_dir dir,
                     cbt_kspan span)
{
    (void)d, (void)g, (void)a, (void)pos_offset, (void)table, (void)dir, (void)span;
    return -1;
}
void demo_gpu_free(demo_dev *d) { (void)d; }

#endif
