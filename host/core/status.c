/* host/core/status.c — owns cbt_strerror(): one sentence per cbt_status, from
 * cbt/status.h's CBT_STATUS_LIST (the one list of codes). */
#include "cbt/status.h"

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
