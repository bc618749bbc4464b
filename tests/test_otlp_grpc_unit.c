/* tests/test_otlp_grpc_unit.c — OTLP/gRPC's pure parts (exporter/otlp_grpc.c)
 * and its configuration (exporter/otlp_env.c, the create-time checks of
 * exporter/otlp_http.c), without a network.
 *
 *   framing        the 5-byte prefix both ways, malformed frames
 *   grpc-timeout   milliseconds, and seconds past 8 digits
 *   codes          names, the HTTP-to-gRPC table, which codes are retried
 *   answers        header and trailer lines as libcurl hands them over,
 *                  trailers-only answers, the outcome of each
 *   status details base64 (padded, unpadded, malformed) and the
 *                  google.rpc.Status / Any / RetryInfo / Duration reader:
 *                  valid, absent, malformed, truncated at every length,
 *                  huge lengths, and a seeded stream of garbage
 *   endpoints      URLs made for libcurl, scheme-less host:port
 *   environment    OTEL_EXPORTER_OTLP_*PROTOCOL, _INSECURE, _CERTIFICATE,
 *                  _CLIENT_KEY, _CLIENT_CERTIFICATE (tests/otlp_env_case.c)
 *   create         max_message_bytes, TLS files, gRPC's reserved metadata
 *
 * The exporter on the wire (a collector answering these codes) is tested by
 * the gRPC collector tests (tests/grpc_*); bench_load --protocol grpc runs
 * it against the h2c sink in bench/grpc_sink.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "testutil.h"

#include "cbt/otlp.h"
#include "exporter/otlp_grpc.h"
#include "otlp_env_case.h"

/* ---- protobuf bytes for the tests ---------------------------------------------------- */

typedef struct pbw {
    uint8_t b[1024];
    size_t n;
} pbw;

static void w_varint(pbw *w, uint64_t v)
{
    while (v >= 0x80) {
        w->b[w->n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    w->b[w->n++] = (uint8_t)v;
}

static void w_vfield(pbw *w, unsigned f, uint64_t v)
{
    w_varint(w, (uint64_t)f << 3);
    w_varint(w, v);
}

static void w_ld(pbw *w, unsigned f, const void *p, size_t n)
{
    w_varint(w, (uint64_t)f << 3 | 2);
    w_varint(w, n);
    memcpy(w->b + w->n, p, n);
    w->n += n;
}

/* google.rpc.Status{code, message, details: [Any{type_url, RetryInfo{Duration}}]} */
static pbw status_with_retry(const char *type_url, int64_t secs, int32_t nanos, int extra_first)
{
    pbw dur = {.n = 0}, ri = {.n = 0}, any = {.n = 0}, st = {.n = 0};
    w_vfield(&dur, 1, (uint64_t)secs);
    w_vfield(&dur, 2, (uint64_t)(int64_t)nanos);
    w_ld(&ri, 1, dur.b, dur.n);
    w_ld(&any, 1, type_url, strlen(type_url));
    w_ld(&any, 2, ri.b, ri.n);
    w_vfield(&st, 1, 8);
    w_ld(&st, 2, "slow down", 9);
    if (extra_first) { /* a google.rpc.ErrorInfo before it: skipped */
        pbw other = {.n = 0};
        w_ld(&other, 1, "type.googleapis.com/google.rpc.ErrorInfo", 40);
        w_ld(&other, 2, "\x0a\x03why", 5);
        w_ld(&st, 3, other.b, other.n);
    }
    w_ld(&st, 3, any.b, any.n);
    return st;
}

#define RETRY_INFO "type.googleapis.com/google.rpc.RetryInfo"

/* ---- framing ------------------------------------------------------------------------- */

static void frame_prefix_and_parse(void **state)
{
    (void)state;
    uint8_t p[CBT_GRPC_PREFIX];
    cbt_grpc_frame_prefix(p, 0, 0x01020304u);
    assert_memory_equal(p, "\x00\x01\x02\x03\x04", 5);
    cbt_grpc_frame_prefix(p, 1, 7);
    assert_memory_equal(p, "\x01\x00\x00\x00\x07", 5);

    uint8_t f[16] = {0, 0, 0, 0, 3, 'a', 'b', 'c', 'x', 'y'};
    const uint8_t *msg = NULL;
    size_t len = 99;
    int comp = -1;
    assert_int_equal(cbt_grpc_frame_parse(f, 8, &comp, &msg, &len), 0);
    assert_int_equal(comp, 0);
    assert_int_equal(len, 3);
    assert_ptr_equal(msg, f + 5);
    /* bytes after the one message are ignored (unary) */
    assert_int_equal(cbt_grpc_frame_parse(f, 10, &comp, &msg, &len), 0);
    assert_int_equal(len, 3);
    /* an empty message */
    uint8_t z[5] = {0};
    assert_int_equal(cbt_grpc_frame_parse(z, 5, &comp, &msg, &len), 0);
    assert_int_equal(len, 0);
    /* no body at all: a trailers-only answer */
    assert_int_equal(cbt_grpc_frame_parse(f, 0, &comp, &msg, &len), 1);
    /* malformed: a short prefix, a bad flag, a length past the end */
    for (size_t n = 1; n < 5; n++)
        assert_int_equal(cbt_grpc_frame_parse(f, n, &comp, &msg, &len), -1);
    f[0] = 2;
    assert_int_equal(cbt_grpc_frame_parse(f, 8, &comp, &msg, &len), -1);
    f[0] = 1;
    assert_int_equal(cbt_grpc_frame_parse(f, 7, &comp, &msg, &len), -1);
    assert_int_equal(cbt_grpc_frame_parse(f, 8, &comp, &msg, &len), 0);
    assert_int_equal(comp, 1);
    uint8_t huge[5] = {0, 0xff, 0xff, 0xff, 0xff};
    assert_int_equal(cbt_grpc_frame_parse(huge, 5, &comp, &msg, &len), -1);
}

static void timeout_header(void **state)
{
    (void)state;
    char b[16];
    assert_int_equal(cbt_grpc_timeout(10000, b, sizeof b), 6);
    assert_string_equal(b, "10000m");
    cbt_grpc_timeout(1, b, sizeof b);
    assert_string_equal(b, "1m");
    cbt_grpc_timeout(99999999, b, sizeof b); /* 8 digits: the most gRPC allows */
    assert_string_equal(b, "99999999m");
    cbt_grpc_timeout(100000000, b, sizeof b);
    assert_string_equal(b, "100000S");
    cbt_grpc_timeout(100000001, b, sizeof b); /* rounded up, never shorter */
    assert_string_equal(b, "100001S");
    cbt_grpc_timeout(UINT32_MAX, b, sizeof b);
    assert_string_equal(b, "4294968S");
}

/* ---- codes ----------------------------------------------------------------------------- */

static void codes(void **state)
{
    (void)state;
    assert_string_equal(cbt_grpc_code_name(0), "OK");
    assert_string_equal(cbt_grpc_code_name(8), "RESOURCE_EXHAUSTED");
    assert_string_equal(cbt_grpc_code_name(14), "UNAVAILABLE");
    assert_string_equal(cbt_grpc_code_name(16), "UNAUTHENTICATED");
    assert_string_equal(cbt_grpc_code_name(17), "UNKNOWN");
    assert_string_equal(cbt_grpc_code_name(-1), "UNKNOWN");

    /* grpc/doc/http-grpc-status-mapping.md */
    static const struct {
        long http;
        int code;
    } map[] = {{400, 13}, {401, 16}, {403, 7},  {404, 12}, {429, 14}, {502, 14},
               {503, 14}, {504, 14}, {200, 2},  {500, 2},  {418, 2},  {301, 2},
               {0, 2},    {405, 2},  {408, 2},  {505, 2}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (cbt_grpc_code_from_http(map[i].http) != map[i].code)
            fail_msg("HTTP %ld: gRPC %d, expected %d", map[i].http,
                     cbt_grpc_code_from_http(map[i].http), map[i].code);

    /* the OTLP spec's retryable codes; RESOURCE_EXHAUSTED only with RetryInfo */
    for (int c = 0; c < CBT_GRPC_N_CODES; c++) {
        int always = c == 1 || c == 4 || c == 10 || c == 11 || c == 14 || c == 15;
        if (cbt_grpc_retryable(c, 0) != always)
            fail_msg("code %d without RetryInfo: retryable %d", c, cbt_grpc_retryable(c, 0));
        if (cbt_grpc_retryable(c, 1) != (always || c == 8))
            fail_msg("code %d with RetryInfo: retryable %d", c, cbt_grpc_retryable(c, 1));
    }
    assert_int_equal(cbt_grpc_retryable(99, 1), 0);
}

/* ---- text ------------------------------------------------------------------------------ */

static void base64(void **state)
{
    (void)state;
    uint8_t o[16];
    assert_int_equal(cbt_grpc_base64_decode("", 0, o, sizeof o), 0);
    assert_int_equal(cbt_grpc_base64_decode("Zg", 2, o, sizeof o), 1);
    assert_int_equal(o[0], 'f');
    assert_int_equal(cbt_grpc_base64_decode("Zg==", 4, o, sizeof o), 1);
    assert_int_equal(cbt_grpc_base64_decode("Zm8", 3, o, sizeof o), 2);
    assert_int_equal(cbt_grpc_base64_decode("Zm8=", 4, o, sizeof o), 2);
    assert_int_equal(cbt_grpc_base64_decode("Zm9v", 4, o, sizeof o), 3);
    assert_memory_equal(o, "foo", 3);
    assert_int_equal(cbt_grpc_base64_decode("Zm9vYmFy", 8, o, sizeof o), 6);
    assert_memory_equal(o, "foobar", 6);
    assert_int_equal(cbt_grpc_base64_decode("+/+/", 4, o, sizeof o), 3);
    assert_memory_equal(o, "\xfb\xff\xbf", 3);
    assert_int_equal(cbt_grpc_base64_decode("-_-_", 4, o, sizeof o), 3); /* URL-safe */
    assert_memory_equal(o, "\xfb\xff\xbf", 3);
    /* malformed */
    assert_int_equal(cbt_grpc_base64_decode("Z", 1, o, sizeof o), -1);      /* lone char */
    assert_int_equal(cbt_grpc_base64_decode("Zm9vY", 5, o, sizeof o), -1);
    assert_int_equal(cbt_grpc_base64_decode("Zg=", 3, o, sizeof o), -1);    /* half padded */
    assert_int_equal(cbt_grpc_base64_decode("Zg===", 5, o, sizeof o), -1);
    assert_int_equal(cbt_grpc_base64_decode("Zg==Zg==", 8, o, sizeof o), -1); /* '=' inside */
    assert_int_equal(cbt_grpc_base64_decode("Zm9*", 4, o, sizeof o), -1);
    assert_int_equal(cbt_grpc_base64_decode("Zm 9", 4, o, sizeof o), -1);
    assert_int_equal(cbt_grpc_base64_decode("Zm9vYmFy", 8, o, 5), -1);       /* no room */
    assert_int_equal(cbt_grpc_base64_decode("Zm9vYmFy", 8, o, 6), 6);
}

static void percent_decoding(void **state)
{
    (void)state;
    char o[16];
    assert_int_equal(cbt_grpc_pct_decode("a%20b", 5, o, sizeof o), 3);
    assert_string_equal(o, "a b");
    cbt_grpc_pct_decode("100%", 4, o, sizeof o); /* bad escapes pass through */
    assert_string_equal(o, "100%");
    cbt_grpc_pct_decode("%4", 2, o, sizeof o);
    assert_string_equal(o, "%4");
    cbt_grpc_pct_decode("%zz%41", 6, o, sizeof o);
    assert_string_equal(o, "%zzA");
    cbt_grpc_pct_decode("%e2%9c%93", 9, o, sizeof o);
    assert_string_equal(o, "\xe2\x9c\x93");
    assert_int_equal(cbt_grpc_pct_decode("abcdefghijklmnopqrstuvwxyz", 26, o, 8), 7); /* cut */
    assert_string_equal(o, "abcdefg");
    assert_int_equal(cbt_grpc_pct_decode("abc", 3, o, 0), 0);
}

/* ---- google.rpc.Status / RetryInfo ------------------------------------------------------- */

static void retry_info_valid(void **state)
{
    (void)state;
    uint64_t ms = 77;
    pbw st = status_with_retry(RETRY_INFO, 1, 2, 0);
    assert_int_equal(cbt_grpc_status_retry_delay(st.b, st.n, &ms), 1);
    assert_int_equal(ms, 1001); /* 1 s + 2 ns, rounded up: never sooner than asked */
    st = status_with_retry(RETRY_INFO, 3, 0, 1); /* after another detail */
    assert_int_equal(cbt_grpc_status_retry_delay(st.b, st.n, &ms), 1);
    assert_int_equal(ms, 3000);
    st = status_with_retry(RETRY_INFO, 0, 250000000, 0);
    assert_int_equal(cbt_grpc_status_retry_delay(st.b, st.n, &ms), 1);
    assert_int_equal(ms, 250);
    st = status_with_retry("google.rpc.RetryInfo", 2, 0, 0); /* no URL prefix */
    assert_int_equal(cbt_grpc_status_retry_delay(st.b, st.n, &ms), 1);
    assert_int_equal(ms, 2000);
    st = status_with_retry(RETRY_INFO, -5, 0, 0); /* negative: now */
    assert_int_equal(cbt_grpc_status_retry_delay(st.b, st.n, &ms), 1);
    assert_int_equal(ms, 0);
    st = status_with_retry(RETRY_INFO, 0, -5, 0);
    assert_int_equal(cbt_grpc_status_retry_delay(st.b, st.n, &ms), 1);
    assert_int_equal(ms, 0);
    st = status_with_retry(RETRY_INFO, INT64_MAX, 0, 0); /* huge: a day */
    assert_int_equal(cbt_grpc_status_retry_delay(st.b, st.n, &ms), 1);
    assert_int_equal(ms, 86400000);

    /* RetryInfo without retry_delay: retry at the floor */
    pbw any = {.n = 0}, s2 = {.n = 0};
    w_ld(&any, 1, RETRY_INFO, strlen(RETRY_INFO));
    w_ld(&s2, 3, any.b, any.n);
    ms = 5;
    assert_int_equal(cbt_grpc_status_retry_delay(s2.b, s2.n, &ms), 1);
    assert_int_equal(ms, 0);

    /* unknown fields of every wire type are skipped */
    pbw s3 = {.n = 0};
    w_vfield(&s3, 9, 12345);
    w_varint(&s3, 10u << 3 | 1);
    memcpy(s3.b + s3.n, "12345678", 8);
    s3.n += 8;
    w_varint(&s3, 11u << 3 | 5);
    memcpy(s3.b + s3.n, "1234", 4);
    s3.n += 4;
    pbw base = status_with_retry(RETRY_INFO, 4, 0, 0);
    memcpy(s3.b + s3.n, base.b, base.n);
    s3.n += base.n;
    assert_int_equal(cbt_grpc_status_retry_delay(s3.b, s3.n, &ms), 1);
    assert_int_equal(ms, 4000);
}

static void retry_info_absent(void **state)
{
    (void)state;
    uint64_t ms = 42;
    assert_int_equal(cbt_grpc_status_retry_delay((const uint8_t *)"", 0, &ms), 0);
    pbw st = {.n = 0};
    w_vfield(&st, 1, 8);
    w_ld(&st, 2, "quota", 5);
    assert_int_equal(cbt_grpc_status_retry_delay(st.b, st.n, &ms), 0);
    assert_int_equal(ms, 42); /* untouched */
    pbw other = status_with_retry("type.googleapis.com/google.rpc.ErrorInfo", 1, 0, 0);
    assert_int_equal(cbt_grpc_status_retry_delay(other.b, other.n, &ms), 0);
    pbw near = status_with_retry("type.googleapis.com/google.rpc.RetryInfoX", 1, 0, 0);
    assert_int_equal(cbt_grpc_status_retry_delay(near.b, near.n, &ms), 0);
    pbw near2 = status_with_retry("type.googleapis.com/xgoogle.rpc.RetryInfo", 1, 0, 0);
    assert_int_equal(cbt_grpc_status_retry_delay(near2.b, near2.n, &ms), 0);
    assert_int_equal(ms, 42);
}

static void retry_info_malformed(void **state)
{
    (void)state;
    uint64_t ms = 0;
    pbw good = status_with_retry(RETRY_INFO, 1, 2, 1);
    /* truncated at every length: never a RetryInfo read past the end */
    for (size_t n = 1; n < good.n; n++) {
        int rc = cbt_grpc_status_retry_delay(good.b, n, &ms);
        if (rc == 1)
            fail_msg("a Status cut to %zu of %zu bytes gave a RetryInfo", n, good.n);
    }
    assert_int_equal(cbt_grpc_status_retry_delay(good.b, good.n - 1, &ms), -1);

    static const struct {
        const char *what;
        const char *b;
        size_t n;
    } bad[] = {
        {"a length past the end", "\x1a\x05\x0a\x01", 4},
        {"a huge length", "\x1a\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 10},
        {"a 64-bit length", "\x1a\xff\xff\xff\xff\x0f", 6},
        {"a varint of 11 bytes", "\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12},
        {"a varint past 64 bits", "\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02", 11},
        {"an unfinished varint", "\x08\xff", 2},
        {"field number 0", "\x00\x01", 2},
        {"wire type 3 (group)", "\x1b", 1},
        {"wire type 4", "\x1c", 1},
        {"wire type 6", "\x1e\x00", 2},
        {"wire type 7", "\x1f\x00", 2},
        {"a fixed64 cut short", "\x49\x01\x02", 3},
        {"a fixed32 cut short", "\x4d\x01", 2},
        {"code as a string", "\x0a\x01x", 3},
        {"details as a varint", "\x18\x01", 2},
        {"a tag past 2^29 fields", "\x80\x80\x80\x80\x20", 5},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (cbt_grpc_status_retry_delay((const uint8_t *)bad[i].b, bad[i].n, &ms) != -1)
            fail_msg("%s: not refused", bad[i].what);

    /* inside the RetryInfo: nanos out of range, a Duration field of the wrong type */
    pbw st = status_with_retry(RETRY_INFO, 1, 1000000000, 0);
    assert_int_equal(cbt_grpc_status_retry_delay(st.b, st.n, &ms), -1);
    st = status_with_retry(RETRY_INFO, 1, -1000000000, 0);
    assert_int_equal(cbt_grpc_status_retry_delay(st.b, st.n, &ms), -1);
    pbw any = {.n = 0}, s2 = {.n = 0};
    w_ld(&any, 1, RETRY_INFO, strlen(RETRY_INFO));
    w_ld(&any, 2, "\x0a\x02\x0a\x00", 4); /* Duration{seconds: a string} */
    w_ld(&s2, 3, any.b, any.n);
    assert_int_equal(cbt_grpc_status_retry_delay(s2.b, s2.n, &ms), -1);
    pbw any2 = {.n = 0}, s3 = {.n = 0};
    w_ld(&any2, 1, RETRY_INFO, strlen(RETRY_INFO));
    w_ld(&any2, 2, "\x08\x01", 2); /* RetryInfo{retry_delay: a varint} */
    w_ld(&s3, 3, any2.b, any2.n);
    assert_int_equal(cbt_grpc_status_retry_delay(s3.b, s3.n, &ms), -1);
    pbw any3 = {.n = 0}, s4 = {.n = 0};
    w_ld(&any3, 1, RETRY_INFO, strlen(RETRY_INFO));
    w_ld(&any3, 2, "\x0a\x09\x08", 3); /* a Duration longer than its RetryInfo */
    w_ld(&s4, 3, any3.b, any3.n);
    assert_int_equal(cbt_grpc_status_retry_delay(s4.b, s4.n, &ms), -1);
}

/* A seeded stream of garbage and of mutations of a valid Status: every
 * answer is -1, 0 or 1 and nothing is read past the buffer (a sanitizer
 * build sees that; here the buffer is exact-size heap memory). */
static void retry_info_garbage(void **state)
{
    (void)state;
    uint64_t x = 0x9E3779B97F4A7C15ull, ms;
    pbw good = status_with_retry(RETRY_INFO, 1, 2, 1);
    int seen[3] = {0, 0, 0};
    for (int it = 0; it < 20000; it++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t n = (size_t)(x % 64);
        uint8_t *b = malloc(n ? n : 1);
        assert_non_null(b);
        if (it % 2) { /* a mutation: one byte changed, maybe cut */
            n = good.n - (size_t)((x >> 8) % 4);
            free(b);
            b = malloc(n);
            assert_non_null(b);
            memcpy(b, good.b, n);
            b[(x >> 16) % n] = (uint8_t)(x >> 24);
        } else {
            for (size_t i = 0; i < n; i++)
                b[i] = (uint8_t)(x >> (8 * (i % 8))) ^ (uint8_t)i;
        }
        int rc = cbt_grpc_status_retry_delay(b, n, &ms);
        assert_true(rc >= -1 && rc <= 1);
        seen[rc + 1]++;
        if (rc == 1)
            assert_true(ms <= 86400000u);
        free(b);
    }
    assert_true(seen[0] > 0 && seen[1] > 0 && seen[2] > 0);
}

/* ---- answers: header and trailer lines -------------------------------------------------- */

static void feed(cbt_grpc_resp *r, const char *const *lines)
{
    for (; *lines; lines++)
        cbt_grpc_resp_header(r, *lines, strlen(*lines));
}

static void answer_trailers(void **state)
{
    (void)state;
    static cbt_grpc_resp r;
    int64_t retry = 0;
    int bad = 0;
    pbw st = status_with_retry(RETRY_INFO, 1, 2, 0);
    char b64[512], details[600];
    size_t k = 0;
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < st.n; i += 3) { /* unpadded, as gRPC sends -bin values */
        uint32_t v = (uint32_t)st.b[i] << 16;
        size_t left = st.n - i;
        if (left > 1)
            v |= (uint32_t)st.b[i + 1] << 8;
        if (left > 2)
            v |= st.b[i + 2];
        b64[k++] = tbl[v >> 18 & 63];
        b64[k++] = tbl[v >> 12 & 63];
        if (left > 1)
            b64[k++] = tbl[v >> 6 & 63];
        if (left > 2)
            b64[k++] = tbl[v & 63];
    }
    b64[k] = '\0';
    snprintf(details, sizeof details, "grpc-status-details-bin: %s\r\n", b64);

    /* headers, the body, then the trailers (HTTP/2 via libcurl) */
    cbt_grpc_resp_reset(&r);
    const char *const answer[] = {"HTTP/2 200 \r\n", "content-type: application/grpc\r\n",
                                  "\r\n", "grpc-status: 8\r\n",
                                  "grpc-message: slow%20down%21\r\n", details, NULL};
    feed(&r, answer);
    assert_int_equal(r.status, 8);
    assert_string_equal(r.message, "slow down!");
    assert_int_equal(cbt_grpc_outcome(200, &r, &retry, &bad), CBT_GRPC_RESOURCE_EXHAUSTED);
    assert_int_equal(retry, 1001);
    assert_int_equal(bad, 0);

    /* the same without the details: no RetryInfo */
    cbt_grpc_resp_reset(&r);
    feed(&r, (const char *const[]){"HTTP/2 200\r\n", "content-type: application/grpc\r\n",
                                   "grpc-status: 8\r\n", NULL});
    assert_int_equal(cbt_grpc_outcome(200, &r, &retry, &bad), 8);
    assert_int_equal(retry, -1);

    /* OK, names in any case, values with blanks around */
    cbt_grpc_resp_reset(&r);
    feed(&r, (const char *const[]){"HTTP/2 200\r\n", "Content-Type: application/grpc+proto\r\n",
                                   "Grpc-Status:  0 \r\n", NULL});
    assert_int_equal(cbt_grpc_outcome(200, &r, &retry, &bad), CBT_GRPC_OK);
    assert_int_equal(r.content_type_grpc, 1);

    /* a new response (a status line) forgets the previous one */
    feed(&r, (const char *const[]){"HTTP/2 200\r\n", NULL});
    assert_int_equal(r.status, -1);
    assert_int_equal(r.content_type_grpc, 0);

    /* unreadable details: the code stands, no RetryInfo, said so */
    cbt_grpc_resp_reset(&r);
    feed(&r, (const char *const[]){"HTTP/2 200\r\n", "grpc-status: 8\r\n",
                                   "grpc-status-details-bin: !!!!\r\n", NULL});
    assert_int_equal(cbt_grpc_outcome(200, &r, &retry, &bad), 8);
    assert_int_equal(retry, -1);
    assert_int_equal(bad, 1);
    cbt_grpc_resp_reset(&r);
    feed(&r, (const char *const[]){"HTTP/2 200\r\n", "grpc-status: 14\r\n",
                                   "grpc-status-details-bin: CAgSAmhp\r\n", NULL}); /* no details */
    assert_int_equal(cbt_grpc_outcome(200, &r, &retry, &bad), 14);
    assert_int_equal(retry, -1);
    assert_int_equal(bad, 0);
    /* details longer than kept: read as absent, said so */
    char *big = malloc(CBT_GRPC_DETAILS_MAX + 64);
    assert_non_null(big);
    int n = snprintf(big, 64, "grpc-status-details-bin: ");
    memset(big + n, 'A', CBT_GRPC_DETAILS_MAX + 4);
    cbt_grpc_resp_reset(&r);
    feed(&r, (const char *const[]){"grpc-status: 8\r\n", NULL});
    cbt_grpc_resp_header(&r, big, (size_t)n + CBT_GRPC_DETAILS_MAX + 4);
    free(big);
    assert_int_equal(cbt_grpc_outcome(200, &r, &retry, &bad), 8);
    assert_int_equal(r.details_cut, 1);
    assert_int_equal(bad, 1);
    assert_int_equal(retry, -1);

    /* grpc-encoding */
    cbt_grpc_resp_reset(&r);
    feed(&r, (const char *const[]){"grpc-encoding: gzip\r\n", NULL});
    assert_int_equal(r.encoding_gzip, 1);
    feed(&r, (const char *const[]){"grpc-encoding: identity\r\n", NULL});
    assert_int_equal(r.encoding_gzip, 0);
    assert_int_equal(r.encoding_other, 0);
    feed(&r, (const char *const[]){"grpc-encoding: snappy\r\n", NULL});
    assert_int_equal(r.encoding_other, 1);
    /* lines that are not headers change nothing */
    cbt_grpc_resp_reset(&r);
    feed(&r, (const char *const[]){"\r\n", "no colon here\r\n", ": empty name\r\n", NULL});
    assert_int_equal(r.status, -1);
}

static void answer_trailers_only_and_http(void **state)
{
    (void)state;
    static cbt_grpc_resp r;
    int64_t retry;
    int bad;
    /* trailers-only: one HEADERS frame with the status */
    cbt_grpc_resp_reset(&r);
    feed(&r, (const char *const[]){"HTTP/2 200\r\n", "content-type: application/grpc\r\n",
                                   "grpc-status: 7\r\n", "grpc-message: no\r\n", "\r\n", NULL});
    assert_int_equal(cbt_grpc_outcome(200, &r, &retry, &bad), CBT_GRPC_PERMISSION_DENIED);
    assert_string_equal(r.message, "no");

    /* 200 without grpc-status: UNAVAILABLE from a gRPC server (a stream
     * cut off before its trailers: retried), UNKNOWN from anything else */
    cbt_grpc_resp_reset(&r);
    feed(&r, (const char *const[]){"HTTP/2 200\r\n", "content-type: application/grpc\r\n", NULL});
    assert_int_equal(cbt_grpc_outcome(200, &r, &retry, &bad), CBT_GRPC_UNAVAILABLE);
    cbt_grpc_resp_reset(&r);
    feed(&r, (const char *const[]){"HTTP/1.1 200 OK\r\n", "content-type: text/html\r\n", NULL});
    assert_int_equal(cbt_grpc_outcome(200, &r, &retry, &bad), CBT_GRPC_UNKNOWN);
    cbt_grpc_resp_reset(&r);
    feed(&r, (const char *const[]){"content-type: application/grpcx\r\n", NULL});
    assert_int_equal(r.content_type_grpc, 0);

    /* a status that is not a code: UNKNOWN */
    static const char *const odd[] = {"grpc-status: abc\r\n", "grpc-status: 17\r\n",
                                      "grpc-status: 99\r\n", "grpc-status: 100\r\n",
                                      "grpc-status: -1\r\n", "grpc-status:\r\n"};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        cbt_grpc_resp_reset(&r);
        cbt_grpc_resp_header(&r, odd[i], strlen(odd[i]));
        if (cbt_grpc_outcome(200, &r, &retry, &bad) != CBT_GRPC_UNKNOWN)
            fail_msg("\"%s\" read as %d", odd[i], cbt_grpc_outcome(200, &r, &retry, &bad));
    }

    /* a non-200 HTTP status maps, whatever grpc-status says */
    cbt_grpc_resp_reset(&r);
    feed(&r, (const char *const[]){"HTTP/2 503\r\n", "grpc-status: 0\r\n", NULL});
    assert_int_equal(cbt_grpc_outcome(503, &r, &retry, &bad), CBT_GRPC_UNAVAILABLE);
    assert_int_equal(retry, -1);
    assert_int_equal(cbt_grpc_outcome(404, &r, &retry, &bad), CBT_GRPC_UNIMPLEMENTED);
    assert_int_equal(cbt_grpc_outcome(401, &r, &retry, &bad), CBT_GRPC_UNAUTHENTICATED);
    /* an OK answer never reads its details */
    cbt_grpc_resp_reset(&r);
    feed(&r, (const char *const[]){"grpc-status: 0\r\n", "grpc-status-details-bin: !!\r\n", NULL});
    assert_int_equal(cbt_grpc_outcome(200, &r, &retry, &bad), CBT_GRPC_OK);
    assert_int_equal(bad, 0);
}

static void gunzip(void **state)
{
    (void)state;
    const char msg[] = "\x0a\x07\x08\x02\x12\x03two partial success, compressed by the collector";
    uint8_t gz[256], out[256];
    z_stream z;
    memset(&z, 0, sizeof z);
    assert_int_equal(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
    z.next_in = (Bytef *)(uintptr_t)msg;
    z.avail_in = sizeof msg - 1;
    z.next_out = gz;
    z.avail_out = sizeof gz;
    assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
    size_t gl = z.total_out, ol = 0;
    deflateEnd(&z);
    assert_int_equal(cbt_grpc_gunzip(gz, gl, out, sizeof out, &ol), 0);
    assert_int_equal(ol, sizeof msg - 1);
    assert_memory_equal(out, msg, ol);
    assert_int_equal(cbt_grpc_gunzip(gz, gl, out, 10, &ol), -1);  /* bigger than the room */
    assert_int_equal(cbt_grpc_gunzip(gz, gl - 3, out, sizeof out, &ol), -1); /* cut */
    assert_int_equal(cbt_grpc_gunzip((const uint8_t *)msg, 20, out, sizeof out, &ol), -1);
}

/* ---- endpoints ---------------------------------------------------------------------------- */

static void endpoints(void **state)
{
    (void)state;
    char u[256];
    assert_int_equal(cbt_grpc_url("http://col:4317", 0, CBT_GRPC_TRACES_PATH, u, sizeof u), CBT_OK);
    assert_string_equal(u, "http://col:4317/opentelemetry.proto.collector.trace.v1.TraceService/Export");
    assert_int_equal(cbt_grpc_url("https://col:4317/v1/traces?x=1#f", 1, CBT_GRPC_METRICS_PATH, u,
                                  sizeof u), CBT_OK); /* the path is ignored; the scheme wins */
    assert_string_equal(u, "https://col:4317/opentelemetry.proto.collector.metrics.v1.MetricsService/Export");
    assert_int_equal(cbt_grpc_url("col:4317", 0, "/m", u, sizeof u), CBT_OK);
    assert_string_equal(u, "https://col:4317/m"); /* scheme-less: secure unless insecure */
    assert_int_equal(cbt_grpc_url("col:4317", 1, "/m", u, sizeof u), CBT_OK);
    assert_string_equal(u, "http://col:4317/m");
    assert_int_equal(cbt_grpc_url("HTTP://[::1]:4317/", 0, "/m", u, sizeof u), CBT_OK);
    assert_string_equal(u, "http://[::1]:4317/m");
    assert_int_equal(cbt_grpc_url("http://col:4317", 0, "/m", u, 17), CBT_ERR_INVAL); /* room */
    assert_int_equal(cbt_grpc_url("http://col:4317", 0, "/m", u, 18), CBT_OK);

    static const char *const bad[] = {"",          "http://",      "https:///x", "unix:///tmp/s",
                                      "dns://x:1", "/just/a/path", ":4317",      "col 1:4317",
                                      "col:43\t17", "http://:4317"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (cbt_grpc_endpoint_ok(bad[i]))
            fail_msg("\"%s\" accepted", bad[i]);
        assert_int_equal(cbt_grpc_url(bad[i], 1, "/m", u, sizeof u), CBT_ERR_INVAL);
    }
    assert_true(cbt_grpc_endpoint_ok("localhost:4317"));
    assert_true(cbt_grpc_endpoint_ok("localhost"));
}

/* ---- the environment ---------------------------------------------------------------------- */

static void env_protocols(void **state)
{
    (void)state;
    cbt_otlp_config c;
    char *log;
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}}, .want = CBT_OK,
                 .log_empty = 1), &c, &log);
    assert_int_equal(c.protocol, CBT_OTLP_GRPC);
    assert_string_equal(c.endpoint, "http://localhost:4317"); /* gRPC's own default */
    assert_string_equal(c.metrics_endpoint, "http://localhost:4317");
    free(log);
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_PROTOCOL", "GRPC"}}, .want = CBT_OK,
                 .log_empty = 1), &c, &log);
    assert_int_equal(c.protocol, CBT_OTLP_GRPC);
    free(log);
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_PROTOCOL", "HTTP/JSON"}}, .want = CBT_OK,
                 .log_empty = 1), &c, &log);
    assert_int_equal(c.protocol, CBT_OTLP_HTTP_JSON);
    free(log);
    /* the _TRACES_ form wins */
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"},
                         {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"}},
                 .want = CBT_OK, .log_empty = 1), &c, &log);
    assert_int_equal(c.protocol, CBT_OTLP_GRPC);
    free(log);
    /* an unsupported value: an error naming the variable and the value */
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc/web"}}, .want = CBT_ERR_INVAL,
                 .log_has = {"OTEL_EXPORTER_OTLP_PROTOCOL", "\"grpc/web\"", "http/protobuf"}),
            &c, &log);
    assert_int_equal(c.protocol, CBT_OTLP_HTTP_PROTOBUF);
    free(log);
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "thrift"}},
                 .want = CBT_ERR_INVAL, .log_has = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"}),
            &c, &log);
    free(log);
    /* metrics: checked, but one protocol serves both */
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "bogus"}},
                 .want = CBT_ERR_INVAL,
                 .log_has = {"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "\"bogus\""}), &c, &log);
    free(log);
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc"}}, .want = CBT_OK,
                 .log_has = {"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "not read",
                             "http/protobuf"}), &c, &log);
    assert_int_equal(c.protocol, CBT_OTLP_HTTP_PROTOBUF);
    free(log);
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"},
                         {"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc"}},
                 .want = CBT_OK, .log_empty = 1), &c, &log);
    free(log);
}

static void env_grpc_endpoints(void **state)
{
    (void)state;
    cbt_otlp_config c;
    char *log;
    /* the base is used as is for both signals: no /v1/traces */
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"},
                         {"OTEL_EXPORTER_OTLP_ENDPOINT", "http://col:4317"}},
                 .want = CBT_OK, .log_empty = 1), &c, &log);
    assert_string_equal(c.endpoint, "http://col:4317");
    assert_string_equal(c.metrics_endpoint, "http://col:4317");
    free(log);
    /* scheme-less: https unless insecure */
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"},
                         {"OTEL_EXPORTER_OTLP_ENDPOINT", "col:4317"}},
                 .want = CBT_OK, .log_empty = 1), &c, &log);
    assert_string_equal(c.endpoint, "https://col:4317");
    assert_int_equal(c.insecure, 0);
    free(log);
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"},
                         {"OTEL_EXPORTER_OTLP_ENDPOINT", "col:4317"},
                         {"OTEL_EXPORTER_OTLP_INSECURE", "TRUE"}},
                 .want = CBT_OK, .log_empty = 1), &c, &log);
    assert_string_equal(c.endpoint, "http://col:4317");
    assert_string_equal(c.metrics_endpoint, "http://col:4317");
    assert_int_equal(c.insecure, 1);
    free(log);
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"},
                         {"OTEL_EXPORTER_OTLP_ENDPOINT", "https://col:4317"},
                         {"OTEL_EXPORTER_OTLP_TRACES_INSECURE", "true"},
                         {"OTEL_EXPORTER_OTLP_INSECURE", "false"}},
                 .want = CBT_OK, .log_empty = 1), &c, &log);
    assert_string_equal(c.endpoint, "https://col:4317"); /* the scheme wins */
    assert_int_equal(c.insecure, 1);                     /* _TRACES_ wins */
    free(log);
    /* per signal; metrics follow the traces collector when not set */
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"},
                         {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:1"}},
                 .want = CBT_OK, .log_empty = 1), &c, &log);
    assert_string_equal(c.endpoint, "http://t:1");
    assert_string_equal(c.metrics_endpoint, "http://t:1");
    free(log);
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"},
                         {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:1"},
                         {"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "m:2"}},
                 .want = CBT_OK, .log_empty = 1), &c, &log);
    assert_string_equal(c.metrics_endpoint, "https://m:2");
    free(log);
    /* not an endpoint gRPC can use */
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"},
                         {"OTEL_EXPORTER_OTLP_ENDPOINT", "unix:///run/col.sock"}},
                 .want = CBT_ERR_INVAL, .log_has = {"OTEL_EXPORTER_OTLP_ENDPOINT", "4317"}),
            &c, &log);
    free(log);
    /* OTLP/HTTP still wants a URL, and keeps /v1/traces */
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_ENDPOINT", "col:4318"}}, .want = CBT_ERR_INVAL,
                 .log_has = {"OTEL_EXPORTER_OTLP_ENDPOINT", "grpc"}), &c, &log);
    free(log);
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://col:4318"},
                         {"OTEL_EXPORTER_OTLP_INSECURE", "true"}},
                 .want = CBT_OK, .log_empty = 1), &c, &log);
    assert_string_equal(c.endpoint, "http://col:4318/v1/traces");
    free(log);
    /* insecure: true or false only */
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_INSECURE", "yes"}}, .want = CBT_OK,
                 .log_has = {"OTEL_EXPORTER_OTLP_INSECURE", "\"yes\"", "keeping false"}),
            &c, &log);
    assert_int_equal(c.insecure, 0);
    free(log);
}

static void env_tls(void **state)
{
    (void)state;
    cbt_otlp_config c;
    char *log;
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_CERTIFICATE", "/etc/ca.pem"},
                         {"OTEL_EXPORTER_OTLP_CLIENT_KEY", "/etc/k.pem"},
                         {"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "/etc/c.pem"}},
                 .want = CBT_OK, .log_empty = 1), &c, &log);
    assert_string_equal(c.certificate, "/etc/ca.pem");
    assert_string_equal(c.client_key, "/etc/k.pem");
    assert_string_equal(c.client_certificate, "/etc/c.pem");
    free(log);
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_CERTIFICATE", "/etc/ca.pem"},
                         {"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "/t/ca.pem"},
                         {"OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "/t/k.pem"},
                         {"OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", "/t/c.pem"}},
                 .want = CBT_OK, .log_empty = 1), &c, &log);
    assert_string_equal(c.certificate, "/t/ca.pem");
    assert_string_equal(c.client_key, "/t/k.pem");
    assert_string_equal(c.client_certificate, "/t/c.pem");
    free(log);
    /* a path that does not fit: an error, the field kept */
    char longpath[CBT_OTLP_PATH_MAX + 8];
    memset(longpath, 'p', sizeof longpath - 1);
    longpath[0] = '/';
    longpath[sizeof longpath - 1] = '\0';
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_CLIENT_KEY", longpath}}, .want = CBT_ERR_INVAL,
                 .log_has = {"OTEL_EXPORTER_OTLP_CLIENT_KEY", "longer than 1023"}), &c, &log);
    assert_string_equal(c.client_key, "");
    free(log);
    /* the _METRICS_ forms: one connection, reported as not read */
    run_env(&ENV(.set = {{"OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE", "/m/ca.pem"},
                         {"OTEL_EXPORTER_OTLP_METRICS_INSECURE", "true"}},
                 .want = CBT_OK,
                 .log_has = {"OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE",
                             "OTEL_EXPORTER_OTLP_METRICS_INSECURE", "not read"}), &c, &log);
    assert_string_equal(c.certificate, "");
    assert_int_equal(c.insecure, 0);
    free(log);
}

/* ---- defaults and create-time checks --------------------------------------------------------- */

static cbt_status try_create(const cbt_otlp_config *c)
{
    cbt_otlp_exporter *e = NULL;
    cbt_sink k;
    cbt_status st = cbt_otlp_exporter_create(c, &e, &k);
    if (st == CBT_OK)
        k.destroy(k.ctx); /* never added: nothing was queued */
    return st;
}

static void config_defaults(void **state)
{
    (void)state;
    cbt_otlp_config c;
    cbt_otlp_config_default(&c);
    assert_int_equal(c.version, CBT_OTLP_CONFIG_VERSION);
    assert_int_equal(CBT_OTLP_CONFIG_VERSION, 4); /* v3 gRPC and TLS, v4 self_metrics */
    assert_int_equal(c.max_message_bytes, 4194304 - 65536);
    assert_int_equal(c.insecure, 0);
    assert_string_equal(c.certificate, "");
    assert_string_equal(c.client_key, "");
    assert_string_equal(c.client_certificate, "");
    assert_int_equal(CBT_OTLP_GRPC, 2);
    cbt_otlp_stats s = CBT_STRUCT_INIT(cbt_otlp_stats);
    assert_int_equal(cbt_otlp_exporter_stats(NULL, &s), CBT_OK);
    assert_int_equal(s.version, 2);
    assert_int_equal(s.size, sizeof s);
    assert_int_equal(sizeof s.failures_by_grpc_code / sizeof s.failures_by_grpc_code[0], 17);
}

static void create_checks(void **state)
{
    (void)state;
    cbt_otlp_config c;
    cbt_otlp_config_default(&c);
    c.protocol = CBT_OTLP_GRPC;
    snprintf(c.endpoint, sizeof c.endpoint, "127.0.0.1:9");
    c.insecure = 1;
    c.shutdown_timeout_ms = 200;
    assert_int_equal(try_create(&c), CBT_OK); /* scheme-less is a gRPC endpoint */
    c.max_message_bytes = 0;
    assert_int_equal(try_create(&c), CBT_ERR_INVAL);
    c.max_message_bytes = 1;
    assert_int_equal(try_create(&c), CBT_OK);
    c.protocol = CBT_OTLP_HTTP_PROTOBUF; /* ... but not an OTLP/HTTP one */
    assert_int_equal(try_create(&c), CBT_ERR_INVAL);
    c.protocol = (cbt_otlp_protocol)3;
    assert_int_equal(try_create(&c), CBT_ERR_INVAL);
    c.protocol = CBT_OTLP_GRPC;

    /* TLS files: readable now, or a clear error */
    snprintf(c.certificate, sizeof c.certificate, "/nonexistent/cbt-ca.pem");
    assert_int_equal(try_create(&c), CBT_ERR_IO);
    char path[] = "/tmp/cbt-grpc-unit-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    snprintf(c.certificate, sizeof c.certificate, "%s", path);
    assert_int_equal(try_create(&c), CBT_OK);
    snprintf(c.client_key, sizeof c.client_key, "%s", path);
    assert_int_equal(try_create(&c), CBT_ERR_INVAL); /* a key without its certificate */
    snprintf(c.client_certificate, sizeof c.client_certificate, "%s", path);
    assert_int_equal(try_create(&c), CBT_OK);
    snprintf(c.client_certificate, sizeof c.client_certificate, "%s.gone", path);
    assert_int_equal(try_create(&c), CBT_ERR_IO);
    unlink(path);
    c.certificate[0] = c.client_key[0] = c.client_certificate[0] = '\0';

    /* metadata gRPC sets itself is refused; others pass (lowercased on the wire) */
    snprintf(c.headers[0].key, sizeof c.headers[0].key, "X-Tenant");
    snprintf(c.headers[0].value, sizeof c.headers[0].value, "a");
    c.n_headers = 1;
    assert_int_equal(try_create(&c), CBT_OK);
    static const char *const reserved[] = {"content-type", "TE", "grpc-timeout", "Grpc-Encoding"};
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++) {
        snprintf(c.headers[0].key, sizeof c.headers[0].key, "%s", reserved[i]);
        if (try_create(&c) != CBT_ERR_INVAL)
            fail_msg("header \"%s\" accepted for gRPC", reserved[i]);
    }
    c.protocol = CBT_OTLP_HTTP_PROTOBUF; /* OTLP/HTTP: not gRPC's names */
    snprintf(c.endpoint, sizeof c.endpoint, "http://127.0.0.1:9/v1/traces");
    snprintf(c.headers[0].key, sizeof c.headers[0].key, "grpc-timeout");
    assert_int_equal(try_create(&c), CBT_OK);

    /* a version-2 config (before these fields) gets their defaults */
    cbt_otlp_config old;
    cbt_otlp_config_default(&old);
    old.protocol = CBT_OTLP_GRPC;
    old.version = 2;
    old.size = (uint32_t)offsetof(cbt_otlp_config, max_message_bytes);
    old.shutdown_timeout_ms = 200;
    old.max_message_bytes = 0; /* past its size: never read */
    assert_int_equal(try_create(&old), CBT_OK); /* endpoint: the default means :4317 */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(frame_prefix_and_parse),
        cmocka_unit_test(timeout_header),
        cmocka_unit_test(codes),
        cmocka_unit_test(base64),
        cmocka_unit_test(percent_decoding),
        cmocka_unit_test(retry_info_valid),
        cmocka_unit_test(retry_info_absent),
        cmocka_unit_test(retry_info_malformed),
        cmocka_unit_test(retry_info_garbage),
        cmocka_unit_test(answer_trailers),
        cmocka_unit_test(answer_trailers_only_and_http),
        cmocka_unit_test(gunzip),
        cmocka_unit_test(endpoints),
        cmocka_unit_test(env_protocols),
        cmocka_unit_test(env_grpc_endpoints),
        cmocka_unit_test(env_tls),
        cmocka_unit_test(config_defaults),
        cmocka_unit_test(create_checks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
