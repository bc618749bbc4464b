/* tests/disable_tu.c — compiled with CBT_DISABLE: every event and publish call
 * in this translation unit must compile to nothing. */
#include "cbt.h"
#include "cbt/kernel_span.h"
#include "cbt/otlp.h"

int disabled_publish_many(int n, cbt_stream *s);
int disabled_enabled(void);
void disabled_kernel_span(const cbt_ring_dev *ring);
cbt_status disabled_config_default_into(cbt_config *c);
cbt_status disabled_launch_info_default_into(cbt_launch_info *li, cbt_kernel_op op, uint32_t n);
cbt_status disabled_otlp_config_default_into(cbt_otlp_config *c);

int disabled_publish_many(int n, cbt_stream *s)
{
    int ok = 0;
    for (int i = 0; i < n; i++) {
        cbt_event e;
        if (cbt_event_init(&e, CBT_EV_MP_REQUEST_START, "disabled") == CBT_OK &&
            cbt_event_i64(&e, CBT_N_HIT_TOKENS, i) == CBT_OK && cbt_publish(&e) == CBT_OK &&
            cbt_publish_on_stream(s, &e) == CBT_OK)
            ok++;
    }
    return ok;
}

int disabled_enabled(void) { return cbt_enabled() ? 1 : 0; }

/* The kernel macros with a real ring: compiled out, nothing is written. */
void disabled_kernel_span(const cbt_ring_dev *ring)
{
    cbt_kspan span = {ring, 1, CBT_KOP_USER, CBT_REC_CTA, 0};
    CBT_KERNEL_SPAN_BEGIN(span);
    CBT_KERNEL_SPAN_END(span, 5);
    CBT_KERNEL_SPAN(span, 7) { (void)0; }
}

/* The defaults' stubs, for test_disable to compare with libcbt's. */
cbt_status disabled_config_default_into(cbt_config *c) { return cbt_config_default_into(c); }
cbt_status disabled_launch_info_default_into(cbt_launch_info *li, cbt_kernel_op op, uint32_t n)
{
    return cbt_launch_info_default_into(li, op, n);
}
cbt_status disabled_otlp_config_default_into(cbt_otlp_config *c)
{
    return cbt_otlp_config_default_into(c);
}
