/* host/spans/registry.c — owns the span registry: (session, logical name) -> open span context.
 *
 * A cbt_strtab keyed by (session, name) with a cbt_span_ctx value, bounded at
 * cbt_config.registry_capacity - 1 entries; a put into a full registry is
 * refused and counted. Harvester thread only, so no locks.
 */
#include <string.h>

#include "internal/tracer.h"

cbt_status cbt_registry_put_k_(cbt_tracer *t, const cbt_skey *k, cbt_name name,
                               const cbt_span_ctx *ctx)
{
    cbt_span_ctx *v = cbt_strtab_upsert_h(&t->reg, k->s, k->len, name,
                                          cbt_strtab_mix(k->base, name), NULL);
    if (!v) {
        atomic_fetch_add_explicit(&t->registry_full, 1, memory_order_relaxed);
        return CBT_ERR_FULL;
    }
    *v = *ctx;
    return CBT_OK;
}

void cbt_registry_remove_k_(cbt_tracer *t, const cbt_skey *k, cbt_name name,
                            const cbt_span_ctx *ctx)
{
    cbt_span_ctx *v = cbt_strtab_find_h(&t->reg, k->s, k->len, name, cbt_strtab_mix(k->base, name));
    if (!v)
        return;
    if (ctx && memcmp(v->span_id, ctx->span_id, 8) != 0)
        return; /* a newer span owns the entry now */
    cbt_strtab_remove(&t->reg, v);
}

/* The public forms check their arguments and hash the session themselves. */
static cbt_status make_key(const char *session, cbt_skey *k)
{
    size_t len = strnlen(session, CBT_SESSION_MAX);
    if (len >= CBT_SESSION_MAX)
        return CBT_ERR_SESSION_TOO_LONG;
    *k = cbt_skey_make(session, len);
    return CBT_OK;
}

cbt_status cbt_registry_put(cbt_tracer *t, const char *session, cbt_name name,
                            const cbt_span_ctx *ctx)
{
    cbt_skey k;
    if (!t || !session || !ctx)
        return CBT_ERR_INVAL;
    cbt_status st = make_key(session, &k);
    return st ? st : cbt_registry_put_k_(t, &k, name, ctx);
}

cbt_status cbt_registry_get(cbt_tracer *t, const char *session, cbt_name name,
                            cbt_span_ctx *out)
{
    if (!t || !session || !out)
        return CBT_ERR_INVAL;
    size_t len = strnlen(session, CBT_SESSION_MAX);
    if (len >= CBT_SESSION_MAX)
        return CBT_ERR_SESSION_TOO_LONG;
    cbt_span_ctx *v = cbt_strtab_find(&t->reg, session, len, name);
    if (!v)
        return CBT_ERR_NOT_FOUND;
    *out = *v;
    return CBT_OK;
}

void cbt_registry_remove(cbt_tracer *t, const char *session, cbt_name name,
                         const cbt_span_ctx *ctx)
{
    cbt_skey k;
    if (!t || !session || make_key(session, &k) != CBT_OK)
        return;
    cbt_registry_remove_k_(t, &k, name, ctx);
}

uint32_t cbt_registry_count(cbt_tracer *t)
{
    return t ? t->reg.count : 0;
}
