/* tests/test_gpu_ring.c — the device ring on a real GPU, end to end: an MP
 * retrieve whose CUDA stream runs an instrumented kernel; the ring record
 * (mapped pinned memory, read while kernels run) joins its launch and
 * becomes cb.scatter under mp.retrieve, inside the CUDA-event-bracketed
 * retrieve span. Both modes; the ring under many concurrent CTAs; the clock
 * calibration's error and drift printed. Exits 77 when no device is present. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "gpu_testutil.h"
#include "testutil.h"

int cbt_test_ring_kernel(void *stream, cbt_kspan span, unsigned int ctas, unsigned int threads,
                         unsigned long long spin_ns, unsigned int tokens, unsigned int shifted);

int cbt_test_gtimer_step(unsigned long long *step_ns);

static cudaStream_t g_cs;

/* Report %globaltimer's step on this GPU (it bounds every kernel span's
 * resolution); fail only if the timer does not move at all. */
static void gpu_globaltimer_resolution(void **state)
{
    (void)state;
    unsigned long long step = 0;
    assert_int_equal(cbt_test_gtimer_step(&step), 0);
    printf("# %%globaltimer step on this GPU: %llu ns\n", step);
    assert_true(step > 0 && step < 10000000ull);
}

static void wait_for(const char *name, const char *sid, uint32_t count)
{
    for (int i = 0; i < 500 && tu_count(name, sid) < count; i++) {
        tu_flush();
        struct timespec d = {0, 2000000};
        nanosleep(&d, NULL);
    }
    tu_flush();
}

static void run_placed(uint8_t mode, const char *sid, cbt_ring_placement placement)
{
    cbt_config cfg = cbt_config_default();
    cfg.poll_interval_us = 50;
    cfg.ring_placement = placement;
    tu_start(&cfg);
    cbt_tracer *t = cbt_tracer_get();
    (void)t;
    cbt_stream *s;
    assert_int_equal(cbt_stream_cuda_create(g_cs, &s), CBT_OK);
    enum { CTAS = 264, THREADS = 128 };
    cbt_launch_info li = cbt_launch_info_default(CBT_KOP_SCATTER, CTAS);
    li.mode = mode;
    li.requested_tokens = CTAS * 10 + 5;
    li.num_layers = 32;
    cbt_kspan span;
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_RETRIEVE_SUBMITTED, sid);
    tu_pub_on(s, CBT_EV_MP_RETRIEVE_START, sid);
    assert_int_equal(cbt_launch_begin(s, sid, &li, &span), CBT_OK);
    assert_non_null(span.ring);
    assert_int_equal(cbt_test_ring_kernel(g_cs, span, CTAS, THREADS, 2000000ull, 10, 3), 0);
    tu_pub_on(s, CBT_EV_MP_RETRIEVE_END, sid);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    wait_for("cb.scatter", sid, 1);
    const cbt_span *ret = tu_find("mp.retrieve", sid, 0);
    const cbt_span *sc = tu_find("cb.scatter", sid, 0);
    assert_non_null(ret);
    assert_non_null(sc);
    assert_true(tu_is_child_of(sc, ret));
    assert_int_equal(tu_attr_i64(sc, "scattered_tokens"), CTAS * 10);
    assert_int_equal(tu_attr_i64(sc, "n_shifted"), CTAS * 3);
    assert_int_equal(tu_attr_i64(sc, "dropped"), 5);
    assert_int_equal(tu_attr_i64(sc, "n_ctas"), CTAS);
    cbt_ring_stats rs = CBT_STRUCT_INIT(cbt_ring_stats);
    assert_int_equal(cbt_ring_stats_get(&rs), CBT_OK);
    double slack = rs.clock_err_ns + 20000.0; /* calibration error + 20 us */
    printf("# %s: retrieve %.3f ms, scatter %.3f ms, scatter starts %+.1f us after retrieve, "
           "ends %+.1f us before; clock err %.0f ns, drift %.2f ppm\n",
           mode == CBT_REC_CTA ? "per-CTA" : "per-launch", (ret->end_ns - ret->start_ns) / 1e6,
           (sc->end_ns - sc->start_ns) / 1e6, ((double)sc->start_ns - (double)ret->start_ns) / 1e3,
           ((double)ret->end_ns - (double)sc->end_ns) / 1e3, rs.clock_err_ns, rs.clock_drift_ppm);
    /* the kernel ran inside the CUDA-event brackets of the retrieve */
    assert_true((double)sc->start_ns + slack >= (double)ret->start_ns);
    assert_true((double)sc->end_ns <= (double)ret->end_ns + slack);
    assert_true(sc->end_ns - sc->start_ns >= 2000000ull);
    assert_int_equal(rs.lost, 0);
    assert_int_equal(rs.unjoined, 0);
    if (mode == CBT_REC_CTA)
        assert_int_equal(rs.cta_records, CTAS);
    cbt_stream_destroy(s);
    tu_stop();
}

static void run(uint8_t mode, const char *sid) { run_placed(mode, sid, CBT_RING_MAPPED); }

/* The same with the ring in device memory, copied out by the harvester. */
static void gpu_span_device_placement(void **state)
{
    (void)state;
    run_placed(CBT_REC_CTA, "gpu-devmem", CBT_RING_DEVICE);
}

static void gpu_span_per_launch(void **state)
{
    (void)state;
    run(CBT_REC_LAUNCH, "gpu-launch");
}

static void gpu_span_per_cta(void **state)
{
    (void)state;
    run(CBT_REC_CTA, "gpu-cta");
}

/* Many CTAs writing per-CTA records at once into a small ring: every record
 * is either harvested or counted lost, never both, never torn. */
static void gpu_ring_under_concurrency(void **state)
{
    (void)state;
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    c.cuda_ring_capacity = 1024;
    tu_start(&c);
    cbt_stream *s;
    assert_int_equal(cbt_stream_cuda_create(g_cs, &s), CBT_OK);
    enum { LAUNCHES = 8, CTAS = 2048 };
    for (int i = 0; i < LAUNCHES; i++) {
        cbt_launch_info li = cbt_launch_info_default(CBT_KOP_USER, CTAS);
        li.mode = CBT_REC_CTA;
        cbt_kspan span;
        assert_int_equal(cbt_launch_begin(s, "burst", &li, &span), CBT_OK);
        assert_int_equal(cbt_test_ring_kernel(g_cs, span, CTAS, 64, 0, 1, 0), 0);
    }
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    struct timespec d = {0, 50000000};
    nanosleep(&d, NULL);
    tu_flush();
    cbt_ring_stats rs = CBT_STRUCT_INIT(cbt_ring_stats);
    assert_int_equal(cbt_ring_stats_get(&rs), CBT_OK);
    printf("# ring burst: %llu records harvested, %llu lost (%llu torn) of %d\n",
           (unsigned long long)rs.harvested, (unsigned long long)rs.lost,
           (unsigned long long)rs.torn, LAUNCHES * CTAS);
    assert_int_equal(rs.harvested + rs.lost, (uint64_t)LAUNCHES * CTAS);
    assert_int_equal(rs.cta_records, rs.harvested);
    cbt_stream_destroy(s);
    tu_stop();
}

int main(void)
{
    if (!tu_gpu_or_skip("test_gpu_ring"))
        return 77;
    if (cudaStreamCreateWithFlags(&g_cs, cudaStreamNonBlocking) != cudaSuccess)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gpu_globaltimer_resolution),
        cmocka_unit_test_teardown(gpu_span_per_launch, tu_teardown),
        cmocka_unit_test_teardown(gpu_span_per_cta, tu_teardown),
        cmocka_unit_test_teardown(gpu_span_device_placement, tu_teardown),
        cmocka_unit_test_teardown(gpu_ring_under_concurrency, tu_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    cudaStreamDestroy(g_cs);
    return rc;
}
