/* bench/http_sink.h — owns the benchmarks' loopback OTLP collector: a
 * minimal HTTP/1.1 server on 127.0.0.1 (an ephemeral port) that reads each
 * request (Content-Length bodies, Expect: 100-continue) and answers 200 with
 * an empty body, counting requests and body bytes. Nothing is decoded or
 * kept: the benchmarks measure cbt, not the collector
 * (tests/http_loopback.h is the recording, scriptable one the tests use).
 *
 * Two places it can run:
 *   http_sink_start()  a thread of this process (bench_load: its CPU shows
 *                      in the process's, and per thread in /proc/self/task);
 *   http_sink_fork()   a child process (bench_paced: getrusage(RUSAGE_SELF)
 *                      then counts cbt and the program, never the collector,
 *                      and `strace -f` sees the child's tids apart).
 * Either way it polls its sockets with a 0.5 s timeout; http_sink_stop()
 * ends it and returns the totals.
 *
 * Bounds: 16 connections at once (more are closed at accept), 64 MiB per
 * request (a larger one closes its connection).
 */
#ifndef CBT_BENCH_HTTP_SINK_H
#define CBT_BENCH_HTTP_SINK_H

#include <stdint.h>

typedef struct http_sink http_sink;

typedef struct http_sink_counts {
    uint64_t requests; /* answered 200 */
    uint64_t bytes;    /* body bytes of those */
    double cpu_s;      /* the collector's own CPU (its thread, or the child) */
} http_sink_counts;

/* Listen and serve from a thread of this process; exits(1) on failure. */
http_sink *http_sink_start(void);
/* Listen and serve from a child process; exits(1) on failure. */
http_sink *http_sink_fork(void);
/* The port it listens on (127.0.0.1). */
uint16_t http_sink_port(const http_sink *s);
/* The counts so far (a child answers over a pipe: a few microseconds). */
http_sink_counts http_sink_now(http_sink *s);
/* Stop it (join the thread, or reap the child), free it; the final counts. */
http_sink_counts http_sink_stop(http_sink *s);

#endif /* CBT_BENCH_HTTP_SINK_H */
