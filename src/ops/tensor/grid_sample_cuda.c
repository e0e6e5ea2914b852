/*
 * grid_sample_cuda.c — CUDA launcher of GridSample-16 (grid_sample_f32 of
 * grid_sample.cu; grid_sample.c resolves the geometry).
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_cuda.h"

int kiln__cu_grid_sample(const kiln_call *c, const kiln_cu_grid_sample *geo) {
    const kiln_tensor *x = &c->in[0], *g = &c->in[1];
    kiln_tensor *y = &c->out[0];
    if (x->dtype != KILN_DTYPE_F32 || g->dtype != KILN_DTYPE_F32 || y->dtype != KILN_DTYPE_F32)
        return kiln__cu_type_err("GridSample", x->dtype != KILN_DTYPE_F32 ? x->dtype : g->dtype);
    if (!kiln__cu_contig(x) || !kiln__cu_contig(g) || !kiln__cu_contig(y))
        return kiln_set_error(KILN_EUNSUPPORTED, "GridSample: CUDA kernel needs contiguous tensors");
    int64_t C = x->dims[1], Ho = g->dims[1], Wo = g->dims[2], total = kiln_tensor_numel(y);
    void *args[] = {(void *)geo, &C, &Ho, &Wo, &total, (void *)&x->data, (void *)&g->data, &y->data};
    return kiln__cu_launch_n(c, "grid_sample_f32", NULL, total, args);
}
