/* host/record/lmct_schema.c — owns telling LMCache's trace schemas apart
 * (internal/lmct_schema.h): a header's layout, and whether a record's
 * content belongs to it.
 *
 * What the layouts are (LMCache's lmcache/v1/mp_observability/trace/):
 *   1, LMCache 0.5.6   codec tags tuple, ObjectKey, MemoryLayoutDesc,
 *                      PrefetchHandle, torch.Size, torch.dtype,
 *                      AttnWindowDesc, PrefetchLockMode, GroupedObjectKeys,
 *                      PrefetchTaskSpec, set; StorageManager.
 *                      submit_prefetch_task(spec, external_request_id,
 *                      skip_l2)
 *   2, LMCache 0.5.7   the same and MemoryTags ({segment, residency});
 *                      PrefetchTaskSpec gains allowed_l1_memory_tags and
 *                      allowed_l2_memory_tags (a list of MemoryTags, or
 *                      nil); submit_prefetch_task loses skip_l2
 * and one this cbt refuses by name: LMCache pull request #4871's "2", whose
 * ObjectKey carries cache_salt (and whose PrefetchTaskSpec has no memory
 * tags). A file of another layout under a known number shows itself in
 * one of these places; cbt's own level "gpu" records use none of them. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "internal/lmct_schema.h"

#define TAG_KEY "__t__" /* codecs.py's _WRAP_KEY */
#define VAL_KEY "v"     /* _VALUE_KEY */
#define PR_4871 "LMCache pull request #4871's schema 2"

static const char *const tags_056[] = {"tuple",      "ObjectKey",       "MemoryLayoutDesc",
                                       "PrefetchHandle", "torch.Size",  "torch.dtype",
                                       "AttnWindowDesc", "PrefetchLockMode",
                                       "GroupedObjectKeys", "PrefetchTaskSpec", "set"};

const char *cbt_lmct_schema_name(cbt_lmct_schema s)
{
    switch (s) {
    case CBT_LMCT_SCHEMA_LMCACHE_056: return "lmcache-0.5.6";
    case CBT_LMCT_SCHEMA_LMCACHE_057: return "lmcache-0.5.7";
    default: return "unknown";
    }
}

static void say(char *why, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
}

static bool str_is(const cbt_lmct_value *v, const char *s)
{
    size_t n = strlen(s);
    return v && v->type == CBT_LMCT_STR && v->v.s.len == n && memcmp(v->v.s.ptr, s, n) == 0;
}

static const cbt_lmct_value *get(const cbt_lmct_kv *kv, uint32_t n, const char *key)
{
    for (uint32_t i = 0; i < n; i++)
        if (kv[i].key && strcmp(kv[i].key, key) == 0)
            return &kv[i].value;
    return NULL;
}

static const cbt_lmct_value *map_get(const cbt_lmct_value *m, const char *key)
{
    return m && m->type == CBT_LMCT_MAP ? get(m->v.map.items, m->v.map.count, key) : NULL;
}

cbt_status cbt_lmct_schema_of_header_(int64_t number, const cbt_lmct_kv *meta, uint32_t n_meta,
                                      cbt_lmct_schema *out, char *why, size_t cap)
{
    *out = CBT_LMCT_SCHEMA_UNKNOWN;
    if (number != CBT_LMCT_SCHEMA_LMCACHE_056 && number != CBT_LMCT_SCHEMA_LMCACHE_057) {
        say(why, cap, "unsupported trace_schema_version %lld (this cbt reads 1, LMCache 0.5.6's, "
                      "and 2, LMCache 0.5.7's)", (long long)number);
        return CBT_ERR_LMCT_SCHEMA;
    }
    const cbt_lmct_value *named = get(meta, n_meta, CBT_LMCT_META_SCHEMA);
    if (named) {
        cbt_lmct_schema s = str_is(named, "lmcache-0.5.6")   ? CBT_LMCT_SCHEMA_LMCACHE_056
                            : str_is(named, "lmcache-0.5.7") ? CBT_LMCT_SCHEMA_LMCACHE_057
                                                              : CBT_LMCT_SCHEMA_UNKNOWN;
        if (s == CBT_LMCT_SCHEMA_UNKNOWN) {
            say(why, cap, "level_meta." CBT_LMCT_META_SCHEMA " %s%.*s%s is not a schema this cbt "
                          "reads (lmcache-0.5.6: trace_schema_version 1, lmcache-0.5.7: 2)",
                named->type == CBT_LMCT_STR ? "\"" : "",
                named->type == CBT_LMCT_STR ? (int)(named->v.s.len > 64 ? 64 : named->v.s.len) : 9,
                named->type == CBT_LMCT_STR ? named->v.s.ptr : "(not str)",
                named->type == CBT_LMCT_STR ? "\"" : "");
            return CBT_ERR_LMCT_SCHEMA;
        }
        if ((int64_t)s != number) {
            say(why, cap, "level_meta." CBT_LMCT_META_SCHEMA " says %s, whose trace_schema_version "
                          "is %d, but the header says %lld", cbt_lmct_schema_name(s), (int)s,
                (long long)number);
            return CBT_ERR_LMCT_SCHEMA;
        }
    }
    *out = (cbt_lmct_schema)number;
    return CBT_OK;
}

/* ---- records ------------------------------------------------------------------ */

typedef struct walk {
    cbt_lmct_schema s;
    char *why;
    size_t cap;
} walk;

static bool known_tag(cbt_lmct_schema s, const cbt_lmct_value *tag)
{
    for (size_t i = 0; i < sizeof tags_056 / sizeof tags_056[0]; i++)
        if (str_is(tag, tags_056[i]))
            return true;
    return s == CBT_LMCT_SCHEMA_LMCACHE_057 && str_is(tag, "MemoryTags");
}

static cbt_status bad(walk *w, const char *fmt, const char *what)
{
    char msg[160];
    snprintf(msg, sizeof msg, fmt, what);
    say(w->why, w->cap, "%s: not LMCache's trace schema %s (%s)", msg,
        w->s == CBT_LMCT_SCHEMA_LMCACHE_056 ? "1" : "2", cbt_lmct_schema_name(w->s));
    return CBT_ERR_LMCT_SCHEMA;
}

/* A wrapped value {"__t__": tag, "v": payload}: the tag is the schema's, and
 * the payloads whose wire form the schemas change have that schema's keys. */
static cbt_status check_tagged(walk *w, const cbt_lmct_value *tag, const cbt_lmct_value *payload)
{
    bool v2 = w->s == CBT_LMCT_SCHEMA_LMCACHE_057;
    if (!known_tag(w->s, tag)) {
        char t[72];
        snprintf(t, sizeof t, "%.*s", tag->type == CBT_LMCT_STR ? (int)(tag->v.s.len > 64 ? 64 : tag->v.s.len) : 9,
                 tag->type == CBT_LMCT_STR ? tag->v.s.ptr : "(not str)");
        if (str_is(tag, "MemoryTags"))
            return bad(w, "the codec tag \"%s\" is LMCache 0.5.7's (trace schema 2)", t);
        return bad(w, "an unknown codec tag \"%s\"", t);
    }
    if (str_is(tag, "ObjectKey") && map_get(payload, "cache_salt"))
        return bad(w, "an ObjectKey with cache_salt (%s)", PR_4871);
    if (str_is(tag, "PrefetchTaskSpec")) {
        bool l1 = map_get(payload, "allowed_l1_memory_tags") != NULL;
        bool l2 = map_get(payload, "allowed_l2_memory_tags") != NULL;
        if (v2 && !(l1 && l2))
            return bad(w, "a PrefetchTaskSpec without %s (LMCache 0.5.6's, or " PR_4871 ")",
                       "allowed_l1/l2_memory_tags");
        if (!v2 && (l1 || l2))
            return bad(w, "a PrefetchTaskSpec with %s is LMCache 0.5.7's (trace schema 2)",
                       "allowed_l1/l2_memory_tags");
    }
    if (str_is(tag, "MemoryTags") && (!map_get(payload, "segment") || !map_get(payload, "residency")))
        return bad(w, "a MemoryTags without %s", "segment and residency");
    return CBT_OK;
}

static cbt_status walk_value(walk *w, const cbt_lmct_value *v)
{
    if (v->type == CBT_LMCT_ARRAY) {
        for (uint32_t i = 0; i < v->v.array.count; i++) {
            cbt_status st = walk_value(w, &v->v.array.items[i]);
            if (st)
                return st;
        }
        return CBT_OK;
    }
    if (v->type != CBT_LMCT_MAP)
        return CBT_OK;
    const cbt_lmct_value *tag = map_get(v, TAG_KEY);
    if (tag) {
        cbt_status st = check_tagged(w, tag, map_get(v, VAL_KEY));
        if (st)
            return st;
    }
    for (uint32_t i = 0; i < v->v.map.count; i++) {
        cbt_status st = walk_value(w, &v->v.map.items[i].value);
        if (st)
            return st;
    }
    return CBT_OK;
}

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && strcmp(s + n - k, tail) == 0;
}

cbt_status cbt_lmct_schema_check_record_(cbt_lmct_schema s, const char *qualname,
                                         const cbt_lmct_kv *args, uint32_t n_args, char *why,
                                         size_t cap)
{
    walk w = {.s = s, .why = why, .cap = cap};
    if (s == CBT_LMCT_SCHEMA_LMCACHE_057 && qualname &&
        ends_with(qualname, "StorageManager.submit_prefetch_task") && get(args, n_args, "skip_l2"))
        return bad(&w, "submit_prefetch_task with %s (LMCache 0.5.7 removed it)", "skip_l2");
    /* the nesting is bounded by the reader (CBT_LMCT_DEPTH_MAX) */
    for (uint32_t i = 0; i < n_args; i++) {
        cbt_status st = walk_value(&w, &args[i].value);
        if (st)
            return st;
    }
    return CBT_OK;
}
