/* tests/http_loopback.c — owns the loopback HTTP/1.1 test server (see
 * http_loopback.h). One thread polls the listening socket, a wake pipe and
 * every open connection; requests are parsed from each connection's buffer
 * as bytes arrive, recorded, and answered from the script. Stop path:
 * hl_stop sets `stop`, writes the wake pipe and joins; the thread closes all
 * sockets on its way out. */
#include "http_loopback.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#define MAX_CONNS 64
#define MAX_REQ_BYTES (32u * 1024u * 1024u)
#define MAX_HEAD_BYTES (64u * 1024u)
#define MAX_RECORDED 4096u
#define MAX_STEPS 64

typedef struct conn {
    int fd;
    uint32_t id;
    uint8_t *buf;
    size_t len, cap;
    int stalled;
} conn;

struct hl_server {
    int lfd;
    uint16_t port;
    int wake[2];
    pthread_t thread;
    atomic_int stop;

    pthread_mutex_t lock; /* guards everything below */
    pthread_cond_t cv;    /* a request arrived */
    hl_step steps[MAX_STEPS];
    size_t n_steps, step_idx;
    uint32_t step_used;
    hl_request *reqs;
    uint32_t n_recorded, n_requests, n_conns;

    conn conns[MAX_CONNS]; /* server thread only */
};

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int hl_gunzip(const uint8_t *in, size_t n, uint8_t **out, size_t *out_len)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 15 + 32) != Z_OK)
        return 0;
    size_t cap = n * 4 + 1024, len = 0;
    uint8_t *buf = malloc(cap);
    if (!buf) {
        inflateEnd(&z);
        return 0;
    }
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)n;
    int rc;
    for (int rounds = 0; rounds < 64; rounds++) { /* bounded: cap doubles each round */
        if (len == cap) {
            uint8_t *p = realloc(buf, cap * 2);
            if (!p)
                break;
            buf = p;
            cap *= 2;
        }
        z.next_out = buf + len;
        z.avail_out = (uInt)(cap - len);
        rc = inflate(&z, Z_NO_FLUSH);
        len = cap - z.avail_out;
        if (rc == Z_STREAM_END) {
            inflateEnd(&z);
            *out = buf;
            *out_len = len;
            return 1;
        }
        if (rc != Z_OK && rc != Z_BUF_ERROR)
            break;
        if (rc == Z_BUF_ERROR && z.avail_in == 0)
            break; /* truncated */
    }
    inflateEnd(&z);
    free(buf);
    return 0;
}

/* ---- parsing ------------------------------------------------------------------- */

static const uint8_t *find(const uint8_t *b, size_t n, const char *pat)
{
    size_t m = strlen(pat);
    for (size_t i = 0; i + m <= n; i++)
        if (memcmp(b + i, pat, m) == 0)
            return b + i;
    return NULL;
}

/* Parse one request from buf[0..n). Returns bytes consumed, 0 when more are
 * needed, -1 when the request is malformed. Fills *r (body malloc'd). */
static long parse_request(const uint8_t *buf, size_t n, hl_request *r)
{
    const uint8_t *he = find(buf, n < MAX_HEAD_BYTES ? n : MAX_HEAD_BYTES, "\r\n\r\n");
    if (!he)
        return n >= MAX_HEAD_BYTES ? -1 : 0;
    size_t head_len = (size_t)(he - buf) + 4;
    memset(r, 0, sizeof *r);

    /* request line */
    const uint8_t *le = find(buf, head_len, "\r\n");
    char line[1024];
    size_t ll = (size_t)(le - buf);
    if (ll >= sizeof line)
        return -1;
    memcpy(line, buf, ll);
    line[ll] = '\0';
    char *sp1 = strchr(line, ' ');
    char *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
    if (!sp1 || !sp2 || strncmp(sp2 + 1, "HTTP/1.", 7) != 0)
        return -1;
    *sp1 = *sp2 = '\0';
    size_t ml = strlen(line), pl = strlen(sp1 + 1);
    if (ml >= sizeof r->method || pl >= sizeof r->path)
        return -1;
    memcpy(r->method, line, ml + 1);
    memcpy(r->path, sp1 + 1, pl + 1);

    /* headers */
    size_t content_length = 0;
    int chunked = 0, gz = 0;
    const uint8_t *p = le + 2;
    while (p < he + 2) {
        const uint8_t *e = find(p, (size_t)(he + 2 - p), "\r\n");
        if (!e || e == p)
            break;
        const uint8_t *colon = memchr(p, ':', (size_t)(e - p));
        if (!colon)
            return -1;
        if (r->n_headers < HL_MAX_HEADERS) {
            hl_header *h = &r->headers[r->n_headers++];
            size_t nl = (size_t)(colon - p), vl;
            const uint8_t *v = colon + 1;
            while (v < e && (*v == ' ' || *v == '\t'))
                v++;
            vl = (size_t)(e - v);
            while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
                vl--;
            if (nl >= sizeof h->name)
                nl = sizeof h->name - 1;
            if (vl >= sizeof h->value)
                vl = sizeof h->value - 1;
            memcpy(h->name, p, nl);
            h->name[nl] = '\0';
            memcpy(h->value, v, vl);
            h->value[vl] = '\0';
            if (strcasecmp(h->name, "Content-Length") == 0)
                content_length = (size_t)strtoull(h->value, NULL, 10);
            else if (strcasecmp(h->name, "Transfer-Encoding") == 0 && strcasestr(h->value, "chunked"))
                chunked = 1;
            else if (strcasecmp(h->name, "Content-Encoding") == 0 && strcasecmp(h->value, "gzip") == 0)
                gz = 1;
        }
        p = e + 2;
    }

    /* body */
    uint8_t *body = NULL;
    size_t body_len = 0, consumed;
    if (chunked) {
        size_t off = head_len;
        size_t cap = 0;
        for (int guard = 0; guard < 1000000; guard++) {
            const uint8_t *ce = find(buf + off, n - off, "\r\n");
            if (!ce) {
                free(body);
                return 0;
            }
            char hex[32];
            size_t hl = (size_t)(ce - (buf + off));
            if (hl == 0 || hl >= sizeof hex) {
                free(body);
                return -1;
            }
            memcpy(hex, buf + off, hl);
            hex[hl] = '\0';
            size_t sz = (size_t)strtoull(hex, NULL, 16);
            off += hl + 2;
            if (sz == 0) {
                /* optional trailers, then an empty line */
                const uint8_t *te = find(buf + off, n - off, "\r\n");
                while (te && te != buf + off) {
                    off = (size_t)(te - buf) + 2;
                    te = find(buf + off, n - off, "\r\n");
                }
                if (!te) {
                    free(body);
                    return 0;
                }
                off += 2;
                break;
            }
            if (sz > MAX_REQ_BYTES || body_len + sz > MAX_REQ_BYTES) {
                free(body);
                return -1;
            }
            if (n - off < sz + 2) {
                free(body);
                return 0;
            }
            if (body_len + sz > cap) {
                cap = (body_len + sz) * 2;
                uint8_t *nb = realloc(body, cap);
                if (!nb) {
                    free(body);
                    return -1;
                }
                body = nb;
            }
            memcpy(body + body_len, buf + off, sz);
            body_len += sz;
            off += sz + 2;
        }
        consumed = off;
    } else {
        if (content_length > MAX_REQ_BYTES)
            return -1;
        if (n - head_len < content_length)
            return 0;
        body = malloc(content_length ? content_length : 1);
        if (!body)
            return -1;
        memcpy(body, buf + head_len, content_length);
        body_len = content_length;
        consumed = head_len + content_length;
    }
    r->chunked = chunked;
    r->wire_len = body_len;
    if (gz) {
        uint8_t *plain;
        size_t plain_len;
        if (hl_gunzip(body, body_len, &plain, &plain_len)) {
            free(body);
            body = plain;
            body_len = plain_len;
            r->gzip = 1;
        }
    }
    r->body = body;
    r->body_len = body_len;
    return (long)consumed;
}

/* ---- answering ------------------------------------------------------------------ */

static const char *reason(int status)
{
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Status";
    }
}

static int send_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return 0;
        b += w;
        n -= (size_t)w;
    }
    return 1;
}

/* The step for the next request (lock held); NULL: the default answer. */
static const hl_step *next_step(hl_server *s)
{
    while (s->step_idx < s->n_steps) {
        const hl_step *st = &s->steps[s->step_idx];
        uint32_t times = st->times ? st->times : 1;
        if (s->step_used < times) {
            s->step_used++;
            return st;
        }
        s->step_idx++;
        s->step_used = 0;
    }
    return NULL;
}

/* Record and answer one request; returns 0 when the connection is to close. */
static int handle(hl_server *s, conn *c, hl_request *r)
{
    r->conn_id = c->id;
    r->arrived_ns = mono_ns();
    hl_step st;
    int have_step = 0;
    pthread_mutex_lock(&s->lock);
    const hl_step *sp = next_step(s);
    if (sp) {
        st = *sp;
        have_step = 1;
    }
    s->n_requests++;
    if (s->n_recorded < MAX_RECORDED) {
        s->reqs[s->n_recorded++] = *r;
        r->body = NULL; /* now owned by the record */
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->lock);
    const char *req_ct = hl_header_get(r, "Content-Type");
    const char *conn_hdr = hl_header_get(r, "Connection");
    int keep = !(conn_hdr && strcasecmp(conn_hdr, "close") == 0);
    free(r->body);
    r->body = NULL;

    if (have_step && st.action == HL_STALL) {
        c->stalled = 1;
        return 1;
    }
    if (have_step && st.action == HL_CLOSE)
        return 0;
    int status = have_step ? st.status : 200;
    const char *ct = have_step && st.content_type[0] ? st.content_type
                                                     : (req_ct ? req_ct : "application/x-protobuf");
    const uint8_t *body = have_step ? st.body : NULL;
    size_t body_len = have_step ? st.body_len : 0;
    if (!have_step && strstr(ct, "json")) {
        body = (const uint8_t *)"{}";
        body_len = 2;
    }
    char head[512];
    int hn = snprintf(head, sizeof head,
                      "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s%s%s%s\r\n",
                      status, reason(status), ct, body_len,
                      have_step && st.retry_after[0] ? "Retry-After: " : "",
                      have_step && st.retry_after[0] ? st.retry_after : "",
                      have_step && st.retry_after[0] ? "\r\n" : "",
                      keep ? "" : "Connection: close\r\n");
    if (hn < 0 || (size_t)hn >= sizeof head)
        return 0;
    if (!send_all(c->fd, head, (size_t)hn) || (body_len && !send_all(c->fd, body, body_len)))
        return 0;
    return keep;
}

static void conn_close(conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    free(c->buf);
    memset(c, 0, sizeof *c);
    c->fd = -1;
}

/* Read what is there; parse and answer complete requests. 0: close it. */
static int conn_readable(hl_server *s, conn *c)
{
    if (c->cap - c->len < 65536) {
        size_t cap = c->cap ? c->cap * 2 : 131072;
        if (cap > MAX_REQ_BYTES + MAX_HEAD_BYTES + 65536)
            return 0;
        uint8_t *p = realloc(c->buf, cap);
        if (!p)
            return 0;
        c->buf = p;
        c->cap = cap;
    }
    ssize_t got = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
    if (got < 0 && (errno == EINTR || errno == EAGAIN))
        return 1;
    if (got <= 0)
        return 0;
    if (c->stalled)
        return 1; /* read and ignore: this connection is never answered */
    c->len += (size_t)got;
    for (int guard = 0; guard < 1024 && c->len; guard++) {
        hl_request r;
        long used = parse_request(c->buf, c->len, &r);
        if (used < 0)
            return 0;
        if (used == 0)
            return 1;
        memmove(c->buf, c->buf + used, c->len - (size_t)used);
        c->len -= (size_t)used;
        if (!handle(s, c, &r))
            return 0;
        if (c->stalled)
            return 1;
    }
    return 1;
}

static void *server_main(void *arg)
{
    hl_server *s = arg;
    struct pollfd pf[2 + MAX_CONNS];
    int map[2 + MAX_CONNS];
    while (!atomic_load(&s->stop)) {
        int n = 0;
        pf[n].fd = s->lfd;
        pf[n].events = POLLIN;
        map[n++] = -1;
        pf[n].fd = s->wake[0];
        pf[n].events = POLLIN;
        map[n++] = -2;
        for (int i = 0; i < MAX_CONNS; i++) {
            if (s->conns[i].fd >= 0) {
                pf[n].fd = s->conns[i].fd;
                pf[n].events = POLLIN;
                map[n++] = i;
            }
        }
        int rc = poll(pf, (nfds_t)n, 200);
        if (rc <= 0)
            continue;
        for (int k = 0; k < n; k++) {
            if (!pf[k].revents)
                continue;
            if (map[k] == -2) {
                char b[16];
                if (read(s->wake[0], b, sizeof b) < 0) { /* drained; stop is checked above */
                }
            } else if (map[k] == -1) {
                int fd = accept(s->lfd, NULL, NULL);
                if (fd < 0)
                    continue;
                int slot = -1;
                for (int i = 0; i < MAX_CONNS; i++)
                    if (s->conns[i].fd < 0) {
                        slot = i;
                        break;
                    }
                pthread_mutex_lock(&s->lock);
                uint32_t id = ++s->n_conns;
                pthread_mutex_unlock(&s->lock);
                if (slot < 0) {
                    close(fd);
                    continue;
                }
                int one = 1;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                s->conns[slot].fd = fd;
                s->conns[slot].id = id;
            } else {
                conn *c = &s->conns[map[k]];
                if (!conn_readable(s, c))
                    conn_close(c);
            }
        }
    }
    for (int i = 0; i < MAX_CONNS; i++)
        if (s->conns[i].fd >= 0)
            conn_close(&s->conns[i]);
    return NULL;
}

/* ---- the API ------------------------------------------------------------------------ */

hl_server *hl_start(void)
{
    hl_server *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->reqs = calloc(MAX_RECORDED, sizeof *s->reqs);
    if (!s->reqs) {
        free(s);
        return NULL;
    }
    for (int i = 0; i < MAX_CONNS; i++)
        s->conns[i].fd = -1;
    s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->lfd < 0)
        goto fail;
    int one = 1;
    setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t al = sizeof a;
    if (bind(s->lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(s->lfd, 64) != 0 ||
        getsockname(s->lfd, (struct sockaddr *)&a, &al) != 0)
        goto fail_fd;
    s->port = ntohs(a.sin_port);
    if (pipe(s->wake) != 0)
        goto fail_fd;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->thread, NULL, server_main, s) != 0) {
        close(s->wake[0]);
        close(s->wake[1]);
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->lock);
        goto fail_fd;
    }
    return s;
fail_fd:
    close(s->lfd);
fail:
    free(s->reqs);
    free(s);
    return NULL;
}

void hl_stop(hl_server *s)
{
    if (!s)
        return;
    atomic_store(&s->stop, 1);
    if (write(s->wake[1], "x", 1) < 0) { /* the 200 ms poll notices anyway */
    }
    pthread_join(s->thread, NULL);
    close(s->lfd);
    close(s->wake[0]);
    close(s->wake[1]);
    for (uint32_t i = 0; i < s->n_recorded; i++)
        free(s->reqs[i].body);
    free(s->reqs);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

uint16_t hl_port(const hl_server *s) { return s->port; }

void hl_url(const hl_server *s, const char *path, char *buf, size_t cap)
{
    snprintf(buf, cap, "http://127.0.0.1:%u%s", (unsigned)s->port, path ? path : "");
}

void hl_script(hl_server *s, const hl_step *steps, size_t n)
{
    pthread_mutex_lock(&s->lock);
    if (n > MAX_STEPS)
        n = MAX_STEPS;
    if (n)
        memcpy(s->steps, steps, n * sizeof *steps);
    s->n_steps = n;
    s->step_idx = 0;
    s->step_used = 0;
    pthread_mutex_unlock(&s->lock);
}

uint32_t hl_request_count(hl_server *s)
{
    pthread_mutex_lock(&s->lock);
    uint32_t n = s->n_requests;
    pthread_mutex_unlock(&s->lock);
    return n;
}

uint32_t hl_connection_count(hl_server *s)
{
    pthread_mutex_lock(&s->lock);
    uint32_t n = s->n_conns;
    pthread_mutex_unlock(&s->lock);
    return n;
}

int hl_wait_requests(hl_server *s, uint32_t n, uint32_t timeout_ms)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->lock);
    int rc = 0;
    while (s->n_requests < n && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&s->cv, &s->lock, &dl);
    int ok = s->n_requests >= n;
    pthread_mutex_unlock(&s->lock);
    return ok;
}

int hl_request_get(hl_server *s, uint32_t i, hl_request *out)
{
    int ok = 0;
    pthread_mutex_lock(&s->lock);
    if (i < s->n_recorded) {
        *out = s->reqs[i];
        out->body = malloc(out->body_len ? out->body_len : 1);
        if (out->body) {
            memcpy(out->body, s->reqs[i].body, out->body_len);
            ok = 1;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return ok;
}

void hl_request_free(hl_request *r)
{
    if (!r)
        return;
    free(r->body);
    r->body = NULL;
}

const char *hl_header_get(const hl_request *r, const char *name)
{
    for (uint32_t i = 0; i < r->n_headers; i++)
        if (strcasecmp(r->headers[i].name, name) == 0)
            return r->headers[i].value;
    return NULL;
}

void hl_http_date(int64_t offset_s, char *buf, size_t cap)
{
    time_t when = time(NULL) + (time_t)offset_s;
    struct tm tm;
    gmtime_r(&when, &tm);
    if (strftime(buf, cap, "%a, %d %b %Y %H:%M:%S GMT", &tm) == 0 && cap)
        buf[0] = '\0';
}

hl_step hl_overloaded(int status, const char *retry_after)
{
    hl_step st;
    memset(&st, 0, sizeof st);
    st.action = HL_RESPOND;
    st.times = UINT32_MAX; /* every request, for as long as the test runs */
    st.status = status;
    snprintf(st.retry_after, sizeof st.retry_after, "%s", retry_after);
    return st;
}

uint16_t hl_closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return 1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    uint16_t port = 1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &al) == 0)
        port = ntohs(a.sin_port);
    close(fd); /* bound but never listened: connecting is refused */
    return port;
}
