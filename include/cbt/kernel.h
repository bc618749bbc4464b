/* cbt/kernel.h — kernel spans: hand a kernel its span handle, get a span back.
 *
 *   cbt_launch_info li = cbt_launch_info_default(CBT_KOP_SCATTER, n_ctas);
 *   li.requested_tokens = n; li.num_layers = 32;
 *   cbt_kspan span;
 *   cbt_launch_begin(stream, "req-7", &li, &span);   // CPU: a few hundred ns
 *   my_kernel<<<n_ctas, 256, 0, cuda_stream>>>(span, ...);
 *
 * The kernel stamps %globaltimer and its token count into the device ring
 * with the CBT_KERNEL_SPAN macros (cbt/kernel_span.h). The harvester thread
 * reads the ring while kernels run, joins each record to its launch by the
 * launch id, maps GPU nanoseconds to unix nanoseconds with a clock
 * calibration it maintains, and ends a span named after the operation
 * (cb.scatter, cb.l2_load, ...) under the span that was open for the session
 * at launch time: mp.retrieve or mp.store, else the request root.
 *
 * Rings: cbt_init() creates one ring in host memory for the CPU backend and,
 * when a CUDA device is present, one for the device (cbt_config.ring_*). With
 * no tracer, or when the launch cannot be traced, `out->ring` is NULL and the
 * kernel's macros cost one branch.
 *
 * CBT_DISABLE (defined before the first cbt include): the types stay
 * defined and every call is a static inline referencing no cbt symbol:
 * cbt_launch_info_default() fills its defaults, cbt_launch_begin() returns
 * CBT_OK with a zero span (ring NULL), cbt_cpu_launch() runs every CTA's
 * cta_fn at once on the calling thread (the work still happens), and the
 * ring stats are zero.
 */
#ifndef CBT_KERNEL_H
#define CBT_KERNEL_H

#include <stdint.h>
#include <string.h>

#include "cbt/api.h"
#include "cbt/names.h"
#include "cbt/status.h"
#include "cbt/stream.h"
#include "cbt/ring.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cbt_ring_placement {
    CBT_RING_MAPPED = 0, /* pinned host memory mapped into the device (default) */
    CBT_RING_DEVICE = 1, /* device memory, copied out asynchronously by the harvester */
} cbt_ring_placement;

typedef struct cbt_launch_info {
    uint32_t version, size;      /* CBT_LAUNCH_INFO_VERSION, sizeof */
    cbt_kernel_op op;
    uint8_t mode;                /* CBT_REC_LAUNCH (default) or CBT_REC_CTA */
    uint32_t n_ctas;             /* CTAs in the grid (per-CTA spans complete when all arrive) */
    cbt_name name;               /* span name; 0 = by op (cb.scatter, cb.l2_load, gpu.kernel, ...) */
    /* scatter / gather: what the host knows, for the derived attributes */
    uint32_t requested_tokens;   /* dropped = requested - scattered */
    uint32_t num_layers;         /* slot_writes = scattered * num_layers * 2 */
    uint32_t partial_blocks;     /* vLLM blocks only partly written by this call */
    /* l2_load */
    uint32_t chunks;
    uint64_t bytes;
    /* 1: the request is sampled out (cbt_context_sampled() == 0): hand the
     * kernel an untraced span, publish nothing */
    uint8_t sampled_out;
    uint8_t reserved[7];         /* must be zero (cbt_launch_info_default() zeroes it) */
} cbt_launch_info;
#define CBT_LAUNCH_INFO_VERSION 1u
CBT_ASSERT_NO_TAIL_PADDING_(cbt_launch_info, reserved);

/* cbt_launch_info's defaults for `op` and `n_ctas`, the one list of them
 * (libcbt's cbt_launch_info_default_into() and its CBT_DISABLE stub fill
 * them): mode CBT_REC_LAUNCH, every other field zero. Not a call to make:
 * use cbt_launch_info_default(). */
static inline void cbt_launch_info_defaults_(cbt_launch_info *d, cbt_kernel_op op,
                                             uint32_t n_ctas)
{
    memset(d, 0, sizeof *d);
    d->version = CBT_LAUNCH_INFO_VERSION;
    d->size = (uint32_t)sizeof *d;
    d->op = op;
    d->mode = CBT_REC_LAUNCH;
    d->n_ctas = n_ctas;
}

/* One emulated CTA's work, for cbt_cpu_launch (below). */
typedef void (*cbt_cta_fn)(void *args, uint32_t cta, uint32_t n_ctas);

/* Ring and clock self-metrics, summed over the tracer's rings. */
typedef struct cbt_ring_stats {
    uint32_t version, size; /* CBT_STRUCT_INIT(cbt_ring_stats): what the caller knows (cbt.h) */
    uint64_t harvested;   /* records read */
    uint64_t lost;        /* positions overwritten before they were read (overrun) */
    uint64_t torn;        /* of those, records overwritten while being read */
    uint64_t unjoined;    /* records whose launch never became known */
    uint64_t kernel_spans;/* spans ended from ring records */
    uint64_t cta_records; /* per-CTA records handed to sinks */
    uint64_t sampled_out; /* kernel spans not built: their request is sampled out */
    double clock_err_ns;  /* last calibration: half the tightest bracket, device ring (host ring if none) */
    double clock_drift_ppm; /* device clock vs host clock, least-squares */
} cbt_ring_stats;
#define CBT_RING_STATS_VERSION 1u
#define cbt_ring_stats_version_ CBT_RING_STATS_VERSION /* for CBT_STRUCT_INIT */
CBT_ASSERT_NO_TAIL_PADDING_(cbt_ring_stats, clock_drift_ppm);

#ifdef CBT_DISABLE
/* ==== CBT_DISABLE: the calls below compile to no-ops (see the top) ======== */
static inline cbt_status cbt_launch_info_default_into(cbt_launch_info *li, cbt_kernel_op op,
                                                      uint32_t n_ctas)
{
    if (!li)
        return CBT_ERR_INVAL;
    if (li->size < 8)
        return CBT_ERR_VERSION;
    cbt_launch_info d;
    cbt_launch_info_defaults_(&d, op, n_ctas); /* the one list, above */
    /* the fields after the header, at most li->size bytes (cbt.h) */
    memcpy((char *)li + 8, (const char *)&d + 8, (li->size < sizeof d ? li->size : sizeof d) - 8);
    return li->size > sizeof d ? CBT_ERR_VERSION : CBT_OK;
}
static inline cbt_status cbt_launch_begin(cbt_stream *stream, const char *session,
                                          const cbt_launch_info *li, cbt_kspan *out)
{
    (void)stream, (void)session, (void)li;
    if (out)
        memset(out, 0, sizeof *out); /* ring NULL: the kernel's macros do nothing */
    return CBT_OK;
}
static inline cbt_status cbt_cpu_launch(cbt_stream *stream, uint32_t n_ctas, cbt_cta_fn cta_fn,
                                        void *args)
{
    (void)stream;
    for (uint32_t cta = 0; cta_fn && cta < n_ctas; cta++)
        cta_fn(args, cta, n_ctas); /* the work still happens, at once, in CTA order */
    return CBT_OK;
}
static inline cbt_status cbt_ring_stats_get(cbt_ring_stats *out)
{
    if (out) { /* all zero, written in full (the out-struct rule, cbt.h) */
        memset(out, 0, sizeof *out);
        out->version = CBT_RING_STATS_VERSION;
        out->size = (uint32_t)sizeof *out;
    }
    return CBT_OK;
}
#else /* the calls */

/* The entry point of cbt_launch_info_default() (below): the defaults for
 * `op` and `n_ctas` into the fields of *li, at most li->size bytes; version
 * and size stay the caller's (cbt.h, "versioned structs"). */
CBT_API cbt_status cbt_launch_info_default_into(cbt_launch_info *li, cbt_kernel_op op,
                                                uint32_t n_ctas);

/* Prepare the span handle for one kernel launch on `stream` for `session`
 * (may be NULL: the span then nests under nothing and starts its own trace).
 * Publishes a KERNEL_LAUNCH event carrying the launch id on the stream (with
 * `stream` NULL: on the CPU, and the CPU backend's ring), so the span nests
 * under what is open for the session when the stream reaches the launch;
 * never blocks: it publishes a mark (cbt_publish_on_stream, cbt/stream.h:
 * no lock in steady state, never a wait for the GPU or a sink). With a
 * stream, the kernel's span carries its queue time: this call's host time
 * (cbt.enqueue_ns) to its first CTA's begin (cbt.queue_ns; docs/spans.md,
 * "Queue time").
 * Returns CBT_OK with out->ring == NULL when there is no tracer or no ring
 * for the stream's backend; CBT_ERR_INVAL for bad arguments;
 * CBT_ERR_VERSION for a launch info from a newer cbt (its size or version:
 * cbt.h, "versioned structs");
 * CBT_ERR_FULL when the launch event was dropped (out->ring is then NULL). */
CBT_API cbt_status cbt_launch_begin(cbt_stream *stream, const char *session,
                                    const cbt_launch_info *li, cbt_kspan *out);

/* Run `cta_fn(args, cta, n_ctas)` for every CTA of an emulated launch on a CPU
 * stream, in stream order, each CTA with cbt_cpu_cta_enter() set so the
 * macros know which CTA they are in. `args` must stay valid until the stream
 * reaches the launch. CBT_ERR_FULL when the stream queue is full. */
CBT_API cbt_status cbt_cpu_launch(cbt_stream *stream, uint32_t n_ctas, cbt_cta_fn cta_fn,
                                  void *args);

/* The ring and clock self-metrics (cbt_ring_stats, above). CBT_ERR_INVAL for
 * NULL; CBT_ERR_VERSION when out->size is smaller than the header (set
 * version and size: CBT_STRUCT_INIT); CBT_ERR_NOT_INITIALIZED without a
 * tracer. */
CBT_API cbt_status cbt_ring_stats_get(cbt_ring_stats *out);

#endif /* CBT_DISABLE */

/* Defaults: op and n_ctas as given, mode CBT_REC_LAUNCH, everything else
 * zero (cbt_launch_info_defaults_, above). Inline, so that only this
 * header's sizeof is written
 * (cbt_launch_info_default_into). */
static inline cbt_launch_info cbt_launch_info_default(cbt_kernel_op op, uint32_t n_ctas)
{
    cbt_launch_info li;
    memset(&li, 0, sizeof li);
    li.version = CBT_LAUNCH_INFO_VERSION;
    li.size = (uint32_t)sizeof li;
    (void)cbt_launch_info_default_into(&li, op, n_ctas); /* newer than libcbt: refused later */
    return li;
}

#ifdef __cplusplus
}
#endif
#endif /* CBT_KERNEL_H */
