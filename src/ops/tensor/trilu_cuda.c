/*
 * trilu_cuda.c — CUDA launchers of the ops that fill a tensor by position
 * (copy.cu's byte movers, any type by its size): Trilu (k on the host),
 * EyeLike and ConstantOfShape (the shape input on the host; the output's
 * dims are final, so the kernel only fills).
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_cuda.h"
#include "ops/common/ops_util.h"

#include <string.h>

int kiln__cu_trilu(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    const char *sz = kiln__cu_size_suffix(x->dtype);
    if (!sz) return kiln__cu_type_err("Trilu", x->dtype);
    if (!kiln__cu_contig(x) || !kiln__cu_contig(y))
        return kiln_set_error(KILN_EUNSUPPORTED, "Trilu: CUDA kernel needs contiguous tensors");
    if (x->ndim < 2) return kiln_set_error(KILN_ESHAPE, "Trilu: rank %d, expected >= 2", x->ndim);
    int64_t k = kiln__cu_has_in(c, 1) ? kiln__cu_host_i64(&c->in[1], 0) : 0;
    int64_t R = x->dims[x->ndim - 2], C = x->dims[x->ndim - 1], n = kiln_tensor_numel(x);
    int upper = (int)kiln__cu_attr_int(c, "upper", 1);
    void *args[] = {&R, &C, &k, &upper, &n, (void *)&x->data, &y->data};
    return kiln__cu_launch_n(c, "trilu", sz, n, args);
}

/* The bits of one element of dtype t holding 1. */
static uint64_t one_bits(kiln_dtype t) {
    uint64_t b = 0;
    double one = 1;
    kiln__ops_from_f64(&one, t, &b, 1);
    return b;
}

int kiln__cu_eye_like(const kiln_call *c) {
    kiln_tensor *y = &c->out[0];
    const char *sz = kiln__cu_size_suffix(y->dtype);
    if (!sz) return kiln__cu_type_err("EyeLike", y->dtype);
    if (y->ndim != 2 || !kiln__cu_contig(y))
        return kiln_set_error(KILN_EUNSUPPORTED, "EyeLike: CUDA kernel needs a contiguous 2-D output");
    int64_t C = y->dims[1], k = kiln__cu_attr_int(c, "k", 0), n = kiln_tensor_numel(y);
    uint64_t one = one_bits(y->dtype);
    void *args[] = {&C, &k, &one, &n, &y->data};
    return kiln__cu_launch_n(c, "eye", sz, n, args);
}

int kiln__cu_constant_of_shape(const kiln_call *c) {
    kiln_tensor *y = &c->out[0];
    const char *sz = kiln__cu_size_suffix(y->dtype);
    if (!sz) return kiln__cu_type_err("ConstantOfShape", y->dtype);
    if (!kiln__cu_contig(y))
        return kiln_set_error(KILN_EUNSUPPORTED, "ConstantOfShape: CUDA kernel needs a contiguous output");
    const kiln_attr_value *v = kiln_attrs_get(c->attrs, "value");
    uint64_t bits = 0;
    if (v && v->present && v->data) memcpy(&bits, v->data, kiln_dtype_size(y->dtype));
    int64_t n = kiln_tensor_numel(y);
    void *args[] = {&n, &bits, &y->data};
    return kiln__cu_launch_n(c, "fill", sz, n, args);
}
