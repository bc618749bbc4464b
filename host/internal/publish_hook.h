/* host/internal/publish_hook.h — the tracer internals an exporter may use: a
 * hook on the publishing path (exporter/nvtx.c installs it), the tracer's
 * generation, and the closing tracer's metrics for a sink's last flush
 * (exporter/otlp_http.c). The file keeps the name of its first resident.
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

/* For a sink's last flush, the one cbt_shutdown makes on its own thread
 * (cbt_tracer_get() is NULL by then): the self-metrics of the tracer being
 * shut down, as cbt_metrics_get gave them while it ran, in full (not the
 * out-struct rule). Its harvester has stopped and its open spans were ended,
 * so they are final but for the losses of the sinks' stop. On any other
 * thread, or outside that window, CBT_ERR_NOT_INITIALIZED (tracer.c). */
cbt_status cbt_metrics_closing_(cbt_metrics *out);
/* 1 on the thread of a cbt_shutdown that is flushing and stopping the
 * sinks (its last flush), else 0: how a sink tells the final flush from a
 * cbt_flush that raced the shutdown. One load, never waits (tracer.c). */
int cbt_shutdown_flushing_(void);

#endif /* CBT_HOST_INTERNAL_PUBLISH_HOOK_H */
