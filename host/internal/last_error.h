/* host/internal/last_error.h — the per-thread detail behind cbt_last_error()
 * (cbt/status.h), written by the calls that say more than their code. */
#ifndef CBT_HOST_INTERNAL_LAST_ERROR_H
#define CBT_HOST_INTERNAL_LAST_ERROR_H

#include <stdarg.h>
#include <stddef.h>

/* This thread's detail: the sentence (printf-style, cut to 255 bytes) and
 * the config field it names (a string literal, or NULL for none). */
void cbt_last_error_set_(const char *field, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void cbt_last_error_vset_(const char *field, const char *fmt, va_list ap);

/* The same, written only when cbt_last_error() is read: `fmt(buf, size,
 * arg)` fills the sentence then. For details set on a hot path (a full
 * name table refusing a publish's key): setting one costs two stores. */
typedef void (*cbt_last_error_fmt_)(char *buf, size_t size, unsigned arg);
void cbt_last_error_defer_(const char *field, cbt_last_error_fmt_ fmt, unsigned arg);

/* Forget this thread's detail (a call that writes it starts with this). */
void cbt_last_error_clear_(void);

#endif /* CBT_HOST_INTERNAL_LAST_ERROR_H */
