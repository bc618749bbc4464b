/* tests/fuzz_grpc_status.c — libFuzzer target for what an OTLP/gRPC answer
 * can put in front of the exporter (exporter/otlp_grpc.c). Built and run by
 * scripts/fuzz.sh.
 *
 * Invariants checked on arbitrary bytes:
 *   - cbt_grpc_status_retry_delay never reads past its input: it is given
 *     an exact-size copy, so ASan sees any overread; it returns -1, 0 or 1,
 *     a found delay is at most a day, and an absent one leaves *delay_ms as
 *     it was.
 *   - the bytes as a header line (cbt_grpc_resp_header) and the answer's
 *     outcome (cbt_grpc_outcome): a code in 0..16, a RetryInfo delay only
 *     for a code that is not OK, a NUL-terminated grpc-message.
 *   - the bytes as base64: a decoded length within 3/4 of the input, or -1;
 *     as a gRPC frame: a message inside the input.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exporter/otlp_grpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *b = malloc(size ? size : 1);
    if (!b)
        return 0;
    memcpy(b, data, size);

    uint64_t ms = 12345;
    int rc = cbt_grpc_status_retry_delay(b, size, &ms);
    if (rc < -1 || rc > 1 || (rc == 1 && ms > 86400000u) || (rc != 1 && ms != 12345))
        abort();

    static cbt_grpc_resp r;
    cbt_grpc_resp_reset(&r);
    cbt_grpc_resp_header(&r, "grpc-status: 8\r\n", 16);
    cbt_grpc_resp_header(&r, (const char *)b, size);
    int64_t retry;
    int bad;
    int code = cbt_grpc_outcome(200, &r, &retry, &bad);
    if (code < 0 || code >= CBT_GRPC_N_CODES || (code == CBT_GRPC_OK && retry != -1) ||
        retry > 86400000 || !memchr(r.message, '\0', sizeof r.message) ||
        r.details_len > sizeof r.details)
        abort();

    uint8_t out[4096];
    long k = cbt_grpc_base64_decode((const char *)b, size, out, sizeof out);
    if (k < -1 || (k >= 0 && (size_t)k > size * 3 / 4 + 1))
        abort();

    int comp;
    const uint8_t *msg;
    size_t len;
    if (cbt_grpc_frame_parse(b, size, &comp, &msg, &len) == 0 &&
        (msg < b || msg + len > b + size || (comp != 0 && comp != 1)))
        abort();
    free(b);
    return 0;
}
