/* tests/test_lmct.c — the LMCT codec (host/record/lmct.c, cbt/lmct.h): a round
 * trip of every value type and each bad input the reader names. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "cbt/lmct.h"

static char g_path[64];

static void tmp_path(void)
{
    snprintf(g_path, sizeof g_path, "/tmp/cbt-lmct-%d.lct", (int)getpid());
}

static cbt_lmct_header gpu_header(void)
{
    static const cbt_lmct_kv meta[] = {{.key = "cbt_version", .value = {.type = CBT_LMCT_STR, .v.s = {"0.1.0", 5}}}};
    cbt_lmct_header h = CBT_LMCT_HEADER_INIT;
    h.level = CBT_LMCT_LEVEL_GPU;
    h.t_mono_start = 12.5;
    h.t_wall_start = 1700000000.25;
    h.sm_config_json = "{\"builders\":\"mp\"}";
    h.sm_config_digest = "abc123";
    h.level_meta = meta;
    h.level_meta_count = 1;
    return h;
}

static unsigned char *slurp(size_t *n)
{
    FILE *f = fopen(g_path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    unsigned char *b = malloc(*n + 1);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static void write_sample(unsigned records)
{
    cbt_lmct_header h = gpu_header();
    cbt_lmct_writer *w;
    assert_int_equal(cbt_lmct_writer_open(g_path, &h, &w), CBT_OK);
    static const cbt_lmct_value arr[] = {{.type = CBT_LMCT_UINT, .v.u = 1}, {.type = CBT_LMCT_STR, .v.s = {"x", 1}}};
    static const cbt_lmct_kv inner[] = {{.key = "sm", .value = {.type = CBT_LMCT_UINT, .v.u = 7}}};
    for (unsigned i = 0; i < records; i++) {
        cbt_lmct_kv args[] = {
            CBT_LMCT_KV("neg", CBT_LMCT_I(-5)),
            CBT_LMCT_KV("tokens", CBT_LMCT_U(UINT64_MAX - i)),
            CBT_LMCT_KV("ratio", CBT_LMCT_F(0.5)),
            CBT_LMCT_KV("ok", CBT_LMCT_B(true)),
            CBT_LMCT_KV("session", CBT_LMCT_S("req-1", 5)),
            CBT_LMCT_KV("id", CBT_LMCT_BIN("\0\1\2", 3)),
            CBT_LMCT_KV("none", ((cbt_lmct_value){.type = CBT_LMCT_NIL})),
            CBT_LMCT_KV("list", ((cbt_lmct_value){.type = CBT_LMCT_ARRAY, .v.array = {arr, 2}})),
            CBT_LMCT_KV("ring", ((cbt_lmct_value){.type = CBT_LMCT_MAP, .v.map = {inner, 1}})),
        };
        cbt_lmct_record r = CBT_LMCT_RECORD_INIT;
        r.t_mono = 0.001 * i;
        r.t_wall = 1700000000.25 + 0.001 * i;
        r.qualname = "cbt.event.mp.store.start";
        r.args = args;
        r.arg_count = sizeof args / sizeof args[0];
        assert_int_equal(cbt_lmct_writer_append(w, &r), CBT_OK);
    }
    assert_int_equal(cbt_lmct_writer_close(w), CBT_OK);
}

static const cbt_lmct_value *arg(const cbt_lmct_record *r, const char *k)
{
    for (uint32_t i = 0; i < r->arg_count; i++)
        if (strcmp(r->args[i].key, k) == 0)
            return &r->args[i].value;
    fail_msg("no arg %s", k);
    return NULL;
}

static void round_trip(void **state)
{
    (void)state;
    write_sample(3);
    cbt_lmct_reader *rd;
    assert_int_equal(cbt_lmct_reader_open(g_path, &rd), CBT_OK);
    const cbt_lmct_header *h = cbt_lmct_reader_header(rd);
    assert_string_equal(h->level, "gpu");
    assert_int_equal(h->format_version, 1);
    assert_int_equal(h->trace_schema_version, 1);
    assert_true(h->t_mono_start == 12.5 && h->t_wall_start == 1700000000.25);
    assert_string_equal(h->sm_config_json, "{\"builders\":\"mp\"}");
    assert_string_equal(h->sm_config_digest, "abc123");
    assert_int_equal(h->level_meta_count, 1);
    assert_string_equal(h->level_meta[0].key, "cbt_version");
    assert_string_equal(h->level_meta[0].value.v.s.ptr, "0.1.0");
    const cbt_lmct_record *r;
    for (unsigned i = 0; i < 3; i++) {
        assert_int_equal(cbt_lmct_reader_next(rd, &r), CBT_OK);
        assert_non_null(r);
        assert_string_equal(r->qualname, "cbt.event.mp.store.start");
        assert_true(r->t_mono == 0.001 * i);
        assert_int_equal(r->arg_count, 9);
        assert_int_equal(arg(r, "neg")->type, CBT_LMCT_INT);
        assert_int_equal(arg(r, "neg")->v.i, -5);
        assert_int_equal(arg(r, "tokens")->type, CBT_LMCT_UINT);
        assert_true(arg(r, "tokens")->v.u == UINT64_MAX - i);
        assert_true(arg(r, "ratio")->type == CBT_LMCT_FLOAT && arg(r, "ratio")->v.f == 0.5);
        assert_true(arg(r, "ok")->type == CBT_LMCT_BOOL && arg(r, "ok")->v.b);
        assert_int_equal(arg(r, "session")->type, CBT_LMCT_STR);
        assert_string_equal(arg(r, "session")->v.s.ptr, "req-1");
        assert_int_equal(arg(r, "id")->type, CBT_LMCT_BYTES);
        assert_int_equal(arg(r, "id")->v.s.len, 3);
        assert_memory_equal(arg(r, "id")->v.s.ptr, "\0\1\2", 3);
        assert_int_equal(arg(r, "none")->type, CBT_LMCT_NIL);
        assert_int_equal(arg(r, "list")->type, CBT_LMCT_ARRAY);
        assert_int_equal(arg(r, "list")->v.array.count, 2);
        assert_string_equal(arg(r, "list")->v.array.items[1].v.s.ptr, "x");
        assert_int_equal(arg(r, "ring")->type, CBT_LMCT_MAP);
        assert_string_equal(arg(r, "ring")->v.map.items[0].key, "sm");
        assert_int_equal(arg(r, "ring")->v.map.items[0].value.v.u, 7);
    }
    assert_int_equal(cbt_lmct_reader_next(rd, &r), CBT_OK);
    assert_null(r); /* clean end */
    cbt_lmct_reader_close(rd);
    unlink(g_path);
}

static void truncated_tail(void **state)
{
    (void)state;
    write_sample(2);
    size_t n;
    unsigned char *b = slurp(&n);
    for (size_t cut = 1; cut <= 6; cut++) { /* inside the last frame's body and its prefix */
        cbt_lmct_reader *rd;
        assert_int_equal(cbt_lmct_reader_open_mem(b, n - cut, &rd), CBT_OK);
        const cbt_lmct_record *r;
        assert_int_equal(cbt_lmct_reader_next(rd, &r), CBT_OK);
        assert_non_null(r);
        assert_int_equal(cbt_lmct_reader_next(rd, &r), CBT_ERR_LMCT_TRUNCATED);
        assert_null(r);
        assert_non_null(strstr(cbt_lmct_reader_message(rd), "offset"));
        assert_int_equal(cbt_lmct_reader_next(rd, &r), CBT_ERR_LMCT_TRUNCATED); /* stays stopped */
        cbt_lmct_reader_close(rd);
    }
    free(b);
    unlink(g_path);
}

/* the header frame of write_sample, its bytes edited */
static void header_bytes(unsigned char **b, size_t *n)
{
    write_sample(0);
    *b = slurp(n);
    unlink(g_path);
}

static unsigned char *find(unsigned char *b, size_t n, const char *s, size_t sl)
{
    for (size_t i = 0; i + sl <= n; i++)
        if (memcmp(b + i, s, sl) == 0)
            return b + i;
    return NULL;
}

static void bad_header(void **state)
{
    (void)state;
    unsigned char *b;
    size_t n;
    cbt_lmct_reader *rd;
    header_bytes(&b, &n);
    unsigned char *m = find(b, n, "LMCT", 4);
    m[0] = 'X';
    assert_int_equal(cbt_lmct_reader_open_mem(b, n, &rd), CBT_ERR_LMCT_BAD_MAGIC);
    assert_null(rd);
    assert_non_null(strstr(cbt_lmct_last_open_message(), "magic"));
    m[0] = 'L';
    unsigned char *fv = find(b, n, "format_version", 14);
    fv[14] = 2; /* the positive fixint after the key */
    assert_int_equal(cbt_lmct_reader_open_mem(b, n, &rd), CBT_ERR_LMCT_FORMAT);
    fv[14] = 1;
    unsigned char *sv = find(b, n, "trace_schema_version", 20);
    sv[20] = 9;
    assert_int_equal(cbt_lmct_reader_open_mem(b, n, &rd), CBT_ERR_LMCT_SCHEMA);
    sv[20] = 1;
    assert_int_equal(cbt_lmct_reader_open_mem(b, n, &rd), CBT_OK);
    cbt_lmct_reader_close(rd);
    /* empty file; a header frame longer than the file */
    assert_int_equal(cbt_lmct_reader_open_mem(b, 0, &rd), CBT_ERR_LMCT_BEYOND_FILE);
    assert_int_equal(cbt_lmct_reader_open_mem(b, n - 1, &rd), CBT_ERR_LMCT_BEYOND_FILE);
    free(b);
}

static void oversize_frame(void **state)
{
    (void)state;
    unsigned char f[8] = {0x7f, 0xff, 0xff, 0xff, 0x80};
    cbt_lmct_reader *rd;
    assert_int_equal(cbt_lmct_reader_open_mem(f, sizeof f, &rd), CBT_ERR_LMCT_LIMIT);
    assert_non_null(strstr(cbt_lmct_last_open_message(), "CBT_LMCT_FRAME_MAX"));
    /* a record frame past the bound, after a good header */
    unsigned char *b;
    size_t n;
    header_bytes(&b, &n);
    b = realloc(b, n + 8);
    memcpy(b + n, f, 8);
    assert_int_equal(cbt_lmct_reader_open_mem(b, n + 8, &rd), CBT_OK);
    const cbt_lmct_record *r;
    assert_int_equal(cbt_lmct_reader_next(rd, &r), CBT_ERR_LMCT_LIMIT);
    cbt_lmct_reader_close(rd);
    free(b);
}

/* a good header followed by one record frame of these msgpack bytes */
static cbt_status one_frame(const unsigned char *body, size_t len)
{
    unsigned char *b;
    size_t n;
    header_bytes(&b, &n);
    b = realloc(b, n + 4 + len);
    b[n] = (unsigned char)(len >> 24);
    b[n + 1] = (unsigned char)(len >> 16);
    b[n + 2] = (unsigned char)(len >> 8);
    b[n + 3] = (unsigned char)len;
    memcpy(b + n + 4, body, len);
    cbt_lmct_reader *rd;
    assert_int_equal(cbt_lmct_reader_open_mem(b, n + 4 + len, &rd), CBT_OK);
    const cbt_lmct_record *r;
    cbt_status st = cbt_lmct_reader_next(rd, &r);
    cbt_lmct_reader_close(rd);
    free(b);
    return st;
}

static void wrong_types(void **state)
{
    (void)state;
    /* {"t_mono": "x", ...}: a str where a float belongs */
    static const unsigned char strf[] = "\x84\xa6t_mono\xa1x\xa6t_wall\xcb\x00\x00\x00\x00\x00\x00\x00\x00"
                                        "\xa8qualname\xa1q\xa4\x61rgs\x80";
    assert_int_equal(one_frame(strf, sizeof strf - 1), CBT_ERR_LMCT_TYPE);
    /* the same with t_mono an int: accepted (msgspec takes ints for floats) */
    static const unsigned char okf[] = "\x84\xa6t_mono\x01\xa6t_wall\xcb\x00\x00\x00\x00\x00\x00\x00\x00"
                                       "\xa8qualname\xa1q\xa4\x61rgs\x80";
    assert_int_equal(one_frame(okf, sizeof okf - 1), CBT_OK);
    /* args an array */
    static const unsigned char arr[] = "\x84\xa6t_mono\x01\xa6t_wall\x01\xa8qualname\xa1q\xa4\x61rgs\x90";
    assert_int_equal(one_frame(arr, sizeof arr - 1), CBT_ERR_LMCT_TYPE);
    /* an int map key in args */
    static const unsigned char key[] = "\x84\xa6t_mono\x01\xa6t_wall\x01\xa8qualname\xa1q\xa4\x61rgs\x81\x01\x01";
    assert_int_equal(one_frame(key, sizeof key - 1), CBT_ERR_LMCT_TYPE);
    /* an empty frame (found by fuzz_lmct_reader) */
    assert_int_equal(one_frame((const unsigned char *)"", 0), CBT_ERR_LMCT_TYPE);
    /* not a map; trailing bytes; a "type" of "header" */
    assert_int_equal(one_frame((const unsigned char *)"\x01", 1), CBT_ERR_LMCT_TYPE);
    assert_int_equal(one_frame((const unsigned char *)"\x80\x01", 2), CBT_ERR_LMCT_TYPE);
    static const unsigned char tag[] = "\x81\xa4type\xa6header";
    assert_int_equal(one_frame(tag, sizeof tag - 1), CBT_ERR_LMCT_TYPE);
}

static void huge_refused(void **state)
{
    (void)state;
    /* a map32 claiming 2^32-1 entries, a str32 of 4 GiB: rejected unallocated */
    assert_int_equal(one_frame((const unsigned char *)"\xdf\xff\xff\xff\xff", 5), CBT_ERR_LMCT_LIMIT);
    assert_int_equal(one_frame((const unsigned char *)"\x81\xdb\xff\xff\xff\xff", 6), CBT_ERR_LMCT_LIMIT);
    assert_int_equal(one_frame((const unsigned char *)"\xdd\x00\x0f\xff\xff", 5), CBT_ERR_LMCT_LIMIT);
    /* nesting past CBT_LMCT_DEPTH_MAX */
    static const unsigned char deep[] = "\x81\xa1\x61\x81\xa1\x61\x81\xa1\x61\x81\xa1\x61\x81\xa1\x61\x81\xa1\x61\x80";
    assert_int_equal(one_frame(deep, sizeof deep - 1), CBT_ERR_LMCT_LIMIT);
    /* the writer refuses the same */
    cbt_lmct_header h = gpu_header();
    cbt_lmct_writer *w;
    tmp_path();
    assert_int_equal(cbt_lmct_writer_open(g_path, &h, &w), CBT_OK);
    cbt_lmct_kv big = CBT_LMCT_KV("s", CBT_LMCT_S("", CBT_LMCT_STR_MAX + 1u));
    big.value.v.s.ptr = calloc(1, CBT_LMCT_STR_MAX + 1u);
    cbt_lmct_record r = CBT_LMCT_RECORD_INIT;
    r.qualname = "q";
    r.args = &big;
    r.arg_count = 1;
    assert_int_equal(cbt_lmct_writer_append(w, &r), CBT_ERR_LMCT_LIMIT);
    free((void *)big.value.v.s.ptr);
    r.arg_count = CBT_LMCT_MAP_MAX + 1;
    assert_int_equal(cbt_lmct_writer_append(w, &r), CBT_ERR_LMCT_LIMIT);
    r.version = CBT_LMCT_RECORD_VERSION + 1;
    assert_int_equal(cbt_lmct_writer_append(w, &r), CBT_ERR_VERSION);
    assert_int_equal(cbt_lmct_writer_close(w), CBT_OK);
    unlink(g_path);
}

int main(void)
{
    tmp_path();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip),  cmocka_unit_test(truncated_tail), cmocka_unit_test(bad_header),
        cmocka_unit_test(oversize_frame), cmocka_unit_test(wrong_types), cmocka_unit_test(huge_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
