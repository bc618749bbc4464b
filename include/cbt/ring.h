/* cbt/ring.h — owns the device ring: its layout, shared by device (.cu)
 * and host (C) code, and the producer's write protocol.
 *
 * The ring is an array of 64-byte records, a power of two of them, plus a
 * producer counter. Producers (CTAs on the GPU; emulated CTAs on the CPU
 * backend) claim a position with an atomic add on `claim`, clear the slot's
 * sequence word, fence, fill the record, fence, and write the sequence word
 * last: seq = (uint32)(pos + 1).
 * The consumer (the host harvester, host/device/ring.c) trusts a record only when
 * its sequence word equals what position `next` expects, reads the word
 * again after copying the fields (a seqlock), and verifies the record's
 * check word, so a record torn by a producer that lapped it is detected and
 * counted, never harvested.
 *
 * Producers never wait for the consumer and never read consumer state: when
 * the device laps the harvester, the old records are overwritten and the
 * harvester counts each lost position exactly (see ring_harvester.c).
 *
 * Placement: the records live in pinned host memory mapped into the device
 * (default: the harvester reads them while kernels still run, no copy and no
 * synchronisation; each record costs the GPU one 64-byte posted PCIe write),
 * or in device memory copied out asynchronously (docs/ring.md). `claim` and
 * the per-launch fold slots always live in device memory: atomics on them
 * stay on the GPU.
 *
 * CBT_DISABLE changes nothing here: this header holds only the ring's
 * layout and one pure inline (cbt_ring_check), which reference no cbt
 * symbol and so serve disabled builds as they are.
 */
#ifndef CBT_RING_H
#define CBT_RING_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CBT_REC_CTA 1u    /* one record per CTA */
#define CBT_REC_LAUNCH 2u /* one record per launch, CTAs folded */

/* What a kernel span measures; the harvester names the span from it. */
typedef enum cbt_kernel_op {
    CBT_KOP_USER = 0,      /* any kernel wrapped with the macros: "gpu.kernel" span */
    CBT_KOP_SCATTER = 1,   /* cb.scatter */
    CBT_KOP_GATHER = 2,    /* the store direction of the scatter: cb.gather */
    CBT_KOP_REROPE = 3,    /* cb.rerope */
    CBT_KOP_L2_LOAD = 4,   /* cb.l2_load */
    CBT_KOP_COUNT_
} cbt_kernel_op;

/* One record: 64 bytes, 16-byte aligned, sequence word last. */
typedef struct cbt_ring_rec {
    uint64_t t_begin;   /* %globaltimer ns (CPU backend: host clock ticks) */
    uint64_t t_end;
    uint32_t launch_id; /* from the span handle: joins the record to its launch */
    uint32_t cta;       /* per-CTA: linear CTA index; per-launch: CTAs folded */
    uint32_t tokens;    /* per-CTA: this CTA's tokens; per-launch: the sum */
    uint16_t sm;        /* per-CTA: SM id; per-launch: 0xffff */
    uint8_t kind;       /* CBT_REC_CTA or CBT_REC_LAUNCH */
    uint8_t op;         /* cbt_kernel_op */
    uint64_t user;      /* one user value (scatter: tokens re-RoPE'd), summed per launch */
    uint64_t reserved0;
    uint64_t reserved1;
    uint32_t check;     /* cbt_ring_check() of the fields and the commit word */
    uint32_t seq;       /* commit word: (uint32)(position + 1), written last */
} cbt_ring_rec;

#if defined(__CUDACC__)
#define CBT_RING_HD __host__ __device__ __forceinline__
#else
#define CBT_RING_HD static inline
#endif

/* A 32-bit check over a record's fields and its commit word. The seqlock
 * (the word cleared first, read twice) catches a record overwritten while it
 * is read; this catches the rarer mix of two producers of different laps
 * writing the same slot at once (possible only when the ring wraps within
 * one record's write, e.g. a preempted CPU producer): a mixed record fails
 * the check with probability 1 - 2^-32. A few multiplies per record. */
CBT_RING_HD uint32_t cbt_ring_check(uint64_t t0, uint64_t t1, uint32_t launch, uint32_t cta,
                                    uint32_t tokens, uint32_t sm_kind_op, uint64_t user,
                                    uint32_t seq)
{
    uint64_t h = (uint64_t)seq * 0x9e3779b97f4a7c15ull;
    h = (h ^ t0) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
    h = (h ^ t1) * 0x94d049bb133111ebull;
    h ^= h >> 29;
    h = (h ^ (((uint64_t)launch << 32) | cta)) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
    h = (h ^ (((uint64_t)tokens << 32) | sm_kind_op)) * 0x94d049bb133111ebull;
    h ^= h >> 29;
    h = (h ^ user) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return (uint32_t)h;
}

/* sm, kind and op packed as cbt_ring_check takes them. */
#define CBT_RING_SKO(sm, kind, op) \
    (((uint32_t)(sm) << 16) | ((uint32_t)(kind) << 8) | (uint32_t)(op))

/* Per-launch fold slot (device memory): CTAs fold into it with atomics; the
 * last CTA to finish writes the launch's one record and resets the slot.
 * Zero is the empty state, so the slot array needs one memset at creation. */
typedef struct cbt_fold_slot {
    unsigned long long nbegin; /* max of ~t_begin == ~(min t_begin) */
    unsigned long long end;    /* max t_end */
    unsigned long long tokens;
    unsigned long long user;
    unsigned int done;         /* CTAs finished */
    unsigned int pad[3];
} cbt_fold_slot;

#define CBT_FOLD_SLOTS 4096u /* launches in flight at once, per ring */

/* The ring as producers see it: all pointers are usable where the kernel
 * runs (device pointers on the GPU, host pointers on the CPU backend). */
typedef struct cbt_ring_dev {
    cbt_ring_rec *recs;          /* capacity records */
    unsigned long long *claim;   /* positions claimed so far */
    cbt_fold_slot *fold;         /* CBT_FOLD_SLOTS slots */
    uint32_t mask;               /* capacity - 1 */
    uint32_t reserved;
} cbt_ring_dev;

/* The span handle a kernel receives by value (16 bytes): where to write and
 * which launch this is. ring == NULL means "not traced" (tracing off, or the
 * request sampled out): the macros then do nothing but one branch. */
typedef struct cbt_kspan {
    const cbt_ring_dev *ring;
    uint32_t launch_id;
    uint8_t op;       /* cbt_kernel_op */
    uint8_t mode;     /* CBT_REC_CTA or CBT_REC_LAUNCH */
    uint16_t n_ctas_hi; /* reserved; n_ctas comes from the grid */
} cbt_kspan;

#ifdef __cplusplus
}
#endif

#ifdef __cplusplus
static_assert(sizeof(cbt_ring_rec) == 64, "a ring record is 64 bytes");
static_assert(sizeof(cbt_fold_slot) == 48, "fold slot layout");
static_assert(sizeof(cbt_kspan) == 16, "span handle is 16 bytes");
#else
_Static_assert(sizeof(cbt_ring_rec) == 64, "a ring record is 64 bytes");
_Static_assert(sizeof(cbt_fold_slot) == 48, "fold slot layout");
_Static_assert(sizeof(cbt_kspan) == 16, "span handle is 16 bytes");
#endif

#endif /* CBT_RING_H */
