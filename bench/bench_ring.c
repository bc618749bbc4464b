/* bench/bench_ring.c — ring records harvested per second on the CPU.
 *
 *   drain     one thread reading a full ring (the harvester's read: seqlock
 *             per record), records/s
 *   live      one producer thread writing per-CTA records as fast as it can
 *             while the consumer polls: records/s harvested, and the share lost
 *   put       ns per record written by the CPU backend's producer
 *
 * Usage: bench_ring [--quick]
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "cbt/kernel_span.h"
#include "internal/ring_host.h"

static _Atomic int g_stop;

static void *producer(void *arg)
{
    const cbt_ring_dev *d = arg;
    uint64_t i = 0;
    while (!atomic_load_explicit(&g_stop, memory_order_relaxed)) {
        cbt_cpu_ring_put(d, i, i + 100, 7, (uint32_t)i, 1, 3, CBT_REC_CTA, CBT_KOP_USER, 0);
        i++;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    uint32_t cap = 1u << 20;
    cbt_ring *r = NULL;
    if (cbt_ring_create_host(cap, 1.0, &r) != CBT_OK) {
        fprintf(stderr, "bench_ring: cannot create the ring\n");
        return 1;
    }
    cbt_ring_rec *buf = calloc(4096, sizeof *buf);
    if (!buf)
        return 1;
    double put_ns = 0, drain_rps = 0;
    int rounds = quick ? 3 : 7;
    for (int k = 0; k < rounds; k++) {
        double t0 = now_s();
        for (uint32_t i = 0; i < cap; i++)
            cbt_cpu_ring_put(r->view, i, i + 100, 7, i, 1, 3, CBT_REC_CTA, CBT_KOP_USER, 0);
        double t1 = now_s();
        uint64_t got = 0;
        uint32_t n;
        while ((n = cbt_ring_poll(r, buf, 4096)) > 0)
            got += n;
        double t2 = now_s();
        if (got != cap) {
            fprintf(stderr, "bench_ring: harvested %llu of %u\n", (unsigned long long)got, cap);
            return 1;
        }
        double p = (t1 - t0) * 1e9 / cap, d = (double)cap / (t2 - t1);
        if (k == 0 || p < put_ns)
            put_ns = p;
        if (d > drain_rps)
            drain_rps = d;
    }
    /* live: a producer against the polling consumer for a while */
    uint64_t h0 = r->harvested, l0 = r->lost;
    pthread_t th;
    atomic_store(&g_stop, 0);
    pthread_create(&th, NULL, producer, (void *)r->view);
    double t0 = now_s(), dur = quick ? 0.3 : 1.0;
    while (now_s() - t0 < dur)
        cbt_ring_poll(r, buf, 4096);
    atomic_store(&g_stop, 1);
    pthread_join(th, NULL);
    double live_s = now_s() - t0;
    uint32_t n;
    while ((n = cbt_ring_poll(r, buf, 4096)) > 0)
        ;
    uint64_t h = r->harvested - h0, l = r->lost - l0;
    printf("put            %8.2f ns/record   (CPU backend producer: claim, 64-byte record, commit)\n",
           put_ns);
    printf("drain          %8.2f M records/s (one thread reading a full ring)\n", drain_rps / 1e6);
    printf("live           %8.2f M records/s harvested, %.2f%% lost (one producer flat out vs "
           "the polling consumer)\n",
           (double)h / live_s / 1e6, h + l ? 100.0 * (double)l / (double)(h + l) : 0.0);
    free(buf);
    cbt_ring_destroy(r);
    return 0;
}
