/* tests/gpu_testutil.h — what the GPU tests share: find a device or say why
 * not; in CUDA sources, the cycle cap of the test kernels' spin loops.
 * Header-only, so only the tests built with CUDA include the runtime. */
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

#ifdef __CUDACC__
/* A cap in clock64() cycles for a kernel that spins `ns` on %globaltimer, so a
 * timer that stalls (or never ticks) ends the loop instead of hanging the
 * step: the ns at 3 GHz, times 4, plus 1 ms worth, and never more than
 * TU_SPIN_CYCLES_MAX (about 20 s at 3 GHz, 30 s at 2 GHz). */
#define TU_SPIN_CYCLES_MAX 60000000000ull
static __device__ __forceinline__ unsigned long long tu_spin_cycle_cap(unsigned long long ns)
{
    const unsigned long long per_ns = 3ull * 4ull; /* 3 GHz x 4 */
    if (ns >= TU_SPIN_CYCLES_MAX / per_ns)
        return TU_SPIN_CYCLES_MAX;
    unsigned long long c = ns * per_ns + 3000000ull;
    return c < TU_SPIN_CYCLES_MAX ? c : TU_SPIN_CYCLES_MAX;
}
#endif

#endif /* CBT_GPU_TESTUTIL_H */
