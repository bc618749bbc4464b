/* cli/demo_cb.c — owns the three roles of a CacheBlend request (demo_cb.h):
 * what each process publishes, and the line protocol between them.
 */
#include "demo_cb.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cbt.h"
#include "cbt/pspan.h"
#include "cbt/stream.h"

#define LINE_MAX_ 256

typedef struct conn {
    int fd;
    size_t len;
    char buf[4096];
} conn;

typedef struct role {
    const cbt_cb_role_opts *o;
    char *err;
    size_t errcap;
    uint32_t work_us;
    int peer_timeout_ms;
    cbt_stream *stream;
} role;

static int fail(role *r, const char *fmt, ...)
{
    if (r->err && r->errcap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->err, r->errcap, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* a cbt call: a full queue is a counted drop, not a failure of the role */
#define TRY(r, expr, what)                                                    \
    do {                                                                      \
        cbt_status st_ = (expr);                                              \
        if (st_ != CBT_OK && st_ != CBT_ERR_FULL)                             \
            return fail((r), "%s: %s", (what), cbt_strerror(st_));            \
    } while (0)

static void sleep_us(uint32_t us)
{
    struct timespec ts = {(time_t)(us / 1000000u), (long)(us % 1000000u) * 1000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void stream_sleep(void *arg) { sleep_us((uint32_t)(uintptr_t)arg); }

/* ---- lines ---------------------------------------------------------------------------- */

static int send_line(role *r, conn *c, const char *fmt, ...)
{
    char line[LINE_MAX_ + 1];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, LINE_MAX_, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= LINE_MAX_)
        return fail(r, "message too long");
    line[n++] = '\n';
    for (int off = 0; off < n;) {
        /* MSG_NOSIGNAL: a peer that closed is an error return, not SIGPIPE */
        ssize_t w = send(c->fd, line + off, (size_t)(n - off), MSG_NOSIGNAL);
        if (w < 0 && errno == ENOTSOCK)
            w = write(c->fd, line + off, (size_t)(n - off));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return fail(r, "write to fd %d: %s", c->fd, w < 0 ? strerror(errno) : "closed");
        off += (int)w;
    }
    return 0;
}

/* 1: a complete line was buffered and copied out */
static int take_line(conn *c, char out[LINE_MAX_ + 1])
{
    char *nl = memchr(c->buf, '\n', c->len);
    if (!nl)
        return 0;
    size_t l = (size_t)(nl - c->buf);
    size_t k = l < LINE_MAX_ ? l : LINE_MAX_;
    memcpy(out, c->buf, k);
    out[k] = '\0';
    memmove(c->buf, nl + 1, c->len - l - 1);
    c->len -= l + 1;
    return 1;
}

/* read once: 1 bytes came, 0 end of stream, -1 error (or a line too long) */
static int fill(role *r, conn *c)
{
    if (c->len == sizeof c->buf)
        return fail(r, "a line longer than %zu bytes on fd %d", sizeof c->buf, c->fd);
    for (;;) {
        ssize_t n = read(c->fd, c->buf + c->len, sizeof c->buf - c->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return fail(r, "read fd %d: %s", c->fd, strerror(errno));
        c->len += (size_t)n;
        return n > 0;
    }
}

static int recv_line(role *r, conn *c, char out[LINE_MAX_ + 1])
{
    while (!take_line(c, out)) {
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        int pr = poll(&p, 1, r->peer_timeout_ms);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr < 0)
            return fail(r, "poll fd %d: %s", c->fd, strerror(errno));
        if (pr == 0)
            return fail(r, "no answer on fd %d for %d ms", c->fd, r->peer_timeout_ms);
        int f = fill(r, c);
        if (f < 0)
            return -1;
        if (f == 0)
            return fail(r, "the peer on fd %d closed the connection", c->fd);
    }
    return 0;
}

/* Split a line into at most `max` space-separated fields; returns the count. */
static int fields(char *line, char **f, int max)
{
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(line, " ", &save); t && n < max; t = strtok_r(NULL, " ", &save))
        f[n++] = t;
    return n;
}

static int parse_u32(const char *s, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || v > UINT32_MAX || s[0] == '-')
        return -1;
    *out = (uint32_t)v;
    return 0;
}

static const char *tp_or_null(const char *f) { return strcmp(f, "-") == 0 ? NULL : f; }

/* the traceparent to send for `c`, or "-" */
static int tp_out(role *r, const cbt_span_ctx *c, int send, char tp[CBT_TRACEPARENT_LEN + 1])
{
    if (!send) {
        strcpy(tp, "-");
        return 0;
    }
    cbt_status st = cbt_traceparent_format(c, tp);
    return st == CBT_OK ? 0 : fail(r, "traceparent: %s", cbt_strerror(st));
}

/* a pspan ends only when its begin went through (a full queue drops both) */
static int pend(role *r, cbt_pspan *p, const cbt_meta *m, uint32_t n)
{
    if (!p->open)
        return 0;
    TRY(r, p->stream ? cbt_pspan_end_on(p, m, n) : cbt_pspan_end(p, m, n), "end pspan");
    return 0;
}

/* ---- the scheduler ------------------------------------------------------------------------ */

static int schedule_one(role *r, conn *server, conn *worker, const cbt_cb_request *q)
{
    cbt_sampler s = r->o->sampler;
    if (q->force_sampled_out)
        s.kind = CBT_SAMPLER_ALWAYS_OFF;
    cbt_trace_context tc;
    TRY(r, cbt_context_begin(NULL, NULL, q->rid, strlen(q->rid), &s, &tc, NULL), "context");
    cbt_pspan req, sched, rpc, meta;
    cbt_meta rm[] = {cbt_meta_str(CBT_N_MODEL, "llama-3-8b"), cbt_meta_i64(CBT_N_WORLD_SIZE, 1),
                     cbt_meta_i64(CBT_N_N_PROMPT_TOKENS, q->prompt_tokens)};
    TRY(r, cbt_pspan_begin(&req, CBT_N_CB_REQUEST, CBT_SPAN_KIND_SERVER, q->rid, &tc.ctx, rm, 3),
        "cb.request");
    TRY(r, cbt_pspan_begin(&sched, CBT_N_CB_SCHEDULE, CBT_SPAN_KIND_INTERNAL, q->rid, &req.ctx,
                           NULL, 0), "cb.schedule");
    TRY(r, cbt_pspan_begin(&rpc, CBT_N_CB_LOOKUP_RPC, CBT_SPAN_KIND_CLIENT, q->rid, &sched.ctx,
                           NULL, 0), "cb.lookup.rpc");
    char tp[CBT_TRACEPARENT_LEN + 1], line[LINE_MAX_ + 1];
    if (tp_out(r, &rpc.ctx, q->send_ctx, tp) ||
        send_line(r, server, "LOOKUP %s %s %u %u %u", q->rid, tp, q->prompt_tokens, q->prefix_hit,
                  q->non_prefix_hit) ||
        recv_line(r, server, line))
        return -1;
    char *f[3];
    uint32_t hit = 0;
    if (fields(line, f, 3) != 3 || strcmp(f[0], "HIT") != 0 || parse_u32(f[2], &hit))
        return fail(r, "expected 'HIT <rid> <tokens>'");
    cbt_meta pm[] = {cbt_meta_i64(CBT_N_N_POLLS, 1 + (int64_t)(hit % 3))};
    if (pend(r, &rpc, pm, 1))
        return -1;
    TRY(r, cbt_pspan_begin(&meta, CBT_N_CB_BUILD_META, CBT_SPAN_KIND_INTERNAL, q->rid, &sched.ctx,
                           NULL, 0), "cb.build_meta");
    sleep_us(r->work_us / 4);
    if (pend(r, &meta, NULL, 0) || pend(r, &sched, NULL, 0))
        return -1;
    /* the metadata broadcast to workers carries the root's context */
    if (tp_out(r, &req.ctx, q->send_ctx, tp) ||
        send_line(r, worker, "EXEC %s %s %u %u", q->rid, tp, hit, q->load_passes ? q->load_passes : 1) ||
        recv_line(r, worker, line))
        return -1;
    if (fields(line, f, 2) != 2 || strcmp(f[0], "FINISHED") != 0)
        return fail(r, "expected 'FINISHED <rid>'");
    return pend(r, &req, NULL, 0);
}

static int run_scheduler(role *r, conn *server, conn *worker)
{
    for (uint32_t i = 0; i < r->o->n_requests; i++)
        if (schedule_one(r, server, worker, &r->o->requests[i]))
            return -1;
    if (send_line(r, worker, "QUIT") || send_line(r, server, "QUIT"))
        return -1;
    return 0;
}

/* ---- the worker ----------------------------------------------------------------------------- */

static int execute_one(role *r, conn *server, const char *rid, const char *tp_in, uint32_t hit,
                       uint32_t passes)
{
    cbt_trace_context tc;
    TRY(r, cbt_context_begin(tp_in, NULL, rid, strlen(rid), &r->o->sampler, &tc, NULL), "context");
    /* Option A: a remote child of the scheduler's cb.request; Option B: a
     * root of the request's derived trace */
    cbt_pspan ex, fwd, fr, chk, part;
    TRY(r, cbt_pspan_begin(&ex, CBT_N_CB_EXECUTE, CBT_SPAN_KIND_INTERNAL, rid, &tc.ctx, NULL, 0),
        "cb.execute");
    char tp[CBT_TRACEPARENT_LEN + 1], line[LINE_MAX_ + 1];
    uint32_t done = 0;
    for (uint32_t p = 0; p < passes; p++) {
        /* vLLM allocates partial-then-full: the first pass loads what fits */
        uint32_t n = p + 1 < passes ? hit / 2 : hit - done;
        cbt_pspan slk;
        TRY(r, cbt_pspan_begin(&slk, CBT_N_CB_START_LOAD_KV, CBT_SPAN_KIND_CLIENT, rid, &ex.ctx,
                               NULL, 0), "cb.start_load_kv");
        if (tp_out(r, &slk.ctx, tp_in != NULL, tp) ||
            send_line(r, server, "RETRIEVE %s %s %u %u", rid, tp, n, p + 1 == passes) ||
            recv_line(r, server, line))
            return -1;
        char *f[2];
        if (fields(line, f, 2) != 2 || strcmp(f[0], "DONE") != 0)
            return fail(r, "expected 'DONE <rid>'");
        if (pend(r, &slk, NULL, 0))
            return -1;
        done += n;
    }
    TRY(r, cbt_pspan_begin(&fwd, CBT_N_CB_MODEL_FORWARD, CBT_SPAN_KIND_INTERNAL, rid, &ex.ctx,
                           NULL, 0), "cb.model_forward");
    cbt_stream *st = r->stream;
    TRY(r, cbt_pspan_begin_on(&fr, st, CBT_N_CB_FULL_RECOMP, CBT_SPAN_KIND_INTERNAL, rid, &fwd.ctx,
                              NULL, 0), "cb.full_recomp");
    TRY(r, cbt_stream_enqueue(st, stream_sleep, (void *)(uintptr_t)(r->work_us * 3)), "enqueue");
    if (pend(r, &fr, NULL, 0))
        return -1;
    TRY(r, cbt_pspan_begin_on(&chk, st, CBT_N_CB_CHECK, CBT_SPAN_KIND_INTERNAL, rid, &fwd.ctx,
                              NULL, 0), "cb.check");
    TRY(r, cbt_stream_enqueue(st, stream_sleep, (void *)(uintptr_t)r->work_us), "enqueue");
    uint32_t imp = hit / 10;
    cbt_meta cm[] = {cbt_meta_i64(CBT_N_IMP_COUNT, imp),
                     cbt_meta_f64(CBT_N_RECOMP_RATIO, hit ? (double)imp / (double)hit : 0.0)};
    if (pend(r, &chk, cm, 2))
        return -1;
    TRY(r, cbt_pspan_begin_on(&part, st, CBT_N_CB_PARTIAL, CBT_SPAN_KIND_INTERNAL, rid, &fwd.ctx,
                              NULL, 0), "cb.partial");
    TRY(r, cbt_stream_enqueue(st, stream_sleep, (void *)(uintptr_t)(r->work_us * 3)), "enqueue");
    cbt_meta xm[] = {cbt_meta_str(CBT_N_DISPATCH, "flex"), cbt_meta_bool(CBT_N_IMP_EMPTY, imp == 0)};
    if (pend(r, &part, xm, 2))
        return -1;
    TRY(r, cbt_stream_sync(st), "stream sync");
    if (pend(r, &fwd, NULL, 0) || pend(r, &ex, NULL, 0))
        return -1;
    return 0;
}

static int run_worker(role *r, conn *sched, conn *server)
{
    char line[LINE_MAX_ + 1];
    for (;;) {
        if (recv_line(r, sched, line))
            return -1;
        char *f[5];
        int n = fields(line, f, 5);
        if (n >= 1 && strcmp(f[0], "QUIT") == 0)
            break;
        uint32_t hit, passes;
        if (n != 5 || strcmp(f[0], "EXEC") != 0 || parse_u32(f[3], &hit) ||
            parse_u32(f[4], &passes) || passes == 0 || passes > 2)
            return fail(r, "expected 'EXEC <rid> <traceparent|-> <hit> <passes>'");
        if (execute_one(r, server, f[1], tp_or_null(f[2]), hit, passes) ||
            send_line(r, sched, "FINISHED %s", f[1]))
            return -1;
    }
    return send_line(r, server, "QUIT");
}

/* ---- the server ------------------------------------------------------------------------------- */

static int pub(role *r, cbt_event_type type, const char *rid, const cbt_span_ctx *ctx,
               cbt_name k1, int64_t v1, cbt_name k2, int64_t v2)
{
    cbt_event e;
    TRY(r, cbt_event_init(&e, type, rid), "event");
    if (ctx)
        TRY(r, cbt_event_trace_set(&e, ctx, NULL), "event context");
    if (k1)
        TRY(r, cbt_event_i64(&e, k1, v1), "event value");
    if (k2)
        TRY(r, cbt_event_i64(&e, k2, v2), "event value");
    TRY(r, cbt_publish(&e), "publish");
    return 0;
}

static int serve_lookup(role *r, conn *c, char **f)
{
    const char *rid = f[1];
    uint32_t prompt, prefix, nonprefix;
    if (parse_u32(f[3], &prompt) || parse_u32(f[4], &prefix) || parse_u32(f[5], &nonprefix) ||
        (uint64_t)prefix + nonprefix > prompt)
        return fail(r, "LOOKUP %s: bad token counts", rid);
    cbt_trace_context tc;
    TRY(r, cbt_context_begin(tp_or_null(f[2]), NULL, rid, strlen(rid), &r->o->sampler, &tc, NULL),
        "context");
    if (cbt_context_sampled(&tc)) { /* sampled out: not one event */
        uint32_t w = r->work_us;
        uint32_t chunks = (prefix + nonprefix + 255) / 256;
        if (pub(r, CBT_EV_CB_REQUEST_START, rid, &tc.ctx, 0, 0, 0, 0) ||
            pub(r, CBT_EV_CB_LOOKUP_START, rid, &tc.ctx, CBT_N_PREFIX_CHUNKS, prefix / 256, 0, 0) ||
            pub(r, CBT_EV_CB_FINGERPRINT_MATCH_START, rid, NULL, 0, 0, 0, 0))
            return -1;
        sleep_us(w);
        if (pub(r, CBT_EV_CB_FINGERPRINT_MATCH_END, rid, NULL, CBT_N_FINGERPRINT_HITS,
                nonprefix / 256, 0, 0) ||
            pub(r, CBT_EV_CB_SPARSE_PREFETCH_START, rid, NULL, 0, 0, 0, 0) ||
            pub(r, CBT_EV_L2_LOAD_TASK_SUBMITTED, rid, NULL, 0, 0, 0, 0))
            return -1;
        sleep_us(w * 2);
        if (pub(r, CBT_EV_L2_LOAD_TASK_COMPLETED, rid, NULL, CBT_N_CHUNKS, chunks, CBT_N_BYTES,
                (int64_t)chunks << 19) ||
            pub(r, CBT_EV_CB_SPARSE_PREFETCH_END, rid, NULL, 0, 0, 0, 0) ||
            pub(r, CBT_EV_CB_CLASSIFY_START, rid, NULL, 0, 0, 0, 0) ||
            pub(r, CBT_EV_CB_CLASSIFY_END, rid, NULL, CBT_N_STORAGE_HITS, chunks, CBT_N_STALE_CHUNKS,
                0))
            return -1;
        cbt_event e;
        TRY(r, cbt_event_init(&e, CBT_EV_CB_LOOKUP_END, rid), "event");
        TRY(r, cbt_event_i64(&e, CBT_N_PREFIX_HIT_TOKENS, prefix), "event value");
        TRY(r, cbt_event_i64(&e, CBT_N_NON_PREFIX_HIT_TOKENS, nonprefix), "event value");
        TRY(r, cbt_event_i64(&e, CBT_N_REQUESTED_TOKENS, prompt), "event value");
        TRY(r, cbt_publish(&e), "publish");
    }
    return send_line(r, c, "HIT %s %u", rid, prefix + nonprefix);
}

static int serve_retrieve(role *r, conn *c, char **f)
{
    const char *rid = f[1];
    uint32_t n, last;
    if (parse_u32(f[3], &n) || parse_u32(f[4], &last))
        return fail(r, "RETRIEVE %s: bad fields", rid);
    cbt_trace_context tc;
    TRY(r, cbt_context_begin(tp_or_null(f[2]), NULL, rid, strlen(rid), &r->o->sampler, &tc, NULL),
        "context");
    int traced = cbt_context_sampled(&tc);
    if (traced && n == 0) {
        cbt_event e;
        TRY(r, cbt_event_init(&e, CBT_EV_CB_RETRIEVE_NOOP, rid), "event");
        TRY(r, cbt_event_str(&e, CBT_N_REASON, "no_hits"), "event value");
        TRY(r, cbt_publish(&e), "publish");
    } else if (traced) {
        cbt_event e;
        if (pub(r, CBT_EV_CB_RETRIEVE_SUBMITTED, rid, NULL, 0, 0, 0, 0) ||
            pub(r, CBT_EV_CB_RETRIEVE_START, rid, &tc.ctx, 0, 0, 0, 0))
            return -1;
        TRY(r, cbt_event_init(&e, CBT_EV_CB_SCATTER_START, rid), "event");
        TRY(r, cbt_publish_on_stream(r->stream, &e), "publish on stream");
        TRY(r, cbt_stream_enqueue(r->stream, stream_sleep, (void *)(uintptr_t)(r->work_us * 2)),
            "enqueue");
        TRY(r, cbt_event_init(&e, CBT_EV_CB_SCATTER_END, rid), "event");
        TRY(r, cbt_event_i64(&e, CBT_N_SCATTERED_TOKENS, n), "event value");
        TRY(r, cbt_event_i64(&e, CBT_N_SLOT_WRITES, n), "event value");
        TRY(r, cbt_event_i64(&e, CBT_N_N_SHIFTED_TOKENS, n / 2), "event value");
        TRY(r, cbt_publish_on_stream(r->stream, &e), "publish on stream");
        TRY(r, cbt_stream_sync(r->stream), "stream sync");
        if (pub(r, CBT_EV_CB_RETRIEVE_END, rid, NULL, 0, 0, 0, 0))
            return -1;
    } else {
        /* the work still happens; only its tracing is skipped */
        TRY(r, cbt_stream_enqueue(r->stream, stream_sleep, (void *)(uintptr_t)(r->work_us * 2)),
            "enqueue");
        TRY(r, cbt_stream_sync(r->stream), "stream sync");
    }
    if (traced && last && pub(r, CBT_EV_CB_REQUEST_END, rid, NULL, 0, 0, 0, 0))
        return -1;
    return send_line(r, c, "DONE %s", rid);
}

static int serve_line(role *r, conn *c, char *line, int *quit)
{
    char *f[6];
    int n = fields(line, f, 6);
    if (n >= 1 && strcmp(f[0], "QUIT") == 0) {
        *quit = 1;
        return 0;
    }
    if (n == 6 && strcmp(f[0], "LOOKUP") == 0)
        return serve_lookup(r, c, f);
    if (n == 5 && strcmp(f[0], "RETRIEVE") == 0)
        return serve_retrieve(r, c, f);
    return fail(r, "unexpected message '%s'", n ? f[0] : "");
}

static int run_server(role *r, conn *peers)
{
    int quit[2] = {0, 0};
    char line[LINE_MAX_ + 1];
    while (!quit[0] || !quit[1]) {
        /* a peer that said QUIT is not polled any more (-1): its closing
         * must not wake this loop forever */
        struct pollfd p[2] = {{.fd = quit[0] ? -1 : peers[0].fd, .events = POLLIN},
                              {.fd = quit[1] ? -1 : peers[1].fd, .events = POLLIN}};
        int pr = poll(p, 2, r->peer_timeout_ms);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr < 0)
            return fail(r, "poll: %s", strerror(errno));
        if (pr == 0)
            return fail(r, "no message for %d ms", r->peer_timeout_ms);
        for (int i = 0; i < 2; i++) {
            if (quit[i] || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            int f = fill(r, &peers[i]);
            if (f < 0)
                return -1;
            while (!quit[i] && take_line(&peers[i], line))
                if (serve_line(r, &peers[i], line, &quit[i]))
                    return -1;
            if (f == 0 && !quit[i])
                return fail(r, "a peer closed its connection before QUIT");
        }
    }
    return 0;
}

int cbt_cb_role_run(cbt_cb_role role_kind, int a, int b, const cbt_cb_role_opts *o, char *err,
                    size_t errcap)
{
    role r = {.o = o, .err = err, .errcap = errcap};
    if (err && errcap)
        err[0] = '\0';
    if (!o || a < 0 || b < 0)
        return fail(&r, "bad arguments");
    r.work_us = o->work_us ? o->work_us : 100;
    r.peer_timeout_ms = o->peer_timeout_ms && o->peer_timeout_ms < INT32_MAX
                            ? (int)o->peer_timeout_ms : 60000;
    if ((role_kind == CBT_CB_ROLE_WORKER || role_kind == CBT_CB_ROLE_SERVER) &&
        cbt_stream_cpu_create(256, &r.stream) != CBT_OK)
        return fail(&r, "cannot create a CPU stream");
    conn *ca = calloc(2, sizeof *ca); /* 8 KiB: not on the caller's stack */
    if (!ca) {
        cbt_stream_destroy(r.stream);
        return fail(&r, "out of memory");
    }
    ca[0].fd = a;
    ca[1].fd = b;
    int rc;
    switch (role_kind) {
    case CBT_CB_ROLE_SCHEDULER: rc = run_scheduler(&r, &ca[0], &ca[1]); break;
    case CBT_CB_ROLE_WORKER: rc = run_worker(&r, &ca[0], &ca[1]); break;
    case CBT_CB_ROLE_SERVER: rc = run_server(&r, ca); break;
    default: rc = fail(&r, "unknown role %d", (int)role_kind); break;
    }
    free(ca);
    if (r.stream)
        cbt_stream_destroy(r.stream);
    return rc;
}
