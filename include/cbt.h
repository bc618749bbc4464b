/* cbt.h — the one include a user of cbt needs.
 *
 * cbt turns START/END events published by a KV-cache server into
 * OpenTelemetry-shaped spans: one root span per request ("request" on the MP
 * path), children for lookup_prefetch / store / retrieve, roots closed exactly
 * when the request's pending GPU work has finished (see docs/spans.md).
 *
 * It includes every public header a host program needs: events, names,
 * spans and sinks, streams, the MP and CacheBlend builders, kernel launches,
 * trace context and pspans, CUPTI, the blend metrics, and the exporters
 * (cbt/otlp.h, cbt/nvtx.h, cbt/trace_file.h, cbt/tree.h) and recording and
 * replay (cbt/replay.h). Kernel sources add
 * cbt/kernel_span.h (the CBT_KERNEL_SPAN macros); users of cbt's own KV
 * kernels add cbt/kv_kernels.h (libcbt_kernels).
 *
 * The flow, one file per stage (docs/architecture.md):
 *   cbt_publish() / cbt_publish_on_stream()  stamp and enqueue   host/core/lane.c, host/streams/stream*.c
 *   harvester thread                         dispatch in order   host/core/harvester.c
 *   builders (MP, CacheBlend, user)          events -> spans     host/builders/
 *   sinks (a sink that may wait: own thread) spans -> files/...  host/spans/sink*.c, exporter/
 *
 * Costs: cbt_publish() is a timestamp (rdtscp) and a copy into the calling
 * thread's own bounded lane (a single-producer ring: no lock, no CAS); it
 * never blocks, never allocates, and makes no system call in steady state
 * (the harvester wakes on its own timer while work flows; only the first
 * publish after 100 ms of idleness wakes it). A thread's first publish
 * claims a lane from the pool made at init by a CAS (no lock). An event
 * with array values also copies their elements into the array store, one
 * CAS per 4 KiB chunk (no lock, no allocation; full: dropped and counted,
 * cbt/array.h). With no
 * tracer (not initialised, or disabled by configuration) it is one
 * predictable branch. Nothing a program calls waits for a sink, a file or
 * the network: docs/architecture.md, "Who waits for whom".
 *
 * CBT_DISABLE: defined before the first cbt include, it compiles every cbt
 * call out. Each function of this header and of every header under cbt/
 * but cbt/kv_kernels.h (the KV kernels move data, which CBT_DISABLE must not
 * stop: that header says more) becomes a static inline no-op (its arguments still type-checked; no cbt
 * symbol referenced, so no cbt library is linked) and each kernel macro a
 * void cast; types, enums and constants stay defined. Calls return CBT_OK with
 * defined, empty results — NULL handles, zeroed out-structs, "" strings,
 * "cbt disabled" from cbt_strerror() — unless a header says otherwise, and
 * cbt_config_default() keeps its defaults with enabled = false. Each header
 * says at its top what CBT_DISABLE does to it; tests/disable_all.c uses
 * every call and macro with it, linked against libc alone.
 *
 * Threads: cbt_init() starts one harvester thread; cbt_shutdown() stops it
 * after draining. cbt_publish() may be called from any thread. cbt_shutdown()
 * must not race with publishers still running (stop them first).
 */
#ifndef CBT_H
#define CBT_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include "cbt/api.h"
#include "cbt/build_config.h"
#include "cbt/event.h"
#include "cbt/names.h"
#include "cbt/span.h"
#include "cbt/status.h"
#include "cbt/stream.h"
#include "cbt/mp.h"
#include "cbt/kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- versioned structs ------------------------------------------------------
 *
 * Structs that cross the library boundary begin with `uint32_t version, size;`
 * and `size` says which fields the caller knows, as in NVTX: sizeof the
 * struct in the cbt headers the caller was compiled against. Fields are only
 * ever appended, after the previous version's last field, so the first
 * `size` bytes of a newer struct are an older one.
 *
 *   Structs the caller hands in (cbt_config, cbt_subscriber, cbt_sink,
 *   cbt_launch_info, cbt_otlp_config): a smaller `size`, from a caller built
 *   against an older cbt, is accepted and the fields past it take their
 *   defaults (those of cbt_config_default() and the like; NULL callbacks);
 *   a larger one, from a caller built against a newer cbt, is refused with
 *   CBT_ERR_VERSION and a line on stderr naming both sizes, as is a size
 *   smaller than the two header words or a version of 0 or above the one
 *   this libcbt knows. Start in-structs from their _default() function.
 *   Structs cbt fills (cbt_metrics and every *_stats): set version and size
 *   before the call (CBT_STRUCT_INIT); cbt writes at most `size` bytes and
 *   sets `size` to the number it wrote, so a caller newer than the library
 *   learns which fields were filled (the rest it left untouched). A `size`
 *   smaller than the header is CBT_ERR_VERSION.
 *
 * Calls that produce a versioned struct obey the same bound. Each is a
 * static inline wrapper, compiled with the caller's sizeof, around an
 * out-of-line entry point named <call>_into, the ABI-stable call it makes
 * (no libcbt was installed before the wrappers, so the wrapped names are not
 * kept as symbols). The wrapper zeroes the caller's struct, sets its version and size from the
 * caller's header and calls the entry point, which writes at most `size`
 * bytes:
 *   cbt_config_default()            cbt_config_default_into(&c)
 *   cbt_launch_info_default()       cbt_launch_info_default_into(&li, op, n)
 *   cbt_otlp_config_default()       cbt_otlp_config_default_into(c)
 *   cbt_memsink_create(), cbt_jsonl_sink_create(),
 *   cbt_trace_file_sink_create(),   the same names with _into, same arguments,
 *   cbt_otlp_exporter_create(),     filling the caller's cbt_sink or
 *   cbt_mp_subscriber_create(),     cbt_subscriber
 *   cbt_cb_subscriber_create()
 * A _default_into() keeps the caller's version and size (so a struct from a
 * newer header stays refused by the calls that take it) and returns
 * CBT_ERR_VERSION when that size is larger than this libcbt's, having
 * filled the fields it knows. A constructor's _into() fills a complete
 * struct of its own and copies at most `size` bytes of it, setting `size` to
 * what it wrote (the out-struct rule); it checks the header before creating
 * anything. Every _into() returns CBT_ERR_INVAL for NULL and CBT_ERR_VERSION,
 * writing nothing, for a size smaller than the header.
 *
 * No padding at the end: sizeof every versioned struct is the end of its
 * last field (CBT_ASSERT_NO_TAIL_PADDING_ after each, cbt/api.h), so a
 * field appended after the last one always changes sizeof, and with it the
 * `size` that tells cbt whether the caller knows the field. Where the last
 * field would leave padding, the struct ends with an explicit `reserved`
 * field instead, which must be zero: the _default() calls and
 * CBT_STRUCT_INIT zero it and cbt writes zero there in out-structs. cbt
 * never reads it (a program built before it existed may hold padding
 * garbage there), and a new field never goes into it: fields are appended
 * after it.
 *
 * Not versioned, and changed only with the ABI major (the SONAME): cbt_event
 * and cbt_span (fixed layouts on the hot path), cbt_blend_snapshot (arrays
 * sized by the instrument enums) and the small id/context structs. */

/* An out-struct with its version and size set and every other field zero:
 *   cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);  cbt_metrics_get(&m);
 * `type` is the typedef name of a struct cbt fills (cbt_metrics, every
 * *_stats) or of one a caller builds itself (cbt_sink, cbt_subscriber); the
 * version is that struct's own constant (CBT_METRICS_VERSION, ...), found
 * through the macro <type>_version_ its header defines next to it, so
 * another type does not compile (the in-structs with a _default() have no
 * such macro: start them from it). Designated initializers in C, a
 * value-initialising template in C++, so neither warns under -Wextra. */
#ifdef __cplusplus
} /* extern "C" */
template <class T> inline T cbt_struct_init_(uint32_t version)
{
    T v = T();
    v.version = version;
    v.size = (uint32_t)sizeof(T);
    return v;
}
#define CBT_STRUCT_INIT(type) cbt_struct_init_<type>(type##_version_)
extern "C" {
#else
#define CBT_STRUCT_INIT(type) {.version = type##_version_, .size = (uint32_t)sizeof(type)}
#endif

typedef struct cbt_config {
    uint32_t version; /* CBT_CONFIG_VERSION */
    uint32_t size;    /* sizeof(cbt_config) */
    bool enabled;     /* false: cbt_init() succeeds but installs no tracer */
    bool mp_subscriber;          /* install the MP subscriber (seed semantics) */
    /* The shared queue and each thread's lane hold variable-size records of
     * 64-byte cells: an event takes 2 cells with no value, 3 with two, 8
     * with LMCache's 12 cb.lookup.end values and a 40-character model name,
     * 41 at most (16 values, a trace context and a full string area;
     * docs/architecture.md, "Lanes").
     * A lane's cell costs 64 bytes, a cell of the shared queue 72 (with its
     * commit word). */
    uint32_t queue_capacity;     /* cells of the shared queue, power of two in [64, 2^24] */
    uint32_t lane_capacity;      /* cells of each thread's own lane, power of two in
                                    [64, 2^22]; 0 = no lanes */
    uint32_t max_lanes;          /* threads with a lane of their own (<= 256); others share */
    uint32_t span_pool;          /* spans open at once */
    uint32_t registry_capacity;  /* (session, name) entries, power of two */
    uint32_t max_sessions;       /* sessions tracked by the MP subscriber */
    uint32_t poll_interval_us;   /* the harvester's nap between working rounds, in
                                    [1, 1000000] (default 10000): under load an
                                    event is dispatched at most this (plus a
                                    round) after its publish, and publishers
                                    never wake the harvester; a lane past half
                                    full, cbt_flush() and cbt_shutdown() end a
                                    nap early (docs/architecture.md) */
    uint32_t shutdown_timeout_ms;/* bound on draining at shutdown */
    const char *jsonl_path;      /* if set, a JSON-lines span file sink */
    uint32_t ring_capacity;      /* records in the CPU backend's ring, power of two; 0 = none */
    uint32_t cuda_ring_capacity; /* records in the device ring, power of two; 0 = none */
    uint32_t ring_placement;     /* cbt_ring_placement of the device ring */
    uint32_t reserved;           /* must be zero (cbt_config_default() zeroes it) */
    /* version 2: the MP subscriber's request-tree options (cbt/request_tree.h;
     * 0 = the environment's, else the default) */
    uint32_t mp_root_end;        /* cbt_root_end (CBT_MP_ROOT_END) */
    uint32_t session_idle_ms;    /* idle bound (CBT_SESSION_IDLE_MS); CBT_TREE_OFF: never */
    uint32_t late_grace_ms;      /* late-children window (CBT_LATE_GRACE_MS); CBT_TREE_OFF: none */
    uint32_t reserved2;          /* must be zero */
    /* version 3 */
    uint32_t idle_sleep_ms;      /* longest harvester sleep once idle (100 ms with
                                    nothing to do), in [1, 60000] (default 1000):
                                    the first publish after it, cbt_flush() or
                                    cbt_shutdown() wakes it at once; the timeout
                                    paces its periodic work (clock refit) and,
                                    capped at 250 ms while a kernel ring exists,
                                    how late it reads ring records no publish
                                    announced */
    uint32_t reserved3;          /* must be zero */
    /* version 4: trace recording (docs/recording.md; cbt/replay.h). With
     * trace_level NULL (and CBT_TRACE_LEVEL unset or empty) nothing is
     * recorded and the harvester pays one predicted branch per event. */
    const char *trace_level;     /* "gpu" records what the span builders consume
                                    into an LMCT file; NULL: CBT_TRACE_LEVEL, else off.
                                    Another value is CBT_ERR_INVAL (named on stderr);
                                    CBT_ERR_UNSUPPORTED in a build without msgpack-c */
    const char *trace_output;    /* the file; NULL: CBT_TRACE_OUTPUT, else
                                    $TMPDIR/cbt-trace-<pid>-<UTC stamp>.lct, named in
                                    an INFO line on stderr */
    uint32_t trace_buffer_kib;   /* the recorder's buffer between the harvester and
                                    its writer thread; 0 = 16384 (16 MiB), at most
                                    1048576. Full: records are dropped and counted
                                    (cbt_metrics.trace_records_dropped) */
    bool replay;                 /* a replay tracer (cbt/replay.h): no harvester
                                    thread, no live publishing (cbt_enabled() stays
                                    false); cbt_replay_run() feeds it a recorded file */
    uint8_t reserved4[3];        /* must be zero */
    /* version 5 */
    uint32_t names_capacity;     /* a program's interned names (cbt/names.h) the
                                    process-wide table may hold besides cbt's
                                    built-in ones, in [0, CBT_NAMES_CAPACITY_MAX];
                                    cbt_init raises the table's capacity to it,
                                    never lowers it (the table outlives tracers).
                                    0: unchanged (CBT_NAMES_CAPACITY at the
                                    table's first use, else 4096) */
    uint32_t reserved5;          /* must be zero */
    /* version 6 */
    uint64_t arrays_capacity;    /* bytes of the process-wide array store that holds
                                    array values' elements (cbt/array.h), in
                                    [CBT_ARRAYS_CAPACITY_MIN, _MAX] (1 MiB .. 16 GiB),
                                    reserved by the process's first cbt_init (address
                                    space, resident as used; later tracers share it:
                                    their value is ignored). 0: CBT_ARRAYS_CAPACITY
                                    (bytes) when set, else 64 MiB. Full: arrays are
                                    dropped and counted (cbt_metrics.arrays_dropped) */
    uint32_t token_trace;        /* LMCache 0.5.7's token traces: the MP builder's
                                    mp.request.trace span per lookup (docs/spans.md);
                                    a cbt_token_trace (cbt/request_tree.h): 0 the
                                    environment's CBT_TOKEN_TRACE, else off */
    uint32_t reserved6;          /* must be zero */
} cbt_config;
#define CBT_CONFIG_VERSION 6u
CBT_ASSERT_NO_TAIL_PADDING_(cbt_config, reserved6);

/* cbt_config's defaults, the one list of them: libcbt's
 * cbt_config_default_into() fills them, and so does its CBT_DISABLE stub,
 * which then clears `enabled`. Not a call to make: cbt_config_default()
 * (below) asks libcbt, whose defaults are the ones that count. Every field
 * not named is zero: no span file, the tree options and trace recording
 * from the environment, the reserved fields. */
static inline void cbt_config_defaults_(cbt_config *d)
{
    memset(d, 0, sizeof *d);
    d->version = CBT_CONFIG_VERSION;
    d->size = (uint32_t)sizeof *d;
    d->enabled = true;
    d->mp_subscriber = true;
    d->queue_capacity = 65536; /* cells: 4.5 MiB */
    /* cells: 8 MiB per lane, about 24 ms of one thread publishing MP
     * requests at 1 M spans/s (16 cells a request), so a harvester
     * descheduled that long on a small machine loses nothing
     * (docs/performance.md, issue 11) */
    d->lane_capacity = 131072;
    d->max_lanes = 64;
    d->span_pool = 8192;
    d->registry_capacity = 16384;
    d->max_sessions = 4096;
    d->poll_interval_us = 10000; /* the harvester's nap while work flows (harvester.c) */
    d->idle_sleep_ms = 1000;   /* idle: a publish wakes it; this paces the clock refit */
    d->shutdown_timeout_ms = 2000;
    d->ring_capacity = 1u << 16;
    d->cuda_ring_capacity = 1u << 16;
    d->ring_placement = CBT_RING_MAPPED;
}

/* Self-metrics. All counters are totals since cbt_init(). */
typedef struct cbt_metrics {
    uint32_t version, size;     /* CBT_STRUCT_INIT(cbt_metrics) */
    uint64_t published;         /* events accepted into the queue */
    uint64_t dropped_full;      /* events dropped: queue or stream pool full */
    uint64_t rejected;          /* events refused: invalid type or session */
    uint64_t session_too_long;  /* cbt_event_init refusals */
    uint64_t dispatched;        /* events handed to subscribers */
    uint64_t subscriber_errors; /* non-zero returns from subscribers */
    uint64_t sink_errors;       /* non-zero returns from sinks */
    uint64_t queue_depth;       /* events waiting now, all lanes and the shared queue */
    uint64_t queue_capacity;    /* of the shared queue, in 64-byte cells (cbt_config) */
    uint64_t lanes;             /* threads with a lane of their own now */
    uint64_t pending_stream_marks; /* CUDA marks recorded, not yet resolved */
    uint64_t lag_last_ns;       /* oldest-event lag: dispatch time - stamp of the
                                   oldest event of the harvester's last round */
    uint64_t lag_max_ns;        /* worst oldest-event lag seen */
    uint64_t spans_started;
    uint64_t spans_ended;
    uint64_t spans_dropped;     /* span pool exhausted */
    uint64_t spans_open;
    uint64_t registry_full;     /* registry puts refused */
    uint64_t harvester_busy_ns; /* harvester time spent dispatching (not polling idle) */
    uint64_t spans_unsampled;   /* ended in a sampled-out trace: given to no sink */
    /* version 2 */
    uint64_t meta_truncated;    /* string values cut to fit an event (cbt_event_str) */
    /* version 3 */
    uint64_t stream_marks_dropped; /* marks cbt_publish_on_stream accepted (CBT_OK)
                                      and lost afterwards: no room on the queue
                                      when the stream reached them (cbt/stream.h) */
    uint64_t sink_spans_lost;   /* spans sinks accepted and will never deliver
                                   (a failed write or export, a full exporter
                                   queue): the sum of cbt_sink.spans_lost */
    uint64_t harvester_wakeups; /* times a publisher woke the harvester from its
                                   idle sleep (the first publish after 100 ms
                                   with nothing to do); 0 in steady state */
    /* version 4: trace recording (cbt_config.trace_level) */
    uint64_t trace_records;     /* records in the trace file (counted as their batch
                                   is written) */
    uint64_t trace_records_dropped; /* records not in it: the recorder's buffer was
                                   full (the disk could not keep up) or their
                                   batch's write failed */
    uint64_t trace_bytes;       /* bytes in the trace file, header included */
    uint64_t trace_write_errors; /* 1 once a write of the trace file failed (nothing is
                                   written after it) */
    /* version 5: the process-wide name table (cbt/names.h) */
    uint64_t names_used;        /* a program's names in it now (not the built-in ones) */
    uint64_t names_capacity;    /* how many it may hold (cbt_config.names_capacity) */
    uint64_t names_refused;     /* cbt_intern calls refused since cbt_init: the table
                                   was full. The Python package drops the value (or
                                   span attribute) whose key was refused, and
                                   publishes the event without it: one each */
    /* version 6: the process-wide array store (cbt/array.h); since the
     * process began, not since cbt_init: the store outlives tracers */
    uint64_t arrays_capacity;   /* its bytes (0 before the first cbt_init) */
    uint64_t arrays_used;       /* bytes its live arrays take now (4 KiB chunks) */
    uint64_t arrays_stored;     /* array values copied into it */
    uint64_t arrays_dropped;    /* array values dropped: no room, or a NULL string
                                   element; the event went out without them */
} cbt_metrics;
#define CBT_METRICS_VERSION 6u
#define cbt_metrics_version_ CBT_METRICS_VERSION /* for CBT_STRUCT_INIT */
CBT_ASSERT_NO_TAIL_PADDING_(cbt_metrics, arrays_dropped);

#ifdef CBT_DISABLE
/* ==== CBT_DISABLE: the calls below compile to no-ops (see the top) ======== */
static inline cbt_status cbt_config_default_into(cbt_config *c)
{
    if (!c)
        return CBT_ERR_INVAL;
    if (c->size < 8)
        return CBT_ERR_VERSION;
    cbt_config d;
    cbt_config_defaults_(&d); /* the one list, above */
    d.enabled = false; /* the one difference: there is no tracer to install */
    /* the fields after the header, at most c->size bytes (the rule above) */
    memcpy((char *)c + 8, (const char *)&d + 8, (c->size < sizeof d ? c->size : sizeof d) - 8);
    return c->size > sizeof d ? CBT_ERR_VERSION : CBT_OK;
}
static inline cbt_status cbt_init(const cbt_config *cfg)
{
    (void)cfg;
    return CBT_OK;
}
static inline cbt_status cbt_shutdown(void) { return CBT_OK; }
static inline cbt_status cbt_shutdown_final(cbt_metrics *out)
{
    if (out) { /* all zero, written in full, as cbt_metrics_get's stub */
        memset(out, 0, sizeof *out);
        out->version = CBT_METRICS_VERSION;
        out->size = (uint32_t)sizeof *out;
    }
    return CBT_OK;
}
static inline cbt_tracer *cbt_tracer_get(void) { return NULL; }
static inline cbt_status cbt_add_subscriber(const cbt_subscriber *sub)
{
    (void)sub; /* never called, never destroyed */
    return CBT_OK;
}
static inline cbt_status cbt_add_sink(const cbt_sink *sink)
{
    (void)sink; /* never called, never destroyed */
    return CBT_OK;
}
static inline cbt_status cbt_flush(uint32_t timeout_ms)
{
    (void)timeout_ms;
    return CBT_OK;
}
static inline cbt_status cbt_metrics_get(cbt_metrics *out)
{
    if (out) { /* all zero, written in full (the out-struct rule, above) */
        memset(out, 0, sizeof *out);
        out->version = CBT_METRICS_VERSION;
        out->size = (uint32_t)sizeof *out;
    }
    return CBT_OK;
}
static inline cbt_status cbt_tracer_publish(cbt_tracer *t, const cbt_event *ev)
{
    (void)t, (void)ev;
    return CBT_OK;
}
static inline cbt_status cbt_publish_checked(const cbt_event *ev)
{
    (void)ev;
    return CBT_OK;
}
static inline bool cbt_enabled(void) { return false; }
static inline cbt_status cbt_publish(const cbt_event *ev)
{
    (void)ev;
    return CBT_OK;
}
#else /* the calls */

/* The entry point of cbt_config_default() (below): cbt's defaults into the
 * fields of *c, at most c->size bytes; version and size stay the caller's
 * ("versioned structs", above). */
CBT_API cbt_status cbt_config_default_into(cbt_config *c);

/* Create the process-wide tracer and start its harvester thread. `cfg` NULL
 * means defaults. CBT_ERR_ALREADY if a tracer exists; CBT_ERR_INVAL for a bad
 * field: cbt_last_error() names it, its value and the rule it breaks, and
 * cbt_last_error_field() is its name (the same line goes to stderr);
 * CBT_ERR_VERSION for a config from a newer cbt ("versioned structs", above);
 * CBT_ERR_NOMEM / CBT_ERR_THREAD / CBT_ERR_IO. With cfg->enabled false,
 * returns CBT_OK (having checked the fields) and every call stays a no-op.
 * Waits for the clock calibration (10 ms) and opening the span file. */
CBT_API cbt_status cbt_init(const cbt_config *cfg);

/* Stop the harvester after draining the queue and pending stream marks (at
 * most shutdown_timeout_ms), end open spans as incomplete, flush every sink
 * once more, destroy the sinks and subscribers, free everything.
 * Idempotent. What is lost on the way (spans a sink could not deliver,
 * dropped by the OTLP exporter's last export) is counted in figures that
 * die with the tracer: cbt_shutdown_final keeps them. */
CBT_API cbt_status cbt_shutdown(void);

/* cbt_shutdown, and the tracer's final self-metrics into *out (NULL: none
 * wanted): as they stand after the harvester stopped, open spans were ended
 * and every sink was flushed for the last time, sink_spans_lost asked of
 * each sink after that flush and before its destroy. The OTLP exporter's
 * final flush waits for its last export (cbt/otlp.h); its own final counts
 * go to cbt_otlp_config.final_stats. The out-struct rule of
 * cbt_metrics_get: CBT_ERR_VERSION when out->size is smaller than the
 * header, and then nothing is shut down; CBT_ERR_NOT_INITIALIZED, *out
 * untouched, without a tracer (nothing to shut down). With out NULL it is
 * cbt_shutdown(). */
CBT_API cbt_status cbt_shutdown_final(cbt_metrics *out);

/* The process-wide tracer, or NULL. */
CBT_API cbt_tracer *cbt_tracer_get(void);

/* Add a subscriber / sink (copied). May be called while running; takes
 * effect for events dispatched afterwards. At most 16 of each. Waits only
 * for another thread adding one. A sink that is not CBT_SINK_NONBLOCKING
 * gets a thread of its own (cbt/span.h): CBT_ERR_THREAD if it cannot. */
CBT_API cbt_status cbt_add_subscriber(const cbt_subscriber *sub);
CBT_API cbt_status cbt_add_sink(const cbt_sink *sink);

/* Wait until every event published before this call has been dispatched,
 * every pending stream mark has resolved, and sinks are flushed; at most
 * `timeout_ms` (CBT_ERR_TIMEOUT), whatever a sink is doing: a sink stalled
 * on a write makes this return CBT_ERR_TIMEOUT at the bound, and a sink that
 * gives up by its own bound first (an exporter's timeout) counts a sink
 * error. Takes no lock the harvester holds for its work. Call
 * cbt_stream_sync() first for streams. */
CBT_API cbt_status cbt_flush(uint32_t timeout_ms);

/* The self-metrics (cbt_metrics, above) as of now: relaxed reads of
 * counters, never waits behind the harvester or a sink (a few hundred ns;
 * each sink's spans_lost reads a counter, a sink thread's under its own
 * mutex, which is only ever held for a copy, never across a write). CBT_ERR_INVAL for NULL; CBT_ERR_VERSION when out->size
 * is smaller than the header (set version and size: CBT_STRUCT_INIT);
 * CBT_ERR_NOT_INITIALIZED without a tracer. */
CBT_API cbt_status cbt_metrics_get(cbt_metrics *out);

/* ---- publishing ------------------------------------------------------------ */

/* Publish through an explicit tracer (what cbt_publish calls). */
CBT_API cbt_status cbt_tracer_publish(cbt_tracer *t, const cbt_event *ev);
/* Out-of-line cbt_publish, for C++ and FFI callers. */
CBT_API cbt_status cbt_publish_checked(const cbt_event *ev);

#if !defined(__cplusplus)
#include <stdatomic.h>
/* The process-wide tracer. Written only by cbt_init/cbt_shutdown. */
extern CBT_API _Atomic(cbt_tracer *) cbt_active_tracer_;

/* True when a tracer is installed. One load. */
static inline bool cbt_enabled(void)
{
    return atomic_load_explicit(&cbt_active_tracer_, memory_order_acquire) != NULL;
}

/* Stamp `ev` now and enqueue it for the harvester. CPU-synchronous, never
 * blocks, never allocates. Errors: CBT_ERR_FULL (queue full: dropped and
 * counted), CBT_ERR_UNKNOWN_EVENT, CBT_ERR_SESSION_TOO_LONG (refused and
 * counted). With no tracer: CBT_OK after one branch. */
static inline cbt_status cbt_publish(const cbt_event *ev)
{
    cbt_tracer *t = atomic_load_explicit(&cbt_active_tracer_, memory_order_acquire);
    if (__builtin_expect(t == NULL, 0))
        return CBT_OK;
    return cbt_tracer_publish(t, ev);
}
#else
static inline bool cbt_enabled(void) { return cbt_tracer_get() != NULL; }
static inline cbt_status cbt_publish(const cbt_event *ev) { return cbt_publish_checked(ev); }
#endif

#endif /* CBT_DISABLE */

/* Defaults: enabled, MP subscriber on, a 65536-cell shared queue (4.5 MiB:
 * 21845 3-cell events), 131072-cell lanes (8 MiB: 43690 such events, about
 * 24 ms of MP requests at 1 M spans/s) for up to 64 threads (512 MiB of
 * zeroed address space reserved at init; resident as a thread publishes,
 * the harvester faulting in 1 MiB ahead of it: at most 8 MiB per thread),
 * 65536-record rings (mapped
 * placement), 8192 spans,
 * 16384 registry entries, 4096 sessions, a 10 ms nap while busy, a 1 s
 * idle sleep (250 ms while a ring exists), 2000 ms shutdown bound: the list
 * is cbt_config_defaults_ (above). Inline, so that only this header's sizeof
 * is written (cbt_config_default_into). */
static inline cbt_config cbt_config_default(void)
{
    cbt_config c;
    memset(&c, 0, sizeof c);
    c.version = CBT_CONFIG_VERSION;
    c.size = (uint32_t)sizeof c;
    (void)cbt_config_default_into(&c); /* a newer header than libcbt: cbt_init refuses c */
    return c;
}

#ifdef __cplusplus
}
#endif
/* The rest of the public API (each of these includes cbt.h itself). */
#include "cbt/array.h"
#include "cbt/blend_metrics.h"
#include "cbt/cb.h"
#include "cbt/context.h"
#include "cbt/cupti.h"
#include "cbt/pspan.h"
#include "cbt/nvtx.h"
#include "cbt/otlp.h"
#include "cbt/replay.h"
#include "cbt/trace_file.h"
#include "cbt/tree.h"

#endif /* CBT_H */
