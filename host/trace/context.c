/* host/trace/context.c — owns W3C trace-context inject/extract, the Option B
 * request-id trace id, and head sampling (cbt/context.h).
 *
 * Self-contained on purpose: it calls nothing else in cbt, so the fuzz
 * target (tests/fuzz_traceparent.c, scripts/fuzz.sh) builds it alone with
 * host/core/status.c.
 */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cbt/context.h"

static const char k_hex[] = "0123456789abcdef";

/* 0..15 for a lowercase hex digit, -1 otherwise (uppercase included). */
static int hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Decode 2*n lowercase hex digits into n bytes; false on any other byte. */
static bool hex_decode(const char *s, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int hi = hexval((unsigned char)s[2 * i]), lo = hexval((unsigned char)s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

static char *hex_encode(char *w, const uint8_t *in, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        *w++ = k_hex[in[i] >> 4];
        *w++ = k_hex[in[i] & 15];
    }
    return w;
}

static bool all_zero(const uint8_t *p, size_t n)
{
    uint8_t acc = 0;
    for (size_t i = 0; i < n; i++)
        acc |= p[i];
    return acc == 0;
}

/* strnlen without needing POSIX feature macros */
static size_t bounded_len(const char *s, size_t max)
{
    size_t n = 0;
    while (n < max && s[n])
        n++;
    return n;
}

static bool ctx_valid(const cbt_span_ctx *c)
{
    return c && !all_zero(c->trace_id, 16) && !all_zero(c->span_id, 8);
}

/* ---- traceparent / tracestate ------------------------------------------------ */

cbt_status cbt_traceparent_format(const cbt_span_ctx *c, char out[CBT_TRACEPARENT_LEN + 1])
{
    if (!out)
        return CBT_ERR_INVAL;
    out[0] = '\0';
    if (!ctx_valid(c))
        return CBT_ERR_INVAL;
    char *w = out;
    *w++ = '0';
    *w++ = '0';
    *w++ = '-';
    w = hex_encode(w, c->trace_id, 16);
    *w++ = '-';
    w = hex_encode(w, c->span_id, 8);
    *w++ = '-';
    uint8_t flags = (uint8_t)(c->trace_flags & CBT_TRACE_FLAGS_KNOWN);
    w = hex_encode(w, &flags, 1);
    *w = '\0';
    return CBT_OK;
}

cbt_status cbt_traceparent_parse(const char *s, size_t len, cbt_span_ctx *out)
{
    if (!out)
        return CBT_ERR_INVAL;
    memset(out, 0, sizeof *out);
    if (!s || len != CBT_TRACEPARENT_LEN)
        return CBT_ERR_BAD_TRACEPARENT;
    /* 00-tttttttttttttttttttttttttttttttt-ssssssssssssssss-ff
     * 0  3                                36               53 */
    if (s[0] != '0' || s[1] != '0' || s[2] != '-' || s[35] != '-' || s[52] != '-')
        return CBT_ERR_BAD_TRACEPARENT;
    cbt_span_ctx c;
    uint8_t flags;
    if (!hex_decode(s + 3, c.trace_id, 16) || !hex_decode(s + 36, c.span_id, 8) ||
        !hex_decode(s + 53, &flags, 1))
        return CBT_ERR_BAD_TRACEPARENT;
    if (all_zero(c.trace_id, 16) || all_zero(c.span_id, 8))
        return CBT_ERR_BAD_TRACEPARENT;
    if (flags & ~CBT_TRACE_FLAGS_KNOWN)
        return CBT_ERR_BAD_TRACEPARENT;
    c.trace_flags = flags;
    *out = c;
    return CBT_OK;
}

cbt_status cbt_tracestate_check(const char *s, size_t len)
{
    if (len == 0)
        return CBT_OK;
    if (!s || len > CBT_TRACESTATE_MAX)
        return CBT_ERR_BAD_TRACESTATE;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x20 || ch > 0x7e)
            return CBT_ERR_BAD_TRACESTATE;
    }
    return CBT_OK;
}

cbt_status cbt_context_extract(const char *traceparent, const char *tracestate,
                               cbt_trace_context *out)
{
    if (!out)
        return CBT_ERR_INVAL;
    memset(out, 0, sizeof *out);
    if (!traceparent || traceparent[0] == '\0')
        return CBT_ERR_NOT_FOUND;
    /* one byte past the only valid length is enough to reject */
    size_t len = bounded_len(traceparent, CBT_TRACEPARENT_LEN + 1);
    cbt_status st = cbt_traceparent_parse(traceparent, len, &out->ctx);
    if (st != CBT_OK) {
        memset(out, 0, sizeof *out);
        return st;
    }
    out->remote = 1;
    if (!tracestate)
        return CBT_OK;
    size_t slen = bounded_len(tracestate, CBT_TRACESTATE_MAX + 1);
    if (cbt_tracestate_check(tracestate, slen) != CBT_OK)
        return CBT_ERR_BAD_TRACESTATE;
    memcpy(out->tracestate, tracestate, slen);
    out->tracestate[slen] = '\0';
    out->has_state = slen > 0;
    return CBT_OK;
}

/* ---- Option B: trace id from the request id ------------------------------------ */

static uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* MurmurHash3's 64-bit finalizer. */
static uint64_t fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return k;
}

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

void cbt_trace_id_from_request(const char *request_id, size_t len, uint8_t out[16])
{
    if (!out)
        return;
    uint64_t a = 0xcbf29ce484222325ull; /* FNV-1a 64 offset basis */
    uint64_t b = 0x6a09e667f3bcc909ull; /* frac(sqrt(2)) */
    const unsigned char *p = (const unsigned char *)request_id;
    if (!p)
        len = 0;
    for (size_t i = 0; i < len; i++) {
        a = (a ^ p[i]) * 0x100000001b3ull;               /* FNV-1a 64 prime */
        b = rotl64(b ^ p[i], 27) * 0x9e3779b97f4a7c15ull; /* 2^64 / phi, odd */
    }
    a ^= (uint64_t)len;
    b ^= (uint64_t)len;
    a += b;
    b += a;
    a = fmix64(a);
    b = fmix64(b);
    a += b;
    b += a;
    put_be64(out, a);
    put_be64(out + 8, b);
    if (a == 0 && b == 0)
        out[15] = 1;
}

/* ---- head sampling ------------------------------------------------------------- */

static const char *const k_sampler_names[CBT_SAMPLER_KIND_COUNT_] = {
    [CBT_SAMPLER_ALWAYS_ON] = "always_on",
    [CBT_SAMPLER_ALWAYS_OFF] = "always_off",
    [CBT_SAMPLER_TRACEIDRATIO] = "traceidratio",
    [CBT_SAMPLER_PARENTBASED_ALWAYS_ON] = "parentbased_always_on",
    [CBT_SAMPLER_PARENTBASED_ALWAYS_OFF] = "parentbased_always_off",
    [CBT_SAMPLER_PARENTBASED_TRACEIDRATIO] = "parentbased_traceidratio",
};

cbt_sampler cbt_sampler_default(void)
{
    cbt_sampler s = {CBT_SAMPLER_PARENTBASED_ALWAYS_ON, 1.0};
    return s;
}

const char *cbt_sampler_name(cbt_sampler_kind k)
{
    if ((unsigned)k >= CBT_SAMPLER_KIND_COUNT_)
        return "?";
    return k_sampler_names[k];
}

static bool eq_nocase(const char *a, const char *b)
{
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return false;
    return *a == *b;
}

static bool uses_ratio(cbt_sampler_kind k)
{
    return k == CBT_SAMPLER_TRACEIDRATIO || k == CBT_SAMPLER_PARENTBASED_TRACEIDRATIO;
}

cbt_status cbt_sampler_parse(const char *name, const char *arg, cbt_sampler *out, FILE *log)
{
    if (!out)
        return CBT_ERR_INVAL;
    cbt_status st = CBT_OK;
    *out = cbt_sampler_default();
    if (name && name[0]) {
        int found = -1;
        for (int k = 0; k < CBT_SAMPLER_KIND_COUNT_; k++)
            if (eq_nocase(name, k_sampler_names[k]))
                found = k;
        if (found < 0) {
            if (log)
                fprintf(log, "cbt: OTEL_TRACES_SAMPLER=\"%s\" is not a known sampler "
                             "(always_on, always_off, traceidratio, parentbased_always_on, "
                             "parentbased_always_off, parentbased_traceidratio); using %s\n",
                        name, cbt_sampler_name(out->kind));
            st = CBT_ERR_INVAL;
        } else {
            out->kind = (cbt_sampler_kind)found;
        }
    }
    if (uses_ratio(out->kind) && arg && arg[0]) {
        /* strtod follows LC_NUMERIC; cbt never calls setlocale, so "C" unless
         * the host program changed it */
        char *end = NULL;
        double r = strtod(arg, &end);
        if (end == arg || *end != '\0' || !isfinite(r) || r < 0.0 || r > 1.0) {
            if (log)
                fprintf(log, "cbt: OTEL_TRACES_SAMPLER_ARG=\"%s\" is not a ratio in [0, 1] "
                             "for %s; using 1.0\n",
                        arg, cbt_sampler_name(out->kind));
            st = CBT_ERR_INVAL;
        } else {
            out->ratio = r;
        }
    }
    return st;
}

cbt_status cbt_sampler_from_env(cbt_sampler *out, FILE *log)
{
    return cbt_sampler_parse(getenv("OTEL_TRACES_SAMPLER"), getenv("OTEL_TRACES_SAMPLER_ARG"),
                             out, log);
}

#define TWO_POW_56 72057594037927936.0

static bool ratio_decide(double ratio, const uint8_t trace_id[16])
{
    if (!trace_id || !(ratio > 0.0)) /* NaN too */
        return false;
    if (ratio >= 1.0)
        return true;
    uint64_t r = 0;
    for (int i = 9; i < 16; i++)
        r = r << 8 | trace_id[i];
    double t = floor((1.0 - ratio) * TWO_POW_56 + 0.5);
    if (t >= TWO_POW_56)
        return false;
    return r >= (uint64_t)t;
}

bool cbt_sampler_decide(const cbt_sampler *s, const uint8_t trace_id[16],
                        const cbt_span_ctx *parent)
{
    cbt_sampler def = cbt_sampler_default();
    if (!s)
        s = &def;
    switch (s->kind) {
    case CBT_SAMPLER_ALWAYS_ON:
        return true;
    case CBT_SAMPLER_ALWAYS_OFF:
        return false;
    case CBT_SAMPLER_TRACEIDRATIO:
        return ratio_decide(s->ratio, trace_id);
    case CBT_SAMPLER_PARENTBASED_ALWAYS_ON:
    case CBT_SAMPLER_PARENTBASED_ALWAYS_OFF:
    case CBT_SAMPLER_PARENTBASED_TRACEIDRATIO:
        if (ctx_valid(parent))
            return (parent->trace_flags & CBT_TRACE_FLAG_SAMPLED) != 0;
        if (s->kind == CBT_SAMPLER_PARENTBASED_ALWAYS_ON)
            return true;
        if (s->kind == CBT_SAMPLER_PARENTBASED_ALWAYS_OFF)
            return false;
        return ratio_decide(s->ratio, trace_id);
    case CBT_SAMPLER_KIND_COUNT_:
        break;
    }
    return false;
}

/* ---- the receiving side -------------------------------------------------------- */

cbt_status cbt_context_begin(const char *traceparent, const char *tracestate,
                             const char *request_id, size_t request_id_len,
                             const cbt_sampler *sampler, cbt_trace_context *out,
                             cbt_status *why)
{
    if (!out || (!request_id && request_id_len > 0)) {
        if (why)
            *why = CBT_ERR_INVAL;
        return CBT_ERR_INVAL;
    }
    cbt_status st = cbt_context_extract(traceparent, tracestate, out);
    if (why)
        *why = st;
    if (out->remote) {
        bool sampled = cbt_sampler_decide(sampler, out->ctx.trace_id, &out->ctx);
        out->ctx.trace_flags = (uint8_t)((out->ctx.trace_flags & ~CBT_TRACE_FLAG_SAMPLED) |
                                         (sampled ? CBT_TRACE_FLAG_SAMPLED : 0));
        return CBT_OK;
    }
    memset(out, 0, sizeof *out);
    cbt_trace_id_from_request(request_id, request_id_len, out->ctx.trace_id);
    /* the derived id is a hash, not W3C Level 2 randomness: no RANDOM flag */
    if (cbt_sampler_decide(sampler, out->ctx.trace_id, NULL))
        out->ctx.trace_flags = CBT_TRACE_FLAG_SAMPLED;
    return CBT_OK;
}

const cbt_span_ctx *cbt_context_parent(const cbt_trace_context *tc)
{
    return tc && tc->remote ? &tc->ctx : NULL;
}

void cbt_span_adopt_context(cbt_span *s, const cbt_trace_context *tc)
{
    if (!s || !tc)
        return;
    if (!tc->remote)
        memcpy(s->ctx.trace_id, tc->ctx.trace_id, 16);
    s->ctx.trace_flags = tc->ctx.trace_flags;
}
