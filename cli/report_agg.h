/* cli/report_agg.h — owns the aggregation of `cbt report`: spans in, one
 * summary out, in bounded memory.
 *
 * Per span name: the count and a duration sketch (report_sketch.h: quantiles
 * within 0.4%), and a sketch of cbt.queue_ns where spans carry it; the same
 * queue sketch per stream (cbt.device, cbt.stream). Per
 * request: spans are gathered by trace id in a table of open traces (at most
 * `max_open`; the least recently touched is closed when it is full). A
 * trace is one request when it has a root (a span without a parent; the
 * earliest-starting one when there are several). Closing it adds its figures
 * to the request sketches:
 *
 *   latency      root start to the last end of any of its spans (GPU work
 *                after the request's end included)
 *   request span the root's own duration
 *   host-side    latency minus the time some stream-timed span of the
 *                request was queued or running ([enqueue, end] unions of the
 *                innermost ones: a stream-timed span with a stream-timed
 *                child is a wrapper, open while its children wait)
 *   GPU queue    the root's cbt.gpu_queue_ns, else the sum of its outermost
 *                stream-timed spans' cbt.queue_ns (as cbt sums it: a span
 *                nested in a stream-timed one is part of its operation)
 *   GPU busy     the root's cbt.gpu_busy_ns, else the union of its
 *                stream-timed spans' [start, end]
 *   busy per op  the summed durations of each stream-timed operation
 *   GPU tail     the root's cbt.gpu_tail_ns
 *
 * A stream-timed span is one with cbt.queue_ns (docs/spans.md); a figure no
 * span measured is left out, never shown as 0. A trace closed without a
 * root is an incomplete root; a span whose parent is not in its trace an
 * orphan; a span arriving for a trace already closed is counted as a split
 * (the closed ids are remembered in a fixed table; one it forgot reads as an
 * incomplete root instead). Everything else that makes the data less than
 * whole — bad lines, spans ended incomplete, dropped attributes and events,
 * what an input says it lost — is counted for the completeness section.
 *
 * Memory: max_open traces (about 200 bytes each), at most `spans_stored`
 * spans kept for the per-request figures (56 bytes each, sizeof (cspan)
 * in report_agg.c, asserted there; a trace past
 * RPT_TRACE_SPANS_MAX or past the budget is counted and figured from what
 * was kept), RPT_NAMES_MAX names with their sketches (58 KiB at most each),
 * the slowest K requests, a 2 MiB table of closed trace ids. Single-threaded;
 * nothing here waits.
 */
#ifndef CBT_CLI_REPORT_AGG_H
#define CBT_CLI_REPORT_AGG_H

#include <stdbool.h>
#include <stdint.h>

#include "report_read.h"

#define RPT_NAMES_MAX 512          /* distinct span names; more fold into "(other names)" */
#define RPT_STREAMS_MAX 256        /* distinct (cbt.device, cbt.stream); more fold together */
#define RPT_TRACE_SPANS_MAX 64     /* spans kept per request */
#define RPT_SLOWEST_MAX 100
#define RPT_EXAMPLES 5             /* bad lines, incomplete roots, orphans named */
#define RPT_HIST_BINS 40           /* bins of the duration histograms (HTML) */
#define RPT_TIMELINE_BINS 120
#define RPT_LAT_BINS 64            /* power-of-two latency bins of the breakdown */
#define RPT_HITRATE_BUCKETS 6
#define RPT_NOTES_MAX 16

typedef struct rpt_opts {
    uint32_t max_open;     /* open traces (default 32768) */
    uint32_t slowest;      /* requests kept whole for waterfalls (default 5) */
    uint32_t spans_stored; /* spans kept over all open traces (default 1 << 20) */
} rpt_opts;

rpt_opts rpt_opts_default(void);

/* Quantiles of one sketch, in ns. n == 0: nothing measured. */
typedef struct rpt_q {
    uint64_t n;
    double p50, p90, p99, max, mean, sum;
} rpt_q;

typedef struct rpt_name_sum {
    char name[RPT_NAME_MAX];
    uint64_t count, incomplete, errors;
    rpt_q dur;
    rpt_q queue;            /* spans with cbt.queue_ns */
    rpt_q busy_req;         /* per request: the op's summed durations (stream-timed) */
    uint32_t hist[RPT_HIST_BINS]; /* durations on the summary's common log axis */
} rpt_name_sum;

/* One stream (cbt.device, cbt.stream) and the queue time of its spans. */
typedef struct rpt_stream_sum {
    char label[48];         /* "cpu stream 3", "cuda:0 stream 1", "stream 7" */
    char device[16];
    int64_t stream;         /* RPT_ABSENT for "(other streams)" */
    uint64_t count;
    rpt_q queue;            /* its spans' cbt.queue_ns */
    double run;             /* their summed durations, ns */
} rpt_stream_sum;

typedef struct rpt_wf_span {
    char name[RPT_NAME_MAX];
    int32_t stream;         /* cbt.stream, -1: none */
    uint64_t start, end;    /* ns after the request's root start */
    int64_t enqueue;        /* ns after the root start, RPT_ABSENT: not stream-timed */
    uint8_t depth;
    bool incomplete, orphan;
} rpt_wf_span;

typedef struct rpt_wf {
    char session[RPT_SESSION_MAX];
    char trace[33];
    unsigned file;
    uint64_t root_start;    /* unix ns */
    uint64_t latency, root_dur;
    int64_t gpu_queue, gpu_busy, gpu_tail; /* RPT_ABSENT: not measured */
    double hit_rate;        /* NaN: none */
    uint32_t n, n_total;    /* spans shown, spans the request had */
    rpt_wf_span spans[RPT_TRACE_SPANS_MAX];
} rpt_wf;

typedef struct rpt_file_sum {
    const char *path;
    rpt_format fmt;
    uint64_t spans, bad_lines, bad_spans;
    char service[RPT_NAME_MAX];
} rpt_file_sum;

typedef struct rpt_example {
    unsigned file;
    uint64_t line;
    char text[160];
} rpt_example;

typedef struct rpt_summary {
    /* inputs */
    unsigned n_files;
    rpt_file_sum files[RPT_FILES_MAX];
    uint64_t spans, requests;
    uint64_t first_ns, last_ns;      /* earliest start, latest end of any span */
    /* completeness */
    bool whole;                      /* spans came, and nothing below is non-zero */
    uint64_t bad_lines;
    rpt_example bad[RPT_EXAMPLES];
    unsigned n_bad;
    uint64_t bad_spans;              /* OTLP span objects skipped inside a good batch */
    rpt_example badspan[RPT_EXAMPLES];
    unsigned n_badspan;
    uint64_t incomplete_roots, incomplete_root_spans;
    rpt_example noroot[RPT_EXAMPLES];
    unsigned n_noroot;
    uint64_t orphans, extra_roots;
    uint64_t duplicate_spans;                 /* a span id seen again in its trace: skipped */
    rpt_example orphan[RPT_EXAMPLES];
    unsigned n_orphan;
    uint64_t split_traces, split_spans;       /* spans after their trace was closed */
    uint64_t evicted_open, evicted_rootless;  /* traces closed by the max_open bound */
    uint64_t spans_incomplete;
    char evict_reason[8][24];
    uint64_t evict_count[8];
    unsigned n_evict;
    uint64_t spans_dropped_attrs, dropped_attrs, spans_dropped_events, dropped_events,
        spans_truncated;
    uint64_t traces_over_cap;                 /* requests figured from some of their spans */
    uint64_t spans_other_name;                /* past RPT_NAMES_MAX names */
    uint64_t sketch_lost;                     /* values a sketch could not hold (no memory) */
    char notes[RPT_NOTES_MAX][200];           /* what inputs say they lost */
    bool note_is_loss[RPT_NOTES_MAX];
    unsigned n_notes;
    /* per span name, by count */
    unsigned n_names;
    rpt_name_sum *names;
    double hist_lo, hist_hi;                  /* the histograms' axis, ns (log) */
    int slowest_queue;                        /* names[] index with the most queue time, -1 */
    /* per stream, by queue time (most first) */
    unsigned n_streams;
    rpt_stream_sum *streams;
    uint64_t spans_other_stream;              /* past RPT_STREAMS_MAX streams */
    bool any_stream_timed;
    /* per request */
    rpt_q latency, root_dur, host, gpu_queue, gpu_busy, gpu_tail;
    /* hit rate vs latency: none, 0, (0, .25], (.25, .5], (.5, .75], (.75, 1] */
    rpt_q hit[RPT_HITRATE_BUCKETS];
    /* the breakdown by latency (power-of-two bins): mean host, waiting, busy */
    uint64_t lat_n[RPT_LAT_BINS];
    double lat_host[RPT_LAT_BINS], lat_wait[RPT_LAT_BINS], lat_busy[RPT_LAT_BINS];
    /* timeline of request starts */
    uint64_t tl_t0, tl_width;                 /* unix ns, ns per bin */
    unsigned tl_bins;
    uint64_t tl_count[RPT_TIMELINE_BINS];
    double tl_p99[RPT_TIMELINE_BINS];
    /* the slowest requests, slowest first */
    unsigned n_slow;
    rpt_wf *slow;
} rpt_summary;

typedef struct rpt_agg rpt_agg;

/* NULL when out of memory. */
rpt_agg *rpt_agg_new(const rpt_opts *o);
void rpt_agg_free(rpt_agg *a);

/* Name file i (its path is the caller's and must outlive the aggregator). */
void rpt_agg_file(rpt_agg *a, unsigned i, const char *path, rpt_format fmt);

/* The service.name an OTLP file's resource gave (the last one seen). */
void rpt_agg_file_service(rpt_agg *a, unsigned i, const char *service);

/* One span (from any file, in any order). */
void rpt_agg_add(rpt_agg *a, const rpt_span *s);

/* A bad line of file i; also counted in that file's figures. */
void rpt_agg_bad_line(rpt_agg *a, unsigned file, uint64_t line, const char *why);

/* A bad span of file i (an OTLP span object skipped inside a batch read on). */
void rpt_agg_bad_span(rpt_agg *a, unsigned file, uint64_t line, const char *why);

/* What an input says about itself: `loss` true when it means data is missing
 * (a recording's gaps), false for a remark. */
void rpt_agg_note(rpt_agg *a, bool loss, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Close every open trace and compute the summary. Call once, after the last
 * span; the summary lives as long as the aggregator. */
const rpt_summary *rpt_agg_finish(rpt_agg *a);

#endif /* CBT_CLI_REPORT_AGG_H */
