/* internal/end_status.h — the one rule for "this operation failed", read
 * from an END event's metadata (host/builders/end_status.c). Every builder
 * that closes a span on an END (the MP and CB builders, pspans) applies it
 * here, and the CB retrieve-failure metric counts by it, so the rule is
 * written once.
 *
 * An END reports a failure when its metadata holds
 *   - "failed"    a bool, true (cbt's own publishers), or
 *   - "success"   a bool, false (what LMCache 0.5.6 sends), or
 *   - "error" or "exception", a non-empty string.
 * cbt spans carry no status message: the error text stays the string
 * attribute cbt_span_set_from_event copied. Otherwise the status is left
 * as it was (UNSET). Harvester thread only.
 */
#ifndef CBT_INTERNAL_END_STATUS_H
#define CBT_INTERNAL_END_STATUS_H

#include <stdbool.h>

#include "cbt/event.h"
#include "cbt/span.h"

/* True when `ev` (an END) reports a failure, by the rule above. */
bool cbt_end_failed_(const cbt_event *ev);

/* Mark `sp` ERROR when `ev` reports a failure; `sp` may be NULL (an END
 * whose START built no span). Returns cbt_end_failed_(ev). */
bool cbt_end_status_apply_(cbt_span *sp, const cbt_event *ev);

#endif /* CBT_INTERNAL_END_STATUS_H */
