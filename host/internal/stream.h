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

#include "internal/record.h"
#include "internal/tracer.h"

enum { CBT_STREAM_CPU = 1, CBT_STREAM_CUDA = 2 };

/* Room for the events of marks, in record cells (internal/record.h): per
 * CPU stream item, and per pooled CUDA event. */
#define CBT_STREAM_MARK_CELLS_PER_ITEM 4u
#define CBT_STREAM_CUDA_MARK_CELLS (CBT_STREAM_CUDA_POOL * 8u)

/* A queued item. A mark (fn and cta_fn NULL) has its event in the stream's
 * `marks` FIFO: marks leave in the order they came, so the oldest record
 * there is the event of the oldest mark. */
typedef struct cbt_stream_item {
    cbt_stream_fn fn;   /* work; NULL with cta_fn NULL: a mark */
    cbt_cta_fn cta_fn;  /* an emulated kernel launch of n_ctas CTAs */
    uint32_t n_ctas;
    void *arg;
} cbt_stream_item;

struct cbt_stream {
    int kind;
    uint32_t ordinal;

    /* CPU */
    pthread_mutex_t lock;
    pthread_cond_t work_cv, idle_cv;
    pthread_t worker;
    cbt_stream_item *ring;
    uint32_t cap, head, count;
    /* the marks' events: appended under `lock`; the oldest is read by the
     * worker without it (producers never touch a record before it is dropped,
     * under `lock`, once its item has run) */
    cbt_rec_fifo marks;
    uint64_t enqueued, completed;
    int stop;

    /* CUDA (stream_cuda.c) */
    void *cuda_stream;
    struct cbt_cuda_pool *pool;
    uint64_t tracer_gen;            /* generation of the tracer polling our marks; 0: none */
    _Atomic uint32_t in_flight;     /* marks pushed and not yet dispatched or dropped */
    struct cbt_markq *pending;      /* harvester-owned FIFO of pool indices
                                     * (internal/cuda_marks.h) */
    cbt_rec_fifo pend_recs;         /* harvester-owned: the pending marks' events,
                                     * the one of the same rank as each index */
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
