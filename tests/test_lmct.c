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
    unsigned char deep[3 * (CBT_LMCT_DEPTH_MAX + 2) + 1];
    for (unsigned i = 0; i < CBT_LMCT_DEPTH_MAX + 2; i++)
        memcpy(deep + 3 * i, "\x81\xa1\x61", 3); /* {"a": ...} */
    deep[sizeof deep - 1] = 0x80;
    assert_int_equal(one_frame(deep, sizeof deep), CBT_ERR_LMCT_LIMIT);
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

/* a header of schema `number` whose level_meta names `name` (NULL: none) */
static cbt_status open_schema(int64_t number, const char *name, cbt_lmct_writer **w)
{
    cbt_lmct_kv meta[] = {CBT_LMCT_KV(CBT_LMCT_META_SCHEMA, CBT_LMCT_S(name, name ? (uint32_t)strlen(name) : 0))};
    cbt_lmct_header h = gpu_header();
    h.trace_schema_version = number;
    h.level_meta = name ? meta : NULL;
    h.level_meta_count = name ? 1 : 0;
    return cbt_lmct_writer_open(g_path, &h, w);
}

/* one record of args {"spec": {"__t__": tag, "v": payload}} (and skip_l2) */
static void append_tagged(cbt_lmct_writer *w, const char *qualname, const char *tag,
                          const cbt_lmct_kv *payload, uint32_t n, bool skip_l2)
{
    const cbt_lmct_kv wrapped[] = {CBT_LMCT_KV("__t__", CBT_LMCT_S(tag, (uint32_t)strlen(tag))),
                                   CBT_LMCT_KV("v", ((cbt_lmct_value){.type = CBT_LMCT_MAP, .v.map = {payload, n}}))};
    const cbt_lmct_kv args[] = {CBT_LMCT_KV("spec", ((cbt_lmct_value){.type = CBT_LMCT_MAP, .v.map = {wrapped, 2}})),
                                CBT_LMCT_KV("skip_l2", CBT_LMCT_B(true))};
    cbt_lmct_record r = CBT_LMCT_RECORD_INIT;
    r.qualname = qualname;
    r.args = args;
    r.arg_count = skip_l2 ? 2 : 1;
    assert_int_equal(cbt_lmct_writer_append(w, &r), CBT_OK);
}

/* read the file: the header's schema, then `ok` good records, then `st` (and
 * a message with `says`) */
static void expect_read(cbt_lmct_schema schema, unsigned ok, cbt_status st, const char *says)
{
    cbt_lmct_reader *rd;
    assert_int_equal(cbt_lmct_reader_open(g_path, &rd), CBT_OK);
    assert_int_equal(cbt_lmct_reader_schema(rd), schema);
    assert_int_equal(cbt_lmct_reader_header(rd)->trace_schema_version, (int64_t)schema);
    const cbt_lmct_record *r;
    for (unsigned i = 0; i < ok; i++) {
        assert_int_equal(cbt_lmct_reader_next(rd, &r), CBT_OK);
        assert_non_null(r);
    }
    assert_int_equal(cbt_lmct_reader_next(rd, &r), st);
    if (says && !strstr(cbt_lmct_reader_message(rd), says))
        fail_msg("reader said \"%s\", not \"%s\"", cbt_lmct_reader_message(rd), says);
    cbt_lmct_reader_close(rd);
}

static void schemas(void **state)
{
    (void)state;
    cbt_lmct_writer *w;
    /* the writer: 0 is 1; 1 and 2; a name that is not the number's, a number
     * that is neither, refused */
    assert_int_equal(open_schema(0, NULL, &w), CBT_OK);
    assert_int_equal(cbt_lmct_writer_close(w), CBT_OK);
    expect_read(CBT_LMCT_SCHEMA_LMCACHE_056, 0, CBT_OK, NULL);
    assert_int_equal(open_schema(3, NULL, &w), CBT_ERR_INVAL);
    assert_int_equal(open_schema(2, "lmcache-0.5.6", &w), CBT_ERR_INVAL);
    assert_int_equal(open_schema(1, "lmcache-9", &w), CBT_ERR_INVAL);
    assert_string_equal(cbt_lmct_schema_name(CBT_LMCT_SCHEMA_LMCACHE_057), "lmcache-0.5.7");

    /* schema 2, named: 0.5.7's content reads; PR #4871's ObjectKey, 0.5.6's
     * skip_l2, an unknown tag are refused, naming what they are */
    const char *sm = "lmcache.v1.distributed.storage_manager.StorageManager.submit_prefetch_task";
    const cbt_lmct_kv tags[] = {CBT_LMCT_KV("segment", CBT_LMCT_S("dram", 4)),
                                CBT_LMCT_KV("residency", CBT_LMCT_S("local", 5))};
    const cbt_lmct_kv spec057[] = {CBT_LMCT_KV("allowed_l1_memory_tags", ((cbt_lmct_value){.type = CBT_LMCT_NIL})),
                                   CBT_LMCT_KV("allowed_l2_memory_tags", ((cbt_lmct_value){.type = CBT_LMCT_NIL}))};
    const cbt_lmct_kv key[] = {CBT_LMCT_KV("chunk_hash", CBT_LMCT_BIN("ab", 2)),
                               CBT_LMCT_KV("cache_salt", CBT_LMCT_S("t", 1))};
    struct { const char *tag; const cbt_lmct_kv *p; uint32_t n; bool skip; cbt_status st; const char *says; } v2[] = {
        {"MemoryTags", tags, 2, false, CBT_OK, NULL},
        {"PrefetchTaskSpec", spec057, 2, false, CBT_OK, NULL},
        {"ObjectKey", key, 1, false, CBT_OK, NULL},
        {"ObjectKey", key, 2, false, CBT_ERR_LMCT_SCHEMA, "pull request #4871"},
        {"PrefetchTaskSpec", spec057, 2, true, CBT_ERR_LMCT_SCHEMA, "with skip_l2"},
        {"PrefetchTaskSpec", spec057, 1, false, CBT_ERR_LMCT_SCHEMA, "without allowed_l1/l2_memory_tags"},
        {"Frobnicator", tags, 2, false, CBT_ERR_LMCT_SCHEMA, "unknown codec tag \"Frobnicator\""},
        {"MemoryTags", tags, 1, false, CBT_ERR_LMCT_SCHEMA, "MemoryTags without segment and residency"},
    };
    for (size_t i = 0; i < sizeof v2 / sizeof v2[0]; i++) {
        assert_int_equal(open_schema(2, i % 2 ? "lmcache-0.5.7" : NULL, &w), CBT_OK);
        append_tagged(w, "cbt.ok", "ObjectKey", key, 1, true); /* skip_l2 elsewhere is no matter */
        append_tagged(w, sm, v2[i].tag, v2[i].p, v2[i].n, v2[i].skip);
        assert_int_equal(cbt_lmct_writer_close(w), CBT_OK);
        expect_read(CBT_LMCT_SCHEMA_LMCACHE_057, v2[i].st ? 1 : 2, v2[i].st, v2[i].says);
    }
    /* schema 1: skip_l2 is its own; MemoryTags and the spec's filters are 0.5.7's */
    struct { const char *tag; const cbt_lmct_kv *p; uint32_t n; cbt_status st; const char *says; } v1[] = {
        {"PrefetchTaskSpec", key, 1, CBT_OK, NULL},
        {"MemoryTags", tags, 2, CBT_ERR_LMCT_SCHEMA, "\"MemoryTags\" is LMCache 0.5.7's"},
        {"PrefetchTaskSpec", spec057, 1, CBT_ERR_LMCT_SCHEMA, "allowed_l1/l2_memory_tags is LMCache 0.5.7's"},
    };
    for (size_t i = 0; i < sizeof v1 / sizeof v1[0]; i++) {
        assert_int_equal(open_schema(1, "lmcache-0.5.6", &w), CBT_OK);
        append_tagged(w, sm, v1[i].tag, v1[i].p, v1[i].n, true);
        assert_int_equal(cbt_lmct_writer_close(w), CBT_OK);
        expect_read(CBT_LMCT_SCHEMA_LMCACHE_056, v1[i].st ? 0 : 1, v1[i].st, v1[i].says);
    }
    /* the reader: a name that is not the number's, a number it does not know */
    unsigned char *b;
    size_t n;
    cbt_lmct_reader *rd;
    assert_int_equal(open_schema(1, "lmcache-0.5.6", &w), CBT_OK);
    assert_int_equal(cbt_lmct_writer_close(w), CBT_OK);
    b = slurp(&n);
    unsigned char *sv = find(b, n, "trace_schema_version", 20);
    sv[20] = 2;
    assert_int_equal(cbt_lmct_reader_open_mem(b, n, &rd), CBT_ERR_LMCT_SCHEMA);
    assert_non_null(strstr(cbt_lmct_last_open_message(), "says lmcache-0.5.6"));
    sv[20] = 3;
    assert_int_equal(cbt_lmct_reader_open_mem(b, n, &rd), CBT_ERR_LMCT_SCHEMA);
    assert_non_null(strstr(cbt_lmct_last_open_message(), "unsupported trace_schema_version 3"));
    sv[20] = 1;
    find(b, n, "lmcache-0.5.6", 13)[12] = '9';
    assert_int_equal(cbt_lmct_reader_open_mem(b, n, &rd), CBT_ERR_LMCT_SCHEMA);
    assert_non_null(strstr(cbt_lmct_last_open_message(), "\"lmcache-0.5.9\" is not a schema"));
    free(b);
    unlink(g_path);
}

int main(void)
{
    tmp_path();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip),  cmocka_unit_test(truncated_tail), cmocka_unit_test(bad_header),
        cmocka_unit_test(oversize_frame), cmocka_unit_test(wrong_types), cmocka_unit_test(huge_refused),
        cmocka_unit_test(schemas),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
