/* host/core/record.c — owns the single-threaded FIFO of event records
 * (internal/record.h): the CUDA stream's pending marks live in one, so they
 * hold only the bytes their events use. */
#include "internal/record.h"

#include <stdlib.h>

cbt_status cbt_rec_fifo_init(cbt_rec_fifo *f, uint32_t cells)
{
    memset(f, 0, sizeof *f);
    if (cells < 64 || (cells & (cells - 1)) != 0)
        return CBT_ERR_INVAL;
    /* + 1: room to align the start to a cell */
    f->raw = malloc(((size_t)cells + CBT_REC_CELLS_MAX + 1) * CBT_REC_CELL);
    if (!f->raw)
        return CBT_ERR_NOMEM;
    uintptr_t p = ((uintptr_t)f->raw + CBT_REC_CELL - 1) & ~(uintptr_t)(CBT_REC_CELL - 1);
    f->cells = (unsigned char *)p;
    f->mask = cells - 1;
    return CBT_OK;
}

void cbt_rec_fifo_free(cbt_rec_fifo *f)
{
    free(f->raw);
    memset(f, 0, sizeof *f);
}

cbt_status cbt_rec_fifo_put(cbt_rec_fifo *f, const cbt_event *ev, uint64_t ticks)
{
    cbt_rec_size z = cbt_rec_size_of(ev, 0);
    if (f->tail + z.cells - f->head > f->mask + 1)
        return CBT_ERR_FULL;
    cbt_rec_write(f->cells + (f->tail & f->mask) * CBT_REC_CELL, z, ev, ticks, NULL, NULL);
    f->tail += z.cells;
    return CBT_OK;
}

void cbt_rec_fifo_oldest(const cbt_rec_fifo *f, cbt_event *ev, uint64_t *ticks)
{
    struct cbt_stream *s;
    void *m;
    cbt_rec_read(f->cells + (f->head & f->mask) * CBT_REC_CELL, ev, ticks, &s, &m);
}

void cbt_rec_fifo_drop(cbt_rec_fifo *f)
{
    f->head += cbt_rec_cells_of(f->cells + (f->head & f->mask) * CBT_REC_CELL);
}
