/* cbt/lmct.h — the LMCT trace file: LMCache's recording format, at level "gpu".
 *
 * An LMCT file (LMCache 0.5.6 and 0.5.7, lmcache/v1/mp_observability/trace/format.py)
 * is a stream of frames, each a 4-byte big-endian length and that many bytes
 * of msgpack. The first frame is the Header, every later one a Record:
 *
 *   Header  {"type": "header", "magic": bin "LMCT", "format_version": 1,
 *            "level": "gpu", "trace_schema_version": 1 or 2, "t_mono_start": f64,
 *            "t_wall_start": f64, "sm_config_json": str,
 *            "sm_config_digest": str, "level_meta": map (left out when empty)}
 *   Record  {"type": "record", "t_mono": f64 (seconds since t_mono_start),
 *            "t_wall": f64 (unix seconds), "qualname": str, "args": map}
 *
 * in that key order, as msgspec writes LMCache's tagged structs, so LMCache's
 * own TraceReader reads what this writer writes (tests/lmcache/lmct_reader_check.py).
 * LMCache's reader accepts only its own trace_schema_version: 0.5.6's
 * TraceReader opens schema 1, 0.5.7's schema 2, and a writer chooses which
 * (cbt_lmct_header.trace_schema_version).
 * docs/recording.md has the format and what cbt records in it (cbt/replay.h).
 *
 * The codec is part of libcbt (host/record/lmct.c) when msgpack-c is found
 * (CBT_WITH_MSGPACK; CBT_HAVE_MSGPACK in cbt/build_config.h); this header is
 * installed then. It is a file format, not a hot path: nothing here has a
 * CBT_DISABLE stub (tests/disable_coverage.py lists it in NOT_DISABLED).
 *
 * Errors are cbt_status codes (cbt/status.h); cbt_lmct_reader_message() adds
 * where and why. Every allocation is bounded by the CBT_LMCT_*_MAX limits.
 */
#ifndef CBT_LMCT_H
#define CBT_LMCT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cbt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the format's constants (LMCache's format.py) ---------------------------- */
#define CBT_LMCT_MAGIC "LMCT"         /* 4 bytes, a msgpack bin */
#define CBT_LMCT_FORMAT_VERSION 1     /* FORMAT_VERSION: the framing and struct shapes */
#define CBT_LMCT_SCHEMA_VERSION 1     /* TRACE_SCHEMA_VERSION the writer writes by default */
#define CBT_LMCT_LEVEL_GPU "gpu"      /* the level cbt writes */

/* ---- schemas: what trace_schema_version means -------------------------------
 * TRACE_SCHEMA_VERSION names the captured API surface (the StorageManager
 * calls LMCache records, and its codecs' wire forms). The number alone does
 * not name a layout: an open LMCache pull request (#4871, ObjectKey's
 * cache_salt) proposes another "2". So the reader takes the number and, when
 * level_meta has CBT_LMCT_META_SCHEMA, the layout it names; then holds each
 * record's content to that layout (its codec tags and the fields the
 * schemas change, docs/recording.md) and refuses what belongs to another
 * (CBT_ERR_LMCT_SCHEMA, naming it). cbt's own level "gpu" records are the
 * same in both: only the header differs. */
typedef enum cbt_lmct_schema {
    CBT_LMCT_SCHEMA_UNKNOWN = 0,
    CBT_LMCT_SCHEMA_LMCACHE_056 = 1, /* trace_schema_version 1: LMCache 0.5.6 */
    CBT_LMCT_SCHEMA_LMCACHE_057 = 2  /* trace_schema_version 2 as LMCache 0.5.7 has it:
                                        MemoryTags, PrefetchTaskSpec's allowed_l1/l2_memory_tags,
                                        submit_prefetch_task without skip_l2 */
} cbt_lmct_schema;
/* level_meta key (str) naming the layout: "lmcache-0.5.6" or "lmcache-0.5.7".
 * cbt's recorder writes it; LMCache does not (it is optional to the reader). */
#define CBT_LMCT_META_SCHEMA "trace_schema"

/* "lmcache-0.5.6", "lmcache-0.5.7", or "unknown". Static strings. */
CBT_API const char *cbt_lmct_schema_name(cbt_lmct_schema s);

/* ---- bounds: the writer refuses, and the reader rejects, anything past them -- */
#define CBT_LMCT_FRAME_MAX (16u << 20) /* bytes of msgpack in one frame */
#define CBT_LMCT_STR_MAX (1u << 20)    /* bytes in one str or bin */
#define CBT_LMCT_MAP_MAX 1024u         /* entries in one map (args, level_meta, nested) */
#define CBT_LMCT_ARRAY_MAX 65536u      /* items in one array */
#define CBT_LMCT_DEPTH_MAX 16u         /* maps/arrays inside a record's args or level_meta
                                          (LMCache's submit_prefetch_task nests 10) */
#define CBT_LMCT_BATCH_MAX (64u << 20) /* bytes of frames a writer may hold (set_batch) */

/* ---- values: what an argument (or a level_meta entry) holds ----------------- */
typedef enum cbt_lmct_type {
    CBT_LMCT_NIL = 0,
    CBT_LMCT_INT,   /* v.i; the reader gives negative msgpack ints */
    CBT_LMCT_UINT,  /* v.u; the reader gives non-negative msgpack ints */
    CBT_LMCT_FLOAT, /* v.f, written as float64 */
    CBT_LMCT_BOOL,  /* v.b */
    CBT_LMCT_STR,   /* v.s: UTF-8, not checked; the reader NUL-terminates it */
    CBT_LMCT_BYTES, /* v.s: a msgpack bin */
    CBT_LMCT_ARRAY, /* v.array */
    CBT_LMCT_MAP    /* v.map: str keys */
} cbt_lmct_type;

struct cbt_lmct_kv;

/* One typed value. Small and not versioned (like cbt_event): a new type is a
 * new enum value. */
typedef struct cbt_lmct_value {
    cbt_lmct_type type;
    union {
        int64_t i;
        uint64_t u;
        double f;
        bool b;
        struct {
            const char *ptr;
            uint32_t len;
        } s;
        struct {
            const struct cbt_lmct_value *items;
            uint32_t count;
        } array;
        struct {
            const struct cbt_lmct_kv *items;
            uint32_t count;
        } map;
    } v;
} cbt_lmct_value;

/* A map entry: a NUL-terminated key and its value. */
typedef struct cbt_lmct_kv {
    const char *key;
    cbt_lmct_value value;
} cbt_lmct_kv;

/* Builders for cbt_lmct_value literals: CBT_LMCT_KV("tokens", CBT_LMCT_U(7)). */
#define CBT_LMCT_I(x) ((cbt_lmct_value){.type = CBT_LMCT_INT, .v.i = (x)})
#define CBT_LMCT_U(x) ((cbt_lmct_value){.type = CBT_LMCT_UINT, .v.u = (x)})
#define CBT_LMCT_F(x) ((cbt_lmct_value){.type = CBT_LMCT_FLOAT, .v.f = (x)})
#define CBT_LMCT_B(x) ((cbt_lmct_value){.type = CBT_LMCT_BOOL, .v.b = (x)})
#define CBT_LMCT_S(p, n) ((cbt_lmct_value){.type = CBT_LMCT_STR, .v.s = {(p), (n)}})
#define CBT_LMCT_BIN(p, n) ((cbt_lmct_value){.type = CBT_LMCT_BYTES, .v.s = {(p), (n)}})
#define CBT_LMCT_KV(k, val) ((cbt_lmct_kv){.key = (k), .value = val})

/* ---- the header and a record: versioned structs (cbt.h) --------------------- */
#define CBT_LMCT_HEADER_VERSION 1
/* The file's first frame. The writer takes `level`, trace_schema_version
 * (0: CBT_LMCT_SCHEMA_VERSION; 1 or 2, else CBT_ERR_INVAL), the start times,
 * the config strings and level_meta from the caller and always writes magic
 * and CBT_LMCT_FORMAT_VERSION; a level_meta CBT_LMCT_META_SCHEMA that names
 * another schema than trace_schema_version is CBT_ERR_INVAL. The reader
 * fills every field (format_version and trace_schema_version as the file
 * has them). */
typedef struct cbt_lmct_header {
    uint32_t version, size;     /* CBT_LMCT_HEADER_VERSION, sizeof(cbt_lmct_header) */
    const char *level;          /* "gpu" (CBT_LMCT_LEVEL_GPU); NULL writes "gpu" */
    int64_t format_version;     /* read only */
    int64_t trace_schema_version; /* 1 (LMCache 0.5.6) or 2 (0.5.7); writer: 0 is 1 */
    double t_mono_start;        /* a monotonic clock at the recording's start, seconds */
    double t_wall_start;        /* unix seconds at the recording's start */
    const char *sm_config_json; /* the configuration that shapes spans, JSON; NULL writes "" */
    const char *sm_config_digest; /* its SHA-256 in hex; NULL writes "" */
    const cbt_lmct_kv *level_meta; /* level-specific metadata (cbt version, ...) */
    uint32_t level_meta_count;  /* 0: the key is left out, as msgspec does */
    uint32_t reserved;          /* zero */
} cbt_lmct_header;
CBT_ASSERT_NO_TAIL_PADDING_(cbt_lmct_header, reserved);
#define CBT_LMCT_HEADER_INIT {.version = CBT_LMCT_HEADER_VERSION, .size = sizeof(cbt_lmct_header)}

#define CBT_LMCT_RECORD_VERSION 1
/* One event. qualname names what happened; args its typed values. */
typedef struct cbt_lmct_record {
    uint32_t version, size; /* CBT_LMCT_RECORD_VERSION, sizeof(cbt_lmct_record) */
    double t_mono;          /* seconds since the header's t_mono_start */
    double t_wall;          /* unix seconds */
    const char *qualname;   /* NUL-terminated */
    const cbt_lmct_kv *args;
    uint32_t arg_count;
    uint32_t reserved;      /* zero */
} cbt_lmct_record;
CBT_ASSERT_NO_TAIL_PADDING_(cbt_lmct_record, reserved);
#define CBT_LMCT_RECORD_INIT {.version = CBT_LMCT_RECORD_VERSION, .size = sizeof(cbt_lmct_record)}

/* ---- writer ------------------------------------------------------------------ */
typedef struct cbt_lmct_writer cbt_lmct_writer;

/* Create (truncate) `path` and write the header frame. Each frame is encoded
 * in memory and handed to write(2) whole (no user-space buffer), so a crash
 * leaves every earlier frame complete and at most a cut tail, which the
 * reader reports as CBT_ERR_LMCT_TRUNCATED. CBT_ERR_INVAL for NULL;
 * CBT_ERR_VERSION for a header from a newer cbt (size/version);
 * CBT_ERR_LMCT_LIMIT past the bounds; CBT_ERR_IO; CBT_ERR_NOMEM;
 * CBT_ERR_UNSUPPORTED when cbt was built without msgpack-c. */
CBT_API cbt_status cbt_lmct_writer_open(const char *path, const cbt_lmct_header *h,
                                        cbt_lmct_writer **out);

/* The same on an open file descriptor, which the writer then owns (closed
 * by cbt_lmct_writer_close, and not on an error here). */
CBT_API cbt_status cbt_lmct_writer_open_fd(int fd, const cbt_lmct_header *h,
                                           cbt_lmct_writer **out);

/* Batch frames: hold complete frames in memory until they reach `bytes`,
 * then hand them to one write(2) (0, the default: every frame at once).
 * A crash then loses at most the frames of the batch, never a part of one.
 * Writes what is held first. CBT_ERR_INVAL past CBT_LMCT_BATCH_MAX. */
CBT_API cbt_status cbt_lmct_writer_set_batch(cbt_lmct_writer *w, size_t bytes);

/* Write the frames a batch holds (no fsync). */
CBT_API cbt_status cbt_lmct_writer_drain(cbt_lmct_writer *w);

/* Bytes written to the file so far (held frames not included). */
CBT_API uint64_t cbt_lmct_writer_bytes(const cbt_lmct_writer *w);

/* Encode `rec` and append it as one frame. A value nested deeper than
 * CBT_LMCT_DEPTH_MAX, a map/array/string past its bound, or a frame past
 * CBT_LMCT_FRAME_MAX is refused (CBT_ERR_LMCT_LIMIT) and nothing is written;
 * a NULL key or qualname is CBT_ERR_INVAL. CBT_ERR_IO when write(2) fails
 * (the writer then refuses further appends with CBT_ERR_IO). */
CBT_API cbt_status cbt_lmct_writer_append(cbt_lmct_writer *w, const cbt_lmct_record *rec);

/* The frames written so far are already in the kernel; this fsyncs them to
 * disk (one fsync(2)). */
CBT_API cbt_status cbt_lmct_writer_flush(cbt_lmct_writer *w);

/* Write what a batch holds, fsync, close and free. NULL is a no-op (CBT_OK). */
CBT_API cbt_status cbt_lmct_writer_close(cbt_lmct_writer *w);

/* ---- reader ------------------------------------------------------------------ */
typedef struct cbt_lmct_reader cbt_lmct_reader;

/* Open `path` and read and check its header, strictly, in LMCache's order:
 * CBT_ERR_IO (cannot open), CBT_ERR_LMCT_BEYOND_FILE (empty file, or the
 * header frame is longer than the file), CBT_ERR_LMCT_LIMIT (a frame length
 * past CBT_LMCT_FRAME_MAX, or a map/array/string/nesting past its bound),
 * CBT_ERR_LMCT_TYPE (not msgpack, a missing field, a field of the wrong
 * type, a "type" tag other than "header"), CBT_ERR_LMCT_BAD_MAGIC,
 * CBT_ERR_LMCT_FORMAT, CBT_ERR_LMCT_SCHEMA (a trace_schema_version other
 * than 1 or 2, or a level_meta CBT_LMCT_META_SCHEMA that is unknown or not
 * the number's). On any error *out is NULL and
 * nothing is left allocated; cbt_lmct_last_open_message() says why. */
CBT_API cbt_status cbt_lmct_reader_open(const char *path, cbt_lmct_reader **out);

/* The same, over `len` bytes at `data` (not copied: they must outlive the
 * reader). For tests and the fuzzer. */
CBT_API cbt_status cbt_lmct_reader_open_mem(const void *data, size_t len, cbt_lmct_reader **out);

/* The header read at open; owned by the reader, valid until close. */
CBT_API const cbt_lmct_header *cbt_lmct_reader_header(const cbt_lmct_reader *r);

/* The schema layout the header announced, which every record read so far
 * matched (CBT_LMCT_SCHEMA_UNKNOWN for NULL). */
CBT_API cbt_lmct_schema cbt_lmct_reader_schema(const cbt_lmct_reader *r);

/* The next record. CBT_OK with *rec set, or CBT_OK with *rec NULL at a clean
 * end (the file ends on a frame boundary). *rec and everything it points to
 * belong to the reader and stay valid until the next call or close.
 *   CBT_ERR_LMCT_TRUNCATED  the file ends inside a frame: a warning, the
 *                           records before it were complete; *rec is NULL
 *   CBT_ERR_LMCT_LIMIT      a frame length past CBT_LMCT_FRAME_MAX, or a
 *                           map/array/string/nesting past its bound
 *   CBT_ERR_LMCT_TYPE       the frame is not msgpack, or not a Record
 *   CBT_ERR_LMCT_SCHEMA     the record's content is another schema's than
 *                           the header's (a codec tag or field it lacks;
 *                           the message names it and whose it is)
 * After any of these the reader stops: later calls return the same status. */
CBT_API cbt_status cbt_lmct_reader_next(cbt_lmct_reader *r, const cbt_lmct_record **rec);

/* The byte offset of the next frame (the bytes read so far). */
CBT_API uint64_t cbt_lmct_reader_offset(const cbt_lmct_reader *r);

/* A sentence on the last error or warning, with the frame's byte offset
 * ("" when there was none); valid until the next call or close. */
CBT_API const char *cbt_lmct_reader_message(const cbt_lmct_reader *r);

/* The same for the last failed open on this thread. */
CBT_API const char *cbt_lmct_last_open_message(void);

/* Close and free. NULL is a no-op. */
CBT_API void cbt_lmct_reader_close(cbt_lmct_reader *r);

#ifdef __cplusplus
}
#endif
#endif /* CBT_LMCT_H */
