/*
 * space_depth.c — DepthToSpace (DCR and CRD modes) and SpaceToDepth:
 * moving blocks between the channel and spatial dims, as strided copies.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"

static const kiln_attr_def d2s1_attrs[] = {{.name = "blocksize", .type = KILN_ATTR_INT, .required = 1}, {NULL}};
static const kiln_attr_def d2s11_attrs[] = {
    {.name = "blocksize", .type = KILN_ATTR_INT, .required = 1},
    {.name = "mode", .type = KILN_ATTR_STRING, .def = "DCR", .doc = "DCR or CRD"},
    {NULL}};

static int d2s_mode(const kiln_attrs *a, int *crd) {
    const kiln_attr_value *v = kiln_attrs_get(a, "mode");
    const char *m = v && v->present ? v->s : "DCR";
    if (!strcmp(m, "DCR")) *crd = 0;
    else if (!strcmp(m, "CRD")) *crd = 1;
    else return kiln_set_error(KILN_EATTR, "DepthToSpace: mode must be DCR or CRD, found '%s'", m);
    return 0;
}

static int s2d_shape_(kiln_shape_ctx *c, int d2s) {
    const char *op = d2s ? "DepthToSpace" : "SpaceToDepth";
    const kiln_desc *x = &c->in[0];
    if (x->ndim != 4) return kiln_set_error(KILN_ESHAPE, "%s: input must be 4-D, found rank %d", op, x->ndim);
    int64_t b = kiln_attrs_int(c->attrs, "blocksize");
    int crd;
    if (b < 1 || b > (1 << 20)) /* b * b must not overflow */
        return kiln_set_error(KILN_EATTR, "%s: blocksize must be in 1..%d, found %lld", op, 1 << 20, (long long)b);
    if (d2s) {
        int r = d2s_mode(c->attrs, &crd);
        if (r) return r;
    }
    kiln_exprs *X = c->x;
    const kiln_expr *B = kiln_expr_const(X, b), *BB = kiln_expr_const(X, b * b);
    const kiln_expr *d[4] = {x->dims[0], NULL, NULL, NULL};
    int64_t v;
    if (d2s) {
        if (kiln_expr_is_const(x->dims[1], &v) && v % (b * b))
            return kiln_set_error(KILN_ESHAPE, "DepthToSpace: channels %lld not divisible by blocksize^2 %lld",
                                  (long long)v, (long long)(b * b));
        d[1] = kiln_expr_floordiv(X, x->dims[1], BB);
        d[2] = kiln_expr_mul(X, x->dims[2], B);
        d[3] = kiln_expr_mul(X, x->dims[3], B);
    } else {
        for (int i = 2; i < 4; i++)
            if (kiln_expr_is_const(x->dims[i], &v) && v % b)
                return kiln_set_error(KILN_ESHAPE, "SpaceToDepth: dim %d = %lld not divisible by blocksize %lld",
                                      i, (long long)v, (long long)b);
        d[1] = kiln_expr_mul(X, x->dims[1], BB);
        d[2] = kiln_expr_floordiv(X, x->dims[2], B);
        d[3] = kiln_expr_floordiv(X, x->dims[3], B);
    }
    kiln__ops_set_dims(&c->out[0], x->dtype, 4, d);
    return 0;
}

static int s2d_impl_(const kiln_call *c, int d2s) {
    const kiln_tensor *x = &c->in[0];
    int64_t b = kiln_attrs_int(c->attrs, "blocksize");
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    int64_t dims[6], st[6];
    if (d2s) {
        int crd = 0;
        int r = d2s_mode(c->attrs, &crd);
        if (r) return r;
        int64_t Cp = C / (b * b);
        /* output viewed as [N, C', H, b1, W, b2] */
        int64_t sb1 = crd ? b * H * W : b * Cp * H * W, sb2 = crd ? H * W : Cp * H * W;
        int64_t sc = crd ? b * b * H * W : H * W;
        int64_t d6[6] = {N, Cp, H, b, W, b}, s6[6] = {C * H * W, sc, W, sb1, 1, sb2};
        memcpy(dims, d6, sizeof dims);
        memcpy(st, s6, sizeof st);
    } else {
        int64_t Hp = H / b, Wp = W / b;
        /* output viewed as [N, b1, b2, C, H', W'] */
        int64_t d6[6] = {N, b, b, C, Hp, Wp}, s6[6] = {C * H * W, W, 1, H * W, b * W, b};
        memcpy(dims, d6, sizeof dims);
        memcpy(st, s6, sizeof st);
    }
    kiln__ops_strided_copy(c->exec, c->out[0].data, x->data, kiln_dtype_size(x->dtype), 6, dims, st);
    return 0;
}
static int d2s_shape(kiln_shape_ctx *c) { return s2d_shape_(c, 1); }
static int s2d_shape(kiln_shape_ctx *c) { return s2d_shape_(c, 0); }
static int d2s_impl(const kiln_call *c) { return s2d_impl_(c, 1); }
static int s2d_impl(const kiln_call *c) { return s2d_impl_(c, 0); }
static const kiln_combo cu_any[] = {{.types = KILN_CU_T_ANY}, {0}};

static const kiln_quick_op d2s1_op = {
    .ns = OPS_NS, .name = "DepthToSpace", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = d2s1_attrs, .shape = d2s_shape, .impl = d2s_impl,
    .doc = "move channel blocks into spatial blocks (DCR)",
    .cuda_impl = kiln__cu_depth_to_space, .cuda_formats = cu_any,
};
static const kiln_quick_op d2s11_op = {
    .ns = OPS_NS, .name = "DepthToSpace", .version = 11, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = d2s11_attrs, .shape = d2s_shape, .impl = d2s_impl,
    .doc = "move channel blocks into spatial blocks (DCR or CRD)",
    .cuda_impl = kiln__cu_depth_to_space, .cuda_formats = cu_any,
};
static const kiln_quick_op s2d_op = {
    .ns = OPS_NS, .name = "SpaceToDepth", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = d2s1_attrs, .shape = s2d_shape, .impl = s2d_impl,
    .doc = "move spatial blocks into channels",
    .cuda_impl = kiln__cu_space_to_depth, .cuda_formats = cu_any,
};
KILN_OP(d2s1_op)
KILN_OP(d2s11_op)
KILN_OP(s2d_op)
