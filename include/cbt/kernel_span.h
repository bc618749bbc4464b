/* cbt/kernel_span.h — owns CBT_KERNEL_SPAN: the macros a kernel uses to stamp
 * its own time and token count into the device ring (cbt/ring.h).
 *
 *   __global__ void k(cbt_kspan span, ...) {
 *       CBT_KERNEL_SPAN_BEGIN(span);
 *       ... work; `mine` = tokens this thread handled ...
 *       CBT_KERNEL_SPAN_END(span, mine);
 *   }
 * or, scoped:
 *       CBT_KERNEL_SPAN(span, mine) { ... work ... }
 *
 * BEGIN: thread 0 of the CTA reads the clock (%globaltimer on the GPU).
 * END: a CTA barrier, the CTA's tokens summed (each thread passes its own
 * count; the per-warp sums of tokens and of the user value are 32-bit, so
 * each must stay below 2^32 per warp), then thread 0 reads the clock again and either writes one record
 * for the CTA (span.mode == CBT_REC_CTA) or folds begin/end/tokens into the
 * launch's fold slot, the last CTA to finish writing one record for the whole
 * launch (CBT_REC_LAUNCH). END_USER also sums one user value (the scatter
 * reports re-RoPE'd tokens there).
 *
 * Rules: every thread of the CTA must reach END (END holds a __syncthreads);
 * do not `break`, `continue` or `return` out of a CBT_KERNEL_SPAN block. With
 * span.ring == NULL (tracing off, request sampled out) each macro costs one
 * uniform branch. CBT_DISABLE (defined before the first cbt include)
 * compiles all of them to nothing (a void cast of the arguments) and the
 * CPU backend's calls (cbt_cpu_*) to static inline no-ops referencing no
 * cbt symbol (no current CTA: NULL; clock and begin stamps: 0).
 *
 * The same macros compile as host C for the CPU backend: the clock is
 * CLOCK_MONOTONIC ns, an emulated CTA is one host thread whose index comes
 * from cbt_cpu_cta_enter() (so END's count is that CTA's total), and the ring
 * atomics are C11/GCC atomics. Tests drive the exact protocol that way.
 */
#ifndef CBT_KERNEL_SPAN_H
#define CBT_KERNEL_SPAN_H

#include "cbt/api.h"
#include "cbt/ring.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
/* The emulated CTA running on this host thread (set by the CPU launcher). */
typedef struct cbt_cpu_cta {
    uint32_t index;  /* linear CTA index */
    uint32_t n_ctas; /* CTAs in the launch */
    uint16_t sm;     /* emulated SM (the worker's number) */
} cbt_cpu_cta;
#ifdef __cplusplus
}
#endif

#if defined(CBT_DISABLE)
/* ==== CBT_DISABLE: the macros and calls below compile to nothing (see the top) */

#define CBT_KERNEL_SPAN_BEGIN(span) ((void)(span))
#define CBT_KERNEL_SPAN_END(span, tokens) ((void)(span), (void)(tokens))
#define CBT_KERNEL_SPAN_END_USER(span, tokens, user) ((void)(span), (void)(tokens), (void)(user))
/* a loop run once, like the real macro: a following `else` binds as it does there */
#define CBT_KERNEL_SPAN(span, tokens) \
    for (int cbt_once_ = ((void)(span), (void)(tokens), 1); cbt_once_; cbt_once_ = 0)

#ifdef __cplusplus
extern "C" {
#endif
static inline void cbt_cpu_cta_enter(uint32_t index, uint32_t n_ctas, uint16_t sm)
{
    (void)index, (void)n_ctas, (void)sm;
}
static inline void cbt_cpu_cta_leave(void) {}
static inline const cbt_cpu_cta *cbt_cpu_cta_current(void) { return NULL; }
static inline uint64_t cbt_cpu_clock(void) { return 0; }
static inline uint64_t cbt_cpu_span_begin(const cbt_kspan *s)
{
    (void)s;
    return 0;
}
static inline void cbt_cpu_span_end(const cbt_kspan *s, uint64_t t0, uint64_t tokens,
                                    uint64_t user)
{
    (void)s, (void)t0, (void)tokens, (void)user;
}
static inline void cbt_cpu_ring_put(const cbt_ring_dev *r, uint64_t t0, uint64_t t1,
                                    uint32_t launch, uint32_t cta, uint64_t tokens, uint16_t sm,
                                    uint8_t kind, uint8_t op, uint64_t user)
{
    (void)r, (void)t0, (void)t1, (void)launch, (void)cta, (void)tokens, (void)sm, (void)kind;
    (void)op, (void)user;
}
#ifdef __cplusplus
}
#endif

#elif defined(__CUDACC__)
/* ------------------------------------------------------------------ device */

__device__ __forceinline__ unsigned long long cbt_dev_clock(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ unsigned int cbt_dev_smid(void)
{
    unsigned int s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}

/* The CTA's two accumulators (tokens, user) in shared memory. */
__device__ __forceinline__ unsigned long long *cbt_dev_acc(void)
{
    __shared__ unsigned long long acc[2];
    return acc;
}

/* Write one record: claim, clear the word, fence, fill, fence, commit. The
 * first fence orders the cleared word before the fields (a host reader of the
 * previous lap then sees its record torn); the second orders the fields
 * before the new word. */
__device__ __forceinline__ void cbt_dev_ring_put(const cbt_ring_dev *r, unsigned long long t0,
                                                 unsigned long long t1, unsigned int launch,
                                                 unsigned int cta, unsigned long long tokens,
                                                 unsigned int sm, unsigned int kind,
                                                 unsigned int op, unsigned long long user)
{
    unsigned long long pos = atomicAdd(r->claim, 1ull);
    cbt_ring_rec *d = &r->recs[pos & r->mask];
    volatile cbt_ring_rec *v = d;
    /* invalidate the old lap's word before touching its fields, so a host
     * reader copying it sees the word change (its seqlock check) */
    v->seq = 0u;
    __threadfence_system();
    v->t_begin = t0;
    v->t_end = t1;
    v->launch_id = launch;
    v->cta = cta;
    v->tokens = (unsigned int)tokens;
    v->sm = (unsigned short)sm;
    v->kind = (unsigned char)kind;
    v->op = (unsigned char)op;
    v->user = user;
    v->check = cbt_ring_check(t0, t1, launch, cta, (unsigned int)tokens,
                              CBT_RING_SKO(sm & 0xffffu, kind, op), user, (unsigned int)(pos + 1));
    __threadfence_system(); /* pairs with the host's acquire load of seq */
    v->seq = (unsigned int)(pos + 1);
}

__device__ __forceinline__ unsigned long long cbt_dev_begin(const cbt_kspan &s)
{
    if (s.ring == nullptr)
        return 0;
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
        unsigned long long *acc = cbt_dev_acc();
        acc[0] = 0;
        acc[1] = 0;
        return cbt_dev_clock();
    }
    return 0;
}

__device__ __forceinline__ void cbt_dev_end(const cbt_kspan &s, unsigned long long t0,
                                            unsigned long long tokens, unsigned long long user)
{
    if (s.ring == nullptr)
        return;
    unsigned long long *acc = cbt_dev_acc();
    __syncthreads(); /* the CTA's work is done; thread 0's zeroing is visible */
    /* sum per warp (the live lanes; a last partial warp too), then one shared
     * atomic per warp */
    /* the lanes of this warp that exist: all 32 but in a last partial warp
     * (not __activemask(), which promises no convergence) */
    unsigned int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned int nthr = blockDim.x * blockDim.y * blockDim.z;
    unsigned int lane = tid & 31u, in_warp = nthr - (tid & ~31u);
    unsigned int live = in_warp >= 32u ? 0xffffffffu : (1u << in_warp) - 1u;
    unsigned int wt = __reduce_add_sync(live, (unsigned int)tokens);
    unsigned int wu = __reduce_add_sync(live, (unsigned int)user);
    if (lane == 0 && (wt | wu)) {
        atomicAdd(&acc[0], (unsigned long long)wt);
        atomicAdd(&acc[1], (unsigned long long)wu);
    }
    __syncthreads();
    if (threadIdx.x | threadIdx.y | threadIdx.z)
        return;
    unsigned long long t1 = cbt_dev_clock();
    unsigned int cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    unsigned int n_ctas = gridDim.x * gridDim.y * gridDim.z;
    const cbt_ring_dev *r = s.ring;
    if (s.mode == CBT_REC_CTA) {
        cbt_dev_ring_put(r, t0, t1, s.launch_id, cta, acc[0], cbt_dev_smid(), CBT_REC_CTA, s.op,
                         acc[1]);
        return;
    }
    cbt_fold_slot *f = &r->fold[s.launch_id % CBT_FOLD_SLOTS];
    atomicMax(&f->nbegin, ~t0);
    atomicMax(&f->end, t1);
    atomicAdd(&f->tokens, acc[0]);
    atomicAdd(&f->user, acc[1]);
    __threadfence(); /* our folds are visible before we count ourselves done */
    if (atomicAdd(&f->done, 1u) != n_ctas - 1)
        return;
    __threadfence(); /* every CTA's folds are visible to the last one */
    unsigned long long b = ~atomicExch(&f->nbegin, 0ull);
    unsigned long long e = atomicExch(&f->end, 0ull);
    unsigned long long tok = atomicExch(&f->tokens, 0ull);
    unsigned long long usr = atomicExch(&f->user, 0ull);
    atomicExch(&f->done, 0u); /* the slot is clean for the next launch using it */
    cbt_dev_ring_put(r, b, e, s.launch_id, n_ctas, tok, 0xffffu, CBT_REC_LAUNCH, s.op, usr);
}

#define CBT_KERNEL_SPAN_BEGIN(span) unsigned long long cbt_t0_ = cbt_dev_begin(span)
#define CBT_KERNEL_SPAN_END(span, tokens) cbt_dev_end((span), cbt_t0_, (unsigned long long)(tokens), 0ull)
#define CBT_KERNEL_SPAN_END_USER(span, tokens, user) \
    cbt_dev_end((span), cbt_t0_, (unsigned long long)(tokens), (unsigned long long)(user))
#define CBT_KERNEL_SPAN(span, tokens)                                                  \
    for (unsigned long long cbt_t0_ = cbt_dev_begin(span), cbt_once_ = 1; cbt_once_;   \
         cbt_once_ = 0, cbt_dev_end((span), cbt_t0_, (unsigned long long)(tokens), 0ull))

#else
/* ----------------------------------------------------- host C (CPU backend) */
#ifdef __cplusplus
extern "C" {
#endif

/* Enter / leave an emulated CTA on this thread. */
CBT_API void cbt_cpu_cta_enter(uint32_t index, uint32_t n_ctas, uint16_t sm);
CBT_API void cbt_cpu_cta_leave(void);
CBT_API const cbt_cpu_cta *cbt_cpu_cta_current(void);

/* The CPU backend's "device clock": CLOCK_MONOTONIC ns. */
CBT_API uint64_t cbt_cpu_clock(void);

CBT_API uint64_t cbt_cpu_span_begin(const cbt_kspan *s);
CBT_API void cbt_cpu_span_end(const cbt_kspan *s, uint64_t t0, uint64_t tokens, uint64_t user);

/* Write one record with the same protocol as the device (C11 atomics). */
CBT_API void cbt_cpu_ring_put(const cbt_ring_dev *r, uint64_t t0, uint64_t t1, uint32_t launch,
                              uint32_t cta, uint64_t tokens, uint16_t sm, uint8_t kind, uint8_t op,
                              uint64_t user);

#ifdef __cplusplus
}
#endif

#define CBT_KERNEL_SPAN_BEGIN(span) uint64_t cbt_t0_ = cbt_cpu_span_begin(&(span))
#define CBT_KERNEL_SPAN_END(span, tokens) cbt_cpu_span_end(&(span), cbt_t0_, (uint64_t)(tokens), 0)
#define CBT_KERNEL_SPAN_END_USER(span, tokens, user) \
    cbt_cpu_span_end(&(span), cbt_t0_, (uint64_t)(tokens), (uint64_t)(user))
#define CBT_KERNEL_SPAN(span, tokens)                                             \
    for (uint64_t cbt_t0_ = cbt_cpu_span_begin(&(span)), cbt_once_ = 1; cbt_once_; \
         cbt_once_ = 0, cbt_cpu_span_end(&(span), cbt_t0_, (uint64_t)(tokens), 0))

#endif
#endif /* CBT_KERNEL_SPAN_H */
