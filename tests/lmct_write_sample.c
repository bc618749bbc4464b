/* tests/lmct_write_sample.c — writes an LMCT file at level "gpu" with the C
 * codec (cbt/lmct.h) for tests/lmcache/lmct_reader_check.py, which opens it
 * with LMCache's own TraceReader (0.5.6's for schema 1, 0.5.7's for 2).
 *   lmct_write_sample PATH [RECORDS [SCHEMA]]   (default 25 records, schema 1)
 * Prints the record count it wrote.
 *   lmct_write_sample --read PATH
 * reads any LMCT file with cbt's reader (tests/lmcache/lmct_storage_check.sh:
 * LMCache's own files) and prints "schema NAME records N", or the reader's
 * status and message on stderr (exit 1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cbt/lmct.h"

static int read_file(const char *path)
{
    cbt_lmct_reader *r;
    cbt_status st = cbt_lmct_reader_open(path, &r);
    if (st) {
        fprintf(stderr, "lmct_write_sample: %s: %s: %s\n", path, cbt_strerror(st),
                cbt_lmct_last_open_message());
        return 1;
    }
    const cbt_lmct_record *rec;
    unsigned long n = 0;
    while ((st = cbt_lmct_reader_next(r, &rec)) == CBT_OK && rec)
        n++;
    if (st) {
        fprintf(stderr, "lmct_write_sample: %s: after %lu records: %s: %s\n", path, n,
                cbt_strerror(st), cbt_lmct_reader_message(r));
        cbt_lmct_reader_close(r);
        return 1;
    }
    printf("schema %s records %lu\n", cbt_lmct_schema_name(cbt_lmct_reader_schema(r)), n);
    cbt_lmct_reader_close(r);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--read"))
        return read_file(argv[2]);
    if (argc < 2) {
        fprintf(stderr, "usage: lmct_write_sample PATH [RECORDS [SCHEMA]] | --read PATH\n");
        return 2;
    }
    unsigned n = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 10) : 25;
    int schema = argc > 3 ? atoi(argv[3]) : 1;
    const char *sname = cbt_lmct_schema_name((cbt_lmct_schema)schema);
    const cbt_lmct_kv meta[] = {CBT_LMCT_KV("cbt_version", CBT_LMCT_S("0.1.0", 5)),
                                CBT_LMCT_KV("clock_ns_per_tick", CBT_LMCT_F(1.0)),
                                CBT_LMCT_KV(CBT_LMCT_META_SCHEMA,
                                            CBT_LMCT_S(sname, (uint32_t)strlen(sname)))};
    cbt_lmct_header h = CBT_LMCT_HEADER_INIT;
    h.level = CBT_LMCT_LEVEL_GPU;
    h.t_mono_start = 100.0;
    h.t_wall_start = 1700000000.5;
    h.sm_config_json = "{\"builders\": \"mp\"}";
    h.sm_config_digest = "0123abcd";
    h.trace_schema_version = schema;
    h.level_meta = meta;
    h.level_meta_count = 3;
    cbt_lmct_writer *w;
    cbt_status st = cbt_lmct_writer_open(argv[1], &h, &w);
    if (st) {
        fprintf(stderr, "lmct_write_sample: %s\n", cbt_strerror(st));
        return 1;
    }
    static const cbt_lmct_value list[] = {{.type = CBT_LMCT_UINT, .v.u = 3}, {.type = CBT_LMCT_INT, .v.i = -3}};
    static const cbt_lmct_kv ring[] = {{.key = "sm", .value = {.type = CBT_LMCT_UINT, .v.u = 12}}};
    for (unsigned i = 0; i < n; i++) {
        cbt_lmct_kv args[] = {
            CBT_LMCT_KV("i", CBT_LMCT_I(-(int64_t)i)),
            CBT_LMCT_KV("u", CBT_LMCT_U(i)),
            CBT_LMCT_KV("f", CBT_LMCT_F(i * 0.25)),
            CBT_LMCT_KV("b", CBT_LMCT_B(i % 2)),
            CBT_LMCT_KV("s", CBT_LMCT_S("req-1", 5)),
            CBT_LMCT_KV("bin", CBT_LMCT_BIN("\x01\x02", 2)),
            CBT_LMCT_KV("nil", ((cbt_lmct_value){.type = CBT_LMCT_NIL})),
            CBT_LMCT_KV("list", ((cbt_lmct_value){.type = CBT_LMCT_ARRAY, .v.array = {list, 2}})),
            CBT_LMCT_KV("ring", ((cbt_lmct_value){.type = CBT_LMCT_MAP, .v.map = {ring, 1}})),
        };
        cbt_lmct_record r = CBT_LMCT_RECORD_INIT;
        r.t_mono = i * 0.001;
        r.t_wall = 1700000000.5 + i * 0.001;
        r.qualname = i % 2 ? "cbt.event.mp.store.end" : "cbt.event.mp.store.start";
        r.args = args;
        r.arg_count = sizeof args / sizeof args[0];
        if ((st = cbt_lmct_writer_append(w, &r))) {
            fprintf(stderr, "lmct_write_sample: append: %s\n", cbt_strerror(st));
            return 1;
        }
    }
    if ((st = cbt_lmct_writer_close(w))) {
        fprintf(stderr, "lmct_write_sample: close: %s\n", cbt_strerror(st));
        return 1;
    }
    printf("%u\n", n);
    return 0;
}
