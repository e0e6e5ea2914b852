/*
 * resize_cuda.c — CUDA launcher of Resize/Upsample (resize_<T> of
 * resize.cu).  resize.c resolves the attributes and the roi/scales/sizes
 * inputs (host inputs on the GPU) with the CPU op's own code and passes
 * the result; this file checks types and launches: resize_rows_<T> where
 * nearest mode resizes only the last two dims (rows_ok), else the
 * general resize_<T>.  (A lean nearest-mode kernel of one thread per
 * element, resize_nearest_<T>, was tried in session 5 and removed: on an
 * H200 it took 11.7 ms per PP-OCRv4 det b32 FP16 run against
 * resize_<T>'s 4.75.)
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_cuda.h"

#include <stdint.h>
#include <stdio.h>

/* resize_rows_<T> takes p: nearest mode, at least 2 dims, every dim
 * before the last two copied (the taps' identity case), no
 * tf_crop_and_resize (no outside), the two tap tables within 32 KiB of
 * shared memory, rows and dims within its 32-bit indices. */
static int rows_ok(const kiln_cu_resize *p) {
    if (p->mode != 0 || p->ndim < 2 || p->coord == 5) return 0;
    int64_t rows = 1;
    for (int d = 0; d < p->ndim - 2; d++) {
        if (p->in_dims[d] != p->out_dims[d] || p->scale[d] != 1.0) return 0;
        rows *= p->out_dims[d];
    }
    const int64_t ih = p->in_dims[p->ndim - 2], iw = p->in_dims[p->ndim - 1], oh = p->out_dims[p->ndim - 2],
                  ow = p->out_dims[p->ndim - 1];
    rows *= oh;
    return oh > 0 && ow > 0 && oh + ow <= 8192 && ih <= INT32_MAX && iw <= INT32_MAX && rows <= UINT32_MAX / 2;
}

int kiln__cu_resize(const kiln_call *c, const kiln_cu_resize *a) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    if (x->dtype != KILN_DTYPE_F32 && x->dtype != KILN_DTYPE_F16 && x->dtype != KILN_DTYPE_BF16)
        return kiln__cu_type_err("Resize", x->dtype);
    if (!kiln__cu_contig(x) || !kiln__cu_contig(y))
        return kiln_set_error(KILN_EUNSUPPORTED, "Resize: CUDA kernel needs contiguous tensors");
    for (int i = 1; i < c->nin; i++)
        if (kiln__cu_has_in(c, i) && c->in[i].device != KILN_DEVICE_CPU)
            return kiln_set_error(KILN_EINTERNAL, "Resize: input %d is not in host memory", i);
    kiln_cu_resize p = *a;
    void *args[] = {&p, (void *)&x->data, &y->data};
    if (rows_ok(&p)) {
        const int64_t oh = p.out_dims[p.ndim - 2], ow = p.out_dims[p.ndim - 1];
        /* 32..256 columns a row (a multiple of 32), rows to fill 256 threads */
        const unsigned bx = ow >= 256 ? 256 : (unsigned)((ow + 31) / 32 * 32), by = 256 / bx;
        const uint64_t rows = (uint64_t)kiln_tensor_numel(y) / (uint64_t)ow, want = (rows + by - 1) / by;
        /* enough blocks to fill the GPU; each makes the tap tables once */
        const unsigned grid[3] = {(unsigned)(want < 4096 ? want : 4096), 1, 1}, block[3] = {bx, by, 1};
        char name[32];
        snprintf(name, sizeof name, "resize_rows_%s", kiln__cu_suffix(x->dtype));
        return kiln__cuda_launch(c, name, grid, block, (unsigned)((oh + ow) * sizeof(int32_t)), args);
    }
    return kiln__cu_launch_n(c, "resize", kiln__cu_suffix(x->dtype), kiln_tensor_numel(y), args);
}
