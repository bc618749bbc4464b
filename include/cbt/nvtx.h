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

/* Install the NVTX hook on the running tracer. CBT_ERR_NOT_INITIALIZED
 * without one; CBT_ERR_UNSUPPORTED in builds without NVTX. Call before the
 * first publish. */
CBT_API cbt_status cbt_nvtx_enable(void);

#endif /* CBT_DISABLE */

#ifdef __cplusplus
}
#endif
#endif /* CBT_NVTX_H */
