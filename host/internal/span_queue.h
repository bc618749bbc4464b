/* host/internal/span_queue.h — a byte ring of compact span records: what the
 * OTLP/HTTP exporter queues between the harvester (on_span) and its own
 * thread, and what a sink thread (host/spans/sink_thread.c) queues for the
 * sink it runs.
 *
 * A record holds only the used part of a cbt_span: its fixed head (every
 * field before `attrs`), the n_attrs attributes in use, the n_events span
 * events in use and the string bytes the attributes reference (arena_used,
 * or further when an attribute points past it), rounded up to 8 bytes,
 * after an 8-byte record header. An MP span is a few hundred bytes of record
 * against sizeof(cbt_span) = 2704; the largest record is
 * CBT_SPANQ_RECORD_MAX. Reading a record expands it back into a cbt_span
 * whose used parts are exactly the original's; the unused attribute,
 * event and arena entries are left as they were in that cbt_span (the
 * encoders never read them).
 *
 * A span with array attributes (CBT_SPANF_ARRAYS) is pushed with one
 * reference to each array (host/internal/arrays.h), let go by the release.
 *
 * Positions are running 64-bit byte counts (they never wrap); a record
 * never straddles the ring's end: one that does not fit before it is put at
 * the start, and the bytes left before the end are one skip record.
 *
 * Threads: none of its own, no lock of its own. The owner pushes under
 * its lock (one writer) and releases under the same lock; it reads records
 * below a tail it saw under that lock without holding it, since a push
 * only writes the free bytes in [tail, head + size) and head moves only by
 * release, after the reader is done. Memory: `size` bytes, allocated at
 * init, never grown.
 */
#ifndef CBT_EXPORTER_SPAN_QUEUE_H
#define CBT_EXPORTER_SPAN_QUEUE_H

#include <stddef.h>
#include <stdint.h>

#include "cbt/span.h"
#include "cbt/status.h"

/* The record header and the largest record (a span with every attribute,
 * event and arena byte in use). */
#define CBT_SPANQ_HEADER 8u
#define CBT_SPANQ_RECORD_MAX ((CBT_SPANQ_HEADER + sizeof(cbt_span) + 7u) & ~(size_t)7u)

typedef struct cbt_spanq {
    uint8_t *buf;
    size_t size;   /* bytes, a multiple of 8, at least 2 * CBT_SPANQ_RECORD_MAX */
    uint64_t head; /* position of the oldest record still held */
    uint64_t tail; /* position where the next record goes */
} cbt_spanq;

/* Allocate a ring of at least `bytes` (rounded up to a multiple of 8 and to
 * 2 * CBT_SPANQ_RECORD_MAX, so that any one span always fits an empty ring).
 * CBT_ERR_NOMEM. */
cbt_status cbt_spanq_init(cbt_spanq *q, size_t bytes);
void cbt_spanq_free(cbt_spanq *q);

/* Bytes the record of `s` takes, header included (a multiple of 8). */
size_t cbt_spanq_record_size(const cbt_span *s);

/* Append the record of `s`: 1, or 0 (nothing written) when the free bytes
 * cannot hold it. Cost: a copy of the record's bytes. */
int cbt_spanq_push(cbt_spanq *q, const cbt_span *s);

/* Expand the record at `pos` (a position returned by a read, or head) into
 * *out, passing over a skip record first; returns the position after it.
 * `pos` must be below tail. */
uint64_t cbt_spanq_read(const cbt_spanq *q, uint64_t pos, cbt_span *out);

/* The position after the record at `pos`, reading only its header. */
uint64_t cbt_spanq_next(const cbt_spanq *q, uint64_t pos);

/* Forget every record below `pos` (a record boundary): its bytes are free
 * again, and the array references a record of a span with arrays holds
 * (cbt_spanq_push took them) are let go. Cost: a header read per record. */
void cbt_spanq_release(cbt_spanq *q, uint64_t pos);

/* Bytes held (records, skips and padding). */
static inline size_t cbt_spanq_used(const cbt_spanq *q) { return (size_t)(q->tail - q->head); }

#endif /* CBT_EXPORTER_SPAN_QUEUE_H */
