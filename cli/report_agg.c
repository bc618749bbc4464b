/* cli/report_agg.c — owns the aggregation of `cbt report` (report_agg.h):
 * per-name sketches, the table of open traces, per-request figures, the
 * completeness counts, and the summary the text and HTML outputs draw. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report_agg.h"
#include "report_sketch.h"

#define NONE UINT32_MAX
#define CLOSED_FP_BITS 18u /* remembered closed traces: 2^18 x 8 bytes */
#define TL_HB 320u         /* timeline bins' latency buckets: 8 per power of two */

enum { F_PARENT = 1, F_INCOMPLETE = 2, F_STREAM = 4 };

typedef struct cspan {
    uint64_t start, end;
    int64_t enq, queue; /* stream-timed only */
    uint8_t sid[8], pid[8];
    uint16_t name;
    uint8_t flags;
    int32_t stream; /* cbt.stream, -1: none */
} cspan;
/* report_agg.h and docs/report.md ("Bounded memory") give this size */
_Static_assert(sizeof (cspan) == 56, "a kept span is 56 bytes, as the docs say");

typedef struct trace {
    uint8_t tid[16];
    uint32_t hnext, prev, next;
    uint32_t n_seen, n_kept, cap;
    cspan *spans;
    bool has_root, over_cap, split;
    uint32_t extra_roots;
    uint64_t max_end;
    uint64_t r_start, r_end;
    int64_t r_gq, r_gb, r_gt;
    double r_hit;
    uint8_t r_sid[8];
    uint16_t r_file, first_file, first_name;
    uint64_t first_line;
    char r_session[RPT_SESSION_MAX];
} trace;

typedef struct name_ent {
    char name[RPT_NAME_MAX];
    uint64_t count, incomplete, errors;
    rpt_sketch dur, queue, busy;
} name_ent;

typedef struct stream_ent {
    char label[48], device[16];
    int64_t stream;
    uint64_t count;
    double run;
    rpt_sketch queue;
} stream_ent;

struct rpt_agg {
    rpt_opts o;
    rpt_summary sum;
    /* streams */
    stream_ent *streams;
    unsigned n_streams;
    int16_t stream_ix[2 * RPT_STREAMS_MAX];
    /* names */
    name_ent *names;
    unsigned n_names;
    int16_t name_ix[2 * RPT_NAMES_MAX];
    /* open traces */
    trace *tr;
    uint32_t *heads, hmask, n_open, free_head, lru_old, lru_new;
    uint64_t stored;
    uint64_t *closed_fp;
    /* per request */
    rpt_sketch lat, root, host, gq, gb, gt, hit[RPT_HITRATE_BUCKETS];
    /* timeline */
    bool tl_any;
    uint64_t tl_t0, tl_w;
    unsigned tl_lo, tl_hi; /* bins used */
    uint32_t (*tl_hist)[TL_HB], (*tl_tmp)[TL_HB]; /* the bins, and a spare to coarsen into */
    uint64_t tl_n[RPT_TIMELINE_BINS];
    /* slowest: a min-heap on latency */
    rpt_wf *slow;
    unsigned n_slow;
    bool finished;
};

rpt_opts rpt_opts_default(void)
{
    rpt_opts o = {.max_open = 32768, .slowest = 5, .spans_stored = 1u << 20};
    return o;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static uint64_t tid_hash(const uint8_t *tid)
{
    uint64_t a, b;
    memcpy(&a, tid, 8);
    memcpy(&b, tid + 8, 8);
    return mix64(a ^ mix64(b));
}

rpt_agg *rpt_agg_new(const rpt_opts *o)
{
    rpt_agg *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->o = o ? *o : rpt_opts_default();
    if (a->o.max_open < 1)
        a->o.max_open = 1;
    if (a->o.slowest > RPT_SLOWEST_MAX)
        a->o.slowest = RPT_SLOWEST_MAX;
    uint32_t hsize = 1;
    while (hsize < 2 * a->o.max_open)
        hsize <<= 1;
    a->hmask = hsize - 1;
    a->names = calloc(RPT_NAMES_MAX + 1, sizeof *a->names);
    a->streams = calloc(RPT_STREAMS_MAX + 1, sizeof *a->streams);
    a->tr = calloc(a->o.max_open, sizeof *a->tr);
    a->heads = malloc(hsize * sizeof *a->heads);
    a->closed_fp = calloc(1u << CLOSED_FP_BITS, sizeof *a->closed_fp);
    a->tl_hist = calloc(RPT_TIMELINE_BINS, sizeof *a->tl_hist);
    a->tl_tmp = calloc(RPT_TIMELINE_BINS, sizeof *a->tl_tmp);
    a->slow = calloc(a->o.slowest ? a->o.slowest : 1, sizeof *a->slow);
    if (!a->names || !a->streams || !a->tr || !a->heads || !a->closed_fp || !a->tl_hist || !a->tl_tmp || !a->slow) {
        rpt_agg_free(a);
        return NULL;
    }
    memset(a->heads, 0xff, hsize * sizeof *a->heads);
    memset(a->name_ix, 0xff, sizeof a->name_ix);
    memset(a->stream_ix, 0xff, sizeof a->stream_ix);
    for (uint32_t i = 0; i < a->o.max_open; i++)
        a->tr[i].next = i + 1 < a->o.max_open ? i + 1 : NONE;
    a->free_head = 0;
    a->lru_old = a->lru_new = NONE;
    a->sum.slowest_queue = -1;
    return a;
}

void rpt_agg_free(rpt_agg *a)
{
    if (!a)
        return;
    if (a->names)
        for (unsigned i = 0; i <= RPT_NAMES_MAX; i++) {
            rpt_sketch_free(&a->names[i].dur);
            rpt_sketch_free(&a->names[i].queue);
            rpt_sketch_free(&a->names[i].busy);
        }
    if (a->streams)
        for (unsigned i = 0; i <= RPT_STREAMS_MAX; i++)
            rpt_sketch_free(&a->streams[i].queue);
    if (a->tr)
        for (uint32_t i = 0; i < a->o.max_open; i++)
            free(a->tr[i].spans);
    rpt_sketch *sk[] = {&a->lat, &a->root, &a->host, &a->gq, &a->gb, &a->gt};
    for (unsigned k = 0; k < sizeof sk / sizeof *sk; k++)
        rpt_sketch_free(sk[k]);
    for (unsigned k = 0; k < RPT_HITRATE_BUCKETS; k++)
        rpt_sketch_free(&a->hit[k]);
    free(a->names);
    free(a->streams);
    free(a->sum.streams);
    free(a->tr);
    free(a->heads);
    free(a->closed_fp);
    free(a->tl_hist);
    free(a->tl_tmp);
    free(a->slow);
    free(a->sum.names);
    free(a);
}

void rpt_agg_file(rpt_agg *a, unsigned i, const char *path, rpt_format fmt)
{
    if (i >= RPT_FILES_MAX)
        return;
    a->sum.files[i].path = path;
    a->sum.files[i].fmt = fmt;
    if (i + 1 > a->sum.n_files)
        a->sum.n_files = i + 1;
}

void rpt_agg_file_service(rpt_agg *a, unsigned i, const char *service)
{
    if (i < RPT_FILES_MAX)
        snprintf(a->sum.files[i].service, sizeof a->sum.files[i].service, "%s", service);
}

static void example(rpt_example *ex, unsigned *n, unsigned file, uint64_t line, const char *fmt,
                    ...) __attribute__((format(printf, 5, 6)));
static void example(rpt_example *ex, unsigned *n, unsigned file, uint64_t line, const char *fmt,
                    ...)
{
    if (*n >= RPT_EXAMPLES)
        return;
    rpt_example *e = &ex[(*n)++];
    e->file = file;
    e->line = line;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->text, sizeof e->text, fmt, ap);
    va_end(ap);
}

void rpt_agg_bad_line(rpt_agg *a, unsigned file, uint64_t line, const char *why)
{
    a->sum.bad_lines++;
    if (file < RPT_FILES_MAX)
        a->sum.files[file].bad_lines++;
    example(a->sum.bad, &a->sum.n_bad, file, line, "%s", why);
}

void rpt_agg_bad_span(rpt_agg *a, unsigned file, uint64_t line, const char *why)
{
    a->sum.bad_spans++;
    if (file < RPT_FILES_MAX)
        a->sum.files[file].bad_spans++;
    example(a->sum.badspan, &a->sum.n_badspan, file, line, "%s", why);
}

void rpt_agg_note(rpt_agg *a, bool loss, const char *fmt, ...)
{
    if (a->sum.n_notes >= RPT_NOTES_MAX)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->sum.notes[a->sum.n_notes], sizeof a->sum.notes[0], fmt, ap);
    va_end(ap);
    a->sum.note_is_loss[a->sum.n_notes++] = loss;
}

/* ---- names ----------------------------------------------------------------------- */

static uint16_t name_id(rpt_agg *a, const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        h = (h ^ *p) * 1099511628211ULL;
    unsigned mask = 2 * RPT_NAMES_MAX - 1;
    for (unsigned k = (unsigned)h & mask;; k = (k + 1) & mask) {
        int16_t ix = a->name_ix[k];
        if (ix < 0) {
            if (a->n_names >= RPT_NAMES_MAX) {
                a->sum.spans_other_name++;
                if (!a->names[RPT_NAMES_MAX].name[0])
                    snprintf(a->names[RPT_NAMES_MAX].name, RPT_NAME_MAX, "(other names)");
                return RPT_NAMES_MAX;
            }
            ix = (int16_t)a->n_names++;
            snprintf(a->names[ix].name, RPT_NAME_MAX, "%s", s);
            a->name_ix[k] = ix;
            return (uint16_t)ix;
        }
        if (!strcmp(a->names[ix].name, s))
            return (uint16_t)ix;
    }
}

static stream_ent *stream_of(rpt_agg *a, const rpt_span *s)
{
    char label[48];
    if (s->device[0])
        snprintf(label, sizeof label, "%s stream %lld", s->device, (long long)s->stream);
    else
        snprintf(label, sizeof label, "stream %lld", (long long)s->stream);
    uint64_t h = 1469598103934665603ULL;
    for (const unsigned char *p = (const unsigned char *)label; *p; p++)
        h = (h ^ *p) * 1099511628211ULL;
    unsigned mask = 2 * RPT_STREAMS_MAX - 1;
    for (unsigned k = (unsigned)h & mask;; k = (k + 1) & mask) {
        int16_t ix = a->stream_ix[k];
        if (ix < 0) {
            if (a->n_streams >= RPT_STREAMS_MAX) {
                stream_ent *o = &a->streams[RPT_STREAMS_MAX];
                a->sum.spans_other_stream++;
                if (!o->label[0]) {
                    snprintf(o->label, sizeof o->label, "(other streams)");
                    o->stream = RPT_ABSENT;
                }
                return o;
            }
            ix = (int16_t)a->n_streams++;
            stream_ent *e = &a->streams[ix];
            memcpy(e->label, label, sizeof label);
            snprintf(e->device, sizeof e->device, "%s", s->device);
            e->stream = s->stream;
            a->stream_ix[k] = ix;
            return e;
        }
        if (!strcmp(a->streams[ix].label, label))
            return &a->streams[ix];
    }
}

/* ---- the timeline ------------------------------------------------------------------ */

static unsigned tl_bucket(uint64_t v)
{
    if (v < 2)
        return 0;
    double b = 8.0 * log2((double)v);
    return b >= TL_HB - 1 ? TL_HB - 1 : (unsigned)b;
}

static void tl_coarsen(rpt_agg *a)
{
    uint64_t w2 = a->tl_w * 2, t0 = a->tl_t0 - a->tl_t0 % w2;
    unsigned off = (unsigned)((a->tl_t0 - t0) / a->tl_w);
    uint64_t n[RPT_TIMELINE_BINS] = {0};
    uint32_t (*h)[TL_HB] = a->tl_tmp;
    memset(h, 0, RPT_TIMELINE_BINS * sizeof *h);
    for (unsigned i = a->tl_lo; i <= a->tl_hi; i++) {
        unsigned j = (i + off) / 2;
        n[j] += a->tl_n[i];
        for (unsigned b = 0; b < TL_HB; b++)
            h[j][b] += a->tl_hist[i][b];
    }
    memcpy(a->tl_n, n, sizeof n);
    a->tl_tmp = a->tl_hist;
    a->tl_hist = h;
    a->tl_lo = (a->tl_lo + off) / 2;
    a->tl_hi = (a->tl_hi + off) / 2;
    a->tl_t0 = t0;
    a->tl_w = w2;
}

static void tl_add(rpt_agg *a, uint64_t t, uint64_t lat)
{
    if (!a->tl_any) {
        a->tl_any = true;
        a->tl_w = 1000000; /* 1 ms to start with */
        a->tl_t0 = t - t % a->tl_w;
        a->tl_lo = a->tl_hi = 0;
    }
    for (int guard = 0; guard < 80; guard++) {
        if (t < a->tl_t0) {
            uint64_t k = (a->tl_t0 - t + a->tl_w - 1) / a->tl_w;
            if (a->tl_hi + k < RPT_TIMELINE_BINS) { /* room on the right: shift */
                memmove(&a->tl_n[k], &a->tl_n[0], (a->tl_hi + 1) * sizeof a->tl_n[0]);
                memset(&a->tl_n[0], 0, k * sizeof a->tl_n[0]);
                memmove(&a->tl_hist[k], &a->tl_hist[0], (a->tl_hi + 1) * sizeof a->tl_hist[0]);
                memset(&a->tl_hist[0], 0, k * sizeof a->tl_hist[0]);
                a->tl_lo += (unsigned)k;
                a->tl_hi += (unsigned)k;
                a->tl_t0 -= k * a->tl_w;
                continue;
            }
            tl_coarsen(a);
            continue;
        }
        uint64_t i = (t - a->tl_t0) / a->tl_w;
        if (i >= RPT_TIMELINE_BINS) {
            if (a->tl_lo > 0) { /* room on the left: shift */
                unsigned k = a->tl_lo;
                if (i - k < RPT_TIMELINE_BINS) {
                    memmove(&a->tl_n[0], &a->tl_n[k], (a->tl_hi - k + 1) * sizeof a->tl_n[0]);
                    memset(&a->tl_n[a->tl_hi - k + 1], 0, k * sizeof a->tl_n[0]);
                    memmove(&a->tl_hist[0], &a->tl_hist[k],
                            (a->tl_hi - k + 1) * sizeof a->tl_hist[0]);
                    memset(&a->tl_hist[a->tl_hi - k + 1], 0, k * sizeof a->tl_hist[0]);
                    a->tl_hi -= k;
                    a->tl_lo = 0;
                    a->tl_t0 += k * a->tl_w;
                    continue;
                }
            }
            tl_coarsen(a);
            continue;
        }
        a->tl_n[i]++;
        a->tl_hist[i][tl_bucket(lat)]++;
        if (i < a->tl_lo)
            a->tl_lo = (unsigned)i;
        if (i > a->tl_hi)
            a->tl_hi = (unsigned)i;
        return;
    }
}

/* ---- traces ------------------------------------------------------------------------- */

static void lru_unlink(rpt_agg *a, uint32_t i)
{
    trace *t = &a->tr[i];
    if (t->prev != NONE)
        a->tr[t->prev].next = t->next;
    else
        a->lru_old = t->next;
    if (t->next != NONE)
        a->tr[t->next].prev = t->prev;
    else
        a->lru_new = t->prev;
}

static void lru_append(rpt_agg *a, uint32_t i)
{
    trace *t = &a->tr[i];
    t->prev = a->lru_new;
    t->next = NONE;
    if (a->lru_new != NONE)
        a->tr[a->lru_new].next = i;
    else
        a->lru_old = i;
    a->lru_new = i;
}

static int cmp_u64pair(const void *x, const void *y)
{
    const uint64_t *p = x, *q = y;
    return (p[0] > q[0]) - (p[0] < q[0]);
}

/* length of the union of n intervals iv[2k], iv[2k+1], clipped to [lo, hi]
 * (sorts iv) */
static uint64_t union_len(uint64_t *iv, unsigned n, uint64_t lo, uint64_t hi)
{
    qsort(iv, n, 2 * sizeof *iv, cmp_u64pair);
    uint64_t tot = 0, cs = 0, ce = 0;
    bool open = false;
    for (unsigned k = 0; k < n; k++) {
        uint64_t s = iv[2 * k] < lo ? lo : iv[2 * k], e = iv[2 * k + 1] > hi ? hi : iv[2 * k + 1];
        if (e <= s)
            continue;
        if (open && s <= ce) {
            if (e > ce)
                ce = e;
            continue;
        }
        if (open)
            tot += ce - cs;
        cs = s;
        ce = e;
        open = true;
    }
    if (open)
        tot += ce - cs;
    return tot;
}

static void hex_of(const uint8_t *b, size_t n, char *out)
{
    static const char hx[] = "0123456789abcdef";
    for (size_t k = 0; k < n; k++) {
        out[2 * k] = hx[b[k] >> 4];
        out[2 * k + 1] = hx[b[k] & 15];
    }
    out[2 * n] = 0;
}

static int find_kept(const trace *t, const uint8_t *sid)
{
    for (uint32_t k = 0; k < t->n_kept; k++)
        if (!memcmp(t->spans[k].sid, sid, 8))
            return (int)k;
    return -1;
}

static int cmp_wf_start(const void *x, const void *y)
{
    const rpt_wf_span *p = x, *q = y;
    if (p->start != q->start)
        return (p->start > q->start) - (p->start < q->start);
    return (p->depth > q->depth) - (p->depth < q->depth);
}

static void heap_down(rpt_wf *h, unsigned n, unsigned i)
{
    for (;;) {
        unsigned l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && h[l].latency < h[m].latency)
            m = l;
        if (r < n && h[r].latency < h[m].latency)
            m = r;
        if (m == i)
            return;
        rpt_wf tmp = h[i];
        h[i] = h[m];
        h[m] = tmp;
        i = m;
    }
}

static void heap_up(rpt_wf *h, unsigned i)
{
    while (i > 0) {
        unsigned p = (i - 1) / 2;
        if (h[p].latency <= h[i].latency)
            return;
        rpt_wf tmp = h[i];
        h[i] = h[p];
        h[p] = tmp;
        i = p;
    }
}

static void keep_slowest(rpt_agg *a, const trace *t, uint64_t lat, int64_t gq, int64_t gb)
{
    unsigned k = a->o.slowest;
    if (k == 0)
        return;
    rpt_wf *w;
    if (a->n_slow < k) {
        w = &a->slow[a->n_slow];
    } else if (lat > a->slow[0].latency) {
        w = &a->slow[0];
    } else {
        return;
    }
    memset(w, 0, sizeof *w);
    snprintf(w->session, sizeof w->session, "%s", t->r_session);
    hex_of(t->tid, 16, w->trace);
    w->file = t->r_file;
    w->root_start = t->r_start;
    w->latency = lat;
    w->root_dur = t->r_end - t->r_start;
    w->gpu_queue = gq;
    w->gpu_busy = gb;
    w->gpu_tail = t->r_gt;
    w->hit_rate = t->r_hit;
    w->n_total = t->n_seen;
    for (uint32_t i = 0; i < t->n_kept && w->n < RPT_TRACE_SPANS_MAX; i++) {
        const cspan *c = &t->spans[i];
        rpt_wf_span *o = &w->spans[w->n++];
        snprintf(o->name, sizeof o->name, "%s", a->names[c->name].name);
        o->start = c->start > t->r_start ? c->start - t->r_start : 0;
        o->end = c->end > t->r_start ? c->end - t->r_start : 0;
        o->enqueue = c->flags & F_STREAM
                         ? (c->enq >= 0 && (uint64_t)c->enq > t->r_start
                                ? (int64_t)((uint64_t)c->enq - t->r_start) : 0)
                         : RPT_ABSENT;
        o->incomplete = (c->flags & F_INCOMPLETE) != 0;
        o->stream = c->stream;
        unsigned d = 0;
        const cspan *cur = c;
        while ((cur->flags & F_PARENT) && d < 16) {
            int p = find_kept(t, cur->pid);
            if (p < 0) {
                if (cur == c)
                    o->orphan = true;
                break;
            }
            cur = &t->spans[p];
            d++;
        }
        o->depth = (uint8_t)d;
    }
    qsort(w->spans, w->n, sizeof w->spans[0], cmp_wf_start);
    if (a->n_slow < k)
        heap_up(a->slow, a->n_slow++);
    else
        heap_down(a->slow, a->n_slow, 0);
}

static void close_trace(rpt_agg *a, uint32_t i, bool evicted)
{
    trace *t = &a->tr[i];
    rpt_summary *S = &a->sum;
    /* unlink from the hash chain and the LRU list; remember the id */
    uint32_t *pp = &a->heads[tid_hash(t->tid) & a->hmask];
    while (*pp != i)
        pp = &a->tr[*pp].hnext;
    *pp = t->hnext;
    lru_unlink(a, i);
    uint64_t fp = tid_hash(t->tid) | 1;
    a->closed_fp[(fp >> 7) & ((1u << CLOSED_FP_BITS) - 1)] = fp;
    a->n_open--;
    char tid[33];
    hex_of(t->tid, 16, tid);

    if (evicted) {
        S->evicted_open++;
        if (!t->has_root && !t->split)
            S->evicted_rootless++;
    }
    if (t->split) {
        S->split_traces++;
        S->split_spans += t->n_seen;
    } else if (!t->has_root) {
        S->incomplete_roots++;
        S->incomplete_root_spans += t->n_seen;
        example(S->noroot, &S->n_noroot, t->first_file, t->first_line,
                "trace %.16s...: %u span%s (first: %s), no root", tid, t->n_seen,
                t->n_seen == 1 ? "" : "s", a->names[t->first_name].name);
    } else {
        S->requests++;
        S->extra_roots += t->extra_roots;
        if (t->over_cap)
            S->traces_over_cap++;
        /* iv_busy: every stream-timed span (GPU busy's fallback, as cbt.gpu_busy_ns
         * is defined); iv_lbusy / iv_lcov: the leaves among them (no stream-timed
         * child), for the partition into host-side, waiting and running: a
         * stream-timed wrapper (mp.retrieve around its kernels) is open while its
         * kernels wait, and must not make their wait look like running */
        uint64_t iv_busy[2 * RPT_TRACE_SPANS_MAX], iv_lbusy[2 * RPT_TRACE_SPANS_MAX],
            iv_lcov[2 * RPT_TRACE_SPANS_MAX];
        unsigned ns = 0, nl = 0;
        uint64_t qsum = 0;
        uint16_t op_name[RPT_TRACE_SPANS_MAX];
        uint64_t op_sum[RPT_TRACE_SPANS_MAX];
        unsigned n_ops = 0;
        for (uint32_t k = 0; k < t->n_kept; k++) {
            const cspan *c = &t->spans[k];
            if ((c->flags & F_PARENT) && !t->over_cap && find_kept(t, c->pid) < 0) {
                S->orphans++;
                example(S->orphan, &S->n_orphan, t->r_file, 0,
                        "trace %.16s...: %s, its parent is not in the trace", tid,
                        a->names[c->name].name);
            }
            if (!(c->flags & F_STREAM))
                continue;
            iv_busy[2 * ns] = c->start;
            iv_busy[2 * ns + 1] = c->end;
            ns++;
            bool leaf = true;
            for (uint32_t j = 0; j < t->n_kept && leaf; j++)
                leaf = !(j != k && (t->spans[j].flags & F_STREAM) &&
                         (t->spans[j].flags & F_PARENT) && !memcmp(t->spans[j].pid, c->sid, 8));
            if (leaf) {
                iv_lbusy[2 * nl] = c->start;
                iv_lbusy[2 * nl + 1] = c->end;
                iv_lcov[2 * nl] = c->enq < 0 ? 0 : (uint64_t)c->enq;
                iv_lcov[2 * nl + 1] = c->end;
                nl++;
            }
            int pk = (c->flags & F_PARENT) ? find_kept(t, c->pid) : -1;
            if (pk < 0 || !(t->spans[pk].flags & F_STREAM))
                qsum = (uint64_t)c->queue > (uint64_t)INT64_MAX - qsum
                           ? (uint64_t)INT64_MAX /* saturate: hostile queue times */
                           : qsum + (uint64_t)c->queue; /* the outermost only, as cbt.gpu_queue_ns */
            unsigned o = 0;
            while (o < n_ops && op_name[o] != c->name)
                o++;
            if (o == n_ops) {
                op_name[n_ops] = c->name;
                op_sum[n_ops++] = 0;
            }
            op_sum[o] += c->end - c->start;
        }
        uint64_t lo = t->r_start, hi = t->max_end > lo ? t->max_end : lo;
        uint64_t lat = hi - lo, root_dur = t->r_end - t->r_start;
        uint64_t busy_all = ns ? union_len(iv_busy, ns, 0, UINT64_MAX) : 0;
        uint64_t busy_in = nl ? union_len(iv_lbusy, nl, lo, hi) : 0;
        uint64_t cov = nl ? union_len(iv_lcov, nl, lo, hi) : 0;
        if (busy_in > cov)
            busy_in = cov;
        uint64_t host = lat - cov, wait = cov - busy_in;
        int64_t gq = t->r_gq >= 0 ? t->r_gq : ns ? (int64_t)qsum : RPT_ABSENT;
        int64_t gb = t->r_gb >= 0 ? t->r_gb : ns ? (int64_t)busy_all : RPT_ABSENT;
        rpt_sketch_add(&a->lat, lat);
        rpt_sketch_add(&a->root, root_dur);
        rpt_sketch_add(&a->host, host);
        if (gq >= 0)
            rpt_sketch_add(&a->gq, (uint64_t)gq);
        if (gb >= 0)
            rpt_sketch_add(&a->gb, (uint64_t)gb);
        if (t->r_gt >= 0)
            rpt_sketch_add(&a->gt, (uint64_t)t->r_gt);
        for (unsigned o = 0; o < n_ops; o++)
            rpt_sketch_add(&a->names[op_name[o]].busy, op_sum[o]);
        double h = t->r_hit;
        unsigned hb = isnan(h) ? 0 : h <= 0.0 ? 1 : h <= 0.25 ? 2 : h <= 0.5 ? 3 : h <= 0.75 ? 4 : 5;
        rpt_sketch_add(&a->hit[hb], lat);
        unsigned lb = lat ? 64u - (unsigned)__builtin_clzll(lat) : 0;
        if (lb >= RPT_LAT_BINS)
            lb = RPT_LAT_BINS - 1;
        S->lat_n[lb]++;
        S->lat_host[lb] += (double)host;
        S->lat_wait[lb] += (double)wait;
        S->lat_busy[lb] += (double)busy_in;
        tl_add(a, t->r_start, lat);
        keep_slowest(a, t, lat, gq, gb);
    }
    a->stored -= t->n_kept;
    t->n_kept = 0;
    if (t->cap > 8) {
        free(t->spans);
        t->spans = NULL;
        t->cap = 0;
    }
    t->next = a->free_head;
    a->free_head = i;
}

static uint32_t open_trace(rpt_agg *a, const rpt_span *s, uint16_t name)
{
    uint64_t h = tid_hash(s->trace_id);
    for (uint32_t i = a->heads[h & a->hmask]; i != NONE; i = a->tr[i].hnext)
        if (!memcmp(a->tr[i].tid, s->trace_id, 16)) {
            lru_unlink(a, i);
            lru_append(a, i);
            return i;
        }
    if (a->free_head == NONE)
        close_trace(a, a->lru_old, true);
    uint32_t i = a->free_head;
    trace *t = &a->tr[i];
    a->free_head = t->next;
    cspan *keep = t->spans;
    uint32_t cap = t->cap;
    memset(t, 0, sizeof *t);
    t->spans = keep;
    t->cap = cap;
    memcpy(t->tid, s->trace_id, 16);
    t->r_gq = t->r_gb = t->r_gt = RPT_ABSENT;
    t->r_hit = NAN;
    t->first_file = s->file;
    t->first_line = s->line;
    t->first_name = name;
    uint64_t fp = h | 1;
    t->split = a->closed_fp[(fp >> 7) & ((1u << CLOSED_FP_BITS) - 1)] == fp;
    t->hnext = a->heads[h & a->hmask];
    a->heads[h & a->hmask] = i;
    lru_append(a, i);
    a->n_open++;
    return i;
}

void rpt_agg_add(rpt_agg *a, const rpt_span *s)
{
    rpt_summary *S = &a->sum;
    uint16_t nm = name_id(a, s->name);
    uint32_t i = open_trace(a, s, nm);
    trace *t = &a->tr[i];
    if (find_kept(t, s->span_id) >= 0) {
        /* the same span again (a file given twice, a span exported twice): its
         * first copy stands, and only it is counted */
        S->duplicate_spans++;
        return;
    }
    if (S->spans == 0 || s->start_ns < S->first_ns)
        S->first_ns = s->start_ns;
    if (s->end_ns > S->last_ns)
        S->last_ns = s->end_ns;
    S->spans++;
    if (s->file < RPT_FILES_MAX)
        S->files[s->file].spans++;
    name_ent *ne = &a->names[nm];
    ne->count++;
    rpt_sketch_add(&ne->dur, s->end_ns - s->start_ns);
    bool stream = s->queue_ns >= 0;
    if (stream) {
        rpt_sketch_add(&ne->queue, (uint64_t)s->queue_ns);
        S->any_stream_timed = true;
        if (s->stream >= 0) {
            stream_ent *se = stream_of(a, s);
            se->count++;
            se->run += (double)(s->end_ns - s->start_ns);
            rpt_sketch_add(&se->queue, (uint64_t)s->queue_ns);
        }
    }
    if (s->error)
        ne->errors++;
    if (s->incomplete || s->evicted[0]) {
        ne->incomplete++;
        S->spans_incomplete++;
        const char *why = s->evicted[0] ? s->evicted : "shutdown";
        unsigned k = 0;
        while (k < S->n_evict && strcmp(S->evict_reason[k], why))
            k++;
        if (k == S->n_evict && k < 8)
            snprintf(S->evict_reason[S->n_evict++], sizeof S->evict_reason[0], "%s",
                     k == 7 ? "other" : why);
        S->evict_count[k < 8 ? k : 7]++;
    }
    if (s->dropped_attrs) {
        S->spans_dropped_attrs++;
        S->dropped_attrs += s->dropped_attrs;
    }
    if (s->dropped_events) {
        S->spans_dropped_events++;
        S->dropped_events += s->dropped_events;
    }
    if (s->truncated_attrs)
        S->spans_truncated++;

    t->n_seen++;
    if (s->end_ns > t->max_end)
        t->max_end = s->end_ns;
    if (!s->has_parent) {
        if (!t->has_root || s->start_ns < t->r_start) {
            if (t->has_root)
                t->extra_roots++;
            t->has_root = true;
            t->r_start = s->start_ns;
            t->r_end = s->end_ns;
            t->r_gq = s->gpu_queue_ns;
            t->r_gb = s->gpu_busy_ns;
            t->r_gt = s->gpu_tail_ns;
            t->r_hit = s->hit_rate;
            t->r_file = s->file;
            memcpy(t->r_sid, s->span_id, 8);
            snprintf(t->r_session, sizeof t->r_session, "%s", s->session);
        } else {
            t->extra_roots++;
        }
    }
    if (t->n_kept >= RPT_TRACE_SPANS_MAX || a->stored >= a->o.spans_stored) {
        t->over_cap = true;
        return;
    }
    if (t->n_kept == t->cap) {
        uint32_t nc = t->cap ? 2 * t->cap : 8;
        if (nc > RPT_TRACE_SPANS_MAX)
            nc = RPT_TRACE_SPANS_MAX;
        cspan *ns = realloc(t->spans, nc * sizeof *ns);
        if (!ns) {
            t->over_cap = true;
            return;
        }
        t->spans = ns;
        t->cap = nc;
    }
    cspan *c = &t->spans[t->n_kept++];
    a->stored++;
    c->start = s->start_ns;
    c->end = s->end_ns;
    c->queue = s->queue_ns;
    /* the readers refuse times past INT64_MAX; clamped here too, so the
     * difference (start >= 0, queue >= 0) cannot overflow */
    int64_t st = s->start_ns > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)s->start_ns;
    c->enq = !stream ? RPT_ABSENT : s->enqueue_ns >= 0 ? s->enqueue_ns : st - s->queue_ns;
    memcpy(c->sid, s->span_id, 8);
    memcpy(c->pid, s->parent_id, 8);
    c->name = nm;
    c->stream = s->stream >= 0 && s->stream <= INT32_MAX ? (int32_t)s->stream : -1;
    c->flags = (uint8_t)((s->has_parent ? F_PARENT : 0) | (s->incomplete ? F_INCOMPLETE : 0) |
                         (stream ? F_STREAM : 0));
}

/* ---- the summary ------------------------------------------------------------------- */

static rpt_q quant(const rpt_sketch *s)
{
    rpt_q q = {0};
    q.n = s->n;
    if (!s->n)
        return q;
    static const double qs[3] = {0.5, 0.9, 0.99};
    double v[3];
    rpt_sketch_quantiles(s, qs, 3, v);
    q.p50 = v[0];
    q.p90 = v[1];
    q.p99 = v[2];
    q.max = (double)s->max;
    q.sum = s->sum;
    q.mean = s->sum / (double)s->n;
    return q;
}

static int cmp_names(const void *x, const void *y)
{
    const rpt_name_sum *p = x, *q = y;
    if (p->count != q->count)
        return (p->count < q->count) - (p->count > q->count);
    return strcmp(p->name, q->name);
}

static int cmp_streams(const void *x, const void *y)
{
    const rpt_stream_sum *p = x, *q = y;
    if (p->queue.sum != q->queue.sum)
        return (p->queue.sum < q->queue.sum) - (p->queue.sum > q->queue.sum);
    return strcmp(p->label, q->label);
}

static int cmp_slow(const void *x, const void *y)
{
    const rpt_wf *p = x, *q = y;
    return (p->latency < q->latency) - (p->latency > q->latency);
}

const rpt_summary *rpt_agg_finish(rpt_agg *a)
{
    rpt_summary *S = &a->sum;
    if (a->finished)
        return S;
    a->finished = true;
    while (a->lru_old != NONE)
        close_trace(a, a->lru_old, false);
    /* names, by count */
    unsigned nn = a->n_names + (a->names[RPT_NAMES_MAX].count ? 1 : 0);
    S->names = calloc(nn ? nn : 1, sizeof *S->names);
    if (!S->names)
        nn = 0;
    double lo = 0, hi = 0;
    for (unsigned k = 0, o = 0; k <= RPT_NAMES_MAX && o < nn; k++) {
        name_ent *e = &a->names[k];
        if (!e->count)
            continue;
        if (lo == 0 || (double)(e->dur.min ? e->dur.min : 1) < lo)
            lo = (double)(e->dur.min ? e->dur.min : 1);
        if ((double)e->dur.max > hi)
            hi = (double)e->dur.max;
    }
    if (hi <= lo)
        hi = lo * 2 + 1;
    S->hist_lo = lo;
    S->hist_hi = hi;
    unsigned o = 0;
    for (unsigned k = 0; k <= RPT_NAMES_MAX && o < nn; k++) {
        name_ent *e = &a->names[k];
        if (!e->count)
            continue;
        rpt_name_sum *r = &S->names[o++];
        snprintf(r->name, sizeof r->name, "%s", e->name);
        r->count = e->count;
        r->incomplete = e->incomplete;
        r->errors = e->errors;
        r->dur = quant(&e->dur);
        r->queue = quant(&e->queue);
        r->busy_req = quant(&e->busy);
        S->sketch_lost += e->dur.lost + e->queue.lost + e->busy.lost;
        double step = log(hi / lo) / RPT_HIST_BINS;
        for (unsigned b = 0; b < RPT_HIST_BINS; b++) {
            double l = b == 0 ? 0.0 : lo * exp(step * b);
            double h = b == RPT_HIST_BINS - 1 ? INFINITY : lo * exp(step * (b + 1));
            uint64_t c = rpt_sketch_count_between(&e->dur, l, h);
            r->hist[b] = c > UINT32_MAX ? UINT32_MAX : (uint32_t)c;
        }
    }
    S->n_names = o;
    qsort(S->names, S->n_names, sizeof *S->names, cmp_names);
    double best = 0;
    for (unsigned k = 0; k < S->n_names; k++)
        if (S->names[k].queue.n && S->names[k].queue.sum > best) {
            best = S->names[k].queue.sum;
            S->slowest_queue = (int)k;
        }
    /* streams, by queue time */
    unsigned nst = a->n_streams + (a->streams[RPT_STREAMS_MAX].count ? 1 : 0);
    S->streams = calloc(nst ? nst : 1, sizeof *S->streams);
    if (S->streams) {
        for (unsigned k = 0; k <= RPT_STREAMS_MAX; k++) {
            stream_ent *e = &a->streams[k];
            if (!e->count)
                continue;
            rpt_stream_sum *r = &S->streams[S->n_streams++];
            snprintf(r->label, sizeof r->label, "%s", e->label);
            snprintf(r->device, sizeof r->device, "%s", e->device);
            r->stream = e->stream;
            r->count = e->count;
            r->run = e->run;
            r->queue = quant(&e->queue);
            S->sketch_lost += e->queue.lost;
        }
        qsort(S->streams, S->n_streams, sizeof *S->streams, cmp_streams);
    }
    /* requests */
    S->latency = quant(&a->lat);
    S->root_dur = quant(&a->root);
    S->host = quant(&a->host);
    S->gpu_queue = quant(&a->gq);
    S->gpu_busy = quant(&a->gb);
    S->gpu_tail = quant(&a->gt);
    for (unsigned k = 0; k < RPT_HITRATE_BUCKETS; k++)
        S->hit[k] = quant(&a->hit[k]);
    for (unsigned k = 0; k < RPT_LAT_BINS; k++)
        if (S->lat_n[k]) {
            S->lat_host[k] /= (double)S->lat_n[k];
            S->lat_wait[k] /= (double)S->lat_n[k];
            S->lat_busy[k] /= (double)S->lat_n[k];
        }
    /* the timeline */
    if (a->tl_any) {
        S->tl_t0 = a->tl_t0 + a->tl_lo * a->tl_w;
        S->tl_width = a->tl_w;
        S->tl_bins = a->tl_hi - a->tl_lo + 1;
        for (unsigned k = 0; k < S->tl_bins; k++) {
            unsigned i = a->tl_lo + k;
            S->tl_count[k] = a->tl_n[i];
            uint64_t rank = (uint64_t)ceil(0.99 * (double)a->tl_n[i]), seen = 0;
            for (unsigned b = 0; b < TL_HB && a->tl_n[i]; b++) {
                seen += a->tl_hist[i][b];
                if (seen >= rank) {
                    S->tl_p99[k] = b == 0 ? 1.0 : exp2((b + 0.5) / 8.0);
                    break;
                }
            }
        }
    }
    /* the slowest, slowest first */
    S->n_slow = a->n_slow;
    S->slow = a->slow;
    qsort(S->slow, S->n_slow, sizeof *S->slow, cmp_slow);
    /* completeness */
    S->sketch_lost += a->lat.lost + a->host.lost + a->gq.lost + a->gb.lost + a->gt.lost;
    bool loss_note = false;
    for (unsigned k = 0; k < S->n_notes; k++)
        loss_note = loss_note || S->note_is_loss[k];
    S->whole = S->spans && !S->bad_lines && !S->bad_spans && !S->duplicate_spans && !S->incomplete_roots && !S->orphans && !S->split_traces &&
               !S->spans_incomplete && !S->spans_dropped_attrs && !S->spans_dropped_events &&
               !S->spans_other_name && !S->spans_other_stream && !S->traces_over_cap && !S->sketch_lost && !loss_note &&
               !S->extra_roots;
    return S;
}
