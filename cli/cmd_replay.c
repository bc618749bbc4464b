/* cli/cmd_replay.c — owns `cbt replay` (cmd_replay.h): read an event file, build
 * each line's cbt_event, publish them in file order from this one thread
 * through a tracer with the MP and CacheBlend subscribers, write the spans.
 *
 * One line is one event (docs/cli.md, "cbt replay"):
 *   {"type": "mp.store.start", "ts_ns": 1700000000123456789, "session": "req-1",
 *    "pair": 0, "meta": {"device": "cuda:0", "engine_id": 1}, "traceparent": "00-..."}
 * type and ts_ns are required; every other field is optional; any other
 * field is refused. The event keeps ts_ns (CBT_EVF_EXPLICIT_TS), so the spans
 * carry the file's times, and one publishing thread keeps the file's order
 * (the harvester dispatches one lane in publish order).
 *
 * A line that cbt cannot take is an error naming the file, the line and the
 * problem: not JSON (jsonl_in.c says where), an unknown event type, a field
 * of the wrong type, a value cbt cannot hold (an object, null, an integer
 * outside 64 bits, a string with a NUL, a list that mixes types or holds
 * anything but ints, floats, bools or strings), a string or a session id
 * too long for this build's event, more values than it holds. By default
 * the first one stops the replay (the spans of the events before it are
 * still written); --keep-going skips each such line, counts it and goes on;
 * --drop-unfit publishes an event whose values do not all fit, without the
 * ones that do not (counted per key, and with --dropped listed one a line),
 * instead of refusing the line.
 *
 * A JSON list in "meta" is an array value (cbt/event.h): all ints, all
 * floats (a number with a fraction or an exponent), all bools or all
 * strings; [] is an empty int array. Its elements are staged in one buffer
 * per line (a line holds at most CBT_JL_NODES_MAX values, so it never runs
 * out) that stays put until the event is published.
 */
#include "cmd_replay.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cbt.h"
#include "cli_sinks.h"
#include "jsonl_in.h"

#define FLUSH_EVERY 1024u    /* events published between waits for the harvester */
#define FLUSH_TIMEOUT_MS 30000u
#define ERRORS_SHOWN 20u     /* with --keep-going: line errors printed before only counting */
#define DROP_KEYS_MAX 64u    /* distinct keys counted for the dropped-values line */

typedef struct replay_opts {
    const char *events; /* "-" is stdin */
    const char *spans;  /* NULL or "-" is stdout */
    uint32_t root_end; /* cbt_root_end; 0: CBT_MP_ROOT_END or the default */
    int token_trace;   /* --token-trace: the MP path builds mp.request.trace */
    int keep_going;
    int drop_unfit;
    const char *dropped; /* --dropped FILE: one JSON line per dropped value */
} replay_opts;

typedef struct drop_count {
    cbt_name key;
    uint64_t n;
} drop_count;

typedef struct replay_state {
    const replay_opts *o;
    const char *file; /* for messages */
    uint64_t lines, blank, events_read, published, refused, skipped, values_dropped;
    uint64_t errors_printed;
    drop_count drops[DROP_KEYS_MAX];
    uint32_t n_drops;
    uint64_t drops_other; /* keys past DROP_KEYS_MAX */
    FILE *dropped_f;      /* --dropped */
    /* the current line's array elements, until its event is published:
     * slots [0, staged) are taken, in the array of the element type (pages
     * are touched only as used) */
    uint32_t staged;
    int64_t stage_i[CBT_JL_NODES_MAX];
    double stage_f[CBT_JL_NODES_MAX];
    const char *stage_s[CBT_JL_NODES_MAX];
    bool stage_b[CBT_JL_NODES_MAX];
    cbt_jl_doc doc;
} replay_state;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cbt replay --events FILE [--spans OUT.jsonl] [--keep-going]\n"
            "                  [--drop-unfit [--dropped FILE]]\n"
            "                  [--mp-root-end request_end|transfer_end] [--token-trace]\n"
            "\n"
            "  Publish the events of FILE (JSON lines; '-' is stdin) in file order, with\n"
            "  their own timestamps, through cbt's MP and CacheBlend span builders, and\n"
            "  write the spans as JSON lines (docs/cli.md has both formats).\n"
            "  --events FILE      the event file (required)\n"
            "  --spans OUT        the span file (default: stdout)\n"
            "  --keep-going       skip a line cbt cannot take (counted) instead of stopping\n"
            "  --drop-unfit       publish an event without the values this build's event\n"
            "                     cannot hold (more than %d values, strings over %d bytes),\n"
            "                     counted per key, instead of refusing the line\n"
            "  --dropped FILE     with --drop-unfit: one JSON line per dropped value\n"
            "                     {\"line\", \"type\", \"session\", \"key\", \"why\"}\n"
            "  --mp-root-end R    when a deferred MP root ends: request_end (its saved\n"
            "                     MP_REQUEST_END time, the default) or transfer_end (the\n"
            "                     END that cleared the last pending op, as LMCache 0.5.6)\n"
            "  --token-trace      one mp.request.trace span per mp.lookup carrying\n"
            "                     token_ids (LMCache 0.5.7's --enable-token-trace); without\n"
            "                     it, CBT_TOKEN_TRACE decides (default off)\n",
            CBT_EVENT_META_MAX, CBT_META_STR_MAX - 1);
}


/* A line error: printed (all of them without --keep-going, the first
 * ERRORS_SHOWN with it), the line counted as skipped. Returns 2. */
static int line_error(replay_state *rs, uint64_t line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int line_error(replay_state *rs, uint64_t line, const char *fmt, ...)
{
    rs->skipped++;
    if (rs->o->keep_going && rs->errors_printed >= ERRORS_SHOWN)
        return 2;
    rs->errors_printed++;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "cbt replay: %s:%" PRIu64 ": %s\n", rs->file, line, msg);
    if (rs->o->keep_going && rs->errors_printed == ERRORS_SHOWN)
        fprintf(stderr, "cbt replay: (further line errors are counted, not shown)\n");
    return 2;
}

/* A JSON string (the bytes as they are but for the escapes JSON needs; the
 * input was valid UTF-8, jsonl_in.c checked). */
static void put_json_str(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void count_drop(replay_state *rs, uint64_t line, const cbt_event *ev, cbt_name key,
                       cbt_status why)
{
    if (rs->dropped_f) {
        FILE *f = rs->dropped_f;
        const char *type = cbt_event_type_name(ev->type);
        fprintf(f, "{\"line\": %" PRIu64 ", \"type\": ", line);
        put_json_str(f, type, strlen(type));
        fputs(", \"session\": ", f);
        put_json_str(f, ev->session, ev->session_len);
        fputs(", \"key\": ", f);
        put_json_str(f, cbt_name_str(key), cbt_name_len(key));
        fprintf(f, ", \"why\": \"%s\"}\n", why == CBT_ERR_META_FULL ? "full" : "too_long");
    }
    rs->values_dropped++;
    for (uint32_t i = 0; i < rs->n_drops; i++)
        if (rs->drops[i].key == key) {
            rs->drops[i].n++;
            return;
        }
    if (rs->n_drops < DROP_KEYS_MAX)
        rs->drops[rs->n_drops++] = (drop_count){key, 1};
    else
        rs->drops_other++;
}

/* Show at most 40 bytes of a (decoded) string in a message. */
static int clip(uint32_t len) { return len > 40 ? 40 : (int)len; }

/* A JSON list as an array value on ev (the elements staged in rs until the
 * publish). CBT_OK or the setter's status; 2 (printed and counted) for a
 * list cbt cannot hold. */
static int add_array(replay_state *rs, uint64_t line, cbt_event *ev, cbt_name key,
                     const cbt_jl_node *m, cbt_status *st)
{
    const cbt_jl_doc *d = &rs->doc;
    uint32_t first = (uint32_t)(m - d->nodes) + 1, n = 0;
    uint8_t type = CBT_JL_INT; /* [] is an empty int array */
    for (uint32_t c = first; c < m->end; c = d->nodes[c].end, n++) {
        const cbt_jl_node *x = &d->nodes[c];
        if (x->type != CBT_JL_INT && x->type != CBT_JL_FLOAT && x->type != CBT_JL_BOOL &&
            x->type != CBT_JL_STR)
            return line_error(rs, line, "meta.%s[%u]: %s cannot be an array element (ints, "
                                        "floats, bools or strings only)",
                              m->key, n, cbt_jl_type_phrase((cbt_jl_type)x->type));
        if (n == 0)
            type = x->type;
        else if (x->type != type)
            return line_error(rs, line, "meta.%s[%u]: %s in a list of %ss: an array holds "
                                        "one type",
                              m->key, n, cbt_jl_type_phrase((cbt_jl_type)x->type),
                              type == CBT_JL_INT ? "int" : type == CBT_JL_FLOAT ? "float"
                              : type == CBT_JL_BOOL ? "bool" : "string");
        if (x->type == CBT_JL_STR && memchr(x->str, '\0', x->str_len))
            return line_error(rs, line, "meta.%s[%u]: a string holding a NUL character "
                                        "(\\u0000) cannot be held by a cbt event", m->key, n);
    }
    /* the line's values are at most CBT_JL_NODES_MAX, all its arrays' included */
    uint32_t at = rs->staged, k = at;
    rs->staged += n;
    for (uint32_t c = first; c < m->end; c = d->nodes[c].end, k++) {
        const cbt_jl_node *x = &d->nodes[c];
        switch (type) {
        case CBT_JL_INT: rs->stage_i[k] = x->v.i; break;
        case CBT_JL_FLOAT: rs->stage_f[k] = x->v.f; break;
        case CBT_JL_BOOL: rs->stage_b[k] = x->v.b; break;
        default: rs->stage_s[k] = x->str; break; /* decoded in place, NUL-terminated */
        }
    }
    switch (type) {
    case CBT_JL_INT: *st = cbt_event_array_i64(ev, key, &rs->stage_i[at], n); break;
    case CBT_JL_FLOAT: *st = cbt_event_array_f64(ev, key, &rs->stage_f[at], n); break;
    case CBT_JL_BOOL: *st = cbt_event_array_bool(ev, key, &rs->stage_b[at], n); break;
    default: *st = cbt_event_array_str(ev, key, &rs->stage_s[at], n); break;
    }
    return 0;
}

/* One metadata value onto ev. 0, 1 (dropped under --drop-unfit), or 2. */
static int add_meta(replay_state *rs, uint64_t line, cbt_event *ev, const cbt_jl_node *m)
{
    if (m->key_len == 0)
        return line_error(rs, line, "meta: an empty key");
    if (memchr(m->key, '\0', m->key_len))
        return line_error(rs, line, "meta: a key holds a NUL character (\\u0000)");
    cbt_name key;
    cbt_status st = cbt_intern(m->key, &key);
    if (st == CBT_ERR_META_TOO_LONG)
        return line_error(rs, line, "meta.%.*s...: a key longer than %d bytes", 40, m->key,
                          CBT_NAME_LEN_MAX - 1);
    if (st != CBT_OK)
        return line_error(rs, line, "meta.%.*s: the key cannot be interned: %s",
                          clip(m->key_len), m->key, cbt_strerror(st));
    switch (m->type) {
    case CBT_JL_INT: st = cbt_event_i64(ev, key, m->v.i); break;
    case CBT_JL_FLOAT: st = cbt_event_f64(ev, key, m->v.f); break;
    case CBT_JL_BOOL: st = cbt_event_bool(ev, key, m->v.b); break;
    case CBT_JL_STR:
        if (memchr(m->str, '\0', m->str_len))
            return line_error(rs, line, "meta.%s: a string holding a NUL character (\\u0000) "
                                        "cannot be held by a cbt event", m->key);
        st = cbt_event_str(ev, key, m->str);
        break;
    case CBT_JL_ARRAY: {
        int rc = add_array(rs, line, ev, key, m, &st);
        if (rc)
            return rc;
        break;
    }
    default:
        /* object, null, an integer outside 64 bits */
        return line_error(rs, line, "meta.%s: %s cannot be held by a cbt event (int, float, "
                                    "bool, string, or a list of one of those only)",
                          m->key, cbt_jl_type_phrase((cbt_jl_type)m->type));
    }
    if (st == CBT_OK)
        return 0;
    if ((st == CBT_ERR_META_FULL || st == CBT_ERR_META_TOO_LONG) && rs->o->drop_unfit) {
        count_drop(rs, line, ev, key, st);
        return 1;
    }
    if (st == CBT_ERR_META_FULL)
        return line_error(rs, line, "meta.%s: too many values: a cbt event holds %d "
                                    "(CBT_ERR_META_FULL; --drop-unfit drops the rest)",
                          m->key, CBT_EVENT_META_MAX);
    if (st == CBT_ERR_META_TOO_LONG)
        return line_error(rs, line, "meta.%s: a string of %u bytes is too long: a cbt event "
                                    "holds %d (CBT_ERR_META_TOO_LONG; --drop-unfit drops it)",
                          m->key, (unsigned)m->str_len, CBT_META_STR_MAX - 1);
    return line_error(rs, line, "meta.%s: %s", m->key, cbt_strerror(st));
}

/* One parsed line into ev. 0, or 2 (printed and counted). */
static int build_event(replay_state *rs, uint64_t line, cbt_event *ev)
{
    const cbt_jl_doc *d = &rs->doc;
    const cbt_jl_node *top = &d->nodes[0];
    rs->staged = 0; /* the previous line's event is published: its arrays are copied */
    if (top->type != CBT_JL_OBJECT)
        return line_error(rs, line, "a line must be a JSON object, not %s",
                          cbt_jl_type_phrase((cbt_jl_type)top->type));
    const cbt_jl_node *type = NULL, *ts = NULL, *session = NULL, *pair = NULL, *meta = NULL,
                      *tp = NULL;
    for (uint32_t c = 1; c < top->end; c = d->nodes[c].end) {
        const cbt_jl_node *f = &d->nodes[c];
        const char *k = f->key;
        if (!strcmp(k, "type"))
            type = f;
        else if (!strcmp(k, "ts_ns"))
            ts = f;
        else if (!strcmp(k, "session"))
            session = f;
        else if (!strcmp(k, "pair"))
            pair = f;
        else if (!strcmp(k, "meta"))
            meta = f;
        else if (!strcmp(k, "traceparent"))
            tp = f;
        else
            return line_error(rs, line, "unknown field \"%.*s\" (type, ts_ns, session, pair, "
                                        "meta and traceparent are known)",
                              clip(f->key_len), k);
        if (strlen(k) != f->key_len) /* "type\u0000x" is not "type" */
            return line_error(rs, line, "a field name holds a NUL character (\\u0000)");
    }
    if (!type)
        return line_error(rs, line, "no \"type\" field");
    if (type->type != CBT_JL_STR)
        return line_error(rs, line, "\"type\" must be a string, not %s",
                          cbt_jl_type_phrase((cbt_jl_type)type->type));
    if (!ts)
        return line_error(rs, line, "no \"ts_ns\" field");
    if (ts->type != CBT_JL_INT)
        return line_error(rs, line, "\"ts_ns\" must be an integer of nanoseconds, not %s",
                          cbt_jl_type_phrase((cbt_jl_type)ts->type));
    if (ts->v.i <= 0)
        return line_error(rs, line, "\"ts_ns\" must be positive (unix-epoch nanoseconds), "
                                    "not %" PRId64, ts->v.i);
    cbt_event_type et;
    if (memchr(type->str, '\0', type->str_len) ||
        cbt_event_type_by_name(type->str, &et) != CBT_OK)
        return line_error(rs, line, "unknown event type \"%.*s\"", clip(type->str_len),
                          type->str);
    const char *sid = NULL;
    if (session) {
        if (session->type != CBT_JL_STR)
            return line_error(rs, line, "\"session\" must be a string, not %s",
                              cbt_jl_type_phrase((cbt_jl_type)session->type));
        if (memchr(session->str, '\0', session->str_len))
            return line_error(rs, line, "\"session\" holds a NUL character (\\u0000)");
        sid = session->str;
    }
    cbt_status st = cbt_event_init(ev, et, sid);
    if (st == CBT_ERR_SESSION_TOO_LONG)
        return line_error(rs, line, "\"session\" is %u bytes: a cbt session id holds at most %d "
                                    "(CBT_ERR_SESSION_TOO_LONG)",
                          (unsigned)session->str_len, CBT_SESSION_MAX - 1);
    if (st != CBT_OK)
        return line_error(rs, line, "the event cannot be made: %s", cbt_strerror(st));
    ev->ts = (uint64_t)ts->v.i;
    ev->flags |= CBT_EVF_EXPLICIT_TS;
    if (pair) {
        if (pair->type != CBT_JL_INT || pair->v.i < 0)
            return line_error(rs, line, "\"pair\" must be a non-negative integer");
        ev->pair = (uint64_t)pair->v.i;
    }
    if (tp) {
        if (tp->type != CBT_JL_STR)
            return line_error(rs, line, "\"traceparent\" must be a string, not %s",
                              cbt_jl_type_phrase((cbt_jl_type)tp->type));
        cbt_span_ctx parent;
        if (cbt_traceparent_parse(tp->str, tp->str_len, &parent) != CBT_OK)
            return line_error(rs, line, "\"traceparent\" is not a W3C traceparent "
                                        "(00-<32 hex>-<16 hex>-<2 hex>, lowercase): \"%.*s\"",
                              clip(tp->str_len), tp->str);
        cbt_event_trace_set(ev, &parent, NULL);
    }
    if (meta) {
        if (meta->type != CBT_JL_OBJECT)
            return line_error(rs, line, "\"meta\" must be an object, not %s",
                              cbt_jl_type_phrase((cbt_jl_type)meta->type));
        uint64_t dropped_before = rs->values_dropped;
        for (uint32_t c = (uint32_t)(meta - d->nodes) + 1; c < meta->end; c = d->nodes[c].end)
            if (add_meta(rs, line, ev, &d->nodes[c]) == 2) {
                /* the line is skipped: its values are not dropped ones */
                rs->values_dropped = dropped_before;
                return 2;
            }
    }
    return 0;
}

static int parse_flags(int argc, char **argv, replay_opts *o)
{
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--events") || !strcmp(a, "--spans")) {
            if (!val || !*val || (val[0] == '-' && val[1] != '\0')) {
                fprintf(stderr, "cbt replay: %s needs a file name ('-' for %s)\n", a,
                        !strcmp(a, "--events") ? "stdin" : "stdout");
                return 2;
            }
            if (!strcmp(a, "--events"))
                o->events = val;
            else
                o->spans = val;
            i++;
        } else if (!strcmp(a, "--dropped")) {
            if (!val || !*val || val[0] == '-') {
                fprintf(stderr, "cbt replay: --dropped needs a file name\n");
                return 2;
            }
            o->dropped = val;
            i++;
        } else if (!strcmp(a, "--mp-root-end")) {
            if (val && !strcmp(val, "request_end"))
                o->root_end = CBT_ROOT_END_REQUEST;
            else if (val && !strcmp(val, "transfer_end"))
                o->root_end = CBT_ROOT_END_TRANSFER;
            else {
                fprintf(stderr, "cbt replay: --mp-root-end needs request_end or transfer_end\n");
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--token-trace")) {
            o->token_trace = 1;
        } else if (!strcmp(a, "--keep-going")) {
            o->keep_going = 1;
        } else if (!strcmp(a, "--drop-unfit")) {
            o->drop_unfit = 1;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return -1;
        } else {
            fprintf(stderr, "cbt replay: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!o->events) {
        fprintf(stderr, "cbt replay: --events FILE is required\n");
        usage(stderr);
        return 2;
    }
    if (o->dropped && !o->drop_unfit) {
        fprintf(stderr, "cbt replay: --dropped is given without --drop-unfit\n");
        return 2;
    }
    return 0;
}

/* Publish, waiting for the harvester when this thread's lane is full (the
 * periodic flush makes that rare). */
static cbt_status publish(const cbt_event *ev)
{
    cbt_status st = cbt_publish(ev);
    for (int tries = 0; st == CBT_ERR_FULL && tries < 3; tries++) {
        if (cbt_flush(FLUSH_TIMEOUT_MS) != CBT_OK)
            break;
        st = cbt_publish(ev);
    }
    return st;
}

static void print_summary(const replay_state *rs, const cbt_mp_stats *mp, const cbt_cb_stats *cb,
                          const cbt_metrics *m)
{
    fprintf(stderr,
            "cbt replay: %s: %" PRIu64 " lines, %" PRIu64 " events read, %" PRIu64
            " published, %" PRIu64 " refused, %" PRIu64 " lines skipped, %" PRIu64
            " values dropped, %" PRIu64 " strings truncated; spans %" PRIu64 " ended (%" PRIu64
            " lost: pool full); "
            "mp: roots %" PRIu64 " opened (%" PRIu64 " lazy, %" PRIu64 " deferred) %" PRIu64
            " closed, children %" PRIu64 "/%" PRIu64 ", unmatched_end %" PRIu64
            ", duplicate_request_end %" PRIu64 ", request_end_unknown %" PRIu64
            ", open at end %" PRIu64 "; cb: roots %" PRIu64 " opened (%" PRIu64
            " deferred) %" PRIu64 " closed, children %" PRIu64 "/%" PRIu64 ", points %" PRIu64
            ", no_root %" PRIu64 ", unmatched_end %" PRIu64 ", duplicate_request_end %" PRIu64
            ", request_end_unknown %" PRIu64 ", open at end %" PRIu64 "\n",
            rs->file, rs->lines, rs->events_read, rs->published, rs->refused, rs->skipped,
            rs->values_dropped, m->meta_truncated, m->spans_ended, m->spans_dropped,
            mp->roots_opened,
            mp->roots_lazy, mp->roots_deferred, mp->roots_closed, mp->children_opened,
            mp->children_closed, mp->unmatched_end, mp->duplicate_request_end,
            mp->request_end_unknown, mp->sessions_open, cb->roots_opened, cb->roots_deferred,
            cb->roots_closed, cb->children_opened, cb->children_closed, cb->point_events,
            cb->no_root, cb->unmatched_end, cb->duplicate_request_end, cb->request_end_unknown,
            cb->sessions_open);
    fprintf(stderr,
            "cbt replay: evicted (idle/full/span pool) mp %" PRIu64 "/%" PRIu64 "/%" PRIu64
            ", cb %" PRIu64 "/%" PRIu64 "/%" PRIu64 "; late children mp %" PRIu64 ", cb %" PRIu64
            "; cb sibling_request_end %" PRIu64 "; timeout spans %" PRIu64
            ", transfer spans %" PRIu64 " (%" PRIu64 " samples skipped), token traces %" PRIu64
            "\n",
            mp->evicted_idle, mp->evicted_full, mp->evicted_span_pool, cb->evicted_idle,
            cb->evicted_full, cb->evicted_span_pool, mp->late_children, cb->late_children,
            cb->sibling_request_end, mp->timeout_spans, mp->transfer_spans,
            mp->transfer_samples_skipped, mp->token_trace_spans);
    if (rs->values_dropped) {
        fprintf(stderr, "cbt replay: dropped values by key:");
        for (uint32_t i = 0; i < rs->n_drops; i++)
            fprintf(stderr, " %s=%" PRIu64, cbt_name_str(rs->drops[i].key), rs->drops[i].n);
        if (rs->drops_other)
            fprintf(stderr, " (other keys)=%" PRIu64, rs->drops_other);
        fputc('\n', stderr);
    }
}

int cbt_replay_main(int argc, char **argv)
{
    replay_opts o = {0};
    int rc = parse_flags(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;

    cbt_config cfg = cbt_config_default();
    /* the MP subscriber is added below with every option, token_trace included
     * (cbt_config has no field for it) */
    cfg.mp_subscriber = false;
    cfg.ring_capacity = 0;      /* no kernels here: no rings */
    cfg.cuda_ring_capacity = 0;
    cfg.mp_root_end = o.root_end;

    FILE *in = strcmp(o.events, "-") ? fopen(o.events, "rb") : stdin;
    if (!in) {
        fprintf(stderr, "cbt replay: cannot read the event file '%s': %s\n", o.events,
                strerror(errno));
        return 1;
    }
    replay_state *rs = calloc(1, sizeof *rs);
    cbt_jl_reader rd;
    if (!rs || cbt_jl_reader_init(&rd, in)) {
        fprintf(stderr, "cbt replay: out of memory\n");
        free(rs);
        if (in != stdin)
            fclose(in);
        return 1;
    }
    rs->o = &o;
    rs->file = strcmp(o.events, "-") ? o.events : "<stdin>";
    if (o.dropped && !(rs->dropped_f = fopen(o.dropped, "w"))) {
        fprintf(stderr, "cbt replay: cannot write '%s': %s\n", o.dropped, strerror(errno));
        rc = 1;
        goto out_reader;
    }

    cbt_status st = cbt_init(&cfg);
    cbt_sink sk;
    cbt_subscriber mps, cb;
    cbt_tree_options mpo = CBT_STRUCT_INIT(cbt_tree_options);
    mpo.max_sessions = cfg.max_sessions;
    mpo.root_end = o.root_end;
    mpo.token_trace = o.token_trace ? CBT_TOKEN_TRACE_ON : CBT_TOKEN_TRACE_DEFAULT;
    if (st != CBT_OK) {
        fprintf(stderr, "cbt replay: the tracer could not start: %s\n", cbt_strerror(st));
        rc = 1;
        goto out_reader;
    }
    if (o.spans && strcmp(o.spans, "-")) {
        if ((st = cbt_jsonl_sink_create(o.spans, &sk)) != CBT_OK) {
            fprintf(stderr, "cbt replay: cannot write the span file '%s': %s\n", o.spans,
                    cbt_strerror(st));
            rc = 1;
            goto out_tracer;
        }
    } else {
        cli_stdout_sink(&sk);
    }
    if ((st = cbt_add_sink(&sk)) != CBT_OK ||
        (st = cbt_mp_subscriber_create_opts(&mpo, &mps)) != CBT_OK ||
        (st = cbt_add_subscriber(&mps)) != CBT_OK ||
        (st = cbt_cb_subscriber_create(0, &cb)) != CBT_OK ||
        (st = cbt_add_subscriber(&cb)) != CBT_OK) {
        /* a sink or subscriber that was not added is not destroyed by
         * shutdown: the one-shot command leaves it to the exit */
        fprintf(stderr, "cbt replay: cannot set up the span sink and builders: %s\n",
                cbt_strerror(st));
        rc = 1;
        goto out_tracer;
    }

    uint64_t since_flush = 0;
    for (;;) {
        cbt_jl_read r = cbt_jl_next(&rd);
        if (r == CBT_JL_EOF)
            break;
        if (r == CBT_JL_IO) {
            fprintf(stderr, "cbt replay: %s: read error after line %" PRIu64 ": %s\n", rs->file,
                    rd.lineno, strerror(errno));
            rc = 1;
            break;
        }
        rs->lines++;
        if (r == CBT_JL_TOO_LONG) {
            rc = line_error(rs, rd.lineno, "line longer than %u bytes", (unsigned)CBT_JL_LINE_MAX);
        } else {
            size_t k = 0;
            while (k < rd.len && (rd.buf[k] == ' ' || rd.buf[k] == '\t' || rd.buf[k] == '\r'))
                k++;
            if (k == rd.len) { /* a blank line is no event */
                rs->blank++;
                continue;
            }
            char err[256];
            cbt_event ev;
            if (cbt_jl_parse(rd.buf, rd.len, &rs->doc, err, sizeof err)) {
                rc = line_error(rs, rd.lineno, "not valid JSON: %s", err);
            } else if ((rc = build_event(rs, rd.lineno, &ev)) == 0) {
                rs->events_read++;
                st = publish(&ev);
                if (st == CBT_OK) {
                    rs->published++;
                } else {
                    rs->refused++;
                    fprintf(stderr, "cbt replay: %s:%" PRIu64 ": cbt_publish refused the event: "
                                    "%s\n", rs->file, rd.lineno, cbt_strerror(st));
                    rc = 1;
                    break;
                }
                if (++since_flush >= FLUSH_EVERY) {
                    since_flush = 0;
                    if ((st = cbt_flush(FLUSH_TIMEOUT_MS)) != CBT_OK) {
                        fprintf(stderr, "cbt replay: the harvester did not keep up: %s\n",
                                cbt_strerror(st));
                        rc = 1;
                        break;
                    }
                }
            }
        }
        if (rc == 2 && !o.keep_going)
            break;
        rc = 0;
    }
    if (rc == 0 && rs->skipped)
        rc = 2; /* --keep-going skipped some */

    if ((st = cbt_flush(FLUSH_TIMEOUT_MS)) != CBT_OK) {
        fprintf(stderr, "cbt replay: the last events were not all dispatched: %s\n",
                cbt_strerror(st));
        if (!rc)
            rc = 1;
    }
    cbt_mp_stats mp = CBT_STRUCT_INIT(cbt_mp_stats);
    cbt_cb_stats cbs = CBT_STRUCT_INIT(cbt_cb_stats);
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    (void)cbt_mp_stats_get(NULL, &mp);
    (void)cbt_cb_stats_get(&cb, &cbs);
    (void)cbt_metrics_get(&m);
    /* the counts are taken before the shutdown, which ends what is still
     * open as incomplete ("open at end") and flushes the sink */
    (void)cbt_shutdown();
    print_summary(rs, &mp, &cbs, &m);
    if (rs->skipped && o.keep_going)
        fprintf(stderr, "cbt replay: %" PRIu64 " line%s skipped\n", rs->skipped,
                rs->skipped == 1 ? "" : "s");
    goto out_reader;

out_tracer:
    (void)cbt_shutdown();
out_reader:
    if (rs->dropped_f && fclose(rs->dropped_f) != 0 && rc == 0) {
        fprintf(stderr, "cbt replay: cannot write '%s'\n", o.dropped);
        rc = 1;
    }
    cbt_jl_reader_free(&rd);
    if (in != stdin)
        fclose(in);
    free(rs);
    return rc;
}
