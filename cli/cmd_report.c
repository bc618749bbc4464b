/* cli/cmd_report.c — owns the `cbt report` command line (cmd_report.h): the
 * flags, opening and recognising each input, feeding the aggregator (LMCT
 * recordings replayed first, one after the other; then the JSON files merged
 * by end time), and the two outputs. The work is in report_read.c,
 * report_lmct.c, report_agg.c, report_text.c and report_html.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cmd_report.h"
#include "report_agg.h"
#include "report_lmct.h"
#include "report_out.h"
#include "report_read.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cbt report FILE... [--html OUT.html] [--slowest K] [--width W]\n"
            "                  [--max-open N]\n"
            "\n"
            "  Where the requests' time went, from cbt's JSON-lines span files (cbt demo\n"
            "  --spans, spans_path), OTLP JSON files (the OpenTelemetry Collector's file\n"
            "  exporter) and LMCT recordings (--trace-level gpu, replayed here), several at\n"
            "  once (one per server: merged by trace id). Completeness first (bad lines,\n"
            "  incomplete roots, orphans, incomplete or dropped spans), then per span name\n"
            "  duration and queue percentiles, per request host-side work, GPU queue, GPU\n"
            "  busy by operation and GPU tail, hit rate against latency, and the slowest\n"
            "  requests as waterfalls.\n"
            "  --html FILE     also write the report as one self-contained HTML page\n"
            "  --slowest K     waterfalls of the K slowest requests (0..100, default 5)\n"
            "  --width W       columns of a waterfall's time axis (20..400, default 60)\n"
            "  --max-open N    traces held open at once while reading (1..4194304, default\n"
            "                  32768); a larger N joins spans further apart in the input\n");
}

static int parse_uint(const char *flag, const char *s, unsigned long lo, unsigned long hi,
                      unsigned long *out)
{
    char *end = NULL;
    errno = 0;
    unsigned long v = s ? strtoul(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || s[0] == '-' || v < lo || v > hi) {
        fprintf(stderr, "cbt report: %s needs an integer in [%lu, %lu]%s%s%s\n", flag, lo, hi,
                s ? ", not '" : "", s ? s : "", s ? "'" : "");
        return -1;
    }
    *out = v;
    return 0;
}

static void on_bad(void *ctx, unsigned file, uint64_t line, const char *why)
{
    rpt_agg_bad_line(ctx, file, line, why);
}

static void on_bad_span(void *ctx, unsigned file, uint64_t line, const char *why)
{
    rpt_agg_bad_span(ctx, file, line, why);
}

int cbt_report_main(int argc, char **argv)
{
    const char *html = NULL;
    const char *files[RPT_FILES_MAX];
    unsigned nf = 0;
    unsigned long width = 60, v;
    rpt_opts o = rpt_opts_default();
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--html")) {
            if (!val || !*val || val[0] == '-') {
                fprintf(stderr, "cbt report: --html needs a file name\n");
                return 2;
            }
            html = val;
            i++;
        } else if (!strcmp(a, "--slowest")) {
            if (parse_uint(a, val, 0, RPT_SLOWEST_MAX, &v))
                return 2;
            o.slowest = (uint32_t)v;
            i++;
        } else if (!strcmp(a, "--width")) {
            if (parse_uint(a, val, 20, 400, &width))
                return 2;
            i++;
        } else if (!strcmp(a, "--max-open")) {
            if (parse_uint(a, val, 1, 1ul << 22, &v))
                return 2;
            o.max_open = (uint32_t)v;
            i++;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "cbt report: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else {
            if (nf >= RPT_FILES_MAX) {
                fprintf(stderr, "cbt report: at most %u files at once\n", RPT_FILES_MAX);
                return 2;
            }
            files[nf++] = a;
        }
    }
    if (nf == 0) {
        fprintf(stderr, "cbt report: which files? (cbt report FILE...)\n");
        usage(stderr);
        return 2;
    }

    /* open and recognise every input before reading any */
    FILE *fp[RPT_FILES_MAX] = {0};
    rpt_format fmt[RPT_FILES_MAX];
    int rc = 0;
    for (unsigned k = 0; k < nf && !rc; k++) {
        struct stat st;
        if (!(fp[k] = fopen(files[k], "rb"))) {
            fprintf(stderr, "cbt report: %s: cannot open: %s\n", files[k], strerror(errno));
            rc = 2;
        } else if (fstat(fileno(fp[k]), &st) || !S_ISREG(st.st_mode)) {
            fprintf(stderr, "cbt report: %s: not a regular file\n", files[k]);
            rc = 2;
        } else if ((fmt[k] = rpt_detect(fp[k])) == RPT_FMT_UNKNOWN) {
            fprintf(stderr, "cbt report: %s: not a cbt span file, an OTLP JSON file or an LMCT "
                            "recording\n", files[k]);
            rc = 2;
        }
    }
    rpt_agg *agg = rc ? NULL : rpt_agg_new(&o);
    if (!rc && !agg) {
        fprintf(stderr, "cbt report: out of memory\n");
        rc = 1;
    }
    for (unsigned k = 0; k < nf && !rc; k++) {
        rpt_agg_file(agg, k, files[k], fmt[k]);
        if (fmt[k] == RPT_FMT_EMPTY)
            rpt_agg_note(agg, false, "%s: empty", files[k]);
    }
    /* recordings: replayed whole, one after the other */
    bool json_inputs = false;
    for (unsigned k = 0; k < nf && !rc; k++) {
        if (fmt[k] == RPT_FMT_LMCT)
            rc = rpt_lmct_feed(files[k], k, agg, stderr);
        else if (fmt[k] != RPT_FMT_EMPTY)
            json_inputs = true;
    }
    /* the JSON files, merged by end time */
    if (!rc && json_inputs) {
        rpt_source *src = calloc(nf, sizeof *src);
        rpt_source *ptr[RPT_FILES_MAX];
        rpt_merge *m = malloc(sizeof *m);
        unsigned ns = 0;
        if (!src || !m) {
            fprintf(stderr, "cbt report: out of memory\n");
            rc = 1;
        }
        for (unsigned k = 0; k < nf && !rc; k++) {
            if (fmt[k] != RPT_FMT_SPANS && fmt[k] != RPT_FMT_OTLP)
                continue;
            if (rpt_source_open(&src[ns], fp[k], fmt[k], k, on_bad, agg)) {
                fprintf(stderr, "cbt report: out of memory\n");
                rc = 1;
                break;
            }
            src[ns].on_bad_span = on_bad_span;
            ptr[ns] = &src[ns];
            ns++;
        }
        if (!rc) {
            rpt_span sp;
            rpt_merge_init(m, ptr, ns);
            while (rpt_merge_next(m, &sp) == 1)
                rpt_agg_add(agg, &sp);
            for (unsigned k = 0; k < ns; k++) {
                if (src[k].lx.io_error) {
                    fprintf(stderr, "cbt report: %s: read error after %llu bytes\n",
                            files[src[k].file], (unsigned long long)src[k].lx.bytes);
                    rc = 2;
                }
                if (src[k].service[0])
                    rpt_agg_file_service(agg, src[k].file, src[k].service);
            }
        }
        for (unsigned k = 0; k < ns; k++)
            rpt_source_close(&src[k]);
        free(src);
        free(m);
        rpt_agg_note(agg, false, "a span file or an OTLP file does not say how many events or "
                                 "spans were dropped before it was written (cbt_metrics: "
                                 "dropped_full, spans_dropped, sink_spans_lost)");
    }
    for (unsigned k = 0; k < nf; k++)
        if (fp[k])
            fclose(fp[k]);
    if (rc) {
        rpt_agg_free(agg);
        return rc;
    }
    const rpt_summary *s = rpt_agg_finish(agg);
    rpt_text_write(stdout, s, (unsigned)width);
    if (html) {
        FILE *hf = fopen(html, "w");
        int bad = !hf || rpt_html_write(hf, s);
        int e = errno;
        if (hf && fclose(hf) && !bad) {
            bad = 1;
            e = errno;
        }
        if (bad) {
            fprintf(stderr, "cbt report: cannot write %s: %s\n", html, strerror(e));
            rc = 1;
        } else {
            printf("\nHTML report: %s\n", html);
        }
    }
    if (fflush(stdout) || ferror(stdout)) {
        fprintf(stderr, "cbt report: cannot write the report to stdout: %s\n", strerror(errno));
        rc = 1;
    }
    rpt_agg_free(agg);
    return rc;
}
