/* host/internal/abi.h — owns the size rule of cbt's versioned structs (the
 * policy is written out in cbt.h, "Versioned structs").
 *
 * Every versioned struct begins with `uint32_t version, size;`. Fields are
 * only ever appended, after the previous version's sizeof, so the first
 * `size` bytes of a newer struct are an older one.
 *
 *   in  (the caller hands cbt a struct: cbt_config, cbt_sink, ...):
 *       cbt_abi_in_ starts from cbt's defaults and takes the caller's first
 *       `size` bytes over them, so fields an older caller does not know keep
 *       their defaults; a size larger than cbt knows is refused
 *       (CBT_ERR_VERSION), and so is one too small to hold version and size.
 *   out (cbt fills a struct the caller owns: cbt_metrics, *_stats, and the
 *       cbt_sink / cbt_subscriber a constructor's _into entry point fills):
 *       cbt_abi_out_ writes at most the caller's `size` bytes and sets `size`
 *       to what it wrote, so a newer caller learns which fields are filled.
 *   defaults (an in-struct's _default_into entry point, called by the
 *       header's inline cbt_config_default() and the like):
 *       cbt_abi_defaults_ writes at most the caller's `size` bytes and leaves
 *       version and size as the caller set them, so a struct from a newer
 *       header stays refused where it is handed in.
 * Reserved fields (the explicit tail of a struct that would otherwise end in
 * padding) are never read: cbt writes zero there and appends after them.
 */
#ifndef CBT_HOST_INTERNAL_ABI_H
#define CBT_HOST_INTERNAL_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cbt/status.h"

/* The header every versioned struct starts with. */
typedef struct cbt_abi_head {
    uint32_t version, size;
} cbt_abi_head;

/* `dst` (full_size bytes) holds cbt's defaults; take the caller's `src` over
 * them. CBT_ERR_INVAL for NULL; CBT_ERR_VERSION for a version of 0, a size
 * smaller than the header or larger than full_size. On success dst's
 * version and size are cbt's own (the struct is complete now). */
static inline cbt_status cbt_abi_in_(void *dst, size_t full_size, const void *src,
                                     uint32_t version)
{
    if (!dst || !src)
        return CBT_ERR_INVAL;
    cbt_abi_head h;
    memcpy(&h, src, sizeof h);
    if (h.version == 0 || h.version > version || h.size < sizeof h || h.size > full_size)
        return CBT_ERR_VERSION;
    memcpy((char *)dst + sizeof h, (const char *)src + sizeof h, h.size - sizeof h);
    cbt_abi_head own = {version, (uint32_t)full_size};
    memcpy(dst, &own, sizeof own);
    return CBT_OK;
}

/* Check an out-struct's header before filling it: CBT_ERR_INVAL for NULL,
 * CBT_ERR_VERSION for a size smaller than the header (the caller did not say
 * what it knows: use CBT_STRUCT_INIT). */
static inline cbt_status cbt_abi_out_check_(const void *out)
{
    if (!out)
        return CBT_ERR_INVAL;
    cbt_abi_head h;
    memcpy(&h, out, sizeof h);
    return h.size < sizeof h ? CBT_ERR_VERSION : CBT_OK;
}

/* Copy the filled struct `full` (full_size bytes) into the caller's `out`,
 * at most out->size bytes; out->version and out->size then say what was
 * written. Call cbt_abi_out_check_ first. */
static inline void cbt_abi_out_(void *out, const void *full, size_t full_size, uint32_t version)
{
    cbt_abi_head h;
    memcpy(&h, out, sizeof h);
    size_t n = h.size < full_size ? h.size : full_size;
    memcpy((char *)out + sizeof h, (const char *)full + sizeof h, n - sizeof h);
    cbt_abi_head w = {version, (uint32_t)n};
    memcpy(out, &w, sizeof w);
}

/* An in-struct's defaults into the caller's struct: copy the fields of
 * `full` (full_size bytes holding cbt's defaults) into `out`, at most
 * out->size bytes; out's version and size stay the caller's. CBT_ERR_INVAL
 * for NULL; CBT_ERR_VERSION for a size smaller than the header (nothing
 * written) or larger than full_size (the fields cbt knows were written: the
 * struct comes from a newer header, and cbt_abi_in_ will refuse it). */
static inline cbt_status cbt_abi_defaults_(void *out, const void *full, size_t full_size)
{
    if (!out)
        return CBT_ERR_INVAL;
    cbt_abi_head h;
    memcpy(&h, out, sizeof h);
    if (h.size < sizeof h)
        return CBT_ERR_VERSION;
    size_t n = h.size < full_size ? h.size : full_size;
    memcpy((char *)out + sizeof h, (const char *)full + sizeof h, n - sizeof h);
    return h.size > full_size ? CBT_ERR_VERSION : CBT_OK;
}

#endif /* CBT_HOST_INTERNAL_ABI_H */
