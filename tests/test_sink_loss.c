/* tests/test_sink_loss.c — spans a sink loses are counted, not hidden: the
 * JSON-lines span file and the trace file on a device that refuses writes
 * (/dev/full) or a file that cannot grow (RLIMIT_FSIZE), through the
 * library: cbt_metrics.sink_spans_lost (the sum of cbt_sink.spans_lost) and
 * sink_errors, by cbt_metrics_get and by cbt_shutdown_final.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "testutil.h"

#include "cbt/trace_file.h"
#include "cli/jsonl_in.h"

/* One MP request: a root and two children. */
static void pub_request(const char *sid)
{
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_START, sid);
    tu_pub_i64(CBT_EV_MP_LOOKUP_PREFETCH_END, sid, "hit_tokens", 1536, "requested_tokens", 2048);
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    tu_pub(CBT_EV_MP_STORE_START, sid);
    tu_pub_i64(CBT_EV_MP_STORE_END, sid, "stored_count", 3, NULL, 0);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
}

/* n requests; a flush every 64 so that no lane overflows on 2 cores */
static void pub_requests(const char *prefix, int n)
{
    for (int i = 0; i < n; i++) {
        char sid[64];
        snprintf(sid, sizeof sid, "%s-%d", prefix, i);
        pub_request(sid);
        if ((i & 63) == 63)
            assert_int_equal(cbt_flush(10000), CBT_OK);
    }
}

static cbt_metrics metrics_now(void)
{
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m), CBT_OK);
    return m;
}

/* cbt_config.jsonl_path = /dev/full: a handful of spans, all in one buffer
 * whose write at the flush fails. Every span ended is lost, and said so. */
static void jsonl_dev_full_small(void **state)
{
    (void)state;
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    c.jsonl_path = "/dev/full";
    tu_start(&c);
    pub_requests("full", 4);
    tu_flush();
    cbt_metrics m = metrics_now();
    assert_int_equal(m.spans_ended, 12);
    assert_int_equal(m.sink_spans_lost, 12);
    assert_true(m.sink_errors >= 1);
    cbt_metrics f;
    tu_stop_final(&f);
    assert_int_equal(f.spans_ended, 12);
    assert_int_equal(f.sink_spans_lost, 12);
    assert_int_equal(f.sink_errors, m.sink_errors); /* nothing left to write at shutdown */
}

/* Enough spans for many buffer writes (64 KiB each) from on_span itself:
 * each failed write is one sink error and loses its spans; open spans
 * ended by shutdown are lost too, counted by cbt_shutdown_final. */
static void jsonl_dev_full_many(void **state)
{
    (void)state;
    tu_start(NULL);
    cbt_sink k;
    assert_int_equal(cbt_jsonl_sink_create("/dev/full", &k), CBT_OK);
    assert_non_null(k.spans_lost);
    assert_int_equal(cbt_add_sink(&k), CBT_OK);
    pub_requests("many", 1500);
    tu_pub(CBT_EV_MP_REQUEST_START, "left-open"); /* ended by shutdown */
    tu_flush();
    cbt_metrics m = metrics_now();
    assert_int_equal(m.spans_ended, 4500);
    assert_int_equal(m.sink_spans_lost, 4500);
    /* about 350 bytes a line: 1.5 MB in 64 KiB writes */
    print_message("4500 spans to /dev/full: %llu sink errors\n",
                  (unsigned long long)m.sink_errors);
    assert_true(m.sink_errors >= 10);
    cbt_metrics f;
    tu_stop_final(&f);
    assert_int_equal(f.spans_ended, 4501);
    assert_int_equal(f.sink_spans_lost, 4501);
    assert_true(f.sink_errors > m.sink_errors);
    assert_int_equal(f.spans_open, 0);
}

static long lines_in(const char *path, long *bytes)
{
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    long n = 0, b = 0;
    int ch;
    while ((ch = fgetc(fp)) != EOF) {
        b++;
        if (ch == '\n')
            n++;
    }
    fclose(fp);
    *bytes = b;
    return n;
}

/* The soft file-size limit of this process (SIGXFSZ ignored: a write past
 * it fails with EFBIG, as on a full disk). */
static void fsize_limit(rlim_t bytes, struct rlimit *old)
{
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(getrlimit(RLIMIT_FSIZE, old), 0);
    struct rlimit r = *old;
    r.rlim_cur = bytes;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &r), 0);
}

/* A file that stops growing at 100000 bytes: the spans whose lines reached
 * it whole are delivered, every other one is counted lost. */
static void jsonl_file_cut_short(void **state)
{
    (void)state;
    char path[] = "/tmp/cbt-loss-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    struct rlimit old;
    tu_start(NULL);
    cbt_sink k;
    assert_int_equal(cbt_jsonl_sink_create(path, &k), CBT_OK);
    assert_int_equal(cbt_add_sink(&k), CBT_OK);
    fsize_limit(100000, &old);
    pub_requests("cut", 300);
    cbt_metrics f;
    tu_stop_final(&f);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    long bytes, whole = lines_in(path, &bytes);
    unlink(path);
    print_message("900 spans, a 100000-byte file: %ld whole lines (%ld bytes), %llu lost, "
                  "%llu sink errors\n",
                  whole, bytes, (unsigned long long)f.sink_spans_lost,
                  (unsigned long long)f.sink_errors);
    assert_int_equal(f.spans_ended, 900);
    assert_true(bytes <= 100000 && bytes > 90000);
    assert_true(whole > 0);
    assert_int_equal(f.sink_spans_lost, 900 - (uint64_t)whole);
    assert_true(f.sink_errors >= 1);
}

/* What a span file holds, line by line: lines that parse (strict JSON) as a
 * span object, and lines that do not (a fragment of one); every line must end
 * with '\n'. */
static void span_file_lines(const char *path, long *spans, long *broken)
{
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    cbt_jl_reader r;
    assert_int_equal(cbt_jl_reader_init(&r, fp), 0);
    cbt_jl_doc *doc = malloc(sizeof *doc);
    assert_non_null(doc);
    *spans = *broken = 0;
    cbt_jl_read got;
    while ((got = cbt_jl_next(&r)) == CBT_JL_LINE) {
        char err[128];
        if (cbt_jl_parse(r.buf, r.len, doc, err, sizeof err) == 0 &&
            doc->nodes[0].type == CBT_JL_OBJECT && cbt_jl_member(doc, 0, "span_id") &&
            cbt_jl_member(doc, 0, "truncated_attributes")) {
            (*spans)++;
        } else {
            if (*broken == 0)
                print_message("line %llu does not parse: %s\n",
                              (unsigned long long)r.lineno, err);
            (*broken)++;
        }
    }
    assert_int_equal(got, CBT_JL_EOF);
    cbt_jl_reader_free(&r);
    free(doc);
    /* the last line ends with its '\n' too (a cut one would not) */
    assert_int_equal(fseek(fp, -1, SEEK_END), 0);
    assert_int_equal(fgetc(fp), '\n');
    fclose(fp);
}

/* A file that stops growing in the middle of a line, then may grow again (a
 * full disk freed, a raised limit): the fragment of the cut line is taken
 * out before the next write, so every line of the final file is a whole span,
 * and those plus the spans counted lost are every span ended. Without that, a
 * later line is glued onto the fragment: neither parses, yet the later span
 * was counted delivered. */
static void jsonl_file_cut_then_grows(void **state)
{
    (void)state;
    char path[] = "/tmp/cbt-loss-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    struct rlimit old;
    tu_start(NULL);
    cbt_sink k;
    assert_int_equal(cbt_jsonl_sink_create(path, &k), CBT_OK);
    assert_int_equal(cbt_add_sink(&k), CBT_OK);
    fsize_limit(100000, &old); /* about 350 bytes a line: the cut falls inside one */
    pub_requests("capped", 300);
    tu_flush(); /* every buffer tried under the limit */
    cbt_metrics m = metrics_now();
    assert_true(m.sink_spans_lost > 0);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    pub_requests("freed", 300);
    cbt_metrics f;
    tu_stop_final(&f);
    long spans, broken;
    span_file_lines(path, &spans, &broken);
    unlink(path);
    print_message("900 spans capped at 100000 bytes, 900 after: %ld whole lines, %ld broken, "
                  "%llu lost\n",
                  spans, broken, (unsigned long long)f.sink_spans_lost);
    assert_int_equal(f.spans_ended, 1800);
    assert_int_equal(broken, 0);
    assert_true(spans > 900); /* the 900 after the limit was lifted, and those before the cut */
    assert_int_equal(f.sink_spans_lost, m.sink_spans_lost); /* nothing lost after */
    assert_int_equal((uint64_t)spans + f.sink_spans_lost, f.spans_ended);
}

/* The trace file on a file that stops growing: a flush that succeeded keeps
 * its spans; from the first failed write on, the spans since that flush and
 * every later one are counted lost. */
static void trace_file_cut_short(void **state)
{
    (void)state;
    char path[] = "/tmp/cbt-loss-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    struct rlimit old;
    tu_start(NULL);
    cbt_sink k;
    assert_int_equal(cbt_trace_file_sink_create(path, &k), CBT_OK);
    assert_non_null(k.spans_lost);
    assert_int_equal(cbt_add_sink(&k), CBT_OK);
    fsize_limit(60000, &old);
    pub_requests("early", 10);
    tu_flush(); /* these 30 reached the file */
    cbt_metrics m = metrics_now();
    assert_int_equal(m.sink_spans_lost, 0);
    assert_int_equal(m.sink_errors, 0);
    pub_requests("late", 300);
    cbt_metrics f;
    tu_stop_final(&f);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    unlink(path);
    print_message("930 spans, a 60000-byte trace file: %llu lost, %llu sink errors\n",
                  (unsigned long long)f.sink_spans_lost, (unsigned long long)f.sink_errors);
    assert_int_equal(f.spans_ended, 930);
    assert_true(f.sink_spans_lost > 0);
    assert_true(f.sink_spans_lost <= 900); /* the flushed 30 are not */
    /* every span refused after the failure is a sink error of its own */
    assert_true(f.sink_errors >= 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(jsonl_dev_full_small, tu_teardown),
        cmocka_unit_test_teardown(jsonl_dev_full_many, tu_teardown),
        cmocka_unit_test_teardown(jsonl_file_cut_short, tu_teardown),
        cmocka_unit_test_teardown(jsonl_file_cut_then_grows, tu_teardown),
        cmocka_unit_test_teardown(trace_file_cut_short, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
