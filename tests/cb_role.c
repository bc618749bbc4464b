/* tests/cb_role.c — one process of a CacheBlend request, for
 * tests/test_three_proc.c: the vLLM scheduler, the vLLM worker or the LMCache
 * blend server, each with its own tracer exporting OTLP/HTTP to the test's
 * loopback collector (service.name = the role), on the CPU backend.
 *
 *   cb_role scheduler|worker|server COLLECTOR_BASE_URL
 *
 * Connections are inherited socketpairs: the scheduler has the server on fd 3
 * and the worker on fd 4; the worker has the scheduler on fd 3 and the server
 * on fd 4; the server has the scheduler on fd 3 and the worker on fd 4. The
 * messages are text lines, the trace context travelling as the optional
 * trace_context field of the seed's Option A ("-" when absent):
 *
 *   scheduler -> server   LOOKUP <rid> <traceparent|->     server: HIT <rid> <tokens>
 *   scheduler -> worker   EXEC <rid> <traceparent|->       worker: FINISHED <rid>
 *   worker -> server      RETRIEVE <rid> <traceparent|->   server: DONE <rid>
 *   QUIT                  scheduler -> worker, scheduler and worker -> server
 *
 * The scheduler runs the requests named on its stdin-free script below:
 * "req-a" (Option A, sampled), "req-off" (sampled out at the root by
 * always_off; the flag travels), "req-b" (no context is sent: Option B).
 * Exit status 0 when every step worked; a message on stderr otherwise.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cbt.h"
#include "cbt/cb.h"
#include "cbt/context.h"
#include "cbt/pspan.h"
#include "cbt/stream.h"
#include "otlp.h"

static const char *g_role = "?";

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cb_role %s: ", g_role);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void check(cbt_status st, const char *what)
{
    if (st != CBT_OK)
        die("%s: %s", what, cbt_strerror(st));
}

/* ---- line I/O over a socket ------------------------------------------------------- */

typedef struct conn {
    int fd;
    char buf[8192];
    size_t len;
} conn;

static void send_line(conn *c, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof line - 1)
        die("line too long");
    line[n++] = '\n';
    for (int off = 0; off < n;) {
        ssize_t w = write(c->fd, line + off, (size_t)(n - off));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die("write fd %d: %s", c->fd, strerror(errno));
        off += (int)w;
    }
}

/* A complete line already buffered: copy it out (without '\n'). */
static int take_line(conn *c, char *out, size_t cap)
{
    char *nl = memchr(c->buf, '\n', c->len);
    if (!nl)
        return 0;
    size_t l = (size_t)(nl - c->buf);
    if (l >= cap)
        die("line too long on fd %d", c->fd);
    memcpy(out, c->buf, l);
    out[l] = '\0';
    memmove(c->buf, nl + 1, c->len - l - 1);
    c->len -= l + 1;
    return 1;
}

/* Read more bytes; 0 at end of stream. */
static int fill(conn *c)
{
    if (c->len == sizeof c->buf)
        die("buffer full on fd %d", c->fd);
    for (;;) {
        ssize_t r = read(c->fd, c->buf + c->len, sizeof c->buf - c->len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            die("read fd %d: %s", c->fd, strerror(errno));
        c->len += (size_t)r;
        return r > 0;
    }
}

static void recv_line(conn *c, char *out, size_t cap)
{
    while (!take_line(c, out, cap))
        if (!fill(c))
            die("peer on fd %d closed", c->fd);
}

/* "VERB rid tp" -> fields; tp NULL for "-" */
static void split3(char *line, char **verb, char **rid, char **tp)
{
    *verb = strtok(line, " ");
    *rid = strtok(NULL, " ");
    *tp = strtok(NULL, " ");
    if (!*verb)
        die("empty line");
    if (*tp && strcmp(*tp, "-") == 0)
        *tp = NULL;
}

static cbt_name nm(const char *s)
{
    cbt_name n = 0;
    check(cbt_intern(s, &n), s);
    return n;
}

static void busy_us(unsigned us)
{
    struct timespec ts = {0, (long)us * 1000};
    nanosleep(&ts, NULL);
}

static void stream_sleep(void *arg) { busy_us((unsigned)(uintptr_t)arg); }

/* ---- tracer ------------------------------------------------------------------------- */

static void start_tracer(const char *base, int server)
{
    cbt_config c = cbt_config_default();
    check(cbt_init(&c), "cbt_init");
    if (server) {
        cbt_subscriber sub;
        check(cbt_cb_subscriber_create(0, &sub), "cb subscriber");
        check(cbt_add_subscriber(&sub), "add cb subscriber");
    }
    cbt_otlp_config oc;
    cbt_otlp_config_default(&oc);
    snprintf(oc.endpoint, sizeof oc.endpoint, "%s/v1/traces", base);
    /* the process owner of each span, as the seed's tree names it */
    snprintf(oc.resource.service_name, sizeof oc.resource.service_name, "%s",
             server ? "lmcache-blend-server"
                    : strcmp(g_role, "scheduler") == 0 ? "vllm-scheduler" : "vllm-worker");
    oc.schedule_delay_ms = 50;
    oc.timeout_ms = 5000;
    cbt_otlp_exporter *e;
    cbt_sink sk;
    check(cbt_otlp_exporter_create(&oc, &e, &sk), "otlp exporter");
    check(cbt_add_sink(&sk), "add otlp sink");
}

static void stop_tracer(void)
{
    check(cbt_flush(10000), "cbt_flush");
    check(cbt_shutdown(), "cbt_shutdown");
}

static int format_or_dash(const cbt_span_ctx *c, int send_ctx, char tp[CBT_TRACEPARENT_LEN + 1])
{
    if (!send_ctx) {
        strcpy(tp, "-");
        return 0;
    }
    check(cbt_traceparent_format(c, tp), "traceparent");
    return 1;
}

/* ---- the scheduler ------------------------------------------------------------------- */

static void schedule_one(conn *server, conn *worker, const char *rid, int sampled, int send_ctx)
{
    cbt_sampler s = cbt_sampler_default();
    if (!sampled)
        s.kind = CBT_SAMPLER_ALWAYS_OFF;
    cbt_trace_context tc;
    check(cbt_context_begin(NULL, NULL, rid, strlen(rid), &s, &tc, NULL), "context");
    cbt_pspan req, sched, rpc, meta;
    cbt_meta rm[] = {cbt_meta_str(nm("model"), "llama-3-8b"),
                     cbt_meta_i64(nm("world_size"), 1),
                     cbt_meta_i64(nm("n_prompt_tokens"), 1024)};
    check(cbt_pspan_begin(&req, CBT_N_CB_REQUEST, CBT_SPAN_KIND_SERVER, rid, &tc.ctx, rm, 3),
          "cb.request");
    check(cbt_pspan_begin(&sched, CBT_N_CB_SCHEDULE, CBT_SPAN_KIND_INTERNAL, rid, &req.ctx, NULL, 0),
          "cb.schedule");
    check(cbt_pspan_begin(&rpc, CBT_N_CB_LOOKUP_RPC, CBT_SPAN_KIND_CLIENT, rid, &sched.ctx, NULL, 0),
          "cb.lookup.rpc");
    char tp[CBT_TRACEPARENT_LEN + 1], line[512];
    format_or_dash(&rpc.ctx, send_ctx, tp);
    send_line(server, "LOOKUP %s %s", rid, tp);
    recv_line(server, line, sizeof line);
    if (strncmp(line, "HIT ", 4) != 0)
        die("expected HIT, got '%s'", line);
    cbt_meta pm[] = {cbt_meta_i64(CBT_N_N_POLLS, 2)};
    check(cbt_pspan_end(&rpc, pm, 1), "end cb.lookup.rpc");
    check(cbt_pspan_begin(&meta, CBT_N_CB_BUILD_META, CBT_SPAN_KIND_INTERNAL, rid, &sched.ctx, NULL, 0),
          "cb.build_meta");
    busy_us(100);
    check(cbt_pspan_end(&meta, NULL, 0), "end cb.build_meta");
    check(cbt_pspan_end(&sched, NULL, 0), "end cb.schedule");
    format_or_dash(&req.ctx, send_ctx, tp); /* the metadata carries the root's context */
    send_line(worker, "EXEC %s %s", rid, tp);
    recv_line(worker, line, sizeof line);
    if (strncmp(line, "FINISHED ", 9) != 0)
        die("expected FINISHED, got '%s'", line);
    check(cbt_pspan_end(&req, NULL, 0), "end cb.request");
}

static void run_scheduler(void)
{
    conn server = {.fd = 3}, worker = {.fd = 4};
    schedule_one(&server, &worker, "req-a", 1, 1);
    schedule_one(&server, &worker, "req-off", 0, 1);
    schedule_one(&server, &worker, "req-b", 1, 0);
    send_line(&worker, "QUIT");
    send_line(&server, "QUIT");
}

/* ---- the worker ------------------------------------------------------------------------ */

static void execute_one(conn *server, cbt_stream *st, const char *rid, const char *tp_in)
{
    cbt_trace_context tc;
    check(cbt_context_begin(tp_in, NULL, rid, strlen(rid), NULL, &tc, NULL), "context");
    /* Option A: a remote child of the scheduler's cb.request; Option B: a
     * root of the trace derived from the request id */
    cbt_pspan ex, slk, fwd, fr, chk, part;
    check(cbt_pspan_begin(&ex, CBT_N_CB_EXECUTE, CBT_SPAN_KIND_INTERNAL, rid, &tc.ctx, NULL, 0),
          "cb.execute");
    check(cbt_pspan_begin(&slk, CBT_N_CB_START_LOAD_KV, CBT_SPAN_KIND_CLIENT, rid, &ex.ctx, NULL, 0),
          "cb.start_load_kv");
    char tp[CBT_TRACEPARENT_LEN + 1], line[512];
    format_or_dash(&slk.ctx, tp_in != NULL, tp);
    send_line(server, "RETRIEVE %s %s", rid, tp);
    recv_line(server, line, sizeof line);
    if (strncmp(line, "DONE ", 5) != 0)
        die("expected DONE, got '%s'", line);
    check(cbt_pspan_end(&slk, NULL, 0), "end cb.start_load_kv");

    check(cbt_pspan_begin(&fwd, CBT_N_CB_MODEL_FORWARD, CBT_SPAN_KIND_INTERNAL, rid, &ex.ctx, NULL, 0),
          "cb.model_forward");
    check(cbt_pspan_begin_on(&fr, st, CBT_N_CB_FULL_RECOMP, CBT_SPAN_KIND_INTERNAL, rid, &fwd.ctx,
                             NULL, 0), "cb.full_recomp");
    check(cbt_stream_enqueue(st, stream_sleep, (void *)(uintptr_t)300), "enqueue");
    check(cbt_pspan_end_on(&fr, NULL, 0), "end cb.full_recomp");
    check(cbt_pspan_begin_on(&chk, st, CBT_N_CB_CHECK, CBT_SPAN_KIND_INTERNAL, rid, &fwd.ctx, NULL, 0),
          "cb.check");
    check(cbt_stream_enqueue(st, stream_sleep, (void *)(uintptr_t)100), "enqueue");
    cbt_meta cm[] = {cbt_meta_i64(CBT_N_IMP_COUNT, 154), cbt_meta_f64(CBT_N_RECOMP_RATIO, 0.15)};
    check(cbt_pspan_end_on(&chk, cm, 2), "end cb.check");
    check(cbt_pspan_begin_on(&part, st, CBT_N_CB_PARTIAL, CBT_SPAN_KIND_INTERNAL, rid, &fwd.ctx,
                             NULL, 0), "cb.partial");
    check(cbt_stream_enqueue(st, stream_sleep, (void *)(uintptr_t)300), "enqueue");
    cbt_meta pm[] = {cbt_meta_str(CBT_N_DISPATCH, "flex"), cbt_meta_bool(CBT_N_IMP_EMPTY, false)};
    check(cbt_pspan_end_on(&part, pm, 2), "end cb.partial");
    check(cbt_stream_sync(st), "stream sync");
    check(cbt_pspan_end(&fwd, NULL, 0), "end cb.model_forward");
    check(cbt_pspan_end(&ex, NULL, 0), "end cb.execute");
}

static void run_worker(void)
{
    conn sched = {.fd = 3}, server = {.fd = 4};
    cbt_stream *st;
    check(cbt_stream_cpu_create(256, &st), "cpu stream");
    char line[512];
    for (;;) {
        recv_line(&sched, line, sizeof line);
        char *verb, *rid, *tp;
        split3(line, &verb, &rid, &tp);
        if (strcmp(verb, "QUIT") == 0)
            break;
        if (strcmp(verb, "EXEC") != 0 || !rid)
            die("unexpected '%s'", verb);
        execute_one(&server, st, rid, tp);
        send_line(&sched, "FINISHED %s", rid);
    }
    send_line(&server, "QUIT");
    cbt_stream_destroy(st);
}

/* ---- the server ----------------------------------------------------------------------------- */

static void pub(cbt_event_type type, const char *rid, const cbt_span_ctx *ctx, const char *k1,
                int64_t v1, const char *k2, int64_t v2)
{
    cbt_event e;
    check(cbt_event_init(&e, type, rid), "event");
    if (ctx)
        check(cbt_event_trace_set(&e, ctx, NULL), "event trace");
    if (k1)
        check(cbt_event_i64(&e, nm(k1), v1), "meta");
    if (k2)
        check(cbt_event_i64(&e, nm(k2), v2), "meta");
    check(cbt_publish(&e), "publish");
}

static void pub_on(cbt_stream *st, cbt_event_type type, const char *rid, const char *k1,
                   int64_t v1, const char *k2, int64_t v2)
{
    cbt_event e;
    check(cbt_event_init(&e, type, rid), "event");
    if (k1)
        check(cbt_event_i64(&e, nm(k1), v1), "meta");
    if (k2)
        check(cbt_event_i64(&e, nm(k2), v2), "meta");
    check(cbt_publish_on_stream(st, &e), "publish on stream");
}

static void serve_lookup(conn *c, const char *rid, const char *tp)
{
    cbt_trace_context tc;
    check(cbt_context_begin(tp, NULL, rid, strlen(rid), NULL, &tc, NULL), "context");
    if (cbt_context_sampled(&tc)) { /* sampled out: not one event */
        pub(CBT_EV_CB_REQUEST_START, rid, &tc.ctx, NULL, 0, NULL, 0);
        pub(CBT_EV_CB_LOOKUP_START, rid, &tc.ctx, "prefix_chunks", 1, NULL, 0);
        pub(CBT_EV_CB_FINGERPRINT_MATCH_START, rid, NULL, NULL, 0, NULL, 0);
        busy_us(100);
        pub(CBT_EV_CB_FINGERPRINT_MATCH_END, rid, NULL, "fingerprint_hits", 2, NULL, 0);
        pub(CBT_EV_CB_SPARSE_PREFETCH_START, rid, NULL, NULL, 0, NULL, 0);
        pub(CBT_EV_L2_LOAD_TASK_SUBMITTED, rid, NULL, NULL, 0, NULL, 0);
        busy_us(200);
        pub(CBT_EV_L2_LOAD_TASK_COMPLETED, rid, NULL, "chunks", 2, "bytes", 2 << 20);
        pub(CBT_EV_CB_SPARSE_PREFETCH_END, rid, NULL, NULL, 0, NULL, 0);
        pub(CBT_EV_CB_CLASSIFY_START, rid, NULL, NULL, 0, NULL, 0);
        pub(CBT_EV_CB_CLASSIFY_END, rid, NULL, "storage_hits", 2, "stale_chunks", 0);
        pub(CBT_EV_CB_LOOKUP_END, rid, NULL, "prefix_hit_tokens", 256, "non_prefix_hit_tokens",
            256);
    }
    send_line(c, "HIT %s 512", rid);
}

static void serve_retrieve(conn *c, cbt_stream *st, const char *rid, const char *tp)
{
    cbt_trace_context tc;
    check(cbt_context_begin(tp, NULL, rid, strlen(rid), NULL, &tc, NULL), "context");
    if (cbt_context_sampled(&tc)) {
        pub(CBT_EV_CB_RETRIEVE_SUBMITTED, rid, NULL, NULL, 0, NULL, 0);
        pub(CBT_EV_CB_RETRIEVE_START, rid, &tc.ctx, NULL, 0, NULL, 0);
        pub_on(st, CBT_EV_CB_SCATTER_START, rid, NULL, 0, NULL, 0);
        check(cbt_stream_enqueue(st, stream_sleep, (void *)(uintptr_t)300), "enqueue");
        pub_on(st, CBT_EV_CB_SCATTER_END, rid, "scattered_tokens", 512, "n_shifted_tokens", 256);
        check(cbt_stream_sync(st), "stream sync");
        pub(CBT_EV_CB_RETRIEVE_END, rid, NULL, NULL, 0, NULL, 0);
        pub(CBT_EV_CB_REQUEST_END, rid, NULL, NULL, 0, NULL, 0);
    } else {
        /* the GPU work still happens; only its tracing is skipped */
        check(cbt_stream_enqueue(st, stream_sleep, (void *)(uintptr_t)300), "enqueue");
        check(cbt_stream_sync(st), "stream sync");
    }
    send_line(c, "DONE %s", rid);
}

static void run_server(void)
{
    conn peers[2] = {{.fd = 3}, {.fd = 4}};
    cbt_stream *st;
    check(cbt_stream_cpu_create(256, &st), "cpu stream");
    int quit[2] = {0, 0};
    char line[512];
    while (!quit[0] || !quit[1]) {
        struct pollfd p[2] = {{.fd = 3, .events = POLLIN}, {.fd = 4, .events = POLLIN}};
        if (poll(p, 2, 30000) <= 0)
            die("no message for 30 s");
        for (int i = 0; i < 2; i++) {
            if (quit[i] || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if (!fill(&peers[i]))
                die("peer on fd %d closed before QUIT", peers[i].fd);
            while (take_line(&peers[i], line, sizeof line)) {
                char *verb, *rid, *tp;
                split3(line, &verb, &rid, &tp);
                if (strcmp(verb, "QUIT") == 0)
                    quit[i] = 1;
                else if (strcmp(verb, "LOOKUP") == 0 && rid)
                    serve_lookup(&peers[i], rid, tp);
                else if (strcmp(verb, "RETRIEVE") == 0 && rid)
                    serve_retrieve(&peers[i], st, rid, tp);
                else
                    die("unexpected '%s'", verb);
            }
        }
    }
    cbt_stream_destroy(st);
}

int main(int argc, char **argv)
{
    if (argc != 3)
        die("usage: cb_role scheduler|worker|server COLLECTOR_BASE_URL");
    g_role = argv[1];
    int server = strcmp(g_role, "server") == 0;
    if (!server && strcmp(g_role, "scheduler") != 0 && strcmp(g_role, "worker") != 0)
        die("unknown role");
    start_tracer(argv[2], server);
    if (server)
        run_server();
    else if (strcmp(g_role, "scheduler") == 0)
        run_scheduler();
    else
        run_worker();
    stop_tracer();
    return 0;
}
