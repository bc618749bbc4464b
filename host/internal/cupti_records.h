/* host/internal/cupti_records.h — owns the CUPTI record handling that needs no
 * device (host/device/cupti.c), so tests/test_cupti_records.c can drive it
 * with fake records on the CPU: which activity kinds cbt enables, turning one
 * activity record into a queue entry, and the walk over a delivered buffer.
 *
 * Only in builds with CUPTI (the types are CUPTI's). Harvester-free: the
 * walk runs on CUPTI's buffer-completion thread.
 */
#ifndef CBT_HOST_INTERNAL_CUPTI_RECORDS_H
#define CBT_HOST_INTERNAL_CUPTI_RECORDS_H

#include <stddef.h>
#include <stdint.h>

#include <cupti.h>

/* CUDA 13's kernel record (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL). */
typedef CUpti_ActivityKernel10 cbt_cupti_kernel_rec;

#define CBT_CUPTI_KNAME_MAX 128u

/* What cbt_cupti_record_ made of one activity record. */
typedef enum cbt_cupti_rec_class {
    CBT_CUPTI_REC_KERNEL = 1,  /* a kernel: *out filled */
    CBT_CUPTI_REC_EXTCORR = 2, /* a CUSTOM0 external correlation: *out maps corr -> launch id */
    CBT_CUPTI_REC_API,         /* a runtime or driver API record: discarded (the launch
                                * calls' are enabled only so CUPTI emits the external
                                * correlations, which come with them) */
    CBT_CUPTI_REC_BAD_TIME,    /* a kernel whose start or end is unknown (0), or ends before it
                                * starts: skipped */
    CBT_CUPTI_REC_IGNORED      /* another kind, or another external-correlation kind */
} cbt_cupti_rec_class;

/* A queue entry: the fields cbt uses, copied out of CUPTI's buffer. */
typedef struct cbt_cupti_krec {
    uint8_t kind; /* CBT_CUPTI_REC_KERNEL or CBT_CUPTI_REC_EXTCORR */
    uint16_t regs;
    uint32_t corr;
    uint64_t ext;        /* EXTCORR: the cbt launch id */
    uint64_t start, end; /* KERNEL: CUPTI ns */
    uint32_t device, stream;
    int32_t grid[3], block[3];
    int32_t smem_static, smem_dyn;
    char name[CBT_CUPTI_KNAME_MAX];
} cbt_cupti_krec;

/* Classify `rec` and, for a kernel or a CUSTOM0 external correlation, fill
 * *out (zeroed first). */
cbt_cupti_rec_class cbt_cupti_record_(const CUpti_Activity *rec, cbt_cupti_krec *out);

/* The next record of a buffer (cuptiActivityGetNextRecord's contract: *rec
 * NULL for the first; CUPTI_ERROR_MAX_LIMIT_REACHED at the end). */
typedef CUptiResult (*cbt_cupti_next_fn)(void *ctx, uint8_t *buffer, size_t valid,
                                         CUpti_Activity **rec);
/* Take one queue entry: 1, or 0 when refused (queue full: counted refused). */
typedef int (*cbt_cupti_push_fn)(void *ctx, const cbt_cupti_krec *r);

/* What one walk saw. Every kernel record received is kernels + bad_time. */
typedef struct cbt_cupti_walk {
    uint64_t kernels;  /* kernel records handed to push (taken or refused) */
    uint64_t extcorr;  /* CUSTOM0 external correlations handed to push */
    uint64_t api;      /* runtime / driver API records, discarded */
    uint64_t bad_time; /* kernel records skipped for unknown timestamps */
    uint64_t ignored;  /* other kinds */
    uint64_t refused;  /* entries push refused */
    uint32_t truncated; /* 1: the walk ended at an error other than the end of the
                         * buffer; the rest of the buffer (an unknown number of
                         * records) is lost */
    CUptiResult stop;   /* what ended the walk */
} cbt_cupti_walk;

/* Walk `valid` bytes of `buffer` with `next`, classifying every record and
 * handing kernels and external correlations to `push`. A discarded or
 * skipped record never ends the walk; only `next` does: at the end of the
 * buffer (CUPTI_ERROR_MAX_LIMIT_REACHED), or at any other error, which is
 * counted in w->truncated. *w is zeroed first. */
void cbt_cupti_walk_(uint8_t *buffer, size_t valid, cbt_cupti_next_fn next, void *next_ctx,
                     cbt_cupti_push_fn push, void *push_ctx, cbt_cupti_walk *w);

/* The activity kinds cbt_cupti_enable() enables, in order (disable goes in
 * reverse): the external correlations, the kernels. Before them, the API
 * records that carry the correlations: the runtime calls of
 * cbt_cupti_runtime_cbids_ (the kernel launches) through
 * cuptiActivityEnableRuntimeApi, or, when CUPTI refuses that, the whole
 * CUPTI_ACTIVITY_KIND_RUNTIME kind. */
uint32_t cbt_cupti_kinds_(const CUpti_ActivityKind **kinds);
uint32_t cbt_cupti_runtime_cbids_(const CUpti_CallbackId **cbids);

/* Enable the API records (every cbid of cbt_cupti_runtime_cbids_ with
 * api(cbid, 1); on a refusal those are undone with api(cbid, 0) and
 * enable(CUPTI_ACTIVITY_KIND_RUNTIME) is used instead: *whole_runtime 1),
 * then every kind of cbt_cupti_kinds_ with `enable`. All or nothing: on a
 * refusal, everything enabled is undone (reverse order) and the refusal
 * returned (*whole_runtime 0). cbt_cupti_enable() passes
 * cuptiActivityEnableRuntimeApi and cuptiActivityEnable/Disable. */
typedef CUptiResult (*cbt_cupti_kind_fn)(CUpti_ActivityKind kind);
typedef CUptiResult (*cbt_cupti_api_fn)(CUpti_CallbackId cbid, uint8_t enable);
CUptiResult cbt_cupti_enable_kinds_(cbt_cupti_api_fn api, cbt_cupti_kind_fn enable,
                                    cbt_cupti_kind_fn disable, int *whole_runtime);
/* Undo cbt_cupti_enable_kinds_: every kind in reverse order, then the API
 * records as they were enabled (whole_runtime: the RUNTIME kind; else
 * api(cbid, 0) for every cbid, in reverse). */
void cbt_cupti_disable_kinds_(cbt_cupti_api_fn api, cbt_cupti_kind_fn disable, int whole_runtime);

/* The flag of every cuptiActivityFlushAll cbt makes (cbt_cupti_flush, the
 * periodic flush, disable): 0, never CUPTI_ACTIVITY_FLAG_FLUSH_FORCED, which
 * hands back records still incomplete (a running kernel, no end time). */
#define CBT_CUPTI_FLUSH_FLAGS 0u

/* The harvester's periodic default flush (cuptiActivityFlushAll(0)), so a
 * buffer whose kernels have all ended is delivered within about
 * CBT_CUPTI_FLUSH_PERIOD_NS instead of when it fills (a buffer holding a
 * kernel still running waits until it fills: host/device/cupti.c): 1 when a
 * flush is due at `now` (unix ns), and then *next moves a period on; *next 0:
 * due at once. */
#define CBT_CUPTI_FLUSH_PERIOD_NS 100000000ull /* 100 ms */
int cbt_cupti_flush_due_(uint64_t *next, uint64_t now);

/* Make the record queue (and CUPTI's buffer pool) if not made yet: 1, or 0
 * out of memory. Kept for the life of the process. */
int cbt_cupti_pool_init_(void);

/* What CUPTI's buffer-completion callback does with a buffer, minus
 * returning it to the pool: walk it with `next` into a chunk on the caller's
 * stack, moving each full chunk (32 entries) into the harvester's queue under
 * the queue lock (never held across the walk; safe from several threads at
 * once), and add the walk's counts to cbt_cupti_stats: every entry the queue
 * refuses (full) is counted dropped. Entries are refused until
 * cbt_cupti_pool_init_(). */
void cbt_cupti_deliver_(uint8_t *buffer, size_t valid, cbt_cupti_next_fn next, void *next_ctx);

#endif /* CBT_HOST_INTERNAL_CUPTI_RECORDS_H */
