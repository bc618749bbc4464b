/* cbt/replay.h — trace recording at level "gpu", and replaying a recorded
 * file into the same spans on any machine (docs/recording.md).
 *
 * Recording. With cbt_config.trace_level "gpu" (or CBT_TRACE_LEVEL=gpu),
 * the harvester records everything its span builders consume, in the order
 * they consume it, into an LMCT file (cbt/lmct.h; LMCache's own TraceReader
 * reads it): every dispatched event with its resolved time, every kernel
 * ring record, the clock calibrations that turn device times into unix ns,
 * the harvester's round times, the shutdown; the header carries the
 * configuration that shapes spans (its JSON and SHA-256 digest), cbt's
 * version and the span-id generator's seed. The publishing path pays
 * nothing; the harvester copies each record into a bounded buffer that a
 * writer thread encodes and writes. When the disk cannot keep up, records
 * are dropped and counted (cbt_metrics.trace_records_dropped), never
 * waited for. cbt_shutdown() (and SIGTERM in the `cbt` command) closes the
 * file cleanly; after a crash every complete frame still reads.
 *
 * Replay. A replay tracer (cbt_config.replay) has no harvester thread and
 * takes no live events; cbt_replay_run() feeds it a recorded file on the
 * calling thread, through the same builders and into whatever sinks and
 * subscribers the caller added, and so produces the spans of the live run:
 * the same names, parents, attributes, times and trace and span ids.
 *
 *   cbt_replay *r;   cbt_replay_open("run.lct", &opts, &r);
 *   cbt_config c = cbt_config_default();   cbt_replay_config(r, &c);
 *   cbt_init(&c);   cbt_replay_add_builders(r);   cbt_add_sink(&mine);
 *   cbt_replay_stats st = CBT_STRUCT_INIT(cbt_replay_stats);
 *   cbt_replay_run(r, &st);   cbt_shutdown();   cbt_replay_close(r);
 *
 * Built without msgpack-c (CBT_HAVE_MSGPACK 0), every call here returns
 * CBT_ERR_UNSUPPORTED, and so does cbt_init with a trace level.
 *
 * CBT_DISABLE: every call returns CBT_OK having done nothing: *out NULL,
 * out-structs zeroed (version and size kept), cbt_replay_message() "".
 */
#ifndef CBT_REPLAY_H
#define CBT_REPLAY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cbt/api.h"
#include "cbt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cbt_config;

/* How a replay runs. Start from cbt_replay_options_default(). */
typedef struct cbt_replay_options {
    uint32_t version, size; /* CBT_REPLAY_OPTIONS_VERSION, sizeof(cbt_replay_options) */
    bool force;             /* replay despite a cbt version or config digest mismatch
                               (said on `log` all the same) */
    uint8_t reserved[3];    /* zero */
    /* 0: as fast as possible (the default). N > 0: paced at N times the
     * recorded rate (1 = as recorded), by the harvester's recorded times
     * (a pause longer than 10 s is cut to 10 s). The spans are the same
     * either way: their times are the recorded ones. */
    double speed;
    FILE *log;              /* warnings and mismatches; NULL: stderr */
    FILE *progress;         /* a progress line about once a second; NULL: none */
    /* Asked between batches of records (and every 100 ms of a paced wait),
     * on the replaying thread: nonzero stops the replay there
     * (cbt_replay_run returns CBT_ERR_STOPPED; what was replayed stands).
     * NULL: never. */
    int (*stop)(void *ctx);
    void *stop_ctx;
} cbt_replay_options;
#define CBT_REPLAY_OPTIONS_VERSION 1u
CBT_ASSERT_NO_TAIL_PADDING_(cbt_replay_options, stop_ctx);

/* What a replay did. CBT_STRUCT_INIT(cbt_replay_stats) before the call. */
typedef struct cbt_replay_stats {
    uint32_t version, size;
    uint64_t records;         /* records read, every kind */
    uint64_t events;          /* events dispatched to the subscribers */
    uint64_t ring_records;    /* kernel ring records applied */
    uint64_t clock_records;   /* clock calibrations applied */
    uint64_t unknown_skipped; /* records of a qualname this build does not know: skipped */
    uint64_t malformed_skipped; /* records whose arguments this build cannot take: skipped */
    uint64_t bytes;           /* bytes of the file read */
    uint32_t truncated;       /* 1: the file ended inside a frame (a warning) */
    uint32_t shutdown_seen;   /* 1: the recording was closed by a shutdown */
    uint64_t gaps;            /* cbt.gap records: places where the recorder dropped
                                 records (its buffer was full); the replay is not exact */
    uint64_t gap_records;     /* the records they say were dropped */
} cbt_replay_stats;
#define CBT_REPLAY_STATS_VERSION 1u
#define cbt_replay_stats_version_ CBT_REPLAY_STATS_VERSION /* for CBT_STRUCT_INIT */
CBT_ASSERT_NO_TAIL_PADDING_(cbt_replay_stats, gap_records);

typedef struct cbt_replay cbt_replay;

#ifdef CBT_DISABLE
static inline cbt_status cbt_replay_options_default_into(cbt_replay_options *o)
{
    if (!o)
        return CBT_ERR_INVAL;
    uint32_t v = o->version, s = o->size;
    memset(o, 0, s < sizeof *o ? s : sizeof *o);
    o->version = v;
    o->size = s;
    return CBT_OK;
}
static inline cbt_status cbt_replay_open(const char *path, const cbt_replay_options *o,
                                         cbt_replay **out)
{
    (void)path, (void)o;
    if (out)
        *out = NULL;
    return CBT_OK;
}
static inline cbt_status cbt_replay_config(const cbt_replay *r, struct cbt_config *c)
{
    (void)r, (void)c;
    return CBT_OK;
}
static inline cbt_status cbt_replay_add_builders(const cbt_replay *r)
{
    (void)r;
    return CBT_OK;
}
static inline cbt_status cbt_replay_run(cbt_replay *r, cbt_replay_stats *st)
{
    (void)r;
    if (st && st->size >= 8) {
        uint32_t v = st->version, s = st->size;
        memset(st, 0, s < sizeof *st ? s : sizeof *st);
        st->version = v;
        st->size = s < sizeof *st ? s : (uint32_t)sizeof *st;
    }
    return CBT_OK;
}
static inline const char *cbt_replay_message(const cbt_replay *r)
{
    (void)r;
    return "";
}
static inline const char *cbt_replay_header_json(const cbt_replay *r)
{
    (void)r;
    return "";
}
static inline void cbt_replay_close(cbt_replay *r) { (void)r; }
#else

/* The defaults (force off, as fast as possible, log to stderr, no
 * progress), at most o->size bytes (cbt.h, "versioned structs"). */
CBT_API cbt_status cbt_replay_options_default_into(cbt_replay_options *o);

/* Open a recorded file and check its header: an LMCT file (cbt/lmct.h's
 * statuses for a bad one), level "gpu" and written by cbt, its
 * sm_config_digest the SHA-256 of its sm_config_json, the configuration
 * one this build can rebuild, and the same cbt version. A mismatch of the
 * last three, and a configuration asking for more than 2^20 sessions or
 * registry entries, is CBT_ERR_REPLAY_MISMATCH (said on the log) unless
 * o->force, when it is said and the replay goes on. A file that is not
 * level "gpu" or not cbt's is CBT_ERR_REPLAY_MISMATCH always. On error *out
 * is NULL and cbt_replay_message(NULL) says why (this thread). `o` may be
 * NULL: the defaults. */
CBT_API cbt_status cbt_replay_open(const char *path, const cbt_replay_options *o,
                                   cbt_replay **out);

/* Set the fields of *c that shape spans to the recorded ones (the MP
 * builder and its options, the span pool, the registry, the rings) and
 * c->replay = true, leaving the rest (sinks, the span file) as they are.
 * *c must come from cbt_config_default() (version 4 or later). */
CBT_API cbt_status cbt_replay_config(const cbt_replay *r, struct cbt_config *c);

/* After cbt_init() of a replay tracer: add the builders the recording had
 * that cbt_init does not make (the CacheBlend subscriber), with their
 * recorded options, in their recorded order. */
CBT_API cbt_status cbt_replay_add_builders(const cbt_replay *r);

/* Feed every record of the file into the process-wide tracer, which must be
 * a replay tracer (CBT_ERR_INVAL otherwise; CBT_ERR_NOT_INITIALIZED
 * without one), on this thread, and flush its sinks. A record of a
 * qualname this build does not know, or with arguments it cannot take, is
 * skipped and counted; options.stop returning nonzero ends it with
 * CBT_ERR_STOPPED; a truncated tail ends the replay with
 * CBT_ERR_LMCT_TRUNCATED (a warning: what came before was replayed, *st is
 * filled); another bad frame ends it with its status. The recorded shutdown
 * (if the file has one) ends the open spans as the live run did; spans
 * still open otherwise end at cbt_shutdown(). Call once per cbt_replay. */
CBT_API cbt_status cbt_replay_run(cbt_replay *r, cbt_replay_stats *st);

/* The last error or warning, a sentence; r NULL: the last failed
 * cbt_replay_open on this thread. Never NULL. */
CBT_API const char *cbt_replay_message(const cbt_replay *r);

/* The recorded configuration (the header's sm_config_json). */
CBT_API const char *cbt_replay_header_json(const cbt_replay *r);

/* Close and free. NULL is a no-op. */
CBT_API void cbt_replay_close(cbt_replay *r);

#endif /* CBT_DISABLE */

/* The defaults, compiled with the caller's sizeof (cbt.h). */
static inline cbt_replay_options cbt_replay_options_default(void)
{
    cbt_replay_options o;
    memset(&o, 0, sizeof o);
    o.version = CBT_REPLAY_OPTIONS_VERSION;
    o.size = (uint32_t)sizeof o;
    (void)cbt_replay_options_default_into(&o);
    return o;
}

#ifdef __cplusplus
}
#endif
#endif /* CBT_REPLAY_H */
