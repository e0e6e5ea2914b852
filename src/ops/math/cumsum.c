/*
 * cumsum.c — CumSum: cumulative sum along an axis (exclusive and reverse
 * modes); integer types sum in int64, floats in double.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"

static const kiln_attr_def cumsum_attrs[] = {
    {.name = "exclusive", .type = KILN_ATTR_INT, .def = "0"},
    {.name = "reverse", .type = KILN_ATTR_INT, .def = "0"},
    {NULL}};
static int cumsum_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    if (!kiln__ops_is_num(x->dtype))
        return kiln_set_error(KILN_ETYPE, "CumSum: input must be numeric, found %s", kiln_dtype_name(x->dtype));
    int r = kiln__ops_check_type(c, "CumSum", 1, kiln__ops_is_int, "int32 or int64");
    if (r) return r;
    kiln__ops_set_dims(&c->out[0], x->dtype, x->ndim, x->dims);
    return 0;
}
static int cumsum_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    int64_t axv = kiln__ops_get_i64(c->in[1].data, c->in[1].dtype, 0);
    int ax, r = kiln__ops_axis("CumSum", "axis", axv, x->ndim, &ax);
    if (r) return r;
    int excl = (int)kiln_attrs_int(c->attrs, "exclusive"), rev = (int)kiln_attrs_int(c->attrs, "reverse");
    int64_t A = x->dims[ax], outer = 1, inner = 1, n = kiln_tensor_numel(x);
    for (int i = 0; i < ax; i++) outer *= x->dims[i];
    for (int i = ax + 1; i < x->ndim; i++) inner *= x->dims[i];
    if (n == 0) return 0;
    /* whole tensor through int64 (integers) or double (floats) */
    int isint = kiln__ops_is_int(x->dtype);
    void *buf = kiln__malloc((size_t)n * 8);
    if (!buf) return kiln_set_error(KILN_ENOMEM, "CumSum: out of memory");
    int64_t *bi = buf;
    double *bf = buf;
    if (isint) kiln__ops_to_i64(x->data, x->dtype, bi, n);
    else kiln__ops_to_f64(x->data, x->dtype, bf, n);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++) {
            double fs = 0;
            int64_t is = 0;
            for (int64_t t = 0; t < A; t++) {
                int64_t a = rev ? A - 1 - t : t, pos = (o * A + a) * inner + in;
                if (isint) {
                    int64_t v = bi[pos];
                    bi[pos] = excl ? is : (int64_t)((uint64_t)is + (uint64_t)v);
                    is = (int64_t)((uint64_t)is + (uint64_t)v);
                } else {
                    double v = bf[pos];
                    bf[pos] = excl ? fs : fs + v;
                    fs += v;
                }
            }
        }
    if (isint) kiln__ops_from_i64(bi, x->dtype, c->out[0].data, n);
    else kiln__ops_from_f64(bf, x->dtype, c->out[0].data, n);
    kiln__free(buf);
    return 0;
}
/* CUDA (cumsum_cuda.c): the kernel's types; the axis stays on the host. */
static const kiln_combo cu_cumsum[] = {
    {.types = "FP32|FP16|BF16|FP64|INT32|INT64, INT32*INT64, FP32|FP16|BF16|FP64|INT32|INT64"}, {0}};
static const kiln_quick_op cumsum_op = {
    .ns = OPS_NS, .name = "CumSum", .version = 11, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .attrs = cumsum_attrs, .shape = cumsum_shape, .impl = cumsum_impl,
    .doc = "cumulative sum along axis (exclusive/reverse)",
    .cuda_impl = kiln__cu_cumsum, .cuda_formats = cu_cumsum, .cuda_host_inputs = 1u << 1,
};
KILN_OP(cumsum_op)
