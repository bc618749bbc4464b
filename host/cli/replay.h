/* host/cli/replay.h — owns `cbt replay`: a file of events, one JSON object a
 * line, published in file order through a tracer with the MP and CacheBlend
 * subscribers, the spans written as JSON lines (docs/cli.md has the format).
 */
#ifndef CBT_HOST_REPLAY_H
#define CBT_HOST_REPLAY_H

/* Parse replay's flags (argv after "replay") and run it. Returns the process
 * exit code: 0 every line replayed; 1 runtime failure (the tracer, the span
 * file, a refused publish); 2 usage error or bad input (the first bad line
 * stops the replay; with --keep-going every bad line is skipped and counted,
 * and 2 is returned when any was). */
int cbt_replay_main(int argc, char **argv);

#endif /* CBT_HOST_REPLAY_H */
