/*
 * eye_like.c — EyeLike: a 2-D tensor with ones on the k-th diagonal.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"

static const kiln_attr_def eye_attrs[] = {
    {.name = "dtype", .type = KILN_ATTR_INT, .doc = "output type (default: input's)"},
    {.name = "k", .type = KILN_ATTR_INT, .def = "0", .doc = "diagonal offset"},
    {NULL}};
static int eye_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    if (x->ndim != 2) return kiln_set_error(KILN_ESHAPE, "EyeLike: input must be 2-D, found rank %d", x->ndim);
    const kiln_attr_value *v = kiln_attrs_get(c->attrs, "dtype");
    kiln_dtype t = v && v->present ? (kiln_dtype)v->i : x->dtype;
    if (!kiln__ops_is_any(t))
        return kiln_set_error(KILN_ETYPE, "EyeLike: type %s is not supported", kiln_dtype_name(t));
    kiln__ops_set_dims(&c->out[0], t, 2, x->dims);
    return 0;
}
static int eye_impl(const kiln_call *c) {
    kiln_tensor *y = &c->out[0];
    int64_t k = kiln_attrs_int(c->attrs, "k"), R = y->dims[0], C = y->dims[1];
    size_t es = kiln_dtype_size(y->dtype);
    memset(y->data, 0, (size_t)(R * C) * es);
    double one = 1;
    char ob[8];
    kiln__ops_from_f64(&one, y->dtype, ob, 1);
    for (int64_t i = 0; i < R; i++) {
        int64_t j = i + k;
        if (j >= 0 && j < C) memcpy((char *)y->data + (i * C + j) * es, ob, es);
    }
    return 0;
}
/* CUDA: any type (tensor/trilu_cuda.c fills by element size) */
static int eye_cuda_check(const kiln_shape_ctx *c) { return kiln__ops_cuda_types(c, "EyeLike", KILN_CU_T_ALL); }
static const kiln_quick_op eye_op = {
    .ns = OPS_NS, .name = "EyeLike", .version = 9, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = eye_attrs, .shape = eye_shape, .impl = eye_impl,
    .doc = "ones on diagonal k, zeros elsewhere",
    .cuda_impl = kiln__cu_eye_like, .cuda_check = eye_cuda_check,
};
KILN_OP(eye_op)
