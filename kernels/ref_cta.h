/* kernels/ref_cta.h — private to the C references: run a stretch of work as
 * emulated CTA `index` of `n` (instr/kernel_span_cpu.c), so the CBT_KERNEL_SPAN
 * macros stamp the ring as that CTA, and give the calling thread back the
 * emulated CTA it was in before (a CPU launcher may be running the
 * reference). With CBT_DISABLE the macros are compiled out and so is this. */
#ifndef CBT_KERNELS_REF_CTA_H
#define CBT_KERNELS_REF_CTA_H

#include <stdint.h>

#include "cbt/kernel_span.h"

#if defined(CBT_DISABLE)
typedef struct cbt_ref_outer {
    int unused;
} cbt_ref_outer;
static inline cbt_ref_outer cbt_ref_save(void) { return (cbt_ref_outer){0}; }
static inline void cbt_ref_enter(uint32_t index, uint32_t n) { (void)index, (void)n; }
static inline void cbt_ref_leave(void) {}
static inline void cbt_ref_restore(const cbt_ref_outer *o) { (void)o; }
#else
typedef struct cbt_ref_outer {
    int had;
    cbt_cpu_cta cta;
} cbt_ref_outer;
static inline cbt_ref_outer cbt_ref_save(void)
{
    const cbt_cpu_cta *c = cbt_cpu_cta_current();
    cbt_ref_outer o = {0, {0, 0, 0}};
    if (c) {
        o.had = 1;
        o.cta = *c;
    }
    return o;
}
static inline void cbt_ref_enter(uint32_t index, uint32_t n) { cbt_cpu_cta_enter(index, n, 0); }
static inline void cbt_ref_leave(void) { cbt_cpu_cta_leave(); }
static inline void cbt_ref_restore(const cbt_ref_outer *o)
{
    if (o->had)
        cbt_cpu_cta_enter(o->cta.index, o->cta.n_ctas, o->cta.sm);
}
#endif
#endif /* CBT_KERNELS_REF_CTA_H */
