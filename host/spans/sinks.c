/* host/spans/sinks.c — owns the tracer's list of sinks: adding one (wrapped
 * in a sink thread when it may wait), handing spans and CTA records to all,
 * flushing within a bound, the loss count, the stop and the destroy
 * (internal/sinks.h). No lock on any path but the adders'.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "internal/abi.h"
#include "internal/clock.h"
#include "internal/sinks.h"

void cbt_sinks_init_(cbt_sinks *l, int threads, uint32_t shutdown_ms)
{
    memset(l, 0, sizeof *l);
    atomic_init(&l->n, 0);
    atomic_init(&l->errors, 0);
    pthread_mutex_init(&l->add_lock, NULL);
    l->threads = threads;
    l->shutdown_ms = shutdown_ms;
}

/* The slots published so far; acquire pairs with the release in add. */
static inline uint32_t count(cbt_sinks *l)
{
    return atomic_load_explicit(&l->n, memory_order_acquire);
}

cbt_status cbt_sinks_add_(cbt_sinks *l, const cbt_sink *caller)
{
    cbt_sink k = {0};
    cbt_status st = cbt_abi_in_(&k, sizeof k, caller, CBT_SINK_VERSION);
    if (st)
        return st;
    if (!k.on_span || k.reserved)
        return CBT_ERR_INVAL;
    pthread_mutex_lock(&l->add_lock);
    uint32_t n = atomic_load_explicit(&l->n, memory_order_relaxed);
    if (n >= CBT_MAX_SINKS) {
        pthread_mutex_unlock(&l->add_lock);
        return CBT_ERR_FULL;
    }
    if (l->threads && !(k.flags & CBT_SINK_NONBLOCKING)) {
        cbt_sink w;
        if ((st = cbt_sink_thread_wrap_(&k, &w))) {
            pthread_mutex_unlock(&l->add_lock);
            return st;
        }
        k = w;
    }
    l->k[n] = k;
    /* release: the slot is written before a reader can count it */
    atomic_store_explicit(&l->n, n + 1, memory_order_release);
    pthread_mutex_unlock(&l->add_lock);
    return CBT_OK;
}

void cbt_sinks_span_(cbt_sinks *l, const cbt_span *s)
{
    uint32_t n = count(l);
    for (uint32_t i = 0; i < n; i++)
        if (l->k[i].on_span(l->k[i].ctx, s) != CBT_OK)
            atomic_fetch_add_explicit(&l->errors, 1, memory_order_relaxed);
}

void cbt_sinks_cta_(cbt_sinks *l, const cbt_cta_record *r)
{
    uint32_t n = count(l);
    for (uint32_t i = 0; i < n; i++)
        if (l->k[i].on_cta && l->k[i].on_cta(l->k[i].ctx, r) != CBT_OK)
            atomic_fetch_add_explicit(&l->errors, 1, memory_order_relaxed);
}

/* A sink's own flush, bounded by the deadline; its result into *out. */
static void flush_result(cbt_sinks *l, cbt_status st, uint64_t deadline, cbt_status *out)
{
    if (st == CBT_ERR_TIMEOUT && cbt_clock_mono_ns() >= deadline) {
        *out = CBT_ERR_TIMEOUT; /* our bound ran out */
    } else if (st != CBT_OK) {
        /* failed, or gave up by its own bound (an exporter's timeout_ms) */
        atomic_fetch_add_explicit(&l->errors, 1, memory_order_relaxed);
        if (*out == CBT_OK)
            *out = CBT_ERR_IO;
    }
}

cbt_status cbt_sinks_flush_(cbt_sinks *l, uint64_t deadline)
{
    cbt_status out = CBT_OK;
    uint32_t n = count(l);
    uint64_t ticket[CBT_MAX_SINKS] = {0};
    /* every sink thread starts its flush first, so they run together */
    for (uint32_t i = 0; i < n; i++)
        if (cbt_sink_is_thread_(&l->k[i]))
            ticket[i] = cbt_sink_thread_flush_post_(l->k[i].ctx);
    for (uint32_t i = 0; i < n; i++) {
        cbt_sink *k = &l->k[i];
        if (cbt_sink_is_thread_(k)) {
            flush_result(l, cbt_sink_thread_flush_wait_(k->ctx, ticket[i], deadline), deadline,
                         &out);
            continue;
        }
        uint64_t now = cbt_clock_mono_ns();
        /* rounded up: a bound that has not run out is never 0 ms */
        uint32_t left = now < deadline ? (uint32_t)((deadline - now + 999999ull) / 1000000ull) : 0;
        if (k->flush_within)
            flush_result(l, k->flush_within(k->ctx, left), deadline, &out);
        else if (k->flush) /* a non-blocking sink's flush does not wait (cbt/span.h) */
            flush_result(l, k->flush(k->ctx), deadline, &out);
    }
    return out;
}

void cbt_sinks_flush_abort_(cbt_sinks *l, int on)
{
    uint32_t n = count(l);
    for (uint32_t i = 0; i < n; i++)
        if (cbt_sink_is_thread_(&l->k[i]))
            cbt_sink_thread_flush_abort_(l->k[i].ctx, on);
}

uint64_t cbt_sinks_errors_(cbt_sinks *l)
{
    uint64_t e = atomic_load_explicit(&l->errors, memory_order_relaxed);
    uint32_t n = count(l);
    for (uint32_t i = 0; i < n; i++)
        if (cbt_sink_is_thread_(&l->k[i]))
            e += cbt_sink_thread_errors_(l->k[i].ctx);
    return e;
}

uint64_t cbt_sinks_lost_(cbt_sinks *l)
{
    uint64_t lost = 0;
    uint32_t n = count(l);
    for (uint32_t i = 0; i < n; i++)
        if (l->k[i].spans_lost)
            lost += l->k[i].spans_lost(l->k[i].ctx);
    return lost;
}

void cbt_sinks_stop_post_(cbt_sinks *l)
{
    uint32_t n = count(l);
    for (uint32_t i = 0; i < n; i++)
        if (cbt_sink_is_thread_(&l->k[i]))
            cbt_sink_thread_stop_post_(l->k[i].ctx);
}

void cbt_sinks_stop_(cbt_sinks *l, uint64_t deadline)
{
    uint32_t n = count(l);
    /* every thread told first (again, if cbt_sinks_stop_post_ did already):
     * one stuck sink must not eat the others' time */
    cbt_sinks_stop_post_(l);
    for (uint32_t i = 0; i < n; i++)
        if (cbt_sink_is_thread_(&l->k[i]) && !cbt_sink_thread_stop_wait_(l->k[i].ctx, deadline))
            fprintf(stderr, "cbt: sink '%s' was still busy when shutdown_timeout_ms (%u ms) ran "
                            "out: abandoned (what it held is counted in sink_spans_lost)\n",
                    l->k[i].name ? l->k[i].name : "?", l->shutdown_ms);
}

void cbt_sinks_destroy_(cbt_sinks *l)
{
    uint32_t n = count(l);
    for (uint32_t i = 0; i < n; i++)
        if (l->k[i].destroy)
            l->k[i].destroy(l->k[i].ctx);
    atomic_store_explicit(&l->n, 0, memory_order_relaxed);
    pthread_mutex_destroy(&l->add_lock);
}
