/* host/streams/stream.c — owns the stream interface and the CPU backend.
 *
 * A CPU stream is one worker thread running a bounded FIFO of items: work
 * (a function and its argument: a kernel's reference implementation, a host
 * callback) and marks (events to publish). The worker stamps a mark when it
 * reaches it and pushes it onto the tracer's bus, so the harvester sees it at
 * the moment the stream got there, as a GPU stream's callback would. A
 * mark's event waits in a FIFO of records of its used bytes
 * (internal/record.h), CBT_STREAM_MARK_CELLS_PER_ITEM cells per item of
 * capacity, rather than in a whole cbt_event per item.
 *
 * Stop path: cbt_stream_destroy() drains the FIFO, sets `stop`, wakes and
 * joins the worker. Streams must be synced or destroyed before cbt_shutdown().
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cbt/kernel_span.h"
#include "internal/stream.h"

static _Atomic uint32_t g_next_ordinal = 1;

uint32_t cbt_stream_next_ordinal_(void)
{
    return atomic_fetch_add_explicit(&g_next_ordinal, 1, memory_order_relaxed);
}

static void *cpu_worker(void *arg)
{
    cbt_stream *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (s->count == 0 && !s->stop)
            pthread_cond_wait(&s->work_cv, &s->lock);
        if (s->count == 0 && s->stop)
            break;
        cbt_stream_item *it = &s->ring[s->head];
        pthread_mutex_unlock(&s->lock);
        /* the slot stays ours until head advances below */
        if (it->fn) {
            it->fn(it->arg);
        } else if (it->cta_fn) {
            /* an emulated launch: CTAs one after another on this worker,
             * which plays the SM numbered by the stream's ordinal */
            for (uint32_t c = 0; c < it->n_ctas; c++) {
                cbt_cpu_cta_enter(c, it->n_ctas, (uint16_t)s->ordinal);
                it->cta_fn(it->arg, c, it->n_ctas);
                cbt_cpu_cta_leave();
            }
        } else {
            /* the oldest record is this mark's: producers do not touch it
             * until it is dropped below */
            cbt_event ev;
            uint64_t unused;
            cbt_rec_fifo_oldest(&s->marks, &ev, &unused);
            cbt_tracer *t = cbt_tracer_get();
            if (t) {
                uint64_t ticks = cbt_clock_ticks_ordered();
                ev.flags |= CBT_EVF_FROM_STREAM;
                cbt_tracer_push_(t, &ev, ticks, NULL, NULL);
            }
        }
        int was_mark = !it->fn && !it->cta_fn;
        pthread_mutex_lock(&s->lock);
        if (was_mark)
            cbt_rec_fifo_drop(&s->marks);
        s->head = (s->head + 1) % s->cap;
        s->count--;
        s->completed++;
        pthread_cond_broadcast(&s->idle_cv);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

cbt_status cbt_stream_cpu_create(uint32_t capacity, cbt_stream **out)
{
    if (!out)
        return CBT_ERR_INVAL;
    if (capacity == 0)
        capacity = CBT_STREAM_DEFAULT_CAPACITY;
    if (capacity > (1u << 20))
        return CBT_ERR_INVAL;
    cbt_stream *s = calloc(1, sizeof *s);
    if (!s)
        return CBT_ERR_NOMEM;
    s->ring = calloc(capacity, sizeof *s->ring);
    uint32_t cells = CBT_BUS_CELLS_MIN;
    while (cells < capacity * CBT_STREAM_MARK_CELLS_PER_ITEM)
        cells <<= 1;
    if (!s->ring || cbt_rec_fifo_init(&s->marks, cells) != CBT_OK) {
        free(s->ring);
        free(s);
        return CBT_ERR_NOMEM;
    }
    s->kind = CBT_STREAM_CPU;
    s->cap = capacity;
    s->ordinal = cbt_stream_next_ordinal_();
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->work_cv, NULL);
    pthread_cond_init(&s->idle_cv, NULL);
    if (pthread_create(&s->worker, NULL, cpu_worker, s) != 0) {
        pthread_cond_destroy(&s->idle_cv);
        pthread_cond_destroy(&s->work_cv);
        pthread_mutex_destroy(&s->lock);
        cbt_rec_fifo_free(&s->marks);
        free(s->ring);
        free(s);
        return CBT_ERR_THREAD;
    }
    *out = s;
    return CBT_OK;
}

static cbt_status cpu_push(cbt_stream *s, cbt_stream_fn fn, cbt_cta_fn cta_fn, uint32_t n_ctas,
                           void *arg, const cbt_event *ev)
{
    cbt_event paired;
    if (ev && ev->pair == 0) { /* outside the lock: a copy of the used part */
        cbt_event_copy_used_(&paired, ev);
        paired.pair = s->ordinal;
        ev = &paired;
    }
    pthread_mutex_lock(&s->lock);
    if (s->stop) {
        pthread_mutex_unlock(&s->lock);
        return CBT_ERR_STOPPED;
    }
    if (s->count == s->cap || (ev && cbt_rec_fifo_put(&s->marks, ev, 0) != CBT_OK)) {
        pthread_mutex_unlock(&s->lock);
        return CBT_ERR_FULL;
    }
    cbt_stream_item *it = &s->ring[(s->head + s->count) % s->cap];
    it->fn = fn;
    it->cta_fn = cta_fn;
    it->n_ctas = n_ctas;
    it->arg = arg;
    s->count++;
    s->enqueued++;
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->lock);
    return CBT_OK;
}

cbt_status cbt_stream_cuda_create(void *cuda_stream, cbt_stream **out)
{
    if (!out)
        return CBT_ERR_INVAL;
    cbt_stream *s = calloc(1, sizeof *s);
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

cbt_status cbt_stream_enqueue(cbt_stream *s, cbt_stream_fn fn, void *arg)
{
    if (!s || !fn)
        return CBT_ERR_INVAL;
    if (s->kind == CBT_STREAM_CUDA)
        return cbt_cuda_stream_enqueue_(s, fn, arg);
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
    if (__builtin_expect(t->publish_hook != NULL, 0)) {
        cbt_event_copy_used_(&hooked, ev);
        if (hooked.pair == 0) /* the hook pairs START/END as the subscribers will */
            hooked.pair = s->ordinal;
        t->publish_hook(t->publish_hook_ctx, &hooked, 1);
        ev = &hooked;
    }
    if (s->kind == CBT_STREAM_CUDA)
        return cbt_cuda_stream_mark_(s, t, ev);
    cbt_status st = cpu_push(s, NULL, NULL, 0, NULL, ev);
    if (st == CBT_ERR_FULL)
        atomic_fetch_add_explicit(&t->bus.dropped, 1, memory_order_relaxed);
    return st;
}

cbt_status cbt_stream_sync(cbt_stream *s)
{
    if (!s)
        return CBT_ERR_INVAL;
    if (s->kind == CBT_STREAM_CUDA)
        return cbt_cuda_stream_sync_(s);
    pthread_mutex_lock(&s->lock);
    uint64_t target = s->enqueued;
    while (s->completed < target)
        pthread_cond_wait(&s->idle_cv, &s->lock);
    pthread_mutex_unlock(&s->lock);
    return CBT_OK;
}

uint32_t cbt_stream_ordinal(const cbt_stream *s) { return s ? s->ordinal : 0; }

void *cbt_stream_cuda_handle(const cbt_stream *s)
{
    return (s && s->kind == CBT_STREAM_CUDA) ? s->cuda_stream : NULL;
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
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    pthread_cond_broadcast(&s->work_cv);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->worker, NULL);
    pthread_cond_destroy(&s->idle_cv);
    pthread_cond_destroy(&s->work_cv);
    pthread_mutex_destroy(&s->lock);
    cbt_rec_fifo_free(&s->marks);
    free(s->ring);
    free(s);
}
