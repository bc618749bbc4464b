/* host/device/cupti_load.c — owns reaching CUPTI without linking it (CBT_CUPTI_DLOPEN,
 * the Python package's build: pyproject.toml, docs/install.md).
 *
 * Linked, libcupti.so.<major> is a DT_NEEDED of whatever holds cupti.c, and a
 * module built so does not import where CUDA is not installed. Here cupti.c is
 * compiled unchanged and the CUPTI entry points it calls are defined in this
 * file instead: each forwards through a table of function pointers, filled
 * once per process, on the first call, by dlopen of libcupti and dlsym of
 * every entry point (all or none). cupti.c calls nothing of CUPTI before
 * cbt_cupti_enable() has found a device, so a program that never enables
 * CUPTI never opens it.
 *
 * Where libcupti is looked for, in order (the first that opens with every
 * entry point wins):
 *   CBT_CUPTI_LIBRARY   a path: that file and nothing else
 *   libcupti.so.<major> (libcupti.so.13: the CUDA major of the headers cbt was
 *                       built with) by the dynamic loader's search:
 *                       LD_LIBRARY_PATH, the ld.so cache
 *   $CUDA_HOME, $CUDA_PATH, /usr/local/cuda: extras/CUPTI/lib64/, lib64/, lib/
 *
 * Without it every forwarded call returns CBT_CUPTI_NOT_LOADED
 * (CUPTI_ERROR_NOT_INITIALIZED) and cuptiGetResultString gives the reason, so
 * cbt_cupti_enable() fails as it does when CUPTI refuses: CBT_ERR_UNSUPPORTED
 * and one stderr line, "cbt: CUPTI unavailable (libcupti.so.13 not found
 * ...)". The symbols defined here are hidden like the rest of libcbt: a
 * process that also loads the real libcupti (a profiler) keeps its own calls
 * bound to it, and cupti.c's to this table.
 *
 * Cost: the first call a dlopen (a few on a miss); every later call one
 * pthread_once check and an indirect call.
 */
#include <cupti.h>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal/cupti_load.h"

/* libcupti.so.<major> of the CUDA these headers are (CUDA 12 on: the major alone) */
#define CUDA_MAJOR (CUDA_VERSION / 1000)

/* X(name, return-less parameter list, argument list): every CUPTI entry point
 * cupti.c calls (grep -ohE "\bcupti[A-Z][A-Za-z_0-9]*\(" host exporter) */
#define CBT_CUPTI_CALLS(X)                                                                         \
    X(cuptiActivityDisable, (CUpti_ActivityKind kind), (kind))                                     \
    X(cuptiActivityEnable, (CUpti_ActivityKind kind), (kind))                                      \
    X(cuptiActivityEnableRuntimeApi, (CUpti_CallbackId cbid, uint8_t enable), (cbid, enable))      \
    X(cuptiActivityFlushAll, (uint32_t flag), (flag))                                              \
    X(cuptiActivityGetNextRecord,                                                                  \
      (uint8_t * buffer, size_t validBufferSizeBytes, CUpti_Activity * *record),                   \
      (buffer, validBufferSizeBytes, record))                                                      \
    X(cuptiActivityGetNumDroppedRecords, (CUcontext context, uint32_t streamId, size_t *dropped),  \
      (context, streamId, dropped))                                                                \
    X(cuptiActivityPopExternalCorrelationId,                                                       \
      (CUpti_ExternalCorrelationKind kind, uint64_t * lastId), (kind, lastId))                     \
    X(cuptiActivityPushExternalCorrelationId, (CUpti_ExternalCorrelationKind kind, uint64_t id),  \
      (kind, id))                                                                                  \
    X(cuptiActivityRegisterCallbacks,                                                              \
      (CUpti_BuffersCallbackRequestFunc funcBufferRequested,                                       \
       CUpti_BuffersCallbackCompleteFunc funcBufferCompleted),                                     \
      (funcBufferRequested, funcBufferCompleted))                                                  \
    X(cuptiGetTimestamp, (uint64_t * timestamp), (timestamp))

#define TABLE_FIELD(name, params, args) CUptiResult(CUPTIAPI *name) params;
static struct {
    CBT_CUPTI_CALLS(TABLE_FIELD)
    CUptiResult(CUPTIAPI *cuptiGetResultString)(CUptiResult result, const char **str);
} fn;
#undef TABLE_FIELD

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_loaded;        /* written once, under g_once */
static char g_path[512];    /* the library opened */
static char g_error[640];   /* why none was */
static char g_soname[32];   /* libcupti.so.<major> */

/* Opens path and looks every entry point up: 1 with fn filled, else 0 with
 * g_error saying why (the handle closed again). */
static int try_open(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(g_error, sizeof g_error, "%s", e ? e : path);
        return 0;
    }
    const char *missing = NULL;
#define LOOKUP(name, params, args)                                                                 \
    if (!missing) {                                                                                \
        void *sym = dlsym(h, #name); /* POSIX: an object pointer holds a function's */             \
        if (sym)                                                                                   \
            memcpy(&fn.name, &sym, sizeof sym);                                                    \
        else                                                                                       \
            missing = #name;                                                                       \
    }
    CBT_CUPTI_CALLS(LOOKUP)
    LOOKUP(cuptiGetResultString, , )
#undef LOOKUP
    struct link_map *lm = NULL;
    const char *where = dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name[0]
                            ? lm->l_name
                            : path;
    if (missing) {
        snprintf(g_error, sizeof g_error, "%s has no %s (not the CUPTI of CUDA %d)", where,
                 missing, CUDA_MAJOR);
        memset(&fn, 0, sizeof fn);
        dlclose(h);
        return 0;
    }
    snprintf(g_path, sizeof g_path, "%s", where);
    return 1; /* never closed: CUPTI's threads call back into the process */
}

static void load_once(void)
{
    snprintf(g_soname, sizeof g_soname, "libcupti.so.%d", CUDA_MAJOR);
    const char *env = getenv("CBT_CUPTI_LIBRARY");
    if (env && env[0]) {
        if (!(g_loaded = try_open(env))) {
            char why[sizeof g_error];
            memcpy(why, g_error, sizeof why);
            snprintf(g_error, sizeof g_error, "CBT_CUPTI_LIBRARY=%.200s: %.400s", env, why);
        }
        return;
    }
    if ((g_loaded = try_open(g_soname)))
        return;
    char first[sizeof g_error]; /* the loader's own search says most */
    memcpy(first, g_error, sizeof first);
    const char *roots[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
    const char *subs[] = {"extras/CUPTI/lib64", "lib64", "lib"};
    for (size_t r = 0; r < sizeof roots / sizeof roots[0]; r++) {
        if (!roots[r] || !roots[r][0])
            continue;
        for (size_t d = 0; d < sizeof subs / sizeof subs[0]; d++) {
            char p[sizeof g_path];
            int n = snprintf(p, sizeof p, "%s/%s/%s", roots[r], subs[d], g_soname);
            if (n < 0 || (size_t)n >= sizeof p)
                continue;
            if ((g_loaded = try_open(p)))
                return;
            if (strstr(g_error, " has no ")) { /* found, but not this CUDA's: say that */
                memcpy(first, g_error, sizeof first);
            }
        }
    }
    snprintf(g_error, sizeof g_error,
             "%.400s; nor under $CUDA_HOME, $CUDA_PATH or /usr/local/cuda (extras/CUPTI/lib64, "
             "lib64, lib): install CUDA's CUPTI or set CBT_CUPTI_LIBRARY to its path",
             first);
}

int cbt_cupti_load_(void)
{
    pthread_once(&g_once, load_once);
    return g_loaded;
}

const char *cbt_cupti_library_(void)
{
    return cbt_cupti_load_() ? g_path : NULL;
}

const char *cbt_cupti_load_error_(void)
{
    return cbt_cupti_load_() ? "" : g_error;
}

/* the entry points cupti.c calls, each forwarded once libcupti is open */
#define FORWARD(name, params, args)                                                                \
    CUptiResult CUPTIAPI name params                                                               \
    {                                                                                              \
        return cbt_cupti_load_() ? fn.name args : CBT_CUPTI_NOT_LOADED;                            \
    }
CBT_CUPTI_CALLS(FORWARD)
#undef FORWARD

/* Without libcupti: the load error for CBT_CUPTI_NOT_LOADED (what every
 * forwarded call returned), a fixed sentence for any other code. */
CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char **str)
{
    if (cbt_cupti_load_())
        return fn.cuptiGetResultString(result, str);
    if (!str)
        return CUPTI_ERROR_INVALID_PARAMETER;
    *str = result == CBT_CUPTI_NOT_LOADED ? g_error : "CUPTI error (libcupti is not loaded)";
    return CUPTI_SUCCESS;
}
