/* host/builders/cb_subscriber.c — owns the CacheBlend V3 path's table and
 * attribute rules (cbt/cb.h) on the request-tree engine (internal/reqtree.h):
 * which event opens which cb.* span under which parent, the request-level hit
 * attributes, cb.scatter's scatter_ms, the point spans and the
 * lmcache_blend.* metrics fed from every operation's END. Sessions, pairing,
 * the V3 close rule (deferred: the last CB_RETRIEVE_END), late children,
 * sampled-out requests, elided roots and eviction are the engine's.
 *
 * Registry (logical names, so that other subscribers / kernel spans can nest
 * under the CB spans): the root under "cb.request", the newest open cb.lookup,
 * cb.sparse_prefetch and cb.retrieve under their own span names. The CB names
 * are used, not the MP ones ("request", "retrieve", "lookup_prefetch"), so a
 * session that also carries MP spans keeps both sets of entries intact.
 */
#include <stdlib.h>
#include <string.h>

#include "cbt/blend_metrics.h"
#include "cbt/cb.h"
#include "internal/abi.h"
#include "internal/end_status.h"
#include "internal/reqtree.h"

enum {
    OP_LOOKUP = 0,
    OP_FP_MATCH,
    OP_COORD_MATCH,
    OP_SPARSE_PREFETCH,
    OP_CLASSIFY,
    OP_RETRIEVE,
    OP_SCATTER,
    OP_L2_LOAD,
    OP_PREFIX_LOOKUP,
    OP_COUNT_
};
enum { CTR_RETRIEVE = 0 };

/* span, registry name, parents (else the root), pending counter, histogram */
static const cbt_tree_op k_ops[OP_COUNT_] = {
    [OP_LOOKUP] = {CBT_N_CB_LOOKUP, CBT_N_CB_LOOKUP, {-1, -1}, -1, CBT_BH_LOOKUP},
    [OP_FP_MATCH] = {CBT_N_CB_FINGERPRINT_MATCH, 0, {OP_LOOKUP, -1}, -1, CBT_BH_FINGERPRINT_MATCH},
    [OP_COORD_MATCH] = {CBT_N_CB_COORDINATOR_MATCH, 0, {OP_LOOKUP, -1}, -1, CBT_BH_COORDINATOR_MATCH},
    [OP_SPARSE_PREFETCH] = {CBT_N_CB_SPARSE_PREFETCH, CBT_N_CB_SPARSE_PREFETCH, {OP_LOOKUP, -1}, -1,
                            CBT_BH_SPARSE_PREFETCH},
    [OP_CLASSIFY] = {CBT_N_CB_CLASSIFY, 0, {OP_LOOKUP, -1}, -1, -1},
    [OP_RETRIEVE] = {CBT_N_CB_RETRIEVE, CBT_N_CB_RETRIEVE, {-1, -1}, CTR_RETRIEVE, CBT_BH_RETRIEVE},
    [OP_SCATTER] = {CBT_N_CB_SCATTER, 0, {OP_RETRIEVE, -1}, -1, CBT_BH_SCATTER},
    [OP_L2_LOAD] = {CBT_N_CB_L2_LOAD, 0, {OP_SPARSE_PREFETCH, OP_LOOKUP}, -1, CBT_BH_L2_LOAD},
    [OP_PREFIX_LOOKUP] = {CBT_N_CB_PREFIX_LOOKUP, 0, {OP_LOOKUP, -1}, -1, -1},
};

#define START(ev, op) {CBT_EV_##ev##_START, CBT_TREE_START, op, 0}, {CBT_EV_##ev##_END, CBT_TREE_END, op, 0}
static const cbt_tree_rule k_rules[] = {
    {CBT_EV_CB_REQUEST_START, CBT_TREE_ROOT_START, 0, 0},
    {CBT_EV_CB_REQUEST_END, CBT_TREE_ROOT_END, 0, 0},
    START(CB_LOOKUP, OP_LOOKUP),
    START(CB_FINGERPRINT_MATCH, OP_FP_MATCH),
    START(CB_COORDINATOR_MATCH, OP_COORD_MATCH),
    START(CB_SPARSE_PREFETCH, OP_SPARSE_PREFETCH),
    START(CB_CLASSIFY, OP_CLASSIFY),
    START(CB_PREFIX_LOOKUP, OP_PREFIX_LOOKUP),
    {CBT_EV_CB_RETRIEVE_SUBMITTED, CBT_TREE_SUBMIT, CTR_RETRIEVE, 0},
    START(CB_RETRIEVE, OP_RETRIEVE),
    START(CB_SCATTER, OP_SCATTER),
    {CBT_EV_L2_LOAD_TASK_SUBMITTED, CBT_TREE_START, OP_L2_LOAD, 0},
    {CBT_EV_L2_LOAD_TASK_COMPLETED, CBT_TREE_END, OP_L2_LOAD, 0},
    {CBT_EV_CB_RETRIEVE_NOOP, CBT_TREE_POINT, 0, CBT_N_CB_RETRIEVE_NOOP},
    {CBT_EV_CB_FINGERPRINTS_REGISTERED, CBT_TREE_POINT, 0, CBT_N_CB_FINGERPRINTS_REGISTERED},
    {CBT_EV_CB_CHUNKS_EVICTED, CBT_TREE_POINT, 0, CBT_N_CB_CHUNKS_EVICTED},
};
#undef START

/* scratch slots: the newest fingerprint/storage/stale counts a sub-operation
 * END reported, for the lookup's metrics */
enum { SC_FP_HITS = 0, SC_STORAGE_HITS, SC_STALE };

static void set_meta(cbt_span *sp, const cbt_event *ev, const cbt_meta *m)
{
    size_t n = 0;
    const char *str;
    switch (m->type) {
    case CBT_META_I64: cbt_span_set_i64(sp, m->key, m->v.i64); break;
    case CBT_META_F64: cbt_span_set_f64(sp, m->key, m->v.f64); break;
    case CBT_META_BOOL: cbt_span_set_bool(sp, m->key, m->v.b); break;
    case CBT_META_STR:
        if ((str = cbt_event_meta_str(ev, m, &n)))
            cbt_span_set_str(sp, m->key, str, n);
        break;
    default: break;
    }
}

/* cbt's extra request attributes an event may carry: copied when present. */
static void copy_root_attrs(cbt_span *root, const cbt_event *ev)
{
    static const cbt_name keys[] = {
        CBT_N_PREFIX_COVERAGE_TOKENS, CBT_N_FINGERPRINT_HITS, CBT_N_STORAGE_HITS,
        CBT_N_STALE_CHUNKS,
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const cbt_meta *m = cbt_event_find(ev, keys[i]);
        if (m)
            set_meta(root, ev, m);
    }
}

/* CB_LOOKUP_END's hit_tokens as LMCache 0.5.6 sends it (prefix plus the
 * unique coverage of non-prefix and segmented tail); an event without one
 * gets the sum of the components it has. */
static int64_t hit_tokens_of(const cbt_event *ev)
{
    if (cbt_event_find(ev, CBT_N_HIT_TOKENS))
        return cbt_event_get_i64(ev, CBT_N_HIT_TOKENS, 0);
    return cbt_event_get_i64(ev, CBT_N_PREFIX_HIT_TOKENS, 0) +
           cbt_event_get_i64(ev, CBT_N_NON_PREFIX_HIT_TOKENS, 0) +
           cbt_event_get_i64(ev, CBT_N_SEGMENTED_PREFIX_HIT_TOKENS, 0);
}

/* The request-level results of CB_LOOKUP_END, typed, every one set (0 when
 * the event lacks it); rates are 0.0 when requested_tokens is 0. */
static void set_hit_attrs(cbt_span *root, const cbt_event *ev)
{
    int64_t hit = hit_tokens_of(ev);
    int64_t req = cbt_event_get_i64(ev, CBT_N_REQUESTED_TOKENS, 0);
    int64_t pre = cbt_event_get_i64(ev, CBT_N_PREFIX_HIT_TOKENS, 0);
    int64_t seg = cbt_event_get_i64(ev, CBT_N_SEGMENTED_PREFIX_HIT_TOKENS, 0);
    int64_t non = cbt_event_get_i64(ev, CBT_N_NON_PREFIX_HIT_TOKENS, 0);
    cbt_span_set_i64(root, CBT_N_HIT_TOKENS, hit);
    cbt_span_set_i64(root, CBT_N_REQUESTED_TOKENS, req);
    cbt_span_set_f64(root, CBT_N_HIT_RATE, cbt_tree_rate(hit, req));
    cbt_span_set_i64(root, CBT_N_PREFIX_HITS, cbt_event_get_i64(ev, CBT_N_PREFIX_HITS, 0));
    cbt_span_set_i64(root, CBT_N_PREFIX_HIT_TOKENS, pre);
    cbt_span_set_i64(root, CBT_N_SEGMENTED_PREFIX_HIT_TOKENS, seg);
    cbt_span_set_i64(root, CBT_N_NON_PREFIX_HIT_TOKENS, non);
    cbt_span_set_f64(root, CBT_N_PREFIX_HIT_RATE, cbt_tree_rate(pre, req));
    cbt_span_set_f64(root, CBT_N_SEGMENTED_PREFIX_HIT_RATE, cbt_tree_rate(seg, req));
    cbt_span_set_f64(root, CBT_N_NON_PREFIX_HIT_RATE, cbt_tree_rate(non, req));
    copy_root_attrs(root, ev);
}

static uint64_t nonneg(int64_t v) { return v > 0 ? (uint64_t)v : 0; }

/* An integer the operation reported: the span's attribute when there is a
 * span (it holds both events' values), else the END event's value; 0 when
 * absent. */
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
static void feed_metrics(cbt_tracer *t, cbt_tree_session *s, int op, const cbt_span *sp,
                         const cbt_event *ev)
{
    cbt_blend_metrics *m = t->blend;
    if (!m)
        return;
    int64_t none[4] = {0, 0, 0, 0}; /* a session-less END has no session */
    int64_t *sc = s ? cbt_tree_scratch(s) : none;
    if (sp && k_ops[op].hist >= 0)
        cbt_blend_observe(m, (cbt_blend_hist)k_ops[op].hist,
                          (double)(sp->end_ns - sp->start_ns) / 1e6, sp);
    sc[SC_FP_HITS] = cbt_event_get_i64(ev, CBT_N_FINGERPRINT_HITS, sc[SC_FP_HITS]);
    sc[SC_STORAGE_HITS] = cbt_event_get_i64(ev, CBT_N_STORAGE_HITS, sc[SC_STORAGE_HITS]);
    sc[SC_STALE] = cbt_event_get_i64(ev, CBT_N_STALE_CHUNKS, sc[SC_STALE]);
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
        cbt_blend_count(m, CBT_BC_LOOKUP_FINGERPRINT_HITS, nonneg(sc[SC_FP_HITS]));
        cbt_blend_count(m, CBT_BC_LOOKUP_STORAGE_HITS, nonneg(sc[SC_STORAGE_HITS]));
        cbt_blend_count(m, CBT_BC_LOOKUP_STALE_CHUNKS, nonneg(sc[SC_STALE]));
        sc[SC_FP_HITS] = sc[SC_STORAGE_HITS] = sc[SC_STALE] = 0;
        break;
    case OP_RETRIEVE:
        cbt_blend_count(m, CBT_BC_RETRIEVE_REQUESTS, 1);
        if (sp ? sp->status == CBT_SPAN_STATUS_ERROR : cbt_end_failed_(ev))
            cbt_blend_count(m, CBT_BC_RETRIEVE_FAILURES, 1);
        break;
    case OP_SCATTER:
        cbt_blend_count(m, CBT_BC_SCATTER_TOKENS, nonneg(val_of(sp, ev, CBT_N_SCATTERED_TOKENS)));
        cbt_blend_count(m, CBT_BC_SCATTER_SLOT_WRITES, nonneg(val_of(sp, ev, CBT_N_SLOT_WRITES)));
        cbt_blend_count(m, CBT_BC_SHIFTED_TOKENS, nonneg(val_of(sp, ev, CBT_N_N_SHIFTED_TOKENS)));
        break;
    case OP_L2_LOAD:
        cbt_blend_count(m, CBT_BC_L2_LOAD_CHUNKS, nonneg(val_of(sp, ev, CBT_N_CHUNKS)));
        cbt_blend_count(m, CBT_BC_L2_LOAD_BYTES, nonneg(val_of(sp, ev, CBT_N_BYTES)));
        break;
    default:
        break;
    }
}

static void cb_child_end(cbt_tree *e, cbt_tree_session *s, int op, cbt_span *sp,
                         const cbt_event *ev)
{
    cbt_span *root = cbt_tree_root(s);
    if (sp) {
        /* request-level results: on cb.request, or on the lookup span itself
         * when the root is elided (the scheduler's root is in another process) */
        if (op == OP_LOOKUP)
            set_hit_attrs(root ? root : sp, ev);
        else if (op == OP_CLASSIFY) {
            cbt_span *target = root ? root : cbt_tree_newest(s, OP_LOOKUP);
            if (target)
                copy_root_attrs(target, ev);
        } else if (op == OP_SCATTER) {
            /* re-RoPE is folded in; scatter_ms is the span's duration */
            cbt_span_set_f64(sp, CBT_N_SCATTER_MS, (double)(sp->end_ns - sp->start_ns) / 1e6);
        }
    } else if (op == OP_LOOKUP && root) {
        set_hit_attrs(root, ev); /* LMCache too sets them without a lookup span */
    }
    feed_metrics(cbt_tree_tracer(e), s, op, sp, ev);
}

/* Point events count into the metrics whether or not they make a span:
 * chunks evicted and fingerprints registered by num_chunks (LMCache's key),
 * else count, else 1. */
static void cb_point(cbt_tree *e, cbt_tree_session *s, cbt_name name, const cbt_event *ev)
{
    (void)s;
    cbt_blend_metrics *m = cbt_tree_tracer(e)->blend;
    int64_t n = cbt_event_get_i64(ev, CBT_N_NUM_CHUNKS, cbt_event_get_i64(ev, CBT_N_COUNT, 1));
    if (name == CBT_N_CB_CHUNKS_EVICTED)
        cbt_blend_count(m, CBT_BC_CHUNKS_EVICTED, nonneg(n));
    else if (name == CBT_N_CB_FINGERPRINTS_REGISTERED)
        cbt_blend_count(m, CBT_BC_FINGERPRINTS_REGISTERED, nonneg(n));
    else if (name == CBT_N_CB_RETRIEVE_NOOP)
        cbt_blend_count(m, CBT_BC_RETRIEVE_NOOPS, 1);
}

static const cbt_tree_path k_cb_path = {
    .name = "cb",
    .root_name = CBT_N_CB_REQUEST,
    .root_logical = CBT_N_CB_REQUEST,
    .request_id_attr = true,
    .drop_sampled_out = true,
    .remote_root_elided = true,
    .trace_from_request = true,
    .root_end_fixed = true,
    .n_ops = OP_COUNT_,
    .n_counters = 1,
    .ops = k_ops,
    .rules = k_rules,
    .n_rules = sizeof k_rules / sizeof k_rules[0],
    .on_child_end = cb_child_end,
    .on_point = cb_point,
};

cbt_status cbt_cb_subscriber_create_opts_into(const cbt_tree_options *opts, cbt_subscriber *out)
{
    if (!out)
        return CBT_ERR_INVAL;
    cbt_status rc = cbt_abi_out_check_(out);
    if (rc)
        return rc;
    cbt_tree_opts o;
    if ((rc = cbt_tree_opts_resolve_(opts, false, &o))) /* the V3 rule, always */
        return rc;
    return cbt_tree_subscriber_(&k_cb_path, &o, NULL, NULL, 0, out);
}

/* cbt/cb.h's inline cbt_cb_subscriber_create() set out's version and size: at
 * most that many bytes are written (internal/abi.h). */
cbt_status cbt_cb_subscriber_create_into(uint32_t max_sessions, cbt_subscriber *out)
{
    cbt_tree_options o = {
        .version = CBT_TREE_OPTIONS_VERSION, .size = sizeof o, .max_sessions = max_sessions};
    return cbt_cb_subscriber_create_opts_into(&o, out);
}

/* cbt_cb_stats as it was, versions 1 and 2, before it became cbt_tree_stats
 * (cbt/cb.h): its fields in their order, frozen, for programs built against
 * those headers. Each is the cbt_tree_stats field of the same name. */
#define CB_STATS_V2_FIELDS(F)                                                                \
    F(roots_opened) F(roots_closed) F(roots_deferred) F(children_opened) F(children_closed) \
    F(point_events) F(unmatched_end) F(no_root) F(duplicate_request_end)                   \
    F(request_end_unknown) F(sessions_full) F(children_full) F(incomplete_at_shutdown)     \
    F(sessions_open) F(roots_remote) F(sampled_out)                                        \
    /* version 2 */                                                                         \
    F(sibling_request_end) F(late_children) F(evicted_idle) F(evicted_full)                \
    F(evicted_span_pool) F(children_evicted_idle) F(children_evicted_full) F(sessions_reused)

typedef struct cb_stats_v2 {
    uint32_t version, size;
#define FIELD_(name) uint64_t name;
    CB_STATS_V2_FIELDS(FIELD_)
#undef FIELD_
} cb_stats_v2;
_Static_assert(sizeof(cb_stats_v2) == 200, "cbt_cb_stats version 2 was 200 bytes");

cbt_status cbt_cb_stats_get(const cbt_subscriber *sub, cbt_tree_stats *caller)
{
    cbt_status rc = cbt_abi_out_check_(caller);
    if (rc)
        return rc;
    if (caller->version != 1 && caller->version != 2)
        return cbt_tree_stats_get_(sub, &k_cb_path, caller);
    cbt_tree_stats t;
    if ((rc = cbt_tree_stats_fill_(sub, &k_cb_path, &t)))
        return rc;
    cb_stats_v2 old;
    memset(&old, 0, sizeof old);
#define COPY_(name) old.name = t.name;
    CB_STATS_V2_FIELDS(COPY_)
#undef COPY_
    cbt_abi_out_(caller, &old, sizeof old, 2); /* a version-1 caller's size stops at sampled_out */
    return CBT_OK;
}
