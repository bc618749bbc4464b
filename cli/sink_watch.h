/* cli/sink_watch.h — a sink's final losses, kept past its destroy.
 *
 * The tracer destroys its sinks in cbt_shutdown, and a sink's spans_lost
 * goes with it; cbt_shutdown_final gives only the sum over all sinks. The
 * demo must say which of its files lost what, so it hands the tracer a
 * wrapper (sink_watch_wrap) that passes every call through and, in
 * destroy, reads the wrapped sink's spans_lost after its last flush and
 * before destroying it. The caller owns the sink_watch and reads `lost`
 * after cbt_shutdown returns.
 */
#ifndef CBT_CLI_SINK_WATCH_H
#define CBT_CLI_SINK_WATCH_H

#include <stdint.h>

#include "cbt.h"

typedef struct sink_watch {
    cbt_sink inner;  /* the wrapped sink (a copy) */
    uint64_t lost;   /* its spans_lost at destroy (0 before) */
    int destroyed;   /* destroy has run: `lost` is final */
} sink_watch;

/* Fill *out with a sink that forwards to *inner and records into *w (which
 * must outlive the tracer's use of *out, i.e. until cbt_shutdown returns). */
void sink_watch_wrap(sink_watch *w, const cbt_sink *inner, cbt_sink *out);

#endif /* CBT_CLI_SINK_WATCH_H */
