/* exporter/otlp_file.c — owns the OTLP JSON file (cbt/otlp.h,
 * cbt_otlp_json_sink_create): the OpenTelemetry Collector `file` exporter's
 * format, one ExportTraceServiceRequest in OTLP/JSON per line, so anything
 * that reads collector output (jq, `lmcache bench trace-analyze`) reads it.
 *
 * The sink may wait (it writes a file), so it runs on a sink thread behind
 * the bounded queue that drops and counts (host/spans/sink_thread.c); it is
 * flagged CBT_SINK_FLUSH_IDLE, so the thread flushes it each time it has
 * handed over everything queued: the spans that arrived together make one
 * line. A line is also closed after LINE_SPANS spans or once it holds
 * LINE_BYTES bytes (a span bigger than that, a long array, is a line of its
 * own), and at every flush.
 *
 * The encoding is otlp_encode.c's, in pieces (otlp_private.h): the head
 * (resource, scope) once per line, each span as it comes, the tail. A span
 * the encoder cannot take (out of memory) is counted lost and the line goes
 * on without it.
 *
 * Writing a line: one write(2) loop of the whole line with its '\n'. A short
 * write (a full disk) loses the line's spans (counted in spans_lost; the
 * call returns CBT_ERR_IO, a sink error) and leaves a fragment, which is cut
 * off with ftruncate back to where the line began, or where that is not
 * possible (a pipe) ended with a '\n' before anything more is written. So
 * the file holds whole lines after every flush, each valid JSON alone.
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

#include "cbt/otlp.h"
#include "internal/abi.h"
#include "otlp_private.h"
#include "otlp_wire.h"

#define LINE_SPANS 512u          /* spans that close a line (the exporter's max_batch) */
#define LINE_BYTES (1u << 20)    /* bytes that close a line */
#define LINE_KEEP (4u * LINE_BYTES) /* a buffer grown past this is freed after its line */

typedef struct otlp_file {
    int fd;
    bool cut;            /* a short write left a fragment in the file */
    off_t whole_end;     /* cut: where the last whole line ends (-1: unknown) */
    uint32_t n;          /* spans in the open line */
    cbt_buf head;        /* the request's head, encoded once */
    cbt_buf line;        /* the open line */
    _Atomic uint64_t lost;
} otlp_file;

/* After a short write: cut the fragment off (ftruncate), or end it with a
 * '\n'. 1 when the file ends with a whole line again. */
static int mend(otlp_file *f)
{
    if (f->whole_end >= 0 && ftruncate(f->fd, f->whole_end) == 0 &&
        lseek(f->fd, f->whole_end, SEEK_SET) == f->whole_end) {
        f->cut = false;
        return 1;
    }
    for (;;) {
        ssize_t w = write(f->fd, "\n", 1);
        if (w < 0 && errno == EINTR)
            continue;
        if (w != 1)
            return 0;
        f->cut = false;
        return 1;
    }
}

static void line_reset(otlp_file *f)
{
    f->line.len = 0;
    f->n = 0;
    if (f->line.cap > LINE_KEEP)
        cbt_buf_free(&f->line); /* after a huge span: give the memory back */
}

/* Close the open line and write it. CBT_ERR_IO when it did not reach the
 * file whole (its spans counted lost). */
static cbt_status write_line(otlp_file *f)
{
    if (!f->n)
        return CBT_OK;
    cbt_status st = cbt_otlp_json_tail_(&f->line);
    if (st == CBT_OK && (st = cbt_otlp_buf_reserve(&f->line, 1)) == CBT_OK)
        f->line.data[f->line.len++] = '\n';
    if (st != CBT_OK || (f->cut && !mend(f))) {
        atomic_fetch_add_explicit(&f->lost, f->n, memory_order_relaxed);
        line_reset(f);
        return st != CBT_OK ? st : CBT_ERR_IO;
    }
    off_t start = lseek(f->fd, 0, SEEK_CUR); /* -1 for a pipe */
    size_t done = 0;
    while (done < f->line.len) {
        ssize_t w = write(f->fd, f->line.data + done, f->line.len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    if (done < f->line.len) {
        atomic_fetch_add_explicit(&f->lost, f->n, memory_order_relaxed);
        if (done) {
            f->cut = true;
            f->whole_end = start;
        }
        st = CBT_ERR_IO;
    }
    line_reset(f);
    return st;
}

static cbt_status of_on_span(void *ctx, const cbt_span *s)
{
    otlp_file *f = ctx;
    size_t before = f->line.len;
    cbt_status st;
    if (f->n == 0) {
        st = cbt_otlp_buf_reserve(&f->line, f->head.len);
        if (st == CBT_OK) {
            memcpy(f->line.data, f->head.data, f->head.len);
            f->line.len = f->head.len;
        }
    } else {
        st = cbt_otlp_buf_reserve(&f->line, 1);
        if (st == CBT_OK)
            f->line.data[f->line.len++] = ',';
    }
    if (st == CBT_OK)
        st = cbt_otlp_json_span_(s, &f->line);
    if (st != CBT_OK) {
        f->line.len = before; /* the line goes on without it */
        atomic_fetch_add_explicit(&f->lost, 1, memory_order_relaxed);
        return st;
    }
    if (++f->n >= LINE_SPANS || f->line.len >= LINE_BYTES)
        return write_line(f);
    return CBT_OK;
}

static cbt_status of_flush(void *ctx) { return write_line(ctx); }

static uint64_t of_spans_lost(void *ctx)
{
    otlp_file *f = ctx;
    return atomic_load_explicit(&f->lost, memory_order_relaxed);
}

static void of_destroy(void *ctx)
{
    otlp_file *f = ctx;
    (void)write_line(f); /* empty after cbt_shutdown's last flush */
    if (f->cut)
        (void)mend(f);
    close(f->fd);
    cbt_buf_free(&f->head);
    cbt_buf_free(&f->line);
    free(f);
}

void cbt_otlp_resource_from_env(cbt_otlp_resource *r, FILE *log)
{
    if (r)
        cbt_otlp_resource_from_env_(r, log);
}

/* cbt/otlp.h's inline cbt_otlp_json_sink_create() set sink_out's version
 * and size: at most that many bytes are written (internal/abi.h). */
cbt_status cbt_otlp_json_sink_create_into(const char *path, const cbt_otlp_resource *r,
                                          cbt_sink *sink_out)
{
    if (!path || !*path || !sink_out)
        return CBT_ERR_INVAL;
    cbt_status abi = cbt_abi_out_check_(sink_out);
    if (abi)
        return abi;
    otlp_file *f = calloc(1, sizeof *f);
    cbt_otlp_resource *res = malloc(sizeof *res);
    if (!f || !res) {
        free(f);
        free(res);
        return CBT_ERR_NOMEM;
    }
    if (r) {
        *res = *r;
    } else {
        cbt_otlp_resource_default(res);
        cbt_otlp_resource_from_env_(res, stderr);
    }
    cbt_status st = cbt_otlp_json_head_(res, &f->head);
    free(res);
    if (st != CBT_OK) {
        cbt_buf_free(&f->head);
        free(f);
        return st;
    }
    /* A FIFO: opened without waiting for a reader (a plain open would wait
     * forever); none is an error, said now. Its writes then happen on the
     * sink's thread, so a reader that stops makes spans be dropped and
     * counted, never a publisher or the harvester wait. */
    struct stat sb;
    int fifo = stat(path, &sb) == 0 && S_ISFIFO(sb.st_mode);
    f->fd = fifo ? open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC)
                 : open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (f->fd < 0) {
        int e = errno;
        if (fifo && e == ENXIO)
            fprintf(stderr, "cbt: OTLP JSON file '%s' is a FIFO with no reader: start the "
                            "reader first\n", path);
        else
            fprintf(stderr, "cbt: cannot open the OTLP JSON file '%s': %s\n", path,
                    strerror(e));
        cbt_buf_free(&f->head);
        free(f);
        errno = e;
        return CBT_ERR_IO;
    }
    if (fifo) {
        int fl = fcntl(f->fd, F_GETFL);
        if (fl >= 0)
            (void)fcntl(f->fd, F_SETFL, fl & ~O_NONBLOCK); /* its thread may wait; nobody else */
    }
    f->whole_end = -1;
    atomic_init(&f->lost, 0);
    cbt_sink k;
    memset(&k, 0, sizeof k);
    k.name = "otlp-json-file";
    k.ctx = f;
    k.on_span = of_on_span;
    k.flush = of_flush;
    k.destroy = of_destroy;
    k.spans_lost = of_spans_lost;
    k.flags = CBT_SINK_FLUSH_IDLE;
    cbt_abi_out_(sink_out, &k, sizeof k, CBT_SINK_VERSION);
    return CBT_OK;
}
