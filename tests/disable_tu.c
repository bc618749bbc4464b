/* tests/disable_tu.c — compiled with CBT_DISABLE: every event and publish call
 * in this translation unit must compile to nothing. */
#include "cbt.h"

int disabled_publish_many(int n, cbt_stream *s);
int disabled_enabled(void);

int disabled_publish_many(int n, cbt_stream *s)
{
    int ok = 0;
    for (int i = 0; i < n; i++) {
        cbt_event e;
        if (cbt_event_init(&e, CBT_EV_MP_REQUEST_START, "disabled") == CBT_OK &&
            cbt_event_i64(&e, CBT_N_HIT_TOKENS, i) == CBT_OK && cbt_publish(&e) == CBT_OK &&
            cbt_publish_on_stream(s, &e) == CBT_OK)
            ok++;
    }
    return ok;
}

int disabled_enabled(void) { return cbt_enabled() ? 1 : 0; }
