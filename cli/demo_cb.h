/* cli/demo_cb.h — owns the three roles of a CacheBlend request (seed
 * cacheblend-v3-observability §2, §5): the vLLM scheduler, the vLLM worker and
 * the LMCache blend server, each publishing its part of the unified trace
 * and passing W3C traceparents to the next over a byte stream.
 *
 * Used twice: `cbt demo --cacheblend` runs the three roles as threads of one
 * process over socketpairs (one tracer sees everything, and the tree printer
 * shows the joined trace); tests/cb_role.c runs each role in a process of its
 * own, as in production, for tests/test_three_proc.c.
 *
 * The wire: text lines on the two connections each role holds.
 *   scheduler -> server   LOOKUP <rid> <traceparent|->     <- HIT <rid> <tokens>
 *   scheduler -> worker   EXEC <rid> <traceparent|->       <- FINISHED <rid>
 *   worker -> server      RETRIEVE <rid> <traceparent|->   <- DONE <rid>
 *   QUIT                  scheduler -> worker; scheduler and worker -> server
 * "-" is a request sent without the optional trace_context field (Option B).
 *
 * The work itself is simulated: fixed sleeps stand in for the lookup's
 * fingerprint match and L2 load, the scatter, and the three forward phases
 * (the GPU ones on a CPU stream). The spans, their parents, their attributes
 * and the context propagation are the real thing.
 */
#ifndef CBT_HOST_DEMO_CB_H
#define CBT_HOST_DEMO_CB_H

#include <stddef.h>
#include <stdint.h>

#include "cbt/context.h"

typedef enum cbt_cb_role {
    CBT_CB_ROLE_SCHEDULER = 0,
    CBT_CB_ROLE_WORKER,
    CBT_CB_ROLE_SERVER,
} cbt_cb_role;

/* One request, as the scheduler runs it. */
typedef struct cbt_cb_request {
    char rid[48];
    int send_ctx;           /* 0: send "-" everywhere (a peer without the field) */
    int force_sampled_out;  /* 1: decide "not sampled" at the root, whatever the sampler */
    uint32_t prompt_tokens; /* requested tokens */
    uint32_t prefix_hit;    /* tokens reused as a prefix */
    uint32_t non_prefix_hit; /* tokens reused at a shifted position (re-RoPE) */
    uint32_t load_passes;   /* cb.start_load_kv passes (1 or 2) */
} cbt_cb_request;

typedef struct cbt_cb_role_opts {
    /* the scheduler's script */
    const cbt_cb_request *requests;
    uint32_t n_requests;
    cbt_sampler sampler;   /* the root's head sampler (the others follow the flag) */
    uint32_t work_us;      /* scale of the simulated work; 0 = 100 */
    uint32_t peer_timeout_ms; /* a peer silent this long is an error; 0 = 60000 */
} cbt_cb_role_opts;

/* Run `role` until QUIT, over the connections `a` and `b`:
 *   scheduler: a = the server, b = the worker
 *   worker:    a = the scheduler, b = the server
 *   server:    a = the scheduler, b = the worker
 * cbt must be initialised (the server also needs the CB subscriber, cbt/cb.h).
 * Returns 0, or -1 with a message in err (a peer closed or went silent for
 * peer_timeout_ms, a malformed line, a cbt call failed); never raises
 * SIGPIPE (sockets are written with MSG_NOSIGNAL). Does not close the
 * descriptors. */
int cbt_cb_role_run(cbt_cb_role role, int a, int b, const cbt_cb_role_opts *o, char *err,
                    size_t errcap);

#endif /* CBT_HOST_DEMO_CB_H */
