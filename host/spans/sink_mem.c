/* host/spans/sink_mem.c — owns the in-memory span sink (tests, the demo's tree printer).
 *
 * Keeps copies of up to `capacity` finished spans in one array allocated at
 * creation; more are counted as dropped. A copy of a span with arrays holds
 * a reference to each (internal/arrays.h) until the sink is released, so
 * the arrays of what cbt_memsink_get hands out stay readable till then. Its own mutex lets test threads read
 * while the harvester appends.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cbt/span.h"
#include "internal/abi.h"
#include "internal/arrays.h"

struct cbt_memsink {
    pthread_mutex_t lock;
    cbt_span *spans;
    uint32_t cap, n;
    uint64_t dropped;
    int refs; /* the caller's and the tracer's; freed at zero */
};

static cbt_status mem_on_span(void *ctx, const cbt_span *s)
{
    cbt_memsink *m = ctx;
    pthread_mutex_lock(&m->lock);
    cbt_status st = CBT_OK;
    if (m->n < m->cap) {
        m->spans[m->n++] = *s;
        if (s->flags & CBT_SPANF_ARRAYS) /* the copy's arrays live until the release */
            cbt_arrays_ref_span_(s);
    } else {
        m->dropped++;
        st = CBT_ERR_FULL;
    }
    pthread_mutex_unlock(&m->lock);
    return st;
}

void cbt_memsink_release(cbt_memsink *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->lock);
    int left = --m->refs;
    pthread_mutex_unlock(&m->lock);
    if (left > 0)
        return;
    pthread_mutex_destroy(&m->lock);
    for (uint32_t i = 0; i < m->n; i++)
        if (m->spans[i].flags & CBT_SPANF_ARRAYS)
            cbt_arrays_release_span_(&m->spans[i]);
    free(m->spans);
    free(m);
}

static void mem_destroy(void *ctx) { cbt_memsink_release(ctx); }

/* cbt/span.h's inline cbt_memsink_create() set sink_out's version and size:
 * at most that many bytes are written (internal/abi.h). */
cbt_status cbt_memsink_create_into(uint32_t capacity, cbt_memsink **out, cbt_sink *sink_out)
{
    if (!out || !sink_out || capacity == 0)
        return CBT_ERR_INVAL;
    cbt_status abi = cbt_abi_out_check_(sink_out);
    if (abi)
        return abi;
    cbt_memsink *m = calloc(1, sizeof *m);
    if (!m)
        return CBT_ERR_NOMEM;
    m->spans = calloc(capacity, sizeof *m->spans);
    if (!m->spans) {
        free(m);
        return CBT_ERR_NOMEM;
    }
    pthread_mutex_init(&m->lock, NULL);
    m->cap = capacity;
    m->refs = 2;
    cbt_sink k;
    memset(&k, 0, sizeof k);
    k.name = "memory";
    k.ctx = m;
    k.on_span = mem_on_span;
    k.flags = CBT_SINK_NONBLOCKING; /* a copy under its own short lock */
    k.destroy = mem_destroy;
    cbt_abi_out_(sink_out, &k, sizeof k, CBT_SINK_VERSION);
    *out = m;
    return CBT_OK;
}

uint32_t cbt_memsink_count(cbt_memsink *m)
{
    pthread_mutex_lock(&m->lock);
    uint32_t n = m->n;
    pthread_mutex_unlock(&m->lock);
    return n;
}

cbt_status cbt_memsink_get(cbt_memsink *m, uint32_t i, cbt_span *out)
{
    pthread_mutex_lock(&m->lock);
    cbt_status st = CBT_ERR_NOT_FOUND;
    if (i < m->n) {
        *out = m->spans[i];
        st = CBT_OK;
    }
    pthread_mutex_unlock(&m->lock);
    return st;
}

uint64_t cbt_memsink_dropped(cbt_memsink *m)
{
    pthread_mutex_lock(&m->lock);
    uint64_t d = m->dropped;
    pthread_mutex_unlock(&m->lock);
    return d;
}
