/* cbt/status.h — every cbt call returns a cbt_status; cbt_strerror() names it.
 *
 * Codes are small positive integers, stable across versions (new codes are
 * only ever appended). CBT_OK is zero so `if (st) ...` reads naturally.
 *
 * CBT_DISABLE (defined before the first cbt include): the codes stay defined
 * and cbt_strerror() becomes a static inline that returns "cbt disabled" for
 * every code, referencing no cbt symbol.
 */
#ifndef CBT_STATUS_H
#define CBT_STATUS_H

#include "cbt/api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cbt_status {
    CBT_OK = 0,
    CBT_ERR_INVAL,            /* an argument is NULL, out of range or malformed */
    CBT_ERR_NOMEM,            /* an allocation failed (only at create time) */
    CBT_ERR_FULL,             /* a bounded queue/table is full: the item was dropped and counted */
    CBT_ERR_SESSION_TOO_LONG, /* session id longer than CBT_SESSION_MAX - 1 bytes: refused and counted */
    CBT_ERR_UNKNOWN_EVENT,    /* event type was never defined or registered */
    CBT_ERR_META_FULL,        /* the event already holds CBT_EVENT_META_MAX values */
    CBT_ERR_META_TOO_LONG,    /* a string value does not fit, not even cut (cbt/event.h) */
    CBT_ERR_NOT_INITIALIZED,  /* no tracer: cbt_init() has not run (or tracing is disabled) */
    CBT_ERR_ALREADY,          /* cbt_init() ran twice, or a thing was registered twice */
    CBT_ERR_THREAD,           /* a thread could not be created */
    CBT_ERR_IO,               /* a file could not be opened or written */
    CBT_ERR_CUDA,             /* the CUDA runtime returned an error */
    CBT_ERR_NO_DEVICE,        /* no CUDA device is present (or CUDA support was not built) */
    CBT_ERR_UNSUPPORTED,      /* the operation is not available in this build or backend */
    CBT_ERR_NOT_FOUND,        /* a lookup found nothing */
    CBT_ERR_STOPPED,          /* the object is shutting down and refuses new work */
    CBT_ERR_TIMEOUT,          /* a bounded wait ran out */
    CBT_ERR_UNMATCHED,        /* an END arrived with no open START: ignored and counted */
    CBT_ERR_DUPLICATE,        /* a one-shot event (REQUEST_END) arrived twice: ignored and counted */
    CBT_ERR_BAD_TRACEPARENT,  /* a W3C traceparent was malformed: rejected, start a fresh trace */
    CBT_ERR_BAD_TRACESTATE,   /* a W3C tracestate was too long or not printable ASCII: dropped */
    CBT_ERR_VERSION,          /* a versioned struct's size/version is unknown to this libcbt (cbt.h) */
    CBT_ERR_LMCT_TRUNCATED,   /* an LMCT file ends inside a frame: a warning, the complete frames were read (cbt/lmct.h) */
    CBT_ERR_LMCT_BEYOND_FILE, /* an LMCT header frame's length runs past the end of the file */
    CBT_ERR_LMCT_BAD_MAGIC,   /* an LMCT header without the magic "LMCT" */
    CBT_ERR_LMCT_FORMAT,      /* an LMCT format_version other than CBT_LMCT_FORMAT_VERSION */
    CBT_ERR_LMCT_SCHEMA,      /* an LMCT trace_schema_version other than CBT_LMCT_SCHEMA_VERSION */
    CBT_ERR_LMCT_TYPE,        /* an LMCT frame is not msgpack, or a field has the wrong msgpack type */
    CBT_ERR_LMCT_LIMIT,       /* an LMCT frame, map, array, string or nesting beyond the codec's bounds */
    CBT_ERR_REPLAY_MISMATCH,  /* a recorded trace's cbt version, level or config digest is not this build's (cbt/replay.h: force) */
    CBT_STATUS_COUNT_         /* not a status: number of codes */
} cbt_status;

#ifdef CBT_DISABLE
/* ==== CBT_DISABLE: the call below compiles to a constant (see the top) ==== */
static inline const char *cbt_strerror(cbt_status st)
{
    (void)st;
    return "cbt disabled";
}
#else /* the calls */

/* A short English sentence for `st`; never NULL, static storage, thread-safe. */
CBT_API const char *cbt_strerror(cbt_status st);

#endif /* CBT_DISABLE */

#ifdef __cplusplus
}
#endif
#endif /* CBT_STATUS_H */
