/*
 * import.c — ONNX ModelProto -> kiln_network.
 *
 * One pass over the whole model (subgraphs included) first resolves every
 * node to a registered op, so that a model with several unsupported nodes
 * fails with one message listing all of them.  The second pass builds the
 * network: initializers and Constant nodes become constants, graph inputs
 * become inputs (dim_param -> named symbolic dims), nodes become layers
 * with attributes converted to the op's schema types.
 *
 * Subgraphs (GRAPH attributes) are imported recursively.  Names a subgraph
 * uses without defining (outer scope) are resolved in the enclosing
 * network: constants are copied into the subgraph; anything else becomes an
 * extra input of the subgraph network and, in the same order, an extra
 * trailing input of the layer (see onnx.h).  For If, whose ONNX branches
 * have no inputs, the branch networks get a leading placeholder input for
 * the condition so that branch inputs line up 1:1 with the layer's inputs
 * (kiln_shape_inline binds them in order).
 */
#include "onnx_int.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ string set */

typedef struct strset {
    char **keys;      /* insertion order */
    int n, cap;
    int *slots;       /* open addressing: index+1, 0 = empty */
    int nslots;
} strset;

static uint64_t str_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static void strset_free(strset *s) {
    for (int i = 0; i < s->n; i++) kiln__free(s->keys[i]);
    kiln__free(s->keys);
    kiln__free(s->slots);
    memset(s, 0, sizeof *s);
}

static int strset_has(const strset *s, const char *k) {
    if (!s->nslots) return 0;
    for (uint64_t h = str_hash(k) & (uint64_t)(s->nslots - 1);; h = (h + 1) & (uint64_t)(s->nslots - 1)) {
        int v = s->slots[h];
        if (!v) return 0;
        if (!strcmp(s->keys[v - 1], k)) return 1;
    }
}

/* 1 added, 0 present, <0 error. */
static int strset_add(strset *s, const char *k) {
    if (strset_has(s, k)) return 0;
    if (s->n + 1 > s->nslots / 2) {
        int ns = s->nslots ? s->nslots * 2 : 64;
        int *sl = kiln__calloc((size_t)ns, sizeof *sl);
        if (!sl) return kiln__err(KILN_ENOMEM, "out of memory");
        kiln__free(s->slots);
        s->slots = sl;
        s->nslots = ns;
        for (int i = 0; i < s->n; i++) {
            uint64_t h = str_hash(s->keys[i]) & (uint64_t)(ns - 1);
            while (sl[h]) h = (h + 1) & (uint64_t)(ns - 1);
            sl[h] = i + 1;
        }
    }
    if (s->n == s->cap) {
        int nc = s->cap ? s->cap * 2 : 16;
        char **k2 = kiln__realloc(s->keys, (size_t)nc * sizeof *k2);
        if (!k2) return kiln__err(KILN_ENOMEM, "out of memory");
        s->keys = k2;
        s->cap = nc;
    }
    char *d = kiln__strdup(k);
    if (!d) return kiln__err(KILN_ENOMEM, "out of memory");
    s->keys[s->n++] = d;
    uint64_t h = str_hash(k) & (uint64_t)(s->nslots - 1);
    while (s->slots[h]) h = (h + 1) & (uint64_t)(s->nslots - 1);
    s->slots[h] = s->n;
    return 1;
}

/* ------------------------------------------------------------ growing text */

typedef struct text {
    char *s;
    size_t len, cap;
} text;

static void text_add(text *t, const char *fmt, ...) KILN_PRINTF(2, 3);
static void text_add(text *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char tmp[1024];
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof tmp) n = sizeof tmp - 1;
    if (t->len + (size_t)n + 1 > t->cap) {
        size_t nc = (t->cap ? t->cap * 2 : 256) + (size_t)n;
        char *s = kiln__realloc(t->s, nc);
        if (!s) return;
        t->s = s;
        t->cap = nc;
    }
    memcpy(t->s + t->len, tmp, (size_t)n + 1);
    t->len += (size_t)n;
}

/* ------------------------------------------------------------ importer state */

typedef struct opset {
    const char *domain;   /* "" for ai.onnx */
    int64_t version;
} opset;

typedef struct imp {
    const char *base_dir;
    const kiln_onnx_options *opt;
    opset *opsets;
    int nopsets;
    text unsupported;
    int nunsupported;
    int layer_seq;
    int verbose;
    int pad_out;      /* outputs to add to the next imported subgraph */
    /* Types for the next imported subgraph's inputs that the model leaves
     * untyped (Loop bodies: iteration number, condition, carried values). */
    const struct extra *in_hints;
    int nhints;
    /* Sequence / optional values (see "Sequences" below): names whose
     * value travels as 2 tensors (data, :shapes) or 3 (+ :present). */
    strset seq2, seq3;
    /* String tensors: `s` (U8 bytes) and `s:lens` (I64 lengths, the
     * tensor's shape); also in seq2 (two parts). */
    strset str2;
} imp;

typedef struct scope {
    const struct scope *parent;
    kiln_network *net;
    const Onnx__GraphProto *g;
} scope;

static const char *canon_domain(const char *d) {
    if (!d || !strcmp(d, "ai.onnx")) return "";
    return d;
}

static int64_t opset_of(const imp *im, const char *domain) {
    domain = canon_domain(domain);
    for (int i = 0; i < im->nopsets; i++)
        if (!strcmp(canon_domain(im->opsets[i].domain), domain)) return im->opsets[i].version;
    return -1;
}

static const char *node_label(const Onnx__NodeProto *n, char *buf, size_t size) {
    if (n->name && n->name[0]) snprintf(buf, size, "node '%s' (%s)", n->name, n->op_type ? n->op_type : "?");
    else snprintf(buf, size, "node %s writing '%s'", n->op_type ? n->op_type : "?",
                  n->n_output && n->output[0] ? n->output[0] : "?");
    return buf;
}

static const Onnx__AttributeProto *find_attr(const Onnx__NodeProto *n, const char *name) {
    for (size_t i = 0; i < n->n_attribute; i++)
        if (n->attribute[i]->name && !strcmp(n->attribute[i]->name, name)) return n->attribute[i];
    return NULL;
}

/* String value of an attribute (STRING), copied into buf; 0 if absent/not a string. */
static int attr_string(const Onnx__AttributeProto *a, char *buf, size_t size) {
    if (!a || !a->has_s) return 0;
    size_t n = a->s.len < size - 1 ? a->s.len : size - 1;
    memcpy(buf, a->s.data, n);
    buf[n] = 0;
    return 1;
}

static int is_constant_node(const Onnx__NodeProto *n) {
    return n->op_type && !strcmp(n->op_type, "Constant") && !canon_domain(n->domain)[0];
}

/* Resolve the op of a node per DESIGN.md "ONNX mapping".  On failure returns
 * NULL and writes the reason into why. */
static const kiln__op *resolve_op(const imp *im, const Onnx__NodeProto *n, char *why, size_t wsz) {
    const char *op_type = n->op_type ? n->op_type : "";
    const char *domain = canon_domain(n->domain);
    const Onnx__AttributeProto *pns = find_attr(n, "plugin_namespace");
    const Onnx__AttributeProto *pver = find_attr(n, "plugin_version");
    int64_t pv = pver && pver->has_i ? pver->i : -1;
    char ns[256];
    if (pns) {
        if (!attr_string(pns, ns, sizeof ns) || !ns[0]) {
            snprintf(why, wsz, "attribute plugin_namespace is not a non-empty string");
            return NULL;
        }
        int ver = pv > 0 && pv <= INT_MAX ? (int)pv : 1;
        const kiln__op *op = kiln__registry_find(ns, op_type, ver);
        if (!op) {
            char vers[256];
            kiln__registry_versions(ns, op_type, vers, sizeof vers);
            snprintf(why, wsz, "plugin %s::%s version %d is not registered (registered versions: %s; "
                     "load its plugin library)", ns, op_type, ver, vers[0] ? vers : "none");
        }
        return op;
    }
    int64_t opv = opset_of(im, domain);
    const kiln__op *op = NULL;
    if (!domain[0] || !strcmp(domain, "ai.onnx.ml")) {
        const char *bns = domain[0] ? "ai.onnx.ml" : "ai.onnx";
        int64_t v = opv > 0 ? opv : 1;
        op = kiln__registry_resolve(bns, op_type, v > INT_MAX ? INT_MAX : (int)v);
        if (op) return op;
        char vers[256];
        kiln__registry_versions(bns, op_type, vers, sizeof vers);
        if (vers[0]) snprintf(why, wsz, "no built-in %s::%s at version <= %lld (registered: %s)", bns,
                              op_type, (long long)v, vers);
        else snprintf(why, wsz, "no built-in op %s::%s", bns, op_type);
        return NULL;
    }
    int64_t v = pv > 0 ? pv : opv > 0 ? opv : 1;
    op = kiln__registry_resolve(domain, op_type, v > INT_MAX ? INT_MAX : (int)v);
    if (!op) {
        char vers[256];
        kiln__registry_versions(domain, op_type, vers, sizeof vers);
        snprintf(why, wsz, "no op %s::%s at version <= %lld (registered: %s; load its plugin library "
                 "or set plugin_namespace)", domain, op_type, (long long)v, vers[0] ? vers : "none");
    }
    return op;
}

/* Pass 1: list every node (subgraphs included) that maps to no op. */
static int is_lowered_node(const Onnx__NodeProto *n);

static void scan_unsupported(imp *im, const Onnx__GraphProto *g, int depth) {
    for (size_t i = 0; i < g->n_node; i++) {
        const Onnx__NodeProto *n = g->node[i];
        if (!is_constant_node(n) && !is_lowered_node(n)) {
            char why[768];
            if (!resolve_op(im, n, why, sizeof why)) {
                const char *dom = n->domain && n->domain[0] ? n->domain : "ai.onnx";
                int64_t ov = opset_of(im, canon_domain(n->domain));
                text_add(&im->unsupported, "\n  node '%s' op_type '%s' domain '%s' opset %lld: %s",
                         n->name && n->name[0] ? n->name : "(unnamed)", n->op_type ? n->op_type : "",
                         dom, (long long)ov, why);
                im->nunsupported++;
            }
        }
        if (depth < 32)
            for (size_t j = 0; j < n->n_attribute; j++) {
                const Onnx__AttributeProto *a = n->attribute[j];
                if (a->g) scan_unsupported(im, a->g, depth + 1);
                for (size_t k = 0; k < a->n_graphs; k++) scan_unsupported(im, a->graphs[k], depth + 1);
            }
    }
}

/* ------------------------------------------------------------ outer scope */

/* Names g (and its nested subgraphs) uses but does not define, in order of
 * first use. */
static int free_names(const Onnx__GraphProto *g, strset *out, int depth) {
    if (depth > 32) return kiln__err(KILN_EFORMAT, "subgraphs nested more than 32 deep");
    strset def = {0};
    int rc = 0;
    for (size_t i = 0; i < g->n_input && !rc; i++)
        if (g->input[i]->name) rc = strset_add(&def, g->input[i]->name) < 0;
    for (size_t i = 0; i < g->n_initializer && !rc; i++)
        if (g->initializer[i]->name) rc = strset_add(&def, g->initializer[i]->name) < 0;
    for (size_t i = 0; i < g->n_node && !rc; i++)
        for (size_t j = 0; j < g->node[i]->n_output && !rc; j++)
            if (g->node[i]->output[j][0]) rc = strset_add(&def, g->node[i]->output[j]) < 0;
    for (size_t i = 0; i < g->n_node && !rc; i++) {
        const Onnx__NodeProto *n = g->node[i];
        for (size_t j = 0; j < n->n_input && !rc; j++)
            if (n->input[j][0] && !strset_has(&def, n->input[j])) rc = strset_add(out, n->input[j]) < 0;
        for (size_t j = 0; j < n->n_attribute && !rc; j++) {
            const Onnx__AttributeProto *a = n->attribute[j];
            strset inner = {0};
            if (a->g) rc = free_names(a->g, &inner, depth + 1);
            for (size_t k = 0; k < a->n_graphs && !rc; k++) rc = free_names(a->graphs[k], &inner, depth + 1);
            for (int k = 0; k < inner.n && !rc; k++)
                if (!strset_has(&def, inner.keys[k])) rc = strset_add(out, inner.keys[k]) < 0;
            strset_free(&inner);
        }
    }
    for (size_t i = 0; i < g->n_output && !rc; i++) {
        const char *nm = g->output[i]->name;
        if (nm && nm[0] && !strset_has(&def, nm)) rc = strset_add(out, nm) < 0;
    }
    strset_free(&def);
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
static int value_type(const Onnx__ValueInfoProto *vi, const char *what, kiln_dtype *dt, int *ndim,
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

static int is_lowered_node(const Onnx__NodeProto *n) {
    return is_onnx_domain(n) && n->op_type && !strcmp(n->op_type, "Optional");
}

/* 1: a tensor; 2: a sequence of tensors or an optional tensor; 3: an
 * optional sequence; 0: anything else (map, sparse, nested).  *dt / *rank
 * (-1: not declared) describe the tensors. */
static int type_parts(const Onnx__TypeProto *tp, kiln_dtype *dt, int *rank) {
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

static int parts_of(const imp *im, const char *name) {
    return strset_has(&im->seq3, name) ? 3 : strset_has(&im->seq2, name) ? 2 : 1;
}

static int is_str(const imp *im, const char *name) { return strset_has(&im->str2, name); }

static int set_str(imp *im, const char *name) {
    if (strset_add(&im->str2, name) < 0 || strset_add(&im->seq2, name) < 0) return KILN_ENOMEM;
    return 0;
}

static int set_parts(imp *im, const char *name, int parts) {
    if (parts < 2) return 0;
    return strset_add(parts == 3 ? &im->seq3 : &im->seq2, name) < 0 ? KILN_ENOMEM : 0;
}

/* Ops that take sequence parts as inputs (src/ops/sequence/sequence.c). */
static int takes_sequences(const char *op_type) {
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
    int p = type_parts(g->output[i]->type, &dt, &rank);
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
                    if (n->n_input && n->input[0][0]) return parts_of(im, n->input[0]) > 1 ? 3 : 2;
                    return 2;
                }
                return 1;
            }
    }
    return 1;
}

/* Output i of node n is a string tensor (StringNormalizer; If whose
 * branch declares a string output). */
static int out_is_str(const Onnx__NodeProto *n, size_t i) {
    if (!is_onnx_domain(n)) return 0;
    if (!strcmp(n->op_type, "StringNormalizer")) return i == 0;
    if (strcmp(n->op_type, "If")) return 0;
    const Onnx__AttributeProto *a = find_attr(n, "then_branch");
    if (!a || !a->g || i >= a->g->n_output) return 0;
    kiln_dtype dt;
    int rank;
    return type_parts(a->g->output[i]->type, &dt, &rank) == 1 && dt == KILN_DTYPE_STRING;
}

/* Parts of output i of node n. */
static int out_parts(const imp *im, const Onnx__NodeProto *n, size_t i) {
    if (!is_onnx_domain(n)) return 1;
    const char *t = n->op_type;
    if (!strcmp(t, "SequenceEmpty") || !strcmp(t, "SequenceConstruct") || !strcmp(t, "SequenceInsert") ||
        !strcmp(t, "SequenceErase") || !strcmp(t, "SplitToSequence"))
        return i == 0 ? 2 : 1;
    if (!strcmp(t, "SequenceMap")) return 2;
    if (!strcmp(t, "StringNormalizer")) return i == 0 ? 2 : 1;
    if (!strcmp(t, "Loop")) /* final carried values have the kind of their initial values */
        return i + 2 < n->n_input && n->input[i + 2][0] ? parts_of(im, n->input[i + 2]) : 1;
    if (!strcmp(t, "OptionalGetElement")) return n->n_input && parts_of(im, n->input[0]) == 3 ? 2 : 1;
    if (!strcmp(t, "If")) {
        const Onnx__AttributeProto *a = find_attr(n, "then_branch");
        return graph_out_parts(im, a ? a->g : NULL, i);
    }
    return 1;
}

/* The name of part k of value `name`. */
static const char *part_name(const imp *im, char *buf, size_t size, const char *name, int k) {
    snprintf(buf, size, "%s%s", name, k == 1 && strset_has(&im->str2, name) ? ":lens" : part_suffix[k]);
    return buf;
}

/* The value (shape = 0) or shape (1) the options give for `name`. */
static const kiln_onnx_value *given_value(const imp *im, const char *name, int shape) {
    if (!im->opt) return NULL;
    const kiln_onnx_value *v = shape ? im->opt->shapes : im->opt->values;
    int n = shape ? im->opt->nshapes : im->opt->nvalues;
    for (int k = 0; k < n; k++)
        if (v[k].name && !strcmp(v[k].name, name)) return &v[k];
    return NULL;
}

/* Identity and Optional on sequence values: lowered to layers here.
 * *done = 1 when n was handled. */
static int lower_seq_node(imp *im, const Onnx__NodeProto *n, const scope *sc, const char *lb, int *done) {
    *done = 0;
    if (!is_onnx_domain(n) || n->n_output < 1 || !n->output[0][0]) return 0;
    const char *t = n->op_type;
    int isid = !strcmp(t, "Identity"), isopt = !strcmp(t, "Optional");
    if (!isid && !isopt) return 0;
    const char *x = n->n_input && n->input[0][0] ? n->input[0] : NULL;
    int px = x ? parts_of(im, x) : 0;
    if (isid && px < 2) return 0;
    *done = 1;
    if (x && kiln__network_find_tensor(sc->net, x) < 0)
        return kiln__err(KILN_ENOTFOUND, "%s: input '%s' is not defined before this node", lb, x);
    const char *y = n->output[0];
    char a[600], b[600];
    int rc = 0, py;
    if (x && (isid || px == 2)) {
        /* Identity of every part (Optional of a sequence: + present) */
        for (int k = 0; k < px && !rc; k++) {
            const char *in1[1] = {part_name(im, a, sizeof a, x, k)}, *out1[1] = {part_name(im, b, sizeof b, y, k)};
            if (!kiln_network_add_layer(sc->net, "ai.onnx::Identity", 1, NULL, 1, in1, 1, out1))
                rc = kiln__err_prefix(KILN_EINTERNAL, "%s", lb);
        }
        py = isid ? px : 3;
    } else if (x) {
        /* Optional of a tensor: a sequence of one */
        const char *in1[1] = {x}, *out2[2] = {y, part_name(im, b, sizeof b, y, 1)};
        if (!kiln_network_add_layer(sc->net, "ai.onnx::SequenceConstruct", 11, NULL, 1, in1, 2, out2))
            rc = kiln__err_prefix(KILN_EINTERNAL, "%s", lb);
        py = 2;
    } else {
        /* Empty optional of the `type` attribute's type */
        const Onnx__AttributeProto *ta = find_attr(n, "type");
        kiln_dtype dt;
        int rank;
        int p = ta && ta->tp ? type_parts(ta->tp, &dt, &rank) : 0;
        if (p < 1 || p > 2 || dt == KILN_DTYPE_UNDEFINED)
            return kiln__err(KILN_EUNSUPPORTED, "%s: an empty Optional needs a `type` attribute of a tensor or a "
                             "sequence of tensors", lb);
        const char *out2[2] = {y, part_name(im, b, sizeof b, y, 1)};
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
        const char *in1[1] = {cn}, *out1[1] = {part_name(im, b, sizeof b, y, 2)};
        kiln_layer *l = rc ? NULL : kiln_network_add_layer(sc->net, "kiln::reformat", 1, NULL, 1, in1, 1, out1);
        if (!rc && !l) rc = kiln__err_prefix(KILN_EINTERNAL, "%s", lb);
        if (!rc) rc = kiln_layer_set_int(l, "to_dtype", KILN_DTYPE_BOOL);
    }
    if (!rc && isid && x && is_str(im, x)) rc = set_str(im, y);
    if (!rc) rc = set_parts(im, y, py);
    return rc ? kiln__err_prefix(rc, "%s", lb) : 0;
}

/* Cast / CastLike to or from STRING: kiln::cast_to_string /
 * cast_from_string on the packed form.  *done = 1 when n was handled. */
static int lower_str_node(imp *im, const Onnx__NodeProto *n, const scope *sc, const char *lb, int *done) {
    *done = 0;
    if (!is_onnx_domain(n) || n->n_output < 1 || !n->output[0][0] || n->n_input < 1 || !n->input[0][0]) return 0;
    int cast = !strcmp(n->op_type, "Cast"), like = !strcmp(n->op_type, "CastLike");
    if (!cast && !like) return 0;
    const char *x = n->input[0], *y = n->output[0];
    const Onnx__AttributeProto *ta = find_attr(n, "to");
    int64_t to = cast && ta && ta->has_i ? ta->i : 0;
    int xs = is_str(im, x), ys;
    if (cast) {
        ys = to == KILN_DTYPE_STRING;
    } else {
        if (n->n_input < 2 || !n->input[1][0]) return 0;
        int li = kiln__network_find_tensor(sc->net, n->input[1]);
        ys = is_str(im, n->input[1]) || (li >= 0 && sc->net->tensors[li].dtype == KILN_DTYPE_STRING);
    }
    if (!xs && !ys) return 0;
    *done = 1;
    if (kiln__network_find_tensor(sc->net, x) < 0)
        return kiln__err(KILN_ENOTFOUND, "%s: input '%s' is not defined before this node", lb, x);
    char a[600], b[600], c[640];
    int rc = 0;
    if (xs && ys) { /* string to string: a copy of both parts */
        for (int k = 0; k < 2 && !rc; k++) {
            const char *in1[1] = {part_name(im, a, sizeof a, x, k)};
            if ((rc = set_str(im, y))) break;
            const char *out1[1] = {part_name(im, b, sizeof b, y, k)};
            if (!kiln_network_add_layer(sc->net, "ai.onnx::Identity", 1, NULL, 1, in1, 1, out1))
                rc = kiln__err_prefix(KILN_EINTERNAL, "%s", lb);
        }
    } else if (ys) {
        if ((rc = set_str(im, y))) return rc;
        snprintf(c, sizeof c, "%s:bytes#size", y);
        const char *in1[1] = {x}, *out3[3] = {y, part_name(im, b, sizeof b, y, 1), c};
        if (!kiln_network_add_layer(sc->net, "kiln::cast_to_string", 1, NULL, 1, in1, 3, out3))
            rc = kiln__err_prefix(KILN_EINTERNAL, "%s", lb);
    } else {
        const char *in3[3] = {x, part_name(im, a, sizeof a, x, 1), like ? n->input[1] : NULL}, *out1[1] = {y};
        kiln_layer *l = kiln_network_add_layer(sc->net, "kiln::cast_from_string", 1, NULL, like ? 3 : 2, in3, 1, out1);
        if (!l) rc = kiln__err_prefix(KILN_EINTERNAL, "%s", lb);
        else if (cast) rc = kiln_layer_set_int(l, "to", to);
    }
    return rc ? kiln__err_prefix(rc, "%s", lb) : 0;
}

/* Declared dims of a tensor value info (any element type). */
static int value_type_dims(const Onnx__ValueInfoProto *vi, int *nd, int64_t *dims, const char **names) {
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

/* ------------------------------------------------------------ constants */

static int add_tensor_const(kiln_network *net, const char *name, const kiln__onnx_tensor *t) {
    return kiln_network_add_constant(net, name, t->dtype, t->ndim, t->dims, t->data);
}

/* Constant node -> network constant. */
/* A string constant: `name` (U8 bytes) and `name:lens` (I64, its shape). */
static int add_string_const(imp *im, kiln_network *net, const char *name, int ndim, const int64_t *dims,
                            size_t nstr, const ProtobufCBinaryData *strs, const char *lb) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= dims[i];
    if (ndim > KILN_MAX_DIMS || (uint64_t)n != (uint64_t)nstr)
        return kiln__err(KILN_EFORMAT, "%s: string tensor dims hold %lld strings, it has %zu", lb, (long long)n, nstr);
    size_t total = 0;
    for (size_t i = 0; i < nstr; i++) total += strs[i].len;
    uint8_t *b = kiln__malloc(total ? total : 1);
    int64_t *lens = kiln__malloc(nstr ? nstr * sizeof *lens : 1);
    int rc = !b || !lens ? kiln__err(KILN_ENOMEM, "out of memory") : 0;
    for (size_t i = 0, off = 0; !rc && i < nstr; i++) {
        if (strs[i].len) memcpy(b + off, strs[i].data, strs[i].len);
        off += strs[i].len;
        lens[i] = (int64_t)strs[i].len;
    }
    int64_t bd[1] = {(int64_t)total};
    char pn[600];
    if (!rc) rc = set_str(im, name);
    if (!rc) rc = kiln_network_add_constant(net, name, KILN_DTYPE_U8, 1, bd, b);
    if (!rc) rc = kiln_network_add_constant(net, part_name(im, pn, sizeof pn, name, 1), KILN_DTYPE_I64, ndim, dims, lens);
    kiln__free(b);
    kiln__free(lens);
    return rc;
}

static int is_string_tensor(const Onnx__TensorProto *t) {
    return t && t->has_data_type && t->data_type == KILN_DTYPE_STRING;
}

static int import_constant(imp *im, kiln_network *net, const Onnx__NodeProto *n) {
    char lb[512];
    node_label(n, lb, sizeof lb);
    if (n->n_output != 1 || !n->output[0][0])
        return kiln__err(KILN_EFORMAT, "%s: Constant needs exactly one output", lb);
    if (n->n_attribute != 1)
        return kiln__err(KILN_EFORMAT, "%s: Constant needs exactly one value attribute (has %zu)", lb,
                         n->n_attribute);
    const Onnx__AttributeProto *a = n->attribute[0];
    const char *an = a->name ? a->name : "";
    const char *out = n->output[0];
    int rc;
    if (!strcmp(an, "value") && is_string_tensor(a->t)) {
        if (a->t->n_dims > KILN_MAX_DIMS) return kiln__err(KILN_EUNSUPPORTED, "%s: rank %zu", lb, a->t->n_dims);
        rc = add_string_const(im, net, out, (int)a->t->n_dims, a->t->dims, a->t->n_string_data, a->t->string_data, lb);
    } else if (!strcmp(an, "value_string") && a->has_s) {
        rc = add_string_const(im, net, out, 0, NULL, 1, &a->s, lb);
    } else if (!strcmp(an, "value_strings")) {
        int64_t d = (int64_t)a->n_strings;
        rc = add_string_const(im, net, out, 1, &d, a->n_strings, a->strings, lb);
    } else if (!strcmp(an, "value") && a->t) {
        kiln__onnx_tensor t;
        rc = kiln__onnx_tensor_decode(a->t, im->base_dir, lb, &t);
        if (rc) return rc;
        rc = add_tensor_const(net, out, &t);
        kiln__onnx_tensor_free(&t);
    } else if (!strcmp(an, "value_float") && a->has_f) {
        rc = kiln_network_add_constant(net, out, KILN_DTYPE_F32, 0, NULL, &a->f);
    } else if (!strcmp(an, "value_int") && a->has_i) {
        rc = kiln_network_add_constant(net, out, KILN_DTYPE_I64, 0, NULL, &a->i);
    } else if (!strcmp(an, "value_floats")) {
        int64_t d = (int64_t)a->n_floats;
        float dummy = 0;
        rc = kiln_network_add_constant(net, out, KILN_DTYPE_F32, 1, &d, a->n_floats ? (const void *)a->floats : &dummy);
    } else if (!strcmp(an, "value_ints")) {
        int64_t d = (int64_t)a->n_ints;
        int64_t dummy = 0;
        rc = kiln_network_add_constant(net, out, KILN_DTYPE_I64, 1, &d, a->n_ints ? (const void *)a->ints : &dummy);
    } else if (!strcmp(an, "sparse_value") && a->sparse_tensor) {
        kiln__onnx_tensor t;
        rc = kiln__onnx_sparse_decode(a->sparse_tensor, im->base_dir, lb, &t);
        if (rc) return rc;
        rc = add_tensor_const(net, out, &t);
        kiln__onnx_tensor_free(&t);
    } else {
        return kiln__err(KILN_EFORMAT, "%s: Constant attribute '%s' is unknown or has no value", lb, an);
    }
    if (rc) return kiln__err_prefix(rc, "%s", lb);
    return 0;
}

/* ------------------------------------------------------------ graphs */

typedef struct extra {
    const char *name;
    kiln_dtype dtype;
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
    const char *dim_names[KILN_MAX_DIMS];
} extra;

static int import_graph(imp *im, const Onnx__GraphProto *g, const scope *parent,
                        const extra *lead, int nlead, const extra *extras, int nextra,
                        const strset *copy_consts, const kiln_network *outer,
                        kiln_network **out, int depth);

static int attr_kind(const Onnx__AttributeProto *a) {
    if (a->has_type && a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED) return (int)a->type;
    /* Old files omit `type`: infer it from the field that is set. */
    if (a->has_f) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
    if (a->has_i) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    if (a->has_s) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
    if (a->t) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
    if (a->g) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH;
    if (a->n_floats) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
    if (a->n_ints) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    if (a->n_strings) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS;
    if (a->n_graphs) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS;
    return 0;
}

static const char *onnx_attr_type_name(int k) {
    switch (k) {
    case 1: return "FLOAT";
    case 2: return "INT";
    case 3: return "STRING";
    case 4: return "TENSOR";
    case 5: return "GRAPH";
    case 6: return "FLOATS";
    case 7: return "INTS";
    case 8: return "STRINGS";
    case 9: return "TENSORS";
    case 10: return "GRAPHS";
    case 11: return "SPARSE_TENSOR";
    case 12: return "SPARSE_TENSORS";
    case 13: return "TYPE_PROTO";
    case 14: return "TYPE_PROTOS";
    default: return "UNDEFINED";
    }
}

static const char *schema_type_name(kiln_attr_type t) {
    switch (t) {
    case KILN_ATTR_INT: return "int";
    case KILN_ATTR_FLOAT: return "float";
    case KILN_ATTR_STRING: return "string";
    case KILN_ATTR_BOOL: return "bool";
    case KILN_ATTR_BYTES: return "bytes";
    case KILN_ATTR_ARRAY: return "array";
    case KILN_ATTR_TENSOR: return "tensor";
    case KILN_ATTR_GRAPH: return "graph";
    }
    return "?";
}

/* Set one ONNX attribute on a layer, converted to the schema type. */
static int set_attr(imp *im, kiln_layer *l, const kiln__op *op, const char *lb,
                    const Onnx__AttributeProto *a, const scope *sc, const extra *lead, int nlead,
                    const extra *extras, int nextra, const strset *copy, int depth) {
    const char *an = a->name ? a->name : "";
    const kiln_attr_def *def = NULL;
    for (int i = 0; i < op->nattrs; i++)
        if (!strcmp(op->attr_defs[i].name, an)) def = &op->attr_defs[i];
    if (!def)
        return kiln__err(KILN_EATTR, "%s: attribute '%s' is not in the schema of %s::%s v%d", lb, an,
                         op->ns, op->name, op->version);
    if (a->ref_attr_name && a->ref_attr_name[0])
        return kiln__err(KILN_EUNSUPPORTED, "%s: attribute '%s' refers to a function attribute", lb, an);
    int k = attr_kind(a);
    int rc = KILN_EATTR;
    int done = 1;
    switch (k) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT:
        if (def->type == KILN_ATTR_INT) rc = kiln_layer_set_int(l, an, a->i);
        else if (def->type == KILN_ATTR_BOOL) rc = kiln_layer_set_bool(l, an, a->i != 0);
        else if (def->type == KILN_ATTR_FLOAT) rc = kiln_layer_set_float(l, an, (double)a->i);
        else if (def->type == KILN_ATTR_ARRAY) rc = kiln_layer_set_ints(l, an, &a->i, 1);
        else done = 0;
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT:
        if (def->type == KILN_ATTR_FLOAT) rc = kiln_layer_set_float(l, an, a->f);
        else if (def->type == KILN_ATTR_ARRAY) rc = kiln_layer_set_floats(l, an, &a->f, 1);
        else done = 0;
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING: {
        if (def->type == KILN_ATTR_BYTES) {
            rc = kiln_layer_set_bytes(l, an, a->s.data, a->s.len);
        } else if (def->type == KILN_ATTR_STRING) {
            if (memchr(a->s.data, 0, a->s.len))
                return kiln__err(KILN_EATTR, "%s: string attribute '%s' contains a NUL byte", lb, an);
            char *s = kiln__malloc(a->s.len + 1);
            if (!s) return kiln__err(KILN_ENOMEM, "out of memory");
            if (a->s.len) memcpy(s, a->s.data, a->s.len);
            s[a->s.len] = 0;
            rc = kiln_layer_set_string(l, an, s);
            kiln__free(s);
        } else {
            done = 0;
        }
        break;
    }
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS: {
        int64_t dummy = 0;
        if (def->type == KILN_ATTR_ARRAY)
            rc = kiln_layer_set_ints(l, an, a->n_ints ? a->ints : &dummy, (int64_t)a->n_ints);
        else done = 0;
        break;
    }
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS: {
        float dummy = 0;
        if (def->type == KILN_ATTR_ARRAY)
            rc = kiln_layer_set_floats(l, an, a->n_floats ? a->floats : &dummy, (int64_t)a->n_floats);
        else done = 0;
        break;
    }
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS: {
        /* No string arrays in kiln schemas: joined with ',' into a STRING
         * (LSTM/GRU/RNN `activations`), or into BYTES with a NUL after each
         * string (StringNormalizer `stopwords`). */
        if (def->type != KILN_ATTR_STRING && def->type != KILN_ATTR_BYTES) {
            done = 0;
            break;
        }
        size_t len = 1;
        for (size_t i = 0; i < a->n_strings; i++) len += a->strings[i].len + 1;
        char *s = kiln__malloc(len);
        if (!s) return kiln__err(KILN_ENOMEM, "out of memory");
        size_t p = 0;
        if (def->type == KILN_ATTR_BYTES) {
            for (size_t i = 0; i < a->n_strings; i++) {
                if (a->strings[i].len) memcpy(s + p, a->strings[i].data, a->strings[i].len);
                p += a->strings[i].len;
                s[p++] = 0;
            }
            rc = kiln_layer_set_bytes(l, an, s, p);
            kiln__free(s);
            break;
        }
        for (size_t i = 0; i < a->n_strings; i++) {
            if (i) s[p++] = ',';
            if (a->strings[i].len) memcpy(s + p, a->strings[i].data, a->strings[i].len);
            p += a->strings[i].len;
        }
        s[p] = 0;
        if (strlen(s) != p) {
            kiln__free(s);
            return kiln__err(KILN_EATTR, "%s: string attribute '%s' contains a NUL byte", lb, an);
        }
        rc = kiln_layer_set_string(l, an, s);
        kiln__free(s);
        break;
    }
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR: {
        if (def->type != KILN_ATTR_TENSOR && def->type != KILN_ATTR_ARRAY) {
            done = 0;
            break;
        }
        if (!a->t) return kiln__err(KILN_EFORMAT, "%s: tensor attribute '%s' has no tensor", lb, an);
        char where[640];
        snprintf(where, sizeof where, "%s attribute '%s'", lb, an);
        kiln__onnx_tensor t;
        rc = kiln__onnx_tensor_decode(a->t, im->base_dir, where, &t);
        if (rc) return rc;
        if (def->type == KILN_ATTR_TENSOR) rc = kiln_layer_set_tensor(l, an, t.dtype, t.ndim, t.dims, t.data);
        else rc = kiln_layer_set_array(l, an, t.dtype, (int64_t)(t.bytes / kiln_dtype_size(t.dtype)), t.data);
        kiln__onnx_tensor_free(&t);
        break;
    }
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH: {
        if (def->type != KILN_ATTR_GRAPH) {
            done = 0;
            break;
        }
        if (!a->g) return kiln__err(KILN_EFORMAT, "%s: graph attribute '%s' has no graph", lb, an);
        kiln_network *sub = NULL;
        rc = import_graph(im, a->g, sc, lead, nlead, extras, nextra, copy, sc->net, &sub, depth + 1);
        if (rc) return kiln__err_prefix(rc, "%s: subgraph '%s'", lb, an);
        rc = kiln_layer_set_graph(l, an, sub);
        break;
    }
    default:
        return kiln__err(KILN_EUNSUPPORTED, "%s: attribute '%s' has ONNX type %s, which kiln does not "
                         "support", lb, an, onnx_attr_type_name(k));
    }
    if (!done)
        return kiln__err(KILN_EATTR, "%s: attribute '%s' is ONNX %s but %s::%s v%d expects %s", lb, an,
                         onnx_attr_type_name(k), op->ns, op->name, op->version,
                         schema_type_name(def->type));
    if (rc) return kiln__err_prefix(rc, "%s", lb);
    return 0;
}

/* Describe an outer-scope tensor for an extra subgraph input. */
static void describe_outer(const scope *sc, const char *name, extra *e) {
    memset(e, 0, sizeof *e);
    e->name = name;
    e->dtype = KILN_DTYPE_F32;
    e->ndim = 0;
    int ti = kiln__network_find_tensor(sc->net, name);
    if (ti >= 0) {
        const kiln__ntensor *t = &sc->net->tensors[ti];
        if (t->kind == KILN__T_INPUT || t->kind == KILN__T_CONST) {
            e->dtype = t->dtype;
            e->ndim = t->ndim;
            for (int i = 0; i < t->ndim; i++) {
                e->dims[i] = t->dims[i];
                e->dim_names[i] = t->kind == KILN__T_INPUT ? t->dim_names[i] : NULL;
            }
            return;
        }
    }
    /* A layer output: its type is known only to the builder.  Use the
     * value_info if the model has one, else a dynamic-rank placeholder the
     * builder replaces by the layer input's actual description. */
    const Onnx__ValueInfoProto *vi = find_value_info(sc, name);
    kiln_dtype dt;
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    if (vi && value_type(vi, "value", &dt, &nd, dims, e->dim_names) == 0 && nd >= 0) {
        e->dtype = dt;
        e->ndim = nd;
        for (int i = 0; i < nd; i++) e->dims[i] = dims[i];
    }
}

static int add_extra_input(kiln_network *net, const extra *e) {
    return kiln_network_add_input(net, e->name, e->dtype, e->ndim, e->dims, e->dim_names);
}

/* For If: the `both` graph used when the condition is known only at run
 * time (see src/ops/controlflow/if.c): inputs as the branches'; the then- and
 * else-branch as Ifs on constant conditions; kiln::if_select per output.
 * Returns 0 with *out NULL when it cannot be made (then a runtime condition
 * stays unsupported). */
static int build_if_both(imp *im, const Onnx__NodeProto *n, const kiln__op *op, const scope *sc,
                         const extra *lead, const extra *extras, int nextra, const strset *copy, int nout,
                         int nreal, int depth, kiln_network **out) {
    *out = NULL;
    const Onnx__AttributeProto *ta = find_attr(n, "then_branch"), *ea = find_attr(n, "else_branch");
    if (!ta || !ta->g || !ea || !ea->g || nreal < 1) return 0;
    if (!kiln__registry_find("kiln", "if_select", 2)) return 0;
    int has_both = 0;
    for (int i = 0; i < op->nattrs; i++) has_both |= !strcmp(op->attr_defs[i].name, "both");
    if (!has_both) return 0;
    kiln_network *b = kiln_network_create();
    if (!b) return kiln__err(KILN_ENOMEM, "out of memory");
    int rc = add_extra_input(b, &lead[0]);
    for (int i = 0; i < nextra && !rc; i++) rc = add_extra_input(b, &extras[i]);
    for (int i = 0; copy && i < copy->n && !rc; i++) {
        int ti = kiln__network_find_tensor(sc->net, copy->keys[i]);
        if (ti < 0) continue;
        const kiln__ntensor *t = &sc->net->tensors[ti];
        rc = kiln_network_add_constant(b, t->name, t->dtype, t->ndim, t->dims, t->data);
    }
    const uint8_t tf[2] = {1, 0};
    const char *cname[2] = {"kiln.true", "kiln.false"};
    for (int k = 0; k < 2 && !rc; k++) rc = kiln_network_add_constant(b, cname[k], KILN_DTYPE_BOOL, 0, NULL, &tf[k]);
    const char **ins = kiln__calloc((size_t)(1 + nextra), sizeof *ins);
    char(*names)[48] = kiln__calloc((size_t)(2 * nout + nreal), sizeof *names);
    const char **outs = kiln__calloc((size_t)nout, sizeof *outs);
    if (!ins || !names || !outs) rc = rc ? rc : kiln__err(KILN_ENOMEM, "out of memory");
    char id[600];
    snprintf(id, sizeof id, "%s::%s", op->ns, op->name);
    for (int k = 0; k < 2 && !rc; k++) {
        ins[0] = cname[k];
        for (int i = 0; i < nextra; i++) ins[1 + i] = extras[i].name;
        for (int i = 0; i < nout; i++) {
            snprintf(names[k * nout + i], sizeof names[0], "kiln.%s_out%d", k ? "else" : "then", i);
            outs[i] = names[k * nout + i];
        }
        kiln_layer *l = kiln_network_add_layer(b, id, op->version, k ? "else" : "then", 1 + nextra, ins, nout, outs);
        if (!l) { rc = kiln__err_prefix(KILN_EINTERNAL, "If 'both' graph"); break; }
        kiln_network *sub = NULL;
        im->pad_out = nout - nreal;
        rc = import_graph(im, k ? ea->g : ta->g, sc, lead, 1, extras, nextra, copy, sc->net, &sub, depth + 1);
        im->pad_out = 0;
        if (!rc) rc = kiln_layer_set_graph(l, k ? "else_branch" : "then_branch", sub);
    }
    for (int i = 0; i < nout && !rc; i++) {
        if (i >= nreal) {
            rc = kiln_network_mark_output(b, names[i]); /* padding: unused */
            continue;
        }
        char *y = names[2 * nout + i];
        snprintf(y, sizeof names[0], "kiln.select_out%d", i);
        const char *sin[3] = {lead[0].name, names[i], names[nout + i]}, *sout[1] = {y};
        kiln_layer *l = kiln_network_add_layer(b, "kiln::if_select", 2, NULL, 3, sin, 1, sout);
        if (!l) { rc = kiln__err_prefix(KILN_EINTERNAL, "If 'both' graph"); break; }
        rc = kiln_network_mark_output(b, y);
    }
    kiln__free(ins);
    kiln__free(names);
    kiln__free(outs);
    if (rc) {
        kiln_network_free(b);
        return rc;
    }
    *out = b;
    return 0;
}

static int import_node(imp *im, const Onnx__NodeProto *n, const scope *sc, int depth) {
    char lb[512];
    node_label(n, lb, sizeof lb);
    if (!n->op_type || !n->op_type[0]) return kiln__err(KILN_EFORMAT, "%s: empty op_type", lb);
    int lowered = 0, lrc = lower_seq_node(im, n, sc, lb, &lowered);
    if (lowered || lrc) return lrc;
    lrc = lower_str_node(im, n, sc, lb, &lowered);
    if (lowered || lrc) return lrc;
    char why[768];
    const kiln__op *op = resolve_op(im, n, why, sizeof why);
    if (!op) return kiln__err(KILN_EUNSUPPORTED, "%s: %s", lb, why);
    if (im->verbose)
        kiln__log(KILN_LOG_INFO, "onnx: %s -> %s::%s v%d", lb, op->ns, op->name, op->version);

    /* Outer-scope names used by this node's subgraphs. */
    strset fn = {0}, copy = {0};
    extra *extras = NULL;
    char **xnames = NULL;
    int nxnames = 0;
    int nextra = 0, rc = 0, has_graph = 0;
    const char **ins = NULL, **outs = NULL;
    char **gen = NULL;
    int ngen = 0;
    for (size_t j = 0; j < n->n_attribute && !rc; j++) {
        const Onnx__AttributeProto *a = n->attribute[j];
        if (a->g) { rc = free_names(a->g, &fn, depth + 1); has_graph = 1; }
        for (size_t k = 0; k < a->n_graphs && !rc; k++) { rc = free_names(a->graphs[k], &fn, depth + 1); has_graph = 1; }
    }
    if (rc) goto done;
    if (fn.n) {
        /* a sequence/optional/string value passes as its parts (up to 3) */
        extras = kiln__calloc((size_t)fn.n * 3, sizeof *extras);
        xnames = kiln__calloc((size_t)fn.n * 3, sizeof *xnames);
        if (!extras || !xnames) { rc = kiln__err(KILN_ENOMEM, "out of memory"); goto done; }
    }
    for (int i = 0; i < fn.n; i++) {
        for (int k = 0, p = parts_of(im, fn.keys[i]); k < p; k++) {
            char pb[600];
            const char *key = k ? part_name(im, pb, sizeof pb, fn.keys[i], k) : fn.keys[i];
            int ti = kiln__network_find_tensor(sc->net, key);
            if (ti < 0) {
                rc = kiln__err(KILN_ENOTFOUND, "%s: a subgraph uses '%s', which no enclosing graph defines "
                               "before this node", lb, key);
                goto done;
            }
            if (k && !(key = xnames[nxnames++] = kiln__strdup(key))) { rc = KILN_ENOMEM; goto done; }
            if (sc->net->tensors[ti].kind == KILN__T_CONST) {
                if ((rc = strset_add(&copy, key)) < 0) goto done;
                rc = 0;
            } else {
                describe_outer(sc, key, &extras[nextra++]);
            }
        }
    }
    /* If: branch networks get a leading placeholder for the condition. */
    extra lead[1];
    int nlead = 0;
    char lead_name[64];
    if (has_graph && !strcmp(n->op_type, "If") && n->n_input >= 1) {
        /* A private name: a branch may also use the condition by name (then
         * it is an outer-scope value like any other). */
        describe_outer(sc, n->input[0], &lead[0]);
        snprintf(lead_name, sizeof lead_name, "kiln.if_cond#%d", im->layer_seq);
        lead[0].name = lead_name;
        nlead = 1;
    }

    /* Sequence values expand into their parts (see "sequences"). */
    int nx = 0, nreal = 0;
    for (size_t i = 0; i < n->n_input; i++) nx += n->input[i][0] ? parts_of(im, n->input[i]) : 1;
    for (size_t i = 0; i < n->n_output; i++) nreal += n->output[i][0] ? out_parts(im, n, i) : 1;
    int nin = nx + nextra;
    int nout = nreal;
    if (op->num_outputs > nout) nout = op->num_outputs;
    ins = kiln__calloc((size_t)(nin ? nin : 1), sizeof *ins);
    outs = kiln__calloc((size_t)(nout ? nout : 1), sizeof *outs);
    gen = kiln__calloc((size_t)(nin + nout + 1), sizeof *gen);
    if (!ins || !outs || !gen) { rc = kiln__err(KILN_ENOMEM, "out of memory"); goto done; }
    for (size_t i = 0, k = 0; i < n->n_input; i++) {
        const char *x = n->input[i];
        if (x[0] && kiln__network_find_tensor(sc->net, x) < 0) {
            rc = kiln__err(KILN_ENOTFOUND, "%s: input %zu '%s' is not defined before this node (no "
                           "graph input, initializer or earlier node output has that name)", lb, i, x);
            goto done;
        }
        int p = x[0] ? parts_of(im, x) : 1;
        if (p > 1 && is_str(im, x) && strcmp(n->op_type, "StringNormalizer")) {
            rc = kiln__err(KILN_EUNSUPPORTED, "%s: input %zu '%s' is a string tensor; in kiln only Cast, CastLike, "
                           "Identity and StringNormalizer take strings", lb, i, x);
            goto done;
        }
        if (p > 1 && !is_str(im, x) && !takes_sequences(n->op_type)) {
            rc = kiln__err(KILN_EUNSUPPORTED, "%s: input %zu '%s' is a sequence or optional value; in kiln only "
                           "the Sequence*/Optional* ops, ConcatFromSequence, Identity and If outputs handle "
                           "those%s", lb, i, x, !strcmp(n->op_type, "Loop") ? " (a Loop cannot carry one)" : "");
            goto done;
        }
        ins[k++] = x;
        for (int q = 1; q < p; q++) {
            char b[600];
            if (!(gen[ngen] = kiln__strdup(part_name(im, b, sizeof b, x, q)))) { rc = KILN_ENOMEM; goto done; }
            ins[k++] = gen[ngen++];
        }
    }
    for (int i = 0; i < nextra; i++) ins[nx + i] = extras[i].name;
    for (int i = 0, oi = 0; i < nout; i++) {
        int p = oi < (int)n->n_output && n->output[oi][0] ? out_parts(im, n, (size_t)oi) : 1;
        if (oi < (int)n->n_output && n->output[oi][0]) {
            outs[i] = n->output[oi];
            if (out_is_str(n, (size_t)oi) && (rc = set_str(im, n->output[oi]))) goto done;
            for (int q = 1; q < p && i + 1 < nout; q++) {
                char b[600];
                if (!(gen[ngen] = kiln__strdup(part_name(im, b, sizeof b, n->output[oi], q)))) { rc = KILN_ENOMEM; goto done; }
                outs[++i] = gen[ngen++];
            }
            if ((rc = set_parts(im, n->output[oi], p))) goto done;
            oi++;
        } else {
            oi++;
            /* Absent optional output: a private name. */
            char b[600];
            snprintf(b, sizeof b, "%s:unused_out%d#%d", n->name && n->name[0] ? n->name : n->op_type, i,
                     im->layer_seq);
            gen[ngen] = kiln__strdup(b);
            if (!gen[ngen]) { rc = kiln__err(KILN_ENOMEM, "out of memory"); goto done; }
            outs[i] = gen[ngen++];
        }
    }
    im->layer_seq++;
    char id[600];
    snprintf(id, sizeof id, "%s::%s", op->ns, op->name);
    kiln_layer *l = kiln_network_add_layer(sc->net, id, op->version,
                                           n->name && n->name[0] ? n->name : NULL, nin, ins, nout, outs);
    if (!l) { rc = kiln__err_prefix(KILN_EINVAL, "%s", lb); goto done; }
    for (size_t j = 0; j < n->n_attribute && !rc; j++) {
        const Onnx__AttributeProto *a = n->attribute[j];
        const char *an = a->name ? a->name : "";
        if (!strcmp(an, "plugin_namespace") || !strcmp(an, "plugin_version")) continue;
        if (!strcmp(an, "aot")) {
            if (!a->has_i || a->i < 0 || a->i > 1) {
                rc = kiln__err(KILN_EATTR, "%s: attribute 'aot' must be the int 0 or 1", lb);
                break;
            }
            rc = kiln_layer_set_aot(l, (int)a->i);
            if (rc) rc = kiln__err_prefix(rc, "%s", lb);
            continue;
        }
        /* The op may declare more outputs than the node has (If): the
         * subgraphs get as many outputs as the layer. */
        /* (SequenceMap's body outputs are per element, not layer outputs.) */
        im->pad_out = strcmp(n->op_type, "SequenceMap") ? nout - nreal : 0;
        extra loop_hints[KILN_MAX_IO];
        if (!strcmp(n->op_type, "Loop") && a->g) {
            /* body inputs: iteration number (i64), condition (bool), then
             * the carried values, typed like the node's inputs 2.. */
            int nh = 0;
            memset(loop_hints, 0, sizeof loop_hints);
            loop_hints[nh].dtype = KILN_DTYPE_I64;
            loop_hints[nh++].ndim = 0;
            loop_hints[nh].dtype = KILN_DTYPE_BOOL;
            loop_hints[nh++].ndim = 0;
            for (size_t k = 2; k < n->n_input && nh < KILN_MAX_IO; k++) {
                if (n->input[k][0]) describe_outer(sc, n->input[k], &loop_hints[nh]);
                nh++;
            }
            im->in_hints = loop_hints;
            im->nhints = nh;
        }
        rc = set_attr(im, l, op, lb, a, sc, lead, nlead, extras, nextra, &copy, depth);
        im->pad_out = 0;
        im->in_hints = NULL;
        im->nhints = 0;
    }
    /* If: also the graph for a condition known only at run time.  Nested
     * Ifs double the work per level, so only for the outer levels. */
    if (!rc && nlead && depth < 3) {
        kiln_network *both = NULL;
        rc = build_if_both(im, n, op, sc, lead, extras, nextra, &copy, nout, nreal, depth, &both);
        if (!rc && both) rc = kiln_layer_set_graph(l, "both", both);
        if (rc) rc = kiln__err_prefix(rc, "%s", lb);
    }
    /* Ops with subgraphs (Loop, Scan) learn how many trailing inputs are
     * outer-scope values from `num_outer` when their schema has it. */
    if (!rc && has_graph && !find_attr(n, "num_outer"))
        for (int i = 0; i < op->nattrs; i++)
            if (!strcmp(op->attr_defs[i].name, "num_outer") && op->attr_defs[i].type == KILN_ATTR_INT) {
                rc = kiln_layer_set_int(l, "num_outer", (int64_t)nextra);
                if (rc) rc = kiln__err_prefix(rc, "%s", lb);
            }
    /* Ops taking sequences among other inputs (SequenceMap) learn which
     * node inputs are sequences from `input_parts` when their schema has it. */
    if (!rc && nx > (int)n->n_input)
        for (int i = 0; i < op->nattrs; i++)
            if (!strcmp(op->attr_defs[i].name, "input_parts") && op->attr_defs[i].type == KILN_ATTR_ARRAY) {
                int64_t pv[KILN_MAX_IO];
                int np = 0;
                for (size_t k = 0; k < n->n_input && np < KILN_MAX_IO; k++)
                    pv[np++] = n->input[k][0] ? parts_of(im, n->input[k]) : 1;
                rc = kiln_layer_set_ints(l, "input_parts", pv, np);
                if (rc) rc = kiln__err_prefix(rc, "%s", lb);
            }
    /* Ops with more outputs than the node (Split: a fixed maximum) learn
     * the node's count from `num_outputs` when their schema has it. */
    if (!rc && nout > nreal && !find_attr(n, "num_outputs"))
        for (int i = 0; i < op->nattrs; i++)
            if (!strcmp(op->attr_defs[i].name, "num_outputs") && op->attr_defs[i].type == KILN_ATTR_INT) {
                rc = kiln_layer_set_int(l, "num_outputs", (int64_t)nreal);
                if (rc) rc = kiln__err_prefix(rc, "%s", lb);
            }
done:
    if (rc > 0) rc = KILN_ENOMEM;
    for (int i = 0; i < ngen; i++) kiln__free(gen[i]);
    kiln__free(gen);
    kiln__free(ins);
    kiln__free(outs);
    kiln__free(extras);
    for (int i = 0; i < nxnames; i++) kiln__free(xnames[i]);
    kiln__free(xnames);
    strset_free(&fn);
    strset_free(&copy);
    return rc;
}

static int import_graph(imp *im, const Onnx__GraphProto *g, const scope *parent,
                        const extra *lead, int nlead, const extra *extras, int nextra,
                        const strset *copy_consts, const kiln_network *outer,
                        kiln_network **out, int depth) {
    *out = NULL;
    int pad_out = im->pad_out;
    im->pad_out = 0;
    const struct extra *hints = im->in_hints;
    int nhints = im->nhints;
    im->in_hints = NULL;
    im->nhints = 0;
    if (depth > 32) return kiln__err(KILN_EFORMAT, "subgraphs nested more than 32 deep");
    kiln_network *net = kiln_network_create();
    if (!net) return kiln__err(KILN_ENOMEM, "out of memory");
    scope sc = {parent, net, g};
    strset inits = {0};
    int rc = 0;
    const char *gname = g->name && g->name[0] ? g->name : "(unnamed)";

    /* Subgraph: condition placeholder, constants copied from outside. */
    for (int i = 0; i < nlead && !rc; i++) {
        rc = add_extra_input(net, &lead[i]);
        if (rc) rc = kiln__err_prefix(rc, "graph '%s'", gname);
    }
    if (copy_consts && outer)
        for (int i = 0; i < copy_consts->n && !rc; i++) {
            int ti = kiln__network_find_tensor(outer, copy_consts->keys[i]);
            if (ti < 0) continue;
            const kiln__ntensor *t = &outer->tensors[ti];
            if (kiln__network_find_tensor(net, t->name) >= 0) continue;
            rc = kiln_network_add_constant(net, t->name, t->dtype, t->ndim, t->dims, t->data);
        }

    for (size_t i = 0; i < g->n_initializer && !rc; i++) {
        const Onnx__TensorProto *tp = g->initializer[i];
        if (!tp->name || !tp->name[0]) {
            rc = kiln__err(KILN_EFORMAT, "graph '%s': initializer %zu has no name", gname, i);
            break;
        }
        char where[600];
        snprintf(where, sizeof where, "initializer '%s'", tp->name);
        if (is_string_tensor(tp)) {
            rc = tp->n_dims > KILN_MAX_DIMS ? kiln__err(KILN_EUNSUPPORTED, "%s: rank %zu", where, tp->n_dims)
                 : add_string_const(im, net, tp->name, (int)tp->n_dims, tp->dims, tp->n_string_data,
                                    tp->string_data, where);
            if (!rc && strset_add(&inits, tp->name) < 0) rc = KILN_ENOMEM;
            continue;
        }
        kiln__onnx_tensor t;
        rc = kiln__onnx_tensor_decode(tp, im->base_dir, where, &t);
        if (rc) break;
        rc = add_tensor_const(net, tp->name, &t);
        kiln__onnx_tensor_free(&t);
        if (rc) { rc = kiln__err_prefix(rc, "%s", where); break; }
        if (strset_add(&inits, tp->name) < 0) rc = KILN_ENOMEM;
    }
    for (size_t i = 0; i < g->n_sparse_initializer && !rc; i++) {
        const Onnx__SparseTensorProto *sp = g->sparse_initializer[i];
        const char *nm = sp->values && sp->values->name ? sp->values->name : "";
        if (!nm[0]) {
            rc = kiln__err(KILN_EFORMAT, "graph '%s': sparse initializer %zu has no name", gname, i);
            break;
        }
        char where[600];
        snprintf(where, sizeof where, "sparse initializer '%s'", nm);
        kiln__onnx_tensor t;
        rc = kiln__onnx_sparse_decode(sp, im->base_dir, where, &t);
        if (rc) break;
        rc = add_tensor_const(net, nm, &t);
        kiln__onnx_tensor_free(&t);
        if (rc) { rc = kiln__err_prefix(rc, "%s", where); break; }
        if (strset_add(&inits, nm) < 0) rc = KILN_ENOMEM;
    }

    for (size_t i = 0; i < g->n_input && !rc; i++) {
        const Onnx__ValueInfoProto *vi = g->input[i];
        const char *nm = vi->name ? vi->name : "";
        if (!nm[0]) { rc = kiln__err(KILN_EFORMAT, "graph '%s': input %zu has no name", gname, i); break; }
        if (strset_has(&inits, nm)) continue; /* input with a default: a constant */
        const kiln_onnx_value *given = NULL;
        kiln_dtype pdt0;
        int pnd0, multi = type_parts(vi->type, &pdt0, &pnd0);
        multi = multi > 1 || (multi == 1 && pdt0 == KILN_DTYPE_STRING); /* values go to its parts */
        if (depth == 0 && im->opt && !multi)
            for (int k = 0; k < im->opt->nvalues; k++)
                if (im->opt->values[k].name && !strcmp(im->opt->values[k].name, nm)) given = &im->opt->values[k];
        if (given) {
            rc = kiln_network_add_constant(net, nm, given->dtype, given->ndim, given->dims, given->data);
            if (rc) rc = kiln__err_prefix(rc, "value given for input '%s'", nm);
            continue;
        }
        kiln_dtype dt;
        int nd;
        int64_t dims[KILN_MAX_DIMS];
        const char *names[KILN_MAX_DIMS];
        const Onnx__TypeProto *tp = vi->type;
        int parts = type_parts(tp, &dt, &nd);
        if (parts == 1 && dt == KILN_DTYPE_STRING) {
            /* A string tensor: bytes + lengths (see lower_str_node). */
            int64_t sd[KILN_MAX_DIMS];
            const char *sn[KILN_MAX_DIMS];
            rc = value_type_dims(vi, &nd, sd, sn);
            if (!rc) rc = set_str(im, nm);
            char pn[600];
            const kiln_onnx_value *gv = depth == 0 ? given_value(im, part_name(im, pn, sizeof pn, nm, 1), 1) : NULL;
            if (!rc && gv && gv->ndim == nd)
                for (int q = 0; q < nd; q++) sd[q] = gv->dims[q], sn[q] = NULL;
            const kiln_onnx_value *gb = depth == 0 ? given_value(im, nm, 1) : NULL;
            int64_t bd[1] = {gb && gb->ndim == 1 ? gb->dims[0] : -1};
            if (!rc) rc = kiln_network_add_input(net, nm, KILN_DTYPE_U8, 1, bd, NULL);
            if (!rc) rc = kiln_network_add_input(net, pn, KILN_DTYPE_I64, nd, sd, sn);
            if (rc) rc = kiln__err_prefix(rc, "graph input '%s'", nm);
            continue;
        }
        if (parts > 1) {
            /* A sequence / optional input: its parts (see "sequences"). */
            if (dt == KILN_DTYPE_UNDEFINED || kiln_dtype_size(dt) == 0 || nd > KILN_MAX_DIMS) {
                rc = kiln__err(KILN_EUNSUPPORTED, "graph input '%s': a sequence/optional of element type %d, "
                               "rank %d is not supported", nm, (int)dt, nd);
                break;
            }
            /* Each part may be given a value or a shape by name ("x:shapes"). */
            for (int k = 0; k < parts && !rc; k++) {
                char pn[600];
                part_name(im, pn, sizeof pn, nm, k);
                kiln_dtype pdt = k == 0 ? dt : k == 1 ? KILN_DTYPE_I64 : KILN_DTYPE_BOOL;
                int pnd = k == 0 ? 1 : k == 1 ? 2 : 0;
                int64_t pd[2] = {-1, k == 1 ? nd : -1};
                const kiln_onnx_value *pv = depth == 0 ? given_value(im, pn, 0) : NULL;
                const kiln_onnx_value *ps = depth == 0 ? given_value(im, pn, 1) : NULL;
                if (pv) {
                    if (pv->dtype != pdt || pv->ndim != pnd)
                        rc = kiln__err(KILN_ETYPE, "value given for '%s' must be %s of rank %d", pn,
                                       kiln_dtype_name(pdt), pnd);
                    else rc = kiln_network_add_constant(net, pn, pdt, pnd, pv->dims, pv->data);
                    continue;
                }
                if (ps) {
                    if (ps->ndim != pnd) {
                        rc = kiln__err(KILN_ESHAPE, "shape given for '%s' must have rank %d", pn, pnd);
                        continue;
                    }
                    for (int q = 0; q < pnd; q++) pd[q] = ps->dims[q];
                }
                rc = kiln_network_add_input(net, pn, pdt, pnd, pd, NULL);
            }
            if (!rc) rc = set_parts(im, nm, parts);
            if (rc) rc = kiln__err_prefix(rc, "graph input '%s'", nm);
            continue;
        }
        int untyped = !tp || (tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && tp->tensor_type &&
                              !(tp->tensor_type->has_elem_type && tp->tensor_type->elem_type)) ||
                      tp->value_case == ONNX__TYPE_PROTO__VALUE__NOT_SET;
        if (untyped && (int)i < nhints) {
            /* Subgraph input without a type: what the enclosing node gives. */
            dt = hints[i].dtype;
            nd = hints[i].ndim;
            for (int k = 0; k < nd; k++) {
                dims[k] = hints[i].dims[k];
                names[k] = NULL;
            }
        } else {
            rc = value_type(vi, "graph input", &dt, &nd, dims, names);
            if (rc) break;
        }
        const kiln_onnx_value *fixed = NULL;
        if (depth == 0 && im->opt)
            for (int k = 0; k < im->opt->nshapes; k++)
                if (im->opt->shapes[k].name && !strcmp(im->opt->shapes[k].name, nm)) fixed = &im->opt->shapes[k];
        if (fixed) {
            if (nd >= 0 && nd != fixed->ndim) {
                rc = kiln__err(KILN_ESHAPE, "graph input '%s' has rank %d, the shape given has rank %d",
                               nm, nd, fixed->ndim);
                break;
            }
            if (fixed->ndim < 0 || fixed->ndim > KILN_MAX_DIMS) {
                rc = kiln__err(KILN_EINVAL, "shape given for input '%s' has rank %d", nm, fixed->ndim);
                break;
            }
            nd = fixed->ndim;
            for (int k = 0; k < nd; k++) {
                dims[k] = fixed->dims[k];
                names[k] = NULL;
            }
        }
        if (nd < 0) {
            rc = kiln__err(KILN_EUNSUPPORTED, "graph input '%s' has no shape (unknown rank); give it "
                           "a shape in the model", nm);
            break;
        }
        rc = kiln_network_add_input(net, nm, dt, nd, dims, names);
        if (rc) rc = kiln__err_prefix(rc, "graph input '%s'", nm);
    }
    for (int i = 0; i < nextra && !rc; i++) {
        if (kiln__network_find_tensor(net, extras[i].name) >= 0) continue;
        rc = add_extra_input(net, &extras[i]);
        if (rc) rc = kiln__err_prefix(rc, "graph '%s': outer-scope input '%s'", gname, extras[i].name);
    }
    if (depth == 0 && im->opt && !rc)
        for (int k = 0; k < im->opt->nvalues + im->opt->nshapes; k++) {
            const char *vn = k < im->opt->nvalues ? im->opt->values[k].name
                                                  : im->opt->shapes[k - im->opt->nvalues].name;
            int found = 0;
            for (size_t i = 0; i < g->n_input; i++) {
                const char *gn = g->input[i]->name;
                if (!vn || !gn) continue;
                if (!strcmp(gn, vn)) found = 1;
                /* a part of a sequence input: "x:shapes" */
                for (int k = 1; k < parts_of(im, gn) && !found; k++) {
                    char pn[600];
                    found = !strcmp(vn, part_name(im, pn, sizeof pn, gn, k));
                }
            }
            if (!found) {
                rc = kiln__err(KILN_ENOTFOUND, "a %s was given for '%s', which is not a graph input",
                               k < im->opt->nvalues ? "value" : "shape", vn ? vn : "(null)");
                break;
            }
        }

    for (size_t i = 0; i < g->n_node && !rc; i++) {
        const Onnx__NodeProto *n = g->node[i];
        if (is_constant_node(n)) rc = import_constant(im, net, n);
        else rc = import_node(im, n, &sc, depth);
    }
    for (size_t i = 0; i < g->n_output && !rc; i++) {
        const char *nm = g->output[i]->name ? g->output[i]->name : "";
        for (int k = 0, p = parts_of(im, nm); k < p && !rc; k++) {
            char pn[600];
            part_name(im, pn, sizeof pn, nm, k);
            int ti = depth > 0 ? kiln__network_find_tensor(net, pn) : -1;
            if (ti < 0 || net->tensors[ti].kind != KILN__T_CONST) {
                rc = kiln_network_mark_output(net, pn);
                continue;
            }
            /* A subgraph output that is a constant (If branch = Constant):
             * give the layer's output a producer inside the subgraph (a
             * copy), as for every other subgraph output. */
            char cn[700];
            snprintf(cn, sizeof cn, "%s:copy#%d", pn, im->layer_seq++);
            const char *cin[1] = {pn}, *cout[1] = {cn};
            kiln_layer *cl = kiln_network_add_layer(net, "kiln::reformat", 1, NULL, 1, cin, 1, cout);
            if (!cl) { rc = kiln__err_prefix(KILN_EINTERNAL, "copy"); break; }
            rc = kiln_layer_set_int(cl, "to_dtype", net->tensors[ti].dtype);
            if (!rc) rc = kiln_network_mark_output(net, cn);
        }
        if (rc) rc = kiln__err_prefix(rc, "graph '%s' output '%s'", gname, nm);
    }
    for (int i = 0; i < pad_out && !rc; i++) {
        /* Unused outputs so the subgraph has as many outputs as its layer. */
        /* Produced by a layer (a copy of a scalar constant), so that the
         * builder binds it like any other layer output. */
        char pc[128], pn[128];
        float zero = 0;
        snprintf(pc, sizeof pc, "kiln.pad_const%d#%d", i, im->layer_seq);
        snprintf(pn, sizeof pn, "kiln.pad_out%d#%d", i, im->layer_seq++);
        rc = kiln_network_add_constant(net, pc, KILN_DTYPE_F32, 0, NULL, &zero);
        if (rc) break;
        const char *pin[1] = {pc}, *pout[1] = {pn};
        kiln_layer *pl = kiln_network_add_layer(net, "kiln::reformat", 1, NULL, 1, pin, 1, pout);
        if (!pl) { rc = kiln__err_prefix(KILN_EINTERNAL, "padding subgraph outputs"); break; }
        rc = kiln_layer_set_int(pl, "to_dtype", KILN_DTYPE_F32);
        if (!rc) rc = kiln_network_mark_output(net, pn);
    }
    strset_free(&inits);
    if (rc) {
        kiln_network_free(net);
        return rc;
    }
    *out = net;
    return 0;
}

/* ------------------------------------------------------------ entry points */

static int import_model(const uint8_t *buf, size_t size, const char *base_dir,
                        const kiln_onnx_options *opt, kiln_network **out) {
    int rc = kiln__onnx_check_depth(buf, size);
    if (rc) return rc;
    Onnx__ModelProto *m = onnx__model_proto__unpack(&kiln__onnx_pb_alloc, size, buf);
    if (!m) return kiln__err(KILN_EFORMAT, "not a valid ONNX model (protobuf parse failed)");
    if (!m->graph) {
        onnx__model_proto__free_unpacked(m, &kiln__onnx_pb_alloc);
        return kiln__err(KILN_EFORMAT, "ONNX model has no graph");
    }
    imp im;
    memset(&im, 0, sizeof im);
    im.base_dir = base_dir;
    im.opt = opt;
    im.verbose = opt ? opt->verbose : 0;
    size_t nops = m->n_opset_import + 1;
    for (size_t i = 0; i < m->n_functions; i++) nops += m->functions[i]->n_opset_import;
    im.opsets = kiln__calloc(nops, sizeof *im.opsets);
    if (!im.opsets) {
        onnx__model_proto__free_unpacked(m, &kiln__onnx_pb_alloc);
        return kiln__err(KILN_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < m->n_opset_import; i++) {
        im.opsets[im.nopsets].domain = m->opset_import[i]->domain ? m->opset_import[i]->domain : "";
        im.opsets[im.nopsets].version = m->opset_import[i]->has_version ? m->opset_import[i]->version : 1;
        im.nopsets++;
    }
    /* Domains only a model-local function imports (its inlined nodes are
     * resolved with the model's table). */
    for (size_t i = 0; i < m->n_functions; i++)
        for (size_t k = 0; k < m->functions[i]->n_opset_import; k++) {
            const Onnx__OperatorSetIdProto *o = m->functions[i]->opset_import[k];
            const char *d = o->domain ? o->domain : "";
            if (opset_of(&im, d) >= 0) continue;
            im.opsets[im.nopsets].domain = d;
            im.opsets[im.nopsets].version = o->has_version ? o->version : 1;
            im.nopsets++;
        }
    kiln__onnx_inline *inl = NULL;
    rc = kiln__onnx_inline_functions(m, &inl);
    if (!rc) scan_unsupported(&im, m->graph, 0);
    if (rc) {
        /* message set by the inliner */
    } else if (im.nunsupported) {
        /* One node: one line; several: one line each. */
        const char *list = im.unsupported.s ? im.unsupported.s : "";
        if (im.nunsupported == 1 && !strncmp(list, "\n  ", 3)) list += 3;
        rc = kiln__err(KILN_EUNSUPPORTED, "%d unsupported node%s:%s%s", im.nunsupported,
                       im.nunsupported == 1 ? "" : "s", im.nunsupported == 1 ? " " : "", list);
    } else {
        rc = import_graph(&im, m->graph, NULL, NULL, 0, NULL, 0, NULL, NULL, out, 0);
    }
    kiln__free(im.unsupported.s);
    kiln__free(im.opsets);
    strset_free(&im.seq2);
    strset_free(&im.seq3);
    strset_free(&im.str2);
    kiln__onnx_inline_restore(inl);
    onnx__model_proto__free_unpacked(m, &kiln__onnx_pb_alloc);
    return rc;
}

KILN_API int kiln_onnx_import_memory(const void *buf, size_t size, const kiln_onnx_options *opt,
                                     kiln_network **out) {
    KILN__ARG(out && (buf || !size), KILN_EINVAL);
    *out = NULL;
    return import_model(buf, size, opt ? opt->base_dir : NULL, opt, out);
}

KILN_API int kiln_onnx_import(const char *path, const kiln_onnx_options *opt, kiln_network **out) {
    KILN__ARG(path && out, KILN_EINVAL);
    *out = NULL;
    uint8_t *buf;
    size_t size;
    int rc = kiln__onnx_read_file(path, &buf, &size);
    if (rc) return rc;
    char dir[PATH_MAX];
    if (opt && opt->base_dir) {
        snprintf(dir, sizeof dir, "%s", opt->base_dir);
    } else {
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash == dir) dir[1] = 0;
        else if (slash) *slash = 0;
        else snprintf(dir, sizeof dir, ".");
    }
    rc = import_model(buf, size, dir, opt, out);
    kiln__free(buf);
    if (rc) return kiln__err_prefix(rc, "%s", path);
    return 0;
}
