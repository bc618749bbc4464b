/* host/demo.c — owns the demo workload (see demo.h). */
#include "demo.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cbt.h"
#include "tree.h"

#define CHUNK_TOKENS 256
#define BYTES_PER_TOKEN 4096 /* 32 layers x 2 x 8 heads x 128 x 2 B / 32 (scaled down) */

typedef struct copy_job {
    unsigned char *dst, *src;
    size_t bytes;
} copy_job;

typedef struct worker {
    const cbt_demo_opts *o;
    uint32_t id;
    cbt_stream *stream;
    unsigned char *a, *b;
    size_t buf_bytes;
    copy_job jobs[2];
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

static void copy_fn(void *arg)
{
    copy_job *j = arg;
    memcpy(j->dst, j->src, j->bytes);
}

cbt_demo_opts cbt_demo_defaults(void)
{
    cbt_demo_opts o = {.requests = 8, .concurrency = 4, .seed = 42,
                       .output = "cbt-spans.jsonl", .trees = 8};
    return o;
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

/* One request, as LMCache's MP server publishes it. */
static void run_request(worker *w, uint32_t r)
{
    char sid[32];
    snprintf(sid, sizeof sid, "req-%04u", r);
    uint32_t chunks = 1 + (uint32_t)(rnd(&w->rng) % 8);
    uint32_t kind = (uint32_t)(rnd(&w->rng) % 10); /* 0-4 partial/full hit, 5-7 miss, 8 lookup only, 9 store only */
    uint32_t hits = kind <= 4 ? 1 + (uint32_t)(rnd(&w->rng) % chunks) : 0;
    int64_t req_tokens = (int64_t)chunks * CHUNK_TOKENS, hit_tokens = (int64_t)hits * CHUNK_TOKENS;

    if (kind != 9) {
        pub(CBT_EV_MP_REQUEST_START, sid);
        pub(CBT_EV_MP_LOOKUP_PREFETCH_START, sid);
        cbt_event e;
        cbt_event_init(&e, CBT_EV_MP_LOOKUP_PREFETCH_END, sid);
        cbt_event_i64(&e, CBT_N_HIT_TOKENS, hit_tokens);
        cbt_event_i64(&e, CBT_N_REQUESTED_TOKENS, req_tokens);
        cbt_event_i64(&e, CBT_N_FOUND_COUNT, hits);
        cbt_publish(&e);
        w->hit_tokens += (uint64_t)hit_tokens;
        w->requested_tokens += (uint64_t)req_tokens;
    }
    if (hits) {
        size_t bytes = (size_t)hit_tokens * BYTES_PER_TOKEN;
        w->jobs[0] = (copy_job){w->b, w->a, bytes < w->buf_bytes ? bytes : w->buf_bytes};
        pub(CBT_EV_MP_RETRIEVE_SUBMITTED, sid);
        pub_stream(w, CBT_EV_MP_RETRIEVE_START, sid, CBT_N_NUM_TOKENS, hit_tokens);
        cbt_stream_enqueue(w->stream, copy_fn, &w->jobs[0]);
        pub_stream(w, CBT_EV_MP_RETRIEVE_END, sid, CBT_N_FOUND_COUNT, hits);
        w->bytes_moved += w->jobs[0].bytes;
    }
    if (kind != 8) {
        size_t bytes = (size_t)(req_tokens - hit_tokens + CHUNK_TOKENS) * BYTES_PER_TOKEN;
        w->jobs[1] = (copy_job){w->a, w->b, bytes < w->buf_bytes ? bytes : w->buf_bytes};
        pub(CBT_EV_MP_STORE_SUBMITTED, sid);
        pub_stream(w, CBT_EV_MP_STORE_START, sid, CBT_N_NUM_TOKENS, req_tokens - hit_tokens);
        cbt_stream_enqueue(w->stream, copy_fn, &w->jobs[1]);
        pub_stream(w, CBT_EV_MP_STORE_END, sid, CBT_N_STORED_COUNT, chunks - hits);
        w->bytes_moved += w->jobs[1].bytes;
    }
    /* end_session() returns before the stream work is done: the race */
    pub(CBT_EV_MP_REQUEST_END, sid);
    /* the jobs' buffers are reused by the next request: wait for this one */
    cbt_stream_sync(w->stream);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    for (uint32_t r = w->id; r < w->o->requests; r += w->o->concurrency)
        run_request(w, r);
    return NULL;
}

int cbt_demo_run(const cbt_demo_opts *o, FILE *out)
{
    cbt_config cfg = cbt_config_default();
    cfg.jsonl_path = o->output;
    cbt_status st = cbt_init(&cfg);
    if (st) {
        fprintf(stderr, "cbt demo: cannot start the tracer: %s\n", cbt_strerror(st));
        return 1;
    }
    cbt_memsink *mem = NULL;
    cbt_sink msink;
    uint32_t cap = o->requests * 4 + 16;
    if ((st = cbt_memsink_create(cap, &mem, &msink)) || (st = cbt_add_sink(&msink))) {
        fprintf(stderr, "cbt demo: %s\n", cbt_strerror(st));
        cbt_shutdown();
        return 1;
    }
    worker *ws = calloc(o->concurrency, sizeof *ws);
    pthread_t *th = calloc(o->concurrency, sizeof *th);
    int rc = 0;
    uint32_t started = 0;
    for (uint32_t i = 0; ws && th && i < o->concurrency; i++) {
        worker *w = &ws[i];
        w->o = o;
        w->id = i;
        w->rng = o->seed * 0x9e3779b97f4a7c15ull + i + 1;
        w->buf_bytes = (size_t)8 * CHUNK_TOKENS * BYTES_PER_TOKEN;
        w->a = malloc(w->buf_bytes);
        w->b = malloc(w->buf_bytes);
        if (!w->a || !w->b || cbt_stream_cpu_create(0, &w->stream) != CBT_OK) {
            rc = 1;
            break;
        }
        memset(w->a, 0x5a, w->buf_bytes);
        memset(w->b, 0xa5, w->buf_bytes);
        if (pthread_create(&th[i], NULL, worker_main, w) != 0) {
            rc = 1;
            break;
        }
        started++;
    }
    for (uint32_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    uint64_t hit = 0, req = 0, bytes = 0;
    for (uint32_t i = 0; ws && i < o->concurrency; i++) {
        cbt_stream_destroy(ws[i].stream);
        free(ws[i].a);
        free(ws[i].b);
        hit += ws[i].hit_tokens;
        req += ws[i].requested_tokens;
        bytes += ws[i].bytes_moved;
    }
    if (!ws || !th)
        rc = 1;
    free(ws);
    free(th);

    if (cbt_flush(5000) != CBT_OK)
        fprintf(stderr, "cbt demo: flush timed out\n");
    cbt_metrics m;
    cbt_mp_stats ms;
    cbt_metrics_get(&m);
    cbt_mp_stats_get(NULL, &ms);
    cbt_shutdown(); /* ends anything still open; closes the span file */

    uint32_t n = cbt_memsink_count(mem);
    cbt_span *spans = calloc(n ? n : 1, sizeof *spans);
    for (uint32_t i = 0; spans && i < n; i++)
        cbt_memsink_get(mem, i, &spans[i]);
    if (spans && o->trees) {
        fprintf(out, "First %u request trees (offsets from the request's start):\n", o->trees);
        cbt_tree_print(out, spans, n, o->trees);
    }
    fprintf(out,
            "\nrequests %u (roots closed %llu, deferred %llu, lazy %llu) | spans %u | "
            "hit rate %.3f (%llu/%llu tokens) | bytes moved %.1f MiB\n"
            "events published %llu, dropped %llu, rejected %llu | subscriber errors %llu | "
            "max lag %.1f us | incomplete %llu\n",
            o->requests, (unsigned long long)ms.roots_closed,
            (unsigned long long)ms.roots_deferred, (unsigned long long)ms.roots_lazy, n,
            req ? (double)hit / (double)req : 0.0, (unsigned long long)hit,
            (unsigned long long)req, (double)bytes / (1 << 20),
            (unsigned long long)m.published, (unsigned long long)m.dropped_full,
            (unsigned long long)m.rejected, (unsigned long long)m.subscriber_errors,
            (double)m.lag_max_ns / 1e3, (unsigned long long)ms.incomplete_at_shutdown);
    fprintf(out, "spans written to %s (one JSON object per line)\n", o->output);
    free(spans);
    cbt_memsink_release(mem);
    return rc;
}
