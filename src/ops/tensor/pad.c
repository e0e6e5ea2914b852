/*
 * pad.c — ONNX Pad: opset 2 (pads/value attributes) and 11+ (pads,
 * constant_value and, from 18, axes as inputs); modes constant, reflect,
 * edge, wrap; negative pads crop.
 *
 * Type-agnostic: elements are moved as bytes.  The output is produced row by
 * row (a row = the innermost dim); each row's source is found by mapping
 * the outer indices through the mode, then the row is a memcpy of the
 * interior plus mode-mapped borders.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"


#include <string.h>

enum { M_CONSTANT, M_REFLECT, M_EDGE, M_WRAP };

static const kiln_attr_def pad2_attrs[] = {
    {"mode", KILN_ATTR_STRING, 0, "constant", 0, "constant, reflect, edge or wrap"},
    {"pads", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 1, "begin pads then end pads, per axis"},
    {"value", KILN_ATTR_FLOAT, 0, "0", 0, "fill value for constant mode"},
    {NULL, 0, 0, NULL, 0, NULL},
};
static const kiln_attr_def pad11_attrs[] = {
    {"mode", KILN_ATTR_STRING, 0, "constant", 0, "constant, reflect, edge or wrap"},
    {NULL, 0, 0, NULL, 0, NULL},
};

static int parse_mode(const kiln_attrs *a, int *mode) {
    const char *m = kiln_attrs_string(a, "mode");
    if (!m || !strcmp(m, "constant")) *mode = M_CONSTANT;
    else if (!strcmp(m, "reflect")) *mode = M_REFLECT;
    else if (!strcmp(m, "edge")) *mode = M_EDGE;
    else if (!strcmp(m, "wrap")) *mode = M_WRAP;
    else
        return kiln_set_error(KILN_EATTR, "Pad: mode must be constant, reflect, edge or wrap, "
                              "found '%s'", m);
    return 0;
}

/* Expand (pads, axes) into full begin/end pads per axis of rank r. */
static int expand_pads(int r, const int64_t *pads, int64_t npads, const int64_t *axes,
                       int64_t naxes, int64_t *pb, int64_t *pe) {
    for (int i = 0; i < r; i++) pb[i] = pe[i] = 0;
    int64_t na = axes ? naxes : r;
    if (npads != 2 * na)
        return kiln_set_error(KILN_ESHAPE, "Pad: expected %lld pads (2 per axis), found %lld",
                              (long long)(2 * na), (long long)npads);
    for (int64_t i = 0; i < na; i++) {
        int64_t ax = axes ? axes[i] : i;
        if (ax < 0) ax += r;
        if (ax < 0 || ax >= r)
            return kiln_set_error(KILN_EATTR, "Pad: axis %lld out of range for rank %d",
                                  (long long)(axes ? axes[i] : i), r);
        pb[ax] = pads[i];
        pe[ax] = pads[na + i];
    }
    return 0;
}

static int pad_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    int r = x->ndim;
    int64_t pb[KILN_MAX_DIMS], pe[KILN_MAX_DIMS];
    int mode, rc;
    if ((rc = parse_mode(c->attrs, &mode))) return rc;
    c->out[0] = *x;
    c->out[0].data = NULL;
    c->out[0].nvalues = -1;
    if (c->nin == 1) {
        const int64_t *v;
        int64_t n = kiln_attrs_ints(c->attrs, "pads", &v);
        if ((rc = expand_pads(r, v, n, NULL, 0, pb, pe))) return rc;
    } else {
        const kiln_desc *p = &c->in[1];
        int64_t np = p->ndim == 1 ? -1 : 0;
        int64_t pv[2 * KILN_MAX_DIMS];
        if (p->ndim != 1)
            return kiln_set_error(KILN_ESHAPE, "Pad: pads must be 1-D, found rank %d", p->ndim);
        if (!kiln_expr_is_const(p->dims[0], &np) || np > 2 * KILN_MAX_DIMS)
            return kiln_set_error(KILN_ESHAPE, "Pad: pads must have a static length <= %d",
                                  2 * KILN_MAX_DIMS);
        int64_t axv[KILN_MAX_DIMS], nax = 0;
        int have_axes = c->nin > 3 && c->in[3].dtype != KILN_DTYPE_UNDEFINED;
        if (have_axes) {
            const kiln_desc *a = &c->in[3];
            if (!a->data || a->ndim != 1 || !kiln_expr_is_const(a->dims[0], &nax) ||
                nax > KILN_MAX_DIMS)
                return kiln_set_error(KILN_EUNSUPPORTED, "Pad: axes must be a constant 1-D tensor");
            for (int64_t i = 0; i < nax; i++) axv[i] = kiln__ops_get_i64(a->data, a->dtype, i);
        }
        if (p->data) {
            for (int64_t i = 0; i < np; i++) pv[i] = kiln__ops_get_i64(p->data, p->dtype, i);
            if ((rc = expand_pads(r, pv, np, have_axes ? axv : NULL, nax, pb, pe))) return rc;
        } else if (p->nvalues == np && !have_axes && np == 2 * r) {
            /* symbolic pads (e.g. computed from shapes) */
            for (int i = 0; i < r; i++)
                c->out[0].dims[i] = kiln_expr_add(c->x, kiln_expr_add(c->x, x->dims[i], p->values[i]),
                                                  p->values[r + i]);
            return 0;
        } else {
            return kiln_set_error(KILN_EUNSUPPORTED, "Pad: pads must be known at build time "
                                  "(a constant or computed from shapes)");
        }
    }
    for (int i = 0; i < r; i++)
        c->out[0].dims[i] = kiln_expr_add(c->x, x->dims[i], kiln_expr_const(c->x, pb[i] + pe[i]));
    return 0;
}

static inline int64_t map_index(int64_t i, int64_t n, int mode) {
    if (i >= 0 && i < n) return i;
    switch (mode) {
    case M_EDGE: return i < 0 ? 0 : n - 1;
    case M_WRAP: return ((i % n) + n) % n;
    case M_REFLECT:
        if (n == 1) return 0;
        while (i < 0 || i >= n) {
            if (i < 0) i = -i;
            if (i >= n) i = 2 * (n - 1) - i;
        }
        return i;
    default: return -1;
    }
}

typedef struct pad_task {
    const uint8_t *x;
    uint8_t *y;
    size_t esz;
    int r, mode;
    int64_t in[KILN_MAX_DIMS], out[KILN_MAX_DIMS], pb[KILN_MAX_DIMS];
    uint8_t fill[16];
} pad_task;

static void pad_rows(void *ud, int64_t lo, int64_t hi) {
    const pad_task *t = ud;
    const int r = t->r;
    const size_t esz = t->esz;
    const int64_t IW = t->in[r - 1], OW = t->out[r - 1], pw = t->pb[r - 1];
    for (int64_t row = lo; row < hi; row++) {
        uint8_t *y = t->y + (size_t)(row * OW) * esz;
        /* source row index */
        int64_t rem = row, src = 0, mul = 1, valid = 1;
        for (int d = r - 2; d >= 0; d--) {
            int64_t o = rem % t->out[d];
            rem /= t->out[d];
            int64_t i = map_index(o - t->pb[d], t->in[d], t->mode);
            if (i < 0) { valid = 0; break; }
            src += i * mul;
            mul *= t->in[d];
        }
        if (!valid || IW == 0) {
            for (int64_t j = 0; j < OW; j++) memcpy(y + j * esz, t->fill, esz);
            continue;
        }
        const uint8_t *x = t->x + (size_t)(src * IW) * esz;
        /* interior: output j with 0 <= j - pw < IW */
        int64_t j0 = pw > 0 ? pw : 0, j1 = pw + IW < OW ? pw + IW : OW;
        for (int64_t j = 0; j < j0 && j < OW; j++) {
            int64_t i = map_index(j - pw, IW, t->mode);
            memcpy(y + j * esz, i < 0 ? t->fill : x + i * esz, esz);
        }
        if (j1 > j0) memcpy(y + j0 * esz, x + (j0 - pw) * esz, (size_t)(j1 - j0) * esz);
        for (int64_t j = j1 > j0 ? j1 : j0; j < OW; j++) {
            int64_t i = map_index(j - pw, IW, t->mode);
            memcpy(y + j * esz, i < 0 ? t->fill : x + i * esz, esz);
        }
    }
}

static int pad_impl(const kiln_call *c) {
    const kiln_tensor *X = &c->in[0];
    kiln_tensor *Y = &c->out[0];
    if (!kiln__ops_dense(X) || !kiln__ops_dense(Y))
        return kiln_set_error(KILN_EUNSUPPORTED, "Pad: strided tensors not supported");
    pad_task t;
    memset(&t, 0, sizeof t);
    int rc = parse_mode(c->attrs, &t.mode);
    if (rc) return rc;
    int r = X->ndim;
    int64_t pe[KILN_MAX_DIMS];
    double value = 0;
    if (c->nin == 1) {
        const int64_t *v;
        int64_t n = kiln_attrs_ints(c->attrs, "pads", &v);
        if ((rc = expand_pads(r, v, n, NULL, 0, t.pb, pe))) return rc;
        value = kiln_attrs_float(c->attrs, "value");
    } else {
        const kiln_tensor *P = &c->in[1];
        int64_t np = kiln_tensor_numel(P), pv[2 * KILN_MAX_DIMS], axv[KILN_MAX_DIMS], nax = 0;
        if (np > 2 * KILN_MAX_DIMS) return kiln_set_error(KILN_ESHAPE, "Pad: too many pads");
        for (int64_t i = 0; i < np; i++) pv[i] = kiln__ops_get_i64(P->data, P->dtype, i);
        int have_axes = c->nin > 3 && c->in[3].data;
        if (have_axes) {
            nax = kiln_tensor_numel(&c->in[3]);
            if (nax > KILN_MAX_DIMS) return kiln_set_error(KILN_ESHAPE, "Pad: too many axes");
            for (int64_t i = 0; i < nax; i++) axv[i] = kiln__ops_get_i64(c->in[3].data, c->in[3].dtype, i);
        }
        if ((rc = expand_pads(r, pv, np, have_axes ? axv : NULL, nax, t.pb, pe))) return rc;
        if (c->nin > 2 && c->in[2].data && kiln_tensor_numel(&c->in[2]) > 0)
            value = kiln__ops_get_f64(c->in[2].data, c->in[2].dtype, 0);
    }
    if (r == 0) {
        memcpy(Y->data, X->data, kiln_dtype_size(X->dtype));
        return 0;
    }
    for (int i = 0; i < r; i++) {
        t.in[i] = X->dims[i];
        t.out[i] = Y->dims[i];
        if (t.out[i] != t.in[i] + t.pb[i] + pe[i])
            return kiln_set_error(KILN_ESHAPE, "Pad: output dim %d is %lld, expected %lld", i,
                                  (long long)t.out[i], (long long)(t.in[i] + t.pb[i] + pe[i]));
        if (t.mode != M_CONSTANT && t.in[i] == 0 && t.out[i] > 0)
            return kiln_set_error(KILN_ESHAPE, "Pad: cannot %s-pad empty axis %d",
                                  t.mode == M_EDGE ? "edge" : t.mode == M_WRAP ? "wrap" : "reflect", i);
    }
    t.x = X->data;
    t.y = Y->data;
    t.r = r;
    t.esz = kiln_dtype_size(X->dtype);
    if (t.esz == 0 || t.esz > sizeof t.fill)
        return kiln_set_error(KILN_ETYPE, "Pad: unsupported type %s", kiln_dtype_name(X->dtype));
    kiln__ops_set_f64(t.fill, X->dtype, 0, value);
    int64_t rows = 1;
    for (int i = 0; i < r - 1; i++) rows *= t.out[i];
    if (t.out[r - 1] == 0 || rows == 0) return 0;
    kiln_exec_parallel_for(c->exec, rows, 1 + 16384 / t.out[r - 1], pad_rows, &t);
    return 0;
}

static const kiln_combo cu_any[] = {{.types = KILN_CU_T_ANY}, {0}};
/* Pad-11+ (index inputs of another type): any type, moved by size */
static int pad_cuda_check(const kiln_shape_ctx *c) { return kiln__ops_cuda_types(c, "Pad", KILN_CU_T_ALL); }

static const kiln_quick_op pad_2 = {
    .ns = "ai.onnx", .name = "Pad", .version = 2,
    .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
    .attrs = pad2_attrs, .shape = pad_shape, .impl = pad_impl,
    .doc = "pad with constant/reflect/edge/wrap (pads attribute)",
    .cuda_impl = kiln__cu_pad, .cuda_formats = cu_any,
};
static const kiln_quick_op pad_11 = {
    .ns = "ai.onnx", .name = "Pad", .version = 11,
    .min_inputs = 2, .max_inputs = 3, .num_outputs = 1,
    .attrs = pad11_attrs, .shape = pad_shape, .impl = pad_impl,
    .doc = "pad with constant/reflect/edge/wrap (pads, constant_value inputs)",
    .cuda_impl = kiln__cu_pad, .cuda_host_inputs = 0xe, /* pads constant_value axes */
    .cuda_check = pad_cuda_check,
};
static const kiln_quick_op pad_18 = {
    .ns = "ai.onnx", .name = "Pad", .version = 18,
    .min_inputs = 2, .max_inputs = 4, .num_outputs = 1,
    .attrs = pad11_attrs, .shape = pad_shape, .impl = pad_impl,
    .doc = "pad with constant/reflect/edge/wrap (pads, constant_value, axes inputs)",
    .cuda_impl = kiln__cu_pad, .cuda_host_inputs = 0xe, .cuda_check = pad_cuda_check,
};
KILN_OP(pad_2)
KILN_OP(pad_11)
KILN_OP(pad_18)
