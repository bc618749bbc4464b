/* host/builders/mp_subscriber.c — owns the MP path's table and attribute
 * rules (cbt/mp.h) on the request-tree engine (internal/reqtree.h): which event
 * opens which span, where the lookup's hit counts go, the timeout span and
 * the transfer-phase spans, the token traces. Sessions, pairing, the close rule, late children
 * and eviction are the engine's.
 */
#include <stdlib.h>
#include <string.h>

#include "cbt/array.h"
#include "internal/abi.h"
#include "internal/reqtree.h"
#include "internal/xfer.h"

enum { OP_LOOKUP = 0, OP_STORE = 1, OP_RETRIEVE = 2, OP_COUNT_ };
enum { CTR_STORE = 0, CTR_RETRIEVE = 1 };

static const cbt_tree_op k_ops[OP_COUNT_] = {
    [OP_LOOKUP] = {CBT_N_MP_LOOKUP_PREFETCH, CBT_N_LOOKUP_PREFETCH, {-1, -1}, -1, -1},
    [OP_STORE] = {CBT_N_MP_STORE, CBT_N_STORE, {-1, -1}, CTR_STORE, -1},
    [OP_RETRIEVE] = {CBT_N_MP_RETRIEVE, CBT_N_RETRIEVE, {-1, -1}, CTR_RETRIEVE, -1},
};

static const cbt_tree_rule k_rules[] = {
    {CBT_EV_MP_REQUEST_START, CBT_TREE_ROOT_START, 0, 0},
    {CBT_EV_MP_REQUEST_END, CBT_TREE_ROOT_END, 0, 0},
    {CBT_EV_MP_LOOKUP_PREFETCH_START, CBT_TREE_START, OP_LOOKUP, 0},
    {CBT_EV_MP_LOOKUP_PREFETCH_END, CBT_TREE_END, OP_LOOKUP, 0},
    {CBT_EV_MP_STORE_SUBMITTED, CBT_TREE_SUBMIT, CTR_STORE, 0},
    {CBT_EV_MP_STORE_START, CBT_TREE_START, OP_STORE, 0},
    {CBT_EV_MP_STORE_END, CBT_TREE_END, OP_STORE, 0},
    {CBT_EV_MP_RETRIEVE_SUBMITTED, CBT_TREE_SUBMIT, CTR_RETRIEVE, 0},
    {CBT_EV_MP_RETRIEVE_START, CBT_TREE_START, OP_RETRIEVE, 0},
    {CBT_EV_MP_RETRIEVE_END, CBT_TREE_END, OP_RETRIEVE, 0},
    {CBT_EV_TIMEOUT_RAISED, CBT_TREE_HOOK, 0, 0},
    {CBT_EV_MP_TRANSFER_PHASE_SAMPLES, CBT_TREE_HOOK, 0, 0},
};

typedef struct mp_state {
    cbt_xfer *xfer; /* transfer-phase spans (host/builders/transfer_phase.c) */
    _Atomic uint64_t timeout_spans;
    _Atomic uint64_t token_trace_spans;
} mp_state;

/* The integer under `key` (a bool counts as 0/1, as cbt_event_get_i64 reads
 * it): true only when the event carries one. */
static bool event_int(const cbt_event *ev, cbt_name key, int64_t *out)
{
    const cbt_meta *m = cbt_event_find(ev, key);
    if (!m || (m->type != CBT_META_I64 && m->type != CBT_META_BOOL))
        return false;
    *out = cbt_event_get_i64(ev, key, 0);
    return true;
}

static void copy_int(cbt_span *root, const cbt_event *ev, cbt_name key)
{
    int64_t v;
    if (event_int(ev, key, &v))
        cbt_span_set_i64(root, key, v);
}

/* rate = part / whole (0.0 when whole is 0), set only when the event carries
 * both. */
static void set_rate(cbt_span *root, cbt_name rate, const cbt_event *ev, cbt_name part,
                     cbt_name whole)
{
    int64_t p, w;
    if (event_int(ev, part, &p) && event_int(ev, whole, &w))
        cbt_span_set_f64(root, rate, cbt_tree_rate(p, w));
}

/* MP_LOOKUP_PREFETCH_END: the request's hit counts, typed, on the root, in
 * LMCache 0.5.7's order. Honest: an attribute appears only when the event
 * carried what it is made of (a count its key, a rate both its keys);
 * nothing is made up as 0 (docs/spans.md, "The MP path"). */
static void set_hit_attrs(cbt_span *root, const cbt_event *ev)
{
    copy_int(root, ev, CBT_N_HIT_TOKENS);
    copy_int(root, ev, CBT_N_REQUESTED_TOKENS);
    set_rate(root, CBT_N_HIT_RATE, ev, CBT_N_HIT_TOKENS, CBT_N_REQUESTED_TOKENS);
    copy_int(root, ev, CBT_N_L1_HIT_TOKENS);
    copy_int(root, ev, CBT_N_L2_HIT_TOKENS);
    set_rate(root, CBT_N_L1_HIT_RATE, ev, CBT_N_L1_HIT_TOKENS, CBT_N_REQUESTED_TOKENS);
    set_rate(root, CBT_N_L2_HIT_RATE, ev, CBT_N_L2_HIT_TOKENS, CBT_N_REQUESTED_TOKENS);
    /* 0.5.7: the engine-covered prefix, and the whole prompt's view */
    copy_int(root, ev, CBT_N_APC_COVERED_TOKENS);
    copy_int(root, ev, CBT_N_PROMPT_TOKENS);
    copy_int(root, ev, CBT_N_ENGINE_HIT_TOKENS);
    copy_int(root, ev, CBT_N_REQUEST_HIT_TOKENS);
    set_rate(root, CBT_N_ENGINE_HIT_RATE, ev, CBT_N_ENGINE_HIT_TOKENS, CBT_N_PROMPT_TOKENS);
    set_rate(root, CBT_N_REQUEST_HIT_RATE, ev, CBT_N_REQUEST_HIT_TOKENS, CBT_N_PROMPT_TOKENS);
    copy_int(root, ev, CBT_N_L1_HIT_KEYS);
    copy_int(root, ev, CBT_N_L2_HIT_KEYS);
    size_t n = 0;
    const char *why = cbt_event_get_str(ev, CBT_N_EARLY_EXIT_REASON, &n);
    if (why)
        cbt_span_set_str(root, CBT_N_EARLY_EXIT_REASON, why, n);
}

/* A store or retrieve START that carries a transfer_key: its phase spans
 * will nest under this span. */
static void mp_child_start(cbt_tree *e, cbt_tree_session *s, int op, cbt_span *sp,
                           const cbt_event *ev)
{
    (void)s;
    mp_state *st = cbt_tree_pctx(e);
    size_t n = 0;
    const char *key = cbt_event_get_str(ev, CBT_N_TRANSFER_KEY, &n);
    if (op == OP_LOOKUP || !key || !sp)
        return;
    cbt_xfer_capture(st->xfer, key, n, &sp->ctx, op == OP_STORE ? CBT_XFER_D2H : CBT_XFER_H2D,
                     ev->session, ev->session_len, ev->ts);
}

static void mp_child_end(cbt_tree *e, cbt_tree_session *s, int op, cbt_span *sp,
                         const cbt_event *ev)
{
    (void)sp;
    mp_state *st = cbt_tree_pctx(e);
    cbt_span *root = cbt_tree_root(s);
    if (op == OP_LOOKUP) {
        if (root)
            set_hit_attrs(root, ev);
        return;
    }
    size_t n = 0;
    const char *key = cbt_event_get_str(ev, CBT_N_TRANSFER_KEY, &n);
    if (key)
        cbt_xfer_ended(st->xfer, key, n, ev->ts);
}

/* TIMEOUT_RAISED: a zero-length "timeout" span, ERROR, under the session's
 * root (open, or closed within the grace window), else a root of its own. */
static cbt_status on_timeout(cbt_tree *e, const cbt_event *ev)
{
    mp_state *st = cbt_tree_pctx(e);
    cbt_tracer *t = cbt_tree_tracer(e);
    bool late = false;
    const cbt_span_ctx *parent = cbt_tree_anchor_of(e, ev->session, ev->session_len, &late);
    cbt_span *sp = cbt_span_start(t, CBT_N_TIMEOUT, CBT_SPAN_KIND_INTERNAL, parent, ev->ts);
    if (!sp)
        return CBT_ERR_FULL;
    cbt_span_set_str(sp, CBT_N_SESSION_ID, ev->session, ev->session_len);
    if (late)
        cbt_span_set_bool(sp, CBT_N_LATE, true);
    /* the exception as OpenTelemetry records one: a span event */
    uint32_t x = 0;
    if (cbt_span_add_event(sp, CBT_N_EXCEPTION, ev->ts, &x) == CBT_OK) {
        size_t n = 0;
        const char *v = cbt_event_get_str(ev, CBT_N_EXCEPTION_TYPE, &n);
        if (!v) {
            v = "TimeoutError";
            n = strlen(v);
        }
        cbt_span_event_set_str(sp, x, CBT_N_EXC_TYPE, v, n);
        if ((v = cbt_event_get_str(ev, CBT_N_MESSAGE, &n)))
            cbt_span_event_set_str(sp, x, CBT_N_EXC_MESSAGE, v, n);
        if ((v = cbt_event_get_str(ev, CBT_N_STACKTRACE, &n)))
            cbt_span_event_set_str(sp, x, CBT_N_EXC_STACKTRACE, v, n);
    }
    sp->status = CBT_SPAN_STATUS_ERROR;
    cbt_span_end(t, sp, ev->ts);
    atomic_fetch_add_explicit(&st->timeout_spans, 1, memory_order_relaxed);
    return CBT_OK;
}

/* MP_LOOKUP with token traces on (LMCache 0.5.7's --enable-token-trace): a
 * zero-length "mp.request.trace" span at the event's time carrying the
 * prompt: session_id, lmcache.model (model_name) and lmcache.input_ids
 * (token_ids, an array). Its parent is the session's "request" (open, or
 * closed within the grace window: cbt.late), else the session's open
 * "cb.request" (the registry; the CacheBlend path's lookups publish
 * MP_LOOKUP too), else none: a root of a trace of its own, as LMCache does.
 * A lookup without token_ids builds nothing (LMCache's subscriber raises a
 * KeyError there and exports no span). */
static cbt_status on_lookup(cbt_tree *e, const cbt_event *ev)
{
    const cbt_meta *ids = cbt_event_find(ev, CBT_N_TOKEN_IDS);
    if (!ids)
        return CBT_OK;
    mp_state *st = cbt_tree_pctx(e);
    cbt_tracer *t = cbt_tree_tracer(e);
    bool late = false;
    const cbt_span_ctx *parent = cbt_tree_anchor_of(e, ev->session, ev->session_len, &late);
    cbt_span_ctx cb;
    if (!parent && cbt_tree_registry_anchor_(t, ev->session, ev->session_len, CBT_N_CB_REQUEST,
                                             &cb))
        parent = &cb;
    cbt_span *sp = cbt_span_start(t, CBT_N_MP_REQUEST_TRACE, CBT_SPAN_KIND_INTERNAL, parent,
                                  ev->ts);
    if (!sp)
        return CBT_ERR_FULL;
    cbt_span_set_str(sp, CBT_N_SESSION_ID, ev->session, ev->session_len);
    size_t n = 0;
    const char *model = cbt_event_get_str(ev, CBT_N_MODEL_NAME, &n);
    if (model)
        cbt_span_set_str(sp, CBT_N_LMCACHE_MODEL, model, n);
    if (ids->type == CBT_META_ARRAY) /* a dropped one counts (span.c) */
        cbt_span_set_meta_(sp, CBT_N_LMCACHE_INPUT_IDS, ev, ids);
    if (late)
        cbt_span_set_bool(sp, CBT_N_LATE, true);
    cbt_span_end(t, sp, ev->ts);
    atomic_fetch_add_explicit(&st->token_trace_spans, 1, memory_order_relaxed);
    return CBT_OK;
}

static cbt_status mp_custom(cbt_tree *e, const cbt_event *ev)
{
    if (ev->type == CBT_EV_TIMEOUT_RAISED)
        return on_timeout(e, ev);
    if (ev->type == CBT_EV_MP_LOOKUP)
        return on_lookup(e, ev);
    mp_state *st = cbt_tree_pctx(e);
    return cbt_xfer_on_event(st->xfer, cbt_tree_tracer(e), ev); /* MP_TRANSFER_PHASE_SAMPLES */
}

/* The MP path's own counters: timeout spans and the transfer phases. */
static void mp_stats(cbt_tree *e, cbt_tree_stats *out)
{
    const mp_state *st = cbt_tree_pctx(e);
    out->timeout_spans = atomic_load_explicit(&st->timeout_spans, memory_order_relaxed);
    out->token_trace_spans = atomic_load_explicit(&st->token_trace_spans, memory_order_relaxed);
    cbt_xfer_stats xs;
    cbt_xfer_stats_get(st->xfer, &xs);
    out->transfer_spans = xs.spans;
    out->transfer_samples_skipped = xs.samples_skipped + xs.unknown_key;
}

static void mp_shutdown(cbt_tree *e, uint64_t now_ns)
{
    (void)now_ns;
    mp_state *st = cbt_tree_pctx(e);
    cbt_xfer_shutdown(st->xfer, cbt_tree_tracer(e));
}

static void mp_destroy(cbt_tree *e)
{
    mp_state *st = cbt_tree_pctx(e);
    cbt_xfer_destroy(st->xfer);
    free(st);
}

static const cbt_tree_path k_mp_path = {
    .name = "mp",
    .root_name = CBT_N_REQUEST,
    .root_logical = CBT_N_REQUEST,
    .lazy_root = true,
    .n_ops = OP_COUNT_,
    .n_counters = 2,
    .ops = k_ops,
    .rules = k_rules,
    .n_rules = sizeof k_rules / sizeof k_rules[0],
    .on_child_start = mp_child_start,
    .on_child_end = mp_child_end,
    .on_custom = mp_custom,
    .on_stats = mp_stats,
    .on_shutdown = mp_shutdown,
    .on_destroy = mp_destroy,
};

cbt_status cbt_mp_subscriber_create_opts_into(const cbt_tree_options *opts, cbt_subscriber *out)
{
    if (!out)
        return CBT_ERR_INVAL;
    cbt_status rc = cbt_abi_out_check_(out);
    if (rc)
        return rc;
    cbt_tree_opts o;
    if ((rc = cbt_tree_opts_resolve_(opts, true, &o)))
        return rc;
    mp_state *st = calloc(1, sizeof *st);
    if (!st)
        return CBT_ERR_NOMEM;
    /* as many captured transfers as sessions; LMCache's 120 s parent TTL */
    if ((rc = cbt_xfer_create(o.max_sessions, 0, &st->xfer))) {
        free(st);
        return rc;
    }
    /* MP_LOOKUP only with token traces on: off, the path never sees it */
    static const cbt_event_type k_lookup[] = {CBT_EV_MP_LOOKUP};
    rc = cbt_tree_subscriber_(&k_mp_path, &o, st, k_lookup, o.token_trace ? 1 : 0, out);
    if (rc) {
        cbt_xfer_destroy(st->xfer);
        free(st);
    }
    return rc;
}

/* cbt/mp.h's inline cbt_mp_subscriber_create() set out's version and size: at
 * most that many bytes are written (internal/abi.h). */
cbt_status cbt_mp_subscriber_create_into(uint32_t max_sessions, cbt_subscriber *out)
{
    cbt_tree_options o = {
        .version = CBT_TREE_OPTIONS_VERSION, .size = sizeof o, .max_sessions = max_sessions};
    return cbt_mp_subscriber_create_opts_into(&o, out);
}

cbt_status cbt_mp_stats_get(const cbt_subscriber *sub, cbt_tree_stats *out)
{
    return cbt_tree_stats_get_(sub, &k_mp_path, out);
}
