/* host/core/lane.c — owns a thread's lane and how an event gets into it:
 * the whole publish hot path, from cbt_publish (cbt.h, inline) to the
 * committed slot, is in this file (C order: each step below its callee).
 *
 *   cbt_publish(ev)                 cbt.h: one load of the active tracer
 *   -> cbt_tracer_publish           check the type, run the publish hook, stamp
 *   -> cbt_tracer_push_             find the thread's lane (thread-local)
 *   -> cbt_bus_push_spsc_           size the record, claim its cells (no CAS), copy
 *                                   the used parts, publish tail (internal/bus.h)
 *   -> cbt_harvester_nudge_         one load: wake the harvester if it sleeps
 *                                   deeply (internal/tracer.h, harvester.c
 *                                   "Sleeping"); every quarter lap, one more
 *                                   load: kick it if the lane is past half full
 *
 * Each publishing thread gets a lane of its own the first time it publishes
 * under a tracer: a single-producer ring of 64-byte cells (the cbt_bus
 * layout of internal/bus.h; an event is a record of 2 to 41 cells, only what
 * it uses: internal/record.h), so the hot path needs no CAS and touches no
 * line another producer writes. A thread that finds cbt_config.max_lanes taken (or
 * lane_capacity 0) publishes into the tracer's shared many-producer bus
 * instead (host/core/bus.c). The lanes and the bus are the harvester's
 * first source (cbt_lanes_source_, at the end of this file): each round
 * merges them in stamp order and dispatches (dispatch.c).
 *
 * Lanes belong to the tracer, not the threads: cbt_init() makes max_lanes of
 * them (their pages are touched only when used), a thread claims a free one
 * on its first publish by a CAS on its state (no lock: nothing slow can make
 * a new thread's first publish wait), and the harvester frees it again once
 * the thread has exited (a pthread key destructor marks it orphaned) and it
 * is drained. So the publishing path never allocates and never locks. The
 * thread keeps only a thread-local (tracer generation, lane) pair; a
 * generation that no longer matches the running tracer sends it back
 * through lane_attach.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "internal/arrays.h"
#include "internal/counter.h"
#include "internal/tracer.h"

#define BATCH_MAX 1024u /* events a round dispatches before it lets the other sources in */

typedef struct lane_tls {
    uint64_t gen;   /* generation of the tracer the lane belongs to; 0 = none */
    cbt_lane *lane; /* NULL with a matching gen: use the shared bus */
} lane_tls;

/* Push into a lane: its thread is the only producer, so the lane's
 * single-producer push (internal/bus.h): no CAS, tail is the commit. The
 * same CBT_ERR_FULL (dropped and counted) as the shared bus's cbt_bus_push. */
static inline cbt_status lane_push(cbt_lane *l, const cbt_event *ev, uint64_t ticks,
                                   struct cbt_stream *stream, void *mark)
{
    return cbt_bus_push_spsc_(&l->bus, ev, ticks, stream, mark);
}

static _Thread_local lane_tls tls;
static pthread_key_t g_key;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;

/* Thread exit: tell the tracer that owns our lane that no more pushes come. */
static void lane_thread_exit(void *arg)
{
    lane_tls *l = arg;
    if (l->lane)
        cbt_lane_orphan_(l->gen, l->lane);
    l->lane = NULL;
    l->gen = 0;
}

static void key_init(void) { pthread_key_create(&g_key, lane_thread_exit); }

/* Claim a free lane: a CAS on each pool lane's state until one is ours.
 * acquire: pairs with the harvester's release when it freed the lane, after
 * its last read of the lane's cells and positions. */
static cbt_lane *lane_claim(cbt_tracer *t)
{
    for (uint32_t i = 0; i < t->n_pool; i++) {
        cbt_lane *l = &t->lane_pool[i];
        uint32_t free_ = CBT_LANE_FREE;
        if (atomic_load_explicit(&l->state, memory_order_relaxed) == CBT_LANE_FREE &&
            atomic_compare_exchange_strong_explicit(&l->state, &free_, CBT_LANE_TAKEN,
                                                    memory_order_acquire,
                                                    memory_order_relaxed)) {
            /* a reused lane keeps its positions: the new producer continues them */
            l->bus.cached_head = atomic_load_explicit(&l->bus.head, memory_order_acquire);
            return l;
        }
    }
    return NULL;
}

static cbt_status lane_attach(cbt_tracer *t, const cbt_event *ev, uint64_t ticks,
                              struct cbt_stream *s, void *mark)
{
    pthread_once(&g_key_once, key_init);
    cbt_lane *l = lane_claim(t);
    tls.gen = t->gen;
    tls.lane = l;
    pthread_setspecific(g_key, &tls);
    if (l)
        return lane_push(l, ev, ticks, s, mark);
    return cbt_bus_push(&t->bus, ev, ticks, s, mark);
}

/* Every quarter lap of a lane: if it is past half full, the harvester naps
 * too long for this burst; kick it (one load of head, which the harvester
 * writes once per batch; a system call only then). */
static void lane_fill_check(cbt_tracer *t, cbt_lane *l)
{
    uint64_t used = l->bus.own_tail - atomic_load_explicit(&l->bus.head, memory_order_relaxed);
    if (used > (l->bus.mask + 1) / 2)
        cbt_harvester_kick_(t);
}

/* Every push (publishes, CPU-stream workers, stream marks) ends with the
 * harvester's nudge: one load of its sleeping word, a wake-up only when it
 * sleeps deeply (harvester.c, "Sleeping"). */
cbt_status cbt_tracer_push_(cbt_tracer *t, const cbt_event *ev, uint64_t ticks,
                            struct cbt_stream *s, void *mark)
{
    cbt_status st;
    if (__builtin_expect(tls.gen == t->gen, 1)) {
        cbt_lane *l = tls.lane;
        if (__builtin_expect(l != NULL, 1)) {
            uint64_t before = l->bus.own_tail;
            st = lane_push(l, ev, ticks, s, mark);
            /* crossed a quarter-lap boundary: look at the fill */
            if (__builtin_expect(((before ^ l->bus.own_tail) & ~(l->bus.mask >> 2)) != 0, 0))
                lane_fill_check(t, l);
        } else {
            st = cbt_bus_push(&t->bus, ev, ticks, s, mark);
        }
    } else {
        st = lane_attach(t, ev, ticks, s, mark);
    }
    cbt_harvester_nudge_(t);
    return st;
}

/* The publish hot path: check, stamp, push into this thread's lane. */
cbt_status cbt_tracer_publish(cbt_tracer *t, const cbt_event *ev)
{
    /* built-in types need no table lookup; registered ones ask event.c */
    bool builtin = ev && (uint16_t)(ev->type - 1) < CBT_EV_BUILTIN_COUNT_ - 1;
    if (__builtin_expect(!builtin, 0) && (!ev || !cbt_event_type_valid(ev->type))) {
        atomic_fetch_add_explicit(&t->rejected, 1, memory_order_relaxed);
        return ev ? CBT_ERR_UNKNOWN_EVENT : CBT_ERR_INVAL;
    }
    /* One test for the rare cases: a publish hook, a stream's flags, array
     * values. A stream's flags on a plain publish (a subscriber republishing
     * an event it was handed): the stream did not time this one, so without
     * an explicit time they go, before anything reads the enqueue block they
     * would promise (an event copied into an older, smaller cbt_event has
     * none; its enqueue_ns is unix ns, not this clock's ticks). */
    if (__builtin_expect(t->publish_hook != NULL ||
                             (ev->flags & (CBT_EVF_FROM_STREAM | CBT_EVF_ENQUEUED |
                                           CBT_EVF_ARRAYS)) != 0,
                         0)) {
        uint32_t stray = (ev->flags & CBT_EVF_EXPLICIT_TS)
                             ? 0
                             : ev->flags & (CBT_EVF_FROM_STREAM | CBT_EVF_ENQUEUED);
        if (t->publish_hook || stray || (ev->flags & CBT_EVF_ARRAYS)) {
            cbt_event e;
            cbt_event_copy_used_masked_(&e, ev, stray);
            if (e.flags & CBT_EVF_ARRAYS) /* the elements into the store (host/core/arrays.c) */
                cbt_arrays_adopt_(&e);
            if (t->publish_hook)
                t->publish_hook(t->publish_hook_ctx, &e, 0);
            cbt_status st = cbt_tracer_push_(t, &e, cbt_clock_ticks_ordered(), NULL, NULL);
            /* dropped (counted by the queue): its arrays' references go with it */
            if (st != CBT_OK && (e.flags & CBT_EVF_ARRAYS))
                cbt_arrays_release_event_(&e);
            return st;
        }
        /* an explicit time with a stream's flags (a replay): as it is */
    }
    /* stamped even with CBT_EVF_EXPLICIT_TS: the stamp orders dispatch */
    return cbt_tracer_push_(t, ev, cbt_clock_ticks_ordered(), NULL, NULL);
}

cbt_status cbt_lanes_init_(cbt_tracer *t)
{
    uint32_t n = t->cfg.lane_capacity ? t->cfg.max_lanes : 0;
    if (n == 0)
        return CBT_OK;
    t->lane_pool = calloc(n, sizeof *t->lane_pool);
    if (!t->lane_pool)
        return CBT_ERR_NOMEM;
    for (uint32_t i = 0; i < n; i++) {
        cbt_status st = cbt_bus_init(&t->lane_pool[i].bus, t->cfg.lane_capacity, 1);
        if (st)
            return st; /* cbt_lanes_free_ releases what was made */
        t->lane_pool[i].gen = t->gen;
        atomic_init(&t->lane_pool[i].state, CBT_LANE_FREE);
        t->n_pool = i + 1;
    }
    return CBT_OK;
}

uint32_t cbt_lanes_in_use_(cbt_tracer *t)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->n_pool; i++)
        n += atomic_load_explicit(&t->lane_pool[i].state, memory_order_relaxed) != CBT_LANE_FREE;
    return n;
}

/* Free the drained lanes of exited threads. Harvester. */
static void lanes_reap(cbt_tracer *t)
{
    for (uint32_t i = 0; i < t->n_pool; i++) {
        cbt_lane *l = &t->lane_pool[i];
        /* acquire: pairs with the release in cbt_lane_orphan_, after which the
         * lane's thread pushes nothing more */
        if (atomic_load_explicit(&l->state, memory_order_acquire) == CBT_LANE_ORPHANED &&
            cbt_bus_drained(&l->bus))
            /* release: our reads of the lane happen before a new owner's claim */
            atomic_store_explicit(&l->state, CBT_LANE_FREE, memory_order_release);
    }
}

/* Populating. A lane's cells are calloc'd: zero pages the kernel maps on
 * first touch, a page fault (2-3 us on a VM) every 64 cells of the first
 * lap, on the producer's path. So while a lane is in its first lap the
 * harvester keeps the next POP_AHEAD_CELLS past its producer's tail faulted
 * in (refilled once less than half of that is left: one madvise per 512 KiB
 * of the lane) (MADV_POPULATE_WRITE, Linux 5.14; elsewhere, or when refused, the
 * producer faults as before), at most CBT_POP_BUDGET_CELLS a round in all,
 * so a burst of new threads never holds the drain for long, and a lane is
 * resident only as far as its thread has gone. The producer may write
 * meanwhile: populating maps only pages not yet present and changes no
 * byte. Once the tail passes the lap's end, nothing is left to do (a lane
 * reused by another thread keeps its positions and its pop_upto). */
#define POP_AHEAD_CELLS 16384u     /* 1 MiB ahead of the producer */
#define CBT_POP_BUDGET_CELLS 16384u /* 1 MiB a round, all lanes together */

static uint32_t populate_plan(cbt_tracer *t, cbt_pop_range *out, uint32_t max)
{
    uint64_t budget = CBT_POP_BUDGET_CELLS;
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->n_pool && n < max && budget; i++) {
        cbt_lane *l = &t->lane_pool[i];
        if (atomic_load_explicit(&l->state, memory_order_relaxed) != CBT_LANE_TAKEN)
            continue;
        uint64_t cap = l->bus.mask + 1;
        if (l->pop_upto >= cap)
            continue;
        uint64_t tail = atomic_load_explicit(&l->bus.tail, memory_order_relaxed);
        if (tail >= cap) { /* a whole lap written: every page is there */
            l->pop_upto = cap;
            continue;
        }
        /* hysteresis: refill only once less than half the distance is
         * left, so a slow producer costs one madvise per 512 KiB, not one
         * per round */
        if (l->pop_upto > tail + POP_AHEAD_CELLS / 2)
            continue;
        uint64_t want = tail + POP_AHEAD_CELLS < cap ? tail + POP_AHEAD_CELLS : cap;
        if (want <= l->pop_upto)
            continue;
        uint64_t from = l->pop_upto > tail ? l->pop_upto : tail;
        if (want - from > budget)
            want = from + budget;
        budget -= want - from;
        out[n].p = l->bus.cells + from * CBT_REC_CELL;
        out[n].len = (size_t)(want - from) * CBT_REC_CELL;
        n++;
        l->pop_upto = want;
    }
    return n;
}

static void populate_run(const cbt_pop_range *r, uint32_t n)
{
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
    long page = n ? sysconf(_SC_PAGESIZE) : 0;
    for (uint32_t i = 0; i < n && page > 0; i++) {
        /* whole pages: the one holding the first cell down, the one holding
         * the last up (both inside the lane's allocation) */
        uintptr_t a = (uintptr_t)r[i].p & ~((uintptr_t)page - 1);
        uintptr_t e = ((uintptr_t)r[i].p + r[i].len + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
        (void)madvise((void *)a, e - a, MADV_POPULATE_WRITE);
    }
#else
    (void)r;
    (void)n;
#endif
}

void cbt_lanes_free_(cbt_tracer *t)
{
    for (uint32_t i = 0; i < t->n_pool; i++)
        cbt_bus_destroy(&t->lane_pool[i].bus);
    free(t->lane_pool);
    t->lane_pool = NULL;
    t->n_pool = 0;
}

/* ---- the harvester's source: merge the lanes and the bus in stamp order ----
 *
 * Order: events are dispatched in the order of their publish stamps, merged
 * across the per-thread lanes and the shared bus. A round reads the clock
 * (T, with no later load allowed to run first: harvester.c) and repeatedly
 * takes the committed lane head with the smallest stamp <= T. Why this is
 * causal: if event X was committed before the thread that publishes Y saw
 * it (X caused Y), Y is stamped after X's commit (publishes stamp with
 * rdtscp, which waits for the thread's earlier loads, clock.h), so X's
 * stamp < Y's; and if Y's stamp <= T, X was committed before the round read
 * T and is visible to the peeks that follow. Events stamped after T wait
 * for the next round. A CPU-stream mark is stamped by the stream's worker
 * when reached, so it is ordered at that moment. A CUDA mark is known only
 * when its CUDA event completes: it is handed to its stream's pending FIFO
 * (stream order, cbt_stream_defer_) and dispatched by the streams' source
 * after completion. */

/* `lag_ticks`: the item's stamp when its dispatch lag should be measured
 * (the oldest item of a round), else 0. */
static void handle(cbt_tracer *t, cbt_bus_item *it, uint64_t lag_ticks)
{
    if (it->stream) {
        cbt_stream_defer_(it->stream, t, it);
        return;
    }
    if (!(it->ev.flags & CBT_EVF_EXPLICIT_TS)) {
        it->ev.ts = cbt_clock_to_unix(&t->clock, it->ticks);
        /* a CPU stream's mark: its enqueue stamp, by the same map (so
         * ts - enqueue_ns is the ticks between them). Only reach_mark gets
         * here with the flag: cbt_tracer_publish drops it from anyone else
         * without an explicit time */
        if (__builtin_expect((it->ev.flags & CBT_EVF_ENQUEUED) != 0, 0))
            it->ev.enqueue_ns = cbt_clock_to_unix(&t->clock, it->ev.enqueue_ns);
    }
    cbt_dispatch_(t, &it->ev, lag_ticks);
}

static void lanes_poll(void *ctx, cbt_hv_round *r)
{
    cbt_tracer *t = ctx;
    cbt_bus *src[1 + CBT_MAX_LANES];
    uint64_t head[1 + CBT_MAX_LANES];
    uint8_t has[1 + CBT_MAX_LANES], popped[1 + CBT_MAX_LANES];
    uint32_t k = 0;
    src[k++] = &t->bus;
    for (uint32_t i = 0; i < t->n_pool; i++)
        if (atomic_load_explicit(&t->lane_pool[i].state, memory_order_acquire) != CBT_LANE_FREE)
            src[k++] = &t->lane_pool[i].bus;
    for (uint32_t i = 0; i < k; i++) {
        has[i] = (uint8_t)cbt_bus_peek(src[i], &head[i]);
        popped[i] = 0;
    }
    uint32_t n = 0;
    cbt_bus_item it;
    int drained = 0;
    while (n < BATCH_MAX) {
        int best = -1;
        for (uint32_t i = 0; i < k; i++)
            if (has[i] && head[i] <= r->ticks && (best < 0 || head[i] < head[best]))
                best = (int)i;
        if (best < 0) {
            drained = 1;
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
    r->handled += n;
    if (!drained)
        r->more = 1;
    lanes_reap(t);
    t->n_pop = populate_plan(t, t->pop, CBT_POP_RANGES);
}

static void lanes_after(void *ctx)
{
    cbt_tracer *t = ctx;
    populate_run(t->pop, t->n_pop); /* lanes in their first lap: ahead of their producers */
    t->n_pop = 0;
}

/* Every pool lane, claimed or not (a claim after the caller's barrier is
 * followed by a commit the re-check must see), and the bus. */
static int lanes_committed(void *ctx)
{
    cbt_tracer *t = ctx;
    uint64_t ticks;
    if (cbt_bus_peek(&t->bus, &ticks))
        return 1;
    for (uint32_t i = 0; i < t->n_pool; i++)
        if (cbt_bus_peek(&t->lane_pool[i].bus, &ticks))
            return 1;
    return 0;
}

void cbt_lanes_source_(cbt_tracer *t, cbt_hv_source *out)
{
    memset(out, 0, sizeof *out);
    out->name = "lanes";
    out->ctx = t;
    out->poll = lanes_poll;
    out->after = lanes_after;
    out->committed = lanes_committed;
}
