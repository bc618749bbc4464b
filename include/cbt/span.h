/* cbt/span.h — spans, the span registry, sinks and subscribers.
 *
 * Everything in this header runs on the harvester thread: subscribers receive
 * events there and build spans with these calls; finished spans go to the
 * sinks from there. None of it is meant for the publishing threads, and none
 * of it locks.
 *
 * A span is a fixed-size value from a bounded pool owned by the tracer
 * (cbt_config.span_pool). Its attributes are typed and stored inline: an int
 * stays an int and a ratio a double. A span may also carry up to
 * CBT_SPAN_EVENTS_MAX span events (OpenTelemetry's Span.Event: a name, a
 * time and attributes of its own), e.g. the `exception` event of a timeout.
 *
 * CBT_DISABLE (defined before the first cbt include): the types and the
 * subscriber helpers stay defined; every other call is a static inline no-op
 * referencing no cbt symbol: no span is ever opened (cbt_span_start() is
 * NULL), setters and cbt_span_add_event return CBT_OK (the latter with
 * index 0) and store nothing, lookups find nothing (NULL, "",
 * CBT_ERR_NOT_FOUND from cbt_registry_get and cbt_memsink_get), sink
 * constructors give an empty cbt_sink and a NULL memsink.
 */
#ifndef CBT_SPAN_H
#define CBT_SPAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "cbt/api.h"
#include "cbt/event.h"
#include "cbt/names.h"
#include "cbt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cbt_tracer cbt_tracer;

/* Bounds of one span. The attributes and the string bytes are shared by the
 * span and its events. Sized for LMCache 0.5.6's spans: a CacheBlend root
 * carries about 17 attributes, an MP child up to 13 (40-byte model names),
 * a timeout's `exception` event a message and a Python stack trace. With
 * these values sizeof(cbt_span) is 2704 bytes (the pool at the default
 * span_pool of 8192: 21.1 MiB of address space, resident only as spans are
 * used). */
#define CBT_SPAN_ATTR_MAX 32     /* attributes per span, its events' included */
#define CBT_SPAN_STR_ARENA 2048  /* bytes for all string values of the span and its events */
#define CBT_SPAN_EVENTS_MAX 4    /* span events per span */

/* What ends a string value that was cut to fit the arena (not NUL-terminated
 * in the span; 14 bytes). */
#define CBT_SPAN_TRUNC_MARK "...[truncated]"
#define CBT_SPAN_TRUNC_MARK_LEN 14u

typedef enum cbt_span_kind {
    CBT_SPAN_KIND_UNSPECIFIED = 0, /* values as OTLP's Span.SpanKind */
    CBT_SPAN_KIND_INTERNAL = 1,
    CBT_SPAN_KIND_SERVER = 2,
    CBT_SPAN_KIND_CLIENT = 3,
    CBT_SPAN_KIND_PRODUCER = 4,
    CBT_SPAN_KIND_CONSUMER = 5,
} cbt_span_kind;

typedef enum cbt_span_status {
    CBT_SPAN_STATUS_UNSET = 0, /* values as OTLP's Status.StatusCode */
    CBT_SPAN_STATUS_OK = 1,
    CBT_SPAN_STATUS_ERROR = 2,
} cbt_span_status;

#define CBT_SPANF_INCOMPLETE 0x1u       /* ended by shutdown, not by its END event */
#define CBT_SPANF_ATTRS_DROPPED 0x2u    /* at least one span attribute did not fit */
#define CBT_SPANF_ATTRS_TRUNCATED 0x4u  /* at least one string value (of the span or an
                                         * event) was cut to fit: it ends in
                                         * CBT_SPAN_TRUNC_MARK; attrs_truncated counts */
#define CBT_SPANF_EVENTS_DROPPED 0x8u   /* at least one span event did not fit */
#define CBT_SPANF_ARRAYS 0x10u          /* holds array attributes (cbt/array.h) */

/* cbt_span_ctx (a span's W3C ids) is defined in cbt/event.h: events carry one. */

typedef struct cbt_attr {
    cbt_name key;
    uint8_t type;  /* cbt_meta_type */
    uint8_t owner; /* 0: the span's own; k: span event k - 1's */
    uint16_t str_off; /* CBT_META_STR: offset into the span's arena */
    uint16_t str_len; /* CBT_META_STR: its length; CBT_META_ARRAY: the cbt_array_type */
    union {
        int64_t i64;
        double f64;
        bool b;
        struct {
            uint32_t handle, count; /* CBT_META_ARRAY: read with cbt_attr_array (cbt/array.h) */
        } arr;
    } v;
} cbt_attr;

/* One span event. Its attributes are the entries of cbt_span.attrs whose
 * owner is its index + 1. */
typedef struct cbt_span_event {
    uint64_t time_ns;       /* unix epoch ns */
    cbt_name name;
    uint16_t attrs_dropped; /* this event's attributes that did not fit */
    uint32_t reserved_;
} cbt_span_event;

typedef struct cbt_span {
    cbt_span_ctx ctx;         /* this span's trace id and span id */
    uint8_t parent_span_id[8];
    cbt_name name;
    uint8_t kind;             /* cbt_span_kind */
    uint8_t status;           /* cbt_span_status */
    uint32_t flags;           /* CBT_SPANF_* */
    uint64_t start_ns;        /* unix epoch ns */
    uint64_t end_ns;          /* unix epoch ns, 0 while open */
    uint16_t n_attrs;         /* entries of attrs used, the events' included */
    uint16_t arena_used;      /* bytes of arena used: the live string values, packed */
    uint16_t attrs_dropped;   /* span attributes that did not fit */
    uint16_t pool_index_;     /* owned by the tracer's pool */
    uint8_t n_events;         /* entries of events used */
    uint8_t reserved_;
    uint16_t events_dropped;  /* span events that did not fit */
    uint16_t attrs_truncated; /* string values cut to fit (span and events) */
    uint16_t reserved2_;
    cbt_attr attrs[CBT_SPAN_ATTR_MAX];
    cbt_span_event events[CBT_SPAN_EVENTS_MAX];
    char arena[CBT_SPAN_STR_ARENA];
} cbt_span;

/* ---- sinks: where finished spans go (the calls are further down) ---------- */

/* One CTA's record from a per-CTA kernel span, times already in unix ns: for
 * trace files that draw per-SM lanes. */
typedef struct cbt_cta_record {
    uint64_t start_ns, end_ns;
    uint32_t launch_id;
    uint32_t cta;
    uint32_t tokens;
    uint16_t sm;
    uint8_t op;   /* cbt_kernel_op */
    uint8_t reserved;
    uint64_t user;
    cbt_span_ctx parent; /* the span the launch nests under (zero if none) */
} cbt_cta_record;

/* A sink: where finished spans go.
 *
 * Threads, and who may wait. The harvester never waits for a sink. A sink
 * whose flags say CBT_SINK_NONBLOCKING promises that on_span, on_cta,
 * flush_within and spans_lost never wait for I/O, the network or another
 * thread's slow work (they copy and queue, taking at most a lock that only
 * such short work holds); the harvester calls it directly, and cbt_flush
 * calls its flush_within from the flushing thread while on_span may run on
 * the harvester. Every other sink — a file, a pipe, a program's own — runs
 * on a sink thread of its own behind a bounded queue (CBT_SINK_QUEUE_BYTES
 * of compact span records, docs/architecture.md): all its callbacks but
 * spans_lost are called on that thread, one at a time; when its queue is
 * full the span is dropped and counted in its spans_lost; a flush waits for
 * it at most cbt_flush's timeout; and at cbt_shutdown a sink still busy after
 * shutdown_timeout_ms is abandoned: what it still held counts as lost, and
 * its thread destroys it once its call returns. A replay (cbt/replay.h)
 * calls every sink on the replaying thread. */
typedef struct cbt_sink {
    uint32_t version; /* CBT_SINK_VERSION */
    uint32_t size;    /* sizeof(cbt_sink) */
    const char *name;
    void *ctx;
    /* Every finished span (the harvester, or the sink's thread: above).
     * Non-zero return counts as a sink error. */
    cbt_status (*on_span)(void *ctx, const cbt_span *s);
    /* Make everything handed over so far durable/visible. May be NULL. Used
     * when flush_within is NULL. */
    cbt_status (*flush)(void *ctx);
    /* Release everything. Called once: from cbt_shutdown, or on its sink
     * thread as that thread ends (an abandoned one: when its stuck call
     * returns, after cbt_shutdown). May be NULL. */
    void (*destroy)(void *ctx);
    /* Per-CTA kernel records. May be NULL. */
    cbt_status (*on_cta)(void *ctx, const cbt_cta_record *r);
    /* version 2 */
    /* Spans this sink was handed and will never deliver, since it was
     * created: a write that failed (every span in the failed buffer), an
     * export that failed for good, a full exporter queue, a span refused by
     * on_span. Summed over the sinks into cbt_metrics.sink_spans_lost, by
     * cbt_metrics_get (any thread, while on_span may run: read a counter,
     * never block, call nothing of cbt) and by cbt_shutdown_final after the
     * sink's last flush and before its destroy. May be NULL (counted as 0);
     * a version-1 sink, which has no such field, counts 0. */
    uint64_t (*spans_lost)(void *ctx);
    /* version 3 */
    uint32_t flags;    /* CBT_SINK_NONBLOCKING or CBT_SINK_FLUSH_IDLE, or 0 */
    uint32_t reserved; /* must be zero */
    /* flush, waiting at most timeout_ms: CBT_ERR_TIMEOUT when everything
     * was not durable by then. May be NULL (flush is used). */
    cbt_status (*flush_within)(void *ctx, uint32_t timeout_ms);
} cbt_sink;
#define CBT_SINK_VERSION 3u
#define cbt_sink_version_ CBT_SINK_VERSION /* for CBT_STRUCT_INIT */
CBT_ASSERT_NO_TAIL_PADDING_(cbt_sink, flush_within);
/* cbt_sink.flags: the callbacks never wait (above); the harvester calls the
 * sink itself, with no sink thread in between. */
#define CBT_SINK_NONBLOCKING 1u
/* cbt_sink.flags, for a sink that runs on a sink thread: the thread calls
 * its flush each time it has handed over every span queued (before it
 * sleeps), so what arrived together is written together and promptly (the
 * OTLP JSON file's lines, cbt/otlp.h). Without it the sink's flush comes only
 * from cbt_flush and cbt_shutdown. Ignored with CBT_SINK_NONBLOCKING and in
 * a replay (every sink is called on the replaying thread). */
#define CBT_SINK_FLUSH_IDLE 2u
/* The bound on one sink thread's queue of span records (bytes; a record is
 * the used part of a span, a few hundred bytes for an MP span), and on its
 * queue of CTA records. */
#define CBT_SINK_QUEUE_BYTES (8u << 20)
#define CBT_SINK_CTA_QUEUE 16384u

/* The in-memory sink (cbt_memsink_create, below). */
typedef struct cbt_memsink cbt_memsink;

/* ---- subscribers: what turns events into spans ------------------------------- */

typedef struct cbt_subscriber {
    uint32_t version; /* CBT_SUBSCRIBER_VERSION */
    uint32_t size;    /* sizeof(cbt_subscriber) */
    const char *name;
    void *ctx;
    /* Event types wanted: bit (type % 64) of mask[type / 64]. */
    uint64_t mask[CBT_EVENT_TYPES_MAX / 64];
    /* Called on the harvester thread for each wanted event, in dispatch order.
     * A non-zero return is counted in subscriber_errors (the event is not
     * retried). */
    cbt_status (*on_event)(void *ctx, cbt_tracer *t, const cbt_event *ev);
    /* Shutdown: end what is still open (flag CBT_SPANF_INCOMPLETE, end at
     * `now_ns`) and free all per-session state. May be NULL. */
    void (*on_shutdown)(void *ctx, cbt_tracer *t, uint64_t now_ns);
    /* Release ctx. Called once after on_shutdown. May be NULL. */
    void (*destroy)(void *ctx);
} cbt_subscriber;
#define CBT_SUBSCRIBER_VERSION 1u
#define cbt_subscriber_version_ CBT_SUBSCRIBER_VERSION /* for CBT_STRUCT_INIT */
CBT_ASSERT_NO_TAIL_PADDING_(cbt_subscriber, destroy);

/* Fill *s: version and size set, the mask empty (add types with
 * cbt_subscriber_want), the callbacks and ctx as given (on_shutdown and
 * destroy may be NULL). */
static inline void cbt_subscriber_init(cbt_subscriber *s, const char *name, void *ctx,
                                       cbt_status (*on_event)(void *, cbt_tracer *,
                                                              const cbt_event *),
                                       void (*on_shutdown)(void *, cbt_tracer *, uint64_t),
                                       void (*destroy)(void *))
{
    memset(s, 0, sizeof *s); /* plain assignments: the header also serves C++ */
    s->version = CBT_SUBSCRIBER_VERSION;
    s->size = (uint32_t)sizeof *s;
    s->name = name;
    s->ctx = ctx;
    s->on_event = on_event;
    s->on_shutdown = on_shutdown;
    s->destroy = destroy;
}

/* Helpers for cbt_subscriber.mask. */
static inline void cbt_subscriber_want(cbt_subscriber *s, cbt_event_type type)
{
    s->mask[type / 64] |= (uint64_t)1 << (type % 64);
}
static inline bool cbt_subscriber_wants(const cbt_subscriber *s, cbt_event_type type)
{
    return (s->mask[type / 64] >> (type % 64)) & 1u;
}

#ifdef CBT_DISABLE
/* ==== CBT_DISABLE: the calls below compile to no-ops (see the top) ======== */
static inline cbt_span *cbt_span_start(cbt_tracer *t, cbt_name name, cbt_span_kind kind,
                                       const cbt_span_ctx *parent, uint64_t start_ns)
{
    (void)t, (void)name, (void)kind, (void)parent, (void)start_ns;
    return NULL;
}
static inline cbt_span *cbt_span_start_for_event(cbt_tracer *t, cbt_name name,
                                                 cbt_span_kind kind,
                                                 const cbt_span_ctx *local_parent,
                                                 const cbt_event *ev)
{
    (void)t, (void)name, (void)kind, (void)local_parent, (void)ev;
    return NULL;
}
static inline cbt_status cbt_span_set_i64(cbt_span *s, cbt_name key, int64_t v)
{
    (void)s, (void)key, (void)v;
    return CBT_OK;
}
static inline cbt_status cbt_span_set_f64(cbt_span *s, cbt_name key, double v)
{
    (void)s, (void)key, (void)v;
    return CBT_OK;
}
static inline cbt_status cbt_span_set_bool(cbt_span *s, cbt_name key, bool v)
{
    (void)s, (void)key, (void)v;
    return CBT_OK;
}
static inline cbt_status cbt_span_set_str(cbt_span *s, cbt_name key, const char *v, size_t len)
{
    (void)s, (void)key, (void)v, (void)len;
    return CBT_OK;
}
static inline void cbt_span_set_from_event(cbt_span *s, const cbt_event *ev) { (void)s, (void)ev; }
static inline bool cbt_span_set_queue(cbt_span *s, const cbt_event *ev)
{
    (void)s, (void)ev;
    return false;
}
static inline cbt_status cbt_span_add_event(cbt_span *s, cbt_name name, uint64_t time_ns,
                                            uint32_t *index_out)
{
    (void)s, (void)name, (void)time_ns;
    if (index_out)
        *index_out = 0;
    return CBT_OK;
}
static inline cbt_status cbt_span_event_set_i64(cbt_span *s, uint32_t ev, cbt_name key,
                                                int64_t v)
{
    (void)s, (void)ev, (void)key, (void)v;
    return CBT_OK;
}
static inline cbt_status cbt_span_event_set_f64(cbt_span *s, uint32_t ev, cbt_name key,
                                                double v)
{
    (void)s, (void)ev, (void)key, (void)v;
    return CBT_OK;
}
static inline cbt_status cbt_span_event_set_bool(cbt_span *s, uint32_t ev, cbt_name key,
                                                 bool v)
{
    (void)s, (void)ev, (void)key, (void)v;
    return CBT_OK;
}
static inline cbt_status cbt_span_event_set_str(cbt_span *s, uint32_t ev, cbt_name key,
                                                const char *v, size_t len)
{
    (void)s, (void)ev, (void)key, (void)v, (void)len;
    return CBT_OK;
}
static inline const cbt_attr *cbt_span_attr(const cbt_span *s, cbt_name key)
{
    (void)s, (void)key;
    return NULL;
}
static inline const cbt_attr *cbt_span_event_attr(const cbt_span *s, uint32_t ev, cbt_name key)
{
    (void)s, (void)ev, (void)key;
    return NULL;
}
static inline const char *cbt_attr_str(const cbt_span *s, const cbt_attr *a)
{
    (void)s, (void)a;
    return "";
}
static inline void cbt_span_end(cbt_tracer *t, cbt_span *s, uint64_t end_ns)
{
    (void)t, (void)s, (void)end_ns;
}
static inline bool cbt_span_ctx_valid(const cbt_span_ctx *c)
{
    (void)c;
    return false;
}
static inline cbt_status cbt_registry_put(cbt_tracer *t, const char *session, cbt_name name,
                                          const cbt_span_ctx *ctx)
{
    (void)t, (void)session, (void)name, (void)ctx;
    return CBT_OK;
}
static inline cbt_status cbt_registry_get(cbt_tracer *t, const char *session, cbt_name name,
                                          cbt_span_ctx *out)
{
    (void)t, (void)session, (void)name;
    if (out)
        memset(out, 0, sizeof *out);
    return CBT_ERR_NOT_FOUND; /* nothing is ever registered */
}
static inline void cbt_registry_remove(cbt_tracer *t, const char *session, cbt_name name,
                                       const cbt_span_ctx *ctx)
{
    (void)t, (void)session, (void)name, (void)ctx;
}
static inline uint32_t cbt_registry_count(cbt_tracer *t)
{
    (void)t;
    return 0;
}
static inline cbt_status cbt_memsink_create_into(uint32_t capacity, cbt_memsink **out,
                                                 cbt_sink *sink_out)
{
    (void)capacity, (void)sink_out; /* left as the wrapper made it: an empty sink */
    if (out)
        *out = NULL;
    return CBT_OK;
}
static inline void cbt_memsink_release(cbt_memsink *m) { (void)m; }
static inline uint32_t cbt_memsink_count(cbt_memsink *m)
{
    (void)m;
    return 0;
}
static inline cbt_status cbt_memsink_get(cbt_memsink *m, uint32_t i, cbt_span *out)
{
    (void)m, (void)i;
    if (out)
        memset(out, 0, sizeof *out);
    return CBT_ERR_NOT_FOUND; /* every index is past the end of an empty sink */
}
static inline uint64_t cbt_memsink_dropped(cbt_memsink *m)
{
    (void)m;
    return 0;
}
static inline cbt_status cbt_jsonl_sink_create_into(const char *path, cbt_sink *sink_out)
{
    (void)path, (void)sink_out; /* left as the wrapper made it: an empty sink */
    return CBT_OK;
}
static inline size_t cbt_span_to_json(const cbt_span *s, char *buf, size_t cap)
{
    (void)s;
    if (buf && cap)
        buf[0] = '\0';
    return 0;
}
#else /* the calls */

/* ---- span building (harvester thread only) -------------------------------- */

/* Open a span. `parent` NULL (or all-zero) starts a new trace with fresh ids;
 * otherwise the span joins the parent's trace. Returns NULL when the pool is
 * exhausted (counted as spans_dropped). Cost: a pool pop and an id draw. */
CBT_API cbt_span *cbt_span_start(cbt_tracer *t, cbt_name name, cbt_span_kind kind,
                                 const cbt_span_ctx *parent, uint64_t start_ns);

/* Open the span that event `ev` starts, honouring the trace context it may
 * carry (CBT_EVF_TRACE, cbt/event.h):
 *   - its parent has a span id: the span is that parent's child (a remote
 *     parent, Option A), whatever `local_parent` says;
 *   - its parent is a trace id only: with no valid `local_parent`, the span
 *     is a root of that trace, with its sampled bit (Option B);
 *   - it names a span id: the span carries it (the publisher injected it);
 *   - otherwise as cbt_span_start(t, name, kind, local_parent, ev->ts).
 * NULL when the pool is exhausted. */
CBT_API cbt_span *cbt_span_start_for_event(cbt_tracer *t, cbt_name name, cbt_span_kind kind,
                                           const cbt_span_ctx *local_parent, const cbt_event *ev);

/* Typed attributes. Setting an existing key overwrites it; the bytes of a
 * string it replaces are given back (the arena stays packed, so setting a
 * key again and again never uses it up). CBT_ERR_INVAL for a NULL span, key
 * 0, or a NULL `v` with a non-zero `len`.
 *
 * Bounds: CBT_SPAN_ATTR_MAX attributes and CBT_SPAN_STR_ARENA bytes of
 * strings, shared with the span's events. A new key past the attribute
 * bound is refused: CBT_ERR_FULL, attrs_dropped counts it and the span is
 * flagged CBT_SPANF_ATTRS_DROPPED (exporters report the count). A string
 * longer than what is left of the arena is stored cut, at a UTF-8 character
 * boundary, and ended with CBT_SPAN_TRUNC_MARK so that the cut shows
 * wherever the value is read: CBT_OK, attrs_truncated counts it and the span
 * is flagged CBT_SPANF_ATTRS_TRUNCATED. Only when not even the mark fits is
 * the value refused as above (an existing value under that key is kept).
 * Cost: a scan of the attributes; a string overwrite moves at most the
 * arena's bytes. `v` may point into the span's own arena. */
CBT_API cbt_status cbt_span_set_i64(cbt_span *s, cbt_name key, int64_t v);
CBT_API cbt_status cbt_span_set_f64(cbt_span *s, cbt_name key, double v);
CBT_API cbt_status cbt_span_set_bool(cbt_span *s, cbt_name key, bool v);
CBT_API cbt_status cbt_span_set_str(cbt_span *s, cbt_name key, const char *v, size_t len);

/* Copy an event's metadata onto the span as attributes, types preserved;
 * an array value the span references (cbt_span_set_array, cbt/array.h), a
 * dropped one (the store had no room) is counted in attrs_dropped. */
CBT_API void cbt_span_set_from_event(cbt_span *s, const cbt_event *ev);

/* Queue time (docs/spans.md, "Queue time"). When `ev` was timed by a stream
 * (CBT_EVF_ENQUEUED: published with cbt_publish_on_stream and reached by the
 * stream), set on `s`: cbt.queue_ns (int, ns: ev->ts - ev->enqueue_ns, how
 * long the work waited in the stream's queue; 0 when the stream's clock puts
 * the reach before the enqueue), cbt.enqueue_ns (int: ev->enqueue_ns, unix
 * ns), cbt.stream (int: the stream's ordinal) and cbt.device (string: "cpu"
 * or "cuda:<n>"), and return true. An event no stream timed sets nothing and
 * returns false: no attribute reports a value nobody measured. Cost: four
 * attribute sets. Harvester thread (a subscriber's on_event). */
CBT_API bool cbt_span_set_queue(cbt_span *s, const cbt_event *ev);

/* Add a span event `name` at `time_ns` (unix epoch ns) and put its index in
 * *index_out (may be NULL), for the cbt_span_event_set_* calls. Events keep
 * the order they were added in. CBT_ERR_INVAL for a NULL span or name 0;
 * CBT_ERR_FULL when the span already holds CBT_SPAN_EVENTS_MAX events: the
 * event is dropped, events_dropped counts it, the span is flagged
 * CBT_SPANF_EVENTS_DROPPED and *index_out is set to UINT32_MAX (which the
 * setters refuse). */
CBT_API cbt_status cbt_span_add_event(cbt_span *s, cbt_name name, uint64_t time_ns,
                                      uint32_t *index_out);

/* Typed attributes of span event `ev` (an index from cbt_span_add_event),
 * with the rules of cbt_span_set_*: the same key set again overwrites, and
 * the span's attribute and string bounds apply (they are shared). A refused
 * attribute is counted in that event's attrs_dropped (not the span's) and
 * returns CBT_ERR_FULL; a cut string flags the span
 * CBT_SPANF_ATTRS_TRUNCATED. CBT_ERR_INVAL for an `ev` the span does not
 * hold. */
CBT_API cbt_status cbt_span_event_set_i64(cbt_span *s, uint32_t ev, cbt_name key, int64_t v);
CBT_API cbt_status cbt_span_event_set_f64(cbt_span *s, uint32_t ev, cbt_name key, double v);
CBT_API cbt_status cbt_span_event_set_bool(cbt_span *s, uint32_t ev, cbt_name key, bool v);
CBT_API cbt_status cbt_span_event_set_str(cbt_span *s, uint32_t ev, cbt_name key, const char *v,
                                          size_t len);

/* The span's own attribute stored under `key`, or NULL. A string value is
 * the a->str_len bytes at cbt_attr_str() (not NUL-terminated). */
CBT_API const cbt_attr *cbt_span_attr(const cbt_span *s, cbt_name key);
/* Span event `ev`'s attribute stored under `key`, or NULL. */
CBT_API const cbt_attr *cbt_span_event_attr(const cbt_span *s, uint32_t ev, cbt_name key);
CBT_API const char *cbt_attr_str(const cbt_span *s, const cbt_attr *a);

/* End the span at `end_ns` (clamped to start_ns if earlier), hand it to every
 * sink — unless its trace is sampled out (trace_flags bit 0 clear: a
 * not-sampled context it joined, or a parent that did), then to none, counted
 * in cbt_metrics.spans_unsampled — and return it to the pool: `s` is invalid
 * afterwards. */
CBT_API void cbt_span_end(cbt_tracer *t, cbt_span *s, uint64_t end_ns);

/* True when the context names a span (non-zero ids). */
CBT_API bool cbt_span_ctx_valid(const cbt_span_ctx *c);

/* ---- the span registry ------------------------------------------------------
 * Maps (session id, logical name) to the context of a span that is open now,
 * so other subscribers can nest under it (seed: "Extending the Span
 * Hierarchy"). The MP subscriber keeps "request", "lookup_prefetch", "store"
 * and "retrieve" there while they are open. One registry per tracer;
 * bounded (cbt_config.registry_capacity). */

/* Record that `ctx` is open under (session, name); replaces an older entry.
 * CBT_ERR_FULL when the table is full (counted). */
CBT_API cbt_status cbt_registry_put(cbt_tracer *t, const char *session, cbt_name name,
                                    const cbt_span_ctx *ctx);

/* Copy the open span's context into *out. CBT_ERR_NOT_FOUND when none. */
CBT_API cbt_status cbt_registry_get(cbt_tracer *t, const char *session, cbt_name name,
                                    cbt_span_ctx *out);

/* Forget (session, name). Only removes the entry when it still names `ctx`'s
 * span (pass NULL to remove unconditionally), so a later span that replaced
 * it stays registered. */
CBT_API void cbt_registry_remove(cbt_tracer *t, const char *session, cbt_name name,
                                 const cbt_span_ctx *ctx);

/* Entries currently held (for tests and self-metrics). */
CBT_API uint32_t cbt_registry_count(cbt_tracer *t);

/* ---- sinks: where finished spans go ------------------------------------------ */

/* In-memory sink (cbt_memsink_create, below, an inline wrapper around this
 * entry point): keeps copies of up to `capacity` finished spans (more are
 * counted as dropped). For tests and for the demo's tree printer. Two owners:
 * the tracer (released at cbt_shutdown) and the caller, who reads it even
 * after shutdown and calls cbt_memsink_release() when done. */
CBT_API cbt_status cbt_memsink_create_into(uint32_t capacity, cbt_memsink **out,
                                           cbt_sink *sink_out);
CBT_API void cbt_memsink_release(cbt_memsink *m);
/* Spans held so far. Safe to call after cbt_flush() from any thread: the
 * sink's own lock guards the array. */
CBT_API uint32_t cbt_memsink_count(cbt_memsink *m);
/* Copy of span i (0-based, in end order). CBT_ERR_NOT_FOUND past the end. */
CBT_API cbt_status cbt_memsink_get(cbt_memsink *m, uint32_t i, cbt_span *out);
CBT_API uint64_t cbt_memsink_dropped(cbt_memsink *m);

/* JSON-lines file sink (cbt_jsonl_sink_create, below): one object per
 * finished span, hex ids, ns times, typed attributes. See docs/spans.md for
 * the schema. The sink owns the file. Lines collect in a 64 KiB buffer of
 * the sink's own, written when full and at each flush; a write that fails
 * (a full disk, /dev/full) is one sink error (the on_span or flush that
 * made it returns CBT_ERR_IO) and every span of that buffer not written
 * whole is lost, counted in spans_lost; later spans are tried again. */
CBT_API cbt_status cbt_jsonl_sink_create_into(const char *path, cbt_sink *sink_out);

/* Format one span as a JSON line (with '\n') into buf. Returns the length
 * written, or the length needed when it exceeds cap (nothing is then valid). */
CBT_API size_t cbt_span_to_json(const cbt_span *s, char *buf, size_t cap);

#endif /* CBT_DISABLE */

/* The sink constructors, inline so that only this header's sizeof of
 * cbt_sink is written: *sink_out zeroed, its version and size set, then the
 * _into entry point fills at most that size (cbt.h, "versioned structs"). */
static inline cbt_status cbt_memsink_create(uint32_t capacity, cbt_memsink **out,
                                            cbt_sink *sink_out)
{
    if (sink_out) {
        memset(sink_out, 0, sizeof *sink_out);
        sink_out->version = CBT_SINK_VERSION;
        sink_out->size = (uint32_t)sizeof *sink_out;
    }
    return cbt_memsink_create_into(capacity, out, sink_out);
}
static inline cbt_status cbt_jsonl_sink_create(const char *path, cbt_sink *sink_out)
{
    if (sink_out) {
        memset(sink_out, 0, sizeof *sink_out);
        sink_out->version = CBT_SINK_VERSION;
        sink_out->size = (uint32_t)sizeof *sink_out;
    }
    return cbt_jsonl_sink_create_into(path, sink_out);
}

#ifdef __cplusplus
}
#endif
#endif /* CBT_SPAN_H */
