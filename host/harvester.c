/* host/harvester.c — owns the harvester thread: drain the bus, resolve stream
 * marks, dispatch events to subscribers in the order their times become known.
 *
 * Order: a CPU-published event is known when it is published, so it is
 * dispatched in queue order. A CPU-stream mark is published by the stream's
 * worker when reached, so it too is in queue order at that point. A CUDA mark
 * is known only when its CUDA event completes: it waits in its stream's
 * pending FIFO (stream order) and is dispatched by the poll after completion.
 *
 * Stop path: cbt_shutdown() clears the active tracer, sets `stop`, and joins.
 * The loop then drains the queue, waits for pending CUDA marks up to
 * shutdown_timeout_ms, calls every subscriber's on_shutdown (which ends open
 * spans as incomplete) and flushes the sinks.
 */
#include <time.h>

#include "internal.h"

#define BATCH_MAX 1024u
#define CLOCK_REFRESH_NS 500000000ull /* refit the tick->unix map twice a second */

uint64_t cbt_tracer_ticks_to_unix_(cbt_tracer *t, uint64_t ticks)
{
    return cbt_clock_to_unix(&t->clock, ticks);
}

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

static void handle(cbt_tracer *t, cbt_bus_item *it)
{
    if (it->stream) {
        cbt_stream_defer_(it->stream, it);
        return;
    }
    if (!(it->ev.flags & CBT_EVF_EXPLICIT_TS))
        it->ev.ts = cbt_clock_to_unix(&t->clock, it->ticks);
    cbt_dispatch_(t, &it->ev, it->ticks);
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

void *cbt_harvester_main_(void *arg)
{
    cbt_tracer *t = arg;
    cbt_bus_item it;
    uint64_t refresh_ticks = (uint64_t)((double)CLOCK_REFRESH_NS / t->clock.ns_per_tick);
    uint64_t next_refresh = cbt_clock_ticks() + refresh_ticks;
    uint64_t stop_deadline = 0;

    for (;;) {
        int stopping = atomic_load_explicit(&t->stop, memory_order_acquire);
        uint32_t n = 0, pending = 0;
        uint64_t busy0 = cbt_clock_ticks();
        pthread_mutex_lock(&t->lock);
        while (n < BATCH_MAX && cbt_bus_pop(&t->bus, &it)) {
            handle(t, &it);
            n++;
        }
        if (n) {
            cbt_bus_release(&t->bus);
            uint64_t busy = (uint64_t)((double)(cbt_clock_ticks() - busy0) * t->clock.ns_per_tick);
            atomic_fetch_add_explicit(&t->busy_ns, busy, memory_order_relaxed);
        }
        for (uint32_t i = 0; i < t->n_streams; i++)
            pending += cbt_stream_poll_(t->streams[i], t);
        atomic_store_explicit(&t->pending_marks, pending, memory_order_relaxed);
        if (t->flush_req > t->flush_done && pending == 0 &&
            atomic_load_explicit(&t->bus.head, memory_order_relaxed) >= t->flush_ticket) {
            flush_sinks(t);
            t->flush_done = t->flush_req;
            pthread_cond_broadcast(&t->flush_cv);
        }
        pthread_mutex_unlock(&t->lock);

        if (stopping && n == 0) {
            uint64_t now = cbt_clock_unix_now();
            if (!stop_deadline)
                stop_deadline = now + (uint64_t)t->cfg.shutdown_timeout_ms * 1000000ull;
            if (pending == 0 || now >= stop_deadline)
                break;
        }
        if (n == 0) {
            uint64_t now_t = cbt_clock_ticks();
            if (now_t >= next_refresh) {
                cbt_clock_map_refresh(&t->clock);
                next_refresh = now_t + refresh_ticks;
            }
            sleep_us(stopping ? 50 : t->cfg.poll_interval_us);
        }
    }

    pthread_mutex_lock(&t->lock);
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
