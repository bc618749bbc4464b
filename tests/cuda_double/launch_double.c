/* tests/cuda_double/launch_double.c — owns the double of the two ring kernels'
 * launches (host/internal/ring_cuda.h) and of a stream's running kernel.
 *
 * The stamp kernel writes cudadbl_gtimer() through its pointer (mapped
 * memory is host memory here) before returning. The probe kernel is a host
 * thread running the kernel's own loop: it answers ping k with (k, fake
 * %globaltimer), returns at the stop ping, after n answers, or after 200 ms
 * without a ping. One kernel at a time per stream: a launch waits for the
 * previous one (stream order), and cudaStreamSynchronize joins it.
 */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "cudadbl.h"
#include "cudadbl_internal.h"
#include "internal/ring_cuda.h"

#define GTIMER_OFFSET_NS 7000000000000ull /* the fake device clock is not the host's */

struct CUstream_st {
    pthread_mutex_t mu;
    pthread_t th;
    int running; /* th is to be joined */
};

typedef struct probe_args {
    volatile unsigned int *ping;
    cbt_ring_pong *pong;
    unsigned int first, n;
} probe_args;

static struct {
    pthread_mutex_t mu;
    uint32_t probes;
    int dead;
} k = {.mu = PTHREAD_MUTEX_INITIALIZER};

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t cudadbl_gtimer(void) { return mono_ns() + GTIMER_OFFSET_NS; }

uint32_t cudadbl_probe_launches(void)
{
    pthread_mutex_lock(&k.mu);
    uint32_t n = k.probes;
    pthread_mutex_unlock(&k.mu);
    return n;
}

void cudadbl_set_probe_dead(int dead)
{
    pthread_mutex_lock(&k.mu);
    k.dead = dead;
    pthread_mutex_unlock(&k.mu);
}

void cudadbl_launch_reset_(void)
{
    pthread_mutex_lock(&k.mu);
    k.probes = 0;
    k.dead = 0;
    pthread_mutex_unlock(&k.mu);
}

cudaStream_t cudadbl_stream_new_(void)
{
    cudaStream_t s = calloc(1, sizeof *s);
    if (s)
        pthread_mutex_init(&s->mu, NULL);
    return s;
}

void cudadbl_stream_join_(cudaStream_t s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    if (s->running) {
        pthread_join(s->th, NULL);
        s->running = 0;
    }
    pthread_mutex_unlock(&s->mu);
}

void cudadbl_stream_free_(cudaStream_t s)
{
    if (!s)
        return;
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* the probe kernel's loop (host/device/ring_cuda.cu), on the host */
static void *probe_main(void *arg)
{
    probe_args a = *(probe_args *)arg;
    free(arg);
    uint64_t idle_from = cudadbl_gtimer();
    for (unsigned int i = a.first; i < a.first + a.n;) {
        unsigned int p = __atomic_load_n(a.ping, __ATOMIC_ACQUIRE); /* pairs with the host's release */
        if (p == CBT_RING_PING_STOP)
            return NULL;
        if (p != i) {
            if (cudadbl_gtimer() - idle_from > 200000000ull)
                return NULL; /* abandoned */
            continue;
        }
        uint64_t t = cudadbl_gtimer();
        __atomic_store_n(&a.pong->t, t, __ATOMIC_RELAXED);
        /* release: the kernel's __threadfence_system between t and seq */
        __atomic_store_n(&a.pong->seq, i, __ATOMIC_RELEASE);
        idle_from = t;
        i++;
    }
    return NULL;
}

cbt_status cbt_ring_cuda_launch_probe_(void *stream, volatile unsigned int *ping,
                                       cbt_ring_pong *pong, unsigned int first, unsigned int n)
{
    cudaStream_t s = stream;
    if (!s)
        return CBT_ERR_CUDA; /* the ring always has a stream of its own */
    pthread_mutex_lock(&k.mu);
    k.probes++;
    int dead = k.dead;
    pthread_mutex_unlock(&k.mu);
    if (dead)
        return CBT_OK; /* launched, and never answers */
    cudadbl_stream_join_(s); /* stream order: after the kernel before it */
    probe_args *a = malloc(sizeof *a);
    if (!a)
        return CBT_ERR_CUDA;
    *a = (probe_args){ping, pong, first, n};
    pthread_mutex_lock(&s->mu);
    int rc = pthread_create(&s->th, NULL, probe_main, a);
    s->running = rc == 0;
    pthread_mutex_unlock(&s->mu);
    if (rc != 0) {
        free(a);
        return CBT_ERR_CUDA;
    }
    return CBT_OK;
}

cbt_status cbt_ring_cuda_launch_stamp_(void *stream, unsigned long long *out)
{
    cudadbl_stream_join_(stream);
    *out = cudadbl_gtimer();
    return CBT_OK;
}
