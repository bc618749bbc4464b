/* cli/cmd_replay.h — owns `cbt replay`: a file of events, one JSON object a
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

/* `cbt replay FILE.lct [...]` (cmd_replay_lmct.c): a recording (cbt/replay.h)
 * replayed into the spans of its live run. Exit: 0 replayed whole; 1 a
 * runtime failure or lost spans; 2 usage error or a file cbt refuses (bad
 * frames, a version or configuration mismatch without --force); 3 the file
 * ends inside a frame (its complete records were replayed) or records were
 * skipped. */
int cbt_replay_lmct_main(int argc, char **argv);

#endif /* CBT_HOST_REPLAY_H */
