/*
 * non_zero — a data-dependent output shape.
 *
 * Input: f32 [R, C].  Outputs: 0 = int32 [N, 2], the (row, col) of every
 * nonzero element in row-major order; 1 = N as a size tensor (0-D i64).
 * N is known only after impl ran, so the shape function declares output 1 a
 * size tensor and uses its symbol in output 0's dims.  The builder plans
 * memory for the upper bound (R*C) and times at opt (R*C/2).
 */
#include <kiln/plugin.h>

static int non_zero_shape(kiln_shape_ctx *c) {
    if (c->in[0].dtype != KILN_DTYPE_F32 || c->in[0].ndim != 2)
        return kiln_set_error(KILN_ESHAPE, "non_zero: expected an f32 [R, C] input, found rank %d %s",
                              c->in[0].ndim, kiln_dtype_name(c->in[0].dtype));
    const kiln_expr *numel = kiln_expr_mul(c->x, c->in[0].dims[0], c->in[0].dims[1]);
    c->out[1].dtype = KILN_DTYPE_I64;
    c->out[1].ndim = 0;
    const kiln_expr *n = kiln_shape_size_tensor(
        c, 1, kiln_expr_floordiv(c->x, numel, kiln_expr_const(c->x, 2)), numel);
    if (!n) return KILN_EINVAL;
    c->out[0].dtype = KILN_DTYPE_I32;
    c->out[0].ndim = 2;
    c->out[0].dims[0] = n;
    c->out[0].dims[1] = kiln_expr_const(c->x, 2);
    return 0;
}

static int non_zero_impl(const kiln_call *c) {
    const float *x = c->in[0].data;
    int32_t *idx = c->out[0].data;
    int64_t rows = c->in[0].dims[0], cols = c->in[0].dims[1], n = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < cols; k++)
            if (x[r * cols + k] != 0.0f) {
                idx[2 * n] = (int32_t)r;
                idx[2 * n + 1] = (int32_t)k;
                n++;
            }
    *(int64_t *)c->out[1].data = n;
    return 0;
}

static const kiln_quick_op non_zero = {
    .ns = "sample", .name = "non_zero", .version = 1,
    .min_inputs = 1, .max_inputs = 1, .num_outputs = 2,
    .shape = non_zero_shape, .impl = non_zero_impl,
    .doc = "indices [N,2] (int32) of the nonzero elements of an f32 [R,C]; N as a size tensor",
};
KILN_OP(non_zero)
