/*
 * if.c — ONNX If, and kiln::if_select.
 *
 * An If whose condition is known when the engine is built (a constant, a
 * folded value, or a symbolic value that folds to a constant) is replaced by
 * the branch it takes: the shape function hands that branch to the builder
 * with kiln_shape_inline, so the engine holds only the branch's layers.
 *
 * A condition known only at run time uses the `both` graph the ONNX importer
 * adds: both branches (as Ifs with constant conditions, so they inline) and
 * one kiln::if_select per output, which copies the then- or the else-value
 * by the condition.  Both branches run; they must produce the same dtypes
 * and ranks (if_select checks this at build time and names the output).
 * if_select v2 (the importer's) lets dims differ: such a dim is
 * data-dependent, its size tensor bounded by the larger branch (v1, equal
 * shapes only, stays registered for older engines).  Without `both` a
 * runtime condition is KILN_EUNSUPPORTED.
 *
 * Layout of the layer (made by the ONNX importer, see kiln/onnx.h): input 0
 * is the condition, inputs 1.. are the outer-scope values the branches use;
 * each branch network has the same inputs (its input 0 stands for the
 * condition).  ONNX If has as many outputs as the branches; the op declares
 * IF_MAX_OUT and the importer pads both the node's outputs and the branches'
 * outputs (with unused scalars) up to that.
 */
#include "kiln/plugin.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define IF_MAX_OUT 16

static const kiln_attr_def if_attrs[] = {
    {"then_branch", KILN_ATTR_GRAPH, KILN_DTYPE_UNDEFINED, NULL, 0, "graph run when cond is true"},
    {"else_branch", KILN_ATTR_GRAPH, KILN_DTYPE_UNDEFINED, NULL, 0, "graph run when cond is false"},
    {"both", KILN_ATTR_GRAPH, KILN_DTYPE_UNDEFINED, NULL, 0,
     "both branches + kiln::if_select, for a condition known only at run time (set by the importer)"},
    {NULL, 0, 0, NULL, 0, NULL},
};

/* 1/0 when the condition is known at build time, -1 otherwise. */
static int if_cond_value(const kiln_desc *d) {
    int64_t n = 1;
    for (int i = 0; i < d->ndim; i++) {
        int64_t v;
        if (!kiln_expr_is_const(d->dims[i], &v)) return -1;
        n *= v;
    }
    if (n != 1) return -2;
    if (d->data) {
        size_t es = kiln_dtype_size(d->dtype);
        const uint8_t *p = d->data;
        switch (d->dtype) {
        case KILN_DTYPE_F32: { float f; memcpy(&f, p, 4); return f != 0; }
        case KILN_DTYPE_F64: { double f; memcpy(&f, p, 8); return f != 0; }
        default:
            for (size_t i = 0; i < es; i++)
                if (p[i]) return 1;
            return 0;
        }
    }
    if (d->nvalues >= 1 && d->values[0]) {
        int64_t v;
        if (kiln_expr_is_const(d->values[0], &v)) return v != 0;
    }
    return -1;
}

static int if_shape(kiln_shape_ctx *c) {
    int cond = if_cond_value(&c->in[0]);
    if (cond == -2)
        return kiln_set_error(KILN_ESHAPE, "If: the condition must hold exactly one element");
    if (cond < 0) {
        const kiln_attr_value *both = kiln_attrs_get(c->attrs, "both");
        if (both && both->present && both->graph) return kiln_shape_inline(c, both->graph);
        return kiln_set_error(KILN_EUNSUPPORTED,
                              "If: the condition is known only at run time and the layer has no "
                              "'both' graph (the ONNX importer adds one); kiln runs such an If only "
                              "when its condition is known when the engine is built");
    }
    const kiln_attr_value *g = kiln_attrs_get(c->attrs, cond ? "then_branch" : "else_branch");
    if (!g || !g->present || !g->graph)
        return kiln_set_error(KILN_EATTR, "If: attribute %s is not set", cond ? "then_branch" : "else_branch");
    return kiln_shape_inline(c, g->graph);
}

/* kiln::if_select(cond, a, b) = cond ? a : b, a and b of one dtype and shape. */
static int sel_shape(kiln_shape_ctx *c) {
    const kiln_desc *a = &c->in[1], *b = &c->in[2];
    int cond = if_cond_value(&c->in[0]);
    if (cond >= 0 && c->nout > 1) {
        /* v2, condition known at build (an unrolled Loop): the chosen value
         * itself, shape and known values included, sharing its buffer */
        const kiln_desc *src = cond ? a : b;
        c->out[0] = *src;
        c->out[0].data = NULL;
        for (int k = 1; k < c->nout; k++) {
            memset(&c->out[k], 0, sizeof c->out[k]);
            c->out[k].dtype = KILN_DTYPE_I64;
            c->out[k].nvalues = -1;
        }
        return kiln_shape_alias(c, 0, cond ? 1 : 2);
    }
    if (a->dtype != b->dtype)
        return kiln_set_error(KILN_ETYPE, "If with a runtime condition: the branches produce %s and %s for "
                              "one output (both must have the same type)", kiln_dtype_name(a->dtype),
                              kiln_dtype_name(b->dtype));
    int same = a->ndim == b->ndim;
    for (int i = 0; same && i < a->ndim; i++) same = a->dims[i] == b->dims[i];
    /* v2: equal ranks suffice; a dim that differs is data-dependent (the
     * size tensor out[1 + i] holds it), bounded by the larger branch. */
    int dds = !same && a->ndim == b->ndim && c->nout > 1;
    if (!same && !dds) {
        char sa[256] = "", sb[256] = "";
        size_t la = 0, lb = 0;
        for (int i = 0; i < a->ndim && la < sizeof sa; i++) {
            char e[64];
            kiln_expr_print(a->dims[i], e, sizeof e);
            la += (size_t)snprintf(sa + la, sizeof sa - la, "%s%s", i ? ", " : "", e);
        }
        for (int i = 0; i < b->ndim && lb < sizeof sb; i++) {
            char e[64];
            kiln_expr_print(b->dims[i], e, sizeof e);
            lb += (size_t)snprintf(sb + lb, sizeof sb - lb, "%s%s", i ? ", " : "", e);
        }
        return kiln_set_error(KILN_EUNSUPPORTED, "If with a runtime condition: the then-branch produces "
                              "[%s] and the else-branch [%s] for one output; kiln runs both branches and "
                              "needs equal shapes%s", sa, sb, c->nout > 1 ? " or at least equal ranks" : "");
    }
    int64_t n = 1, v;
    for (int i = 0; i < c->in[0].ndim; i++)
        n = kiln_expr_is_const(c->in[0].dims[i], &v) ? n * v : -1;
    if (n != 1) return kiln_set_error(KILN_ESHAPE, "If: the condition must hold exactly one element");
    c->out[0] = *a;
    c->out[0].data = NULL;
    c->out[0].nvalues = -1;
    for (int k = 1; k < c->nout; k++) { /* size tensors (used or not) */
        memset(&c->out[k], 0, sizeof c->out[k]);
        c->out[k].dtype = KILN_DTYPE_I64;
        c->out[k].nvalues = -1;
    }
    const kiln_expr *na = kiln_expr_const(c->x, 1), *nb = na;
    int ndds = 0;
    for (int i = 0; dds && i < a->ndim; i++) {
        na = kiln_expr_mul(c->x, na, a->dims[i]);
        nb = kiln_expr_mul(c->x, nb, b->dims[i]);
        if (a->dims[i] == b->dims[i]) continue;
        c->out[0].dims[i] = kiln_shape_size_tensor(c, 1 + i, kiln_expr_max(c->x, a->dims[i], b->dims[i]),
                                                   kiln_expr_max(c->x, a->dims[i], b->dims[i]));
        ndds++;
    }
    /* the chosen value is one of the two: at most the larger element count */
    if (ndds > 1) return kiln_shape_numel_bound(c, 0, kiln_expr_max(c->x, na, nb));
    return 0;
}

static int sel_impl(const kiln_call *c) {
    const kiln_tensor *cd = &c->in[0];
    size_t es = kiln_dtype_size(cd->dtype);
    const uint8_t *p = cd->data;
    int cond = 0;
    if (cd->dtype == KILN_DTYPE_F32) { float f; memcpy(&f, p, 4); cond = f != 0; }
    else if (cd->dtype == KILN_DTYPE_F64) { double f; memcpy(&f, p, 8); cond = f != 0; }
    else for (size_t i = 0; i < es; i++) cond |= p[i] != 0;
    const kiln_tensor *src = &c->in[cond ? 1 : 2];
    size_t bytes = (size_t)kiln_tensor_numel(src) * kiln_dtype_size(src->dtype);
    if (bytes && c->out[0].data != src->data) memcpy(c->out[0].data, src->data, bytes);
    for (int k = 1; k < c->nout; k++)
        if (c->out[k].data) *(int64_t *)c->out[k].data = k - 1 < src->ndim ? src->dims[k - 1] : 0;
    return 0;
}

static const kiln_quick_op if_select_op = {
    .ns = "kiln", .name = "if_select", .version = 1,
    .min_inputs = 3, .max_inputs = 3, .num_outputs = 1,
    .shape = sel_shape, .impl = sel_impl, .timing_id = "",
    .doc = "cond ? a : b for If with a runtime condition (equal dtypes and shapes)",
};
KILN_OP(if_select_op)
/* v2: the branches may differ in dims (not rank): outputs 1.. are the
 * output's dims, size tensors for the dims that differ. */
static const kiln_quick_op if_select2_op = {
    .ns = "kiln", .name = "if_select", .version = 2,
    .min_inputs = 3, .max_inputs = 3, .num_outputs = 1 + KILN_MAX_DIMS,
    .shape = sel_shape, .impl = sel_impl, .timing_id = "",
    .doc = "cond ? a : b for If with a runtime condition (equal dtypes and ranks; outputs 1..: dims)",
};
KILN_OP(if_select2_op)

static int if_impl(const kiln_call *c) {
    (void)c;
    return kiln_set_error(KILN_EUNSUPPORTED, "If: runtime conditions are not supported");
}

#define IF_OP(var, ver)                                                                  \
    static const kiln_quick_op var = {                                                   \
        .ns = "ai.onnx", .name = "If", .version = ver,                                   \
        .min_inputs = 1, .max_inputs = KILN_MAX_IO - IF_MAX_OUT, .num_outputs = IF_MAX_OUT, \
        .attrs = if_attrs, .shape = if_shape, .impl = if_impl,                           \
        .doc = "If with a build-time condition (the taken branch is inlined)",           \
    };                                                                                   \
    KILN_OP(var)

IF_OP(if_1, 1)
IF_OP(if_11, 11)
IF_OP(if_13, 13)
IF_OP(if_16, 16)
IF_OP(if_19, 19)
IF_OP(if_21, 21)
