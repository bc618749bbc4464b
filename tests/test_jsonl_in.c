/* tests/test_jsonl_in.c — the strict JSON-lines reader of `cbt replay`
 * (cli/jsonl_in.c): what it accepts and what each value becomes; what
 * it refuses, with the column and the problem; its bounds (nodes, depth,
 * number length, line length); and that random and mutated bytes end in a
 * value or an error, never a crash or a read past the line (run it under
 * ASan: CBT_SANITIZE=address). tests/fuzz_jsonl_in.c is the libFuzzer form. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "cli/jsonl_in.h"

static cbt_jl_doc g_doc;
static char g_err[256];

/* Parse a copy of s (the parser writes into its buffer); 0 or -1. */
static int parse(const char *s)
{
    static char buf[1 << 16];
    size_t n = strlen(s);
    assert_true(n < sizeof buf);
    memcpy(buf, s, n + 1);
    return cbt_jl_parse(buf, n, &g_doc, g_err, sizeof g_err);
}

static void test_values(void **state)
{
    (void)state;
    assert_int_equal(parse("  {\"a\": 1, \"b\": -2.5e3, \"c\": true, \"d\": \"x\\ny\", "
                           "\"e\": null, \"f\": [1, [2]], \"g\": {}}  "),
                     0);
    const cbt_jl_doc *d = &g_doc;
    assert_int_equal(d->nodes[0].type, CBT_JL_OBJECT);
    assert_int_equal(d->nodes[0].end, d->n);
    const cbt_jl_node *a = cbt_jl_member(d, 0, "a"), *b = cbt_jl_member(d, 0, "b");
    assert_int_equal(a->type, CBT_JL_INT);
    assert_int_equal(a->v.i, 1);
    assert_int_equal(b->type, CBT_JL_FLOAT);
    assert_true(b->v.f == -2500.0);
    assert_int_equal(cbt_jl_member(d, 0, "c")->type, CBT_JL_BOOL);
    assert_true(cbt_jl_member(d, 0, "c")->v.b);
    const cbt_jl_node *s = cbt_jl_member(d, 0, "d");
    assert_int_equal(s->type, CBT_JL_STR);
    assert_int_equal(s->str_len, 3);
    assert_string_equal(s->str, "x\ny");
    assert_int_equal(cbt_jl_member(d, 0, "e")->type, CBT_JL_NULL);
    const cbt_jl_node *f = cbt_jl_member(d, 0, "f");
    assert_int_equal(f->type, CBT_JL_ARRAY);
    assert_int_equal(f->end - (uint32_t)(f - d->nodes), 4); /* f, 1, [ , 2 */
    assert_int_equal(cbt_jl_member(d, 0, "g")->type, CBT_JL_OBJECT);
    assert_null(cbt_jl_member(d, 0, "zz"));

    /* integers: exact int64 at both ends; beyond that a BIGINT */
    assert_int_equal(parse("[9223372036854775807, -9223372036854775808, "
                           "9223372036854775808, 1700000000123456789, -0, 0.0, 1E2]"),
                     0);
    assert_int_equal(d->nodes[1].type, CBT_JL_INT);
    assert_true(d->nodes[1].v.i == INT64_MAX);
    assert_int_equal(d->nodes[2].type, CBT_JL_INT);
    assert_true(d->nodes[2].v.i == INT64_MIN);
    assert_int_equal(d->nodes[3].type, CBT_JL_BIGINT);
    assert_int_equal(d->nodes[4].type, CBT_JL_INT);
    assert_true(d->nodes[4].v.i == 1700000000123456789LL);
    assert_int_equal(d->nodes[5].type, CBT_JL_INT);
    assert_int_equal(d->nodes[6].type, CBT_JL_FLOAT);
    assert_int_equal(d->nodes[7].type, CBT_JL_FLOAT);
    assert_true(d->nodes[7].v.f == 100.0);

    /* escapes: \u BMP, a surrogate pair, \u0000 kept with its length */
    assert_int_equal(parse("[\"\\u00e9\\ud83d\\ude00\\/\\\"\", \"a\\u0000b\", \"\xc3\xa9\"]"), 0);
    assert_int_equal(d->nodes[1].str_len, 2 + 4 + 2);
    assert_memory_equal(d->nodes[1].str, "\xc3\xa9\xf0\x9f\x98\x80/\"", 8);
    assert_int_equal(d->nodes[2].str_len, 3);
    assert_memory_equal(d->nodes[2].str, "a\0b", 3);
    assert_string_equal(d->nodes[3].str, "\xc3\xa9");
    /* a scalar alone is a document too */
    assert_int_equal(parse("\"x\""), 0);
    assert_int_equal(d->n, 1);
}

/* Each refusal, with the text its message must hold. */
static void test_refusals(void **state)
{
    (void)state;
    static const struct {
        const char *in, *msg;
    } cases[] = {
        {"", "empty line"},
        {"   ", "empty line"},
        {"{", "expected a member name"},
        {"{\"a\":1", "object not closed"},
        {"[1,2", "array not closed"},
        {"{\"a\":1,}", "trailing comma"},
        {"[1,]", "trailing comma"},
        {"{\"a\" 1}", "expected ':'"},
        {"{a:1}", "expected a member name"},
        {"{'a':1}", "expected a member name"},
        {"{\"a\":1}{", "after the value"},
        {"1 2", "after the value"},
        {"{\"a\":1,\"a\":2}", "duplicate member name \"a\""},
        {"[01]", "leading zero"},
        {"[1.]", "must follow the decimal point"},
        {"[.5]", "where a value should be"},
        {"[+1]", "where a value should be"},
        {"[1e]", "must follow the exponent"},
        {"[-]", "needs a digit"},
        {"[NaN]", "where a value should be"},
        {"[Infinity]", "where a value should be"},
        {"[1e400]", "out of the range"},
        {"[tru]", "unexpected"},
        {"[nul]", "unexpected"},
        {"\"abc", "not terminated"},
        {"\"a\\", "not terminated"},
        {"\"\\x\"", "unknown escape"},
        {"\"\\u12\"", "four hex digits"},
        {"\"\\udc00\"", "unpaired low surrogate"},
        {"\"\\ud800x\"", "not followed by a low one"},
        {"\"\\ud800\\u0041\"", "not followed by a low one"},
        {"\"a\tb\"", "raw control character 0x09"},
        {"\"\xff\"", "invalid UTF-8"},
        {"\"\xc0\xaf\"", "invalid UTF-8"},          /* overlong '/' */
        {"\"\xed\xa0\x80\"", "invalid UTF-8"},      /* an encoded surrogate */
        {"\"\xf4\x90\x80\x80\"", "invalid UTF-8"},  /* above U+10FFFF */
        {"\"\xe2\x82\"", "invalid UTF-8"},          /* truncated */
        {"/* c */ 1", "where a value should be"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = parse(cases[i].in);
        if (rc != -1 || !strstr(g_err, cases[i].msg) || strncmp(g_err, "column ", 7) != 0)
            fail_msg("'%s': rc %d, message '%s', expected one holding '%s'", cases[i].in, rc,
                     g_err, cases[i].msg);
    }
    /* the column points at the problem */
    assert_int_equal(parse("{\"a\": 1, \"b\": x}"), -1);
    assert_non_null(strstr(g_err, "column 15:"));
}

static void test_bounds(void **state)
{
    (void)state;
    static char buf[2 * CBT_JL_NODES_MAX + 16]; /* the nodes case: "[0,0,...]" */
    /* depth: CBT_JL_DEPTH_MAX containers nest, one more does not */
    for (int extra = 0; extra <= 1; extra++) {
        size_t n = 0, depth = CBT_JL_DEPTH_MAX + (size_t)extra;
        for (size_t k = 0; k < depth; k++)
            buf[n++] = '[';
        for (size_t k = 0; k < depth; k++)
            buf[n++] = ']';
        int rc = cbt_jl_parse(buf, n, &g_doc, g_err, sizeof g_err);
        assert_int_equal(rc, extra ? -1 : 0);
        if (extra)
            assert_non_null(strstr(g_err, "nested deeper"));
    }
    /* nodes: an array of CBT_JL_NODES_MAX - 1 values fits, one more does not */
    for (int extra = 0; extra <= 1; extra++) {
        size_t n = 0;
        buf[n++] = '[';
        for (int k = 0; k < (int)CBT_JL_NODES_MAX - 1 + extra; k++) {
            if (k)
                buf[n++] = ',';
            buf[n++] = '0';
        }
        buf[n++] = ']';
        int rc = cbt_jl_parse(buf, n, &g_doc, g_err, sizeof g_err);
        assert_int_equal(rc, extra ? -1 : 0);
        if (extra)
            assert_non_null(strstr(g_err, "more than"));
    }
    /* a number of CBT_JL_NUMBER_MAX - 1 characters reads, one more does not */
    for (int extra = 0; extra <= 1; extra++) {
        size_t n = CBT_JL_NUMBER_MAX - 1 + (size_t)extra;
        memset(buf, '1', n);
        buf[1] = '.';
        int rc = cbt_jl_parse(buf, n, &g_doc, g_err, sizeof g_err);
        assert_int_equal(rc, extra ? -1 : 0);
        if (extra)
            assert_non_null(strstr(g_err, "number longer"));
    }
    /* NUL bytes outside strings and a NUL in the line are refused, not read past */
    assert_int_equal(cbt_jl_parse(memcpy(buf, "[1,\0 2]", 7), 7, &g_doc, g_err, sizeof g_err), -1);
    assert_non_null(strstr(g_err, "byte 0x00"));
    assert_int_equal(cbt_jl_parse(memcpy(buf, "\"a\0\"", 4), 4, &g_doc, g_err, sizeof g_err), -1);
    assert_non_null(strstr(g_err, "control character 0x00"));
    /* a message never overflows a tiny buffer */
    char tiny[8];
    memcpy(buf, "[1,]", 4);
    assert_int_equal(cbt_jl_parse(buf, 4, &g_doc, tiny, sizeof tiny), -1);
    assert_true(strlen(tiny) < sizeof tiny);
    assert_int_equal(cbt_jl_parse(buf, 4, &g_doc, NULL, 0), -1);
}

/* The line reader: lines split at '\n', a last line without one, CRLF kept
 * for the parser, an overlong line reported once and skipped to its end. */
static void test_reader(void **state)
{
    (void)state;
    FILE *f = tmpfile();
    assert_non_null(f);
    fputs("{\"a\":1}\r\n\n", f);
    for (size_t k = 0; k < CBT_JL_LINE_MAX + 10; k++)
        fputc('x', f);
    fputs("\n[2]", f);
    rewind(f);
    cbt_jl_reader r;
    assert_int_equal(cbt_jl_reader_init(&r, f), 0);
    assert_int_equal(cbt_jl_next(&r), CBT_JL_LINE);
    assert_int_equal(r.len, 8); /* the '\r' kept */
    assert_int_equal(cbt_jl_parse(r.buf, r.len, &g_doc, g_err, sizeof g_err), 0);
    assert_int_equal(cbt_jl_next(&r), CBT_JL_LINE);
    assert_int_equal(r.len, 0);
    assert_int_equal(cbt_jl_next(&r), CBT_JL_TOO_LONG);
    assert_int_equal(r.lineno, 3);
    assert_int_equal(cbt_jl_next(&r), CBT_JL_LINE);
    assert_int_equal(r.lineno, 4);
    assert_string_equal(r.buf, "[2]");
    assert_int_equal(cbt_jl_next(&r), CBT_JL_EOF);
    assert_int_equal(cbt_jl_next(&r), CBT_JL_EOF);
    cbt_jl_reader_free(&r);
    fclose(f);
}

static uint64_t rnd(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* Random bytes and byte-level mutations of a valid event line: each ends in
 * 0 or -1 with a message; an accepted one has a consistent node tree. The
 * input sits at the end of a heap block, so a read past it is an ASan
 * error. */
static void test_random(void **state)
{
    (void)state;
    static const char seed_line[] =
        "{\"type\": \"mp.store.start\", \"ts_ns\": 1700000000123456789, \"session\": "
        "\"req-1\", \"pair\": 0, \"meta\": {\"device\": \"cuda:0\", \"engine_id\": 1, "
        "\"model_name\": \"meta-llama/Llama-3.1-8B-Instruct\", \"ratio\": 0.5, "
        "\"s\": \"\\u00e9\\ud83d\\ude00\", \"success\": false, \"l\": [1, {\"x\": null}]}}";
    static const char alphabet[] = "{}[]\",:.-+eE0123456789tfnrul\\ u\xc3\xa9\xff\x00";
    uint64_t x = 0x9e3779b97f4a7c15ull;
    int accepted = 0;
    for (int iter = 0; iter < 20000; iter++) {
        size_t n;
        char *buf;
        if (iter % 2) {
            n = rnd(&x) % 96;
            buf = malloc(n ? n : 1);
            for (size_t k = 0; k < n; k++)
                buf[k] = alphabet[rnd(&x) % (sizeof alphabet - 1)];
        } else {
            n = sizeof seed_line - 1;
            buf = malloc(n);
            memcpy(buf, seed_line, n);
            int muts = 1 + (int)(rnd(&x) % 4);
            for (int m = 0; m < muts && n > 0; m++) {
                size_t at = rnd(&x) % n;
                switch (rnd(&x) % 3) {
                case 0: buf[at] = alphabet[rnd(&x) % (sizeof alphabet - 1)]; break;
                case 1: buf[at] = (char)rnd(&x); break;
                default: n = at; break; /* truncate */
                }
            }
        }
        int rc = cbt_jl_parse(buf, n, &g_doc, g_err, sizeof g_err);
        if (rc == 0) {
            accepted++;
            assert_true(g_doc.n >= 1 && g_doc.nodes[0].end == g_doc.n);
            for (uint32_t k = 0; k < g_doc.n; k++)
                assert_true(g_doc.nodes[k].end > k && g_doc.nodes[k].end <= g_doc.n);
        } else {
            assert_int_equal(rc, -1);
            assert_true(strncmp(g_err, "column ", 7) == 0);
        }
        free(buf);
    }
    assert_true(accepted > 0); /* some mutations keep the line valid */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_reader),
        cmocka_unit_test(test_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
