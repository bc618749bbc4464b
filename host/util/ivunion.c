/* host/util/ivunion.c — owns the bounded interval union (internal/ivunion.h). */
#include "internal/ivunion.h"

#include <string.h>

void cbt_ivunion_clear(cbt_ivunion *u) { memset(u, 0, sizeof *u); }

/* Give up the earliest piece to make room. */
static void retire_first(cbt_ivunion *u)
{
    u->retired += u->hi[0] - u->lo[0];
    if (u->hi[0] > u->retired_hi)
        u->retired_hi = u->hi[0];
    memmove(u->lo, u->lo + 1, (u->n - 1) * sizeof u->lo[0]);
    memmove(u->hi, u->hi + 1, (u->n - 1) * sizeof u->hi[0]);
    u->n--;
}

void cbt_ivunion_add(cbt_ivunion *u, uint64_t lo, uint64_t hi)
{
    if (hi < lo)
        hi = lo;
    if (u->retired_hi && lo < u->retired_hi) /* counted already, or given up */
        lo = u->retired_hi;
    if (hi <= lo)
        return;
    /* the pieces it overlaps or touches: [first, last) */
    uint32_t first = 0;
    while (first < u->n && u->hi[first] < lo)
        first++;
    uint32_t last = first;
    while (last < u->n && u->lo[last] <= hi)
        last++;
    if (last > first) { /* merge into piece `first`, drop the rest */
        if (u->lo[first] < lo)
            lo = u->lo[first];
        if (u->hi[last - 1] > hi)
            hi = u->hi[last - 1];
        u->lo[first] = lo;
        u->hi[first] = hi;
        uint32_t gone = last - first - 1;
        memmove(u->lo + first + 1, u->lo + last, (u->n - last) * sizeof u->lo[0]);
        memmove(u->hi + first + 1, u->hi + last, (u->n - last) * sizeof u->hi[0]);
        u->n -= gone;
        return;
    }
    /* a new piece at `first` */
    if (u->n == CBT_IVU_MAX) {
        if (first == 0) { /* it is the earliest: it is the one given up */
            u->retired += hi - lo;
            if (hi > u->retired_hi)
                u->retired_hi = hi;
            return;
        }
        retire_first(u);
        first--;
    }
    memmove(u->lo + first + 1, u->lo + first, (u->n - first) * sizeof u->lo[0]);
    memmove(u->hi + first + 1, u->hi + first, (u->n - first) * sizeof u->hi[0]);
    u->lo[first] = lo;
    u->hi[first] = hi;
    u->n++;
}

uint64_t cbt_ivunion_len(const cbt_ivunion *u)
{
    uint64_t s = u->retired;
    for (uint32_t i = 0; i < u->n; i++)
        s += u->hi[i] - u->lo[i];
    return s;
}
