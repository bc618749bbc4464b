/* host/device/cupti_none.c — cbt/cupti.h when cbt is built without CUPTI: enabling
 * reports CBT_ERR_UNSUPPORTED, the launch scopes cost a call and do nothing. */
#include <string.h>

#include "cbt/cupti.h"
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
    if (!out)
        return CBT_ERR_INVAL;
    memset(out, 0, sizeof *out);
    return CBT_ERR_UNSUPPORTED;
}

void cbt_cupti_poll_(cbt_tracer *t) { (void)t; }
