/* host/internal/strtab.h — owns the bounded hash table keyed by (session id, tag).
 *
 * Used by the span registry (value: a span context) and by the subscribers'
 * session tables (value: per-session state). Open addressing with linear
 * probing and backward-shift deletion, so there are no tombstones and a
 * probe always ends at an empty slot. Capacity is fixed at creation (a power
 * of two); at most `limit` entries are held, and an insert past that fails.
 * Removal moves later entries: pointers into the table are valid only until
 * the next removal. Single-threaded (the harvester).
 */
#ifndef CBT_HOST_INTERNAL_STRTAB_H
#define CBT_HOST_INTERNAL_STRTAB_H

#include <stddef.h>
#include <stdint.h>

#include "cbt/event.h"
#include "cbt/status.h"

typedef struct cbt_strtab_key {
    uint64_t hash; /* 0 = empty slot */
    uint16_t tag;
    uint8_t len;
    char s[CBT_SESSION_MAX];
} cbt_strtab_key;

typedef struct cbt_strtab {
    cbt_strtab_key *keys;
    unsigned char *vals;
    size_t val_size;
    uint32_t mask, count, limit;
} cbt_strtab;

/* capacity: power of two; limit: at most capacity - 1 entries. */
cbt_status cbt_strtab_init(cbt_strtab *t, uint32_t capacity, uint32_t limit, size_t val_size);
void cbt_strtab_free(cbt_strtab *t);

/* A subscriber's session table: at most `max_sessions` entries (0 = 4096;
 * more than 2^22 is CBT_ERR_INVAL), capacity the next power of two >= twice
 * that, so probes stay short. */
cbt_status cbt_strtab_init_sessions(cbt_strtab *t, uint32_t max_sessions, size_t val_size);

/* Forget every entry at once (capacity and limit stay). */
void cbt_strtab_clear(cbt_strtab *t);

/* Hash of (s, tag) == cbt_strtab_mix(cbt_strtab_base(s, len), tag). A caller
 * that looks one session up under several tags hashes the string once. */
uint64_t cbt_strtab_base(const char *s, size_t len);
uint64_t cbt_strtab_mix(uint64_t base, uint16_t tag);
uint64_t cbt_strtab_hash(const char *s, size_t len, uint16_t tag);

/* The value of (s, tag), or NULL. The _h forms take cbt_strtab_hash(s, len, tag). */
void *cbt_strtab_find(cbt_strtab *t, const char *s, size_t len, uint16_t tag);
void *cbt_strtab_find_h(cbt_strtab *t, const char *s, size_t len, uint16_t tag, uint64_t h);
/* Find or insert (value zeroed on insert; *created tells which). NULL when full. */
void *cbt_strtab_upsert(cbt_strtab *t, const char *s, size_t len, uint16_t tag, int *created);
void *cbt_strtab_upsert_h(cbt_strtab *t, const char *s, size_t len, uint16_t tag, uint64_t h,
                          int *created);
/* Remove the entry whose value is `val` (a pointer from find/upsert). */
void cbt_strtab_remove(cbt_strtab *t, void *val);
/* Key of the entry holding `val`. */
const cbt_strtab_key *cbt_strtab_key_of(cbt_strtab *t, const void *val);
/* Iterate: the value at slot i, or NULL when the slot is empty. */
void *cbt_strtab_slot(cbt_strtab *t, uint32_t i);

#endif /* CBT_HOST_INTERNAL_STRTAB_H */
