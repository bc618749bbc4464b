/* bench/bench_otlp.c — OTLP encoding speed on one core: finished cbt_span
 * values to ExportTraceServiceRequest bytes (exporter/otlp_encode.c).
 *
 * The span is an mp.store as the MP subscriber makes it: a 16-byte trace
 * id, a parent, sampled, five attributes (session_id, a 40-character string;
 * num_tokens, stored_count, ints; device, a short string; gbps, a double).
 * Each batch holds distinct spans (ids and times differ), encoded into a
 * buffer that is reused, as the exporter thread does.
 *
 * Prints, per format and batch size: spans/s, ns per span, bytes per span,
 * best of several rounds. Target: protobuf >= 3 M spans/s per core.
 * "grpc" is what the OTLP/gRPC exporter builds: the same protobuf request
 * appended after 5 bytes of headroom, then its length-prefix written in
 * place (5 bytes more per request, no copy).
 *
 * Usage: bench_otlp [--quick]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "cbt.h"
#include "cbt/otlp.h"

static void make_span(cbt_span *s, uint32_t i)
{
    static const char sid[] = "0f8fad5b-d9cb-469f-a165-70867728950e-042"; /* 40 chars */
    memset(s, 0, sizeof *s);
    uint64_t x = 0x9E3779B97F4A7C15ull * (i + 1);
    for (int k = 0; k < 16; k++)
        s->ctx.trace_id[k] = (uint8_t)(x >> (8 * (k % 8)) ^ (uint8_t)k);
    for (int k = 0; k < 8; k++) {
        s->ctx.span_id[k] = (uint8_t)(x >> (8 * k) ^ 0x5a);
        s->parent_span_id[k] = (uint8_t)(x >> (8 * k) ^ 0xa5);
    }
    s->ctx.trace_flags = 1;
    s->name = CBT_N_MP_STORE;
    s->kind = CBT_SPAN_KIND_INTERNAL;
    s->start_ns = 1700000000000000000ull + (uint64_t)i * 250000;
    s->end_ns = s->start_ns + 180000 + i % 1000;
    cbt_span_set_str(s, CBT_N_SESSION_ID, sid, sizeof sid - 1);
    cbt_span_set_i64(s, CBT_N_NUM_TOKENS, 4096 + i % 512);
    cbt_span_set_i64(s, CBT_N_STORED_COUNT, 256);
    cbt_span_set_str(s, CBT_N_DEVICE, "cuda:0", 6);
    cbt_span_set_f64(s, CBT_N_GBPS, 21.5 + (double)(i % 100) / 8.0);
}

typedef cbt_status (*encode_fn)(const cbt_otlp_resource *, const cbt_span *, size_t, cbt_buf *);

/* As exporter/otlp_http.c frames a gRPC request: headroom, encode, prefix. */
static cbt_status encode_grpc(const cbt_otlp_resource *r, const cbt_span *spans, size_t n,
                              cbt_buf *out)
{
    if (out->cap < 5) {
        uint8_t *p = realloc(out->data, 4096);
        if (!p)
            return CBT_ERR_NOMEM;
        out->data = p;
        out->cap = 4096;
    }
    out->len = 5;
    cbt_status st = cbt_otlp_encode_proto(r, spans, n, out);
    uint32_t len = (uint32_t)(out->len - 5);
    out->data[0] = 0;
    out->data[1] = (uint8_t)(len >> 24);
    out->data[2] = (uint8_t)(len >> 16);
    out->data[3] = (uint8_t)(len >> 8);
    out->data[4] = (uint8_t)len;
    return st;
}

/* Best-of-rounds spans/s for batches of `batch`; *bytes_per_span out. */
static double run(encode_fn fn, const cbt_otlp_resource *r, const cbt_span *spans, size_t n_spans,
                  size_t batch, double secs, int rounds, double *bytes_per_span)
{
    cbt_buf b = {0};
    double best = 0;
    for (int k = 0; k < rounds; k++) {
        uint64_t done = 0, bytes = 0;
        size_t off = 0;
        double t0 = now_s(), t1;
        do {
            for (int rep = 0; rep < 16; rep++) {
                b.len = 0;
                if (fn(r, spans + off, batch, &b) != CBT_OK) {
                    fprintf(stderr, "bench_otlp: encoding failed\n");
                    exit(1);
                }
                bytes += b.len;
                done += batch;
                off += batch;
                if (off + batch > n_spans)
                    off = 0;
            }
            t1 = now_s();
        } while (t1 - t0 < secs);
        double rate = (double)done / (t1 - t0);
        if (rate > best) {
            best = rate;
            *bytes_per_span = (double)bytes / (double)done;
        }
    }
    cbt_buf_free(&b);
    return best;
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    double secs = quick ? 0.1 : 0.5;
    int rounds = quick ? 2 : 5;
    enum { N = 8192 };
    cbt_span *spans = calloc(N, sizeof *spans);
    if (!spans)
        return 1;
    for (uint32_t i = 0; i < N; i++)
        make_span(&spans[i], i);
    cbt_otlp_resource r;
    cbt_otlp_resource_default(&r);

    static const size_t batches[] = {1, 64, 512, 2048};
    printf("OTLP encoding, one core, mp.store span (5 attributes, 40-char session_id)\n");
    printf("%-10s %6s %14s %10s %12s\n", "format", "batch", "spans/s", "ns/span", "bytes/span");
    static const encode_fn fns[] = {cbt_otlp_encode_proto, encode_grpc, cbt_otlp_encode_json};
    static const char *const names[] = {"protobuf", "grpc", "json"};
    for (int f = 0; f < 3; f++) {
        for (size_t i = 0; i < sizeof batches / sizeof batches[0]; i++) {
            double bps = 0;
            double rate = run(fns[f], &r, spans, N, batches[i], secs, rounds, &bps);
            printf("%-10s %6zu %14.0f %10.1f %12.1f\n", names[f], batches[i], rate, 1e9 / rate,
                   bps);
        }
    }
    free(spans);
    return 0;
}
