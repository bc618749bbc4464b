/* host/device/cupti_none.c — cbt/cupti.h when cbt is built without CUPTI: enabling
 * reports CBT_ERR_UNSUPPORTED, the launch scopes cost a call and do nothing. */
#include <string.h>

#include "cbt/cupti.h"
#include "internal/abi.h"
#include "internal/tracer.h"

cbt_status cbt_cupti_enable(void) { return CBT_ERR_UNSUPPORTED; }
cbt_status cbt_cupti_disable(void) { return CBT_ERR_UNSUPPORTED; }
cbt_status cbt_cupti_flush(void) { return CBT_ERR_UNSUPPORTED; }

cbt_status cbt_cupti_launch_scope_begin(uint32_t launch_id)
{
    (void)launch_id;
    return CBT_OK;
}

cbt_status cbt_cupti_launch_scope_end(void) { return CBT_OK; }

cbt_status cbt_cupti_stats_get(cbt_cupti_stats *out)
{
    cbt_status st = cbt_abi_out_check_(out);
    if (st)
        return st;
    cbt_cupti_stats zero; /* cbt_abi_out_ writes the header itself */
    memset(&zero, 0, sizeof zero);
    cbt_abi_out_(out, &zero, sizeof zero, CBT_CUPTI_STATS_VERSION);
    return CBT_ERR_UNSUPPORTED;
}

void cbt_cupti_poll_(cbt_tracer *t) { (void)t; }
void cbt_cupti_periodic_(void) {}
int cbt_cupti_enabled_(void) { return 0; }
