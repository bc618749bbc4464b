/* tests/test_cupti_records.c — cbt's CUPTI record handling on the CPU, with
 * fake activity records laid out in a buffer as CUPTI lays them out
 * (host/internal/cupti_records.h): a runtime-API record is discarded without
 * ending the walk; a kernel whose timestamps are unknown is skipped and
 * counted; a record CUPTI cannot step past is counted as a truncated buffer,
 * not a silent end; an external correlation joins its kernel to the cbt
 * launch (through the harvester, into a gpu.kernel span under mp.retrieve);
 * enabling CUPTI enables the kernel-launch runtime APIs (or, refused, the
 * whole runtime-API kind) with the others, and disabling disables them all. Built only with CUPTI (the record types are CUPTI's); no
 * device is needed. */
#include <stdalign.h>
#include <stdio.h>
#include <string.h>

#include "cbt/cupti.h"
#include "internal/cupti_records.h"
#include "testutil.h"

/* ---- a buffer of fake records and CUPTI's iterator over it ------------------------ */

/* CUPTI_ACTIVITY_KIND_INVALID (0) plays an incomplete or corrupt record: the
 * iterator cannot know its size, so it stops there with
 * CUPTI_ERROR_INVALID_KIND, as cuptiActivityGetNextRecord does. */
typedef struct fbuf {
    alignas(8) uint8_t b[8192];
    size_t used;
} fbuf;

static size_t rec_size(CUpti_ActivityKind k)
{
    switch (k) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL:
        return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
        return sizeof(CUpti_ActivityExternalCorrelation);
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
        return sizeof(CUpti_ActivityAPI);
    default:
        return 0;
    }
}

static CUptiResult fake_next(void *ctx, uint8_t *buffer, size_t valid, CUpti_Activity **rec)
{
    (void)ctx;
    size_t off = 0;
    if (*rec) {
        size_t sz = rec_size((*rec)->kind);
        if (!sz)
            return CUPTI_ERROR_INVALID_KIND;
        off = (size_t)((uint8_t *)*rec - buffer) + sz;
    }
    if (off + sizeof(CUpti_Activity) > valid)
        return CUPTI_ERROR_MAX_LIMIT_REACHED;
    CUpti_Activity *a = (CUpti_Activity *)(void *)(buffer + off);
    if (!rec_size(a->kind) || off + rec_size(a->kind) > valid)
        return CUPTI_ERROR_INVALID_KIND;
    *rec = a;
    return CUPTI_SUCCESS;
}

static void put(fbuf *f, const void *rec, size_t n)
{
    assert_true(f->used + n <= sizeof f->b);
    memcpy(f->b + f->used, rec, n);
    f->used += n;
}

static void put_kernel(fbuf *f, uint32_t corr, uint64_t start, uint64_t end, const char *name)
{
    CUpti_ActivityKernel10 k;
    memset(&k, 0, sizeof k);
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.correlationId = corr;
    k.start = start;
    k.end = end;
    k.gridX = 132, k.gridY = 1, k.gridZ = 1;
    k.blockX = 128, k.blockY = 1, k.blockZ = 1;
    k.registersPerThread = 40;
    k.staticSharedMemory = 1024;
    k.dynamicSharedMemory = 512;
    k.deviceId = 0;
    k.streamId = 13;
    k.name = name;
    put(f, &k, sizeof k);
}

static void put_extcorr(fbuf *f, CUpti_ExternalCorrelationKind kind, uint32_t corr, uint64_t ext)
{
    CUpti_ActivityExternalCorrelation x;
    memset(&x, 0, sizeof x);
    x.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
    x.externalKind = kind;
    x.externalId = ext;
    x.correlationId = corr;
    put(f, &x, sizeof x);
}

static void put_api(fbuf *f, CUpti_ActivityKind kind, uint32_t corr)
{
    CUpti_ActivityAPI a;
    memset(&a, 0, sizeof a);
    a.kind = kind;
    a.cbid = 211; /* any */
    a.start = 100;
    a.end = 200;
    a.correlationId = corr;
    put(f, &a, sizeof a);
}

static void put_bad(fbuf *f)
{
    CUpti_ActivityAPI junk; /* kind 0: CUPTI cannot size it */
    memset(&junk, 0, sizeof junk);
    put(f, &junk, sizeof junk);
}

/* what the walk pushed */
typedef struct pushed {
    cbt_cupti_krec r[16];
    uint32_t n;
    int refuse; /* refuse every entry (a full queue) */
} pushed;

static int take(void *ctx, const cbt_cupti_krec *r)
{
    pushed *p = ctx;
    if (p->refuse)
        return 0;
    assert_true(p->n < 16);
    p->r[p->n++] = *r;
    return 1;
}

static void walk(fbuf *f, pushed *p, cbt_cupti_walk *w)
{
    memset(p->r, 0, sizeof p->r);
    p->n = 0;
    cbt_cupti_walk_(f->b, f->used, fake_next, NULL, take, p, w);
}

/* ---- the walk ------------------------------------------------------------------------ */

/* An external correlation, its runtime-API record and the kernel: the API
 * record is discarded and counted, and the walk carries on to the kernel. */
static void runtime_record_discarded_walk_goes_on(void **state)
{
    (void)state;
    fbuf f = {.used = 0};
    pushed p = {.n = 0};
    cbt_cupti_walk w;
    put_extcorr(&f, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 10, 5);
    put_api(&f, CUPTI_ACTIVITY_KIND_RUNTIME, 10);
    put_api(&f, CUPTI_ACTIVITY_KIND_DRIVER, 10);
    put_kernel(&f, 10, 1000, 2500, "ring_test_kernel");
    walk(&f, &p, &w);
    assert_int_equal(w.api, 2);
    assert_int_equal(w.extcorr, 1);
    assert_int_equal(w.kernels, 1);
    assert_int_equal(w.truncated, 0);
    assert_int_equal(w.stop, CUPTI_ERROR_MAX_LIMIT_REACHED);
    assert_int_equal(p.n, 2);
    assert_int_equal(p.r[0].kind, CBT_CUPTI_REC_EXTCORR);
    assert_int_equal(p.r[0].corr, 10);
    assert_int_equal(p.r[0].ext, 5);
    const cbt_cupti_krec *k = &p.r[1];
    assert_int_equal(k->kind, CBT_CUPTI_REC_KERNEL);
    assert_int_equal(k->corr, 10);
    assert_int_equal(k->start, 1000);
    assert_int_equal(k->end, 2500);
    assert_int_equal(k->grid[0], 132);
    assert_int_equal(k->block[0], 128);
    assert_int_equal(k->regs, 40);
    assert_int_equal(k->smem_static, 1024);
    assert_int_equal(k->smem_dyn, 512);
    assert_int_equal(k->stream, 13);
    assert_string_equal(k->name, "ring_test_kernel");
}

/* start 0 (CUPTI_TIMESTAMP_UNKNOWN), end 0, end before start: each skipped
 * and counted; the good kernel after them still goes through. */
static void kernel_unknown_timestamps_skipped(void **state)
{
    (void)state;
    fbuf f = {.used = 0};
    pushed p = {.n = 0};
    cbt_cupti_walk w;
    put_kernel(&f, 1, (uint64_t)CUPTI_TIMESTAMP_UNKNOWN, 2000, "k_start0");
    put_kernel(&f, 2, 1000, (uint64_t)CUPTI_TIMESTAMP_UNKNOWN, "k_end0");
    put_kernel(&f, 3, 3000, 2000, "k_backwards");
    put_kernel(&f, 4, 3000, 3000, "k_zero_length"); /* allowed: one timer tick */
    put_kernel(&f, 5, 4000, 5000, "k_good");
    walk(&f, &p, &w);
    assert_int_equal(w.bad_time, 3);
    assert_int_equal(w.kernels, 2);
    assert_int_equal(w.truncated, 0);
    assert_int_equal(p.n, 2);
    assert_int_equal(p.r[0].corr, 4);
    assert_int_equal(p.r[1].corr, 5);
}

/* A record the iterator cannot step past ends the walk there: counted as a
 * truncated buffer (the records behind it are lost), never a silent end. */
static void bad_record_counted_as_truncated(void **state)
{
    (void)state;
    fbuf f = {.used = 0};
    pushed p = {.n = 0};
    cbt_cupti_walk w;
    put_kernel(&f, 1, 1000, 2000, "a");
    put_kernel(&f, 2, 1000, 2000, "b");
    put_bad(&f);
    put_kernel(&f, 3, 1000, 2000, "c"); /* behind the bad one: unreachable */
    walk(&f, &p, &w);
    assert_int_equal(w.kernels, 2);
    assert_int_equal(p.n, 2);
    assert_int_equal(w.truncated, 1);
    assert_int_equal(w.stop, CUPTI_ERROR_INVALID_KIND);

    /* the same buffer delivered as CUPTI's callback does: the stats say so */
    cbt_cupti_stats a = CBT_STRUCT_INIT(cbt_cupti_stats), b = CBT_STRUCT_INIT(cbt_cupti_stats);
    assert_int_equal(cbt_cupti_stats_get(&a), CBT_OK);
    assert_int_equal(a.size, sizeof a);
    assert_int_equal(a.version, CBT_CUPTI_STATS_VERSION);
    cbt_cupti_deliver_(f.b, f.used, fake_next, NULL);
    assert_int_equal(cbt_cupti_stats_get(&b), CBT_OK);
    assert_int_equal(b.truncated, a.truncated + 1);
    assert_int_equal(b.records, a.records + 2);

    /* a buffer that simply ends is not truncated; an empty one neither */
    fbuf g = {.used = 0};
    put_kernel(&g, 4, 1000, 2000, "d");
    walk(&g, &p, &w);
    assert_int_equal(w.truncated, 0);
    assert_int_equal(w.kernels, 1);
    cbt_cupti_walk_(g.b, 0, fake_next, NULL, take, &p, &w);
    assert_int_equal(w.truncated, 0);
    assert_int_equal(w.kernels, 0);
}

/* A full queue refuses entries: counted, and the walk goes on. Other
 * external-correlation kinds (not cbt's CUSTOM0) are ignored. */
static void refused_and_ignored_counted(void **state)
{
    (void)state;
    fbuf f = {.used = 0};
    pushed p = {.n = 0, .refuse = 1};
    cbt_cupti_walk w;
    put_extcorr(&f, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1, 7, 99);
    put_extcorr(&f, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 7, 3);
    put_kernel(&f, 7, 1000, 2000, "k");
    walk(&f, &p, &w);
    assert_int_equal(w.ignored, 1);
    assert_int_equal(w.extcorr, 1);
    assert_int_equal(w.kernels, 1);
    assert_int_equal(w.refused, 2);
    assert_int_equal(p.n, 0);
}

/* ---- the join: ext-correlation -> cbt launch -> the launch's parent ------------------- */

static void extcorr_joins_kernel_to_launch(void **state)
{
    (void)state;
    tu_start(NULL);
    assert_true(cbt_cupti_pool_init_());
    const char *sid = "cupti-join";
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_RETRIEVE_SUBMITTED, sid);
    tu_pub(CBT_EV_MP_RETRIEVE_START, sid);
    cbt_launch_info li = cbt_launch_info_default(CBT_KOP_SCATTER, 4);
    cbt_kspan span;
    assert_int_equal(cbt_launch_begin(NULL, sid, &li, &span), CBT_OK);
    assert_true(span.launch_id != 0);
    tu_flush(); /* the launch is known, with mp.retrieve as its parent */

    cbt_cupti_stats a = CBT_STRUCT_INIT(cbt_cupti_stats), b = CBT_STRUCT_INIT(cbt_cupti_stats);
    assert_int_equal(cbt_cupti_stats_get(&a), CBT_OK);
    fbuf f = {.used = 0};
    put_extcorr(&f, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 4242, span.launch_id);
    put_api(&f, CUPTI_ACTIVITY_KIND_RUNTIME, 4242);
    put_kernel(&f, 4242, 5000000, 6000000, "joined_kernel");
    put_kernel(&f, 4243, 0, 6000000, "no_times"); /* skipped: never a span */
    cbt_cupti_deliver_(f.b, f.used, fake_next, NULL);
    tu_flush();
    tu_pub(CBT_EV_MP_RETRIEVE_END, sid);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    tu_flush();

    const cbt_span *k = tu_find("gpu.kernel", NULL, 0);
    const cbt_span *ret = tu_find("mp.retrieve", sid, 0);
    assert_non_null(k);
    assert_non_null(ret);
    assert_int_equal(tu_count("gpu.kernel", NULL), 1);
    assert_int_equal(tu_attr_i64(k, "launch_id"), span.launch_id);
    assert_int_equal(tu_attr_i64(k, "correlation_id"), 4242);
    assert_int_equal(tu_attr_i64(k, "grid_x"), 132);
    assert_true(tu_is_child_of(k, ret));
    /* CUPTI's 1 ms, kept (through the tick conversion: a few ns of rounding) */
    assert_true(k->end_ns - k->start_ns > 999000 && k->end_ns - k->start_ns < 1001000);
    assert_int_equal(cbt_cupti_stats_get(&b), CBT_OK);
    assert_int_equal(b.records, a.records + 2);
    assert_int_equal(b.spans, a.spans + 1);
    assert_int_equal(b.api_records, a.api_records + 1);
    assert_int_equal(b.bad_timestamps, a.bad_timestamps + 1);
    assert_int_equal(b.unjoined, a.unjoined);
    assert_int_equal(b.dropped, a.dropped);
    printf("# gpu.kernel joined to launch %u under mp.retrieve; records %llu api %llu "
           "bad_timestamps %llu\n",
           span.launch_id, (unsigned long long)b.records, (unsigned long long)b.api_records,
           (unsigned long long)b.bad_timestamps);
    tu_stop();
}

/* ---- the kinds enable turns on -------------------------------------------------------- */

static CUpti_ActivityKind g_on[16], g_off[16];
static uint32_t g_n_on, g_n_off;
static int g_refuse_at = -1;
static CUpti_CallbackId g_api_on[32], g_api_off[32];
static uint32_t g_n_api_on, g_n_api_off;
static int g_api_refuse_at = -1; /* refuse the per-API enable of this (0-based) call */

static CUptiResult fake_enable(CUpti_ActivityKind k)
{
    if (g_refuse_at >= 0 && g_n_on == (uint32_t)g_refuse_at)
        return CUPTI_ERROR_NOT_COMPATIBLE;
    assert_true(g_n_on < 16);
    g_on[g_n_on++] = k;
    return CUPTI_SUCCESS;
}

static CUptiResult fake_disable(CUpti_ActivityKind k)
{
    assert_true(g_n_off < 16);
    g_off[g_n_off++] = k;
    return CUPTI_SUCCESS;
}

static CUptiResult fake_api(CUpti_CallbackId cbid, uint8_t on)
{
    if (on) {
        if (g_api_refuse_at >= 0 && g_n_api_on == (uint32_t)g_api_refuse_at)
            return CUPTI_ERROR_NOT_INITIALIZED;
        assert_true(g_n_api_on < 32);
        g_api_on[g_n_api_on++] = cbid;
    } else {
        assert_true(g_n_api_off < 32);
        g_api_off[g_n_api_off++] = cbid;
    }
    return CUPTI_SUCCESS;
}

static void fakes_reset(void)
{
    g_n_on = g_n_off = g_n_api_on = g_n_api_off = 0;
    g_refuse_at = g_api_refuse_at = -1;
}

static int index_of(const CUpti_ActivityKind *ks, uint32_t n, CUpti_ActivityKind k)
{
    for (uint32_t i = 0; i < n; i++)
        if (ks[i] == k)
            return (int)i;
    return -1;
}

static int has_cbid(const CUpti_CallbackId *c, uint32_t n, CUpti_CallbackId id)
{
    for (uint32_t i = 0; i < n; i++)
        if (c[i] == id)
            return 1;
    return 0;
}

/* What joins a kernel to its launch is enabled: the API records of the
 * kernel-launch runtime calls (CUPTI delivers the external correlations with
 * them), the external correlations, the kernels, in that order; only the
 * launch calls, not the whole RUNTIME kind, unless CUPTI refuses the per-API
 * enable; a refusal anywhere undoes what was enabled; disable undoes all. */
static void enable_turns_on_launch_apis(void **state)
{
    (void)state;
    const CUpti_ActivityKind *ks = NULL;
    const CUpti_CallbackId *cb = NULL;
    uint32_t n = cbt_cupti_kinds_(&ks), nc = cbt_cupti_runtime_cbids_(&cb);
    assert_non_null(ks);
    assert_non_null(cb);
    int kern = index_of(ks, n, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    int ext = index_of(ks, n, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
    assert_true(kern >= 0);
    assert_true(ext >= 0);
    /* every runtime call is never the first choice */
    assert_true(index_of(ks, n, CUPTI_ACTIVITY_KIND_RUNTIME) < 0);
    static const struct {
        CUpti_CallbackId id;
        const char *name;
    } need[] = {
        {CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, "cudaLaunchKernel"},
        {CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000, "cudaLaunchKernel_ptsz"},
        {CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000, "__cudaLaunchKernel (<<<>>>)"},
        {CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000, "__cudaLaunchKernel_ptsz"},
        {CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060, "cudaLaunchKernelExC"},
        {CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060, "cudaLaunchKernelExC_ptsz"},
        {CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
         "cudaLaunchCooperativeKernel"},
        {CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, "cudaGraphLaunch"},
        {CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000, "cudaGraphLaunch_ptsz"},
    };
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (!has_cbid(cb, nc, need[i].id))
            fail_msg("cbt_cupti_enable does not record %s: CUPTI would deliver no external "
                     "correlation for such a launch, and its kernel would not join it",
                     need[i].name);

    /* the per-API enable taken: every launch API, then the kinds; no RUNTIME */
    int whole = -1;
    fakes_reset();
    assert_int_equal(cbt_cupti_enable_kinds_(fake_api, fake_enable, fake_disable, &whole),
                     CUPTI_SUCCESS);
    assert_int_equal(whole, 0);
    assert_int_equal(g_n_api_on, nc);
    for (uint32_t i = 0; i < nc; i++)
        assert_int_equal(g_api_on[i], cb[i]);
    assert_int_equal(g_n_on, n);
    assert_int_equal(index_of(g_on, g_n_on, CUPTI_ACTIVITY_KIND_RUNTIME), -1);
    assert_int_equal(g_n_off + g_n_api_off, 0);
    cbt_cupti_disable_kinds_(fake_api, fake_disable, whole);
    assert_int_equal(g_n_off, n);
    for (uint32_t i = 0; i < n; i++) /* the reverse order */
        assert_int_equal(g_off[i], g_on[n - 1 - i]);
    assert_int_equal(g_n_api_off, nc);
    for (uint32_t i = 0; i < nc; i++)
        assert_int_equal(g_api_off[i], cb[nc - 1 - i]);

    /* the last kind refused: the others and the APIs are undone, in reverse */
    fakes_reset();
    g_refuse_at = (int)n - 1;
    assert_int_equal(cbt_cupti_enable_kinds_(fake_api, fake_enable, fake_disable, &whole),
                     CUPTI_ERROR_NOT_COMPATIBLE);
    assert_int_equal(whole, 0);
    assert_int_equal(g_n_on, n - 1);
    assert_int_equal(g_n_off, n - 1);
    for (uint32_t i = 0; i < n - 1; i++)
        assert_int_equal(g_off[i], g_on[n - 2 - i]);
    assert_int_equal(g_n_api_off, nc);

    /* the per-API enable refused half-way: undone, the whole RUNTIME kind instead,
     * before the others; disable disables it last */
    fakes_reset();
    g_api_refuse_at = (int)nc / 2;
    assert_int_equal(cbt_cupti_enable_kinds_(fake_api, fake_enable, fake_disable, &whole),
                     CUPTI_SUCCESS);
    assert_int_equal(whole, 1);
    assert_int_equal(g_n_api_off, g_n_api_on);
    for (uint32_t i = 0; i < g_n_api_on; i++)
        assert_int_equal(g_api_off[i], g_api_on[g_n_api_on - 1 - i]);
    assert_int_equal(g_n_on, n + 1);
    assert_int_equal(g_on[0], CUPTI_ACTIVITY_KIND_RUNTIME);
    for (uint32_t i = 0; i < n; i++)
        assert_int_equal(g_on[1 + i], ks[i]);
    g_n_api_on = g_n_api_off = 0;
    cbt_cupti_disable_kinds_(fake_api, fake_disable, whole);
    assert_int_equal(g_n_off, n + 1);
    for (uint32_t i = 0; i < n + 1; i++)
        assert_int_equal(g_off[i], g_on[n - i]);
    assert_int_equal(g_n_api_on + g_n_api_off, 0);

    /* the fallback refused too: nothing left enabled */
    fakes_reset();
    g_api_refuse_at = 0;
    g_refuse_at = 0;
    assert_int_equal(cbt_cupti_enable_kinds_(fake_api, fake_enable, fake_disable, &whole),
                     CUPTI_ERROR_NOT_COMPATIBLE);
    assert_int_equal(whole, 0);
    assert_int_equal(g_n_on + g_n_api_on, 0);

    /* the fallback taken, then a kind refused: the RUNTIME kind is undone as well */
    fakes_reset();
    g_api_refuse_at = 0;
    g_refuse_at = (int)n; /* RUNTIME is call 0, the last kind call n */
    assert_int_equal(cbt_cupti_enable_kinds_(fake_api, fake_enable, fake_disable, &whole),
                     CUPTI_ERROR_NOT_COMPATIBLE);
    assert_int_equal(whole, 0);
    assert_int_equal(g_n_off, g_n_on);
    for (uint32_t i = 0; i < g_n_on; i++)
        assert_int_equal(g_off[i], g_on[g_n_on - 1 - i]);
    fakes_reset();
}

/* The periodic default flush: due at once, then once a period; flushes are
 * never forced. */
static void periodic_flush_due(void **state)
{
    (void)state;
    uint64_t next = 0, t = 1000000000ull;
    assert_true(cbt_cupti_flush_due_(&next, t));
    assert_int_equal(next, t + CBT_CUPTI_FLUSH_PERIOD_NS);
    assert_false(cbt_cupti_flush_due_(&next, t + 1));
    assert_false(cbt_cupti_flush_due_(&next, t + CBT_CUPTI_FLUSH_PERIOD_NS - 1));
    assert_true(cbt_cupti_flush_due_(&next, t + CBT_CUPTI_FLUSH_PERIOD_NS));
    /* well under the 200 ms a bracketed kernel waits for its launch */
    assert_true(CBT_CUPTI_FLUSH_PERIOD_NS <= 100000000ull);
    /* and never forced: a forced flush hands back kernels still running */
    assert_int_equal(CBT_CUPTI_FLUSH_FLAGS & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED, 0);
}

/* ---- delivery in chunks: the counts stay exact ---------------------------------------- */

/* A buffer of more entries than one chunk (36 kernels, 17 correlations: two
 * chunks) delivered again and again with no harvester draining the queue:
 * every kernel is counted in records, and once the queue is full every entry
 * of a buffer is counted dropped, none lost between chunks. Last: it leaves
 * the queue full. */
static void deliver_counts_exact_across_chunks(void **state)
{
    (void)state;
    assert_true(cbt_cupti_pool_init_());
    fbuf f = {.used = 0};
    for (uint32_t i = 0; i < 17; i++)
        put_extcorr(&f, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 100 + i, 1 + i);
    for (uint32_t i = 0; i < 36; i++)
        put_kernel(&f, 100 + i, 1000, 2000, "chunked");
    const uint64_t per = 36 + 17;
    cbt_cupti_stats a = CBT_STRUCT_INIT(cbt_cupti_stats), b = CBT_STRUCT_INIT(cbt_cupti_stats);
    int full = 0;
    for (int round = 0; round < 200 && !full; round++) { /* 4096 / 53: under 80 rounds */
        assert_int_equal(cbt_cupti_stats_get(&a), CBT_OK);
        cbt_cupti_deliver_(f.b, f.used, fake_next, NULL);
        assert_int_equal(cbt_cupti_stats_get(&b), CBT_OK);
        assert_int_equal(b.records, a.records + 36);
        assert_true(b.dropped - a.dropped <= per);
        full = b.dropped != a.dropped;
    }
    assert_true(full);
    for (int round = 0; round < 3; round++) {
        assert_int_equal(cbt_cupti_stats_get(&a), CBT_OK);
        cbt_cupti_deliver_(f.b, f.used, fake_next, NULL);
        assert_int_equal(cbt_cupti_stats_get(&b), CBT_OK);
        assert_int_equal(b.records, a.records + 36);
        assert_int_equal(b.dropped, a.dropped + per);
    }
    printf("# queue full after chunked deliveries; dropped %llu\n",
           (unsigned long long)b.dropped);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(runtime_record_discarded_walk_goes_on),
        cmocka_unit_test(kernel_unknown_timestamps_skipped),
        cmocka_unit_test(bad_record_counted_as_truncated),
        cmocka_unit_test(refused_and_ignored_counted),
        cmocka_unit_test_teardown(extcorr_joins_kernel_to_launch, tu_teardown),
        cmocka_unit_test(enable_turns_on_launch_apis),
        cmocka_unit_test(periodic_flush_due),
        cmocka_unit_test(deliver_counts_exact_across_chunks), /* last: fills the queue */
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
