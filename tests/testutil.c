/* tests/testutil.c — owns the shared test helpers (see testutil.h). */
#include "testutil.h"

#include <errno.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static cbt_memsink *g_mem;
static cbt_span *g_spans;
static uint32_t g_n_spans;

static pthread_mutex_t g_ev_lock = PTHREAD_MUTEX_INITIALIZER;
static tu_event *g_events;
static uint32_t g_n_events;

cbt_name tu_name(const char *s)
{
    cbt_name n = 0;
    assert_int_equal(cbt_intern(s, &n), CBT_OK);
    return n;
}

static cbt_status rec_on_event(void *ctx, cbt_tracer *t, const cbt_event *ev)
{
    (void)ctx;
    (void)t;
    pthread_mutex_lock(&g_ev_lock);
    if (g_n_events < TU_MAX_EVENTS) {
        tu_event *e = &g_events[g_n_events++];
        e->type = ev->type;
        memcpy(e->session, ev->session, sizeof e->session);
        e->ts = ev->ts;
        e->pair = ev->pair;
        e->flags = ev->flags;
        int q = (ev->flags & CBT_EVF_ENQUEUED) != 0;
        e->enqueue_ns = q ? ev->enqueue_ns : 0;
        e->stream = q ? ev->stream : 0;
        e->device = q ? ev->device : 0;
    }
    pthread_mutex_unlock(&g_ev_lock);
    return CBT_OK;
}

void tu_start(const cbt_config *cfg)
{
    cbt_config c = cfg ? *cfg : cbt_config_default();
    if (!cfg)
        c.poll_interval_us = 50;
    assert_int_equal(cbt_init(&c), CBT_OK);
    cbt_sink sink;
    /* room for every span a test ends, even with a small pool (eviction
     * tests end many more spans than the pool holds at once) */
    uint32_t cap = c.span_pool * 2 + 64 < 16384 ? 16384 : c.span_pool * 2 + 64;
    if (cap > TU_MAX_SPANS)
        cap = TU_MAX_SPANS;
    assert_int_equal(cbt_memsink_create(cap, &g_mem, &sink), CBT_OK);
    assert_int_equal(cbt_add_sink(&sink), CBT_OK);
    if (!g_events)
        g_events = calloc(TU_MAX_EVENTS, sizeof *g_events);
    assert_non_null(g_events);
    g_n_events = 0;
    cbt_subscriber rec;
    memset(&rec, 0, sizeof rec);
    rec.version = CBT_SUBSCRIBER_VERSION;
    rec.size = sizeof rec;
    rec.name = "test-recorder";
    rec.on_event = rec_on_event;
    memset(rec.mask, 0xff, sizeof rec.mask);
    assert_int_equal(cbt_add_subscriber(&rec), CBT_OK);
    free(g_spans);
    g_spans = NULL;
    g_n_spans = 0;
}

static void snapshot(void)
{
    free(g_spans);
    g_n_spans = cbt_memsink_count(g_mem);
    g_spans = calloc(g_n_spans ? g_n_spans : 1, sizeof *g_spans);
    assert_non_null(g_spans);
    for (uint32_t i = 0; i < g_n_spans; i++)
        assert_int_equal(cbt_memsink_get(g_mem, i, &g_spans[i]), CBT_OK);
}

void tu_flush(void)
{
    assert_int_equal(cbt_flush(10000), CBT_OK);
    snapshot();
}

void tu_stop(void)
{
    assert_int_equal(cbt_shutdown(), CBT_OK);
    snapshot();
    cbt_memsink_release(g_mem);
    g_mem = NULL;
}

void tu_stop_final(cbt_metrics *m)
{
    *m = (cbt_metrics)CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_shutdown_final(m), CBT_OK);
    snapshot();
    cbt_memsink_release(g_mem);
    g_mem = NULL;
}

int tu_teardown(void **state)
{
    (void)state;
    if (cbt_tracer_get())
        tu_stop();
    cbt_shutdown(); /* idempotent */
    return 0;
}

uint32_t tu_span_count(void) { return g_n_spans; }
const cbt_span *tu_span(uint32_t i) { return i < g_n_spans ? &g_spans[i] : NULL; }

static int span_sid_is(const cbt_span *s, const char *sid)
{
    if (!sid)
        return 1;
    const cbt_attr *a = cbt_span_attr(s, CBT_N_SESSION_ID);
    return a && a->type == CBT_META_STR && a->str_len == strlen(sid) &&
           memcmp(cbt_attr_str(s, a), sid, a->str_len) == 0;
}

const cbt_span *tu_find(const char *name, const char *sid, uint32_t i)
{
    cbt_name n = tu_name(name);
    for (uint32_t k = 0; k < g_n_spans; k++) {
        if (g_spans[k].name == n && span_sid_is(&g_spans[k], sid)) {
            if (i == 0)
                return &g_spans[k];
            i--;
        }
    }
    return NULL;
}

uint32_t tu_count(const char *name, const char *sid)
{
    uint32_t c = 0;
    while (tu_find(name, sid, c))
        c++;
    return c;
}

int tu_has_attr(const cbt_span *s, const char *key)
{
    return cbt_span_attr(s, tu_name(key)) != NULL;
}

int64_t tu_attr_i64(const cbt_span *s, const char *key)
{
    const cbt_attr *a = cbt_span_attr(s, tu_name(key));
    assert_non_null(a);
    assert_int_equal(a->type, CBT_META_I64);
    return a->v.i64;
}

double tu_attr_f64(const cbt_span *s, const char *key)
{
    const cbt_attr *a = cbt_span_attr(s, tu_name(key));
    assert_non_null(a);
    assert_int_equal(a->type, CBT_META_F64);
    return a->v.f64;
}

int tu_is_child_of(const cbt_span *child, const cbt_span *parent)
{
    return memcmp(child->parent_span_id, parent->ctx.span_id, 8) == 0 &&
           memcmp(child->ctx.trace_id, parent->ctx.trace_id, 16) == 0;
}

int tu_is_root(const cbt_span *s)
{
    static const uint8_t zero[8];
    return memcmp(s->parent_span_id, zero, 8) == 0;
}

uint32_t tu_event_count(void)
{
    pthread_mutex_lock(&g_ev_lock);
    uint32_t n = g_n_events;
    pthread_mutex_unlock(&g_ev_lock);
    return n;
}

const tu_event *tu_event_at(uint32_t i) { return i < tu_event_count() ? &g_events[i] : NULL; }

const tu_event *tu_event_find(cbt_event_type type, const char *sid, uint32_t i)
{
    uint32_t n = tu_event_count();
    for (uint32_t k = 0; k < n; k++) {
        if (g_events[k].type == type && (!sid || strcmp(g_events[k].session, sid) == 0)) {
            if (i == 0)
                return &g_events[k];
            i--;
        }
    }
    return NULL;
}

void tu_pub(cbt_event_type type, const char *sid)
{
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, type, sid), CBT_OK);
    assert_int_equal(cbt_publish(&e), CBT_OK);
}

void tu_pub_i64(cbt_event_type type, const char *sid, const char *k1, int64_t v1,
                const char *k2, int64_t v2)
{
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, type, sid), CBT_OK);
    if (k1)
        assert_int_equal(cbt_event_i64(&e, tu_name(k1), v1), CBT_OK);
    if (k2)
        assert_int_equal(cbt_event_i64(&e, tu_name(k2), v2), CBT_OK);
    assert_int_equal(cbt_publish(&e), CBT_OK);
}

void tu_pub_mp_request(const char *sid)
{
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub_i64(CBT_EV_MP_LOOKUP_PREFETCH_START, sid, "num_tokens", 2048, NULL, 0);
    tu_pub_i64(CBT_EV_MP_LOOKUP_PREFETCH_END, sid, "hit_tokens", 1536, "requested_tokens", 2048);
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, sid);
    tu_pub(CBT_EV_MP_STORE_START, sid);
    tu_pub_i64(CBT_EV_MP_STORE_END, sid, "stored_count", 3, NULL, 0);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
}

void tu_pub_mp_requests(const char *prefix, int n)
{
    for (int i = 0; i < n; i++) {
        char sid[64];
        snprintf(sid, sizeof sid, "%s-%d", prefix, i);
        tu_pub_mp_request(sid);
    }
}

void tu_pub_on(cbt_stream *s, cbt_event_type type, const char *sid)
{
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, type, sid), CBT_OK);
    assert_int_equal(cbt_publish_on_stream(s, &e), CBT_OK);
}

struct tu_gate {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int open;
};

tu_gate *tu_gate_new(void)
{
    tu_gate *g = calloc(1, sizeof *g);
    assert_non_null(g);
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cv, NULL);
    return g;
}

static void gate_wait(void *arg)
{
    tu_gate *g = arg;
    pthread_mutex_lock(&g->lock);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

void tu_gate_enqueue(tu_gate *g, cbt_stream *s)
{
    assert_int_equal(cbt_stream_enqueue(s, gate_wait, g), CBT_OK);
}

void tu_gate_open(tu_gate *g)
{
    pthread_mutex_lock(&g->lock);
    g->open = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->lock);
}

void tu_gate_free(tu_gate *g)
{
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

static void sleep_fn(void *arg)
{
    uint32_t us = (uint32_t)(uintptr_t)arg;
    struct timespec d = {.tv_sec = us / 1000000u, .tv_nsec = (long)(us % 1000000u) * 1000L};
    nanosleep(&d, NULL);
}

void tu_enqueue_sleep(cbt_stream *s, uint32_t us)
{
    assert_int_equal(cbt_stream_enqueue(s, sleep_fn, (void *)(uintptr_t)us), CBT_OK);
}

/* Work that records that the stream tu_reached it. */
void tu_reached_init(tu_reached *r)
{
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->hit = 0;
}

void tu_reached_fini(tu_reached *r)
{
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->lock);
}

static void tu_reached_fn(void *arg)
{
    tu_reached *r = arg;
    pthread_mutex_lock(&r->lock);
    r->hit = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->lock);
}

void tu_reached_enqueue(tu_reached *r, cbt_stream *s)
{
    assert_int_equal(cbt_stream_enqueue(s, tu_reached_fn, r), CBT_OK);
}

/* Wait (at most 10 s) until the stream has run the tu_reached item. */
void tu_reached_wait(tu_reached *r)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 10;
    int rc = 0;
    pthread_mutex_lock(&r->lock);
    while (!r->hit && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&r->cv, &r->lock, &dl);
    int hit = r->hit;
    pthread_mutex_unlock(&r->lock);
    if (!hit)
        fail_msg("the stream did not reach the marked point within 10 s");
}

/* Position of the nth dispatched event of `type` for `sid` (dispatch order). */
uint32_t tu_event_pos(cbt_event_type type, const char *sid, uint32_t nth)
{
    uint32_t n = tu_event_count(), want = nth;
    for (uint32_t k = 0; k < n; k++) {
        const tu_event *e = tu_event_at(k);
        if (e->type == type && strcmp(e->session, sid) == 0) {
            if (want == 0)
                return k;
            want--;
        }
    }
    fail_msg("event %s #%u for '%s' was not dispatched", cbt_event_type_name(type), nth, sid);
    return UINT32_MAX;
}

/* Timestamp of the nth dispatched event of `type` for `sid`. */
uint64_t tu_event_ts(cbt_event_type type, const char *sid, uint32_t nth)
{
    const tu_event *e = tu_event_find(type, sid, nth);
    if (!e)
        fail_msg("event %s #%u for '%s' was not dispatched", cbt_event_type_name(type), nth, sid);
    return e->ts;
}

const cbt_span *tu_need_span(const char *name, const char *sid, uint32_t nth)
{
    const cbt_span *s = tu_find(name, sid, nth);
    if (!s)
        fail_msg("span %s #%u for '%s' is not in the sink", name, nth, sid);
    return s;
}

/* ---- big events (testutil.h) ---- */

#define TU_BIG_KEYS CBT_EVENT_META_MAX
static cbt_name g_big_keys[TU_BIG_KEYS];

void tu_big_names(void)
{
    for (int j = 0; j < TU_BIG_KEYS; j++) {
        char k[32];
        snprintf(k, sizeof k, "tu.big.v%d", j);
        g_big_keys[j] = tu_name(k);
    }
}

/* Value j of event seq: its string length (type 3 slots), its characters. */
static size_t big_str_len(uint64_t seq, int j)
{
    return j == 15 ? 256 : (size_t)((seq * 7 + (uint64_t)j * 13) % 300);
}
static char big_char(uint64_t seq, int j, size_t i)
{
    return (char)('a' + (seq + (uint64_t)j + i) % 26);
}
static void big_ctx(uint64_t seq, cbt_span_ctx *c, uint8_t span_id[8])
{
    memset(c, 0, sizeof *c);
    for (int i = 0; i < 16; i++)
        c->trace_id[i] = (uint8_t)(seq + (uint64_t)i + 1);
    for (int i = 0; i < 8; i++) {
        c->span_id[i] = (uint8_t)(seq * 3 + (uint64_t)i);
        span_id[i] = (uint8_t)(seq * 5 + (uint64_t)i + 1);
    }
    c->trace_flags = 1;
}

void tu_big_event(cbt_event *ev, cbt_event_type type, uint32_t producer, uint64_t seq)
{
    char sid[40];
    snprintf(sid, sizeof sid, "p%u-s%llu", producer, (unsigned long long)seq);
    cbt_event_init(ev, type, sid);
    /* junk past the NUL: copied as it is, never read */
    memset(ev->session + ev->session_len + 1, 0x5a, CBT_SESSION_MAX - ev->session_len - 1);
    ev->pair = seq * 3 + 1;
    ev->ts = seq + 1000;
    ev->flags = CBT_EVF_EXPLICIT_TS;
    if (seq % 5 == 0) {
        cbt_span_ctx c;
        uint8_t sp[8];
        big_ctx(seq, &c, sp);
        cbt_event_trace_set(ev, &c, sp);
        ev->trace.name = g_big_keys[0];
        ev->trace.kind = 2;
    }
    int n = (int)(seq % (TU_BIG_KEYS + 1));
    char buf[300];
    for (int j = 0; j < n; j++) {
        cbt_name k = g_big_keys[j];
        if (j == 0) {
            cbt_event_i64(ev, k, (int64_t)producer);
        } else if (j == 1) {
            cbt_event_i64(ev, k, (int64_t)seq);
        } else {
            switch (j % 4) {
            case 0: cbt_event_i64(ev, k, (int64_t)(seq * 31 + (uint64_t)j)); break;
            case 1: cbt_event_f64(ev, k, (double)seq + j / 8.0); break;
            case 2: cbt_event_bool(ev, k, ((seq + (uint64_t)j) & 1) != 0); break;
            default: {
                size_t l = big_str_len(seq, j);
                for (size_t i = 0; i < l; i++)
                    buf[i] = big_char(seq, j, i);
                buf[l] = '\0';
                cbt_event_str(ev, k, buf);
            }
            }
        }
    }
}

int tu_big_ids(const cbt_event *ev, uint32_t *producer, uint64_t *seq)
{
    unsigned p;
    unsigned long long q;
    if (sscanf(ev->session, "p%u-s%llu", &p, &q) != 2)
        return 0;
    *producer = p;
    *seq = q;
    return 1;
}

const char *tu_big_check(const cbt_event *ev, cbt_event_type type, uint32_t producer, uint64_t seq)
{
    char sid[40];
    snprintf(sid, sizeof sid, "p%u-s%llu", producer, (unsigned long long)seq);
    if (ev->type != type)
        return "type";
    if (ev->session_len != strlen(sid) || strcmp(ev->session, sid) != 0)
        return "session";
    if (ev->pair != seq * 3 + 1)
        return "pair";
    if (!(ev->flags & CBT_EVF_EXPLICIT_TS) || ev->ts != seq + 1000)
        return "ts";
    const cbt_event_trace *tr = cbt_event_trace_of(ev);
    if (seq % 5 == 0) {
        cbt_span_ctx c;
        uint8_t sp[8];
        big_ctx(seq, &c, sp);
        if (!tr || memcmp(tr->parent.trace_id, c.trace_id, 16) != 0 ||
            memcmp(tr->parent.span_id, c.span_id, 8) != 0 || tr->parent.trace_flags != 1 ||
            memcmp(tr->span_id, sp, 8) != 0 || tr->name != g_big_keys[0] || tr->kind != 2)
            return "trace";
    } else if (tr) {
        return "trace flag";
    }
    int n = (int)(seq % (TU_BIG_KEYS + 1));
    if (ev->n_meta != n)
        return "n_meta";
    for (int j = 0; j < n; j++) {
        const cbt_meta *m = &ev->meta[j];
        if (m->key != g_big_keys[j] || cbt_event_find(ev, g_big_keys[j]) != m)
            return "key";
        if (j == 0) {
            if (m->type != CBT_META_I64 || m->v.i64 != (int64_t)producer)
                return "producer value";
        } else if (j == 1) {
            if (m->type != CBT_META_I64 || m->v.i64 != (int64_t)seq)
                return "seq value";
        } else {
            switch (j % 4) {
            case 0:
                if (m->type != CBT_META_I64 || m->v.i64 != (int64_t)(seq * 31 + (uint64_t)j))
                    return "i64 value";
                break;
            case 1:
                if (m->type != CBT_META_F64 || m->v.f64 != (double)seq + j / 8.0)
                    return "f64 value";
                break;
            case 2:
                if (m->type != CBT_META_BOOL || m->v.b != (((seq + (uint64_t)j) & 1) != 0))
                    return "bool value";
                break;
            default: {
                size_t l = big_str_len(seq, j), got = 0;
                const char *v = cbt_event_meta_str(ev, m, &got);
                if (!v || got != l)
                    return "string length";
                for (size_t i = 0; i < l; i++)
                    if (v[i] != big_char(seq, j, i))
                        return "string bytes";
                if (v[l] != '\0')
                    return "string NUL";
            }
            }
        }
    }
    return NULL;
}
