/* tests/consume/consumer.c — an out-of-tree user of an installed cbt
 * (tests/install_consume.sh builds it with CMake's find_package, and with a
 * Makefile through pkg-config, against libcbt.so and libcbt.a).
 *
 * One MP request, the README's way: REQUEST_START, STORE_SUBMITTED on the
 * CPU, STORE_START/END on a CPU stream, REQUEST_END; then an in-memory sink
 * must hold exactly a root "request" span and an "mp.store" child of it, in
 * one trace, both complete. Exits 0 and prints "consumer: OK ..." when so;
 * otherwise non-zero, saying what was wrong. Only <prefix>/include is needed. */
#include <stdio.h>
#include <string.h>

#include "cbt.h"

#define SID "consume-req-1"

static int fails;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "consumer: FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fputc('\n', stderr);                                           \
            fails++;                                                       \
        }                                                                  \
    } while (0)

static cbt_status pub(cbt_stream *s, cbt_event_type type)
{
    cbt_event e;
    cbt_status st = cbt_event_init(&e, type, SID);
    if (st != CBT_OK)
        return st;
    return s ? cbt_publish_on_stream(s, &e) : cbt_publish(&e);
}

static int is_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

static int has_session(const cbt_span *s)
{
    const cbt_attr *a = cbt_span_attr(s, CBT_N_SESSION_ID);
    return a && a->type == CBT_META_STR && a->str_len == strlen(SID) &&
           memcmp(cbt_attr_str(s, a), SID, a->str_len) == 0;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* in order with stderr when piped to a log */
    cbt_status st = cbt_init(NULL);
    if (st != CBT_OK) {
        fprintf(stderr, "consumer: FAIL cbt_init(NULL): %d\n", (int)st);
        return 1;
    }
    cbt_memsink *ms = NULL;
    cbt_sink sink;
    st = cbt_memsink_create(64, &ms, &sink);
    CHECK(st == CBT_OK, "cbt_memsink_create: %d", (int)st);
    if (st != CBT_OK)
        return 1;
    st = cbt_add_sink(&sink);
    CHECK(st == CBT_OK, "cbt_add_sink: %d", (int)st);

    cbt_stream *s = NULL;
    st = cbt_stream_cpu_create(0, &s);
    CHECK(st == CBT_OK, "cbt_stream_cpu_create: %d", (int)st);
    if (st != CBT_OK)
        return 1;

    CHECK(pub(NULL, CBT_EV_MP_REQUEST_START) == CBT_OK, "REQUEST_START");
    CHECK(pub(NULL, CBT_EV_MP_STORE_SUBMITTED) == CBT_OK, "STORE_SUBMITTED");
    CHECK(pub(s, CBT_EV_MP_STORE_START) == CBT_OK, "STORE_START");
    CHECK(pub(s, CBT_EV_MP_STORE_END) == CBT_OK, "STORE_END");
    CHECK(pub(NULL, CBT_EV_MP_REQUEST_END) == CBT_OK, "REQUEST_END");
    CHECK(cbt_stream_sync(s) == CBT_OK, "cbt_stream_sync");
    st = cbt_flush(5000);
    CHECK(st == CBT_OK, "cbt_flush: %d", (int)st);

    /* The spans, read before shutdown (which would end open ones as incomplete). */
    uint32_t n = cbt_memsink_count(ms);
    CHECK(n == 2, "expected 2 spans (request, mp.store), got %u", n);
    cbt_span root, store;
    int have_root = 0, have_store = 0;
    for (uint32_t i = 0; i < n; i++) {
        cbt_span sp;
        if (cbt_memsink_get(ms, i, &sp) != CBT_OK)
            continue;
        const char *name = cbt_name_str(sp.name);
        printf("consumer: span %s (flags 0x%x, %llu ns)\n", name, sp.flags,
               (unsigned long long)(sp.end_ns - sp.start_ns));
        if (sp.name == CBT_N_REQUEST && strcmp(name, "request") == 0) {
            root = sp;
            have_root++;
        } else if (sp.name == CBT_N_MP_STORE && strcmp(name, "mp.store") == 0) {
            store = sp;
            have_store++;
        } else {
            CHECK(0, "unexpected span '%s'", name);
        }
    }
    CHECK(have_root == 1, "expected one 'request' span, got %d", have_root);
    CHECK(have_store == 1, "expected one 'mp.store' span, got %d", have_store);
    if (have_root == 1 && have_store == 1) {
        CHECK(is_zero(root.parent_span_id, sizeof root.parent_span_id),
              "'request' is not a root (it has a parent)");
        CHECK(!is_zero(root.ctx.span_id, sizeof root.ctx.span_id), "'request' has no span id");
        CHECK(memcmp(store.parent_span_id, root.ctx.span_id, sizeof root.ctx.span_id) == 0,
              "'mp.store' is not a child of 'request'");
        CHECK(memcmp(store.ctx.trace_id, root.ctx.trace_id, sizeof root.ctx.trace_id) == 0,
              "'mp.store' is in another trace than 'request'");
        CHECK(!(root.flags & CBT_SPANF_INCOMPLETE), "'request' ended incomplete");
        CHECK(!(store.flags & CBT_SPANF_INCOMPLETE), "'mp.store' ended incomplete");
        CHECK(root.end_ns >= root.start_ns && store.end_ns >= store.start_ns,
              "a span ends before it starts");
        CHECK(has_session(&root), "'request' lacks session_id=" SID);
        CHECK(has_session(&store), "'mp.store' lacks session_id=" SID);
    }

    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics); /* version and size set, as cbt.h asks */
    if (cbt_metrics_get(&m) == CBT_OK)
        CHECK(m.dropped_full == 0 && m.rejected == 0 && m.subscriber_errors == 0,
              "events lost: dropped %llu rejected %llu subscriber errors %llu",
              (unsigned long long)m.dropped_full, (unsigned long long)m.rejected,
              (unsigned long long)m.subscriber_errors);

    cbt_stream_destroy(s);
    CHECK(cbt_shutdown() == CBT_OK, "cbt_shutdown");
    cbt_memsink_release(ms);
    if (fails) {
        fprintf(stderr, "consumer: %d check(s) failed\n", fails);
        return 1;
    }
    printf("consumer: OK cbt %s (ABI %d): request -> mp.store\n", CBT_VERSION_STRING,
           CBT_ABI_VERSION);
    return 0;
}
