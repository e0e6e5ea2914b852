/*
 * import.c — ONNX ModelProto -> kiln_network: the driver (entry points,
 * op resolution, the pass that lists unsupported nodes).
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
 *
 * The importer is split by what each part does (import_int.h declares what
 * they share): import_graph.c (graphs and nodes, If's `both` graph),
 * import_attrs.c (attributes to schema types), import_scope.c (outer-scope
 * names and value types), import_sequences.c (sequence, optional and
 * string values as tensor parts), import_constants.c (initializers and
 * Constant nodes), import_names.c (name sets, message text).  It reaches
 * the registry and networks only through the public API.
 */
#include "import_int.h"

/* ------------------------------------------------------------ importer state */

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

const char *kiln__imp_node_label(const Onnx__NodeProto *n, char *buf, size_t size) {
    if (n->name && n->name[0]) snprintf(buf, size, "node '%s' (%s)", n->name, n->op_type ? n->op_type : "?");
    else snprintf(buf, size, "node %s writing '%s'", n->op_type ? n->op_type : "?",
                  n->n_output && n->output[0] ? n->output[0] : "?");
    return buf;
}

const Onnx__AttributeProto *kiln__imp_find_attr(const Onnx__NodeProto *n, const char *name) {
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

int kiln__imp_is_constant_node(const Onnx__NodeProto *n) {
    return n->op_type && !strcmp(n->op_type, "Constant") && !canon_domain(n->domain)[0];
}

/* Resolve the op of a node per README.md "ONNX" (plugin_namespace, then a
 * built-in op, then the domain as a namespace) into *op; returns
 * 1, or 0 with the reason in why. */
int kiln__imp_resolve_op(const imp *im, const Onnx__NodeProto *n, kiln_op_info *op, char *why, size_t wsz) {
    const char *op_type = n->op_type ? n->op_type : "";
    const char *domain = canon_domain(n->domain);
    const Onnx__AttributeProto *pns = kiln__imp_find_attr(n, "plugin_namespace");
    const Onnx__AttributeProto *pver = kiln__imp_find_attr(n, "plugin_version");
    int64_t pv = pver && pver->has_i ? pver->i : -1;
    char ns[256], vers[256];
    if (pns) {
        if (!attr_string(pns, ns, sizeof ns) || !ns[0]) {
            snprintf(why, wsz, "attribute plugin_namespace is not a non-empty string");
            return 0;
        }
        int ver = pv > 0 && pv <= INT_MAX ? (int)pv : 1;
        if (kiln_registry_find(ns, op_type, ver, op) == 0) return 1;
        kiln_registry_versions(ns, op_type, vers, sizeof vers);
        snprintf(why, wsz, "plugin %s::%s version %d is not registered (registered versions: %s; "
                 "load its plugin library)", ns, op_type, ver, vers);
        return 0;
    }
    int64_t opv = opset_of(im, domain);
    if (!domain[0] || !strcmp(domain, "ai.onnx.ml")) {
        const char *bns = domain[0] ? "ai.onnx.ml" : "ai.onnx";
        int64_t v = opv > 0 ? opv : 1;
        if (kiln_registry_resolve(bns, op_type, v > INT_MAX ? INT_MAX : (int)v, op) == 0) return 1;
        kiln_registry_versions(bns, op_type, vers, sizeof vers);
        if (strcmp(vers, "none") != 0)
            snprintf(why, wsz, "no built-in %s::%s at version <= %lld (registered: %s)", bns, op_type,
                     (long long)v, vers);
        else snprintf(why, wsz, "no built-in op %s::%s", bns, op_type);
        return 0;
    }
    int64_t v = pv > 0 ? pv : opv > 0 ? opv : 1;
    if (kiln_registry_resolve(domain, op_type, v > INT_MAX ? INT_MAX : (int)v, op) == 0) return 1;
    kiln_registry_versions(domain, op_type, vers, sizeof vers);
    snprintf(why, wsz, "no op %s::%s at version <= %lld (registered: %s; load its plugin library "
             "or set plugin_namespace)", domain, op_type, (long long)v, vers);
    return 0;
}

/* Network tensors through the public network API: 1 if `name` exists
 * (*t filled when t is not NULL). */
int kiln__imp_net_tensor(const kiln_network *net, const char *name, kiln_net_tensor_info *t) {
    return kiln_network_tensor_info(net, name, t) == 0;
}

/* Pass 1: list every node (subgraphs included) that maps to no op. */

static void scan_unsupported(imp *im, const Onnx__GraphProto *g, int depth) {
    for (size_t i = 0; i < g->n_node; i++) {
        const Onnx__NodeProto *n = g->node[i];
        if (!kiln__imp_is_constant_node(n) && !kiln__imp_is_lowered_node(n)) {
            char why[768];
            kiln_op_info op;
            if (!kiln__imp_resolve_op(im, n, &op, why, sizeof why)) {
                const char *dom = n->domain && n->domain[0] ? n->domain : "ai.onnx";
                int64_t ov = opset_of(im, canon_domain(n->domain));
                kiln__imp_text_add(&im->unsupported, "\n  node '%s' op_type '%s' domain '%s' opset %lld: %s",
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
        rc = kiln__imp_import_graph(&im, m->graph, NULL, NULL, 0, NULL, 0, NULL, NULL, out, 0);
    }
    kiln__free(im.unsupported.s);
    kiln__free(im.opsets);
    kiln__imp_strset_free(&im.seq2);
    kiln__imp_strset_free(&im.seq3);
    kiln__imp_strset_free(&im.str2);
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
    const uint8_t *buf;
    size_t size;
    int rc = kiln__onnx_map_file(path, &buf, &size);
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
    kiln__onnx_unmap_file(buf, size);
    if (rc) return kiln__err_prefix(rc, "%s", path);
    return 0;
}
