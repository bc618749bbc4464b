/* exporter/tree.c — owns printing span trees (see tree.h). */
#include "tree.h"

#include <stdlib.h>
#include <string.h>

typedef struct node {
    const cbt_span *s;
    int first_child, next_sibling;
} node;

static int cmp_start(const void *a, const void *b)
{
    const cbt_span *x = *(const cbt_span *const *)a, *y = *(const cbt_span *const *)b;
    return (x->start_ns > y->start_ns) - (x->start_ns < y->start_ns);
}

static const uint8_t k_zero_id[8];

static int has_parent(const cbt_span *s) { return memcmp(s->parent_span_id, k_zero_id, 8) != 0; }

static void print_attrs(FILE *f, const cbt_span *s)
{
    for (uint16_t i = 0; i < s->n_attrs; i++) {
        const cbt_attr *a = &s->attrs[i];
        if (a->key == CBT_N_SESSION_ID && has_parent(s))
            continue; /* children repeat the root's session id */
        fprintf(f, " %s=", cbt_name_str(a->key));
        switch (a->type) {
        case CBT_META_I64: fprintf(f, "%lld", (long long)a->v.i64); break;
        case CBT_META_F64: fprintf(f, "%.3g", a->v.f64); break;
        case CBT_META_BOOL: fprintf(f, "%s", a->v.b ? "true" : "false"); break;
        case CBT_META_STR: fprintf(f, "%.*s", (int)a->str_len, s->arena + a->str_off); break;
        default: break;
        }
    }
    if (s->flags & CBT_SPANF_INCOMPLETE)
        fprintf(f, " (incomplete)");
}

static void print_node(FILE *f, node *nodes, int i, uint64_t t0, const char *prefix, int last,
                       int depth)
{
    const cbt_span *s = nodes[i].s;
    double off = (double)(int64_t)(s->start_ns - t0) / 1e6;
    double dur = (double)(s->end_ns - s->start_ns) / 1e6;
    if (depth == 0)
        fprintf(f, "%s", cbt_name_str(s->name));
    else
        fprintf(f, "%s%s %s", prefix, last ? "└─" : "├─", cbt_name_str(s->name));
    fprintf(f, "  +%.3f ms  %.3f ms", off, dur);
    print_attrs(f, s);
    fputc('\n', f);
    /* the children's prefix: ours plus one column; trees deeper than the
     * buffer keep the prefix they have */
    char sub[256];
    const char *col = depth == 0 ? "" : (last ? "   " : "│  ");
    size_t lp = strlen(prefix), lc = strlen(col);
    if (lp + lc < sizeof sub) {
        memcpy(sub, prefix, lp);
        memcpy(sub + lp, col, lc + 1);
    } else {
        memcpy(sub, prefix, lp < sizeof sub ? lp + 1 : sizeof sub);
        sub[sizeof sub - 1] = '\0';
    }
    for (int c = nodes[i].first_child; c >= 0; c = nodes[c].next_sibling)
        print_node(f, nodes, c, t0, sub, nodes[c].next_sibling < 0, depth + 1);
}

int cbt_tree_print(FILE *f, const cbt_span *spans, size_t n, size_t max_traces)
{
    if (n == 0)
        return 0;
    const cbt_span **order = malloc(n * sizeof *order);
    node *nodes = malloc(n * sizeof *nodes);
    if (!order || !nodes) {
        free(order);
        free(nodes);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        order[i] = &spans[i];
    qsort(order, n, sizeof *order, cmp_start);
    for (size_t i = 0; i < n; i++) {
        nodes[i].s = order[i];
        nodes[i].first_child = -1;
        nodes[i].next_sibling = -1;
    }
    /* link children to parents, keeping start order (append at the tail);
     * n is small in the demo, so a quadratic parent search is fine */
    int *tail = malloc(n * sizeof *tail);
    char *is_root = calloc(n, 1);
    if (!tail || !is_root) {
        free(order);
        free(nodes);
        free(tail);
        free(is_root);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        tail[i] = -1;
    for (size_t i = 0; i < n; i++) {
        const cbt_span *s = nodes[i].s;
        int parent = -1;
        if (has_parent(s)) {
            for (size_t j = 0; j < n && parent < 0; j++)
                if (memcmp(nodes[j].s->ctx.span_id, s->parent_span_id, 8) == 0 &&
                    memcmp(nodes[j].s->ctx.trace_id, s->ctx.trace_id, 16) == 0)
                    parent = (int)j;
        }
        if (parent < 0) {
            is_root[i] = has_parent(s) ? 2 : 1;
            continue;
        }
        if (tail[parent] < 0)
            nodes[parent].first_child = (int)i;
        else
            nodes[tail[parent]].next_sibling = (int)i;
        tail[parent] = (int)i;
    }
    int printed = 0;
    for (size_t i = 0; i < n && (max_traces == 0 || (size_t)printed < max_traces); i++) {
        if (!is_root[i])
            continue;
        if (is_root[i] == 2)
            fprintf(f, "(orphan) ");
        print_node(f, nodes, (int)i, nodes[i].s->start_ns, "", 1, 0);
        printed++;
    }
    free(order);
    free(nodes);
    free(tail);
    free(is_root);
    return printed;
}
