/* host/internal/utf8.h — where a string may be cut: the one rule for every
 * value cbt cuts to fit (an event's string, an array's string element), so
 * that a cut never leaves half a UTF-8 character (exporters send strings as
 * UTF-8). */
#ifndef CBT_HOST_INTERNAL_UTF8_H
#define CBT_HOST_INTERNAL_UTF8_H

#include <stddef.h>

/* The longest prefix of v[0, n) that ends on a UTF-8 character boundary
 * (v[n] must be readable): back over at most three continuation bytes; a
 * longer run is no valid UTF-8, and the cut stays at n. */
static inline size_t cbt_utf8_prefix_(const char *v, size_t n)
{
    size_t back = 0;
    while (back < 3 && back < n && ((unsigned char)v[n - back] & 0xc0u) == 0x80u)
        back++;
    return ((unsigned char)v[n - back] & 0xc0u) == 0x80u ? n : n - back;
}

#endif /* CBT_HOST_INTERNAL_UTF8_H */
