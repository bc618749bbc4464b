// tests/consume/kernel_span.cu — a user's instrumented kernel, built by nvcc
// against an installed cbt with nothing but -I<prefix>/include and linked
// with libcbt.so (tests/install_consume.sh: nvcc -cudart shared, the runtime
// libcbt itself uses). The kernel times itself with CBT_KERNEL_SPAN_BEGIN/END
// and a span handle from cbt_launch_begin; on a GPU the span must come back
// as a "gpu.kernel" child of the mp.store it was launched under, with the
// tokens the threads reported.
// Exit 0: ran and checked. 77: compiled and linked but not run (no CUDA
// device, or a cbt built without CUDA), the reason printed. 1: wrong.
#include <cstdio>
#include <cstring>
#include <ctime>

#include <cuda_runtime.h>

#include "cbt.h"
#include "cbt/kernel_span.h"

namespace {

constexpr unsigned kCtas = 4, kThreads = 64;
const char kSid[] = "consume-kernel-1";

__global__ void user_kernel(cbt_kspan span, float *out)
{
    CBT_KERNEL_SPAN_BEGIN(span);
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = 2.0f * static_cast<float>(i);
    CBT_KERNEL_SPAN_END(span, 1u); // one token per thread
}

bool pub(cbt_stream *s, cbt_event_type type)
{
    cbt_event e;
    if (cbt_event_init(&e, type, kSid) != CBT_OK)
        return false;
    return (s ? cbt_publish_on_stream(s, &e) : cbt_publish(&e)) == CBT_OK;
}

int fail(const char *what)
{
    std::fprintf(stderr, "kernel_span: FAIL %s\n", what);
    return 1;
}

int64_t attr_i64(const cbt_span &sp, cbt_name key)
{
    const cbt_attr *a = cbt_span_attr(&sp, key);
    return a && a->type == CBT_META_I64 ? a->v.i64 : -1;
}

} // namespace

int main()
{
    // (a run-time test, so that everything below is compiled in a CPU-only cbt too)
    if (!CBT_HAVE_CUDA) {
        std::printf("kernel_span: compiled and linked; not run: this cbt was built without CUDA\n");
        return 77;
    }
    int n_dev = 0;
    cudaError_t ce = cudaGetDeviceCount(&n_dev);
    if (ce != cudaSuccess || n_dev == 0) {
        std::printf("kernel_span: compiled and linked; not run: no CUDA device (%s)\n",
                    ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
        return 77;
    }
    float *d_out = nullptr;
    cudaStream_t cs;
    if (cudaMalloc(&d_out, kCtas * kThreads * sizeof(float)) != cudaSuccess ||
        cudaStreamCreate(&cs) != cudaSuccess)
        return fail("cudaMalloc / cudaStreamCreate");
    if (cbt_init(nullptr) != CBT_OK)
        return fail("cbt_init");
    cbt_memsink *ms = nullptr;
    cbt_sink sink;
    if (cbt_memsink_create(64, &ms, &sink) != CBT_OK || cbt_add_sink(&sink) != CBT_OK)
        return fail("memory sink");
    cbt_stream *s = nullptr;
    if (cbt_stream_cuda_create(cs, &s) != CBT_OK)
        return fail("cbt_stream_cuda_create");

    cbt_launch_info li = cbt_launch_info_default(CBT_KOP_USER, kCtas);
    cbt_kspan span;
    std::memset(&span, 0, sizeof span);
    if (!pub(nullptr, CBT_EV_MP_REQUEST_START) || !pub(nullptr, CBT_EV_MP_STORE_SUBMITTED) ||
        !pub(s, CBT_EV_MP_STORE_START))
        return fail("publish (start)");
    if (cbt_launch_begin(s, kSid, &li, &span) != CBT_OK || span.ring == nullptr)
        return fail("cbt_launch_begin: no traced span handle");
    user_kernel<<<kCtas, kThreads, 0, cs>>>(span, d_out);
    if (cudaGetLastError() != cudaSuccess)
        return fail("kernel launch");
    if (!pub(s, CBT_EV_MP_STORE_END) || !pub(nullptr, CBT_EV_MP_REQUEST_END))
        return fail("publish (end)");
    if (cbt_stream_sync(s) != CBT_OK)
        return fail("cbt_stream_sync");

    // the kernel's record is read from the ring by the harvester: wait for it
    cbt_span store{}, kern{};
    bool have_store = false, have_kern = false;
    for (int tries = 0; tries < 500 && !(have_store && have_kern); tries++) {
        cbt_flush(1000);
        for (uint32_t i = 0; i < cbt_memsink_count(ms); i++) {
            cbt_span sp;
            if (cbt_memsink_get(ms, i, &sp) != CBT_OK)
                continue;
            if (sp.name == CBT_N_MP_STORE) {
                store = sp;
                have_store = true;
            } else if (sp.name == CBT_N_GPU_KERNEL) {
                kern = sp;
                have_kern = true;
            }
        }
        struct timespec d = {0, 2000000};
        nanosleep(&d, nullptr);
    }
    int rc = 0;
    if (!have_store || !have_kern)
        rc = fail("expected spans mp.store and gpu.kernel");
    else if (std::memcmp(kern.parent_span_id, store.ctx.span_id, sizeof store.ctx.span_id) != 0)
        rc = fail("gpu.kernel is not a child of mp.store");
    else if (attr_i64(kern, CBT_N_SCATTERED_TOKENS) != kCtas * kThreads &&
             attr_i64(kern, CBT_N_TOKENS) != kCtas * kThreads)
        rc = fail("gpu.kernel does not carry the threads' tokens");
    cbt_stream_destroy(s);
    cbt_shutdown();
    cbt_memsink_release(ms);
    cudaStreamDestroy(cs);
    cudaFree(d_out);
    if (rc == 0)
        std::printf("kernel_span: OK ran on the GPU: mp.store -> gpu.kernel (%llu ns)\n",
                    static_cast<unsigned long long>(kern.end_ns - kern.start_ns));
    return rc;
}
