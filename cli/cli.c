/* cli/cli.c — owns the `cbt` command line: parse, validate, dispatch.
 *
 * Exit codes: 0 success, 1 runtime failure, 2 usage error (unknown or
 * malformed flag, missing value) or, for replay, bad input, with the problem
 * named on stderr.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cbt.h"
#include "cli_otlp.h"
#include "demo.h"
#include "cmd_replay.h"
#include "cmd_report.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cbt demo [--requests N] [--concurrency C] [--cpu|--gpu] [--output FILE]\n"
            "                [--spans FILE] [--otlp-json FILE] [--seed S] [--trees K] [--slowest K]\n"
            "                [--cacheblend]\n"
            "                [--enable-tracing --otlp-endpoint URL [--otlp-protocol P]]\n"
            "                [--trace-level gpu [--trace-output FILE.lct]] [--plant-queue]\n"
            "       cbt replay FILE.lct [--spans OUT.jsonl] [--output trace.json]\n"
            "                  [--otlp-json OUT.jsonl] [--otlp-endpoint URL] [--speed N | --asap]\n"
            "                  [--force]\n"
            "       cbt replay --events FILE [--spans OUT.jsonl] [--keep-going] [--drop-unfit]\n"
            "                  [--mp-root-end request_end|transfer_end]\n"
            "       cbt report FILE... [--html OUT.html] [--slowest K] [--width W]\n"
            "                  [--max-open N]\n"
            "       cbt version\n"
            "\n"
            "  demo     run a synthetic LMCache-style workload (lookup_prefetch, L2 load,\n"
            "           scatter with re-RoPE, store) and show where each request's time went\n"
            "  --requests N       requests to run (1..1000000, default 8)\n"
            "  --concurrency C    worker threads, one stream each (1..256, default 4)\n"
            "  --cpu | --gpu      backend (default: the GPU when present, else the CPU)\n"
            "  --output FILE      trace file for ui.perfetto.dev (default cbt-trace.json)\n"
            "  --spans FILE       JSON-lines span file (default cbt-spans.jsonl)\n"
            "  --otlp-json FILE   also an OTLP JSON file: one ExportTraceServiceRequest per\n"
            "                     line, the collector file exporter's format, for jq or\n"
            "                     lmcache bench trace-analyze (default: CBT_OTLP_JSON_PATH)\n"
            "  --seed S           workload seed (default 42)\n"
            "  --trees K          request trees to print (0..1000, default 3)\n"
            "  --slowest K        waterfalls of the slowest requests (0..1000, default 3)\n"
            "  --cacheblend       the CacheBlend V3 workload instead: a scheduler, a worker\n"
            "                     and a blend server (threads here, processes in production)\n"
            "                     joining one trace through W3C traceparents; head sampling\n"
            "                     from OTEL_TRACES_SAMPLER[_ARG] (CPU backend, work simulated)\n"
            "  --enable-tracing   also export spans over OTLP; needs --otlp-endpoint\n"
            "  --otlp-endpoint U  collector base URL, e.g. http://localhost:4318 (OTLP/HTTP:\n"
            "                     /v1/traces is appended) or, with grpc, http://localhost:4317;\n"
            "                     OTEL_EXPORTER_OTLP_* apply\n"
            "  --otlp-protocol P  grpc, http/protobuf or http/json (default:\n"
            "                     OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf)\n"
            "  --trace-level gpu  record what the span builders consume into an LMCT file\n"
            "                     (CBT_TRACE_LEVEL); replay it anywhere with cbt replay FILE\n"
            "  --trace-output F   the recording (CBT_TRACE_OUTPUT; default: a timestamped\n"
            "                     file under $TMPDIR, named on stderr)\n"
            "  --plant-queue      a slow stream: 20 ms of other work ahead of each request's\n"
            "                     first stream operation, so it shows queue time (cbt.queue_ns)\n"
            "\n"
            "  replay   replay a recording (FILE.lct) into the spans of its live run, or\n"
            "           publish a file of events (--events, JSON lines) through cbt's MP\n"
            "           and CacheBlend span builders (cbt replay --help)\n"
            "\n"
            "  report   where the requests' time went, from span files, OTLP JSON files\n"
            "           and recordings (several at once, merged): completeness first, then\n"
            "           durations and queue time per span name, host-side work, GPU queue,\n"
            "           GPU busy and GPU tail per request, hit rate against latency, the\n"
            "           slowest requests as waterfalls; --html FILE writes the same as one\n"
            "           self-contained page with plots (cbt report --help)\n");
}

static int parse_u64(const char *flag, const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    if (!s) {
        fprintf(stderr, "cbt: %s needs a value\n", flag);
        return -1;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi) {
        fprintf(stderr, "cbt: %s: '%s' is not an integer in [%llu, %llu]\n", flag, s,
                (unsigned long long)lo, (unsigned long long)hi);
        return -1;
    }
    *out = v;
    return 0;
}

static void on_stop_signal(int sig)
{
    (void)sig;
    atomic_store_explicit(&cbt_demo_stop_, 1, memory_order_relaxed); /* lock-free: signal-safe */
}

static int cmd_demo(int argc, char **argv)
{
    cbt_demo_opts o = cbt_demo_defaults();
    const char *endpoint = NULL;
    int tracing = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t v;
        if (!strcmp(a, "--requests")) {
            if (parse_u64(a, val, 1, 1000000, &v))
                return 2;
            o.requests = (uint32_t)v;
            i++;
        } else if (!strcmp(a, "--concurrency")) {
            if (parse_u64(a, val, 1, 256, &v))
                return 2;
            o.concurrency = (uint32_t)v;
            i++;
        } else if (!strcmp(a, "--seed")) {
            if (parse_u64(a, val, 0, UINT64_MAX, &v))
                return 2;
            o.seed = v;
            i++;
        } else if (!strcmp(a, "--trees")) {
            if (parse_u64(a, val, 0, 1000, &v))
                return 2;
            o.trees = (uint32_t)v;
            i++;
        } else if (!strcmp(a, "--slowest")) {
            if (parse_u64(a, val, 0, 1000, &v))
                return 2;
            o.slowest = (uint32_t)v;
            i++;
        } else if (!strcmp(a, "--output") || !strcmp(a, "--spans") ||
                   !strcmp(a, "--otlp-json")) {
            if (!val || !*val || val[0] == '-') {
                fprintf(stderr, "cbt: %s needs a file name\n", a);
                return 2;
            }
            if (!strcmp(a, "--output"))
                o.output = val;
            else if (!strcmp(a, "--spans"))
                o.spans = val;
            else
                o.otlp_json = val;
            i++;
        } else if (!strcmp(a, "--otlp-endpoint")) {
            if (!val || (strncmp(val, "http://", 7) != 0 && strncmp(val, "https://", 8) != 0)) {
                fprintf(stderr, "cbt: --otlp-endpoint needs an http:// or https:// URL\n");
                return 2;
            }
            if (strlen(val) > CBT_DEMO_ENDPOINT_MAX) {
                fprintf(stderr, "cbt: --otlp-endpoint: the URL is %zu bytes, longer than %zu\n",
                        strlen(val), (size_t)CBT_DEMO_ENDPOINT_MAX);
                return 2;
            }
            endpoint = val;
            i++;
        } else if (!strcmp(a, "--otlp-protocol")) {
            if ((o.otlp_protocol = cli_otlp_protocol_parse(val)) < 0) {
                fprintf(stderr, "cbt: --otlp-protocol: %s%s%s is not grpc, http/protobuf or "
                                "http/json\n", val ? "'" : "", val ? val : "(no value)",
                        val ? "'" : "");
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--enable-tracing")) {
            tracing = 1;
        } else if (!strcmp(a, "--trace-level")) {
            if (!val || strcmp(val, "gpu") != 0) {
                fprintf(stderr, "cbt: --trace-level: cbt records level \"gpu\" only%s%s\n",
                        val ? ", not " : " (a value is needed)", val ? val : "");
                return 2;
            }
            o.trace_level = val;
            i++;
        } else if (!strcmp(a, "--trace-output")) {
            if (!val || !*val || val[0] == '-') {
                fprintf(stderr, "cbt: --trace-output needs a file name\n");
                return 2;
            }
            o.trace_output = val;
            i++;
        } else if (!strcmp(a, "--cacheblend")) {
            o.cacheblend = 1;
        } else if (!strcmp(a, "--plant-queue")) {
            o.plant_queue_ms = CBT_DEMO_PLANT_MS;
        } else if (!strcmp(a, "--cpu")) {
            o.backend = CBT_DEMO_CPU;
        } else if (!strcmp(a, "--gpu")) {
            o.backend = CBT_DEMO_GPU;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "cbt: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (tracing && !endpoint) {
        /* as the LMCache server does: there is no local fallback for OTLP */
        fprintf(stderr, "cbt: --enable-tracing requires --otlp-endpoint: tracing exports spans to\n"
                        "     an OpenTelemetry collector and there is no local fallback for it\n"
                        "     (the trace file, --output, needs no backend)\n");
        return 2;
    }
    if (endpoint && !tracing) {
        fprintf(stderr, "cbt: --otlp-endpoint is given without --enable-tracing\n");
        return 2;
    }
    if (o.otlp_protocol >= 0 && !tracing) {
        fprintf(stderr, "cbt: --otlp-protocol is given without --enable-tracing\n");
        return 2;
    }
    o.otlp_endpoint = tracing ? endpoint : NULL;
    if (o.cacheblend && o.plant_queue_ms) {
        fprintf(stderr, "cbt: --plant-queue plants on the MP demo's streams; drop --cacheblend\n");
        return 2;
    }
    if (o.cacheblend && o.backend == CBT_DEMO_GPU) {
        fprintf(stderr, "cbt: --cacheblend runs on the CPU backend; drop --gpu\n");
        return 2;
    }
    if (o.trace_output && !o.trace_level) {
        fprintf(stderr, "cbt: --trace-output is given without --trace-level gpu\n");
        return 2;
    }
    if (o.concurrency > o.requests)
        o.concurrency = o.requests;
    /* SIGTERM/SIGINT: stop issuing requests and shut down as usual, so the
     * trace and span files are closed cleanly */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    o.progress = isatty(STDERR_FILENO) && o.requests >= 200;
    return cbt_demo_run(&o, stdout);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "demo"))
        return cmd_demo(argc - 2, argv + 2);
    if (!strcmp(argv[1], "replay")) {
        /* --events FILE: a file of events (JSON lines); else a recording */
        for (int i = 2; i < argc; i++)
            if (!strcmp(argv[i], "--events"))
                return cbt_replay_main(argc - 2, argv + 2);
        return cbt_replay_lmct_main(argc - 2, argv + 2);
    }
    if (!strcmp(argv[1], "report"))
        return cbt_report_main(argc - 2, argv + 2);
    if (!strcmp(argv[1], "version")) {
        printf("cbt %s\n", CBT_VERSION_STRING);
        return 0;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "cbt: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
