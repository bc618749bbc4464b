/* bench/grpc_sink.h — owns the benchmarks' loopback OTLP/gRPC collector: a
 * minimal HTTP/2 cleartext (h2c, prior knowledge) server built on
 * libnghttp2, on 127.0.0.1 (an ephemeral port), in a thread of this process.
 * It reads each request (any method path), checks that it looks like a gRPC
 * unary call (content-type application/grpc, te: trailers, one
 * length-prefixed message whose length matches the body) and answers 200
 * with an empty message frame (an empty ExportTraceServiceResponse) and the
 * trailers grpc-status 0. A request that does not look right is counted in
 * `bad` and answered grpc-status 13 (INTERNAL), so an exporter sending
 * something else notices. Nothing is decoded or kept: the benchmarks
 * measure cbt, not the collector.
 *
 * Built only when nghttp2/nghttp2.h is found (Debian: libnghttp2-dev);
 * bench/CMakeLists.txt defines CBT_BENCH_GRPC_SINK then, and the benchmarks'
 * gRPC mode says it is missing otherwise.
 *
 * Bounds: 16 connections at once (more are closed at accept), 64 KiB read
 * per poll round, 256 KiB of answer frames buffered per connection (written
 * in one go after each read, as gRPC servers' buffered writers do), one
 * small per-stream record (freed when the stream closes). It polls with a 0.5 s timeout; grpc_sink_stop() ends it.
 */
#ifndef CBT_BENCH_GRPC_SINK_H
#define CBT_BENCH_GRPC_SINK_H

#include <stddef.h>
#include <stdint.h>

typedef struct grpc_sink grpc_sink;

typedef struct grpc_sink_counts {
    uint64_t requests;    /* answered (any status) */
    uint64_t bytes;       /* their request body bytes (frames, as sent) */
    uint64_t bad;         /* of those, not a well-formed gRPC unary request */
    uint64_t connections; /* accepted so far */
    double cpu_s;         /* the collector thread's CPU */
} grpc_sink_counts;

/* What the next answers say (the default: all zero, which is 200, an
 * empty message, grpc-status 0). For checks beyond the benchmark. */
typedef struct grpc_sink_answer {
    int grpc_status;         /* in the trailers */
    char message[128];       /* grpc-message, sent as is; "" none */
    char details_b64[512];   /* grpc-status-details-bin; "" none */
    uint8_t body[256];       /* the response message (after the 5-byte prefix) */
    size_t body_len;
    int trailers_only;       /* one HEADERS frame with the status, no body */
    int http_status;         /* 0: 200 */
} grpc_sink_answer;

/* Listen and serve from a thread of this process; exits(1) on failure. */
grpc_sink *grpc_sink_start(void);
uint16_t grpc_sink_port(const grpc_sink *s);
/* Answer every later request with *a (copied). */
void grpc_sink_set_answer(grpc_sink *s, const grpc_sink_answer *a);
grpc_sink_counts grpc_sink_now(grpc_sink *s);
/* Stop it (join the thread), free it; the final counts. */
grpc_sink_counts grpc_sink_stop(grpc_sink *s);

#endif /* CBT_BENCH_GRPC_SINK_H */
