/* host/streams/stream.c — owns the stream interface and the CPU backend.
 *
 * A CPU stream is one worker thread running a bounded FIFO of items: work
 * (a function and its argument: a kernel's reference implementation, a host
 * callback) and marks (events to publish). The worker stamps a mark when it
 * reaches it and pushes it onto the tracer's bus, so the harvester sees it at
 * the moment the stream got there, as a GPU stream's callback would.
 *
 * The queue. A bounded many-producer, one-consumer ring of `cap` slots in
 * the manner of Vyukov's bounded MPMC queue, with the one consumer (the
 * worker) and room for variable-size marks. Positions count slots and only
 * grow; position p lives in slot p % cap, whose `seq` word says its state:
 *
 *   seq == p        free for position p (initially seq[i] = i)
 *   seq == p + 1    the item claimed at p is committed
 *   seq == p + cap  position p has run: free for p + cap
 *
 * A producer claims k consecutive positions [p, p + k) (k = 1 for work; a
 * mark takes one per CBT_STREAM_MARK_CELLS_PER_ITEM cells of its record)
 * by a CAS of `tail` from p to p + k, once it has seen seq[p + k - 1] ==
 * p + k - 1 (acquire): the worker frees positions in order, so the last one
 * free means all k are. Then it writes the slot of p (and, for a mark, the
 * record into `room`, from slot p's cells on, running on into the slack past
 * the end when p is near it, as on the bus: internal/bus.h, "Layout"), and
 * commits with seq[p] = p + 1 (release, seq_cst for the wake handshake).
 * The positions p + 1 .. p + k - 1 are covered by the item and their seq
 * words are left alone: nobody looks at them (the worker looks only at an
 * item's first position; producers only at tail's, which has passed them).
 * A claim whose last slot is not free is refused at once (CBT_ERR_FULL):
 * producers never wait, take no lock, and never wait for the worker.
 *
 * The worker, at position `head` (always an item's first position), loads
 * seq[head] (acquire) and runs the item when it equals head + 1. When the
 * item is done (a mark: copied out and pushed), it frees the item's k
 * positions in increasing order with seq = position + cap (release), so a
 * producer that acquires the last one sees every read of the item and every
 * earlier free done; then it publishes `done` = head + k (seq_cst) for sync.
 *
 * Order. Claims are ordered by the CAS on tail, and the worker runs
 * positions in order, so items run in claim order; a thread's later item is
 * claimed after its earlier one returned, so it runs after it. A producer
 * preempted between its claim and its commit holds up the worker (FIFO must
 * wait for its item), never the other producers.
 *
 * Sleeping. An empty worker sleeps on the futex `wake_seq`; a producer
 * makes the wake syscall only when the worker has announced it sleeps.
 * Dekker, all four accesses seq_cst:
 *   worker:   w = wake_seq; sleeping = 1; load seq[head]; [stop, tail]; futex_wait(wake_seq, w)
 *   producer: store seq[p] = p + 1; load sleeping -> if 1: exchange it to 0,
 *             bump wake_seq, futex_wake
 * In the single total order either the producer's load of `sleeping` comes
 * after the worker's store of 1 (it wakes the worker), or the worker's load
 * of seq[head] comes after the commit (it sees the item and does not
 * sleep). A wake between the worker's read of w and its futex_wait has
 * bumped wake_seq, so the futex_wait returns at once: no lost wake-up.
 * sync does the same with `done`, `sync_waiters` and the futex `idle_seq`
 * (the worker wakes it only when someone waits), and destroy sets `stop`
 * before it bumps wake_seq.
 *
 * Stop path: cbt_stream_destroy() waits for the queue to run (sync), sets
 * `stop`, wakes and joins the worker, which exits once nothing more is
 * claimed. Streams must be synced or destroyed before cbt_shutdown().
 */
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cbt/kernel_span.h"
#include "internal/arrays.h"
#include "internal/abi.h"
#include "internal/futex.h"
#include "internal/stream_impl.h"

_Static_assert(offsetof(cbt_event, pair) + sizeof(uint64_t) <= CBT_REC_EV_HEAD,
               "a record holds the event's pair in its head (record.h)");

static _Atomic uint32_t g_next_ordinal = 1;

_Atomic(cbt_stream_worker_hook) cbt_stream_worker_hook_; /* static storage: NULL */

uint32_t cbt_stream_next_ordinal_(void)
{
    return atomic_fetch_add_explicit(&g_next_ordinal, 1, memory_order_relaxed);
}

void cbt_stream_mark_lost_(cbt_stream *s, cbt_tracer *t)
{
    atomic_fetch_add_explicit(&s->marks_dropped, 1, memory_order_relaxed);
    if (t)
        atomic_fetch_add_explicit(&t->stream_marks_dropped, 1, memory_order_relaxed);
}

/* ---- the worker ------------------------------------------------------------ */

static inline cbt_stream_slot *slot_at(cbt_stream *s, uint64_t pos) { return &s->slots[pos % s->cap]; }
static inline unsigned char *room_at(cbt_stream *s, uint64_t pos)
{
    return s->room + (size_t)(pos % s->cap) * CBT_STREAM_MARK_CELLS_PER_ITEM * CBT_REC_CELL;
}

/* Reach the mark at `pos`: stamp it and copy it into the tracer's queue.
 * The record's stamp is the host time of the publish that enqueued it
 * (cpu_push); it rides on as the event's enqueue time (CBT_EVF_ENQUEUED, in
 * ticks until the harvester maps both to unix ns with one clock map), unless
 * the caller gave the event its own time (CBT_EVF_EXPLICIT_TS: then the
 * stream did not time it, and it says nothing about queueing). */
static void reach_mark(cbt_stream *s, uint64_t pos)
{
    /* pinned: this worker is cbt's own thread, which cbt_shutdown cannot
     * stop first as a program stops its publishers; it waits for the pin */
    cbt_tracer *t = cbt_tracer_pin_();
    cbt_event ev;
    uint64_t enqueued;
    struct cbt_stream *no_stream;
    void *no_mark;
    cbt_rec_read(room_at(s, pos), &ev, &enqueued, &no_stream, &no_mark);
    if (!t) { /* accepted under a tracer that has gone since */
        if (ev.flags & CBT_EVF_ARRAYS)
            cbt_arrays_release_event_(&ev);
        cbt_stream_mark_lost_(s, NULL);
        return;
    }
    ev.flags |= CBT_EVF_FROM_STREAM;
    if (!(ev.flags & CBT_EVF_EXPLICIT_TS)) {
        ev.flags |= CBT_EVF_ENQUEUED;
        ev.enqueue_ns = enqueued; /* ticks: lane.c maps them with the reach stamp */
        ev.stream = s->ordinal;
        ev.device = CBT_DEVICE_CPU;
    }
    if (cbt_tracer_push_(t, &ev, cbt_clock_ticks_ordered(), NULL, NULL) == CBT_OK)
        atomic_store_explicit(&s->marks_published,
                              atomic_load_explicit(&s->marks_published, memory_order_relaxed) + 1,
                              memory_order_relaxed);
    else { /* the queue was full: counted there (dropped_full) and here */
        if (ev.flags & CBT_EVF_ARRAYS)
            cbt_arrays_release_event_(&ev);
        cbt_stream_mark_lost_(s, t);
    }
    cbt_tracer_unpin_();
}

/* Run the committed item at `head`, free its slots, publish `done`.
 * Returns the next item's position. */
static uint64_t run_item(cbt_stream *s, uint64_t head)
{
    cbt_stream_slot *sl = slot_at(s, head);
    uint32_t k = sl->n_slots;
    if (sl->fn) {
        sl->fn(sl->arg);
    } else if (sl->cta_fn) {
        /* an emulated launch: CTAs one after another on this worker, which
         * plays the SM numbered by the stream's ordinal */
        for (uint32_t c = 0; c < sl->n_ctas; c++) {
            cbt_cpu_cta_enter(c, sl->n_ctas, (uint16_t)s->ordinal);
            sl->cta_fn(sl->arg, c, sl->n_ctas);
            cbt_cpu_cta_leave();
        }
    } else {
        reach_mark(s, head);
    }
    /* acquire: pairs with the release store that installs a test's hook */
    cbt_stream_worker_hook hook = atomic_load_explicit(&cbt_stream_worker_hook_, memory_order_acquire);
    if (__builtin_expect(hook != NULL, 0))
        hook(s);
    atomic_store_explicit(&s->completed, atomic_load_explicit(&s->completed, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    /* free in increasing order, the last position last. release: pairs with
     * the acquire of the last slot's seq in claim(): our reads of the slots
     * and the room are done before a producer writes them again */
    for (uint32_t i = 0; i < k; i++)
        atomic_store_explicit(&slot_at(s, head + i)->seq, head + i + s->cap, memory_order_release);
    head += k;
    /* seq_cst: release for sync's caller (the item's effects are visible
     * once it reads done >= its target) and the Dekker pair with the
     * fetch_add of sync_waiters before sync's load of done */
    atomic_store_explicit(&s->done, head, memory_order_seq_cst);
    if (atomic_load_explicit(&s->sync_waiters, memory_order_seq_cst)) {
        atomic_fetch_add_explicit(&s->idle_seq, 1, memory_order_seq_cst);
        cbt_futex_wake_(&s->idle_seq, INT_MAX);
    }
    return head;
}

/* Nothing committed at `head`: sleep until a producer commits (or destroy
 * asks us to stop). Returns 1 when the worker should exit. */
static int worker_wait(cbt_stream *s, uint64_t head)
{
    uint32_t w = atomic_load_explicit(&s->wake_seq, memory_order_seq_cst);
    /* seq_cst, both: the announcement and the re-check are the worker's
     * half of the Dekker pair with cpu_push's commit and load of sleeping */
    atomic_store_explicit(&s->sleeping, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&slot_at(s, head)->seq, memory_order_seq_cst) != head + 1) {
        /* stop only once every claimed item has run: a claim that is not
         * committed yet is still coming (its producer wakes us) */
        if (atomic_load_explicit(&s->stop, memory_order_seq_cst) &&
            atomic_load_explicit(&s->tail, memory_order_seq_cst) == head) {
            atomic_store_explicit(&s->sleeping, 0, memory_order_relaxed);
            return 1;
        }
        cbt_futex_wait_(&s->wake_seq, w, 0);
    }
    atomic_store_explicit(&s->sleeping, 0, memory_order_relaxed);
    return 0;
}

static void *cpu_worker(void *arg)
{
    cbt_stream *s = arg;
    uint64_t head = 0; /* the worker's own: the next item's first position */
    for (;;) {
        /* acquire: pairs with the commit (release) in cpu_push, so the slot
         * and the mark's record are read as written */
        if (atomic_load_explicit(&slot_at(s, head)->seq, memory_order_acquire) == head + 1)
            head = run_item(s, head);
        else if (worker_wait(s, head))
            break;
    }
    return NULL;
}

/* ---- creation -------------------------------------------------------------- */

static cbt_stream *stream_alloc(void)
{
    /* aligned: the producers', the worker's and the handshake's lines apart */
    size_t n = (sizeof(cbt_stream) + 63) & ~(size_t)63;
    cbt_stream *s = aligned_alloc(64, n);
    if (s)
        memset(s, 0, n);
    return s;
}

cbt_status cbt_stream_cpu_create(uint32_t capacity, cbt_stream **out)
{
    if (!out)
        return CBT_ERR_INVAL;
    if (capacity == 0)
        capacity = CBT_STREAM_DEFAULT_CAPACITY;
    /* at least 2: with one slot, "committed at p" (seq p + 1) would read as
     * "free for p + 1" (p + cap), and a second producer would overwrite an
     * item the worker has not run */
    if (capacity < 2 || capacity > (1u << 20))
        return CBT_ERR_INVAL;
    cbt_stream *s = stream_alloc();
    if (!s)
        return CBT_ERR_NOMEM;
    s->slots = calloc(capacity, sizeof *s->slots);
    /* a slack of the largest record past the end: a mark claimed near the
     * end runs on into it (+ 1 cell: room to align the start to a cell) */
    s->room_raw = malloc(((size_t)capacity * CBT_STREAM_MARK_CELLS_PER_ITEM + CBT_REC_CELLS_MAX + 1) *
                         CBT_REC_CELL);
    if (!s->slots || !s->room_raw) {
        free(s->room_raw);
        free(s->slots);
        free(s);
        return CBT_ERR_NOMEM;
    }
    uintptr_t p = ((uintptr_t)s->room_raw + CBT_REC_CELL - 1) & ~(uintptr_t)(CBT_REC_CELL - 1);
    s->room = (unsigned char *)p;
    for (uint32_t i = 0; i < capacity; i++) /* free for position i; the worker starts after */
        atomic_init(&s->slots[i].seq, i);
    s->kind = CBT_STREAM_CPU;
    s->cap = capacity;
    s->ordinal = cbt_stream_next_ordinal_();
    if (pthread_create(&s->worker, NULL, cpu_worker, s) != 0) {
        free(s->room_raw);
        free(s->slots);
        free(s);
        return CBT_ERR_THREAD;
    }
    *out = s;
    return CBT_OK;
}

cbt_status cbt_stream_cuda_create(void *cuda_stream, cbt_stream **out)
{
    if (!out)
        return CBT_ERR_INVAL;
    cbt_stream *s = stream_alloc();
    if (!s)
        return CBT_ERR_NOMEM;
    s->kind = CBT_STREAM_CUDA;
    s->ordinal = cbt_stream_next_ordinal_();
    cbt_status st = cbt_cuda_stream_init_(s, cuda_stream);
    if (st) {
        free(s);
        return st;
    }
    *out = s;
    return CBT_OK;
}

/* ---- the producers: claim, fill, commit ------------------------------------- */

/* Claim k consecutive positions: 1 with *pos set, 0 when they are not all
 * free (the queue is full for this item). Lock-free: a failed CAS means
 * another producer claimed first, and we retry at its new tail. */
static int claim(cbt_stream *s, uint32_t k, uint64_t *pos)
{
    if (k > s->cap)
        return 0;
    uint64_t p = atomic_load_explicit(&s->tail, memory_order_relaxed);
    for (;;) {
        uint64_t last = p + k - 1;
        /* acquire: pairs with the release free in run_item: the worker's
         * reads of the slots we are about to write are done */
        uint64_t sq = atomic_load_explicit(&slot_at(s, last)->seq, memory_order_acquire);
        int64_t d = (int64_t)(sq - last);
        if (d == 0) {
            /* relaxed: the CAS only arbitrates between producers; what we
             * write is published by the commit */
            if (atomic_compare_exchange_weak_explicit(&s->tail, &p, p + k, memory_order_relaxed,
                                                      memory_order_relaxed)) {
                *pos = p;
                return 1;
            }
            /* p now holds the current tail */
        } else if (d < 0) {
            return 0; /* the worker has not freed it: full */
        } else {
            p = atomic_load_explicit(&s->tail, memory_order_relaxed); /* tail moved on */
        }
    }
}

static cbt_status cpu_push(cbt_stream *s, cbt_stream_fn fn, cbt_cta_fn cta_fn, uint32_t n_ctas,
                           void *arg, const cbt_event *ev)
{
    if (atomic_load_explicit(&s->stop, memory_order_relaxed))
        return CBT_ERR_STOPPED;
    cbt_rec_size z = {0, 0, 0};
    uint32_t k = 1;
    if (ev) {
        z = cbt_rec_size_of(ev, 0);
        k = (z.cells + CBT_STREAM_MARK_CELLS_PER_ITEM - 1) / CBT_STREAM_MARK_CELLS_PER_ITEM;
    }
    uint64_t pos;
    if (!claim(s, k, &pos)) {
        atomic_fetch_add_explicit(&s->full_refusals, 1, memory_order_relaxed);
        return CBT_ERR_FULL;
    }
    cbt_stream_slot *sl = slot_at(s, pos);
    sl->fn = fn;
    sl->cta_fn = cta_fn;
    sl->n_ctas = n_ctas;
    sl->arg = arg;
    sl->n_slots = k;
    if (ev) {
        unsigned char *rec = room_at(s, pos);
        /* stamped with the enqueue time (the queue-time's host end): one
         * rdtsc (clock.h; elsewhere CLOCK_MONOTONIC through the vDSO), no
         * system call, no lock. Not rdtscp: the stamp is written into the
         * record before the commit below, so it was read before the worker
         * can see the mark and stamp it with its own ordered read */
        cbt_rec_write(rec, z, ev, cbt_clock_ticks(), NULL, NULL);
        if (ev->pair == 0) { /* in the record, so the caller's event is not copied */
            uint64_t pair = s->ordinal;
            memcpy(rec + 16 + offsetof(cbt_event, pair), &pair, sizeof pair);
        }
    }
    atomic_fetch_add_explicit(&s->enqueued, 1, memory_order_relaxed);
    /* the commit. seq_cst: release for the slot and the record (pairs with
     * the worker's acquire load of seq in cpu_worker) and the producer's
     * half of the Dekker pair with worker_wait (store seq, load sleeping) */
    atomic_store_explicit(&sl->seq, pos + 1, memory_order_seq_cst);
    if (atomic_load_explicit(&s->sleeping, memory_order_seq_cst) &&
        atomic_exchange_explicit(&s->sleeping, 0, memory_order_seq_cst)) {
        /* the worker said it sleeps, and no other producer took the wake */
        atomic_fetch_add_explicit(&s->wake_seq, 1, memory_order_seq_cst);
        cbt_futex_wake_(&s->wake_seq, 1);
    }
    return CBT_OK;
}

cbt_status cbt_stream_enqueue(cbt_stream *s, cbt_stream_fn fn, void *arg)
{
    if (!s || !fn)
        return CBT_ERR_INVAL;
    if (s->kind == CBT_STREAM_CUDA) {
        cbt_status st = cbt_cuda_stream_enqueue_(s, fn, arg);
        if (st == CBT_OK)
            atomic_fetch_add_explicit(&s->enqueued, 1, memory_order_relaxed);
        return st;
    }
    return cpu_push(s, fn, NULL, 0, arg, NULL);
}

cbt_status cbt_cpu_launch(cbt_stream *s, uint32_t n_ctas, cbt_cta_fn cta_fn, void *args)
{
    if (!s || !cta_fn || n_ctas == 0 || s->kind != CBT_STREAM_CPU)
        return CBT_ERR_INVAL;
    return cpu_push(s, NULL, cta_fn, n_ctas, args, NULL);
}

cbt_status cbt_publish_on_stream(cbt_stream *s, const cbt_event *ev)
{
    if (!s || !ev)
        return CBT_ERR_INVAL;
    cbt_tracer *t = cbt_tracer_get();
    if (__builtin_expect(t == NULL, 0))
        return CBT_OK;
    if (!cbt_event_type_valid(ev->type)) {
        atomic_fetch_add_explicit(&t->rejected, 1, memory_order_relaxed);
        return CBT_ERR_UNKNOWN_EVENT;
    }
    cbt_event hooked;
    /* the stream's own flags on the caller's event (an event it was handed,
     * republished): this stream sets them itself when it reaches the mark;
     * dropped before anything reads the enqueue block they would promise */
    uint32_t stray = ev->flags & (CBT_EVF_FROM_STREAM | CBT_EVF_ENQUEUED);
    if (__builtin_expect(stray != 0, 0)) {
        cbt_event_copy_used_masked_(&hooked, ev, stray);
        ev = &hooked;
    }
    if (__builtin_expect((ev->flags & CBT_EVF_ARRAYS) != 0, 0)) {
        /* the elements into the store now: the caller's are gone by the time
         * the stream gets here; the mark's record owns the copies */
        if (ev != &hooked)
            cbt_event_copy_used_(&hooked, ev);
        cbt_arrays_adopt_(&hooked);
        ev = &hooked;
    }
    if (__builtin_expect(t->publish_hook != NULL, 0)) {
        if (ev != &hooked)
            cbt_event_copy_used_(&hooked, ev);
        if (hooked.pair == 0) /* the hook pairs START/END as the subscribers will */
            hooked.pair = s->ordinal;
        t->publish_hook(t->publish_hook_ctx, &hooked, 1);
        ev = &hooked;
    }
    cbt_status st;
    if (s->kind == CBT_STREAM_CUDA) {
        st = cbt_cuda_stream_mark_(s, t, ev); /* counts its own refusals in dropped_full */
        if (st != CBT_OK && (ev->flags & CBT_EVF_ARRAYS))
            cbt_arrays_release_event_(ev);
        if (st == CBT_OK)
            atomic_fetch_add_explicit(&s->enqueued, 1, memory_order_relaxed);
        else if (st == CBT_ERR_FULL)
            atomic_fetch_add_explicit(&s->full_refusals, 1, memory_order_relaxed);
        return st;
    }
    st = cpu_push(s, NULL, NULL, 0, NULL, ev);
    if (st == CBT_ERR_FULL)
        atomic_fetch_add_explicit(&t->bus.dropped, 1, memory_order_relaxed);
    if (st != CBT_OK && (ev->flags & CBT_EVF_ARRAYS))
        cbt_arrays_release_event_(ev);
    return st;
}

/* ---- waiting, stats, destroy ------------------------------------------------ */

cbt_status cbt_stream_sync(cbt_stream *s)
{
    if (!s)
        return CBT_ERR_INVAL;
    if (s->kind == CBT_STREAM_CUDA)
        return cbt_cuda_stream_sync_(s);
    /* every position claimed so far: our own claims are in it (program
     * order), and the worker passes them only once they are committed */
    uint64_t target = atomic_load_explicit(&s->tail, memory_order_relaxed);
    /* seq_cst (acquire): pairs with the worker's store of done in run_item */
    if (atomic_load_explicit(&s->done, memory_order_seq_cst) >= target)
        return CBT_OK;
    /* seq_cst: our half of the Dekker pair with run_item (store done, load
     * sync_waiters): either the worker sees us waiting, or we see its done */
    atomic_fetch_add_explicit(&s->sync_waiters, 1, memory_order_seq_cst);
    for (;;) {
        uint32_t i = atomic_load_explicit(&s->idle_seq, memory_order_seq_cst);
        if (atomic_load_explicit(&s->done, memory_order_seq_cst) >= target)
            break;
        cbt_futex_wait_(&s->idle_seq, i, 0);
    }
    atomic_fetch_sub_explicit(&s->sync_waiters, 1, memory_order_relaxed);
    return CBT_OK;
}

uint32_t cbt_stream_ordinal(const cbt_stream *s) { return s ? s->ordinal : 0; }

void *cbt_stream_cuda_handle(const cbt_stream *s)
{
    return (s && s->kind == CBT_STREAM_CUDA) ? s->cuda_stream : NULL;
}

cbt_status cbt_stream_stats_get(const cbt_stream *s, cbt_stream_stats *caller)
{
    if (!s)
        return CBT_ERR_INVAL;
    cbt_status st = cbt_abi_out_check_(caller);
    if (st)
        return st;
    cbt_stream_stats full;
    memset(&full, 0, sizeof full);
#define R(x) atomic_load_explicit(&s->x, memory_order_relaxed)
    full.items_enqueued = R(enqueued);
    full.items_completed = R(completed);
    full.marks_published = R(marks_published);
    full.marks_dropped = R(marks_dropped);
    full.full_refusals = R(full_refusals);
#undef R
    cbt_abi_out_(caller, &full, sizeof full, CBT_STREAM_STATS_VERSION);
    return CBT_OK;
}

void cbt_stream_destroy(cbt_stream *s)
{
    if (!s)
        return;
    if (s->kind == CBT_STREAM_CUDA) {
        if (cbt_cuda_stream_fini_(s))
            free(s);
        return;
    }
    cbt_stream_sync(s);
    /* seq_cst, then the bump: a worker that read wake_seq before the bump
     * and found stop clear returns from its futex_wait at once */
    atomic_store_explicit(&s->stop, 1, memory_order_seq_cst);
    atomic_fetch_add_explicit(&s->wake_seq, 1, memory_order_seq_cst);
    cbt_futex_wake_(&s->wake_seq, 1);
    pthread_join(s->worker, NULL);
    free(s->room_raw);
    free(s->slots);
    free(s);
}

/* ---- the harvester's source: CUDA streams with pending marks ----
 * Each round (under the harvester's lock and streams_lock, which a
 * stream's attach and detach take), every leading mark that has completed is dispatched, in stream
 * order; the marks still pending keep the harvester polling, and hold a
 * flush. Before the kernel spans' source: a launch's KERNEL_LAUNCH mark
 * resolves before its ring records are joined. */
static void streams_poll(void *ctx, cbt_hv_round *r)
{
    cbt_tracer *t = ctx;
    pthread_mutex_lock(&t->streams_lock);
    for (uint32_t i = 0; i < t->n_streams; i++)
        r->pending += cbt_stream_poll_(t->streams[i], t);
    pthread_mutex_unlock(&t->streams_lock);
}

void cbt_streams_source_(cbt_tracer *t, cbt_hv_source *out)
{
    memset(out, 0, sizeof *out);
    out->name = "streams";
    out->ctx = t;
    out->poll = streams_poll;
}
