/* tests/http_loopback.h — owns a small real HTTP/1.1 server for the exporter
 * tests: 127.0.0.1, an ephemeral port, one thread of its own.
 *
 * It keeps connections alive, reads Content-Length and chunked bodies,
 * gunzips a body sent with Content-Encoding: gzip, records every request
 * (method, path, headers, decoded body, the connection it came on, when it
 * arrived) and answers from a script: a list of steps, each applied to a
 * number of requests in arrival order, then the default answer (200 with an
 * empty body, which is an empty ExportTraceServiceResponse; "{}" for JSON).
 * A step can also stall (read the request, never answer, keep the socket
 * open until hl_stop) or close the connection without answering. An
 * overloaded collector (hl_overloaded) answers 429/503 with a Retry-After
 * of 0 or of a date in the past to every request: counting what arrives
 * over a window pins the exporter's backoff floor.
 *
 * Bounds: 64 connections at once (more are closed at accept), 32 MiB per
 * request, 4096 recorded requests (more are answered but not recorded). The
 * thread polls with a wake pipe and stops in hl_stop, which closes everything.
 */
#ifndef CBT_TESTS_HTTP_LOOPBACK_H
#define CBT_TESTS_HTTP_LOOPBACK_H

#include <stddef.h>
#include <stdint.h>

typedef enum hl_action {
    HL_RESPOND = 0, /* status, optional Retry-After and body */
    HL_STALL,       /* read the request, never answer */
    HL_CLOSE,       /* read the request, close the connection at once */
} hl_action;

#define HL_BODY_MAX 1024

typedef struct hl_step {
    hl_action action;
    uint32_t times;          /* requests this step answers (0 means 1) */
    int status;              /* HL_RESPOND: e.g. 503 */
    char retry_after[64];    /* "" = no Retry-After header */
    char content_type[64];   /* "" = the request's own content type */
    uint8_t body[HL_BODY_MAX];
    size_t body_len;
} hl_step;

#define HL_MAX_HEADERS 48

typedef struct hl_header {
    char name[128];
    char value[512];
} hl_header;

typedef struct hl_request {
    char method[16];
    char path[512];
    hl_header headers[HL_MAX_HEADERS];
    uint32_t n_headers;
    uint8_t *body;      /* decoded (gunzipped when the request was gzip) */
    size_t body_len;
    size_t wire_len;    /* body bytes as received */
    int gzip;           /* Content-Encoding: gzip and the body inflated cleanly */
    int chunked;        /* the body came as Transfer-Encoding: chunked */
    uint32_t conn_id;   /* 1-based, in accept order */
    uint64_t arrived_ns; /* CLOCK_MONOTONIC when the request was complete */
} hl_request;

typedef struct hl_server hl_server;

/* Listen on 127.0.0.1:0 and start the thread; NULL on failure. */
hl_server *hl_start(void);
/* Stop the thread, close every socket, free all recorded requests. */
void hl_stop(hl_server *s);

uint16_t hl_port(const hl_server *s);
/* "http://127.0.0.1:PORT" + path into buf. */
void hl_url(const hl_server *s, const char *path, char *buf, size_t cap);

/* Replace the script (steps copied) and restart it at the next request. */
void hl_script(hl_server *s, const hl_step *steps, size_t n);

/* Requests seen so far (recorded or not) and connections accepted. */
uint32_t hl_request_count(hl_server *s);
uint32_t hl_connection_count(hl_server *s);
/* Wait until at least n requests arrived; 1 if so, 0 after timeout_ms. */
int hl_wait_requests(hl_server *s, uint32_t n, uint32_t timeout_ms);
/* A copy of recorded request i (caller frees with hl_request_free); 0 when
 * there is none. */
int hl_request_get(hl_server *s, uint32_t i, hl_request *out);
void hl_request_free(hl_request *r);
/* The header's value in a request (case-insensitive name), or NULL. */
const char *hl_header_get(const hl_request *r, const char *name);

/* An HTTP date (RFC 9110 IMF-fixdate, "Sun, 06 Nov 1994 08:49:37 GMT")
 * `offset_s` seconds from now, negative for the past: a step's retry_after
 * for answering "Retry-After: <date>". */
void hl_http_date(int64_t offset_s, char *buf, size_t cap);

/* A step that answers every request from now on with `status` (429, 503)
 * and "Retry-After: <retry_after>" ("0", an hl_http_date): an overloaded
 * collector that asks for no wait at all. */
hl_step hl_overloaded(int status, const char *retry_after);

/* A port on 127.0.0.1 where nothing listens (bound, then closed). */
uint16_t hl_closed_port(void);

/* Gunzip (or zlib/raw auto-detect) in[0..n) into a malloc'd buffer; 0 on error. */
int hl_gunzip(const uint8_t *in, size_t n, uint8_t **out, size_t *out_len);

#endif /* CBT_TESTS_HTTP_LOOPBACK_H */
