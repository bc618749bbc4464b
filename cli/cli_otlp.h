/* cli/cli_otlp.h — owns how the `cbt` command turns --otlp-endpoint and
 * --otlp-protocol (and the OTEL_* environment) into the OTLP exporter's
 * config: the protocol's spellings, and the endpoints each transport wants
 * (OTLP/HTTP: the base with /v1/traces and /v1/metrics; gRPC: the base as
 * is). cli_sinks.c starts the exporter from it; tests/test_cli_otlp.c checks
 * it without starting one. */
#ifndef CBT_CLI_OTLP_H
#define CBT_CLI_OTLP_H

#include "cbt.h"

/* "grpc", "http/protobuf", "http/json" (OTEL_EXPORTER_OTLP_PROTOCOL's
 * values) as a cbt_otlp_protocol; -1 for anything else, NULL included. */
int cli_otlp_protocol_parse(const char *s);

/* The exporter's config for `endpoint` (the --otlp-endpoint value: an
 * http(s) URL): the defaults, then the OTEL_* environment
 * (cbt_otlp_config_from_env, its problems said on stderr), then `protocol`
 * when it is >= 0 (--otlp-protocol wins over OTEL_EXPORTER_OTLP_PROTOCOL),
 * then the endpoints for the protocol that results: OTLP/HTTP gets
 * /v1/traces and /v1/metrics on the base (a URL ending in /v1/traces is the
 * traces URL, and its base gets /v1/metrics), gRPC the base URL as is (a
 * trailing '/' dropped) for both, and refuses a /v1/traces URL. Returns 0,
 * or -1 with the problem on stderr, prefixed by `prog` (always -1 in a build
 * without OTLP). */
int cli_otlp_config(const char *prog, const char *endpoint, int protocol, cbt_otlp_config *c);

#endif /* CBT_CLI_OTLP_H */
