/* cli/sink_watch.c — owns the wrapper sink that keeps a sink's final
 * losses (see sink_watch.h). Every callback runs where the tracer calls it
 * (harvester thread; destroy in cbt_shutdown) and forwards as is. */
#include "sink_watch.h"

#include <string.h>

static cbt_status watch_on_span(void *ctx, const cbt_span *s)
{
    sink_watch *w = ctx;
    return w->inner.on_span(w->inner.ctx, s);
}

static cbt_status watch_flush(void *ctx)
{
    sink_watch *w = ctx;
    return w->inner.flush ? w->inner.flush(w->inner.ctx) : CBT_OK;
}

static cbt_status watch_on_cta(void *ctx, const cbt_cta_record *r)
{
    sink_watch *w = ctx;
    return w->inner.on_cta ? w->inner.on_cta(w->inner.ctx, r) : CBT_OK;
}

static uint64_t watch_spans_lost(void *ctx)
{
    sink_watch *w = ctx;
    return w->inner.spans_lost ? w->inner.spans_lost(w->inner.ctx) : 0;
}

static void watch_destroy(void *ctx)
{
    sink_watch *w = ctx;
    w->lost = watch_spans_lost(w); /* after the tracer's last flush */
    if (w->inner.destroy)
        w->inner.destroy(w->inner.ctx);
    w->destroyed = 1;
}

void sink_watch_wrap(sink_watch *w, const cbt_sink *inner, cbt_sink *out)
{
    memset(w, 0, sizeof *w);
    w->inner = *inner; /* built by this cbt's constructors: the full size */
    *out = (cbt_sink)CBT_STRUCT_INIT(cbt_sink);
    out->name = inner->name;
    out->ctx = w;
    out->on_span = watch_on_span;
    out->flush = watch_flush;
    out->destroy = watch_destroy;
    out->on_cta = inner->on_cta ? watch_on_cta : NULL;
    out->spans_lost = watch_spans_lost;
    /* how the tracer is to call it: a sink thread or not, flushed when idle */
    out->flags = inner->flags;
}
