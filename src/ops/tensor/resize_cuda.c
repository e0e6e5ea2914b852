/*
 * resize_cuda.c — CUDA launcher of Resize/Upsample (resize_<T> of
 * resize.cu).  resize.c resolves the attributes and the roi/scales/sizes
 * inputs (host inputs on the GPU) with the CPU op's own code and passes
 * the result; this file checks types and launches (resize_nearest_<T> for
 * nearest mode where 32-bit indices do, else resize_<T>).
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_cuda.h"

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
    /* nearest: one source element per output, 32-bit indices */
    const int lean = p.mode == 0 && kiln_tensor_numel(x) < INT32_MAX && kiln_tensor_numel(y) < INT32_MAX;
    return kiln__cu_launch_n(c, lean ? "resize_nearest" : "resize", kiln__cu_suffix(x->dtype), kiln_tensor_numel(y),
                             args);
}
