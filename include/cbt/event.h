/* cbt/event.h — the events that host code publishes, and how to build one.
 *
 * An event is a fixed-size value (no pointers, no allocation): its type, the
 * session (request) id copied in, a timestamp, a pairing key, up to
 * CBT_EVENT_META_MAX typed metadata values, and a string area for the string
 * values too long to sit inside their value. It is built on the caller's
 * stack, published by copy, and turned into spans later on the harvester
 * thread (see cbt.h and docs/architecture.md). The struct is large (about
 * 2.6 KiB, most of it the string area), but only its used part is ever
 * written or copied: cbt_event_init sets the header alone, and a publish
 * copies the header, the session, the values the event holds, the trace
 * block when CBT_EVF_TRACE is set and the used bytes of the string area (a
 * 2-value event is a 152-byte record; docs/architecture.md, "Lanes").
 *
 * Strings. A value shorter than CBT_META_INLINE_MAX bytes (NUL included) is
 * kept inside its cbt_meta; a longer one, up to CBT_META_STR_MAX bytes, goes
 * into the event's CBT_EVENT_STR_AREA-byte area. Read every string through
 * cbt_event_meta_str() / cbt_event_get_str(), never through cbt_meta.v.str:
 * for a string in the area v.str is empty. A string that does not fit (longer
 * than CBT_META_STR_MAX - 1 bytes, or than what is left of the area) is cut:
 * the event keeps the prefix that fits followed by CBT_META_TRUNC_MARK,
 * cbt_metrics.meta_truncated counts it, and the setter returns CBT_OK; only
 * when not even the marker fits is it refused (CBT_ERR_META_TOO_LONG).
 *
 * The event types are every EventType of LMCache 0.5.6 (MP, CacheBlend, L1,
 * StorageManager, L2, timeout, trace recording) plus a few of cbt's own.
 * Builders use only some of them; the others are accepted by cbt_publish and
 * reach the subscribers that ask for them (the registry example's l1.read).
 * Programs may register more at start-up (cbt_event_type_register).
 *
 * CBT_DISABLE (defined before the first cbt include): the types and constants
 * stay defined and every call is a static inline no-op referencing no cbt
 * symbol: cbt_event_init() zeroes the header (type set, no session, no
 * values, no strings) and, like the real one, writes nothing past it; the
 * setters store nothing and return CBT_OK, cbt_meta_*() give an empty value
 * (CBT_META_NONE), lookups find nothing (NULL, `dflt`, "", false), and
 * cbt_event_type_register() hands out CBT_EV_INVALID, cbt_event_type_by_name()
 * finds nothing (CBT_ERR_UNKNOWN_EVENT, CBT_EV_INVALID).
 */
#ifndef CBT_EVENT_H
#define CBT_EVENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "cbt/api.h"
#include "cbt/names.h"
#include "cbt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CBT_SESSION_MAX 64      /* bytes, including the terminating NUL */
#define CBT_EVENT_META_MAX 16   /* typed metadata values per event */
/* A string value of fewer than CBT_META_INLINE_MAX bytes (NUL included, so
 * at most 15 characters) is held inside its cbt_meta (v.str); that is also
 * the most a standalone cbt_meta_str() value holds. */
#define CBT_META_INLINE_MAX 16
/* The most one string value of an event takes, NUL included (1023
 * characters); a longer one is cut to this (CBT_META_TRUNC_MARK). */
#define CBT_META_STR_MAX 1024
/* Bytes of an event's string area: every string value of
 * CBT_META_INLINE_MAX bytes or more, NULs included, end to end. Two 1023-byte
 * stack traces fill it; a model name of 40 takes 41. */
#define CBT_EVENT_STR_AREA 2048
/* What ends a string that was cut to fit (14 characters): the kept prefix,
 * then this. */
#define CBT_META_TRUNC_MARK "...[truncated]"
#define CBT_EVENT_TYPES_MAX 256 /* built-in plus registered types */
#define CBT_ARRAY_COUNT_MAX 0x10000000u /* elements of one array value (268 M) */

/* X(enum suffix). Order is ABI: append only, never renumber.
 *
 * Names. A built-in type's name (cbt_event_type_name) is LMCache's event
 * value, the string LMCache puts on the wire (lmcache 0.5.6,
 * lmcache/v1/mp_observability/event.py; docs/lmcache-0.5.6.md §7):
 *
 *   CBT_EV_<SUFFIX>            name (LMCache value)      alias (old cbt name)
 *   CBT_EV_MP_STORE_START      "mp.store.start"          "MP_STORE_START"
 *   CBT_EV_CB_LOOKUP_END       "cb.lookup.end"           "CB_LOOKUP_END"
 *   CBT_EV_L1_READ_RESERVED    "l1.read.reserved"        "L1_READ_RESERVED"
 *   CBT_EV_L1_WRITE_FINISHED_AND_READ_RESERVED
 *                              "l1.write_finished_and_read_reserved"
 *   CBT_EV_MP_TRANSFER_PHASE_SAMPLES "mp.transfer.phase_samples"
 *   ... (all 63 LMCache types; the table is in host/core/event.c)
 *
 * The suffix, which is also LMCache's EventType member name (MP_STORE_START),
 * was cbt's name before; it stays an alias: cbt_event_type_by_name and
 * cbt_event_type_register accept it and give the same type. The types only
 * cbt has are named with a "cbt." prefix, which no LMCache value uses:
 * CB_CLASSIFY_START/END "cbt.cb.classify.start"/".end", KERNEL_LAUNCH
 * "cbt.kernel.launch", SPAN_BEGIN/END "cbt.span.begin"/"cbt.span.end". */
#define CBT_BUILTIN_EVENTS(X)                                        \
    /* MP server path (request-event-span seed) */                    \
    X(MP_REQUEST_START) X(MP_REQUEST_END)                             \
    X(MP_LOOKUP_PREFETCH_START) X(MP_LOOKUP_PREFETCH_END)             \
    X(MP_STORE_SUBMITTED) X(MP_STORE_START) X(MP_STORE_END)           \
    X(MP_RETRIEVE_SUBMITTED) X(MP_RETRIEVE_START) X(MP_RETRIEVE_END)  \
    /* CacheBlend V3 server path (cacheblend-v3 seed) */              \
    X(CB_REQUEST_START) X(CB_REQUEST_END)                             \
    X(CB_LOOKUP_START) X(CB_LOOKUP_END)                               \
    X(CB_RETRIEVE_SUBMITTED) X(CB_RETRIEVE_START) X(CB_RETRIEVE_END)  \
    X(CB_FINGERPRINT_MATCH_START) X(CB_FINGERPRINT_MATCH_END)         \
    X(CB_COORDINATOR_MATCH_START) X(CB_COORDINATOR_MATCH_END)         \
    X(CB_SPARSE_PREFETCH_START) X(CB_SPARSE_PREFETCH_END)             \
    X(CB_CLASSIFY_START) X(CB_CLASSIFY_END)                           \
    X(CB_SCATTER_START) X(CB_SCATTER_END)                             \
    X(CB_RETRIEVE_NOOP)                                               \
    X(CB_FINGERPRINTS_REGISTERED) X(CB_CHUNKS_EVICTED)                \
    /* storage tier */                                                \
    X(L2_LOAD_TASK_SUBMITTED) X(L2_LOAD_TASK_COMPLETED)               \
    /* kernel launches (cbt_launch_begin; cbt/kernel.h) */            \
    X(KERNEL_LAUNCH)                                                  \
    /* spans a process opens itself (cbt/pspan.h) */                  \
    X(SPAN_BEGIN) X(SPAN_END)                                         \
    /* appended: the rest of LMCache 0.5.6's EventType (no builder    \
     * uses them; they reach the subscribers that want them) */       \
    X(MP_LOOKUP) X(MP_VLLM_END_SESSION) X(MP_VLLM_BLOCK_ALLOCATION)   \
    X(MP_TOKENS) X(MP_TRANSFER_PHASE_SAMPLES)                         \
    X(CB_PREFIX_LOOKUP_START) X(CB_PREFIX_LOOKUP_END)                 \
    X(L1_READ_RESERVED) X(L1_READ_FINISHED)                           \
    X(L1_WRITE_RESERVED) X(L1_WRITE_FINISHED)                         \
    X(L1_WRITE_FINISHED_AND_READ_RESERVED)                            \
    X(L1_KEYS_EVICTED) X(L1_KEYS_ACCESSED)                            \
    X(L1_EVICTION_LOOP_TICK) X(L1_ALLOCATION_FAILED) X(L1_READ_FAILED) \
    X(SM_READ_PREFETCHED_FINISHED) X(SM_WRITE_RESERVED)               \
    X(SM_WRITE_FINISHED) X(SM_CAPACITY_CHANGED)                       \
    X(L2_STORE_SUBMITTED) X(L2_STORE_COMPLETED)                       \
    X(L2_PREFETCH_LOOKUP_SUBMITTED) X(L2_PREFETCH_LOAD_SUBMITTED)     \
    X(L2_PREFETCH_LOAD_COMPLETED)                                     \
    X(L2_KEYS_EVICTED) X(L2_KEYS_STORED) X(L2_KEYS_ACCESSED)          \
    X(L2_KEYS_DELETED) X(L2_PREFETCH_FAILED)                          \
    X(TIMEOUT_RAISED) X(TRACE_CALL)

typedef uint16_t cbt_event_type;

enum {
    CBT_EV_INVALID = 0,
#define CBT_EV_ENUM_(n) CBT_EV_##n,
    CBT_BUILTIN_EVENTS(CBT_EV_ENUM_)
#undef CBT_EV_ENUM_
    CBT_EV_BUILTIN_COUNT_ /* first id handed out by cbt_event_type_register */
};

typedef enum cbt_meta_type {
    CBT_META_NONE = 0,
    CBT_META_I64,
    CBT_META_F64,
    CBT_META_BOOL,
    CBT_META_STR,
    /* An array of ints, floats, bools or strings (OTLP's ArrayValue): set
     * with cbt_event_array_*(), read with cbt_meta_array() (cbt/array.h). */
    CBT_META_ARRAY,
} cbt_meta_type;

/* The element type of a CBT_META_ARRAY value (cbt_meta.len holds it). */
typedef enum cbt_array_type {
    CBT_ARRAY_I64 = 1,
    CBT_ARRAY_F64 = 2,
    CBT_ARRAY_BOOL = 3,
    CBT_ARRAY_STR = 4,
} cbt_array_type;

/* One metadata value. 24 bytes. `key` is an interned name (cbt/names.h).
 * A CBT_META_ARRAY value (len: its cbt_array_type) names its elements: until
 * the event is published, the caller's (v.arr.src, borrowed); once published,
 * a copy in cbt's array store (v.arr.handle; 0 when the store had no room:
 * a dropped array, cbt/array.h). Read it with cbt_meta_array().
 * A CBT_META_STR value is either inline (area_len 0: the string and its NUL
 * in v.str, its length in len) or in its event's string area (area_len
 * bytes at area_off, then a NUL; len 0 and v.str empty). Read strings with
 * cbt_event_meta_str(), which knows both. */
typedef struct cbt_meta {
    cbt_name key;
    uint8_t type;      /* cbt_meta_type */
    uint8_t len;       /* an inline string's length (< CBT_META_INLINE_MAX) */
    uint16_t area_off; /* a string in the area: where it starts */
    uint16_t area_len; /* a string in the area: its length; 0: inline */
    union {
        int64_t i64;
        double f64;
        bool b;
        char str[CBT_META_INLINE_MAX];
        struct {
            const void *src; /* the caller's elements, until the publish */
            uint32_t count;  /* elements */
            uint32_t handle; /* the store's copy, once published; 0: none */
        } arr;
    } v;
} cbt_meta;

/* What a child needs of its parent: W3C-sized ids. All-zero = no parent.
 * (Spans use it too: cbt/span.h.) */
typedef struct cbt_span_ctx {
    uint8_t trace_id[16];
    uint8_t span_id[8];
    uint8_t trace_flags; /* bit 0: sampled */
} cbt_span_ctx;

/* The trace context an event may carry (CBT_EVF_TRACE; cbt_event_trace()).
 * It is how a process's spans join a trace that another process started:
 * the server puts the context it extracted from an RPC on the START event of
 * the span that serves it, and the subscriber opens that span as a remote
 * child (docs/distributed.md). */
typedef struct cbt_event_trace {
    /* The parent. Trace id and span id: the span this event opens is its
     * child (Option A). Trace id only (span id zero): the span is a root of
     * that trace (Option B). The sampled bit travels with it. */
    cbt_span_ctx parent;
    /* The id the opened span must carry, when the publisher chose it already
     * (cbt/pspan.h: it was injected into an RPC); zero: drawn at span start. */
    uint8_t span_id[8];
    cbt_name name; /* CBT_EV_SPAN_BEGIN: the span's name */
    uint8_t kind;  /* CBT_EV_SPAN_BEGIN: cbt_span_kind */
} cbt_event_trace;

/* Event flags. */
#define CBT_EVF_EXPLICIT_TS 0x1u /* ts was set by the caller; publish keeps it */
#define CBT_EVF_FROM_STREAM 0x2u /* set by the stream backends: ts is when the stream reached it */
#define CBT_EVF_TRACE 0x4u       /* ev->trace is set (cbt_event_trace) */
/* ev->enqueue_ns, ev->stream and ev->device are set: the event was published
 * with cbt_publish_on_stream and timed by the stream (ts is when the stream
 * reached it; enqueue_ns when the host enqueued it). Set by cbt; a caller
 * sets it only together with CBT_EVF_EXPLICIT_TS (a replay of events that
 * carry their enqueue time), enqueue_ns then in unix ns as ts is. */
#define CBT_EVF_ENQUEUED 0x8u
/* The event holds array values (set by cbt_event_array_*): a publish copies
 * their elements into the array store; the flag keeps an event without
 * arrays on the publish path's one fast branch. */
#define CBT_EVF_ARRAYS 0x10u

/* cbt_event.device of an event a CPU stream reached. */
#define CBT_DEVICE_CPU (-1)

typedef struct cbt_event {
    cbt_event_type type;
    uint8_t n_meta;
    uint8_t session_len; /* bytes in session, without NUL */
    uint32_t flags;      /* CBT_EVF_* */
    /* Unix-epoch nanoseconds. Set by the harvester before dispatch (from the
     * publish stamp, or from the stream's completion time); a caller that
     * sets it and CBT_EVF_EXPLICIT_TS keeps its own value (replay, tests). */
    uint64_t ts;
    /* Pairing key for START/END: spans pair on (session, op, pair). Stream
     * publishes set it to the stream's ordinal unless the caller set it, so
     * two tensor-parallel workers storing for one request never cross. */
    uint64_t pair;
    char session[CBT_SESSION_MAX];
    uint16_t str_used; /* bytes of `str` in use (cbt_event_str) */
    uint16_t reserved_[3];
    cbt_meta meta[CBT_EVENT_META_MAX]; /* the first n_meta are set */
    /* Valid only with CBT_EVF_TRACE (copied only then, so events without a
     * context cost nothing more to publish). */
    cbt_event_trace trace;
    /* The string area: str[0, str_used) holds the long strings of meta[],
     * each followed by its NUL. Copied only as far as it is used. */
    char str[CBT_EVENT_STR_AREA];
    /* Valid only with CBT_EVF_ENQUEUED (copied only then): where a stream
     * mark came from. enqueue_ns: the host time of the cbt_publish_on_stream
     * call that enqueued it (unix ns, the clock ts is on: ts - enqueue_ns is
     * how long it waited in the stream's queue, docs/spans.md "Queue time");
     * stream: the stream's ordinal (cbt_stream_ordinal); device: the CUDA
     * device of a CUDA stream, CBT_DEVICE_CPU for a CPU stream. Last in the
     * struct, so a program built against a header without them keeps the
     * offsets of everything else (cbt reads them only with the flag, which
     * such a program never sets). */
    uint64_t enqueue_ns;
    uint32_t stream;
    int32_t device;
} cbt_event;

/* ev's context when it carries one (CBT_EVF_TRACE), else NULL. */
static inline const cbt_event_trace *cbt_event_trace_of(const cbt_event *ev)
{
    return (ev->flags & CBT_EVF_TRACE) ? &ev->trace : (const cbt_event_trace *)0;
}

#ifdef CBT_DISABLE
/* ==== CBT_DISABLE: the calls below compile to no-ops (see the top) ======== */
static inline cbt_status cbt_event_init(cbt_event *ev, cbt_event_type type, const char *session)
{
    (void)session;
    if (ev) { /* the header alone, as the real call: the event is large */
        memset(ev, 0, offsetof(cbt_event, meta));
        ev->type = type;
    }
    return CBT_OK;
}
static inline cbt_status cbt_event_i64(cbt_event *ev, cbt_name key, int64_t v)
{
    (void)ev, (void)key, (void)v;
    return CBT_OK;
}
static inline cbt_status cbt_event_f64(cbt_event *ev, cbt_name key, double v)
{
    (void)ev, (void)key, (void)v;
    return CBT_OK;
}
static inline cbt_status cbt_event_bool(cbt_event *ev, cbt_name key, bool v)
{
    (void)ev, (void)key, (void)v;
    return CBT_OK;
}
static inline cbt_status cbt_event_str(cbt_event *ev, cbt_name key, const char *v)
{
    (void)ev, (void)key, (void)v;
    return CBT_OK;
}
static inline cbt_status cbt_event_array_i64(cbt_event *ev, cbt_name key, const int64_t *v,
                                             size_t n)
{
    (void)ev, (void)key, (void)v, (void)n;
    return CBT_OK;
}
static inline cbt_status cbt_event_array_f64(cbt_event *ev, cbt_name key, const double *v,
                                             size_t n)
{
    (void)ev, (void)key, (void)v, (void)n;
    return CBT_OK;
}
static inline cbt_status cbt_event_array_bool(cbt_event *ev, cbt_name key, const bool *v,
                                              size_t n)
{
    (void)ev, (void)key, (void)v, (void)n;
    return CBT_OK;
}
static inline cbt_status cbt_event_array_str(cbt_event *ev, cbt_name key,
                                             const char *const *v, size_t n)
{
    (void)ev, (void)key, (void)v, (void)n;
    return CBT_OK;
}
static inline cbt_status cbt_event_trace_set(cbt_event *ev, const cbt_span_ctx *parent,
                                             const uint8_t span_id[8])
{
    (void)ev, (void)parent, (void)span_id;
    return CBT_OK;
}
static inline cbt_meta cbt_meta_i64(cbt_name key, int64_t v)
{
    cbt_meta m;
    memset(&m, 0, sizeof m);
    m.key = key;
    (void)v;
    return m;
}
static inline cbt_meta cbt_meta_f64(cbt_name key, double v)
{
    cbt_meta m;
    memset(&m, 0, sizeof m);
    m.key = key;
    (void)v;
    return m;
}
static inline cbt_meta cbt_meta_bool(cbt_name key, bool v)
{
    cbt_meta m;
    memset(&m, 0, sizeof m);
    m.key = key;
    (void)v;
    return m;
}
static inline cbt_meta cbt_meta_str(cbt_name key, const char *v)
{
    cbt_meta m;
    memset(&m, 0, sizeof m);
    m.key = key;
    (void)v;
    return m;
}
static inline const cbt_meta *cbt_event_find(const cbt_event *ev, cbt_name key)
{
    (void)ev, (void)key;
    return NULL;
}
static inline int64_t cbt_event_get_i64(const cbt_event *ev, cbt_name key, int64_t dflt)
{
    (void)ev, (void)key;
    return dflt;
}
static inline const char *cbt_event_meta_str(const cbt_event *ev, const cbt_meta *m, size_t *len)
{
    (void)ev, (void)m;
    if (len)
        *len = 0;
    return NULL;
}
static inline const char *cbt_event_get_str(const cbt_event *ev, cbt_name key, size_t *len)
{
    (void)ev, (void)key;
    if (len)
        *len = 0;
    return NULL;
}
static inline const char *cbt_event_type_name(cbt_event_type type)
{
    (void)type;
    return "";
}
static inline bool cbt_event_type_valid(cbt_event_type type)
{
    (void)type;
    return false;
}
static inline cbt_status cbt_event_type_by_name(const char *name, cbt_event_type *out)
{
    (void)name;
    if (out)
        *out = CBT_EV_INVALID;
    return CBT_ERR_UNKNOWN_EVENT;
}
static inline cbt_status cbt_event_type_register(const char *name, cbt_event_type *out)
{
    (void)name;
    if (out)
        *out = CBT_EV_INVALID;
    return CBT_OK;
}
#else /* the calls */

/* Initialise `ev` as an event of `type` for `session` (may be NULL or "" for
 * session-less events). Copies at most CBT_SESSION_MAX - 1 bytes; a longer id
 * is refused: returns CBT_ERR_SESSION_TOO_LONG, counts it in the tracer's
 * metrics, and leaves `ev` invalid so that publishing it is refused too.
 * Cost: a strnlen and a copy. Writes the header and the session only (no
 * value, empty string area): the values and the area are never read past
 * what n_meta and str_used say. Does not check that `type` exists (publish
 * does). */
CBT_API cbt_status cbt_event_init(cbt_event *ev, cbt_event_type type, const char *session);

/* Append a typed value, or replace the value of a key the event holds
 * already. CBT_ERR_META_FULL when the event already holds CBT_EVENT_META_MAX
 * values (and not `key`); CBT_ERR_INVAL for a NULL event or string or key 0.
 * On error the event is left unchanged.
 *
 * cbt_event_str: a string shorter than CBT_META_INLINE_MAX bytes is stored
 * in its value; a longer one is copied into the string area. One that does
 * not fit whole (more than CBT_META_STR_MAX - 1 bytes, or more than is left
 * of the area: CBT_EVENT_STR_AREA - str_used, its NUL included) is cut: the
 * longest prefix that fits with CBT_META_TRUNC_MARK after it (ending on a
 * UTF-8 character boundary) is stored, the active tracer counts it in
 * cbt_metrics.meta_truncated, and CBT_OK is returned; when not even the
 * marker and its NUL fit, CBT_ERR_META_TOO_LONG. Replacing a string that is
 * the last one in the area gives its bytes back; replacing an earlier one
 * leaves its old bytes unused. Cost: a strnlen and a copy of the string. */
CBT_API cbt_status cbt_event_i64(cbt_event *ev, cbt_name key, int64_t v);
CBT_API cbt_status cbt_event_f64(cbt_event *ev, cbt_name key, double v);
CBT_API cbt_status cbt_event_bool(cbt_event *ev, cbt_name key, bool v);
CBT_API cbt_status cbt_event_str(cbt_event *ev, cbt_name key, const char *v);

/* Array values (OTLP ArrayValue): `n` elements at `v` (n may be 0: an empty
 * array is a value; v may then be NULL). The event BORROWS the elements: it
 * keeps the pointer, and the publish (cbt_publish, cbt_publish_on_stream)
 * copies them into cbt's array store (cbt/array.h), so they must stay valid
 * and unchanged until that call returns, and no longer. Replaces a value
 * already under `key`, like the scalar setters; the same CBT_ERR_META_FULL
 * and CBT_ERR_INVAL (NULL v with n > 0, too: and n past CBT_ARRAY_COUNT_MAX).
 * Cost: a scan of the values; the copy happens at publish (about the
 * elements' bytes, a 128 k-token array 1 MiB: docs/performance.md).
 * cbt_event_array_str: each string up to CBT_META_STR_MAX - 1 bytes (a
 * longer one is cut with CBT_META_TRUNC_MARK at the publish, counted in
 * cbt_metrics.meta_truncated); a NULL element is refused at the publish
 * like a full store (the array is dropped and counted). */
CBT_API cbt_status cbt_event_array_i64(cbt_event *ev, cbt_name key, const int64_t *v, size_t n);
CBT_API cbt_status cbt_event_array_f64(cbt_event *ev, cbt_name key, const double *v, size_t n);
CBT_API cbt_status cbt_event_array_bool(cbt_event *ev, cbt_name key, const bool *v, size_t n);
CBT_API cbt_status cbt_event_array_str(cbt_event *ev, cbt_name key, const char *const *v,
                                       size_t n);

/* Attach a trace context: `parent` as in cbt_event_trace.parent (NULL or
 * all zero: none), `span_id` the id the opened span must carry (NULL: drawn
 * later). Sets CBT_EVF_TRACE. CBT_ERR_INVAL when `ev` is NULL. */
CBT_API cbt_status cbt_event_trace_set(cbt_event *ev, const cbt_span_ctx *parent,
                                       const uint8_t span_id[8]);

/* Metadata values built in place, for APIs that take an array of them
 * (cbt/pspan.h). A standalone value has no string area: a string of
 * CBT_META_INLINE_MAX characters or more gives a value of type CBT_META_NONE,
 * which those APIs refuse with CBT_ERR_META_TOO_LONG. */
CBT_API cbt_meta cbt_meta_i64(cbt_name key, int64_t v);
CBT_API cbt_meta cbt_meta_f64(cbt_name key, double v);
CBT_API cbt_meta cbt_meta_bool(cbt_name key, bool v);
CBT_API cbt_meta cbt_meta_str(cbt_name key, const char *v);

/* The value stored under `key`, or NULL. */
CBT_API const cbt_meta *cbt_event_find(const cbt_event *ev, cbt_name key);

/* Integer value of `key` (bool counts as 0/1), or `dflt` when absent or not
 * an integer. */
CBT_API int64_t cbt_event_get_i64(const cbt_event *ev, cbt_name key, int64_t dflt);

/* The string held by `m` (one of ev's values) and its length in *len (may
 * be NULL); NULL (and *len 0) when `m` is not a string, or names bytes
 * outside ev's used string area. Strings are NUL-terminated. Use this rather
 * than reading the union: where the bytes live is the event's business.
 * `ev` may be NULL for a standalone value (cbt_meta_str), which holds only
 * inline strings. Cost: a few compares. */
CBT_API const char *cbt_event_meta_str(const cbt_event *ev, const cbt_meta *m, size_t *len);

/* The string stored under `key`, or NULL (and *len 0) when absent or not a
 * string. */
CBT_API const char *cbt_event_get_str(const cbt_event *ev, cbt_name key, size_t *len);

/* A built-in type's name, its LMCache value ("mp.store.start"; "cbt.*" for
 * cbt's own types), a registered type's name as registered, or NULL for an
 * unknown type. Lock-free. */
CBT_API const char *cbt_event_type_name(cbt_event_type type);

/* The type named `name`: a built-in's LMCache value ("cb.lookup.end"), its
 * alias ("CB_LOOKUP_END"), or a registered name. CBT_OK and *out set;
 * CBT_ERR_UNKNOWN_EVENT (and *out = CBT_EV_INVALID) for a name no type has;
 * CBT_ERR_INVAL when `name` or `out` is NULL. Registers nothing. Lock-free. */
CBT_API cbt_status cbt_event_type_by_name(const char *name, cbt_event_type *out);

/* Whether `type` is built in or registered. Lock-free. */
CBT_API bool cbt_event_type_valid(cbt_event_type type);

/* Register a program-defined event type (e.g. "MY_APP_EVENT"). Returns
 * the same id for the same name; a built-in's name or alias
 * ("l1.read.reserved", "L1_READ_RESERVED") returns the built-in. The name is
 * interned (cbt/names.h). CBT_ERR_FULL past CBT_EVENT_TYPES_MAX types, or
 * when the name table is full: cbt_last_error() says which, and the name
 * table's limit and how to raise it. Thread-safe; call at start-up. */
CBT_API cbt_status cbt_event_type_register(const char *name, cbt_event_type *out);

#endif /* CBT_DISABLE */

#ifdef __cplusplus
}
#endif
#endif /* CBT_EVENT_H */
