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
 *
 * Idle. While events flow, or anything is pending (CUDA stream marks, kernel
 * launches waiting for ring records, CUPTI collecting, a flush, stop), the
 * harvester polls every poll_interval_us. After IDLE_AFTER_US of empty
 * rounds with nothing pending it sleeps on the futex word t->hv_sleeping for
 * at most idle_sleep_ms (IDLE_RING_POLL_MS while a ring exists: ring
 * records need no publish), then does its periodic work (clock refit, the
 * rings) and looks again. Whoever commits something the harvester must see — a publish into
 * a lane or the bus (cbt_tracer_push_), a flush request, stop — reads that
 * word after the commit (cbt_harvester_nudge_: one plain load); the one that
 * finds it set and clears it (exchange) issues FUTEX_WAKE and counts it in
 * hv_wakeups.
 *
 * No lost wake-up (the Dekker pattern: we store the flag, then load the
 * sources; a publisher stores its commit, then loads the flag — each store
 * may sit in its CPU's store buffer past the load that follows it). The
 * publisher has no fence, only a compiler barrier; the harvester, after
 * storing the flag, calls membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED),
 * which runs a full barrier on every CPU running a thread of this process
 * before it returns, and only then re-checks every source (each lane and the
 * bus under the lock, flush_req, stop). So for each publisher either its
 * commit preceded that barrier — and our re-check sees it — or its load of
 * the flag follows the barrier, which follows our store: it sees 1 and wakes
 * us (if it clears the flag before FUTEX_WAIT, the wait returns at once: the
 * word is no longer 1). A lane a thread takes after our re-check is taken
 * under the lock we held, so that thread's first load of the flag already
 * sees our store. Without membarrier (not Linux, or refused) there is no
 * such guarantee: the harvester then waits at most IDLE_FALLBACK_MS, so a
 * missed wake-up costs that much delay and no more.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#if defined(__linux__)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "internal/counter.h"
#include "internal/futex.h"
#include "internal/recorder.h"
#include "internal/tracer.h"

#define IDLE_AFTER_US 1000u   /* empty rounds for this long, nothing pending: sleep
                                 (each round is a wake-up, ~30 us of CPU on a VM) */
#define IDLE_FALLBACK_MS 1u   /* the sleep's bound when membarrier is unavailable */
/* The sleep's bound while a ring exists: a kernel can write ring records no
 * publish announces (a launch outside CBT_KERNEL_SPAN's host side, a device
 * writing into the ring), and nothing can wake us for those; so we look at
 * least this often, and such records are read this late at worst (65536
 * records of a default ring last 250 ms at 262 k records/s). Each such
 * wake-up costs about 30 us of CPU on a VM, so 4 a second. */
#define IDLE_RING_POLL_MS 250u
/* The sleep's bound while kernel launches are open but nothing came for a
 * second (kernel_spans.c, WAIT_NS): their records may still come, in a
 * burst a ring must not overflow on (65536 records in 10 ms: 6.5 M/s). */
#define KSPANS_QUIET_MS 10u

#define BATCH_MAX 1024u
#define CLOCK_REFRESH_NS 500000000ull /* refit the tick->unix map twice a second */

/* Recording: the event, then the subscribers; a subscriber a replay does
 * not rebuild (a program's own) that starts spans draws span ids nothing in
 * the file explains, so the generator's state after it is recorded, and a
 * replay's later ids stay the live run's. */
static void dispatch_recorded(cbt_tracer *t, const cbt_event *ev)
{
    cbt_rec_event_(t, ev);
    for (uint32_t i = 0; i < t->n_subs; i++) {
        cbt_subscriber *s = &t->subs[i];
        if (!cbt_subscriber_wants(s, ev->type))
            continue;
        int mine = !cbt_rec_rebuilt_(s);
        cbt_ids before = t->ids;
        if (s->on_event(s->ctx, t, ev) != CBT_OK)
            cbt_count1_(&t->subscriber_errors);
        if (mine && !cbt_ids_same_(&before, &t->ids))
            cbt_rec_ids_(t);
    }
    cbt_count1_(&t->dispatched);
}

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
    if (__builtin_expect(t->rec != NULL, 0)) { /* recording (cbt/replay.h): off by default */
        dispatch_recorded(t, ev);
        return;
    }
    for (uint32_t i = 0; i < t->n_subs; i++) {
        cbt_subscriber *s = &t->subs[i];
        if (!cbt_subscriber_wants(s, ev->type))
            continue;
        if (s->on_event(s->ctx, t, ev) != CBT_OK)
            cbt_count1_(&t->subscriber_errors);
    }
    cbt_count1_(&t->dispatched);
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

/* ---- idle sleep (see "Idle" at the top) ---- */

#if defined(__linux__)
static int membarrier_register(void)
{
    long cmds = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED))
        return 0;
    return syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}

static int membarrier_all(void)
{
    return syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0;
}

#else
static int membarrier_register(void) { return 0; }
static int membarrier_all(void) { return 0; }
#endif

void cbt_harvester_wake_(cbt_tracer *t)
{
    /* one winner: the caller that turns 1 into 0 wakes and counts */
    if (atomic_exchange_explicit(&t->hv_sleeping, 0, memory_order_relaxed) == 1) {
        cbt_futex_wake_(&t->hv_sleeping, 1);
        atomic_fetch_add_explicit(&t->hv_wakeups, 1, memory_order_relaxed);
    }
}

/* Whether anything committed waits in a lane or the bus. Under t->lock
 * (the lane list). */
static int any_committed_locked(cbt_tracer *t)
{
    uint64_t ticks;
    if (cbt_bus_peek(&t->bus, &ticks))
        return 1;
    for (uint32_t i = 0; i < t->n_lanes; i++)
        if (cbt_bus_peek(&t->lanes[i]->bus, &ticks))
            return 1;
    return 0;
}

/* Announce the sleep, make the announcement visible to every publisher
 * (membarrier), re-check every source, and sleep unless something came.
 *
 * A sleep that times out (the rings' bound, the clock refit) leaves the
 * announcement standing: the main loop does one round and comes back, and
 * while the word is still 1 — no publisher has cleared it since the barrier
 * — the barrier need not be repeated: a commit before it is seen by the
 * re-check, and every commit after it finds the word set and wakes us. A
 * publisher that finds it set while we are between two timed sleeps clears
 * it and wakes no one (counted all the same); we then arm afresh. */
static void idle_sleep(cbt_tracer *t, uint32_t bound_ms)
{
    int armed = t->hv_armed && atomic_load_explicit(&t->hv_sleeping, memory_order_seq_cst) == 1;
    if (!armed) {
        atomic_store_explicit(&t->hv_sleeping, 1, memory_order_seq_cst);
        t->hv_armed = t->hv_membarrier && membarrier_all();
    }
    pthread_mutex_lock(&t->lock);
    int work = any_committed_locked(t) || t->flush_req > t->flush_done ||
               atomic_load_explicit(&t->stop, memory_order_acquire);
    pthread_mutex_unlock(&t->lock);
    if (!work) {
        uint32_t ms = t->hv_armed ? t->cfg.idle_sleep_ms : IDLE_FALLBACK_MS;
        if ((t->host_ring || t->cuda_ring) && ms > IDLE_RING_POLL_MS)
            ms = IDLE_RING_POLL_MS;
        if (bound_ms && ms > bound_ms)
            ms = bound_ms;
        cbt_futex_wait_(&t->hv_sleeping, 1u, ms); /* while the word is 1 */
    }
    if (work || !t->hv_armed ||
        atomic_load_explicit(&t->hv_sleeping, memory_order_seq_cst) == 0) {
        /* something came, we were woken, or no barrier backs the word */
        atomic_store_explicit(&t->hv_sleeping, 0, memory_order_relaxed);
        t->hv_armed = 0;
    }
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
    t->hv_membarrier = membarrier_register();
    uint32_t idle_rounds = 0, idle_after = IDLE_AFTER_US / t->cfg.poll_interval_us;

    for (;;) {
        int stopping = atomic_load_explicit(&t->stop, memory_order_acquire);
        uint32_t pending = 0;
        int kw = 0; /* cbt_kspans_waiting_, when asked */
        int drained = 0, flush_waiting = 0;
        pthread_mutex_lock(&t->lock);
        uint64_t round_ticks = cbt_clock_ticks_before_loads();
        t->hv_now = cbt_clock_to_unix(&t->clock, round_ticks);
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
        cbt_pop_range pop[8];
        uint32_t n_pop = cbt_lanes_populate_plan_(t, pop, 8);
        uint64_t flush_to = 0;
        cbt_sink snap[CBT_MAX_SINKS];
        uint32_t n_snap = 0;
        flush_waiting = t->flush_req > t->flush_done;
        if (t->flush_req > t->flush_done && drained && pending == 0 &&
            round_ticks >= t->flush_ticks) {
            flush_to = t->flush_req;
            n_snap = t->n_sinks;
            memcpy(snap, t->sinks, n_snap * sizeof *snap);
        }
        pthread_mutex_unlock(&t->lock);
        cbt_lanes_populate_run_(pop, n_pop); /* lanes in their first lap: ahead of their producers */
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
                /* under the lock: cbt_ring_stats_get reads the map from
                 * the caller's thread under it (a race TSan saw once the
                 * refit came with every wake from an idle sleep) */
                pthread_mutex_lock(&t->lock);
                cbt_clock_map_refresh(&t->clock);
                if (t->rec)
                    cbt_rec_clock_(t); /* ring records after it convert by the new map */
                pthread_mutex_unlock(&t->lock);
                next_refresh = now_t + refresh_ticks;
            }
        }
        cbt_cupti_periodic_();
        if (t->rec)
            cbt_rec_round_end_(t);
        if (n) {
            idle_rounds = 0;
        } else if (stopping) {
            sleep_us(50);
        } else if (pending || flush_waiting || (kw = cbt_kspans_waiting_(t)) == 1 ||
                   cbt_cupti_enabled_()) {
            idle_rounds = 0; /* something will come without a publish: keep polling */
            sleep_us(t->cfg.poll_interval_us);
        } else if (++idle_rounds <= idle_after) {
            sleep_us(t->cfg.poll_interval_us);
        } else {
            /* launches open but quiet: records may still come, in a burst */
            idle_sleep(t, kw == 2 ? KSPANS_QUIET_MS : 0);
            idle_rounds = idle_after; /* woken for nothing: the next empty round sleeps again */
        }
    }

    (void)cbt_cupti_flush(); /* completed kernel records, for the last poll */
    pthread_mutex_lock(&t->lock);
    cbt_harvester_finish_(t);
    t->flush_done = t->flush_req;
    pthread_cond_broadcast(&t->flush_cv);
    pthread_mutex_unlock(&t->lock);
    if (t->rec)
        cbt_rec_round_end_(t);
    return NULL;
}

/* The stop path (under t->lock), once. Live: the last ring poll, then the
 * shutdown record; a replay has read both from the file. Then what is
 * still open ends at the harvester's time, and the sinks flush. */
void cbt_harvester_finish_(cbt_tracer *t)
{
    if (t->finished)
        return;
    t->finished = 1;
    if (!t->cfg.replay) {
        t->hv_now = cbt_clock_unix_now();
        cbt_kspans_poll_(t);
        if (t->rec)
            cbt_rec_shutdown_(t);
    }
    cbt_kspans_shutdown_(t);
    for (uint32_t i = 0; i < t->n_subs; i++)
        if (t->subs[i].on_shutdown)
            t->subs[i].on_shutdown(t->subs[i].ctx, t, t->hv_now);
    flush_sinks(t);
}
