/* host/spans/span.c — owns span lifetime: the bounded pool, typed attributes,
 * span events, ending.
 *
 * Harvester thread only. A span comes from the tracer's pool at start and goes
 * back at end, after every sink has seen it; sinks copy what they keep.
 *
 * Attributes and string bytes. The span and its events share one attribute
 * array (each entry says its owner: 0 the span, k event k - 1) and one string
 * arena. The arena is kept packed: it holds exactly the live string values,
 * so arena_used is their total length. A string that is replaced (or whose
 * key is set to another type) gives its bytes back at once, the bytes after
 * it moving down; that is what keeps repeated sets of one key from using the
 * arena up. A string that does not fit what is left is cut and marked
 * (CBT_SPAN_TRUNC_MARK), not dropped.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal/tracer.h"
#include "internal/counter.h"
#include "internal/arrays.h"

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

/* The array references of the spans nobody ended (a program's subscriber
 * that left them open at shutdown): the store outlives the tracer, so they
 * are let go here. A free pool entry may keep an old span's flags: only
 * entries not on the free list count. */
static void spans_release_open_arrays(cbt_tracer *t)
{
    uint32_t n = t->cfg.span_pool;
    if (!t->spans || !t->span_free || t->n_span_free >= n)
        return;
    unsigned char *is_free = calloc(n, 1);
    if (!is_free)
        return; /* their chunks stay taken: the store counts them in arrays_used */
    for (uint32_t i = 0; i < t->n_span_free; i++)
        if (t->span_free[i] < n)
            is_free[t->span_free[i]] = 1;
    for (uint32_t i = 0; i < n; i++)
        if (!is_free[i] && (t->spans[i].flags & CBT_SPANF_ARRAYS))
            cbt_arrays_release_span_(&t->spans[i]);
    free(is_free);
}

void cbt_spans_free_(cbt_tracer *t)
{
    spans_release_open_arrays(t);
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
        cbt_count1_(&t->spans_dropped);
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
    s->n_events = 0;
    s->reserved_ = 0;
    s->events_dropped = 0;
    s->attrs_truncated = 0;
    s->reserved2_ = 0;
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
    cbt_count1_(&t->spans_started);
    return s;
}

static inline void count16(uint16_t *c)
{
    if (*c < UINT16_MAX)
        (*c)++;
}

/* An attribute of `owner` (0: the span, k: event k - 1) did not fit. */
static void count_dropped(cbt_span *s, uint8_t owner)
{
    if (owner == 0) {
        count16(&s->attrs_dropped);
        s->flags |= CBT_SPANF_ATTRS_DROPPED;
    } else {
        count16(&s->events[owner - 1].attrs_dropped);
    }
}

static const cbt_attr *lookup(const cbt_span *s, uint8_t owner, cbt_name key)
{
    for (uint16_t i = 0; i < s->n_attrs && i < CBT_SPAN_ATTR_MAX; i++)
        if (s->attrs[i].key == key && s->attrs[i].owner == owner)
            return &s->attrs[i];
    return NULL;
}

static cbt_attr *find_attr(cbt_span *s, uint8_t owner, cbt_name key)
{
    return (cbt_attr *)lookup(s, owner, key);
}

/* A fresh entry for (owner, key), or NULL (counted) when the array is full. */
static cbt_attr *new_attr(cbt_span *s, uint8_t owner, cbt_name key)
{
    if (s->n_attrs >= CBT_SPAN_ATTR_MAX) {
        count_dropped(s, owner);
        return NULL;
    }
    cbt_attr *a = &s->attrs[s->n_attrs++];
    memset(a, 0, sizeof *a);
    a->key = key;
    a->owner = owner;
    return a;
}

/* Give a string value's bytes back: the bytes after them move down and the
 * strings stored there follow. `a` keeps its type; its length becomes 0. */
static void release_str(cbt_span *s, cbt_attr *a)
{
    if (a->type == CBT_META_ARRAY) { /* an array's reference, not arena bytes */
        cbt_arrays_unref_(a->v.arr.handle);
        a->type = CBT_META_NONE;
        a->v.i64 = 0;
        a->str_len = 0;
        return;
    }
    if (a->type != CBT_META_STR || a->str_len == 0)
        return;
    uint16_t off = a->str_off, len = a->str_len;
    if ((uint32_t)off + len > s->arena_used) /* not a value of this arena: leave it */
        return;
    memmove(s->arena + off, s->arena + off + len, (size_t)(s->arena_used - off - len));
    for (uint16_t i = 0; i < s->n_attrs && i < CBT_SPAN_ATTR_MAX; i++) {
        cbt_attr *b = &s->attrs[i];
        if (b != a && b->type == CBT_META_STR && b->str_off > off)
            b->str_off = (uint16_t)(b->str_off - len);
    }
    s->arena_used = (uint16_t)(s->arena_used - len);
    a->str_len = 0;
    a->str_off = s->arena_used;
}

/* The entry a scalar of (owner, key) goes into, its old string released. */
static cbt_attr *scalar_slot(cbt_span *s, uint8_t owner, cbt_name key)
{
    cbt_attr *a = find_attr(s, owner, key);
    if (!a)
        return new_attr(s, owner, key);
    release_str(s, a);
    return a;
}

static cbt_status set_i64(cbt_span *s, uint8_t owner, cbt_name key, int64_t v)
{
    cbt_attr *a = scalar_slot(s, owner, key);
    if (!a)
        return CBT_ERR_FULL;
    a->type = CBT_META_I64;
    a->v.i64 = v;
    return CBT_OK;
}

static cbt_status set_f64(cbt_span *s, uint8_t owner, cbt_name key, double v)
{
    cbt_attr *a = scalar_slot(s, owner, key);
    if (!a)
        return CBT_ERR_FULL;
    a->type = CBT_META_F64;
    a->v.f64 = v;
    return CBT_OK;
}

static cbt_status set_bool(cbt_span *s, uint8_t owner, cbt_name key, bool v)
{
    cbt_attr *a = scalar_slot(s, owner, key);
    if (!a)
        return CBT_ERR_FULL;
    a->type = CBT_META_BOOL;
    a->v.i64 = 0;
    a->v.b = v;
    return CBT_OK;
}

static cbt_status set_str(cbt_span *s, uint8_t owner, cbt_name key, const char *v, size_t len)
{
    if (!v && len)
        return CBT_ERR_INVAL;
    char copy[CBT_SPAN_STR_ARENA];
    if (v && v >= s->arena && v < s->arena + CBT_SPAN_STR_ARENA) {
        /* a value of this span: releasing the old one may move it */
        if (len > (size_t)(s->arena + CBT_SPAN_STR_ARENA - v))
            return CBT_ERR_INVAL;
        memcpy(copy, v, len);
        v = copy;
    }
    cbt_attr *a = find_attr(s, owner, key);
    size_t old = (a && a->type == CBT_META_STR) ? a->str_len : 0;
    size_t room = CBT_SPAN_STR_ARENA - s->arena_used + old;
    if (len > room && room < CBT_SPAN_TRUNC_MARK_LEN) {
        count_dropped(s, owner); /* not even the mark fits: the old value stays */
        return CBT_ERR_FULL;
    }
    if (!a) {
        if (!(a = new_attr(s, owner, key)))
            return CBT_ERR_FULL;
    } else {
        release_str(s, a);
    }
    room = CBT_SPAN_STR_ARENA - s->arena_used;
    size_t keep = len, stored = len;
    if (len > room) {
        /* cut at a character boundary: back over at most three UTF-8
         * continuation bytes, so a valid string stays valid */
        keep = room - CBT_SPAN_TRUNC_MARK_LEN;
        const unsigned char *u = (const unsigned char *)v;
        for (int i = 0; i < 3 && keep > 0 && (u[keep] & 0xC0) == 0x80; i++)
            keep--;
        stored = keep + CBT_SPAN_TRUNC_MARK_LEN;
        count16(&s->attrs_truncated);
        s->flags |= CBT_SPANF_ATTRS_TRUNCATED;
    }
    char *w = s->arena + s->arena_used;
    if (keep)
        memcpy(w, v, keep);
    if (stored > keep)
        memcpy(w + keep, CBT_SPAN_TRUNC_MARK, CBT_SPAN_TRUNC_MARK_LEN);
    a->type = CBT_META_STR;
    a->str_off = s->arena_used;
    a->str_len = (uint16_t)stored;
    s->arena_used = (uint16_t)(s->arena_used + stored);
    return CBT_OK;
}

cbt_status cbt_span_set_i64(cbt_span *s, cbt_name key, int64_t v)
{
    return (s && key) ? set_i64(s, 0, key, v) : CBT_ERR_INVAL;
}

cbt_status cbt_span_set_f64(cbt_span *s, cbt_name key, double v)
{
    return (s && key) ? set_f64(s, 0, key, v) : CBT_ERR_INVAL;
}

cbt_status cbt_span_set_bool(cbt_span *s, cbt_name key, bool v)
{
    return (s && key) ? set_bool(s, 0, key, v) : CBT_ERR_INVAL;
}

cbt_status cbt_span_set_str(cbt_span *s, cbt_name key, const char *v, size_t len)
{
    return (s && key) ? set_str(s, 0, key, v, len) : CBT_ERR_INVAL;
}

/* ---- span events ------------------------------------------------------------- */

cbt_status cbt_span_add_event(cbt_span *s, cbt_name name, uint64_t time_ns, uint32_t *index_out)
{
    if (!s || !name)
        return CBT_ERR_INVAL;
    if (s->n_events >= CBT_SPAN_EVENTS_MAX) {
        count16(&s->events_dropped);
        s->flags |= CBT_SPANF_EVENTS_DROPPED;
        if (index_out)
            *index_out = UINT32_MAX;
        return CBT_ERR_FULL;
    }
    cbt_span_event *e = &s->events[s->n_events];
    memset(e, 0, sizeof *e);
    e->time_ns = time_ns;
    e->name = name;
    if (index_out)
        *index_out = s->n_events;
    s->n_events++;
    return CBT_OK;
}

/* The owner tag of event `ev`, or 0 when the span holds no such event. */
static uint8_t event_owner(const cbt_span *s, uint32_t ev)
{
    return (s && ev < s->n_events && ev < CBT_SPAN_EVENTS_MAX) ? (uint8_t)(ev + 1) : 0;
}

cbt_status cbt_span_event_set_i64(cbt_span *s, uint32_t ev, cbt_name key, int64_t v)
{
    uint8_t o = event_owner(s, ev);
    return (o && key) ? set_i64(s, o, key, v) : CBT_ERR_INVAL;
}

cbt_status cbt_span_event_set_f64(cbt_span *s, uint32_t ev, cbt_name key, double v)
{
    uint8_t o = event_owner(s, ev);
    return (o && key) ? set_f64(s, o, key, v) : CBT_ERR_INVAL;
}

cbt_status cbt_span_event_set_bool(cbt_span *s, uint32_t ev, cbt_name key, bool v)
{
    uint8_t o = event_owner(s, ev);
    return (o && key) ? set_bool(s, o, key, v) : CBT_ERR_INVAL;
}

cbt_status cbt_span_event_set_str(cbt_span *s, uint32_t ev, cbt_name key, const char *v,
                                  size_t len)
{
    uint8_t o = event_owner(s, ev);
    return (o && key) ? set_str(s, o, key, v, len) : CBT_ERR_INVAL;
}

cbt_status cbt_span_set_array(cbt_span *s, cbt_name key, const cbt_array *a)
{
    if (!s || !key || !a || !a->handle)
        return CBT_ERR_INVAL;
    /* the new reference first: the view may be of this very attribute, whose
     * old reference scalar_slot lets go (the last one, perhaps) */
    cbt_arrays_ref_(a->handle);
    cbt_attr *at = scalar_slot(s, 0, key);
    if (!at) {
        cbt_arrays_unref_(a->handle);
        return CBT_ERR_FULL;
    }
    at->type = CBT_META_ARRAY;
    at->str_off = 0;
    at->str_len = a->type;
    at->v.arr.handle = a->handle;
    at->v.arr.count = a->count;
    s->flags |= CBT_SPANF_ARRAYS;
    return CBT_OK;
}

void cbt_span_set_meta_(cbt_span *s, cbt_name key, const cbt_event *ev, const cbt_meta *m)
{
    switch (m->type) {
    case CBT_META_I64: cbt_span_set_i64(s, key, m->v.i64); break;
    case CBT_META_F64: cbt_span_set_f64(s, key, m->v.f64); break;
    case CBT_META_BOOL: cbt_span_set_bool(s, key, m->v.b); break;
    case CBT_META_STR: {
        size_t len = 0;
        const char *v = cbt_event_meta_str(ev, m, &len);
        if (v)
            cbt_span_set_str(s, key, v, len);
        break;
    }
    case CBT_META_ARRAY: {
        cbt_array a;
        if (cbt_meta_array(m, &a))
            cbt_span_set_array(s, key, &a);
        else
            count_dropped(s, 0); /* dropped at the publish: the store was full */
        break;
    }
    default: break;
    }
}

void cbt_span_set_from_event(cbt_span *s, const cbt_event *ev)
{
    if (!s || !ev)
        return;
    for (uint8_t i = 0; i < ev->n_meta && i < CBT_EVENT_META_MAX; i++)
        cbt_span_set_meta_(s, ev->meta[i].key, ev, &ev->meta[i]);
}

uint64_t cbt_span_set_queue_at_(cbt_span *s, uint64_t enqueue_ns, uint64_t reached_ns,
                                uint32_t stream, int32_t device)
{
    uint64_t q = reached_ns > enqueue_ns ? reached_ns - enqueue_ns : 0;
    if (!s)
        return q;
    cbt_span_set_i64(s, CBT_N_QUEUE_NS, (int64_t)q);
    cbt_span_set_i64(s, CBT_N_ENQUEUE_NS, (int64_t)enqueue_ns);
    if (stream) { /* 0: no stream named (a caller's own enqueue time) */
        char dev[24];
        int n = device < 0 ? snprintf(dev, sizeof dev, "cpu")
                           : snprintf(dev, sizeof dev, "cuda:%d", (int)device);
        cbt_span_set_i64(s, CBT_N_CBT_STREAM, (int64_t)stream);
        cbt_span_set_str(s, CBT_N_CBT_DEVICE, dev, n > 0 ? (size_t)n : 0);
    }
    return q;
}

bool cbt_span_set_queue(cbt_span *s, const cbt_event *ev)
{
    if (!s || !ev || !(ev->flags & CBT_EVF_ENQUEUED))
        return false;
    cbt_span_set_queue_at_(s, ev->enqueue_ns, ev->ts, ev->stream, ev->device);
    return true;
}

const cbt_attr *cbt_span_attr(const cbt_span *s, cbt_name key)
{
    return s ? lookup(s, 0, key) : NULL;
}

const cbt_attr *cbt_span_event_attr(const cbt_span *s, uint32_t ev, cbt_name key)
{
    uint8_t o = event_owner(s, ev);
    return o ? lookup(s, o, key) : NULL;
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
        cbt_sinks_span_(&t->sinks, s);
    } else {
        /* its trace was sampled out (a not-sampled context it joined, or a
         * parent that did): recorded nowhere, as OpenTelemetry's
         * non-recording spans */
        cbt_count1_(&t->spans_unsampled);
    }
    cbt_count1_(&t->spans_ended);
    if (s->flags & CBT_SPANF_ARRAYS) /* the sinks took their own references */
        cbt_arrays_release_span_(s);
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
