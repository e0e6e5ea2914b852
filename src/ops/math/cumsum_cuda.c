/*
 * cumsum_cuda.c — CUDA launcher of CumSum (cumsum.cu): the axis input is
 * read on the host (cuda_host_inputs), the tensor seen as [outer, A, inner].
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_cuda.h"

int kiln__cu_cumsum(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    const char *suf = kiln__cu_suffix(x->dtype);
    if (!suf) return kiln__cu_type_err("CumSum", x->dtype);
    if (!kiln__cu_contig(x) || !kiln__cu_contig(y))
        return kiln_set_error(KILN_EUNSUPPORTED, "CumSum: CUDA kernel needs contiguous tensors");
    int r = x->ndim;
    int64_t ax = kiln__cu_host_i64(&c->in[1], 0);
    if (ax < -r || ax >= r || r == 0)
        return kiln_set_error(KILN_EINVAL, "CumSum: axis %lld out of range for rank %d", (long long)ax, r);
    if (ax < 0) ax += r;
    int64_t outer = 1, inner = 1, A = x->dims[ax];
    for (int i = 0; i < ax; i++) outer *= x->dims[i];
    for (int i = (int)ax + 1; i < r; i++) inner *= x->dims[i];
    int excl = (int)kiln__cu_attr_int(c, "exclusive", 0), rev = (int)kiln__cu_attr_int(c, "reverse", 0);
    void *args[] = {&outer, &A, &inner, &excl, &rev, (void *)&x->data, &y->data};
    return kiln__cu_launch_n(c, "cumsum", suf, outer * inner, args);
}
