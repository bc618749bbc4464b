/* tests/test_cupti.c — cbt/cupti.h without a GPU: the refusals are the
 * documented statuses, nothing crashes, and the launch scopes are no-ops
 * while CUPTI is not enabled. (The GPU side is tests/test_gpu_cupti.c.) */
#include <stdio.h>
#include <string.h>

#include "cbt/cupti.h"
#include "testutil.h"

static void without_tracer(void **state)
{
    (void)state;
#ifdef CBT_WITH_CUPTI
    assert_int_equal(cbt_cupti_enable(), CBT_ERR_NOT_INITIALIZED);
#else
    assert_int_equal(cbt_cupti_enable(), CBT_ERR_UNSUPPORTED);
#endif
    assert_int_equal(cbt_cupti_launch_scope_begin(3), CBT_OK);
    assert_int_equal(cbt_cupti_launch_scope_end(), CBT_OK);
}

static void with_tracer_no_device_or_no_cupti(void **state)
{
    (void)state;
    tu_start(NULL);
    cbt_status st = cbt_cupti_enable();
#ifdef CBT_WITH_CUPTI
    /* a device here would make this CBT_OK (or UNSUPPORTED under another tool) */
    assert_true(st == CBT_ERR_NO_DEVICE || st == CBT_OK || st == CBT_ERR_UNSUPPORTED ||
                st == CBT_ERR_ALREADY);
#else
    assert_int_equal(st, CBT_ERR_UNSUPPORTED);
#endif
    printf("# cbt_cupti_enable: %d\n", (int)st);
    if (st != CBT_OK) {
        assert_int_equal(cbt_cupti_launch_scope_begin(7), CBT_OK);
        assert_int_equal(cbt_cupti_launch_scope_end(), CBT_OK);
        assert_int_not_equal(cbt_cupti_flush(), CBT_OK);
    }
    assert_int_equal(cbt_cupti_launch_scope_begin(0), CBT_OK);
    assert_int_equal(cbt_cupti_launch_scope_end(), CBT_OK);
    cbt_cupti_stats cs = CBT_STRUCT_INIT(cbt_cupti_stats);
    memset(&cs, 0xff, sizeof cs);
    cbt_status gs = cbt_cupti_stats_get(&cs);
    assert_true(gs == CBT_OK || gs == CBT_ERR_UNSUPPORTED);
    if (st != CBT_OK) {
        assert_int_equal(cs.records, 0);
        assert_int_equal(cs.spans, 0);
        assert_int_equal(cs.enabled, 0);
    }
    assert_int_equal(cbt_cupti_stats_get(NULL), CBT_ERR_INVAL);
    tu_flush(); /* the harvester's CUPTI poll runs with nothing queued */
    assert_int_equal(tu_count("gpu.kernel", NULL), 0);
    tu_stop();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(without_tracer),
        cmocka_unit_test_teardown(with_tracer_no_device_or_no_cupti, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
