/* tests/abi_old_caller.c — a caller built against the cbt headers from before
 * the inline producers (cbt.h, "versioned structs"): it calls
 * cbt_config_default(), cbt_memsink_create(), ... out of line, as the
 * declarations below, which those headers had, say. Today's headers define
 * inline wrappers of the same names, so they are renamed away while
 * included. The structs are version 1 of each, the sizes host/core/abi_compat.c
 * freezes: whatever cbt's structs grow to, these calls must write no more. */
#define cbt_config_default cbt_config_default_now_
#define cbt_launch_info_default cbt_launch_info_default_now_
#define cbt_memsink_create cbt_memsink_create_now_
#define cbt_jsonl_sink_create cbt_jsonl_sink_create_now_
#define cbt_trace_file_sink_create cbt_trace_file_sink_create_now_
#define cbt_mp_subscriber_create cbt_mp_subscriber_create_now_
#define cbt_cb_subscriber_create cbt_cb_subscriber_create_now_
#define cbt_otlp_config_default cbt_otlp_config_default_now_
#define cbt_otlp_exporter_create cbt_otlp_exporter_create_now_
#include <stdio.h>
#include <string.h>

#include "testutil.h"

#include "abi_old_caller.h"
#include "cbt/cb.h"
#include "cbt/otlp.h"
#include "cbt/trace_file.h"
#undef cbt_config_default
#undef cbt_launch_info_default
#undef cbt_memsink_create
#undef cbt_jsonl_sink_create
#undef cbt_trace_file_sink_create
#undef cbt_mp_subscriber_create
#undef cbt_cb_subscriber_create
#undef cbt_otlp_config_default
#undef cbt_otlp_exporter_create

/* the version 1 declarations */
cbt_config cbt_config_default(void);
cbt_launch_info cbt_launch_info_default(cbt_kernel_op op, uint32_t n_ctas);
cbt_status cbt_memsink_create(uint32_t capacity, cbt_memsink **out, cbt_sink *sink_out);
cbt_status cbt_jsonl_sink_create(const char *path, cbt_sink *sink_out);
cbt_status cbt_trace_file_sink_create(const char *path, cbt_sink *sink_out);
cbt_status cbt_mp_subscriber_create(uint32_t max_sessions, cbt_subscriber *out);
cbt_status cbt_cb_subscriber_create(uint32_t max_sessions, cbt_subscriber *out);
void cbt_otlp_config_default(cbt_otlp_config *c);
cbt_status cbt_otlp_exporter_create(const cbt_otlp_config *c, cbt_otlp_exporter **out,
                                    cbt_sink *sink_out);

#define V1_SINK 56u /* sizeof cbt_sink, cbt_subscriber version 1 */
#define V1_SUBSCRIBER 80u
#define POISON 0xA5

static int poisoned(const unsigned char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != POISON)
            return 0;
    return 1;
}

typedef union {
    cbt_sink v;
    unsigned char raw[V1_SINK + 32];
} sink_buf;
typedef union {
    cbt_subscriber v;
    unsigned char raw[V1_SUBSCRIBER + 32];
} sub_buf;

/* a version 1 sink: filled, version 1 and its size, nothing past it; freed */
static void check_sink(sink_buf *u, cbt_status st)
{
    assert_int_equal(st, CBT_OK);
    assert_int_equal(u->v.version, 1);
    assert_int_equal(u->v.size, V1_SINK);
    assert_true(u->v.name != NULL && u->v.on_span != NULL && u->v.destroy != NULL);
    assert_true(poisoned(u->raw + V1_SINK, sizeof u->raw - V1_SINK));
    u->v.destroy(u->v.ctx);
}

static void check_subscriber(sub_buf *u, cbt_status st)
{
    assert_int_equal(st, CBT_OK);
    assert_int_equal(u->v.version, 1);
    assert_int_equal(u->v.size, V1_SUBSCRIBER);
    assert_true(u->v.on_event != NULL && u->v.destroy != NULL);
    assert_true(poisoned(u->raw + V1_SUBSCRIBER, sizeof u->raw - V1_SUBSCRIBER));
    u->v.destroy(u->v.ctx);
}

void abi_old_caller_checks(void)
{
    cbt_config c = cbt_config_default();
    assert_true(c.version == 1 && c.size == 72 && c.enabled && c.queue_capacity == 16384);
    cbt_launch_info li = cbt_launch_info_default(CBT_KOP_SCATTER, 3);
    assert_true(li.version == 1 && li.size == 56 && li.op == CBT_KOP_SCATTER && li.n_ctas == 3 &&
                li.mode == CBT_REC_LAUNCH);

    sink_buf u;
    cbt_memsink *m = NULL;
    memset(&u, POISON, sizeof u);
    check_sink(&u, cbt_memsink_create(4, &m, &u.v));
    cbt_memsink_release(m);
    const char *jsonl = "test_abi_old.jsonl", *trace = "test_abi_old.trace.json";
    memset(&u, POISON, sizeof u);
    check_sink(&u, cbt_jsonl_sink_create(jsonl, &u.v));
    memset(&u, POISON, sizeof u);
    check_sink(&u, cbt_trace_file_sink_create(trace, &u.v));
    remove(jsonl);
    remove(trace);

    sub_buf s;
    memset(&s, POISON, sizeof s);
    check_subscriber(&s, cbt_mp_subscriber_create(0, &s.v));
    memset(&s, POISON, sizeof s);
    check_subscriber(&s, cbt_cb_subscriber_create(0, &s.v));

#ifdef CBT_WITH_OTLP
    static union {
        cbt_otlp_config v;
        unsigned char raw[27744 + 32];
    } o;
    memset(&o, POISON, sizeof o);
    cbt_otlp_config_default(&o.v);
    assert_true(o.v.version == 1 && o.v.size == 27744 && o.v.max_batch == 512);
    assert_true(poisoned(o.raw + 27744, 32));
    o.v.disabled = 1;
    cbt_otlp_exporter *e = NULL;
    memset(&u, POISON, sizeof u);
    check_sink(&u, cbt_otlp_exporter_create(&o.v, &e, &u.v));
#endif
}
