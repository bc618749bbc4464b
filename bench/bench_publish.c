/* bench/bench_publish.c — what the instrumentation costs on the host.
 *
 *   publish_on      ns per cbt_publish() of a prepared event, tracer running
 *   build_publish   ns per cbt_event_init + 2 metadata values + cbt_publish
 *   publish_cb      ns per cbt_publish() of a prepared cb.lookup.end: LMCache's
 *                   12 values (11 ints and a bool) and a 40-character model
 *                   name (an 8-cell record, 457 bytes)
 *   build_cb        ns per cbt_event_init + those 13 values + cbt_publish
 *   publish_paced   ns per cbt_publish() of the same prepared event when the
 *                   producer is paced as a server is: bursts of 4 publishes,
 *                   then 5-20 us of other work that touches 16-64 KiB, so the
 *                   lane's lines have gone cold (or to the harvester) between
 *                   bursts. Each publish is timed alone with rdtscp (the
 *                   empty timer's median subtracted); median, p99, mean and
 *                   the median of each burst's first publish
 *   publish_slept   the producer asleep 50-500 us between bursts (a server
 *                   thread blocked on I/O), the event built just before each
 *                   burst as a server builds it (not timed)
 *   publish_slept_cold  the same, the prepared event left untouched (cold)
 *                   across the sleep: what reading the caller's cold event adds
 *   publish_on_stream ns per cbt_publish_on_stream() of the same prepared
 *                   event on a CPU stream whose worker is held (so the
 *                   producer's side alone is timed: the claim, the enqueue
 *                   stamp of queue time, the copy, the commit)
 *   publish_array_1k / _128k  ns per build + cbt_publish() of an mp.lookup
 *                   carrying 1024 / 131072 token ids (an int64 array value:
 *                   the copy into the array store, cbt/array.h), with the
 *                   plain memcpy of the same bytes beside it
 *   publish_off     ns per cbt_publish() with no tracer (the disabled branch)
 *   sampled_out     ns per request-sampled check that skips a publish
 *   pspan_*         ns per cbt_pspan_begin + cbt_pspan_end, sampled out / in
 *   stamp_*         ns per timestamp read: rdtsc, rdtscp (what a publish
 *                   uses, clock.h), clock_gettime(CLOCK_REALTIME)
 *   pipeline        events/s through bus + harvester + MP subscriber + span
 *                   building on one harvester thread (7 events, 3 spans per
 *                   request), producer retrying when the queue is full
 *
 * Usage: bench_publish [--quick]. Prints one line per figure; the median of
 * several rounds is reported. Targets (docs/performance.md): on <= 20 ns,
 * cb <= 60 ns, off <= 2 ns, pipeline >= 5 M events/s. Capacities are in
 * 64-byte cells (cbt.h): a lane of 2^17 cells holds a round of 8192 events
 * of up to 16 cells.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "cbt.h"
#include "cbt/context.h"
#include "cbt/pspan.h"

#define PER_ROUND 8192
#define SESSION_ID "cmpl-3f5a9c2e-7d41-4b8e-9a1f-0c2d4e6f8a1b-0" /* 44 bytes */
#define MODEL_NAME "meta-llama/Llama-3.1-8B-Instruct-FP8-v02" /* 40 bytes */

static uint64_t g_spans;
static cbt_status count_span(void *ctx, const cbt_span *s)
{
    (void)ctx;
    (void)s;
    g_spans++;
    return CBT_OK;
}

/* `cells`: of the shared queue and of each lane (64-byte cells; cbt.h);
 * 0: cbt's defaults throughout (queue, lanes, the harvester's poll) */
static void start_tracer(uint32_t cells)
{
    cbt_config c = cbt_config_default();
    if (cells) {
        c.queue_capacity = cells;
        c.lane_capacity = cells; /* the bench's publishing thread gets a lane of this size */
        c.poll_interval_us = 50;
    }
    c.max_lanes = 4;
    if (cbt_init(&c) != CBT_OK) {
        fprintf(stderr, "bench: cbt_init failed\n");
        exit(1);
    }
    cbt_sink k;
    memset(&k, 0, sizeof k);
    k.version = CBT_SINK_VERSION;
    k.size = sizeof k;
    k.name = "count";
    k.on_span = count_span;
    cbt_add_sink(&k);
}

static cbt_name g_n_no_gpu, g_n_model;

/* cb.lookup.end as LMCache 0.5.6 sends it (docs/lmcache-0.5.6.md §1.2), and
 * a model name. */
static void build_cb_lookup_end(cbt_event *e, int64_t i)
{
    cbt_event_init(e, CBT_EV_CB_LOOKUP_END, SESSION_ID);
    cbt_event_i64(e, CBT_N_NUM_TOKENS, 4096 + i);
    cbt_event_i64(e, CBT_N_FINGERPRINT_HITS, 12);
    cbt_event_i64(e, CBT_N_PREFIX_HITS, 3);
    cbt_event_i64(e, CBT_N_PREFIX_CHUNKS, 4);
    cbt_event_i64(e, CBT_N_STORAGE_HITS, 9);
    cbt_event_i64(e, CBT_N_STALE_CHUNKS, 0);
    cbt_event_bool(e, g_n_no_gpu, false);
    cbt_event_i64(e, CBT_N_PREFIX_HIT_TOKENS, 1024);
    cbt_event_i64(e, CBT_N_SEGMENTED_PREFIX_HIT_TOKENS, 256);
    cbt_event_i64(e, CBT_N_NON_PREFIX_HIT_TOKENS, 2048);
    cbt_event_i64(e, CBT_N_HIT_TOKENS, 3328);
    cbt_event_i64(e, CBT_N_REQUESTED_TOKENS, 4096);
    cbt_event_str(e, g_n_model, MODEL_NAME);
}

/* ns per publish of a prepared event (cb: the cb.lookup.end above, else an
 * mp.store.start with 2 values), in rounds that fit the lane, with the lane
 * drained (cbt_flush, not timed) between rounds. */
static double bench_publish_on(int rounds, int per_round, int build, int cb)
{
    start_tracer(1u << 17); /* 8 MiB: a round of 8-cell events fits */
    double *r = calloc((size_t)rounds, sizeof *r);
    static cbt_event ev;
    if (cb) {
        build_cb_lookup_end(&ev, 0);
    } else {
        cbt_event_init(&ev, CBT_EV_MP_STORE_START, SESSION_ID);
        cbt_event_i64(&ev, CBT_N_NUM_TOKENS, 4096);
        cbt_event_i64(&ev, CBT_N_STORED_COUNT, 16);
    }
    uint64_t fails = 0;
    /* warm-up: at least two laps of the lane (2^17 cells; a round is 24576
     * cells of the 2-value event, 65536 of the cb one), so its pages are
     * faulted in and the timed rounds see steady state */
    for (int w = 0; w < 16; w++) {
        for (int i = 0; i < per_round; i++)
            fails += cbt_publish(&ev) != CBT_OK;
        cbt_flush(10000);
    }
    for (int k = 0; k < rounds; k++) {
        double t0 = now_s();
        if (build && cb) {
            for (int i = 0; i < per_round; i++) {
                cbt_event e;
                build_cb_lookup_end(&e, i);
                fails += cbt_publish(&e) != CBT_OK;
            }
        } else if (build) {
            for (int i = 0; i < per_round; i++) {
                cbt_event e;
                cbt_event_init(&e, CBT_EV_MP_STORE_START, SESSION_ID);
                cbt_event_i64(&e, CBT_N_NUM_TOKENS, i);
                cbt_event_i64(&e, CBT_N_STORED_COUNT, 16);
                fails += cbt_publish(&e) != CBT_OK;
            }
        } else {
            for (int i = 0; i < per_round; i++)
                fails += cbt_publish(&ev) != CBT_OK;
        }
        r[k] = (now_s() - t0) * 1e9 / per_round;
        cbt_flush(10000);
    }
    cbt_shutdown();
    if (fails)
        fprintf(stderr, "bench: %llu publishes failed (queue full?)\n", (unsigned long long)fails);
    double m = median(r, rounds);
    free(r);
    return m;
}

/* ns per publish of an mp.lookup carrying `n` token ids (an int64 array,
 * LMCache 0.5.7's token_ids), plus the same memcpy alone for comparison:
 * the array's cost is its copy into the store (cbt/array.h). Rounds of
 * `per_round` publishes fit the store (64 MiB by default); the harvester
 * gives each array back after dispatch (cbt_flush between rounds, not
 * timed). *dropped: arrays the store refused (should be 0). */
#ifdef CBT_ARRAY_COUNT_MAX /* a library with array values (compare_core.sh builds older ones) */
static double bench_publish_array(int rounds, int per_round, uint32_t n, double *memcpy_ns,
                                  uint64_t *dropped)
{
    start_tracer(1u << 17);
    int64_t *ids = malloc((size_t)n * sizeof *ids), *dst = malloc((size_t)n * sizeof *ids);
    double *r = calloc((size_t)rounds, sizeof *r), *c = calloc((size_t)rounds, sizeof *c);
    if (!ids || !dst || !r || !c) {
        fprintf(stderr, "bench: out of memory\n");
        exit(1);
    }
    for (uint32_t i = 0; i < n; i++)
        ids[i] = 100 + (int64_t)(i * 2654435761u % 128000u);
    cbt_name k_ids;
    cbt_intern("token_ids", &k_ids);
    cbt_metrics m0 = CBT_STRUCT_INIT(cbt_metrics);
    cbt_metrics_get(&m0);
    for (int k = -2; k < rounds; k++) { /* two warm-up rounds */
        double t0 = now_s();
        for (int i = 0; i < per_round; i++) {
            cbt_event e;
            cbt_event_init(&e, CBT_EV_MP_LOOKUP, SESSION_ID);
            cbt_event_array_i64(&e, k_ids, ids, n);
            cbt_publish(&e);
        }
        double t1 = now_s();
        for (int i = 0; i < per_round; i++) {
            memcpy(dst, ids, (size_t)n * sizeof *ids);
            __asm__ volatile("" : : "r"(dst) : "memory");
        }
        double t2 = now_s();
        if (k >= 0) {
            r[k] = (t1 - t0) * 1e9 / per_round;
            c[k] = (t2 - t1) * 1e9 / per_round;
        }
        cbt_flush(10000);
    }
    cbt_metrics m1 = CBT_STRUCT_INIT(cbt_metrics);
    cbt_metrics_get(&m1);
    *dropped = m1.arrays_dropped - m0.arrays_dropped;
    cbt_shutdown();
    *memcpy_ns = median(c, rounds);
    double med = median(r, rounds);
    free(ids), free(dst), free(r), free(c);
    return med;
}
#endif

/* A work item that holds a CPU stream's worker until opened. */
typedef struct hold {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open;
} hold;

static void hold_fn(void *arg)
{
    hold *h = arg;
    pthread_mutex_lock(&h->mu);
    while (!h->open)
        pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
}

/* ns per cbt_publish_on_stream of the 2-value event on a CPU stream, the
 * worker held behind a work item while a round is published (timed), then
 * let go and synced (not timed). */
static double bench_publish_on_stream(int rounds, int per_round)
{
    start_tracer(1u << 17);
    cbt_stream *st = NULL;
    if (cbt_stream_cpu_create((uint32_t)per_round * 2, &st) != CBT_OK) {
        cbt_shutdown();
        return -1.0;
    }
    double *r = calloc((size_t)rounds, sizeof *r);
    static cbt_event ev;
    cbt_event_init(&ev, CBT_EV_MP_STORE_START, SESSION_ID);
    cbt_event_i64(&ev, CBT_N_NUM_TOKENS, 4096);
    cbt_event_i64(&ev, CBT_N_STORED_COUNT, 16);
    uint64_t fails = 0;
    for (int k = -2; k < rounds; k++) { /* two rounds of warm-up */
        hold h = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
        cbt_stream_enqueue(st, hold_fn, &h);
        double t0 = now_s();
        for (int i = 0; i < per_round; i++)
            fails += cbt_publish_on_stream(st, &ev) != CBT_OK;
        double dt = now_s() - t0;
        if (k >= 0)
            r[k] = dt * 1e9 / per_round;
        pthread_mutex_lock(&h.mu);
        h.open = 1;
        pthread_cond_signal(&h.cv);
        pthread_mutex_unlock(&h.mu);
        cbt_stream_sync(st);
        cbt_flush(10000);
    }
    cbt_stream_destroy(st);
    cbt_shutdown();
    if (fails)
        fprintf(stderr, "bench: %llu stream publishes failed\n", (unsigned long long)fails);
    double m = median(r, rounds);
    free(r);
    return m;
}

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The paced figures (see the top): ns of one publish, median, p99, mean,
 * and the median of each burst's first publish (the coldest one). With
 * `sleep_between`, the producer sleeps 50-500 us between bursts instead of
 * working: its core may idle or run another thread, as a server thread
 * blocked on I/O does. With `rebuild`, the event is built (init and its two
 * values, not timed) just before each burst, as a server builds the event it
 * publishes; without, the prepared event has gone cold with the rest. */
typedef struct paced_result {
    double med, p99, mean, first_med;
} paced_result;

static void bench_publish_paced(int bursts, int sleep_between, int rebuild, paced_result *r)
{
#if defined(__x86_64__)
    start_tracer(0); /* the defaults: a paced producer gets what a server gets */
    static cbt_event ev;
    cbt_event_init(&ev, CBT_EV_MP_STORE_START, SESSION_ID);
    cbt_event_i64(&ev, CBT_N_NUM_TOKENS, 4096);
    cbt_event_i64(&ev, CBT_N_STORED_COUNT, 16);
    enum { WORK_BYTES = 1 << 16, PER_BURST = 4 };
    unsigned char *work = calloc(1, WORK_BYTES);
    uint64_t *d = calloc((size_t)bursts * PER_BURST, sizeof *d);
    unsigned aux;
    /* ticks -> ns over 50 ms, and the empty timer's cost */
    double c0 = now_s();
    uint64_t k0 = __rdtscp(&aux);
    while (now_s() - c0 < 0.05)
        ;
    double ns_per_tick = (now_s() - c0) * 1e9 / (double)(__rdtscp(&aux) - k0);
    uint64_t empty[1001];
    for (int i = 0; i < 1001; i++) {
        uint64_t a = __rdtscp(&aux);
        _mm_lfence();
        uint64_t b = __rdtscp(&aux);
        empty[i] = b - a;
    }
    qsort(empty, 1001, sizeof *empty, cmp_u64);
    uint64_t timer = empty[500];
    uint32_t seed = 12345, fails = 0;
    uint64_t sink = 0;
    for (int b = 0, n = 0; b < bursts; b++) {
        seed = seed * 1664525u + 1013904223u;
        if (sleep_between) { /* 50-500 us asleep */
            struct timespec zz = {0, 50000L + (long)(seed >> 8) % 450000L};
            nanosleep(&zz, NULL);
        }
        /* 5-20 us of other work over 16-64 KiB (a line per step) */
        uint32_t lines = sleep_between ? 0 : 256 + (seed >> 22); /* 256..1279 lines */
        for (uint32_t i = 0; i < lines; i++) {
            size_t off = ((size_t)i * 64 * 7) % WORK_BYTES;
            work[off] = (unsigned char)(work[off] + i);
            sink += work[(off + 4096) % WORK_BYTES];
        }
        if (rebuild) { /* built just before, as a server builds its event */
            cbt_event_init(&ev, CBT_EV_MP_STORE_START, SESSION_ID);
            cbt_event_i64(&ev, CBT_N_NUM_TOKENS, 4096);
            cbt_event_i64(&ev, CBT_N_STORED_COUNT, 16);
        }
        for (int j = 0; j < PER_BURST; j++, n++) {
            uint64_t a = __rdtscp(&aux);
            _mm_lfence();
            fails += cbt_publish(&ev) != CBT_OK;
            uint64_t z = __rdtscp(&aux);
            d[n] = z - a > timer ? z - a - timer : 0;
        }
    }
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    cbt_metrics_get(&m);
    cbt_flush(10000);
    cbt_shutdown();
    if (fails) /* the lane filled: say how long the harvester fell behind */
        fprintf(stderr, "bench: %u paced publishes failed (lane full); worst lag %.3f ms, %llu "
                "harvester wake-ups\n", fails, (double)m.lag_max_ns / 1e6,
                (unsigned long long)m.harvester_wakeups);
    size_t n = (size_t)bursts * PER_BURST;
    uint64_t *first = calloc((size_t)bursts, sizeof *first);
    double total = 0;
    for (size_t i = 0; i < n; i++) {
        total += (double)d[i];
        if (first && i % PER_BURST == 0)
            first[i / PER_BURST] = d[i];
    }
    qsort(d, n, sizeof *d, cmp_u64);
    r->med = (double)d[n / 2] * ns_per_tick;
    r->p99 = (double)d[n * 99 / 100] * ns_per_tick;
    r->mean = total / (double)n * ns_per_tick;
    r->first_med = 0;
    if (first) {
        qsort(first, (size_t)bursts, sizeof *first, cmp_u64);
        r->first_med = (double)first[bursts / 2] * ns_per_tick;
    }
    free(first);
    if (sink == 42)
        fprintf(stderr, " ");
    free(work);
    free(d);
#else
    (void)bursts, (void)sleep_between, (void)rebuild;
    memset(r, 0, sizeof *r);
#endif
}

/* ns per sampled-out request check: what a process pays for a request the
 * head sampler dropped (one flag test; nothing is built or queued). The
 * tracer is running. */
static double bench_sampled_out(int rounds, long per_round)
{
    start_tracer(65536);
    double *r = calloc((size_t)rounds, sizeof *r);
    cbt_trace_context tc;
    memset(&tc, 0, sizeof tc);
    volatile uint8_t flags = 0; /* sampled out, and not a compile-time constant */
    long sink = 0;
    for (int k = 0; k < rounds; k++) {
        double t0 = now_s();
        for (long i = 0; i < per_round; i++) {
            tc.ctx.trace_flags = flags;
            if (cbt_context_sampled(&tc)) {
                cbt_event e;
                cbt_event_init(&e, CBT_EV_MP_STORE_START, "r");
                sink += cbt_publish(&e);
            }
        }
        r[k] = (now_s() - t0) * 1e9 / (double)per_round;
    }
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    cbt_metrics_get(&m);
    if (sink || m.published)
        fprintf(stderr, "bench: a sampled-out request published something\n");
    cbt_shutdown();
    double med = median(r, rounds);
    free(r);
    return med;
}

/* ns per pspan begin + end pair (cbt/pspan.h), the plugin side's spans:
 * sampled out (the parent's flag is clear: no id drawn, nothing published)
 * and sampled in (an id drawn, two events with their trace block queued). */
static double bench_pspan(int rounds, long per_round, int sampled, int tracer)
{
    if (tracer)
        start_tracer(65536);
    double *r = calloc((size_t)rounds, sizeof *r);
    cbt_span_ctx parent;
    memset(&parent, 0, sizeof parent);
    for (int i = 0; i < 16; i++)
        parent.trace_id[i] = (uint8_t)(i + 1);
    for (int i = 0; i < 8; i++)
        parent.span_id[i] = (uint8_t)(i + 7);
    parent.trace_flags = sampled ? 1 : 0;
    uint64_t fails = 0;
    for (int k = 0; k < rounds; k++) {
        double t0 = now_s();
        for (long i = 0; i < per_round; i++) {
            cbt_pspan p;
            fails += cbt_pspan_begin(&p, CBT_N_CB_CHECK, CBT_SPAN_KIND_INTERNAL, "req-1", &parent,
                                     NULL, 0) != CBT_OK;
            fails += cbt_pspan_end(&p, NULL, 0) != CBT_OK;
        }
        r[k] = (now_s() - t0) * 1e9 / (double)per_round;
        if (sampled)
            cbt_flush(10000);
    }
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    cbt_metrics_get(&m);
    if (!sampled && m.published)
        fprintf(stderr, "bench: a sampled-out pspan published something\n");
    if (fails && !sampled)
        fprintf(stderr, "bench: %llu pspan calls failed\n", (unsigned long long)fails);
    if (tracer)
        cbt_shutdown();
    double med = median(r, rounds);
    free(r);
    return med;
}

static double bench_publish_off(int rounds, long per_round)
{
    double *r = calloc((size_t)rounds, sizeof *r);
    cbt_event ev;
    cbt_event_init(&ev, CBT_EV_MP_STORE_START, "r");
    long sink = 0;
    for (int k = 0; k < rounds; k++) {
        double t0 = now_s();
        for (long i = 0; i < per_round; i++)
            sink += cbt_publish(&ev);
        r[k] = (now_s() - t0) * 1e9 / (double)per_round;
    }
    if (sink)
        fprintf(stderr, "bench: unexpected status\n");
    double m = median(r, rounds);
    free(r);
    return m;
}

/* ns per timestamp of each kind: what a publish spends on its stamp. */
static void bench_stamps(long n, double *tsc, double *tscp, double *cgt)
{
    volatile uint64_t sink = 0;
    double t0;
#if defined(__x86_64__)
    unsigned aux;
    t0 = now_s();
    for (long i = 0; i < n; i++)
        sink += __rdtsc();
    *tsc = (now_s() - t0) * 1e9 / (double)n;
    t0 = now_s();
    for (long i = 0; i < n; i++)
        sink += __rdtscp(&aux);
    *tscp = (now_s() - t0) * 1e9 / (double)n;
#else
    *tsc = *tscp = 0;
#endif
    struct timespec ts;
    t0 = now_s();
    for (long i = 0; i < n; i++) {
        clock_gettime(CLOCK_REALTIME, &ts);
        sink += (uint64_t)ts.tv_nsec;
    }
    *cgt = (now_s() - t0) * 1e9 / (double)n;
    (void)sink;
}

static void publish_retry(const cbt_event *e, uint64_t *retries)
{
    while (cbt_publish(e) == CBT_ERR_FULL)
        (*retries)++;
}

/* A subscriber that holds the harvester at the first BENCH_GATE event until
 * the producer has filled the queue, so the drain is timed alone. */
static _Atomic int g_gate_open;
static cbt_event_type g_gate_type;
static cbt_status gate_on_event(void *ctx, cbt_tracer *t, const cbt_event *ev)
{
    (void)ctx;
    (void)t;
    (void)ev;
    while (!atomic_load_explicit(&g_gate_open, memory_order_acquire))
        ;
    return CBT_OK;
}

static void publish_request(const char *sid)
{
    static const cbt_event_type seq[] = {
        CBT_EV_MP_REQUEST_START,  CBT_EV_MP_LOOKUP_PREFETCH_START, CBT_EV_MP_LOOKUP_PREFETCH_END,
        CBT_EV_MP_STORE_SUBMITTED, CBT_EV_MP_STORE_START,          CBT_EV_MP_STORE_END,
        CBT_EV_MP_REQUEST_END};
    for (size_t j = 0; j < sizeof seq / sizeof seq[0]; j++) {
        cbt_event e;
        cbt_event_init(&e, seq[j], sid);
        if (seq[j] == CBT_EV_MP_LOOKUP_PREFETCH_END) {
            cbt_event_i64(&e, CBT_N_HIT_TOKENS, 256);
            cbt_event_i64(&e, CBT_N_REQUESTED_TOKENS, 1024);
        }
        uint64_t retries = 0;
        publish_retry(&e, &retries);
    }
}

/* events/s of the one harvester thread draining a full queue: bus pop, MP
 * subscriber, span building, a counting sink. */
static double bench_drain(int rounds, int requests)
{
    double *r = calloc((size_t)rounds, sizeof *r);
    if (!g_gate_type)
        cbt_event_type_register("BENCH_GATE", &g_gate_type);
    for (int k = 0; k < rounds; k++) {
        cbt_config c = cbt_config_default();
        c.queue_capacity = 1u << 18;
        c.lane_capacity = 1u << 20; /* cells: holds the whole workload (15 cells a
                                       request) while the gate is shut */
        c.max_lanes = 2;
        c.poll_interval_us = 50;
        if (cbt_init(&c) != CBT_OK)
            exit(1);
        cbt_subscriber g;
        memset(&g, 0, sizeof g);
        g.version = CBT_SUBSCRIBER_VERSION;
        g.size = sizeof g;
        g.name = "gate";
        g.on_event = gate_on_event;
        cbt_subscriber_want(&g, g_gate_type);
        cbt_add_subscriber(&g);
        atomic_store(&g_gate_open, 0);
        cbt_event e;
        cbt_event_init(&e, g_gate_type, "gate");
        cbt_publish(&e);
        for (int q = 0; q < requests; q++) {
            char sid[40];
            snprintf(sid, sizeof sid, "cmpl-%08x-%04d", (unsigned)q * 2654435761u, k);
            publish_request(sid);
        }
        double t0 = now_s();
        atomic_store_explicit(&g_gate_open, 1, memory_order_release);
        cbt_flush(60000);
        r[k] = (double)requests * 7 / (now_s() - t0);
        cbt_shutdown();
    }
    double m = median(r, rounds);
    free(r);
    return m;
}

/* events/s through the whole host pipeline: 7 events per request. */
static double bench_pipeline(int rounds, int requests, uint64_t *dropped, double *harvester_eps)
{
    double *r = calloc((size_t)rounds, sizeof *r);
    double *h = calloc((size_t)rounds, sizeof *h);
    static const cbt_event_type seq[] = {
        CBT_EV_MP_REQUEST_START,  CBT_EV_MP_LOOKUP_PREFETCH_START, CBT_EV_MP_LOOKUP_PREFETCH_END,
        CBT_EV_MP_STORE_SUBMITTED, CBT_EV_MP_STORE_START,          CBT_EV_MP_STORE_END,
        CBT_EV_MP_REQUEST_END};
    for (int k = 0; k < rounds; k++) {
        start_tracer(1u << 18); /* cells: ~120k events, as many as the 65536 slots before */
        uint64_t retries = 0;
        double t0 = now_s();
        for (int q = 0; q < requests; q++) {
            char sid[40];
            snprintf(sid, sizeof sid, "cmpl-%08x-%04d", (unsigned)q * 2654435761u, k);
            for (size_t j = 0; j < sizeof seq / sizeof seq[0]; j++) {
                cbt_event e;
                cbt_event_init(&e, seq[j], sid);
                if (seq[j] == CBT_EV_MP_LOOKUP_PREFETCH_END) {
                    cbt_event_i64(&e, CBT_N_HIT_TOKENS, 256);
                    cbt_event_i64(&e, CBT_N_REQUESTED_TOKENS, 1024);
                }
                publish_retry(&e, &retries);
            }
        }
        cbt_flush(60000);
        double dt = now_s() - t0;
        cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
        cbt_metrics_get(&m);
        *dropped += m.dropped_full - retries; /* retried attempts are not losses */
        r[k] = (double)requests * 7 / dt;
        h[k] = (double)m.dispatched / ((double)m.harvester_busy_ns * 1e-9);
        cbt_shutdown();
    }
    double med = median(r, rounds);
    *harvester_eps = median(h, rounds);
    free(r);
    free(h);
    return med;
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    int rounds = quick ? 5 : 21;
    cbt_intern("no_gpu_context", &g_n_no_gpu);
    cbt_intern("model_name", &g_n_model);
    double on = bench_publish_on(rounds, PER_ROUND, 0, 0);
    double build = bench_publish_on(rounds, PER_ROUND, 1, 0);
    double cb_on = bench_publish_on(rounds, PER_ROUND, 0, 1);
    double cb_build = bench_publish_on(rounds, PER_ROUND, 1, 1);
    double on_stream = bench_publish_on_stream(rounds, 4096);
#ifdef CBT_ARRAY_COUNT_MAX
    double arr1k_cpy, arr128k_cpy;
    uint64_t arr1k_drop, arr128k_drop;
    double arr1k = bench_publish_array(rounds, 1024, 1024, &arr1k_cpy, &arr1k_drop);
    double arr128k = bench_publish_array(rounds, 16, 131072, &arr128k_cpy, &arr128k_drop);
#endif
    paced_result pw, ps, pc;
    bench_publish_paced(quick ? 20000 : 200000, 0, 0, &pw);
    bench_publish_paced(quick ? 2000 : 10000, 1, 1, &ps);
    bench_publish_paced(quick ? 2000 : 10000, 1, 0, &pc);
    double off = bench_publish_off(rounds, quick ? 10000000L : 100000000L);
    double sampled_out = bench_sampled_out(rounds, quick ? 10000000L : 100000000L);
    double pspan_out = bench_pspan(rounds, quick ? 1000000L : 10000000L, 0, 1);
    double pspan_off = bench_pspan(rounds, quick ? 1000000L : 10000000L, 1, 0);
    double pspan_in = bench_pspan(rounds, 4096, 1, 1);
    uint64_t dropped = 0;
    g_spans = 0;
    int reqs = quick ? 50000 : 200000;
    double drain = bench_drain(quick ? 3 : 5, 36000);
    double heps = 0;
    double eps = bench_pipeline(quick ? 3 : 5, reqs, &dropped, &heps);
    double tsc, tscp, cgt;
    bench_stamps(quick ? 2000000L : 20000000L, &tsc, &tscp, &cgt);
    printf("stamp_rdtsc    %8.2f ns\n", tsc);
    printf("stamp_rdtscp   %8.2f ns         (the publish stamp: ordered after earlier loads)\n", tscp);
    printf("stamp_realtime %8.2f ns         (clock_gettime, for comparison)\n", cgt);
    printf("publish_on     %8.2f ns/event   (prepared event, tracer running; target <= 20)\n", on);
    printf("build_publish  %8.2f ns/event   (init + 2 values + publish)\n", build);
    printf("publish_on_stream %5.2f ns/event   (the same on a CPU stream, its worker held: the "
           "producer's side, enqueue stamp included)\n", on_stream);
    printf("publish_paced  %8.2f ns/event   (median; p99 %.2f, mean %.2f, first of a burst "
           "%.2f: bursts of 4, then 5-20 us of other work; target <= 60)\n",
           pw.med, pw.p99, pw.mean, pw.first_med);
    printf("publish_slept  %8.2f ns/event   (median; p99 %.2f, mean %.2f, first of a burst "
           "%.2f: bursts of 4 of an event built just before, then 50-500 us asleep; "
           "target <= 60)\n", ps.med, ps.p99, ps.mean, ps.first_med);
    printf("publish_slept_cold %4.2f ns/event   (median; p99 %.2f, mean %.2f, first of a burst "
           "%.2f: the same with the prepared event left cold across the sleep)\n",
           pc.med, pc.p99, pc.mean, pc.first_med);
#ifdef CBT_ARRAY_COUNT_MAX
    printf("publish_array_1k   %9.1f ns/event (mp.lookup, 1024 token ids as an int array; "
           "memcpy of the 8 KiB alone %.1f ns; %llu dropped)\n",
           arr1k, arr1k_cpy, (unsigned long long)arr1k_drop);
    printf("publish_array_128k %9.1f ns/event (mp.lookup, 131072 token ids: 1 MiB; memcpy alone "
           "%.1f ns; %llu dropped)\n",
           arr128k, arr128k_cpy, (unsigned long long)arr128k_drop);
#else
    printf("publish_array_1k   n/a (this library has no array values)\n");
#endif
    printf("publish_cb     %8.2f ns/event   (prepared cb.lookup.end: 12 values and a 40-byte "
           "model name; target <= 60)\n", cb_on);
    printf("build_cb       %8.2f ns/event   (init + those 13 values + publish)\n", cb_build);
    printf("publish_off    %8.2f ns/call    (no tracer: one branch; target <= 2)\n", off);
    printf("sampled_out    %8.2f ns/event   (tracer running, request sampled out: one flag test)\n",
           sampled_out);
    printf("pspan_sampled_out %5.2f ns/span   (cbt_pspan_begin + end, parent sampled out: "
           "nothing published)\n", pspan_out);
    printf("pspan_off         %5.2f ns/span   (cbt_pspan_begin + end, no tracer: the context "
           "is still made)\n", pspan_off);
    printf("pspan_sampled_in  %5.2f ns/span   (cbt_pspan_begin + end, 2 events queued)\n",
           pspan_in);
    printf("pipeline       %8.2f M events/s (producer + harvester end to end, 2 threads)\n",
           eps / 1e6);
    printf("harvester busy %8.2f M events/s (per busy second of the harvester while the "
           "producer runs)\n",
           heps / 1e6);
    printf("harvester      %8.2f M events/s (one thread draining a filled queue: bus + MP "
           "spans; target >= 5)\n",
           drain / 1e6);
    printf("pipeline spans %llu built, %llu events lost\n", (unsigned long long)g_spans,
           (unsigned long long)dropped);
    return 0;
}
