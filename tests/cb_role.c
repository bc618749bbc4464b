/* tests/cb_role.c — one process of a CacheBlend request, for
 * tests/test_three_proc.c: the vLLM scheduler, the vLLM worker or the LMCache
 * blend server (cli/demo_cb.c does the work), each with its own tracer
 * exporting OTLP/HTTP to the test's loopback collector (service.name = the
 * process, as the seed's tree names owners), on the CPU backend.
 *
 *   cb_role scheduler|worker|server COLLECTOR_BASE_URL
 *
 * Connections are inherited socketpairs on fds 3 and 4: the scheduler has the
 * server on 3 and the worker on 4; the worker the scheduler on 3 and the
 * server on 4; the server the scheduler on 3 and the worker on 4.
 * The scheduler's script: "req-a" (Option A, sampled), "req-off" (sampled
 * out at the root; the flag travels), "req-b" (no context sent: Option B).
 * Exit status 0 when every step worked; the reason on stderr otherwise.
 */
#include <stdio.h>
#include <string.h>

#include "cbt.h"
#include "cbt/cb.h"
#include "cli/demo_cb.h"
#include "cbt/otlp.h"

static int start_tracer(const char *base, const char *service, int server)
{
    cbt_status st;
    cbt_config c = cbt_config_default();
    if ((st = cbt_init(&c)) != CBT_OK) {
        fprintf(stderr, "cb_role: cbt_init: %s\n", cbt_strerror(st));
        return -1;
    }
    cbt_subscriber sub;
    if (server && ((st = cbt_cb_subscriber_create(0, &sub)) || (st = cbt_add_subscriber(&sub)))) {
        fprintf(stderr, "cb_role: CB subscriber: %s\n", cbt_strerror(st));
        return -1;
    }
    cbt_otlp_config oc;
    cbt_otlp_config_default(&oc);
    snprintf(oc.endpoint, sizeof oc.endpoint, "%s/v1/traces", base);
    snprintf(oc.resource.service_name, sizeof oc.resource.service_name, "%s", service);
    oc.schedule_delay_ms = 50;
    oc.timeout_ms = 5000;
    cbt_otlp_exporter *e;
    cbt_sink sk;
    if ((st = cbt_otlp_exporter_create(&oc, &e, &sk)) || (st = cbt_add_sink(&sk))) {
        fprintf(stderr, "cb_role: OTLP exporter: %s\n", cbt_strerror(st));
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const char *const roles[] = {"scheduler", "worker", "server"};
    static const char *const services[] = {"vllm-scheduler", "vllm-worker", "lmcache-blend-server"};
    int role = -1;
    for (int i = 0; argc == 3 && i < 3; i++)
        if (strcmp(argv[1], roles[i]) == 0)
            role = i;
    if (role < 0) {
        fprintf(stderr, "usage: cb_role scheduler|worker|server COLLECTOR_BASE_URL\n");
        return 2;
    }
    if (start_tracer(argv[2], services[role], role == CBT_CB_ROLE_SERVER))
        return 1;
    static const cbt_cb_request script[] = {
        {.rid = "req-a", .send_ctx = 1, .prompt_tokens = 1024, .prefix_hit = 256,
         .non_prefix_hit = 256, .load_passes = 1},
        {.rid = "req-off", .send_ctx = 1, .force_sampled_out = 1, .prompt_tokens = 1024,
         .prefix_hit = 256, .non_prefix_hit = 256, .load_passes = 1},
        {.rid = "req-b", .send_ctx = 0, .prompt_tokens = 1024, .prefix_hit = 256,
         .non_prefix_hit = 256, .load_passes = 1},
    };
    cbt_cb_role_opts o = {.requests = script, .n_requests = 3, .sampler = cbt_sampler_default(),
                          .work_us = 100};
    char err[256];
    int rc = cbt_cb_role_run((cbt_cb_role)role, 3, 4, &o, err, sizeof err);
    if (rc)
        fprintf(stderr, "cb_role %s: %s\n", roles[role], err);
    cbt_status st = cbt_flush(10000);
    if (st == CBT_OK)
        st = cbt_shutdown();
    else
        cbt_shutdown();
    if (st != CBT_OK) {
        fprintf(stderr, "cb_role %s: flush/shutdown: %s\n", roles[role], cbt_strerror(st));
        rc = -1;
    }
    return rc ? 1 : 0;
}
