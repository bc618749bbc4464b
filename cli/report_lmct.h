/* cli/report_lmct.h — owns `cbt report`'s reading of an LMCT recording: the
 * file is replayed in this process (cbt/replay.h: a replay tracer with the
 * recorded configuration and builders) into a sink that hands each span to
 * the report's aggregator, so the report sees the live run's spans. What
 * the replay says it could not reproduce (the recorder's gaps, a cut tail,
 * skipped records, spans its pool refused) goes to the completeness notes. */
#ifndef CBT_CLI_REPORT_LMCT_H
#define CBT_CLI_REPORT_LMCT_H

#include <stdio.h>

#include "report_agg.h"

/* Replay `path` into `a` as file `file`. Needs the process's one tracer (none
 * may be running). 0: replayed (notes added for what it lost); 1: this cbt
 * cannot replay (built without msgpack-c, no memory, the tracer would not
 * start); 2: the file was refused (not a recording cbt can replay, a
 * mismatch): the reason is said on `err`, prefixed "cbt report: PATH: ". */
int rpt_lmct_feed(const char *path, unsigned file, rpt_agg *a, FILE *err);

#endif /* CBT_CLI_REPORT_LMCT_H */
