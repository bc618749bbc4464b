/* cli/jsonl_in.c — owns the bounded line reader and the strict JSON
 * parser of jsonl_in.h.
 *
 * The parser is recursive descent with an explicit depth bound
 * (CBT_JL_DEPTH_MAX, so the C stack is bounded too) and a node bound
 * (CBT_JL_NODES_MAX). Strings are decoded in place: the decoded form of a
 * string is never longer than its source (an escape of 2 or 6 bytes gives
 * at most 1 or 3 bytes, a surrogate pair of 12 gives 4), so the write
 * position stays behind the read position, and the NUL written after the
 * decoded bytes lands at most on the closing quote, already consumed.
 */
#include "jsonl_in.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct parser {
    char *p;      /* the buffer */
    size_t len;   /* its length */
    size_t i;     /* read position */
    cbt_jl_doc *doc;
    char *err;
    size_t errcap;
    int failed;
} parser;

static void fail(parser *ps, size_t at, const char *fmt, ...)
{
    if (ps->failed)
        return;
    ps->failed = 1;
    if (!ps->err || ps->errcap == 0)
        return;
    int n = snprintf(ps->err, ps->errcap, "column %zu: ", at + 1);
    if (n < 0 || (size_t)n >= ps->errcap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->err + n, ps->errcap - (size_t)n, fmt, ap);
    va_end(ap);
}

/* "'x'" for a printable byte, "byte 0x07" otherwise, "the end of the line" past it */
static const char *what_at(const parser *ps, size_t at, char tmp[24])
{
    if (at >= ps->len)
        return "the end of the line";
    unsigned char c = (unsigned char)ps->p[at];
    if (c >= 0x20 && c < 0x7f)
        snprintf(tmp, 24, "'%c'", c);
    else
        snprintf(tmp, 24, "byte 0x%02x", c);
    return tmp;
}

static void skip_ws(parser *ps)
{
    while (ps->i < ps->len) {
        char c = ps->p[ps->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        ps->i++;
    }
}

static cbt_jl_node *new_node(parser *ps, cbt_jl_type type, uint32_t *index)
{
    if (ps->doc->n >= CBT_JL_NODES_MAX) {
        fail(ps, ps->i, "more than %u values in one line", (unsigned)CBT_JL_NODES_MAX);
        return NULL;
    }
    *index = ps->doc->n++;
    cbt_jl_node *nd = &ps->doc->nodes[*index];
    memset(nd, 0, sizeof *nd);
    nd->type = (uint8_t)type;
    return nd;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Four hex digits at ps->i (after "\u"); -1 when they are not there. */
static long hex4(parser *ps)
{
    if (ps->len - ps->i < 4)
        return -1;
    long v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(ps->p[ps->i + (size_t)k]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    ps->i += 4;
    return v;
}

/* Length of the UTF-8 sequence at s (at most n bytes), 0 when it is not a
 * valid one: no overlong forms, no surrogates, nothing above U+10FFFF. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned min, cp;
    if (c < 0x80)
        return 1;
    if ((c & 0xE0) == 0xC0) {
        len = 2, min = 0x80, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3, min = 0x800, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4, min = 0x10000, cp = c & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

static size_t put_utf8(char *out, unsigned long cp)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A string at ps->i (on its opening quote), decoded in place. */
static int parse_string(parser *ps, const char **out, uint32_t *out_len)
{
    size_t open = ps->i++;
    size_t w = ps->i; /* write position, <= read position */
    for (;;) {
        if (ps->i >= ps->len) {
            fail(ps, open, "string not terminated");
            return -1;
        }
        unsigned char c = (unsigned char)ps->p[ps->i];
        if (c == '"') {
            ps->i++;
            break;
        }
        if (c < 0x20) {
            fail(ps, ps->i, "raw control character 0x%02x in a string (escape it)", c);
            return -1;
        }
        if (c != '\\') {
            size_t l = utf8_len((const unsigned char *)ps->p + ps->i, ps->len - ps->i);
            if (l == 0) {
                fail(ps, ps->i, "invalid UTF-8 in a string");
                return -1;
            }
            memmove(ps->p + w, ps->p + ps->i, l);
            w += l;
            ps->i += l;
            continue;
        }
        size_t esc = ps->i++;
        if (ps->i >= ps->len) {
            fail(ps, open, "string not terminated");
            return -1;
        }
        char e = ps->p[ps->i++];
        switch (e) {
        case '"': ps->p[w++] = '"'; break;
        case '\\': ps->p[w++] = '\\'; break;
        case '/': ps->p[w++] = '/'; break;
        case 'b': ps->p[w++] = '\b'; break;
        case 'f': ps->p[w++] = '\f'; break;
        case 'n': ps->p[w++] = '\n'; break;
        case 'r': ps->p[w++] = '\r'; break;
        case 't': ps->p[w++] = '\t'; break;
        case 'u': {
            long cp = hex4(ps);
            if (cp < 0) {
                fail(ps, esc, "\\u needs four hex digits");
                return -1;
            }
            if (cp >= 0xDC00 && cp <= 0xDFFF) {
                fail(ps, esc, "unpaired low surrogate \\u%04lx", cp);
                return -1;
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                long lo = -1;
                if (ps->len - ps->i >= 2 && ps->p[ps->i] == '\\' && ps->p[ps->i + 1] == 'u') {
                    ps->i += 2;
                    lo = hex4(ps);
                }
                if (lo < 0xDC00 || lo > 0xDFFF) {
                    fail(ps, esc, "high surrogate \\u%04lx not followed by a low one", cp);
                    return -1;
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            w += put_utf8(ps->p + w, (unsigned long)cp);
            break;
        }
        default: {
            char tmp[24];
            fail(ps, esc, "unknown escape \\%s", what_at(ps, esc + 1, tmp));
            return -1;
        }
        }
    }
    /* w < ps->i: the NUL lands on the closing quote at the latest */
    ps->p[w] = '\0';
    *out = ps->p + open + 1;
    *out_len = (uint32_t)(w - open - 1);
    return 0;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int parse_number(parser *ps, cbt_jl_node *nd)
{
    size_t s = ps->i, i = ps->i;
    bool integer = true;
    if (i < ps->len && ps->p[i] == '-')
        i++;
    if (i >= ps->len || !is_digit(ps->p[i])) {
        fail(ps, i, "a number needs a digit here");
        return -1;
    }
    if (ps->p[i] == '0') {
        i++;
        if (i < ps->len && is_digit(ps->p[i])) {
            fail(ps, s, "a number may not have a leading zero");
            return -1;
        }
    } else {
        while (i < ps->len && is_digit(ps->p[i]))
            i++;
    }
    if (i < ps->len && ps->p[i] == '.') {
        integer = false;
        i++;
        if (i >= ps->len || !is_digit(ps->p[i])) {
            fail(ps, i, "a digit must follow the decimal point");
            return -1;
        }
        while (i < ps->len && is_digit(ps->p[i]))
            i++;
    }
    if (i < ps->len && (ps->p[i] == 'e' || ps->p[i] == 'E')) {
        integer = false;
        i++;
        if (i < ps->len && (ps->p[i] == '+' || ps->p[i] == '-'))
            i++;
        if (i >= ps->len || !is_digit(ps->p[i])) {
            fail(ps, i, "a digit must follow the exponent");
            return -1;
        }
        while (i < ps->len && is_digit(ps->p[i]))
            i++;
    }
    size_t n = i - s;
    if (n >= CBT_JL_NUMBER_MAX) {
        fail(ps, s, "number longer than %u characters", (unsigned)CBT_JL_NUMBER_MAX - 1);
        return -1;
    }
    char tmp[CBT_JL_NUMBER_MAX];
    memcpy(tmp, ps->p + s, n);
    tmp[n] = '\0';
    ps->i = i;
    if (integer) {
        /* exact int64, by hand: strtoll would accept what the grammar did not */
        bool neg = tmp[0] == '-';
        uint64_t mag = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
        bool over = false;
        for (const char *d = tmp + (neg ? 1 : 0); *d; d++) {
            uint64_t dv = (uint64_t)(*d - '0');
            if (mag > (lim - dv) / 10) {
                over = true;
                break;
            }
            mag = mag * 10 + dv;
        }
        if (!over) {
            nd->type = CBT_JL_INT;
            nd->v.i = neg ? (mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag)
                          : (int64_t)mag;
            return 0;
        }
        nd->type = CBT_JL_BIGINT;
        nd->v.f = strtod(tmp, NULL);
        return 0;
    }
    errno = 0;
    double v = strtod(tmp, NULL);
    if (isinf(v)) {
        fail(ps, s, "number out of the range of a double");
        return -1;
    }
    nd->type = CBT_JL_FLOAT;
    nd->v.f = v; /* an underflow to 0 or a subnormal is kept: it is the nearest double */
    return 0;
}

static int parse_value(parser *ps, int depth, const char *key, uint32_t key_len);

static int expect_word(parser *ps, const char *w)
{
    size_t n = strlen(w);
    if (ps->len - ps->i < n || memcmp(ps->p + ps->i, w, n) != 0) {
        char tmp[24];
        fail(ps, ps->i, "unexpected %s", what_at(ps, ps->i, tmp));
        return -1;
    }
    ps->i += n;
    return 0;
}

static int parse_container(parser *ps, int depth, cbt_jl_node *nd, uint32_t index, bool object)
{
    char close = object ? '}' : ']';
    size_t open = ps->i++;
    if (depth >= CBT_JL_DEPTH_MAX) {
        fail(ps, open, "nested deeper than %u", (unsigned)CBT_JL_DEPTH_MAX);
        return -1;
    }
    (void)nd;
    skip_ws(ps);
    if (ps->i < ps->len && ps->p[ps->i] == close) {
        ps->i++;
        ps->doc->nodes[index].end = ps->doc->n;
        return 0;
    }
    for (;;) {
        skip_ws(ps);
        const char *k = NULL;
        uint32_t klen = 0;
        if (object) {
            if (ps->i >= ps->len || ps->p[ps->i] != '"') {
                char tmp[24];
                fail(ps, ps->i, "expected a member name (a string), found %s",
                     what_at(ps, ps->i, tmp));
                return -1;
            }
            size_t at = ps->i;
            if (parse_string(ps, &k, &klen))
                return -1;
            /* no duplicate names: earlier members are the children so far */
            for (uint32_t c = index + 1; c < ps->doc->n; c = ps->doc->nodes[c].end) {
                const cbt_jl_node *m = &ps->doc->nodes[c];
                if (m->key_len == klen && memcmp(m->key, k, klen) == 0) {
                    fail(ps, at, "duplicate member name \"%.*s\"", (int)(klen > 40 ? 40 : klen), k);
                    return -1;
                }
            }
            skip_ws(ps);
            if (ps->i >= ps->len || ps->p[ps->i] != ':') {
                char tmp[24];
                fail(ps, ps->i, "expected ':' after a member name, found %s",
                     what_at(ps, ps->i, tmp));
                return -1;
            }
            ps->i++;
            skip_ws(ps);
        }
        if (parse_value(ps, depth + 1, k, klen))
            return -1;
        skip_ws(ps);
        if (ps->i < ps->len && ps->p[ps->i] == ',') {
            ps->i++;
            skip_ws(ps);
            if (ps->i < ps->len && ps->p[ps->i] == close) {
                fail(ps, ps->i, "trailing comma before '%c'", close);
                return -1;
            }
            continue;
        }
        if (ps->i < ps->len && ps->p[ps->i] == close) {
            ps->i++;
            break;
        }
        char tmp[24];
        if (ps->i >= ps->len)
            fail(ps, open, "%s not closed", object ? "object" : "array");
        else
            fail(ps, ps->i, "expected ',' or '%c', found %s", close, what_at(ps, ps->i, tmp));
        return -1;
    }
    ps->doc->nodes[index].end = ps->doc->n;
    return 0;
}

static int parse_value(parser *ps, int depth, const char *key, uint32_t key_len)
{
    if (ps->i >= ps->len) {
        fail(ps, ps->i, "expected a value, found the end of the line");
        return -1;
    }
    char c = ps->p[ps->i];
    uint32_t index;
    cbt_jl_node *nd = new_node(ps, CBT_JL_NULL, &index);
    if (!nd)
        return -1;
    nd->key = key;
    nd->key_len = key_len;
    int rc;
    switch (c) {
    case '{':
        nd->type = CBT_JL_OBJECT;
        return parse_container(ps, depth, nd, index, true);
    case '[':
        nd->type = CBT_JL_ARRAY;
        return parse_container(ps, depth, nd, index, false);
    case '"':
        nd->type = CBT_JL_STR;
        rc = parse_string(ps, &nd->str, &nd->str_len);
        break;
    case 't':
        nd->type = CBT_JL_BOOL;
        nd->v.b = true;
        rc = expect_word(ps, "true");
        break;
    case 'f':
        nd->type = CBT_JL_BOOL;
        nd->v.b = false;
        rc = expect_word(ps, "false");
        break;
    case 'n':
        rc = expect_word(ps, "null");
        break;
    default:
        if (c == '-' || is_digit(c)) {
            rc = parse_number(ps, nd);
        } else {
            char tmp[24];
            fail(ps, ps->i, "unexpected %s where a value should be", what_at(ps, ps->i, tmp));
            rc = -1;
        }
        break;
    }
    /* nd may not be used past here for containers; scalars end at themselves */
    ps->doc->nodes[index].end = index + 1;
    return rc;
}

int cbt_jl_parse(char *buf, size_t len, cbt_jl_doc *doc, char *err, size_t errcap)
{
    parser ps = {.p = buf, .len = len, .i = 0, .doc = doc, .err = err, .errcap = errcap};
    if (err && errcap)
        err[0] = '\0';
    doc->n = 0;
    if (!buf && len) {
        fail(&ps, 0, "no buffer");
        return -1;
    }
    skip_ws(&ps);
    if (ps.i >= ps.len) {
        fail(&ps, ps.i, "empty line: expected a JSON value");
        return -1;
    }
    if (parse_value(&ps, 0, NULL, 0))
        return -1;
    skip_ws(&ps);
    if (ps.i < ps.len) {
        char tmp[24];
        fail(&ps, ps.i, "unexpected %s after the value (one value per line)",
             what_at(&ps, ps.i, tmp));
        return -1;
    }
    return 0;
}

const cbt_jl_node *cbt_jl_member(const cbt_jl_doc *doc, uint32_t obj, const char *key)
{
    if (obj >= doc->n || doc->nodes[obj].type != CBT_JL_OBJECT)
        return NULL;
    size_t kl = strlen(key);
    for (uint32_t c = obj + 1; c < doc->nodes[obj].end; c = doc->nodes[c].end) {
        const cbt_jl_node *m = &doc->nodes[c];
        if (m->key_len == kl && memcmp(m->key, key, kl) == 0)
            return m;
    }
    return NULL;
}

const char *cbt_jl_type_phrase(cbt_jl_type t)
{
    switch (t) {
    case CBT_JL_NULL: return "null";
    case CBT_JL_BOOL: return "a boolean";
    case CBT_JL_INT: return "an integer";
    case CBT_JL_BIGINT: return "an integer outside 64 bits";
    case CBT_JL_FLOAT: return "a number with a fraction or an exponent";
    case CBT_JL_STR: return "a string";
    case CBT_JL_ARRAY: return "a list";
    case CBT_JL_OBJECT: return "an object";
    }
    return "?";
}

int cbt_jl_reader_init(cbt_jl_reader *r, FILE *f)
{
    memset(r, 0, sizeof *r);
    r->f = f;
    r->buf = malloc((size_t)CBT_JL_LINE_MAX + 1);
    return r->buf ? 0 : -1;
}

void cbt_jl_reader_free(cbt_jl_reader *r)
{
    free(r->buf);
    r->buf = NULL;
}

cbt_jl_read cbt_jl_next(cbt_jl_reader *r)
{
    size_t n = 0;
    bool any = false, too_long = false;
    int c;
    while ((c = getc_unlocked(r->f)) != EOF) {
        any = true;
        if (c == '\n')
            break;
        if (n < CBT_JL_LINE_MAX)
            r->buf[n++] = (char)c;
        else
            too_long = true; /* read on to the newline, storing nothing */
    }
    if (c == EOF && ferror(r->f))
        return CBT_JL_IO;
    if (!any)
        return CBT_JL_EOF;
    r->lineno++;
    r->len = n;
    r->buf[n] = '\0';
    return too_long ? CBT_JL_TOO_LONG : CBT_JL_LINE;
}
