/* host/core/harvester.c — owns the harvester thread: drain the bus, resolve stream
 * marks, dispatch events to subscribers in the order their times become known.
 *
 * Order: events are dispatched in the order of their publish stamps, merged
 * across the per-thread lanes and the shared bus. A round reads the clock
 * (T, with no later load allowed to run first) and repeatedly takes the
 * committed lane head with the smallest stamp <= T. Why this is causal: if
 * event X was committed before the thread that publishes Y saw it (X caused
 * Y), Y is stamped after X's commit (publishes stamp with rdtscp, which waits
 * for the thread's earlier loads, clock.h), so X's stamp < Y's; and if Y's
 * stamp <= T, X was committed before the round read T and is visible to the
 * peeks that follow. Events stamped after T wait for the next round. A
 * CPU-stream mark is stamped by the stream's worker when reached, so it is
 * ordered at that moment. A CUDA mark is known only when its CUDA event
 * completes: it waits in its stream's pending FIFO (stream order) and is
 * dispatched by the poll after completion.
 *
 * Stop path: cbt_shutdown() clears the active tracer, sets `stop`, and joins.
 * The loop then drains the queue, waits for pending CUDA marks up to
 * shutdown_timeout_ms (marks still pending then are abandoned: their count is
 * left in t->abandoned_marks, so the CUDA ring's frees do not wait for the
 * device either), asks CUPTI for its completed records, calls every
 * subscriber's on_shutdown (which ends open spans as incomplete) and flushes
 * the sinks.
 *
 * CUPTI: each round, outside the lock, cbt_cupti_periodic_ (a default flush
 * every 100 ms while CUPTI is enabled; one atomic load otherwise).
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "internal/tracer.h"

#define BATCH_MAX 1024u
#define CLOCK_REFRESH_NS 500000000ull /* refit the tick->unix map twice a second */

/* Dispatch to the subscribers; with `stamp_ticks` != 0, also record now -
 * stamp as the dispatch lag (done for the oldest event of each round). */
void cbt_dispatch_(cbt_tracer *t, const cbt_event *ev, uint64_t stamp_ticks)
{
    if (stamp_ticks) {
        uint64_t now = cbt_clock_ticks();
        uint64_t lag = now > stamp_ticks ? (uint64_t)((double)(now - stamp_ticks) *
                                                       t->clock.ns_per_tick)
                                         : 0;
        atomic_store_explicit(&t->lag_last_ns, lag, memory_order_relaxed);
        if (lag > atomic_load_explicit(&t->lag_max_ns, memory_order_relaxed))
            atomic_store_explicit(&t->lag_max_ns, lag, memory_order_relaxed);
    }
    for (uint32_t i = 0; i < t->n_subs; i++) {
        cbt_subscriber *s = &t->subs[i];
        if (!cbt_subscriber_wants(s, ev->type))
            continue;
        if (s->on_event(s->ctx, t, ev) != CBT_OK)
            atomic_fetch_add_explicit(&t->subscriber_errors, 1, memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&t->dispatched, 1, memory_order_relaxed);
}

/* `lag_ticks`: the item's stamp when its dispatch lag should be measured
 * (the oldest item of a round), else 0. */
static void handle(cbt_tracer *t, cbt_bus_item *it, uint64_t lag_ticks)
{
    if (it->stream) {
        cbt_stream_defer_(it->stream, t, it);
        return;
    }
    if (!(it->ev.flags & CBT_EVF_EXPLICIT_TS))
        it->ev.ts = cbt_clock_to_unix(&t->clock, it->ticks);
    cbt_dispatch_(t, &it->ev, lag_ticks);
}

static void flush_sinks(cbt_tracer *t)
{
    for (uint32_t i = 0; i < t->n_sinks; i++)
        if (t->sinks[i].flush && t->sinks[i].flush(t->sinks[i].ctx) != CBT_OK)
            atomic_fetch_add_explicit(&t->sink_errors, 1, memory_order_relaxed);
}

static void sleep_us(uint32_t us)
{
    struct timespec d = {.tv_sec = us / 1000000u, .tv_nsec = (long)(us % 1000000u) * 1000L};
    nanosleep(&d, NULL);
}

/* One round over every source (shared bus + lanes), under t->lock. Returns
 * the number of events handled; *drained tells whether the round stopped
 * because nothing stamped at or before the cutoff was left. */
static uint32_t drain_round(cbt_tracer *t, uint64_t cutoff, int *drained)
{
    cbt_bus *src[1 + CBT_MAX_LANES];
    uint64_t head[1 + CBT_MAX_LANES];
    uint8_t has[1 + CBT_MAX_LANES], popped[1 + CBT_MAX_LANES];
    uint32_t k = 0;
    src[k++] = &t->bus;
    for (uint32_t i = 0; i < t->n_lanes; i++)
        src[k++] = &t->lanes[i]->bus;
    for (uint32_t i = 0; i < k; i++) {
        has[i] = (uint8_t)cbt_bus_peek(src[i], &head[i]);
        popped[i] = 0;
    }
    uint32_t n = 0;
    cbt_bus_item it;
    *drained = 0;
    while (n < BATCH_MAX) {
        int best = -1;
        for (uint32_t i = 0; i < k; i++)
            if (has[i] && head[i] <= cutoff && (best < 0 || head[i] < head[best]))
                best = (int)i;
        if (best < 0) {
            *drained = 1;
            break;
        }
        if (!cbt_bus_pop(src[best], &it)) { /* cannot happen: peeked committed */
            has[best] = 0;
            continue;
        }
        handle(t, &it, n == 0 ? it.ticks : 0); /* the oldest sets the lag */
        n++;
        popped[best] = 1;
        has[best] = (uint8_t)cbt_bus_peek(src[best], &head[best]);
    }
    for (uint32_t i = 0; i < k; i++)
        if (popped[i])
            cbt_bus_release(src[i]);
    return n;
}

void *cbt_harvester_main_(void *arg)
{
    cbt_tracer *t = arg;
    if (t->cuda_ring)
        cbt_ring_cuda_bind_(t->cuda_ring);
    uint64_t refresh_ticks = (uint64_t)((double)CLOCK_REFRESH_NS / t->clock.ns_per_tick);
    uint64_t next_refresh = cbt_clock_ticks() + refresh_ticks;
    uint64_t stop_deadline = 0;

    for (;;) {
        int stopping = atomic_load_explicit(&t->stop, memory_order_acquire);
        uint32_t pending = 0;
        int drained = 0;
        pthread_mutex_lock(&t->lock);
        uint64_t round_ticks = cbt_clock_ticks_before_loads();
        uint32_t n = drain_round(t, round_ticks, &drained);
        if (n) {
            uint64_t busy = (uint64_t)((double)(cbt_clock_ticks() - round_ticks) *
                                       t->clock.ns_per_tick);
            atomic_fetch_add_explicit(&t->busy_ns, busy, memory_order_relaxed);
        }
        /* CUDA marks first: a launch's KERNEL_LAUNCH mark resolves before
         * its records are joined */
        for (uint32_t i = 0; i < t->n_streams; i++)
            pending += cbt_stream_poll_(t->streams[i], t);
        cbt_kspans_poll_(t);
        atomic_store_explicit(&t->pending_marks, pending, memory_order_relaxed);
        cbt_lanes_reap_(t);
        uint64_t flush_to = 0;
        cbt_sink snap[CBT_MAX_SINKS];
        uint32_t n_snap = 0;
        if (t->flush_req > t->flush_done && drained && pending == 0 &&
            round_ticks >= t->flush_ticks) {
            flush_to = t->flush_req;
            n_snap = t->n_sinks;
            memcpy(snap, t->sinks, n_snap * sizeof *snap);
        }
        pthread_mutex_unlock(&t->lock);
        if (flush_to) {
            /* a sink's flush may wait (the OTLP exporter sends its queue):
             * never while holding the lock publishers' first publish needs */
            for (uint32_t i = 0; i < n_snap; i++)
                if (snap[i].flush && snap[i].flush(snap[i].ctx) != CBT_OK)
                    atomic_fetch_add_explicit(&t->sink_errors, 1, memory_order_relaxed);
            pthread_mutex_lock(&t->lock);
            if (t->flush_done < flush_to)
                t->flush_done = flush_to;
            pthread_cond_broadcast(&t->flush_cv);
            pthread_mutex_unlock(&t->lock);
        }

        if (stopping && drained && n == 0) {
            uint64_t now = cbt_clock_unix_now();
            if (!stop_deadline)
                stop_deadline = now + (uint64_t)t->cfg.shutdown_timeout_ms * 1000000ull;
            if (pending == 0)
                break;
            if (now >= stop_deadline) {
                /* a stream that never completes (a hung kernel) must not
                 * hold shutdown: its marks are dropped, and said so */
                fprintf(stderr,
                        "cbt: shutdown: %u stream mark(s) still pending after %u ms were "
                        "dropped (their events and spans are lost)\n",
                        pending, t->cfg.shutdown_timeout_ms);
                t->abandoned_marks = pending;
                break;
            }
        }
        if (n == 0 || drained) {
            uint64_t now_t = cbt_clock_ticks();
            if (now_t >= next_refresh) {
                cbt_clock_map_refresh(&t->clock);
                next_refresh = now_t + refresh_ticks;
            }
        }
        cbt_cupti_periodic_();
        if (n == 0)
            sleep_us(stopping ? 50 : t->cfg.poll_interval_us);
    }

    (void)cbt_cupti_flush(); /* completed kernel records, for the last poll */
    pthread_mutex_lock(&t->lock);
    cbt_kspans_shutdown_(t);
    uint64_t now = cbt_clock_unix_now();
    for (uint32_t i = 0; i < t->n_subs; i++)
        if (t->subs[i].on_shutdown)
            t->subs[i].on_shutdown(t->subs[i].ctx, t, now);
    flush_sinks(t);
    t->flush_done = t->flush_req;
    pthread_cond_broadcast(&t->flush_cv);
    pthread_mutex_unlock(&t->lock);
    return NULL;
}
