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
 */
#ifndef CBT_NVTX_H
#define CBT_NVTX_H

#include "cbt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Install the NVTX hook on the running tracer. CBT_ERR_NOT_INITIALIZED
 * without one; CBT_ERR_UNSUPPORTED in builds without NVTX. Call before the
 * first publish. */
cbt_status cbt_nvtx_enable(void);

#ifdef __cplusplus
}
#endif
#endif /* CBT_NVTX_H */
