/* host/core/abi_compat.c — owns the out-of-line symbols that libcbt.so.0
 * exported before the calls producing versioned structs became inline
 * wrappers (cbt.h, "versioned structs"): cbt_config_default,
 * cbt_launch_info_default, cbt_memsink_create, cbt_jsonl_sink_create,
 * cbt_trace_file_sink_create, cbt_mp_subscriber_create,
 * cbt_cb_subscriber_create and, with OTLP, cbt_otlp_config_default and
 * cbt_otlp_exporter_create. A program built against those headers calls them
 * by name; it keeps linking and running against this libcbt.
 *
 * Such a program's structs are version 1 of each, of the sizes frozen below
 * (V1_*). Each definition hands that size to the _into entry point, which
 * writes no more than the program's struct holds, however much the struct
 * grows later. The headers' inline wrappers carry the same names: they are
 * renamed away before the headers are included, and never called here.
 */
#define cbt_config_default cbt_config_default_inline_
#define cbt_launch_info_default cbt_launch_info_default_inline_
#define cbt_memsink_create cbt_memsink_create_inline_
#define cbt_jsonl_sink_create cbt_jsonl_sink_create_inline_
#define cbt_trace_file_sink_create cbt_trace_file_sink_create_inline_
#define cbt_mp_subscriber_create cbt_mp_subscriber_create_inline_
#define cbt_cb_subscriber_create cbt_cb_subscriber_create_inline_
#define cbt_otlp_config_default cbt_otlp_config_default_inline_
#define cbt_otlp_exporter_create cbt_otlp_exporter_create_inline_
#include <string.h>

#include "cbt.h"
#include "cbt/cb.h"
#include "cbt/otlp.h"
#include "cbt/trace_file.h"
#include "internal/abi.h"
#undef cbt_config_default
#undef cbt_launch_info_default
#undef cbt_memsink_create
#undef cbt_jsonl_sink_create
#undef cbt_trace_file_sink_create
#undef cbt_mp_subscriber_create
#undef cbt_cb_subscriber_create
#undef cbt_otlp_config_default
#undef cbt_otlp_exporter_create

/* sizeof version 1 of each struct: what the callers of these symbols have */
#define V1_CONFIG 72u
#define V1_LAUNCH_INFO 56u
#define V1_SINK 56u
#define V1_SUBSCRIBER 80u
#define V1_OTLP_CONFIG 27744u

/* The two returned by value hand back today's type: when it grows, these
 * must return a frozen copy of the version 1 layout instead. */
_Static_assert(sizeof(cbt_config) == V1_CONFIG,
               "cbt_config grew: the compat cbt_config_default() must return its v1 layout");
_Static_assert(sizeof(cbt_launch_info) == V1_LAUNCH_INFO,
               "cbt_launch_info grew: the compat cbt_launch_info_default() must return its v1 "
               "layout");

/* The header a version 1 caller's struct would have had: zero, then version 1
 * and its size (the old constructors zeroed the whole struct first). */
static void v1_head(void *out, uint32_t size)
{
    memset(out, 0, size);
    cbt_abi_head h = {1u, size};
    memcpy(out, &h, sizeof h);
}

CBT_API cbt_config cbt_config_default(void);
CBT_API cbt_launch_info cbt_launch_info_default(cbt_kernel_op op, uint32_t n_ctas);
CBT_API cbt_status cbt_memsink_create(uint32_t capacity, cbt_memsink **out, cbt_sink *sink_out);
CBT_API cbt_status cbt_jsonl_sink_create(const char *path, cbt_sink *sink_out);
CBT_API cbt_status cbt_trace_file_sink_create(const char *path, cbt_sink *sink_out);
CBT_API cbt_status cbt_mp_subscriber_create(uint32_t max_sessions, cbt_subscriber *out);
CBT_API cbt_status cbt_cb_subscriber_create(uint32_t max_sessions, cbt_subscriber *out);

cbt_config cbt_config_default(void)
{
    cbt_config c;
    v1_head(&c, V1_CONFIG);
    (void)cbt_config_default_into(&c);
    return c;
}

cbt_launch_info cbt_launch_info_default(cbt_kernel_op op, uint32_t n_ctas)
{
    cbt_launch_info li;
    v1_head(&li, V1_LAUNCH_INFO);
    (void)cbt_launch_info_default_into(&li, op, n_ctas);
    return li;
}

cbt_status cbt_memsink_create(uint32_t capacity, cbt_memsink **out, cbt_sink *sink_out)
{
    if (sink_out)
        v1_head(sink_out, V1_SINK);
    return cbt_memsink_create_into(capacity, out, sink_out);
}

cbt_status cbt_jsonl_sink_create(const char *path, cbt_sink *sink_out)
{
    if (sink_out)
        v1_head(sink_out, V1_SINK);
    return cbt_jsonl_sink_create_into(path, sink_out);
}

cbt_status cbt_trace_file_sink_create(const char *path, cbt_sink *sink_out)
{
    if (sink_out)
        v1_head(sink_out, V1_SINK);
    return cbt_trace_file_sink_create_into(path, sink_out);
}

cbt_status cbt_mp_subscriber_create(uint32_t max_sessions, cbt_subscriber *out)
{
    if (out)
        v1_head(out, V1_SUBSCRIBER);
    return cbt_mp_subscriber_create_into(max_sessions, out);
}

cbt_status cbt_cb_subscriber_create(uint32_t max_sessions, cbt_subscriber *out)
{
    if (out)
        v1_head(out, V1_SUBSCRIBER);
    return cbt_cb_subscriber_create_into(max_sessions, out);
}

#ifdef CBT_WITH_OTLP
CBT_API void cbt_otlp_config_default(cbt_otlp_config *c);
CBT_API cbt_status cbt_otlp_exporter_create(const cbt_otlp_config *c, cbt_otlp_exporter **out,
                                            cbt_sink *sink_out);

void cbt_otlp_config_default(cbt_otlp_config *c)
{
    if (!c)
        return;
    v1_head(c, V1_OTLP_CONFIG);
    (void)cbt_otlp_config_default_into(c);
}

cbt_status cbt_otlp_exporter_create(const cbt_otlp_config *c, cbt_otlp_exporter **out,
                                    cbt_sink *sink_out)
{
    if (sink_out)
        v1_head(sink_out, V1_SINK);
    return cbt_otlp_exporter_create_into(c, out, sink_out);
}
#endif
