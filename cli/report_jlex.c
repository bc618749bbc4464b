/* cli/report_jlex.c — owns the pull JSON reader of `cbt report`
 * (report_jlex.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "report_jlex.h"

int rpt_lex_init_buf(rpt_lex *lx, FILE *f, size_t bufsize)
{
    memset(lx, 0, sizeof *lx);
    lx->f = f;
    lx->line = 1;
    lx->bufsize = bufsize ? bufsize : 1;
    lx->buf = malloc(lx->bufsize);
    return lx->buf ? 0 : -1;
}

int rpt_lex_init(rpt_lex *lx, FILE *f) { return rpt_lex_init_buf(lx, f, RPT_LEX_BUF); }

void rpt_lex_free(rpt_lex *lx)
{
    free(lx->buf);
    lx->buf = NULL;
}

/* The next byte without taking it, -1 at the end (or a read error). */
static inline int peek(rpt_lex *lx)
{
    if (lx->pos < lx->len)
        return lx->buf[lx->pos];
    if (lx->eof)
        return -1;
    lx->len = fread(lx->buf, 1, lx->bufsize, lx->f);
    lx->pos = 0;
    lx->bytes += lx->len;
    if (lx->len == 0) {
        lx->eof = true;
        lx->io_error = ferror(lx->f) != 0;
        return -1;
    }
    return lx->buf[0];
}

static inline void take(rpt_lex *lx)
{
    if (lx->buf[lx->pos++] == '\n') {
        lx->line++;
        lx->line_off = lx->off + 1;
    }
    lx->off++;
}

static rpt_tok fail(rpt_lex *lx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(lx->err, sizeof lx->err, fmt, ap);
    va_end(ap);
    return RPT_TK_ERR;
}

void rpt_lex_skip_line(rpt_lex *lx)
{
    if (lx->last == RPT_TK_EOL || lx->last == RPT_TK_EOF)
        return; /* the line is over already */
    lx->last = RPT_TK_EOL;
    for (;;) {
        if (lx->pos >= lx->len && peek(lx) < 0)
            return;
        unsigned char *nl = memchr(lx->buf + lx->pos, '\n', lx->len - lx->pos);
        if (!nl) {
            lx->off += lx->len - lx->pos;
            lx->pos = lx->len;
            continue;
        }
        size_t k = (size_t)(nl - (lx->buf + lx->pos));
        lx->off += k;
        lx->pos += k;
        take(lx);
        return;
    }
}

static void put(rpt_lex *lx, const char *s, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        if (lx->str_len < RPT_LEX_STR_MAX)
            lx->str[lx->str_len++] = s[k];
        else
            lx->str_cut = true;
    }
}

static void put_cp(rpt_lex *lx, uint32_t cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    put(lx, u, n);
}

static int hex4(rpt_lex *lx, uint32_t *out)
{
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        int c = peek(lx);
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        take(lx);
        v = v << 4 | (uint32_t)d;
    }
    *out = v;
    return 0;
}

static rpt_tok lex_string(rpt_lex *lx)
{
    lx->str_len = 0;
    lx->str_cut = false;
    for (;;) {
        /* the plain run up to a quote, a backslash or a control byte, in one go */
        size_t start = lx->pos, k = start;
        while (k < lx->len) {
            unsigned char c = lx->buf[k];
            if (c == '"' || c == '\\' || c < 0x20)
                break;
            k++;
        }
        if (k > start) {
            put(lx, (const char *)lx->buf + start, k - start);
            lx->off += k - start;
            lx->pos = k;
        }
        int c = peek(lx);
        if (c < 0)
            return fail(lx, "the line ends inside a string");
        if (c == '"') {
            take(lx);
            lx->str[lx->str_len] = 0;
            return RPT_TK_STR;
        }
        if (c < 0x20)
            return fail(lx, c == '\n' ? "the line ends inside a string"
                                      : "a raw control character (0x%02x) in a string", c);
        if (c != '\\')
            continue; /* the run stopped at the end of the buffer: read on */
        take(lx); /* the backslash */
        c = peek(lx);
        if (c < 0 || c == '\n') /* the newline stays: the next line is its own */
            return fail(lx, "the line ends inside a string");
        take(lx);
        switch (c) {
        case '"': put(lx, "\"", 1); break;
        case '\\': put(lx, "\\", 1); break;
        case '/': put(lx, "/", 1); break;
        case 'b': put(lx, "\b", 1); break;
        case 'f': put(lx, "\f", 1); break;
        case 'n': put(lx, "\n", 1); break;
        case 'r': put(lx, "\r", 1); break;
        case 't': put(lx, "\t", 1); break;
        case 'u': {
            uint32_t cp;
            if (hex4(lx, &cp))
                return fail(lx, "\\u needs four hex digits");
            if (cp >= 0xD800 && cp < 0xDC00) {
                uint32_t lo;
                if (peek(lx) == '\\') {
                    take(lx);
                    if (peek(lx) != 'u')
                        return fail(lx, "a high surrogate followed by another escape");
                    take(lx);
                    if (hex4(lx, &lo))
                        return fail(lx, "\\u needs four hex digits");
                    if (lo >= 0xDC00 && lo < 0xE000)
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    else {
                        put_cp(lx, 0xFFFD);
                        cp = lo >= 0xD800 && lo < 0xE000 ? 0xFFFD : lo;
                    }
                } else
                    cp = 0xFFFD;
            } else if (cp >= 0xDC00 && cp < 0xE000)
                cp = 0xFFFD;
            put_cp(lx, cp);
            break;
        }
        default: return fail(lx, "an unknown escape '\\%c' in a string", c);
        }
    }
}

static rpt_tok lex_number(rpt_lex *lx)
{
    char t[RPT_LEX_NUM_MAX + 1];
    size_t n = 0;
    bool is_float = false;
    int c;
#define NUM_TAKE()                                                                     \
    do {                                                                               \
        if (n >= RPT_LEX_NUM_MAX)                                                      \
            return fail(lx, "a number longer than %d characters", RPT_LEX_NUM_MAX);    \
        t[n++] = (char)c;                                                              \
        take(lx);                                                                      \
    } while (0)
    c = peek(lx);
    if (c == '-')
        NUM_TAKE();
    c = peek(lx);
    if (c == '0') {
        NUM_TAKE();
        c = peek(lx);
        if (c >= '0' && c <= '9')
            return fail(lx, "a number with a leading zero");
    } else if (c >= '1' && c <= '9') {
        while ((c = peek(lx)) >= '0' && c <= '9')
            NUM_TAKE();
    } else
        return fail(lx, "'-' without digits");
    c = peek(lx);
    if (c == '.') {
        is_float = true;
        NUM_TAKE();
        if (!((c = peek(lx)) >= '0' && c <= '9'))
            return fail(lx, "a '.' without digits after it");
        while ((c = peek(lx)) >= '0' && c <= '9')
            NUM_TAKE();
    }
    c = peek(lx);
    if (c == 'e' || c == 'E') {
        is_float = true;
        NUM_TAKE();
        c = peek(lx);
        if (c == '+' || c == '-')
            NUM_TAKE();
        if (!((c = peek(lx)) >= '0' && c <= '9'))
            return fail(lx, "an exponent without digits");
        while ((c = peek(lx)) >= '0' && c <= '9')
            NUM_TAKE();
    }
#undef NUM_TAKE
    t[n] = 0;
    lx->big = false;
    if (is_float) {
        lx->d = strtod(t, NULL);
        return RPT_TK_FLOAT;
    }
    /* an integer: int64 when it fits */
    bool neg = t[0] == '-';
    uint64_t v = 0;
    for (const char *p = t + neg; *p; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) {
            lx->big = true;
            break;
        }
        v = v * 10 + d;
    }
    if (!lx->big && (neg ? v > (uint64_t)INT64_MAX + 1 : v > (uint64_t)INT64_MAX))
        lx->big = true;
    if (lx->big) {
        lx->d = strtod(t, NULL);
        lx->i = 0;
        return RPT_TK_INT;
    }
    lx->i = neg ? (int64_t)(0 - v) : (int64_t)v;
    lx->d = (double)lx->i;
    return RPT_TK_INT;
}

static rpt_tok lex_word(rpt_lex *lx, const char *w, rpt_tok t)
{
    for (const char *p = w; *p; p++) {
        if (peek(lx) != *p)
            return fail(lx, "not a JSON value (expected '%s')", w);
        take(lx);
    }
    int c = peek(lx);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return fail(lx, "not a JSON value (expected '%s')", w);
    return t;
}

static rpt_tok lex_next(rpt_lex *lx)
{
    int c;
    while ((c = peek(lx)) == ' ' || c == '\t' || c == '\r') {
        lx->pos++;
        lx->off++;
    }
    lx->tok_line = lx->line;
    lx->tok_col = lx->off - lx->line_off + 1;
    switch (c) {
    case -1:
        if (lx->io_error)
            return fail(lx, "read error: %s", strerror(errno ? errno : EIO));
        return RPT_TK_EOF;
    case '\n': take(lx); return RPT_TK_EOL;
    case '{': take(lx); return RPT_TK_LBRACE;
    case '}': take(lx); return RPT_TK_RBRACE;
    case '[': take(lx); return RPT_TK_LBRACK;
    case ']': take(lx); return RPT_TK_RBRACK;
    case ':': take(lx); return RPT_TK_COLON;
    case ',': take(lx); return RPT_TK_COMMA;
    case '"': take(lx); return lex_string(lx);
    case 't': return lex_word(lx, "true", RPT_TK_TRUE);
    case 'f': return lex_word(lx, "false", RPT_TK_FALSE);
    case 'n': return lex_word(lx, "null", RPT_TK_NULL);
    default:
        if (c == '-' || (c >= '0' && c <= '9'))
            return lex_number(lx);
        if (c >= 0x21 && c < 0x7F)
            return fail(lx, "unexpected '%c'", c);
        return fail(lx, "unexpected byte 0x%02x", c);
    }
}

rpt_tok rpt_lex_next(rpt_lex *lx)
{
    return lx->last = lex_next(lx);
}

const char *rpt_tok_phrase(rpt_tok t)
{
    switch (t) {
    case RPT_TK_EOF: return "the end of the file";
    case RPT_TK_EOL: return "the end of the line";
    case RPT_TK_LBRACE: return "'{'";
    case RPT_TK_RBRACE: return "'}'";
    case RPT_TK_LBRACK: return "'['";
    case RPT_TK_RBRACK: return "']'";
    case RPT_TK_COLON: return "':'";
    case RPT_TK_COMMA: return "','";
    case RPT_TK_STR: return "a string";
    case RPT_TK_INT:
    case RPT_TK_FLOAT: return "a number";
    case RPT_TK_TRUE:
    case RPT_TK_FALSE: return "a bool";
    case RPT_TK_NULL: return "null";
    default: return "an error";
    }
}

static int skip_at(rpt_lex *lx, rpt_tok t, int depth)
{
    if (t == RPT_TK_ERR)
        return -1;
    if (t == RPT_TK_LBRACE || t == RPT_TK_LBRACK) {
        if (depth >= RPT_LEX_DEPTH_MAX) {
            fail(lx, "nested deeper than %d", RPT_LEX_DEPTH_MAX);
            return -1;
        }
        bool first = true;
        int r;
        if (t == RPT_TK_LBRACE) {
            while ((r = rpt_lex_obj_next(lx, &first)) == 1)
                if (skip_at(lx, rpt_lex_next(lx), depth + 1))
                    return -1;
        } else {
            rpt_tok e;
            while ((r = rpt_lex_arr_next(lx, &first, &e)) == 1)
                if (skip_at(lx, e, depth + 1))
                    return -1;
        }
        return r;
    }
    if (t == RPT_TK_STR || t == RPT_TK_INT || t == RPT_TK_FLOAT || t == RPT_TK_TRUE ||
        t == RPT_TK_FALSE || t == RPT_TK_NULL)
        return 0;
    fail(lx, "expected a value, found %s", rpt_tok_phrase(t));
    return -1;
}

int rpt_lex_skip_value(rpt_lex *lx, rpt_tok t) { return skip_at(lx, t, 0); }

int rpt_lex_obj_next(rpt_lex *lx, bool *first)
{
    rpt_tok t = rpt_lex_next(lx);
    if (t == RPT_TK_ERR)
        return -1;
    if (t == RPT_TK_RBRACE)
        return 0;
    if (!*first) {
        if (t != RPT_TK_COMMA) {
            fail(lx, "expected ',' or '}' in an object, found %s", rpt_tok_phrase(t));
            return -1;
        }
        if ((t = rpt_lex_next(lx)) == RPT_TK_ERR)
            return -1;
    }
    if (t != RPT_TK_STR) {
        fail(lx, "expected a member name, found %s", rpt_tok_phrase(t));
        return -1;
    }
    *first = false;
    rpt_tok c = rpt_lex_next(lx);
    if (c != RPT_TK_COLON) {
        if (c != RPT_TK_ERR)
            fail(lx, "expected ':' after a member name, found %s", rpt_tok_phrase(c));
        return -1;
    }
    return 1;
}

int rpt_lex_arr_next(rpt_lex *lx, bool *first, rpt_tok *out)
{
    rpt_tok t = rpt_lex_next(lx);
    if (t == RPT_TK_ERR)
        return -1;
    if (t == RPT_TK_RBRACK && *first)
        return 0;
    if (!*first) {
        if (t == RPT_TK_RBRACK)
            return 0;
        if (t != RPT_TK_COMMA) {
            fail(lx, "expected ',' or ']' in a list, found %s", rpt_tok_phrase(t));
            return -1;
        }
        if ((t = rpt_lex_next(lx)) == RPT_TK_ERR)
            return -1;
    }
    *first = false;
    *out = t;
    return 1;
}

int rpt_lex_end_line(rpt_lex *lx)
{
    rpt_tok t = rpt_lex_next(lx);
    if (t == RPT_TK_EOL || t == RPT_TK_EOF)
        return 0;
    if (t != RPT_TK_ERR)
        fail(lx, "more after the line's value: %s", rpt_tok_phrase(t));
    return -1;
}
