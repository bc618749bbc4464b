/* exporter/nvtx_none.c — owns cbt_nvtx_enable in builds without NVTX
 * (CBT_WITH_NVTX off, or no nvtx3 headers found): always unsupported. */
#include "cbt/nvtx.h"

cbt_status cbt_nvtx_enable(void) { return CBT_ERR_UNSUPPORTED; }
