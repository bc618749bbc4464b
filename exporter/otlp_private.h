/* exporter/otlp_private.h — what the OTLP files share and users need not see. */
#ifndef CBT_EXPORTER_OTLP_PRIVATE_H
#define CBT_EXPORTER_OTLP_PRIVATE_H

#include <stddef.h>

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

#endif /* CBT_EXPORTER_OTLP_PRIVATE_H */
