/* tests/test_array_outputs.c — array attributes in cbt's own outputs: the
 * JSON-lines span file (plain JSON arrays, a 128 k-token span written whole
 * past the fixed line buffer), the Perfetto trace file (args as JSON arrays,
 * the file still valid JSON), the console tree (the short form), and
 * `cbt report` reading the span file and the OTLP JSON file (a build with
 * OTLP) back: the arrays skipped, every span read, no bad line.
 * The OTLP outputs are tests/test_otlp_encode.c's, tests/otlp_decode.py's
 * and tests/test_otlp_http.c's.
 *
 * The files are read by Python's json module (python3 is a build
 * requirement), element by element. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "cbt/array.h"
#ifdef CBT_TEST_OTLP
#include "cbt/otlp.h"
#endif
#include "cbt/trace_file.h"
#include "cbt/tree.h"

#define BIG_IDS 131072 /* a 128 k-token prompt: a span-file line of about 1 MB */

static cbt_event_type g_type;

/* The subscriber: each "test.array.outputs" event becomes a span "arrays". */
static cbt_status make_span(void *ctx, cbt_tracer *t, const cbt_event *ev)
{
    (void)ctx;
    if (ev->type != g_type)
        return CBT_OK;
    cbt_span *s = cbt_span_start_for_event(t, tu_name("arrays"), CBT_SPAN_KIND_INTERNAL, NULL, ev);
    if (!s)
        return CBT_ERR_FULL;
    cbt_span_set_from_event(s, ev);
    cbt_span_set_str(s, CBT_N_SESSION_ID, ev->session, ev->session_len);
    cbt_span_end(t, s, ev->ts);
    return CBT_OK;
}

/* Every element type, an empty array and a 128 k-element one (i * 3, the
 * first two INT64_MAX and INT64_MIN). */
static void publish_arrays(const char *sid, size_t n_ids)
{
    int64_t *ids = malloc(n_ids * sizeof *ids);
    assert_non_null(ids);
    for (size_t i = 0; i < n_ids; i++)
        ids[i] = (int64_t)i * 3;
    ids[0] = INT64_MAX;
    ids[1] = INT64_MIN;
    const double fs[] = {1.5, NAN, -INFINITY, 1.0};
    const bool bs[] = {true, false};
    const char *const ss[] = {"a", "q\"b", "bad\xff", ""};
    static cbt_event ev;
    assert_int_equal(cbt_event_init(&ev, g_type, sid), CBT_OK);
    assert_int_equal(cbt_event_array_i64(&ev, tu_name("lmcache.input_ids"), ids, n_ids), CBT_OK);
    assert_int_equal(cbt_event_array_f64(&ev, tu_name("floats"), fs, 4), CBT_OK);
    assert_int_equal(cbt_event_array_bool(&ev, tu_name("bools"), bs, 2), CBT_OK);
    assert_int_equal(cbt_event_array_str(&ev, tu_name("strings"), ss, 4), CBT_OK);
    assert_int_equal(cbt_event_array_i64(&ev, tu_name("empty"), NULL, 0), CBT_OK);
    assert_int_equal(cbt_event_i64(&ev, tu_name("plain"), 7), CBT_OK);
    assert_int_equal(cbt_publish(&ev), CBT_OK);
    free(ids);
}

static int run_python(const char *script, const char *a1, const char *a2)
{
    char path[] = "/tmp/cbt-arrays-py-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t len = strlen(script);
    assert_int_equal(write(fd, script, len), (ssize_t)len);
    close(fd);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "python3 %s %s %s", path, a1, a2 ? a2 : "");
    int rc = system(cmd);
    unlink(path);
    return rc;
}

/* The span file: every line JSON alone, the small spans around the big one
 * all there, the arrays element by element. */
static const char k_check_spans[] =
    "import json, sys\n"
    "lines = open(sys.argv[1], encoding='utf-8').read().split('\\n')\n"
    "assert lines[-1] == '', 'the file does not end with a whole line'\n"
    "spans = [json.loads(l) for l in lines[:-1]]\n"
    "big = [s for s in spans if s['name'] == 'arrays']\n"
    "assert len(big) == 2, len(big)\n"
    "assert sum(1 for s in spans if s['name'] == 'request') == 6, 'small spans lost'\n"
    "for s in big:\n"
    "    a = s['attributes']\n"
    "    ids = a['lmcache.input_ids']\n"
    "    n = 131072 if s['attributes']['session_id'] == 'big' else 5\n"
    "    assert len(ids) == n, len(ids)\n"
    "    assert ids[:2] == [2**63 - 1, -2**63], ids[:2]\n"
    "    assert all(ids[i] == 3 * i for i in range(2, n)), 'an element differs'\n"
    "    assert a['floats'] == [1.5, 'NaN', '-Infinity', 1.0], a['floats']\n"
    "    assert a['bools'] == [True, False], a['bools']\n"
    "    assert a['strings'] == ['a', 'q\"b', 'bad\\ufffd', ''], a['strings']\n"
    "    assert a['empty'] == [], a['empty']\n"
    "    assert a['plain'] == 7\n"
    "    assert s['dropped_attributes'] == 0\n"
    "print('span file: %d lines, arrays whole' % len(spans))\n";

/* The trace file: valid JSON, the slice's args hold the arrays whole. */
static const char k_check_trace[] =
    "import json, sys\n"
    "d = json.load(open(sys.argv[1], encoding='utf-8'))\n"
    "x = [e for e in d['traceEvents'] if e['ph'] == 'X' and e['name'] == 'arrays']\n"
    "assert len(x) == 2, len(x)\n"
    "for e in x:\n"
    "    a = e['args']\n"
    "    n = 131072 if a['session_id'] == 'big' else 5\n"
    "    ids = a['lmcache.input_ids']\n"
    "    assert len(ids) == n and ids[:2] == [2**63 - 1, -2**63]\n"
    "    assert all(ids[i] == 3 * i for i in range(2, n))\n"
    "    assert a['floats'] == [1.5, 'NaN', '-Infinity', 1.0] and a['bools'] == [True, False]\n"
    "    assert a['strings'] == ['a', 'q\"b', 'bad\\ufffd', ''] and a['empty'] == []\n"
    "print('trace file: valid, arrays whole')\n";

static void report_reads(const char *dir, const char *file, const char *format)
{
    char cmd[600], out[256];
    snprintf(out, sizeof out, "%s/report.txt", dir);
    snprintf(cmd, sizeof cmd, "%s report %s > %s 2>&1", CBT_CLI_PATH, file, out);
    int rc = system(cmd);
    FILE *rf = fopen(out, "r");
    assert_non_null(rf);
    static char rep[1 << 16];
    size_t rn = fread(rep, 1, sizeof rep - 1, rf);
    rep[rn] = '\0';
    fclose(rf);
    print_message("%.400s\n", rep);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(rep, "1 file, 20 spans"));
    assert_non_null(strstr(rep, format));
    assert_non_null(strstr(rep, "COMPLETENESS: whole: no bad lines"));
    unlink(out);
}

static void arrays_in_files(void **state)
{
    (void)state;
    char dir[] = "/tmp/cbt-arrays-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char spans[256], trace[256];
    snprintf(spans, sizeof spans, "%s/spans.jsonl", dir);
    snprintf(trace, sizeof trace, "%s/trace.json", dir);
    char otlp[256]; /* the OTLP JSON file (cbt report's other JSON input) */
    snprintf(otlp, sizeof otlp, "%s/spans.otlp.jsonl", dir);
    tu_start(NULL);
    cbt_sink k;
    assert_int_equal(cbt_jsonl_sink_create(spans, &k), CBT_OK);
    assert_int_equal(cbt_add_sink(&k), CBT_OK);
    assert_int_equal(cbt_trace_file_sink_create(trace, &k), CBT_OK);
    assert_int_equal(cbt_add_sink(&k), CBT_OK);
#ifdef CBT_TEST_OTLP
    cbt_otlp_resource res;
    cbt_otlp_resource_default(&res);
    assert_int_equal(cbt_otlp_json_sink_create(otlp, &res, &k), CBT_OK);
    assert_int_equal(cbt_add_sink(&k), CBT_OK);
#endif
    assert_int_equal(cbt_event_type_register("test.array.outputs", &g_type), CBT_OK);
    cbt_subscriber sub;
    memset(&sub, 0, sizeof sub);
    sub.version = CBT_SUBSCRIBER_VERSION;
    sub.size = sizeof sub;
    sub.name = "test-array-outputs";
    sub.on_event = make_span;
    memset(sub.mask, 0xff, sizeof sub.mask);
    assert_int_equal(cbt_add_subscriber(&sub), CBT_OK);

    tu_pub_mp_requests("before", 3); /* lines buffered ahead of the big one */
    publish_arrays("small", 5);
    publish_arrays("big", BIG_IDS);
    tu_pub_mp_requests("after", 3);
    tu_flush();

    /* the console tree: the short form */
    char *text = NULL;
    size_t text_len = 0;
    FILE *mf = open_memstream(&text, &text_len);
    assert_non_null(mf);
    const cbt_span *big = tu_find("arrays", "big", 0);
    assert_non_null(big);
    cbt_tree_print(mf, big, 1, 1);
    fclose(mf);
    print_message("%s", text);
    assert_non_null(strstr(text, " lmcache.input_ids=[9223372036854775807,"
                                 "-9223372036854775808,6,9 ... 131072 ints]"));
    assert_non_null(strstr(text, " floats=[1.5,nan,-inf,1]"));
    assert_non_null(strstr(text, " bools=[true,false]"));
    assert_non_null(strstr(text, " strings=[\"a\",\"q\"b\",\"bad\xff\",\"\"]"));
    assert_non_null(strstr(text, " empty=[]"));
    free(text);

    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    assert_int_equal(cbt_metrics_get(&m), CBT_OK);
    assert_int_equal(m.sink_spans_lost, 0);
    tu_stop();

    assert_int_equal(run_python(k_check_spans, spans, NULL), 0);
    assert_int_equal(run_python(k_check_trace, trace, NULL), 0);

    /* cbt report reads the span file (and the OTLP JSON file): the arrays
     * skipped, every span read, no bad line */
    report_reads(dir, spans, "cbt span file");
#ifdef CBT_TEST_OTLP
    report_reads(dir, otlp, "OTLP JSON");
    unlink(otlp);
#endif
    unlink(spans);
    unlink(trace);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(arrays_in_files, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
