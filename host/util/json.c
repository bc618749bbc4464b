/* host/util/json.c — owns the bounded JSON writer (see json.h). */
#include "internal/json.h"

#include "cbt/array.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cbt_jbuf_raw(cbt_jbuf *b, const char *s, size_t n)
{
    if (b->need < b->cap) {
        size_t room = b->cap - b->need;
        memcpy(b->p + b->need, s, n < room ? n : room);
    }
    b->need += n;
}

void cbt_jbuf_cstr(cbt_jbuf *b, const char *s) { cbt_jbuf_raw(b, s, strlen(s)); }

void cbt_jbuf_fmt(cbt_jbuf *b, const char *fmt, ...)
{
    size_t room = b->need < b->cap ? b->cap - b->need : 0;
    char dummy[1];
    va_list ap;
    va_start(ap, fmt);
    /* vsnprintf NUL-terminates within `room`; the NUL is overwritten by the
     * next write or set by the caller */
    int n = vsnprintf(room ? b->p + b->need : dummy, room ? room : sizeof dummy, fmt, ap);
    va_end(ap);
    if (n > 0)
        b->need += (size_t)n;
}

size_t cbt_utf8_seq_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned min;
    if ((c & 0xE0) == 0xC0) {
        len = 2;
        min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3;
        min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    unsigned cp = c & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0; /* overlong, out of range, or a surrogate */
    return len;
}

void cbt_jbuf_str(cbt_jbuf *b, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    cbt_jbuf_raw(b, "\"", 1);
    size_t i = 0;
    while (i < n) {
        unsigned char c = u[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            cbt_jbuf_raw(b, e, 2);
            i++;
        } else if (c < 0x20) {
            cbt_jbuf_fmt(b, "\\u%04x", c);
            i++;
        } else if (c < 0x80) {
            cbt_jbuf_raw(b, (const char *)&u[i], 1);
            i++;
        } else {
            size_t l = cbt_utf8_seq_len(u + i, n - i);
            if (l == 0) {
                cbt_jbuf_raw(b, "\\ufffd", 6);
                i++;
            } else {
                cbt_jbuf_raw(b, (const char *)&u[i], l);
                i += l;
            }
        }
    }
    cbt_jbuf_raw(b, "\"", 1);
}

void cbt_jbuf_hex(cbt_jbuf *b, const uint8_t *p, size_t n)
{
    static const char hx[] = "0123456789abcdef";
    cbt_jbuf_raw(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        char two[2] = {hx[p[i] >> 4], hx[p[i] & 15]};
        cbt_jbuf_raw(b, two, 2);
    }
    cbt_jbuf_raw(b, "\"", 1);
}

void cbt_jbuf_f64(cbt_jbuf *b, double v)
{
    if (isnan(v)) {
        cbt_jbuf_cstr(b, "\"NaN\"");
    } else if (isinf(v)) {
        cbt_jbuf_cstr(b, v > 0 ? "\"Infinity\"" : "\"-Infinity\"");
    } else {
        char tmp[40];
        /* shortest of %.15g / %.17g that reads back exactly */
        int n = snprintf(tmp, sizeof tmp, "%.15g", v);
        if (strtod(tmp, NULL) != v)
            n = snprintf(tmp, sizeof tmp, "%.17g", v);
        if (n > 0 && !strpbrk(tmp, ".eEn"))
            cbt_jbuf_fmt(b, "%s.0", tmp);
        else
            cbt_jbuf_raw(b, tmp, (size_t)(n > 0 ? n : 0));
    }
}

void cbt_jbuf_array(cbt_jbuf *b, const cbt_array *arr)
{
    cbt_array_iter it;
    cbt_array_iter_init(&it, arr);
    cbt_jbuf_raw(b, "[", 1);
    bool first = true;
    switch (arr->type) {
    case CBT_ARRAY_I64: {
        int64_t v;
        while (cbt_array_next_i64(&it, &v)) {
            if (!first)
                cbt_jbuf_raw(b, ",", 1);
            first = false;
            char tmp[24];
            int n = snprintf(tmp, sizeof tmp, "%lld", (long long)v);
            cbt_jbuf_raw(b, tmp, (size_t)(n > 0 ? n : 0));
        }
        break;
    }
    case CBT_ARRAY_F64: {
        double v;
        while (cbt_array_next_f64(&it, &v)) {
            if (!first)
                cbt_jbuf_raw(b, ",", 1);
            first = false;
            cbt_jbuf_f64(b, v);
        }
        break;
    }
    case CBT_ARRAY_BOOL: {
        bool v;
        while (cbt_array_next_bool(&it, &v)) {
            if (!first)
                cbt_jbuf_raw(b, ",", 1);
            first = false;
            cbt_jbuf_cstr(b, v ? "true" : "false");
        }
        break;
    }
    default: {
        const char *v;
        size_t n;
        while (cbt_array_next_str(&it, &v, &n)) {
            if (!first)
                cbt_jbuf_raw(b, ",", 1);
            first = false;
            cbt_jbuf_str(b, v, n);
        }
        break;
    }
    }
    cbt_jbuf_raw(b, "]", 1);
}

void cbt_jbuf_attr(cbt_jbuf *b, const cbt_span *s, const cbt_attr *a)
{
    cbt_jbuf_str(b, cbt_name_str(a->key), cbt_name_len(a->key));
    cbt_jbuf_raw(b, ":", 1);
    switch (a->type) {
    case CBT_META_I64: cbt_jbuf_fmt(b, "%lld", (long long)a->v.i64); break;
    case CBT_META_F64: cbt_jbuf_f64(b, a->v.f64); break;
    case CBT_META_BOOL: cbt_jbuf_cstr(b, a->v.b ? "true" : "false"); break;
    case CBT_META_STR:
        if ((uint32_t)a->str_off + a->str_len <= CBT_SPAN_STR_ARENA)
            cbt_jbuf_str(b, s->arena + a->str_off, a->str_len);
        else
            cbt_jbuf_cstr(b, "null"); /* not a value of this arena */
        break;
    case CBT_META_ARRAY: {
        cbt_array arr;
        if (cbt_attr_array(a, &arr))
            cbt_jbuf_array(b, &arr);
        else
            cbt_jbuf_cstr(b, "null"); /* not an array of the store */
        break;
    }
    default: cbt_jbuf_cstr(b, "null"); break;
    }
}
