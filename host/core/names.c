/* host/core/names.c — owns the process-wide interned-name table (cbt/names.h).
 *
 * Append-only: handle h's bytes live in chunk h / 1024, entry h % 1024.
 * Chunks are allocated as the table grows and never freed or moved, so a
 * handle names its string for the life of the process (cbt/names.h says
 * why the table outlives every tracer).
 *
 * Readers never lock:
 *  - cbt_name_str / cbt_name_len load `count` with acquire order before
 *    reading an entry below it; an insertion writes the entry (and, for a
 *    new chunk, the chunk pointer) before it publishes `count` with release
 *    order.
 *  - A lookup probes `index` (open addressing, linear; slot 0 = empty): it
 *    loads a slot with acquire order, then reads that handle's entry; an
 *    insertion writes the entry before it stores the slot with release
 *    order. A lookup that misses a name being inserted takes the mutex and
 *    probes again there, so two threads never insert one name twice.
 *
 * The index has 2^17 slots for at most 65535 names (half full at worst):
 * 256 KiB of zeroed static storage, resident as far as it is touched.
 *
 * Capacity: names a program may add beyond the built-in ones, set from
 * CBT_NAMES_CAPACITY at the first use and raised (never lowered) by
 * cbt_init (cbt_names_raise_capacity_). Refusals are counted process-wide;
 * a tracer reports those since its cbt_init.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cbt/names.h"
#include "internal/hash.h"
#include "internal/last_error.h"
#include "internal/names.h"

#define CHUNK_BITS 10u
#define CHUNK (1u << CHUNK_BITS)
#define N_CHUNKS ((CBT_NAMES_MAX + CHUNK) / CHUNK) /* handles 0 .. CBT_NAMES_MAX */
#define INDEX_BITS 17u
#define INDEX_SLOTS (1u << INDEX_BITS)
#define HASH_SEED 0x6e616d6573ull /* "names" */

_Static_assert(CBT_NAMES_MAX < INDEX_SLOTS / 2, "the index stays at most half full");
_Static_assert(CBT_NAME_LEN_MAX <= 256, "a name's length fits its uint8_t");

typedef struct name_chunk {
    uint8_t len[CHUNK];
    char str[CHUNK][CBT_NAME_LEN_MAX];
} name_chunk;

static struct {
    pthread_mutex_t lock;      /* insertions */
    _Atomic uint32_t count;    /* entries [1, count) are valid; 0 is "no name" */
    _Atomic uint32_t capacity; /* a program's names the table may hold */
    _Atomic uint64_t refused;  /* cbt_intern calls refused: the table was full */
    name_chunk *chunk[N_CHUNKS]; /* written under `lock` before `count` covers them */
    _Atomic uint16_t index[INDEX_SLOTS];
} g_names = {.lock = PTHREAD_MUTEX_INITIALIZER};

static pthread_once_t g_names_once = PTHREAD_ONCE_INIT;

static const char *const k_well_known[] = {
    "",
#define CBT_NAME_STR_(id, s) s,
    CBT_WELL_KNOWN_NAMES(CBT_NAME_STR_)
#undef CBT_NAME_STR_
};
#define N_WELL_KNOWN ((uint32_t)(sizeof k_well_known / sizeof k_well_known[0]))
_Static_assert(N_WELL_KNOWN == CBT_N_WELL_KNOWN_COUNT_, "one string per CBT_N_* handle");
_Static_assert(N_WELL_KNOWN <= CHUNK, "the built-in names fit the first chunk");

/* Entry h's bytes and length (h below `count`, or found in the index). */
static inline const char *entry_str(uint32_t h)
{
    return g_names.chunk[h >> CHUNK_BITS]->str[h & (CHUNK - 1)];
}

static inline uint8_t entry_len(uint32_t h)
{
    return g_names.chunk[h >> CHUNK_BITS]->len[h & (CHUNK - 1)];
}

/* The slot where `s` (l bytes) is, or the empty slot where it would go.
 * *found: its handle, or 0. */
static uint32_t probe(const char *s, size_t l, uint32_t *found)
{
    uint32_t i = (uint32_t)cbt_hash_bytes(s, l, HASH_SEED) & (INDEX_SLOTS - 1);
    for (;; i = (i + 1) & (INDEX_SLOTS - 1)) {
        /* acquire: pairs with the release store in put_slot(): the entry is written */
        uint32_t h = atomic_load_explicit(&g_names.index[i], memory_order_acquire);
        if (h == 0 || (entry_len(h) == l && memcmp(entry_str(h), s, l) == 0)) {
            *found = h;
            return i;
        }
    }
}

/* Write entry h = `s` (not yet findable). Under `lock` (or the once). */
static void put_entry(uint32_t h, const char *s, size_t l)
{
    name_chunk *c = g_names.chunk[h >> CHUNK_BITS];
    memcpy(c->str[h & (CHUNK - 1)], s, l);
    c->str[h & (CHUNK - 1)][l] = '\0';
    c->len[h & (CHUNK - 1)] = (uint8_t)l;
}

/* Make entry h findable at `slot`. After `count` covers h (cbt_intern), so
 * a thread that finds h by probe() also sees a count past it: its
 * cbt_name_str(h) is the name, never "". */
static void put_slot(uint32_t h, uint32_t slot)
{
    /* release: pairs with the acquire loads in probe() */
    atomic_store_explicit(&g_names.index[slot], (uint16_t)h, memory_order_release);
}

/* A capacity from CBT_NAMES_CAPACITY, or 0 when it is unset or not a
 * number in [1, CBT_NAMES_CAPACITY_MAX] (said on stderr). */
static uint32_t capacity_from_env(void)
{
    const char *v = getenv("CBT_NAMES_CAPACITY");
    if (!v || !*v)
        return 0;
    char *end;
    unsigned long n = strtoul(v, &end, 10);
    if (*end || v[0] == '-' || n == 0 || n > CBT_NAMES_CAPACITY_MAX) {
        fprintf(stderr, "cbt: CBT_NAMES_CAPACITY=%.32s is not a number in [1, %u]; keeping %u\n",
                v, CBT_NAMES_CAPACITY_MAX, CBT_NAMES_CAPACITY_DEFAULT);
        return 0;
    }
    return (uint32_t)n;
}

static void names_seed(void)
{
    static name_chunk first; /* the built-in names: never allocated */
    g_names.chunk[0] = &first;
    for (uint32_t h = 1; h < N_WELL_KNOWN; h++) {
        size_t l = strlen(k_well_known[h]);
        uint32_t found;
        uint32_t slot = probe(k_well_known[h], l, &found);
        put_entry(h, k_well_known[h], l);
        put_slot(h, slot); /* the list holds no name twice (tests/test_names.c); no other
                              thread runs until the once ends */
    }
    uint32_t env = capacity_from_env();
    atomic_store_explicit(&g_names.capacity, env ? env : CBT_NAMES_CAPACITY_DEFAULT,
                          memory_order_relaxed);
    /* release: pairs with the acquire loads in cbt_name_str / cbt_name_len */
    atomic_store_explicit(&g_names.count, N_WELL_KNOWN, memory_order_release);
}

static void full_detail(char *buf, size_t size, unsigned cap)
{
    snprintf(buf, size,
             "the name table is full: it holds %u names besides cbt's built-in ones (raise it "
             "with names_capacity, in cbt_config or cbt.init, or CBT_NAMES_CAPACITY; at most %u)",
             cap, CBT_NAMES_CAPACITY_MAX);
}

/* A refusal: counted, its detail deferred (formatted when read), as a
 * publish whose key is refused comes here on every call. */
static cbt_status refuse(uint32_t cap)
{
    atomic_fetch_add_explicit(&g_names.refused, 1, memory_order_relaxed);
    cbt_last_error_defer_(NULL, full_detail, cap);
    return CBT_ERR_FULL;
}

cbt_status cbt_intern(const char *s, cbt_name *out)
{
    if (!s || !out || !*s)
        return CBT_ERR_INVAL;
    size_t l = strnlen(s, CBT_NAME_LEN_MAX);
    if (l >= CBT_NAME_LEN_MAX)
        return CBT_ERR_META_TOO_LONG;
    pthread_once(&g_names_once, names_seed);
    uint32_t h;
    probe(s, l, &h);
    if (h) { /* the common case: a name already there, no lock */
        *out = (cbt_name)h;
        return CBT_OK;
    }
    /* A full table refuses without the lock: a program key it refused comes
     * back on every publish that carries it, from every thread. A capacity
     * raised meanwhile is seen under the lock below. */
    uint32_t n0 = atomic_load_explicit(&g_names.count, memory_order_relaxed);
    uint32_t cap0 = atomic_load_explicit(&g_names.capacity, memory_order_relaxed);
    if (n0 - N_WELL_KNOWN >= cap0 || n0 > CBT_NAMES_MAX)
        return refuse(cap0);
    pthread_mutex_lock(&g_names.lock);
    uint32_t slot = probe(s, l, &h); /* again: another thread may have added it */
    if (h) {
        pthread_mutex_unlock(&g_names.lock);
        *out = (cbt_name)h;
        return CBT_OK;
    }
    uint32_t n = atomic_load_explicit(&g_names.count, memory_order_relaxed);
    uint32_t cap = atomic_load_explicit(&g_names.capacity, memory_order_relaxed);
    if (n - N_WELL_KNOWN >= cap || n > CBT_NAMES_MAX) {
        pthread_mutex_unlock(&g_names.lock);
        return refuse(cap);
    }
    if (!g_names.chunk[n >> CHUNK_BITS] &&
        !(g_names.chunk[n >> CHUNK_BITS] = calloc(1, sizeof(name_chunk)))) {
        pthread_mutex_unlock(&g_names.lock);
        return CBT_ERR_NOMEM;
    }
    put_entry(n, s, l);
    /* release: pairs with the acquire loads in cbt_name_str / cbt_name_len
     * (the entry and its chunk pointer are written) */
    atomic_store_explicit(&g_names.count, n + 1, memory_order_release);
    put_slot(n, slot); /* findable only now, with count past it */
    pthread_mutex_unlock(&g_names.lock);
    *out = (cbt_name)n;
    return CBT_OK;
}

const char *cbt_name_str(cbt_name n)
{
    pthread_once(&g_names_once, names_seed);
    /* acquire: pairs with the release stores in names_seed / cbt_intern */
    if (n == 0 || n >= atomic_load_explicit(&g_names.count, memory_order_acquire))
        return "";
    return entry_str(n);
}

uint32_t cbt_name_len(cbt_name n)
{
    pthread_once(&g_names_once, names_seed);
    if (n == 0 || n >= atomic_load_explicit(&g_names.count, memory_order_acquire))
        return 0;
    return entry_len(n);
}

void cbt_names_hold_lock_(int hold)
{
    pthread_once(&g_names_once, names_seed);
    if (hold)
        pthread_mutex_lock(&g_names.lock);
    else
        pthread_mutex_unlock(&g_names.lock);
}

void cbt_names_raise_capacity_(uint32_t capacity)
{
    pthread_once(&g_names_once, names_seed);
    uint32_t cur = atomic_load_explicit(&g_names.capacity, memory_order_relaxed);
    while (capacity > cur && !atomic_compare_exchange_weak_explicit(
                                 &g_names.capacity, &cur, capacity, memory_order_relaxed,
                                 memory_order_relaxed)) {
    }
}

void cbt_names_usage_(uint32_t *used, uint32_t *capacity, uint64_t *refused)
{
    pthread_once(&g_names_once, names_seed);
    *used = atomic_load_explicit(&g_names.count, memory_order_relaxed) - N_WELL_KNOWN;
    *capacity = atomic_load_explicit(&g_names.capacity, memory_order_relaxed);
    *refused = atomic_load_explicit(&g_names.refused, memory_order_relaxed);
}
