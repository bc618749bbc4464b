/* cli/report_read.h — owns reading spans for `cbt report`: what a span is to
 * the report (rpt_span), the formats it reads, and the merge of several
 * files into one stream.
 *
 * Formats, found per file from its first bytes (rpt_detect):
 *   - cbt's JSON-lines span file (docs/spans.md, "The JSON-lines span file"):
 *     one span object per line;
 *   - OTLP JSON as the OpenTelemetry Collector's `file` exporter writes it:
 *     one ExportTraceServiceRequest per line (resourceSpans / scopeSpans, or
 *     the older instrumentationLibrarySpans / spans), ids in hex, times as
 *     strings or numbers, attributes as {key, value: {intValue (a string or
 *     a number), doubleValue, stringValue, boolValue, arrayValue, ...}};
 *   - an LMCT recording (report_lmct.h): replayed, not read here.
 * Memory does not grow with a line: OTLP lines (a whole batch) are walked
 * with the pull reader (report_jlex.h) and their spans handed out one at a
 * time.
 *
 * A line that is not one of these (bad JSON, a missing or mistyped field, an
 * end before the start) is counted, with its file and line, and skipped; the
 * spans an OTLP line gave before its error stand. In an OTLP batch a span
 * object that is good JSON but no span (a field missing, an end before the
 * start, a time past 2^63 ns) is counted as a bad span and the rest of the
 * batch is read on. Reading goes on.
 *
 * The merge (rpt_merge) hands out the spans of all JSON files together,
 * taking next the file whose next span ends first: each file is roughly in
 * end order (cbt writes spans as they end), so the merged stream is too and
 * a trace spread over several servers' files comes together while it is
 * still open in the report's table (report_agg.h). Single-threaded.
 */
#ifndef CBT_CLI_REPORT_READ_H
#define CBT_CLI_REPORT_READ_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "report_jlex.h"

#define RPT_NAME_MAX 128    /* bytes of a span name kept (longer: cut) */
#define RPT_SESSION_MAX 64  /* bytes of session_id / request_id kept */
#define RPT_FILES_MAX 256   /* files in one report */
#define RPT_ABSENT (-1)     /* an int attribute the span does not have */

/* One span, as the report needs it. Attributes it does not use are not kept. */
typedef struct rpt_span {
    uint8_t trace_id[16], span_id[8], parent_id[8];
    bool has_parent;
    bool incomplete;   /* "incomplete": true, or cbt.incomplete = true (OTLP) */
    bool error;        /* status error */
    bool late;         /* cbt.late */
    uint64_t start_ns, end_ns;
    /* cbt's timing attributes (docs/spans.md), RPT_ABSENT when not there */
    int64_t queue_ns, enqueue_ns, gpu_queue_ns, gpu_busy_ns, gpu_tail_ns;
    int64_t stream;    /* cbt.stream (the stream's ordinal), RPT_ABSENT when not there */
    char device[16];   /* cbt.device ("cpu", "cuda:0"), "" when not there */
    double hit_rate;   /* NaN when not there */
    uint32_t dropped_attrs, dropped_events, truncated_attrs;
    uint16_t file;     /* index of the file it came from */
    uint64_t line;
    char evicted[24];  /* cbt.evicted ("" when not evicted) */
    char name[RPT_NAME_MAX];
    char session[RPT_SESSION_MAX]; /* session_id, else request_id, else "" */
} rpt_span;

/* An empty span (no attributes: RPT_ABSENT, hit_rate NaN) of file `file`. */
void rpt_span_reset(rpt_span *o, unsigned file, uint64_t line);

/* One attribute, by its key: the ones the report uses are kept, the rest
 * ignored (for inputs that are not JSON: a replayed recording). */
void rpt_span_set_i64(rpt_span *o, const char *key, int64_t v);
void rpt_span_set_f64(rpt_span *o, const char *key, double v);
void rpt_span_set_bool(rpt_span *o, const char *key, bool v);
void rpt_span_set_str(rpt_span *o, const char *key, const char *s, size_t len);

typedef enum rpt_format {
    RPT_FMT_EMPTY = 0, /* nothing but whitespace */
    RPT_FMT_SPANS,     /* cbt's JSON-lines span file */
    RPT_FMT_OTLP,      /* OTLP JSON lines */
    RPT_FMT_LMCT,      /* an LMCT recording */
    RPT_FMT_UNKNOWN,
} rpt_format;

const char *rpt_format_name(rpt_format f);

/* Which format `f` holds, from its first bytes (at most 64 KiB read); the
 * file is rewound (past a UTF-8 byte-order mark, which is skipped). The
 * first line of the first 64 that starts a JSON object decides: one with a
 * "resourceSpans" member is OTLP, any other a span file (its lines are
 * checked as they are read; lines before it are counted as bad lines then).
 * A file starting with an LMCT frame is an LMCT recording. */
rpt_format rpt_detect(FILE *f);

/* A bad line: where, and why. */
typedef void (*rpt_bad_line_fn)(void *ctx, unsigned file, uint64_t line, const char *why);

/* One JSON file being read. */
typedef struct rpt_source {
    rpt_lex lx;
    rpt_format fmt;
    unsigned file;
    int state;        /* where an OTLP walk stands (report_read.c) */
    bool first[6];    /* the walk's six open containers (request, resourceSpans, one of
                         them, scopeSpans, one of them, spans): first element to come */
    uint64_t spans, bad_lines;
    uint64_t bad_spans;     /* OTLP: span objects in a good batch that are no span
                               (a field missing, end before start, a time past 2^63):
                               skipped, the rest of the batch read on */
    char service[RPT_NAME_MAX]; /* the resource's service.name, last seen */
    rpt_bad_line_fn on_bad;
    rpt_bad_line_fn on_bad_span; /* NULL: bad spans only counted; set after open */
    void *bad_ctx;
} rpt_source;

/* Read f (stays the caller's) as `fmt` (RPT_FMT_SPANS or RPT_FMT_OTLP).
 * -1: no memory for the buffer. */
int rpt_source_open(rpt_source *src, FILE *f, rpt_format fmt, unsigned file,
                    rpt_bad_line_fn on_bad, void *bad_ctx);
void rpt_source_close(rpt_source *src);

/* The next span: 1 with *out filled, 0 at the end of the file, -1 when the
 * file could not be read on (lx.err says why). Bad lines go to on_bad. */
int rpt_source_next(rpt_source *src, rpt_span *out);

/* ---- the merge ------------------------------------------------------------- */

typedef struct rpt_merge {
    rpt_source *src[RPT_FILES_MAX];
    rpt_span head[RPT_FILES_MAX]; /* each file's next span */
    bool live[RPT_FILES_MAX];
    unsigned n;
} rpt_merge;

/* Start merging n opened sources (at most RPT_FILES_MAX; the caller keeps
 * them). Reads each one's first span. */
void rpt_merge_init(rpt_merge *m, rpt_source **src, unsigned n);

/* The next span of all files, the earliest-ending head first: 1, or 0 when
 * every file is over. A file that stops with a read error ends there; its
 * source's lx.err and lx.io_error say so. */
int rpt_merge_next(rpt_merge *m, rpt_span *out);

/* Parse a hex id of n bytes (2n hex digits). 0, or -1. */
int rpt_hex_id(const char *s, size_t len, uint8_t *out, size_t n);

#endif /* CBT_CLI_REPORT_READ_H */
