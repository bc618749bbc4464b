/* tests/test_three_proc.c — one CacheBlend request across three processes
 * (issue #5; seed cacheblend-v3-observability §2 and §5).
 *
 * The test runs a loopback OTLP/HTTP collector (tests/http_loopback.c) and
 * starts three copies of tests/cb_role.c — the vLLM scheduler, the vLLM
 * worker and the LMCache blend server — each a separate process with its own
 * cbt tracer on the CPU backend, exporting to that collector. They talk over
 * socketpairs and pass W3C traceparents in the messages. The test decodes
 * every span the collector received (protoc-c code from exporter/proto) and
 * checks:
 *   req-a   (Option A) one trace, the §2 tree exactly, every cross-process
 *           edge (cb.lookup under cb.lookup.rpc, cb.execute under cb.request,
 *           cb.retrieve under cb.start_load_kv), each span owned by the
 *           process the seed names (service.name), one cb.request only;
 *   req-off sampled out at the root: no span for it in any process;
 *   req-b   (no context sent, Option B) every process's spans in the trace
 *           derived from the request id, each process's top span a root
 *           (siblings, not nested).
 * request_id is on every span. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cbt/context.h"
#include "cli/demo_cb.h"
#include "http_loopback.h"
#include "testutil.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb-c.h"

extern char **environ;

typedef Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceRequest pb_request;
typedef Opentelemetry__Proto__Trace__V1__Span pb_span;
typedef Opentelemetry__Proto__Common__V1__KeyValue pb_kv;

#define MAX_SPANS 512

typedef struct rspan {
    char service[64];
    char name[64];
    char rid[64];
    uint8_t trace_id[16], span_id[8], parent[8];
    int has_parent;
    int kind;
    uint64_t start, end;
    const pb_span *pb;
} rspan;

static rspan g_spans[MAX_SPANS];
static size_t g_n;
static pb_request *g_req[512];
static size_t g_nreq;

static const char *kv_str(pb_kv *const *kv, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(kv[i]->key, key) == 0 && kv[i]->value &&
            kv[i]->value->value_case == OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE)
            return kv[i]->value->string_value;
    return NULL;
}

static void copy_id(uint8_t *dst, ProtobufCBinaryData b, size_t n)
{
    assert_int_equal(b.len, n);
    memcpy(dst, b.data, n);
}

static void collect(hl_server *srv)
{
    uint32_t n = hl_request_count(srv);
    for (uint32_t i = 0; i < n; i++) {
        hl_request r;
        assert_true(hl_request_get(srv, i, &r));
        if (strcmp(r.path, "/v1/traces") != 0) { /* metrics go elsewhere */
            hl_request_free(&r);
            continue;
        }
        pb_request *pr = opentelemetry__proto__collector__trace__v1__export_trace_service_request__unpack(
            NULL, r.body_len, r.body);
        hl_request_free(&r);
        assert_non_null(pr);
        assert_true(g_nreq < 512);
        g_req[g_nreq++] = pr;
        for (size_t a = 0; a < pr->n_resource_spans; a++) {
            const Opentelemetry__Proto__Trace__V1__ResourceSpans *rs = pr->resource_spans[a];
            assert_non_null(rs->resource);
            const char *svc = kv_str(rs->resource->attributes, rs->resource->n_attributes,
                                     "service.name");
            assert_non_null(svc);
            for (size_t b = 0; b < rs->n_scope_spans; b++)
                for (size_t k = 0; k < rs->scope_spans[b]->n_spans; k++) {
                    const pb_span *p = rs->scope_spans[b]->spans[k];
                    assert_true(g_n < MAX_SPANS);
                    rspan *s = &g_spans[g_n++];
                    memset(s, 0, sizeof *s);
                    snprintf(s->service, sizeof s->service, "%s", svc);
                    snprintf(s->name, sizeof s->name, "%s", p->name);
                    const char *rid = kv_str(p->attributes, p->n_attributes, "request_id");
                    if (!rid)
                        fail_msg("span %s from %s has no request_id", p->name, svc);
                    snprintf(s->rid, sizeof s->rid, "%s", rid);
                    copy_id(s->trace_id, p->trace_id, 16);
                    copy_id(s->span_id, p->span_id, 8);
                    if (p->parent_span_id.len) {
                        copy_id(s->parent, p->parent_span_id, 8);
                        s->has_parent = 1;
                    }
                    s->kind = (int)p->kind;
                    s->start = p->start_time_unix_nano;
                    s->end = p->end_time_unix_nano;
                    s->pb = p;
                }
        }
    }
}

static size_t count_of(const char *rid, const char *name)
{
    size_t n = 0;
    for (size_t i = 0; i < g_n; i++)
        if (strcmp(g_spans[i].rid, rid) == 0 && (!name || strcmp(g_spans[i].name, name) == 0))
            n++;
    return n;
}

/* The one span `name` of `rid`, owned by `service`. */
static const rspan *one(const char *rid, const char *name, const char *service)
{
    const rspan *hit = NULL;
    for (size_t i = 0; i < g_n; i++)
        if (strcmp(g_spans[i].rid, rid) == 0 && strcmp(g_spans[i].name, name) == 0) {
            if (hit)
                fail_msg("%s: more than one %s", rid, name);
            hit = &g_spans[i];
        }
    if (!hit)
        fail_msg("%s: no span %s", rid, name);
    if (strcmp(hit->service, service) != 0)
        fail_msg("%s: %s came from %s, the seed says %s", rid, name, hit->service, service);
    return hit;
}

static void assert_child(const rspan *c, const rspan *p)
{
    if (!c->has_parent || memcmp(c->parent, p->span_id, 8) != 0 ||
        memcmp(c->trace_id, p->trace_id, 16) != 0)
        fail_msg("%s (%s) is not a child of %s (%s)", c->name, c->service, p->name, p->service);
    if (c->start < p->start)
        fail_msg("%s starts before its parent %s", c->name, p->name);
}

static pid_t spawn_role(const char *role, const char *url, int fd3, int fd4)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd3, 3);
    posix_spawn_file_actions_adddup2(&fa, fd4, 4);
    char *argv[] = {(char *)CB_ROLE_PATH, (char *)role, (char *)url, NULL};
    pid_t pid = -1;
    int rc = posix_spawn(&pid, CB_ROLE_PATH, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        fail_msg("posix_spawn %s: %s", CB_ROLE_PATH, strerror(rc));
    return pid;
}

/* A socketpair whose ends sit at fds >= 100, close-on-exec (the dup2 onto
 * 3 and 4 in the child clears it there). */
static void pair(int sv[2])
{
    int t[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, t), 0);
    for (int i = 0; i < 2; i++) {
        sv[i] = fcntl(t[i], F_DUPFD_CLOEXEC, 100);
        assert_true(sv[i] >= 100);
        close(t[i]);
    }
}

/* Wait for all three (60 s at most, then kill them and fail). */
static void wait_all(pid_t *pids, const char **roles)
{
    time_t deadline = time(NULL) + 60;
    int left = 3, failed = 0;
    while (left > 0) {
        for (int i = 0; i < 3; i++) {
            if (pids[i] <= 0)
                continue;
            int st;
            pid_t r = waitpid(pids[i], &st, WNOHANG);
            if (r == pids[i]) {
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                    fprintf(stderr, "%s exited badly (status 0x%x)\n", roles[i], st);
                    failed = 1;
                }
                pids[i] = 0;
                left--;
            }
        }
        if (left == 0)
            break;
        if (time(NULL) > deadline) {
            for (int i = 0; i < 3; i++)
                if (pids[i] > 0) {
                    kill(pids[i], SIGKILL);
                    waitpid(pids[i], NULL, 0);
                    fprintf(stderr, "%s did not finish in 60 s: killed\n", roles[i]);
                }
            fail_msg("the three processes did not finish");
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (failed)
        fail_msg("a role process failed (see stderr)");
}

static void test_three_processes_one_trace(void **state)
{
    (void)state;
    hl_server *srv = hl_start();
    assert_non_null(srv);
    char url[128];
    hl_url(srv, "", url, sizeof url);

    int ss[2], ws[2], sw[2]; /* scheduler-server, worker-server, scheduler-worker */
    pair(ss);
    pair(ws);
    pair(sw);
    const char *roles[3] = {"scheduler", "worker", "server"};
    pid_t pids[3];
    pids[0] = spawn_role("scheduler", url, ss[0], sw[0]);
    pids[1] = spawn_role("worker", url, sw[1], ws[0]);
    pids[2] = spawn_role("server", url, ss[1], ws[1]);
    for (int i = 0; i < 2; i++) {
        close(ss[i]);
        close(ws[i]);
        close(sw[i]);
    }
    wait_all(pids, roles);
    collect(srv);
    hl_stop(srv);

    const char *SCHED = "vllm-scheduler", *WORKER = "vllm-worker", *SERVER = "lmcache-blend-server";

    /* ---- req-a: Option A, the seed's §2 tree ---- */
    const char *a = "req-a";
    const rspan *req = one(a, "cb.request", SCHED);
    assert_false(req->has_parent);
    const rspan *sched = one(a, "cb.schedule", SCHED);
    const rspan *rpc = one(a, "cb.lookup.rpc", SCHED);
    const rspan *lookup = one(a, "cb.lookup", SERVER);
    const rspan *fp = one(a, "cb.fingerprint_match", SERVER);
    const rspan *sp = one(a, "cb.sparse_prefetch", SERVER);
    const rspan *l2 = one(a, "cb.l2_load", SERVER);
    const rspan *cls = one(a, "cb.classify", SERVER);
    const rspan *meta = one(a, "cb.build_meta", SCHED);
    const rspan *ex = one(a, "cb.execute", WORKER);
    const rspan *slk = one(a, "cb.start_load_kv", WORKER);
    const rspan *ret = one(a, "cb.retrieve", SERVER);
    const rspan *sc = one(a, "cb.scatter", SERVER);
    const rspan *fwd = one(a, "cb.model_forward", WORKER);
    const rspan *fr = one(a, "cb.full_recomp", WORKER);
    const rspan *chk = one(a, "cb.check", WORKER);
    const rspan *part = one(a, "cb.partial", WORKER);
    assert_child(sched, req);
    assert_child(rpc, sched);
    assert_child(lookup, rpc);   /* scheduler -> server */
    assert_child(fp, lookup);
    assert_child(sp, lookup);
    assert_child(l2, sp);
    assert_child(cls, lookup);
    assert_child(meta, sched);
    assert_child(ex, req);       /* scheduler -> worker */
    assert_child(slk, ex);
    assert_child(ret, slk);      /* worker -> server */
    assert_child(sc, ret);
    assert_child(fwd, ex);
    assert_child(fr, fwd);
    assert_child(chk, fwd);
    assert_child(part, fwd);
    assert_int_equal(count_of(a, NULL), 17); /* nothing else, no second cb.request */
    assert_int_equal(count_of(a, "cb.prefix_lookup"), 0);
    assert_int_equal(rpc->kind, OPENTELEMETRY__PROTO__TRACE__V1__SPAN__SPAN_KIND__SPAN_KIND_CLIENT);
    assert_int_equal(lookup->kind, OPENTELEMETRY__PROTO__TRACE__V1__SPAN__SPAN_KIND__SPAN_KIND_SERVER);
    assert_int_equal(slk->kind, OPENTELEMETRY__PROTO__TRACE__V1__SPAN__SPAN_KIND__SPAN_KIND_CLIENT);
    assert_int_equal(ret->kind, OPENTELEMETRY__PROTO__TRACE__V1__SPAN__SPAN_KIND__SPAN_KIND_SERVER);
    /* the server's timing sits inside its caller's: the RPC covers the lookup */
    assert_true(lookup->end <= rpc->end);
    assert_true(ret->end <= slk->end);
    assert_true(sc->end - sc->start >= 200000); /* the stream work: 2 x work_us (100 us) */
    assert_true(part->start >= chk->end && chk->start >= fr->end); /* stream order */

    /* ---- req-off: sampled out at the root, nothing anywhere ---- */
    assert_int_equal(count_of("req-off", NULL), 0);

    /* ---- req-b: no context travelled; Option B ---- */
    const char *b = "req-b";
    uint8_t derived[16];
    cbt_trace_id_from_request(b, strlen(b), derived);
    size_t nb = 0;
    for (size_t i = 0; i < g_n; i++)
        if (strcmp(g_spans[i].rid, b) == 0) {
            nb++;
            if (memcmp(g_spans[i].trace_id, derived, 16) != 0)
                fail_msg("req-b: %s (%s) is not in the derived trace", g_spans[i].name,
                         g_spans[i].service);
        }
    assert_int_equal(nb, 17 + 1); /* the server's own cb.request appears too */
    const rspan *broot = one(b, "cb.execute", WORKER);
    assert_false(broot->has_parent); /* siblings, not nested */
    const rspan *bsrv = NULL;
    for (size_t i = 0; i < g_n; i++)
        if (strcmp(g_spans[i].rid, b) == 0 && strcmp(g_spans[i].name, "cb.request") == 0 &&
            strcmp(g_spans[i].service, SERVER) == 0)
            bsrv = &g_spans[i];
    assert_non_null(bsrv);
    assert_false(bsrv->has_parent);
    const rspan *blookup = one(b, "cb.lookup", SERVER);
    assert_child(blookup, bsrv);
    const rspan *bret = one(b, "cb.retrieve", SERVER);
    assert_child(bret, bsrv);

    for (size_t i = 0; i < g_nreq; i++)
        opentelemetry__proto__collector__trace__v1__export_trace_service_request__free_unpacked(
            g_req[i], NULL);
}

/* ---- the roles on bad peers (cli/demo_cb.c, in this process) ---------------------------- */

static double thread_cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A peer that closed: the role returns an error, with SIGPIPE at its default
 * (fatal) disposition — it must never be raised. */
static void role_peer_closed_is_an_error(void **state)
{
    (void)state;
    tu_start(NULL);
    void (*old)(int) = signal(SIGPIPE, SIG_DFL);
    int a[2], b[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, a), 0);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, b), 0);
    close(a[1]); /* the "server" is gone */
    cbt_cb_request q = {.rid = "r1", .send_ctx = 1, .prompt_tokens = 256, .load_passes = 1};
    cbt_cb_role_opts o = {.requests = &q, .n_requests = 1, .sampler = cbt_sampler_default(),
                          .peer_timeout_ms = 2000};
    char err[256];
    assert_int_equal(cbt_cb_role_run(CBT_CB_ROLE_SCHEDULER, a[0], b[0], &o, err, sizeof err), -1);
    print_message("scheduler with its server gone: %s\n", err);
    assert_true(strlen(err) > 0);
    signal(SIGPIPE, old);
    close(a[0]);
    close(b[0]);
    close(b[1]);
    tu_stop();
}

/* The server after one peer said QUIT and closed while the other stays
 * silent: it waits without spinning, and gives up after peer_timeout_ms. */
static void server_waits_quietly_then_times_out(void **state)
{
    (void)state;
    tu_start(NULL);
    int a[2], b[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, a), 0);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, b), 0);
    assert_int_equal(write(a[1], "QUIT\n", 5), 5);
    close(a[1]);
    cbt_cb_role_opts o = {.sampler = cbt_sampler_default(), .peer_timeout_ms = 400};
    char err[256];
    double c0 = thread_cpu_s();
    assert_int_equal(cbt_cb_role_run(CBT_CB_ROLE_SERVER, a[0], b[0], &o, err, sizeof err), -1);
    double cpu = thread_cpu_s() - c0;
    print_message("server: %s (%.3f s of CPU)\n", err, cpu);
    assert_non_null(strstr(err, "no message"));
    assert_true(cpu < 0.2);
    close(a[0]);
    close(b[0]);
    close(b[1]);
    tu_stop();
}

/* Malformed lines from a peer: a clean error, never a crash. */
static void server_refuses_malformed_lines(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "LOOKUP r\n",                                  /* too few fields */
        "LOOKUP r - 100 200 300\n",                    /* hits exceed the prompt */
        "LOOKUP r - 1x 0 0\n",                         /* not a number */
        "RETRIEVE r - 99999999999 1\n",                /* out of range */
        "FROB r\n",                                    /* unknown verb */
        "\n",                                          /* empty */
    };
    tu_start(NULL);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int a[2], b[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, a), 0);
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, b), 0);
        assert_true(write(a[1], bad[i], strlen(bad[i])) == (ssize_t)strlen(bad[i]));
        cbt_cb_role_opts o = {.sampler = cbt_sampler_default(), .peer_timeout_ms = 2000};
        char err[256] = "";
        assert_int_equal(cbt_cb_role_run(CBT_CB_ROLE_SERVER, a[0], b[0], &o, err, sizeof err),
                         -1);
        assert_true(strlen(err) > 0);
        close(a[0]);
        close(a[1]);
        close(b[0]);
        close(b[1]);
    }
    tu_stop();
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_three_processes_one_trace),
        cmocka_unit_test_teardown(role_peer_closed_is_an_error, tu_teardown),
        cmocka_unit_test_teardown(server_waits_quietly_then_times_out, tu_teardown),
        cmocka_unit_test_teardown(server_refuses_malformed_lines, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
