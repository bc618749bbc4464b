/* cbt/tree.h — owns the console view: finished spans printed as one tree per trace.
 *
 * For people, not machines: the demo prints each request's tree with offsets
 * from the root's start and durations in milliseconds, and the attributes
 * that matter for a KV-cache request (session_id, hit_rate, ...), then each
 * span event as "[event <name> +<ms from the span's start>]".
 *
 * CBT_DISABLE (defined before the first cbt include): both calls are static
 * inline no-ops that print nothing and return 0, referencing no cbt symbol.
 */
#ifndef CBT_TREE_H
#define CBT_TREE_H

#include <stddef.h>
#include <stdio.h>

#include "cbt/api.h"
#include "cbt.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef CBT_DISABLE
/* ==== CBT_DISABLE: the calls below compile to no-ops (see the top) ======== */
static inline int cbt_tree_print(FILE *f, const cbt_span *spans, size_t n, size_t max_traces)
{
    (void)f, (void)spans, (void)n, (void)max_traces;
    return 0;
}
static inline int cbt_waterfall_print(FILE *f, const cbt_span *spans, size_t n, size_t k,
                                      unsigned width)
{
    (void)f, (void)spans, (void)n, (void)k, (void)width;
    return 0;
}
#else /* the calls */

/* Print up to `max_traces` traces (0 = all) found in spans[0..n), roots in
 * start order, children under their parents in start order. A span whose
 * parent is not among the spans is printed as a root marked "(orphan)".
 * Returns the number of traces printed, or -1 on allocation failure. */
CBT_API int cbt_tree_print(FILE *f, const cbt_span *spans, size_t n, size_t max_traces);

/* The `k` slowest traces by end-to-end time (root start to the last span's
 * end, GPU work included), each as a waterfall: one bar per span on a
 * `width`-column time axis. Returns the number printed, -1 on allocation
 * failure. */
CBT_API int cbt_waterfall_print(FILE *f, const cbt_span *spans, size_t n, size_t k, unsigned width);

#endif /* CBT_DISABLE */

#ifdef __cplusplus
}
#endif
#endif /* CBT_TREE_H */
