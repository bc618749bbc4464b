/* host/internal/ring_host.h — owns the host side of a device ring: its memory, the
 * harvesting read, and its clock calibration.
 *
 * Three placements: HOST (the CPU backend: plain host memory), MAPPED
 * (pinned host memory mapped into the device; read in place) and DEVICE
 * (device memory; each poll copies the new window out with cudaMemcpyAsync
 * on the ring's own stream). The read is the consumer half of the protocol
 * in cbt/ring.h. Harvester thread only, except create/destroy.
 */
#ifndef CBT_HOST_INTERNAL_RING_H
#define CBT_HOST_INTERNAL_RING_H

#include <stdint.h>

#include "cbt/kernel.h"
#include "cbt/status.h"
#include "cbt/ring.h"
#include "internal/clock.h"
#include "internal/devclock.h"

enum { CBT_RING_PLACE_HOST = 100 }; /* besides cbt_ring_placement's values */

typedef struct cbt_ring {
    int placement;
    uint32_t capacity;
    /* what kernels get in their span handle: a pointer valid where they run
     * (host memory for HOST; device-visible memory for the CUDA placements) */
    const cbt_ring_dev *view;
    cbt_ring_dev host_dev;   /* HOST placement: the ring itself */
    cbt_ring_rec *recs;      /* records as the harvester reads them */
    uint64_t next;           /* next position to read */
    uint64_t harvested, lost, torn;
    cbt_devclock clock;
    void *cuda;              /* ring_cuda.cu's state for the CUDA placements */
} cbt_ring;

/* A device timestamp from this ring's clock in unix-epoch ns: the ring's
 * device -> host-ticks line, then the tracer's host clock map. */
static inline uint64_t cbt_ring_dev_to_unix(const cbt_ring *r, const cbt_clock_map *host,
                                            uint64_t dev_ns)
{
    return cbt_clock_to_unix(host, cbt_devclock_to_ticks(&r->clock, dev_ns));
}

/* A ring in host memory for the CPU backend (capacity: power of two). */
cbt_status cbt_ring_create_host(uint32_t capacity, double host_ns_per_tick, cbt_ring **out);
/* A ring for the current CUDA device. CBT_ERR_UNSUPPORTED without CUDA,
 * CBT_ERR_NO_DEVICE without a device. */
cbt_status cbt_ring_create_cuda(uint32_t capacity, cbt_ring_placement placement,
                                double host_ns_per_tick, cbt_ring **out);
void cbt_ring_destroy(cbt_ring *r);

/* How a ring's memory is freed. NOW: here, before returning (for a CUDA
 * placement cudaFree/cudaFreeHost, which wait for the device to finish all
 * its pending work). DETACHED: by a detached thread that frees and exits, so
 * the caller does not wait for the device. */
typedef enum { CBT_RING_FREE_NOW = 0, CBT_RING_FREE_DETACHED = 1 } cbt_ring_free_path;
/* The path for a ring of `placement` when shutdown abandoned
 * `abandoned_marks` stream marks (t->abandoned_marks): the HOST placement
 * always NOW (plain free, never waits); a CUDA placement NOW unless marks were
 * abandoned (work the device may still be running for a long time), then
 * DETACHED. */
cbt_ring_free_path cbt_ring_free_path_(int placement, uint32_t abandoned_marks);
/* cbt_ring_destroy, on the path cbt_ring_free_path_ chooses. */
void cbt_ring_destroy_after_(cbt_ring *r, uint32_t abandoned_marks);

/* Read up to `max` committed records into out[], in position order, counting
 * overwritten positions as lost. Returns how many were read. */
uint32_t cbt_ring_poll(cbt_ring *r, cbt_ring_rec *out, uint32_t max);

/* The consumer read over a record array (shared by every placement). */
uint32_t cbt_ring_read_(cbt_ring *r, const cbt_ring_rec *recs, cbt_ring_rec *out, uint32_t max);

/* Take a burst of clock probes and refit (device clock -> host ticks). */
void cbt_ring_calibrate(cbt_ring *r, uint32_t n);

/* CUDA placements (ring_cuda.cu). */
uint32_t cbt_ring_cuda_poll_(cbt_ring *r, cbt_ring_rec *out, uint32_t max);
uint32_t cbt_ring_cuda_probe_(void *ctx, uint32_t n, uint64_t *dev, uint64_t *lo, uint64_t *hi);
/* Free the CUDA state (detached: on a thread of its own, which exits after
 * the frees; if that thread cannot start, here). */
void cbt_ring_cuda_destroy_(cbt_ring *r, int detached);
/* Queue on `stream` a one-thread kernel that writes the device's %globaltimer
 * to `*stamp_dev` (a device pointer to mapped host memory the caller keeps
 * until `event` has completed), then record `event` after it: the anchor that
 * puts CUDA-event times on the device clock. Waits for nothing: the caller
 * reads the mapped word once cudaEventQuery(event) says it completed. */
cbt_status cbt_cuda_stamp_event_(void *stream, void *event, unsigned long long *stamp_dev);

#endif /* CBT_HOST_INTERNAL_RING_H */
