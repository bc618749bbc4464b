/* bench/bench_load.c — cbt end to end under load, and at rest: producer
 * threads publish MP requests (7 events, 3 spans each: the request root,
 * mp.lookup_prefetch, mp.store), cbt with its default config builds the
 * spans, and its OTLP/HTTP exporter (default config but the endpoint) sends
 * them to a loopback HTTP sink in this process that reads each request and
 * answers 200.
 *
 * Load (the default): for each target rate (spans/s), run for a while, then
 * cbt_flush, and print what was delivered (spans the collector accepted per
 * second of the run), what was lost and where (cbt_metrics.dropped_full: a
 * full lane; spans_dropped: the span pool; the exporter's spans_dropped: its
 * queue full or a batch failed), the process CPU per delivered span
 * (getrusage), and the CPU of each thread (/proc/self/task: where the time
 * goes). A rate of 0 is flat out.
 *
 * Idle (--idle): 2 requests/s for 5 s (--quick: 2 s) and the process CPU per
 * second of wall time: what cbt costs a nearly idle server.
 *
 * Usage: bench_load [--quick] [--idle] [--rate SPANS_PER_S]... [--threads N]
 *                   [--seconds S] [--lane CELLS] [--max-queue N] [--max-batch N]
 *                   [--delay MS]
 * Without --rate: 0.25, 0.5, 1, 1.5, 2 M spans/s and flat out. The capacity
 * options change the cbt / exporter defaults (to measure them); without
 * them, every setting is the default. docs/performance.md has the figures.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include <errno.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "cbt.h"
#include "cbt/otlp.h"

/* ---- a loopback HTTP sink: read each request, answer 200 ---- */

#define SINK_CONNS 16
#define SINK_BUF (64u << 20) /* the largest request it reads (bytes) */

typedef struct conn {
    int fd;
    char *buf;
    size_t len;
} conn;

typedef struct http_sink {
    int lfd;
    uint16_t port;
    pthread_t th;
    _Atomic int stop;
    conn c[SINK_CONNS];
    _Atomic uint64_t requests, bytes;
} http_sink;

static const char OK_REPLY[] = "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\n"
                               "Content-Length: 0\r\n\r\n";

/* Answer every complete request in c->buf; 0 when the connection must close. */
static int serve(http_sink *s, conn *c)
{
    for (;;) {
        char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
        if (!end)
            return c->len < SINK_BUF;
        size_t hdr = (size_t)(end - c->buf) + 4, body = 0;
        for (char *p = c->buf; p < end; p++) {
            if ((p == c->buf || p[-1] == '\n') && strncasecmp(p, "content-length:", 15) == 0)
                body = strtoull(p + 15, NULL, 10);
            if ((p == c->buf || p[-1] == '\n') && strncasecmp(p, "expect: 100", 11) == 0 &&
                c->len == hdr) {
                static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
                if (write(c->fd, cont, sizeof cont - 1) < 0)
                    return 0;
            }
        }
        if (hdr + body > SINK_BUF)
            return 0;
        if (c->len < hdr + body)
            return 1;
        if (write(c->fd, OK_REPLY, sizeof OK_REPLY - 1) != (ssize_t)(sizeof OK_REPLY - 1))
            return 0;
        atomic_fetch_add(&s->requests, 1);
        atomic_fetch_add(&s->bytes, body);
        memmove(c->buf, c->buf + hdr + body, c->len - hdr - body);
        c->len -= hdr + body;
    }
}

static void *sink_main(void *arg)
{
    http_sink *s = arg;
    while (!atomic_load(&s->stop)) {
        struct pollfd p[1 + SINK_CONNS];
        int map[1 + SINK_CONNS], n = 0;
        p[n] = (struct pollfd){.fd = s->lfd, .events = POLLIN};
        map[n++] = -1;
        for (int i = 0; i < SINK_CONNS; i++)
            if (s->c[i].fd >= 0) {
                p[n] = (struct pollfd){.fd = s->c[i].fd, .events = POLLIN};
                map[n++] = i;
            }
        if (poll(p, (nfds_t)n, 500) <= 0) /* stop is seen within 0.5 s */
            continue;
        for (int k = 0; k < n; k++) {
            if (!p[k].revents)
                continue;
            if (map[k] < 0) {
                int fd = accept(s->lfd, NULL, NULL);
                int slot = -1;
                for (int i = 0; i < SINK_CONNS && slot < 0; i++)
                    if (s->c[i].fd < 0)
                        slot = i;
                if (fd >= 0 && slot < 0)
                    close(fd);
                else if (fd >= 0)
                    s->c[slot] = (conn){fd, s->c[slot].buf, 0};
                continue;
            }
            conn *c = &s->c[map[k]];
            ssize_t r = read(c->fd, c->buf + c->len, SINK_BUF - c->len);
            if (r > 0)
                c->len += (size_t)r;
            if (r <= 0 || !serve(s, c)) {
                close(c->fd);
                c->fd = -1;
            }
        }
    }
    return NULL;
}

static http_sink *sink_start(void)
{
    http_sink *s = calloc(1, sizeof *s);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    s->lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (s->lfd < 0 || bind(s->lfd, (struct sockaddr *)&a, sizeof a) || listen(s->lfd, 16) ||
        getsockname(s->lfd, (struct sockaddr *)&a, &al)) {
        perror("bench_load: loopback sink");
        exit(1);
    }
    s->port = ntohs(a.sin_port);
    for (int i = 0; i < SINK_CONNS; i++) {
        s->c[i].fd = -1;
        s->c[i].buf = malloc(SINK_BUF);
    }
    pthread_create(&s->th, NULL, sink_main, s);
    return s;
}

static void sink_stop(http_sink *s)
{
    atomic_store(&s->stop, 1);
    pthread_join(s->th, NULL);
    for (int i = 0; i < SINK_CONNS; i++) {
        if (s->c[i].fd >= 0)
            close(s->c[i].fd);
        free(s->c[i].buf);
    }
    close(s->lfd);
    free(s);
}

/* ---- options ---- */

static struct {
    int quick, idle, threads;
    double seconds;
    uint32_t lane, max_queue, max_batch, delay_ms;
    int delay_set;
    double rates[16];
    int n_rates;
} opt = {.threads = 1};

/* ---- cbt with the exporter ---- */

static cbt_otlp_exporter *g_exp;

static void start_cbt(http_sink *s)
{
    cbt_config c = cbt_config_default();
    if (opt.lane)
        c.lane_capacity = opt.lane;
    if (cbt_init(&c) != CBT_OK) {
        fprintf(stderr, "bench_load: cbt_init failed\n");
        exit(1);
    }
    cbt_otlp_config oc;
    cbt_otlp_config_default(&oc);
    snprintf(oc.endpoint, sizeof oc.endpoint, "http://127.0.0.1:%u/v1/traces", (unsigned)s->port);
    if (opt.max_queue)
        oc.max_queue = opt.max_queue;
    if (opt.max_batch)
        oc.max_batch = opt.max_batch;
    if (opt.delay_set)
        oc.schedule_delay_ms = opt.delay_ms;
    cbt_sink k;
    if (cbt_otlp_exporter_create(&oc, &g_exp, &k) != CBT_OK || cbt_add_sink(&k) != CBT_OK) {
        fprintf(stderr, "bench_load: OTLP exporter failed\n");
        exit(1);
    }
}

/* ---- producers ---- */

static const cbt_event_type REQ[] = {
    CBT_EV_MP_REQUEST_START,   CBT_EV_MP_LOOKUP_PREFETCH_START, CBT_EV_MP_LOOKUP_PREFETCH_END,
    CBT_EV_MP_STORE_SUBMITTED, CBT_EV_MP_STORE_START,           CBT_EV_MP_STORE_END,
    CBT_EV_MP_REQUEST_END};
#define SPANS_PER_REQ 3

typedef struct producer {
    pthread_t th;
    int id;
    double req_rate; /* requests/s of this thread; 0 = flat out */
    double until;    /* CLOCK_MONOTONIC end */
    uint64_t requests, refused;
    double cpu_s;
} producer;

static double thread_cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void publish_request(producer *p, uint64_t q)
{
    char sid[48];
    snprintf(sid, sizeof sid, "cmpl-%02d-%012llx", p->id, (unsigned long long)q);
    for (size_t j = 0; j < sizeof REQ / sizeof REQ[0]; j++) {
        cbt_event e;
        cbt_event_init(&e, REQ[j], sid);
        if (REQ[j] == CBT_EV_MP_LOOKUP_PREFETCH_END) {
            cbt_event_i64(&e, CBT_N_HIT_TOKENS, 256);
            cbt_event_i64(&e, CBT_N_REQUESTED_TOKENS, 1024);
        } else if (REQ[j] == CBT_EV_MP_STORE_START) {
            cbt_event_i64(&e, CBT_N_NUM_TOKENS, 1024);
        }
        if (cbt_publish(&e) != CBT_OK)
            p->refused++;
    }
}

static void *producer_main(void *arg)
{
    producer *p = arg;
    double c0 = thread_cpu_s(), t0 = now_s();
    for (uint64_t q = 0;; q++) {
        double t = now_s();
        if (t >= p->until)
            break;
        if (p->req_rate > 0) {
            double due = t0 + (double)q / p->req_rate;
            if (t < due) { /* paced: sleep, never spin (the CPU figure stays honest);
                              * a sleep that overshoots is caught up in a burst */
                struct timespec d = {0, (long)((due - t) * 1e9)};
                nanosleep(&d, NULL);
            }
        }
        publish_request(p, q);
        p->requests++;
    }
    p->cpu_s = thread_cpu_s() - c0;
    return NULL;
}

static double process_cpu_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec * 1e-6 +
           (double)u.ru_stime.tv_sec + (double)u.ru_stime.tv_usec * 1e-6;
}

/* CPU seconds of every thread of this process, by tid (ascending: the order
 * they were made in), from /proc/self/task/TID/stat. Returns how many. */
#define MAX_TASKS 64
static int task_cpu(int tid[MAX_TASKS], double cpu[MAX_TASKS])
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    struct dirent *de;
    long hz = sysconf(_SC_CLK_TCK);
    while (d && (de = readdir(d)) && n < MAX_TASKS) {
        if (de->d_name[0] == '.')
            continue;
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/self/task/%s/stat", de->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t r = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[r] = 0;
        char *p = strrchr(buf, ')');
        unsigned long ut = 0, st = 0;
        /* after ")": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
        if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2) {
            int i = n++;
            tid[i] = atoi(de->d_name);
            cpu[i] = (double)(ut + st) / (double)hz;
            while (i > 0 && tid[i - 1] > tid[i]) { /* insertion sort by tid */
                int tt = tid[i];
                double cc = cpu[i];
                tid[i] = tid[i - 1], cpu[i] = cpu[i - 1];
                tid[i - 1] = tt, cpu[i - 1] = cc;
                i--;
            }
        }
    }
    if (d)
        closedir(d);
    return n;
}

/* One run at `rate` spans/s (0: flat out) for `secs`. */
static void run_load(http_sink *s, double rate, double secs)
{
    start_cbt(s);
    producer p[16];
    int nt = opt.threads;
    double cpu0 = process_cpu_s(), t0 = now_s();
    uint64_t req0 = atomic_load(&s->requests), bytes0 = atomic_load(&s->bytes);
    for (int i = 0; i < nt; i++) {
        p[i] = (producer){.id = i, .req_rate = rate / SPANS_PER_REQ / nt, .until = t0 + secs};
        pthread_create(&p[i].th, NULL, producer_main, &p[i]);
    }
    uint64_t requests = 0;
    for (int i = 0; i < nt; i++) {
        pthread_join(p[i].th, NULL);
        requests += p[i].requests;
    }
    double t_pub = now_s() - t0;
    cbt_status fst = cbt_flush(60000);
    double t_all = now_s() - t0;
    int tid[MAX_TASKS];
    double tcpu[MAX_TASKS];
    int ntask = task_cpu(tid, tcpu);
    double cpu = process_cpu_s() - cpu0;
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    cbt_metrics_get(&m);
    cbt_otlp_stats x = CBT_STRUCT_INIT(cbt_otlp_stats);
    cbt_otlp_exporter_stats(g_exp, &x);
    cbt_shutdown();
    uint64_t spans = requests * SPANS_PER_REQ;
    double pc = 0;
    for (int i = 0; i < nt; i++)
        pc += p[i].cpu_s;
    printf("rate %5.2f M/s  offered %6.3f M spans/s  delivered %6.3f M spans/s  "
           "lost: lanes %llu events, span pool %llu, exporter %llu spans  "
           "cpu %.2f us/span (%.2f without the producers)  lag_max %.2f ms  %llu requests %.1f MB%s\n",
           rate / 1e6, (double)spans / t_pub / 1e6, (double)x.spans_exported / t_all / 1e6,
           (unsigned long long)m.dropped_full, (unsigned long long)m.spans_dropped,
           (unsigned long long)x.spans_dropped,
           x.spans_exported ? cpu / (double)x.spans_exported * 1e6 : 0.0,
           x.spans_exported ? (cpu - pc) / (double)x.spans_exported * 1e6 : 0.0,
           (double)m.lag_max_ns * 1e-6,
           (unsigned long long)(atomic_load(&s->requests) - req0),
           (double)(atomic_load(&s->bytes) - bytes0) / 1e6,
           fst == CBT_OK ? "" : "  (flush timed out)");
    /* threads in creation order: main, the sink, the harvester, the
     * exporter, the producers (the producers have exited: their CPU is the
     * last column) */
    printf("    thread cpu s:");
    for (int i = 0; i < ntask; i++)
        printf(" %s=%.2f", i == 0 ? "main" : i == 1 ? "sink" : i == 2 ? "harvester" : i == 3 ? "exporter" : "other",
               tcpu[i]);
    printf(" producers=%.2f  (run %.2f s)\n", pc, t_all);
    fflush(stdout);
}

/* 2 requests/s for `secs`: process CPU per wall second. */
static void run_idle(http_sink *s, double secs)
{
    start_cbt(s);
    producer p = {.id = 0};
    uint64_t q = 0;
    /* one request first, not counted: the thread's lane is taken and faulted
     * in once (8 MiB by default, lane.c), a one-time cost, not an idle one */
    double w0 = process_cpu_s();
    publish_request(&p, q++);
    struct timespec settle = {0, 200000000};
    nanosleep(&settle, NULL); /* start-up (clock fit, first rounds) not counted */
    double warm = process_cpu_s() - w0;
    double cpu0 = process_cpu_s(), t0 = now_s();
    while (now_s() - t0 < secs) {
        publish_request(&p, q++);
        struct timespec d = {0, 500000000};
        nanosleep(&d, NULL);
    }
    double cpu = process_cpu_s() - cpu0, wall = now_s() - t0;
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    cbt_metrics_get(&m);
    cbt_shutdown();
    printf("idle: %llu requests at 2/s over %.1f s: process cpu %.3f ms per second "
           "(%llu harvester wake-ups, %llu events dispatched; the first request and "
           "its lane's set-up, not counted: %.3f ms)\n",
           (unsigned long long)q - 1, wall, cpu / wall * 1e3,
           (unsigned long long)m.harvester_wakeups, (unsigned long long)m.dispatched, warm * 1e3);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "0";
        if (!strcmp(a, "--quick"))
            opt.quick = 1;
        else if (!strcmp(a, "--idle"))
            opt.idle = 1;
        else if (!strcmp(a, "--rate") && opt.n_rates < 16)
            opt.rates[opt.n_rates++] = atof(v), i++;
        else if (!strcmp(a, "--threads"))
            opt.threads = atoi(v), i++;
        else if (!strcmp(a, "--seconds"))
            opt.seconds = atof(v), i++;
        else if (!strcmp(a, "--lane"))
            opt.lane = (uint32_t)atoi(v), i++;
        else if (!strcmp(a, "--max-queue"))
            opt.max_queue = (uint32_t)atoi(v), i++;
        else if (!strcmp(a, "--max-batch"))
            opt.max_batch = (uint32_t)atoi(v), i++;
        else if (!strcmp(a, "--delay"))
            opt.delay_ms = (uint32_t)atoi(v), opt.delay_set = 1, i++;
        else {
            fprintf(stderr, "usage: bench_load [--quick] [--idle] [--rate SPANS_PER_S]... "
                            "[--threads N] [--seconds S] [--lane CELLS] [--max-queue N] "
                            "[--max-batch N] [--delay MS]\n");
            return 2;
        }
    }
    if (opt.threads < 1 || opt.threads > 16)
        opt.threads = 1;
    http_sink *s = sink_start();
    if (opt.idle) {
        run_idle(s, opt.seconds > 0 ? opt.seconds : opt.quick ? 2.0 : 5.0);
    } else {
        static const double sweep[] = {0.25e6, 0.5e6, 1e6, 1.5e6, 2e6, 0};
        const double *r = opt.n_rates ? opt.rates : sweep;
        int n = opt.n_rates ? opt.n_rates : (int)(sizeof sweep / sizeof sweep[0]);
        double secs = opt.seconds > 0 ? opt.seconds : opt.quick ? 0.5 : 3.0;
        for (int i = 0; i < n; i++)
            run_load(s, r[i], secs);
    }
    sink_stop(s);
    return 0;
}
