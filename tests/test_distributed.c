/* tests/test_distributed.c — one trace across processes, in one process:
 * events carrying a trace context (cbt/event.h), spans a process opens itself
 * with ids known at once (cbt/pspan.h), the CacheBlend server subscriber's
 * handling of remote parents, Option B and sampled-out requests (cbt/cb.h),
 * and the lmcache_blend.* metrics it feeds (cbt/blend_metrics.h).
 * The three-process version of this is tests/test_three_proc.c. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"
#include "cbt/blend_metrics.h"
#include "cbt/cb.h"
#include "cbt/context.h"
#include "cbt/kernel.h"
#include "cbt/kernel_span.h"
#include "cbt/pspan.h"
#include "cbt/stream.h"

/* ---- helpers ------------------------------------------------------------------ */

/* The nth span called `name` whose request_id is `rid`, or NULL. */
static const cbt_span *find_rid(const char *name, const char *rid, uint32_t nth)
{
    cbt_name n = tu_name(name), k = tu_name("request_id");
    for (uint32_t i = 0; i < tu_span_count(); i++) {
        const cbt_span *s = tu_span(i);
        if (s->name != n)
            continue;
        const cbt_attr *a = cbt_span_attr(s, k);
        if (!a || a->type != CBT_META_STR || a->str_len != strlen(rid) ||
            memcmp(cbt_attr_str(s, a), rid, a->str_len) != 0)
            continue;
        if (nth-- == 0)
            return s;
    }
    return NULL;
}

static const cbt_span *need_rid(const char *name, const char *rid, uint32_t nth)
{
    const cbt_span *s = find_rid(name, rid, nth);
    if (!s)
        fail_msg("no span %s #%u for request %s", name, nth, rid);
    return s;
}

static uint32_t count_rid(const char *rid)
{
    uint32_t n = 0;
    cbt_name k = tu_name("request_id");
    for (uint32_t i = 0; i < tu_span_count(); i++) {
        const cbt_attr *a = cbt_span_attr(tu_span(i), k);
        if (a && a->type == CBT_META_STR && a->str_len == strlen(rid) &&
            memcmp(cbt_attr_str(tu_span(i), a), rid, a->str_len) == 0)
            n++;
    }
    return n;
}

static int parent_is(const cbt_span *s, const cbt_span_ctx *p)
{
    return memcmp(s->ctx.trace_id, p->trace_id, 16) == 0 &&
           memcmp(s->parent_span_id, p->span_id, 8) == 0;
}

/* publish `type` for `rid` carrying `parent` as its trace context */
static void pub_ctx(cbt_event_type type, const char *rid, const cbt_span_ctx *parent)
{
    cbt_event e;
    assert_int_equal(cbt_event_init(&e, type, rid), CBT_OK);
    assert_int_equal(cbt_event_trace_set(&e, parent, NULL), CBT_OK);
    assert_int_equal(cbt_publish(&e), CBT_OK);
}

static void start_cb(void)
{
    tu_start(NULL);
    cbt_subscriber sub;
    assert_int_equal(cbt_cb_subscriber_create(0, &sub), CBT_OK);
    assert_int_equal(cbt_add_subscriber(&sub), CBT_OK);
}

static cbt_span_ctx remote_ctx(uint8_t seed, int sampled)
{
    cbt_span_ctx c;
    for (int i = 0; i < 16; i++)
        c.trace_id[i] = (uint8_t)(seed + i + 1);
    for (int i = 0; i < 8; i++)
        c.span_id[i] = (uint8_t)(0x80 + seed + i);
    c.trace_flags = sampled ? 1 : 0;
    return c;
}

/* ---- pspans ------------------------------------------------------------------- */

/* The scheduler's subtree: ids known at begin, parents exact, kinds,
 * attributes, request_id on every span, and the ids of the recorded spans are
 * the ones the caller saw (what it injected into RPCs). */
static void test_pspan_tree_ids_known_at_begin(void **state)
{
    (void)state;
    tu_start(NULL);
    const char *rid = "req-tree";
    cbt_trace_context tc;
    assert_int_equal(cbt_context_begin(NULL, NULL, rid, strlen(rid), NULL, &tc, NULL), CBT_OK);
    cbt_pspan req, sched, rpc;
    cbt_meta rm[] = {cbt_meta_str(tu_name("model"), "llama-8b"),
                     cbt_meta_i64(tu_name("world_size"), 2),
                     cbt_meta_i64(tu_name("n_prompt_tokens"), 1500)};
    assert_int_equal(cbt_pspan_begin(&req, CBT_N_CB_REQUEST, CBT_SPAN_KIND_SERVER, rid, &tc.ctx,
                                     rm, 3), CBT_OK);
    assert_int_equal(cbt_pspan_begin(&sched, CBT_N_CB_SCHEDULE, CBT_SPAN_KIND_INTERNAL, rid,
                                     &req.ctx, NULL, 0), CBT_OK);
    assert_int_equal(cbt_pspan_begin(&rpc, CBT_N_CB_LOOKUP_RPC, CBT_SPAN_KIND_CLIENT, rid,
                                     &sched.ctx, NULL, 0), CBT_OK);
    /* the ids exist now, before the harvester ran: the traceparent is ready */
    char tp[CBT_TRACEPARENT_LEN + 1];
    assert_int_equal(cbt_traceparent_format(&rpc.ctx, tp), CBT_OK);
    cbt_span_ctx back;
    assert_int_equal(cbt_traceparent_parse(tp, strlen(tp), &back), CBT_OK);
    assert_memory_equal(back.span_id, rpc.ctx.span_id, 8);
    /* Option B root: the derived trace id */
    uint8_t want[16];
    cbt_trace_id_from_request(rid, strlen(rid), want);
    assert_memory_equal(req.ctx.trace_id, want, 16);
    assert_memory_equal(rpc.ctx.trace_id, want, 16);

    cbt_meta pm[] = {cbt_meta_i64(tu_name("n_polls"), 3)};
    assert_int_equal(cbt_pspan_end(&rpc, pm, 1), CBT_OK);
    assert_int_equal(cbt_pspan_end(&sched, NULL, 0), CBT_OK);
    assert_int_equal(cbt_pspan_end(&req, NULL, 0), CBT_OK);
    assert_int_equal(cbt_pspan_end(&req, NULL, 0), CBT_ERR_INVAL); /* not open any more */
    tu_flush();

    const cbt_span *r = need_rid("cb.request", rid, 0);
    const cbt_span *s = need_rid("cb.schedule", rid, 0);
    const cbt_span *l = need_rid("cb.lookup.rpc", rid, 0);
    assert_true(tu_is_root(r));
    assert_memory_equal(r->ctx.trace_id, want, 16);
    assert_memory_equal(r->ctx.span_id, req.ctx.span_id, 8);
    assert_memory_equal(s->ctx.span_id, sched.ctx.span_id, 8);
    assert_memory_equal(l->ctx.span_id, rpc.ctx.span_id, 8);
    assert_true(tu_is_child_of(s, r));
    assert_true(tu_is_child_of(l, s));
    assert_int_equal(r->kind, CBT_SPAN_KIND_SERVER);
    assert_int_equal(l->kind, CBT_SPAN_KIND_CLIENT);
    assert_int_equal(tu_attr_i64(l, "n_polls"), 3);
    assert_int_equal(tu_attr_i64(r, "world_size"), 2);
    assert_int_equal(tu_attr_i64(r, "n_prompt_tokens"), 1500);
    assert_true(r->start_ns <= s->start_ns && s->start_ns <= l->start_ns);
    assert_true(l->end_ns <= s->end_ns && s->end_ns <= r->end_ns);
    cbt_pspan_stats ps = CBT_STRUCT_INIT(cbt_pspan_stats);
    assert_int_equal(cbt_pspan_stats_get(&ps), CBT_OK);
    assert_int_equal(ps.opened, 3);
    assert_int_equal(ps.closed, 3);
    assert_int_equal(ps.unmatched_end, 0);
    tu_stop();
}

/* A remote parent (the scheduler's cb.request, extracted on the worker) and
 * GPU-timed children on a stream: the stream's times, exact pairing by id even
 * when two spans of one name are open at once, failed -> ERROR. */
static void test_pspan_remote_parent_and_stream(void **state)
{
    (void)state;
    tu_start(NULL);
    const char *rid = "req-worker";
    cbt_span_ctx sched_root = remote_ctx(7, 1);
    char tp[CBT_TRACEPARENT_LEN + 1];
    assert_int_equal(cbt_traceparent_format(&sched_root, tp), CBT_OK);
    cbt_trace_context tc;
    cbt_status why;
    assert_int_equal(cbt_context_begin(tp, NULL, rid, strlen(rid), NULL, &tc, &why), CBT_OK);
    assert_int_equal(why, CBT_OK);

    cbt_stream *st;
    assert_int_equal(cbt_stream_cpu_create(64, &st), CBT_OK);
    cbt_pspan ex, fwd, fr, chk, chk2;
    assert_int_equal(cbt_pspan_begin(&ex, CBT_N_CB_EXECUTE, CBT_SPAN_KIND_INTERNAL, rid,
                                     cbt_context_parent(&tc), NULL, 0), CBT_OK);
    assert_int_equal(cbt_pspan_begin(&fwd, CBT_N_CB_MODEL_FORWARD, CBT_SPAN_KIND_INTERNAL, rid,
                                     &ex.ctx, NULL, 0), CBT_OK);
    tu_gate *g = tu_gate_new();
    assert_int_equal(cbt_pspan_begin_on(&fr, st, CBT_N_CB_FULL_RECOMP, CBT_SPAN_KIND_INTERNAL,
                                        rid, &fwd.ctx, NULL, 0), CBT_OK);
    tu_enqueue_sleep(st, 2000);
    assert_int_equal(cbt_pspan_end_on(&fr, NULL, 0), CBT_OK);
    tu_gate_enqueue(g, st); /* the check has not started when the CPU goes on */
    assert_int_equal(cbt_pspan_begin_on(&chk, st, CBT_N_CB_CHECK, CBT_SPAN_KIND_INTERNAL, rid,
                                        &fwd.ctx, NULL, 0), CBT_OK);
    assert_int_equal(cbt_pspan_begin_on(&chk2, st, CBT_N_CB_CHECK, CBT_SPAN_KIND_INTERNAL, rid,
                                        &fwd.ctx, NULL, 0), CBT_OK);
    cbt_meta cm[] = {cbt_meta_i64(tu_name("imp_count"), 40),
                     cbt_meta_f64(tu_name("recomp_ratio"), 0.15)};
    cbt_meta cm2[] = {cbt_meta_bool(tu_name("failed"), true)};
    /* close the second first: pairing is by id, not first-in first-out */
    assert_int_equal(cbt_pspan_end_on(&chk2, cm2, 1), CBT_OK);
    assert_int_equal(cbt_pspan_end_on(&chk, cm, 2), CBT_OK);
    assert_int_equal(cbt_pspan_end(&chk, NULL, 0), CBT_ERR_INVAL); /* already ended */
    tu_gate_open(g);
    assert_int_equal(cbt_stream_sync(st), CBT_OK);
    assert_int_equal(cbt_pspan_end(&fwd, NULL, 0), CBT_OK);
    assert_int_equal(cbt_pspan_end(&ex, NULL, 0), CBT_OK);
    tu_flush();

    const cbt_span *e = need_rid("cb.execute", rid, 0);
    assert_true(parent_is(e, &sched_root)); /* a remote child of the scheduler's root */
    const cbt_span *f = need_rid("cb.model_forward", rid, 0);
    assert_true(tu_is_child_of(f, e));
    const cbt_span *r = need_rid("cb.full_recomp", rid, 0);
    assert_true(tu_is_child_of(r, f));
    assert_true(r->end_ns - r->start_ns >= 2000000); /* the stream's time, not the CPU's */
    const cbt_span *c1 = NULL, *c2 = NULL;
    for (uint32_t i = 0; i < 2; i++) {
        const cbt_span *c = need_rid("cb.check", rid, i);
        assert_true(tu_is_child_of(c, f));
        if (memcmp(c->ctx.span_id, chk.ctx.span_id, 8) == 0)
            c1 = c;
        else if (memcmp(c->ctx.span_id, chk2.ctx.span_id, 8) == 0)
            c2 = c;
    }
    assert_non_null(c1);
    assert_non_null(c2);
    assert_int_equal(tu_attr_i64(c1, "imp_count"), 40);
    assert_true(tu_attr_f64(c1, "recomp_ratio") == 0.15);
    assert_int_equal(c1->status, CBT_SPAN_STATUS_UNSET);
    assert_int_equal(c2->status, CBT_SPAN_STATUS_ERROR);
    assert_false(tu_has_attr(c2, "imp_count"));
    cbt_stream_destroy(st);
    tu_gate_free(g);
    tu_stop();
}

/* Sampled out: nothing is published (no event reaches the harvester), the
 * decision still travels (a valid traceparent with flag 00), and with no
 * tracer the context is still filled. */
static void test_pspan_sampled_out_publishes_nothing(void **state)
{
    (void)state;
    tu_start(NULL);
    const char *rid = "req-off";
    cbt_sampler off = {CBT_SAMPLER_ALWAYS_OFF, 1.0};
    cbt_trace_context tc;
    assert_int_equal(cbt_context_begin(NULL, NULL, rid, strlen(rid), &off, &tc, NULL), CBT_OK);
    assert_false(cbt_context_sampled(&tc));
    cbt_pspan req, rpc;
    assert_int_equal(cbt_pspan_begin(&req, CBT_N_CB_REQUEST, CBT_SPAN_KIND_SERVER, rid, &tc.ctx,
                                     NULL, 0), CBT_OK);
    assert_int_equal(cbt_pspan_begin(&rpc, CBT_N_CB_LOOKUP_RPC, CBT_SPAN_KIND_CLIENT, rid,
                                     &req.ctx, NULL, 0), CBT_OK);
    char tp[CBT_TRACEPARENT_LEN + 1];
    assert_int_equal(cbt_traceparent_format(&rpc.ctx, tp), CBT_OK);
    assert_string_equal(tp + 53, "00");
    assert_int_equal(cbt_pspan_end(&rpc, NULL, 0), CBT_OK);
    assert_int_equal(cbt_pspan_end(&req, NULL, 0), CBT_OK);
    tu_flush();
    assert_int_equal(tu_event_count(), 0);
    assert_int_equal(count_rid(rid), 0);
    tu_stop();

    /* no tracer: ctx still filled, the caller is told */
    cbt_pspan p;
    cbt_span_ctx parent = remote_ctx(3, 1);
    assert_int_equal(cbt_pspan_begin(&p, CBT_N_CB_EXECUTE, CBT_SPAN_KIND_INTERNAL, rid, &parent,
                                     NULL, 0), CBT_ERR_NOT_INITIALIZED);
    assert_memory_equal(p.ctx.trace_id, parent.trace_id, 16);
    assert_true(cbt_span_ctx_valid(&p.ctx));
}

static void test_pspan_bad_arguments(void **state)
{
    (void)state;
    tu_start(NULL);
    cbt_pspan p;
    char longid[CBT_SESSION_MAX + 4];
    memset(longid, 'x', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    assert_int_equal(cbt_pspan_begin(NULL, CBT_N_CB_EXECUTE, 0, "r", NULL, NULL, 0), CBT_ERR_INVAL);
    assert_int_equal(cbt_pspan_begin(&p, 0, 0, "r", NULL, NULL, 0), CBT_ERR_INVAL);
    assert_int_equal(cbt_pspan_begin(&p, CBT_N_CB_EXECUTE, 0, longid, NULL, NULL, 0),
                     CBT_ERR_SESSION_TOO_LONG);
    assert_int_equal(cbt_pspan_begin(&p, CBT_N_CB_EXECUTE, 0, "r", NULL, NULL, 2), CBT_ERR_INVAL);
    cbt_meta big[] = {cbt_meta_str(tu_name("dispatch"), "a-string-that-is-too-long")};
    assert_int_equal(big[0].type, CBT_META_NONE);
    assert_int_equal(cbt_pspan_begin(&p, CBT_N_CB_PARTIAL, 0, "r", NULL, big, 1),
                     CBT_ERR_META_TOO_LONG);
    assert_int_equal(cbt_pspan_begin_on(&p, NULL, CBT_N_CB_PARTIAL, 0, "r", NULL, NULL, 0),
                     CBT_ERR_INVAL);
    /* ending on the wrong path is refused and leaves it open */
    assert_int_equal(cbt_pspan_begin(&p, CBT_N_CB_EXECUTE, 0, "r", NULL, NULL, 0), CBT_OK);
    assert_int_equal(cbt_pspan_end_on(&p, NULL, 0), CBT_ERR_INVAL);
    assert_int_equal(cbt_pspan_end(&p, NULL, 0), CBT_OK);
    /* an END nobody began, and a BEGIN without an id, are counted */
    cbt_event e;
    uint8_t id[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    cbt_event_init(&e, CBT_EV_SPAN_END, "r");
    cbt_event_trace_set(&e, NULL, id);
    assert_int_equal(cbt_publish(&e), CBT_OK);
    cbt_event_init(&e, CBT_EV_SPAN_BEGIN, "r");
    assert_int_equal(cbt_publish(&e), CBT_OK);
    tu_flush();
    cbt_pspan_stats ps = CBT_STRUCT_INIT(cbt_pspan_stats);
    assert_int_equal(cbt_pspan_stats_get(&ps), CBT_OK);
    assert_int_equal(ps.unmatched_end, 1);
    assert_int_equal(ps.malformed, 1);
    assert_int_equal(ps.closed, 1);
    /* left open at shutdown: ended incomplete */
    assert_int_equal(cbt_pspan_begin(&p, CBT_N_CB_EXECUTE, 0, "r-open", NULL, NULL, 0), CBT_OK);
    tu_stop();
    const cbt_span *s = need_rid("cb.execute", "r-open", 0);
    assert_true(s->flags & CBT_SPANF_INCOMPLETE);
}

/* A refused END value leaves the pspan open (the caller ends it again); a
 * kind out of range is refused; when the open table fills, a pspan open for
 * over a minute (its END lost) is ended incomplete to make room, live ones
 * never are: a BEGIN that finds only live work is refused and counted. */
static void test_pspan_end_retry_kind_and_eviction(void **state)
{
    (void)state;
    tu_start(NULL);
    cbt_pspan p;
    assert_int_equal(cbt_pspan_begin(&p, CBT_N_CB_PARTIAL, (cbt_span_kind)77, "r", NULL, NULL, 0),
                     CBT_ERR_INVAL);
    assert_int_equal(cbt_pspan_begin(&p, CBT_N_CB_PARTIAL, CBT_SPAN_KIND_INTERNAL, "r", NULL,
                                     NULL, 0), CBT_OK);
    cbt_meta bad[] = {cbt_meta_str(CBT_N_DISPATCH, "far-too-long-for-a-value")};
    assert_int_equal(cbt_pspan_end(&p, bad, 1), CBT_ERR_META_TOO_LONG);
    cbt_meta good[] = {cbt_meta_str(CBT_N_DISPATCH, "unified")};
    assert_int_equal(cbt_pspan_end(&p, good, 1), CBT_OK);
    tu_flush();
    const cbt_span *sp = need_rid("cb.partial", "r", 0);
    assert_false(sp->flags & CBT_SPANF_INCOMPLETE);

    /* a pspan whose END was lost two minutes ago, then 4095 live ones fill
     * the table; the next BEGIN evicts the stale one, the one after that
     * finds only live work and is refused */
    cbt_event old;
    uint8_t old_id[8] = {0x0d, 1, 2, 3, 4, 5, 6, 7};
    cbt_event_init(&old, CBT_EV_SPAN_BEGIN, "old");
    cbt_event_trace_set(&old, NULL, old_id);
    old.trace.name = CBT_N_CB_EXECUTE;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    old.ts = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec - 120000000000ull;
    old.flags |= CBT_EVF_EXPLICIT_TS;
    assert_int_equal(cbt_publish(&old), CBT_OK);
    for (int i = 0; i < 4097; i++) {
        cbt_pspan q;
        assert_int_equal(cbt_pspan_begin(&q, CBT_N_CB_CHECK, CBT_SPAN_KIND_INTERNAL, "many", NULL,
                                         NULL, 0), CBT_OK);
        if (i % 512 == 511)
            tu_flush(); /* keep the publish queue from filling */
    }
    tu_flush();
    cbt_pspan_stats ps = CBT_STRUCT_INIT(cbt_pspan_stats);
    assert_int_equal(cbt_pspan_stats_get(&ps), CBT_OK);
    assert_int_equal(ps.evicted, 1);
    assert_int_equal(ps.table_full, 1);
    /* a BEGIN stamped in the future does not make live pspans look stale:
     * staleness is judged on the harvester's clock */
    cbt_event fut;
    uint8_t fut_id[8] = {0x0f, 1, 2, 3, 4, 5, 6, 7};
    cbt_event_init(&fut, CBT_EV_SPAN_BEGIN, "future");
    cbt_event_trace_set(&fut, NULL, fut_id);
    fut.trace.name = CBT_N_CB_EXECUTE;
    fut.ts = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec + 3600000000000ull;
    fut.flags |= CBT_EVF_EXPLICIT_TS;
    assert_int_equal(cbt_publish(&fut), CBT_OK);
    tu_flush();
    assert_int_equal(cbt_pspan_stats_get(&ps), CBT_OK);
    assert_int_equal(ps.evicted, 1);
    assert_int_equal(ps.table_full, 2);
    const cbt_span *ev = need_rid("cb.execute", "old", 0);
    assert_true(ev->flags & CBT_SPANF_INCOMPLETE);
    assert_memory_equal(ev->ctx.span_id, old_id, 8);
    assert_int_equal(tu_count("cb.check", NULL), 0); /* no live pspan was cut short */
    tu_stop();
}

/* A forked child draws other span ids than its parent. */
static void test_pspan_ids_differ_after_fork(void **state)
{
    (void)state;
    uint8_t warm[8];
    cbt_pspan_new_id(warm); /* the parent's generator is seeded */
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        uint8_t id[8];
        cbt_pspan_new_id(id);
        ssize_t w = write(fds[1], id, 8);
        _exit(w == 8 ? 0 : 1);
    }
    uint8_t mine[8], child[8];
    cbt_pspan_new_id(mine);
    close(fds[1]);
    assert_int_equal(read(fds[0], child, 8), 8);
    close(fds[0]);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_memory_not_equal(mine, child, 8);
}

/* ---- the server subscriber with contexts ------------------------------------------ */

/* Option A: the lookup RPC and the retrieve RPC each bring their caller's
 * context. The server's root is elided (the scheduler owns cb.request); its
 * cb.lookup is a SERVER child of cb.lookup.rpc, cb.retrieve of
 * cb.start_load_kv, sub-spans nest locally, hit attributes land on cb.lookup,
 * and the V3 close rule still frees the session. */
static void test_cb_remote_parents(void **state)
{
    (void)state;
    start_cb();
    const char *rid = "req-A";
    cbt_span_ctx rpc = remote_ctx(1, 1), slk = remote_ctx(1, 1);
    slk.span_id[0] ^= 0x55; /* another span of the same trace */
    pub_ctx(CBT_EV_CB_REQUEST_START, rid, &rpc);
    pub_ctx(CBT_EV_CB_LOOKUP_START, rid, &rpc);
    tu_pub(CBT_EV_CB_FINGERPRINT_MATCH_START, rid);
    tu_pub_i64(CBT_EV_CB_FINGERPRINT_MATCH_END, rid, "fingerprint_hits", 3, NULL, 0);
    tu_pub_i64(CBT_EV_CB_LOOKUP_END, rid, "prefix_hit_tokens", 256, "requested_tokens", 1024);
    tu_pub(CBT_EV_CB_RETRIEVE_SUBMITTED, rid);
    pub_ctx(CBT_EV_CB_RETRIEVE_START, rid, &slk);
    tu_pub(CBT_EV_CB_SCATTER_START, rid);
    tu_pub_i64(CBT_EV_CB_SCATTER_END, rid, "scattered_tokens", 256, "slot_writes", 256);
    tu_pub(CBT_EV_CB_REQUEST_END, rid);
    tu_pub(CBT_EV_CB_RETRIEVE_END, rid);
    tu_flush();
    assert_null(find_rid("cb.request", rid, 0));
    const cbt_span *lk = need_rid("cb.lookup", rid, 0);
    assert_true(parent_is(lk, &rpc));
    assert_int_equal(lk->kind, CBT_SPAN_KIND_SERVER);
    assert_int_equal(tu_attr_i64(lk, "hit_tokens"), 256);
    assert_true(tu_attr_f64(lk, "hit_rate") == 0.25);
    const cbt_span *fp = need_rid("cb.fingerprint_match", rid, 0);
    assert_true(tu_is_child_of(fp, lk));
    const cbt_span *rt = need_rid("cb.retrieve", rid, 0);
    assert_true(parent_is(rt, &slk));
    assert_int_equal(rt->kind, CBT_SPAN_KIND_SERVER);
    const cbt_span *sc = need_rid("cb.scatter", rid, 0);
    assert_true(tu_is_child_of(sc, rt));
    cbt_cb_stats cs = CBT_STRUCT_INIT(cbt_cb_stats);
    assert_int_equal(cbt_cb_stats_get(NULL, &cs), CBT_OK);
    assert_int_equal(cs.roots_remote, 1);
    assert_int_equal(cs.roots_opened, 0);
    assert_int_equal(cs.sessions_open, 0);
    tu_stop();
}

/* Option B with no context at all: the server's cb.request is a root whose
 * trace id is derived from the request id, so it lands in the scheduler's
 * trace; with a trace-id-only context, that trace id is used. */
static void test_cb_option_b(void **state)
{
    (void)state;
    start_cb();
    tu_pub(CBT_EV_CB_REQUEST_START, "req-B");
    tu_pub(CBT_EV_CB_REQUEST_END, "req-B");
    cbt_trace_context tc;
    assert_int_equal(cbt_context_begin(NULL, NULL, "x", 1, NULL, &tc, NULL), CBT_OK);
    tc.ctx.trace_id[15] ^= 1; /* not the id derived from "req-B2": must be used as given */
    pub_ctx(CBT_EV_CB_REQUEST_START, "req-B2", &tc.ctx);
    tu_pub(CBT_EV_CB_REQUEST_END, "req-B2");
    tu_flush();
    uint8_t want[16];
    cbt_trace_id_from_request("req-B", 5, want);
    const cbt_span *r = need_rid("cb.request", "req-B", 0);
    assert_true(tu_is_root(r));
    assert_memory_equal(r->ctx.trace_id, want, 16);
    const cbt_span *r2 = need_rid("cb.request", "req-B2", 0);
    assert_true(tu_is_root(r2));
    assert_memory_equal(r2->ctx.trace_id, tc.ctx.trace_id, 16);
    tu_stop();
}

/* A sampled-out request: no span at all, its events counted, the session
 * still freed by the close rule (a retrieve ending after CB_REQUEST_END). */
static void test_cb_sampled_out(void **state)
{
    (void)state;
    start_cb();
    const char *rid = "req-off";
    cbt_span_ctx off = remote_ctx(9, 0);
    pub_ctx(CBT_EV_CB_REQUEST_START, rid, &off);
    tu_pub(CBT_EV_CB_LOOKUP_START, rid);
    tu_pub(CBT_EV_CB_LOOKUP_END, rid);
    tu_pub(CBT_EV_CB_RETRIEVE_SUBMITTED, rid);
    tu_pub(CBT_EV_CB_RETRIEVE_START, rid);
    tu_pub(CBT_EV_CB_REQUEST_END, rid);
    tu_pub(CBT_EV_CB_RETRIEVE_NOOP, rid);
    tu_flush();
    cbt_cb_stats cs = CBT_STRUCT_INIT(cbt_cb_stats);
    assert_int_equal(cbt_cb_stats_get(NULL, &cs), CBT_OK);
    assert_int_equal(cs.sessions_open, 1); /* the retrieve is still pending */
    tu_pub(CBT_EV_CB_RETRIEVE_END, rid);
    /* a sampled-in request right after is traced normally */
    cbt_span_ctx on = remote_ctx(9, 1);
    pub_ctx(CBT_EV_CB_REQUEST_START, "req-on", &on);
    pub_ctx(CBT_EV_CB_LOOKUP_START, "req-on", &on);
    tu_pub(CBT_EV_CB_LOOKUP_END, "req-on");
    tu_pub(CBT_EV_CB_REQUEST_END, "req-on");
    tu_flush();
    assert_int_equal(count_rid(rid), 0);
    assert_non_null(find_rid("cb.lookup", "req-on", 0));
    assert_int_equal(cbt_cb_stats_get(NULL, &cs), CBT_OK);
    assert_int_equal(cs.sampled_out, 6); /* the request, and 5 events (not SUBMITTED, REQUEST_END) */
    assert_int_equal(cs.sessions_open, 0);
    assert_int_equal(cs.no_root, 0);
    tu_stop();
}

/* A trace block whose parent is all zero carries no context: the request is
 * traced as if none had come (a root of the derived trace), not dropped. */
static void test_cb_empty_context_is_none(void **state)
{
    (void)state;
    start_cb();
    const char *rid = "req-empty";
    cbt_event e;
    uint8_t id[8] = {9, 9, 9, 9, 9, 9, 9, 9};
    cbt_event_init(&e, CBT_EV_CB_REQUEST_START, rid);
    cbt_event_trace_set(&e, NULL, NULL);
    assert_int_equal(cbt_publish(&e), CBT_OK);
    cbt_event_init(&e, CBT_EV_CB_LOOKUP_START, rid);
    cbt_event_trace_set(&e, NULL, id);
    assert_int_equal(cbt_publish(&e), CBT_OK);
    tu_pub(CBT_EV_CB_LOOKUP_END, rid);
    tu_pub(CBT_EV_CB_REQUEST_END, rid);
    tu_flush();
    uint8_t want[16];
    cbt_trace_id_from_request(rid, strlen(rid), want);
    const cbt_span *r = need_rid("cb.request", rid, 0);
    assert_true(tu_is_root(r));
    assert_memory_equal(r->ctx.trace_id, want, 16);
    const cbt_span *lk = need_rid("cb.lookup", rid, 0);
    assert_true(tu_is_child_of(lk, r));
    assert_memory_equal(lk->ctx.span_id, id, 8); /* the chosen id is still honoured */
    cbt_cb_stats cs = CBT_STRUCT_INIT(cbt_cb_stats);
    assert_int_equal(cbt_cb_stats_get(NULL, &cs), CBT_OK);
    assert_int_equal(cs.sampled_out, 0);
    tu_stop();
}

/* A lookup whose own caller sampled it out: no cb.lookup, and its
 * sub-operations are dropped with it instead of landing under the root. */
static void test_cb_sampled_out_operation_takes_its_subtree(void **state)
{
    (void)state;
    start_cb();
    const char *rid = "req-op-off";
    tu_pub(CBT_EV_CB_REQUEST_START, rid);
    cbt_span_ctx off = remote_ctx(4, 0);
    pub_ctx(CBT_EV_CB_LOOKUP_START, rid, &off);
    tu_pub(CBT_EV_CB_FINGERPRINT_MATCH_START, rid);
    tu_pub(CBT_EV_CB_FINGERPRINT_MATCH_END, rid);
    tu_pub(CBT_EV_CB_LOOKUP_END, rid);
    tu_pub(CBT_EV_CB_FINGERPRINT_MATCH_START, rid); /* after the lookup: traced again */
    tu_pub(CBT_EV_CB_FINGERPRINT_MATCH_END, rid);
    tu_pub(CBT_EV_CB_REQUEST_END, rid);
    tu_flush();
    assert_non_null(find_rid("cb.request", rid, 0));
    assert_null(find_rid("cb.lookup", rid, 0));
    assert_int_equal(tu_count("cb.fingerprint_match", rid), 1);
    cbt_cb_stats cs = CBT_STRUCT_INIT(cbt_cb_stats);
    assert_int_equal(cbt_cb_stats_get(NULL, &cs), CBT_OK);
    assert_int_equal(cs.unmatched_end, 0);
    assert_int_equal(cs.sessions_open, 0);
    tu_stop();
}

typedef struct kjob {
    cbt_kspan span;
} kjob;

static void k_cta(void *a_, uint32_t cta, uint32_t n_ctas)
{
    (void)n_ctas;
    kjob *a = a_;
    CBT_KERNEL_SPAN_BEGIN(a->span);
    CBT_KERNEL_SPAN_END(a->span, 10 + cta);
}

/* Run one scatter launch for `rid` on a CPU stream and wait for the harvester
 * to have joined its ring records. */
static void launch_scatter(const char *rid)
{
    cbt_ring_stats before = CBT_STRUCT_INIT(cbt_ring_stats);
    assert_int_equal(cbt_ring_stats_get(&before), CBT_OK);
    uint64_t want = before.kernel_spans + before.sampled_out + 1;
    cbt_stream *st;
    assert_int_equal(cbt_stream_cpu_create(0, &st), CBT_OK);
    cbt_launch_info li = cbt_launch_info_default(CBT_KOP_SCATTER, 2);
    kjob job;
    assert_int_equal(cbt_launch_begin(st, rid, &li, &job.span), CBT_OK);
    assert_int_equal(cbt_cpu_launch(st, 2, k_cta, &job), CBT_OK);
    assert_int_equal(cbt_stream_sync(st), CBT_OK);
    cbt_stream_destroy(st);
    for (int i = 0; i < 500; i++) {
        cbt_ring_stats rs = CBT_STRUCT_INIT(cbt_ring_stats);
        tu_flush();
        if (cbt_ring_stats_get(&rs) == CBT_OK && rs.kernel_spans + rs.sampled_out >= want)
            break;
        struct timespec d = {0, 1000000};
        nanosleep(&d, NULL);
    }
}

/* Kernel spans follow the request: under the remote span when the server's
 * root is elided, dropped when the request is sampled out (even if the caller
 * forgot li.sampled_out). */
static void test_cb_kernel_spans_follow_the_context(void **state)
{
    (void)state;
    start_cb();
    cbt_span_ctx up = remote_ctx(5, 1);
    pub_ctx(CBT_EV_CB_REQUEST_START, "req-k", &up);
    launch_scatter("req-k");
    const cbt_span *k = tu_find("cb.scatter", "req-k", 0);
    assert_non_null(k);
    assert_true(parent_is(k, &up));
    assert_ptr_equal(find_rid("cb.scatter", "req-k", 0), k); /* request_id, as every span */
    tu_pub(CBT_EV_CB_REQUEST_END, "req-k");

    cbt_span_ctx off = remote_ctx(6, 0);
    pub_ctx(CBT_EV_CB_REQUEST_START, "req-k-off", &off);
    launch_scatter("req-k-off");
    tu_pub(CBT_EV_CB_REQUEST_END, "req-k-off");
    tu_flush();
    assert_int_equal(tu_count("cb.scatter", "req-k-off"), 0);
    cbt_ring_stats rs = CBT_STRUCT_INIT(cbt_ring_stats);
    assert_int_equal(cbt_ring_stats_get(&rs), CBT_OK);
    assert_int_equal(rs.sampled_out, 1);

    /* a sampled-in request whose retrieve's caller sampled it out: the
     * retrieve's kernels go with it, not under cb.request */
    tu_pub(CBT_EV_CB_REQUEST_START, "req-k-op");
    cbt_span_ctx rout = remote_ctx(7, 0);
    pub_ctx(CBT_EV_CB_RETRIEVE_START, "req-k-op", &rout);
    launch_scatter("req-k-op");
    tu_pub(CBT_EV_CB_RETRIEVE_END, "req-k-op");
    tu_pub(CBT_EV_CB_REQUEST_END, "req-k-op");
    tu_flush();
    assert_non_null(tu_find("cb.request", "req-k-op", 0));
    assert_int_equal(tu_count("cb.scatter", "req-k-op"), 0);
    assert_int_equal(tu_count("cb.retrieve", "req-k-op"), 0);
    assert_int_equal(cbt_ring_stats_get(&rs), CBT_OK);
    assert_int_equal(rs.sampled_out, 2);

    /* a sampled-out retrieve still open when the request ends keeps the
     * session and its marker until its END, then both go */
    tu_pub(CBT_EV_CB_REQUEST_START, "req-k-late");
    pub_ctx(CBT_EV_CB_RETRIEVE_START, "req-k-late", &rout);
    tu_pub(CBT_EV_CB_REQUEST_END, "req-k-late");
    tu_flush();
    cbt_cb_stats cs = CBT_STRUCT_INIT(cbt_cb_stats);
    assert_int_equal(cbt_cb_stats_get(NULL, &cs), CBT_OK);
    assert_int_equal(cs.sessions_open, 1);
    assert_int_equal(cbt_registry_count(cbt_tracer_get()), 1);
    tu_pub(CBT_EV_CB_RETRIEVE_END, "req-k-late");
    tu_flush();
    assert_int_equal(cbt_cb_stats_get(NULL, &cs), CBT_OK);
    assert_int_equal(cs.sessions_open, 0);
    assert_int_equal(cs.unmatched_end, 0);
    assert_int_equal(cbt_registry_count(cbt_tracer_get()), 0); /* anchors unregistered */
    tu_stop();
}

/* The MP path joins a caller's trace too: its `request` root is a remote
 * child of the caller's span (or a root of a trace-id-only context), also
 * when the root opens lazily at a store; with no context it starts a fresh
 * trace as before. */
static void test_mp_root_joins_the_callers_trace(void **state)
{
    (void)state;
    tu_start(NULL);
    cbt_span_ctx up = remote_ctx(11, 1);
    pub_ctx(CBT_EV_MP_REQUEST_START, "mp-a", &up);
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_START, "mp-a");
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_END, "mp-a");
    tu_pub(CBT_EV_MP_REQUEST_END, "mp-a");
    /* a store-only request: the root opens lazily at the store's START */
    cbt_trace_context tc;
    assert_int_equal(cbt_context_begin(NULL, NULL, "mp-b", 4, NULL, &tc, NULL), CBT_OK);
    tu_pub(CBT_EV_MP_STORE_SUBMITTED, "mp-b");
    pub_ctx(CBT_EV_MP_STORE_START, "mp-b", &tc.ctx);
    tu_pub(CBT_EV_MP_STORE_END, "mp-b");
    tu_pub(CBT_EV_MP_REQUEST_END, "mp-b");
    tu_pub(CBT_EV_MP_REQUEST_START, "mp-c");
    tu_pub(CBT_EV_MP_REQUEST_END, "mp-c");
    tu_flush();
    const cbt_span *a = tu_find("request", "mp-a", 0);
    assert_non_null(a);
    assert_true(parent_is(a, &up));
    const cbt_span *la = tu_find("mp.lookup_prefetch", "mp-a", 0);
    assert_non_null(la);
    assert_true(tu_is_child_of(la, a));
    const cbt_span *b = tu_find("request", "mp-b", 0);
    assert_non_null(b);
    assert_true(tu_is_root(b));
    uint8_t want[16];
    cbt_trace_id_from_request("mp-b", 4, want);
    assert_memory_equal(b->ctx.trace_id, want, 16);
    assert_true(tu_is_child_of(tu_find("mp.store", "mp-b", 0), b));
    const cbt_span *c = tu_find("request", "mp-c", 0);
    assert_non_null(c);
    assert_true(tu_is_root(c));
    assert_memory_not_equal(c->ctx.trace_id, up.trace_id, 16);

    /* a publisher that forgot to skip a sampled-out request: its spans are
     * built but recorded nowhere (non-recording, as in OpenTelemetry) */
    cbt_metrics m0 = CBT_STRUCT_INIT(cbt_metrics);
    cbt_metrics m1 = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m0), CBT_OK);
    cbt_span_ctx off = remote_ctx(12, 0);
    pub_ctx(CBT_EV_MP_REQUEST_START, "mp-off", &off);
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_START, "mp-off");
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_END, "mp-off");
    tu_pub(CBT_EV_MP_REQUEST_END, "mp-off");
    /* and a chosen span id is the root's */
    cbt_event e;
    uint8_t id[8] = {0x5a, 1, 2, 3, 4, 5, 6, 7};
    cbt_event_init(&e, CBT_EV_MP_REQUEST_START, "mp-id");
    cbt_event_trace_set(&e, &up, id);
    assert_int_equal(cbt_publish(&e), CBT_OK);
    tu_pub(CBT_EV_MP_REQUEST_END, "mp-id");
    tu_flush();
    assert_int_equal(tu_count("request", "mp-off"), 0);
    assert_int_equal(tu_count("mp.lookup_prefetch", "mp-off"), 0);
    assert_int_equal(cbt_metrics_get(&m1), CBT_OK);
    assert_int_equal(m1.spans_unsampled - m0.spans_unsampled, 2);
    const cbt_span *d = tu_find("request", "mp-id", 0);
    assert_non_null(d);
    assert_memory_equal(d->ctx.span_id, id, 8);
    assert_true(parent_is(d, &up));
    tu_stop();
}

/* ---- lmcache_blend.* fed by the subscriber --------------------------------------- */

static void test_blend_metrics_from_spans(void **state)
{
    (void)state;
    start_cb();
    cbt_blend_metrics *m = cbt_blend_metrics_current();
    assert_non_null(m);
    cbt_blend_snapshot before;
    assert_int_equal(cbt_blend_snapshot_take(m, &before), CBT_OK);
    const char *rid = "req-metrics";
    tu_pub(CBT_EV_CB_REQUEST_START, rid);
    tu_pub(CBT_EV_CB_LOOKUP_START, rid);
    tu_pub(CBT_EV_CB_CLASSIFY_START, rid);
    tu_pub_i64(CBT_EV_CB_CLASSIFY_END, rid, "storage_hits", 4, "stale_chunks", 1);
    tu_pub_i64(CBT_EV_CB_LOOKUP_END, rid, "prefix_hit_tokens", 512, "non_prefix_hit_tokens", 256);
    tu_pub(CBT_EV_CB_RETRIEVE_SUBMITTED, rid);
    tu_pub(CBT_EV_CB_RETRIEVE_START, rid);
    tu_pub(CBT_EV_CB_SCATTER_START, rid);
    tu_pub_i64(CBT_EV_CB_SCATTER_END, rid, "scattered_tokens", 768, "n_shifted_tokens", 256);
    {
        cbt_event e;
        cbt_event_init(&e, CBT_EV_CB_RETRIEVE_END, rid);
        cbt_event_bool(&e, tu_name("failed"), true);
        assert_int_equal(cbt_publish(&e), CBT_OK);
    }
    tu_pub_i64(CBT_EV_CB_CHUNKS_EVICTED, "", "count", 5, NULL, 0);
    tu_pub(CBT_EV_CB_REQUEST_END, rid);
    tu_flush();
    cbt_blend_snapshot s;
    assert_int_equal(cbt_blend_snapshot_take(m, &s), CBT_OK);
    assert_int_equal(s.start_ns, before.start_ns);
#define D(c) (s.counters[CBT_BC_##c] - before.counters[CBT_BC_##c])
    assert_int_equal(D(LOOKUP_REQUESTS), 1);
    assert_int_equal(D(LOOKUP_HIT_TOKENS), 768);
    assert_int_equal(D(LOOKUP_PREFIX_HIT_TOKENS), 512);
    assert_int_equal(D(LOOKUP_NON_PREFIX_HIT_TOKENS), 256);
    assert_int_equal(D(LOOKUP_STORAGE_HITS), 4);
    assert_int_equal(D(LOOKUP_STALE_CHUNKS), 1);
    assert_int_equal(D(RETRIEVE_REQUESTS), 1);
    assert_int_equal(D(RETRIEVE_FAILURES), 1);
    assert_int_equal(D(SCATTER_TOKENS), 768);
    assert_int_equal(D(SHIFTED_TOKENS), 256);
    assert_int_equal(D(CHUNKS_EVICTED), 5);
#undef D
    const cbt_blend_hist_point *h = &s.hists[CBT_BH_SCATTER];
    assert_int_equal(h->count - before.hists[CBT_BH_SCATTER].count, 1);
    /* the exemplar names the cb.scatter span and its request */
    const cbt_span *sc = need_rid("cb.scatter", rid, 0);
    int found = 0;
    for (int b = 0; b <= CBT_BLEND_N_BOUNDS; b++) {
        const cbt_blend_exemplar *x = &h->exemplars[b];
        if (x->valid && memcmp(x->span_id, sc->ctx.span_id, 8) == 0) {
            found = 1;
            assert_memory_equal(x->trace_id, sc->ctx.trace_id, 16);
            assert_string_equal(x->request_id, rid);
            assert_int_equal(x->time_ns, sc->end_ns);
            assert_true(x->value_ms == (double)(sc->end_ns - sc->start_ns) / 1e6);
        }
    }
    assert_true(found);
    const cbt_span *rt = need_rid("cb.retrieve", rid, 0);
    assert_int_equal(rt->status, CBT_SPAN_STATUS_ERROR);

    /* counters are always on: a sampled-out request's published ENDs count */
    cbt_span_ctx off = remote_ctx(8, 0);
    pub_ctx(CBT_EV_CB_REQUEST_START, "req-m-off", &off);
    tu_pub(CBT_EV_CB_LOOKUP_START, "req-m-off");
    tu_pub_i64(CBT_EV_CB_LOOKUP_END, "req-m-off", "hit_tokens", 100, "requested_tokens", 400);
    tu_pub(CBT_EV_CB_REQUEST_END, "req-m-off");
    tu_flush();
    cbt_blend_snapshot s2;
    assert_int_equal(cbt_blend_snapshot_take(m, &s2), CBT_OK);
    assert_int_equal(s2.counters[CBT_BC_LOOKUP_REQUESTS] - s.counters[CBT_BC_LOOKUP_REQUESTS], 1);
    assert_int_equal(s2.counters[CBT_BC_LOOKUP_HIT_TOKENS] - s.counters[CBT_BC_LOOKUP_HIT_TOKENS],
                     100);
    /* no span, so no histogram observation */
    assert_int_equal(s2.hists[CBT_BH_LOOKUP].count, s.hists[CBT_BH_LOOKUP].count);
    tu_stop();
}

/* The metric set on its own: buckets on their bounds, min/max/sum, bad
 * values, out-of-range instruments. */
static void test_blend_metrics_buckets(void **state)
{
    (void)state;
    cbt_blend_metrics *m;
    assert_int_equal(cbt_blend_metrics_create(&m), CBT_OK);
    const double *b = cbt_blend_bounds_ms();
    cbt_blend_observe(m, CBT_BH_LOOKUP, b[0], NULL);        /* on the first bound: bucket 0 */
    cbt_blend_observe(m, CBT_BH_LOOKUP, b[0] * 1.01, NULL); /* just above: bucket 1 */
    cbt_blend_observe(m, CBT_BH_LOOKUP, 1e9, NULL);         /* past the last: overflow bucket */
    cbt_blend_observe(m, CBT_BH_LOOKUP, -5.0, NULL);        /* counted as 0 */
    cbt_blend_observe(m, (cbt_blend_hist)99, 1.0, NULL);    /* ignored */
    cbt_blend_count(m, (cbt_blend_counter)99, 1);           /* ignored */
    cbt_blend_count(m, CBT_BC_RETRIEVE_NOOPS, 2);
    cbt_blend_snapshot s;
    assert_int_equal(cbt_blend_snapshot_take(m, &s), CBT_OK);
    const cbt_blend_hist_point *h = &s.hists[CBT_BH_LOOKUP];
    assert_int_equal(h->count, 4);
    assert_int_equal(h->buckets[0], 2);
    assert_int_equal(h->buckets[1], 1);
    assert_int_equal(h->buckets[CBT_BLEND_N_BOUNDS], 1);
    assert_true(h->min_ms == 0.0);
    assert_true(h->max_ms == 1e9);
    assert_int_equal(s.counters[CBT_BC_RETRIEVE_NOOPS], 2);
    assert_int_equal(s.hists[CBT_BH_SCATTER].count, 0);
    assert_string_equal(cbt_blend_counter_name(CBT_BC_LOOKUP_REQUESTS),
                        "lmcache_blend.lookup_requests");
    assert_null(cbt_blend_hist_name((cbt_blend_hist)99));
    for (int i = 1; i < CBT_BLEND_N_BOUNDS; i++)
        assert_true(b[i] > b[i - 1]);
    cbt_blend_metrics_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_pspan_tree_ids_known_at_begin, tu_teardown),
        cmocka_unit_test_teardown(test_pspan_remote_parent_and_stream, tu_teardown),
        cmocka_unit_test_teardown(test_pspan_sampled_out_publishes_nothing, tu_teardown),
        cmocka_unit_test_teardown(test_pspan_bad_arguments, tu_teardown),
        cmocka_unit_test_teardown(test_pspan_end_retry_kind_and_eviction, tu_teardown),
        cmocka_unit_test(test_pspan_ids_differ_after_fork),
        cmocka_unit_test_teardown(test_cb_remote_parents, tu_teardown),
        cmocka_unit_test_teardown(test_cb_option_b, tu_teardown),
        cmocka_unit_test_teardown(test_cb_sampled_out, tu_teardown),
        cmocka_unit_test_teardown(test_cb_empty_context_is_none, tu_teardown),
        cmocka_unit_test_teardown(test_cb_sampled_out_operation_takes_its_subtree, tu_teardown),
        cmocka_unit_test_teardown(test_cb_kernel_spans_follow_the_context, tu_teardown),
        cmocka_unit_test_teardown(test_mp_root_joins_the_callers_trace, tu_teardown),
        cmocka_unit_test_teardown(test_blend_metrics_from_spans, tu_teardown),
        cmocka_unit_test(test_blend_metrics_buckets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
