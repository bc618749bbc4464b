/* host/builders/end_status.c — the failure rule of an END event
 * (internal/end_status.h), shared by every span builder. */
#include "internal/end_status.h"

static bool meta_bool_is(const cbt_event *ev, cbt_name key, bool want)
{
    const cbt_meta *m = cbt_event_find(ev, key);
    return m && m->type == CBT_META_BOOL && m->v.b == want;
}

static bool meta_str_nonempty(const cbt_event *ev, cbt_name key)
{
    size_t n = 0; /* a long string lives in the event's area: ask the event */
    return cbt_event_get_str(ev, key, &n) && n > 0;
}

bool cbt_end_failed_(const cbt_event *ev)
{
    return meta_bool_is(ev, CBT_N_FAILED, true) || meta_bool_is(ev, CBT_N_SUCCESS, false) ||
           meta_str_nonempty(ev, CBT_N_ERROR) || meta_str_nonempty(ev, CBT_N_EXCEPTION);
}

bool cbt_end_status_apply_(cbt_span *sp, const cbt_event *ev)
{
    bool failed = cbt_end_failed_(ev);
    if (failed && sp)
        sp->status = CBT_SPAN_STATUS_ERROR;
    return failed;
}
