/* host/core/arrays.c — owns the array store (cbt/array.h): chunks, their
 * free list, the references, and the walk over an array's elements.
 *
 * The store is `n` chunks of CHUNK bytes, reserved once per process (like
 * the name table, it outlives tracers: a span queue of an abandoned sink
 * thread may still hold references). Beside the bytes, one small entry per
 * chunk: the next chunk of its chain (or of the free list), and, for the
 * first chunk of an array, its reference count.
 *
 * Free list: a Treiber stack over the chunk indices, its top a 64-bit word
 * (a tag in the high half, index + 1 in the low), so a pop that read a next
 * link which has since changed fails its CAS (ABA). An array of k chunks is
 * k pops; a freed chain goes back in one push. A pop that finds the list
 * empty gives back what it took and the array is dropped. Nothing waits:
 * a CAS lost to another thread is retried, each retry meaning that thread
 * got on.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <pthread.h>
#include <sys/mman.h>

#include "cbt/array.h"
#include "internal/arrays.h"
#include "internal/tracer.h"
#include "internal/utf8.h"

#define CHUNK 4096u
/* The handle of every empty array: no chunk, no reference to count. */
#define EMPTY_HANDLE UINT32_MAX

typedef struct chunk_ent {
    _Atomic uint32_t next;  /* index + 1 of the next chunk; 0: none */
    _Atomic uint32_t refs;  /* the first chunk of an array: its references */
} chunk_ent;

static struct {
    unsigned char *data;
    chunk_ent *ent;
    uint32_t n;                 /* chunks; 0 until reserved */
    _Atomic uint64_t top;       /* tag << 32 | (index + 1) */
    _Atomic uint64_t used;      /* chunks in live arrays */
    _Atomic uint64_t dropped, stored;
    pthread_mutex_t lock;       /* reserve only */
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

cbt_status cbt_arrays_reserve_(uint64_t bytes)
{
    pthread_mutex_lock(&g.lock);
    if (g.n) {
        pthread_mutex_unlock(&g.lock);
        return CBT_OK;
    }
    if (bytes < CBT_ARRAYS_CAPACITY_MIN)
        bytes = CBT_ARRAYS_CAPACITY_MIN;
    if (bytes > CBT_ARRAYS_CAPACITY_MAX)
        bytes = CBT_ARRAYS_CAPACITY_MAX;
    uint32_t n = (uint32_t)(bytes / CHUNK);
    size_t dbytes = (size_t)n * CHUNK, ebytes = (size_t)n * sizeof(chunk_ent);
    /* address space: pages become resident as chunks are first used */
    void *d = mmap(NULL, dbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    void *e = mmap(NULL, ebytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (d == MAP_FAILED || e == MAP_FAILED) {
        if (d != MAP_FAILED)
            munmap(d, dbytes);
        if (e != MAP_FAILED)
            munmap(e, ebytes);
        pthread_mutex_unlock(&g.lock);
        return CBT_ERR_NOMEM;
    }
    g.data = d;
    g.ent = e;
    /* the free list in index order: low chunks are used (and resident) first */
    for (uint32_t i = 0; i < n; i++)
        atomic_init(&g.ent[i].next, i + 1 < n ? i + 2 : 0);
    atomic_store_explicit(&g.top, 1, memory_order_release);
    /* release: the store is complete before a publisher can see n */
    __atomic_store_n(&g.n, n, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g.lock);
    return CBT_OK;
}

static inline uint32_t store_chunks(void) { return __atomic_load_n(&g.n, __ATOMIC_ACQUIRE); }

static inline unsigned char *chunk_at(uint32_t h) { return g.data + (size_t)(h - 1) * CHUNK; }

static uint32_t pop1(void)
{
    uint64_t old = atomic_load_explicit(&g.top, memory_order_acquire);
    for (;;) {
        uint32_t h = (uint32_t)old;
        if (!h)
            return 0;
        uint32_t nx = atomic_load_explicit(&g.ent[h - 1].next, memory_order_relaxed);
        uint64_t nw = (((old >> 32) + 1) << 32) | nx;
        if (atomic_compare_exchange_weak_explicit(&g.top, &old, nw, memory_order_acquire,
                                                  memory_order_acquire))
            return h;
    }
}

/* Push the chain first .. last (linked by next) back. */
static void push_chain(uint32_t first, uint32_t last, uint32_t k)
{
    uint64_t old = atomic_load_explicit(&g.top, memory_order_relaxed);
    for (;;) {
        atomic_store_explicit(&g.ent[last - 1].next, (uint32_t)old, memory_order_relaxed);
        uint64_t nw = (((old >> 32) + 1) << 32) | first;
        /* release: our writes to the chunks happen before their next owner's */
        if (atomic_compare_exchange_weak_explicit(&g.top, &old, nw, memory_order_release,
                                                  memory_order_relaxed))
            break;
    }
    atomic_fetch_sub_explicit(&g.used, k, memory_order_relaxed);
}

/* A chain of k chunks (the first's next links the rest), or 0. */
static uint32_t take(uint32_t k)
{
    uint32_t first = 0, last = 0;
    for (uint32_t i = 0; i < k; i++) {
        uint32_t h = pop1();
        if (!h) {
            if (first) {
                atomic_fetch_add_explicit(&g.used, i, memory_order_relaxed);
                push_chain(first, last, i);
            }
            return 0;
        }
        atomic_store_explicit(&g.ent[h - 1].next, 0, memory_order_relaxed);
        if (last)
            atomic_store_explicit(&g.ent[last - 1].next, h, memory_order_relaxed);
        else
            first = h;
        last = h;
    }
    atomic_fetch_add_explicit(&g.used, k, memory_order_relaxed);
    return first;
}

void cbt_arrays_ref_(uint32_t h)
{
    if (h && h != EMPTY_HANDLE)
        atomic_fetch_add_explicit(&g.ent[h - 1].refs, 1, memory_order_relaxed);
}

void cbt_arrays_unref_(uint32_t h)
{
    if (!h || h == EMPTY_HANDLE)
        return;
    /* acq_rel: every holder's reads happen before the chunks are reused */
    if (atomic_fetch_sub_explicit(&g.ent[h - 1].refs, 1, memory_order_acq_rel) != 1)
        return;
    uint32_t last = h, k = 1, nx;
    while ((nx = atomic_load_explicit(&g.ent[last - 1].next, memory_order_relaxed)) != 0)
        last = nx, k++;
    push_chain(h, last, k);
}

/* ---- writing an array ------------------------------------------------------ */

#define TRUNC_MARK_LEN (sizeof CBT_META_TRUNC_MARK - 1)
#define STR_MAX (CBT_META_STR_MAX - 1u)

/* A string element's stored length: at most STR_MAX, cut as an event's
 * string is (internal/utf8.h), the mark after it. */
static size_t str_keep(const char *s, size_t n, int *cut)
{
    *cut = n > STR_MAX;
    if (!*cut)
        return n;
    return cbt_utf8_prefix_(s, STR_MAX - TRUNC_MARK_LEN);
}

/* The chunks a string array takes, or 0 when an element is NULL. */
static uint64_t str_chunks(const char *const *v, uint32_t n, int *bad)
{
    uint64_t k = 1, off = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!v[i]) {
            *bad = 1;
            return 0;
        }
        int cut;
        size_t len = str_keep(v[i], strlen(v[i]), &cut) + (cut ? TRUNC_MARK_LEN : 0);
        if (off + 4 + len > CHUNK)
            k++, off = 0;
        off += 4 + len;
    }
    return k;
}

static void write_str(uint32_t h, const char *const *v, uint32_t n)
{
    uint32_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        int cut;
        size_t full = strlen(v[i]);
        size_t keep = str_keep(v[i], full, &cut);
        uint32_t len = (uint32_t)(keep + (cut ? TRUNC_MARK_LEN : 0));
        if (off + 4 + len > CHUNK) {
            if (off + 4 <= CHUNK) { /* the rest of this chunk is a skip */
                uint32_t skip = UINT32_MAX;
                memcpy(chunk_at(h) + off, &skip, 4);
            }
            h = atomic_load_explicit(&g.ent[h - 1].next, memory_order_relaxed);
            off = 0;
        }
        unsigned char *p = chunk_at(h) + off;
        memcpy(p, &len, 4);
        memcpy(p + 4, v[i], keep);
        if (cut) {
            memcpy(p + 4 + keep, CBT_META_TRUNC_MARK, TRUNC_MARK_LEN);
            cbt_count_meta_truncated_();
        }
        off += 4 + len;
    }
}

/* Copy `bytes` bytes of fixed-size elements along the chain. */
static void write_flat(uint32_t h, const unsigned char *src, uint64_t bytes)
{
    while (bytes) {
        uint32_t c = bytes < CHUNK ? (uint32_t)bytes : CHUNK;
        memcpy(chunk_at(h), src, c);
        src += c;
        bytes -= c;
        h = atomic_load_explicit(&g.ent[h - 1].next, memory_order_relaxed);
    }
}

static unsigned elem_size(uint8_t type)
{
    return type == CBT_ARRAY_BOOL ? 1u : (type == CBT_ARRAY_I64 || type == CBT_ARRAY_F64) ? 8u : 0u;
}

/* The store's copy of a borrowed array, or 0 (dropped and counted). */
static uint32_t store(uint8_t type, const void *src, uint32_t n)
{
    if (!store_chunks())
        goto drop;
    if (n == 0) { /* an empty array is a value, and takes no room */
        if (type < CBT_ARRAY_I64 || type > CBT_ARRAY_STR)
            goto drop;
        atomic_fetch_add_explicit(&g.stored, 1, memory_order_relaxed);
        return EMPTY_HANDLE;
    }
    uint64_t k;
    if (type == CBT_ARRAY_STR) {
        int bad = 0;
        k = str_chunks(src, n, &bad);
        if (bad)
            goto drop;
    } else if (elem_size(type)) {
        k = ((uint64_t)n * elem_size(type) + CHUNK - 1) / CHUNK;
    } else {
        goto drop;
    }
    if (k > store_chunks())
        goto drop;
    uint32_t h = take((uint32_t)k);
    if (!h)
        goto drop;
    if (type == CBT_ARRAY_STR)
        write_str(h, src, n);
    else
        write_flat(h, src, (uint64_t)n * elem_size(type));
    atomic_store_explicit(&g.ent[h - 1].refs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&g.stored, 1, memory_order_relaxed);
    return h;
drop:
    atomic_fetch_add_explicit(&g.dropped, 1, memory_order_relaxed);
    return 0;
}

void cbt_arrays_adopt_(cbt_event *ev)
{
    uint32_t n = cbt_rec_n_meta_(ev);
    for (uint32_t i = 0; i < n; i++) {
        cbt_meta *m = &ev->meta[i];
        if (m->type != CBT_META_ARRAY)
            continue;
        if (m->v.arr.src) {
            m->v.arr.handle = store(m->len, m->v.arr.src, m->v.arr.count);
            m->v.arr.src = NULL;
        } else {
            cbt_arrays_ref_(m->v.arr.handle); /* a republished event: its own reference */
        }
    }
}

void cbt_arrays_release_event_(const cbt_event *ev)
{
    uint32_t n = cbt_rec_n_meta_(ev);
    for (uint32_t i = 0; i < n; i++)
        if (ev->meta[i].type == CBT_META_ARRAY && !ev->meta[i].v.arr.src)
            cbt_arrays_unref_(ev->meta[i].v.arr.handle);
}

void cbt_arrays_ref_span_(const cbt_span *s)
{
    for (uint32_t i = 0; i < s->n_attrs && i < CBT_SPAN_ATTR_MAX; i++)
        if (s->attrs[i].type == CBT_META_ARRAY)
            cbt_arrays_ref_(s->attrs[i].v.arr.handle);
}

void cbt_arrays_release_span_(const cbt_span *s)
{
    for (uint32_t i = 0; i < s->n_attrs && i < CBT_SPAN_ATTR_MAX; i++)
        if (s->attrs[i].type == CBT_META_ARRAY)
            cbt_arrays_unref_(s->attrs[i].v.arr.handle);
}

/* ---- reading ------------------------------------------------------------------ */

static bool handle_ok(uint32_t h) { return h == EMPTY_HANDLE || (h != 0 && h <= store_chunks()); }

bool cbt_meta_array(const cbt_meta *m, cbt_array *out)
{
    if (!m || m->type != CBT_META_ARRAY || m->v.arr.src || !handle_ok(m->v.arr.handle))
        return false;
    if (out)
        *out = (cbt_array){.handle = m->v.arr.handle, .count = m->v.arr.count, .type = m->len};
    return true;
}

bool cbt_attr_array(const cbt_attr *a, cbt_array *out)
{
    if (!a || a->type != CBT_META_ARRAY || !handle_ok(a->v.arr.handle))
        return false;
    if (out)
        *out = (cbt_array){.handle = a->v.arr.handle, .count = a->v.arr.count,
                           .type = (uint8_t)a->str_len};
    return true;
}

void cbt_array_iter_init(cbt_array_iter *it, const cbt_array *a)
{
    if (!it)
        return;
    bool ok = a && handle_ok(a->handle) && a->handle != EMPTY_HANDLE;
    *it = (cbt_array_iter){.chunk = ok ? a->handle : 0, .off = 0, .left = ok ? a->count : 0,
                           .type = ok ? a->type : 0};
}

/* The next `size` bytes of a fixed-size walk, or NULL at the end. */
static const unsigned char *next_fixed(cbt_array_iter *it, uint8_t type, unsigned size)
{
    if (!it || it->left == 0 || it->type != type || !it->chunk)
        return NULL;
    if (it->off + size > CHUNK) {
        it->chunk = atomic_load_explicit(&g.ent[it->chunk - 1].next, memory_order_relaxed);
        it->off = 0;
        if (!it->chunk)
            return NULL;
    }
    const unsigned char *p = chunk_at(it->chunk) + it->off;
    it->off += size;
    it->left--;
    return p;
}

bool cbt_array_next_i64(cbt_array_iter *it, int64_t *v)
{
    const unsigned char *p = next_fixed(it, CBT_ARRAY_I64, 8);
    if (p && v)
        memcpy(v, p, 8);
    return p != NULL;
}

bool cbt_array_next_f64(cbt_array_iter *it, double *v)
{
    const unsigned char *p = next_fixed(it, CBT_ARRAY_F64, 8);
    if (p && v)
        memcpy(v, p, 8);
    return p != NULL;
}

bool cbt_array_next_bool(cbt_array_iter *it, bool *v)
{
    const unsigned char *p = next_fixed(it, CBT_ARRAY_BOOL, 1);
    if (p && v)
        *v = *p != 0;
    return p != NULL;
}

bool cbt_array_next_str(cbt_array_iter *it, const char **s, size_t *len)
{
    if (!it || it->left == 0 || it->type != CBT_ARRAY_STR || !it->chunk)
        return false;
    uint32_t l = UINT32_MAX;
    if (it->off + 4 <= CHUNK)
        memcpy(&l, chunk_at(it->chunk) + it->off, 4);
    if (l == UINT32_MAX) { /* the rest of the chunk is a skip */
        it->chunk = atomic_load_explicit(&g.ent[it->chunk - 1].next, memory_order_relaxed);
        it->off = 0;
        if (!it->chunk)
            return false;
        memcpy(&l, chunk_at(it->chunk), 4);
    }
    if (l > CHUNK - 4 - it->off)
        return false; /* not a string this store wrote */
    if (s)
        *s = (const char *)chunk_at(it->chunk) + it->off + 4;
    if (len)
        *len = l;
    it->off += 4 + l;
    it->left--;
    return true;
}

void cbt_arrays_stats_get(cbt_arrays_stats *out)
{
    if (!out)
        return;
    out->capacity = (uint64_t)store_chunks() * CHUNK;
    out->used = atomic_load_explicit(&g.used, memory_order_relaxed) * CHUNK;
    out->dropped = atomic_load_explicit(&g.dropped, memory_order_relaxed);
    out->stored = atomic_load_explicit(&g.stored, memory_order_relaxed);
}
