/* cli/cli_sinks.c — owns the `cbt` command's file and collector sinks
 * (cli_sinks.h): the trace file, the span file and the OTLP exporter, and
 * the report of what each delivered or lost, for `cbt demo` and `cbt replay`. */
#include "cli_sinks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cbt/otlp.h"
#include "cbt/trace_file.h"
#include "cli_otlp.h"
#include "demo.h"

_Static_assert(CBT_DEMO_ENDPOINT_MAX + sizeof "/v1/metrics" <=
                   sizeof(((cbt_otlp_config *)0)->endpoint) &&
               CBT_DEMO_ENDPOINT_MAX + sizeof "/v1/metrics" <=
                   sizeof(((cbt_otlp_config *)0)->metrics_endpoint),
               "cli.c's --otlp-endpoint bound must leave room for the suffixes");

/* Add *sk through the watch *w; on failure the sink is destroyed. */
static cbt_status add_watched(sink_watch *w, const cbt_sink *sk)
{
    cbt_sink wrapped;
    sink_watch_wrap(w, sk, &wrapped);
    cbt_status st = cbt_add_sink(&wrapped);
    if (st != CBT_OK && sk->destroy)
        sk->destroy(sk->ctx);
    return st;
}

int cli_sinks_add(const char *prog, const char *output, const char *spans, const char *otlp_json,
                  const char *otlp_endpoint, int otlp_protocol, cli_sinks *ds)
{
    cbt_sink sk;
    cbt_status st = CBT_OK;
    memset(ds, 0, sizeof *ds);
    ds->output = output;
    ds->spans_path = spans;
    ds->endpoint = otlp_endpoint;
    if (ds->output && (st = cbt_trace_file_sink_create(ds->output, &sk)) == CBT_OK)
        st = add_watched(&ds->trace, &sk);
    else if (ds->output)
        fprintf(stderr, "%s: cannot write the trace file '%s': %s\n", prog, ds->output,
                cbt_strerror(st));
    if (ds->output && st != CBT_OK)
        return -1;
    ds->has_trace = ds->output != NULL;
    if (ds->spans_path && (st = cbt_jsonl_sink_create(ds->spans_path, &sk)) == CBT_OK)
        st = add_watched(&ds->spans, &sk);
    else if (ds->spans_path)
        fprintf(stderr, "%s: cannot write the span file '%s': %s\n", prog, ds->spans_path,
                cbt_strerror(st));
    if (ds->spans_path && st != CBT_OK)
        return -1;
    ds->has_spans = ds->spans_path != NULL;
    const char *env_ojson = getenv(CBT_OTLP_JSON_PATH_ENV);
    ds->otlp_json = otlp_json ? otlp_json : env_ojson && *env_ojson ? env_ojson : NULL;
    if (ds->otlp_json) {
#ifdef CBT_WITH_OTLP
        if ((st = cbt_otlp_json_sink_create(ds->otlp_json, NULL, &sk)) == CBT_OK)
            st = add_watched(&ds->ojson, &sk);
        else /* the sink said why on stderr */
            fprintf(stderr, "%s: cannot write the OTLP JSON file '%s'%s: %s\n", prog,
                    ds->otlp_json, otlp_json ? "" : " (" CBT_OTLP_JSON_PATH_ENV ")",
                    cbt_strerror(st));
        if (st != CBT_OK)
            return -1;
        ds->has_ojson = 1;
#else
        fprintf(stderr, "%s: this build has no OTLP encoder for the OTLP JSON file '%s' "
                        "(protobuf-c/libcurl missing)\n", prog, ds->otlp_json);
        return -1;
#endif
    }
    if (ds->endpoint) {
#ifdef CBT_WITH_OTLP
        cbt_otlp_config c;
        if (cli_otlp_config(prog, ds->endpoint, otlp_protocol, &c) != 0)
            return -1;
        c.blend = cbt_blend_metrics_current(); /* lmcache_blend.* to /v1/metrics */
        ds->otlp_final = (cbt_otlp_stats)CBT_STRUCT_INIT(cbt_otlp_stats);
        c.final_stats = &ds->otlp_final; /* the figures after its last export */
        cbt_otlp_exporter *e = NULL;
        if ((st = cbt_otlp_exporter_create(&c, &e, &sk)) != CBT_OK ||
            (st = cbt_add_sink(&sk)) != CBT_OK) {
            fprintf(stderr, "%s: cannot start the OTLP exporter: %s\n", prog, cbt_strerror(st));
            return -1;
        }
        ds->otlp = e;
#else
        fprintf(stderr, "%s: this build has no OTLP exporter (protobuf-c/libcurl missing)\n", prog);
        return -1;
#endif
    }
    return 0;
}

/* After cbt_shutdown: where the spans went, from the final figures. A file
 * that lost spans is named on stderr with the count (and not announced as
 * written); so are the OTLP exporter's drops. Either fails the run (1). */
int cli_sinks_report(const char *prog, const cli_sinks *ds, FILE *out)
{
    int rc = 0;
    if (ds->has_trace && ds->trace.lost) {
        fprintf(stderr, "%s: the trace file '%s' lost %llu spans (writes failed)\n", prog,
                ds->output, (unsigned long long)ds->trace.lost);
        rc = 1;
    } else if (ds->has_trace) {
        fprintf(out, "trace file: %s (open it at https://ui.perfetto.dev or chrome://tracing)\n",
                ds->output);
    }
    if (ds->has_spans && ds->spans.lost) {
        fprintf(stderr, "%s: the span file '%s' lost %llu spans (writes failed)\n", prog,
                ds->spans_path, (unsigned long long)ds->spans.lost);
        rc = 1;
    } else if (ds->has_spans) {
        fprintf(out, "span file:  %s (one JSON object per span)\n", ds->spans_path);
    }
    if (ds->has_ojson && ds->ojson.lost) {
        fprintf(stderr, "%s: the OTLP JSON file '%s' lost %llu spans (writes failed or its "
                        "queue was full)\n", prog, ds->otlp_json,
                (unsigned long long)ds->ojson.lost);
        rc = 1;
    } else if (ds->has_ojson) {
        fprintf(out, "OTLP JSON:  %s (one ExportTraceServiceRequest per line, as the "
                     "collector's file exporter writes)\n", ds->otlp_json);
    }
#ifdef CBT_WITH_OTLP
    if (ds->otlp) {
        const cbt_otlp_stats *os = &ds->otlp_final;
        fprintf(out, "OTLP: %llu spans exported to %s, %llu dropped, %llu retries\n",
                (unsigned long long)os->spans_exported, ds->endpoint,
                (unsigned long long)os->spans_dropped, (unsigned long long)os->retries);
        if (os->spans_dropped) {
            fprintf(stderr, "%s: the OTLP exporter dropped %llu spans\n", prog,
                    (unsigned long long)os->spans_dropped);
            rc = 1;
        }
    }
#endif
    return rc;
}


int cli_trace_report(const char *prog, const cbt_metrics *fin, const char *level,
                     const char *path, FILE *out)
{
    if (!level && !fin->trace_records && !fin->trace_bytes)
        return 0;
    fprintf(out, "trace recording: %llu records, %llu bytes%s%s (replay: cbt replay FILE)\n",
            (unsigned long long)fin->trace_records, (unsigned long long)fin->trace_bytes,
            path ? " in " : "", path ? path : "");
    if (fin->trace_records_dropped || fin->trace_write_errors) {
        fprintf(stderr, "%s: the trace recording dropped %llu records (%llu failed writes): "
                        "its replay will not be exact\n",
                prog, (unsigned long long)fin->trace_records_dropped,
                (unsigned long long)fin->trace_write_errors);
        return 1;
    }
    return 0;
}

/* Spans to stdout: a sink of our own (the JSON-lines sink opens a path). */
static cbt_status stdout_on_span(void *ctx, const cbt_span *s)
{
    char buf[8192];
    size_t n = cbt_span_to_json(s, buf, sizeof buf);
    (void)ctx;
    if (n < sizeof buf)
        return fwrite(buf, 1, n, stdout) == n ? CBT_OK : CBT_ERR_IO;
    /* a span with long strings: the length it needs is bounded (32
     * attributes, a 2 KiB arena), so take it once from the heap */
    char *big = malloc(n + 1);
    if (!big)
        return CBT_ERR_NOMEM;
    size_t m = cbt_span_to_json(s, big, n + 1);
    cbt_status st = m <= n && fwrite(big, 1, m, stdout) == m ? CBT_OK : CBT_ERR_IO;
    free(big);
    return st;
}

static cbt_status stdout_flush(void *ctx)
{
    (void)ctx;
    return fflush(stdout) == 0 ? CBT_OK : CBT_ERR_IO;
}

void cli_stdout_sink(cbt_sink *out)
{
    memset(out, 0, sizeof *out);
    out->version = CBT_SINK_VERSION;
    out->size = (uint32_t)sizeof *out;
    out->name = "stdout";
    out->on_span = stdout_on_span;
    out->flush = stdout_flush;
}
