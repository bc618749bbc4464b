/* bench/report_gen.c — writes synthetic spans for `cbt report`: its
 * benchmark (bench/bench_report.sh, 1 M spans) and its tests
 * (tests/cli_report.sh, tests/python/test_report.py). Not part of cbt.
 *
 * Each request is the MP shape of `cbt demo`: a `request` root (session_id,
 * hit_rate, cbt.gpu_tail_ns, cbt.gpu_queue_ns, cbt.gpu_busy_ns), a host-side
 * mp.lookup_prefetch, and on a stream mp.retrieve (cb.l2_load, cb.scatter
 * under it) and mp.store (cb.gather): stream-timed spans carry cbt.queue_ns
 * and cbt.enqueue_ns. Spans are written as they would end, the root after
 * its children. Everything comes from a seeded generator: the same flags
 * give the same bytes.
 *
 *   report_gen --out FILE [--out2 FILE] [--format spans|otlp] [--spans N]
 *              [--seed S] [--plant-queue OP] [--plant-orphan] [--plant-noroot]
 *              [--plant-bad] [--plant-incomplete] [--batch K] [--service NAME]
 *              [--exact NAME] [--streams N] [--plant-stream K]
 *
 * --spans N        about N spans (whole requests of 7, or 5 without a hit)
 * --out2 FILE      a second server's file: the stream-timed spans go there,
 *                  the root and host-side spans to --out (a trace split over
 *                  two files, for the merge)
 * --plant-queue OP every OP span waits about 1.6 ms on its stream (the others
 *                  5-40 us): the slow queue a report must name
 * --plant-orphan   one mp.store whose parent id is missing from its trace
 * --plant-noroot   one request written without its root
 * --plant-bad      one line that is not JSON (after the 3rd request)
 * --plant-incomplete one span ended incomplete (cbt.evicted "idle")
 * --streams N      requests take turns on N CPU streams (cbt.stream 0..N-1,
 *                  cbt.device "cpu"; default 4)
 * --plant-stream K every operation on stream K waits about 1.6 ms: the slow
 *                  stream a report must name
 * --batch K        OTLP: spans per line (default 100)
 * --exact NAME     print the exact nearest-rank p50, p90, p99 and max of the
 *                  durations of the NAME spans written, and of the requests'
 *                  end-to-end latency, on stdout: "NAME p50 p90 p99 max" (ns)
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_s = 0x9E3779B97F4A7C15ULL;
static uint64_t rnd(void)
{
    rng_s ^= rng_s << 13;
    rng_s ^= rng_s >> 7;
    rng_s ^= rng_s << 17;
    return rng_s;
}
static uint64_t uniform(uint64_t lo, uint64_t hi) { return lo + rnd() % (hi - lo + 1); }

typedef struct gspan {
    uint8_t sid[8], pid[8];
    bool root, incomplete;
    const char *name;
    uint64_t start, end;
    int64_t queue, enq;
    int to2; /* goes to the second file */
    int stream; /* 0: host-side; k + 1: stream-timed on stream k */
} gspan;

static struct {
    FILE *out, *out2;
    bool otlp;
    unsigned batch;
    const char *service;
    /* OTLP lines being filled, one per file */
    unsigned in_line[2];
    const char *exact;
    uint64_t *ex, *lat;
    size_t nex, capex, nlat, caplat;
} G = {.batch = 100, .service = "report-gen"};

static void hex(FILE *f, const uint8_t *b, int n)
{
    for (int k = 0; k < n; k++)
        fprintf(f, "%02x", b[k]);
}

static void otlp_close(int w)
{
    FILE *f = w ? G.out2 : G.out;
    if (G.in_line[w]) {
        fputs("]}]}]}\n", f);
        G.in_line[w] = 0;
    }
}

static void emit(const uint8_t *tid, const gspan *s, const char *session, double hit,
                 int64_t tail, int64_t gq, int64_t gb)
{
    int w = s->to2 && G.out2 ? 1 : 0;
    FILE *f = w ? G.out2 : G.out;
    if (G.exact && !strcmp(G.exact, s->name)) {
        if (G.nex == G.capex) {
            G.capex = G.capex ? 2 * G.capex : 1024;
            G.ex = realloc(G.ex, G.capex * sizeof *G.ex);
        }
        G.ex[G.nex++] = s->end - s->start;
    }
    if (!G.otlp) {
        fputs("{\"trace_id\":\"", f);
        hex(f, tid, 16);
        fputs("\",\"span_id\":\"", f);
        hex(f, s->sid, 8);
        fputs("\",\"parent_span_id\":\"", f);
        if (!s->root)
            hex(f, s->pid, 8);
        fprintf(f, "\",\"name\":\"%s\",\"kind\":\"%s\",\"start_ns\":%" PRIu64 ",\"end_ns\":%" PRIu64
                   ",\"status\":\"unset\",\"incomplete\":%s,\"attributes\":{\"session_id\":\"%s\"",
                s->name, s->root ? "server" : "internal", s->start, s->end,
                s->incomplete ? "true" : "false", session);
        if (s->root)
            fprintf(f, ",\"hit_rate\":%.4f,\"cbt.gpu_tail_ns\":%" PRId64 ",\"cbt.gpu_queue_ns\":%" PRId64
                       ",\"cbt.gpu_busy_ns\":%" PRId64, hit, tail, gq, gb);
        if (s->stream)
            fprintf(f, ",\"cbt.queue_ns\":%" PRId64 ",\"cbt.enqueue_ns\":%" PRId64
                       ",\"cbt.stream\":%d,\"cbt.device\":\"cpu\"", s->queue, s->enq, s->stream - 1);
        if (s->incomplete)
            fputs(",\"cbt.evicted\":\"idle\"", f);
        fputs("},\"dropped_attributes\":0,\"events\":[],\"dropped_events\":0,"
              "\"truncated_attributes\":0}\n", f);
        return;
    }
    if (!G.in_line[w])
        fprintf(f, "{\"resourceSpans\":[{\"resource\":{\"attributes\":[{\"key\":\"service.name\","
                   "\"value\":{\"stringValue\":\"%s%s\"}}]},\"scopeSpans\":[{\"scope\":{\"name\":"
                   "\"cbt\",\"version\":\"gen\"},\"spans\":[",
                G.service, w ? "-2" : "");
    else
        fputc(',', f);
    fputs("{\"traceId\":\"", f);
    hex(f, tid, 16);
    fputs("\",\"spanId\":\"", f);
    hex(f, s->sid, 8);
    fputs("\",", f);
    if (!s->root) {
        fputs("\"parentSpanId\":\"", f);
        hex(f, s->pid, 8);
        fputs("\",", f);
    }
    fprintf(f, "\"name\":\"%s\",\"kind\":%d,\"startTimeUnixNano\":\"%" PRIu64
               "\",\"endTimeUnixNano\":\"%" PRIu64 "\",\"attributes\":[{\"key\":\"session_id\","
               "\"value\":{\"stringValue\":\"%s\"}}",
            s->name, s->root ? 2 : 1, s->start, s->end, session);
    if (s->root)
        fprintf(f, ",{\"key\":\"hit_rate\",\"value\":{\"doubleValue\":%.4f}},{\"key\":"
                   "\"cbt.gpu_tail_ns\",\"value\":{\"intValue\":\"%" PRId64 "\"}},{\"key\":"
                   "\"cbt.gpu_queue_ns\",\"value\":{\"intValue\":\"%" PRId64 "\"}},{\"key\":"
                   "\"cbt.gpu_busy_ns\",\"value\":{\"intValue\":\"%" PRId64 "\"}}",
                hit, tail, gq, gb);
    if (s->stream)
        fprintf(f, ",{\"key\":\"cbt.queue_ns\",\"value\":{\"intValue\":\"%" PRId64 "\"}},"
                   "{\"key\":\"cbt.enqueue_ns\",\"value\":{\"intValue\":\"%" PRId64 "\"}},"
                   "{\"key\":\"cbt.stream\",\"value\":{\"intValue\":\"%d\"}},"
                   "{\"key\":\"cbt.device\",\"value\":{\"stringValue\":\"cpu\"}}",
                s->queue, s->enq, s->stream - 1);
    if (s->incomplete)
        fputs(",{\"key\":\"cbt.incomplete\",\"value\":{\"boolValue\":true}},{\"key\":"
              "\"cbt.evicted\",\"value\":{\"stringValue\":\"idle\"}}", f);
    fputs("],\"status\":{}}", f);
    if (++G.in_line[w] >= G.batch)
        otlp_close(w);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static void print_exact(const char *name, uint64_t *v, size_t n)
{
    if (!n) {
        printf("%s 0 0 0 0\n", name);
        return;
    }
    qsort(v, n, sizeof *v, cmp_u64);
    const double qs[3] = {0.5, 0.9, 0.99};
    printf("%s", name);
    for (int k = 0; k < 3; k++) {
        size_t rank = (size_t)((qs[k] * (double)n) + 0.999999999);
        if (rank < 1)
            rank = 1;
        printf(" %" PRIu64, v[rank - 1]);
    }
    printf(" %" PRIu64 "\n", v[n - 1]);
}

static void ids(uint8_t *b, int n)
{
    for (int k = 0; k < n; k++)
        b[k] = (uint8_t)rnd();
    b[0] |= 1;
}

int main(int argc, char **argv)
{
    const char *out = NULL, *out2 = NULL, *plant_queue = NULL;
    uint64_t nspans = 1000, seed = 42, streams = 4;
    long plant_stream = -1;
    bool orphan = false, noroot = false, badline = false, incomplete = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define VAL()                                                                  \
    do {                                                                       \
        if (!v) {                                                              \
            fprintf(stderr, "report_gen: %s needs a value\n", a);              \
            return 2;                                                          \
        }                                                                      \
        i++;                                                                   \
    } while (0)
        if (!strcmp(a, "--out")) { VAL(); out = v; }
        else if (!strcmp(a, "--out2")) { VAL(); out2 = v; }
        else if (!strcmp(a, "--format")) { VAL(); G.otlp = !strcmp(v, "otlp"); }
        else if (!strcmp(a, "--spans")) { VAL(); nspans = strtoull(v, NULL, 10); }
        else if (!strcmp(a, "--seed")) { VAL(); seed = strtoull(v, NULL, 10); }
        else if (!strcmp(a, "--batch")) { VAL(); G.batch = (unsigned)strtoul(v, NULL, 10); }
        else if (!strcmp(a, "--service")) { VAL(); G.service = v; }
        else if (!strcmp(a, "--exact")) { VAL(); G.exact = v; }
        else if (!strcmp(a, "--plant-queue")) { VAL(); plant_queue = v; }
        else if (!strcmp(a, "--streams")) { VAL(); streams = strtoull(v, NULL, 10); }
        else if (!strcmp(a, "--plant-stream")) { VAL(); plant_stream = strtol(v, NULL, 10); }
        else if (!strcmp(a, "--plant-orphan")) orphan = true;
        else if (!strcmp(a, "--plant-noroot")) noroot = true;
        else if (!strcmp(a, "--plant-bad")) badline = true;
        else if (!strcmp(a, "--plant-incomplete")) incomplete = true;
        else {
            fprintf(stderr, "report_gen: unknown option '%s' (see the top of bench/report_gen.c)\n", a);
            return 2;
        }
#undef VAL
    }
    if (!out || G.batch == 0 || streams == 0) {
        fprintf(stderr, "report_gen: --out FILE is needed (and --batch > 0)\n");
        return 2;
    }
    rng_s ^= seed * 0x2545F4914F6CDD1DULL + 1;
    if (!(G.out = fopen(out, "w")) || (out2 && !(G.out2 = fopen(out2, "w")))) {
        perror("report_gen");
        return 1;
    }
    uint64_t t = 1800000000000000000ULL, written = 0;
    for (uint64_t r = 0; written < nspans; r++) {
        uint8_t tid[16];
        ids(tid, 16);
        char session[32];
        snprintf(session, sizeof session, "req-%06" PRIu64, r);
        gspan s[8];
        unsigned n = 0;
        memset(s, 0, sizeof s);
        uint64_t t0 = t + uniform(0, 20000);
        t += 100000; /* a request every 100 us */
        bool hit = rnd() % 2;
        double hit_rate = hit ? (double)uniform(1, 100) / 100.0 : 0.0;
        /* the root */
        gspan *root = &s[n++];
        root->root = true;
        root->name = "request";
        ids(root->sid, 8);
        root->start = t0;
        root->end = t0 + uniform(15000, 40000);
        /* host-side lookup */
        gspan *lk = &s[n++];
        lk->name = "mp.lookup_prefetch";
        memcpy(lk->pid, root->sid, 8);
        ids(lk->sid, 8);
        lk->start = t0 + 1000;
        lk->end = lk->start + uniform(700, 3000);
        /* the stream: the wrappers (mp.retrieve, mp.store) open on it, their
         * kernels run one after the other inside them. The host enqueues each
         * operation shortly before the stream is free, so an operation waits
         * 5-40 us, unless it is the planted one (about 1.6 ms: behind a long
         * operation of another request) */
        uint64_t stream = lk->end + 2000;
        const char *ops[5][2] = {{"mp.retrieve", NULL}, {"cb.l2_load", "mp.retrieve"},
                                 {"cb.scatter", "mp.retrieve"}, {"mp.store", NULL},
                                 {"cb.gather", "mp.store"}};
        gspan *parent_of[5] = {0};
        int on = (int)(r % streams);
        for (int o = hit ? 0 : 3; o < 5; o++) {
            gspan *x = &s[n++];
            x->name = ops[o][0];
            x->stream = on + 1; /* stream-timed, on stream `on` */
            x->to2 = 1;
            ids(x->sid, 8);
            const gspan *p = root;
            for (int q = 0; q < 5; q++)
                if (ops[o][1] && parent_of[q] && !strcmp(parent_of[q]->name, ops[o][1]))
                    p = parent_of[q];
            memcpy(x->pid, p->sid, 8);
            parent_of[o] = x;
            x->enq = (int64_t)(stream - uniform(0, 3000));
            uint64_t q = uniform(5000, 40000);
            if ((plant_queue && !strcmp(plant_queue, x->name)) || on == plant_stream)
                q = uniform(1520000, 1680000);
            x->queue = (int64_t)q;
            x->start = (uint64_t)x->enq + q;
            x->end = x->start + (ops[o][1] ? uniform(50000, 800000) : uniform(1000, 5000));
            stream = x->end;
        }
        /* parents cover their children */
        for (unsigned k = 0; k < n; k++)
            for (unsigned c = 0; c < n; c++)
                if (c != k && !memcmp(s[c].pid, s[k].sid, 8) && !s[k].root && s[c].end > s[k].end)
                    s[k].end = s[c].end;
        uint64_t last = root->end;
        int64_t gq = 0;
        uint64_t busy = 0, bs = 0, be = 0;
        bool open = false;
        for (unsigned k = 0; k < n; k++) {
            if (s[k].end > last)
                last = s[k].end;
            if (!s[k].stream)
                continue;
            gq += s[k].queue;
            /* stream spans are in start order and nest, so the union is easy */
            if (open && s[k].start <= be) {
                if (s[k].end > be)
                    be = s[k].end;
            } else {
                if (open)
                    busy += be - bs;
                bs = s[k].start;
                be = s[k].end;
                open = true;
            }
        }
        if (open)
            busy += be - bs;
        int64_t tail = last > root->end ? (int64_t)(last - root->end) : 0;
        if (orphan && r == 4) {
            for (unsigned k = 0; k < n; k++)
                if (!strcmp(s[k].name, "mp.store"))
                    ids(s[k].pid, 8); /* its parent never exists */
        }
        if (incomplete && r == 5)
            s[1].incomplete = true;
        /* written in end order, the root last (as cbt writes a deferred root) */
        for (unsigned k = 1; k < n; k++)
            for (unsigned j = k + 1; j < n; j++)
                if (s[j].end < s[k].end) {
                    gspan tmp = s[k];
                    s[k] = s[j];
                    s[j] = tmp;
                }
        bool skip_root = noroot && r == 6;
        for (unsigned k = 1; k < n; k++)
            emit(tid, &s[k], session, hit ? hit_rate : 0.0, tail, gq, (int64_t)busy);
        if (!skip_root)
            emit(tid, &s[0], session, hit ? hit_rate : 0.0, tail, gq, (int64_t)busy);
        written += n - (skip_root ? 1 : 0);
        if (!skip_root && G.exact) {
            if (G.nlat == G.caplat) {
                G.caplat = G.caplat ? 2 * G.caplat : 1024;
                G.lat = realloc(G.lat, G.caplat * sizeof *G.lat);
            }
            G.lat[G.nlat++] = last - root->start;
        }
        if (badline && r == 2) {
            if (G.otlp)
                otlp_close(0);
            fputs("{\"trace_id\": \"not a span\", \n", G.out);
        }
    }
    if (G.otlp) {
        otlp_close(0);
        if (G.out2)
            otlp_close(1);
    }
    if (fclose(G.out) || (G.out2 && fclose(G.out2))) {
        perror("report_gen");
        return 1;
    }
    if (G.exact) {
        print_exact(G.exact, G.ex, G.nex);
        print_exact("latency", G.lat, G.nlat);
    }
    fprintf(stderr, "report_gen: %" PRIu64 " spans in %s%s%s\n", written, out,
            out2 ? " and " : "", out2 ? out2 : "");
    return 0;
}
