/* bench/grpc_sink.c — the benchmarks' loopback OTLP/gRPC collector
 * (grpc_sink.h): h2c with libnghttp2, answer each unary call OK. */
#include "grpc_sink.h"

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

#include <nghttp2/nghttp2.h>

#define SINK_CONNS 16
#define READ_CHUNK (64u << 10)

typedef struct stream {
    uint64_t len;     /* body bytes so far */
    uint8_t head[5];  /* the message prefix */
    int ct_ok, te_ok; /* content-type application/grpc, te: trailers */
    int answered;
    size_t sent;      /* response body bytes handed to nghttp2 */
    uint8_t frame[5 + 256];
    size_t frame_len;
    grpc_sink_answer a; /* the answer fixed when the request ended */
} stream;

typedef struct conn {
    int fd;
    nghttp2_session *h2;
    struct grpc_sink *sink;
    uint8_t *out; /* frames nghttp2 produced, written at once (conn_flush) */
    size_t out_len;
} conn;

#define OUT_CAP (256u << 10)

struct grpc_sink {
    int lfd;
    uint16_t port;
    pthread_t th;
    _Atomic int stop;
    conn c[SINK_CONNS];
    pthread_mutex_t alock;
    grpc_sink_answer answer;
    _Atomic uint64_t requests, bytes, bad, connections;
    uint8_t *rbuf;
};

#define NV(n, v, vl)                                                                      \
    ((nghttp2_nv){(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, (vl), NGHTTP2_NV_FLAG_NONE})

/* Write what is buffered (blocking socket: small answers, written whole). */
static int conn_flush(conn *c)
{
    size_t done = 0;
    while (done < c->out_len) {
        ssize_t w = write(c->fd, c->out + done, c->out_len - done);
        if (w <= 0)
            return 0;
        done += (size_t)w;
    }
    c->out_len = 0;
    return 1;
}

/* nghttp2 hands over one frame at a time: buffer them, so an answer's
 * HEADERS, DATA and trailers leave in one write, as gRPC servers' buffered
 * writers send them (and the client is woken once, not three times). */
static ssize_t on_send(nghttp2_session *h2, const uint8_t *data, size_t len, int flags, void *ud)
{
    conn *c = ud;
    (void)h2, (void)flags;
    if (c->out_len + len > OUT_CAP && !conn_flush(c))
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    if (len > OUT_CAP) {
        size_t done = 0;
        while (done < len) {
            ssize_t w = write(c->fd, data + done, len - done);
            if (w <= 0)
                return NGHTTP2_ERR_CALLBACK_FAILURE;
            done += (size_t)w;
        }
        return (ssize_t)len;
    }
    memcpy(c->out + c->out_len, data, len);
    c->out_len += len;
    return (ssize_t)len;
}

static int on_begin_headers(nghttp2_session *h2, const nghttp2_frame *f, void *ud)
{
    (void)ud;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    stream *st = calloc(1, sizeof *st);
    if (!st)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    nghttp2_session_set_stream_user_data(h2, f->hd.stream_id, st);
    return 0;
}

static int on_header(nghttp2_session *h2, const nghttp2_frame *f, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *ud)
{
    (void)flags, (void)ud;
    stream *st = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
    if (!st)
        return 0;
    if (namelen == 12 && memcmp(name, "content-type", 12) == 0)
        st->ct_ok = valuelen >= 16 && memcmp(value, "application/grpc", 16) == 0;
    else if (namelen == 2 && memcmp(name, "te", 2) == 0)
        st->te_ok = valuelen == 8 && memcmp(value, "trailers", 8) == 0;
    return 0;
}

static int on_data(nghttp2_session *h2, uint8_t flags, int32_t sid, const uint8_t *data,
                   size_t len, void *ud)
{
    (void)flags, (void)ud;
    stream *st = nghttp2_session_get_stream_user_data(h2, sid);
    if (!st)
        return 0;
    for (size_t i = 0; i < len && st->len + i < 5; i++)
        st->head[st->len + i] = data[i];
    st->len += len;
    return 0;
}

/* The answer's body: the frame, then the trailers (NO_END_STREAM + trailer). */
static ssize_t answer_read(nghttp2_session *h2, int32_t sid, uint8_t *buf, size_t length,
                           uint32_t *flags, nghttp2_data_source *src, void *ud)
{
    (void)src, (void)ud;
    stream *st = nghttp2_session_get_stream_user_data(h2, sid);
    if (!st) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        return 0;
    }
    size_t n = st->frame_len - st->sent;
    if (n > length)
        n = length;
    memcpy(buf, st->frame + st->sent, n);
    st->sent += n;
    if (st->sent == st->frame_len) {
        char code[16];
        int cl = snprintf(code, sizeof code, "%d", st->a.grpc_status);
        nghttp2_nv t[3];
        size_t nt = 0;
        t[nt++] = NV("grpc-status", code, (size_t)cl);
        if (st->a.message[0])
            t[nt++] = NV("grpc-message", st->a.message, strlen(st->a.message));
        if (st->a.details_b64[0])
            t[nt++] = NV("grpc-status-details-bin", st->a.details_b64, strlen(st->a.details_b64));
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        if (nghttp2_submit_trailer(h2, sid, t, nt) != 0)
            return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    return (ssize_t)n;
}

static void answer(conn *c, int32_t sid, stream *st)
{
    grpc_sink *s = c->sink;
    pthread_mutex_lock(&s->alock);
    st->a = s->answer;
    pthread_mutex_unlock(&s->alock);
    uint32_t mlen = (uint32_t)st->head[1] << 24 | (uint32_t)st->head[2] << 16 |
                    (uint32_t)st->head[3] << 8 | st->head[4];
    int ok = st->ct_ok && st->te_ok && st->len >= 5 && st->head[0] <= 1 &&
             (uint64_t)mlen + 5 == st->len;
    atomic_fetch_add(&s->requests, 1);
    atomic_fetch_add(&s->bytes, st->len);
    if (!ok) {
        atomic_fetch_add(&s->bad, 1);
        memset(&st->a, 0, sizeof st->a);
        st->a.grpc_status = 13;
        snprintf(st->a.message, sizeof st->a.message, "grpc_sink: not a gRPC unary request");
    }
    st->answered = 1;
    char status[8];
    int sl = snprintf(status, sizeof status, "%d", st->a.http_status ? st->a.http_status : 200);
    if (st->a.trailers_only) {
        char code[16];
        int cl = snprintf(code, sizeof code, "%d", st->a.grpc_status);
        nghttp2_nv h[5];
        size_t nh = 0;
        h[nh++] = NV(":status", status, (size_t)sl);
        h[nh++] = NV("content-type", "application/grpc", 16);
        h[nh++] = NV("grpc-status", code, (size_t)cl);
        if (st->a.message[0])
            h[nh++] = NV("grpc-message", st->a.message, strlen(st->a.message));
        if (st->a.details_b64[0])
            h[nh++] = NV("grpc-status-details-bin", st->a.details_b64, strlen(st->a.details_b64));
        nghttp2_submit_response(c->h2, sid, h, nh, NULL);
        return;
    }
    st->frame[0] = 0;
    st->frame[1] = st->frame[2] = 0;
    st->frame[3] = (uint8_t)(st->a.body_len >> 8);
    st->frame[4] = (uint8_t)st->a.body_len;
    memcpy(st->frame + 5, st->a.body, st->a.body_len);
    st->frame_len = 5 + st->a.body_len;
    nghttp2_nv h[2] = {NV(":status", status, (size_t)sl),
                       NV("content-type", "application/grpc", 16)};
    nghttp2_data_provider prd = {.source.ptr = NULL, .read_callback = answer_read};
    nghttp2_submit_response(c->h2, sid, h, 2, &prd);
}

static int on_frame_recv(nghttp2_session *h2, const nghttp2_frame *f, void *ud)
{
    conn *c = ud;
    if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) &&
        (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
        stream *st = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
        if (st && !st->answered)
            answer(c, f->hd.stream_id, st);
    }
    return 0;
}

static int on_stream_close(nghttp2_session *h2, int32_t sid, uint32_t err, void *ud)
{
    (void)err, (void)ud;
    free(nghttp2_session_get_stream_user_data(h2, sid));
    nghttp2_session_set_stream_user_data(h2, sid, NULL);
    return 0;
}

static void conn_close(conn *c)
{
    if (c->h2)
        nghttp2_session_del(c->h2); /* closes its streams: on_stream_close frees them */
    c->h2 = NULL;
    close(c->fd);
    c->fd = -1;
    c->out_len = 0;
}

static int conn_open(grpc_sink *s, conn *c, int fd)
{
    nghttp2_session_callbacks *cb;
    if (nghttp2_session_callbacks_new(&cb))
        return 0;
    nghttp2_session_callbacks_set_send_callback(cb, on_send);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    c->fd = fd;
    c->sink = s;
    nghttp2_option *opt = NULL;
    if (nghttp2_option_new(&opt))
        return 0;
#ifdef CBT_NGHTTP2_RESET_RATELIM
    /* libcurl before 8 ends each finished call on a kept connection with
     * RST_STREAM(STREAM_CLOSED), which RFC 9113 says to ignore; nghttp2's
     * rapid-reset guard (CVE-2023-44487) counts them and sends GOAWAY after
     * 1000: not what a benchmark of cbt should measure */
    nghttp2_option_set_stream_reset_rate_limit(opt, UINT64_MAX, UINT64_MAX);
#endif
    /* each frame is its own write: without this, Nagle holds the trailers
     * until the client's delayed ACK (40 ms), as gRPC servers do not */
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int rc = nghttp2_session_server_new2(&c->h2, cb, c, opt);
    nghttp2_session_callbacks_del(cb);
    nghttp2_option_del(opt);
    if (rc)
        return 0;
    /* a large window: the benchmark measures cbt, not flow control */
    nghttp2_settings_entry set[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 100},
                                    {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, (1u << 30)}};
    nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, set, 2);
    nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0, 1 << 30);
    atomic_fetch_add(&s->connections, 1);
    return nghttp2_session_send(c->h2) == 0 && conn_flush(c);
}

static void *sink_main(void *arg)
{
    grpc_sink *s = arg;
    while (!atomic_load(&s->stop)) {
        struct pollfd p[1 + SINK_CONNS];
        int map[1 + SINK_CONNS], n = 0;
        p[n] = (struct pollfd){.fd = s->lfd, .events = POLLIN};
        map[n++] = -1;
        for (int i = 0; i < SINK_CONNS; i++)
            if (s->c[i].fd >= 0) {
                p[n] = (struct pollfd){.fd = s->c[i].fd, .events = POLLIN};
                map[n++] = i;
            }
        if (poll(p, (nfds_t)n, 500) <= 0)
            continue;
        for (int k = 0; k < n; k++) {
            if (!p[k].revents)
                continue;
            if (map[k] == -1) {
                int fd = accept(s->lfd, NULL, NULL), slot = -1;
                for (int i = 0; i < SINK_CONNS && slot < 0; i++)
                    if (s->c[i].fd < 0)
                        slot = i;
                if (fd >= 0 && (slot < 0 || !conn_open(s, &s->c[slot], fd))) {
                    if (slot >= 0)
                        conn_close(&s->c[slot]);
                    else
                        close(fd);
                }
                continue;
            }
            conn *c = &s->c[map[k]];
            ssize_t r = read(c->fd, s->rbuf, READ_CHUNK);
            if (r <= 0 || nghttp2_session_mem_recv(c->h2, s->rbuf, (size_t)r) < 0 ||
                nghttp2_session_send(c->h2) != 0 || !conn_flush(c))
                conn_close(c);
        }
    }
    return NULL;
}

grpc_sink *grpc_sink_start(void)
{
    grpc_sink *s = calloc(1, sizeof *s);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (!s || !(s->rbuf = malloc(READ_CHUNK))) {
        perror("grpc_sink");
        exit(1);
    }
    s->lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (s->lfd < 0 || bind(s->lfd, (struct sockaddr *)&a, sizeof a) || listen(s->lfd, 16) ||
        getsockname(s->lfd, (struct sockaddr *)&a, &al)) {
        perror("grpc_sink: loopback listen");
        exit(1);
    }
    s->port = ntohs(a.sin_port);
    for (int i = 0; i < SINK_CONNS; i++) {
        s->c[i].fd = -1;
        if (!(s->c[i].out = malloc(OUT_CAP))) {
            perror("grpc_sink");
            exit(1);
        }
    }
    pthread_mutex_init(&s->alock, NULL);
    if (pthread_create(&s->th, NULL, sink_main, s)) {
        perror("grpc_sink: thread");
        exit(1);
    }
    return s;
}

uint16_t grpc_sink_port(const grpc_sink *s) { return s->port; }

void grpc_sink_set_answer(grpc_sink *s, const grpc_sink_answer *a)
{
    pthread_mutex_lock(&s->alock);
    s->answer = *a;
    if (s->answer.body_len > sizeof s->answer.body)
        s->answer.body_len = sizeof s->answer.body;
    pthread_mutex_unlock(&s->alock);
}

static double thread_cpu(pthread_t th)
{
    clockid_t id;
    struct timespec t;
    if (pthread_getcpuclockid(th, &id) || clock_gettime(id, &t))
        return 0;
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

grpc_sink_counts grpc_sink_now(grpc_sink *s)
{
    return (grpc_sink_counts){atomic_load(&s->requests), atomic_load(&s->bytes),
                              atomic_load(&s->bad), atomic_load(&s->connections),
                              thread_cpu(s->th)};
}

grpc_sink_counts grpc_sink_stop(grpc_sink *s)
{
    grpc_sink_counts k = grpc_sink_now(s); /* its CPU while the thread lives */
    atomic_store(&s->stop, 1);
    pthread_join(s->th, NULL);
    k.requests = atomic_load(&s->requests);
    k.bytes = atomic_load(&s->bytes);
    k.bad = atomic_load(&s->bad);
    for (int i = 0; i < SINK_CONNS; i++) {
        if (s->c[i].fd >= 0)
            conn_close(&s->c[i]);
        free(s->c[i].out);
    }
    close(s->lfd);
    pthread_mutex_destroy(&s->alock);
    free(s->rbuf);
    free(s);
    return k;
}
