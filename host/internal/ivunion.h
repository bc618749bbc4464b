/* host/internal/ivunion.h — owns a bounded union of time intervals: the
 * length of the time covered by any of a set of [lo, hi] intervals given in
 * any order, in fixed memory (host/util/ivunion.c). The request-tree engine
 * keeps one per request for cbt.gpu_busy_ns, the time its stream-timed
 * children kept a stream busy (docs/spans.md, "Queue time").
 *
 * It holds up to CBT_IVU_MAX disjoint intervals, sorted; an interval added
 * merges with every one it overlaps or touches. Exact while the union has at
 * most CBT_IVU_MAX disjoint pieces. Past that the earliest piece is retired:
 * its length is kept in a sum and its end remembered, and a later interval
 * is clipped to start there, so time before that end counts once at most (a
 * late interval falling in a gap before it is not counted). Intervals mostly
 * come in time order (children end in order), so the retired pieces are the
 * ones nothing overlaps any more.
 *
 * No allocation, no locks: a plain value its owner keeps (one thread).
 */
#ifndef CBT_HOST_INTERNAL_IVUNION_H
#define CBT_HOST_INTERNAL_IVUNION_H

#include <stdint.h>

#define CBT_IVU_MAX 8

typedef struct cbt_ivunion {
    uint64_t lo[CBT_IVU_MAX], hi[CBT_IVU_MAX]; /* disjoint, increasing */
    uint32_t n;
    uint64_t retired;    /* summed length of the pieces given up */
    uint64_t retired_hi; /* the end of the last piece given up (0: none) */
} cbt_ivunion;

/* Empty. */
void cbt_ivunion_clear(cbt_ivunion *u);
/* Add [lo, hi] (hi < lo is taken as [lo, lo]: adds nothing). */
void cbt_ivunion_add(cbt_ivunion *u, uint64_t lo, uint64_t hi);
/* The length of the union. */
uint64_t cbt_ivunion_len(const cbt_ivunion *u);

#endif /* CBT_HOST_INTERNAL_IVUNION_H */
