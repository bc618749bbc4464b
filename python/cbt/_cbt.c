/* python/cbt/_cbt.c — the CPython extension behind the `cbt` package.
 *
 * What it owns: the C side of cbt's Python API (docs/python.md). Every call
 * is a thin layer over the C library linked in statically (cbt_static):
 *   init / shutdown / enabled / flush / metrics    cbt.h (init's trace_level: recording)
 *   replay                                         cbt/replay.h (cbt.replay wraps it)
 *   publish / publish_on_stream                    cbt_publish, cbt/stream.h
 *   CpuStream                                      cbt_stream_cpu_create & co
 *   span_begin -> PSpan, SpanContext, inject /
 *   extract                                        cbt/pspan.h, cbt/context.h
 * python/cbt/__init__.py adds what is plain Python (the span and tracer
 * context managers, the thread's current span).
 *
 * The hot path (publish): the event type and every value key are looked up
 * once and cached in dicts (str -> small int, as cbt's own interning turns a
 * name into a handle once); the event is built on the C stack (only its used
 * part is written) and handed to the inline cbt_publish. The caches hold only
 * names that resolved, so they are bounded by cbt's own tables (256 event
 * types with their aliases; the name table's capacity, cbt/names.h).
 *
 * The GIL is released around every cbt call that can wait (docs/python.md,
 * "The GIL"), so a cbt that waits holds the calling thread, never the
 * others: init (the clock calibration's 10 ms, opening the span and trace
 * files, adding sinks), shutdown, flush, metrics, CpuStream creation, sync
 * and close, a CUDA stream's wrapping, a thread's first publish under a
 * tracer (its lane) and a CUDA stream's first mark under one (its attach:
 * publish_may_wait; later publishes keep the GIL, one compare), and in a
 * replay the file opens, the tracer's start and, without an on_span
 * callable or paced, the replay itself. Each such call copies what it needs
 * into C locals first and touches no Python object until it has the GIL
 * back. Calls into a live tracer are counted (g_in_tracer), and a shutdown
 * waits for them before it frees the tracer. Work a CpuStream runs
 * (enqueue) takes the GIL on the stream's worker thread.
 *
 * Errors: a cbt_status becomes cbt.Error (its .status the code, its message
 * the call, the context and cbt_strerror's sentence); a wrong Python type is
 * TypeError, an unknown event name ValueError, an int outside 64 bits
 * OverflowError. A full queue is not an error here, as in C: the event is
 * dropped and counted (metrics()["dropped_full"]).
 *
 * CPython API: built by default against the limited API of CPython 3.10
 * (python/CMakeLists.txt defines Py_LIMITED_API and names the module
 * _cbt.abi3.so), so one module serves every CPython >= 3.10; the same code
 * builds against the full API (CBT_PY_LIMITED_API=OFF, what a free-threaded
 * CPython needs). Its types are heap types, its init multi-phase. The state
 * is the process's, as the tracer is: one module object owns it, and a
 * second one (importlib.util.module_from_spec + exec_module, a
 * sub-interpreter) is refused with ImportError (module_exec).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cbt.h"

/* ---- CPython API levels: what the limited API changes, one helper each --------- */

/* The oldest CPython whose API this build may use: Py_LIMITED_API's
 * version in a limited build (the module loads on that one and later), the
 * headers' own in a full-API build. */
#ifdef Py_LIMITED_API
#define CBT_PY_API_ Py_LIMITED_API
#else
#define CBT_PY_API_ PY_VERSION_HEX
#endif

/* A C function in a PyType_Slot / PyModuleDef_Slot (void *): the integer
 * step keeps ISO C's function-to-object pointer rule (-Wpedantic) quiet. */
#define SLOT_FN_(fn) ((void *)(uintptr_t)(fn))

/* An exception set aside while cleanup makes C-API calls, then raised again
 * (or dropped). PyErr_GetRaisedException / PyErr_SetRaisedException where
 * the API has them (3.12: PyErr_Fetch / PyErr_Restore are deprecated
 * there), else the Fetch / Restore triple, normalized at save so that
 * .value is the exception object in both. */
typedef struct {
#if CBT_PY_API_ >= 0x030C0000
    PyObject *value;
#else
    PyObject *type, *value, *tb;
#endif
} saved_exc;

/* Move the current exception, if any, into *e (value NULL when none). */
static void exc_save(saved_exc *e)
{
#if CBT_PY_API_ >= 0x030C0000
    e->value = PyErr_GetRaisedException();
#else
    PyErr_Fetch(&e->type, &e->value, &e->tb);
    if (e->type) {
        PyErr_NormalizeException(&e->type, &e->value, &e->tb);
        if (e->tb && e->value)
            (void)PyException_SetTraceback(e->value, e->tb);
    }
#endif
}

/* Raise what *e holds again (nothing when empty), replacing any current
 * exception; *e is empty after. */
static void exc_restore(saved_exc *e)
{
#if CBT_PY_API_ >= 0x030C0000
    PyErr_SetRaisedException(e->value);
    e->value = NULL;
#else
    PyErr_Restore(e->type, e->value, e->tb);
    e->type = e->value = e->tb = NULL;
#endif
}

/* Drop what *e holds; *e is empty after. */
static void exc_drop(saved_exc *e)
{
#if CBT_PY_API_ >= 0x030C0000
    Py_CLEAR(e->value);
#else
    Py_CLEAR(e->type);
    Py_CLEAR(e->value);
    Py_CLEAR(e->tb);
#endif
}

/* Raise the exception object `exc` (a reference stolen), its traceback
 * kept: the raising counterpart of exc_save for an object kept earlier. */
static void exc_raise(PyObject *exc)
{
    saved_exc e;
#if CBT_PY_API_ >= 0x030C0000
    e.value = exc;
#else
    e.type = (PyObject *)Py_TYPE(exc);
    Py_INCREF(e.type);
    e.value = exc;
    e.tb = PyException_GetTraceback(exc);
#endif
    exc_restore(&e);
}

/* A type's name for a message (%.100s): tp_name in a full-API build; in a
 * limited one PyTypeObject is opaque (and 3.10 has no PyType_GetName), so
 * the type's __name__, copied into one of four buffers used in turn (a
 * message names at most two types; a limited build always has a GIL). The
 * two differ only for C types whose tp_name is dotted ("numpy.ndarray"
 * there, "ndarray" here). Any exception already set is kept. */
#ifdef Py_LIMITED_API
static const char *tp_name_of(PyObject *o)
{
    static char buf[4][104];
    static unsigned turn;
    char *b = buf[turn++ % 4];
    saved_exc e;
    exc_save(&e);
    PyObject *n = PyObject_GetAttrString((PyObject *)Py_TYPE(o), "__name__");
    const char *u = n && PyUnicode_Check(n) ? PyUnicode_AsUTF8AndSize(n, NULL) : NULL;
    snprintf(b, sizeof buf[0], "%s", u ? u : "?");
    Py_XDECREF(n);
    PyErr_Clear();
    exc_restore(&e);
    return b;
}
#else
#define tp_name_of(o) (Py_TYPE(o)->tp_name)
#endif

/* Whether the interpreter is finalizing: a CpuStream worker must not take
 * the GIL then. Before 3.13 the limited API has no Py_IsFinalizing;
 * Py_FinalizeEx clears Py_IsInitialized() where it marks the runtime
 * finalizing (3.10 to 3.12's pylifecycle.c), so that stands in for it. */
static int py_finalizing(void)
{
#if CBT_PY_API_ >= 0x030D0000
    return Py_IsFinalizing();
#elif !defined(Py_LIMITED_API)
    return _Py_IsFinalizing();
#else
    return !Py_IsInitialized();
#endif
}

/* ---- module state: the process's, as cbt's tracer is one per process. The
 * objects below are owned by the one module object whose exec made them
 * (module_state) and borrowed here, so the hot path reads a global, not a
 * module lookup; a second module object is refused (module_exec). --------- */

static PyObject *g_error;        /* cbt.Error */
static PyObject *g_types;        /* event-type object -> int type */
static PyObject *g_keys;         /* str -> int cbt_name */
static PyObject *g_cuda_streams; /* int cudaStream_t -> int (cbt_stream *) */
static PyObject *g_str_ts_ns, *g_str_pair, *g_str_event_type, *g_str_session_id, *g_str_value;
/* The heap types (PyType_FromModuleAndSpec, in module_exec). The macros keep
 * the spelling of the static types they replaced (&CpuStreamType is the
 * type's pointer), so the functions that use them read as before. */
static PyObject *g_cpu_stream_type, *g_span_context_type, *g_pspan_type;
#define CpuStreamType (*(PyTypeObject *)g_cpu_stream_type)
#define SpanContextType (*(PyTypeObject *)g_span_context_type)
#define PSpanType (*(PyTypeObject *)g_pspan_type)
static cbt_sampler g_sampler;    /* roots without a request id (OTEL_TRACES_SAMPLER) */
static int g_forked_child;       /* os.fork() happened (after_in_child) */
static int g_inherited;          /* ... while a tracer ran: this process has its copy, and
                                    no harvester (it stayed in the parent) */
#ifdef CBT_WITH_OTLP
static cbt_otlp_stats g_otlp_final;
static int g_otlp_on;            /* the running tracer has an OTLP exporter */
#endif
/* Shutdowns freeing the tracer with the GIL released (py_shutdown, init's
 * failure path): a count, as init's failure path may run while another
 * thread's cbt.shutdown waits. Changed under the GIL. publish,
 * publish_on_stream, span begin and span end check it with the GIL held and
 * make their cbt call without releasing the GIL in between, or counted in
 * g_in_tracer (below), so while it is up no Python caller can be inside a
 * call that writes into the tracer (include/cbt.h: shutdown must not race
 * with publishers); they treat it as "no tracer". */
static _Atomic int g_closing; /* outside CBT_WITH_OTLP: every build uses it; atomic: a
                                 slicing flush reads it without the GIL (flush_sliced) */
/* cbt.init is starting a tracer with the GIL released (cbt_init and the
 * sinks it adds). Set and cleared under the GIL: another init and a replay
 * refuse meanwhile; a shutdown waits for it (g_in_tracer). */
static int g_starting;
/* Calls inside the tracer with the GIL released, besides a shutdown's own:
 * flush, metrics, init's, and a publish that may wait (publish_may_wait).
 * Each is counted (tracer_enter, under the GIL, refused while g_closing) and
 * uncounted as it returns (tracer_leave, without the GIL). A shutdown raises
 * g_closing first, so no new one starts, then waits with the GIL released
 * until none is left (tracer_quiesce) before it frees the tracer: each is
 * bounded (a flush by its timeout). */
static _Atomic int g_in_tracer;
/* Tracers cbt.init started (changed under the GIL), and the last one this
 * thread published under: a thread's first publish under a tracer gets the
 * thread its lane (host/core/lane.c: a CAS, no lock), released all the same
 * in case a future core makes it wait (publish_may_wait); later ones cost
 * one compare. */
static uint64_t g_tracer_gen;
static _Thread_local uint64_t t_published_gen;
/* A cbt.replay runs (set and cleared under the GIL): the process's one tracer
 * is its replay tracer, which cbt_replay_run drives holding the tracer's
 * lock while it calls the sinks. init, shutdown and metrics refuse meanwhile
 * (the replay's figures are what it returns). */
static int g_replaying;

#define TYPES_CACHE_MAX 4096 /* objects other than str resolve by .value: bound them */
#define CUDA_STREAMS_MAX 64  /* wrapped CUDA streams (1024 CUDA events each) */

/* The tracer each wrapped CUDA stream last took a mark under: its first mark
 * under a tracer attaches it (host/streams/stream_cuda.c: the stream's attach
 * mutex and the tracer's streams_lock, held for a list update), so that
 * publish releases the GIL. Under the GIL. */
static struct {
    cbt_stream *s;
    uint64_t gen;
} g_cuda_gen[CUDA_STREAMS_MAX];
static int g_n_cuda_gen;

/* Count a call into the tracer that runs with the GIL released: 0 (not
 * counted) while a shutdown runs, and the caller acts as without a tracer.
 * Under the GIL. */
static int tracer_enter(void)
{
    if (g_closing)
        return 0;
    atomic_fetch_add_explicit(&g_in_tracer, 1, memory_order_relaxed);
    return 1;
}

/* Its end, right after the cbt call, before the GIL is taken back: release,
 * pairs with the acquire in tracer_quiesce. */
static void tracer_leave(void) { atomic_fetch_sub_explicit(&g_in_tracer, 1, memory_order_release); }

/* A shutdown's wait, the GIL released and g_closing up: until no counted
 * call is left inside the tracer. */
static void tracer_quiesce(void)
{
    while (atomic_load_explicit(&g_in_tracer, memory_order_acquire) != 0) {
        struct timespec d = {0, 200000};
        nanosleep(&d, NULL);
    }
}

/* Whether a publish from this thread may wait in the core: its first under
 * the running tracer (the lane), or with `cuda` (a wrapped CUDA stream, else
 * NULL) that stream's first mark under it (the attach). Marks both done, so
 * the next one keeps the GIL. Under the GIL. */
static int publish_may_wait(cbt_stream *cuda)
{
    int wait = 0;
    if (__builtin_expect(t_published_gen != g_tracer_gen, 0)) {
        t_published_gen = g_tracer_gen;
        wait = 1;
    }
    if (cuda) {
        int i = 0;
        while (i < g_n_cuda_gen && g_cuda_gen[i].s != cuda)
            i++;
        if (i == g_n_cuda_gen) {
            wait = 1; /* not in the table (it is full): every mark may wait */
        } else if (g_cuda_gen[i].gen != g_tracer_gen) {
            g_cuda_gen[i].gen = g_tracer_gen;
            wait = 1;
        }
    }
    return wait;
}

/* `call` (a statement making one cbt call that publishes): with the GIL
 * released and counted in g_in_tracer when publish_may_wait(cuda) says it
 * may wait, else with the GIL held. The caller has checked g_closing, under
 * the GIL, since it last ran Python code, and `call` touches no Python
 * object. */
#define CALL_PUBLISH_(cuda, call)                                                               \
    do {                                                                                        \
        if (publish_may_wait(cuda) && tracer_enter()) {                                         \
            Py_BEGIN_ALLOW_THREADS                                                              \
            call;                                                                               \
            tracer_leave();                                                                     \
            Py_END_ALLOW_THREADS                                                                \
        } else {                                                                                \
            call;                                                                               \
        }                                                                                       \
    } while (0)

/* Raise cbt.Error(status) with "<what>: <cbt_strerror>", its .status the
 * code and its .field `field` (the cbt_config field at fault: cbt.init's
 * keyword of the same name) or None. */
static PyObject *raise_status_field(cbt_status st, const char *field, const char *what)
{
    PyObject *msg = PyUnicode_FromFormat("%s: %s", what, cbt_strerror(st));
    if (!msg)
        return NULL;
    PyObject *exc = PyObject_CallFunctionObjArgs(g_error, msg, NULL);
    Py_DECREF(msg);
    if (!exc)
        return NULL;
    PyObject *code = PyLong_FromLong((long)st);
    PyObject *f = field && *field ? PyUnicode_FromString(field) : (Py_INCREF(Py_None), Py_None);
    if (!code || !f || PyObject_SetAttrString(exc, "status", code) < 0 ||
        PyObject_SetAttrString(exc, "field", f) < 0) {
        Py_XDECREF(code);
        Py_XDECREF(f);
        Py_DECREF(exc);
        return NULL;
    }
    Py_DECREF(code);
    Py_DECREF(f);
    PyErr_SetObject(g_error, exc);
    Py_DECREF(exc);
    return NULL;
}

/* Raise cbt.Error(status) with "<what>: <cbt_strerror>". */
static PyObject *raise_status(cbt_status st, const char *what)
{
    return raise_status_field(st, NULL, what);
}

/* The same with a formatted context (PyUnicode_FromFormat's %U, %s, %R). */
static PyObject *raise_statusf(cbt_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PyObject *what = PyUnicode_FromFormatV(fmt, ap);
    va_end(ap);
    if (!what)
        return NULL;
    const char *w = PyUnicode_AsUTF8AndSize(what, NULL);
    PyObject *r = w ? raise_status(st, w) : NULL;
    Py_DECREF(what);
    return r;
}

/* A str's UTF-8 bytes, refusing an embedded NUL (cbt's strings are C
 * strings: the rest would be cut silently). */
static const char *utf8_of(PyObject *s, Py_ssize_t *len, const char *what)
{
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    if (!u)
        return NULL;
    if ((size_t)n != strlen(u)) {
        PyErr_Format(PyExc_ValueError, "%s: the string holds a NUL character", what);
        return NULL;
    }
    if (len)
        *len = n;
    return u;
}

/* How much of a caller's input an error message echoes: a short prefix. */
#define ECHO_MAX 64

/* The one way an error message shows a caller's input `o` (a new str, for
 * PyUnicode_FromFormat's %U): its repr when that is short; else the repr of
 * its first ECHO_MAX characters (a str; bytes decoded as a file name is)
 * followed by "... (N characters)", "an int of N bits" for an int too large
 * to print, or the type's name. Never the whole input, however large: an
 * unknown 10 MB event name gives a ValueError of 245 characters. */
static PyObject *echo(PyObject *o)
{
    if (PyBytes_Check(o)) {
        PyObject *u = PyUnicode_DecodeFSDefaultAndSize(PyBytes_AsString(o), PyBytes_Size(o));
        if (!u) {
            PyErr_Clear();
            return PyUnicode_FromString("(undecodable bytes)");
        }
        PyObject *r = echo(u);
        Py_DECREF(u);
        return r;
    }
    if (PyUnicode_Check(o)) {
        /* an exact str's repr (a subclass's own __repr__ is not called) */
        Py_ssize_t n = PyUnicode_GetLength(o);
        PyObject *head = PyUnicode_Substring(o, 0, n <= ECHO_MAX ? n : ECHO_MAX);
        PyObject *hr = head ? PyObject_Repr(head) : NULL;
        Py_XDECREF(head);
        if (!hr || n <= ECHO_MAX)
            return hr;
        PyObject *r = PyUnicode_FromFormat("%U... (%zd characters)", hr, n);
        Py_DECREF(hr);
        return r;
    }
    if (o == Py_None || PyBool_Check(o))
        return PyObject_Repr(o);
    if (PyLong_Check(o) || PyFloat_Check(o)) {
        /* int's and float's own repr, not a subclass's; an int too large to
         * print in a line is described instead */
        PyObject *base = PyLong_Check(o) ? (PyObject *)&PyLong_Type : (PyObject *)&PyFloat_Type;
        if (PyLong_Check(o)) {
            PyObject *bl = PyObject_CallMethod(base, "bit_length", "O", o);
            long long bits = bl ? PyLong_AsLongLong(bl) : -1;
            Py_XDECREF(bl);
            if (bits < 0) {
                PyErr_Clear();
                bits = 0;
            }
            if (bits > 4 * ECHO_MAX) /* about 77 decimal digits */
                return PyUnicode_FromFormat("an int of %lld bits", bits);
        }
        PyObject *r = PyObject_CallMethod(base, "__repr__", "O", o);
        if (!r)
            PyErr_Clear();
        return r ? r : PyUnicode_FromString("(a number)");
    }
    return PyUnicode_FromFormat("a %.100s", tp_name_of(o));
}

/* echo() of a C string (UTF-8, bad bytes replaced). */
static PyObject *echo_c(const char *s)
{
    PyObject *u = PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "replace");
    PyObject *r = u ? echo(u) : NULL;
    Py_XDECREF(u);
    return r;
}

/* An unsigned int argument: `o` an int (not a bool) in [0, max], else
 * TypeError, ValueError for a negative one, OverflowError past `max`, each
 * naming `what` ("publish(): ts_ns") and the range. Every unsigned int cbt
 * takes from Python comes through here (init's fields through get_u32). */
static int uint_of(PyObject *o, const char *what, uint64_t max, uint64_t *out)
{
    if (!PyLong_Check(o) || PyBool_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s is an int, not %.100s", what, tp_name_of(o));
        return -1;
    }
    int of = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &of);
    if (v == -1 && PyErr_Occurred())
        return -1;
    unsigned long long u = 0;
    if (of > 0) { /* past INT64_MAX: maybe still a uint64 */
        u = PyLong_AsUnsignedLongLong(o);
        if (u == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            of = 2;
        }
    }
    if (of < 0 || (!of && v < 0) || of == 2 || (of ? u : (unsigned long long)v) > max) {
        PyObject *e = echo(o);
        if (e)
            PyErr_Format(of < 0 || (!of && v < 0) ? PyExc_ValueError : PyExc_OverflowError,
                         "%s must be an int in [0, %llu], not %U", what, (unsigned long long)max,
                         e);
        Py_XDECREF(e);
        return -1;
    }
    *out = of ? (uint64_t)u : (uint64_t)v;
    return 0;
}

/* ---- names: event types and value keys, resolved once --------------------------- */

static int type_from_name(PyObject *cache_key, PyObject *name, cbt_event_type *out)
{
    const char *s = utf8_of(name, NULL, "cbt: event type");
    if (!s)
        return -1;
    cbt_event_type t;
    cbt_status st = cbt_event_type_by_name(s, &t);
    if (st != CBT_OK) {
        PyObject *e = echo(name);
        if (e)
            PyErr_Format(PyExc_ValueError,
                         "cbt: unknown event type %U (%s): use an LMCache event value such as "
                         "'mp.store.start', its member name 'MP_STORE_START', or a registered "
                         "type",
                         e, cbt_strerror(st));
        Py_XDECREF(e);
        return -1;
    }
    if (PyDict_Size(g_types) < TYPES_CACHE_MAX) {
        PyObject *v = PyLong_FromLong(t);
        if (!v || PyDict_SetItem(g_types, cache_key, v) < 0) {
            Py_XDECREF(v);
            return -1;
        }
        Py_DECREF(v);
    }
    *out = t;
    return 0;
}

/* An event type: a str (LMCache value or member name), an int type, or an
 * object whose .value is such a str (LMCache's EventType members). */
static int resolve_type(PyObject *o, cbt_event_type *out)
{
    if (PyLong_Check(o)) {
        if (PyBool_Check(o)) {
            PyErr_SetString(PyExc_TypeError, "cbt: an event type is a str or an int, not a bool");
            return -1;
        }
        int of = 0;
        long v = PyLong_AsLongAndOverflow(o, &of);
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (of || v <= 0 || v > UINT16_MAX || !cbt_event_type_valid((cbt_event_type)v)) {
            PyObject *e = echo(o);
            if (e)
                PyErr_Format(PyExc_ValueError, "cbt: %U is not an event type", e);
            Py_XDECREF(e);
            return -1;
        }
        *out = (cbt_event_type)v;
        return 0;
    }
    PyObject *hit = PyDict_GetItemWithError(g_types, o); /* borrowed */
    if (hit) {
        *out = (cbt_event_type)PyLong_AsLong(hit);
        return 0;
    }
    if (PyErr_Occurred()) { /* unhashable */
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "cbt: an event type is a str or an int, not %.100s",
                     tp_name_of(o));
        return -1;
    }
    if (PyUnicode_Check(o))
        return type_from_name(o, o, out);
    PyObject *val = PyObject_GetAttr(o, g_str_value);
    if (!val || !PyUnicode_Check(val)) {
        Py_XDECREF(val);
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "cbt: an event type is a str or an int, not %.100s",
                     tp_name_of(o));
        return -1;
    }
    int r = type_from_name(o, val, out);
    Py_DECREF(val);
    return r;
}

/* A name handle for `key` (a value key, a span name), interned once: 0.
 * When the name table is full (a new name: cbt/names.h), 1 with nothing
 * raised for a value or attribute key (`what` NULL: the caller drops the
 * value, counted in metrics()["names_refused"]), else cbt.Error ERR_FULL
 * saying `what`, the table's capacity and how to raise it. -1 with an
 * exception for anything else. `out` NULL: only check that `key` could be a
 * name (a str of 1 to 63 UTF-8 bytes), interning nothing. */
static int resolve_key(PyObject *key, cbt_name *out, const char *what)
{
    PyObject *hit = PyDict_GetItemWithError(g_keys, key);
    if (hit) {
        if (out)
            *out = (cbt_name)PyLong_AsUnsignedLong(hit);
        return 0;
    }
    if (PyErr_Occurred())
        return -1;
    if (!PyUnicode_Check(key)) {
        PyErr_Format(PyExc_TypeError, "cbt: a name is a str, not %.100s", tp_name_of(key));
        return -1;
    }
    const char *s = utf8_of(key, NULL, "cbt: name");
    if (!s)
        return -1;
    cbt_name n;
    size_t len = strlen(s);
    cbt_status st = !out ? (len == 0               ? CBT_ERR_INVAL
                            : len >= CBT_NAME_LEN_MAX ? CBT_ERR_META_TOO_LONG
                                                      : CBT_OK)
                         : cbt_intern(s, &n);
    if (!out && st == CBT_OK)
        return 0;
    if (st == CBT_ERR_FULL && !what)
        return 1;
    if (st != CBT_OK) {
        PyObject *e = echo(key);
        if (e && st == CBT_ERR_FULL)
            raise_statusf(st, "%s %U: %s", what, e, cbt_last_error());
        else if (e && (st == CBT_ERR_INVAL || st == CBT_ERR_META_TOO_LONG))
            raise_statusf(st, "cbt: the name %U is %zu bytes (names are 1 to %d)", e, len,
                          CBT_NAME_LEN_MAX - 1);
        else if (e)
            raise_statusf(st, "cbt: the name %U", e); /* CBT_ERR_NOMEM */
        Py_XDECREF(e);
        return -1;
    }
    PyObject *v = PyLong_FromUnsignedLong(n);
    if (!v || PyDict_SetItem(g_keys, key, v) < 0) {
        Py_XDECREF(v);
        return -1;
    }
    Py_DECREF(v);
    *out = n;
    return 0;
}

/* ---- building an event ----------------------------------------------------------- */

/* The C copies of a call's list values: an event borrows array elements
 * until its publish returns (cbt/event.h), so they are freed after it. */
typedef struct arr_scratch {
    void *p[CBT_EVENT_META_MAX];
    /* a str array's elements, held: the publish may release the GIL (a
     * thread's first), and another thread could replace a list's item */
    PyObject *hold[CBT_EVENT_META_MAX];
    uint32_t n, n_hold;
} arr_scratch;

static void scratch_free(arr_scratch *sc)
{
    for (uint32_t i = 0; i < sc->n; i++)
        PyMem_Free(sc->p[i]);
    for (uint32_t i = 0; i < sc->n_hold; i++)
        Py_DECREF(sc->hold[i]);
    sc->n = sc->n_hold = 0;
}

/* The element type a list's item gives: a cbt_array_type, or 0. */
static uint8_t elem_type_of(PyObject *o)
{
    if (PyBool_Check(o))
        return CBT_ARRAY_BOOL;
    if (PyLong_Check(o))
        return CBT_ARRAY_I64;
    if (PyFloat_Check(o))
        return CBT_ARRAY_F64;
    if (PyUnicode_Check(o))
        return CBT_ARRAY_STR;
    return 0;
}

static const char *const k_elem_names[] = {"", "int", "float", "bool", "str"};

/* A list or tuple value `v` of `key` set on `ev` as an array: every element
 * of one type (int, float, bool or str, as OTLP's ArrayValue wants them
 * homogeneous), copied into a buffer `sc` owns until the publish returns.
 * -1 with an exception naming the key and the first element that does not
 * fit. Cost: one conversion per element (about 10 ns an int). */
static int set_array_value(cbt_event *ev, cbt_name k, PyObject *key, PyObject *v, arr_scratch *sc)
{
    int is_list = PyList_Check(v);
    Py_ssize_t n = is_list ? PyList_Size(v) : PyTuple_Size(v);
    if (n < 0)
        return -1;
    if (is_list && n > 0 && PyUnicode_Check(PyList_GetItem(v, 0))) {
        /* a str list: its items as they are now, held until the publish
         * returns (the UTF-8 the event borrows is theirs) */
        if (sc->n_hold >= CBT_EVENT_META_MAX) {
            raise_statusf(CBT_ERR_META_FULL, "cbt: value '%U'", key);
            return -1;
        }
        PyObject *t = PyList_AsTuple(v);
        if (!t)
            return -1;
        sc->hold[sc->n_hold++] = t;
        v = t;
        is_list = 0;
    }
    if ((size_t)n > CBT_ARRAY_COUNT_MAX) {
        raise_statusf(CBT_ERR_INVAL, "cbt: value '%U' has %zd elements (at most %u)", key, n,
                      (unsigned)CBT_ARRAY_COUNT_MAX);
        return -1;
    }
    uint8_t type = CBT_ARRAY_I64; /* an empty list: an empty int array */
    if (n > 0 && !(type = elem_type_of(is_list ? PyList_GetItem(v, 0) : PyTuple_GetItem(v, 0)))) {
        PyObject *o = is_list ? PyList_GetItem(v, 0) : PyTuple_GetItem(v, 0);
        PyErr_Format(PyExc_TypeError,
                     "cbt: value '%U': element 0 is a %.100s: an array's elements are all int, "
                     "all float, all bool or all str",
                     key, tp_name_of(o));
        return -1;
    }
    size_t esz = type == CBT_ARRAY_BOOL ? sizeof(bool)
                 : type == CBT_ARRAY_STR ? sizeof(const char *)
                                         : 8;
    void *buf = NULL;
    if (n > 0) {
        if (sc->n >= CBT_EVENT_META_MAX) { /* at most one per value */
            raise_statusf(CBT_ERR_META_FULL, "cbt: value '%U'", key);
            return -1;
        }
        if (!(buf = PyMem_Malloc((size_t)n * esz))) {
            PyErr_NoMemory();
            return -1;
        }
        sc->p[sc->n++] = buf;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = is_list ? PyList_GetItem(v, i) : PyTuple_GetItem(v, i);
        if (!o)
            return -1;
        if (elem_type_of(o) != type) {
            PyErr_Format(PyExc_TypeError,
                         "cbt: value '%U': element %zd is a %.100s, not %s like element 0: an array's "
                         "elements are all int, all float, all bool or all str",
                         key, i, tp_name_of(o), k_elem_names[type]);
            return -1;
        }
        switch (type) {
        case CBT_ARRAY_I64: {
            int of = 0;
            long long x = PyLong_AsLongLongAndOverflow(o, &of);
            if (of) {
                PyErr_Format(PyExc_OverflowError,
                             "cbt: value '%U': element %zd does not fit in 64 bits", key, i);
                return -1;
            }
            if (x == -1 && PyErr_Occurred())
                return -1;
            ((int64_t *)buf)[i] = (int64_t)x;
            break;
        }
        case CBT_ARRAY_F64: ((double *)buf)[i] = PyFloat_AsDouble(o); break;
        case CBT_ARRAY_BOOL: ((bool *)buf)[i] = o == Py_True; break;
        default: {
            /* the list keeps its strs, and their UTF-8, alive past the publish */
            const char *u = utf8_of(o, NULL, "cbt: a str element");
            if (!u)
                return -1;
            ((const char **)buf)[i] = u;
            break;
        }
        }
    }
    cbt_status st;
    switch (type) {
    case CBT_ARRAY_I64: st = cbt_event_array_i64(ev, k, buf, (size_t)n); break;
    case CBT_ARRAY_F64: st = cbt_event_array_f64(ev, k, buf, (size_t)n); break;
    case CBT_ARRAY_BOOL: st = cbt_event_array_bool(ev, k, buf, (size_t)n); break;
    default: st = cbt_event_array_str(ev, k, buf, (size_t)n); break;
    }
    if (st != CBT_OK) {
        raise_statusf(st, "cbt: value '%U'", key);
        return -1;
    }
    return 0;
}

static int set_value(cbt_event *ev, PyObject *key, PyObject *v, arr_scratch *sc)
{
    /* the value first: its errors do not depend on whether its key fits */
    long long x = 0;
    const char *str = NULL;
    if (PyBool_Check(v)) {
    } else if (PyLong_Check(v)) {
        int of = 0;
        x = PyLong_AsLongLongAndOverflow(v, &of);
        if (of) {
            PyObject *e = echo(key);
            if (e)
                PyErr_Format(PyExc_OverflowError, "cbt: value %U does not fit in 64 bits", e);
            Py_XDECREF(e);
            return -1;
        }
        if (x == -1 && PyErr_Occurred())
            return -1;
    } else if (PyFloat_Check(v)) {
    } else if (PyUnicode_Check(v)) {
        if (!(str = utf8_of(v, NULL, "cbt: a str value")))
            return -1;
    } else if (PyList_Check(v) || PyTuple_Check(v)) {
        cbt_name k;
        int r = resolve_key(key, &k, NULL);
        if (r)
            return r < 0 ? -1 : 0; /* the name table is full: dropped (counted) */
        return set_array_value(ev, k, key, v, sc);
    } else {
        PyObject *e = echo(key);
        if (e)
            PyErr_Format(PyExc_TypeError,
                         "cbt: value %U is a %.100s: values are int, float, bool, str, or a "
                         "list or tuple of one of them",
                         e, tp_name_of(v));
        Py_XDECREF(e);
        return -1;
    }
    cbt_name k;
    int r = resolve_key(key, &k, NULL);
    if (r)
        return r < 0 ? -1 : 0; /* 1: the name table is full, the value is dropped (counted) */
    cbt_status st;
    if (PyBool_Check(v))
        st = cbt_event_bool(ev, k, v == Py_True);
    else if (PyLong_Check(v))
        st = cbt_event_i64(ev, k, (int64_t)x);
    else if (PyFloat_Check(v))
        st = cbt_event_f64(ev, k, PyFloat_AsDouble(v));
    else
        st = cbt_event_str(ev, k, str);
    if (st != CBT_OK) {
        raise_statusf(st, "cbt: value '%U'", key); /* interned: at most 63 bytes */
        return -1;
    }
    return 0;
}

/* Which argument keyword `k` is: 1 ts_ns, 2 pair, 3 event_type, 4 session_id,
 * 0 a value. Keyword names are interned, so the pointer compares decide; the
 * lengths keep the content compares off a value key's path. */
static int reserved_kw(PyObject *k)
{
    if (k == g_str_ts_ns)
        return 1;
    if (k == g_str_pair)
        return 2;
    if (k == g_str_event_type)
        return 3;
    if (k == g_str_session_id)
        return 4;
    switch (PyUnicode_GetLength(k)) {
    case 5: return PyUnicode_Compare(k, g_str_ts_ns) == 0 ? 1 : 0;
    case 4: return PyUnicode_Compare(k, g_str_pair) == 0 ? 2 : 0;
    case 10:
        if (PyUnicode_Compare(k, g_str_event_type) == 0)
            return 3;
        return PyUnicode_Compare(k, g_str_session_id) == 0 ? 4 : 0;
    default: return 0;
    }
}

/* publish's and publish_on_stream's common arguments, from a vectorcall:
 * args[0..nargs) positional after what the caller consumed, kwnames the
 * keywords. `allow_ts` says whether ts_ns is accepted. */
static int build_event(cbt_event *ev, const char *fn, PyObject *const *args, Py_ssize_t nargs,
                       PyObject *kwnames, int allow_ts, int *enabled_out, arr_scratch *sc)
{
    PyObject *type_o = nargs > 0 ? args[0] : NULL;
    PyObject *sess_o = nargs > 1 ? args[1] : NULL;
    PyObject *ts_o = (allow_ts && nargs > 2) ? args[2] : NULL;
    Py_ssize_t max_pos = allow_ts ? 3 : 2;
    if (nargs > max_pos) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %zd positional arguments (%zd given)",
                     fn, max_pos, nargs);
        return -1;
    }
    PyObject *pair_o = NULL;
    Py_ssize_t nkw = kwnames ? PyTuple_Size(kwnames) : 0;
    if (nkw > CBT_EVENT_META_MAX + 4) {
        raise_statusf(CBT_ERR_META_FULL, "%s(): %zd values (at most %d)", fn, nkw,
                      CBT_EVENT_META_MAX);
        return -1;
    }
    uint32_t reserved = 0; /* bit i: keyword i is an argument, not a value */
    Py_ssize_t n_values = 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *k = PyTuple_GetItem(kwnames, i);
        PyObject **slot;
        switch (reserved_kw(k)) {
        case 1:
            if (!allow_ts) {
                PyErr_Format(PyExc_TypeError, "%s(): ts_ns is not accepted: the stream stamps it",
                             fn);
                return -1;
            }
            slot = &ts_o;
            break;
        case 2: slot = &pair_o; break;
        case 3: slot = &type_o; break;
        case 4: slot = &sess_o; break;
        default: n_values++; continue;
        }
        if (*slot) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%U'", fn, k);
            return -1;
        }
        *slot = args[nargs + i];
        reserved |= 1u << i;
    }
    if (!type_o || !sess_o) {
        PyErr_Format(PyExc_TypeError, "%s() needs an event type and a session id", fn);
        return -1;
    }
    cbt_event_type t;
    if (resolve_type(type_o, &t) < 0)
        return -1;
    const char *sess = "";
    if (sess_o != Py_None) {
        if (!PyUnicode_Check(sess_o)) {
            PyErr_Format(PyExc_TypeError, "%s(): the session id is a str, not %.100s", fn,
                         tp_name_of(sess_o));
            return -1;
        }
        if (!(sess = utf8_of(sess_o, NULL, "cbt: session id")))
            return -1;
    }
    *enabled_out = cbt_enabled();
    cbt_status st = cbt_event_init(ev, t, sess);
    if (st != CBT_OK) {
        raise_statusf(st, "%s(): session id of %zu bytes (at most %d)", fn, strlen(sess),
                      CBT_SESSION_MAX - 1);
        return -1;
    }
    if (ts_o && ts_o != Py_None) {
        if (!PyLong_Check(ts_o) || PyBool_Check(ts_o)) {
            PyErr_Format(PyExc_TypeError, "%s(): ts_ns is an int (Unix-epoch ns) or None", fn);
            return -1;
        }
        char what[64];
        snprintf(what, sizeof what, "%s(): ts_ns (Unix-epoch ns)", fn);
        uint64_t ts;
        if (uint_of(ts_o, what, UINT64_MAX, &ts) < 0)
            return -1;
        ev->ts = ts;
        ev->flags |= CBT_EVF_EXPLICIT_TS;
    }
    if (pair_o && pair_o != Py_None) {
        if (!PyLong_Check(pair_o) || PyBool_Check(pair_o)) {
            PyErr_Format(PyExc_TypeError, "%s(): pair is an int or None", fn);
            return -1;
        }
        char what[64];
        snprintf(what, sizeof what, "%s(): pair", fn);
        uint64_t p;
        if (uint_of(pair_o, what, UINT64_MAX, &p) < 0)
            return -1;
        ev->pair = p;
    }
    if (n_values > CBT_EVENT_META_MAX) {
        raise_statusf(CBT_ERR_META_FULL, "%s(): %zd values (at most %d)", fn, n_values,
                      CBT_EVENT_META_MAX);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nkw; i++)
        if (!(reserved & (1u << i)) && set_value(ev, PyTuple_GetItem(kwnames, i), args[nargs + i], sc) < 0)
            return -1;
    return 0;
}

/* publish(event_type, session_id, ts_ns=None, *, pair=None, **values) */
static PyObject *py_publish(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    (void)self;
    cbt_event ev;
    int on;
    arr_scratch sc = {.n = 0, .n_hold = 0};
    if (build_event(&ev, "publish", args, nargs, kwnames, 1, &on, &sc) < 0) {
        scratch_free(&sc);
        return NULL;
    }
    if (on && !g_closing) { /* no Python code runs between this check and the call */
        cbt_status st;
        CALL_PUBLISH_(NULL, st = cbt_publish(&ev));
        scratch_free(&sc); /* the publish copied the arrays' elements */
        if (st != CBT_OK && st != CBT_ERR_FULL)
            return raise_status(st, "cbt.publish");
    }
    scratch_free(&sc);
    Py_RETURN_NONE;
}

/* ---- streams ---------------------------------------------------------------------- */

/* What the callables enqueued on a CpuStream raised, until sync() or
 * close() reports it. Shared by the stream object and each queued item (a
 * stream may be deallocated with items still queued, or on its own worker),
 * so counted: `refs`. Every field is under the GIL. */
typedef struct {
    int refs;
    PyObject *first;       /* the first exception since the last report (its value,
                              traceback attached), or NULL */
    uint64_t failed;       /* callables that raised since the last report */
    uint64_t failed_total; /* ... since the stream was made (stats()["items_failed"]) */
} work_errors;

/* Say what e holds and nobody reported (sync() and close() could not:
 * the stream object is gone, or was closed while a call pinned it) as an
 * unraisable exception: sys.unraisablehook, not lost. Any exception being
 * raised meanwhile is kept. */
static void work_errors_unraisable(work_errors *e, const char *when)
{
    if (!e || !e->first)
        return;
    saved_exc outer;
    exc_save(&outer);
    PyObject *where = PyUnicode_FromFormat(
        "a cbt.CpuStream %s with %llu failed callable(s) no sync() or close() reported; the "
        "first",
        when, (unsigned long long)e->failed);
    PyObject *exc = e->first;
    e->first = NULL;
    e->failed = 0;
    exc_raise(exc);
    PyErr_WriteUnraisable(where);
    Py_XDECREF(where);
    exc_restore(&outer);
}

static void work_errors_put(work_errors *e)
{
    if (e && --e->refs == 0) {
        /* the last queued item outlived the stream object (freed on its own
         * worker): its failures are still said */
        work_errors_unraisable(e, "freed before its last queued callables ran,");
        free(e);
    }
}

typedef struct {
    PyObject_HEAD
    cbt_stream *s;       /* NULL once closed */
    cbt_stream *closing; /* closed while a call pinned it: the last unpin destroys it */
    int users;           /* calls pinning it (cpu_pin): syncs running with the GIL
                            released, publishes and span begins/ends building their
                            event (Python code may run there) */
    pid_t pid;           /* the process that created it (its worker lives there) */
    work_errors *errs;   /* what its callables raised */
} CpuStreamObject;

/* The stream whose work this thread is running (run_python sets it on the
 * worker): its sync/close from there would wait on itself. */
static _Thread_local cbt_stream *t_running_stream;

/* What run_python gets: the callable, the stream it runs on, where a
 * failure goes. */
typedef struct {
    PyObject *fn;
    cbt_stream *s;
    work_errors *errs;
} work_item;

static void destroy_unlocked(cbt_stream *s);

/* Pin a CpuStream's cbt_stream for a call that runs Python code between
 * taking it and using it (building an event: an Enum's .value, a key's
 * __hash__; a sync's wait). A close() meanwhile, from that code or another
 * thread, only marks the object closed (s NULL, the stream in `closing`);
 * the last unpin frees it. So a pinned pointer is never freed under its
 * call, and the call, seeing `s` NULL afterwards, knows it was closed. NULL
 * with cbt.Error ERR_STOPPED when it is closed already. Under the GIL. */
static cbt_stream *cpu_pin(CpuStreamObject *c, const char *what)
{
    if (!c->s) {
        raise_statusf(CBT_ERR_STOPPED, "%s: the CpuStream is closed", what);
        return NULL;
    }
    c->users++;
    Py_INCREF(c);
    return c->s;
}

/* A pinned call's end: the last one frees a stream closed meanwhile, unless
 * it runs on that stream's own worker (destroying would join itself: the
 * object's deallocation frees it then). Releases the GIL to free. */
static void cpu_unpin(CpuStreamObject *c)
{
    c->users--;
    if (c->closing && c->users == 0 && t_running_stream != c->closing) {
        cbt_stream *s = c->closing;
        c->closing = NULL;
        destroy_unlocked(s); /* runs what was queued */
        /* the close() that asked for this returned before the queue ran:
         * failures of the work it drained are said now, not lost */
        work_errors_unraisable(c->errs, "closed while a call used it,");
    }
    Py_DECREF(c);
}

/* -1 with cbt.Error ERR_STOPPED when a pinned CpuStream was closed during the
 * call (by code the call ran, or another thread): nothing was published. */
static int closed_meanwhile(CpuStreamObject *c, const char *what)
{
    if (!c || c->s)
        return 0;
    raise_statusf(CBT_ERR_STOPPED,
                  "%s: the CpuStream was closed during the call (by code its arguments ran, or "
                  "another thread); nothing was published on it",
                  what);
    return -1;
}

/* -1 (cbt.Error ERR_STOPPED) when the stream was made in another process:
 * a forked child has a copy of it but no worker, so waiting would hang. */
static int foreign_stream(CpuStreamObject *self, const char *what)
{
    if (self->pid == getpid())
        return 0;
    raise_statusf(CBT_ERR_STOPPED,
                  "%s: this CpuStream was created in process %ld, before a fork; its worker "
                  "thread is not in this process (make streams after the fork)",
                  what, (long)self->pid);
    return -1;
}

/* -1 (cbt.Error ERR_INVAL) when called from work running on this stream. */
static int own_work(CpuStreamObject *self, const char *what)
{
    cbt_stream *s = self->s ? self->s : self->closing;
    if (!s || t_running_stream != s)
        return 0;
    raise_statusf(CBT_ERR_INVAL,
                  "%s: called from its own work (a callable enqueued on this stream) it would "
                  "wait on itself",
                  what);
    return -1;
}

static int resolve_cuda_handle(PyObject *h, cbt_stream **out)
{
    PyObject *hit = PyDict_GetItemWithError(g_cuda_streams, h);
    if (hit) {
        *out = (cbt_stream *)PyLong_AsVoidPtr(hit);
        return 0;
    }
    if (PyErr_Occurred())
        return -1;
    uint64_t hv;
    if (uint_of(h, "cbt: a CUDA stream handle (cudaStream_t)", UINTPTR_MAX, &hv) < 0)
        return -1;
    void *cs = (void *)(uintptr_t)hv;
    if (PyDict_Size(g_cuda_streams) >= CUDA_STREAMS_MAX) {
        raise_statusf(CBT_ERR_FULL, "cbt: %d CUDA streams are wrapped already", CUDA_STREAMS_MAX);
        return -1;
    }
    cbt_stream *s = NULL;
    cbt_status st;
    /* the GIL released: CUDA's first call in a process makes its context
     * (tenths of a second), and the events are created here */
    Py_BEGIN_ALLOW_THREADS
    st = cbt_stream_cuda_create(cs, &s);
    Py_END_ALLOW_THREADS
    if (st != CBT_OK) {
        raise_statusf(st, "cbt: wrapping CUDA stream %R", h);
        return -1;
    }
    /* another thread may have wrapped the same stream meanwhile: use its */
    PyObject *other = PyDict_GetItemWithError(g_cuda_streams, h);
    PyObject *v = other ? NULL : PyErr_Occurred() ? NULL : PyLong_FromVoidPtr(s);
    if (other || !v || PyDict_SetItem(g_cuda_streams, h, v) < 0) {
        Py_XDECREF(v);
        Py_BEGIN_ALLOW_THREADS
        cbt_stream_destroy(s);
        Py_END_ALLOW_THREADS
        if (!other)
            return -1;
        *out = (cbt_stream *)PyLong_AsVoidPtr(other);
        return 0;
    }
    Py_DECREF(v);
    if (g_n_cuda_gen < CUDA_STREAMS_MAX) {
        g_cuda_gen[g_n_cuda_gen].s = s;
        g_cuda_gen[g_n_cuda_gen++].gen = 0; /* no mark yet */
    }
    *out = s;
    return 0;
}

/* A stream argument: a CpuStream, an int cudaStream_t, or an object with an
 * int `cuda_stream` (torch.cuda.Stream) or `ptr` (cupy). A CpuStream comes
 * back pinned in *pinned (cpu_pin: the caller unpins it on every path); a
 * CUDA stream's wrapper lives as long as the process, so *pinned is NULL. */
static int resolve_stream(PyObject *o, cbt_stream **out, CpuStreamObject **pinned)
{
    *pinned = NULL;
    if (PyObject_TypeCheck(o, &CpuStreamType)) {
        CpuStreamObject *c = (CpuStreamObject *)o;
        if (!(*out = cpu_pin(c, "cbt")))
            return -1;
        *pinned = c;
        return 0;
    }
    if (PyLong_Check(o) && !PyBool_Check(o))
        return resolve_cuda_handle(o, out);
    static const char *attrs[] = {"cuda_stream", "ptr"};
    for (int i = 0; i < 2; i++) {
        PyObject *h = PyObject_GetAttrString(o, attrs[i]);
        if (!h) {
            PyErr_Clear();
            continue;
        }
        if (!PyLong_Check(h) || PyBool_Check(h)) {
            Py_DECREF(h);
            PyErr_Format(PyExc_TypeError, "cbt: %.100s.%s is not an int stream handle",
                         tp_name_of(o), attrs[i]);
            return -1;
        }
        int r = resolve_cuda_handle(h, out);
        Py_DECREF(h);
        return r;
    }
    PyErr_Format(PyExc_TypeError,
                 "cbt: a stream is a cbt.CpuStream, a torch.cuda.Stream, an object with "
                 "cuda_stream or ptr, or an int cudaStream_t; not %.100s",
                 tp_name_of(o));
    return -1;
}

/* publish_on_stream(stream, event_type, session_id, *, pair=None, **values) */
static PyObject *py_publish_on_stream(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                      PyObject *kwnames)
{
    (void)self;
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "publish_on_stream() needs a stream");
        return NULL;
    }
    cbt_stream *s;
    CpuStreamObject *pin; /* a CpuStream, pinned: building the event runs Python code */
    if (resolve_stream(args[0], &s, &pin) < 0)
        return NULL;
    PyObject *ret = NULL;
    cbt_event ev;
    int on;
    arr_scratch sc = {.n = 0, .n_hold = 0};
    if (build_event(&ev, "publish_on_stream", args + 1, nargs - 1, kwnames, 0, &on, &sc) < 0 ||
        closed_meanwhile(pin, "cbt.publish_on_stream") < 0)
        goto out;
    if (!g_closing) { /* else a shutdown is running: no tracer */
        cbt_status st;
        if (pin)
            st = cbt_publish_on_stream(s, &ev); /* a CPU stream's worker publishes: never waits */
        else
            CALL_PUBLISH_(s, st = cbt_publish_on_stream(s, &ev));
        if (st != CBT_OK && st != CBT_ERR_FULL) {
            raise_status(st, "cbt.publish_on_stream");
            goto out;
        }
    }
    ret = Py_None;
    Py_INCREF(ret);
out:
    scratch_free(&sc); /* the publish copied the arrays' elements */
    if (pin)
        cpu_unpin(pin);
    return ret;
}

static void run_python(void *arg)
{
    work_item *w = arg;
    PyObject *fn = w->fn;
    if (py_finalizing())
        return; /* the interpreter is going away: leave fn be */
    PyGILState_STATE g = PyGILState_Ensure();
    cbt_stream *prev = t_running_stream;
    t_running_stream = w->s;
    work_errors *errs = w->errs;
    free(w);
    PyObject *r = PyObject_CallNoArgs(fn);
    if (!r) { /* kept for sync() / close() to raise, counted for stats() */
        saved_exc e;
        exc_save(&e); /* normalized, its traceback on the object */
        errs->failed++;
        errs->failed_total++;
        if (!errs->first && e.value) {
            errs->first = e.value;
            e.value = NULL;
        }
        exc_drop(&e);
    }
    work_errors_put(errs);
    Py_XDECREF(r);
    Py_DECREF(fn); /* may drop the stream's last reference: dealloc sees t_running_stream */
    t_running_stream = prev;
    PyGILState_Release(g);
}

/* An int in [0, UINT32_MAX] (not a bool): TypeError, else ValueError for a
 * negative one, OverflowError past UINT32_MAX (uint_of). NULL: keeps *out. */
static int u32_arg(PyObject *o, const char *what, uint32_t *out)
{
    uint64_t v;
    if (!o)
        return 0;
    if (uint_of(o, what, UINT32_MAX, &v) < 0)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

/* What the stream's callables raised since the last report, taken (0 when
 * none raised). *exc: the first exception, with a note saying `what`
 * reports it and how many raised. */
static int take_work_errors(CpuStreamObject *self, const char *what, PyObject **exc)
{
    work_errors *e = self->errs;
    *exc = NULL;
    if (!e || !e->failed)
        return 0;
    uint64_t n = e->failed;
    *exc = e->first;
    e->first = NULL;
    e->failed = 0;
    if (!*exc)
        return 0;
    PyObject *note = PyUnicode_FromFormat(
        "cbt: raised by a callable enqueued on a CpuStream, reported by %s: %llu of its "
        "callables raised since the last report (this is the first; stats()[\"items_failed\"] "
        "counts them all)",
        what, (unsigned long long)n);
    PyObject *r = note ? PyObject_CallMethod(*exc, "add_note", "O", note) : NULL;
    if (!r) /* before 3.11, or an exception that refuses notes: the count is in stats() */
        PyErr_Clear();
    Py_XDECREF(r);
    Py_XDECREF(note);
    return 1;
}

/* Raise what the stream's callables raised since the last report: the
 * first exception itself (its traceback on the worker kept), noted; -1, or
 * 0 when none raised. */
static int raise_work_errors(CpuStreamObject *self, const char *what)
{
    PyObject *exc;
    if (!take_work_errors(self, what, &exc))
        return 0;
    exc_raise(exc);
    return -1;
}

static PyObject *CpuStream_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"capacity", NULL};
    PyObject *cap_o = NULL;
    uint32_t cap = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:CpuStream", kwlist, &cap_o) ||
        u32_arg(cap_o, "cbt.CpuStream: capacity", &cap) < 0)
        return NULL;
    CpuStreamObject *self = (CpuStreamObject *)PyType_GenericAlloc(type, 0);
    if (!self)
        return NULL;
    self->pid = getpid();
    if (!(self->errs = calloc(1, sizeof *self->errs))) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->errs->refs = 1;
    cbt_status st;
    cbt_stream *cs = NULL;
    Py_BEGIN_ALLOW_THREADS /* it allocates the queue and starts the worker thread */
    st = cbt_stream_cpu_create(cap, &cs);
    Py_END_ALLOW_THREADS
    self->s = cs;
    if (st != CBT_OK) {
        Py_DECREF(self);
        return raise_statusf(st, "cbt.CpuStream(capacity=%u)", (unsigned)cap);
    }
    return (PyObject *)self;
}

static void destroy_unlocked(cbt_stream *s)
{
    Py_BEGIN_ALLOW_THREADS
    cbt_stream_destroy(s);
    Py_END_ALLOW_THREADS
}

static void CpuStream_dealloc(CpuStreamObject *self)
{
    /* a deallocation may come while an exception is being raised (the last
     * reference dropped on an error path): the calls below must not see it,
     * and it must survive them */
    saved_exc raising;
    exc_save(&raising);
    cbt_stream *s = self->s ? self->s : self->closing;
    self->s = self->closing = NULL;
    if (s && self->pid != getpid()) {
        /* a forked child's copy: no worker here to join; leak it */
    } else if (s && t_running_stream == s) {
        /* the last reference died in the stream's own work: destroying it
         * would join the very thread we are on. Leak it (its worker idles),
         * and say so once. */
        static int warned;
        if (!warned) {
            warned = 1;
            saved_exc e;
            exc_save(&e);
            if (PyErr_WarnEx(PyExc_ResourceWarning,
                             "cbt.CpuStream: its last reference died in its own work; the "
                             "stream is leaked (close it from another thread)",
                             1) < 0)
                PyErr_WriteUnraisable(NULL);
            exc_restore(&e);
        }
    } else if (s) {
        destroy_unlocked(s);
    }
    /* never reported: said as an unraisable exception, not lost */
    work_errors_unraisable(self->errs, "deallocated");
    work_errors_put(self->errs);
    self->errs = NULL;
    PyTypeObject *tp = Py_TYPE((PyObject *)self);
    PyObject_Free(self); /* the type's tp_free: not a GC type, not subclassable */
    Py_DECREF(tp);       /* an instance of a heap type holds a reference to it */
    exc_restore(&raising);
}

static PyObject *CpuStream_sync(CpuStreamObject *self, PyObject *unused)
{
    (void)unused;
    cbt_stream *s = self->s;
    if (!s)
        return raise_status(CBT_ERR_STOPPED, "CpuStream.sync: the stream is closed");
    if (foreign_stream(self, "CpuStream.sync") < 0 || own_work(self, "CpuStream.sync") < 0)
        return NULL;
    cbt_status st;
    if (!cpu_pin(self, "CpuStream.sync")) /* a close() meanwhile leaves it to us */
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    st = cbt_stream_sync(s);
    Py_END_ALLOW_THREADS
    cpu_unpin(self);
    if (st != CBT_OK)
        return raise_status(st, "CpuStream.sync");
    if (raise_work_errors(self, "CpuStream.sync()") < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *CpuStream_close(CpuStreamObject *self, PyObject *unused)
{
    (void)unused;
    cbt_stream *s = self->s;
    if (!s)
        Py_RETURN_NONE;
    if (foreign_stream(self, "CpuStream.close") < 0 || own_work(self, "CpuStream.close") < 0)
        return NULL;
    self->s = NULL;
    if (self->users > 0)
        self->closing = s; /* a call pins it (a sync, a publish): the last one destroys it */
    else
        destroy_unlocked(s);
    if (raise_work_errors(self, "CpuStream.close()") < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *CpuStream_enqueue(CpuStreamObject *self, PyObject *fn)
{
    if (!self->s)
        return raise_status(CBT_ERR_STOPPED, "CpuStream.enqueue: the stream is closed");
    if (foreign_stream(self, "CpuStream.enqueue") < 0)
        return NULL;
    if (!PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "CpuStream.enqueue: fn must be callable");
        return NULL;
    }
    work_item *w = malloc(sizeof *w);
    if (!w)
        return PyErr_NoMemory();
    Py_INCREF(fn);
    w->fn = fn;
    w->s = self->s;
    w->errs = self->errs;
    self->errs->refs++;
    cbt_status st = cbt_stream_enqueue(self->s, run_python, w);
    if (st != CBT_OK) {
        work_errors_put(w->errs);
        Py_DECREF(fn);
        free(w);
        return raise_status(st, "CpuStream.enqueue");
    }
    Py_RETURN_NONE;
}

static PyObject *CpuStream_stats(CpuStreamObject *self, PyObject *unused)
{
    (void)unused;
    cbt_stream *s = self->s ? self->s : self->closing;
    if (!s)
        return raise_status(CBT_ERR_STOPPED, "CpuStream.stats: the stream is closed");
    cbt_stream_stats x = CBT_STRUCT_INIT(cbt_stream_stats);
    cbt_status st = cbt_stream_stats_get(s, &x);
    if (st != CBT_OK)
        return raise_status(st, "CpuStream.stats");
    /* a callable that raised ran, but did not complete: items_failed, not
     * items_completed (its failure is counted while it runs, its run after) */
    uint64_t failed = self->errs ? self->errs->failed_total : 0;
    uint64_t completed = x.items_completed > failed ? x.items_completed - failed : 0;
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K}", "items_enqueued",
                         (unsigned long long)x.items_enqueued, "items_completed",
                         (unsigned long long)completed, "items_failed",
                         (unsigned long long)failed, "marks_published",
                         (unsigned long long)x.marks_published, "marks_dropped",
                         (unsigned long long)x.marks_dropped, "full_refusals",
                         (unsigned long long)x.full_refusals);
}

static PyObject *CpuStream_enter(PyObject *self, PyObject *unused)
{
    (void)unused;
    Py_INCREF(self);
    return self;
}

static PyObject *CpuStream_exit(CpuStreamObject *self, PyObject *args)
{
    (void)args;
    PyObject *r = CpuStream_close(self, NULL);
    if (!r)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

static PyObject *CpuStream_get_ordinal(CpuStreamObject *self, void *c)
{
    (void)c;
    if (!self->s)
        return raise_status(CBT_ERR_STOPPED, "CpuStream.ordinal: the stream is closed");
    return PyLong_FromUnsignedLong(cbt_stream_ordinal(self->s));
}

static PyObject *CpuStream_get_closed(CpuStreamObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->s == NULL);
}

static PyMethodDef CpuStream_methods[] = {
    {"sync", (PyCFunction)CpuStream_sync, METH_NOARGS,
     "Wait (GIL released) until everything enqueued so far has run."},
    {"close", (PyCFunction)CpuStream_close, METH_NOARGS,
     "Drain, stop the worker and free the stream (GIL released). Idempotent."},
    {"enqueue", (PyCFunction)CpuStream_enqueue, METH_O,
     "Run fn() on the stream's worker thread, after everything enqueued before it."},
    {"stats", (PyCFunction)CpuStream_stats, METH_NOARGS, "The stream's counters, a dict."},
    {"__enter__", CpuStream_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)CpuStream_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef CpuStream_getset[] = {
    {"ordinal", (getter)CpuStream_get_ordinal, NULL, "The stream's number in the process.", NULL},
    {"closed", (getter)CpuStream_get_closed, NULL, "True once closed.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* A heap type (module_exec makes it). Not GC-tracked: it holds no Python
 * object. Immutable and not subclassable, as the static type it replaced. */
static PyType_Slot CpuStream_slots[] = {
    {Py_tp_dealloc, SLOT_FN_(CpuStream_dealloc)},
    {Py_tp_doc, "CpuStream(capacity=0): a cbt CPU stream (a worker thread running its queue in "
                "order, stamping marks when it reaches them)."},
    {Py_tp_methods, CpuStream_methods},
    {Py_tp_getset, CpuStream_getset},
    {Py_tp_new, SLOT_FN_(CpuStream_new)},
    {0, NULL},
};
static PyType_Spec CpuStream_spec = {
    .name = "cbt.CpuStream",
    .basicsize = sizeof(CpuStreamObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = CpuStream_slots,
};

/* ---- init / shutdown / flush / metrics ------------------------------------------- */

static int get_u32(PyObject *o, const char *name, uint32_t *out)
{
    if (!o || o == Py_None)
        return 0;
    if (!PyLong_Check(o) || PyBool_Check(o)) {
        PyErr_Format(PyExc_TypeError, "cbt.init: %s is an int, not %.100s", name,
                     tp_name_of(o));
        return -1;
    }
    unsigned long v = PyLong_AsUnsignedLong(o);
    if ((v == (unsigned long)-1 && PyErr_Occurred()) || v > UINT32_MAX) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "cbt.init: %s must be in [0, %lu]", name,
                     (unsigned long)UINT32_MAX);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

static int get_bool_in(const char *fn, PyObject *o, const char *name, bool *out)
{
    if (!o || o == Py_None)
        return 0;
    if (PyBool_Check(o)) {
        *out = o == Py_True;
        return 0;
    }
    if (PyLong_Check(o)) { /* 0 or 1 */
        int of = 0;
        long v = PyLong_AsLongAndOverflow(o, &of);
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (!of && (v == 0 || v == 1)) {
            *out = v == 1;
            return 0;
        }
        PyObject *e = echo(o);
        if (e)
            PyErr_Format(PyExc_ValueError, "%s: %s is a bool (or 0 or 1), not %U", fn, name, e);
        Py_XDECREF(e);
        return -1;
    }
    PyErr_Format(PyExc_TypeError, "%s: %s is a bool, not %.100s", fn, name,
                 tp_name_of(o));
    return -1;
}

static int get_bool(PyObject *o, const char *name, bool *out)
{
    return get_bool_in("cbt.init", o, name, out);
}

#define CBT_METRICS_FIELDS(X)                                                                   \
    X(published) X(dropped_full) X(rejected) X(session_too_long) X(dispatched)                  \
    X(subscriber_errors) X(sink_errors) X(queue_depth) X(queue_capacity) X(lanes)               \
    X(pending_stream_marks) X(lag_last_ns) X(lag_max_ns) X(spans_started) X(spans_ended)       \
    X(spans_dropped) X(spans_open) X(registry_full) X(harvester_busy_ns) X(spans_unsampled)    \
    X(meta_truncated) X(stream_marks_dropped) X(sink_spans_lost) X(harvester_wakeups)      \
    X(trace_records) X(trace_records_dropped) X(trace_bytes) X(trace_write_errors)             \
    X(names_used) X(names_capacity) X(names_refused)                                          \
    X(arrays_capacity) X(arrays_used) X(arrays_stored) X(arrays_dropped)

static PyObject *metrics_dict(const cbt_metrics *m)
{
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
#define CBT_PUT_(f)                                                                             \
    {                                                                                           \
        PyObject *v = PyLong_FromUnsignedLongLong((unsigned long long)m->f);                   \
        if (!v || PyDict_SetItemString(d, #f, v) < 0) {                                         \
            Py_XDECREF(v);                                                                      \
            Py_DECREF(d);                                                                       \
            return NULL;                                                                        \
        }                                                                                       \
        Py_DECREF(v);                                                                           \
    }
    CBT_METRICS_FIELDS(CBT_PUT_)
#undef CBT_PUT_
    return d;
}

/* cbt.init's otlp_protocol: the OTEL_EXPORTER_OTLP_PROTOCOL spellings.
 * None (Py_None) = the environment decides (*out -1); else 0 and *out, or
 * -1 with ValueError / TypeError naming the value. Checked in every build,
 * exporter or not: a bad value is the caller's mistake either way. */
static int otlp_protocol_of(const char *fn, PyObject *o, int *out)
{
    *out = -1;
    if (o == Py_None)
        return 0;
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError,
                     "%s: otlp_protocol is 'grpc', 'http/protobuf', 'http/json' or None, not "
                     "%.100s", fn, tp_name_of(o));
        return -1;
    }
    const char *v = PyUnicode_AsUTF8AndSize(o, NULL);
    if (!v)
        return -1;
    if (!strcmp(v, "grpc"))
        *out = CBT_OTLP_GRPC;
    else if (!strcmp(v, "http/protobuf"))
        *out = CBT_OTLP_HTTP_PROTOBUF;
    else if (!strcmp(v, "http/json"))
        *out = CBT_OTLP_HTTP_JSON;
    else {
        PyObject *e = echo(o);
        if (e)
            PyErr_Format(PyExc_ValueError,
                         "%s: otlp_protocol %U is not one of 'grpc', 'http/protobuf', "
                         "'http/json' (the OTEL_EXPORTER_OTLP_PROTOCOL values)", fn, e);
        Py_XDECREF(e);
        return -1;
    }
    return 0;
}

#ifdef CBT_WITH_OTLP
static const char *nonempty_env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* The endpoints for `grpc` (or OTLP/HTTP) from the OTEL_EXPORTER_OTLP_*
 * endpoint variables, as the OpenTelemetry SDKs read them: for gRPC every
 * variable is the collector's base URL, used as is; for HTTP the signal's own
 * variable is used as is and the general one gets /v1/traces, /v1/metrics.
 * For an otlp_protocol given to init that is not the transport the
 * environment's protocol made the endpoints for. 0, or -1 (ValueError). */
static int otlp_env_endpoints(const char *fn, int grpc, cbt_otlp_config *c)
{
    const char *base = nonempty_env("OTEL_EXPORTER_OTLP_ENDPOINT");
    const char *tr = nonempty_env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    const char *me = nonempty_env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT");
    size_t bl = base ? strlen(base) : 0;
    const char *slash = bl && base[bl - 1] == '/' ? "" : "/";
    int n1 = tr ? snprintf(c->endpoint, sizeof c->endpoint, "%s", tr)
             : !base ? 0
             : grpc ? snprintf(c->endpoint, sizeof c->endpoint, "%s", base)
                    : snprintf(c->endpoint, sizeof c->endpoint, "%s%sv1/traces", base, slash);
    int n2 = me ? snprintf(c->metrics_endpoint, sizeof c->metrics_endpoint, "%s", me)
             : !base ? 0
             : grpc ? snprintf(c->metrics_endpoint, sizeof c->metrics_endpoint, "%s", base)
                    : snprintf(c->metrics_endpoint, sizeof c->metrics_endpoint, "%s%sv1/metrics",
                               base, slash);
    if (n1 < 0 || (size_t)n1 >= sizeof c->endpoint || n2 < 0 ||
        (size_t)n2 >= sizeof c->metrics_endpoint) {
        PyErr_Format(PyExc_ValueError, "%s: an OTEL_EXPORTER_OTLP_*ENDPOINT is too long", fn);
        return -1;
    }
    return 0;
}

/* The OTLP exporter for init (and replay; `fn` names the call in errors), in
 * three steps, so that init makes the cbt calls with the GIL released:
 * otlp_config fills *c (1: an exporter is wanted, 0: none, -1: a Python
 * error), otlp_start creates it and adds its sink (cbt calls only: no GIL
 * needed), otlp_started raises what otlp_start returned or notes the
 * exporter. `endpoint` NULL = the environment decides (an
 * OTEL_EXPORTER_OTLP[_TRACES]_ENDPOINT set); "" = none; else, for OTLP/HTTP,
 * a collector base URL (/v1/traces and /v1/metrics appended) or the full
 * traces URL, and for gRPC the collector's base URL (http://host:4317),
 * used as is for both signals. `protocol` -1 = the environment's
 * (OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL, else http/protobuf); else a
 * cbt_otlp_protocol that wins over it. */
static int otlp_config(const char *fn, const char *endpoint, int protocol,
                       const char *service_name, cbt_otlp_config *out)
{
    if (endpoint && !*endpoint)
        return 0;
    if (!endpoint) {
        const char *a = getenv("OTEL_EXPORTER_OTLP_ENDPOINT");
        const char *b = getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        if (!(a && *a) && !(b && *b))
            return 0;
    }
    cbt_otlp_config c;
    cbt_otlp_config_default(&c);
    /* the caller's protocol first: where no OTEL_*_PROTOCOL says otherwise,
     * the environment's endpoint is read by its rules (a scheme-less
     * host:4317 is a valid gRPC endpoint, not an invalid OTLP/HTTP one) */
    if (protocol >= 0)
        c.protocol = (cbt_otlp_protocol)protocol;
    if (cbt_otlp_config_from_env(&c, stderr) != CBT_OK) {
        raise_statusf(CBT_ERR_INVAL, "%s: the OTEL_* environment (see stderr)", fn);
        return -1;
    }
    if (c.disabled)
        return 0; /* OTEL_SDK_DISABLED=true */
    int env_grpc = c.protocol == CBT_OTLP_GRPC;
    if (protocol >= 0)
        c.protocol = (cbt_otlp_protocol)protocol;
    int grpc = c.protocol == CBT_OTLP_GRPC;
    if (!endpoint && grpc != env_grpc && otlp_env_endpoints(fn, grpc, &c) < 0)
        return -1;
    if (endpoint) {
        size_t l = strlen(endpoint);
        int traces_url = l >= 10 && strcmp(endpoint + l - 10, "/v1/traces") == 0;
        if (strncmp(endpoint, "http://", 7) && strncmp(endpoint, "https://", 8)) {
            PyObject *e = echo_c(endpoint);
            if (e)
                PyErr_Format(PyExc_ValueError, "%s: otlp_endpoint %U is not an http(s) URL "
                                               "(OTLP/HTTP: the collector's port 4318, e.g. "
                                               "http://host:4318; gRPC: http://host:4317)",
                             fn, e);
            Py_XDECREF(e);
            return -1;
        }
        int n1, n2;
        if (grpc) {
            if (traces_url) {
                PyObject *e = echo_c(endpoint);
                if (e)
                    PyErr_Format(PyExc_ValueError,
                                 "%s: otlp_endpoint %U is an OTLP/HTTP traces URL, but "
                                 "otlp_protocol is grpc: give the collector's base URL "
                                 "(http://host:4317)", fn, e);
                Py_XDECREF(e);
                return -1;
            }
            int base_len = endpoint[l - 1] == '/' ? (int)l - 1 : (int)l;
            n1 = snprintf(c.endpoint, sizeof c.endpoint, "%.*s", base_len, endpoint);
            n2 = snprintf(c.metrics_endpoint, sizeof c.metrics_endpoint, "%.*s", base_len,
                          endpoint);
        } else {
            const char *suffix =
                traces_url ? "" : (endpoint[l - 1] == '/' ? "v1/traces" : "/v1/traces");
            int base_len = traces_url ? (int)(l - 10) : (int)l;
            const char *msuffix =
                !traces_url && endpoint[l - 1] == '/' ? "v1/metrics" : "/v1/metrics";
            n1 = snprintf(c.endpoint, sizeof c.endpoint, "%s%s", endpoint, suffix);
            n2 = snprintf(c.metrics_endpoint, sizeof c.metrics_endpoint, "%.*s%s", base_len,
                          endpoint, msuffix);
        }
        if (n1 < 0 || (size_t)n1 >= sizeof c.endpoint || n2 < 0 ||
            (size_t)n2 >= sizeof c.metrics_endpoint) {
            PyErr_Format(PyExc_ValueError, "%s: otlp_endpoint is too long", fn);
            return -1;
        }
    }
    if (service_name) {
        if (strlen(service_name) >= sizeof c.resource.service_name) {
            PyErr_Format(PyExc_ValueError, "%s: service_name is too long", fn);
            return -1;
        }
        strcpy(c.resource.service_name, service_name);
    }
    g_otlp_final = (cbt_otlp_stats)CBT_STRUCT_INIT(cbt_otlp_stats);
    c.final_stats = &g_otlp_final;
    *out = c;
    return 1;
}

static cbt_status otlp_start(const cbt_otlp_config *c)
{
    cbt_otlp_exporter *e = NULL;
    cbt_sink sk;
    cbt_status st = cbt_otlp_exporter_create(c, &e, &sk);
    if (st == CBT_OK && (st = cbt_add_sink(&sk)) != CBT_OK && sk.destroy)
        sk.destroy(sk.ctx);
    return st;
}

static int otlp_started(const char *fn, cbt_status st, const cbt_otlp_config *c)
{
    if (st != CBT_OK) {
        raise_statusf(st, "%s: starting the OTLP exporter for %s", fn, c->endpoint);
        return -1;
    }
    g_otlp_on = 1;
    return 0;
}

/* All three, the GIL held (replay: nothing else runs meanwhile). */
static int add_otlp(const char *fn, const char *endpoint, const char *service_name)
{
    cbt_otlp_config c;
    int want = otlp_config(fn, endpoint, -1, service_name, &c);
    if (want <= 0)
        return want;
    return otlp_started(fn, otlp_start(&c), &c);
}
#endif

/* What an error about file `path` adds when it is a FIFO: cbt opens it
 * without waiting for a reader, so a FIFO no process reads is refused. */
static const char *fifo_hint(const char *path)
{
    struct stat sb;
    if (path && stat(path, &sb) == 0 && S_ISFIFO(sb.st_mode))
        return " is a FIFO with no reader (cbt does not wait for one: open it for reading "
               "before cbt.init)";
    return "";
}

/* PyUnicode_FSConverter, None allowed (*out NULL). */
static int fs_or_none(PyObject *o, void *out)
{
    if (o == Py_None) {
        *(PyObject **)out = NULL;
        return 1;
    }
    return PyUnicode_FSConverter(o, out);
}

static PyObject *py_init(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"enabled", "mp_subscriber", "queue_capacity", "lane_capacity",
                             "max_lanes", "span_pool", "registry_capacity", "max_sessions",
                             "poll_interval_us", "idle_sleep_ms", "shutdown_timeout_ms",
                             "ring_capacity", "cuda_ring_capacity", "session_idle_ms",
                             "late_grace_ms", "spans_path", "trace_path", "otlp_endpoint",
                             "service_name", "mp_root_end", "cb_subscriber", "trace_level",
                             "trace_output", "trace_buffer_kib", "otlp_protocol",
                             "names_capacity", "otlp_json_path", "arrays_capacity",
                             "token_trace", NULL};
    PyObject *o[15] = {NULL};
    PyObject *spans = NULL, *trace = NULL, *endpoint = Py_None, *service = Py_None,
             *root_end = Py_None, *cbsub = NULL, *level = Py_None, *tout = NULL, *tkib = NULL,
             *proto = Py_None, *names_cap = NULL, *ojson = NULL, *arr_cap = NULL,
             *ttrace = Py_None;
    if (PyTuple_Size(args)) {
        PyErr_SetString(PyExc_TypeError, "cbt.init() takes keyword arguments only");
        return NULL;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOOOOOOOOOOOOOO&O&OOOOOO&OOOO&OO:init", kwlist,
                                     &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7],
                                     &o[8], &o[9], &o[10], &o[11], &o[12], &o[13], &o[14],
                                     fs_or_none, &spans, fs_or_none, &trace, &endpoint,
                                     &service, &root_end, &cbsub, &level, fs_or_none, &tout,
                                     &tkib, &proto, &names_cap, fs_or_none, &ojson, &arr_cap, &ttrace))
        return NULL;
    PyObject *ret = NULL;
    if (g_closing) {
        raise_status(CBT_ERR_ALREADY, "cbt.init: another thread is shutting the tracer down");
        goto out;
    }
    if (g_replaying) {
        raise_status(CBT_ERR_ALREADY, "cbt.init: a cbt.replay is running (it has the process's "
                                      "one tracer until it returns)");
        goto out;
    }
    cbt_config c = cbt_config_default();
    uint32_t *u32[13] = {&c.queue_capacity,    &c.lane_capacity,    &c.max_lanes,
                         &c.span_pool,         &c.registry_capacity, &c.max_sessions,
                         &c.poll_interval_us,  &c.idle_sleep_ms,    &c.shutdown_timeout_ms,
                         &c.ring_capacity,     &c.cuda_ring_capacity, &c.session_idle_ms,
                         &c.late_grace_ms};
    bool want_cb = true; /* the CacheBlend builder, as cbt replay installs it */
    if (get_bool(o[0], "enabled", &c.enabled) < 0 ||
        get_bool(o[1], "mp_subscriber", &c.mp_subscriber) < 0 ||
        get_bool(cbsub, "cb_subscriber", &want_cb) < 0)
        goto out;
    for (int i = 0; i < 13; i++)
        if (get_u32(o[2 + i], kwlist[2 + i], u32[i]) < 0)
            goto out;
    /* trace recording (cbt/replay.h). "gpu" is the one level cbt records;
     * "" is off whatever CBT_TRACE_LEVEL says (as the C library reads an
     * empty cbt_config.trace_level); None leaves it to CBT_TRACE_LEVEL. */
    if (level != Py_None) {
        if (!PyUnicode_Check(level)) {
            PyErr_Format(PyExc_TypeError, "cbt.init: trace_level is 'gpu' or None, not %.100s",
                         tp_name_of(level));
            goto out;
        }
        const char *l = PyUnicode_AsUTF8AndSize(level, NULL);
        if (!l)
            goto out;
        if (strcmp(l, "gpu") != 0 && *l) {
            PyObject *e = echo(level);
            if (e)
                PyErr_Format(PyExc_ValueError,
                             "cbt.init: trace_level is 'gpu' (the one level cbt records) or "
                             "None, not %U", e);
            Py_XDECREF(e);
            goto out;
        }
        c.trace_level = l; /* `level` is the caller's: alive until init returns */
    }
    if (get_u32(tkib, "trace_buffer_kib", &c.trace_buffer_kib) < 0 ||
        get_u32(names_cap, "names_capacity", &c.names_capacity) < 0)
        goto out;
    if (ttrace != Py_None) { /* None: CBT_TOKEN_TRACE decides */
        bool on = false;
        if (get_bool(ttrace, "token_trace", &on) < 0)
            goto out;
        c.token_trace = on ? CBT_TOKEN_TRACE_ON : CBT_TOKEN_TRACE_OFF;
    }
    if (arr_cap && arr_cap != Py_None) { /* the process-wide array store (cbt/array.h) */
        if (!PyLong_Check(arr_cap) || PyBool_Check(arr_cap)) {
            PyErr_Format(PyExc_TypeError, "cbt.init: arrays_capacity is an int (bytes), not %.100s",
                         tp_name_of(arr_cap));
            goto out;
        }
        if (uint_of(arr_cap, "cbt.init: arrays_capacity (bytes)", UINT64_MAX, &c.arrays_capacity) < 0)
            goto out;
    }
    c.trace_output = tout ? PyBytes_AsString(tout) : NULL; /* kept until `out` */
    const char *env_level = getenv("CBT_TRACE_LEVEL");
    int recording = c.trace_level ? *c.trace_level != 0 : env_level && *env_level;
    if (root_end != Py_None) {
        if (PyUnicode_Check(root_end)) {
            const char *r = PyUnicode_AsUTF8AndSize(root_end, NULL);
            if (!r)
                goto out;
            if (!strcmp(r, "request_end") || !strcmp(r, "request"))
                c.mp_root_end = CBT_ROOT_END_REQUEST;
            else if (!strcmp(r, "transfer_end"))
                c.mp_root_end = CBT_ROOT_END_TRANSFER;
            else {
                PyObject *e = echo(root_end);
                if (e)
                    PyErr_Format(PyExc_ValueError,
                                 "cbt.init: mp_root_end is 'request_end' (alias 'request') or "
                                 "'transfer_end', not %U",
                                 e);
                Py_XDECREF(e);
                goto out;
            }
        } else {
            PyErr_SetString(PyExc_TypeError,
                            "cbt.init: mp_root_end is 'request_end' (alias 'request'), "
                            "'transfer_end' or None");
            goto out;
        }
    }
    const char *ep = NULL, *svc = NULL;
    int protocol; /* -1: the environment's */
    if (otlp_protocol_of("cbt.init", proto, &protocol) < 0)
        goto out;
    if (endpoint != Py_None) {
        if (!PyUnicode_Check(endpoint)) {
            PyErr_SetString(PyExc_TypeError, "cbt.init: otlp_endpoint is a str or None");
            goto out;
        }
        if (!(ep = utf8_of(endpoint, NULL, "cbt.init: otlp_endpoint")))
            goto out;
    }
    if (service != Py_None) {
        if (!PyUnicode_Check(service)) {
            PyErr_SetString(PyExc_TypeError, "cbt.init: service_name is a str or None");
            goto out;
        }
        if (!(svc = utf8_of(service, NULL, "cbt.init: service_name")))
            goto out;
    }
#ifndef CBT_WITH_OTLP
    if (ep && *ep) {
        raise_status(CBT_ERR_UNSUPPORTED,
                     "cbt.init: otlp_endpoint: this build has no OTLP exporter (protobuf-c or "
                     "libcurl was missing when the package was built)");
        goto out;
    }
    (void)svc, (void)protocol;
#endif
    c.jsonl_path = spans ? PyBytes_AsString(spans) : NULL;
    const char *trace_p = trace ? PyBytes_AsString(trace) : NULL;
    /* the OTLP JSON file: the keyword, else CBT_OTLP_JSON_PATH; "" is none */
    const char *env_ojson = getenv(CBT_OTLP_JSON_PATH_ENV);
    const char *ojson_p = ojson ? PyBytes_AsString(ojson) : env_ojson;
    if (ojson_p && !*ojson_p)
        ojson_p = NULL;
#ifndef CBT_WITH_OTLP
    if (ojson_p) {
        raise_status(CBT_ERR_UNSUPPORTED,
                     "cbt.init: otlp_json_path: this build has no OTLP encoder (protobuf-c or "
                     "libcurl was missing when the package was built)");
        goto out;
    }
#else
    /* its resource: the exporter's (the environment's, then service_name) */
    cbt_otlp_resource ores;
    cbt_otlp_resource_default(&ores);
    if (ojson_p) {
        cbt_otlp_resource_from_env(&ores, stderr);
        if (svc)
            snprintf(ores.service_name, sizeof ores.service_name, "%s", svc);
    }
#endif
#ifdef CBT_WITH_OTLP
    cbt_otlp_config oc;
    int want_otlp = otlp_config("cbt.init", ep, protocol, svc, &oc);
    if (want_otlp < 0)
        goto out;
#endif
    /* checked again here: the argument conversions may have run Python code,
     * and another thread with it */
    if (g_closing || g_replaying || g_starting) {
        raise_status(CBT_ERR_ALREADY,
                     g_closing ? "cbt.init: another thread is shutting the tracer down"
                     : g_replaying ? "cbt.init: a cbt.replay is running (it has the process's "
                                     "one tracer until it returns)"
                                   : "cbt.init: another thread is starting a tracer");
        goto out;
    }
    /* The cbt calls, the GIL released: cbt_init calibrates the clock (10 ms)
     * and opens the span file, the sinks open theirs (a sink that may wait
     * gets a thread of its own). Only C locals and the bytes this call holds are
     * used; a shutdown meanwhile waits for it (g_in_tracer). */
    cbt_status st, cb_st = CBT_OK, trace_st = CBT_OK, ojson_st = CBT_OK;
#ifdef CBT_WITH_OTLP
    cbt_status otlp_st = CBT_OK;
#endif
    g_starting = 1;
    atomic_fetch_add_explicit(&g_in_tracer, 1, memory_order_relaxed);
    Py_BEGIN_ALLOW_THREADS
    st = cbt_init(&c);
    if (st == CBT_OK && c.enabled && want_cb) {
        cbt_subscriber cb;
        if ((cb_st = cbt_cb_subscriber_create(c.max_sessions, &cb)) == CBT_OK &&
            (cb_st = cbt_add_subscriber(&cb)) != CBT_OK && cb.destroy)
            cb.destroy(cb.ctx); /* not added: the tracer will not free it */
    }
    if (st == CBT_OK && c.enabled && cb_st == CBT_OK && trace_p) {
        cbt_sink sk;
        if ((trace_st = cbt_trace_file_sink_create(trace_p, &sk)) == CBT_OK &&
            (trace_st = cbt_add_sink(&sk)) != CBT_OK && sk.destroy)
            sk.destroy(sk.ctx);
    }
#ifdef CBT_WITH_OTLP
    if (st == CBT_OK && c.enabled && cb_st == CBT_OK && trace_st == CBT_OK && ojson_p) {
        cbt_sink sk;
        if ((ojson_st = cbt_otlp_json_sink_create(ojson_p, &ores, &sk)) == CBT_OK &&
            (ojson_st = cbt_add_sink(&sk)) != CBT_OK && sk.destroy)
            sk.destroy(sk.ctx);
    }
    if (st == CBT_OK && c.enabled && cb_st == CBT_OK && trace_st == CBT_OK &&
        ojson_st == CBT_OK && want_otlp)
        otlp_st = otlp_start(&oc);
#endif
    tracer_leave();
    Py_END_ALLOW_THREADS
    g_starting = 0;
    if (st != CBT_OK) {
        if (st == CBT_ERR_ALREADY && g_forked_child)
            raise_status(st, "cbt.init: this process was forked while its parent's tracer ran; "
                             "the child inherits it and cannot start its own (fork before "
                             "cbt.init, or use the 'spawn' start method)");
        else if (st == CBT_ERR_IO && (spans || recording)) {
            PyObject *es = spans ? echo(spans) : PyUnicode_FromString("");
            PyObject *eo = tout ? echo(tout)
                                : PyUnicode_FromString(
                                      "(CBT_TRACE_OUTPUT or the default under $TMPDIR)");
            if (es && eo && spans && recording)
                raise_statusf(st, "cbt.init: the span file %U%s or the trace output %U (see "
                                  "stderr)", es, fifo_hint(c.jsonl_path), eo);
            else if (es && eo && spans)
                raise_statusf(st, "cbt.init: the span file %U%s", es, fifo_hint(c.jsonl_path));
            else if (es && eo)
                raise_statusf(st, "cbt.init: the trace output %U", eo);
            Py_XDECREF(es);
            Py_XDECREF(eo);
        } else if (st == CBT_ERR_UNSUPPORTED && recording)
            raise_status(st, "cbt.init: trace recording: this build has no msgpack-c "
                             "(CBT_WITH_MSGPACK was off when the package was built)");
        else if (st == CBT_ERR_INVAL || st == CBT_ERR_VERSION) {
            /* the core's detail on this thread (cbt_init ran here): the field,
             * its value and the rule it breaks */
            char what[320];
            snprintf(what, sizeof what, "cbt.init: %s", *cbt_last_error() ? cbt_last_error()
                                                                          : "a config field");
            raise_status_field(st, cbt_last_error_field(), what);
        } else
            raise_status(st, "cbt.init");
        goto out;
    }
    if (!c.enabled) {
        ret = Py_None;
        Py_INCREF(ret);
        goto out;
    }
    g_tracer_gen++; /* every thread's next publish is its first under this tracer */
    if (cb_st != CBT_OK) {
        raise_status(cb_st, "cbt.init: the CacheBlend (cb.*) span builder");
        goto fail_tracer;
    }
    if (trace_st != CBT_OK) {
        PyObject *e = echo(trace);
        if (e)
            raise_statusf(trace_st, "cbt.init: the trace file %U%s", e, fifo_hint(trace_p));
        Py_XDECREF(e);
        goto fail_tracer;
    }
    if (ojson_st != CBT_OK) {
        PyObject *e = ojson ? echo(ojson) : PyUnicode_DecodeFSDefault(ojson_p);
        if (e)
            raise_statusf(ojson_st, "cbt.init: the OTLP JSON file %U%s%s", e,
                          ojson ? "" : " (" CBT_OTLP_JSON_PATH_ENV ")", fifo_hint(ojson_p));
        Py_XDECREF(e);
        goto fail_tracer;
    }
#ifdef CBT_WITH_OTLP
    g_otlp_on = 0;
    if (want_otlp && otlp_started("cbt.init", otlp_st, &oc) < 0)
        goto fail_tracer;
#endif
    ret = Py_None;
    Py_INCREF(ret);
    goto out;
fail_tracer: {
    saved_exc e;
    exc_save(&e);
    g_closing++;
    Py_BEGIN_ALLOW_THREADS
    tracer_quiesce();
    cbt_shutdown();
    Py_END_ALLOW_THREADS
    g_closing--;
    exc_restore(&e);
}
out:
    Py_XDECREF(spans);
    Py_XDECREF(trace);
    Py_XDECREF(tout);
    Py_XDECREF(ojson);
    return ret;
}

static PyObject *py_shutdown(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    if (g_inherited) /* its harvester thread is the parent's: joining it would hang */
        return raise_status(CBT_ERR_STOPPED,
                            "cbt.shutdown: this process was forked while its parent's tracer "
                            "ran; that tracer belongs to the parent");
    if (g_closing) /* another thread is shutting the tracer down */
        return PyDict_New();
    if (g_replaying) /* freeing the replay tracer under cbt_replay_run: never */
        return raise_status(CBT_ERR_ALREADY, "cbt.shutdown: a cbt.replay is running; it shuts "
                                             "its replay tracer down itself when it returns");
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    cbt_status st;
    g_closing++;
    Py_BEGIN_ALLOW_THREADS
    tracer_quiesce(); /* flushes, metrics, an init running on other threads: each bounded */
    st = cbt_shutdown_final(&m);
    Py_END_ALLOW_THREADS
    g_closing--;
    if (st == CBT_ERR_NOT_INITIALIZED)
        return PyDict_New(); /* no tracer: nothing was shut down */
    if (st != CBT_OK)
        return raise_status(st, "cbt.shutdown");
    PyObject *d = metrics_dict(&m);
#ifdef CBT_WITH_OTLP
    if (d && g_otlp_on) {
        const cbt_otlp_stats *o = &g_otlp_final;
        PyObject *od = Py_BuildValue(
            "{s:K,s:K,s:K,s:K,s:K,s:K}", "spans_queued", (unsigned long long)o->spans_queued,
            "spans_exported", (unsigned long long)o->spans_exported, "spans_dropped",
            (unsigned long long)o->spans_dropped, "batches_sent",
            (unsigned long long)o->batches_sent, "batches_failed",
            (unsigned long long)o->batches_failed, "retries", (unsigned long long)o->retries);
        if (!od || PyDict_SetItemString(d, "otlp", od) < 0) {
            Py_XDECREF(od);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(od);
        g_otlp_on = 0;
    }
#endif
    return d;
}

static PyObject *py_enabled(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    return PyBool_FromLong(cbt_enabled());
}

/* cbt_flush(timeout_ms) in slices of at most FLUSH_SLICE_MS, the GIL
 * released, so that a shutdown another thread starts (it waits for this
 * call: tracer_quiesce) waits one slice at most, not the whole timeout: the
 * flush then ends with CBT_OK, as the shutdown will dispatch and flush
 * everything. A later slice's flush covers what an earlier one asked for. */
#define FLUSH_SLICE_MS 100u
static cbt_status flush_sliced(uint32_t timeout_ms)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        uint64_t spent = (uint64_t)(now.tv_sec - t0.tv_sec) * 1000u +
                         (uint64_t)((now.tv_nsec - t0.tv_nsec) / 1000000L);
        uint32_t left = spent >= timeout_ms ? 0 : timeout_ms - (uint32_t)spent;
        uint32_t slice = left < FLUSH_SLICE_MS ? left : FLUSH_SLICE_MS;
        cbt_status st = cbt_flush(slice);
        if (st != CBT_ERR_TIMEOUT || slice == left)
            return st;
        if (atomic_load_explicit(&g_closing, memory_order_relaxed))
            return CBT_OK;
    }
}

static PyObject *py_flush(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"timeout_ms", NULL};
    PyObject *t_o = NULL;
    uint32_t timeout = 5000;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:flush", kwlist, &t_o) ||
        u32_arg(t_o, "cbt.flush: timeout_ms", &timeout) < 0)
        return NULL;
    if (!cbt_enabled() || !tracer_enter()) /* no tracer, or a shutdown is running */
        Py_RETURN_NONE;
    cbt_status st;
    Py_BEGIN_ALLOW_THREADS
    st = flush_sliced(timeout);
    tracer_leave();
    Py_END_ALLOW_THREADS
    if (st == CBT_ERR_NOT_INITIALIZED) /* shut down meanwhile */
        Py_RETURN_NONE;
    if (st != CBT_OK)
        return raise_statusf(st, "cbt.flush(timeout_ms=%u)", (unsigned)timeout);
    Py_RETURN_NONE;
}

static PyObject *py_metrics(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    if (g_replaying) /* the replay tracer's figures are what cbt.replay returns */
        return raise_status(CBT_ERR_ALREADY, "cbt.metrics: a cbt.replay is running (its final "
                                             "metrics are in what it returns)");
    if (!tracer_enter()) /* a shutdown is freeing the tracer */
        return raise_status(CBT_ERR_NOT_INITIALIZED, "cbt.metrics: the tracer is shutting down");
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    cbt_status st;
    Py_BEGIN_ALLOW_THREADS /* it never waits (counters); released all the same */
    st = cbt_metrics_get(&m);
    tracer_leave();
    Py_END_ALLOW_THREADS
    if (st != CBT_OK)
        return raise_status(st, "cbt.metrics");
    return metrics_dict(&m);
}

/* ---- replay (cbt/replay.h) -------------------------------------------------------- */

/* on_span: a sink that hands each span's JSON line (cbt_span_to_json, the
 * span file's own line) to a Python callable. cbt_replay_run calls it on the
 * replay's thread with the GIL held (replay keeps it when there is a
 * callback); cbt_shutdown ends the spans still open and calls it with the
 * GIL released, so it takes the GIL itself (PyGILState_Ensure works either
 * way). After the callable raises, the exception is kept for cbt.replay to
 * raise and no later span reaches it (each counts as a sink error). */
typedef struct {
    PyObject *fn;  /* borrowed: cbt.replay's argument outlives the tracer */
    saved_exc exc; /* the first exception the callable raised */
    int failed;
} py_span_sink;

/* cbt_replay_options.stop: the replay stops once on_span has raised, or a
 * signal handler (Ctrl-C's KeyboardInterrupt) raised; its exception is kept
 * as on_span's is, for cbt.replay to raise. Between batches of records. */
static int py_replay_stop(void *ctx)
{
    py_span_sink *k = ctx;
    if (k->failed)
        return 1;
    PyGILState_STATE g = PyGILState_Ensure();
    if (!k->failed && PyErr_CheckSignals() < 0) {
        k->failed = 1;
        exc_save(&k->exc);
    }
    int failed = k->failed;
    PyGILState_Release(g);
    return failed;
}

static cbt_status py_span_sink_on_span(void *ctx, const cbt_span *s)
{
    py_span_sink *k = ctx;
    if (k->failed)
        return CBT_ERR_INVAL;
    char stack[8192], *buf = stack;
    size_t n = cbt_span_to_json(s, buf, sizeof stack);
    if (n >= sizeof stack) {
        if (!(buf = malloc(n + 1)))
            return CBT_ERR_NOMEM;
        n = cbt_span_to_json(s, buf, n + 1);
    }
    PyGILState_STATE g = PyGILState_Ensure();
    if (!k->failed) { /* another thread's span may have failed meanwhile */
        PyObject *line = PyUnicode_DecodeUTF8(buf, (Py_ssize_t)n, "replace");
        PyObject *r = line ? PyObject_CallFunctionObjArgs(k->fn, line, NULL) : NULL;
        Py_XDECREF(line);
        if (r)
            Py_DECREF(r);
        else {
            k->failed = 1;
            exc_save(&k->exc);
        }
    }
    int failed = k->failed;
    PyGILState_Release(g);
    if (buf != stack)
        free(buf);
    return failed ? CBT_ERR_INVAL : CBT_OK;
}

/* Add a sink that the library made; on failure it is destroyed. */
static cbt_status add_made_sink(cbt_status made, cbt_sink *sk)
{
    cbt_status st = made;
    if (st == CBT_OK && (st = cbt_add_sink(sk)) != CBT_OK && sk->destroy)
        sk->destroy(sk->ctx);
    return st;
}

#define CBT_REPLAY_STATS_FIELDS(X)                                                              \
    X(records) X(events) X(ring_records) X(clock_records) X(unknown_skipped)                   \
    X(malformed_skipped) X(bytes) X(truncated) X(shutdown_seen) X(gaps) X(gap_records)

/* cbt_replay_stats, the final metrics' span counts and every metric
 * ("metrics"), the recorded configuration ("config_json"), what the replay
 * said on its log ("messages") and the OTLP exporter's final counts ("otlp"). */
static PyObject *replay_dict(const cbt_replay_stats *rs, const cbt_metrics *fin,
                             const char *config_json, PyObject *messages, int otlp)
{
    PyObject *d = PyDict_New(), *md = d ? metrics_dict(fin) : NULL;
    if (!md)
        goto fail;
#define CBT_PUT_(f)                                                                             \
    {                                                                                           \
        PyObject *v = PyLong_FromUnsignedLongLong((unsigned long long)rs->f);                  \
        if (!v || PyDict_SetItemString(d, #f, v) < 0) {                                         \
            Py_XDECREF(v);                                                                      \
            goto fail;                                                                          \
        }                                                                                       \
        Py_DECREF(v);                                                                           \
    }
    CBT_REPLAY_STATS_FIELDS(CBT_PUT_)
#undef CBT_PUT_
    static const char *const from_metrics[] = {"spans_ended", "spans_dropped", "spans_unsampled",
                                               "sink_errors", "sink_spans_lost"};
    for (size_t i = 0; i < sizeof from_metrics / sizeof from_metrics[0]; i++) {
        PyObject *v = PyDict_GetItemString(md, from_metrics[i]); /* borrowed */
        if (!v || PyDict_SetItemString(d, from_metrics[i], v) < 0)
            goto fail;
    }
    PyObject *cj = PyUnicode_DecodeUTF8(config_json, (Py_ssize_t)strlen(config_json), "replace");
    if (!cj || PyDict_SetItemString(d, "config_json", cj) < 0) {
        Py_XDECREF(cj);
        goto fail;
    }
    Py_DECREF(cj);
    if (PyDict_SetItemString(d, "metrics", md) < 0 ||
        PyDict_SetItemString(d, "messages", messages) < 0)
        goto fail;
#ifdef CBT_WITH_OTLP
    if (otlp) {
        const cbt_otlp_stats *o = &g_otlp_final;
        PyObject *od = Py_BuildValue(
            "{s:K,s:K,s:K,s:K,s:K,s:K}", "spans_queued", (unsigned long long)o->spans_queued,
            "spans_exported", (unsigned long long)o->spans_exported, "spans_dropped",
            (unsigned long long)o->spans_dropped, "batches_sent",
            (unsigned long long)o->batches_sent, "batches_failed",
            (unsigned long long)o->batches_failed, "retries", (unsigned long long)o->retries);
        if (!od || PyDict_SetItemString(d, "otlp", od) < 0) {
            Py_XDECREF(od);
            goto fail;
        }
        Py_DECREF(od);
    }
#else
    (void)otlp;
#endif
    Py_DECREF(md);
    return d;
fail:
    Py_XDECREF(md);
    Py_XDECREF(d);
    return NULL;
}

/* The lines the replay wrote on its log (a tmpfile), as a list of str. */
static PyObject *log_lines(FILE *log)
{
    PyObject *l = PyList_New(0);
    if (!l || !log)
        return l;
    fflush(log);
    long n = ftell(log);
    if (n <= 0)
        return l;
    if (n > (1l << 20))
        n = 1l << 20; /* the replay says a few lines; bound it all the same */
    char *buf = malloc((size_t)n + 1);
    if (!buf) {
        Py_DECREF(l);
        return PyErr_NoMemory();
    }
    rewind(log);
    size_t got = fread(buf, 1, (size_t)n, log);
    buf[got] = 0;
    for (char *p = buf, *e; *p; p = e) {
        e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        e = e ? e + 1 : p + len;
        if (!len)
            continue;
        PyObject *s = PyUnicode_DecodeUTF8(p, (Py_ssize_t)len, "replace");
        if (!s || PyList_Append(l, s) < 0) {
            Py_XDECREF(s);
            Py_DECREF(l);
            free(buf);
            return NULL;
        }
        Py_DECREF(s);
    }
    free(buf);
    return l;
}

/* _cbt.replay(path, *, spans_path, trace_path, otlp_endpoint, on_span, force,
 * speed): what the CLI's `cbt replay FILE` does (cli/cmd_replay_lmct.c),
 * with the process's one tracer: open and check the file, start a replay
 * tracer with the recorded configuration and builders, add the sinks, run,
 * shut the replay tracer down (on every path), close. cbt.replay in
 * __init__.py wraps it (on_span gets dicts there; warnings). on_span here
 * takes the JSON line. */
static PyObject *py_replay(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"path", "spans_path", "trace_path", "otlp_endpoint", "on_span",
                             "force", "speed", NULL};
    PyObject *path = NULL, *spans = NULL, *trace = NULL, *endpoint = Py_None, *fn = Py_None,
             *force_o = NULL, *speed_o = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|$O&O&OOOO:replay", kwlist,
                                     PyUnicode_FSConverter, &path, fs_or_none, &spans,
                                     fs_or_none, &trace, &endpoint, &fn, &force_o,
                                     &speed_o))
        return NULL;
    PyObject *ret = NULL, *messages = NULL;
    cbt_replay *r = NULL;
    FILE *log = NULL;
    int started = 0, otlp = 0, claimed = 0;
    py_span_sink ks = {.fn = fn};
    cbt_replay_options ro = cbt_replay_options_default();
    if (get_bool_in("cbt.replay", force_o, "force", &ro.force) < 0)
        goto out;
    if (speed_o && speed_o != Py_None) {
        if (PyBool_Check(speed_o) || !(PyFloat_Check(speed_o) || PyLong_Check(speed_o))) {
            PyErr_Format(PyExc_TypeError, "cbt.replay: speed is a float, not %.100s",
                         tp_name_of(speed_o));
            goto out;
        }
        ro.speed = PyFloat_AsDouble(speed_o);
        if (ro.speed == -1.0 && PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_OverflowError))
                goto out;
            PyErr_Clear(); /* an int too large for a float: out of range, said below */
            ro.speed = 2e9;
        }
        if (!(ro.speed >= 0.0) || ro.speed > 1e9) {
            PyObject *e = echo(speed_o);
            if (e)
                PyErr_Format(PyExc_ValueError, "cbt.replay: speed is 0 (as fast as possible) or "
                                               "a factor in (0, 1e9] (1: as recorded), not %U",
                             e);
            Py_XDECREF(e);
            goto out;
        }
    }
    if (fn != Py_None && !PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError, "cbt.replay: on_span is a callable or None, not %.100s",
                     tp_name_of(fn));
        goto out;
    }
    const char *ep = NULL;
    if (endpoint != Py_None) {
        if (!PyUnicode_Check(endpoint)) {
            PyErr_SetString(PyExc_TypeError, "cbt.replay: otlp_endpoint is a str or None");
            goto out;
        }
        if (!(ep = utf8_of(endpoint, NULL, "cbt.replay: otlp_endpoint")))
            goto out;
        if (!*ep)
            ep = NULL; /* "": none, as None (a replay never exports unasked) */
    }
#ifndef CBT_WITH_OTLP
    if (ep) {
        raise_status(CBT_ERR_UNSUPPORTED,
                     "cbt.replay: otlp_endpoint: this build has no OTLP exporter (protobuf-c or "
                     "libcurl was missing when the package was built)");
        goto out;
    }
#endif
    if (g_replaying || g_closing || g_starting || cbt_tracer_get()) {
        raise_status(CBT_ERR_ALREADY,
                     g_replaying ? "cbt.replay: another cbt.replay is running"
                                 : "cbt.replay: a tracer is running (cbt.shutdown() it first: a "
                                   "replay needs the process's one tracer)");
        goto out;
    }
    /* ours from here on (init, shutdown and metrics refuse): the opens
     * below release the GIL (a FIFO, a slow disk) */
    g_replaying = claimed = 1;
    log = tmpfile(); /* the replay's warnings, for cbt.replay's warnings; NULL: stderr */
    ro.log = log;
    ro.progress = NULL;
    ro.stop = py_replay_stop;
    ro.stop_ctx = &ks;
    const char *path_p = PyBytes_AsString(path);
    const char *spans_p = spans ? PyBytes_AsString(spans) : NULL;
    const char *trace_p = trace ? PyBytes_AsString(trace) : NULL;
    cbt_status st;
    Py_BEGIN_ALLOW_THREADS
    st = cbt_replay_open(path_p, &ro, &r);
    Py_END_ALLOW_THREADS
    if (st != CBT_OK) {
        raise_statusf(st, "cbt.replay: %s", cbt_replay_message(NULL));
        goto out;
    }
    cbt_config c = cbt_config_default();
    if ((st = cbt_replay_config(r, &c)) != CBT_OK) {
        PyObject *e = echo(path);
        if (e)
            raise_statusf(st, "cbt.replay: %U: the recorded configuration", e);
        Py_XDECREF(e);
        goto out;
    }
    Py_BEGIN_ALLOW_THREADS
    st = cbt_init(&c);
    Py_END_ALLOW_THREADS
    if (st != CBT_OK) {
        if (st == CBT_ERR_INVAL || st == CBT_ERR_VERSION)
            raise_statusf(st, "cbt.replay: starting the replay tracer: %s", cbt_last_error());
        else
            raise_status(st, st == CBT_ERR_ALREADY
                                 ? "cbt.replay: a tracer is running (cbt.shutdown() it first)"
                                 : "cbt.replay: starting the replay tracer");
        goto out;
    }
    started = 1;
    if ((st = cbt_replay_add_builders(r)) != CBT_OK) {
        PyObject *e = echo(path);
        if (e)
            raise_statusf(st, "cbt.replay: %U: the recorded span builders", e);
        Py_XDECREF(e);
        goto out;
    }
    cbt_sink sk;
    cbt_status spans_st = CBT_OK, trace_st = CBT_OK;
    Py_BEGIN_ALLOW_THREADS
    if (spans_p)
        spans_st = add_made_sink(cbt_jsonl_sink_create(spans_p, &sk), &sk);
    if (trace_p && spans_st == CBT_OK)
        trace_st = add_made_sink(cbt_trace_file_sink_create(trace_p, &sk), &sk);
    Py_END_ALLOW_THREADS
    if (spans_st != CBT_OK) {
        PyObject *e = echo(spans);
        if (e)
            raise_statusf(spans_st, "cbt.replay: the span file %U%s", e, fifo_hint(spans_p));
        Py_XDECREF(e);
        goto out;
    }
    if (trace_st != CBT_OK) {
        PyObject *e = echo(trace);
        if (e)
            raise_statusf(trace_st, "cbt.replay: the trace file %U%s", e, fifo_hint(trace_p));
        Py_XDECREF(e);
        goto out;
    }
    if (fn != Py_None) {
        cbt_sink k = CBT_STRUCT_INIT(cbt_sink);
        k.name = "python-on_span";
        k.ctx = &ks; /* on this C stack: the tracer is shut down before it returns */
        k.on_span = py_span_sink_on_span;
        if ((st = cbt_add_sink(&k)) != CBT_OK) {
            raise_status(st, "cbt.replay: the on_span sink");
            goto out;
        }
    }
#ifdef CBT_WITH_OTLP
    if (ep) {
        g_otlp_on = 0;
        if (add_otlp("cbt.replay", ep, NULL) < 0)
            goto out;
        otlp = g_otlp_on;
        g_otlp_on = 0; /* py_shutdown's: this exporter is ours */
    }
#endif
    /* With on_span and as fast as it can, the GIL stays held: the callable
     * runs on this thread for every span, so a release would only hand the
     * GIL back and forth per span. Paced (its waits are long), or without
     * on_span (nothing here needs Python), other threads run; the sink and
     * the stop hook take the GIL themselves (PyGILState_Ensure). */
    cbt_replay_stats rs = CBT_STRUCT_INIT(cbt_replay_stats);
    cbt_status rst;
    if (fn != Py_None && ro.speed == 0.0) {
        rst = cbt_replay_run(r, &rs);
    } else {
        Py_BEGIN_ALLOW_THREADS
        rst = cbt_replay_run(r, &rs);
        Py_END_ALLOW_THREADS
    }
    cbt_metrics fin = CBT_STRUCT_INIT(cbt_metrics);
    Py_BEGIN_ALLOW_THREADS
    st = cbt_shutdown_final(&fin);
    Py_END_ALLOW_THREADS
    if (st == CBT_OK) { /* refused only before anything stops (a bad size): never here */
        started = 0;
        g_replaying = 0;
    }
    if (ks.failed) { /* the callable's exception, as it raised it */
        exc_restore(&ks.exc);
        goto out;
    }
    if (st != CBT_OK) {
        raise_status(st, "cbt.replay: shutting the replay tracer down");
        goto out;
    }
    if (!(messages = log_lines(log)))
        goto out;
    PyObject *d = replay_dict(&rs, &fin, cbt_replay_header_json(r), messages, otlp);
    if (!d)
        goto out;
    if (rst != CBT_OK && rst != CBT_ERR_LMCT_TRUNCATED) {
        /* a bad frame or a mismatch: the records before it were replayed,
         * their spans delivered; the exception carries the stats */
        raise_statusf(rst, "cbt.replay: %s", cbt_replay_message(r));
        saved_exc e;
        exc_save(&e);
        if (e.value)
            (void)PyObject_SetAttrString(e.value, "stats", d);
        exc_restore(&e);
        Py_DECREF(d);
        goto out;
    }
    if (rst == CBT_ERR_LMCT_TRUNCATED) {
        /* a warning: what came before the cut tail was replayed */
        PyObject *m = PyUnicode_FromString(cbt_replay_message(r));
        if (!m || PyDict_SetItemString(d, "truncated_message", m) < 0) {
            Py_XDECREF(m);
            Py_DECREF(d);
            goto out;
        }
        Py_DECREF(m);
    }
    ret = d;
out:
    if (started) { /* an error after cbt_init: the replay tracer goes with it */
        saved_exc e;
        exc_save(&e);
        Py_BEGIN_ALLOW_THREADS
        cbt_shutdown();
        Py_END_ALLOW_THREADS
        g_replaying = 0;
#ifdef CBT_WITH_OTLP
        g_otlp_on = 0;
#endif
        exc_restore(&e);
    }
    if (claimed)
        g_replaying = 0;
    exc_drop(&ks.exc);
    cbt_replay_close(r);
    if (log)
        fclose(log);
    Py_XDECREF(messages);
    Py_XDECREF(path);
    Py_XDECREF(spans);
    Py_XDECREF(trace);
    return ret;
}

static PyObject *py_strerror(PyObject *self, PyObject *arg)
{
    (void)self;
    if (!PyLong_Check(arg) || PyBool_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "cbt.strerror: a status is an int, not %.100s",
                     tp_name_of(arg));
        return NULL;
    }
    int of = 0;
    long long v = PyLong_AsLongLongAndOverflow(arg, &of);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    if (of || v < INT32_MIN || v > INT32_MAX) {
        PyObject *e = echo(arg);
        if (e)
            PyErr_Format(PyExc_OverflowError, "cbt.strerror: status %U is out of range", e);
        Py_XDECREF(e);
        return NULL;
    }
    return PyUnicode_FromString(cbt_strerror((cbt_status)v));
}

static PyObject *py_register_event_type(PyObject *self, PyObject *name)
{
    (void)self;
    if (!PyUnicode_Check(name)) {
        PyErr_SetString(PyExc_TypeError, "cbt.register_event_type: the name is a str");
        return NULL;
    }
    const char *s = utf8_of(name, NULL, "cbt.register_event_type");
    if (!s)
        return NULL;
    cbt_event_type t;
    cbt_status st = cbt_event_type_register(s, &t);
    if (st != CBT_OK) {
        PyObject *e = echo(name);
        if (e && st == CBT_ERR_FULL) /* which table, its limit, how to raise it */
            raise_statusf(st, "cbt.register_event_type(%U): %s", e, cbt_last_error());
        else if (e && st == CBT_ERR_META_TOO_LONG)
            raise_statusf(st, "cbt.register_event_type(%U): %zu bytes (names are 1 to %d)", e,
                          strlen(s), CBT_NAME_LEN_MAX - 1);
        else if (e)
            raise_statusf(st, "cbt.register_event_type(%U)", e);
        Py_XDECREF(e);
        return NULL;
    }
    return PyLong_FromLong(t);
}

static PyObject *py_event_type_name(PyObject *self, PyObject *arg)
{
    (void)self;
    cbt_event_type t;
    if (resolve_type(arg, &t) < 0)
        return NULL;
    return PyUnicode_FromString(cbt_event_type_name(t));
}

static PyObject *py_after_fork_child(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    g_forked_child = 1;
    g_inherited = cbt_enabled();
    /* the parent's wrappers name its CUDA streams' pooled events: not the child's */
    PyDict_Clear(g_cuda_streams);
    g_n_cuda_gen = 0;
    /* calls the parent's other threads had in the tracer: not in this process */
    atomic_store_explicit(&g_in_tracer, 0, memory_order_relaxed);
    g_starting = 0;
    return PyBool_FromLong(g_inherited);
}

/* ---- SpanContext ---------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    cbt_span_ctx c;
} SpanContextObject;

static PyObject *ctx_new(const cbt_span_ctx *c)
{
    SpanContextObject *o = PyObject_New(SpanContextObject, &SpanContextType);
    if (o)
        o->c = *c;
    return (PyObject *)o;
}

static PyObject *hex_of(const uint8_t *b, int n)
{
    char buf[33];
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < n; i++) {
        buf[2 * i] = hx[b[i] >> 4];
        buf[2 * i + 1] = hx[b[i] & 15];
    }
    return PyUnicode_FromStringAndSize(buf, 2 * n);
}

static PyObject *traceparent_of(const cbt_span_ctx *c)
{
    char tp[CBT_TRACEPARENT_LEN + 1];
    if (cbt_traceparent_format(c, tp) != CBT_OK)
        return PyUnicode_FromString("");
    return PyUnicode_FromStringAndSize(tp, CBT_TRACEPARENT_LEN);
}

/* SpanContext(trace_id, span_id, sampled=True): hex ids, as in a traceparent */
static PyObject *SpanContext_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"trace_id", "span_id", "sampled", NULL};
    const char *tid, *sid;
    int sampled = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ss|p:SpanContext", kwlist, &tid, &sid, &sampled))
        return NULL;
    char tp[CBT_TRACEPARENT_LEN + 16];
    int n = snprintf(tp, sizeof tp, "00-%s-%s-%s", tid, sid, sampled ? "01" : "00");
    SpanContextObject *o = (SpanContextObject *)PyType_GenericAlloc(type, 0);
    if (!o)
        return NULL;
    if (n != CBT_TRACEPARENT_LEN || cbt_traceparent_parse(tp, (size_t)n, &o->c) != CBT_OK) {
        Py_DECREF(o);
        PyErr_SetString(PyExc_ValueError, "SpanContext: trace_id is 32 and span_id 16 lowercase "
                                          "hex digits, neither all zero");
        return NULL;
    }
    return (PyObject *)o;
}

static PyObject *SpanContext_trace_id(SpanContextObject *self, void *c)
{
    (void)c;
    return hex_of(self->c.trace_id, 16);
}
static PyObject *SpanContext_span_id(SpanContextObject *self, void *c)
{
    (void)c;
    return hex_of(self->c.span_id, 8);
}
static PyObject *SpanContext_sampled(SpanContextObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->c.trace_flags & CBT_TRACE_FLAG_SAMPLED);
}
static PyObject *SpanContext_traceparent(SpanContextObject *self, void *c)
{
    (void)c;
    return traceparent_of(&self->c);
}

static PyObject *SpanContext_repr(SpanContextObject *self)
{
    PyObject *t = hex_of(self->c.trace_id, 16), *s = hex_of(self->c.span_id, 8);
    PyObject *r = (t && s) ? PyUnicode_FromFormat("SpanContext(trace_id='%U', span_id='%U', "
                                                  "sampled=%s)",
                                                  t, s,
                                                  (self->c.trace_flags & 1) ? "True" : "False")
                           : NULL;
    Py_XDECREF(t);
    Py_XDECREF(s);
    return r;
}

static PyObject *SpanContext_richcompare(PyObject *a, PyObject *b, int op)
{
    if (!PyObject_TypeCheck(b, &SpanContextType) || (op != Py_EQ && op != Py_NE))
        Py_RETURN_NOTIMPLEMENTED;
    int eq = memcmp(&((SpanContextObject *)a)->c, &((SpanContextObject *)b)->c,
                    sizeof(cbt_span_ctx)) == 0;
    return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

static Py_hash_t SpanContext_hash(SpanContextObject *self)
{
    Py_uhash_t h = 0; /* unsigned: wraps, no signed overflow */
    for (size_t i = 0; i < 16; i++)
        h = h * 31u + self->c.trace_id[i];
    for (size_t i = 0; i < 8; i++)
        h = h * 31u + self->c.span_id[i];
    h = h * 31u + self->c.trace_flags;
    Py_hash_t r = (Py_hash_t)h;
    return r == -1 ? -2 : r;
}

static PyGetSetDef SpanContext_getset[] = {
    {"trace_id", (getter)SpanContext_trace_id, NULL, "32 lowercase hex digits", NULL},
    {"span_id", (getter)SpanContext_span_id, NULL, "16 lowercase hex digits", NULL},
    {"sampled", (getter)SpanContext_sampled, NULL, "the W3C sampled flag", NULL},
    {"traceparent", (getter)SpanContext_traceparent, NULL,
     "the W3C traceparent ('' when the span id is zero: a trace-id-only context)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static void SpanContext_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE((PyObject *)self);
    PyObject_Free(self); /* the type's tp_free: not a GC type, not subclassable */
    Py_DECREF(tp);       /* an instance of a heap type holds a reference to it */
}

/* A heap type (module_exec makes it); not GC-tracked (no Python object
 * inside), immutable and not subclassable, as the static type it replaced. */
static PyType_Slot SpanContext_slots[] = {
    {Py_tp_dealloc, SLOT_FN_(SpanContext_dealloc)},
    {Py_tp_doc, "SpanContext(trace_id, span_id, sampled=True): a span's W3C ids."},
    {Py_tp_repr, SLOT_FN_(SpanContext_repr)},
    {Py_tp_hash, SLOT_FN_(SpanContext_hash)},
    {Py_tp_richcompare, SLOT_FN_(SpanContext_richcompare)},
    {Py_tp_getset, SpanContext_getset},
    {Py_tp_new, SLOT_FN_(SpanContext_new)},
    {0, NULL},
};
static PyType_Spec SpanContext_spec = {
    .name = "cbt.SpanContext",
    .basicsize = sizeof(SpanContextObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = SpanContext_slots,
};

/* ---- PSpan: one cbt_pspan (python/cbt/__init__.py wraps it as cbt.span) ------------ */

typedef struct {
    PyObject_HEAD
    cbt_pspan ps;
    PyObject *stream_ref; /* the CpuStream it was begun on: kept alive until the end */
} PSpanObject;

/* One attribute k=v into *m: 0, 1 when the full name table refused its key
 * (dropped, counted in names_refused), -1 with an exception. `m` NULL: only
 * check it (Span.set), interning nothing, so a full table counts a dropped
 * attribute once, when the span ends. */
static int meta_of(PyObject *k, PyObject *v, cbt_meta *m, const char *fn)
{
    /* the value first: its errors do not depend on whether its key fits */
    long long x = 0;
    const char *s = NULL;
    if (PyBool_Check(v)) {
    } else if (PyLong_Check(v)) {
        int of = 0;
        x = PyLong_AsLongLongAndOverflow(v, &of);
        if (of) {
            PyObject *e = echo(k);
            if (e)
                PyErr_Format(PyExc_OverflowError, "%s: attribute %U does not fit in 64 bits",
                             fn, e);
            Py_XDECREF(e);
            return -1;
        }
        if (x == -1 && PyErr_Occurred())
            return -1;
    } else if (PyFloat_Check(v)) {
    } else if (PyUnicode_Check(v)) {
        Py_ssize_t len;
        if (!(s = utf8_of(v, &len, fn)))
            return -1;
        if (len >= CBT_META_INLINE_MAX) {
            PyObject *e = echo(k);
            if (e)
                raise_statusf(CBT_ERR_META_TOO_LONG,
                              "%s: attribute %U is %zd bytes (a span's string attributes hold "
                              "at most %d)",
                              fn, e, len, CBT_META_INLINE_MAX - 1);
            Py_XDECREF(e);
            return -1;
        }
    } else {
        PyObject *e = echo(k);
        if (e)
            PyErr_Format(PyExc_TypeError,
                         "%s: attribute %U is a %.100s: attributes are int, float, bool or str",
                         fn, e, tp_name_of(v));
        Py_XDECREF(e);
        return -1;
    }
    cbt_name key;
    int r = resolve_key(k, m ? &key : NULL, NULL);
    if (r || !m)
        return r;
    if (PyBool_Check(v))
        *m = cbt_meta_bool(key, v == Py_True);
    else if (PyLong_Check(v))
        *m = cbt_meta_i64(key, (int64_t)x);
    else if (PyFloat_Check(v))
        *m = cbt_meta_f64(key, PyFloat_AsDouble(v));
    else
        *m = cbt_meta_str(key, s);
    return 0;
}

/* attrs (a dict or None) into meta[], at most `max`. An attribute whose key
 * the full name table refuses is dropped (counted in names_refused). */
static int metas_of(PyObject *attrs, cbt_meta *m, uint32_t max, uint32_t *n, const char *fn)
{
    *n = 0;
    if (!attrs || attrs == Py_None)
        return 0;
    if (!PyDict_Check(attrs)) {
        PyErr_Format(PyExc_TypeError, "%s: attributes are a dict", fn);
        return -1;
    }
    if ((size_t)PyDict_Size(attrs) > max) {
        raise_statusf(CBT_ERR_META_FULL, "%s: %zd attributes (at most %u)", fn,
                      PyDict_Size(attrs), max);
        return -1;
    }
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(attrs, &pos, &k, &v)) {
        if (*n >= max) /* the dict grew meanwhile (a key's __hash__ ran code) */
            break;
        /* held: resolving the key may run code (a str subclass's __hash__)
         * that changes the dict */
        Py_INCREF(k);
        Py_INCREF(v);
        int r = meta_of(k, v, m ? &m[*n] : NULL, fn);
        Py_DECREF(k);
        Py_DECREF(v);
        if (r < 0)
            return -1;
        if (r == 0)
            (*n)++;
    }
    return 0;
}

/* The context named by a parent argument: a SpanContext or a PSpan. */
static int parent_of(PyObject *p, cbt_span_ctx *out)
{
    if (PyObject_TypeCheck(p, &SpanContextType)) {
        *out = ((SpanContextObject *)p)->c;
        return 0;
    }
    if (PyObject_TypeCheck(p, &PSpanType)) {
        *out = ((PSpanObject *)p)->ps.ctx;
        return 0;
    }
    PyObject *ctx = PyObject_GetAttrString(p, "context"); /* cbt.span's wrapper */
    if (ctx && PyObject_TypeCheck(ctx, &SpanContextType)) {
        *out = ((SpanContextObject *)ctx)->c;
        Py_DECREF(ctx);
        return 0;
    }
    Py_XDECREF(ctx);
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "cbt: a parent is a cbt.SpanContext or a cbt.span, not %.100s",
                 tp_name_of(p));
    return -1;
}

static PyObject *span_begin_on(PyObject *name_o, cbt_name name, const char *sess,
                               Py_ssize_t sess_len, long kind, const cbt_span_ctx *pp,
                               PyObject *stream_o, cbt_stream *st, CpuStreamObject *pin,
                               PyObject *attrs);

/* span_begin(name, parent, session_id, kind, stream, attrs) -> PSpan */
static PyObject *py_span_begin(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "span_begin takes 6 arguments");
        return NULL;
    }
    PyObject *name_o = args[0], *parent_o = args[1], *sess_o = args[2], *kind_o = args[3],
             *stream_o = args[4], *attrs = args[5];
    cbt_name name;
    if (!PyUnicode_Check(name_o)) {
        PyErr_SetString(PyExc_TypeError, "cbt.span: the name is a str");
        return NULL;
    }
    if (resolve_key(name_o, &name, "cbt.span") < 0) /* a full name table: an error */
        return NULL;
    const char *sess = "";
    Py_ssize_t sess_len = 0;
    if (sess_o != Py_None) {
        if (!PyUnicode_Check(sess_o)) {
            PyErr_SetString(PyExc_TypeError, "cbt.span: session_id is a str");
            return NULL;
        }
        if (!(sess = utf8_of(sess_o, &sess_len, "cbt.span: session_id")))
            return NULL;
    }
    long kind = PyLong_AsLong(kind_o);
    if (kind == -1 && PyErr_Occurred())
        return NULL;
    cbt_span_ctx parent, *pp = NULL;
    if (parent_o != Py_None) {
        if (parent_of(parent_o, &parent) < 0)
            return NULL;
        pp = &parent;
    } else if (sess_len == 0) {
        /* no parent, no request id: a root of a fresh random trace (the
         * per-thread generator, reseeded in a forked child), sampled by
         * OTEL_TRACES_SAMPLER as read at import */
        memset(&parent, 0, sizeof parent);
        cbt_pspan_new_id(parent.trace_id);
        cbt_pspan_new_id(parent.trace_id + 8);
        parent.trace_flags =
            cbt_sampler_decide(&g_sampler, parent.trace_id, NULL) ? CBT_TRACE_FLAG_SAMPLED : 0;
        pp = &parent;
    }
    cbt_stream *st = NULL;
    CpuStreamObject *pin = NULL; /* a CpuStream, pinned: the attributes run Python code */
    if (stream_o != Py_None && resolve_stream(stream_o, &st, &pin) < 0)
        return NULL;
    PyObject *r = span_begin_on(name_o, name, sess, sess_len, kind, pp, stream_o, st, pin, attrs);
    if (pin)
        cpu_unpin(pin);
    return r;
}

/* span_begin's rest, with its stream resolved (a CpuStream pinned: `pin`). */
static PyObject *span_begin_on(PyObject *name_o, cbt_name name, const char *sess,
                               Py_ssize_t sess_len, long kind, const cbt_span_ctx *pp,
                               PyObject *stream_o, cbt_stream *st, CpuStreamObject *pin,
                               PyObject *attrs)
{
    cbt_meta m[CBT_EVENT_META_MAX];
    uint32_t n;
    if (metas_of(attrs, m, CBT_EVENT_META_MAX - 1, &n, "cbt.span") < 0)
        return NULL;
    PSpanObject *o = PyObject_New(PSpanObject, &PSpanType);
    if (!o)
        return NULL;
    o->stream_ref = NULL;
    if (closed_meanwhile(pin, "cbt.span") < 0) {
        Py_DECREF(o);
        return NULL;
    }
    if (g_closing) { /* a shutdown is running: no tracer, the context still flows */
        static const uint8_t zero16[16];
        memset(&o->ps, 0, sizeof o->ps);
        if (pp && memcmp(pp->trace_id, zero16, 16) != 0) {
            memcpy(o->ps.ctx.trace_id, pp->trace_id, 16);
            o->ps.ctx.trace_flags = pp->trace_flags & CBT_TRACE_FLAGS_KNOWN;
        } else {
            cbt_trace_id_from_request(sess, (size_t)sess_len, o->ps.ctx.trace_id);
            o->ps.ctx.trace_flags = CBT_TRACE_FLAG_SAMPLED;
        }
        cbt_pspan_new_id(o->ps.ctx.span_id);
        return (PyObject *)o; /* not open: its end does nothing */
    }
    cbt_status rc;
    if (pin) /* a CpuStream: its worker publishes */
        rc = cbt_pspan_begin_on(&o->ps, st, name, (cbt_span_kind)kind, sess, pp, m, n);
    else if (st)
        CALL_PUBLISH_(st, rc = cbt_pspan_begin_on(&o->ps, st, name, (cbt_span_kind)kind, sess,
                                                  pp, m, n));
    else
        CALL_PUBLISH_(NULL, rc = cbt_pspan_begin(&o->ps, name, (cbt_span_kind)kind, sess, pp,
                                                 m, n));
    /* without a tracer or with a full queue the context still flows */
    if (rc != CBT_OK && rc != CBT_ERR_NOT_INITIALIZED && rc != CBT_ERR_FULL) {
        Py_DECREF(o);
        return raise_statusf(rc, "cbt.span('%U')", name_o); /* interned: at most 63 bytes */
    }
    if (pin) {
        Py_INCREF(stream_o);
        o->stream_ref = stream_o;
    }
    return (PyObject *)o;
}

static void PSpan_dealloc(PSpanObject *self)
{
    PyTypeObject *tp = Py_TYPE((PyObject *)self);
    Py_XDECREF(self->stream_ref);
    PyObject_Free(self); /* the type's tp_free: not a GC type, not subclassable */
    Py_DECREF(tp);       /* an instance of a heap type holds a reference to it */
}

static PyObject *pspan_end_pinned(PSpanObject *self, PyObject *attrs);

static PyObject *PSpan_end(PSpanObject *self, PyObject *attrs)
{
    if (!self->ps.open)
        Py_RETURN_NONE; /* never opened (no tracer), or ended already */
    /* its CpuStream pinned: the attributes run Python code, which may close it */
    CpuStreamObject *pin = (CpuStreamObject *)self->stream_ref;
    if (pin && !pin->s) {
        self->ps.open = 0;
        return raise_status(CBT_ERR_STOPPED, "cbt.span end: its CpuStream was closed");
    }
    if (pin && !cpu_pin(pin, "cbt.span end"))
        return NULL;
    PyObject *r = pspan_end_pinned(self, attrs);
    if (pin)
        cpu_unpin(pin);
    return r;
}

/* PSpan_end's rest, its CpuStream (if any) pinned. */
static PyObject *pspan_end_pinned(PSpanObject *self, PyObject *attrs)
{
    cbt_meta m[CBT_EVENT_META_MAX];
    uint32_t n;
    if (metas_of(attrs, m, CBT_EVENT_META_MAX - 1, &n, "cbt.span end") < 0)
        return NULL;
    if (!self->ps.open) /* ended meanwhile (the attributes' code ended it) */
        Py_RETURN_NONE;
    if (closed_meanwhile((CpuStreamObject *)self->stream_ref, "cbt.span end") < 0) {
        self->ps.open = 0;
        return NULL;
    }
    if (g_closing) { /* a shutdown is running: it ends what is open */
        self->ps.open = 0;
        Py_CLEAR(self->stream_ref);
        Py_RETURN_NONE;
    }
    /* a copy, closed here first: the end may run with the GIL released, and
     * another thread's end of this span then finds it closed */
    cbt_pspan ps = self->ps;
    self->ps.open = 0;
    cbt_status rc;
    if (self->stream_ref) /* a CpuStream: its worker publishes */
        rc = cbt_pspan_end_on(&ps, m, n);
    else if (ps.stream) /* a CUDA stream */
        CALL_PUBLISH_(ps.stream, rc = cbt_pspan_end_on(&ps, m, n));
    else
        CALL_PUBLISH_(NULL, rc = cbt_pspan_end(&ps, m, n));
    Py_CLEAR(self->stream_ref);
    if (rc != CBT_OK && rc != CBT_ERR_FULL && rc != CBT_ERR_NOT_INITIALIZED)
        return raise_status(rc, "cbt.span end");
    Py_RETURN_NONE;
}

/* _check_attrs(attrs): raise what end(attrs) would raise for them (types,
 * lengths, count), without a span; Span.set calls it. */
static PyObject *py_check_attrs(PyObject *self, PyObject *attrs)
{
    (void)self;
    uint32_t n;
    if (metas_of(attrs, NULL, CBT_EVENT_META_MAX - 1, &n, "cbt.span set") < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *PSpan_context(PSpanObject *self, void *c)
{
    (void)c;
    return ctx_new(&self->ps.ctx);
}
static PyObject *PSpan_open(PSpanObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->ps.open);
}

static PyMethodDef PSpan_methods[] = {
    {"end", (PyCFunction)PSpan_end, METH_O, "end(attrs: dict | None): close the span now."},
    {NULL, NULL, 0, NULL},
};
static PyGetSetDef PSpan_getset[] = {
    {"context", (getter)PSpan_context, NULL, "the span's SpanContext", NULL},
    {"open", (getter)PSpan_open, NULL, "True between begin and end", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};
/* A heap type (module_exec makes it). Not GC-tracked: its one reference is
 * to a CpuStream, which refers to nothing, so it cannot be in a cycle.
 * Python cannot instantiate it (only span_begin makes one), as with the
 * static type it replaced, which had no tp_new; immutable, not
 * subclassable. */
static PyType_Slot PSpan_slots[] = {
    {Py_tp_dealloc, SLOT_FN_(PSpan_dealloc)},
    {Py_tp_doc, "A span this process opened (cbt/pspan.h); made by cbt.span."},
    {Py_tp_methods, PSpan_methods},
    {Py_tp_getset, PSpan_getset},
    {0, NULL},
};
static PyType_Spec PSpan_spec = {
    .name = "cbt._cbt.PSpan",
    .basicsize = sizeof(PSpanObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = PSpan_slots,
};

static PyObject *py_inject(PyObject *self, PyObject *ctx)
{
    (void)self;
    cbt_span_ctx c;
    if (parent_of(ctx, &c) < 0)
        return NULL;
    return traceparent_of(&c);
}

static PyObject *py_extract(PyObject *self, PyObject *tp)
{
    (void)self;
    if (!PyUnicode_Check(tp)) {
        PyErr_SetString(PyExc_TypeError, "cbt.extract: a traceparent is a str");
        return NULL;
    }
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(tp, &n);
    if (!s)
        return NULL;
    cbt_span_ctx c;
    cbt_status st = cbt_traceparent_parse(s, (size_t)n, &c);
    if (st != CBT_OK) {
        PyObject *e = echo(tp);
        if (e)
            raise_statusf(st, "cbt.extract(%U)", e);
        Py_XDECREF(e);
        return NULL;
    }
    return ctx_new(&c);
}

/* context_begin(traceparent, request_id) -> SpanContext: the receiving side's
 * decision for one request (cbt_context_begin): the header's context when it
 * is valid (Option A), else the trace id derived from request_id with a zero
 * span id (Option B: a span under it is a root of the request's trace);
 * sampled by OTEL_TRACES_SAMPLER (read at import). A malformed header is not
 * an error here: it falls back, as W3C asks. */
static PyObject *py_context_begin(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "context_begin(traceparent, request_id)");
        return NULL;
    }
    const char *tp = NULL, *rid = "";
    Py_ssize_t rl = 0;
    if (args[0] != Py_None) {
        if (!PyUnicode_Check(args[0])) {
            PyErr_SetString(PyExc_TypeError, "cbt.context_begin: traceparent is a str or None");
            return NULL;
        }
        if (!(tp = PyUnicode_AsUTF8AndSize(args[0], NULL)))
            return NULL;
    }
    if (args[1] != Py_None) {
        if (!PyUnicode_Check(args[1])) {
            PyErr_SetString(PyExc_TypeError, "cbt.context_begin: request_id is a str or None");
            return NULL;
        }
        if (!(rid = utf8_of(args[1], &rl, "cbt.context_begin: request_id")))
            return NULL;
    }
    cbt_trace_context tc;
    cbt_status st = cbt_context_begin(tp, NULL, rid, (size_t)rl, &g_sampler, &tc, NULL);
    if (st != CBT_OK)
        return raise_status(st, "cbt.context_begin");
    return ctx_new(&tc.ctx);
}

/* ---- the module ------------------------------------------------------------------------- */

#ifdef CBT_WITH_OTLP
/* _cbt._otlp_config(otlp_endpoint=None, otlp_protocol=None, service_name=None)
 * -> dict | None: the exporter config cbt.init would start with these
 * arguments and this environment (endpoint, metrics_endpoint, protocol,
 * self_metrics), None when it would start none. Starts nothing: for the
 * tests of the arguments' path (the bridge's choice of protocol included),
 * whatever the exporter then does with them. */
static PyObject *py_otlp_config(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"otlp_endpoint", "otlp_protocol", "service_name", NULL};
    PyObject *endpoint = Py_None, *proto = Py_None, *service = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOO:_otlp_config", kwlist, &endpoint, &proto,
                                     &service))
        return NULL;
    int protocol;
    if (otlp_protocol_of("cbt.init", proto, &protocol) < 0)
        return NULL;
    const char *ep = NULL, *svc = NULL;
    if (endpoint != Py_None && !(ep = utf8_of(endpoint, NULL, "cbt.init: otlp_endpoint")))
        return NULL;
    if (service != Py_None && !(svc = utf8_of(service, NULL, "cbt.init: service_name")))
        return NULL;
    cbt_otlp_config c;
    int want = otlp_config("cbt.init", ep, protocol, svc, &c);
    if (want < 0)
        return NULL;
    if (!want)
        Py_RETURN_NONE;
    static const char *const names[] = {"http/protobuf", "http/json", "grpc"};
    const char *pn = (unsigned)c.protocol < 3 ? names[c.protocol] : "?";
    return Py_BuildValue("{s:s,s:s,s:s,s:I,s:s}", "endpoint", c.endpoint, "metrics_endpoint",
                         c.metrics_endpoint, "protocol", pn, "self_metrics",
                         (unsigned)c.self_metrics, "service_name", c.resource.service_name);
}
#endif

static PyMethodDef methods[] = {
    {"init", (PyCFunction)(void (*)(void))py_init, METH_VARARGS | METH_KEYWORDS,
     "init(**config): start the process's tracer (docs/python.md)."},
    {"shutdown", py_shutdown, METH_NOARGS,
     "shutdown() -> dict: drain and stop the tracer; its final metrics ({} without one)."},
    {"enabled", py_enabled, METH_NOARGS, "enabled() -> bool: a tracer is running."},
    {"publish", (PyCFunction)(void (*)(void))py_publish, METH_FASTCALL | METH_KEYWORDS,
     "publish(event_type, session_id, ts_ns=None, *, pair=None, **values)"},
    {"publish_on_stream", (PyCFunction)(void (*)(void))py_publish_on_stream,
     METH_FASTCALL | METH_KEYWORDS,
     "publish_on_stream(stream, event_type, session_id, *, pair=None, **values)"},
    {"flush", (PyCFunction)(void (*)(void))py_flush, METH_VARARGS | METH_KEYWORDS,
     "flush(timeout_ms=5000): wait (GIL released) until everything published is dispatched."},
    {"metrics", py_metrics, METH_NOARGS, "metrics() -> dict: the tracer's self-metrics."},
    {"replay", (PyCFunction)(void (*)(void))py_replay, METH_VARARGS | METH_KEYWORDS,
     "replay(path, *, spans_path, trace_path, otlp_endpoint, on_span, force, speed) -> dict: "
     "a recorded LMCT file through a replay tracer (cbt.replay wraps it)."},
    {"strerror", py_strerror, METH_O, "strerror(status) -> str"},
#ifdef CBT_WITH_OTLP
    {"_otlp_config", (PyCFunction)(void (*)(void))py_otlp_config, METH_VARARGS | METH_KEYWORDS,
     "_otlp_config(*, otlp_endpoint, otlp_protocol, service_name) -> dict | None: the "
     "exporter config cbt.init would start (internal: for the tests)."},
#endif
    {"register_event_type", py_register_event_type, METH_O,
     "register_event_type(name) -> int: a program-defined event type."},
    {"event_type_name", py_event_type_name, METH_O,
     "event_type_name(event_type) -> str: cbt's name for a type (LMCache's value)."},
    {"span_begin", (PyCFunction)(void (*)(void))py_span_begin, METH_FASTCALL, NULL},
    {"inject", py_inject, METH_O, "inject(ctx) -> str: ctx's W3C traceparent."},
    {"extract", py_extract, METH_O, "extract(traceparent) -> SpanContext (strict W3C v00)."},
    {"context_begin", (PyCFunction)(void (*)(void))py_context_begin, METH_FASTCALL,
     "context_begin(traceparent, request_id) -> SpanContext (extract, else Option B; sampled)."},
    {"_after_fork_child", py_after_fork_child, METH_NOARGS, NULL},
    {"_check_attrs", py_check_attrs, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

/* The module's state, owned by the module object whose exec made it: the
 * objects the globals in g_owned point at (module state, top of file). */
static PyObject **const g_owned[] = {
    &g_error,          &g_types,          &g_keys,           &g_cuda_streams,
    &g_str_ts_ns,      &g_str_pair,       &g_str_event_type, &g_str_session_id,
    &g_str_value,      &g_cpu_stream_type, &g_span_context_type, &g_pspan_type,
};
#define N_OWNED_ (sizeof g_owned / sizeof g_owned[0])

typedef struct {
    int owner;                /* its exec succeeded: the globals borrow refs[] */
    PyObject *refs[N_OWNED_]; /* refs[i] is what *g_owned[i] points at */
} module_state;

/* A module object owns the globals (the process's one _cbt state). */
static int g_module_owned;

/* The limited API this build was made for (0x030A0000: CPython 3.10's), 0
 * for a full-API build: _cbt.LIMITED_API. */
#ifdef Py_LIMITED_API
#define CBT_PY_LIMITED_API_ Py_LIMITED_API
#else
#define CBT_PY_LIMITED_API_ 0
#endif

/* Py_mod_exec. The module's state is the process's (the tracer is one per
 * process, and so are the name caches, the CUDA stream table, the counts of
 * calls inside the tracer): while one module object owns it, another exec
 * (importlib.util.module_from_spec + exec_module, a sub-interpreter's
 * import) fails with ImportError and changes nothing. importlib.reload of
 * the module itself does not come here (its state exists: CPython skips the
 * exec). Only once the owner is freed (its last reference gone) could a new
 * exec own the state again; in practice it lives to the interpreter's end
 * (its heap types and cbt's atexit hook hold it), so a re-import after
 * clearing sys.modules is refused too. */
static int module_exec(PyObject *m)
{
    module_state *ms = PyModule_GetState(m);
    if (!ms)
        return -1;
    if (g_module_owned) {
        PyErr_SetString(PyExc_ImportError,
                        "cbt._cbt is loaded already in this process: its state is the "
                        "process's, as cbt's tracer is one per process, so a second copy of the "
                        "module (importlib.util.module_from_spec + exec_module, or an import in "
                        "a sub-interpreter) is refused; use the module `import cbt` gave");
        return -1;
    }
    PyObject **r = ms->refs; /* in g_owned's order; what is made is dropped on failure */
    if (!(r[0] = PyErr_NewExceptionWithDoc(
              "cbt.Error",
              "A cbt call failed: .status is the cbt_status code, the message cbt_strerror's.",
              NULL, NULL)) ||
        !(r[1] = PyDict_New()) || !(r[2] = PyDict_New()) || !(r[3] = PyDict_New()) ||
        !(r[4] = PyUnicode_InternFromString("ts_ns")) ||
        !(r[5] = PyUnicode_InternFromString("pair")) ||
        !(r[6] = PyUnicode_InternFromString("event_type")) ||
        !(r[7] = PyUnicode_InternFromString("session_id")) ||
        !(r[8] = PyUnicode_InternFromString("value")) ||
        !(r[9] = PyType_FromModuleAndSpec(m, &CpuStream_spec, NULL)) ||
        !(r[10] = PyType_FromModuleAndSpec(m, &SpanContext_spec, NULL)) ||
        !(r[11] = PyType_FromModuleAndSpec(m, &PSpan_spec, NULL)))
        return -1;
    PyObject *zero = PyLong_FromLong(0);
    if (!zero || PyObject_SetAttrString(r[0], "status", zero) < 0 ||
        PyObject_SetAttrString(r[0], "field", Py_None) < 0) { /* raise_status_field */
        Py_XDECREF(zero);
        return -1;
    }
    Py_DECREF(zero);
    if (PyModule_AddObjectRef(m, "Error", r[0]) < 0 ||
        PyModule_AddObjectRef(m, "CpuStream", r[9]) < 0 ||
        PyModule_AddObjectRef(m, "SpanContext", r[10]) < 0 ||
        PyModule_AddObjectRef(m, "PSpan", r[11]) < 0)
        return -1;
    if (PyModule_AddIntConstant(m, "SESSION_MAX", CBT_SESSION_MAX - 1) < 0 ||
        PyModule_AddIntConstant(m, "EVENT_META_MAX", CBT_EVENT_META_MAX) < 0 ||
        PyModule_AddIntConstant(m, "SPAN_STR_MAX", CBT_META_INLINE_MAX - 1) < 0 ||
        PyModule_AddIntConstant(m, "HAVE_CUDA", CBT_HAVE_CUDA) < 0 ||
        PyModule_AddIntConstant(m, "HAVE_OTLP", CBT_HAVE_OTLP) < 0 ||
        PyModule_AddIntConstant(m, "HAVE_RECORDING", CBT_HAVE_MSGPACK) < 0 ||
        PyModule_AddIntConstant(m, "LIMITED_API", CBT_PY_LIMITED_API_) < 0 ||
        PyModule_AddStringConstant(m, "__version__", CBT_VERSION_STRING) < 0)
        return -1;
    /* the status codes, by name (OK, ERR_INVAL, ...): cbt/status.h's one list */
    static const struct { const char *n; int v; } codes[] = {
#define STATUS_CODE_(name, value, message) {#name, CBT_##name},
        CBT_STATUS_LIST(STATUS_CODE_)
#undef STATUS_CODE_
    };
    if (PyModule_AddIntConstant(m, "STATUS_COUNT", CBT_STATUS_COUNT_) < 0)
        return -1;
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (PyModule_AddIntConstant(m, codes[i].n, codes[i].v) < 0)
            return -1;
    (void)cbt_sampler_from_env(&g_sampler, stderr);
    for (size_t i = 0; i < N_OWNED_; i++)
        *g_owned[i] = r[i];
    ms->owner = g_module_owned = 1;
    return 0;
}

static int module_traverse(PyObject *m, visitproc visit, void *arg)
{
    module_state *ms = PyModule_GetState(m);
    for (size_t i = 0; ms && i < N_OWNED_; i++)
        Py_VISIT(ms->refs[i]);
    return 0;
}

/* m_clear and m_free: the module object goes (its last reference: nothing
 * that calls into this file is left, since each function and each heap
 * type holds the module), or its exec failed. The owner's globals go with
 * it, and a later exec may own the state again. */
static int module_clear(PyObject *m)
{
    module_state *ms = PyModule_GetState(m);
    if (!ms)
        return 0;
    if (ms->owner) {
        for (size_t i = 0; i < N_OWNED_; i++)
            *g_owned[i] = NULL;
        ms->owner = g_module_owned = 0;
    }
    for (size_t i = 0; i < N_OWNED_; i++)
        Py_CLEAR(ms->refs[i]);
    return 0;
}

static void module_free(void *m) { (void)module_clear((PyObject *)m); }

/* Py_mod_gil (free-threaded CPython 3.13+, full-API builds only: a
 * free-threaded CPython cannot load an abi3 module): GIL_USED. The module's
 * globals (the caches, g_closing, g_starting, g_cuda_gen, a CpuStream's
 * users) are read and written under the GIL and nothing else; importing it
 * into a free-threaded CPython turns the GIL on (docs/python.md). */
static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, SLOT_FN_(module_exec)},
#ifdef Py_mod_gil
    {Py_mod_gil, Py_MOD_GIL_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_cbt",
    .m_doc = "cbt's C extension (python/cbt/_cbt.c)",
    .m_size = sizeof(module_state),
    .m_methods = methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

/* Multi-phase init: the module object is made by the import system, and
 * module_exec fills it. */
PyMODINIT_FUNC PyInit__cbt(void);
PyMODINIT_FUNC PyInit__cbt(void) { return PyModuleDef_Init(&moddef); }
