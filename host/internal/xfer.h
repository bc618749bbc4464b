/* host/internal/xfer.h — the transfer-phase spans (host/builders/transfer_phase.c):
 * LMCache 0.5.6's `transfer.kernel_interval` and `transfer.staging`, the
 * per-phase breakdown of one store or retrieve, as children of its
 * `mp.store` / `mp.retrieve` span. Internal: the MP span builder feeds it.
 *
 * The rules are those of LMCache 0.5.6's TransferPhaseTracingSubscriber
 * (docs/lmcache-0.5.6.md §2.4):
 *   - MP_STORE_START / MP_RETRIEVE_START with a transfer key and a session
 *     capture the span just opened for it (cbt_xfer_capture). The key
 *     names the transfer from then on; a second capture of a key replaces
 *     the first.
 *   - The matching END marks the transfer ended (cbt_xfer_ended).
 *   - Samples (one MP_TRANSFER_PHASE_SAMPLES event each, below) fold into
 *     per-phase totals of their transfer: elapsed summed, nbytes summed,
 *     num_steps = samples, the earliest start and the latest end; the
 *     transfer's device_index is the last sample's. A sample is skipped
 *     (samples_skipped) when start <= 0, end < start, a time or elapsed_ms
 *     is not finite (LMCache lets NaN through), its phase or direction is
 *     unknown, its direction is not its transfer's (D2H = 1 under a store,
 *     H2D = 0 under a retrieve) or a value has the wrong type; one whose key
 *     was never captured counts as unknown_key.
 *   - At the end of a samples batch every transfer the batch named (by a
 *     sample that folded in, or by ended_transfer_key) that has ended emits
 *     its spans and is forgotten.
 *   - Emission: one span per phase seen, ordered by earliest start (ties:
 *     the phase seen first), stacked back to back from the earliest start,
 *     each lasting the sum of its elapsed; start/end are the seconds times
 *     1e9, truncated, as LMCache does. Attributes, typed: session_id (str),
 *     device_index, num_steps, nbytes (int), elapsed_seconds, first_start_s,
 *     last_end_s (double); staging with elapsed > 0 also
 *     throughput_GB_per_second = nbytes / elapsed / 1e9. Kind INTERNAL.
 *   - A captured transfer is dropped (parents_expired) once an event more
 *     than the TTL after its capture arrives (cbt uses event times where
 *     LMCache uses its monotonic clock). Checked on every END and samples
 *     event, scanning the table only when the oldest capture may have
 *     expired.
 *   - Shutdown emits every transfer still held, ended or not, as LMCache
 *     does; the spans of one whose END never came are flagged
 *     CBT_SPANF_INCOMPLETE (its totals may be partial).
 *
 * Bounds: at most max_transfers captured transfers (a capture that finds
 * the table full, after dropping what has expired, is refused:
 * parents_full). Transfer keys of any length: up to CBT_SESSION_MAX - 1
 * bytes they are the table's key, longer ones are keyed by a 128-bit hash
 * of the whole key. The table and a list of the transfers the current
 * batch named (32; past it the batch end scans the table) are allocated at
 * create; nothing after. Harvester thread only; the stats may be read from
 * any thread.
 */
#ifndef CBT_HOST_INTERNAL_XFER_H
#define CBT_HOST_INTERNAL_XFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cbt/event.h"
#include "cbt/span.h"
#include "cbt/status.h"

typedef struct cbt_xfer cbt_xfer;

/* Directions and phases, as LMCache 0.5.6 numbers them
 * (lmcache_native.TransferDirection, platform/ops_types.TransferPhase). */
#define CBT_XFER_H2D 0     /* retrieve */
#define CBT_XFER_D2H 1     /* store */
#define CBT_XFER_KERNEL 0  /* transfer.kernel_interval */
#define CBT_XFER_STAGING 1 /* transfer.staging */

typedef struct cbt_xfer_stats {
    uint64_t spans;           /* phase spans emitted (started: the pool had room) */
    uint64_t samples;         /* samples folded into a transfer */
    uint64_t samples_skipped; /* samples refused by the rules above */
    uint64_t parents_expired; /* captured transfers dropped by the TTL */
    uint64_t parents_full;    /* captures refused: the table was full */
    uint64_t unknown_key;     /* samples whose transfer key was never captured */
} cbt_xfer_stats;

/* One sample, LMCache's 8-tuple (phase, direction, device_index,
 * elapsed_ms, nbytes, transfer_key, start_time_s, end_time_s). */
typedef struct cbt_xfer_sample {
    int64_t phase;        /* CBT_XFER_KERNEL / CBT_XFER_STAGING */
    int64_t direction;    /* CBT_XFER_H2D / CBT_XFER_D2H */
    int64_t device_index; /* used when has_device_index */
    bool has_device_index;
    double elapsed_ms;
    int64_t nbytes;
    const char *key; /* the transfer key, key_len bytes */
    size_t key_len;
    double start_s, end_s; /* unix seconds */
} cbt_xfer_sample;

/* A transfer table of max_transfers entries (0: 4096; more than 2^22:
 * CBT_ERR_INVAL) and a TTL (0: 120 s). CBT_ERR_NOMEM. */
cbt_status cbt_xfer_create(uint32_t max_transfers, uint64_t ttl_ns, cbt_xfer **out);
/* Free everything (emits nothing: call cbt_xfer_shutdown first). NULL is fine. */
void cbt_xfer_destroy(cbt_xfer *x);

/* MP_STORE_START (direction CBT_XFER_D2H) or MP_RETRIEVE_START
 * (CBT_XFER_H2D) carried transfer key `key`: the phase spans of that
 * transfer become children of `parent` (the mp.store / mp.retrieve span),
 * with session_id `session`. `ts_ns` is the START's time (the TTL runs from
 * it). Ignored without a key, a session (at most CBT_SESSION_MAX - 1 bytes
 * are kept), a valid parent or a known direction. */
void cbt_xfer_capture(cbt_xfer *x, const char *key, size_t key_len, const cbt_span_ctx *parent,
                      int direction, const char *session, size_t session_len, uint64_t ts_ns);

/* The END of the transfer named `key` arrived at `ts_ns`. */
void cbt_xfer_ended(cbt_xfer *x, const char *key, size_t key_len, uint64_t ts_ns);

/* One CBT_EV_MP_TRANSFER_PHASE_SAMPLES event. With a `phase` value it is
 * one sample: phase (int), direction (int), transfer_key (str),
 * start_time_s, end_time_s, elapsed_ms (int or double) are required;
 * nbytes (int; absent: 0) and device_index (int; absent: the transfer's
 * stays) may be left out, because an event holds CBT_EVENT_META_MAX values
 * and LMCache's tuple has 8; a value of the wrong type skips the sample.
 * Without `phase` it ends a batch: ended_transfer_key (str, possibly empty
 * or absent) names one more transfer, and the ended transfers the batch
 * named emit their spans on `t`. LMCache publishes one event holding a list
 * of samples plus ended_transfer_key; cbt's bridge splits it into one event
 * per sample followed by the batch end. CBT_ERR_INVAL for NULL or another
 * event type; a skipped sample is counted, not an error. */
cbt_status cbt_xfer_on_event(cbt_xfer *x, cbt_tracer *t, const cbt_event *ev);

/* The two halves of cbt_xfer_on_event, for callers that hold the values
 * already: fold one sample in (the TTL checked at `now_ns`), end a batch. */
void cbt_xfer_add_sample(cbt_xfer *x, const cbt_xfer_sample *s, uint64_t now_ns);
void cbt_xfer_batch_end(cbt_xfer *x, cbt_tracer *t, const char *ended_key, size_t ended_len,
                        uint64_t now_ns);

/* Emit the spans of every transfer still held and forget them all. */
void cbt_xfer_shutdown(cbt_xfer *x, cbt_tracer *t);

/* A snapshot of the counters (zero for NULL). */
void cbt_xfer_stats_get(const cbt_xfer *x, cbt_xfer_stats *out);

/* Transfers held now. */
uint32_t cbt_xfer_count(const cbt_xfer *x);

#endif /* CBT_HOST_INTERNAL_XFER_H */
