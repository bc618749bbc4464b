/* tests/test_devclock.c — the device-clock fit on synthetic pairs, no device
 * (host/internal/devclock.h): a clock running at a known rate against the
 * host's ticks is fitted exactly (slope, offset, drift); one sample fixes
 * the offset at the nominal slope; a refresh keeps the tightest quarter of
 * its brackets, so wide brackets with wrong midpoints do not bend the line;
 * the window keeps the newest CBT_DEVCLOCK_SAMPLES. */
#include <string.h>

#include "internal/devclock.h"
#include "testutil.h"

/* device ns -> ticks: 2.5 ticks per ns nominal, the device 100 ppm fast */
#define NOMINAL_NS_PER_TICK 0.4
#define TRUE_TPN (2.5 / (1.0 + 100e-6))
#define DEV0 900000000000ull
#define TICK0 5000000000ull

static uint64_t true_ticks(uint64_t dev)
{
    return TICK0 + (uint64_t)((double)(dev - DEV0) * TRUE_TPN + 0.5);
}

static void fit_recovers_rate_and_offset(void **state)
{
    (void)state;
    cbt_devclock c;
    cbt_devclock_init(&c, NOMINAL_NS_PER_TICK);
    assert_false(c.fitted);
    for (uint32_t i = 0; i < 16; i++) {
        uint64_t dev = DEV0 + (uint64_t)i * 10000000ull; /* 10 ms apart */
        uint64_t t = true_ticks(dev);
        cbt_devclock_add(&c, dev, t - 50, t + 50); /* symmetric brackets */
    }
    cbt_devclock_fit(&c);
    assert_true(c.fitted);
    assert_true(c.ticks_per_ns > TRUE_TPN * (1 - 1e-9) && c.ticks_per_ns < TRUE_TPN * (1 + 1e-9));
    assert_true(c.drift_ppm < -99.0 && c.drift_ppm > -101.0);
    for (uint64_t dev = DEV0; dev < DEV0 + 300000000ull; dev += 7777777ull) {
        int64_t e = (int64_t)(cbt_devclock_to_ticks(&c, dev) - true_ticks(dev));
        assert_true(e >= -1 && e <= 1);
    }
}

static void one_sample_keeps_nominal_slope(void **state)
{
    (void)state;
    cbt_devclock c;
    cbt_devclock_init(&c, NOMINAL_NS_PER_TICK);
    cbt_devclock_add(&c, DEV0, TICK0 - 10, TICK0 + 10);
    cbt_devclock_fit(&c);
    assert_true(c.fitted);
    assert_true(c.ticks_per_ns == 2.5);
    assert_int_equal(cbt_devclock_to_ticks(&c, DEV0), TICK0);
    assert_int_equal(cbt_devclock_to_ticks(&c, DEV0 + 1000), TICK0 + 2500);
}

/* a probe whose odd samples have wide brackets centred 40 us off */
static uint32_t g_calls;
static uint32_t skewed_probe(void *ctx, uint32_t n, uint64_t *dev, uint64_t *lo, uint64_t *hi)
{
    (void)ctx;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t d = DEV0 + (uint64_t)(g_calls * n + i) * 1000000ull;
        uint64_t t = true_ticks(d);
        dev[i] = d;
        if (i % 4 == 0) {
            lo[i] = t - 20;
            hi[i] = t + 20;
        } else {
            lo[i] = t + 100000 - 30000; /* wide and 40 us of ticks late */
            hi[i] = t + 100000 + 30000;
        }
    }
    g_calls++;
    return n;
}

static void refresh_keeps_tightest_quarter(void **state)
{
    (void)state;
    cbt_devclock c;
    cbt_devclock_init(&c, NOMINAL_NS_PER_TICK);
    g_calls = 0;
    for (int r = 0; r < 4; r++)
        cbt_devclock_refresh(&c, skewed_probe, NULL, 64);
    assert_true(c.fitted);
    assert_int_equal(c.n, CBT_DEVCLOCK_SAMPLES); /* 16 a burst, the newest 32 kept */
    assert_true(c.err_ticks == 20.0);
    uint64_t dev = DEV0 + 200000000ull;
    int64_t e = (int64_t)(cbt_devclock_to_ticks(&c, dev) - true_ticks(dev));
    assert_true(e >= -2 && e <= 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fit_recovers_rate_and_offset),
        cmocka_unit_test(one_sample_keeps_nominal_slope),
        cmocka_unit_test(refresh_keeps_tightest_quarter),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
