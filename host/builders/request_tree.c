/* host/builders/request_tree.c — owns the request-tree engine (internal/reqtree.h): the
 * session table, child pairing, pending-op counters, the close rule, late
 * children, eviction and shutdown, written once for every path.
 *
 * Sessions live in a fixed pool (max_sessions entries, allocated at
 * creation); a bounded hash table maps a session id to its pool index, so a
 * session's address never moves. Each in-use session sits on one of two
 * lists, oldest activity first:
 *   busy    anything still open or pending; it expires idle_ns after its
 *           last event (evicted_idle: its spans end incomplete);
 *   closed  root closed, nothing open or pending: kept grace_ns for late
 *           children, then forgotten (nothing to end).
 * A full table takes the oldest closed session, else evicts the oldest busy
 * one (evicted_full); an exhausted span pool evicts the oldest busy session
 * other than the current one and tries once more (evicted_span_pool).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cbt/context.h"
#include "internal/abi.h"
#include "internal/clock.h"
#include "internal/counter.h"
#include "internal/end_status.h"
#include "internal/ivunion.h"
#include "internal/reqtree.h"

#define NIL 0xffffffffu
enum { L_NONE = 0, L_BUSY = 1, L_CLOSED = 2 };

/* tree_child.timed: was the child timed by a stream (its START published
 * with cbt_publish_on_stream: CBT_EVF_ENQUEUED), and is it the request's
 * own GPU operation or part of one (nested in a stream-timed child)? */
enum { TIMED_NO = 0, TIMED_OUTER = 1, TIMED_INNER = 2 };

typedef struct tree_child {
    cbt_span *span;
    uint64_t pair;
    uint64_t seq;     /* open order: first-in first-out pairing, newest-first shutdown */
    uint64_t opened;  /* event time it opened, for the idle bound */
    uint8_t op;
    uint8_t timed;    /* TIMED_* (its cbt.queue_ns is on its span) */
} tree_child;

struct cbt_tree_session {
    uint32_t prev, next; /* on its list */
    uint8_t list;        /* L_* */
    uint8_t id_len;
    uint8_t n_children;
    bool root_open;      /* the request is open: a root span, or an elided / sampled-out anchor */
    bool closed;         /* the root closed: in the grace window */
    bool sampled_out;    /* drop_sampled_out paths: no spans for this request */
    bool anchor_registered;
    bool end_seen;       /* REQUEST_END arrived */
    bool deferred;       /* ... while ops were pending */
    uint32_t op_out;     /* bit per op: a sampled-out START of it is still open */
    uint32_t pending[CBT_TREE_COUNTERS_MAX];
    uint32_t dropped_starts[CBT_TREE_OPS_MAX];
    uint64_t base;       /* cbt_strtab_base of the id */
    uint64_t end_ts;     /* REQUEST_END time */
    uint64_t last_ts;    /* last event for it (event time) */
    cbt_span *root;
    cbt_span_ctx anchor;     /* where children with no open parent op nest */
    cbt_span_ctx anchor_reg; /* what is registered under root_logical for an anchor */
    cbt_span_ctx op_out_ctx[CBT_TREE_OPS_MAX];
    int64_t scratch[4];
    /* the root's GPU aggregates (docs/spans.md, "Queue time"): what its
     * outermost stream-timed children that ended while it was open waited
     * (summed) and kept their streams busy (the union of their intervals) */
    uint32_t gpu_n;      /* such children: 0, and the root carries neither */
    uint64_t gpu_queue;
    cbt_ivunion gpu_busy;
    char id[CBT_SESSION_MAX];
    tree_child children[CBT_TREE_CHILDREN_MAX];
};

struct cbt_tree {
    const cbt_tree_path *path;
    cbt_tree_opts o;
    void *pctx;
    cbt_tracer *t; /* of the event being handled */
    cbt_strtab index; /* session id -> uint32 pool index */
    cbt_tree_session *pool;
    uint32_t *free_ids, n_free;
    uint32_t head[3], tail[3], len[3]; /* per list */
    uint64_t now, seq;
    uint64_t wall_seen; /* the last wall-clock reading (unix ns; advance_clock) */
    int16_t rule_of[CBT_EVENT_TYPES_MAX]; /* index into path->rules, -1: none */
    cbt_tree_counters c;
};

#define INC(f) cbt_count1_(&e->c.f) /* harvester thread only */

/* ---- lists ----------------------------------------------------------------- */

static void list_unlink(cbt_tree *e, cbt_tree_session *s)
{
    if (s->list == L_NONE)
        return;
    uint32_t i = (uint32_t)(s - e->pool);
    if (s->prev != NIL)
        e->pool[s->prev].next = s->next;
    else
        e->head[s->list] = s->next;
    if (s->next != NIL)
        e->pool[s->next].prev = s->prev;
    else
        e->tail[s->list] = s->prev;
    (void)i;
    e->len[s->list]--;
    s->prev = s->next = NIL;
    s->list = L_NONE;
}

static void list_append(cbt_tree *e, cbt_tree_session *s, uint8_t list)
{
    uint32_t i = (uint32_t)(s - e->pool);
    s->list = list;
    e->len[list]++;
    s->next = NIL;
    s->prev = e->tail[list];
    if (s->prev != NIL)
        e->pool[s->prev].next = i;
    else
        e->head[list] = i;
    e->tail[list] = i;
}

static bool any_pending(const cbt_tree *e, const cbt_tree_session *s)
{
    for (int i = 0; i < e->path->n_counters; i++)
        if (s->pending[i])
            return true;
    return false;
}

/* Busy or closed, by what the session holds; moved to its list's tail (its
 * last activity is now). */
static void place(cbt_tree *e, cbt_tree_session *s)
{
    uint8_t want = (s->closed && s->n_children == 0 && !any_pending(e, s) && !s->op_out)
                       ? L_CLOSED
                       : L_BUSY;
    list_unlink(e, s);
    list_append(e, s, want);
}

/* ---- sessions -------------------------------------------------------------- */

static cbt_skey key_of(const cbt_tree_session *s)
{
    cbt_skey k = {s->id, s->id_len, s->base};
    return k;
}

static cbt_tree_session *sess_find(cbt_tree *e, const cbt_event *ev, const cbt_skey *k)
{
    uint32_t *ix = cbt_strtab_find_h(&e->index, ev->session, ev->session_len, 0,
                                     cbt_strtab_mix(k->base, 0));
    return ix ? &e->pool[*ix] : NULL;
}

static void sess_free(cbt_tree *e, cbt_tree_session *s)
{
    list_unlink(e, s);
    uint32_t *ix = cbt_strtab_find_h(&e->index, s->id, s->id_len, 0, cbt_strtab_mix(s->base, 0));
    if (ix)
        cbt_strtab_remove(&e->index, ix);
    s->id_len = 0;
    s->root = NULL;
    e->free_ids[e->n_free++] = (uint32_t)(s - e->pool);
}

static void end_child(cbt_tree *e, cbt_tree_session *s, int i, uint64_t end_ns, const char *why);
static void evict(cbt_tree *e, cbt_tree_session *s, const char *why);

static cbt_tree_session *sess_create(cbt_tree *e, const cbt_event *ev, const cbt_skey *k)
{
    if (e->n_free == 0 || e->index.count >= e->index.limit) {
        if (e->head[L_CLOSED] != NIL) {
            sess_free(e, &e->pool[e->head[L_CLOSED]]); /* its window ends early; nothing open */
        } else if (e->head[L_BUSY] != NIL) {
            INC(evicted_full);
            evict(e, &e->pool[e->head[L_BUSY]], "table_full");
        } else {
            INC(sessions_full);
            return NULL;
        }
    }
    uint32_t *ix = cbt_strtab_upsert_h(&e->index, ev->session, ev->session_len, 0,
                                       cbt_strtab_mix(k->base, 0), NULL);
    if (!ix) {
        INC(sessions_full);
        return NULL;
    }
    uint32_t id = e->free_ids[--e->n_free];
    *ix = id;
    cbt_tree_session *s = &e->pool[id];
    /* the header, not the child array: n_children = 0 says it is empty */
    memset(s, 0, offsetof(cbt_tree_session, children));
    s->prev = s->next = NIL;
    s->list = L_NONE;
    memcpy(s->id, ev->session, ev->session_len);
    s->id[ev->session_len] = '\0';
    s->id_len = ev->session_len;
    s->base = k->base;
    s->last_ts = e->now;
    list_append(e, s, L_BUSY);
    return s;
}

/* ---- spans ----------------------------------------------------------------- */

static bool has_span_id(const cbt_span_ctx *c) { return !cbt_bytes_zero_(c->span_id, 8); }

/* The event's context, when it names a trace (a trace block with an all-zero
 * parent carries none). */
static const cbt_span_ctx *ctx_of(const cbt_event *ev)
{
    const cbt_event_trace *tr = cbt_event_trace_of(ev);
    return tr && !cbt_bytes_zero_(tr->parent.trace_id, 16) ? &tr->parent : NULL;
}

/* A valid registry entry for `c`: a trace id without a span id gets a marker
 * span id (never exported; the entry only has to be valid). */
static cbt_span_ctx with_marker_id(cbt_span_ctx c)
{
    if (!has_span_id(&c))
        memcpy(c.span_id, c.trace_id + 8, 8);
    if (!has_span_id(&c))
        c.span_id[7] = 1;
    return c;
}

static void set_ids(cbt_tree *e, cbt_span *sp, const char *id, size_t len)
{
    cbt_span_set_str(sp, CBT_N_SESSION_ID, id, len);
    if (e->path->request_id_attr)
        cbt_span_set_str(sp, CBT_N_REQUEST_ID, id, len);
}

/* Start a span; an exhausted pool evicts the oldest busy session other than
 * `self` that holds a span (one that holds none would free nothing), and
 * tries again, until a span starts or no such session is left. */
static cbt_span *span_start(cbt_tree *e, cbt_tree_session *self, cbt_name name,
                            cbt_span_kind kind, const cbt_span_ctx *parent, const cbt_event *ev,
                            bool honour_ctx, uint64_t start_ns)
{
    for (;;) {
        cbt_span *sp = honour_ctx
                           ? cbt_span_start_for_event_at_(e->t, name, kind, parent, ev, start_ns)
                           : cbt_span_start(e->t, name, kind, parent, start_ns);
        if (sp)
            return sp;
        uint32_t i = e->head[L_BUSY];
        while (i != NIL && (&e->pool[i] == self || (!e->pool[i].root && !e->pool[i].n_children)))
            i = e->pool[i].next;
        if (i == NIL)
            return NULL;
        INC(evicted_span_pool);
        evict(e, &e->pool[i], "span_pool_full");
    }
}

static void mark_incomplete(cbt_span *sp, const char *why)
{
    sp->flags |= CBT_SPANF_INCOMPLETE;
    if (why)
        cbt_span_set_str(sp, CBT_N_EVICTED, why, strlen(why));
}

static void clear_op_markers(cbt_tree *e, cbt_tree_session *s)
{
    cbt_skey k = key_of(s);
    for (int op = 0; op < e->path->n_ops; op++)
        if ((s->op_out >> op) & 1u && e->path->ops[op].logical)
            cbt_registry_remove_k_(e->t, &k, e->path->ops[op].logical, &s->op_out_ctx[op]);
    s->op_out = 0;
}

static void unregister_anchor(cbt_tree *e, cbt_tree_session *s)
{
    if (!s->anchor_registered)
        return;
    cbt_skey k = key_of(s);
    cbt_registry_remove_k_(e->t, &k, e->path->root_logical, &s->anchor_reg);
    s->anchor_registered = false;
}

static void register_anchor(cbt_tree *e, cbt_tree_session *s)
{
    cbt_skey k = key_of(s);
    s->anchor_reg = with_marker_id(s->anchor);
    s->anchor_registered = true;
    cbt_registry_put_k_(e->t, &k, e->path->root_logical, &s->anchor_reg);
}

/* Open the root at start_ns. The opening event's context decides it (the
 * MP path: cbt_span_start_for_event_at_ rules; the CB path, cbt/cb.h: not
 * sampled = no spans, a remote parent = root elided, none = a trace derived
 * from the request id). `from_start`: opened by REQUEST_START (its metadata
 * goes on the root), not lazily by a child. */
static bool open_root(cbt_tree *e, cbt_tree_session *s, const cbt_event *ev, uint64_t start_ns,
                      bool from_start)
{
    const cbt_tree_path *p = e->path;
    const cbt_span_ctx *ctx = ctx_of(ev);
    cbt_skey k = key_of(s);
    s->root = NULL;
    s->sampled_out = false;
    s->gpu_n = 0;
    s->gpu_queue = 0;
    cbt_ivunion_clear(&s->gpu_busy);
    unregister_anchor(e, s);
    clear_op_markers(e, s);
    memset(&s->anchor, 0, sizeof s->anchor);
    if (p->drop_sampled_out && ctx && !(ctx->trace_flags & 1u)) {
        s->root_open = s->sampled_out = true;
        s->anchor = *ctx;
        register_anchor(e, s);
        INC(sampled_out);
        return true;
    }
    if (p->remote_root_elided && ctx && has_span_id(ctx)) {
        s->root_open = true;
        s->anchor = *ctx;
        register_anchor(e, s);
        INC(roots_remote);
        return true;
    }
    s->root = span_start(e, s, p->root_name, CBT_SPAN_KIND_SERVER, NULL, ev, true, start_ns);
    if (!s->root)
        return false;
    if (p->trace_from_request && !ctx) {
        cbt_trace_id_from_request(s->id, s->id_len, s->root->ctx.trace_id);
        s->root->ctx.trace_flags = 1;
    }
    s->root_open = true;
    s->anchor = s->root->ctx;
    set_ids(e, s->root, s->id, s->id_len);
    if (from_start)
        cbt_span_set_from_event(s->root, ev);
    cbt_registry_put_k_(e->t, &k, p->root_logical, &s->root->ctx);
    INC(roots_opened);
    return true;
}

/* End the root at end_ns; the session enters its grace window (or is
 * forgotten when there is none and nothing is left open). */
/* tail_ns: how long GPU work outlived REQUEST_END, set on a normal close
 * (UINT64_MAX: an eviction or shutdown, where it is not known) */
static void close_root(cbt_tree *e, cbt_tree_session *s, uint64_t end_ns, uint64_t tail_ns)
{
    if (!s->root_open)
        return;
    s->root_open = false;
    s->closed = true;
    unregister_anchor(e, s);
    if (s->root) {
        cbt_skey k = key_of(s);
        cbt_registry_remove_k_(e->t, &k, e->path->root_logical, &s->root->ctx);
        if (tail_ns != UINT64_MAX)
            cbt_span_set_i64(s->root, CBT_N_GPU_TAIL_NS, (int64_t)tail_ns);
        if (s->gpu_n) { /* measured: at least one stream-timed child ended */
            cbt_span_set_i64(s->root, CBT_N_GPU_QUEUE_NS, (int64_t)s->gpu_queue);
            cbt_span_set_i64(s->root, CBT_N_GPU_BUSY_NS, (int64_t)cbt_ivunion_len(&s->gpu_busy));
        }
        cbt_span_end(e->t, s->root, end_ns);
        s->root = NULL;
        INC(roots_closed);
    }
}

/* The close rule: REQUEST_END has come and nothing is pending. `ev` is the
 * event just handled; when it is the END that cleared the last pending op of
 * a deferred root, the root ends at its time under CBT_ROOT_END_TRANSFER. */
static void maybe_close(cbt_tree *e, cbt_tree_session *s, const cbt_event *ev)
{
    if (!s->root_open || !s->end_seen || any_pending(e, s))
        return;
    uint64_t last = s->deferred && ev->ts > s->end_ts ? ev->ts : s->end_ts;
    bool transfer = e->path->root_end_fixed || e->o.root_end == CBT_ROOT_END_TRANSFER;
    close_root(e, s, transfer ? last : s->end_ts, last - s->end_ts);
}

/* A session is forgotten when nothing of it is left to track: no root, no
 * child, nothing pending, no grace window to keep. */
static void maybe_free(cbt_tree *e, cbt_tree_session *s)
{
    if (s->root_open || s->n_children || any_pending(e, s) || s->op_out)
        return;
    if (s->closed && e->o.grace_ns)
        return; /* kept for late children; the sweep forgets it */
    sess_free(e, s);
}

static int newest_of(const cbt_tree_session *s, int op)
{
    int newest = -1;
    for (int i = 0; i < s->n_children; i++)
        if (s->children[i].op == op && (newest < 0 || s->children[i].seq > s->children[newest].seq))
            newest = i;
    return newest;
}

/* The child an op's new span nests under (its index), or -1: the anchor. */
static int parent_index(const cbt_tree *e, const cbt_tree_session *s, int op)
{
    const cbt_tree_op *o = &e->path->ops[op];
    for (int i = 0; i < 2 && o->parents[i] >= 0; i++) {
        int p = newest_of(s, o->parents[i]);
        if (p >= 0)
            return p;
    }
    return -1;
}

/* A stream-timed span of the request's own ended (or a point span was
 * made) while its root is open: the root's GPU aggregates take it. */
static void gpu_account(cbt_tree_session *s, uint64_t queue, uint64_t start, uint64_t end)
{
    if (!s->root_open || !s->root)
        return;
    s->gpu_n++;
    s->gpu_queue += queue;
    cbt_ivunion_add(&s->gpu_busy, start, end);
}

/* Re-point op's registry name at its newest open span, or drop it. */
static void registry_repoint(cbt_tree *e, cbt_tree_session *s, int op, const cbt_span_ctx *gone)
{
    cbt_name logical = e->path->ops[op].logical;
    if (!logical)
        return;
    cbt_skey k = key_of(s);
    int newest = newest_of(s, op);
    if (newest >= 0)
        cbt_registry_put_k_(e->t, &k, logical, &s->children[newest].span->ctx);
    else
        cbt_registry_remove_k_(e->t, &k, logical, gone);
}

/* End child i (taken out of the array) incomplete, for `why`. */
static void end_child(cbt_tree *e, cbt_tree_session *s, int i, uint64_t end_ns, const char *why)
{
    tree_child ch = s->children[i];
    s->children[i] = s->children[--s->n_children];
    mark_incomplete(ch.span, why);
    cbt_span_ctx ctx = ch.span->ctx;
    cbt_span_end(e->t, ch.span, end_ns);
    registry_repoint(e, s, ch.op, &ctx);
}

/* End everything the session holds as incomplete (`why`; NULL at shutdown)
 * and forget it. */
static void end_all(cbt_tree *e, cbt_tree_session *s, uint64_t now, const char *why)
{
    while (s->n_children > 0) { /* newest first: a child before its parent */
        int c = 0;
        for (int j = 1; j < s->n_children; j++)
            if (s->children[j].seq > s->children[c].seq)
                c = j;
        uint64_t end = s->last_ts > s->children[c].span->start_ns ? s->last_ts : now;
        end_child(e, s, c, why ? end : now, why);
        if (!why)
            INC(incomplete_at_shutdown);
    }
    clear_op_markers(e, s);
    if (s->root) {
        mark_incomplete(s->root, why);
        if (!why)
            INC(incomplete_at_shutdown);
    }
    uint64_t end = s->end_seen ? s->end_ts : why ? s->last_ts : now;
    close_root(e, s, end, UINT64_MAX);
}

static void evict(cbt_tree *e, cbt_tree_session *s, const char *why)
{
    end_all(e, s, e->now, why);
    sess_free(e, s);
}

/* Sessions and children past their bounds, by event time. */
static void sweep(cbt_tree *e)
{
    while (e->head[L_BUSY] != NIL) {
        cbt_tree_session *s = &e->pool[e->head[L_BUSY]];
        if (e->o.idle_ns == UINT64_MAX || s->last_ts + e->o.idle_ns >= e->now)
            break;
        /* counted when it ends something or drops pending work; a session
         * that only waited (an orphan's END came, no REQUEST_END) just goes */
        if (s->root_open || s->n_children || any_pending(e, s) || s->op_out)
            INC(evicted_idle);
        evict(e, s, "idle");
    }
    while (e->head[L_CLOSED] != NIL) {
        cbt_tree_session *s = &e->pool[e->head[L_CLOSED]];
        if (s->last_ts + e->o.grace_ns >= e->now)
            break;
        sess_free(e, s);
    }
}

/* Children of `s` open past the idle bound end incomplete, at the session's
 * last activity before this event (`before`), not later than that. */
static void sweep_children(cbt_tree *e, cbt_tree_session *s, uint64_t before)
{
    if (e->o.idle_ns == UINT64_MAX)
        return;
    for (int i = 0; i < s->n_children;) {
        if (s->children[i].opened + e->o.idle_ns < e->now) {
            INC(children_evicted_idle);
            uint64_t st = s->children[i].span->start_ns;
            end_child(e, s, i, before > st ? before : st, "idle");
        } else {
            i++;
        }
    }
}

/* ---- the actions ------------------------------------------------------------ */

/* A new request under an id whose old one is over (or being replaced). */
static void reset_for_new_request(cbt_tree *e, cbt_tree_session *s)
{
    if (s->n_children || s->op_out) {
        INC(sessions_reused);
        end_all(e, s, e->now, "reused");
    }
    s->closed = s->end_seen = s->deferred = false;
    s->gpu_n = 0;
    s->gpu_queue = 0;
    cbt_ivunion_clear(&s->gpu_busy);
    memset(s->pending, 0, sizeof s->pending);
    memset(s->dropped_starts, 0, sizeof s->dropped_starts);
    memset(s->scratch, 0, sizeof s->scratch);
}

static cbt_status on_root_start(cbt_tree *e, cbt_tree_session *s, const cbt_event *ev)
{
    /* REQUEST_START begins a request afresh: what an earlier request of the
     * id, or orphan events before it, left is not this request's */
    if (!s->root_open)
        reset_for_new_request(e, s);
    if (!s->root_open && !open_root(e, s, ev, ev->ts, true)) {
        maybe_free(e, s);
        return CBT_ERR_FULL;
    }
    return CBT_OK;
}

static cbt_status on_submit(cbt_tree *e, cbt_tree_session *s, int ctr)
{
    (void)e;
    s->pending[ctr]++;
    return CBT_OK;
}

/* The per-op sampled-out rule of drop_sampled_out paths (cbt/cb.h): a START
 * whose own context is not sampled, or whose parent op was sampled out,
 * builds no span; its END is swallowed like that of a dropped START, and its
 * kernels find the not-sampled context under the op's logical name. */
static bool op_sampled_out(cbt_tree *e, cbt_tree_session *s, int op, const cbt_event *ev)
{
    const cbt_tree_op *o = &e->path->ops[op];
    const cbt_span_ctx *ctx = ctx_of(ev);
    /* the parent op it would nest under, as parent_of picks it: the first
     * listed that has an open span, or is sampled out with none */
    int p0 = -1;
    for (int i = 0; i < 2 && o->parents[i] >= 0; i++) {
        int p = o->parents[i];
        if (newest_of(s, p) >= 0)
            break;
        if ((s->op_out >> p) & 1u) {
            p0 = p;
            break;
        }
    }
    bool parent_out = p0 >= 0;
    if (!((ctx && !(ctx->trace_flags & 1u)) || parent_out))
        return false;
    INC(sampled_out);
    s->dropped_starts[op]++;
    s->op_out |= 1u << op;
    cbt_span_ctx out = ctx && !(ctx->trace_flags & 1u) ? *ctx : s->op_out_ctx[p0];
    out.trace_flags &= (uint8_t)~1u;
    out = with_marker_id(out);
    s->op_out_ctx[op] = out;
    if (o->logical) {
        cbt_skey k = key_of(s);
        cbt_registry_put_k_(e->t, &k, o->logical, &out);
    }
    return true;
}

static cbt_status on_start(cbt_tree *e, cbt_tree_session *s, int op, const cbt_event *ev)
{
    const cbt_tree_path *p = e->path;
    bool late = s->closed;
    if (!s->root_open && !s->closed) {
        if (p->lazy_root) {
            /* lazy root (store-only path): starts at this START, or at an
             * earlier REQUEST_END under CBT_ROOT_END_REQUEST, so start <= end */
            uint64_t start = ev->ts;
            if (s->end_seen && s->end_ts < start && e->o.root_end != CBT_ROOT_END_TRANSFER)
                start = s->end_ts;
            if (open_root(e, s, ev, start, false))
                INC(roots_lazy);
        } else {
            INC(no_root); /* an orphan: its own root, in the request's derived trace */
        }
    }
    if (s->sampled_out) {
        INC(sampled_out);
        s->dropped_starts[op]++;
        return CBT_OK;
    }
    if (p->drop_sampled_out && op_sampled_out(e, s, op, ev))
        return CBT_OK;
    if (s->n_children >= CBT_TREE_CHILDREN_MAX) {
        int oldest = 0;
        for (int j = 1; j < s->n_children; j++)
            if (s->children[j].seq < s->children[oldest].seq)
                oldest = j;
        INC(children_evicted_full);
        end_child(e, s, oldest, ev->ts, "children_full");
    }
    int pidx = parent_index(e, s, op);
    const cbt_span_ctx *parent = pidx >= 0 ? &s->children[pidx].span->ctx : &s->anchor;
    const cbt_span_ctx *ctx = ctx_of(ev);
    cbt_span_kind kind = (p->drop_sampled_out && ctx && has_span_id(ctx)) ? CBT_SPAN_KIND_SERVER
                                                                        : CBT_SPAN_KIND_INTERNAL;
    bool orphan = !cbt_span_ctx_valid(parent);
    cbt_span *c = span_start(e, s, p->ops[op].span, kind, parent, ev, p->drop_sampled_out, ev->ts);
    if (!c) {
        INC(children_full);
        s->dropped_starts[op]++;
        return CBT_ERR_FULL;
    }
    if (orphan && p->trace_from_request && !ctx) {
        cbt_trace_id_from_request(s->id, s->id_len, c->ctx.trace_id);
        c->ctx.trace_flags = 1;
    }
    set_ids(e, c, s->id, s->id_len);
    cbt_span_set_from_event(c, ev);
    uint8_t timed = TIMED_NO;
    if (ev->flags & CBT_EVF_ENQUEUED) {
        cbt_span_set_queue_at_(c, ev->enqueue_ns, ev->ts, ev->stream, ev->device);
        timed = pidx >= 0 && s->children[pidx].timed ? TIMED_INNER : TIMED_OUTER;
    }
    if (late) {
        cbt_span_set_bool(c, CBT_N_LATE, true);
        INC(late_children);
    }
    tree_child *ch = &s->children[s->n_children++];
    ch->span = c;
    ch->pair = ev->pair;
    ch->timed = timed;
    ch->op = (uint8_t)op;
    ch->seq = ++e->seq;
    ch->opened = e->now; /* engine time: what the idle bound is measured in */
    if (p->ops[op].logical) {
        cbt_skey k = key_of(s);
        cbt_registry_put_k_(e->t, &k, p->ops[op].logical, &c->ctx);
    }
    INC(children_opened);
    if (p->on_child_start)
        p->on_child_start(e, s, op, c, ev);
    return CBT_OK;
}

/* An op finished (with or without a span): its counter, then the close rule. */
static void op_finished(cbt_tree *e, cbt_tree_session *s, int op, cbt_span *sp, const cbt_event *ev)
{
    const cbt_tree_path *p = e->path;
    if (p->on_child_end)
        p->on_child_end(e, s, op, sp, ev);
    int ctr = p->ops[op].counter;
    if (ctr >= 0 && s->pending[ctr] > 0)
        s->pending[ctr]--;
    maybe_close(e, s, ev);
}

static cbt_status on_end(cbt_tree *e, cbt_tree_session *s, int op, const cbt_event *ev)
{
    const cbt_tree_path *p = e->path;
    if (s->sampled_out) {
        INC(sampled_out);
        if (s->dropped_starts[op] > 0)
            s->dropped_starts[op]--;
        op_finished(e, s, op, NULL, ev);
        return CBT_OK;
    }
    int found = -1;
    for (int i = 0; i < s->n_children; i++) {
        const tree_child *ch = &s->children[i];
        if (ch->op == op && ch->pair == ev->pair && (found < 0 || ch->seq < s->children[found].seq))
            found = i;
    }
    if (found < 0) {
        if (s->dropped_starts[op] > 0) {
            /* its START was dropped (counted then): the op still finished */
            if (--s->dropped_starts[op] == 0 && (s->op_out >> op) & 1u) {
                s->op_out &= ~(1u << op);
                if (p->ops[op].logical) {
                    cbt_skey k = key_of(s);
                    cbt_registry_remove_k_(e->t, &k, p->ops[op].logical, &s->op_out_ctx[op]);
                }
            }
            op_finished(e, s, op, NULL, ev);
            return CBT_OK;
        }
        INC(unmatched_end);
        /* no START; its SUBMITTED may still be pending (LMCache takes one
         * off here too), so it can close a deferred root */
        op_finished(e, s, op, NULL, ev);
        return CBT_ERR_UNMATCHED;
    }
    tree_child ch = s->children[found];
    s->children[found] = s->children[--s->n_children];
    cbt_span_set_from_event(ch.span, ev);
    cbt_end_status_apply_(ch.span, ev);
    ch.span->end_ns = ev->ts > ch.span->start_ns ? ev->ts : ch.span->start_ns;
    if (ch.timed == TIMED_OUTER) {
        const cbt_attr *q = cbt_span_attr(ch.span, CBT_N_QUEUE_NS);
        /* the sum is of the children's cbt.queue_ns as they carry it: one
         * whose attributes were full at its START (dropped, counted) adds
         * its interval to the busy time and nothing to the sum */
        gpu_account(s, q && q->type == CBT_META_I64 ? (uint64_t)q->v.i64 : 0, ch.span->start_ns,
                    ch.span->end_ns);
    }
    if (p->on_child_end)
        p->on_child_end(e, s, op, ch.span, ev);
    cbt_span_ctx ctx = ch.span->ctx;
    cbt_span_end(e->t, ch.span, ev->ts);
    INC(children_closed);
    registry_repoint(e, s, op, &ctx);
    int ctr = p->ops[op].counter;
    if (ctr >= 0 && s->pending[ctr] > 0)
        s->pending[ctr]--;
    maybe_close(e, s, ev);
    return CBT_OK;
}

static cbt_status on_root_end(cbt_tree *e, cbt_tree_session *s, const cbt_event *ev)
{
    const cbt_tree_path *p = e->path;
    if (s->closed || s->end_seen) {
        /* CB: every worker and every retrieve pass sends one; MP: a repeat */
        if (p->root_end_fixed) {
            INC(sibling_request_end);
            return CBT_OK;
        }
        INC(duplicate_request_end);
        return CBT_ERR_DUPLICATE;
    }
    s->end_seen = true;
    s->end_ts = ev->ts;
    if (p->on_root_end_event)
        p->on_root_end_event(e, s, ev);
    if (s->root)
        cbt_span_set_from_event(s->root, ev);
    if (any_pending(e, s)) {
        s->deferred = true;
        INC(roots_deferred);
    }
    maybe_close(e, s, ev);
    return CBT_OK;
}

static cbt_status on_point(cbt_tree *e, cbt_tree_session *s, cbt_name name, const cbt_event *ev)
{
    const cbt_tree_path *p = e->path;
    if (p->on_point)
        p->on_point(e, s, name, ev);
    const cbt_span_ctx *parent = NULL;
    if (s && s->sampled_out) {
        INC(sampled_out);
        return CBT_OK;
    }
    if (s && (s->root_open || s->closed))
        parent = &s->anchor;
    else if (ev->session_len > 0)
        INC(no_root); /* LMCache too makes it a root of its own */
    cbt_span *sp = span_start(e, s, name, CBT_SPAN_KIND_INTERNAL, parent, ev, false, ev->ts);
    if (!sp)
        return CBT_ERR_FULL;
    if (!parent && ev->session_len > 0 && p->trace_from_request) {
        /* an orphan lands in its request's derived trace, as orphan STARTs do */
        cbt_trace_id_from_request(ev->session, ev->session_len, sp->ctx.trace_id);
        sp->ctx.trace_flags = 1;
    }
    if (ev->session_len > 0)
        set_ids(e, sp, ev->session, ev->session_len);
    else /* as LMCache: a session-less point span says so */
        cbt_span_set_str(sp, CBT_N_SESSION_ID, "", 0);
    cbt_span_set_from_event(sp, ev);
    if (ev->flags & CBT_EVF_ENQUEUED) {
        uint64_t q = cbt_span_set_queue_at_(sp, ev->enqueue_ns, ev->ts, ev->stream, ev->device);
        if (s)
            gpu_account(s, q, ev->ts, ev->ts);
    }
    if (s && s->closed) {
        cbt_span_set_bool(sp, CBT_N_LATE, true);
        INC(late_children);
    }
    cbt_span_end(e->t, sp, ev->ts);
    INC(point_events);
    return CBT_OK;
}

/* ---- the subscriber ----------------------------------------------------------- */

/* Event time moves the engine's clock forward, unless it lies more than 60 s
 * past the wall clock (a bad stamp must not expire everything). The wall
 * clock is read only when `ts` is past the last reading + 60 s: a reading is
 * never ahead of the true time, so a stamp within its bound is within the
 * true one, and the harvester does not pay a clock_gettime per event. */
#define FUTURE_NS (60ull * 1000000000ull)
static void advance_clock(cbt_tree *e, uint64_t ts)
{
    if (ts <= e->now)
        return;
    if (!e->wall_seen || ts > e->wall_seen + FUTURE_NS) {
        /* the harvester's round time (a replay's is the recorded one) */
        uint64_t wall = e->t && e->t->hv_now ? e->t->hv_now : cbt_clock_unix_now();
        if (wall)
            e->wall_seen = wall;
        if (wall && ts > wall + FUTURE_NS)
            return;
    }
    e->now = ts;
}

/* rule_of[] for an extra type (cbt_tree_subscriber_'s `extra`): no rule of
 * the table, only the path's on_custom hook */
#define RULE_EXTRA ((int16_t)-2)

static cbt_status tree_on_event(void *ctx, cbt_tracer *t, const cbt_event *ev)
{
    cbt_tree *e = ctx;
    e->t = t;
    advance_clock(e, ev->ts);
    sweep(e);
    int16_t r = ev->type < CBT_EVENT_TYPES_MAX ? e->rule_of[ev->type] : -1;
    if (r == RULE_EXTRA) /* one of the path's extra types: its hook alone */
        return e->path->on_custom ? e->path->on_custom(e, ev) : CBT_OK;
    if (r < 0)
        return CBT_ERR_UNKNOWN_EVENT;
    const cbt_tree_rule *rule = &e->path->rules[r];
    cbt_skey k = cbt_skey_make(ev->session, ev->session_len);
    cbt_status rc = CBT_OK;
    cbt_tree_session *s = NULL;
    if (ev->session_len >= CBT_SESSION_MAX) { /* a hand-built event: cbt_event_init refuses it */
        INC(no_root);
        return CBT_ERR_SESSION_TOO_LONG;
    }
    if (ev->session_len == 0 && rule->act != CBT_TREE_HOOK && rule->act != CBT_TREE_POINT) {
        /* a request's span needs the request: a session-less START / END
         * (LMCache's L2_LOAD_TASK_* carry none) builds nothing, counted;
         * an END still reaches the path's hook (its metrics count it) */
        INC(no_root);
        if (rule->act == CBT_TREE_END && e->path->on_child_end)
            e->path->on_child_end(e, NULL, rule->arg, NULL, ev);
        return CBT_OK;
    }
    switch (rule->act) {
    case CBT_TREE_HOOK:
        rc = e->path->on_custom ? e->path->on_custom(e, ev) : CBT_OK;
        break;
    case CBT_TREE_POINT:
        s = ev->session_len ? sess_find(e, ev, &k) : NULL;
        rc = on_point(e, s, rule->point, ev);
        break;
    case CBT_TREE_ROOT_END:
        s = sess_find(e, ev, &k);
        if (!s) {
            INC(request_end_unknown);
            break;
        }
        rc = on_root_end(e, s, ev);
        break;
    case CBT_TREE_END:
        s = sess_find(e, ev, &k);
        if (!s) {
            INC(unmatched_end);
            rc = CBT_ERR_UNMATCHED;
            break;
        }
        rc = on_end(e, s, rule->arg, ev);
        break;
    default: /* ROOT_START, SUBMIT, START: they may begin a session */
        s = sess_find(e, ev, &k);
        if (!s && !(s = sess_create(e, ev, &k))) {
            rc = CBT_ERR_FULL;
            break;
        }
        if (rule->act == CBT_TREE_ROOT_START)
            rc = on_root_start(e, s, ev);
        else if (rule->act == CBT_TREE_SUBMIT)
            rc = on_submit(e, s, rule->arg);
        else
            rc = on_start(e, s, rule->arg, ev);
        break;
    }
    /* the handlers may have freed s (a failed root start) */
    if (s && s->id_len && s->list != L_NONE) {
        uint64_t before = s->last_ts;
        s->last_ts = e->now;
        sweep_children(e, s, before);
        place(e, s);
        maybe_free(e, s);
    }
    /* open requests; closed ones kept for late children are not counted */
    atomic_store_explicit(&e->c.sessions_live, e->len[L_BUSY], memory_order_relaxed);
    return rc;
}

static void tree_on_shutdown(void *ctx, cbt_tracer *t, uint64_t now_ns)
{
    cbt_tree *e = ctx;
    e->t = t;
    for (int l = L_BUSY; l <= L_CLOSED; l++)
        while (e->head[l] != NIL) {
            cbt_tree_session *s = &e->pool[e->head[l]];
            end_all(e, s, now_ns, NULL);
            sess_free(e, s);
        }
    if (e->path->on_shutdown)
        e->path->on_shutdown(e, now_ns);
    atomic_store_explicit(&e->c.sessions_live, 0, memory_order_relaxed);
}

static void tree_destroy(void *ctx)
{
    cbt_tree *e = ctx;
    if (e->path->on_destroy)
        e->path->on_destroy(e);
    cbt_strtab_free(&e->index);
    free(e->pool);
    free(e->free_ids);
    free(e);
}

/* ---- options ------------------------------------------------------------------ */

static cbt_status env_ms(const char *var, uint32_t field, uint32_t dflt, uint64_t *out_ns)
{
    uint32_t ms = field;
    if (ms == 0) {
        const char *v = getenv(var);
        if (v && *v) {
            if (strcmp(v, "off") == 0) {
                ms = CBT_TREE_OFF;
            } else {
                char *end = NULL;
                unsigned long long x = strtoull(v, &end, 10);
                if (*v < '0' || *v > '9' || *end || x == 0 || x >= CBT_TREE_OFF) {
                    fprintf(stderr, "cbt: %s=\"%s\": want milliseconds in [1, %u] or \"off\"\n",
                            var, v, CBT_TREE_OFF - 1);
                    return CBT_ERR_INVAL;
                }
                ms = (uint32_t)x;
            }
        } else {
            ms = dflt;
        }
    }
    *out_ns = ms == CBT_TREE_OFF ? UINT64_MAX : (uint64_t)ms * 1000000ull;
    return CBT_OK;
}

cbt_status cbt_tree_opts_resolve_(const cbt_tree_options *o, bool root_end, cbt_tree_opts *out)
{
    cbt_tree_options d;
    memset(&d, 0, sizeof d);
    if (o) { /* the caller's fields, as far as its size says (internal/abi.h) */
        cbt_status rc = cbt_abi_in_(&d, sizeof d, o, CBT_TREE_OPTIONS_VERSION);
        if (rc)
            return rc;
    }
    if (d.max_sessions > (1u << 22)) {
        fprintf(stderr, "cbt: request tree: max_sessions %u is more than 2^22\n", d.max_sessions);
        return CBT_ERR_INVAL;
    }
    out->max_sessions = d.max_sessions ? d.max_sessions : 4096;
    out->root_end = d.root_end;
    if (d.root_end > CBT_ROOT_END_TRANSFER) {
        fprintf(stderr, "cbt: request tree: root_end %u is not a cbt_root_end\n", d.root_end);
        return CBT_ERR_INVAL;
    }
    if (!root_end) {
        out->root_end = CBT_ROOT_END_TRANSFER; /* fixed by the path */
    } else if (d.root_end == CBT_ROOT_END_DEFAULT) {
        const char *v = getenv("CBT_MP_ROOT_END");
        if (!v || !*v || strcmp(v, "request_end") == 0) {
            out->root_end = CBT_ROOT_END_REQUEST;
        } else if (strcmp(v, "transfer_end") == 0) {
            out->root_end = CBT_ROOT_END_TRANSFER;
        } else {
            fprintf(stderr, "cbt: CBT_MP_ROOT_END=\"%s\": want request_end or transfer_end\n", v);
            return CBT_ERR_INVAL;
        }
    }
    cbt_status rc = env_ms("CBT_SESSION_IDLE_MS", d.idle_ms, 60000, &out->idle_ns);
    if (rc)
        return rc;
    rc = env_ms("CBT_LATE_GRACE_MS", d.grace_ms, 10000, &out->grace_ns);
    if (rc)
        return rc;
    if (out->grace_ns == UINT64_MAX)
        out->grace_ns = 0; /* "off": no late window */
    if (d.token_trace > CBT_TOKEN_TRACE_OFF) {
        fprintf(stderr, "cbt: request tree: token_trace %u is not a cbt_token_trace\n",
                d.token_trace);
        return CBT_ERR_INVAL;
    }
    out->token_trace = d.token_trace == CBT_TOKEN_TRACE_ON;
    if (d.token_trace == CBT_TOKEN_TRACE_DEFAULT) {
        const char *v = getenv("CBT_TOKEN_TRACE");
        if (v && (strcmp(v, "1") == 0 || strcmp(v, "on") == 0)) {
            out->token_trace = true;
        } else if (v && *v && strcmp(v, "0") != 0 && strcmp(v, "off") != 0) {
            fprintf(stderr, "cbt: CBT_TOKEN_TRACE=\"%s\": want 1, on, 0 or off\n", v);
            return CBT_ERR_INVAL;
        }
    }
    return CBT_OK;
}

cbt_status cbt_tree_subscriber_(const cbt_tree_path *path, const cbt_tree_opts *opts, void *pctx,
                                const cbt_event_type *extra, uint32_t n_extra, cbt_subscriber *out)
{
    cbt_tree *e = calloc(1, sizeof *e);
    if (!e)
        return CBT_ERR_NOMEM;
    e->path = path;
    e->o = *opts;
    e->pctx = pctx;
    for (int l = 0; l < 3; l++)
        e->head[l] = e->tail[l] = NIL;
    e->pool = calloc(opts->max_sessions, sizeof *e->pool);
    e->free_ids = calloc(opts->max_sessions, sizeof *e->free_ids);
    cbt_status rc = (!e->pool || !e->free_ids) ? CBT_ERR_NOMEM
                                               : cbt_strtab_init_sessions(&e->index, opts->max_sessions,
                                                                          sizeof(uint32_t));
    if (rc) {
        free(e->pool);
        free(e->free_ids);
        free(e);
        return rc;
    }
    for (uint32_t i = opts->max_sessions; i > 0; i--)
        e->free_ids[e->n_free++] = i - 1;
    for (uint32_t i = 0; i < CBT_EVENT_TYPES_MAX; i++)
        e->rule_of[i] = -1;
    cbt_subscriber sub;
    cbt_subscriber_init(&sub, path->name, e, tree_on_event, tree_on_shutdown, tree_destroy);
    for (uint32_t i = 0; i < path->n_rules; i++) {
        e->rule_of[path->rules[i].type] = (int16_t)i;
        cbt_subscriber_want(&sub, path->rules[i].type);
    }
    for (uint32_t i = 0; i < n_extra; i++) {
        if (extra[i] < CBT_EVENT_TYPES_MAX && e->rule_of[extra[i]] < 0)
            e->rule_of[extra[i]] = RULE_EXTRA;
        cbt_subscriber_want(&sub, extra[i]);
    }
    cbt_abi_out_(out, &sub, sizeof sub, CBT_SUBSCRIBER_VERSION);
    return CBT_OK;
}

cbt_status cbt_tree_find_(const cbt_subscriber *sub, const cbt_tree_path *path, cbt_tree **out)
{
    void *ctx = NULL;
    cbt_status rc = cbt_find_subscriber_named_(sub, tree_on_event, path->name, &ctx);
    if (rc)
        return rc;
    cbt_tree *e = ctx;
    if (e->path != path)
        return CBT_ERR_INVAL;
    *out = e;
    return CBT_OK;
}

cbt_status cbt_tree_stats_fill_(const cbt_subscriber *sub, const cbt_tree_path *path,
                                cbt_tree_stats *full)
{
    cbt_tree *e = NULL;
    cbt_status rc = cbt_tree_find_(sub, path, &e);
    if (rc)
        return rc;
    const cbt_tree_counters *c = &e->c;
    memset(full, 0, sizeof *full);
    full->version = CBT_TREE_STATS_VERSION;
    full->size = (uint32_t)sizeof *full;
#define R(f) atomic_load_explicit(&c->f, memory_order_relaxed)
    full->roots_opened = R(roots_opened);
    full->roots_lazy = R(roots_lazy);
    full->roots_closed = R(roots_closed);
    full->roots_deferred = R(roots_deferred);
    full->children_opened = R(children_opened);
    full->children_closed = R(children_closed);
    full->unmatched_end = R(unmatched_end);
    full->duplicate_request_end = R(duplicate_request_end);
    full->request_end_unknown = R(request_end_unknown);
    full->sessions_full = R(sessions_full);
    full->children_full = R(children_full);
    full->incomplete_at_shutdown = R(incomplete_at_shutdown);
    full->sessions_open = R(sessions_live);
    full->late_children = R(late_children);
    full->evicted_idle = R(evicted_idle);
    full->evicted_full = R(evicted_full);
    full->evicted_span_pool = R(evicted_span_pool);
    full->children_evicted_idle = R(children_evicted_idle);
    full->children_evicted_full = R(children_evicted_full);
    full->sessions_reused = R(sessions_reused);
    full->point_events = R(point_events);
    full->no_root = R(no_root);
    full->roots_remote = R(roots_remote);
    full->sampled_out = R(sampled_out);
    full->sibling_request_end = R(sibling_request_end);
#undef R
    if (path->on_stats)
        path->on_stats(e, full);
    return CBT_OK;
}

cbt_status cbt_tree_stats_get_(const cbt_subscriber *sub, const cbt_tree_path *path,
                               cbt_tree_stats *caller)
{
    cbt_status rc = cbt_abi_out_check_(caller);
    if (rc)
        return rc;
    cbt_tree_stats full;
    if ((rc = cbt_tree_stats_fill_(sub, path, &full)))
        return rc;
    cbt_abi_out_(caller, &full, sizeof full, CBT_TREE_STATS_VERSION);
    return CBT_OK;
}

void *cbt_tree_pctx(cbt_tree *e) { return e->pctx; }
cbt_tracer *cbt_tree_tracer(cbt_tree *e) { return e->t; }
cbt_span *cbt_tree_root(cbt_tree_session *s) { return s && s->root_open ? s->root : NULL; }
int64_t *cbt_tree_scratch(cbt_tree_session *s) { return s->scratch; }

cbt_span *cbt_tree_newest(cbt_tree_session *s, int op)
{
    if (!s)
        return NULL;
    int i = newest_of(s, op);
    return i >= 0 ? s->children[i].span : NULL;
}

const cbt_span_ctx *cbt_tree_anchor_of(cbt_tree *e, const char *session, size_t len, bool *late)
{
    *late = false;
    if (!len)
        return NULL;
    uint64_t base = cbt_strtab_base(session, len);
    uint32_t *ix = cbt_strtab_find_h(&e->index, session, len, 0, cbt_strtab_mix(base, 0));
    if (!ix)
        return NULL;
    cbt_tree_session *s = &e->pool[*ix];
    if ((!s->root_open && !s->closed) || s->sampled_out || !cbt_span_ctx_valid(&s->anchor))
        return NULL;
    if (s->closed) {
        *late = true;
        INC(late_children);
    }
    return &s->anchor;
}

bool cbt_tree_registry_anchor_(cbt_tracer *t, const char *session, size_t len, cbt_name logical,
                               cbt_span_ctx *out)
{
    if (!len || len >= CBT_SESSION_MAX || session[len] != '\0' ||
        cbt_registry_get(t, session, logical, out) != CBT_OK)
        return false;
    /* a trace-id-only anchor is registered under a marker span id
     * (with_marker_id): a child of it is a root of that trace */
    cbt_span_ctx bare = *out;
    memset(bare.span_id, 0, 8);
    cbt_span_ctx marked = with_marker_id(bare);
    if (memcmp(marked.span_id, out->span_id, 8) == 0)
        memset(out->span_id, 0, 8);
    return true;
}

int cbt_tree_sub_opts_(const cbt_subscriber *s, cbt_tree_opts *out)
{
    if (!s || s->on_event != tree_on_event || !s->ctx)
        return 0;
    *out = ((const cbt_tree *)s->ctx)->o;
    return 1;
}
