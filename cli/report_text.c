/* cli/report_text.c — owns the terminal rendering of `cbt report`
 * (report_out.h): completeness first, then spans by name, where the
 * requests' time went, the operation that queued most, hit rate against
 * latency, and the slowest requests as waterfalls. */
#include <math.h>
#include <string.h>
#include <time.h>

#include "report_out.h"

/* Text from the inputs (names, ids, services, reasons, paths) printed to a
 * terminal: control bytes (< 0x20, 0x7f) become '?', one for one so columns
 * stay aligned, and no input can send an escape sequence to the terminal. */
enum { SAFE_CAP = 256 };
static const char *safe(const char *in, char *buf, size_t cap)
{
    size_t k = 0;
    for (; in[k] && k + 1 < cap; k++) {
        unsigned char c = (unsigned char)in[k];
        buf[k] = c < 0x20 || c == 0x7f ? '?' : (char)c;
    }
    buf[k] = 0;
    return buf;
}
#define SAFE(s) safe((s), (char[SAFE_CAP]){0}, SAFE_CAP)

/* three significant digits, trailing zeros kept: 1.20 ms, 17.0 ms, 802 us */
static void three(char buf[16], double v, const char *unit)
{
    if (v < 9.995)
        snprintf(buf, 16, "%.2f %s", v, unit);
    else if (v < 99.95)
        snprintf(buf, 16, "%.1f %s", v, unit);
    else
        snprintf(buf, 16, "%.0f %s", v, unit);
}

const char *rpt_fmt_dur(double ns, char buf[16])
{
    if (!(ns >= 0) || ns < 999.5)
        snprintf(buf, 16, "%.0f ns", ns > 0 ? ns : 0.0);
    else if (ns < 999.5e3)
        three(buf, ns / 1e3, "us");
    else if (ns < 999.5e6)
        three(buf, ns / 1e6, "ms");
    else if (ns < 1e12)
        three(buf, ns / 1e9, "s");
    else
        snprintf(buf, 16, "%.0f s", ns / 1e9);
    return buf;
}

void rpt_completeness_line(const rpt_summary *s, char *buf, size_t cap)
{
    if (s->spans == 0) {
        snprintf(buf, cap, "EMPTY: the inputs hold no spans%s", s->bad_lines ? " (only bad lines)"
                                                                           : "");
        return;
    }
    if (s->whole) {
        snprintf(buf, cap, "whole: no bad lines, incomplete roots, orphans, incomplete or "
                           "dropped spans");
        return;
    }
    size_t n = (size_t)snprintf(buf, cap, "NOT WHOLE:");
    const char *sep = " ";
#define ADD(cond, ...)                                                                        \
    do {                                                                                      \
        if ((cond) && n < cap) {                                                              \
            n += (size_t)snprintf(buf + n, cap - n, "%s", sep);                               \
            if (n < cap)                                                                      \
                n += (size_t)snprintf(buf + n, cap - n, __VA_ARGS__);                         \
            sep = ", ";                                                                       \
        }                                                                                     \
    } while (0)
    ADD(s->bad_lines, "%llu bad line%s", (unsigned long long)s->bad_lines,
        s->bad_lines == 1 ? "" : "s");
    ADD(s->bad_spans, "%llu bad span%s", (unsigned long long)s->bad_spans,
        s->bad_spans == 1 ? "" : "s");
    ADD(s->incomplete_roots, "%llu incomplete root%s", (unsigned long long)s->incomplete_roots,
        s->incomplete_roots == 1 ? "" : "s");
    ADD(s->orphans, "%llu orphan%s", (unsigned long long)s->orphans, s->orphans == 1 ? "" : "s");
    ADD(s->extra_roots, "%llu extra root%s", (unsigned long long)s->extra_roots,
        s->extra_roots == 1 ? "" : "s");
    ADD(s->duplicate_spans, "%llu duplicate span%s", (unsigned long long)s->duplicate_spans,
        s->duplicate_spans == 1 ? "" : "s");
    ADD(s->split_traces, "%llu split trace%s", (unsigned long long)s->split_traces,
        s->split_traces == 1 ? "" : "s");
    ADD(s->spans_incomplete, "%llu span%s ended incomplete",
        (unsigned long long)s->spans_incomplete, s->spans_incomplete == 1 ? "" : "s");
    ADD(s->spans_dropped_attrs || s->spans_dropped_events, "spans with dropped attributes or "
                                                          "events");
    ADD(s->traces_over_cap, "%llu request%s figured from part of their spans",
        (unsigned long long)s->traces_over_cap, s->traces_over_cap == 1 ? "" : "s");
    ADD(s->spans_other_name, "names past the %u kept", RPT_NAMES_MAX);
    ADD(s->spans_other_stream, "streams past the %u kept", RPT_STREAMS_MAX);
    ADD(s->sketch_lost, "values lost to memory");
    bool loss = false;
    for (unsigned k = 0; k < s->n_notes; k++)
        loss = loss || s->note_is_loss[k];
    ADD(loss, "inputs that say they lost data");
#undef ADD
}

static const char *base_name(const char *p)
{
    const char *b = strrchr(p, '/');
    return b ? b + 1 : p;
}

static void q_cols(FILE *f, const rpt_q *q)
{
    char a[16], b[16], c[16], d[16];
    if (!q->n) {
        fprintf(f, "%10s %10s %10s %10s", "-", "-", "-", "-");
        return;
    }
    fprintf(f, "%10s %10s %10s %10s", rpt_fmt_dur(q->p50, a), rpt_fmt_dur(q->p90, b),
            rpt_fmt_dur(q->p99, c), rpt_fmt_dur(q->max, d));
}

static void example_lines(FILE *f, const rpt_summary *s, const rpt_example *ex, unsigned n,
                          uint64_t total)
{
    for (unsigned k = 0; k < n; k++) {
        const char *path = ex[k].file < s->n_files && s->files[ex[k].file].path
                               ? s->files[ex[k].file].path : "?";
        if (ex[k].line)
            fprintf(f, "      %s:%llu: %s\n", SAFE(path), (unsigned long long)ex[k].line,
                    SAFE(ex[k].text));
        else
            fprintf(f, "      %s: %s\n", SAFE(path), SAFE(ex[k].text));
    }
    if (total > n)
        fprintf(f, "      (and %llu more)\n", (unsigned long long)(total - n));
}

static void completeness(FILE *f, const rpt_summary *s)
{
    char line[512];
    rpt_completeness_line(s, line, sizeof line);
    fprintf(f, "\nCOMPLETENESS: %s\n", line);
    if (s->bad_lines) {
        fprintf(f, "  bad lines: %llu (skipped)\n", (unsigned long long)s->bad_lines);
        example_lines(f, s, s->bad, s->n_bad, s->bad_lines);
    }
    if (s->bad_spans) {
        fprintf(f, "  bad spans: %llu (skipped; the rest of their batch read on)\n",
                (unsigned long long)s->bad_spans);
        example_lines(f, s, s->badspan, s->n_badspan, s->bad_spans);
    }
    if (s->incomplete_roots) {
        fprintf(f, "  incomplete roots: %llu traces (%llu spans) whose root never arrived\n",
                (unsigned long long)s->incomplete_roots,
                (unsigned long long)s->incomplete_root_spans);
        example_lines(f, s, s->noroot, s->n_noroot, s->incomplete_roots);
    }
    if (s->orphans) {
        fprintf(f, "  orphans: %llu spans whose parent is missing from their trace\n",
                (unsigned long long)s->orphans);
        example_lines(f, s, s->orphan, s->n_orphan, s->orphans);
    }
    if (s->extra_roots)
        fprintf(f, "  extra roots: %llu spans without a parent in a trace that has a root "
                   "(the earliest-starting one is the request)\n",
                (unsigned long long)s->extra_roots);
    if (s->duplicate_spans)
        fprintf(f, "  duplicate spans: %llu (a span id seen again in its trace: the same file "
                   "given twice, a span exported twice); skipped\n",
                (unsigned long long)s->duplicate_spans);
    if (s->split_traces)
        fprintf(f, "  split traces: %llu (%llu spans arrived after their trace was closed: "
                   "the open-trace table, --max-open, was too small for how far apart they "
                   "are in the input)\n",
                (unsigned long long)s->split_traces, (unsigned long long)s->split_spans);
    if (s->evicted_open)
        fprintf(f, "  %sopen-trace table: %llu traces closed to make room before the input "
                   "ended (%llu of them without a root); %s\n",
                s->split_traces || s->evicted_rootless ? "" : "note: ",
                (unsigned long long)s->evicted_open, (unsigned long long)s->evicted_rootless,
                s->split_traces ? "some of them got spans afterwards (split traces, above)"
                                : "no span came for them afterwards");
    if (s->spans_incomplete) {
        fprintf(f, "  spans ended incomplete: %llu (", (unsigned long long)s->spans_incomplete);
        for (unsigned k = 0; k < s->n_evict; k++)
            fprintf(f, "%s%s %llu", k ? ", " : "", SAFE(s->evict_reason[k]),
                    (unsigned long long)s->evict_count[k]);
        fprintf(f, ")\n");
    }
    if (s->spans_dropped_attrs)
        fprintf(f, "  dropped attributes: %llu on %llu spans\n",
                (unsigned long long)s->dropped_attrs, (unsigned long long)s->spans_dropped_attrs);
    if (s->spans_dropped_events)
        fprintf(f, "  dropped span events: %llu on %llu spans\n",
                (unsigned long long)s->dropped_events,
                (unsigned long long)s->spans_dropped_events);
    if (s->spans_truncated)
        fprintf(f, "  truncated string values on %llu spans (kept, cut)\n",
                (unsigned long long)s->spans_truncated);
    if (s->traces_over_cap)
        fprintf(f, "  %llu requests had more spans than kept (%u each): figured from the "
                   "first ones\n", (unsigned long long)s->traces_over_cap, RPT_TRACE_SPANS_MAX);
    if (s->spans_other_name)
        fprintf(f, "  %llu spans of names past the first %u counted as \"(other names)\"\n",
                (unsigned long long)s->spans_other_name, RPT_NAMES_MAX);
    if (s->spans_other_stream)
        fprintf(f, "  %llu spans of streams past the first %u counted as \"(other streams)\"\n",
                (unsigned long long)s->spans_other_stream, RPT_STREAMS_MAX);
    if (s->sketch_lost)
        fprintf(f, "  %llu values left out of the percentiles (no memory)\n",
                (unsigned long long)s->sketch_lost);
    for (unsigned k = 0; k < s->n_notes; k++)
        fprintf(f, "  %s%s\n", s->note_is_loss[k] ? "" : "note: ", SAFE(s->notes[k]));
}

static void wall(uint64_t ns, char *buf, size_t cap)
{
    time_t t = (time_t)(ns / 1000000000u);
    struct tm tm;
    gmtime_r(&t, &tm);
    size_t n = strftime(buf, cap, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(buf + n, cap - n, ".%03u UTC", (unsigned)(ns / 1000000u % 1000u));
}

static void waterfall(FILE *f, const rpt_summary *s, const rpt_wf *w, unsigned width)
{
    char a[16], b[16], c[16], d[16];
    const char *path = w->file < s->n_files && s->files[w->file].path ? s->files[w->file].path
                                                                        : "?";
    fprintf(f, "\n%s  %s end to end (request span %s", w->session[0] ? SAFE(w->session) : "(no id)",
            rpt_fmt_dur((double)w->latency, a), rpt_fmt_dur((double)w->root_dur, b));
    if (w->gpu_queue >= 0)
        fprintf(f, ", GPU queue %s", rpt_fmt_dur((double)w->gpu_queue, c));
    if (w->gpu_busy >= 0)
        fprintf(f, ", GPU busy %s", rpt_fmt_dur((double)w->gpu_busy, d));
    if (w->gpu_tail >= 0)
        fprintf(f, ", GPU tail %s", rpt_fmt_dur((double)w->gpu_tail, a));
    if (!isnan(w->hit_rate))
        fprintf(f, ", hit rate %.2f", w->hit_rate);
    fprintf(f, ")\n  trace %s in %s%s\n", SAFE(w->trace), SAFE(base_name(path)),
            w->n < w->n_total ? " (first spans only)" : "");
    double total = w->latency ? (double)w->latency : 1.0;
    int col = 20;
    for (unsigned k = 0; k < w->n; k++) {
        int len = 2 * w->spans[k].depth + (int)strlen(w->spans[k].name);
        if (len > col && len <= 48)
            col = len;
    }
    for (unsigned k = 0; k < w->n; k++) {
        const rpt_wf_span *sp = &w->spans[k];
        unsigned x0 = (unsigned)((double)sp->start / total * width);
        unsigned x1 = (unsigned)((double)sp->end / total * width);
        unsigned xq = sp->enqueue >= 0 ? (unsigned)((double)sp->enqueue / total * width) : x0;
        if (x0 >= width)
            x0 = width - 1;
        if (x1 <= x0)
            x1 = x0 + 1;
        if (x1 > width)
            x1 = width;
        if (xq > x0)
            xq = x0;
        int ind = 2 * sp->depth;
        if (ind > 32)
            ind = 32;
        fprintf(f, "  %*s%-*.*s |", ind, "", col - ind, col - ind, SAFE(sp->name));
        for (unsigned x = 0; x < width; x++)
            fputs(x >= x0 && x < x1 ? "\u2588" : x >= xq && x < x0 ? "\u2591" : " ", f);
        fprintf(f, "| %10s", rpt_fmt_dur((double)(sp->end - sp->start), a));
        if (sp->enqueue >= 0)
            fprintf(f, "  queued %s", rpt_fmt_dur((double)sp->start - (double)sp->enqueue, b));
        if (sp->stream >= 0)
            fprintf(f, " on stream %d", (int)sp->stream);
        if (sp->incomplete)
            fprintf(f, "  (incomplete)");
        if (sp->orphan)
            fprintf(f, "  (orphan)");
        fputc('\n', f);
    }
}

void rpt_text_write(FILE *f, const rpt_summary *s, unsigned width)
{
    char a[16], b[16], c[16], t0[48], t1[48];
    if (width < 10)
        width = 10;
    fprintf(f, "cbt report: %u file%s, %llu spans, %llu requests", s->n_files,
            s->n_files == 1 ? "" : "s", (unsigned long long)s->spans,
            (unsigned long long)s->requests);
    if (s->spans) {
        wall(s->first_ns, t0, sizeof t0);
        wall(s->last_ns, t1, sizeof t1);
        fprintf(f, ", %s to %s (%s)", t0, t1 + 11,
                rpt_fmt_dur((double)(s->last_ns - s->first_ns), a));
    }
    fputc('\n', f);
    for (unsigned k = 0; k < s->n_files; k++) {
        const rpt_file_sum *fs = &s->files[k];
        fprintf(f, "  %s: %s, %llu spans", fs->path ? SAFE(fs->path) : "?", rpt_format_name(fs->fmt),
                (unsigned long long)fs->spans);
        if (fs->bad_lines)
            fprintf(f, ", %llu bad lines", (unsigned long long)fs->bad_lines);
        if (fs->bad_spans)
            fprintf(f, ", %llu bad spans", (unsigned long long)fs->bad_spans);
        if (fs->service[0])
            fprintf(f, ", service %s", SAFE(fs->service));
        fputc('\n', f);
    }
    completeness(f, s);

    /* spans by name */
    int col = 24;
    for (unsigned k = 0; k < s->n_names; k++)
        if ((int)strlen(s->names[k].name) > col && strlen(s->names[k].name) <= 48)
            col = (int)strlen(s->names[k].name);
    fprintf(f, "\nSPANS BY NAME (duration; queue = cbt.queue_ns, where spans carry it)\n");
    fprintf(f, "  %-*s %9s %10s %10s %10s %10s | %10s %10s %10s\n", col, "name", "count", "p50",
            "p90", "p99", "max", "queue p50", "p90", "p99");
    for (unsigned k = 0; k < s->n_names; k++) {
        const rpt_name_sum *n = &s->names[k];
        fprintf(f, "  %-*.*s %9llu ", col, 48, SAFE(n->name), (unsigned long long)n->count);
        q_cols(f, &n->dur);
        if (n->queue.n)
            fprintf(f, " | %10s %10s %10s", rpt_fmt_dur(n->queue.p50, a),
                    rpt_fmt_dur(n->queue.p90, b), rpt_fmt_dur(n->queue.p99, c));
        else
            fprintf(f, " | %10s %10s %10s", "-", "-", "-");
        if (n->incomplete)
            fprintf(f, "  (%llu incomplete)", (unsigned long long)n->incomplete);
        fputc('\n', f);
    }

    /* requests */
    fprintf(f, "\nWHERE THE REQUESTS' TIME WENT (%llu requests; percentiles over requests)\n",
            (unsigned long long)s->requests);
    fprintf(f, "  %-*s %10s %10s %10s %10s\n", col, "", "p50", "p90", "p99", "max");
    struct {
        const char *label;
        const rpt_q *q;
    } rows[] = {
        {"latency (end to end)", &s->latency},
        {"request span", &s->root_dur},
        {"host-side work", s->any_stream_timed ? &s->host : NULL},
        {"GPU queue", &s->gpu_queue},
        {"GPU busy", &s->gpu_busy},
    };
    for (unsigned k = 0; k < sizeof rows / sizeof *rows; k++) {
        if (!rows[k].q)
            continue;
        fprintf(f, "  %-*s ", col, rows[k].label);
        q_cols(f, rows[k].q);
        if (!rows[k].q->n)
            fprintf(f, "  (not measured)");
        fputc('\n', f);
    }
    for (unsigned k = 0; k < s->n_names; k++) {
        const rpt_name_sum *n = &s->names[k];
        if (!n->busy_req.n)
            continue;
        fprintf(f, "    busy: %-*.*s ", col - 8, col - 8, SAFE(n->name));
        q_cols(f, &n->busy_req);
        fprintf(f, "  (%llu requests)\n", (unsigned long long)n->busy_req.n);
    }
    fprintf(f, "  %-*s ", col, "GPU tail (after the end)");
    q_cols(f, &s->gpu_tail);
    fprintf(f, s->gpu_tail.n ? "\n" : "  (not measured)\n");
    if (!s->any_stream_timed)
        fprintf(f, "  GPU queue, GPU busy and host-side work need stream-timed spans "
                   "(cbt.queue_ns): none in the input\n");

    /* the operation that queued most */
    if (s->slowest_queue >= 0) {
        const rpt_name_sum *n = &s->names[s->slowest_queue];
        double share = s->latency.sum > 0 ? 100.0 * n->queue.sum / s->latency.sum : 0.0;
        fprintf(f, "\nMOST QUEUEING: %s waited %s in all over %llu spans (p50 %s, p99 %s), "
                   "%.1f%% of the requests' summed latency\n",
                SAFE(n->name), rpt_fmt_dur(n->queue.sum, a), (unsigned long long)n->queue.n,
                rpt_fmt_dur(n->queue.p50, b), rpt_fmt_dur(n->queue.p99, c), share);
    }

    /* per stream */
    if (s->n_streams) {
        fprintf(f, "\nSTREAMS (cbt.device, cbt.stream; most queue time first)\n");
        fprintf(f, "  %-*s %9s %10s %10s %10s %10s %12s %12s\n", col, "stream", "spans",
                "queue p50", "p90", "p99", "max", "queued", "ran");
        unsigned shown = s->n_streams < 20 ? s->n_streams : 20;
        for (unsigned k = 0; k < shown; k++) {
            const rpt_stream_sum *st = &s->streams[k];
            char d[16], e[16];
            fprintf(f, "  %-*.*s %9llu ", col, 48, SAFE(st->label), (unsigned long long)st->count);
            q_cols(f, &st->queue);
            fprintf(f, " %12s %12s\n", rpt_fmt_dur(st->queue.sum, d), rpt_fmt_dur(st->run, e));
        }
        if (s->n_streams > shown)
            fprintf(f, "  (and %u more streams)\n", s->n_streams - shown);
        const rpt_stream_sum *st = &s->streams[0];
        if (st->queue.sum > 0)
            fprintf(f, "SLOWEST STREAM: %s: %llu spans waited %s in all (p50 %s, p99 %s)\n",
                    SAFE(st->label), (unsigned long long)st->count, rpt_fmt_dur(st->queue.sum, a),
                    rpt_fmt_dur(st->queue.p50, b), rpt_fmt_dur(st->queue.p99, c));
    }

    /* hit rate vs latency */
    static const char *hit_label[RPT_HITRATE_BUCKETS] = {
        "no hit_rate", "0", "(0, 0.25]", "(0.25, 0.5]", "(0.5, 0.75]", "(0.75, 1]"};
    bool any_hit = false;
    for (unsigned k = 1; k < RPT_HITRATE_BUCKETS; k++)
        any_hit = any_hit || s->hit[k].n;
    if (any_hit) {
        fprintf(f, "\nHIT RATE VS LATENCY (the root's hit_rate)\n");
        fprintf(f, "  %-12s %9s %10s %10s %10s %10s\n", "hit rate", "requests", "p50", "p90",
                "p99", "max");
        for (unsigned k = 0; k < RPT_HITRATE_BUCKETS; k++) {
            if (!s->hit[k].n)
                continue;
            fprintf(f, "  %-12s %9llu ", hit_label[k], (unsigned long long)s->hit[k].n);
            q_cols(f, &s->hit[k]);
            fputc('\n', f);
        }
    }

    /* the slowest */
    if (s->n_slow) {
        fprintf(f, "\nSLOWEST %u REQUEST%s (\u2591 queued on its stream, \u2588 running)\n",
                s->n_slow, s->n_slow == 1 ? "" : "S");
        for (unsigned k = 0; k < s->n_slow; k++)
            waterfall(f, s, &s->slow[k], width);
    }
}
