/* tests/disable_all.c — CBT_DISABLE removes every public call.
 *
 * Built with -DCBT_DISABLE and linked with no cbt library at all (libc only:
 * tests/CMakeLists.txt), this program uses every public function and
 * function-like macro of include/cbt.h and the headers under include/cbt/ at
 * least once and checks the disabled results: CBT_OK (or what the header
 * documents), NULL handles, zeroed out-structs, "" strings, and work handed
 * to a stream still done. Not cbt/kv_kernels.h: the KV kernels are workload
 * code that CBT_DISABLE leaves alone (they need libcbt_kernels in any build).
 * A call that was not compiled out is a link error; one that is missing here
 * is a failure of tests/disable_coverage.py. The same source is also built as
 * CUDA (C++) when the toolkit is there. Plain C (no cmocka): exits non-zero on
 * a failed check and ends with "N passed, M failed".
 */
#ifndef CBT_DISABLE
#error "tests/disable_all.c must be compiled with -DCBT_DISABLE"
#endif

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cbt.h"
#include "cbt/array.h"
#include "cbt/blend_metrics.h"
#include "cbt/cb.h"
#include "cbt/context.h"
#include "cbt/cupti.h"
#include "cbt/event.h"
#include "cbt/kernel.h"
#include "cbt/kernel_span.h"
#include "cbt/mp.h"
#include "cbt/names.h"
#include "cbt/nvtx.h"
#include "cbt/otlp.h"
#include "cbt/pspan.h"
#include "cbt/ring.h"
#include "cbt/span.h"
#include "cbt/status.h"
#include "cbt/stream.h"
#include "cbt/trace_file.h"
#include "cbt/tree.h"

static int n_pass, n_fail;

#define CHECK(cond) check_((cond) ? 1 : 0, #cond, __LINE__)
static void check_(int ok, const char *what, int line)
{
    if (ok) {
        n_pass++;
        return;
    }
    n_fail++;
    fprintf(stderr, "disable_all.c:%d: FAILED: %s\n", line, what);
}

/* every byte of [p, p + n) is zero */
static int all_zero(const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

static int empty(const char *s) { return s != NULL && s[0] == '\0'; }

/* every byte of [p, p + n) is 0xff (what a stub must not have written) */
static int all_ff(const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0xff)
            return 0;
    return 1;
}

/* An in-struct the size of its first `n` bytes in a 0xff buffer: the
 * _default_into stubs write no further, and keep version and size. */
#define TRUNCATED(var, type, ver, n)                                                 \
    type var;                                                                        \
    memset(&var, 0xff, sizeof var);                                                  \
    var.version = (ver);                                                             \
    var.size = (uint32_t)(n)

/* the file does not exist (a disabled sink wrote nothing) */
static int absent(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f)
        fclose(f);
    return f == NULL;
}

/* an empty sink, as every disabled sink constructor hands out */
static int empty_sink(const cbt_sink *k)
{
    return k->version == CBT_SINK_VERSION && k->size == sizeof *k && k->name == NULL &&
           k->ctx == NULL && k->on_span == NULL && k->flush == NULL && k->destroy == NULL &&
           k->on_cta == NULL;
}

static void bump(void *arg) { ++*(int *)arg; }

typedef struct ctas_seen {
    uint32_t calls, index_sum, n;
} ctas_seen;
static void count_cta(void *args, uint32_t cta, uint32_t n_ctas)
{
    ctas_seen *c = (ctas_seen *)args;
    c->calls++;
    c->index_sum += cta;
    c->n = n_ctas;
}

static cbt_status on_event_cb(void *ctx, cbt_tracer *t, const cbt_event *ev)
{
    (void)ctx, (void)t, (void)ev;
    return CBT_OK;
}

static cbt_span g_span;                  /* a span value for the calls that take one */
static cbt_span_ctx g_ctx;               /* a valid-looking context */
static int g_dummy;                      /* what non-NULL handles point at before a call */
static cbt_blend_snapshot g_snap;        /* large: static */
static cbt_otlp_config g_ocfg;           /* large: static */

/* ---- cbt.h ------------------------------------------------------------------ */
static void test_cbt_h(void)
{
    cbt_config c = cbt_config_default();
    CHECK(c.version == CBT_CONFIG_VERSION && c.size == sizeof c && c.reserved == 0);
    {   /* the entry point of the inline wrapper: at most c->size bytes */
        TRUNCATED(t, cbt_config, CBT_CONFIG_VERSION, offsetof(cbt_config, queue_capacity));
        CHECK(cbt_config_default_into(&t) == CBT_OK);
        CHECK(t.size == offsetof(cbt_config, queue_capacity) && !t.enabled && t.mp_subscriber);
        CHECK(all_ff((char *)&t + t.size, sizeof t - t.size));
        t.size = 4;
        CHECK(cbt_config_default_into(&t) == CBT_ERR_VERSION);
        CHECK(cbt_config_default_into(NULL) == CBT_ERR_INVAL);
    }
    {   /* every byte: the one list libcbt fills too (cbt_config_defaults_),
         * enabled cleared (test_disable compares with libcbt itself) */
        TRUNCATED(t, cbt_config, CBT_CONFIG_VERSION, sizeof(cbt_config));
        CHECK(cbt_config_default_into(&t) == CBT_OK);
        cbt_config d;
        cbt_config_defaults_(&d);
        d.enabled = false;
        CHECK(memcmp(&t, &d, sizeof d) == 0);
    }
    CHECK(!c.enabled);
    CHECK(c.mp_subscriber && c.queue_capacity == 65536 && c.lane_capacity == 131072 &&
          c.max_lanes == 64 && c.span_pool == 8192 && c.registry_capacity == 16384 &&
          c.max_sessions == 4096 && c.poll_interval_us == 10000 && c.shutdown_timeout_ms == 2000);
    CHECK(c.jsonl_path == NULL && c.ring_capacity == 65536 && c.cuda_ring_capacity == 65536 &&
          c.ring_placement == CBT_RING_MAPPED);
    CHECK(cbt_init(&c) == CBT_OK);
    CHECK(cbt_init(NULL) == CBT_OK);
    CHECK(cbt_tracer_get() == NULL);
    CHECK(!cbt_enabled());

    cbt_subscriber sub;
    cbt_subscriber_init(&sub, "mine", NULL, on_event_cb, NULL, NULL);
    CHECK(cbt_add_subscriber(&sub) == CBT_OK);
    cbt_sink sink;
    memset(&sink, 0, sizeof sink);
    CHECK(cbt_add_sink(&sink) == CBT_OK);
    CHECK(cbt_flush(10) == CBT_OK);

    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    CHECK(m.version == CBT_METRICS_VERSION && m.size == sizeof m);
    m.published = 5;
    m.spans_open = 7;
    CHECK(cbt_metrics_get(&m) == CBT_OK);
    CHECK(m.version == CBT_METRICS_VERSION && m.size == sizeof m);
    CHECK(m.published == 0 && m.spans_open == 0 && m.dispatched == 0);
    CHECK(cbt_metrics_get(NULL) == CBT_OK);

    cbt_event e;
    CHECK(cbt_event_init(&e, CBT_EV_MP_REQUEST_START, "req-1") == CBT_OK);
    CHECK(cbt_publish(&e) == CBT_OK);
    CHECK(cbt_publish_checked(&e) == CBT_OK);
    CHECK(cbt_tracer_publish(cbt_tracer_get(), &e) == CBT_OK);
    CHECK(cbt_shutdown() == CBT_OK);
    CHECK(cbt_shutdown() == CBT_OK);
    cbt_metrics fin = CBT_STRUCT_INIT(cbt_metrics);
    fin.sink_spans_lost = 3;
    CHECK(cbt_shutdown_final(&fin) == CBT_OK); /* zeroed, written in full */
    CHECK(fin.version == CBT_METRICS_VERSION && fin.size == sizeof fin);
    CHECK(fin.sink_spans_lost == 0 && fin.spans_ended == 0);
    CHECK(cbt_shutdown_final(NULL) == CBT_OK);

    /* cbt/replay.h: nothing is opened, out-structs zeroed, "" messages */
    cbt_replay_options ro = cbt_replay_options_default();
    CHECK(ro.version == CBT_REPLAY_OPTIONS_VERSION && ro.speed == 0.0 && !ro.force);
    CHECK(cbt_replay_options_default_into(&ro) == CBT_OK);
    cbt_replay *rp = (cbt_replay *)&ro;
    CHECK(cbt_replay_open("run.lct", &ro, &rp) == CBT_OK && rp == NULL);
    cbt_config rc = cbt_config_default();
    CHECK(cbt_replay_config(rp, &rc) == CBT_OK && !rc.replay);
    CHECK(cbt_replay_add_builders(rp) == CBT_OK);
    cbt_replay_stats rst = CBT_STRUCT_INIT(cbt_replay_stats);
    rst.records = 9;
    CHECK(cbt_replay_run(rp, &rst) == CBT_OK && rst.records == 0 && rst.size == sizeof rst);
    CHECK(strcmp(cbt_replay_message(rp), "") == 0 && strcmp(cbt_replay_header_json(rp), "") == 0);
    cbt_replay_close(rp);
}

/* ---- cbt/status.h, cbt/names.h ---------------------------------------------------- */
static void test_status_names(void)
{
    CHECK(strcmp(cbt_strerror(CBT_OK), "cbt disabled") == 0);
    CHECK(strcmp(cbt_strerror(CBT_ERR_IO), "cbt disabled") == 0);
    CHECK(strcmp(cbt_strerror(CBT_STATUS_COUNT_), "cbt disabled") == 0);
    /* the status list stays too: every code, at its value, with a sentence */
#define STATUS_AT_PLACE_(name, value, message) +(CBT_##name == value && sizeof message > 1)
    int n_codes = 0 CBT_STATUS_LIST(STATUS_AT_PLACE_);
#undef STATUS_AT_PLACE_
    CHECK(n_codes == (int)CBT_STATUS_COUNT_);
    CHECK(empty(cbt_last_error()) && empty(cbt_last_error_field()));

    cbt_name n = 77;
    CHECK(cbt_intern("my.key", &n) == CBT_OK && n == 0);
    CHECK(cbt_intern(NULL, NULL) == CBT_OK);
    CHECK(empty(cbt_name_str(CBT_N_REQUEST)) && empty(cbt_name_str(0)));
    CHECK(cbt_name_len(CBT_N_REQUEST) == 0);

    /* the X-macros stay: a program's tables still build from them */
#define COUNT_NAME_(id, str) +1
    int n_names = 0 CBT_WELL_KNOWN_NAMES(COUNT_NAME_);
#undef COUNT_NAME_
    CHECK(n_names == (int)CBT_N_WELL_KNOWN_COUNT_ - 1);
}

/* ---- cbt/event.h -------------------------------------------------------------- */
static void test_event_h(void)
{
    cbt_event e;
    memset(&e, 0xab, sizeof e);
    CHECK(cbt_event_init(&e, CBT_EV_MP_STORE_START, "req-1") == CBT_OK);
    CHECK(e.type == CBT_EV_MP_STORE_START && e.n_meta == 0 && e.session_len == 0 &&
          e.session[0] == '\0' && e.flags == 0 && e.ts == 0 && e.pair == 0);
    CHECK(cbt_event_init(NULL, CBT_EV_MP_STORE_START, NULL) == CBT_OK);
    CHECK(cbt_event_i64(&e, CBT_N_HIT_TOKENS, 5) == CBT_OK);
    CHECK(cbt_event_f64(&e, CBT_N_HIT_RATE, 0.5) == CBT_OK);
    CHECK(cbt_event_bool(&e, CBT_N_FAILED, true) == CBT_OK);
    CHECK(cbt_event_str(&e, CBT_N_MODEL, "a string much too long to fit") == CBT_OK);
    {
        int64_t iv[2] = {1, 2};
        double fv[1] = {1.0};
        bool bv[1] = {true};
        const char *sv[1] = {"s"};
        CHECK(cbt_event_array_i64(&e, CBT_N_MODEL, iv, 2) == CBT_OK);
        CHECK(cbt_event_array_f64(&e, CBT_N_MODEL, fv, 1) == CBT_OK);
        CHECK(cbt_event_array_bool(&e, CBT_N_MODEL, bv, 1) == CBT_OK);
        CHECK(cbt_event_array_str(&e, CBT_N_MODEL, sv, 1) == CBT_OK);
        CHECK(e.n_meta == 0);
        cbt_array a = {1, 2, CBT_ARRAY_I64};
        cbt_array_iter it;
        int64_t i64;
        double f64;
        bool b;
        const char *str;
        size_t len;
        CHECK(!cbt_meta_array(&e.meta[0], &a));
        cbt_attr at;
        memset(&at, 0, sizeof at);
        CHECK(!cbt_attr_array(&at, &a));
        cbt_array_iter_init(&it, &a);
        CHECK(!cbt_array_next_i64(&it, &i64) && !cbt_array_next_f64(&it, &f64) &&
              !cbt_array_next_bool(&it, &b) && !cbt_array_next_str(&it, &str, &len));
        CHECK(cbt_span_set_array(NULL, CBT_N_MODEL, &a) == CBT_OK);
        cbt_arrays_stats as;
        cbt_arrays_stats_get(&as);
        CHECK(as.capacity == 0 && as.used == 0);
    }
    CHECK(e.n_meta == 0);
    uint8_t id[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    CHECK(cbt_event_trace_set(&e, &g_ctx, id) == CBT_OK);
    CHECK(cbt_event_trace_of(&e) == NULL); /* nothing was attached */
    CHECK(cbt_event_find(&e, CBT_N_HIT_TOKENS) == NULL);
    CHECK(cbt_event_get_i64(&e, CBT_N_HIT_TOKENS, -3) == -3);
    {
        size_t sl = 9;
        CHECK(cbt_event_get_str(&e, CBT_N_MODEL, &sl) == NULL && sl == 0);
        CHECK(cbt_event_meta_str(&e, NULL, &sl) == NULL && sl == 0);
    }

    cbt_meta m = cbt_meta_i64(CBT_N_N_POLLS, 3);
    CHECK(m.key == CBT_N_N_POLLS && m.type == CBT_META_NONE && m.v.i64 == 0);
    m = cbt_meta_f64(CBT_N_RECOMP_RATIO, 0.25);
    CHECK(m.key == CBT_N_RECOMP_RATIO && m.type == CBT_META_NONE);
    m = cbt_meta_bool(CBT_N_IMP_EMPTY, true);
    CHECK(m.key == CBT_N_IMP_EMPTY && m.type == CBT_META_NONE);
    m = cbt_meta_str(CBT_N_DISPATCH, "flex");
    CHECK(m.key == CBT_N_DISPATCH && m.type == CBT_META_NONE && m.len == 0);

    CHECK(empty(cbt_event_type_name(CBT_EV_MP_STORE_START)));
    CHECK(!cbt_event_type_valid(CBT_EV_MP_STORE_START));
    cbt_event_type t = 9;
    CHECK(cbt_event_type_register("L1_READ_RESERVED", &t) == CBT_OK && t == CBT_EV_INVALID);
    t = 9;
    CHECK(cbt_event_type_by_name("mp.store.start", &t) == CBT_ERR_UNKNOWN_EVENT &&
          t == CBT_EV_INVALID);

#define COUNT_EV_(n) +1
    int n_events = 0 CBT_BUILTIN_EVENTS(COUNT_EV_);
#undef COUNT_EV_
    CHECK(n_events == (int)CBT_EV_BUILTIN_COUNT_ - 1);
}

/* ---- cbt/span.h ---------------------------------------------------------------- */
static void test_span_h(void)
{
    cbt_event e;
    cbt_event_init(&e, CBT_EV_MP_STORE_START, "req-1");
    CHECK(cbt_span_start(NULL, CBT_N_REQUEST, CBT_SPAN_KIND_SERVER, &g_ctx, 1) == NULL);
    CHECK(cbt_span_start_for_event(NULL, CBT_N_MP_STORE, CBT_SPAN_KIND_INTERNAL, NULL, &e) ==
          NULL);

    cbt_span sp;
    memset(&sp, 0, sizeof sp);
    CHECK(cbt_span_set_i64(&sp, CBT_N_HIT_TOKENS, 1) == CBT_OK);
    CHECK(cbt_span_set_f64(&sp, CBT_N_HIT_RATE, 0.5) == CBT_OK);
    CHECK(cbt_span_set_bool(&sp, CBT_N_FAILED, false) == CBT_OK);
    CHECK(cbt_span_set_str(&sp, CBT_N_MODEL, "llama", 5) == CBT_OK);
    cbt_span_set_from_event(&sp, &e);
    CHECK(!cbt_span_set_queue(&sp, &e)); /* nothing measured: nothing set */
    uint32_t ev = 7;
    CHECK(cbt_span_add_event(&sp, CBT_N_EXCEPTION, 1, &ev) == CBT_OK && ev == 0);
    CHECK(cbt_span_event_set_str(&sp, ev, CBT_N_EXC_TYPE, "TimeoutError", 12) == CBT_OK);
    CHECK(cbt_span_event_set_i64(&sp, ev, CBT_N_COUNT, 1) == CBT_OK);
    CHECK(cbt_span_event_set_f64(&sp, ev, CBT_N_HIT_RATE, 0.5) == CBT_OK);
    CHECK(cbt_span_event_set_bool(&sp, ev, CBT_N_FAILED, true) == CBT_OK);
    CHECK(sp.n_attrs == 0 && sp.arena_used == 0 && sp.n_events == 0);
    CHECK(cbt_span_attr(&sp, CBT_N_HIT_TOKENS) == NULL);
    CHECK(cbt_span_event_attr(&sp, 0, CBT_N_EXC_TYPE) == NULL);
    CHECK(empty(cbt_attr_str(&sp, &sp.attrs[0])));
    cbt_span_end(NULL, &sp, 2);
    CHECK(!cbt_span_ctx_valid(&g_ctx));

    cbt_span_ctx got;
    memset(&got, 0xff, sizeof got);
    CHECK(cbt_registry_put(NULL, "req-1", CBT_N_STORE, &g_ctx) == CBT_OK);
    CHECK(cbt_registry_get(NULL, "req-1", CBT_N_STORE, &got) == CBT_ERR_NOT_FOUND);
    CHECK(all_zero(&got, sizeof got));
    cbt_registry_remove(NULL, "req-1", CBT_N_STORE, NULL);
    CHECK(cbt_registry_count(NULL) == 0);

    cbt_memsink *ms = (cbt_memsink *)&g_dummy;
    cbt_sink k;
    memset(&k, 0xff, sizeof k);
    CHECK(cbt_memsink_create(64, &ms, &k) == CBT_OK);
    CHECK(ms == NULL && empty_sink(&k));
    memset(&k, 0xff, sizeof k); /* the entry point writes no sink: the wrapper's is empty */
    ms = (cbt_memsink *)&g_dummy;
    CHECK(cbt_memsink_create_into(64, &ms, &k) == CBT_OK && ms == NULL && all_ff(&k, sizeof k));
    CHECK(cbt_memsink_count(ms) == 0);
    memset(&sp, 0xff, sizeof sp);
    CHECK(cbt_memsink_get(ms, 0, &sp) == CBT_ERR_NOT_FOUND); /* loops over it end at once */
    CHECK(all_zero(&sp, sizeof sp));
    CHECK(cbt_memsink_dropped(ms) == 0);
    cbt_memsink_release(ms);

    const char *jsonl = "cbt-disable-all.jsonl";
    remove(jsonl);
    memset(&k, 0xff, sizeof k);
    CHECK(cbt_jsonl_sink_create(jsonl, &k) == CBT_OK);
    CHECK(empty_sink(&k) && absent(jsonl));
    memset(&k, 0xff, sizeof k);
    CHECK(cbt_jsonl_sink_create_into(jsonl, &k) == CBT_OK && all_ff(&k, sizeof k) && absent(jsonl));

    char buf[64] = "untouched";
    CHECK(cbt_span_to_json(&g_span, buf, sizeof buf) == 0 && buf[0] == '\0');
    CHECK(cbt_span_to_json(&g_span, NULL, 0) == 0);

    /* the subscriber helpers are plain code and still work */
    cbt_subscriber sub;
    cbt_subscriber_init(&sub, "mine", &g_dummy, on_event_cb, NULL, NULL);
    CHECK(sub.version == CBT_SUBSCRIBER_VERSION && sub.size == sizeof sub && sub.ctx == &g_dummy);
    CHECK(!cbt_subscriber_wants(&sub, CBT_EV_MP_STORE_END));
    cbt_subscriber_want(&sub, CBT_EV_MP_STORE_END);
    CHECK(cbt_subscriber_wants(&sub, CBT_EV_MP_STORE_END));
}

/* ---- cbt/stream.h --------------------------------------------------------------- */
static void test_stream_h(void)
{
    cbt_stream *s = (cbt_stream *)&g_dummy;
    CHECK(cbt_stream_cpu_create(0, &s) == CBT_OK && s != NULL && s != (cbt_stream *)&g_dummy);
    CHECK(cbt_stream_cpu_create(0, NULL) == CBT_ERR_INVAL);
    cbt_stream *cs = NULL;
    /* the handle of a wrapped CUDA stream is that stream: kernels stay on it */
    CHECK(cbt_stream_cuda_create(&g_dummy, &cs) == CBT_OK && cs == (cbt_stream *)&g_dummy);
    int ran = 0;
    CHECK(cbt_stream_enqueue(s, bump, &ran) == CBT_OK && ran == 1); /* the work still happens */
    CHECK(cbt_stream_enqueue(cs, bump, &ran) == CBT_OK && ran == 2);
    CHECK(cbt_stream_enqueue(s, NULL, NULL) == CBT_OK);
    cbt_event e;
    cbt_event_init(&e, CBT_EV_MP_STORE_END, "req-1");
    CHECK(cbt_publish_on_stream(s, &e) == CBT_OK);
    CHECK(cbt_stream_sync(s) == CBT_OK);
    CHECK(cbt_stream_ordinal(s) == 0);
    CHECK(cbt_stream_cuda_handle(cs) == &g_dummy);
    CHECK(cbt_stream_cuda_handle(s) == NULL);
    cbt_stream_stats ss = CBT_STRUCT_INIT(cbt_stream_stats);
    ss.items_enqueued = 7;
    CHECK(cbt_stream_stats_get(s, &ss) == CBT_OK && ss.items_enqueued == 0 && ss.marks_dropped == 0 &&
          ss.version == CBT_STREAM_STATS_VERSION && ss.size == sizeof ss);
    cbt_stream_destroy(s);
    cbt_stream_destroy(cs);
}

/* ---- cbt/mp.h, cbt/cb.h ------------------------------------------------------------- */
static void test_subscribers(void)
{
    cbt_subscriber sub;
    memset(&sub, 0xff, sizeof sub);
    CHECK(cbt_mp_subscriber_create(0, &sub) == CBT_OK);
    CHECK(sub.version == CBT_SUBSCRIBER_VERSION && sub.size == sizeof sub &&
          sub.on_event == NULL && sub.on_shutdown == NULL && sub.destroy == NULL &&
          sub.ctx == NULL && all_zero(sub.mask, sizeof sub.mask));
    cbt_mp_stats mp = CBT_STRUCT_INIT(cbt_mp_stats);
    mp.roots_opened = 3;
    CHECK(cbt_mp_stats_get(&sub, &mp) == CBT_OK);
    CHECK(mp.version == CBT_MP_STATS_VERSION && mp.size == sizeof mp && mp.roots_opened == 0);

    memset(&sub, 0xff, sizeof sub); /* the entry point writes nothing: the wrapper's is empty */
    CHECK(cbt_mp_subscriber_create_into(0, &sub) == CBT_OK && all_ff(&sub, sizeof sub));

    cbt_tree_options to = CBT_STRUCT_INIT(cbt_tree_options);
    to.root_end = CBT_ROOT_END_TRANSFER;
    memset(&sub, 0xff, sizeof sub);
    CHECK(cbt_mp_subscriber_create_opts(&to, &sub) == CBT_OK && sub.on_event == NULL &&
          sub.version == CBT_SUBSCRIBER_VERSION);
    memset(&sub, 0xff, sizeof sub);
    CHECK(cbt_mp_subscriber_create_opts_into(&to, &sub) == CBT_OK && all_ff(&sub, sizeof sub));
    memset(&sub, 0xff, sizeof sub);
    CHECK(cbt_cb_subscriber_create_opts(&to, &sub) == CBT_OK && sub.on_event == NULL);
    memset(&sub, 0xff, sizeof sub);
    CHECK(cbt_cb_subscriber_create_opts_into(NULL, &sub) == CBT_OK && all_ff(&sub, sizeof sub));

    memset(&sub, 0xff, sizeof sub);
    CHECK(cbt_cb_subscriber_create(16, &sub) == CBT_OK);
    CHECK(sub.version == CBT_SUBSCRIBER_VERSION && sub.on_event == NULL);
    memset(&sub, 0xff, sizeof sub);
    CHECK(cbt_cb_subscriber_create_into(16, &sub) == CBT_OK && all_ff(&sub, sizeof sub));
    cbt_cb_stats cb = CBT_STRUCT_INIT(cbt_cb_stats);
    cb.roots_opened = 3;
    CHECK(cbt_cb_stats_get(NULL, &cb) == CBT_OK);
    CHECK(cb.version == CBT_CB_STATS_VERSION && cb.size == sizeof cb && cb.roots_opened == 0);
}

/* ---- cbt/context.h ---------------------------------------------------------------- */
static void test_context_h(void)
{
    static const char tp_in[] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    char tp[CBT_TRACEPARENT_LEN + 1] = "untouched";
    CHECK(cbt_traceparent_format(&g_ctx, tp) == CBT_OK && tp[0] == '\0');
    cbt_span_ctx c;
    memset(&c, 0xff, sizeof c);
    CHECK(cbt_traceparent_parse(tp_in, CBT_TRACEPARENT_LEN, &c) == CBT_OK);
    CHECK(all_zero(&c, sizeof c));
    CHECK(cbt_tracestate_check("k=v", 3) == CBT_OK);

    cbt_trace_context tc;
    memset(&tc, 0xff, sizeof tc);
    CHECK(cbt_context_extract(tp_in, "k=v", &tc) == CBT_OK);
    CHECK(all_zero(&tc, sizeof tc));

    uint8_t tid[16];
    memset(tid, 0xff, sizeof tid);
    cbt_trace_id_from_request("req-1", 5, tid);
    CHECK(all_zero(tid, sizeof tid));

    cbt_sampler smp = cbt_sampler_default();
    CHECK(smp.kind == CBT_SAMPLER_PARENTBASED_ALWAYS_ON && smp.ratio == 1.0);
    CHECK(empty(cbt_sampler_name(CBT_SAMPLER_ALWAYS_OFF)));
    smp.kind = CBT_SAMPLER_ALWAYS_ON;
    CHECK(cbt_sampler_parse("traceidratio", "0.5", &smp, stderr) == CBT_OK);
    CHECK(smp.kind == CBT_SAMPLER_PARENTBASED_ALWAYS_ON && smp.ratio == 1.0);
    smp.kind = CBT_SAMPLER_ALWAYS_ON;
    setenv("OTEL_TRACES_SAMPLER", "always_off", 1);
    CHECK(cbt_sampler_from_env(&smp, NULL) == CBT_OK);
    CHECK(smp.kind == CBT_SAMPLER_PARENTBASED_ALWAYS_ON); /* the environment is not read */
    CHECK(!cbt_sampler_decide(&smp, tid, NULL));

    cbt_status why = CBT_ERR_IO;
    memset(&tc, 0xff, sizeof tc);
    CHECK(cbt_context_begin(tp_in, NULL, "req-1", 5, &smp, &tc, &why) == CBT_OK);
    CHECK(why == CBT_OK && all_zero(&tc, sizeof tc));
    CHECK(cbt_context_sampled(&tc) == 0); /* so a process skips its publishing */
    CHECK(cbt_context_parent(&tc) == NULL);
    cbt_span sp;
    memset(&sp, 0, sizeof sp);
    cbt_span_adopt_context(&sp, &tc);
    CHECK(all_zero(&sp.ctx, sizeof sp.ctx));
}

/* ---- cbt/pspan.h -------------------------------------------------------------- */
static void test_pspan_h(void)
{
    cbt_pspan p;
    memset(&p, 0xff, sizeof p);
    cbt_meta m[1];
    m[0] = cbt_meta_i64(CBT_N_N_POLLS, 3);
    CHECK(cbt_pspan_begin(&p, CBT_N_CB_REQUEST, CBT_SPAN_KIND_SERVER, "req-1", NULL, m, 1) ==
          CBT_OK);
    CHECK(p.open == 0 && p.sampled == 0 && p.stream == NULL && all_zero(&p.ctx, sizeof p.ctx));
    CHECK(cbt_pspan_end(&p, m, 1) == CBT_OK);
    memset(&p, 0xff, sizeof p);
    CHECK(cbt_pspan_begin_on(&p, NULL, CBT_N_CB_CHECK, CBT_SPAN_KIND_INTERNAL, "req-1", &g_ctx,
                             NULL, 0) == CBT_OK);
    CHECK(p.open == 0 && all_zero(&p.ctx, sizeof p.ctx));
    CHECK(cbt_pspan_end_on(&p, NULL, 0) == CBT_OK);
    uint8_t id[8];
    memset(id, 0xff, sizeof id);
    cbt_pspan_new_id(id);
    CHECK(all_zero(id, sizeof id));
    cbt_pspan_stats st = CBT_STRUCT_INIT(cbt_pspan_stats);
    st.opened = 9;
    CHECK(cbt_pspan_stats_get(&st) == CBT_OK);
    CHECK(st.version == CBT_PSPAN_STATS_VERSION && st.size == sizeof st && st.opened == 0);
}

/* ---- cbt/kernel.h, cbt/kernel_span.h, cbt/ring.h ---------------------------------------- */
static cbt_ring_rec g_recs[8];
static cbt_fold_slot g_fold[CBT_FOLD_SLOTS];

static void test_kernels(void)
{
    cbt_launch_info li = cbt_launch_info_default(CBT_KOP_SCATTER, 4);
    CHECK(li.version == CBT_LAUNCH_INFO_VERSION && li.size == sizeof li);
    CHECK(li.op == CBT_KOP_SCATTER && li.mode == CBT_REC_LAUNCH && li.n_ctas == 4 &&
          li.name == 0 && li.sampled_out == 0 && all_zero(li.reserved, sizeof li.reserved));
    {   /* the entry point of the inline wrapper: at most li->size bytes */
        TRUNCATED(t, cbt_launch_info, CBT_LAUNCH_INFO_VERSION, offsetof(cbt_launch_info, n_ctas));
        CHECK(cbt_launch_info_default_into(&t, CBT_KOP_GATHER, 9) == CBT_OK);
        CHECK(t.size == offsetof(cbt_launch_info, n_ctas) && t.op == CBT_KOP_GATHER &&
              t.mode == CBT_REC_LAUNCH && all_ff((char *)&t + t.size, sizeof t - t.size));
        CHECK(cbt_launch_info_default_into(NULL, CBT_KOP_USER, 1) == CBT_ERR_INVAL);
    }
    {   /* every byte: the one list libcbt fills too */
        TRUNCATED(t, cbt_launch_info, CBT_LAUNCH_INFO_VERSION, sizeof(cbt_launch_info));
        CHECK(cbt_launch_info_default_into(&t, CBT_KOP_GATHER, 9) == CBT_OK);
        cbt_launch_info d;
        cbt_launch_info_defaults_(&d, CBT_KOP_GATHER, 9);
        CHECK(memcmp(&t, &d, sizeof d) == 0);
    }
    cbt_kspan ks;
    memset(&ks, 0xff, sizeof ks);
    CHECK(cbt_launch_begin(NULL, "req-1", &li, &ks) == CBT_OK);
    CHECK(ks.ring == NULL && ks.launch_id == 0); /* untraced: the macros write nothing */
    ctas_seen seen = {0, 0, 0};
    CHECK(cbt_cpu_launch(NULL, 3, count_cta, &seen) == CBT_OK);
    CHECK(seen.calls == 3 && seen.index_sum == 0 + 1 + 2 && seen.n == 3); /* the work ran */
    cbt_ring_stats rs = CBT_STRUCT_INIT(cbt_ring_stats);
    rs.harvested = 4;
    CHECK(cbt_ring_stats_get(&rs) == CBT_OK);
    CHECK(rs.version == CBT_RING_STATS_VERSION && rs.size == sizeof rs && rs.harvested == 0);

    /* the kernel macros and the CPU backend's calls, with a real ring: nothing is written */
    unsigned long long claim = 0;
    cbt_ring_dev ring;
    ring.recs = g_recs;
    ring.claim = &claim;
    ring.fold = g_fold;
    ring.mask = 7;
    ring.reserved = 0;
    cbt_kspan span;
    span.ring = &ring;
    span.launch_id = 1;
    span.op = CBT_KOP_USER;
    span.mode = CBT_REC_CTA;
    span.n_ctas_hi = 0;
    int body = 0;
    cbt_cpu_cta_enter(0, 1, 0);
    CHECK(cbt_cpu_cta_current() == NULL);
    CBT_KERNEL_SPAN_BEGIN(span);
    CBT_KERNEL_SPAN_END(span, 5);
    CBT_KERNEL_SPAN_BEGIN(span);
    CBT_KERNEL_SPAN_END_USER(span, 5, 2);
    CBT_KERNEL_SPAN(span, 7) { body++; }
    /* an `else` after the block binds to the `if`, as with the real macro */
    int taken = 0;
    if (body == 0)
        CBT_KERNEL_SPAN(span, 1) { taken = 1; }
    else
        taken = 2;
    cbt_cpu_cta_leave();
    CHECK(body == 1);
    CHECK(taken == 2);
    CHECK(cbt_cpu_clock() == 0);
    CHECK(cbt_cpu_span_begin(&span) == 0);
    cbt_cpu_span_end(&span, 0, 5, 0);
    cbt_cpu_ring_put(&ring, 1, 2, 1, 0, 5, 0, CBT_REC_CTA, CBT_KOP_USER, 0);
    CHECK(claim == 0 && all_zero(g_recs, sizeof g_recs) && all_zero(g_fold, sizeof g_fold));

    /* ring.h: pure code, the same in every build */
    uint32_t sko = CBT_RING_SKO(1, CBT_REC_CTA, CBT_KOP_SCATTER);
    CHECK(sko == 0x10101u);
    CHECK(cbt_ring_check(1, 2, 3, 4, 5, sko, 6, 7) == cbt_ring_check(1, 2, 3, 4, 5, sko, 6, 7));
    CHECK(cbt_ring_check(1, 2, 3, 4, 5, sko, 6, 7) != cbt_ring_check(1, 2, 3, 4, 5, sko, 6, 8));
}

/* ---- cbt/cupti.h, cbt/nvtx.h ------------------------------------------------------- */
static void test_cupti_nvtx(void)
{
    CHECK(cbt_cupti_enable() == CBT_OK);
    CHECK(cbt_cupti_launch_scope_begin(1) == CBT_OK);
    CHECK(cbt_cupti_launch_scope_end() == CBT_OK);
    CHECK(cbt_cupti_flush() == CBT_OK);
    cbt_cupti_stats cs = CBT_STRUCT_INIT(cbt_cupti_stats);
    cs.records = 2;
    cs.enabled = 1;
    CHECK(cbt_cupti_stats_get(&cs) == CBT_OK);
    CHECK(cs.version == CBT_CUPTI_STATS_VERSION && cs.size == sizeof cs && cs.records == 0 &&
          cs.enabled == 0);
    CHECK(cbt_cupti_disable() == CBT_OK);
    CHECK(cbt_nvtx_enable() == CBT_OK);
}

/* ---- cbt/blend_metrics.h ------------------------------------------------------------ */
static void test_blend_metrics_h(void)
{
    cbt_blend_metrics *bm = (cbt_blend_metrics *)&g_dummy;
    CHECK(cbt_blend_metrics_create(&bm) == CBT_OK && bm == NULL);
    CHECK(cbt_blend_metrics_current() == NULL);
    cbt_blend_count(bm, CBT_BC_LOOKUP_REQUESTS, 1);
    cbt_blend_observe(bm, CBT_BH_LOOKUP, 1.5, &g_span);
    memset(&g_snap, 0xff, sizeof g_snap);
    CHECK(cbt_blend_snapshot_take(bm, &g_snap) == CBT_OK);
    CHECK(all_zero(&g_snap, sizeof g_snap));
    CHECK(empty(cbt_blend_counter_name(CBT_BC_LOOKUP_REQUESTS)));
    CHECK(empty(cbt_blend_counter_unit(CBT_BC_LOOKUP_REQUESTS)));
    CHECK(empty(cbt_blend_counter_desc(CBT_BC_LOOKUP_REQUESTS)));
    CHECK(empty(cbt_blend_hist_name(CBT_BH_SCATTER)));
    CHECK(empty(cbt_blend_hist_desc(CBT_BH_SCATTER)));
    const double *b = cbt_blend_bounds_ms();
    CHECK(b != NULL && b[0] == 0.05 && b[CBT_BLEND_N_BOUNDS - 1] == 10000.0);
    cbt_blend_metrics_free(bm);

#define COUNT_BC_(e, n, u, d) +1
#define COUNT_BH_(e, n, d) +1
    int n_counters = 0 CBT_BLEND_COUNTERS(COUNT_BC_);
    int n_hists = 0 CBT_BLEND_HISTOGRAMS(COUNT_BH_);
#undef COUNT_BC_
#undef COUNT_BH_
    CHECK(n_counters == (int)CBT_BC_COUNT_ && n_hists == (int)CBT_BH_COUNT_);
}

/* ---- cbt/otlp.h ------------------------------------------------------------------ */
static void test_otlp_h(void)
{
    cbt_otlp_resource r;
    memset(&r, 0xff, sizeof r);
    cbt_otlp_resource_default(&r);
    CHECK(strcmp(r.service_name, "cbt") == 0 && empty(r.service_instance_id) &&
          empty(r.host_name) && r.pid == 0 && empty(r.gpu_name) && r.n_extra == 0);
    static cbt_otlp_resource r0; /* large: static */
    cbt_otlp_resource_defaults_(&r0);
    CHECK(memcmp(&r, &r0, sizeof r) == 0); /* the fixed part libcbt's starts from */
    cbt_buf buf;
    buf.data = NULL;
    buf.len = buf.cap = 0;
    CHECK(cbt_otlp_encode_proto(&r, &g_span, 1, &buf) == CBT_OK);
    CHECK(cbt_otlp_encode_json(&r, &g_span, 1, &buf) == CBT_OK);
    CHECK(cbt_otlp_encode_metrics_proto(&r, &g_snap, &buf) == CBT_OK);
    CHECK(cbt_otlp_encode_metrics_json(&r, &g_snap, &buf) == CBT_OK);
    CHECK(buf.data == NULL && buf.len == 0 && buf.cap == 0); /* nothing appended */
    cbt_buf_free(&buf);

    memset(&g_ocfg, 0xff, sizeof g_ocfg);
    cbt_otlp_config_default(&g_ocfg);
    CHECK(g_ocfg.version == CBT_OTLP_CONFIG_VERSION && g_ocfg.size == sizeof g_ocfg);
    CHECK(g_ocfg.disabled == 1 && g_ocfg.metrics_disabled == 1);
    CHECK(strcmp(g_ocfg.endpoint, "http://localhost:4318/v1/traces") == 0 &&
          strcmp(g_ocfg.metrics_endpoint, "http://localhost:4318/v1/metrics") == 0);
    CHECK(g_ocfg.protocol == CBT_OTLP_HTTP_PROTOBUF && g_ocfg.gzip == 0 &&
          g_ocfg.timeout_ms == 10000 && g_ocfg.n_headers == 0 && g_ocfg.verify_tls == 1 &&
          g_ocfg.max_queue == 32768 && g_ocfg.max_batch == 512 &&
          g_ocfg.schedule_delay_ms == 5000 && g_ocfg.retry_budget_ms == 30000 &&
          g_ocfg.shutdown_timeout_ms == 5000 && g_ocfg.metrics_interval_ms == 60000 &&
          g_ocfg.blend == NULL && strcmp(g_ocfg.resource.service_name, "cbt") == 0 &&
          g_ocfg.reserved == 0);
    {   /* the entry point of the inline wrapper: at most c->size bytes */
        size_t n = offsetof(cbt_otlp_config, endpoint) + 8; /* "http://l" */
        TRUNCATED(t, cbt_otlp_config, CBT_OTLP_CONFIG_VERSION, n);
        CHECK(cbt_otlp_config_default_into(&t) == CBT_OK);
        CHECK(t.size == n && t.disabled == 1 && memcmp(t.endpoint, "http://l", 8) == 0);
        CHECK(all_ff((char *)&t + n, sizeof t - n));
        CHECK(cbt_otlp_config_default_into(NULL) == CBT_ERR_INVAL);
    }
    {   /* every byte: the one list libcbt fills too, both exports off */
        static cbt_otlp_config t, d; /* large: static */
        memset(&t, 0xff, sizeof t);
        t.version = CBT_OTLP_CONFIG_VERSION;
        t.size = (uint32_t)sizeof t;
        CHECK(cbt_otlp_config_default_into(&t) == CBT_OK);
        cbt_otlp_config_defaults_(&d);
        d.disabled = d.metrics_disabled = 1;
        CHECK(memcmp(&t, &d, sizeof d) == 0);
    }
    setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1234", 1);
    CHECK(cbt_otlp_config_from_env(&g_ocfg, stderr) == CBT_OK);
    CHECK(g_ocfg.timeout_ms == 10000); /* the environment is not read */

    cbt_otlp_exporter *ex = (cbt_otlp_exporter *)&g_dummy;
    cbt_sink k;
    memset(&k, 0xff, sizeof k);
    CHECK(cbt_otlp_exporter_create(&g_ocfg, &ex, &k) == CBT_OK);
    CHECK(ex == NULL && empty_sink(&k));
    memset(&k, 0xff, sizeof k);
    ex = (cbt_otlp_exporter *)&g_dummy;
    CHECK(cbt_otlp_exporter_create_into(&g_ocfg, &ex, &k) == CBT_OK && ex == NULL &&
          all_ff(&k, sizeof k));
    cbt_otlp_stats os = CBT_STRUCT_INIT(cbt_otlp_stats);
    os.spans_queued = 1;
    CHECK(cbt_otlp_exporter_stats(ex, &os) == CBT_OK);
    CHECK(os.version == CBT_OTLP_STATS_VERSION && os.size == sizeof os && os.spans_queued == 0);

    /* the OTLP JSON file: no file, an empty sink; the environment not read */
    const char *oj = "cbt-disable-all-otlp.jsonl";
    remove(oj);
    memset(&k, 0xff, sizeof k);
    CHECK(cbt_otlp_json_sink_create(oj, NULL, &k) == CBT_OK);
    CHECK(empty_sink(&k) && absent(oj));
    memset(&k, 0xff, sizeof k);
    CHECK(cbt_otlp_json_sink_create_into(oj, NULL, &k) == CBT_OK && all_ff(&k, sizeof k) &&
          absent(oj));
    setenv("OTEL_SERVICE_NAME", "not-read", 1);
    cbt_otlp_resource_from_env(&g_ocfg.resource, stderr);
    CHECK(strcmp(g_ocfg.resource.service_name, "cbt") == 0);
}

/* ---- cbt/trace_file.h, cbt/tree.h ------------------------------------------------------ */
static void test_files_trees(void)
{
    const char *trace = "cbt-disable-all-trace.json";
    remove(trace);
    cbt_sink k;
    memset(&k, 0xff, sizeof k);
    CHECK(cbt_trace_file_sink_create(trace, &k) == CBT_OK);
    CHECK(empty_sink(&k) && absent(trace));
    memset(&k, 0xff, sizeof k);
    CHECK(cbt_trace_file_sink_create_into(trace, &k) == CBT_OK && all_ff(&k, sizeof k) &&
          absent(trace));

    FILE *f = tmpfile();
    CHECK(f != NULL);
    if (!f)
        return;
    CHECK(cbt_tree_print(f, &g_span, 1, 0) == 0);
    CHECK(cbt_waterfall_print(f, &g_span, 1, 3, 80) == 0);
    CHECK(ftell(f) == 0); /* nothing printed */
    fclose(f);
}

#ifdef __CUDACC__
/* The CUDA build of this file: the macros compile to nothing in device code too. */
__global__ void disabled_kernel(cbt_kspan span, int *out)
{
    CBT_KERNEL_SPAN_BEGIN(span);
    out[threadIdx.x] = 1;
    CBT_KERNEL_SPAN_END(span, 1);
    CBT_KERNEL_SPAN_BEGIN(span);
    CBT_KERNEL_SPAN_END_USER(span, 1, 2);
    CBT_KERNEL_SPAN(span, 2) { out[0] = 2; }
}
#endif

int main(void)
{
    memset(&g_span, 0, sizeof g_span);
    memset(&g_ctx, 0, sizeof g_ctx);
    g_ctx.trace_id[15] = 1;
    g_ctx.span_id[7] = 1;
    g_ctx.trace_flags = CBT_TRACE_FLAG_SAMPLED;

    test_cbt_h();
    test_status_names();
    test_event_h();
    test_span_h();
    test_stream_h();
    test_subscribers();
    test_context_h();
    test_pspan_h();
    test_kernels();
    test_cupti_nvtx();
    test_blend_metrics_h();
    test_otlp_h();
    test_files_trees();

    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
