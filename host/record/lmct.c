/* host/record/lmct.c — owns the LMCT file codec (cbt/lmct.h): the writer and
 * the strict reader of LMCache's length-prefixed msgpack trace format.
 *
 * Encoding and decoding go through msgpack-c. Its C unpacker has no limits
 * (a map32 header in a 10-byte frame makes it allocate 2^32 entries), so the
 * reader first walks each frame's bytes itself (scan()), checking every
 * length against the bytes left and the CBT_LMCT_*_MAX bounds, and hands the
 * frame to msgpack_unpack_next() only once it is known to be one well-formed
 * object with bounded counts: what msgpack-c then allocates is bounded by
 * the frame's size, itself bounded by CBT_LMCT_FRAME_MAX. */
#include "cbt/lmct.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <msgpack.h>

#include "internal/lmct_schema.h"

/* ================================ writer ================================= */

struct cbt_lmct_writer {
    int fd;
    bool failed;         /* a write failed: the file's tail is unknown, refuse more */
    msgpack_sbuffer buf; /* complete frames not yet written, then the one being encoded */
    size_t frame_off;    /* where the frame being encoded starts in buf */
    size_t batch;        /* write when buf holds this much (0: every frame) */
    uint64_t written;    /* bytes in the file */
};

static cbt_status pack_str(msgpack_packer *pk, const char *s, size_t n)
{
    if (n > CBT_LMCT_STR_MAX)
        return CBT_ERR_LMCT_LIMIT;
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
    return CBT_OK;
}

static cbt_status pack_cstr(msgpack_packer *pk, const char *s)
{
    if (!s)
        return CBT_ERR_INVAL;
    return pack_str(pk, s, strlen(s));
}

static cbt_status pack_map(msgpack_packer *pk, const cbt_lmct_kv *kv, uint32_t n, unsigned depth);

static cbt_status pack_value(msgpack_packer *pk, const cbt_lmct_value *v, unsigned depth)
{
    switch (v->type) {
    case CBT_LMCT_NIL: msgpack_pack_nil(pk); return CBT_OK;
    case CBT_LMCT_INT: msgpack_pack_int64(pk, v->v.i); return CBT_OK;
    case CBT_LMCT_UINT: msgpack_pack_uint64(pk, v->v.u); return CBT_OK;
    case CBT_LMCT_FLOAT: msgpack_pack_double(pk, v->v.f); return CBT_OK;
    case CBT_LMCT_BOOL:
        if (v->v.b)
            msgpack_pack_true(pk);
        else
            msgpack_pack_false(pk);
        return CBT_OK;
    case CBT_LMCT_STR:
        if (v->v.s.len && !v->v.s.ptr)
            return CBT_ERR_INVAL;
        return pack_str(pk, v->v.s.ptr, v->v.s.len);
    case CBT_LMCT_BYTES:
        if (v->v.s.len && !v->v.s.ptr)
            return CBT_ERR_INVAL;
        if (v->v.s.len > CBT_LMCT_STR_MAX)
            return CBT_ERR_LMCT_LIMIT;
        msgpack_pack_bin(pk, v->v.s.len);
        msgpack_pack_bin_body(pk, v->v.s.ptr, v->v.s.len);
        return CBT_OK;
    case CBT_LMCT_ARRAY:
        if (depth >= CBT_LMCT_DEPTH_MAX || v->v.array.count > CBT_LMCT_ARRAY_MAX)
            return CBT_ERR_LMCT_LIMIT;
        if (v->v.array.count && !v->v.array.items)
            return CBT_ERR_INVAL;
        msgpack_pack_array(pk, v->v.array.count);
        for (uint32_t i = 0; i < v->v.array.count; i++) {
            cbt_status st = pack_value(pk, &v->v.array.items[i], depth + 1);
            if (st)
                return st;
        }
        return CBT_OK;
    case CBT_LMCT_MAP:
        if (depth >= CBT_LMCT_DEPTH_MAX)
            return CBT_ERR_LMCT_LIMIT;
        return pack_map(pk, v->v.map.items, v->v.map.count, depth + 1);
    }
    return CBT_ERR_INVAL;
}

static cbt_status pack_map(msgpack_packer *pk, const cbt_lmct_kv *kv, uint32_t n, unsigned depth)
{
    if (n > CBT_LMCT_MAP_MAX)
        return CBT_ERR_LMCT_LIMIT;
    if (n && !kv)
        return CBT_ERR_INVAL;
    msgpack_pack_map(pk, n);
    for (uint32_t i = 0; i < n; i++) {
        cbt_status st = pack_cstr(pk, kv[i].key);
        if (!st)
            st = pack_value(pk, &kv[i].value, depth);
        if (st)
            return st;
    }
    return CBT_OK;
}

/* Start a frame at the end of w->buf: four placeholder bytes for the length. */
static void frame_begin(cbt_lmct_writer *w)
{
    static const char zero[4];
    w->frame_off = w->buf.size;
    msgpack_sbuffer_write(&w->buf, zero, 4);
}

/* Write the complete frames held in w->buf, whole. A write that fails
 * part way (a full disk, a file-size limit) takes the batch's written part
 * back out of the file (ftruncate), so the file holds the frames before the
 * batch and none of it: the caller counts the batch as lost. */
static cbt_status write_pending(cbt_lmct_writer *w)
{
    size_t off = 0;
    uint64_t start = w->written;
    while (off < w->buf.size) {
        ssize_t k = write(w->fd, w->buf.data + off, w->buf.size - off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            w->failed = true;
            w->buf.size = 0;
            if (w->written != start && ftruncate(w->fd, (off_t)start) == 0)
                w->written = start;
            return CBT_ERR_IO;
        }
        off += (size_t)k;
        w->written += (uint64_t)k;
    }
    w->buf.size = 0;
    return CBT_OK;
}

/* Patch the length in; write the frame (with the batch it completes). An
 * encoding error (`st`) takes the frame back out. */
static cbt_status frame_end(cbt_lmct_writer *w, cbt_status st)
{
    if (!st && !w->buf.data)
        st = CBT_ERR_NOMEM;
    size_t n = w->buf.size - w->frame_off - 4;
    if (!st && n > CBT_LMCT_FRAME_MAX)
        st = CBT_ERR_LMCT_LIMIT;
    if (st) {
        w->buf.size = w->frame_off;
        return st;
    }
    unsigned char *p = (unsigned char *)w->buf.data + w->frame_off;
    p[0] = (unsigned char)(n >> 24);
    p[1] = (unsigned char)(n >> 16);
    p[2] = (unsigned char)(n >> 8);
    p[3] = (unsigned char)n;
    if (w->batch && w->buf.size < w->batch)
        return CBT_OK;
    return write_pending(w);
}

static cbt_status encode_header(cbt_lmct_writer *w, const cbt_lmct_header *h)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, &w->buf, msgpack_sbuffer_write);
    /* msgspec's order: the tag, then the fields as format.py declares them */
    bool meta = h->level_meta_count > 0;
    msgpack_pack_map(&pk, meta ? 10 : 9);
    cbt_status st = pack_cstr(&pk, "type");
    if (!st)
        st = pack_cstr(&pk, "header");
    if (!st)
        st = pack_cstr(&pk, "magic");
    if (st)
        return st;
    msgpack_pack_bin(&pk, 4);
    msgpack_pack_bin_body(&pk, CBT_LMCT_MAGIC, 4);
    pack_cstr(&pk, "format_version");
    msgpack_pack_int64(&pk, CBT_LMCT_FORMAT_VERSION);
    pack_cstr(&pk, "level");
    if ((st = pack_cstr(&pk, h->level ? h->level : CBT_LMCT_LEVEL_GPU)))
        return st;
    pack_cstr(&pk, "trace_schema_version");
    msgpack_pack_int64(&pk, h->trace_schema_version ? h->trace_schema_version : CBT_LMCT_SCHEMA_VERSION);
    pack_cstr(&pk, "t_mono_start");
    msgpack_pack_double(&pk, h->t_mono_start);
    pack_cstr(&pk, "t_wall_start");
    msgpack_pack_double(&pk, h->t_wall_start);
    pack_cstr(&pk, "sm_config_json");
    if ((st = pack_cstr(&pk, h->sm_config_json ? h->sm_config_json : "")))
        return st;
    pack_cstr(&pk, "sm_config_digest");
    if ((st = pack_cstr(&pk, h->sm_config_digest ? h->sm_config_digest : "")))
        return st;
    if (meta) {
        pack_cstr(&pk, "level_meta");
        if ((st = pack_map(&pk, h->level_meta, h->level_meta_count, 1)))
            return st;
    }
    return CBT_OK;
}

static cbt_status write_header(cbt_lmct_writer *w, const cbt_lmct_header *h)
{
    frame_begin(w);
    return frame_end(w, encode_header(w, h));
}

/* In-struct check (cbt.h): not smaller than the two header words, version
 * known, not larger than ours. */
static cbt_status check_in(uint32_t version, uint32_t size, uint32_t known, size_t ours,
                           const char *what)
{
    if (size < 2 * sizeof(uint32_t) || version == 0 || version > known || size > ours) {
        fprintf(stderr, "cbt: %s: version %u size %u, this libcbt knows version %u size %zu\n",
                what, version, size, known, ours);
        return CBT_ERR_VERSION;
    }
    return CBT_OK;
}

static cbt_status check_header_in(const cbt_lmct_header *h)
{
    cbt_status st = check_in(h->version, h->size, CBT_LMCT_HEADER_VERSION, sizeof *h, "cbt_lmct_header");
    if (st)
        return st;
    /* every field of version 1 is needed: a smaller size is refused */
    if (h->size < sizeof *h)
        return CBT_ERR_VERSION;
    /* the schema the caller asks for, and the one its level_meta names */
    cbt_lmct_schema s;
    char why[256];
    int64_t v = h->trace_schema_version ? h->trace_schema_version : CBT_LMCT_SCHEMA_VERSION;
    if (cbt_lmct_schema_of_header_(v, h->level_meta, h->level_meta ? h->level_meta_count : 0, &s,
                                   why, sizeof why)) {
        fprintf(stderr, "cbt: cbt_lmct_header: %s\n", why);
        return CBT_ERR_INVAL;
    }
    return CBT_OK;
}

static cbt_status open_on(int fd, const cbt_lmct_header *h, cbt_lmct_writer **out)
{
    cbt_lmct_writer *w = calloc(1, sizeof *w);
    if (!w)
        return CBT_ERR_NOMEM;
    msgpack_sbuffer_init(&w->buf);
    w->fd = fd;
    cbt_status st = write_header(w, h);
    if (st) {
        msgpack_sbuffer_destroy(&w->buf);
        free(w);
        return st;
    }
    *out = w;
    return CBT_OK;
}

cbt_status cbt_lmct_writer_open(const char *path, const cbt_lmct_header *h, cbt_lmct_writer **out)
{
    if (!out)
        return CBT_ERR_INVAL;
    *out = NULL;
    if (!path || !h)
        return CBT_ERR_INVAL;
    cbt_status st = check_header_in(h);
    if (st)
        return st;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return CBT_ERR_IO;
    if ((st = open_on(fd, h, out))) {
        close(fd);
        unlink(path);
    }
    return st;
}

cbt_status cbt_lmct_writer_open_fd(int fd, const cbt_lmct_header *h, cbt_lmct_writer **out)
{
    if (!out)
        return CBT_ERR_INVAL;
    *out = NULL;
    if (fd < 0 || !h)
        return CBT_ERR_INVAL;
    cbt_status st = check_header_in(h);
    return st ? st : open_on(fd, h, out);
}

cbt_status cbt_lmct_writer_set_batch(cbt_lmct_writer *w, size_t bytes)
{
    if (!w || bytes > CBT_LMCT_BATCH_MAX)
        return CBT_ERR_INVAL;
    w->batch = bytes;
    return w->buf.size ? write_pending(w) : CBT_OK;
}

cbt_status cbt_lmct_writer_drain(cbt_lmct_writer *w)
{
    if (!w)
        return CBT_ERR_INVAL;
    if (w->failed)
        return CBT_ERR_IO;
    return w->buf.size ? write_pending(w) : CBT_OK;
}

uint64_t cbt_lmct_writer_bytes(const cbt_lmct_writer *w) { return w ? w->written : 0; }

cbt_status cbt_lmct_writer_append(cbt_lmct_writer *w, const cbt_lmct_record *rec)
{
    if (!w || !rec || !rec->qualname)
        return CBT_ERR_INVAL;
    cbt_status st = check_in(rec->version, rec->size, CBT_LMCT_RECORD_VERSION, sizeof *rec, "cbt_lmct_record");
    if (st)
        return st;
    if (rec->size < sizeof *rec)
        return CBT_ERR_VERSION;
    if (w->failed)
        return CBT_ERR_IO;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &w->buf, msgpack_sbuffer_write);
    frame_begin(w);
    msgpack_pack_map(&pk, 5);
    pack_cstr(&pk, "type");
    pack_cstr(&pk, "record");
    pack_cstr(&pk, "t_mono");
    msgpack_pack_double(&pk, rec->t_mono);
    pack_cstr(&pk, "t_wall");
    msgpack_pack_double(&pk, rec->t_wall);
    pack_cstr(&pk, "qualname");
    st = pack_cstr(&pk, rec->qualname);
    if (!st) {
        pack_cstr(&pk, "args");
        st = pack_map(&pk, rec->args, rec->arg_count, 1);
    }
    return frame_end(w, st);
}

cbt_status cbt_lmct_writer_flush(cbt_lmct_writer *w)
{
    if (!w)
        return CBT_ERR_INVAL;
    return fsync(w->fd) == 0 ? CBT_OK : CBT_ERR_IO;
}

cbt_status cbt_lmct_writer_close(cbt_lmct_writer *w)
{
    if (!w)
        return CBT_OK;
    cbt_status st = w->failed ? CBT_ERR_IO : cbt_lmct_writer_drain(w);
    if (!st)
        st = cbt_lmct_writer_flush(w);
    if (close(w->fd) != 0 && !st)
        st = CBT_ERR_IO;
    msgpack_sbuffer_destroy(&w->buf);
    free(w);
    return st;
}

/* ================================ reader ================================= */

struct cbt_lmct_reader {
    FILE *f;
    uint64_t file_size;
    uint64_t offset;    /* of the next frame */
    cbt_status stopped; /* non-zero: every later next() returns it */
    unsigned char *frame;
    size_t frame_cap;
    msgpack_unpacked up; /* the frame's objects (msgpack-c's zone) */
    cbt_lmct_value *nodes; /* the frame's values, converted */
    size_t nodes_cap, nodes_used;
    char *strs;            /* NUL-terminated copies of its strings */
    size_t strs_cap, strs_used;
    cbt_lmct_value *keep_nodes; /* the header's values and strings, kept to close */
    char *keep_strs;
    cbt_lmct_header header;
    cbt_lmct_schema schema; /* the header's, which every record is held to */
    cbt_lmct_record record;
    char msg[256];
};

static _Thread_local char g_open_msg[256];

static void say(cbt_lmct_reader *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    va_end(ap);
}

/* ---- scan: one well-formed msgpack object with bounded counts ------------- */

typedef struct {
    const unsigned char *p, *end;
    size_t nodes; /* values, map entries counted as two (kv + value) */
    size_t strbytes;
    const char *why;
} scan_state;

static bool need(scan_state *s, size_t n)
{
    if ((size_t)(s->end - s->p) < n) {
        s->why = "ends inside a value";
        return false;
    }
    return true;
}

static uint64_t be(const unsigned char *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* CBT_OK, CBT_ERR_LMCT_TYPE (malformed) or CBT_ERR_LMCT_LIMIT. depth counts
 * containers: the frame's top map is depth 0. */
static cbt_status scan(scan_state *s, unsigned depth)
{
    if (!need(s, 1))
        return CBT_ERR_LMCT_TYPE;
    unsigned c = *s->p++;
    uint64_t n = 0;
    int kind = 0; /* 1 str/bin, 2 array, 3 map, 4 ext */
    s->nodes++;
    if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3)
        return CBT_OK;
    if ((c & 0xe0) == 0xa0) {
        n = c & 0x1f;
        kind = 1;
    } else if ((c & 0xf0) == 0x90) {
        n = c & 0x0f;
        kind = 2;
    } else if ((c & 0xf0) == 0x80) {
        n = c & 0x0f;
        kind = 3;
    } else {
        static const struct { unsigned char c, len, kind; } t[] = {
            {0xc4, 1, 1}, {0xc5, 2, 1}, {0xc6, 4, 1}, {0xd9, 1, 1}, {0xda, 2, 1}, {0xdb, 4, 1},
            {0xdc, 2, 2}, {0xdd, 4, 2}, {0xde, 2, 3}, {0xdf, 4, 3},
            {0xca, 4, 0}, {0xcb, 8, 0}, {0xcc, 1, 0}, {0xcd, 2, 0}, {0xce, 4, 0}, {0xcf, 8, 0},
            {0xd0, 1, 0}, {0xd1, 2, 0}, {0xd2, 4, 0}, {0xd3, 8, 0},
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            if (t[i].c != c)
                continue;
            if (!need(s, t[i].len))
                return CBT_ERR_LMCT_TYPE;
            if (t[i].kind == 0) {
                s->p += t[i].len;
                return CBT_OK;
            }
            n = be(s->p, t[i].len);
            s->p += t[i].len;
            kind = t[i].kind;
            break;
        }
        if (!kind) {
            s->why = "holds a msgpack ext or an unused type byte";
            return CBT_ERR_LMCT_TYPE;
        }
    }
    if (kind == 1) {
        if (n > CBT_LMCT_STR_MAX) {
            s->why = "holds a string longer than CBT_LMCT_STR_MAX";
            return CBT_ERR_LMCT_LIMIT;
        }
        if (!need(s, (size_t)n))
            return CBT_ERR_LMCT_TYPE;
        s->p += n;
        s->strbytes += n + 1;
        return CBT_OK;
    }
    if (depth > CBT_LMCT_DEPTH_MAX) {
        s->why = "nests maps/arrays deeper than CBT_LMCT_DEPTH_MAX";
        return CBT_ERR_LMCT_LIMIT;
    }
    if (kind == 2 && n > CBT_LMCT_ARRAY_MAX) {
        s->why = "holds an array longer than CBT_LMCT_ARRAY_MAX";
        return CBT_ERR_LMCT_LIMIT;
    }
    if (kind == 3 && n > CBT_LMCT_MAP_MAX) {
        s->why = "holds a map larger than CBT_LMCT_MAP_MAX";
        return CBT_ERR_LMCT_LIMIT;
    }
    uint64_t items = kind == 3 ? 2 * n : n;
    if (items > (uint64_t)(s->end - s->p)) { /* each item takes a byte at least */
        s->why = "holds a container longer than the frame";
        return CBT_ERR_LMCT_TYPE;
    }
    for (uint64_t i = 0; i < items; i++) {
        cbt_status st = scan(s, depth + 1);
        if (st)
            return st;
    }
    return CBT_OK;
}

/* ---- convert msgpack-c objects into cbt_lmct_value ------------------------ */

static const char *copy_str(cbt_lmct_reader *r, const char *p, uint32_t n)
{
    char *d = r->strs + r->strs_used; /* scan() sized strs for every string */
    if (n)
        memcpy(d, p, n);
    d[n] = '\0';
    r->strs_used += (size_t)n + 1;
    return d;
}

static cbt_lmct_value *take_nodes(cbt_lmct_reader *r, size_t n)
{
    cbt_lmct_value *v = r->nodes + r->nodes_used;
    r->nodes_used += n;
    return v;
}

static cbt_status convert_map(cbt_lmct_reader *r, const msgpack_object_map *m, const cbt_lmct_kv **items,
                              uint32_t *count, const char *where);

static cbt_status convert(cbt_lmct_reader *r, const msgpack_object *o, cbt_lmct_value *v, const char *where)
{
    memset(v, 0, sizeof *v);
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: v->type = CBT_LMCT_NIL; return CBT_OK;
    case MSGPACK_OBJECT_BOOLEAN: v->type = CBT_LMCT_BOOL; v->v.b = o->via.boolean; return CBT_OK;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: v->type = CBT_LMCT_UINT; v->v.u = o->via.u64; return CBT_OK;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: v->type = CBT_LMCT_INT; v->v.i = o->via.i64; return CBT_OK;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: v->type = CBT_LMCT_FLOAT; v->v.f = o->via.f64; return CBT_OK;
    case MSGPACK_OBJECT_STR:
        v->type = CBT_LMCT_STR;
        v->v.s.ptr = copy_str(r, o->via.str.ptr, o->via.str.size);
        v->v.s.len = o->via.str.size;
        return CBT_OK;
    case MSGPACK_OBJECT_BIN:
        v->type = CBT_LMCT_BYTES;
        v->v.s.ptr = copy_str(r, o->via.bin.ptr, o->via.bin.size);
        v->v.s.len = o->via.bin.size;
        return CBT_OK;
    case MSGPACK_OBJECT_ARRAY: {
        v->type = CBT_LMCT_ARRAY;
        cbt_lmct_value *items = take_nodes(r, o->via.array.size);
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            cbt_status st = convert(r, &o->via.array.ptr[i], &items[i], where);
            if (st)
                return st;
        }
        v->v.array.items = items;
        v->v.array.count = o->via.array.size;
        return CBT_OK;
    }
    case MSGPACK_OBJECT_MAP:
        v->type = CBT_LMCT_MAP;
        return convert_map(r, &o->via.map, &v->v.map.items, &v->v.map.count, where);
    default:
        say(r, "%s holds a value of msgpack type %d, which LMCT does not use", where, (int)o->type);
        return CBT_ERR_LMCT_TYPE;
    }
}

static cbt_status convert_map(cbt_lmct_reader *r, const msgpack_object_map *m, const cbt_lmct_kv **items,
                              uint32_t *count, const char *where)
{
    /* a kv is laid out in two value nodes' room (scan counted key + value,
     * and sizeof(cbt_lmct_kv) <= 2 * sizeof(cbt_lmct_value)) */
    _Static_assert(sizeof(cbt_lmct_kv) <= 2 * sizeof(cbt_lmct_value), "kv fits in two nodes");
    cbt_lmct_kv *kv = (cbt_lmct_kv *)(void *)take_nodes(r, 2 * (size_t)m->size);
    for (uint32_t i = 0; i < m->size; i++) {
        const msgpack_object *k = &m->ptr[i].key;
        if (k->type != MSGPACK_OBJECT_STR) {
            say(r, "%s has a map key that is not a str", where);
            return CBT_ERR_LMCT_TYPE;
        }
        kv[i].key = copy_str(r, k->via.str.ptr, k->via.str.size);
        cbt_status st = convert(r, &m->ptr[i].val, &kv[i].value, where);
        if (st)
            return st;
    }
    *items = kv;
    *count = m->size;
    return CBT_OK;
}

/* ---- frames ------------------------------------------------------------------ */

/* Read one frame into r->frame. CBT_OK with *len; CBT_ERR_NOT_FOUND at a clean
 * end; CBT_ERR_LMCT_TRUNCATED inside a frame; CBT_ERR_LMCT_LIMIT past
 * CBT_LMCT_FRAME_MAX; CBT_ERR_NOMEM. */
static cbt_status read_frame(cbt_lmct_reader *r, size_t *len)
{
    unsigned char pre[4];
    size_t got = fread(pre, 1, 4, r->f);
    if (got == 0)
        return CBT_ERR_NOT_FOUND;
    if (got < 4) {
        say(r, "the frame at offset %llu: its length prefix is cut after %zu of 4 bytes",
            (unsigned long long)r->offset, got);
        return CBT_ERR_LMCT_TRUNCATED;
    }
    uint32_t n = (uint32_t)be(pre, 4);
    if (n > CBT_LMCT_FRAME_MAX) {
        say(r, "the frame at offset %llu claims %u bytes, more than CBT_LMCT_FRAME_MAX (%u)",
            (unsigned long long)r->offset, n, CBT_LMCT_FRAME_MAX);
        return CBT_ERR_LMCT_LIMIT;
    }
    if ((uint64_t)n > r->file_size - r->offset - 4) {
        say(r, "the frame at offset %llu claims %u bytes; the file has %llu after its prefix",
            (unsigned long long)r->offset, n, (unsigned long long)(r->file_size - r->offset - 4));
        return CBT_ERR_LMCT_TRUNCATED;
    }
    if (n > r->frame_cap) {
        unsigned char *b = realloc(r->frame, n);
        if (!b)
            return CBT_ERR_NOMEM;
        r->frame = b;
        r->frame_cap = n;
    }
    if (fread(r->frame, 1, n, r->f) != n) {
        say(r, "the frame at offset %llu is cut short", (unsigned long long)r->offset);
        return CBT_ERR_LMCT_TRUNCATED;
    }
    *len = n;
    return CBT_OK;
}

static bool grow(void **p, size_t *cap, size_t need_bytes)
{
    if (need_bytes <= *cap)
        return true;
    void *b = realloc(*p, need_bytes);
    if (!b)
        return false;
    *p = b;
    *cap = need_bytes;
    return true;
}

/* Scan, unpack and make room for converting r->frame[0..len). The frame's
 * root must be a map. what: "header" / "record" for messages. */
static cbt_status unpack_frame(cbt_lmct_reader *r, size_t len, const char *what, const msgpack_object_map **root)
{
    if (len == 0) { /* (and r->frame may still be NULL: no pointer arithmetic on it) */
        say(r, "the %s frame at offset %llu is empty", what, (unsigned long long)r->offset);
        return CBT_ERR_LMCT_TYPE;
    }
    scan_state s = {.p = r->frame, .end = r->frame + len, .why = "is malformed"};
    cbt_status st = scan(&s, 0);
    if (!st && s.p != s.end) {
        s.why = "has bytes after its one msgpack object";
        st = CBT_ERR_LMCT_TYPE;
    }
    if (st) {
        say(r, "the %s frame at offset %llu %s", what, (unsigned long long)r->offset, s.why);
        return st;
    }
    if (!grow((void **)&r->nodes, &r->nodes_cap, s.nodes * 2 * sizeof(cbt_lmct_value)) ||
        !grow((void **)&r->strs, &r->strs_cap, s.strbytes + 1))
        return CBT_ERR_NOMEM;
    r->nodes_used = r->strs_used = 0;
    msgpack_unpacked_destroy(&r->up);
    msgpack_unpacked_init(&r->up);
    size_t off = 0;
    msgpack_unpack_return ret = msgpack_unpack_next(&r->up, (const char *)r->frame, len, &off);
    if (ret != MSGPACK_UNPACK_SUCCESS || off != len) {
        say(r, "the %s frame at offset %llu: msgpack-c could not unpack it (%d)", what,
            (unsigned long long)r->offset, (int)ret);
        return ret == MSGPACK_UNPACK_NOMEM_ERROR ? CBT_ERR_NOMEM : CBT_ERR_LMCT_TYPE;
    }
    if (r->up.data.type != MSGPACK_OBJECT_MAP) {
        say(r, "the %s frame at offset %llu is not a msgpack map", what, (unsigned long long)r->offset);
        return CBT_ERR_LMCT_TYPE;
    }
    *root = &r->up.data.via.map;
    return CBT_OK;
}

static const msgpack_object *field(const msgpack_object_map *m, const char *name)
{
    size_t n = strlen(name);
    for (uint32_t i = 0; i < m->size; i++) {
        const msgpack_object *k = &m->ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n && memcmp(k->via.str.ptr, name, n) == 0)
            return &m->ptr[i].val;
    }
    return NULL;
}

/* A required field of one msgpack type (floats take ints too, as msgspec's
 * float fields do). NULL and a message when missing or of another type. */
typedef enum { F_STR, F_BIN, F_INT, F_FLOAT, F_MAP } field_kind;

static const msgpack_object *need_field(cbt_lmct_reader *r, const msgpack_object_map *m, const char *what,
                                        const char *name, field_kind k, bool optional)
{
    const msgpack_object *o = field(m, name);
    static const char *const kind_name[] = {"str", "bin", "int", "float", "map"};
    if (!o) {
        if (!optional)
            say(r, "the %s frame at offset %llu has no \"%s\"", what, (unsigned long long)r->offset, name);
        return NULL;
    }
    bool ok = false;
    switch (k) {
    case F_STR: ok = o->type == MSGPACK_OBJECT_STR; break;
    case F_BIN: ok = o->type == MSGPACK_OBJECT_BIN; break;
    case F_INT:
        ok = o->type == MSGPACK_OBJECT_POSITIVE_INTEGER || o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER;
        break;
    case F_FLOAT:
        ok = o->type == MSGPACK_OBJECT_FLOAT64 || o->type == MSGPACK_OBJECT_FLOAT32 ||
             o->type == MSGPACK_OBJECT_POSITIVE_INTEGER || o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER;
        break;
    case F_MAP: ok = o->type == MSGPACK_OBJECT_MAP; break;
    }
    if (!ok) {
        say(r, "the %s frame at offset %llu: \"%s\" is not a msgpack %s", what, (unsigned long long)r->offset,
            name, kind_name[k]);
        return NULL;
    }
    return o;
}

static double as_double(const msgpack_object *o)
{
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        return (double)o->via.u64;
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return (double)o->via.i64;
    return o->via.f64;
}

static int64_t as_int(const msgpack_object *o)
{
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        return o->via.u64 > INT64_MAX ? INT64_MAX : (int64_t)o->via.u64;
    return o->via.i64;
}

/* The "type" tag: absent is accepted (msgspec accepts it for a struct
 * decoded by itself), any other value is not. */
static bool check_tag(cbt_lmct_reader *r, const msgpack_object_map *m, const char *what)
{
    const msgpack_object *t = field(m, "type");
    if (!t)
        return true;
    size_t n = strlen(what);
    if (t->type == MSGPACK_OBJECT_STR && t->via.str.size == n && memcmp(t->via.str.ptr, what, n) == 0)
        return true;
    say(r, "the frame at offset %llu has a \"type\" other than \"%s\"", (unsigned long long)r->offset, what);
    return false;
}

static const char *dup_obj_str(cbt_lmct_reader *r, const msgpack_object *o)
{
    return copy_str(r, o->via.str.ptr, o->via.str.size);
}

static cbt_status read_header(cbt_lmct_reader *r)
{
    size_t len;
    cbt_status st = read_frame(r, &len);
    if (st == CBT_ERR_NOT_FOUND || st == CBT_ERR_LMCT_TRUNCATED) {
        if (st == CBT_ERR_NOT_FOUND)
            say(r, "the file is empty: no header frame");
        return CBT_ERR_LMCT_BEYOND_FILE;
    }
    if (st)
        return st;
    const msgpack_object_map *m;
    if ((st = unpack_frame(r, len, "header", &m)))
        return st;
    if (!check_tag(r, m, "header"))
        return CBT_ERR_LMCT_TYPE;
    const msgpack_object *magic = need_field(r, m, "header", "magic", F_BIN, false);
    const msgpack_object *fv = magic ? need_field(r, m, "header", "format_version", F_INT, false) : NULL;
    const msgpack_object *level = fv ? need_field(r, m, "header", "level", F_STR, false) : NULL;
    const msgpack_object *sv = level ? need_field(r, m, "header", "trace_schema_version", F_INT, false) : NULL;
    const msgpack_object *tm = sv ? need_field(r, m, "header", "t_mono_start", F_FLOAT, false) : NULL;
    const msgpack_object *tw = tm ? need_field(r, m, "header", "t_wall_start", F_FLOAT, false) : NULL;
    const msgpack_object *cj = tw ? need_field(r, m, "header", "sm_config_json", F_STR, false) : NULL;
    const msgpack_object *cd = cj ? need_field(r, m, "header", "sm_config_digest", F_STR, false) : NULL;
    if (!cd)
        return CBT_ERR_LMCT_TYPE;
    const msgpack_object *meta = field(m, "level_meta");
    if (meta && !need_field(r, m, "header", "level_meta", F_MAP, false))
        return CBT_ERR_LMCT_TYPE;
    /* LMCache's order of checks: magic, format_version, trace_schema_version */
    if (magic->via.bin.size != 4 || memcmp(magic->via.bin.ptr, CBT_LMCT_MAGIC, 4) != 0) {
        say(r, "bad magic: the header's magic is not \"LMCT\"");
        return CBT_ERR_LMCT_BAD_MAGIC;
    }
    cbt_lmct_header *h = &r->header;
    h->version = CBT_LMCT_HEADER_VERSION;
    h->size = sizeof *h;
    h->format_version = as_int(fv);
    h->trace_schema_version = as_int(sv);
    if (h->format_version != CBT_LMCT_FORMAT_VERSION) {
        say(r, "unsupported format_version %lld (this cbt reads %d)", (long long)h->format_version,
            CBT_LMCT_FORMAT_VERSION);
        return CBT_ERR_LMCT_FORMAT;
    }
    /* the number first, as LMCache checks it; the layout level_meta names below */
    if (h->trace_schema_version != CBT_LMCT_SCHEMA_LMCACHE_056 &&
        h->trace_schema_version != CBT_LMCT_SCHEMA_LMCACHE_057)
        return cbt_lmct_schema_of_header_(h->trace_schema_version, NULL, 0, &r->schema, r->msg,
                                          sizeof r->msg);
    h->level = dup_obj_str(r, level);
    h->t_mono_start = as_double(tm);
    h->t_wall_start = as_double(tw);
    h->sm_config_json = dup_obj_str(r, cj);
    h->sm_config_digest = dup_obj_str(r, cd);
    if (meta && (st = convert_map(r, &meta->via.map, &h->level_meta, &h->level_meta_count, "level_meta")))
        return st;
    if ((st = cbt_lmct_schema_of_header_(h->trace_schema_version, h->level_meta, h->level_meta_count,
                                         &r->schema, r->msg, sizeof r->msg)))
        return st;
    /* the header's values stay: the record arenas start past them */
    r->offset += 4 + len;
    return CBT_OK;
}

/* The header's converted values live at the start of nodes/strs; move them
 * into their own blocks so record frames can reuse the arenas. */
static cbt_status keep_header(cbt_lmct_reader *r)
{
    cbt_lmct_value *nodes = r->nodes;
    char *strs = r->strs;
    r->nodes = NULL;
    r->strs = NULL;
    r->nodes_cap = r->strs_cap = 0;
    r->keep_nodes = nodes;
    r->keep_strs = strs;
    return CBT_OK;
}

static cbt_status open_common(cbt_lmct_reader *r, cbt_lmct_reader **out)
{
    msgpack_unpacked_init(&r->up);
    cbt_status st = read_header(r);
    if (!st)
        st = keep_header(r);
    if (st) {
        snprintf(g_open_msg, sizeof g_open_msg, "%s", r->msg[0] ? r->msg : cbt_strerror(st));
        cbt_lmct_reader_close(r);
        return st;
    }
    g_open_msg[0] = '\0';
    r->msg[0] = '\0';
    *out = r;
    return CBT_OK;
}

cbt_status cbt_lmct_reader_open(const char *path, cbt_lmct_reader **out)
{
    if (!out)
        return CBT_ERR_INVAL;
    *out = NULL;
    if (!path)
        return CBT_ERR_INVAL;
    cbt_lmct_reader *r = calloc(1, sizeof *r);
    if (!r)
        return CBT_ERR_NOMEM;
    r->f = fopen(path, "rb");
    struct stat sb;
    if (!r->f || fstat(fileno(r->f), &sb) != 0) {
        snprintf(g_open_msg, sizeof g_open_msg, "%s: %s", path, strerror(errno));
        if (r->f)
            fclose(r->f);
        free(r);
        return CBT_ERR_IO;
    }
    r->file_size = (uint64_t)sb.st_size;
    return open_common(r, out);
}

cbt_status cbt_lmct_reader_open_mem(const void *data, size_t len, cbt_lmct_reader **out)
{
    if (!out)
        return CBT_ERR_INVAL;
    *out = NULL;
    if (!data && len)
        return CBT_ERR_INVAL;
    cbt_lmct_reader *r = calloc(1, sizeof *r);
    if (!r)
        return CBT_ERR_NOMEM;
    static const char empty[1];
    r->f = fmemopen(len ? (void *)(uintptr_t)data : (void *)(uintptr_t)empty, len ? len : 1, "rb");
    if (!r->f) {
        free(r);
        return CBT_ERR_NOMEM;
    }
    if (!len)
        fgetc(r->f); /* fmemopen wants a size of 1 at least: consume it */
    r->file_size = len;
    return open_common(r, out);
}

const cbt_lmct_header *cbt_lmct_reader_header(const cbt_lmct_reader *r)
{
    return r ? &r->header : NULL;
}

cbt_lmct_schema cbt_lmct_reader_schema(const cbt_lmct_reader *r)
{
    return r ? r->schema : CBT_LMCT_SCHEMA_UNKNOWN;
}

cbt_status cbt_lmct_reader_next(cbt_lmct_reader *r, const cbt_lmct_record **rec)
{
    if (!rec)
        return CBT_ERR_INVAL;
    *rec = NULL;
    if (!r)
        return CBT_ERR_INVAL;
    if (r->stopped)
        return r->stopped == CBT_ERR_NOT_FOUND ? CBT_OK : r->stopped;
    r->msg[0] = '\0';
    size_t len;
    cbt_status st = read_frame(r, &len);
    const msgpack_object_map *m = NULL;
    if (!st)
        st = unpack_frame(r, len, "record", &m);
    if (!st && !check_tag(r, m, "record"))
        st = CBT_ERR_LMCT_TYPE;
    const msgpack_object *tm = NULL, *tw = NULL, *qn = NULL, *args = NULL;
    if (!st) {
        tm = need_field(r, m, "record", "t_mono", F_FLOAT, false);
        tw = tm ? need_field(r, m, "record", "t_wall", F_FLOAT, false) : NULL;
        qn = tw ? need_field(r, m, "record", "qualname", F_STR, false) : NULL;
        args = qn ? need_field(r, m, "record", "args", F_MAP, false) : NULL;
        if (!args)
            st = CBT_ERR_LMCT_TYPE;
    }
    cbt_lmct_record *out = &r->record;
    if (!st) {
        memset(out, 0, sizeof *out);
        out->version = CBT_LMCT_RECORD_VERSION;
        out->size = sizeof *out;
        out->t_mono = as_double(tm);
        out->t_wall = as_double(tw);
        out->qualname = dup_obj_str(r, qn);
        st = convert_map(r, &args->via.map, &out->args, &out->arg_count, "args");
    }
    if (!st) {
        char why[200];
        st = cbt_lmct_schema_check_record_(r->schema, out->qualname, out->args, out->arg_count, why,
                                           sizeof why);
        size_t ql = strlen(out->qualname);
        if (st)
            say(r, "the record at offset %llu (%s%s): %s", (unsigned long long)r->offset,
                ql > 48 ? "..." : "", out->qualname + (ql > 48 ? ql - 48 : 0), why);
    }
    if (st) {
        r->stopped = st;
        return st == CBT_ERR_NOT_FOUND ? CBT_OK : st;
    }
    r->offset += 4 + len;
    *rec = out;
    return CBT_OK;
}

const char *cbt_lmct_reader_message(const cbt_lmct_reader *r)
{
    return r ? r->msg : "";
}

uint64_t cbt_lmct_reader_offset(const cbt_lmct_reader *r) { return r ? r->offset : 0; }

const char *cbt_lmct_last_open_message(void)
{
    return g_open_msg;
}

void cbt_lmct_reader_close(cbt_lmct_reader *r)
{
    if (!r)
        return;
    if (r->f)
        fclose(r->f);
    msgpack_unpacked_destroy(&r->up);
    free(r->frame);
    free(r->nodes);
    free(r->strs);
    free(r->keep_nodes);
    free(r->keep_strs);
    free(r);
}
