/* host/spans/span.c — owns span lifetime: the bounded pool, typed attributes, ending.
 *
 * Harvester thread only. A span comes from the tracer's pool at start and goes
 * back at end, after every sink has seen it; sinks copy what they keep.
 */
#include <stdlib.h>
#include <string.h>

#include "internal/tracer.h"

cbt_status cbt_spans_init_(cbt_tracer *t, uint32_t n)
{
    t->spans = calloc(n, sizeof *t->spans);
    t->span_free = calloc(n, sizeof *t->span_free);
    if (!t->spans || !t->span_free) {
        free(t->spans);
        free(t->span_free);
        t->spans = NULL;
        t->span_free = NULL;
        return CBT_ERR_NOMEM;
    }
    for (uint32_t i = 0; i < n; i++)
        t->span_free[i] = n - 1 - i;
    t->n_span_free = n;
    return CBT_OK;
}

void cbt_spans_free_(cbt_tracer *t)
{
    free(t->spans);
    free(t->span_free);
    t->spans = NULL;
    t->span_free = NULL;
}

bool cbt_span_ctx_valid(const cbt_span_ctx *c)
{
    if (!c)
        return false;
    uint64_t a, b, s;
    memcpy(&a, c->trace_id, 8);
    memcpy(&b, c->trace_id + 8, 8);
    memcpy(&s, c->span_id, 8);
    return (a | b) != 0 && s != 0;
}

cbt_span *cbt_span_start(cbt_tracer *t, cbt_name name, cbt_span_kind kind,
                         const cbt_span_ctx *parent, uint64_t start_ns)
{
    if (!t)
        return NULL;
    if (t->n_span_free == 0) {
        atomic_fetch_add_explicit(&t->spans_dropped, 1, memory_order_relaxed);
        return NULL;
    }
    uint32_t idx = t->span_free[--t->n_span_free];
    cbt_span *s = &t->spans[idx];
    s->name = name;
    s->kind = (uint8_t)kind;
    s->status = CBT_SPAN_STATUS_UNSET;
    s->flags = 0;
    s->start_ns = start_ns;
    s->end_ns = 0;
    s->n_attrs = 0;
    s->arena_used = 0;
    s->attrs_dropped = 0;
    s->pool_index_ = (uint16_t)idx;
    if (parent && cbt_span_ctx_valid(parent)) {
        memcpy(s->ctx.trace_id, parent->trace_id, 16);
        memcpy(s->parent_span_id, parent->span_id, 8);
        s->ctx.trace_flags = parent->trace_flags;
    } else {
        cbt_ids_trace(&t->ids, s->ctx.trace_id);
        memset(s->parent_span_id, 0, 8);
        s->ctx.trace_flags = 1;
    }
    cbt_ids_span(&t->ids, s->ctx.span_id);
    atomic_fetch_add_explicit(&t->spans_started, 1, memory_order_relaxed);
    return s;
}

static cbt_attr *attr_slot(cbt_span *s, cbt_name key)
{
    for (uint16_t i = 0; i < s->n_attrs; i++)
        if (s->attrs[i].key == key)
            return &s->attrs[i];
    if (s->n_attrs >= CBT_SPAN_ATTR_MAX) {
        s->attrs_dropped++;
        s->flags |= CBT_SPANF_ATTRS_DROPPED;
        return NULL;
    }
    cbt_attr *a = &s->attrs[s->n_attrs++];
    memset(a, 0, sizeof *a);
    a->key = key;
    return a;
}

cbt_status cbt_span_set_i64(cbt_span *s, cbt_name key, int64_t v)
{
    if (!s || !key)
        return CBT_ERR_INVAL;
    cbt_attr *a = attr_slot(s, key);
    if (!a)
        return CBT_ERR_FULL;
    a->type = CBT_META_I64;
    a->v.i64 = v;
    return CBT_OK;
}

cbt_status cbt_span_set_f64(cbt_span *s, cbt_name key, double v)
{
    if (!s || !key)
        return CBT_ERR_INVAL;
    cbt_attr *a = attr_slot(s, key);
    if (!a)
        return CBT_ERR_FULL;
    a->type = CBT_META_F64;
    a->v.f64 = v;
    return CBT_OK;
}

cbt_status cbt_span_set_bool(cbt_span *s, cbt_name key, bool v)
{
    if (!s || !key)
        return CBT_ERR_INVAL;
    cbt_attr *a = attr_slot(s, key);
    if (!a)
        return CBT_ERR_FULL;
    a->type = CBT_META_BOOL;
    a->v.i64 = 0;
    a->v.b = v;
    return CBT_OK;
}

cbt_status cbt_span_set_str(cbt_span *s, cbt_name key, const char *v, size_t len)
{
    if (!s || !key || (!v && len))
        return CBT_ERR_INVAL;
    cbt_attr *a = NULL;
    for (uint16_t i = 0; i < s->n_attrs; i++)
        if (s->attrs[i].key == key)
            a = &s->attrs[i];
    /* an overwrite of a string reuses its bytes when the new value fits */
    bool reuse = a && a->type == CBT_META_STR && a->str_len >= len;
    if (!reuse && (size_t)s->arena_used + len > CBT_SPAN_STR_ARENA) {
        s->attrs_dropped++;
        s->flags |= CBT_SPANF_ATTRS_DROPPED;
        return CBT_ERR_FULL;
    }
    if (!a && !(a = attr_slot(s, key)))
        return CBT_ERR_FULL;
    if (!reuse) {
        a->str_off = s->arena_used;
        s->arena_used = (uint16_t)(s->arena_used + len);
    }
    a->type = CBT_META_STR;
    a->str_len = (uint16_t)len;
    if (len)
        memcpy(s->arena + a->str_off, v, len);
    return CBT_OK;
}

void cbt_span_set_from_event(cbt_span *s, const cbt_event *ev)
{
    if (!s || !ev)
        return;
    for (uint8_t i = 0; i < ev->n_meta && i < CBT_EVENT_META_MAX; i++) {
        const cbt_meta *m = &ev->meta[i];
        switch (m->type) {
        case CBT_META_I64: cbt_span_set_i64(s, m->key, m->v.i64); break;
        case CBT_META_F64: cbt_span_set_f64(s, m->key, m->v.f64); break;
        case CBT_META_BOOL: cbt_span_set_bool(s, m->key, m->v.b); break;
        case CBT_META_STR: {
            size_t len = 0;
            const char *v = cbt_event_meta_str(ev, m, &len);
            if (v)
                cbt_span_set_str(s, m->key, v, len);
            break;
        }
        default: break;
        }
    }
}

const cbt_attr *cbt_span_attr(const cbt_span *s, cbt_name key)
{
    if (!s)
        return NULL;
    for (uint16_t i = 0; i < s->n_attrs; i++)
        if (s->attrs[i].key == key)
            return &s->attrs[i];
    return NULL;
}

const char *cbt_attr_str(const cbt_span *s, const cbt_attr *a)
{
    if (!s || !a || a->type != CBT_META_STR)
        return NULL;
    return s->arena + a->str_off;
}

void cbt_span_end(cbt_tracer *t, cbt_span *s, uint64_t end_ns)
{
    if (!t || !s)
        return;
    s->end_ns = end_ns < s->start_ns ? s->start_ns : end_ns;
    if (s->ctx.trace_flags & 1u) {
        for (uint32_t i = 0; i < t->n_sinks; i++) {
            cbt_sink *k = &t->sinks[i];
            if (k->on_span && k->on_span(k->ctx, s) != CBT_OK)
                atomic_fetch_add_explicit(&t->sink_errors, 1, memory_order_relaxed);
        }
    } else {
        /* its trace was sampled out (a not-sampled context it joined, or a
         * parent that did): recorded nowhere, as OpenTelemetry's
         * non-recording spans */
        atomic_fetch_add_explicit(&t->spans_unsampled, 1, memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&t->spans_ended, 1, memory_order_relaxed);
    t->span_free[t->n_span_free++] = s->pool_index_;
}

cbt_span *cbt_span_start_for_event(cbt_tracer *t, cbt_name name, cbt_span_kind kind,
                                   const cbt_span_ctx *local_parent, const cbt_event *ev)
{
    return ev ? cbt_span_start_for_event_at_(t, name, kind, local_parent, ev, ev->ts) : NULL;
}

cbt_span *cbt_span_start_for_event_at_(cbt_tracer *t, cbt_name name, cbt_span_kind kind,
                                       const cbt_span_ctx *local_parent, const cbt_event *ev,
                                       uint64_t start_ns)
{
    if (!ev)
        return NULL;
    const cbt_event_trace *tr = cbt_event_trace_of(ev);
    const cbt_span_ctx *parent = local_parent;
    bool adopt = false;
    if (tr && !cbt_bytes_zero_(tr->parent.trace_id, 16)) {
        if (!cbt_bytes_zero_(tr->parent.span_id, 8))
            parent = &tr->parent;
        else if (!cbt_span_ctx_valid(local_parent))
            adopt = true;
    }
    cbt_span *s = cbt_span_start(t, name, kind, parent, start_ns);
    if (!s)
        return NULL;
    if (adopt) {
        memcpy(s->ctx.trace_id, tr->parent.trace_id, 16);
        s->ctx.trace_flags = tr->parent.trace_flags;
    }
    if (tr && !cbt_bytes_zero_(tr->span_id, 8))
        memcpy(s->ctx.span_id, tr->span_id, 8);
    return s;
}
