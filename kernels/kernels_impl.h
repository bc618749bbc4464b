/* kernels/kernels_impl.h — private to kernels/ (and its tests): the host-side
 * pieces the C references share — element conversions (fp16 / bf16 <-> fp32,
 * round to nearest even), the per-token guard, the re-RoPE of one token row,
 * and argument checks for spans. The CUDA files use their own intrinsics and
 * share only cbt_scatter_check() with the references.
 */
#ifndef CBT_KERNELS_IMPL_H
#define CBT_KERNELS_IMPL_H

#include <stdint.h>
#include <string.h>

#include "cbt/kv_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- element conversions --------------------------------------------------- */

/* IEEE half -> float (exact). */
static inline float cbt_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t f;
    if (exp == 0) {
        if (man == 0) {
            f = sign;
        } else { /* subnormal: normalise */
            uint32_t e = 0;
            while (!(man & 0x400u)) {
                man <<= 1;
                e++;
            }
            /* value = 1.m * 2^(-14 - e) */
            f = sign | ((127u - 14u - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        f = sign | 0x7f800000u | (man << 13);
    } else {
        f = sign | ((exp + 112u) << 23) | (man << 13);
    }
    float out;
    memcpy(&out, &f, sizeof out);
    return out;
}

/* float -> IEEE half, round to nearest even; overflow to inf, NaN stays NaN. */
static inline uint16_t cbt_f32_to_f16(float v)
{
    uint32_t x;
    memcpy(&x, &v, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf, NaN (quiet) */
        return (uint16_t)(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (ax >= 0x477ff000u) /* >= 65520: rounds to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) { /* normal half: >= 2^-14 */
        uint32_t r = ax - 0x38000000u; /* exponent rebias 127 -> 15 */
        r += 0xfffu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    if (ax < 0x33000000u) /* < 2^-25: rounds to zero */
        return (uint16_t)sign;
    /* subnormal half: value in units of 2^-24 is m >> (126 - e) */
    uint32_t e = ax >> 23;
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t s = 126u - e; /* 14..24 */
    uint32_t q = m >> s;
    uint32_t rem = m & ((1u << s) - 1u);
    uint32_t halfway = 1u << (s - 1u);
    if (rem > halfway || (rem == halfway && (q & 1u)))
        q++;
    return (uint16_t)(sign | q);
}

static inline float cbt_bf16_to_f32(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float out;
    memcpy(&out, &x, sizeof out);
    return out;
}

/* float -> bfloat16, round to nearest even; NaN stays (quiet) NaN. */
static inline uint16_t cbt_f32_to_bf16(float v)
{
    uint32_t x;
    memcpy(&x, &v, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* Element i of a `dt` array as float (F32 / F16 / BF16 only). */
static inline float cbt_elem_load(const void *base, uint64_t i, cbt_dtype dt)
{
    const unsigned char *p = (const unsigned char *)base;
    if (dt == CBT_DT_F32) {
        float f;
        memcpy(&f, p + i * 4u, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + i * 2u, 2);
    return dt == CBT_DT_F16 ? cbt_f16_to_f32(h) : cbt_bf16_to_f32(h);
}

static inline void cbt_elem_store(void *base, uint64_t i, cbt_dtype dt, float v)
{
    unsigned char *p = (unsigned char *)base;
    if (dt == CBT_DT_F32) {
        memcpy(p + i * 4u, &v, 4);
        return;
    }
    uint16_t h = dt == CBT_DT_F16 ? cbt_f32_to_f16(v) : cbt_f32_to_bf16(v);
    memcpy(p + i * 2u, &h, 2);
}

/* ---- shared reference pieces ---------------------------------------------------- */

/* Check a re-RoPE description for keys of `dtype` with heads of `head_dim`. */
cbt_status cbt_rope_check_(const cbt_rope *r, cbt_dtype dtype, uint32_t head_dim);

/* Check a span handle a host reference will write through (ring fields must
 * be usable host pointers; mode CBT_REC_CTA or CBT_REC_LAUNCH). NULL is fine. */
cbt_status cbt_kspan_check_(const cbt_kspan *s);

/* Rotate one token's keys ([num_heads][head_dim] of `dtype`) from old
 * position p to new position q: every head's first rot_dim dims are
 * un-rotated by p and rotated by q in fp32; when dst != src the remaining
 * dims are copied. dst may equal src (in place). p and q must be inside the
 * cos/sin cache. */
void cbt_rope_row_ref_(void *dst, const void *src, uint32_t num_heads, uint32_t head_dim,
                       cbt_dtype dtype, const cbt_rope *rope, int32_t p, int32_t q);

/* Even split of `total` items over `parts`: part k starts here (k == parts
 * gives total). The first total % parts parts get one item more. Same
 * formula as the CUDA kernels, so CTA k of a reference and of the GPU own the
 * same items. */
static inline uint64_t cbt_split_begin(uint64_t total, uint64_t parts, uint64_t k)
{
    uint64_t base = total / parts, rem = total % parts;
    return k * base + (k < rem ? k : rem);
}

/* Whether both positions can index the cos/sin cache. */
static inline int cbt_rope_pos_ok(const cbt_rope *r, int32_t p, int32_t q)
{
    return p >= 0 && q >= 0 && (uint32_t)p < r->max_position && (uint32_t)q < r->max_position;
}

#ifdef __cplusplus
}
#endif
#endif /* CBT_KERNELS_IMPL_H */
