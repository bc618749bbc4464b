/* tests/nvtx_inject.c — owns the test NVTX tool: an injection library that
 * records every NVTX call a program makes (nvtx_inject.h), standing in for
 * Nsight Systems where there is none.
 *
 * The protocol (nvtx3/nvtxDetail/nvtxInit.h): on the program's first NVTX
 * call, NVTX reads NVTX_INJECTION64_PATH, dlopen()s that library, looks up
 * "InitializeInjectionNvtx2" and calls it with its nvtxGetExportTable. The
 * tool asks the export table for NVTX_ETID_CALLBACKS, gets each module's
 * function table (GetModuleFunctionTable: an array, indexed by callback id,
 * of pointers to NVTX's implementation slots) and writes its own functions
 * into the slots it wants; returning 1 keeps it attached, and NVTX turns the
 * slots left alone into no-ops. Here: the CORE2 (domain) module — domain
 * creation, registered strings, category names, range start/end, marks.
 *
 * A slow tool, on request (cbt_nvtx_inject_stall): the next range start,
 * mark or string registration whose text holds a given needle sleeps before
 * it is recorded, outside the tool's own lock, so only the calling thread
 * waits (a test then checks that no other thread's publish waits with it).
 */
#define _GNU_SOURCE
#include "nvtx_inject.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NVTX_NO_IMPL /* a tool: types and declarations only */
#define NVTX_AS_SYSTEM_HEADER 1
#include "nvtx3/nvToolsExt.h"

#define EXPORT __attribute__((visibility("default")))

EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t getExportTable);

static nvtx_log g_log;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_next_id = NVTX_LOG_RANGE_ID_BASE;

static uint64_t tid(void) { return (uint64_t)syscall(SYS_gettid); }

/* ---- the stall ---- */
static char g_needle[NVTX_LOG_TEXT]; /* written before g_armed is set (release) */
static _Atomic unsigned g_stall_ms;
static _Atomic int g_armed, g_stalling;

EXPORT void cbt_nvtx_inject_stall(const char *needle, unsigned ms)
{
    snprintf(g_needle, sizeof g_needle, "%s", needle ? needle : "");
    atomic_store(&g_stall_ms, ms);
    atomic_store_explicit(&g_armed, 1, memory_order_release);
}

EXPORT int cbt_nvtx_inject_stalling(void) { return atomic_load(&g_stalling); }

/* The armed stall, once, for a call whose text holds the needle. */
static void maybe_stall(const char *text)
{
    /* acquire: pairs with the release in cbt_nvtx_inject_stall (g_needle) */
    if (!atomic_load_explicit(&g_armed, memory_order_acquire) || !text ||
        !strstr(text, g_needle) || !atomic_exchange(&g_armed, 0))
        return;
    unsigned ms = atomic_load(&g_stall_ms);
    atomic_store(&g_stalling, 1);
    struct timespec d = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&d, &d) != 0)
        ;
    atomic_store(&g_stalling, 0);
}

static void copy_text(char *dst, const char *src)
{
    snprintf(dst, NVTX_LOG_TEXT, "%s", src ? src : "");
}

/* Registered string handles are pointers to our own records. */
static const char *registered_text(nvtxStringHandle_t h)
{
    const nvtx_log_string *s = (const nvtx_log_string *)(const void *)h;
    if (s >= g_log.strings && s < g_log.strings + g_log.n_strings)
        return s->text;
    return "<bad registered string>";
}

static void message_text(char *dst, const nvtxEventAttributes_t *a)
{
    switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII: copy_text(dst, a->message.ascii); break;
    case NVTX_MESSAGE_TYPE_REGISTERED: copy_text(dst, registered_text(a->message.registered)); break;
    default: dst[0] = '\0'; break;
    }
}

static nvtxDomainHandle_t NVTX_API inj_domain_create(const char *name)
{
    pthread_mutex_lock(&g_lock);
    nvtxDomainHandle_t h = NULL;
    g_log.seq++;
    if (g_log.n_domains < NVTX_LOG_DOMAINS) {
        nvtx_log_domain *d = &g_log.domains[g_log.n_domains++];
        copy_text(d->name, name);
        d->handle = d;
        h = (nvtxDomainHandle_t)(void *)d;
    } else {
        g_log.n_overflow++;
    }
    pthread_mutex_unlock(&g_lock);
    return h;
}

static void NVTX_API inj_domain_destroy(nvtxDomainHandle_t domain)
{
    (void)domain;
}

static nvtxStringHandle_t NVTX_API inj_register_string(nvtxDomainHandle_t domain, const char *str)
{
    maybe_stall(str);
    pthread_mutex_lock(&g_lock);
    nvtxStringHandle_t h = NULL;
    g_log.seq++;
    if (g_log.n_strings < NVTX_LOG_STRINGS) {
        nvtx_log_string *s = &g_log.strings[g_log.n_strings++];
        s->domain = (const void *)domain;
        copy_text(s->text, str);
        s->handle = s;
        h = (nvtxStringHandle_t)(void *)s;
    } else {
        g_log.n_overflow++;
    }
    pthread_mutex_unlock(&g_lock);
    return h;
}

static void NVTX_API inj_name_category(nvtxDomainHandle_t domain, uint32_t category,
                                       const char *name)
{
    pthread_mutex_lock(&g_lock);
    g_log.seq++;
    if (g_log.n_categories < NVTX_LOG_CATEGORIES) {
        nvtx_log_category *c = &g_log.categories[g_log.n_categories++];
        c->domain = (const void *)domain;
        c->id = category;
        copy_text(c->name, name);
    } else {
        g_log.n_overflow++;
    }
    pthread_mutex_unlock(&g_lock);
}

static nvtxRangeId_t NVTX_API inj_range_start(nvtxDomainHandle_t domain,
                                              const nvtxEventAttributes_t *a)
{
    if (atomic_load_explicit(&g_armed, memory_order_relaxed)) {
        char text[NVTX_LOG_TEXT];
        pthread_mutex_lock(&g_lock); /* registered strings live in the log */
        message_text(text, a);
        pthread_mutex_unlock(&g_lock);
        maybe_stall(text);
    }
    pthread_mutex_lock(&g_lock);
    nvtxRangeId_t id = g_next_id++;
    uint64_t seq = ++g_log.seq;
    if (g_log.n_ranges < NVTX_LOG_RANGES) {
        nvtx_log_range *r = &g_log.ranges[g_log.n_ranges++];
        memset(r, 0, sizeof *r);
        r->id = id;
        r->domain = (const void *)domain;
        r->category = a->category;
        r->message_type = a->messageType;
        r->payload_type = a->payloadType;
        r->payload = a->payload.ullValue;
        message_text(r->message, a);
        r->start_tid = tid();
        r->start_seq = seq;
    } else {
        g_log.n_overflow++;
    }
    pthread_mutex_unlock(&g_lock);
    return id;
}

static void NVTX_API inj_range_end(nvtxDomainHandle_t domain, nvtxRangeId_t id)
{
    (void)domain;
    pthread_mutex_lock(&g_lock);
    uint64_t seq = ++g_log.seq;
    nvtx_log_range *r = NULL;
    if (id >= NVTX_LOG_RANGE_ID_BASE && id - NVTX_LOG_RANGE_ID_BASE < g_log.n_ranges)
        r = &g_log.ranges[id - NVTX_LOG_RANGE_ID_BASE];
    if (!r || r->ended) {
        g_log.n_bad_ends++;
    } else {
        r->ended = 1;
        r->end_tid = tid();
        r->end_seq = seq;
    }
    pthread_mutex_unlock(&g_lock);
}

static void NVTX_API inj_mark(nvtxDomainHandle_t domain, const nvtxEventAttributes_t *a)
{
    if (atomic_load_explicit(&g_armed, memory_order_relaxed)) {
        char text[NVTX_LOG_TEXT];
        pthread_mutex_lock(&g_lock);
        message_text(text, a);
        pthread_mutex_unlock(&g_lock);
        maybe_stall(text);
    }
    pthread_mutex_lock(&g_lock);
    uint64_t seq = ++g_log.seq;
    if (g_log.n_marks < NVTX_LOG_MARKS) {
        nvtx_log_mark *m = &g_log.marks[g_log.n_marks++];
        m->domain = (const void *)domain;
        m->category = a->category;
        m->message_type = a->messageType;
        message_text(m->message, a);
        m->tid = tid();
        m->seq = seq;
    } else {
        g_log.n_overflow++;
    }
    pthread_mutex_unlock(&g_lock);
}

EXPORT const nvtx_log *cbt_nvtx_log(void) { return &g_log; }

#define SLOT(table, cbid, fn) (*(table)[cbid] = (NvtxFunctionPointer)(fn))

EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t getExportTable)
{
    const NvtxExportTableCallbacks *cb =
        (const NvtxExportTableCallbacks *)getExportTable(NVTX_ETID_CALLBACKS);
    if (!cb || cb->struct_size < sizeof *cb || !cb->GetModuleFunctionTable)
        return 0;
    NvtxFunctionTable core2 = NULL;
    unsigned int size = 0;
    if (!cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &size) || !core2 ||
        size < NVTX_CBID_CORE2_DomainDestroy + 1u)
        return 0;
    SLOT(core2, NVTX_CBID_CORE2_DomainMarkEx, inj_mark);
    SLOT(core2, NVTX_CBID_CORE2_DomainRangeStartEx, inj_range_start);
    SLOT(core2, NVTX_CBID_CORE2_DomainRangeEnd, inj_range_end);
    SLOT(core2, NVTX_CBID_CORE2_DomainNameCategoryA, inj_name_category);
    SLOT(core2, NVTX_CBID_CORE2_DomainRegisterStringA, inj_register_string);
    SLOT(core2, NVTX_CBID_CORE2_DomainCreateA, inj_domain_create);
    SLOT(core2, NVTX_CBID_CORE2_DomainDestroy, inj_domain_destroy);

    const NvtxExportTableVersionInfo *vi =
        (const NvtxExportTableVersionInfo *)getExportTable(NVTX_ETID_VERSIONINFO);
    if (vi && vi->struct_size >= sizeof *vi && vi->SetInjectionNvtxVersion)
        vi->SetInjectionNvtxVersion(NVTX_VERSION);

    pthread_mutex_lock(&g_lock);
    g_log.initialized = 1;
    pthread_mutex_unlock(&g_lock);
    return 1;
}
