/* host/core/status.c — owns cbt_strerror(): one sentence per cbt_status. */
#include "cbt/status.h"

const char *cbt_strerror(cbt_status st)
{
    switch (st) {
    case CBT_OK: return "success";
    case CBT_ERR_INVAL: return "invalid argument";
    case CBT_ERR_NOMEM: return "out of memory";
    case CBT_ERR_FULL: return "bounded queue or table is full; the item was dropped and counted";
    case CBT_ERR_SESSION_TOO_LONG: return "session id is longer than CBT_SESSION_MAX - 1 bytes; refused and counted";
    case CBT_ERR_UNKNOWN_EVENT: return "unknown event type";
    case CBT_ERR_META_FULL: return "event already holds CBT_EVENT_META_MAX metadata values";
    case CBT_ERR_META_TOO_LONG: return "string value or name is too long";
    case CBT_ERR_NOT_INITIALIZED: return "no tracer: cbt_init() has not run or tracing is disabled";
    case CBT_ERR_ALREADY: return "already initialised or registered";
    case CBT_ERR_THREAD: return "could not create a thread";
    case CBT_ERR_IO: return "file could not be opened or written";
    case CBT_ERR_CUDA: return "CUDA runtime error";
    case CBT_ERR_NO_DEVICE: return "no CUDA device is present or CUDA support was not built";
    case CBT_ERR_UNSUPPORTED: return "operation not supported in this build or backend";
    case CBT_ERR_NOT_FOUND: return "not found";
    case CBT_ERR_STOPPED: return "shutting down; no new work accepted";
    case CBT_ERR_TIMEOUT: return "bounded wait timed out";
    case CBT_ERR_UNMATCHED: return "END event without a matching START; ignored and counted";
    case CBT_ERR_DUPLICATE: return "one-shot event arrived twice; ignored and counted";
    case CBT_ERR_BAD_TRACEPARENT: return "malformed W3C traceparent; rejected, a fresh trace starts";
    case CBT_ERR_VERSION: return "versioned struct from a newer cbt (size or version unknown here), or size not set";
    case CBT_ERR_BAD_TRACESTATE: return "W3C tracestate too long or not printable ASCII; dropped";
    case CBT_ERR_LMCT_TRUNCATED: return "LMCT file ends inside a frame; the complete frames before it were read";
    case CBT_ERR_LMCT_BEYOND_FILE: return "LMCT header frame length runs past the end of the file";
    case CBT_ERR_LMCT_BAD_MAGIC: return "not an LMCT file: the header's magic is not \"LMCT\"";
    case CBT_ERR_LMCT_FORMAT: return "unknown LMCT format_version";
    case CBT_ERR_LMCT_SCHEMA: return "unknown LMCT trace_schema_version";
    case CBT_ERR_LMCT_TYPE: return "LMCT frame is not msgpack or a field has the wrong msgpack type";
    case CBT_ERR_LMCT_LIMIT: return "LMCT frame, map, array, string or nesting beyond the codec's bounds";
    case CBT_ERR_REPLAY_MISMATCH: return "recorded trace's cbt version, level or config digest differs from this build's";
    case CBT_STATUS_COUNT_: break;
    }
    return "unknown cbt status code";
}
