/* host/internal/cuda_marks.h — owns the CUDA stream backend's bookkeeping that
 * needs no CUDA (host/streams/cuda_marks.c), so tests/test_cuda_marks.c pins it
 * on the CPU: the event pool's free list, the pending FIFO that resolves marks
 * in stream order, and the time of a mark from its elapsed milliseconds.
 *
 * Events are named by their index into the stream's pool; what an index
 * means (a cudaEvent_t) is stream_cuda.c's business. Nothing here locks:
 * the pool is a lock-free stack that any thread may take from and give back
 * to at once (publishers take, the harvester and a failed publish give
 * back); the FIFO is the harvester's alone.
 */
#ifndef CBT_HOST_INTERNAL_CUDA_MARKS_H
#define CBT_HOST_INTERNAL_CUDA_MARKS_H

#include <stdatomic.h>
#include <stdint.h>

#include "cbt/status.h"
#include "cbt/stream.h"
#include "internal/clock.h"
#include "internal/devclock.h"

/* ---- the event pool's free list ------------------------------------------------------ */

/* A Treiber stack of free indices with an ABA tag. `top` packs the tag (high
 * 32 bits, moved on every successful push and pop) and the top index + 1
 * (low 32 bits; 0: empty); next[i] is the index + 1 below i while i is
 * free. A take or give-back is a load and a CAS, retried only when another
 * thread's take or give-back won the race: no lock, no system call, and a
 * thread stopped halfway holds nobody up (the others' CASes succeed; its
 * own then fails on the moved tag and retries). Ordering: a give-back's CAS
 * is a release and a take's loads of `top` are acquires, so what the giver
 * wrote before (the index's next, the harvester's swap of the cudaEvent_t
 * behind it) is seen by the thread that takes the index. */
typedef struct cbt_evpool {
    _Atomic uint64_t top;
    _Atomic uint32_t next[CBT_STREAM_CUDA_POOL];
} cbt_evpool;

/* Indices 0..n-1 free (n <= CBT_STREAM_CUDA_POOL), 0 on top. Before any
 * other thread uses the pool. */
void cbt_evpool_init(cbt_evpool *p, uint32_t n);
/* Take a free index: CBT_OK, or CBT_ERR_FULL when every one is in use. Any
 * thread, lock-free (above). */
cbt_status cbt_evpool_take(cbt_evpool *p, uint32_t *idx);
/* Give an index back (one that was taken, once). Any thread, lock-free. */
void cbt_evpool_put(cbt_evpool *p, uint32_t idx);

/* Test-only: when set, cbt_evpool_take calls it after reading the top of the
 * stack and before its CAS claims it (where the mutex-based pool held its
 * lock), so a test can stop one taker there and see the others go past
 * (tests/test_cuda_marks.c, tests/test_cudadbl_stream.c). NULL: one load
 * and a predicted branch per take. */
typedef void (*cbt_evpool_hook)(void);
extern _Atomic(cbt_evpool_hook) cbt_evpool_take_hook_;

/* ---- the pending FIFO ---------------------------------------------------------------- */

/* Marks waiting for their event, in the order they were recorded (which, on
 * one stream, is the order they complete). */
typedef struct cbt_markq {
    uint32_t ev[CBT_STREAM_CUDA_POOL];
    uint32_t head, count;
} cbt_markq;

typedef enum cbt_mark_state {
    CBT_MARK_PENDING = 0, /* not completed yet: it and everything behind it wait */
    CBT_MARK_DONE = 1,    /* completed; *dns is its time after the reference */
    CBT_MARK_FAILED = 2   /* the query or the elapsed time failed: dropped */
} cbt_mark_state;

/* Ask whether event `ev` has completed and, if so, how long after the
 * reference (ns). */
typedef cbt_mark_state (*cbt_mark_query_fn)(void *ctx, uint32_t ev, uint64_t *dns);
/* A mark leaves the FIFO (DONE with its time, or FAILED). */
typedef void (*cbt_mark_done_fn)(void *ctx, uint32_t ev, cbt_mark_state st, uint64_t dns);

static inline void cbt_markq_init(cbt_markq *q) { q->head = q->count = 0; }
/* Append: CBT_OK, or CBT_ERR_FULL (never while the pool bounds the marks). */
cbt_status cbt_markq_push(cbt_markq *q, uint32_t ev);
/* Query the oldest mark until one is pending: each completed (or failed) one
 * is handed to `done` and leaves, in FIFO order; a pending one holds back
 * every mark behind it, whatever their state. Returns how many remain. */
uint32_t cbt_markq_resolve(cbt_markq *q, cbt_mark_query_fn query, cbt_mark_done_fn done,
                           void *ctx);
/* Empty the FIFO, giving every index to `drop` (oldest first). */
void cbt_markq_clear(cbt_markq *q, void (*drop)(void *ctx, uint32_t ev), void *ctx);

/* ---- a mark's time --------------------------------------------------------------------- */

/* cudaEventElapsedTime's milliseconds as ns (a mark never precedes its
 * reference: a negative time is 0; marks recorded by several threads can be
 * resolved a little out of record order). */
uint64_t cbt_cuda_ms_to_ns(float ms);

/* The reference event a stream's marks are timed against: host ticks just
 * after it completed, and the device's %globaltimer just before it. */
typedef struct cbt_cuda_anchor {
    uint64_t ref_ticks;
    uint64_t ref_dev;
} cbt_cuda_anchor;

/* A mark `dns` after the reference, in unix ns: through the device clock's
 * fit when `dev` is fitted (the same mapping the kernel spans use), else
 * from the reference's host completion stamp. */
uint64_t cbt_cuda_mark_unix(const cbt_cuda_anchor *a, uint64_t dns, const cbt_clock_map *host,
                            const cbt_devclock *dev);

/* cudaEventElapsedTime is a float of ms: past this the reference moves onto
 * the newest mark before its resolution decays (~1 us at 5 s). */
#define CBT_CUDA_REANCHOR_MS 5000.0f
/* Move the anchor `dns` on (onto a mark that was that far after it). */
void cbt_cuda_anchor_move(cbt_cuda_anchor *a, uint64_t dns, double ns_per_tick);

#endif /* CBT_HOST_INTERNAL_CUDA_MARKS_H */
