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
#include "internal/last_error.h"
#include "internal/utf8.h"
#include "internal/tracer.h"

/* The old cbt names (the enum suffixes, also LMCache's EventType member
 * names): aliases, accepted by cbt_event_type_by_name and _register. */
static const char *const g_builtin_aliases[CBT_EV_BUILTIN_COUNT_] = {
    NULL,
#define CBT_EV_STR_(n) #n,
    CBT_BUILTIN_EVENTS(CBT_EV_STR_)
#undef CBT_EV_STR_
};

/* The names: LMCache 0.5.6's event values (docs/lmcache-0.5.6.md §1, §7);
 * "cbt." for the types only cbt has. tests/test_events.c checks that every
 * built-in has one and that every 0.5.6 value maps here. */
#define V_(n, v) [CBT_EV_##n] = v,
static const char *const g_builtin_names[CBT_EV_BUILTIN_COUNT_] = {
    /* MP server */
    V_(MP_REQUEST_START, "mp.request.start")
    V_(MP_REQUEST_END, "mp.request.end")
    V_(MP_LOOKUP_PREFETCH_START, "mp.lookup_prefetch.start")
    V_(MP_LOOKUP_PREFETCH_END, "mp.lookup_prefetch.end")
    V_(MP_LOOKUP, "mp.lookup")
    V_(MP_STORE_SUBMITTED, "mp.store.submitted")
    V_(MP_STORE_START, "mp.store.start")
    V_(MP_STORE_END, "mp.store.end")
    V_(MP_RETRIEVE_SUBMITTED, "mp.retrieve.submitted")
    V_(MP_RETRIEVE_START, "mp.retrieve.start")
    V_(MP_RETRIEVE_END, "mp.retrieve.end")
    V_(MP_VLLM_END_SESSION, "mp.vllm.end_session")
    V_(MP_VLLM_BLOCK_ALLOCATION, "mp.vllm.block_allocation")
    V_(MP_TOKENS, "mp.tokens")
    V_(MP_TRANSFER_PHASE_SAMPLES, "mp.transfer.phase_samples")
    /* CacheBlend server */
    V_(CB_REQUEST_START, "cb.request.start")
    V_(CB_REQUEST_END, "cb.request.end")
    V_(CB_LOOKUP_START, "cb.lookup.start")
    V_(CB_LOOKUP_END, "cb.lookup.end")
    V_(CB_PREFIX_LOOKUP_START, "cb.prefix_lookup.start")
    V_(CB_PREFIX_LOOKUP_END, "cb.prefix_lookup.end")
    V_(CB_FINGERPRINT_MATCH_START, "cb.fingerprint_match.start")
    V_(CB_FINGERPRINT_MATCH_END, "cb.fingerprint_match.end")
    V_(CB_COORDINATOR_MATCH_START, "cb.coordinator_match.start")
    V_(CB_COORDINATOR_MATCH_END, "cb.coordinator_match.end")
    V_(CB_SPARSE_PREFETCH_START, "cb.sparse_prefetch.start")
    V_(CB_SPARSE_PREFETCH_END, "cb.sparse_prefetch.end")
    V_(CB_RETRIEVE_SUBMITTED, "cb.retrieve.submitted")
    V_(CB_RETRIEVE_START, "cb.retrieve.start")
    V_(CB_RETRIEVE_END, "cb.retrieve.end")
    V_(CB_SCATTER_START, "cb.scatter.start")
    V_(CB_SCATTER_END, "cb.scatter.end")
    V_(CB_RETRIEVE_NOOP, "cb.retrieve.noop")
    V_(CB_FINGERPRINTS_REGISTERED, "cb.fingerprints.registered")
    V_(CB_CHUNKS_EVICTED, "cb.chunks.evicted")
    /* L1 */
    V_(L1_READ_RESERVED, "l1.read.reserved")
    V_(L1_READ_FINISHED, "l1.read.finished")
    V_(L1_WRITE_RESERVED, "l1.write.reserved")
    V_(L1_WRITE_FINISHED, "l1.write.finished")
    V_(L1_WRITE_FINISHED_AND_READ_RESERVED, "l1.write_finished_and_read_reserved")
    V_(L1_KEYS_EVICTED, "l1.keys.evicted")
    V_(L1_KEYS_ACCESSED, "l1.keys.accessed")
    V_(L1_EVICTION_LOOP_TICK, "l1.eviction.loop_tick")
    V_(L1_ALLOCATION_FAILED, "l1.allocation.failed")
    V_(L1_READ_FAILED, "l1.read.failed")
    /* StorageManager */
    V_(SM_READ_PREFETCHED_FINISHED, "sm.read.prefetched_finished")
    V_(SM_WRITE_RESERVED, "sm.write.reserved")
    V_(SM_WRITE_FINISHED, "sm.write.finished")
    V_(SM_CAPACITY_CHANGED, "sm.capacity.changed")
    /* L2 */
    V_(L2_STORE_SUBMITTED, "l2.store.submitted")
    V_(L2_STORE_COMPLETED, "l2.store.completed")
    V_(L2_PREFETCH_LOOKUP_SUBMITTED, "l2.prefetch.lookup.submitted")
    V_(L2_PREFETCH_LOAD_SUBMITTED, "l2.prefetch.load.submitted")
    V_(L2_PREFETCH_LOAD_COMPLETED, "l2.prefetch.load.completed")
    V_(L2_LOAD_TASK_SUBMITTED, "l2.load_task.submitted")
    V_(L2_LOAD_TASK_COMPLETED, "l2.load_task.completed")
    V_(L2_KEYS_EVICTED, "l2.keys.evicted")
    V_(L2_KEYS_STORED, "l2.keys.stored")
    V_(L2_KEYS_ACCESSED, "l2.keys.accessed")
    V_(L2_KEYS_DELETED, "l2.keys.deleted")
    V_(L2_PREFETCH_FAILED, "l2.prefetch.failed")
    /* timeout, trace recording */
    V_(TIMEOUT_RAISED, "timeout.raised")
    V_(TRACE_CALL, "trace.call")
    /* cbt's own */
    V_(CB_CLASSIFY_START, "cbt.cb.classify.start")
    V_(CB_CLASSIFY_END, "cbt.cb.classify.end")
    V_(KERNEL_LAUNCH, "cbt.kernel.launch")
    V_(SPAN_BEGIN, "cbt.span.begin")
    V_(SPAN_END, "cbt.span.end")
};
#undef V_

/* The built-in named `name` (its value or its alias), or CBT_EV_INVALID. */
static cbt_event_type builtin_by_name(const char *name)
{
    for (uint32_t i = 1; i < CBT_EV_BUILTIN_COUNT_; i++)
        if ((g_builtin_names[i] && strcmp(g_builtin_names[i], name) == 0) ||
            strcmp(g_builtin_aliases[i], name) == 0)
            return (cbt_event_type)i;
    return CBT_EV_INVALID;
}

static struct {
    pthread_mutex_t lock;
    _Atomic uint32_t count; /* valid ids are [1, count) */
    cbt_name names[CBT_EVENT_TYPES_MAX];
} g_types = {.lock = PTHREAD_MUTEX_INITIALIZER, .count = CBT_EV_BUILTIN_COUNT_};

cbt_status cbt_event_init(cbt_event *ev, cbt_event_type type, const char *session)
{
    if (!ev)
        return CBT_ERR_INVAL;
    /* the header and the session only: values and the string area are read
     * no further than n_meta and str_used say (the event is 2.6 KiB) */
    ev->type = type;
    ev->n_meta = 0;
    ev->flags = 0;
    ev->ts = 0;
    ev->pair = 0;
    ev->str_used = 0;
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

/* The value already stored under `key`, or NULL; *st CBT_ERR_INVAL for a
 * NULL event or key 0. */
static cbt_meta *meta_existing(cbt_event *ev, cbt_name key, cbt_status *st)
{
    if (!ev || key == 0) {
        *st = CBT_ERR_INVAL;
        return NULL;
    }
    uint32_t n = ev->n_meta < CBT_EVENT_META_MAX ? ev->n_meta : CBT_EVENT_META_MAX;
    for (uint32_t i = 0; i < n; i++)
        if (ev->meta[i].key == key)
            return &ev->meta[i];
    return NULL;
}

/* The value to write for `key`: its existing one, or a new one appended
 * (CBT_ERR_META_FULL when there is no room). A replaced string in the area
 * gives its bytes back when it is the area's last. */
static cbt_meta *meta_slot(cbt_event *ev, cbt_name key, cbt_status *st)
{
    cbt_status e = CBT_OK;
    cbt_meta *m = meta_existing(ev, key, &e);
    if (e) {
        *st = e;
        return NULL;
    }
    if (m) {
        if (m->type == CBT_META_STR && m->area_len &&
            (uint32_t)m->area_off + m->area_len + 1u == ev->str_used)
            ev->str_used = m->area_off;
        m->area_len = 0;
        m->area_off = 0;
        m->len = 0;
        return m;
    }
    if (ev->n_meta >= CBT_EVENT_META_MAX) {
        *st = CBT_ERR_META_FULL;
        return NULL;
    }
    m = &ev->meta[ev->n_meta++];
    m->key = key;
    m->len = 0;
    m->area_off = 0;
    m->area_len = 0;
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

/* An array value: the elements are borrowed until the publish copies them
 * into the store (cbt/array.h, host/core/arrays.c). */
static cbt_status set_array(cbt_event *ev, cbt_name key, cbt_array_type type, const void *v,
                            size_t n)
{
    if ((!v && n) || n > CBT_ARRAY_COUNT_MAX)
        return CBT_ERR_INVAL;
    cbt_status st = CBT_OK;
    cbt_meta *m = meta_slot(ev, key, &st);
    if (!m)
        return st;
    static const uint64_t empty = 0; /* a non-NULL source for an empty array */
    m->type = CBT_META_ARRAY;
    m->len = (uint8_t)type;
    m->v.arr.src = v ? v : (const void *)&empty;
    m->v.arr.count = (uint32_t)n;
    m->v.arr.handle = 0;
    ev->flags |= CBT_EVF_ARRAYS;
    return CBT_OK;
}

cbt_status cbt_event_array_i64(cbt_event *ev, cbt_name key, const int64_t *v, size_t n)
{
    return set_array(ev, key, CBT_ARRAY_I64, v, n);
}

cbt_status cbt_event_array_f64(cbt_event *ev, cbt_name key, const double *v, size_t n)
{
    return set_array(ev, key, CBT_ARRAY_F64, v, n);
}

cbt_status cbt_event_array_bool(cbt_event *ev, cbt_name key, const bool *v, size_t n)
{
    return set_array(ev, key, CBT_ARRAY_BOOL, v, n);
}

cbt_status cbt_event_array_str(cbt_event *ev, cbt_name key, const char *const *v, size_t n)
{
    return set_array(ev, key, CBT_ARRAY_STR, v, n);
}

#define TRUNC_MARK_LEN (sizeof CBT_META_TRUNC_MARK - 1)

cbt_status cbt_event_str(cbt_event *ev, cbt_name key, const char *v)
{
    if (!v)
        return CBT_ERR_INVAL;
    cbt_status st = CBT_OK;
    /* one byte past the cap: enough to know a string is too long */
    size_t l = strnlen(v, CBT_META_STR_MAX);
    if (l < CBT_META_INLINE_MAX) {
        cbt_meta *m = meta_slot(ev, key, &st);
        if (!m)
            return st;
        m->type = CBT_META_STR;
        m->len = (uint8_t)l;
        memcpy(m->v.str, v, l);
        m->v.str[l] = '\0';
        return CBT_OK;
    }
    /* the area: check that it fits (whole or cut) before touching the event,
     * which a refusal must leave unchanged */
    cbt_meta *old = meta_existing(ev, key, &st);
    if (st)
        return st;
    if (!old && ev->n_meta >= CBT_EVENT_META_MAX)
        return CBT_ERR_META_FULL;
    uint32_t used = ev->str_used < CBT_EVENT_STR_AREA ? ev->str_used : CBT_EVENT_STR_AREA;
    if (old && old->type == CBT_META_STR && old->area_len &&
        (uint32_t)old->area_off + old->area_len + 1u == used)
        used = old->area_off; /* meta_slot gives these bytes back */
    size_t room = CBT_EVENT_STR_AREA - used; /* bytes, the NUL included */
    if (room > CBT_META_STR_MAX)
        room = CBT_META_STR_MAX;
    size_t keep = l, mark = 0;
    if (l + 1 > room) {
        if (room < TRUNC_MARK_LEN + 1)
            return CBT_ERR_META_TOO_LONG;
        keep = cbt_utf8_prefix_(v, room - 1 - TRUNC_MARK_LEN);
        mark = TRUNC_MARK_LEN;
    }
    cbt_meta *m = meta_slot(ev, key, &st); /* cannot fail now */
    if (!m)
        return st;
    char *dst = ev->str + used;
    memcpy(dst, v, keep);
    if (mark)
        memcpy(dst + keep, CBT_META_TRUNC_MARK, mark);
    dst[keep + mark] = '\0';
    m->type = CBT_META_STR;
    m->len = 0;
    m->v.str[0] = '\0'; /* a reader of the union sees an empty string */
    m->area_off = (uint16_t)used;
    m->area_len = (uint16_t)(keep + mark);
    ev->str_used = (uint16_t)(used + keep + mark + 1);
    if (mark)
        cbt_count_meta_truncated_();
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

const char *cbt_event_meta_str(const cbt_event *ev, const cbt_meta *m, size_t *len)
{
    if (len)
        *len = 0;
    if (!m || m->type != CBT_META_STR)
        return NULL;
    if (m->area_len == 0) { /* inline */
        if (m->len >= CBT_META_INLINE_MAX)
            return NULL;
        if (len)
            *len = m->len;
        return m->v.str;
    }
    /* in the area: it and its NUL must lie inside the used part */
    if (!ev || (uint32_t)m->area_off + m->area_len >= ev->str_used ||
        ev->str_used > CBT_EVENT_STR_AREA || ev->str[m->area_off + m->area_len] != '\0')
        return NULL;
    if (len)
        *len = m->area_len;
    return ev->str + m->area_off;
}

const char *cbt_event_get_str(const cbt_event *ev, cbt_name key, size_t *len)
{
    return cbt_event_meta_str(ev, ev ? cbt_event_find(ev, key) : NULL, len);
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

cbt_status cbt_event_type_by_name(const char *name, cbt_event_type *out)
{
    if (!out)
        return CBT_ERR_INVAL;
    *out = CBT_EV_INVALID;
    if (!name)
        return CBT_ERR_INVAL;
    cbt_event_type bi = builtin_by_name(name);
    if (bi != CBT_EV_INVALID) {
        *out = bi;
        return CBT_OK;
    }
    /* acquire: entries below count are filled (release in _register) */
    uint32_t count = atomic_load_explicit(&g_types.count, memory_order_acquire);
    for (uint32_t i = CBT_EV_BUILTIN_COUNT_; i < count; i++) {
        const char *s = cbt_name_str(g_types.names[i]);
        if (s && strcmp(s, name) == 0) {
            *out = (cbt_event_type)i;
            return CBT_OK;
        }
    }
    return CBT_ERR_UNKNOWN_EVENT;
}

cbt_status cbt_event_type_register(const char *name, cbt_event_type *out)
{
    if (!name || !*name || !out)
        return CBT_ERR_INVAL;
    cbt_event_type bi = builtin_by_name(name);
    if (bi != CBT_EV_INVALID) {
        *out = bi;
        return CBT_OK;
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
        cbt_last_error_set_(NULL, "the event-type table is full: %d types, built-in and "
                            "registered, the most there can be (CBT_EVENT_TYPES_MAX)",
                            CBT_EVENT_TYPES_MAX);
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
    size_t l = v ? strnlen(v, CBT_META_INLINE_MAX) : CBT_META_INLINE_MAX;
    if (l < CBT_META_INLINE_MAX) {
        m.type = CBT_META_STR;
        m.len = (uint8_t)l;
        memcpy(m.v.str, v, l);
    }
    return m;
}
