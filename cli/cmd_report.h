/* cli/cmd_report.h — `cbt report FILE...` (cmd_report.c): where the
 * requests' time went, from span files, OTLP JSON files and LMCT
 * recordings, in the terminal and as one HTML page (docs/report.md). */
#ifndef CBT_CLI_CMD_REPORT_H
#define CBT_CLI_CMD_REPORT_H

/* argv holds the arguments after "report". Exit status: 0 the report was
 * written (a bad line is counted in it, not an error); 1 a runtime failure
 * (no memory, the HTML file cannot be written, a recording this build
 * cannot replay); 2 a usage error or an input that cannot be read, named. */
int cbt_report_main(int argc, char **argv);

#endif /* CBT_CLI_CMD_REPORT_H */
