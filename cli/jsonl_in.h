/* cli/jsonl_in.h — owns reading JSON lines: a bounded line reader and a
 * small strict JSON parser for one line (used by `cbt replay`; never part of
 * the library).
 *
 * Strict means RFC 8259 and nothing more: no comments, no trailing commas,
 * no single quotes, no NaN/Infinity, no leading zeros or '+', strings of
 * valid UTF-8 without raw control characters, \u escapes with surrogates
 * paired, exactly one value per line (whitespace around it allowed), and
 * additionally no duplicate member names in an object.
 *
 * Bounded: a line holds at most CBT_JL_LINE_MAX bytes (a longer one is
 * reported and skipped to its newline without being stored), a document at
 * most CBT_JL_NODES_MAX values nested at most CBT_JL_DEPTH_MAX deep, a
 * number at most CBT_JL_NUMBER_MAX characters. Nothing is allocated per
 * line: the reader owns one buffer, and the parser decodes strings in place
 * into it and fills a caller-owned node array. Every input, however
 * malformed, ends in a value or an error message; neither call can crash or
 * loop (tests/test_jsonl_in.c, tests/fuzz_jsonl_in.c).
 */
#ifndef CBT_HOST_JSONL_IN_H
#define CBT_HOST_JSONL_IN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A line and its values are sized for LMCache 0.5.7's mp.lookup: its
 * token_ids, a 128 k-token prompt, is a 128 k-value array (about 1.5 MB of
 * JSON with ids up to 2^32). The reader's buffer is this big; a document's
 * nodes take 48 bytes each (12 MiB for all of them), touched only as used. */
#define CBT_JL_LINE_MAX (1u << 22)  /* bytes of one line, without its '\n' */
#define CBT_JL_NODES_MAX (1u << 18) /* values in one line's document */
#define CBT_JL_DEPTH_MAX 32        /* nesting of arrays and objects */
#define CBT_JL_NUMBER_MAX 64       /* characters of one number */

typedef enum cbt_jl_type {
    CBT_JL_NULL = 0,
    CBT_JL_BOOL,
    CBT_JL_INT,    /* an integer literal (no '.', no exponent) that fits int64 */
    CBT_JL_BIGINT, /* an integer literal outside int64; v.f holds its value */
    CBT_JL_FLOAT,  /* a number with a fraction or an exponent */
    CBT_JL_STR,
    CBT_JL_ARRAY,
    CBT_JL_OBJECT,
} cbt_jl_type;

/* One value. Nodes are stored in document order; a container's children
 * follow it, and `end` is the index one past its whole subtree, so the
 * children of node i are i+1, then nodes[i+1].end, ... while below
 * nodes[i].end. */
typedef struct cbt_jl_node {
    uint8_t type;      /* cbt_jl_type */
    const char *key;   /* member name when the parent is an object, else NULL */
    uint32_t key_len;  /* decoded, NUL-terminated; may hold a NUL (\u0000) */
    const char *str;   /* CBT_JL_STR: decoded bytes, NUL-terminated */
    uint32_t str_len;  /* may hold a NUL (\u0000): check before using as a C string */
    uint32_t end;
    union {
        bool b;
        int64_t i;
        double f;
    } v;
} cbt_jl_node;

typedef struct cbt_jl_doc {
    uint32_t n; /* nodes used; nodes[0] is the top-level value */
    cbt_jl_node nodes[CBT_JL_NODES_MAX];
} cbt_jl_doc;

/* Parse buf[0, len) as one JSON value. The buffer is modified: strings are
 * decoded into it, and the nodes point into it (valid until it changes).
 * Returns 0, or -1 with a one-line message in err (at most errcap bytes,
 * NUL-terminated) that starts with the 1-based column of the problem:
 * "column 17: expected ':' after an object member name". Cost: one pass,
 * plus a duplicate-name check per object member (quadratic in the members
 * of one object, at most CBT_JL_NODES_MAX). Thread-safe (no state). */
int cbt_jl_parse(char *buf, size_t len, cbt_jl_doc *doc, char *err, size_t errcap);

/* The member of object node `obj` named `key` (a C string), or NULL. */
const cbt_jl_node *cbt_jl_member(const cbt_jl_doc *doc, uint32_t obj, const char *key);

/* A node type with its article ("a string", "a list", "an object", "null"),
 * for messages. */
const char *cbt_jl_type_phrase(cbt_jl_type t);

/* ---- lines ---------------------------------------------------------------- */

typedef struct cbt_jl_reader {
    FILE *f;
    char *buf;       /* CBT_JL_LINE_MAX + 1 bytes */
    size_t len;      /* bytes of the current line (without '\n'; buf[len] == 0) */
    uint64_t lineno; /* 1-based number of the current line */
} cbt_jl_reader;

typedef enum cbt_jl_read {
    CBT_JL_EOF = 0,      /* no more lines */
    CBT_JL_LINE = 1,     /* buf[0, len) is the next line */
    CBT_JL_TOO_LONG = 2, /* the next line is longer than CBT_JL_LINE_MAX bytes: it was
                            read to its end and dropped (len = CBT_JL_LINE_MAX) */
    CBT_JL_IO = 3,       /* reading failed (errno is set) */
} cbt_jl_read;

/* Set up a reader on f (which stays the caller's). -1 when the buffer
 * cannot be allocated. */
int cbt_jl_reader_init(cbt_jl_reader *r, FILE *f);
void cbt_jl_reader_free(cbt_jl_reader *r);

/* Read the next line (ending at '\n' or at the end of the file; a '\r'
 * before the '\n' is kept: JSON reads it as whitespace). Bytes are taken as
 * they are, NUL included (the parser refuses it). */
cbt_jl_read cbt_jl_next(cbt_jl_reader *r);

#endif /* CBT_HOST_JSONL_IN_H */
