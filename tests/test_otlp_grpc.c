/* tests/test_otlp_grpc.c — the OTLP/gRPC exporter (exporter/otlp_http.c,
 * protocol CBT_OTLP_GRPC) against a real gRPC collector on 127.0.0.1: the
 * grpcio server of tests/grpc_collector.py with the TraceService and
 * MetricsService servicers generated in opentelemetry-proto, decoding every
 * request with the official classes. No mock speaks gRPC here.
 *
 * Each case starts the collector as a subprocess (the venv's python, made by
 * scripts/pydeps.sh; `PORT <n>` read from its stdout; it exits when its stdin
 * closes, or by itself after its lifetime), runs the real tracer with a span
 * file (cbt_config.jsonl_path) and the exporter as a sink, publishes MP
 * requests, flushes, shuts down with cbt_shutdown_final (final_stats), then
 * runs tests/grpc_check.py: every span the collector accepted must equal the
 * span file's, field by field and type by type, and its summary (requests
 * by outcome, compression, sizes, peers, TLS identity, metric values) is
 * what the case asserts on. In every case the exporter accounts for every
 * span it was given: spans given (the memory sink's count) = exported +
 * dropped, exactly, and cbt_metrics.sink_spans_lost = dropped.
 *
 * Cases: spans (every attribute type, parents, span events, status, an
 * incomplete span) and metrics arrive whole, with the configured headers as
 * metadata; gzip; UNAVAILABLE then recovery; RESOURCE_EXHAUSTED with
 * google.rpc.RetryInfo (retried after its delay) and without (dropped,
 * counted under code 8, not retried); INVALID_ARGUMENT (dropped, code 3);
 * DEADLINE_EXCEEDED from a stalled collector; the collector killed
 * mid-call and restarted on the same port; a GOAWAY (the collector stops and
 * serves again) and connections aged out by the server; partial_success; a
 * batch split under max_message_bytes, and a batch over gRPC's 4 MiB
 * receive limit split under the default; TLS with a self-signed CA (and a
 * client that does not trust it delivers nothing); TLS with a required
 * client certificate (and without one, nothing); OTEL_EXPORTER_OTLP_PROTOCOL
 * = grpc; `cbt demo --enable-tracing` over gRPC delivers every span.
 *
 * Skips (exit 77, "SKIP: test_otlp_grpc: <why>"): no venv (no python3-venv,
 * no reachable package index) or grpcio not importable in it; and, after
 * the harness's own cases have run, when include/cbt/otlp.h has no
 * CBT_OTLP_GRPC yet (CMake's check defines CBT_TEST_OTLP_GRPC, see
 * tests/CMakeLists.txt). Without the openssl command the TLS cases alone
 * are skipped (cmocka's skip). docs/testing.md, "Testing the OTLP/gRPC
 * exporter against real gRPC".
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#include "cbt/blend_metrics.h"
#include "cbt/otlp.h"

#ifndef CBT_TEST_OTLP_GRPC
#define CBT_TEST_OTLP_GRPC 0 /* no gRPC in the exporter (tests/CMakeLists.txt's check) */
#endif
#ifndef CBT_SOURCE_DIR
#error "CBT_SOURCE_DIR: the source tree (tests/CMakeLists.txt defines it)"
#endif

extern char **environ;

/* ---- processes ------------------------------------------------------------------------------ */

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(uint32_t ms)
{
    struct timespec d = {.tv_sec = ms / 1000u, .tv_nsec = (long)(ms % 1000u) * 1000000L};
    nanosleep(&d, NULL);
}

typedef struct proc {
    pid_t pid;  /* 0: none */
    int in_fd;  /* its stdin (-1: /dev/null) */
    int out_fd; /* its stdout (-1: ours) */
} proc;

/* Start argv[0] (a path) with envp; stdin a pipe when `in_pipe`, else
 * /dev/null; stdout a pipe when `out_pipe`, else ours; stderr ours (ctest's
 * log). Our ends are close-on-exec, so no other child holds them. */
static int spawn(char *const argv[], char *const envp[], int in_pipe, int out_pipe, proc *p)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1};
    p->pid = 0;
    p->in_fd = p->out_fd = -1;
    if ((in_pipe && pipe2(in, O_CLOEXEC) != 0) || (out_pipe && pipe2(out, O_CLOEXEC) != 0))
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (in_pipe)
        posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    else
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (out_pipe)
        posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, envp ? envp : environ);
    posix_spawn_file_actions_destroy(&fa);
    if (in_pipe)
        close(in[0]);
    if (out_pipe)
        close(out[1]);
    if (rc != 0) {
        if (in_pipe)
            close(in[1]);
        if (out_pipe)
            close(out[0]);
        errno = rc;
        return -1;
    }
    p->pid = pid;
    p->in_fd = in_pipe ? in[1] : -1;
    p->out_fd = out_pipe ? out[0] : -1;
    return 0;
}

/* Wait at most timeout_ms for the process to exit; then SIGKILL it (it is
 * ours: p->pid) and reap it. Its exit status, 128 + the signal, or -1 when
 * it had to be killed. Closes our ends of its pipes. */
static int reap(proc *p, int timeout_ms)
{
    if (!p->pid)
        return -1;
    if (p->in_fd >= 0)
        close(p->in_fd);
    p->in_fd = -1;
    int st = 0, rc = -1;
    double until = mono_s() + timeout_ms / 1000.0;
    for (;;) {
        pid_t w = waitpid(p->pid, &st, WNOHANG);
        if (w == p->pid) {
            rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            break;
        }
        if (w < 0 && errno != EINTR)
            break;
        if (mono_s() > until) {
            fprintf(stderr, "test_otlp_grpc: pid %d still running after %d ms: killed\n",
                    (int)p->pid, timeout_ms);
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &st, 0);
            rc = -1;
            break;
        }
        sleep_ms(10);
    }
    if (p->out_fd >= 0)
        close(p->out_fd);
    p->out_fd = -1;
    p->pid = 0;
    return rc;
}

/* Read a child's stdout to EOF (at most timeout_ms, cap - 1 bytes kept). */
static size_t read_all(int fd, char *buf, size_t cap, int timeout_ms)
{
    size_t n = 0;
    double until = mono_s() + timeout_ms / 1000.0;
    for (;;) {
        int left = (int)((until - mono_s()) * 1000);
        if (left <= 0)
            break;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, left) <= 0)
            continue;
        char tmp[4096];
        ssize_t r = read(fd, tmp, sizeof tmp);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        size_t k = (size_t)r < cap - 1 - n ? (size_t)r : cap - 1 - n;
        memcpy(buf + n, tmp, k);
        n += k;
    }
    buf[n] = '\0';
    return n;
}

/* Run argv to completion (timeout_ms), its stdout into out (NULL: ours). */
static int run(char *const argv[], char *const envp[], char *out, size_t cap, int timeout_ms)
{
    proc p;
    if (spawn(argv, envp, 0, out != NULL, &p) != 0) {
        fprintf(stderr, "test_otlp_grpc: cannot start %s: %s\n", argv[0], strerror(errno));
        return -1;
    }
    if (out)
        read_all(p.out_fd, out, cap, timeout_ms);
    return reap(&p, timeout_ms);
}

/* ---- the venv and the run's folder ------------------------------------------------------ */

static char g_python[PATH_MAX]; /* the venv's python */
static char g_root[PATH_MAX];   /* this run's folder: one subfolder a case */
static char g_dir[PATH_MAX];    /* the case's folder */
static char g_spans[PATH_MAX];  /* cbt's span file */
static char g_got[PATH_MAX];    /* the collector's log */
static int g_case_failed;       /* keep the run's folder for a look */

/* NULL when the venv is there with grpcio in it; else why not. */
static const char *prepare(void)
{
    static char why[PATH_MAX + 256];
    char *argv[] = {(char *)CBT_SOURCE_DIR "/scripts/pydeps.sh", NULL};
    if (run(argv, NULL, NULL, 0, 300000) != 0)
        return "no Python venv with grpcio and opentelemetry-proto (scripts/pydeps.sh failed, "
               "see above: no python3-venv, or no reachable package index)";
    const char *venv = getenv("CBT_PYVENV");
    snprintf(g_python, sizeof g_python, "%s/bin/python",
             venv && *venv ? venv : CBT_SOURCE_DIR "/.venv");
    char *imp[] = {g_python, (char *)"-c",
                   (char *)"import grpc, grpc_status, "
                           "opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc",
                   NULL};
    if (run(imp, NULL, NULL, 0, 60000) != 0) {
        snprintf(why, sizeof why, "grpcio / opentelemetry-proto's gRPC modules are not importable "
                                  "with %s",
                 g_python);
        return why;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(g_root, sizeof g_root, "%s/cbt-grpc-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_root)) {
        snprintf(why, sizeof why, "cannot make a folder under %s: %s", tmp ? tmp : "/tmp",
                 strerror(errno));
        return why;
    }
    return NULL;
}

static void remove_root(void)
{
    if (!g_root[0])
        return;
    if (g_case_failed) {
        printf("test_otlp_grpc: the collectors' logs and span files are in %s\n", g_root);
        return;
    }
    char *argv[] = {(char *)"/bin/rm", (char *)"-rf", g_root, NULL};
    run(argv, NULL, NULL, 0, 60000);
}

/* snprintf into an array, failing the case when the path does not fit. */
#define PATH_FMT(dst, ...)                                                        \
    do {                                                                          \
        if ((size_t)snprintf((dst), sizeof(dst), __VA_ARGS__) >= sizeof(dst))     \
            fail_msg("a path under %s is too long", g_root);                      \
    } while (0)

/* The case's folder and files (name: the case's). */
static void begin(const char *name)
{
    PATH_FMT(g_dir, "%s/%s", g_root, name);
    assert_true(mkdir(g_dir, 0700) == 0 || errno == EEXIST);
    PATH_FMT(g_spans, "%s/cbt-spans.jsonl", g_dir);
    PATH_FMT(g_got, "%s/collected.jsonl", g_dir);
    printf("-- %s: %s\n", name, g_dir);
}

/* ---- the collector -------------------------------------------------------------------------- */

static proc g_col;
static int g_port;

/* Start tests/grpc_collector.py serve (script: the traces script, "" for
 * all ok; port 0: any; extra: more options, NULL-terminated) logging to
 * g_got; asserts that it says its port within 30 s. */
static void col_start(const char *script, int port, const char *const *extra)
{
    char *argv[40];
    int n = 0;
    char portbuf[16];
    argv[n++] = g_python;
    argv[n++] = (char *)CBT_SOURCE_DIR "/tests/grpc_collector.py";
    argv[n++] = (char *)"serve";
    argv[n++] = (char *)"--out";
    argv[n++] = g_got;
    argv[n++] = (char *)"--exit-on-stdin-eof";
    argv[n++] = (char *)"--lifetime";
    argv[n++] = (char *)"240";
    if (script && *script) {
        argv[n++] = (char *)"--script";
        argv[n++] = (char *)script;
    }
    if (port) {
        snprintf(portbuf, sizeof portbuf, "%d", port);
        argv[n++] = (char *)"--port";
        argv[n++] = portbuf;
    }
    for (; extra && *extra && n < 38; extra++)
        argv[n++] = (char *)*extra;
    argv[n] = NULL;
    assert_int_equal(spawn(argv, NULL, 1, 1, &g_col), 0);
    char line[128];
    size_t got = 0;
    double until = mono_s() + 30.0;
    while (got < sizeof line - 1 && (got == 0 || line[got - 1] != '\n') && mono_s() < until) {
        struct pollfd pf = {.fd = g_col.out_fd, .events = POLLIN};
        if (poll(&pf, 1, 100) <= 0)
            continue;
        ssize_t r = read(g_col.out_fd, line + got, 1);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    line[got] = '\0';
    int p = 0;
    if (sscanf(line, "PORT %d", &p) != 1 || p <= 0) {
        int st = reap(&g_col, 5000);
        fail_msg("the collector did not say its port (it said '%s', exit %d)", line, st);
    }
    g_port = p;
    if (port)
        assert_int_equal(g_port, port);
}

/* Close its stdin (it stops serving and exits 0); its exit status. */
static int col_stop(void)
{
    return g_col.pid ? reap(&g_col, 15000) : 0;
}

/* Wait for the collector to exit by itself (a `kill` action, its
 * lifetime); its exit status, -1 when it was still running. */
static int col_wait_exit(int timeout_ms)
{
    double until = mono_s() + timeout_ms / 1000.0;
    int st = 0;
    while (mono_s() < until) {
        pid_t w = waitpid(g_col.pid, &st, WNOHANG);
        if (w == g_col.pid) {
            g_col.pid = 0;
            close(g_col.in_fd);
            close(g_col.out_fd);
            g_col.in_fd = g_col.out_fd = -1;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        sleep_ms(20);
    }
    return -1;
}

/* ---- the checker's summary ------------------------------------------------------------------ */

#define SUM_MAX 256
static char g_sum_text[1 << 16];
static char *g_sum_key[SUM_MAX], *g_sum_val[SUM_MAX];
static int g_sum_n, g_check_rc;

/* Run tests/grpc_check.py on g_got (spans: cbt's span file or NULL; then
 * more options, NULL-terminated) and keep its summary; prints it. */
static void check_run(const char *spans, ...)
{
    char *argv[24];
    int n = 0;
    argv[n++] = g_python;
    argv[n++] = (char *)CBT_SOURCE_DIR "/tests/grpc_check.py";
    argv[n++] = (char *)"--got";
    argv[n++] = g_got;
    if (spans) {
        argv[n++] = (char *)"--spans";
        argv[n++] = (char *)spans;
    }
    va_list ap;
    va_start(ap, spans);
    for (const char *a; (a = va_arg(ap, const char *)) && n < 22;)
        argv[n++] = (char *)a;
    va_end(ap);
    argv[n] = NULL;
    g_check_rc = run(argv, NULL, g_sum_text, sizeof g_sum_text, 120000);
    printf("%s", g_sum_text);
    g_sum_n = 0;
    for (char *line = strtok(g_sum_text, "\n"); line && g_sum_n < SUM_MAX;
         line = strtok(NULL, "\n")) {
        char *sp = strchr(line, ' ');
        if (!sp)
            continue;
        *sp = '\0';
        g_sum_key[g_sum_n] = line;
        g_sum_val[g_sum_n++] = sp + 1;
    }
}

/* A summary value ("" when the checker did not print the key). */
static const char *sum_str(const char *key)
{
    for (int i = 0; i < g_sum_n; i++)
        if (strcmp(g_sum_key[i], key) == 0)
            return g_sum_val[i];
    return "";
}

/* A count (0 when not printed: a count of nothing). */
static long long sum_ll(const char *key)
{
    const char *v = sum_str(key);
    return *v ? strtoll(v, NULL, 10) : 0;
}

/* The checker passed: every accepted span equals cbt's. */
static void check_ok(void)
{
    if (g_check_rc != 0)
        fail_msg("tests/grpc_check.py found differences (exit %d): the FAIL lines above",
                 g_check_rc);
}

/* ---- cases that need no gRPC from cbt: the harness itself -------------------------------- */

static int setup(void **state)
{
    (void)state;
    g_col.pid = 0;
    g_sum_n = 0;
    return 0;
}

static int teardown(void **state)
{
    tu_teardown(state); /* the exporter first: it may be talking to the collector */
    if (g_col.pid)
        col_stop();
    return 0;
}

/* Started, listening on 127.0.0.1, stopped by closing its stdin, with its
 * ready and exit events in the log and no request. */
static void harness_collector_lifecycle(void **state)
{
    (void)state;
    begin("harness_collector_lifecycle");
    col_start("", 0, NULL);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    close(fd);
    assert_int_equal(col_stop(), 0);
    check_run(NULL, NULL);
    check_ok();
    assert_int_equal(sum_ll("events.ready"), 1);
    assert_int_equal(sum_ll("events.exit"), 1);
    assert_int_equal(sum_ll("traces.requests"), 0);
}

/* It ends by itself after its lifetime (no orphan when a test dies), and a
 * new one serves on the same port (what the killed-collector case does). */
static void harness_collector_ends_and_restarts_on_port(void **state)
{
    (void)state;
    begin("harness_collector_ends_and_restarts_on_port");
    const char *life[] = {"--lifetime", "1", NULL}; /* the later option wins */
    double t0 = mono_s();
    col_start("", 0, life);
    int port = g_port;
    assert_int_equal(col_wait_exit(10000), 4); /* its "lifetime over" status */
    assert_true(mono_s() - t0 < 8.0);
    col_start("", port, NULL);
    assert_int_equal(g_port, port);
    assert_int_equal(col_stop(), 0);
    check_run(NULL, NULL);
    assert_int_equal(sum_ll("events.ready"), 2);
    assert_int_equal(sum_ll("events.exit"), 2);
}

#if CBT_TEST_OTLP_GRPC
/* ---- cbt over gRPC ------------------------------------------------------------------------- */

static cbt_otlp_stats g_fin; /* final_stats: filled by cbt_shutdown */

/* A path into a config field that is either a char array (copied) or a
 * const char * (pointed at: `path` must outlive the exporter). */
static void set_path_(void *field, size_t size, int is_ptr, const char *path)
{
    if (is_ptr)
        memcpy(field, &path, sizeof path);
    else if ((size_t)snprintf((char *)field, size, "%s", path) >= size)
        fail_msg("the path %s does not fit the config's %zu bytes", path, size);
}
#define SET_PATH(field, path)                                                                \
    set_path_((void *)&(field), sizeof(field), _Generic((field), const char *: 1, default: 0), \
              (path))

/* Test defaults: the collector, short delays and bounds. */
static void grpc_config(cbt_otlp_config *c)
{
    cbt_otlp_config_default(c);
    c->protocol = CBT_OTLP_GRPC;
    snprintf(c->endpoint, sizeof c->endpoint, "http://127.0.0.1:%d", g_port);
    snprintf(c->metrics_endpoint, sizeof c->metrics_endpoint, "http://127.0.0.1:%d", g_port);
    c->timeout_ms = 3000;
    c->schedule_delay_ms = 200;
    c->retry_budget_ms = 15000;
    c->shutdown_timeout_ms = 5000;
    snprintf(c->resource.service_name, sizeof c->resource.service_name, "grpc-test");
}

/* The tracer with a span file and the memory sink, then the exporter. */
static void cbt_start(cbt_otlp_config *c)
{
    cbt_config cfg = cbt_config_default();
    cfg.poll_interval_us = 50;
    cfg.jsonl_path = g_spans;
    tu_start(&cfg);
    g_fin = (cbt_otlp_stats)CBT_STRUCT_INIT(cbt_otlp_stats);
    c->final_stats = &g_fin;
    cbt_otlp_exporter *e = NULL;
    cbt_sink sink;
    assert_int_equal(cbt_otlp_exporter_create(c, &e, &sink), CBT_OK);
    assert_non_null(e);
    assert_int_equal(cbt_add_sink(&sink), CBT_OK);
}

#define N_GRPC_CODES (sizeof g_fin.failures_by_grpc_code / sizeof g_fin.failures_by_grpc_code[0])

static void print_fin(void)
{
    unsigned long long by_code = 0;
    for (size_t i = 0; i < N_GRPC_CODES; i++)
        by_code += g_fin.failures_by_grpc_code[i];
    printf("final_stats: queued %llu exported %llu dropped %llu batches %llu failed %llu "
           "retries %llu bytes %llu metrics %llu/%llu failures by code %llu\n",
           (unsigned long long)g_fin.spans_queued, (unsigned long long)g_fin.spans_exported,
           (unsigned long long)g_fin.spans_dropped, (unsigned long long)g_fin.batches_sent,
           (unsigned long long)g_fin.batches_failed, (unsigned long long)g_fin.retries,
           (unsigned long long)g_fin.bytes_sent, (unsigned long long)g_fin.metrics_exports,
           (unsigned long long)g_fin.metrics_failures, by_code);
}

/* cbt_shutdown_final; the spans given to the exporter (the memory sink's
 * count), asserting that it accounted for each: exported + dropped. */
static uint64_t cbt_stop(void)
{
    cbt_metrics m;
    tu_stop_final(&m);
    uint64_t given = tu_span_count();
    print_fin();
    printf("spans given %llu\n", (unsigned long long)given);
    assert_true(given > 0);
    assert_int_equal(g_fin.spans_queued, given);
    assert_int_equal(g_fin.spans_exported + g_fin.spans_dropped, given);
    assert_int_equal(m.sink_spans_lost, g_fin.spans_dropped);
    return given;
}

static uint64_t grpc_failures(size_t code)
{
    return g_fin.failures_by_grpc_code[code];
}

static uint64_t grpc_failures_total(void)
{
    uint64_t t = 0;
    for (size_t i = 0; i < N_GRPC_CODES; i++)
        t += g_fin.failures_by_grpc_code[i];
    return t;
}

enum { GRPC_INVALID_ARGUMENT = 3, GRPC_RESOURCE_EXHAUSTED = 8, GRPC_UNAVAILABLE = 14 };

/* ---- publishing ------------------------------------------------------------------------------ */

static void pub(cbt_event *e)
{
    assert_int_equal(cbt_publish(e), CBT_OK);
}


/* A request with every kind of value: string, int, double and bool
 * attributes (non-ASCII and multi-line strings too), a failed store (status
 * ERROR), a timeout (a span with an `exception` span event whose attributes
 * are strings), and `pad` bytes of string in its lookup (0: none). */
static void pub_rich(const char *sid, size_t pad)
{
    static char big[CBT_EVENT_STR_AREA];
    cbt_event e;
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    assert_int_equal(cbt_event_init(&e, CBT_EV_MP_LOOKUP_PREFETCH_START, sid), CBT_OK);
    assert_int_equal(cbt_event_i64(&e, tu_name("num_tokens"), 4096), CBT_OK);
    assert_int_equal(cbt_event_str(&e, tu_name("model"), "llama-3-8b naïve ✓"), CBT_OK);
    if (pad) {
        assert_true(pad < sizeof big);
        memset(big, 'p', pad);
        big[pad] = '\0';
        assert_int_equal(cbt_event_str(&e, tu_name("pad"), big), CBT_OK);
    }
    pub(&e);
    assert_int_equal(cbt_event_init(&e, CBT_EV_MP_LOOKUP_PREFETCH_END, sid), CBT_OK);
    assert_int_equal(cbt_event_i64(&e, tu_name("hit_tokens"), -7), CBT_OK);
    assert_int_equal(cbt_event_i64(&e, tu_name("requested_tokens"), INT64_MAX), CBT_OK);
    assert_int_equal(cbt_event_f64(&e, tu_name("score"), 0.1), CBT_OK);
    assert_int_equal(cbt_event_bool(&e, tu_name("cached"), true), CBT_OK);
    assert_int_equal(cbt_event_bool(&e, tu_name("evicted"), false), CBT_OK);
    pub(&e);
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    tu_pub(CBT_EV_MP_STORE_START, sid);
    assert_int_equal(cbt_event_init(&e, CBT_EV_MP_STORE_END, sid), CBT_OK);
    assert_int_equal(cbt_event_bool(&e, tu_name("failed"), true), CBT_OK);
    assert_int_equal(cbt_event_str(&e, tu_name("error"), "disk full"), CBT_OK);
    pub(&e);
    assert_int_equal(cbt_event_init(&e, CBT_EV_TIMEOUT_RAISED, sid), CBT_OK);
    assert_int_equal(cbt_event_str(&e, tu_name("exception_type"), "TimeoutError"), CBT_OK);
    assert_int_equal(cbt_event_str(&e, tu_name("message"), "store took 5 s"), CBT_OK);
    assert_int_equal(cbt_event_str(&e, tu_name("stacktrace"),
                                   "Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                                   "TimeoutError: \"quoted\" \\ tab\t"),
                     CBT_OK);
    pub(&e);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
}

/* ---- the cases ---------------------------------------------------------------------------- */

/* Spans and metrics arrive whole and decode with the official classes:
 * every attribute with its type, parents, span events, status, an
 * incomplete span (cbt.incomplete); the headers as gRPC metadata; the
 * resource; the metric values fed in. */
static void grpc_spans_and_metrics_whole(void **state)
{
    (void)state;
    begin("grpc_spans_and_metrics_whole");
    col_start("", 0, NULL);
    cbt_blend_metrics *set = NULL;
    assert_int_equal(cbt_blend_metrics_create(&set), CBT_OK);
    cbt_blend_count(set, CBT_BC_LOOKUP_REQUESTS, 7);
    cbt_blend_count(set, CBT_BC_L2_LOAD_BYTES, 1ull << 40);
    for (int i = 0; i < 3; i++)
        cbt_blend_observe(set, CBT_BH_LOOKUP, 2.5 * (i + 1), NULL);
    cbt_otlp_config c;
    grpc_config(&c);
    snprintf(c.headers[0].key, sizeof c.headers[0].key, "x-cbt-test");
    snprintf(c.headers[0].value, sizeof c.headers[0].value, "whole");
    c.n_headers = 1;
    c.blend = set;
    c.metrics_interval_ms = 0; /* on cbt_flush and at shutdown */
    cbt_start(&c);
    for (int i = 0; i < 3; i++) {
        char sid[32];
        snprintf(sid, sizeof sid, "rich-%d", i);
        pub_rich(sid, 0);
    }
    tu_pub_mp_requests("w", 4);
    tu_pub(CBT_EV_MP_REQUEST_START, "open-0"); /* ended by shutdown: incomplete */
    tu_flush();
    uint64_t given = cbt_stop();
    cbt_blend_metrics_free(set);

    /* the premise: the spans carry what this case claims to compare */
    int events = 0, errors = 0, incomplete = 0;
    for (uint32_t i = 0; i < tu_span_count(); i++) {
        const cbt_span *s = tu_span(i);
        events += s->n_events > 0;
        errors += s->status == CBT_SPAN_STATUS_ERROR;
        incomplete += (s->flags & CBT_SPANF_INCOMPLETE) != 0;
    }
    assert_true(events >= 3);
    assert_true(errors >= 3);
    assert_true(incomplete >= 1);
    const cbt_span *lp = tu_find("mp.lookup_prefetch", "rich-0", 0);
    assert_non_null(lp);
    assert_true(tu_has_attr(lp, "cached"));
    assert_true(tu_has_attr(lp, "score"));

    assert_int_equal(g_fin.spans_exported, given);
    assert_int_equal(g_fin.spans_dropped, 0);
    assert_int_equal(grpc_failures_total(), 0);
    assert_true(g_fin.metrics_exports >= 1);
    assert_int_equal(g_fin.metrics_failures, 0);
    assert_int_equal(col_stop(), 0);
    check_run(g_spans, NULL);
    check_ok();
    assert_int_equal(sum_ll("spans.cbt"), given);
    assert_int_equal(sum_ll("spans.unique"), given);
    assert_int_equal(sum_ll("spans.missing"), 0);
    assert_int_equal(sum_ll("traces.requests"), g_fin.batches_sent);
    assert_int_equal(sum_ll("traces.outcome.ok"), sum_ll("traces.requests"));
    assert_int_equal(sum_ll("traces.compression.identity"), sum_ll("traces.requests"));
    /* metrics may arrive more often than counted: a snapshot's export that
     * the exporter abandoned after the collector took it (a metrics export
     * yields to span batches) is sent again; its values are cumulative, so
     * a repeat is harmless. Spans have no such slack: above, and the
     * checker fails on a span accepted twice. */
    assert_true(sum_ll("metrics.accepted") >= (long long)g_fin.metrics_exports);
    assert_int_equal(sum_ll("metrics.outcome.ok"), sum_ll("metrics.requests"));
    char key[128];
    snprintf(key, sizeof key, "metric.%s", cbt_blend_counter_name(CBT_BC_LOOKUP_REQUESTS));
    assert_int_equal(sum_ll(key), 7);
    snprintf(key, sizeof key, "metric.%s", cbt_blend_counter_name(CBT_BC_L2_LOAD_BYTES));
    assert_int_equal(sum_ll(key), 1ll << 40);
    snprintf(key, sizeof key, "metric.%s.count", cbt_blend_hist_name(CBT_BH_LOOKUP));
    assert_int_equal(sum_ll(key), 3);
    assert_string_equal(sum_str("metadata.x-cbt-test"), "whole");
    assert_string_equal(sum_str("resource.service.name"), "grpc-test");
    assert_string_equal(sum_str("tls.version"), "none");
    /* the deadline travels as grpc-timeout: at most the configured 3 s */
    assert_true(sum_ll("timeout_ms.max") > 0 && sum_ll("timeout_ms.max") <= 3000);
}

/* gzip: every trace request crosses the wire compressed (as gRPC's
 * per-message gzip, seen before inflating) and smaller, and decodes whole. */
static void grpc_gzip(void **state)
{
    (void)state;
    begin("grpc_gzip");
    col_start("", 0, NULL);
    cbt_otlp_config c;
    grpc_config(&c);
    c.gzip = 1;
    cbt_start(&c);
    tu_pub_mp_requests("gz", 20);
    tu_flush();
    uint64_t given = cbt_stop();
    assert_int_equal(g_fin.spans_exported, given);
    assert_int_equal(col_stop(), 0);
    check_run(g_spans, NULL);
    check_ok();
    assert_int_equal(sum_ll("spans.unique"), given);
    assert_true(sum_ll("traces.requests") >= 1);
    assert_int_equal(sum_ll("traces.compression.gzip"), sum_ll("traces.requests"));
    assert_int_equal(sum_ll("gzip.not_smaller"), 0);
}

/* UNAVAILABLE twice, then the collector takes the batch: retried, nothing
 * lost, nothing counted as a failure. */
static void grpc_unavailable_then_recovers(void **state)
{
    (void)state;
    begin("grpc_unavailable_then_recovers");
    col_start("UNAVAILABLE*2", 0, NULL);
    cbt_otlp_config c;
    grpc_config(&c);
    cbt_start(&c);
    tu_pub_mp_requests("u", 5);
    assert_int_equal(cbt_flush(20000), CBT_OK);
    uint64_t given = cbt_stop();
    assert_int_equal(g_fin.spans_exported, given);
    assert_int_equal(g_fin.spans_dropped, 0);
    assert_true(g_fin.retries >= 2);
    assert_int_equal(grpc_failures_total(), 0);
    assert_int_equal(col_stop(), 0);
    check_run(g_spans, NULL);
    check_ok();
    assert_int_equal(sum_ll("traces.outcome.UNAVAILABLE"), 2);
    assert_true(sum_ll("traces.outcome.ok") >= 1);
    assert_int_equal(sum_ll("spans.unique"), given);
    assert_int_equal(sum_ll("spans.missing"), 0);
}

/* RESOURCE_EXHAUSTED with google.rpc.RetryInfo (1.5 s): retried, and not
 * before the delay it asked for (far longer than the first backoff steps). */
static void grpc_resource_exhausted_retry_info(void **state)
{
    (void)state;
    begin("grpc_resource_exhausted_retry_info");
    col_start("RESOURCE_EXHAUSTED@1500", 0, NULL);
    cbt_otlp_config c;
    grpc_config(&c);
    cbt_start(&c);
    tu_pub_mp_requests("ri", 3);
    assert_int_equal(cbt_flush(20000), CBT_OK);
    uint64_t given = cbt_stop();
    assert_int_equal(g_fin.spans_exported, given);
    assert_int_equal(g_fin.spans_dropped, 0);
    assert_true(g_fin.retries >= 1);
    assert_int_equal(grpc_failures(GRPC_RESOURCE_EXHAUSTED), 0);
    assert_int_equal(col_stop(), 0);
    check_run(g_spans, NULL);
    check_ok();
    assert_int_equal(sum_ll("traces.outcome.RESOURCE_EXHAUSTED"), 1);
    assert_int_equal(sum_ll("spans.missing"), 0);
    /* the collector's arrival stamps: 100 ms of slack for its own timing */
    long long gap = sum_ll("retry.gap_ms");
    printf("retry after %lld ms (RetryInfo: 1500)\n", gap);
    assert_true(gap >= 1400);
    assert_true(gap < 10000);
}

/* RESOURCE_EXHAUSTED without RetryInfo: not retried (the spec: only with
 * RetryInfo), the batch dropped and counted under code 8; the next batch
 * goes through. */
static void grpc_resource_exhausted_dropped(void **state)
{
    (void)state;
    begin("grpc_resource_exhausted_dropped");
    col_start("RESOURCE_EXHAUSTED", 0, NULL);
    cbt_otlp_config c;
    grpc_config(&c);
    cbt_start(&c);
    tu_pub_mp_requests("re", 3);
    tu_flush();
    tu_pub_mp_requests("after", 2);
    tu_flush();
    uint64_t given = cbt_stop();
    assert_true(g_fin.spans_dropped > 0);
    assert_true(g_fin.spans_exported > 0);
    assert_int_equal(g_fin.retries, 0);
    assert_true(grpc_failures(GRPC_RESOURCE_EXHAUSTED) >= 1);
    assert_int_equal(grpc_failures_total(), grpc_failures(GRPC_RESOURCE_EXHAUSTED));
    assert_int_equal(col_stop(), 0);
    check_run(g_spans, NULL);
    check_ok();
    assert_int_equal(sum_ll("traces.outcome.RESOURCE_EXHAUSTED"), 1); /* once: no retry */
    assert_int_equal(sum_ll("spans.refused"), g_fin.spans_dropped);
    assert_int_equal(sum_ll("spans.missing"), g_fin.spans_dropped);
    assert_int_equal(sum_ll("spans.unique"), g_fin.spans_exported);
    assert_int_equal(sum_ll("spans.cbt"), given);
}

/* INVALID_ARGUMENT: a permanent error, dropped at once, counted under 3. */
static void grpc_invalid_argument_dropped(void **state)
{
    (void)state;
    begin("grpc_invalid_argument_dropped");
    col_start("INVALID_ARGUMENT", 0, NULL);
    cbt_otlp_config c;
    grpc_config(&c);
    cbt_start(&c);
    tu_pub_mp_requests("ia", 2);
    tu_flush();
    cbt_stop();
    assert_true(g_fin.spans_dropped > 0);
    assert_int_equal(g_fin.retries, 0);
    assert_true(grpc_failures(GRPC_INVALID_ARGUMENT) >= 1);
    assert_int_equal(grpc_failures_total(), grpc_failures(GRPC_INVALID_ARGUMENT));
    assert_int_equal(col_stop(), 0);
    check_run(g_spans, NULL);
    check_ok();
    assert_int_equal(sum_ll("traces.outcome.INVALID_ARGUMENT"), 1);
    assert_int_equal(sum_ll("spans.missing"), g_fin.spans_dropped);
}

/* A collector that holds the call past the client's deadline: the client
 * gives up at its timeout (DEADLINE_EXCEEDED), retries, and delivers. */
static void grpc_deadline_exceeded_from_stall(void **state)
{
    (void)state;
    begin("grpc_deadline_exceeded_from_stall");
    col_start("stall=8000", 0, NULL);
    cbt_otlp_config c;
    grpc_config(&c);
    c.timeout_ms = 800;
    cbt_start(&c);
    tu_pub_mp_requests("dl", 3);
    double t0 = mono_s();
    assert_int_equal(cbt_flush(20000), CBT_OK);
    printf("flush took %.2f s\n", mono_s() - t0);
    assert_true(mono_s() - t0 < 6.0); /* not the stall's 8 s */
    uint64_t given = cbt_stop();
    assert_int_equal(g_fin.spans_exported, given);
    assert_int_equal(g_fin.spans_dropped, 0);
    assert_true(g_fin.retries >= 1);
    assert_int_equal(col_stop(), 0);
    check_run(g_spans, NULL);
    check_ok();
    assert_int_equal(sum_ll("traces.outcome.deadline"), 1); /* the client left the call */
    assert_true(sum_ll("timeout_ms.max") <= 800);
    assert_int_equal(sum_ll("spans.missing"), 0);
}

/* The collector dies in the middle of a call (no answer, no GOAWAY) and a
 * new one comes up on the same port: the batch is retried into it. */
static void grpc_server_killed_and_restarted(void **state)
{
    (void)state;
    begin("grpc_server_killed_and_restarted");
    col_start("ok,kill", 0, NULL);
    int port = g_port;
    cbt_otlp_config c;
    grpc_config(&c);
    cbt_start(&c);
    tu_pub_mp_requests("k1", 3);
    tu_flush(); /* the first batch: ok */
    tu_pub_mp_requests("k2", 3); /* its batch kills the collector (schedule_delay_ms) */
    assert_int_equal(col_wait_exit(15000), 3);
    col_start("", port, NULL);
    assert_int_equal(cbt_flush(25000), CBT_OK);
    uint64_t given = cbt_stop();
    assert_int_equal(g_fin.spans_exported, given);
    assert_int_equal(g_fin.spans_dropped, 0);
    assert_true(g_fin.retries >= 1);
    assert_int_equal(col_stop(), 0);
    check_run(g_spans, NULL);
    check_ok();
    assert_int_equal(sum_ll("traces.outcome.killed"), 1);
    assert_int_equal(sum_ll("events.ready"), 2);
    assert_int_equal(sum_ll("spans.unique"), given);
    assert_int_equal(sum_ll("spans.missing"), 0);
}

/* GOAWAY: after answering the second batch the collector stops (GOAWAY on
 * the connection) and serves again; the third batch goes out on a new
 * connection. */
static void grpc_goaway(void **state)
{
    (void)state;
    begin("grpc_goaway");
    col_start("ok,goaway", 0, NULL);
    cbt_otlp_config c;
    grpc_config(&c);
    cbt_start(&c);
    tu_pub_mp_requests("g1", 3);
    tu_flush();
    tu_pub_mp_requests("g2", 3);
    tu_flush();
    sleep_ms(500);
    tu_pub_mp_requests("g3", 3);
    assert_int_equal(cbt_flush(20000), CBT_OK);
    uint64_t given = cbt_stop();
    assert_int_equal(g_fin.spans_exported, given);
    assert_int_equal(g_fin.spans_dropped, 0);
    assert_int_equal(col_stop(), 0);
    check_run(g_spans, NULL);
    check_ok();
    assert_int_equal(sum_ll("events.goaway"), 1);
    assert_int_equal(sum_ll("events.restarted"), 1);
    assert_true(sum_ll("peers") >= 2);
    assert_int_equal(sum_ll("spans.missing"), 0);
}

/* The server ends connections past their age (gRPC's
 * max_connection_age: a GOAWAY every 400 ms, as behind a load balancer):
 * batches over two seconds all arrive. */
static void grpc_goaway_connection_age(void **state)
{
    (void)state;
    begin("grpc_goaway_connection_age");
    const char *age[] = {"--max-connection-age-ms", "400", NULL};
    col_start("", 0, age);
    cbt_otlp_config c;
    grpc_config(&c);
    cbt_start(&c);
    for (int i = 0; i < 10; i++) {
        char p[16];
        snprintf(p, sizeof p, "age%d", i);
        tu_pub_mp_requests(p, 2);
        assert_int_equal(cbt_flush(20000), CBT_OK);
        sleep_ms(200);
    }
    uint64_t given = cbt_stop();
    assert_int_equal(g_fin.spans_exported, given);
    assert_int_equal(g_fin.spans_dropped, 0);
    assert_int_equal(col_stop(), 0);
    check_run(g_spans, NULL);
    check_ok();
    assert_true(sum_ll("peers") >= 2);
    assert_int_equal(sum_ll("spans.missing"), 0);
}

/* partial_success: accepted, the rejected spans counted as dropped, not
 * retried. */
static void grpc_partial_success(void **state)
{
    (void)state;
    begin("grpc_partial_success");
    col_start("partial=2:two spans were too old", 0, NULL);
    cbt_otlp_config c;
    grpc_config(&c);
    cbt_start(&c);
    tu_pub_mp_requests("ps", 3);
    tu_flush();
    uint64_t given = cbt_stop();
    assert_int_equal(g_fin.spans_dropped, 2);
    assert_int_equal(g_fin.spans_exported, given - 2);
    assert_int_equal(g_fin.retries, 0);
    assert_int_equal(col_stop(), 0);
    check_run(g_spans, NULL);
    check_ok();
    assert_int_equal(sum_ll("traces.outcome.partial"), 1);
    assert_int_equal(sum_ll("spans.rejected"), 2);
    assert_int_equal(sum_ll("spans.unique"), given);
}

/* max_message_bytes: one batch (max_batch spans, one flush) bigger than the
 * bound goes out as several messages, each within it. */
static void grpc_batch_split_max_message_bytes(void **state)
{
    (void)state;
    begin("grpc_batch_split_max_message_bytes");
    col_start("", 0, NULL);
    cbt_otlp_config c;
    grpc_config(&c);
    c.max_message_bytes = 16384;
    c.max_batch = 4096;
    c.schedule_delay_ms = 30000; /* only the flush sends: one batch */
    cbt_start(&c);
    tu_pub_mp_requests("split", 200);
    tu_flush();
    uint64_t given = cbt_stop();
    assert_int_equal(g_fin.spans_exported, given);
    assert_int_equal(g_fin.spans_dropped, 0);
    assert_int_equal(col_stop(), 0);
    check_run(g_spans, "--max-request-bytes", "16384", NULL);
    check_ok();
    assert_true(sum_ll("traces.bytes.total") > 4 * 16384); /* the batch did need splitting */
    assert_true(sum_ll("traces.requests") >= 4);
    assert_int_equal(sum_ll("spans.unique"), given);
}

/* A batch over gRPC's 4 MiB receive limit (the collector keeps gRPC's
 * default, as the OpenTelemetry Collector does) with max_message_bytes at
 * its default: split, every message accepted. */
static void grpc_batch_over_4mib_split(void **state)
{
    (void)state;
    begin("grpc_batch_over_4mib_split");
    col_start("", 0, NULL);
    cbt_otlp_config c;
    grpc_config(&c);
    c.max_batch = 16384;
    c.schedule_delay_ms = 30000;
    c.timeout_ms = 20000;
    cbt_start(&c);
    for (int i = 0; i < 2600; i++) { /* about 2 KB of string a lookup span: 5+ MiB */
        char sid[32];
        snprintf(sid, sizeof sid, "big-%d", i);
        pub_rich(sid, 1800);
    }
    assert_int_equal(cbt_flush(60000), CBT_OK);
    uint64_t given = cbt_stop();
    assert_int_equal(g_fin.spans_exported, given);
    assert_int_equal(g_fin.spans_dropped, 0);
    assert_int_equal(grpc_failures_total(), 0);
    assert_int_equal(col_stop(), 0);
    check_run(g_spans, "--max-request-bytes", "4194304", NULL);
    check_ok();
    printf("%lld bytes in %lld requests\n", sum_ll("traces.bytes.total"),
           sum_ll("traces.requests"));
    assert_true(sum_ll("traces.bytes.total") > 4194304);
    assert_true(sum_ll("traces.requests") >= 2);
    assert_int_equal(sum_ll("spans.unique"), given);
}

static char g_certs[PATH_MAX], g_ca[PATH_MAX], g_ckey[PATH_MAX], g_ccert[PATH_MAX];

/* The test CA, a server certificate for 127.0.0.1 and localhost, and a
 * client certificate (tests/grpc_collector.py certs: openssl), made once. */
static void make_certs(void)
{
    if (g_certs[0])
        return;
    PATH_FMT(g_certs, "%s/certs", g_root);
    char *argv[] = {g_python, (char *)CBT_SOURCE_DIR "/tests/grpc_collector.py",
                    (char *)"certs", g_certs, NULL};
    int rc = run(argv, NULL, NULL, 0, 60000);
    if (rc == 77) { /* no openssl command: said above; the TLS cases skip */
        g_certs[0] = '\0';
        skip();
    }
    if (rc != 0) {
        g_certs[0] = '\0';
        fail_msg("could not make the test certificates (exit %d)", rc);
    }
    PATH_FMT(g_ca, "%s/ca.pem", g_certs);
    PATH_FMT(g_ckey, "%s/client.key", g_certs);
    PATH_FMT(g_ccert, "%s/client.pem", g_certs);
}

static void tls_config(cbt_otlp_config *c)
{
    grpc_config(c);
    snprintf(c->endpoint, sizeof c->endpoint, "https://127.0.0.1:%d", g_port);
    snprintf(c->metrics_endpoint, sizeof c->metrics_endpoint, "https://127.0.0.1:%d", g_port);
    c->insecure = 0;
}

/* TLS with the test CA as the trust root: delivered over TLS. */
static void grpc_tls_self_signed_ca(void **state)
{
    (void)state;
    begin("grpc_tls_self_signed_ca");
    make_certs();
    const char *tls[] = {"--tls", g_certs, NULL};
    col_start("", 0, tls);
    cbt_otlp_config c;
    tls_config(&c);
    SET_PATH(c.certificate, g_ca);
    cbt_start(&c);
    tu_pub_mp_requests("tls", 3);
    tu_flush();
    uint64_t given = cbt_stop();
    assert_int_equal(g_fin.spans_exported, given);
    assert_int_equal(col_stop(), 0);
    check_run(g_spans, NULL);
    check_ok();
    assert_true(strncmp(sum_str("tls.version"), "TLS", 3) == 0);
    assert_string_equal(sum_str("tls.client_cn"), "none");
    assert_int_equal(sum_ll("spans.unique"), given);
}

/* The same collector, a client that does not trust its CA (the system's
 * roots): no request gets through, every span is dropped and counted. */
static void grpc_tls_untrusted_ca_refused(void **state)
{
    (void)state;
    begin("grpc_tls_untrusted_ca_refused");
    make_certs();
    const char *tls[] = {"--tls", g_certs, NULL};
    col_start("", 0, tls);
    cbt_otlp_config c;
    tls_config(&c);
    c.retry_budget_ms = 1500;
    cbt_start(&c);
    tu_pub_mp_requests("untrusted", 2);
    (void)cbt_flush(10000); /* may time out while it retries; the stats tell */
    uint64_t given = cbt_stop();
    assert_int_equal(g_fin.spans_exported, 0);
    assert_int_equal(g_fin.spans_dropped, given);
    assert_int_equal(col_stop(), 0);
    check_run(g_spans, NULL);
    check_ok();
    assert_int_equal(sum_ll("traces.requests"), 0);
}

/* A collector that requires a client certificate: with the configured key
 * and certificate, delivered, and the collector saw the client's CN. */
static void grpc_tls_client_certificate(void **state)
{
    (void)state;
    begin("grpc_tls_client_certificate");
    make_certs();
    const char *mtls[] = {"--tls", g_certs, "--require-client-cert", NULL};
    col_start("", 0, mtls);
    cbt_otlp_config c;
    tls_config(&c);
    SET_PATH(c.certificate, g_ca);
    SET_PATH(c.client_key, g_ckey);
    SET_PATH(c.client_certificate, g_ccert);
    cbt_start(&c);
    tu_pub_mp_requests("mtls", 3);
    tu_flush();
    uint64_t given = cbt_stop();
    assert_int_equal(g_fin.spans_exported, given);
    assert_int_equal(col_stop(), 0);
    check_run(g_spans, NULL);
    check_ok();
    assert_string_equal(sum_str("tls.client_cn"), "cbt test client");
    assert_int_equal(sum_ll("spans.unique"), given);
}

/* ... and without a client certificate: refused at the handshake, nothing
 * delivered, every span dropped and counted. */
static void grpc_tls_client_certificate_required(void **state)
{
    (void)state;
    begin("grpc_tls_client_certificate_required");
    make_certs();
    const char *mtls[] = {"--tls", g_certs, "--require-client-cert", NULL};
    col_start("", 0, mtls);
    cbt_otlp_config c;
    tls_config(&c);
    SET_PATH(c.certificate, g_ca);
    c.retry_budget_ms = 1500;
    cbt_start(&c);
    tu_pub_mp_requests("nocert", 2);
    (void)cbt_flush(10000);
    uint64_t given = cbt_stop();
    assert_int_equal(g_fin.spans_exported, 0);
    assert_int_equal(g_fin.spans_dropped, given);
    assert_int_equal(col_stop(), 0);
    check_run(g_spans, NULL);
    assert_int_equal(sum_ll("traces.requests"), 0);
}

/* OTEL_EXPORTER_OTLP_PROTOCOL=grpc and its _TRACES_ form select gRPC. */
static void grpc_env_protocol(void **state)
{
    (void)state;
    static const char *const vars[] = {"OTEL_EXPORTER_OTLP_PROTOCOL",
                                       "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"};
    for (size_t i = 0; i < 2; i++) {
        unsetenv(vars[0]);
        unsetenv(vars[1]);
        setenv(vars[i], "grpc", 1);
        cbt_otlp_config c;
        cbt_otlp_config_default(&c);
        assert_int_equal(cbt_otlp_config_from_env(&c, stderr), CBT_OK);
        assert_int_equal(c.protocol, CBT_OTLP_GRPC);
        unsetenv(vars[i]);
    }
}

/* `OTEL_EXPORTER_OTLP_PROTOCOL=grpc cbt demo --enable-tracing
 * --otlp-endpoint http://127.0.0.1:<port>`: the collector gets every span
 * the demo counts in its summary, each equal to its span file's. */
static void grpc_demo_delivers_every_span(void **state)
{
    (void)state;
    begin("grpc_demo_delivers_every_span");
    col_start("", 0, NULL);
    char url[64], trace[PATH_MAX];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", g_port);
    PATH_FMT(trace, "%s/demo-trace.json", g_dir);
    char *argv[] = {(char *)CBT_CLI_PATH, (char *)"demo", (char *)"--cpu", (char *)"--requests",
                    (char *)"24", (char *)"--trees", (char *)"0", (char *)"--slowest",
                    (char *)"0", (char *)"--enable-tracing", (char *)"--otlp-endpoint", url,
                    (char *)"--spans", g_spans, (char *)"--output", trace, NULL};
    /* the environment: ours, less any OTEL_ variable, plus the protocol */
    static char *envp[512];
    size_t n = 0;
    for (char **e = environ; *e && n < 510; e++)
        if (strncmp(*e, "OTEL_", 5) != 0)
            envp[n++] = *e;
    envp[n++] = (char *)"OTEL_EXPORTER_OTLP_PROTOCOL=grpc";
    envp[n] = NULL;
    static char out[1 << 16];
    int rc = run(argv, envp, out, sizeof out, 120000);
    printf("%s", out);
    assert_int_equal(rc, 0);
    const char *s = strstr(out, "| spans ");
    assert_non_null(s);
    unsigned long long spans = strtoull(s + 8, NULL, 10);
    const char *o = strstr(out, "OTLP: ");
    assert_non_null(o);
    unsigned long long exported = strtoull(o + 6, NULL, 10);
    const char *d = strstr(o, ", ");
    assert_non_null(d);
    unsigned long long dropped = strtoull(d + 2, NULL, 10);
    printf("demo: spans %llu, OTLP exported %llu, dropped %llu\n", spans, exported, dropped);
    assert_true(spans > 0);
    assert_int_equal(exported, spans);
    assert_int_equal(dropped, 0);
    assert_int_equal(col_stop(), 0);
    check_run(g_spans, NULL);
    check_ok();
    assert_int_equal(sum_ll("spans.cbt"), spans);
    assert_int_equal(sum_ll("spans.unique"), spans);
    assert_int_equal(sum_ll("spans.missing"), 0);
}
#endif /* CBT_TEST_OTLP_GRPC */

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN); /* a collector that died while we wrote to it */
    const char *why = prepare();
    if (why) {
        printf("SKIP: test_otlp_grpc: %s\n", why);
        return 77;
    }
    const struct CMUnitTest harness[] = {
        cmocka_unit_test_setup_teardown(harness_collector_lifecycle, setup, teardown),
        cmocka_unit_test_setup_teardown(harness_collector_ends_and_restarts_on_port, setup,
                                        teardown),
    };
    int failed = cmocka_run_group_tests_name("grpc_collector_harness", harness, NULL, NULL);
#if CBT_TEST_OTLP_GRPC
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(grpc_spans_and_metrics_whole, setup, teardown),
        cmocka_unit_test_setup_teardown(grpc_gzip, setup, teardown),
        cmocka_unit_test_setup_teardown(grpc_unavailable_then_recovers, setup, teardown),
        cmocka_unit_test_setup_teardown(grpc_resource_exhausted_retry_info, setup, teardown),
        cmocka_unit_test_setup_teardown(grpc_resource_exhausted_dropped, setup, teardown),
        cmocka_unit_test_setup_teardown(grpc_invalid_argument_dropped, setup, teardown),
        cmocka_unit_test_setup_teardown(grpc_deadline_exceeded_from_stall, setup, teardown),
        cmocka_unit_test_setup_teardown(grpc_server_killed_and_restarted, setup, teardown),
        cmocka_unit_test_setup_teardown(grpc_goaway, setup, teardown),
        cmocka_unit_test_setup_teardown(grpc_goaway_connection_age, setup, teardown),
        cmocka_unit_test_setup_teardown(grpc_partial_success, setup, teardown),
        cmocka_unit_test_setup_teardown(grpc_batch_split_max_message_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(grpc_batch_over_4mib_split, setup, teardown),
        cmocka_unit_test_setup_teardown(grpc_tls_self_signed_ca, setup, teardown),
        cmocka_unit_test_setup_teardown(grpc_tls_untrusted_ca_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(grpc_tls_client_certificate, setup, teardown),
        cmocka_unit_test_setup_teardown(grpc_tls_client_certificate_required, setup, teardown),
        cmocka_unit_test(grpc_env_protocol),
        cmocka_unit_test_setup_teardown(grpc_demo_delivers_every_span, setup, teardown),
    };
    failed += cmocka_run_group_tests_name("otlp_grpc", tests, NULL, NULL);
    g_case_failed = failed != 0;
    remove_root();
    return failed ? 1 : 0;
#else
    g_case_failed = failed != 0;
    remove_root();
    if (failed)
        return 1;
    printf("SKIP: test_otlp_grpc: the exporter has no gRPC yet (include/cbt/otlp.h has no "
           "CBT_OTLP_GRPC; the collector harness's own cases passed)\n");
    return 77;
#endif
}
