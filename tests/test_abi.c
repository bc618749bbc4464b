/* tests/test_abi.c — the versioned-struct rule of cbt.h ("Versioned structs")
 * in both directions: an older caller (smaller `size`) and a newer one
 * (larger `size`), for structs handed in (cbt_config, cbt_sink,
 * cbt_subscriber, cbt_launch_info, cbt_otlp_config), structs cbt fills
 * (cbt_metrics and the *_stats) and the structs the inline producers'
 * entry points fill (cbt_config_default_into and the other _into calls).
 * A newer caller's struct is simulated by the current struct inside a larger
 * buffer whose tail is poisoned, an older caller's by a smaller size in a
 * poisoned buffer. */
#include <stdio.h>
#include <stddef.h>
#include <string.h>

#include "testutil.h"

#include "cbt/cb.h"
#include "cbt/cupti.h"
#include "cbt/otlp.h"
#include "cbt/pspan.h"
#include "cbt/trace_file.h"

#define POISON 0xA5

/* True when the n bytes at p all hold POISON. */
static int poisoned(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != POISON)
            return 0;
    return 1;
}

/* An older caller's config stops before ring_placement: the field past its
 * size must take the default, whatever lies in memory there. */
static void config_older_caller(void **state)
{
    (void)state;
    union {
        cbt_config c;
        unsigned char raw[sizeof(cbt_config)];
    } u;
    u.c = cbt_config_default();
    u.c.poll_interval_us = 50;
    u.c.size = (uint32_t)offsetof(cbt_config, ring_placement);
    /* what an older caller's memory may hold there: an invalid placement,
     * which check_config would refuse if cbt read it */
    memset(u.raw + offsetof(cbt_config, ring_placement), POISON,
           sizeof u.raw - offsetof(cbt_config, ring_placement));
    assert_int_equal(cbt_init(&u.c), CBT_OK);
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, CBT_EV_MP_REQUEST_START, "old-caller"), CBT_OK);
    assert_int_equal(cbt_publish(&e), CBT_OK);
    assert_int_equal(cbt_flush(2000), CBT_OK);
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m), CBT_OK);
    assert_int_equal(m.published, 1);
    assert_int_equal(cbt_shutdown(), CBT_OK);

    /* only the header: every field a default */
    cbt_config h = cbt_config_default();
    h.size = 8;
    assert_int_equal(cbt_init(&h), CBT_OK);
    assert_non_null(cbt_tracer_get());
    assert_int_equal(cbt_shutdown(), CBT_OK);
}

/* A newer caller's config is refused, naming the sizes; nothing starts. */
static void config_newer_caller(void **state)
{
    (void)state;
    union {
        cbt_config c;
        unsigned char raw[sizeof(cbt_config) + 16];
    } u;
    memset(&u, 0, sizeof u);
    u.c = cbt_config_default();
    u.c.size = (uint32_t)sizeof u.raw;
    assert_int_equal(cbt_init(&u.c), CBT_ERR_VERSION);
    assert_null(cbt_tracer_get());
    u.c.size = sizeof(cbt_config);
    u.c.version = 0;
    assert_int_equal(cbt_init(&u.c), CBT_ERR_VERSION);
    assert_null(cbt_tracer_get());
    assert_string_not_equal(cbt_strerror(CBT_ERR_VERSION), cbt_strerror(CBT_ERR_INVAL));
}

/* cbt_metrics_get: an older caller's struct ends before `lanes`; nothing past
 * it is written and size says what was. A newer caller's tail stays as it was. */
static void metrics_both_directions(void **state)
{
    (void)state;
    tu_start(NULL);
    tu_pub(CBT_EV_MP_REQUEST_START, "m");
    tu_flush();

    union {
        cbt_metrics m;
        unsigned char raw[sizeof(cbt_metrics) + 32];
    } u;
    size_t old = offsetof(cbt_metrics, lanes);
    memset(&u, POISON, sizeof u);
    u.m.version = CBT_METRICS_VERSION;
    u.m.size = (uint32_t)old;
    assert_int_equal(cbt_metrics_get(&u.m), CBT_OK);
    assert_int_equal(u.m.size, old);
    assert_int_equal(u.m.published, 1);
    assert_true(poisoned(u.raw + old, sizeof u.raw - old));

    /* a version-1 caller (before meta_truncated): everything it knows, and
     * not the counter it does not */
    size_t v1 = offsetof(cbt_metrics, meta_truncated);
    memset(&u, POISON, sizeof u);
    u.m.version = 1;
    u.m.size = (uint32_t)v1;
    assert_int_equal(cbt_metrics_get(&u.m), CBT_OK);
    assert_int_equal(u.m.size, v1);
    assert_int_equal(u.m.version, CBT_METRICS_VERSION);
    assert_int_equal(u.m.published, 1);
    assert_int_equal(u.m.spans_unsampled, 0);
    assert_true(poisoned(u.raw + v1, sizeof u.raw - v1));

    memset(&u, POISON, sizeof u);
    u.m.version = CBT_METRICS_VERSION;
    u.m.size = (uint32_t)sizeof u.raw;
    assert_int_equal(cbt_metrics_get(&u.m), CBT_OK);
    assert_int_equal(u.m.size, sizeof(cbt_metrics));
    assert_int_equal(u.m.meta_truncated, 0);
    assert_int_equal(u.m.published, 1);
    assert_true(poisoned(u.raw + sizeof(cbt_metrics), sizeof u.raw - sizeof(cbt_metrics)));

    /* size not set: refused, nothing written past the header */
    memset(&u, POISON, sizeof u);
    u.m.version = CBT_METRICS_VERSION;
    u.m.size = 0;
    assert_int_equal(cbt_metrics_get(&u.m), CBT_ERR_VERSION);
    assert_true(poisoned(u.raw + 8, sizeof u.raw - 8));
    tu_stop();
}

/* Every *_stats getter writes at most the caller's size: a struct that knows
 * only the header and its first counter gets that counter and nothing else. */
#define CHECK_OUT(type, call)                                                     \
    do {                                                                          \
        union {                                                                   \
            type v;                                                               \
            unsigned char raw[sizeof(type) + 16];                                 \
        } u_;                                                                     \
        memset(&u_, POISON, sizeof u_);                                           \
        u_.v.version = type##_version_;                                           \
        u_.v.size = 16;                                                           \
        type *o_ = &u_.v;                                                        \
        cbt_status st_ = (call);                                                  \
        assert_true(st_ == CBT_OK || st_ == CBT_ERR_UNSUPPORTED);                 \
        assert_int_equal(u_.v.size, 16);                                          \
        assert_true(poisoned(u_.raw + 16, sizeof u_.raw - 16));                   \
        memset(&u_, POISON, sizeof u_);                                           \
        u_.v.version = type##_version_;                                           \
        u_.v.size = (uint32_t)sizeof u_.raw;                                      \
        st_ = (call);                                                             \
        assert_true(st_ == CBT_OK || st_ == CBT_ERR_UNSUPPORTED);                 \
        assert_int_equal(u_.v.size, sizeof(type));                                \
        assert_true(poisoned(u_.raw + sizeof(type), 16));                         \
        u_.v.size = 0;                                                            \
        assert_int_equal((call), CBT_ERR_VERSION);                                \
    } while (0)

static void stats_getters_bounded(void **state)
{
    (void)state;
    tu_start(NULL);
    CHECK_OUT(cbt_mp_stats, cbt_mp_stats_get(NULL, o_));
    CHECK_OUT(cbt_pspan_stats, cbt_pspan_stats_get(o_));
    CHECK_OUT(cbt_ring_stats, cbt_ring_stats_get(o_));
    CHECK_OUT(cbt_cupti_stats, cbt_cupti_stats_get(o_));
#ifdef CBT_WITH_OTLP
    CHECK_OUT(cbt_otlp_stats, cbt_otlp_exporter_stats(NULL, o_));
#endif
    cbt_subscriber cb;
    assert_int_equal(cbt_cb_subscriber_create(0, &cb), CBT_OK);
    assert_int_equal(cbt_add_subscriber(&cb), CBT_OK);
    CHECK_OUT(cbt_cb_stats, cbt_cb_stats_get(NULL, o_));
    cbt_stream *st;
    assert_int_equal(cbt_stream_cpu_create(0, &st), CBT_OK);
    CHECK_OUT(cbt_stream_stats, cbt_stream_stats_get(st, o_));
    cbt_stream_destroy(st);
    tu_stop();
}

/* cbt_mp_stats and cbt_cb_stats are one struct now, cbt_tree_stats
 * (cbt/request_tree.h), and a program built against their older headers
 * still gets what it knows. cbt_mp_stats versions 1 and 2 are
 * cbt_tree_stats's first fields, at their old offsets; cbt_cb_stats versions
 * 1 and 2 had a layout of their own, which cbt_cb_stats_get fills for a
 * caller saying version 1 or 2. Both old layouts, as they were: */
#define MP_STATS_V2_FIELDS(F)                                                                \
    F(roots_opened) F(roots_lazy) F(roots_closed) F(roots_deferred) F(children_opened)      \
    F(children_closed) F(unmatched_end) F(duplicate_request_end) F(request_end_unknown)    \
    F(sessions_full) F(children_full) F(incomplete_at_shutdown) F(sessions_open)           \
    F(late_children) F(evicted_idle) F(evicted_full) F(evicted_span_pool)                  \
    F(children_evicted_idle) F(children_evicted_full) F(timeout_spans) F(transfer_spans)   \
    F(transfer_samples_skipped) F(sessions_reused)
#define CB_STATS_V2_FIELDS(F)                                                                \
    F(roots_opened) F(roots_closed) F(roots_deferred) F(children_opened) F(children_closed) \
    F(point_events) F(unmatched_end) F(no_root) F(duplicate_request_end)                   \
    F(request_end_unknown) F(sessions_full) F(children_full) F(incomplete_at_shutdown)     \
    F(sessions_open) F(roots_remote) F(sampled_out) F(sibling_request_end) F(late_children) \
    F(evicted_idle) F(evicted_full) F(evicted_span_pool) F(children_evicted_idle)          \
    F(children_evicted_full) F(sessions_reused)
#define V2_FIELD_(name) uint64_t name;
typedef struct {
    uint32_t version, size;
    CB_STATS_V2_FIELDS(V2_FIELD_)
} cb_stats_v2;
#undef V2_FIELD_
#define CB_STATS_V1_SIZE (offsetof(cb_stats_v2, sampled_out) + 8)

static void tree_stats_older_callers(void **state)
{
    (void)state;
    /* MP: the old offsets hold (so its version 1 and 2 sizes, 112 and 192) */
#define OFFSET_(name) offsetof(cbt_tree_stats, name),
    static const size_t mp_at[] = {MP_STATS_V2_FIELDS(OFFSET_)};
#undef OFFSET_
    for (size_t i = 0; i < sizeof mp_at / sizeof mp_at[0]; i++)
        if (mp_at[i] != 8 + 8 * i)
            fail_msg("cbt_mp_stats v2 field %zu moved to offset %zu", i, mp_at[i]);
    assert_int_equal(offsetof(cbt_tree_stats, sessions_open) + 8, 112);

    /* CB: counters that differ, read by a current caller and by old ones */
    tu_start(NULL);
    cbt_subscriber sub;
    assert_int_equal(cbt_cb_subscriber_create(0, &sub), CBT_OK);
    assert_int_equal(cbt_add_subscriber(&sub), CBT_OK);
    tu_pub(CBT_EV_CB_REQUEST_START, "a");
    tu_pub(CBT_EV_CB_SCATTER_END, "a");     /* unmatched_end */
    tu_pub(CBT_EV_CB_CHUNKS_EVICTED, "b");  /* point_events, no_root */
    tu_pub(CBT_EV_CB_CHUNKS_EVICTED, "a");  /* point_events */
    tu_pub(CBT_EV_CB_REQUEST_END, "a");     /* roots_closed */
    tu_pub(CBT_EV_CB_REQUEST_END, "a");     /* sibling_request_end */
    tu_flush();
    cbt_cb_stats now = CBT_STRUCT_INIT(cbt_cb_stats);
    assert_int_equal(cbt_cb_stats_get(NULL, &now), CBT_OK);
    assert_int_equal(now.version, CBT_TREE_STATS_VERSION);
    assert_int_equal(now.size, sizeof now);
    assert_int_equal(now.roots_opened, 1);
    assert_int_equal(now.point_events, 2);
    assert_int_equal(now.no_root, 1);
    assert_int_equal(now.unmatched_end, 1);
    assert_int_equal(now.sibling_request_end, 1);

    union {
        cb_stats_v2 v;
        unsigned char raw[sizeof(cb_stats_v2) + 16];
    } u;
    memset(&u, POISON, sizeof u);
    u.v.version = 2;
    u.v.size = (uint32_t)sizeof u.v;
    assert_int_equal(cbt_cb_stats_get(NULL, (cbt_cb_stats *)(void *)&u.v), CBT_OK);
    assert_int_equal(u.v.version, 2);
    assert_int_equal(u.v.size, sizeof u.v);
#define SAME_(name)                                                                      \
    if (u.v.name != now.name)                                                            \
        fail_msg("cbt_cb_stats v2 " #name ": %llu, now %llu", (unsigned long long)u.v.name, \
                 (unsigned long long)now.name);
    CB_STATS_V2_FIELDS(SAME_)
#undef SAME_
    assert_true(poisoned(u.raw + sizeof u.v, 16));

    memset(&u, POISON, sizeof u);
    u.v.version = 1;
    u.v.size = (uint32_t)CB_STATS_V1_SIZE;
    assert_int_equal(cbt_cb_stats_get(NULL, (cbt_cb_stats *)(void *)&u.v), CBT_OK);
    assert_int_equal(u.v.size, CB_STATS_V1_SIZE);
    assert_int_equal(u.v.point_events, 2);
    assert_int_equal(u.v.sampled_out, 0);
    assert_true(poisoned(u.raw + CB_STATS_V1_SIZE, sizeof u.raw - CB_STATS_V1_SIZE));
    tu_stop();
}

static int g_on_span, g_bad_called;
static cbt_status count_span(void *ctx, const cbt_span *s)
{
    (void)ctx;
    (void)s;
    g_on_span++;
    return CBT_OK;
}
static void bad_destroy(void *ctx)
{
    (void)ctx;
    g_bad_called++;
}

/* A sink from an older caller knows on_span but not destroy or on_cta: the
 * callbacks past its size are NULL to cbt, whatever the memory holds. A
 * subscriber likewise. */
static void sink_older_caller(void **state)
{
    (void)state;
    tu_start(NULL);
    cbt_sink k;
    memset(&k, 0, sizeof k);
    k.version = CBT_SINK_VERSION;
    k.size = (uint32_t)offsetof(cbt_sink, destroy);
    k.name = "old";
    k.on_span = count_span;
    k.destroy = bad_destroy; /* past size: must never be called */
    assert_int_equal(cbt_add_sink(&k), CBT_OK);

    union {
        cbt_sink s;
        unsigned char raw[sizeof(cbt_sink) + 16];
    } nu;
    memset(&nu, 0, sizeof nu);
    nu.s = k;
    nu.s.size = (uint32_t)sizeof nu.raw;
    assert_int_equal(cbt_add_sink(&nu.s), CBT_ERR_VERSION);

    cbt_subscriber sub;
    memset(&sub, 0, sizeof sub);
    sub.version = CBT_SUBSCRIBER_VERSION;
    sub.size = (uint32_t)sizeof sub + 8;
    assert_int_equal(cbt_add_subscriber(&sub), CBT_ERR_VERSION);

    tu_pub(CBT_EV_MP_REQUEST_START, "s");
    tu_pub(CBT_EV_MP_REQUEST_END, "s");
    tu_flush();
    assert_true(g_on_span >= 1);
    tu_stop();
    assert_int_equal(g_bad_called, 0);
}

static uint64_t bad_spans_lost(void *ctx)
{
    (void)ctx;
    g_bad_called++;
    return 1000;
}

static uint64_t five_lost(void *ctx)
{
    (void)ctx;
    return 5;
}

/* A version-1 sink (sizeof before spans_lost was appended) is accepted, and
 * the spans_lost its memory may hold past its size is never called: it
 * counts 0 in sink_spans_lost. A version-2 sink's count is summed. */
static void sink_v1_without_spans_lost(void **state)
{
    (void)state;
    g_bad_called = 0;
    tu_start(NULL);
    cbt_sink k;
    memset(&k, 0, sizeof k);
    k.version = 1;
    k.size = (uint32_t)offsetof(cbt_sink, spans_lost); /* a v1 caller's sizeof */
    k.name = "v1";
    k.on_span = count_span;
    k.spans_lost = bad_spans_lost; /* past size: must never be called */
    assert_int_equal(cbt_add_sink(&k), CBT_OK);
    cbt_sink k2 = CBT_STRUCT_INIT(cbt_sink);
    k2.name = "v2";
    k2.on_span = count_span;
    k2.spans_lost = five_lost;
    assert_int_equal(cbt_add_sink(&k2), CBT_OK);
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m), CBT_OK);
    assert_int_equal(m.sink_spans_lost, 5);
    memset(&m, 0, sizeof m);
    m.version = CBT_METRICS_VERSION;
    m.size = 4; /* short of the header: refused, and the tracer keeps running */
    assert_int_equal(cbt_shutdown_final(&m), CBT_ERR_VERSION);
    assert_non_null(cbt_tracer_get());
    m = (cbt_metrics)CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_shutdown_final(&m), CBT_OK);
    assert_null(cbt_tracer_get());
    assert_int_equal(m.sink_spans_lost, 5);
    assert_int_equal(g_bad_called, 0);
    assert_int_equal(cbt_shutdown_final(&m), CBT_ERR_NOT_INITIALIZED);
    tu_stop(); /* the memory sink's snapshot; the tracer is gone already */
}

/* cbt_launch_info from an older caller: n_ctas and what follows default. */
static void launch_info_both_directions(void **state)
{
    (void)state;
    tu_start(NULL);
    cbt_stream *s;
    assert_int_equal(cbt_stream_cpu_create(0, &s), CBT_OK);
    union {
        cbt_launch_info li;
        unsigned char raw[sizeof(cbt_launch_info) + 16];
    } u;
    memset(&u, POISON, sizeof u);
    u.li.version = CBT_LAUNCH_INFO_VERSION;
    u.li.size = (uint32_t)offsetof(cbt_launch_info, mode); /* knows op only */
    u.li.op = CBT_KOP_USER;
    cbt_kspan span;
    assert_int_equal(cbt_launch_begin(s, "k", &u.li, &span), CBT_OK);
    assert_non_null(span.ring);
    assert_int_equal(span.mode, CBT_REC_LAUNCH); /* the default, not the poison */
    u.li.size = (uint32_t)sizeof u.raw;
    assert_int_equal(cbt_launch_begin(s, "k", &u.li, &span), CBT_ERR_VERSION);
    assert_null(span.ring);
    cbt_stream_sync(s);
    cbt_stream_destroy(s);
    tu_stop();
}

#ifdef CBT_WITH_OTLP
/* cbt_otlp_config_from_env works on a full copy and writes back no more than
 * an older caller's size; a newer caller's config is refused by create. */
static void otlp_config_both_directions(void **state)
{
    (void)state;
    static union {
        cbt_otlp_config c;
        unsigned char raw[sizeof(cbt_otlp_config) + 32];
    } u;
    memset(&u, POISON, sizeof u);
    cbt_otlp_config_default(&u.c);
    size_t old = offsetof(cbt_otlp_config, endpoint) + sizeof u.c.endpoint;
    u.c.size = (uint32_t)old;
    memset(u.raw + old, POISON, sizeof u.raw - old);
    assert_int_equal(cbt_otlp_config_from_env(&u.c, NULL), CBT_OK);
    assert_int_equal(u.c.size, old);
    assert_true(poisoned(u.raw + old, sizeof u.raw - old));

    cbt_otlp_config_default(&u.c);
    u.c.size = (uint32_t)sizeof u.raw;
    cbt_otlp_exporter *e = NULL;
    cbt_sink sink;
    assert_int_equal(cbt_otlp_exporter_create(&u.c, &e, &sink), CBT_ERR_VERSION);
    assert_null(e);
}
#endif

#ifdef CBT_WITH_OTLP
/* A version-1 cbt_otlp_config (sizeof before final_stats was appended) is
 * accepted by create; the final_stats its memory may hold past its size is
 * never written (the poison would be a wild pointer). A version-2 caller's
 * final_stats is filled, by the out-struct rule, when the exporter goes. */
static void otlp_config_v1_without_final_stats(void **state)
{
    (void)state;
    static union {
        cbt_otlp_config c;
        unsigned char raw[sizeof(cbt_otlp_config) + 16];
    } u;
    tu_start(NULL);
    memset(&u, POISON, sizeof u);
    cbt_otlp_config_default(&u.c);
    size_t v1 = offsetof(cbt_otlp_config, reserved) + sizeof u.c.reserved;
    u.c.version = 1;
    u.c.size = (uint32_t)v1;
    memset(u.raw + v1, POISON, sizeof u.raw - v1);
    cbt_otlp_exporter *e = NULL;
    cbt_sink sink;
    assert_int_equal(cbt_otlp_exporter_create(&u.c, &e, &sink), CBT_OK);
    assert_non_null(e);
    assert_int_equal(cbt_add_sink(&sink), CBT_OK);

    cbt_otlp_config c2;
    cbt_otlp_config_default(&c2);
    assert_null(c2.final_stats);
    c2.disabled = 1;
    /* a caller that knows spans_dropped but not what follows */
    union {
        cbt_otlp_stats s;
        unsigned char raw[sizeof(cbt_otlp_stats)];
    } fs;
    memset(&fs, POISON, sizeof fs);
    size_t ns = offsetof(cbt_otlp_stats, spans_dropped) + sizeof fs.s.spans_dropped;
    fs.s.version = CBT_OTLP_STATS_VERSION;
    fs.s.size = (uint32_t)ns;
    c2.final_stats = &fs.s;
    assert_int_equal(cbt_otlp_exporter_create(&c2, &e, &sink), CBT_OK);
    assert_int_equal(cbt_add_sink(&sink), CBT_OK);
    assert_true(poisoned(&fs.s.spans_queued, 8));
    tu_stop();
    assert_int_equal(fs.s.size, ns);
    assert_int_equal(fs.s.spans_queued, 0);
    assert_int_equal(fs.s.spans_dropped, 0);
    assert_true(poisoned(fs.raw + ns, sizeof fs.raw - ns));
}

/* A version-2 cbt_otlp_config (sizeof before self_metrics was appended) is
 * accepted: the poison past its size, which as self_metrics would be
 * refused (not AUTO, ON or OFF), is never read; the field takes its
 * default. */
static void otlp_config_v2_without_self_metrics(void **state)
{
    (void)state;
    static union {
        cbt_otlp_config c;
        unsigned char raw[sizeof(cbt_otlp_config) + 16];
    } u;
    memset(&u, POISON, sizeof u);
    cbt_otlp_config_default(&u.c);
    size_t v2 = offsetof(cbt_otlp_config, final_stats) + sizeof u.c.final_stats;
    u.c.version = 2;
    u.c.size = (uint32_t)v2;
    memset(u.raw + v2, POISON, sizeof u.raw - v2);
    cbt_otlp_exporter *e = NULL;
    cbt_sink sink;
    assert_int_equal(cbt_otlp_exporter_create(&u.c, &e, &sink), CBT_OK);
    assert_non_null(e);
    sink.destroy(sink.ctx);
    /* the full struct with that value is refused: the poison would count */
    cbt_otlp_config c;
    cbt_otlp_config_default(&c);
    memset(&c.self_metrics, POISON, sizeof c.self_metrics);
    assert_int_equal(cbt_otlp_exporter_create(&c, &e, &sink), CBT_ERR_INVAL);
}
#endif

/* ---- the entry points of the inline producers (cbt.h, "versioned structs") ---- */

/* A struct of `type` knowing its first `n` bytes (an older caller's), in a
 * poisoned buffer with room past it (for a newer caller's). */
#define TRUNCATED(u, type, ver, n)                                                \
    union {                                                                       \
        type v;                                                                   \
        unsigned char raw[sizeof(type) + 16];                                     \
    } u;                                                                          \
    memset(&u, POISON, sizeof u);                                                 \
    u.v.version = (ver);                                                          \
    u.v.size = (uint32_t)(n)

/* The _default_into calls: an older caller's struct gets the defaults it
 * knows, and nothing past its size; a newer one's gets every field this cbt
 * knows, is told CBT_ERR_VERSION and keeps its own size (so it stays refused
 * where it is handed in); a size short of the header writes nothing. */
static void defaults_into_bounded(void **state)
{
    (void)state;
    size_t n = offsetof(cbt_config, jsonl_path); /* up to shutdown_timeout_ms */
    TRUNCATED(c, cbt_config, CBT_CONFIG_VERSION, n);
    assert_int_equal(cbt_config_default_into(&c.v), CBT_OK);
    assert_int_equal(c.v.version, CBT_CONFIG_VERSION);
    assert_int_equal(c.v.size, n);
    assert_true(c.v.enabled && c.v.mp_subscriber && c.v.queue_capacity == 65536 &&
                c.v.shutdown_timeout_ms == 2000);
    assert_true(poisoned(c.raw + n, sizeof c.raw - n));
    c.v.size = (uint32_t)sizeof c.raw;
    assert_int_equal(cbt_config_default_into(&c.v), CBT_ERR_VERSION);
    assert_int_equal(c.v.size, sizeof c.raw);
    assert_true(c.v.jsonl_path == NULL && c.v.ring_placement == CBT_RING_MAPPED &&
                c.v.reserved == 0);
    assert_true(poisoned(c.raw + sizeof(cbt_config), 16));
    assert_int_equal(cbt_init(&c.v), CBT_ERR_VERSION); /* still refused */
    memset(&c, POISON, sizeof c);
    c.v.size = 4;
    assert_int_equal(cbt_config_default_into(&c.v), CBT_ERR_VERSION);
    assert_true(poisoned(c.raw + 8, sizeof c.raw - 8));
    assert_int_equal(cbt_config_default_into(NULL), CBT_ERR_INVAL);

    n = offsetof(cbt_launch_info, name); /* up to n_ctas */
    TRUNCATED(li, cbt_launch_info, CBT_LAUNCH_INFO_VERSION, n);
    assert_int_equal(cbt_launch_info_default_into(&li.v, CBT_KOP_L2_LOAD, 7), CBT_OK);
    assert_int_equal(li.v.size, n);
    assert_true(li.v.op == CBT_KOP_L2_LOAD && li.v.mode == CBT_REC_LAUNCH && li.v.n_ctas == 7);
    assert_true(poisoned(li.raw + n, sizeof li.raw - n));
    li.v.size = (uint32_t)sizeof li.raw;
    assert_int_equal(cbt_launch_info_default_into(&li.v, CBT_KOP_USER, 1), CBT_ERR_VERSION);
    assert_true(li.v.sampled_out == 0 && poisoned(li.raw + sizeof(cbt_launch_info), 16));
    li.v.size = 7;
    assert_int_equal(cbt_launch_info_default_into(&li.v, CBT_KOP_USER, 1), CBT_ERR_VERSION);
    assert_int_equal(cbt_launch_info_default_into(NULL, CBT_KOP_USER, 1), CBT_ERR_INVAL);

#ifdef CBT_WITH_OTLP
    static union {
        cbt_otlp_config v;
        unsigned char raw[sizeof(cbt_otlp_config) + 16];
    } o;
    n = offsetof(cbt_otlp_config, endpoint) + 16; /* "http://localhost" */
    memset(&o, POISON, sizeof o);
    o.v.version = CBT_OTLP_CONFIG_VERSION;
    o.v.size = (uint32_t)n;
    assert_int_equal(cbt_otlp_config_default_into(&o.v), CBT_OK);
    assert_int_equal(o.v.size, n);
    assert_true(o.v.disabled == 0 && memcmp(o.v.endpoint, "http://localhost", 16) == 0);
    assert_true(poisoned(o.raw + n, sizeof o.raw - n));
    o.v.size = (uint32_t)sizeof o.raw;
    assert_int_equal(cbt_otlp_config_default_into(&o.v), CBT_ERR_VERSION);
    assert_true(o.v.metrics_interval_ms == 60000 && o.v.reserved == 0 &&
                poisoned(o.raw + sizeof(cbt_otlp_config), 16));
    assert_int_equal(cbt_otlp_config_default_into(NULL), CBT_ERR_INVAL);
#endif
}

/* A constructor's _into call, through an adapter: `arg` is what it needs. */
typedef cbt_status (*sink_ctor)(void *arg, cbt_sink *out);
typedef cbt_status (*sub_ctor)(void *arg, cbt_subscriber *out);

static cbt_status memsink_into(void *arg, cbt_sink *out)
{
    cbt_memsink *m = NULL;
    cbt_status st = cbt_memsink_create_into(*(uint32_t *)arg, &m, out);
    if (st == CBT_OK)
        cbt_memsink_release(m); /* the caller's reference: the sink's destroy frees it */
    return st;
}
static cbt_status jsonl_into(void *arg, cbt_sink *out) { return cbt_jsonl_sink_create_into(arg, out); }
static cbt_status trace_file_into(void *arg, cbt_sink *out)
{
    return cbt_trace_file_sink_create_into(arg, out);
}
#ifdef CBT_WITH_OTLP
static cbt_status otlp_into(void *arg, cbt_sink *out)
{
    cbt_otlp_exporter *e = NULL;
    return cbt_otlp_exporter_create_into(arg, &e, out);
}
#endif
static cbt_status mp_into(void *arg, cbt_subscriber *out)
{
    return cbt_mp_subscriber_create_into(*(uint32_t *)arg, out);
}
static cbt_status cb_into(void *arg, cbt_subscriber *out)
{
    return cbt_cb_subscriber_create_into(*(uint32_t *)arg, out);
}

/* An older caller's sink knows name, ctx and on_span: those are filled,
 * size says so, nothing past it is written; a full one from the same
 * constructor lends its destroy to release both. A size short of the header
 * is refused before anything is created (a leak would show under ASan). */
static void check_sink_into(sink_ctor create, void *arg)
{
    size_t n = offsetof(cbt_sink, flush);
    TRUNCATED(u, cbt_sink, CBT_SINK_VERSION, n);
    assert_int_equal(create(arg, &u.v), CBT_OK);
    assert_int_equal(u.v.version, CBT_SINK_VERSION);
    assert_int_equal(u.v.size, n);
    assert_true(u.v.name != NULL && u.v.ctx != NULL && u.v.on_span != NULL);
    assert_true(poisoned(u.raw + n, sizeof u.raw - n));
    cbt_sink full = CBT_STRUCT_INIT(cbt_sink);
    assert_int_equal(create(arg, &full), CBT_OK);
    assert_int_equal(full.size, sizeof full);
    assert_non_null(full.destroy);
    full.destroy(u.v.ctx);
    full.destroy(full.ctx);
    /* a newer caller's: this cbt's fields, and the size it wrote */
    memset(&u, POISON, sizeof u);
    u.v.version = CBT_SINK_VERSION;
    u.v.size = (uint32_t)sizeof u.raw;
    assert_int_equal(create(arg, &u.v), CBT_OK);
    assert_int_equal(u.v.size, sizeof(cbt_sink));
    assert_true(poisoned(u.raw + sizeof(cbt_sink), 16));
    assert_int_equal(cbt_add_sink(&u.v), CBT_OK); /* this cbt's own size: the tracer destroys it */
    memset(&u, POISON, sizeof u);
    u.v.size = 4;
    assert_int_equal(create(arg, &u.v), CBT_ERR_VERSION);
    assert_true(poisoned(u.raw + 8, sizeof u.raw - 8));
}

/* Likewise for a subscriber that knows name, ctx, mask and on_event. */
static void check_subscriber_into(sub_ctor create, void *arg)
{
    size_t n = offsetof(cbt_subscriber, on_shutdown);
    TRUNCATED(u, cbt_subscriber, CBT_SUBSCRIBER_VERSION, n);
    assert_int_equal(create(arg, &u.v), CBT_OK);
    assert_int_equal(u.v.size, n);
    assert_true(u.v.name != NULL && u.v.ctx != NULL && u.v.on_event != NULL);
    assert_true(poisoned(u.raw + n, sizeof u.raw - n));
    cbt_subscriber full = CBT_STRUCT_INIT(cbt_subscriber);
    assert_int_equal(create(arg, &full), CBT_OK);
    assert_non_null(full.destroy);
    assert_memory_equal(u.v.mask, full.mask, sizeof full.mask);
    full.destroy(u.v.ctx);
    full.destroy(full.ctx);
    memset(&u, POISON, sizeof u);
    u.v.size = 4;
    assert_int_equal(create(arg, &u.v), CBT_ERR_VERSION);
    assert_true(poisoned(u.raw + 8, sizeof u.raw - 8));
}

static void constructors_into_bounded(void **state)
{
    (void)state;
    tu_start(NULL); /* a tracer, so the newer caller's sink can be added */
    uint32_t cap = 8;
    check_sink_into(memsink_into, &cap);
    const char *jsonl = "test_abi_sink.jsonl", *trace = "test_abi_sink.trace.json";
    check_sink_into(jsonl_into, (void *)jsonl);
    check_sink_into(trace_file_into, (void *)trace);
#ifdef CBT_WITH_OTLP
    static cbt_otlp_config oc;
    cbt_otlp_config_default(&oc);
    oc.disabled = 1; /* no thread, no network: the sink is the same */
    check_sink_into(otlp_into, &oc);
#endif
    uint32_t sessions = 16;
    check_subscriber_into(mp_into, &sessions);
    check_subscriber_into(cb_into, &sessions);
    cbt_memsink *m = (cbt_memsink *)&sessions;
    assert_int_equal(cbt_memsink_create_into(8, &m, NULL), CBT_ERR_INVAL);
    assert_int_equal(cbt_mp_subscriber_create_into(0, NULL), CBT_ERR_INVAL);
    tu_stop();
    remove(jsonl);
    remove(trace);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(config_older_caller, tu_teardown),
        cmocka_unit_test_teardown(config_newer_caller, tu_teardown),
        cmocka_unit_test_teardown(metrics_both_directions, tu_teardown),
        cmocka_unit_test_teardown(stats_getters_bounded, tu_teardown),
        cmocka_unit_test_teardown(tree_stats_older_callers, tu_teardown),
        cmocka_unit_test_teardown(sink_older_caller, tu_teardown),
        cmocka_unit_test_teardown(sink_v1_without_spans_lost, tu_teardown),
        cmocka_unit_test_teardown(launch_info_both_directions, tu_teardown),
#ifdef CBT_WITH_OTLP
        cmocka_unit_test(otlp_config_both_directions),
        cmocka_unit_test_teardown(otlp_config_v1_without_final_stats, tu_teardown),
        cmocka_unit_test(otlp_config_v2_without_self_metrics),
#endif
        cmocka_unit_test(defaults_into_bounded),
        cmocka_unit_test_teardown(constructors_into_bounded, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
