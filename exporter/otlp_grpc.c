/* exporter/otlp_grpc.c — owns OTLP/gRPC's wire rules for the OTLP exporter
 * (otlp_grpc.h): framing, grpc-timeout, reading the answer's status, the
 * RetryInfo inside grpc-status-details-bin, endpoint URLs.
 *
 * The protobuf reader below is ours, not protoc-c's: the four messages it
 * walks (google.rpc.Status, google.protobuf.Any, google.rpc.RetryInfo,
 * google.protobuf.Duration) are not among the OTLP .protos we compile, and
 * what we need of them is three fields deep. It reads tag, varint and
 * length-delimited fields within an explicit [p, end) and returns -1 for
 * anything that does not fit; nothing is allocated, nothing recursed into
 * more than the four fixed levels.
 */
#include "otlp_grpc.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <zlib.h>

static const char *const k_names[CBT_GRPC_N_CODES] = {
    "OK",        "CANCELLED",          "UNKNOWN",        "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED", "NOT_FOUND",  "ALREADY_EXISTS", "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
    "UNIMPLEMENTED", "INTERNAL",       "UNAVAILABLE",    "DATA_LOSS",
    "UNAUTHENTICATED",
};

const char *cbt_grpc_code_name(int code)
{
    return code >= 0 && code < CBT_GRPC_N_CODES ? k_names[code] : k_names[CBT_GRPC_UNKNOWN];
}

int cbt_grpc_code_from_http(long http_status)
{
    switch (http_status) {
    case 400: return CBT_GRPC_INTERNAL;
    case 401: return CBT_GRPC_UNAUTHENTICATED;
    case 403: return CBT_GRPC_PERMISSION_DENIED;
    case 404: return CBT_GRPC_UNIMPLEMENTED;
    case 429:
    case 502:
    case 503:
    case 504: return CBT_GRPC_UNAVAILABLE;
    default: return CBT_GRPC_UNKNOWN;
    }
}

int cbt_grpc_retryable(int code, int has_retry_info)
{
    switch (code) {
    case CBT_GRPC_CANCELLED:
    case CBT_GRPC_DEADLINE_EXCEEDED:
    case CBT_GRPC_ABORTED:
    case CBT_GRPC_OUT_OF_RANGE:
    case CBT_GRPC_UNAVAILABLE:
    case CBT_GRPC_DATA_LOSS: return 1;
    case CBT_GRPC_RESOURCE_EXHAUSTED: return has_retry_info != 0;
    default: return 0;
    }
}

/* ---- framing ---------------------------------------------------------------------- */

void cbt_grpc_frame_prefix(uint8_t out[CBT_GRPC_PREFIX], int compressed, uint32_t len)
{
    out[0] = compressed ? 1 : 0;
    out[1] = (uint8_t)(len >> 24);
    out[2] = (uint8_t)(len >> 16);
    out[3] = (uint8_t)(len >> 8);
    out[4] = (uint8_t)len;
}

int cbt_grpc_frame_parse(const uint8_t *p, size_t n, int *compressed, const uint8_t **msg,
                         size_t *len)
{
    if (n == 0)
        return 1;
    if (n < CBT_GRPC_PREFIX || p[0] > 1)
        return -1;
    size_t l = (size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | (size_t)p[4];
    if (l > n - CBT_GRPC_PREFIX)
        return -1;
    *compressed = p[0];
    *msg = p + CBT_GRPC_PREFIX;
    *len = l;
    return 0;
}

size_t cbt_grpc_timeout(uint32_t ms, char *out, size_t cap)
{
    int n = ms <= 99999999u ? snprintf(out, cap, "%um", ms)
                            : snprintf(out, cap, "%uS", (unsigned)((ms + 999ull) / 1000ull));
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap ? cap - 1 : 0;
}

/* ---- text --------------------------------------------------------------------------- */

static int b64val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+' || c == '-') /* '-' and '_': the URL-safe alphabet, read the same */
        return 62;
    if (c == '/' || c == '_')
        return 63;
    return -1;
}

long cbt_grpc_base64_decode(const char *s, size_t n, uint8_t *out, size_t cap)
{
    size_t pad = 0;
    while (n > 0 && s[n - 1] == '=' && pad < 2) {
        n--;
        pad++;
    }
    if (n % 4 == 1 || (pad && (n + pad) % 4 != 0))
        return -1;
    size_t need = n / 4 * 3 + (n % 4 ? n % 4 - 1 : 0);
    if (need > cap)
        return -1;
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64val((unsigned char)s[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t)(acc >> bits);
        }
    }
    return (long)o;
}

int cbt_otlp_hexval_(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

size_t cbt_grpc_pct_decode(const char *s, size_t n, char *out, size_t cap)
{
    if (cap == 0)
        return 0;
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < cap; i++) {
        char ch = s[i];
        if (ch == '%' && i + 2 < n) {
            int hi = cbt_otlp_hexval_(s[i + 1]), lo = cbt_otlp_hexval_(s[i + 2]);
            if (hi >= 0 && lo >= 0) {
                ch = (char)(hi * 16 + lo);
                i += 2;
            }
        }
        out[o++] = ch;
    }
    out[o] = '\0';
    return o;
}

/* ---- a bounded protobuf reader ------------------------------------------------------ */

typedef struct pb {
    const uint8_t *p, *end;
} pb;

static int pb_varint(pb *r, uint64_t *v)
{
    uint64_t x = 0;
    for (int i = 0; i < 10; i++) {
        if (r->p >= r->end)
            return -1;
        uint8_t b = *r->p++;
        if (i == 9 && b > 1) /* past 64 bits */
            return -1;
        x |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* One field: 1 with *field, *wt and its value (*v for a varint, [*b, *b +
 * *len) for length-delimited; fixed ones are skipped); 0 at the end; -1
 * when malformed. */
static int pb_field(pb *r, uint32_t *field, int *wt, uint64_t *v, const uint8_t **b, size_t *len)
{
    if (r->p >= r->end)
        return 0;
    uint64_t tag;
    if (pb_varint(r, &tag) || (tag >> 3) == 0 || (tag >> 3) > 0x1fffffff)
        return -1;
    *field = (uint32_t)(tag >> 3);
    *wt = (int)(tag & 7);
    size_t left;
    switch (*wt) {
    case 0:
        return pb_varint(r, v) ? -1 : 1;
    case 1:
    case 5: {
        size_t k = *wt == 1 ? 8 : 4;
        if ((size_t)(r->end - r->p) < k)
            return -1;
        r->p += k;
        return 1;
    }
    case 2:
        if (pb_varint(r, v))
            return -1;
        left = (size_t)(r->end - r->p);
        if (*v > left)
            return -1;
        *b = r->p;
        *len = (size_t)*v;
        r->p += *len;
        return 1;
    default: /* 3, 4 (groups: not in proto3), 6, 7 */
        return -1;
    }
}

/* google.protobuf.Duration -> milliseconds, rounded up, in [0, a day]. */
static int read_duration(const uint8_t *p, size_t n, uint64_t *ms)
{
    pb r = {p, p + n};
    int64_t secs = 0, nanos = 0;
    uint32_t f;
    int wt, rc;
    uint64_t v = 0;
    const uint8_t *b;
    size_t len;
    while ((rc = pb_field(&r, &f, &wt, &v, &b, &len)) == 1) {
        if ((f == 1 || f == 2) && wt != 0)
            return -1;
        if (f == 1)
            secs = (int64_t)v;
        else if (f == 2)
            nanos = (int64_t)(int32_t)(uint32_t)v; /* int32: the low 32 bits */
    }
    if (rc < 0 || nanos <= -1000000000 || nanos >= 1000000000)
        return -1;
    const int64_t day = 86400;
    if (secs < 0 || (secs == 0 && nanos <= 0))
        *ms = 0;
    else if (secs >= day)
        *ms = (uint64_t)day * 1000u;
    else
        *ms = (uint64_t)(secs * 1000 + (nanos + 999999) / 1000000);
    return 0;
}

/* google.rpc.RetryInfo: its retry_delay (absent: 0). */
static int read_retry_info(const uint8_t *p, size_t n, uint64_t *ms)
{
    pb r = {p, p + n};
    uint32_t f;
    int wt, rc;
    uint64_t v;
    const uint8_t *b = NULL;
    size_t len = 0;
    *ms = 0;
    while ((rc = pb_field(&r, &f, &wt, &v, &b, &len)) == 1) {
        if (f != 1)
            continue;
        if (wt != 2 || read_duration(b, len, ms))
            return -1;
    }
    return rc;
}

static int is_retry_info_type(const uint8_t *u, size_t n)
{
    static const char want[] = "google.rpc.RetryInfo";
    const size_t w = sizeof want - 1;
    /* the type is the URL's last path segment (google.protobuf.Any) */
    const uint8_t *slash = NULL;
    for (size_t i = 0; i < n; i++)
        if (u[i] == '/')
            slash = u + i;
    const uint8_t *name = slash ? slash + 1 : u;
    size_t nl = n - (size_t)(name - u);
    return nl == w && memcmp(name, want, w) == 0;
}

int cbt_grpc_status_retry_delay(const uint8_t *p, size_t n, uint64_t *delay_ms)
{
    pb st = {p, p + n};
    uint32_t f;
    int wt, rc, found = 0;
    uint64_t v, ms = 0;
    const uint8_t *b = NULL;
    size_t len = 0;
    while ((rc = pb_field(&st, &f, &wt, &v, &b, &len)) == 1) {
        if ((f == 1 && wt != 0) || ((f == 2 || f == 3) && wt != 2))
            return -1;
        if (f != 3)
            continue;
        /* details: a google.protobuf.Any */
        pb any = {b, b + len};
        const uint8_t *type = NULL, *val = NULL, *ab = NULL;
        size_t type_len = 0, val_len = 0, al = 0;
        uint32_t af;
        int awt, arc;
        uint64_t av;
        while ((arc = pb_field(&any, &af, &awt, &av, &ab, &al)) == 1) {
            if ((af == 1 || af == 2) && awt != 2)
                return -1;
            if (af == 1)
                type = ab, type_len = al;
            else if (af == 2)
                val = ab, val_len = al;
        }
        if (arc < 0)
            return -1;
        if (!found && type && is_retry_info_type(type, type_len)) {
            static const uint8_t empty[1];
            if (read_retry_info(val ? val : empty, val_len, &ms) < 0)
                return -1;
            found = 1;
        }
    }
    if (rc < 0)
        return -1;
    if (found)
        *delay_ms = ms;
    return found;
}

/* ---- the answer ---------------------------------------------------------------------- */

void cbt_grpc_resp_reset(cbt_grpc_resp *r)
{
    r->status = -1;
    r->status_bad = 0;
    r->content_type_grpc = 0;
    r->encoding_gzip = 0;
    r->encoding_other = 0;
    r->message[0] = '\0';
    r->details_len = 0;
    r->details_cut = 0;
}

static int name_is(const char *p, size_t n, const char *name)
{
    size_t k = strlen(name);
    return n == k && strncasecmp(p, name, k) == 0;
}

void cbt_grpc_resp_header(cbt_grpc_resp *r, const char *p, size_t n)
{
    if (n >= 5 && memcmp(p, "HTTP/", 5) == 0) { /* a new response begins */
        cbt_grpc_resp_reset(r);
        return;
    }
    const char *colon = memchr(p, ':', n);
    if (!colon || colon == p)
        return;
    size_t nl = (size_t)(colon - p);
    const char *v = colon + 1, *end = p + n;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
        end--;
    size_t vl = (size_t)(end - v);
    if (name_is(p, nl, "grpc-status")) {
        int code = 0, ok = vl > 0 && vl <= 2;
        for (size_t i = 0; ok && i < vl; i++) {
            if (v[i] < '0' || v[i] > '9')
                ok = 0;
            else
                code = code * 10 + (v[i] - '0');
        }
        r->status = ok ? code : -1;
        r->status_bad = !ok;
    } else if (name_is(p, nl, "grpc-message")) {
        cbt_grpc_pct_decode(v, vl, r->message, sizeof r->message);
    } else if (name_is(p, nl, "grpc-status-details-bin")) {
        if (vl > sizeof r->details) {
            r->details_len = 0;
            r->details_cut = 1;
        } else {
            memcpy(r->details, v, vl);
            r->details_len = vl;
            r->details_cut = 0;
        }
    } else if (name_is(p, nl, "content-type")) {
        static const char g[] = "application/grpc";
        const size_t gl = sizeof g - 1;
        r->content_type_grpc = vl >= gl && strncasecmp(v, g, gl) == 0 &&
                               (vl == gl || v[gl] == '+' || v[gl] == ';');
    } else if (name_is(p, nl, "grpc-encoding")) {
        r->encoding_gzip = vl == 4 && strncasecmp(v, "gzip", 4) == 0;
        r->encoding_other = !r->encoding_gzip && !(vl == 8 && strncasecmp(v, "identity", 8) == 0);
    }
}

int cbt_grpc_outcome(long http_status, const cbt_grpc_resp *r, int64_t *retry_ms, int *details_bad)
{
    *retry_ms = -1;
    *details_bad = 0;
    int code;
    if (http_status != 200)
        return cbt_grpc_code_from_http(http_status);
    if (r->status >= 0 && !r->status_bad)
        code = r->status < CBT_GRPC_N_CODES ? r->status : CBT_GRPC_UNKNOWN;
    else if (r->status_bad)
        code = CBT_GRPC_UNKNOWN;
    else
        /* a gRPC server's stream that ended without its status (no
         * trailers): cut off under way, by a GOAWAY or a reset the
         * connection's end raced (a collector's max connection age): a
         * transport failure, UNAVAILABLE, as gRPC's own clients take it, so
         * the batch is retried; anything else that is not gRPC: UNKNOWN */
        code = r->content_type_grpc ? CBT_GRPC_UNAVAILABLE : CBT_GRPC_UNKNOWN;
    if (code == CBT_GRPC_OK)
        return code;
    if (r->details_cut) {
        *details_bad = 1;
    } else if (r->details_len) {
        uint8_t raw[CBT_GRPC_DETAILS_MAX];
        long k = cbt_grpc_base64_decode(r->details, r->details_len, raw, sizeof raw);
        uint64_t ms = 0;
        int rc = k < 0 ? -1 : cbt_grpc_status_retry_delay(raw, (size_t)k, &ms);
        if (rc < 0)
            *details_bad = 1;
        else if (rc == 1)
            *retry_ms = (int64_t)ms;
    }
    return code;
}

int cbt_grpc_gunzip(const uint8_t *in, size_t n, uint8_t *out, size_t cap, size_t *out_len)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 15 + 16) != Z_OK)
        return -1;
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    int rc = inflate(&z, Z_FINISH);
    *out_len = (size_t)z.total_out;
    inflateEnd(&z);
    return rc == Z_STREAM_END ? 0 : -1;
}

/* ---- endpoints ------------------------------------------------------------------------ */

int cbt_grpc_endpoint_ok(const char *u)
{
    if (!*u)
        return 0;
    for (const char *p = u; *p; p++)
        if ((unsigned char)*p <= 0x20 || *p == 0x7f)
            return 0;
    const char *host;
    if (strncasecmp(u, "http://", 7) == 0)
        host = u + 7;
    else if (strncasecmp(u, "https://", 8) == 0)
        host = u + 8;
    else if (strstr(u, "://"))
        return 0; /* another scheme (unix://, dns://: not ours) */
    else
        host = u;
    return *host && *host != '/' && *host != ':' && *host != '?' && *host != '#';
}

cbt_status cbt_grpc_url(const char *endpoint, int insecure, const char *path, char *out, size_t cap)
{
    if (!cbt_grpc_endpoint_ok(endpoint))
        return CBT_ERR_INVAL;
    const char *scheme, *host;
    if (strncasecmp(endpoint, "http://", 7) == 0)
        scheme = "http", host = endpoint + 7;
    else if (strncasecmp(endpoint, "https://", 8) == 0)
        scheme = "https", host = endpoint + 8;
    else
        scheme = insecure ? "http" : "https", host = endpoint;
    size_t hl = strcspn(host, "/?#");
    int n = snprintf(out, cap, "%s://%.*s%s", scheme, (int)hl, host, path);
    return n < 0 || (size_t)n >= cap ? CBT_ERR_INVAL : CBT_OK;
}
