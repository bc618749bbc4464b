/* tests/test_cudadbl_ring.c — the host side of the CUDA ring placements
 * (host/device/ring_cuda_host.c) against the CUDA-runtime double, no GPU:
 * MAPPED and DEVICE rings allocate, take a record written through the view
 * the kernels get, read it back (DEVICE: through the copy-out, overwritten
 * positions counted lost) and free every allocation of the right kind; a
 * failure at any allocation frees what was made; the clock probe's host half
 * fits the fake %globaltimer; a dead probe leaves the clock unfitted, not
 * hung; the detached free path frees on its own thread. Host logic only:
 * docs/testing.md. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cbt/kernel_span.h"
#include "cudadbl.h"
#include "internal/clock.h"
#include "internal/ring_host.h"
#include "testutil.h"

static cbt_clock_map g_map;

static cbt_ring *make(uint32_t cap, cbt_ring_placement pl)
{
    cbt_ring *r = NULL;
    assert_int_equal(cbt_ring_create_cuda(cap, pl, g_map.ns_per_tick, &r), CBT_OK);
    assert_non_null(r);
    return r;
}

static void put(const cbt_ring *r, uint32_t launch, uint32_t cta)
{
    cbt_cpu_ring_put(r->view, 1000 + cta, 2000 + cta, launch, cta, 3, 5, CBT_REC_CTA,
                     CBT_KOP_SCATTER, 42);
}

static void placement_round_trip(cbt_ring_placement pl)
{
    cudadbl_reset();
    uint32_t live0 = cudadbl_live_allocs();
    cbt_ring *r = make(64, pl);
    assert_true(cudadbl_live_allocs() > live0);
    assert_int_equal(r->placement, pl);
    assert_true(cudadbl_probe_launches() >= 1);
    /* the double fills new memory with 0xA5: the ring zeroed what it reads */
    for (uint32_t i = 0; i < 64; i++) {
        assert_int_equal(r->recs[i].seq, 0);
        /* what producers write (device memory, or the mapped pages): the
         * double's device memory is host memory, so the test can look */
        assert_int_equal(r->view->recs[i].seq, 0);
        assert_int_equal(r->view->recs[i].check, 0);
    }
    assert_int_equal(*r->view->claim, 0);
    cbt_ring_rec out[128];
    assert_int_equal(cbt_ring_poll(r, out, 128), 0);
    put(r, 7, 0);
    put(r, 7, 1);
    assert_int_equal(cbt_ring_poll(r, out, 128), 2);
    assert_int_equal(out[0].launch_id, 7);
    assert_int_equal(out[1].cta, 1);
    assert_int_equal(out[1].t_begin, 1001);
    assert_int_equal(out[1].t_end, 2001);
    assert_int_equal(out[1].user, 42);
    assert_int_equal(r->lost, 0);
    /* a lap and 5 past it: 64 read, 5 counted lost */
    for (uint32_t i = 0; i < 69; i++)
        put(r, 8, i);
    assert_int_equal(cbt_ring_poll(r, out, 128), 64);
    assert_int_equal(r->lost, 5);
    assert_int_equal(out[0].cta, 5);
    assert_int_equal(out[63].cta, 68);
    cbt_ring_destroy(r);
    assert_int_equal(cudadbl_live_allocs(), live0);
    assert_int_equal(cudadbl_misuse(), 0);
}

static void mapped_round_trip(void **state)
{
    (void)state;
    placement_round_trip(CBT_RING_MAPPED);
}

static void device_round_trip(void **state)
{
    (void)state;
    placement_round_trip(CBT_RING_DEVICE);
}

/* Each allocation in turn fails: create says CBT_ERR_CUDA and frees what it
 * made, each with the right call; then one succeeds. */
static void any_failed_allocation_frees_all(void **state)
{
    (void)state;
    for (int pl = 0; pl < 2; pl++) {
        cudadbl_reset();
        uint32_t live0 = cudadbl_live_allocs();
        int k = 0;
        for (;; k++) {
            cudadbl_fail_alloc_in(k);
            cbt_ring *r = NULL;
            cbt_status st = cbt_ring_create_cuda(64, pl ? CBT_RING_DEVICE : CBT_RING_MAPPED,
                                                 g_map.ns_per_tick, &r);
            if (st == CBT_OK) {
                cbt_ring_destroy(r);
                break;
            }
            assert_int_equal(st, CBT_ERR_CUDA);
            assert_null(r);
            if (cudadbl_live_allocs() != live0)
                printf("# allocation %d of the %s ring failed: %u allocation(s) left live\n", k,
                       pl ? "DEVICE" : "MAPPED", cudadbl_live_allocs() - live0);
            assert_int_equal(cudadbl_live_allocs(), live0);
            assert_true(k < 32);
        }
        cudadbl_fail_alloc_in(-1);
        printf("# %s: %d allocations, each failure freed the rest\n",
               pl ? "DEVICE" : "MAPPED", k);
        assert_int_equal(k, pl ? 8 : 6); /* claim, fold, records (DEVICE: + staging, claim copy), ping, pong, view */
        assert_int_equal(cudadbl_live_allocs(), live0);
        assert_int_equal(cudadbl_misuse(), 0);
    }
}

/* The probe's host half against the probe "kernel": the fitted clock maps
 * the fake %globaltimer (its own epoch) onto unix time. */
static void probe_fits_fake_globaltimer(void **state)
{
    (void)state;
    cudadbl_reset();
    cbt_ring *r = make(64, CBT_RING_MAPPED);
    assert_true(r->clock.fitted);
    cbt_ring_calibrate(r, 32);
    uint64_t now = cbt_clock_unix_now();
    uint64_t mapped = cbt_ring_dev_to_unix(r, &g_map, cudadbl_gtimer());
    int64_t e = (int64_t)(mapped - now);
    printf("# fake %%globaltimer mapped to unix: %lld ns from the host clock (err %.0f ticks)\n",
           (long long)e, r->clock.err_ticks);
    assert_true(e > -50000000 && e < 50000000); /* the epoch is 7e12 ns off; the brackets are wide on a loaded host */
    cbt_ring_destroy(r);
}

/* A probe kernel that never answers: the host half gives up after its
 * 50 ms bound, the clock stays unfitted, the ring works. */
static void dead_probe_leaves_clock_unfitted(void **state)
{
    (void)state;
    cudadbl_reset();
    cudadbl_set_probe_dead(1);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    cbt_ring *r = make(64, CBT_RING_MAPPED);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
    assert_false(r->clock.fitted);
    assert_true(ms >= 45.0 && ms < 1000.0);
    put(r, 3, 0);
    cbt_ring_rec out[4];
    assert_int_equal(cbt_ring_poll(r, out, 4), 1);
    cudadbl_set_probe_dead(0);
    cbt_ring_destroy(r);
}

/* Shutdown gave up on marks: the frees go to a detached thread. */
static void detached_free_frees(void **state)
{
    (void)state;
    cudadbl_reset();
    uint32_t live0 = cudadbl_live_allocs();
    assert_int_equal(cbt_ring_free_path_(CBT_RING_DEVICE, 2), CBT_RING_FREE_DETACHED);
    cbt_ring *r = make(64, CBT_RING_DEVICE);
    cbt_ring_destroy_after_(r, 2);
    for (int i = 0; i < 2000 && cudadbl_live_allocs() != live0; i++) {
        struct timespec d = {0, 1000000};
        nanosleep(&d, NULL);
    }
    assert_int_equal(cudadbl_live_allocs(), live0);
    assert_int_equal(cudadbl_misuse(), 0);
}

static void no_device(void **state)
{
    (void)state;
    cudadbl_reset();
    cudadbl_set_devices(0);
    cbt_ring *r = NULL;
    assert_int_equal(cbt_ring_create_cuda(64, CBT_RING_MAPPED, g_map.ns_per_tick, &r),
                     CBT_ERR_NO_DEVICE);
    assert_int_equal(cbt_ring_create_cuda(63, CBT_RING_MAPPED, g_map.ns_per_tick, &r),
                     CBT_ERR_INVAL);
    cudadbl_set_devices(1);
}

int main(void)
{
    cbt_clock_map_init(&g_map, 10);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(mapped_round_trip),
        cmocka_unit_test(device_round_trip),
        cmocka_unit_test(any_failed_allocation_frees_all),
        cmocka_unit_test(probe_fits_fake_globaltimer),
        cmocka_unit_test(dead_probe_leaves_clock_unfitted),
        cmocka_unit_test(detached_free_frees),
        cmocka_unit_test(no_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
