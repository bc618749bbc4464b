/* cbt/nvtx.h — cbt's spans as NVTX ranges, for Nsight Systems.
 *
 * Ranges are emitted on the publishing thread at the moment of the publish
 * (a hook on the publish path): a START event opens a range
 * (nvtxDomainRangeStartEx in domain "cbt", the span name as a registered
 * string, a category per family: mp, cb, kernel), the matching END closes
 * it (nvtxDomainRangeEnd; start and end may be on different threads). The
 * range's message is "<span name> <session id>" and its 64-bit payload the
 * range id, which the START event also carries as the span attribute
 * nvtx.range_id: from a span in Jaeger to the same range in Nsight.
 * Without an NVTX tool attached every call is a no-op (NVTX's own rule).
 *
 * What it adds to a publish: the tool's own call (nvtxDomainRangeStartEx,
 * nvtxDomainRangeEnd or nvtxDomainMarkEx, whatever the tool makes of it)
 * and, for a START or END, a few atomics on a table of open ranges (a CAS
 * to claim or release a slot, a short scan for the END's match). cbt takes
 * no lock there and never waits for another publishing thread: one stalled
 * inside the tool, or preempted halfway, holds no other publish up. Names
 * are registered with the tool at enable (a type registered later: by the
 * first thread to mark it, the others meanwhile sending its name as ASCII).
 * At most 4096 ranges are open at once; a START beyond that opens none
 * (counted).
 *
 * CBT_DISABLE (defined before the first cbt include): cbt_nvtx_enable() is
 * a static inline returning CBT_OK, referencing no cbt (or NVTX) symbol.
 */
#ifndef CBT_NVTX_H
#define CBT_NVTX_H

#include "cbt/api.h"
#include "cbt.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef CBT_DISABLE
/* ==== CBT_DISABLE: the call below compiles to a no-op (see the top) ======= */
static inline cbt_status cbt_nvtx_enable(void) { return CBT_OK; }
#else /* the calls */

/* Install the NVTX hook on the running tracer, creating the domain and
 * registering the span and event type names with the tool (once per
 * process; takes a lock, calls the tool). CBT_ERR_NOT_INITIALIZED without
 * one; CBT_ERR_UNSUPPORTED in builds without NVTX. Call before the first
 * publish. */
CBT_API cbt_status cbt_nvtx_enable(void);

#endif /* CBT_DISABLE */

#ifdef __cplusplus
}
#endif
#endif /* CBT_NVTX_H */
