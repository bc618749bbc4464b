/* tests/lmct_write_sample.c — writes an LMCT file at level "gpu" with the C
 * codec (cbt/lmct.h) for tests/lmcache/lmct_reader_check.py, which opens it
 * with LMCache 0.5.6's own TraceReader.
 *   lmct_write_sample PATH [RECORDS]     (default 25 records)
 * Prints the record count it wrote. */
#include <stdio.h>
#include <stdlib.h>

#include "cbt/lmct.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: lmct_write_sample PATH [RECORDS]\n");
        return 2;
    }
    unsigned n = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 10) : 25;
    const cbt_lmct_kv meta[] = {CBT_LMCT_KV("cbt_version", CBT_LMCT_S("0.1.0", 5)),
                                CBT_LMCT_KV("clock_ns_per_tick", CBT_LMCT_F(1.0))};
    cbt_lmct_header h = CBT_LMCT_HEADER_INIT;
    h.level = CBT_LMCT_LEVEL_GPU;
    h.t_mono_start = 100.0;
    h.t_wall_start = 1700000000.5;
    h.sm_config_json = "{\"builders\": \"mp\"}";
    h.sm_config_digest = "0123abcd";
    h.level_meta = meta;
    h.level_meta_count = 2;
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
