/* host/builders/blend_metrics.c — owns the lmcache_blend.* metric set (cbt/blend_metrics.h):
 * fixed counters and histograms behind one mutex, snapshots for exporters.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cbt/blend_metrics.h"
#include "internal/tracer.h"

struct cbt_blend_metrics {
    pthread_mutex_t lock;
    cbt_blend_snapshot s; /* time_ns unused here: set by each snapshot */
};

static const double k_bounds[CBT_BLEND_N_BOUNDS] = CBT_BLEND_BOUNDS_MS;

static const char *const k_cnames[] = {
#define X_(e, n, u, d) n,
    CBT_BLEND_COUNTERS(X_)
#undef X_
};
static const char *const k_cunits[] = {
#define X_(e, n, u, d) u,
    CBT_BLEND_COUNTERS(X_)
#undef X_
};
static const char *const k_cdescs[] = {
#define X_(e, n, u, d) d,
    CBT_BLEND_COUNTERS(X_)
#undef X_
};
static const char *const k_hnames[] = {
#define X_(e, n, d) n,
    CBT_BLEND_HISTOGRAMS(X_)
#undef X_
};
static const char *const k_hdescs[] = {
#define X_(e, n, d) d,
    CBT_BLEND_HISTOGRAMS(X_)
#undef X_
};

cbt_status cbt_blend_metrics_create(cbt_blend_metrics **out)
{
    if (!out)
        return CBT_ERR_INVAL;
    cbt_blend_metrics *m = calloc(1, sizeof *m);
    if (!m)
        return CBT_ERR_NOMEM;
    pthread_mutex_init(&m->lock, NULL);
    m->s.start_ns = cbt_clock_unix_now();
    *out = m;
    return CBT_OK;
}

void cbt_blend_metrics_free(cbt_blend_metrics *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->lock);
    free(m);
}

cbt_blend_metrics *cbt_blend_metrics_current(void)
{
    cbt_tracer *t = cbt_tracer_get();
    return t ? t->blend : NULL;
}

void cbt_blend_count(cbt_blend_metrics *m, cbt_blend_counter c, uint64_t n)
{
    if (!m || (unsigned)c >= CBT_BC_COUNT_)
        return;
    pthread_mutex_lock(&m->lock);
    m->s.counters[c] += n;
    pthread_mutex_unlock(&m->lock);
}

static uint32_t bucket_of(double v)
{
    uint32_t i = 0;
    while (i < CBT_BLEND_N_BOUNDS && v > k_bounds[i])
        i++;
    return i;
}

void cbt_blend_observe(cbt_blend_metrics *m, cbt_blend_hist h, double ms, const cbt_span *from)
{
    if (!m || (unsigned)h >= CBT_BH_COUNT_)
        return;
    if (!(ms >= 0.0) || isinf(ms)) /* NaN, negative, infinite: one bad value would */
        ms = 0.0;                    /* poison the cumulative sum for good */
    uint32_t b = bucket_of(ms);
    cbt_blend_exemplar ex = {0};
    if (from) {
        ex.valid = 1;
        ex.value_ms = ms;
        ex.time_ns = from->end_ns ? from->end_ns : cbt_clock_unix_now();
        memcpy(ex.trace_id, from->ctx.trace_id, 16);
        memcpy(ex.span_id, from->ctx.span_id, 8);
        const cbt_attr *a = cbt_span_attr(from, CBT_N_REQUEST_ID);
        if (a && a->type == CBT_META_STR) {
            size_t n = a->str_len < CBT_SESSION_MAX - 1 ? a->str_len : CBT_SESSION_MAX - 1;
            memcpy(ex.request_id, cbt_attr_str(from, a), n);
            ex.request_id[n] = '\0';
        }
    }
    pthread_mutex_lock(&m->lock);
    cbt_blend_hist_point *p = &m->s.hists[h];
    if (p->count == 0 || ms < p->min_ms)
        p->min_ms = ms;
    if (p->count == 0 || ms > p->max_ms)
        p->max_ms = ms;
    p->count++;
    p->sum_ms += ms;
    p->buckets[b]++;
    if (ex.valid)
        p->exemplars[b] = ex;
    pthread_mutex_unlock(&m->lock);
}

cbt_status cbt_blend_snapshot_take(cbt_blend_metrics *m, cbt_blend_snapshot *out)
{
    if (!m || !out)
        return CBT_ERR_INVAL;
    pthread_mutex_lock(&m->lock);
    *out = m->s;
    pthread_mutex_unlock(&m->lock);
    out->time_ns = cbt_clock_unix_now();
    return CBT_OK;
}

const char *cbt_blend_counter_name(cbt_blend_counter c)
{
    return (unsigned)c < CBT_BC_COUNT_ ? k_cnames[c] : NULL;
}
const char *cbt_blend_counter_unit(cbt_blend_counter c)
{
    return (unsigned)c < CBT_BC_COUNT_ ? k_cunits[c] : NULL;
}
const char *cbt_blend_counter_desc(cbt_blend_counter c)
{
    return (unsigned)c < CBT_BC_COUNT_ ? k_cdescs[c] : NULL;
}
const char *cbt_blend_hist_name(cbt_blend_hist h)
{
    return (unsigned)h < CBT_BH_COUNT_ ? k_hnames[h] : NULL;
}
const char *cbt_blend_hist_desc(cbt_blend_hist h)
{
    return (unsigned)h < CBT_BH_COUNT_ ? k_hdescs[h] : NULL;
}
const double *cbt_blend_bounds_ms(void) { return k_bounds; }
