/* tests/test_trace_file.c — the Chrome trace-event file: valid JSON after
 * every flush and at shutdown, every span present once with its attributes,
 * per-CTA records on per-SM lanes. JSON is checked by Python's json module
 * (python3 is one of the build's packages). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cbt/kernel_span.h"
#include "testutil.h"
#include "cbt/trace_file.h"

/* python3 prints: <#span slices: X events but the CTAs and the enqueue
 * slices> <#X events in pid 3> <#distinct span ids> <has session arg in a
 * root>; it fails unless every enqueue slice names a span slice */
static int check_json(const char *path, long *host_gpu, long *ctas, long *distinct, long *sess)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,sys\n"
             "d=json.load(open(sys.argv[1]))\n"
             "ev=d[\"traceEvents\"]\n"
             "x=[e for e in ev if e[\"ph\"]==\"X\"]\n"
             "hg=[e for e in x if e[\"cat\"] not in (\"cta\",\"enqueue\")]\n"
             "c=[e for e in x if e[\"pid\"]==3]\n"
             "ids=set(e[\"args\"][\"span_id\"] for e in hg)\n"
             "q=[e for e in x if e[\"cat\"]==\"enqueue\"]\n"
             "assert q and all(e[\"args\"][\"span_id\"] in ids for e in q)\n"
             "s=sum(1 for e in hg if e[\"name\"]==\"request\" and \"session_id\" in e[\"args\"])\n"
             "print(len(hg),len(c),len(ids),s)' %s",
             path);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    int n = fscanf(p, "%ld %ld %ld %ld", host_gpu, ctas, distinct, sess);
    int rc = pclose(p);
    return (n == 4 && rc == 0) ? 0 : -1;
}

typedef struct job {
    cbt_kspan span;
} job;

static void cta_fn(void *a, uint32_t cta, uint32_t n)
{
    (void)n;
    job *j = a;
    CBT_KERNEL_SPAN_BEGIN(j->span);
    CBT_KERNEL_SPAN_END(j->span, 10 + cta);
}

static void one_request(cbt_stream *s, const char *sid, job *j, uint8_t mode)
{
    tu_pub(CBT_EV_MP_REQUEST_START, sid);
    tu_pub(CBT_EV_MP_LOOKUP_PREFETCH_START, sid);
    tu_pub_i64(CBT_EV_MP_LOOKUP_PREFETCH_END, sid, "hit_tokens", 256, "requested_tokens", 512);
    tu_pub(CBT_EV_MP_RETRIEVE_SUBMITTED, sid);
    tu_pub_on(s, CBT_EV_MP_RETRIEVE_START, sid);
    cbt_launch_info li = cbt_launch_info_default(CBT_KOP_SCATTER, 3);
    li.mode = mode;
    li.requested_tokens = 256;
    assert_int_equal(cbt_launch_begin(s, sid, &li, &j->span), CBT_OK);
    assert_int_equal(cbt_cpu_launch(s, 3, cta_fn, j), CBT_OK);
    tu_pub_on(s, CBT_EV_MP_RETRIEVE_END, sid);
    tu_pub(CBT_EV_MP_REQUEST_END, sid);
    cbt_stream_sync(s);
}

static void trace_file_holds_every_span(void **state)
{
    (void)state;
    char path[] = "/tmp/cbt-trace-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    tu_start(NULL);
    cbt_sink sink;
    assert_int_equal(cbt_trace_file_sink_create(path, &sink), CBT_OK);
    assert_int_equal(cbt_add_sink(&sink), CBT_OK);
    cbt_stream *s;
    assert_int_equal(cbt_stream_cpu_create(0, &s), CBT_OK);
    job j1, j2;
    one_request(s, "tf-1", &j1, CBT_REC_CTA);
    for (int i = 0; i < 200 && tu_count("cb.scatter", "tf-1") == 0; i++) {
        struct timespec d = {0, 2000000};
        nanosleep(&d, NULL);
        tu_flush();
    }
    tu_flush();
    /* valid after a flush, mid-run */
    long hg, ctas, distinct, sess;
    assert_int_equal(check_json(path, &hg, &ctas, &distinct, &sess), 0);
    assert_int_equal(hg, (long)tu_span_count());
    assert_int_equal(ctas, 3);
    /* more events after the flush keep it valid */
    one_request(s, "tf-2", &j2, CBT_REC_LAUNCH);
    for (int i = 0; i < 200 && tu_count("cb.scatter", "tf-2") == 0; i++) {
        struct timespec d = {0, 2000000};
        nanosleep(&d, NULL);
        tu_flush();
    }
    cbt_stream_destroy(s);
    tu_stop();
    assert_int_equal(check_json(path, &hg, &ctas, &distinct, &sess), 0);
    assert_int_equal(hg, (long)tu_span_count());
    assert_int_equal(distinct, (long)tu_span_count());
    assert_int_equal(ctas, 3);  /* the second launch was per-launch */
    assert_int_equal(sess, 2);  /* both roots carry session_id in args */
    assert_int_equal(tu_count("cb.scatter", NULL), 2);
    unlink(path);
}

/* Run a Python check on the trace file at `path`; 0 when it exits 0. */
static int python_check(const char *path, const char *script)
{
    char py[] = "/tmp/cbt_tf_check_XXXXXX";
    int fd = mkstemp(py);
    assert_true(fd >= 0);
    size_t n = strlen(script);
    assert_int_equal(write(fd, script, n), (ssize_t)n);
    close(fd);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "python3 %s %s", py, path);
    int rc = system(cmd);
    unlink(py);
    return rc;
}

/* Span events become instant events right after their span's slice, on its
 * lane, at their own times, with their attributes; a span at the size
 * limits still fits the sink's line. Fed to the sink directly. */
static void trace_file_span_events(void **state)
{
    (void)state;
    char path[] = "/tmp/cbt_test_tf_ev_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    cbt_sink k;
    assert_int_equal(cbt_trace_file_sink_create(path, &k), CBT_OK);

    static cbt_span s;
    memset(&s, 0, sizeof s);
    memset(s.ctx.trace_id, 0x11, 16);
    memset(s.ctx.span_id, 0x22, 8);
    memset(s.parent_span_id, 0x33, 8);
    s.ctx.trace_flags = 1;
    s.name = CBT_N_TIMEOUT;
    s.start_ns = 1700000000000001000ull;
    s.end_ns = 1700000000000001000ull;
    assert_int_equal(cbt_span_set_str(&s, CBT_N_SESSION_ID, "r1", 2), CBT_OK);
    uint32_t e;
    assert_int_equal(cbt_span_add_event(&s, CBT_N_EXCEPTION, 1700000000000001000ull, &e), CBT_OK);
    assert_int_equal(cbt_span_event_set_str(&s, e, CBT_N_EXC_TYPE, "TimeoutError", 12), CBT_OK);
    assert_int_equal(cbt_span_event_set_str(&s, e, CBT_N_EXC_STACKTRACE, "a\nb", 3), CBT_OK);
    assert_int_equal(cbt_span_add_event(&s, tu_name("retry"), 1700000000000002500ull, &e), CBT_OK);
    assert_int_equal(cbt_span_event_set_i64(&s, e, tu_name("attempt"), 2), CBT_OK);
    assert_int_equal(k.on_span(k.ctx, &s), CBT_OK);

    /* the largest span there is: 63-byte names and keys of control
     * characters, a full arena of them, four events */
    static cbt_span big;
    big = s;
    big.n_attrs = 0;
    big.arena_used = 0;
    big.n_events = 0;
    char nm[CBT_NAME_LEN_MAX];
    memset(nm, 0x01, sizeof nm - 1);
    nm[sizeof nm - 1] = '\0';
    big.name = tu_name(nm);
    char val[CBT_SPAN_STR_ARENA / CBT_SPAN_ATTR_MAX];
    memset(val, 0x02, sizeof val);
    for (int i = 0; i < CBT_SPAN_EVENTS_MAX; i++) {
        nm[sizeof nm - 2] = (char)(0x40 + i);
        assert_int_equal(cbt_span_add_event(&big, tu_name(nm), 1, NULL), CBT_OK);
    }
    for (int i = 0; i < CBT_SPAN_ATTR_MAX; i++) { /* all on the slice: its longest line */
        nm[sizeof nm - 2] = (char)(0x03 + i);
        assert_int_equal(cbt_span_set_str(&big, tu_name(nm), val, sizeof val), CBT_OK);
    }
    assert_int_equal(big.arena_used, CBT_SPAN_STR_ARENA);
    assert_int_equal(k.on_span(k.ctx, &big), CBT_OK);
    k.destroy(k.ctx);

    char script[2048];
    snprintf(script, sizeof script,
        "import json,sys\n"
        "ev=json.load(open(sys.argv[1]))['traceEvents']\n"
        "ev=[e for e in ev if e['ph']!='M']\n"
        "assert [e['ph'] for e in ev]==['X','i','i','X','i','i','i','i'], [e['ph'] for e in ev]\n"
        "x,a,b=ev[0],ev[1],ev[2]\n"
        "assert x['name']=='timeout' and x['args']['session_id']=='r1', x\n"
        "assert 'exception.type' not in x['args'], x\n"
        "for i in (a,b):\n"
        "    assert (i['pid'],i['tid'],i['s'],i['cat'])==(x['pid'],x['tid'],'t',x['cat']), i\n"
        "    assert i['args']['span_id']=='2222222222222222' and i['args']['span']=='timeout', i\n"
        "assert a['name']=='exception' and a['ts']==1700000000000001.0, a\n"
        "assert a['args']['exception.type']=='TimeoutError', a\n"
        "assert a['args']['exception.stacktrace']=='a\\nb', a\n"
        "assert b['name']=='retry' and b['ts']==1700000000000002.5, b\n"
        "assert b['args']['attempt']==2 and 'exception.type' not in b['args'], b\n"
        "assert len(ev[3]['args'])==3+%d, ev[3]['args'].keys()\n"
        "assert all(len(e['args'])==2 for e in ev[4:]), ev[4:]\n", CBT_SPAN_ATTR_MAX);
    assert_int_equal(python_check(path, script), 0);
    unlink(path);
}

/* A span set on the stream it says (fed to the sink directly): the
 * timeline checker (tests/trace_timeline_check.py --file) holds a CUDA
 * device's file to the same rules as the demo's CPU one: "GPU 1" is a
 * process, streams 5 and 6 lanes of it (5 also a kernels lane), every
 * stream-timed span an arrow from its enqueue, the root on the host. */
static void stream_span(cbt_span *s, cbt_name name, uint8_t id, uint32_t stream, uint64_t start,
                        uint64_t enq, int kernel)
{
    memset(s, 0, sizeof *s);
    memset(s->ctx.trace_id, 0x44, 16);
    memset(s->ctx.span_id, id, 8);
    memset(s->parent_span_id, 0x55, 8);
    s->ctx.trace_flags = 1;
    s->name = name;
    s->start_ns = start;
    s->end_ns = start + 2000000;
    assert_int_equal(cbt_span_set_str(s, CBT_N_SESSION_ID, "r2", 2), CBT_OK);
    if (kernel)
        assert_int_equal(cbt_span_set_i64(s, CBT_N_LAUNCH_ID, id), CBT_OK);
    assert_int_equal(cbt_span_set_i64(s, CBT_N_QUEUE_NS, (int64_t)(start - enq)), CBT_OK);
    assert_int_equal(cbt_span_set_i64(s, CBT_N_ENQUEUE_NS, (int64_t)enq), CBT_OK);
    assert_int_equal(cbt_span_set_i64(s, CBT_N_CBT_STREAM, stream), CBT_OK);
    assert_int_equal(cbt_span_set_str(s, CBT_N_CBT_DEVICE, "cuda:1", 6), CBT_OK);
}

static void trace_file_gpu_streams(void **state)
{
    (void)state;
    char path[] = "/tmp/cbt_test_tf_gpu_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    cbt_sink k;
    assert_int_equal(cbt_trace_file_sink_create(path, &k), CBT_OK);
    static cbt_span sp[4];
    const uint64_t T = 1700000000000000000ull;
    stream_span(&sp[0], CBT_N_MP_RETRIEVE, 0x61, 5, T + 30000000, T + 1000000, 0);
    stream_span(&sp[1], CBT_N_CB_SCATTER, 0x62, 5, T + 30500000, T + 1200000, 1);
    stream_span(&sp[2], CBT_N_MP_STORE, 0x63, 6, T + 2000000, T + 1500000, 0);
    memset(&sp[3], 0, sizeof sp[3]); /* the root, on the host */
    memset(sp[3].ctx.trace_id, 0x44, 16);
    memset(sp[3].ctx.span_id, 0x55, 8);
    sp[3].ctx.trace_flags = 1;
    sp[3].name = CBT_N_REQUEST;
    sp[3].start_ns = T;
    sp[3].end_ns = T + 40000000;
    assert_int_equal(cbt_span_set_str(&sp[3], CBT_N_SESSION_ID, "r2", 2), CBT_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(k.on_span(k.ctx, &sp[i]), CBT_OK);
    k.destroy(k.ctx);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "python3 %s/tests/trace_timeline_check.py --file %s", CBT_SOURCE_DIR,
             path);
    assert_int_equal(system(cmd), 0);
    char script[1024];
    snprintf(script, sizeof script,
        "import json,sys\n"
        "ev=json.load(open(sys.argv[1]))['traceEvents']\n"
        "p={e['pid']:e['args']['name'] for e in ev if e['name']=='process_name'}\n"
        "t={(e['pid'],e['tid']):e['args']['name'] for e in ev if e['name']=='thread_name'}\n"
        "assert p.get(%d)=='GPU 1', p\n"
        "names=sorted(v for (pid,tid),v in t.items() if pid==%d)\n"
        "assert names==['stream 5','stream 5 kernels','stream 6'], names\n"
        "assert sum(1 for e in ev if e['ph']=='s')==3\n"
        "r=[e for e in ev if e['ph']=='X' and e['name']=='request']\n"
        "assert len(r)==1 and r[0]['pid']==1, r\n", 101, 101);
    assert_int_equal(python_check(path, script), 0);
    unlink(path);
}

static void trace_file_refuses_bad_paths(void **state)
{
    (void)state;
    cbt_sink sink;
    assert_int_equal(cbt_trace_file_sink_create("/nonexistent-dir/x.json", &sink), CBT_ERR_IO);
    assert_int_equal(cbt_trace_file_sink_create("/dev/null", &sink), CBT_ERR_IO); /* not seekable */
    assert_int_equal(cbt_trace_file_sink_create(NULL, &sink), CBT_ERR_INVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(trace_file_holds_every_span, tu_teardown),
        cmocka_unit_test(trace_file_span_events),
        cmocka_unit_test(trace_file_gpu_streams),
        cmocka_unit_test(trace_file_refuses_bad_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
