/* tests/fuzz_traceparent.c — libFuzzer target for W3C trace-context
 * extraction (host/trace/context.c). Built and run by scripts/fuzz.sh.
 *
 * Invariants checked on arbitrary bytes:
 *   - cbt_traceparent_parse never crashes; it returns CBT_OK or
 *     CBT_ERR_BAD_TRACEPARENT; on error the output is all zero; on success
 *     the input is exactly 55 bytes and formats back to the identical bytes.
 *   - cbt_context_extract on a NUL-terminated copy agrees with the parse of
 *     the bytes before the first NUL; the second half of the input, used as
 *     the tracestate, is either kept verbatim or dropped with
 *     CBT_ERR_BAD_TRACESTATE, as cbt_tracestate_check says.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cbt/context.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int all_zero(const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

static size_t cstrlen(const char *s, size_t max)
{
    size_t n = 0;
    while (n < max && s[n])
        n++;
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* 1: the raw bytes */
    cbt_span_ctx c;
    cbt_status st = cbt_traceparent_parse((const char *)data, size, &c);
    if (st == CBT_OK) {
        char back[CBT_TRACEPARENT_LEN + 1];
        if (size != CBT_TRACEPARENT_LEN || cbt_traceparent_format(&c, back) != CBT_OK ||
            memcmp(back, data, CBT_TRACEPARENT_LEN) != 0)
            abort();
    } else if (st != CBT_ERR_BAD_TRACEPARENT || !all_zero(&c, sizeof c)) {
        abort();
    }

    /* 2: NUL-terminated copies: the first part as traceparent, the rest as
     * tracestate (split at the first '|' when there is one) */
    char *copy = malloc(size + 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    copy[size] = '\0';
    char *tp = copy, *ts = NULL;
    char *bar = memchr(copy, '|', size);
    if (bar) {
        *bar = '\0';
        ts = bar + 1;
    }
    cbt_trace_context tc;
    st = cbt_context_extract(tp, ts, &tc);
    size_t tplen = cstrlen(tp, size + 1);
    cbt_span_ctx ref;
    cbt_status pst = cbt_traceparent_parse(tp, tplen, &ref);
    if (tplen == 0) {
        if (st != CBT_ERR_NOT_FOUND || !all_zero(&tc, sizeof tc))
            abort();
    } else if (pst != CBT_OK) {
        if (st != CBT_ERR_BAD_TRACEPARENT || !all_zero(&tc, sizeof tc))
            abort();
    } else {
        if (!tc.remote || memcmp(&tc.ctx, &ref, sizeof ref) != 0)
            abort();
        size_t tslen = ts ? cstrlen(ts, size + 1) : 0;
        cbt_status cst = cbt_tracestate_check(ts, tslen);
        if (cst == CBT_OK) {
            if (st != CBT_OK || strcmp(tc.tracestate, ts ? ts : "") != 0 ||
                tc.has_state != (tslen > 0))
                abort();
        } else if (st != CBT_ERR_BAD_TRACESTATE || tc.has_state || tc.tracestate[0]) {
            abort();
        }
    }

    /* 3: the whole receive path, and the Option B id of the same bytes */
    cbt_trace_context begun;
    cbt_sampler s = {CBT_SAMPLER_PARENTBASED_TRACEIDRATIO, 0.5};
    if (cbt_context_begin(tp, ts, (const char *)data, size, &s, &begun, NULL) != CBT_OK)
        abort();
    if (all_zero(begun.ctx.trace_id, 16))
        abort();
    free(copy);
    return 0;
}
