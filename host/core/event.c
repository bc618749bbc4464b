/* host/core/event.c — owns building events (cbt/event.h) and the event-type table.
 *
 * Built-in types come from CBT_BUILTIN_EVENTS; programs may register more at
 * start-up. The table is process-wide, append-only and bounded like the name
 * table: readers load `count` with acquire order, writers publish with
 * release order after filling the entry.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "cbt/event.h"
#include "internal/tracer.h"

static const char *const g_builtin_names[CBT_EV_BUILTIN_COUNT_] = {
    NULL,
#define CBT_EV_STR_(n) #n,
    CBT_BUILTIN_EVENTS(CBT_EV_STR_)
#undef CBT_EV_STR_
};

static struct {
    pthread_mutex_t lock;
    _Atomic uint32_t count; /* valid ids are [1, count) */
    cbt_name names[CBT_EVENT_TYPES_MAX];
} g_types = {.lock = PTHREAD_MUTEX_INITIALIZER, .count = CBT_EV_BUILTIN_COUNT_};

cbt_status cbt_event_init(cbt_event *ev, cbt_event_type type, const char *session)
{
    if (!ev)
        return CBT_ERR_INVAL;
    ev->type = type;
    ev->n_meta = 0;
    ev->flags = 0;
    ev->ts = 0;
    ev->pair = 0;
    size_t l = session ? strnlen(session, CBT_SESSION_MAX) : 0;
    if (l >= CBT_SESSION_MAX) {
        ev->type = CBT_EV_INVALID;
        ev->session_len = 0;
        ev->session[0] = '\0';
        cbt_count_session_too_long_();
        return CBT_ERR_SESSION_TOO_LONG;
    }
    memcpy(ev->session, session ? session : "", l);
    ev->session[l] = '\0';
    ev->session_len = (uint8_t)l;
    return CBT_OK;
}

static cbt_meta *meta_slot(cbt_event *ev, cbt_name key, cbt_status *st)
{
    if (!ev || key == 0) {
        *st = CBT_ERR_INVAL;
        return NULL;
    }
    for (uint8_t i = 0; i < ev->n_meta; i++)
        if (ev->meta[i].key == key)
            return &ev->meta[i];
    if (ev->n_meta >= CBT_EVENT_META_MAX) {
        *st = CBT_ERR_META_FULL;
        return NULL;
    }
    cbt_meta *m = &ev->meta[ev->n_meta++];
    m->key = key;
    m->len = 0;
    m->reserved_ = 0;
    return m;
}

cbt_status cbt_event_i64(cbt_event *ev, cbt_name key, int64_t v)
{
    cbt_status st = CBT_OK;
    cbt_meta *m = meta_slot(ev, key, &st);
    if (!m)
        return st;
    m->type = CBT_META_I64;
    m->v.i64 = v;
    return CBT_OK;
}

cbt_status cbt_event_f64(cbt_event *ev, cbt_name key, double v)
{
    cbt_status st = CBT_OK;
    cbt_meta *m = meta_slot(ev, key, &st);
    if (!m)
        return st;
    m->type = CBT_META_F64;
    m->v.f64 = v;
    return CBT_OK;
}

cbt_status cbt_event_bool(cbt_event *ev, cbt_name key, bool v)
{
    cbt_status st = CBT_OK;
    cbt_meta *m = meta_slot(ev, key, &st);
    if (!m)
        return st;
    m->type = CBT_META_BOOL;
    m->v.i64 = 0;
    m->v.b = v;
    return CBT_OK;
}

cbt_status cbt_event_str(cbt_event *ev, cbt_name key, const char *v)
{
    if (!v)
        return CBT_ERR_INVAL;
    size_t l = strnlen(v, CBT_META_STR_MAX);
    if (l >= CBT_META_STR_MAX)
        return CBT_ERR_META_TOO_LONG;
    cbt_status st = CBT_OK;
    cbt_meta *m = meta_slot(ev, key, &st);
    if (!m)
        return st;
    m->type = CBT_META_STR;
    m->len = (uint8_t)l;
    memcpy(m->v.str, v, l);
    m->v.str[l] = '\0';
    return CBT_OK;
}

const cbt_meta *cbt_event_find(const cbt_event *ev, cbt_name key)
{
    if (!ev)
        return NULL;
    for (uint8_t i = 0; i < ev->n_meta && i < CBT_EVENT_META_MAX; i++)
        if (ev->meta[i].key == key)
            return &ev->meta[i];
    return NULL;
}

int64_t cbt_event_get_i64(const cbt_event *ev, cbt_name key, int64_t dflt)
{
    const cbt_meta *m = cbt_event_find(ev, key);
    if (!m)
        return dflt;
    if (m->type == CBT_META_I64)
        return m->v.i64;
    if (m->type == CBT_META_BOOL)
        return m->v.b ? 1 : 0;
    return dflt;
}

bool cbt_event_type_valid(cbt_event_type type)
{
    /* acquire: pairs with the release store in cbt_event_type_register */
    return type != CBT_EV_INVALID &&
           type < atomic_load_explicit(&g_types.count, memory_order_acquire);
}

const char *cbt_event_type_name(cbt_event_type type)
{
    if (!cbt_event_type_valid(type))
        return NULL;
    if (type < CBT_EV_BUILTIN_COUNT_)
        return g_builtin_names[type];
    return cbt_name_str(g_types.names[type]);
}

cbt_status cbt_event_type_register(const char *name, cbt_event_type *out)
{
    if (!name || !*name || !out)
        return CBT_ERR_INVAL;
    for (uint32_t i = 1; i < CBT_EV_BUILTIN_COUNT_; i++) {
        if (strcmp(g_builtin_names[i], name) == 0) {
            *out = (cbt_event_type)i;
            return CBT_OK;
        }
    }
    cbt_name n;
    cbt_status st = cbt_intern(name, &n);
    if (st)
        return st;
    pthread_mutex_lock(&g_types.lock);
    uint32_t count = atomic_load_explicit(&g_types.count, memory_order_relaxed);
    for (uint32_t i = CBT_EV_BUILTIN_COUNT_; i < count; i++) {
        if (g_types.names[i] == n) {
            pthread_mutex_unlock(&g_types.lock);
            *out = (cbt_event_type)i;
            return CBT_OK;
        }
    }
    if (count >= CBT_EVENT_TYPES_MAX) {
        pthread_mutex_unlock(&g_types.lock);
        return CBT_ERR_FULL;
    }
    g_types.names[count] = n;
    /* release: pairs with the acquire load in cbt_event_type_valid */
    atomic_store_explicit(&g_types.count, count + 1, memory_order_release);
    pthread_mutex_unlock(&g_types.lock);
    *out = (cbt_event_type)count;
    return CBT_OK;
}

cbt_status cbt_event_trace_set(cbt_event *ev, const cbt_span_ctx *parent, const uint8_t span_id[8])
{
    if (!ev)
        return CBT_ERR_INVAL;
    memset(&ev->trace, 0, sizeof ev->trace);
    if (parent)
        ev->trace.parent = *parent;
    if (span_id)
        memcpy(ev->trace.span_id, span_id, 8);
    ev->flags |= CBT_EVF_TRACE;
    return CBT_OK;
}

cbt_meta cbt_meta_i64(cbt_name key, int64_t v)
{
    cbt_meta m = {.key = key, .type = CBT_META_I64};
    m.v.i64 = v;
    return m;
}

cbt_meta cbt_meta_f64(cbt_name key, double v)
{
    cbt_meta m = {.key = key, .type = CBT_META_F64};
    m.v.f64 = v;
    return m;
}

cbt_meta cbt_meta_bool(cbt_name key, bool v)
{
    cbt_meta m = {.key = key, .type = CBT_META_BOOL};
    m.v.b = v;
    return m;
}

cbt_meta cbt_meta_str(cbt_name key, const char *v)
{
    cbt_meta m = {.key = key, .type = CBT_META_NONE};
    size_t l = v ? strnlen(v, CBT_META_STR_MAX) : CBT_META_STR_MAX;
    if (l < CBT_META_STR_MAX) {
        m.type = CBT_META_STR;
        m.len = (uint8_t)l;
        memcpy(m.v.str, v, l);
    }
    return m;
}
