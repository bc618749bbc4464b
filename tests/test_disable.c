/* tests/test_disable.c — the disabled paths: CBT_DISABLE compiles calls out,
 * and a tracer disabled by configuration makes every call a no-op. */
#include "testutil.h"

#include "cbt/kernel_span.h"
#include "cbt/otlp.h"

int disabled_publish_many(int n, cbt_stream *s);
int disabled_enabled(void);
void disabled_kernel_span(const cbt_ring_dev *ring);
cbt_status disabled_config_default_into(cbt_config *c);
cbt_status disabled_launch_info_default_into(cbt_launch_info *li, cbt_kernel_op op, uint32_t n);
cbt_status disabled_otlp_config_default_into(cbt_otlp_config *c);

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

/* CBT_DISABLE keeps cbt's defaults (cbt.h): a disabled program's
 * cbt_config_default() is libcbt's, byte for byte, but for `enabled`, and its
 * launch info and OTLP config defaults are libcbt's too (the OTLP config's
 * but for the two off switches and the process's resource). Both sides fill
 * them from one list (cbt_config_defaults_ and the like); this fails when a
 * default is set again, differently, on one side. The _into entry points are
 * what the inline cbt_*_default() wrappers call, here into poisoned buffers,
 * so every byte is compared. */
static void disabled_defaults_are_libcbts(void **state)
{
    (void)state;
    cbt_config lib, off;
    memset(&lib, 0xa5, sizeof lib);
    memset(&off, 0x5a, sizeof off);
    lib.version = off.version = CBT_CONFIG_VERSION;
    lib.size = off.size = (uint32_t)sizeof lib;
    assert_int_equal(cbt_config_default_into(&lib), CBT_OK);
    assert_int_equal(disabled_config_default_into(&off), CBT_OK);
    assert_true(lib.enabled);
    assert_false(off.enabled);
    lib.enabled = false;
    assert_memory_equal(&lib, &off, sizeof lib);

    cbt_launch_info li, li_off;
    memset(&li, 0xa5, sizeof li);
    memset(&li_off, 0x5a, sizeof li_off);
    li.version = li_off.version = CBT_LAUNCH_INFO_VERSION;
    li.size = li_off.size = (uint32_t)sizeof li;
    assert_int_equal(cbt_launch_info_default_into(&li, CBT_KOP_SCATTER, 3), CBT_OK);
    assert_int_equal(disabled_launch_info_default_into(&li_off, CBT_KOP_SCATTER, 3), CBT_OK);
    assert_memory_equal(&li, &li_off, sizeof li);

#ifdef CBT_WITH_OTLP
    static cbt_otlp_config o, o_off; /* large: static */
    memset(&o, 0xa5, sizeof o);
    memset(&o_off, 0x5a, sizeof o_off);
    o.version = o_off.version = CBT_OTLP_CONFIG_VERSION;
    o.size = o_off.size = (uint32_t)sizeof o;
    assert_int_equal(cbt_otlp_config_default_into(&o), CBT_OK);
    assert_int_equal(disabled_otlp_config_default_into(&o_off), CBT_OK);
    assert_int_equal(o.disabled, 0);
    assert_int_equal(o.metrics_disabled, 0);
    assert_int_equal(o_off.disabled, 1);
    assert_int_equal(o_off.metrics_disabled, 1);
    o.disabled = o.metrics_disabled = 1;
    assert_string_equal(o.resource.service_name, o_off.resource.service_name);
    assert_true(o.resource.pid > 0 && o_off.resource.pid == 0); /* the process's own */
    o.resource = o_off.resource;
    assert_memory_equal(&o, &o_off, sizeof o);
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(compiled_out),
        cmocka_unit_test(disabled_by_config),
        cmocka_unit_test(kernel_macros_compiled_out),
        cmocka_unit_test(disabled_defaults_are_libcbts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
