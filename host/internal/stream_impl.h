/* host/internal/stream_impl.h — the stream object shared by the CPU and CUDA backends.
 *
 * stream.c owns the interface and the CPU backend; stream_cuda.c owns the
 * CUDA backend (compiled only with CBT_WITH_CUDA). Fields under "CPU" follow
 * the lock-free queue protocol described at the top of stream.c; fields
 * under "CUDA pending" belong to the harvester; the counters under "stats"
 * are atomics any thread may read (cbt_stream_stats_get).
 */
#ifndef CBT_HOST_INTERNAL_STREAM_H
#define CBT_HOST_INTERNAL_STREAM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "internal/record.h"
#include "internal/tracer.h"

enum { CBT_STREAM_CPU = 1, CBT_STREAM_CUDA = 2 };

/* Room for the events of marks, in record cells (internal/record.h): per
 * CPU stream item, and per pooled CUDA event. */
#define CBT_STREAM_MARK_CELLS_PER_ITEM 4u
#define CBT_STREAM_CUDA_MARK_CELLS (CBT_STREAM_CUDA_POOL * 8u)

/* One slot of a CPU stream's queue, at position p (mod capacity). `seq`
 * says whose it is (stream.c, "The queue"): p when free for position p, p + 1
 * once the item claimed at p is committed. A mark (fn and cta_fn NULL) keeps
 * its event as a record (internal/record.h) in the stream's `room`, from
 * the slot's own CBT_STREAM_MARK_CELLS_PER_ITEM cells on, and takes as many
 * consecutive slots as its record needs (n_slots). */
typedef struct cbt_stream_slot {
    _Atomic uint64_t seq;
    cbt_stream_fn fn;   /* work; NULL with cta_fn NULL: a mark */
    cbt_cta_fn cta_fn;  /* an emulated kernel launch of n_ctas CTAs */
    void *arg;
    uint32_t n_ctas;
    uint32_t n_slots;   /* slots the item takes (1, or more for a large mark) */
} cbt_stream_slot;

/* Test-only: when set, the CPU worker calls it after an item has run and
 * before its slots are freed, where the mutex-based queue held its lock
 * (tests/test_stream_queue.c stalls the worker there). NULL: one load. */
typedef void (*cbt_stream_worker_hook)(cbt_stream *s);
extern _Atomic(cbt_stream_worker_hook) cbt_stream_worker_hook_;

struct cbt_stream {
    int kind;
    uint32_t ordinal;

    /* CPU (stream.c). Producers' line: the claim position and the count of
     * accepted items, both moved by producers only. */
    _Alignas(64) _Atomic uint64_t tail;  /* next position to claim (CAS) */
    _Atomic uint64_t enqueued;           /* stats: items accepted (CBT_OK) */
    _Atomic uint64_t full_refusals;      /* stats: CBT_ERR_FULL at the call */
    /* the worker's line: written by the worker, read by sync and stats */
    _Alignas(64) _Atomic uint64_t done;  /* positions below it have run */
    _Atomic uint64_t completed;          /* stats: items run or reached */
    _Atomic uint64_t marks_published;    /* stats: reached and queued for the harvester */
    _Atomic uint32_t idle_seq;           /* futex: bumped after `done` for sync waiters */
    /* the sleep handshake (stream.c, "Sleeping") */
    _Alignas(64) _Atomic uint32_t wake_seq; /* futex: bumped by a producer that wakes the worker */
    _Atomic uint32_t sleeping;           /* the worker announced it waits on wake_seq */
    _Atomic uint32_t sync_waiters;       /* threads in cbt_stream_sync */
    _Atomic int stop;                    /* destroy: exit once nothing is claimed */
    /* read-only after create */
    _Alignas(64) cbt_stream_slot *slots; /* cap slots */
    unsigned char *room;                 /* cap * CELLS_PER_ITEM cells + slack, 64-byte aligned */
    void *room_raw;
    uint32_t cap;
    pthread_t worker;

    /* stats, both backends: marks accepted with CBT_OK and lost afterwards
     * (CPU: no room on the tracer's queue when reached, or no tracer then;
     * CUDA: no room for the pending mark's event at the harvester) */
    _Atomic uint64_t marks_dropped;

    /* CUDA (stream_cuda.c) */
    void *cuda_stream;
    int32_t device;                 /* the CUDA device (cudaGetDevice at creation) */
    struct cbt_cuda_pool *pool;
    _Atomic uint64_t tracer_gen;    /* generation of the tracer polling our marks; 0:
                                     * none (read by every mark, set once per tracer) */
    _Atomic uint32_t in_flight;     /* marks pushed and not yet dispatched or dropped */
    struct cbt_markq *pending;      /* harvester-owned FIFO of pool indices
                                     * (internal/cuda_marks.h) */
    cbt_rec_fifo pend_recs;         /* harvester-owned: the pending marks' events,
                                     * the one of the same rank as each index */
};

uint32_t cbt_stream_next_ordinal_(void);

/* A mark accepted with CBT_OK is lost: count it on `s` and, when `t` is
 * not NULL, in t's cbt_metrics.stream_marks_dropped. Any thread. */
void cbt_stream_mark_lost_(cbt_stream *s, cbt_tracer *t);

/* CUDA backend entry points (stream_cuda.c). */
cbt_status cbt_cuda_stream_init_(cbt_stream *s, void *cuda_stream);
cbt_status cbt_cuda_stream_enqueue_(cbt_stream *s, cbt_stream_fn fn, void *arg);
cbt_status cbt_cuda_stream_mark_(cbt_stream *s, cbt_tracer *t, const cbt_event *ev);
cbt_status cbt_cuda_stream_sync_(cbt_stream *s);
/* Returns 1 when `s` may be freed, 0 when it must be leaked (its marks could
 * not be retired in time and the harvester may still reach it). */
int cbt_cuda_stream_fini_(cbt_stream *s);

#endif /* CBT_HOST_INTERNAL_STREAM_H */
