/* host/internal/devclock.h — owns a device clock's calibration against the host clock.
 *
 * A sample is a device timestamp read between two host tick reads: the
 * device time happened somewhere inside [lo, hi]; we take the middle and
 * trust a sample by how narrow its bracket is. Each refresh takes a burst of
 * samples and keeps the tightest; a least-squares fit over the kept samples
 * (a window of the most recent ones) gives the device-ns -> host-ticks line,
 * whose slope against the nominal rate is the drift estimate, the way Tracy
 * and Kineto calibrate GPU clocks. Host ticks then become unix ns through the
 * tracer's host clock map (clock.h), so GPU records, CUDA-event times and
 * host publishes share one timeline.
 *
 * Harvester thread only.
 */
#ifndef CBT_HOST_INTERNAL_DEVCLOCK_H
#define CBT_HOST_INTERNAL_DEVCLOCK_H

#include <stdint.h>

#define CBT_DEVCLOCK_SAMPLES 32

typedef struct cbt_devclock {
    /* ticks = tick0 + (dev - dev0) * ticks_per_ns */
    uint64_t dev0, tick0;
    double ticks_per_ns;
    double nominal_ticks_per_ns; /* 1 / host ns_per_tick at the first fit */
    double drift_ppm;
    double err_ticks;            /* half the tightest bracket of the last burst */
    uint64_t s_dev[CBT_DEVCLOCK_SAMPLES];
    uint64_t s_tick[CBT_DEVCLOCK_SAMPLES];
    uint32_t n, next;
    int fitted;
} cbt_devclock;

void cbt_devclock_init(cbt_devclock *c, double host_ns_per_tick);

/* Keep one sample: device time `dev` read between host ticks lo and hi. */
void cbt_devclock_add(cbt_devclock *c, uint64_t dev, uint64_t lo, uint64_t hi);

/* Refit the line over the kept samples (needs >= 2; one sample fixes the
 * offset at the nominal slope). */
void cbt_devclock_fit(cbt_devclock *c);

/* Device ns -> host ticks. */
uint64_t cbt_devclock_to_ticks(const cbt_devclock *c, uint64_t dev);

/* A probe: fill dev[i], lo[i], hi[i] for i < n; returns how many it took. */
typedef uint32_t (*cbt_devclock_probe)(void *ctx, uint32_t n, uint64_t *dev, uint64_t *lo,
                                       uint64_t *hi);

/* Run a burst of `n` probes (<= 64) and keep the tightest quarter. */
void cbt_devclock_refresh(cbt_devclock *c, cbt_devclock_probe probe, void *ctx, uint32_t n);

#endif /* CBT_HOST_INTERNAL_DEVCLOCK_H */
