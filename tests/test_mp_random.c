/* tests/test_mp_random.c — the MP root-span protocol under random
 * interleavings (request-event-span seed).
 *
 * randomized_interleavings: >= 10,000 interleavings of 1-4 concurrent
 * requests, each a random path (full hit, miss, lookup only, store only,
 * several stores, several retrieves, mixes). Per request the CPU events come
 * in program order and the stream events in stream order, each stream START
 * after its SUBMITTED; REQUEST_END races the stream freely. A random merge of
 * all of them is published from this thread with explicit, strictly
 * increasing timestamps, so the real bus, harvester and MP subscriber see a
 * known order. After each batch the spans are checked against the seed:
 * one root per request, closed exactly once, stamped [REQUEST_START (or the
 * lazy child START, or the earlier REQUEST_END), REQUEST_END]; every child
 * under its own request's root with its own START/END times; nothing
 * incomplete; no session state left.
 *
 * threaded_requests: 8 threads x 200 requests on their own CPU streams with
 * real work and REQUEST_END published right after enqueuing.
 *
 * The seed is fixed so CI is repeatable; CBT_TEST_SEED=<n> replays another
 * run (the seed is printed) and CBT_TEST_SEED=random draws a fresh one.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define N_INTERLEAVINGS 10000
#define BATCH 100            /* interleavings between checks */
#define BATCHES_PER_TRACER 5 /* then restart (memory sink capacity) */
#define MAX_REQ 4
#define MAX_OPS 3
#define MAX_EV_PER_REQ 16
#define BATCH_MAX_REQ (BATCH * MAX_REQ)
#define BATCH_MAX_EV (BATCH_MAX_REQ * MAX_EV_PER_REQ)
#define TS_BASE 1700000000000000000ull
#define TS_STEP 1000ull

enum { OP_STORE = 0, OP_RETRIEVE = 1 };

enum {
    K_REQ_START,
    K_LP_START,
    K_LP_END,
    K_SUB,
    K_START,
    K_END,
    K_REQ_END,
};

static const char *const k_kind_names[] = {"REQUEST_START", "LP_START", "LP_END", "SUBMITTED",
                                           "START", "END", "REQUEST_END"};

/* ---- PRNG ------------------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint32_t rng_below(uint64_t *s, uint32_t n) { return (uint32_t)(rng_next(s) % n); }

static uint64_t g_seed;

static uint64_t test_seed(void)
{
    const char *env = getenv("CBT_TEST_SEED");
    if (!env || !*env)
        return 0x5eed0cb7ull;
    if (strcmp(env, "random") != 0)
        return strtoull(env, NULL, 0);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
}

/* ---- request paths --------------------------------------------------------------- */

typedef struct path {
    int has_lp;
    int n_ops;
    uint8_t op[MAX_OPS];
    int64_t hit, requested;
    const char *label;
} path;

static void random_path(uint64_t *rs, path *p)
{
    memset(p, 0, sizeof *p);
    switch (rng_below(rs, 7)) {
    case 0:
        p->label = "full-hit";
        p->has_lp = 1;
        p->n_ops = 2;
        p->op[0] = OP_RETRIEVE;
        p->op[1] = OP_STORE;
        break;
    case 1:
        p->label = "miss";
        p->has_lp = 1;
        p->n_ops = 1;
        p->op[0] = OP_STORE;
        break;
    case 2:
        p->label = "lookup-only";
        p->has_lp = 1;
        break;
    case 3:
        p->label = "store-only";
        p->n_ops = 1;
        p->op[0] = OP_STORE;
        break;
    case 4:
        p->label = "multi-store";
        p->has_lp = (int)rng_below(rs, 2);
        p->n_ops = 2 + (int)rng_below(rs, 2);
        for (int i = 0; i < p->n_ops; i++)
            p->op[i] = OP_STORE;
        break;
    case 5:
        p->label = "multi-retrieve";
        p->has_lp = (int)rng_below(rs, 2);
        p->n_ops = 2 + (int)rng_below(rs, 2);
        for (int i = 0; i < p->n_ops; i++)
            p->op[i] = OP_RETRIEVE;
        break;
    default:
        p->label = "mixed";
        p->has_lp = (int)rng_below(rs, 2);
        p->n_ops = 1 + (int)rng_below(rs, 3);
        for (int i = 0; i < p->n_ops; i++)
            p->op[i] = (uint8_t)rng_below(rs, 2);
        break;
    }
    if (p->has_lp) {
        p->requested = 256 * (int64_t)rng_below(rs, 5); /* 0 sometimes: hit_rate 0.0 */
        if (!strcmp(p->label, "full-hit"))
            p->hit = p->requested;
        else if (!strcmp(p->label, "miss"))
            p->hit = 0;
        else
            p->hit = p->requested ? (int64_t)rng_below(rs, (uint32_t)p->requested + 1) : 0;
    }
}

static cbt_event_type op_sub(int op)
{
    return op == OP_STORE ? CBT_EV_MP_STORE_SUBMITTED : CBT_EV_MP_RETRIEVE_SUBMITTED;
}
static cbt_event_type op_start(int op)
{
    return op == OP_STORE ? CBT_EV_MP_STORE_START : CBT_EV_MP_RETRIEVE_START;
}
static cbt_event_type op_end(int op)
{
    return op == OP_STORE ? CBT_EV_MP_STORE_END : CBT_EV_MP_RETRIEVE_END;
}
static cbt_name op_span(int op) { return op == OP_STORE ? CBT_N_MP_STORE : CBT_N_MP_RETRIEVE; }

/* ---- span helpers ---------------------------------------------------------------- */

static int span_sid_eq(const cbt_span *s, const char *sid)
{
    const cbt_attr *a = cbt_span_attr(s, CBT_N_SESSION_ID);
    return a && a->type == CBT_META_STR && a->str_len == strlen(sid) &&
           memcmp(cbt_attr_str(s, a), sid, a->str_len) == 0;
}

static int span_i64_is(const cbt_span *s, cbt_name key, int64_t v)
{
    const cbt_attr *a = cbt_span_attr(s, key);
    return a && a->type == CBT_META_I64 && a->v.i64 == v;
}

static int span_f64_is(const cbt_span *s, cbt_name key, double v)
{
    const cbt_attr *a = cbt_span_attr(s, key);
    return a && a->type == CBT_META_F64 && a->v.f64 == v;
}

static int ids_nonzero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 1;
    return 0;
}

static double expected_rate(int64_t hit, int64_t req)
{
    return req != 0 ? (double)hit / (double)req : 0.0;
}

/* ======================================================================================
 * Randomized interleavings, published from this thread with explicit timestamps.
 * ==================================================================================== */

typedef struct ev_desc {
    uint16_t req;  /* index in the batch */
    uint8_t kind;  /* K_* */
    uint8_t op;    /* op index for K_SUB / K_START / K_END */
} ev_desc;

typedef struct rreq {
    char sid[CBT_SESSION_MAX];
    path p;
    uint32_t interleaving; /* global index */
    uint64_t pair;
    /* generation state */
    int cpu_n, cpu_next, stream_next, submitted, ends;
    ev_desc cpu[MAX_EV_PER_REQ];
    /* what was published */
    uint64_t ts_req_start, ts_req_end, ts_lp_start, ts_lp_end;
    uint64_t ts_op_start[MAX_OPS], ts_op_end[MAX_OPS];
    int deferred; /* REQUEST_END published with a submitted op not yet ended */
    /* verification */
    int root_seen, children_seen;
    uint8_t root_span[8], root_trace[16];
} rreq;

static struct {
    rreq req[BATCH_MAX_REQ];
    uint32_t n_req;
    ev_desc ev[BATCH_MAX_EV];
    uint32_t n_ev;
    uint64_t ts_first; /* ts of ev[0] */
    uint32_t first_interleaving;
} B;

static uint64_t g_ts_counter; /* global: every published event gets TS_BASE + k * TS_STEP */
static uint32_t g_fresh_sid;
#define SID_POOL 64
static char g_sid_pool[SID_POOL][CBT_SESSION_MAX];
static uint32_t g_sid_pool_n;

static void dump_interleaving(uint32_t il)
{
    fprintf(stderr, "# seed 0x%llx, interleaving %u, publish order:\n",
            (unsigned long long)g_seed, il);
    for (uint32_t i = 0; i < B.n_ev; i++) {
        const ev_desc *d = &B.ev[i];
        const rreq *r = &B.req[d->req];
        if (r->interleaving != il)
            continue;
        fprintf(stderr, "#   ts=%llu %-8s %-14s %s", (unsigned long long)(B.ts_first + i * TS_STEP),
                r->sid, r->p.label, k_kind_names[d->kind]);
        if (d->kind == K_SUB || d->kind == K_START || d->kind == K_END)
            fprintf(stderr, " op%u(%s)", d->op, r->p.op[d->op] == OP_STORE ? "store" : "retrieve");
        fprintf(stderr, "\n");
    }
}

#define RCHECK(r, cond, ...)                                       \
    do {                                                           \
        if (!(cond)) {                                             \
            dump_interleaving((r)->interleaving);                  \
            fail_msg("session %s (%s): " __VA_ARGS__);             \
        }                                                          \
    } while (0)

static void pick_sid(uint64_t *rs, char *out, char used[MAX_REQ][CBT_SESSION_MAX], int n_used)
{
    for (int tries = 0; tries < 8 && g_sid_pool_n > 0 && rng_below(rs, 4) == 0; tries++) {
        const char *cand = g_sid_pool[rng_below(rs, g_sid_pool_n < SID_POOL ? g_sid_pool_n : SID_POOL)];
        int clash = 0;
        for (int i = 0; i < n_used; i++)
            clash |= strcmp(used[i], cand) == 0;
        if (!clash) {
            strcpy(out, cand);
            return;
        }
    }
    /* a fresh id: "s<n>-" padded to a random length of up to 63 bytes */
    int n = snprintf(out, CBT_SESSION_MAX, "s%u-", ++g_fresh_sid);
    int len = n + (int)rng_below(rs, (uint32_t)(CBT_SESSION_MAX - n));
    for (int i = n; i < len; i++)
        out[i] = (char)('a' + rng_below(rs, 26));
    out[len] = '\0';
}

static void publish_desc(uint32_t ri, uint8_t kind, uint8_t op)
{
    rreq *r = &B.req[ri];
    uint64_t ts = TS_BASE + (g_ts_counter++) * TS_STEP;
    if (B.n_ev == 0)
        B.ts_first = ts;
    assert_true(B.n_ev < BATCH_MAX_EV);
    assert_true(ts == B.ts_first + B.n_ev * TS_STEP);
    B.ev[B.n_ev++] = (ev_desc){(uint16_t)ri, kind, op};

    cbt_event_type type = CBT_EV_INVALID;
    int o = r->p.op[op];
    switch (kind) {
    case K_REQ_START: type = CBT_EV_MP_REQUEST_START; r->ts_req_start = ts; break;
    case K_LP_START: type = CBT_EV_MP_LOOKUP_PREFETCH_START; r->ts_lp_start = ts; break;
    case K_LP_END: type = CBT_EV_MP_LOOKUP_PREFETCH_END; r->ts_lp_end = ts; break;
    case K_SUB: type = op_sub(o); r->submitted++; break;
    case K_START: type = op_start(o); r->ts_op_start[op] = ts; break;
    case K_END: type = op_end(o); r->ts_op_end[op] = ts; r->ends++; break;
    case K_REQ_END:
        type = CBT_EV_MP_REQUEST_END;
        r->ts_req_end = ts;
        r->deferred = r->submitted > r->ends;
        break;
    default: fail();
    }
    cbt_event ev;
    assert_int_equal(cbt_event_init(&ev, type, r->sid), CBT_OK);
    ev.ts = ts;
    ev.flags |= CBT_EVF_EXPLICIT_TS;
    if (kind == K_START || kind == K_END)
        ev.pair = r->pair;
    if (kind == K_LP_END) {
        assert_int_equal(cbt_event_i64(&ev, CBT_N_HIT_TOKENS, r->p.hit), CBT_OK);
        assert_int_equal(cbt_event_i64(&ev, CBT_N_REQUESTED_TOKENS, r->p.requested), CBT_OK);
    }
    if (kind == K_START)
        assert_int_equal(cbt_event_i64(&ev, CBT_N_NUM_TOKENS, 1000 * (op + 1) + (int64_t)ri),
                         CBT_OK);
    if (kind == K_END)
        assert_int_equal(cbt_event_i64(&ev, o == OP_STORE ? CBT_N_STORED_COUNT
                                                             : CBT_N_FOUND_COUNT,
                                       op + 1),
                         CBT_OK);
    assert_int_equal(cbt_publish(&ev), CBT_OK);
}

/* One interleaving: build the requests, then publish a random merge. */
static void run_interleaving(uint64_t *rs, uint32_t il)
{
    int n = 1 + (int)rng_below(rs, MAX_REQ);
    char used[MAX_REQ][CBT_SESSION_MAX];
    uint32_t first = B.n_req;
    for (int i = 0; i < n; i++) {
        assert_true(B.n_req < BATCH_MAX_REQ);
        rreq *r = &B.req[B.n_req++];
        memset(r, 0, sizeof *r);
        pick_sid(rs, r->sid, used, i);
        strcpy(used[i], r->sid);
        random_path(rs, &r->p);
        r->interleaving = il;
        r->pair = 1 + (uint64_t)rng_below(rs, 1u << 30); /* a stream number */
        if (r->p.has_lp) {
            r->cpu[r->cpu_n++] = (ev_desc){0, K_REQ_START, 0};
            r->cpu[r->cpu_n++] = (ev_desc){0, K_LP_START, 0};
            r->cpu[r->cpu_n++] = (ev_desc){0, K_LP_END, 0};
        }
        for (int k = 0; k < r->p.n_ops; k++)
            r->cpu[r->cpu_n++] = (ev_desc){0, K_SUB, (uint8_t)k};
        r->cpu[r->cpu_n++] = (ev_desc){0, K_REQ_END, 0};
    }
    for (;;) {
        /* candidates: each request's next CPU event, and its next stream
         * event when that is an END or a START whose SUBMITTED is out */
        uint32_t cand_req[2 * MAX_REQ];
        int cand_stream[2 * MAX_REQ];
        int nc = 0;
        for (uint32_t ri = first; ri < B.n_req; ri++) {
            rreq *r = &B.req[ri];
            if (r->cpu_next < r->cpu_n) {
                cand_req[nc] = ri;
                cand_stream[nc++] = 0;
            }
            if (r->stream_next < 2 * r->p.n_ops) {
                int op = r->stream_next / 2;
                int is_start = (r->stream_next % 2) == 0;
                if (!is_start || r->submitted > op) {
                    cand_req[nc] = ri;
                    cand_stream[nc++] = 1;
                }
            }
        }
        if (nc == 0)
            break;
        int c = (int)rng_below(rs, (uint32_t)nc);
        rreq *r = &B.req[cand_req[c]];
        if (cand_stream[c]) {
            int op = r->stream_next / 2;
            publish_desc(cand_req[c], (r->stream_next % 2) == 0 ? K_START : K_END, (uint8_t)op);
            r->stream_next++;
        } else {
            ev_desc d = r->cpu[r->cpu_next++];
            publish_desc(cand_req[c], d.kind, d.op);
        }
    }
    /* completed: the ids may be reused by later interleavings */
    for (uint32_t ri = first; ri < B.n_req; ri++) {
        assert_int_equal(B.req[ri].cpu_next, B.req[ri].cpu_n);
        assert_int_equal(B.req[ri].stream_next, 2 * B.req[ri].p.n_ops);
        strcpy(g_sid_pool[g_sid_pool_n++ % SID_POOL], B.req[ri].sid);
    }
}

/* The batch's event at timestamp ts, or -1. */
static int64_t ev_at(uint64_t ts)
{
    if (ts < B.ts_first || (ts - B.ts_first) % TS_STEP != 0)
        return -1;
    uint64_t i = (ts - B.ts_first) / TS_STEP;
    return i < B.n_ev ? (int64_t)i : -1;
}

static void check_batch(uint32_t span_from, const cbt_mp_stats *st0)
{
    uint32_t n_spans = tu_span_count();
    uint32_t expect_spans = 0, expect_children = 0, expect_lazy = 0, expect_deferred = 0;
    for (uint32_t i = 0; i < B.n_req; i++) {
        const rreq *r = &B.req[i];
        expect_children += (uint32_t)(r->p.has_lp + r->p.n_ops);
        expect_lazy += (uint32_t)!r->p.has_lp;
        expect_deferred += (uint32_t)r->deferred;
    }
    expect_spans = B.n_req + expect_children;

    /* roots first */
    for (uint32_t k = span_from; k < n_spans; k++) {
        const cbt_span *s = tu_span(k);
        if (s->name != CBT_N_REQUEST)
            continue;
        int64_t e = ev_at(s->end_ns);
        if (e < 0 || B.ev[e].kind != K_REQ_END) {
            /* find the request by session for the report */
            for (uint32_t i = 0; i < B.n_req; i++)
                if (span_sid_eq(s, B.req[i].sid) && !B.req[i].root_seen) {
                    rreq *r = &B.req[i];
                    RCHECK(r, 0, "root ends at %llu, not at a REQUEST_END (expected %llu)", r->sid,
                           r->p.label, (unsigned long long)s->end_ns,
                           (unsigned long long)r->ts_req_end);
                }
            fail_msg("seed 0x%llx: a root span ends at %llu, which is no REQUEST_END",
                     (unsigned long long)g_seed, (unsigned long long)s->end_ns);
        }
        rreq *r = &B.req[B.ev[e].req];
        RCHECK(r, !r->root_seen, "a second root span", r->sid, r->p.label);
        r->root_seen = 1;
        memcpy(r->root_span, s->ctx.span_id, 8);
        memcpy(r->root_trace, s->ctx.trace_id, 16);
        RCHECK(r, span_sid_eq(s, r->sid), "root's session_id attribute differs", r->sid,
               r->p.label);
        RCHECK(r, tu_is_root(s), "root has a parent", r->sid, r->p.label);
        RCHECK(r, ids_nonzero(s->ctx.span_id, 8) && ids_nonzero(s->ctx.trace_id, 16),
               "root has a zero id", r->sid, r->p.label);
        RCHECK(r, !(s->flags & CBT_SPANF_INCOMPLETE), "root flagged incomplete", r->sid,
               r->p.label);
        uint64_t want_start;
        if (r->p.has_lp) {
            want_start = r->ts_req_start;
        } else {
            /* lazy: at the first child START, or at REQUEST_END if it came first */
            want_start = r->ts_op_start[0] < r->ts_req_end ? r->ts_op_start[0] : r->ts_req_end;
        }
        RCHECK(r, s->start_ns == want_start, "root starts at %llu, want %llu", r->sid, r->p.label,
               (unsigned long long)s->start_ns, (unsigned long long)want_start);
        RCHECK(r, s->end_ns == r->ts_req_end, "root ends at %llu, want REQUEST_END %llu", r->sid,
               r->p.label, (unsigned long long)s->end_ns, (unsigned long long)r->ts_req_end);
        RCHECK(r, s->kind == CBT_SPAN_KIND_SERVER, "root kind %u", r->sid, r->p.label, s->kind);
        if (r->p.has_lp) {
            RCHECK(r, span_i64_is(s, CBT_N_HIT_TOKENS, r->p.hit), "hit_tokens", r->sid,
                   r->p.label);
            RCHECK(r, span_i64_is(s, CBT_N_REQUESTED_TOKENS, r->p.requested), "requested_tokens",
                   r->sid, r->p.label);
            RCHECK(r, span_f64_is(s, CBT_N_HIT_RATE, expected_rate(r->p.hit, r->p.requested)),
                   "hit_rate", r->sid, r->p.label);
        } else {
            RCHECK(r, !cbt_span_attr(s, CBT_N_HIT_TOKENS) && !cbt_span_attr(s, CBT_N_HIT_RATE) &&
                          !cbt_span_attr(s, CBT_N_REQUESTED_TOKENS),
                   "store-only root carries hit attributes", r->sid, r->p.label);
        }
    }
    /* then children */
    for (uint32_t k = span_from; k < n_spans; k++) {
        const cbt_span *s = tu_span(k);
        if (s->name == CBT_N_REQUEST)
            continue;
        int64_t e = ev_at(s->start_ns);
        if (e < 0)
            fail_msg("seed 0x%llx: span '%s' starts at %llu, which is no published event",
                     (unsigned long long)g_seed, cbt_name_str(s->name),
                     (unsigned long long)s->start_ns);
        const ev_desc *d = &B.ev[e];
        rreq *r = &B.req[d->req];
        uint64_t want_end = 0;
        if (d->kind == K_LP_START) {
            RCHECK(r, s->name == CBT_N_MP_LOOKUP_PREFETCH, "span '%s' starts at LP_START", r->sid,
                   r->p.label, cbt_name_str(s->name));
            want_end = r->ts_lp_end;
            RCHECK(r, span_i64_is(s, CBT_N_HIT_TOKENS, r->p.hit) &&
                          span_i64_is(s, CBT_N_REQUESTED_TOKENS, r->p.requested),
                   "lookup_prefetch lacks LP_END's metadata", r->sid, r->p.label);
        } else if (d->kind == K_START) {
            int o = r->p.op[d->op];
            RCHECK(r, s->name == op_span(o), "span '%s' starts at op%u's START", r->sid,
                   r->p.label, cbt_name_str(s->name), d->op);
            want_end = r->ts_op_end[d->op];
            RCHECK(r, span_i64_is(s, CBT_N_NUM_TOKENS, 1000 * (d->op + 1) + (int64_t)d->req),
                   "child lacks its START's metadata", r->sid, r->p.label);
            RCHECK(r, span_i64_is(s, o == OP_STORE ? CBT_N_STORED_COUNT : CBT_N_FOUND_COUNT,
                                  d->op + 1),
                   "child lacks its END's metadata", r->sid, r->p.label);
        } else {
            RCHECK(r, 0, "span '%s' starts at a %s", r->sid, r->p.label, cbt_name_str(s->name),
                   k_kind_names[d->kind]);
        }
        RCHECK(r, s->end_ns == want_end, "'%s' ends at %llu, want %llu", r->sid, r->p.label,
               cbt_name_str(s->name), (unsigned long long)s->end_ns,
               (unsigned long long)want_end);
        RCHECK(r, span_sid_eq(s, r->sid), "child's session_id differs", r->sid, r->p.label);
        RCHECK(r, !(s->flags & CBT_SPANF_INCOMPLETE), "child flagged incomplete", r->sid,
               r->p.label);
        RCHECK(r, r->root_seen, "child '%s' but no root", r->sid, r->p.label,
               cbt_name_str(s->name));
        RCHECK(r, memcmp(s->parent_span_id, r->root_span, 8) == 0,
               "'%s' is not a child of its own request's root", r->sid, r->p.label,
               cbt_name_str(s->name));
        RCHECK(r, memcmp(s->ctx.trace_id, r->root_trace, 16) == 0,
               "'%s' is not in its root's trace", r->sid, r->p.label, cbt_name_str(s->name));
        RCHECK(r, memcmp(s->ctx.span_id, r->root_span, 8) != 0 && ids_nonzero(s->ctx.span_id, 8),
               "child span id", r->sid, r->p.label);
        r->children_seen++;
    }
    for (uint32_t i = 0; i < B.n_req; i++) {
        rreq *r = &B.req[i];
        RCHECK(r, r->root_seen == 1, "no root span", r->sid, r->p.label);
        RCHECK(r, r->children_seen == r->p.has_lp + r->p.n_ops, "%d children, want %d", r->sid,
               r->p.label, r->children_seen, r->p.has_lp + r->p.n_ops);
    }
    if (n_spans - span_from != expect_spans)
        fail_msg("seed 0x%llx: %u spans in the batch, want %u", (unsigned long long)g_seed,
                 n_spans - span_from, expect_spans);

    cbt_mp_stats st = CBT_STRUCT_INIT(cbt_mp_stats);
    assert_int_equal(cbt_mp_stats_get(NULL, &st), CBT_OK);
    assert_int_equal(st.sessions_open, 0);
    assert_int_equal(st.roots_opened - st0->roots_opened, B.n_req);
    assert_int_equal(st.roots_closed - st0->roots_closed, B.n_req);
    assert_int_equal(st.roots_lazy - st0->roots_lazy, expect_lazy);
    assert_int_equal(st.roots_deferred - st0->roots_deferred, expect_deferred);
    assert_int_equal(st.children_opened - st0->children_opened, expect_children);
    assert_int_equal(st.children_closed - st0->children_closed, expect_children);
    assert_int_equal(st.unmatched_end, 0);
    assert_int_equal(st.duplicate_request_end, 0);
    assert_int_equal(st.request_end_unknown, 0);
    assert_int_equal(st.sessions_full, 0);
    assert_int_equal(st.children_full, 0);
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m), CBT_OK);
    assert_int_equal(m.dropped_full, 0);
    assert_int_equal(m.rejected, 0);
    assert_int_equal(m.spans_dropped, 0);
    assert_int_equal(m.spans_open, 0);
    assert_int_equal(m.subscriber_errors, 0);
    assert_int_equal(m.sink_errors, 0);
}

static cbt_config random_config(void)
{
    cbt_config c = cbt_config_default();
    c.poll_interval_us = 20;
    c.queue_capacity = 65536;
    c.span_pool = 8192;
    /* ids are reused by later interleavings at once: with a late-children
     * window, a reused id whose request starts with a store would join the
     * old request's closed root (docs/spans.md, "Late children"); this test
     * checks the seed's rules, where each such request is new */
    c.late_grace_ms = CBT_TREE_OFF;
    return c;
}

static void randomized_interleavings(void **state)
{
    (void)state;
    g_seed = test_seed();
    fprintf(stderr, "# test_mp_random: seed 0x%llx (set CBT_TEST_SEED to replay)\n",
            (unsigned long long)g_seed);
    uint64_t rs = g_seed;
    cbt_config c = random_config();
    uint32_t il = 0, batches = 0, n_requests = 0, n_deferred = 0, n_lazy = 0, n_reused = 0;
    uint32_t span_from = 0;
    cbt_mp_stats st0 = CBT_STRUCT_INIT(cbt_mp_stats);
    tu_start(&c);
    while (il < N_INTERLEAVINGS) {
        if (batches > 0 && batches % BATCHES_PER_TRACER == 0) {
            uint32_t before = tu_span_count();
            tu_stop(); /* nothing may be left open: no incomplete span appears */
            assert_int_equal(tu_span_count(), before);
            tu_start(&c);
            span_from = 0;
        }
        assert_int_equal(cbt_mp_stats_get(NULL, &st0), CBT_OK);
        B.n_req = 0;
        B.n_ev = 0;
        B.first_interleaving = il;
        uint32_t reused_before = g_fresh_sid;
        for (int k = 0; k < BATCH && il < N_INTERLEAVINGS; k++)
            run_interleaving(&rs, il++);
        n_reused += B.n_req - (g_fresh_sid - reused_before);
        tu_flush();
        check_batch(span_from, &st0);
        span_from = tu_span_count();
        for (uint32_t i = 0; i < B.n_req; i++) {
            n_deferred += (uint32_t)B.req[i].deferred;
            n_lazy += (uint32_t)!B.req[i].p.has_lp;
        }
        n_requests += B.n_req;
        batches++;
    }
    uint32_t before = tu_span_count();
    tu_stop();
    assert_int_equal(tu_span_count(), before);
    fprintf(stderr,
            "# test_mp_random: %u interleavings, %u requests (%u deferred closes, %u lazy roots, "
            "%u reused ids)\n",
            il, n_requests, n_deferred, n_lazy, n_reused);
    assert_true(il >= 10000);
    /* the generator really produced the interesting cases */
    assert_true(n_deferred > 100);
    assert_true(n_lazy > 100);
    assert_true(n_reused > 100);
}

/* ======================================================================================
 * Real threads, real CPU streams, real timestamps.
 * ==================================================================================== */

#define TH_THREADS 8
#define TH_REQS 200

typedef struct th_req {
    char sid[32];
    path p;
} th_req;

typedef struct th_arg {
    int id;
    uint64_t seed;
    cbt_stream *stream;
    th_req req[TH_REQS];
    int errors;
    cbt_status first_error;
} th_arg;

static void work_sleep(void *arg)
{
    uint32_t us = (uint32_t)(uintptr_t)arg;
    if (us == 0)
        return;
    struct timespec d = {0, (long)us * 1000L};
    nanosleep(&d, NULL);
}

static void th_fail(th_arg *a, cbt_status st)
{
    if (!a->errors++)
        a->first_error = st;
}

static void th_pub(th_arg *a, cbt_event_type type, const char *sid, int64_t hit, int64_t req)
{
    cbt_event ev;
    cbt_status st = cbt_event_init(&ev, type, sid);
    if (!st && type == CBT_EV_MP_LOOKUP_PREFETCH_END) {
        st = cbt_event_i64(&ev, CBT_N_HIT_TOKENS, hit);
        if (!st)
            st = cbt_event_i64(&ev, CBT_N_REQUESTED_TOKENS, req);
    }
    if (!st)
        st = cbt_publish(&ev);
    if (st)
        th_fail(a, st);
}

static void th_pub_on(th_arg *a, cbt_event_type type, const char *sid)
{
    cbt_event ev;
    cbt_status st = cbt_event_init(&ev, type, sid);
    if (!st)
        st = cbt_publish_on_stream(a->stream, &ev);
    if (st)
        th_fail(a, st);
}

static void th_work(th_arg *a, uint64_t *rs)
{
    uint32_t us = rng_below(rs, 51);
    cbt_status st = cbt_stream_enqueue(a->stream, work_sleep, (void *)(uintptr_t)us);
    if (st)
        th_fail(a, st);
}

static void *th_main(void *p)
{
    th_arg *a = p;
    uint64_t rs = a->seed;
    for (int k = 0; k < TH_REQS; k++) {
        th_req *r = &a->req[k];
        snprintf(r->sid, sizeof r->sid, "th%d-req%d", a->id, k);
        random_path(&rs, &r->p);
        if (r->p.has_lp) {
            th_pub(a, CBT_EV_MP_REQUEST_START, r->sid, 0, 0);
            th_pub(a, CBT_EV_MP_LOOKUP_PREFETCH_START, r->sid, 0, 0);
            th_pub(a, CBT_EV_MP_LOOKUP_PREFETCH_END, r->sid, r->p.hit, r->p.requested);
        }
        for (int o = 0; o < r->p.n_ops; o++) {
            /* SUBMITTED before the stream work is enqueued, as the host does */
            th_pub(a, op_sub(r->p.op[o]), r->sid, 0, 0);
            if (rng_below(&rs, 2))
                th_work(a, &rs);
            th_pub_on(a, op_start(r->p.op[o]), r->sid);
            th_work(a, &rs);
            th_pub_on(a, op_end(r->p.op[o]), r->sid);
        }
        /* end_session() right after enqueuing: races the stream */
        th_pub(a, CBT_EV_MP_REQUEST_END, r->sid, 0, 0);
        if (rng_below(&rs, 8) == 0) {
            struct timespec d = {0, (long)rng_below(&rs, 100) * 1000L};
            nanosleep(&d, NULL);
        }
    }
    return NULL;
}

/* What the recorder saw for one request, in dispatch order. */
typedef struct th_seen {
    int n_req_start, n_req_end;
    uint64_t ts_req_start, ts_req_end;
    uint32_t pos_req_end;
    int n_start[2], n_end[2];
    uint64_t ts_start[2][MAX_OPS], ts_end[2][MAX_OPS];
    int first_start_seen;
    uint64_t ts_first_start;
    uint32_t pos_first_start;
    /* spans */
    const cbt_span *root;
    int n_roots;
    const cbt_span *child[2][MAX_OPS];
    int n_child[2], n_lp;
    const cbt_span *lp;
} th_seen;

static int parse_th_sid(const char *s, int *t, int *k)
{
    char tail;
    return sscanf(s, "th%d-req%d%c", t, k, &tail) == 2 && *t >= 0 && *t < TH_THREADS && *k >= 0 &&
           *k < TH_REQS;
}

static int cmp_span_start(const void *x, const void *y)
{
    const cbt_span *a = *(const cbt_span *const *)x, *b = *(const cbt_span *const *)y;
    return a->start_ns < b->start_ns ? -1 : a->start_ns > b->start_ns;
}

static void threaded_requests(void **state)
{
    (void)state;
    if (!g_seed)
        g_seed = test_seed();
    cbt_config c = random_config();
    tu_start(&c);
    static th_arg args[TH_THREADS];
    pthread_t th[TH_THREADS];
    for (int i = 0; i < TH_THREADS; i++) {
        memset(&args[i], 0, sizeof args[i]);
        args[i].id = i;
        args[i].seed = g_seed ^ (0x1234567ull * (uint64_t)(i + 1));
        assert_int_equal(cbt_stream_cpu_create(8192, &args[i].stream), CBT_OK);
    }
    for (int i = 0; i < TH_THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, th_main, &args[i]), 0);
    for (int i = 0; i < TH_THREADS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < TH_THREADS; i++) {
        assert_int_equal(cbt_stream_sync(args[i].stream), CBT_OK);
        cbt_stream_destroy(args[i].stream);
        if (args[i].errors)
            fail_msg("thread %d: %d publish errors, first %s", i, args[i].errors,
                     cbt_strerror(args[i].first_error));
    }
    tu_flush();

    static th_seen seen[TH_THREADS][TH_REQS];
    memset(seen, 0, sizeof seen);
    uint32_t n_ev = tu_event_count();
    for (uint32_t i = 0; i < n_ev; i++) {
        const tu_event *e = tu_event_at(i);
        int t, k;
        if (!parse_th_sid(e->session, &t, &k))
            fail_msg("event for unknown session '%s'", e->session);
        th_seen *s = &seen[t][k];
        switch (e->type) {
        case CBT_EV_MP_REQUEST_START:
            s->n_req_start++;
            s->ts_req_start = e->ts;
            break;
        case CBT_EV_MP_REQUEST_END:
            s->n_req_end++;
            s->ts_req_end = e->ts;
            s->pos_req_end = i;
            break;
        case CBT_EV_MP_STORE_START:
        case CBT_EV_MP_RETRIEVE_START: {
            int o = e->type == CBT_EV_MP_STORE_START ? OP_STORE : OP_RETRIEVE;
            assert_true(s->n_start[o] < MAX_OPS);
            s->ts_start[o][s->n_start[o]++] = e->ts;
            if (!s->first_start_seen) {
                s->first_start_seen = 1;
                s->ts_first_start = e->ts;
                s->pos_first_start = i;
            }
            break;
        }
        case CBT_EV_MP_STORE_END:
        case CBT_EV_MP_RETRIEVE_END: {
            int o = e->type == CBT_EV_MP_STORE_END ? OP_STORE : OP_RETRIEVE;
            assert_true(s->n_end[o] < MAX_OPS);
            s->ts_end[o][s->n_end[o]++] = e->ts;
            break;
        }
        default:
            break;
        }
    }

    uint32_t n_spans = tu_span_count();
    for (uint32_t i = 0; i < n_spans; i++) {
        const cbt_span *sp = tu_span(i);
        const cbt_attr *a = cbt_span_attr(sp, CBT_N_SESSION_ID);
        assert_non_null(a);
        char sid[CBT_SESSION_MAX];
        assert_true(a->str_len < sizeof sid);
        memcpy(sid, cbt_attr_str(sp, a), a->str_len);
        sid[a->str_len] = '\0';
        int t, k;
        if (!parse_th_sid(sid, &t, &k))
            fail_msg("span for unknown session '%s'", sid);
        th_seen *s = &seen[t][k];
        if (sp->flags & CBT_SPANF_INCOMPLETE)
            fail_msg("%s: span '%s' incomplete", sid, cbt_name_str(sp->name));
        if (sp->name == CBT_N_REQUEST) {
            s->root = sp;
            s->n_roots++;
        } else if (sp->name == CBT_N_MP_LOOKUP_PREFETCH) {
            s->lp = sp;
            s->n_lp++;
        } else if (sp->name == CBT_N_MP_STORE || sp->name == CBT_N_MP_RETRIEVE) {
            int o = sp->name == CBT_N_MP_STORE ? OP_STORE : OP_RETRIEVE;
            if (s->n_child[o] >= MAX_OPS)
                fail_msg("%s: too many '%s' spans", sid, cbt_name_str(sp->name));
            s->child[o][s->n_child[o]++] = sp;
        } else {
            fail_msg("%s: unexpected span '%s'", sid, cbt_name_str(sp->name));
        }
    }

    uint32_t requests = 0, lazy = 0, clamped = 0, end_first = 0, expect_spans = 0;
    for (int t = 0; t < TH_THREADS; t++) {
        for (int k = 0; k < TH_REQS; k++) {
            const th_req *r = &args[t].req[k];
            th_seen *s = &seen[t][k];
            const char *sid = r->sid;
            requests++;
            int n_ops[2] = {0, 0};
            for (int o = 0; o < r->p.n_ops; o++)
                n_ops[r->p.op[o]]++;
            expect_spans += 1u + (uint32_t)r->p.has_lp + (uint32_t)r->p.n_ops;
            if (s->n_req_end != 1 || s->n_req_start != r->p.has_lp || s->n_start[0] != n_ops[0] ||
                s->n_start[1] != n_ops[1] || s->n_end[0] != n_ops[0] || s->n_end[1] != n_ops[1])
                fail_msg("%s: dispatched events do not match what was published", sid);
            if (s->n_roots != 1)
                fail_msg("%s (%s): %d root spans", sid, r->p.label, s->n_roots);
            const cbt_span *root = s->root;
            if (!tu_is_root(root))
                fail_msg("%s: root has a parent", sid);
            uint64_t want_start;
            if (r->p.has_lp) {
                want_start = s->ts_req_start;
            } else {
                lazy++;
                want_start = s->ts_first_start;
                if (s->pos_req_end < s->pos_first_start) {
                    end_first++;
                    if (s->ts_req_end < want_start)
                        want_start = s->ts_req_end;
                }
            }
            if (root->start_ns != want_start)
                fail_msg("%s (%s): root starts at %llu, want %llu", sid, r->p.label,
                         (unsigned long long)root->start_ns, (unsigned long long)want_start);
            /* the root ends at REQUEST_END's time; only when that stamp is
             * earlier than the start (a lazy root whose START was stamped
             * after, but dispatched before, REQUEST_END) is it clamped */
            uint64_t want_end = s->ts_req_end;
            if (want_end < root->start_ns) {
                want_end = root->start_ns;
                clamped++;
            }
            if (root->end_ns != want_end)
                fail_msg("%s (%s): root ends at %llu, want REQUEST_END %llu", sid, r->p.label,
                         (unsigned long long)root->end_ns, (unsigned long long)s->ts_req_end);
            if (r->p.has_lp) {
                if (s->n_lp != 1 || !tu_is_child_of(s->lp, root))
                    fail_msg("%s: lookup_prefetch not under its root", sid);
                if (!span_i64_is(root, CBT_N_HIT_TOKENS, r->p.hit) ||
                    !span_i64_is(root, CBT_N_REQUESTED_TOKENS, r->p.requested) ||
                    !span_f64_is(root, CBT_N_HIT_RATE, expected_rate(r->p.hit, r->p.requested)))
                    fail_msg("%s: root hit attributes", sid);
            } else if (s->n_lp != 0 || cbt_span_attr(root, CBT_N_HIT_RATE)) {
                fail_msg("%s: store-only request has lookup data", sid);
            }
            for (int o = 0; o < 2; o++) {
                if (s->n_child[o] != n_ops[o])
                    fail_msg("%s: %d '%s' spans, want %d", sid, s->n_child[o],
                             cbt_name_str(op_span(o)), n_ops[o]);
                qsort(s->child[o], (size_t)s->n_child[o], sizeof s->child[o][0], cmp_span_start);
                for (int j = 0; j < s->n_child[o]; j++) {
                    const cbt_span *ch = s->child[o][j];
                    if (!tu_is_child_of(ch, root))
                        fail_msg("%s: '%s' #%d is not a child of its own root", sid,
                                 cbt_name_str(ch->name), j);
                    uint64_t ws = s->ts_start[o][j];
                    uint64_t we = s->ts_end[o][j] < ws ? ws : s->ts_end[o][j];
                    if (ch->start_ns != ws || ch->end_ns != we)
                        fail_msg("%s: '%s' #%d is [%llu, %llu], want [%llu, %llu]", sid,
                                 cbt_name_str(ch->name), j, (unsigned long long)ch->start_ns,
                                 (unsigned long long)ch->end_ns, (unsigned long long)ws,
                                 (unsigned long long)we);
                }
            }
        }
    }
    if (n_spans != expect_spans)
        fail_msg("%u spans, want %u", n_spans, expect_spans);
    cbt_mp_stats st = CBT_STRUCT_INIT(cbt_mp_stats);
    assert_int_equal(cbt_mp_stats_get(NULL, &st), CBT_OK);
    assert_int_equal(st.sessions_open, 0);
    assert_int_equal(st.roots_opened, requests);
    assert_int_equal(st.roots_closed, requests);
    assert_int_equal(st.roots_lazy, lazy);
    assert_int_equal(st.unmatched_end, 0);
    assert_int_equal(st.duplicate_request_end, 0);
    assert_int_equal(st.request_end_unknown, 0);
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m), CBT_OK);
    assert_int_equal(m.dropped_full, 0);
    assert_int_equal(m.spans_dropped, 0);
    assert_int_equal(m.spans_open, 0);
    assert_int_equal(m.subscriber_errors, 0);
    fprintf(stderr,
            "# threaded: %u requests, %u lazy roots (%u with REQUEST_END first, %u clamped), "
            "%llu deferred closes\n",
            requests, lazy, end_first, clamped, (unsigned long long)st.roots_deferred);
    uint32_t before = tu_span_count();
    tu_stop();
    assert_int_equal(tu_span_count(), before);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(randomized_interleavings),
        cmocka_unit_test(threaded_requests),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
