/* host/internal/publish_hook.h — the one tracer internal an exporter may use:
 * a hook on the publishing path (exporter/nvtx.c installs it).
 *
 * The hook is called with a copy of each event, on the publishing thread, at
 * the moment of cbt_publish / cbt_publish_on_stream, before the event is
 * enqueued; it may add metadata to the copy. Without a hook the publishing
 * path pays one predicted branch. Owned by host/core/tracer.c.
 */
#ifndef CBT_HOST_INTERNAL_PUBLISH_HOOK_H
#define CBT_HOST_INTERNAL_PUBLISH_HOOK_H

#include <stdint.h>

#include "cbt.h"

/* on_stream: 1 for cbt_publish_on_stream (and pspans on a stream), else 0. */
typedef void (*cbt_publish_hook)(void *ctx, cbt_event *ev, int on_stream);

/* Install `fn` (with `ctx`) on tracer `t`. Call only while no thread
 * publishes into `t` (between cbt_init and the first publish): the hook is
 * read without synchronisation on the publishing path. CBT_ERR_ALREADY when
 * `t` has a hook already, CBT_ERR_INVAL for a NULL `t` or `fn`. */
cbt_status cbt_publish_hook_install_(cbt_tracer *t, cbt_publish_hook fn, void *ctx);

/* The generation of tracer `t`: process-unique, never reused, so state kept
 * for one tracer can tell a later tracer from it. */
uint64_t cbt_tracer_generation_(const cbt_tracer *t);

#endif /* CBT_HOST_INTERNAL_PUBLISH_HOOK_H */
