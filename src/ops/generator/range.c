/*
 * range.c — Range: start, start + delta, ... up to limit.  The length must be
 * known at build time: constant inputs, or symbolic integer start/limit with
 * a constant delta.
 */
#include "ops/common/ops_util.h"

#include <math.h>

static int range_shape(kiln_shape_ctx *c) {
    kiln_dtype t = c->in[0].dtype;
    for (int i = 0; i < 3; i++) {
        int r = kiln__ops_check_same(c, "Range", 0, i);
        if (r) return r;
    }
    if (!kiln__ops_is_num(t))
        return kiln_set_error(KILN_ETYPE, "Range: inputs must be numeric, found %s", kiln_dtype_name(t));
    const kiln_expr *len = NULL;
    const kiln_expr *sv[3][KILN_MAX_VALUES];
    int known = 1;
    for (int i = 0; i < 3; i++) known &= kiln__ops_value_exprs(c->x, &c->in[i], sv[i]) == 1;
    int64_t dlt = 0;
    if (known && kiln__ops_is_int(t) && kiln_expr_is_const(sv[2][0], &dlt) && dlt != 0) {
        len = kiln_expr_max(c->x, kiln_expr_const(c->x, 0),
                            kiln_expr_ceildiv(c->x, kiln_expr_sub(c->x, sv[1][0], sv[0][0]), sv[2][0]));
    } else if (c->in[0].data && c->in[1].data && c->in[2].data) {
        double s = kiln__ops_get_f64(c->in[0].data, t, 0), l = kiln__ops_get_f64(c->in[1].data, t, 0),
               d = kiln__ops_get_f64(c->in[2].data, t, 0);
        if (d == 0) return kiln_set_error(KILN_EINVAL, "Range: delta is 0");
        double n = ceil((l - s) / d);
        len = kiln_expr_const(c->x, n > 0 ? (int64_t)n : 0);
    } else {
        return kiln_set_error(KILN_EUNSUPPORTED,
                              "Range: start, limit and delta must be known at build time (the "
                              "output length depends on them)");
    }
    kiln__ops_set_dims(&c->out[0], t, 1, &len);
    int64_t n;
    if (known && kiln__ops_is_int(t) && kiln_expr_is_const(len, &n) && n <= KILN_MAX_VALUES) {
        for (int64_t i = 0; i < n; i++)
            c->out[0].values[i] = kiln_expr_add(c->x, sv[0][0],
                                                kiln_expr_mul(c->x, kiln_expr_const(c->x, i), sv[2][0]));
        c->out[0].nvalues = (int)n;
    }
    return 0;
}
static int range_impl(const kiln_call *c) {
    kiln_dtype t = c->in[0].dtype;
    int64_t n = c->out[0].dims[0];
    if (kiln__ops_is_int(t)) {
        int64_t s = kiln__ops_get_i64(c->in[0].data, t, 0), d = kiln__ops_get_i64(c->in[2].data, t, 0);
        int64_t buf[256];
        for (int64_t b = 0; b < n; b += 256) {
            int64_t m = n - b < 256 ? n - b : 256;
            for (int64_t i = 0; i < m; i++) buf[i] = s + (b + i) * d;
            kiln__ops_from_i64(buf, t, (char *)c->out[0].data + b * kiln_dtype_size(t), m);
        }
    } else {
        double s = kiln__ops_get_f64(c->in[0].data, t, 0), d = kiln__ops_get_f64(c->in[2].data, t, 0);
        double buf[256];
        for (int64_t b = 0; b < n; b += 256) {
            int64_t m = n - b < 256 ? n - b : 256;
            /* accumulate like the reference (start + i * delta in the op's type) */
            for (int64_t i = 0; i < m; i++) buf[i] = s + (double)(b + i) * d;
            if (t == KILN_DTYPE_F32)
                for (int64_t i = 0; i < m; i++) buf[i] = (float)((float)s + (float)(b + i) * (float)d);
            kiln__ops_from_f64(buf, t, (char *)c->out[0].data + b * kiln_dtype_size(t), m);
        }
    }
    return 0;
}
static const kiln_quick_op range_op = {
    .ns = OPS_NS, .name = "Range", .version = 11, .min_inputs = 3, .max_inputs = 3,
    .num_outputs = 1, .shape = range_shape, .impl = range_impl,
    .doc = "start, start + delta, ... below limit",
};
KILN_OP(range_op)
