/* bench/bench_stall.c — what a sink that stops costs everyone else, through
 * the public API only (one source for any core: bench/compare_core.sh).
 *
 * A sink stalls:
 *   --sink block (the default)  a cbt_sink of our own (cbt_add_sink) whose
 *                               on_span, once armed, waits on a condition
 *                               variable until the bench releases it;
 *   --sink fifo                 cbt's JSON-lines span file on a FIFO whose
 *                               reader reads 4 KiB and stops: the file's
 *                               write() blocks once the pipe is full.
 * The bench publishes an MP request (4 spans; fifo: 3000 of them) from the
 * main thread and waits until the sink is stuck (block: on_span entered;
 * fifo: the pipe full). Then, each from a thread of its own, one at a time:
 *   stall_attached_publish_us  a publish from the main thread (it has a lane)
 *   stall_first_publish_ms     a NEW thread's first cbt_publish (takes a lane)
 *   stall_metrics_get_ms       cbt_metrics_get
 *   stall_flush_100ms          cbt_flush(100): elapsed and the status
 *   stall_flush_500ms          cbt_flush(500): elapsed and the status
 * A call that has not returned after --watchdog seconds (default 2) is
 * reported "waited > Xs (blocked)" and left waiting; after the last one the
 * sink is released and the bench says how long the blocked calls took to
 * return (stall_release_ms), flushes, checks what the sink received and
 * shuts down. The same five calls are first measured with the sink
 * flowing (calm_*), for reference. alarm() ends the process, saying so,
 * should anything still hang past the watchdogs.
 *
 * Targets (docs/performance.md, "Never waits"): with the sink stalled, a
 * new thread's first publish <= 1 ms, cbt_metrics_get <= 1 ms, cbt_flush(t)
 * returns CBT_ERR_TIMEOUT within t + 50 ms.
 *
 * Output: one line per measure, "key<TAB>value<TAB>(comment)".
 * Usage: bench_stall [--sink block|fifo] [--watchdog S]
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "cbt.h"

static struct {
    int fifo;
    double watchdog;
} opt = {.watchdog = 2.0};

static void kv(const char *key, const char *value, const char *comment)
{
    printf("%s\t%s\t%s\n", key, value, comment ? comment : "");
    fflush(stdout);
}

static const char *status_name(cbt_status st)
{
    switch (st) {
    case CBT_OK:
        return "CBT_OK";
    case CBT_ERR_TIMEOUT:
        return "CBT_ERR_TIMEOUT";
    case CBT_ERR_FULL:
        return "CBT_ERR_FULL";
    case CBT_ERR_NOT_INITIALIZED:
        return "CBT_ERR_NOT_INITIALIZED";
    default:
        return "other";
    }
}

static void sleep_s(double s)
{
    struct timespec d = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&d, &d) == -1 && errno == EINTR)
        ;
}

/* ---- the stalling sink (--sink block) ---- */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int armed, released;
    _Atomic int entered;    /* on_span is waiting */
    _Atomic uint64_t spans; /* on_span calls */
} g_stall = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0};

static cbt_status stall_on_span(void *ctx, const cbt_span *s)
{
    (void)ctx, (void)s;
    atomic_fetch_add(&g_stall.spans, 1);
    pthread_mutex_lock(&g_stall.mu);
    while (g_stall.armed && !g_stall.released) {
        atomic_store(&g_stall.entered, 1);
        pthread_cond_wait(&g_stall.cv, &g_stall.mu); /* as a sink stuck in I/O */
    }
    pthread_mutex_unlock(&g_stall.mu);
    return CBT_OK;
}

static void stall_set(int armed, int released)
{
    pthread_mutex_lock(&g_stall.mu);
    g_stall.armed = armed;
    g_stall.released = released;
    pthread_cond_broadcast(&g_stall.cv);
    pthread_mutex_unlock(&g_stall.mu);
}

/* ---- the FIFO and its reader (--sink fifo) ---- */

#define FIFO_FIRST 4096 /* bytes the reader takes before it stops */

static struct {
    char dir[64], path[96];
    pthread_t th;
    int fd;
    _Atomic int released, opened;
    _Atomic uint64_t bytes, lines;
} g_fifo;

static void fifo_count(const char *b, ssize_t n)
{
    uint64_t l = 0;
    for (ssize_t i = 0; i < n; i++)
        l += b[i] == '\n';
    atomic_fetch_add(&g_fifo.lines, l);
    atomic_fetch_add(&g_fifo.bytes, (uint64_t)n);
}

static void *fifo_reader(void *arg)
{
    (void)arg;
    static char buf[1 << 16];
    g_fifo.fd = open(g_fifo.path, O_RDONLY); /* pairs with the sink's open */
    atomic_store(&g_fifo.opened, 1);
    if (g_fifo.fd < 0)
        return NULL;
    ssize_t r = read(g_fifo.fd, buf, FIFO_FIRST); /* a little, then stop */
    if (r > 0)
        fifo_count(buf, r);
    while (!atomic_load(&g_fifo.released))
        sleep_s(0.001);
    while ((r = read(g_fifo.fd, buf, sizeof buf)) > 0 || (r < 0 && errno == EINTR))
        if (r > 0)
            fifo_count(buf, r);
    return NULL;
}

/* 1 when the pipe is full (within a page): its writer waits in write(). */
static int fifo_full(void)
{
    if (!atomic_load(&g_fifo.opened) || g_fifo.fd < 0) /* fd: written before opened */
        return 0;
    int queued = 0, cap = fcntl(g_fifo.fd, F_GETPIPE_SZ);
    if (ioctl(g_fifo.fd, FIONREAD, &queued) < 0 || cap <= 0)
        return 0;
    return queued >= cap - 4096;
}

/* ---- one call, timed, on a thread of its own ---- */

enum { M_PUBLISH, M_METRICS, M_FLUSH };

typedef struct measure {
    int kind;
    uint32_t flush_ms;
    pthread_t th;
    _Atomic int done;
    double ms, returned_at; /* the call's duration; when it returned (monotonic s) */
    cbt_status st;
} measure;

static cbt_event_type g_probe; /* registered, no subscriber: dispatched to nobody */

static void *measure_main(void *arg)
{
    measure *m = arg;
    cbt_event e;
    cbt_metrics mt = CBT_STRUCT_INIT(cbt_metrics);
    cbt_event_init(&e, g_probe, "stall-probe");
    double t0 = now_s();
    if (m->kind == M_PUBLISH)
        m->st = cbt_publish(&e);
    else if (m->kind == M_METRICS)
        m->st = cbt_metrics_get(&mt);
    else
        m->st = cbt_flush(m->flush_ms);
    m->returned_at = now_s();
    m->ms = (m->returned_at - t0) * 1e3;
    atomic_store(&m->done, 1);
    return NULL;
}

static measure g_m[16];
static int g_nm;

/* Start one call on a new thread; wait for it at most the watchdog; print
 * its line. Returns the measure (still running when blocked). */
static measure *run_one(const char *key, int kind, uint32_t flush_ms, const char *target)
{
    measure *m = &g_m[g_nm++];
    *m = (measure){.kind = kind, .flush_ms = flush_ms};
    if (pthread_create(&m->th, NULL, measure_main, m)) {
        perror("bench_stall: thread");
        exit(1);
    }
    double t0 = now_s();
    while (!atomic_load(&m->done) && now_s() - t0 < opt.watchdog)
        sleep_s(0.0002);
    char v[96];
    if (!atomic_load(&m->done))
        snprintf(v, sizeof v, "waited > %gs (blocked)", opt.watchdog);
    else if (kind == M_FLUSH)
        snprintf(v, sizeof v, "%.2f ms %s", m->ms, status_name(m->st));
    else
        snprintf(v, sizeof v, "%.3f", m->ms);
    kv(key, v, target);
    return m;
}

static void calm_and_stalled(const char *prefix)
{
    char k[64];
    int stalled = prefix[0] == 's';
    snprintf(k, sizeof k, "%s_first_publish_ms", prefix);
    run_one(k, M_PUBLISH, 0, stalled ? "(a new thread's first publish; target <= 1 ms)" : NULL);
    snprintf(k, sizeof k, "%s_metrics_get_ms", prefix);
    run_one(k, M_METRICS, 0, stalled ? "(target <= 1 ms)" : NULL);
    snprintf(k, sizeof k, "%s_flush_100ms", prefix);
    run_one(k, M_FLUSH, 100, stalled ? "(target: CBT_ERR_TIMEOUT within 150 ms)" : NULL);
    snprintf(k, sizeof k, "%s_flush_500ms", prefix);
    run_one(k, M_FLUSH, 500, stalled ? "(target: CBT_ERR_TIMEOUT within 550 ms)" : NULL);
}

/* ---- the run ---- */

static const cbt_event_type REQ[10] = {
    CBT_EV_MP_REQUEST_START,     CBT_EV_MP_LOOKUP_PREFETCH_START, CBT_EV_MP_LOOKUP_PREFETCH_END,
    CBT_EV_MP_RETRIEVE_SUBMITTED, CBT_EV_MP_RETRIEVE_START,       CBT_EV_MP_RETRIEVE_END,
    CBT_EV_MP_STORE_SUBMITTED,   CBT_EV_MP_STORE_START,           CBT_EV_MP_STORE_END,
    CBT_EV_MP_REQUEST_END};

static void publish_requests(int n, uint64_t *refused)
{
    for (int q = 0; q < n; q++) {
        char sid[48];
        snprintf(sid, sizeof sid, "cmpl-stall-%08d", q);
        for (int j = 0; j < 10; j++) {
            cbt_event e;
            cbt_event_init(&e, REQ[j], sid);
            if (REQ[j] == CBT_EV_MP_STORE_START)
                cbt_event_i64(&e, CBT_N_NUM_TOKENS, 768);
            *refused += cbt_publish(&e) != CBT_OK;
        }
    }
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "bench_stall\twaited > the alarm (blocked)\t(a call never "
                              "returned, even after the sink was released: giving up)\n";
    (void)!write(1, msg, sizeof msg - 1);
    _exit(3);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--sink") && v && (!strcmp(v, "block") || !strcmp(v, "fifo")))
            opt.fifo = !strcmp(v, "fifo"), i++;
        else if (!strcmp(a, "--watchdog") && v && atof(v) > 0)
            opt.watchdog = atof(v), i++;
        else {
            fprintf(stderr, "usage: bench_stall [--sink block|fifo] [--watchdog S]\n");
            return 2;
        }
    }
    signal(SIGALRM, on_alarm);
    alarm((unsigned)(opt.watchdog * 12) + 30); /* the watchdogs, the release, start and end */
    kv("sink", opt.fifo ? "fifo" : "block",
       opt.fifo ? "(cbt's JSON-lines file on a FIFO whose reader stopped)"
                : "(a cbt_sink whose on_span waits on a condition variable)");
    if (cbt_event_type_register("bench.stall.probe", &g_probe) != CBT_OK) {
        fprintf(stderr, "bench_stall: cannot register the probe event\n");
        return 1;
    }
    cbt_config c = cbt_config_default();
    if (opt.fifo) {
        snprintf(g_fifo.dir, sizeof g_fifo.dir, "/tmp/cbt-stall-XXXXXX");
        if (!mkdtemp(g_fifo.dir)) {
            perror("bench_stall: mkdtemp");
            return 1;
        }
        snprintf(g_fifo.path, sizeof g_fifo.path, "%s/spans.jsonl", g_fifo.dir);
        if (mkfifo(g_fifo.path, 0600)) {
            perror("bench_stall: mkfifo");
            return 1;
        }
        g_fifo.fd = -1;
        pthread_create(&g_fifo.th, NULL, fifo_reader, NULL);
        c.jsonl_path = g_fifo.path;
    }
    if (cbt_init(&c) != CBT_OK) {
        fprintf(stderr, "bench_stall: cbt_init failed\n");
        return 1;
    }
    if (!opt.fifo) {
        cbt_sink k;
        memset(&k, 0, sizeof k);
        k.version = CBT_SINK_VERSION;
        k.size = sizeof k;
        k.name = "bench-stall";
        k.on_span = stall_on_span;
        if (cbt_add_sink(&k) != CBT_OK) {
            fprintf(stderr, "bench_stall: cbt_add_sink failed\n");
            return 1;
        }
    }
    sleep_s(0.1); /* start-up */
    calm_and_stalled("calm");

    /* the stall */
    uint64_t refused = 0;
    int n_req = opt.fifo ? 3000 : 1;
    stall_set(1, 0);
    double t0 = now_s();
    publish_requests(n_req, &refused);
    int stuck = 0;
    while (now_s() - t0 < 10 && !stuck) {
        stuck = opt.fifo ? fifo_full() : atomic_load(&g_stall.entered);
        if (!stuck)
            sleep_s(0.0005);
    }
    char v[96];
    if (stuck)
        snprintf(v, sizeof v, "%.1f", (now_s() - t0) * 1e3);
    else
        snprintf(v, sizeof v, "never (no stall in 10 s: the measures below are not stalled)");
    kv("stall_sink_stuck_ms", v, opt.fifo ? "(publishing 3000 requests until the pipe is full)"
                                          : "(publishing one request until on_span waits)");
    if (opt.fifo)
        sleep_s(0.05); /* the writer is inside write() */

    /* a publish from a thread that has its lane: the main thread */
    cbt_event e;
    cbt_event_init(&e, g_probe, "stall-probe");
    double p0 = now_s();
    cbt_status pst = cbt_publish(&e);
    snprintf(v, sizeof v, "%.3f %s", (now_s() - p0) * 1e6, status_name(pst));
    kv("stall_attached_publish_us", v, "(the main thread, lane taken before the stall)");
    int first = g_nm;
    calm_and_stalled("stall");

    /* release, and see the blocked calls return */
    double r0 = now_s();
    if (opt.fifo)
        atomic_store(&g_fifo.released, 1);
    else
        stall_set(1, 1);
    int blocked = 0;
    double last = r0;
    for (int i = first; i < g_nm; i++) {
        pthread_join(g_m[i].th, NULL);
        if (g_m[i].returned_at > r0) {
            blocked++;
            if (g_m[i].returned_at > last)
                last = g_m[i].returned_at;
        }
    }
    snprintf(v, sizeof v, "%d calls, the last %.1f ms after the release", blocked, (last - r0) * 1e3);
    kv("stall_release", v, "(calls still blocked when the sink was released)");
    for (int i = 0; i < first; i++)
        pthread_join(g_m[i].th, NULL);
    cbt_status fst = cbt_flush(30000);
    cbt_shutdown();
    if (opt.fifo)
        pthread_join(g_fifo.th, NULL);
    uint64_t got = opt.fifo ? atomic_load(&g_fifo.lines) : atomic_load(&g_stall.spans);
    snprintf(v, sizeof v, "%llu of %llu, flush after the release %s, %llu refused",
             (unsigned long long)got, (unsigned long long)n_req * 4, status_name(fst),
             (unsigned long long)refused);
    kv("spans_delivered", v, "(every span reaches the sink once it flows again)");
    if (opt.fifo) {
        unlink(g_fifo.path);
        rmdir(g_fifo.dir);
    }
    return 0;
}
