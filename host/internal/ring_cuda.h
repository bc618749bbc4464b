/* host/internal/ring_cuda.h — owns the seam between the CUDA placements' host
 * code (host/device/ring_cuda_host.c, plain C) and their device code
 * (host/device/ring_cuda.cu, nvcc): the two kernels' launches and the probe's
 * mapped reply slot. The host code calls nothing else of the .cu, so a test
 * links it against a double of these launches and of the CUDA runtime
 * (tests/cuda_double/) and runs it without a GPU.
 */
#ifndef CBT_HOST_INTERNAL_RING_CUDA_H
#define CBT_HOST_INTERNAL_RING_CUDA_H

#include <stdint.h>

#include "cbt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The probe kernel's reply, in mapped host memory: it writes t (its
 * %globaltimer), a system fence, then seq = k (the ping it answers). */
typedef struct cbt_ring_pong {
    volatile unsigned int seq;
    unsigned int pad;
    volatile unsigned long long t;
} cbt_ring_pong;

/* The ping that tells a probe kernel to return. */
#define CBT_RING_PING_STOP 0xffffffffu

/* Launch the one-thread probe kernel on `stream`: it answers pings first ..
 * first + n - 1 written to *ping (device pointers of mapped memory), returns
 * at CBT_RING_PING_STOP, or by itself after 200 ms without a ping.
 * CBT_ERR_CUDA when the launch failed (its error cleared). */
cbt_status cbt_ring_cuda_launch_probe_(void *stream, volatile unsigned int *ping,
                                       cbt_ring_pong *pong, unsigned int first, unsigned int n);
/* Launch the one-thread kernel that writes %globaltimer to *out (a device
 * pointer) on `stream`. CBT_ERR_CUDA when the launch failed. */
cbt_status cbt_ring_cuda_launch_stamp_(void *stream, unsigned long long *out);

#ifdef __cplusplus
}
#endif

#endif /* CBT_HOST_INTERNAL_RING_CUDA_H */
