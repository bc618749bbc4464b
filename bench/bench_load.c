/* bench/bench_load.c — cbt end to end under load, and at rest: producer
 * threads publish MP requests (7 events, 3 spans each: the request root,
 * mp.lookup_prefetch, mp.store), cbt with its default config builds the
 * spans, and its OTLP/HTTP exporter (default config but the endpoint) sends
 * them to a loopback HTTP sink in this process (http_sink.h) that reads
 * each request and answers 200.
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
 * Protocols (--protocol, repeatable; default http): http sends OTLP/HTTP
 * protobuf to the HTTP/1.1 sink (http_sink.h); grpc sends OTLP/gRPC over h2c
 * to the nghttp2 sink (grpc_sink.h), which checks every request is a
 * well-formed gRPC unary call (`bad` in its line). With both, each rate runs
 * once per protocol, in the order given, so the two are measured in the
 * same process, minutes apart at most. A build without libnghttp2 has no
 * grpc sink: asking for it exits 77, saying so.
 *
 * Usage: bench_load [--quick] [--idle] [--rate SPANS_PER_S]... [--threads N]
 *                   [--seconds S] [--lane CELLS] [--max-queue N] [--max-batch N]
 *                   [--delay MS] [--protocol http|grpc]...
 * Without --rate: 0.25, 0.5, 1, 1.5, 2 M spans/s and flat out. The capacity
 * options change the cbt / exporter defaults (to measure them); without
 * them, every setting is the default. docs/performance.md has the figures.
 */
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "http_sink.h"
#ifdef CBT_BENCH_GRPC_SINK
#include "grpc_sink.h"
#endif
#include "cbt.h"
#include "cbt/otlp.h"

/* ---- options ---- */

static struct {
    int quick, idle, threads;
    double seconds;
    uint32_t lane, max_queue, max_batch, delay_ms;
    int delay_set;
    double rates[16];
    int n_rates;
    int protos[4]; /* 0 http, 1 grpc, in the order asked */
    int n_protos;
} opt = {.threads = 1};

/* ---- the collector: the HTTP/1.1 sink, or the h2c gRPC one ---- */

typedef struct sink {
    int grpc;
    http_sink *http;
#ifdef CBT_BENCH_GRPC_SINK
    grpc_sink *g;
#endif
} sink;

typedef struct sink_counts {
    uint64_t requests, bytes, bad, connections;
    double cpu_s; /* the sink thread's */
} sink_counts;

static int g_n_sinks; /* sink threads started: they come right after main */

static uint16_t sink_port(const sink *k)
{
#ifdef CBT_BENCH_GRPC_SINK
    if (k->grpc)
        return grpc_sink_port(k->g);
#endif
    return http_sink_port(k->http);
}

static sink_counts sink_now(sink *k)
{
#ifdef CBT_BENCH_GRPC_SINK
    if (k->grpc) {
        grpc_sink_counts g = grpc_sink_now(k->g);
        return (sink_counts){g.requests, g.bytes, g.bad, g.connections, g.cpu_s};
    }
#endif
    http_sink_counts h = http_sink_now(k->http);
    return (sink_counts){h.requests, h.bytes, 0, 0, h.cpu_s};
}

/* ---- cbt with the exporter ---- */

static cbt_otlp_exporter *g_exp;

static void start_cbt(sink *s)
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
    if (s->grpc) {
#ifdef CBT_OTLP_HAVE_GRPC /* else unreachable: main() skips gRPC (below) */
        oc.protocol = CBT_OTLP_GRPC;
#endif
        snprintf(oc.endpoint, sizeof oc.endpoint, "http://127.0.0.1:%u", (unsigned)sink_port(s));
    } else {
        snprintf(oc.endpoint, sizeof oc.endpoint, "http://127.0.0.1:%u/v1/traces",
                 (unsigned)sink_port(s));
    }
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
static void run_load(sink *s, double rate, double secs)
{
    start_cbt(s);
    producer p[16];
    int nt = opt.threads;
    double cpu0 = process_cpu_s(), t0 = now_s();
    sink_counts k0 = sink_now(s);
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
    sink_counts k1 = sink_now(s);
    uint64_t spans = requests * SPANS_PER_REQ;
    double pc = 0;
    for (int i = 0; i < nt; i++)
        pc += p[i].cpu_s;
    printf("%-4s rate %5.2f M/s  offered %6.3f M spans/s  delivered %6.3f M spans/s  "
           "lost: lanes %llu events, span pool %llu, exporter %llu spans  "
           "cpu %.2f us/span (%.2f without the producers, %.2f without them and the sink)  lag_max %.2f ms  %llu requests %.1f MB%s%s\n",
           s->grpc ? "grpc" : "http", rate / 1e6, (double)spans / t_pub / 1e6, (double)x.spans_exported / t_all / 1e6,
           (unsigned long long)m.dropped_full, (unsigned long long)m.spans_dropped,
           (unsigned long long)x.spans_dropped,
           x.spans_exported ? cpu / (double)x.spans_exported * 1e6 : 0.0,
           x.spans_exported ? (cpu - pc) / (double)x.spans_exported * 1e6 : 0.0,
           x.spans_exported
               ? (cpu - pc - (k1.cpu_s - k0.cpu_s)) / (double)x.spans_exported * 1e6
               : 0.0,
           (double)m.lag_max_ns * 1e-6,
           (unsigned long long)(k1.requests - k0.requests),
           (double)(k1.bytes - k0.bytes) / 1e6,
           fst == CBT_OK ? "" : "  (flush timed out)",
           k1.bad > k0.bad ? "  (the sink saw malformed gRPC requests)" : "");
    if (s->grpc)
        printf("    grpc: %llu bad requests, %llu connections so far, %llu failed batches\n",
               (unsigned long long)(k1.bad - k0.bad), (unsigned long long)k1.connections,
               (unsigned long long)x.batches_failed);
    /* threads in creation order: main, the sink(s), the harvester, the
     * exporter, the producers (the producers have exited: their CPU is the
     * last column). The exporter's CPU per exported span is the figure to
     * compare between protocols: the rest of cbt does the same work. */
    printf("    thread cpu s:");
    const int ns = g_n_sinks;
    for (int i = 0; i < ntask; i++)
        printf(" %s=%.2f", i == 0 ? "main" : i <= ns ? "sink" : i == ns + 1 ? "harvester"
                           : i == ns + 2 ? "exporter" : "other", tcpu[i]);
    if (ntask > ns + 2 && x.spans_exported)
        printf(" (exporter %.3f us/span)", tcpu[ns + 2] / (double)x.spans_exported * 1e6);
    printf(" producers=%.2f  (run %.2f s)\n", pc, t_all);
    fflush(stdout);
}

/* 2 requests/s for `secs`: process CPU per wall second. */
static void run_idle(sink *s, double secs)
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
        else if (!strcmp(a, "--protocol") && (!strcmp(v, "http") || !strcmp(v, "grpc")) &&
                 opt.n_protos < 4)
            opt.protos[opt.n_protos++] = !strcmp(v, "grpc"), i++;
        else {
            fprintf(stderr, "usage: bench_load [--quick] [--idle] [--rate SPANS_PER_S]... "
                            "[--threads N] [--seconds S] [--lane CELLS] [--max-queue N] "
                            "[--max-batch N] [--delay MS] [--protocol http|grpc]...\n");
            return 2;
        }
    }
    if (opt.threads < 1 || opt.threads > 16)
        opt.threads = 1;
    if (!opt.n_protos)
        opt.protos[opt.n_protos++] = 0;
    sink sinks[2] = {{.grpc = 0}, {.grpc = 1}};
    for (int i = 0; i < opt.n_protos; i++) {
        sink *k = &sinks[opt.protos[i]];
        if (!k->grpc && !k->http) {
            k->http = http_sink_start();
            g_n_sinks++;
        }
#ifndef CBT_OTLP_HAVE_GRPC
        if (k->grpc) {
            printf("SKIP: bench_load --protocol grpc: this cbt's exporter has no OTLP/gRPC\n");
            return 77;
        }
#endif
#ifdef CBT_BENCH_GRPC_SINK
        if (k->grpc && !k->g) {
            k->g = grpc_sink_start();
            g_n_sinks++;
        }
#else
        if (k->grpc) {
            printf("SKIP: bench_load --protocol grpc: built without libnghttp2 (nghttp2/nghttp2.h; "
                   "Debian libnghttp2-dev), so there is no gRPC sink\n");
            return 77;
        }
#endif
    }
    if (opt.idle) {
        for (int i = 0; i < opt.n_protos; i++)
            run_idle(&sinks[opt.protos[i]], opt.seconds > 0 ? opt.seconds : opt.quick ? 2.0 : 5.0);
    } else {
        static const double sweep[] = {0.25e6, 0.5e6, 1e6, 1.5e6, 2e6, 0};
        const double *r = opt.n_rates ? opt.rates : sweep;
        int n = opt.n_rates ? opt.n_rates : (int)(sizeof sweep / sizeof sweep[0]);
        double secs = opt.seconds > 0 ? opt.seconds : opt.quick ? 0.5 : 3.0;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < opt.n_protos; k++)
                run_load(&sinks[opt.protos[k]], r[i], secs);
    }
    if (sinks[0].http)
        (void)http_sink_stop(sinks[0].http);
#ifdef CBT_BENCH_GRPC_SINK
    if (sinks[1].g) {
        grpc_sink_counts g = grpc_sink_stop(sinks[1].g);
        if (g.bad) {
            fprintf(stderr, "bench_load: the gRPC sink saw %llu malformed requests\n",
                    (unsigned long long)g.bad);
            return 1;
        }
    }
#endif
    return 0;
}
