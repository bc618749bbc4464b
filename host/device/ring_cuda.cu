// host/device/ring_cuda.cu — owns the device code of the CUDA ring placements:
// the %globaltimer clock-probe kernel, the reference-stamp kernel, and their
// launches (internal/ring_cuda.h). Everything else of those placements (the
// memory, the copy-out, the probe's host side, the frees) is plain C in
// host/device/ring_cuda_host.c, so it is compiled without nvcc and tested
// against a double of the runtime (tests/cuda_double/).
//
// Probe kernel: one thread on the ring's own stream answers pings. The host
// writes ping = k into mapped memory between two tick reads; the kernel,
// spinning on it, reads %globaltimer and writes (k, t) back. A sample's
// bracket is one PCIe round trip. The kernel gives up by itself after 200 ms
// without a ping, so a probe abandoned by a busy GPU never leaves a spinning
// kernel behind for long.
#include <cstdint>
#include <cuda_runtime.h>

extern "C" {
#include "internal/ring_cuda.h"
}

namespace {

constexpr unsigned int kStop = CBT_RING_PING_STOP;

__device__ __forceinline__ unsigned long long gtimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void probe_kernel(volatile unsigned int *ping, cbt_ring_pong *pong, unsigned int first,
                             unsigned int n)
{
    unsigned long long idle_from = gtimer();
    for (unsigned int k = first; k < first + n;) {
        unsigned int p = *ping;
        if (p == kStop)
            return;
        if (p != k) {
            if (gtimer() - idle_from > 200000000ull)
                return; // abandoned
            continue;
        }
        unsigned long long t = gtimer();
        pong->t = t;
        __threadfence_system();
        pong->seq = k;
        idle_from = t;
        k++;
    }
}

__global__ void stamp_kernel(unsigned long long *out) { *out = gtimer(); }

} // namespace

extern "C" cbt_status cbt_ring_cuda_launch_probe_(void *stream, volatile unsigned int *ping,
                                                  cbt_ring_pong *pong, unsigned int first,
                                                  unsigned int n)
{
    probe_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(ping, pong, first, n);
    return cudaGetLastError() == cudaSuccess ? CBT_OK : CBT_ERR_CUDA;
}

extern "C" cbt_status cbt_ring_cuda_launch_stamp_(void *stream, unsigned long long *out)
{
    stamp_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(out);
    return cudaGetLastError() == cudaSuccess ? CBT_OK : CBT_ERR_CUDA;
}
