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
/* Flush every sink, waiting until deadline_ns (CLOCK_MONOTONIC) at most in
 * all (the sink threads flush at once): CBT_ERR_TIMEOUT when one was not
 * done by then, CBT_ERR_IO when one failed (counted). Any thread. */
cbt_status cbt_sinks_flush_(cbt_sinks *l, uint64_t deadline_ns);
/* on: cbt_shutdown began, flushes waiting for a sink thread return now;
 * off: the shutdown's own flush may wait again. */
void cbt_sinks_flush_abort_(cbt_sinks *l, int on);
/* Sink errors: the list's count and every sink thread's own. Never waits. */
uint64_t cbt_sinks_errors_(cbt_sinks *l);
/* Spans the sinks will never deliver (the sum of their spans_lost). Any
 * thread; never waits. */
uint64_t cbt_sinks_lost_(cbt_sinks *l);
/* Shutdown, after the last spans were handed over and flushed: every sink
 * thread is told to deliver what it holds and exit, then each is waited for,
 * until deadline_ns (CLOCK_MONOTONIC) in all, or abandoned (cbt/span.h). Then
 * cbt_sinks_lost_ counts every span a thread held; a span an abandoned
 * thread had handed to its sink is that sink's to count, and the count is
 * read live until that thread destroys it. */
void cbt_sinks_stop_(cbt_sinks *l, uint64_t deadline_ns);
/* The first half of the stop alone: every sink thread told to deliver what
 * it holds, flush and exit, at once, so that it does so while the
 * shutdown flushes the non-blocking sinks (an exporter may take all of
 * shutdown_timeout_ms): a sink thread is abandoned only if it is stuck
 * itself. */
void cbt_sinks_stop_post_(cbt_sinks *l);
/* Destroy every sink (a sink thread's inner sink when it exited; an
 * abandoned one's thread does it later). After cbt_sinks_stop_. */
void cbt_sinks_destroy_(cbt_sinks *l);

/* Wrap `inner` (taken over: its destroy is called once, on the sink
 * thread, before it exits) in a sink thread with a queue of
 * CBT_SINK_QUEUE_BYTES; *out is a CBT_SINK_NONBLOCKING sink. */
cbt_status cbt_sink_thread_wrap_(const cbt_sink *inner, cbt_sink *out);
/* Whether a sink is a sink thread's wrapper. */
int cbt_sink_is_thread_(const cbt_sink *k);
/* Its inner sink's failed callbacks (its own counter: an abandoned thread
 * outlives the tracer). Never waits. */
uint64_t cbt_sink_thread_errors_(void *ctx);
/* A flush in two steps, so that several sink threads flush at once: post
 * (a ticket; 0 when the thread is gone), then wait for the ticket until
 * deadline_ns (CLOCK_MONOTONIC): CBT_ERR_TIMEOUT past it. */
uint64_t cbt_sink_thread_flush_post_(void *ctx);
cbt_status cbt_sink_thread_flush_wait_(void *ctx, uint64_t ticket, uint64_t deadline_ns);
/* on: cbt_shutdown began, flushers stop waiting (and return CBT_OK: the
 * shutdown flushes everything); off: waits again. */
void cbt_sink_thread_flush_abort_(void *ctx, int on);
/* The stop, in two steps (cbt_sinks_stop_): tell the thread to deliver what
 * it holds and exit; then wait until deadline_ns at most, and abandon it
 * past that. 1 when it exited. */
void cbt_sink_thread_stop_post_(void *ctx);
int cbt_sink_thread_stop_wait_(void *ctx, uint64_t deadline_ns);

#endif /* CBT_HOST_INTERNAL_SINKS_H */
