/* host/streams/stream_cuda_none.c — the CUDA stream backend when cbt is built without
 * CUDA: creation reports CBT_ERR_UNSUPPORTED, so no CUDA stream ever exists
 * and the harvester-side hooks are never reached with one. */
#include "internal/stream_impl.h"

cbt_status cbt_cuda_stream_init_(cbt_stream *s, void *cuda_stream)
{
    (void)s;
    (void)cuda_stream;
    return CBT_ERR_UNSUPPORTED;
}
cbt_status cbt_cuda_stream_enqueue_(cbt_stream *s, cbt_stream_fn fn, void *arg)
{
    (void)s, (void)fn, (void)arg;
    return CBT_ERR_UNSUPPORTED;
}
cbt_status cbt_cuda_stream_mark_(cbt_stream *s, cbt_tracer *t, const cbt_event *ev)
{
    (void)s, (void)t, (void)ev;
    return CBT_ERR_UNSUPPORTED;
}
cbt_status cbt_cuda_stream_sync_(cbt_stream *s)
{
    (void)s;
    return CBT_ERR_UNSUPPORTED;
}
int cbt_cuda_stream_fini_(cbt_stream *s)
{
    (void)s;
    return 1;
}
void cbt_stream_defer_(struct cbt_stream *s, cbt_tracer *t, const cbt_bus_item *item)
{
    (void)s, (void)t, (void)item;
}
uint32_t cbt_stream_poll_(struct cbt_stream *s, cbt_tracer *t)
{
    (void)s, (void)t;
    return 0;
}
