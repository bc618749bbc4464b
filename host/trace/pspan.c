/* host/trace/pspan.c — owns spans that a process opens and closes itself
 * (cbt/pspan.h): the publishing side (ids drawn on the caller's thread,
 * CBT_EV_SPAN_BEGIN / CBT_EV_SPAN_END events) and the subscriber that turns
 * each BEGIN/END pair into one span on the harvester thread.
 *
 * The subscriber pairs by span id, exactly: the BEGIN and END of one pspan
 * carry the same id, so two pspans of one request never cross, whatever
 * threads or streams published them. Open spans live in a bounded table keyed
 * by the 8 id bytes (CBT_PSPAN_OPEN_MAX); a BEGIN past that is dropped and
 * counted, and its END is then counted as unmatched.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "cbt/context.h"
#include "cbt/pspan.h"
#include "internal/abi.h"
#include "internal/end_status.h"
#include "internal/tracer.h"

#define CBT_PSPAN_OPEN_MAX 4096
/* an open pspan older than this when the table is full is taken to have lost
 * its END (a dropped publish) and is evicted; a younger one is live work */
#define CBT_PSPAN_STALE_NS (60ull * 1000000000ull)

/* ---- ids on the caller's thread ------------------------------------------------ */

static _Thread_local uint64_t tl_rng[2];
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

/* A forked child starts with a copy of the forking thread's generator: reseed
 * it, or parent and child would draw the same span ids (vLLM forks workers).
 * The child has only that thread, whose state this handler can reach. */
static void reseed_in_child(void) { tl_rng[0] = tl_rng[1] = 0; }
static void atfork_init(void) { pthread_atfork(NULL, NULL, reseed_in_child); }

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void cbt_pspan_new_id(uint8_t out[8])
{
    if (__builtin_expect((tl_rng[0] | tl_rng[1]) == 0, 0)) {
        pthread_once(&g_atfork_once, atfork_init);
        uint64_t seed[2] = {0, 0};
        if (getrandom(seed, sizeof seed, GRND_NONBLOCK) != (ssize_t)sizeof seed) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            seed[0] = mix64((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32));
            seed[1] = mix64((uint64_t)(uintptr_t)&tl_rng ^ seed[0]);
        }
        tl_rng[0] = seed[0] | 1; /* never the all-zero state */
        tl_rng[1] = seed[1];
    }
    uint64_t r;
    do { /* xorshift128+ */
        uint64_t s1 = tl_rng[0];
        const uint64_t s0 = tl_rng[1];
        tl_rng[0] = s0;
        s1 ^= s1 << 23;
        tl_rng[1] = s1 ^ s0 ^ (s1 >> 18) ^ (s0 >> 5);
        r = mix64(tl_rng[1] + s0);
    } while (r == 0);
    memcpy(out, &r, 8);
}

/* ---- publishing ------------------------------------------------------------------ */

static cbt_status add_meta(cbt_event *ev, const cbt_meta *meta, uint32_t n_meta)
{
    for (uint32_t i = 0; i < n_meta; i++) {
        const cbt_meta *m = &meta[i];
        cbt_status st;
        switch (m->type) {
        case CBT_META_I64: st = cbt_event_i64(ev, m->key, m->v.i64); break;
        case CBT_META_F64: st = cbt_event_f64(ev, m->key, m->v.f64); break;
        case CBT_META_BOOL: st = cbt_event_bool(ev, m->key, m->v.b); break;
        case CBT_META_STR: {
            /* a standalone value: its string, if any, is inline */
            const char *v = cbt_event_meta_str(NULL, m, NULL);
            st = v ? cbt_event_str(ev, m->key, v) : CBT_ERR_META_TOO_LONG;
            break;
        }
        default: return CBT_ERR_META_TOO_LONG; /* cbt_meta_str refused it */
        }
        if (st)
            return st;
    }
    return CBT_OK;
}

static cbt_status publish(cbt_pspan *s, cbt_event *ev)
{
    if (s->stream)
        return cbt_publish_on_stream(s->stream, ev);
    return cbt_publish(ev);
}

static cbt_status begin(cbt_pspan *s, cbt_stream *st, cbt_name name, cbt_span_kind kind,
                        const char *request_id, const cbt_span_ctx *parent,
                        const cbt_meta *meta, uint32_t n_meta)
{
    if (!s)
        return CBT_ERR_INVAL;
    if (name == 0 || (unsigned)kind > CBT_SPAN_KIND_CONSUMER ||
        n_meta > CBT_EVENT_META_MAX - 1 || (n_meta && !meta)) {
        memset(s, 0, sizeof *s);
        return CBT_ERR_INVAL;
    }
    /* the sampled-out fast path: the parent's flag is clear and it names a
     * span, so the context to pass on is the parent's own ids; nothing else
     * is looked at, copied or published */
    if (parent && !(parent->trace_flags & CBT_TRACE_FLAG_SAMPLED) && cbt_span_ctx_valid(parent)) {
        s->ctx = *parent;
        s->ctx.trace_flags &= CBT_TRACE_FLAGS_KNOWN;
        s->request_id[0] = '\0';
        s->name = name;
        s->open = 1;
        s->sampled = 0;
        s->stream = st;
        return CBT_OK;
    }
    memset(s, 0, sizeof *s);
    size_t rl = request_id ? strnlen(request_id, CBT_SESSION_MAX) : 0;
    if (rl >= CBT_SESSION_MAX)
        return CBT_ERR_SESSION_TOO_LONG;
    memcpy(s->request_id, request_id ? request_id : "", rl);
    s->name = name;
    s->stream = st;

    /* the span's context: the parent's trace and sampled bit, or Option B */
    cbt_span_ctx p = {0};
    if (parent && !cbt_bytes_zero_(parent->trace_id, 16)) {
        p = *parent;
    } else {
        cbt_trace_id_from_request(s->request_id, rl, p.trace_id);
        p.trace_flags = CBT_TRACE_FLAG_SAMPLED;
        memset(p.span_id, 0, 8);
    }
    memcpy(s->ctx.trace_id, p.trace_id, 16);
    s->ctx.trace_flags = p.trace_flags & CBT_TRACE_FLAGS_KNOWN;
    s->sampled = (p.trace_flags & CBT_TRACE_FLAG_SAMPLED) != 0;
    if (!s->sampled) {
        /* nothing is recorded; keep a valid id so the decision can travel */
        if (!cbt_bytes_zero_(p.span_id, 8))
            memcpy(s->ctx.span_id, p.span_id, 8);
        else
            cbt_pspan_new_id(s->ctx.span_id);
        s->open = 1;
        return CBT_OK;
    }
    cbt_pspan_new_id(s->ctx.span_id);

    cbt_tracer *t = cbt_tracer_get();
    if (!t)
        return CBT_ERR_NOT_INITIALIZED;
    cbt_event ev;
    cbt_status rc = cbt_event_init(&ev, CBT_EV_SPAN_BEGIN, s->request_id);
    if (rc)
        return rc;
    if ((rc = add_meta(&ev, meta, n_meta)))
        return rc;
    cbt_event_trace_set(&ev, &p, s->ctx.span_id);
    ev.trace.name = name;
    ev.trace.kind = (uint8_t)kind;
    rc = publish(s, &ev);
    if (rc == CBT_OK) {
        s->open = 1;
    } else if (t->publish_hook) {
        /* the hook (NVTX) saw the BEGIN before the push failed and opened a
         * range: give it the END too, or that range would stay open */
        cbt_event_init(&ev, CBT_EV_SPAN_END, s->request_id);
        cbt_event_trace_set(&ev, NULL, s->ctx.span_id);
        ev.trace.name = name;
        (void)publish(s, &ev);
    }
    return rc;
}

cbt_status cbt_pspan_begin(cbt_pspan *s, cbt_name name, cbt_span_kind kind,
                           const char *request_id, const cbt_span_ctx *parent,
                           const cbt_meta *meta, uint32_t n_meta)
{
    return begin(s, NULL, name, kind, request_id, parent, meta, n_meta);
}

cbt_status cbt_pspan_begin_on(cbt_pspan *s, cbt_stream *st, cbt_name name, cbt_span_kind kind,
                              const char *request_id, const cbt_span_ctx *parent,
                              const cbt_meta *meta, uint32_t n_meta)
{
    if (!st) {
        if (s)
            memset(s, 0, sizeof *s);
        return CBT_ERR_INVAL;
    }
    return begin(s, st, name, kind, request_id, parent, meta, n_meta);
}

static cbt_status end(cbt_pspan *s, bool on_stream, const cbt_meta *meta, uint32_t n_meta)
{
    if (!s || !s->open || (s->stream != NULL) != on_stream)
        return CBT_ERR_INVAL;
    if (!s->sampled) {
        s->open = 0;
        return CBT_OK;
    }
    if (n_meta > CBT_EVENT_META_MAX - 1 || (n_meta && !meta))
        return CBT_ERR_INVAL;
    /* build it first: a refused value leaves the span open, so the caller
     * can end it again without that value */
    cbt_event ev;
    cbt_status rc = cbt_event_init(&ev, CBT_EV_SPAN_END, s->request_id);
    if (rc)
        return rc;
    if ((rc = add_meta(&ev, meta, n_meta)))
        return rc;
    cbt_event_trace_set(&ev, NULL, s->ctx.span_id);
    ev.trace.name = s->name;
    s->open = 0;
    /* a dropped END (queue full) leaves the subscriber's span open; it is
     * ended incomplete when the open table needs its slot, or at shutdown */
    return publish(s, &ev);
}

cbt_status cbt_pspan_end(cbt_pspan *s, const cbt_meta *meta, uint32_t n_meta)
{
    return end(s, false, meta, n_meta);
}

cbt_status cbt_pspan_end_on(cbt_pspan *s, const cbt_meta *meta, uint32_t n_meta)
{
    return end(s, true, meta, n_meta);
}

/* ---- the subscriber (harvester thread) -------------------------------------------- */

typedef struct ps_state {
    cbt_strtab open; /* key: the 8 span-id bytes; value: cbt_span * */
    uint64_t no_evict_before_ns; /* a full table has nothing stale before this time */
    struct {
        _Atomic uint64_t opened, closed, unmatched_end, duplicate_begin, table_full, malformed;
        _Atomic uint64_t evicted;
        _Atomic uint64_t incomplete_at_shutdown;
    } c;
} ps_state;

#define INC(field) atomic_fetch_add_explicit(&st->c.field, 1, memory_order_relaxed)

/* The table is full at time `now`: end the oldest open pspan incomplete if it
 * is stale (CBT_PSPAN_STALE_NS), so a BEGIN can take its slot. Scans the table
 * at most once per stale period while nothing is stale. */
static void evict_stale(ps_state *st, cbt_tracer *t, uint64_t now)
{
    if (now < st->no_evict_before_ns)
        return;
    cbt_span **oldest = NULL;
    for (uint32_t i = 0; i <= st->open.mask; i++) {
        cbt_span **sl = cbt_strtab_slot(&st->open, i);
        if (sl && (!oldest || (*sl)->start_ns < (*oldest)->start_ns))
            oldest = sl;
    }
    if (!oldest)
        return;
    if (now < (*oldest)->start_ns + CBT_PSPAN_STALE_NS) {
        st->no_evict_before_ns = (*oldest)->start_ns + CBT_PSPAN_STALE_NS;
        return;
    }
    cbt_span *sp = *oldest;
    cbt_strtab_remove(&st->open, oldest);
    sp->flags |= CBT_SPANF_INCOMPLETE;
    cbt_span_end(t, sp, sp->start_ns);
    INC(evicted);
}

static cbt_status on_begin(ps_state *st, cbt_tracer *t, const cbt_event *ev)
{
    const cbt_event_trace *tr = cbt_event_trace_of(ev);
    if (!tr || cbt_bytes_zero_(tr->span_id, 8) || tr->name == 0) {
        INC(malformed);
        return CBT_ERR_INVAL;
    }
    const char *key = (const char *)tr->span_id;
    if (cbt_strtab_find(&st->open, key, 8, 0)) {
        INC(duplicate_begin);
        return CBT_ERR_DUPLICATE;
    }
    cbt_span **slot = cbt_strtab_upsert(&st->open, key, 8, 0, NULL);
    if (!slot) {
        /* full: an open pspan a minute old most likely lost its END (a
         * dropped publish); end it incomplete and take its place */
        evict_stale(st, t, t->hv_now); /* the harvester's round time, not the event's */
        slot = cbt_strtab_upsert(&st->open, key, 8, 0, NULL);
    }
    if (!slot) {
        INC(table_full);
        return CBT_ERR_FULL;
    }
    cbt_span *sp = cbt_span_start_for_event(t, tr->name, (cbt_span_kind)tr->kind, NULL, ev);
    if (!sp) {
        cbt_strtab_remove(&st->open, slot);
        return CBT_ERR_FULL;
    }
    if (ev->session_len)
        cbt_span_set_str(sp, CBT_N_REQUEST_ID, ev->session, ev->session_len);
    cbt_span_set_from_event(sp, ev);
    cbt_span_set_queue(sp, ev); /* begun on a stream (cbt_pspan_begin_on): its queue time */
    *slot = sp;
    /* a pspan stamped in the past (an explicit time) may be stale sooner
     * than the bound the last scan computed */
    if (sp->start_ns + CBT_PSPAN_STALE_NS < st->no_evict_before_ns)
        st->no_evict_before_ns = sp->start_ns + CBT_PSPAN_STALE_NS;
    INC(opened);
    return CBT_OK;
}

static cbt_status on_end(ps_state *st, cbt_tracer *t, const cbt_event *ev)
{
    const cbt_event_trace *tr = cbt_event_trace_of(ev);
    cbt_span **slot = tr ? cbt_strtab_find(&st->open, (const char *)tr->span_id, 8, 0) : NULL;
    if (!slot) {
        INC(unmatched_end);
        return CBT_ERR_UNMATCHED;
    }
    cbt_span *sp = *slot;
    cbt_strtab_remove(&st->open, slot);
    cbt_span_set_from_event(sp, ev);
    cbt_end_status_apply_(sp, ev);
    cbt_span_end(t, sp, ev->ts);
    INC(closed);
    return CBT_OK;
}

static cbt_status ps_on_event(void *ctx, cbt_tracer *t, const cbt_event *ev)
{
    ps_state *st = ctx;
    if (ev->type == CBT_EV_SPAN_BEGIN)
        return on_begin(st, t, ev);
    if (ev->type == CBT_EV_SPAN_END)
        return on_end(st, t, ev);
    return CBT_ERR_UNKNOWN_EVENT;
}

static void ps_on_shutdown(void *ctx, cbt_tracer *t, uint64_t now_ns)
{
    ps_state *st = ctx;
    /* children were begun after their parents: end the newest first so a
     * child never outlives the span it nests under */
    for (;;) {
        cbt_span **newest = NULL;
        for (uint32_t i = 0; i <= st->open.mask; i++) {
            cbt_span **sl = cbt_strtab_slot(&st->open, i);
            if (sl && (!newest || (*sl)->start_ns >= (*newest)->start_ns))
                newest = sl;
        }
        if (!newest)
            break;
        cbt_span *sp = *newest;
        cbt_strtab_remove(&st->open, newest);
        sp->flags |= CBT_SPANF_INCOMPLETE;
        cbt_span_end(t, sp, now_ns);
        INC(incomplete_at_shutdown);
    }
    cbt_strtab_clear(&st->open);
}

static void ps_destroy(void *ctx)
{
    ps_state *st = ctx;
    cbt_strtab_free(&st->open);
    free(st);
}

cbt_status cbt_pspan_subscriber_create_(cbt_subscriber *out)
{
    ps_state *st = calloc(1, sizeof *st);
    if (!st)
        return CBT_ERR_NOMEM;
    cbt_status rc = cbt_strtab_init(&st->open, 2 * CBT_PSPAN_OPEN_MAX, CBT_PSPAN_OPEN_MAX,
                                    sizeof(cbt_span *));
    if (rc) {
        free(st);
        return rc;
    }
    cbt_subscriber_init(out, "pspan", st, ps_on_event, ps_on_shutdown, ps_destroy);
    cbt_subscriber_want(out, CBT_EV_SPAN_BEGIN);
    cbt_subscriber_want(out, CBT_EV_SPAN_END);
    return CBT_OK;
}

cbt_status cbt_pspan_stats_get(cbt_pspan_stats *caller)
{
    cbt_status abi = cbt_abi_out_check_(caller);
    if (abi)
        return abi;
    cbt_pspan_stats full, *out = &full;
    memset(out, 0, sizeof *out);
    void *ctx = NULL;
    cbt_status rc = cbt_find_subscriber_ctx_(NULL, ps_on_event, &ctx);
    if (rc)
        return rc;
    const ps_state *st = ctx;
#define R(f) atomic_load_explicit(&st->c.f, memory_order_relaxed)
    out->opened = R(opened);
    out->closed = R(closed);
    out->unmatched_end = R(unmatched_end);
    out->duplicate_begin = R(duplicate_begin);
    out->table_full = R(table_full);
    out->malformed = R(malformed);
    out->evicted = R(evicted);
    out->incomplete_at_shutdown = R(incomplete_at_shutdown);
#undef R
    cbt_abi_out_(caller, out, sizeof *out, CBT_PSPAN_STATS_VERSION);
    return CBT_OK;
}
