/* tests/test_gpu_queue.c — on a real GPU, queue time (docs/spans.md, "Queue
 * time"): a kernel launched with cbt_launch_begin behind a 100 ms spin on
 * the same CUDA stream carries a cbt.queue_ns of at least the spin (its
 * launch's host time to its first CTA's %globaltimer, both on the host's
 * timeline through the device ring's fitted clock), and so does the
 * mp.retrieve whose START mark was enqueued with it; the same kernel on the
 * idle stream waits far less; each span's queue is its start minus its
 * enqueue exactly; the stream and device are named; the root sums. The CPU
 * proofs are tests/test_queue_time.c and the runtime double's
 * queue_time_on_cuda_marks; this is what the device does (bench/gpu-check.sh
 * runs it as its own step, "queue", its QUEUE lines in the summary). Exits
 * 77 (skipped) with the reason when no device is present. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "cbt/kernel_span.h"
#include "gpu_testutil.h"
#include "testutil.h"

int cbt_test_launch_spin(void *stream, uint64_t ns);
int cbt_test_ring_kernel(void *stream, cbt_kspan span, unsigned int ctas, unsigned int threads,
                         unsigned long long spin_ns, unsigned int tokens, unsigned int shifted);

#define MS 1000000ull
#define SPIN_NS (100 * MS) /* the long one */

static cudaStream_t g_cs;

/* One retrieve on `s` with one instrumented kernel (1 ms), behind `spin_ns`
 * of another kernel on the same stream when not 0. */
static void retrieve(cbt_stream *s, const char *sid, uint64_t spin_ns)
{
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_RETRIEVE_SUBMITTED, sid);
    if (spin_ns)
        assert_int_equal(cbt_test_launch_spin(g_cs, spin_ns), 0);
    tu_pub_on(s, CBT_EV_MP_RETRIEVE_START, sid);
    cbt_launch_info li = cbt_launch_info_default(CBT_KOP_SCATTER, 8);
    li.requested_tokens = 80;
    cbt_kspan span;
    assert_int_equal(cbt_launch_begin(s, sid, &li, &span), CBT_OK);
    assert_non_null(span.ring);
    assert_int_equal(cbt_test_ring_kernel(g_cs, span, 8, 64, 1 * MS, 10, 0), 0);
    tu_pub_on(s, CBT_EV_MP_RETRIEVE_END, sid);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
}

/* queue = start - enqueue, exactly; the stream and a CUDA device named. */
static uint64_t checked(const cbt_span *sp, const cbt_stream *s)
{
    uint64_t q = (uint64_t)tu_attr_i64(sp, "cbt.queue_ns");
    uint64_t enq = (uint64_t)tu_attr_i64(sp, "cbt.enqueue_ns");
    assert_int_equal(q, sp->start_ns > enq ? sp->start_ns - enq : 0);
    assert_int_equal(tu_attr_i64(sp, "cbt.stream"), cbt_stream_ordinal(s));
    const cbt_attr *d = cbt_span_attr(sp, tu_name("cbt.device"));
    assert_non_null(d);
    assert_true(d->str_len > 5 && memcmp(cbt_attr_str(sp, d), "cuda:", 5) == 0);
    return q;
}

static void gpu_kernel_queued_behind_a_long_one(void **state)
{
    (void)state;
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    tu_start(&c);
    cbt_stream *s = NULL;
    assert_int_equal(cbt_stream_cuda_create(g_cs, &s), CBT_OK);
    retrieve(s, "gq-warm", 0); /* the device clock's first fit, the stream's reference */
    retrieve(s, "gq", SPIN_NS);
    retrieve(s, "gq-idle", 0);
    for (int i = 0; i < 2000 && tu_count("cb.scatter", NULL) < 3; i++) {
        tu_flush();
        struct timespec d = {0, 1000000};
        nanosleep(&d, NULL);
    }
    tu_flush();
    const cbt_span *kq = tu_need_span("cb.scatter", "gq", 0);
    const cbt_span *ki = tu_need_span("cb.scatter", "gq-idle", 0);
    const cbt_span *rq = tu_need_span("mp.retrieve", "gq", 0);
    const cbt_span *ri = tu_need_span("mp.retrieve", "gq-idle", 0);
    uint64_t q_k = checked(kq, s), q_ki = checked(ki, s), q_r = checked(rq, s), q_ri = checked(ri, s);
    cbt_ring_stats rs = CBT_STRUCT_INIT(cbt_ring_stats);
    assert_int_equal(cbt_ring_stats_get(&rs), CBT_OK);
    printf("QUEUE kernel behind a %llu ms spin: cbt.queue_ns %.3f ms (on the idle stream %.3f ms)\n",
           (unsigned long long)(SPIN_NS / MS), q_k / 1e6, q_ki / 1e6);
    printf("QUEUE its mp.retrieve: %.3f ms (idle %.3f ms); device clock err %.0f ns\n", q_r / 1e6,
           q_ri / 1e6, rs.clock_err_ns);
    /* the spin ran between the enqueue and the first CTA: the clock fit's
     * error (microseconds) is all that can take from it */
    double slack = rs.clock_err_ns + 50000.0;
    assert_true((double)q_k + slack >= (double)SPIN_NS);
    assert_true((double)q_r + slack >= (double)SPIN_NS);
    assert_true(q_ki < SPIN_NS / 2);
    assert_true(q_ri < SPIN_NS / 2);
    const cbt_span *root = tu_need_span("request", "gq", 0);
    assert_int_equal(tu_attr_i64(root, "cbt.gpu_queue_ns"), q_r);
    assert_int_equal(tu_attr_i64(root, "cbt.gpu_busy_ns"), rq->end_ns - rq->start_ns);
    cbt_stream_destroy(s);
    tu_stop();
}

int main(void)
{
    if (!tu_gpu_or_skip("test_gpu_queue"))
        return 77;
    if (cudaStreamCreateWithFlags(&g_cs, cudaStreamNonBlocking) != cudaSuccess) {
        printf("cudaStreamCreate failed\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(gpu_kernel_queued_behind_a_long_one, tu_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    cudaStreamDestroy(g_cs);
    return rc;
}
