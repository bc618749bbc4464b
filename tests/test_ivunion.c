/* tests/test_ivunion.c — the bounded interval union (host/util/ivunion.c)
 * behind a request root's cbt.gpu_busy_ns: overlapping intervals count
 * once, touching ones merge, disjoint ones add, order does not matter, and
 * past CBT_IVU_MAX disjoint pieces the earliest is retired without being
 * counted twice; against a brute-force union over random intervals. */
#include <string.h>

#include "internal/ivunion.h"
#include "testutil.h"

static uint64_t len_of(const uint64_t (*iv)[2], int n)
{
    cbt_ivunion u;
    cbt_ivunion_clear(&u);
    for (int i = 0; i < n; i++)
        cbt_ivunion_add(&u, iv[i][0], iv[i][1]);
    return cbt_ivunion_len(&u);
}

static void basics(void **state)
{
    (void)state;
    const uint64_t overlap[][2] = {{10, 30}, {20, 40}};
    assert_int_equal(len_of(overlap, 2), 30); /* not 40 */
    const uint64_t rev[][2] = {{20, 40}, {10, 30}};
    assert_int_equal(len_of(rev, 2), 30);
    const uint64_t touch[][2] = {{10, 20}, {20, 30}};
    assert_int_equal(len_of(touch, 2), 20);
    const uint64_t apart[][2] = {{10, 20}, {30, 35}};
    assert_int_equal(len_of(apart, 2), 15);
    const uint64_t inside[][2] = {{10, 100}, {20, 30}, {40, 50}};
    assert_int_equal(len_of(inside, 3), 90);
    const uint64_t bridge[][2] = {{10, 20}, {30, 40}, {50, 60}, {15, 55}};
    assert_int_equal(len_of(bridge, 4), 50);
    const uint64_t empty[][2] = {{10, 10}, {30, 20}};
    assert_int_equal(len_of(empty, 2), 0);
}

/* Past the bound: 3 * CBT_IVU_MAX disjoint pieces in time order are all
 * counted (the earliest retired as they come), and one that overlaps only
 * retired time adds nothing more. */
static void bounded(void **state)
{
    (void)state;
    cbt_ivunion u;
    cbt_ivunion_clear(&u);
    uint64_t want = 0;
    for (uint64_t i = 0; i < 3 * CBT_IVU_MAX; i++) {
        cbt_ivunion_add(&u, i * 100, i * 100 + 10);
        want += 10;
    }
    assert_true(u.n <= CBT_IVU_MAX);
    assert_int_equal(cbt_ivunion_len(&u), want);
    cbt_ivunion_add(&u, 0, 10); /* retired already: not again */
    assert_int_equal(cbt_ivunion_len(&u), want);
    cbt_ivunion_add(&u, 5000, 5010); /* new time after all of it */
    assert_int_equal(cbt_ivunion_len(&u), want + 10);
}

/* Random intervals in any order, at most CBT_IVU_MAX disjoint pieces in
 * their union: it equals a brute-force count over unit cells. */
static void random_against_brute_force(void **state)
{
    (void)state;
    uint64_t x = 88172645463325252ull;
    for (int round = 0; round < 2000; round++) {
        enum { CELLS = 400 };
        uint8_t cover[CELLS];
        memset(cover, 0, sizeof cover);
        cbt_ivunion u;
        cbt_ivunion_clear(&u);
        int n = 1 + (int)(x % 12);
        for (int i = 0; i < n; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            /* one of CBT_IVU_MAX slots of 50 cells; every interval of a
             * slot covers its cell 10, so the union has at most one piece
             * per slot: at most CBT_IVU_MAX */
            uint64_t slot = x % CBT_IVU_MAX, a = slot * 50 + (x >> 8) % 10;
            uint64_t b = a + 11 + (x >> 16) % 28;
            cbt_ivunion_add(&u, a, b);
            for (uint64_t c = a; c < b; c++)
                cover[c] = 1;
        }
        uint64_t want = 0;
        for (int c = 0; c < CELLS; c++)
            want += cover[c];
        assert_int_equal(cbt_ivunion_len(&u), want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(basics),
        cmocka_unit_test(bounded),
        cmocka_unit_test(random_against_brute_force),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
