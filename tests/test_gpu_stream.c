/* tests/test_gpu_stream.c — the CUDA stream backend on a real GPU: marks are
 * pooled CUDA events resolved by the harvester, so REQUEST_END published by
 * the CPU races the GPU's STORE_END exactly as in the seed's scenario 5.
 * Exits 77 (skipped) with the reason when no device is present. */
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

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
    cbt_metrics m;
    assert_int_equal(cbt_metrics_get(&m), CBT_OK);
    assert_int_equal(m.dropped_full, (uint64_t)full);
    assert_int_equal(tu_event_count(), (uint32_t)ok);
    cbt_stream_destroy(s);
    tu_stop();
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
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    cudaStreamDestroy(g_cs);
    return rc;
}
