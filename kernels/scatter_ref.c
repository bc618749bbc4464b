/* kernels/scatter_ref.c — owns cbt_scatter_check() (shared with the CUDA
 * entry point) and the C reference of the scatter: the same row order, guards
 * and token counting as kernels/scatter.cu, run as emulated CTAs that stamp
 * the ring through the CBT_KERNEL_SPAN macros.
 *
 * Work unit: a row = one (layer, K|V, token) vector of hidden elements.
 * Rows are numbered r = (layer * 2 + kv) * n_tokens + i, and CTA c of n owns
 * rows [c * R / n, (c + 1) * R / n) of the R = num_layers * 2 * n_tokens.
 * A token is counted (scattered or dropped, shifted) only by the row with
 * layer 0 and kv 0, so every count is made exactly once whatever the split.
 */
#include <stddef.h>
#include <string.h>

#include "kernels_impl.h"
#include "ref_cta.h"

static int mul_ok(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

cbt_status cbt_scatter_check(const cbt_kv_geom *g, const cbt_scatter_args *a, cbt_scatter_dir dir)
{
    if (!g || !a)
        return CBT_ERR_INVAL;
    if (dir != CBT_SCATTER_RETRIEVE && dir != CBT_SCATTER_STORE)
        return CBT_ERR_INVAL;
    uint32_t es = cbt_dtype_size(g->dtype);
    if (!es || !g->num_layers || !g->num_heads || !g->head_dim || !g->block_size ||
        !g->num_blocks || !g->chunk_tokens)
        return CBT_ERR_INVAL;
    uint64_t row, chunk_bytes, layer_bytes;
    if (!mul_ok((uint64_t)g->num_heads * g->head_dim, es, &row) || row > (uint64_t)INT32_MAX)
        return CBT_ERR_INVAL;
    if (!mul_ok((uint64_t)g->num_blocks * g->block_size, 2u * row, &layer_bytes) ||
        layer_bytes > (uint64_t)INT64_MAX)
        return CBT_ERR_INVAL;
    if (!mul_ok((uint64_t)g->num_layers * g->chunk_tokens, 2u * row, &chunk_bytes) ||
        chunk_bytes > (uint64_t)INT64_MAX)
        return CBT_ERR_INVAL;
    if (!a->chunk || !a->paged || !a->positions || !a->block_table)
        return CBT_ERR_INVAL;
    if (!a->n_table || !a->n_tokens)
        return CBT_ERR_INVAL;
    if ((uint64_t)a->chunk_offset + a->n_tokens > g->chunk_tokens)
        return CBT_ERR_INVAL;
    if (a->rope) {
        if (dir != CBT_SCATTER_RETRIEVE)
            return CBT_ERR_INVAL;
        cbt_status st = cbt_rope_check_(a->rope, g->dtype, g->head_dim);
        if (st)
            return st;
    }
    return CBT_OK;
}

/* The guard for token i: its slot, or -1 when it is dropped. *shifted is set
 * when its key gets re-RoPE'd (positions inside the cos/sin cache; a shifted
 * token whose positions are not is dropped: it cannot be rotated). */
static int64_t token_slot(const cbt_kv_geom *g, const cbt_scatter_args *a, uint32_t i,
                          int *shifted)
{
    *shifted = 0;
    int32_t pos = a->positions[i];
    if (pos < 0)
        return -1;
    uint32_t blk = (uint32_t)pos / g->block_size;
    if (blk >= a->n_table)
        return -1;
    int32_t bid = a->block_table[blk];
    if (bid < 0)
        return -1;
    int64_t slot = (int64_t)bid * g->block_size + (uint32_t)pos % g->block_size;
    if ((uint64_t)slot >= (uint64_t)g->num_blocks * g->block_size)
        return -1;
    if (a->rope) {
        int32_t old = a->rope->old_positions[i];
        if (old != pos) {
            if (!cbt_rope_pos_ok(a->rope, old, pos))
                return -1;
            *shifted = 1;
        }
    }
    return slot;
}

/* Big scatters write their destination with non-temporal stores, the way a
 * large memcpy does: rows that will not be read again soon need no
 * read-for-ownership, which is most of the gap to memcpy past the caches. */
#define NT_MIN_BYTES (8ull << 20)

#if defined(__x86_64__)
#include <emmintrin.h>
static void copy_row(unsigned char *dst, const unsigned char *src, uint64_t n, int nt)
{
    if (!nt || (((uintptr_t)dst | (uintptr_t)src | n) & 15u)) {
        memcpy(dst, src, n);
        return;
    }
    uint64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m128i a = _mm_load_si128((const __m128i *)(src + i));
        __m128i b = _mm_load_si128((const __m128i *)(src + i + 16));
        __m128i c = _mm_load_si128((const __m128i *)(src + i + 32));
        __m128i d = _mm_load_si128((const __m128i *)(src + i + 48));
        _mm_stream_si128((__m128i *)(dst + i), a);
        _mm_stream_si128((__m128i *)(dst + i + 16), b);
        _mm_stream_si128((__m128i *)(dst + i + 32), c);
        _mm_stream_si128((__m128i *)(dst + i + 48), d);
    }
    for (; i < n; i += 16) /* n is a multiple of 16 */
        _mm_stream_si128((__m128i *)(dst + i), _mm_load_si128((const __m128i *)(src + i)));
}
static void copy_fence(int nt)
{
    if (nt)
        _mm_sfence(); /* streaming stores are weakly ordered: make them visible */
}
#else
static void copy_row(unsigned char *dst, const unsigned char *src, uint64_t n, int nt)
{
    (void)nt;
    memcpy(dst, src, n);
}
static void copy_fence(int nt) { (void)nt; }
#endif

typedef struct counts {
    uint32_t scattered, dropped, shifted;
} counts;

static void run_rows(const cbt_kv_geom *g, const cbt_scatter_args *a, cbt_scatter_dir dir,
                     uint64_t r0, uint64_t r1, counts *c, int nt)
{
    uint64_t row = (uint64_t)g->num_heads * g->head_dim * cbt_dtype_size(g->dtype);
    uint64_t slots = (uint64_t)g->num_blocks * g->block_size;
    uint32_t n = a->n_tokens;
    for (uint64_t r = r0; r < r1; r++) {
        uint32_t i = (uint32_t)(r % n);
        uint64_t q = r / n;
        uint32_t kv = (uint32_t)(q & 1u);
        uint32_t l = (uint32_t)(q >> 1);
        int shifted;
        int64_t slot = token_slot(g, a, i, &shifted);
        if (l == 0 && kv == 0) {
            if (slot < 0) {
                c->dropped++;
            } else {
                c->scattered++;
                c->shifted += (uint32_t)shifted;
            }
        }
        if (slot < 0)
            continue;
        unsigned char *crow = (unsigned char *)a->chunk +
                              (((uint64_t)kv * g->num_layers + l) * g->chunk_tokens +
                               a->chunk_offset + i) * row;
        unsigned char *prow = (unsigned char *)a->paged[l] + ((uint64_t)kv * slots + (uint64_t)slot) * row;
        if (dir == CBT_SCATTER_STORE)
            copy_row(crow, prow, row, nt);
        else if (kv == 0 && shifted)
            cbt_rope_row_ref_(prow, crow, g->num_heads, g->head_dim, g->dtype, a->rope,
                              a->rope->old_positions[i], a->positions[i]);
        else
            copy_row(prow, crow, row, nt);
    }
}

cbt_status cbt_scatter_ref(const cbt_kv_geom *g, const cbt_scatter_args *a, cbt_scatter_dir dir,
                           const cbt_kspan *span, uint32_t n_ctas, cbt_scatter_result *res)
{
    cbt_status st = cbt_scatter_check(g, a, dir);
    if (st)
        return st;
    st = cbt_kspan_check_(span);
    if (st)
        return st;
    for (uint32_t l = 0; l < g->num_layers; l++)
        if (!a->paged[l])
            return CBT_ERR_INVAL;

    uint64_t rows = (uint64_t)g->num_layers * 2u * a->n_tokens;
    uint64_t row_bytes = (uint64_t)g->num_heads * g->head_dim * cbt_dtype_size(g->dtype);
    int nt = rows * row_bytes >= NT_MIN_BYTES;
    counts c = {0, 0, 0};
    if (!span || !span->ring) {
        run_rows(g, a, dir, 0, rows, &c, nt);
    } else {
        if (n_ctas == 0)
            n_ctas = 1;
        cbt_ref_outer outer = cbt_ref_save();
        for (uint32_t k = 0; k < n_ctas; k++) {
            cbt_ref_enter(k, n_ctas);
            CBT_KERNEL_SPAN_BEGIN(*span);
            counts mine = {0, 0, 0};
            uint64_t r0 = cbt_split_begin(rows, n_ctas, k);
            uint64_t r1 = cbt_split_begin(rows, n_ctas, k + 1u);
            run_rows(g, a, dir, r0, r1, &mine, nt);
            copy_fence(nt); /* this CTA's rows are visible before its END */
            c.scattered += mine.scattered;
            c.dropped += mine.dropped;
            c.shifted += mine.shifted;
            CBT_KERNEL_SPAN_END_USER(*span, mine.scattered, mine.shifted);
            cbt_ref_leave();
        }
        cbt_ref_restore(&outer);
    }
    copy_fence(nt);
    if (res) {
        res->scattered = c.scattered;
        res->dropped = c.dropped;
        res->n_shifted = c.shifted;
        res->slot_writes = (uint64_t)c.scattered * g->num_layers * 2u;
    }
    return CBT_OK;
}
