/* cbt/cb.h — the CacheBlend V3 server-side subscriber: CB_* events ->
 * "cb.request" and its cb.* sub-spans (docs/spans.md, "The CacheBlend path").
 *
 * A table on the request-tree engine (docs/spans.md, "The CacheBlend path",
 * has the close-rule table; cbt/request_tree.h the options), after the
 * cacheblend-v3-observability seed §2 / §2.1 / §3 and LMCache 0.5.6:
 *   cb.request                      root, opened at CB_REQUEST_START only
 *   ├─ cb.lookup                    CB_LOOKUP_START/END
 *   │  ├─ cb.fingerprint_match      CB_FINGERPRINT_MATCH_START/END
 *   │  │  (or cb.coordinator_match  CB_COORDINATOR_MATCH_START/END)
 *   │  ├─ cb.prefix_lookup          CB_PREFIX_LOOKUP_START/END
 *   │  ├─ cb.sparse_prefetch        CB_SPARSE_PREFETCH_START/END
 *   │  │  └─ cb.l2_load             L2_LOAD_TASK_SUBMITTED/COMPLETED
 *   │  └─ cb.classify               CB_CLASSIFY_START/END
 *   ├─ cb.retrieve  (one or more)   CB_RETRIEVE_START/END
 *   │  └─ cb.scatter                CB_SCATTER_START/END (re-RoPE folded in)
 *   └─ point events, as zero-duration children named by LMCache's event
 *      values: cb.fingerprints.registered, cb.chunks.evicted, cb.retrieve.noop
 * The V3 close rule: the root closes when CB_REQUEST_END has arrived and no
 * GPU operation is pending (CB_RETRIEVE_SUBMITTED minus CB_RETRIEVE_END);
 * deferred, it ends at the last CB_RETRIEVE_END (cbt.gpu_tail_ns says by how
 * much it outlived CB_REQUEST_END). Every worker and every retrieve pass
 * sends its own CB_REQUEST_END: a second one is counted
 * (sibling_request_end), not an error. Within the grace window after the
 * root closed, a late retrieve (a second start_load_kv pass) joins the
 * closed root's trace under it (cbt.late). A CB event for a session with no
 * open or recently closed root is, as in LMCache, a root of its own, here in
 * the trace derived from the request id (counted no_root). CB_LOOKUP_END
 * sets the request's hit attributes on the root: hit_tokens (the event's
 * own when it carries one), requested_tokens, hit_rate, prefix_hits,
 * prefix_hit_tokens, segmented_prefix_hit_tokens, non_prefix_hit_tokens and
 * their rates (0.0 when requested_tokens is 0).
 * START/END pair on (session, operation, event.pair), first-in first-out, as
 * in cbt/mp.h. Every span carries session_id and request_id (the session id).
 *
 * Joining the request's distributed trace (docs/distributed.md). The server
 * extracts the caller's traceparent (cbt_context_begin) and attaches the
 * result to the START events of the spans that serve the RPC
 * (cbt_event_trace_set(&ev, &tc.ctx, NULL) on CB_REQUEST_START,
 * CB_LOOKUP_START, CB_RETRIEVE_START):
 *   - a remote parent (Option A) on CB_REQUEST_START: the server's cb.request
 *     is elided — the trace already has its root, the scheduler's — and the
 *     spans that would have nested under it nest under that remote span; the
 *     request-level attributes (hit_rate, hit_tokens, prefix_*, ...) go on
 *     cb.lookup instead. The session and the V3 close rule work as before.
 *   - a remote parent on CB_LOOKUP_START / CB_RETRIEVE_START: that span is a
 *     SERVER-kind child of the caller's span (cb.lookup.rpc,
 *     cb.start_load_kv), not of cb.request;
 *   - a trace id without a span id (Option B): cb.request is a root of that
 *     trace; no context at all: a root of the trace derived from the
 *     request id (cbt_trace_id_from_request), so the server's spans still
 *     land in the request's trace, as siblings of the other processes';
 *   - a context whose sampled flag is clear: the request is sampled out and
 *     none of its events builds a span (counted in sampled_out). A server
 *     that skips publishing for such requests (cbt_context_sampled) pays
 *     nothing at all; this is the safety net.
 * Ending sub-spans also feeds the lmcache_blend.* metrics
 * (cbt/blend_metrics.h): durations with the span as exemplar, token and
 * chunk counters from the END events' metadata. A CB_RETRIEVE_END (or any
 * sub-span END) that reports a failure (bool "failed" = true, bool "success"
 * = false, or a non-empty "error" / "exception" string) marks the span ERROR
 * and, for a retrieve, counts a retrieve failure; point events count chunks_evicted /
 * fingerprints_registered by their "num_chunks" (LMCache's key), else
 * "count", else 1.
 *
 * CBT_DISABLE (defined before the first cbt include): the types stay
 * defined; every call is a static inline no-op referencing no cbt symbol,
 * returning CBT_OK with an empty subscriber (no callbacks) and zeroed stats.
 */
#ifndef CBT_CB_H
#define CBT_CB_H

#include <stdint.h>
#include <string.h>
#include "cbt/api.h"
#include "cbt/request_tree.h"
#include "cbt/span.h"
#include "cbt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CBT_CB_CHILDREN_MAX 32 /* open child spans per session; the oldest ends to make room */

/* The CB subscriber's counters: the request-tree engine's struct
 * (cbt/request_tree.h), under the name it had when it was the CB path's own.
 * Its versions 1 and 2 had another layout (roots_opened, roots_closed,
 * roots_deferred, children_opened, children_closed, point_events,
 * unmatched_end, no_root, duplicate_request_end, request_end_unknown,
 * sessions_full, children_full, incomplete_at_shutdown, sessions_open,
 * roots_remote, sampled_out; version 2: sibling_request_end, late_children,
 * evicted_idle, evicted_full, evicted_span_pool, children_evicted_idle,
 * children_evicted_full, sessions_reused): cbt_cb_stats_get still fills it,
 * at most `size` bytes, for a caller whose version says 1 or 2 (a program
 * built against those headers). */
typedef cbt_tree_stats cbt_cb_stats;
#define CBT_CB_STATS_VERSION CBT_TREE_STATS_VERSION
#define cbt_cb_stats_version_ CBT_TREE_STATS_VERSION /* for CBT_STRUCT_INIT */

#ifdef CBT_DISABLE
/* ==== CBT_DISABLE: the calls below compile to no-ops (see the top) ======== */
static inline cbt_status cbt_cb_subscriber_create_into(uint32_t max_sessions,
                                                       cbt_subscriber *out)
{
    (void)max_sessions, (void)out; /* left as the wrapper made it: an empty subscriber */
    return CBT_OK;
}
static inline cbt_status cbt_cb_subscriber_create_opts_into(const cbt_tree_options *opts,
                                                            cbt_subscriber *out)
{
    (void)opts, (void)out; /* left as the wrapper made it: an empty subscriber */
    return CBT_OK;
}
static inline cbt_status cbt_cb_stats_get(const cbt_subscriber *sub, cbt_tree_stats *out)
{
    (void)sub;
    cbt_tree_stats_zero_(out); /* all zero, written in full (cbt/request_tree.h) */
    return CBT_OK;
}
#else /* the calls */

/* cbt_cb_subscriber_create (below, an inline wrapper around this entry
 * point): fill *out with a CB subscriber tracking at most `max_sessions`
 * sessions at once (0 = 4096). Register it with cbt_add_subscriber();
 * cbt_init() does not install it. */
CBT_API cbt_status cbt_cb_subscriber_create_into(uint32_t max_sessions, cbt_subscriber *out);

/* The same with the options of cbt/request_tree.h (NULL: all defaults): the
 * idle bound and the late-children window (root_end is ignored: the CB path
 * always ends a deferred root at its last CB_RETRIEVE_END). CBT_ERR_INVAL
 * for a bad option or environment variable (named on stderr),
 * CBT_ERR_VERSION for an options struct from a newer header. */
CBT_API cbt_status cbt_cb_subscriber_create_opts_into(const cbt_tree_options *opts,
                                                      cbt_subscriber *out);

/* Counters (cbt_tree_stats, cbt/request_tree.h; the older layout above for
 * a caller whose out->version is 1 or 2) of the CB subscriber installed in
 * the process-wide tracer (or of `sub` when given). Safe from any thread
 * (relaxed reads). CBT_ERR_NOT_FOUND
 * when none is installed; CBT_ERR_INVAL for a NULL out or a `sub` that is
 * not one; CBT_ERR_VERSION when out->size is smaller than the header (set
 * version and size: CBT_STRUCT_INIT); CBT_ERR_NOT_INITIALIZED without a
 * tracer. */
CBT_API cbt_status cbt_cb_stats_get(const cbt_subscriber *sub, cbt_tree_stats *out);

#endif /* CBT_DISABLE */

/* Inline, so that only this header's sizeof of cbt_subscriber is written:
 * *out zeroed, its version and size set, then the _into entry point fills at
 * most that size (cbt.h, "versioned structs"). */
static inline cbt_status cbt_cb_subscriber_create(uint32_t max_sessions, cbt_subscriber *out)
{
    if (out) {
        memset(out, 0, sizeof *out);
        out->version = CBT_SUBSCRIBER_VERSION;
        out->size = (uint32_t)sizeof *out;
    }
    return cbt_cb_subscriber_create_into(max_sessions, out);
}

static inline cbt_status cbt_cb_subscriber_create_opts(const cbt_tree_options *opts,
                                                       cbt_subscriber *out)
{
    if (out) {
        memset(out, 0, sizeof *out);
        out->version = CBT_SUBSCRIBER_VERSION;
        out->size = (uint32_t)sizeof *out;
    }
    return cbt_cb_subscriber_create_opts_into(opts, out);
}

#ifdef __cplusplus
}
#endif
#endif /* CBT_CB_H */
