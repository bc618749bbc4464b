/* tests/gpu_testutil.h — what the GPU tests share: find a device or say why
 * not. Header-only, so only the tests built with CUDA include the runtime. */
#ifndef CBT_GPU_TESTUTIL_H
#define CBT_GPU_TESTUTIL_H

#include <stdio.h>

#include <cuda_runtime_api.h>

/* 1 when a CUDA device is present; otherwise print "SKIP: <name> needs a
 * CUDA device (<reason>)" and return 0 (the caller returns 77: skipped). */
static inline int tu_gpu_or_skip(const char *name)
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err == cudaSuccess && n > 0)
        return 1;
    printf("SKIP: %s needs a CUDA device (%s)\n", name,
           err != cudaSuccess ? cudaGetErrorString(err) : "no devices");
    return 0;
}

#endif /* CBT_GPU_TESTUTIL_H */
