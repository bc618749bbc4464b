/* tests/test_disable.c — the disabled paths: CBT_DISABLE compiles calls out,
 * and a tracer disabled by configuration makes every call a no-op. */
#include "testutil.h"

#include "cbt/kernel_span.h"

int disabled_publish_many(int n, cbt_stream *s);
int disabled_enabled(void);
void disabled_kernel_span(const cbt_ring_dev *ring);

/* With a live tracer, a CBT_DISABLE translation unit still publishes nothing. */
static void compiled_out(void **state)
{
    (void)state;
    tu_start(NULL);
    cbt_stream *s;
    assert_int_equal(cbt_stream_cpu_create(0, &s), CBT_OK);
    assert_int_equal(disabled_publish_many(1000, s), 1000);
    assert_int_equal(disabled_enabled(), 0);
    /* one real event, so we know the pipeline ran */
    tu_pub(CBT_EV_MP_REQUEST_START, "enabled");
    cbt_stream_sync(s);
    tu_flush();
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m), CBT_OK);
    assert_int_equal(m.published, 1);
    assert_int_equal(tu_event_count(), 1);
    assert_null(tu_event_find(CBT_EV_MP_REQUEST_START, "disabled", 0));
    cbt_stream_destroy(s);
    tu_stop();
}

/* enabled = false: cbt_init succeeds, no tracer exists, publishing is a no-op. */
static void disabled_by_config(void **state)
{
    (void)state;
    cbt_config c = cbt_config_default();
    c.enabled = false;
    assert_int_equal(cbt_init(&c), CBT_OK);
    assert_null(cbt_tracer_get());
    assert_false(cbt_enabled());
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, CBT_EV_MP_REQUEST_START, "r"), CBT_OK);
    assert_int_equal(cbt_publish(&e), CBT_OK);
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m), CBT_ERR_NOT_INITIALIZED);
    assert_int_equal(cbt_flush(10), CBT_ERR_NOT_INITIALIZED);
    assert_int_equal(cbt_shutdown(), CBT_OK);
    /* a real tracer can still be started afterwards */
    tu_start(NULL);
    assert_true(cbt_enabled());
    tu_stop();
    assert_false(cbt_enabled());
}

/* CBT_KERNEL_SPAN under CBT_DISABLE: a real ring stays untouched; the same
 * macros compiled normally write one record (so the check can fail). */
static void kernel_macros_compiled_out(void **state)
{
    (void)state;
    static cbt_ring_rec recs[8];
    static cbt_fold_slot fold[CBT_FOLD_SLOTS];
    unsigned long long claim = 0;
    cbt_ring_dev ring = {recs, &claim, fold, 7, 0};
    disabled_kernel_span(&ring);
    assert_int_equal(claim, 0);
    cbt_kspan span = {&ring, 1, CBT_KOP_USER, CBT_REC_CTA, 0};
    cbt_cpu_cta_enter(0, 1, 0);
    CBT_KERNEL_SPAN(span, 7) { (void)0; }
    cbt_cpu_cta_leave();
    assert_int_equal(claim, 1);
    assert_int_equal(recs[0].tokens, 7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(compiled_out),
        cmocka_unit_test(disabled_by_config),
        cmocka_unit_test(kernel_macros_compiled_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
