/* host/device/ring_cuda_none.c — the CUDA ring placements when cbt is built without
 * CUDA: creation reports CBT_ERR_UNSUPPORTED, so no CUDA ring ever exists. */
#include "internal/tracer.h"
#include "internal/ring_host.h"

cbt_status cbt_ring_create_cuda(uint32_t capacity, cbt_ring_placement placement,
                                double host_ns_per_tick, cbt_ring **out)
{
    (void)capacity, (void)placement, (void)host_ns_per_tick, (void)out;
    return CBT_ERR_UNSUPPORTED;
}
uint32_t cbt_ring_cuda_poll_(cbt_ring *r, cbt_ring_rec *out, uint32_t max)
{
    (void)r, (void)out, (void)max;
    return 0;
}
uint32_t cbt_ring_cuda_probe_(void *ctx, uint32_t n, uint64_t *dev, uint64_t *lo, uint64_t *hi)
{
    (void)ctx, (void)n, (void)dev, (void)lo, (void)hi;
    return 0;
}
void cbt_ring_cuda_destroy_(cbt_ring *r, int detached) { (void)r, (void)detached; }
cbt_status cbt_cuda_stamp_event_(void *stream, void *event, unsigned long long *stamp_dev)
{
    (void)stream, (void)event, (void)stamp_dev;
    return CBT_ERR_UNSUPPORTED;
}
void cbt_ring_cuda_bind_(struct cbt_ring *r) { (void)r; }
