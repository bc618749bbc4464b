/* kernels/l2_load_ref.c — owns the C reference of the L2 load: whole chunks
 * copied from the storage tier's landing buffer into chunk buffers. Traced,
 * it runs one emulated CTA per chunk; each reports tokens = 1 (the chunk)
 * and user = its bytes, so a launch record says chunks and bytes moved. */
#include <string.h>

#include "kernels_impl.h"
#include "ref_cta.h"

cbt_status cbt_l2_load_ref(void *const *dst, const void *const *src, uint32_t n_chunks,
                           uint64_t chunk_bytes, const cbt_kspan *span)
{
    if (!dst || !src || !n_chunks || !chunk_bytes || chunk_bytes > (uint64_t)SIZE_MAX)
        return CBT_ERR_INVAL;
    for (uint32_t i = 0; i < n_chunks; i++)
        if (!dst[i] || !src[i])
            return CBT_ERR_INVAL;
    cbt_status st = cbt_kspan_check_(span);
    if (st)
        return st;
    if (!span || !span->ring) {
        for (uint32_t i = 0; i < n_chunks; i++)
            memcpy(dst[i], src[i], (size_t)chunk_bytes);
        return CBT_OK;
    }
    cbt_ref_outer outer = cbt_ref_save();
    for (uint32_t i = 0; i < n_chunks; i++) {
        cbt_ref_enter(i, n_chunks);
        CBT_KERNEL_SPAN_BEGIN(*span);
        memcpy(dst[i], src[i], (size_t)chunk_bytes);
        CBT_KERNEL_SPAN_END_USER(*span, 1u, chunk_bytes);
        cbt_ref_leave();
    }
    cbt_ref_restore(&outer);
    return CBT_OK;
}
