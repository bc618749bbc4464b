// tests/gpu_spin.cu — a stand-in GPU kernel for the stream tests: one thread
// spins on %globaltimer for a given number of nanoseconds, so a test knows how
// long the stream is busy between two marks. The spin is capped in clock64()
// cycles too (tu_spin_cycle_cap), so a stalled timer cannot hang the test.
#include <cstdint>
#include <cuda_runtime.h>

#include "gpu_testutil.h"

__device__ __forceinline__ uint64_t globaltimer_ns()
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void spin_kernel(uint64_t ns, uint64_t *out)
{
    uint64_t t0 = globaltimer_ns();
    uint64_t t = t0;
    long long c0 = clock64();
    const long long cap = (long long)tu_spin_cycle_cap(ns);
    while (t - t0 < ns && clock64() - c0 < cap)
        t = globaltimer_ns();
    if (out)
        *out = t - t0;
}

extern "C" int cbt_test_launch_spin(void *stream, uint64_t ns)
{
    spin_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(ns, nullptr);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
