/* exporter/console_tree.c — owns printing span trees (see tree.h). */
#include "cbt/tree.h"

#include <stdlib.h>
#include <string.h>

#include "cbt/array.h"

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

/* An array in short: its first ARRAY_SHOWN elements, then, when there are
 * more, how many in all: [1,2,3,4 ... 131072 ints]; strings cut at 24 bytes. */
#define ARRAY_SHOWN 4

static void print_array(FILE *f, const cbt_attr *a)
{
    cbt_array arr;
    if (!cbt_attr_array(a, &arr)) {
        fprintf(f, "[?]"); /* not in the store: nothing to show */
        return;
    }
    static const char *const kinds[] = {"", "ints", "floats", "bools", "strings"};
    cbt_array_iter it;
    cbt_array_iter_init(&it, &arr);
    fputc('[', f);
    for (uint32_t i = 0; i < arr.count && i < ARRAY_SHOWN; i++) {
        if (i)
            fputc(',', f);
        int64_t iv;
        double dv;
        bool bv;
        const char *sv;
        size_t sn;
        switch (arr.type) {
        case CBT_ARRAY_I64:
            if (cbt_array_next_i64(&it, &iv))
                fprintf(f, "%lld", (long long)iv);
            break;
        case CBT_ARRAY_F64:
            if (cbt_array_next_f64(&it, &dv))
                fprintf(f, "%.3g", dv);
            break;
        case CBT_ARRAY_BOOL:
            if (cbt_array_next_bool(&it, &bv))
                fputs(bv ? "true" : "false", f);
            break;
        default:
            if (cbt_array_next_str(&it, &sv, &sn))
                fprintf(f, "\"%.*s%s\"", (int)(sn < 24 ? sn : 24), sv, sn > 24 ? "..." : "");
            break;
        }
    }
    if (arr.count > ARRAY_SHOWN)
        fprintf(f, " ... %u %s", (unsigned)arr.count, arr.type <= 4 ? kinds[arr.type] : "");
    fputc(']', f);
}

static void print_attrs(FILE *f, const cbt_span *s)
{
    uint32_t na = s->n_attrs < CBT_SPAN_ATTR_MAX ? s->n_attrs : CBT_SPAN_ATTR_MAX;
    for (uint32_t i = 0; i < na; i++) {
        const cbt_attr *a = &s->attrs[i];
        if (a->owner != 0)
            continue; /* a span event's: named below */
        if ((a->key == CBT_N_SESSION_ID || a->key == CBT_N_REQUEST_ID) && has_parent(s))
            continue; /* children repeat the root's session / request id */
        fprintf(f, " %s=", cbt_name_str(a->key));
        switch (a->type) {
        case CBT_META_I64: fprintf(f, "%lld", (long long)a->v.i64); break;
        case CBT_META_F64: fprintf(f, "%.3g", a->v.f64); break;
        case CBT_META_BOOL: fprintf(f, "%s", a->v.b ? "true" : "false"); break;
        case CBT_META_STR: fprintf(f, "%.*s", (int)a->str_len, s->arena + a->str_off); break;
        case CBT_META_ARRAY: print_array(f, a); break;
        default: break;
        }
    }
    uint32_t ne = s->n_events < CBT_SPAN_EVENTS_MAX ? s->n_events : CBT_SPAN_EVENTS_MAX;
    for (uint32_t e = 0; e < ne; e++)
        fprintf(f, " [event %s +%.3f ms]", cbt_name_str(s->events[e].name),
                (double)(int64_t)(s->events[e].time_ns - s->start_ns) / 1e6);
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

/* ---- waterfalls of the slowest traces ------------------------------------------ */

typedef struct trace_ix {
    const cbt_span *root;
    uint64_t end; /* the latest end of any span of the trace */
} trace_ix;

static int cmp_slowest(const void *a, const void *b)
{
    const trace_ix *x = a, *y = b;
    uint64_t dx = x->end - x->root->start_ns, dy = y->end - y->root->start_ns;
    return (dx < dy) - (dx > dy);
}

static int depth_of(const cbt_span *s, const cbt_span *spans, size_t n)
{
    int d = 0;
    const cbt_span *cur = s;
    while (has_parent(cur) && d < 8) {
        const cbt_span *p = NULL;
        for (size_t i = 0; i < n && !p; i++)
            if (memcmp(spans[i].ctx.span_id, cur->parent_span_id, 8) == 0 &&
                memcmp(spans[i].ctx.trace_id, cur->ctx.trace_id, 16) == 0)
                p = &spans[i];
        if (!p)
            break;
        cur = p;
        d++;
    }
    return d;
}

int cbt_waterfall_print(FILE *f, const cbt_span *spans, size_t n, size_t k, unsigned width)
{
    if (n == 0 || k == 0)
        return 0;
    if (width < 10)
        width = 10;
    trace_ix *tr = calloc(n, sizeof *tr);
    const cbt_span **order = malloc(n * sizeof *order);
    if (!tr || !order) {
        free(tr);
        free(order);
        return -1;
    }
    size_t nt = 0;
    for (size_t i = 0; i < n; i++)
        if (!has_parent(&spans[i]))
            tr[nt++].root = &spans[i];
    for (size_t t = 0; t < nt; t++) {
        tr[t].end = tr[t].root->end_ns;
        for (size_t i = 0; i < n; i++)
            if (memcmp(spans[i].ctx.trace_id, tr[t].root->ctx.trace_id, 16) == 0 &&
                spans[i].end_ns > tr[t].end)
                tr[t].end = spans[i].end_ns;
    }
    qsort(tr, nt, sizeof *tr, cmp_slowest);
    int printed = 0;
    for (size_t t = 0; t < nt && (size_t)printed < k; t++) {
        const cbt_span *root = tr[t].root;
        uint64_t t0 = root->start_ns, total = tr[t].end - t0;
        if (total == 0)
            total = 1;
        const cbt_attr *sid = cbt_span_attr(root, CBT_N_SESSION_ID);
        if (!sid || sid->type != CBT_META_STR)
            sid = cbt_span_attr(root, CBT_N_REQUEST_ID);
        if (sid && sid->type != CBT_META_STR)
            sid = NULL;
        fprintf(f, "%.*s  %.3f ms end to end\n", sid ? (int)sid->str_len : 4,
                sid ? cbt_attr_str(root, sid) : "????", (double)total / 1e6);
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (memcmp(spans[i].ctx.trace_id, root->ctx.trace_id, 16) == 0)
                order[m++] = &spans[i];
        qsort(order, m, sizeof *order, cmp_start);
        /* the name column fits the deepest, longest name of this trace */
        int col = 22;
        for (size_t i = 0; i < m; i++) {
            int w = 2 * depth_of(order[i], spans, n) + (int)strlen(cbt_name_str(order[i]->name));
            if (w > col && w <= 60)
                col = w;
        }
        for (size_t i = 0; i < m; i++) {
            const cbt_span *s = order[i];
            int d = depth_of(s, spans, n);
            unsigned a = (unsigned)((double)(s->start_ns - t0) / (double)total * width);
            unsigned b = (unsigned)((double)(s->end_ns - t0) / (double)total * width);
            if (a >= width)
                a = width - 1;
            if (b <= a)
                b = a + 1;
            if (b > width)
                b = width;
            fprintf(f, "  %*s%-*s |", 2 * d, "", col - 2 * d, cbt_name_str(s->name));
            for (unsigned c = 0; c < width; c++)
                fputs(c >= a && c < b ? "\u2588" : " ", f);
            fprintf(f, "| %9.3f ms\n", (double)(s->end_ns - s->start_ns) / 1e6);
        }
        printed++;
    }
    free(tr);
    free(order);
    return printed;
}
