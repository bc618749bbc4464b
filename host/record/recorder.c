/* host/record/recorder.c — owns trace recording (internal/recorder.h,
 * cbt/replay.h): the harvester's copies into a bounded single-producer ring,
 * and the writer thread that turns them into LMCT frames (cbt/lmct.h).
 *
 * The ring. N 64-byte cells (N a power of two) and a slack of
 * ENTRY_CELLS_MAX cells past the end, so an entry is always contiguous (as
 * the lanes, internal/bus.h). Positions count cells and only grow. The
 * harvester claims k cells while pos + k - head <= N (reading the writer's
 * `head` only when its cached copy says full), writes the entry and
 * publishes `tail` (release); the writer reads up to the `tail` it loaded
 * (acquire) and publishes `head` (release) once per batch. An entry that
 * does not fit is dropped and counted; the next entry that fits is preceded
 * by a gap entry with the count, so a replay knows it is not exact.
 *
 * An entry: bytes 0..7 its kind (CBT_RK_*), byte 8 its cells, then its
 * payload; an event entry is record.h's record with the kind in its stamp
 * word, so it costs what a publish costs: the parts the event uses.
 *
 * Waking the writer (Dekker, both sides fenced): the writer stores
 * `sleeping` = 1, then loads `tail`, and sleeps on the futex only if
 * nothing came; the harvester, once per round that pushed, fences and
 * loads `sleeping`, and wakes it when set. The writer's sleep is bounded at
 * WRITER_SLEEP_MS all the same.
 *
 * Times. An event's record carries its own time (t_wall = ts, exact in
 * args.ts_ns); every other record the harvester's round time (t->hv_now).
 * t_mono is seconds since the recording's start on the same clock (cbt's
 * timeline is the TSC mapped to unix ns, monotonic between refits).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cbt/context.h"
#include "cbt/lmct.h"
#include "internal/counter.h"
#include "internal/futex.h"
#include "internal/last_error.h"
#include "internal/record.h"
#include "internal/recorder.h"
#include "internal/sha256.h"
#include "internal/ring_host.h"
#include "internal/tracer.h"
#include "internal/reqtree.h"

#define ENTRY_CELLS_MAX 255u      /* k is a byte */
#define ENTRY_HEAD 16u            /* kind word, cells byte, padding */
#define JSON_MAX 8192u            /* the configuration's JSON, NUL included */
#define WRITER_SLEEP_MS 100u
#define BATCH_BYTES (256u << 10)  /* frames per write(2) */
#define FREE_EVERY 1024u          /* cells the writer frees at a time (64 KiB) */
#define DEFAULT_BUFFER_KIB 16384u
#define MAX_BUFFER_KIB 1048576u

_Static_assert(ENTRY_HEAD + 40 + JSON_MAX <= ENTRY_CELLS_MAX * CBT_REC_CELL, "the header entry fits");

struct cbt_recorder {
    /* producer (the harvester) */
    _Alignas(64) _Atomic uint64_t tail;
    uint64_t cached_head;
    uint64_t pending_gap;   /* entries dropped since the last one that fit */
    uint64_t round_written; /* the round time of the last ROUND entry */
    int round_valid;        /* round_written is in the file (no gap since) */
    int started;            /* the header and the clocks are in */
    int pushed;             /* something was committed this round */
    int final_shutdown;     /* the shutdown entry found no room: close writes it */
    uint64_t final_now;     /* its time */
    /* consumer (the writer thread) */
    _Alignas(64) _Atomic uint64_t head;
    _Alignas(64) _Atomic uint32_t sleeping;
    _Atomic int stop;
    /* shared, fixed */
    unsigned char *raw, *cells;
    uint64_t n_cells;
    int fd;
    int schema; /* the header's trace_schema_version (CBT_TRACE_SCHEMA) */
    char path[PATH_MAX];
    pthread_t thread;
    int thread_started;
    /* the writer thread's */
    cbt_lmct_writer *w;
    uint64_t wall_start; /* unix ns, from the header entry */
    cbt_event scratch;
    /* the counters, owned by the tracer (it outlives us: cbt_metrics_get
     * may read them while cbt_shutdown closes us) */
    cbt_rec_counts *c;
    uint64_t pending_records; /* the writer's: encoded, not yet written */
    int header_tried;         /* the writer's: the header was attempted */
    int write_failed;         /* the writer's: a write failed (counted once) */
};

/* ---- configuration ------------------------------------------------------------ */

static const char *root_end_name(uint32_t r)
{
    return r == CBT_ROOT_END_TRANSFER ? "transfer_end" : "request_end";
}

static uint64_t ms_of(uint64_t ns, int grace)
{
    if (ns == UINT64_MAX || (grace && ns == 0))
        return CBT_TREE_OFF;
    return ns / 1000000ull;
}

size_t cbt_rec_config_json_(const cbt_tracer *t, char *buf, size_t cap)
{
    size_t n = 0;
#define PUT(...)                                                                   \
    do {                                                                           \
        int k_ = snprintf(buf + n, n < cap ? cap - n : 0, __VA_ARGS__);            \
        if (k_ < 0 || (size_t)k_ >= (n < cap ? cap - n : 0))                       \
            return 0;                                                              \
        n += (size_t)k_;                                                           \
    } while (0)
    PUT("{\"producer\":\"cbt\",\"level\":\"gpu\",\"span_pool\":%u,\"registry_capacity\":%u,",
        t->cfg.span_pool, t->cfg.registry_capacity);
    PUT("\"rings\":{\"host\":%s,\"cuda\":%s},\"builders\":[", t->host_ring ? "true" : "false",
        t->cuda_ring ? "true" : "false");
    uint32_t k = 0;
    for (uint32_t i = 0; i < t->n_subs; i++) {
        const cbt_subscriber *s = &t->subs[i];
        cbt_tree_opts o;
        const char *name = s->name ? s->name : "";
        int tree = cbt_tree_sub_opts_(s, &o);
        if (!cbt_rec_rebuilt_(s)) /* cbt's own builders only: a program's are not rebuilt */
            continue;
        PUT("%s{\"name\":\"%s\"", k++ ? "," : "", name);
        if (tree)
            PUT(",\"max_sessions\":%u,\"root_end\":\"%s\",\"idle_ms\":%" PRIu64
                ",\"grace_ms\":%" PRIu64,
                o.max_sessions, root_end_name(o.root_end), ms_of(o.idle_ns, 0),
                ms_of(o.grace_ns, 1));
        PUT("}");
    }
    PUT("]}");
#undef PUT
    return n;
}

/* ---- open --------------------------------------------------------------------- */

static void default_path(char *out, size_t cap)
{
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir)
        dir = "/tmp";
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    snprintf(out, cap, "%s/cbt-trace-%ld-%s.lct", dir, (long)getpid(), stamp);
}

static void *writer_main(void *arg);

cbt_status cbt_recorder_open_(const cbt_config *cfg, cbt_rec_counts *counts, cbt_recorder **out)
{
    *out = NULL;
    const char *level = cfg->trace_level;
    if (!level) {
        level = getenv("CBT_TRACE_LEVEL");
        if (level && !*level)
            level = NULL;
    }
    if (!level || !*level)
        return CBT_OK;
    if (strcmp(level, CBT_LMCT_LEVEL_GPU) != 0) {
        cbt_last_error_set_(cfg->trace_level ? "trace_level" : NULL,
                            "trace level \"%.32s\": cbt records level \"gpu\" only (%s)", level,
                            cfg->trace_level ? "cbt_config.trace_level" : "CBT_TRACE_LEVEL");
        fprintf(stderr, "cbt: %s\n", cbt_last_error());
        return CBT_ERR_INVAL;
    }
    uint32_t kib = cfg->trace_buffer_kib ? cfg->trace_buffer_kib : DEFAULT_BUFFER_KIB;
    if (kib < 64 || kib > MAX_BUFFER_KIB) {
        cbt_last_error_set_("trace_buffer_kib", "trace_buffer_kib %u must be 0 (16384) or in "
                            "[64, %u]", kib, MAX_BUFFER_KIB);
        fprintf(stderr, "cbt: %s\n", cbt_last_error());
        return CBT_ERR_INVAL;
    }
    /* the LMCache trace schema the header names: LMCache's TraceReader opens
     * only its own (0.5.6: 1, 0.5.7: 2), so whoever runs cbt beside an LMCache
     * says which; cbt's records are the same in both (docs/recording.md) */
    int schema = CBT_LMCT_SCHEMA_VERSION;
    const char *sv = getenv("CBT_TRACE_SCHEMA");
    if (sv && *sv) {
        if (!strcmp(sv, "1") || !strcmp(sv, "lmcache-0.5.6")) {
            schema = CBT_LMCT_SCHEMA_LMCACHE_056;
        } else if (!strcmp(sv, "2") || !strcmp(sv, "lmcache-0.5.7")) {
            schema = CBT_LMCT_SCHEMA_LMCACHE_057;
        } else {
            cbt_last_error_set_(NULL, "CBT_TRACE_SCHEMA \"%.32s\": cbt writes trace schema 1 "
                                      "(lmcache-0.5.6) or 2 (lmcache-0.5.7)", sv);
            fprintf(stderr, "cbt: %s\n", cbt_last_error());
            return CBT_ERR_INVAL;
        }
    }
    cbt_recorder *r = calloc(1, sizeof *r);
    if (!r)
        return CBT_ERR_NOMEM;
    r->c = counts;
    r->schema = schema;
    const char *path = cfg->trace_output;
    if (!path || !*path) {
        path = getenv("CBT_TRACE_OUTPUT");
        if (path && !*path)
            path = NULL;
    }
    if (path) {
        if (strlen(path) >= sizeof r->path) {
            cbt_last_error_set_(cfg->trace_output && *cfg->trace_output ? "trace_output" : NULL,
                                "the trace output path (%s) is longer than %zu bytes",
                                cfg->trace_output && *cfg->trace_output ? "trace_output"
                                                                       : "CBT_TRACE_OUTPUT",
                                sizeof r->path - 1);
            fprintf(stderr, "cbt: %s\n", cbt_last_error());
            free(r);
            return CBT_ERR_INVAL;
        }
        snprintf(r->path, sizeof r->path, "%s", path);
    }
    /* the cells: a power of two of the buffer's size, at least 1024 */
    uint64_t want = (uint64_t)kib * 1024u / CBT_REC_CELL, n = 1024;
    while (n < want)
        n <<= 1;
    r->n_cells = n;
    r->raw = malloc((size_t)(n + ENTRY_CELLS_MAX + 1) * CBT_REC_CELL);
    if (path) {
        /* O_NONBLOCK: a FIFO without a reader fails here (ENXIO) instead of
         * blocking cbt_init; a FIFO with one is refused below */
        r->fd = open(r->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NONBLOCK, 0644);
        struct stat sb;
        if (r->fd >= 0 && (fstat(r->fd, &sb) != 0 || !S_ISREG(sb.st_mode))) {
            cbt_last_error_set_(cfg->trace_output && *cfg->trace_output ? "trace_output" : NULL,
                                "the trace output '%.64s%s' is not a regular file (a pipe or "
                                "device could stall cbt_shutdown)",
                                r->path, strlen(r->path) > 64 ? "..." : "");
            fprintf(stderr, "cbt: %s\n", cbt_last_error());
            close(r->fd);
            free(r->raw);
            free(r);
            return CBT_ERR_INVAL;
        }
        if (r->fd >= 0)
            (void)fcntl(r->fd, F_SETFL, 0);
    } else {
        /* a name of our own: never another recording's (two in one second
         * of one process get -1, -2, ...) */
        char base[PATH_MAX - 16];
        default_path(base, sizeof base);
        r->fd = -1;
        for (int k = 0; k < 1000 && r->fd < 0; k++) {
            if (k)
                snprintf(r->path, sizeof r->path, "%.*s-%d.lct", (int)strlen(base) - 4, base, k);
            else
                snprintf(r->path, sizeof r->path, "%s", base);
            r->fd = open(r->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
            if (r->fd < 0 && errno != EEXIST)
                break;
        }
        if (r->fd >= 0)
            fprintf(stderr, "cbt: INFO: trace recording enabled (level=gpu); no trace output "
                            "given, writing to %s\n", r->path);
    }
    if (!r->raw || r->fd < 0) {
        cbt_status st = r->raw ? CBT_ERR_IO : CBT_ERR_NOMEM;
        if (r->fd < 0)
            fprintf(stderr, "cbt: cannot write the trace file '%s': %s\n", r->path,
                    strerror(errno));
        else
            close(r->fd);
        free(r->raw);
        free(r);
        return st;
    }
    r->cells = (unsigned char *)(((uintptr_t)r->raw + CBT_REC_CELL - 1) &
                                 ~(uintptr_t)(CBT_REC_CELL - 1));
    if (pthread_create(&r->thread, NULL, writer_main, r) != 0) {
        close(r->fd);
        free(r->raw);
        free(r);
        return CBT_ERR_THREAD;
    }
    r->thread_started = 1;
    *out = r;
    return CBT_OK;
}

/* ---- producer (the harvester) ------------------------------------------------- */

static unsigned char *claim_raw(cbt_recorder *r, uint32_t cells)
{
    uint64_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
    if (pos + cells - r->cached_head > r->n_cells) {
        r->cached_head = atomic_load_explicit(&r->head, memory_order_acquire);
        if (pos + cells - r->cached_head > r->n_cells)
            return NULL;
    }
    return r->cells + (pos & (r->n_cells - 1)) * CBT_REC_CELL;
}

static void commit(cbt_recorder *r, uint32_t cells)
{
    uint64_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
    atomic_store_explicit(&r->tail, pos + cells, memory_order_release);
    r->pushed = 1;
}

static void put_head(unsigned char *p, uint32_t kind, uint32_t cells)
{
    uint64_t k = kind;
    memcpy(p, &k, 8);
    memset(p + 8, 0, 8);
    p[8] = (unsigned char)cells;
}

static uint32_t cells_for(size_t payload)
{
    return (uint32_t)((ENTRY_HEAD + payload + CBT_REC_CELL - 1) / CBT_REC_CELL);
}

/* Claim room for an entry of `cells`; NULL (dropped, counted) when it does
 * not fit, or while entries dropped before it are not yet announced (the
 * gap entry and the state after it come first: before()). */
static unsigned char *claim(cbt_recorder *r, uint32_t cells)
{
    unsigned char *p = r->pending_gap ? NULL : claim_raw(r, cells);
    if (!p) {
        r->pending_gap++;
        atomic_fetch_add_explicit(&r->c->dropped, 1, memory_order_relaxed);
    }
    return p;
}

typedef struct hdr_payload {
    uint64_t seed[4];
    uint64_t wall_start, mono_start_ns;
    uint32_t json_len, reserved;
} hdr_payload;

typedef struct clock_payload {
    uint64_t base_ticks, base_unix;
    double ns_per_tick;
} clock_payload;

typedef struct devclock_payload {
    uint32_t ring, fitted;
    uint64_t dev0, tick0;
    double ticks_per_ns;
} devclock_payload;

typedef struct ring_payload {
    uint32_t ring, reserved;
    cbt_ring_rec rec;
} ring_payload;

/* Returns 1 when the entry went in. */
static int put_fixed(cbt_recorder *r, uint32_t kind, const void *payload, size_t len)
{
    uint32_t cells = cells_for(len);
    unsigned char *p = claim(r, cells);
    if (!p)
        return 0;
    put_head(p, kind, cells);
    if (len)
        memcpy(p + ENTRY_HEAD, payload, len);
    commit(r, cells);
    return 1;
}

/* After a gap: the gap entry, then the state a replay needs to go on
 * exactly (the clock maps, the id generator; the round follows), all or
 * nothing. */
#define RESYNC_CELLS 8u /* gap, clock, two device clocks, ids, round: with room */
static void flush_gap(cbt_tracer *t, cbt_recorder *r)
{
    if (!claim_raw(r, RESYNC_CELLS + CBT_REC_CELLS_MAX))
        return; /* still full: the next entry is dropped too, and counted in the gap */
    uint64_t n = r->pending_gap;
    r->pending_gap = 0;
    put_fixed(r, CBT_RK_GAP, &n, sizeof n);
    cbt_rec_clock_(t);
    cbt_rec_devclock_(t, t->host_ring);
    cbt_rec_devclock_(t, t->cuda_ring);
    put_fixed(r, CBT_RK_IDS, t->ids.s, sizeof t->ids.s);
    r->round_valid = 0;
}

static uint32_t ring_id(const cbt_tracer *t, const cbt_ring *ring)
{
    return ring && ring == t->cuda_ring ? CBT_RREC_CUDA : CBT_RREC_HOST;
}

void cbt_rec_clock_(cbt_tracer *t)
{
    cbt_recorder *r = t->rec;
    if (!r || !r->started)
        return; /* the start puts the clocks in */
    clock_payload c = {t->clock.base_ticks, t->clock.base_unix, t->clock.ns_per_tick};
    put_fixed(r, CBT_RK_CLOCK, &c, sizeof c);
}

void cbt_rec_devclock_(cbt_tracer *t, const cbt_ring *ring)
{
    cbt_recorder *r = t->rec;
    if (!r || !r->started || !ring)
        return;
    devclock_payload d = {ring_id(t, ring), (uint32_t)ring->clock.fitted, ring->clock.dev0,
                          ring->clock.tick0, ring->clock.ticks_per_ns};
    put_fixed(r, CBT_RK_DEVCLOCK, &d, sizeof d);
}

/* Before the first record: the header (configuration, id seed, start
 * times), then the clock maps; before each record: the round time when it
 * moved. */
static void before(cbt_tracer *t, cbt_recorder *r)
{
    if (!r->started) {
        char json[JSON_MAX];
        size_t jl = cbt_rec_config_json_(t, json, sizeof json);
        hdr_payload h;
        memset(&h, 0, sizeof h);
        memcpy(h.seed, t->ids.s, sizeof h.seed);
        h.wall_start = t->hv_now ? t->hv_now : cbt_clock_unix_now();
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        h.mono_start_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
        h.json_len = (uint32_t)jl;
        uint32_t cells = cells_for(sizeof h + jl);
        unsigned char *p = claim_raw(r, cells); /* the first entry: always room */
        if (!p)
            return;
        put_head(p, CBT_RK_HEADER, cells);
        memcpy(p + ENTRY_HEAD, &h, sizeof h);
        memcpy(p + ENTRY_HEAD + sizeof h, json, jl);
        commit(r, cells);
        r->started = 1;
        cbt_rec_clock_(t);
        cbt_rec_devclock_(t, t->host_ring);
        cbt_rec_devclock_(t, t->cuda_ring);
    }
    if (r->pending_gap)
        flush_gap(t, r);
    if (!r->round_valid || t->hv_now != r->round_written) {
        if (put_fixed(r, CBT_RK_ROUND, &t->hv_now, sizeof t->hv_now)) {
            r->round_written = t->hv_now;
            r->round_valid = 1;
        }
    }
}

void cbt_rec_event_(cbt_tracer *t, const cbt_event *ev)
{
    cbt_recorder *r = t->rec;
    before(t, r);
    cbt_rec_size z = cbt_rec_size_of(ev, 0);
    unsigned char *p = claim(r, z.cells);
    if (!p)
        return;
    cbt_rec_write(p, z, ev, CBT_RK_EVENT, NULL, NULL);
    commit(r, z.cells);
}

void cbt_rec_ring_(cbt_tracer *t, const cbt_ring *ring, const cbt_ring_rec *rec)
{
    cbt_recorder *r = t->rec;
    before(t, r);
    ring_payload rp = {ring_id(t, ring), 0, *rec};
    put_fixed(r, CBT_RK_RING, &rp, sizeof rp);
}

void cbt_rec_kpoll_(cbt_tracer *t)
{
    cbt_recorder *r = t->rec;
    before(t, r);
    put_fixed(r, CBT_RK_KPOLL, NULL, 0);
}

void cbt_rec_ids_(cbt_tracer *t)
{
    cbt_recorder *r = t->rec;
    before(t, r);
    put_fixed(r, CBT_RK_IDS, t->ids.s, sizeof t->ids.s);
}

void cbt_rec_shutdown_(cbt_tracer *t)
{
    cbt_recorder *r = t->rec;
    before(t, r);
    uint32_t cells = cells_for(sizeof t->hv_now);
    unsigned char *p = claim(r, cells);
    if (!p) {
        /* the buffer is still full as the harvester stops: the shutdown is
         * not lost with the rest; cbt_recorder_close_ writes it, after the
         * gap, once the writer has drained (it is the last record) */
        r->pending_gap--;
        atomic_fetch_sub_explicit(&r->c->dropped, 1, memory_order_relaxed);
        r->final_shutdown = 1;
        r->final_now = t->hv_now;
        return;
    }
    put_head(p, CBT_RK_SHUTDOWN, cells);
    memcpy(p + ENTRY_HEAD, &t->hv_now, sizeof t->hv_now);
    commit(r, cells);
}

void cbt_rec_round_end_(cbt_tracer *t)
{
    cbt_recorder *r = t->rec;
    if (!r->pushed)
        return;
    r->pushed = 0;
    atomic_thread_fence(memory_order_seq_cst); /* the tail store before the flag load */
    if (atomic_load_explicit(&r->sleeping, memory_order_relaxed) &&
        atomic_exchange_explicit(&r->sleeping, 0, memory_order_relaxed))
        cbt_futex_wake_(&r->sleeping, 1);
}

/* ---- the writer thread -------------------------------------------------------- */

static double secs(uint64_t ns) { return (double)ns / 1e9; }

/* After a write of the batch (st CBT_OK) or its failure (CBT_ERR_IO): the
 * records it held are written, or lost; a failed file counts one write
 * error (the writer refuses everything after it). */
static void settle(cbt_recorder *r, cbt_status st)
{
    if (st == CBT_OK) {
        atomic_fetch_add_explicit(&r->c->records, r->pending_records, memory_order_relaxed);
    } else {
        atomic_fetch_add_explicit(&r->c->dropped, r->pending_records, memory_order_relaxed);
        if (!r->write_failed) {
            r->write_failed = 1;
            atomic_fetch_add_explicit(&r->c->write_errors, 1, memory_order_relaxed);
        }
    }
    r->pending_records = 0;
    atomic_store_explicit(&r->c->bytes, cbt_lmct_writer_bytes(r->w), memory_order_relaxed);
}

static cbt_status append(cbt_recorder *r, const char *qualname, uint64_t wall_ns,
                         const cbt_lmct_kv *args, uint32_t n)
{
    cbt_lmct_record rec = CBT_LMCT_RECORD_INIT;
    rec.t_wall = secs(wall_ns);
    rec.t_mono = wall_ns > r->wall_start ? secs(wall_ns - r->wall_start) : 0.0;
    rec.qualname = qualname;
    rec.args = args;
    rec.arg_count = n;
    uint64_t was = cbt_lmct_writer_bytes(r->w);
    cbt_status st = cbt_lmct_writer_append(r->w, &rec);
    if (st == CBT_OK) {
        r->pending_records++;
        if (cbt_lmct_writer_bytes(r->w) != was) /* the batch, this record included, went out */
            settle(r, CBT_OK);
    } else if (st == CBT_ERR_IO) {
        r->pending_records++; /* this one and the batch it would have joined are lost */
        settle(r, st);
    } else {
        atomic_fetch_add_explicit(&r->c->dropped, 1, memory_order_relaxed); /* past a bound */
    }
    return st;
}

/* A record of one uint argument (cbt.round, cbt.shutdown, cbt.gap). */
static void append_u(cbt_recorder *r, const char *qualname, const char *key, uint64_t v,
                     uint64_t wall_ns)
{
    cbt_lmct_kv a[] = {CBT_LMCT_KV(key, CBT_LMCT_U(v))};
    append(r, qualname, wall_ns, a, 1);
}

static void write_header(cbt_recorder *r, const hdr_payload *h, const char *json, size_t jl)
{
    char js[JSON_MAX], digest[65];
    memcpy(js, json, jl);
    js[jl] = '\0';
    cbt_sha256_hex_(js, jl, digest);
    cbt_sampler smp;
    (void)cbt_sampler_from_env(&smp, NULL);
    const char *sname = cbt_sampler_name(smp.kind);
    const char *schema_name = cbt_lmct_schema_name((cbt_lmct_schema)r->schema);
    cbt_lmct_value seed[4];
    for (int i = 0; i < 4; i++)
        seed[i] = CBT_LMCT_U(h->seed[i]);
    cbt_lmct_kv meta[] = {
        CBT_LMCT_KV("producer", CBT_LMCT_S("cbt", 3)),
        CBT_LMCT_KV("cbt_version", CBT_LMCT_S(CBT_VERSION_STRING, sizeof CBT_VERSION_STRING - 1)),
        CBT_LMCT_KV("id_seed", ((cbt_lmct_value){.type = CBT_LMCT_ARRAY, .v.array = {seed, 4}})),
        CBT_LMCT_KV("t_wall_start_ns", CBT_LMCT_U(h->wall_start)),
        CBT_LMCT_KV("pid", CBT_LMCT_I((int64_t)getpid())),
        /* informational: the sampling decisions are in the recorded events */
        CBT_LMCT_KV("sampler", CBT_LMCT_S(sname, (uint32_t)strlen(sname))),
        /* the layout, by name: the number alone is ambiguous (cbt/lmct.h) */
        CBT_LMCT_KV(CBT_LMCT_META_SCHEMA, CBT_LMCT_S(schema_name, (uint32_t)strlen(schema_name))),
    };
    cbt_lmct_header hd = CBT_LMCT_HEADER_INIT;
    hd.level = CBT_LMCT_LEVEL_GPU;
    hd.trace_schema_version = r->schema;
    hd.t_mono_start = secs(h->mono_start_ns);
    hd.t_wall_start = secs(h->wall_start);
    hd.sm_config_json = js;
    hd.sm_config_digest = digest;
    hd.level_meta = meta;
    hd.level_meta_count = sizeof meta / sizeof meta[0];
    r->wall_start = h->wall_start;
    r->header_tried = 1;
    cbt_status st = cbt_lmct_writer_open_fd(r->fd, &hd, &r->w);
    if (st) {
        fprintf(stderr, "cbt: cannot write the trace file '%s': %s\n", r->path, cbt_strerror(st));
        atomic_fetch_add_explicit(&r->c->write_errors, 1, memory_order_relaxed);
        r->write_failed = 1;
        return;
    }
    r->fd = -1; /* the writer's now */
    atomic_store_explicit(&r->c->bytes, cbt_lmct_writer_bytes(r->w), memory_order_relaxed);
    (void)cbt_lmct_writer_set_batch(r->w, BATCH_BYTES);
}

static const char *ring_name(uint32_t id) { return id == CBT_RREC_CUDA ? "cuda" : "host"; }

/* One event as a record (docs/recording.md, "cbt.event"). */
static void write_event(cbt_recorder *r, const unsigned char *src)
{
    cbt_event *ev = &r->scratch;
    uint64_t kind;
    struct cbt_stream *s;
    void *m;
    cbt_rec_read(src, ev, &kind, &s, &m);
    cbt_lmct_kv vals[CBT_EVENT_META_MAX];
    uint32_t nv = 0;
    for (uint32_t i = 0; i < ev->n_meta && i < CBT_EVENT_META_MAX; i++) {
        const cbt_meta *mt = &ev->meta[i];
        cbt_lmct_value v = {.type = CBT_LMCT_NIL};
        switch (mt->type) {
        case CBT_META_I64: v = CBT_LMCT_I(mt->v.i64); break;
        case CBT_META_F64: v = CBT_LMCT_F(mt->v.f64); break;
        case CBT_META_BOOL: v = CBT_LMCT_B(mt->v.b); break;
        case CBT_META_STR: {
            size_t len = 0;
            const char *p = cbt_event_meta_str(ev, mt, &len);
            v = CBT_LMCT_S(p, (uint32_t)len);
            break;
        }
        default: break;
        }
        vals[nv++] = CBT_LMCT_KV(cbt_name_str(mt->key), v);
    }
    cbt_lmct_kv tr[6];
    uint32_t nt = 0;
    if (ev->flags & CBT_EVF_TRACE) {
        const cbt_event_trace *x = &ev->trace;
        tr[nt++] = CBT_LMCT_KV("trace_id", CBT_LMCT_BIN((const char *)x->parent.trace_id, 16));
        tr[nt++] = CBT_LMCT_KV("parent_span_id", CBT_LMCT_BIN((const char *)x->parent.span_id, 8));
        tr[nt++] = CBT_LMCT_KV("trace_flags", CBT_LMCT_U(x->parent.trace_flags));
        tr[nt++] = CBT_LMCT_KV("span_id", CBT_LMCT_BIN((const char *)x->span_id, 8));
        tr[nt++] = CBT_LMCT_KV("name", CBT_LMCT_S(cbt_name_str(x->name), cbt_name_len(x->name)));
        tr[nt++] = CBT_LMCT_KV("kind", CBT_LMCT_U(x->kind));
    }
    /* a stream's mark: where and when the host enqueued it (only then, so
     * a file of events no stream timed is as before) */
    cbt_lmct_kv sm[3];
    uint32_t ns = 0;
    if (ev->flags & CBT_EVF_ENQUEUED) {
        sm[ns++] = CBT_LMCT_KV("enqueue_ns", CBT_LMCT_U(ev->enqueue_ns));
        sm[ns++] = CBT_LMCT_KV("ordinal", CBT_LMCT_U(ev->stream));
        sm[ns++] = CBT_LMCT_KV("device", CBT_LMCT_I(ev->device));
    }
    const char *tn = cbt_event_type_name(ev->type);
    cbt_lmct_kv args[8] = {
        CBT_LMCT_KV("type", CBT_LMCT_S(tn, (uint32_t)strlen(tn))),
        CBT_LMCT_KV("session", CBT_LMCT_S(ev->session, ev->session_len)),
        CBT_LMCT_KV("ts_ns", CBT_LMCT_U(ev->ts)),
        CBT_LMCT_KV("flags", CBT_LMCT_U(ev->flags)),
        CBT_LMCT_KV("pair", CBT_LMCT_U(ev->pair)),
        CBT_LMCT_KV("values", ((cbt_lmct_value){.type = CBT_LMCT_MAP, .v.map = {vals, nv}})),
    };
    uint32_t na = 6;
    if (nt)
        args[na++] = CBT_LMCT_KV("trace", ((cbt_lmct_value){.type = CBT_LMCT_MAP, .v.map = {tr, nt}}));
    if (ns)
        args[na++] = CBT_LMCT_KV("stream", ((cbt_lmct_value){.type = CBT_LMCT_MAP, .v.map = {sm, ns}}));
    (void)append(r, "cbt.event", ev->ts, args, na);
}

static void write_entry(cbt_recorder *r, const unsigned char *p, uint64_t *now)
{
    const unsigned char *pl = p + ENTRY_HEAD;
    switch (p[0]) {
    case CBT_RK_HEADER: {
        hdr_payload h;
        memcpy(&h, pl, sizeof h);
        write_header(r, &h, (const char *)pl + sizeof h, h.json_len < JSON_MAX ? h.json_len : 0);
        *now = h.wall_start;
        return;
    }
    default: break;
    }
    if (!r->w) { /* the header could not be written: nothing after it can */
        atomic_fetch_add_explicit(&r->c->dropped, 1, memory_order_relaxed);
        return;
    }
    switch (p[0]) {
    case CBT_RK_EVENT:
        write_event(r, p);
        break;
    case CBT_RK_ROUND:
        memcpy(now, pl, 8);
        append_u(r, "cbt.round", "now_ns", *now, *now);
        break;
    case CBT_RK_CLOCK: {
        clock_payload c;
        memcpy(&c, pl, sizeof c);
        cbt_lmct_kv a[] = {CBT_LMCT_KV("base_ticks", CBT_LMCT_U(c.base_ticks)),
                           CBT_LMCT_KV("base_unix_ns", CBT_LMCT_U(c.base_unix)),
                           CBT_LMCT_KV("ns_per_tick", CBT_LMCT_F(c.ns_per_tick))};
        append(r, "cbt.clock", *now, a, 3);
        break;
    }
    case CBT_RK_DEVCLOCK: {
        devclock_payload d;
        memcpy(&d, pl, sizeof d);
        const char *rn = ring_name(d.ring);
        cbt_lmct_kv a[] = {CBT_LMCT_KV("ring", CBT_LMCT_S(rn, 4)),
                           CBT_LMCT_KV("dev0", CBT_LMCT_U(d.dev0)),
                           CBT_LMCT_KV("tick0", CBT_LMCT_U(d.tick0)),
                           CBT_LMCT_KV("ticks_per_ns", CBT_LMCT_F(d.ticks_per_ns)),
                           CBT_LMCT_KV("fitted", CBT_LMCT_B(d.fitted != 0))};
        append(r, "cbt.devclock", *now, a, 5);
        break;
    }
    case CBT_RK_RING: {
        ring_payload rp;
        memcpy(&rp, pl, sizeof rp);
        const cbt_ring_rec *x = &rp.rec;
        const char *rn = ring_name(rp.ring);
        cbt_lmct_kv a[] = {CBT_LMCT_KV("ring", CBT_LMCT_S(rn, 4)),
                           CBT_LMCT_KV("launch_id", CBT_LMCT_U(x->launch_id)),
                           CBT_LMCT_KV("kind", CBT_LMCT_U(x->kind)),
                           CBT_LMCT_KV("op", CBT_LMCT_U(x->op)),
                           CBT_LMCT_KV("cta", CBT_LMCT_U(x->cta)),
                           CBT_LMCT_KV("sm", CBT_LMCT_U(x->sm)),
                           CBT_LMCT_KV("tokens", CBT_LMCT_U(x->tokens)),
                           CBT_LMCT_KV("user", CBT_LMCT_U(x->user)),
                           CBT_LMCT_KV("t_begin", CBT_LMCT_U(x->t_begin)),
                           CBT_LMCT_KV("t_end", CBT_LMCT_U(x->t_end))};
        append(r, "cbt.ring", *now, a, 10);
        break;
    }
    case CBT_RK_KPOLL:
        append(r, "cbt.kpoll", *now, NULL, 0);
        break;
    case CBT_RK_SHUTDOWN:
        memcpy(now, pl, 8);
        append_u(r, "cbt.shutdown", "now_ns", *now, *now);
        break;
    case CBT_RK_IDS: {
        uint64_t s[4];
        memcpy(s, pl, sizeof s);
        cbt_lmct_value v[4] = {CBT_LMCT_U(s[0]), CBT_LMCT_U(s[1]), CBT_LMCT_U(s[2]), CBT_LMCT_U(s[3])};
        cbt_lmct_kv a[] = {
            CBT_LMCT_KV("state", ((cbt_lmct_value){.type = CBT_LMCT_ARRAY, .v.array = {v, 4}}))};
        append(r, "cbt.ids", *now, a, 1);
        break;
    }
    case CBT_RK_GAP: {
        uint64_t n;
        memcpy(&n, pl, 8);
        append_u(r, "cbt.gap", "dropped", n, *now);
        break;
    }
    default: break;
    }
}

static void drain_writer(cbt_recorder *r)
{
    if (!r->w || (!r->pending_records && !r->write_failed))
        return;
    cbt_status st = cbt_lmct_writer_drain(r->w);
    settle(r, st == CBT_OK ? CBT_OK : CBT_ERR_IO);
}

static void *writer_main(void *arg)
{
    cbt_recorder *r = arg;
    uint64_t head = 0, now = 0;
    for (;;) {
        uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
        if (head == tail) {
            drain_writer(r);
            if (atomic_load_explicit(&r->stop, memory_order_acquire)) {
                if (head == atomic_load_explicit(&r->tail, memory_order_acquire))
                    break;
                continue;
            }
            atomic_store_explicit(&r->sleeping, 1, memory_order_seq_cst);
            if (head == atomic_load_explicit(&r->tail, memory_order_seq_cst) &&
                !atomic_load_explicit(&r->stop, memory_order_seq_cst))
                cbt_futex_wait_(&r->sleeping, 1u, WRITER_SLEEP_MS);
            atomic_store_explicit(&r->sleeping, 0, memory_order_relaxed);
            continue;
        }
        uint64_t freed = head;
        while (head < tail) {
            const unsigned char *p = r->cells + (head & (r->n_cells - 1)) * CBT_REC_CELL;
            uint32_t k = p[8] ? p[8] : 1;
            write_entry(r, p, &now);
            head += k;
            if (head - freed >= FREE_EVERY) { /* room for the harvester during a long backlog */
                atomic_store_explicit(&r->head, head, memory_order_release);
                freed = head;
            }
        }
        atomic_store_explicit(&r->head, head, memory_order_release);
    }
    if (!r->w && r->fd >= 0 && !r->header_tried) {
        /* nothing was recorded: still a valid file, with an empty configuration */
        hdr_payload h;
        memset(&h, 0, sizeof h);
        h.wall_start = cbt_clock_unix_now();
        write_header(r, &h, "", 0);
        drain_writer(r);
    }
    return NULL;
}

void cbt_recorder_close_(cbt_recorder *r)
{
    if (!r)
        return;
    atomic_store_explicit(&r->stop, 1, memory_order_seq_cst);
    atomic_store_explicit(&r->sleeping, 0, memory_order_seq_cst);
    cbt_futex_wake_(&r->sleeping, 1);
    if (r->thread_started)
        pthread_join(r->thread, NULL);
    /* what the harvester could not put in the full ring at its end: the
     * count of the last entries it dropped, and its shutdown (the writer
     * has stopped: this thread writes now) */
    uint64_t now = r->final_now;
    if (r->w && r->pending_gap) {
        append_u(r, "cbt.gap", "dropped", r->pending_gap, now);
        r->pending_gap = 0;
    }
    if (r->w && r->final_shutdown)
        append_u(r, "cbt.shutdown", "now_ns", now, now);
    drain_writer(r);
    if (r->w) {
        cbt_status st = cbt_lmct_writer_close(r->w); /* fsync */
        if (st && !r->write_failed) {
            atomic_fetch_add_explicit(&r->c->write_errors, 1, memory_order_relaxed);
            fprintf(stderr, "cbt: the trace file '%s' could not be completed: %s\n", r->path,
                    cbt_strerror(st));
        }
    } else if (r->fd >= 0) {
        close(r->fd);
    }
    uint64_t dropped = atomic_load_explicit(&r->c->dropped, memory_order_relaxed);
    if (dropped)
        fprintf(stderr, "cbt: the trace file '%s' misses %" PRIu64
                        " records (its buffer was full or writes failed)\n",
                r->path, dropped);
    free(r->raw);
    free(r);
}

const char *cbt_recorder_path_(const cbt_recorder *r) { return r ? r->path : ""; }

int cbt_recorder_started_(const cbt_recorder *r) { return r && r->started; }

int cbt_rec_rebuilt_(const cbt_subscriber *s)
{
    cbt_tree_opts o;
    return cbt_tree_sub_opts_(s, &o) ||
           (s->name && (!strcmp(s->name, "kernel-spans") || !strcmp(s->name, "pspan")));
}

static void tap_clock(void *ctx) { cbt_rec_clock_(ctx); }
static void tap_round_end(void *ctx) { cbt_rec_round_end_(ctx); }
static void tap_stop(void *ctx) { cbt_rec_shutdown_(ctx); }

void cbt_recorder_tap_(struct cbt_tracer *t, struct cbt_hv_tap *out)
{
    memset(out, 0, sizeof *out);
    out->name = "recorder";
    out->ctx = t;
    out->on_clock = tap_clock;
    out->on_round_end = tap_round_end;
    out->on_stop = tap_stop;
}
