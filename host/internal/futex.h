/* host/internal/futex.h — one place for the futex calls the harvester and
 * the CPU stream worker sleep and wake on.
 *
 * cbt_futex_wait_(w, v, ms): sleep while *w == v, at most `ms` milliseconds
 * (0: no bound). Returns at once when *w != v, when woken, on a signal or at
 * the bound: callers re-check their condition either way. Without futexes
 * (not Linux) it sleeps `ms` (0: 200 us), so a wake-up is that late at most.
 * cbt_futex_wake_(w, n): wake up to n sleepers of w (nothing without futexes).
 */
#ifndef CBT_HOST_INTERNAL_FUTEX_H
#define CBT_HOST_INTERNAL_FUTEX_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

static inline void cbt_futex_wait_(_Atomic uint32_t *w, uint32_t v, uint32_t ms)
{
    struct timespec d = {.tv_sec = ms / 1000u, .tv_nsec = (long)(ms % 1000u) * 1000000L};
#if defined(__linux__)
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, v, ms ? &d : NULL, NULL, 0);
#else
    (void)w, (void)v;
    if (!ms)
        d.tv_nsec = 200000L;
    nanosleep(&d, NULL);
#endif
}

/* The same for at most `us` microseconds (0: at once). */
static inline void cbt_futex_wait_us_(_Atomic uint32_t *w, uint32_t v, uint32_t us)
{
    struct timespec d = {.tv_sec = us / 1000000u, .tv_nsec = (long)(us % 1000000u) * 1000L};
#if defined(__linux__)
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, v, &d, NULL, 0);
#else
    (void)w, (void)v;
    nanosleep(&d, NULL);
#endif
}

static inline void cbt_futex_wake_(_Atomic uint32_t *w, int n)
{
#if defined(__linux__)
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
#else
    (void)w, (void)n;
#endif
}

#endif /* CBT_HOST_INTERNAL_FUTEX_H */
