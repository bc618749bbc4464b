/* cli/cli_sinks.h — the `cbt` command's sinks besides the demo's
 * in-memory one: the trace file (--output) and the span file (--spans)
 * through a sink_watch each (their final spans_lost outlives them), and the
 * OTLP JSON file (--otlp-json, else CBT_OTLP_JSON_PATH) through a
 * sink_watch too, and the OTLP exporter (--otlp-endpoint) with its
 * final_stats. Owned by the
 * command, alive until after cbt_shutdown. */
#ifndef CBT_CLI_SINKS_H
#define CBT_CLI_SINKS_H

#include <stdio.h>

#include "cbt.h"
#include "sink_watch.h"

typedef struct cli_sinks {
    const char *output, *spans_path, *endpoint; /* as given (NULL: none) */
    const char *otlp_json;                      /* as given, or the environment's */
    sink_watch trace, spans, ojson;
    int has_trace, has_spans, has_ojson;
    cbt_otlp_exporter *otlp;
#ifdef CBT_WITH_OTLP
    cbt_otlp_stats otlp_final; /* filled when cbt_shutdown destroys the exporter */
#endif
} cli_sinks;

/* Add the sinks asked for to the process-wide tracer (cbt_add_sink); a
 * message naming `prog` and the file or URL on failure. `otlp_json`: the
 * OTLP JSON file (NULL: CBT_OTLP_JSON_PATH when set and not empty).
 * `otlp_protocol`: a cbt_otlp_protocol (--otlp-protocol), or -1 for the
 * environment's (cli_otlp.h). Returns 0 or -1. */
int cli_sinks_add(const char *prog, const char *output, const char *spans, const char *otlp_json,
                  const char *otlp_endpoint, int otlp_protocol, cli_sinks *ds);

/* After cbt_shutdown: where the spans went, from the final figures. A file
 * that lost spans is named on stderr with the count; so are the exporter's
 * drops. Returns 1 when anything was lost, else 0. */
int cli_sinks_report(const char *prog, const cli_sinks *ds, FILE *out);

/* A sink writing each span as a JSON line to stdout (the JSON-lines sink
 * opens a path). */
void cli_stdout_sink(cbt_sink *out);

/* After cbt_shutdown_final: what the trace recording (--trace-level) wrote,
 * from the final metrics; records it dropped are named on stderr. Returns 1
 * when any were dropped or a write failed, else 0 (also when not recording). */
int cli_trace_report(const char *prog, const cbt_metrics *fin, const char *level,
                     const char *path, FILE *out);

#endif /* CBT_CLI_SINKS_H */
