/* host/record/replay.c — owns replaying a recorded LMCT file (cbt/replay.h):
 * check its header, rebuild the configuration that shaped its spans, and
 * feed its records through the builders of a replay tracer, on the caller's
 * thread, exactly where the live harvester consumed them.
 *
 * Why the spans come out the same: the file holds every input the builders
 * took (events with their resolved times, ring records, the clock maps that
 * turn device times into unix ns, the harvester's round times, the stop),
 * in the order they took them; the span-id generator starts from the
 * recorded seed and is drawn in the same order; the configuration is the
 * recorded one, checked by its digest. docs/recording.md lists each record.
 *
 * The configuration JSON is cbt's own (recorder.c writes it): a flat object
 * whose shape this file knows; a key it does not know means this build
 * cannot rebuild it (CBT_ERR_REPLAY_MISMATCH unless forced).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cbt.h"
#include "cbt/array.h"
#include "cbt/cb.h"
#include "cbt/lmct.h"
#include "cbt/replay.h"
#include "internal/abi.h"
#include "internal/recorder.h"
#include "internal/sha256.h"
#include "internal/ring_host.h"
#include "internal/tracer.h"
#include "internal/reqtree.h"

#define BUILDERS_MAX 8u
#define BATCH 1024u /* records replayed under one hold of the tracer's lock */
#define PACE_STEP_MAX_S 10.0 /* --speed: a longer recorded pause is cut to this */
#define GAPS_SHOWN 5u        /* gap records named on the log (all are counted) */
/* Sizes past these need force: a small file could otherwise ask a replay for
 * gigabytes (the live run chose them; a replay of a file from elsewhere may
 * not want to) */
#define LARGE_SESSIONS (1u << 20)
#define LARGE_REGISTRY (1u << 20)

typedef struct rp_builder {
    char name[16];
    int tree;
    cbt_tree_options o;
} rp_builder;

struct cbt_replay {
    cbt_lmct_reader *rd;
    cbt_replay_options o;
    char path[512];
    uint64_t file_size;
    char *json; /* the header's configuration */
    uint64_t seed[4];
    int has_seed;
    uint32_t span_pool, registry_capacity;
    int host_ring, cuda_ring;
    rp_builder b[BUILDERS_MAX];
    uint32_t n_b;
    int ran;
    int stop_seen; /* o.stop said stop */
    uint64_t gaps_said; /* gap lines written to the log (the first GAPS_SHOWN) */
    /* an event's array elements, which its values borrow until its
     * dispatch returns (grown; bounded by the frame: an element takes a
     * byte of it at least) */
    void *arr;
    size_t arr_cap;
    char msg[512];
};

static _Thread_local char g_open_msg[512];

static void say(char *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(char *buf, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, 512, fmt, ap);
    va_end(ap);
}

static FILE *logf_(const cbt_replay *r) { return r->o.log ? r->o.log : stderr; }

cbt_status cbt_replay_options_default_into(cbt_replay_options *caller)
{
    cbt_replay_options d;
    memset(&d, 0, sizeof d);
    d.version = CBT_REPLAY_OPTIONS_VERSION;
    d.size = sizeof d;
    return cbt_abi_defaults_(caller, &d, sizeof d);
}

/* ---- the configuration's JSON (recorder.c's shape) ---------------------------- */

typedef struct jp {
    const char *p, *end;
    char *err; /* 512 bytes */
} jp;

static void ws(jp *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\t' || *j->p == '\r'))
        j->p++;
}

static int lit(jp *j, char c)
{
    ws(j);
    if (j->p < j->end && *j->p == c) {
        j->p++;
        return 1;
    }
    return 0;
}

/* A string without escapes (cbt writes none here) into out[cap]. */
static int str(jp *j, char *out, size_t cap)
{
    if (!lit(j, '"'))
        return 0;
    size_t n = 0;
    while (j->p < j->end && *j->p != '"') {
        if (*j->p == '\\' || n + 1 >= cap)
            return 0;
        out[n++] = *j->p++;
    }
    if (j->p >= j->end)
        return 0;
    j->p++;
    out[n] = '\0';
    return 1;
}

static int num(jp *j, uint64_t *v)
{
    ws(j);
    if (j->p >= j->end || *j->p < '0' || *j->p > '9')
        return 0;
    uint64_t x = 0;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        if (x > (UINT64_MAX - 9) / 10)
            return 0;
        x = x * 10 + (uint64_t)(*j->p++ - '0');
    }
    *v = x;
    return 1;
}

static int boolean(jp *j, int *v)
{
    ws(j);
    if (j->end - j->p >= 4 && memcmp(j->p, "true", 4) == 0) {
        j->p += 4, *v = 1;
        return 1;
    }
    if (j->end - j->p >= 5 && memcmp(j->p, "false", 5) == 0) {
        j->p += 5, *v = 0;
        return 1;
    }
    return 0;
}

static uint32_t ms_field(uint64_t v) { return v >= CBT_TREE_OFF ? CBT_TREE_OFF : (uint32_t)v; }

static int builder(jp *j, rp_builder *b)
{
    memset(b, 0, sizeof *b);
    b->o.version = CBT_TREE_OPTIONS_VERSION;
    b->o.size = sizeof b->o;
    /* a recording made before token traces (LMCache 0.5.7) built none: off,
     * whatever this process's CBT_TOKEN_TRACE says */
    b->o.token_trace = CBT_TOKEN_TRACE_OFF;
    if (!lit(j, '{'))
        return 0;
    char key[32];
    do {
        uint64_t v;
        char s[32];
        if (!str(j, key, sizeof key) || !lit(j, ':'))
            return 0;
        if (strcmp(key, "name") == 0) {
            if (!str(j, b->name, sizeof b->name))
                return 0;
        } else if (strcmp(key, "max_sessions") == 0 && num(j, &v) && v <= (1u << 22)) {
            b->tree = 1, b->o.max_sessions = (uint32_t)v;
        } else if (strcmp(key, "idle_ms") == 0 && num(j, &v)) {
            b->o.idle_ms = ms_field(v ? v : 1);
        } else if (strcmp(key, "grace_ms") == 0 && num(j, &v)) {
            b->o.grace_ms = ms_field(v ? v : CBT_TREE_OFF);
        } else if (strcmp(key, "token_trace") == 0 && num(j, &v) && v <= 1) {
            b->o.token_trace = v ? CBT_TOKEN_TRACE_ON : CBT_TOKEN_TRACE_OFF;
        } else if (strcmp(key, "root_end") == 0 && str(j, s, sizeof s)) {
            if (strcmp(s, "request_end") == 0)
                b->o.root_end = CBT_ROOT_END_REQUEST;
            else if (strcmp(s, "transfer_end") == 0)
                b->o.root_end = CBT_ROOT_END_TRANSFER;
            else
                return 0;
        } else {
            say(j->err, "the recorded configuration has a builder key \"%s\" this build does "
                        "not know", key);
            return 0;
        }
    } while (lit(j, ','));
    return lit(j, '}');
}

static int parse_config(cbt_replay *r, char *err)
{
    jp j = {r->json, r->json + strlen(r->json), err};
    err[0] = '\0';
    if (!*r->json) {
        say(err, "the file records no configuration (nothing was recorded)");
        return 0;
    }
    if (!lit(&j, '{'))
        goto bad;
    char key[32], s[32];
    do {
        uint64_t v;
        if (!str(&j, key, sizeof key) || !lit(&j, ':'))
            goto bad;
        if (strcmp(key, "producer") == 0 || strcmp(key, "level") == 0) {
            if (!str(&j, s, sizeof s))
                goto bad;
        } else if (strcmp(key, "span_pool") == 0 && num(&j, &v) && v >= 1 && v <= 65535) {
            r->span_pool = (uint32_t)v;
        } else if (strcmp(key, "registry_capacity") == 0 && num(&j, &v) && v >= 2 &&
                   v <= (1u << 24) && (v & (v - 1)) == 0) {
            r->registry_capacity = (uint32_t)v;
        } else if (strcmp(key, "rings") == 0) {
            if (!lit(&j, '{'))
                goto bad;
            do {
                int b;
                if (!str(&j, s, sizeof s) || !lit(&j, ':') || !boolean(&j, &b))
                    goto bad;
                if (strcmp(s, "host") == 0)
                    r->host_ring = b;
                else if (strcmp(s, "cuda") == 0)
                    r->cuda_ring = b;
                else
                    goto bad;
            } while (lit(&j, ','));
            if (!lit(&j, '}'))
                goto bad;
        } else if (strcmp(key, "builders") == 0) {
            if (!lit(&j, '['))
                goto bad;
            if (!lit(&j, ']')) {
                do {
                    if (r->n_b >= BUILDERS_MAX || !builder(&j, &r->b[r->n_b]))
                        goto bad;
                    r->n_b++;
                } while (lit(&j, ','));
                if (!lit(&j, ']'))
                    goto bad;
            }
        } else {
            if (!err[0])
                say(err, "the recorded configuration has a key \"%s\" this build does not know",
                    key);
            return 0;
        }
    } while (lit(&j, ','));
    if (lit(&j, '}') && (ws(&j), j.p == j.end) && r->span_pool && r->registry_capacity)
        return 1;
bad:
    if (!err[0])
        say(err, "the recorded configuration is not one this build can read, near byte %td",
            j.p - r->json);
    return 0;
}

/* ---- open ------------------------------------------------------------------- */

/* The value of the first entry named `key` among n map entries, or NULL:
 * the one lookup of level_meta, a record's args and their nested maps. */
static const cbt_lmct_value *kv_get(const cbt_lmct_kv *items, uint32_t n, const char *key)
{
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(items[i].key, key) == 0)
            return &items[i].value;
    return NULL;
}

static const cbt_lmct_value *meta_get(const cbt_lmct_header *h, const char *key)
{
    return kv_get(h->level_meta, h->level_meta_count, key);
}

static int meta_str(const cbt_lmct_header *h, const char *key, const char *want)
{
    const cbt_lmct_value *v = meta_get(h, key);
    return v && v->type == CBT_LMCT_STR && strlen(want) == v->v.s.len &&
           memcmp(v->v.s.ptr, want, v->v.s.len) == 0;
}

static cbt_status open_fail(cbt_replay *r, cbt_status st)
{
    snprintf(g_open_msg, sizeof g_open_msg, "%s", r->msg);
    cbt_lmct_reader_close(r->rd);
    free(r->json);
    free(r);
    return st;
}

/* A mismatch: said on the log; fatal unless forced. */
static int mismatch(cbt_replay *r, const char *what)
{
    say(r->msg, "%s: %s%s", r->path, what,
        r->o.force ? " (replaying anyway: --force)" : "; replay with force (--force) to go on");
    fprintf(logf_(r), "cbt replay: %s\n", r->msg);
    return !r->o.force;
}

cbt_status cbt_replay_open(const char *path, const cbt_replay_options *caller, cbt_replay **out)
{
    if (!out)
        return CBT_ERR_INVAL;
    *out = NULL;
    if (!path) {
        snprintf(g_open_msg, sizeof g_open_msg, "no file given");
        return CBT_ERR_INVAL;
    }
    cbt_replay *r = calloc(1, sizeof *r);
    if (!r)
        return CBT_ERR_NOMEM;
    r->o = cbt_replay_options_default();
    cbt_status st = caller ? cbt_abi_in_(&r->o, sizeof r->o, caller, CBT_REPLAY_OPTIONS_VERSION)
                           : CBT_OK;
    snprintf(r->path, sizeof r->path, "%s", path);
    if (st) {
        say(r->msg, "the replay options are from a newer cbt");
        return open_fail(r, st);
    }
    if (!(r->o.speed >= 0.0) || r->o.speed > 1e9) {
        say(r->msg, "speed %g: want 0 (as fast as possible) or a positive factor", r->o.speed);
        return open_fail(r, CBT_ERR_INVAL);
    }
    if ((st = cbt_lmct_reader_open(path, &r->rd))) {
        say(r->msg, "%s: %s", path,
            st == CBT_ERR_IO ? strerror(errno) : cbt_lmct_last_open_message());
        return open_fail(r, st);
    }
    struct stat sb;
    if (stat(path, &sb) == 0)
        r->file_size = (uint64_t)sb.st_size;
    const cbt_lmct_header *h = cbt_lmct_reader_header(r->rd);
    if (!h->level || strcmp(h->level, CBT_LMCT_LEVEL_GPU) != 0) {
        say(r->msg, "%s: a trace of level \"%s\"; cbt replays level \"gpu\" (LMCache's own "
                    "levels replay with LMCache)", path, h->level ? h->level : "");
        return open_fail(r, CBT_ERR_REPLAY_MISMATCH);
    }
    if (!meta_str(h, "producer", "cbt")) {
        say(r->msg, "%s: a level \"gpu\" trace that cbt did not write (no producer \"cbt\")", path);
        return open_fail(r, CBT_ERR_REPLAY_MISMATCH);
    }
    r->json = strdup(h->sm_config_json ? h->sm_config_json : "");
    if (!r->json)
        return open_fail(r, CBT_ERR_NOMEM);
    const cbt_lmct_value *seed = meta_get(h, "id_seed");
    if (seed && seed->type == CBT_LMCT_ARRAY && seed->v.array.count == 4) {
        r->has_seed = 1;
        for (int i = 0; i < 4; i++) {
            const cbt_lmct_value *x = &seed->v.array.items[i];
            if (x->type != CBT_LMCT_UINT)
                r->has_seed = 0;
            else
                r->seed[i] = x->v.u;
        }
        if ((r->seed[0] | r->seed[1] | r->seed[2] | r->seed[3]) == 0)
            r->has_seed = 0; /* the one state xoshiro cannot leave: it would never draw an id */
    }
    char digest[65], why[512];
    cbt_sha256_hex_(r->json, strlen(r->json), digest);
    if (!r->has_seed && mismatch(r, "the header has no id_seed: span ids will differ"))
        return open_fail(r, CBT_ERR_REPLAY_MISMATCH);
    if (strcmp(digest, h->sm_config_digest ? h->sm_config_digest : "") != 0) {
        say(why, "the config digest %.16s... is not the SHA-256 of the recorded configuration "
                 "(%.16s...)", h->sm_config_digest ? h->sm_config_digest : "", digest);
        if (mismatch(r, why))
            return open_fail(r, CBT_ERR_REPLAY_MISMATCH);
    }
    if (!meta_str(h, "cbt_version", CBT_VERSION_STRING)) {
        const cbt_lmct_value *v = meta_get(h, "cbt_version");
        say(why, "recorded by cbt %.*s, replayed by cbt %s",
            v && v->type == CBT_LMCT_STR ? (int)v->v.s.len : 1,
            v && v->type == CBT_LMCT_STR ? v->v.s.ptr : "?", CBT_VERSION_STRING);
        if (mismatch(r, why))
            return open_fail(r, CBT_ERR_REPLAY_MISMATCH);
    }
    if (!parse_config(r, why)) {
        if (mismatch(r, why))
            return open_fail(r, CBT_ERR_REPLAY_MISMATCH);
        /* forced: cbt's defaults stand in */
        r->span_pool = r->span_pool ? r->span_pool : 8192;
        r->registry_capacity = r->registry_capacity ? r->registry_capacity : 16384;
    }
    uint64_t sessions = 0;
    for (uint32_t i = 0; i < r->n_b; i++)
        sessions += r->b[i].o.max_sessions;
    if (sessions > LARGE_SESSIONS || r->registry_capacity > LARGE_REGISTRY) {
        say(why, "the recording asks for %" PRIu64 " sessions and a registry of %u entries "
                 "(past %u / %u, gigabytes of memory)", sessions, r->registry_capacity,
            LARGE_SESSIONS, LARGE_REGISTRY);
        if (mismatch(r, why))
            return open_fail(r, CBT_ERR_REPLAY_MISMATCH);
    }
    *out = r;
    return CBT_OK;
}

const char *cbt_replay_message(const cbt_replay *r) { return r ? r->msg : g_open_msg; }

const char *cbt_replay_header_json(const cbt_replay *r) { return r && r->json ? r->json : ""; }

void cbt_replay_close(cbt_replay *r)
{
    if (!r)
        return;
    cbt_lmct_reader_close(r->rd);
    free(r->json);
    free(r->arr);
    free(r);
}

/* ---- the tracer it replays into ---------------------------------------------- */

static const rp_builder *find_builder(const cbt_replay *r, const char *name)
{
    for (uint32_t i = 0; i < r->n_b; i++)
        if (strcmp(r->b[i].name, name) == 0)
            return &r->b[i];
    return NULL;
}

cbt_status cbt_replay_config(const cbt_replay *r, cbt_config *c)
{
    if (!r || !c)
        return CBT_ERR_INVAL;
    if (c->version < 4 || c->size < offsetof(cbt_config, reserved4))
        return CBT_ERR_VERSION;
    const rp_builder *mp = find_builder(r, "mp");
    c->mp_subscriber = mp != NULL;
    if (mp) {
        c->max_sessions = mp->o.max_sessions ? mp->o.max_sessions : 4096;
        c->mp_root_end = mp->o.root_end;
        c->session_idle_ms = mp->o.idle_ms;
        c->late_grace_ms = mp->o.grace_ms;
        if (c->version >= 6 && c->size >= offsetof(cbt_config, reserved6))
            c->token_trace = mp->o.token_trace;
    }
    c->span_pool = r->span_pool;
    c->registry_capacity = r->registry_capacity;
    c->ring_capacity = r->host_ring ? 64 : 0;      /* its clock line only: records come from the file */
    c->cuda_ring_capacity = r->cuda_ring ? 64 : 0; /* a stand-in (tracer.c) */
    c->lane_capacity = 0;                          /* no live publishing */
    c->queue_capacity = 64;
    c->trace_level = NULL;
    c->replay = true;
    return CBT_OK;
}

cbt_status cbt_replay_add_builders(const cbt_replay *r)
{
    if (!r)
        return CBT_ERR_INVAL;
    cbt_tracer *t = cbt_tracer_admin_();
    if (!t)
        return CBT_ERR_NOT_INITIALIZED;
    if (!t->cfg.replay)
        return CBT_ERR_INVAL;
    for (uint32_t i = 0; i < r->n_b; i++) {
        if (strcmp(r->b[i].name, "cb") != 0)
            continue; /* the others cbt_init made */
        cbt_subscriber cb;
        cbt_tree_options o = r->b[i].o;
        cbt_status st = cbt_cb_subscriber_create_opts(&o, &cb);
        if (!st && (st = cbt_add_subscriber(&cb)) && cb.destroy)
            cb.destroy(cb.ctx);
        if (st)
            return st;
    }
    return CBT_OK;
}

/* ---- records ------------------------------------------------------------------ */

static const cbt_lmct_value *arg(const cbt_lmct_record *rec, const char *key)
{
    return kv_get(rec->args, rec->arg_count, key);
}

static int arg_u64(const cbt_lmct_record *rec, const char *key, uint64_t *out)
{
    const cbt_lmct_value *v = arg(rec, key);
    if (!v || v->type != CBT_LMCT_UINT)
        return 0;
    *out = v->v.u;
    return 1;
}

static int arg_f64(const cbt_lmct_record *rec, const char *key, double *out)
{
    const cbt_lmct_value *v = arg(rec, key);
    if (!v || v->type != CBT_LMCT_FLOAT)
        return 0;
    *out = v->v.f;
    return 1;
}

static const cbt_lmct_value *arg_typed(const cbt_lmct_record *rec, const char *key,
                                       cbt_lmct_type type)
{
    const cbt_lmct_value *v = arg(rec, key);
    return v && v->type == type ? v : NULL;
}

static cbt_ring *ring_of(cbt_tracer *t, const cbt_lmct_record *rec)
{
    const cbt_lmct_value *v = arg_typed(rec, "ring", CBT_LMCT_STR);
    if (!v)
        return NULL;
    if (v->v.s.len == 4 && memcmp(v->v.s.ptr, "cuda", 4) == 0)
        return t->cuda_ring;
    if (v->v.s.len == 4 && memcmp(v->v.s.ptr, "host", 4) == 0)
        return t->host_ring;
    return NULL;
}

static int field_u32(const cbt_lmct_record *rec, const char *key, uint32_t max, uint32_t *out)
{
    uint64_t v;
    if (!arg_u64(rec, key, &v) || v > max)
        return 0;
    *out = (uint32_t)v;
    return 1;
}

static int get_bin(const cbt_lmct_value *m, const char *key, uint8_t *out, uint32_t n)
{
    const cbt_lmct_value *v = kv_get(m->v.map.items, m->v.map.count, key);
    if (!v || v->type != CBT_LMCT_BYTES || v->v.s.len != n)
        return 0;
    memcpy(out, v->v.s.ptr, n);
    return 1;
}

static int get_map_u(const cbt_lmct_value *m, const char *key, uint64_t max, uint64_t *out)
{
    const cbt_lmct_value *v = kv_get(m->v.map.items, m->v.map.count, key);
    if (!v || v->type != CBT_LMCT_UINT || v->v.u > max)
        return 0;
    *out = v->v.u;
    return 1;
}

/* ---- array values (docs/recording.md, "cbt.event") --------------------------------
 * A value that is a msgpack array, or nil, is an array value: "arrays" names
 * the element types of those values in order ("i64", "f64", "bool", "str");
 * nil is a dropped array (the live store had no room for it). */

static int array_type_of(const cbt_lmct_value *v, cbt_array_type *out)
{
    static const char *const n[] = {"i64", "f64", "bool", "str"};
    static const cbt_array_type t[] = {CBT_ARRAY_I64, CBT_ARRAY_F64, CBT_ARRAY_BOOL, CBT_ARRAY_STR};
    if (v->type != CBT_LMCT_STR)
        return 0;
    for (int i = 0; i < 4; i++)
        if (strcmp(v->v.s.ptr, n[i]) == 0) {
            *out = t[i];
            return 1;
        }
    return 0;
}

static size_t elem_bytes(cbt_array_type t)
{
    return t == CBT_ARRAY_BOOL ? sizeof(bool) : t == CBT_ARRAY_STR ? sizeof(char *) : 8u;
}

/* Room for every array value's elements of `vals` (typed by `types`, one
 * type a value, none left over). */
static int arrays_room(cbt_replay *r, const cbt_lmct_value *vals, const cbt_lmct_value *types)
{
    size_t need = 0;
    uint32_t j = 0;
    for (uint32_t i = 0; i < vals->v.map.count; i++) {
        const cbt_lmct_value *v = &vals->v.map.items[i].value;
        if (v->type != CBT_LMCT_ARRAY && v->type != CBT_LMCT_NIL)
            continue;
        cbt_array_type t;
        if (!types || j >= types->v.array.count || !array_type_of(&types->v.array.items[j++], &t))
            return 0;
        if (v->type == CBT_LMCT_ARRAY)
            need += ((size_t)v->v.array.count * elem_bytes(t) + 7u) & ~(size_t)7u;
    }
    if (types && j != types->v.array.count)
        return 0;
    if (need > r->arr_cap) {
        void *b = realloc(r->arr, need);
        if (!b)
            return 0;
        r->arr = b;
        r->arr_cap = need;
    }
    return 1;
}

/* One array value: its elements decoded into *room (advanced), then the
 * setter of its type, which borrows them. */
static cbt_status set_array_value(cbt_event *ev, cbt_name key, cbt_array_type t,
                                  const cbt_lmct_value *v, unsigned char **room)
{
    if (v->type == CBT_LMCT_NIL) {
        /* dropped live: an array value with no elements (handle 0, nothing
         * borrowed), which a dispatch passes on as it is */
        cbt_status st = cbt_event_array_i64(ev, key, NULL, 0);
        if (st)
            return st;
        for (uint32_t i = 0; i < ev->n_meta && i < CBT_EVENT_META_MAX; i++)
            if (ev->meta[i].key == key && ev->meta[i].type == CBT_META_ARRAY) {
                ev->meta[i].len = (uint8_t)t;
                ev->meta[i].v.arr.src = NULL;
                ev->meta[i].v.arr.count = 0;
                ev->meta[i].v.arr.handle = 0;
            }
        return CBT_OK;
    }
    uint32_t n = v->v.array.count;
    const cbt_lmct_value *x = v->v.array.items;
    unsigned char *b = *room;
    *room += ((size_t)n * elem_bytes(t) + 7u) & ~(size_t)7u;
    switch (t) {
    case CBT_ARRAY_I64: {
        int64_t *e = (int64_t *)(void *)b;
        for (uint32_t i = 0; i < n; i++) {
            if (x[i].type == CBT_LMCT_INT)
                e[i] = x[i].v.i;
            else if (x[i].type == CBT_LMCT_UINT && x[i].v.u <= INT64_MAX)
                e[i] = (int64_t)x[i].v.u;
            else
                return CBT_ERR_INVAL;
        }
        return cbt_event_array_i64(ev, key, e, n);
    }
    case CBT_ARRAY_F64: {
        double *e = (double *)(void *)b;
        for (uint32_t i = 0; i < n; i++) {
            if (x[i].type != CBT_LMCT_FLOAT)
                return CBT_ERR_INVAL;
            e[i] = x[i].v.f;
        }
        return cbt_event_array_f64(ev, key, e, n);
    }
    case CBT_ARRAY_BOOL: {
        bool *e = (bool *)(void *)b;
        for (uint32_t i = 0; i < n; i++) {
            if (x[i].type != CBT_LMCT_BOOL)
                return CBT_ERR_INVAL;
            e[i] = x[i].v.b;
        }
        return cbt_event_array_bool(ev, key, e, n);
    }
    case CBT_ARRAY_STR: {
        const char **e = (const char **)(void *)b;
        for (uint32_t i = 0; i < n; i++) {
            /* as a string value: what the live store kept (cut to
             * CBT_META_STR_MAX - 1 bytes, no NUL inside) */
            if (x[i].type != CBT_LMCT_STR || x[i].v.s.len >= CBT_META_STR_MAX ||
                memchr(x[i].v.s.ptr, 0, x[i].v.s.len))
                return CBT_ERR_INVAL;
            e[i] = x[i].v.s.ptr; /* the reader NUL-terminates it */
        }
        return cbt_event_array_str(ev, key, e, n);
    }
    }
    return CBT_ERR_INVAL;
}

/* A "cbt.event" record back into the event the live harvester dispatched:
 * the same setters in the same order, so the same bytes. Its array values
 * borrow r->arr and the reader's record until the event's dispatch. */
static int build_event(cbt_replay *r, const cbt_lmct_record *rec, cbt_event *ev)
{
    const cbt_lmct_value *type = arg_typed(rec, "type", CBT_LMCT_STR);
    const cbt_lmct_value *sess = arg_typed(rec, "session", CBT_LMCT_STR);
    const cbt_lmct_value *vals = arg_typed(rec, "values", CBT_LMCT_MAP);
    uint64_t ts, flags, pair;
    if (!type || !sess || !vals || !arg_u64(rec, "ts_ns", &ts) || !arg_u64(rec, "flags", &flags) ||
        !arg_u64(rec, "pair", &pair) || flags > UINT32_MAX || sess->v.s.len >= CBT_SESSION_MAX ||
        memchr(sess->v.s.ptr, 0, sess->v.s.len))
        return 0;
    cbt_event_type et;
    if (cbt_event_type_by_name(type->v.s.ptr, &et) != CBT_OK &&
        cbt_event_type_register(type->v.s.ptr, &et) != CBT_OK) /* a program's own type */
        return 0;
    if (cbt_event_init(ev, et, sess->v.s.ptr) != CBT_OK)
        return 0;
    if (vals->v.map.count > CBT_EVENT_META_MAX)
        return 0;
    const cbt_lmct_value *types = arg(rec, "arrays");
    if (types && types->type != CBT_LMCT_ARRAY)
        return 0;
    if (!arrays_room(r, vals, types))
        return 0;
    unsigned char *room = r->arr;
    uint32_t ti = 0;
    for (uint32_t i = 0; i < vals->v.map.count; i++) {
        const cbt_lmct_kv *kv = &vals->v.map.items[i];
        cbt_name key;
        cbt_status ist = cbt_intern(kv->key, &key);
        cbt_array_type at = CBT_ARRAY_I64;
        if (kv->value.type == CBT_LMCT_ARRAY || kv->value.type == CBT_LMCT_NIL)
            (void)array_type_of(&types->v.array.items[ti++], &at); /* checked by arrays_room */
        if (ist == CBT_ERR_FULL)
            continue; /* the name table is full: the value is dropped and counted
                         (cbt_metrics.names_refused), the event kept (cbt/names.h) */
        if (ist != CBT_OK)
            return 0;
        cbt_status st;
        switch (kv->value.type) {
        case CBT_LMCT_INT: st = cbt_event_i64(ev, key, kv->value.v.i); break;
        case CBT_LMCT_UINT:
            st = kv->value.v.u > INT64_MAX ? CBT_ERR_INVAL
                                           : cbt_event_i64(ev, key, (int64_t)kv->value.v.u);
            break;
        case CBT_LMCT_FLOAT: st = cbt_event_f64(ev, key, kv->value.v.f); break;
        case CBT_LMCT_BOOL: st = cbt_event_bool(ev, key, kv->value.v.b); break;
        case CBT_LMCT_ARRAY:
        case CBT_LMCT_NIL: st = set_array_value(ev, key, at, &kv->value, &room); break;
        case CBT_LMCT_STR:
            st = memchr(kv->value.v.s.ptr, 0, kv->value.v.s.len) ||
                         kv->value.v.s.len >= CBT_META_STR_MAX
                     ? CBT_ERR_INVAL
                     : cbt_event_str(ev, key, kv->value.v.s.ptr);
            break;
        default: st = CBT_ERR_INVAL; break;
        }
        if (st != CBT_OK)
            return 0;
    }
    const cbt_lmct_value *tr = arg_typed(rec, "trace", CBT_LMCT_MAP);
    if (!!tr != !!(flags & CBT_EVF_TRACE))
        return 0;
    if (tr) {
        cbt_event_trace x;
        memset(&x, 0, sizeof x);
        uint64_t tf, kind;
        if (!get_bin(tr, "trace_id", x.parent.trace_id, 16) ||
            !get_bin(tr, "parent_span_id", x.parent.span_id, 8) ||
            !get_bin(tr, "span_id", x.span_id, 8) || !get_map_u(tr, "trace_flags", 255, &tf) ||
            !get_map_u(tr, "kind", 255, &kind))
            return 0;
        x.parent.trace_flags = (uint8_t)tf;
        x.kind = (uint8_t)kind;
        const cbt_lmct_value *nm = kv_get(tr->v.map.items, tr->v.map.count, "name");
        if (nm && (nm->type != CBT_LMCT_STR ||
                   (nm->v.s.len && cbt_intern(nm->v.s.ptr, &x.name) != CBT_OK)))
            return 0; /* absent: the span is unnamed, as recorded */
        ev->trace = x;
    }
    /* a stream's mark (CBT_EVF_ENQUEUED): its enqueue time, stream and
     * device. A file from before cbt recorded them has neither the flag nor
     * the map: its events build spans without queue times, as they did live */
    const cbt_lmct_value *sm = arg_typed(rec, "stream", CBT_LMCT_MAP);
    if (!!sm != !!(flags & CBT_EVF_ENQUEUED))
        return 0;
    if (sm) {
        uint64_t enq, ord;
        const cbt_lmct_value *dv = kv_get(sm->v.map.items, sm->v.map.count, "device");
        int64_t dev;
        if (!get_map_u(sm, "enqueue_ns", UINT64_MAX, &enq) ||
            !get_map_u(sm, "ordinal", UINT32_MAX, &ord) || !dv)
            return 0;
        if (dv->type == CBT_LMCT_INT)
            dev = dv->v.i;
        else if (dv->type == CBT_LMCT_UINT && dv->v.u <= INT32_MAX)
            dev = (int64_t)dv->v.u;
        else
            return 0;
        if (dev < CBT_DEVICE_CPU || dev > INT32_MAX)
            return 0;
        ev->enqueue_ns = enq;
        ev->stream = (uint32_t)ord;
        ev->device = (int32_t)dev;
    }
    ev->ts = ts;
    ev->pair = pair;
    /* the setters' CBT_EVF_ARRAYS stays: a dispatch must take borrowed arrays in */
    ev->flags = (uint32_t)flags | (ev->flags & CBT_EVF_ARRAYS);
    return 1;
}

typedef enum { R_OK, R_UNKNOWN, R_MALFORMED } r_result;

static r_result apply(cbt_replay *r, cbt_tracer *t, const cbt_lmct_record *rec,
                      cbt_replay_stats *st, cbt_event *ev)
{
    const char *q = rec->qualname;
    if (strncmp(q, "cbt.", 4) != 0)
        return R_UNKNOWN;
    q += 4;
    if (strcmp(q, "event") == 0) {
        if (!build_event(r, rec, ev))
            return R_MALFORMED;
        cbt_dispatch_(t, ev, 0);
        st->events++;
    } else if (strcmp(q, "ring") == 0) {
        cbt_ring *ring = ring_of(t, rec);
        cbt_ring_rec x;
        memset(&x, 0, sizeof x);
        uint32_t kind, op, sm;
        if (!ring || !field_u32(rec, "launch_id", UINT32_MAX, &x.launch_id) ||
            !field_u32(rec, "kind", 255, &kind) || !field_u32(rec, "op", 255, &op) ||
            !field_u32(rec, "cta", UINT32_MAX, &x.cta) || !field_u32(rec, "sm", 0xffff, &sm) ||
            !field_u32(rec, "tokens", UINT32_MAX, &x.tokens) || !arg_u64(rec, "user", &x.user) ||
            !arg_u64(rec, "t_begin", &x.t_begin) || !arg_u64(rec, "t_end", &x.t_end))
            return R_MALFORMED;
        x.kind = (uint8_t)kind, x.op = (uint8_t)op, x.sm = (uint16_t)sm;
        cbt_kspans_replay_ring_(t, ring, &x);
        st->ring_records++;
    } else if (strcmp(q, "round") == 0) {
        if (!arg_u64(rec, "now_ns", &t->hv_now))
            return R_MALFORMED;
    } else if (strcmp(q, "clock") == 0) {
        uint64_t bt, bu;
        double npt;
        if (!arg_u64(rec, "base_ticks", &bt) || !arg_u64(rec, "base_unix_ns", &bu) ||
            !arg_f64(rec, "ns_per_tick", &npt) || !isfinite(npt) || !(npt > 0.0))
            return R_MALFORMED;
        t->clock.base_ticks = bt, t->clock.base_unix = bu, t->clock.ns_per_tick = npt;
        st->clock_records++;
    } else if (strcmp(q, "devclock") == 0) {
        cbt_ring *ring = ring_of(t, rec);
        uint64_t d0, t0;
        double tpn;
        const cbt_lmct_value *fitted = arg_typed(rec, "fitted", CBT_LMCT_BOOL);
        if (!ring || !fitted || !arg_u64(rec, "dev0", &d0) || !arg_u64(rec, "tick0", &t0) ||
            !arg_f64(rec, "ticks_per_ns", &tpn) || !isfinite(tpn) || !(tpn > 0.0))
            return R_MALFORMED;
        ring->clock.dev0 = d0, ring->clock.tick0 = t0, ring->clock.ticks_per_ns = tpn;
        ring->clock.fitted = fitted->v.b;
        st->clock_records++;
    } else if (strcmp(q, "kpoll") == 0) {
        cbt_kspans_replay_retry_(t);
    } else if (strcmp(q, "shutdown") == 0) {
        if (!arg_u64(rec, "now_ns", &t->hv_now))
            return R_MALFORMED;
        cbt_harvester_finish_(t);
        st->shutdown_seen = 1;
    } else if (strcmp(q, "ids") == 0) {
        const cbt_lmct_value *v = arg_typed(rec, "state", CBT_LMCT_ARRAY);
        uint64_t s[4];
        if (!v || v->v.array.count != 4)
            return R_MALFORMED;
        for (int i = 0; i < 4; i++) {
            if (v->v.array.items[i].type != CBT_LMCT_UINT)
                return R_MALFORMED;
            s[i] = v->v.array.items[i].v.u;
        }
        if ((s[0] | s[1] | s[2] | s[3]) == 0)
            return R_MALFORMED; /* the one state xoshiro cannot leave */
        memcpy(t->ids.s, s, sizeof s);
    } else if (strcmp(q, "gap") == 0) {
        uint64_t n = 0;
        (void)arg_u64(rec, "dropped", &n);
        st->gaps++;
        st->gap_records += n;
        if (r->gaps_said++ < GAPS_SHOWN)
            fprintf(logf_(r), "cbt replay: %s: %" PRIu64 " records were dropped here while "
                          "recording (its buffer was full): the spans that follow may differ "
                          "from the live run's\n", r->path, n);
    } else {
        return R_UNKNOWN;
    }
    return R_OK;
}

static int stopped(cbt_replay *r)
{
    if (r->stop_seen)
        return 1;
    if (r->o.stop && r->o.stop(r->o.stop_ctx))
        r->stop_seen = 1;
    return r->stop_seen;
}

cbt_status cbt_replay_run(cbt_replay *r, cbt_replay_stats *caller)
{
    if (!r)
        return CBT_ERR_INVAL;
    if (caller) {
        cbt_status cs = cbt_abi_out_check_(caller);
        if (cs)
            return cs;
    }
    cbt_tracer *t = cbt_tracer_admin_();
    if (!t)
        return CBT_ERR_NOT_INITIALIZED;
    if (!t->cfg.replay || r->ran || t->finished) {
        say(r->msg, "cbt_replay_run: %s", !t->cfg.replay ? "the tracer is not a replay tracer "
                                                           "(cbt_config.replay)"
                                                         : "this replay has run already");
        return CBT_ERR_INVAL;
    }
    r->ran = 1;
    cbt_replay_stats st;
    memset(&st, 0, sizeof st);
    /* the configuration the replay tracer has must be the recorded one */
    char mine[8192];
    pthread_mutex_lock(&t->lock);
    size_t ml = cbt_rec_config_json_(t, mine, sizeof mine);
    pthread_mutex_unlock(&t->lock);
    if (ml == 0 || strcmp(mine, r->json) != 0) {
        char why[512];
        say(why, "the replay tracer's configuration is not the recorded one (recorded %.160s; "
                 "replaying with %.160s): start it with cbt_replay_config and "
                 "cbt_replay_add_builders", r->json, mine);
        if (mismatch(r, why))
            return CBT_ERR_REPLAY_MISMATCH;
    }
    cbt_event *ev = malloc(sizeof *ev);
    if (!ev)
        return CBT_ERR_NOMEM;
    if (r->has_seed) {
        pthread_mutex_lock(&t->lock);
        memcpy(t->ids.s, r->seed, sizeof r->seed);
        pthread_mutex_unlock(&t->lock);
    }
    cbt_status rc = CBT_OK;
    uint64_t start = cbt_clock_mono_ns(), next_progress = start + 1000000000ull;
    double paced_to = 0.0, due_s = 0.0; /* recorded seconds reached; seconds of replay they are due at */
    uint64_t shown_unknown = 0;
    for (int done = 0; !done;) {
        pthread_mutex_lock(&t->lock);
        for (uint32_t i = 0; i < BATCH; i++) {
            const cbt_lmct_record *rec = NULL;
            cbt_status s = cbt_lmct_reader_next(r->rd, &rec);
            if (s || !rec) {
                if (s) {
                    say(r->msg, "%s: %s", r->path, cbt_lmct_reader_message(r->rd));
                    st.truncated = s == CBT_ERR_LMCT_TRUNCATED;
                    rc = s;
                }
                done = 1;
                break;
            }
            st.records++;
            if (r->o.speed > 0.0 && strcmp(rec->qualname, "cbt.event") != 0) {
                /* paced by the harvester's own times (an event's may be
                 * any stamp a program chose), in steps of at most
                 * PACE_STEP_MAX_S recorded seconds: a long idle stretch,
                 * or a bogus time in a file, costs that much at most */
                double tm = rec->t_mono;
                if (isfinite(tm) && tm > paced_to) {
                    double step = tm - paced_to;
                    paced_to = tm;
                    if (step > PACE_STEP_MAX_S)
                        step = PACE_STEP_MAX_S;
                    due_s += step / r->o.speed;
                    double left = due_s - (double)(cbt_clock_mono_ns() - start) / 1e9;
                    if (left > 0) {
                        pthread_mutex_unlock(&t->lock);
                        while (left > 0 && !stopped(r)) { /* slices: the caller may stop us */
                            double sl = left < 0.1 ? left : 0.1;
                            struct timespec d = {0, (long)(sl * 1e9)};
                            nanosleep(&d, NULL);
                            left = due_s - (double)(cbt_clock_mono_ns() - start) / 1e9;
                        }
                        pthread_mutex_lock(&t->lock);
                    }
                }
            }
            r_result res = t->finished ? R_OK : apply(r, t, rec, &st, ev);
            if (res == R_UNKNOWN) {
                if (st.unknown_skipped++ < 5)
                    shown_unknown++,
                        fprintf(logf_(r), "cbt replay: %s: skipped a record of an unknown "
                                          "qualname \"%.64s\"\n", r->path, rec->qualname);
            } else if (res == R_MALFORMED) {
                if (st.malformed_skipped++ < 5)
                    fprintf(logf_(r), "cbt replay: %s: skipped a \"%.64s\" record this build "
                                      "cannot take (a missing or mistyped argument) at offset "
                                      "%" PRIu64 "\n", r->path, rec->qualname,
                            cbt_lmct_reader_offset(r->rd));
            }
        }
        pthread_mutex_unlock(&t->lock);
        if (!done && stopped(r)) {
            say(r->msg, "%s: stopped by the caller after %" PRIu64 " records", r->path,
                st.records);
            rc = CBT_ERR_STOPPED;
            done = 1;
        }
        if (r->o.progress) {
            uint64_t now = cbt_clock_mono_ns();
            if (now >= next_progress || done) {
                uint64_t off = cbt_lmct_reader_offset(r->rd);
                fprintf(r->o.progress, "cbt replay: %" PRIu64 " records, %" PRIu64 " events, %.0f%% of %s\n",
                        st.records, st.events,
                        r->file_size ? 100.0 * (double)off / (double)r->file_size : 100.0, r->path);
                fflush(r->o.progress);
                next_progress = now + 1000000000ull;
            }
        }
    }
    (void)shown_unknown;
    free(ev);
    st.bytes = cbt_lmct_reader_offset(r->rd);
    if (caller) {
        st.version = CBT_REPLAY_STATS_VERSION;
        st.size = sizeof st;
        cbt_abi_out_(caller, &st, sizeof st, CBT_REPLAY_STATS_VERSION);
    }
    (void)cbt_flush(0);
    return rc;
}
