/* cli/report_sketch.c — owns the log-linear duration sketch (report_sketch.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report_sketch.h"

void rpt_sketch_init(rpt_sketch *s) { memset(s, 0, sizeof *s); }

void rpt_sketch_free(rpt_sketch *s)
{
    for (unsigned b = 0; b < RPT_SK_BLOCKS; b++)
        free(s->blk[b]);
    memset(s, 0, sizeof *s);
}

uint32_t rpt_sketch_index(uint64_t v)
{
    if (v < RPT_SK_EXACT)
        return (uint32_t)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v); /* 8..63 */
    uint64_t sub = v >> (e - 7u);                      /* 128..255 */
    return RPT_SK_EXACT + (e - 8u) * RPT_SK_SUB + (uint32_t)(sub - RPT_SK_SUB);
}

void rpt_sketch_bucket_range(uint32_t idx, uint64_t *lo, uint64_t *hi)
{
    if (idx < RPT_SK_EXACT) {
        *lo = *hi = idx;
        return;
    }
    uint32_t k = idx - RPT_SK_EXACT;
    unsigned e = 8u + k / RPT_SK_SUB, shift = e - 7u;
    uint64_t sub = RPT_SK_SUB + k % RPT_SK_SUB;
    *lo = sub << shift;
    *hi = sub == 2 * RPT_SK_SUB - 1 && e == 63 ? UINT64_MAX : ((sub + 1) << shift) - 1;
}

void rpt_sketch_add(rpt_sketch *s, uint64_t v)
{
    if (s->n == 0 || v < s->min)
        s->min = v;
    if (s->n == 0 || v > s->max)
        s->max = v;
    s->n++;
    s->sum += (double)v;
    uint32_t i = rpt_sketch_index(v);
    uint64_t **b = &s->blk[i / RPT_SK_SUB];
    if (!*b && !(*b = calloc(RPT_SK_SUB, sizeof **b))) {
        s->lost++;
        return;
    }
    (*b)[i % RPT_SK_SUB]++;
}

static double mid_of(const rpt_sketch *s, uint32_t idx)
{
    uint64_t lo, hi;
    rpt_sketch_bucket_range(idx, &lo, &hi);
    double m = (double)lo + (double)(hi - lo) / 2.0;
    if (idx < RPT_SK_EXACT)
        m = (double)lo;
    if (m < (double)s->min)
        m = (double)s->min;
    if (m > (double)s->max)
        m = (double)s->max;
    return m;
}

void rpt_sketch_quantiles(const rpt_sketch *s, const double *qs, unsigned nq, double *out)
{
    uint64_t in_buckets = s->n - s->lost;
    unsigned j = 0;
    if (in_buckets == 0) {
        for (; j < nq; j++)
            out[j] = 0.0;
        return;
    }
    uint64_t seen = 0;
    for (unsigned b = 0; b < RPT_SK_BLOCKS && j < nq; b++) {
        if (!s->blk[b])
            continue;
        for (unsigned i = 0; i < RPT_SK_SUB && j < nq; i++) {
            uint64_t c = s->blk[b][i];
            if (!c)
                continue;
            seen += c;
            while (j < nq) {
                double q = qs[j] <= 0.0 ? 0.0 : qs[j] > 1.0 ? 1.0 : qs[j];
                uint64_t rank = (uint64_t)ceil(q * (double)in_buckets);
                if (rank < 1)
                    rank = 1;
                if (rank > seen)
                    break;
                out[j++] = mid_of(s, b * RPT_SK_SUB + i);
            }
        }
    }
    for (; j < nq; j++)
        out[j] = (double)s->max;
}

double rpt_sketch_quantile(const rpt_sketch *s, double q)
{
    double v;
    rpt_sketch_quantiles(s, &q, 1, &v);
    return v;
}

uint64_t rpt_sketch_count_between(const rpt_sketch *s, double lo, double hi)
{
    uint64_t c = 0;
    for (unsigned b = 0; b < RPT_SK_BLOCKS; b++) {
        if (!s->blk[b])
            continue;
        for (unsigned i = 0; i < RPT_SK_SUB; i++) {
            if (!s->blk[b][i])
                continue;
            uint64_t l, h;
            rpt_sketch_bucket_range(b * RPT_SK_SUB + i, &l, &h);
            double m = b * RPT_SK_SUB + i < RPT_SK_EXACT ? (double)l
                                                         : (double)l + (double)(h - l) / 2.0;
            if (m >= lo && m < hi)
                c += s->blk[b][i];
        }
    }
    return c;
}
