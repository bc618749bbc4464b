/* exporter/nvtx.c — owns cbt's NVTX ranges for Nsight Systems (cbt/nvtx.h).
 *
 * A publish hook (host/internal/publish_hook.h) sees every event on
 * the publishing thread, at the moment of cbt_publish / cbt_publish_on_stream,
 * before it is enqueued. A START event opens a range in domain "cbt"
 * (nvtxDomainRangeStartEx), the matching END closes it (nvtxDomainRangeEnd,
 * possibly on another thread), SUBMITTED and other point events become marks
 * (nvtxDomainMarkEx). Categories: 1 "mp" (MP_*), 2 "cb" (CB_*, L2_*),
 * 3 "kernel" (KERNEL_LAUNCH); program-registered types are marks without a
 * category. A pspan (cbt/pspan.h: SPAN_BEGIN/SPAN_END) is a range in "cb"
 * named by its span name, paired by its span id. Spans, their attributes
 * and their span events are built later, on the harvester, and have no NVTX
 * form: an event a builder turns into a span event (TIMEOUT_RAISED) is a
 * mark at publish time like any other point event.
 *
 * Timing. Nsight stamps a range when the NVTX call is made, i.e. at publish
 * time. For cbt_publish that is the time cbt's span uses too. For
 * cbt_publish_on_stream it is when the HOST enqueued the work, while cbt's
 * OTel span times for stream events are when the GPU (or CPU stream) reached
 * the mark: the NVTX range of a stream op shows the enqueue interval, the
 * span the execution interval. Nsight's own CUDA rows show the execution.
 *
 * Correlation. A range's message is "<span name> <session id>" (ASCII; a
 * session-less range uses the span name as a registered string) and its
 * 64-bit payload is the cbt range id: a process-wide counter (1, 2, ...),
 * because the payload must be set before nvtxDomainRangeStartEx returns the
 * tool's nvtxRangeId_t. The START event carries the same number as metadata
 * "nvtx.range_id", which span builders copy onto the span (the MP subscriber
 * does for mp.* children), so a span in Jaeger finds its range in Nsight by
 * payload. The tool's nvtxRangeId_t is kept only to end the range.
 *
 * Pairing. An END closes the oldest open range of the same (session, span,
 * pair) — the key the MP subscriber pairs on, first in first out — held in a
 * bounded table (NVTX_OPEN_MAX) under one mutex (the hook runs on every
 * publishing thread; contention only costs when NVTX is enabled). An END
 * with no open START does nothing; a START that finds the table full is
 * counted and emits no range. A range the tool refused (id 0: no tool
 * attached) is not tracked and adds no metadata. Stream publishes reach the
 * hook before the stream fills in `pair` (its ordinal), so two streams
 * running the same op for one session at once pair by order only.
 *
 * Process-wide state. The NVTX objects (the domain, registered strings,
 * category names) are made once per process on the first enable and kept:
 * NVTX domains live as long as the process. The hook state (pairing table,
 * counters) belongs to one tracer generation; the tracer does not know about
 * it, so this file owns it in one static (g_state): a second enable for the
 * same tracer is CBT_ERR_ALREADY, an enable for a new tracer (after
 * cbt_shutdown / cbt_init) frees the old state — no thread can still be
 * publishing into a tracer that was shut down — and makes a new one. The
 * last state is reachable from g_state until exit.
 */
#include "cbt/nvtx.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "internal/hash.h"
#include "internal/publish_hook.h"

/* NVTX's inline implementation is not held to the project's warnings. */
#define NVTX_AS_SYSTEM_HEADER 1
#include "nvtx3/nvToolsExt.h"

#define NVTX_OPEN_MAX 4096u   /* open ranges awaiting their END */
#define NVTX_BUCKETS 1024u    /* power of two */
#define NVTX_NIL UINT32_MAX

enum { CAT_NONE = 0, CAT_MP = 1, CAT_CB = 2, CAT_KERNEL = 3, CAT_COUNT_ };

static const char *const k_cat_name[CAT_COUNT_] = {NULL, "mp", "cb", "kernel"};
static const uint32_t k_cat_color[CAT_COUNT_] = {0xFF9E9E9Eu, 0xFF3C8CE6u, 0xFFE6A03Cu,
                                                 0xFF5CB85Cu};

/* The span names, one per range kind. */
enum {
    SP_REQUEST,
    SP_MP_LOOKUP_PREFETCH,
    SP_MP_STORE,
    SP_MP_RETRIEVE,
    SP_CB_REQUEST,
    SP_CB_LOOKUP,
    SP_CB_RETRIEVE,
    SP_CB_FINGERPRINT_MATCH,
    SP_CB_COORDINATOR_MATCH,
    SP_CB_SPARSE_PREFETCH,
    SP_CB_CLASSIFY,
    SP_CB_SCATTER,
    SP_PSPAN, /* cbt/pspan.h: the name travels in the event (no registered string) */
    SP_COUNT_
};

static const char *const k_span_name[SP_COUNT_] = {
    "request",         "mp.lookup_prefetch",   "mp.store",
    "mp.retrieve",     "cb.request",           "cb.lookup",
    "cb.retrieve",     "cb.fingerprint_match", "cb.coordinator_match",
    "cb.sparse_prefetch", "cb.classify",       "cb.scatter",        NULL,
};

enum { ROLE_MARK = 0, ROLE_START = 1, ROLE_END = 2 };

typedef struct ev_class {
    uint8_t role; /* ROLE_* */
    uint8_t span; /* SP_* for START/END */
    uint8_t cat;  /* CAT_* */
} ev_class;

static ev_class classify(cbt_event_type type)
{
#define R_(s, e, sp, c)                                    \
    case CBT_EV_##s: return (ev_class){ROLE_START, sp, c}; \
    case CBT_EV_##e: return (ev_class){ROLE_END, sp, c};
    switch (type) {
        R_(MP_REQUEST_START, MP_REQUEST_END, SP_REQUEST, CAT_MP)
        R_(MP_LOOKUP_PREFETCH_START, MP_LOOKUP_PREFETCH_END, SP_MP_LOOKUP_PREFETCH, CAT_MP)
        R_(MP_STORE_START, MP_STORE_END, SP_MP_STORE, CAT_MP)
        R_(MP_RETRIEVE_START, MP_RETRIEVE_END, SP_MP_RETRIEVE, CAT_MP)
        R_(CB_REQUEST_START, CB_REQUEST_END, SP_CB_REQUEST, CAT_CB)
        R_(CB_LOOKUP_START, CB_LOOKUP_END, SP_CB_LOOKUP, CAT_CB)
        R_(CB_RETRIEVE_START, CB_RETRIEVE_END, SP_CB_RETRIEVE, CAT_CB)
        R_(CB_FINGERPRINT_MATCH_START, CB_FINGERPRINT_MATCH_END, SP_CB_FINGERPRINT_MATCH, CAT_CB)
        R_(CB_COORDINATOR_MATCH_START, CB_COORDINATOR_MATCH_END, SP_CB_COORDINATOR_MATCH, CAT_CB)
        R_(CB_SPARSE_PREFETCH_START, CB_SPARSE_PREFETCH_END, SP_CB_SPARSE_PREFETCH, CAT_CB)
        R_(CB_CLASSIFY_START, CB_CLASSIFY_END, SP_CB_CLASSIFY, CAT_CB)
        R_(CB_SCATTER_START, CB_SCATTER_END, SP_CB_SCATTER, CAT_CB)
    case CBT_EV_KERNEL_LAUNCH: return (ev_class){ROLE_MARK, 0, CAT_KERNEL};
    case CBT_EV_SPAN_BEGIN: return (ev_class){ROLE_START, SP_PSPAN, CAT_CB};
    case CBT_EV_SPAN_END: return (ev_class){ROLE_END, SP_PSPAN, CAT_CB};
    default: break;
    }
#undef R_
    if (type >= CBT_EV_MP_REQUEST_START && type <= CBT_EV_MP_RETRIEVE_END)
        return (ev_class){ROLE_MARK, 0, CAT_MP};
    if (type >= CBT_EV_CB_REQUEST_START && type <= CBT_EV_L2_LOAD_TASK_COMPLETED)
        return (ev_class){ROLE_MARK, 0, CAT_CB};
    return (ev_class){ROLE_MARK, 0, CAT_NONE}; /* program-registered types */
}

/* ---- process-wide NVTX objects (made once, under g_enable_lock) ---- */

static pthread_mutex_t g_enable_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_nvtx_ready;
static nvtxDomainHandle_t g_domain;
static nvtxStringHandle_t g_span_str[SP_COUNT_];
/* event type names for session-less marks, registered on first use */
static _Atomic(nvtxStringHandle_t) g_type_str[CBT_EVENT_TYPES_MAX];
static pthread_mutex_t g_type_str_lock = PTHREAD_MUTEX_INITIALIZER;
static cbt_name g_key_range_id;
/* cbt range ids: the payload and the nvtx.range_id attribute; never 0 */
static _Atomic uint64_t g_next_range_id;

static cbt_status nvtx_globals_init(void)
{
    if (g_nvtx_ready)
        return CBT_OK;
    cbt_status st = cbt_intern("nvtx.range_id", &g_key_range_id);
    if (st)
        return st;
    g_domain = nvtxDomainCreateA("cbt");
    for (int i = 0; i < SP_COUNT_; i++)
        if (k_span_name[i])
            g_span_str[i] = nvtxDomainRegisterStringA(g_domain, k_span_name[i]);
    for (int c = 1; c < CAT_COUNT_; c++)
        nvtxDomainNameCategoryA(g_domain, (uint32_t)c, k_cat_name[c]);
    g_nvtx_ready = 1;
    return CBT_OK;
}

static nvtxStringHandle_t type_str(cbt_event_type type)
{
    if (type >= CBT_EVENT_TYPES_MAX)
        return NULL;
    nvtxStringHandle_t h = atomic_load_explicit(&g_type_str[type], memory_order_acquire);
    if (h)
        return h;
    const char *name = cbt_event_type_name(type);
    if (!name)
        return NULL;
    pthread_mutex_lock(&g_type_str_lock);
    h = atomic_load_explicit(&g_type_str[type], memory_order_relaxed);
    if (!h) {
        h = nvtxDomainRegisterStringA(g_domain, name);
        atomic_store_explicit(&g_type_str[type], h, memory_order_release);
    }
    pthread_mutex_unlock(&g_type_str_lock);
    return h;
}

/* ---- the hook state of one tracer generation ---- */

typedef struct open_range {
    uint64_t hash;
    uint64_t pair;
    nvtxRangeId_t id; /* the tool's */
    uint32_t next;    /* bucket chain (oldest first) or free list */
    uint8_t span;
    uint8_t session_len;
    char session[CBT_SESSION_MAX];
} open_range;

typedef struct nvtx_state {
    uint64_t gen; /* the tracer's generation */
    pthread_mutex_t lock;
    uint32_t head[NVTX_BUCKETS], tail[NVTX_BUCKETS];
    uint32_t free_head;
    open_range open[NVTX_OPEN_MAX];
    /* counters (read in a debugger; no API exposes them yet) */
    _Atomic uint64_t ranges_started, ranges_ended, marks, table_full, unmatched_end;
} nvtx_state;

static nvtx_state *g_state; /* under g_enable_lock */

static nvtx_state *state_new(uint64_t gen)
{
    nvtx_state *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->gen = gen;
    pthread_mutex_init(&s->lock, NULL);
    for (uint32_t b = 0; b < NVTX_BUCKETS; b++)
        s->head[b] = s->tail[b] = NVTX_NIL;
    for (uint32_t i = 0; i < NVTX_OPEN_MAX; i++)
        s->open[i].next = i + 1 < NVTX_OPEN_MAX ? i + 1 : NVTX_NIL;
    s->free_head = 0;
    return s;
}

static void state_free(nvtx_state *s)
{
    if (!s)
        return;
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static uint64_t key_hash(const cbt_event *ev, uint8_t span)
{
    uint64_t h = cbt_hash_bytes(ev->session, ev->session_len, 0x6e767478u /* "nvtx" */);
    h ^= ((uint64_t)span + 1) * 0x9e3779b97f4a7c15ull;
    h ^= ev->pair * 0xc2b2ae3d27d4eb4full;
    h ^= h >> 29;
    return h;
}

static int key_eq(const open_range *r, uint64_t h, const cbt_event *ev, uint8_t span)
{
    return r->hash == h && r->span == span && r->pair == ev->pair &&
           r->session_len == ev->session_len &&
           memcmp(r->session, ev->session, ev->session_len) == 0;
}

/* The message: "<name> <session>" as ASCII into buf, or the registered name
 * for a session-less event. */
static void set_message(nvtxEventAttributes_t *a, char *buf, size_t cap, const char *name,
                        nvtxStringHandle_t reg, const cbt_event *ev)
{
    if (ev->session_len == 0 && reg) {
        a->messageType = NVTX_MESSAGE_TYPE_REGISTERED;
        a->message.registered = reg;
        return;
    }
    size_t n = strlen(name);
    if (n > cap - 1)
        n = cap - 1;
    memcpy(buf, name, n);
    if (ev->session_len && n + 1 + ev->session_len < cap) {
        buf[n++] = ' ';
        memcpy(buf + n, ev->session, ev->session_len);
        n += ev->session_len;
    }
    buf[n] = '\0';
    a->messageType = NVTX_MESSAGE_TYPE_ASCII;
    a->message.ascii = buf;
}

static void attrs_init(nvtxEventAttributes_t *a, uint8_t cat)
{
    memset(a, 0, sizeof *a);
    a->version = NVTX_VERSION;
    a->size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a->category = cat;
    a->colorType = NVTX_COLOR_ARGB;
    a->color = k_cat_color[cat];
}

static void range_start(nvtx_state *s, cbt_event *ev, ev_class c)
{
    char msg[CBT_NAME_LEN_MAX + CBT_SESSION_MAX + 2];
    nvtxEventAttributes_t a;
    attrs_init(&a, c.cat);
    uint64_t rid = atomic_fetch_add_explicit(&g_next_range_id, 1, memory_order_relaxed) + 1;
    a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
    a.payload.ullValue = rid;
    if (c.span == SP_PSPAN) {
        const char *nm = ev->flags & CBT_EVF_TRACE ? cbt_name_str(ev->trace.name) : NULL;
        set_message(&a, msg, sizeof msg, nm ? nm : "pspan", NULL, ev);
    } else {
        set_message(&a, msg, sizeof msg, k_span_name[c.span], g_span_str[c.span], ev);
    }
    uint64_t h = key_hash(ev, c.span);

    pthread_mutex_lock(&s->lock);
    uint32_t i = s->free_head;
    if (i == NVTX_NIL) {
        pthread_mutex_unlock(&s->lock);
        atomic_fetch_add_explicit(&s->table_full, 1, memory_order_relaxed);
        return;
    }
    /* started under the lock, so an END published after this START returns
     * (on any thread) finds it */
    nvtxRangeId_t id = nvtxDomainRangeStartEx(g_domain, &a);
    if (id == 0) { /* no tool attached: nothing to end, nothing to correlate */
        pthread_mutex_unlock(&s->lock);
        return;
    }
    open_range *r = &s->open[i];
    s->free_head = r->next;
    r->hash = h;
    r->pair = ev->pair;
    r->id = id;
    r->span = c.span;
    r->session_len = ev->session_len;
    memcpy(r->session, ev->session, ev->session_len);
    r->next = NVTX_NIL;
    uint32_t b = (uint32_t)h & (NVTX_BUCKETS - 1);
    if (s->tail[b] == NVTX_NIL)
        s->head[b] = i;
    else
        s->open[s->tail[b]].next = i;
    s->tail[b] = i;
    pthread_mutex_unlock(&s->lock);

    atomic_fetch_add_explicit(&s->ranges_started, 1, memory_order_relaxed);
    /* full metadata: the range stands, only the attribute is missing */
    (void)cbt_event_i64(ev, g_key_range_id, (int64_t)rid);
}

static void range_end(nvtx_state *s, const cbt_event *ev, ev_class c)
{
    uint64_t h = key_hash(ev, c.span);
    uint32_t b = (uint32_t)h & (NVTX_BUCKETS - 1);
    nvtxRangeId_t id = 0;

    pthread_mutex_lock(&s->lock);
    uint32_t prev = NVTX_NIL;
    for (uint32_t i = s->head[b]; i != NVTX_NIL; prev = i, i = s->open[i].next) {
        open_range *r = &s->open[i];
        if (!key_eq(r, h, ev, c.span))
            continue;
        /* chains are in start order: the first match is the oldest */
        id = r->id;
        if (prev == NVTX_NIL)
            s->head[b] = r->next;
        else
            s->open[prev].next = r->next;
        if (s->tail[b] == i)
            s->tail[b] = prev;
        r->next = s->free_head;
        s->free_head = i;
        break;
    }
    pthread_mutex_unlock(&s->lock);

    if (id == 0) {
        atomic_fetch_add_explicit(&s->unmatched_end, 1, memory_order_relaxed);
        return;
    }
    nvtxDomainRangeEnd(g_domain, id);
    atomic_fetch_add_explicit(&s->ranges_ended, 1, memory_order_relaxed);
}

static void mark(nvtx_state *s, const cbt_event *ev, ev_class c)
{
    const char *name = cbt_event_type_name(ev->type);
    if (!name)
        return;
    char msg[CBT_NAME_LEN_MAX + CBT_SESSION_MAX + 2];
    nvtxEventAttributes_t a;
    attrs_init(&a, c.cat);
    set_message(&a, msg, sizeof msg, name, ev->session_len ? NULL : type_str(ev->type), ev);
    nvtxDomainMarkEx(g_domain, &a);
    atomic_fetch_add_explicit(&s->marks, 1, memory_order_relaxed);
}

static void nvtx_hook(void *ctx, cbt_event *ev, int on_stream)
{
    (void)on_stream; /* same treatment: NVTX stamps the publish either way */
    nvtx_state *s = ctx;
    ev_class c = classify(ev->type);
    if (c.span == SP_PSPAN && c.role != ROLE_MARK) {
        /* a pspan's BEGIN and END pair by its span id, exactly; the pspan
         * subscriber pairs by the id too and ignores `pair` */
        if (!(ev->flags & CBT_EVF_TRACE))
            return;
        memcpy(&ev->pair, ev->trace.span_id, sizeof ev->pair);
    }
    switch (c.role) {
    case ROLE_START: range_start(s, ev, c); break;
    case ROLE_END: range_end(s, ev, c); break;
    default: mark(s, ev, c); break;
    }
}

cbt_status cbt_nvtx_enable(void)
{
    cbt_tracer *t = cbt_tracer_get();
    if (!t)
        return CBT_ERR_NOT_INITIALIZED;
    pthread_mutex_lock(&g_enable_lock);
    cbt_status st = CBT_OK;
    uint64_t gen = cbt_tracer_generation_(t);
    if (g_state && g_state->gen == gen) {
        st = CBT_ERR_ALREADY;
        goto out;
    }
    st = nvtx_globals_init();
    if (st)
        goto out;
    nvtx_state *s = state_new(gen);
    if (!s) {
        st = CBT_ERR_NOMEM;
        goto out;
    }
    st = cbt_publish_hook_install_(t, nvtx_hook, s);
    if (st) {
        state_free(s);
        goto out;
    }
    /* the previous tracer is gone: nobody publishes into its hook any more */
    state_free(g_state);
    g_state = s;
out:
    pthread_mutex_unlock(&g_enable_lock);
    return st;
}
