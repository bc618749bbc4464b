/* cbt/cupti.h — CUPTI kernel activity as `gpu.kernel` spans.
 *
 *   cbt_init(&cfg);
 *   cbt_cupti_enable();                       // once; optional
 *   cbt_launch_begin(stream, sid, &li, &span);
 *   cbt_cupti_launch_scope_begin(span.launch_id);
 *   my_kernel<<<...>>>(span, ...);
 *   cbt_cupti_launch_scope_end();
 *
 * With CUPTI in the build and a device present, cbt_cupti_enable() subscribes
 * to CUPTI's concurrent-kernel and external-correlation activity and to the
 * runtime-API records of the kernel-launch calls only (cudaLaunchKernel,
 * __cudaLaunchKernel (CUDA 13's <<<>>>), cudaLaunchKernelExC,
 * cudaLaunchCooperativeKernel, cudaGraphLaunch and their _ptsz forms, through
 * cuptiActivityEnableRuntimeApi): CUPTI delivers the external correlations
 * with the API records; cbt counts the API records in `api_records` and
 * discards them. When CUPTI refuses the per-API enable, cbt enables the whole
 * runtime-API kind instead (every runtime call in the process is then
 * recorded and discarded: more load on the buffers); enable says on stderr,
 * in one line, which of the two it used. A kernel launched through another
 * call (the driver API, cudaLaunchCooperativeKernelMultiDevice, ...) gets no
 * launch_id and starts a trace of its own. That external correlations still
 * arrive with only the launch APIs enabled is confirmed only on a device
 * (tests/test_gpu_cupti.c asserts the kernel's parent). Every kernel
 * CUPTI reports becomes a span named "gpu.kernel" with the attributes
 * kernel.name, grid_x/y/z, block_x/y/z, stream, registers_per_thread,
 * static_shared_memory, dynamic_shared_memory, device, correlation_id and,
 * when the launch was bracketed by cbt_cupti_launch_scope_begin/end,
 * launch_id. A bracketed kernel nests under the span its cbt launch nested
 * under (mp.retrieve, ...); an unbracketed one (or one whose launch event never
 * arrived within 200 ms) starts a trace of its own.
 *
 * CUPTI timestamps are mapped to unix ns through an offset sampled at enable
 * (cuptiGetTimestamp bracketed by two host clock reads, tightest of 16) and
 * the tracer's host clock map. When the same launch also produced a ring span
 * (CBT_KERNEL_SPAN macros), the difference of the two start times is kept as
 * a cross-check of both calibrations (cbt_cupti_stats.clock_delta_ns).
 *
 * Records are delivered by CUPTI in bounded buffers (32 x 128 KiB); the
 * harvester asks CUPTI for its completed buffers every 100 ms (a default,
 * never a forced, flush). CUPTI hands back only buffers all of whose records
 * are complete, so: once the kernels recorded in a buffer have all ended,
 * their spans follow within about 100 ms (plus a harvester round); while
 * kernels keep being launched back to back, the buffer being filled always
 * holds one still running and is handed back only when full, so spans then
 * lag their kernels by the time it takes to launch about 460 bracketed
 * kernels (one 128 KiB buffer), however long that is: bounded in records,
 * not in time. A
 * record CUPTI could not store, or one that found cbt's queue full, is
 * counted in `dropped`; a kernel record whose start or end CUPTI could not
 * collect (CUPTI_TIMESTAMP_UNKNOWN, or an end before the start) is skipped
 * and counted in `bad_timestamps`; a buffer CUPTI could not walk to its end
 * (a bad record: the rest of the buffer, an unknown number of records, is
 * lost) is counted in `truncated`, and said once on stderr. CUPTI stays
 * subscribed for the life of the process (until cbt_cupti_disable()); records
 * that arrive while no tracer runs are dropped.
 *
 * CBT_DISABLE (defined before the first cbt include): the types stay
 * defined and every call is a static inline no-op referencing no cbt (or
 * CUPTI) symbol: each returns CBT_OK, and the stats are zero (enabled 0).
 */
#ifndef CBT_CUPTI_H
#define CBT_CUPTI_H

#include <stdint.h>
#include <string.h>

#include "cbt/api.h"
#include "cbt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cbt_cupti_stats {
    uint32_t version, size; /* CBT_STRUCT_INIT(cbt_cupti_stats): what the caller knows (cbt.h) */
    uint64_t records;       /* kernel records received from CUPTI (bad_timestamps included) */
    uint64_t spans;         /* gpu.kernel spans ended */
    uint64_t dropped;       /* records CUPTI dropped + records our queue refused */
    uint64_t unjoined;      /* bracketed kernels whose launch never became known (root spans) */
    uint64_t clock_checks;  /* launches seen by both CUPTI and the ring */
    int64_t clock_delta_ns; /* last: CUPTI kernel start - ring span start, unix ns */
    int enabled;
    uint32_t reserved;      /* zero (cbt writes it so) */
    /* version 2 */
    uint64_t api_records;    /* runtime-API records received (the kernel launches'; they
                              * carry the external correlations), discarded */
    uint64_t bad_timestamps; /* kernel records skipped: start or end unknown, or end < start */
    uint64_t truncated;      /* buffers whose walk stopped at a bad record: the rest of each
                              * (an unknown number of records) is lost */
} cbt_cupti_stats;
#define CBT_CUPTI_STATS_VERSION 2u
#define cbt_cupti_stats_version_ CBT_CUPTI_STATS_VERSION /* for CBT_STRUCT_INIT */
CBT_ASSERT_NO_TAIL_PADDING_(cbt_cupti_stats, truncated);

#ifdef CBT_DISABLE
/* ==== CBT_DISABLE: the calls below compile to no-ops (see the top) ======== */
static inline cbt_status cbt_cupti_enable(void) { return CBT_OK; }
static inline cbt_status cbt_cupti_disable(void) { return CBT_OK; }
static inline cbt_status cbt_cupti_launch_scope_begin(uint32_t launch_id)
{
    (void)launch_id;
    return CBT_OK;
}
static inline cbt_status cbt_cupti_launch_scope_end(void) { return CBT_OK; }
static inline cbt_status cbt_cupti_flush(void) { return CBT_OK; }
static inline cbt_status cbt_cupti_stats_get(cbt_cupti_stats *out)
{
    if (out) { /* all zero, written in full (the out-struct rule, cbt.h) */
        memset(out, 0, sizeof *out);
        out->version = CBT_CUPTI_STATS_VERSION;
        out->size = (uint32_t)sizeof *out;
    }
    return CBT_OK;
}
#else /* the calls */

/* Subscribe to CUPTI kernel activity. CBT_OK; CBT_ERR_UNSUPPORTED when CUPTI
 * is not in this build, or when CUPTI refuses (another tool such as Nsight
 * Systems holds the subscription, insufficient privileges, ...: cbt prints
 * one line "cbt: CUPTI unavailable (...); carrying on without kernel
 * activity" to stderr, once per process, and carries on);
 * CBT_ERR_NOT_INITIALIZED without a tracer; CBT_ERR_NO_DEVICE without a CUDA
 * device; CBT_ERR_ALREADY when already enabled. Thread-safe. */
CBT_API cbt_status cbt_cupti_enable(void);

/* Unsubscribe (flushes the completed records first, as cbt_cupti_flush; then
 * disables every kind cbt_cupti_enable enabled). CBT_ERR_NOT_FOUND when not enabled;
 * CBT_ERR_UNSUPPORTED without CUPTI in the build. */
CBT_API cbt_status cbt_cupti_disable(void);

/* Bracket the launch of the kernel of cbt launch `launch_id`
 * (cbt_kspan.launch_id) on the calling thread, so CUPTI's record of it
 * carries the id (an external correlation id, kind CUSTOM0). Not nested.
 * Both are no-ops returning CBT_OK when CUPTI is not enabled or launch_id is
 * 0; a few hundred ns otherwise. */
CBT_API cbt_status cbt_cupti_launch_scope_begin(uint32_t launch_id);
CBT_API cbt_status cbt_cupti_launch_scope_end(void);

/* Ask CUPTI to deliver every completed record it holds now
 * (cuptiActivityFlushAll with flag 0: not forced, so a kernel still running
 * stays with CUPTI until it completes); the harvester turns them into spans
 * on its next rounds. The harvester also does this itself every 100 ms.
 * CBT_ERR_NOT_FOUND when not enabled; CBT_ERR_UNSUPPORTED without CUPTI. */
CBT_API cbt_status cbt_cupti_flush(void);

/* CBT_OK (zeros when never enabled); CBT_ERR_INVAL for NULL; CBT_ERR_VERSION
 * when out->size is smaller than the header (set version and size:
 * CBT_STRUCT_INIT; nothing is written); CBT_ERR_UNSUPPORTED without CUPTI
 * (out is zeroed, within its size). */
CBT_API cbt_status cbt_cupti_stats_get(cbt_cupti_stats *out);

#endif /* CBT_DISABLE */

#ifdef __cplusplus
}
#endif
#endif /* CBT_CUPTI_H */
