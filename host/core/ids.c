/* host/core/ids.c — owns trace/span id generation and the session-id hash.
 *
 * xoshiro256** (Blackman & Vigna), seeded from getrandom(2); a fallback seed
 * mixes the clock and the address space when getrandom is unavailable. Ids
 * are never zero (W3C: all-zero ids are invalid). Harvester thread only.
 */
#include <string.h>
#include <sys/random.h>

#include "internal/tracer.h"

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void cbt_ids_seed(cbt_ids *g)
{
    uint64_t seed[4] = {0};
    ssize_t got = getrandom(seed, sizeof seed, GRND_NONBLOCK);
    if (got != (ssize_t)sizeof seed) {
        uint64_t x = cbt_clock_ticks() ^ cbt_clock_unix_now() ^ (uint64_t)(uintptr_t)g;
        for (int i = 0; i < 4; i++)
            seed[i] = splitmix(&x);
    }
    if ((seed[0] | seed[1] | seed[2] | seed[3]) == 0)
        seed[0] = 1; /* the all-zero state is the one xoshiro cannot leave */
    memcpy(g->s, seed, sizeof seed);
}

uint64_t cbt_ids_next(cbt_ids *g)
{
    uint64_t r;
    do {
        uint64_t *s = g->s;
        r = rotl(s[1] * 5, 7) * 9;
        uint64_t t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = rotl(s[3], 45);
    } while (r == 0);
    return r;
}

void cbt_ids_trace(cbt_ids *g, uint8_t out[16])
{
    uint64_t a = cbt_ids_next(g), b = cbt_ids_next(g);
    memcpy(out, &a, 8);
    memcpy(out + 8, &b, 8);
}

void cbt_ids_span(cbt_ids *g, uint8_t out[8])
{
    uint64_t a = cbt_ids_next(g);
    memcpy(out, &a, 8);
}

