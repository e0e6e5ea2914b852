/*
 * import_scope.c — what a subgraph sees of its enclosing graphs: the
 * names it uses without defining them (outer scope), the declared types
 * of values (value_info), and how an outer value becomes an extra input of
 * the subgraph network.
 */
#include "import_int.h"

/* ------------------------------------------------------------ outer scope */

/* Names g (and its nested subgraphs) uses but does not define, in order of
 * first use. */
int kiln__imp_free_names(const Onnx__GraphProto *g, strset *out, int depth) {
    if (depth > 32) return kiln__err(KILN_EFORMAT, "subgraphs nested more than 32 deep");
    strset def = {0};
    int rc = 0;
    for (size_t i = 0; i < g->n_input && !rc; i++)
        if (g->input[i]->name) rc = kiln__imp_strset_add(&def, g->input[i]->name) < 0;
    for (size_t i = 0; i < g->n_initializer && !rc; i++)
        if (g->initializer[i]->name) rc = kiln__imp_strset_add(&def, g->initializer[i]->name) < 0;
    for (size_t i = 0; i < g->n_node && !rc; i++)
        for (size_t j = 0; j < g->node[i]->n_output && !rc; j++)
            if (g->node[i]->output[j][0]) rc = kiln__imp_strset_add(&def, g->node[i]->output[j]) < 0;
    for (size_t i = 0; i < g->n_node && !rc; i++) {
        const Onnx__NodeProto *n = g->node[i];
        for (size_t j = 0; j < n->n_input && !rc; j++)
            if (n->input[j][0] && !kiln__imp_strset_has(&def, n->input[j])) rc = kiln__imp_strset_add(out, n->input[j]) < 0;
        for (size_t j = 0; j < n->n_attribute && !rc; j++) {
            const Onnx__AttributeProto *a = n->attribute[j];
            strset inner = {0};
            if (a->g) rc = kiln__imp_free_names(a->g, &inner, depth + 1);
            for (size_t k = 0; k < a->n_graphs && !rc; k++) rc = kiln__imp_free_names(a->graphs[k], &inner, depth + 1);
            for (int k = 0; k < inner.n && !rc; k++)
                if (!kiln__imp_strset_has(&def, inner.keys[k])) rc = kiln__imp_strset_add(out, inner.keys[k]) < 0;
            kiln__imp_strset_free(&inner);
        }
    }
    for (size_t i = 0; i < g->n_output && !rc; i++) {
        const char *nm = g->output[i]->name;
        if (nm && nm[0] && !kiln__imp_strset_has(&def, nm)) rc = kiln__imp_strset_add(out, nm) < 0;
    }
    kiln__imp_strset_free(&def);
    if (rc) return rc < 0 ? rc : KILN_ENOMEM;
    return 0;
}

/* ------------------------------------------------------------ types */

static const Onnx__ValueInfoProto *find_value_info(const scope *s, const char *name) {
    for (; s; s = s->parent) {
        const Onnx__GraphProto *g = s->g;
        for (size_t i = 0; i < g->n_value_info; i++)
            if (g->value_info[i]->name && !strcmp(g->value_info[i]->name, name)) return g->value_info[i];
        for (size_t i = 0; i < g->n_input; i++)
            if (g->input[i]->name && !strcmp(g->input[i]->name, name)) return g->input[i];
        for (size_t i = 0; i < g->n_output; i++)
            if (g->output[i]->name && !strcmp(g->output[i]->name, name)) return g->output[i];
    }
    return NULL;
}

/* dtype/rank/dims of a value info; KILN_EUNSUPPORTED for non-tensors. */
int kiln__imp_value_type(const Onnx__ValueInfoProto *vi, const char *what, kiln_dtype *dt, int *ndim,
                      int64_t *dims, const char **names) {
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type) {
        const char *k = !tp ? "no type"
                        : tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE ? "a sequence"
                        : tp->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE ? "an optional"
                        : tp->value_case == ONNX__TYPE_PROTO__VALUE_MAP_TYPE ? "a map"
                        : "not a dense tensor";
        return kiln__err(KILN_EUNSUPPORTED, "%s '%s' is %s (only tensors are supported)", what,
                         vi->name ? vi->name : "", k);
    }
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    int et = tt->has_elem_type ? tt->elem_type : 0;
    if (et <= 0 || et >= KILN_DTYPE_COUNT_ || kiln_dtype_size((kiln_dtype)et) == 0)
        return kiln__err(KILN_EUNSUPPORTED, "%s '%s' has element type %d (not supported)", what,
                         vi->name ? vi->name : "", et);
    *dt = (kiln_dtype)et;
    if (!tt->shape) {
        *ndim = -1;
        return 0;
    }
    if (tt->shape->n_dim > KILN_MAX_DIMS)
        return kiln__err(KILN_EUNSUPPORTED, "%s '%s' has rank %zu (at most %d)", what,
                         vi->name ? vi->name : "", tt->shape->n_dim, KILN_MAX_DIMS);
    *ndim = (int)tt->shape->n_dim;
    for (int i = 0; i < *ndim; i++) {
        const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
        dims[i] = -1;
        if (names) names[i] = NULL;
        if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE && d->dim_value >= 0)
            dims[i] = d->dim_value;
        else if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && names &&
                 d->dim_param && d->dim_param[0])
            names[i] = d->dim_param;
    }
    return 0;
}

/* Declared dims of a tensor value info (any element type). */
int kiln__imp_value_type_dims(const Onnx__ValueInfoProto *vi, int *nd, int64_t *dims, const char **names) {
    const Onnx__TypeProto *tp = vi->type;
    const Onnx__TensorShapeProto *sh = tp && tp->tensor_type ? tp->tensor_type->shape : NULL;
    if (!sh)
        return kiln__err(KILN_EUNSUPPORTED, "'%s' has no shape (unknown rank)", vi->name ? vi->name : "");
    if (sh->n_dim > KILN_MAX_DIMS)
        return kiln__err(KILN_EUNSUPPORTED, "'%s' has rank %zu (at most %d)", vi->name ? vi->name : "", sh->n_dim,
                         KILN_MAX_DIMS);
    *nd = (int)sh->n_dim;
    for (int i = 0; i < *nd; i++) {
        const Onnx__TensorShapeProto__Dimension *d = sh->dim[i];
        dims[i] = d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE && d->dim_value >= 0
                      ? d->dim_value : -1;
        names[i] = d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && d->dim_param &&
                           d->dim_param[0] ? d->dim_param : NULL;
    }
    return 0;
}

/* Describe an outer-scope tensor for an extra subgraph input. */
void kiln__imp_describe_outer(const scope *sc, const char *name, extra *e) {
    memset(e, 0, sizeof *e);
    e->name = name;
    e->dtype = KILN_DTYPE_F32;
    e->ndim = 0;
    kiln_net_tensor_info t;
    if (kiln__imp_net_tensor(sc->net, name, &t) && t.kind != KILN_NET_TENSOR_LAYER_OUTPUT) {
        e->dtype = t.dtype;
        e->ndim = t.ndim;
        for (int i = 0; i < t.ndim; i++) {
            e->dims[i] = t.dims[i];
            e->dim_names[i] = t.kind == KILN_NET_TENSOR_INPUT ? t.dim_names[i] : NULL;
        }
        return;
    }
    /* A layer output: its type is known only to the builder.  Use the
     * value_info if the model has one, else a dynamic-rank placeholder the
     * builder replaces by the layer input's actual description. */
    const Onnx__ValueInfoProto *vi = find_value_info(sc, name);
    kiln_dtype dt;
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    if (vi && kiln__imp_value_type(vi, "value", &dt, &nd, dims, e->dim_names) == 0 && nd >= 0) {
        e->dtype = dt;
        e->ndim = nd;
        for (int i = 0; i < nd; i++) e->dims[i] = dims[i];
    }
}

int kiln__imp_add_extra_input(kiln_network *net, const extra *e) {
    return kiln_network_add_input(net, e->name, e->dtype, e->ndim, e->dims, e->dim_names);
}
