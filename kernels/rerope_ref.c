/* kernels/rerope_ref.c — owns the re-RoPE math of the C references (one
 * token row, shared by the fused scatter and the standalone pass so the two
 * agree bit for bit) and cbt_rerope_ref().
 *
 * A key RoPE'd at old position p is un-rotated by p and rotated by q:
 *   (x1, x2) a pair, (cp, sp) = cos/sin row p, (cq, sq) = cos/sin row q
 *   y1 = x1*cp + x2*sp      y2 = x2*cp - x1*sp      (rotation by -p)
 *   z1 = y1*cq - y2*sq      z2 = y1*sq + y2*cq      (rotation by +q)
 * each product and sum rounded to fp32 in this order (no contraction; the
 * CUDA kernels use __fmul_rn / __fadd_rn for the same sequence), stored
 * rounded to nearest even. Pair j (0 <= j < rot_dim / 2) of a head uses
 * cos_sin[p][j] and cos_sin[p][rot_dim / 2 + j]; NeoX pairs dims
 * (j, j + rot_dim / 2), GPT-J pairs (2j, 2j + 1).
 */
#include <string.h>

#include "kernels_impl.h"
#include "ref_cta.h"

void cbt_rope_row_ref_(void *dst, const void *src, uint32_t num_heads, uint32_t head_dim,
                       cbt_dtype dtype, const cbt_rope *rope, int32_t p, int32_t q)
{
    uint32_t half = rope->rot_dim / 2u;
    uint64_t cp_row = (uint64_t)p * rope->rot_dim, cq_row = (uint64_t)q * rope->rot_dim;
    for (uint32_t h = 0; h < num_heads; h++) {
        uint64_t base = (uint64_t)h * head_dim;
        for (uint32_t j = 0; j < half; j++) {
            uint64_t i1, i2;
            if (rope->style == CBT_ROPE_NEOX) {
                i1 = base + j;
                i2 = base + j + half;
            } else {
                i1 = base + 2u * j;
                i2 = i1 + 1u;
            }
            float cp = cbt_elem_load(rope->cos_sin, cp_row + j, dtype);
            float sp = cbt_elem_load(rope->cos_sin, cp_row + half + j, dtype);
            float cq = cbt_elem_load(rope->cos_sin, cq_row + j, dtype);
            float sq = cbt_elem_load(rope->cos_sin, cq_row + half + j, dtype);
            float x1 = cbt_elem_load(src, i1, dtype);
            float x2 = cbt_elem_load(src, i2, dtype);
            float a = x1 * cp, b = x2 * sp, c = x2 * cp, d = x1 * sp;
            float y1 = a + b, y2 = c - d;
            float e = y1 * cq, f = y2 * sq, k = y1 * sq, m = y2 * cq;
            cbt_elem_store(dst, i1, dtype, e - f);
            cbt_elem_store(dst, i2, dtype, k + m);
        }
        if (dst != src && rope->rot_dim < head_dim) {
            uint32_t es = cbt_dtype_size(dtype);
            memcpy((unsigned char *)dst + (base + rope->rot_dim) * es,
                   (const unsigned char *)src + (base + rope->rot_dim) * es,
                   (size_t)(head_dim - rope->rot_dim) * es);
        }
    }
}

cbt_status cbt_rerope_ref(void *keys, uint32_t n_tokens, uint32_t num_heads, uint32_t head_dim,
                          cbt_dtype dtype, const cbt_rope *rope, const int32_t *new_positions,
                          const cbt_kspan *span, uint32_t *n_shifted)
{
    if (!keys || !new_positions || !n_tokens || !num_heads || !head_dim)
        return CBT_ERR_INVAL;
    uint32_t es = cbt_dtype_size(dtype);
    if (!es)
        return CBT_ERR_INVAL;
    uint64_t row = (uint64_t)num_heads * head_dim * es;
    if (row > (uint64_t)INT32_MAX)
        return CBT_ERR_INVAL;
    cbt_status st = cbt_rope_check_(rope, dtype, head_dim);
    if (st)
        return st;
    st = cbt_kspan_check_(span);
    if (st)
        return st;

    int traced = span && span->ring;
    cbt_ref_outer outer = cbt_ref_save();
    cbt_kspan none = {NULL, 0, 0, 0, 0};
    const cbt_kspan *sp = traced ? span : &none;
    if (traced)
        cbt_ref_enter(0, 1);
    CBT_KERNEL_SPAN_BEGIN(*sp);
    uint32_t shifted = 0;
    for (uint32_t i = 0; i < n_tokens; i++) {
        int32_t p = rope->old_positions[i], q = new_positions[i];
        if (p == q || !cbt_rope_pos_ok(rope, p, q))
            continue; /* untouched: nothing to do, or nothing it could be rotated by */
        unsigned char *k = (unsigned char *)keys + (uint64_t)i * row;
        cbt_rope_row_ref_(k, k, num_heads, head_dim, dtype, rope, p, q);
        shifted++;
    }
    CBT_KERNEL_SPAN_END_USER(*sp, n_tokens, shifted);
    if (traced) {
        cbt_ref_leave();
        cbt_ref_restore(&outer);
    }
    if (n_shifted)
        *n_shifted = shifted;
    return CBT_OK;
}
