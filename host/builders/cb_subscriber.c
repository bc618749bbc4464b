/* host/builders/cb_subscriber.c — owns the CacheBlend V3 server-side span builder
 * (cbt/cb.h): the "cb.request" root per session, its cb.* sub-spans, the
 * point events and the V3 close rule.
 *
 * Per session (a cbt_strtab entry keyed by the session id, created only by
 * CB_REQUEST_START):
 *   root              the open "cb.request" span, or NULL
 *   pending           CB_RETRIEVE_SUBMITTED minus CB_RETRIEVE_END seen
 *   end_seen, end_ts  CB_REQUEST_END arrived (and when): the deferred close
 *   children[]        open sub-spans with their op and pairing key
 * A session is freed when its root has closed and no child is open.
 *
 * Registry (logical names, so that other subscribers / kernel spans can nest
 * under the CB spans): the root under "cb.request", the newest open cb.lookup,
 * cb.sparse_prefetch and cb.retrieve under their own span names. The CB names
 * are used, not the MP ones ("request", "retrieve", "lookup_prefetch"), so a
 * session that also carries MP spans (the prefix probe reuses
 * mp.lookup_prefetch) keeps both sets of entries intact.
 *
 * Harvester thread only; the counters are atomics so other threads may read.
 */
#include <stdlib.h>
#include <string.h>

#include "cbt/blend_metrics.h"
#include "cbt/cb.h"
#include "cbt/context.h"
#include "internal/abi.h"
#include "internal/end_status.h"
#include "internal/tracer.h"

enum {
    OP_LOOKUP = 0,
    OP_FP_MATCH,
    OP_COORD_MATCH,
    OP_SPARSE_PREFETCH,
    OP_CLASSIFY,
    OP_RETRIEVE,
    OP_SCATTER,
    OP_L2_LOAD,
    OP_COUNT_
};

static const cbt_name k_op_span[OP_COUNT_] = {
    CBT_N_CB_LOOKUP,  CBT_N_CB_FINGERPRINT_MATCH, CBT_N_CB_COORDINATOR_MATCH,
    CBT_N_CB_SPARSE_PREFETCH, CBT_N_CB_CLASSIFY,   CBT_N_CB_RETRIEVE,
    CBT_N_CB_SCATTER, CBT_N_CB_L2_LOAD,
};
/* registry name of an open span of this op (0: not registered) */
static const cbt_name k_op_logical[OP_COUNT_] = {
    CBT_N_CB_LOOKUP, 0, 0, CBT_N_CB_SPARSE_PREFETCH, 0, CBT_N_CB_RETRIEVE, 0, 0,
};
/* where a span of this op nests: the newest open span of the first op listed
 * that has one, else the root (-1 ends a list) */
static const int8_t k_op_parents[OP_COUNT_][2] = {
    [OP_LOOKUP] = {-1, -1},
    [OP_FP_MATCH] = {OP_LOOKUP, -1},
    [OP_COORD_MATCH] = {OP_LOOKUP, -1},
    [OP_SPARSE_PREFETCH] = {OP_LOOKUP, -1},
    [OP_CLASSIFY] = {OP_LOOKUP, -1},
    [OP_RETRIEVE] = {-1, -1},
    [OP_SCATTER] = {OP_RETRIEVE, -1},
    [OP_L2_LOAD] = {OP_SPARSE_PREFETCH, OP_LOOKUP},
};

typedef struct cb_child {
    cbt_span *span;
    uint64_t pair;
    uint64_t seq; /* open order, for first-in first-out pairing */
    uint8_t op;
} cb_child;

typedef struct cb_session {
    bool open;        /* CB_REQUEST_START seen and the request not closed yet */
    bool sampled_out; /* its context said not sampled: no spans, events ignored */
    cbt_span *root;   /* the cb.request span; NULL when elided (remote parent) */
    cbt_span_ctx anchor; /* where children without an open parent op nest */
    cbt_span_ctx anchor_reg; /* what register_anchor put under "cb.request" */
    bool anchor_registered;
    uint32_t op_dropped_out; /* bit per op: a sampled-out START of it is still open */
    cbt_span_ctx op_out_ctx[OP_COUNT_]; /* its not-sampled context, registered under the
                                           op's logical name so its kernels are dropped */
    int64_t last_fp_hits, last_storage_hits, last_stale; /* from sub-span ENDs, for metrics */
    uint32_t pending; /* GPU ops: CB_RETRIEVE_SUBMITTED minus CB_RETRIEVE_END */
    uint32_t dropped_starts[OP_COUNT_];
    bool end_seen;
    uint64_t end_ts;
    uint8_t n_children;
    cb_child children[CBT_CB_CHILDREN_MAX];
} cb_session;

#define CB_RECENT_ENDED 1024

typedef struct cb_state {
    cbt_strtab sessions;
    cbt_skey key; /* the session of the event being handled, hashed once */
    uint64_t seq;
    uint64_t recent[CB_RECENT_ENDED]; /* key hashes of recently freed sessions */
    uint32_t recent_next;
    struct {
        _Atomic uint64_t roots_opened, roots_closed, roots_deferred;
        _Atomic uint64_t children_opened, children_closed, point_events, unmatched_end, no_root;
        _Atomic uint64_t duplicate_request_end, request_end_unknown, sessions_full;
        _Atomic uint64_t children_full, incomplete_at_shutdown;
        _Atomic uint64_t sessions_live, roots_remote, sampled_out;
    } c;
} cb_state;

#define INC(field) atomic_fetch_add_explicit(&st->c.field, 1, memory_order_relaxed)

static cb_session *session_find(cb_state *st, const cbt_event *ev)
{
    return cbt_strtab_find_h(&st->sessions, ev->session, ev->session_len, 0,
                             cbt_strtab_mix(st->key.base, 0));
}

static cb_session *session_create(cb_state *st, const cbt_event *ev)
{
    cb_session *s = cbt_strtab_upsert_h(&st->sessions, ev->session, ev->session_len, 0,
                                        cbt_strtab_mix(st->key.base, 0), NULL);
    if (!s)
        INC(sessions_full);
    return s;
}

static void remember_ended(cb_state *st, const cb_session *s)
{
    st->recent[st->recent_next] = cbt_strtab_key_of(&st->sessions, s)->hash;
    st->recent_next = (st->recent_next + 1) % CB_RECENT_ENDED;
}

static bool ended_recently(const cb_state *st)
{
    uint64_t h = cbt_strtab_mix(st->key.base, 0);
    for (uint32_t i = 0; i < CB_RECENT_ENDED; i++)
        if (st->recent[i] == h)
            return true;
    return false;
}

static void session_maybe_free(cb_state *st, cb_session *s)
{
    /* a sampled-out operation still open keeps the session (and its
     * registry marker) until its END, as an open child does */
    if (s->end_seen && !s->open && s->n_children == 0 && s->pending == 0 &&
        s->op_dropped_out == 0) {
        remember_ended(st, s);
        cbt_strtab_remove(&st->sessions, s);
    }
}

/* session_id and request_id (both the session id) on every span */
static void set_ids(cbt_span *sp, const cbt_event *ev)
{
    cbt_span_set_str(sp, CBT_N_SESSION_ID, ev->session, ev->session_len);
    cbt_span_set_str(sp, CBT_N_REQUEST_ID, ev->session, ev->session_len);
}

static void set_meta(cbt_span *sp, const cbt_meta *m)
{
    switch (m->type) {
    case CBT_META_I64: cbt_span_set_i64(sp, m->key, m->v.i64); break;
    case CBT_META_F64: cbt_span_set_f64(sp, m->key, m->v.f64); break;
    case CBT_META_BOOL: cbt_span_set_bool(sp, m->key, m->v.b); break;
    case CBT_META_STR: cbt_span_set_str(sp, m->key, m->v.str, m->len); break;
    default: break;
    }
}

/* The seed §3 root attributes that an event may carry: copied when present. */
static void copy_root_attrs(cbt_span *root, const cbt_event *ev)
{
    static const cbt_name keys[] = {
        CBT_N_PREFIX_HIT_TOKENS,  CBT_N_NON_PREFIX_HIT_TOKENS, CBT_N_PREFIX_HITS,
        CBT_N_PREFIX_COVERAGE_TOKENS, CBT_N_FINGERPRINT_HITS, CBT_N_STORAGE_HITS,
        CBT_N_STALE_CHUNKS,
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const cbt_meta *m = cbt_event_find(ev, keys[i]);
        if (m)
            set_meta(root, m);
    }
}

/* CB_LOOKUP_END: hit_tokens counts both reuse paths (prefix + non-prefix; the
 * ranges are disjoint) when either component is given, else the event's
 * hit_tokens; hit_rate = hit_tokens / requested_tokens, 0.0 when requested
 * is 0. */
static int64_t hit_tokens_of(const cbt_event *ev)
{
    const cbt_meta *ph = cbt_event_find(ev, CBT_N_PREFIX_HIT_TOKENS);
    const cbt_meta *nph = cbt_event_find(ev, CBT_N_NON_PREFIX_HIT_TOKENS);
    return (ph || nph) ? cbt_event_get_i64(ev, CBT_N_PREFIX_HIT_TOKENS, 0) +
                             cbt_event_get_i64(ev, CBT_N_NON_PREFIX_HIT_TOKENS, 0)
                       : cbt_event_get_i64(ev, CBT_N_HIT_TOKENS, 0);
}

static void set_hit_attrs(cbt_span *root, const cbt_event *ev)
{
    int64_t hit = hit_tokens_of(ev);
    int64_t req = cbt_event_get_i64(ev, CBT_N_REQUESTED_TOKENS, 0);
    cbt_span_set_i64(root, CBT_N_HIT_TOKENS, hit);
    cbt_span_set_i64(root, CBT_N_REQUESTED_TOKENS, req);
    cbt_span_set_f64(root, CBT_N_HIT_RATE, req != 0 ? (double)hit / (double)req : 0.0);
    copy_root_attrs(root, ev);
}

static bool has_span_id(const cbt_span_ctx *c) { return !cbt_bytes_zero_(c->span_id, 8); }

/* The event's context, when it names a trace; a trace block whose parent is
 * all zero (cbt_event_trace_set(ev, NULL, id)) carries no context at all. */
static const cbt_span_ctx *ctx_of(const cbt_event *ev)
{
    const cbt_event_trace *tr = cbt_event_trace_of(ev);
    return tr && !cbt_bytes_zero_(tr->parent.trace_id, 16) ? &tr->parent : NULL;
}

/* `c` made a valid registry entry: a trace id without a span id gets a
 * marker span id (never exported; the entry only has to be valid). */
static cbt_span_ctx with_marker_id(cbt_span_ctx c)
{
    if (!has_span_id(&c))
        memcpy(c.span_id, c.trace_id + 8, 8);
    if (!has_span_id(&c))
        c.span_id[7] = 1;
    return c;
}

/* Forget the not-sampled markers of sampled-out operations still open. */
static void clear_op_markers(cbt_tracer *t, cb_session *s, const cbt_skey *k)
{
    for (int op = 0; op < OP_COUNT_; op++)
        if ((s->op_dropped_out >> op) & 1u && k_op_logical[op])
            cbt_registry_remove_k_(t, k, k_op_logical[op], &s->op_out_ctx[op]);
    s->op_dropped_out = 0;
}

/* Register the context children and kernel spans of the session nest under,
 * for a root that is elided or sampled out: kernel_spans.c finds it under
 * "cb.request" (a sampled-out one by its clear flag, and drops the kernel
 * span). A trace id without a span id gets a marker span id: the entry only
 * has to be valid, it is never exported. */
static void register_anchor(cb_state *st, cbt_tracer *t, cb_session *s)
{
    s->anchor_reg = with_marker_id(s->anchor);
    s->anchor_registered = true;
    cbt_registry_put_k_(t, &st->key, CBT_N_CB_REQUEST, &s->anchor_reg);
}

/* CB_REQUEST_START. The context it carries (cbt/event.h) decides the root:
 *   not sampled            no spans for this request (its events are ignored);
 *   a remote parent        the root is elided: the trace already has its
 *                          cb.request (the scheduler's), so the server's
 *                          spans nest under the remote span instead;
 *   a trace id only        a cb.request root in that trace (Option B);
 *   none                   a cb.request root whose trace id is derived from
 *                          the request id, so it still joins the request's
 *                          trace (Option B without any help from the caller). */
static void open_root(cb_state *st, cbt_tracer *t, cb_session *s, const cbt_event *ev)
{
    const cbt_span_ctx *ctx = ctx_of(ev);
    s->root = NULL;
    s->sampled_out = false;
    s->anchor_registered = false;
    clear_op_markers(t, s, &st->key);
    memset(&s->anchor, 0, sizeof s->anchor);
    if (ctx && !(ctx->trace_flags & 1u)) {
        s->open = true;
        s->sampled_out = true;
        s->anchor = *ctx;
        register_anchor(st, t, s);
        INC(sampled_out);
        return;
    }
    if (ctx && has_span_id(ctx)) {
        s->open = true;
        s->anchor = *ctx;
        register_anchor(st, t, s);
        INC(roots_remote);
        return;
    }
    s->root = cbt_span_start_for_event(t, CBT_N_CB_REQUEST, CBT_SPAN_KIND_SERVER, NULL, ev);
    if (!s->root)
        return;
    if (!ctx) {
        cbt_trace_id_from_request(ev->session, ev->session_len, s->root->ctx.trace_id);
        s->root->ctx.trace_flags = 1;
    }
    s->open = true;
    s->anchor = s->root->ctx;
    set_ids(s->root, ev);
    cbt_span_set_from_event(s->root, ev);
    cbt_registry_put_k_(t, &st->key, CBT_N_CB_REQUEST, &s->root->ctx);
    INC(roots_opened);
}

static void close_root(cb_state *st, cbt_tracer *t, cb_session *s, const cbt_skey *k,
                       uint64_t end_ns)
{
    if (!s->open)
        return;
    s->open = false;
    if (s->anchor_registered) {
        cbt_registry_remove_k_(t, k, CBT_N_CB_REQUEST, &s->anchor_reg);
        s->anchor_registered = false;
    }
    if (!s->root)
        return; /* elided or sampled out: nothing to end */
    cbt_registry_remove_k_(t, k, CBT_N_CB_REQUEST, &s->root->ctx);
    cbt_span_end(t, s->root, end_ns);
    s->root = NULL;
    INC(roots_closed);
}

/* The V3 close rule: CB_REQUEST_END has arrived and no GPU op is pending; the
 * root is stamped with the CB_REQUEST_END time. */
static void maybe_close(cb_state *st, cbt_tracer *t, cb_session *s)
{
    if (s->end_seen && s->pending == 0)
        close_root(st, t, s, &st->key, s->end_ts);
}

static int newest_of(const cb_session *s, int op)
{
    int newest = -1;
    for (int i = 0; i < s->n_children; i++)
        if (s->children[i].op == op &&
            (newest < 0 || s->children[i].seq > s->children[newest].seq))
            newest = i;
    return newest;
}

static const cbt_span_ctx *parent_of(const cb_session *s, int op)
{
    for (int i = 0; i < 2 && k_op_parents[op][i] >= 0; i++) {
        int p = newest_of(s, k_op_parents[op][i]);
        if (p >= 0)
            return &s->children[p].span->ctx;
    }
    return &s->anchor;
}

static cbt_status on_request_start(cb_state *st, cbt_tracer *t, const cbt_event *ev)
{
    cb_session *s = session_create(st, ev);
    if (!s)
        return CBT_ERR_FULL;
    if (s->end_seen && !s->open) {
        /* the id is reused by a new request after the old one ended */
        s->end_seen = false;
        s->pending = 0;
        memset(s->dropped_starts, 0, sizeof s->dropped_starts);
    }
    if (!s->open)
        open_root(st, t, s, ev);
    if (!s->open) {
        if (!s->end_seen && s->n_children == 0 && s->pending == 0)
            cbt_strtab_remove(&st->sessions, s); /* no span: hold no state */
        return CBT_ERR_FULL;
    }
    return CBT_OK;
}

static cbt_status on_submitted(cb_state *st, const cbt_event *ev)
{
    cb_session *s = session_find(st, ev);
    if (!s || !s->open) {
        INC(no_root);
        return CBT_OK;
    }
    s->pending++;
    return CBT_OK;
}

static cbt_status on_start(cb_state *st, cbt_tracer *t, const cbt_event *ev, int op)
{
    cb_session *s = session_find(st, ev);
    if (!s || !s->open) {
        INC(no_root);
        return CBT_OK;
    }
    if (s->sampled_out) {
        INC(sampled_out);
        return CBT_OK;
    }
    const cbt_span_ctx *ctx = ctx_of(ev);
    bool parent_out = k_op_parents[op][0] >= 0 &&
                      (s->op_dropped_out >> k_op_parents[op][0]) & 1u &&
                      newest_of(s, k_op_parents[op][0]) < 0;
    if ((ctx && !(ctx->trace_flags & 1u)) || parent_out) {
        /* this operation's caller sampled it out (or its parent operation
         * was): no span, its sub-operations neither, and its END is
         * swallowed like that of a dropped START. Its kernel launches find
         * the not-sampled context under the op's logical name and are
         * dropped too (kernel_spans.c). */
        INC(sampled_out);
        s->dropped_starts[op]++;
        s->op_dropped_out |= 1u << op;
        cbt_span_ctx out = ctx && !(ctx->trace_flags & 1u) ? *ctx
                                                           : s->op_out_ctx[k_op_parents[op][0]];
        out.trace_flags &= (uint8_t)~1u;
        out = with_marker_id(out);
        s->op_out_ctx[op] = out;
        if (k_op_logical[op])
            cbt_registry_put_k_(t, &st->key, k_op_logical[op], &out);
        return CBT_OK;
    }
    if (s->n_children >= CBT_CB_CHILDREN_MAX) {
        INC(children_full);
        s->dropped_starts[op]++;
        return CBT_ERR_FULL;
    }
    /* an RPC's server span (cb.lookup, cb.retrieve) with the caller's
     * context is a remote child: SERVER kind */
    cbt_span_kind kind = (ctx && has_span_id(ctx)) ? CBT_SPAN_KIND_SERVER : CBT_SPAN_KIND_INTERNAL;
    cbt_span *c = cbt_span_start_for_event(t, k_op_span[op], kind, parent_of(s, op), ev);
    if (!c) {
        s->dropped_starts[op]++;
        return CBT_ERR_FULL;
    }
    set_ids(c, ev);
    cbt_span_set_from_event(c, ev);
    cb_child *ch = &s->children[s->n_children++];
    ch->span = c;
    ch->pair = ev->pair;
    ch->op = (uint8_t)op;
    ch->seq = ++st->seq;
    if (k_op_logical[op])
        cbt_registry_put_k_(t, &st->key, k_op_logical[op], &c->ctx);
    INC(children_opened);
    return CBT_OK;
}

/* cb.scatter: re-RoPE is folded in; the kernel-side names (n_shifted,
 * n_prefix) are mirrored under the seed's *_tokens names, and scatter_ms is
 * the span's duration. */
static void finish_scatter(cbt_span *sp, const cbt_event *ev)
{
    if (!cbt_span_attr(sp, CBT_N_N_SHIFTED_TOKENS) && cbt_event_find(ev, CBT_N_N_SHIFTED))
        cbt_span_set_i64(sp, CBT_N_N_SHIFTED_TOKENS, cbt_event_get_i64(ev, CBT_N_N_SHIFTED, 0));
    if (!cbt_span_attr(sp, CBT_N_N_PREFIX_TOKENS) && cbt_event_find(ev, CBT_N_N_PREFIX))
        cbt_span_set_i64(sp, CBT_N_N_PREFIX_TOKENS, cbt_event_get_i64(ev, CBT_N_N_PREFIX, 0));
    uint64_t dur = ev->ts > sp->start_ns ? ev->ts - sp->start_ns : 0;
    cbt_span_set_f64(sp, CBT_N_SCATTER_MS, (double)dur / 1e6);
}

static const int8_t k_op_hist[OP_COUNT_] = {
    [OP_LOOKUP] = CBT_BH_LOOKUP,
    [OP_FP_MATCH] = CBT_BH_FINGERPRINT_MATCH,
    [OP_COORD_MATCH] = CBT_BH_COORDINATOR_MATCH,
    [OP_SPARSE_PREFETCH] = CBT_BH_SPARSE_PREFETCH,
    [OP_CLASSIFY] = -1,
    [OP_RETRIEVE] = CBT_BH_RETRIEVE,
    [OP_SCATTER] = CBT_BH_SCATTER,
    [OP_L2_LOAD] = CBT_BH_L2_LOAD,
};

static uint64_t nonneg(int64_t v) { return v > 0 ? (uint64_t)v : 0; }

/* An integer the operation reported: the span's attribute when there is a
 * span (it holds both events' values and the mirrored names), else the END
 * event's value; 0 when absent. */
static int64_t val_of(const cbt_span *sp, const cbt_event *ev, cbt_name key)
{
    if (sp) {
        const cbt_attr *a = cbt_span_attr(sp, key);
        return a && a->type == CBT_META_I64 ? a->v.i64 : 0;
    }
    return cbt_event_get_i64(ev, key, 0);
}

/* lmcache_blend.* (cbt/blend_metrics.h). Counters are always on: every
 * operation END feeds them, whether or not it has a span (sampled out, or its
 * START dropped), from the span's attributes or else the END's values. A span
 * also feeds its duration histogram, as that bucket's exemplar. The lookup's
 * fingerprint/storage/stale counts are taken from the lookup END when it
 * carries them, else from the newest sub-operation END that did. */
static void feed_metrics(cbt_tracer *t, cb_session *s, int op, const cbt_span *sp,
                         const cbt_event *ev)
{
    cbt_blend_metrics *m = t->blend;
    if (!m)
        return;
    if (sp && k_op_hist[op] >= 0)
        cbt_blend_observe(m, (cbt_blend_hist)k_op_hist[op],
                          (double)(sp->end_ns - sp->start_ns) / 1e6, sp);
    s->last_fp_hits = cbt_event_get_i64(ev, CBT_N_FINGERPRINT_HITS, s->last_fp_hits);
    s->last_storage_hits = cbt_event_get_i64(ev, CBT_N_STORAGE_HITS, s->last_storage_hits);
    s->last_stale = cbt_event_get_i64(ev, CBT_N_STALE_CHUNKS, s->last_stale);
    switch (op) {
    case OP_LOOKUP:
        cbt_blend_count(m, CBT_BC_LOOKUP_REQUESTS, 1);
        cbt_blend_count(m, CBT_BC_LOOKUP_REQUESTED_TOKENS,
                        nonneg(cbt_event_get_i64(ev, CBT_N_REQUESTED_TOKENS, 0)));
        cbt_blend_count(m, CBT_BC_LOOKUP_HIT_TOKENS, nonneg(hit_tokens_of(ev)));
        cbt_blend_count(m, CBT_BC_LOOKUP_PREFIX_HIT_TOKENS,
                        nonneg(cbt_event_get_i64(ev, CBT_N_PREFIX_HIT_TOKENS, 0)));
        cbt_blend_count(m, CBT_BC_LOOKUP_NON_PREFIX_HIT_TOKENS,
                        nonneg(cbt_event_get_i64(ev, CBT_N_NON_PREFIX_HIT_TOKENS, 0)));
        cbt_blend_count(m, CBT_BC_LOOKUP_FINGERPRINT_HITS, nonneg(s->last_fp_hits));
        cbt_blend_count(m, CBT_BC_LOOKUP_STORAGE_HITS, nonneg(s->last_storage_hits));
        cbt_blend_count(m, CBT_BC_LOOKUP_STALE_CHUNKS, nonneg(s->last_stale));
        s->last_fp_hits = s->last_storage_hits = s->last_stale = 0;
        break;
    case OP_RETRIEVE:
        cbt_blend_count(m, CBT_BC_RETRIEVE_REQUESTS, 1);
        if (sp ? sp->status == CBT_SPAN_STATUS_ERROR : cbt_end_failed_(ev))
            cbt_blend_count(m, CBT_BC_RETRIEVE_FAILURES, 1);
        break;
    case OP_SCATTER: {
        int64_t shifted = val_of(sp, ev, CBT_N_N_SHIFTED_TOKENS);
        if (!sp && !cbt_event_find(ev, CBT_N_N_SHIFTED_TOKENS))
            shifted = cbt_event_get_i64(ev, CBT_N_N_SHIFTED, 0);
        cbt_blend_count(m, CBT_BC_SCATTER_TOKENS, nonneg(val_of(sp, ev, CBT_N_SCATTERED_TOKENS)));
        cbt_blend_count(m, CBT_BC_SCATTER_SLOT_WRITES, nonneg(val_of(sp, ev, CBT_N_SLOT_WRITES)));
        cbt_blend_count(m, CBT_BC_SHIFTED_TOKENS, nonneg(shifted));
        break;
    }
    case OP_L2_LOAD:
        cbt_blend_count(m, CBT_BC_L2_LOAD_CHUNKS, nonneg(val_of(sp, ev, CBT_N_CHUNKS)));
        cbt_blend_count(m, CBT_BC_L2_LOAD_BYTES, nonneg(val_of(sp, ev, CBT_N_BYTES)));
        break;
    default:
        break;
    }
}

static cbt_status on_end(cb_state *st, cbt_tracer *t, const cbt_event *ev, int op)
{
    cb_session *s = session_find(st, ev);
    if (!s) {
        INC(no_root);
        return CBT_OK;
    }
    if (s->sampled_out) {
        /* no spans; the GPU-op count still decides when the request ends */
        INC(sampled_out);
        feed_metrics(t, s, op, NULL, ev);
        if (op == OP_RETRIEVE && s->pending > 0)
            s->pending--;
        maybe_close(st, t, s);
        session_maybe_free(st, s);
        return CBT_OK;
    }
    int found = -1;
    for (int i = 0; i < s->n_children; i++) {
        const cb_child *ch = &s->children[i];
        if (ch->op == op && ch->pair == ev->pair &&
            (found < 0 || ch->seq < s->children[found].seq))
            found = i;
    }
    if (found < 0) {
        if (s->dropped_starts[op] > 0) {
            /* its START was dropped (counted then): the op still finished */
            if (--s->dropped_starts[op] == 0 && (s->op_dropped_out >> op) & 1u) {
                s->op_dropped_out &= ~(1u << op);
                if (k_op_logical[op])
                    cbt_registry_remove_k_(t, &st->key, k_op_logical[op], &s->op_out_ctx[op]);
            }
            feed_metrics(t, s, op, NULL, ev);
            if (op == OP_RETRIEVE && s->pending > 0)
                s->pending--;
            maybe_close(st, t, s);
            session_maybe_free(st, s);
            return CBT_OK;
        }
        INC(unmatched_end);
        if (op == OP_RETRIEVE && s->pending > 0) {
            /* no START, but CB_RETRIEVE_SUBMITTED was seen: the op finished
             * (LMCache decrements here too), so it counts and can close the
             * deferred root */
            feed_metrics(t, s, op, NULL, ev);
            s->pending--;
            maybe_close(st, t, s);
            session_maybe_free(st, s);
        }
        return CBT_ERR_UNMATCHED;
    }
    cb_child ch = s->children[found];
    s->children[found] = s->children[--s->n_children];

    cbt_span_set_from_event(ch.span, ev);
    if (op == OP_SCATTER)
        finish_scatter(ch.span, ev);
    cbt_end_status_apply_(ch.span, ev);
    /* request-level results: on cb.request, or on the lookup span itself
     * when the root is elided (the scheduler's root is in another process) */
    if (op == OP_LOOKUP)
        set_hit_attrs(s->root ? s->root : ch.span, ev);
    else if (op == OP_CLASSIFY) {
        int lk = newest_of(s, OP_LOOKUP);
        cbt_span *target = s->root ? s->root : lk >= 0 ? s->children[lk].span : NULL;
        if (target)
            copy_root_attrs(target, ev);
    }
    ch.span->end_ns = ev->ts > ch.span->start_ns ? ev->ts : ch.span->start_ns;
    feed_metrics(t, s, op, ch.span, ev);
    cbt_span_ctx ctx = ch.span->ctx;
    cbt_span_end(t, ch.span, ev->ts);
    INC(children_closed);

    if (k_op_logical[op]) {
        /* the registry names the newest open span of this op, if any remains */
        int newest = newest_of(s, op);
        if (newest >= 0)
            cbt_registry_put_k_(t, &st->key, k_op_logical[op], &s->children[newest].span->ctx);
        else
            cbt_registry_remove_k_(t, &st->key, k_op_logical[op], &ctx);
    }

    if (op == OP_RETRIEVE && s->pending > 0)
        s->pending--;
    maybe_close(st, t, s);
    session_maybe_free(st, s);
    return CBT_OK;
}

/* Point events (fingerprints registered, chunks evicted, retrieve no-op): cbt
 * spans have no event list, so each becomes a zero-duration child span of the
 * open cb.request carrying the event's metadata. A session-less one (eviction
 * is not per request) becomes a zero-duration root span of its own. */
static cbt_status on_point(cb_state *st, cbt_tracer *t, const cbt_event *ev, cbt_name name)
{
    const cbt_span_ctx *parent = NULL;
    cbt_blend_metrics *m = t->blend;
    if (name == CBT_N_CB_CHUNKS_EVICTED)
        cbt_blend_count(m, CBT_BC_CHUNKS_EVICTED, nonneg(cbt_event_get_i64(ev, CBT_N_COUNT, 1)));
    else if (name == CBT_N_CB_FINGERPRINTS_REGISTERED)
        cbt_blend_count(m, CBT_BC_FINGERPRINTS_REGISTERED,
                        nonneg(cbt_event_get_i64(ev, CBT_N_COUNT, 1)));
    else if (name == CBT_N_CB_RETRIEVE_NOOP)
        cbt_blend_count(m, CBT_BC_RETRIEVE_NOOPS, 1);
    if (ev->session_len > 0) {
        cb_session *s = session_find(st, ev);
        if (!s || !s->open) {
            INC(no_root);
            return CBT_OK;
        }
        if (s->sampled_out) {
            INC(sampled_out);
            return CBT_OK;
        }
        parent = &s->anchor;
    }
    cbt_span *sp = cbt_span_start(t, name, CBT_SPAN_KIND_INTERNAL, parent, ev->ts);
    if (!sp)
        return CBT_ERR_FULL;
    if (ev->session_len > 0)
        set_ids(sp, ev);
    cbt_span_set_from_event(sp, ev);
    cbt_span_end(t, sp, ev->ts);
    INC(point_events);
    return CBT_OK;
}

static cbt_status on_request_end(cb_state *st, cbt_tracer *t, const cbt_event *ev)
{
    cb_session *s = session_find(st, ev);
    if (!s) {
        if (ended_recently(st)) {
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
    if (s->root)
        cbt_span_set_from_event(s->root, ev);
    if (s->pending)
        INC(roots_deferred);
    maybe_close(st, t, s);
    session_maybe_free(st, s);
    return CBT_OK;
}

static cbt_status cb_handle(cb_state *st, cbt_tracer *t, const cbt_event *ev)
{
    switch (ev->type) {
    case CBT_EV_CB_REQUEST_START: return on_request_start(st, t, ev);
    case CBT_EV_CB_REQUEST_END: return on_request_end(st, t, ev);
    case CBT_EV_CB_LOOKUP_START: return on_start(st, t, ev, OP_LOOKUP);
    case CBT_EV_CB_LOOKUP_END: return on_end(st, t, ev, OP_LOOKUP);
    case CBT_EV_CB_FINGERPRINT_MATCH_START: return on_start(st, t, ev, OP_FP_MATCH);
    case CBT_EV_CB_FINGERPRINT_MATCH_END: return on_end(st, t, ev, OP_FP_MATCH);
    case CBT_EV_CB_COORDINATOR_MATCH_START: return on_start(st, t, ev, OP_COORD_MATCH);
    case CBT_EV_CB_COORDINATOR_MATCH_END: return on_end(st, t, ev, OP_COORD_MATCH);
    case CBT_EV_CB_SPARSE_PREFETCH_START: return on_start(st, t, ev, OP_SPARSE_PREFETCH);
    case CBT_EV_CB_SPARSE_PREFETCH_END: return on_end(st, t, ev, OP_SPARSE_PREFETCH);
    case CBT_EV_CB_CLASSIFY_START: return on_start(st, t, ev, OP_CLASSIFY);
    case CBT_EV_CB_CLASSIFY_END: return on_end(st, t, ev, OP_CLASSIFY);
    case CBT_EV_CB_RETRIEVE_SUBMITTED: return on_submitted(st, ev);
    case CBT_EV_CB_RETRIEVE_START: return on_start(st, t, ev, OP_RETRIEVE);
    case CBT_EV_CB_RETRIEVE_END: return on_end(st, t, ev, OP_RETRIEVE);
    case CBT_EV_CB_SCATTER_START: return on_start(st, t, ev, OP_SCATTER);
    case CBT_EV_CB_SCATTER_END: return on_end(st, t, ev, OP_SCATTER);
    case CBT_EV_L2_LOAD_TASK_SUBMITTED: return on_start(st, t, ev, OP_L2_LOAD);
    case CBT_EV_L2_LOAD_TASK_COMPLETED: return on_end(st, t, ev, OP_L2_LOAD);
    case CBT_EV_CB_RETRIEVE_NOOP: return on_point(st, t, ev, CBT_N_CB_RETRIEVE_NOOP);
    case CBT_EV_CB_FINGERPRINTS_REGISTERED:
        return on_point(st, t, ev, CBT_N_CB_FINGERPRINTS_REGISTERED);
    case CBT_EV_CB_CHUNKS_EVICTED: return on_point(st, t, ev, CBT_N_CB_CHUNKS_EVICTED);
    default: return CBT_ERR_UNKNOWN_EVENT;
    }
}

static cbt_status cb_on_event(void *ctx, cbt_tracer *t, const cbt_event *ev)
{
    cb_state *st = ctx;
    st->key = cbt_skey_make(ev->session, ev->session_len);
    cbt_status rc = cb_handle(st, t, ev);
    atomic_store_explicit(&st->c.sessions_live, st->sessions.count, memory_order_relaxed);
    return rc;
}

static void cb_on_shutdown(void *ctx, cbt_tracer *t, uint64_t now_ns)
{
    cb_state *st = ctx;
    for (uint32_t i = 0; i <= st->sessions.mask; i++) {
        cb_session *s = cbt_strtab_slot(&st->sessions, i);
        if (!s)
            continue;
        const cbt_strtab_key *key = cbt_strtab_key_of(&st->sessions, s);
        cbt_skey k = cbt_skey_make(key->s, key->len);
        /* newest first, so a child ends before the span it nests under */
        while (s->n_children > 0) {
            int c = 0;
            for (int j = 1; j < s->n_children; j++)
                if (s->children[j].seq > s->children[c].seq)
                    c = j;
            cb_child ch = s->children[c];
            s->children[c] = s->children[--s->n_children];
            ch.span->flags |= CBT_SPANF_INCOMPLETE;
            if (k_op_logical[ch.op])
                cbt_registry_remove_k_(t, &k, k_op_logical[ch.op], &ch.span->ctx);
            cbt_span_end(t, ch.span, now_ns);
            INC(incomplete_at_shutdown);
        }
        if (s->root) {
            s->root->flags |= CBT_SPANF_INCOMPLETE;
            INC(incomplete_at_shutdown);
        }
        clear_op_markers(t, s, &k);
        close_root(st, t, s, &k, s->end_seen ? s->end_ts : now_ns); /* also unregisters an anchor */
    }
    /* every session is gone now: forget them in one step */
    cbt_strtab_clear(&st->sessions);
    atomic_store_explicit(&st->c.sessions_live, 0, memory_order_relaxed);
}

static void cb_destroy(void *ctx)
{
    cb_state *st = ctx;
    cbt_strtab_free(&st->sessions);
    free(st);
}

/* cbt/cb.h's inline cbt_cb_subscriber_create() set out's version and size: at
 * most that many bytes are written (internal/abi.h). */
cbt_status cbt_cb_subscriber_create_into(uint32_t max_sessions, cbt_subscriber *out)
{
    if (!out)
        return CBT_ERR_INVAL;
    cbt_status abi = cbt_abi_out_check_(out);
    if (abi)
        return abi;
    cb_state *st = calloc(1, sizeof *st);
    if (!st)
        return CBT_ERR_NOMEM;
    cbt_status rc = cbt_strtab_init_sessions(&st->sessions, max_sessions, sizeof(cb_session));
    if (rc) {
        free(st);
        return rc;
    }
    cbt_subscriber sub; /* complete, then at most out->size bytes of it */
    cbt_subscriber_init(&sub, "cb", st, cb_on_event, cb_on_shutdown, cb_destroy);
    static const cbt_event_type wanted[] = {
        CBT_EV_CB_REQUEST_START,           CBT_EV_CB_REQUEST_END,
        CBT_EV_CB_LOOKUP_START,            CBT_EV_CB_LOOKUP_END,
        CBT_EV_CB_FINGERPRINT_MATCH_START, CBT_EV_CB_FINGERPRINT_MATCH_END,
        CBT_EV_CB_COORDINATOR_MATCH_START, CBT_EV_CB_COORDINATOR_MATCH_END,
        CBT_EV_CB_SPARSE_PREFETCH_START,   CBT_EV_CB_SPARSE_PREFETCH_END,
        CBT_EV_CB_CLASSIFY_START,          CBT_EV_CB_CLASSIFY_END,
        CBT_EV_CB_RETRIEVE_SUBMITTED,      CBT_EV_CB_RETRIEVE_START,
        CBT_EV_CB_RETRIEVE_END,            CBT_EV_CB_SCATTER_START,
        CBT_EV_CB_SCATTER_END,             CBT_EV_CB_RETRIEVE_NOOP,
        CBT_EV_CB_FINGERPRINTS_REGISTERED, CBT_EV_CB_CHUNKS_EVICTED,
        CBT_EV_L2_LOAD_TASK_SUBMITTED,     CBT_EV_L2_LOAD_TASK_COMPLETED,
    };
    for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++)
        cbt_subscriber_want(&sub, wanted[i]);
    cbt_abi_out_(out, &sub, sizeof sub, CBT_SUBSCRIBER_VERSION);
    return CBT_OK;
}

cbt_status cbt_cb_stats_get(const cbt_subscriber *sub, cbt_cb_stats *caller)
{
    cbt_status abi = cbt_abi_out_check_(caller);
    if (abi)
        return abi;
    cbt_cb_stats full, *out = &full;
    memset(out, 0, sizeof *out);
    void *ctx = NULL;
    cbt_status rc = cbt_find_subscriber_ctx_(sub, cb_on_event, &ctx);
    if (rc)
        return rc;
    const cb_state *st = ctx;
#define R(f) atomic_load_explicit(&st->c.f, memory_order_relaxed)
    out->roots_opened = R(roots_opened);
    out->roots_closed = R(roots_closed);
    out->roots_deferred = R(roots_deferred);
    out->children_opened = R(children_opened);
    out->children_closed = R(children_closed);
    out->point_events = R(point_events);
    out->unmatched_end = R(unmatched_end);
    out->no_root = R(no_root);
    out->duplicate_request_end = R(duplicate_request_end);
    out->request_end_unknown = R(request_end_unknown);
    out->sessions_full = R(sessions_full);
    out->children_full = R(children_full);
    out->incomplete_at_shutdown = R(incomplete_at_shutdown);
    out->sessions_open = R(sessions_live);
    out->roots_remote = R(roots_remote);
    out->sampled_out = R(sampled_out);
#undef R
    cbt_abi_out_(caller, out, sizeof *out, CBT_CB_STATS_VERSION);
    return CBT_OK;
}
