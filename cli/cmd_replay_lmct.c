/* cli/cmd_replay_lmct.c — owns `cbt replay FILE.lct` (cmd_replay.h): a trace
 * recorded at level "gpu" (cbt/replay.h, docs/recording.md) replayed on
 * this machine, GPU or not, through a replay tracer into the span file, the
 * trace file and an OTLP collector, as the live run's spans. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cbt.h"
#include "cbt/replay.h"
#include "cli_sinks.h"
#include "demo.h"
#include "cmd_replay.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cbt replay FILE.lct [--spans OUT.jsonl] [--output trace.json]\n"
            "                  [--otlp-json OUT.jsonl] [--otlp-endpoint URL]\n"
            "                  [--speed N | --asap] [--force] [--quiet]\n"
            "\n"
            "  Replay a recording made with --trace-level gpu (cbt demo, CBT_TRACE_LEVEL=gpu,\n"
            "  cbt_config.trace_level) through the span builders it was recorded with, on\n"
            "  any machine: the spans are the live run's (names, parents, attributes, times,\n"
            "  trace and span ids).\n"
            "  --spans OUT        JSON-lines span file ('-' or none of the four: stdout)\n"
            "  --output FILE      trace file for ui.perfetto.dev\n"
            "  --otlp-json FILE   OTLP JSON file: one ExportTraceServiceRequest per line, the\n"
            "                     collector file exporter's format (CBT_OTLP_JSON_PATH)\n"
            "  --otlp-endpoint U  export to a collector (/v1/traces appended; OTEL_* apply)\n"
            "  --asap             as fast as possible (the default)\n"
            "  --speed N          paced at N times the recorded rate (1: as recorded)\n"
            "  --force            replay despite a cbt version or configuration mismatch\n"
            "  --quiet            no progress line\n"
            "  (cbt replay --events FILE replays a file of JSON-line events instead)\n");
}

int cbt_replay_lmct_main(int argc, char **argv)
{
    const char *file = NULL, *spans = NULL, *output = NULL, *endpoint = NULL, *ojson = NULL;
    cbt_replay_options ro = cbt_replay_options_default();
    int quiet = 0, paced = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--spans") || !strcmp(a, "--output")) {
            if (!val || !*val || (val[0] == '-' && val[1])) {
                fprintf(stderr, "cbt replay: %s needs a file name\n", a);
                return 2;
            }
            *(!strcmp(a, "--spans") ? &spans : &output) = val;
            i++;
        } else if (!strcmp(a, "--otlp-json")) {
            if (!val || !*val || val[0] == '-') {
                fprintf(stderr, "cbt replay: --otlp-json needs a file name\n");
                return 2;
            }
            ojson = val;
            i++;
        } else if (!strcmp(a, "--otlp-endpoint")) {
            if (!val || (strncmp(val, "http://", 7) != 0 && strncmp(val, "https://", 8) != 0) ||
                strlen(val) > CBT_DEMO_ENDPOINT_MAX) {
                fprintf(stderr, "cbt replay: --otlp-endpoint needs an http:// or https:// URL of "
                                "at most %zu bytes\n", (size_t)CBT_DEMO_ENDPOINT_MAX);
                return 2;
            }
            endpoint = val;
            i++;
        } else if (!strcmp(a, "--speed")) {
            char *end = NULL;
            double v = val ? strtod(val, &end) : 0.0;
            if (!val || end == val || *end || !(v > 0.0) || v > 1e6) {
                fprintf(stderr, "cbt replay: --speed needs a factor in (0, 1e6], not '%s'\n",
                        val ? val : "");
                return 2;
            }
            if (paced++) {
                fprintf(stderr, "cbt replay: --speed and --asap are exclusive (give one)\n");
                return 2;
            }
            ro.speed = v;
            i++;
        } else if (!strcmp(a, "--asap")) {
            if (paced++) {
                fprintf(stderr, "cbt replay: --speed and --asap are exclusive (give one)\n");
                return 2;
            }
            ro.speed = 0.0;
        } else if (!strcmp(a, "--force")) {
            ro.force = true;
        } else if (!strcmp(a, "--quiet")) {
            quiet = 1;
        } else if (a[0] == '-') {
            fprintf(stderr, "cbt replay: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (file) {
            fprintf(stderr, "cbt replay: one recording at a time ('%s' and '%s')\n", file, a);
            return 2;
        } else {
            file = a;
        }
    }
    if (!file) {
        fprintf(stderr, "cbt replay: which recording? (cbt replay FILE.lct)\n");
        usage(stderr);
        return 2;
    }
    int to_stdout = (!spans && !output && !endpoint && !ojson) || (spans && !strcmp(spans, "-"));
    if (spans && !strcmp(spans, "-"))
        spans = NULL;
    ro.log = stderr;
    ro.progress = quiet ? NULL : stderr;
    cbt_replay *r = NULL;
    cbt_status st = cbt_replay_open(file, &ro, &r);
    if (st) {
        fprintf(stderr, "cbt replay: %s\n", cbt_replay_message(NULL));
        return st == CBT_ERR_UNSUPPORTED || st == CBT_ERR_NOMEM ? 1 : 2;
    }
    cbt_config cfg = cbt_config_default();
    if ((st = cbt_replay_config(r, &cfg)) || (st = cbt_init(&cfg)) ||
        (st = cbt_replay_add_builders(r))) {
        fprintf(stderr, "cbt replay: cannot start the replay tracer: %s\n", cbt_strerror(st));
        cbt_shutdown();
        cbt_replay_close(r);
        return 1;
    }
    cli_sinks ds;
    if (cli_sinks_add("cbt replay", output, spans, ojson, endpoint, -1, &ds) != 0) {
        cbt_shutdown();
        cbt_replay_close(r);
        return 1;
    }
    if (to_stdout) {
        cbt_sink so;
        cli_stdout_sink(&so);
        if ((st = cbt_add_sink(&so))) {
            fprintf(stderr, "cbt replay: %s\n", cbt_strerror(st));
            cbt_shutdown();
            cbt_replay_close(r);
            return 1;
        }
    }
    cbt_replay_stats rs = CBT_STRUCT_INIT(cbt_replay_stats);
    cbt_status rst = cbt_replay_run(r, &rs);
    int rc = 0;
    if (rst == CBT_ERR_LMCT_TRUNCATED) {
        fprintf(stderr, "cbt replay: warning: %s (the records before it were replayed)\n",
                cbt_replay_message(r));
        rc = 3;
    } else if (rst == CBT_ERR_REPLAY_MISMATCH) {
        rc = 2; /* said on the log */
    } else if (rst) {
        fprintf(stderr, "cbt replay: %s: %s\n", cbt_strerror(rst), cbt_replay_message(r));
        rc = 2;
    }
    cbt_metrics fin = CBT_STRUCT_INIT(cbt_metrics);
    cbt_shutdown_final(&fin);
    FILE *out = to_stdout ? stderr : stdout;
    fprintf(out, "cbt replay: %s: %" PRIu64 " records (%" PRIu64 " events, %" PRIu64
                 " ring records, %" PRIu64 " clock calibrations) -> %" PRIu64 " spans%s\n",
            file, rs.records, rs.events, rs.ring_records, rs.clock_records, fin.spans_ended,
            rs.shutdown_seen ? "" : "; the recording has no shutdown (its open spans end here)");
    if (rs.gaps) {
        fprintf(stderr, "cbt replay: the recording dropped %" PRIu64 " records in %" PRIu64
                        " places (its buffer was full): the spans near them may differ from the "
                        "live run's\n", rs.gap_records, rs.gaps);
        if (!rc)
            rc = 3;
    }
    if (rs.unknown_skipped || rs.malformed_skipped) {
        fprintf(stderr, "cbt replay: skipped %" PRIu64 " records of an unknown qualname and %" PRIu64
                        " this build cannot take\n", rs.unknown_skipped, rs.malformed_skipped);
        if (!rc)
            rc = 3;
    }
    if (cli_sinks_report("cbt replay", &ds, out) && !rc)
        rc = 1;
    cbt_replay_close(r);
    return rc;
}
