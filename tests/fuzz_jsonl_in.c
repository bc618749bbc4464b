/* tests/fuzz_jsonl_in.c — libFuzzer target for the JSON-lines reader of
 * `cbt replay` (cli/jsonl_in.c). Built and run by scripts/fuzz.sh.
 *
 * Invariants checked on arbitrary bytes (the input is one line, copied to a
 * heap block of exactly its size, so ASan catches any read past it):
 *   - cbt_jl_parse returns 0 or -1, and on -1 a message starting "column ";
 *   - on 0, the node tree is consistent (every subtree inside its parent's,
 *     the top one covering all), every key and string lies inside the
 *     buffer, is NUL-terminated, and is valid UTF-8 (escapes decode to it);
 *   - parsing is deterministic: a second copy parses to the same result.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/jsonl_in.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static cbt_jl_doc g_doc;

static int valid_utf8(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3
                                 : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (!len || i + len > n)
            return 0;
        for (size_t k = 1; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
        i += len;
    }
    return 1;
}

static int inside(const char *p, uint32_t len, const char *buf, size_t size)
{
    return p >= buf && p + len < buf + size + 1 && p[len] == '\0';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > CBT_JL_LINE_MAX)
        return 0;
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    char err[128];
    int rc = cbt_jl_parse(buf, size, &g_doc, err, sizeof err);
    if (rc != 0 && rc != -1)
        abort();
    if (rc == -1 && strncmp(err, "column ", 7) != 0)
        abort();
    if (rc == 0) {
        if (g_doc.n < 1 || g_doc.nodes[0].end != g_doc.n)
            abort();
        for (uint32_t i = 0; i < g_doc.n; i++) {
            const cbt_jl_node *nd = &g_doc.nodes[i];
            if (nd->end <= i || nd->end > g_doc.n)
                abort();
            if ((nd->type == CBT_JL_ARRAY || nd->type == CBT_JL_OBJECT)) {
                for (uint32_t c = i + 1; c < nd->end; c = g_doc.nodes[c].end) {
                    if (g_doc.nodes[c].end > nd->end)
                        abort();
                    if ((nd->type == CBT_JL_OBJECT) != (g_doc.nodes[c].key != NULL))
                        abort();
                }
            } else if (nd->end != i + 1) {
                abort();
            }
            if (nd->key && (!inside(nd->key, nd->key_len, buf, size) ||
                            !valid_utf8((const unsigned char *)nd->key, nd->key_len)))
                abort();
            if (nd->type == CBT_JL_STR && (!inside(nd->str, nd->str_len, buf, size) ||
                                           !valid_utf8((const unsigned char *)nd->str, nd->str_len)))
                abort();
        }
    }
    /* deterministic */
    uint32_t n1 = g_doc.n;
    memcpy(buf, data, size);
    if (cbt_jl_parse(buf, size, &g_doc, err, sizeof err) != rc || (rc == 0 && g_doc.n != n1))
        abort();
    free(buf);
    return 0;
}
