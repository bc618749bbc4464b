/* cli/cli_otlp.c — owns the `cbt` command's OTLP exporter config (cli_otlp.h):
 * --otlp-protocol's spellings and the endpoints for each transport. */
#include "cli_otlp.h"

#include <stdio.h>
#include <string.h>

#include "cbt/otlp.h"

int cli_otlp_protocol_parse(const char *s)
{
    if (!s)
        return -1;
    if (!strcmp(s, "http/protobuf"))
        return CBT_OTLP_HTTP_PROTOBUF;
    if (!strcmp(s, "http/json"))
        return CBT_OTLP_HTTP_JSON;
    if (!strcmp(s, "grpc"))
        return CBT_OTLP_GRPC;
    return -1;
}

#ifndef CBT_WITH_OTLP
int cli_otlp_config(const char *prog, const char *endpoint, int protocol, cbt_otlp_config *c)
{
    (void)endpoint, (void)protocol, (void)c;
    fprintf(stderr, "%s: this build has no OTLP exporter (protobuf-c/libcurl missing)\n", prog);
    return -1;
}
#else
int cli_otlp_config(const char *prog, const char *endpoint, int protocol, cbt_otlp_config *c)
{
    cbt_otlp_config_default(c);
    if (cbt_otlp_config_from_env(c, stderr) != CBT_OK)
        return -1;
    if (protocol >= 0)
        c->protocol = (cbt_otlp_protocol)protocol;
    size_t l = strlen(endpoint);
    if (!l) {
        fprintf(stderr, "%s: --otlp-endpoint is empty\n", prog);
        return -1;
    }
    int traces_url = l >= 10 && strcmp(endpoint + l - 10, "/v1/traces") == 0;
    int n1, n2;
    if (c->protocol == CBT_OTLP_GRPC) {
        if (traces_url) {
            fprintf(stderr, "%s: --otlp-endpoint ends in /v1/traces, an OTLP/HTTP traces URL, "
                            "but the protocol is grpc: give the collector's base URL "
                            "(http://host:4317)\n", prog);
            return -1;
        }
        int base_len = endpoint[l - 1] == '/' ? (int)l - 1 : (int)l;
        n1 = snprintf(c->endpoint, sizeof c->endpoint, "%.*s", base_len, endpoint);
        n2 = snprintf(c->metrics_endpoint, sizeof c->metrics_endpoint, "%.*s", base_len,
                      endpoint);
    } else {
        const char *suffix = traces_url ? "" : (endpoint[l - 1] == '/' ? "v1/traces" : "/v1/traces");
        /* the metrics URL: the same base with /v1/metrics (a traces URL's
         * /v1/traces replaced) */
        int base_len = traces_url ? (int)(l - 10) : (int)l;
        const char *msuffix = !traces_url && endpoint[l - 1] == '/' ? "v1/metrics" : "/v1/metrics";
        n1 = snprintf(c->endpoint, sizeof c->endpoint, "%s%s", endpoint, suffix);
        n2 = snprintf(c->metrics_endpoint, sizeof c->metrics_endpoint, "%.*s%s", base_len,
                      endpoint, msuffix);
    }
    if (n1 < 0 || (size_t)n1 >= sizeof c->endpoint || n2 < 0 ||
        (size_t)n2 >= sizeof c->metrics_endpoint) {
        /* cli.c refuses such a value (exit 2, CBT_DEMO_ENDPOINT_MAX) */
        fprintf(stderr, "%s: --otlp-endpoint is too long\n", prog);
        return -1;
    }
    return 0;
}
#endif /* CBT_WITH_OTLP */
