/* cli/report_out.h — the two renderings of a `cbt report` summary
 * (report_agg.h): the terminal text (report_text.c) and one self-contained
 * HTML page with inline SVG plots (report_html.c). Both draw the same
 * sections in the same order, completeness first; neither changes the
 * summary. */
#ifndef CBT_CLI_REPORT_OUT_H
#define CBT_CLI_REPORT_OUT_H

#include <stdio.h>

#include "report_agg.h"

/* A duration for people: "812 ns", "12.4 us", "1.62 ms", "3.05 s" (at
 * most 15 bytes with its NUL; `buf` holds 16). */
const char *rpt_fmt_dur(double ns, char buf[16]);

/* The terminal report. `width`: columns of a waterfall's time axis. */
void rpt_text_write(FILE *f, const rpt_summary *s, unsigned width);

/* The HTML page. 0, or -1 when writing failed (errno). */
int rpt_html_write(FILE *f, const rpt_summary *s);

/* The completeness verdict in one line: "whole" or what is missing, for
 * both renderings. */
void rpt_completeness_line(const rpt_summary *s, char *buf, size_t cap);

#endif /* CBT_CLI_REPORT_OUT_H */
