/* tests/fuzz_lmct_reader.c — libFuzzer target: the strict LMCT reader
 * (host/record/lmct.c) on arbitrary bytes. Every status is one the header
 * names; a record, when returned, has a qualname and bounded args. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cbt/lmct.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cbt_lmct_reader *r;
    if (cbt_lmct_reader_open_mem(data, size, &r) != CBT_OK)
        return 0;
    const cbt_lmct_record *rec;
    for (int i = 0; i < 1000; i++) {
        cbt_status st = cbt_lmct_reader_next(r, &rec);
        if (st || !rec)
            break;
        if (!rec->qualname || rec->arg_count > CBT_LMCT_MAP_MAX)
            abort();
        for (uint32_t k = 0; k < rec->arg_count; k++)
            if (strlen(rec->args[k].key) > CBT_LMCT_STR_MAX)
                abort();
    }
    cbt_lmct_reader_close(r);
    return 0;
}
