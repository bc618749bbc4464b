/* tests/test_never_waits.c — pins cbt's first promise (include/cbt.h, STYLE.md §5):
 * the instrumented program never waits for cbt, not even when a sink stalls.
 *
 * Each case stalls a sink on purpose, then times the calls a program makes
 * meanwhile against a bound:
 *   - a sink of the test's own (cbt_add_sink) whose on_span blocks on a
 *     condition variable, for ~3 s or until the test releases it;
 *   - the span file (cbt_config.jsonl_path) on a FIFO whose reader reads a
 *     little and then stops, or that has no reader at all.
 *
 *   case                  what is timed                                     bound
 *   fifo_reader_gone      a FIFO's reader leaves: the program is not killed  (SIGPIPE)
 *   fifo_no_reader        cbt_init: CBT_ERR_IO, not a blocked open()         1 s
 *   new_thread_publish    a new thread's first cbt_publish                   200 ms
 *   arrays_store_full     100 publishes of a 1 MiB array while the stalled     200 ms
 *                         sink's spans hold the store: arrays dropped and
 *                         counted; the store empty once the sink gets on
 *   metrics               cbt_metrics_get                                    200 ms
 *   flush_timeout         cbt_flush(100): CBT_ERR_TIMEOUT                    300 ms
 *                         cbt_flush(500): CBT_ERR_TIMEOUT                    700 ms
 *   fifo_reader_stops     20k requests, each publish; then the three above;  200 ms ...
 *                         cbt_shutdown_final; every span ended is in the     500 + 1000 ms
 *                         file or counted in sink_spans_lost
 *   shutdown_stalled      cbt_shutdown with a sink stalled forever           500 + 1000 ms
 *                         (shutdown_timeout_ms 500); its spans counted lost
 *
 * Public API only. Every call under test runs on a thread of its own
 * (bcall_run) while the test's thread watches the clock, so a case never
 * hangs: a call still blocked after its patience is reported, the test
 * releases the stall (opens the sink's gate, or lets the FIFO's reader read
 * again) so that it returns, and the case fails naming each call, how long
 * it took and whether it returned only once released. The stalls of the
 * first cases end by themselves after 3 s, so there the time reported is the
 * whole wait. An alarm() per case is the last resort. Each case releases its
 * stall at the end, also when it fails (teardown).
 *
 * Every timing is printed ("never_waits: ..."), pass or fail: the lines are
 * the evidence docs/performance.md and a review want.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cbt/array.h"
#include "testutil.h"

#define STALL_AUTO_MS 3000u   /* how long the stall of the first cases lasts on its own */
#define PATIENCE_AUTO_MS 5000u /* wait for a call under such a stall: past its end */
/* Sanitizer builds run several times slower (tests/CMakeLists.txt sets
 * CBT_TEST_SLOW there): every bound and patience is scaled by it. The plain
 * build holds cbt to the bounds themselves. */
#ifndef CBT_TEST_SLOW
#define CBT_TEST_SLOW 1u
#endif
#define PATIENCE_EXTRA_MS (2000u * CBT_TEST_SLOW) /* under a stall that never ends: bound + this, then release */
#define CASE_ALARM_S 90u      /* the last resort: SIGALRM ends a case that hangs anyway */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double ms_since(uint64_t t0) { return (double)(now_ns() - t0) / 1e6; }

static void sleep_ms(uint32_t ms)
{
    struct timespec d = {.tv_sec = ms / 1000u, .tv_nsec = (long)(ms % 1000u) * 1000000L};
    while (nanosleep(&d, &d) != 0 && errno == EINTR) {
    }
}

/* A condition variable whose timed waits run on CLOCK_MONOTONIC. */
static void cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

static struct timespec mono_at(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                          .tv_nsec = (long)(ns % 1000000000ull)};
    return ts;
}

/* ---- publishing: MP requests, never asserting (a full lane is CBT_ERR_FULL,
 * dropped and counted: no wait either) ------------------------------------------- */

static cbt_name g_hit, g_req, g_stored;

static void names_once(void)
{
    g_hit = tu_name("hit_tokens");
    g_req = tu_name("requested_tokens");
    g_stored = tu_name("stored_count");
}

/* One event; its duration into *worst_ns when longer. */
static void pub_timed(cbt_event_type type, const char *sid, cbt_name k1, int64_t v1, cbt_name k2,
                      int64_t v2, uint64_t *worst_ns)
{
    cbt_event e;
    if (cbt_event_init(&e, type, sid) != CBT_OK)
        return;
    if (k1)
        (void)cbt_event_i64(&e, k1, v1);
    if (k2)
        (void)cbt_event_i64(&e, k2, v2);
    uint64_t t0 = now_ns();
    (void)cbt_publish(&e);
    uint64_t d = now_ns() - t0;
    if (worst_ns && d > *worst_ns)
        *worst_ns = d;
}

/* One MP request (README.md's events): a root "request" and two children. */
static void pub_request(const char *sid, uint64_t *worst_ns)
{
    pub_timed(CBT_EV_MP_REQUEST_START, sid, 0, 0, 0, 0, worst_ns);
    pub_timed(CBT_EV_MP_LOOKUP_PREFETCH_START, sid, 0, 0, 0, 0, worst_ns);
    pub_timed(CBT_EV_MP_LOOKUP_PREFETCH_END, sid, g_hit, 1536, g_req, 2048, worst_ns);
    pub_timed(CBT_EV_MP_STORE_SUBMITTED, sid, 0, 0, 0, 0, worst_ns);
    pub_timed(CBT_EV_MP_STORE_START, sid, 0, 0, 0, 0, worst_ns);
    pub_timed(CBT_EV_MP_STORE_END, sid, g_stored, 3, 0, 0, worst_ns);
    pub_timed(CBT_EV_MP_REQUEST_END, sid, 0, 0, 0, 0, worst_ns);
}

/* n requests "<prefix>-<i>"; the longest single publish, in ms */
static double pub_requests(const char *prefix, uint32_t n)
{
    uint64_t worst = 0;
    for (uint32_t i = 0; i < n; i++) {
        char sid[64];
        snprintf(sid, sizeof sid, "%s-%u", prefix, i);
        pub_request(sid, &worst);
    }
    return (double)worst / 1e6;
}

/* ---- the stalled sink ---------------------------------------------------------------

 * on_span blocks while the gate is closed: until stall_release, or, with
 * auto_open_ms, that long after a call first blocked. Each case has its own
 * (never reused, never freed: a core that gave up on a stalled sink may still
 * call it after the case), so one case's late calls never touch another's. */
typedef struct stall {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    bool closed;           /* on_span blocks while set */
    uint32_t auto_open_ms; /* 0: until released */
    uint64_t blocked_at;   /* ns: when a call first blocked since the gate closed; 0: none */
    uint64_t entered;      /* on_span calls begun */
    uint64_t returned;     /* on_span calls returned */
} stall;

#define MAX_STALLS 16
static stall g_stalls[MAX_STALLS];
static uint32_t g_n_stalls;
static stall *g_case_stall; /* the running case's: teardown releases it */

static stall *stall_new(uint32_t auto_open_ms)
{
    assert_true(g_n_stalls < MAX_STALLS);
    stall *s = &g_stalls[g_n_stalls++];
    pthread_mutex_init(&s->lock, NULL);
    cond_init_mono(&s->cv);
    s->closed = true;
    s->auto_open_ms = auto_open_ms;
    g_case_stall = s;
    return s;
}

static cbt_status stall_on_span(void *ctx, const cbt_span *sp)
{
    (void)sp;
    stall *s = ctx;
    pthread_mutex_lock(&s->lock);
    s->entered++;
    while (s->closed) {
        uint64_t now = now_ns();
        if (!s->blocked_at) {
            s->blocked_at = now;
            pthread_cond_broadcast(&s->cv); /* stall_wait_blocked */
        }
        if (!s->auto_open_ms) {
            pthread_cond_wait(&s->cv, &s->lock);
            continue;
        }
        uint64_t end = s->blocked_at + (uint64_t)s->auto_open_ms * 1000000ull;
        if (now >= end) {
            s->closed = false;
            break;
        }
        struct timespec dl = mono_at(end);
        pthread_cond_timedwait(&s->cv, &s->lock, &dl);
    }
    s->returned++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->lock);
    return CBT_OK;
}

static void stall_release(void *arg)
{
    stall *s = arg;
    pthread_mutex_lock(&s->lock);
    s->closed = false;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->lock);
}

/* Close the gate again (a new auto_open window for the next call that blocks,
 * or for the one blocked now). */
static void stall_rearm(stall *s)
{
    pthread_mutex_lock(&s->lock);
    s->closed = true;
    s->blocked_at = 0;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->lock);
}

/* Whether a call blocked on the gate within timeout_ms. */
static bool stall_wait_blocked(stall *s, uint32_t timeout_ms)
{
    uint64_t end = now_ns() + (uint64_t)timeout_ms * 1000000ull;
    struct timespec dl = mono_at(end);
    pthread_mutex_lock(&s->lock);
    while (!s->blocked_at && now_ns() < end)
        pthread_cond_timedwait(&s->cv, &s->lock, &dl);
    bool b = s->blocked_at != 0;
    pthread_mutex_unlock(&s->lock);
    return b;
}

static uint64_t stall_returned(stall *s)
{
    pthread_mutex_lock(&s->lock);
    uint64_t r = s->returned;
    pthread_mutex_unlock(&s->lock);
    return r;
}

static void stall_add(stall *s)
{
    cbt_sink k = CBT_STRUCT_INIT(cbt_sink);
    k.name = "test-stall";
    k.ctx = s;
    k.on_span = stall_on_span;
    assert_int_equal(cbt_add_sink(&k), CBT_OK);
}

/* cbt_init with the stalled sink, one request, and wait until the sink is
 * stalled in it. */
static stall *start_stalled(uint32_t auto_open_ms, uint32_t shutdown_timeout_ms)
{
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    if (shutdown_timeout_ms)
        c.shutdown_timeout_ms = shutdown_timeout_ms;
    assert_int_equal(cbt_init(&c), CBT_OK);
    stall *s = stall_new(auto_open_ms);
    stall_add(s);
    names_once();
    pub_request("first", NULL);
    if (!stall_wait_blocked(s, 10000))
        fail_msg("no span reached the test's sink within 10 s of a whole MP request");
    return s;
}

/* ---- a call on a thread of its own, watched ----------------------------------------- */

typedef struct bcall bcall;
struct bcall {
    const char *what;
    void (*fn)(bcall *);  /* makes the call, setting t0/t1 around it and st */
    uint32_t arg;         /* the call's argument (a timeout) */
    cbt_status st;        /* what it returned */
    cbt_metrics m;        /* cbt_metrics_get, cbt_shutdown_final */
    uint64_t t0, t1;      /* ns, around the call, on its thread */
    uint64_t worst_rest;  /* ns: a new thread's later publishes, the longest */
    bool done;
    pthread_mutex_t lock;
    pthread_cond_t cv;
};

static void *bcall_main(void *arg)
{
    bcall *c = arg;
    c->fn(c);
    pthread_mutex_lock(&c->lock);
    c->done = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

/* Run c->fn on a new thread; wait patience_ms for it. Still running then:
 * release(rel) and wait up to 30 s more (a call that survives its stall's
 * release is a hang this harness cannot end: abort). Returns whether the
 * release was needed. */
static bool bcall_run(bcall *c, uint32_t patience_ms, void (*release)(void *), void *rel)
{
    pthread_mutex_init(&c->lock, NULL);
    cond_init_mono(&c->cv);
    c->done = false;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, bcall_main, c), 0);
    uint64_t end = now_ns() + (uint64_t)patience_ms * 1000000ull;
    bool released = false;
    pthread_mutex_lock(&c->lock);
    for (;;) {
        struct timespec dl = mono_at(end);
        while (!c->done && now_ns() < end)
            pthread_cond_timedwait(&c->cv, &c->lock, &dl);
        if (c->done)
            break;
        if (released) {
            pthread_mutex_unlock(&c->lock);
            fprintf(stderr, "never_waits: %s still blocked 30 s after the stall was released\n",
                    c->what);
            abort();
        }
        pthread_mutex_unlock(&c->lock);
        print_message("never_waits: %s still blocked after %u ms: releasing the stall\n",
                      c->what, patience_ms);
        release(rel);
        released = true;
        end = now_ns() + 30000ull * 1000000ull;
        pthread_mutex_lock(&c->lock);
    }
    pthread_mutex_unlock(&c->lock);
    pthread_join(th, NULL);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->lock);
    return released;
}

/* ---- verdicts: every step of a case runs and prints; the case fails at its end ---- */

typedef struct verdicts {
    const char *case_name;
    int failed;
    char why[4096];
} verdicts;

static void verdict(verdicts *v, bool ok, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void verdict(verdicts *v, bool ok, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    print_message("never_waits: %s: %s %s\n", v->case_name, ok ? "ok  " : "FAIL", line);
    if (!ok) {
        size_t l = strlen(v->why);
        snprintf(v->why + l, sizeof v->why - l, "\n  %s", line);
        v->failed++;
    }
}

/* The call took at most bound_ms. */
static void within(verdicts *v, const bcall *c, uint32_t bound_ms, bool released)
{
    bound_ms *= CBT_TEST_SLOW;
    double ms = (double)(c->t1 - c->t0) / 1e6;
    verdict(v, ms <= bound_ms, "%s: %.1f ms (bound %u ms)%s", c->what, ms, bound_ms,
            released ? "; returned only once the test released the stall" : "");
}

static void verdicts_end(const verdicts *v)
{
    if (v->failed)
        fail_msg("%s: %d step(s) waited for cbt:%s", v->case_name, v->failed, v->why);
}

/* The calls under test. */
static void call_new_thread_publish(bcall *c)
{
    char sid[32];
    snprintf(sid, sizeof sid, "new-thread-%u", c->arg);
    cbt_event e;
    cbt_event_init(&e, CBT_EV_MP_REQUEST_START, sid);
    c->t0 = now_ns();
    c->st = cbt_publish(&e);
    c->t1 = now_ns();
    /* the rest of its request, so the session does not dangle */
    pub_timed(CBT_EV_MP_LOOKUP_PREFETCH_START, sid, 0, 0, 0, 0, &c->worst_rest);
    pub_timed(CBT_EV_MP_LOOKUP_PREFETCH_END, sid, g_hit, 1, g_req, 2, &c->worst_rest);
    pub_timed(CBT_EV_MP_REQUEST_END, sid, 0, 0, 0, 0, &c->worst_rest);
}

static void call_metrics(bcall *c)
{
    c->m = (cbt_metrics)CBT_STRUCT_INIT(cbt_metrics);
    c->t0 = now_ns();
    c->st = cbt_metrics_get(&c->m);
    c->t1 = now_ns();
}

static void call_flush(bcall *c)
{
    c->t0 = now_ns();
    c->st = cbt_flush(c->arg);
    c->t1 = now_ns();
}

static void call_shutdown_final(bcall *c)
{
    c->m = (cbt_metrics)CBT_STRUCT_INIT(cbt_metrics);
    c->t0 = now_ns();
    c->st = cbt_shutdown_final(&c->m);
    c->t1 = now_ns();
}

/* ---- a FIFO and its reader ------------------------------------------------------------

 * The reader thread reads `little` bytes, then stops (the pipe fills, and a
 * writer blocks); reader_drain makes it read everything again (the release),
 * reader_stop stops it again, reader_finish reads to the end of the file
 * (the writer closed it) or for 10 s. It counts the whole span lines it got:
 * a line that starts {"trace_id": and ends with '}' (a fragment a writer cut
 * short does not). */
typedef enum { RD_LITTLE, RD_STOPPED, RD_DRAIN, RD_FINISH } rd_mode;

typedef struct reader {
    int fd;
    pthread_t th;
    bool running;
    pthread_mutex_t lock;
    pthread_cond_t cv;
    rd_mode mode;
    uint64_t little;       /* RD_LITTLE: bytes to read before stopping */
    uint64_t finish_end;   /* RD_FINISH: ns deadline */
    uint64_t bytes;        /* read in all */
    uint64_t spans;        /* whole span lines */
    uint64_t other_lines;  /* lines that are not (fragments) */
    bool eof;
    char head[16];         /* the current line's first bytes */
    uint32_t line_len;
    char last;             /* its last byte so far */
} reader;

static char g_dir[256];
static char g_fifo[300];
static reader g_reader;
static reader *g_case_reader; /* the running case's: teardown finishes it */
static int g_case_fifo_fd = -1; /* a reader end fifo_no_reader opened as its release */

static void fifo_make(const char *name)
{
    if (!g_dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(g_dir, sizeof g_dir, "%s/cbt-never-waits-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        assert_non_null(mkdtemp(g_dir));
    }
    snprintf(g_fifo, sizeof g_fifo, "%s/%s", g_dir, name);
    unlink(g_fifo);
    assert_int_equal(mkfifo(g_fifo, 0600), 0);
}

static void count_bytes(reader *r, const char *p, size_t n)
{
    static const char want[] = "{\"trace_id\":";
    for (size_t i = 0; i < n; i++) {
        char ch = p[i];
        if (ch == '\n') {
            bool whole = r->line_len >= sizeof want - 1 &&
                         memcmp(r->head, want, sizeof want - 1) == 0 && r->last == '}';
            if (whole)
                r->spans++;
            else
                r->other_lines++;
            r->line_len = 0;
            continue;
        }
        if (r->line_len < sizeof r->head)
            r->head[r->line_len] = ch;
        r->line_len++;
        r->last = ch;
    }
}

static void *reader_main(void *arg)
{
    reader *r = arg;
    static char buf[1 << 16];
    for (;;) {
        pthread_mutex_lock(&r->lock);
        while (r->mode == RD_STOPPED)
            pthread_cond_wait(&r->cv, &r->lock);
        if (r->mode == RD_LITTLE && r->bytes >= r->little) {
            r->mode = RD_STOPPED;
            pthread_cond_broadcast(&r->cv);
            pthread_mutex_unlock(&r->lock);
            continue;
        }
        rd_mode m = r->mode;
        size_t want = m == RD_LITTLE ? (size_t)(r->little - r->bytes) : sizeof buf;
        bool past = m == RD_FINISH && now_ns() >= r->finish_end;
        pthread_mutex_unlock(&r->lock);
        if (past)
            break;
        struct pollfd pf = {.fd = r->fd, .events = POLLIN};
        int pr = poll(&pf, 1, 50);
        if (pr <= 0)
            continue;
        ssize_t n = read(r->fd, buf, want < sizeof buf ? want : sizeof buf);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0) { /* the writer closed the file */
            if (m == RD_FINISH) {
                pthread_mutex_lock(&r->lock);
                r->eof = true;
                pthread_mutex_unlock(&r->lock);
                break;
            }
            sleep_ms(10);
            continue;
        }
        pthread_mutex_lock(&r->lock);
        r->bytes += (uint64_t)n;
        count_bytes(r, buf, (size_t)n);
        pthread_mutex_unlock(&r->lock);
    }
    return NULL;
}

/* Open the reader end (without blocking: no writer yet) for `little` bytes. */
static reader *reader_open(uint64_t little)
{
    reader *r = &g_reader;
    memset(r, 0, sizeof *r);
    r->fd = open(g_fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    assert_true(r->fd >= 0);
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->mode = RD_LITTLE;
    r->little = little;
    g_case_reader = r;
    return r;
}

/* Start reading (once the writer has the FIFO open: before, a read is EOF). */
static void reader_start(reader *r)
{
    assert_int_equal(pthread_create(&r->th, NULL, reader_main, r), 0);
    r->running = true;
}

static void reader_set(reader *r, rd_mode m)
{
    pthread_mutex_lock(&r->lock);
    r->mode = m;
    if (m == RD_FINISH)
        r->finish_end = now_ns() + 10000ull * 1000000ull;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->lock);
}

static void reader_drain(void *arg) { reader_set(arg, RD_DRAIN); }

/* Wait (at most timeout_ms) until the reader has read its little and stopped. */
static bool reader_wait_stopped(reader *r, uint32_t timeout_ms)
{
    uint64_t end = now_ns() + (uint64_t)timeout_ms * 1000000ull;
    pthread_mutex_lock(&r->lock);
    while (r->mode != RD_STOPPED && now_ns() < end) {
        pthread_mutex_unlock(&r->lock);
        sleep_ms(5);
        pthread_mutex_lock(&r->lock);
    }
    bool stopped = r->mode == RD_STOPPED;
    pthread_mutex_unlock(&r->lock);
    return stopped;
}

/* Read to the end (or 10 s), join, close. */
static void reader_finish(reader *r)
{
    if (r->running) {
        reader_set(r, RD_FINISH);
        pthread_join(r->th, NULL);
        r->running = false;
    }
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    g_case_reader = NULL;
}

/* ---- teardown: release what the case stalled, then take the tracer down ---------- */

static int nw_setup(void **state)
{
    (void)state;
    alarm(CASE_ALARM_S);
    return 0;
}

static int nw_teardown(void **state)
{
    (void)state;
    if (g_case_stall)
        stall_release(g_case_stall);
    g_case_stall = NULL;
    if (g_case_reader && g_case_reader->running)
        reader_set(g_case_reader, RD_DRAIN); /* so a writer blocked in the FIFO gets on */
    cbt_shutdown();
    if (g_case_reader)
        reader_finish(g_case_reader);
    if (g_case_fifo_fd >= 0)
        close(g_case_fifo_fd);
    g_case_fifo_fd = -1;
    if (g_fifo[0])
        unlink(g_fifo);
    g_fifo[0] = '\0';
    alarm(0);
    return 0;
}

/* ---- the cases -------------------------------------------------------------------------- */

/* a. A thread that never published gets its lane (or the shared queue) at
 * once: it does not wait while the harvester is inside a stalled sink. The
 * main thread's publishes meanwhile are bounded too. */
static void new_thread_publish(void **state)
{
    (void)state;
    verdicts v = {.case_name = "new_thread_publish"};
    stall *s = start_stalled(STALL_AUTO_MS, 0);
    bcall c = {.what = "a new thread's first cbt_publish", .fn = call_new_thread_publish, .arg = 1};
    bool rel = bcall_run(&c, PATIENCE_AUTO_MS, stall_release, s);
    within(&v, &c, 200, rel);
    verdict(&v, c.st == CBT_OK || c.st == CBT_ERR_FULL, "its status: %s", cbt_strerror(c.st));
    verdict(&v, c.worst_rest <= 200000000ull, "that thread's later publishes: longest %.3f ms",
            (double)c.worst_rest / 1e6);
    stall_rearm(s);
    pub_request("again", NULL);
    (void)stall_wait_blocked(s, 10000);
    double worst = pub_requests("while-stalled", 200);
    verdict(&v, worst <= 200.0,
            "200 requests from a thread with a lane, the sink stalled: longest publish %.3f ms",
            worst);
    stall_release(s);
    assert_int_equal(cbt_shutdown(), CBT_OK);
    verdicts_end(&v);
}

/* a2. Array values (cbt/array.h) while a sink is stalled: the spans it has
 * not taken yet hold their arrays, so the store fills; a publish with a
 * 128 k-token array then drops the array and counts it, never waiting for
 * room. Once the sink gets on, every chunk comes back. */
static void arrays_store_full(void **state)
{
    (void)state;
    verdicts v = {.case_name = "arrays_store_full"};
    stall *s = start_stalled(0, 0); /* closed until released */
    enum { IDS = 131072, REQUESTS = 100 }; /* 1 MiB each: 100 MiB against a 64 MiB store */
    static int64_t ids[IDS];
    for (int i = 0; i < IDS; i++)
        ids[i] = i;
    cbt_name key = tu_name("token_ids");
    cbt_arrays_stats before, full;
    cbt_arrays_stats_get(&before);
    uint64_t worst = 0;
    int refused = 0;
    for (int r = 0; r < REQUESTS; r++) {
        char sid[32];
        snprintf(sid, sizeof sid, "arrays-%d", r);
        cbt_event e;
        assert_int_equal(cbt_event_init(&e, CBT_EV_MP_REQUEST_START, sid), CBT_OK);
        assert_int_equal(cbt_event_array_i64(&e, key, ids, IDS), CBT_OK);
        uint64_t t0 = now_ns();
        cbt_status st = cbt_publish(&e);
        uint64_t d = now_ns() - t0;
        if (d > worst)
            worst = d;
        refused += st != CBT_OK && st != CBT_ERR_FULL;
        pub_timed(CBT_EV_MP_REQUEST_END, sid, 0, 0, 0, 0, &worst);
        if (r % 16 == 15) /* let the harvester make the roots: they pin the arrays */
            (void)cbt_flush(0);
    }
    (void)cbt_flush(200); /* times out: the sink is stalled; the roots are queued for it */
    cbt_arrays_stats_get(&full);
    verdict(&v, refused == 0, "publishes refused (not OK, not a counted full queue): %d",
            refused);
    verdict(&v, (double)worst / 1e6 <= 200.0 * CBT_TEST_SLOW,
            "%d publishes of a 1 MiB array, the store filling: longest %.3f ms", REQUESTS,
            (double)worst / 1e6);
    verdict(&v, full.dropped > before.dropped,
            "arrays dropped while the stalled sink held the store: %llu (store %llu MiB)",
            (unsigned long long)(full.dropped - before.dropped),
            (unsigned long long)(full.capacity >> 20));
    stall_release(s);
    assert_int_equal(cbt_shutdown(), CBT_OK);
    cbt_arrays_stats after;
    for (int i = 0; i < 200; i++) { /* a sink thread gives its queue's back as it ends */
        cbt_arrays_stats_get(&after);
        if (after.used == 0)
            break;
        sleep_ms(10);
    }
    verdict(&v, after.used == 0, "the store after the sink got on: %llu bytes in use",
            (unsigned long long)after.used);
    verdicts_end(&v);
}

/* b. cbt_metrics_get reads counters: it does not wait for the harvester. */
static void metrics(void **state)
{
    (void)state;
    verdicts v = {.case_name = "metrics"};
    stall *s = start_stalled(STALL_AUTO_MS, 0);
    pub_requests("more", 50);
    bcall c = {.what = "cbt_metrics_get", .fn = call_metrics};
    bool rel = bcall_run(&c, PATIENCE_AUTO_MS, stall_release, s);
    within(&v, &c, 200, rel);
    verdict(&v, c.st == CBT_OK, "its status: %s", cbt_strerror(c.st));
    verdict(&v, c.m.published >= 7, "published %llu (at least the first request's 7)",
            (unsigned long long)c.m.published);
    stall_release(s);
    assert_int_equal(cbt_shutdown(), CBT_OK);
    verdicts_end(&v);
}

/* c. cbt_flush(timeout) waits at most its timeout (and a little): with a
 * sink stalled, the flush cannot complete, so CBT_ERR_TIMEOUT. */
static void flush_timeout(void **state)
{
    (void)state;
    verdicts v = {.case_name = "flush_timeout"};
    stall *s = start_stalled(STALL_AUTO_MS, 0);
    static const uint32_t timeouts[2] = {100, 500};
    static const char *what[2] = {"cbt_flush(100)", "cbt_flush(500)"};
    for (int i = 0; i < 2; i++) {
        if (i) { /* stall again: a new window for the next call */
            stall_rearm(s);
            pub_request("again", NULL);
            if (!stall_wait_blocked(s, 10000))
                fail_msg("the sink did not stall again within 10 s");
        }
        pub_request(i ? "flush-500" : "flush-100", NULL);
        bcall c = {.what = what[i], .fn = call_flush, .arg = timeouts[i]};
        bool rel = bcall_run(&c, PATIENCE_AUTO_MS, stall_release, s);
        within(&v, &c, timeouts[i] + 200, rel);
        verdict(&v, c.st == CBT_ERR_TIMEOUT, "%s status: %s (want: %s)", what[i],
                cbt_strerror(c.st), cbt_strerror(CBT_ERR_TIMEOUT));
    }
    stall_release(s);
    assert_int_equal(cbt_shutdown(), CBT_OK);
    verdicts_end(&v);
}

/* e. cbt_shutdown does not wait past shutdown_timeout_ms (and a little) for
 * a sink stalled forever; the spans that sink never took are counted lost.
 * The one span it is stuck in may count either way (given up on, or taken
 * once released): every other one is in sink_spans_lost. */
static void shutdown_stalled(void **state)
{
    (void)state;
    verdicts v = {.case_name = "shutdown_stalled"};
    stall *s = start_stalled(0, 500);
    pub_requests("queued", 50);
    sleep_ms(50); /* let the harvester build them (or not: a core stuck in the sink) */
    bcall c = {.what = "cbt_shutdown_final (shutdown_timeout_ms 500)", .fn = call_shutdown_final};
    bool rel = bcall_run(&c, 1500 + PATIENCE_EXTRA_MS, stall_release, s);
    uint64_t got = stall_returned(s); /* spans the sink finished (all of them, if released) */
    within(&v, &c, 1500, rel);
    verdict(&v, c.st == CBT_OK, "its status: %s", cbt_strerror(c.st));
    uint64_t handed = c.m.spans_ended - c.m.spans_unsampled;
    uint64_t lost = c.m.sink_spans_lost;
    verdict(&v, handed >= 1, "spans ended %llu (at least the one the sink stalled in)",
            (unsigned long long)handed);
    verdict(&v, lost + got + 1 >= handed && lost + got <= handed,
            "spans the stalled sink did not take are counted lost: ended %llu, the sink "
            "finished %llu, sink_spans_lost %llu (want %llu or %llu)",
            (unsigned long long)handed, (unsigned long long)got, (unsigned long long)lost,
            (unsigned long long)(handed - got - (handed > got ? 1 : 0)),
            (unsigned long long)(handed - got));
    stall_release(s); /* a core that gave the sink up may still call it: it passes now */
    g_case_stall = NULL;
    verdicts_end(&v);
}

/* d, without a reader: opening a FIFO for writing blocks until a reader
 * comes. cbt_init must not: CBT_ERR_IO at once. (The release opens a
 * reader, which lets a blocked open() return.) */
static void open_reader_end(void *arg)
{
    (void)arg;
    g_case_fifo_fd = open(g_fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
}

static cbt_config g_init_cfg;
static void call_init(bcall *c)
{
    c->t0 = now_ns();
    c->st = cbt_init(&g_init_cfg);
    c->t1 = now_ns();
}

static void fifo_no_reader(void **state)
{
    (void)state;
    verdicts v = {.case_name = "fifo_no_reader"};
    fifo_make("spans-no-reader.jsonl");
    g_init_cfg = cbt_config_default();
    g_init_cfg.jsonl_path = g_fifo;
    bcall c = {.what = "cbt_init, span file a FIFO with no reader", .fn = call_init};
    bool rel = bcall_run(&c, 1000 + PATIENCE_EXTRA_MS, open_reader_end, NULL);
    within(&v, &c, 1000, rel);
    verdict(&v, c.st == CBT_ERR_IO, "its status: %s (want: %s)", cbt_strerror(c.st),
            cbt_strerror(CBT_ERR_IO));
    verdict(&v, c.st == CBT_OK || cbt_tracer_get() == NULL,
            "no tracer left behind by a failed init");
    if (cbt_tracer_get())
        cbt_shutdown();
    verdicts_end(&v);
}

/* d, a reader that stops: the span file's writes block once the pipe is
 * full. 20k requests, each publish bounded; then a new thread's first
 * publish, metrics and flush, each bounded; then cbt_shutdown_final within
 * shutdown_timeout_ms + 1 s; and every span ended either reached the file
 * whole or is counted in sink_spans_lost. A step that blocked was released
 * (the reader read on); the reader stops again and more requests refill the
 * pipe before the next step, so each step meets the stall afresh. */
static void refill(reader *r, const char *prefix)
{
    reader_set(r, RD_STOPPED);
    (void)pub_requests(prefix, 2000);
    sleep_ms(200);
}

static void fifo_reader_stops(void **state)
{
    (void)state;
    verdicts v = {.case_name = "fifo_reader_stops"};
    names_once();
    fifo_make("spans-reader-stops.jsonl");
    reader *r = reader_open(16384);
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    c.shutdown_timeout_ms = 500;
    c.jsonl_path = g_fifo;
    assert_int_equal(cbt_init(&c), CBT_OK);
    reader_start(r);
    double worst = pub_requests("fifo", 20000);
    verdict(&v, worst <= 200.0, "20000 requests (140000 publishes): longest publish %.3f ms",
            worst);
    if (!reader_wait_stopped(r, 10000))
        fail_msg("the reader did not get its first 16 KiB within 10 s");
    sleep_ms(100);

    bcall a = {.what = "a new thread's first cbt_publish", .fn = call_new_thread_publish,
               .arg = 2};
    bool rel = bcall_run(&a, 200 + PATIENCE_EXTRA_MS, reader_drain, r);
    within(&v, &a, 200, rel);
    if (rel)
        refill(r, "refill-a");

    bcall b = {.what = "cbt_metrics_get", .fn = call_metrics};
    rel = bcall_run(&b, 200 + PATIENCE_EXTRA_MS, reader_drain, r);
    within(&v, &b, 200, rel);
    if (rel)
        refill(r, "refill-b");

    static const uint32_t timeouts[2] = {100, 500};
    static const char *what[2] = {"cbt_flush(100)", "cbt_flush(500)"};
    for (int i = 0; i < 2; i++) {
        bcall f = {.what = what[i], .fn = call_flush, .arg = timeouts[i]};
        rel = bcall_run(&f, timeouts[i] + 200 + PATIENCE_EXTRA_MS, reader_drain, r);
        within(&v, &f, timeouts[i] + 200, rel);
        verdict(&v, f.st == CBT_ERR_TIMEOUT || rel, "%s status: %s (want: %s)", what[i],
                cbt_strerror(f.st), cbt_strerror(CBT_ERR_TIMEOUT));
        if (rel)
            refill(r, "refill-f");
    }

    bcall s = {.what = "cbt_shutdown_final (shutdown_timeout_ms 500)", .fn = call_shutdown_final};
    rel = bcall_run(&s, 1500 + PATIENCE_EXTRA_MS, reader_drain, r);
    within(&v, &s, 1500, rel);
    verdict(&v, s.st == CBT_OK, "its status: %s", cbt_strerror(s.st));
    reader_finish(r); /* everything the file got: to its end (the sink closed it) */
    uint64_t handed = s.m.spans_ended - s.m.spans_unsampled;
    verdict(&v, r->eof, "the span file was closed by the time the reader had read it all (10 s)");
    verdict(&v, r->spans + s.m.sink_spans_lost == handed,
            "every span ended is in the file or counted lost: ended %llu = %llu whole lines "
            "read + sink_spans_lost %llu (%llu other lines: fragments)",
            (unsigned long long)handed, (unsigned long long)r->spans,
            (unsigned long long)s.m.sink_spans_lost, (unsigned long long)r->other_lines);
    verdicts_end(&v);
}

/* A FIFO whose reader goes away: a write to it raises SIGPIPE, whose default
 * action kills the process — the program, for a sink's write. cbt must not
 * let that reach the program (a C program keeps SIGPIPE's default; Python
 * ignores it). In a child, with SIGPIPE at its default; the spans the sink
 * could not write are counted lost. */
static int reader_gone_child(void)
{
    signal(SIGPIPE, SIG_DFL);
    alarm(20);
    int rfd = open(g_fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (rfd < 0)
        return 100;
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    c.shutdown_timeout_ms = 500;
    c.jsonl_path = g_fifo;
    if (cbt_init(&c) != CBT_OK)
        return 101;
    (void)pub_requests("gone-a", 500); /* more than the pipe holds: the writer fills it */
    sleep_ms(300);
    close(rfd); /* the reader leaves */
    (void)pub_requests("gone-b", 500);
    sleep_ms(300);
    (void)cbt_flush(500);
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    if (cbt_shutdown_final(&m) != CBT_OK)
        return 102;
    return m.sink_spans_lost > 0 ? 0 : 103;
}

static void fifo_reader_gone(void **state)
{
    (void)state;
    names_once();
    fifo_make("spans-reader-gone.jsonl");
    uint64_t t0 = now_ns();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(reader_gone_child());
    int ws = 0;
    pid_t w;
    while ((w = waitpid(pid, &ws, WNOHANG)) == 0 && ms_since(t0) < 30000.0)
        sleep_ms(20);
    if (w == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &ws, 0);
        fail_msg("the child did not end within 30 s");
    }
    print_message("never_waits: fifo_reader_gone: child ended after %.0f ms, %s %d\n",
                  ms_since(t0), WIFSIGNALED(ws) ? "signal" : "exit",
                  WIFSIGNALED(ws) ? WTERMSIG(ws) : WEXITSTATUS(ws));
    if (WIFSIGNALED(ws))
        fail_msg("the program was killed by signal %d%s once the span file's reader went away",
                 WTERMSIG(ws),
                 WTERMSIG(ws) == SIGPIPE ? " (SIGPIPE, from the sink's write)"
                 : WTERMSIG(ws) == SIGALRM ? " (SIGALRM: it hung)" : "");
    assert_true(WIFEXITED(ws));
    if (WEXITSTATUS(ws) == 103)
        fail_msg("the spans the sink could not write were not counted (sink_spans_lost 0)");
    assert_int_equal(WEXITSTATUS(ws), 0);
}

int main(void)
{
    /* the reader this process holds may close under a writer (teardown); the
     * child of fifo_reader_gone restores the default to test it */
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        /* first: it forks, before any case left threads behind */
        cmocka_unit_test_setup_teardown(fifo_reader_gone, nw_setup, nw_teardown),
        cmocka_unit_test_setup_teardown(fifo_no_reader, nw_setup, nw_teardown),
        cmocka_unit_test_setup_teardown(new_thread_publish, nw_setup, nw_teardown),
        cmocka_unit_test_setup_teardown(arrays_store_full, nw_setup, nw_teardown),
        cmocka_unit_test_setup_teardown(metrics, nw_setup, nw_teardown),
        cmocka_unit_test_setup_teardown(flush_timeout, nw_setup, nw_teardown),
        cmocka_unit_test_setup_teardown(fifo_reader_stops, nw_setup, nw_teardown),
        cmocka_unit_test_setup_teardown(shutdown_stalled, nw_setup, nw_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (g_dir[0])
        rmdir(g_dir);
    return rc;
}
