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
 * pair) — the key the MP subscriber pairs on, first in first out, "oldest"
 * meaning the smallest cbt range id — held in a bounded table of open
 * ranges (at most NVTX_OPEN_MAX) that no publish locks: the hook runs on
 * every publishing thread, and a thread stopped anywhere in it (preempted,
 * or inside a slow NVTX tool) holds no other publish up. The table ("the
 * open-range table", below) is open addressing over NVTX_SLOTS slots, each
 * claimed and released by a CAS on its state word; an END published after
 * a START returned (on any thread) finds it. An END with no open START does
 * nothing; a START that finds NVTX_OPEN_MAX ranges open is counted and
 * emits no range. A range the tool refused (id 0: no tool attached) is not
 * tracked and adds no metadata. A stream publish reaches the hook with
 * `pair` already set as the stream sets it (its ordinal, when 0: stream.c),
 * so the same op of one session on two streams pairs per stream.
 *
 * Registered strings. The span names, and the type names of every mark type
 * known at enable (the built-in ones and those the program registered
 * before), are registered at enable, under g_enable_lock. A type registered
 * later gets its string on its first session-less mark, registered by the
 * one thread whose CAS claims it; a mark of that type meanwhile, on another
 * thread, carries the name as ASCII instead of waiting (the same text in
 * Nsight).
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

#define NVTX_OPEN_MAX 4096u /* open ranges awaiting their END */
#define NVTX_SLOTS 8192u    /* table slots, a power of two: at most half of them used */
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
/* Event type names for session-less marks: TS_NONE until registered, then
 * the nvtxStringHandle_t. Registered at enable for the types known then; a
 * later type by the first thread whose CAS moves it NONE -> BUSY. */
#define TS_NONE ((uintptr_t)0)
#define TS_BUSY ((uintptr_t)1)    /* a thread is registering it: ASCII meanwhile */
#define TS_REFUSED ((uintptr_t)2) /* the tool gave no handle: ASCII always */
static _Atomic uintptr_t g_type_str[CBT_EVENT_TYPES_MAX];
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

/* The registered name of `type`, or NULL: the mark then carries it as
 * ASCII. Never waits: a thread that finds another registering it (BUSY)
 * takes NULL. The one that claims it calls the tool (which may be slow: it
 * delays only this thread's mark). */
static nvtxStringHandle_t type_str(cbt_event_type type)
{
    if (type >= CBT_EVENT_TYPES_MAX)
        return NULL;
    /* acquire: pairs with the release below (the tool's string behind the handle) */
    uintptr_t v = atomic_load_explicit(&g_type_str[type], memory_order_acquire);
    if (v == TS_NONE) {
        const char *name = cbt_event_type_name(type);
        if (!name || !atomic_compare_exchange_strong_explicit(&g_type_str[type], &v, TS_BUSY,
                                                               memory_order_acquire,
                                                               memory_order_acquire))
            return v > TS_REFUSED ? (nvtxStringHandle_t)v : NULL;
        nvtxStringHandle_t h = nvtxDomainRegisterStringA(g_domain, name);
        v = h ? (uintptr_t)h : TS_REFUSED;
        /* release: pairs with the acquires above */
        atomic_store_explicit(&g_type_str[type], v, memory_order_release);
    }
    return v > TS_REFUSED ? (nvtxStringHandle_t)v : NULL;
}

/* ---- the hook state of one tracer generation ---- */

/* The open-range table. Slot i's state word is (version << 2) | SLOT_*:
 *   FREE -> CLAIMED   a START's CAS (acquire: pairs with the release that
 *                     freed it, so the last END's reads of the body come
 *                     before our writes); it then writes the key and body,
 *   CLAIMED -> OPEN   a release store: the key and body are visible to
 *                     whoever reads OPEN with acquire,
 *   OPEN -> CLOSING   an END's CAS on the exact word it read (acquire): it
 *                     owns the body now; a slot freed and reused since has
 *                     another version, so the CAS fails and the END looks again,
 *   CLOSING -> FREE   a release store with the version moved on (or back to
 *                     OPEN, unchanged, when the body shows a hash collision).
 * A START probes linearly from its home slot (key hash mod NVTX_SLOTS) for a
 * FREE one and, before publishing OPEN, raises reach[home] to its distance
 * from home; an END scans home .. home + reach[home]. reach only grows
 * (within one tracer generation), so an END that begins after a START
 * returned scans at least as far as that START went: the START's stores all
 * happen before the END's loads, by whatever made the END come after it.
 * n_open (reserved before a START claims, released after an END frees)
 * keeps at most NVTX_OPEN_MAX slots used: at most half the table, so a
 * FREE slot is always near. Scanning ENDs read the key words as atomics
 * (relaxed, after the state's acquire) and the body only once they own the
 * slot. */
enum { SLOT_FREE = 0, SLOT_CLAIMED = 1, SLOT_OPEN = 2, SLOT_CLOSING = 3 };
#define SLOT_STATE(w) ((w) & 3u)
#define SLOT_WORD(w, st) (((w) & ~(uint64_t)3) | (st))
#define SLOT_NEXT_VERSION(w) (((w) & ~(uint64_t)3) + 4u) /* FREE, version + 1 */

typedef struct slot_key {
    _Atomic uint64_t state;
    _Atomic uint64_t hash; /* key_hash: session, span and pair */
    _Atomic uint64_t pair;
    _Atomic uint64_t rid;  /* the cbt range id: the start order */
} slot_key;

typedef struct slot_body { /* written while CLAIMED, read by the END that owns the slot */
    nvtxRangeId_t id;      /* the tool's */
    uint8_t span;
    uint8_t session_len;
    char session[CBT_SESSION_MAX];
} slot_body;

typedef struct nvtx_state {
    uint64_t gen; /* the tracer's generation */
    _Atomic uint32_t n_open;
    _Atomic uint32_t reach[NVTX_SLOTS];
    slot_key key[NVTX_SLOTS];
    slot_body body[NVTX_SLOTS];
    /* counters (read in a debugger; no API exposes them yet) */
    _Atomic uint64_t ranges_started, ranges_ended, marks, table_full, unmatched_end;
} nvtx_state;

static nvtx_state *g_state; /* under g_enable_lock */

static nvtx_state *state_new(uint64_t gen)
{
    nvtx_state *s = calloc(1, sizeof *s); /* every slot FREE, version 0; reach 0 */
    if (!s)
        return NULL;
    s->gen = gen;
    return s;
}

static void state_free(nvtx_state *s) { free(s); }

static uint64_t key_hash(const cbt_event *ev, uint8_t span)
{
    uint64_t h = cbt_hash_bytes(ev->session, ev->session_len, 0x6e767478u /* "nvtx" */);
    h ^= ((uint64_t)span + 1) * 0x9e3779b97f4a7c15ull;
    h ^= ev->pair * 0xc2b2ae3d27d4eb4full;
    h ^= h >> 29;
    return h;
}

static int body_eq(const slot_body *b, const cbt_event *ev, uint8_t span)
{
    return b->span == span && b->session_len == ev->session_len &&
           memcmp(b->session, ev->session, ev->session_len) == 0;
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

/* Claim a FREE slot for key hash `h`; its index, or NVTX_NIL. */
static uint32_t slot_claim(nvtx_state *s, uint64_t h)
{
    uint32_t home = (uint32_t)h & (NVTX_SLOTS - 1);
    /* at most half the slots are used, so a FREE one is near; twice round
     * only if every slot looked taken as we passed it */
    for (uint32_t d = 0; d < 2 * NVTX_SLOTS; d++) {
        uint32_t i = (home + d) & (NVTX_SLOTS - 1);
        uint64_t w = atomic_load_explicit(&s->key[i].state, memory_order_relaxed);
        /* acquire: pairs with the release store that freed the slot */
        if (SLOT_STATE(w) == SLOT_FREE &&
            atomic_compare_exchange_strong_explicit(&s->key[i].state, &w,
                                                    SLOT_WORD(w, SLOT_CLAIMED),
                                                    memory_order_acquire, memory_order_relaxed)) {
            uint32_t dist = d & (NVTX_SLOTS - 1);
            /* relaxed: an END that must see it begins after our START returned */
            uint32_t r = atomic_load_explicit(&s->reach[home], memory_order_relaxed);
            while (r < dist && !atomic_compare_exchange_weak_explicit(
                                   &s->reach[home], &r, dist, memory_order_relaxed,
                                   memory_order_relaxed))
                ;
            return i;
        }
    }
    return NVTX_NIL;
}

/* Give a slot we own (CLAIMED or CLOSING) back, FREE with its version moved on. */
static void slot_free(nvtx_state *s, uint32_t i)
{
    uint64_t w = atomic_load_explicit(&s->key[i].state, memory_order_relaxed);
    /* release: pairs with the acquire of the CAS that claims it next */
    atomic_store_explicit(&s->key[i].state, SLOT_NEXT_VERSION(w), memory_order_release);
    atomic_fetch_sub_explicit(&s->n_open, 1, memory_order_relaxed);
}

static void range_start(nvtx_state *s, cbt_event *ev, ev_class c)
{
    if (atomic_fetch_add_explicit(&s->n_open, 1, memory_order_relaxed) >= NVTX_OPEN_MAX) {
        atomic_fetch_sub_explicit(&s->n_open, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&s->table_full, 1, memory_order_relaxed);
        return;
    }
    uint64_t h = key_hash(ev, c.span);
    uint32_t i = slot_claim(s, h);
    if (i == NVTX_NIL) { /* not while n_open bounds the use; counted as full */
        atomic_fetch_sub_explicit(&s->n_open, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&s->table_full, 1, memory_order_relaxed);
        return;
    }
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
    /* the slot is ours and unseen (CLAIMED) while the tool runs: a slow
     * tool delays this thread only */
    nvtxRangeId_t id = nvtxDomainRangeStartEx(g_domain, &a);
    if (id == 0) { /* no tool attached: nothing to end, nothing to correlate */
        slot_free(s, i);
        return;
    }
    slot_body *b = &s->body[i];
    b->id = id;
    b->span = c.span;
    b->session_len = ev->session_len;
    memcpy(b->session, ev->session, ev->session_len);
    atomic_store_explicit(&s->key[i].hash, h, memory_order_relaxed);
    atomic_store_explicit(&s->key[i].pair, ev->pair, memory_order_relaxed);
    atomic_store_explicit(&s->key[i].rid, rid, memory_order_relaxed);
    uint64_t w = atomic_load_explicit(&s->key[i].state, memory_order_relaxed);
    /* release: pairs with the acquire loads and CAS of the ENDs that scan it */
    atomic_store_explicit(&s->key[i].state, SLOT_WORD(w, SLOT_OPEN), memory_order_release);

    atomic_fetch_add_explicit(&s->ranges_started, 1, memory_order_relaxed);
    /* full metadata: the range stands, only the attribute is missing */
    (void)cbt_event_i64(ev, g_key_range_id, (int64_t)rid);
}

#define END_SKIP_MAX 8 /* slots a hash collision made one END look past */

static void range_end(nvtx_state *s, const cbt_event *ev, ev_class c)
{
    uint64_t h = key_hash(ev, c.span);
    uint32_t home = (uint32_t)h & (NVTX_SLOTS - 1);
    uint32_t skip[END_SKIP_MAX], n_skip = 0;
    nvtxRangeId_t id = 0;
    for (;;) {
        /* the oldest OPEN slot of our key within reach */
        uint32_t reach = atomic_load_explicit(&s->reach[home], memory_order_relaxed);
        uint32_t best = NVTX_NIL;
        uint64_t best_w = 0, best_rid = UINT64_MAX;
        for (uint32_t d = 0; d <= reach; d++) {
            uint32_t i = (home + d) & (NVTX_SLOTS - 1);
            /* acquire: pairs with the release store of OPEN (the key words) */
            uint64_t w = atomic_load_explicit(&s->key[i].state, memory_order_acquire);
            if (SLOT_STATE(w) != SLOT_OPEN ||
                atomic_load_explicit(&s->key[i].hash, memory_order_relaxed) != h ||
                atomic_load_explicit(&s->key[i].pair, memory_order_relaxed) != ev->pair)
                continue;
            uint64_t rid = atomic_load_explicit(&s->key[i].rid, memory_order_relaxed);
            int skipped = 0;
            for (uint32_t k = 0; k < n_skip; k++)
                skipped |= skip[k] == i;
            if (rid < best_rid && !skipped)
                best = i, best_w = w, best_rid = rid;
        }
        if (best == NVTX_NIL)
            break;
        /* acquire: pairs with the release store of OPEN (the body); fails
         * when another END took it, or it was freed and reused since */
        if (!atomic_compare_exchange_strong_explicit(&s->key[best].state, &best_w,
                                                     SLOT_WORD(best_w, SLOT_CLOSING),
                                                     memory_order_acquire, memory_order_relaxed))
            continue;
        const slot_body *b = &s->body[best];
        if (body_eq(b, ev, c.span)) {
            id = b->id;
            slot_free(s, best);
            break;
        }
        /* another key with our 64-bit hash: leave it open, look past it.
         * release: pairs with the acquires of the ENDs that scan it */
        atomic_store_explicit(&s->key[best].state, best_w, memory_order_release);
        if (n_skip == END_SKIP_MAX)
            break;
        skip[n_skip++] = best;
    }
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
    /* the names of the mark types known now, so that no publish registers
     * them (a later type: type_str, on its first mark) */
    for (uint32_t ty = 0; ty < CBT_EVENT_TYPES_MAX; ty++)
        if (classify((cbt_event_type)ty).role == ROLE_MARK && cbt_event_type_name((cbt_event_type)ty))
            (void)type_str((cbt_event_type)ty);
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
