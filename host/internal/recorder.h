/* host/internal/recorder.h — the harvester's side of trace recording
 * (host/record/recorder.c; cbt/replay.h, docs/recording.md), and the
 * replay-side entry points the builders expose (host/record/replay.c).
 *
 * Threads. The harvester is the recorder's only producer: it copies each
 * record into a single-producer ring of 64-byte cells (the event records
 * in record.h's layout, the rest as small fixed payloads) and never waits;
 * a record that does not fit is dropped and counted. The recorder's writer
 * thread is the only consumer: it turns entries into LMCT frames
 * (cbt/lmct.h), batches them and writes whole frames, and stops when
 * cbt_recorder_close_ asks it to, after draining.
 *
 * What goes in, in the order the builders consume it (qualnames in
 * docs/recording.md): the header (lazily, before the first record, so the
 * builders added right after cbt_init are in its configuration), the clock
 * maps at the start, then events as dispatched, ring records as applied,
 * clock refits as they happen, the harvester's round time before the first
 * record of each round, a retry of parked ring records, the shutdown.
 */
#ifndef CBT_HOST_INTERNAL_RECORDER_H
#define CBT_HOST_INTERNAL_RECORDER_H

#include <stdint.h>

#include "cbt.h"
#include "cbt/ring.h"

struct cbt_tracer;
struct cbt_ring;
typedef struct cbt_recorder cbt_recorder;

/* Entry kinds (the first byte of an entry). */
enum {
    CBT_RK_HEADER = 1, /* once, first */
    CBT_RK_EVENT,      /* a dispatched event (record.h layout) */
    CBT_RK_RING,       /* a ring record, as applied */
    CBT_RK_CLOCK,      /* the host clock map */
    CBT_RK_DEVCLOCK,   /* a ring's device clock line */
    CBT_RK_ROUND,      /* the harvester's time for what follows */
    CBT_RK_KPOLL,      /* parked ring records retried */
    CBT_RK_SHUTDOWN,   /* the stop path ends what is open */
    CBT_RK_GAP,        /* entries were dropped here (the buffer was full) */
    CBT_RK_IDS,        /* the span-id generator's state, after spans no record explains */
    /* a dispatched event with array values: a head cell, the event's record,
     * then each array's elements, copied out of the store (recorder.c);
     * larger than a byte of cells can say, so its cells are a u32 */
    CBT_RK_EVENT_ARRAYS,
    CBT_RK_PAD,        /* cells skipped to the ring's end before a large entry */
};

/* Which of the tracer's rings a ring record or device clock is of. */
enum { CBT_RREC_HOST = 0, CBT_RREC_CUDA = 1 };

/* The recorder's counts (cbt_metrics v4), owned by the tracer so that a
 * reader never races the recorder's close. */
typedef struct cbt_rec_counts {
    _Atomic uint64_t records;      /* written to the file */
    _Atomic uint64_t dropped;      /* not in the file: the ring was full, or a write failed */
    _Atomic uint64_t bytes;        /* in the file */
    _Atomic uint64_t write_errors; /* 1 once the file failed (the writer stops there) */
} cbt_rec_counts;

/* Resolve cfg's trace level and output (environment, default path) and, when
 * recording, open the file's writer and start the writer thread: *out NULL
 * when recording is off. CBT_ERR_INVAL (a bad level or buffer size, an output
 * that is not a regular file; named on stderr), CBT_ERR_IO (the file),
 * CBT_ERR_UNSUPPORTED (no msgpack-c), CBT_ERR_NOMEM, CBT_ERR_THREAD. cbt_init,
 * before the harvester starts; `counts` outlives the recorder. */
cbt_status cbt_recorder_open_(const cbt_config *cfg, cbt_rec_counts *counts, cbt_recorder **out);

/* Harvester. Each call copies one record (or drops and counts it). */
void cbt_rec_event_(struct cbt_tracer *t, const cbt_event *ev);
void cbt_rec_ring_(struct cbt_tracer *t, const struct cbt_ring *ring, const cbt_ring_rec *rec);
void cbt_rec_clock_(struct cbt_tracer *t);
void cbt_rec_devclock_(struct cbt_tracer *t, const struct cbt_ring *ring);
void cbt_rec_kpoll_(struct cbt_tracer *t);
void cbt_rec_shutdown_(struct cbt_tracer *t);
/* After spans were started from input that is not recorded (CUPTI activity
 * records): the id generator's state, so a replay's later ids stay the
 * live run's. */
void cbt_rec_ids_(struct cbt_tracer *t);
/* Harvester, once per round that recorded something: wake the writer if it
 * sleeps. */
void cbt_rec_round_end_(struct cbt_tracer *t);
/* The recorder as the harvester's tap (internal/harvest.h): the clock at
 * each refit, the round's end, the shutdown record. cbt_init registers it
 * when it opened a recorder. */
struct cbt_hv_tap;
void cbt_recorder_tap_(struct cbt_tracer *t, struct cbt_hv_tap *out);
/* Whether `s` is one of the builders a replay rebuilds (its span-id draws
 * need no record). */
int cbt_rec_rebuilt_(const cbt_subscriber *s);

/* Stop the writer thread once it has written everything, close the file and
 * free; the counts are final then. NULL is a no-op. cbt_shutdown, after the
 * harvester stopped. */
void cbt_recorder_close_(cbt_recorder *r);

/* The file being written ("" for NULL). */
const char *cbt_recorder_path_(const cbt_recorder *r);

/* Whether the header is in (builders added later are not in it). Harvester
 * or under the tracer's lock. */
int cbt_recorder_started_(const cbt_recorder *r);

/* ---- the configuration that shapes spans (host/record/recorder.c) ----------- */
/* Its JSON (docs/recording.md, "The configuration") into buf (NUL-terminated;
 * returns the length, or 0 when it did not fit). Under t->lock or on the
 * harvester (the subscriber list). */
size_t cbt_rec_config_json_(const struct cbt_tracer *t, char *buf, size_t cap);


/* ---- replay entry points of the builders ------------------------------------ */
/* A ring record read from a file: applied to its launch, or parked (kernel_spans.c). */
void cbt_kspans_replay_ring_(struct cbt_tracer *t, const struct cbt_ring *ring,
                             const cbt_ring_rec *rec);
/* Retry the parked records at the harvester's current time (kernel_spans.c). */
void cbt_kspans_replay_retry_(struct cbt_tracer *t);
/* The stop path, once (harvester.c): end the open kernel launches, call every
 * subscriber's on_shutdown at t->hv_now, flush the sinks. */
void cbt_harvester_finish_(struct cbt_tracer *t);

#endif /* CBT_HOST_INTERNAL_RECORDER_H */
