/* cbt/request_tree.h — options of the span builders that turn a request's
 * events into a tree: the MP path (cbt/mp.h) and the CacheBlend path
 * (cbt/cb.h). Both run on one engine (docs/spans.md, "The request-tree
 * engine"), so they take the same options.
 *
 * Every field has a default; 0 means "use it". A zero field first looks at
 * the environment:
 *   CBT_MP_ROOT_END      request_end | transfer_end   (root_end; the MP path only)
 *   CBT_SESSION_IDLE_MS  milliseconds, or "off"       (idle_ms)
 *   CBT_LATE_GRACE_MS    milliseconds, or "off"       (grace_ms)
 * A malformed variable makes the subscriber's creation (and cbt_init, which
 * creates the MP one) fail with CBT_ERR_INVAL and a message naming it.
 *
 * Header only: types and constants, no calls.
 */
#ifndef CBT_REQUEST_TREE_H
#define CBT_REQUEST_TREE_H

#include <stdint.h>
#include "cbt/api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* When a root whose REQUEST_END came before its GPU work finished ends. */
typedef enum cbt_root_end {
    CBT_ROOT_END_DEFAULT = 0,  /* the environment's, else CBT_ROOT_END_REQUEST */
    /* At the REQUEST_END time: the request's logical end (the seed's rule for
     * the MP path). Children that finish later stick out past the root. */
    CBT_ROOT_END_REQUEST = 1,
    /* At the END that brought the last pending operation to zero (LMCache
     * 0.5.6's MP rule, and the CacheBlend rule always): no child sticks out. */
    CBT_ROOT_END_TRANSFER = 2,
} cbt_root_end;

#define CBT_TREE_OFF 0xffffffffu /* idle_ms / grace_ms: never */

typedef struct cbt_tree_options {
    uint32_t version, size; /* CBT_STRUCT_INIT(cbt_tree_options) (cbt.h) */
    uint32_t max_sessions;  /* sessions held at once; 0 = 4096; at most 2^22 */
    uint32_t root_end;      /* cbt_root_end; the CB path always uses TRANSFER */
    /* A session with no event for this long (event time) is ended as
     * incomplete, exported and counted (evicted_idle); an open child with no
     * END for this long likewise (children_evicted_idle). 0 = 60000 ms. */
    uint32_t idle_ms;
    /* How long after its root closed a request's late children (a second
     * retrieve pass, a sibling worker's retrieve, a timeout) still join its
     * trace, under the closed root (counted late_children). 0 = 10000 ms. */
    uint32_t grace_ms;
} cbt_tree_options;
#define CBT_TREE_OPTIONS_VERSION 1u
#define cbt_tree_options_version_ CBT_TREE_OPTIONS_VERSION /* for CBT_STRUCT_INIT */
CBT_ASSERT_NO_TAIL_PADDING_(cbt_tree_options, grace_ms);

#ifdef __cplusplus
}
#endif
#endif /* CBT_REQUEST_TREE_H */
