/* host/util/strtab.c — owns the bounded (session, tag) hash table (see strtab.h). */
#include "internal/strtab.h"
#include "internal/hash.h"

#include <stdlib.h>
#include <string.h>


cbt_status cbt_strtab_init(cbt_strtab *t, uint32_t capacity, uint32_t limit, size_t val_size)
{
    memset(t, 0, sizeof *t);
    if (capacity < 2 || (capacity & (capacity - 1)) || limit == 0 || limit >= capacity)
        return CBT_ERR_INVAL;
    t->keys = calloc(capacity, sizeof *t->keys);
    t->vals = calloc(capacity, val_size ? val_size : 1);
    if (!t->keys || !t->vals) {
        cbt_strtab_free(t);
        return CBT_ERR_NOMEM;
    }
    t->val_size = val_size;
    t->mask = capacity - 1;
    t->limit = limit;
    return CBT_OK;
}

void cbt_strtab_free(cbt_strtab *t)
{
    free(t->keys);
    free(t->vals);
    t->keys = NULL;
    t->vals = NULL;
}

cbt_status cbt_strtab_init_sessions(cbt_strtab *t, uint32_t max_sessions, size_t val_size)
{
    if (max_sessions == 0)
        max_sessions = 4096;
    if (max_sessions > (1u << 22))
        return CBT_ERR_INVAL;
    uint32_t cap = 2;
    while (cap < 2 * max_sessions)
        cap <<= 1;
    return cbt_strtab_init(t, cap, max_sessions, val_size);
}

void cbt_strtab_clear(cbt_strtab *t)
{
    memset(t->keys, 0, ((size_t)t->mask + 1) * sizeof *t->keys);
    t->count = 0;
}

uint64_t cbt_strtab_base(const char *s, size_t len) { return cbt_hash_bytes(s, len, 0x51ed2705u); }

uint64_t cbt_strtab_mix(uint64_t base, uint16_t tag)
{
    uint64_t h = (base ^ ((uint64_t)tag * 0x9e3779b97f4a7c15ull)) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
    return h ? h : 1;
}

uint64_t cbt_strtab_hash(const char *s, size_t len, uint16_t tag)
{
    return cbt_strtab_mix(cbt_strtab_base(s, len), tag);
}

static void *val_at(cbt_strtab *t, uint32_t i) { return t->vals + (size_t)i * t->val_size; }

static int64_t find_slot(cbt_strtab *t, const char *s, size_t len, uint16_t tag, uint64_t h)
{
    for (uint32_t i = (uint32_t)h & t->mask;; i = (i + 1) & t->mask) {
        cbt_strtab_key *k = &t->keys[i];
        if (k->hash == 0)
            return -1 - (int64_t)i; /* not found: the empty slot that ended the probe */
        if (k->hash == h && k->tag == tag && k->len == len && memcmp(k->s, s, len) == 0)
            return i;
    }
}

void *cbt_strtab_find_h(cbt_strtab *t, const char *s, size_t len, uint16_t tag, uint64_t h)
{
    if (len >= CBT_SESSION_MAX)
        return NULL;
    int64_t i = find_slot(t, s, len, tag, h);
    return i >= 0 ? val_at(t, (uint32_t)i) : NULL;
}

void *cbt_strtab_find(cbt_strtab *t, const char *s, size_t len, uint16_t tag)
{
    if (len >= CBT_SESSION_MAX) /* before hashing: s may be shorter than len claims */
        return NULL;
    return cbt_strtab_find_h(t, s, len, tag, cbt_strtab_hash(s, len, tag));
}

void *cbt_strtab_upsert(cbt_strtab *t, const char *s, size_t len, uint16_t tag, int *created)
{
    if (len >= CBT_SESSION_MAX) {
        if (created)
            *created = 0;
        return NULL;
    }
    return cbt_strtab_upsert_h(t, s, len, tag, cbt_strtab_hash(s, len, tag), created);
}

void *cbt_strtab_upsert_h(cbt_strtab *t, const char *s, size_t len, uint16_t tag, uint64_t h,
                          int *created)
{
    if (created)
        *created = 0;
    if (len >= CBT_SESSION_MAX)
        return NULL;
    int64_t i = find_slot(t, s, len, tag, h);
    if (i >= 0)
        return val_at(t, (uint32_t)i);
    if (t->count >= t->limit)
        return NULL;
    uint32_t slot = (uint32_t)(-1 - i);
    cbt_strtab_key *k = &t->keys[slot];
    k->hash = h;
    k->tag = tag;
    k->len = (uint8_t)len;
    memcpy(k->s, s, len);
    k->s[len] = '\0';
    memset(val_at(t, slot), 0, t->val_size);
    t->count++;
    if (created)
        *created = 1;
    return val_at(t, slot);
}

void cbt_strtab_remove(cbt_strtab *t, void *val)
{
    uint32_t i = (uint32_t)(((unsigned char *)val - t->vals) / t->val_size);
    if (i > t->mask || t->keys[i].hash == 0)
        return;
    /* backward-shift: pull later entries of the probe run into the hole when
     * their home slot does not lie cyclically in (hole, j] */
    for (uint32_t j = (i + 1) & t->mask; t->keys[j].hash != 0; j = (j + 1) & t->mask) {
        uint32_t home = (uint32_t)t->keys[j].hash & t->mask;
        if (((j - home) & t->mask) >= ((j - i) & t->mask)) {
            t->keys[i] = t->keys[j];
            memcpy(val_at(t, i), val_at(t, j), t->val_size);
            i = j;
        }
    }
    t->keys[i].hash = 0;
    t->count--;
}

const cbt_strtab_key *cbt_strtab_key_of(cbt_strtab *t, const void *val)
{
    uint32_t i = (uint32_t)(((const unsigned char *)val - t->vals) / t->val_size);
    return &t->keys[i];
}

void *cbt_strtab_slot(cbt_strtab *t, uint32_t i)
{
    return (i <= t->mask && t->keys[i].hash != 0) ? val_at(t, i) : NULL;
}
