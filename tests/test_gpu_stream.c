/* tests/test_gpu_stream.c — the CUDA stream backend on a real GPU: marks are
 * pooled CUDA events resolved by the harvester, so REQUEST_END published by
 * the CPU races the GPU's STORE_END exactly as in the seed's scenario 5.
 * Exits 77 (skipped) with the reason when no device is present. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "cbt/array.h"
#include "cbt/pspan.h"
#include "gpu_testutil.h"
#include "testutil.h"

int cbt_test_launch_spin(void *stream, uint64_t ns);

static cudaStream_t g_cs;

static int dispatch_index(cbt_event_type type, const char *sid)
{
    for (uint32_t i = 0; i < tu_event_count(); i++) {
        const tu_event *e = tu_event_at(i);
        if (e->type == type && strcmp(e->session, sid) == 0)
            return (int)i;
    }
    return -1;
}

/* Scenario 5 on the GPU: the store runs 20 ms; REQUEST_END is published at
 * once, dispatched first, and the root closes at its time when STORE_END
 * resolves. */
static void gpu_request_end_races_store(void **state)
{
    (void)state;
    tu_start(NULL);
    cbt_stream *s;
    assert_int_equal(cbt_stream_cuda_create(g_cs, &s), CBT_OK);
    const char *sid = "gpu-race";
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_START, sid);
    tu_pub_i64(CBT_EV_MP_LOOKUP_PREFETCH_END, sid, "hit_tokens", 0, "requested_tokens", 512);
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    tu_pub_on(s, CBT_EV_MP_STORE_START, sid);
    assert_int_equal(cbt_test_launch_spin(g_cs, 20000000ull), 0);
    tu_pub_on(s, CBT_EV_MP_STORE_END, sid);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();

    int i_end = dispatch_index(CBT_EV_MP_REQUEST_END, sid);
    int i_store_end = dispatch_index(CBT_EV_MP_STORE_END, sid);
    assert_true(i_end >= 0 && i_store_end >= 0);
    assert_true(i_end < i_store_end);

    const cbt_span *root = tu_find("request", sid, 0);
    const cbt_span *store = tu_find("mp.store", sid, 0);
    assert_non_null(root);
    assert_non_null(store);
    assert_true(tu_is_child_of(store, root));
    assert_int_equal(root->end_ns, tu_event_find(CBT_EV_MP_REQUEST_END, sid, 0)->ts);
    uint64_t dur = store->end_ns - store->start_ns;
    printf("mp.store on the GPU: %.3f ms (kernel spins 20 ms)\n", (double)dur / 1e6);
    assert_true(dur >= 19500000ull);
    assert_true(dur <= 60000000ull);
    /* the store began after the request started (1 ms of mapping slack) */
    assert_true(store->start_ns + 1000000ull >= root->start_ns);
    cbt_stream_destroy(s);
    tu_stop();
}

/* More marks than the pool holds, while the stream is busy: the excess is
 * dropped and counted, the caller never blocks. */
static void gpu_pool_exhaustion_counts(void **state)
{
    (void)state;
    tu_start(NULL);
    cbt_stream *s;
    assert_int_equal(cbt_stream_cuda_create(g_cs, &s), CBT_OK);
    assert_int_equal(cbt_test_launch_spin(g_cs, 50000000ull), 0);
    int ok = 0, full = 0;
    for (int i = 0; i < 2 * CBT_STREAM_CUDA_POOL; i++) {
        cbt_event e;
        cbt_event_init(&e, CBT_EV_L2_LOAD_TASK_SUBMITTED, "pool");
        cbt_status st = cbt_publish_on_stream(s, &e);
        if (st == CBT_OK)
            ok++;
        else if (st == CBT_ERR_FULL)
            full++;
    }
    assert_true(ok <= CBT_STREAM_CUDA_POOL);
    assert_int_equal(ok + full, 2 * CBT_STREAM_CUDA_POOL);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m), CBT_OK);
    assert_int_equal(m.dropped_full, (uint64_t)full);
    assert_int_equal(tu_event_count(), (uint32_t)ok);
    cbt_stream_destroy(s);
    tu_stop();
}

/* The worker's GPU phases as pspans on a CUDA stream (cbt/pspan.h): each is
 * timed by the CUDA events around its kernel, nests under cb.model_forward
 * (a CPU pspan), and the three follow each other in stream order. */
static void gpu_pspans_timed_by_cuda_events(void **state)
{
    (void)state;
    tu_start(NULL);
    cbt_stream *s;
    assert_int_equal(cbt_stream_cuda_create(g_cs, &s), CBT_OK);
    const char *rid = "gpu-pspan";
    cbt_pspan fwd, ph[3];
    static const cbt_name names[3] = {CBT_N_CB_FULL_RECOMP, CBT_N_CB_CHECK, CBT_N_CB_PARTIAL};
    static const uint64_t spin_ns[3] = {8000000ull, 2000000ull, 6000000ull};
    assert_int_equal(cbt_pspan_begin(&fwd, CBT_N_CB_MODEL_FORWARD, CBT_SPAN_KIND_INTERNAL, rid,
                                     NULL, NULL, 0), CBT_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(cbt_pspan_begin_on(&ph[i], s, names[i], CBT_SPAN_KIND_INTERNAL, rid,
                                            &fwd.ctx, NULL, 0), CBT_OK);
        assert_int_equal(cbt_test_launch_spin(g_cs, spin_ns[i]), 0);
        assert_int_equal(cbt_pspan_end_on(&ph[i], NULL, 0), CBT_OK);
    }
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    assert_int_equal(cbt_pspan_end(&fwd, NULL, 0), CBT_OK);
    tu_flush();
    const cbt_span *f = NULL, *sp[3] = {NULL, NULL, NULL};
    for (uint32_t i = 0; i < tu_span_count(); i++) {
        const cbt_span *x = tu_span(i);
        if (memcmp(x->ctx.span_id, fwd.ctx.span_id, 8) == 0)
            f = x;
        for (int k = 0; k < 3; k++)
            if (memcmp(x->ctx.span_id, ph[k].ctx.span_id, 8) == 0)
                sp[k] = x;
    }
    assert_non_null(f);
    for (int k = 0; k < 3; k++) {
        assert_non_null(sp[k]);
        assert_true(tu_is_child_of(sp[k], f));
        uint64_t dur = sp[k]->end_ns - sp[k]->start_ns;
        printf("%s on the GPU: %.3f ms (kernel spins %.1f ms)\n", cbt_name_str(names[k]),
               (double)dur / 1e6, (double)spin_ns[k] / 1e6);
        assert_true(dur + 500000ull >= spin_ns[k]);
        assert_true(dur <= spin_ns[k] + 20000000ull);
        if (k > 0)
            assert_true(sp[k]->start_ns + 100000ull >= sp[k - 1]->end_ns);
    }
    cbt_stream_destroy(s);
    tu_stop();
}

static uint64_t arrays_used(void)
{
    cbt_arrays_stats st;
    cbt_arrays_stats_get(&st);
    return st.used;
}

/* Array values on a CUDA stream's marks (issue 22): the elements are copied
 * at the enqueue (the caller's buffer changes while the kernel runs), ride
 * the pending mark, reach the request root; every reference is given back. */
static void gpu_arrays_on_cuda_marks(void **state)
{
    (void)state;
    tu_start(NULL);
    cbt_stream *s;
    assert_int_equal(cbt_stream_cuda_create(g_cs, &s), CBT_OK);
    const char *sid = "gpu-arrays";
    enum { N = 131072 };
    static int64_t ids[N];
    for (int i = 0; i < N; i++)
        ids[i] = 7 * i;
    cbt_name key;
    assert_int_equal(cbt_intern("token_ids", &key), CBT_OK);
    assert_int_equal(cbt_test_launch_spin(g_cs, 5000000ull), 0);
    cbt_event ev;
    cbt_event_init(&ev, CBT_EV_MP_REQUEST_START, sid);
    assert_int_equal(cbt_event_array_i64(&ev, key, ids, N), CBT_OK);
    assert_int_equal(cbt_publish_on_stream(s, &ev), CBT_OK);
    for (int i = 0; i < N; i++) /* changed while the mark is pending */
        ids[i] = -1;
    tu_pub_on(s, CBT_EV_MP_REQUEST_END, sid);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    const cbt_span *root = tu_find("request", sid, 0);
    assert_non_null(root);
    cbt_array a;
    assert_true(cbt_attr_array(cbt_span_attr(root, key), &a));
    assert_int_equal(a.count, N);
    cbt_array_iter it;
    cbt_array_iter_init(&it, &a);
    int64_t v;
    for (int i = 0; i < N; i++) {
        assert_true(cbt_array_next_i64(&it, &v));
        assert_int_equal(v, 7 * (int64_t)i);
    }
    cbt_stream_destroy(s);
    tu_stop();
    assert_int_equal(arrays_used(), 0);
}

/* A kernel that outlives the shutdown bound: cbt_shutdown returns within
 * shutdown_timeout_ms (plus slack) instead of waiting for the GPU, and says
 * on stderr how many marks it dropped. */
static void gpu_shutdown_with_pending_marks_is_bounded(void **state)
{
    (void)state;
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    c.shutdown_timeout_ms = 200;
    tu_start(&c);
    cbt_stream *s;
    assert_int_equal(cbt_stream_cuda_create(g_cs, &s), CBT_OK);
    tu_pub_on(s, CBT_EV_MP_STORE_START, "hung");
    assert_int_equal(cbt_test_launch_spin(g_cs, 2000000000ull), 0); /* 2 s */
    /* a mark with an array, still pending at the shutdown (its chunks are
     * given back when the stream's pending marks go) */
    int64_t three[3] = {1, 2, 3};
    cbt_name key;
    assert_int_equal(cbt_intern("token_ids", &key), CBT_OK);
    cbt_event ev;
    cbt_event_init(&ev, CBT_EV_MP_LOOKUP, "hung");
    assert_int_equal(cbt_event_array_i64(&ev, key, three, 3), CBT_OK);
    assert_int_equal(cbt_publish_on_stream(s, &ev), CBT_OK);
    tu_pub_on(s, CBT_EV_MP_STORE_END, "hung");
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    tu_stop();
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
    printf("shutdown with a 2 s kernel pending: %.1f ms (bound 200 ms)\n", ms);
    assert_true(ms < 1500.0);
    cbt_stream_destroy(s); /* the tracer is gone: nothing to detach from */
    assert_int_equal(cudaStreamSynchronize(g_cs), cudaSuccess);
}

int main(void)
{
    if (!tu_gpu_or_skip("test_gpu_stream"))
        return 77;
    if (cudaStreamCreateWithFlags(&g_cs, cudaStreamNonBlocking) != cudaSuccess) {
        printf("cudaStreamCreate failed\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gpu_request_end_races_store),
        cmocka_unit_test(gpu_pool_exhaustion_counts),
        cmocka_unit_test(gpu_pspans_timed_by_cuda_events),
        cmocka_unit_test(gpu_arrays_on_cuda_marks),
        cmocka_unit_test(gpu_shutdown_with_pending_marks_is_bounded),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    cudaStreamDestroy(g_cs);
    return rc;
}
