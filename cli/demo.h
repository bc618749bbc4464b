/* cli/demo.h — owns `cbt demo`: a synthetic LMCache-style MP workload.
 *
 * Each request runs lookup_prefetch with a mix of hits and misses, then a
 * retrieve (on hits) and a store on its worker's stream, and ends its session
 * right after enqueuing, so REQUEST_END races the stream work as in the
 * seed's scenarios 5 and 6. The stream is a CPU stream running the kernels'
 * C references, or with --gpu a CUDA stream running the CUDA kernels.
 * --plant-queue puts other work (a host function that sleeps: the stream's
 * worker on the CPU, a cudaLaunchHostFunc on the GPU, which holds the CUDA
 * stream as a long kernel would) ahead of each request's first stream
 * operation, so that operation and its kernels wait in the stream's queue:
 * a visibly slow stream (docs/cli.md).
 */
#ifndef CBT_HOST_DEMO_H
#define CBT_HOST_DEMO_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* The longest --otlp-endpoint: with "/v1/metrics" appended it still fits
 * cbt_otlp_config's 1024-byte URL fields (cli.c refuses longer, exit 2). */
#define CBT_DEMO_ENDPOINT_MAX (1024u - sizeof "/v1/metrics")

typedef enum cbt_demo_backend {
    CBT_DEMO_AUTO = 0, /* the GPU when one is present, else the CPU backend */
    CBT_DEMO_CPU = 1,
    CBT_DEMO_GPU = 2,
} cbt_demo_backend;

typedef struct cbt_demo_opts {
    uint32_t requests;    /* total requests */
    uint32_t concurrency; /* worker threads, each with its own stream */
    uint64_t seed;
    const char *output;   /* trace file (Chrome trace-event JSON) */
    const char *spans;    /* JSON-lines span file */
    const char *otlp_json; /* --otlp-json: the OTLP JSON file (NULL: CBT_OTLP_JSON_PATH's) */
    uint32_t trees;       /* request trees to print */
    uint32_t slowest;     /* waterfalls of the slowest requests to print */
    cbt_demo_backend backend;
    const char *otlp_endpoint; /* with --enable-tracing: the collector; at most
                                  CBT_DEMO_ENDPOINT_MAX bytes */
    int otlp_protocol;    /* --otlp-protocol: a cbt_otlp_protocol; -1 (the
                             default): OTEL_EXPORTER_OTLP_PROTOCOL's */
    int progress;         /* draw a progress bar on stderr */
    int cacheblend;       /* the CacheBlend three-role workload (demo_cb.h) instead */
    const char *trace_level;  /* --trace-level: "gpu" records an LMCT file (cbt/replay.h) */
    const char *trace_output; /* --trace-output: its path (NULL: the library's default) */
    uint32_t plant_queue_ms;  /* --plant-queue: before each request's first operation on its
                                 stream, that long of other work on the same stream (0: off) */
} cbt_demo_opts;

/* --plant-queue's work: long enough to stand out from a worker's wake-up
 * (tens of microseconds) and from the demo's own operations (milliseconds). */
#define CBT_DEMO_PLANT_MS 20u

/* Set once SIGTERM (or SIGINT) arrived: the demo stops issuing requests and
 * shuts down as usual, which closes the trace and span files cleanly. */
extern _Atomic int cbt_demo_stop_; /* relaxed: a flag, nothing is published with it */

cbt_demo_opts cbt_demo_defaults(void);

/* Run the workload and print totals and trees to `out`. Returns a process
 * exit code (0 success, 1 runtime failure). */
int cbt_demo_run(const cbt_demo_opts *o, FILE *out);

#endif /* CBT_HOST_DEMO_H */
