/* cbt/trace_file.h — the trace file: Chrome trace-event JSON that
 * ui.perfetto.dev and chrome://tracing open, needing no backend.
 *
 * One object {"traceEvents": [...]} written incrementally: every finished
 * span as a complete ("X") event with its attributes in args, on a lane per
 * request (host spans) or per kernel op (GPU spans); per-CTA kernel records
 * as "X" events on one lane per SM under a "GPU SMs" process; lane names as
 * metadata events. The file is valid JSON once the sink is destroyed
 * (cbt_shutdown) or flushed.
 */
#ifndef CBT_TRACE_FILE_H
#define CBT_TRACE_FILE_H

#include "cbt.h"

#ifdef __cplusplus
extern "C" {
#endif

cbt_status cbt_trace_file_sink_create(const char *path, cbt_sink *sink_out);

#ifdef __cplusplus
}
#endif
#endif /* CBT_TRACE_FILE_H */
