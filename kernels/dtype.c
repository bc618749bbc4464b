/* kernels/dtype.c — owns element sizes and the argument checks the kernels
 * and their references share (re-RoPE descriptions, span handles). */
#include "kernels_impl.h"

uint32_t cbt_dtype_size(cbt_dtype d)
{
    switch (d) {
    case CBT_DT_F32: return 4;
    case CBT_DT_F16: return 2;
    case CBT_DT_BF16: return 2;
    case CBT_DT_U8: return 1;
    }
    return 0;
}

cbt_status cbt_rope_check_(const cbt_rope *r, cbt_dtype dtype, uint32_t head_dim)
{
    if (!r || !r->cos_sin || !r->old_positions)
        return CBT_ERR_INVAL;
    if (dtype != CBT_DT_F32 && dtype != CBT_DT_F16 && dtype != CBT_DT_BF16)
        return CBT_ERR_INVAL; /* U8 (fp8 and friends) is moved, never rotated */
    if (r->rot_dim == 0 || (r->rot_dim & 1u) || r->rot_dim > head_dim)
        return CBT_ERR_INVAL;
    if (r->max_position == 0 || r->max_position > (uint32_t)INT32_MAX)
        return CBT_ERR_INVAL;
    if (r->style != CBT_ROPE_NEOX && r->style != CBT_ROPE_GPTJ)
        return CBT_ERR_INVAL;
    return CBT_OK;
}

cbt_status cbt_kspan_check_(const cbt_kspan *s)
{
    if (!s || !s->ring)
        return CBT_OK;
    if (s->mode != CBT_REC_CTA && s->mode != CBT_REC_LAUNCH)
        return CBT_ERR_INVAL;
    const cbt_ring_dev *r = s->ring;
    if (!r->recs || !r->claim || !r->fold)
        return CBT_ERR_INVAL;
    if ((r->mask & (r->mask + 1u)) != 0) /* capacity must be a power of two */
        return CBT_ERR_INVAL;
    return CBT_OK;
}
