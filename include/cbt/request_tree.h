/* cbt/request_tree.h — options of the span builders that turn a request's
 * events into a tree: the MP path (cbt/mp.h) and the CacheBlend path
 * (cbt/cb.h). Both run on one engine (docs/spans.md, "The request-tree
 * engine"), so they take the same options.
 *
 * Every field has a default; 0 means "use it". A zero field first looks at
 * the environment:
 *   CBT_MP_ROOT_END      request_end | transfer_end   (root_end; the MP path only)
 *   CBT_SESSION_IDLE_MS  milliseconds, or "off"       (idle_ms)
 *   CBT_LATE_GRACE_MS    milliseconds, or "off"       (grace_ms)
 *   CBT_TOKEN_TRACE      1 | on | 0 | off             (token_trace; the MP path only)
 * A malformed variable makes the subscriber's creation (and cbt_init, which
 * creates the MP one) fail with CBT_ERR_INVAL and a message naming it.
 *
 * Their counters are one struct too, cbt_tree_stats (below), read with
 * cbt_mp_stats_get() and cbt_cb_stats_get().
 *
 * Header only: types and constants, no calls (and under CBT_DISABLE one
 * helper of the getters' stubs).
 */
#ifndef CBT_REQUEST_TREE_H
#define CBT_REQUEST_TREE_H

#include <stdint.h>
#include <string.h>
#include "cbt/api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* When a root whose REQUEST_END came before its GPU work finished ends. */
typedef enum cbt_root_end {
    CBT_ROOT_END_DEFAULT = 0,  /* the environment's, else CBT_ROOT_END_REQUEST */
    /* At the REQUEST_END time: the request's logical end (the seed's rule for
     * the MP path). Children that finish later stick out past the root. */
    CBT_ROOT_END_REQUEST = 1,
    /* At the END that brought the last pending operation to zero (LMCache
     * 0.5.6's MP rule, and the CacheBlend rule always): no child sticks out. */
    CBT_ROOT_END_TRANSFER = 2,
} cbt_root_end;

#define CBT_TREE_OFF 0xffffffffu /* idle_ms / grace_ms: never */

/* Whether the MP path builds LMCache 0.5.7's token traces: one zero-length
 * "mp.request.trace" span per MP_LOOKUP that carries token_ids, with
 * session_id, lmcache.model and lmcache.input_ids (the prompt's token ids,
 * an integer array) (docs/spans.md, "Token traces"; LMCache's
 * --enable-token-trace). Off, the MP path does not subscribe to MP_LOOKUP at
 * all, so the events cost it nothing. */
typedef enum cbt_token_trace {
    CBT_TOKEN_TRACE_DEFAULT = 0, /* the environment's (CBT_TOKEN_TRACE), else off */
    CBT_TOKEN_TRACE_ON = 1,
    CBT_TOKEN_TRACE_OFF = 2,
} cbt_token_trace;

typedef struct cbt_tree_options {
    uint32_t version, size; /* CBT_STRUCT_INIT(cbt_tree_options) (cbt.h) */
    uint32_t max_sessions;  /* sessions held at once; 0 = 4096; at most 2^22 */
    uint32_t root_end;      /* cbt_root_end; the CB path always uses TRANSFER */
    /* A session with no event for this long (event time) is ended as
     * incomplete, exported and counted (evicted_idle); an open child with no
     * END for this long likewise (children_evicted_idle). 0 = 60000 ms. */
    uint32_t idle_ms;
    /* How long after its root closed a request's late children (a second
     * retrieve pass, a sibling worker's retrieve, a timeout) still join its
     * trace, under the closed root (counted late_children). 0 = 10000 ms. */
    uint32_t grace_ms;
    /* version 2 */
    uint32_t token_trace;   /* cbt_token_trace; the CB path ignores it */
} cbt_tree_options;
#define CBT_TREE_OPTIONS_VERSION 2u
#define cbt_tree_options_version_ CBT_TREE_OPTIONS_VERSION /* for CBT_STRUCT_INIT */
CBT_ASSERT_NO_TAIL_PADDING_(cbt_tree_options, token_trace);

/* The counters of a request-tree builder, the same struct for both paths:
 * cbt_mp_stats_get() (cbt/mp.h) and cbt_cb_stats_get() (cbt/cb.h) fill it,
 * and cbt_mp_stats / cbt_cb_stats are its other names. A counter marked MP
 * or CB only moves on that path; on the other it stays 0.
 * Versions 1 and 2 were cbt_mp_stats's, whose fields keep their offsets;
 * version 3 appended the CacheBlend path's own counters, and cbt_cb_stats
 * (whose versions 1 and 2 had a layout of their own, still served to a
 * caller built against them: cbt/cb.h) became this struct. */
typedef struct cbt_tree_stats {
    uint32_t version, size; /* CBT_STRUCT_INIT(cbt_tree_stats): what the caller knows (cbt.h) */
    uint64_t roots_opened;
    uint64_t roots_lazy;          /* MP: opened at a child START */
    uint64_t roots_closed;
    uint64_t roots_deferred;      /* REQUEST_END arrived with work pending */
    uint64_t children_opened;
    uint64_t children_closed;
    uint64_t unmatched_end;       /* END with no open START: no span; it still retires a
                                     pending SUBMITTED of its op */
    uint64_t duplicate_request_end; /* MP: a repeat REQUEST_END while deferred or in the
                                       grace window (CB counts sibling_request_end) */
    uint64_t request_end_unknown; /* REQUEST_END for a session never seen */
    uint64_t sessions_full;       /* events dropped: max_sessions reached */
    uint64_t children_full;       /* START dropped: no span even after evicting for the pool */
    uint64_t incomplete_at_shutdown;
    uint64_t sessions_open;       /* requests with anything open or pending now (after the last
                                     event); closed ones kept for late children are not counted */
    /* version 2: the request-tree engine */
    uint64_t late_children;       /* children that joined a closed root within the grace window */
    uint64_t evicted_idle;        /* sessions idle past idle_ms: ended incomplete */
    uint64_t evicted_full;        /* sessions evicted to make room in a full table */
    uint64_t evicted_span_pool;   /* sessions evicted because the span pool was exhausted */
    uint64_t children_evicted_idle; /* children open past idle_ms: ended incomplete */
    uint64_t children_evicted_full; /* oldest children ended to make room (CBT_MP_CHILDREN_MAX,
                                       CBT_CB_CHILDREN_MAX) */
    uint64_t timeout_spans;       /* MP: "timeout" spans from TIMEOUT_RAISED */
    uint64_t transfer_spans;      /* MP: transfer.kernel_interval / transfer.staging spans */
    uint64_t transfer_samples_skipped; /* MP: phase samples refused (bad times, direction, key) */
    uint64_t sessions_reused;     /* REQUEST_START for an id with children still open: they end
                                     incomplete (cbt.evicted = "reused") */
    /* version 3: one struct for both paths; the CacheBlend path's counters */
    uint64_t point_events;        /* CB: zero-duration point-event spans emitted */
    uint64_t no_root;             /* events outside any request: a session-less START/END
                                     builds nothing; CB: an event for a session without an
                                     open cb.request makes its span a root of its own (the
                                     request's derived trace) */
    uint64_t roots_remote;        /* CB: CB_REQUEST_START with a remote parent: root elided */
    uint64_t sampled_out;         /* CB: requests and events ignored: their context was not
                                     sampled */
    uint64_t sibling_request_end; /* CB: CB_REQUEST_END of another worker or retrieve pass:
                                     not an error */
    /* version 4 */
    uint64_t token_trace_spans;   /* MP: "mp.request.trace" spans built (token_trace on) */
} cbt_tree_stats;
#define CBT_TREE_STATS_VERSION 4u
#define cbt_tree_stats_version_ CBT_TREE_STATS_VERSION /* for CBT_STRUCT_INIT */
CBT_ASSERT_NO_TAIL_PADDING_(cbt_tree_stats, token_trace_spans);

#ifdef CBT_DISABLE
/* CBT_DISABLE: what the stats getters' stubs return: all zero, written in
 * full (the out-struct rule, cbt.h). */
static inline void cbt_tree_stats_zero_(cbt_tree_stats *out)
{
    if (out) {
        memset(out, 0, sizeof *out);
        out->version = CBT_TREE_STATS_VERSION;
        out->size = (uint32_t)sizeof *out;
    }
}
#endif /* CBT_DISABLE */

#ifdef __cplusplus
}
#endif
#endif /* CBT_REQUEST_TREE_H */
