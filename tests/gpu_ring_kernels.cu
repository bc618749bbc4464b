// tests/gpu_ring_kernels.cu — an instrumented stand-in kernel for the GPU ring
// tests: each CTA spins for a while on %globaltimer (capped in clock64()
// cycles, so a stalled timer cannot hang it), then reports `tokens` tokens
// per thread-0 and `shifted` user value, through CBT_KERNEL_SPAN. Also the
// measured step of %globaltimer (test_gpu_kernels, test_gpu_ring) and an
// empty kernel (test_gpu_kernels: the launch overhead inside an event bracket).
#include <cstdint>
#include <cuda_runtime.h>

#include "cbt/kernel_span.h"
#include "gpu_testutil.h"

__global__ void ring_test_kernel(cbt_kspan span, unsigned long long spin_ns, unsigned int tokens,
                                 unsigned int shifted)
{
    CBT_KERNEL_SPAN_BEGIN(span);
    unsigned long long t0 = cbt_dev_clock();
    long long c0 = clock64();
    const long long cap = (long long)tu_spin_cycle_cap(spin_ns);
    while (cbt_dev_clock() - t0 < spin_ns && clock64() - c0 < cap)
        ;
    bool lead = threadIdx.x == 0;
    CBT_KERNEL_SPAN_END_USER(span, lead ? tokens : 0u, lead ? shifted : 0u);
}

extern "C" int cbt_test_ring_kernel(void *stream, cbt_kspan span, unsigned int ctas,
                                    unsigned int threads, unsigned long long spin_ns,
                                    unsigned int tokens, unsigned int shifted)
{
    ring_test_kernel<<<ctas, threads, 0, static_cast<cudaStream_t>(stream)>>>(span, spin_ns, tokens,
                                                                               shifted);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

// The smallest non-zero step of %globaltimer seen by one thread in 4096 reads
// (~0ull: it never moved). A fixed number of reads: it cannot spin.
__global__ void gtimer_step_kernel(unsigned long long *out)
{
    unsigned long long prev = cbt_dev_clock(), best = ~0ull;
    for (int i = 0; i < 4096; i++) {
        unsigned long long t = cbt_dev_clock();
        if (t != prev && t - prev < best)
            best = t - prev;
        prev = t;
    }
    *out = best;
}

extern "C" int cbt_test_gtimer_step(unsigned long long *step_ns)
{
    unsigned long long *d = nullptr;
    if (cudaMalloc(&d, sizeof *d) != cudaSuccess)
        return -1;
    gtimer_step_kernel<<<1, 1>>>(d);
    bool ok = cudaGetLastError() == cudaSuccess &&
              cudaMemcpy(step_ns, d, sizeof *d, cudaMemcpyDeviceToHost) == cudaSuccess;
    cudaFree(d);
    return ok ? 0 : -1;
}

// Does nothing: its CUDA-event bracket is the launch and event overhead alone.
__global__ void empty_kernel(void) {}

extern "C" int cbt_test_empty_kernel(void *stream, unsigned int ctas, unsigned int threads)
{
    empty_kernel<<<ctas, threads, 0, static_cast<cudaStream_t>(stream)>>>();
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
