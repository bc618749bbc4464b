/* host/internal/harvest.h — the harvester's contract with what it drives:
 * sources (where events and records come from) and taps (what watches the
 * rounds). The harvester (host/core/harvester.c) owns the thread, the round,
 * the sleep and the flush handshake; it calls these tables in the order they
 * were registered and names none of the components behind them.
 *
 * Sources, in the order cbt_init registers them: the event lanes and the
 * shared bus (lane.c), the CUDA streams' pending marks (stream.c), the
 * device rings with kernel spans and CUPTI (kernel_spans.c). Taps: the trace
 * recorder (record/recorder.c), when recording.
 *
 * Threads: every callback runs on the harvester thread (or, in a replay, on
 * the thread that runs it). `poll` runs while the harvester holds
 * cbt_tracer.lock; `after` and every tap callback run outside it. Nothing on
 * the publishing path, cbt_metrics_get, cbt_flush or a lane's attach takes
 * that lock (docs/architecture.md, "Who waits for whom").
 */
#ifndef CBT_HOST_INTERNAL_HARVEST_H
#define CBT_HOST_INTERNAL_HARVEST_H

#include <stdint.h>

#define CBT_HV_MAX_SOURCES 8
#define CBT_HV_MAX_TAPS 4

/* One round as the sources see it: the harvester fills the inputs, each
 * source adds to the outputs. */
typedef struct cbt_hv_round {
    /* in */
    uint64_t ticks;   /* the round's clock read (no later load runs before it) */
    int stopping;     /* cbt_shutdown asked the harvester to stop */
    /* out, summed over the sources */
    uint32_t handled; /* items handled this round */
    uint32_t pending; /* items that complete without a publish (CUDA marks):
                         the harvester keeps polling, and a flush waits for them */
    int more;         /* a batch bound cut the round short: go again at once */
    int keep_polling; /* something comes without a publish soon (kernel
                         records, CUPTI): poll at the working period, never
                         sleep deeply */
    uint32_t bound_ms;/* the longest sleep a source can allow (0: any) */
} cbt_hv_round;

/* A source's bound on the sleep: the smallest non-zero bound wins. */
static inline void cbt_hv_bound(cbt_hv_round *r, uint32_t ms)
{
    if (ms && (!r->bound_ms || ms < r->bound_ms))
        r->bound_ms = ms;
}

typedef struct cbt_hv_source {
    const char *name;
    void *ctx;
    /* On the harvester thread, before its first round. May be NULL. */
    void (*start)(void *ctx);
    /* One round's work. Under cbt_tracer.lock. */
    void (*poll)(void *ctx, cbt_hv_round *r);
    /* After the round, outside the lock: work that may take a system call
     * (faulting pages in, asking CUPTI for its buffers). May be NULL. */
    void (*after)(void *ctx);
    /* Whether anything committed waits (the re-check before a deep sleep;
     * harvester.c, "Sleeping"). May be NULL (never). Any thread's commits
     * since the caller's barrier must be seen: read the producers' words. */
    int (*committed)(void *ctx);
    /* The stop path (cbt_harvester_finish_), under the lock: `last` is a
     * live tracer's last poll, before the taps' on_stop; `finish` ends what
     * is still open, after them and before the subscribers' on_shutdown.
     * Either may be NULL. */
    void (*last)(void *ctx);
    void (*finish)(void *ctx);
} cbt_hv_source;

typedef struct cbt_hv_tap {
    const char *name;
    void *ctx;
    /* The clock map was refitted (the records after it convert by the new
     * map). Under cbt_tracer.lock. May be NULL. */
    void (*on_clock)(void *ctx);
    /* A round ended (the tap may write what it gathered). Outside the lock.
     * May be NULL. */
    void (*on_round_end)(void *ctx);
    /* The stop path, before the subscribers end what is open. Under the
     * lock. May be NULL. */
    void (*on_stop)(void *ctx);
} cbt_hv_tap;

#endif /* CBT_HOST_INTERNAL_HARVEST_H */
