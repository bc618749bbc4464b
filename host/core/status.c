/* host/core/status.c — owns cbt_strerror(): one sentence per cbt_status, from
 * cbt/status.h's CBT_STATUS_LIST (the one list of codes); and the per-thread
 * detail of the last failure that said more (cbt_last_error). */
#include <stdio.h>

#include "cbt/status.h"
#include "internal/last_error.h"

/* Each code's place in the list. Its value must equal it: a code inserted
 * before the end, or a value edited, stops the build here rather than
 * renumbering codes (an ABI break). */
enum {
#define PLACE_(name, value, message) PLACE_##name,
    CBT_STATUS_LIST(PLACE_)
#undef PLACE_
};
#define SAME_PLACE_(name, value, message)                \
    _Static_assert((int)CBT_##name == (int)PLACE_##name, \
                   "cbt/status.h: CBT_" #name " is not at its value's place in the list");
CBT_STATUS_LIST(SAME_PLACE_)
#undef SAME_PLACE_

static const char *const k_message[CBT_STATUS_COUNT_] = {
#define MESSAGE_(name, value, message) [CBT_##name] = message,
    CBT_STATUS_LIST(MESSAGE_)
#undef MESSAGE_
};

const char *cbt_strerror(cbt_status st)
{
    if ((unsigned)st < (unsigned)CBT_STATUS_COUNT_)
        return k_message[st];
    return "unknown cbt status code";
}

/* The detail: thread-local, so a call never reads another thread's and no
 * lock is needed. */
static _Thread_local char t_detail[256];
static _Thread_local const char *t_field;

/* A deferred detail (cbt_last_error_defer_): formatted when read. */
static _Thread_local cbt_last_error_fmt_ t_defer_fmt;
static _Thread_local unsigned t_defer_arg;

void cbt_last_error_vset_(const char *field, const char *fmt, va_list ap)
{
    vsnprintf(t_detail, sizeof t_detail, fmt, ap);
    t_field = field;
    t_defer_fmt = NULL;
}

void cbt_last_error_defer_(const char *field, cbt_last_error_fmt_ fmt, unsigned arg)
{
    t_defer_fmt = fmt;
    t_defer_arg = arg;
    t_field = field;
}

void cbt_last_error_set_(const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cbt_last_error_vset_(field, fmt, ap);
    va_end(ap);
}

void cbt_last_error_clear_(void)
{
    t_detail[0] = '\0';
    t_field = NULL;
    t_defer_fmt = NULL;
}

const char *cbt_last_error(void)
{
    if (t_defer_fmt) {
        t_defer_fmt(t_detail, sizeof t_detail, t_defer_arg);
        t_defer_fmt = NULL;
    }
    return t_detail;
}

const char *cbt_last_error_field(void) { return t_field ? t_field : ""; }
