/* bench/bench_record.c — what trace recording (cbt/replay.h) costs, and how
 * fast a recording replays.
 *
 * Recording cost. One thread publishes MP requests (7 events, 3 spans each),
 * in bursts of BURST requests each followed by cbt_flush (so no lane ever
 * overflows and every event is dispatched), into a tracer whose only sink
 * counts spans. Runs alternate recording off and on (--trace-level gpu into
 * a file under $TMPDIR) in the same process, and each reports, per
 * dispatched event: the harvester's busy time (cbt_metrics.harvester_busy_ns:
 * the drain, dispatch and recording copies), the process CPU (getrusage:
 * producer, harvester and, when on, the writer thread encoding and writing),
 * the bytes written and any records dropped.
 *
 * Replay speed. The last recording replayed (cbt_replay_run, as fast as
 * possible) into a counting sink: records, events and spans per second of
 * wall time.
 *
 * With --rate R (events/s) the bursts are paced to R on average (the
 * producer sleeps between them): a rate the writer can keep up with, where
 * nothing is dropped; flat out (the default) the writer falls behind and
 * what its buffer cannot hold is dropped and counted.
 *
 * Usage: bench_record [--requests N] [--runs K] [--rate EVENTS_PER_S]
 *        (defaults 100000, 3, flat out)
 * docs/performance.md has the figures and the command.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "cbt.h"
#include "cbt/replay.h"

#define BURST 2000u /* requests between flushes: 14000 events, well inside a lane */

static _Atomic uint64_t g_spans;

static cbt_status count_span(void *ctx, const cbt_span *s)
{
    (void)ctx, (void)s;
    atomic_fetch_add_explicit(&g_spans, 1, memory_order_relaxed);
    return CBT_OK;
}

static int add_counter(void)
{
    cbt_sink k;
    memset(&k, 0, sizeof k);
    k.version = CBT_SINK_VERSION;
    k.size = sizeof k;
    k.name = "count";
    k.on_span = count_span;
    return cbt_add_sink(&k) == CBT_OK ? 0 : -1;
}

static double cpu_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec * 1e-6 +
           (double)u.ru_stime.tv_sec + (double)u.ru_stime.tv_usec * 1e-6;
}

static void publish_request(uint32_t i, cbt_name k_tokens, cbt_name k_device)
{
    char sid[32];
    snprintf(sid, sizeof sid, "req-%08u", i);
    static const cbt_event_type seq[] = {
        CBT_EV_MP_REQUEST_START, CBT_EV_MP_LOOKUP_PREFETCH_START, CBT_EV_MP_LOOKUP_PREFETCH_END,
        CBT_EV_MP_STORE_SUBMITTED, CBT_EV_MP_STORE_START, CBT_EV_MP_STORE_END,
        CBT_EV_MP_REQUEST_END};
    for (size_t j = 0; j < sizeof seq / sizeof seq[0]; j++) {
        cbt_event ev;
        if (cbt_event_init(&ev, seq[j], sid) != CBT_OK)
            continue;
        cbt_event_i64(&ev, k_tokens, 256 * (int64_t)(i % 16 + 1));
        cbt_event_str(&ev, k_device, "cuda:0");
        (void)cbt_publish(&ev);
    }
}

typedef struct run_result {
    double busy_ns_per_ev, cpu_ns_per_ev, bytes_per_ev;
    uint64_t events, dropped, lost;
} run_result;

static double g_rate; /* events/s; 0: flat out */

static int run(uint32_t requests, const char *trace_path, run_result *out)
{
    cbt_config c = cbt_config_default();
    c.trace_level = trace_path ? "gpu" : NULL;
    c.trace_output = trace_path;
    if (cbt_init(&c) != CBT_OK || add_counter() != 0) {
        fprintf(stderr, "bench_record: cannot start the tracer\n");
        return -1;
    }
    cbt_name k_tokens, k_device;
    cbt_intern("num_tokens", &k_tokens);
    cbt_intern("device", &k_device);
    double c0 = cpu_s(), t0 = now_s();
    for (uint32_t i = 0; i < requests; i++) {
        publish_request(i, k_tokens, k_device);
        if ((i + 1) % BURST == 0) {
            cbt_flush(10000);
            double due = t0 + (double)(i + 1) * 7.0 / (g_rate > 0 ? g_rate : 1e300);
            double left = due - now_s();
            if (left > 0) {
                struct timespec d = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
                nanosleep(&d, NULL);
            }
        }
    }
    cbt_flush(10000);
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    cbt_shutdown_final(&m); /* the writer has drained and closed the file */
    double cpu = cpu_s() - c0;
    out->events = m.dispatched;
    out->busy_ns_per_ev = m.dispatched ? (double)m.harvester_busy_ns / (double)m.dispatched : 0;
    out->cpu_ns_per_ev = m.dispatched ? cpu * 1e9 / (double)m.dispatched : 0;
    out->bytes_per_ev = m.dispatched ? (double)m.trace_bytes / (double)m.dispatched : 0;
    out->dropped = m.trace_records_dropped;
    out->lost = m.dropped_full;
    return 0;
}

static int replay(const char *path)
{
    cbt_replay *r = NULL;
    if (cbt_replay_open(path, NULL, &r) != CBT_OK) {
        fprintf(stderr, "bench_record: %s\n", cbt_replay_message(NULL));
        return -1;
    }
    cbt_config c = cbt_config_default();
    if (cbt_replay_config(r, &c) || cbt_init(&c) || cbt_replay_add_builders(r) || add_counter()) {
        fprintf(stderr, "bench_record: cannot start the replay tracer\n");
        cbt_shutdown();
        cbt_replay_close(r);
        return -1;
    }
    atomic_store(&g_spans, 0);
    cbt_replay_stats st = CBT_STRUCT_INIT(cbt_replay_stats);
    double t0 = now_s();
    cbt_status rs = cbt_replay_run(r, &st);
    cbt_shutdown();
    double dt = now_s() - t0;
    cbt_replay_close(r);
    if (rs) {
        fprintf(stderr, "bench_record: replay: %s\n", cbt_strerror(rs));
        return -1;
    }
    printf("replay   %" PRIu64 " records (%" PRIu64 " events, %" PRIu64 " bytes) in %.3f s: "
           "%.2f M records/s, %.2f M events/s, %.2f M spans/s\n",
           st.records, st.events, st.bytes, dt, (double)st.records / dt / 1e6,
           (double)st.events / dt / 1e6, (double)atomic_load(&g_spans) / dt / 1e6);
    return 0;
}

int main(int argc, char **argv)
{
    uint32_t requests = 100000, runs = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--requests") && i + 1 < argc)
            requests = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--rate") && i + 1 < argc)
            g_rate = strtod(argv[++i], NULL);
        else {
            fprintf(stderr, "usage: bench_record [--requests N] [--runs K] [--rate EVENTS_PER_S]\n");
            return 2;
        }
    }
    if (requests == 0 || runs == 0) {
        fprintf(stderr, "bench_record: --requests and --runs must be positive\n");
        return 2;
    }
    const char *dir = getenv("TMPDIR");
    char path[512];
    snprintf(path, sizeof path, "%s/bench_record-%ld.lct", dir && *dir ? dir : "/tmp", (long)getpid());
    printf("bench_record: %u requests (7 events each) per run, bursts of %u, %s, recording "
           "off/on alternating\n", requests, BURST, g_rate > 0 ? "paced" : "flat out");
    for (uint32_t k = 0; k < runs; k++) {
        for (int on = 0; on < 2; on++) {
            run_result r;
            if (run(requests, on ? path : NULL, &r) != 0)
                return 1;
            printf("%-8s %" PRIu64 " events: harvester %.0f ns/event, process CPU %.0f ns/event, "
                   "%.1f bytes/event written, %" PRIu64 " records dropped, %" PRIu64 " events lost\n",
                   on ? "record" : "off", r.events, r.busy_ns_per_ev, r.cpu_ns_per_ev,
                   r.bytes_per_ev, r.dropped, r.lost);
        }
    }
    int rc = replay(path) != 0;
    unlink(path);
    return rc;
}
