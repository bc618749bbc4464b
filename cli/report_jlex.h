/* cli/report_jlex.h — owns the pull JSON reader of `cbt report`: tokens of a
 * JSON-lines file, read straight from a FILE through one buffer, for inputs
 * whose lines have no useful bound (an OpenTelemetry Collector file exporter
 * writes a whole batch, megabytes, on one line).
 *
 * The caller walks the document token by token (rpt_lex_obj_next,
 * rpt_lex_arr_next, rpt_lex_skip_value) and keeps only what it wants, so
 * memory does not grow with the line: one read buffer (RPT_LEX_BUF bytes)
 * and one string buffer (RPT_LEX_STR_MAX bytes: a longer string is kept cut
 * and `str_cut` says so). Nesting is bounded (RPT_LEX_DEPTH_MAX) and so is a
 * number's text. A newline always ends a line: JSON strings cannot hold a raw
 * one, so after any error rpt_lex_skip_line() finds the next line and the
 * reader carries on. Every input ends in tokens or an error message; no call
 * can crash or loop (tests/test_report.c feeds it garbage).
 *
 * What it checks is JSON's grammar (RFC 8259): literals, numbers (no leading
 * zeros, '+', NaN), strings (no raw control characters; escapes, \u with
 * surrogate pairs; a lone surrogate becomes U+FFFD), commas and colons where
 * they belong. It does not check UTF-8 or duplicate member names: it reads
 * for a report, it is not a validator. Single-threaded.
 */
#ifndef CBT_CLI_REPORT_JLEX_H
#define CBT_CLI_REPORT_JLEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define RPT_LEX_BUF (256u * 1024u) /* bytes read at a time */
#define RPT_LEX_STR_MAX 4096u      /* bytes of one decoded string kept */
#define RPT_LEX_DEPTH_MAX 64       /* nesting of a skipped value */
#define RPT_LEX_NUM_MAX 64         /* characters of one number */

typedef enum rpt_tok {
    RPT_TK_ERR = -1, /* lx->err says what (and the line is not over: rpt_lex_skip_line) */
    RPT_TK_EOF = 0,
    RPT_TK_EOL,      /* a '\n' */
    RPT_TK_LBRACE,
    RPT_TK_RBRACE,
    RPT_TK_LBRACK,
    RPT_TK_RBRACK,
    RPT_TK_COLON,
    RPT_TK_COMMA,
    RPT_TK_STR,      /* lx->str, lx->str_len (NUL-terminated; may hold a NUL) */
    RPT_TK_INT,      /* lx->i; an integer outside int64 has lx->big set and lx->d */
    RPT_TK_FLOAT,    /* lx->d */
    RPT_TK_TRUE,
    RPT_TK_FALSE,
    RPT_TK_NULL,
} rpt_tok;

typedef struct rpt_lex {
    FILE *f;               /* the caller's */
    unsigned char *buf;    /* bufsize bytes */
    size_t bufsize;
    size_t pos, len;
    bool eof, io_error;
    uint64_t line;         /* 1-based line of the next byte */
    uint64_t tok_line;     /* line of the last token */
    uint64_t off, line_off, tok_col; /* bytes consumed; where the line began; 1-based column */
    uint64_t bytes;        /* bytes read from the file */
    char str[RPT_LEX_STR_MAX + 1];
    size_t str_len;
    bool str_cut;          /* the string was longer than RPT_LEX_STR_MAX: kept cut */
    bool big;
    int64_t i;
    double d;              /* RPT_TK_FLOAT, and a big RPT_TK_INT */
    rpt_tok last;          /* the last token returned */
    char err[128];
} rpt_lex;

/* Set up on f (stays the caller's). -1: the buffer could not be allocated. */
int rpt_lex_init(rpt_lex *lx, FILE *f);
/* The same with a read buffer of `bufsize` bytes (tests: a token, a string,
 * an escape cut at every byte by the buffer's end). */
int rpt_lex_init_buf(rpt_lex *lx, FILE *f, size_t bufsize);
void rpt_lex_free(rpt_lex *lx);

/* The next token. Whitespace other than '\n' is skipped. */
rpt_tok rpt_lex_next(rpt_lex *lx);

/* Skip the rest of the current line, its '\n' included (nothing when the
 * last token was that '\n' or the end). */
void rpt_lex_skip_line(rpt_lex *lx);

/* Skip a value whose first token is t (already read). 0, or -1 (lx->err). */
int rpt_lex_skip_value(rpt_lex *lx, rpt_tok t);

/* Members of an object whose '{' was read: 1 with the member's name in
 * lx->str and its ':' read (read or skip the value next), 0 at its '}', -1
 * on an error. `*first` starts true. */
int rpt_lex_obj_next(rpt_lex *lx, bool *first);

/* Elements of an array whose '[' was read: 1 with the element's first token
 * in *t, 0 at its ']', -1 on an error. `*first` starts true. */
int rpt_lex_arr_next(rpt_lex *lx, bool *first, rpt_tok *t);

/* After a line's value: the rest must be whitespace up to '\n' or the end.
 * 0, or -1 (lx->err). */
int rpt_lex_end_line(rpt_lex *lx);

/* A token for messages: "'}'", "a string", "the end of the line", ... */
const char *rpt_tok_phrase(rpt_tok t);

#endif /* CBT_CLI_REPORT_JLEX_H */
