/* cli/report_read.c — owns reading spans for `cbt report` (report_read.h):
 * format detection, cbt's span-file lines, OTLP JSON lines, the merge. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report_read.h"

const char *rpt_format_name(rpt_format f)
{
    switch (f) {
    case RPT_FMT_EMPTY: return "empty";
    case RPT_FMT_SPANS: return "cbt span file";
    case RPT_FMT_OTLP: return "OTLP JSON";
    case RPT_FMT_LMCT: return "LMCT recording";
    default: return "unknown";
    }
}

rpt_format rpt_detect(FILE *f)
{
    enum { PEEK = 64 * 1024 };
    char *b = malloc(PEEK + 1);
    if (!b)
        return RPT_FMT_UNKNOWN;
    size_t n = fread(b, 1, PEEK, f);
    rewind(f);
    b[n] = 0;
    rpt_format fmt = RPT_FMT_UNKNOWN;
    size_t bom = n >= 3 && !memcmp(b, "\xEF\xBB\xBF", 3) ? 3 : 0;
    if (!bom && n >= 12 && b[0] != '{') {
        /* an LMCT frame: a 4-byte big-endian length, then a msgpack map whose
         * first key is "type" and which holds the bin "LMCT" */
        const unsigned char *u = (const unsigned char *)b;
        uint32_t len = (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | u[3];
        size_t look = n < 128 ? n : 128;
        bool magic = false;
        for (size_t k = 4; k + 4 <= look; k++)
            if (!memcmp(b + k, "LMCT", 4))
                magic = true;
        if (len > 8 && magic && ((u[4] & 0xF0) == 0x80 || u[4] == 0xDE || u[4] == 0xDF))
            fmt = RPT_FMT_LMCT;
    }
    /* JSON: the first line within DETECT_LINES that starts an object decides;
     * lines before it are bad lines the reader counts when it reads them */
    enum { DETECT_LINES = 64 };
    size_t s = bom;
    bool any = false;
    for (unsigned ln = 0; fmt == RPT_FMT_UNKNOWN && ln < DETECT_LINES && s < n; ln++) {
        size_t i = s;
        while (i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n'))
            i++;
        if (i == n)
            break;
        any = true;
        char *nl = memchr(b + i, '\n', n - i);
        size_t end = nl ? (size_t)(nl - b) : n;
        if (b[i] == '{') {
            char save = b[end];
            b[end] = 0;
            fmt = strstr(b + i, "\"resourceSpans\"") ? RPT_FMT_OTLP : RPT_FMT_SPANS;
            b[end] = save;
        }
        s = end + 1;
    }
    if (fmt == RPT_FMT_UNKNOWN && !any && n < PEEK)
        fmt = RPT_FMT_EMPTY;
    free(b);
    if (bom && (fmt == RPT_FMT_SPANS || fmt == RPT_FMT_OTLP))
        fseek(f, 3, SEEK_SET); /* the reader starts past the BOM (still line 1) */
    return fmt;
}

int rpt_hex_id(const char *s, size_t len, uint8_t *out, size_t n)
{
    if (len != 2 * n)
        return -1;
    for (size_t k = 0; k < n; k++) {
        int v = 0;
        for (int h = 0; h < 2; h++) {
            char c = s[2 * k + (size_t)h];
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (d < 0)
                return -1;
            v = v << 4 | d;
        }
        out[k] = (uint8_t)v;
    }
    return 0;
}

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (p[k])
            return false;
    return true;
}

/* copy a string cut to cap-1 bytes at a UTF-8 character boundary */
static void copy_cut(char *dst, size_t cap, const char *s, size_t len)
{
    if (len >= cap) {
        len = cap - 1;
        while (len > 0 && ((unsigned char)s[len] & 0xC0) == 0x80)
            len--;
    }
    memcpy(dst, s, len);
    dst[len] = 0;
}

void rpt_span_reset(rpt_span *o, unsigned file, uint64_t line)
{
    memset(o, 0, sizeof *o);
    o->queue_ns = o->enqueue_ns = o->gpu_queue_ns = o->gpu_busy_ns = o->gpu_tail_ns = RPT_ABSENT;
    o->stream = RPT_ABSENT;
    o->hit_rate = NAN;
    o->file = (uint16_t)file;
    o->line = line;
}

/* ---- attributes, whatever the format --------------------------------------- */

typedef struct attr_val {
    enum { AV_NONE, AV_INT, AV_DOUBLE, AV_STR, AV_BOOL } type;
    int64_t i;
    double d;
    bool b;
    char s[RPT_SESSION_MAX];
    size_t slen;
} attr_val;

static void apply_attr(rpt_span *o, const char *key, const attr_val *v)
{
    if (!strncmp(key, "cbt.", 4)) {
        const char *k = key + 4;
        int64_t *dst = !strcmp(k, "queue_ns") ? &o->queue_ns
                       : !strcmp(k, "enqueue_ns") ? &o->enqueue_ns
                       : !strcmp(k, "gpu_queue_ns") ? &o->gpu_queue_ns
                       : !strcmp(k, "gpu_busy_ns") ? &o->gpu_busy_ns
                       : !strcmp(k, "gpu_tail_ns") ? &o->gpu_tail_ns : NULL;
        if (dst) {
            if (v->type == AV_INT && v->i >= 0)
                *dst = v->i;
            return;
        }
        if (!strcmp(k, "stream") && v->type == AV_INT && v->i >= 0)
            o->stream = v->i;
        else if (!strcmp(k, "device") && v->type == AV_STR)
            copy_cut(o->device, sizeof o->device, v->s, v->slen);
        else if (!strcmp(k, "evicted") && v->type == AV_STR)
            copy_cut(o->evicted, sizeof o->evicted, v->s, v->slen);
        else if (!strcmp(k, "incomplete") && v->type == AV_BOOL)
            o->incomplete = o->incomplete || v->b;
        else if (!strcmp(k, "late") && v->type == AV_BOOL)
            o->late = v->b;
        return;
    }
    if (!strcmp(key, "hit_rate")) {
        if (v->type == AV_DOUBLE && isfinite(v->d))
            o->hit_rate = v->d;
        else if (v->type == AV_INT)
            o->hit_rate = (double)v->i;
    } else if (!strcmp(key, "session_id") && v->type == AV_STR) {
        copy_cut(o->session, sizeof o->session, v->s, v->slen);
    } else if (!strcmp(key, "request_id") && v->type == AV_STR && !o->session[0]) {
        copy_cut(o->session, sizeof o->session, v->s, v->slen);
    }
}

void rpt_span_set_i64(rpt_span *o, const char *key, int64_t v)
{
    attr_val a = {.type = AV_INT, .i = v};
    apply_attr(o, key, &a);
}

void rpt_span_set_f64(rpt_span *o, const char *key, double v)
{
    attr_val a = {.type = AV_DOUBLE, .d = v};
    apply_attr(o, key, &a);
}

void rpt_span_set_bool(rpt_span *o, const char *key, bool v)
{
    attr_val a = {.type = AV_BOOL, .b = v};
    apply_attr(o, key, &a);
}

void rpt_span_set_str(rpt_span *o, const char *key, const char *str, size_t len)
{
    attr_val a = {.type = AV_STR};
    copy_cut(a.s, sizeof a.s, str, len);
    a.slen = strlen(a.s);
    apply_attr(o, key, &a);
}

static void val_from_tok(rpt_lex *lx, rpt_tok t, attr_val *v)
{
    v->type = AV_NONE;
    switch (t) {
    case RPT_TK_INT:
        if (!lx->big) {
            v->type = AV_INT;
            v->i = lx->i;
        } else {
            v->type = AV_DOUBLE;
            v->d = lx->d;
        }
        break;
    case RPT_TK_FLOAT: v->type = AV_DOUBLE; v->d = lx->d; break;
    case RPT_TK_TRUE: v->type = AV_BOOL; v->b = true; break;
    case RPT_TK_FALSE: v->type = AV_BOOL; v->b = false; break;
    case RPT_TK_STR:
        v->type = AV_STR;
        copy_cut(v->s, sizeof v->s, lx->str, lx->str_len);
        v->slen = strlen(v->s);
        break;
    default: break;
    }
}

/* ---- cbt's span file --------------------------------------------------------- */

static int want(rpt_lex *lx, rpt_tok got, rpt_tok need, const char *field, const char *what)
{
    if (got == need)
        return 0;
    if (got != RPT_TK_ERR)
        snprintf(lx->err, sizeof lx->err, "%s: expected %s, found %s", field, what,
                 rpt_tok_phrase(got));
    return -1;
}

static int read_u64_field(rpt_lex *lx, const char *field, uint64_t *out)
{
    rpt_tok t = rpt_lex_next(lx);
    if (want(lx, t, RPT_TK_INT, field, "an integer"))
        return -1;
    if (lx->big || lx->i < 0) {
        snprintf(lx->err, sizeof lx->err, "%s: not an integer in [0, 2^63)", field);
        return -1;
    }
    *out = (uint64_t)lx->i;
    return 0;
}

static int read_id_field(rpt_lex *lx, const char *field, uint8_t *out, size_t n, bool empty_ok,
                         bool *present)
{
    rpt_tok t = rpt_lex_next(lx);
    if (want(lx, t, RPT_TK_STR, field, "a hex string"))
        return -1;
    if (lx->str_len == 0 && empty_ok) {
        *present = false;
        return 0;
    }
    if (rpt_hex_id(lx->str, lx->str_len, out, n)) {
        snprintf(lx->err, sizeof lx->err, "%s: not %zu hex digits", field, 2 * n);
        return -1;
    }
    *present = true;
    return 0;
}

static int cbt_attrs(rpt_lex *lx, rpt_span *o)
{
    bool first = true;
    int r;
    char key[64];
    while ((r = rpt_lex_obj_next(lx, &first)) == 1) {
        bool keep = lx->str_len < sizeof key;
        if (keep)
            memcpy(key, lx->str, lx->str_len + 1);
        rpt_tok t = rpt_lex_next(lx);
        if (t == RPT_TK_LBRACE || t == RPT_TK_LBRACK || t == RPT_TK_ERR) {
            if (rpt_lex_skip_value(lx, t))
                return -1;
            continue;
        }
        if (t != RPT_TK_STR && t != RPT_TK_INT && t != RPT_TK_FLOAT && t != RPT_TK_TRUE &&
            t != RPT_TK_FALSE && t != RPT_TK_NULL) {
            snprintf(lx->err, sizeof lx->err, "attributes: expected a value, found %s",
                     rpt_tok_phrase(t));
            return -1;
        }
        if (keep) {
            attr_val v;
            val_from_tok(lx, t, &v);
            apply_attr(o, key, &v);
        }
    }
    return r;
}

/* One span-file object, its '{' read. */
static int parse_cbt_span(rpt_lex *lx, rpt_span *o)
{
    bool first = true, has_trace = false, has_span = false, has_name = false, has_start = false,
         has_end = false, p;
    int r;
    while ((r = rpt_lex_obj_next(lx, &first)) == 1) {
        const char *k = lx->str;
        rpt_tok t;
        if (!strcmp(k, "trace_id")) {
            if (read_id_field(lx, "trace_id", o->trace_id, 16, false, &has_trace))
                return -1;
        } else if (!strcmp(k, "span_id")) {
            if (read_id_field(lx, "span_id", o->span_id, 8, false, &has_span))
                return -1;
        } else if (!strcmp(k, "parent_span_id")) {
            if (read_id_field(lx, "parent_span_id", o->parent_id, 8, true, &p))
                return -1;
            o->has_parent = p && !all_zero(o->parent_id, 8);
        } else if (!strcmp(k, "name")) {
            if (want(lx, rpt_lex_next(lx), RPT_TK_STR, "name", "a string"))
                return -1;
            copy_cut(o->name, sizeof o->name, lx->str, lx->str_len);
            has_name = true;
        } else if (!strcmp(k, "start_ns")) {
            if (read_u64_field(lx, "start_ns", &o->start_ns))
                return -1;
            has_start = true;
        } else if (!strcmp(k, "end_ns")) {
            if (read_u64_field(lx, "end_ns", &o->end_ns))
                return -1;
            has_end = true;
        } else if (!strcmp(k, "incomplete")) {
            t = rpt_lex_next(lx);
            if (t != RPT_TK_TRUE && t != RPT_TK_FALSE)
                return want(lx, t, RPT_TK_TRUE, "incomplete", "true or false");
            o->incomplete = o->incomplete || t == RPT_TK_TRUE;
        } else if (!strcmp(k, "status")) {
            if (want(lx, t = rpt_lex_next(lx), RPT_TK_STR, "status", "a string"))
                return -1;
            o->error = !strcmp(lx->str, "error");
        } else if (!strcmp(k, "attributes")) {
            if (want(lx, rpt_lex_next(lx), RPT_TK_LBRACE, "attributes", "an object") ||
                cbt_attrs(lx, o) < 0)
                return -1;
        } else if (!strcmp(k, "dropped_attributes") || !strcmp(k, "dropped_events") ||
                   !strcmp(k, "truncated_attributes")) {
            uint32_t *dst = k[0] == 't' ? &o->truncated_attrs
                            : k[8] == 'a' ? &o->dropped_attrs : &o->dropped_events;
            uint64_t v;
            if (read_u64_field(lx, k[0] == 't' ? "truncated_attributes" : "dropped counts", &v))
                return -1;
            *dst = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
        } else if (rpt_lex_skip_value(lx, rpt_lex_next(lx))) {
            return -1;
        }
    }
    if (r < 0)
        return -1;
    const char *missing = !has_trace ? "trace_id" : !has_span ? "span_id" : !has_name ? "name"
                          : !has_start ? "start_ns" : !has_end ? "end_ns" : NULL;
    if (missing) {
        snprintf(lx->err, sizeof lx->err, "not a span: no %s", missing);
        return -1;
    }
    return 0;
}

/* ---- OTLP JSON ------------------------------------------------------------------ */

enum { S_LINE, S_TOP, S_RS_ARR, S_RS_OBJ, S_SS_ARR, S_SS_OBJ, S_SPANS };
/* states S_TOP .. S_SPANS each walk one open container, with its flag in first[] */
_Static_assert(sizeof ((rpt_source *)0)->first == S_SPANS, "a first[] flag per container");

/* a time: a decimal string (the protobuf JSON mapping of fixed64) or a number */
static int otlp_time(rpt_lex *lx, const char *field, uint64_t *out)
{
    rpt_tok t = rpt_lex_next(lx);
    if (t == RPT_TK_INT && !lx->big && lx->i >= 0) {
        *out = (uint64_t)lx->i;
        return 0;
    }
    if (t == RPT_TK_STR && lx->str_len > 0 && lx->str_len <= 20) {
        uint64_t v = 0;
        for (size_t k = 0; k < lx->str_len; k++) {
            unsigned d = (unsigned)(lx->str[k] - '0');
            if (d > 9 || v > (UINT64_MAX - d) / 10)
                goto bad;
            v = v * 10 + d;
        }
        *out = v;
        return 0;
    }
bad:
    if (t != RPT_TK_ERR)
        snprintf(lx->err, sizeof lx->err, "%s: expected nanoseconds (a decimal string), found %s",
                 field, rpt_tok_phrase(t));
    return -1;
}

/* an AnyValue object, its '{' read: the scalar kinds into *v, others skipped */
static int otlp_anyvalue(rpt_lex *lx, attr_val *v)
{
    bool first = true;
    int r;
    v->type = AV_NONE;
    while ((r = rpt_lex_obj_next(lx, &first)) == 1) {
        char kind[16];
        copy_cut(kind, sizeof kind, lx->str, lx->str_len);
        rpt_tok t = rpt_lex_next(lx);
        if (!strcmp(kind, "intValue") && (t == RPT_TK_STR || t == RPT_TK_INT)) {
            if (t == RPT_TK_INT && !lx->big) {
                v->type = AV_INT;
                v->i = lx->i;
            } else if (t == RPT_TK_STR) {
                char *end = NULL;
                errno = 0;
                long long x = strtoll(lx->str, &end, 10);
                if (lx->str_len && end == lx->str + lx->str_len && errno == 0) {
                    v->type = AV_INT;
                    v->i = x;
                }
            }
        } else if (!strcmp(kind, "doubleValue") && (t == RPT_TK_FLOAT || t == RPT_TK_INT)) {
            v->type = AV_DOUBLE;
            v->d = lx->d;
        } else if (!strcmp(kind, "doubleValue") && t == RPT_TK_STR) {
            v->type = AV_DOUBLE; /* "NaN", "Infinity", "-Infinity" */
            v->d = !strcmp(lx->str, "NaN") ? NAN : !strcmp(lx->str, "Infinity") ? INFINITY
                   : !strcmp(lx->str, "-Infinity") ? -INFINITY : NAN;
        } else if (!strcmp(kind, "boolValue") && (t == RPT_TK_TRUE || t == RPT_TK_FALSE)) {
            v->type = AV_BOOL;
            v->b = t == RPT_TK_TRUE;
        } else if (!strcmp(kind, "stringValue") && t == RPT_TK_STR) {
            val_from_tok(lx, t, v);
        } else if (rpt_lex_skip_value(lx, t)) { /* arrayValue, kvlistValue, bytesValue */
            return -1;
        }
    }
    return r;
}

/* an attributes list: [{key, value}, ...], its '[' read */
static int otlp_attrs(rpt_lex *lx, rpt_span *o, char *service, size_t service_cap)
{
    bool first = true;
    int r;
    rpt_tok t;
    while ((r = rpt_lex_arr_next(lx, &first, &t)) == 1) {
        if (want(lx, t, RPT_TK_LBRACE, "attributes", "a {key, value} object"))
            return -1;
        char key[64] = "";
        bool key_ok = false, f2 = true;
        attr_val v = {0};
        int r2;
        while ((r2 = rpt_lex_obj_next(lx, &f2)) == 1) {
            if (!strcmp(lx->str, "key")) {
                if (want(lx, rpt_lex_next(lx), RPT_TK_STR, "attributes.key", "a string"))
                    return -1;
                key_ok = lx->str_len < sizeof key;
                if (key_ok)
                    memcpy(key, lx->str, lx->str_len + 1);
            } else if (!strcmp(lx->str, "value")) {
                rpt_tok vt = rpt_lex_next(lx);
                if (vt == RPT_TK_NULL)
                    continue;
                if (want(lx, vt, RPT_TK_LBRACE, "attributes.value", "an AnyValue object") ||
                    otlp_anyvalue(lx, &v) < 0)
                    return -1;
            } else if (rpt_lex_skip_value(lx, rpt_lex_next(lx))) {
                return -1;
            }
        }
        if (r2 < 0)
            return -1;
        if (!key_ok)
            continue;
        if (service) {
            if (!strcmp(key, "service.name") && v.type == AV_STR)
                copy_cut(service, service_cap, v.s, v.slen);
        } else {
            apply_attr(o, key, &v);
        }
    }
    return r;
}

static int otlp_resource(rpt_lex *lx, rpt_source *src)
{
    rpt_tok t = rpt_lex_next(lx);
    if (t == RPT_TK_NULL)
        return 0;
    if (want(lx, t, RPT_TK_LBRACE, "resource", "an object"))
        return -1;
    bool first = true;
    int r;
    while ((r = rpt_lex_obj_next(lx, &first)) == 1) {
        if (!strcmp(lx->str, "attributes")) {
            t = rpt_lex_next(lx);
            if (t == RPT_TK_NULL)
                continue;
            if (want(lx, t, RPT_TK_LBRACK, "resource.attributes", "a list") ||
                otlp_attrs(lx, NULL, src->service, sizeof src->service) < 0)
                return -1;
        } else if (rpt_lex_skip_value(lx, rpt_lex_next(lx))) {
            return -1;
        }
    }
    return r < 0 ? -1 : 0;
}

static int otlp_count(rpt_lex *lx, const char *field, uint32_t *dst)
{
    rpt_tok t = rpt_lex_next(lx);
    if (t != RPT_TK_INT || lx->big || lx->i < 0) {
        if (t != RPT_TK_ERR)
            snprintf(lx->err, sizeof lx->err, "%s: expected a count, found %s", field,
                     rpt_tok_phrase(t));
        return -1;
    }
    *dst = lx->i > UINT32_MAX ? UINT32_MAX : (uint32_t)lx->i;
    return 0;
}

/* One OTLP Span object, its '{' read. -1: the line cannot be read on (bad JSON
 * or a mistyped field); 1: the object was read whole but is no span (a field
 * missing): the caller counts a bad span and reads on in the batch. */
static int parse_otlp_span(rpt_lex *lx, rpt_span *o)
{
    bool first = true, has_trace = false, has_span = false, has_start = false, has_end = false,
         has_name = false, p;
    int r;
    while ((r = rpt_lex_obj_next(lx, &first)) == 1) {
        const char *k = lx->str;
        rpt_tok t;
        if (!strcmp(k, "traceId")) {
            if (read_id_field(lx, "traceId", o->trace_id, 16, false, &has_trace))
                return -1;
        } else if (!strcmp(k, "spanId")) {
            if (read_id_field(lx, "spanId", o->span_id, 8, false, &has_span))
                return -1;
        } else if (!strcmp(k, "parentSpanId")) {
            if (read_id_field(lx, "parentSpanId", o->parent_id, 8, true, &p))
                return -1;
            o->has_parent = p && !all_zero(o->parent_id, 8);
        } else if (!strcmp(k, "name")) {
            if (want(lx, rpt_lex_next(lx), RPT_TK_STR, "name", "a string"))
                return -1;
            copy_cut(o->name, sizeof o->name, lx->str, lx->str_len);
            has_name = true;
        } else if (!strcmp(k, "startTimeUnixNano")) {
            if (otlp_time(lx, "startTimeUnixNano", &o->start_ns))
                return -1;
            has_start = true;
        } else if (!strcmp(k, "endTimeUnixNano")) {
            if (otlp_time(lx, "endTimeUnixNano", &o->end_ns))
                return -1;
            has_end = true;
        } else if (!strcmp(k, "attributes")) {
            t = rpt_lex_next(lx);
            if (t == RPT_TK_NULL)
                continue;
            if (want(lx, t, RPT_TK_LBRACK, "attributes", "a list") ||
                otlp_attrs(lx, o, NULL, 0) < 0)
                return -1;
        } else if (!strcmp(k, "droppedAttributesCount")) {
            if (otlp_count(lx, "droppedAttributesCount", &o->dropped_attrs))
                return -1;
        } else if (!strcmp(k, "droppedEventsCount")) {
            if (otlp_count(lx, "droppedEventsCount", &o->dropped_events))
                return -1;
        } else if (!strcmp(k, "status")) {
            t = rpt_lex_next(lx);
            if (t == RPT_TK_NULL)
                continue;
            if (want(lx, t, RPT_TK_LBRACE, "status", "an object"))
                return -1;
            bool f2 = true;
            int r2;
            while ((r2 = rpt_lex_obj_next(lx, &f2)) == 1) {
                bool code = !strcmp(lx->str, "code");
                t = rpt_lex_next(lx);
                if (code && t == RPT_TK_INT)
                    o->error = lx->i == 2;
                else if (code && t == RPT_TK_STR)
                    o->error = !strcmp(lx->str, "STATUS_CODE_ERROR");
                else if (rpt_lex_skip_value(lx, t))
                    return -1;
            }
            if (r2 < 0)
                return -1;
        } else if (rpt_lex_skip_value(lx, rpt_lex_next(lx))) {
            return -1;
        }
    }
    if (r < 0)
        return -1;
    const char *missing = !has_trace ? "traceId" : !has_span ? "spanId" : !has_name ? "name"
                          : !has_start ? "startTimeUnixNano" : !has_end ? "endTimeUnixNano" : NULL;
    if (missing) {
        snprintf(lx->err, sizeof lx->err, "not a span: no %s", missing);
        return 1; /* the object is read whole: only this span is bad */
    }
    return 0;
}

/* ---- sources -------------------------------------------------------------------- */

int rpt_source_open(rpt_source *src, FILE *f, rpt_format fmt, unsigned file,
                    rpt_bad_line_fn on_bad, void *bad_ctx)
{
    memset(src, 0, sizeof *src);
    src->fmt = fmt;
    src->file = file;
    src->on_bad = on_bad;
    src->bad_ctx = bad_ctx;
    src->state = S_LINE;
    return rpt_lex_init(&src->lx, f);
}

void rpt_source_close(rpt_source *src) { rpt_lex_free(&src->lx); }

static void bad(rpt_source *src, uint64_t line)
{
    src->bad_lines++;
    if (src->on_bad)
        src->on_bad(src->bad_ctx, src->file, line, src->lx.err[0] ? src->lx.err : "not JSON");
    rpt_lex_skip_line(&src->lx);
    src->lx.err[0] = 0;
    src->state = S_LINE;
}

static void bad_span(rpt_source *src, uint64_t line)
{
    src->bad_spans++;
    if (src->on_bad_span)
        src->on_bad_span(src->bad_ctx, src->file, line, src->lx.err[0] ? src->lx.err : "not a span");
    src->lx.err[0] = 0;
}

/* times past INT64_MAX are refused (as the span file's reader does): the
 * figures work in signed 64-bit nanoseconds */
static int check_times(rpt_lex *lx, const rpt_span *o)
{
    if (o->start_ns > (uint64_t)INT64_MAX || o->end_ns > (uint64_t)INT64_MAX) {
        snprintf(lx->err, sizeof lx->err, "the span '%.40s' has a time past 2^63 ns", o->name);
        return -1;
    }
    if (o->end_ns < o->start_ns) {
        snprintf(lx->err, sizeof lx->err, "the span '%.40s' ends before it starts", o->name);
        return -1;
    }
    return 0;
}

static int next_cbt(rpt_source *src, rpt_span *out)
{
    rpt_lex *lx = &src->lx;
    for (;;) {
        rpt_tok t = rpt_lex_next(lx);
        uint64_t line = lx->tok_line;
        if (t == RPT_TK_EOF)
            return 0;
        if (t == RPT_TK_EOL)
            continue;
        if (lx->io_error)
            return -1;
        if (t != RPT_TK_LBRACE) {
            if (t != RPT_TK_ERR)
                snprintf(lx->err, sizeof lx->err, "expected a span object, found %s",
                         rpt_tok_phrase(t));
            bad(src, line);
            continue;
        }
        rpt_span_reset(out, src->file, line);
        if (parse_cbt_span(lx, out) || rpt_lex_end_line(lx) || check_times(lx, out)) {
            if (lx->io_error)
                return -1;
            bad(src, line);
            continue;
        }
        src->spans++;
        return 1;
    }
}

static int next_otlp(rpt_source *src, rpt_span *out)
{
    rpt_lex *lx = &src->lx;
    bool *fi = src->first;
    uint64_t line = lx->tok_line;
    for (;;) {
        rpt_tok t;
        int r;
        if (lx->io_error)
            return -1;
        switch (src->state) {
        case S_LINE:
            t = rpt_lex_next(lx);
            line = lx->tok_line;
            if (t == RPT_TK_EOF)
                return lx->io_error ? -1 : 0;
            if (t == RPT_TK_EOL)
                continue;
            if (t != RPT_TK_LBRACE) {
                if (t != RPT_TK_ERR)
                    snprintf(lx->err, sizeof lx->err,
                             "expected an ExportTraceServiceRequest object, found %s",
                             rpt_tok_phrase(t));
                goto fail;
            }
            fi[0] = true;
            src->state = S_TOP;
            continue;
        case S_TOP:
            if ((r = rpt_lex_obj_next(lx, &fi[0])) < 0)
                goto fail;
            if (r == 0) {
                if (rpt_lex_end_line(lx))
                    goto fail;
                src->state = S_LINE;
            } else if (!strcmp(lx->str, "resourceSpans")) {
                t = rpt_lex_next(lx);
                if (t == RPT_TK_NULL)
                    continue;
                if (want(lx, t, RPT_TK_LBRACK, "resourceSpans", "a list"))
                    goto fail;
                fi[1] = true;
                src->state = S_RS_ARR;
            } else if (rpt_lex_skip_value(lx, rpt_lex_next(lx))) {
                goto fail;
            }
            continue;
        case S_RS_ARR:
            if ((r = rpt_lex_arr_next(lx, &fi[1], &t)) < 0)
                goto fail;
            if (r == 0) {
                src->state = S_TOP;
            } else {
                if (want(lx, t, RPT_TK_LBRACE, "resourceSpans", "an object"))
                    goto fail;
                fi[2] = true;
                src->service[0] = 0;
                src->state = S_RS_OBJ;
            }
            continue;
        case S_RS_OBJ:
            if ((r = rpt_lex_obj_next(lx, &fi[2])) < 0)
                goto fail;
            if (r == 0) {
                src->state = S_RS_ARR;
            } else if (!strcmp(lx->str, "resource")) {
                if (otlp_resource(lx, src))
                    goto fail;
            } else if (!strcmp(lx->str, "scopeSpans") ||
                       !strcmp(lx->str, "instrumentationLibrarySpans")) {
                t = rpt_lex_next(lx);
                if (t == RPT_TK_NULL)
                    continue;
                if (want(lx, t, RPT_TK_LBRACK, "scopeSpans", "a list"))
                    goto fail;
                fi[3] = true;
                src->state = S_SS_ARR;
            } else if (rpt_lex_skip_value(lx, rpt_lex_next(lx))) {
                goto fail;
            }
            continue;
        case S_SS_ARR:
            if ((r = rpt_lex_arr_next(lx, &fi[3], &t)) < 0)
                goto fail;
            if (r == 0) {
                src->state = S_RS_OBJ;
            } else {
                if (want(lx, t, RPT_TK_LBRACE, "scopeSpans", "an object"))
                    goto fail;
                fi[4] = true;
                src->state = S_SS_OBJ;
            }
            continue;
        case S_SS_OBJ:
            if ((r = rpt_lex_obj_next(lx, &fi[4])) < 0)
                goto fail;
            if (r == 0) {
                src->state = S_SS_ARR;
            } else if (!strcmp(lx->str, "spans")) {
                t = rpt_lex_next(lx);
                if (t == RPT_TK_NULL)
                    continue;
                if (want(lx, t, RPT_TK_LBRACK, "spans", "a list"))
                    goto fail;
                fi[5] = true;
                src->state = S_SPANS;
            } else if (rpt_lex_skip_value(lx, rpt_lex_next(lx))) {
                goto fail;
            }
            continue;
        case S_SPANS:
            if ((r = rpt_lex_arr_next(lx, &fi[5], &t)) < 0)
                goto fail;
            if (r == 0) {
                src->state = S_SS_OBJ;
                continue;
            }
            if (want(lx, t, RPT_TK_LBRACE, "spans", "a span object"))
                goto fail;
            rpt_span_reset(out, src->file, lx->tok_line);
            if ((r = parse_otlp_span(lx, out)) < 0)
                goto fail;
            if (r > 0 || check_times(lx, out)) {
                bad_span(src, out->line); /* the object is read whole: on with the batch */
                continue;
            }
            src->spans++;
            return 1;
        default:
            src->state = S_LINE;
            continue;
        }
    fail:
        if (lx->io_error)
            return -1;
        bad(src, line);
    }
}

int rpt_source_next(rpt_source *src, rpt_span *out)
{
    return src->fmt == RPT_FMT_OTLP ? next_otlp(src, out) : next_cbt(src, out);
}

/* ---- the merge ------------------------------------------------------------------ */

void rpt_merge_init(rpt_merge *m, rpt_source **src, unsigned n)
{
    memset(m, 0, sizeof *m);
    m->n = n > RPT_FILES_MAX ? RPT_FILES_MAX : n;
    for (unsigned k = 0; k < m->n; k++) {
        m->src[k] = src[k];
        m->live[k] = rpt_source_next(src[k], &m->head[k]) == 1;
    }
}

int rpt_merge_next(rpt_merge *m, rpt_span *out)
{
    int best = -1;
    for (unsigned k = 0; k < m->n; k++)
        if (m->live[k] && (best < 0 || m->head[k].end_ns < m->head[best].end_ns))
            best = (int)k;
    if (best < 0)
        return 0;
    *out = m->head[best];
    m->live[best] = rpt_source_next(m->src[best], &m->head[best]) == 1;
    return 1;
}
