/* host/util/hash.c — owns the one string hash cbt uses in its tables
 * (internal/hash.h): sessions, span ids, NVTX range keys. No cbt state. */
#include <string.h>

#include "internal/hash.h"

/* A short multiply-xorshift hash over 8-byte words; good enough for keys of
 * at most 64 bytes that we compare in full on a hit. Never returns 0. */
uint64_t cbt_hash_bytes(const void *p, size_t n, uint64_t seed)
{
    const unsigned char *b = p;
    uint64_t h = seed ^ (n * 0x9e3779b97f4a7c15ull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        h = (h ^ (w * 0xbf58476d1ce4e5b9ull)) * 0x94d049bb133111ebull;
        h ^= h >> 29;
        b += 8;
        n -= 8;
    }
    if (n) {
        uint64_t w = 0;
        memcpy(&w, b, n);
        h = (h ^ (w * 0xbf58476d1ce4e5b9ull)) * 0x94d049bb133111ebull;
        h ^= h >> 29;
    }
    h ^= h >> 32;
    return h ? h : 1;
}
