/* tests/otlp_env_case.h — owns the OTEL_* environment table runner shared by
 * test_otlp_http.c (the traces variables) and test_otlp_metrics.c (the
 * metrics ones): set up to four variables, run cbt_otlp_config_from_env with
 * its log captured, and check the status and the log against the case.
 * Every variable either test sets is cleared before and after each case. */
#ifndef CBT_TESTS_OTLP_ENV_CASE_H
#define CBT_TESTS_OTLP_ENV_CASE_H

#include "cbt/otlp.h"

/* One environment: up to 4 NAME=VALUE pairs and what must follow. */
typedef struct env_case {
    const char *set[4][2];
    cbt_status want;
    const char *log_has[3];   /* substrings the log must hold */
    const char *log_lacks[4]; /* ... and must not (header values) */
    int log_empty;
} env_case;

#define ENV(...) ((env_case){__VA_ARGS__})

/* Unset every OTEL_* variable the tests use. */
void clear_env(void);

/* Run one case into *c (from cbt_otlp_config_default); the test fails on a
 * wrong status or log. *log_out receives the log (free it). Returns the
 * status. */
cbt_status run_env(const env_case *ec, cbt_otlp_config *c, char **log_out);

#endif /* CBT_TESTS_OTLP_ENV_CASE_H */
