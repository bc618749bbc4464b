/* host/spans/sink_thread.c — owns the sink thread: a sink that may wait (a
 * file, a pipe, a program's own) runs here, behind a bounded queue, so that
 * neither the harvester nor a publisher ever waits for it (internal/sinks.h,
 * cbt/span.h "Threads, and who may wait").
 *
 * The wrapper is a CBT_SINK_NONBLOCKING sink. Its on_span copies the used
 * part of the span into a byte ring of compact records (internal/
 * span_queue.h) under `mu`, which is held only for such copies and index
 * updates — never across a call into the inner sink — and wakes the thread
 * if it sleeps (at most once per sleep: the waker clears `sleeping`). A full
 * queue drops the span and counts it in `lost`. CTA records go into a plain
 * array ring the same way.
 *
 * The thread takes the records below the tail it saw under `mu`, expands
 * each without the lock (a push only writes free bytes), hands it to the
 * inner sink (counted under `mu`, so the stop's count of what it still holds
 * is exact) and frees it. A flush (flush_within, any thread) notes the
 * queue's tails and a ticket (reusing a pending request that covers them);
 * the thread, once it has delivered up to those tails, calls the inner
 * flush and publishes the ticket; the flusher waits on `done_cv` until then,
 * its deadline, or cbt_shutdown's abort (the shutdown flushes everything).
 *
 * Stop (cbt_sink_thread_stop_post_ / _wait_, at shutdown: every sink thread
 * is told first, then each waited for, against one deadline): `stop` is set; the thread
 * delivers what is queued, keeps the inner sink's loss count, destroys the
 * inner sink (on its own thread: a destroy may write), exits and says so.
 * Every signal is blocked on the thread: a write into a pipe whose reader
 * left fails with EPIPE (counted) instead of raising SIGPIPE. If it has not by the
 * deadline — the inner sink is stuck in a write — the wrapper is abandoned:
 * the spans still queued are counted lost now (one already handed over is
 * the inner sink's to count: written when its write completes, or counted
 * by it), the thread is detached, and from then on it delivers nothing
 * more: when its call returns it keeps the inner count and destroys the
 * inner sink. The wrapper is freed by whichever of the thread and the
 * tracer's destroy lets go last (`refs`).
 *
 * An inner sink flagged CBT_SINK_FLUSH_IDLE is also flushed each time the
 * thread has handed over every queued span (no flush request pending).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal/abi.h"
#include "internal/clock.h"
#include "internal/sinks.h"
#include "internal/span_queue.h"

typedef struct sink_thread {
    cbt_sink inner;
    _Atomic uint64_t errors;              /* inner callbacks that failed (its own: an
                                             abandoned thread outlives the tracer) */
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* the thread waits for work */
    pthread_cond_t done_cv; /* flushers and the stop wait for the thread */
    /* under mu */
    cbt_spanq q;
    cbt_cta_record *cta;
    uint64_t cta_head, cta_tail;          /* running counts */
    uint64_t pushed;                      /* span records queued */
    uint64_t flush_req, flush_done;       /* tickets */
    uint64_t flush_pos, flush_cta;        /* tails the newest request waits for */
    int sleeping, stop, exited, abandoned, joined;
    int refs;                             /* the thread and the tracer */
    /* counters any thread reads */
    uint64_t delivered;                   /* span records handed to the inner on_span (under mu) */
    _Atomic uint64_t lost;                /* dropped: queue full, or abandoned */
    _Atomic uint64_t inner_lost_final;    /* the inner spans_lost, kept before its destroy */
    _Atomic int gone;                     /* the inner sink is destroyed: read the kept count */
    int flush_abort;                      /* cbt_shutdown began: flushers stop waiting */
    cbt_span scratch;                     /* the thread's expanded record */
} sink_thread;

static void wait_until(pthread_cond_t *cv, pthread_mutex_t *m, uint64_t deadline_ns)
{
    struct timespec ts = {(time_t)(deadline_ns / 1000000000ull),
                          (long)(deadline_ns % 1000000000ull)};
    pthread_cond_timedwait(cv, m, &ts);
}

static void st_free(sink_thread *w)
{
    cbt_spanq_free(&w->q);
    free(w->cta);
    pthread_cond_destroy(&w->work_cv);
    pthread_cond_destroy(&w->done_cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

/* Drop one reference (under mu); the last frees. Returns 1 when freed. */
static int unref_locked(sink_thread *w)
{
    if (--w->refs > 0)
        return 0;
    pthread_mutex_unlock(&w->mu);
    st_free(w);
    return 1;
}

static void count_error(sink_thread *w, cbt_status st)
{
    if (st != CBT_OK)
        atomic_fetch_add_explicit(&w->errors, 1, memory_order_relaxed);
}

static void *st_main(void *arg)
{
    sink_thread *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        if (w->abandoned)
            break;
        int spans = w->q.tail != w->q.head, ctas = w->cta_tail != w->cta_head;
        int flush = w->flush_req > w->flush_done && w->q.head >= w->flush_pos &&
                    w->cta_head >= w->flush_cta;
        if (!spans && !ctas && !flush) {
            if (w->stop)
                break;
            w->sleeping = 1;
            pthread_cond_wait(&w->work_cv, &w->mu);
            w->sleeping = 0;
            continue;
        }
        if (spans) {
            /* one record at a time: expanded without the lock (a push only
             * writes free bytes), then handed over under it — the stop's
             * count of what we still hold and our handing over exclude each
             * other, so a span is counted lost or given to the inner sink,
             * never both — and its bytes freed once on_span returned */
            uint64_t pos = w->q.head, tail = w->q.tail;
            int quit = 0;
            while (pos < tail && !quit) {
                pthread_mutex_unlock(&w->mu);
                uint64_t next = cbt_spanq_read(&w->q, pos, &w->scratch);
                pthread_mutex_lock(&w->mu);
                if (w->abandoned) {
                    quit = 1;
                    break;
                }
                w->delivered++;
                pthread_mutex_unlock(&w->mu);
                count_error(w, w->inner.on_span(w->inner.ctx, &w->scratch));
                pthread_mutex_lock(&w->mu);
                if (w->abandoned)
                    quit = 1;
                cbt_spanq_release(&w->q, next);
                pos = next;
            }
            if (quit)
                break;
        }
        if (ctas) {
            uint64_t from = w->cta_head, to = w->cta_tail;
            pthread_mutex_unlock(&w->mu);
            for (uint64_t i = from; i < to; i++)
                if (w->inner.on_cta)
                    count_error(w, w->inner.on_cta(w->inner.ctx,
                                                   &w->cta[i % CBT_SINK_CTA_QUEUE]));
            pthread_mutex_lock(&w->mu);
            if (w->abandoned)
                break;
            w->cta_head = to;
        }
        if (spans && (w->inner.flags & CBT_SINK_FLUSH_IDLE) && w->inner.flush &&
            w->q.head == w->q.tail && !(w->flush_req > w->flush_done)) {
            /* everything queued is handed over, and no flush is asked for
             * (it would flush right below): what arrived together goes out
             * now (cbt/span.h, CBT_SINK_FLUSH_IDLE) */
            pthread_mutex_unlock(&w->mu);
            count_error(w, w->inner.flush(w->inner.ctx));
            pthread_mutex_lock(&w->mu);
            if (w->abandoned)
                break;
        }
        if (w->flush_req > w->flush_done && w->q.head >= w->flush_pos &&
            w->cta_head >= w->flush_cta) {
            uint64_t ticket = w->flush_req;
            pthread_mutex_unlock(&w->mu);
            if (w->inner.flush)
                count_error(w, w->inner.flush(w->inner.ctx));
            pthread_mutex_lock(&w->mu);
            if (w->abandoned)
                break;
            w->flush_done = ticket;
            pthread_cond_broadcast(&w->done_cv);
        }
    }
    /* The inner sink ends here, on its own thread (its destroy may write:
     * a pipe whose reader left must not raise SIGPIPE in the program's
     * thread, nor a slow disk hold it): its loss count is kept first. */
    if (!w->abandoned && w->inner.flush) {
        /* stopped: what the inner sink buffered is written before its
         * count is kept (a stop may come before any flush was asked) */
        pthread_mutex_unlock(&w->mu);
        count_error(w, w->inner.flush(w->inner.ctx));
        pthread_mutex_lock(&w->mu);
    }
    /* under mu: st_spans_lost reads the inner count under it too */
    atomic_store_explicit(&w->inner_lost_final,
                          w->inner.spans_lost ? w->inner.spans_lost(w->inner.ctx) : 0,
                          memory_order_relaxed);
    atomic_store_explicit(&w->gone, 1, memory_order_release);
    pthread_mutex_unlock(&w->mu);
    if (w->inner.destroy)
        w->inner.destroy(w->inner.ctx);
    w->inner.destroy = NULL;
    pthread_mutex_lock(&w->mu);
    w->exited = 1;
    pthread_cond_broadcast(&w->done_cv);
    if (!unref_locked(w))
        pthread_mutex_unlock(&w->mu);
    return NULL;
}

static cbt_status st_on_span(void *ctx, const cbt_span *s)
{
    sink_thread *w = ctx;
    pthread_mutex_lock(&w->mu);
    int ok = !w->stop && cbt_spanq_push(&w->q, s);
    if (ok) {
        w->pushed++;
        if (w->sleeping) {
            w->sleeping = 0; /* one wake per sleep */
            pthread_cond_signal(&w->work_cv);
        }
    }
    pthread_mutex_unlock(&w->mu);
    if (!ok) /* a loss, counted in spans_lost; not a sink error */
        atomic_fetch_add_explicit(&w->lost, 1, memory_order_relaxed);
    return CBT_OK;
}

static cbt_status st_on_cta(void *ctx, const cbt_cta_record *r)
{
    sink_thread *w = ctx;
    pthread_mutex_lock(&w->mu);
    int ok = !w->stop && w->cta_tail - w->cta_head < CBT_SINK_CTA_QUEUE;
    if (ok) {
        w->cta[w->cta_tail++ % CBT_SINK_CTA_QUEUE] = *r;
        if (w->sleeping) {
            w->sleeping = 0;
            pthread_cond_signal(&w->work_cv);
        }
    }
    pthread_mutex_unlock(&w->mu);
    return ok ? CBT_OK : CBT_ERR_FULL;
}

/* Ask for a flush of everything queued so far: the ticket to wait for. A
 * request still pending that already covers the queue is reused, so a
 * flusher that waits in slices never asks for a second inner flush. */
static uint64_t flush_post_locked(sink_thread *w)
{
    if (w->flush_req > w->flush_done && w->flush_pos == w->q.tail &&
        w->flush_cta == w->cta_tail)
        return w->flush_req;
    w->flush_pos = w->q.tail;
    w->flush_cta = w->cta_tail;
    if (w->sleeping) {
        w->sleeping = 0;
        pthread_cond_signal(&w->work_cv);
    }
    return ++w->flush_req;
}

uint64_t cbt_sink_thread_flush_post_(void *ctx)
{
    sink_thread *w = ctx;
    pthread_mutex_lock(&w->mu);
    uint64_t t = w->exited || w->abandoned ? 0 : flush_post_locked(w);
    pthread_mutex_unlock(&w->mu);
    return t;
}

cbt_status cbt_sink_thread_flush_wait_(void *ctx, uint64_t ticket, uint64_t deadline_ns)
{
    sink_thread *w = ctx;
    pthread_mutex_lock(&w->mu);
    while (ticket && w->flush_done < ticket && !w->exited && !w->abandoned &&
           !w->flush_abort && cbt_clock_mono_ns() < deadline_ns)
        wait_until(&w->done_cv, &w->mu, deadline_ns);
    cbt_status st = !ticket || w->flush_done >= ticket || w->exited || w->flush_abort
                        ? CBT_OK
                        : CBT_ERR_TIMEOUT;
    pthread_mutex_unlock(&w->mu);
    return st;
}

void cbt_sink_thread_flush_abort_(void *ctx, int on)
{
    sink_thread *w = ctx;
    pthread_mutex_lock(&w->mu);
    w->flush_abort = on;
    pthread_cond_broadcast(&w->done_cv);
    pthread_mutex_unlock(&w->mu);
}

static cbt_status st_flush_within(void *ctx, uint32_t timeout_ms)
{
    uint64_t deadline = cbt_clock_mono_ns() + (uint64_t)timeout_ms * 1000000ull;
    return cbt_sink_thread_flush_wait_(ctx, cbt_sink_thread_flush_post_(ctx), deadline);
}

static cbt_status st_flush(void *ctx) { return st_flush_within(ctx, 0xffffffffu); }

/* Our drops, and the inner sink's own count: read live while it exists
 * (under mu, which the thread holds to keep the count and mark it gone
 * before the destroy; mu is never held across a call that waits), kept
 * after. */
static uint64_t st_spans_lost(void *ctx)
{
    sink_thread *w = ctx;
    pthread_mutex_lock(&w->mu);
    uint64_t n = atomic_load_explicit(&w->lost, memory_order_relaxed);
    if (atomic_load_explicit(&w->gone, memory_order_acquire))
        n += atomic_load_explicit(&w->inner_lost_final, memory_order_relaxed);
    else if (w->inner.spans_lost)
        n += w->inner.spans_lost(w->inner.ctx);
    pthread_mutex_unlock(&w->mu);
    return n;
}

void cbt_sink_thread_stop_post_(void *ctx)
{
    sink_thread *w = ctx;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    if (w->sleeping) {
        w->sleeping = 0;
        pthread_cond_signal(&w->work_cv);
    }
    pthread_mutex_unlock(&w->mu);
}

int cbt_sink_thread_stop_wait_(void *ctx, uint64_t deadline_ns)
{
    sink_thread *w = ctx;
    pthread_mutex_lock(&w->mu);
    while (!w->exited && !w->abandoned && cbt_clock_mono_ns() < deadline_ns)
        wait_until(&w->done_cv, &w->mu, deadline_ns);
    int exited = w->exited;
    if (!exited && !w->abandoned) {
        /* stuck in the inner sink: what we still hold will never arrive (a
         * span already handed over is the inner sink's to count, live until
         * its thread keeps the count at its destroy); under mu, so the
         * thread hands over nothing after this count */
        uint64_t held = w->pushed - w->delivered;
        atomic_fetch_add_explicit(&w->lost, held, memory_order_relaxed);
        w->abandoned = 1;
        pthread_detach(w->th);
    }
    int joined = exited && !w->joined;
    w->joined |= exited;
    pthread_mutex_unlock(&w->mu);
    if (joined)
        pthread_join(w->th, NULL);
    return exited;
}

static void st_destroy(void *ctx)
{
    sink_thread *w = ctx;
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    if (!w->stop || (!w->exited && !w->abandoned)) {
        pthread_mutex_unlock(&w->mu);
        /* not stopped yet (an add that failed after the wrap): stop now */
        cbt_sink_thread_stop_post_(w);
        (void)cbt_sink_thread_stop_wait_(w, cbt_clock_mono_ns() + 2000000000ull);
        pthread_mutex_lock(&w->mu);
    } else if (w->exited && !w->joined) {
        w->joined = 1;
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->th, NULL);
        pthread_mutex_lock(&w->mu);
    }
    if (!unref_locked(w))
        pthread_mutex_unlock(&w->mu);
}

int cbt_sink_is_thread_(const cbt_sink *k) { return k->on_span == st_on_span; }

uint64_t cbt_sink_thread_errors_(void *ctx)
{
    sink_thread *w = ctx;
    return atomic_load_explicit(&w->errors, memory_order_relaxed);
}

cbt_status cbt_sink_thread_wrap_(const cbt_sink *inner, cbt_sink *out)
{
    sink_thread *w = calloc(1, sizeof *w);
    if (!w)
        return CBT_ERR_NOMEM;
    w->inner = *inner;
    if (cbt_spanq_init(&w->q, CBT_SINK_QUEUE_BYTES) != CBT_OK ||
        !(w->cta = calloc(CBT_SINK_CTA_QUEUE, sizeof *w->cta))) {
        cbt_spanq_free(&w->q);
        free(w->cta);
        free(w);
        return CBT_ERR_NOMEM;
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->done_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&w->work_cv, NULL);
    w->refs = 2;
    /* signals are the program's threads' business: the thread starts with
     * every signal blocked (a write to a pipe whose reader left returns
     * EPIPE there, counted lost, never SIGPIPE) */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&w->th, NULL, st_main, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        st_free(w);
        return CBT_ERR_THREAD;
    }
    memset(out, 0, sizeof *out);
    out->version = CBT_SINK_VERSION;
    out->size = sizeof *out;
    out->name = inner->name;
    out->ctx = w;
    out->on_span = st_on_span;
    out->flush = st_flush;
    out->destroy = st_destroy;
    out->on_cta = st_on_cta;
    out->spans_lost = st_spans_lost;
    out->flags = CBT_SINK_NONBLOCKING;
    out->flush_within = st_flush_within;
    return CBT_OK;
}
