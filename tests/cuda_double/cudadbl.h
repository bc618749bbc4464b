/* tests/cuda_double/cudadbl.h — the test side of a double of the CUDA runtime,
 * of the two ring kernels' launches and of CUPTI's activity API: exactly the
 * entry points cbt's CUDA host code calls (host/streams/stream_cuda.c,
 * host/device/ring_cuda_host.c, host/device/cupti.c; `nm -u` on those
 * objects), so those files, compiled by the C compiler against the toolkit's
 * headers, link against this instead of libcudart/libcupti and run with no
 * GPU (docs/testing.md).
 *
 * What it proves is the host logic around those calls, never GPU behaviour:
 * an event completes when the test says so, at the time the test gives;
 * "device" memory is host memory; a kernel is a host thread. The GPU script
 * (docs/gpu-script.md) stays the proof of what the device does.
 *
 * Process-wide, as the runtime it stands in for is; guarded by one mutex.
 * Never linked into libcbt.
 */
#ifndef CBT_TESTS_CUDADBL_H
#define CBT_TESTS_CUDADBL_H

#include <stddef.h>
#include <stdint.h>

/* Forget every recorded event (the record log restarts at 0), the call
 * counts and the failure settings; one device. Live allocations stay. */
void cudadbl_reset(void);
/* cudaGetDeviceCount's answer (0: cudaErrorNoDevice). */
void cudadbl_set_devices(int n);

/* ---- events -------------------------------------------------------------------------- */

/* cudaEventRecord calls since the last reset: the next recording gets this number. */
uint32_t cudadbl_records(void);
/* Complete the event of recording `rec` at device time `ms` (what
 * cudaEventElapsedTime subtracts). -1 when there is no such recording, or
 * its event has been recorded again since. */
int cudadbl_complete(uint32_t rec, float ms);
/* Make recording `rec`'s cudaEventQuery fail (cudaErrorLaunchFailure). */
int cudadbl_fail(uint32_t rec);
/* cudaEventSynchronize and cudaStreamSynchronize calls since the last reset.
 * cudaEventSynchronize waits until the test completes (or fails) the event,
 * CUDADBL_SYNC_CAP_MS at most (then cudaErrorNotReady). */
uint32_t cudadbl_syncs(void);
#define CUDADBL_SYNC_CAP_MS 3000

/* ---- memory -------------------------------------------------------------------------- */

/* Allocations (cudaMalloc, cudaHostAlloc, cudaMallocHost) not freed yet. */
uint32_t cudadbl_live_allocs(void);
/* Make the allocation `k` calls from now (0: the next) fail with
 * cudaErrorMemoryAllocation; -1: none. */
void cudadbl_fail_alloc_in(int k);
/* Calls that were refused for a wrong pointer: a cudaFree of host memory,
 * cudaFreeHost of device memory, a copy or memset outside a device
 * allocation, an unknown pointer (each a host-logic bug). */
uint32_t cudadbl_misuse(void);

/* ---- kernels (tests/cuda_double/launch_double.c) ---------------------------------------- */

/* The fake %globaltimer the stamp and probe "kernels" read: CLOCK_MONOTONIC
 * ns plus a fixed offset, so it is neither the host's tick nor unix time. */
uint64_t cudadbl_gtimer(void);
/* Probe kernels launched since the last reset. */
uint32_t cudadbl_probe_launches(void);
/* The probe kernel stops answering (a busy GPU): it returns at once. */
void cudadbl_set_probe_dead(int dead);

/* ---- CUPTI (tests/cuda_double/cupti_double.c) ------------------------------------------- */

/* CUPTI's activity clock (cuptiGetTimestamp): CLOCK_MONOTONIC ns plus
 * another fixed offset. */
uint64_t cudadbl_cupti_now(void);
/* A kernel launch as CUPTI records it, on the calling thread: a fresh
 * correlation id (returned); the CUSTOM0 external correlation pushed on this
 * thread, if any; the runtime-API record of the launch (when its API or the
 * RUNTIME kind is enabled); the kernel's record from `start` to `end`
 * (CUPTI ns) when CONCURRENT_KERNEL is enabled. The records go into a
 * buffer cbt's request callback handed over, delivered at the next flush.
 * 0 when nothing is registered or no buffer could be had. */
uint32_t cudadbl_cupti_launch(const char *name, uint64_t start, uint64_t end);
/* Activity kinds enabled now (cuptiActivityEnable minus Disable), and
 * runtime APIs enabled (cuptiActivityEnableRuntimeApi). */
uint32_t cudadbl_cupti_kinds_enabled(void);
uint32_t cudadbl_cupti_apis_enabled(void);
/* cuptiActivityFlushAll calls so far, and buffers handed back. */
uint32_t cudadbl_cupti_flushes(void);
uint32_t cudadbl_cupti_buffers_completed(void);

#endif /* CBT_TESTS_CUDADBL_H */
