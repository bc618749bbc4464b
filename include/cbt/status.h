/* cbt/status.h — every cbt call returns a cbt_status; cbt_strerror() names it.
 *
 * Codes are small positive integers, stable across versions (new codes are
 * only ever appended). CBT_OK is zero so `if (st) ...` reads naturally.
 *
 * A code says what kind of failure; a few calls say more, per thread:
 * cbt_last_error() is the sentence the last of them wrote on this thread
 * (which config field broke which rule, which table is full and how to raise
 * it), cbt_last_error_field() the config field it names.
 *
 * CBT_DISABLE (defined before the first cbt include): the codes stay defined
 * and cbt_strerror() becomes a static inline that returns "cbt disabled" for
 * every code, cbt_last_error() and cbt_last_error_field() "", referencing
 * no cbt symbol.
 */
#ifndef CBT_STATUS_H
#define CBT_STATUS_H

#include "cbt/api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The codes, in order: X(NAME, value, "message") for CBT_NAME = value, whose
 * sentence cbt_strerror() returns. The one list: the enum below, cbt_strerror's
 * table (host/core/status.c) and the Python package's OK / ERR_* constants
 * (python/cbt/_cbt.c) are made from it. A value is the code's place in the
 * list (host/core/status.c refuses to compile otherwise), so a new code goes
 * at the end with the next value and no code is ever renumbered. */
#define CBT_STATUS_LIST(X)                                                                                           \
    X(OK,                    0, "success")                                                                           \
    /* an argument is NULL, out of range or malformed */                                                             \
    X(ERR_INVAL,             1, "invalid argument")                                                                  \
    /* an allocation failed (only at create time) */                                                                 \
    X(ERR_NOMEM,             2, "out of memory")                                                                     \
    X(ERR_FULL,              3, "bounded queue or table is full; the item was dropped and counted")                  \
    X(ERR_SESSION_TOO_LONG,  4, "session id is longer than CBT_SESSION_MAX - 1 bytes; refused and counted")          \
    /* event type was never defined or registered */                                                                 \
    X(ERR_UNKNOWN_EVENT,     5, "unknown event type")                                                                \
    X(ERR_META_FULL,         6, "event already holds CBT_EVENT_META_MAX metadata values")                            \
    /* a string value does not fit, not even cut (cbt/event.h) */                                                    \
    X(ERR_META_TOO_LONG,     7, "string value or name is too long")                                                  \
    X(ERR_NOT_INITIALIZED,   8, "no tracer: cbt_init() has not run or tracing is disabled")                          \
    /* cbt_init() ran twice, or a thing was registered twice */                                                      \
    X(ERR_ALREADY,           9, "already initialised or registered")                                                 \
    X(ERR_THREAD,           10, "could not create a thread")                                                         \
    X(ERR_IO,               11, "file could not be opened or written")                                               \
    X(ERR_CUDA,             12, "CUDA runtime error")                                                                \
    X(ERR_NO_DEVICE,        13, "no CUDA device is present or CUDA support was not built")                           \
    X(ERR_UNSUPPORTED,      14, "operation not supported in this build or backend")                                  \
    /* a lookup found nothing */                                                                                     \
    X(ERR_NOT_FOUND,        15, "not found")                                                                         \
    /* the object is shutting down and refuses new work */                                                           \
    X(ERR_STOPPED,          16, "shutting down; no new work accepted")                                               \
    X(ERR_TIMEOUT,          17, "bounded wait timed out")                                                            \
    X(ERR_UNMATCHED,        18, "END event without a matching START; ignored and counted")                           \
    /* a one-shot event (REQUEST_END) arrived twice: ignored and counted */                                          \
    X(ERR_DUPLICATE,        19, "one-shot event arrived twice; ignored and counted")                                 \
    X(ERR_BAD_TRACEPARENT,  20, "malformed W3C traceparent; rejected, a fresh trace starts")                         \
    X(ERR_BAD_TRACESTATE,   21, "W3C tracestate too long or not printable ASCII; dropped")                           \
    /* a versioned struct's size/version is unknown to this libcbt (cbt.h) */                                        \
    X(ERR_VERSION,          22, "versioned struct from a newer cbt (size or version unknown here), or size not set") \
    /* an LMCT file ends inside a frame: a warning, the complete frames were read (cbt/lmct.h) */                    \
    X(ERR_LMCT_TRUNCATED,   23, "LMCT file ends inside a frame; the complete frames before it were read")            \
    X(ERR_LMCT_BEYOND_FILE, 24, "LMCT header frame length runs past the end of the file")                            \
    X(ERR_LMCT_BAD_MAGIC,   25, "not an LMCT file: the header's magic is not \"LMCT\"")                              \
    /* an LMCT format_version other than CBT_LMCT_FORMAT_VERSION */                                                  \
    X(ERR_LMCT_FORMAT,      26, "unknown LMCT format_version")                                                       \
    /* an LMCT trace_schema_version other than 1 or 2, or content of another schema (cbt/lmct.h) */                  \
    X(ERR_LMCT_SCHEMA,      27, "unknown LMCT trace schema")                                                         \
    X(ERR_LMCT_TYPE,        28, "LMCT frame is not msgpack or a field has the wrong msgpack type")                   \
    X(ERR_LMCT_LIMIT,       29, "LMCT frame, map, array, string or nesting beyond the codec's bounds")               \
    /* a recorded trace's cbt version, level or config digest is not this build's (cbt/replay.h: force) */           \
    X(ERR_REPLAY_MISMATCH,  30, "recorded trace's cbt version, level or config digest differs from this build's")

typedef enum cbt_status {
#define CBT_STATUS_ENUM_(name, value, message) CBT_##name = value,
    CBT_STATUS_LIST(CBT_STATUS_ENUM_)
#undef CBT_STATUS_ENUM_
    CBT_STATUS_COUNT_ /* not a status: number of codes */
} cbt_status;

#ifdef CBT_DISABLE
/* ==== CBT_DISABLE: the call below compiles to a constant (see the top) ==== */
static inline const char *cbt_strerror(cbt_status st)
{
    (void)st;
    return "cbt disabled";
}
static inline const char *cbt_last_error(void) { return ""; }
static inline const char *cbt_last_error_field(void) { return ""; }
#else /* the calls */

/* A short English sentence for `st`; never NULL, static storage, thread-safe. */
CBT_API const char *cbt_strerror(cbt_status st);

/* The detail of the last failure on this thread that said more than its
 * code, or "" when none has: one line, at most 255 bytes, no trailing
 * newline. The calls that write it, and what they write:
 *   cbt_init()                   CBT_ERR_INVAL: the field, its value and the
 *                                rule it breaks ("lane_capacity 4194304
 *                                cells x max_lanes 64 is 16384 MiB of
 *                                lanes, more than the 4096 MiB allowed:
 *                                ..."), the line cbt_init
 *                                also prints on stderr; CBT_ERR_VERSION: the
 *                                sizes. Cleared when cbt_init() starts.
 *   cbt_intern()                 CBT_ERR_FULL: the table's capacity and how
 *   cbt_event_type_register()    to raise it (cbt/names.h); the event-type
 *                                table's limit (cbt/event.h).
 * Valid until this thread's next call that writes it; a call that does not
 * write it leaves it alone, so read it right after the failing call.
 * Thread-local: no lock, never NULL. */
CBT_API const char *cbt_last_error(void);

/* The cbt_config field that detail names ("lane_capacity"), or "" when it
 * names none. Same lifetime. */
CBT_API const char *cbt_last_error_field(void);

#endif /* CBT_DISABLE */

#ifdef __cplusplus
}
#endif
#endif /* CBT_STATUS_H */
