/*
 * dropout.c — Dropout in inference mode: y = x, mask all true.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"

/* Inference-mode Dropout: y = x, mask all true.  (training_mode = true is
 * not supported: kiln is an inference engine.) */
static int dropout_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    if (!kiln__ops_is_float(x->dtype))
        return kiln_set_error(KILN_ETYPE, "Dropout: input must be a float type, found %s",
                              kiln_dtype_name(x->dtype));
    if (kiln__ops_has_in(c, 2)) {
        int64_t t[1];
        int64_t n = kiln__ops_const_ints(&c->in[2], t, 1);
        int zero_ratio = kiln__ops_has_in(c, 1) && c->in[1].data &&
                         kiln__ops_get_f64(c->in[1].data, c->in[1].dtype, 0) == 0;
        if (n == 1 && t[0] && !zero_ratio)
            return kiln_set_error(KILN_EUNSUPPORTED,
                                  "Dropout: training_mode = true is not supported (inference only)");
    }
    kiln__ops_set_dims(&c->out[0], x->dtype, x->ndim, x->dims);
    if (c->nout > 1) kiln__ops_set_dims(&c->out[1], KILN_DTYPE_BOOL, x->ndim, x->dims);
    return kiln_shape_alias(c, 0, 0);
}
static int dropout_impl(const kiln_call *c) {
    /* training mode is deterministic only with ratio 0 (then it is the identity) */
    if (kiln__ops_call_has_in(c, 2) && kiln__ops_get_i64(c->in[2].data, c->in[2].dtype, 0) &&
        !(kiln__ops_call_has_in(c, 1) && kiln__ops_get_f64(c->in[1].data, c->in[1].dtype, 0) == 0))
        return kiln_set_error(KILN_EUNSUPPORTED,
                              "Dropout: training_mode = true with ratio > 0 is not supported (inference only)");
    kiln__ops_copy_input(c);
    if (c->nout > 1 && c->out[1].data) memset(c->out[1].data, 1, (size_t)kiln_tensor_numel(&c->out[1]));
    return 0;
}
static const kiln_attr_def dropout7_attrs[] = {
    {.name = "ratio", .type = KILN_ATTR_FLOAT, .def = "0.5"}, {NULL}};
static const kiln_attr_def dropout12_attrs[] = {{.name = "seed", .type = KILN_ATTR_INT}, {NULL}};
static const kiln_combo cu_dropout[] = {{.types = KILN_CU_T_FLOAT ", " KILN_CU_T_FLOAT ", BOOL"}, {0}};

/* Dropout-12 (ratio and training_mode inputs of other types): any type, copied by size */
static int dropout_cuda_check(const kiln_shape_ctx *c) { return kiln__ops_cuda_types(c, "Dropout", KILN_CU_T_ALL); }
static const kiln_quick_op dropout7_op = {
    .ns = OPS_NS, .name = "Dropout", .version = 7, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 2, .attrs = dropout7_attrs, .shape = dropout_shape, .impl = dropout_impl,
    .doc = "inference: identity (mask all true)",
    .cuda_impl = kiln__cu_dropout, .cuda_formats = cu_dropout,
};
static const kiln_quick_op dropout12_op = {
    .ns = OPS_NS, .name = "Dropout", .version = 12, .min_inputs = 1, .max_inputs = 3,
    .num_outputs = 2, .attrs = dropout12_attrs, .shape = dropout_shape, .impl = dropout_impl,
    .doc = "inference: identity (mask all true)",
    .cuda_impl = kiln__cu_dropout, .cuda_host_inputs = 6, /* ratio training_mode */
    .cuda_check = dropout_cuda_check,
};
KILN_OP(dropout7_op)
KILN_OP(dropout12_op)
