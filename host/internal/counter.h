/* host/internal/counter.h — a statistics counter with one writer.
 *
 * Counters that only the harvester thread bumps (span and dispatch counts,
 * the request-tree engine's counters) are read by getters on any thread with
 * relaxed loads. With one writer a relaxed load and store is enough: no
 * reader can see a torn value, and no increment is lost. A locked
 * read-modify-write (atomic_fetch_add) would also make the writer wait for
 * its earlier stores to drain, several times per span on the hot path.
 * Not for counters that more than one thread bumps. */
#ifndef CBT_INTERNAL_COUNTER_H
#define CBT_INTERNAL_COUNTER_H

#include <stdatomic.h>
#include <stdint.h>

static inline void cbt_count1_(_Atomic uint64_t *c)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

#endif /* CBT_INTERNAL_COUNTER_H */
