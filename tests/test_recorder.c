/* tests/test_recorder.c — trace recording at level "gpu" and its replay
 * (host/record/recorder.c, host/record/replay.c, cbt/replay.h): the SHA-256 the
 * header's digest is, a live run's spans against its replay's field by field
 * (MP requests, CPU-backend kernel launches whose ring records are in the
 * file, a pspan, an event with a trace context, a CacheBlend subscriber added
 * after cbt_init), the configuration refusals, a full recorder buffer, and
 * every refusal and warning of the replay (tampered headers, unknown and
 * malformed records, a cut file, the wrong tracer, a second run), and array
 * values (every type and extreme, empty and dropped ones, a 128 k-token
 * prompt) recorded and replayed into the same spans, dropped and counted by
 * a buffer too small for them, and wrapping a small ring.
 *
 * Every recording is made in a fresh temporary directory; with
 * CBT_TEST_RECORDINGS set, the two main recordings are also copied there
 * with a .count sidecar (the records cbt_metrics says were written), for
 * LMCache's own reader (tests/lmcache/lmct_recordings_check.sh).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cbt/array.h"
#include "cbt/cb.h"
#include "cbt/kernel_span.h"
#include "cbt/lmct.h"
#include "cbt/pspan.h"
#include "cbt/replay.h"
#include "internal/recorder.h"
#include "internal/sha256.h"
#include "testutil.h"

static char g_dir[128];

static void sleep_ms(uint32_t ms)
{
    struct timespec d = {.tv_sec = ms / 1000u, .tv_nsec = (long)(ms % 1000u) * 1000000L};
    nanosleep(&d, NULL);
}

static void path_in(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", g_dir, name);
}

static int setup_dir(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/cbt-rec-XXXXXX");
    assert_non_null(mkdtemp(g_dir));
    return 0;
}

static int teardown_dir(void **state)
{
    tu_teardown(state);
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *e;
        char p[512];
        while ((e = readdir(d)))
            if (e->d_name[0] != '.') {
                snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
                unlink(p);
            }
        closedir(d);
        rmdir(g_dir);
    }
    return 0;
}

static uint64_t file_size(const char *path)
{
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    return (uint64_t)sb.st_size;
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    unsigned char *b = malloc(*n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static void spit(const char *path, const unsigned char *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

/* ---- span sets ------------------------------------------------------------------ */

typedef struct spanset {
    cbt_span *s;
    uint32_t n;
} spanset;

static spanset snapshot_spans(void)
{
    spanset ss = {calloc(tu_span_count() + 1, sizeof(cbt_span)), tu_span_count()};
    assert_non_null(ss.s);
    for (uint32_t i = 0; i < ss.n; i++)
        ss.s[i] = *tu_span(i);
    return ss;
}

static const char *hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
    return out;
}

/* Two spans equal field by field, every attribute (and span event) too;
 * fails naming the span and the field. */
static void span_eq(const cbt_span *a, const cbt_span *b, uint32_t i)
{
    char ha[40], hb[40];
    const char *na = cbt_name_str(a->name), *nb = cbt_name_str(b->name);
    if (strcmp(na, nb) != 0)
        fail_msg("span %u: name %s vs %s", i, na, nb);
#define FIELD(f, fmt)                                                                          \
    if (a->f != b->f)                                                                          \
    fail_msg("span %u (%s): " #f " " fmt " vs " fmt, i, na, a->f, b->f)
    if (memcmp(a->ctx.trace_id, b->ctx.trace_id, 16) != 0)
        fail_msg("span %u (%s): trace id %s vs %s", i, na, hex(a->ctx.trace_id, 16, ha),
                 hex(b->ctx.trace_id, 16, hb));
    if (memcmp(a->ctx.span_id, b->ctx.span_id, 8) != 0)
        fail_msg("span %u (%s): span id %s vs %s", i, na, hex(a->ctx.span_id, 8, ha),
                 hex(b->ctx.span_id, 8, hb));
    if (memcmp(a->parent_span_id, b->parent_span_id, 8) != 0)
        fail_msg("span %u (%s): parent %s vs %s", i, na, hex(a->parent_span_id, 8, ha),
                 hex(b->parent_span_id, 8, hb));
    FIELD(ctx.trace_flags, "%u");
    FIELD(kind, "%u");
    FIELD(status, "%u");
    FIELD(flags, "%u");
    FIELD(start_ns, "%" PRIu64);
    FIELD(end_ns, "%" PRIu64);
    FIELD(n_attrs, "%u");
    FIELD(attrs_dropped, "%u");
    FIELD(attrs_truncated, "%u");
    FIELD(n_events, "%u");
    FIELD(events_dropped, "%u");
    for (uint32_t k = 0; k < a->n_attrs; k++) {
        const cbt_attr *x = &a->attrs[k], *y = &b->attrs[k];
        const char *kx = cbt_name_str(x->key), *ky = cbt_name_str(y->key);
        if (strcmp(kx, ky) != 0 || x->type != y->type || x->owner != y->owner)
            fail_msg("span %u (%s): attribute %u: %s/%u/%u vs %s/%u/%u", i, na, k, kx, x->type,
                     x->owner, ky, y->type, y->owner);
        int same = 1;
        switch (x->type) {
        case CBT_META_I64: same = x->v.i64 == y->v.i64; break;
        case CBT_META_F64: same = memcmp(&x->v.f64, &y->v.f64, sizeof x->v.f64) == 0; break;
        case CBT_META_BOOL: same = x->v.b == y->v.b; break;
        case CBT_META_STR:
            same = x->str_len == y->str_len &&
                   memcmp(cbt_attr_str(a, x), cbt_attr_str(b, y), x->str_len) == 0;
            break;
        case CBT_META_ARRAY: /* the elements: arrays_live_vs_replay's sink text */
            same = x->str_len == y->str_len && x->v.arr.count == y->v.arr.count;
            break;
        default: break;
        }
        if (!same)
            fail_msg("span %u (%s): attribute %s differs", i, na, kx);
    }
    for (uint32_t k = 0; k < a->n_events; k++)
        if (a->events[k].time_ns != b->events[k].time_ns ||
            strcmp(cbt_name_str(a->events[k].name), cbt_name_str(b->events[k].name)) != 0)
            fail_msg("span %u (%s): span event %u differs", i, na, k);
#undef FIELD
}

static void sets_eq(const spanset *live, const spanset *rep)
{
    if (live->n != rep->n)
        fail_msg("live run: %u spans, replay: %u", live->n, rep->n);
    for (uint32_t i = 0; i < live->n; i++)
        span_eq(&live->s[i], &rep->s[i], i);
}

static int ctx_zero(const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

/* Each complete span of `part` (a replay of part of a recording) is one of
 * `full`'s, equal field by field; returns how many there were. */
static uint32_t complete_subset(const spanset *part, const spanset *full)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < part->n; i++) {
        const cbt_span *p = &part->s[i];
        if (p->flags & CBT_SPANF_INCOMPLETE)
            continue;
        const cbt_span *f = NULL;
        for (uint32_t k = 0; k < full->n && !f; k++)
            if (memcmp(full->s[k].ctx.span_id, p->ctx.span_id, 8) == 0)
                f = &full->s[k];
        if (!f)
            fail_msg("span %u (%s) of the partial replay is not in the live run", i,
                     cbt_name_str(p->name));
        span_eq(p, f, i);
        n++;
    }
    return n;
}

/* ---- a recorded live run ----------------------------------------------------------- */

typedef struct scatter_job {
    cbt_kspan span;
    uint32_t tokens;
} scatter_job;

static void scatter_cta(void *a_, uint32_t cta, uint32_t n_ctas)
{
    (void)n_ctas;
    scatter_job *a = a_;
    CBT_KERNEL_SPAN_BEGIN(a->span);
    struct timespec d = {0, 50000};
    nanosleep(&d, NULL);
    CBT_KERNEL_SPAN_END_USER(a->span, a->tokens + cta, cta);
}

static void pub_ctx(cbt_event_type type, const char *rid, const cbt_span_ctx *parent)
{
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, type, rid), CBT_OK);
    assert_int_equal(cbt_event_trace_set(&e, parent, NULL), CBT_OK);
    assert_int_equal(cbt_publish(&e), CBT_OK);
}

enum { N_REQ = 4, N_CTAS = 3 };

/* MP requests with a store or retrieve on a CPU stream, each running an
 * emulated scatter launch (ring records), a pspan, a request joined to a
 * remote parent, a CacheBlend request (spans only with the cb subscriber),
 * and one request left open for the shutdown to end. */
static void workload(void)
{
    cbt_stream *s;
    assert_int_equal(cbt_stream_cpu_create(0, &s), CBT_OK);
    static scatter_job jobs[N_REQ];
    char sid[32];
    for (int i = 0; i < N_REQ; i++) {
        snprintf(sid, sizeof sid, "rec-%d", i);
        int store = i % 2;
        if (i == 0) {
            /* every value type, a string long enough for the event's string
             * area, a negative integer */
            cbt_event e;
            char longs[120];
            memset(longs, 'm', sizeof longs - 1);
            longs[sizeof longs - 1] = '\0';
            assert_int_equal(cbt_event_init(&e, CBT_EV_MP_REQUEST_START, sid), CBT_OK);
            assert_int_equal(cbt_event_str(&e, tu_name("model"), longs), CBT_OK);
            assert_int_equal(cbt_event_str(&e, tu_name("rec.short"), "ab"), CBT_OK);
            assert_int_equal(cbt_event_f64(&e, tu_name("rec.f"), 0.1), CBT_OK);
            assert_int_equal(cbt_event_bool(&e, tu_name("rec.b"), true), CBT_OK);
            assert_int_equal(cbt_event_i64(&e, tu_name("rec.neg"), -5), CBT_OK);
            assert_int_equal(cbt_publish(&e), CBT_OK);
        } else {
            tu_pub(CBT_EV_MP_REQUEST_START, sid);
        }
        tu_pub(store ? CBT_EV_MP_STORE_SUBMITTED : CBT_EV_MP_RETRIEVE_SUBMITTED, sid);
        tu_pub_on(s, store ? CBT_EV_MP_STORE_START : CBT_EV_MP_RETRIEVE_START, sid);
        cbt_launch_info li = cbt_launch_info_default(CBT_KOP_SCATTER, N_CTAS);
        li.mode = i == 1 ? CBT_REC_CTA : CBT_REC_LAUNCH;
        li.requested_tokens = 1000;
        li.num_layers = 32;
        jobs[i].tokens = 100u * (uint32_t)(i + 1);
        assert_int_equal(cbt_launch_begin(s, sid, &li, &jobs[i].span), CBT_OK);
        assert_non_null(jobs[i].span.ring);
        assert_int_equal(cbt_cpu_launch(s, N_CTAS, scatter_cta, &jobs[i]), CBT_OK);
        tu_pub_on(s, store ? CBT_EV_MP_STORE_END : CBT_EV_MP_RETRIEVE_END, sid);
        tu_pub_i64(CBT_EV_MP_REQUEST_END, sid, "tokens", 64 * (i + 1), "hit", i);
    }
    /* a pspan with attributes */
    cbt_pspan p;
    cbt_meta meta[2] = {cbt_meta_i64(tu_name("rec.i"), 7), cbt_meta_str(tu_name("rec.s"), "x")};
    assert_int_equal(cbt_pspan_begin(&p, tu_name("rec.op"), CBT_SPAN_KIND_CLIENT, "rec-p", NULL,
                                     meta, 2),
                     CBT_OK);
    sleep_ms(1);
    cbt_meta endm = cbt_meta_bool(tu_name("rec.ok"), true);
    assert_int_equal(cbt_pspan_end(&p, &endm, 1), CBT_OK);
    /* a pspan timed by the CPU stream */
    cbt_stream *s2;
    assert_int_equal(cbt_stream_cpu_create(0, &s2), CBT_OK);
    cbt_pspan ps;
    assert_int_equal(cbt_pspan_begin_on(&ps, s2, tu_name("rec.streamed"), CBT_SPAN_KIND_INTERNAL,
                                        "rec-p", &p.ctx, NULL, 0),
                     CBT_OK);
    tu_enqueue_sleep(s2, 200);
    assert_int_equal(cbt_pspan_end_on(&ps, NULL, 0), CBT_OK);
    assert_int_equal(cbt_stream_sync(s2), CBT_OK);
    cbt_stream_destroy(s2);
    /* a request whose root joins a remote parent */
    cbt_span_ctx parent;
    memset(&parent, 0, sizeof parent);
    for (int k = 0; k < 16; k++)
        parent.trace_id[k] = (uint8_t)(0xa0 + k);
    for (int k = 0; k < 8; k++)
        parent.span_id[k] = (uint8_t)(0x10 + k);
    parent.trace_flags = 1;
    pub_ctx(CBT_EV_MP_REQUEST_START, "rec-ctx", &parent);
    tu_pub(CBT_EV_MP_REQUEST_END, "rec-ctx");
    /* CacheBlend */
    tu_pub(CBT_EV_CB_REQUEST_START, "cb-1");
    tu_pub(CBT_EV_CB_LOOKUP_START, "cb-1");
    tu_pub_i64(CBT_EV_CB_LOOKUP_END, "cb-1", "hit_tokens", 48, NULL, 0);
    tu_pub(CBT_EV_CB_REQUEST_END, "cb-1");
    /* left open: the shutdown ends it */
    tu_pub(CBT_EV_MP_REQUEST_START, "rec-open");
    assert_int_equal(cbt_stream_sync(s), CBT_OK);
    cbt_stream_destroy(s);
    /* the ring is polled each round: wait until the launches have joined */
    for (int i = 0; i < 2000 && tu_count("cb.scatter", NULL) < N_REQ; i++) {
        tu_flush();
        sleep_ms(1);
    }
    assert_int_equal(tu_count("cb.scatter", NULL), N_REQ);
}

/* Copy `path` and its record count to $CBT_TEST_RECORDINGS/<name>, for
 * LMCache's reader (tests/lmcache/lmct_recordings_check.py). */
static void export_recording(const char *path, const char *name, uint64_t records)
{
    const char *dir = getenv("CBT_TEST_RECORDINGS");
    if (!dir || !*dir)
        return;
    mkdir(dir, 0755);
    char dst[512];
    size_t n;
    unsigned char *b = slurp(path, &n);
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    spit(dst, b, n);
    free(b);
    snprintf(dst, sizeof dst, "%s/%s.count", dir, name);
    FILE *f = fopen(dst, "w");
    assert_non_null(f);
    fprintf(f, "%" PRIu64 "\n", records);
    fclose(f);
}

static spanset record_live(const char *path, int with_cb, cbt_metrics *m)
{
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    c.trace_level = "gpu";
    c.trace_output = path;
    tu_start(&c);
    if (with_cb) {
        cbt_subscriber cb;
        assert_int_equal(cbt_cb_subscriber_create(0, &cb), CBT_OK);
        assert_int_equal(cbt_add_subscriber(&cb), CBT_OK);
    }
    workload();
    tu_stop_final(m);
    return snapshot_spans();
}

static cbt_replay_options quiet_opts(bool force)
{
    cbt_replay_options o = cbt_replay_options_default();
    o.force = force;
    static FILE *devnull;
    if (!devnull)
        devnull = fopen("/dev/null", "w");
    o.log = devnull;
    return o;
}

static int g_arr_sink;
static void arr_sink_add(void);

/* Replay `path` into a fresh replay tracer with a memory sink: the spans,
 * the stats and cbt_replay_run's status. */
static cbt_status replay_file_opts(const char *path, const cbt_replay_options *o,
                                   cbt_replay_stats *st, spanset *out)
{
    cbt_replay *r = NULL;
    cbt_status s = cbt_replay_open(path, o, &r);
    if (s) {
        assert_null(r);
        return s;
    }
    cbt_config c = cbt_config_default();
    assert_int_equal(cbt_replay_config(r, &c), CBT_OK);
    assert_true(c.replay);
    tu_start(&c);
    if (g_arr_sink)
        arr_sink_add();
    assert_int_equal(cbt_replay_add_builders(r), CBT_OK);
    *st = (cbt_replay_stats)CBT_STRUCT_INIT(cbt_replay_stats);
    cbt_status rs = cbt_replay_run(r, st);
    tu_stop();
    *out = snapshot_spans();
    cbt_replay_close(r);
    return rs;
}

static cbt_status replay_file(const char *path, bool force, cbt_replay_stats *st, spanset *out)
{
    cbt_replay_options o = quiet_opts(force);
    return replay_file_opts(path, &o, st, out);
}

/* ---- SHA-256 (host/util/sha256.c): FIPS 180-2's examples ------------------------- */

static void sha256_vectors(void **state)
{
    (void)state;
    char out[65];
    cbt_sha256_hex_("", 0, out);
    assert_string_equal(out, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    cbt_sha256_hex_("abc", 3, out);
    assert_string_equal(out, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    cbt_sha256_hex_(m448, strlen(m448), out);
    assert_string_equal(out, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    char *a = malloc(1000000);
    assert_non_null(a);
    memset(a, 'a', 1000000);
    cbt_sha256_hex_(a, 1000000, out);
    assert_string_equal(out, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    /* the padding edges: 55, 56 and 64 bytes (one or two final blocks) */
    cbt_sha256_hex_(a, 55, out);
    assert_string_equal(out, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
    cbt_sha256_hex_(a, 56, out);
    assert_string_equal(out, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
    cbt_sha256_hex_(a, 64, out);
    assert_string_equal(out, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
    free(a);
}

/* ---- live vs replay ------------------------------------------------------------------ */

static void check_header(const char *path, int with_cb)
{
    cbt_lmct_reader *rd;
    assert_int_equal(cbt_lmct_reader_open(path, &rd), CBT_OK);
    const cbt_lmct_header *h = cbt_lmct_reader_header(rd);
    assert_string_equal(h->level, "gpu");
    char d[65];
    cbt_sha256_hex_(h->sm_config_json, strlen(h->sm_config_json), d);
    assert_string_equal(h->sm_config_digest, d);
    assert_non_null(strstr(h->sm_config_json, "\"name\":\"mp\""));
    assert_true(!!strstr(h->sm_config_json, "\"name\":\"cb\"") == !!with_cb);
    /* a program's own subscriber (tu_start's recorder) is not a builder */
    assert_null(strstr(h->sm_config_json, "test-recorder"));
    cbt_lmct_reader_close(rd);
}

static void live_equals_replay(int with_cb)
{
    char path[256];
    path_in(path, sizeof path, with_cb ? "live-cb.lct" : "live.lct");
    cbt_metrics m;
    spanset live = record_live(path, with_cb, &m);
    assert_true(live.n >= 3 * N_REQ);
    assert_true(m.trace_records > 0);
    assert_int_equal(m.trace_records_dropped, 0);
    assert_int_equal(m.trace_write_errors, 0);
    assert_int_equal(m.trace_bytes, file_size(path));
    check_header(path, with_cb);
    export_recording(path, with_cb ? "test_recorder-cb.lct" : "test_recorder.lct",
                     m.trace_records);

    cbt_replay_stats st;
    spanset rep;
    assert_int_equal(replay_file(path, false, &st, &rep), CBT_OK);
    assert_int_equal(st.version, CBT_REPLAY_STATS_VERSION);
    assert_int_equal(st.records, m.trace_records);
    assert_true(st.events > 0);
    assert_int_equal(st.ring_records, (N_REQ - 1) + N_CTAS); /* one per launch, one per CTA of the CTA-mode one */
    assert_true(st.clock_records >= 1);
    assert_int_equal(st.unknown_skipped, 0);
    assert_int_equal(st.malformed_skipped, 0);
    assert_int_equal(st.bytes, file_size(path));
    assert_int_equal(st.truncated, 0);
    assert_int_equal(st.shutdown_seen, 1);
    sets_eq(&live, &rep);
    /* what the workload made is there, so the comparison was not of nothing */
    uint32_t cb = 0, open = 0, remote = 0, pspan = 0, scatter = 0;
    for (uint32_t i = 0; i < rep.n; i++) {
        const char *n = cbt_name_str(rep.s[i].name);
        cb += strcmp(n, "cb.request") == 0;
        scatter += strcmp(n, "cb.scatter") == 0;
        pspan += strcmp(n, "rec.op") == 0 || strcmp(n, "rec.streamed") == 0;
        open += (rep.s[i].flags & CBT_SPANF_INCOMPLETE) != 0;
        remote += rep.s[i].ctx.trace_id[0] == 0xa0 && rep.s[i].ctx.trace_id[15] == 0xaf &&
                  rep.s[i].parent_span_id[0] == 0x10;
        (void)ctx_zero;
    }
    const cbt_span *root0 = NULL;
    for (uint32_t i = 0; i < rep.n && !root0; i++)
        if (strcmp(cbt_name_str(rep.s[i].name), "request") == 0) {
            const cbt_attr *a = cbt_span_attr(&rep.s[i], CBT_N_SESSION_ID);
            if (a && a->str_len == 5 && memcmp(cbt_attr_str(&rep.s[i], a), "rec-0", 5) == 0)
                root0 = &rep.s[i];
        }
    assert_non_null(root0);
    const cbt_attr *ma = cbt_span_attr(root0, tu_name("model"));
    assert_non_null(ma);
    assert_int_equal(ma->str_len, 119);
    assert_int_equal(cb, with_cb ? 1 : 0);
    assert_int_equal(scatter, N_REQ);
    assert_int_equal(pspan, 2);
    /* the stream-timed spans carry their queue times, replayed (compared
     * above with every attribute): the N_REQ stores and retrieves, their
     * kernels, the pspan begun on a stream; their roots the sums */
    uint32_t queued = 0, gpu_roots = 0;
    for (uint32_t i = 0; i < rep.n; i++) {
        queued += cbt_span_attr(&rep.s[i], CBT_N_QUEUE_NS) != NULL;
        gpu_roots += cbt_span_attr(&rep.s[i], CBT_N_GPU_BUSY_NS) != NULL;
    }
    assert_int_equal(queued, 2 * N_REQ + 1);
    assert_int_equal(gpu_roots, N_REQ);
    assert_true(open >= 1);
    assert_int_equal(remote, 1);
    free(live.s);
    free(rep.s);
}

static void live_vs_replay(void **state)
{
    (void)state;
    live_equals_replay(0);
}

static void live_vs_replay_cacheblend(void **state)
{
    (void)state;
    live_equals_replay(1);
}

/* A configuration far from the defaults (pool, registry, MP tree options,
 * no CPU ring, a CacheBlend subscriber with its own options) is rebuilt by
 * cbt_replay_config and cbt_replay_add_builders: cbt_replay_run finds the
 * replay tracer's configuration the recorded one, and the spans agree. */
static void nondefault_config(void **state)
{
    (void)state;
    char path[256];
    path_in(path, sizeof path, "odd.lct");
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    c.trace_level = "gpu";
    c.trace_output = path;
    c.span_pool = 700;
    c.registry_capacity = 2048;
    c.max_sessions = 100;
    c.mp_root_end = CBT_ROOT_END_TRANSFER;
    c.session_idle_ms = 250;
    c.late_grace_ms = CBT_TREE_OFF;
    c.ring_capacity = 0;
    tu_start(&c);
    cbt_tree_options o = CBT_STRUCT_INIT(cbt_tree_options);
    o.max_sessions = 50;
    o.idle_ms = CBT_TREE_OFF;
    o.grace_ms = 1234;
    cbt_subscriber cb;
    assert_int_equal(cbt_cb_subscriber_create_opts(&o, &cb), CBT_OK);
    assert_int_equal(cbt_add_subscriber(&cb), CBT_OK);
    char sid[32];
    for (int i = 0; i < 6; i++) {
        snprintf(sid, sizeof sid, "odd-%d", i);
        tu_pub(CBT_EV_MP_REQUEST_START, sid);
        tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
        tu_pub(CBT_EV_MP_STORE_START, sid);
        tu_pub(CBT_EV_MP_STORE_END, sid);
        if (i != 2)
            tu_pub(CBT_EV_MP_REQUEST_END, sid);
        tu_pub(CBT_EV_CB_REQUEST_START, sid);
        tu_pub(CBT_EV_CB_REQUEST_END, sid);
    }
    cbt_metrics m;
    tu_stop_final(&m);
    spanset live = snapshot_spans();
    assert_true(live.n >= 12);
    cbt_lmct_reader *rd;
    assert_int_equal(cbt_lmct_reader_open(path, &rd), CBT_OK);
    const char *js = cbt_lmct_reader_header(rd)->sm_config_json;
    assert_non_null(strstr(js, "\"span_pool\":700,\"registry_capacity\":2048"));
    assert_non_null(strstr(js, "\"host\":false"));
    assert_non_null(strstr(js, "\"max_sessions\":100,\"root_end\":\"transfer_end\",\"idle_ms\":250"));
    assert_non_null(strstr(js, "\"name\":\"cb\",\"max_sessions\":50"));
    cbt_lmct_reader_close(rd);
    cbt_replay_options ro = quiet_opts(false);
    cbt_replay *r;
    assert_int_equal(cbt_replay_open(path, &ro, &r), CBT_OK);
    cbt_config rc = cbt_config_default();
    assert_int_equal(cbt_replay_config(r, &rc), CBT_OK);
    assert_int_equal(rc.span_pool, 700);
    assert_int_equal(rc.registry_capacity, 2048);
    assert_int_equal(rc.max_sessions, 100);
    assert_int_equal(rc.mp_root_end, CBT_ROOT_END_TRANSFER);
    assert_int_equal(rc.session_idle_ms, 250);
    assert_int_equal(rc.ring_capacity, 0);
    cbt_replay_close(r);
    cbt_replay_stats st;
    spanset rep;
    assert_int_equal(replay_file(path, false, &st, &rep), CBT_OK);
    assert_int_equal(st.shutdown_seen, 1);
    sets_eq(&live, &rep);
    free(live.s);
    free(rep.s);
}

/* ---- configuration refusals ------------------------------------------------------ */

static void bad_config(void **state)
{
    (void)state;
    char path[256];
    path_in(path, sizeof path, "x.lct");
    cbt_config c = cbt_config_default();
    c.trace_level = "cpu";
    c.trace_output = path;
    assert_int_equal(cbt_init(&c), CBT_ERR_INVAL);
    assert_null(cbt_tracer_get());
    c.trace_level = "gpu";
    c.trace_output = "/nonexistent-cbt-dir/sub/x.lct";
    assert_int_equal(cbt_init(&c), CBT_ERR_IO);
    assert_null(cbt_tracer_get());
    c.trace_output = path;
    c.replay = true;
    assert_int_equal(cbt_init(&c), CBT_ERR_INVAL);
    assert_null(cbt_tracer_get());
    c.replay = false;
    c.trace_buffer_kib = 32; /* under the 64 KiB floor */
    assert_int_equal(cbt_init(&c), CBT_ERR_INVAL);
    assert_null(cbt_tracer_get());
}

/* CBT_TRACE_LEVEL=gpu without an output: cbt-trace-<pid>-<stamp>.lct under
 * $TMPDIR, a readable recording after shutdown. */
static void env_default_path(void **state)
{
    (void)state;
    char *old_tmp = getenv("TMPDIR") ? strdup(getenv("TMPDIR")) : NULL;
    setenv("TMPDIR", g_dir, 1);
    setenv("CBT_TRACE_LEVEL", "gpu", 1);
    unsetenv("CBT_TRACE_OUTPUT");
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    tu_start(&c);
    tu_pub(CBT_EV_MP_REQUEST_START, "env-1");
    tu_pub(CBT_EV_MP_REQUEST_END, "env-1");
    cbt_metrics m;
    tu_stop_final(&m);
    unsetenv("CBT_TRACE_LEVEL");
    if (old_tmp)
        setenv("TMPDIR", old_tmp, 1), free(old_tmp);
    else
        unsetenv("TMPDIR");
    char prefix[64], found[512] = "";
    snprintf(prefix, sizeof prefix, "cbt-trace-%ld-", (long)getpid());
    DIR *d = opendir(g_dir);
    assert_non_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0 && l > 4 &&
            strcmp(e->d_name + l - 4, ".lct") == 0) {
            snprintf(found, sizeof found, "%s/%s", g_dir, e->d_name);
            n++;
        }
    }
    closedir(d);
    assert_int_equal(n, 1);
    assert_true(m.trace_records >= 2);
    assert_int_equal(m.trace_bytes, file_size(found));
    cbt_replay_stats st;
    spanset rep;
    assert_int_equal(replay_file(found, false, &st, &rep), CBT_OK);
    assert_int_equal(st.events, 2);
    assert_int_equal(st.shutdown_seen, 1);
    assert_int_equal(rep.n, 1);
    free(rep.s);
    unlink(found);
}

/* cbt_init and cbt_shutdown with nothing published: a recording that
 * replays into no spans, cleanly. */
static void idle_recording(void **state)
{
    (void)state;
    char path[256];
    path_in(path, sizeof path, "idle.lct");
    cbt_config c = cbt_config_default();
    c.trace_level = "gpu";
    c.trace_output = path;
    assert_int_equal(cbt_init(&c), CBT_OK);
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_shutdown_final(&m), CBT_OK);
    assert_int_equal(m.trace_bytes, file_size(path));
    cbt_replay_stats st;
    spanset rep;
    assert_int_equal(replay_file(path, false, &st, &rep), CBT_OK);
    assert_int_equal(st.records, m.trace_records);
    assert_int_equal(st.events, 0);
    assert_int_equal(st.shutdown_seen, 1);
    assert_int_equal(rep.n, 0);
    free(rep.s);
}

/* Two recordings to the default path within one second (a process that
 * starts cbt twice, as this test does): two files, neither overwritten (the
 * default name is taken with O_EXCL, and a taken one gets a -N suffix). */
static void env_default_path_twice(void **state)
{
    (void)state;
    char *old_tmp = getenv("TMPDIR") ? strdup(getenv("TMPDIR")) : NULL;
    setenv("TMPDIR", g_dir, 1);
    setenv("CBT_TRACE_LEVEL", "gpu", 1);
    unsetenv("CBT_TRACE_OUTPUT");
    for (int i = 0; i < 2; i++) {
        cbt_config c = cbt_config_default();
        assert_int_equal(cbt_init(&c), CBT_OK);
        assert_int_equal(cbt_shutdown(), CBT_OK);
    }
    unsetenv("CBT_TRACE_LEVEL");
    if (old_tmp)
        setenv("TMPDIR", old_tmp, 1), free(old_tmp);
    else
        unsetenv("TMPDIR");
    DIR *d = opendir(g_dir);
    assert_non_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)))
        n += strncmp(e->d_name, "cbt-trace-", 10) == 0;
    closedir(d);
    assert_int_equal(n, 2);
}

/* ---- a full buffer ------------------------------------------------------------------ */

typedef struct burst_arg {
    uint32_t n;
    cbt_name pad;
    _Atomic int done;
} burst_arg;

static void *burst_main(void *a_)
{
    burst_arg *a = a_;
    cbt_event e;
    char sid[32];
    for (uint32_t i = 0; i < a->n; i++) {
        snprintf(sid, sizeof sid, "burst-%u", i % 64);
        cbt_event_init(&e, CBT_EV_MP_STORE_SUBMITTED, sid);
        cbt_event_str(&e, a->pad, "0123456789012345678901234567890123456789");
        (void)cbt_publish(&e); /* CBT_ERR_FULL (a full lane) is a drop, not a wait */
    }
    atomic_store(&a->done, 1);
    return NULL;
}

static void burst_run(int quiet_end)
{
    char path[256];
    path_in(path, sizeof path, "burst.lct");
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    c.trace_level = "gpu";
    c.trace_output = path;
    c.trace_buffer_kib = 64;
    tu_start(&c);
    burst_arg a = {.n = 60000, .pad = tu_name("burst.pad")};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, burst_main, &a), 0);
    /* publishing never waits for the recorder: the burst ends in seconds */
    for (int i = 0; i < 20000 && !atomic_load(&a.done); i++)
        sleep_ms(1);
    assert_true(atomic_load(&a.done));
    pthread_join(th, NULL);
    if (quiet_end) {
        /* let the writer catch up, then one more event, which fits and
         * carries the gap of whatever was dropped before it */
        assert_int_equal(cbt_flush(10000), CBT_OK);
        sleep_ms(300);
        tu_pub(CBT_EV_MP_REQUEST_START, "after");
        tu_pub(CBT_EV_MP_REQUEST_END, "after");
    }
    /* else: the shutdown right behind the burst, the buffer still full */
    cbt_metrics m;
    tu_stop_final(&m);
    cbt_lmct_reader *rd;
    assert_int_equal(cbt_lmct_reader_open(path, &rd), CBT_OK);
    const cbt_lmct_record *rec;
    uint64_t n = 0, gaps = 0, gap_sum = 0, shutdowns = 0, resynced = 0;
    /* after a gap, before the next event: the clock, the id state and the
     * round again (what was dropped may have held them) */
    int after_gap = 0, seen_clock = 0, seen_ids = 0, seen_round = 0;
    while (cbt_lmct_reader_next(rd, &rec) == CBT_OK && rec) {
        n++;
        const char *q = rec->qualname;
        if (strcmp(q, "cbt.gap") == 0) {
            gaps++;
            assert_int_equal(rec->arg_count, 1);
            assert_int_equal(rec->args[0].value.type, CBT_LMCT_UINT);
            gap_sum += rec->args[0].value.v.u;
            after_gap = 1, seen_clock = seen_ids = seen_round = 0;
        } else if (after_gap) {
            seen_clock |= strcmp(q, "cbt.clock") == 0;
            seen_ids |= strcmp(q, "cbt.ids") == 0;
            seen_round |= strcmp(q, "cbt.round") == 0;
            if (strcmp(q, "cbt.event") == 0) {
                if (!seen_clock || !seen_ids || !seen_round)
                    fail_msg("record %" PRIu64 ": an event after gap %" PRIu64 " with no "
                             "%s%s%s record between them", n, gaps, seen_clock ? "" : "cbt.clock ",
                             seen_ids ? "" : "cbt.ids ", seen_round ? "" : "cbt.round");
                after_gap = 0;
                resynced++;
            }
        }
        shutdowns += strcmp(q, "cbt.shutdown") == 0;
    }
    cbt_lmct_reader_close(rd);
    assert_int_equal(n, m.trace_records);
    print_message("buffer_full: %" PRIu64 " records, %" PRIu64 " dropped, %" PRIu64
                  " gap records announcing %" PRIu64 ", %" PRIu64 " shutdown records\n",
                  m.trace_records, m.trace_records_dropped, gaps, gap_sum, shutdowns);
    if (m.trace_records_dropped == 0) {
        assert_int_equal(gaps, 0);
    } else {
        assert_true(gaps > 0);
        assert_int_equal(gap_sum, m.trace_records_dropped);
    }
    assert_int_equal(shutdowns, 1);
    /* a replay says the recording is not exact, and still replays */
    cbt_replay_stats st;
    spanset rep;
    assert_int_equal(replay_file(path, false, &st, &rep), CBT_OK);
    assert_int_equal(st.records, n);
    assert_int_equal(st.shutdown_seen, 1);
    assert_int_equal(st.gaps, gaps);
    assert_int_equal(st.gap_records, gap_sum);
    free(rep.s);
    if (quiet_end) /* events followed the gaps: the check above saw resyncs */
        assert_true(gaps == 0 || resynced > 0);
    /* `cbt replay` says the recording dropped records, and exits 3 */
    const char *cli = getenv("CBT_TEST_CLI");
    if (gaps && cli && *cli) {
        char cmd[1024], err[256];
        path_in(err, sizeof err, "burst.err");
        snprintf(cmd, sizeof cmd, "'%s' replay '%s' >/dev/null 2>'%s'", cli, path, err);
        int ws = system(cmd);
        assert_true(WIFEXITED(ws));
        assert_int_equal(WEXITSTATUS(ws), 3);
        size_t en;
        char *e = (char *)slurp(err, &en);
        e[en] = '\0';
        char want[128];
        snprintf(want, sizeof want, "the recording dropped %" PRIu64 " records in %" PRIu64
                 " places", gap_sum, gaps);
        if (!strstr(e, want))
            fail_msg("cbt replay's stderr does not say '%s':\n%s", want, e);
        free(e);
    }
}

static void buffer_full(void **state)
{
    (void)state;
    burst_run(1);
}

/* The shutdown right after the burst: what was dropped last is still
 * announced in the file (a cbt.gap), and the shutdown record is there, even
 * with the buffer still full when the harvester stops (the recorder's close
 * writes the pending gap and the shutdown itself, after its writer). */
static void buffer_full_at_shutdown(void **state)
{
    (void)state;
    burst_run(0);
}

/* ---- tampered recordings ---------------------------------------------------------- */

typedef struct tamper {
    const char *level;        /* NULL: as recorded */
    const char *digest;       /* NULL: as recorded */
    const char *version;      /* level_meta cbt_version; NULL: as recorded */
    int extra_records;        /* insert a cbt.nosuch and a mistyped cbt.event */
    int bogus_times;          /* the 2nd, 3rd, 4th record that is not a cbt.event (the
                                 times a paced replay follows): t_mono 1e10, NaN, -1e30 */
    int bad_clocks;           /* insert copies of a cbt.clock with ns_per_tick inf and of a
                                 cbt.devclock with ticks_per_ns NaN */
    const char *json;         /* another sm_config_json, with its digest; NULL: as recorded */
    int no_stream;            /* as a file from before queue times: every cbt.event without
                                 its "stream" map and CBT_EVF_ENQUEUED */
} tamper;

/* Copy src to dst through the reader and writer, changing what `t` says. */
static void rewrite(const char *src, const char *dst, const tamper *t)
{
    cbt_lmct_reader *rd;
    assert_int_equal(cbt_lmct_reader_open(src, &rd), CBT_OK);
    cbt_lmct_header h = *cbt_lmct_reader_header(rd);
    cbt_lmct_kv meta[16];
    assert_true(h.level_meta_count <= 16);
    memcpy(meta, h.level_meta, h.level_meta_count * sizeof *meta);
    if (t->version)
        for (uint32_t i = 0; i < h.level_meta_count; i++)
            if (strcmp(meta[i].key, "cbt_version") == 0)
                meta[i].value = CBT_LMCT_S(t->version, (uint32_t)strlen(t->version));
    h.level_meta = meta;
    if (t->level)
        h.level = t->level;
    if (t->digest)
        h.sm_config_digest = t->digest;
    char jd[65];
    if (t->json) {
        h.sm_config_json = t->json;
        cbt_sha256_hex_(t->json, strlen(t->json), jd);
        h.sm_config_digest = jd;
    }
    cbt_lmct_writer *w;
    assert_int_equal(cbt_lmct_writer_open(dst, &h, &w), CBT_OK);
    const cbt_lmct_record *rec;
    int inserted = 0, non_events = 0, clock_bad = 0, dev_bad = 0;
    static const double bogus[3] = {1e10, NAN, -1e30};
    while (cbt_lmct_reader_next(rd, &rec) == CBT_OK && rec) {
        if (t->bogus_times && strcmp(rec->qualname, "cbt.event") != 0 && non_events++ >= 1 &&
            non_events <= 4) {
            cbt_lmct_record x = *rec;
            x.t_mono = bogus[non_events - 2];
            assert_int_equal(cbt_lmct_writer_append(w, &x), CBT_OK);
            continue;
        }
        int isclock = strcmp(rec->qualname, "cbt.clock") == 0;
        int isdev = strcmp(rec->qualname, "cbt.devclock") == 0;
        if (t->bad_clocks && ((isclock && !clock_bad) || (isdev && !dev_bad))) {
            /* the original, then a copy with a non-finite rate */
            assert_int_equal(cbt_lmct_writer_append(w, rec), CBT_OK);
            cbt_lmct_kv args[16];
            assert_true(rec->arg_count <= 16);
            memcpy(args, rec->args, rec->arg_count * sizeof *args);
            int hit = 0;
            for (uint32_t i = 0; i < rec->arg_count; i++)
                if (strcmp(args[i].key, isclock ? "ns_per_tick" : "ticks_per_ns") == 0)
                    args[i].value = CBT_LMCT_F(isclock ? INFINITY : NAN), hit = 1;
            assert_true(hit);
            cbt_lmct_record x = *rec;
            x.args = args;
            assert_int_equal(cbt_lmct_writer_append(w, &x), CBT_OK);
            clock_bad |= isclock, dev_bad |= isdev;
            continue;
        }
        if (t->no_stream && strcmp(rec->qualname, "cbt.event") == 0) {
            cbt_lmct_kv args[16];
            uint32_t n = 0;
            assert_true(rec->arg_count <= 16);
            for (uint32_t i = 0; i < rec->arg_count; i++) {
                if (strcmp(rec->args[i].key, "stream") == 0) {
                    inserted++;
                    continue;
                }
                args[n] = rec->args[i];
                if (strcmp(args[n].key, "flags") == 0)
                    args[n].value.v.u &= ~(uint64_t)CBT_EVF_ENQUEUED;
                n++;
            }
            cbt_lmct_record x = *rec;
            x.args = args;
            x.arg_count = n;
            assert_int_equal(cbt_lmct_writer_append(w, &x), CBT_OK);
            continue;
        }
        if (t->extra_records && !inserted && strcmp(rec->qualname, "cbt.event") == 0) {
            /* before the first event: a qualname no build knows, and a copy
             * of the event whose ts_ns is a string */
            cbt_lmct_record x = *rec;
            x.qualname = "cbt.nosuch";
            assert_int_equal(cbt_lmct_writer_append(w, &x), CBT_OK);
            cbt_lmct_kv args[16];
            assert_true(rec->arg_count <= 16);
            memcpy(args, rec->args, rec->arg_count * sizeof *args);
            for (uint32_t i = 0; i < rec->arg_count; i++)
                if (strcmp(args[i].key, "ts_ns") == 0)
                    args[i].value = CBT_LMCT_S("soon", 4);
            x = *rec;
            x.args = args;
            assert_int_equal(cbt_lmct_writer_append(w, &x), CBT_OK);
            inserted = 1;
        }
        assert_int_equal(cbt_lmct_writer_append(w, rec), CBT_OK);
    }
    assert_int_equal(cbt_lmct_writer_close(w), CBT_OK);
    cbt_lmct_reader_close(rd);
    assert_true(!t->extra_records || inserted);
    assert_true(!t->no_stream || inserted); /* there were stream marks to strip */
    assert_true(!t->bogus_times || non_events >= 4);
    assert_true(!t->bad_clocks || (clock_bad && dev_bad));
}

static void replay_refusals(void **state)
{
    (void)state;
    char live_p[256], bad[256];
    path_in(live_p, sizeof live_p, "base.lct");
    path_in(bad, sizeof bad, "tampered.lct");
    cbt_metrics m;
    spanset live = record_live(live_p, 0, &m);
    cbt_replay_options o = quiet_opts(false);
    cbt_replay *r = NULL;
    cbt_replay_stats st;
    spanset rep;

    /* a copy through the codec, unchanged, replays exactly */
    rewrite(live_p, bad, &(tamper){0});
    assert_int_equal(replay_file(bad, false, &st, &rep), CBT_OK);
    sets_eq(&live, &rep);
    free(rep.s);

    /* another config digest: refused, and replayed when forced */
    rewrite(live_p, bad, &(tamper){.digest = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"});
    assert_int_equal(cbt_replay_open(bad, &o, &r), CBT_ERR_REPLAY_MISMATCH);
    assert_null(r);
    assert_non_null(strstr(cbt_replay_message(NULL), "digest"));
    assert_int_equal(replay_file(bad, true, &st, &rep), CBT_OK);
    sets_eq(&live, &rep);
    free(rep.s);

    /* another cbt version: the same */
    rewrite(live_p, bad, &(tamper){.version = "0.0.1-other"});
    assert_int_equal(cbt_replay_open(bad, &o, &r), CBT_ERR_REPLAY_MISMATCH);
    assert_non_null(strstr(cbt_replay_message(NULL), "0.0.1-other"));
    assert_int_equal(replay_file(bad, true, &st, &rep), CBT_OK);
    sets_eq(&live, &rep);
    free(rep.s);

    /* level "events" (LMCache's own): refused, forced or not */
    rewrite(live_p, bad, &(tamper){.level = "events"});
    assert_int_equal(cbt_replay_open(bad, &o, &r), CBT_ERR_REPLAY_MISMATCH);
    cbt_replay_options f = quiet_opts(true);
    assert_int_equal(cbt_replay_open(bad, &f, &r), CBT_ERR_REPLAY_MISMATCH);
    assert_null(r);
    assert_non_null(strstr(cbt_replay_message(NULL), "events"));

    /* a record of an unknown qualname, and an event with a mistyped
     * argument: skipped and counted, the rest replays exactly */
    rewrite(live_p, bad, &(tamper){.extra_records = 1});
    assert_int_equal(replay_file(bad, false, &st, &rep), CBT_OK);
    assert_int_equal(st.unknown_skipped, 1);
    assert_int_equal(st.malformed_skipped, 1);
    assert_int_equal(st.records, m.trace_records + 2);
    assert_int_equal(st.shutdown_seen, 1);
    sets_eq(&live, &rep);
    free(rep.s);

    /* a file from before cbt recorded queue times (no "stream" maps, no
     * CBT_EVF_ENQUEUED): it replays whole, into the same spans at the same
     * times, and no span reports a queue time nobody recorded */
    rewrite(live_p, bad, &(tamper){.no_stream = 1});
    assert_int_equal(replay_file(bad, false, &st, &rep), CBT_OK);
    assert_int_equal(st.malformed_skipped, 0);
    assert_int_equal(rep.n, live.n);
    for (uint32_t i = 0; i < rep.n; i++) {
        assert_memory_equal(rep.s[i].ctx.span_id, live.s[i].ctx.span_id, 8);
        assert_int_equal(rep.s[i].start_ns, live.s[i].start_ns);
        assert_int_equal(rep.s[i].end_ns, live.s[i].end_ns);
        assert_null(cbt_span_attr(&rep.s[i], CBT_N_QUEUE_NS));
        assert_null(cbt_span_attr(&rep.s[i], CBT_N_ENQUEUE_NS));
        assert_null(cbt_span_attr(&rep.s[i], CBT_N_GPU_BUSY_NS));
    }
    free(rep.s);

    /* into a tracer that is not a replay tracer; a second run */
    assert_int_equal(cbt_replay_open(live_p, &o, &r), CBT_OK);
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    tu_start(&c);
    st = (cbt_replay_stats)CBT_STRUCT_INIT(cbt_replay_stats);
    assert_int_equal(cbt_replay_run(r, &st), CBT_ERR_INVAL);
    assert_non_null(strstr(cbt_replay_message(r), "not a replay tracer"));
    assert_int_equal(cbt_replay_add_builders(r), CBT_ERR_INVAL);
    tu_stop();
    assert_int_equal(cbt_replay_run(r, &st), CBT_ERR_NOT_INITIALIZED);
    c = cbt_config_default();
    assert_int_equal(cbt_replay_config(r, &c), CBT_OK);
    tu_start(&c);
    assert_int_equal(cbt_replay_run(r, &st), CBT_OK);
    assert_int_equal(cbt_replay_run(r, &st), CBT_ERR_INVAL);
    assert_non_null(strstr(cbt_replay_message(r), "run already"));
    tu_stop();
    cbt_replay_close(r);
    free(live.s);
}

/* ---- cut recordings ------------------------------------------------------------------ */

/* The byte offsets at which frames start (the header's is 0), and the end. */
static uint32_t frames(const unsigned char *b, size_t n, size_t *at, uint32_t cap)
{
    uint32_t k = 0;
    size_t off = 0;
    while (off + 4 <= n && k < cap) {
        at[k++] = off;
        uint32_t len = (uint32_t)b[off] << 24 | (uint32_t)b[off + 1] << 16 |
                       (uint32_t)b[off + 2] << 8 | b[off + 3];
        off += 4 + len;
    }
    assert_int_equal(off, n);
    return k;
}

static void cut_recordings(void **state)
{
    (void)state;
    char live_p[256], cut[256];
    path_in(live_p, sizeof live_p, "whole.lct");
    path_in(cut, sizeof cut, "cut.lct");
    cbt_metrics m;
    spanset live = record_live(live_p, 0, &m);
    size_t n;
    unsigned char *b = slurp(live_p, &n);
    static size_t at[1 << 16];
    uint32_t nf = frames(b, n, at, 1 << 16);
    assert_int_equal(nf, m.trace_records + 1); /* the header, then the records */
    uint32_t keep = nf * 3 / 4; /* frames kept whole, the header's included */
    assert_true(keep > 2 && keep < nf - 1);

    /* cut inside a frame's body: the records before it replay, a warning */
    spit(cut, b, at[keep] + 4 + (at[keep + 1] - at[keep] - 4) / 2);
    cbt_replay_stats st;
    spanset rep;
    assert_int_equal(replay_file(cut, false, &st, &rep), CBT_ERR_LMCT_TRUNCATED);
    assert_int_equal(st.version, CBT_REPLAY_STATS_VERSION);
    assert_int_equal(st.truncated, 1);
    assert_int_equal(st.records, keep - 1);
    assert_int_equal(st.bytes, at[keep]);
    assert_int_equal(st.shutdown_seen, 0);
    assert_true(st.events > 0);
    assert_true(complete_subset(&rep, &live) > 0);
    free(rep.s);
    /* cut inside a frame's length prefix: the same */
    spit(cut, b, at[keep] + 2);
    assert_int_equal(replay_file(cut, false, &st, &rep), CBT_ERR_LMCT_TRUNCATED);
    assert_int_equal(st.records, keep - 1);
    free(rep.s);

    /* a process that never shut down: every frame whole, no shutdown record;
     * the spans of the complete records, the open ones ended at cbt_shutdown */
    spit(cut, b, at[keep]);
    assert_int_equal(replay_file(cut, false, &st, &rep), CBT_OK);
    assert_int_equal(st.truncated, 0);
    assert_int_equal(st.records, keep - 1);
    assert_int_equal(st.shutdown_seen, 0);
    uint32_t whole = complete_subset(&rep, &live);
    assert_true(whole > 0);
    free(rep.s);
    /* the whole file minus its shutdown record: every span but those the
     * shutdown ended is the live run's */
    spit(cut, b, at[nf - 1]);
    assert_int_equal(replay_file(cut, false, &st, &rep), CBT_OK);
    assert_int_equal(st.shutdown_seen, 0);
    assert_true(complete_subset(&rep, &live) >= whole);
    assert_int_equal(rep.n, live.n);
    free(rep.s);
    free(b);
    free(live.s);
}

/* ---- the review fixes (b986770) --------------------------------------------------- */

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A replay of `path` at `speed` with the bare API (no cmocka: it runs in a
 * forked child): 0 when it ran. */
static int replay_bare(const char *path, double speed)
{
    cbt_replay_options o = quiet_opts(false);
    o.speed = speed;
    cbt_replay *r = NULL;
    if (cbt_replay_open(path, &o, &r) != CBT_OK)
        return 1;
    cbt_config c = cbt_config_default();
    if (cbt_replay_config(r, &c) != CBT_OK || cbt_init(&c) != CBT_OK)
        return 2;
    if (cbt_replay_add_builders(r) != CBT_OK)
        return 3;
    cbt_replay_stats st = CBT_STRUCT_INIT(cbt_replay_stats);
    cbt_status rs = cbt_replay_run(r, &st);
    (void)cbt_shutdown();
    cbt_replay_close(r);
    return rs == CBT_OK ? 0 : 4;
}

/* A paced replay (speed 1000) of a file whose harvester times are bogus (a
 * round at t_mono 1e10 s, one at NaN, one at -1e30) finishes in moments, and
 * its spans are the live run's. The first replay runs in a child with an
 * alarm, so a pacing that sleeps for years fails the test instead of
 * hanging it. */
static void paced_bogus_times(void **state)
{
    (void)state;
    char live_p[256], bad[256];
    path_in(live_p, sizeof live_p, "paced.lct");
    path_in(bad, sizeof bad, "paced-bogus.lct");
    cbt_metrics m;
    spanset live = record_live(live_p, 0, &m);
    rewrite(live_p, bad, &(tamper){.bogus_times = 1});
    double t0 = mono_s();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(10);
        _exit(replay_bare(bad, 1000.0));
    }
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    double took = mono_s() - t0, took_child = took;
    if (WIFSIGNALED(ws))
        fail_msg("the paced replay of bogus times was killed by signal %d after %.1f s "
                 "(SIGALRM: it hung)", WTERMSIG(ws), took);
    assert_true(WIFEXITED(ws));
    assert_int_equal(WEXITSTATUS(ws), 0);
    if (took > 5.0)
        fail_msg("the paced replay of bogus times took %.1f s", took);
    cbt_replay_options o = quiet_opts(false);
    o.speed = 1000.0;
    cbt_replay_stats st;
    spanset rep;
    t0 = mono_s();
    assert_int_equal(replay_file_opts(bad, &o, &st, &rep), CBT_OK);
    took = mono_s() - t0;
    print_message("paced_bogus_times: %.3f s in a child, %.3f s here\n", took_child, took);
    assert_true(took < 5.0);
    assert_int_equal(st.records, m.trace_records);
    assert_int_equal(st.malformed_skipped, 0);
    sets_eq(&live, &rep);
    free(rep.s);
    free(live.s);
}

/* A trace output that is not a regular file is refused: /dev/null; a FIFO
 * with no reader fails at once (it does not block cbt_init); a FIFO with a
 * reader is CBT_ERR_INVAL. The FIFO calls run in a child with an alarm. */
static int init_fifo_child(const char *fifo, int with_reader)
{
    alarm(5);
    int rfd = -1;
    if (with_reader && (rfd = open(fifo, O_RDONLY | O_NONBLOCK)) < 0)
        return 100;
    cbt_config c = cbt_config_default();
    c.trace_level = "gpu";
    c.trace_output = fifo;
    cbt_status st = cbt_init(&c);
    if (st == CBT_OK)
        (void)cbt_shutdown();
    if (rfd >= 0)
        close(rfd);
    return (int)st; /* a status, as an exit code */
}

static int fifo_status(const char *fifo, int with_reader)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(init_fifo_child(fifo, with_reader));
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    if (WIFSIGNALED(ws))
        fail_msg("cbt_init on a FIFO (%s a reader) was killed by signal %d (SIGALRM: it "
                 "blocked)", with_reader ? "with" : "without", WTERMSIG(ws));
    assert_true(WIFEXITED(ws));
    assert_int_not_equal(WEXITSTATUS(ws), 100);
    return WEXITSTATUS(ws);
}

static void output_not_regular(void **state)
{
    (void)state;
    cbt_config c = cbt_config_default();
    c.trace_level = "gpu";
    c.trace_output = "/dev/null";
    cbt_status st = cbt_init(&c);
    if (st == CBT_OK)
        (void)cbt_shutdown(); /* not tu_start's: tu_teardown would not take it down */
    assert_int_equal(st, CBT_ERR_INVAL);
    assert_null(cbt_tracer_get());
    char fifo[256];
    path_in(fifo, sizeof fifo, "out.fifo");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    int inval = (int)CBT_ERR_INVAL;
    double t0 = mono_s();
    int no_reader = fifo_status(fifo, 0);
    assert_int_not_equal(no_reader, 0);
    assert_true(mono_s() - t0 < 4.0);
    assert_int_equal(fifo_status(fifo, 1), inval);
    struct stat sb;
    assert_int_equal(stat(fifo, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode)); /* left as it was (no O_TRUNC'd file in its place) */
}

/* A program's own subscriber that opens and ends spans of its own, on the
 * harvester thread, while recording: its id draws are in the file
 * (cbt.ids), so a replay without it gives every builder span with the live
 * ids: the live spans minus the program's own are the replay's. */
static cbt_name g_mine_name;
static _Atomic uint32_t g_mine_made;

static cbt_status mine_on_event(void *ctx, cbt_tracer *t, const cbt_event *ev)
{
    (void)ctx;
    cbt_span *s = cbt_span_start(t, g_mine_name, CBT_SPAN_KIND_INTERNAL, NULL, ev->ts);
    if (s) {
        cbt_span_end(t, s, ev->ts + 1);
        atomic_fetch_add(&g_mine_made, 1);
    }
    return CBT_OK;
}

static void own_subscriber_ids(void **state)
{
    (void)state;
    char path[256];
    path_in(path, sizeof path, "mine.lct");
    g_mine_name = tu_name("mine.span");
    atomic_store(&g_mine_made, 0);
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    c.trace_level = "gpu";
    c.trace_output = path;
    tu_start(&c);
    cbt_subscriber sub;
    cbt_subscriber_init(&sub, "mine", NULL, mine_on_event, NULL, NULL);
    cbt_subscriber_want(&sub, CBT_EV_MP_STORE_SUBMITTED);
    cbt_subscriber_want(&sub, CBT_EV_MP_RETRIEVE_SUBMITTED);
    assert_int_equal(cbt_add_subscriber(&sub), CBT_OK);
    workload();
    cbt_metrics m;
    tu_stop_final(&m);
    spanset all = snapshot_spans();
    assert_int_equal(m.trace_records_dropped, 0);
    assert_true(atomic_load(&g_mine_made) >= N_REQ);
    /* the live spans but the program's own */
    spanset live = {calloc(all.n + 1, sizeof(cbt_span)), 0};
    assert_non_null(live.s);
    uint32_t mine = 0;
    for (uint32_t i = 0; i < all.n; i++) {
        if (all.s[i].name == g_mine_name)
            mine++;
        else
            live.s[live.n++] = all.s[i];
    }
    assert_int_equal(mine, atomic_load(&g_mine_made));
    assert_true(live.n >= 3 * N_REQ);
    cbt_lmct_reader *rd;
    assert_int_equal(cbt_lmct_reader_open(path, &rd), CBT_OK);
    assert_null(strstr(cbt_lmct_reader_header(rd)->sm_config_json, "\"mine\""));
    const cbt_lmct_record *rec;
    uint32_t ids = 0;
    while (cbt_lmct_reader_next(rd, &rec) == CBT_OK && rec)
        ids += strcmp(rec->qualname, "cbt.ids") == 0;
    cbt_lmct_reader_close(rd);
    cbt_replay_stats st;
    spanset rep;
    assert_int_equal(replay_file(path, false, &st, &rep), CBT_OK);
    assert_int_equal(st.malformed_skipped, 0);
    sets_eq(&live, &rep);
    assert_true(ids >= 1);
    free(rep.s);
    free(live.s);
    free(all.s);
}

/* Non-finite clock records are malformed: a copy with an extra cbt.clock
 * whose ns_per_tick is inf and an extra cbt.devclock whose ticks_per_ns is
 * NaN (each after its valid original) skips and counts both, and the spans
 * are the live run's (the ASan/UBSan build runs this too). */
static void nonfinite_clocks(void **state)
{
    (void)state;
    char live_p[256], bad[256];
    path_in(live_p, sizeof live_p, "clk.lct");
    path_in(bad, sizeof bad, "clk-bad.lct");
    cbt_metrics m;
    spanset live = record_live(live_p, 0, &m);
    rewrite(live_p, bad, &(tamper){.bad_clocks = 1});
    cbt_replay_stats st;
    spanset rep;
    assert_int_equal(replay_file(bad, false, &st, &rep), CBT_OK);
    assert_int_equal(st.malformed_skipped, 2);
    assert_int_equal(st.records, m.trace_records + 2);
    sets_eq(&live, &rep);
    free(rep.s);
    free(live.s);
}

/* A configuration asking for more than 2^20 sessions (a small file that
 * would make a replay allocate gigabytes) is a mismatch unless forced;
 * forced, it opens (not run here: it would allocate that much). */
static void huge_sessions_need_force(void **state)
{
    (void)state;
    char live_p[256], bad[256];
    path_in(live_p, sizeof live_p, "big.lct");
    path_in(bad, sizeof bad, "big-sessions.lct");
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    c.trace_level = "gpu";
    c.trace_output = live_p;
    tu_start(&c);
    tu_pub(CBT_EV_MP_REQUEST_START, "big-1");
    tu_pub(CBT_EV_MP_REQUEST_END, "big-1");
    tu_stop();
    cbt_lmct_reader *rd;
    assert_int_equal(cbt_lmct_reader_open(live_p, &rd), CBT_OK);
    const char *js = cbt_lmct_reader_header(rd)->sm_config_json;
    const char *key = "\"name\":\"mp\",\"max_sessions\":";
    const char *at = strstr(js, key);
    assert_non_null(at);
    at += strlen(key);
    const char *end = at;
    while (*end >= '0' && *end <= '9')
        end++;
    assert_true(end > at);
    char json[8192];
    snprintf(json, sizeof json, "%.*s2000000%s", (int)(at - js), js, end);
    cbt_lmct_reader_close(rd);
    rewrite(live_p, bad, &(tamper){.json = json});
    cbt_replay_options o = quiet_opts(false);
    cbt_replay *r = NULL;
    assert_int_equal(cbt_replay_open(bad, &o, &r), CBT_ERR_REPLAY_MISMATCH);
    assert_null(r);
    assert_non_null(strstr(cbt_replay_message(NULL), "sessions"));
    o = quiet_opts(true);
    assert_int_equal(cbt_replay_open(bad, &o, &r), CBT_OK);
    assert_non_null(r);
    cbt_replay_close(r);
    /* the unchanged JSON through the same rewrite opens unforced */
    rewrite(live_p, bad, &(tamper){0});
    o = quiet_opts(false);
    assert_int_equal(cbt_replay_open(bad, &o, &r), CBT_OK);
    cbt_replay_close(r);
}

/* Write failures are counted honestly: a file limit (RLIMIT_FSIZE, 64 KiB,
 * SIGXFSZ ignored) the recording passes gives one write error, records
 * dropped, a file no longer than the limit, and trace_records the complete
 * records really in it. The recording runs in a child (the test keeps its
 * limits); its metrics come back through a pipe.
 * At the limit the batch's first write(2) lands part of it and the next
 * fails (EFBIG): the writer takes the written part back out (ftruncate), so
 * the file holds exactly the records counted. */
enum { FSIZE_LIMIT = 64 << 10 };

static void fsize_child(const char *path, int wfd)
{
    alarm(20);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {FSIZE_LIMIT, FSIZE_LIMIT};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
        _exit(10);
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    c.trace_level = "gpu";
    c.trace_output = path;
    if (cbt_init(&c) != CBT_OK)
        _exit(11);
    cbt_name pad = 0;
    if (cbt_intern("fsize.pad", &pad) != CBT_OK)
        _exit(14);
    char sid[32];
    for (uint32_t i = 0; i < 6000; i++) {
        cbt_event e;
        snprintf(sid, sizeof sid, "fs-%u", i % 64);
        cbt_event_init(&e, CBT_EV_MP_STORE_SUBMITTED, sid);
        cbt_event_str(&e, pad, "0123456789012345678901234567890123456789");
        while (cbt_publish(&e) == CBT_ERR_FULL)
            (void)cbt_flush(1000);
    }
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    if (cbt_shutdown_final(&m) != CBT_OK)
        _exit(12);
    if (write(wfd, &m, sizeof m) != (ssize_t)sizeof m)
        _exit(13);
    _exit(0);
}

static void write_failure_counts(void **state)
{
    (void)state;
    char path[256];
    path_in(path, sizeof path, "fsize.lct");
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        fsize_child(path, pfd[1]);
    }
    close(pfd[1]);
    cbt_metrics m;
    memset(&m, 0, sizeof m);
    ssize_t got = read(pfd[0], &m, sizeof m);
    close(pfd[0]);
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    if (WIFSIGNALED(ws))
        fail_msg("the recording child was killed by signal %d", WTERMSIG(ws));
    assert_true(WIFEXITED(ws));
    assert_int_equal(WEXITSTATUS(ws), 0);
    assert_int_equal(got, (ssize_t)sizeof m);
    uint64_t size = file_size(path);
    cbt_lmct_reader *rd;
    assert_int_equal(cbt_lmct_reader_open(path, &rd), CBT_OK);
    const cbt_lmct_record *rec;
    uint64_t n = 0;
    cbt_status rs;
    while ((rs = cbt_lmct_reader_next(rd, &rec)) == CBT_OK && rec)
        n++;
    cbt_lmct_reader_close(rd);
    print_message("write_failure_counts: %" PRIu64 " records, %" PRIu64 " dropped, %" PRIu64
                  " bytes, %" PRIu64 " write errors; file %" PRIu64 " bytes, %" PRIu64
                  " complete records (%s)\n",
                  m.trace_records, m.trace_records_dropped, m.trace_bytes,
                  m.trace_write_errors, size, n, cbt_strerror(rs));
    assert_true(rs == CBT_OK || rs == CBT_ERR_LMCT_TRUNCATED);
    assert_true(size <= FSIZE_LIMIT);
    assert_int_equal(m.trace_write_errors, 1);
    assert_true(m.trace_records_dropped > 0);
    assert_int_equal(n, m.trace_records);
}

/* ---- array values: recorded live, replayed into the same spans ------------------- */

/* Every array attribute of every span a sink is handed, written out while
 * the sink holds it (a span's arrays live until its sinks are done): the
 * span's name and session, the key, the type, the count and each element
 * exactly (floats as their bits: NaN, -0.0). A live run's text and its
 * replay's must be the same bytes. */
typedef struct arrtext {
    pthread_mutex_t mu;
    char *b;
    size_t n, cap;
    uint32_t arrays;     /* array attributes seen */
    uint32_t tokens_ok;  /* 128 k-token arrays whose every element was the one published */
} arrtext;
static arrtext g_at = {.mu = PTHREAD_MUTEX_INITIALIZER}; /* g_arr_sink: replay_file_opts adds it */

enum { N_TOKENS = 131072 };

/* The i-th token id: the int64 extremes, negatives, and ids of every msgpack width. */
static int64_t token(uint32_t i)
{
    if (i == 0)
        return INT64_MIN;
    if (i == 1)
        return INT64_MAX;
    if (i % 1000 == 7)
        return -(int64_t)i * 1000003;
    return (int64_t)((i * 2654435761u) % 152064u); /* a vocabulary's worth */
}

static void at_put(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void at_put(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (g_at.n + (size_t)k + 1 > g_at.cap) {
        size_t c = g_at.cap ? g_at.cap : 1 << 16;
        while (c < g_at.n + (size_t)k + 1)
            c *= 2;
        g_at.b = realloc(g_at.b, c);
        assert_non_null(g_at.b);
        g_at.cap = c;
    }
    va_start(ap, fmt);
    vsnprintf(g_at.b + g_at.n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    g_at.n += (size_t)k;
}

static cbt_status arr_on_span(void *ctx, const cbt_span *s)
{
    (void)ctx;
    pthread_mutex_lock(&g_at.mu);
    const cbt_attr *sid = cbt_span_attr(s, CBT_N_SESSION_ID);
    for (uint32_t i = 0; i < s->n_attrs && i < CBT_SPAN_ATTR_MAX; i++) {
        cbt_array a;
        if (!cbt_attr_array(&s->attrs[i], &a))
            continue;
        g_at.arrays++;
        at_put("%s %.*s %s t%u n%u:", cbt_name_str(s->name), sid ? (int)sid->str_len : 0,
               sid ? cbt_attr_str(s, sid) : "", cbt_name_str(s->attrs[i].key), a.type, a.count);
        cbt_array_iter it;
        cbt_array_iter_init(&it, &a);
        uint32_t k = 0, same = 1;
        int64_t iv;
        double fv;
        bool bv;
        const char *sp;
        size_t len;
        switch (a.type) {
        case CBT_ARRAY_I64:
            for (; cbt_array_next_i64(&it, &iv); k++) {
                at_put(" %" PRId64, iv);
                same &= iv == token(k);
            }
            if (k == N_TOKENS && same)
                g_at.tokens_ok++;
            break;
        case CBT_ARRAY_F64:
            for (; cbt_array_next_f64(&it, &fv); k++) {
                uint64_t bits;
                memcpy(&bits, &fv, 8);
                at_put(" %016" PRIx64, bits);
            }
            break;
        case CBT_ARRAY_BOOL:
            for (; cbt_array_next_bool(&it, &bv); k++)
                at_put(" %d", bv);
            break;
        case CBT_ARRAY_STR:
            for (; cbt_array_next_str(&it, &sp, &len); k++)
                at_put(" %zu'%.*s'", len, (int)len, sp);
            break;
        default: break;
        }
        if (k != a.count)
            at_put(" WALKED %u", k);
        at_put("\n");
    }
    pthread_mutex_unlock(&g_at.mu);
    return CBT_OK;
}

static void arr_sink_add(void)
{
    cbt_sink k;
    memset(&k, 0, sizeof k);
    k.version = CBT_SINK_VERSION;
    k.size = sizeof k;
    k.name = "test-arrays";
    k.on_span = arr_on_span;
    assert_int_equal(cbt_add_sink(&k), CBT_OK);
}

static void arr_text_reset(void)
{
    pthread_mutex_lock(&g_at.mu);
    g_at.n = 0;
    g_at.arrays = g_at.tokens_ok = 0;
    if (g_at.b)
        g_at.b[0] = '\0';
    pthread_mutex_unlock(&g_at.mu);
}

/* The text so far, a copy. */
static char *arr_text_take(size_t *n, uint32_t *arrays, uint32_t *tokens_ok)
{
    pthread_mutex_lock(&g_at.mu);
    char *c = malloc(g_at.n + 1);
    assert_non_null(c);
    memcpy(c, g_at.b ? g_at.b : "", g_at.n);
    c[g_at.n] = '\0';
    *n = g_at.n;
    *arrays = g_at.arrays;
    *tokens_ok = g_at.tokens_ok;
    pthread_mutex_unlock(&g_at.mu);
    return c;
}

static int64_t *g_tokens;

/* A request whose START carries every kind of array value (each value
 * type, the extremes, empty ones, one dropped for a NULL string, a
 * string cut to the store's bound, a scalar among them), and one that
 * carries a 128 k-token prompt: the MP builder copies them to the roots. */
static void arrays_workload(int with_big)
{
    static const int64_t ints[] = {INT64_MIN, -1, 0, 1, INT64_MAX, 127, 128, -32, -33, 65536};
    const double fl[] = {NAN, -NAN, INFINITY, -INFINITY, -0.0, 0.1, 1e308, 5e-324, 1.0};
    static const bool bs[] = {true, false, true};
    static char longs[CBT_META_STR_MAX + 40];
    memset(longs, 'z', sizeof longs - 1);
    const char *ss[] = {"", "a", "token ids", "\xc3\xbc" "n\xc3\xaf" "c\xc3\xb6" "d\xc3\xa9", longs};
    const char *bad[] = {"x", NULL}; /* a NULL string: the array is dropped, the event goes out */
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, CBT_EV_MP_REQUEST_START, "arr-0"), CBT_OK);
    assert_int_equal(cbt_event_array_i64(&e, tu_name("arr.ints"), ints, 10), CBT_OK);
    assert_int_equal(cbt_event_array_f64(&e, tu_name("arr.floats"), fl, 9), CBT_OK);
    assert_int_equal(cbt_event_i64(&e, tu_name("arr.scalar"), -7), CBT_OK);
    assert_int_equal(cbt_event_array_bool(&e, tu_name("arr.bools"), bs, 3), CBT_OK);
    assert_int_equal(cbt_event_array_str(&e, tu_name("arr.strs"), ss, 5), CBT_OK);
    assert_int_equal(cbt_event_array_i64(&e, tu_name("arr.empty_i"), NULL, 0), CBT_OK);
    assert_int_equal(cbt_event_array_str(&e, tu_name("arr.empty_s"), NULL, 0), CBT_OK);
    assert_int_equal(cbt_event_array_f64(&e, tu_name("arr.empty_f"), NULL, 0), CBT_OK);
    assert_int_equal(cbt_event_array_bool(&e, tu_name("arr.empty_b"), NULL, 0), CBT_OK);
    assert_int_equal(cbt_event_array_str(&e, tu_name("arr.dropped"), bad, 2), CBT_OK);
    assert_int_equal(cbt_publish(&e), CBT_OK);
    tu_pub(CBT_EV_MP_REQUEST_END, "arr-0");
    if (with_big) {
        assert_int_equal(cbt_event_init(&e, CBT_EV_MP_REQUEST_START, "arr-1"), CBT_OK);
        assert_int_equal(cbt_event_str(&e, tu_name("lmcache.model"), "m"), CBT_OK);
        assert_int_equal(cbt_event_array_i64(&e, tu_name("lmcache.input_ids"), g_tokens, N_TOKENS),
                         CBT_OK);
        assert_int_equal(cbt_publish(&e), CBT_OK);
        /* a token-traced lookup (LMCache 0.5.7): the replay must build its
         * mp.request.trace as the live run did, from the recorded config */
        static const int64_t prompt[] = {101, 7, 7, 2048, 0};
        assert_int_equal(cbt_event_init(&e, CBT_EV_MP_LOOKUP, "arr-1"), CBT_OK);
        assert_int_equal(cbt_event_str(&e, tu_name("model_name"), "m"), CBT_OK);
        assert_int_equal(cbt_event_array_i64(&e, tu_name("token_ids"), prompt, 5), CBT_OK);
        assert_int_equal(cbt_publish(&e), CBT_OK);
        tu_pub(CBT_EV_MP_REQUEST_END, "arr-1");
    }
    /* after it, a small one: recorded whether the big one fit or not */
    int64_t three[] = {1, 2, 3};
    assert_int_equal(cbt_event_init(&e, CBT_EV_MP_REQUEST_START, "arr-2"), CBT_OK);
    assert_int_equal(cbt_event_array_i64(&e, tu_name("arr.after"), three, 3), CBT_OK);
    assert_int_equal(cbt_publish(&e), CBT_OK);
    tu_pub(CBT_EV_MP_REQUEST_END, "arr-2");
}

static spanset arrays_record(const char *path, uint32_t buffer_kib, cbt_metrics *m)
{
    if (!g_tokens) {
        g_tokens = malloc(N_TOKENS * sizeof *g_tokens);
        assert_non_null(g_tokens);
        for (uint32_t i = 0; i < N_TOKENS; i++)
            g_tokens[i] = token(i);
    }
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 50;
    c.trace_level = "gpu";
    c.trace_output = path;
    c.trace_buffer_kib = buffer_kib;
    c.token_trace = CBT_TOKEN_TRACE_ON;
    tu_start(&c);
    arr_sink_add();
    arrays_workload(1);
    tu_stop_final(m);
    return snapshot_spans();
}

/* The first difference of two texts, said. */
static void texts_eq(const char *live, size_t nl, const char *rep, size_t nr)
{
    if (nl == nr && memcmp(live, rep, nl) == 0)
        return;
    size_t i = 0;
    while (i < nl && i < nr && live[i] == rep[i])
        i++;
    size_t from = i > 60 ? i - 60 : 0;
    fail_msg("array attributes differ at byte %zu (live %zu bytes, replay %zu):\n live: %.120s\n "
             "replay: %.120s", i, nl, nr, live + from, rep + from);
}

static void arrays_live_vs_replay(void **state)
{
    (void)state;
    char path[256];
    path_in(path, sizeof path, "arrays.lct");
    arr_text_reset();
    cbt_metrics m;
    spanset live = arrays_record(path, 0, &m);
    size_t nl;
    uint32_t live_arrays, live_tokens;
    char *lt = arr_text_take(&nl, &live_arrays, &live_tokens);
    assert_int_equal(m.trace_records_dropped, 0);
    assert_int_equal(m.trace_write_errors, 0);
    assert_int_equal(m.trace_bytes, file_size(path));
    assert_true(m.arrays_dropped >= 1); /* the NULL string's */
    /* ints, floats, bools, strs, four empty ones; the tokens; the token
     * trace's lmcache.input_ids; arr.after */
    assert_int_equal(live_arrays, 11);
    assert_non_null(strstr(lt, "lmcache.input_ids t1 n5: 101 7 7 2048 0"));
    assert_int_equal(live_tokens, 1);
    assert_non_null(strstr(lt, "arr.floats t2 n9: 7ff8000000000000 fff8000000000000 "
                               "7ff0000000000000 fff0000000000000 8000000000000000"));
    assert_non_null(strstr(lt, "arr.ints t1 n10: -9223372036854775808 -1 0 1 9223372036854775807"));
    assert_non_null(strstr(lt, "arr.empty_s t4 n0:\n"));
    assert_null(strstr(lt, "arr.dropped"));
    assert_null(strstr(lt, "WALKED"));
    export_recording(path, "test_recorder-arrays.lct", m.trace_records);
    /* the 128 k-token frame is over CBT_LMCT_ARRAY_MAX items and read */
    cbt_lmct_reader *rd;
    assert_int_equal(cbt_lmct_reader_open(path, &rd), CBT_OK);
    const cbt_lmct_record *rec;
    uint32_t big = 0, typed = 0;
    while (cbt_lmct_reader_next(rd, &rec) == CBT_OK && rec) {
        if (strcmp(rec->qualname, "cbt.event") != 0)
            continue;
        for (uint32_t i = 0; i < rec->arg_count; i++) {
            const cbt_lmct_kv *a = &rec->args[i];
            if (strcmp(a->key, "arrays") == 0)
                typed++;
            if (strcmp(a->key, "values") != 0)
                continue;
            for (uint32_t k = 0; k < a->value.v.map.count; k++)
                big += a->value.v.map.items[k].value.type == CBT_LMCT_ARRAY &&
                       a->value.v.map.items[k].value.v.array.count == N_TOKENS;
        }
    }
    cbt_lmct_reader_close(rd);
    assert_int_equal(big, 1);
    assert_int_equal(typed, 4); /* arr-0, arr-1 (its start and its lookup), arr-2 */

    arr_text_reset();
    g_arr_sink = 1;
    cbt_replay_stats st;
    spanset rep;
    cbt_status rs = replay_file(path, false, &st, &rep);
    g_arr_sink = 0;
    assert_int_equal(rs, CBT_OK);
    assert_int_equal(st.malformed_skipped, 0);
    assert_int_equal(st.unknown_skipped, 0);
    assert_int_equal(st.gaps, 0);
    assert_int_equal(st.records, m.trace_records);
    size_t nr;
    uint32_t rep_arrays, rep_tokens;
    char *rt = arr_text_take(&nr, &rep_arrays, &rep_tokens);
    texts_eq(lt, nl, rt, nr);
    assert_int_equal(rep_arrays, live_arrays);
    assert_int_equal(rep_tokens, 1);
    sets_eq(&live, &rep); /* every other field, attrs_dropped (the dropped array) included */
    const cbt_span *r0 = NULL;
    for (uint32_t i = 0; i < rep.n; i++)
        if (strcmp(cbt_name_str(rep.s[i].name), "request") == 0 &&
            cbt_span_attr(&rep.s[i], tu_name("arr.dropped")) == NULL &&
            cbt_span_attr(&rep.s[i], tu_name("arr.ints")) != NULL)
            r0 = &rep.s[i];
    assert_non_null(r0);
    assert_true(r0->attrs_dropped >= 1);
    free(lt);
    free(rt);
    free(live.s);
    free(rep.s);
}

/* A buffer too small for the 128 k-token event (1 MiB of elements in a
 * 64 KiB buffer): that event is dropped and counted, the file says so
 * (cbt.gap), and the events around it are recorded and replayed. */
static void arrays_buffer_too_small(void **state)
{
    (void)state;
    char path[256];
    path_in(path, sizeof path, "arrays-small.lct");
    arr_text_reset();
    cbt_metrics m;
    spanset live = arrays_record(path, 64, &m);
    size_t nl;
    uint32_t live_arrays, live_tokens;
    char *lt = arr_text_take(&nl, &live_arrays, &live_tokens);
    assert_int_equal(live_tokens, 1); /* live, the spans have it */
    assert_int_equal(m.trace_records_dropped, 1);
    arr_text_reset();
    g_arr_sink = 1;
    cbt_replay_stats st;
    spanset rep;
    cbt_status rs = replay_file(path, false, &st, &rep);
    g_arr_sink = 0;
    assert_int_equal(rs, CBT_OK);
    assert_int_equal(st.gaps, 1);
    assert_int_equal(st.gap_records, 1);
    assert_int_equal(st.malformed_skipped, 0);
    size_t nr;
    uint32_t rep_arrays, rep_tokens;
    char *rt = arr_text_take(&nr, &rep_arrays, &rep_tokens);
    assert_int_equal(rep_tokens, 0);
    assert_int_equal(rep_arrays, live_arrays - 1);
    assert_non_null(strstr(rt, "arr.after t1 n3: 1 2 3\n"));
    assert_non_null(strstr(rt, "arr.ints t1 n10:"));
    free(lt);
    free(rt);
    free(live.s);
    free(rep.s);
}

/* Entries larger than the ring's slack, many times round a small ring: each
 * that would run past the end starts at cell 0 behind a pad entry; every
 * one recorded, replayed into the same arrays. */
static void arrays_wrap_the_ring(void **state)
{
    (void)state;
    enum { EVENTS = 40, ELEMS = 4800 }; /* 37.5 KiB an entry, 600 cells of a 4096-cell ring */
    char path[256];
    path_in(path, sizeof path, "arrays-wrap.lct");
    static int64_t v[ELEMS];
    cbt_metrics m;
    spanset live;
    /* a writer starved by a loaded machine may still let the ring fill (a
     * drop, counted): that run says nothing of the layout, so it is run again */
    for (int attempt = 0;; attempt++) {
        arr_text_reset();
        cbt_config c = cbt_config_default();
        c.poll_interval_us = 50;
        c.trace_level = "gpu";
        c.trace_output = path;
        c.trace_buffer_kib = 256;
        tu_start(&c);
        arr_sink_add();
        char sid[32];
        for (int i = 0; i < EVENTS; i++) {
            for (int k = 0; k < ELEMS; k++)
                v[k] = (int64_t)i * 1000003 - k;
            snprintf(sid, sizeof sid, "wrap-%d", i);
            cbt_event e;
            assert_int_equal(cbt_event_init(&e, CBT_EV_MP_REQUEST_START, sid), CBT_OK);
            assert_int_equal(cbt_event_array_i64(&e, tu_name("wrap.ids"), v, ELEMS), CBT_OK);
            assert_int_equal(cbt_publish(&e), CBT_OK);
            tu_pub(CBT_EV_MP_REQUEST_END, sid);
            tu_flush();
            sleep_ms(5); /* the writer drains: the test is of the layout, not of a full ring */
        }
        tu_stop_final(&m);
        live = snapshot_spans();
        if (m.trace_records_dropped == 0 || attempt == 2)
            break;
        print_message("arrays_wrap_the_ring: %" PRIu64 " records dropped (a busy machine): again\n",
                      m.trace_records_dropped);
        free(live.s);
    }
    size_t nl;
    uint32_t live_arrays, tok;
    char *lt = arr_text_take(&nl, &live_arrays, &tok);
    assert_int_equal(m.trace_records_dropped, 0);
    assert_int_equal(live_arrays, EVENTS);
    arr_text_reset();
    g_arr_sink = 1;
    cbt_replay_stats st;
    spanset rep;
    cbt_status rs = replay_file(path, false, &st, &rep);
    g_arr_sink = 0;
    assert_int_equal(rs, CBT_OK);
    assert_int_equal(st.malformed_skipped, 0);
    assert_int_equal(st.unknown_skipped, 0);
    assert_int_equal(st.records, m.trace_records);
    size_t nr;
    uint32_t rep_arrays;
    char *rt = arr_text_take(&nr, &rep_arrays, &tok);
    texts_eq(lt, nl, rt, nr);
    assert_int_equal(rep_arrays, EVENTS);
    sets_eq(&live, &rep);
    free(lt);
    free(rt);
    free(live.s);
    free(rep.s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sha256_vectors),
        cmocka_unit_test_setup_teardown(live_vs_replay, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(live_vs_replay_cacheblend, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(nondefault_config, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(bad_config, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(env_default_path, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(env_default_path_twice, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(idle_recording, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(buffer_full, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(buffer_full_at_shutdown, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(replay_refusals, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(cut_recordings, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(paced_bogus_times, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(output_not_regular, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(own_subscriber_ids, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(nonfinite_clocks, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(huge_sessions_need_force, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(write_failure_counts, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(arrays_live_vs_replay, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(arrays_buffer_too_small, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(arrays_wrap_the_ring, setup_dir, teardown_dir),
    };
    if (getenv("CBT_TEST_FILTER")) /* one case while working on it */
        cmocka_set_test_filter(getenv("CBT_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
