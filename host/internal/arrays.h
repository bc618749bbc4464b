/* host/internal/arrays.h — the array store's inside (cbt/array.h is its
 * outside): reserving it, moving an event's borrowed arrays into it, and the
 * references events, spans and span queues hold.
 *
 * Ownership. A published event's record owns one reference per array value
 * (cbt_arrays_adopt_ made it); whoever consumes the record lets it go:
 * cbt_dispatch_ after the subscribers (cbt_arrays_release_event_), or the
 * holder that drops it (a full lane, a stream's discarded mark). A span's
 * array attribute owns one; a span queue's record one per array attribute it
 * copies (cbt_arrays_ref_span_ / cbt_arrays_release_span_).
 */
#ifndef CBT_HOST_INTERNAL_ARRAYS_H
#define CBT_HOST_INTERNAL_ARRAYS_H

#include <stdint.h>

#include "cbt/array.h"
#include "cbt/event.h"
#include "cbt/span.h"
#include "cbt/status.h"

/* Reserve the store (process-wide, once; later calls keep the first size):
 * `bytes` rounded to whole chunks, address space only until used.
 * CBT_ERR_NOMEM. Called by cbt_init. */
cbt_status cbt_arrays_reserve_(uint64_t bytes);

/* Copy every borrowed array of `ev` into the store and point its values at
 * the copies; a value already in the store gains a reference. An array that
 * does not fit (or has a NULL string) is dropped and counted. Lock-free,
 * no allocation. Only for events with CBT_EVF_ARRAYS. */
void cbt_arrays_adopt_(cbt_event *ev);

/* Let go of the references an adopted event's values hold. */
void cbt_arrays_release_event_(const cbt_event *ev);

/* One more reference to / let go of one array. handle 0: nothing. */
void cbt_arrays_ref_(uint32_t handle);
void cbt_arrays_unref_(uint32_t handle);

/* Every array attribute of `s` (its events' included) gains / loses one
 * reference: a copy of the span that outlives the original (a span queue's
 * record, a memory sink's copy) holds its own. */
void cbt_arrays_ref_span_(const cbt_span *s);
void cbt_arrays_release_span_(const cbt_span *s);

#endif /* CBT_HOST_INTERNAL_ARRAYS_H */
