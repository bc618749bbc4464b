/* exporter/otlp_private.h — what the OTLP files share and users need not see. */
#ifndef CBT_EXPORTER_OTLP_PRIVATE_H
#define CBT_EXPORTER_OTLP_PRIVATE_H

#include <stddef.h>
#include <stdint.h>

#include "cbt/otlp.h"
#include "cbt/status.h"

/* 1 for an http:// or https:// URL with a non-empty host and no whitespace or
 * control characters (otlp_env.c). The environment parser and the exporter's
 * own config check use the same rule. */
int cbt_otlp_url_ok(const char *u);

/* OTLP/gRPC's default endpoint: the collector's gRPC port. */
#define CBT_OTLP_GRPC_DEFAULT_ENDPOINT "http://localhost:4317"

/* For protocol CBT_OTLP_GRPC: an endpoint still at cbt/otlp.h's (OTLP/HTTP)
 * default becomes CBT_OTLP_GRPC_DEFAULT_ENDPOINT, and a metrics_endpoint
 * still at its default becomes the traces endpoint (the same collector).
 * Other protocols: nothing changes. The environment parser and create use
 * it (otlp_env.c). */
struct cbt_otlp_config;
void cbt_otlp_protocol_endpoints_(struct cbt_otlp_config *c);

/* A caller's config made complete (host/internal/abi.h): `full` gets the
 * defaults, then the caller's first c->size bytes. CBT_ERR_INVAL for NULL,
 * CBT_ERR_VERSION (said on stderr) for a size or version this libcbt does
 * not know (otlp_env.c). */
struct cbt_otlp_config;
cbt_status cbt_otlp_config_in_(struct cbt_otlp_config *full, const struct cbt_otlp_config *c);

/* The spans of a batch for the encoders below: span i (0, 1, ... n-1 in
 * order; each pass of an encoder starts again at 0), either a span of the
 * caller's or *scratch filled with it. The OTLP/HTTP exporter expands its
 * queued records (internal/span_queue.h) into one scratch span this way, so a batch
 * is never copied out whole. */
struct cbt_span;
struct cbt_buf;
struct cbt_otlp_resource;
typedef const struct cbt_span *(*cbt_otlp_span_at)(void *ctx, size_t i, struct cbt_span *scratch);

/* cbt_otlp_encode_proto / _json (cbt/otlp.h) over spans given by `at`: the
 * same bytes as for an array holding those spans. */
cbt_status cbt_otlp_encode_proto_at_(const struct cbt_otlp_resource *r, size_t n,
                                     cbt_otlp_span_at at, void *ctx, struct cbt_buf *out);
cbt_status cbt_otlp_encode_json_at_(const struct cbt_otlp_resource *r, size_t n,
                                    cbt_otlp_span_at at, void *ctx, struct cbt_buf *out);

/* OTLP/JSON of one ExportTraceServiceRequest in pieces, for a writer that
 * adds spans as they come (the OTLP JSON file, exporter/otlp_file.c): the
 * head (resource, scope, up to the spans' '['), each span (the ',' between
 * two is the caller's), the tail. head, spans joined by ',', tail is
 * cbt_otlp_encode_json's document for those spans, byte for byte. Each
 * appends to `out`: CBT_ERR_INVAL for NULL, CBT_ERR_NOMEM. */
cbt_status cbt_otlp_json_head_(const struct cbt_otlp_resource *r, struct cbt_buf *out);
cbt_status cbt_otlp_json_span_(const struct cbt_span *s, struct cbt_buf *out);
cbt_status cbt_otlp_json_tail_(struct cbt_buf *out);

/* Apply OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME to *r as
 * cbt_otlp_config_from_env does (otlp_env.c); malformed parts reported on
 * `log` (NULL: stderr) and skipped. */
void cbt_otlp_resource_from_env_(struct cbt_otlp_resource *r, FILE *log);

/* ---- metrics: one request of the blend set and of cbt's own health ---- */

/* cbt's own health as the exporter reads it for a metrics export
 * (otlp_http.c), the cbt.* instruments' source (otlp_metrics.c, which names
 * them; docs/exporters.md, "cbt's own health"). Plain values: it can be
 * filled by hand (the tests' fixed set). */
#ifndef CBT_OTLP_GRPC_CODES /* cbt/otlp.h's, with the gRPC transport's stats */
#define CBT_OTLP_GRPC_CODES 17 /* gRPC status codes 0 (OK) .. 16 (UNAUTHENTICATED) */
#endif
typedef struct cbt_otlp_self_snapshot {
    uint64_t start_ns;  /* wall clock: the exporter's creation (the Sums' start) */
    uint64_t time_ns;   /* wall clock: when the figures were read */
    int have_tracer;    /* `tracer` holds a tracer's figures (cbt_metrics_get, or the
                           final flush's cbt_metrics_closing_); else no cbt.events.*,
                           cbt.spans.*, cbt.harvester.* instruments are sent */
    cbt_metrics tracer;
    cbt_otlp_stats exporter; /* cbt_otlp_exporter_stats, complete */
    /* failures by gRPC status code instead of by HTTP class (protocol grpc):
     * [c] the exports that failed for good with code c; [0], OK, which never
     * fails, stands for "no status" (transport) as failures_by_http_class[0]
     * does. Filled by take_self (otlp_http.c) from the exporter's stats once
     * they count by code: [1..16] from cbt_otlp_stats.failures_by_grpc_code,
     * [0] from failures_by_http_class[0]. */
    int grpc;
    uint64_t failures_by_grpc_code[CBT_OTLP_GRPC_CODES];
} cbt_otlp_self_snapshot;

/* Append one ExportMetricsServiceRequest to `out`, protobuf or (json)
 * OTLP/JSON: one resource, scope "cbt", the blend set's instruments (blend
 * NULL: none) followed by the cbt.* ones (self NULL: none). With self NULL
 * the bytes are cbt_otlp_encode_metrics_proto / _json's. CBT_ERR_INVAL when
 * both are NULL (or r, out are), CBT_ERR_NOMEM. */
struct cbt_blend_snapshot;
cbt_status cbt_otlp_encode_metrics_(const struct cbt_otlp_resource *r,
                                    const struct cbt_blend_snapshot *blend,
                                    const cbt_otlp_self_snapshot *self, int json,
                                    struct cbt_buf *out);

#endif /* CBT_EXPORTER_OTLP_PRIVATE_H */
