/* tests/test_span_queue.c — the OTLP exporter's queue of compact span
 * records (host/util/span_queue.c): a record expands back into a span whose
 * used parts, and whose OTLP bytes, are the original's; records are only
 * the used bytes; the ring wraps without overwriting what is held, refuses
 * what does not fit, and always fits one span when empty.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cbt/otlp.h"
#include "internal/span_queue.h"
#include "testutil.h"

/* A span with `n_attrs` attributes (every type, strings of `str_len`
 * bytes), `n_events` events with an attribute each, stamped `seq`. */
static void make_span(cbt_span *s, uint32_t seq, int n_attrs, size_t str_len, int n_events)
{
    memset(s, 0xA5, sizeof *s); /* junk in the unused parts, as a pool span has */
    memset(s, 0, offsetof(cbt_span, attrs));
    for (int i = 0; i < 16; i++)
        s->ctx.trace_id[i] = (uint8_t)(seq + (uint32_t)i + 1);
    for (int i = 0; i < 8; i++)
        s->ctx.span_id[i] = (uint8_t)(seq * 3 + (uint32_t)i + 1);
    s->ctx.trace_flags = 1;
    s->parent_span_id[0] = (uint8_t)seq;
    s->name = tu_name("mp.store");
    s->kind = CBT_SPAN_KIND_INTERNAL;
    s->start_ns = 1000 + seq;
    s->end_ns = 2000 + seq;
    char key[32], val[CBT_SPAN_STR_ARENA];
    for (size_t i = 0; i < str_len && i < sizeof val; i++)
        val[i] = (char)('a' + (seq + i) % 26);
    for (int i = 0; i < n_attrs; i++) {
        snprintf(key, sizeof key, "k%d", i);
        cbt_name k = tu_name(key);
        switch (i % 4) {
        case 0: { /* a long one may be cut, or refused once the arena is full */
            cbt_status st = cbt_span_set_str(s, k, val, str_len);
            assert_true(st == CBT_OK || st == CBT_ERR_FULL);
            break;
        }
        case 1: assert_int_equal(cbt_span_set_i64(s, k, (int64_t)seq * 7 + i), CBT_OK); break;
        case 2: assert_int_equal(cbt_span_set_f64(s, k, 0.5 * i), CBT_OK); break;
        default: assert_int_equal(cbt_span_set_bool(s, k, i & 1), CBT_OK); break;
        }
    }
    for (int e = 0; e < n_events; e++) {
        uint32_t x = 0;
        assert_int_equal(cbt_span_add_event(s, tu_name("exception"), 1500 + seq, &x), CBT_OK);
        cbt_status st = cbt_span_event_set_str(s, x, tu_name("exception.message"), "late", 4);
        assert_true(st == CBT_OK || st == CBT_ERR_FULL);
    }
}

/* The parts of a span an encoder reads are equal. */
static void assert_same_span(const cbt_span *a, const cbt_span *b)
{
    assert_memory_equal(a, b, offsetof(cbt_span, attrs));
    assert_memory_equal(a->attrs, b->attrs, a->n_attrs * sizeof(cbt_attr));
    assert_memory_equal(a->events, b->events, a->n_events * sizeof(cbt_span_event));
    assert_memory_equal(a->arena, b->arena, a->arena_used);
}

/* The same OTLP bytes from both (a build with the OTLP exporter; without
 * it, the field-by-field comparison above stands alone). */
static void assert_same_otlp(const cbt_span *a, const cbt_span *b)
{
#ifndef CBT_WITH_OTLP
    (void)a, (void)b;
#else
    cbt_otlp_resource r;
    memset(&r, 0, sizeof r);
    strcpy(r.service_name, "q");
    cbt_buf x = {0}, y = {0};
    assert_int_equal(cbt_otlp_encode_proto(&r, a, 1, &x), CBT_OK);
    assert_int_equal(cbt_otlp_encode_proto(&r, b, 1, &y), CBT_OK);
    assert_int_equal(x.len, y.len);
    assert_memory_equal(x.data, y.data, x.len);
    cbt_buf_free(&x);
    cbt_buf_free(&y);
#endif
}

static void round_trip(void **state)
{
    (void)state;
    static const int shapes[][3] = {{0, 0, 0}, {1, 40, 0}, {5, 40, 0}, {13, 40, 1},
                                    {CBT_SPAN_ATTR_MAX, 60, CBT_SPAN_EVENTS_MAX}};
    cbt_spanq q;
    assert_int_equal(cbt_spanq_init(&q, 0), CBT_OK);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        cbt_span s, out;
        int na = shapes[i][0] - shapes[i][2]; /* each event takes one attribute */
        make_span(&s, (uint32_t)i, na < 0 ? 0 : na, (size_t)shapes[i][1], shapes[i][2]);
        memset(&out, 0x5A, sizeof out);
        uint64_t at = q.tail;
        assert_int_equal(cbt_spanq_push(&q, &s), 1);
        assert_int_equal(q.tail - at, cbt_spanq_record_size(&s));
        assert_int_equal(cbt_spanq_next(&q, at), q.tail);
        assert_int_equal(cbt_spanq_read(&q, at, &out), q.tail);
        assert_same_span(&s, &out);
        assert_same_otlp(&s, &out);
        cbt_spanq_release(&q, q.tail);
    }
    cbt_spanq_free(&q);
}

/* Only the used bytes: an MP-like span (a 40-byte session id, 5 more
 * attributes) is a small fraction of sizeof(cbt_span), well inside the
 * per-span budget the exporter sizes its ring by; the largest is bounded. */
static void records_are_compact(void **state)
{
    (void)state;
    cbt_span s;
    make_span(&s, 1, 6, 40, 0);
    size_t mp = cbt_spanq_record_size(&s);
    print_message("MP-like span: %zu-byte record (sizeof(cbt_span) %zu)\n", mp, sizeof s);
    assert_true(mp <= CBT_OTLP_QUEUE_BYTES_PER_SPAN);
    assert_true(mp < sizeof s / 8);
    assert_true(mp % 8 == 0);
    make_span(&s, 1, CBT_SPAN_ATTR_MAX - CBT_SPAN_EVENTS_MAX, 2000, CBT_SPAN_EVENTS_MAX);
    assert_true(cbt_spanq_record_size(&s) <= CBT_SPANQ_RECORD_MAX);
}

/* A string value past arena_used (a span filled by hand) still goes out. */
static void string_past_arena_used(void **state)
{
    (void)state;
    cbt_span s, out;
    make_span(&s, 2, 1, 10, 0);
    memcpy(s.arena + 100, "far away", 8);
    s.attrs[0].str_off = 100;
    s.attrs[0].str_len = 8;
    cbt_spanq q;
    assert_int_equal(cbt_spanq_init(&q, 0), CBT_OK);
    assert_int_equal(cbt_spanq_push(&q, &s), 1);
    memset(&out, 0, sizeof out);
    cbt_spanq_read(&q, 0, &out);
    assert_memory_equal(out.arena + 100, "far away", 8);
    assert_same_otlp(&s, &out);
    cbt_spanq_free(&q);
}

/* Fill, drain some, refill across the ring's end, many times over: every
 * record read back is the one pushed in that order, a full ring refuses
 * (and writes nothing), and an empty one always takes the largest span. */
static void wraps_without_overwriting(void **state)
{
    (void)state;
    cbt_spanq q;
    assert_int_equal(cbt_spanq_init(&q, 3 * CBT_SPANQ_RECORD_MAX + 100), CBT_OK);
    assert_true(q.size % 8 == 0);
    uint32_t pushed = 0, popped = 0, refused = 0;
    uint64_t rd = 0;
    cbt_span s, out;
    for (int round = 0; round < 400; round++) {
        for (;;) { /* push until refused */
            uint32_t k = pushed;
            make_span(&s, k, (int)(k % 9), (size_t)(k * 37 % 700), (int)(k % 3));
            uint64_t tail = q.tail;
            if (!cbt_spanq_push(&q, &s)) {
                assert_int_equal(q.tail, tail);
                refused++;
                break;
            }
            assert_true(cbt_spanq_used(&q) <= q.size);
            pushed++;
        }
        uint32_t take = (uint32_t)(round % 5) + 1; /* drain a few */
        for (uint32_t i = 0; i < take && popped < pushed; i++, popped++) {
            cbt_span want;
            make_span(&want, popped, (int)(popped % 9), (size_t)(popped * 37 % 700),
                      (int)(popped % 3));
            memset(&out, 0x33, sizeof out);
            rd = cbt_spanq_read(&q, rd, &out);
            assert_same_span(&want, &out);
        }
        cbt_spanq_release(&q, rd);
    }
    print_message("%u pushed, %u read back, %u refusals, ring %zu bytes\n", pushed, popped,
                  refused, q.size);
    assert_true(pushed > 1000);
    while (popped < pushed) { /* what is left is intact too */
        cbt_span want;
        make_span(&want, popped, (int)(popped % 9), (size_t)(popped * 37 % 700), (int)(popped % 3));
        rd = cbt_spanq_read(&q, rd, &out);
        assert_same_span(&want, &out);
        popped++;
    }
    cbt_spanq_release(&q, rd);
    assert_int_equal(cbt_spanq_used(&q), 0);
    for (int i = 0; i < 8; i++) { /* empty: the largest span fits, wherever tail is */
        make_span(&s, 7, CBT_SPAN_ATTR_MAX - CBT_SPAN_EVENTS_MAX, 2000, CBT_SPAN_EVENTS_MAX);
        assert_int_equal(cbt_spanq_push(&q, &s), 1);
        rd = cbt_spanq_read(&q, rd, &out);
        assert_same_span(&s, &out);
        cbt_spanq_release(&q, rd);
        make_span(&s, 8, 3, (size_t)(100 + 300 * i), 0); /* move tail around */
        assert_int_equal(cbt_spanq_push(&q, &s), 1);
        rd = cbt_spanq_next(&q, rd);
        cbt_spanq_release(&q, rd);
    }
    cbt_spanq_free(&q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip),
        cmocka_unit_test(records_are_compact),
        cmocka_unit_test(string_past_arena_used),
        cmocka_unit_test(wraps_without_overwriting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
