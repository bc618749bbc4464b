/* host/internal/hash.h — the one string hash cbt uses for session ids and
 * span ids in its tables (host/util/hash.c); exporters may use it too
 * (exporter/nvtx.c pairs ranges by it). */
#ifndef CBT_HOST_INTERNAL_HASH_H
#define CBT_HOST_INTERNAL_HASH_H

#include <stddef.h>
#include <stdint.h>

/* A 64-bit hash of the n bytes at p, mixed with `seed`. Not cryptographic. */
uint64_t cbt_hash_bytes(const void *p, size_t n, uint64_t seed);

#endif /* CBT_HOST_INTERNAL_HASH_H */
