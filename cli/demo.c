/* cli/demo.c — owns the demo workload (see demo.h). */
#include "demo.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "cbt.h"
#include "cbt/blend_metrics.h"
#include "cbt/cb.h"
#include "cbt/pspan.h"
#include "cbt/kv_kernels.h"
#include "demo_cb.h"
#include "demo_gpu.h"
#include "cli_sinks.h"
#include "cbt/nvtx.h"
#include "cbt/otlp.h"
#include "cbt/trace_file.h"
#include "cbt/tree.h"

#define CHUNK_TOKENS 256
#define MAX_CHUNKS 4
#define MAX_TOKENS (MAX_CHUNKS * CHUNK_TOKENS)
#define BLOCK 16
#define N_BLOCKS (MAX_TOKENS / BLOCK + MAX_TOKENS / BLOCK / 2) /* half again as many: a shuffled table */
#define LAYERS 2
#define HEADS 8
#define HEAD_DIM 128
#define ROT_DIM 128
#define MAX_POS 4096
#define SHIFT 64 /* non-prefix reuse: keys computed 64 positions away */
#define N_CTAS 4

/* One kernel launch queued on a worker's CPU stream: the C reference runs
 * when the stream reaches it and stamps the ring through its span. */
typedef struct job {
    struct worker *w;
    cbt_kspan span;
    cbt_scatter_dir dir;
    cbt_scatter_args args;
    cbt_rope rope;
    int l2;
    uint32_t l2_chunks;
    cbt_scatter_result res;
} job;

typedef struct worker {
    const cbt_demo_opts *o;
    uint32_t id;
    cbt_stream *stream;
    cbt_kv_geom g;
    void *chunk, *staging;           /* chunk buffer; the storage tier's landing area */
    void *paged[LAYERS];
    void *cos_sin;
    int32_t positions[MAX_TOKENS], old_positions[MAX_TOKENS];
    int32_t table[N_BLOCKS];
    void *l2_dst[MAX_CHUNKS];
    const void *l2_src[MAX_CHUNKS];
    job jobs[3];
    demo_dev *dev; /* the GPU backend's buffers; NULL on the CPU backend */
    uint32_t plant_ms; /* --plant-queue (planted_work's argument: lives as long as the stream) */
    uint64_t rng;
    uint64_t hit_tokens, requested_tokens, bytes_moved;
    int failed;
} worker;

static uint64_t rnd(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static uint64_t row_bytes(void) { return (uint64_t)HEADS * HEAD_DIM * 2; }

static void kernel_fn(void *arg)
{
    job *j = arg;
    cbt_status st;
    if (j->l2)
        st = cbt_l2_load_ref(j->w->l2_dst, j->w->l2_src, j->l2_chunks,
                             (uint64_t)CHUNK_TOKENS * row_bytes(), &j->span);
    else
        st = cbt_scatter_ref(&j->w->g, &j->args, j->dir, &j->span, N_CTAS, &j->res);
    if (st != CBT_OK)
        j->w->failed = 1;
}

cbt_demo_opts cbt_demo_defaults(void)
{
    cbt_demo_opts o = {.requests = 8, .concurrency = 4, .seed = 42,
                       .output = "cbt-trace.json", .spans = "cbt-spans.jsonl", .trees = 3,
                       .slowest = 3, .backend = CBT_DEMO_AUTO, .otlp_protocol = -1};
    return o;
}

/* --plant-queue: someone else's long work on the stream (a prefill, say),
 * which cbt does not trace; what comes after it on the stream waits. */
static void planted_work(void *arg)
{
    uint32_t ms = *(const uint32_t *)arg;
    struct timespec d = {(time_t)(ms / 1000u), (long)(ms % 1000u) * 1000000L};
    while (nanosleep(&d, &d) != 0)
        ;
}

static void plant(worker *w)
{
    if (w->plant_ms && cbt_stream_enqueue(w->stream, planted_work, &w->plant_ms) != CBT_OK)
        w->failed = 1;
}

static void pub(cbt_event_type type, const char *sid)
{
    cbt_event e;
    cbt_event_init(&e, type, sid);
    cbt_publish(&e);
}

static void pub_stream(worker *w, cbt_event_type type, const char *sid, cbt_name key, int64_t v)
{
    cbt_event e;
    cbt_event_init(&e, type, sid);
    if (key)
        cbt_event_i64(&e, key, v);
    cbt_publish_on_stream(w->stream, &e);
}

/* Queue one kernel on the worker's stream, announced by cbt_launch_begin. */
static void launch(worker *w, job *j, const char *sid, cbt_kernel_op op, uint32_t requested)
{
    cbt_launch_info li = cbt_launch_info_default(op, N_CTAS);
    li.requested_tokens = requested;
    li.num_layers = LAYERS;
    if (op == CBT_KOP_L2_LOAD) {
        li.n_ctas = 1;
        li.chunks = j->l2_chunks;
        li.bytes = (uint64_t)j->l2_chunks * CHUNK_TOKENS * row_bytes();
    }
    j->w = w;
    if (cbt_launch_begin(w->stream, sid, &li, &j->span) != CBT_OK)
        memset(&j->span, 0, sizeof j->span);
    if (w->dev) {
        /* the GPU backend: the CUDA kernels, on the stream cbt_launch_begin marked */
        int rc = j->l2 ? demo_gpu_l2(w->dev, j->l2_chunks, (uint64_t)CHUNK_TOKENS * row_bytes(),
                                     j->span)
                       : demo_gpu_scatter(w->dev, &w->g, &j->args,
                                          (uint32_t)(j->args.positions - w->positions), w->table,
                                          j->dir, j->span);
        if (rc != 0)
            w->failed = 1;
        return;
    }
    if (cbt_stream_enqueue(w->stream, kernel_fn, j) != CBT_OK)
        w->failed = 1;
}

/* One request, as LMCache's MP server publishes it, with real kernels: an L2
 * load of the chunks found in the storage tier, the scatter of the hit
 * tokens into the paged cache (re-RoPE'ing the non-prefix ones), the gather
 * of the new tokens out of it for the store. */
static void run_request(worker *w, uint32_t r)
{
    char sid[32];
    snprintf(sid, sizeof sid, "req-%04u", r);
    uint32_t chunks = 1 + (uint32_t)(rnd(&w->rng) % MAX_CHUNKS);
    uint32_t kind = (uint32_t)(rnd(&w->rng) % 10); /* 0-4 hit, 5-7 miss, 8 lookup only, 9 store only */
    uint32_t hits = kind <= 4 ? 1 + (uint32_t)(rnd(&w->rng) % chunks) : 0;
    uint32_t req_tokens = chunks * CHUNK_TOKENS, hit_tokens = hits * CHUNK_TOKENS;

    /* this request's block table: a shuffle of the cache's blocks */
    for (uint32_t i = 0; i < N_BLOCKS; i++)
        w->table[i] = (int32_t)i;
    for (uint32_t i = N_BLOCKS - 1; i > 0; i--) {
        uint32_t k = (uint32_t)(rnd(&w->rng) % (i + 1));
        int32_t t = w->table[i];
        w->table[i] = w->table[k];
        w->table[k] = t;
    }

    if (kind != 9) {
        pub(CBT_EV_MP_REQUEST_START, sid);
        pub(CBT_EV_MP_LOOKUP_PREFETCH_START, sid);
        cbt_event e;
        cbt_event_init(&e, CBT_EV_MP_LOOKUP_PREFETCH_END, sid);
        cbt_event_i64(&e, CBT_N_HIT_TOKENS, hit_tokens);
        cbt_event_i64(&e, CBT_N_REQUESTED_TOKENS, req_tokens);
        cbt_event_i64(&e, CBT_N_FOUND_COUNT, hits);
        cbt_publish(&e);
        w->hit_tokens += hit_tokens;
        w->requested_tokens += req_tokens;
    }
    if (hits) {
        pub(CBT_EV_MP_RETRIEVE_SUBMITTED, sid);
        plant(w); /* the retrieve is this request's first stream operation */
        pub_stream(w, CBT_EV_MP_RETRIEVE_START, sid, CBT_N_NUM_TOKENS, hit_tokens);
        job *l2 = &w->jobs[0];
        l2->l2 = 1;
        l2->l2_chunks = (hits + 1) / 2; /* half the hit chunks come up from L2 */
        launch(w, l2, sid, CBT_KOP_L2_LOAD, 0);
        job *sc = &w->jobs[1];
        sc->l2 = 0;
        sc->dir = CBT_SCATTER_RETRIEVE;
        sc->rope = (cbt_rope){w->cos_sin, ROT_DIM, MAX_POS, CBT_ROPE_NEOX, w->old_positions};
        sc->args = (cbt_scatter_args){w->chunk, w->paged, w->positions, w->table, N_BLOCKS,
                                      hit_tokens, 0, &sc->rope};
        launch(w, sc, sid, CBT_KOP_SCATTER, hit_tokens);
        pub_stream(w, CBT_EV_MP_RETRIEVE_END, sid, CBT_N_FOUND_COUNT, hits);
        w->bytes_moved += (uint64_t)(l2->l2_chunks + hits) * CHUNK_TOKENS * row_bytes() * 2 * LAYERS;
    }
    if (kind != 8) {
        uint32_t new_tokens = req_tokens - hit_tokens;
        pub(CBT_EV_MP_STORE_SUBMITTED, sid);
        if (!hits)
            plant(w); /* no retrieve: the store is the first */
        pub_stream(w, CBT_EV_MP_STORE_START, sid, CBT_N_NUM_TOKENS, new_tokens);
        if (new_tokens) {
            job *ga = &w->jobs[2];
            ga->l2 = 0;
            ga->dir = CBT_SCATTER_STORE;
            ga->args = (cbt_scatter_args){w->chunk, w->paged, w->positions + hit_tokens, w->table,
                                          N_BLOCKS, new_tokens, hit_tokens, NULL};
            launch(w, ga, sid, CBT_KOP_GATHER, new_tokens);
            w->bytes_moved += (uint64_t)new_tokens * row_bytes() * 2 * LAYERS;
        }
        pub_stream(w, CBT_EV_MP_STORE_END, sid, CBT_N_STORED_COUNT, chunks - hits);
    }
    /* end_session() returns before the stream work is done: the race */
    pub(CBT_EV_MP_REQUEST_END, sid);
    /* the jobs are reused by the next request: wait for this one */
    cbt_stream_sync(w->stream);
}

static int worker_setup(worker *w, int gpu)
{
    w->g = (cbt_kv_geom){LAYERS, HEADS, HEAD_DIM, CBT_DT_BF16, BLOCK, N_BLOCKS, MAX_TOKENS};
    uint64_t chunk_bytes = 2ull * LAYERS * MAX_TOKENS * row_bytes();
    uint64_t layer_bytes = 2ull * N_BLOCKS * BLOCK * row_bytes();
    w->chunk = malloc(chunk_bytes);
    w->staging = malloc(chunk_bytes);
    w->cos_sin = malloc((size_t)MAX_POS * ROT_DIM * 2);
    if (!w->chunk || !w->staging || !w->cos_sin)
        return -1;
    for (uint32_t l = 0; l < LAYERS; l++)
        if (!(w->paged[l] = calloc(1, layer_bytes)))
            return -1;
    /* bf16 values in [-1, 1): random keys and values, a real cos/sin table */
    uint16_t *c = w->chunk, *st = w->staging, *cs = w->cos_sin;
    for (uint64_t i = 0; i < chunk_bytes / 2; i++) {
        c[i] = (uint16_t)(0x3c00u + (rnd(&w->rng) & 0x3ffu)) ^ (uint16_t)((rnd(&w->rng) & 1u) << 15);
        st[i] = c[i];
    }
    for (uint32_t p = 0; p < MAX_POS; p++)
        for (uint32_t d = 0; d < ROT_DIM / 2; d++) {
            double inv = 1.0 / pow(10000.0, 2.0 * d / ROT_DIM), a = p * inv;
            float cf = (float)cos(a), sf = (float)sin(a);
            uint32_t cb, sb;
            memcpy(&cb, &cf, 4);
            memcpy(&sb, &sf, 4);
            cs[(size_t)p * ROT_DIM + d] = (uint16_t)(cb >> 16);
            cs[(size_t)p * ROT_DIM + ROT_DIM / 2 + d] = (uint16_t)(sb >> 16);
        }
    for (uint32_t i = 0; i < MAX_TOKENS; i++)
        w->positions[i] = (int32_t)i;
    for (uint32_t k = 0; k < MAX_CHUNKS; k++) {
        w->l2_dst[k] = (char *)w->chunk + (size_t)k * CHUNK_TOKENS * row_bytes();
        w->l2_src[k] = (char *)w->staging + (size_t)k * CHUNK_TOKENS * row_bytes();
    }
    /* the first chunk is a prefix hit; later hit chunks were computed at
     * other offsets and need re-RoPE (CacheBlend's non-prefix reuse) */
    for (uint32_t i = 0; i < MAX_TOKENS; i++)
        w->old_positions[i] = i < CHUNK_TOKENS ? (int32_t)i : (int32_t)i + SHIFT;
    if (gpu)
        return demo_gpu_setup(&w->dev, &w->g, w->chunk, chunk_bytes, w->staging, layer_bytes,
                              w->cos_sin, (uint64_t)MAX_POS * ROT_DIM * 2, w->positions,
                              w->old_positions, MAX_TOKENS, N_BLOCKS, MAX_CHUNKS,
                              (uint64_t)CHUNK_TOKENS * row_bytes(), &w->stream);
    return cbt_stream_cpu_create(0, &w->stream) == CBT_OK ? 0 : -1;
}

static void worker_free(worker *w)
{
    cbt_stream_destroy(w->stream); /* syncs first */
    demo_gpu_free(w->dev);
    free(w->chunk);
    free(w->staging);
    free(w->cos_sin);
    for (uint32_t l = 0; l < LAYERS; l++)
        free(w->paged[l]);
}

static _Atomic uint32_t g_done; /* requests finished, for the progress bar */

_Atomic int cbt_demo_stop_;

static void *worker_main(void *arg)
{
    worker *w = arg;
    for (uint32_t r = w->id; r < w->o->requests && !atomic_load_explicit(&cbt_demo_stop_, memory_order_relaxed); r += w->o->concurrency) {
        run_request(w, r);
        atomic_fetch_add_explicit(&g_done, 1, memory_order_relaxed);
    }
    return NULL;
}

static void progress(uint32_t done, uint32_t total)
{
    unsigned w = 40, fill = total ? (unsigned)((uint64_t)done * w / total) : w;
    fprintf(stderr, "\r[");
    for (unsigned i = 0; i < w; i++)
        fputc(i < fill ? '#' : '.', stderr);
    fprintf(stderr, "] %u/%u requests", done, total);
    fflush(stderr);
}

/* A copy of the spans the demo's in-memory sink holds (*n of them; NULL when
 * the copy cannot be allocated), saying on stderr when the sink had to drop
 * some (the printed trees are then incomplete; the files are not). */
static cbt_span *memsink_copy(cbt_memsink *mem, uint32_t *n)
{
    *n = cbt_memsink_count(mem);
    if (cbt_memsink_dropped(mem))
        fprintf(stderr, "cbt demo: the in-memory sink held %u spans and dropped %llu: the trees "
                        "below are incomplete (the span and trace files are not)\n",
                *n, (unsigned long long)cbt_memsink_dropped(mem));
    cbt_span *spans = calloc(*n ? *n : 1, sizeof *spans);
    for (uint32_t i = 0; spans && i < *n; i++)
        cbt_memsink_get(mem, i, &spans[i]);
    return spans;
}

/* Bytes moved by kernel spans and the time they took: the demo's GB/s. */
static double kernel_gbps(const cbt_span *spans, uint32_t n)
{
    double bytes = 0, ns = 0;
    for (uint32_t i = 0; i < n; i++) {
        const cbt_span *s = &spans[i];
        const cbt_attr *b = cbt_span_attr(s, CBT_N_BYTES);
        const cbt_attr *w = cbt_span_attr(s, CBT_N_SLOT_WRITES);
        double sb = b && b->type == CBT_META_I64 ? (double)b->v.i64
                    : w && w->type == CBT_META_I64 ? (double)w->v.i64 * (double)row_bytes() * 2.0
                                                   : 0.0; /* each slot write reads and writes a row */
        if (sb > 0) {
            bytes += sb;
            ns += (double)(s->end_ns - s->start_ns);
        }
    }
    return ns > 0 ? bytes / ns : 0.0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* How long the stream-timed spans waited in their streams' queues
 * (cbt.queue_ns, docs/spans.md "Queue time"): the distribution, and the
 * span that waited longest. */
static void queue_summary(FILE *out, const cbt_span *spans, uint32_t n, uint32_t planted_ms)
{
    uint64_t *q = calloc(n ? n : 1, sizeof *q);
    if (!q)
        return;
    uint32_t k = 0, worst = 0;
    uint64_t max = 0;
    for (uint32_t i = 0; i < n; i++) {
        const cbt_attr *a = cbt_span_attr(&spans[i], CBT_N_QUEUE_NS);
        if (!a || a->type != CBT_META_I64)
            continue;
        uint64_t v = a->v.i64 > 0 ? (uint64_t)a->v.i64 : 0;
        if (k == 0 || v > max) {
            max = v;
            worst = i;
        }
        q[k++] = v;
    }
    if (k) {
        qsort(q, k, sizeof *q, cmp_u64);
        const cbt_span *w = &spans[worst];
        const cbt_attr *sid = cbt_span_attr(w, CBT_N_SESSION_ID);
        const cbt_attr *st = cbt_span_attr(w, CBT_N_CBT_STREAM);
        fprintf(out,
                "queue time: %u stream-timed spans, cbt.queue_ns p50 %.3f ms, p99 %.3f ms, "
                "max %.3f ms (%s of %.*s on stream %lld)\n",
                k, q[k / 2] / 1e6, q[(k * 99) / 100 < k ? (k * 99) / 100 : k - 1] / 1e6,
                max / 1e6, cbt_name_str(w->name), sid ? (int)sid->str_len : 1,
                sid ? cbt_attr_str(w, sid) : "-", st ? (long long)st->v.i64 : -1ll);
    }
    if (planted_ms)
        fprintf(out, "planted: %u ms of other work ahead of each request's first stream "
                     "operation (--plant-queue)\n", planted_ms);
    free(q);
}

/* ---- --cacheblend: three roles, one trace ------------------------------------------------ */

typedef struct role_arg {
    cbt_cb_role role;
    int a, b;
    const cbt_cb_role_opts *o;
    int rc;
    char err[256];
} role_arg;

static void *role_main(void *p)
{
    role_arg *ra = p;
    ra->rc = cbt_cb_role_run(ra->role, ra->a, ra->b, ra->o, ra->err, sizeof ra->err);
    if (ra->rc) { /* wake the others: their reads see the connection end */
        shutdown(ra->a, SHUT_RDWR);
        shutdown(ra->b, SHUT_RDWR);
    }
    return NULL;
}

static uint64_t cb_rng(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The scheduler's script: prompts of 1..16 chunks, hits split into a prefix
 * and a re-RoPE'd non-prefix part, and one request in three loading its KV in
 * two cb.start_load_kv passes (vLLM's partial-then-full allocation). */
static cbt_cb_request *cb_script(const cbt_demo_opts *o)
{
    cbt_cb_request *q = calloc(o->requests, sizeof *q);
    uint64_t x = o->seed;
    for (uint32_t i = 0; q && i < o->requests; i++) {
        snprintf(q[i].rid, sizeof q[i].rid, "cb-%06u", i);
        q[i].send_ctx = 1;
        uint32_t chunks = 1 + (uint32_t)(cb_rng(&x) % 16);
        q[i].prompt_tokens = chunks * 256;
        uint32_t hit = (uint32_t)(cb_rng(&x) % (chunks + 1)) * 256;
        q[i].prefix_hit = (uint32_t)(cb_rng(&x) % (hit / 256 + 1)) * 256;
        q[i].non_prefix_hit = hit - q[i].prefix_hit;
        q[i].load_passes = hit >= 512 && cb_rng(&x) % 3 == 0 ? 2 : 1;
    }
    return q;
}

static int run_cacheblend(const cbt_demo_opts *o, FILE *out)
{
    cbt_sampler smp;
    if (cbt_sampler_from_env(&smp, stderr) != CBT_OK)
        fprintf(stderr, "cbt demo: using the sampler %s\n", cbt_sampler_name(smp.kind));
    cbt_config cfg = cbt_config_default();
    cfg.trace_level = o->trace_level;
    cfg.trace_output = o->trace_output;
    cbt_status st = cbt_init(&cfg);
    if (st) {
        fprintf(stderr, "cbt demo: cannot start the tracer: %s\n", cbt_strerror(st));
        return 1;
    }
    cbt_memsink *mem = NULL;
    cbt_sink msink;
    cbt_subscriber cb;
    cli_sinks ds;
    if ((st = cbt_memsink_create(o->requests * 24 + 16, &mem, &msink)) ||
        (st = cbt_add_sink(&msink)) || (st = cbt_cb_subscriber_create(0, &cb)) ||
        (st = cbt_add_subscriber(&cb))) {
        fprintf(stderr, "cbt demo: %s\n", cbt_strerror(st));
        cbt_shutdown();
        cbt_memsink_release(mem);
        return 1;
    }
    if (cli_sinks_add("cbt demo", o->output, o->spans, o->otlp_json, o->otlp_endpoint, o->otlp_protocol, &ds) != 0) {
        cbt_shutdown();
        cbt_memsink_release(mem);
        return 1;
    }
#ifdef CBT_WITH_NVTX
    cbt_nvtx_enable();
#endif
    cbt_cb_request *script = cb_script(o);
    int ss[2] = {-1, -1}, ws[2] = {-1, -1}, sw[2] = {-1, -1};
    int rc = 0;
    if (!script || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ss) ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ws) ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sw)) {
        fprintf(stderr, "cbt demo: cannot set up the three roles\n");
        rc = 1;
    }
    cbt_cb_role_opts ro = {.requests = script, .n_requests = o->requests, .sampler = smp,
                           .work_us = 100};
    role_arg ra[3] = {{CBT_CB_ROLE_SCHEDULER, ss[0], sw[0], &ro, 0, ""},
                      {CBT_CB_ROLE_WORKER, sw[1], ws[0], &ro, 0, ""},
                      {CBT_CB_ROLE_SERVER, ss[1], ws[1], &ro, 0, ""}};
    static const char *const names[3] = {"scheduler", "worker", "server"};
    pthread_t th[3];
    int started = 0;
    for (; rc == 0 && started < 3; started++)
        if (pthread_create(&th[started], NULL, role_main, &ra[started]) != 0) {
            fprintf(stderr, "cbt demo: cannot start the %s thread\n", names[started]);
            for (int i = 0; i < 2; i++) { /* unblock those already running */
                shutdown(ss[i], SHUT_RDWR);
                shutdown(ws[i], SHUT_RDWR);
                shutdown(sw[i], SHUT_RDWR);
            }
            rc = 1;
            break;
        }
    for (int i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
        if (ra[i].rc) {
            fprintf(stderr, "cbt demo: the %s failed: %s\n", names[i], ra[i].err);
            rc = 1;
        }
    }
    for (int i = 0; i < 2; i++) {
        if (ss[i] >= 0) close(ss[i]);
        if (ws[i] >= 0) close(ws[i]);
        if (sw[i] >= 0) close(sw[i]);
    }
    free(script);
    if (cbt_flush(5000) != CBT_OK)
        fprintf(stderr, "cbt demo: flush timed out\n");
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    cbt_cb_stats cs = CBT_STRUCT_INIT(cbt_cb_stats);
    cbt_pspan_stats ps = CBT_STRUCT_INIT(cbt_pspan_stats);
    cbt_blend_snapshot bs;
    cbt_metrics_get(&m);
    cbt_cb_stats_get(NULL, &cs);
    cbt_pspan_stats_get(&ps);
    cbt_blend_snapshot_take(cbt_blend_metrics_current(), &bs);
    cbt_metrics fin = CBT_STRUCT_INIT(cbt_metrics);
    cbt_shutdown_final(&fin); /* the sinks' final figures land in ds */

    uint32_t n;
    cbt_span *spans = memsink_copy(mem, &n);
    if (spans && o->slowest) {
        fprintf(out, "The %u slowest CacheBlend requests, end to end:\n", o->slowest);
        cbt_waterfall_print(out, spans, n, o->slowest, 40);
    }
    if (spans && o->trees) {
        fprintf(out, "\nFirst %u request trees, one trace across scheduler, worker and server:\n",
                o->trees);
        cbt_tree_print(out, spans, n, o->trees);
    }
    uint64_t req_tok = bs.counters[CBT_BC_LOOKUP_REQUESTED_TOKENS];
    fprintf(out,
            "\nrequests %u (traced %llu, sampled out %llu; sampler %s) | spans %u "
            "(plugin %llu, server %llu)\n"
            "lmcache_blend: lookups %llu, hit rate %.3f (%llu/%llu tokens; prefix %llu, "
            "re-RoPE'd %llu), retrieves %llu, scattered %llu tokens\n"
            "events published %llu, dropped %llu | incomplete %llu\n",
            o->requests, (unsigned long long)bs.counters[CBT_BC_LOOKUP_REQUESTS],
            (unsigned long long)(o->requests - bs.counters[CBT_BC_LOOKUP_REQUESTS]),
            cbt_sampler_name(smp.kind), n, (unsigned long long)ps.closed,
            (unsigned long long)(cs.children_closed + cs.roots_closed + cs.point_events),
            (unsigned long long)bs.counters[CBT_BC_LOOKUP_REQUESTS],
            req_tok ? (double)bs.counters[CBT_BC_LOOKUP_HIT_TOKENS] / (double)req_tok : 0.0,
            (unsigned long long)bs.counters[CBT_BC_LOOKUP_HIT_TOKENS],
            (unsigned long long)req_tok,
            (unsigned long long)bs.counters[CBT_BC_LOOKUP_PREFIX_HIT_TOKENS],
            (unsigned long long)bs.counters[CBT_BC_LOOKUP_NON_PREFIX_HIT_TOKENS],
            (unsigned long long)bs.counters[CBT_BC_RETRIEVE_REQUESTS],
            (unsigned long long)bs.counters[CBT_BC_SCATTER_TOKENS],
            (unsigned long long)m.published, (unsigned long long)m.dropped_full,
            (unsigned long long)(cs.incomplete_at_shutdown + ps.incomplete_at_shutdown));
    fprintf(out, "(the work is simulated: sleeps stand in for the lookup, L2 load, scatter and "
                 "forward phases; spans, parents and context propagation are real)\n");
    if (cli_trace_report("cbt demo", &fin, o->trace_level, o->trace_output, out))
        rc = 1;
    if (cli_sinks_report("cbt demo", &ds, out))
        rc = 1;
    free(spans);
    cbt_memsink_release(mem);
    return rc;
}

int cbt_demo_run(const cbt_demo_opts *o, FILE *out)
{
    if (o->cacheblend)
        return run_cacheblend(o, out);
    int gpu = o->backend == CBT_DEMO_GPU || (o->backend == CBT_DEMO_AUTO && demo_gpu_present());
    if (gpu && !demo_gpu_present()) {
        fprintf(stderr, "cbt demo: --gpu: no CUDA device (or a build without CUDA); "
                        "run with --cpu for the CPU backend\n");
        return 1;
    }
    cbt_config cfg = cbt_config_default();
    cfg.trace_level = o->trace_level;
    cfg.trace_output = o->trace_output;
    cbt_status st = cbt_init(&cfg);
    if (st) {
        fprintf(stderr, "cbt demo: cannot start the tracer: %s\n", cbt_strerror(st));
        return 1;
    }
    cbt_memsink *mem = NULL;
    cbt_sink msink;
    cli_sinks ds;
    uint32_t cap = o->requests * 8 + 16;
    if ((st = cbt_memsink_create(cap, &mem, &msink)) || (st = cbt_add_sink(&msink))) {
        fprintf(stderr, "cbt demo: %s\n", cbt_strerror(st));
        cbt_shutdown();
        return 1;
    }
    if (cli_sinks_add("cbt demo", o->output, o->spans, o->otlp_json, o->otlp_endpoint, o->otlp_protocol, &ds) != 0) {
        cbt_shutdown();
        cbt_memsink_release(mem);
        return 1;
    }
#ifdef CBT_WITH_NVTX
    cbt_nvtx_enable(); /* ranges for Nsight Systems; no-ops when no tool is attached */
#endif
    worker *ws = calloc(o->concurrency, sizeof *ws);
    pthread_t *th = calloc(o->concurrency, sizeof *th);
    int rc = 0;
    uint32_t started = 0;
    atomic_store(&g_done, 0);
    for (uint32_t i = 0; ws && th && i < o->concurrency; i++) {
        worker *w = &ws[i];
        w->o = o;
        w->id = i;
        w->plant_ms = o->plant_queue_ms;
        w->rng = o->seed * 0x9e3779b97f4a7c15ull + i + 1;
        if (worker_setup(w, gpu) != 0) {
            rc = 1;
            break;
        }
        if (pthread_create(&th[i], NULL, worker_main, w) != 0) {
            rc = 1;
            break;
        }
        started++;
    }
    if (o->progress) {
        uint32_t d;
        while ((d = atomic_load(&g_done)) < o->requests && started == o->concurrency &&
               !atomic_load_explicit(&cbt_demo_stop_, memory_order_relaxed)) {
            progress(d, o->requests);
            struct timespec ts = {0, 100000000};
            nanosleep(&ts, NULL);
        }
        progress(atomic_load(&g_done), o->requests);
        fputc('\n', stderr);
    }
    for (uint32_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    uint64_t hit = 0, req = 0, bytes = 0;
    for (uint32_t i = 0; ws && i < o->concurrency; i++) {
        worker_free(&ws[i]);
        hit += ws[i].hit_tokens;
        req += ws[i].requested_tokens;
        bytes += ws[i].bytes_moved;
        if (ws[i].failed)
            rc = 1;
    }
    if (!ws || !th)
        rc = 1;
    free(ws);
    free(th);

    /* the kernel spans come from the ring: give the harvester a few rounds */
    for (int i = 0; i < 20; i++) {
        cbt_ring_stats rs = CBT_STRUCT_INIT(cbt_ring_stats);
        cbt_flush(5000);
        if (cbt_ring_stats_get(&rs) == CBT_OK && rs.kernel_spans >= rs.harvested)
            break;
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    if (cbt_flush(5000) != CBT_OK)
        fprintf(stderr, "cbt demo: flush timed out\n");
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    cbt_mp_stats ms = CBT_STRUCT_INIT(cbt_mp_stats);
    cbt_ring_stats rs = CBT_STRUCT_INIT(cbt_ring_stats);
    cbt_metrics_get(&m);
    cbt_mp_stats_get(NULL, &ms);
    cbt_ring_stats_get(&rs);
    /* ends anything still open, flushes and closes the files; the sinks'
     * final figures land in ds */
    cbt_metrics fin = CBT_STRUCT_INIT(cbt_metrics);
    cbt_shutdown_final(&fin);

    uint32_t n;
    cbt_span *spans = memsink_copy(mem, &n);
    if (spans && o->slowest) {
        fprintf(out, "The %u slowest requests, end to end:\n", o->slowest);
        cbt_waterfall_print(out, spans, n, o->slowest, 40);
    }
    if (spans && o->trees) {
        fprintf(out, "\nFirst %u request trees (offsets from the request's start):\n", o->trees);
        cbt_tree_print(out, spans, n, o->trees);
    }
    if (spans)
        queue_summary(out, spans, n, o->plant_queue_ms);
    fprintf(out,
            "\nrequests %u (roots closed %llu, deferred %llu, lazy %llu) | spans %u "
            "(%llu from kernels) | hit rate %.3f (%llu/%llu tokens)\n"
            "KV moved %.1f MiB, kernels at %.2f GB/s (%s) | events published %llu, "
            "dropped %llu, rejected %llu | ring records lost %llu | incomplete %llu\n",
            o->requests, (unsigned long long)ms.roots_closed,
            (unsigned long long)ms.roots_deferred, (unsigned long long)ms.roots_lazy, n,
            (unsigned long long)rs.kernel_spans, req ? (double)hit / (double)req : 0.0,
            (unsigned long long)hit, (unsigned long long)req, (double)bytes / (1 << 20),
            spans ? kernel_gbps(spans, n) : 0.0, gpu ? "GPU kernels" : "CPU references",
            (unsigned long long)m.published,
            (unsigned long long)m.dropped_full, (unsigned long long)m.rejected,
            (unsigned long long)rs.lost, (unsigned long long)ms.incomplete_at_shutdown);
    if (cli_trace_report("cbt demo", &fin, o->trace_level, o->trace_output, out))
        rc = 1;
    if (cli_sinks_report("cbt demo", &ds, out))
        rc = 1;
    free(spans);
    cbt_memsink_release(mem);
    return rc;
}
