/* host/core/harvester.c — owns the harvester thread: its rounds over the
 * registered sources and taps (internal/harvest.h), its sleep, the flush
 * handshake's harvester side and the stop path. It names no source: the
 * lanes, the streams, the rings and CUPTI, the recorder are tables cbt_init
 * registered, polled in that order.
 *
 * A round: take the harvester's lock; read the clock once (the round's
 * time, t->hv_now, which the builders use as "now", so that a replay sees
 * the times the live run saw); let each source do its work (the lanes
 * dispatch every committed event stamped before that read, in stamp order:
 * lane.c says why that is causal); drop the lock; let each source do what
 * needs a system call; complete a flush the round caught up with; refit
 * the clock twice a second; tell the taps.
 *
 * Sleeping. Wake-ups are paced by time, not by requests:
 *   - a round cut short by a batch bound goes again at once;
 *   - otherwise, while work flows (a round handled something, or the
 *     sources say something comes without a publish: CUDA marks pending,
 *     kernel records awaited, CUPTI collecting, a flush waiting), the
 *     harvester naps for poll_interval_us (default 10 ms: the bound on a
 *     publish's wait to be dispatched under load; a tenth of it after a
 *     round of HEAVY_ROUND events or more, so a burst keeps the lanes
 *     short, and while CUDA marks are pending, so a stream's pool of
 *     pooled CUDA events comes back in time; the wake-ups stay at most
 *     ~1000 a second). A nap waits on hv_napping, which no publisher
 *     reads: in steady state publishers make no system call, and the word
 *     they do read (hv_sleeping) stays in their caches. Only a kick ends a
 *     nap early: a flush request, stop, or a lane past half full (lane.c),
 *     so a burst cannot overflow a lane while we nap (the shared bus, for
 *     threads past max_lanes, has no such check: full, it drops and counts);
 *   - after IDLE_AFTER_US of empty naps with nothing pending it sleeps
 *     deeply: hv_sleeping = CBT_HV_DEEP, for at most idle_sleep_ms (the
 *     sources' bound_ms: 250 ms while a ring exists, 10 ms while kernel
 *     launches wait for records), and the next publish wakes it
 *     (cbt_harvester_nudge_: one load after the commit; the one that clears
 *     the word issues FUTEX_WAKE and counts it in hv_wakeups). Only the
 *     first event after a real idle pays that wake-up.
 *
 * No lost wake-up from a deep sleep (the Dekker pattern: we store the word,
 * then load the sources; a publisher stores its commit, then loads the
 * word — each store may sit in its CPU's store buffer past the load that
 * follows it). The publisher has no fence, only a compiler barrier; after
 * storing the word, we call membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED),
 * which runs a full barrier on every CPU running a thread of this process
 * before it returns, and only then ask every source whether something is
 * committed (each lane in the pool, claimed or not, and the bus). So for
 * each publisher either its commit preceded that barrier — and the re-check
 * sees it — or its load of the word follows the barrier, which follows our
 * store: it sees CBT_HV_DEEP and wakes us (if it clears the word before
 * FUTEX_WAIT, the wait returns at once). Without membarrier (not Linux, or
 * refused) there is no such guarantee: a deep sleep then lasts at most
 * IDLE_FALLBACK_MS. Kicks need no barrier: a kicker stores hv_kicked, then
 * exchanges the word; we store the word, then exchange hv_kicked; both
 * seq_cst, so one of us sees the other.
 *
 * Flush: cbt_flush (tracer.c) raises flush_req with the time it was asked
 * (flush_ticks) under flush_mu and kicks us; a round that began after that
 * time, left nothing behind (no `more`) and has no pending marks completes
 * every request up to the newest, under flush_mu, which we hold for nothing
 * else. The sinks' own flush is the flusher's (cbt_sinks_flush_, bounded by
 * its timeout), never ours.
 *
 * Stop path: cbt_shutdown() clears the active tracer, sets `stop`, kicks us
 * and joins. The loop drains, waits for pending marks up to
 * shutdown_timeout_ms (marks still pending then are abandoned: their count
 * is left in t->abandoned_marks, so the CUDA ring's frees do not wait for
 * the device either), then runs cbt_harvester_finish_.
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
#include "internal/tracer.h"

#define IDLE_AFTER_US 100000u /* empty naps for this long, nothing pending: sleep deeply */
#define IDLE_FALLBACK_MS 1u   /* a deep sleep's bound when membarrier is unavailable */
#define CLOCK_REFRESH_NS 500000000ull /* refit the tick->unix map twice a second */
#define HEAVY_ROUND 512u /* events in a round that make the next nap a tenth as long */

void cbt_harvester_add_source_(cbt_tracer *t, const cbt_hv_source *src)
{
    if (t->n_sources < CBT_HV_MAX_SOURCES)
        t->sources[t->n_sources++] = *src;
}

void cbt_harvester_add_tap_(cbt_tracer *t, const cbt_hv_tap *tap)
{
    if (t->n_taps < CBT_HV_MAX_TAPS)
        t->taps[t->n_taps++] = *tap;
}

/* ---- waking ---- */

void cbt_harvester_wake_(cbt_tracer *t)
{
    /* one winner: the caller that turns DEEP into AWAKE wakes and counts */
    uint32_t deep = CBT_HV_DEEP;
    if (atomic_compare_exchange_strong_explicit(&t->hv_sleeping, &deep, CBT_HV_AWAKE,
                                                memory_order_relaxed, memory_order_relaxed)) {
        cbt_futex_wake_(&t->hv_sleeping, 1);
        atomic_fetch_add_explicit(&t->hv_wakeups, 1, memory_order_relaxed);
    }
}

void cbt_harvester_kick_(cbt_tracer *t)
{
    /* seq_cst store, then seq_cst exchanges: pairs with nap()/deep_sleep()'s
     * store of their word and exchange of hv_kicked (see the top) */
    atomic_store_explicit(&t->hv_kicked, 1, memory_order_seq_cst);
    if (atomic_exchange_explicit(&t->hv_napping, 0, memory_order_seq_cst) != 0) {
        cbt_futex_wake_(&t->hv_napping, 1);
        atomic_fetch_add_explicit(&t->hv_kicks, 1, memory_order_relaxed);
    }
    if (atomic_exchange_explicit(&t->hv_sleeping, CBT_HV_AWAKE, memory_order_seq_cst) !=
        CBT_HV_AWAKE) {
        cbt_futex_wake_(&t->hv_sleeping, 1);
        atomic_fetch_add_explicit(&t->hv_kicks, 1, memory_order_relaxed);
    }
}

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

/* A kick came since we last looked (and is consumed). */
static int take_kick(cbt_tracer *t)
{
    return atomic_exchange_explicit(&t->hv_kicked, 0, memory_order_seq_cst) != 0;
}

/* A timed sleep between working rounds: only a kick ends it early. It
 * waits on hv_napping, a word of its own that no publisher reads, so that
 * the line publishers read after each commit (hv_sleeping) is not written
 * at every nap; that word is cleared here only when a deep sleep left it. */
static void nap(cbt_tracer *t, uint32_t us)
{
    if (atomic_load_explicit(&t->hv_sleeping, memory_order_relaxed) != CBT_HV_AWAKE)
        atomic_store_explicit(&t->hv_sleeping, CBT_HV_AWAKE, memory_order_relaxed);
    t->hv_armed = 0;
    atomic_store_explicit(&t->hv_napping, 1, memory_order_seq_cst);
    if (!take_kick(t))
        cbt_futex_wait_us_(&t->hv_napping, 1, us);
    atomic_store_explicit(&t->hv_napping, 0, memory_order_relaxed);
    (void)take_kick(t);
}

static int any_committed(cbt_tracer *t)
{
    for (uint32_t i = 0; i < t->n_sources; i++)
        if (t->sources[i].committed && t->sources[i].committed(t->sources[i].ctx))
            return 1;
    return 0;
}

/* Announce a deep sleep, make the announcement visible to every publisher
 * (membarrier), re-check every source, and sleep unless something came.
 *
 * A sleep that times out (a source's bound, the clock refit) leaves the
 * announcement standing: the main loop does one round and comes back, and
 * while the word is still DEEP — no publisher has cleared it since the
 * barrier — the barrier need not be repeated: a commit before it is seen by
 * the re-check, and every commit after it finds the word set and wakes us. */
static void deep_sleep(cbt_tracer *t, uint32_t bound_ms)
{
    int armed = t->hv_armed &&
                atomic_load_explicit(&t->hv_sleeping, memory_order_seq_cst) == CBT_HV_DEEP;
    if (!armed) {
        atomic_store_explicit(&t->hv_sleeping, CBT_HV_DEEP, memory_order_seq_cst);
        t->hv_armed = t->hv_membarrier && membarrier_all();
    }
    int work = take_kick(t) || any_committed(t) ||
               atomic_load_explicit(&t->stop, memory_order_acquire);
    if (!work) {
        uint32_t ms = t->hv_armed ? t->cfg.idle_sleep_ms : IDLE_FALLBACK_MS;
        if (bound_ms && ms > bound_ms)
            ms = bound_ms;
        cbt_futex_wait_(&t->hv_sleeping, CBT_HV_DEEP, ms); /* while the word is DEEP */
    }
    if (work || !t->hv_armed ||
        atomic_load_explicit(&t->hv_sleeping, memory_order_seq_cst) != CBT_HV_DEEP) {
        /* something came, we were woken, or no barrier backs the word */
        atomic_store_explicit(&t->hv_sleeping, CBT_HV_AWAKE, memory_order_relaxed);
        t->hv_armed = 0;
    }
}

/* ---- the round ---- */

static void round_poll(cbt_tracer *t, cbt_hv_round *r)
{
    pthread_mutex_lock(&t->lock);
    r->ticks = cbt_clock_ticks_before_loads();
    t->hv_now = cbt_clock_to_unix(&t->clock, r->ticks);
    for (uint32_t i = 0; i < t->n_sources; i++)
        t->sources[i].poll(t->sources[i].ctx, r);
    pthread_mutex_unlock(&t->lock);
    for (uint32_t i = 0; i < t->n_sources; i++)
        if (t->sources[i].after)
            t->sources[i].after(t->sources[i].ctx);
    if (r->handled) {
        uint64_t busy = (uint64_t)((double)(cbt_clock_ticks() - r->ticks) * t->clock.ns_per_tick);
        atomic_fetch_add_explicit(&t->busy_ns, busy, memory_order_relaxed);
    }
    atomic_store_explicit(&t->pending_marks, r->pending, memory_order_relaxed);
}

/* Complete the flush requests this round caught up with. Returns whether a
 * request still waits. */
static int round_flush(cbt_tracer *t, const cbt_hv_round *r)
{
    pthread_mutex_lock(&t->flush_mu);
    if (t->flush_req > t->flush_done && !r->more && r->pending == 0 &&
        r->ticks >= t->flush_ticks) {
        t->flush_done = t->flush_req;
        pthread_cond_broadcast(&t->flush_cv);
    }
    int waiting = t->flush_req > t->flush_done;
    pthread_mutex_unlock(&t->flush_mu);
    return waiting;
}

static void taps_round_end(cbt_tracer *t)
{
    for (uint32_t i = 0; i < t->n_taps; i++)
        if (t->taps[i].on_round_end)
            t->taps[i].on_round_end(t->taps[i].ctx);
}

void *cbt_harvester_main_(void *arg)
{
    cbt_tracer *t = arg;
    for (uint32_t i = 0; i < t->n_sources; i++)
        if (t->sources[i].start)
            t->sources[i].start(t->sources[i].ctx);
    uint64_t refresh_ticks = (uint64_t)((double)CLOCK_REFRESH_NS / t->clock.ns_per_tick);
    uint64_t next_refresh = cbt_clock_ticks() + refresh_ticks;
    uint64_t stop_deadline = 0;
    t->hv_membarrier = membarrier_register();
    uint32_t period = t->cfg.poll_interval_us;
    uint64_t idle_ticks = (uint64_t)((double)IDLE_AFTER_US * 1000.0 / t->clock.ns_per_tick);
    uint64_t last_work = cbt_clock_ticks(); /* the last round that had work or something pending */

    for (;;) {
        int stopping = atomic_load_explicit(&t->stop, memory_order_acquire);
        cbt_hv_round r = {0};
        r.stopping = stopping;
        round_poll(t, &r);
        int flush_waiting = round_flush(t, &r);

        if (stopping && !r.more && r.handled == 0) {
            uint64_t now = cbt_clock_unix_now();
            if (!stop_deadline)
                stop_deadline = now + (uint64_t)t->cfg.shutdown_timeout_ms * 1000000ull;
            if (r.pending == 0)
                break;
            if (now >= stop_deadline) {
                /* a stream that never completes (a hung kernel) must not
                 * hold shutdown: its marks are dropped, and said so */
                fprintf(stderr,
                        "cbt: shutdown: %u stream mark(s) still pending after %u ms were "
                        "dropped (their events and spans are lost)\n",
                        r.pending, t->cfg.shutdown_timeout_ms);
                t->abandoned_marks = r.pending;
                break;
            }
        }
        if (!r.more) {
            uint64_t now_t = cbt_clock_ticks();
            if (now_t >= next_refresh) {
                /* under the lock: cbt_ring_stats_get reads the map from
                 * the caller's thread under it */
                pthread_mutex_lock(&t->lock);
                cbt_clock_map_refresh(&t->clock);
                for (uint32_t i = 0; i < t->n_taps; i++)
                    if (t->taps[i].on_clock)
                        t->taps[i].on_clock(t->taps[i].ctx);
                pthread_mutex_unlock(&t->lock);
                next_refresh = now_t + refresh_ticks;
            }
        }
        taps_round_end(t);

        if (r.more)
            continue; /* a batch bound cut the round short */
        if (stopping) {
            nap(t, 50);
            continue;
        }
        uint32_t us = period;
        if (r.bound_ms && (uint64_t)r.bound_ms * 1000u < us)
            us = r.bound_ms * 1000u;
        if (r.handled || r.pending || r.keep_polling || flush_waiting) {
            /* work flows, or comes without a publish: keep polling; a heavy
             * round (a burst) naps a tenth as long, so lanes stay short */
            last_work = r.ticks;
            nap(t, (r.handled >= HEAVY_ROUND || r.pending) && us / 10 ? us / 10 : us);
        } else if (r.ticks - last_work < idle_ticks) {
            nap(t, us);
        } else {
            deep_sleep(t, r.bound_ms);
        }
    }

    pthread_mutex_lock(&t->lock);
    cbt_harvester_finish_(t);
    pthread_mutex_unlock(&t->lock);
    pthread_mutex_lock(&t->flush_mu);
    t->flush_done = t->flush_req;
    pthread_cond_broadcast(&t->flush_cv);
    pthread_mutex_unlock(&t->flush_mu);
    taps_round_end(t);
    return NULL;
}

/* The stop path (under t->lock), once. Live: the sources' last poll, then
 * the taps' on_stop (the recorder's shutdown record); a replay has read
 * both from the file. Then the sources end what is still open, and the
 * subscribers end theirs at the harvester's time. The sinks are flushed by
 * cbt_shutdown, with its bound. */
void cbt_harvester_finish_(cbt_tracer *t)
{
    if (t->finished)
        return;
    t->finished = 1;
    if (!t->cfg.replay) {
        t->hv_now = cbt_clock_unix_now();
        for (uint32_t i = 0; i < t->n_sources; i++)
            if (t->sources[i].last)
                t->sources[i].last(t->sources[i].ctx);
        for (uint32_t i = 0; i < t->n_taps; i++)
            if (t->taps[i].on_stop)
                t->taps[i].on_stop(t->taps[i].ctx);
    }
    for (uint32_t i = 0; i < t->n_sources; i++)
        if (t->sources[i].finish)
            t->sources[i].finish(t->sources[i].ctx);
    uint32_t n = cbt_subscribers_n_(t);
    for (uint32_t i = 0; i < n; i++)
        if (t->subs[i].on_shutdown)
            t->subs[i].on_shutdown(t->subs[i].ctx, t, t->hv_now);
}
