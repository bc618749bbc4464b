/* exporter/trace_file.c — owns the Chrome trace-event JSON file (see
 * trace_file.h), the default output when no backend is configured.
 *
 * Lanes (pid / tid), a timeline per device and stream:
 *   1 "cbt requests"  two lanes per trace: the root span ("<session>") and
 *                     its host-side children ("<session> ops"), where each
 *                     host enqueue onto a stream is a zero-length slice
 *                     "enqueue <span>" at its cbt.enqueue_ns. Spans do not
 *                     carry the host thread that made them, so host work
 *                     is laid out by request, not by thread.
 *   4 "CPU streams"   a CPU stream's spans (those with cbt.stream and
 *                     cbt.device "cpu"): its operations on "stream <n>",
 *                     its kernels on "stream <n> kernels"
 *   100 + d "GPU d"   the same for the CUDA streams of device d
 *   2 "GPU kernels"   kernel spans no stream timed (CUPTI's gpu.kernel, a
 *                     launch without a stream): one lane per kernel
 *                     operation (cb.scatter, cb.gather, cb.l2_load, ...)
 *   3 "GPU SMs"       per-CTA records, one lane per SM
 * Kernels have lanes of their own beside their stream's operations: their
 * times come from %globaltimer, the operations' from stream marks, so a
 * kernel may stick out of its operation by the clock fit's error, which a
 * viewer would draw as a broken nesting on one lane.
 * Flows: each stream-timed span's host enqueue is joined to its slice by a
 * flow ("ph":"s" at cbt.enqueue_ns on the enqueue slice's lane, "ph":"f"
 * with "bp":"e" at the span's start on its stream lane; name "enqueue", cat
 * "queue", id the span id in hex), written right after that slice, so the
 * arrow spans the queue time. Each flow start follows the slice it binds to
 * in the file: Perfetto orders events of one time by duration, then by
 * their place in the file.
 * A span's events (cbt_span_add_event) follow its slice as instant events
 * ("ph":"i", thread scope) on the same lane at their own times, named by the
 * event's name; their args are the event's attributes plus "span_id" and
 * "span" (the span's name), so a marker leads back to its slice.
 * Args are written as the span file writes attributes (cbt_jbuf_attr): an
 * array attribute is a JSON array of all its elements, so a 128 k-token
 * prompt makes a slice of about 1 MB, written from a heap buffer of its
 * size (emit_with, at most CBT_SPAN_JSON_BIG_MAX); a longer one is lost,
 * counted. The file stays valid JSON either way.
 * Times are microseconds with nanosecond decimals. The file stays valid JSON
 * after every flush: the closing "]}" is written and then overwritten by the
 * next event (the file is seekable; a pipe would not be, and is refused).
 * Harvester thread only; bounded: the trace -> lane table has TF_LANES
 * entries, later traces share lane "other".
 *
 * Write errors: stdio buffers the file, so which of the spans since the last
 * good flush reached it is unknown once a write fails. The first failure
 * (an emit, or ferror after one, or the flush) ends the file (`broken`):
 * the spans since the last good flush (`pending`) and every later span are
 * counted in `lost` (cbt_sink.spans_lost, atomic: read from any thread),
 * and the call returns CBT_ERR_IO, a sink error each.
 */
#include "cbt/trace_file.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cbt/ring.h"
#include "internal/abi.h"
#include "internal/json.h"

#define TF_LANES 8192
#define TF_TAIL "\n]}\n"

typedef struct tf_lane {
    uint8_t trace_id[16];
    uint32_t lane;
    uint8_t used;
} tf_lane;

/* Stream lanes named so far (a bounded table: past it a stream's lanes are
 * still used, unnamed). */
#define TF_STREAMS 4096
#define TF_DEVICES 256 /* devices whose process is named */
#define TF_PID_CPU_STREAMS 4
#define TF_PID_GPU0 100
/* stream lanes' tids, apart from the request lanes' and the SMs' */
#define TF_STREAM_TID0 1000000ll

typedef struct tf_stream {
    uint32_t ordinal;
    int32_t pid;
    uint8_t named; /* bit 0: its operations' lane, bit 1: its kernels' */
} tf_stream;

typedef struct trace_file {
    FILE *f;
    int first;      /* no event written yet */
    int tail;       /* the closing tail is on disk after the last event */
    int broken;     /* a write failed: nothing more is written */
    uint64_t pending;       /* spans handed to stdio since the last good flush */
    _Atomic uint64_t lost;  /* spans that will never be in the file */
    uint32_t next_lane;
    uint8_t op_named[CBT_KOP_COUNT_ + 1];
    uint8_t sm_named[1024];
    uint8_t cpu_named, gpu_named[TF_DEVICES];
    tf_lane lanes[TF_LANES];
    tf_stream streams[TF_STREAMS];
    char line[CBT_SPAN_JSON_MAX + 1024]; /* any span's slice fits (internal/json.h) */
} trace_file;

static const char *op_lane_name(uint8_t op)
{
    switch (op) {
    case CBT_KOP_SCATTER: return "cb.scatter";
    case CBT_KOP_GATHER: return "cb.gather";
    case CBT_KOP_REROPE: return "cb.rerope";
    case CBT_KOP_L2_LOAD: return "cb.l2_load";
    default: return "kernels";
    }
}

static int is_root(const cbt_span *s)
{
    static const uint8_t zero[8];
    return memcmp(s->parent_span_id, zero, 8) == 0;
}

/* Write one event (the text in buf, without separators). */
static cbt_status emit(trace_file *t, const char *buf, size_t n)
{
    if (t->tail && fseek(t->f, -(long)strlen(TF_TAIL), SEEK_END) != 0)
        return CBT_ERR_IO;
    t->tail = 0;
    if (!t->first && fputs(",\n", t->f) == EOF)
        return CBT_ERR_IO;
    t->first = 0;
    return fwrite(buf, 1, n, t->f) == n ? CBT_OK : CBT_ERR_IO;
}

static cbt_status emit_jbuf(trace_file *t, cbt_jbuf *b)
{
    if (b->need >= b->cap)
        return CBT_ERR_FULL; /* cannot happen with bounded spans; counted by the tracer */
    return emit(t, b->p, b->need);
}

/* A metadata event (a process's or a lane's name). Every event of the file
 * has ph, ts, pid and tid: a process's name says tid 0, and both say ts 0
 * (viewers ignore both there). */
static void meta_name(trace_file *t, const char *what, int pid, int64_t tid, const char *name,
                      size_t len)
{
    cbt_jbuf b = {t->line, sizeof t->line, 0};
    cbt_jbuf_fmt(&b, "{\"name\":\"%s\",\"ph\":\"M\",\"ts\":0,\"pid\":%d,\"tid\":%lld", what,
                 pid, (long long)(tid >= 0 ? tid : 0));
    cbt_jbuf_cstr(&b, ",\"args\":{\"name\":");
    cbt_jbuf_str(&b, name, len);
    cbt_jbuf_cstr(&b, "}}");
    emit_jbuf(t, &b);
}

/* The lane of a trace: assigned on first sight, named after the session. */
static uint32_t trace_lane(trace_file *t, const cbt_span *s)
{
    uint64_t h;
    memcpy(&h, s->ctx.trace_id, 8);
    for (uint32_t probe = 0; probe < 16; probe++) {
        tf_lane *l = &t->lanes[(h + probe) % TF_LANES];
        if (l->used && memcmp(l->trace_id, s->ctx.trace_id, 16) == 0)
            return l->lane;
        if (!l->used) {
            l->used = 1;
            memcpy(l->trace_id, s->ctx.trace_id, 16);
            l->lane = ++t->next_lane;
            const cbt_attr *a = cbt_span_attr(s, CBT_N_SESSION_ID);
            char name[96];
            int n = a ? snprintf(name, sizeof name, "%.*s", (int)a->str_len, cbt_attr_str(s, a))
                      : snprintf(name, sizeof name, "trace %u", l->lane);
            if (n < 0)
                n = 0;
            meta_name(t, "thread_name", 1, 2 * l->lane, name, strlen(name));
            char ops[112];
            snprintf(ops, sizeof ops, "%s ops", name);
            meta_name(t, "thread_name", 1, 2 * l->lane + 1, ops, strlen(ops));
            return l->lane;
        }
    }
    return 0; /* lane "other" */
}

/* ,"key":value for each attribute of `owner` (0: the span, k: event k - 1). */
static void attr_members(cbt_jbuf *b, const cbt_span *s, uint8_t owner)
{
    uint32_t na = s->n_attrs < CBT_SPAN_ATTR_MAX ? s->n_attrs : CBT_SPAN_ATTR_MAX;
    for (uint32_t i = 0; i < na; i++) {
        const cbt_attr *a = &s->attrs[i];
        if (a->owner != owner)
            continue;
        cbt_jbuf_raw(b, ",", 1);
        cbt_jbuf_attr(b, s, a);
    }
}

static void args_of(cbt_jbuf *b, const cbt_span *s)
{
    cbt_jbuf_cstr(b, ",\"args\":{\"trace_id\":");
    cbt_jbuf_hex(b, s->ctx.trace_id, 16);
    cbt_jbuf_cstr(b, ",\"span_id\":");
    cbt_jbuf_hex(b, s->ctx.span_id, 8);
    if (!is_root(s)) {
        cbt_jbuf_cstr(b, ",\"parent_span_id\":");
        cbt_jbuf_hex(b, s->parent_span_id, 8);
    }
    attr_members(b, s, 0);
    if (s->flags & CBT_SPANF_INCOMPLETE)
        cbt_jbuf_cstr(b, ",\"cbt.incomplete\":true");
    cbt_jbuf_cstr(b, "}");
}

/* A GPU kernel span: named by its span name; lane by the name's op. */
static int kernel_op_of(const cbt_span *s)
{
    if (s->name == CBT_N_CB_SCATTER)
        return CBT_KOP_SCATTER;
    if (s->name == CBT_N_CB_GATHER)
        return CBT_KOP_GATHER;
    if (s->name == CBT_N_CB_REROPE)
        return CBT_KOP_REROPE;
    if (s->name == CBT_N_CB_L2_LOAD)
        return CBT_KOP_L2_LOAD;
    if (s->name == CBT_N_GPU_KERNEL || cbt_span_attr(s, CBT_N_LAUNCH_ID))
        return CBT_KOP_USER;
    return -1;
}

/* A write failed: the file ends here, and the spans it may have held with it. */
static cbt_status tf_break(trace_file *t)
{
    t->broken = 1;
    atomic_fetch_add_explicit(&t->lost, t->pending, memory_order_relaxed);
    t->pending = 0;
    return CBT_ERR_IO;
}

static cbt_status tf_span(trace_file *t, const cbt_span *s);

static cbt_status tf_on_span(void *ctx, const cbt_span *s)
{
    trace_file *t = ctx;
    if (t->broken) {
        atomic_fetch_add_explicit(&t->lost, 1, memory_order_relaxed);
        return CBT_ERR_IO;
    }
    t->pending++;
    cbt_status st = tf_span(t, s);
    if (st == CBT_ERR_FULL) { /* not written whole: over CBT_SPAN_JSON_BIG_MAX, or no
                                 memory for its arrays (a span without arrays cannot) */
        t->pending--;
        atomic_fetch_add_explicit(&t->lost, 1, memory_order_relaxed);
        return st;
    }
    return st != CBT_OK || ferror(t->f) ? tf_break(t) : CBT_OK;
}

/* The stream that timed `s` (cbt.stream, cbt.device): its process (pid)
 * and its lanes' base tid, named on first sight; 0 when none timed it. */
static int stream_lane(trace_file *t, const cbt_span *s, int *pid, int64_t *tid0)
{
    const cbt_attr *st = cbt_span_attr(s, CBT_N_CBT_STREAM);
    const cbt_attr *dv = cbt_span_attr(s, CBT_N_CBT_DEVICE);
    if (!st || st->type != CBT_META_I64 || st->v.i64 <= 0 || st->v.i64 > UINT32_MAX || !dv ||
        dv->type != CBT_META_STR)
        return 0;
    const char *d = cbt_attr_str(s, dv);
    int dev = -1;
    if (dv->str_len > 5 && memcmp(d, "cuda:", 5) == 0) {
        dev = 0;
        for (uint32_t i = 5; i < dv->str_len && dev < 100000; i++) {
            if (d[i] < '0' || d[i] > '9')
                return 0;
            dev = dev * 10 + (d[i] - '0');
        }
    } else if (!(dv->str_len == 3 && memcmp(d, "cpu", 3) == 0)) {
        return 0; /* a device this file does not know: the request's lanes */
    }
    *pid = dev < 0 ? TF_PID_CPU_STREAMS : TF_PID_GPU0 + dev;
    *tid0 = TF_STREAM_TID0 + 2 * (int64_t)st->v.i64;
    if (dev < 0 && !t->cpu_named) {
        t->cpu_named = 1;
        meta_name(t, "process_name", *pid, -1, "CPU streams", 11);
    } else if (dev >= 0 && dev < TF_DEVICES && !t->gpu_named[dev]) {
        t->gpu_named[dev] = 1;
        char n[32];
        int len = snprintf(n, sizeof n, "GPU %d", dev);
        meta_name(t, "process_name", *pid, -1, n, (size_t)len);
    }
    return 1;
}

/* Name stream lane `tid` of `pid` (bit: 1 operations, 2 kernels) once. */
static void name_stream_lane(trace_file *t, int pid, int64_t tid0, uint32_t ordinal, uint8_t bit)
{
    uint32_t h = ordinal * 2654435761u ^ (uint32_t)pid;
    for (uint32_t probe = 0; probe < 16; probe++) {
        tf_stream *e = &t->streams[(h + probe) % TF_STREAMS];
        if (e->named && (e->ordinal != ordinal || e->pid != pid))
            continue;
        if (e->named & bit)
            return;
        e->ordinal = ordinal;
        e->pid = pid;
        e->named |= bit;
        char n[48];
        int len = snprintf(n, sizeof n, bit == 1 ? "stream %u" : "stream %u kernels", ordinal);
        meta_name(t, "thread_name", pid, tid0 + (bit == 1 ? 0 : 1), n, (size_t)len);
        return;
    }
}

static void jbuf_ts(cbt_jbuf *b, const char *key, uint64_t ns)
{
    cbt_jbuf_fmt(b, ",\"%s\":%llu.%03u", key, (unsigned long long)(ns / 1000), (unsigned)(ns % 1000));
}

/* The host side of a stream-timed span: the enqueue slice on its request's
 * ops lane and the flow's start on it, just after it in the file. */
static cbt_status emit_enqueue(trace_file *t, const cbt_span *s, uint64_t enq)
{
    uint32_t lane = trace_lane(t, s);
    int64_t tid = 2 * (int64_t)lane + 1;
    cbt_jbuf b = {t->line, sizeof t->line, 0};
    cbt_jbuf_cstr(&b, "{\"name\":");
    char n[CBT_NAME_LEN_MAX + 16];
    int len = snprintf(n, sizeof n, "enqueue %s", cbt_name_str(s->name));
    cbt_jbuf_str(&b, n, len > 0 ? (size_t)len : 0);
    cbt_jbuf_cstr(&b, ",\"cat\":\"enqueue\",\"ph\":\"X\"");
    jbuf_ts(&b, "ts", enq);
    cbt_jbuf_fmt(&b, ",\"dur\":0,\"pid\":1,\"tid\":%lld,\"args\":{\"span_id\":", (long long)tid);
    cbt_jbuf_hex(&b, s->ctx.span_id, 8);
    cbt_jbuf_cstr(&b, "}}");
    cbt_status st = emit_jbuf(t, &b);
    if (st != CBT_OK)
        return st;
    b.need = 0;
    cbt_jbuf_cstr(&b, "{\"name\":\"enqueue\",\"cat\":\"queue\",\"ph\":\"s\",\"id\":");
    cbt_jbuf_hex(&b, s->ctx.span_id, 8);
    jbuf_ts(&b, "ts", enq);
    cbt_jbuf_fmt(&b, ",\"pid\":1,\"tid\":%lld}", (long long)tid);
    return emit_jbuf(t, &b);
}

/* What a span's slice and its events' markers are written from. */
typedef struct slice_args {
    const cbt_span *s;
    const char *cat;
    int pid;
    int64_t tid;
    uint32_t ev; /* a marker: the event's index */
} slice_args;

static void w_slice(cbt_jbuf *b, const void *arg)
{
    const slice_args *a = arg;
    const cbt_span *s = a->s;
    cbt_jbuf_cstr(b, "{\"name\":");
    cbt_jbuf_str(b, cbt_name_str(s->name), cbt_name_len(s->name));
    cbt_jbuf_fmt(b, ",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%llu.%03u,\"dur\":%llu.%03u", a->cat,
                 (unsigned long long)(s->start_ns / 1000), (unsigned)(s->start_ns % 1000),
                 (unsigned long long)((s->end_ns - s->start_ns) / 1000),
                 (unsigned)((s->end_ns - s->start_ns) % 1000));
    cbt_jbuf_fmt(b, ",\"pid\":%d,\"tid\":%lld", a->pid, (long long)a->tid);
    args_of(b, s);
    cbt_jbuf_cstr(b, "}");
}

static void w_marker(cbt_jbuf *b, const void *arg)
{
    const slice_args *a = arg;
    const cbt_span *s = a->s;
    const cbt_span_event *ev = &s->events[a->ev];
    cbt_jbuf_cstr(b, "{\"name\":");
    cbt_jbuf_str(b, cbt_name_str(ev->name), cbt_name_len(ev->name));
    cbt_jbuf_fmt(b, ",\"cat\":\"%s\",\"ph\":\"i\",\"s\":\"t\",\"ts\":%llu.%03u", a->cat,
                 (unsigned long long)(ev->time_ns / 1000), (unsigned)(ev->time_ns % 1000));
    cbt_jbuf_fmt(b, ",\"pid\":%d,\"tid\":%lld,\"args\":{\"span_id\":", a->pid,
                 (long long)a->tid);
    cbt_jbuf_hex(b, s->ctx.span_id, 8);
    cbt_jbuf_cstr(b, ",\"span\":");
    cbt_jbuf_str(b, cbt_name_str(s->name), cbt_name_len(s->name));
    attr_members(b, s, (uint8_t)(a->ev + 1));
    cbt_jbuf_cstr(b, "}}");
}

/* Write one event `w` formats: from t->line, or, when the span's arrays
 * make it longer (nothing else can), from a heap buffer of its size taken
 * for it alone (at most CBT_SPAN_JSON_BIG_MAX) and freed at once.
 * CBT_ERR_FULL when it is longer still or there is no memory for it. */
static cbt_status emit_with(trace_file *t, void (*w)(cbt_jbuf *, const void *), const void *arg)
{
    cbt_jbuf b = {t->line, sizeof t->line, 0};
    w(&b, arg);
    if (b.need < b.cap)
        return emit(t, b.p, b.need);
    if (b.need >= CBT_SPAN_JSON_BIG_MAX)
        return CBT_ERR_FULL;
    char *big = malloc(b.need + 1);
    if (!big)
        return CBT_ERR_FULL;
    cbt_jbuf g = {big, b.need + 1, 0};
    w(&g, arg);
    cbt_status st = g.need < g.cap ? emit(t, big, g.need) : CBT_ERR_FULL;
    free(big);
    return st;
}

/* The span's slice and its events' markers; for a stream-timed span its
 * host enqueue and the flow between them. */
static cbt_status tf_span(trace_file *t, const cbt_span *s)
{
    int op = kernel_op_of(s);
    int pid;
    int64_t tid, tid0;
    const char *cat;
    const cbt_attr *enq = cbt_span_attr(s, CBT_N_ENQUEUE_NS);
    int on_stream = stream_lane(t, s, &pid, &tid0);
    if (on_stream) {
        uint32_t ord = (uint32_t)cbt_span_attr(s, CBT_N_CBT_STREAM)->v.i64;
        uint8_t bit = op >= 0 ? 2 : 1;
        name_stream_lane(t, pid, tid0, ord, bit);
        tid = tid0 + (op >= 0);
        const char *n = cbt_name_str(s->name);
        cat = op >= 0 ? "kernel" : strncmp(n, "cb.", 3) == 0 ? "cb" : "mp";
    } else if (op >= 0) {
        pid = 2;
        tid = op;
        cat = "kernel";
        if (!t->op_named[op]) {
            t->op_named[op] = 1;
            const char *n = op_lane_name((uint8_t)op);
            meta_name(t, "thread_name", 2, op, n, strlen(n));
        }
    } else {
        uint32_t lane = trace_lane(t, s);
        pid = 1;
        tid = 2 * (int64_t)lane + (is_root(s) ? 0 : 1);
        const char *n = cbt_name_str(s->name);
        cat = strncmp(n, "cb.", 3) == 0 ? "cb" : "mp";
    }
    int flow = on_stream && enq && enq->type == CBT_META_I64 && enq->v.i64 > 0;
    cbt_status st = CBT_OK;
    if (flow && (st = emit_enqueue(t, s, (uint64_t)enq->v.i64)) != CBT_OK)
        return st;
    slice_args sa = {s, cat, pid, tid, 0};
    st = emit_with(t, w_slice, &sa);
    cbt_jbuf b = {t->line, sizeof t->line, 0};
    if (flow && st == CBT_OK) {
        /* the flow's end, bound to the slice just written (same start) */
        b.need = 0;
        cbt_jbuf_cstr(&b, "{\"name\":\"enqueue\",\"cat\":\"queue\",\"ph\":\"f\",\"bp\":\"e\",\"id\":");
        cbt_jbuf_hex(&b, s->ctx.span_id, 8);
        jbuf_ts(&b, "ts", s->start_ns);
        cbt_jbuf_fmt(&b, ",\"pid\":%d,\"tid\":%lld}", pid, (long long)tid);
        st = emit_jbuf(t, &b);
    }
    uint32_t ne = s->n_events < CBT_SPAN_EVENTS_MAX ? s->n_events : CBT_SPAN_EVENTS_MAX;
    for (uint32_t e = 0; e < ne && st == CBT_OK; e++) {
        sa.ev = e;
        st = emit_with(t, w_marker, &sa);
    }
    return st;
}

static cbt_status tf_on_cta(void *ctx, const cbt_cta_record *r)
{
    trace_file *t = ctx;
    if (t->broken)
        return CBT_ERR_IO;
    if (r->sm < sizeof t->sm_named && !t->sm_named[r->sm]) {
        t->sm_named[r->sm] = 1;
        char n[32];
        snprintf(n, sizeof n, "SM %u", (unsigned)r->sm);
        meta_name(t, "thread_name", 3, r->sm, n, strlen(n));
    }
    uint64_t dur = r->end_ns > r->start_ns ? r->end_ns - r->start_ns : 0;
    cbt_jbuf b = {t->line, sizeof t->line, 0};
    cbt_jbuf_fmt(&b,
                 "{\"name\":\"%s cta %u\",\"cat\":\"cta\",\"ph\":\"X\",\"ts\":%llu.%03u,"
                 "\"dur\":%llu.%03u,\"pid\":3,\"tid\":%u,\"args\":{\"launch_id\":%u,\"cta\":%u,"
                 "\"tokens\":%u,\"user_value\":%llu}}",
                 op_lane_name(r->op), r->cta, (unsigned long long)(r->start_ns / 1000),
                 (unsigned)(r->start_ns % 1000), (unsigned long long)(dur / 1000),
                 (unsigned)(dur % 1000), (unsigned)r->sm, r->launch_id, r->cta, r->tokens,
                 (unsigned long long)r->user);
    cbt_status st = emit_jbuf(t, &b);
    return st == CBT_ERR_FULL ? st : st != CBT_OK || ferror(t->f) ? tf_break(t) : CBT_OK;
}

static cbt_status tf_flush(void *ctx)
{
    trace_file *t = ctx;
    if (t->broken)
        return CBT_OK; /* nothing written since: its failure was counted */
    if (!t->tail) {
        if (fputs(TF_TAIL, t->f) == EOF)
            return tf_break(t);
        t->tail = 1;
    }
    if (fflush(t->f) != 0)
        return tf_break(t);
    t->pending = 0;
    return CBT_OK;
}

static uint64_t tf_spans_lost(void *ctx)
{
    trace_file *t = ctx;
    return atomic_load_explicit(&t->lost, memory_order_relaxed);
}

static void tf_destroy(void *ctx)
{
    trace_file *t = ctx;
    tf_flush(t);
    fclose(t->f);
    free(t);
}

/* cbt/trace_file.h's inline cbt_trace_file_sink_create() set sink_out's
 * version and size: at most that many bytes are written (internal/abi.h). */
cbt_status cbt_trace_file_sink_create_into(const char *path, cbt_sink *sink_out)
{
    if (!path || !*path || !sink_out)
        return CBT_ERR_INVAL;
    cbt_status abi = cbt_abi_out_check_(sink_out);
    if (abi)
        return abi;
    trace_file *t = calloc(1, sizeof *t);
    if (!t)
        return CBT_ERR_NOMEM;
    t->f = fopen(path, "w");
    struct stat st;
    if (!t->f || fstat(fileno(t->f), &st) != 0 || !S_ISREG(st.st_mode)) {
        /* the tail rewrite needs a seekable regular file */
        if (t->f)
            fclose(t->f);
        free(t);
        return CBT_ERR_IO;
    }
    t->first = 1;
    atomic_init(&t->lost, 0);
    fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n", t->f);
    meta_name(t, "process_name", 1, -1, "cbt requests", 12);
    meta_name(t, "process_name", 2, -1, "GPU kernels", 11);
    meta_name(t, "process_name", 3, -1, "GPU SMs", 7);
    cbt_sink k;
    memset(&k, 0, sizeof k);
    k.name = "trace-file";
    k.ctx = t;
    k.on_span = tf_on_span;
    k.on_cta = tf_on_cta;
    k.flush = tf_flush;
    k.destroy = tf_destroy;
    k.spans_lost = tf_spans_lost;
    cbt_abi_out_(sink_out, &k, sizeof k, CBT_SINK_VERSION);
    return CBT_OK;
}
