/*
 * import_sequences.c — ONNX sequence, optional and string values, which
 * kiln networks carry as 2 or 3 tensors ("parts"); see the comment below.
 */
#include "import_int.h"

/* ------------------------------------------------------------ sequences
 *
 * kiln networks carry tensors, so an ONNX sequence value `s` travels as two
 * tensors: `s` (the elements' data, concatenated, 1-D) and `s:shapes` (I64
 * [count, rank], row i = the dims of element i).  An optional tensor is a
 * sequence of 0 or 1 elements; an optional sequence adds `s:present` (BOOL
 * scalar).  The importer expands such values into their parts wherever
 * they appear (graph inputs and outputs, node inputs and outputs, If
 * branches); the ops in src/ops/sequence/sequence.c take the parts as consecutive
 * inputs.  Identity and Optional on these values are lowered here. */

static const char *const part_suffix[3] = {"", ":shapes", ":present"};

static int is_onnx_domain(const Onnx__NodeProto *n) {
    return !n->domain || !n->domain[0] || !strcmp(n->domain, "ai.onnx");
}

int kiln__imp_is_lowered_node(const Onnx__NodeProto *n) {
    return is_onnx_domain(n) && n->op_type && !strcmp(n->op_type, "Optional");
}

/* 1: a tensor; 2: a sequence of tensors or an optional tensor; 3: an
 * optional sequence; 0: anything else (map, sparse, nested).  *dt / *rank
 * (-1: not declared) describe the tensors. */
int kiln__imp_type_parts(const Onnx__TypeProto *tp, kiln_dtype *dt, int *rank) {
    *dt = KILN_DTYPE_UNDEFINED;
    *rank = -1;
    if (!tp) return 1;
    int parts = 1;
    if (tp->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE) {
        tp = tp->optional_type ? tp->optional_type->elem_type : NULL;
        parts = 2;
        if (tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE) parts = 3;
        else if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE) return 0;
    }
    if (tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE) {
        tp = tp->sequence_type ? tp->sequence_type->elem_type : NULL;
        if (parts == 1) parts = 2;
        if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE) return 0;
    }
    if (tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type) return parts == 1 ? 1 : 0;
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    if (tt->has_elem_type && tt->elem_type > 0 && tt->elem_type < KILN_DTYPE_COUNT_)
        *dt = (kiln_dtype)tt->elem_type;
    if (tt->shape) *rank = (int)tt->shape->n_dim;
    return parts;
}

int kiln__imp_parts_of(const imp *im, const char *name) {
    return kiln__imp_strset_has(&im->seq3, name) ? 3 : kiln__imp_strset_has(&im->seq2, name) ? 2 : 1;
}

int kiln__imp_is_str(const imp *im, const char *name) { return kiln__imp_strset_has(&im->str2, name); }

int kiln__imp_set_str(imp *im, const char *name) {
    if (kiln__imp_strset_add(&im->str2, name) < 0 || kiln__imp_strset_add(&im->seq2, name) < 0) return KILN_ENOMEM;
    return 0;
}

int kiln__imp_set_parts(imp *im, const char *name, int parts) {
    if (parts < 2) return 0;
    return kiln__imp_strset_add(parts == 3 ? &im->seq3 : &im->seq2, name) < 0 ? KILN_ENOMEM : 0;
}

/* Ops that take sequence parts as inputs (src/ops/sequence/sequence.c). */
int kiln__imp_takes_sequences(const char *op_type) {
    static const char *const ops[] = {"SequenceInsert", "SequenceErase", "SequenceAt", "SequenceLength",
                                      "ConcatFromSequence", "OptionalHasElement", "OptionalGetElement",
                                      "SequenceMap", "Loop", NULL};
    for (int i = 0; ops[i]; i++)
        if (!strcmp(op_type, ops[i])) return 1;
    return 0;
}

/* Parts of a subgraph output: its declared type, else its producer. */
static int graph_out_parts(const imp *im, const Onnx__GraphProto *g, size_t i) {
    if (!g || i >= g->n_output) return 1;
    kiln_dtype dt;
    int rank;
    int p = kiln__imp_type_parts(g->output[i]->type, &dt, &rank);
    if (p == 1 && dt == KILN_DTYPE_STRING) return 2; /* bytes + lengths */
    if (p != 1 || !g->output[i]->name) return p ? p : 1;
    for (size_t k = 0; k < g->n_node; k++) {
        const Onnx__NodeProto *n = g->node[k];
        for (size_t j = 0; j < n->n_output; j++)
            if (!strcmp(n->output[j], g->output[i]->name)) {
                const char *t = n->op_type ? n->op_type : "";
                if (!is_onnx_domain(n)) return 1;
                if (!strncmp(t, "Sequence", 8) && strcmp(t, "SequenceAt") && strcmp(t, "SequenceLength")) return 2;
                if (!strcmp(t, "SplitToSequence")) return 2;
                if (!strcmp(t, "Optional")) {
                    if (n->n_input && n->input[0][0]) return kiln__imp_parts_of(im, n->input[0]) > 1 ? 3 : 2;
                    return 2;
                }
                return 1;
            }
    }
    return 1;
}

/* Output i of node n is a string tensor (StringNormalizer; If whose
 * branch declares a string output). */
int kiln__imp_out_is_str(const Onnx__NodeProto *n, size_t i) {
    if (!is_onnx_domain(n)) return 0;
    if (!strcmp(n->op_type, "StringNormalizer")) return i == 0;
    if (strcmp(n->op_type, "If")) return 0;
    const Onnx__AttributeProto *a = kiln__imp_find_attr(n, "then_branch");
    if (!a || !a->g || i >= a->g->n_output) return 0;
    kiln_dtype dt;
    int rank;
    return kiln__imp_type_parts(a->g->output[i]->type, &dt, &rank) == 1 && dt == KILN_DTYPE_STRING;
}

/* Parts of output i of node n. */
int kiln__imp_out_parts(const imp *im, const Onnx__NodeProto *n, size_t i) {
    if (!is_onnx_domain(n)) return 1;
    const char *t = n->op_type;
    if (!strcmp(t, "SequenceEmpty") || !strcmp(t, "SequenceConstruct") || !strcmp(t, "SequenceInsert") ||
        !strcmp(t, "SequenceErase") || !strcmp(t, "SplitToSequence"))
        return i == 0 ? 2 : 1;
    if (!strcmp(t, "SequenceMap")) return 2;
    if (!strcmp(t, "StringNormalizer")) return i == 0 ? 2 : 1;
    if (!strcmp(t, "Loop")) /* final carried values have the kind of their initial values */
        return i + 2 < n->n_input && n->input[i + 2][0] ? kiln__imp_parts_of(im, n->input[i + 2]) : 1;
    if (!strcmp(t, "OptionalGetElement")) return n->n_input && kiln__imp_parts_of(im, n->input[0]) == 3 ? 2 : 1;
    if (!strcmp(t, "If")) {
        const Onnx__AttributeProto *a = kiln__imp_find_attr(n, "then_branch");
        return graph_out_parts(im, a ? a->g : NULL, i);
    }
    return 1;
}

/* The name of part k of value `name`. */
const char *kiln__imp_part_name(const imp *im, char *buf, size_t size, const char *name, int k) {
    snprintf(buf, size, "%s%s", name, k == 1 && kiln__imp_strset_has(&im->str2, name) ? ":lens" : part_suffix[k]);
    return buf;
}

/* The value (shape = 0) or shape (1) the options give for `name`. */
const kiln_onnx_value *kiln__imp_given_value(const imp *im, const char *name, int shape) {
    if (!im->opt) return NULL;
    const kiln_onnx_value *v = shape ? im->opt->shapes : im->opt->values;
    int n = shape ? im->opt->nshapes : im->opt->nvalues;
    for (int k = 0; k < n; k++)
        if (v[k].name && !strcmp(v[k].name, name)) return &v[k];
    return NULL;
}

/* Identity and Optional on sequence values: lowered to layers here.
 * *done = 1 when n was handled. */
int kiln__imp_lower_seq_node(imp *im, const Onnx__NodeProto *n, const scope *sc, const char *lb, int *done) {
    *done = 0;
    if (!is_onnx_domain(n) || n->n_output < 1 || !n->output[0][0]) return 0;
    const char *t = n->op_type;
    int isid = !strcmp(t, "Identity"), isopt = !strcmp(t, "Optional");
    if (!isid && !isopt) return 0;
    const char *x = n->n_input && n->input[0][0] ? n->input[0] : NULL;
    int px = x ? kiln__imp_parts_of(im, x) : 0;
    if (isid && px < 2) return 0;
    *done = 1;
    if (x && !kiln__imp_net_tensor(sc->net, x, NULL))
        return kiln__err(KILN_ENOTFOUND, "%s: input '%s' is not defined before this node", lb, x);
    const char *y = n->output[0];
    char a[600], b[600];
    int rc = 0, py;
    if (x && (isid || px == 2)) {
        /* Identity of every part (Optional of a sequence: + present) */
        for (int k = 0; k < px && !rc; k++) {
            const char *in1[1] = {kiln__imp_part_name(im, a, sizeof a, x, k)}, *out1[1] = {kiln__imp_part_name(im, b, sizeof b, y, k)};
            if (!kiln_network_add_layer(sc->net, "ai.onnx::Identity", 1, NULL, 1, in1, 1, out1))
                rc = kiln__err_prefix(KILN_EINTERNAL, "%s", lb);
        }
        py = isid ? px : 3;
    } else if (x) {
        /* Optional of a tensor: a sequence of one */
        const char *in1[1] = {x}, *out2[2] = {y, kiln__imp_part_name(im, b, sizeof b, y, 1)};
        if (!kiln_network_add_layer(sc->net, "ai.onnx::SequenceConstruct", 11, NULL, 1, in1, 2, out2))
            rc = kiln__err_prefix(KILN_EINTERNAL, "%s", lb);
        py = 2;
    } else {
        /* Empty optional of the `type` attribute's type */
        const Onnx__AttributeProto *ta = kiln__imp_find_attr(n, "type");
        kiln_dtype dt;
        int rank;
        int p = ta && ta->tp ? kiln__imp_type_parts(ta->tp, &dt, &rank) : 0;
        if (p < 1 || p > 2 || dt == KILN_DTYPE_UNDEFINED)
            return kiln__err(KILN_EUNSUPPORTED, "%s: an empty Optional needs a `type` attribute of a tensor or a "
                             "sequence of tensors", lb);
        const char *out2[2] = {y, kiln__imp_part_name(im, b, sizeof b, y, 1)};
        kiln_layer *l = kiln_network_add_layer(sc->net, "ai.onnx::SequenceEmpty", 11, NULL, 0, NULL, 2, out2);
        if (!l) return kiln__err_prefix(KILN_EINTERNAL, "%s", lb);
        rc = kiln_layer_set_int(l, "dtype", dt);
        if (!rc) rc = kiln_layer_set_int(l, "elem_rank", rank);
        py = p == 1 ? 2 : 3;
        px = 0;
    }
    if (!rc && py == 3 && px < 3) {
        /* present: a copy of a constant (a layer output, like every part) */
        uint8_t v = x != NULL;
        char cn[640];
        snprintf(cn, sizeof cn, "%s:present#const", y);
        rc = kiln_network_add_constant(sc->net, cn, KILN_DTYPE_BOOL, 0, NULL, &v);
        const char *in1[1] = {cn}, *out1[1] = {kiln__imp_part_name(im, b, sizeof b, y, 2)};
        kiln_layer *l = rc ? NULL : kiln_network_add_layer(sc->net, "kiln::reformat", 1, NULL, 1, in1, 1, out1);
        if (!rc && !l) rc = kiln__err_prefix(KILN_EINTERNAL, "%s", lb);
        if (!rc) rc = kiln_layer_set_int(l, "to_dtype", KILN_DTYPE_BOOL);
    }
    if (!rc && isid && x && kiln__imp_is_str(im, x)) rc = kiln__imp_set_str(im, y);
    if (!rc) rc = kiln__imp_set_parts(im, y, py);
    return rc ? kiln__err_prefix(rc, "%s", lb) : 0;
}

/* Cast / CastLike to or from STRING: kiln::cast_to_string /
 * cast_from_string on the packed form.  *done = 1 when n was handled. */
int kiln__imp_lower_str_node(imp *im, const Onnx__NodeProto *n, const scope *sc, const char *lb, int *done) {
    *done = 0;
    if (!is_onnx_domain(n) || n->n_output < 1 || !n->output[0][0] || n->n_input < 1 || !n->input[0][0]) return 0;
    int cast = !strcmp(n->op_type, "Cast"), like = !strcmp(n->op_type, "CastLike");
    if (!cast && !like) return 0;
    const char *x = n->input[0], *y = n->output[0];
    const Onnx__AttributeProto *ta = kiln__imp_find_attr(n, "to");
    int64_t to = cast && ta && ta->has_i ? ta->i : 0;
    int xs = kiln__imp_is_str(im, x), ys;
    if (cast) {
        ys = to == KILN_DTYPE_STRING;
    } else {
        if (n->n_input < 2 || !n->input[1][0]) return 0;
        kiln_net_tensor_info ti;
        ys = kiln__imp_is_str(im, n->input[1]) ||
             (kiln__imp_net_tensor(sc->net, n->input[1], &ti) && ti.dtype == KILN_DTYPE_STRING);
    }
    if (!xs && !ys) return 0;
    *done = 1;
    if (!kiln__imp_net_tensor(sc->net, x, NULL))
        return kiln__err(KILN_ENOTFOUND, "%s: input '%s' is not defined before this node", lb, x);
    char a[600], b[600], c[640];
    int rc = 0;
    if (xs && ys) { /* string to string: a copy of both parts */
        for (int k = 0; k < 2 && !rc; k++) {
            const char *in1[1] = {kiln__imp_part_name(im, a, sizeof a, x, k)};
            if ((rc = kiln__imp_set_str(im, y))) break;
            const char *out1[1] = {kiln__imp_part_name(im, b, sizeof b, y, k)};
            if (!kiln_network_add_layer(sc->net, "ai.onnx::Identity", 1, NULL, 1, in1, 1, out1))
                rc = kiln__err_prefix(KILN_EINTERNAL, "%s", lb);
        }
    } else if (ys) {
        if ((rc = kiln__imp_set_str(im, y))) return rc;
        snprintf(c, sizeof c, "%s:bytes#size", y);
        const char *in1[1] = {x}, *out3[3] = {y, kiln__imp_part_name(im, b, sizeof b, y, 1), c};
        if (!kiln_network_add_layer(sc->net, "kiln::cast_to_string", 1, NULL, 1, in1, 3, out3))
            rc = kiln__err_prefix(KILN_EINTERNAL, "%s", lb);
    } else {
        const char *in3[3] = {x, kiln__imp_part_name(im, a, sizeof a, x, 1), like ? n->input[1] : NULL}, *out1[1] = {y};
        kiln_layer *l = kiln_network_add_layer(sc->net, "kiln::cast_from_string", 1, NULL, like ? 3 : 2, in3, 1, out1);
        if (!l) rc = kiln__err_prefix(KILN_EINTERNAL, "%s", lb);
        else if (cast) rc = kiln_layer_set_int(l, "to", to);
    }
    return rc ? kiln__err_prefix(rc, "%s", lb) : 0;
}
