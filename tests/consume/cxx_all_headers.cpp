// tests/consume/cxx_all_headers.cpp — every public header of an installed cbt,
// in one C++ translation unit, compiled by tests/install_consume.sh with
// nothing but -I<prefix>/include and -Wall -Wextra -Werror, then linked
// against libcbt.so and run: one MP request published through the C++ path
// (cbt_publish is out of line there) must come back as request -> mp.store.
//
// The list below must name every header installed under include/cbt/: the
// script fails, naming the header, when one is installed but missing here.
#include "cbt.h"
#include "cbt/api.h"
#include "cbt/array.h"
#include "cbt/blend_metrics.h"
#include "cbt/build_config.h"
#include "cbt/cb.h"
#include "cbt/context.h"
#include "cbt/cupti.h"
#include "cbt/event.h"
#include "cbt/kernel.h"
#include "cbt/kernel_span.h"
#include "cbt/kv_kernels.h"
#if __has_include("cbt/lmct.h") /* installed with msgpack-c only */
#include "cbt/lmct.h"
#endif
#include "cbt/mp.h"
#include "cbt/names.h"
#include "cbt/nvtx.h"
#include "cbt/otlp.h"
#include "cbt/pspan.h"
#include "cbt/replay.h"
#include "cbt/request_tree.h"
#include "cbt/ring.h"
#include "cbt/span.h"
#include "cbt/status.h"
#include "cbt/stream.h"
#include "cbt/trace_file.h"
#include "cbt/tree.h"

#include <cstdio>
#include <cstring>

namespace {

const char kSid[] = "consume-cxx-1";

bool pub(cbt_stream *s, cbt_event_type type)
{
    cbt_event e;
    if (cbt_event_init(&e, type, kSid) != CBT_OK)
        return false;
    return (s ? cbt_publish_on_stream(s, &e) : cbt_publish(&e)) == CBT_OK;
}

int fail(const char *what)
{
    std::fprintf(stderr, "cxx_all_headers: FAIL %s\n", what);
    return 1;
}

} // namespace

int main()
{
    // the inline helpers of the headers, from C++
    cbt_subscriber sub;
    cbt_subscriber_init(&sub, "cxx", nullptr, nullptr, nullptr, nullptr);
    cbt_subscriber_want(&sub, CBT_EV_MP_STORE_END);
    if (!cbt_subscriber_wants(&sub, CBT_EV_MP_STORE_END) || sizeof(cbt_kspan) != 16)
        return fail("inline helpers");

    if (cbt_init(nullptr) != CBT_OK)
        return fail("cbt_init(nullptr)");
    if (!cbt_enabled())
        return fail("cbt_enabled() after cbt_init");
    cbt_memsink *ms = nullptr;
    cbt_sink sink;
    if (cbt_memsink_create(16, &ms, &sink) != CBT_OK || cbt_add_sink(&sink) != CBT_OK)
        return fail("memory sink");
    cbt_stream *s = nullptr;
    if (cbt_stream_cpu_create(0, &s) != CBT_OK)
        return fail("cbt_stream_cpu_create");
    if (!pub(nullptr, CBT_EV_MP_REQUEST_START) || !pub(nullptr, CBT_EV_MP_STORE_SUBMITTED) ||
        !pub(s, CBT_EV_MP_STORE_START) || !pub(s, CBT_EV_MP_STORE_END) ||
        !pub(nullptr, CBT_EV_MP_REQUEST_END))
        return fail("publish");
    if (cbt_stream_sync(s) != CBT_OK || cbt_flush(5000) != CBT_OK)
        return fail("sync / flush");

    cbt_span root{}, store{};
    bool have_root = false, have_store = false;
    for (uint32_t i = 0; i < cbt_memsink_count(ms); i++) {
        cbt_span sp;
        if (cbt_memsink_get(ms, i, &sp) != CBT_OK)
            continue;
        if (sp.name == CBT_N_REQUEST) {
            root = sp;
            have_root = true;
        } else if (sp.name == CBT_N_MP_STORE) {
            store = sp;
            have_store = true;
        }
    }
    int rc = 0;
    cbt_metrics m = CBT_STRUCT_INIT(cbt_metrics);
    if (cbt_metrics_get(&m) != CBT_OK || m.spans_ended < 2)
        rc = fail("cbt_metrics_get with CBT_STRUCT_INIT");
    if (cbt_memsink_count(ms) != 2 || !have_root || !have_store)
        rc = fail("expected exactly the spans request and mp.store");
    else if (std::memcmp(store.parent_span_id, root.ctx.span_id, sizeof root.ctx.span_id) != 0)
        rc = fail("mp.store is not a child of request");
    cbt_stream_destroy(s);
    if (cbt_shutdown() != CBT_OK)
        rc = fail("cbt_shutdown");
    cbt_memsink_release(ms);
    if (rc == 0)
        std::printf("cxx_all_headers: OK (C++ %ld, cbt %s)\n", static_cast<long>(__cplusplus),
                    CBT_VERSION_STRING);
    return rc;
}
