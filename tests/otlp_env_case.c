/* tests/otlp_env_case.c — owns the shared OTEL_* table runner (otlp_env_case.h). */
#include "otlp_env_case.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static const char *const k_vars[] = {
    "OTEL_SDK_DISABLED", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
    "OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "OTEL_EXPORTER_OTLP_COMPRESSION",
    "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION",
    "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_METRIC_EXPORT_INTERVAL",
    "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_INSECURE", "OTEL_EXPORTER_OTLP_TRACES_INSECURE",
    "OTEL_EXPORTER_OTLP_METRICS_INSECURE", "OTEL_EXPORTER_OTLP_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_CLIENT_KEY", "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY",
    "OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY", "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE",
    "CBT_OTLP_SELF_METRICS",
};

void clear_env(void)
{
    for (size_t i = 0; i < sizeof k_vars / sizeof k_vars[0]; i++)
        unsetenv(k_vars[i]);
}

cbt_status run_env(const env_case *ec, cbt_otlp_config *c, char **log_out)
{
    clear_env();
    for (int i = 0; i < 4 && ec->set[i][0]; i++)
        setenv(ec->set[i][0], ec->set[i][1], 1);
    cbt_otlp_config_default(c);
    char *buf = NULL;
    size_t len = 0;
    FILE *log = open_memstream(&buf, &len);
    assert_non_null(log);
    cbt_status st = cbt_otlp_config_from_env(c, log);
    fclose(log);
    clear_env();
    const char *what = ec->set[0][0] ? ec->set[0][0] : "(none)";
    const char *val = ec->set[0][0] ? ec->set[0][1] : "";
    if (st != ec->want)
        fail_msg("env case %s=%s: status %s, expected %s (log: %s)", what, val, cbt_strerror(st),
                 cbt_strerror(ec->want), buf);
    for (int i = 0; i < 3 && ec->log_has[i]; i++)
        if (!strstr(buf, ec->log_has[i]))
            fail_msg("env case %s: log lacks \"%s\": %s", what, ec->log_has[i], buf);
    for (int i = 0; i < 4 && ec->log_lacks[i]; i++)
        if (strstr(buf, ec->log_lacks[i]))
            fail_msg("env case %s: log shows \"%s\": %s", what, ec->log_lacks[i], buf);
    if (ec->log_empty && len)
        fail_msg("env case %s: unexpected log: %s", what, buf);
    *log_out = buf;
    return st;
}
