/*
 * expand_tile.c — Expand (broadcast to a shape) and Tile (repeat along each
 * axis); element-size generic strided copies.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"

static int expand_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    int r = kiln__ops_check_any(c, "Expand", 0);
    if (r) return r;
    const kiln_expr *v[KILN_MAX_VALUES];
    int n = kiln__ops_value_exprs(c->x, &c->in[1], v);
    if (n < 0)
        return kiln_set_error(KILN_EUNSUPPORTED,
                              "Expand: input 1 'shape' must be known at build time; its value is "
                              "data-dependent here");
    if (n > KILN_MAX_DIMS) return kiln_set_error(KILN_ESHAPE, "Expand: rank %d exceeds %d", n, KILN_MAX_DIMS);
    const kiln_expr *d[KILN_MAX_DIMS];
    int nd = kiln_shape_broadcast(c, x->dims, x->ndim, v, n, d);
    if (nd < 0) return nd;
    kiln__ops_set_dims(&c->out[0], x->dtype, nd, d);
    /* values: broadcast of a small integer tensor */
    int64_t on = kiln__ops_desc_numel(&c->out[0]), xd[KILN_MAX_DIMS], od[KILN_MAX_DIMS];
    const kiln_expr *xv[KILN_MAX_VALUES];
    if (on >= 0 && on <= KILN_MAX_VALUES && kiln__ops_value_exprs(c->x, x, xv) >= 0 &&
        kiln__ops_const_dims(x, xd) && kiln__ops_const_dims(&c->out[0], od)) {
        for (int64_t i = 0; i < on; i++) {
            int64_t rem = i, off = 0, s = 1;
            for (int a = nd - 1; a >= 0; a--) {
                int64_t ix = rem % od[a];
                rem /= od[a];
                int j = a - (nd - x->ndim);
                if (j < 0) continue;
                off += (xd[j] == 1 ? 0 : ix) * s;
                s *= xd[j];
            }
            c->out[0].values[i] = xv[off];
        }
        c->out[0].nvalues = (int)on;
    }
    return 0;
}
/* y = x broadcast to y's dims */
static void bcast_copy(kiln_exec *e, const kiln_tensor *x, kiln_tensor *y) {
    int64_t st[KILN_MAX_DIMS], s = 1;
    for (int i = y->ndim - 1; i >= 0; i--) {
        int j = i - (y->ndim - x->ndim);
        if (j < 0) { st[i] = 0; continue; }
        st[i] = x->dims[j] == 1 ? 0 : s;
        s *= x->dims[j];
    }
    kiln__ops_strided_copy(e, y->data, x->data, kiln_dtype_size(x->dtype), y->ndim, y->dims, st);
}
static int expand_impl(const kiln_call *c) {
    int rc = kiln__ops_bc_check("Expand", 0, c->out[0].ndim, c->out[0].dims, c->in[0].ndim, c->in[0].dims);
    if (rc) return rc;
    bcast_copy(c->exec, &c->in[0], &c->out[0]);
    return 0;
}
static const kiln_combo cu_shaped[] = {{.types = KILN_CU_T_ANY ", INT64, " KILN_CU_T_ANY}, {0}};

static const kiln_quick_op expand_op = {
    .ns = OPS_NS, .name = "Expand", .version = 8, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .shape = expand_shape, .impl = expand_impl,
    .doc = "broadcast to a shape",
    .cuda_impl = kiln__cu_expand, .cuda_formats = cu_shaped,
};
KILN_OP(expand_op)

/* ---- Tile ------------------------------------------------------------------------------------ */

static int tile_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    int r = kiln__ops_check_any(c, "Tile", 0);
    if (r) return r;
    const kiln_expr *v[KILN_MAX_VALUES];
    int n = kiln__ops_value_exprs(c->x, &c->in[1], v);
    if (n < 0)
        return kiln_set_error(KILN_EUNSUPPORTED,
                              "Tile: input 1 'repeats' must be known at build time; its value is "
                              "data-dependent here");
    if (n != x->ndim)
        return kiln_set_error(KILN_ESHAPE, "Tile: repeats has %d elements, expected the input rank %d",
                              n, x->ndim);
    const kiln_expr *d[KILN_MAX_DIMS];
    for (int i = 0; i < n; i++) d[i] = kiln_expr_mul(c->x, x->dims[i], v[i]);
    kiln__ops_set_dims(&c->out[0], x->dtype, n, d);
    return 0;
}
static int tile_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    /* view y as [rep0, d0, rep1, d1, ...]: a strided copy with stride 0 on
     * the repeat axes */
    int64_t dims[2 * KILN_MAX_DIMS], st[2 * KILN_MAX_DIMS], s = 1;
    int nd = 2 * x->ndim;
    for (int i = x->ndim - 1; i >= 0; i--) {
        int64_t rep = x->dims[i] ? y->dims[i] / x->dims[i] : 0;
        dims[2 * i] = rep;
        st[2 * i] = 0;
        dims[2 * i + 1] = x->dims[i];
        st[2 * i + 1] = s;
        s *= x->dims[i];
    }
    if (kiln_tensor_numel(y) == 0) return 0;
    if (nd > KILN_MAX_DIMS) { /* collapse repeat-1 axes to fit the copier */
        int64_t d2[2 * KILN_MAX_DIMS], s2[2 * KILN_MAX_DIMS];
        int m = 0;
        for (int i = 0; i < nd; i++) {
            if (dims[i] == 1) continue;
            d2[m] = dims[i];
            s2[m++] = st[i];
        }
        if (m > KILN_MAX_DIMS) { /* slow fallback: element by element */
            size_t es = kiln_dtype_size(x->dtype);
            int64_t on = kiln_tensor_numel(y);
            for (int64_t o = 0; o < on; o++) {
                int64_t rem = o, off = 0, sx = 1;
                for (int i = y->ndim - 1; i >= 0; i--) {
                    off += ((rem % y->dims[i]) % x->dims[i]) * sx;
                    rem /= y->dims[i];
                    sx *= x->dims[i];
                }
                memcpy((char *)y->data + o * es, (const char *)x->data + off * es, es);
            }
            return 0;
        }
        if (m == 0) { d2[0] = 1; s2[0] = 0; m = 1; }
        kiln__ops_strided_copy(c->exec, y->data, x->data, kiln_dtype_size(x->dtype), m, d2, s2);
        return 0;
    }
    kiln__ops_strided_copy(c->exec, y->data, x->data, kiln_dtype_size(x->dtype), nd, dims, st);
    return 0;
}
/* The CUDA copy walks at most KILN_CU_MAX_DIMS dims and Tile splits each
 * repeated dim in two: rank + (repeats != 1) must fit (repeats unknown at
 * build: only ranks that fit whatever they are). */
static int tile_cuda_check(const kiln_shape_ctx *c) {
    int r = c->in[0].ndim, n = r;
    int64_t rep[KILN_MAX_DIMS];
    if (kiln__ops_const_ints(&c->in[1], rep, KILN_MAX_DIMS) == r)
        for (int i = 0; i < r; i++) n += rep[i] != 1;
    else
        n = 2 * r;
    return n <= KILN_CU_MAX_DIMS ? 0
                                 : kiln_set_error(KILN_EUNSUPPORTED, "Tile: rank %d with these repeats exceeds the CUDA "
                                                  "copy's %d dims", r, KILN_CU_MAX_DIMS);
}
static const kiln_quick_op tile_op = {
    .ns = OPS_NS, .name = "Tile", .version = 6, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .shape = tile_shape, .impl = tile_impl, .doc = "repeat along each axis",
    .cuda_impl = kiln__cu_tile, .cuda_formats = cu_shaped, .cuda_check = tile_cuda_check,
};
KILN_OP(tile_op)
