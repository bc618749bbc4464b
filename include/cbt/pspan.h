/* cbt/pspan.h — spans a process opens and closes itself, with ids known at
 * once: the plugin side of a CacheBlend request (scheduler and worker).
 *
 * The server side builds its spans from events on the harvester thread
 * (cbt/cb.h, cbt/mp.h); span ids exist only once the harvester has run. A
 * process that must pass a span's context on — the scheduler putting
 * cb.lookup.rpc's traceparent into the lookup RPC, the worker putting
 * cb.start_load_kv's into the retrieve RPC — needs the id at the moment it
 * sends. A pspan draws its span id on the calling thread, publishes a
 * CBT_EV_SPAN_BEGIN event carrying (parent, id, name, kind), and later a
 * CBT_EV_SPAN_END with the same id; the pspan subscriber that cbt_init()
 * installs turns the pair into one span. So:
 *
 *   cbt_trace_context tc;                      // the request's root decision
 *   cbt_context_begin(NULL, NULL, rid, len, &sampler, &tc, NULL);
 *   cbt_pspan req, sched, rpc;
 *   cbt_pspan_begin(&req, CBT_N_CB_REQUEST, CBT_SPAN_KIND_SERVER, rid, &tc.ctx, NULL, 0);
 *   cbt_pspan_begin(&sched, CBT_N_CB_SCHEDULE, CBT_SPAN_KIND_INTERNAL, rid, &req.ctx, NULL, 0);
 *   cbt_pspan_begin(&rpc, CBT_N_CB_LOOKUP_RPC, CBT_SPAN_KIND_CLIENT, rid, &sched.ctx, NULL, 0);
 *   cbt_traceparent_format(&rpc.ctx, tp);      // into the RPC's trace_context
 *   ...
 *   cbt_meta m[] = {cbt_meta_i64(CBT_N_N_POLLS, polls)};
 *   cbt_pspan_end(&rpc, m, 1);
 *
 * The seed's plugin tree (cacheblend-v3-observability §2) and its names:
 *   cb.request        scheduler root      model, world_size, n_prompt_tokens
 *   cb.schedule       scheduler
 *   cb.lookup.rpc     scheduler, CLIENT   n_polls   (server: cb.lookup under it)
 *   cb.build_meta     scheduler
 *   cb.execute        worker              parent: cb.request, via the metadata
 *   cb.start_load_kv  worker, CLIENT      (server: cb.retrieve under it)
 *   cb.model_forward  worker
 *   cb.full_recomp    worker, GPU         cbt_pspan_begin_on / _end_on
 *   cb.check          worker, GPU         imp_count, recomp_ratio
 *   cb.partial        worker, GPU         dispatch ("flex" | "unified"), imp_empty
 * The GPU ones are timed by the stream: their BEGIN/END are published with
 * cbt_publish_on_stream(), so a CUDA stream stamps them with CUDA events and
 * the CPU backend's worker thread with the time it reached them.
 *
 * Parents. `parent` is any context: a pspan of this process (&p.ctx), one
 * extracted from an RPC (tc.ctx with tc.remote), or the request's derived
 * trace (tc.ctx from cbt_context_begin without a remote parent: trace id only,
 * span id zero: the span is a root of that trace). NULL: a root whose trace
 * id is derived from request_id (Option B) and sampled. Every span carries
 * request_id as an attribute.
 *
 * Sampling. A pspan follows its parent's sampled bit. Sampled out, begin and
 * end publish nothing and draw nothing: ctx is the parent's ids with the
 * sampled bit clear, so the decision still travels in a traceparent; a
 * begin/end pair costs 5 ns (bench_publish "pspan_sampled_out").
 *
 * Thread safety: a pspan is a plain value owned by its caller; begin and end
 * may run on different threads. Ids come from a per-thread generator seeded
 * from the OS, reseeded in a forked child. With cbt not initialised, begin still fills ctx (so contexts
 * keep flowing) and returns CBT_ERR_NOT_INITIALIZED.
 *
 * CBT_DISABLE (defined before the first cbt include): the types stay
 * defined and every call is a static inline no-op referencing no cbt
 * symbol, returning CBT_OK: begin zeroes the pspan (ctx all zero, not open,
 * not sampled), end publishes nothing, new ids are zero, stats are zero.
 */
#ifndef CBT_PSPAN_H
#define CBT_PSPAN_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include "cbt/api.h"
#include "cbt/event.h"
#include "cbt/span.h"
#include "cbt/status.h"
#include "cbt/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cbt_pspan {
    cbt_span_ctx ctx;     /* this span's ids: format it into the RPCs it makes */
    char request_id[CBT_SESSION_MAX];
    cbt_name name;
    uint8_t open;         /* 1 between a successful begin and its end */
    uint8_t sampled;      /* 0: begin/end publish nothing */
    cbt_stream *stream;   /* begun with _begin_on: the stream that times it */
} cbt_pspan;

/* What the pspan subscriber saw (the process-wide tracer's). */
typedef struct cbt_pspan_stats {
    uint32_t version, size; /* CBT_STRUCT_INIT(cbt_pspan_stats): what the caller knows (cbt.h) */
    uint64_t opened, closed;
    uint64_t unmatched_end;          /* SPAN_END whose BEGIN never arrived (or was dropped) */
    uint64_t duplicate_begin;        /* a second BEGIN with an id already open: ignored */
    uint64_t table_full;             /* BEGIN dropped: 4096 pspans open, none over a minute */
    uint64_t evicted;                /* open pspans over a minute old, ended incomplete (at
                                        their start) to make room: their END was most likely
                                        dropped */
    uint64_t malformed;              /* SPAN_BEGIN without a span id or a name: ignored */
    uint64_t incomplete_at_shutdown;
} cbt_pspan_stats;
#define CBT_PSPAN_STATS_VERSION 1u
#define cbt_pspan_stats_version_ CBT_PSPAN_STATS_VERSION /* for CBT_STRUCT_INIT */
CBT_ASSERT_NO_TAIL_PADDING_(cbt_pspan_stats, incomplete_at_shutdown);

#ifdef CBT_DISABLE
/* ==== CBT_DISABLE: the calls below compile to no-ops (see the top) ======== */
static inline cbt_status cbt_pspan_begin(cbt_pspan *s, cbt_name name, cbt_span_kind kind,
                                         const char *request_id, const cbt_span_ctx *parent,
                                         const cbt_meta *meta, uint32_t n_meta)
{
    (void)name, (void)kind, (void)request_id, (void)parent, (void)meta, (void)n_meta;
    if (s)
        memset(s, 0, sizeof *s);
    return CBT_OK;
}
static inline cbt_status cbt_pspan_end(cbt_pspan *s, const cbt_meta *meta, uint32_t n_meta)
{
    (void)s, (void)meta, (void)n_meta;
    return CBT_OK;
}
static inline cbt_status cbt_pspan_begin_on(cbt_pspan *s, cbt_stream *st, cbt_name name,
                                            cbt_span_kind kind, const char *request_id,
                                            const cbt_span_ctx *parent, const cbt_meta *meta,
                                            uint32_t n_meta)
{
    (void)st, (void)name, (void)kind, (void)request_id, (void)parent, (void)meta, (void)n_meta;
    if (s)
        memset(s, 0, sizeof *s);
    return CBT_OK;
}
static inline cbt_status cbt_pspan_end_on(cbt_pspan *s, const cbt_meta *meta, uint32_t n_meta)
{
    (void)s, (void)meta, (void)n_meta;
    return CBT_OK;
}
static inline void cbt_pspan_new_id(uint8_t out[8])
{
    if (out)
        memset(out, 0, 8);
}
static inline cbt_status cbt_pspan_stats_get(cbt_pspan_stats *out)
{
    if (out) { /* all zero, written in full (the out-struct rule, cbt.h) */
        memset(out, 0, sizeof *out);
        out->version = CBT_PSPAN_STATS_VERSION;
        out->size = (uint32_t)sizeof *out;
    }
    return CBT_OK;
}
#else /* the calls */

/* Open a span now (timed on the CPU). meta[0..n_meta) become attributes
 * (at most CBT_EVENT_META_MAX - 1: one slot stays free for the NVTX range id;
 * request_id travels as the event's session). Errors: CBT_ERR_INVAL (NULL s,
 * name 0, a kind past CBT_SPAN_KIND_CONSUMER, n_meta too large, meta NULL
 * with n_meta), CBT_ERR_SESSION_TOO_LONG, CBT_ERR_META_TOO_LONG (a
 * cbt_meta_str that did not fit), CBT_ERR_NOT_INITIALIZED, or the publish's
 * status (CBT_ERR_FULL: dropped and counted). s->ctx is valid whenever the
 * arguments were. A sampled-out pspan returns CBT_OK with or without a
 * tracer: there is nothing to publish either way. */
CBT_API cbt_status cbt_pspan_begin(cbt_pspan *s, cbt_name name, cbt_span_kind kind,
                                   const char *request_id, const cbt_span_ctx *parent,
                                   const cbt_meta *meta, uint32_t n_meta);

/* Close it now; meta adds attributes (a bool "failed" = true, a bool
 * "success" = false, or a non-empty "error" / "exception" string also marks
 * the span's status ERROR). CBT_ERR_INVAL when s was not open (or was begun on a
 * stream: use _end_on). A refused value (CBT_ERR_META_TOO_LONG, INVAL for
 * n_meta) leaves the span open so the caller can end it again; a dropped END
 * (CBT_ERR_FULL) closes it here; the recorded span is ended incomplete at
 * shutdown, or sooner when the open table is full and it is a minute old. Closing a sampled-out span is CBT_OK and publishes nothing. */
CBT_API cbt_status cbt_pspan_end(cbt_pspan *s, const cbt_meta *meta, uint32_t n_meta);

/* The same, timed by `st`: the begin and end happen when the stream reaches
 * them (CUDA events on a CUDA stream). End a span begun on a stream with
 * cbt_pspan_end_on on the same stream. */
CBT_API cbt_status cbt_pspan_begin_on(cbt_pspan *s, cbt_stream *st, cbt_name name,
                                      cbt_span_kind kind, const char *request_id,
                                      const cbt_span_ctx *parent, const cbt_meta *meta,
                                      uint32_t n_meta);
CBT_API cbt_status cbt_pspan_end_on(cbt_pspan *s, const cbt_meta *meta, uint32_t n_meta);

/* A fresh non-zero span id from the calling thread's generator. */
CBT_API void cbt_pspan_new_id(uint8_t out[8]);

/* The pspan subscriber's counters (the process-wide tracer's). CBT_ERR_INVAL
 * for NULL; CBT_ERR_VERSION when out->size is smaller than the header (set
 * version and size: CBT_STRUCT_INIT); CBT_ERR_NOT_INITIALIZED without a
 * tracer. */
CBT_API cbt_status cbt_pspan_stats_get(cbt_pspan_stats *out);

#endif /* CBT_DISABLE */

#ifdef __cplusplus
}
#endif
#endif /* CBT_PSPAN_H */
