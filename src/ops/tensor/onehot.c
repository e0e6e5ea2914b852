/*
 * onehot.c — OneHot: indices to one-hot vectors along a new axis
 * (negative indices count from depth; out-of-range ones give all off_value).
 */
#include "ops/common/ops_util.h"

static const kiln_attr_def onehot_attrs[] = {{.name = "axis", .type = KILN_ATTR_INT, .def = "-1"}, {NULL}};
static int onehot_shape(kiln_shape_ctx *c) {
    const kiln_desc *ix = &c->in[0], *vals = &c->in[2];
    if (!kiln__ops_is_num(ix->dtype))
        return kiln_set_error(KILN_ETYPE, "OneHot: indices must be numeric, found %s", kiln_dtype_name(ix->dtype));
    if (!kiln__ops_is_any(vals->dtype))
        return kiln_set_error(KILN_ETYPE, "OneHot: values type %s is not supported", kiln_dtype_name(vals->dtype));
    const kiln_expr *dv[KILN_MAX_VALUES];
    const kiln_expr *depth;
    if (kiln__ops_value_exprs(c->x, &c->in[1], dv) == 1) {
        depth = dv[0];
    } else if (c->in[1].data && kiln__ops_desc_numel(&c->in[1]) == 1) {
        depth = kiln_expr_const(c->x, (int64_t)kiln__ops_get_f64(c->in[1].data, c->in[1].dtype, 0));
    } else {
        return kiln_set_error(KILN_EUNSUPPORTED, "OneHot: input 1 'depth' must be a scalar known at build time");
    }
    int on = ix->ndim + 1, ax;
    if (on > KILN_MAX_DIMS) return kiln_set_error(KILN_ESHAPE, "OneHot: output rank too large");
    int r = kiln__ops_axis("OneHot", "axis", kiln_attrs_int(c->attrs, "axis"), on, &ax);
    if (r) return r;
    const kiln_expr *d[KILN_MAX_DIMS];
    for (int i = 0, j = 0; i < on; i++) d[i] = i == ax ? depth : ix->dims[j++];
    kiln__ops_set_dims(&c->out[0], vals->dtype, on, d);
    return 0;
}
static int onehot_impl(const kiln_call *c) {
    const kiln_tensor *ix = &c->in[0], *vals = &c->in[2];
    kiln_tensor *y = &c->out[0];
    int ax = (int)kiln_attrs_int(c->attrs, "axis");
    if (ax < 0) ax += y->ndim;
    int64_t depth = y->dims[ax], outer = 1, inner = 1;
    for (int i = 0; i < ax; i++) outer *= y->dims[i];
    for (int i = ax + 1; i < y->ndim; i++) inner *= y->dims[i];
    size_t es = kiln_dtype_size(y->dtype);
    const char *off = vals->data, *onv = (const char *)vals->data + es;
    int64_t n = kiln_tensor_numel(y);
    char *yp = y->data;
    for (int64_t i = 0; i < n; i++) memcpy(yp + i * es, off, es);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++) {
            double dv = kiln__ops_get_f64(ix->data, ix->dtype, o * inner + in);
            int64_t v = (int64_t)dv;
            if (v < 0) v += depth;
            if (v < 0 || v >= depth) continue;
            memcpy(yp + ((o * depth + v) * inner + in) * es, onv, es);
        }
    return 0;
}
static const kiln_quick_op onehot_op = {
    .ns = OPS_NS, .name = "OneHot", .version = 9, .min_inputs = 3, .max_inputs = 3,
    .num_outputs = 1, .attrs = onehot_attrs, .shape = onehot_shape, .impl = onehot_impl,
    .doc = "one-hot encoding along axis",
};
KILN_OP(onehot_op)
