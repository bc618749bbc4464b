/* host/device/ring.c — owns the ring's consumer read and the host placement.
 *
 * The read (cbt_ring_read_) is a seqlock over each record: load the sequence
 * word (acquire), copy the fields (acquire loads), load the word again. For position
 * `next` the word must be (uint32)(next + 1):
 *   - equal on both loads, and the record's check word agrees with its
     fields: harvest, next++;
 *   - ahead of it (a later lap wrote the slot), before or during the copy:
 *     position `next` was overwritten, count it lost, next++;
 *   - behind it, or 0 (not yet written, or being written: producers clear the
     word first): stop; the producer will commit it.
 * So every lost position is counted exactly once and a torn record is never
 * harvested. Producers never wait for us (cbt/ring.h).
 */
#include <stdlib.h>
#include <string.h>

#include "cbt/kernel_span.h"
#include "internal/clock.h"
#include "internal/ring_host.h"

/* Acquire loads for the fields: each orders the second look at the
 * sequence word after itself (the seqlock's read-side fence, free on x86). */
#define LD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)

uint32_t cbt_ring_read_(cbt_ring *r, const cbt_ring_rec *recs, cbt_ring_rec *out, uint32_t max)
{
    uint32_t n = 0;
    uint32_t mask = r->capacity - 1;
    while (n < max) {
        const cbt_ring_rec *s = &recs[r->next & mask];
        uint32_t expect = (uint32_t)(r->next + 1);
        /* acquire: pairs with the producer's release (CPU) or system fence
         * (GPU) before it wrote the sequence word */
        uint32_t s1 = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
        int32_t d = (int32_t)(s1 - expect);
        /* 0: a producer is writing the slot right now (it clears the word
         * first); whatever lap it is, come back for it */
        if (s1 == 0 || d < 0)
            break; /* not yet written */
        if (d > 0) {
            /* one step per overwritten position: the run is as long as what
             * the producers wrote past us, so the work stays proportional */
            r->lost++;
            r->next++;
            continue;
        }
        cbt_ring_rec *o = &out[n];
        o->t_begin = LD(&s->t_begin);
        o->t_end = LD(&s->t_end);
        o->launch_id = LD(&s->launch_id);
        o->cta = LD(&s->cta);
        o->tokens = LD(&s->tokens);
        o->sm = LD(&s->sm);
        o->kind = LD(&s->kind);
        o->op = LD(&s->op);
        o->user = LD(&s->user);
        o->check = LD(&s->check);
        o->seq = s1;
        /* the acquire field loads above come before this second look */
        if (__atomic_load_n(&s->seq, __ATOMIC_RELAXED) != s1 ||
            o->check != cbt_ring_check(o->t_begin, o->t_end, o->launch_id, o->cta, o->tokens,
                                       CBT_RING_SKO(o->sm, o->kind, o->op), o->user, s1)) {
            r->lost++;
            r->torn++;
            r->next++;
            continue;
        }
        r->harvested++;
        r->next++;
        n++;
    }
    return n;
}

static uint32_t host_probe(void *ctx, uint32_t n, uint64_t *dev, uint64_t *lo, uint64_t *hi)
{
    (void)ctx;
    for (uint32_t i = 0; i < n; i++) {
        lo[i] = cbt_clock_ticks_before_loads();
        dev[i] = cbt_cpu_clock();
        hi[i] = cbt_clock_ticks_ordered();
    }
    return n;
}

cbt_status cbt_ring_create_host(uint32_t capacity, double host_ns_per_tick, cbt_ring **out)
{
    if (!out || capacity < 2 || (capacity & (capacity - 1)))
        return CBT_ERR_INVAL;
    cbt_ring *r = calloc(1, sizeof *r);
    if (!r)
        return CBT_ERR_NOMEM;
    r->recs = calloc(capacity, sizeof *r->recs);
    r->host_dev.claim = calloc(1, sizeof *r->host_dev.claim);
    r->host_dev.fold = calloc(CBT_FOLD_SLOTS, sizeof *r->host_dev.fold);
    if (!r->recs || !r->host_dev.claim || !r->host_dev.fold) {
        free(r->recs);
        free(r->host_dev.claim);
        free(r->host_dev.fold);
        free(r);
        return CBT_ERR_NOMEM;
    }
    r->placement = CBT_RING_PLACE_HOST;
    r->capacity = capacity;
    r->host_dev.recs = r->recs;
    r->host_dev.mask = capacity - 1;
    r->view = &r->host_dev;
    cbt_devclock_init(&r->clock, host_ns_per_tick);
    cbt_ring_calibrate(r, 16);
    *out = r;
    return CBT_OK;
}

cbt_ring_free_path cbt_ring_free_path_(int placement, uint32_t abandoned_marks)
{
    if (placement == CBT_RING_PLACE_HOST || abandoned_marks == 0)
        return CBT_RING_FREE_NOW;
    return CBT_RING_FREE_DETACHED;
}

void cbt_ring_destroy_after_(cbt_ring *r, uint32_t abandoned_marks)
{
    if (!r)
        return;
    if (r->placement == CBT_RING_PLACE_HOST) {
        free(r->recs);
        free(r->host_dev.claim);
        free(r->host_dev.fold);
    } else {
        cbt_ring_cuda_destroy_(r, cbt_ring_free_path_(r->placement, abandoned_marks) ==
                                      CBT_RING_FREE_DETACHED);
    }
    free(r); /* the host struct: the CUDA state was handed over whole */
}

void cbt_ring_destroy(cbt_ring *r) { cbt_ring_destroy_after_(r, 0); }

uint32_t cbt_ring_poll(cbt_ring *r, cbt_ring_rec *out, uint32_t max)
{
    if (r->placement == CBT_RING_DEVICE)
        return cbt_ring_cuda_poll_(r, out, max);
    return cbt_ring_read_(r, r->recs, out, max);
}

void cbt_ring_calibrate(cbt_ring *r, uint32_t n)
{
    if (r->placement == CBT_RING_PLACE_HOST)
        cbt_devclock_refresh(&r->clock, host_probe, NULL, n);
    else
        cbt_devclock_refresh(&r->clock, cbt_ring_cuda_probe_, r, n);
}
