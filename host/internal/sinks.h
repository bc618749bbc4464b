/* host/internal/sinks.h — the tracer's sinks (host/spans/sinks.c) and the
 * sink thread that runs a sink which may wait (host/spans/sink_thread.c).
 *
 * The list is append-only: cbt_add_sink writes a slot, then publishes the
 * count (release); the harvester and cbt_metrics_get read the count
 * (acquire) and the slots below it without a lock. Adders are serialised by
 * the list's own mutex, which nothing else takes. A sink that is not
 * CBT_SINK_NONBLOCKING (cbt/span.h) is wrapped in a sink thread when the
 * list belongs to a live tracer, so no callback of it runs on the harvester.
 */
#ifndef CBT_HOST_INTERNAL_SINKS_H
#define CBT_HOST_INTERNAL_SINKS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "cbt/span.h"

#define CBT_MAX_SINKS 16

typedef struct cbt_sinks {
    cbt_sink k[CBT_MAX_SINKS];
    _Atomic uint32_t n;         /* slots in use; release after the slot is written */
    _Atomic uint64_t errors;    /* callbacks that returned non-zero (cbt_metrics.sink_errors) */
    pthread_mutex_t add_lock;   /* serialises cbt_sinks_add_; held for a copy */
    uint32_t shutdown_ms;       /* a sink thread's bound at stop */
    int threads;                /* wrap blocking sinks (a live tracer) */
} cbt_sinks;

/* Set up an empty list; `threads`: run sinks that may wait on sink threads
 * (live), or call every sink directly (a replay). */
void cbt_sinks_init_(cbt_sinks *l, int threads, uint32_t shutdown_ms);
/* Add a caller's sink (a versioned struct from an older caller is widened:
 * internal/abi.h). CBT_ERR_INVAL (no on_span), CBT_ERR_FULL, CBT_ERR_NOMEM,
 * CBT_ERR_THREAD, CBT_ERR_VERSION. Any thread; waits only for another adder. */
cbt_status cbt_sinks_add_(cbt_sinks *l, const cbt_sink *caller);
/* Hand a finished span / a CTA record to every sink. The harvester. Never
 * waits (a sink thread's queue drops when full). */
void cbt_sinks_span_(cbt_sinks *l, const cbt_span *s);
void cbt_sinks_cta_(cbt_sinks *l, const cbt_cta_record *r);
/* Flush every sink, waiting at most timeout_ms in all: CBT_ERR_TIMEOUT when
 * one was not done by then, CBT_ERR_IO when one failed (counted). Any thread. */
cbt_status cbt_sinks_flush_(cbt_sinks *l, uint32_t timeout_ms);
/* Spans the sinks will never deliver (the sum of their spans_lost). Any
 * thread; never waits. */
uint64_t cbt_sinks_lost_(cbt_sinks *l);
/* Shutdown, after the last spans were handed over and flushed: each sink
 * thread delivers what it holds and exits, within shutdown_ms in all, or is
 * abandoned (docs: cbt/span.h). Then cbt_sinks_lost_ is final. */
void cbt_sinks_stop_(cbt_sinks *l);
/* Destroy every sink (a sink thread's inner sink when it exited; an
 * abandoned one's thread does it later). After cbt_sinks_stop_. */
void cbt_sinks_destroy_(cbt_sinks *l);

/* Wrap `inner` (taken over: its destroy is called once, by whoever lets go
 * last) in a sink thread with a queue of CBT_SINK_QUEUE_BYTES; *out is a
 * CBT_SINK_NONBLOCKING sink. `errors` counts the inner callbacks' failures. */
cbt_status cbt_sink_thread_wrap_(const cbt_sink *inner, _Atomic uint64_t *errors,
                                 uint32_t shutdown_ms, cbt_sink *out);
/* The sink thread's stop (cbt_sinks_stop_): ask it to deliver what it holds
 * and exit; wait until `deadline_ns` (CLOCK_MONOTONIC) at most; abandon it
 * past that. 1 when it exited. */
int cbt_sink_thread_stop_(void *ctx, uint64_t deadline_ns);
/* Whether a sink is a sink thread's wrapper. */
int cbt_sink_is_thread_(const cbt_sink *k);

#endif /* CBT_HOST_INTERNAL_SINKS_H */
