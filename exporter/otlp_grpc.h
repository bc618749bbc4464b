/* exporter/otlp_grpc.h — what OTLP/gRPC adds to the OTLP exporter
 * (otlp_http.c): gRPC's unary framing, the request's fixed metadata, the
 * response's status (HTTP status, headers and trailers) turned into a gRPC
 * code, the throttling hint of grpc-status-details-bin (a google.rpc.Status
 * holding a google.rpc.RetryInfo), and the endpoint rules.
 *
 * Everything here is a pure function of its arguments (no allocation but
 * zlib's own inside cbt_grpc_gunzip, no I/O, no global state), so
 * each can be unit-tested and fed garbage: every reader is bounded by the
 * length it is given and says "malformed" rather than read past it
 * (tests/test_otlp_grpc_unit.c). The transport (libcurl over HTTP/2) and
 * the retry loop stay in otlp_http.c: gRPC is a second way to send and a
 * second way to read the answer, not a second exporter.
 */
#ifndef CBT_EXPORTER_OTLP_GRPC_H
#define CBT_EXPORTER_OTLP_GRPC_H

#include <stddef.h>
#include <stdint.h>

#include "cbt/status.h"

/* The gRPC status codes (grpc/doc/statuscodes.md). */
enum {
    CBT_GRPC_OK = 0,
    CBT_GRPC_CANCELLED = 1,
    CBT_GRPC_UNKNOWN = 2,
    CBT_GRPC_INVALID_ARGUMENT = 3,
    CBT_GRPC_DEADLINE_EXCEEDED = 4,
    CBT_GRPC_NOT_FOUND = 5,
    CBT_GRPC_ALREADY_EXISTS = 6,
    CBT_GRPC_PERMISSION_DENIED = 7,
    CBT_GRPC_RESOURCE_EXHAUSTED = 8,
    CBT_GRPC_FAILED_PRECONDITION = 9,
    CBT_GRPC_ABORTED = 10,
    CBT_GRPC_OUT_OF_RANGE = 11,
    CBT_GRPC_UNIMPLEMENTED = 12,
    CBT_GRPC_INTERNAL = 13,
    CBT_GRPC_UNAVAILABLE = 14,
    CBT_GRPC_DATA_LOSS = 15,
    CBT_GRPC_UNAUTHENTICATED = 16,
    CBT_GRPC_N_CODES = 17
};

/* The two methods OTLP/gRPC calls, appended to the endpoint's authority. */
#define CBT_GRPC_TRACES_PATH "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
#define CBT_GRPC_METRICS_PATH "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"

/* The length-prefixed message's prefix: a compressed flag, then the
 * message's length as a big-endian uint32. */
#define CBT_GRPC_PREFIX 5

/* Bounds of what a response may make us keep. */
#define CBT_GRPC_MESSAGE_MAX 256   /* grpc-message, decoded, NUL-terminated */
#define CBT_GRPC_DETAILS_MAX 4096  /* grpc-status-details-bin as sent (base64) */

/* "UNAVAILABLE" for 14; "code N" style names are never returned: a code
 * outside 0..16 is "UNKNOWN". */
const char *cbt_grpc_code_name(int code);

/* The gRPC code an HTTP status means when the response carries none of its
 * own (grpc/doc/http-grpc-status-mapping.md): 400 INTERNAL, 401
 * UNAUTHENTICATED, 403 PERMISSION_DENIED, 404 UNIMPLEMENTED, 429 502 503 504
 * UNAVAILABLE, anything else UNKNOWN. */
int cbt_grpc_code_from_http(long http_status);

/* Whether the OTLP spec lets a failed export with `code` be retried:
 * CANCELLED, DEADLINE_EXCEEDED, ABORTED, OUT_OF_RANGE, UNAVAILABLE,
 * DATA_LOSS always; RESOURCE_EXHAUSTED only when the status carried a
 * RetryInfo (has_retry_info); nothing else. */
int cbt_grpc_retryable(int code, int has_retry_info);

/* The 5-byte prefix of a message of `len` bytes. */
void cbt_grpc_frame_prefix(uint8_t out[CBT_GRPC_PREFIX], int compressed, uint32_t len);

/* Read one length-prefixed message from p[0..n): 0 with *msg, *len and
 * *compressed set; 1 when n == 0 (no message: a trailers-only answer); -1
 * when malformed (a short prefix, a flag other than 0 or 1, a length that
 * runs past n). Bytes after the first message are ignored (unary). */
int cbt_grpc_frame_parse(const uint8_t *p, size_t n, int *compressed, const uint8_t **msg,
                         size_t *len);

/* The grpc-timeout value for `ms` milliseconds into out (at least 16
 * bytes): "<ms>m" while it fits gRPC's 8 digits, else whole seconds
 * rounded up, "<s>S". Returns its length. */
size_t cbt_grpc_timeout(uint32_t ms, char *out, size_t cap);

/* The value of one hex digit (either case), or -1: the one the percent
 * decoders (this file's grpc-message, otlp_env.c's headers) share. */
int cbt_otlp_hexval_(char ch);

/* Base64 (RFC 4648's alphabet, and its URL-safe '-' and '_' too; '='
 * padding optional, as gRPC's -bin headers send it without) of s[0..n) into
 * out: the decoded length, or -1 for a character outside those, a lone trailing character, padding
 * in the middle, or more than `cap` bytes. */
long cbt_grpc_base64_decode(const char *s, size_t n, uint8_t *out, size_t cap);

/* Percent-decode grpc-message's value s[0..n) into out (at most cap - 1
 * bytes and a NUL). A '%' not followed by two hex digits is kept as is
 * (the gRPC spec: never drop a message for a bad escape); bytes past the
 * room are cut. Returns the length written. */
size_t cbt_grpc_pct_decode(const char *s, size_t n, char *out, size_t cap);

/* What a google.rpc.Status (decoded grpc-status-details-bin) says about
 * retrying: 1 with *delay_ms set when one of its details is a
 * google.rpc.RetryInfo ("type.googleapis.com/google.rpc.RetryInfo") with a
 * retry_delay (a google.protobuf.Duration; negative reads as 0, more than
 * a day as a day); 0 when none is; -1 when the bytes are not a well-formed
 * message of those types (a truncated field, a varint over 10 bytes, a
 * length past the end, a wire type protobuf does not have, field number 0,
 * nanos outside [0, 1e9)). Unknown fields of the four messages are
 * skipped, as protobuf does. Reads only p[0..n). */
int cbt_grpc_status_retry_delay(const uint8_t *p, size_t n, uint64_t *delay_ms);

/* What the collector said, gathered from the response's header lines as
 * libcurl hands them over: the HTTP status line, then headers, then (after
 * the body, for HTTP/2) trailers. A trailers-only answer puts grpc-status
 * among the headers. */
typedef struct cbt_grpc_resp {
    int status;                         /* grpc-status; -1: not seen */
    int status_bad;                     /* grpc-status was not a decimal 0..99 */
    int content_type_grpc;              /* content-type application/grpc[+...] */
    int encoding_gzip;                  /* grpc-encoding: gzip */
    int encoding_other;                 /* grpc-encoding other than identity / gzip */
    char message[CBT_GRPC_MESSAGE_MAX]; /* grpc-message, percent-decoded */
    char details[CBT_GRPC_DETAILS_MAX]; /* grpc-status-details-bin as sent */
    size_t details_len;
    int details_cut;                    /* it did not fit: read as absent */
} cbt_grpc_resp;

/* Forget a previous response (also done by a status line, "HTTP/..."). */
void cbt_grpc_resp_reset(cbt_grpc_resp *r);

/* Take one header line p[0..n) ("name: value\r\n", any case in the name;
 * a line without ':' is ignored). */
void cbt_grpc_resp_header(cbt_grpc_resp *r, const char *p, size_t n);

/* The call's outcome: the gRPC code (0: accepted) for HTTP status
 * `http_status` and what the headers said: a non-200 status maps as
 * cbt_grpc_code_from_http says whatever else came; a 200 gives grpc-status
 * (UNKNOWN when it was not a number in 0..16), or, with no grpc-status,
 * INTERNAL for a gRPC content-type (the stream ended without its trailers)
 * and UNKNOWN for anything else. *retry_ms: the RetryInfo delay when the
 * code is not OK and grpc-status-details-bin holds one, else -1;
 * *details_bad: 1 when that header was there but unreadable (too long, bad
 * base64, not a Status). */
int cbt_grpc_outcome(long http_status, const cbt_grpc_resp *r, int64_t *retry_ms,
                     int *details_bad);

/* gunzip (RFC 1952) in[0..n) into out[0..cap): 0 with *out_len, -1 when
 * malformed or larger than cap. */
int cbt_grpc_gunzip(const uint8_t *in, size_t n, uint8_t *out, size_t cap, size_t *out_len);

/* An OTLP/gRPC endpoint: an http:// or https:// URL with a host, or a
 * scheme-less "host:port" (no "://", no whitespace or control bytes, not
 * starting with '/' or ':'). 1 when usable. */
int cbt_grpc_endpoint_ok(const char *endpoint);

/* The URL libcurl is given for `path` (CBT_GRPC_TRACES_PATH or
 * CBT_GRPC_METRICS_PATH): the endpoint's scheme (a scheme-less one: http
 * when insecure, https otherwise) and authority, then `path`; the
 * endpoint's own path, query and fragment are ignored, as OTLP/gRPC
 * exporters do. CBT_ERR_INVAL for an endpoint cbt_grpc_endpoint_ok refuses
 * or a URL longer than cap - 1. */
cbt_status cbt_grpc_url(const char *endpoint, int insecure, const char *path, char *out,
                        size_t cap);

#endif /* CBT_EXPORTER_OTLP_GRPC_H */
