/* cbt/otlp.h — OpenTelemetry export of cbt spans and of the
 * lmcache_blend.* metrics: encoding (OTLP protobuf and OTLP/JSON) and the
 * OTLP exporter sink, over OTLP/HTTP or OTLP/gRPC.
 *
 * Encoding (exporter/otlp_encode.c): an ExportTraceServiceRequest holding
 * one ResourceSpans (the resource below) with one ScopeSpans (scope "cbt",
 * version CBT_VERSION_STRING) of the given spans. Field numbers and types are
 * those of opentelemetry-proto (exporter/proto/); the protobuf bytes are
 * written by a single-pass encoder of our own, and the tests decode them
 * with the protoc-c code generated from exporter/proto/ and with the official
 * opentelemetry-proto Python package. OTLP/JSON follows the spec's JSON
 * mapping: lowercase hex trace and span ids, 64-bit integers as decimal
 * strings, enum values as integers, camelCase field names. Strings that are
 * not valid UTF-8 are repaired (each bad byte becomes U+FFFD) in both.
 * An incomplete span (ended by shutdown) carries cbt.incomplete = true.
 *
 * Metrics (exporter/otlp_metrics.c): an ExportMetricsServiceRequest of one
 * cbt_blend_snapshot (cbt/blend_metrics.h), same resource and scope: every
 * counter a cumulative monotonic Sum with one int point, every duration a
 * cumulative explicit-bucket Histogram (ms) with one point and its exemplars.
 * The exporter's requests then carry cbt's own health too, the cbt.*
 * instruments (cbt_metrics and cbt_otlp_stats as Sums and Gauges; config
 * field self_metrics). docs/exporters.md lists the instruments.
 *
 * The exporter (exporter/otlp_http.c) is a cbt_sink: on_span copies the used
 * part of the span into a bounded queue (a full queue drops and counts: the harvester never
 * waits); its own thread sends batches to the endpoint with libcurl,
 * retrying 429, 502-504 and connection failures with exponential backoff
 * from 100 ms (doubling, capped at 5 s); a Retry-After shorter than the
 * current step (0, a date in the past) waits the step instead, a longer one
 * is honoured within retry_budget_ms. A batch whose request would be over
 * max_message_bytes is halved until each part fits (a span alone over it is
 * dropped). Spans it drops (full queue, a batch
 * that failed for good, shutdown's deadline) are its spans_dropped and its
 * sink's spans_lost (cbt_metrics.sink_spans_lost).
 *
 * OTLP/gRPC (protocol CBT_OTLP_GRPC, exporter/otlp_grpc.c): the same
 * exporter sends each batch as one unary call of
 * opentelemetry.proto.collector.trace.v1.TraceService/Export (metrics:
 * MetricsService/Export) over HTTP/2 on one kept connection: h2c with prior
 * knowledge for http://, ALPN for https://; a libcurl without HTTP/2 is
 * refused at create (CBT_ERR_UNSUPPORTED). The status comes from
 * grpc-status in the trailers (or a trailers-only answer; an HTTP status
 * other than 200 maps as gRPC says). UNAVAILABLE, CANCELLED,
 * DEADLINE_EXCEEDED, ABORTED, OUT_OF_RANGE and DATA_LOSS are retried as
 * 503 is; RESOURCE_EXHAUSTED only when grpc-status-details-bin holds a
 * google.rpc.RetryInfo, whose delay is honoured as a Retry-After; any other
 * code drops the batch and counts it in failures_by_grpc_code.
 * TLS (both protocols): the system trust store, or `certificate`; a client
 * certificate and key for mTLS; each file must be readable at create.
 * docs/exporters.md has the tables. cbt_shutdown's last
 * flush waits for the final export (at most shutdown_timeout_ms, and a
 * short grace for a transfer it aborts); destroy then fills final_stats. When
 * the config names a metric set (`blend`), the same thread also POSTs a
 * snapshot of it, with cbt's own cbt.* health instruments, to
 * metrics_endpoint every metrics_interval_ms, after each cbt_flush, and once
 * at shutdown; self_metrics = CBT_OTLP_SELF_METRICS_ON sends the cbt.*
 * instruments that way without a `blend` set.
 *
 * CBT_DISABLE (defined before the first cbt include): the types and
 * constants stay defined and every call is a static inline no-op
 * referencing no cbt (or libcurl) symbol: encoders append nothing and
 * return CBT_OK, cbt_otlp_config_default() fills the defaults with
 * disabled = metrics_disabled = 1 (the resource: service.name "cbt" only),
 * the environment is not read, the exporter is NULL with an empty sink, and
 * its stats are zero.
 */
#ifndef CBT_OTLP_H
#define CBT_OTLP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cbt/api.h"
#include "cbt.h"
#include "cbt/blend_metrics.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A growable byte buffer owned by the caller (free with cbt_buf_free). */
typedef struct cbt_buf {
    uint8_t *data;
    size_t len, cap;
} cbt_buf;

#define CBT_OTLP_MAX_ATTRS 32     /* extra resource attributes */
#define CBT_OTLP_MAX_HEADERS 16
#define CBT_OTLP_STR_MAX 256

typedef struct cbt_otlp_kv {
    char key[CBT_OTLP_STR_MAX];
    char value[CBT_OTLP_STR_MAX];
} cbt_otlp_kv;

typedef struct cbt_otlp_resource {
    char service_name[CBT_OTLP_STR_MAX];        /* default "cbt" */
    char service_instance_id[CBT_OTLP_STR_MAX]; /* random per process, UUID text */
    char host_name[CBT_OTLP_STR_MAX];
    int64_t pid;
    char gpu_name[CBT_OTLP_STR_MAX];            /* "" when no CUDA device */
    cbt_otlp_kv extra[CBT_OTLP_MAX_ATTRS];      /* OTEL_RESOURCE_ATTRIBUTES */
    uint32_t n_extra;
} cbt_otlp_resource;

/* How requests travel (docs/exporters.md, "Protocols"): OTLP/HTTP with a
 * protobuf or a JSON body, or OTLP/gRPC (protobuf in gRPC's unary framing
 * over HTTP/2: cleartext with prior knowledge for http://, ALPN for
 * https://). The gRPC endpoint is the collector's base (http://host:4317,
 * https://host:4317, or host:4317 with the scheme from `insecure`); its path
 * is ignored and the service's method path appended. */
typedef enum cbt_otlp_protocol {
    CBT_OTLP_HTTP_PROTOBUF = 0,
    CBT_OTLP_HTTP_JSON = 1,
    CBT_OTLP_GRPC = 2,
} cbt_otlp_protocol;
/* Defined when this header knows CBT_OTLP_GRPC: a program that must also
 * build against an older cbt (a benchmark comparing the two) tests it. */
#define CBT_OTLP_HAVE_GRPC 1

/* The default max_message_bytes: gRPC's usual 4 MiB receive limit less 64 KiB
 * of headroom (a collector's limit counts the whole message; ours the
 * encoded request before compression). */
#define CBT_OTLP_MAX_MESSAGE_DEFAULT (4194304u - 65536u)
#define CBT_OTLP_PATH_MAX 1024 /* certificate, client_key, client_certificate */
/* The gRPC status codes, 0 (OK) to 16 (UNAUTHENTICATED): the size of
 * cbt_otlp_stats.failures_by_grpc_code. */
#define CBT_OTLP_GRPC_CODES 17

/* The exporter's queue holds compact records of the spans handed to it
 * (only their used attributes, span events and string bytes: a few hundred bytes
 * for an MP span, at most about sizeof(cbt_span)) in a ring of
 * max_queue * CBT_OTLP_QUEUE_BYTES_PER_SPAN bytes, allocated at create (at
 * least two of the largest records; resident as the ring is used). A span is
 * dropped, and counted, when max_queue spans are queued or the ring cannot
 * hold its record. The default max_queue, 32768 (16 MiB), holds about 32 ms
 * of spans at 1 M spans/s: OpenTelemetry's 2048 held 2 ms, less than one
 * scheduling stall of a loaded 2-vCPU machine (docs/performance.md). */
#define CBT_OTLP_QUEUE_BYTES_PER_SPAN 512u

typedef struct cbt_otlp_config {
    uint32_t version, size;          /* CBT_OTLP_CONFIG_VERSION, sizeof */
    int disabled;                    /* OTEL_SDK_DISABLED=true */
    char endpoint[1024];             /* the full traces URL, e.g. http://host:4318/v1/traces */
    cbt_otlp_protocol protocol;      /* default http/protobuf */
    int gzip;                        /* OTEL_EXPORTER_OTLP[_TRACES]_COMPRESSION=gzip */
    uint32_t timeout_ms;             /* per request; default 10000 */
    cbt_otlp_kv headers[CBT_OTLP_MAX_HEADERS];
    uint32_t n_headers;
    int verify_tls;                  /* default 1 */
    uint32_t max_queue;              /* spans; default 32768 (and the queue's bytes:
                                        CBT_OTLP_QUEUE_BYTES_PER_SPAN, below) */
    uint32_t max_batch;              /* spans per request; default 512 */
    uint32_t schedule_delay_ms;      /* default 5000 */
    uint32_t retry_budget_ms;        /* total time one batch may spend retrying; default 30000 */
    uint32_t shutdown_timeout_ms;    /* bound on the final export; default 5000 */
    cbt_otlp_resource resource;
    /* ---- metrics (appended: the fields above keep their offsets) ---- */
    char metrics_endpoint[1024];     /* the full metrics URL; default
                                        http://localhost:4318/v1/metrics */
    uint32_t metrics_interval_ms;    /* periodic export; default 60000
                                        (OTEL_METRIC_EXPORT_INTERVAL); 0: only
                                        on cbt_flush and at shutdown */
    cbt_blend_metrics *blend;        /* the set to export, normally
                                        cbt_blend_metrics_current(); NULL (the
                                        default): no metrics export (unless
                                        self_metrics is ON). Must stay
                                        valid until the sink is destroyed. */
    int metrics_disabled;            /* OTEL_METRICS_EXPORTER=none: no metrics
                                        export even when blend is set */
    uint32_t reserved;               /* must be zero (cbt_otlp_config_default()
                                        zeroes it) */
    /* ---- version 2 ---- */
    struct cbt_otlp_stats *final_stats; /* caller-owned, NULL (the default):
                                        none. Filled when the exporter is
                                        destroyed (cbt_shutdown), after its
                                        final export, by the out-struct rule
                                        (set version and size first:
                                        CBT_STRUCT_INIT(cbt_otlp_stats)); the
                                        counts cbt_otlp_exporter_stats can no
                                        longer give. Must stay valid until
                                        cbt_shutdown returns. */
    /* ---- version 3: OTLP/gRPC, message size, TLS ---- */
    uint32_t max_message_bytes;      /* the largest encoded request (before
                                        gzip), either protocol; default
                                        CBT_OTLP_MAX_MESSAGE_DEFAULT. A batch
                                        over it is halved and encoded again
                                        until each part fits; a single span
                                        over it is dropped and counted
                                        (spans_too_large). 0 is refused. */
    int insecure;                    /* OTEL_EXPORTER_OTLP[_TRACES]_INSECURE:
                                        a gRPC endpoint without a scheme is
                                        http:// (h2c) when set, https://
                                        otherwise (the default, 0). A scheme
                                        always wins; TLS checks are
                                        verify_tls's. */
    char certificate[CBT_OTLP_PATH_MAX];        /* CA bundle (PEM) to verify the
                                                   collector with, instead of
                                                   the system's; "" (default):
                                                   the system trust store */
    char client_key[CBT_OTLP_PATH_MAX];         /* mTLS: the client's private
                                                   key (PEM); with
                                                   client_certificate */
    char client_certificate[CBT_OTLP_PATH_MAX]; /* mTLS: the client's
                                                   certificate chain (PEM) */
    /* ---- version 4 ---- */
    uint32_t self_metrics;           /* cbt_otlp_self_metrics (below): whether
                                        cbt's own health, the cbt.* instruments,
                                        goes with the metrics export; default
                                        AUTO; CBT_OTLP_SELF_METRICS=1 / 0 */
    uint32_t reserved3;              /* must be zero */
} cbt_otlp_config;
#define CBT_OTLP_CONFIG_VERSION 4u
CBT_ASSERT_NO_TAIL_PADDING_(cbt_otlp_config, reserved3);

/* cbt_otlp_config.self_metrics. The cbt.* instruments (docs/exporters.md,
 * "cbt's own health") are cbt_metrics_get's and cbt_otlp_exporter_stats'
 * counters, read on the exporter thread at each metrics export (a few
 * hundred ns, no lock the harvester holds). */
typedef enum cbt_otlp_self_metrics {
    CBT_OTLP_SELF_METRICS_AUTO = 0, /* with every metrics export, so whenever
                                       `blend` is set (and metrics_disabled is not) */
    CBT_OTLP_SELF_METRICS_ON = 1,   /* exported even without `blend`: a metrics
                                       export of the cbt.* instruments alone */
    CBT_OTLP_SELF_METRICS_OFF = 2,  /* never: the blend metrics alone */
} cbt_otlp_self_metrics;

typedef struct cbt_otlp_stats {
    uint32_t version, size; /* CBT_STRUCT_INIT(cbt_otlp_stats): what the caller knows (cbt.h) */
    uint64_t spans_queued;
    uint64_t spans_exported;    /* accepted by the collector */
    uint64_t spans_dropped;     /* queue full, or their batch failed for good */
    uint64_t batches_sent;
    uint64_t batches_failed;
    uint64_t retries;           /* spans and metrics */
    uint64_t bytes_sent;        /* spans and metrics, as sent (after gzip) */
    /* appended */
    uint64_t metrics_exports;   /* metric snapshots accepted by the collector */
    uint64_t metrics_failures;  /* metric exports that failed for good */
    /* ---- version 2 (all parts of spans_dropped / batches_sent above) ---- */
    uint64_t spans_rejected;    /* named in a partial_success by the collector */
    uint64_t spans_too_large;   /* alone in a request still over max_message_bytes */
    uint64_t batches_split;     /* batches halved to fit max_message_bytes (each half
                                   is then a batch of its own) */
    uint64_t failures_by_grpc_code[CBT_OTLP_GRPC_CODES]; /* OTLP/gRPC: span batches
                                   and metric snapshots that failed for good, by the gRPC status of the
                                   collector's last answer (an HTTP status mapped
                                   as gRPC says); [0] stays 0. Batches that got no
                                   answer (connection, timeout, shutdown) are in
                                   batches_failed only. */
    uint64_t failures_by_http_class[6]; /* batches_failed + metrics_failures by the
                                   HTTP status of the export's last try: [k] for
                                   k00-k99; [0] no status (the connection, a
                                   timeout, TLS, shutdown's deadline, or nothing
                                   sent: the encoding or gzip failed) */
    uint64_t queue_size;        /* spans queued now, not yet exported or dropped */
    uint64_t queue_capacity;    /* max_queue */
} cbt_otlp_stats;
#define CBT_OTLP_STATS_VERSION 2u
#define cbt_otlp_stats_version_ CBT_OTLP_STATS_VERSION /* for CBT_STRUCT_INIT */
CBT_ASSERT_NO_TAIL_PADDING_(cbt_otlp_stats, queue_capacity);

typedef struct cbt_otlp_exporter cbt_otlp_exporter;

/* The resource's fixed defaults: service.name "cbt", everything else empty.
 * libcbt's cbt_otlp_resource_default() then adds the process's own (a fresh
 * service.instance.id, host.name, pid, the GPU); its CBT_DISABLE stub does
 * not. Not a call to make: use cbt_otlp_resource_default(). */
static inline void cbt_otlp_resource_defaults_(cbt_otlp_resource *r)
{
    memset(r, 0, sizeof *r);
    memcpy(r->service_name, "cbt", sizeof "cbt");
}

/* cbt_otlp_config's defaults, the one list of them: libcbt's
 * cbt_otlp_config_default_into() fills them (and the process's resource),
 * and so does its CBT_DISABLE stub, which then sets disabled and
 * metrics_disabled. Not a call to make: use cbt_otlp_config_default().
 * Every field not named is zero: enabled, no gzip, no headers, no metrics
 * set (blend NULL: no metrics export), no final_stats, self_metrics AUTO,
 * the reserved fields,
 * TLS from the system trust store (no certificate, no client key or
 * certificate), insecure off. The endpoints are OTLP/HTTP's: with protocol
 * CBT_OTLP_GRPC, an endpoint still equal to this default means
 * http://localhost:4317, and a metrics_endpoint still equal to its default
 * means the traces endpoint (the same collector). */
static inline void cbt_otlp_config_defaults_(cbt_otlp_config *d)
{
    memset(d, 0, sizeof *d);
    d->version = CBT_OTLP_CONFIG_VERSION;
    d->size = (uint32_t)sizeof *d;
    memcpy(d->endpoint, "http://localhost:4318/v1/traces", sizeof "http://localhost:4318/v1/traces");
    d->protocol = CBT_OTLP_HTTP_PROTOBUF;
    d->timeout_ms = 10000;
    d->verify_tls = 1;
    d->max_queue = 32768; /* 16 MiB of records: about 32 ms at 1 M spans/s (above) */
    d->max_batch = 512;
    d->schedule_delay_ms = 5000;
    d->retry_budget_ms = 30000;
    d->shutdown_timeout_ms = 5000;
    cbt_otlp_resource_defaults_(&d->resource);
    memcpy(d->metrics_endpoint, "http://localhost:4318/v1/metrics",
           sizeof "http://localhost:4318/v1/metrics");
    d->metrics_interval_ms = 60000;
    d->max_message_bytes = CBT_OTLP_MAX_MESSAGE_DEFAULT;
}

#ifdef CBT_DISABLE
/* ==== CBT_DISABLE: the calls below compile to no-ops (see the top) ======== */
static inline void cbt_buf_free(cbt_buf *b) { (void)b; } /* nothing is ever appended */
static inline void cbt_otlp_resource_default(cbt_otlp_resource *r)
{
    if (r)
        cbt_otlp_resource_defaults_(r); /* service.name "cbt" only */
}
static inline cbt_status cbt_otlp_encode_proto(const cbt_otlp_resource *r, const cbt_span *spans,
                                               size_t n, cbt_buf *out)
{
    (void)r, (void)spans, (void)n, (void)out;
    return CBT_OK;
}
static inline cbt_status cbt_otlp_encode_json(const cbt_otlp_resource *r, const cbt_span *spans,
                                              size_t n, cbt_buf *out)
{
    (void)r, (void)spans, (void)n, (void)out;
    return CBT_OK;
}
static inline cbt_status cbt_otlp_encode_metrics_proto(const cbt_otlp_resource *r,
                                                       const cbt_blend_snapshot *s, cbt_buf *out)
{
    (void)r, (void)s, (void)out;
    return CBT_OK;
}
static inline cbt_status cbt_otlp_encode_metrics_json(const cbt_otlp_resource *r,
                                                      const cbt_blend_snapshot *s, cbt_buf *out)
{
    (void)r, (void)s, (void)out;
    return CBT_OK;
}
static inline cbt_status cbt_otlp_config_default_into(cbt_otlp_config *c)
{
    if (!c)
        return CBT_ERR_INVAL;
    if (c->size < 8)
        return CBT_ERR_VERSION;
    cbt_otlp_config d;
    cbt_otlp_config_defaults_(&d); /* the one list, above */
    d.disabled = 1;                /* as OTEL_SDK_DISABLED=true */
    d.metrics_disabled = 1;
    /* the fields after the header, at most c->size bytes (cbt.h) */
    memcpy((char *)c + 8, (const char *)&d + 8, (c->size < sizeof d ? c->size : sizeof d) - 8);
    return c->size > sizeof d ? CBT_ERR_VERSION : CBT_OK;
}
static inline cbt_status cbt_otlp_config_from_env(cbt_otlp_config *c, FILE *log)
{
    (void)c, (void)log; /* the environment is not read */
    return CBT_OK;
}
static inline cbt_status cbt_otlp_exporter_create_into(const cbt_otlp_config *c,
                                                       cbt_otlp_exporter **out, cbt_sink *sink_out)
{
    (void)c, (void)sink_out; /* left as the wrapper made it: an empty sink */
    if (out)
        *out = NULL;
    return CBT_OK;
}
static inline cbt_status cbt_otlp_exporter_stats(cbt_otlp_exporter *e, cbt_otlp_stats *out)
{
    (void)e;
    if (out) { /* all zero, written in full (the out-struct rule, cbt.h) */
        memset(out, 0, sizeof *out);
        out->version = CBT_OTLP_STATS_VERSION;
        out->size = (uint32_t)sizeof *out;
    }
    return CBT_OK;
}
static inline void cbt_otlp_resource_from_env(cbt_otlp_resource *r, FILE *log)
{
    (void)r, (void)log; /* the environment is not read */
}
static inline cbt_status cbt_otlp_json_sink_create_into(const char *path,
                                                        const cbt_otlp_resource *r,
                                                        cbt_sink *sink_out)
{
    (void)path, (void)r, (void)sink_out; /* left as the wrapper made it: an empty sink */
    return CBT_OK;
}
#else /* the calls */

/* Free a cbt_buf's bytes; it is empty afterwards. */
CBT_API void cbt_buf_free(cbt_buf *b);

/* Fill service.name "cbt", a fresh service.instance.id, host.name, pid, and
 * the CUDA device name when there is one. */
CBT_API void cbt_otlp_resource_default(cbt_otlp_resource *r);

/* Append an ExportTraceServiceRequest for spans[0..n) to `out`. */
CBT_API cbt_status cbt_otlp_encode_proto(const cbt_otlp_resource *r, const cbt_span *spans,
                                         size_t n, cbt_buf *out);
CBT_API cbt_status cbt_otlp_encode_json(const cbt_otlp_resource *r, const cbt_span *spans, size_t n,
                                        cbt_buf *out);

/* Append an ExportMetricsServiceRequest for the snapshot `s` to `out`:
 * CBT_BC_COUNT_ Sums then CBT_BH_COUNT_ Histograms, in enum order, every one
 * present even when zero. CBT_ERR_INVAL on NULL, CBT_ERR_NOMEM. */
CBT_API cbt_status cbt_otlp_encode_metrics_proto(const cbt_otlp_resource *r,
                                                 const cbt_blend_snapshot *s, cbt_buf *out);
CBT_API cbt_status cbt_otlp_encode_metrics_json(const cbt_otlp_resource *r,
                                                const cbt_blend_snapshot *s, cbt_buf *out);

/* The entry point of cbt_otlp_config_default() (below): the defaults into
 * the fields of *c, at most c->size bytes; version and size stay the
 * caller's (cbt.h, "versioned structs"). */
CBT_API cbt_status cbt_otlp_config_default_into(cbt_otlp_config *c);

/* Apply the OpenTelemetry environment (OTEL_SDK_DISABLED, OTEL_SERVICE_NAME,
 * OTEL_RESOURCE_ATTRIBUTES, OTEL_EXPORTER_OTLP_ENDPOINT with /v1/traces and
 * /v1/metrics appended, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT and
 * OTEL_EXPORTER_OTLP_METRICS_ENDPOINT as is,
 * OTEL_EXPORTER_OTLP[_TRACES]_HEADERS / _TIMEOUT / _COMPRESSION / _PROTOCOL,
 * _INSECURE / _CERTIFICATE / _CLIENT_KEY / _CLIENT_CERTIFICATE,
 * the _TRACES_ form winning, and used for metrics requests too (the
 * _METRICS_ forms of those are reported and not read;
 * OTEL_EXPORTER_OTLP_METRICS_PROTOCOL is checked, and reported when it
 * differs), OTEL_METRIC_EXPORT_INTERVAL, OTEL_METRICS_EXPORTER; and cbt's
 * own CBT_OTLP_SELF_METRICS, 1 or 0: self_metrics ON or OFF). The
 * protocol is grpc, http/protobuf or http/json; for grpc the endpoint is
 * the collector's base (nothing appended; host:port takes its scheme from
 * insecure) and defaults to http://localhost:4317. A malformed value is reported on `log` by the
 * variable's name (never printing header values) and its default kept;
 * returns CBT_ERR_INVAL only where no safe default exists (an endpoint that
 * is not usable, a protocol that is none of the three, a TLS path too long
 * for the config). */
CBT_API cbt_status cbt_otlp_config_from_env(cbt_otlp_config *c, FILE *log);

/* The entry point of cbt_otlp_exporter_create() (below). */
CBT_API cbt_status cbt_otlp_exporter_create_into(const cbt_otlp_config *c,
                                                 cbt_otlp_exporter **out, cbt_sink *sink_out);

/* Apply the environment's OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME to
 * *r, as cbt_otlp_config_from_env does for its resource; a malformed part is
 * reported on `log` (NULL: stderr) and skipped. NULL r is ignored. */
CBT_API void cbt_otlp_resource_from_env(cbt_otlp_resource *r, FILE *log);

/* The entry point of cbt_otlp_json_sink_create() (below). */
CBT_API cbt_status cbt_otlp_json_sink_create_into(const char *path, const cbt_otlp_resource *r,
                                                  cbt_sink *sink_out);

/* The exporter's counters (cbt_otlp_stats, above). CBT_ERR_INVAL for a NULL
 * out; CBT_ERR_VERSION when out->size is smaller than the header (set
 * version and size: CBT_STRUCT_INIT). */
CBT_API cbt_status cbt_otlp_exporter_stats(cbt_otlp_exporter *e, cbt_otlp_stats *out);

#endif /* CBT_DISABLE */

/* Defaults: endpoint http://localhost:4318/v1/traces, metrics endpoint
 * http://localhost:4318/v1/metrics every 60 s (but blend NULL: off),
 * OTLP/HTTP protobuf, no gzip, max_message_bytes 4 MiB - 64 KiB, the
 * system's TLS trust store (the list: cbt_otlp_config_defaults_, above). Inline,
 * so that only this header's sizeof is written
 * (cbt_otlp_config_default_into). NULL is ignored. */
static inline void cbt_otlp_config_default(cbt_otlp_config *c)
{
    if (!c)
        return;
    memset(c, 0, sizeof *c);
    c->version = CBT_OTLP_CONFIG_VERSION;
    c->size = (uint32_t)sizeof *c;
    (void)cbt_otlp_config_default_into(c); /* newer than libcbt: create refuses c */
}

/* Start the exporter thread and fill *sink_out (add it with cbt_add_sink).
 * The tracer owns the sink; *out stays readable until cbt_shutdown().
 * Costs: one thread, the queue's ring (max_queue *
 * CBT_OTLP_QUEUE_BYTES_PER_SPAN bytes, resident as used), a 64 KiB answer
 * buffer (two for gRPC); it never connects here, so it never waits on the
 * network. CBT_ERR_INVAL for a malformed config (said on stderr: the field),
 * CBT_ERR_IO for a TLS file that cannot be read, CBT_ERR_UNSUPPORTED for
 * gRPC with a libcurl without HTTP/2,
 * CBT_ERR_VERSION for a config from a newer cbt (its size or version: cbt.h,
 * "versioned structs"). Inline,
 * so that only this header's sizeof of cbt_sink is written: *sink_out zeroed,
 * its version and size set, then the _into entry point fills at most that
 * size (cbt.h, "versioned structs"). */
static inline cbt_status cbt_otlp_exporter_create(const cbt_otlp_config *c,
                                                  cbt_otlp_exporter **out, cbt_sink *sink_out)
{
    if (sink_out) {
        memset(sink_out, 0, sizeof *sink_out);
        sink_out->version = CBT_SINK_VERSION;
        sink_out->size = (uint32_t)sizeof *sink_out;
    }
    return cbt_otlp_exporter_create_into(c, out, sink_out);
}

/* ---- the OTLP JSON file ------------------------------------------------- */

/* The variable cbt.init, the `cbt` command and python -m cbt.lmcache read
 * for the OTLP JSON file's path when none is given (cbt_init does not read
 * it: add the sink below). OpenTelemetry names no variable for a file
 * exporter (its OTLP file exporter specification is experimental and fixes
 * only the format; OTEL_TRACES_EXPORTER has no file value), so it is cbt's. */
#define CBT_OTLP_JSON_PATH_ENV "CBT_OTLP_JSON_PATH"

/* A sink writing the spans to the file at `path` (add it with cbt_add_sink)
 * in the OpenTelemetry Collector `file` exporter's format: one
 * ExportTraceServiceRequest per line in OTLP/JSON (cbt_otlp_encode_json's
 * encoding, a line the spans that arrived together, at most 512 spans or
 * about 1 MiB unless one span is bigger), so jq, `lmcache bench
 * trace-analyze` and other readers of collector output read it. Each line is
 * valid on its own and the file holds whole lines after every flush.
 * `r`: the resource on every line; NULL: cbt_otlp_resource_default() with
 * cbt_otlp_resource_from_env() applied. It writes from a sink thread of its
 * own (the queue drops and counts: cbt/span.h). A regular file is created or
 * truncated; a FIFO must have its reader already (cbt never waits for one).
 * A path that cannot be opened is CBT_ERR_IO here, said on stderr with the
 * reason; CBT_ERR_INVAL for a NULL or empty path. A write that fails loses
 * its line's spans (counted in the sink's spans_lost, the call a sink error)
 * and the line's fragment is cut off again. Inline, so that only this
 * header's sizeof of cbt_sink is written (cbt.h, "versioned structs"). */
static inline cbt_status cbt_otlp_json_sink_create(const char *path, const cbt_otlp_resource *r,
                                                   cbt_sink *sink_out)
{
    if (sink_out) {
        memset(sink_out, 0, sizeof *sink_out);
        sink_out->version = CBT_SINK_VERSION;
        sink_out->size = (uint32_t)sizeof *sink_out;
    }
    return cbt_otlp_json_sink_create_into(path, r, sink_out);
}

#ifdef __cplusplus
}
#endif
#endif /* CBT_OTLP_H */
