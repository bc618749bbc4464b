/* tests/test_cli_otlp.c — the `cbt` command's OTLP config (cli/cli_otlp.c):
 * --otlp-protocol's spellings, the flag over OTEL_EXPORTER_OTLP_PROTOCOL,
 * and the endpoints each transport gets from --otlp-endpoint (OTLP/HTTP:
 * /v1/traces and /v1/metrics on the base; gRPC: the base as is). What the
 * exporter then does with a gRPC config is the gRPC transport's tests'
 * (tests/grpc_*); the flag's usage errors are tests/cli_flags.cmake's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "cli/cli_otlp.h"
#include "otlp_env_case.h"

static void protocol_spellings(void **state)
{
    (void)state;
    assert_int_equal(cli_otlp_protocol_parse("http/protobuf"), CBT_OTLP_HTTP_PROTOBUF);
    assert_int_equal(cli_otlp_protocol_parse("http/json"), CBT_OTLP_HTTP_JSON);
    assert_int_equal(cli_otlp_protocol_parse("grpc"), CBT_OTLP_GRPC);
    assert_int_equal(CBT_OTLP_GRPC, 2);
    static const char *const bad[] = {"", "GRPC", "grpc ", "http", "http/proto", "HTTP/JSON"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(cli_otlp_protocol_parse(bad[i]), -1);
    assert_int_equal(cli_otlp_protocol_parse(NULL), -1);
}

/* One config: the flag's protocol (-1: none) for `endpoint`. */
static int config_of(const char *endpoint, int protocol, cbt_otlp_config *c)
{
    return cli_otlp_config("cbt demo", endpoint, protocol, c);
}

static void http_endpoints(void **state)
{
    (void)state;
    cbt_otlp_config c;
    clear_env();
    for (int p = -1; p <= CBT_OTLP_HTTP_JSON; p++) {
        assert_int_equal(config_of("http://col:4318", p, &c), 0);
        assert_int_equal(c.protocol, p < 0 ? CBT_OTLP_HTTP_PROTOBUF : p);
        assert_string_equal(c.endpoint, "http://col:4318/v1/traces");
        assert_string_equal(c.metrics_endpoint, "http://col:4318/v1/metrics");
        assert_int_equal(config_of("https://col:4318/base/", p, &c), 0);
        assert_string_equal(c.endpoint, "https://col:4318/base/v1/traces");
        assert_string_equal(c.metrics_endpoint, "https://col:4318/base/v1/metrics");
        assert_int_equal(config_of("http://col:4318/v1/traces", p, &c), 0);
        assert_string_equal(c.endpoint, "http://col:4318/v1/traces");
        assert_string_equal(c.metrics_endpoint, "http://col:4318/v1/metrics");
    }
}

static void grpc_endpoints(void **state)
{
    (void)state;
    cbt_otlp_config c;
    clear_env();
    assert_int_equal(config_of("http://col:4317", CBT_OTLP_GRPC, &c), 0);
    assert_int_equal(c.protocol, CBT_OTLP_GRPC);
    assert_string_equal(c.endpoint, "http://col:4317");
    assert_string_equal(c.metrics_endpoint, "http://col:4317");
    assert_int_equal(config_of("https://col:4317/", CBT_OTLP_GRPC, &c), 0);
    assert_string_equal(c.endpoint, "https://col:4317");
    assert_string_equal(c.metrics_endpoint, "https://col:4317");
    /* an OTLP/HTTP traces URL is a mistake over gRPC: refused, said */
    assert_int_equal(config_of("http://col:4318/v1/traces", CBT_OTLP_GRPC, &c), -1);
}

/* No flag: OTEL_EXPORTER_OTLP_PROTOCOL decides; a flag wins over it. */
static void flag_over_environment(void **state)
{
    (void)state;
    cbt_otlp_config c;
    clear_env();
    setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", 1);
    assert_int_equal(config_of("http://col:4318", -1, &c), 0);
    assert_int_equal(c.protocol, CBT_OTLP_HTTP_JSON);
    assert_int_equal(config_of("http://col:4318", CBT_OTLP_HTTP_PROTOBUF, &c), 0);
    assert_int_equal(c.protocol, CBT_OTLP_HTTP_PROTOBUF);
    assert_int_equal(config_of("http://col:4317", CBT_OTLP_GRPC, &c), 0);
    assert_int_equal(c.protocol, CBT_OTLP_GRPC);
    assert_string_equal(c.endpoint, "http://col:4317");
    /* the environment's grpc: refused by cbt_otlp_config_from_env until the
     * gRPC transport is in (branch g1); then the flag's endpoint is shaped
     * for it, as with --otlp-protocol grpc */
    setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", 1);
    int rc = config_of("http://col:4317", -1, &c);
    if (rc == 0) {
        assert_int_equal(c.protocol, CBT_OTLP_GRPC);
        assert_string_equal(c.endpoint, "http://col:4317");
    } else {
        assert_int_equal(rc, -1);
    }
    /* the rest of the environment still applies: cbt's own health */
    clear_env();
    setenv("CBT_OTLP_SELF_METRICS", "1", 1);
    assert_int_equal(config_of("http://col:4318", CBT_OTLP_HTTP_JSON, &c), 0);
    assert_int_equal(c.self_metrics, CBT_OTLP_SELF_METRICS_ON);
    clear_env();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(protocol_spellings),
        cmocka_unit_test(http_endpoints),
        cmocka_unit_test(grpc_endpoints),
        cmocka_unit_test(flag_over_environment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
