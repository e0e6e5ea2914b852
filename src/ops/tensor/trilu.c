/*
 * trilu.c — Trilu: keep the upper or lower triangle of the last two dims
 * (diagonal offset k), zero the rest.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"

static const kiln_attr_def trilu_attrs[] = {{.name = "upper", .type = KILN_ATTR_INT, .def = "1"}, {NULL}};
static int trilu_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    if (x->ndim < 2) return kiln_set_error(KILN_ESHAPE, "Trilu: input must have rank >= 2, found %d", x->ndim);
    int r = kiln__ops_check_type(c, "Trilu", 0, kiln__ops_is_any, "a numeric or bool type");
    if (r) return r;
    if (kiln__ops_has_in(c, 1) && (r = kiln__ops_check_type(c, "Trilu", 1, kiln__ops_is_int, "int64")))
        return r;
    kiln__ops_set_dims(&c->out[0], x->dtype, x->ndim, x->dims);
    return 0;
}
static int trilu_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    int64_t k = kiln__ops_call_has_in(c, 1) ? kiln__ops_get_i64(c->in[1].data, c->in[1].dtype, 0) : 0;
    int upper = (int)kiln_attrs_int(c->attrs, "upper");
    int64_t R = x->dims[x->ndim - 2], C = x->dims[x->ndim - 1], B = 1;
    for (int i = 0; i < x->ndim - 2; i++) B *= x->dims[i];
    size_t es = kiln_dtype_size(x->dtype);
    char *y = c->out[0].data;
    const char *xp = x->data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < R; i++) {
            char *row = y + (b * R + i) * C * (int64_t)es;
            const char *src = xp + (b * R + i) * C * (int64_t)es;
            /* keep j >= i + k (upper) or j <= i + k (lower) */
            int64_t lo = upper ? i + k : 0, hi = upper ? C : i + k + 1;
            lo = lo < 0 ? 0 : lo > C ? C : lo;
            hi = hi < 0 ? 0 : hi > C ? C : hi;
            memset(row, 0, (size_t)C * es);
            if (hi > lo) memcpy(row + lo * (int64_t)es, src + lo * (int64_t)es, (size_t)(hi - lo) * es);
        }
    return 0;
}
/* CUDA: any type (trilu_cuda.c moves elements by size) */
static int trilu_cuda_check(const kiln_shape_ctx *c) { return kiln__ops_cuda_types(c, "Trilu", KILN_CU_T_ALL); }
static const kiln_quick_op trilu_op = {
    .ns = OPS_NS, .name = "Trilu", .version = 14, .min_inputs = 1, .max_inputs = 2,
    .num_outputs = 1, .attrs = trilu_attrs, .shape = trilu_shape, .impl = trilu_impl,
    .doc = "upper/lower triangle of the last two dims (diagonal offset k)",
    .cuda_impl = kiln__cu_trilu, .cuda_host_inputs = 1u << 1, .cuda_check = trilu_cuda_check,
};
KILN_OP(trilu_op)
