/* host/builders/mp_subscriber.c — owns the MP-path span builder (cbt/mp.h): the root
 * "request" span per session, its mp.* children, and the pending-op deferral.
 *
 * Per session (a cbt_strtab entry keyed by the session id):
 *   root              the open "request" span, or NULL
 *   pending_store     MP_STORE_SUBMITTED minus MP_STORE_END seen
 *   pending_retrieve  MP_RETRIEVE_SUBMITTED minus MP_RETRIEVE_END seen
 *   end_seen, end_ts  MP_REQUEST_END arrived (and when): the deferred close
 *   children[]        open child spans with their op and pairing key
 * A session is freed when its root has closed and no child is open.
 * Harvester thread only; the counters are atomics so other threads may read.
 */
#include <stdlib.h>
#include <string.h>

#include "internal/abi.h"
#include "internal/end_status.h"
#include "internal/tracer.h"

enum { OP_LOOKUP = 0, OP_STORE = 1, OP_RETRIEVE = 2, OP_COUNT_ };

static const cbt_name k_op_span[OP_COUNT_] = {CBT_N_MP_LOOKUP_PREFETCH, CBT_N_MP_STORE,
                                              CBT_N_MP_RETRIEVE};
static const cbt_name k_op_logical[OP_COUNT_] = {CBT_N_LOOKUP_PREFETCH, CBT_N_STORE,
                                                 CBT_N_RETRIEVE};

typedef struct mp_child {
    cbt_span *span;
    uint64_t pair;
    uint64_t seq; /* open order, for first-in first-out pairing */
    uint8_t op;
} mp_child;

typedef struct mp_session {
    cbt_span *root;
    uint32_t pending[OP_COUNT_]; /* [OP_STORE], [OP_RETRIEVE] used */
    uint32_t dropped_starts[OP_COUNT_];
    bool end_seen;
    uint64_t end_ts;
    uint8_t n_children;
    mp_child children[CBT_MP_CHILDREN_MAX];
} mp_session;

#define MP_RECENT_ENDED 1024

typedef struct mp_state {
    cbt_strtab sessions;
    cbt_skey key; /* the session of the event being handled, hashed once */
    uint64_t seq;
    uint64_t recent[MP_RECENT_ENDED]; /* key hashes of recently freed sessions */
    uint32_t recent_next;
    struct {
        _Atomic uint64_t roots_opened, roots_lazy, roots_closed, roots_deferred;
        _Atomic uint64_t children_opened, children_closed, unmatched_end;
        _Atomic uint64_t duplicate_request_end, request_end_unknown, sessions_full;
        _Atomic uint64_t children_full, incomplete_at_shutdown;
        _Atomic uint64_t sessions_live; /* sessions.count after the last event */
    } c;
} mp_state;

#define INC(field) atomic_fetch_add_explicit(&st->c.field, 1, memory_order_relaxed)

static mp_session *session_get(mp_state *st, const cbt_event *ev, bool create)
{
    uint64_t h = cbt_strtab_mix(st->key.base, 0);
    if (!create)
        return cbt_strtab_find_h(&st->sessions, ev->session, ev->session_len, 0, h);
    mp_session *s = cbt_strtab_upsert_h(&st->sessions, ev->session, ev->session_len, 0, h, NULL);
    if (!s)
        INC(sessions_full);
    return s;
}

/* Remember the sessions that ended recently (their key hashes, a ring), so a
 * second REQUEST_END after the state is gone counts as a duplicate, not as a
 * session never seen. */
static void remember_ended(mp_state *st, const mp_session *s)
{
    st->recent[st->recent_next] = cbt_strtab_key_of(&st->sessions, s)->hash;
    st->recent_next = (st->recent_next + 1) % MP_RECENT_ENDED;
}

static bool ended_recently(const mp_state *st, const cbt_event *ev)
{
    uint64_t h = cbt_strtab_mix(st->key.base, 0);
    for (uint32_t i = 0; i < MP_RECENT_ENDED; i++)
        if (st->recent[i] == h)
            return true;
    return false;
}

/* A session is done when REQUEST_END has come, nothing submitted is still
 * pending, the root has closed and no child is open. */
static void session_maybe_free(mp_state *st, mp_session *s)
{
    if (s->end_seen && !s->root && s->n_children == 0 && s->pending[OP_STORE] == 0 &&
        s->pending[OP_RETRIEVE] == 0) {
        remember_ended(st, s);
        cbt_strtab_remove(&st->sessions, s);
    }
}

/* The root, at start_ns. When the opening event carries a trace context
 * (cbt_event_trace_set: the caller's traceparent, extracted), the root joins
 * that trace: a remote child of its span, or a root of a trace-id-only
 * context (Option B); the sampled flag travels with it, so a sampled-out
 * request's spans are built but recorded nowhere (cbt_span_end). A publisher
 * that skips such requests (one flag test) pays nothing at all. */
static void open_root(mp_state *st, cbt_tracer *t, mp_session *s, const cbt_event *ev,
                      uint64_t start_ns)
{
    /* the same rules as every event-opened span (span.c); a not-sampled
     * context makes the root and everything under it end unrecorded */
    s->root = cbt_span_start_for_event_at_(t, CBT_N_REQUEST, CBT_SPAN_KIND_SERVER, NULL, ev,
                                           start_ns);
    if (!s->root)
        return;
    cbt_span_set_str(s->root, CBT_N_SESSION_ID, ev->session, ev->session_len);
    cbt_registry_put_k_(t, &st->key, CBT_N_REQUEST, &s->root->ctx);
    INC(roots_opened);
}

static void close_root(mp_state *st, cbt_tracer *t, mp_session *s, const cbt_skey *k,
                       uint64_t end_ns)
{
    if (!s->root)
        return;
    cbt_registry_remove_k_(t, k, CBT_N_REQUEST, &s->root->ctx);
    cbt_span_end(t, s->root, end_ns);
    s->root = NULL;
    INC(roots_closed);
}

/* The root closes when REQUEST_END has arrived and no submitted op is pending;
 * it is stamped with the REQUEST_END time, not the time of the last END. */
static void maybe_close(mp_state *st, cbt_tracer *t, mp_session *s)
{
    if (s->end_seen && s->pending[OP_STORE] == 0 && s->pending[OP_RETRIEVE] == 0)
        close_root(st, t, s, &st->key, s->end_ts);
}

static cbt_status on_request_start(mp_state *st, cbt_tracer *t, const cbt_event *ev)
{
    mp_session *s = session_get(st, ev, true);
    if (!s)
        return CBT_ERR_FULL;
    if (s->end_seen && !s->root) {
        /* the id is reused by a new request after the old one ended */
        s->end_seen = false;
        memset(s->pending, 0, sizeof s->pending);
        memset(s->dropped_starts, 0, sizeof s->dropped_starts);
    }
    if (!s->root)
        open_root(st, t, s, ev, ev->ts);
    return s->root ? CBT_OK : CBT_ERR_FULL;
}

static cbt_status on_submitted(mp_state *st, const cbt_event *ev, int op)
{
    mp_session *s = session_get(st, ev, true);
    if (!s)
        return CBT_ERR_FULL;
    if (s->end_seen && !s->root && s->pending[OP_STORE] == 0 && s->pending[OP_RETRIEVE] == 0) {
        /* a finished id reused by a new request that starts with a store */
        s->end_seen = false;
        memset(s->dropped_starts, 0, sizeof s->dropped_starts);
    }
    s->pending[op]++;
    return CBT_OK;
}

static cbt_status on_start(mp_state *st, cbt_tracer *t, const cbt_event *ev, int op)
{
    mp_session *s = session_get(st, ev, true);
    if (!s)
        return CBT_ERR_FULL;
    if (!s->root) {
        /* lazy root (store-only path): starts at this child's START, or at the
         * already-deferred REQUEST_END when that came first, so start <= end */
        uint64_t start = ev->ts;
        if (s->end_seen && s->end_ts < start)
            start = s->end_ts;
        open_root(st, t, s, ev, start);
        if (s->root)
            INC(roots_lazy);
    }
    if (s->n_children >= CBT_MP_CHILDREN_MAX || !s->root) {
        INC(children_full);
        s->dropped_starts[op]++;
        return CBT_ERR_FULL;
    }
    cbt_span *c = cbt_span_start(t, k_op_span[op], CBT_SPAN_KIND_INTERNAL, &s->root->ctx, ev->ts);
    if (!c) {
        s->dropped_starts[op]++;
        return CBT_ERR_FULL;
    }
    cbt_span_set_str(c, CBT_N_SESSION_ID, ev->session, ev->session_len);
    cbt_span_set_from_event(c, ev);
    mp_child *ch = &s->children[s->n_children++];
    ch->span = c;
    ch->pair = ev->pair;
    ch->op = (uint8_t)op;
    ch->seq = ++st->seq;
    cbt_registry_put_k_(t, &st->key, k_op_logical[op], &c->ctx);
    INC(children_opened);
    return CBT_OK;
}

static void set_hit_attrs(cbt_span *root, const cbt_event *ev)
{
    int64_t hit = cbt_event_get_i64(ev, CBT_N_HIT_TOKENS, 0);
    int64_t req = cbt_event_get_i64(ev, CBT_N_REQUESTED_TOKENS, 0);
    cbt_span_set_i64(root, CBT_N_HIT_TOKENS, hit);
    cbt_span_set_i64(root, CBT_N_REQUESTED_TOKENS, req);
    cbt_span_set_f64(root, CBT_N_HIT_RATE, req != 0 ? (double)hit / (double)req : 0.0);
}

static cbt_status on_end(mp_state *st, cbt_tracer *t, const cbt_event *ev, int op)
{
    mp_session *s = session_get(st, ev, false);
    int found = -1;
    if (s) {
        for (int i = 0; i < s->n_children; i++) {
            const mp_child *ch = &s->children[i];
            if (ch->op == op && ch->pair == ev->pair &&
                (found < 0 || ch->seq < s->children[found].seq))
                found = i;
        }
    }
    if (found < 0) {
        if (s && s->dropped_starts[op] > 0) {
            /* its START was dropped (counted then): the op still finished */
            s->dropped_starts[op]--;
            if (op != OP_LOOKUP && s->pending[op] > 0)
                s->pending[op]--;
            maybe_close(st, t, s);
            session_maybe_free(st, s);
            return CBT_OK;
        }
        INC(unmatched_end);
        if (s && op != OP_LOOKUP && s->pending[op] > 0) {
            /* no START, but its SUBMITTED was seen: the op finished (LMCache
             * decrements here too), so the deferred root can close */
            s->pending[op]--;
            maybe_close(st, t, s);
            session_maybe_free(st, s);
        }
        return CBT_ERR_UNMATCHED;
    }
    mp_child ch = s->children[found];
    s->children[found] = s->children[--s->n_children];

    cbt_span_set_from_event(ch.span, ev);
    cbt_end_status_apply_(ch.span, ev);
    cbt_span_ctx ctx = ch.span->ctx;
    cbt_span_end(t, ch.span, ev->ts);
    INC(children_closed);

    /* the registry names the newest open span of this op, if any remains */
    int newest = -1;
    for (int i = 0; i < s->n_children; i++)
        if (s->children[i].op == op && (newest < 0 || s->children[i].seq > s->children[newest].seq))
            newest = i;
    if (newest >= 0)
        cbt_registry_put_k_(t, &st->key, k_op_logical[op], &s->children[newest].span->ctx);
    else
        cbt_registry_remove_k_(t, &st->key, k_op_logical[op], &ctx);

    if (op == OP_LOOKUP) {
        if (s->root)
            set_hit_attrs(s->root, ev);
    } else if (s->pending[op] > 0) {
        s->pending[op]--;
    }
    maybe_close(st, t, s);
    session_maybe_free(st, s);
    return CBT_OK;
}

static cbt_status on_request_end(mp_state *st, cbt_tracer *t, const cbt_event *ev)
{
    mp_session *s = session_get(st, ev, false);
    if (!s) {
        if (ended_recently(st, ev)) {
            INC(duplicate_request_end);
            return CBT_ERR_DUPLICATE;
        }
        INC(request_end_unknown);
        return CBT_OK;
    }
    if (s->end_seen) {
        INC(duplicate_request_end);
        return CBT_ERR_DUPLICATE;
    }
    s->end_seen = true;
    s->end_ts = ev->ts;
    if (s->pending[OP_STORE] || s->pending[OP_RETRIEVE])
        INC(roots_deferred);
    maybe_close(st, t, s);
    session_maybe_free(st, s);
    return CBT_OK;
}

static cbt_status mp_handle(mp_state *st, cbt_tracer *t, const cbt_event *ev)
{
    switch (ev->type) {
    case CBT_EV_MP_REQUEST_START: return on_request_start(st, t, ev);
    case CBT_EV_MP_REQUEST_END: return on_request_end(st, t, ev);
    case CBT_EV_MP_LOOKUP_PREFETCH_START: return on_start(st, t, ev, OP_LOOKUP);
    case CBT_EV_MP_LOOKUP_PREFETCH_END: return on_end(st, t, ev, OP_LOOKUP);
    case CBT_EV_MP_STORE_SUBMITTED: return on_submitted(st, ev, OP_STORE);
    case CBT_EV_MP_STORE_START: return on_start(st, t, ev, OP_STORE);
    case CBT_EV_MP_STORE_END: return on_end(st, t, ev, OP_STORE);
    case CBT_EV_MP_RETRIEVE_SUBMITTED: return on_submitted(st, ev, OP_RETRIEVE);
    case CBT_EV_MP_RETRIEVE_START: return on_start(st, t, ev, OP_RETRIEVE);
    case CBT_EV_MP_RETRIEVE_END: return on_end(st, t, ev, OP_RETRIEVE);
    default: return CBT_ERR_UNKNOWN_EVENT;
    }
}

static cbt_status mp_on_event(void *ctx, cbt_tracer *t, const cbt_event *ev)
{
    mp_state *st = ctx;
    st->key = cbt_skey_make(ev->session, ev->session_len);
    cbt_status rc = mp_handle(st, t, ev);
    atomic_store_explicit(&st->c.sessions_live, st->sessions.count, memory_order_relaxed);
    return rc;
}

static void mp_on_shutdown(void *ctx, cbt_tracer *t, uint64_t now_ns)
{
    mp_state *st = ctx;
    for (uint32_t i = 0; i <= st->sessions.mask; i++) {
        mp_session *s = cbt_strtab_slot(&st->sessions, i);
        if (!s)
            continue;
        const cbt_strtab_key *key = cbt_strtab_key_of(&st->sessions, s);
        cbt_skey k = cbt_skey_make(key->s, key->len);
        for (int c = 0; c < s->n_children; c++) {
            cbt_span *sp = s->children[c].span;
            sp->flags |= CBT_SPANF_INCOMPLETE;
            cbt_registry_remove_k_(t, &k, k_op_logical[s->children[c].op], &sp->ctx);
            cbt_span_end(t, sp, now_ns);
            INC(incomplete_at_shutdown);
        }
        s->n_children = 0;
        if (s->root) {
            s->root->flags |= CBT_SPANF_INCOMPLETE;
            INC(incomplete_at_shutdown);
            close_root(st, t, s, &k, s->end_seen ? s->end_ts : now_ns);
        }
    }
    /* every session is gone now: forget them in one step */
    cbt_strtab_clear(&st->sessions);
    atomic_store_explicit(&st->c.sessions_live, 0, memory_order_relaxed);
}

static void mp_destroy(void *ctx)
{
    mp_state *st = ctx;
    cbt_strtab_free(&st->sessions);
    free(st);
}

/* cbt/mp.h's inline cbt_mp_subscriber_create() set out's version and size: at
 * most that many bytes are written (internal/abi.h). */
cbt_status cbt_mp_subscriber_create_into(uint32_t max_sessions, cbt_subscriber *out)
{
    if (!out)
        return CBT_ERR_INVAL;
    cbt_status abi = cbt_abi_out_check_(out);
    if (abi)
        return abi;
    mp_state *st = calloc(1, sizeof *st);
    if (!st)
        return CBT_ERR_NOMEM;
    cbt_status rc = cbt_strtab_init_sessions(&st->sessions, max_sessions, sizeof(mp_session));
    if (rc) {
        free(st);
        return rc;
    }
    cbt_subscriber sub; /* complete, then at most out->size bytes of it */
    cbt_subscriber_init(&sub, "mp", st, mp_on_event, mp_on_shutdown, mp_destroy);
    static const cbt_event_type wanted[] = {
        CBT_EV_MP_REQUEST_START,        CBT_EV_MP_REQUEST_END,       CBT_EV_MP_LOOKUP_PREFETCH_START,
        CBT_EV_MP_LOOKUP_PREFETCH_END,  CBT_EV_MP_STORE_SUBMITTED,   CBT_EV_MP_STORE_START,
        CBT_EV_MP_STORE_END,            CBT_EV_MP_RETRIEVE_SUBMITTED, CBT_EV_MP_RETRIEVE_START,
        CBT_EV_MP_RETRIEVE_END,
    };
    for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++)
        cbt_subscriber_want(&sub, wanted[i]);
    cbt_abi_out_(out, &sub, sizeof sub, CBT_SUBSCRIBER_VERSION);
    return CBT_OK;
}

cbt_status cbt_mp_stats_get(const cbt_subscriber *sub, cbt_mp_stats *caller)
{
    cbt_status abi = cbt_abi_out_check_(caller);
    if (abi)
        return abi;
    cbt_mp_stats full, *out = &full;
    memset(out, 0, sizeof *out);
    void *ctx = NULL;
    cbt_status rc = cbt_find_subscriber_ctx_(sub, mp_on_event, &ctx);
    if (rc)
        return rc;
    const mp_state *st = ctx;
#define R(f) atomic_load_explicit(&st->c.f, memory_order_relaxed)
    out->roots_opened = R(roots_opened);
    out->roots_lazy = R(roots_lazy);
    out->roots_closed = R(roots_closed);
    out->roots_deferred = R(roots_deferred);
    out->children_opened = R(children_opened);
    out->children_closed = R(children_closed);
    out->unmatched_end = R(unmatched_end);
    out->duplicate_request_end = R(duplicate_request_end);
    out->request_end_unknown = R(request_end_unknown);
    out->sessions_full = R(sessions_full);
    out->children_full = R(children_full);
    out->incomplete_at_shutdown = R(incomplete_at_shutdown);
    out->sessions_open = R(sessions_live);
#undef R
    cbt_abi_out_(caller, out, sizeof *out, CBT_MP_STATS_VERSION);
    return CBT_OK;
}
