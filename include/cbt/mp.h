/* cbt/mp.h — the MP-path subscriber: events -> "request", mp.* spans.
 *
 * A table on the request-tree engine (docs/spans.md, "The MP path", has the
 * close-rule table; cbt/request_tree.h the options):
 *   - mp.lookup_prefetch / mp.store / mp.retrieve from their START/END pairs,
 *     with both events' metadata as typed attributes plus session_id;
 *   - the root "request" opens at MP_REQUEST_START, or lazily at the first
 *     child START;
 *   - MP_STORE_SUBMITTED / MP_RETRIEVE_SUBMITTED add a pending op, the
 *     matching END takes it off (with or without its START);
 *   - MP_REQUEST_END closes the root at once when nothing is pending;
 *     otherwise the END that clears the last pending op closes it, stamped
 *     with the REQUEST_END time (CBT_ROOT_END_REQUEST, the seed's rule, the
 *     default) or with that END's time (CBT_ROOT_END_TRANSFER, LMCache
 *     0.5.6's rule; CBT_MP_ROOT_END=transfer_end). cbt.gpu_tail_ns on the
 *     root says how long the GPU work outlived REQUEST_END;
 *   - MP_LOOKUP_PREFETCH_END sets on the root hit_tokens, requested_tokens,
 *     hit_rate, l1_hit_tokens, l2_hit_tokens, l1_hit_rate, l2_hit_rate,
 *     LMCache 0.5.7's apc_covered_tokens, prompt_tokens, engine_hit_tokens,
 *     request_hit_tokens, engine_hit_rate, request_hit_rate, l1_hit_keys,
 *     l2_hit_keys and early_exit_reason, each only when the event carried
 *     its inputs (a count its key, a rate both keys; 0.0 over a 0
 *     denominator): never a 0 nobody measured;
 *   - with token traces on (cbt_tree_options.token_trace, CBT_TOKEN_TRACE):
 *     MP_LOOKUP carrying token_ids makes a zero-length "mp.request.trace"
 *     (session_id, lmcache.model, lmcache.input_ids) under "request", else
 *     the open "cb.request", else a root; off, MP_LOOKUP is not taken;
 *   - TIMEOUT_RAISED: a zero-length "timeout" span, status ERROR, with an
 *     "exception" span event (exception.type, .message, .stacktrace), under
 *     the session's root when there is one, else a root of its own;
 *   - MP_TRANSFER_PHASE_SAMPLES (one sample per event; docs/spans.md):
 *     transfer.kernel_interval / transfer.staging under the mp.store /
 *     mp.retrieve whose transfer_key they name.
 * START/END pair on (session, operation, event.pair), first-in first-out, so
 * two concurrent stores of one request (tensor-parallel workers sharing the
 * id, on different streams) never cross. A child that starts within the
 * grace window after its root closed joins that trace under the closed root
 * (cbt.late = true). Sessions idle past the idle bound, or the oldest when
 * the table or the span pool is full, are ended incomplete and counted, so
 * no burst of unfinished requests locks the path out.
 * The event that opens the root may carry the caller's trace context
 * (cbt_event_trace_set, cbt/event.h): the root then joins that trace — a
 * remote child of the caller's span, or a root of a trace-id-only (Option B)
 * context — so an MP request shows inside the vLLM request that made it
 * (docs/distributed.md). Without one the root starts a fresh trace.
 *
 * CBT_DISABLE (defined before the first cbt include): the types stay
 * defined; every call is a static inline no-op referencing no cbt symbol,
 * returning CBT_OK with an empty subscriber (no callbacks) and zeroed stats.
 */
#ifndef CBT_MP_H
#define CBT_MP_H

#include <stdint.h>
#include <string.h>
#include "cbt/api.h"
#include "cbt/request_tree.h"
#include "cbt/span.h"
#include "cbt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CBT_MP_CHILDREN_MAX 32 /* open child spans per session; the oldest ends to make room */

/* The MP subscriber's counters: the request-tree engine's struct
 * (cbt/request_tree.h), under the name it had when it was the MP path's own
 * (its versions 1 and 2 are cbt_tree_stats's first fields). */
typedef cbt_tree_stats cbt_mp_stats;
#define CBT_MP_STATS_VERSION CBT_TREE_STATS_VERSION
#define cbt_mp_stats_version_ CBT_TREE_STATS_VERSION /* for CBT_STRUCT_INIT */

#ifdef CBT_DISABLE
/* ==== CBT_DISABLE: the calls below compile to no-ops (see the top) ======== */
static inline cbt_status cbt_mp_subscriber_create_into(uint32_t max_sessions,
                                                       cbt_subscriber *out)
{
    (void)max_sessions, (void)out; /* left as the wrapper made it: an empty subscriber */
    return CBT_OK;
}
static inline cbt_status cbt_mp_subscriber_create_opts_into(const cbt_tree_options *opts,
                                                            cbt_subscriber *out)
{
    (void)opts, (void)out; /* left as the wrapper made it: an empty subscriber */
    return CBT_OK;
}
static inline cbt_status cbt_mp_stats_get(const cbt_subscriber *sub, cbt_tree_stats *out)
{
    (void)sub;
    cbt_tree_stats_zero_(out); /* all zero, written in full (cbt/request_tree.h) */
    return CBT_OK;
}
#else /* the calls */

/* cbt_mp_subscriber_create (below, an inline wrapper around this entry
 * point): fill *out with an MP subscriber tracking at most `max_sessions`
 * sessions at once (0 = 4096). Register it with cbt_add_subscriber();
 * cbt_init() does so itself when cbt_config.mp_subscriber is set. */
CBT_API cbt_status cbt_mp_subscriber_create_into(uint32_t max_sessions, cbt_subscriber *out);

/* The same with every option of cbt/request_tree.h (NULL: all defaults):
 * the root-end rule, the idle bound and the late-children window.
 * CBT_ERR_INVAL for a bad option or environment variable (named on stderr),
 * CBT_ERR_VERSION for an options struct from a newer header. */
CBT_API cbt_status cbt_mp_subscriber_create_opts_into(const cbt_tree_options *opts,
                                                      cbt_subscriber *out);

/* Counters (cbt_tree_stats, cbt/request_tree.h) of the MP subscriber
 * installed in the process-wide tracer (or of `sub` when given). Safe from
 * any thread (relaxed reads). CBT_ERR_INVAL for a NULL out or a `sub` that
 * is not one; CBT_ERR_VERSION when out->size is smaller than the header (set
 * version and size: CBT_STRUCT_INIT); CBT_ERR_NOT_INITIALIZED without a
 * tracer; CBT_ERR_NOT_FOUND when none is installed. */
CBT_API cbt_status cbt_mp_stats_get(const cbt_subscriber *sub, cbt_tree_stats *out);

#endif /* CBT_DISABLE */

/* Inline, so that only this header's sizeof of cbt_subscriber is written:
 * *out zeroed, its version and size set, then the _into entry point fills at
 * most that size (cbt.h, "versioned structs"). */
static inline cbt_status cbt_mp_subscriber_create(uint32_t max_sessions, cbt_subscriber *out)
{
    if (out) {
        memset(out, 0, sizeof *out);
        out->version = CBT_SUBSCRIBER_VERSION;
        out->size = (uint32_t)sizeof *out;
    }
    return cbt_mp_subscriber_create_into(max_sessions, out);
}

static inline cbt_status cbt_mp_subscriber_create_opts(const cbt_tree_options *opts,
                                                       cbt_subscriber *out)
{
    if (out) {
        memset(out, 0, sizeof *out);
        out->version = CBT_SUBSCRIBER_VERSION;
        out->size = (uint32_t)sizeof *out;
    }
    return cbt_mp_subscriber_create_opts_into(opts, out);
}

#ifdef __cplusplus
}
#endif
#endif /* CBT_MP_H */
