/* instr/kernel_span_cpu.c — owns the CPU backend's side of CBT_KERNEL_SPAN: the
 * emulated CTA of the current thread, the "device clock", and the ring write
 * with the same protocol as the GPU (cbt/ring.h, cbt/kernel_span.h).
 *
 * The sequence word is cleared first, the fields are written with release
 * stores (each ordered after the cleared word), and the word is set with a
 * release store; the harvester's seqlock reads pair with them. Fold
 * slots use the same max/add/exchange steps as the device code.
 */
#include <time.h>

#include "cbt/kernel_span.h"

static _Thread_local cbt_cpu_cta g_cta;
static _Thread_local int g_in_cta;

void cbt_cpu_cta_enter(uint32_t index, uint32_t n_ctas, uint16_t sm)
{
    g_cta.index = index;
    g_cta.n_ctas = n_ctas;
    g_cta.sm = sm;
    g_in_cta = 1;
}

void cbt_cpu_cta_leave(void) { g_in_cta = 0; }

const cbt_cpu_cta *cbt_cpu_cta_current(void) { return g_in_cta ? &g_cta : NULL; }

uint64_t cbt_cpu_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Release stores for the fields: each orders the cleared sequence word (and
 * everything before it) ahead of itself, which is the seqlock's "write in
 * progress" step without a standalone fence (free on x86, and visible to
 * TSan, which does not model fences). */
#define ST(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

void cbt_cpu_ring_put(const cbt_ring_dev *r, uint64_t t0, uint64_t t1, uint32_t launch,
                      uint32_t cta, uint64_t tokens, uint16_t sm, uint8_t kind, uint8_t op,
                      uint64_t user)
{
    unsigned long long pos = __atomic_fetch_add(r->claim, 1ull, __ATOMIC_RELAXED);
    cbt_ring_rec *d = &r->recs[pos & r->mask];
    /* invalidate first: a reader copying the old lap's record must see the
     * word change if any field below reaches it (the seqlock's odd step) */
    __atomic_store_n(&d->seq, 0u, __ATOMIC_RELAXED);
    ST(&d->t_begin, t0);
    ST(&d->t_end, t1);
    ST(&d->launch_id, launch);
    ST(&d->cta, cta);
    ST(&d->tokens, (uint32_t)tokens);
    ST(&d->sm, sm);
    ST(&d->kind, kind);
    ST(&d->op, op);
    ST(&d->user, user);
    ST(&d->check, cbt_ring_check(t0, t1, launch, cta, (uint32_t)tokens,
                                 CBT_RING_SKO(sm, kind, op), user, (uint32_t)(pos + 1)));
    /* release: the fields before the commit word; pairs with the harvester's
     * acquire load of seq */
    __atomic_store_n(&d->seq, (uint32_t)(pos + 1), __ATOMIC_RELEASE);
}

uint64_t cbt_cpu_span_begin(const cbt_kspan *s)
{
    return s->ring ? cbt_cpu_clock() : 0;
}

static void atomic_max_u64(unsigned long long *p, unsigned long long v)
{
    unsigned long long cur = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (cur < v && !__atomic_compare_exchange_n(p, &cur, v, 1, __ATOMIC_RELAXED,
                                                   __ATOMIC_RELAXED))
        ;
}

void cbt_cpu_span_end(const cbt_kspan *s, uint64_t t0, uint64_t tokens, uint64_t user)
{
    const cbt_ring_dev *r = s->ring;
    if (!r)
        return;
    uint64_t t1 = cbt_cpu_clock();
    const cbt_cpu_cta *c = cbt_cpu_cta_current();
    uint32_t cta = c ? c->index : 0, n_ctas = c ? c->n_ctas : 1;
    uint16_t sm = c ? c->sm : 0;
    if (s->mode == CBT_REC_CTA) {
        cbt_cpu_ring_put(r, t0, t1, s->launch_id, cta, tokens, sm, CBT_REC_CTA, s->op, user);
        return;
    }
    cbt_fold_slot *f = &r->fold[s->launch_id % CBT_FOLD_SLOTS];
    atomic_max_u64(&f->nbegin, ~t0);
    atomic_max_u64(&f->end, t1);
    __atomic_fetch_add(&f->tokens, tokens, __ATOMIC_RELAXED);
    __atomic_fetch_add(&f->user, user, __ATOMIC_RELAXED);
    /* acq_rel: our folds before our count; the last CTA sees everyone's */
    if (__atomic_fetch_add(&f->done, 1u, __ATOMIC_ACQ_REL) != n_ctas - 1)
        return;
    uint64_t b = ~__atomic_exchange_n(&f->nbegin, 0ull, __ATOMIC_RELAXED);
    uint64_t e = __atomic_exchange_n(&f->end, 0ull, __ATOMIC_RELAXED);
    uint64_t tok = __atomic_exchange_n(&f->tokens, 0ull, __ATOMIC_RELAXED);
    uint64_t usr = __atomic_exchange_n(&f->user, 0ull, __ATOMIC_RELAXED);
    __atomic_store_n(&f->done, 0u, __ATOMIC_RELEASE);
    cbt_cpu_ring_put(r, b, e, s->launch_id, n_ctas, tok, 0xffffu, CBT_REC_LAUNCH, s->op, usr);
}
