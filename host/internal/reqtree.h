/* host/internal/reqtree.h — owns the request-tree engine: the one mechanism that
 * turns a request's events into a root span with children, used by both span
 * builders (the MP path, host/builders/mp_subscriber.c, and the CacheBlend
 * path, host/builders/cb_subscriber.c). A builder is a table (a cbt_tree_path:
 * which event opens or closes which span under which parent, which counter a
 * SUBMITTED feeds) plus a few hooks that put attributes where they go, as
 * LMCache's _SPAN_DEFS / _SPAN_PARENTS are, but typed.
 *
 * What the engine does, once for both paths (docs/spans.md has the tables):
 *   sessions    a bounded table keyed by the session (request) id; each entry
 *               holds the root, the open children, the pending-op counters
 *               and the close state;
 *   pairing     an END closes the oldest open child of its op with the same
 *               pairing key (event.pair): first-in first-out per key, so
 *               tensor-parallel workers (one stream each) never cross;
 *   pending     a SUBMITTED adds one to its op's counter; that op's END takes
 *               one off, whether or not its START was seen or built a span;
 *   close rule  the root closes once REQUEST_END has come and every counter
 *               is zero; it ends at the REQUEST_END time (CBT_ROOT_END_REQUEST)
 *               or at the END that cleared the last counter
 *               (CBT_ROOT_END_TRANSFER); either way the root carries
 *               cbt.gpu_tail_ns, how long GPU work outlived REQUEST_END;
 *   late        for a grace window after the root closed, the session stays:
 *               a child that arrives then (a second retrieve pass, a sibling
 *               worker's work) joins the closed root's trace under it, marked
 *               cbt.late, counted; a sibling's REQUEST_END is counted, not an
 *               error;
 *   eviction    a session idle past the idle bound, or the oldest one when
 *               the table or the span pool is full, is ended as incomplete
 *               (CBT_SPANF_INCOMPLETE, cbt.evicted = the reason), exported
 *               and counted; children likewise (idle, or the oldest when a
 *               session's child slots are full). Nothing locks a path out;
 *   shutdown    every open span ends incomplete.
 * "Now" is event time: the largest timestamp seen (a timestamp more than a
 * minute ahead of the wall clock does not move it), so replayed streams with
 * explicit timestamps evict exactly as live ones would.
 *
 * Harvester thread only; the counters are atomics so any thread may read them.
 */
#ifndef CBT_HOST_INTERNAL_TREE_H
#define CBT_HOST_INTERNAL_TREE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cbt/mp.h"
#include "internal/tracer.h"

#define CBT_TREE_OPS_MAX 12     /* child operations a path defines */
#define CBT_TREE_COUNTERS_MAX 2 /* pending-op counters a path defines */
#define CBT_TREE_CHILDREN_MAX 32

/* What an event does on a path. */
typedef enum cbt_tree_act {
    CBT_TREE_NONE = 0,
    CBT_TREE_ROOT_START, /* opens the root */
    CBT_TREE_ROOT_END,   /* the request's logical end */
    CBT_TREE_SUBMIT,     /* arg: counter; one more pending op */
    CBT_TREE_START,      /* arg: op; opens a child */
    CBT_TREE_END,        /* arg: op; closes the child it pairs with */
    CBT_TREE_POINT,      /* a zero-length span named `point` under the root */
    CBT_TREE_HOOK,       /* the path's own handler (cbt_tree_path.on_custom) */
} cbt_tree_act;

typedef struct cbt_tree_rule {
    cbt_event_type type;
    uint8_t act;    /* cbt_tree_act */
    int8_t arg;     /* op or counter index */
    cbt_name point; /* CBT_TREE_POINT: the span name */
} cbt_tree_rule;

/* One child operation. */
typedef struct cbt_tree_op {
    cbt_name span;      /* span name */
    cbt_name logical;   /* registry name of its newest open span; 0: none */
    int8_t parents[2];  /* nests under the newest open span of the first of
                           these ops that has one, else under the root; -1
                           ends the list */
    int8_t counter;     /* the pending counter its END takes one off; -1 none */
    int8_t hist;        /* the path's own use (CB: blend histogram), -1 none */
} cbt_tree_op;

typedef struct cbt_tree cbt_tree;
typedef struct cbt_tree_session cbt_tree_session;

/* A path: the tables and hooks a builder gives the engine. */
typedef struct cbt_tree_path {
    const char *name;        /* "mp", "cb": the subscriber's name */
    cbt_name root_name;      /* "request", "cb.request" */
    cbt_name root_logical;   /* the root's registry name */
    bool lazy_root;          /* MP: a child START without a root opens it */
    bool request_id_attr;    /* CB: request_id on every span */
    bool drop_sampled_out;   /* CB: a sampled-out request or op builds no span
                                (MP builds them unrecorded) */
    bool remote_root_elided; /* CB: a REQUEST_START with a remote parent opens
                                no root; children nest under the remote span */
    bool trace_from_request; /* CB: with no context, the root's trace id is
                                derived from the request id */
    bool root_end_fixed;     /* CB: always CBT_ROOT_END_TRANSFER */
    uint8_t n_ops, n_counters;
    const cbt_tree_op *ops;
    const cbt_tree_rule *rules;
    uint32_t n_rules;
    /* Hooks (may be NULL). `sp` may be NULL where the op built no span. */
    void (*on_child_start)(cbt_tree *e, cbt_tree_session *s, int op, cbt_span *sp,
                           const cbt_event *ev);
    void (*on_child_end)(cbt_tree *e, cbt_tree_session *s, int op, cbt_span *sp,
                         const cbt_event *ev);
    void (*on_root_end_event)(cbt_tree *e, cbt_tree_session *s, const cbt_event *ev);
    void (*on_point)(cbt_tree *e, cbt_tree_session *s, cbt_name point, const cbt_event *ev);
    cbt_status (*on_custom)(cbt_tree *e, const cbt_event *ev);
    /* the path's own counters into *out (MP: timeout and transfer spans) */
    void (*on_stats)(cbt_tree *e, cbt_tree_stats *out);
    void (*on_shutdown)(cbt_tree *e, uint64_t now_ns);
    void (*on_destroy)(cbt_tree *e);
} cbt_tree_path;

/* The engine's counters (cbt_tree_stats is read from these). */
typedef struct cbt_tree_counters {
    _Atomic uint64_t roots_opened, roots_lazy, roots_closed, roots_deferred, roots_remote;
    _Atomic uint64_t children_opened, children_closed, point_events, unmatched_end;
    _Atomic uint64_t no_root, duplicate_request_end, sibling_request_end, request_end_unknown;
    _Atomic uint64_t sessions_full, children_full, incomplete_at_shutdown, sampled_out;
    _Atomic uint64_t late_children, evicted_idle, evicted_full, evicted_span_pool;
    _Atomic uint64_t children_evicted_idle, children_evicted_full, sessions_reused, sessions_live;
} cbt_tree_counters;

/* Resolved options (cbt_tree_options with defaults and environment applied). */
typedef struct cbt_tree_opts {
    uint32_t max_sessions;
    uint32_t root_end; /* cbt_root_end */
    uint64_t idle_ns, grace_ns;
    bool token_trace; /* the MP path builds mp.request.trace from MP_LOOKUP */
} cbt_tree_opts;

/* Fill *out from `o` (may be NULL: all defaults): a zero field takes the
 * environment's value (CBT_MP_ROOT_END, only when `root_end` says the path
 * has a choice; CBT_SESSION_IDLE_MS, CBT_LATE_GRACE_MS, CBT_TOKEN_TRACE) and else the
 * built-in default. A malformed variable is
 * CBT_ERR_INVAL, with a message on stderr naming it. */
cbt_status cbt_tree_opts_resolve_(const cbt_tree_options *o, bool root_end, cbt_tree_opts *out);

/* The span context another path registered for (session, logical) (the
 * CacheBlend root "cb.request" for the MP path's token traces) into *out,
 * and true; false when none is open. A trace-id-only anchor comes back with
 * its span id zero (a child of it is a root in that trace). */
bool cbt_tree_registry_anchor_(cbt_tracer *t, const char *session, size_t len, cbt_name logical,
                               cbt_span_ctx *out);

/* When `s` is a request-tree subscriber (its path's name is s->name): its
 * resolved options into *out, and 1; else 0. For the trace recorder. */
int cbt_tree_sub_opts_(const cbt_subscriber *s, cbt_tree_opts *out);

/* Make an engine for `path` and fill *out as a subscriber that wants the
 * path's event types (plus `extra` types for on_custom, n_extra of them).
 * `pctx` is the path's own state, reachable with cbt_tree_pctx(). */
cbt_status cbt_tree_subscriber_(const cbt_tree_path *path, const cbt_tree_opts *opts, void *pctx,
                                const cbt_event_type *extra, uint32_t n_extra,
                                cbt_subscriber *out);

/* The engine behind a subscriber made by cbt_tree_subscriber_ for `path`
 * (NULL `sub`: the process-wide tracer's). CBT_ERR_NOT_FOUND / INVAL /
 * NOT_INITIALIZED as cbt_mp_stats_get says. */
cbt_status cbt_tree_find_(const cbt_subscriber *sub, const cbt_tree_path *path, cbt_tree **out);

/* The one filling of cbt_tree_stats: every counter of the engine behind
 * (sub, path), as cbt_tree_find_ finds it, and the path's own (on_stats),
 * into the complete struct *full (version and size cbt's own). */
cbt_status cbt_tree_stats_fill_(const cbt_subscriber *sub, const cbt_tree_path *path,
                                cbt_tree_stats *full);

/* The stats getters (cbt_mp_stats_get, cbt_cb_stats_get): the header check,
 * cbt_tree_stats_fill_, then at most caller->size bytes into *caller (the
 * out-struct rule, internal/abi.h). */
cbt_status cbt_tree_stats_get_(const cbt_subscriber *sub, const cbt_tree_path *path,
                               cbt_tree_stats *caller);

/* ---- for the paths' hooks ---------------------------------------------- */

/* A hit rate as both paths set them: part / whole, 0.0 when whole is 0
 * (LMCache divides by `whole or 1`; docs/spans.md, intended differences). */
static inline double cbt_tree_rate(int64_t part, int64_t whole)
{
    return whole != 0 ? (double)part / (double)whole : 0.0;
}

void *cbt_tree_pctx(cbt_tree *e);
cbt_tracer *cbt_tree_tracer(cbt_tree *e);
/* The root span of the session (NULL when none is open or it is elided). */
cbt_span *cbt_tree_root(cbt_tree_session *s);
/* The newest open span of `op` in the session, or NULL. */
cbt_span *cbt_tree_newest(cbt_tree_session *s, int op);
/* Per-session scratch the path may use (zeroed when the session starts). */
int64_t *cbt_tree_scratch(cbt_tree_session *s); /* 4 values */
/* The session's root context, open or (within the grace window) closed: where
 * a span of the path's own (timeout, ...) nests. NULL when there is none.
 * *late: the root has closed (the span is a late child, counted). */
const cbt_span_ctx *cbt_tree_anchor_of(cbt_tree *e, const char *session, size_t len, bool *late);

#endif /* CBT_HOST_INTERNAL_TREE_H */
