/* host/internal/clock.h — owns cbt's host clock: raw ticks on the hot path, unix ns later.
 *
 * Publishes stamp events with cbt_clock_ticks_ordered() (rdtscp on x86-64, a
 * few ns; CLOCK_MONOTONIC behind an acquire fence elsewhere). The harvester converts ticks to unix-epoch ns
 * with a cbt_clock_map it owns: a least-squares fit over (ticks, CLOCK_REALTIME)
 * samples, each taken between two tick reads and kept only when that bracket
 * is tight. cbt_clock_map_refresh() adds a sample and refits, which tracks the
 * drift between the TSC and the system clock. The same map is used for every
 * source of time (publish stamps, CPU stream marks, CUDA event times), so all
 * of them agree.
 */
#ifndef CBT_HOST_INTERNAL_CLOCK_H
#define CBT_HOST_INTERNAL_CLOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define CBT_CLOCK_TSC 1
#endif

/* Raw ticks: monotonic, cheap, not yet calibrated. */
static inline uint64_t cbt_clock_ticks(void)
{
#ifdef CBT_CLOCK_TSC
    return __rdtsc();
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
#endif
}

/* Ticks read only after every earlier load of this thread is globally
 * visible (rdtscp). Publishes stamp with this: an event published because
 * this thread saw another thread's event is then stamped after that event
 * was committed, which the harvester's stamp-order merge relies on. Plain
 * rdtsc may execute a few hundred cycles before earlier loads complete, so
 * the effect could be stamped before its cause. Costs about 5 ns more than
 * rdtsc. */
static inline uint64_t cbt_clock_ticks_ordered(void)
{
#ifdef CBT_CLOCK_TSC
    unsigned aux;
    return __rdtscp(&aux);
#else
    atomic_thread_fence(memory_order_acquire);
    return cbt_clock_ticks();
#endif
}

/* Ticks read before any later load of this thread executes (rdtsc; lfence).
 * The harvester takes its round cutoff with this, so the lanes it peeks
 * afterwards are read no earlier than the cutoff. */
static inline uint64_t cbt_clock_ticks_before_loads(void)
{
#ifdef CBT_CLOCK_TSC
    uint64_t t = __rdtsc();
    _mm_lfence();
    return t;
#else
    uint64_t t = cbt_clock_ticks();
    atomic_thread_fence(memory_order_seq_cst);
    return t;
#endif
}

/* CLOCK_MONOTONIC in ns: the clock of every bounded wait (deadlines of
 * cbt_flush, the sinks' flush and stop, a paced replay). */
static inline uint64_t cbt_clock_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* CLOCK_REALTIME in unix-epoch ns. */
static inline uint64_t cbt_clock_unix_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define CBT_CLOCK_SAMPLES 16

typedef struct cbt_clock_map {
    /* unix_ns = base_unix + (ticks - base_ticks) * ns_per_tick */
    uint64_t base_ticks;
    uint64_t base_unix;
    double ns_per_tick;
    /* samples kept for the least-squares refit (ring) */
    uint64_t s_ticks[CBT_CLOCK_SAMPLES];
    uint64_t s_unix[CBT_CLOCK_SAMPLES];
    uint32_t n_samples, next;
    uint64_t last_bracket_ticks; /* width of the tightest bracket of the last sample */
    bool invariant;              /* false: the TSC may stop or drift: warned once */
} cbt_clock_map;

/* Initial calibration: two tight samples `span_ms` apart (blocks that long). */
void cbt_clock_map_init(cbt_clock_map *m, uint32_t span_ms);

/* Take one tight sample now and refit slope and intercept (least squares over
 * the kept samples). Cheap (a few microseconds); the harvester calls it
 * periodically. */
void cbt_clock_map_refresh(cbt_clock_map *m);

/* Convert raw ticks to unix-epoch ns. */
uint64_t cbt_clock_to_unix(const cbt_clock_map *m, uint64_t ticks);

/* One tight (ticks, unix) sample: the best of `tries` bracketed reads. */
void cbt_clock_sample(uint32_t tries, uint64_t *ticks, uint64_t *unix_ns, uint64_t *bracket);

#endif /* CBT_HOST_INTERNAL_CLOCK_H */
