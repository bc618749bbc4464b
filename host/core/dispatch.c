/* host/core/dispatch.c — owns the subscriber list and the dispatch of one
 * event to it: the step between a source that resolved an event's time
 * (the lanes, a stream) and the builders that turn events into spans.
 *
 * The list is append-only: an adder (cbt_add_subscriber, any thread, under
 * sub_lock, which nothing else takes) writes the slot, then publishes the
 * count with release; the harvester loads the count with acquire once per
 * event and reads the slots below it. A subscriber is never removed while
 * the tracer lives.
 */
#include <stdio.h>

#include "internal/arrays.h"
#include "internal/abi.h"
#include "internal/counter.h"
#include "internal/recorder.h"
#include "internal/tracer.h"

cbt_status cbt_subscribers_add_(cbt_tracer *t, const cbt_subscriber *sub)
{
    cbt_subscriber s = {0};
    cbt_status st = cbt_abi_in_(&s, sizeof s, sub, CBT_SUBSCRIBER_VERSION);
    if (st)
        return st;
    if (!s.on_event)
        return CBT_ERR_INVAL;
    pthread_mutex_lock(&t->sub_lock);
    uint32_t n = atomic_load_explicit(&t->n_subs, memory_order_relaxed);
    if (n >= CBT_MAX_SUBSCRIBERS) {
        pthread_mutex_unlock(&t->sub_lock);
        return CBT_ERR_FULL;
    }
    if (cbt_recorder_started_(t->rec) && cbt_rec_rebuilt_(&s))
        fprintf(stderr, "cbt: the '%s' builder was added after the recording began: the trace "
                        "file's configuration lacks it, and a replay of the file will not build "
                        "its spans (add builders before the first event)\n",
                s.name ? s.name : "?");
    t->subs[n] = s;
    /* release: the slot is written before the harvester can count it */
    atomic_store_explicit(&t->n_subs, n + 1, memory_order_release);
    pthread_mutex_unlock(&t->sub_lock);
    return CBT_OK;
}

/* Recording: the event, then the subscribers; a subscriber a replay does
 * not rebuild (a program's own) that starts spans draws span ids nothing in
 * the file explains, so the generator's state after it is recorded, and a
 * replay's later ids stay the live run's. */
static void dispatch_recorded(cbt_tracer *t, const cbt_event *ev)
{
    cbt_rec_event_(t, ev);
    uint32_t n = cbt_subscribers_n_(t);
    for (uint32_t i = 0; i < n; i++) {
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

static void dispatch_one(cbt_tracer *t, const cbt_event *ev, uint64_t stamp_ticks);

/* An event with array values: a replay's (its elements still borrowed)
 * has them copied into the store first; after the subscribers, the
 * references the event holds are let go (a span that kept an array took
 * its own). */
static void dispatch_arrays(cbt_tracer *t, const cbt_event *ev, uint64_t stamp_ticks)
{
    uint32_t n = cbt_rec_n_meta_(ev);
    int borrowed = 0;
    for (uint32_t i = 0; i < n; i++)
        borrowed |= ev->meta[i].type == CBT_META_ARRAY && ev->meta[i].v.arr.src != NULL;
    if (borrowed) {
        cbt_event e;
        cbt_event_copy_used_(&e, ev);
        cbt_arrays_adopt_(&e);
        dispatch_one(t, &e, stamp_ticks);
        cbt_arrays_release_event_(&e);
        return;
    }
    dispatch_one(t, ev, stamp_ticks);
    cbt_arrays_release_event_(ev);
}

void cbt_dispatch_(cbt_tracer *t, const cbt_event *ev, uint64_t stamp_ticks)
{
    if (__builtin_expect((ev->flags & CBT_EVF_ARRAYS) != 0, 0))
        dispatch_arrays(t, ev, stamp_ticks);
    else
        dispatch_one(t, ev, stamp_ticks);
}

static void dispatch_one(cbt_tracer *t, const cbt_event *ev, uint64_t stamp_ticks)
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
    uint32_t n = cbt_subscribers_n_(t);
    for (uint32_t i = 0; i < n; i++) {
        cbt_subscriber *s = &t->subs[i];
        if (!cbt_subscriber_wants(s, ev->type))
            continue;
        if (s->on_event(s->ctx, t, ev) != CBT_OK)
            cbt_count1_(&t->subscriber_errors);
    }
    cbt_count1_(&t->dispatched);
}
