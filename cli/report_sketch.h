/* cli/report_sketch.h — owns the duration sketch of `cbt report`: a
 * log-linear histogram of non-negative integers (nanoseconds) whose
 * quantiles are within 0.4% of the exact ones, in bounded memory.
 *
 * Buckets: values below 256 each have their own (exact); above, every power
 * of two [2^e, 2^(e+1)) is cut into 128 equal buckets, so a bucket is at most
 * 1/128 of its lower bound wide. A quantile is the midpoint of the bucket
 * holding the nearest-rank value (clamped to the exact min and max), so it is
 * off the exact nearest-rank value by at most half a bucket: 1/256 = 0.39%
 * of it. Count, sum, min and max are exact.
 *
 * Memory: the 7,424 counters come in 58 blocks of 128 (1 KiB each),
 * allocated the first time a value falls in one: a sketch of durations
 * between 1 us and 1 s holds 11 blocks; 58 KiB at most. An allocation that
 * fails drops the value from the buckets (counted in `lost`; count, sum, min
 * and max still see it). Single-threaded; nothing here waits.
 */
#ifndef CBT_CLI_REPORT_SKETCH_H
#define CBT_CLI_REPORT_SKETCH_H

#include <stdint.h>

#define RPT_SK_SUB 128u                         /* buckets per power of two */
#define RPT_SK_EXACT 256u                       /* values below this are exact */
#define RPT_SK_BUCKETS (RPT_SK_EXACT + 56u * RPT_SK_SUB) /* 2^8 .. 2^64 */
#define RPT_SK_BLOCKS (RPT_SK_BUCKETS / RPT_SK_SUB)

typedef struct rpt_sketch {
    uint64_t n, lost;
    uint64_t min, max;
    double sum;
    uint64_t *blk[RPT_SK_BLOCKS];
} rpt_sketch;

/* An empty sketch (all zero is one too). */
void rpt_sketch_init(rpt_sketch *s);
void rpt_sketch_free(rpt_sketch *s);

/* Add one value. Cost: a count-leading-zeros and an increment (a 1 KiB
 * calloc the first time a block is used). */
void rpt_sketch_add(rpt_sketch *s, uint64_t v);

/* The q-quantile (0 < q <= 1), nearest rank: the value below or at which
 * ceil(q * n) of the values lie, to within 0.39%. 0 for an empty sketch.
 * Cost: a walk of the allocated blocks. */
double rpt_sketch_quantile(const rpt_sketch *s, double q);

/* Several quantiles at once, qs ascending, in one walk. */
void rpt_sketch_quantiles(const rpt_sketch *s, const double *qs, unsigned nq, double *out);

/* Values added that lie in [lo, hi): counted through the buckets, so
 * exact below 256 and otherwise to the bucket (a bucket straddling a bound
 * counts on the side of its midpoint). For plots. */
uint64_t rpt_sketch_count_between(const rpt_sketch *s, double lo, double hi);

/* The bucket index of v, and a bucket's [lo, hi] range (for tests). */
uint32_t rpt_sketch_index(uint64_t v);
void rpt_sketch_bucket_range(uint32_t idx, uint64_t *lo, uint64_t *hi);

#endif /* CBT_CLI_REPORT_SKETCH_H */
