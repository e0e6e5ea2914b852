/*
 * cast.c — Cast and CastLike between any two fixed-size dtypes (ONNX Cast
 * semantics: see kiln__ops_cast); constant small integer values are
 * carried through for shape computations.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"

static int cast_common(kiln_shape_ctx *c, kiln_dtype to, const char *op) {
    const kiln_desc *x = &c->in[0];
    int r = kiln__ops_check_any(c, op, 0);
    if (r) return r;
    if (!kiln__ops_is_any(to))
        return kiln_set_error(KILN_ETYPE, "%s: target type %s (%d) is not supported", op,
                              kiln_dtype_name(to), (int)to);
    kiln__ops_set_dims(&c->out[0], to, x->ndim, x->dims);
    c->out[0].nvalues = -1;
    int src_int = kiln__ops_is_int(x->dtype) || x->dtype == KILN_DTYPE_BOOL;
    if (kiln__ops_is_int(to) && src_int) {
        kiln__ops_copy_values(c, 0, 0);
    } else if (to == KILN_DTYPE_BOOL && src_int) { /* v != 0 */
        kiln__ops_copy_values(c, 0, 0);
        kiln_desc *o = &c->out[0];
        for (int i = 0; i < o->nvalues; i++)
            o->values[i] = kiln_expr_sub(c->x, kiln_expr_const(c->x, 1),
                                         kiln_expr_eq(c->x, o->values[i], kiln_expr_const(c->x, 0)));
    }
    return 0;
}
static const kiln_attr_def cast_attrs[] = {
    {.name = "to", .type = KILN_ATTR_INT, .required = 1, .doc = "target ONNX data type"},
    {.name = "saturate", .type = KILN_ATTR_INT, .def = "1", .doc = "float8 only (ignored)"},
    {NULL}};
static int cast_shape(kiln_shape_ctx *c) {
    return cast_common(c, (kiln_dtype)kiln_attrs_int(c->attrs, "to"), "Cast");
}
static int cast_impl(const kiln_call *c) {
    kiln__ops_cast(c->in[0].data, c->in[0].dtype, c->out[0].data, c->out[0].dtype,
                    kiln_tensor_numel(&c->out[0]));
    return 0;
}
static int castlike_shape(kiln_shape_ctx *c) { return cast_common(c, c->in[1].dtype, "CastLike"); }
/* CUDA (cast_cuda.c): every pair of the GPU types. */
static const kiln_combo cu_cast[] = {
    {.types = "FP32*FP16*BF16*FP64*INT32*INT64*INT8*UINT8*BOOL, FP32*FP16*BF16*FP64*INT32*INT64*INT8*UINT8*BOOL"}, {0}};

static const kiln_quick_op cast_op = {
    .ns = OPS_NS, .name = "Cast", .version = 6, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = cast_attrs, .shape = cast_shape, .impl = cast_impl,
    .doc = "convert to the type 'to'",
    .cuda_impl = kiln__cu_cast, .cuda_formats = cu_cast,
};
/* CastLike: the types of cu_cast (three slots would need 729 rows) */
static int castlike_cuda_check(const kiln_shape_ctx *c) {
    return kiln__ops_cuda_types(c, "CastLike", "FP32|FP16|BF16|FP64|INT32|INT64|INT8|UINT8|BOOL");
}
static const kiln_quick_op castlike_op = {
    .ns = OPS_NS, .name = "CastLike", .version = 15, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .attrs = cast_attrs + 1, .shape = castlike_shape, .impl = cast_impl,
    .doc = "convert to the type of input 1",
    .cuda_impl = kiln__cu_cast, .cuda_check = castlike_cuda_check,
};
KILN_OP(cast_op)
KILN_OP(castlike_op)
