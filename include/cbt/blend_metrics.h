/* cbt/blend_metrics.h — the lmcache_blend.* metrics: counters and duration
 * histograms of the CacheBlend server path, aligned with its spans.
 *
 * Seed (cacheblend-v3-observability §3, §6.4): the blend server keeps the
 * lmcache_blend.* counters (lookup_requests, lookup_hit_tokens, ...) and the
 * dashboards put them next to the traces, aligned on request_id. In cbt the
 * CacheBlend subscriber (cbt/cb.h) feeds them as it closes spans, on the
 * harvester thread, so a metric and the span it came from agree exactly: the
 * lookup_duration histogram observes each cb.lookup span's duration, and its
 * exemplar names that span's trace id, span id and request_id.
 *
 * One set per tracer: cbt_init() creates it, cbt_shutdown() frees it after
 * the sinks (so an exporter's last export at shutdown still reads it). The
 * OTLP exporter (cbt/otlp.h) sends it to /v1/metrics as cumulative
 * monotonic sums and explicit-bucket histograms in milliseconds.
 *
 * Thread safety: updates (harvester thread) and snapshots (any thread) take
 * the set's own mutex; both are short, fixed-size copies. No allocation after
 * create.
 *
 * CBT_DISABLE (defined before the first cbt include): the types, enums and
 * bounds stay defined and every call is a static inline no-op referencing
 * no cbt symbol: there is no set (create gives NULL, current is NULL),
 * updates are dropped, a snapshot is all zero, names are "", and
 * cbt_blend_bounds_ms() still returns the CBT_BLEND_BOUNDS_MS array.
 */
#ifndef CBT_BLEND_METRICS_H
#define CBT_BLEND_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "cbt/api.h"
#include "cbt/event.h"
#include "cbt/span.h"
#include "cbt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(enum suffix, OTLP metric name, unit, description). Order is ABI. All are
 * monotonic counters (cumulative sums). */
#define CBT_BLEND_COUNTERS(X)                                                                \
    X(LOOKUP_REQUESTS, "lmcache_blend.lookup_requests", "{request}",                        \
      "CacheBlend lookups completed (cb.lookup spans ended)")                               \
    X(LOOKUP_REQUESTED_TOKENS, "lmcache_blend.lookup_requested_tokens", "{token}",          \
      "tokens asked for by lookups")                                                        \
    X(LOOKUP_HIT_TOKENS, "lmcache_blend.lookup_hit_tokens", "{token}",                      \
      "tokens found reusable: prefix plus non-prefix hits")                                 \
    X(LOOKUP_PREFIX_HIT_TOKENS, "lmcache_blend.lookup_prefix_hit_tokens", "{token}",        \
      "hit tokens reused as a prefix")                                                      \
    X(LOOKUP_NON_PREFIX_HIT_TOKENS, "lmcache_blend.lookup_non_prefix_hit_tokens", "{token}", \
      "hit tokens reused at a shifted position (re-RoPE)")                                  \
    X(LOOKUP_FINGERPRINT_HITS, "lmcache_blend.lookup_fingerprint_hits", "{match}",          \
      "fingerprint matches found by lookups")                                               \
    X(LOOKUP_STORAGE_HITS, "lmcache_blend.lookup_storage_hits", "{chunk}",                  \
      "matched chunks present in storage")                                                  \
    X(LOOKUP_STALE_CHUNKS, "lmcache_blend.lookup_stale_chunks", "{chunk}",                  \
      "matched chunks found stale")                                                         \
    X(RETRIEVE_REQUESTS, "lmcache_blend.retrieve_requests", "{request}",                    \
      "retrieves completed (cb.retrieve spans ended)")                                      \
    X(RETRIEVE_FAILURES, "lmcache_blend.retrieve_failures", "{request}",                    \
      "retrieves that ended failed (failed, success = false, error)")                       \
    X(RETRIEVE_NOOPS, "lmcache_blend.retrieve_noops", "{request}",                          \
      "retrieves that had nothing to do (CB_RETRIEVE_NOOP)")                                \
    X(SCATTER_TOKENS, "lmcache_blend.scatter_tokens", "{token}",                            \
      "tokens written into the paged KV cache by cb.scatter")                               \
    X(SCATTER_SLOT_WRITES, "lmcache_blend.scatter_slot_writes", "{slot}",                   \
      "slot writes done by cb.scatter")                                                     \
    X(SHIFTED_TOKENS, "lmcache_blend.shifted_tokens", "{token}",                            \
      "scattered tokens re-RoPE'd to a new position")                                       \
    X(L2_LOAD_CHUNKS, "lmcache_blend.l2_load_chunks", "{chunk}",                            \
      "256-token chunks loaded from L2 by cb.l2_load")                                      \
    X(L2_LOAD_BYTES, "lmcache_blend.l2_load_bytes", "By", "bytes loaded from L2")           \
    X(CHUNKS_EVICTED, "lmcache_blend.chunks_evicted", "{chunk}",                            \
      "chunks evicted (CB_CHUNKS_EVICTED)")                                                 \
    X(FINGERPRINTS_REGISTERED, "lmcache_blend.fingerprints_registered", "{fingerprint}",    \
      "fingerprints registered (CB_FINGERPRINTS_REGISTERED)")

/* X(enum suffix, OTLP metric name, description). Durations in ms of the
 * span of the same name; explicit buckets CBT_BLEND_BOUNDS_MS. */
#define CBT_BLEND_HISTOGRAMS(X)                                                        \
    X(LOOKUP, "lmcache_blend.lookup_duration", "cb.lookup span duration")               \
    X(FINGERPRINT_MATCH, "lmcache_blend.fingerprint_match_duration",                    \
      "cb.fingerprint_match span duration")                                             \
    X(COORDINATOR_MATCH, "lmcache_blend.coordinator_match_duration",                    \
      "cb.coordinator_match span duration")                                             \
    X(SPARSE_PREFETCH, "lmcache_blend.sparse_prefetch_duration",                        \
      "cb.sparse_prefetch span duration")                                               \
    X(L2_LOAD, "lmcache_blend.l2_load_duration", "cb.l2_load span duration")            \
    X(RETRIEVE, "lmcache_blend.retrieve_duration", "cb.retrieve span duration")         \
    X(SCATTER, "lmcache_blend.scatter_duration", "cb.scatter span duration")

typedef enum cbt_blend_counter {
#define CBT_BC_ENUM_(e, n, u, d) CBT_BC_##e,
    CBT_BLEND_COUNTERS(CBT_BC_ENUM_)
#undef CBT_BC_ENUM_
    CBT_BC_COUNT_
} cbt_blend_counter;

typedef enum cbt_blend_hist {
#define CBT_BH_ENUM_(e, n, d) CBT_BH_##e,
    CBT_BLEND_HISTOGRAMS(CBT_BH_ENUM_)
#undef CBT_BH_ENUM_
    CBT_BH_COUNT_
} cbt_blend_hist;

/* Bucket upper bounds (ms, inclusive as OTLP's explicit_bounds): bucket i
 * counts values v with bounds[i-1] < v <= bounds[i]; the last bucket counts
 * v > bounds[CBT_BLEND_N_BOUNDS - 1]. */
#define CBT_BLEND_N_BOUNDS 16
#define CBT_BLEND_BOUNDS_MS                                                               \
    { 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, \
      2500.0, 10000.0 }

/* The most recent observation that fell into one bucket, with the span it
 * came from: OTLP's Exemplar (time, value, trace/span id, and request_id as
 * its filtered attribute). valid = 0 for a bucket never hit. */
typedef struct cbt_blend_exemplar {
    uint64_t time_ns; /* the span's end, unix ns */
    double value_ms;
    uint8_t trace_id[16];
    uint8_t span_id[8];
    char request_id[CBT_SESSION_MAX]; /* "" when the span had none */
    uint8_t valid;
} cbt_blend_exemplar;

typedef struct cbt_blend_hist_point {
    uint64_t count;
    double sum_ms, min_ms, max_ms; /* min/max are 0 while count == 0 */
    uint64_t buckets[CBT_BLEND_N_BOUNDS + 1];
    cbt_blend_exemplar exemplars[CBT_BLEND_N_BOUNDS + 1];
} cbt_blend_hist_point;

/* A consistent copy of the whole set at one moment. Cumulative: every value
 * counts from start_ns (when the set was created). */
typedef struct cbt_blend_snapshot {
    uint64_t start_ns; /* unix ns: the set's creation */
    uint64_t time_ns;  /* unix ns: when this copy was taken */
    uint64_t counters[CBT_BC_COUNT_];
    cbt_blend_hist_point hists[CBT_BH_COUNT_];
} cbt_blend_snapshot;

typedef struct cbt_blend_metrics cbt_blend_metrics;

#ifdef CBT_DISABLE
/* ==== CBT_DISABLE: the calls below compile to no-ops (see the top) ======== */
static inline cbt_status cbt_blend_metrics_create(cbt_blend_metrics **out)
{
    if (out)
        *out = NULL;
    return CBT_OK;
}
static inline void cbt_blend_metrics_free(cbt_blend_metrics *m) { (void)m; }
static inline cbt_blend_metrics *cbt_blend_metrics_current(void) { return NULL; }
static inline void cbt_blend_count(cbt_blend_metrics *m, cbt_blend_counter c, uint64_t n)
{
    (void)m, (void)c, (void)n;
}
static inline void cbt_blend_observe(cbt_blend_metrics *m, cbt_blend_hist h, double ms,
                                     const cbt_span *from)
{
    (void)m, (void)h, (void)ms, (void)from;
}
static inline cbt_status cbt_blend_snapshot_take(cbt_blend_metrics *m, cbt_blend_snapshot *out)
{
    (void)m;
    if (out)
        memset(out, 0, sizeof *out);
    return CBT_OK;
}
static inline const char *cbt_blend_counter_name(cbt_blend_counter c)
{
    (void)c;
    return "";
}
static inline const char *cbt_blend_counter_unit(cbt_blend_counter c)
{
    (void)c;
    return "";
}
static inline const char *cbt_blend_counter_desc(cbt_blend_counter c)
{
    (void)c;
    return "";
}
static inline const char *cbt_blend_hist_name(cbt_blend_hist h)
{
    (void)h;
    return "";
}
static inline const char *cbt_blend_hist_desc(cbt_blend_hist h)
{
    (void)h;
    return "";
}
static inline const double *cbt_blend_bounds_ms(void)
{
    static const double bounds[CBT_BLEND_N_BOUNDS] = CBT_BLEND_BOUNDS_MS;
    return bounds;
}
#else /* the calls */

/* A fresh set, every value zero, start_ns = now. CBT_ERR_INVAL / NOMEM. */
CBT_API cbt_status cbt_blend_metrics_create(cbt_blend_metrics **out);
CBT_API void cbt_blend_metrics_free(cbt_blend_metrics *m);

/* The set of the process-wide tracer, or NULL when cbt is not initialised.
 * The pointer stays valid until cbt_shutdown() returns. */
CBT_API cbt_blend_metrics *cbt_blend_metrics_current(void);

/* counter += n. Out-of-range `c` or a NULL `m` is ignored. */
CBT_API void cbt_blend_count(cbt_blend_metrics *m, cbt_blend_counter c, uint64_t n);

/* Record a duration. When `from` is not NULL it becomes the exemplar of the
 * value's bucket (its trace and span ids, its request_id attribute, its end
 * time, or now when it is still open). NaN, infinite and negative values are
 * counted as 0 ms. */
CBT_API void cbt_blend_observe(cbt_blend_metrics *m, cbt_blend_hist h, double ms,
                               const cbt_span *from);

/* Copy everything into *out (time_ns = now). CBT_ERR_INVAL on NULL. */
CBT_API cbt_status cbt_blend_snapshot_take(cbt_blend_metrics *m, cbt_blend_snapshot *out);

/* Names, units and descriptions, for exporters: NULL when out of range. */
CBT_API const char *cbt_blend_counter_name(cbt_blend_counter c);
CBT_API const char *cbt_blend_counter_unit(cbt_blend_counter c);
CBT_API const char *cbt_blend_counter_desc(cbt_blend_counter c);
CBT_API const char *cbt_blend_hist_name(cbt_blend_hist h);
CBT_API const char *cbt_blend_hist_desc(cbt_blend_hist h);
/* The CBT_BLEND_N_BOUNDS bucket bounds in ms, ascending. */
CBT_API const double *cbt_blend_bounds_ms(void);

#endif /* CBT_DISABLE */

#ifdef __cplusplus
}
#endif
#endif /* CBT_BLEND_METRICS_H */
