/* cli/report_html.c — owns the HTML rendering of `cbt report`
 * (report_out.h): one self-contained page, readable from disk with no
 * server. Plots are inline SVG drawn here; the page loads nothing (its
 * Content-Security-Policy forbids every fetch: no scripts, fonts or images)
 * and has no script at all. Plot elements carry stable ids and classes
 * (docs/report.md lists them) for tests that open the page in a browser:
 *   svg.cbt-plot#plot-latency     duration distributions per span name
 *   svg.cbt-plot#plot-bands       the per-request bands (host, queue, busy...)
 *   svg.cbt-plot#plot-breakdown   the stacked share of host / queued / busy
 *   svg.cbt-plot#plot-queue       queue time per stream-timed operation
 *   svg.cbt-plot#plot-hitrate     latency per hit-rate bucket
 *   svg.cbt-plot#plot-timeline    requests per second and p99 over the run
 *   svg.cbt-plot.cbt-waterfall#plot-waterfall-N   the N-th slowest request
 * A plot with nothing measured is still drawn, empty (class cbt-empty), with
 * a line saying why; #slowest-queue and #slowest-stream exist only when
 * something queued.
 *   #slowest-queue .cbt-op-name   the operation that queued most
 *   #slowest-stream .cbt-stream-name  the stream whose spans queued most
 *   svg.cbt-plot#plot-streams     queue time per stream
 *   #completeness (.cbt-whole or .cbt-not-whole), #completeness-verdict */
#include <errno.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "report_out.h"

#define W 960.0     /* plot width, px */
#define LABEL 230.0 /* the label column */
#define RIGHT 30.0

static void esc(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default:
            if ((unsigned char)*s < 0x20)
                fputc(' ', f);
            else
                fputc(*s, f);
        }
    }
}

/* a log axis over [lo, hi] ns onto [x0, x1] px */
typedef struct axis {
    double lo, hi, x0, x1;
} axis;

static double ax_x(const axis *a, double v)
{
    if (v < a->lo)
        v = a->lo;
    if (v > a->hi)
        v = a->hi;
    return a->x0 + (log(v) - log(a->lo)) / (log(a->hi) - log(a->lo)) * (a->x1 - a->x0);
}

static axis log_axis(double lo, double hi, double x0, double x1)
{
    axis a;
    if (!(lo > 0))
        lo = 1;
    if (!(hi > lo))
        hi = lo * 10;
    a.lo = pow(10, floor(log10(lo)));
    a.hi = pow(10, ceil(log10(hi)));
    if (a.hi <= a.lo)
        a.hi = a.lo * 10;
    a.x0 = x0;
    a.x1 = x1;
    return a;
}

static void ax_draw(FILE *f, const axis *a, double y, double top)
{
    char b[16];
    fprintf(f, "<g class=\"cbt-axis\"><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
               "stroke=\"#888\"/>", a->x0, y, a->x1, y);
    for (double v = a->lo; v <= a->hi * 1.0001; v *= 10) {
        double x = ax_x(a, v);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%s</text>",
                x, top, x, y, x, y + 13, rpt_fmt_dur(v, b));
    }
    fputs("</g>", f);
}

static void svg_open(FILE *f, const char *id, const char *cls, double h, const char *label)
{
    fprintf(f, "<svg class=\"cbt-plot%s%s\" id=\"%s\" xmlns=\"http://www.w3.org/2000/svg\" "
               "width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" role=\"img\" "
               "aria-label=\"",
            cls ? " " : "", cls ? cls : "", id, W, h, W, h);
    esc(f, label);
    fputs("\">", f);
}

static void label_at(FILE *f, double x, double y, const char *s, const char *anchor)
{
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"%s\">", x, y, anchor);
    esc(f, s);
    fputs("</text>", f);
}

/* A plot with nothing to draw: still there (its id), saying why. */
static void empty_plot(FILE *f, const char *id, const char *why)
{
    svg_open(f, id, "cbt-empty", 40, why);
    label_at(f, LABEL, 24, why, "start");
    fputs("</svg>", f);
}

/* ---- sections ------------------------------------------------------------------ */

static void completeness(FILE *f, const rpt_summary *s)
{
    char line[512];
    rpt_completeness_line(s, line, sizeof line);
    fprintf(f, "<section id=\"completeness\" class=\"%s\"><h2>Completeness</h2>"
               "<p id=\"completeness-verdict\"><b>",
            s->whole ? "cbt-whole" : "cbt-not-whole");
    esc(f, line);
    fputs("</b></p><ul>", f);
    char b[256];
#define ITEM(cond, cls, ...)                                                                 \
    do {                                                                                     \
        if (cond) {                                                                          \
            snprintf(b, sizeof b, __VA_ARGS__);                                              \
            fprintf(f, "<li class=\"%s\">", cls);                                            \
            esc(f, b);                                                                       \
            fputs("</li>", f);                                                               \
        }                                                                                    \
    } while (0)
    ITEM(1, "cbt-bad-lines", "bad lines: %llu", (unsigned long long)s->bad_lines);
    for (unsigned k = 0; k < s->n_bad; k++)
        ITEM(1, "cbt-example", "%s:%llu: %s",
             s->bad[k].file < s->n_files ? s->files[s->bad[k].file].path : "?",
             (unsigned long long)s->bad[k].line, s->bad[k].text);
    ITEM(s->bad_spans, "cbt-bad-spans", "bad spans: %llu (skipped; the rest of their batch "
         "read on)", (unsigned long long)s->bad_spans);
    for (unsigned k = 0; k < s->n_badspan; k++)
        ITEM(1, "cbt-example", "%s:%llu: %s",
             s->badspan[k].file < s->n_files ? s->files[s->badspan[k].file].path : "?",
             (unsigned long long)s->badspan[k].line, s->badspan[k].text);
    ITEM(1, "cbt-incomplete-roots", "incomplete roots: %llu traces (%llu spans) whose root "
         "never arrived", (unsigned long long)s->incomplete_roots,
         (unsigned long long)s->incomplete_root_spans);
    for (unsigned k = 0; k < s->n_noroot; k++)
        ITEM(1, "cbt-example", "%s: %s",
             s->noroot[k].file < s->n_files ? s->files[s->noroot[k].file].path : "?",
             s->noroot[k].text);
    ITEM(1, "cbt-orphans", "orphans: %llu spans whose parent is missing from their trace",
         (unsigned long long)s->orphans);
    for (unsigned k = 0; k < s->n_orphan; k++)
        ITEM(1, "cbt-example", "%s", s->orphan[k].text);
    ITEM(s->extra_roots, "cbt-extra-roots", "extra roots: %llu", (unsigned long long)s->extra_roots);
    ITEM(s->duplicate_spans, "cbt-duplicates", "duplicate spans: %llu (skipped)",
         (unsigned long long)s->duplicate_spans);
    ITEM(s->split_traces, "cbt-split", "split traces: %llu (%llu spans after their trace was "
         "closed: raise --max-open)", (unsigned long long)s->split_traces,
         (unsigned long long)s->split_spans);
    ITEM(s->evicted_open, s->split_traces || s->evicted_rootless ? "cbt-evicted" : "cbt-note",
         "open-trace table: %llu traces closed to make room (%llu without a root); %s",
         (unsigned long long)s->evicted_open, (unsigned long long)s->evicted_rootless,
         s->split_traces ? "some got spans afterwards (split traces)"
                         : "no span came for them afterwards");
    ITEM(1, "cbt-spans-incomplete", "spans ended incomplete: %llu",
         (unsigned long long)s->spans_incomplete);
    for (unsigned k = 0; k < s->n_evict; k++)
        ITEM(1, "cbt-example", "%s: %llu", s->evict_reason[k],
             (unsigned long long)s->evict_count[k]);
    ITEM(s->spans_dropped_attrs, "cbt-dropped", "dropped attributes: %llu on %llu spans",
         (unsigned long long)s->dropped_attrs, (unsigned long long)s->spans_dropped_attrs);
    ITEM(s->spans_dropped_events, "cbt-dropped", "dropped span events: %llu on %llu spans",
         (unsigned long long)s->dropped_events, (unsigned long long)s->spans_dropped_events);
    ITEM(s->traces_over_cap, "cbt-over-cap", "%llu requests figured from their first %u spans",
         (unsigned long long)s->traces_over_cap, RPT_TRACE_SPANS_MAX);
    ITEM(s->spans_other_name, "cbt-other-names", "%llu spans under \"(other names)\"",
         (unsigned long long)s->spans_other_name);
    ITEM(s->spans_other_stream, "cbt-other-streams", "%llu spans under \"(other streams)\"",
         (unsigned long long)s->spans_other_stream);
    ITEM(s->sketch_lost, "cbt-lost", "%llu values left out of the percentiles (no memory)",
         (unsigned long long)s->sketch_lost);
    for (unsigned k = 0; k < s->n_notes; k++)
        ITEM(1, s->note_is_loss[k] ? "cbt-loss" : "cbt-note", "%s%s",
             s->note_is_loss[k] ? "" : "note: ", s->notes[k]);
#undef ITEM
    fputs("</ul></section>\n", f);
}

static void q_cells(FILE *f, const rpt_q *q)
{
    char a[16], b[16], c[16], d[16];
    if (!q->n) {
        fputs("<td>-</td><td>-</td><td>-</td><td>-</td>", f);
        return;
    }
    fprintf(f, "<td>%s</td><td>%s</td><td>%s</td><td>%s</td>", rpt_fmt_dur(q->p50, a),
            rpt_fmt_dur(q->p90, b), rpt_fmt_dur(q->p99, c), rpt_fmt_dur(q->max, d));
}

static void names_section(FILE *f, const rpt_summary *s)
{
    fputs("<section id=\"names\"><h2>Spans by name</h2><table id=\"table-names\"><tr><th>name"
          "</th><th>count</th><th>p50</th><th>p90</th><th>p99</th><th>max</th><th>queue p50"
          "</th><th>queue p90</th><th>queue p99</th><th>queue max</th></tr>", f);
    for (unsigned k = 0; k < s->n_names; k++) {
        const rpt_name_sum *n = &s->names[k];
        fputs("<tr><td class=\"cbt-name\">", f);
        esc(f, n->name);
        fprintf(f, "</td><td>%llu</td>", (unsigned long long)n->count);
        q_cells(f, &n->dur);
        q_cells(f, &n->queue);
        fputs("</tr>", f);
    }
    fputs("</table>\n<h3>Duration distributions per stage</h3>", f);
    /* one histogram row per name, on a common log axis */
    unsigned rows = s->n_names < 40 ? s->n_names : 40;
    double rh = 26, top = 10, h = top + rows * rh + 30;
    svg_open(f, "plot-latency", NULL, h, "duration distribution of each span name");
    axis ax = log_axis(s->hist_lo, s->hist_hi, LABEL, W - RIGHT);
    ax_draw(f, &ax, top + rows * rh + 4, top);
    double step = log(s->hist_hi / s->hist_lo) / RPT_HIST_BINS;
    for (unsigned k = 0; k < rows; k++) {
        const rpt_name_sum *n = &s->names[k];
        double y = top + k * rh;
        uint32_t mx = 1;
        for (unsigned b = 0; b < RPT_HIST_BINS; b++)
            if (n->hist[b] > mx)
                mx = n->hist[b];
        fprintf(f, "<g class=\"cbt-dist\" data-name=\"");
        esc(f, n->name);
        fputs("\">", f);
        label_at(f, LABEL - 8, y + rh * 0.65, n->name, "end");
        for (unsigned b = 0; b < RPT_HIST_BINS; b++) {
            if (!n->hist[b])
                continue;
            double l = s->hist_lo * exp(step * b), r = s->hist_lo * exp(step * (b + 1));
            double x0 = ax_x(&ax, l), x1 = ax_x(&ax, r);
            double bh = (rh - 6) * (0.15 + 0.85 * n->hist[b] / (double)mx);
            fprintf(f, "<rect class=\"cbt-bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                       "height=\"%.1f\" fill=\"#5b8ff9\"><title>%u</title></rect>",
                    x0, y + rh - 3 - bh, x1 - x0 > 1 ? x1 - x0 - 0.5 : 1.0, bh, n->hist[b]);
        }
        fprintf(f, "<line class=\"cbt-p50\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" "
                   "stroke=\"#222\" stroke-width=\"2\"/>",
                ax_x(&ax, n->dur.p50), ax_x(&ax, n->dur.p50), y + 2, y + rh - 2);
        fprintf(f, "<line class=\"cbt-p99\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" "
                   "stroke=\"#d62728\" stroke-width=\"2\"/></g>",
                ax_x(&ax, n->dur.p99), ax_x(&ax, n->dur.p99), y + 2, y + rh - 2);
    }
    fputs("</svg><p class=\"cbt-legend\">black: p50, red: p99</p></section>\n", f);
}

typedef struct band {
    const char *label;
    char name[RPT_NAME_MAX + 8];
    const rpt_q *q;
} band;

/* p50-p90 box, whisker to p99, dot at max: one row per band */
static void bands_plot(FILE *f, const char *id, const band *b, unsigned n, const char *aria)
{
    double lo = 0, hi = 0;
    for (unsigned k = 0; k < n; k++) {
        if (!b[k].q->n)
            continue;
        double l = b[k].q->p50 > 0 ? b[k].q->p50 : 1;
        if (lo == 0 || l < lo)
            lo = l;
        if (b[k].q->max > hi)
            hi = b[k].q->max;
    }
    double rh = 24, top = 8, h = top + n * rh + 30;
    svg_open(f, id, NULL, h, aria);
    axis ax = log_axis(lo, hi, LABEL, W - RIGHT);
    ax_draw(f, &ax, top + n * rh + 4, top);
    for (unsigned k = 0; k < n; k++) {
        const rpt_q *q = b[k].q;
        double y = top + k * rh;
        fprintf(f, "<g class=\"cbt-band\" data-label=\"");
        esc(f, b[k].name[0] ? b[k].name : b[k].label);
        fputs("\">", f);
        label_at(f, LABEL - 8, y + rh * 0.65, b[k].name[0] ? b[k].name : b[k].label, "end");
        if (!q->n) {
            label_at(f, LABEL + 8, y + rh * 0.65, "not measured", "start");
            fputs("</g>", f);
            continue;
        }
        double x50 = ax_x(&ax, q->p50 > 0 ? q->p50 : ax.lo), x90 = ax_x(&ax, q->p90 > 0 ? q->p90 : ax.lo);
        double x99 = ax_x(&ax, q->p99 > 0 ? q->p99 : ax.lo), xm = ax_x(&ax, q->max > 0 ? q->max : ax.lo);
        char t50[16], t90[16], t99[16], tm[16];
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#555\"/>",
                x90, x99, y + rh / 2, y + rh / 2);
        fprintf(f, "<rect class=\"cbt-box\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                   "fill=\"#9ecae1\" stroke=\"#3182bd\"><title>p50 %s, p90 %s, p99 %s, max %s"
                   "</title></rect>",
                x50, y + 4, x90 - x50 > 1 ? x90 - x50 : 1.0, rh - 8, rpt_fmt_dur(q->p50, t50),
                rpt_fmt_dur(q->p90, t90), rpt_fmt_dur(q->p99, t99), rpt_fmt_dur(q->max, tm));
        fprintf(f, "<line class=\"cbt-p99\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" "
                   "stroke=\"#d62728\" stroke-width=\"2\"/>", x99, x99, y + 3, y + rh - 3);
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"#222\"/></g>", xm, y + rh / 2);
    }
    fputs("</svg>", f);
}

static void requests_section(FILE *f, const rpt_summary *s)
{
    fprintf(f, "<section id=\"requests\"><h2>Where the requests' time went</h2><p>%llu requests"
               "; percentiles over requests.</p>",
            (unsigned long long)s->requests);
    band b[8 + RPT_NAMES_MAX];
    unsigned n = 0;
    memset(b, 0, sizeof b);
    b[n].label = "latency (end to end)"; b[n++].q = &s->latency;
    b[n].label = "request span"; b[n++].q = &s->root_dur;
    if (s->any_stream_timed) {
        b[n].label = "host-side work";
        b[n++].q = &s->host;
    }
    b[n].label = "GPU queue"; b[n++].q = &s->gpu_queue;
    b[n].label = "GPU busy"; b[n++].q = &s->gpu_busy;
    for (unsigned k = 0; k < s->n_names && n < 7 + 24; k++)
        if (s->names[k].busy_req.n) {
            snprintf(b[n].name, sizeof b[n].name, "busy: %s", s->names[k].name);
            b[n++].q = &s->names[k].busy_req;
        }
    b[n].label = "GPU tail (after the end)"; b[n++].q = &s->gpu_tail;
    fputs("<table id=\"table-requests\"><tr><th></th><th>p50</th><th>p90</th><th>p99</th>"
          "<th>max</th></tr>", f);
    for (unsigned k = 0; k < n; k++) {
        fputs("<tr><td>", f);
        esc(f, b[k].name[0] ? b[k].name : b[k].label);
        fputs("</td>", f);
        q_cells(f, b[k].q);
        fputs("</tr>", f);
    }
    fputs("</table>", f);
    if (!s->any_stream_timed)
        fputs("<p class=\"cbt-note\">GPU queue, GPU busy and host-side work need stream-timed "
              "spans (<code>cbt.queue_ns</code>): none in the input.</p>", f);
    bands_plot(f, "plot-bands", b, n, "percentile bands of each part of a request");

    /* the stacked breakdown, as shares, per latency bin */
    fputs("<h3>Breakdown by latency: host-side, queued on the GPU, running on the GPU</h3>", f);
    unsigned bins[RPT_LAT_BINS], nb = 0;
    for (unsigned k = 0; k < RPT_LAT_BINS; k++)
        if (s->lat_n[k])
            bins[nb++] = k;
    double h = 250, top = 10, bottom = 200, left = 60;
    svg_open(f, "plot-breakdown", NULL, h, "share of host-side, queued and busy time by latency");
    double bw = nb ? (W - left - RIGHT) / nb : 0;
    for (unsigned i = 0; i < nb; i++) {
        unsigned k = bins[i];
        double tot = s->lat_host[k] + s->lat_wait[k] + s->lat_busy[k];
        if (tot <= 0)
            tot = 1;
        double x = left + i * bw, y = bottom;
        const double part[3] = {s->lat_host[k], s->lat_wait[k], s->lat_busy[k]};
        static const char *cls[3] = {"cbt-host", "cbt-wait", "cbt-busy"};
        static const char *col[3] = {"#8da0cb", "#fc8d62", "#66c2a5"};
        char t0[16], t1[16], t2[16], tl[16];
        fprintf(f, "<g class=\"cbt-stack\"><title>latency up to %s: %llu requests; mean host %s, "
                   "queued %s, busy %s</title>",
                rpt_fmt_dur(ldexp(1.0, (int)k), tl), (unsigned long long)s->lat_n[k],
                rpt_fmt_dur(part[0], t0), rpt_fmt_dur(part[1], t1), rpt_fmt_dur(part[2], t2));
        for (int p = 0; p < 3; p++) {
            double ph = (bottom - top) * part[p] / tot;
            y -= ph;
            fprintf(f, "<rect class=\"%s\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                       "fill=\"%s\"/>", cls[p], x + 2, y, bw - 4 > 1 ? bw - 4 : 1.0, ph, col[p]);
        }
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"middle\">&#8804;%s"
                   "</text><text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"middle\">"
                   "n=%llu</text></g>",
                x + bw / 2, bottom + 14, rpt_fmt_dur(ldexp(1.0, (int)k), tl), x + bw / 2,
                bottom + 27, (unsigned long long)s->lat_n[k]);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">100%%</text>"
               "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">0%%</text>",
            10.0, top + 10, 10.0, bottom);
    fputs("</svg><p class=\"cbt-legend\"><span style=\"color:#8da0cb\">&#9632;</span> host-side "
          "<span style=\"color:#fc8d62\">&#9632;</span> queued on a stream "
          "<span style=\"color:#66c2a5\">&#9632;</span> running on a stream (shares of the "
          "mean latency of the requests in each bin)</p>", f);

    /* queue per operation */
    if (s->slowest_queue >= 0) {
        const rpt_name_sum *q = &s->names[s->slowest_queue];
        char a[16], bb[16], c[16];
        double share = s->latency.sum > 0 ? 100.0 * q->queue.sum / s->latency.sum : 0.0;
        fputs("<p id=\"slowest-queue\" class=\"cbt-slowest\" data-op=\"", f);
        esc(f, q->name);
        fputs("\">Most queueing: <b class=\"cbt-op-name\">", f);
        esc(f, q->name);
        fprintf(f, "</b> waited %s in all over %llu spans (p50 %s, p99 %s), %.1f%% of the "
                   "requests' summed latency.</p>",
                rpt_fmt_dur(q->queue.sum, a), (unsigned long long)q->queue.n,
                rpt_fmt_dur(q->queue.p50, bb), rpt_fmt_dur(q->queue.p99, c), share);
        band qb[RPT_NAMES_MAX];
        unsigned nq = 0;
        memset(qb, 0, sizeof qb);
        for (unsigned k = 0; k < s->n_names && nq < 40; k++)
            if (s->names[k].queue.n) {
                snprintf(qb[nq].name, sizeof qb[nq].name, "%s%s", s->names[k].name,
                         (int)k == s->slowest_queue ? " (most)" : "");
                qb[nq++].q = &s->names[k].queue;
            }
        fputs("<h3>Queue time per operation (cbt.queue_ns)</h3>", f);
        bands_plot(f, "plot-queue", qb, nq, "queue time percentiles per operation");
    } else {
        fputs("<h3>Queue time per operation (cbt.queue_ns)</h3>", f);
        empty_plot(f, "plot-queue", "not measured: no span carries cbt.queue_ns");
    }
    /* per stream */
    if (!s->n_streams) {
        fputs("<h3>Queue time per stream (cbt.device, cbt.stream)</h3>", f);
        empty_plot(f, "plot-streams", "not measured: no stream-timed span carries cbt.stream");
    } else {
        const rpt_stream_sum *st = &s->streams[0];
        char a[16], bb[16], c[16], d[16];
        if (st->queue.sum > 0) {
            fputs("<p id=\"slowest-stream\" class=\"cbt-slowest\" data-stream=\"", f);
            esc(f, st->label);
            fputs("\">Slowest stream: <b class=\"cbt-stream-name\">", f);
            esc(f, st->label);
            fprintf(f, "</b>: %llu spans waited %s in all (p50 %s, p99 %s).</p>",
                    (unsigned long long)st->count, rpt_fmt_dur(st->queue.sum, a),
                    rpt_fmt_dur(st->queue.p50, bb), rpt_fmt_dur(st->queue.p99, c));
        }
        fputs("<h3>Queue time per stream (cbt.device, cbt.stream)</h3><table id=\"table-streams\">"
              "<tr><th>stream</th><th>spans</th><th>queue p50</th><th>p90</th><th>p99</th>"
              "<th>max</th><th>queued</th><th>ran</th></tr>", f);
        band sb[40];
        unsigned ns = 0;
        memset(sb, 0, sizeof sb);
        for (unsigned k = 0; k < s->n_streams; k++) {
            const rpt_stream_sum *x = &s->streams[k];
            fputs("<tr><td class=\"cbt-stream\">", f);
            esc(f, x->label);
            fprintf(f, "</td><td>%llu</td>", (unsigned long long)x->count);
            q_cells(f, &x->queue);
            fprintf(f, "<td>%s</td><td>%s</td></tr>", rpt_fmt_dur(x->queue.sum, a),
                    rpt_fmt_dur(x->run, d));
            if (ns < 40) {
                snprintf(sb[ns].name, sizeof sb[ns].name, "%s%s", x->label,
                         k == 0 && x->queue.sum > 0 ? " (most)" : "");
                sb[ns++].q = &x->queue;
            }
        }
        fputs("</table>", f);
        bands_plot(f, "plot-streams", sb, ns, "queue time percentiles per stream");
    }
    fputs("</section>\n", f);
}

static void hitrate_section(FILE *f, const rpt_summary *s)
{
    static const char *lab[RPT_HITRATE_BUCKETS] = {"no hit_rate", "hit rate 0",
                                                   "hit rate (0, 0.25]", "hit rate (0.25, 0.5]",
                                                   "hit rate (0.5, 0.75]", "hit rate (0.75, 1]"};
    bool any = false;
    for (unsigned k = 1; k < RPT_HITRATE_BUCKETS; k++)
        any = any || s->hit[k].n;
    fputs("<section id=\"hitrate\"><h2>Hit rate vs latency</h2>", f);
    if (!any) {
        empty_plot(f, "plot-hitrate", "no root carries hit_rate");
        fputs("</section>\n", f);
        return;
    }
    band b[RPT_HITRATE_BUCKETS];
    unsigned n = 0;
    memset(b, 0, sizeof b);
    fputs("<table id=\"table-hitrate\"><tr><th>hit rate</th><th>requests</th><th>p50</th>"
          "<th>p90</th><th>p99</th><th>max</th></tr>", f);
    for (unsigned k = 0; k < RPT_HITRATE_BUCKETS; k++) {
        if (!s->hit[k].n)
            continue;
        fprintf(f, "<tr><td>%s</td><td>%llu</td>", lab[k], (unsigned long long)s->hit[k].n);
        q_cells(f, &s->hit[k]);
        fputs("</tr>", f);
        snprintf(b[n].name, sizeof b[n].name, "%s (n=%llu)", lab[k],
                 (unsigned long long)s->hit[k].n);
        b[n++].q = &s->hit[k];
    }
    fputs("</table>", f);
    bands_plot(f, "plot-hitrate", b, n, "latency percentiles per hit-rate bucket");
    fputs("</section>\n", f);
}

static void timeline_section(FILE *f, const rpt_summary *s)
{
    fputs("<section id=\"timeline\"><h2>Throughput and p99 latency over the run</h2>", f);
    double h = 260, top = 16, bottom = 210, left = 70, right = W - 70;
    svg_open(f, "plot-timeline", NULL, h, "requests per second and p99 latency over time");
    unsigned n = s->tl_bins;
    double secs = (double)s->tl_width / 1e9, maxr = 0, maxp = 0;
    for (unsigned k = 0; k < n; k++) {
        double r = (double)s->tl_count[k] / secs;
        if (r > maxr)
            maxr = r;
        if (s->tl_p99[k] > maxp)
            maxp = s->tl_p99[k];
    }
    if (maxr <= 0)
        maxr = 1;
    if (maxp <= 0)
        maxp = 1;
    double bw = n ? (right - left) / n : 0;
    for (unsigned k = 0; k < n; k++) {
        double r = (double)s->tl_count[k] / secs, bh = (bottom - top) * r / maxr;
        fprintf(f, "<rect class=\"cbt-rate\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                   "height=\"%.1f\" fill=\"#c6dbef\"><title>%llu requests</title></rect>",
                left + k * bw, bottom - bh, bw > 1.5 ? bw - 0.5 : 1.0, bh,
                (unsigned long long)s->tl_count[k]);
    }
    fputs("<polyline class=\"cbt-p99-line\" fill=\"none\" stroke=\"#d62728\" "
          "stroke-width=\"2\" points=\"", f);
    for (unsigned k = 0; k < n; k++)
        if (s->tl_count[k])
            fprintf(f, "%.1f,%.1f ", left + (k + 0.5) * bw,
                    bottom - (bottom - top) * s->tl_p99[k] / maxp);
    fputs("\"/>", f);
    char a[16], b[32];
    if (maxr >= 1e6)
        snprintf(b, sizeof b, "%.3gM/s", maxr / 1e6);
    else if (maxr >= 1e3)
        snprintf(b, sizeof b, "%.3gk/s", maxr / 1e3);
    else
        snprintf(b, sizeof b, "%.3g/s", maxr);
    label_at(f, left - 6, top + 10, b, "end");
    label_at(f, left - 6, bottom, "0", "end");
    label_at(f, right + 6, top + 10, rpt_fmt_dur(maxp, a), "start");
    label_at(f, right + 6, bottom, "0", "start");
    snprintf(b, sizeof b, "%s per bar", rpt_fmt_dur((double)s->tl_width, a));
    label_at(f, (left + right) / 2, bottom + 20, b, "middle");
    label_at(f, left, bottom + 20, "0", "start");
    snprintf(b, sizeof b, "+%s", rpt_fmt_dur((double)s->tl_width * n, a));
    label_at(f, right, bottom + 20, b, "end");
    fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#888\"/>",
            left, right, bottom, bottom);
    fputs("</svg><p class=\"cbt-legend\"><span style=\"color:#9ecae1\">&#9632;</span> requests "
          "started per second (left) <span style=\"color:#d62728\">&#9632;</span> their p99 "
          "latency (right; within 5%)</p></section>\n", f);
}

static void slowest_section(FILE *f, const rpt_summary *s)
{
    fprintf(f, "<section id=\"slowest\"><h2>The %u slowest requests</h2>", s->n_slow);
    for (unsigned k = 0; k < s->n_slow; k++) {
        const rpt_wf *w = &s->slow[k];
        char a[16], b[16], id[32];
        fputs("<h3 class=\"cbt-request\">", f);
        esc(f, w->session[0] ? w->session : "(no id)");
        fprintf(f, ": %s end to end (request span %s)", rpt_fmt_dur((double)w->latency, a),
                rpt_fmt_dur((double)w->root_dur, b));
        fputs("</h3><p class=\"cbt-trace\">trace ", f);
        esc(f, w->trace);
        if (w->file < s->n_files && s->files[w->file].path) {
            fputs(" in ", f);
            esc(f, s->files[w->file].path);
        }
        if (w->n < w->n_total)
            fprintf(f, " (first %u of %u spans)", w->n, w->n_total);
        fputs("</p>", f);
        double rh = 18, top = 6, h = top + w->n * rh + 24;
        snprintf(id, sizeof id, "plot-waterfall-%u", k + 1);
        svg_open(f, id, "cbt-waterfall", h, "waterfall of a slow request");
        double x0 = LABEL, x1 = W - 110, tot = w->latency ? (double)w->latency : 1.0;
        for (unsigned i = 0; i < w->n; i++) {
            const rpt_wf_span *sp = &w->spans[i];
            double y = top + i * rh;
            double xs = x0 + (x1 - x0) * (double)sp->start / tot;
            double xe = x0 + (x1 - x0) * (double)sp->end / tot;
            if (xe < xs + 1)
                xe = xs + 1;
            fputs("<g class=\"cbt-wf-span\" data-name=\"", f);
            esc(f, sp->name);
            fputs("\">", f);
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">", 6.0 + 12.0 * sp->depth,
                    y + rh * 0.7);
            esc(f, sp->name);
            fputs("</text>", f);
            if (sp->enqueue >= 0 && (double)sp->enqueue < (double)sp->start) {
                double xq = x0 + (x1 - x0) * (double)sp->enqueue / tot;
                fprintf(f, "<rect class=\"cbt-queue\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                           "height=\"%.1f\" fill=\"#fdd0a2\" stroke=\"#fc8d62\"><title>queued %s"
                           "</title></rect>",
                        xq, y + 3, xs - xq > 1 ? xs - xq : 1.0, rh - 6,
                        rpt_fmt_dur((double)sp->start - (double)sp->enqueue, a));
            }
            fprintf(f, "<rect class=\"cbt-run\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                       "height=\"%.1f\" fill=\"%s\"><title>%s</title></rect>",
                    xs, y + 2, xe - xs, rh - 4,
                    sp->incomplete ? "#bbbbbb" : sp->enqueue >= 0 ? "#66c2a5" : "#8da0cb",
                    rpt_fmt_dur((double)(sp->end - sp->start), a));
            if (sp->stream >= 0)
                fprintf(f, "<text class=\"cbt-wf-stream\" x=\"%.1f\" y=\"%.1f\" font-size=\"9\" "
                           "fill=\"#666\">s%d</text>", xs + 2, y + rh * 0.68, (int)sp->stream);
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">%s%s</text></g>", x1 + 6,
                    y + rh * 0.7, rpt_fmt_dur((double)(sp->end - sp->start), b),
                    sp->orphan ? " orphan" : sp->incomplete ? " incomplete" : "");
        }
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#888\"/>",
                x0, x1, top + w->n * rh + 2, top + w->n * rh + 2);
        label_at(f, x0, top + w->n * rh + 16, "0", "start");
        label_at(f, x1, top + w->n * rh + 16, rpt_fmt_dur(tot, a), "end");
        fputs("</svg>", f);
    }
    fputs("<p class=\"cbt-legend\"><span style=\"color:#fdd0a2\">&#9632;</span> queued on its "
          "stream <span style=\"color:#66c2a5\">&#9632;</span> running on a stream "
          "<span style=\"color:#8da0cb\">&#9632;</span> host-side span</p></section>\n", f);
}

int rpt_html_write(FILE *f, const rpt_summary *s)
{
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
          "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
          "style-src 'unsafe-inline'; img-src data:\">\n"
          "<meta name=\"generator\" content=\"cbt report\">\n<title>cbt report</title>\n"
          "<style>body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1000px}"
          "table{border-collapse:collapse;margin:8px 0 16px}td,th{padding:2px 8px;"
          "text-align:right;border-bottom:1px solid #eee;white-space:nowrap}td:first-child,th:first-child{"
          "text-align:left}section{margin-bottom:28px}.cbt-not-whole{border-left:6px solid "
          "#d62728;padding-left:12px}.cbt-whole{border-left:6px solid #2ca02c;padding-left:"
          "12px}.cbt-example{color:#555;list-style:none;font-family:monospace}.cbt-loss{"
          "color:#d62728}.cbt-note,.cbt-legend{color:#555;font-size:90%}svg.cbt-plot{"
          "display:block;margin:8px 0;background:#fff}code{background:#f4f4f4}</style>\n"
          "</head><body>\n<h1>cbt report</h1>\n", f);
    char a[16];
    fprintf(f, "<p id=\"inputs\">%u file%s, %llu spans, %llu requests over %s:</p><ul>",
            s->n_files, s->n_files == 1 ? "" : "s", (unsigned long long)s->spans,
            (unsigned long long)s->requests,
            rpt_fmt_dur(s->spans ? (double)(s->last_ns - s->first_ns) : 0, a));
    for (unsigned k = 0; k < s->n_files; k++) {
        fputs("<li class=\"cbt-file\">", f);
        esc(f, s->files[k].path ? s->files[k].path : "?");
        fprintf(f, ": %s, %llu spans", rpt_format_name(s->files[k].fmt),
                (unsigned long long)s->files[k].spans);
        if (s->files[k].service[0]) {
            fputs(", service ", f);
            esc(f, s->files[k].service);
        }
        fputs("</li>", f);
    }
    fputs("</ul>\n", f);
    completeness(f, s);
    names_section(f, s);
    requests_section(f, s);
    hitrate_section(f, s);
    timeline_section(f, s);
    slowest_section(f, s);
    fputs("</body></html>\n", f);
    fflush(f);
    return ferror(f) ? -1 : 0;
}
