/* bench/bench_cold.c — the control for bench_paced's "first publish of a
 * request": what the first store after a 4-ms sleep costs on this machine
 * with no cbt at all. Like a publish it stamps (rdtscp) and copies 152 bytes
 * into an 8 MiB ring at a 192-byte stride, ten times a request, 250 requests
 * a second paced by absolute-deadline sleeps; each copy is timed alone
 * (rdtscp, lfence, copy, lfence, rdtscp). Prints the median and mean of the
 * first copy after each sleep and of the others, in ns (the TSC calibrated
 * against CLOCK_MONOTONIC), the timer's own cost not subtracted.
 *
 * Usage: bench_cold [--requests N]   (default 1250: 5 s)
 * docs/performance.md, "Never waits", quotes it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <x86intrin.h>

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static uint64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

int main(int argc, char **argv)
{
    int n = 1250;
    if (argc == 3 && strcmp(argv[1], "--requests") == 0)
        n = atoi(argv[2]);
    if (n < 10 || n > 1000000) {
        fprintf(stderr, "usage: bench_cold [--requests N]   (10 <= N <= 1000000)\n");
        return 2;
    }
    enum { K = 10, STRIDE = 192, COPY = 152 };
    size_t cap = (size_t)8 << 20;
    unsigned char *ring = aligned_alloc(64, cap);
    uint64_t *first = malloc((size_t)n * sizeof *first), *rest = malloc((size_t)n * (K - 1) * sizeof *rest);
    if (!ring || !first || !rest)
        return 1;
    memset(ring, 0, cap);
    unsigned char ev[COPY];
    memset(ev, 1, sizeof ev);
    unsigned aux;
    uint64_t c0 = __rdtscp(&aux), m0 = mono_ns();
    size_t pos = 0, nr = 0;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    for (int r = 0; r < n; r++) {
        next.tv_nsec += 4000000;
        if (next.tv_nsec >= 1000000000) {
            next.tv_sec++;
            next.tv_nsec -= 1000000000;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
        for (int k = 0; k < K; k++) {
            uint64_t t0 = __rdtscp(&aux);
            _mm_lfence();
            uint64_t stamp = __rdtscp(&aux);
            memcpy(ring + pos, ev, COPY);
            memcpy(ring + pos, &stamp, sizeof stamp);
            pos = (pos + STRIDE) % (cap - STRIDE);
            _mm_lfence();
            uint64_t t1 = __rdtscp(&aux);
            if (k == 0)
                first[r] = t1 - t0;
            else
                rest[nr++] = t1 - t0;
        }
    }
    double ns_per_tick = (double)(mono_ns() - m0) / (double)(__rdtscp(&aux) - c0);
    qsort(first, (size_t)n, sizeof *first, cmp_u64);
    qsort(rest, nr, sizeof *rest, cmp_u64);
    double sf = 0, sr = 0;
    for (int i = 0; i < n; i++)
        sf += (double)first[i];
    for (size_t i = 0; i < nr; i++)
        sr += (double)rest[i];
    printf("cold_first_median_ns\t%.1f\t(the first copy after each 4-ms sleep)\n",
           (double)first[n / 2] * ns_per_tick);
    printf("cold_first_mean_ns\t%.1f\n", sf / n * ns_per_tick);
    printf("cold_rest_median_ns\t%.1f\t(the nine after it)\n", (double)rest[nr / 2] * ns_per_tick);
    printf("cold_rest_mean_ns\t%.1f\n", sr / (double)nr * ns_per_tick);
    printf("cold_all_mean_ns\t%.1f\t(all ten: the floor under bench_paced's publish mean)\n",
           (sf + sr) / (double)(n + nr) * ns_per_tick);
    free(first);
    free(rest);
    free(ring);
    return 0;
}
