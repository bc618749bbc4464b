/* cbt/context.h — W3C trace context across an RPC, and head sampling.
 *
 * A process uses the same small API on both sides of its RPC:
 *
 *   client (inject):   cbt_traceparent_format(&span->ctx, buf) and send buf
 *                      (plus the tracestate it received, unchanged) in the
 *                      request's optional trace_context field.
 *   server (extract):  cbt_context_begin(traceparent, tracestate, request_id,
 *                      len, &sampler, &tc, &why) then start the request's
 *                      root span with cbt_context_parent(&tc) as its parent
 *                      and call cbt_span_adopt_context(span, &tc).
 *
 * Option A (seed §5): a valid traceparent arrived; the new span is a remote
 * child of the caller's span (tc.remote = 1). Option B: none arrived, or it
 * was rejected; the trace id is derived from the request id
 * (cbt_trace_id_from_request), so every process's spans for one request land
 * in one trace as siblings (no cross-process parent links). Either way the
 * caller records request_id as a span attribute (cbt_span_set_str), so the
 * fallback always works. See docs/distributed.md.
 *
 * Extraction is strict (W3C Trace Context, version 00 only):
 *   "00-" 32 lowercase hex "-" 16 lowercase hex "-" 2 lowercase hex,
 *   exactly 55 bytes; trace id and span id not all zero; flags only the
 *   known bits 0x01 (sampled) and 0x02 (random, Level 2). Anything else —
 *   other versions (ff included), uppercase hex, whitespace, extra bytes,
 *   an embedded NUL — is CBT_ERR_BAD_TRACEPARENT and the request starts a
 *   fresh trace. The transport is expected to have trimmed header
 *   whitespace. tracestate is opaque: up to 512 printable ASCII characters
 *   (0x20..0x7e); otherwise CBT_ERR_BAD_TRACESTATE and it is dropped while
 *   the traceparent stays in use.
 *
 * Head sampling: the root (the scheduler) decides with a cbt_sampler; the
 * decision travels as the sampled flag; children follow their parent
 * (parentbased_*). OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG select it.
 *
 * Costs: every call here is a bounded, allocation-free pass over at most a
 * few hundred bytes; no locks, no global state (cbt_sampler_from_env reads
 * the environment and should be called once at start-up). All functions are
 * thread-safe. None of them needs a tracer, and none calls into the rest of
 * cbt, so a process may use them with tracing disabled.
 *
 * CBT_DISABLE (defined before the first cbt include) compiles them out too:
 * the types and constants stay defined and every call is a static inline
 * no-op referencing no cbt symbol. Nothing is injected or extracted: a
 * formatted traceparent is "", every parsed or extracted context and
 * derived trace id is all zero (so cbt_context_sampled() is 0, and
 * cbt_context_parent() NULL), sampling decides false, calls return CBT_OK.
 */
#ifndef CBT_CONTEXT_H
#define CBT_CONTEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "cbt/api.h"
#include "cbt/span.h"
#include "cbt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CBT_TRACEPARENT_LEN 55   /* "00-" + 32 + "-" + 16 + "-" + 2 */
#define CBT_TRACESTATE_MAX 512   /* characters, without the NUL */

#define CBT_TRACE_FLAG_SAMPLED 0x01u
#define CBT_TRACE_FLAG_RANDOM 0x02u  /* W3C Level 2: trace id's right 56 bits are random */
#define CBT_TRACE_FLAGS_KNOWN 0x03u  /* what extraction accepts */

/* What arrived with a request (or was derived for it). */
typedef struct cbt_trace_context {
    cbt_span_ctx ctx;   /* remote: the caller's span; else the derived trace id,
                           span id zero */
    char tracestate[CBT_TRACESTATE_MAX + 1]; /* NUL-terminated; "" when none */
    uint8_t has_state;  /* tracestate holds an accepted, non-empty value */
    uint8_t remote;     /* 1: ctx came from a valid traceparent (Option A) */
} cbt_trace_context;

/* A head sampler (cbt_sampler_parse and the rest, below). */
typedef enum cbt_sampler_kind {
    CBT_SAMPLER_ALWAYS_ON = 0,
    CBT_SAMPLER_ALWAYS_OFF,
    CBT_SAMPLER_TRACEIDRATIO,
    CBT_SAMPLER_PARENTBASED_ALWAYS_ON,  /* OpenTelemetry's default */
    CBT_SAMPLER_PARENTBASED_ALWAYS_OFF,
    CBT_SAMPLER_PARENTBASED_TRACEIDRATIO,
    CBT_SAMPLER_KIND_COUNT_
} cbt_sampler_kind;

typedef struct cbt_sampler {
    cbt_sampler_kind kind;
    double ratio; /* [0, 1]; used by the two traceidratio kinds */
} cbt_sampler;

/* ---- sampled-out requests cost what the disabled path costs -------------------- */

/* 1 when tc's request is sampled in. A process skips a sampled-out request
 * with one branch before building anything:
 *
 *   if (cbt_context_sampled(&tc)) { cbt_event_init(...); cbt_publish(&e); }
 *
 * and hands its kernels an untraced span (cbt_launch_info.sampled_out = 1:
 * the ring pointer is NULL, the macros write nothing). No event is queued
 * and no ring record written for it; bench_publish measures the branch. */
static inline int cbt_context_sampled(const cbt_trace_context *tc)
{
    return tc != NULL && (tc->ctx.trace_flags & CBT_TRACE_FLAG_SAMPLED) != 0;
}

#ifdef CBT_DISABLE
/* ==== CBT_DISABLE: the calls below compile to no-ops (see the top) ======== */
static inline cbt_status cbt_traceparent_format(const cbt_span_ctx *c,
                                                char out[CBT_TRACEPARENT_LEN + 1])
{
    (void)c;
    if (out)
        out[0] = '\0';
    return CBT_OK;
}
static inline cbt_status cbt_traceparent_parse(const char *s, size_t len, cbt_span_ctx *out)
{
    (void)s, (void)len;
    if (out)
        memset(out, 0, sizeof *out);
    return CBT_OK;
}
static inline cbt_status cbt_tracestate_check(const char *s, size_t len)
{
    (void)s, (void)len;
    return CBT_OK;
}
static inline cbt_status cbt_context_extract(const char *traceparent, const char *tracestate,
                                             cbt_trace_context *out)
{
    (void)traceparent, (void)tracestate;
    if (out)
        memset(out, 0, sizeof *out);
    return CBT_OK;
}
static inline void cbt_trace_id_from_request(const char *request_id, size_t len, uint8_t out[16])
{
    (void)request_id, (void)len;
    if (out)
        memset(out, 0, 16);
}
static inline cbt_sampler cbt_sampler_default(void)
{
    cbt_sampler s;
    s.kind = CBT_SAMPLER_PARENTBASED_ALWAYS_ON;
    s.ratio = 1.0;
    return s;
}
static inline const char *cbt_sampler_name(cbt_sampler_kind k)
{
    (void)k;
    return "";
}
static inline cbt_status cbt_sampler_parse(const char *name, const char *arg, cbt_sampler *out,
                                           FILE *log)
{
    (void)name, (void)arg, (void)log;
    if (out)
        *out = cbt_sampler_default();
    return CBT_OK;
}
static inline cbt_status cbt_sampler_from_env(cbt_sampler *out, FILE *log)
{
    (void)log;
    if (out)
        *out = cbt_sampler_default();
    return CBT_OK;
}
static inline bool cbt_sampler_decide(const cbt_sampler *s, const uint8_t trace_id[16],
                                      const cbt_span_ctx *parent)
{
    (void)s, (void)trace_id, (void)parent;
    return false;
}
static inline cbt_status cbt_context_begin(const char *traceparent, const char *tracestate,
                                           const char *request_id, size_t request_id_len,
                                           const cbt_sampler *sampler, cbt_trace_context *out,
                                           cbt_status *why)
{
    (void)traceparent, (void)tracestate, (void)request_id, (void)request_id_len, (void)sampler;
    if (out)
        memset(out, 0, sizeof *out);
    if (why)
        *why = CBT_OK;
    return CBT_OK;
}
static inline const cbt_span_ctx *cbt_context_parent(const cbt_trace_context *tc)
{
    (void)tc;
    return NULL;
}
static inline void cbt_span_adopt_context(cbt_span *s, const cbt_trace_context *tc)
{
    (void)s, (void)tc;
}
#else /* the calls */

/* ---- traceparent / tracestate ------------------------------------------------ */

/* Inject: write "00-<trace id>-<span id>-<flags>" and a NUL into `out`
 * (CBT_TRACEPARENT_LEN + 1 bytes). Flag bits other than
 * CBT_TRACE_FLAGS_KNOWN are written as zero (W3C: unknown flags are not
 * propagated). Errors: CBT_ERR_INVAL when `c` or `out` is NULL or an id is
 * all zero (out is then ""). */
CBT_API cbt_status cbt_traceparent_format(const cbt_span_ctx *c, char out[CBT_TRACEPARENT_LEN + 1]);

/* Extract, strictly (see the top of this file): parse the `len` bytes at `s`
 * (need not be NUL-terminated). CBT_OK fills *out; CBT_ERR_BAD_TRACEPARENT
 * for any malformed input (NULL `s` included) and CBT_ERR_INVAL for a NULL
 * `out`; on error *out is zeroed. A successful parse formats back to the
 * identical 55 bytes. */
CBT_API cbt_status cbt_traceparent_parse(const char *s, size_t len, cbt_span_ctx *out);

/* CBT_OK when the `len` bytes at `s` are an acceptable tracestate: at most
 * CBT_TRACESTATE_MAX characters, each printable ASCII (0x20..0x7e). Empty is
 * acceptable (it means "none"). Otherwise CBT_ERR_BAD_TRACESTATE (NULL `s`
 * with len > 0 included). The list-member syntax is not checked: opaque. */
CBT_API cbt_status cbt_tracestate_check(const char *s, size_t len);

/* Extract both headers (NUL-terminated strings; either may be NULL).
 *   CBT_OK                   out->ctx from the traceparent, out->remote = 1,
 *                            tracestate copied when present.
 *   CBT_ERR_NOT_FOUND        traceparent NULL or "": nothing arrived.
 *   CBT_ERR_BAD_TRACEPARENT  rejected (and its tracestate ignored, as W3C
 *                            asks).
 *   CBT_ERR_BAD_TRACESTATE   traceparent accepted (out->ctx and remote set)
 *                            but the tracestate was dropped.
 *   CBT_ERR_INVAL            `out` is NULL.
 * On NOT_FOUND and BAD_TRACEPARENT *out is all zero: the caller starts a
 * fresh trace (cbt_context_begin does that for you). */
CBT_API cbt_status cbt_context_extract(const char *traceparent, const char *tracestate,
                                       cbt_trace_context *out);

/* ---- Option B: a trace id every process derives alike ------------------------
 * 128 bits from the request id's bytes only (no seed, no pointer, no
 * platform dependence): two 64-bit lanes over the bytes — FNV-1a 64, and a
 * rotate-xor-multiply lane (h = rotl64(h ^ byte, 27) * 0x9e3779b97f4a7c15
 * from 0x6a09e667f3bcc909) — then each lane ^= len, MurmurHash3's x64_128
 * cross-add and fmix64 finalizer; lane A then lane B written big-endian.
 * Never all zero (the last byte is set to 1 in that 2^-128 case). Stable:
 * tests pin known outputs; changing it splits traces across versions. */
CBT_API void cbt_trace_id_from_request(const char *request_id, size_t len, uint8_t out[16]);

/* ---- head sampling ----------------------------------------------------------- */

/* parentbased_always_on, ratio 1. */
CBT_API cbt_sampler cbt_sampler_default(void);

/* The OTEL_TRACES_SAMPLER spelling of `k` ("always_on", ...), or "?". */
CBT_API const char *cbt_sampler_name(cbt_sampler_kind k);

/* Build a sampler from OTEL_TRACES_SAMPLER-style `name` (case-insensitive;
 * NULL or "" = the default) and OTEL_TRACES_SAMPLER_ARG-style `arg` (a
 * number in [0, 1] for the traceidratio kinds; NULL or "" = 1.0; ignored by
 * the others). A malformed value is reported on `log` (if not NULL), naming
 * the variable and the value, and replaced by its default — the name by
 * parentbased_always_on, the argument by 1.0 — and the call returns
 * CBT_ERR_INVAL with *out still usable. CBT_ERR_INVAL with nothing written
 * when `out` is NULL. */
CBT_API cbt_status cbt_sampler_parse(const char *name, const char *arg, cbt_sampler *out,
                                     FILE *log);

/* cbt_sampler_parse(getenv("OTEL_TRACES_SAMPLER"),
 *                   getenv("OTEL_TRACES_SAMPLER_ARG"), out, log). */
CBT_API cbt_status cbt_sampler_from_env(cbt_sampler *out, FILE *log);

/* Sample a span of trace `trace_id` whose parent is `parent` (NULL, or an
 * invalid/zero context, for a root).
 *   always_on / always_off: true / false.
 *   traceidratio (OpenTelemetry TraceIdRatioBased, W3C Level 2 randomness):
 *     R = the trace id's rightmost 56 bits (bytes 9..15, big-endian),
 *     T = round((1 - ratio) * 2^56); sampled iff R >= T. Ratio 0 never,
 *     1 always; a trace sampled at some ratio is sampled at every larger one;
 *     deterministic, so processes deciding on the same trace id agree.
 *   parentbased_*: a valid parent's sampled flag decides; a root uses the
 *     named root sampler.
 * A NULL `s` means the default sampler; a NULL trace_id is never sampled by
 * traceidratio. */
CBT_API bool cbt_sampler_decide(const cbt_sampler *s, const uint8_t trace_id[16],
                                const cbt_span_ctx *parent);

/* ---- putting it together on the receiving side -------------------------------- */

/* Extract, fall back, and decide, for one incoming request:
 *   a valid traceparent: *out as cbt_context_extract (remote = 1), and
 *     ctx.trace_flags' sampled bit set by `sampler` with the remote context
 *     as the parent (parentbased_* follow it);
 *   otherwise (Option B): ctx.trace_id = cbt_trace_id_from_request(request_id),
 *     span id zero, remote = 0, sampled bit from `sampler` for a root.
 * `why` (may be NULL) receives cbt_context_extract's status, so the caller
 * can count rejected contexts. Returns CBT_OK, or CBT_ERR_INVAL when `out`
 * is NULL, or request_id is NULL with request_id_len > 0. `sampler` NULL
 * means the default. */
CBT_API cbt_status cbt_context_begin(const char *traceparent, const char *tracestate,
                                     const char *request_id, size_t request_id_len,
                                     const cbt_sampler *sampler, cbt_trace_context *out,
                                     cbt_status *why);

/* The parent to pass to cbt_span_start for the request's root span: &tc->ctx
 * when remote (Option A), NULL otherwise (a fresh root, then adopted). */
CBT_API const cbt_span_ctx *cbt_context_parent(const cbt_trace_context *tc);

/* Right after cbt_span_start (before any child starts), make the span carry
 * tc's decision: the sampled flag, and for Option B the derived trace id
 * (the span stays a root: a sibling of the other processes' spans). Only
 * writes s->ctx. No-op when either pointer is NULL. */
CBT_API void cbt_span_adopt_context(cbt_span *s, const cbt_trace_context *tc);

#endif /* CBT_DISABLE */

#ifdef __cplusplus
}
#endif
#endif /* CBT_CONTEXT_H */
