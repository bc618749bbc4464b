/* tests/test_context.c — W3C trace context inject/extract, the Option B
 * request-id trace id, and head sampling (cbt/context.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cbt/context.h"
#include "testutil.h"

/* regression pins of cbt_trace_id_from_request (see test_trace_id_from_request) */
#define PIN_EMPTY "21dbdaba7d24d15721f066573e3e658c"
#define PIN_A "25f0690a603905b990acb6f05ca25567"
#define PIN_REQ0 "e69e957e71515e65225384b893a0cbb1"
#define PIN_CMPL "28916746725763a55eaa4027bb82dd11"

#define TP_OK "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

static uint64_t g_rng = 0x1234567887654321ull;
static uint64_t rnd(void)
{
    /* splitmix64 */
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void rnd_bytes(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)rnd();
}

static int is_zero(const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

static void hex16(const uint8_t id[16], char out[33])
{
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", id[i]);
}

/* ---- traceparent ------------------------------------------------------------------ */

typedef struct tp_case {
    const char *what;
    const char *s;
    size_t len; /* 0: strlen(s) (s non-NULL) */
    cbt_status want;
} tp_case;

static void test_traceparent_table(void **state)
{
    (void)state;
    static const char nul_mid[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba9\0002b7-01";
    const tp_case cases[] = {
        {"valid, sampled", TP_OK, 0, CBT_OK},
        {"valid, not sampled", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", 0, CBT_OK},
        {"valid, random flag (L2)", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-02", 0, CBT_OK},
        {"valid, sampled+random", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03", 0, CBT_OK},
        {"version 01", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", 0, CBT_ERR_BAD_TRACEPARENT},
        {"version ff", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", 0, CBT_ERR_BAD_TRACEPARENT},
        {"version 0", "0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", 0, CBT_ERR_BAD_TRACEPARENT},
        {"length 54", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0", 0, CBT_ERR_BAD_TRACEPARENT},
        {"length 56", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-010", 0, CBT_ERR_BAD_TRACEPARENT},
        {"version 00 with a suffix", TP_OK "-what", 0, CBT_ERR_BAD_TRACEPARENT},
        {"uppercase trace id", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", 0, CBT_ERR_BAD_TRACEPARENT},
        {"uppercase span id", "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01", 0, CBT_ERR_BAD_TRACEPARENT},
        {"uppercase version", "0A-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", 0, CBT_ERR_BAD_TRACEPARENT},
        {"non-hex trace id", "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", 0, CBT_ERR_BAD_TRACEPARENT},
        {"non-hex span id", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01", 0, CBT_ERR_BAD_TRACEPARENT},
        {"non-hex flags", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x", 0, CBT_ERR_BAD_TRACEPARENT},
        {"zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", 0, CBT_ERR_BAD_TRACEPARENT},
        {"zero span id", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", 0, CBT_ERR_BAD_TRACEPARENT},
        {"separator _ after version", "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", 0, CBT_ERR_BAD_TRACEPARENT},
        {"separator . after trace id", "00-4bf92f3577b34da6a3ce929d0e0e4736.00f067aa0ba902b7-01", 0, CBT_ERR_BAD_TRACEPARENT},
        {"separator space before flags", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7 01", 0, CBT_ERR_BAD_TRACEPARENT},
        {"shifted fields", "00-4bf92f3577b34da6a3ce929d0e0e47360-0f067aa0ba902b7-01", 0, CBT_ERR_BAD_TRACEPARENT},
        {"unknown flag 04", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-04", 0, CBT_ERR_BAD_TRACEPARENT},
        {"unknown flag 09", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09", 0, CBT_ERR_BAD_TRACEPARENT},
        {"unknown flag ff", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff", 0, CBT_ERR_BAD_TRACEPARENT},
        {"leading space", " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0", 0, CBT_ERR_BAD_TRACEPARENT},
        {"NUL in the middle", nul_mid, sizeof nul_mid - 1, CBT_ERR_BAD_TRACEPARENT},
        {"empty", "", 0, CBT_ERR_BAD_TRACEPARENT},
        {"NULL", NULL, 55, CBT_ERR_BAD_TRACEPARENT},
    };
    assert_int_equal(sizeof nul_mid - 1, CBT_TRACEPARENT_LEN);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const tp_case *c = &cases[i];
        size_t len = c->len ? c->len : (c->s ? strlen(c->s) : 0);
        cbt_span_ctx out;
        memset(&out, 0xab, sizeof out);
        cbt_status st = cbt_traceparent_parse(c->s, len, &out);
        if (st != c->want)
            fail_msg("case \"%s\": got %d (%s), want %d", c->what, st, cbt_strerror(st), c->want);
        if (st != CBT_OK) {
            assert_true(is_zero(&out, sizeof out));
        } else {
            char back[CBT_TRACEPARENT_LEN + 1];
            assert_int_equal(cbt_traceparent_format(&out, back), CBT_OK);
            assert_memory_equal(back, c->s, CBT_TRACEPARENT_LEN + 1);
        }
    }
    /* the decoded fields of the W3C example */
    cbt_span_ctx c;
    assert_int_equal(cbt_traceparent_parse(TP_OK, strlen(TP_OK), &c), CBT_OK);
    const uint8_t tid[16] = {0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6,
                             0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36};
    const uint8_t sid[8] = {0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7};
    assert_memory_equal(c.trace_id, tid, 16);
    assert_memory_equal(c.span_id, sid, 8);
    assert_int_equal(c.trace_flags, 1);
    /* a length that names only a valid prefix is still judged by its length */
    assert_int_equal(cbt_traceparent_parse(TP_OK, 54, &c), CBT_ERR_BAD_TRACEPARENT);
    assert_int_equal(cbt_traceparent_parse(TP_OK, strlen(TP_OK), NULL), CBT_ERR_INVAL);
    assert_string_not_equal(cbt_strerror(CBT_ERR_BAD_TRACEPARENT), "unknown cbt status code");
    assert_string_not_equal(cbt_strerror(CBT_ERR_BAD_TRACESTATE), "unknown cbt status code");
}

static void test_traceparent_round_trip(void **state)
{
    (void)state;
    for (int i = 0; i < 2000; i++) {
        cbt_span_ctx c, back;
        rnd_bytes(c.trace_id, 16);
        rnd_bytes(c.span_id, 8);
        c.trace_id[i % 16] |= 1; /* non-zero */
        c.span_id[i % 8] |= 1;
        c.trace_flags = (uint8_t)(i & 3);
        char s[CBT_TRACEPARENT_LEN + 1];
        assert_int_equal(cbt_traceparent_format(&c, s), CBT_OK);
        assert_int_equal(strlen(s), CBT_TRACEPARENT_LEN);
        assert_int_equal(cbt_traceparent_parse(s, strlen(s), &back), CBT_OK);
        assert_memory_equal(&c, &back, sizeof c);
    }
    /* unknown flag bits are not propagated; invalid contexts are refused */
    cbt_span_ctx c;
    assert_int_equal(cbt_traceparent_parse(TP_OK, strlen(TP_OK), &c), CBT_OK);
    c.trace_flags = 0xfd;
    char s[CBT_TRACEPARENT_LEN + 1];
    assert_int_equal(cbt_traceparent_format(&c, s), CBT_OK);
    assert_string_equal(s, TP_OK);
    memset(c.span_id, 0, 8);
    assert_int_equal(cbt_traceparent_format(&c, s), CBT_ERR_INVAL);
    assert_string_equal(s, "");
    assert_int_equal(cbt_traceparent_format(NULL, s), CBT_ERR_INVAL);
    assert_int_equal(cbt_traceparent_format(&c, NULL), CBT_ERR_INVAL);
}

/* ---- tracestate and extract -------------------------------------------------------- */

static void test_tracestate(void **state)
{
    (void)state;
    char buf[CBT_TRACESTATE_MAX + 2];
    memset(buf, 'a', sizeof buf);
    buf[sizeof buf - 1] = '\0';
    assert_int_equal(cbt_tracestate_check(buf, 512), CBT_OK);
    assert_int_equal(cbt_tracestate_check(buf, 513), CBT_ERR_BAD_TRACESTATE);
    assert_int_equal(cbt_tracestate_check("", 0), CBT_OK);
    assert_int_equal(cbt_tracestate_check(NULL, 0), CBT_OK);
    assert_int_equal(cbt_tracestate_check(NULL, 3), CBT_ERR_BAD_TRACESTATE);
    assert_int_equal(cbt_tracestate_check("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", 39), CBT_OK);
    assert_int_equal(cbt_tracestate_check("a=1\tb=2", 7), CBT_ERR_BAD_TRACESTATE);
    assert_int_equal(cbt_tracestate_check("a=1\nb=2", 7), CBT_ERR_BAD_TRACESTATE);
    assert_int_equal(cbt_tracestate_check("a=1\x7f", 4), CBT_ERR_BAD_TRACESTATE);
    assert_int_equal(cbt_tracestate_check("a=\xc3\xa9", 4), CBT_ERR_BAD_TRACESTATE);
    assert_int_equal(cbt_tracestate_check("a=1\0b", 5), CBT_ERR_BAD_TRACESTATE);
}

static void test_extract(void **state)
{
    (void)state;
    cbt_trace_context tc;
    char big[CBT_TRACESTATE_MAX + 2];
    memset(big, 'x', sizeof big);
    big[CBT_TRACESTATE_MAX] = '\0'; /* 512 characters */

    /* good traceparent, good tracestate */
    assert_int_equal(cbt_context_extract(TP_OK, "rojo=00f067aa0ba902b7", &tc), CBT_OK);
    assert_int_equal(tc.remote, 1);
    assert_int_equal(tc.has_state, 1);
    assert_string_equal(tc.tracestate, "rojo=00f067aa0ba902b7");
    assert_int_equal(tc.ctx.trace_flags, 1);

    assert_int_equal(cbt_context_extract(TP_OK, big, &tc), CBT_OK);
    assert_int_equal(strlen(tc.tracestate), 512);
    assert_int_equal(cbt_context_extract(TP_OK, "", &tc), CBT_OK);
    assert_int_equal(tc.has_state, 0);
    assert_int_equal(cbt_context_extract(TP_OK, NULL, &tc), CBT_OK);
    assert_int_equal(tc.has_state, 0);
    assert_int_equal(tc.remote, 1);

    /* bad tracestate: dropped, the traceparent stays */
    big[CBT_TRACESTATE_MAX] = 'x'; /* 513 characters */
    big[CBT_TRACESTATE_MAX + 1] = '\0';
    assert_int_equal(cbt_context_extract(TP_OK, big, &tc), CBT_ERR_BAD_TRACESTATE);
    assert_int_equal(tc.remote, 1);
    assert_int_equal(tc.has_state, 0);
    assert_string_equal(tc.tracestate, "");
    char s[CBT_TRACEPARENT_LEN + 1];
    assert_int_equal(cbt_traceparent_format(&tc.ctx, s), CBT_OK);
    assert_string_equal(s, TP_OK);
    assert_int_equal(cbt_context_extract(TP_OK, "a=\x01", &tc), CBT_ERR_BAD_TRACESTATE);
    assert_int_equal(tc.remote, 1);

    /* bad or missing traceparent: error, zeroed context (tracestate ignored) */
    const char *bad[] = {
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-011",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "garbage",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&tc, 0x5a, sizeof tc);
        assert_int_equal(cbt_context_extract(bad[i], "rojo=1", &tc), CBT_ERR_BAD_TRACEPARENT);
        assert_true(is_zero(&tc, sizeof tc));
    }
    memset(&tc, 0x5a, sizeof tc);
    assert_int_equal(cbt_context_extract(NULL, "rojo=1", &tc), CBT_ERR_NOT_FOUND);
    assert_true(is_zero(&tc, sizeof tc));
    memset(&tc, 0x5a, sizeof tc);
    assert_int_equal(cbt_context_extract("", NULL, &tc), CBT_ERR_NOT_FOUND);
    assert_true(is_zero(&tc, sizeof tc));
    assert_int_equal(cbt_context_extract(TP_OK, NULL, NULL), CBT_ERR_INVAL);
}

/* ---- Option B: trace id from request id -------------------------------------------- */

static void test_trace_id_from_request(void **state)
{
    (void)state;
    /* Regression pins of cbt_trace_id_from_request, computed once from this
     * implementation: every process of a deployment must derive the same id,
     * so any change here splits traces across versions. They prove stability,
     * not quality — the properties below check that independently. */
    static const struct {
        const char *rid;
        const char *hex;
    } pins[] = {
        {"", PIN_EMPTY},
        {"a", PIN_A},
        {"req-0", PIN_REQ0},
        {"cmpl-7f3c9a2e1b4d4e8f9a0b1c2d3e4f5a6b-0", PIN_CMPL},
    };
    for (size_t i = 0; i < sizeof pins / sizeof pins[0]; i++) {
        uint8_t id[16];
        char hex[33];
        cbt_trace_id_from_request(pins[i].rid, strlen(pins[i].rid), id);
        hex16(id, hex);
        if (strcmp(hex, pins[i].hex) != 0)
            fail_msg("pin \"%s\": got %s, want %s", pins[i].rid, hex, pins[i].hex);
    }

    /* deterministic, length-sensitive, NULL treated as empty */
    uint8_t a[16], b[16];
    cbt_trace_id_from_request("req-42", 6, a);
    cbt_trace_id_from_request("req-42", 6, b);
    assert_memory_equal(a, b, 16);
    cbt_trace_id_from_request("req-42", 5, b);
    assert_memory_not_equal(a, b, 16);
    cbt_trace_id_from_request("req-43", 6, b);
    assert_memory_not_equal(a, b, 16);
    cbt_trace_id_from_request(NULL, 0, a);
    cbt_trace_id_from_request("", 0, b);
    assert_memory_equal(a, b, 16);

    /* 10k request ids: distinct, never zero, bits balanced */
    enum { N = 10000 };
    static uint8_t ids[N][16];
    static unsigned ones[128];
    memset(ones, 0, sizeof ones);
    for (int i = 0; i < N; i++) {
        char rid[64];
        int n = snprintf(rid, sizeof rid, "request-%d", i);
        cbt_trace_id_from_request(rid, (size_t)n, ids[i]);
        assert_false(is_zero(ids[i], 16));
        for (int bit = 0; bit < 128; bit++)
            ones[bit] += (ids[i][bit / 8] >> (bit % 8)) & 1u;
    }
    /* distinct: sort-free pairwise check on a 64-bit prefix via a hash set */
    enum { SLOTS = 1 << 15 };
    static int slot[SLOTS];
    memset(slot, 0, sizeof slot);
    for (int i = 0; i < N; i++) {
        uint32_t h = ((uint32_t)ids[i][0] << 8 | ids[i][1]) << 7 ^ ids[i][2];
        for (uint32_t k = h % SLOTS;; k = (k + 1) % SLOTS) {
            if (slot[k] == 0) {
                slot[k] = i + 1;
                break;
            }
            if (memcmp(ids[slot[k] - 1], ids[i], 16) == 0)
                fail_msg("request-%d and request-%d share a trace id", slot[k] - 1, i);
        }
    }
    /* each bit ~ Binomial(10000, 1/2): sd 50; allow 6 sd */
    unsigned total = 0;
    for (int bit = 0; bit < 128; bit++) {
        if (ones[bit] < 4700 || ones[bit] > 5300)
            fail_msg("bit %d set in %u of %d ids", bit, ones[bit], N);
        total += ones[bit];
    }
    double frac = (double)total / (128.0 * N);
    assert_true(frac > 0.49 && frac < 0.51);
}

/* ---- sampler ------------------------------------------------------------------------ */

typedef struct env_case {
    const char *name; /* NULL: unset */
    const char *arg;  /* NULL: unset */
    cbt_status want;
    cbt_sampler_kind kind;
    double ratio;
    const char *log_has; /* NULL: nothing logged */
} env_case;

static void test_sampler_env(void **state)
{
    (void)state;
    const env_case cases[] = {
        {NULL, NULL, CBT_OK, CBT_SAMPLER_PARENTBASED_ALWAYS_ON, 1.0, NULL},
        {"", NULL, CBT_OK, CBT_SAMPLER_PARENTBASED_ALWAYS_ON, 1.0, NULL},
        {"always_on", NULL, CBT_OK, CBT_SAMPLER_ALWAYS_ON, 1.0, NULL},
        {"always_off", "0.5", CBT_OK, CBT_SAMPLER_ALWAYS_OFF, 1.0, NULL},
        {"traceidratio", "0.25", CBT_OK, CBT_SAMPLER_TRACEIDRATIO, 0.25, NULL},
        {"traceidratio", NULL, CBT_OK, CBT_SAMPLER_TRACEIDRATIO, 1.0, NULL},
        {"traceidratio", "0", CBT_OK, CBT_SAMPLER_TRACEIDRATIO, 0.0, NULL},
        {"traceidratio", "1", CBT_OK, CBT_SAMPLER_TRACEIDRATIO, 1.0, NULL},
        {"TraceIdRatio", "1e-3", CBT_OK, CBT_SAMPLER_TRACEIDRATIO, 0.001, NULL},
        {"parentbased_always_on", NULL, CBT_OK, CBT_SAMPLER_PARENTBASED_ALWAYS_ON, 1.0, NULL},
        {"parentbased_always_off", NULL, CBT_OK, CBT_SAMPLER_PARENTBASED_ALWAYS_OFF, 1.0, NULL},
        {"parentbased_traceidratio", "0.1", CBT_OK, CBT_SAMPLER_PARENTBASED_TRACEIDRATIO, 0.1, NULL},
        {"jaeger_remote", NULL, CBT_ERR_INVAL, CBT_SAMPLER_PARENTBASED_ALWAYS_ON, 1.0,
         "OTEL_TRACES_SAMPLER=\"jaeger_remote\""},
        {"always_onn", NULL, CBT_ERR_INVAL, CBT_SAMPLER_PARENTBASED_ALWAYS_ON, 1.0,
         "OTEL_TRACES_SAMPLER=\"always_onn\""},
        {"traceidratio", "1.5", CBT_ERR_INVAL, CBT_SAMPLER_TRACEIDRATIO, 1.0,
         "OTEL_TRACES_SAMPLER_ARG=\"1.5\""},
        {"traceidratio", "-0.1", CBT_ERR_INVAL, CBT_SAMPLER_TRACEIDRATIO, 1.0,
         "OTEL_TRACES_SAMPLER_ARG=\"-0.1\""},
        {"parentbased_traceidratio", "half", CBT_ERR_INVAL, CBT_SAMPLER_PARENTBASED_TRACEIDRATIO,
         1.0, "OTEL_TRACES_SAMPLER_ARG=\"half\""},
        {"traceidratio", "0.5x", CBT_ERR_INVAL, CBT_SAMPLER_TRACEIDRATIO, 1.0,
         "OTEL_TRACES_SAMPLER_ARG=\"0.5x\""},
        {"traceidratio", "nan", CBT_ERR_INVAL, CBT_SAMPLER_TRACEIDRATIO, 1.0,
         "OTEL_TRACES_SAMPLER_ARG=\"nan\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const env_case *c = &cases[i];
        if (c->name)
            setenv("OTEL_TRACES_SAMPLER", c->name, 1);
        else
            unsetenv("OTEL_TRACES_SAMPLER");
        if (c->arg)
            setenv("OTEL_TRACES_SAMPLER_ARG", c->arg, 1);
        else
            unsetenv("OTEL_TRACES_SAMPLER_ARG");
        char logbuf[1024] = {0};
        FILE *log = fmemopen(logbuf, sizeof logbuf - 1, "w");
        assert_non_null(log);
        cbt_sampler s;
        cbt_status st = cbt_sampler_from_env(&s, log);
        fclose(log);
        if (st != c->want || s.kind != c->kind || s.ratio != c->ratio)
            fail_msg("case %zu (%s, %s): got %d %s %g, want %d %s %g", i,
                     c->name ? c->name : "unset", c->arg ? c->arg : "unset", st,
                     cbt_sampler_name(s.kind), s.ratio, c->want, cbt_sampler_name(c->kind),
                     c->ratio);
        if (c->log_has) {
            if (!strstr(logbuf, c->log_has))
                fail_msg("case %zu: log \"%s\" lacks \"%s\"", i, logbuf, c->log_has);
        } else {
            assert_string_equal(logbuf, "");
        }
    }
    unsetenv("OTEL_TRACES_SAMPLER");
    unsetenv("OTEL_TRACES_SAMPLER_ARG");
    assert_int_equal(cbt_sampler_from_env(NULL, NULL), CBT_ERR_INVAL);
    for (int k = 0; k < CBT_SAMPLER_KIND_COUNT_; k++) {
        cbt_sampler s;
        assert_int_equal(cbt_sampler_parse(cbt_sampler_name((cbt_sampler_kind)k), NULL, &s, NULL),
                         CBT_OK);
        assert_int_equal(s.kind, k);
    }
    assert_string_equal(cbt_sampler_name(CBT_SAMPLER_KIND_COUNT_), "?");
}

static unsigned count_sampled(const cbt_sampler *s, int n)
{
    unsigned got = 0;
    for (int i = 0; i < n; i++) {
        uint8_t id[16];
        rnd_bytes(id, 16);
        got += cbt_sampler_decide(s, id, NULL);
    }
    return got;
}

static void test_sampler_decide(void **state)
{
    (void)state;
    enum { N = 20000 };
    cbt_sampler on = {CBT_SAMPLER_ALWAYS_ON, 1.0}, off = {CBT_SAMPLER_ALWAYS_OFF, 1.0};
    cbt_sampler r0 = {CBT_SAMPLER_TRACEIDRATIO, 0.0}, r1 = {CBT_SAMPLER_TRACEIDRATIO, 1.0};
    cbt_sampler r25 = {CBT_SAMPLER_TRACEIDRATIO, 0.25};
    assert_int_equal(count_sampled(&on, N), N);
    assert_int_equal(count_sampled(&off, N), 0);
    assert_int_equal(count_sampled(&r0, N), 0);
    assert_int_equal(count_sampled(&r1, N), N);
    unsigned q = count_sampled(&r25, N);
    if (q < N / 5 || q > N * 3 / 10)
        fail_msg("ratio 0.25 sampled %u of %d", q, N);
    assert_true(cbt_sampler_decide(NULL, NULL, NULL)); /* default: parentbased_always_on */
    assert_false(cbt_sampler_decide(&r25, NULL, NULL));

    /* the rule: rightmost 56 bits R, T = (1 - ratio) * 2^56, sampled iff R >= T */
    uint8_t id[16];
    memset(id, 0xff, 16);
    id[9] = 0xbf; /* R = 0xbfffff_ffffffff < 0.75 * 2^56 = 0xc00000_00000000 */
    assert_false(cbt_sampler_decide(&r25, id, NULL));
    id[9] = 0xc0;
    memset(id + 10, 0, 6); /* R = T exactly */
    assert_true(cbt_sampler_decide(&r25, id, NULL));
    memset(id + 9, 0, 7);
    id[0] = id[8] = 0xff; /* the left 9 bytes do not matter */
    assert_false(cbt_sampler_decide(&r25, id, NULL));
    memset(id + 9, 0xff, 7);
    assert_true(cbt_sampler_decide(&r25, id, NULL));

    /* monotone: sampled at a ratio implies sampled at every larger ratio */
    for (int i = 0; i < 2000; i++) {
        rnd_bytes(id, 16);
        cbt_sampler lo = {CBT_SAMPLER_TRACEIDRATIO, (double)(rnd() % 1000) / 1000.0};
        cbt_sampler hi = {CBT_SAMPLER_TRACEIDRATIO, lo.ratio + (double)(rnd() % 100) / 1000.0};
        if (cbt_sampler_decide(&lo, id, NULL))
            assert_true(cbt_sampler_decide(&hi, id, NULL));
    }

    /* parent-based: a valid parent's flag decides; roots use the root sampler */
    cbt_span_ctx yes, no, zero;
    assert_int_equal(cbt_traceparent_parse(TP_OK, strlen(TP_OK), &yes), CBT_OK);
    no = yes;
    no.trace_flags = 0;
    memset(&zero, 0, sizeof zero);
    zero.trace_flags = 1; /* flags of an invalid context are not a parent's */
    const cbt_sampler_kind pk[] = {CBT_SAMPLER_PARENTBASED_ALWAYS_ON,
                                   CBT_SAMPLER_PARENTBASED_ALWAYS_OFF,
                                   CBT_SAMPLER_PARENTBASED_TRACEIDRATIO};
    for (int i = 0; i < 3; i++) {
        cbt_sampler s = {pk[i], 0.0};
        assert_true(cbt_sampler_decide(&s, yes.trace_id, &yes));
        assert_false(cbt_sampler_decide(&s, no.trace_id, &no));
    }
    cbt_sampler pon = {CBT_SAMPLER_PARENTBASED_ALWAYS_ON, 0.0};
    cbt_sampler poff = {CBT_SAMPLER_PARENTBASED_ALWAYS_OFF, 0.0};
    cbt_sampler pr0 = {CBT_SAMPLER_PARENTBASED_TRACEIDRATIO, 0.0};
    cbt_sampler pr1 = {CBT_SAMPLER_PARENTBASED_TRACEIDRATIO, 1.0};
    assert_true(cbt_sampler_decide(&pon, yes.trace_id, NULL));
    assert_true(cbt_sampler_decide(&pon, yes.trace_id, &zero));
    assert_false(cbt_sampler_decide(&poff, yes.trace_id, NULL));
    assert_false(cbt_sampler_decide(&poff, yes.trace_id, &zero));
    assert_false(cbt_sampler_decide(&pr0, yes.trace_id, NULL));
    assert_true(cbt_sampler_decide(&pr1, yes.trace_id, NULL));
    cbt_sampler pr25 = {CBT_SAMPLER_PARENTBASED_TRACEIDRATIO, 0.25};
    q = count_sampled(&pr25, N);
    if (q < N / 5 || q > N * 3 / 10)
        fail_msg("parentbased ratio 0.25 sampled %u roots of %d", q, N);
    /* non-parent-based samplers ignore the parent */
    assert_true(cbt_sampler_decide(&on, no.trace_id, &no));
    assert_false(cbt_sampler_decide(&off, yes.trace_id, &yes));
}

/* ---- the receiving side --------------------------------------------------------------- */

static void test_context_begin(void **state)
{
    (void)state;
    cbt_trace_context tc, tc2;
    cbt_status why;
    cbt_sampler pon = cbt_sampler_default();
    cbt_sampler poff = {CBT_SAMPLER_PARENTBASED_ALWAYS_OFF, 1.0};
    cbt_sampler off = {CBT_SAMPLER_ALWAYS_OFF, 1.0};

    /* Option A: the remote context is the parent; parent-based follows it */
    assert_int_equal(cbt_context_begin(TP_OK, "k=v", "req-1", 5, &poff, &tc, &why), CBT_OK);
    assert_int_equal(why, CBT_OK);
    assert_int_equal(tc.remote, 1);
    assert_int_equal(tc.ctx.trace_flags & CBT_TRACE_FLAG_SAMPLED, 1);
    assert_ptr_equal(cbt_context_parent(&tc), &tc.ctx);
    assert_string_equal(tc.tracestate, "k=v");
    assert_int_equal(cbt_context_begin(TP_OK, NULL, "req-1", 5, &off, &tc, &why), CBT_OK);
    assert_int_equal(tc.ctx.trace_flags & CBT_TRACE_FLAG_SAMPLED, 0);

    /* Option B: two processes, no context: the same trace id, both roots */
    uint8_t want[16];
    cbt_trace_id_from_request("req-1", 5, want);
    assert_int_equal(cbt_context_begin(NULL, NULL, "req-1", 5, &pon, &tc, &why), CBT_OK);
    assert_int_equal(why, CBT_ERR_NOT_FOUND);
    assert_int_equal(cbt_context_begin("00-bad", "k=v", "req-1", 5, &pon, &tc2, &why), CBT_OK);
    assert_int_equal(why, CBT_ERR_BAD_TRACEPARENT);
    assert_memory_equal(tc.ctx.trace_id, want, 16);
    assert_memory_equal(tc2.ctx.trace_id, want, 16);
    assert_int_equal(tc.remote, 0);
    assert_true(is_zero(tc.ctx.span_id, 8));
    assert_int_equal(tc.ctx.trace_flags, CBT_TRACE_FLAG_SAMPLED);
    assert_int_equal(tc2.has_state, 0);
    assert_null(cbt_context_parent(&tc));
    assert_int_equal(cbt_context_begin(NULL, NULL, "req-1", 5, &poff, &tc, NULL), CBT_OK);
    assert_int_equal(tc.ctx.trace_flags, 0);

    /* a ratio sampler: every process reaches the same decision for one request */
    cbt_sampler r = {CBT_SAMPLER_PARENTBASED_TRACEIDRATIO, 0.5};
    unsigned sampled = 0;
    for (int i = 0; i < 1000; i++) {
        char rid[32];
        int n = snprintf(rid, sizeof rid, "r%d", i);
        assert_int_equal(cbt_context_begin(NULL, NULL, rid, (size_t)n, &r, &tc, NULL), CBT_OK);
        assert_int_equal(cbt_context_begin("", NULL, rid, (size_t)n, &r, &tc2, NULL), CBT_OK);
        assert_memory_equal(&tc.ctx, &tc2.ctx, sizeof tc.ctx);
        sampled += tc.ctx.trace_flags & 1u;
    }
    assert_true(sampled > 400 && sampled < 600);

    /* adopt: a fresh root takes the derived id and the decision */
    cbt_span sp;
    memset(&sp, 0, sizeof sp);
    rnd_bytes(sp.ctx.trace_id, 16);
    rnd_bytes(sp.ctx.span_id, 8);
    sp.ctx.trace_flags = 1;
    uint8_t span_id[8];
    memcpy(span_id, sp.ctx.span_id, 8);
    assert_int_equal(cbt_context_begin(NULL, NULL, "req-9", 5, &poff, &tc, NULL), CBT_OK);
    cbt_span_adopt_context(&sp, &tc);
    assert_memory_equal(sp.ctx.trace_id, tc.ctx.trace_id, 16);
    assert_memory_equal(sp.ctx.span_id, span_id, 8);
    assert_int_equal(sp.ctx.trace_flags, 0);
    assert_true(is_zero(sp.parent_span_id, 8)); /* still a root: a sibling */
    cbt_span_adopt_context(NULL, &tc);
    cbt_span_adopt_context(&sp, NULL);

    assert_int_equal(cbt_context_begin(NULL, NULL, "x", 1, NULL, NULL, &why), CBT_ERR_INVAL);
    assert_int_equal(cbt_context_begin(NULL, NULL, NULL, 3, NULL, &tc, &why), CBT_ERR_INVAL);
    assert_int_equal(cbt_context_begin(NULL, NULL, NULL, 0, NULL, &tc, &why), CBT_OK);
}

/* A request the sampler drops costs nothing downstream: the caller's one
 * flag test skips its events, and its kernel gets an untraced span, so no
 * event is queued and no ring record written. The sampled-in twin of the
 * same request does both (so the checks can fail). */
static void test_sampled_out_costs_nothing(void **state)
{
    (void)state;
    tu_start(NULL);
    cbt_sampler off, on;
    assert_int_equal(cbt_sampler_parse("always_off", NULL, &off, NULL), CBT_OK);
    assert_int_equal(cbt_sampler_parse("always_on", NULL, &on, NULL), CBT_OK);
    cbt_trace_context tc_off, tc_on;
    assert_int_equal(cbt_context_begin(NULL, NULL, "req-s", 5, &off, &tc_off, NULL), CBT_OK);
    assert_int_equal(cbt_context_begin(NULL, NULL, "req-s", 5, &on, &tc_on, NULL), CBT_OK);
    assert_false(cbt_context_sampled(&tc_off));
    assert_true(cbt_context_sampled(&tc_on));
    /* the same trace id either way (Option B): only the decision differs */
    assert_memory_equal(tc_off.ctx.trace_id, tc_on.ctx.trace_id, 16);

    const cbt_trace_context *both[2] = {&tc_off, &tc_on};
    cbt_kspan spans[2];
    for (int k = 0; k < 2; k++) {
        if (cbt_context_sampled(both[k]))
            tu_pub(CBT_EV_MP_REQUEST_START, k ? "req-in" : "req-out");
        cbt_launch_info li = cbt_launch_info_default(CBT_KOP_SCATTER, 2);
        li.sampled_out = !cbt_context_sampled(both[k]);
        assert_int_equal(cbt_launch_begin(NULL, "req-s", &li, &spans[k]), CBT_OK);
    }
    assert_null(spans[0].ring);
    assert_non_null(spans[1].ring);
    tu_flush();
    assert_null(tu_event_find(CBT_EV_MP_REQUEST_START, "req-out", 0));
    assert_non_null(tu_event_find(CBT_EV_MP_REQUEST_START, "req-in", 0));
    /* one REQUEST_START and one KERNEL_LAUNCH, both from the sampled-in twin */
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m), CBT_OK);
    assert_int_equal(m.published, 2);
    tu_stop();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_traceparent_table),
        cmocka_unit_test(test_traceparent_round_trip),
        cmocka_unit_test(test_tracestate),
        cmocka_unit_test(test_extract),
        cmocka_unit_test(test_trace_id_from_request),
        cmocka_unit_test(test_sampler_env),
        cmocka_unit_test(test_sampler_decide),
        cmocka_unit_test(test_context_begin),
        cmocka_unit_test_teardown(test_sampled_out_costs_nothing, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
