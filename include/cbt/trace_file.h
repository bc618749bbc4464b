/* cbt/trace_file.h — the trace file: Chrome trace-event JSON that
 * ui.perfetto.dev and chrome://tracing open, needing no backend.
 *
 * One object {"traceEvents": [...]} written incrementally: every finished
 * span as a complete ("X") event with its attributes in args, on a lane per
 * request (host spans), per stream (spans a stream timed: a process per
 * device, a lane per stream for its operations and one for its kernels) or
 * per kernel op (other GPU spans); each span a stream timed joined to its
 * host enqueue (a zero-length slice on its request's lane) by a flow
 * ("s" -> "f", the arrow spanning its queue time); each of its span events
 * right after it as an instant ("i") event on the same lane at the event's
 * time, args = the event's attributes plus "span_id" and "span" (the span's
 * name); per-CTA kernel records
 * as "X" events on one lane per SM under a "GPU SMs" process; lane names as
 * metadata events. The file is valid JSON once the sink is destroyed
 * (cbt_shutdown) or flushed. `path` must be a regular file (the closing
 * "]}" is rewritten in place): anything else is refused with CBT_ERR_IO.
 *
 * Write errors (a full disk): the first failed write is a sink error (the
 * call that met it returns CBT_ERR_IO) and ends the file, whose JSON is cut
 * at an unknown point: every span handed over since the last good flush,
 * and every later one, is counted in the sink's spans_lost (each later
 * on_span returns CBT_ERR_IO: a sink error too).
 *
 * CBT_DISABLE (defined before the first cbt include): the call is a static
 * inline returning CBT_OK with an empty cbt_sink; no file is written and no
 * cbt symbol is referenced.
 */
#ifndef CBT_TRACE_FILE_H
#define CBT_TRACE_FILE_H

#include "cbt/api.h"
#include "cbt.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef CBT_DISABLE
/* ==== CBT_DISABLE: the call below compiles to a no-op (see the top) ======= */
static inline cbt_status cbt_trace_file_sink_create_into(const char *path, cbt_sink *sink_out)
{
    (void)path, (void)sink_out; /* left as the wrapper made it: an empty sink */
    return CBT_OK;
}
#else /* the calls */

/* The entry point of cbt_trace_file_sink_create() (below). */
CBT_API cbt_status cbt_trace_file_sink_create_into(const char *path, cbt_sink *sink_out);

#endif /* CBT_DISABLE */

/* A sink writing the trace file at `path` (add it with cbt_add_sink).
 * Inline, so that only this header's sizeof of cbt_sink is written: *sink_out
 * zeroed, its version and size set, then the _into entry point fills at most
 * that size (cbt.h, "versioned structs"). */
static inline cbt_status cbt_trace_file_sink_create(const char *path, cbt_sink *sink_out)
{
    if (sink_out) {
        memset(sink_out, 0, sizeof *sink_out);
        sink_out->version = CBT_SINK_VERSION;
        sink_out->size = (uint32_t)sizeof *sink_out;
    }
    return cbt_trace_file_sink_create_into(path, sink_out);
}

#ifdef __cplusplus
}
#endif
#endif /* CBT_TRACE_FILE_H */
