/* tests/test_gpu_nowait.c — on a real GPU, the CUDA paths that must never make
 * the program wait for cbt: cbt_stream_cuda_create on a stream the GPU is
 * busy with for 300 ms returns at once (its reference is resolved later, by
 * the harvester) and the marks behind it are timed right; marks from four
 * threads on one stream return fast and all resolve, each thread's in its
 * order; and, with the test NVTX tool (NVTX_INJECTION64_PATH, the
 * cbt_nvtx_inject library), a thread stalled inside the tool for 1 s holds
 * no other thread's CUDA mark up. The CPU-side proofs are the cuda-double and
 * NVTX tests; this is what the device does (bench/gpu-check.sh runs it as
 * its own step, "nowait", and in its ctest run). Exits 77 (skipped) with the
 * reason when no device is present. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "cbt/nvtx.h"
#include "gpu_testutil.h"
#include "internal/clock.h"
#include "nvtx_inject.h"
#include "testutil.h"

int cbt_test_launch_spin(void *stream, uint64_t ns);

static cudaStream_t g_cs;

#define BOUND_MS 200.0 /* what a publish or a create may take */

static double ms_since(const struct timespec *a)
{
    struct timespec b;
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (double)(b.tv_sec - a->tv_sec) * 1e3 + (double)(b.tv_nsec - a->tv_nsec) / 1e6;
}

static void start(void)
{
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    tu_start(&c);
}

/* The GPU spins 300 ms on the stream; creating the cbt stream then returns
 * well within 200 ms (the old create waited the 300 ms out). Two marks
 * around a 20 ms spin queued after it: 20 ms apart, and the first no
 * earlier than the 300 ms spin's end (its reference was resolved after the
 * spin, by the harvester, on the device clock). */
static void gpu_create_on_busy_stream_does_not_wait(void **state)
{
    (void)state;
    start();
    uint64_t t_launch = cbt_clock_unix_now();
    assert_int_equal(cbt_test_launch_spin(g_cs, 300000000ull), 0);
    cbt_stream *s = NULL;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(cbt_stream_cuda_create(g_cs, &s), CBT_OK);
    double ms = ms_since(&t0);
    printf("NOWAIT create on a stream busy for 300 ms: %.2f ms (bound %.0f ms)\n", ms, BOUND_MS);
    assert_true(ms < BOUND_MS);
    tu_pub_on(s, CBT_EV_MP_STORE_START, "busy");
    assert_int_equal(cbt_test_launch_spin(g_cs, 20000000ull), 0);
    tu_pub_on(s, CBT_EV_MP_STORE_END, "busy");
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    const tu_event *a = tu_event_find(CBT_EV_MP_STORE_START, "busy", 0);
    const tu_event *b = tu_event_find(CBT_EV_MP_STORE_END, "busy", 0);
    assert_non_null(a);
    assert_non_null(b);
    double gap = (double)(b->ts - a->ts) / 1e6, after = ((double)a->ts - (double)t_launch) / 1e6;
    printf("NOWAIT marks behind the busy reference: %.3f ms apart (spin 20 ms), the first "
           "%.1f ms after the 300 ms spin was launched\n", gap, after);
    assert_true(b->ts - a->ts >= 19500000ull && b->ts - a->ts <= 60000000ull);
    assert_true(a->ts >= t_launch + 290000000ull && a->ts <= t_launch + 5000000000ull);
    cbt_stream_destroy(s);
    tu_stop();
}

enum { MT_THREADS = 4, MT_MARKS = 100 };

typedef struct mt_arg {
    cbt_stream *s;
    int k;
    double worst_ms;
    int bad;
} mt_arg;

static void *mt_marker(void *p)
{
    mt_arg *a = p;
    char sid[16];
    snprintf(sid, sizeof sid, "th%d", a->k);
    for (int i = 0; i < MT_MARKS; i++) {
        cbt_event e;
        cbt_event_init(&e, CBT_EV_L2_LOAD_TASK_SUBMITTED, sid);
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        a->bad += cbt_publish_on_stream(a->s, &e) != CBT_OK;
        double ms = ms_since(&t0);
        if (ms > a->worst_ms)
            a->worst_ms = ms;
    }
    return NULL;
}

/* Four threads put 100 marks each on one stream behind a 50 ms spin: every
 * publish returns within 200 ms, all 400 resolve, each thread's in its own
 * order (non-decreasing times) and none before the spin ended. */
static void gpu_marks_from_four_threads(void **state)
{
    (void)state;
    start();
    cbt_stream *s = NULL;
    assert_int_equal(cbt_stream_cuda_create(g_cs, &s), CBT_OK);
    uint64_t t_launch = cbt_clock_unix_now();
    assert_int_equal(cbt_test_launch_spin(g_cs, 50000000ull), 0);
    mt_arg a[MT_THREADS];
    pthread_t th[MT_THREADS];
    for (int k = 0; k < MT_THREADS; k++) {
        a[k] = (mt_arg){s, k, 0.0, 0};
        assert_int_equal(pthread_create(&th[k], NULL, mt_marker, &a[k]), 0);
    }
    double worst = 0.0;
    for (int k = 0; k < MT_THREADS; k++) {
        assert_int_equal(pthread_join(th[k], NULL), 0);
        assert_int_equal(a[k].bad, 0);
        if (a[k].worst_ms > worst)
            worst = a[k].worst_ms;
    }
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    printf("NOWAIT %d marks from %d threads on one stream: slowest publish %.3f ms (bound %.0f "
           "ms), %u dispatched\n", MT_THREADS * MT_MARKS, MT_THREADS, worst, BOUND_MS,
           tu_event_count());
    assert_true(worst < BOUND_MS);
    assert_int_equal(tu_event_count(), MT_THREADS * MT_MARKS);
    char sid[16];
    for (int k = 0; k < MT_THREADS; k++) {
        snprintf(sid, sizeof sid, "th%d", k);
        uint64_t prev = 0;
        for (uint32_t i = 0; i < MT_MARKS; i++) {
            const tu_event *e = tu_event_find(CBT_EV_L2_LOAD_TASK_SUBMITTED, sid, i);
            assert_non_null(e);
            assert_true(e->ts >= prev);
            assert_true(e->ts >= t_launch + 45000000ull);
            prev = e->ts;
        }
    }
    cbt_stream_destroy(s);
    tu_stop();
}

/* ---- NVTX: a thread stalled in the tool ------------------------------------------------ */

static void *inject_sym(const char *name)
{
    const char *path = getenv("NVTX_INJECTION64_PATH");
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(h);
    void *sym = dlsym(h, name);
    assert_non_null(sym);
    dlclose(h);
    return sym;
}

typedef struct slow_arg {
    cbt_stream *s;
    cbt_status st;
} slow_arg;

static void *slow_start(void *p)
{
    slow_arg *a = p;
    cbt_event e;
    cbt_event_init(&e, CBT_EV_MP_STORE_START, "g-slow");
    a->st = cbt_publish_on_stream(a->s, &e);
    return NULL;
}

/* With the test NVTX tool attached: one thread's range start (a CUDA mark's
 * NVTX hook) sleeps 1 s in the tool; another thread's START/END marks on the
 * same CUDA stream return within 200 ms, and all four marks resolve. */
static void gpu_nvtx_stalled_thread_holds_no_mark(void **state)
{
    (void)state;
    const char *path = getenv("NVTX_INJECTION64_PATH");
    if (!path || !*path) {
        printf("NOWAIT nvtx: not checked (NVTX_INJECTION64_PATH unset: cbt built without NVTX?)\n");
        return;
    }
    start();
    assert_int_equal(cbt_nvtx_enable(), CBT_OK); /* NVTX loads the tool here */
    cbt_stream *s = NULL;
    assert_int_equal(cbt_stream_cuda_create(g_cs, &s), CBT_OK);
    tu_pub_on(s, CBT_EV_MP_STORE_SUBMITTED, "g-attach"); /* attaches the stream */
    cbt_nvtx_inject_stall_fn stall;
    cbt_nvtx_inject_stalling_fn stalling;
    void *sym = inject_sym("cbt_nvtx_inject_stall");
    memcpy(&stall, &sym, sizeof stall);
    sym = inject_sym("cbt_nvtx_inject_stalling");
    memcpy(&stalling, &sym, sizeof stalling);
    stall("mp.store g-slow", 1000);
    slow_arg a = {s, CBT_ERR_INVAL};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, slow_start, &a), 0);
    for (int i = 0; i < 2000 && !stalling(); i++) {
        struct timespec d = {0, 1000000};
        nanosleep(&d, NULL);
    }
    assert_true(stalling());
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    tu_pub_on(s, CBT_EV_MP_STORE_START, "g-fast");
    assert_int_equal(cbt_test_launch_spin(g_cs, 5000000ull), 0);
    tu_pub_on(s, CBT_EV_MP_STORE_END, "g-fast");
    double ms = ms_since(&t0);
    int still = stalling();
    printf("NOWAIT nvtx: START/END on a CUDA stream while another thread is stalled 1 s in the "
           "tool: %.3f ms (bound %.0f ms)\n", ms, BOUND_MS);
    assert_true(ms < BOUND_MS);
    assert_true(still);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(a.st, CBT_OK);
    tu_pub_on(s, CBT_EV_MP_STORE_END, "g-slow");
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    tu_flush();
    assert_non_null(tu_event_find(CBT_EV_MP_STORE_START, "g-slow", 0));
    assert_non_null(tu_event_find(CBT_EV_MP_STORE_END, "g-slow", 0));
    const tu_event *fs = tu_event_find(CBT_EV_MP_STORE_START, "g-fast", 0);
    const tu_event *fe = tu_event_find(CBT_EV_MP_STORE_END, "g-fast", 0);
    assert_non_null(fs);
    assert_non_null(fe);
    assert_true(fe->ts - fs->ts >= 4500000ull);
    cbt_nvtx_log_fn log_fn;
    sym = inject_sym("cbt_nvtx_log");
    memcpy(&log_fn, &sym, sizeof log_fn); /* object pointer -> function pointer, POSIX style */
    const nvtx_log *l = log_fn();
    uint32_t ended = 0;
    for (uint32_t i = 0; i < l->n_ranges; i++)
        ended += l->ranges[i].ended && (strcmp(l->ranges[i].message, "mp.store g-slow") == 0 ||
                                        strcmp(l->ranges[i].message, "mp.store g-fast") == 0);
    assert_int_equal(ended, 2);
    cbt_stream_destroy(s);
    tu_stop();
}

int main(void)
{
    if (!tu_gpu_or_skip("test_gpu_nowait"))
        return 77;
    if (cudaStreamCreateWithFlags(&g_cs, cudaStreamNonBlocking) != cudaSuccess) {
        printf("cudaStreamCreate failed\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(gpu_create_on_busy_stream_does_not_wait, tu_teardown),
        cmocka_unit_test_teardown(gpu_marks_from_four_threads, tu_teardown),
        cmocka_unit_test_teardown(gpu_nvtx_stalled_thread_holds_no_mark, tu_teardown), /* last */
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    cudaStreamDestroy(g_cs);
    return rc;
}
