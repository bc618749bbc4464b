/* tests/testutil.h — owns the helpers the cmocka tests share.
 *
 * A test brings up the process-wide tracer with a memory sink and a recording
 * subscriber (every dispatched event, in dispatch order, with its unix-ns
 * time), drives events through the real bus, harvester and streams, then
 * flushes and inspects the spans. Gates let a test hold a CPU stream at a
 * point, so a race such as "REQUEST_END before STORE_END" happens for real
 * and in a known order.
 */
#ifndef CBT_TESTUTIL_H
#define CBT_TESTUTIL_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "cbt.h"

#define TU_MAX_SPANS 65536
#define TU_MAX_EVENTS 65536

/* Dispatched events as the recording subscriber saw them. */
typedef struct tu_event {
    cbt_event_type type;
    char session[CBT_SESSION_MAX];
    uint64_t ts;
    uint64_t pair;
    uint32_t flags;
    /* with CBT_EVF_ENQUEUED in flags (a stream's mark), else 0 */
    uint64_t enqueue_ns;
    uint32_t stream;
    int32_t device;
} tu_event;

/* cbt_init with `cfg` (NULL: defaults with a 50 us poll), plus a memory sink
 * and the recording subscriber. Asserts success. */
void tu_start(const cbt_config *cfg);
/* cbt_flush (asserting success) and refresh the span snapshot. */
void tu_flush(void);
/* cbt_shutdown, then snapshot the spans (shutdown may end incomplete ones). */
void tu_stop(void);
/* The same through cbt_shutdown_final: the final self-metrics into *m
 * (CBT_STRUCT_INIT'd here). */
void tu_stop_final(cbt_metrics *m);

/* cmocka teardown: after a failed test the tracer may still be up; take it
 * down (and release the memory sink) so the next test starts clean. */
int tu_teardown(void **state);

/* Span snapshot (valid after tu_flush / tu_stop). */
uint32_t tu_span_count(void);
const cbt_span *tu_span(uint32_t i);
/* The i-th span (in end order) named `name` whose session_id is `sid`
 * (sid NULL: any); NULL when there are fewer. */
const cbt_span *tu_find(const char *name, const char *sid, uint32_t i);
uint32_t tu_count(const char *name, const char *sid);
/* Attribute helpers: assert presence and type. */
int64_t tu_attr_i64(const cbt_span *s, const char *key);
double tu_attr_f64(const cbt_span *s, const char *key);
int tu_has_attr(const cbt_span *s, const char *key);
/* parent_span_id of `child` == span_id of `parent`, and same trace. */
int tu_is_child_of(const cbt_span *child, const cbt_span *parent);
int tu_is_root(const cbt_span *s);

/* Recorded dispatch order (valid after tu_flush / tu_stop). */
uint32_t tu_event_count(void);
const tu_event *tu_event_at(uint32_t i);
/* The i-th dispatched event of `type` for `sid`; NULL if none. */
const tu_event *tu_event_find(cbt_event_type type, const char *sid, uint32_t i);

/* Publish helpers (assert CBT_OK). */
void tu_pub(cbt_event_type type, const char *sid);
void tu_pub_i64(cbt_event_type type, const char *sid, const char *k1, int64_t v1,
                const char *k2, int64_t v2);
void tu_pub_on(cbt_stream *s, cbt_event_type type, const char *sid);
/* One MP request (7 events, 3 spans: the request root, mp.lookup_prefetch
 * and mp.store) for `sid`; n of them, sessions "<prefix>-<i>". */
void tu_pub_mp_request(const char *sid);
void tu_pub_mp_requests(const char *prefix, int n);

/* A gate: work that blocks a CPU stream until opened. */
typedef struct tu_gate tu_gate;
tu_gate *tu_gate_new(void);
void tu_gate_enqueue(tu_gate *g, cbt_stream *s); /* the stream stops here */
void tu_gate_open(tu_gate *g);
void tu_gate_free(tu_gate *g);

/* Work that sleeps `us` microseconds on the stream (a stand-in kernel). */
void tu_enqueue_sleep(cbt_stream *s, uint32_t us);

/* Work that records that a stream reached it: enqueue it, then wait (at
 * most 10 s; the test fails otherwise) until the stream has run it. */
typedef struct tu_reached {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int hit;
} tu_reached;
void tu_reached_init(tu_reached *r);
void tu_reached_fini(tu_reached *r);
void tu_reached_enqueue(tu_reached *r, cbt_stream *s);
void tu_reached_wait(tu_reached *r);

/* Dispatch position / timestamp of the nth event of `type` for `sid`, and
 * the nth span named `name` for `sid`; each fails the test when missing. */
uint32_t tu_event_pos(cbt_event_type type, const char *sid, uint32_t nth);
uint64_t tu_event_ts(cbt_event_type type, const char *sid, uint32_t nth);
const cbt_span *tu_need_span(const char *name, const char *sid, uint32_t nth);

/* Interned name helper (asserts). */
cbt_name tu_name(const char *s);

/* A big event made from (producer, seq) alone, so a consumer can check
 * every byte it got: session "p<producer>-s<seq>" (with junk past its NUL),
 * pair seq * 3 + 1, ts seq + 1000 with CBT_EVF_EXPLICIT_TS, a trace context
 * on every fifth, and seq % 17 values (0..16): producer and seq as i64,
 * then i64 / f64 / bool / string in turn, the strings 0..299 characters
 * (so inline and area ones, whole) and the 16th value, when there is one, a
 * 256-character string. Call tu_big_names() once on the main thread first
 * (it interns the keys); tu_big_event and tu_big_check are then safe on any
 * thread. tu_big_check returns NULL when `ev` is exactly that event, else
 * what differs (it never asserts: for producer and consumer threads). */
void tu_big_names(void);
void tu_big_event(cbt_event *ev, cbt_event_type type, uint32_t producer, uint64_t seq);
const char *tu_big_check(const cbt_event *ev, cbt_event_type type, uint32_t producer, uint64_t seq);
/* The (producer, seq) a tu_big_event carries in its session; 0 if none. */
int tu_big_ids(const cbt_event *ev, uint32_t *producer, uint64_t *seq);

#endif /* CBT_TESTUTIL_H */
