/* host/device/devclock.c — owns device-clock calibration (see devclock.h). */
#include "internal/devclock.h"

#include <stdlib.h>
#include <string.h>

void cbt_devclock_init(cbt_devclock *c, double host_ns_per_tick)
{
    memset(c, 0, sizeof *c);
    c->nominal_ticks_per_ns = host_ns_per_tick > 0 ? 1.0 / host_ns_per_tick : 1.0;
    c->ticks_per_ns = c->nominal_ticks_per_ns;
}

void cbt_devclock_add(cbt_devclock *c, uint64_t dev, uint64_t lo, uint64_t hi)
{
    c->s_dev[c->next] = dev;
    c->s_tick[c->next] = lo + (hi - lo) / 2;
    c->next = (c->next + 1) % CBT_DEVCLOCK_SAMPLES;
    if (c->n < CBT_DEVCLOCK_SAMPLES)
        c->n++;
}

void cbt_devclock_fit(cbt_devclock *c)
{
    if (c->n == 0)
        return;
    uint32_t newest = (c->next + CBT_DEVCLOCK_SAMPLES - 1) % CBT_DEVCLOCK_SAMPLES;
    uint64_t x0 = c->s_dev[newest], y0 = c->s_tick[newest];
    double slope = c->ticks_per_ns;
    double mx = 0, my = 0;
    for (uint32_t i = 0; i < c->n; i++) {
        mx += (double)(int64_t)(c->s_dev[i] - x0);
        my += (double)(int64_t)(c->s_tick[i] - y0);
    }
    mx /= c->n;
    my /= c->n;
    double sxx = 0, sxy = 0;
    for (uint32_t i = 0; i < c->n; i++) {
        double dx = (double)(int64_t)(c->s_dev[i] - x0) - mx;
        double dy = (double)(int64_t)(c->s_tick[i] - y0) - my;
        sxx += dx * dx;
        sxy += dx * dy;
    }
    /* a slope needs samples spread in time; until then keep the nominal one */
    if (sxx > 1e12 && sxy > 0)
        slope = sxy / sxx;
    c->ticks_per_ns = slope;
    c->drift_ppm = (slope / c->nominal_ticks_per_ns - 1.0) * 1e6;
    double at_x0 = my - slope * mx;
    c->dev0 = x0;
    c->tick0 = (uint64_t)((int64_t)y0 + (int64_t)(at_x0 >= 0 ? at_x0 + 0.5 : at_x0 - 0.5));
    c->fitted = 1;
}

uint64_t cbt_devclock_to_ticks(const cbt_devclock *c, uint64_t dev)
{
    double d = (double)(int64_t)(dev - c->dev0) * c->ticks_per_ns;
    return (uint64_t)((int64_t)c->tick0 + (int64_t)(d >= 0 ? d + 0.5 : d - 0.5));
}

void cbt_devclock_refresh(cbt_devclock *c, cbt_devclock_probe probe, void *ctx, uint32_t n)
{
    uint64_t dev[64], lo[64], hi[64];
    if (n > 64)
        n = 64;
    uint32_t got = probe(ctx, n, dev, lo, hi);
    if (got == 0)
        return;
    /* keep the tightest quarter (at least one), by bracket width */
    uint32_t keep = got / 4 ? got / 4 : 1;
    uint8_t used[64] = {0};
    double best = -1;
    for (uint32_t k = 0; k < keep; k++) {
        uint32_t bi = UINT32_MAX;
        for (uint32_t i = 0; i < got; i++)
            if (!used[i] && (bi == UINT32_MAX || hi[i] - lo[i] < hi[bi] - lo[bi]))
                bi = i;
        used[bi] = 1;
        if (k == 0)
            best = (double)(hi[bi] - lo[bi]) / 2.0;
        cbt_devclock_add(c, dev[bi], lo[bi], hi[bi]);
    }
    c->err_ticks = best;
    cbt_devclock_fit(c);
}
