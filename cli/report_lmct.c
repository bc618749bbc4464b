/* cli/report_lmct.c — owns replaying an LMCT recording into `cbt report`
 * (report_lmct.h). */
#include <inttypes.h>
#include <string.h>

#include "cbt.h"
#include "cbt/replay.h"
#include "report_lmct.h"

typedef struct feed {
    rpt_agg *agg;
    unsigned file;
    uint64_t n;
} feed;

/* The replaying thread calls this (a CBT_SINK_NONBLOCKING sink is called by
 * the tracer's own thread, which in a replay is the one in cbt_replay_run and
 * cbt_shutdown): the aggregator needs no lock. */
static cbt_status on_span(void *ctx, const cbt_span *s)
{
    feed *fd = ctx;
    rpt_span o;
    rpt_span_reset(&o, fd->file, 0);
    memcpy(o.trace_id, s->ctx.trace_id, 16);
    memcpy(o.span_id, s->ctx.span_id, 8);
    memcpy(o.parent_id, s->parent_span_id, 8);
    o.has_parent = false;
    for (int k = 0; k < 8; k++)
        o.has_parent = o.has_parent || s->parent_span_id[k];
    snprintf(o.name, sizeof o.name, "%s", cbt_name_str(s->name));
    o.start_ns = s->start_ns;
    o.end_ns = s->end_ns < s->start_ns ? s->start_ns : s->end_ns;
    o.incomplete = (s->flags & CBT_SPANF_INCOMPLETE) != 0;
    o.error = s->status == CBT_SPAN_STATUS_ERROR;
    o.dropped_attrs = s->attrs_dropped;
    o.dropped_events = s->events_dropped;
    o.truncated_attrs = s->attrs_truncated;
    unsigned na = s->n_attrs < CBT_SPAN_ATTR_MAX ? s->n_attrs : CBT_SPAN_ATTR_MAX;
    for (unsigned k = 0; k < na; k++) {
        const cbt_attr *at = &s->attrs[k];
        if (at->owner != 0)
            continue;
        const char *key = cbt_name_str(at->key);
        switch (at->type) {
        case CBT_META_I64: rpt_span_set_i64(&o, key, at->v.i64); break;
        case CBT_META_F64: rpt_span_set_f64(&o, key, at->v.f64); break;
        case CBT_META_BOOL: rpt_span_set_bool(&o, key, at->v.b); break;
        case CBT_META_STR: rpt_span_set_str(&o, key, cbt_attr_str(s, at), at->str_len); break;
        default: break;
        }
    }
    fd->n++;
    o.line = fd->n; /* the span's place in the replay, for messages */
    rpt_agg_add(fd->agg, &o);
    return CBT_OK;
}

/* The replay's messages start with the file's name, usually: keep one. */
static const char *without_path(const char *msg, const char *path)
{
    size_t n = strlen(path);
    return !strncmp(msg, path, n) && msg[n] == ':' && msg[n + 1] == ' ' ? msg + n + 2 : msg;
}

int rpt_lmct_feed(const char *path, unsigned file, rpt_agg *a, FILE *err)
{
    cbt_replay_options ro = cbt_replay_options_default();
    ro.log = err;
    ro.progress = NULL;
    cbt_replay *r = NULL;
    cbt_status st = cbt_replay_open(path, &ro, &r);
    if (st) {
        fprintf(err, "cbt report: %s: %s\n", path, without_path(cbt_replay_message(NULL), path));
        return st == CBT_ERR_UNSUPPORTED || st == CBT_ERR_NOMEM ? 1 : 2;
    }
    cbt_config cfg = cbt_config_default();
    if ((st = cbt_replay_config(r, &cfg)) || (st = cbt_init(&cfg)) ||
        (st = cbt_replay_add_builders(r))) {
        fprintf(err, "cbt report: %s: cannot start the replay tracer: %s\n", path,
                cbt_strerror(st));
        cbt_shutdown();
        cbt_replay_close(r);
        return 1;
    }
    feed fd = {.agg = a, .file = file};
    cbt_sink sink = CBT_STRUCT_INIT(cbt_sink);
    sink.name = "cbt-report";
    sink.ctx = &fd;
    sink.on_span = on_span;
    sink.flags = CBT_SINK_NONBLOCKING;
    if ((st = cbt_add_sink(&sink))) {
        fprintf(err, "cbt report: %s: %s\n", path, cbt_strerror(st));
        cbt_shutdown();
        cbt_replay_close(r);
        return 1;
    }
    cbt_replay_stats rs = CBT_STRUCT_INIT(cbt_replay_stats);
    cbt_status rst = cbt_replay_run(r, &rs);
    int rc = 0;
    if (rst == CBT_ERR_LMCT_TRUNCATED) {
        rpt_agg_note(a, true, "%s: %s (the records before it were replayed)", path,
                     without_path(cbt_replay_message(r), path));
    } else if (rst == CBT_ERR_REPLAY_MISMATCH) {
        rc = 2; /* said on the log */
    } else if (rst) {
        fprintf(err, "cbt report: %s: %s: %s\n", path, cbt_strerror(rst),
                without_path(cbt_replay_message(r), path));
        rc = 2;
    }
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    cbt_shutdown_final(&m);
    cbt_replay_close(r);
    if (rs.gaps)
        rpt_agg_note(a, true, "%s: the recording dropped %" PRIu64 " records in %" PRIu64
                              " places (its buffer was full): spans near them may be missing "
                              "or incomplete", path, rs.gap_records, rs.gaps);
    if (rs.unknown_skipped || rs.malformed_skipped)
        rpt_agg_note(a, true, "%s: the replay skipped %" PRIu64 " records (%" PRIu64
                              " of an unknown kind, %" PRIu64 " this build cannot take)",
                     path, rs.unknown_skipped + rs.malformed_skipped, rs.unknown_skipped,
                     rs.malformed_skipped);
    if (m.spans_dropped)
        rpt_agg_note(a, true, "%s: the replay's span pool refused %" PRIu64 " spans", path,
                     m.spans_dropped);
    if (!rs.shutdown_seen)
        rpt_agg_note(a, false, "%s: the recording has no shutdown: spans open at its end were "
                               "ended by the replay (incomplete)", path);
    rpt_agg_note(a, false, "%s: a recording holds what the span builders consumed: events "
                           "dropped before them (cbt_metrics.dropped_full) are not in it",
                 path);
    return rc;
}
