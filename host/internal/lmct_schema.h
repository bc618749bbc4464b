/* internal/lmct_schema.h — which LMCache trace schema an LMCT file is
 * (host/record/lmct_schema.c; the layouts are in cbt/lmct.h and
 * docs/recording.md).
 *
 * trace_schema_version alone does not say: LMCache 0.5.7 calls its layout 2
 * (MemoryTags), and an open LMCache pull request (#4871, ObjectKey's
 * cache_salt) calls a different one 2 too. The header gives a first answer
 * (the number, and the layout cbt names in level_meta); each record is then
 * held to it by its content: the codec tags it uses and the fields of the
 * LMCache types whose wire form the schemas change. A record that belongs
 * to another layout is named in `why` and refused (CBT_ERR_LMCT_SCHEMA).
 * Pure functions over decoded values: no allocation, no msgpack. */
#ifndef CBT_INTERNAL_LMCT_SCHEMA_H
#define CBT_INTERNAL_LMCT_SCHEMA_H

#include <stddef.h>
#include <stdint.h>

#include "cbt/lmct.h"

/* The layout a header announces: trace_schema_version `number` and, when
 * level_meta has it, CBT_LMCT_META_SCHEMA naming a layout. CBT_OK with *out
 * set; CBT_ERR_LMCT_SCHEMA with `why` for an unknown number, an unknown
 * name, or a name that is not the number's layout. */
cbt_status cbt_lmct_schema_of_header_(int64_t number, const cbt_lmct_kv *meta, uint32_t n_meta,
                                      cbt_lmct_schema *out, char *why, size_t cap);

/* Is a record's content that of layout `s`? CBT_OK, or CBT_ERR_LMCT_SCHEMA
 * with `why` naming what does not belong (and whose layout it is, when
 * known). A walk of the args: O(values), no allocation. */
cbt_status cbt_lmct_schema_check_record_(cbt_lmct_schema s, const char *qualname,
                                         const cbt_lmct_kv *args, uint32_t n_args, char *why,
                                         size_t cap);

#endif /* CBT_INTERNAL_LMCT_SCHEMA_H */
