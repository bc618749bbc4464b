/* bench/bench_paced.c — cbt under a server's load, through the public API
 * only (so one source builds against any core: bench/compare_core.sh).
 *
 * One publishing thread issues R requests a second (default 250), each the
 * MP path's 10 events (REQUEST_START, LOOKUP_PREFETCH_START/END,
 * RETRIEVE_SUBMITTED/START/END, STORE_SUBMITTED/START/END, REQUEST_END)
 * that make 4 spans (request, mp.lookup_prefetch, mp.retrieve, mp.store),
 * sleeping between requests until the next absolute deadline
 * (clock_nanosleep TIMER_ABSTIME on CLOCK_MONOTONIC; a late thread catches
 * up without sleeping, so the count is R x D whatever the scheduler does).
 * cbt runs with its defaults and its OTLP/HTTP exporter (defaults but the
 * endpoint) sends to a loopback collector in a child process (http_sink.h),
 * so getrusage(RUSAGE_SELF) counts cbt and this program, not the collector.
 * --jsonl PATH adds cbt's JSON-lines span file.
 *
 * The run: a warm-up (the thread's first publish takes its lane; timed on
 * its own), cbt_flush, then the measured window of D seconds, cbt_flush
 * again. Figures are of the window:
 *   cpu_per_span_us    process CPU (getrusage user + sys) / spans exported
 *   spans_given / spans_exported / spans_lost and where (no loss expected)
 *   publish_*_ns       each cbt_publish timed alone: rdtscp, lfence,
 *                      publish, rdtscp (x86-64; clock_gettime elsewhere),
 *                      less the timer's own cost, the median of 10001
 *                      empty timings on this thread (timer_overhead_ns);
 *                      ticks to ns calibrated against CLOCK_MONOTONIC over
 *                      50 ms. A histogram of ticks (1 tick bins up to 2^20
 *                      ticks) gives the exact median and p99; the mean
 *                      counts every sample, the max says whether a
 *                      preemption landed inside one
 *   publisher_tid      the publishing thread's kernel tid; at the window's
 *                      start and end it makes a marker call that strace
 *                      shows: clock_nanosleep(CLOCK_REALTIME, 0,
 *                      {tv_sec=0, tv_nsec=1111}) and the same with 2222
 *                      (the pacing uses CLOCK_MONOTONIC with TIMER_ABSTIME),
 *                      so a script counts the thread's system calls in
 *                      steady state (compare_core.sh)
 *
 * --flat: no pacing, requests back to back, as fast as the pipeline carries
 * them without loss: every 64 requests, while more than FLAT_IN_FLIGHT spans
 * given are not yet exported (the exporter's queue holds 32768 by default),
 * the producer sleeps 100 us (flat_waits); an event still refused
 * (CBT_ERR_FULL, its lane full) is retried after 20 us, counted. So the
 * figure is the CPU per span of the whole pipeline at its capacity, the
 * denominator of the paced/flat ratio; without the bound a producer on
 * this 2-vCPU machine outruns the exporter and a seventh of the spans is
 * dropped at its queue, built for nothing.
 *
 * --idle S: cbt and the exporter started, no publish at all, the process
 * CPU per second over S seconds (after 0.2 s of start-up, not counted).
 *
 * Output: one line per figure, "key<TAB>value<TAB>(comment)", for people and
 * for compare_core.sh. Targets (docs/performance.md, "Never waits"): publish
 * median <= 60 ns, mean <= 100 ns; paced CPU per span <= 2x flat; idle
 * <= 1 ms CPU/s; no loss.
 *
 * Usage: bench_paced [--rate REQ_PER_S] [--seconds D] [--warmup S] [--flat]
 *                    [--idle S] [--jsonl PATH]
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "http_sink.h"
#include "cbt.h"
#include "cbt/otlp.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

/* ---- the timer: ticks around one call ---- */

#if defined(__x86_64__)
/* rdtscp waits for what came before it; the lfence keeps the timed call
 * from starting before the first stamp */
static inline uint64_t tick_begin(void)
{
    unsigned aux;
    uint64_t t = __rdtscp(&aux);
    _mm_lfence();
    return t;
}
static inline uint64_t tick_end(void)
{
    unsigned aux;
    uint64_t t = __rdtscp(&aux);
    _mm_lfence();
    return t;
}
#else
static inline uint64_t tick_begin(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}
#define tick_end tick_begin
#endif

static double g_ns_per_tick = 1.0;

/* ns per tick, over 50 ms of CLOCK_MONOTONIC. */
static void timer_calibrate(void)
{
    double c0 = now_s();
    uint64_t k0 = tick_begin();
    while (now_s() - c0 < 0.05)
        ;
    uint64_t k1 = tick_end();
    g_ns_per_tick = (now_s() - c0) * 1e9 / (double)(k1 - k0);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The median of 10001 empty timings, in ticks, on the calling thread. */
static uint64_t timer_overhead(void)
{
    enum { N = 10001 };
    static uint64_t v[N];
    for (int i = 0; i < N; i++) {
        uint64_t a = tick_begin();
        uint64_t b = tick_end();
        v[i] = b - a;
    }
    qsort(v, N, sizeof *v, cmp_u64);
    return v[N / 2];
}

/* ---- a histogram of ticks ---- */

#define HIST_BINS (1u << 20)

typedef struct hist {
    uint32_t *bin;  /* HIST_BINS */
    uint64_t n, over; /* samples; samples past the last bin */
    double sum;     /* ticks, every sample */
    double sum_small; /* ticks, samples under 100 us */
    uint64_t n_small;
    uint64_t max;
} hist;

static void hist_init(hist *h)
{
    memset(h, 0, sizeof *h);
    h->bin = calloc(HIST_BINS, sizeof *h->bin);
    if (!h->bin) {
        perror("bench_paced");
        exit(1);
    }
}

static uint64_t g_small_ticks; /* 100 us in ticks */

static inline void hist_add(hist *h, uint64_t t)
{
    if (t < HIST_BINS)
        h->bin[t]++;
    else
        h->over++;
    h->n++;
    h->sum += (double)t;
    if (t < g_small_ticks) {
        h->sum_small += (double)t;
        h->n_small++;
    }
    if (t > h->max)
        h->max = t;
}

/* The q-quantile in ns (-1: in the overflow). */
static double hist_q(const hist *h, double q)
{
    if (!h->n)
        return 0;
    uint64_t want = (uint64_t)((double)(h->n - 1) * q), seen = 0;
    for (uint32_t i = 0; i < HIST_BINS; i++) {
        seen += h->bin[i];
        if (seen > want)
            return (double)i * g_ns_per_tick;
    }
    return -1;
}

/* ---- options ---- */

static struct {
    double rate, seconds, warmup, idle;
    int flat;
    const char *jsonl;
} opt = {.rate = 250, .seconds = 10, .warmup = -1};

/* ---- the publishing thread ---- */

static cbt_otlp_exporter *g_exp;

/* Spans the collector accepted so far. */
static uint64_t exported(void)
{
    cbt_otlp_stats x = CBT_STRUCT_INIT(cbt_otlp_stats);
    cbt_otlp_exporter_stats(g_exp, &x);
    return x.spans_exported;
}


#define EVENTS_PER_REQ 10
#define SPANS_PER_REQ 4

static const cbt_event_type REQ[EVENTS_PER_REQ] = {
    CBT_EV_MP_REQUEST_START,     CBT_EV_MP_LOOKUP_PREFETCH_START, CBT_EV_MP_LOOKUP_PREFETCH_END,
    CBT_EV_MP_RETRIEVE_SUBMITTED, CBT_EV_MP_RETRIEVE_START,       CBT_EV_MP_RETRIEVE_END,
    CBT_EV_MP_STORE_SUBMITTED,   CBT_EV_MP_STORE_START,           CBT_EV_MP_STORE_END,
    CBT_EV_MP_REQUEST_END};

#define FLAT_IN_FLIGHT 16384u /* spans given, not yet exported (--flat) */

typedef struct publisher {
    pthread_t th;
    _Atomic long tid;
    _Atomic int phase; /* 0 warming, 1 warm (waits), 2 go, 3 done */
    uint64_t timer;    /* ticks of an empty timing */
    double first_us;   /* the thread's first publish: it takes its lane */
    uint64_t warm_requests, requests, refused, retries;
    uint64_t given;      /* spans given so far, the warm-up's included */
    uint64_t flat_waits; /* --flat: 100 us waits for the exporter */
    double cpu_s;      /* the thread's CPU over the window */
    hist all, first;   /* every publish of the window; the first of each request */
} publisher;

/* The values a server sends with these events (LMCache's MP path). */
static void build_event(cbt_event *e, int j, const char *sid)
{
    cbt_event_init(e, REQ[j], sid);
    switch (REQ[j]) {
    case CBT_EV_MP_LOOKUP_PREFETCH_END:
        cbt_event_i64(e, CBT_N_HIT_TOKENS, 256);
        cbt_event_i64(e, CBT_N_REQUESTED_TOKENS, 1024);
        break;
    case CBT_EV_MP_RETRIEVE_START:
        cbt_event_i64(e, CBT_N_NUM_TOKENS, 256);
        break;
    case CBT_EV_MP_STORE_START:
        cbt_event_i64(e, CBT_N_NUM_TOKENS, 768);
        cbt_event_i64(e, CBT_N_STORED_COUNT, 3);
        break;
    default:
        break;
    }
}

/* One request; each publish timed alone into p->all (and p->first) when `timed`. */
static void publish_request(publisher *p, uint64_t q, int timed)
{
    char sid[48];
    snprintf(sid, sizeof sid, "cmpl-%016llx-0", (unsigned long long)q * 0x9E3779B97F4A7C15ull);
    for (int j = 0; j < EVENTS_PER_REQ; j++) {
        cbt_event e;
        build_event(&e, j, sid);
        for (;;) {
            uint64_t a = tick_begin();
            cbt_status st = cbt_publish(&e);
            uint64_t z = tick_end();
            if (timed) {
                uint64_t d = z - a > p->timer ? z - a - p->timer : 0;
                hist_add(&p->all, d);
                if (j == 0)
                    hist_add(&p->first, d);
            }
            if (st == CBT_OK)
                break;
            if (st != CBT_ERR_FULL || !opt.flat) {
                p->refused++;
                break;
            }
            p->retries++; /* flat out: the lane is full; let the harvester catch up */
            struct timespec zz = {0, 20000};
            nanosleep(&zz, NULL);
        }
    }
}

/* The strace marker (see the top): a relative CLOCK_REALTIME sleep of `ns`. */
static void marker(long ns)
{
    struct timespec m = {0, ns};
    clock_nanosleep(CLOCK_REALTIME, 0, &m, NULL);
}

/* Requests from q0, paced at opt.rate (or flat), until `until` (monotonic s)
 * or, paced, exactly n of them. Returns how many. */
static uint64_t run_requests(publisher *p, uint64_t q0, uint64_t n, double until, int timed)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint64_t period_ns = opt.flat ? 0 : (uint64_t)(1e9 / opt.rate);
    uint64_t base = (uint64_t)t0.tv_sec * 1000000000ull + (uint64_t)t0.tv_nsec, q = 0;
    for (;; q++) {
        if (opt.flat ? now_s() >= until : q >= n)
            break;
        if (period_ns) {
            uint64_t due = base + q * period_ns;
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            if ((uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec < due) {
                struct timespec d = {(time_t)(due / 1000000000ull), (long)(due % 1000000000ull)};
                while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &d, NULL) == EINTR)
                    ;
            }
        }
        if (opt.flat && q % 64 == 0) /* at most 5 s: an exporter that stopped shows as loss */
            for (double w0 = now_s(); p->given > exported() + FLAT_IN_FLIGHT && now_s() - w0 < 5;) {
                struct timespec zz = {0, 100000};
                nanosleep(&zz, NULL);
                p->flat_waits++;
            }
        publish_request(p, q0 + q, timed);
        p->given += SPANS_PER_REQ;
    }
    return q;
}

static void *publisher_main(void *arg)
{
    publisher *p = arg;
    atomic_store(&p->tid, (long)syscall(SYS_gettid));
    /* the first publish: the thread takes its lane */
    char sid[] = "cmpl-first-0";
    cbt_event e;
    build_event(&e, 0, sid);
    uint64_t a = tick_begin();
    cbt_publish(&e);
    p->first_us = (double)(tick_end() - a) * g_ns_per_tick * 1e-3;
    build_event(&e, EVENTS_PER_REQ - 1, sid);
    cbt_publish(&e); /* its REQUEST_END: a root span, given like the rest */
    p->given = 1;
    uint64_t nw = opt.flat ? 0 : (uint64_t)(opt.warmup * opt.rate);
    p->warm_requests = run_requests(p, 1u << 30, nw, now_s() + opt.warmup, 0);
    p->timer = timer_overhead();
    atomic_store(&p->phase, 1);
    while (atomic_load(&p->phase) != 2) {
        struct timespec zz = {0, 1000000};
        nanosleep(&zz, NULL);
    }
    marker(1111);
    double c0 = thread_cpu_s();
    p->requests = run_requests(p, 0, (uint64_t)(opt.seconds * opt.rate), now_s() + opt.seconds, 1);
    p->cpu_s = thread_cpu_s() - c0;
    marker(2222);
    atomic_store(&p->phase, 3);
    return NULL;
}

/* ---- cbt, the exporter, the figures ---- */

static void start_cbt(http_sink *hs)
{
    cbt_config c = cbt_config_default();
    if (opt.jsonl) {
        remove(opt.jsonl);
        c.jsonl_path = opt.jsonl;
    }
    if (cbt_init(&c) != CBT_OK) {
        fprintf(stderr, "bench_paced: cbt_init failed\n");
        exit(1);
    }
    cbt_otlp_config oc;
    cbt_otlp_config_default(&oc);
    snprintf(oc.endpoint, sizeof oc.endpoint, "http://127.0.0.1:%u/v1/traces",
             (unsigned)http_sink_port(hs));
    cbt_sink k;
    if (cbt_otlp_exporter_create(&oc, &g_exp, &k) != CBT_OK || cbt_add_sink(&k) != CBT_OK) {
        fprintf(stderr, "bench_paced: OTLP exporter failed\n");
        exit(1);
    }
}


static void kv(const char *key, const char *comment, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void kv(const char *key, const char *comment, const char *fmt, ...)
{
    char v[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v, sizeof v, fmt, ap);
    va_end(ap);
    printf("%s\t%s\t%s\n", key, v, comment ? comment : "");
    fflush(stdout);
}

static uint64_t count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    uint64_t n = 0;
    int ch;
    if (!f)
        return 0;
    while ((ch = getc(f)) != EOF)
        n += ch == '\n';
    fclose(f);
    return n;
}

static void run_idle(void)
{
    struct timespec settle = {0, 200000000};
    nanosleep(&settle, NULL); /* start-up (clock fit, first rounds) not counted */
    cbt_metrics m0 = CBT_STRUCT_INIT(cbt_metrics);
    cbt_metrics_get(&m0);
    double c0 = process_cpu_s(), t0 = now_s();
    struct timespec d = {(time_t)opt.idle, (long)((opt.idle - (double)(time_t)opt.idle) * 1e9)};
    while (nanosleep(&d, &d) == -1 && errno == EINTR)
        ;
    double cpu = process_cpu_s() - c0, wall = now_s() - t0;
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    cbt_metrics_get(&m);
    kv("mode", NULL, "idle");
    kv("idle_seconds", NULL, "%.2f", wall);
    kv("idle_cpu_ms_per_s", "(process CPU per wall second, no publish; target <= 1)", "%.3f",
       cpu / wall * 1e3);
    kv("idle_harvester_wakeups", "(over the window)", "%llu",
       (unsigned long long)(m.harvester_wakeups - m0.harvester_wakeups));
}

static void run_load(void)
{
    timer_calibrate();
    g_small_ticks = (uint64_t)(100000.0 / g_ns_per_tick);
    publisher *p = calloc(1, sizeof *p);
    hist_init(&p->all);
    hist_init(&p->first);
    if (pthread_create(&p->th, NULL, publisher_main, p)) {
        perror("bench_paced: thread");
        exit(1);
    }
    while (atomic_load(&p->phase) != 1) {
        struct timespec zz = {0, 1000000};
        nanosleep(&zz, NULL);
    }
    kv("mode", NULL, "%s", opt.flat ? "flat" : "paced");
    if (!opt.flat)
        kv("rate_req_per_s", "(10 events, 4 spans a request)", "%.0f", opt.rate);
    kv("publisher_tid", "(its steady window is between the strace markers tv_nsec=1111 and 2222)",
       "%ld", atomic_load(&p->tid));
    kv("first_publish_us", "(the thread's first publish: it takes a lane)", "%.2f", p->first_us);
    kv("timer_overhead_ns", "(median empty rdtscp-lfence-rdtscp, subtracted from each sample)",
       "%.1f", (double)p->timer * g_ns_per_tick);
    cbt_status fw = cbt_flush(30000); /* the warm-up's spans out before the window */
    uint64_t x0 = exported();
    cbt_metrics m0 = CBT_STRUCT_INIT(cbt_metrics);
    cbt_metrics_get(&m0);
    double c0 = process_cpu_s(), t0 = now_s();
    atomic_store(&p->phase, 2);
    pthread_join(p->th, NULL);
    double t_pub = now_s() - t0;
    cbt_status fst = cbt_flush(60000);
    double cpu = process_cpu_s() - c0, wall = now_s() - t0;
    uint64_t x1 = exported();
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    cbt_metrics_get(&m);
    cbt_otlp_stats xs = CBT_STRUCT_INIT(cbt_otlp_stats);
    cbt_otlp_exporter_stats(g_exp, &xs);

    uint64_t given = p->requests * SPANS_PER_REQ, got = x1 - x0;
    uint64_t given_all = p->given; /* the first request is a root alone */
    kv("seconds", "(the window: publishing, then cbt_flush)", "%.2f", wall);
    kv("requests", NULL, "%llu", (unsigned long long)p->requests);
    kv("spans_per_s", NULL, "%.0f", (double)given / t_pub);
    kv("spans_given", "(in the window)", "%llu", (unsigned long long)given);
    kv("spans_exported", "(accepted by the collector, in the window)", "%llu",
       (unsigned long long)got);
    kv("spans_lost", "(all of the run: given - exported; target 0)", "%lld",
       (long long)given_all - (long long)x1);
    kv("lost_where", NULL,
       "lane %llu events (refused %llu, retried %llu; flat waits %llu), span pool %llu, "
       "exporter %llu, sinks %llu",
       (unsigned long long)m.dropped_full, (unsigned long long)p->refused,
       (unsigned long long)p->retries, (unsigned long long)p->flat_waits, (unsigned long long)m.spans_dropped,
       (unsigned long long)xs.spans_dropped, (unsigned long long)m.sink_spans_lost);
    kv("flush", NULL, "%s / %s", cbt_strerror(fw), cbt_strerror(fst));
    kv("cpu_per_span_us", "(process CPU / spans exported)", "%.3f",
       got ? cpu / (double)got * 1e6 : 0.0);
    kv("cpu_per_span_wo_publisher_us", "(the same without the publishing thread's CPU)", "%.3f",
       got ? (cpu - p->cpu_s) / (double)got * 1e6 : 0.0);
    kv("publisher_cpu_per_span_us", NULL, "%.3f", got ? p->cpu_s / (double)got * 1e6 : 0.0);
    kv("cpu_cores", "(process CPU / wall)", "%.3f", cpu / wall);
    kv("harvester_wakeups_per_s", NULL, "%.1f",
       (double)(m.harvester_wakeups - m0.harvester_wakeups) / wall);
    kv("lag_max_ms", NULL, "%.3f", (double)m.lag_max_ns * 1e-6);
    hist *h = &p->all;
    kv("publish_n", NULL, "%llu", (unsigned long long)h->n);
    kv("publish_median_ns", "(target <= 60)", "%.1f", hist_q(h, 0.5));
    kv("publish_mean_ns", "(every sample; target <= 100)", "%.1f",
       h->n ? h->sum / (double)h->n * g_ns_per_tick : 0.0);
    kv("publish_mean_below_100us_ns", "(samples a preemption did not land in)", "%.1f",
       h->n_small ? h->sum_small / (double)h->n_small * g_ns_per_tick : 0.0);
    kv("publish_p99_ns", NULL, "%.1f", hist_q(h, 0.99));
    kv("publish_p999_ns", NULL, "%.1f", hist_q(h, 0.999));
    kv("publish_max_us", NULL, "%.2f", (double)h->max * g_ns_per_tick * 1e-3);
    kv("publish_over_100us", NULL, "%llu", (unsigned long long)(h->n - h->n_small));
    h = &p->first;
    kv("first_of_request_median_ns", "(each request's first publish, after the sleep)", "%.1f",
       hist_q(h, 0.5));
    kv("first_of_request_mean_ns", NULL, "%.1f",
       h->n ? h->sum / (double)h->n * g_ns_per_tick : 0.0);
    free(p->all.bin);
    free(p->first.bin);
    free(p);
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "bench_paced\twaited > the alarm (blocked)\t(the run did not "
                              "end in 3 times its length + 2 min: giving up)\n";
    (void)!write(1, msg, sizeof msg - 1);
    _exit(3);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--flat"))
            opt.flat = 1;
        else if (!strcmp(a, "--rate") && v)
            opt.rate = atof(v), i++;
        else if (!strcmp(a, "--seconds") && v)
            opt.seconds = atof(v), i++;
        else if (!strcmp(a, "--warmup") && v)
            opt.warmup = atof(v), i++;
        else if (!strcmp(a, "--idle") && v)
            opt.idle = atof(v), i++;
        else if (!strcmp(a, "--jsonl") && v)
            opt.jsonl = v, i++;
        else {
            fprintf(stderr, "usage: bench_paced [--rate REQ_PER_S] [--seconds D] [--warmup S] "
                            "[--flat] [--idle S] [--jsonl PATH]\n");
            return 2;
        }
    }
    if (opt.rate <= 0 || opt.seconds <= 0) {
        fprintf(stderr, "bench_paced: --rate and --seconds must be positive\n");
        return 2;
    }
    if (opt.warmup < 0)
        opt.warmup = opt.flat ? 0.5 : 1.0;
    signal(SIGALRM, on_alarm); /* a core that hangs must not hang a script */
    alarm((unsigned)(3 * (opt.warmup + (opt.idle > 0 ? opt.idle : opt.seconds))) + 120);
    http_sink *hs = http_sink_fork(); /* before any thread */
    start_cbt(hs);
    if (opt.idle > 0)
        run_idle();
    else
        run_load();
    cbt_shutdown();
    if (opt.jsonl) {
        kv("jsonl_lines", "(spans in the file, warm-up included)", "%llu",
           (unsigned long long)count_lines(opt.jsonl));
    }
    http_sink_counts k = http_sink_stop(hs);
    kv("collector", "(a child process: not in the CPU figures)", "%llu requests, %.1f MB, %.3f s CPU",
       (unsigned long long)k.requests, (double)k.bytes / 1e6, k.cpu_s);
    return 0;
}
