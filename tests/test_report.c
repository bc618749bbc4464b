/* tests/test_report.c — `cbt report`'s modules (cli/report_*.c), each pinned
 * on inputs whose answers are known:
 *   the sketch's quantiles against exactly computed nearest-rank ones, within
 *   its stated 0.39% (and exact below 256);
 *   the pull reader: the same tokens whatever its buffer size (a string, an
 *   escape, a number cut at every byte), and random garbage ends in EOF;
 *   cbt's span-file lines and OTLP JSON lines (values before keys, intValue
 *   as a string or a number, arrays skipped, a line that breaks after a good
 *   span), bad lines counted with their line numbers; cbt's own OTLP/JSON
 *   encoder's output read back;
 *   the merge of two files by end time;
 *   completeness: a planted orphan, a rootless trace, an extra root, a bad
 *   line, an incomplete span, dropped attributes, a trace split by the
 *   open-trace bound;
 *   one request's figures (latency, host-side, GPU queue, busy, tail) worked
 *   out by hand; the operation that queued most named in both outputs; the
 *   HTML page's CSP and plot ids.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "cbt/otlp.h"
#include "report_agg.h"
#include "report_jlex.h"
#include "report_out.h"
#include "report_read.h"
#include "report_sketch.h"

static uint64_t rs = 88172645463325252ULL;
static uint64_t rnd(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static uint64_t exact_q(const uint64_t *sorted, size_t n, double q)
{
    size_t rank = (size_t)ceil(q * (double)n);
    return sorted[(rank < 1 ? 1 : rank) - 1];
}

/* ---- the sketch ------------------------------------------------------------------- */

static void check_sketch(uint64_t *v, size_t n)
{
    rpt_sketch s;
    rpt_sketch_init(&s);
    for (size_t k = 0; k < n; k++)
        rpt_sketch_add(&s, v[k]);
    qsort(v, n, sizeof *v, cmp_u64);
    const double qs[] = {0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0};
    for (unsigned k = 0; k < sizeof qs / sizeof *qs; k++) {
        double est = rpt_sketch_quantile(&s, qs[k]);
        double ex = (double)exact_q(v, n, qs[k]);
        double tol = ex < 256 ? 0.0 : ex / 256.0 + 0.5;
        if (fabs(est - ex) > tol)
            fail_msg("q %.3f: sketch %.1f, exact %.1f (tolerance %.1f)", qs[k], est, ex, tol);
    }
    assert_int_equal(s.n, n);
    assert_int_equal(s.min, v[0]);
    assert_int_equal(s.max, v[n - 1]);
    rpt_sketch_free(&s);
}

static void sketch_quantiles_exact_within_error(void **state)
{
    (void)state;
    enum { N = 200000 };
    uint64_t *v = malloc(N * sizeof *v);
    assert_non_null(v);
    /* uniform over 1 ns .. 1 s */
    for (size_t k = 0; k < N; k++)
        v[k] = 1 + rnd() % 1000000000u;
    check_sketch(v, N);
    /* log-uniform over 9 decades: every power of two sees values */
    for (size_t k = 0; k < N; k++)
        v[k] = (uint64_t)exp((double)(rnd() % 1000000) / 1e6 * log(1e12));
    check_sketch(v, N);
    /* small values: exact */
    for (size_t k = 0; k < N; k++)
        v[k] = rnd() % 300;
    check_sketch(v, N);
    /* a tight cluster (a queue of about 1.6 ms) */
    for (size_t k = 0; k < N; k++)
        v[k] = 1600000 + rnd() % 1000;
    check_sketch(v, N);
    /* one value, and the largest */
    v[0] = UINT64_MAX;
    check_sketch(v, 1);
    free(v);
}

static void sketch_buckets_cover_every_value(void **state)
{
    (void)state;
    uint64_t probe[] = {0, 1, 255, 256, 257, 511, 512, 1000, 1u << 20, 123456789,
                        (uint64_t)1 << 62, UINT64_MAX - 1, UINT64_MAX};
    for (unsigned k = 0; k < sizeof probe / sizeof *probe; k++) {
        uint32_t i = rpt_sketch_index(probe[k]);
        assert_true(i < RPT_SK_BUCKETS);
        uint64_t lo, hi;
        rpt_sketch_bucket_range(i, &lo, &hi);
        assert_true(lo <= probe[k] && probe[k] <= hi);
        if (lo >= 256)
            assert_true((double)(hi - lo + 1) <= (double)lo / 128.0 + 1);
    }
}

/* ---- the reader --------------------------------------------------------------------- */

static FILE *file_of(const char *text)
{
    FILE *f = tmpfile();
    assert_non_null(f);
    fputs(text, f);
    rewind(f);
    return f;
}

/* every token of a file as text, one per line */
static void tokens(const char *text, size_t bufsize, char *out, size_t cap)
{
    FILE *f = file_of(text);
    rpt_lex lx;
    assert_int_equal(rpt_lex_init_buf(&lx, f, bufsize), 0);
    size_t n = 0;
    out[0] = 0;
    for (int guard = 0; guard < 10000; guard++) {
        rpt_tok t = rpt_lex_next(&lx);
        char one[256];
        if (t == RPT_TK_STR)
            snprintf(one, sizeof one, "S%zu:%.200s@%llu\n", lx.str_len, lx.str,
                     (unsigned long long)lx.tok_line);
        else if (t == RPT_TK_INT)
            snprintf(one, sizeof one, "I%lld%s\n", (long long)lx.i, lx.big ? "big" : "");
        else if (t == RPT_TK_FLOAT)
            snprintf(one, sizeof one, "F%.17g\n", lx.d);
        else if (t == RPT_TK_ERR)
            snprintf(one, sizeof one, "E%s@%llu\n", lx.err, (unsigned long long)lx.tok_line);
        else
            snprintf(one, sizeof one, "T%d\n", (int)t);
        size_t l = strlen(one);
        assert_true(n + l < cap);
        memcpy(out + n, one, l + 1);
        n += l;
        if (t == RPT_TK_EOF)
            break;
        if (t == RPT_TK_ERR)
            rpt_lex_skip_line(&lx);
    }
    rpt_lex_free(&lx);
    fclose(f);
}

static void lexer_same_tokens_at_every_buffer_size(void **state)
{
    (void)state;
    const char *text =
        "{\"a\\\"b\\\\c\": [1, -2, 3.25e-3, 0, 18446744073709551616, true, false, null],\r\n"
        " \"s\": \"caf\\u00e9 \\ud83d\\ude00 \\ud800x tab\\tq\", \"long\": \"0123456789abcdef\"}\n"
        "\n"
        "[\"bad escape \\q here\", 1]\n"
        "{\"raw\": \"new\n"
        "line\"}\n"
        "-07\n"
        "trux\n"
        "{\"last\": 1e400}";
    static char ref[16384], got[16384];
    tokens(text, 1 << 16, ref, sizeof ref);
    assert_non_null(strstr(ref, "S5:a\"b\\c@1"));
    assert_non_null(strstr(ref, "I0big")); /* 2^64: outside int64 */
    assert_non_null(strstr(ref, "F0.00324999"));
    assert_non_null(strstr(ref, "S21:caf\xc3\xa9 \xf0\x9f\x98\x80 \xef\xbf\xbdx tab\tq@2"));
    assert_non_null(strstr(ref, "Ean unknown escape '\\q' in a string@4"));
    assert_non_null(strstr(ref, "Ethe line ends inside a string@5"));
    assert_non_null(strstr(ref, "Ea number with a leading zero@7"));
    assert_non_null(strstr(ref, "Enot a JSON value (expected 'true')@8"));
    for (size_t b = 1; b <= 17; b++) {
        tokens(text, b, got, sizeof got);
        if (strcmp(ref, got))
            fail_msg("buffer of %zu bytes:\n%s\nversus\n%s", b, got, ref);
    }
}

static void lexer_garbage_ends(void **state)
{
    (void)state;
    static char buf[1 << 16];
    const char alphabet[] = "{}[]:,\"\\ux0123456789.eE+-tfnrl \t\n\x01\xff";
    for (int round = 0; round < 200; round++) {
        size_t n = rnd() % (sizeof buf - 1);
        for (size_t k = 0; k < n; k++)
            buf[k] = alphabet[rnd() % (sizeof alphabet - 1)];
        buf[n] = 0;
        FILE *f = tmpfile();
        fwrite(buf, 1, n, f);
        rewind(f);
        rpt_source src;
        assert_int_equal(rpt_source_open(&src, f, round % 2 ? RPT_FMT_OTLP : RPT_FMT_SPANS, 0,
                                         NULL, NULL), 0);
        rpt_span sp;
        int r, guard = 0;
        while ((r = rpt_source_next(&src, &sp)) == 1 && guard++ < 100000)
            ;
        assert_int_equal(r, 0);
        rpt_source_close(&src);
        fclose(f);
    }
}

/* ---- formats ------------------------------------------------------------------------- */

typedef struct bad_log {
    unsigned n;
    uint64_t line[16];
    char why[16][128];
} bad_log;

static void log_bad(void *ctx, unsigned file, uint64_t line, const char *why)
{
    bad_log *b = ctx;
    (void)file;
    if (b->n < 16) {
        b->line[b->n] = line;
        snprintf(b->why[b->n], sizeof b->why[0], "%s", why);
    }
    b->n++;
}

static int read_all(const char *text, rpt_format fmt, rpt_span *out, int cap, bad_log *bl)
{
    FILE *f = file_of(text);
    rpt_source src;
    assert_int_equal(rpt_source_open(&src, f, fmt, 3, log_bad, bl), 0);
    int n = 0;
    while (n < cap && rpt_source_next(&src, &out[n]) == 1)
        n++;
    rpt_source_close(&src);
    fclose(f);
    return n;
}

#define TID "8689ab198889bd09a80aad57ba55bcd2"
static const char span_lines[] =
    "{\"trace_id\":\"" TID "\",\"span_id\":\"69d23c704ef80815\",\"parent_span_id\":"
    "\"50dc5b51ff2cfb2d\",\"name\":\"cb.scatter\",\"kind\":\"internal\",\"start_ns\":1000,"
    "\"end_ns\":3000,\"status\":\"error\",\"incomplete\":true,\"attributes\":{\"session_id\":"
    "\"req-1\",\"cbt.queue_ns\":250,\"cbt.enqueue_ns\":750,\"cbt.evicted\":\"idle\",\"cbt.stream\":3,"
    "\"cbt.device\":\"cuda:1\",\"keys\":"
    "[1,2],\"nested\":{\"x\":1}},\"dropped_attributes\":2,\"events\":[{\"name\":\"e\","
    "\"time_unix_nano\":1,\"attributes\":{},\"dropped_attributes\":0}],\"dropped_events\":1,"
    "\"truncated_attributes\":0}\n"
    "{\"trace_id\":\"" TID "\",\"span_id\":\"50dc5b51ff2cfb2d\",\"parent_span_id\":\"\","
    "\"name\":\"request\",\"start_ns\":500,\"end_ns\":4000,\"attributes\":{\"hit_rate\":0.75,"
    "\"cbt.gpu_tail_ns\":12,\"cbt.gpu_queue_ns\":250,\"cbt.gpu_busy_ns\":2000,"
    "\"request_id\":\"r9\"}}\n"
    "{\"trace_id\":\"" TID "\",\"span_id\":\"50dc5b51ff2cfb2d\",\"name\":\"x\",\"start_ns\":5}\n"
    "not json\n"
    "{\"trace_id\":\"zz\",\"span_id\":\"50dc5b51ff2cfb2d\",\"name\":\"x\",\"start_ns\":5,"
    "\"end_ns\":6}\n"
    "{\"trace_id\":\"" TID "\",\"span_id\":\"50dc5b51ff2cfb2d\",\"name\":\"x\",\"start_ns\":9,"
    "\"end_ns\":6}\n"
    "{\"trace_id\":\"" TID "\",\"span_id\":\"50dc5b51ff2cfb2d\",\"name\":\"x\",\"start_ns\":5,"
    "\"end_ns\":6} {}\n";

static void span_file_lines(void **state)
{
    (void)state;
    rpt_span s[8];
    bad_log bl = {0};
    int n = read_all(span_lines, RPT_FMT_SPANS, s, 8, &bl);
    assert_int_equal(n, 2);
    assert_string_equal(s[0].name, "cb.scatter");
    assert_int_equal(s[0].start_ns, 1000);
    assert_int_equal(s[0].end_ns, 3000);
    assert_true(s[0].has_parent && s[0].incomplete && s[0].error);
    assert_int_equal(s[0].queue_ns, 250);
    assert_int_equal(s[0].enqueue_ns, 750);
    assert_int_equal(s[0].gpu_tail_ns, RPT_ABSENT);
    assert_string_equal(s[0].evicted, "idle");
    assert_int_equal(s[0].stream, 3);
    assert_string_equal(s[0].device, "cuda:1");
    assert_int_equal(s[1].stream, RPT_ABSENT);
    assert_string_equal(s[0].session, "req-1");
    assert_int_equal(s[0].dropped_attrs, 2);
    assert_int_equal(s[0].dropped_events, 1);
    assert_int_equal(s[0].file, 3);
    assert_int_equal(s[0].line, 1);
    assert_int_equal(s[0].trace_id[0], 0x86);
    assert_int_equal(s[0].parent_id[7], 0x2d);
    assert_false(s[1].has_parent);
    assert_true(fabs(s[1].hit_rate - 0.75) < 1e-12);
    assert_int_equal(s[1].gpu_tail_ns, 12);
    assert_int_equal(s[1].gpu_queue_ns, 250);
    assert_int_equal(s[1].gpu_busy_ns, 2000);
    assert_int_equal(s[1].queue_ns, RPT_ABSENT);
    assert_string_equal(s[1].session, "r9");
    assert_int_equal(s[1].line, 2);
    /* the five bad lines, by number, each with its reason */
    assert_int_equal(bl.n, 5);
    uint64_t want[] = {3, 4, 5, 6, 7};
    for (int k = 0; k < 5; k++)
        assert_int_equal(bl.line[k], want[k]);
    assert_non_null(strstr(bl.why[0], "no end_ns"));
    assert_non_null(strstr(bl.why[2], "trace_id: not 32 hex digits"));
    assert_non_null(strstr(bl.why[3], "ends before it starts"));
    assert_non_null(strstr(bl.why[4], "more after the line's value"));
}

static const char otlp_lines[] =
    "{\"resourceSpans\":[{\"resource\":{\"attributes\":[{\"key\":\"service.name\",\"value\":"
    "{\"stringValue\":\"blend-0\"}}],\"droppedAttributesCount\":0},\"scopeSpans\":[{\"scope\":"
    "{\"name\":\"cbt\"},\"spans\":["
    "{\"traceId\":\"" TID "\",\"spanId\":\"69d23c704ef80815\",\"parentSpanId\":"
    "\"50dc5b51ff2cfb2d\",\"name\":\"cb.scatter\",\"kind\":1,\"startTimeUnixNano\":\"1000\","
    "\"endTimeUnixNano\":3000,\"attributes\":[{\"value\":{\"intValue\":\"250\"},\"key\":"
    "\"cbt.queue_ns\"},{\"key\":\"cbt.enqueue_ns\",\"value\":{\"intValue\":750}},{\"key\":"
    "\"list\",\"value\":{\"arrayValue\":{\"values\":[{\"intValue\":\"1\"}]}}},{\"key\":\"kv\","
    "\"value\":{\"kvlistValue\":{\"values\":[]}}},{\"key\":\"cbt.incomplete\",\"value\":"
    "{\"boolValue\":true}}],\"droppedAttributesCount\":4,\"events\":[],\"status\":{\"code\":2}},"
    "{\"traceId\":\"" TID "\",\"spanId\":\"50dc5b51ff2cfb2d\",\"parentSpanId\":\"\",\"name\":"
    "\"request\",\"startTimeUnixNano\":\"500\",\"endTimeUnixNano\":\"4000\",\"attributes\":"
    "[{\"key\":\"hit_rate\",\"value\":{\"doubleValue\":0.5}},{\"key\":\"session_id\",\"value\":"
    "{\"stringValue\":\"req-2\"}}],\"status\":{\"code\":\"STATUS_CODE_ERROR\"}}"
    "]}]},{\"resource\":{},\"instrumentationLibrarySpans\":[{\"spans\":[{\"traceId\":\"" TID
    "\",\"spanId\":\"0000000000000001\",\"parentSpanId\":\"0000000000000000\",\"name\":\"old\","
    "\"startTimeUnixNano\":\"1\",\"endTimeUnixNano\":\"2\"}]}]}]}\n"
    "\n"
    "{\"resourceSpans\":[{\"scopeSpans\":[{\"spans\":[{\"traceId\":\"" TID "\",\"spanId\":"
    "\"0000000000000002\",\"name\":\"good\",\"startTimeUnixNano\":\"1\",\"endTimeUnixNano\":"
    "\"2\"},{\"traceId\":\"" TID "\",\"spanId\":\"0000000000000003\",\"name\":\"broken\","
    "\"startTimeUnixNano\":\"x1\"}]}]}]}\n"
    "{\"resourceSpans\":[]}\n"
    "{\"resourceSpans\":[{\"scopeSpans\":[{\"spans\":[{\"traceId\":\"" TID "\",\"spanId\":"
    "\"0000000000000004\",\"name\":\"after\",\"startTimeUnixNano\":\"7\",\"endTimeUnixNano\":"
    "\"8\"}]}]}]}\n";

static void otlp_json_lines(void **state)
{
    (void)state;
    rpt_span s[8];
    bad_log bl = {0};
    FILE *f = file_of(otlp_lines);
    assert_int_equal(rpt_detect(f), RPT_FMT_OTLP);
    fclose(f);
    int n = read_all(otlp_lines, RPT_FMT_OTLP, s, 8, &bl);
    assert_int_equal(n, 5);
    assert_string_equal(s[0].name, "cb.scatter");
    assert_int_equal(s[0].start_ns, 1000);
    assert_int_equal(s[0].end_ns, 3000);
    assert_int_equal(s[0].queue_ns, 250);
    assert_int_equal(s[0].enqueue_ns, 750);
    assert_true(s[0].incomplete && s[0].error && s[0].has_parent);
    assert_int_equal(s[0].dropped_attrs, 4);
    assert_string_equal(s[1].name, "request");
    assert_false(s[1].has_parent);
    assert_true(s[1].error);
    assert_true(fabs(s[1].hit_rate - 0.5) < 1e-12);
    assert_string_equal(s[1].session, "req-2");
    assert_string_equal(s[2].name, "old");
    assert_false(s[2].has_parent); /* an all-zero parent is none */
    assert_string_equal(s[3].name, "good"); /* before the error on its line: kept */
    assert_int_equal(s[3].line, 3);
    assert_string_equal(s[4].name, "after");
    assert_int_equal(s[4].line, 5);
    assert_int_equal(bl.n, 1);
    assert_int_equal(bl.line[0], 3);
    assert_non_null(strstr(bl.why[0], "startTimeUnixNano"));
}

/* valid lines of both formats with bytes changed, cut, repeated: every
 * input ends (a sanitizer build checks the memory on the way) */
static void readers_on_mutated_lines(void **state)
{
    (void)state;
    static char buf[1 << 15];
    const char *seed[2] = {span_lines, otlp_lines};
    const char ins[] = "{}[]\":,\\\n0-e.u";
    for (int round = 0; round < 400; round++) {
        const char *sd = seed[round % 2];
        size_t n = strlen(sd);
        memcpy(buf, sd, n);
        for (int m = 0, k = (int)(rnd() % 20) + 1; m < k && n > 2; m++) {
            size_t p = rnd() % n;
            switch (rnd() % 3) {
            case 0: buf[p] = (char)(rnd() & 0xff); break;
            case 1: buf[p] = ins[rnd() % (sizeof ins - 1)]; break;
            default: memmove(buf + p, buf + p + 1, n - p - 1); n--; break;
            }
        }
        FILE *f = tmpfile();
        fwrite(buf, 1, n, f);
        rewind(f);
        rpt_source src;
        assert_int_equal(rpt_source_open(&src, f, round % 2 ? RPT_FMT_OTLP : RPT_FMT_SPANS, 0,
                                         NULL, NULL), 0);
        rpt_span sp;
        int r, guard = 0;
        while ((r = rpt_source_next(&src, &sp)) == 1 && guard++ < 1000)
            assert_true(sp.end_ns >= sp.start_ns);
        assert_int_equal(r, 0);
        rpt_source_close(&src);
        fclose(f);
    }
}

static void detect_formats(void **state)
{
    (void)state;
    struct {
        const char *text;
        rpt_format fmt;
    } c[] = {{"", RPT_FMT_EMPTY},
             {" \n\n", RPT_FMT_EMPTY},
             {"{\"trace_id\":\"x\"}\n", RPT_FMT_SPANS},
             {"\n {\"resourceSpans\":[]}\n", RPT_FMT_OTLP},
             {"hello world, this is text\n", RPT_FMT_UNKNOWN},
             /* a garbage first line (a bad line, counted when read) or a BOM */
             {"garbage line\n{\"resourceSpans\":[]}\n", RPT_FMT_OTLP},
             {"\xEF\xBB\xBF{\"trace_id\":\"x\"}\n", RPT_FMT_SPANS}};
    for (unsigned k = 0; k < sizeof c / sizeof *c; k++) {
        FILE *f = file_of(c[k].text);
        assert_int_equal(rpt_detect(f), c[k].fmt);
        fclose(f);
    }
    /* read on from there: the BOM is skipped (the span on line 1 is read),
     * the garbage line is one bad line and the span after it is read */
    static const char with_bom[] =
        "\xEF\xBB\xBF{\"trace_id\":\"" TID "\",\"span_id\":\"50dc5b51ff2cfb2d\",\"name\":\"x\","
        "\"start_ns\":5,\"end_ns\":6}\n";
    static const char garbage_first[] =
        "garbage line\n{\"trace_id\":\"" TID "\",\"span_id\":\"50dc5b51ff2cfb2d\",\"name\":"
        "\"x\",\"start_ns\":5,\"end_ns\":6}\n";
    const char *texts[] = {with_bom, garbage_first};
    for (unsigned k = 0; k < 2; k++) {
        FILE *f = file_of(texts[k]);
        assert_int_equal(rpt_detect(f), RPT_FMT_SPANS);
        rpt_source src;
        bad_log bl = {0};
        assert_int_equal(rpt_source_open(&src, f, RPT_FMT_SPANS, 0, log_bad, &bl), 0);
        rpt_span sp;
        assert_int_equal(rpt_source_next(&src, &sp), 1);
        assert_int_equal(sp.line, k + 1);
        assert_int_equal(rpt_source_next(&src, &sp), 0);
        assert_int_equal(src.bad_lines, k);
        rpt_source_close(&src);
        fclose(f);
    }
}

/* cbt's own OTLP/JSON (what its http/json exporter sends, the body a collector's
 * file exporter writes again) read back */
static void otlp_from_cbt_encoder(void **state)
{
    (void)state;
#if defined(CBT_WITH_OTLP)
    tu_start(NULL);
    tu_pub_mp_requests("enc", 3);
    tu_stop();
    uint32_t n = tu_span_count();
    assert_true(n >= 9);
    cbt_span *spans = calloc(n, sizeof *spans);
    for (uint32_t k = 0; k < n; k++)
        spans[k] = *tu_span(k);
    cbt_otlp_resource r;
    cbt_otlp_resource_default(&r);
    cbt_buf b = {0};
    assert_int_equal(cbt_otlp_encode_json(&r, spans, n, &b), CBT_OK);
    char *text = malloc(b.len + 2);
    memcpy(text, b.data, b.len);
    text[b.len] = '\n';
    text[b.len + 1] = 0;
    rpt_span *got = calloc(n + 1, sizeof *got);
    bad_log bl = {0};
    int m = read_all(text, RPT_FMT_OTLP, got, (int)n + 1, &bl);
    assert_int_equal(bl.n, 0);
    assert_int_equal(m, (int)n);
    for (uint32_t k = 0; k < n; k++) {
        assert_memory_equal(got[k].trace_id, spans[k].ctx.trace_id, 16);
        assert_memory_equal(got[k].span_id, spans[k].ctx.span_id, 8);
        assert_int_equal(got[k].start_ns, spans[k].start_ns);
        assert_int_equal(got[k].end_ns, spans[k].end_ns);
        assert_string_equal(got[k].name, cbt_name_str(spans[k].name));
        assert_int_equal(got[k].has_parent, !tu_is_root(&spans[k]));
        if (tu_has_attr(&spans[k], "hit_rate"))
            assert_true(fabs(got[k].hit_rate - tu_attr_f64(&spans[k], "hit_rate")) < 1e-12);
        if (tu_has_attr(&spans[k], "cbt.gpu_tail_ns"))
            assert_int_equal(got[k].gpu_tail_ns, tu_attr_i64(&spans[k], "cbt.gpu_tail_ns"));
    }
    free(text);
    free(got);
    free(spans);
    cbt_buf_free(&b);
#else
    skip();
#endif
}

static void merge_by_end_time(void **state)
{
    (void)state;
    char a[4096] = "", b[4096] = "";
    const char *fmt = "{\"trace_id\":\"%032x\",\"span_id\":\"%016x\",\"name\":\"s\","
                      "\"start_ns\":1,\"end_ns\":%u}\n";
    unsigned ends_a[] = {10, 20, 30, 45, 70}, ends_b[] = {5, 25, 26, 60, 90, 91};
    for (unsigned k = 0; k < 5; k++)
        snprintf(a + strlen(a), sizeof a - strlen(a), fmt, k + 1, k + 1, ends_a[k]);
    for (unsigned k = 0; k < 6; k++)
        snprintf(b + strlen(b), sizeof b - strlen(b), fmt, k + 100, k + 100, ends_b[k]);
    FILE *fa = file_of(a), *fb = file_of(b);
    rpt_source sa, sb;
    assert_int_equal(rpt_source_open(&sa, fa, RPT_FMT_SPANS, 0, NULL, NULL), 0);
    assert_int_equal(rpt_source_open(&sb, fb, RPT_FMT_SPANS, 1, NULL, NULL), 0);
    rpt_source *src[2] = {&sa, &sb};
    rpt_merge *m = malloc(sizeof *m);
    rpt_merge_init(m, src, 2);
    rpt_span s;
    uint64_t last = 0;
    unsigned n = 0, from[2] = {0};
    while (rpt_merge_next(m, &s) == 1) {
        assert_true(s.end_ns >= last);
        last = s.end_ns;
        from[s.file]++;
        n++;
    }
    assert_int_equal(n, 11);
    assert_int_equal(from[0], 5);
    assert_int_equal(from[1], 6);
    free(m);
    rpt_source_close(&sa);
    rpt_source_close(&sb);
    fclose(fa);
    fclose(fb);
}

/* ---- the aggregation ------------------------------------------------------------------ */

static rpt_span mk(unsigned trace, unsigned id, unsigned parent, const char *name,
                   uint64_t start, uint64_t end)
{
    rpt_span s;
    rpt_span_reset(&s, 0, id);
    s.trace_id[0] = (uint8_t)trace;
    s.trace_id[15] = 1;
    s.span_id[0] = (uint8_t)id;
    s.span_id[7] = 1;
    if (parent) {
        s.has_parent = true;
        s.parent_id[0] = (uint8_t)parent;
        s.parent_id[7] = 1;
    }
    snprintf(s.name, sizeof s.name, "%s", name);
    s.start_ns = start;
    s.end_ns = end;
    return s;
}

static void completeness_counts(void **state)
{
    (void)state;
    rpt_agg *a = rpt_agg_new(NULL);
    rpt_agg_file(a, 0, "planted.jsonl", RPT_FMT_SPANS);
    /* trace 1: a whole request */
    rpt_span s = mk(1, 1, 0, "request", 0, 100);
    rpt_agg_add(a, &s);
    s = mk(1, 2, 1, "mp.store", 10, 50);
    rpt_agg_add(a, &s);
    rpt_agg_add(a, &s); /* the same span twice: a duplicate, skipped */
    /* trace 2: a root, a child, an orphan (its parent 9 never comes) */
    s = mk(2, 1, 0, "request", 0, 100);
    rpt_agg_add(a, &s);
    s = mk(2, 2, 9, "mp.store", 10, 50);
    rpt_agg_add(a, &s);
    /* trace 3: children only: an incomplete root (3 spans) */
    s = mk(3, 2, 1, "mp.store", 10, 50);
    rpt_agg_add(a, &s);
    s = mk(3, 3, 2, "cb.gather", 10, 40);
    rpt_agg_add(a, &s);
    s = mk(3, 4, 1, "mp.retrieve", 5, 60);
    rpt_agg_add(a, &s);
    /* trace 4: two roots, the later-starting one an extra root; an incomplete,
     * evicted child with dropped attributes */
    s = mk(4, 1, 0, "cb.lookup", 20, 30);
    rpt_agg_add(a, &s);
    s = mk(4, 2, 0, "cb.request", 10, 90);
    rpt_agg_add(a, &s);
    s = mk(4, 3, 2, "cb.retrieve", 40, 50);
    s.incomplete = true;
    snprintf(s.evicted, sizeof s.evicted, "idle");
    s.dropped_attrs = 3;
    rpt_agg_add(a, &s);
    rpt_agg_bad_line(a, 0, 17, "not JSON");
    const rpt_summary *S = rpt_agg_finish(a);
    assert_false(S->whole);
    assert_int_equal(S->spans, 10); /* the duplicate is not counted as a span */
    assert_int_equal(S->duplicate_spans, 1);
    assert_int_equal(S->names[0].count, 3); /* mp.store: traces 1, 2 and 3, not the copy */
    assert_string_equal(S->names[0].name, "mp.store");
    assert_int_equal(S->requests, 3);
    assert_int_equal(S->bad_lines, 1);
    assert_int_equal(S->bad[0].line, 17);
    assert_int_equal(S->incomplete_roots, 1);
    assert_int_equal(S->incomplete_root_spans, 3);
    assert_int_equal(S->orphans, 1);
    assert_int_equal(S->extra_roots, 1);
    assert_int_equal(S->spans_incomplete, 1);
    assert_string_equal(S->evict_reason[0], "idle");
    assert_int_equal(S->spans_dropped_attrs, 1);
    assert_int_equal(S->dropped_attrs, 3);
    assert_int_equal(S->split_traces, 0);
    /* the request of trace 4 is cb.request (the earliest start) */
    assert_int_equal(S->root_dur.n, 3);
    assert_int_equal((uint64_t)S->root_dur.max, 100);
    assert_true(fabs(S->latency.p50 - 100) < 1e-9 && fabs(S->root_dur.p50 - 100) < 1e-9);
    /* the text says all of it */
    char *txt = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&txt, &len);
    rpt_text_write(f, S, 40);
    fclose(f);
    assert_non_null(strstr(txt, "NOT WHOLE: 1 bad line, 1 incomplete root, 1 orphan"));
    assert_non_null(strstr(txt, "planted.jsonl:17: not JSON"));
    assert_non_null(strstr(txt, "incomplete roots: 1 traces (3 spans)"));
    assert_non_null(strstr(txt, "orphans: 1 spans"));
    assert_non_null(strstr(txt, "spans ended incomplete: 1 (idle 1)"));
    free(txt);
    rpt_agg_free(a);

    /* nothing planted: whole */
    a = rpt_agg_new(NULL);
    s = mk(1, 1, 0, "request", 0, 100);
    rpt_agg_add(a, &s);
    S = rpt_agg_finish(a);
    assert_true(S->whole);
    rpt_agg_free(a);
}

static void split_by_the_open_bound(void **state)
{
    (void)state;
    rpt_opts o = rpt_opts_default();
    o.max_open = 2;
    rpt_agg *a = rpt_agg_new(&o);
    rpt_span s = mk(1, 1, 0, "request", 0, 100);
    rpt_agg_add(a, &s);
    s = mk(2, 1, 0, "request", 0, 100);
    rpt_agg_add(a, &s);
    s = mk(3, 1, 0, "request", 0, 100); /* closes trace 1 */
    rpt_agg_add(a, &s);
    s = mk(1, 2, 1, "late", 10, 20); /* trace 1 again: split */
    rpt_agg_add(a, &s);
    const rpt_summary *S = rpt_agg_finish(a);
    assert_int_equal(S->requests, 3);
    assert_int_equal(S->split_traces, 1);
    assert_int_equal(S->split_spans, 1);
    assert_int_equal(S->incomplete_roots, 0);
    assert_true(S->evicted_open >= 1);
    assert_false(S->whole);
    rpt_agg_free(a);
}

/* root [0, 100]; host child [1, 5]; X enqueued 10, runs [20, 50] (queue 10);
 * Y enqueued 15, runs [60, 90] (queue 45); a tail span Z enqueued 95 runs
 * [100, 120] (queue 5). Latency 120 (the last end). Covered by GPU work
 * (enqueue to end): [10, 90] + [95, 120] = 105, so host-side 15. Busy: [20,
 * 50] + [60, 90] + [100, 120] = 80. Queue sum 60. */
static void one_request_figures(void **state)
{
    (void)state;
    rpt_agg *a = rpt_agg_new(NULL);
    rpt_span s = mk(1, 2, 1, "lookup", 1, 5);
    rpt_agg_add(a, &s);
    s = mk(1, 3, 1, "X", 20, 50);
    s.queue_ns = 10;
    s.stream = 1;
    snprintf(s.device, sizeof s.device, "cpu");
    rpt_agg_add(a, &s);
    s = mk(1, 4, 1, "Y", 60, 90);
    s.queue_ns = 45;
    s.stream = 2;
    snprintf(s.device, sizeof s.device, "cuda:0");
    rpt_agg_add(a, &s);
    s = mk(1, 5, 1, "Z", 100, 120);
    s.queue_ns = 5;
    s.enqueue_ns = 95;
    s.stream = 2;
    snprintf(s.device, sizeof s.device, "cuda:0");
    rpt_agg_add(a, &s);
    s = mk(1, 1, 0, "request", 0, 100);
    s.gpu_tail_ns = 20;
    s.hit_rate = 0.6;
    snprintf(s.session, sizeof s.session, "req-7");
    rpt_agg_add(a, &s);
    const rpt_summary *S = rpt_agg_finish(a);
    assert_true(S->whole);
    assert_int_equal(S->requests, 1);
    assert_true(S->any_stream_timed);
    assert_int_equal((uint64_t)S->latency.p50, 120);
    assert_int_equal((uint64_t)S->root_dur.p50, 100);
    assert_int_equal((uint64_t)S->host.p50, 15);
    assert_int_equal((uint64_t)S->gpu_queue.p50, 60);
    assert_int_equal((uint64_t)S->gpu_busy.p50, 80);
    assert_int_equal((uint64_t)S->gpu_tail.p50, 20);
    assert_int_equal(S->hit[4].n, 1); /* (0.5, 0.75] */
    /* the breakdown: host 15 + waiting 25 + busy 80 = 120 */
    unsigned lb = 7; /* 120 < 2^7 */
    assert_int_equal(S->lat_n[lb], 1);
    assert_true(fabs(S->lat_host[lb] - 15) < 1e-9);
    assert_true(fabs(S->lat_wait[lb] - 25) < 1e-9);
    assert_true(fabs(S->lat_busy[lb] - 80) < 1e-9);
    /* per stream: cuda:0 stream 2 waited 50, cpu stream 1 10 */
    assert_int_equal(S->n_streams, 2);
    assert_string_equal(S->streams[0].label, "cuda:0 stream 2");
    assert_int_equal(S->streams[0].count, 2);
    assert_true(fabs(S->streams[0].queue.sum - 50) < 1e-9);
    assert_true(fabs(S->streams[0].run - 50) < 1e-9);
    assert_string_equal(S->streams[1].label, "cpu stream 1");
    /* Y queued most */
    assert_true(S->slowest_queue >= 0);
    assert_string_equal(S->names[S->slowest_queue].name, "Y");
    /* the waterfall: the root first, queue kept */
    assert_int_equal(S->n_slow, 1);
    assert_string_equal(S->slow[0].session, "req-7");
    assert_int_equal(S->slow[0].n, 5);
    assert_string_equal(S->slow[0].spans[0].name, "request");
    assert_int_equal(S->slow[0].spans[0].depth, 0);
    assert_int_equal(S->slow[0].spans[1].depth, 1);
    for (unsigned k = 0; k < S->slow[0].n; k++)
        if (!strcmp(S->slow[0].spans[k].name, "Y"))
            assert_int_equal(S->slow[0].spans[k].enqueue, 15);
    /* both outputs name Y */
    char *txt = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&txt, &len);
    rpt_text_write(f, S, 40);
    fclose(f);
    assert_non_null(strstr(txt, "MOST QUEUEING: Y waited 45 ns"));
    assert_non_null(strstr(txt, "SLOWEST STREAM: cuda:0 stream 2: 2 spans waited 50 ns"));
    free(txt);
    f = open_memstream(&txt, &len);
    assert_int_equal(rpt_html_write(f, S), 0);
    fclose(f);
    assert_non_null(strstr(txt, "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src "
                                "'none'; style-src 'unsafe-inline'; img-src data:\">"));
    assert_non_null(strstr(txt, "id=\"slowest-queue\" class=\"cbt-slowest\" data-op=\"Y\""));
    assert_non_null(strstr(txt, "<b class=\"cbt-op-name\">Y</b>"));
    assert_non_null(strstr(txt, "id=\"slowest-stream\" class=\"cbt-slowest\" "
                                "data-stream=\"cuda:0 stream 2\""));
    const char *ids[] = {"plot-latency", "plot-bands", "plot-breakdown", "plot-queue",
                         "plot-hitrate", "plot-timeline", "plot-waterfall-1", "plot-streams"};
    for (unsigned k = 0; k < sizeof ids / sizeof *ids; k++) {
        char want[64];
        snprintf(want, sizeof want, "id=\"%s\"", ids[k]);
        if (!strstr(txt, want))
            fail_msg("no %s in the page", want);
    }
    assert_null(strstr(txt, "<script"));
    assert_null(strstr(txt, "http://") == NULL ? NULL : strstr(txt, "src=\"http"));
    free(txt);
    rpt_agg_free(a);
}

/* a stream-timed wrapper W (enqueued 10, runs [12, 150]) around two kernels:
 * K1 enqueued 13 runs [20, 40], K2 enqueued 14 runs [100, 140] (it waited 86
 * behind something). The partition uses the kernels: covered [13, 140] = 127,
 * running 20 + 40 = 60, waiting 67, host-side 200 - 127 = 73. GPU busy (no
 * cbt.gpu_busy_ns on the root) is the union of all three: [12, 150] = 138;
 * GPU queue (no cbt.gpu_queue_ns) the outermost's, as cbt sums it: W's 2. */
static void wrapper_does_not_hide_the_wait(void **state)
{
    (void)state;
    rpt_agg *a = rpt_agg_new(NULL);
    rpt_span s = mk(1, 2, 1, "W", 12, 150);
    s.queue_ns = 2;
    rpt_agg_add(a, &s);
    s = mk(1, 3, 2, "K1", 20, 40);
    s.queue_ns = 7;
    rpt_agg_add(a, &s);
    s = mk(1, 4, 2, "K2", 100, 140);
    s.queue_ns = 86;
    rpt_agg_add(a, &s);
    s = mk(1, 1, 0, "request", 0, 200);
    rpt_agg_add(a, &s);
    const rpt_summary *S = rpt_agg_finish(a);
    assert_int_equal((uint64_t)S->latency.p50, 200);
    assert_int_equal((uint64_t)S->host.p50, 73);
    assert_int_equal((uint64_t)S->gpu_busy.p50, 138);
    assert_int_equal((uint64_t)S->gpu_queue.p50, 2);
    unsigned lb = 8; /* 200 < 2^8 */
    assert_true(fabs(S->lat_host[lb] - 73) < 1e-9);
    assert_true(fabs(S->lat_wait[lb] - 67) < 1e-9);
    assert_true(fabs(S->lat_busy[lb] - 60) < 1e-9);
    assert_string_equal(S->names[S->slowest_queue].name, "K2");
    rpt_agg_free(a);
}

static void name_percentiles_within_error(void **state)
{
    (void)state;
    enum { N = 50000 };
    uint64_t *d = malloc(N * sizeof *d), *q = malloc(N * sizeof *q);
    rpt_agg *a = rpt_agg_new(NULL);
    for (unsigned k = 0; k < N; k++) {
        d[k] = 1000 + rnd() % 5000000;
        q[k] = rnd() % 2000000;
        rpt_span s = mk(k % 200 + 1, k + 2, 1, "x", 1000000, 1000000 + d[k]);
        s.trace_id[1] = (uint8_t)(k >> 8);
        s.queue_ns = (int64_t)q[k];
        rpt_agg_add(a, &s);
    }
    const rpt_summary *S = rpt_agg_finish(a);
    qsort(d, N, sizeof *d, cmp_u64);
    qsort(q, N, sizeof *q, cmp_u64);
    assert_int_equal(S->n_names, 1);
    const rpt_name_sum *n = &S->names[0];
    double got[4] = {n->dur.p50, n->dur.p90, n->dur.p99, n->dur.max};
    double gq[3] = {n->queue.p50, n->queue.p90, n->queue.p99};
    double qs[3] = {0.5, 0.9, 0.99};
    for (int k = 0; k < 3; k++) {
        double ex = (double)exact_q(d, N, qs[k]), exq = (double)exact_q(q, N, qs[k]);
        assert_true(fabs(got[k] - ex) <= ex / 256 + 0.5);
        assert_true(fabs(gq[k] - exq) <= exq / 256 + 0.5);
    }
    assert_true(got[3] == (double)d[N - 1]);
    free(d);
    free(q);
    rpt_agg_free(a);
}

static void timeline_coarsens(void **state)
{
    (void)state;
    rpt_agg *a = rpt_agg_new(NULL);
    /* requests over 100 s, then one before them all */
    for (unsigned k = 0; k < 1000; k++) {
        rpt_span s = mk((k & 0xff) + 1, 1, 0, "request", 0, 0);
        s.trace_id[1] = (uint8_t)(k >> 8);
        s.trace_id[2] = 1;
        s.start_ns = 1000000000000ull + (uint64_t)k * 100000000ull;
        s.end_ns = s.start_ns + 1000 + k;
        rpt_agg_add(a, &s);
    }
    rpt_span s = mk(1, 1, 0, "request", 1000000000000ull - 5000000000ull, 0);
    s.trace_id[3] = 9;
    s.end_ns = s.start_ns + 10;
    rpt_agg_add(a, &s);
    const rpt_summary *S = rpt_agg_finish(a);
    assert_true(S->tl_bins >= 1 && S->tl_bins <= RPT_TIMELINE_BINS);
    uint64_t tot = 0;
    for (unsigned k = 0; k < S->tl_bins; k++)
        tot += S->tl_count[k];
    assert_int_equal(tot, 1001);
    assert_true(S->tl_t0 <= s.start_ns);
    assert_true(S->tl_t0 + S->tl_width * S->tl_bins > 1000000000000ull + 999ull * 100000000ull);
    rpt_agg_free(a);
}

/* one OTLP span with an end before its start, in a batch of 1002: the batch
 * reads on, 1001 spans come, 1 bad span is counted (with its line and
 * reason), no bad line; a time past 2^63 is a bad span too */
static void otlp_bad_span_keeps_its_batch(void **state)
{
    (void)state;
    size_t cap = 1200 * 200;
    char *text = malloc(cap);
    assert_non_null(text);
    size_t n = (size_t)snprintf(text, cap, "{\"resourceSpans\":[{\"scopeSpans\":[{\"spans\":[");
    for (unsigned k = 0; k < 1002; k++) {
        uint64_t st = k == 1 ? 500 : 1000 + k, en = k == 1 ? 400 : 2000 + k;
        n += (size_t)snprintf(text + n, cap - n,
                              "%s{\"traceId\":\"%016x%016x\",\"spanId\":\"%016x\",\"name\":"
                              "\"r\",\"startTimeUnixNano\":\"%llu\",\"endTimeUnixNano\":"
                              "\"%llu\"}",
                              k ? "," : "", 0u, k + 1, k + 1, (unsigned long long)st,
                              (unsigned long long)en);
    }
    n += (size_t)snprintf(text + n, cap - n, "]}]}]}\n");
    /* line 2: a time past 2^63 (both ends, so not an end before the start), then a good span */
    snprintf(text + n, cap - n,
             "{\"resourceSpans\":[{\"scopeSpans\":[{\"spans\":[{\"traceId\":\"" TID "\","
             "\"spanId\":\"0000000000000001\",\"name\":\"big\",\"startTimeUnixNano\":"
             "\"18446744073709551000\",\"endTimeUnixNano\":\"18446744073709551000\"},"
             "{\"traceId\":\"" TID "\",\"spanId\":\"0000000000000002\",\"name\":\"ok\","
             "\"startTimeUnixNano\":\"1\",\"endTimeUnixNano\":\"2\"}]}]}]}\n");
    FILE *f = file_of(text);
    rpt_source src;
    bad_log bl = {0};
    assert_int_equal(rpt_source_open(&src, f, RPT_FMT_OTLP, 0, log_bad, &bl), 0);
    src.on_bad_span = log_bad;
    src.bad_ctx = &bl; /* one context: both logs in bl, told apart by the counters */
    rpt_span sp;
    unsigned got = 0;
    bool big = false;
    while (rpt_source_next(&src, &sp) == 1) {
        got++;
        big = big || !strcmp(sp.name, "big");
    }
    assert_int_equal(got, 1001 + 1);
    assert_false(big);
    assert_int_equal(src.bad_lines, 0);
    assert_int_equal(src.bad_spans, 2);
    assert_int_equal(bl.n, 2);
    assert_int_equal(bl.line[0], 1);
    assert_non_null(strstr(bl.why[0], "ends before it starts"));
    assert_int_equal(bl.line[1], 2);
    assert_non_null(strstr(bl.why[1], "past 2^63"));
    rpt_source_close(&src);
    fclose(f);
    free(text);
}

/* a line cut right after a backslash inside a string: one bad line, and the
 * next line (a good span) is still read */
static void backslash_at_line_end(void **state)
{
    (void)state;
    static const char text[] =
        "{\"trace_id\":\"" TID "\",\"name\":\"cut\\\n"
        "{\"trace_id\":\"" TID "\",\"span_id\":\"50dc5b51ff2cfb2d\",\"name\":\"x\",\"start_ns\":5,"
        "\"end_ns\":6}\n";
    rpt_span s[4];
    bad_log bl = {0};
    int n = read_all(text, RPT_FMT_SPANS, s, 4, &bl);
    assert_int_equal(n, 1);
    assert_string_equal(s[0].name, "x");
    assert_int_equal(s[0].line, 2);
    assert_int_equal(bl.n, 1);
    assert_int_equal(bl.line[0], 1);
}

/* hostile queue times: the figures stay sane (no overflow: a request's GPU
 * queue saturates instead of wrapping negative and vanishing) */
static void hostile_queue_times(void **state)
{
    (void)state;
    rpt_agg *a = rpt_agg_new(NULL);
    assert_non_null(a);
    rpt_span s = mk(1, 1, 0, "request", 1000, (uint64_t)INT64_MAX);
    rpt_agg_add(a, &s);
    s = mk(1, 2, 1, "k1", 2000, 3000);
    s.queue_ns = INT64_MAX - 10; /* no cbt.enqueue_ns: start - queue */
    rpt_agg_add(a, &s);
    s = mk(1, 3, 1, "k2", (uint64_t)INT64_MAX - 5, (uint64_t)INT64_MAX);
    s.queue_ns = INT64_MAX - 3;
    rpt_agg_add(a, &s);
    const rpt_summary *S = rpt_agg_finish(a);
    assert_int_equal(S->requests, 1);
    assert_int_equal(S->gpu_queue.n, 1); /* measured: not wrapped below zero */
    assert_true(S->gpu_queue.max >= 0);
    assert_int_equal(S->n_slow, 1);
    for (unsigned k = 0; k < S->slow[0].n; k++)
        assert_true(S->slow[0].spans[k].enqueue == RPT_ABSENT || S->slow[0].spans[k].enqueue >= 0);
    assert_true(S->slow[0].gpu_queue >= 0);
    rpt_agg_free(a);
}

/* names, sessions and services from the input reach the terminal without a
 * control byte: no ESC or BEL */
static void text_output_has_no_control_bytes(void **state)
{
    (void)state;
    static const char text[] =
        "{\"trace_id\":\"" TID "\",\"span_id\":\"50dc5b51ff2cfb2d\",\"name\":"
        "\"\\u001b]0;title\\u0007\",\"start_ns\":5,\"end_ns\":60,\"attributes\":{\"session_id\":"
        "\"\\u001b[2J\",\"cbt.queue_ns\":3,\"cbt.stream\":1,\"cbt.device\":\"\\u001b[31m\","
        "\"cbt.evicted\":\"\\u0007\"}}\n"
        "{\"trace_id\":\"" TID "\",\"name\":\"\\u001b[5m\",\"span_id\":5}\n";
    rpt_span sp[4];
    bad_log bl = {0};
    int n = read_all(text, RPT_FMT_SPANS, sp, 4, &bl);
    assert_int_equal(n, 1);
    assert_int_equal(bl.n, 1);
    assert_non_null(strchr(sp[0].name, 0x1b));
    rpt_agg *a = rpt_agg_new(NULL);
    assert_non_null(a);
    rpt_agg_file(a, 0, "in\x1b[1m.jsonl", RPT_FMT_SPANS);
    sp[0].file = 0;
    rpt_agg_add(a, &sp[0]);
    rpt_agg_bad_line(a, 0, 2, "span_id: expected a hex string in \x1b[5m");
    rpt_agg_bad_span(a, 0, 3, "the span '\x1b]0;x\x07' ends before it starts");
    const rpt_summary *S = rpt_agg_finish(a);
    FILE *f = tmpfile();
    assert_non_null(f);
    rpt_text_write(f, S, 60);
    long len = ftell(f);
    rewind(f);
    char *out = calloc(1, (size_t)len + 1);
    assert_non_null(out);
    assert_int_equal(fread(out, 1, (size_t)len, f), (size_t)len);
    assert_non_null(strstr(out, "?]0;title?"));
    assert_non_null(strstr(out, "?[2J"));
    assert_null(memchr(out, 0x1b, (size_t)len));
    assert_null(memchr(out, 0x07, (size_t)len));
    free(out);
    fclose(f);
    rpt_agg_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sketch_quantiles_exact_within_error),
        cmocka_unit_test(sketch_buckets_cover_every_value),
        cmocka_unit_test(lexer_same_tokens_at_every_buffer_size),
        cmocka_unit_test(lexer_garbage_ends),
        cmocka_unit_test(readers_on_mutated_lines),
        cmocka_unit_test(span_file_lines),
        cmocka_unit_test(otlp_json_lines),
        cmocka_unit_test(detect_formats),
        cmocka_unit_test_teardown(otlp_from_cbt_encoder, tu_teardown),
        cmocka_unit_test(merge_by_end_time),
        cmocka_unit_test(otlp_bad_span_keeps_its_batch),
        cmocka_unit_test(backslash_at_line_end),
        cmocka_unit_test(hostile_queue_times),
        cmocka_unit_test(text_output_has_no_control_bytes),
        cmocka_unit_test(completeness_counts),
        cmocka_unit_test(split_by_the_open_bound),
        cmocka_unit_test(one_request_figures),
        cmocka_unit_test(wrapper_does_not_hide_the_wait),
        cmocka_unit_test(name_percentiles_within_error),
        cmocka_unit_test(timeline_coarsens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
