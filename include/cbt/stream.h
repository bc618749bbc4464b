/* cbt/stream.h — publish events at the moment a stream reaches them.
 *
 * cbt_publish() stamps an event when the CPU calls it. GPU work is different:
 * MP_STORE_START must carry the time the stream *starts* the store, not the
 * time the host enqueued it. cbt_publish_on_stream() enqueues a mark on a
 * stream; the event's timestamp is when the stream reaches that mark, and the
 * harvester dispatches it then (so REQUEST_END published by the CPU can be
 * dispatched before the STORE_END that the stream has not reached yet, as in
 * the seed's race scenarios).
 *
 * Two backends, one interface:
 *   - CUDA: the mark is a pooled CUDA event recorded on the user's
 *     cudaStream_t; the harvester polls it and maps its completion time to
 *     unix ns. No allocation and no synchronisation on the caller's side,
 *     and no lock in steady state (the pool is a lock-free stack; only a
 *     stream's first mark under a tracer attaches it, see
 *     cbt_publish_on_stream); creating the stream does not wait for the
 *     stream either.
 *   - CPU: a worker thread runs the stream's enqueued work (kernel reference
 *     implementations, host callbacks) in FIFO order and stamps each mark
 *     when it reaches it. This is how cbt is tested without a GPU. The
 *     queue is lock-free for its producers: cbt_stream_enqueue(),
 *     cbt_publish_on_stream() and cbt_cpu_launch() never block and never
 *     wait for the worker (a CAS to claim a slot, a copy, a store to commit
 *     it, and a futex wake only when the worker said it sleeps); any number
 *     of threads may enqueue onto one stream, and each thread's items run
 *     in the order it enqueued them, interleaved with the others' in claim
 *     order.
 *
 * What CBT_OK means. An enqueue or mark that returns CBT_OK is in the
 * stream's queue and will run or be reached, in order, before
 * cbt_stream_sync() or cbt_stream_destroy() returns. A mark can still be
 * lost after that: when the stream reaches it, the CPU worker copies it into
 * the tracer's queue, and a full queue (or a tracer shut down meanwhile)
 * drops it; a CUDA mark is dropped when the harvester finds no room for its
 * event, or when querying its CUDA event fails. Such losses are counted, never silent: in the stream's
 * cbt_stream_stats.marks_dropped and in cbt_metrics.stream_marks_dropped
 * (and, being events a full queue refused, in cbt_metrics.dropped_full). A
 * call that returns CBT_ERR_FULL enqueued nothing and is counted in
 * cbt_stream_stats.full_refusals (a refused mark also in
 * cbt_metrics.dropped_full).
 *
 * CBT_DISABLE (defined before the first cbt include): every call is a static
 * inline referencing no cbt symbol, and publishing is a no-op; the program's
 * own work is kept. cbt_stream_cuda_create() hands back the cudaStream_t
 * itself as the handle, so cbt_stream_cuda_handle() still returns it and
 * kernels launched on it stay on that stream. cbt_stream_sync() on it calls
 * cudaStreamSynchronize() when the CUDA runtime header (cuda_runtime_api.h)
 * was included before cbt.h, and otherwise does not wait: synchronise
 * cbt_stream_cuda_handle(s) yourself then. A CPU stream is a non-NULL
 * placeholder handle, and cbt_stream_enqueue() runs fn(arg) at once on the
 * calling thread, so work a program hands a stream still happens, in order
 * (on a CUDA stream it then runs before, not after, the GPU work queued
 * ahead of it).
 */
#ifndef CBT_STREAM_H
#define CBT_STREAM_H

#include <stddef.h>
#include <stdint.h>
#include "cbt/api.h"
#include "cbt/event.h"
#include "cbt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cbt_stream cbt_stream;

/* Work for a CPU stream: runs on the stream's worker thread, in FIFO order. */
typedef void (*cbt_stream_fn)(void *arg);

#define CBT_STREAM_DEFAULT_CAPACITY 1024 /* queued items per CPU stream */
#define CBT_STREAM_CUDA_POOL 1024        /* pooled CUDA events per CUDA stream */

/* A stream's own counters (cbt_stream_stats_get), totals since it was
 * created. A versioned out-struct (cbt.h, "versioned structs"): start it
 * from CBT_STRUCT_INIT(cbt_stream_stats). Exact once cbt_stream_sync() has
 * returned and nothing more was enqueued; approximate while producers run. */
typedef struct cbt_stream_stats {
    uint32_t version, size;   /* CBT_STRUCT_INIT(cbt_stream_stats) */
    uint64_t items_enqueued;  /* work, launches and marks accepted (CBT_OK; CUDA:
                                 marks and host functions) */
    uint64_t items_completed; /* CPU: of those, run or reached by the worker;
                                 CUDA: 0 (the device runs them) */
    uint64_t marks_published; /* CPU: marks reached and copied into the
                                 tracer's queue; CUDA: 0 */
    uint64_t marks_dropped;   /* marks accepted (CBT_OK) and lost afterwards:
                                 no room when reached (CPU: the tracer's
                                 queue; CUDA: the harvester's pending room),
                                 a failed CUDA event query, or (CPU) no
                                 tracer running by then */
    uint64_t full_refusals;   /* calls refused with CBT_ERR_FULL: nothing enqueued */
} cbt_stream_stats;
#define CBT_STREAM_STATS_VERSION 1u
#define cbt_stream_stats_version_ CBT_STREAM_STATS_VERSION /* for CBT_STRUCT_INIT */
CBT_ASSERT_NO_TAIL_PADDING_(cbt_stream_stats, full_refusals);

#ifdef CBT_DISABLE
/* ==== CBT_DISABLE: the calls below compile to no-ops (see the top) ======== */
/* The handle of every CPU stream: not NULL, and not a cudaStream_t value
 * (0, cudaStreamLegacy 1 and cudaStreamPerThread 2 are). */
#define CBT_DISABLED_CPU_STREAM_ ((cbt_stream *)~(uintptr_t)0)
static inline cbt_status cbt_stream_cpu_create(uint32_t capacity, cbt_stream **out)
{
    (void)capacity;
    if (!out)
        return CBT_ERR_INVAL;
    *out = CBT_DISABLED_CPU_STREAM_;
    return CBT_OK;
}
static inline cbt_status cbt_stream_cuda_create(void *cuda_stream, cbt_stream **out)
{
    if (!out)
        return CBT_ERR_INVAL;
    *out = (cbt_stream *)cuda_stream; /* the handle is the stream itself */
    return CBT_OK;
}
static inline cbt_status cbt_stream_enqueue(cbt_stream *s, cbt_stream_fn fn, void *arg)
{
    (void)s;
    if (fn)
        fn(arg);
    return CBT_OK;
}
static inline cbt_status cbt_publish_on_stream(cbt_stream *s, const cbt_event *ev)
{
    (void)s, (void)ev;
    return CBT_OK;
}
static inline cbt_status cbt_stream_sync(cbt_stream *s)
{
#ifdef CUDART_VERSION /* the program includes the CUDA runtime: wait for its stream */
    if (s != CBT_DISABLED_CPU_STREAM_)
        return cudaStreamSynchronize((cudaStream_t)(void *)s) == cudaSuccess ? CBT_OK
                                                                             : CBT_ERR_CUDA;
#endif
    (void)s;
    return CBT_OK;
}
static inline uint32_t cbt_stream_ordinal(const cbt_stream *s)
{
    (void)s;
    return 0;
}
static inline void *cbt_stream_cuda_handle(const cbt_stream *s)
{
    return s == CBT_DISABLED_CPU_STREAM_ ? NULL : (void *)s;
}
static inline cbt_status cbt_stream_stats_get(const cbt_stream *s, cbt_stream_stats *out)
{
    (void)s;
    if (out) { /* all zero, written in full (the out-struct rule, cbt.h) */
        cbt_stream_stats z = {0, 0, 0, 0, 0, 0, 0};
        z.version = CBT_STREAM_STATS_VERSION;
        z.size = (uint32_t)sizeof z;
        *out = z;
    }
    return CBT_OK;
}
static inline void cbt_stream_destroy(cbt_stream *s) { (void)s; }
#else /* the calls */

/* A CPU stream: one worker thread and a bounded FIFO of `capacity` slots (0 =
 * CBT_STREAM_DEFAULT_CAPACITY, else 2 to 2^20: CBT_ERR_INVAL outside), work
 * and marks, allocated
 * here (about 300 bytes a slot). Work and launches take one slot each; a
 * mark keeps its event as a record of only its used bytes, 256 bytes per
 * slot, so a mark of up to 6 values (or 2 and 100 string bytes) takes one
 * slot and a larger one as many consecutive slots as it needs (cb.lookup.end
 * with 12 values and a 40-character model name: 2; the largest event: 11).
 * A mark that finds too few free slots is refused as a full queue would be.
 * Works with or without a tracer. */
CBT_API cbt_status cbt_stream_cpu_create(uint32_t capacity, cbt_stream **out);

/* Wrap an existing cudaStream_t (passed as void* so this header needs no CUDA
 * headers). Creates CBT_STREAM_CUDA_POOL timing events up front, and room
 * for the events of the marks waiting for their CUDA event to complete:
 * 512 bytes per pooled event, kept as records of their used bytes (a mark
 * whose event finds no room when the harvester takes it is dropped and
 * counted in cbt_metrics.dropped_full). It also queues on the stream the
 * reference the marks are timed from (a one-thread kernel reading the
 * device clock, an event, a host function stamping the host clock) and
 * returns without waiting for it: it never synchronises the stream, however
 * busy. The harvester resolves the reference once it has completed; marks
 * behind it wait for it there. Costs: the CUDA calls that make 1025 events,
 * a pinned word (cudaHostAlloc) and a launch; not for a hot path.
 * CBT_ERR_UNSUPPORTED when cbt was built without CUDA, CBT_ERR_NO_DEVICE when
 * no device is present. The caller keeps ownership of the cudaStream_t. */
CBT_API cbt_status cbt_stream_cuda_create(void *cuda_stream, cbt_stream **out);

/* Enqueue `fn(arg)` on the stream. CPU: runs on the worker, after every item
 * enqueued before it; never blocks (see the top). CUDA: a host function
 * (cudaLaunchHostFunc). CBT_ERR_FULL when the CPU queue is full (nothing was
 * enqueued; counted in cbt_stream_stats.full_refusals). */
CBT_API cbt_status cbt_stream_enqueue(cbt_stream *s, cbt_stream_fn fn, void *arg);

/* Publish `ev` when the stream reaches this point. CPU: never blocks, takes
 * no lock and never waits for the stream's worker, whatever it is doing.
 * CUDA: takes an event from the stream's pool with a load and a CAS (no
 * lock: another publisher stopped halfway holds it up not at all) and calls
 * cudaEventRecord, which takes the CUDA driver's own locks; it never waits
 * for the device. The first CUDA mark under a tracer attaches the stream to
 * it, under the stream's attach mutex and the tracer's lock (once per stream
 * and tracer, never in steady state). Either way a full
 * queue or an exhausted event pool refuses the event with CBT_ERR_FULL,
 * counted at once (cbt_stream_stats.full_refusals, cbt_metrics.dropped_full).
 * CBT_OK: queued, to be stamped when reached; a loss after that is counted in
 * cbt_stream_stats.marks_dropped and cbt_metrics.stream_marks_dropped (see
 * "What CBT_OK means", top). Without a tracer: CBT_OK after one branch, and
 * nothing is queued. If ev->pair is 0 it is set to the stream's ordinal, so
 * START/END pairs on different streams of one session never cross.
 * Queue time: the call reads the host's tick counter (rdtsc; no lock, no
 * system call) and the event is dispatched with CBT_EVF_ENQUEUED, that
 * enqueue time in ev->enqueue_ns and the stream's ordinal and device, so the
 * span it opens carries cbt.queue_ns (reached minus enqueued), unless the
 * caller gave it its own time (CBT_EVF_EXPLICIT_TS, CPU streams: the stream
 * did not time it). docs/spans.md, "Queue time". */
CBT_API cbt_status cbt_publish_on_stream(cbt_stream *s, const cbt_event *ev);

/* Block until everything enqueued so far has run (CPU) or completed (CUDA).
 * Items other threads enqueue meanwhile are not waited for. CPU: sleeps on a
 * futex until the worker has passed the last item claimed at the call; not
 * from the stream's own work (it would wait for itself). */
CBT_API cbt_status cbt_stream_sync(cbt_stream *s);

/* Small integer naming the stream within the process (1, 2, ...). */
CBT_API uint32_t cbt_stream_ordinal(const cbt_stream *s);

/* The cudaStream_t, or NULL for a CPU stream. */
CBT_API void *cbt_stream_cuda_handle(const cbt_stream *s);

/* The stream's counters (cbt_stream_stats, above) as of now. Any thread,
 * never blocks (relaxed reads). CBT_ERR_INVAL for a NULL stream or out;
 * CBT_ERR_VERSION when out->size is smaller than the header (set version
 * and size: CBT_STRUCT_INIT). */
CBT_API cbt_status cbt_stream_stats_get(const cbt_stream *s, cbt_stream_stats *out);

/* Drain (as cbt_stream_sync), stop the worker, free. Blocks until the queue
 * has run. No other call on `s` may overlap it or follow it: stop the
 * threads that enqueue onto it first. NULL is ignored. */
CBT_API void cbt_stream_destroy(cbt_stream *s);

#endif /* CBT_DISABLE */

#ifdef __cplusplus
}
#endif
#endif /* CBT_STREAM_H */
