/* cbt/array.h — array values: reading them, and the store that holds them.
 *
 * An event may carry arrays of ints, floats, bools or strings (OTLP's
 * ArrayValue: LMCache 0.5.7's `token_ids`, a 128 k-token prompt's
 * `lmcache.input_ids`). They would not fit an event (a fixed-size value,
 * cbt/event.h) or a span (a fixed-size pool entry, cbt/span.h), so their
 * elements live in one process-wide ARRAY STORE: `arrays_capacity` bytes
 * (cbt_config, CBT_ARRAYS_CAPACITY; 64 MiB by default) reserved by the first
 * cbt_init() of the process, in 4 KiB chunks. An event or a span holds a
 * small reference (cbt_meta / cbt_attr of type CBT_META_ARRAY); the
 * elements are freed when the last holder lets go: the harvester after the
 * event's dispatch, a span when its sinks have it (the span queues of the
 * sink threads and of the OTLP exporter, and the memory sink, hold their
 * own references until they are done).
 *
 * Bounded, never waiting. A publish takes the chunks it needs from a
 * lock-free free list (one CAS per 4 KiB) and copies the elements; no lock,
 * no allocation, no system call. When the store has no room, or an element
 * is invalid, the array is DROPPED: the event still goes out, its value
 * stays an array with no elements (cbt_meta_array() says false), a span
 * copying it counts it in attrs_dropped, and cbt_metrics.arrays_dropped
 * counts it. An event without arrays never touches the store (one flag
 * test on the publish path, CBT_EVF_ARRAYS).
 *
 * Cost. A publish with arrays pays the copy of their elements (a 128 k-token
 * int array is 1 MiB: about a memcpy of it, docs/performance.md). A chunk
 * used for the first time also takes the page fault that maps it (a 1 MiB
 * array on never-used chunks: a few hundred microseconds more on a VM); the
 * free list hands back the most recently freed chunks first, so a steady
 * load reuses a warm, resident set and faults only while it grows.
 *
 * Republishing. A subscriber that publishes again an event it is handed must
 * do so inside its on_event, while the event holds its arrays (the publish
 * then takes references of its own); a copy kept and published later names
 * arrays that may have been freed and reused.
 *
 * Reading. cbt_meta_array() / cbt_attr_array() give a view of a value; an
 * iterator walks its elements in order (lock-free, no allocation, a few
 * instructions an element). A view is valid while its holder holds the
 * value: during a subscriber's on_event for an event, during a sink's
 * on_span for a span, until a memory sink's spans are released.
 *
 * Memory layout (for those who care): numbers are 8 bytes each, bools 1,
 * strings a 4-byte length and the bytes (no NUL), never split across a
 * chunk; a string element is at most CBT_META_STR_MAX - 1 bytes.
 */
#ifndef CBT_ARRAY_H
#define CBT_ARRAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cbt/api.h"
#include "cbt/event.h"
#include "cbt/span.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CBT_ARRAYS_CAPACITY_DEFAULT (64ull << 20) /* bytes */
#define CBT_ARRAYS_CAPACITY_MIN (1ull << 20)
#define CBT_ARRAYS_CAPACITY_MAX (16ull << 30)

/* A view of one array value. */
typedef struct cbt_array {
    uint32_t handle; /* its place in the store (nonzero) */
    uint32_t count;  /* elements */
    uint8_t type;    /* cbt_array_type */
} cbt_array;

/* An iterator over a view's elements. Fields are private. */
typedef struct cbt_array_iter {
    uint32_t chunk, off, left;
    uint8_t type;
} cbt_array_iter;

/* The store's figures (also in cbt_metrics): its capacity in bytes (0 before
 * the first cbt_init), the bytes its live arrays' chunks take now, the
 * arrays dropped for want of room or for a bad element and the arrays
 * stored, since the process began. */
typedef struct cbt_arrays_stats {
    uint64_t capacity, used, dropped, stored;
} cbt_arrays_stats;

#ifdef CBT_DISABLE
/* ==== CBT_DISABLE: no array is ever stored; every call finds nothing ===== */
static inline bool cbt_meta_array(const cbt_meta *m, cbt_array *out)
{
    (void)m, (void)out;
    return false;
}
static inline bool cbt_attr_array(const cbt_attr *a, cbt_array *out)
{
    (void)a, (void)out;
    return false;
}
static inline void cbt_array_iter_init(cbt_array_iter *it, const cbt_array *a)
{
    (void)a;
    if (it)
        it->chunk = it->off = it->left = 0, it->type = 0;
}
static inline bool cbt_array_next_i64(cbt_array_iter *it, int64_t *v)
{
    (void)it, (void)v;
    return false;
}
static inline bool cbt_array_next_f64(cbt_array_iter *it, double *v)
{
    (void)it, (void)v;
    return false;
}
static inline bool cbt_array_next_bool(cbt_array_iter *it, bool *v)
{
    (void)it, (void)v;
    return false;
}
static inline bool cbt_array_next_str(cbt_array_iter *it, const char **s, size_t *len)
{
    (void)it, (void)s, (void)len;
    return false;
}
static inline cbt_status cbt_span_set_array(cbt_span *s, cbt_name key, const cbt_array *a)
{
    (void)s, (void)key, (void)a;
    return CBT_OK;
}
static inline void cbt_arrays_stats_get(cbt_arrays_stats *out)
{
    if (out)
        out->capacity = out->used = out->dropped = out->stored = 0;
}
#else
/* The view of an event value: true and *out set for a published array
 * value that has its elements; false for any other value, a dropped array,
 * or an array not yet published (its elements are still the caller's). */
CBT_API bool cbt_meta_array(const cbt_meta *m, cbt_array *out);

/* The view of a span attribute: true for an array attribute. */
CBT_API bool cbt_attr_array(const cbt_attr *a, cbt_array *out);

/* Start walking `a`'s elements. */
CBT_API void cbt_array_iter_init(cbt_array_iter *it, const cbt_array *a);

/* The next element: true and *v set; false at the end, or when the array's
 * elements are not of that type (a typed walk never reinterprets bytes).
 * A string is `*len` bytes at `*s`, not NUL-terminated, in the store. */
CBT_API bool cbt_array_next_i64(cbt_array_iter *it, int64_t *v);
CBT_API bool cbt_array_next_f64(cbt_array_iter *it, double *v);
CBT_API bool cbt_array_next_bool(cbt_array_iter *it, bool *v);
CBT_API bool cbt_array_next_str(cbt_array_iter *it, const char **s, size_t *len);

/* Set array attribute `key` of span `s` to the array `a` views: the span
 * takes its own reference (the elements are not copied) and lets go when it
 * ends. The rules of cbt_span_set_* (overwrite, CBT_SPAN_ATTR_MAX, counted
 * refusal); CBT_ERR_INVAL for a NULL span, key 0 or a NULL/empty view.
 * cbt_span_set_from_event copies an event's arrays this way. Cost: a scan
 * of the attributes and one atomic increment. Harvester thread. */
CBT_API cbt_status cbt_span_set_array(cbt_span *s, cbt_name key, const cbt_array *a);

/* The store's figures (cbt_arrays_stats, above). Lock-free. */
CBT_API void cbt_arrays_stats_get(cbt_arrays_stats *out);
#endif /* CBT_DISABLE */

#ifdef __cplusplus
}
#endif
#endif /* CBT_ARRAY_H */
