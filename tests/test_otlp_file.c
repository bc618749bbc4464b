/* tests/test_otlp_file.c — the OTLP JSON file sink (exporter/otlp_file.c,
 * cbt_otlp_json_sink_create): paths it refuses at create, its line bounds,
 * a failed write counted, and through a live tracer the sink thread's flush
 * when idle (the spans appear as whole lines without any cbt_flush). The
 * lines' content is checked by the official decoder in tests/otlp_decode.py
 * (test_otlp_encode --emit ... <file.otlp.jsonl>). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cbt/otlp.h"
#include "testutil.h"

static const char k_head[] = "{\"resourceSpans\":[{\"resource\":";
static const char k_tail[] = "]}]}]}\n";

/* The file's lines: how many, and the spans in them (each "spanId" a span);
 * -1 when a line is not a whole request (head, tail, '\n'). */
static int read_lines(const char *path, int *spans)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    static char line[1 << 20];
    int lines = 0;
    *spans = 0;
    while (fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        if (n < sizeof k_tail || strncmp(line, k_head, sizeof k_head - 1) ||
            strcmp(line + n - (sizeof k_tail - 1), k_tail)) {
            fclose(f);
            return -1;
        }
        for (const char *p = line; (p = strstr(p, "\"spanId\":")); p++)
            (*spans)++;
        lines++;
    }
    fclose(f);
    return lines;
}

static void tmp_path(char *out, size_t cap, const char *tag)
{
    snprintf(out, cap, "/tmp/cbt_test_otlp_file_%s_%d", tag, (int)getpid());
}

static void one_span(cbt_span *s, int i)
{
    memset(s, 0, sizeof *s);
    memset(s->ctx.trace_id, 0x11, 16);
    s->ctx.span_id[0] = 1;
    s->ctx.span_id[7] = (uint8_t)i;
    s->name = CBT_N_REQUEST;
    s->start_ns = 1700000000000000000ull + (uint64_t)i;
    s->end_ns = s->start_ns + 10;
    assert_int_equal(cbt_span_set_i64(s, CBT_N_HIT_TOKENS, i), CBT_OK);
}

static void refused_paths(void **state)
{
    (void)state;
    cbt_sink k;
    assert_int_equal(cbt_otlp_json_sink_create(NULL, NULL, &k), CBT_ERR_INVAL);
    assert_int_equal(cbt_otlp_json_sink_create("", NULL, &k), CBT_ERR_INVAL);
    assert_int_equal(cbt_otlp_json_sink_create("/nonexistent-dir/x.jsonl", NULL, &k),
                     CBT_ERR_IO);
    assert_int_equal(cbt_otlp_json_sink_create("/tmp", NULL, &k), CBT_ERR_IO); /* a directory */
    char fifo[128];
    tmp_path(fifo, sizeof fifo, "fifo");
    unlink(fifo);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(cbt_otlp_json_sink_create(fifo, NULL, &k), CBT_ERR_IO); /* no reader */
    unlink(fifo);
}

/* A line closes at 512 spans without a flush; the flush writes the rest. */
static void line_bound(void **state)
{
    (void)state;
    char path[128];
    tmp_path(path, sizeof path, "bound");
    cbt_sink k;
    assert_int_equal(cbt_otlp_json_sink_create(path, NULL, &k), CBT_OK);
    cbt_span s;
    int spans = 0;
    for (int i = 0; i < 600; i++) {
        one_span(&s, i);
        assert_int_equal(k.on_span(k.ctx, &s), CBT_OK);
        if (i == 510)
            assert_int_equal(read_lines(path, &spans), 0); /* nothing written yet */
    }
    assert_int_equal(read_lines(path, &spans), 1);
    assert_int_equal(spans, 512);
    assert_int_equal(k.flush(k.ctx), CBT_OK);
    assert_int_equal(read_lines(path, &spans), 2);
    assert_int_equal(spans, 600);
    assert_int_equal(k.flush(k.ctx), CBT_OK); /* nothing open: no empty line */
    assert_int_equal(read_lines(path, &spans), 2);
    assert_int_equal(k.spans_lost(k.ctx), 0);
    k.destroy(k.ctx);
    unlink(path);
}

/* /dev/full: every write fails; the line's spans are counted lost and the
 * flush is an error (a sink error for the tracer). */
static void write_error_counted(void **state)
{
    (void)state;
    if (access("/dev/full", W_OK) != 0)
        skip(); /* no /dev/full here */
    cbt_sink k;
    assert_int_equal(cbt_otlp_json_sink_create("/dev/full", NULL, &k), CBT_OK);
    cbt_span s;
    for (int i = 0; i < 3; i++) {
        one_span(&s, i);
        assert_int_equal(k.on_span(k.ctx, &s), CBT_OK);
    }
    assert_int_equal(k.flush(k.ctx), CBT_ERR_IO);
    assert_int_equal(k.spans_lost(k.ctx), 3);
    one_span(&s, 3);
    assert_int_equal(k.on_span(k.ctx, &s), CBT_OK);
    assert_int_equal(k.flush(k.ctx), CBT_ERR_IO);
    assert_int_equal(k.spans_lost(k.ctx), 4);
    k.destroy(k.ctx);
}

/* A live tracer: the sink runs on a sink thread, which flushes it when it
 * has handed over everything queued, so an MP request's spans reach the
 * file as whole lines with no cbt_flush. */
static void live_flushed_when_idle(void **state)
{
    (void)state;
    char path[128];
    tmp_path(path, sizeof path, "live");
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    tu_start(&c);
    cbt_sink k;
    assert_int_equal(cbt_otlp_json_sink_create(path, NULL, &k), CBT_OK);
    assert_int_equal(cbt_add_sink(&k), CBT_OK);
    tu_pub_mp_request("ojson-1");
    int spans = 0, lines = 0;
    for (int i = 0; i < 500 && spans < 3; i++) { /* 5 s at most */
        lines = read_lines(path, &spans);
        assert_true(lines >= 0); /* whole lines only, at any moment */
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(spans, 3);
    tu_stop();
    assert_int_equal(read_lines(path, &spans), lines);
    assert_int_equal(spans, 3);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(refused_paths),
        cmocka_unit_test(line_bound),
        cmocka_unit_test(write_error_counted),
        cmocka_unit_test_teardown(live_flushed_when_idle, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
