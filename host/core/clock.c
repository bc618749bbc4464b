/* host/core/clock.c — owns tick -> unix-ns calibration (see clock.h). */
#include "internal/clock.h"

#include <stdio.h>
#include <string.h>

#ifdef CBT_CLOCK_TSC
#include <cpuid.h>
static bool tsc_invariant(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u)
        return false;
    __get_cpuid(0x80000007u, &a, &b, &c, &d);
    return (d >> 8) & 1u; /* CPUID.80000007H:EDX[8] = invariant TSC */
}
#endif

void cbt_clock_sample(uint32_t tries, uint64_t *ticks, uint64_t *unix_ns, uint64_t *bracket)
{
    uint64_t best = UINT64_MAX;
    for (uint32_t i = 0; i < (tries ? tries : 1); i++) {
        uint64_t a = cbt_clock_ticks();
        uint64_t u = cbt_clock_unix_now();
        uint64_t b = cbt_clock_ticks();
        if (b - a < best) {
            best = b - a;
            *ticks = a + (b - a) / 2;
            *unix_ns = u;
        }
    }
    if (bracket)
        *bracket = best;
}

static void refit(cbt_clock_map *m)
{
    uint32_t n = m->n_samples;
    if (n < 2)
        return;
    /* centre on the newest sample so the doubles keep ns precision */
    uint32_t newest = (m->next + CBT_CLOCK_SAMPLES - 1) % CBT_CLOCK_SAMPLES;
    uint64_t x0 = m->s_ticks[newest], y0 = m->s_unix[newest];
    double sx = 0, sy = 0;
    for (uint32_t i = 0; i < n; i++) {
        sx += (double)(int64_t)(m->s_ticks[i] - x0);
        sy += (double)(int64_t)(m->s_unix[i] - y0);
    }
    double mx = sx / n, my = sy / n, sxx = 0, sxy = 0;
    for (uint32_t i = 0; i < n; i++) {
        double dx = (double)(int64_t)(m->s_ticks[i] - x0) - mx;
        double dy = (double)(int64_t)(m->s_unix[i] - y0) - my;
        sxx += dx * dx;
        sxy += dx * dy;
    }
    if (sxx <= 0)
        return;
    double slope = sxy / sxx;
    if (!(slope > 0))
        return;
    m->ns_per_tick = slope;
    /* line through the mean point, re-expressed at x0 */
    double at_x0 = my - slope * mx;
    m->base_ticks = x0;
    m->base_unix = (uint64_t)((int64_t)y0 + (int64_t)(at_x0 >= 0 ? at_x0 + 0.5 : at_x0 - 0.5));
}

static void add_sample(cbt_clock_map *m)
{
    uint64_t t = 0, u = 0, br = 0;
    cbt_clock_sample(16, &t, &u, &br);
    m->s_ticks[m->next] = t;
    m->s_unix[m->next] = u;
    m->next = (m->next + 1) % CBT_CLOCK_SAMPLES;
    if (m->n_samples < CBT_CLOCK_SAMPLES)
        m->n_samples++;
    m->last_bracket_ticks = br;
}

void cbt_clock_map_init(cbt_clock_map *m, uint32_t span_ms)
{
    memset(m, 0, sizeof *m);
#ifdef CBT_CLOCK_TSC
    m->invariant = tsc_invariant();
    if (!m->invariant)
        fprintf(stderr, "cbt: warning: CPU reports no invariant TSC; host timestamps may drift\n");
#else
    m->invariant = true;
#endif
    add_sample(m);
    m->ns_per_tick = 1.0;
    m->base_ticks = m->s_ticks[0];
    m->base_unix = m->s_unix[0];
    struct timespec d = {.tv_sec = span_ms / 1000, .tv_nsec = (long)(span_ms % 1000) * 1000000L};
    nanosleep(&d, NULL);
    add_sample(m);
    refit(m);
}

void cbt_clock_map_refresh(cbt_clock_map *m)
{
    add_sample(m);
    refit(m);
}

uint64_t cbt_clock_to_unix(const cbt_clock_map *m, uint64_t ticks)
{
    double d = (double)(int64_t)(ticks - m->base_ticks) * m->ns_per_tick;
    int64_t off = (int64_t)(d >= 0 ? d + 0.5 : d - 0.5);
    return (uint64_t)((int64_t)m->base_unix + off);
}
