/*
 * control_flow.c — ONNX If.
 *
 * An If whose condition is known when the engine is built (a constant, a
 * folded value, or a symbolic value that folds to a constant) is replaced by
 * the branch it takes: the shape function hands that branch to the builder
 * with kiln_shape_inline, so the engine holds only the branch's layers.  A
 * condition known only at run time is KILN_EUNSUPPORTED for now.
 *
 * Layout of the layer (made by the ONNX importer, see kiln/onnx.h): input 0
 * is the condition, inputs 1.. are the outer-scope values the branches use;
 * each branch network has the same inputs (its input 0 stands for the
 * condition and is unused).  ONNX If has as many outputs as the branches;
 * the op declares IF_MAX_OUT and the importer pads both the node's outputs
 * and the branches' outputs (with unused scalar constants) up to that.
 */
#include "kiln/plugin.h"

#include <stdint.h>
#include <string.h>

#define IF_MAX_OUT 16

static const kiln_attr_def if_attrs[] = {
    {"then_branch", KILN_ATTR_GRAPH, KILN_DTYPE_UNDEFINED, NULL, 1, "graph run when cond is true"},
    {"else_branch", KILN_ATTR_GRAPH, KILN_DTYPE_UNDEFINED, NULL, 1, "graph run when cond is false"},
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
    if (cond < 0)
        return kiln_set_error(KILN_EUNSUPPORTED,
                              "If: the condition is known only at run time; kiln supports If only "
                              "when its condition is known when the engine is built (a constant or "
                              "a value computed from constants and shapes)");
    const kiln_attr_value *g = kiln_attrs_get(c->attrs, cond ? "then_branch" : "else_branch");
    if (!g || !g->present || !g->graph)
        return kiln_set_error(KILN_EATTR, "If: attribute %s is not set", cond ? "then_branch" : "else_branch");
    return kiln_shape_inline(c, g->graph);
}

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
