/* host/device/kernel_spans.c — owns kernel spans: cbt_launch_begin() on the
 * launching thread, and on the harvester the join of ring records to their
 * launch and the spans built from them (cb.scatter, cb.gather, cb.rerope,
 * cb.l2_load, gpu.kernel).
 *
 * Launching thread: take a launch id, publish a KERNEL_LAUNCH event carrying
 * it (with the op, mode, CTA count and what the host knows: requested
 * tokens, layers, partial blocks, chunks, bytes) *on the stream*, so it is
 * dispatched when the stream reaches the launch: after the MP_RETRIEVE_START
 * enqueued before it and before the MP_RETRIEVE_END enqueued after it. Then
 * hand the kernel a span handle pointing at the ring of the stream's backend.
 *
 * Harvester: the KERNEL_LAUNCH event fills a launch slot (indexed by launch
 * id) with the session and the context of the span open for it at that
 * point of the stream (op-specific order: a scatter nests under retrieve,
 * then store, then the request). Ring records are polled after each drain
 * round; a record whose launch event has not been dispatched yet (a CUDA
 * mark resolves on the next poll) waits in a bounded parking area, then is
 * counted as unjoined after PARK_NS. A per-launch record ends its span at once; per-CTA records are
 * handed to the sinks (per-SM lanes) and folded until every CTA has reported.
 * Device times become unix ns through the ring's device clock and the host
 * clock map.
 */
#include <stdlib.h>
#include <string.h>

#include "cbt/context.h"
#include "cbt/kernel_span.h"
#include "internal/abi.h"
#include "internal/recorder.h"
#include "internal/tracer.h"
#include "internal/ring_host.h"
#include "internal/stream_impl.h"

#define KL_SLOTS 16384u     /* launches known at once */
#define PARK_MAX 4096u      /* records waiting for their launch */
#define PARK_NS 200000000ull /* how long a record may wait for its launch event */
/* How long after the last launch event or ring record the harvester keeps
 * polling every poll_interval_us for the records of launches still open.
 * After that (a launch whose records never come: it failed after its launch
 * event, its records were lost; or kernels queued behind a long one) it may
 * sleep, but for at most 10 ms at a time while launches are open
 * (harvester.c, KSPANS_QUIET_MS), so a late burst of records is still read
 * long before it could fill a ring. */
#define WAIT_NS 1000000000ull
#define CALIBRATE_NS 1000000000ull
#define RECENT 4096u        /* launches remembered after their slot is reused (CUPTI join) */

typedef struct kl_entry {
    uint32_t launch_id;
    uint8_t used;
    uint8_t op, mode;
    uint32_t n_ctas;
    cbt_name name;
    cbt_span_ctx parent;
    uint8_t session_len;
    char session[CBT_SESSION_MAX];
    uint32_t requested, layers, partial, chunks;
    uint64_t bytes;
    /* the launch event came through a stream (CBT_EVF_ENQUEUED):
     * cbt_launch_begin's host time, the stream, its device */
    uint8_t enqueued;
    uint64_t enqueue_ns;
    uint32_t stream;
    int32_t device;
    const cbt_ring *ring;
    /* per-CTA fold */
    uint32_t ctas_seen;
    uint64_t tmin, tmax, tokens, user;
} kl_entry;

typedef struct parked {
    cbt_ring_rec rec;
    const cbt_ring *ring;
    uint64_t since; /* unix ns */
} parked;

struct cbt_kspans {
    kl_entry launches[KL_SLOTS];
    parked park[PARK_MAX];
    uint32_t n_park;
    uint32_t n_used; /* launch slots in use: launches waiting for ring records */
    uint64_t last_active; /* host ticks (monotonic) of the last launch event or record read */
    cbt_ring_rec buf[1024];
    /* the parent (and ring span start) of recent launch ids, kept after the
     * launch slot is freed, for cupti.c's join by external correlation id */
    struct {
        uint32_t id;
        cbt_span_ctx parent;
        uint64_t ring_start; /* unix ns; 0 = no ring span yet */
    } recent[RECENT];
    uint64_t next_calibrate;
    _Atomic uint64_t unjoined, kernel_spans, cta_records, sampled_out;
};

/* The fields cbt/kernel.h's inline cbt_launch_info_default() asks for: at
 * most the caller's size (internal/abi.h). */
cbt_status cbt_launch_info_default_into(cbt_launch_info *out, cbt_kernel_op op, uint32_t n_ctas)
{
    cbt_launch_info li;
    cbt_launch_info_defaults_(&li, op, n_ctas); /* the one list (cbt/kernel.h) */
    return cbt_abi_defaults_(out, &li, sizeof li);
}

/* ---- launching thread ---------------------------------------------------------- */

cbt_status cbt_launch_begin(cbt_stream *stream, const char *session, const cbt_launch_info *caller,
                            cbt_kspan *out)
{
    if (!out)
        return CBT_ERR_INVAL;
    memset(out, 0, sizeof *out);
    /* an older caller's launch info: what it does not know takes the defaults */
    cbt_launch_info full = cbt_launch_info_default(CBT_KOP_USER, 1), *li = &full;
    cbt_status abi = cbt_abi_in_(li, sizeof *li, caller, CBT_LAUNCH_INFO_VERSION);
    if (abi)
        return abi;
    if ((unsigned)li->op >= CBT_KOP_COUNT_ || li->n_ctas == 0 ||
        (li->mode != CBT_REC_LAUNCH && li->mode != CBT_REC_CTA))
        return CBT_ERR_INVAL;
    cbt_tracer *t = cbt_tracer_get();
    if (!t || li->sampled_out)
        return CBT_OK; /* untraced: out->ring stays NULL */
    const cbt_ring *ring = (stream && stream->kind == CBT_STREAM_CUDA) ? t->cuda_ring : t->host_ring;
    if (!ring)
        return CBT_OK;
    uint32_t id = atomic_fetch_add_explicit(&t->next_launch_id, 1, memory_order_relaxed);
    if (id == 0) /* 0 is never a launch id */
        id = atomic_fetch_add_explicit(&t->next_launch_id, 1, memory_order_relaxed);
    cbt_event ev;
    cbt_status st = cbt_event_init(&ev, CBT_EV_KERNEL_LAUNCH, session);
    if (st)
        return st;
    cbt_event_i64(&ev, CBT_N_LAUNCH_ID, id);
    cbt_event_i64(&ev, CBT_N_KOP,
                  (int64_t)li->op | ((int64_t)li->mode << 8) | ((int64_t)li->name << 16) |
                      ((int64_t)(ring == t->cuda_ring) << 32));
    cbt_event_i64(&ev, CBT_N_N_CTAS, li->n_ctas);
    if (li->op == CBT_KOP_L2_LOAD) {
        cbt_event_i64(&ev, CBT_N_CHUNKS, li->chunks);
        cbt_event_i64(&ev, CBT_N_BYTES, (int64_t)li->bytes);
    } else {
        cbt_event_i64(&ev, CBT_N_REQUESTED_TOKENS, li->requested_tokens);
        cbt_event_i64(&ev, CBT_N_NUM_LAYERS, li->num_layers);
        cbt_event_i64(&ev, CBT_N_PARTIAL_BLOCKS, li->partial_blocks);
    }
    st = stream ? cbt_publish_on_stream(stream, &ev) : cbt_tracer_publish(t, &ev);
    if (st != CBT_OK)
        return st;
    out->ring = ring->view;
    out->launch_id = id;
    out->op = (uint8_t)li->op;
    out->mode = li->mode;
    return CBT_OK;
}

/* ---- harvester ---------------------------------------------------------------- */

static cbt_name span_name(const kl_entry *e)
{
    if (e->name)
        return e->name;
    switch (e->op) {
    case CBT_KOP_SCATTER: return CBT_N_CB_SCATTER;
    case CBT_KOP_GATHER: return CBT_N_CB_GATHER;
    case CBT_KOP_REROPE: return CBT_N_CB_REROPE;
    case CBT_KOP_L2_LOAD: return CBT_N_CB_L2_LOAD;
    default: return CBT_N_GPU_KERNEL;
    }
}

/* The span open for the session right now, by the op's preference: the
 * CacheBlend spans first (they exist only while open, so MP-only sessions
 * are unaffected), then the MP ones, then the roots. */
static void find_parent(cbt_tracer *t, const cbt_event *ev, uint8_t op, cbt_span_ctx *out)
{
    static const cbt_name scatter[] = {CBT_N_CB_RETRIEVE, CBT_N_RETRIEVE, CBT_N_STORE,
                                       CBT_N_CB_REQUEST, CBT_N_REQUEST};
    static const cbt_name gather[] = {CBT_N_STORE, CBT_N_RETRIEVE, CBT_N_CB_REQUEST, CBT_N_REQUEST};
    static const cbt_name l2[] = {CBT_N_CB_SPARSE_PREFETCH, CBT_N_LOOKUP_PREFETCH, CBT_N_CB_LOOKUP,
                                  CBT_N_RETRIEVE, CBT_N_CB_REQUEST, CBT_N_REQUEST};
    const cbt_name *order = scatter;
    size_t n = sizeof scatter / sizeof scatter[0];
    if (op == CBT_KOP_GATHER) {
        order = gather;
        n = sizeof gather / sizeof gather[0];
    } else if (op == CBT_KOP_L2_LOAD) {
        order = l2;
        n = sizeof l2 / sizeof l2[0];
    }
    memset(out, 0, sizeof *out);
    if (ev->session_len == 0)
        return;
    for (size_t i = 0; i < n; i++)
        if (cbt_registry_get(t, ev->session, order[i], out) == CBT_OK)
            return;
}

static void emit_span(cbt_tracer *t, struct cbt_kspans *k, kl_entry *e, uint64_t b_dev,
                      uint64_t e_dev, uint64_t tokens, uint64_t user, uint32_t ctas, int incomplete)
{
    const cbt_ring *r = e->ring;
    uint64_t start = cbt_ring_dev_to_unix(r, &t->clock, b_dev);
    uint64_t end = cbt_ring_dev_to_unix(r, &t->clock, e_dev);
    int has_parent = cbt_span_ctx_valid(&e->parent);
    if (k->recent[e->launch_id % RECENT].id == e->launch_id)
        k->recent[e->launch_id % RECENT].ring_start = start;
    if (has_parent && !(e->parent.trace_flags & 1u)) {
        /* its request is sampled out (the CB subscriber registers such a
         * request's context with the flag clear): no span */
        atomic_fetch_add_explicit(&k->sampled_out, 1, memory_order_relaxed);
        return;
    }
    cbt_span *s = cbt_span_start(t, span_name(e), CBT_SPAN_KIND_INTERNAL,
                                 has_parent ? &e->parent : NULL, start);
    if (!s)
        return;
    if (!has_parent && e->session_len) /* a root: in its request's derived trace */
        cbt_trace_id_from_request(e->session, e->session_len, s->ctx.trace_id);
    if (e->session_len) {
        cbt_span_set_str(s, CBT_N_SESSION_ID, e->session, e->session_len);
        /* the join key across processes (docs/distributed.md) */
        cbt_span_set_str(s, CBT_N_REQUEST_ID, e->session, e->session_len);
    }
    cbt_span_set_i64(s, CBT_N_LAUNCH_ID, e->launch_id);
    cbt_span_set_i64(s, CBT_N_N_CTAS, ctas);
    switch (e->op) {
    case CBT_KOP_SCATTER:
    case CBT_KOP_GATHER:
        cbt_span_set_i64(s, CBT_N_SCATTERED_TOKENS, (int64_t)tokens);
        cbt_span_set_i64(s, CBT_N_SLOT_WRITES, (int64_t)(tokens * e->layers * 2));
        cbt_span_set_i64(s, CBT_N_N_SHIFTED, (int64_t)user);
        cbt_span_set_i64(s, CBT_N_N_PREFIX, (int64_t)(tokens >= user ? tokens - user : 0));
        cbt_span_set_i64(s, CBT_N_DROPPED,
                         (int64_t)(e->requested > tokens ? e->requested - tokens : 0));
        cbt_span_set_i64(s, CBT_N_PARTIAL_BLOCKS, e->partial);
        break;
    case CBT_KOP_L2_LOAD: {
        uint64_t dur = end > start ? end - start : 0;
        cbt_span_set_i64(s, CBT_N_CHUNKS, e->chunks);
        cbt_span_set_i64(s, CBT_N_BYTES, (int64_t)e->bytes);
        cbt_span_set_f64(s, CBT_N_GBPS, dur ? (double)e->bytes / (double)dur : 0.0);
        break;
    }
    case CBT_KOP_REROPE:
        cbt_span_set_i64(s, CBT_N_TOKENS, (int64_t)tokens);
        cbt_span_set_i64(s, CBT_N_N_SHIFTED, (int64_t)user);
        break;
    default:
        cbt_span_set_i64(s, CBT_N_TOKENS, (int64_t)tokens);
        cbt_span_set_i64(s, CBT_N_USER_VALUE, (int64_t)user);
        break;
    }
    /* queue time: cbt_launch_begin on the host to the first CTA's begin
     * (its %globaltimer, through the ring's device clock to the host's
     * timeline: docs/spans.md, "Queue time") */
    if (e->enqueued)
        cbt_span_set_queue_at_(s, e->enqueue_ns, start, e->stream, e->device);
    if (incomplete)
        s->flags |= CBT_SPANF_INCOMPLETE;
    cbt_span_end(t, s, end);
    atomic_fetch_add_explicit(&k->kernel_spans, 1, memory_order_relaxed);
}

static void cta_to_sinks(cbt_tracer *t, struct cbt_kspans *k, const kl_entry *e,
                         const cbt_ring_rec *rec)
{
    cbt_cta_record c;
    const cbt_ring *r = e->ring;
    c.start_ns = cbt_ring_dev_to_unix(r, &t->clock, rec->t_begin);
    c.end_ns = cbt_ring_dev_to_unix(r, &t->clock, rec->t_end);
    c.launch_id = rec->launch_id;
    c.cta = rec->cta;
    c.tokens = rec->tokens;
    c.sm = rec->sm;
    c.op = rec->op;
    c.reserved = 0;
    c.user = rec->user;
    c.parent = e->parent;
    cbt_sinks_cta_(&t->sinks, &c);
    atomic_fetch_add_explicit(&k->cta_records, 1, memory_order_relaxed);
}

/* Apply one record to its launch. Returns 0 when the launch is unknown. */
static int apply(cbt_tracer *t, struct cbt_kspans *k, const cbt_ring *ring,
                 const cbt_ring_rec *rec)
{
    kl_entry *e = &k->launches[rec->launch_id % KL_SLOTS];
    if (!e->used || e->launch_id != rec->launch_id || e->ring != ring)
        return 0;
    if (rec->kind == CBT_REC_LAUNCH) {
        emit_span(t, k, e, rec->t_begin, rec->t_end, rec->tokens, rec->user, rec->cta, 0);
        e->used = 0;
        k->n_used--;
        return 1;
    }
    cta_to_sinks(t, k, e, rec);
    if (e->ctas_seen == 0 || rec->t_begin < e->tmin)
        e->tmin = rec->t_begin;
    if (rec->t_end > e->tmax)
        e->tmax = rec->t_end;
    e->tokens += rec->tokens;
    e->user += rec->user;
    if (++e->ctas_seen >= e->n_ctas) {
        emit_span(t, k, e, e->tmin, e->tmax, e->tokens, e->user, e->ctas_seen, 0);
        e->used = 0;
        k->n_used--;
    }
    return 1;
}

static void park(struct cbt_kspans *k, const cbt_ring *ring, const cbt_ring_rec *rec,
                 uint64_t now)
{
    if (k->n_park >= PARK_MAX) {
        atomic_fetch_add_explicit(&k->unjoined, 1, memory_order_relaxed);
        return;
    }
    k->park[k->n_park].rec = *rec;
    k->park[k->n_park].ring = ring;
    k->park[k->n_park].since = now;
    k->n_park++;
}

/* Apply what can be applied; with now != 0, give up on records older than
 * PARK_NS (counted unjoined). */
static void retry_parked(cbt_tracer *t, struct cbt_kspans *k, uint64_t now)
{
    for (uint32_t i = 0; i < k->n_park;) {
        parked *p = &k->park[i];
        int done = apply(t, k, p->ring, &p->rec);
        if (!done && now && now - p->since > PARK_NS) {
            atomic_fetch_add_explicit(&k->unjoined, 1, memory_order_relaxed);
            done = 1;
        }
        if (done) {
            k->park[i] = k->park[--k->n_park];
            continue;
        }
        i++;
    }
}

static cbt_status on_launch_event(void *ctx, cbt_tracer *t, const cbt_event *ev)
{
    struct cbt_kspans *k = ctx;
    uint32_t id = (uint32_t)cbt_event_get_i64(ev, CBT_N_LAUNCH_ID, 0);
    int64_t kop = cbt_event_get_i64(ev, CBT_N_KOP, 0);
    kl_entry *e = &k->launches[id % KL_SLOTS];
    if (e->used) {
        /* an older launch never completed (records lost): end it as incomplete */
        if (e->ctas_seen)
            emit_span(t, k, e, e->tmin, e->tmax, e->tokens, e->user, e->ctas_seen, 1);
        atomic_fetch_add_explicit(&k->unjoined, 1, memory_order_relaxed);
        k->n_used--;
    }
    memset(e, 0, sizeof *e);
    e->used = 1;
    k->n_used++;
    k->last_active = cbt_clock_ticks();
    e->launch_id = id;
    e->op = (uint8_t)(kop & 0xff);
    e->mode = (uint8_t)((kop >> 8) & 0xff);
    e->name = (cbt_name)((kop >> 16) & 0xffff);
    e->ring = ((kop >> 32) & 1) ? t->cuda_ring : t->host_ring;
    e->n_ctas = (uint32_t)cbt_event_get_i64(ev, CBT_N_N_CTAS, 1);
    e->requested = (uint32_t)cbt_event_get_i64(ev, CBT_N_REQUESTED_TOKENS, 0);
    e->layers = (uint32_t)cbt_event_get_i64(ev, CBT_N_NUM_LAYERS, 0);
    e->partial = (uint32_t)cbt_event_get_i64(ev, CBT_N_PARTIAL_BLOCKS, 0);
    e->chunks = (uint32_t)cbt_event_get_i64(ev, CBT_N_CHUNKS, 0);
    e->bytes = (uint64_t)cbt_event_get_i64(ev, CBT_N_BYTES, 0);
    if (ev->flags & CBT_EVF_ENQUEUED) {
        e->enqueued = 1;
        e->enqueue_ns = ev->enqueue_ns;
        e->stream = ev->stream;
        e->device = ev->device;
    }
    e->session_len = ev->session_len;
    memcpy(e->session, ev->session, ev->session_len);
    e->session[ev->session_len] = '\0';
    find_parent(t, ev, e->op, &e->parent);
    k->recent[id % RECENT].id = id;
    k->recent[id % RECENT].parent = e->parent;
    k->recent[id % RECENT].ring_start = 0;
    if (!e->ring) {
        e->used = 0;
        k->n_used--;
    }
    if (k->n_park)
        retry_parked(t, k, 0);
    return CBT_OK;
}

void cbt_kspans_poll_(cbt_tracer *t)
{
    struct cbt_kspans *k = t->kspans;
    if (!k)
        return;
    cbt_ring *rings[2] = {t->host_ring, t->cuda_ring};
    uint64_t now = t->hv_now; /* the round's time: a replay sees the same */
    for (int i = 0; i < 2; i++) {
        cbt_ring *r = rings[i];
        if (!r)
            continue;
        /* a bounded amount per round, so a ring that keeps filling cannot
         * starve the event drain; the rest waits for the next round */
        for (int pass = 0; pass < 8; pass++) {
            uint32_t n = cbt_ring_poll(r, k->buf, 1024);
            if (n)
                k->last_active = cbt_clock_ticks();
            for (uint32_t j = 0; j < n; j++) {
                if (t->rec)
                    cbt_rec_ring_(t, r, &k->buf[j]);
                if (!apply(t, k, r, &k->buf[j]))
                    park(k, r, &k->buf[j], now);
            }
            if (n < 1024)
                break;
        }
        if (now >= k->next_calibrate) {
            cbt_ring_calibrate(r, 32);
            if (t->rec)
                cbt_rec_devclock_(t, r); /* the records after it convert by the new line */
        }
    }
    if (now >= k->next_calibrate)
        k->next_calibrate = now + CALIBRATE_NS;
    if (k->n_park) {
        if (t->rec)
            cbt_rec_kpoll_(t);
        retry_parked(t, k, now);
    }
    if (t->rec) {
        /* CUPTI's gpu.kernel spans are not recorded (docs/recording.md), but
         * they draw span ids: the generator's state after them keeps a
         * replay's later ids the live run's */
        cbt_ids before = t->ids;
        cbt_cupti_poll_(t);
        if (!cbt_ids_same_(&before, &t->ids))
            cbt_rec_ids_(t);
        return;
    }
    cbt_cupti_poll_(t);
}

void cbt_kspans_replay_ring_(cbt_tracer *t, const cbt_ring *ring, const cbt_ring_rec *rec)
{
    struct cbt_kspans *k = t->kspans;
    if (k && !apply(t, k, ring, rec))
        park(k, ring, rec, t->hv_now);
}

void cbt_kspans_replay_retry_(cbt_tracer *t)
{
    struct cbt_kspans *k = t->kspans;
    if (k && k->n_park)
        retry_parked(t, k, t->hv_now);
}

/* Whether a launch still waits for its ring records, or records for their
 * launch: 1 (keep polling the rings), 2 (launches are open but nothing came
 * for a second), 0 (none). */
static int cbt_kspans_waiting_(cbt_tracer *t)
{
    struct cbt_kspans *k = t->kspans;
    if (!k)
        return 0;
    if (k->n_park) /* parked records expire after PARK_NS */
        return 1;
    if (k->n_used == 0)
        return 0;
    uint64_t quiet = cbt_clock_ticks() - k->last_active;
    return (double)quiet * t->clock.ns_per_tick < (double)WAIT_NS ? 1 : 2;
}

int cbt_kspans_recent_(cbt_tracer *t, uint32_t launch_id, cbt_span_ctx *parent,
                       uint64_t *ring_start_ns)
{
    struct cbt_kspans *k = t->kspans;
    if (!k || launch_id == 0 || k->recent[launch_id % RECENT].id != launch_id)
        return 0;
    *parent = k->recent[launch_id % RECENT].parent;
    *ring_start_ns = k->recent[launch_id % RECENT].ring_start;
    return 1;
}

void cbt_kspans_shutdown_(cbt_tracer *t)
{
    struct cbt_kspans *k = t->kspans;
    if (!k)
        return;
    for (uint32_t i = 0; i < KL_SLOTS; i++) {
        kl_entry *e = &k->launches[i];
        if (e->used && e->ctas_seen)
            emit_span(t, k, e, e->tmin, e->tmax, e->tokens, e->user, e->ctas_seen, 1);
        e->used = 0;
    }
    k->n_used = 0;
    atomic_fetch_add_explicit(&k->unjoined, k->n_park, memory_order_relaxed);
    k->n_park = 0;
}

cbt_status cbt_kspans_init_(cbt_tracer *t)
{
    struct cbt_kspans *k = calloc(1, sizeof *k);
    if (!k)
        return CBT_ERR_NOMEM;
    t->kspans = k;
    cbt_subscriber sub;
    cbt_subscriber_init(&sub, "kernel-spans", k, on_launch_event, NULL, NULL);
    cbt_subscriber_want(&sub, CBT_EV_KERNEL_LAUNCH);
    return cbt_subscribers_add_(t, &sub); /* its ctx is freed by cbt_kspans_free_ */
}

void cbt_kspans_free_(cbt_tracer *t)
{
    free(t->kspans);
    t->kspans = NULL;
}

cbt_status cbt_ring_stats_get(cbt_ring_stats *caller)
{
    cbt_status abi = cbt_abi_out_check_(caller);
    if (abi)
        return abi;
    cbt_ring_stats full, *out = &full;
    memset(out, 0, sizeof *out);
    cbt_tracer *t = cbt_tracer_get();
    if (!t)
        return CBT_ERR_NOT_INITIALIZED;
    pthread_mutex_lock(&t->lock); /* the harvester updates ring counters under it */
    cbt_ring *rings[2] = {t->host_ring, t->cuda_ring};
    for (int i = 0; i < 2; i++) {
        if (!rings[i])
            continue;
        out->harvested += rings[i]->harvested;
        out->lost += rings[i]->lost;
        out->torn += rings[i]->torn;
        out->clock_err_ns = rings[i]->clock.err_ticks * t->clock.ns_per_tick;
        out->clock_drift_ppm = rings[i]->clock.drift_ppm;
    }
    if (t->kspans) {
        out->unjoined = atomic_load_explicit(&t->kspans->unjoined, memory_order_relaxed);
        out->kernel_spans = atomic_load_explicit(&t->kspans->kernel_spans, memory_order_relaxed);
        out->cta_records = atomic_load_explicit(&t->kspans->cta_records, memory_order_relaxed);
        out->sampled_out = atomic_load_explicit(&t->kspans->sampled_out, memory_order_relaxed);
    }
    pthread_mutex_unlock(&t->lock);
    cbt_abi_out_(caller, out, sizeof *out, CBT_RING_STATS_VERSION);
    return CBT_OK;
}

/* ---- the harvester's source: the rings, kernel spans and CUPTI ----
 * After the streams' source (a launch's mark resolves before its records
 * are joined). Ring records need no publish: while a ring exists the
 * harvester looks at least every IDLE_RING_POLL_MS (65536 records of a
 * default ring last 250 ms at 262 k records/s; each such wake-up costs about
 * 30 us of CPU on a VM, so 4 a second); while a launch waits for its records
 * (or CUPTI collects) it keeps polling at its working period; while launches
 * are open but nothing came for a second (WAIT_NS), every KSPANS_QUIET_MS
 * (their records may still come, in a burst a ring must not overflow on). */
#define IDLE_RING_POLL_MS 250u
#define KSPANS_QUIET_MS 10u

static void kspans_start(void *ctx)
{
    cbt_tracer *t = ctx;
    if (t->cuda_ring)
        cbt_ring_cuda_bind_(t->cuda_ring); /* the harvester reads the device's ring */
}

static void kspans_poll(void *ctx, cbt_hv_round *r)
{
    cbt_tracer *t = ctx;
    cbt_kspans_poll_(t);
    if (t->host_ring || t->cuda_ring)
        cbt_hv_bound(r, IDLE_RING_POLL_MS);
    int w = cbt_kspans_waiting_(t);
    if (w == 1 || cbt_cupti_enabled_())
        r->keep_polling = 1;
    else if (w == 2)
        cbt_hv_bound(r, KSPANS_QUIET_MS);
}

/* CUPTI's periodic flush may take a while: outside the lock. */
static void kspans_after(void *ctx)
{
    (void)ctx;
    cbt_cupti_periodic_();
}

static void kspans_last(void *ctx)
{
    cbt_tracer *t = ctx;
    pthread_mutex_unlock(&t->lock); /* CUPTI's flush calls back into its buffers: no lock */
    (void)cbt_cupti_flush();        /* completed kernel records, for the last poll */
    pthread_mutex_lock(&t->lock);
    cbt_kspans_poll_(t);
}

static void kspans_finish(void *ctx) { cbt_kspans_shutdown_(ctx); }

void cbt_kspans_source_(cbt_tracer *t, cbt_hv_source *out)
{
    memset(out, 0, sizeof *out);
    out->name = "kernel-spans";
    out->ctx = t;
    out->start = kspans_start;
    out->poll = kspans_poll;
    out->after = kspans_after;
    out->last = kspans_last;
    out->finish = kspans_finish;
}
