/* exporter/otlp_http.c — owns the OTLP exporter: a cbt_sink that queues
 * finished spans and one thread that sends them to a collector with libcurl,
 * over OTLP/HTTP or OTLP/gRPC (cfg.protocol), and, when the config names a
 * metric set (cfg.blend), sends snapshots of it to the metrics endpoint from
 * the same thread. gRPC changes only how a request is framed and sent and
 * how the answer is read (exporter/otlp_grpc.c has its wire rules); the
 * queue, batching, retries, budget, shutdown and counts are the same code.
 *
 * The queue: a byte ring of compact span records (host/util/span_queue.c:
 * only the used attributes, events and string bytes of each span, a few
 * hundred bytes for an MP span instead of a 2704-byte cbt_span) of
 * max_queue * CBT_OTLP_QUEUE_BYTES_PER_SPAN bytes allocated at create, with
 * 64-bit running span counts `head` (first span not yet resolved) and `tail`
 * (next span), and the ring's own byte positions, all under `lock`. on_span
 * (harvester thread) takes the lock only to copy one record in; when
 * max_queue spans are queued, or the ring's bytes cannot hold the record,
 * the span is dropped and counted, never waited on. The exporter thread
 * takes a batch's count and first position under the lock and reads its
 * records without it (a push never writes below the ring's free bytes, and
 * the ring's head only moves after the batch is resolved), so a batch being
 * retried still counts against the queue: memory is bounded by the ring
 * and one encode/gzip buffer.
 *
 * When a batch goes out: `max_batch` spans are queued, `schedule_delay_ms`
 * has passed since the last export, a flush asked for everything queued, or
 * the exporter is stopping. A batch is the next up to max_batch records
 * from head; the encoder expands them one at a time into a scratch span
 * (cbt_otlp_encode_proto_at_), so a batch is never copied out whole.
 *
 * Sending: encode (protobuf or JSON, exporter/otlp_encode.c), optionally gzip
 * (zlib, gzip header), POST with one curl easy handle driven through one
 * multi handle, so the connection is kept alive across batches and the
 * transfer can be aborted at once (curl_multi_wakeup) when a deadline passes;
 * the XFERINFO progress callback checks the same deadline. An encoded
 * request over max_message_bytes is never sent: the batch is halved and
 * each half encoded and sent on its own (export_batch), and a span that
 * alone is over the limit is dropped and counted (spans_too_large).
 *
 * OTLP/gRPC: the same POST over HTTP/2 to <endpoint>/<service>/Export,
 * cleartext with prior knowledge for http:// (see post() for libcurl 7.x's
 * connection-reuse bug and how it is avoided), ALPN for https://; a
 * libcurl without HTTP/2 is refused at create. The encoders append after
 * 5 bytes kept free at the start of the body, so the message's prefix
 * (compressed flag, big-endian length) is written in place; with gzip the
 * compressed message goes after 5 free bytes of the gzip buffer. Headers:
 * content-type application/grpc, te: trailers, grpc-timeout (timeout_ms),
 * grpc-encoding gzip when on, grpc-accept-encoding gzip, the caller's
 * headers as lowercase metadata. The answer's HTTP status, headers and
 * trailers (libcurl hands HTTP/2 trailers to the header callback after the
 * body) give a gRPC code (cbt_grpc_outcome); OK reads partial_success from
 * the answer's message (inflated when the collector gzipped it). Outcome
 * by code (the OTLP spec's table):
 *   OK                     accepted (partial_success as below)
 *   CANCELLED DEADLINE_EXCEEDED ABORTED OUT_OF_RANGE UNAVAILABLE DATA_LOSS
 *                          retried as 503 is, below; a RetryInfo in
 *                          grpc-status-details-bin is read as Retry-After
 *   RESOURCE_EXHAUSTED     retried only with a RetryInfo (its delay, within
 *                          the floor and budget, as Retry-After); else dropped
 *   any other code         dropped, counted in failures_by_grpc_code[code]
 *                          (as is the last code of a batch that runs out of
 *                          budget)
 * OTLP/HTTP's outcome:
 *   2xx                    accepted; an ExportTraceServiceResponse with
 *                          partial_success.rejected_spans > 0 counts those
 *                          as dropped and spans_rejected (its error_message
 *                          is logged, rate-limited as below)
 *   429 502 503 504, connection failures and timeouts
 *                          retried with exponential backoff: the step is
 *                          100 ms, doubling, capped at 5 s; without
 *                          Retry-After the wait is full jitter in [0, step],
 *                          with one (seconds or an HTTP date) it is that
 *                          long but never shorter than the step, so "0" or
 *                          a date in the past cannot make a retry storm; the
 *                          batch gives up when the next try would start past
 *                          retry_budget_ms from its first try (or past the
 *                          shutdown deadline)
 *   anything else          the batch fails for good: dropped and counted
 *
 * Metrics (cfg.blend set, or cfg.self_metrics ON; cfg.metrics_disabled
 * clear): the thread takes a cbt_blend_snapshot and, unless self_metrics is
 * OFF, cbt's own health (cbt_metrics_get and this exporter's stats: the
 * cbt.* instruments), encodes them as one request (exporter/otlp_metrics.c)
 * and sends it with
 * the same post / retry / gzip / headers path to cfg.metrics_endpoint (one
 * easy handle: post() sets the URL, so spans and metrics share the kept-alive
 * connection). When: every metrics_interval_ms (0: never periodically),
 * after each cbt_flush (the flush bumps `metrics_req` and wakes the thread;
 * it does not wait for the metrics POST, so the harvester never waits on
 * it), and once after the loop at shutdown, bounded by the same deadline as
 * the last spans. A periodic or flush export is served before a span batch
 * that is due at the same moment. Values are cumulative, so a failed export
 * loses nothing the next one does not carry: its retry budget is
 * min(retry_budget_ms, metrics_interval_ms), which also bounds how long a
 * metrics outage can hold span batches behind it. Counted in
 * metrics_exports / metrics_failures; retries and bytes in the shared ones.
 * The final export at shutdown runs after the tracer is gone: its cbt.*
 * figures are the ones the final flush read (cbt_metrics_closing_, on
 * cbt_shutdown's thread, after the harvester stopped).
 *
 * Threads and stop path: the exporter thread is started by create and is the
 * only user of the curl handles and buffers. flush (cbt_flush's thread) moves
 * `flush_target` to tail, wakes the thread and waits on `done_cv` until head
 * reaches the target or timeout_ms (or flush_within's bound) passes
 * (CBT_ERR_TIMEOUT). cbt_shutdown()
 * calls the sinks' flush once more and then destroy; a flush that finds no
 * active tracer is that last one, and starts the shutdown clock: from then
 * on retries and transfers are bounded by shutdown_timeout_ms, and its wait
 * by the same deadline (and FINAL_GRACE_MS past it, for the thread to abort
 * the transfer in flight and drop what is left, so that the final export is
 * over when it returns: cbt_shutdown_final reads spans_lost right after).
 * Once the deadline has passed, whether or not `stopping` is set yet, the
 * thread drops (and counts) the whole queue at once, without encoding
 * batches post() would refuse: however long the queue, that takes one
 * lock, so the final flush never leaves a loss for destroy to count.
 * destroy stops accepting spans, sets `stopping`, arms
 * the deadline (if the flush did not), wakes the thread (condition variable
 * and curl_multi_wakeup) and joins it. The thread exports what is queued
 * until the deadline, drops (and counts) whatever is left when it passes,
 * aborting a transfer in flight, and exits; then the caller's final_stats
 * (cbt_otlp_config v2) is filled and everything freed. So cbt_shutdown()
 * spends at most about shutdown_timeout_ms here in total.
 *
 * Disabled (config->disabled, OTEL_SDK_DISABLED=true): create succeeds with a
 * sink that ignores spans (nothing queued, counted, sent) and starts no
 * thread; stats stay zero.
 *
 * Logging: problems go to stderr prefixed "cbt otlp:", at most once per
 * distinct problem per 10 s (with a count of those suppressed): a failure
 * by its HTTP status, gRPC code (with grpc-message) or curl error, a partial
 * success by its rejected count and error_message. Header values and the
 * endpoint URL (which may carry credentials) are never printed.
 */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>
#include <zlib.h>

#include "opentelemetry/proto/collector/metrics/v1/metrics_service.pb-c.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb-c.h"
#include "cbt/otlp.h"
#include "internal/abi.h"
#include "otlp_grpc.h"
#include "internal/publish_hook.h" /* cbt_metrics_closing_ */
#include "otlp_private.h"
#include "internal/span_queue.h"

#define BACKOFF_BASE_MS 100u
#define BACKOFF_CAP_MS 5000u
#define RESP_MAX (64u * 1024u)       /* response bytes kept; the rest is discarded */
#define POLL_SLICE_MS 100             /* longest curl_multi_poll between deadline checks */
#define LOG_WINDOW_NS (10ull * 1000000000ull)
#define LOG_SLOTS 16
#define MAX_QUEUE_LIMIT (1u << 20)
#define FINAL_GRACE_MS 500u /* the final flush's wait past the deadline: the batch in
                               flight is aborted, the rest dropped, within a poll slice */

typedef struct log_slot {
    uint64_t key;
    uint64_t last_ns;
    uint32_t suppressed;
} log_slot;

struct cbt_otlp_exporter {
    cbt_otlp_config cfg;
    int disabled;

    /* ---- the queue: under lock ---- */
    pthread_mutex_t lock;
    pthread_cond_t work_cv; /* the exporter thread waits here */
    pthread_cond_t done_cv; /* flush waits here for head to move */
    cbt_spanq q;            /* the records of spans [head, tail) */
    uint32_t cap;           /* max_queue: spans held at most */
    uint64_t head, tail;    /* running span counts */
    uint64_t flush_target;     /* export everything below this index now */
    uint64_t stop_deadline_ns; /* CLOCK_MONOTONIC; 0: no shutdown clock yet */
    int stopping;              /* destroy ran: drain and exit */
    int warned_full;

    _Atomic uint64_t abort_at_ns; /* transfers in flight stop at this time (0: never) */

    /* ---- metrics: under lock ---- */
    int metrics_on;        /* cfg.blend set (or self_metrics ON) and metrics not disabled */
    int self_on;           /* the cbt.* instruments go with each metrics export */
    int have_closing;      /* `closing` holds the tracer's figures at the final flush */
    cbt_metrics closing;
    uint64_t metrics_req;  /* bumped by each cbt_flush: export a snapshot now */
    uint64_t metrics_done; /* the last metrics_req the thread has served */
    int in_metrics;        /* a metrics export is running on the exporter thread */
    /* set (under lock, read anywhere) while a metrics export must give way:
     * spans are waiting on a flush or a full batch, or shutdown began */
    _Atomic int metrics_yield;

    pthread_t thread;
    int started;

    /* ---- exporter thread only ---- */
    CURLM *multi;
    CURL *easy;
    struct curl_slist *hdrs;
    cbt_buf body, gz;
    uint8_t *resp;
    size_t resp_len;
    char retry_after[64];
    /* OTLP/gRPC (cfg.protocol CBT_OTLP_GRPC): the method URLs, what the
     * answer's headers and trailers said, and the last answer's code */
    int grpc;
    const char *traces_url, *metrics_url; /* cfg's endpoints, or the two below */
    char grpc_traces_url[1200], grpc_metrics_url[1200];
    cbt_grpc_resp gresp;
    int last_grpc;        /* the last answer's gRPC code; -1: no answer */
    int64_t grpc_retry_ms; /* its RetryInfo delay; -1: none */
    int h2c_reuse_bug;    /* libcurl < 8.0.0: see post() */
    int h2c_live_traces, h2c_live_metrics; /* the last h2c request to each went over HTTP/2 */
    int grpc_one_host;    /* both URLs name one scheme://host:port: one connection, one flag */
    uint8_t *resp_plain;  /* a gzip-compressed response message, inflated (RESP_MAX) */
    char errbuf[CURL_ERROR_SIZE];
    uint64_t rng;
    cbt_blend_snapshot snap; /* the metrics export's copy (large: not on the stack) */
    cbt_otlp_self_snapshot self; /* the cbt.* figures of a metrics export */
    uint64_t created_ns;     /* wall clock at create: the cbt.* Sums' start time */

    /* ---- stats (cbt_otlp_stats): exported + dropped = the spans taken ---- */
    _Atomic uint64_t queued, exported, dropped, sent, failed, retries, bytes;
    _Atomic uint64_t metrics_exports, metrics_failures;
    _Atomic uint64_t rejected, too_large, split;
    _Atomic uint64_t by_grpc_code[CBT_OTLP_GRPC_CODES];
    _Atomic uint64_t fail_class[6]; /* failures by HTTP status class (cbt_otlp_stats) */

    /* ---- log limiter ---- */
    pthread_mutex_t log_lock;
    log_slot logs[LOG_SLOTS];
};

/* ---- time, randomness, logging ------------------------------------------------- */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct timespec to_timespec(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                          .tv_nsec = (long)(ns % 1000000000ull)};
    return ts;
}

/* Wait on cv (lock held) until signalled or the monotonic time `until_ns`. */
static void cv_wait_until(pthread_cond_t *cv, pthread_mutex_t *m, uint64_t until_ns)
{
    if (until_ns == UINT64_MAX) {
        pthread_cond_wait(cv, m);
        return;
    }
    struct timespec ts = to_timespec(until_ns);
    pthread_cond_timedwait(cv, m, &ts);
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s; /* xorshift64* */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Log once per `key` per 10 s. */
static void elog(cbt_otlp_exporter *e, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void elog(cbt_otlp_exporter *e, const char *key, const char *fmt, ...)
{
    uint64_t k = hash_str(key), t = now_ns();
    uint32_t suppressed = 0;
    pthread_mutex_lock(&e->log_lock);
    log_slot *slot = NULL, *oldest = &e->logs[0];
    for (int i = 0; i < LOG_SLOTS; i++) {
        if (e->logs[i].key == k && e->logs[i].last_ns) {
            slot = &e->logs[i];
            break;
        }
        if (e->logs[i].last_ns < oldest->last_ns)
            oldest = &e->logs[i];
    }
    if (slot && t - slot->last_ns < LOG_WINDOW_NS) {
        slot->suppressed++;
        pthread_mutex_unlock(&e->log_lock);
        return;
    }
    if (!slot) {
        slot = oldest;
        slot->key = k;
        slot->suppressed = 0;
    }
    suppressed = slot->suppressed;
    slot->suppressed = 0;
    slot->last_ns = t;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (suppressed)
        fprintf(stderr, "cbt otlp: %s (%u similar messages suppressed)\n", msg, suppressed);
    else
        fprintf(stderr, "cbt otlp: %s\n", msg);
    pthread_mutex_unlock(&e->log_lock);
}

/* Copy at most cap-1 printable bytes of [s, s+n) (others as '?'). */
static void printable(const char *s, size_t n, char *out, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < cap; i++)
        out[k++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    out[k] = '\0';
}

/* ---- config checks (URLs: cbt_otlp_url_ok, shared with otlp_env.c) ------------- */

static int header_ok(const cbt_otlp_kv *h)
{
    if (!memchr(h->key, '\0', sizeof h->key) || !memchr(h->value, '\0', sizeof h->value))
        return 0;
    if (!h->key[0])
        return 0;
    for (const char *p = h->key; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("!#$%&'*+-.^_`|~", *p))
            return 0;
    for (const char *p = h->value; *p; p++)
        if (((unsigned char)*p < 0x20 && *p != '\t') || *p == 0x7f)
            return 0;
    return 1;
}

/* An endpoint of the config's protocol: an http(s) URL, or for gRPC also a
 * scheme-less host:port. */
static int endpoint_ok(const cbt_otlp_config *c, const char *u, size_t cap)
{
    if (!memchr(u, '\0', cap))
        return 0;
    return c->protocol == CBT_OTLP_GRPC ? cbt_grpc_endpoint_ok(u) : cbt_otlp_url_ok(u);
}

/* A TLS file named in the config: "" (none), or a path that opens for
 * reading now. `what` names the field in the message. */
static cbt_status tls_file_ok(const char *path, size_t cap, const char *what)
{
    if (!memchr(path, '\0', cap)) {
        fprintf(stderr, "cbt otlp: config: %s is not NUL-terminated\n", what);
        return CBT_ERR_INVAL;
    }
    if (!path[0])
        return CBT_OK;
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "cbt otlp: config: %s \"%s\" cannot be read: %s\n", what, path,
                strerror(errno));
        return CBT_ERR_IO;
    }
    fclose(f);
    return CBT_OK;
}

/* Header names gRPC itself sets (or reserves): not caller metadata. */
static int grpc_reserved(const char *key)
{
    return strcasecmp(key, "content-type") == 0 || strcasecmp(key, "te") == 0 ||
           strncasecmp(key, "grpc-", 5) == 0;
}

static cbt_status check_config(const cbt_otlp_config *c)
{
    const char *want = c->protocol == CBT_OTLP_GRPC ? "an http:// or https:// URL or a host:port"
                                                    : "an http:// or https:// URL";
    if (c->protocol != CBT_OTLP_HTTP_PROTOBUF && c->protocol != CBT_OTLP_HTTP_JSON &&
        c->protocol != CBT_OTLP_GRPC) {
        fprintf(stderr, "cbt otlp: config: protocol %d is not http/protobuf, http/json or "
                        "grpc\n", (int)c->protocol);
        return CBT_ERR_INVAL;
    }
    if (!endpoint_ok(c, c->endpoint, sizeof c->endpoint)) {
        fprintf(stderr, "cbt otlp: config: endpoint is not %s\n", want);
        return CBT_ERR_INVAL;
    }
    if ((c->blend || c->self_metrics == CBT_OTLP_SELF_METRICS_ON) && !c->metrics_disabled &&
        !endpoint_ok(c, c->metrics_endpoint, sizeof c->metrics_endpoint)) {
        fprintf(stderr, "cbt otlp: config: metrics_endpoint is not %s\n", want);
        return CBT_ERR_INVAL;
    }
    if (c->max_message_bytes == 0) {
        fprintf(stderr, "cbt otlp: config: max_message_bytes must be positive (default %u)\n",
                CBT_OTLP_MAX_MESSAGE_DEFAULT);
        return CBT_ERR_INVAL;
    }
    if (c->self_metrics > CBT_OTLP_SELF_METRICS_OFF) {
        fprintf(stderr, "cbt otlp: config: self_metrics %u is not AUTO, ON or OFF\n",
                c->self_metrics);
        return CBT_ERR_INVAL;
    }
    cbt_status st;
    if ((st = tls_file_ok(c->certificate, sizeof c->certificate, "certificate")) ||
        (st = tls_file_ok(c->client_certificate, sizeof c->client_certificate,
                          "client_certificate")) ||
        (st = tls_file_ok(c->client_key, sizeof c->client_key, "client_key")))
        return st;
    if (c->client_key[0] && !c->client_certificate[0]) {
        fprintf(stderr, "cbt otlp: config: client_key is set without client_certificate\n");
        return CBT_ERR_INVAL;
    }
    if (c->max_queue == 0 || c->max_queue > MAX_QUEUE_LIMIT) {
        fprintf(stderr, "cbt otlp: config: max_queue %u must be in [1, %u]\n", c->max_queue,
                MAX_QUEUE_LIMIT);
        return CBT_ERR_INVAL;
    }
    if (c->max_batch == 0 || c->max_batch > c->max_queue) {
        fprintf(stderr, "cbt otlp: config: max_batch %u must be in [1, max_queue %u]\n",
                c->max_batch, c->max_queue);
        return CBT_ERR_INVAL;
    }
    if (c->timeout_ms == 0) {
        fprintf(stderr, "cbt otlp: config: timeout_ms must be positive\n");
        return CBT_ERR_INVAL;
    }
    if (c->n_headers > CBT_OTLP_MAX_HEADERS) {
        fprintf(stderr, "cbt otlp: config: n_headers %u exceeds %d\n", c->n_headers,
                CBT_OTLP_MAX_HEADERS);
        return CBT_ERR_INVAL;
    }
    for (uint32_t i = 0; i < c->n_headers; i++) {
        if (!header_ok(&c->headers[i])) {
            /* the key may be malformed too: name the position only */
            fprintf(stderr, "cbt otlp: config: header %u has an invalid name or a value with "
                            "control characters\n", i + 1);
            return CBT_ERR_INVAL;
        }
        if (c->protocol == CBT_OTLP_GRPC && grpc_reserved(c->headers[i].key)) {
            fprintf(stderr, "cbt otlp: config: header %u (\"%s\") is gRPC's own, not metadata "
                            "a caller may set\n", i + 1, c->headers[i].key);
            return CBT_ERR_INVAL;
        }
    }
    return CBT_OK;
}

/* ---- curl ------------------------------------------------------------------------- */

static pthread_once_t g_curl_once = PTHREAD_ONCE_INIT;
static CURLcode g_curl_init_rc = CURLE_FAILED_INIT;

static void curl_init_once(void) { g_curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
    cbt_otlp_exporter *e = ud;
    size_t n = size * nmemb;
    size_t room = RESP_MAX - e->resp_len;
    size_t take = n < room ? n : room;
    memcpy(e->resp + e->resp_len, p, take);
    e->resp_len += take;
    return n; /* the rest is read and discarded */
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud)
{
    cbt_otlp_exporter *e = ud;
    size_t n = size * nmemb;
    static const char name[] = "retry-after:";
    if (n > sizeof name - 1 && strncasecmp(p, name, sizeof name - 1) == 0) {
        const char *b = p + sizeof name - 1, *end = p + n;
        while (b < end && (*b == ' ' || *b == '\t'))
            b++;
        while (end > b && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
            end--;
        size_t len = (size_t)(end - b);
        if (len >= sizeof e->retry_after)
            len = sizeof e->retry_after - 1;
        memcpy(e->retry_after, b, len);
        e->retry_after[len] = '\0';
    } else if (n >= 5 && strncmp(p, "HTTP/", 5) == 0) {
        e->retry_after[0] = '\0'; /* a new response (after a 100 Continue, say) */
    }
    if (e->grpc) /* headers, and the trailers after the body (HTTP/2) */
        cbt_grpc_resp_header(&e->gresp, p, n);
    return n;
}

static int on_progress(void *ud, curl_off_t dlt, curl_off_t dln, curl_off_t ult, curl_off_t uln)
{
    cbt_otlp_exporter *e = ud;
    (void)dlt, (void)dln, (void)ult, (void)uln;
    uint64_t at = atomic_load_explicit(&e->abort_at_ns, memory_order_acquire);
    return at && now_ns() >= at; /* non-zero aborts the transfer */
}

static cbt_status curl_setup(cbt_otlp_exporter *e)
{
    const cbt_otlp_config *c = &e->cfg;
    e->multi = curl_multi_init();
    e->easy = curl_easy_init();
    if (!e->multi || !e->easy)
        return CBT_ERR_NOMEM;
    struct curl_slist *l = NULL, *n;
#define ADD_HEADER(s)                  \
    do {                               \
        n = curl_slist_append(l, (s)); \
        if (!n)                        \
            goto oom;                  \
        l = n;                         \
    } while (0)
    if (e->grpc) {
        /* gRPC over HTTP/2 (grpc/doc/PROTOCOL-HTTP2.md): the request's fixed
         * headers; the body is one length-prefixed message */
        char tmo[48], v[16];
        cbt_grpc_timeout(c->timeout_ms, v, sizeof v);
        snprintf(tmo, sizeof tmo, "grpc-timeout: %s", v);
        ADD_HEADER("content-type: application/grpc");
        ADD_HEADER("te: trailers");
        ADD_HEADER(tmo);
        if (c->gzip)
            ADD_HEADER("grpc-encoding: gzip");
        ADD_HEADER("grpc-accept-encoding: gzip"); /* a gzip answer is inflated (bounded) */
        ADD_HEADER("Accept:");
    } else {
        ADD_HEADER(c->protocol == CBT_OTLP_HTTP_JSON ? "Content-Type: application/json"
                                                     : "Content-Type: application/x-protobuf");
        if (c->gzip)
            ADD_HEADER("Content-Encoding: gzip");
    }
    ADD_HEADER("Expect:"); /* no 100-continue round trip */
    for (uint32_t i = 0; i < c->n_headers; i++) {
        char line[2 * CBT_OTLP_STR_MAX + 4], key[CBT_OTLP_STR_MAX];
        snprintf(key, sizeof key, "%s", c->headers[i].key);
        if (e->grpc) /* gRPC metadata keys are lowercase */
            for (char *k = key; *k; k++)
                *k = (char)tolower((unsigned char)*k);
        if (c->headers[i].value[0])
            snprintf(line, sizeof line, "%s: %s", key, c->headers[i].value);
        else
            snprintf(line, sizeof line, "%s;", key); /* curl: send it empty */
        ADD_HEADER(line);
        memset(line, 0, sizeof line); /* do not leave the value on the stack */
    }
#undef ADD_HEADER
    e->hdrs = l;

    CURL *h = e->easy;
    CURLcode rc = CURLE_OK;
#define SET(opt, val)                                  \
    do {                                               \
        if (rc == CURLE_OK)                            \
            rc = curl_easy_setopt(h, opt, val);        \
    } while (0)
    SET(CURLOPT_URL, c->endpoint); /* each POST sets its own (post()) */
    SET(CURLOPT_POST, 1L);
    SET(CURLOPT_HTTPHEADER, e->hdrs);
    SET(CURLOPT_TIMEOUT_MS, (long)c->timeout_ms);
    SET(CURLOPT_NOSIGNAL, 1L);
    SET(CURLOPT_SSL_VERIFYPEER, c->verify_tls ? 1L : 0L);
    SET(CURLOPT_SSL_VERIFYHOST, c->verify_tls ? 2L : 0L);
    /* TLS, both protocols: the system's trust store unless a CA bundle is
     * named; a client certificate (and its key, which may be in the same
     * file) for mTLS. The files were checked readable (check_config). */
    if (c->certificate[0])
        SET(CURLOPT_CAINFO, c->certificate);
    if (c->client_certificate[0]) {
        SET(CURLOPT_SSLCERT, c->client_certificate);
        SET(CURLOPT_SSLCERTTYPE, "PEM");
    }
    if (c->client_key[0]) {
        SET(CURLOPT_SSLKEY, c->client_key);
        SET(CURLOPT_SSLKEYTYPE, "PEM");
    }
#if LIBCURL_VERSION_NUM >= 0x075500
    SET(CURLOPT_PROTOCOLS_STR, "http,https");
#else
    SET(CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    SET(CURLOPT_FOLLOWLOCATION, 0L);
    SET(CURLOPT_TCP_KEEPALIVE, 1L);
    SET(CURLOPT_USERAGENT, "cbt-otlp/" CBT_VERSION_STRING);
    SET(CURLOPT_WRITEFUNCTION, on_body);
    SET(CURLOPT_WRITEDATA, e);
    SET(CURLOPT_HEADERFUNCTION, on_header);
    SET(CURLOPT_HEADERDATA, e);
    SET(CURLOPT_XFERINFOFUNCTION, on_progress);
    SET(CURLOPT_XFERINFODATA, e);
    SET(CURLOPT_NOPROGRESS, 0L);
    SET(CURLOPT_ERRORBUFFER, e->errbuf);
#undef SET
    if (rc != CURLE_OK) {
        fprintf(stderr, "cbt otlp: curl setup: %s\n", curl_easy_strerror(rc));
        return CBT_ERR_INVAL;
    }
    return CBT_OK;
oom:
    curl_slist_free_all(l);
    return CBT_ERR_NOMEM;
}

/* ---- buffers --------------------------------------------------------------------- */

static int buf_reserve(cbt_buf *b, size_t need)
{
    if (b->cap >= need)
        return 1;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < need)
        cap *= 2;
    uint8_t *p = realloc(b->data, cap);
    if (!p)
        return 0;
    b->data = p;
    b->cap = cap;
    return 1;
}

/* gzip (RFC 1952) of in[0..n) into out, after `off` bytes left for a
 * prefix (gRPC's: otherwise 0). */
static int gzip_into(const uint8_t *in, size_t n, cbt_buf *out, size_t off)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
        Z_OK)
        return 0;
    size_t bound = off + deflateBound(&z, (uLong)n) + 32;
    if (!buf_reserve(out, bound)) {
        deflateEnd(&z);
        return 0;
    }
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)n;
    z.next_out = out->data + off;
    z.avail_out = (uInt)(out->cap - off);
    int rc = deflate(&z, Z_FINISH);
    out->len = rc == Z_STREAM_END ? off + (size_t)z.total_out : 0;
    deflateEnd(&z);
    return rc == Z_STREAM_END;
}

/* ---- one POST ----------------------------------------------------------------------- */

/* POST_YIELDED: a metrics POST stopped because spans were waiting (not a failure) */
typedef enum post_result { POST_OK, POST_RETRY, POST_FAIL, POST_ABORTED, POST_YIELDED } post_result;

/* Retry-After as milliseconds from now; -1 when absent or unreadable. */
static int64_t retry_after_ms(const char *v)
{
    if (!*v)
        return -1;
    const char *p = v;
    int64_t s = 0;
    while (*p >= '0' && *p <= '9') {
        if (s < 86400 * 365)
            s = s * 10 + (*p - '0');
        p++;
    }
    if (p != v && *p == '\0')
        return s * 1000;
    time_t when = curl_getdate(v, NULL); /* an HTTP date */
    if (when == (time_t)-1)
        return -1;
    time_t now = time(NULL);
    return when > now ? (int64_t)(when - now) * 1000 : 0;
}

static CURLcode transfer(cbt_otlp_exporter *e, int yieldable, int *aborted_out);
static post_result post_outcome(cbt_otlp_exporter *e, CURLcode rc);

/* An OTLP/gRPC answer that came back whole (HTTP status `code`, headers and
 * trailers in e->gresp): its gRPC code (e->last_grpc), RetryInfo delay
 * (e->grpc_retry_ms) and what to do (cbt_grpc_outcome, cbt_grpc_retryable). */
static post_result grpc_result(cbt_otlp_exporter *e, long code)
{
    /* A unary gRPC server sends its response message only for a call that
     * succeeded: a whole message with no status after it means the
     * trailers were lost behind it (a GOAWAY racing the connection's end),
     * and the batch was taken; retrying it would deliver it twice. Without
     * a whole message the call was cut off before the server answered:
     * UNAVAILABLE (cbt_grpc_outcome), retried. */
    int compressed;
    const uint8_t *msg;
    size_t mlen;
    if (code == 200 && e->gresp.status < 0 && !e->gresp.status_bad &&
        e->gresp.content_type_grpc && e->resp_len > 0 &&
        cbt_grpc_frame_parse(e->resp, e->resp_len, &compressed, &msg, &mlen) == 0) {
        e->last_grpc = CBT_GRPC_OK;
        e->grpc_retry_ms = -1;
        return POST_OK;
    }
    int details_bad = 0;
    int g = cbt_grpc_outcome(code, &e->gresp, &e->grpc_retry_ms, &details_bad);
    e->last_grpc = g;
    if (details_bad)
        elog(e, "grpc-details", "an unreadable grpc-status-details-bin (not a google.rpc.Status "
                                "in base64, or over %d bytes): read as no RetryInfo",
             CBT_GRPC_DETAILS_MAX);
    long ver = 0;
    curl_easy_getinfo(e->easy, CURLINFO_HTTP_VERSION, &ver);
    if (ver != CURL_HTTP_VERSION_2_0)
        elog(e, "grpc-http1", "the collector answered over HTTP/1.x (HTTP %ld): an OTLP/gRPC "
                              "endpoint speaks HTTP/2 (is this its OTLP/HTTP port, 4318?)", code);
    if (g == CBT_GRPC_OK)
        return POST_OK;
    return cbt_grpc_retryable(g, e->grpc_retry_ms >= 0) ? POST_RETRY : POST_FAIL;
}

/* One POST of data[0..len) to `url` (the traces or the metrics endpoint) on
 * the one easy handle: connections are kept alive across both. */
static post_result post(cbt_otlp_exporter *e, const char *url, int yieldable, const uint8_t *data,
                        size_t len, long *http_code, CURLcode *curl_rc)
{
    e->resp_len = 0;
    e->retry_after[0] = '\0';
    e->errbuf[0] = '\0';
    e->last_grpc = -1;
    e->grpc_retry_ms = -1;
    cbt_grpc_resp_reset(&e->gresp);
    *http_code = 0;
    *curl_rc = CURLE_OK;
    uint64_t at0 = atomic_load_explicit(&e->abort_at_ns, memory_order_acquire);
    if (at0 && now_ns() >= at0) { /* past the shutdown deadline: do not start */
        *curl_rc = CURLE_ABORTED_BY_CALLBACK;
        return POST_ABORTED;
    }
    if (yieldable && atomic_load_explicit(&e->metrics_yield, memory_order_acquire)) {
        *curl_rc = CURLE_ABORTED_BY_CALLBACK;
        return POST_YIELDED;
    }
    curl_easy_setopt(e->easy, CURLOPT_URL, url);
    curl_easy_setopt(e->easy, CURLOPT_POSTFIELDS, (const char *)data);
    curl_easy_setopt(e->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    int aborted = 0;
    CURLcode rc;
    if (!e->grpc || strncasecmp(url, "https:", 6) == 0) {
        /* OTLP/HTTP as configured; OTLP/gRPC over TLS: HTTP/2 by ALPN */
        if (e->grpc)
            curl_easy_setopt(e->easy, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
        rc = transfer(e, yieldable, &aborted);
    } else {
        /* h2c: HTTP/2 with prior knowledge. libcurl before 8.0.0 fails a
         * second prior-knowledge request on a kept connection ("Error in the
         * HTTP2 framing layer", curl issue #10634), so there a request that
         * follows one that went over HTTP/2 asks for plain HTTP/2, which
         * reuses that connection; if curl had to open a new one instead (the
         * collector closed it), that try never spoke HTTP/2 (an HTTP/1.1
         * Upgrade a gRPC server refuses) and is made again at once with prior
         * knowledge. There, a prior-knowledge request always takes a fresh
         * connection (after a failure the kept one may still be in curl's
         * cache, and reusing it would meet the bug). */
        int *live = url == e->metrics_url && !e->grpc_one_host ? &e->h2c_live_metrics
                                                               : &e->h2c_live_traces;
        int pk = !e->h2c_reuse_bug || !*live;
        curl_easy_setopt(e->easy, CURLOPT_HTTP_VERSION,
                         pk ? (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE : (long)CURL_HTTP_VERSION_2_0);
        if (pk && e->h2c_reuse_bug)
            curl_easy_setopt(e->easy, CURLOPT_FRESH_CONNECT, 1L);
        rc = transfer(e, yieldable, &aborted);
        long ver = 0, connects = 0;
        curl_easy_getinfo(e->easy, CURLINFO_HTTP_VERSION, &ver);
        curl_easy_getinfo(e->easy, CURLINFO_NUM_CONNECTS, &connects);
        if (!pk && !aborted && connects > 0 && !(rc == CURLE_OK && ver == CURL_HTTP_VERSION_2_0)) {
            e->resp_len = 0;
            e->errbuf[0] = '\0';
            cbt_grpc_resp_reset(&e->gresp);
            curl_easy_setopt(e->easy, CURLOPT_HTTP_VERSION,
                             (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE);
            curl_easy_setopt(e->easy, CURLOPT_FRESH_CONNECT, 1L);
            rc = transfer(e, yieldable, &aborted);
            curl_easy_getinfo(e->easy, CURLINFO_HTTP_VERSION, &ver);
        }
        curl_easy_setopt(e->easy, CURLOPT_FRESH_CONNECT, 0L);
        *live = rc == CURLE_OK && ver == CURL_HTTP_VERSION_2_0;
    }
    *curl_rc = rc;
    if (aborted == 2)
        return POST_YIELDED;
    if (rc == CURLE_OK) { /* the request went out and a response came back */
        atomic_fetch_add_explicit(&e->bytes, len, memory_order_relaxed);
        curl_easy_getinfo(e->easy, CURLINFO_RESPONSE_CODE, http_code);
    }
    if (rc == CURLE_ABORTED_BY_CALLBACK)
        return POST_ABORTED;
    return post_outcome(e, rc);
}

/* One transfer of the easy handle as set up (URL, body, HTTP version),
 * driven through the multi handle until done, the shutdown deadline
 * (*aborted = 1) or, when yieldable, spans waiting (*aborted = 2). */
static CURLcode transfer(cbt_otlp_exporter *e, int yieldable, int *aborted_out)
{
    if (curl_multi_add_handle(e->multi, e->easy) != CURLM_OK)
        return CURLE_FAILED_INIT;
    int running = 1, aborted = 0;
    while (running) {
        if (curl_multi_perform(e->multi, &running) != CURLM_OK)
            break;
        if (!running)
            break;
        uint64_t at = atomic_load_explicit(&e->abort_at_ns, memory_order_acquire), t = now_ns();
        if (at && t >= at) {
            aborted = 1;
            break;
        }
        if (yieldable && atomic_load_explicit(&e->metrics_yield, memory_order_acquire)) {
            aborted = 2; /* spans are waiting: this metrics POST gives way */
            break;
        }
        int wait_ms = POLL_SLICE_MS;
        if (at && (at - t) / 1000000u < (uint64_t)wait_ms)
            wait_ms = (int)((at - t) / 1000000u) + 1;
        curl_multi_poll(e->multi, NULL, 0, wait_ms, NULL);
    }
    CURLcode rc = aborted ? CURLE_ABORTED_BY_CALLBACK : CURLE_OK;
    if (!aborted) {
        int left = 0;
        CURLMsg *m;
        rc = CURLE_FAILED_INIT;
        while ((m = curl_multi_info_read(e->multi, &left)))
            if (m->msg == CURLMSG_DONE && m->easy_handle == e->easy)
                rc = m->data.result;
    }
    curl_multi_remove_handle(e->multi, e->easy); /* aborts a transfer still running */
    *aborted_out = aborted;
    return rc;
}

/* What a finished transfer (not aborted) means: retry connection-level
 * failures; an answer by its HTTP status (OTLP/HTTP) or gRPC status. */
static post_result post_outcome(cbt_otlp_exporter *e, CURLcode rc)
{
    if (rc != CURLE_OK) {
        switch (rc) {
        case CURLE_COULDNT_CONNECT:
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_RESOLVE_PROXY:
        case CURLE_OPERATION_TIMEDOUT:
        case CURLE_SEND_ERROR:
        case CURLE_RECV_ERROR:
        case CURLE_GOT_NOTHING:
        case CURLE_PARTIAL_FILE:
        case CURLE_SSL_CONNECT_ERROR:
        case CURLE_HTTP2:
        case CURLE_HTTP2_STREAM:
            return POST_RETRY;
        default:
            return POST_FAIL;
        }
    }
    long code = 0;
    curl_easy_getinfo(e->easy, CURLINFO_RESPONSE_CODE, &code);
    if (e->grpc)
        return grpc_result(e, code);
    if (code >= 200 && code < 300)
        return POST_OK;
    if (code == 429 || code == 502 || code == 503 || code == 504)
        return POST_RETRY;
    return POST_FAIL;
}

/* The response message of an accepted export, for its partial_success:
 * OTLP/HTTP's body as is; OTLP/gRPC's length-prefixed message, inflated
 * into resp_plain when the collector compressed it. 0 with [*msg, *len)
 * (empty: none); -1 when the frame is malformed (logged). */
static int response_message(cbt_otlp_exporter *e, const uint8_t **msg, size_t *len)
{
    *msg = e->resp;
    *len = e->resp_len;
    if (!e->grpc)
        return 0;
    int compressed = 0;
    int rc = cbt_grpc_frame_parse(e->resp, e->resp_len, &compressed, msg, len);
    if (rc == 1) { /* trailers only: no message */
        *len = 0;
        return 0;
    }
    if (rc < 0 || e->resp_len == RESP_MAX) {
        elog(e, "grpc-frame", "the collector's OK answer is not one length-prefixed message of "
                              "at most %u bytes (ignored)", RESP_MAX - CBT_GRPC_PREFIX);
        return -1;
    }
    if (!compressed)
        return 0;
    size_t out = 0;
    if (!e->gresp.encoding_gzip ||
        cbt_grpc_gunzip(*msg, *len, e->resp_plain, RESP_MAX, &out) != 0) {
        elog(e, "grpc-frame", "the collector's OK answer is compressed with %s (ignored)",
             e->gresp.encoding_gzip ? "broken or oversized gzip" : "an encoding cbt did not offer");
        return -1;
    }
    *msg = e->resp_plain;
    *len = out;
    return 0;
}

/* What the collector said it rejected (partial success: rejected spans, or
 * rejected data points for metrics), counted by the caller; its message is
 * logged, at most once per 10 s per signal (elog). */
static uint64_t rejected_in_response(cbt_otlp_exporter *e, int metrics)
{
    const uint8_t *resp;
    size_t resp_len;
    if (response_message(e, &resp, &resp_len) != 0 || resp_len == 0)
        return 0;
    uint64_t rejected = 0;
    char msg[256] = "";
    const int proto = e->cfg.protocol != CBT_OTLP_HTTP_JSON;
    if (proto && !metrics) {
        Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceResponse *r =
            opentelemetry__proto__collector__trace__v1__export_trace_service_response__unpack(
                NULL, resp_len, resp);
        if (!r) {
            elog(e, "bad-response", "the collector's 2xx response is not an "
                                    "ExportTraceServiceResponse (ignored)");
            return 0;
        }
        if (r->partial_success && r->partial_success->rejected_spans > 0) {
            rejected = (uint64_t)r->partial_success->rejected_spans;
            const char *m = r->partial_success->error_message;
            if (m)
                printable(m, strlen(m), msg, sizeof msg);
        }
        opentelemetry__proto__collector__trace__v1__export_trace_service_response__free_unpacked(
            r, NULL);
    } else if (proto) {
        Opentelemetry__Proto__Collector__Metrics__V1__ExportMetricsServiceResponse *r =
            opentelemetry__proto__collector__metrics__v1__export_metrics_service_response__unpack(
                NULL, resp_len, resp);
        if (!r) {
            elog(e, "metrics-bad-response", "the collector's 2xx response is not an "
                                            "ExportMetricsServiceResponse (ignored)");
            return 0;
        }
        if (r->partial_success && r->partial_success->rejected_data_points > 0) {
            rejected = (uint64_t)r->partial_success->rejected_data_points;
            const char *m = r->partial_success->error_message;
            if (m)
                printable(m, strlen(m), msg, sizeof msg);
        }
        opentelemetry__proto__collector__metrics__v1__export_metrics_service_response__free_unpacked(
            r, NULL);
    } else {
        /* {"partialSuccess":{"rejectedSpans":"3","errorMessage":"..."}} (or
         * "rejectedDataPoints"): int64 may be a string or a number in OTLP/JSON */
        const char *body = (const char *)e->resp; /* NUL-terminated: RESP_MAX + 1 bytes */
        e->resp[e->resp_len] = '\0';
        const char *key = metrics ? "\"rejectedDataPoints\"" : "\"rejectedSpans\"";
        const char *p = strstr(body, key);
        if (p) {
            p += strlen(key);
            while (*p == ' ' || *p == ':' || *p == '"' || *p == '\t')
                p++;
            while (*p >= '0' && *p <= '9')
                rejected = rejected * 10 + (uint64_t)(*p++ - '0');
        }
        const char *m = strstr(body, "\"errorMessage\"");
        if (m && rejected) {
            m = strchr(m + strlen("\"errorMessage\""), '"');
            if (m) {
                const char *end = m + 1;
                while (*end && *end != '"')
                    end += (*end == '\\' && end[1]) ? 2 : 1;
                printable(m + 1, (size_t)(end - m - 1), msg, sizeof msg);
            }
        }
    }
    if (rejected)
        elog(e, metrics ? "metrics-partial" : "partial",
             "the collector rejected %llu %s (partial success): %s", (unsigned long long)rejected,
             metrics ? "metric data point(s)" : "span(s)", msg[0] ? msg : "(no message)");
    return rejected;
}

/* Wait (lock not held on entry) until `until_ns` or the shutdown deadline.
 * Returns 0 when the wait would overrun the shutdown deadline. */
static int backoff_wait(cbt_otlp_exporter *e, uint64_t until_ns, int yieldable)
{
    pthread_mutex_lock(&e->lock);
    for (;;) {
        uint64_t dl = e->stop_deadline_ns;
        if ((dl && until_ns > dl) ||
            (yieldable && atomic_load_explicit(&e->metrics_yield, memory_order_acquire))) {
            pthread_mutex_unlock(&e->lock);
            return 0;
        }
        if (now_ns() >= until_ns)
            break;
        cv_wait_until(&e->work_cv, &e->lock, until_ns);
    }
    pthread_mutex_unlock(&e->lock);
    return 1;
}

/* Bytes kept free at the start of e->body for gRPC's message prefix (the
 * encoders append after them, so the message is never copied to frame it). */
static size_t body_headroom(const cbt_otlp_exporter *e) { return e->grpc ? CBT_GRPC_PREFIX : 0; }

/* e->body emptied, its headroom reserved: CBT_OK or CBT_ERR_NOMEM. */
static cbt_status body_start(cbt_otlp_exporter *e)
{
    size_t pre = body_headroom(e);
    e->body.len = 0;
    if (pre && !buf_reserve(&e->body, pre))
        return CBT_ERR_NOMEM;
    e->body.len = pre;
    return CBT_OK;
}

/* A payload (a batch, a metrics snapshot) that failed for good, by the HTTP
 * status of its last try; 0: none came (cbt_otlp_stats.failures_by_http_class). */
static void count_failure(cbt_otlp_exporter *e, long http_code)
{
    unsigned k = http_code >= 100 && http_code < 600 ? (unsigned)(http_code / 100) : 0;
    atomic_fetch_add_explicit(&e->fail_class[k], 1, memory_order_relaxed);
}

/* One payload on its way: where it goes and what its loss means in the log. */
typedef struct send_job {
    const char *url;
    const char *key_prefix; /* "" for spans, "metrics-" for metrics: separate log limits */
    const char *what;       /* "a batch", "a metrics export" */
    char lost[64];          /* "12 spans dropped", "snapshot dropped" */
    uint32_t budget_ms;     /* retry budget from the first try */
    int yieldable;          /* metrics: stop (POST_YIELDED, *yielded) when spans wait */
} send_job;

/* Optionally gzip, then POST data[0..len) until accepted (1), or refused for
 * good, out of retry budget or past the shutdown deadline (0). Counts
 * retries; logs every failure (rate-limited). Exporter thread. */
static int send_retrying(cbt_otlp_exporter *e, const send_job *j, uint8_t *data, size_t len,
                         int *yielded)
{
    if (yielded)
        *yielded = 0;
    const cbt_otlp_config *c = &e->cfg;
    char key[64], what[CURL_ERROR_SIZE + CBT_GRPC_MESSAGE_MAX + 64];
    const size_t pre = body_headroom(e); /* gRPC: data[0..5) is the prefix's room */
    if (c->gzip) {
        if (!gzip_into(data + pre, len - pre, &e->gz, pre)) {
            snprintf(key, sizeof key, "%sgzip", j->key_prefix);
            elog(e, key, "gzip of %s (%zu bytes) failed: %s", j->what, len - pre, j->lost);
            count_failure(e, 0);
            return 0;
        }
        data = e->gz.data;
        len = e->gz.len;
    }
    if (e->grpc) /* one length-prefixed message; the flag says whether it is gzip */
        cbt_grpc_frame_prefix(data, c->gzip, (uint32_t)(len - pre));
    uint64_t first = now_ns();
    uint64_t budget_end = first + (uint64_t)j->budget_ms * 1000000ull;
    for (uint32_t attempt = 0;; attempt++) {
        long code;
        CURLcode rc;
        post_result r = post(e, j->url, j->yieldable, data, len, &code, &rc);
        if (r == POST_OK)
            return 1;
        if (r == POST_YIELDED) {
            if (yielded)
                *yielded = 1;
            return 0;
        }
        if (e->last_grpc >= 0) { /* a gRPC answer: its code (maybe from the HTTP status) */
            char m[CBT_GRPC_MESSAGE_MAX];
            printable(e->gresp.message, strlen(e->gresp.message), m, sizeof m);
            snprintf(key, sizeof key, "%sgrpc-%d", j->key_prefix, e->last_grpc);
            snprintf(what, sizeof what, "gRPC %s (%d)%s%s%s", cbt_grpc_code_name(e->last_grpc),
                     e->last_grpc, code != 200 ? ", from HTTP status" : "", m[0] ? ": " : "", m);
            if (code != 200)
                snprintf(what + strlen(what), sizeof what - strlen(what), " %ld", code);
        } else if (code) {
            snprintf(key, sizeof key, "%shttp-%ld", j->key_prefix, code);
            snprintf(what, sizeof what, "HTTP %ld", code);
        } else {
            snprintf(key, sizeof key, "%scurl-%d", j->key_prefix, (int)rc);
            snprintf(what, sizeof what, "%s%s%s", curl_easy_strerror(rc),
                     e->errbuf[0] ? ": " : "", e->errbuf);
        }
        if (r == POST_ABORTED) {
            snprintf(key, sizeof key, "%saborted", j->key_prefix);
            elog(e, key, "shutdown deadline reached during a POST of %s: %s", j->what, j->lost);
            count_failure(e, code);
            return 0;
        }
        if (r == POST_FAIL) {
            elog(e, key, "the collector refused %s (%s): %s, not retried", j->what, what,
                 j->lost);
            count_failure(e, code);
            return 0;
        }
        /* the collector's wish to wait: Retry-After (HTTP), RetryInfo (gRPC) */
        int64_t ra = e->grpc ? e->grpc_retry_ms : retry_after_ms(e->retry_after);
        uint64_t step = attempt >= 6 ? BACKOFF_CAP_MS : (uint64_t)BACKOFF_BASE_MS << attempt;
        if (step > BACKOFF_CAP_MS)
            step = BACKOFF_CAP_MS;
        uint64_t delay_ms;
        if (ra >= 0) /* the collector's wish, but the floor holds whatever it says */
            delay_ms = (uint64_t)ra > step ? (uint64_t)ra : step;
        else
            delay_ms = rng_next(&e->rng) % (step + 1); /* full jitter */
        uint64_t next = now_ns() + delay_ms * 1000000ull;
        if (next > budget_end) {
            snprintf(key, sizeof key, "%sbudget", j->key_prefix);
            elog(e, key, "giving up on %s after %u tries (%s): retry budget of %u ms spent, %s",
                 j->what, attempt + 1, what, j->budget_ms, j->lost);
            count_failure(e, code);
            return 0;
        }
        elog(e, key, "export of %s failed (%s): retrying", j->what, what);
        if (!backoff_wait(e, next, j->yieldable)) {
            if (j->yieldable && atomic_load_explicit(&e->metrics_yield, memory_order_acquire)) {
                if (yielded)
                    *yielded = 1;
                return 0;
            }
            snprintf(key, sizeof key, "%sshutdown-retry", j->key_prefix);
            elog(e, key, "shutdown deadline reached while retrying %s (%s): %s", j->what, what,
                 j->lost);
            count_failure(e, code);
            return 0;
        }
        atomic_fetch_add_explicit(&e->retries, 1, memory_order_relaxed);
    }
}

static void drop(cbt_otlp_exporter *e, size_t n)
{
    atomic_fetch_add_explicit(&e->dropped, n, memory_order_relaxed);
    atomic_fetch_add_explicit(&e->failed, 1, memory_order_relaxed);
}

/* The records of a batch, for the encoder (cbt_otlp_span_at): span i
 * expanded into the scratch span; i = 0 starts again at the batch's first
 * record (each encoder pass does). */
typedef struct batch_cursor {
    const cbt_spanq *q;
    uint64_t first, pos;
} batch_cursor;

static const cbt_span *batch_at(void *ctx, size_t i, cbt_span *scratch)
{
    batch_cursor *b = ctx;
    if (i == 0)
        b->pos = b->first;
    b->pos = cbt_spanq_read(b->q, b->pos, scratch);
    return scratch;
}

/* The queue position `k` records after `pos`. */
static uint64_t records_after(const cbt_spanq *q, uint64_t pos, size_t k)
{
    while (k--)
        pos = cbt_spanq_next(q, pos);
    return pos;
}

/* Encode and send the n records from queue position `first` (send_retrying).
 * An encoded request over max_message_bytes is never sent: the batch is
 * halved and each half encoded and sent as a batch of its own (recursively:
 * at most log2(max_batch) deep); a lone span over the limit is dropped and
 * counted (spans_too_large). Whatever happens, each of the n spans ends up
 * exported or dropped, once. Exporter thread, without the lock (the records
 * stay until released). */
static void export_batch(cbt_otlp_exporter *e, uint64_t first, size_t n)
{
    const cbt_otlp_config *c = &e->cfg;
    batch_cursor bc = {&e->q, first, first};
    cbt_status st = body_start(e);
    if (st == CBT_OK)
        st = c->protocol == CBT_OTLP_HTTP_JSON
                 ? cbt_otlp_encode_json_at_(&c->resource, n, batch_at, &bc, &e->body)
                 : cbt_otlp_encode_proto_at_(&c->resource, n, batch_at, &bc, &e->body);
    if (st != CBT_OK) {
        elog(e, "encode", "encoding a batch of %zu spans failed: %s (dropped)", n,
             cbt_strerror(st));
        count_failure(e, 0);
        drop(e, n);
        return;
    }
    size_t msg_len = e->body.len - body_headroom(e);
    if (msg_len > c->max_message_bytes) {
        if (n == 1) {
            elog(e, "too-large", "a span alone encodes to %zu bytes, over max_message_bytes "
                                 "(%u): dropped", msg_len, c->max_message_bytes);
            atomic_fetch_add_explicit(&e->too_large, 1, memory_order_relaxed);
            count_failure(e, 0); /* nothing sent */
            drop(e, 1);
            return;
        }
        atomic_fetch_add_explicit(&e->split, 1, memory_order_relaxed);
        size_t half = n / 2;
        export_batch(e, first, half);
        export_batch(e, records_after(&e->q, first, half), n - half);
        return;
    }
    send_job j = {.url = e->traces_url, .key_prefix = "", .what = "a batch",
                  .budget_ms = c->retry_budget_ms};
    snprintf(j.lost, sizeof j.lost, "%zu spans dropped", n);
    if (!send_retrying(e, &j, e->body.data, e->body.len, NULL)) {
        if (e->last_grpc > 0 && e->last_grpc < CBT_OTLP_GRPC_CODES)
            atomic_fetch_add_explicit(&e->by_grpc_code[e->last_grpc], 1, memory_order_relaxed);
        drop(e, n);
        return;
    }
    uint64_t rej = rejected_in_response(e, 0);
    if (rej > n)
        rej = n;
    atomic_fetch_add_explicit(&e->exported, n - rej, memory_order_relaxed);
    atomic_fetch_add_explicit(&e->dropped, rej, memory_order_relaxed);
    atomic_fetch_add_explicit(&e->rejected, rej, memory_order_relaxed);
    atomic_fetch_add_explicit(&e->sent, 1, memory_order_relaxed);
}

static uint64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* cbt's own health for a metrics export (exporter thread, lock not held):
 * the tracer's figures (the final flush's, once it read them at shutdown;
 * else cbt_metrics_get's; else none: no tracer) and this exporter's stats. */
static void take_self(cbt_otlp_exporter *e, cbt_otlp_self_snapshot *s)
{
    memset(s, 0, sizeof *s);
    s->start_ns = e->created_ns;
    s->time_ns = wall_ns();
    pthread_mutex_lock(&e->lock);
    if (e->have_closing) {
        s->tracer = e->closing;
        s->have_tracer = 1;
    }
    pthread_mutex_unlock(&e->lock);
    if (!s->have_tracer) {
        s->tracer = (cbt_metrics)CBT_STRUCT_INIT(cbt_metrics);
        s->have_tracer = cbt_metrics_get(&s->tracer) == CBT_OK;
    }
    s->exporter = (cbt_otlp_stats)CBT_STRUCT_INIT(cbt_otlp_stats);
    (void)cbt_otlp_exporter_stats(e, &s->exporter);
    /* over gRPC the failures go by status code: [1..16] from the stats'
     * failures_by_grpc_code (span batches that failed for good, by the
     * collector's last answer), [0] (no status: the connection, a timeout,
     * shutdown) from failures_by_http_class[0] */
    s->grpc = e->cfg.protocol == CBT_OTLP_GRPC;
    for (int i = 1; i < CBT_OTLP_GRPC_CODES; i++)
        s->failures_by_grpc_code[i] = s->exporter.failures_by_grpc_code[i];
    s->failures_by_grpc_code[0] = s->exporter.failures_by_http_class[0];
}

/* Snapshot cfg.blend (when set) and cbt's own health (unless self_metrics
 * is OFF), encode them as one request and send it (send_retrying). A failure loses
 * nothing the next export does not carry (the values are cumulative), so the
 * retry budget is at most one interval. Spans come first: a periodic or
 * flush-requested export (yieldable) stops as soon as spans wait on a flush,
 * a full batch or shutdown (metrics_yield), and returns 0 so the caller asks
 * for it again after the spans; the final export at shutdown does not yield.
 * Returns 1 when done (sent, or failed for good). Exporter thread. */
static int export_metrics(cbt_otlp_exporter *e, int yieldable)
{
    const cbt_otlp_config *c = &e->cfg;
    const cbt_blend_snapshot *blend = NULL;
    cbt_status st = CBT_OK;
    if (c->blend && (st = cbt_blend_snapshot_take(c->blend, &e->snap)) == CBT_OK)
        blend = &e->snap;
    if (st == CBT_OK)
        st = body_start(e);
    if (st == CBT_OK) {
        if (e->self_on)
            take_self(e, &e->self);
        st = cbt_otlp_encode_metrics_(&c->resource, blend, e->self_on ? &e->self : NULL,
                                      c->protocol == CBT_OTLP_HTTP_JSON, &e->body);
    }
    if (st != CBT_OK) {
        elog(e, "metrics-encode", "encoding the metrics failed: %s (snapshot dropped)",
             cbt_strerror(st));
        count_failure(e, 0);
        atomic_fetch_add_explicit(&e->metrics_failures, 1, memory_order_relaxed);
        return 1;
    }
    if (e->body.len - body_headroom(e) > c->max_message_bytes) { /* one snapshot: no halves */
        elog(e, "metrics-too-large", "a metrics snapshot encodes to %zu bytes, over "
             "max_message_bytes (%u): not sent", e->body.len - body_headroom(e),
             c->max_message_bytes);
        count_failure(e, 0); /* nothing sent */
        atomic_fetch_add_explicit(&e->metrics_failures, 1, memory_order_relaxed);
        return 1;
    }
    uint32_t budget = c->retry_budget_ms;
    if (c->metrics_interval_ms && c->metrics_interval_ms < budget)
        budget = c->metrics_interval_ms;
    send_job j = {.url = e->metrics_url, .key_prefix = "metrics-",
                  .what = "a metrics snapshot", .budget_ms = budget, .yieldable = yieldable};
    snprintf(j.lost, sizeof j.lost, "snapshot dropped (the next export carries its values)");
    int yielded = 0;
    if (!send_retrying(e, &j, e->body.data, e->body.len, &yielded)) {
        if (yielded)
            return 0;
        if (e->grpc && e->last_grpc > 0 && e->last_grpc < CBT_OTLP_GRPC_CODES)
            atomic_fetch_add_explicit(&e->by_grpc_code[e->last_grpc], 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&e->metrics_failures, 1, memory_order_relaxed);
        return 1;
    }
    (void)rejected_in_response(e, 1); /* logged; the export itself was accepted */
    atomic_fetch_add_explicit(&e->metrics_exports, 1, memory_order_relaxed);
    return 1;
}

/* ---- the exporter thread ------------------------------------------------------------ */

static void *exporter_main(void *arg)
{
    cbt_otlp_exporter *e = arg;
    const uint64_t delay_ns = (uint64_t)e->cfg.schedule_delay_ms * 1000000ull;
    const uint64_t metrics_ns = (uint64_t)e->cfg.metrics_interval_ms * 1000000ull;
    uint64_t next_export = now_ns() + delay_ns;
    /* UINT64_MAX: no periodic metrics export (metrics off, or interval 0) */
    uint64_t next_metrics = e->metrics_on && metrics_ns ? now_ns() + metrics_ns : UINT64_MAX;
    pthread_mutex_lock(&e->lock);
    for (;;) {
        uint64_t n = e->tail - e->head, t = now_ns();
        if (e->stopping && n == 0)
            break;
        /* past the shutdown deadline (armed by the final flush or by destroy):
         * post() would refuse every batch, so drop the whole queue at once
         * rather than encode each first. The final flush then returns with
         * the loss counted, and cbt_shutdown_final's spans_lost is final. */
        if (n > 0 && e->stop_deadline_ns && t >= e->stop_deadline_ns) {
            atomic_fetch_add_explicit(&e->dropped, n, memory_order_relaxed);
            e->head = e->tail;
            cbt_spanq_release(&e->q, e->q.tail);
            pthread_cond_broadcast(&e->done_cv);
            pthread_mutex_unlock(&e->lock);
            elog(e, "shutdown-left", "shutdown deadline reached: %llu queued spans dropped",
                 (unsigned long long)n);
            pthread_mutex_lock(&e->lock);
            if (e->stopping)
                break;
            continue;
        }
        int due = n >= e->cfg.max_batch || e->stopping || e->head < e->flush_target ||
                  t >= next_export;
        /* metrics: on the interval, or a cbt_flush asked; only when no span
         * batch is due (spans first), never while stopping (the final export
         * follows the loop) */
        if (e->metrics_on && !e->stopping && !(n > 0 && due) &&
            (t >= next_metrics || e->metrics_done != e->metrics_req)) {
            uint64_t req = e->metrics_req;
            e->in_metrics = 1;
            atomic_store_explicit(&e->metrics_yield, 0, memory_order_release);
            pthread_mutex_unlock(&e->lock);

            int done = export_metrics(e, 1);

            pthread_mutex_lock(&e->lock);
            e->in_metrics = 0;
            if (done) {
                e->metrics_done = req;
                if (next_metrics != UINT64_MAX)
                    next_metrics = now_ns() + metrics_ns;
            }
            /* gave way to spans: the request stays open, served after them */
            continue;
        }
        if (n == 0 || !due) {
            uint64_t until = UINT64_MAX; /* schedule_delay_ms 0: on_span wakes us */
            if (delay_ns) {
                if (t >= next_export) /* the timer fired with nothing queued */
                    next_export = t + delay_ns;
                until = next_export;
            }
            if (next_metrics < until)
                until = next_metrics;
            cv_wait_until(&e->work_cv, &e->lock, until);
            continue;
        }
        uint64_t take = n < e->cfg.max_batch ? n : e->cfg.max_batch;
        uint64_t first = e->q.head, end = first;
        pthread_mutex_unlock(&e->lock);

        export_batch(e, first, (size_t)take);
        for (uint64_t i = 0; i < take; i++) /* where the batch's records end */
            end = cbt_spanq_next(&e->q, end);

        pthread_mutex_lock(&e->lock);
        cbt_spanq_release(&e->q, end);
        e->head += take;
        pthread_cond_broadcast(&e->done_cv);
        next_export = now_ns() + delay_ns;
    }
    pthread_mutex_unlock(&e->lock);
    /* the final metrics export, after the spans: post() refuses to start past
     * the shutdown deadline and aborts a transfer at it, so this stays within
     * shutdown_timeout_ms too (a refusal counts as a metrics failure) */
    if (e->metrics_on)
        (void)export_metrics(e, 0);
    return NULL;
}

/* ---- the sink ------------------------------------------------------------------------ */

static cbt_status sink_on_span(void *ctx, const cbt_span *s)
{
    cbt_otlp_exporter *e = ctx;
    pthread_mutex_lock(&e->lock);
    if (e->stopping) {
        pthread_mutex_unlock(&e->lock);
        return CBT_ERR_STOPPED;
    }
    if (e->stop_deadline_ns) {
        /* spans after a tracer-less flush: that flush was not cbt_shutdown's */
        e->stop_deadline_ns = 0;
        atomic_store_explicit(&e->abort_at_ns, 0, memory_order_release);
    }
    uint64_t n = e->tail - e->head;
    if (n >= e->cap || !cbt_spanq_push(&e->q, s)) {
        int warn = !e->warned_full;
        size_t used = cbt_spanq_used(&e->q), size = e->q.size;
        e->warned_full = 1;
        pthread_mutex_unlock(&e->lock);
        atomic_fetch_add_explicit(&e->dropped, 1, memory_order_relaxed);
        if (warn)
            elog(e, "queue-full", "queue full (%llu of %u spans, %zu of %zu bytes): dropping "
                                  "spans until the exporter catches up",
                 (unsigned long long)n, e->cap, used, size);
        return CBT_ERR_FULL;
    }
    e->tail++;
    e->warned_full = 0;
    if (n + 1 == e->cfg.max_batch || (n == 0 && e->cfg.schedule_delay_ms == 0)) {
        if (e->in_metrics && n + 1 >= e->cfg.max_batch)
            atomic_store_explicit(&e->metrics_yield, 1, memory_order_release);
        pthread_cond_signal(&e->work_cv);
    }
    pthread_mutex_unlock(&e->lock);
    atomic_fetch_add_explicit(&e->queued, 1, memory_order_relaxed);
    return CBT_OK;
}

/* The queue sent (or dropped, past the shutdown deadline), waiting at most
 * `bound_ms` (cbt_flush's time left) and the export timeout. */
static cbt_status sink_flush_within(void *ctx, uint32_t bound_ms)
{
    cbt_otlp_exporter *e = ctx;
    uint64_t t = now_ns();
    uint32_t ms = bound_ms < e->cfg.timeout_ms ? bound_ms : e->cfg.timeout_ms;
    uint64_t until = t + (uint64_t)ms * 1000000ull;
    /* cbt_shutdown's last flush (see the top): made on the shutting-down
     * thread; a cbt_flush that raced the shutdown is not it, and keeps its
     * own bound */
    int final = cbt_shutdown_flushing_();
    pthread_mutex_lock(&e->lock);
    if (final) {
        if (!e->stop_deadline_ns) {
            e->stop_deadline_ns = t + (uint64_t)e->cfg.shutdown_timeout_ms * 1000000ull;
            atomic_store_explicit(&e->abort_at_ns, e->stop_deadline_ns, memory_order_release);
        }
        /* the final export must be over when this returns (cbt_shutdown_final
         * asks for spans_lost next): past the deadline the thread aborts the
         * transfer in flight and drops the rest at once; wait for that too */
        until = e->stop_deadline_ns + FINAL_GRACE_MS * 1000000ull;
    }
    uint64_t target = e->tail;
    if (target > e->flush_target)
        e->flush_target = target;
    if (e->metrics_on && !final)
        e->metrics_req++; /* a snapshot goes out soon; not waited for (destroy sends the last) */
    if (e->in_metrics && e->head < target) /* spans first: the metrics POST gives way */
        atomic_store_explicit(&e->metrics_yield, 1, memory_order_release);
    pthread_cond_broadcast(&e->work_cv);
    while (e->head < target && now_ns() < until)
        cv_wait_until(&e->done_cv, &e->lock, until);
    cbt_status st = e->head >= target ? CBT_OK : CBT_ERR_TIMEOUT;
    pthread_mutex_unlock(&e->lock);
    cbt_metrics m;
    if (final && e->self_on && cbt_metrics_closing_(&m) == CBT_OK) {
        /* the tracer's last figures, for the final metrics export (the
         * tracer is gone by then); the queue's fate is in them */
        pthread_mutex_lock(&e->lock);
        e->closing = m;
        e->have_closing = 1;
        pthread_mutex_unlock(&e->lock);
    }
    return st;
}

static cbt_status sink_flush(void *ctx) { return sink_flush_within(ctx, 0xffffffffu); }

static uint64_t sink_spans_lost(void *ctx)
{
    cbt_otlp_exporter *e = ctx;
    return atomic_load_explicit(&e->dropped, memory_order_relaxed);
}

/* The caller's final_stats (cbt_otlp_config v2), once nothing more can change. */
static void fill_final_stats(cbt_otlp_exporter *e)
{
    if (e->cfg.final_stats)
        (void)cbt_otlp_exporter_stats(e, e->cfg.final_stats); /* the out-struct rule */
}

static void exporter_free(cbt_otlp_exporter *e)
{
    if (e->easy)
        curl_easy_cleanup(e->easy);
    if (e->multi)
        curl_multi_cleanup(e->multi);
    if (e->hdrs)
        curl_slist_free_all(e->hdrs);
    cbt_buf_free(&e->body);
    cbt_buf_free(&e->gz);
    free(e->resp);
    free(e->resp_plain);
    cbt_spanq_free(&e->q);
    pthread_cond_destroy(&e->work_cv);
    pthread_cond_destroy(&e->done_cv);
    pthread_mutex_destroy(&e->lock);
    pthread_mutex_destroy(&e->log_lock);
    /* the config holds header values: do not leave them in freed memory */
    memset(&e->cfg, 0, sizeof e->cfg);
    free(e);
}

static void sink_destroy(void *ctx)
{
    cbt_otlp_exporter *e = ctx;
    if (e->started) {
        pthread_mutex_lock(&e->lock);
        e->stopping = 1;
        if (!e->stop_deadline_ns) {
            e->stop_deadline_ns = now_ns() + (uint64_t)e->cfg.shutdown_timeout_ms * 1000000ull;
            atomic_store_explicit(&e->abort_at_ns, e->stop_deadline_ns, memory_order_release);
        }
        if (e->in_metrics) /* the spans get the shutdown budget first */
            atomic_store_explicit(&e->metrics_yield, 1, memory_order_release);
        pthread_cond_broadcast(&e->work_cv);
        pthread_mutex_unlock(&e->lock);
        curl_multi_wakeup(e->multi);
        pthread_join(e->thread, NULL);
    }
    fill_final_stats(e);
    exporter_free(e);
}

static cbt_status disabled_on_span(void *ctx, const cbt_span *s)
{
    (void)ctx;
    (void)s;
    return CBT_OK;
}

static cbt_status disabled_flush(void *ctx)
{
    (void)ctx;
    return CBT_OK;
}

static void disabled_destroy(void *ctx)
{
    fill_final_stats(ctx); /* zero: it counts nothing */
    free(ctx);
}

/* cbt/otlp.h's inline cbt_otlp_exporter_create() set sink_out's version and
 * size: at most that many bytes are written (internal/abi.h), and only on
 * success. */
cbt_status cbt_otlp_exporter_create_into(const cbt_otlp_config *c, cbt_otlp_exporter **out,
                                         cbt_sink *sink_out)
{
    if (!c || !out || !sink_out)
        return CBT_ERR_INVAL;
    *out = NULL;
    cbt_status abi = cbt_abi_out_check_(sink_out);
    if (abi)
        return abi;
    cbt_otlp_config full; /* an older caller's config, completed with defaults */
    abi = cbt_otlp_config_in_(&full, c);
    if (abi)
        return abi;
    cbt_otlp_protocol_endpoints_(&full); /* grpc: its default port (otlp_private.h) */
    c = &full;
    cbt_sink k;
    memset(&k, 0, sizeof k);
    k.name = c->protocol == CBT_OTLP_GRPC ? "otlp-grpc" : "otlp-http";

    if (c->disabled) {
        cbt_otlp_exporter *d = calloc(1, sizeof *d);
        if (!d)
            return CBT_ERR_NOMEM;
        d->disabled = 1;
        d->cfg.final_stats = c->final_stats; /* the one field it keeps */
        k.ctx = d;
        k.on_span = disabled_on_span;
        k.flush = disabled_flush;
        k.destroy = disabled_destroy;
        k.flags = CBT_SINK_NONBLOCKING;
        cbt_abi_out_(sink_out, &k, sizeof k, CBT_SINK_VERSION);
        *out = d;
        return CBT_OK;
    }

    cbt_status st = check_config(c);
    if (st != CBT_OK)
        return st;
    pthread_once(&g_curl_once, curl_init_once);
    if (g_curl_init_rc != CURLE_OK) {
        fprintf(stderr, "cbt otlp: curl_global_init: %s\n", curl_easy_strerror(g_curl_init_rc));
        return CBT_ERR_INVAL;
    }
    if (c->protocol == CBT_OTLP_GRPC) { /* never a silent fall back to HTTP/1.1 */
        const curl_version_info_data *vi = curl_version_info(CURLVERSION_NOW);
        if (!vi || !(vi->features & CURL_VERSION_HTTP2)) {
            fprintf(stderr, "cbt otlp: config: protocol grpc needs HTTP/2, and this libcurl "
                            "(%s) has none (no CURL_VERSION_HTTP2): use http/protobuf, or a "
                            "libcurl built with nghttp2\n", vi ? vi->version : "?");
            return CBT_ERR_UNSUPPORTED;
        }
    }
    const curl_version_info_data *cv = curl_version_info(CURLVERSION_NOW);
    const int h2c_reuse_bug = cv && cv->version_num < 0x080000; /* post(): curl #10634 */

    cbt_otlp_exporter *e = calloc(1, sizeof *e);
    if (!e)
        return CBT_ERR_NOMEM;
    e->cfg = *c;
    e->cap = c->max_queue;
    e->metrics_on = !c->metrics_disabled &&
                    (c->blend != NULL || c->self_metrics == CBT_OTLP_SELF_METRICS_ON);
    e->self_on = e->metrics_on && c->self_metrics != CBT_OTLP_SELF_METRICS_OFF;
    e->created_ns = wall_ns();
    pthread_mutex_init(&e->lock, NULL);
    pthread_mutex_init(&e->log_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->work_cv, &ca);
    pthread_cond_init(&e->done_cv, &ca);
    pthread_condattr_destroy(&ca);
    e->rng = now_ns() ^ ((uint64_t)(uintptr_t)e << 16) ^ 0x9E3779B97F4A7C15ull;
    if (!e->rng)
        e->rng = 1;

    e->grpc = c->protocol == CBT_OTLP_GRPC;
    e->h2c_reuse_bug = h2c_reuse_bug;
    e->traces_url = e->cfg.endpoint;
    e->metrics_url = e->cfg.metrics_endpoint;
    if (e->grpc) {
        /* the method URLs; the endpoints were checked, so only length can fail */
        if (cbt_grpc_url(c->endpoint, c->insecure, CBT_GRPC_TRACES_PATH, e->grpc_traces_url,
                         sizeof e->grpc_traces_url) != CBT_OK ||
            cbt_grpc_url(e->metrics_on ? c->metrics_endpoint : c->endpoint, c->insecure,
                         CBT_GRPC_METRICS_PATH, e->grpc_metrics_url,
                         sizeof e->grpc_metrics_url) != CBT_OK) {
            fprintf(stderr, "cbt otlp: config: an endpoint is too long with the gRPC method "
                            "appended\n");
            exporter_free(e);
            return CBT_ERR_INVAL;
        }
        e->traces_url = e->grpc_traces_url;
        e->metrics_url = e->grpc_metrics_url;
        size_t auth = strcspn(strstr(e->grpc_traces_url, "://") + 3, "/") +
                      (size_t)(strstr(e->grpc_traces_url, "://") + 3 - e->grpc_traces_url);
        e->grpc_one_host = strncmp(e->grpc_traces_url, e->grpc_metrics_url, auth) == 0 &&
                           e->grpc_metrics_url[auth] == '/';
        e->resp_plain = malloc(RESP_MAX);
    }
    e->last_grpc = -1;
    e->resp = malloc(RESP_MAX + 1);
    if (cbt_spanq_init(&e->q, (size_t)e->cap * CBT_OTLP_QUEUE_BYTES_PER_SPAN) != CBT_OK ||
        !e->resp || (e->grpc && !e->resp_plain)) {
        exporter_free(e);
        return CBT_ERR_NOMEM;
    }
    st = curl_setup(e);
    if (st != CBT_OK) {
        exporter_free(e);
        return st;
    }
    if (pthread_create(&e->thread, NULL, exporter_main, e) != 0) {
        exporter_free(e);
        return CBT_ERR_THREAD;
    }
    e->started = 1;
    k.ctx = e;
    k.on_span = sink_on_span;
    k.flush = sink_flush;
    k.destroy = sink_destroy;
    k.spans_lost = sink_spans_lost;
    k.flags = CBT_SINK_NONBLOCKING; /* on_span queues; flush waits at most its bound */
    k.flush_within = sink_flush_within;
    cbt_abi_out_(sink_out, &k, sizeof k, CBT_SINK_VERSION);
    *out = e;
    return CBT_OK;
}

cbt_status cbt_otlp_exporter_stats(cbt_otlp_exporter *e, cbt_otlp_stats *caller)
{
    cbt_status abi = cbt_abi_out_check_(caller);
    if (abi)
        return abi;
    cbt_otlp_stats full, *out = &full;
    memset(out, 0, sizeof *out);
    if (e && !e->disabled) {
        out->spans_queued = atomic_load_explicit(&e->queued, memory_order_relaxed);
        out->spans_exported = atomic_load_explicit(&e->exported, memory_order_relaxed);
        out->spans_dropped = atomic_load_explicit(&e->dropped, memory_order_relaxed);
        out->batches_sent = atomic_load_explicit(&e->sent, memory_order_relaxed);
        out->batches_failed = atomic_load_explicit(&e->failed, memory_order_relaxed);
        out->retries = atomic_load_explicit(&e->retries, memory_order_relaxed);
        out->bytes_sent = atomic_load_explicit(&e->bytes, memory_order_relaxed);
        out->metrics_exports = atomic_load_explicit(&e->metrics_exports, memory_order_relaxed);
        out->metrics_failures = atomic_load_explicit(&e->metrics_failures, memory_order_relaxed);
        out->spans_rejected = atomic_load_explicit(&e->rejected, memory_order_relaxed);
        out->spans_too_large = atomic_load_explicit(&e->too_large, memory_order_relaxed);
        out->batches_split = atomic_load_explicit(&e->split, memory_order_relaxed);
        for (int i = 0; i < CBT_OTLP_GRPC_CODES; i++)
            out->failures_by_grpc_code[i] =
                atomic_load_explicit(&e->by_grpc_code[i], memory_order_relaxed);
        for (unsigned k = 0; k < 6; k++)
            out->failures_by_http_class[k] =
                atomic_load_explicit(&e->fail_class[k], memory_order_relaxed);
        pthread_mutex_lock(&e->lock); /* held for a subtraction (never across I/O) */
        out->queue_size = e->tail - e->head;
        pthread_mutex_unlock(&e->lock);
        out->queue_capacity = e->cap;
    }
    cbt_abi_out_(caller, out, sizeof *out, CBT_OTLP_STATS_VERSION);
    return CBT_OK;
}
