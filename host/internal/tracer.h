/* host/internal/tracer.h — the tracer: what it composes, and the private
 * calls the host/ modules share.
 *
 * The tracer composes components that own their state: the lanes and the
 * shared bus (lane.c, bus.c), the span pool and the registry (span.c,
 * registry.c), the sinks (internal/sinks.h), the streams (stream.c), the
 * kernel spans and rings (kernel_spans.c, ring.c), the recorder
 * (internal/recorder.h). The harvester (harvester.c) drives them through
 * the source and tap tables of internal/harvest.h.
 *
 * Ownership (one writer each):
 *   - publishers: their lane's tail, the bus, counters marked "any thread";
 *   - the harvester thread: clock map, id generator, span pool, registry,
 *     per-stream pending marks, every subscriber's state;
 *   - cbt_init/cbt_shutdown: the tracer's lifetime.
 *
 * Who waits for whom (docs/architecture.md): `lock` is the harvester's, held
 * for each round (a replay's batch), and taken elsewhere only by calls that
 * change what a round reads (a stream's attach and detach, ring stats). No
 * publish, lane attach, cbt_metrics_get, cbt_flush, cbt_add_sink or
 * cbt_add_subscriber takes it: the subscriber and sink lists are append-only
 * (count published with release), the lanes are claimed by CAS, the flush
 * handshake has its own mutex that no slow work holds, and a sink that may
 * wait runs on its own thread (host/spans/sink_thread.c).
 */
#ifndef CBT_HOST_INTERNAL_TRACER_H
#define CBT_HOST_INTERNAL_TRACER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cbt.h"
#include "internal/bus.h"
#include "internal/clock.h"
#include "internal/harvest.h"
#include "internal/hash.h"
#include "internal/publish_hook.h"
#include "internal/recorder.h"
#include "internal/sinks.h"
#include "internal/strtab.h"

#define CBT_MAX_SUBSCRIBERS 16
#define CBT_MAX_CUDA_STREAMS 64
#define CBT_MAX_LANES 256 /* hard bound on cbt_config.max_lanes */

/* A per-thread publish lane (lane.c). */
typedef struct cbt_lane {
    cbt_bus bus;           /* single producer: the lane's thread */
    uint64_t gen;          /* the owning tracer's generation */
    /* CBT_LANE_FREE -> TAKEN (a thread's CAS) -> ORPHANED (its exit) ->
     * FREE (the harvester, once drained) */
    _Atomic uint32_t state;
    uint64_t pop_upto;     /* harvester: cells from the start the harvester has
                              faulted in (lane.c, "Populating") */
} cbt_lane;
enum { CBT_LANE_FREE = 0, CBT_LANE_TAKEN = 1, CBT_LANE_ORPHANED = 2 };

/* A range of a lane's cells for the harvester to fault in; at most
 * CBT_POP_RANGES a round. */
#define CBT_POP_RANGES 8
typedef struct cbt_pop_range {
    unsigned char *p;
    size_t len;
} cbt_pop_range;

/* ---- ids: xoshiro256** seeded from the OS (harvester thread only) ---- */
typedef struct cbt_ids {
    uint64_t s[4];
} cbt_ids;
void cbt_ids_seed(cbt_ids *g);
uint64_t cbt_ids_next(cbt_ids *g); /* never 0 */
void cbt_ids_trace(cbt_ids *g, uint8_t out[16]);
void cbt_ids_span(cbt_ids *g, uint8_t out[8]);
/* Whether two states of the generator are the same (no id drawn between). */
static inline bool cbt_ids_same_(const cbt_ids *a, const cbt_ids *b)
{
    return memcmp(a->s, b->s, sizeof a->s) == 0;
}

/* True when the n bytes at p are all zero (an absent W3C id). */
static inline bool cbt_bytes_zero_(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

/* cbt_span_start_for_event (span.h), starting at start_ns instead of ev->ts:
 * for a root opened late, at an earlier time (the MP path's lazy root). */
cbt_span *cbt_span_start_for_event_at_(cbt_tracer *t, cbt_name name, cbt_span_kind kind,
                                       const cbt_span_ctx *local_parent, const cbt_event *ev,
                                       uint64_t start_ns);

/* Set attribute `key` of `s` to event value `m` (one of ev's), its type
 * kept: what cbt_span_set_from_event does for each value, under a name of
 * the caller's (the MP builder's lmcache.input_ids from token_ids). A
 * dropped array (the store was full at the publish) counts in the span's
 * attrs_dropped. Harvester thread. */
void cbt_span_set_meta_(cbt_span *s, cbt_name key, const cbt_event *ev, const cbt_meta *m);

/* cbt_span_set_queue (span.h) from its parts: the queue attributes for work
 * a stream reached at reached_ns (unix ns) that the host enqueued at
 * enqueue_ns (stream 0: the stream and device are not named). Returns the
 * queue time, clamped at 0. `s` may be NULL (only the arithmetic). For
 * spans whose start is not their event's time (a kernel's first CTA). */
uint64_t cbt_span_set_queue_at_(cbt_span *s, uint64_t enqueue_ns, uint64_t reached_ns,
                                uint32_t stream, int32_t device);

/* How a subscriber's stats getter finds its own state (tracer.c): `sub`'s
 * ctx when given (CBT_ERR_INVAL unless its on_event is `fn` and its ctx is
 * set), else that of
 * the process-wide tracer's first subscriber whose on_event is `fn` and
 * whose ctx is not NULL (CBT_ERR_NOT_INITIALIZED without a tracer,
 * CBT_ERR_NOT_FOUND when none). */
cbt_status cbt_find_subscriber_ctx_(const cbt_subscriber *sub,
                                    cbt_status (*fn)(void *, cbt_tracer *, const cbt_event *),
                                    void **ctx_out);
/* The same, among subscribers whose name is the pointer `name` (NULL: any):
 * one callback serving several kinds of subscriber (the request-tree
 * engine's paths) tells them apart by their static name. */
cbt_status cbt_find_subscriber_named_(const cbt_subscriber *sub,
                                      cbt_status (*fn)(void *, cbt_tracer *, const cbt_event *),
                                      const char *name, void **ctx_out);

/* ---- the pspan subscriber (pspan.c), installed by cbt_init ---- */
cbt_status cbt_pspan_subscriber_create_(cbt_subscriber *out);

/* ---- streams: the harvester's view of CUDA streams with pending marks ---- */
struct cbt_stream;
/* Harvester: take ownership of a popped item whose mark is still pending
 * (no room for its event: dropped and counted in t's bus). */
void cbt_stream_defer_(struct cbt_stream *s, cbt_tracer *t, const cbt_bus_item *item);
/* Harvester: dispatch every leading mark that has completed, in stream order.
 * Returns how many are still pending on this stream. */
uint32_t cbt_stream_poll_(struct cbt_stream *s, cbt_tracer *t);

struct cbt_tracer {
    cbt_config cfg;
    uint64_t gen;  /* process-unique, never reused: thread-local lane handles check it */
    cbt_bus bus;   /* the shared many-producer bus (threads without a lane) */

    pthread_t harvester;
    _Atomic int stop;
    int started;
    /* written by the harvester as it stops, read after the join: stream marks
     * still pending when shutdown gave up on them (the device may still be
     * busy, so the CUDA ring's frees must not wait for it: ring.h) */
    uint32_t abandoned_marks;

    pthread_mutex_t lock; /* the harvester's round (above) */

    /* subscribers: append-only; n_subs is published with release after the
     * slot is written (cbt_add_subscriber, under sub_lock) */
    pthread_mutex_t sub_lock;
    cbt_subscriber subs[CBT_MAX_SUBSCRIBERS];
    _Atomic uint32_t n_subs;
    cbt_sinks sinks;

    /* CUDA streams with marks to poll: under streams_lock, which the
     * streams' source holds for its poll (cudaEventQuery, never a wait) and
     * a stream's attach (its first mark under a tracer) and detach take; not
     * the harvester's lock, which a device ring's copy-out may hold longer */
    pthread_mutex_t streams_lock;
    struct cbt_stream *streams[CBT_MAX_CUDA_STREAMS];
    uint32_t n_streams;

    /* the flush handshake (tracer.c cbt_flush, harvester.c): under flush_mu,
     * which the harvester holds only to read or publish these words */
    pthread_mutex_t flush_mu;
    pthread_cond_t flush_cv;
    uint64_t flush_req, flush_done, flush_ticks;
    _Atomic int closing; /* cbt_shutdown began: a flush stops waiting */

    /* lanes: max_lanes of them, made at init; a thread claims a free one by
     * CAS on its state (lane.c) */
    cbt_lane *lane_pool;
    uint32_t n_pool;
    cbt_pop_range pop[CBT_POP_RANGES]; /* harvester: planned under the lock, run after */
    uint32_t n_pop;

    /* what the harvester drives (internal/harvest.h), registered by cbt_init */
    cbt_hv_source sources[CBT_HV_MAX_SOURCES];
    uint32_t n_sources;
    cbt_hv_tap taps[CBT_HV_MAX_TAPS];
    uint32_t n_taps;

    /* any thread */
    _Atomic uint64_t rejected, session_too_long, meta_truncated;
    _Atomic uint64_t consumed; /* bus items popped and handled */
    _Atomic uint64_t pending_marks;
    _Atomic uint64_t stream_marks_dropped; /* marks accepted (CBT_OK), lost later (stream.c) */
    uint64_t names_refused0; /* the name table's refusals before cbt_init (names.c) */

    /* harvester thread (read by cbt_metrics_get with relaxed atomics) */
    _Atomic uint64_t dispatched, subscriber_errors;
    _Atomic uint64_t lag_last_ns, lag_max_ns;
    _Atomic uint64_t spans_started, spans_ended, spans_dropped, spans_unsampled;
    _Atomic uint64_t registry_full;
    _Atomic uint64_t busy_ns; /* time spent draining non-empty batches */

    /* The harvester's sleep (harvester.c, "Sleeping"). `hv_sleeping` is
     * CBT_HV_AWAKE or CBT_HV_DEEP (idle: the next publish wakes it); its
     * naps between working rounds wait on hv_napping instead;
     * a publisher reads it once after each commit (cbt_harvester_nudge_), so
     * it sits alone on a line that changes only when the harvester sleeps
     * or wakes. */
    _Alignas(64) _Atomic uint32_t hv_sleeping;
    _Alignas(64) _Atomic uint32_t hv_napping; /* 1 while it naps (futex word; kicks clear it) */
    _Atomic uint64_t hv_wakeups; /* publishers that woke it from a deep sleep */
    _Atomic uint64_t hv_kicks;                /* naps or sleeps a kick ended */
    _Atomic uint32_t hv_kicked;               /* a kick since the harvester last looked */
    int hv_membarrier; /* harvester: MEMBARRIER_CMD_PRIVATE_EXPEDITED is registered */
    int hv_armed;      /* harvester: hv_sleeping was set before a barrier that
                          succeeded, and nothing has cleared it since */

    cbt_clock_map clock;
    cbt_ids ids;

    cbt_span *spans;     /* pool of cfg.span_pool */
    uint32_t *span_free; /* stack of free indices */
    uint32_t n_span_free;

    cbt_strtab reg; /* the span registry: (session, name) -> cbt_span_ctx */

    /* A hook on the publishing path (internal/publish_hook.h). NULL: one
     * branch. Set only while no thread publishes (cbt_init .. first publish). */
    cbt_publish_hook publish_hook;
    void *publish_hook_ctx;

    /* the device path (kernel_spans.c, ring.c) */
    struct cbt_ring *host_ring; /* CPU backend */
    struct cbt_ring *cuda_ring; /* the current CUDA device, when present */
    struct cbt_kspans *kspans;  /* harvester-owned */

    /* lmcache_blend.* metrics (blend_metrics.c): fed by the CB subscriber,
     * read by exporters; freed after the sinks */
    struct cbt_blend_metrics *blend;
    _Atomic uint32_t next_launch_id;

    /* The harvester's time (unix ns) for the round it is in: set at each
     * round's start (from the round's clock read, no syscall), and in a
     * replay from the recorded rounds. The builders use it wherever they
     * need "now" rather than an event's time (the request tree's future
     * bound, pspan eviction, parked ring records, shutdown), so a replay
     * sees the times the live run saw. Harvester. */
    uint64_t hv_now;
    int finished; /* the stop path ran (cbt_harvester_finish_) */
    /* Trace recording (host/record/recorder.c): NULL when off (the one
     * branch cbt_dispatch_ pays). Written by cbt_init, closed by
     * cbt_shutdown after the harvester stopped; its counts are the
     * tracer's (cbt_metrics_get reads them without racing the close). */
    struct cbt_recorder *rec;
    cbt_rec_counts rec_counts;
};

/* A session id with its string hash computed once (strtab.h). */
typedef struct cbt_skey {
    const char *s;
    size_t len;
    uint64_t base; /* cbt_strtab_base(s, len) */
} cbt_skey;

static inline cbt_skey cbt_skey_make(const char *s, size_t len)
{
    cbt_skey k = {s, len, cbt_strtab_base(s, len)};
    return k;
}

/* Registry put/remove for a pre-hashed, already validated session. */
cbt_status cbt_registry_put_k_(cbt_tracer *t, const cbt_skey *k, cbt_name name,
                               const cbt_span_ctx *ctx);
void cbt_registry_remove_k_(cbt_tracer *t, const cbt_skey *k, cbt_name name,
                            const cbt_span_ctx *ctx);

/* Push an event through the calling thread's lane (or the shared bus). */
cbt_status cbt_tracer_push_(cbt_tracer *t, const cbt_event *ev, uint64_t ticks,
                            struct cbt_stream *s, void *mark);
/* Lanes (lane.c): make the pool (init); free all (shutdown); mark one
 * orphaned (thread exit; tracer.c). The lanes and the shared bus are the
 * harvester's first source: cbt_lanes_source_ fills its table. */
cbt_status cbt_lanes_init_(cbt_tracer *t);
void cbt_lanes_free_(cbt_tracer *t);
void cbt_lane_orphan_(uint64_t gen, cbt_lane *lane);
void cbt_lanes_source_(cbt_tracer *t, cbt_hv_source *out);
/* Lanes claimed by a thread or still draining (cbt_metrics.lanes). Any thread. */
uint32_t cbt_lanes_in_use_(cbt_tracer *t);

/* Streams (stream.c): the CUDA streams' pending marks, the second source. */
void cbt_streams_source_(cbt_tracer *t, cbt_hv_source *out);
/* Kernel spans, rings and CUPTI (kernel_spans.c), the third source. */
void cbt_kspans_source_(cbt_tracer *t, cbt_hv_source *out);

/* Kernel spans (kernel_spans.c): set up (registers the KERNEL_LAUNCH
 * subscriber), poll the rings (harvester, under lock, each round: through
 * the source table, and once more on the stop path), end what is left (the
 * stop path, after its last poll), free. */
cbt_status cbt_kspans_init_(cbt_tracer *t);
void cbt_kspans_poll_(cbt_tracer *t);
void cbt_kspans_shutdown_(cbt_tracer *t);
void cbt_kspans_free_(cbt_tracer *t);
/* The parent context (and ring span start, unix ns, 0 if none yet) of a
 * recent launch id: 1 when known. Harvester. */
int cbt_kspans_recent_(cbt_tracer *t, uint32_t launch_id, cbt_span_ctx *parent,
                       uint64_t *ring_start_ns);
/* CUPTI (cupti.c / cupti_none.c): turn queued kernel activity records into
 * gpu.kernel spans. Harvester, under lock, each round (from cbt_kspans_poll_). */
void cbt_cupti_poll_(cbt_tracer *t);
/* CUPTI: a default (not forced) flush every CBT_CUPTI_FLUSH_PERIOD_NS while
 * enabled, so completed kernel records reach the queue without waiting for a
 * buffer to fill; one atomic load while not. Harvester, outside the lock,
 * each round. */
void cbt_cupti_periodic_(void);
/* CUPTI: whether activity collection is on (the harvester then keeps polling
 * instead of sleeping deeply). One atomic load. */
int cbt_cupti_enabled_(void);
/* Make the ring's CUDA device current on the calling thread (ring_cuda.cu). */
void cbt_ring_cuda_bind_(struct cbt_ring *r);

/* The active tracer, held against cbt_shutdown until cbt_tracer_unpin_()
 * (NULL, and nothing held, when none). For cbt's own threads that publish
 * (the CPU stream's workers): cbt_shutdown clears the active tracer, then
 * waits until no pin is held before it frees it. Two atomic operations. */
cbt_tracer *cbt_tracer_pin_(void);
void cbt_tracer_unpin_(void);

/* The tracer the administrative calls act on: the active one, else a
 * replay tracer (tracer.c). NULL when none. */
cbt_tracer *cbt_tracer_admin_(void);

/* Dispatch one event (ts already in unix ns) to the subscribers; with
 * `stamp_ticks` != 0 also record its dispatch lag (dispatch.c). Harvester. */
void cbt_dispatch_(cbt_tracer *t, const cbt_event *ev, uint64_t stamp_ticks);
/* Append a subscriber (append-only list: the slot, then the count with
 * release). Any thread; waits only for another adder. dispatch.c. */
cbt_status cbt_subscribers_add_(cbt_tracer *t, const cbt_subscriber *sub);
/* The subscribers published so far (acquire). */
static inline uint32_t cbt_subscribers_n_(cbt_tracer *t)
{
    return atomic_load_explicit(&t->n_subs, memory_order_acquire);
}

/* The harvester thread body. */
void *cbt_harvester_main_(void *arg);
/* Register a source / a tap (cbt_init, before the harvester starts). */
void cbt_harvester_add_source_(cbt_tracer *t, const cbt_hv_source *src);
void cbt_harvester_add_tap_(cbt_tracer *t, const cbt_hv_tap *tap);

/* hv_sleeping's values (harvester.c, "Sleeping") */
enum { CBT_HV_AWAKE = 0, CBT_HV_DEEP = 1 };

/* Wake the harvester from a deep sleep; the one caller that finds it so
 * asleep counts a wake-up. A system call when it sleeps deeply. */
void cbt_harvester_wake_(cbt_tracer *t);
/* Wake the harvester from any sleep, a nap included: a flush request, stop,
 * a lane past half full. Never waits; a system call when it sleeps. */
void cbt_harvester_kick_(cbt_tracer *t);

/* After a commit (an event in a lane or the bus): wake the harvester if it
 * sleeps deeply (an idle harvester, about to take no more than its
 * idle_sleep_ms). While it works or naps between working rounds — steady
 * state — this is one plain load and a predicted branch, and no publisher
 * ever makes a system call. No fence here: the harvester's membarrier
 * after it sets CBT_HV_DEEP is the other half of the pairing (harvester.c,
 * "Sleeping"); the signal fence only keeps the compiler from moving the
 * load above the commit. */
static inline void cbt_harvester_nudge_(cbt_tracer *t)
{
    atomic_signal_fence(memory_order_seq_cst);
    if (__builtin_expect(atomic_load_explicit(&t->hv_sleeping, memory_order_relaxed) ==
                             CBT_HV_DEEP, 0))
        cbt_harvester_wake_(t);
}

/* Register a CUDA stream for polling. */
cbt_status cbt_tracer_add_stream_(cbt_tracer *t, struct cbt_stream *s);
/* Stream destroy: if the tracer of generation `gen` still runs, wait (at
 * most its shutdown_timeout_ms) until *in_flight reaches 0, then stop
 * polling `s`. Returns 1 when `s` may be freed, 0 when marks are still in
 * flight (the stream stays registered and must be leaked). Serialised with
 * cbt_init/cbt_shutdown, so the tracer cannot vanish while we look. */
int cbt_tracer_detach_stream_(uint64_t gen, struct cbt_stream *s, _Atomic uint32_t *in_flight);

/* Count a refused overlong session id against the active tracer, if any. */
void cbt_count_session_too_long_(void);
/* Count a string value cut to fit its event (cbt_event_str) against the
 * active tracer, if any. */
void cbt_count_meta_truncated_(void);

/* Span pool setup (span.c). */
cbt_status cbt_spans_init_(cbt_tracer *t, uint32_t n);
void cbt_spans_free_(cbt_tracer *t);

#endif /* CBT_HOST_INTERNAL_TRACER_H */
