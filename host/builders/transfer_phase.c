/* host/builders/transfer_phase.c — owns the transfer-phase spans
 * (transfer.kernel_interval, transfer.staging) of LMCache 0.5.6's
 * TransferPhaseTracingSubscriber; the rules are in internal/xfer.h.
 *
 * State: one bounded table (internal/strtab.h) from transfer key to a
 * transfer: the captured parent, its session, direction, capture time,
 * whether its END came, and per-phase totals. A key of up to
 * CBT_SESSION_MAX - 1 bytes is the table's key as it is (tag XK_PLAIN);
 * a longer one is keyed by two 64-bit hashes of all its bytes (XK_HASHED).
 * The transfers a samples batch named are listed (XFER_TOUCHED_MAX keys)
 * so the batch end visits only them; past the list the batch end scans the
 * table for the `touched` mark. Expiry scans the table only when the
 * oldest capture may have passed the TTL (`oldest_ns` is a lower bound,
 * made exact by each scan). Harvester thread only; the counters are
 * atomics so other threads may read them.
 */
#include "internal/xfer.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "internal/hash.h"
#include "internal/strtab.h"

#define XFER_DEFAULT_TTL_NS (120ull * 1000000000ull)
#define XFER_TOUCHED_MAX 32

enum { XK_PLAIN = 0, XK_HASHED = 1 };
enum { XFER_PHASES = 2 };

static const cbt_name k_phase_span[XFER_PHASES] = {CBT_N_TRANSFER_KERNEL_INTERVAL,
                                                   CBT_N_TRANSFER_STAGING};

/* A transfer key as the table holds it. */
typedef struct xkey {
    uint16_t tag;
    uint8_t len;
    char s[CBT_SESSION_MAX];
} xkey;

typedef struct xphase {
    double first_start_s, last_end_s;
    double elapsed_s;
    int64_t nbytes;
    int64_t num_steps;
    uint8_t seen;
    uint8_t order; /* which phase was seen first: breaks start-time ties */
} xphase;

typedef struct xfer_entry {
    cbt_span_ctx parent;
    uint64_t captured_ns;
    int64_t device_index; /* -1 until a sample says */
    xphase phase[XFER_PHASES];
    uint8_t n_seen;
    uint8_t direction;
    uint8_t ended;
    uint8_t touched; /* named by the current batch */
    uint8_t session_len;
    char session[CBT_SESSION_MAX];
} xfer_entry;

struct cbt_xfer {
    cbt_strtab tab;
    uint64_t ttl_ns;
    uint64_t oldest_ns; /* <= every held capture time; UINT64_MAX when empty */
    uint32_t n_touched;
    bool touched_overflow;
    xkey touched[XFER_TOUCHED_MAX];
    struct {
        _Atomic uint64_t spans, samples, samples_skipped, parents_expired, parents_full,
            unknown_key;
    } c;
};

#define INC(f) atomic_fetch_add_explicit(&x->c.f, 1, memory_order_relaxed)

static void key_of(const char *k, size_t n, xkey *out)
{
    if (n < CBT_SESSION_MAX) {
        out->tag = XK_PLAIN;
        out->len = (uint8_t)n;
        if (n)
            memcpy(out->s, k, n);
        return;
    }
    uint64_t h[2] = {cbt_hash_bytes(k, n, 0x7f4a7c15u), cbt_hash_bytes(k, n, 0x9e3779b9u)};
    out->tag = XK_HASHED;
    out->len = (uint8_t)sizeof h;
    memcpy(out->s, h, sizeof h);
}

static xfer_entry *find(cbt_xfer *x, const xkey *k)
{
    return cbt_strtab_find(&x->tab, k->s, k->len, k->tag);
}

cbt_status cbt_xfer_create(uint32_t max_transfers, uint64_t ttl_ns, cbt_xfer **out)
{
    if (!out)
        return CBT_ERR_INVAL;
    *out = NULL;
    cbt_xfer *x = calloc(1, sizeof *x);
    if (!x)
        return CBT_ERR_NOMEM;
    cbt_status st = cbt_strtab_init_sessions(&x->tab, max_transfers, sizeof(xfer_entry));
    if (st != CBT_OK) {
        free(x);
        return st;
    }
    x->ttl_ns = ttl_ns ? ttl_ns : XFER_DEFAULT_TTL_NS;
    x->oldest_ns = UINT64_MAX;
    *out = x;
    return CBT_OK;
}

void cbt_xfer_destroy(cbt_xfer *x)
{
    if (!x)
        return;
    cbt_strtab_free(&x->tab);
    free(x);
}

uint32_t cbt_xfer_count(const cbt_xfer *x) { return x ? x->tab.count : 0; }

/* ---- expiry ----------------------------------------------------------------- */

static bool expired(const cbt_xfer *x, uint64_t captured, uint64_t now)
{
    return now > captured && now - captured > x->ttl_ns;
}

/* Drop the transfers captured more than the TTL before `now`. */
static void expire(cbt_xfer *x, uint64_t now)
{
    if (x->tab.count == 0 || !expired(x, x->oldest_ns, now))
        return;
    uint64_t oldest = UINT64_MAX;
    for (uint32_t i = 0; i <= x->tab.mask;) {
        xfer_entry *e = cbt_strtab_slot(&x->tab, i);
        if (e && expired(x, e->captured_ns, now)) {
            cbt_strtab_remove(&x->tab, e);
            INC(parents_expired);
            continue; /* a later entry may have moved into slot i */
        }
        if (e && e->captured_ns < oldest)
            oldest = e->captured_ns;
        i++;
    }
    x->oldest_ns = oldest;
}

/* ---- capture and END ---------------------------------------------------------- */

void cbt_xfer_capture(cbt_xfer *x, const char *key, size_t key_len, const cbt_span_ctx *parent,
                      int direction, const char *session, size_t session_len, uint64_t ts_ns)
{
    if (!x || !key || !key_len || !session || !session_len || !cbt_span_ctx_valid(parent) ||
        (direction != CBT_XFER_H2D && direction != CBT_XFER_D2H))
        return;
    xkey k;
    key_of(key, key_len, &k);
    xfer_entry *e = cbt_strtab_upsert(&x->tab, k.s, k.len, k.tag, NULL);
    if (!e) {
        expire(x, ts_ns); /* make room from what has expired, then try once more */
        e = cbt_strtab_upsert(&x->tab, k.s, k.len, k.tag, NULL);
    }
    if (!e) {
        INC(parents_full);
        return;
    }
    /* a new capture of a known key replaces that transfer, as LMCache's dict */
    memset(e, 0, sizeof *e);
    e->parent = *parent;
    e->captured_ns = ts_ns;
    e->device_index = -1;
    e->direction = (uint8_t)direction;
    size_t sl = session_len < CBT_SESSION_MAX - 1 ? session_len : CBT_SESSION_MAX - 1;
    memcpy(e->session, session, sl);
    e->session_len = (uint8_t)sl;
    if (ts_ns < x->oldest_ns)
        x->oldest_ns = ts_ns;
}

void cbt_xfer_ended(cbt_xfer *x, const char *key, size_t key_len, uint64_t ts_ns)
{
    if (!x)
        return;
    expire(x, ts_ns);
    if (!key || !key_len)
        return;
    xkey k;
    key_of(key, key_len, &k);
    xfer_entry *e = find(x, &k);
    if (e)
        e->ended = 1;
}

/* ---- samples -------------------------------------------------------------------- */

/* Remember that the current batch named the transfer `e` (key `k`). */
static void touch(cbt_xfer *x, xfer_entry *e, const xkey *k)
{
    if (e->touched)
        return;
    e->touched = 1;
    if (x->n_touched < XFER_TOUCHED_MAX)
        x->touched[x->n_touched++] = *k;
    else
        x->touched_overflow = true;
}

static bool sample_ok(const cbt_xfer_sample *s)
{
    if (!isfinite(s->start_s) || !isfinite(s->end_s) || !isfinite(s->elapsed_ms))
        return false;
    if (s->start_s <= 0 || s->end_s < s->start_s)
        return false;
    return (s->phase == CBT_XFER_KERNEL || s->phase == CBT_XFER_STAGING) &&
           (s->direction == CBT_XFER_H2D || s->direction == CBT_XFER_D2H);
}

void cbt_xfer_add_sample(cbt_xfer *x, const cbt_xfer_sample *s, uint64_t now_ns)
{
    if (!x || !s)
        return;
    expire(x, now_ns);
    if (!sample_ok(s) || (!s->key && s->key_len)) {
        INC(samples_skipped);
        return;
    }
    xkey k;
    key_of(s->key, s->key_len, &k);
    xfer_entry *e = s->key_len ? find(x, &k) : NULL;
    if (!e) {
        INC(unknown_key);
        return;
    }
    if (e->direction != s->direction) { /* a retrieve's phase never hangs under a store */
        INC(samples_skipped);
        return;
    }
    xphase *p = &e->phase[s->phase];
    if (!p->seen) {
        p->seen = 1;
        p->order = e->n_seen++;
        p->first_start_s = s->start_s;
        p->last_end_s = s->end_s;
    }
    if (s->start_s < p->first_start_s)
        p->first_start_s = s->start_s;
    if (s->end_s > p->last_end_s)
        p->last_end_s = s->end_s;
    p->elapsed_s += s->elapsed_ms / 1e3;
    p->nbytes += s->nbytes;
    p->num_steps++;
    if (s->has_device_index)
        e->device_index = s->device_index;
    INC(samples);
    touch(x, e, &k);
}

/* ---- emission ------------------------------------------------------------------- */

/* Unix seconds to ns, truncated as LMCache's int(s * 1e9); clamped. */
static uint64_t s_to_ns(double s)
{
    if (!(s > 0))
        return 0;
    if (s >= 18446744073.0)
        return UINT64_MAX;
    return (uint64_t)(s * 1e9);
}

/* The stacked phase spans of `e`, children of its captured parent. */
static void emit(cbt_xfer *x, cbt_tracer *t, const xfer_entry *e)
{
    int order[XFER_PHASES], n = 0;
    for (int ph = 0; ph < XFER_PHASES; ph++)
        if (e->phase[ph].seen)
            order[n++] = ph;
    if (n == 2) {
        const xphase *a = &e->phase[order[0]], *b = &e->phase[order[1]];
        if (b->first_start_s < a->first_start_s ||
            (b->first_start_s == a->first_start_s && b->order < a->order)) {
            int tmp = order[0];
            order[0] = order[1];
            order[1] = tmp;
        }
    }
    if (n == 0)
        return;
    double cursor_s = e->phase[order[0]].first_start_s;
    for (int i = 0; i < n; i++) {
        int ph = order[i];
        const xphase *p = &e->phase[ph];
        uint64_t start_ns = s_to_ns(cursor_s);
        cursor_s += p->elapsed_s;
        cbt_span *sp = cbt_span_start(t, k_phase_span[ph], CBT_SPAN_KIND_INTERNAL, &e->parent,
                                      start_ns);
        if (!sp)
            continue; /* the pool is full: counted by the tracer */
        cbt_span_set_str(sp, CBT_N_SESSION_ID, e->session, e->session_len);
        cbt_span_set_i64(sp, CBT_N_DEVICE_INDEX, e->device_index);
        cbt_span_set_i64(sp, CBT_N_NUM_STEPS, p->num_steps);
        cbt_span_set_i64(sp, CBT_N_NBYTES, p->nbytes);
        cbt_span_set_f64(sp, CBT_N_ELAPSED_SECONDS, p->elapsed_s);
        cbt_span_set_f64(sp, CBT_N_FIRST_START_S, p->first_start_s);
        cbt_span_set_f64(sp, CBT_N_LAST_END_S, p->last_end_s);
        /* staging only: the kernel phase's ratio would read SM wait as a rate */
        if (ph == CBT_XFER_STAGING && p->elapsed_s > 0)
            cbt_span_set_f64(sp, CBT_N_THROUGHPUT_GBPS, (double)p->nbytes / p->elapsed_s / 1e9);
        if (!e->ended)
            sp->flags |= CBT_SPANF_INCOMPLETE;
        cbt_span_end(t, sp, s_to_ns(cursor_s));
        INC(spans);
    }
}

/* A batch named key `k`: emit and forget its transfer when it has ended,
 * else clear the batch's mark. */
static void settle(cbt_xfer *x, cbt_tracer *t, const xkey *k)
{
    xfer_entry *e = find(x, k);
    if (!e)
        return;
    e->touched = 0;
    if (!e->ended)
        return;
    emit(x, t, e);
    cbt_strtab_remove(&x->tab, e);
}

void cbt_xfer_batch_end(cbt_xfer *x, cbt_tracer *t, const char *ended_key, size_t ended_len,
                        uint64_t now_ns)
{
    if (!x)
        return;
    expire(x, now_ns);
    for (uint32_t i = 0; i < x->n_touched; i++)
        settle(x, t, &x->touched[i]);
    if (x->touched_overflow) {
        for (uint32_t i = 0; i <= x->tab.mask;) {
            xfer_entry *e = cbt_strtab_slot(&x->tab, i);
            if (e && e->touched && e->ended) {
                emit(x, t, e);
                cbt_strtab_remove(&x->tab, e);
                continue; /* a later entry may have moved into slot i */
            }
            if (e)
                e->touched = 0;
            i++;
        }
    }
    x->n_touched = 0;
    x->touched_overflow = false;
    if (ended_key && ended_len) {
        xkey k;
        key_of(ended_key, ended_len, &k);
        settle(x, t, &k);
    }
}

/* ---- events ---------------------------------------------------------------------- */

/* A number: an int or a double value. */
static bool num_of(const cbt_event *ev, cbt_name key, double *out)
{
    const cbt_meta *m = cbt_event_find(ev, key);
    if (m && m->type == CBT_META_F64)
        *out = m->v.f64;
    else if (m && m->type == CBT_META_I64)
        *out = (double)m->v.i64;
    else
        return false;
    return true;
}

/* An int value; `*present` says whether the key was there at all. */
static bool int_of(const cbt_event *ev, cbt_name key, int64_t *out, bool *present)
{
    const cbt_meta *m = cbt_event_find(ev, key);
    *present = m != NULL;
    if (!m || m->type != CBT_META_I64)
        return false;
    *out = m->v.i64;
    return true;
}

cbt_status cbt_xfer_on_event(cbt_xfer *x, cbt_tracer *t, const cbt_event *ev)
{
    if (!x || !ev || ev->type != CBT_EV_MP_TRANSFER_PHASE_SAMPLES)
        return CBT_ERR_INVAL;
    if (!cbt_event_find(ev, CBT_N_PHASE)) {
        size_t len = 0;
        const char *k = cbt_event_get_str(ev, CBT_N_ENDED_TRANSFER_KEY, &len);
        cbt_xfer_batch_end(x, t, k, k ? len : 0, ev->ts);
        return CBT_OK;
    }
    cbt_xfer_sample s;
    memset(&s, 0, sizeof s);
    bool present, ok = true;
    ok &= int_of(ev, CBT_N_PHASE, &s.phase, &present);
    ok &= int_of(ev, CBT_N_DIRECTION, &s.direction, &present);
    ok &= num_of(ev, CBT_N_ELAPSED_MS, &s.elapsed_ms);
    ok &= num_of(ev, CBT_N_START_TIME_S, &s.start_s);
    ok &= num_of(ev, CBT_N_END_TIME_S, &s.end_s);
    s.key = cbt_event_get_str(ev, CBT_N_TRANSFER_KEY, &s.key_len);
    ok &= s.key != NULL;
    if (!int_of(ev, CBT_N_NBYTES, &s.nbytes, &present) && present)
        ok = false;
    s.has_device_index = int_of(ev, CBT_N_DEVICE_INDEX, &s.device_index, &present);
    if (!s.has_device_index && present)
        ok = false;
    if (!ok) { /* LMCache's "wrong shape" */
        expire(x, ev->ts);
        atomic_fetch_add_explicit(&x->c.samples_skipped, 1, memory_order_relaxed);
        return CBT_OK;
    }
    cbt_xfer_add_sample(x, &s, ev->ts);
    return CBT_OK;
}

/* ---- shutdown and stats ------------------------------------------------------------ */

void cbt_xfer_shutdown(cbt_xfer *x, cbt_tracer *t)
{
    if (!x)
        return;
    for (uint32_t i = 0; i <= x->tab.mask; i++) {
        xfer_entry *e = cbt_strtab_slot(&x->tab, i);
        if (e)
            emit(x, t, e);
    }
    cbt_strtab_clear(&x->tab);
    x->n_touched = 0;
    x->touched_overflow = false;
    x->oldest_ns = UINT64_MAX;
}

void cbt_xfer_stats_get(const cbt_xfer *x, cbt_xfer_stats *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (!x)
        return;
    cbt_xfer *m = (cbt_xfer *)x; /* atomic loads of a const object */
#define R(f) out->f = atomic_load_explicit(&m->c.f, memory_order_relaxed)
    R(spans);
    R(samples);
    R(samples_skipped);
    R(parents_expired);
    R(parents_full);
    R(unknown_key);
#undef R
}
