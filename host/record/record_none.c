/* host/record/record_none.c — trace recording and replay in a build without
 * msgpack-c (CBT_WITH_MSGPACK off): asking for a trace level, or replaying,
 * is CBT_ERR_UNSUPPORTED, said on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cbt/replay.h"
#include "internal/abi.h"
#include "internal/harvest.h"
#include "internal/recorder.h"

cbt_status cbt_recorder_open_(const cbt_config *cfg, cbt_rec_counts *counts, cbt_recorder **out)
{
    (void)counts;
    *out = NULL;
    const char *level = cfg->trace_level ? cfg->trace_level : getenv("CBT_TRACE_LEVEL");
    if (!level || !*level)
        return CBT_OK;
    if (strcmp(level, "gpu") != 0) { /* as a build with msgpack-c says */
        fprintf(stderr, "cbt: trace level \"%s\": cbt records level \"gpu\" only\n", level);
        return CBT_ERR_INVAL;
    }
    fprintf(stderr, "cbt: trace level \"%s\": this cbt was built without msgpack-c "
                    "(CBT_WITH_MSGPACK: libmsgpack-dev), so it cannot record\n", level);
    return CBT_ERR_UNSUPPORTED;
}

void cbt_rec_event_(struct cbt_tracer *t, const cbt_event *ev) { (void)t, (void)ev; }
void cbt_rec_ring_(struct cbt_tracer *t, const struct cbt_ring *ring, const cbt_ring_rec *rec)
{
    (void)t, (void)ring, (void)rec;
}
void cbt_rec_clock_(struct cbt_tracer *t) { (void)t; }
void cbt_rec_devclock_(struct cbt_tracer *t, const struct cbt_ring *ring) { (void)t, (void)ring; }
void cbt_rec_kpoll_(struct cbt_tracer *t) { (void)t; }
void cbt_rec_shutdown_(struct cbt_tracer *t) { (void)t; }
void cbt_rec_ids_(struct cbt_tracer *t) { (void)t; }
void cbt_rec_round_end_(struct cbt_tracer *t) { (void)t; }
void cbt_recorder_close_(cbt_recorder *r) { (void)r; }
int cbt_recorder_started_(const cbt_recorder *r)
{
    (void)r;
    return 0;
}
int cbt_rec_rebuilt_(const cbt_subscriber *s)
{
    (void)s;
    return 0;
}
const char *cbt_recorder_path_(const cbt_recorder *r)
{
    (void)r;
    return "";
}
size_t cbt_rec_config_json_(const struct cbt_tracer *t, char *buf, size_t cap)
{
    (void)t;
    if (cap)
        buf[0] = '\0';
    return 0;
}

static const char k_no[] = "this cbt was built without msgpack-c (CBT_WITH_MSGPACK): no replay";

cbt_status cbt_replay_options_default_into(cbt_replay_options *caller)
{
    cbt_replay_options d;
    memset(&d, 0, sizeof d);
    d.version = CBT_REPLAY_OPTIONS_VERSION;
    d.size = sizeof d;
    return cbt_abi_defaults_(caller, &d, sizeof d);
}
cbt_status cbt_replay_open(const char *path, const cbt_replay_options *o, cbt_replay **out)
{
    (void)path, (void)o;
    if (out)
        *out = NULL;
    return CBT_ERR_UNSUPPORTED;
}
cbt_status cbt_replay_config(const cbt_replay *r, struct cbt_config *c)
{
    (void)r, (void)c;
    return CBT_ERR_UNSUPPORTED;
}
cbt_status cbt_replay_add_builders(const cbt_replay *r)
{
    (void)r;
    return CBT_ERR_UNSUPPORTED;
}
cbt_status cbt_replay_run(cbt_replay *r, cbt_replay_stats *st)
{
    (void)r, (void)st;
    return CBT_ERR_UNSUPPORTED;
}
const char *cbt_replay_message(const cbt_replay *r)
{
    (void)r;
    return k_no;
}
const char *cbt_replay_header_json(const cbt_replay *r)
{
    (void)r;
    return "";
}
void cbt_replay_close(cbt_replay *r) { (void)r; }

void cbt_recorder_tap_(struct cbt_tracer *t, struct cbt_hv_tap *out)
{
    (void)t;
    memset(out, 0, sizeof *out); /* never registered: no recorder opens here */
}
