/* host/spans/sink_jsonl.c — owns the JSON-lines span file: one span per line.
 *
 * Schema (docs/spans.md): trace_id, span_id, parent_span_id (hex; "" for a
 * root), name, kind, start_ns, end_ns (unix ns integers), status, incomplete,
 * attributes (an object: int -> JSON integer, double -> JSON number that
 * always has a '.' or exponent, bool, string), dropped_attributes, events
 * (an array, in the order they were added, of {name, time_unix_nano,
 * attributes, dropped_attributes}), dropped_events, truncated_attributes.
 * An array attribute is a plain JSON array of its elements ([1,2,3],
 * ["a","b"], [true,false], doubles as the scalars are), written whole.
 * A line is at most CBT_SPAN_JSON_MAX bytes (internal/json.h) for a span
 * without arrays; one with arrays may be longer (a 128 k-token prompt is
 * about 1 MB): it is written from a heap buffer taken for it alone, up to
 * CBT_SPAN_JSON_BIG_MAX (64 MiB), and freed after its write; a span longer
 * still (or with no memory for it) is lost, counted in `lost`.
 *
 * Writing: lines collect in the sink's own buffer (JSONL_FILL bytes, or
 * JSONL_SPANS lines) and go to the file with write(2) when it is full and at
 * each flush, so the sink knows which spans a failed write held: those whose
 * line did not reach the file whole are lost, counted in `lost`
 * (cbt_sink.spans_lost), and the call that wrote returns CBT_ERR_IO, which
 * the tracer counts once as a sink error. The buffer is then emptied and
 * later spans are tried again (a disk that fills up may be freed). `lost` is
 * atomic: cbt_metrics_get reads it from any thread.
 *
 * A short write leaves the start of a line in the file. Before anything more
 * is written (the next buffer, or the close), that fragment is cut off with
 * ftruncate back to where the last whole line ended, so a later line is
 * never glued onto it. Where the file cannot be truncated (a pipe, a device)
 * a '\n' is written instead, so the fragment stands on a line of its own;
 * if that fails too, the buffer is not written (its spans are counted lost)
 * and the mend is tried again at the next write. So every line in the file
 * is one whole span, or (only without ftruncate) a lone fragment that no
 * span is counted as delivered in.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cbt/span.h"
#include "internal/abi.h"
#include "internal/json.h"

static const char *kind_str(uint8_t k)
{
    switch (k) {
    case CBT_SPAN_KIND_INTERNAL: return "internal";
    case CBT_SPAN_KIND_SERVER: return "server";
    case CBT_SPAN_KIND_CLIENT: return "client";
    case CBT_SPAN_KIND_PRODUCER: return "producer";
    case CBT_SPAN_KIND_CONSUMER: return "consumer";
    default: return "unspecified";
    }
}

static const char *status_str(uint8_t s)
{
    return s == CBT_SPAN_STATUS_OK ? "ok" : s == CBT_SPAN_STATUS_ERROR ? "error" : "unset";
}

/* The attributes of `owner` (0: the span, k: event k - 1) as one object. */
static void attrs_of(cbt_jbuf *b, const cbt_span *s, uint8_t owner)
{
    cbt_jbuf_raw(b, "{", 1);
    bool first = true;
    uint32_t na = s->n_attrs < CBT_SPAN_ATTR_MAX ? s->n_attrs : CBT_SPAN_ATTR_MAX;
    for (uint32_t i = 0; i < na; i++) {
        const cbt_attr *a = &s->attrs[i];
        if (a->owner != owner)
            continue;
        if (!first)
            cbt_jbuf_raw(b, ",", 1);
        first = false;
        cbt_jbuf_attr(b, s, a);
    }
    cbt_jbuf_raw(b, "}", 1);
}

size_t cbt_span_to_json(const cbt_span *s, char *buf, size_t cap)
{
    cbt_jbuf b = {.p = buf, .cap = cap, .need = 0};
    static const uint8_t zero[8];
    cbt_jbuf_cstr(&b, "{\"trace_id\":");
    cbt_jbuf_hex(&b, s->ctx.trace_id, 16);
    cbt_jbuf_cstr(&b, ",\"span_id\":");
    cbt_jbuf_hex(&b, s->ctx.span_id, 8);
    cbt_jbuf_cstr(&b, ",\"parent_span_id\":");
    if (memcmp(s->parent_span_id, zero, 8) == 0)
        cbt_jbuf_cstr(&b, "\"\"");
    else
        cbt_jbuf_hex(&b, s->parent_span_id, 8);
    cbt_jbuf_cstr(&b, ",\"name\":");
    cbt_jbuf_str(&b, cbt_name_str(s->name), cbt_name_len(s->name));
    cbt_jbuf_fmt(&b, ",\"kind\":\"%s\",\"start_ns\":%llu,\"end_ns\":%llu,\"status\":\"%s\"",
                 kind_str(s->kind), (unsigned long long)s->start_ns,
                 (unsigned long long)s->end_ns, status_str(s->status));
    cbt_jbuf_fmt(&b, ",\"incomplete\":%s,\"attributes\":",
                 (s->flags & CBT_SPANF_INCOMPLETE) ? "true" : "false");
    attrs_of(&b, s, 0);
    cbt_jbuf_fmt(&b, ",\"dropped_attributes\":%u,\"events\":[", (unsigned)s->attrs_dropped);
    uint32_t ne = s->n_events < CBT_SPAN_EVENTS_MAX ? s->n_events : CBT_SPAN_EVENTS_MAX;
    for (uint32_t e = 0; e < ne; e++) {
        const cbt_span_event *ev = &s->events[e];
        cbt_jbuf_cstr(&b, e ? ",{\"name\":" : "{\"name\":");
        cbt_jbuf_str(&b, cbt_name_str(ev->name), cbt_name_len(ev->name));
        cbt_jbuf_fmt(&b, ",\"time_unix_nano\":%llu,\"attributes\":",
                     (unsigned long long)ev->time_ns);
        attrs_of(&b, s, (uint8_t)(e + 1));
        cbt_jbuf_fmt(&b, ",\"dropped_attributes\":%u}", (unsigned)ev->attrs_dropped);
    }
    cbt_jbuf_fmt(&b, "],\"dropped_events\":%u,\"truncated_attributes\":%u}\n",
                 (unsigned)s->events_dropped, (unsigned)s->attrs_truncated);
    if (b.need < cap)
        buf[b.need] = '\0';
    return b.need;
}

#define JSONL_FILL (64u * 1024u) /* bytes that make a write */
#define JSONL_SPANS 1024u        /* lines that make a write */

typedef struct jsonl_sink {
    int fd;
    size_t len;                    /* bytes in buf */
    uint32_t n;                    /* lines in buf */
    uint32_t ends[JSONL_SPANS];    /* where each line of buf ends */
    bool cut;                      /* a short write left part of a line in the file */
    off_t whole_end;               /* cut: where the last whole line ends (-1: unknown) */
    _Atomic uint64_t lost;         /* spans never written whole */
    char *buf;                     /* JSONL_CAP bytes; for a long span's line alone, more */
    size_t cap;
} jsonl_sink;

/* room for one more line of a span without arrays past the fill mark */
#define JSONL_CAP ((size_t)JSONL_FILL + CBT_SPAN_JSON_MAX)

/* After a short write: take the fragment of the cut line out of the file
 * (ftruncate to whole_end, and write from there on), or, where that is not
 * possible, end it with a '\n'. 1 when the file ends with a whole line (or
 * a fragment on a line of its own) again, 0 when neither worked. */
static int mend(jsonl_sink *j)
{
    if (j->whole_end >= 0 && ftruncate(j->fd, j->whole_end) == 0) {
        if (lseek(j->fd, j->whole_end, SEEK_SET) != j->whole_end)
            return 0; /* a write now would leave a hole; try again next time */
        j->cut = false;
        return 1;
    }
    for (;;) {
        ssize_t w = write(j->fd, "\n", 1);
        if (w < 0 && errno == EINTR)
            continue;
        if (w != 1)
            return 0;
        j->cut = false;
        return 1;
    }
}

/* Write the buffer out and empty it. CBT_ERR_IO when the file took less than
 * all of it: the lines not written whole are counted lost, and the fragment
 * of a line cut short is remembered, for mend() before the next write. */
static cbt_status write_out(jsonl_sink *j)
{
    if (j->cut && !mend(j)) {
        /* the fragment is still open: a line written now would join it */
        cbt_status st = j->n ? CBT_ERR_IO : CBT_OK;
        atomic_fetch_add_explicit(&j->lost, j->n, memory_order_relaxed);
        j->len = 0;
        j->n = 0;
        return st;
    }
    size_t done = 0;
    while (done < j->len) {
        ssize_t w = write(j->fd, j->buf + done, j->len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    cbt_status st = CBT_OK;
    if (done < j->len) {
        uint32_t whole = 0;
        while (whole < j->n && j->ends[whole] <= done)
            whole++;
        atomic_fetch_add_explicit(&j->lost, j->n - whole, memory_order_relaxed);
        size_t kept = whole ? j->ends[whole - 1] : 0; /* bytes of whole lines written */
        if (done > kept) {
            /* the file position is just past the fragment (none for a pipe) */
            off_t at = lseek(j->fd, 0, SEEK_CUR);
            j->cut = true;
            j->whole_end = at >= 0 ? at - (off_t)(done - kept) : -1;
        }
        st = CBT_ERR_IO;
    }
    j->len = 0;
    j->n = 0;
    return st;
}

/* A span longer than the room left (only one with arrays can be): the lines
 * before it go out, then its own line from a buffer of its size (at most
 * CBT_SPAN_JSON_BIG_MAX), written at once; the buffer shrinks back after. */
static cbt_status long_line(jsonl_sink *j, const cbt_span *s, size_t need, cbt_status st)
{
    if (j->len) {
        cbt_status w = write_out(j);
        if (w != CBT_OK)
            st = w;
    }
    if (need >= CBT_SPAN_JSON_BIG_MAX) {
        atomic_fetch_add_explicit(&j->lost, 1, memory_order_relaxed);
        return CBT_ERR_FULL;
    }
    char *big = realloc(j->buf, need + 1);
    if (!big) {
        atomic_fetch_add_explicit(&j->lost, 1, memory_order_relaxed);
        return CBT_ERR_NOMEM;
    }
    j->buf = big;
    j->cap = need + 1;
    size_t n = cbt_span_to_json(s, j->buf, j->cap); /* the same bytes: n == need */
    if (n < j->cap) {
        j->len = n;
        j->ends[j->n++] = (uint32_t)n;
        cbt_status w = write_out(j);
        if (w != CBT_OK)
            st = w;
    } else {
        atomic_fetch_add_explicit(&j->lost, 1, memory_order_relaxed);
        st = CBT_ERR_FULL;
    }
    char *small = realloc(j->buf, JSONL_CAP); /* give the memory back */
    if (small) {
        j->buf = small;
        j->cap = JSONL_CAP;
    }
    return st;
}

static cbt_status jsonl_on_span(void *ctx, const cbt_span *s)
{
    jsonl_sink *j = ctx;
    cbt_status st = CBT_OK;
    if (j->len > JSONL_FILL || j->n == JSONL_SPANS)
        st = write_out(j); /* the spans before this one */
    size_t n = cbt_span_to_json(s, j->buf + j->len, j->cap - j->len);
    if (n >= j->cap - j->len)
        return long_line(j, s, n, st); /* only a span with arrays: the room left
                                          is at least CBT_SPAN_JSON_MAX */
    j->len += n;
    j->ends[j->n++] = (uint32_t)j->len;
    return st;
}

static cbt_status jsonl_flush(void *ctx) { return write_out(ctx); }

static uint64_t jsonl_spans_lost(void *ctx)
{
    jsonl_sink *j = ctx;
    return atomic_load_explicit(&j->lost, memory_order_relaxed);
}

static void jsonl_destroy(void *ctx)
{
    jsonl_sink *j = ctx;
    (void)write_out(j); /* empty after cbt_shutdown's last flush; mends a cut line */
    close(j->fd);
    free(j->buf);
    free(j);
}

/* cbt/span.h's inline cbt_jsonl_sink_create() set sink_out's version and
 * size: at most that many bytes are written (internal/abi.h). */
cbt_status cbt_jsonl_sink_create_into(const char *path, cbt_sink *sink_out)
{
    if (!path || !*path || !sink_out)
        return CBT_ERR_INVAL;
    cbt_status abi = cbt_abi_out_check_(sink_out);
    if (abi)
        return abi;
    jsonl_sink *j = calloc(1, sizeof *j);
    if (!j)
        return CBT_ERR_NOMEM;
    j->cap = JSONL_CAP;
    j->buf = malloc(j->cap);
    if (!j->buf) {
        free(j);
        return CBT_ERR_NOMEM;
    }
    /* A FIFO: opened without waiting for a reader (a plain open would wait
     * for one forever); none is an error, said now. Its writes then happen
     * on the sink's thread (the sink is not CBT_SINK_NONBLOCKING), so a
     * reader that stops makes spans be dropped and counted, never a
     * publisher or the harvester wait. */
    struct stat sb;
    int fifo = stat(path, &sb) == 0 && S_ISFIFO(sb.st_mode);
    j->fd = fifo ? open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC)
                 : open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (j->fd < 0) {
        int e = errno;
        if (fifo && e == ENXIO)
            fprintf(stderr, "cbt: span file '%s' is a FIFO with no reader: start the reader "
                            "first\n", path);
        else
            fprintf(stderr, "cbt: cannot open span file '%s': %s\n", path, strerror(e));
        free(j->buf);
        free(j);
        errno = e;
        return CBT_ERR_IO;
    }
    if (fifo) {
        int fl = fcntl(j->fd, F_GETFL);
        if (fl >= 0)
            (void)fcntl(j->fd, F_SETFL, fl & ~O_NONBLOCK); /* its thread may wait; nobody else */
    }
    atomic_init(&j->lost, 0);
    cbt_sink k;
    memset(&k, 0, sizeof k);
    k.name = "jsonl";
    k.ctx = j;
    k.on_span = jsonl_on_span;
    k.flush = jsonl_flush;
    k.destroy = jsonl_destroy;
    k.spans_lost = jsonl_spans_lost;
    cbt_abi_out_(sink_out, &k, sizeof k, CBT_SINK_VERSION);
    return CBT_OK;
}
