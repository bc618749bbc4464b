/* bench/http_sink.c — the benchmarks' loopback OTLP collector (http_sink.h):
 * read each request, answer 200; in a thread or in a child process. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include "http_sink.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SINK_CONNS 16
#define SINK_BUF (64u << 20) /* the largest request it reads (bytes) */

typedef struct conn {
    int fd;
    char *buf;
    size_t len;
} conn;

struct http_sink {
    int lfd;
    uint16_t port;
    /* a thread: */
    pthread_t th;
    _Atomic int stop;
    /* a child: commands in ('c' counts, 'q' counts and quit), counts out */
    pid_t child;
    int ctl_w, res_r;
    conn c[SINK_CONNS];
    _Atomic uint64_t requests, bytes;
};

static const char OK_REPLY[] = "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\n"
                               "Content-Length: 0\r\n\r\n";

/* Answer every complete request in c->buf; 0 when the connection must close. */
static int serve(http_sink *s, conn *c)
{
    for (;;) {
        char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
        if (!end)
            return c->len < SINK_BUF;
        size_t hdr = (size_t)(end - c->buf) + 4, body = 0;
        for (char *p = c->buf; p < end; p++) {
            if ((p == c->buf || p[-1] == '\n') && strncasecmp(p, "content-length:", 15) == 0)
                body = strtoull(p + 15, NULL, 10);
            if ((p == c->buf || p[-1] == '\n') && strncasecmp(p, "expect: 100", 11) == 0 &&
                c->len == hdr) {
                static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
                if (write(c->fd, cont, sizeof cont - 1) < 0)
                    return 0;
            }
        }
        if (hdr + body > SINK_BUF)
            return 0;
        if (c->len < hdr + body)
            return 1;
        if (write(c->fd, OK_REPLY, sizeof OK_REPLY - 1) != (ssize_t)(sizeof OK_REPLY - 1))
            return 0;
        atomic_fetch_add(&s->requests, 1);
        atomic_fetch_add(&s->bytes, body);
        memmove(c->buf, c->buf + hdr + body, c->len - hdr - body);
        c->len -= hdr + body;
    }
}

static double self_cpu_s(int who)
{
    struct rusage u;
    getrusage(who, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec * 1e-6 +
           (double)u.ru_stime.tv_sec + (double)u.ru_stime.tv_usec * 1e-6;
}

/* The child's answer to a command: its counts, written whole. */
static void child_answer(http_sink *s, int res_w)
{
    http_sink_counts k = {atomic_load(&s->requests), atomic_load(&s->bytes), self_cpu_s(RUSAGE_SELF)};
    if (write(res_w, &k, sizeof k) != (ssize_t)sizeof k)
        _exit(1);
}

/* The loop: accept, read, answer. ctl >= 0 (a child): also the command pipe. */
static void sink_loop(http_sink *s, int ctl, int res_w)
{
    while (!atomic_load(&s->stop)) {
        struct pollfd p[2 + SINK_CONNS];
        int map[2 + SINK_CONNS], n = 0;
        p[n] = (struct pollfd){.fd = s->lfd, .events = POLLIN};
        map[n++] = -1;
        if (ctl >= 0) {
            p[n] = (struct pollfd){.fd = ctl, .events = POLLIN};
            map[n++] = -2;
        }
        for (int i = 0; i < SINK_CONNS; i++)
            if (s->c[i].fd >= 0) {
                p[n] = (struct pollfd){.fd = s->c[i].fd, .events = POLLIN};
                map[n++] = i;
            }
        if (poll(p, (nfds_t)n, 500) <= 0) /* stop is seen within 0.5 s */
            continue;
        for (int k = 0; k < n; k++) {
            if (!p[k].revents)
                continue;
            if (map[k] == -2) {
                char cmd = 'q';
                ssize_t r = read(ctl, &cmd, 1);
                if (r <= 0) /* the parent is gone */
                    _exit(0);
                child_answer(s, res_w);
                if (cmd == 'q')
                    _exit(0);
                continue;
            }
            if (map[k] == -1) {
                int fd = accept(s->lfd, NULL, NULL);
                int slot = -1;
                for (int i = 0; i < SINK_CONNS && slot < 0; i++)
                    if (s->c[i].fd < 0)
                        slot = i;
                if (fd >= 0 && slot < 0)
                    close(fd);
                else if (fd >= 0)
                    s->c[slot] = (conn){fd, s->c[slot].buf, 0};
                continue;
            }
            conn *c = &s->c[map[k]];
            ssize_t r = read(c->fd, c->buf + c->len, SINK_BUF - c->len);
            if (r > 0)
                c->len += (size_t)r;
            if (r <= 0 || !serve(s, c)) {
                close(c->fd);
                c->fd = -1;
            }
        }
    }
}

static void *sink_thread(void *arg)
{
    sink_loop(arg, -1, -1);
    return NULL;
}

static http_sink *sink_listen(void)
{
    http_sink *s = calloc(1, sizeof *s);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (!s) {
        perror("http_sink");
        exit(1);
    }
    s->lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (s->lfd < 0 || bind(s->lfd, (struct sockaddr *)&a, sizeof a) || listen(s->lfd, 16) ||
        getsockname(s->lfd, (struct sockaddr *)&a, &al)) {
        perror("http_sink: loopback listen");
        exit(1);
    }
    s->port = ntohs(a.sin_port);
    s->child = -1;
    s->ctl_w = s->res_r = -1;
    for (int i = 0; i < SINK_CONNS; i++)
        s->c[i].fd = -1;
    return s;
}

/* The buffers, in whichever process serves (64 MiB each, resident as used). */
static void sink_buffers(http_sink *s)
{
    for (int i = 0; i < SINK_CONNS; i++)
        if (!(s->c[i].buf = malloc(SINK_BUF))) {
            perror("http_sink");
            exit(1);
        }
}

http_sink *http_sink_start(void)
{
    http_sink *s = sink_listen();
    sink_buffers(s);
    if (pthread_create(&s->th, NULL, sink_thread, s)) {
        perror("http_sink: thread");
        exit(1);
    }
    return s;
}

http_sink *http_sink_fork(void)
{
    http_sink *s = sink_listen();
    int ctl[2], res[2];
    if (pipe(ctl) || pipe(res)) {
        perror("http_sink: pipe");
        exit(1);
    }
    fflush(NULL); /* nothing buffered is written twice */
    pid_t pid = fork();
    if (pid < 0) {
        perror("http_sink: fork");
        exit(1);
    }
    if (pid == 0) {
        close(ctl[1]);
        close(res[0]);
        signal(SIGINT, SIG_IGN); /* the parent decides when it stops */
        sink_buffers(s);
        sink_loop(s, ctl[0], res[1]);
        _exit(0);
    }
    close(ctl[0]);
    close(res[1]);
    close(s->lfd); /* the child listens */
    s->lfd = -1;
    s->child = pid;
    s->ctl_w = ctl[1];
    s->res_r = res[0];
    return s;
}

uint16_t http_sink_port(const http_sink *s) { return s->port; }

static http_sink_counts ask_child(http_sink *s, char cmd)
{
    http_sink_counts k = {0, 0, 0};
    if (write(s->ctl_w, &cmd, 1) != 1 || read(s->res_r, &k, sizeof k) != (ssize_t)sizeof k)
        fprintf(stderr, "http_sink: the collector child did not answer\n");
    return k;
}

static double thread_cpu(pthread_t th)
{
    clockid_t id;
    struct timespec t;
    if (pthread_getcpuclockid(th, &id) || clock_gettime(id, &t))
        return 0;
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

http_sink_counts http_sink_now(http_sink *s)
{
    if (s->child > 0)
        return ask_child(s, 'c');
    return (http_sink_counts){atomic_load(&s->requests), atomic_load(&s->bytes), thread_cpu(s->th)};
}

http_sink_counts http_sink_stop(http_sink *s)
{
    http_sink_counts k;
    if (s->child > 0) {
        k = ask_child(s, 'q');
        close(s->ctl_w);
        close(s->res_r);
        int st;
        while (waitpid(s->child, &st, 0) < 0 && errno == EINTR)
            ;
    } else {
        k = http_sink_now(s);
        atomic_store(&s->stop, 1);
        pthread_join(s->th, NULL);
        for (int i = 0; i < SINK_CONNS; i++) {
            if (s->c[i].fd >= 0)
                close(s->c[i].fd);
            free(s->c[i].buf);
        }
        close(s->lfd);
        k.requests = atomic_load(&s->requests);
        k.bytes = atomic_load(&s->bytes);
    }
    free(s);
    return k;
}
