/*
 * constant_of_shape.c — ConstantOfShape: a tensor of the given (build-time)
 * shape filled with one value.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"

static const kiln_attr_def cos_attrs[] = {
    {.name = "value", .type = KILN_ATTR_TENSOR, .doc = "one-element tensor (default float 0)"},
    {NULL}};
static int cos_shape(kiln_shape_ctx *c) {
    const kiln_attr_value *v = kiln_attrs_get(c->attrs, "value");
    kiln_dtype t = KILN_DTYPE_F32;
    if (v && v->present) {
        if (v->count != 1)
            return kiln_set_error(KILN_EATTR, "ConstantOfShape: value must have one element, found %lld",
                                  (long long)v->count);
        t = v->elem;
        if (!kiln__ops_is_any(t))
            return kiln_set_error(KILN_ETYPE, "ConstantOfShape: value type %s is not supported",
                                  kiln_dtype_name(t));
    }
    const kiln_expr *vals[KILN_MAX_VALUES];
    int n = kiln__ops_value_exprs(c->x, &c->in[0], vals);
    if (n < 0)
        return kiln_set_error(KILN_EUNSUPPORTED,
                              "ConstantOfShape: input 0 'input' (the shape) must be known at build "
                              "time; its value is data-dependent here");
    if (n > KILN_MAX_DIMS)
        return kiln_set_error(KILN_ESHAPE, "ConstantOfShape: rank %d exceeds %d", n, KILN_MAX_DIMS);
    kiln__ops_set_dims(&c->out[0], t, n, vals);
    kiln_desc *o = &c->out[0];
    int64_t numel = kiln__ops_desc_numel(o);
    if (kiln__ops_is_int(t) && numel >= 0 && numel <= KILN_MAX_VALUES) {
        int64_t k = v && v->present ? kiln__ops_get_i64(v->data, t, 0) : 0;
        for (int64_t i = 0; i < numel; i++) o->values[i] = kiln_expr_const(c->x, k);
        o->nvalues = (int)numel;
    }
    return 0;
}
static int cos_impl(const kiln_call *c) {
    const kiln_attr_value *v = kiln_attrs_get(c->attrs, "value");
    kiln_tensor *y = &c->out[0];
    int64_t n = kiln_tensor_numel(y);
    size_t es = kiln_dtype_size(y->dtype);
    if (!v || !v->present) {
        memset(y->data, 0, (size_t)n * es);
        return 0;
    }
    char *d = y->data;
    for (int64_t i = 0; i < n; i++) memcpy(d + i * es, v->data, es);
    return 0;
}
/* CUDA: any type (tensor/trilu_cuda.c fills by element size) */
static int cos_cuda_check(const kiln_shape_ctx *c) { return kiln__ops_cuda_types(c, "ConstantOfShape", KILN_CU_T_ALL); }
static const kiln_quick_op cos_op = {
    .ns = OPS_NS, .name = "ConstantOfShape", .version = 9, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = cos_attrs, .shape = cos_shape, .impl = cos_impl,
    .doc = "tensor of the given shape filled with value",
    .cuda_impl = kiln__cu_constant_of_shape, .cuda_host_inputs = 1u << 0, .cuda_check = cos_cuda_check,
};
KILN_OP(cos_op)
