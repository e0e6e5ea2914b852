/*
 * topk_cuda.c — CUDA launcher of TopK (topk.cu): K is the output's length
 * along the axis (final when the launcher runs; TopK-10's K input stays on
 * the host, unread).
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_cuda.h"

int kiln__cu_topk(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0], *yi = &c->out[1];
    const char *suf = kiln__cu_suffix(x->dtype);
    if (!suf) return kiln__cu_type_err("TopK", x->dtype);
    if (!kiln__cu_contig(x) || !kiln__cu_contig(y) || !kiln__cu_contig(yi))
        return kiln_set_error(KILN_EUNSUPPORTED, "TopK: CUDA kernel needs contiguous tensors");
    int r = x->ndim, ax = (int)kiln__cu_attr_int(c, "axis", -1);
    if (ax < 0) ax += r;
    if (ax < 0 || ax >= r) return kiln_set_error(KILN_EINVAL, "TopK: axis out of range for rank %d", r);
    int64_t A = x->dims[ax], K = y->dims[ax], outer = 1, inner = 1;
    for (int i = 0; i < ax; i++) outer *= x->dims[i];
    for (int i = ax + 1; i < r; i++) inner *= x->dims[i];
    if (K > A) return kiln_set_error(KILN_EINVAL, "TopK: k = %lld exceeds the axis size %lld", (long long)K, (long long)A);
    if (K == 0) return 0;
    int largest = (int)kiln__cu_attr_int(c, "largest", 1);
    void *args[] = {&outer, &A, &inner, &K, &largest, (void *)&x->data, &y->data, &yi->data};
    return kiln__cu_launch_n(c, "topk", suf, outer * A * inner, args);
}
