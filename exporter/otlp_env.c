/* exporter/otlp_env.c — owns the OTLP exporter's configuration: defaults (the
 * list itself is cbt/otlp.h's cbt_otlp_config_defaults_, shared with the
 * CBT_DISABLE stub) and the OpenTelemetry SDK environment variables.
 *
 * What is read (an empty value counts as unset, as the OTel spec says):
 *   OTEL_SDK_DISABLED                     "true" (any case) disables; anything
 *                                         but "false" is reported and ignored
 *   OTEL_SERVICE_NAME                     resource service.name (wins over
 *                                         service.name in the next one)
 *   OTEL_RESOURCE_ATTRIBUTES              k=v,k2=v2, keys and values
 *                                         percent-decoded; a bad entry is
 *                                         reported (by position and key) and
 *                                         skipped, the others are kept
 *   OTEL_EXPORTER_OTLP_TRACES_ENDPOINT    the traces URL, used as is
 *   OTEL_EXPORTER_OTLP_METRICS_ENDPOINT   the metrics URL, used as is
 *   OTEL_EXPORTER_OTLP_ENDPOINT           a base URL: "/v1/traces" appended for
 *                                         traces, "/v1/metrics" for metrics
 *                                         (OTLP/HTTP); for grpc the base
 *                                         itself, for both (the exporter
 *                                         appends the gRPC method). grpc
 *                                         also takes a scheme-less
 *                                         host:port, made http:// when
 *                                         insecure, https:// otherwise
 *   OTEL_EXPORTER_OTLP[_TRACES]_HEADERS   k=v list, percent-decoded
 *   OTEL_EXPORTER_OTLP[_TRACES]_TIMEOUT   milliseconds, a positive integer
 *   OTEL_EXPORTER_OTLP[_TRACES]_COMPRESSION  gzip | none
 *   OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL  grpc | http/protobuf | http/json
 *                                         (any case); grpc without an
 *                                         endpoint variable means
 *                                         http://localhost:4317
 *   OTEL_EXPORTER_OTLP_METRICS_PROTOCOL   checked (a bad value is an error)
 *                                         but one protocol serves both
 *                                         signals: a value other than the
 *                                         traces' is reported, not used
 *   OTEL_EXPORTER_OTLP[_TRACES]_INSECURE  true | false: the scheme of a
 *                                         scheme-less gRPC endpoint
 *   OTEL_EXPORTER_OTLP[_TRACES]_CERTIFICATE  CA bundle file (PEM) to trust
 *   OTEL_EXPORTER_OTLP[_TRACES]_CLIENT_KEY   mTLS key file (PEM)
 *   OTEL_EXPORTER_OTLP[_TRACES]_CLIENT_CERTIFICATE  mTLS certificate file
 *                                         (PEM); the three paths are checked
 *                                         for length here and for being
 *                                         readable when the exporter is made
 *   OTEL_METRIC_EXPORT_INTERVAL           milliseconds between metric exports,
 *                                         a positive integer
 *   OTEL_METRICS_EXPORTER                 none disables the metrics export;
 *                                         otlp (or unset) keeps it; anything
 *                                         else is reported and read as otlp
 *   CBT_OTLP_SELF_METRICS                 cbt's own: 1 exports the cbt.* health
 *                                         instruments even without a blend set,
 *                                         0 never; anything else is reported
 *                                         and the config's value kept
 * The _TRACES_ form wins whenever it is set. One exporter sends both signals
 * over one connection with one set of headers, timeout, compression,
 * protocol and TLS settings (which metrics requests use too): the _METRICS_
 * forms of them are reported as not read rather than silently ignored. Every problem is reported on the
 * caller's log naming the variable; header values are never printed (they
 * carry credentials), only the entry's position and key (and only the
 * position for an entry without '=', which may be all value). A malformed value
 * keeps what the config held; CBT_ERR_INVAL is returned only where no safe
 * default exists: an endpoint that is not a usable http(s) URL (including
 * one too long for the config), a protocol that is none of the three, and
 * a TLS file path too long for the config (trusting something other than
 * what was asked for is not a default).
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cbt/otlp.h"
#include "internal/abi.h"
#include "otlp_grpc.h"
#include "otlp_private.h"

#define TRACES_PATH "v1/traces"
#define METRICS_PATH "v1/metrics"

/* The fields cbt/otlp.h's inline cbt_otlp_config_default() asks for: at most
 * the caller's size (internal/abi.h). */
cbt_status cbt_otlp_config_default_into(cbt_otlp_config *out)
{
    cbt_otlp_config c;
    cbt_otlp_config_defaults_(&c);          /* the one list (cbt/otlp.h) */
    cbt_otlp_resource_default(&c.resource); /* and this process's resource */
    return cbt_abi_defaults_(out, &c, sizeof c);
}

/* ---- helpers ------------------------------------------------------------------ */

static void report(FILE *log, const char *var, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void report(FILE *log, const char *var, const char *fmt, ...)
{
    FILE *f = log ? log : stderr;
    va_list ap;
    va_start(ap, fmt);
    fprintf(f, "cbt otlp: %s: ", var);
    vfprintf(f, fmt, ap);
    fputc('\n', f);
    va_end(ap);
    fflush(f);
}

/* The variable's value, or NULL when unset or empty. */
static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* The _TRACES_ variable when set, else the generic one; *which names it. */
static const char *env_pair(const char *traces, const char *generic, const char **which)
{
    const char *v = env(traces);
    if (v) {
        *which = traces;
        return v;
    }
    *which = generic;
    return env(generic);
}

static int is_ows(char ch) { return ch == ' ' || ch == '\t'; }

/* [*b, *e) with surrounding spaces and tabs removed. */
static void trim(const char **b, const char **e)
{
    while (*b < *e && is_ows(**b))
        (*b)++;
    while (*e > *b && is_ows((*e)[-1]))
        (*e)--;
}

enum { DEC_OK = 0, DEC_BAD_ESCAPE, DEC_TOO_LONG, DEC_NUL };

/* Percent-decode [b, e) into out (NUL-terminated, at most cap - 1 bytes). */
static int pct_decode(const char *b, const char *e, char *out, size_t cap)
{
    size_t n = 0;
    while (b < e) {
        char ch = *b++;
        if (ch == '%') {
            if (e - b < 2)
                return DEC_BAD_ESCAPE;
            int hi = cbt_otlp_hexval_(b[0]), lo = cbt_otlp_hexval_(b[1]);
            if (hi < 0 || lo < 0)
                return DEC_BAD_ESCAPE;
            ch = (char)(hi * 16 + lo);
            if (ch == '\0')
                return DEC_NUL;
            b += 2;
        }
        if (n + 1 >= cap)
            return DEC_TOO_LONG;
        out[n++] = ch;
    }
    out[n] = '\0';
    return DEC_OK;
}

static const char *dec_why(int rc)
{
    switch (rc) {
    case DEC_BAD_ESCAPE: return "a malformed %-escape";
    case DEC_TOO_LONG: return "longer than 255 bytes";
    case DEC_NUL: return "an encoded NUL byte";
    default: return "malformed";
    }
}

/* Copy at most 64 bytes of a key for a message, non-printables as '?'. */
static void key_for_log(const char *b, const char *e, char *out, size_t cap)
{
    size_t n = 0;
    for (; b < e && n + 1 < cap && n < 64; b++)
        out[n++] = (*b >= 0x20 && *b < 0x7f) ? *b : '?';
    out[n] = '\0';
}

/* An HTTP header field name: RFC 9110 token characters. */
static int is_token(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (isalnum(ch))
            continue;
        if (!strchr("!#$%&'*+-.^_`|~", ch))
            return 0;
    }
    return 1;
}

/* A header value: no control characters but tab (no CR/LF injection). */
static int is_field_value(const char *s)
{
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
            return 0;
    }
    return 1;
}

/* ---- k=v lists (resource attributes, headers) ---------------------------------- */

typedef int (*kv_fn)(void *ctx, FILE *log, const char *var, unsigned pos, const char *key,
                     const char *value);

/* Split "k=v,k2=v2" and call fn for each well-formed entry (decoded). Bad
 * entries are reported by position (1-based) and key, never by value. */
static void parse_kv_list(const char *v, FILE *log, const char *var, kv_fn fn, void *ctx)
{
    unsigned pos = 0;
    const char *p = v;
    while (*p) {
        const char *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        pos++;
        const char *kb = p, *ke = end, *eq = memchr(p, '=', (size_t)(end - p));
        char shown[72];
        if (!eq) {
            trim(&kb, &ke);
            if (kb != ke) /* not shown: it may be a value typed with ':' for '=' */
                report(log, var, "entry %u has no '=' (expected key=value): skipped", pos);
        } else {
            const char *vb = eq + 1, *ve = end;
            ke = eq;
            trim(&kb, &ke);
            trim(&vb, &ve);
            key_for_log(kb, ke, shown, sizeof shown);
            char key[CBT_OTLP_STR_MAX], val[CBT_OTLP_STR_MAX];
            int rk = pct_decode(kb, ke, key, sizeof key);
            int rv = rk == DEC_OK ? pct_decode(vb, ve, val, sizeof val) : DEC_OK;
            if (kb == ke)
                report(log, var, "entry %u has an empty key: skipped", pos);
            else if (rk != DEC_OK)
                report(log, var, "entry %u: the key has %s: skipped", pos, dec_why(rk));
            else if (rv != DEC_OK)
                report(log, var, "entry %u (key \"%s\"): the value has %s: skipped", pos,
                       shown, dec_why(rv));
            else
                fn(ctx, log, var, pos, key, val);
        }
        p = *end ? end + 1 : end;
    }
}

static int put_resource_attr(void *ctx, FILE *log, const char *var, unsigned pos,
                             const char *key, const char *value)
{
    cbt_otlp_resource *r = ctx;
    /* keys the resource holds as fields replace them, so they never appear twice */
    if (strcmp(key, "service.name") == 0) {
        snprintf(r->service_name, sizeof r->service_name, "%s", value);
        return 0;
    }
    if (strcmp(key, "service.instance.id") == 0) {
        snprintf(r->service_instance_id, sizeof r->service_instance_id, "%s", value);
        return 0;
    }
    if (strcmp(key, "host.name") == 0) {
        snprintf(r->host_name, sizeof r->host_name, "%s", value);
        return 0;
    }
    for (uint32_t i = 0; i < r->n_extra; i++) {
        if (strcmp(r->extra[i].key, key) == 0) { /* a later entry wins */
            snprintf(r->extra[i].value, sizeof r->extra[i].value, "%s", value);
            return 0;
        }
    }
    if (r->n_extra >= CBT_OTLP_MAX_ATTRS) {
        report(log, var, "entry %u (key \"%s\"): more than %d attributes: skipped", pos, key,
               CBT_OTLP_MAX_ATTRS);
        return 1;
    }
    cbt_otlp_kv *kv = &r->extra[r->n_extra++];
    snprintf(kv->key, sizeof kv->key, "%s", key);
    snprintf(kv->value, sizeof kv->value, "%s", value);
    return 0;
}

typedef struct header_list {
    cbt_otlp_kv h[CBT_OTLP_MAX_HEADERS];
    uint32_t n;
} header_list;

static int put_header(void *ctx, FILE *log, const char *var, unsigned pos, const char *key,
                      const char *value)
{
    header_list *l = ctx;
    char shown[72];
    key_for_log(key, key + strlen(key), shown, sizeof shown);
    if (!is_token(key)) {
        report(log, var, "entry %u (key \"%s\"): not a valid header name: skipped", pos, shown);
        return 1;
    }
    if (!is_field_value(value)) {
        report(log, var, "entry %u (key \"%s\"): the value holds control characters: skipped",
               pos, shown);
        return 1;
    }
    for (uint32_t i = 0; i < l->n; i++) {
        if (strcasecmp(l->h[i].key, key) == 0) {
            snprintf(l->h[i].value, sizeof l->h[i].value, "%s", value);
            return 0;
        }
    }
    if (l->n >= CBT_OTLP_MAX_HEADERS) {
        report(log, var, "entry %u (key \"%s\"): more than %d headers: skipped", pos, shown,
               CBT_OTLP_MAX_HEADERS);
        return 1;
    }
    snprintf(l->h[l->n].key, sizeof l->h[l->n].key, "%s", key);
    snprintf(l->h[l->n].value, sizeof l->h[l->n].value, "%s", value);
    l->n++;
    return 0;
}

/* ---- single values -------------------------------------------------------------- */

int cbt_otlp_url_ok(const char *u)
{
    size_t skip;
    if (strncasecmp(u, "http://", 7) == 0)
        skip = 7;
    else if (strncasecmp(u, "https://", 8) == 0)
        skip = 8;
    else
        return 0;
    for (const char *p = u; *p; p++)
        if ((unsigned char)*p <= 0x20 || *p == 0x7f)
            return 0;
    const char *host = u + skip;
    return *host && *host != '/' && *host != ':' && *host != '?' && *host != '#';
}

/* One signal's URL into dst: `specific_var` as is, else the
 * OTEL_EXPORTER_OTLP_ENDPOINT base with "/" `path` appended (OTLP/HTTP) or
 * as is (grpc: the exporter appends the method, and a scheme-less host:port
 * gets its scheme from c->insecure). A bad base is reported once for both
 * signals (*base_reported). */
static cbt_status set_signal_endpoint(const cbt_otlp_config *c, FILE *log,
                                      const char *specific_var, const char *path, char *dst,
                                      size_t cap, int *base_reported)
{
    const char *specific = env(specific_var);
    const char *base = env("OTEL_EXPORTER_OTLP_ENDPOINT");
    const char *var = specific ? specific_var : "OTEL_EXPORTER_OTLP_ENDPOINT";
    const char *v = specific ? specific : base;
    const int grpc = c->protocol == CBT_OTLP_GRPC;
    if (!v)
        return CBT_OK;
    int quiet = !specific && *base_reported;
    if (grpc ? !cbt_grpc_endpoint_ok(v) : !cbt_otlp_url_ok(v)) {
        if (!quiet && grpc)
            report(log, var, "not an http:// or https:// URL or a host:port; OTLP/gRPC wants "
                             "the collector's base, e.g. http://collector:4317");
        else if (!quiet)
            report(log, var, "not an http:// or https:// URL with a host; cbt exports OTLP/HTTP "
                             "here, e.g. http://collector:4318%s%s (or set "
                             "OTEL_EXPORTER_OTLP_PROTOCOL=grpc)", specific ? "/" : "",
                   specific ? path : "");
        if (!specific)
            *base_reported = 1;
        return CBT_ERR_INVAL;
    }
    char url[1024];
    int n;
    if (grpc && !strstr(v, "://")) {
        n = snprintf(url, sizeof url, "%s://%s", c->insecure ? "http" : "https", v);
    } else if (specific || grpc) {
        n = snprintf(url, sizeof url, "%s", v);
    } else {
        size_t len = strlen(v);
        n = snprintf(url, sizeof url, "%s%s%s", v, len && v[len - 1] == '/' ? "" : "/", path);
    }
    if (n < 0 || (size_t)n >= sizeof url || (size_t)n >= cap) {
        int appended = !specific && !grpc;
        report(log, var, "longer than %zu bytes%s%s%s", cap - 1, appended ? " with /" : "",
               appended ? path : "", appended ? " appended" : "");
        return CBT_ERR_INVAL;
    }
    memcpy(dst, url, (size_t)n + 1);
    return CBT_OK;
}

/* A bad traces URL (or base) is an error: there is no safe default. A bad
 * OTEL_EXPORTER_OTLP_METRICS_ENDPOINT only turns the metrics export off
 * (*metrics_off), so it never stops the spans. */
static cbt_status set_endpoints(cbt_otlp_config *c, FILE *log, int *metrics_off)
{
    int base_reported = 0;
    cbt_status st = set_signal_endpoint(c, log, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", TRACES_PATH,
                                        c->endpoint, sizeof c->endpoint, &base_reported);
    if (set_signal_endpoint(c, log, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", METRICS_PATH,
                            c->metrics_endpoint, sizeof c->metrics_endpoint,
                            &base_reported) != CBT_OK) {
        if (env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")) {
            report(log, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                   "unusable: the metrics export is off (spans are not affected)");
            *metrics_off = 1;
        } else {
            st = CBT_ERR_INVAL; /* the base: the traces URL is bad too */
        }
    }
    return st;
}

void cbt_otlp_protocol_endpoints_(cbt_otlp_config *c)
{
    cbt_otlp_config d;
    if (c->protocol != CBT_OTLP_GRPC)
        return;
    cbt_otlp_config_defaults_(&d); /* the OTLP/HTTP URLs it holds */
    if (strcmp(c->endpoint, d.endpoint) == 0)
        memcpy(c->endpoint, CBT_OTLP_GRPC_DEFAULT_ENDPOINT, sizeof CBT_OTLP_GRPC_DEFAULT_ENDPOINT);
    if (strcmp(c->metrics_endpoint, d.metrics_endpoint) == 0)
        memcpy(c->metrics_endpoint, c->endpoint, sizeof c->metrics_endpoint);
}

/* A positive integer number of milliseconds (surrounding blanks allowed,
 * at most UINT32_MAX): 1 and *out, or 0. */
static int parse_ms(const char *v, uint32_t *out)
{
    const char *b = v, *e = v + strlen(v);
    trim(&b, &e);
    unsigned long long ms = 0;
    int ok = b < e;
    for (const char *p = b; ok && p < e; p++) {
        if (*p < '0' || *p > '9')
            ok = 0;
        else if ((ms = ms * 10 + (unsigned)(*p - '0')) > UINT32_MAX)
            ok = 0;
    }
    if (!ok || ms == 0)
        return 0;
    *out = (uint32_t)ms;
    return 1;
}

static void set_timeout(cbt_otlp_config *c, FILE *log)
{
    const char *var;
    const char *v = env_pair("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT", &var);
    if (v && !parse_ms(v, &c->timeout_ms))
        report(log, var, "not a positive integer number of milliseconds (at most %u): "
                         "keeping %u ms", UINT32_MAX, c->timeout_ms);
}

static void set_metrics(cbt_otlp_config *c, FILE *log)
{
    const char *v = env("OTEL_METRIC_EXPORT_INTERVAL");
    if (v && !parse_ms(v, &c->metrics_interval_ms))
        report(log, "OTEL_METRIC_EXPORT_INTERVAL", "not a positive integer number of "
               "milliseconds (at most %u): keeping %u ms", UINT32_MAX, c->metrics_interval_ms);

    /* a list, as the SDKs read it: "none" alone disables, "otlp" enables */
    v = env("OTEL_METRICS_EXPORTER");
    if (v) {
        int otlp = 0, none = 0;
        const char *p = v;
        while (*p) {
            const char *end = strchr(p, ',');
            if (!end)
                end = p + strlen(p);
            const char *b = p, *e = end;
            trim(&b, &e);
            size_t n = (size_t)(e - b);
            if (n == 4 && strncasecmp(b, "otlp", 4) == 0) {
                otlp = 1;
            } else if (n == 4 && strncasecmp(b, "none", 4) == 0) {
                none = 1;
            } else if (n) {
                char shown[72];
                key_for_log(b, e, shown, sizeof shown);
                report(log, "OTEL_METRICS_EXPORTER", "\"%s\" is not supported (cbt exports "
                       "metrics over OTLP only): read as otlp", shown);
                otlp = 1;
            }
            p = *end ? end + 1 : end;
        }
        if (otlp || none)
            c->metrics_disabled = none && !otlp;
    }

    /* one set of request settings serves both signals (see the top) */
    static const char *const unread[][2] = {
        {"OTEL_EXPORTER_OTLP_METRICS_HEADERS", "HEADERS"},
        {"OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "TIMEOUT"},
        {"OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", "COMPRESSION"},
        {"OTEL_EXPORTER_OTLP_METRICS_INSECURE", "INSECURE"},
        {"OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE", "CERTIFICATE"},
        {"OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY", "CLIENT_KEY"},
        {"OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE", "CLIENT_CERTIFICATE"},
    };
    for (size_t i = 0; i < sizeof unread / sizeof unread[0]; i++)
        if (env(unread[i][0]))
            report(log, unread[i][0], "not read: metrics requests use OTEL_EXPORTER_OTLP_%s "
                   "(or OTEL_EXPORTER_OTLP_TRACES_%s when set), as traces do", unread[i][1],
                   unread[i][1]);
}

static void set_self_metrics(cbt_otlp_config *c, FILE *log)
{
    const char *v = env("CBT_OTLP_SELF_METRICS");
    if (!v)
        return;
    if (strcmp(v, "1") == 0)
        c->self_metrics = CBT_OTLP_SELF_METRICS_ON;
    else if (strcmp(v, "0") == 0)
        c->self_metrics = CBT_OTLP_SELF_METRICS_OFF;
    else
        report(log, "CBT_OTLP_SELF_METRICS", "\"%.32s\" is neither 1 nor 0: keeping %s", v,
               c->self_metrics == CBT_OTLP_SELF_METRICS_ON    ? "1 (on)"
               : c->self_metrics == CBT_OTLP_SELF_METRICS_OFF ? "0 (off)"
                                                              : "the default (with the "
                                                                "blend metrics)");
}

static void set_compression(cbt_otlp_config *c, FILE *log)
{
    const char *var;
    const char *v = env_pair("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
                             "OTEL_EXPORTER_OTLP_COMPRESSION", &var);
    if (!v)
        return;
    if (strcasecmp(v, "gzip") == 0)
        c->gzip = 1;
    else if (strcasecmp(v, "none") == 0)
        c->gzip = 0;
    else
        report(log, var, "\"%.32s\" is neither gzip nor none: keeping %s", v,
               c->gzip ? "gzip" : "none");
}

/* A protocol's name: 1 with *out, or 0. The spec's enum values are read in
 * any case. */
static int protocol_of(const char *v, cbt_otlp_protocol *out)
{
    if (strcasecmp(v, "http/protobuf") == 0)
        *out = CBT_OTLP_HTTP_PROTOBUF;
    else if (strcasecmp(v, "http/json") == 0)
        *out = CBT_OTLP_HTTP_JSON;
    else if (strcasecmp(v, "grpc") == 0)
        *out = CBT_OTLP_GRPC;
    else
        return 0;
    return 1;
}

static const char *protocol_name(cbt_otlp_protocol p)
{
    return p == CBT_OTLP_GRPC ? "grpc" : p == CBT_OTLP_HTTP_JSON ? "http/json" : "http/protobuf";
}

static cbt_status set_protocol(cbt_otlp_config *c, FILE *log)
{
    const char *var;
    const char *v = env_pair("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL",
                             &var);
    if (v && !protocol_of(v, &c->protocol)) {
        report(log, var, "\"%.32s\" is not supported: use grpc, http/protobuf or http/json", v);
        return CBT_ERR_INVAL;
    }
    return CBT_OK;
}

/* Read after set_protocol: one protocol serves both signals. */
static cbt_status check_metrics_protocol(const cbt_otlp_config *c, FILE *log)
{
    static const char var[] = "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL";
    const char *v = env(var);
    cbt_otlp_protocol p;
    if (!v)
        return CBT_OK;
    if (!protocol_of(v, &p)) {
        report(log, var, "\"%.32s\" is not supported: use grpc, http/protobuf or http/json", v);
        return CBT_ERR_INVAL;
    }
    if (p != c->protocol)
        report(log, var, "not read: metrics go as %s, as traces do (one connection; set "
               "OTEL_EXPORTER_OTLP_PROTOCOL for both)", protocol_name(c->protocol));
    return CBT_OK;
}

/* OTEL_EXPORTER_OTLP[_TRACES]_INSECURE: true | false (any case). */
static void set_insecure(cbt_otlp_config *c, FILE *log)
{
    const char *var;
    const char *v = env_pair("OTEL_EXPORTER_OTLP_TRACES_INSECURE", "OTEL_EXPORTER_OTLP_INSECURE",
                             &var);
    if (!v)
        return;
    if (strcasecmp(v, "true") == 0)
        c->insecure = 1;
    else if (strcasecmp(v, "false") == 0)
        c->insecure = 0;
    else
        report(log, var, "\"%.32s\" is neither true nor false: keeping %s", v,
               c->insecure ? "true" : "false");
}

/* The three TLS file paths, the _TRACES_ form winning. A path too long for
 * the config is an error (CBT_ERR_INVAL) and keeps the field as it was;
 * whether the file can be read is create's check. */
static cbt_status set_tls_paths(cbt_otlp_config *c, FILE *log)
{
    struct {
        const char *traces, *generic;
        char *dst;
    } f[] = {
        {"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE",
         c->certificate},
        {"OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "OTEL_EXPORTER_OTLP_CLIENT_KEY", c->client_key},
        {"OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
         c->client_certificate},
    };
    cbt_status st = CBT_OK;
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        const char *var;
        const char *v = env_pair(f[i].traces, f[i].generic, &var);
        if (!v)
            continue;
        if (strlen(v) >= CBT_OTLP_PATH_MAX) {
            report(log, var, "a path longer than %d bytes", CBT_OTLP_PATH_MAX - 1);
            st = CBT_ERR_INVAL;
            continue;
        }
        memcpy(f[i].dst, v, strlen(v) + 1);
    }
    return st;
}

static void set_headers(cbt_otlp_config *c, FILE *log)
{
    const char *var;
    const char *v = env_pair("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS",
                             &var);
    if (!v)
        return;
    header_list l;
    memset(&l, 0, sizeof l);
    parse_kv_list(v, log, var, put_header, &l);
    memcpy(c->headers, l.h, sizeof l.h);
    c->n_headers = l.n;
}

void cbt_otlp_resource_from_env_(cbt_otlp_resource *r, FILE *log)
{
    const char *v = env("OTEL_RESOURCE_ATTRIBUTES");
    if (v)
        parse_kv_list(v, log, "OTEL_RESOURCE_ATTRIBUTES", put_resource_attr, r);
    const char *name = env("OTEL_SERVICE_NAME");
    if (name) {
        if (strlen(name) >= sizeof r->service_name)
            report(log, "OTEL_SERVICE_NAME", "longer than %zu bytes: keeping \"%s\"",
                   sizeof r->service_name - 1, r->service_name);
        else
            snprintf(r->service_name, sizeof r->service_name, "%s", name);
    }
}

static void set_resource(cbt_otlp_config *c, FILE *log) { cbt_otlp_resource_from_env_(&c->resource, log); }

static void set_disabled(cbt_otlp_config *c, FILE *log)
{
    const char *v = env("OTEL_SDK_DISABLED");
    if (!v)
        return;
    if (strcasecmp(v, "true") == 0)
        c->disabled = 1;
    else if (strcasecmp(v, "false") == 0)
        c->disabled = 0;
    else
        report(log, "OTEL_SDK_DISABLED", "\"%.32s\" is neither true nor false: keeping %s", v,
               c->disabled ? "true" : "false");
}

static cbt_status env_apply(cbt_otlp_config *c, FILE *log);

cbt_status cbt_otlp_config_in_(cbt_otlp_config *full, const cbt_otlp_config *c)
{
    cbt_otlp_config_default(full);
    cbt_status st = cbt_abi_in_(full, sizeof *full, c, CBT_OTLP_CONFIG_VERSION);
    if (st == CBT_ERR_VERSION)
        fprintf(stderr, "cbt otlp: config: version %u, size %u: this libcbt knows version <= %u, "
                "size <= %zu (built against a newer cbt? start from cbt_otlp_config_default())\n",
                c->version, c->size, CBT_OTLP_CONFIG_VERSION, sizeof *full);
    return st;
}

/* Works on a complete copy of the caller's config and writes back only the
 * bytes the caller's struct has. */
cbt_status cbt_otlp_config_from_env(cbt_otlp_config *caller, FILE *log)
{
    cbt_otlp_config full, *c = &full;
    cbt_status st = cbt_otlp_config_in_(c, caller);
    if (st)
        return st;
    st = env_apply(c, log);
    cbt_abi_out_(caller, c, sizeof *c, CBT_OTLP_CONFIG_VERSION);
    return st;
}

static cbt_status env_apply(cbt_otlp_config *c, FILE *log)
{
    cbt_status st = CBT_OK;
    set_disabled(c, log);
    set_resource(c, log);
    /* the protocol and insecure first: they decide how an endpoint reads */
    if (set_protocol(c, log) != CBT_OK)
        st = CBT_ERR_INVAL;
    if (check_metrics_protocol(c, log) != CBT_OK)
        st = CBT_ERR_INVAL;
    set_insecure(c, log);
    int metrics_off = 0;
    if (set_endpoints(c, log, &metrics_off) != CBT_OK)
        st = CBT_ERR_INVAL;
    cbt_otlp_protocol_endpoints_(c); /* grpc: its own default port */
    set_headers(c, log);
    set_timeout(c, log);
    set_compression(c, log);
    if (set_tls_paths(c, log) != CBT_OK)
        st = CBT_ERR_INVAL;
    set_metrics(c, log);
    set_self_metrics(c, log);
    if (metrics_off)
        c->metrics_disabled = 1; /* whatever OTEL_METRICS_EXPORTER said */
    return st;
}
