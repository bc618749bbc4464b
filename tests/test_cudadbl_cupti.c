/* tests/test_cudadbl_cupti.c — host/device/cupti.c's CUPTI activity handling
 * through its public API (cbt_cupti_enable, the launch scope, cbt_cupti_flush,
 * cbt_cupti_disable) against the CUPTI double, no GPU: enabling registers the
 * buffer callbacks and turns on the launch APIs, the external correlations
 * and the kernels; a kernel launched inside a launch scope comes back, in a
 * buffer cbt handed out, as a gpu.kernel span under the span its launch
 * resolved, with its correlation id, launch id, grid and times (the CUPTI
 * clock calibrated onto unix ns); a kernel outside any scope becomes a span of
 * its own; disabling turns everything off. Host logic only: docs/testing.md. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cbt/cupti.h"
#include "cudadbl.h"
#include "internal/clock.h"
#include "testutil.h"

static void kernel_records_become_gpu_kernel_spans(void **state)
{
    (void)state;
    cudadbl_reset();
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    c.cuda_ring_capacity = 0;
    tu_start(&c);
    assert_int_equal(cbt_cupti_enable(), CBT_OK);
    assert_int_equal(cbt_cupti_enable(), CBT_ERR_ALREADY);
    assert_int_equal(cudadbl_cupti_kinds_enabled(), 2); /* ext. correlation, kernels */
    assert_true(cudadbl_cupti_apis_enabled() >= 9);    /* the launch calls only */
    cbt_cupti_stats a = CBT_STRUCT_INIT(cbt_cupti_stats), b = CBT_STRUCT_INIT(cbt_cupti_stats);
    assert_int_equal(cbt_cupti_stats_get(&a), CBT_OK);
    assert_true(a.enabled);

    const char *sid = "dbl-cupti";
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_RETRIEVE_SUBMITTED, sid);
    tu_pub(CBT_EV_MP_RETRIEVE_START, sid);
    cbt_launch_info li = cbt_launch_info_default(CBT_KOP_SCATTER, 4);
    cbt_kspan span;
    assert_int_equal(cbt_launch_begin(NULL, sid, &li, &span), CBT_OK);
    tu_flush(); /* the launch is known, under mp.retrieve */

    uint64_t u0 = cbt_clock_unix_now(), c0 = cudadbl_cupti_now();
    assert_int_equal(cbt_cupti_launch_scope_begin(span.launch_id), CBT_OK);
    uint32_t corr = cudadbl_cupti_launch("dbl_scatter", c0 + 1000000, c0 + 3000000);
    assert_int_equal(cbt_cupti_launch_scope_end(), CBT_OK);
    uint32_t loose = cudadbl_cupti_launch("dbl_loose", c0 + 4000000, c0 + 4500000);
    assert_true(corr != 0 && loose != 0);
    assert_int_equal(cbt_cupti_flush(), CBT_OK);
    assert_true(cudadbl_cupti_buffers_completed() >= 1);
    tu_flush();
    tu_pub(CBT_EV_MP_RETRIEVE_END, sid);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();
    struct timespec d = {0, 40000000}; /* past the 20 ms a kernel with no mapping waits */
    nanosleep(&d, NULL);
    tu_flush();

    assert_int_equal(tu_count("gpu.kernel", NULL), 2);
    const cbt_span *k = NULL, *l = NULL;
    for (uint32_t i = 0; i < 2; i++) {
        const cbt_span *x = tu_find("gpu.kernel", NULL, i);
        if (tu_attr_i64(x, "correlation_id") == corr)
            k = x;
        else if (tu_attr_i64(x, "correlation_id") == loose)
            l = x;
    }
    assert_non_null(k);
    assert_non_null(l);
    const cbt_span *ret = tu_find("mp.retrieve", sid, 0);
    assert_non_null(ret);
    assert_true(tu_is_child_of(k, ret));
    assert_int_equal(tu_attr_i64(k, "launch_id"), span.launch_id);
    assert_int_equal(tu_attr_i64(k, "grid_x"), 264);
    assert_int_equal(tu_attr_i64(k, "block_x"), 256);
    assert_int_equal(tu_attr_i64(k, "stream"), 7);
    assert_true(tu_is_root(l));
    assert_false(tu_has_attr(l, "launch_id"));
    /* CUPTI's 2 ms kept (a few ns of tick rounding); its start 1 ms after u0,
     * to the calibration's bracket */
    uint64_t dur = k->end_ns - k->start_ns;
    int64_t off = (int64_t)(k->start_ns - u0) - 1000000;
    printf("# gpu.kernel: %llu ns long, start %lld ns from expected\n", (unsigned long long)dur,
           (long long)off);
    assert_true(dur > 1999000 && dur < 2001000);
    assert_true(off > -500000 && off < 500000);
    assert_int_equal(cbt_cupti_stats_get(&b), CBT_OK);
    assert_int_equal(b.records - a.records, 2);
    assert_int_equal(b.spans - a.spans, 2);
    assert_int_equal(b.api_records - a.api_records, 2);
    assert_int_equal(b.dropped, a.dropped);

    assert_int_equal(cbt_cupti_disable(), CBT_OK);
    assert_int_equal(cudadbl_cupti_kinds_enabled(), 0);
    assert_int_equal(cudadbl_cupti_apis_enabled(), 0);
    assert_int_equal(cbt_cupti_flush(), CBT_ERR_NOT_FOUND);
    tu_stop();
}

static void no_device_refused(void **state)
{
    (void)state;
    cudadbl_reset();
    tu_start(NULL);
    cudadbl_set_devices(0);
    assert_int_equal(cbt_cupti_enable(), CBT_ERR_NO_DEVICE);
    cudadbl_set_devices(1);
    tu_stop();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(kernel_records_become_gpu_kernel_spans, tu_teardown),
        cmocka_unit_test_teardown(no_device_refused, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
