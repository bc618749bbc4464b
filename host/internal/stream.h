/* host/internal/stream.h — the stream object shared by the CPU and CUDA backends.
 *
 * stream.c owns the interface and the CPU backend; stream_cuda.c owns the
 * CUDA backend (compiled only with CBT_WITH_CUDA). Fields under "CPU" are
 * guarded by `lock`; fields under "CUDA pending" belong to the harvester.
 */
#ifndef CBT_HOST_INTERNAL_STREAM_H
#define CBT_HOST_INTERNAL_STREAM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "internal/tracer.h"

enum { CBT_STREAM_CPU = 1, CBT_STREAM_CUDA = 2 };

typedef struct cbt_stream_item {
    cbt_stream_fn fn;   /* work; NULL with cta_fn NULL: a mark */
    cbt_cta_fn cta_fn;  /* an emulated kernel launch of n_ctas CTAs */
    uint32_t n_ctas;
    void *arg;
    cbt_event ev;
} cbt_stream_item;

typedef struct cbt_pending_mark {
    uint32_t ev_index; /* into the CUDA event pool */
    cbt_event ev;
} cbt_pending_mark;

struct cbt_stream {
    int kind;
    uint32_t ordinal;

    /* CPU */
    pthread_mutex_t lock;
    pthread_cond_t work_cv, idle_cv;
    pthread_t worker;
    cbt_stream_item *ring;
    uint32_t cap, head, count;
    uint64_t enqueued, completed;
    int stop;

    /* CUDA (stream_cuda.c) */
    void *cuda_stream;
    struct cbt_cuda_pool *pool;
    uint64_t tracer_gen;            /* generation of the tracer polling our marks; 0: none */
    _Atomic uint32_t in_flight;     /* marks pushed and not yet dispatched or dropped */
    cbt_pending_mark *pending;      /* harvester-owned FIFO */
    uint32_t pend_head, pend_count; /* harvester-owned */
};

uint32_t cbt_stream_next_ordinal_(void);

/* CUDA backend entry points (stream_cuda.c). */
cbt_status cbt_cuda_stream_init_(cbt_stream *s, void *cuda_stream);
cbt_status cbt_cuda_stream_enqueue_(cbt_stream *s, cbt_stream_fn fn, void *arg);
cbt_status cbt_cuda_stream_mark_(cbt_stream *s, cbt_tracer *t, const cbt_event *ev);
cbt_status cbt_cuda_stream_sync_(cbt_stream *s);
/* Returns 1 when `s` may be freed, 0 when it must be leaked (its marks could
 * not be retired in time and the harvester may still reach it). */
int cbt_cuda_stream_fini_(cbt_stream *s);

#endif /* CBT_HOST_INTERNAL_STREAM_H */
