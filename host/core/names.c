/* host/core/names.c — owns the process-wide interned-name table (cbt/names.h).
 *
 * Append-only and bounded: CBT_NAMES_MAX entries in static storage. Readers
 * never lock: an entry's bytes are written before `count` is published with
 * release order, and readers load `count` with acquire order before reading
 * an entry below it (the pair is named at both sites).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "cbt/names.h"

static struct {
    pthread_mutex_t lock;
    _Atomic uint32_t count; /* entries [1, count) are valid; 0 is "no name" */
    uint8_t len[CBT_NAMES_MAX];
    char str[CBT_NAMES_MAX][CBT_NAME_LEN_MAX];
} g_names = {.lock = PTHREAD_MUTEX_INITIALIZER};

static pthread_once_t g_names_once = PTHREAD_ONCE_INIT;

static void names_seed(void)
{
    static const char *const well_known[] = {
        "",
#define CBT_NAME_STR_(id, s) s,
        CBT_WELL_KNOWN_NAMES(CBT_NAME_STR_)
#undef CBT_NAME_STR_
    };
    uint32_t n = (uint32_t)(sizeof well_known / sizeof well_known[0]);
    for (uint32_t i = 1; i < n; i++) {
        size_t l = strlen(well_known[i]);
        memcpy(g_names.str[i], well_known[i], l + 1);
        g_names.len[i] = (uint8_t)l;
    }
    /* release: pairs with the acquire loads in cbt_name_str / cbt_intern */
    atomic_store_explicit(&g_names.count, n, memory_order_release);
}

cbt_status cbt_intern(const char *s, cbt_name *out)
{
    if (!s || !out || !*s)
        return CBT_ERR_INVAL;
    size_t l = strnlen(s, CBT_NAME_LEN_MAX);
    if (l >= CBT_NAME_LEN_MAX)
        return CBT_ERR_META_TOO_LONG;
    pthread_once(&g_names_once, names_seed);
    pthread_mutex_lock(&g_names.lock);
    uint32_t n = atomic_load_explicit(&g_names.count, memory_order_relaxed);
    for (uint32_t i = 1; i < n; i++) {
        if (g_names.len[i] == l && memcmp(g_names.str[i], s, l) == 0) {
            pthread_mutex_unlock(&g_names.lock);
            *out = (cbt_name)i;
            return CBT_OK;
        }
    }
    if (n >= CBT_NAMES_MAX) {
        pthread_mutex_unlock(&g_names.lock);
        return CBT_ERR_FULL;
    }
    memcpy(g_names.str[n], s, l);
    g_names.str[n][l] = '\0';
    g_names.len[n] = (uint8_t)l;
    /* release: pairs with the acquire loads in cbt_name_str */
    atomic_store_explicit(&g_names.count, n + 1, memory_order_release);
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
    return g_names.str[n];
}

uint32_t cbt_name_len(cbt_name n)
{
    pthread_once(&g_names_once, names_seed);
    if (n == 0 || n >= atomic_load_explicit(&g_names.count, memory_order_acquire))
        return 0;
    return g_names.len[n];
}
