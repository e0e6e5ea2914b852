/*
 * import_graph.c — ONNX graphs to networks: graph inputs, initializers,
 * nodes (layers with their attributes and subgraphs), outputs; and the
 * `both` graph of an If whose condition is known only at run time.
 */
#include "import_int.h"

/* For If: the `both` graph used when the condition is known only at run
 * time (see src/ops/controlflow/if.c): inputs as the branches'; the then- and
 * else-branch as Ifs on constant conditions; kiln::if_select per output.
 * Returns 0 with *out NULL when it cannot be made (then a runtime condition
 * stays unsupported). */
static int build_if_both(imp *im, const Onnx__NodeProto *n, const kiln_op_info *op, const scope *sc,
                         const extra *lead, const extra *extras, int nextra, const strset *copy, int nout,
                         int nreal, int depth, kiln_network **out) {
    *out = NULL;
    const Onnx__AttributeProto *ta = kiln__imp_find_attr(n, "then_branch"), *ea = kiln__imp_find_attr(n, "else_branch");
    if (!ta || !ta->g || !ea || !ea->g || nreal < 1) return 0;
    if (kiln_registry_find("kiln", "if_select", 2, NULL) != 0) return 0;
    int has_both = 0;
    for (int i = 0; i < op->nattrs; i++) has_both |= !strcmp(op->attrs[i].name, "both");
    if (!has_both) return 0;
    kiln_network *b = kiln_network_create();
    if (!b) return kiln__err(KILN_ENOMEM, "out of memory");
    int rc = kiln__imp_add_extra_input(b, &lead[0]);
    for (int i = 0; i < nextra && !rc; i++) rc = kiln__imp_add_extra_input(b, &extras[i]);
    for (int i = 0; copy && i < copy->n && !rc; i++) {
        kiln_net_tensor_info t;
        if (!kiln__imp_net_tensor(sc->net, copy->keys[i], &t)) continue;
        rc = kiln_network_add_constant(b, t.name, t.dtype, t.ndim, t.dims, t.data);
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
        rc = kiln__imp_import_graph(im, k ? ea->g : ta->g, sc, lead, 1, extras, nextra, copy, sc->net, &sub, depth + 1);
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
    kiln__imp_node_label(n, lb, sizeof lb);
    if (!n->op_type || !n->op_type[0]) return kiln__err(KILN_EFORMAT, "%s: empty op_type", lb);
    int lowered = 0, lrc = kiln__imp_lower_seq_node(im, n, sc, lb, &lowered);
    if (lowered || lrc) return lrc;
    lrc = kiln__imp_lower_str_node(im, n, sc, lb, &lowered);
    if (lowered || lrc) return lrc;
    char why[768];
    kiln_op_info opi, *op = &opi;
    if (!kiln__imp_resolve_op(im, n, op, why, sizeof why)) return kiln__err(KILN_EUNSUPPORTED, "%s: %s", lb, why);
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
        if (a->g) { rc = kiln__imp_free_names(a->g, &fn, depth + 1); has_graph = 1; }
        for (size_t k = 0; k < a->n_graphs && !rc; k++) { rc = kiln__imp_free_names(a->graphs[k], &fn, depth + 1); has_graph = 1; }
    }
    if (rc) goto done;
    if (fn.n) {
        /* a sequence/optional/string value passes as its parts (up to 3) */
        extras = kiln__calloc((size_t)fn.n * 3, sizeof *extras);
        xnames = kiln__calloc((size_t)fn.n * 3, sizeof *xnames);
        if (!extras || !xnames) { rc = kiln__err(KILN_ENOMEM, "out of memory"); goto done; }
    }
    for (int i = 0; i < fn.n; i++) {
        for (int k = 0, p = kiln__imp_parts_of(im, fn.keys[i]); k < p; k++) {
            char pb[600];
            const char *key = k ? kiln__imp_part_name(im, pb, sizeof pb, fn.keys[i], k) : fn.keys[i];
            kiln_net_tensor_info ti;
            if (!kiln__imp_net_tensor(sc->net, key, &ti)) {
                rc = kiln__err(KILN_ENOTFOUND, "%s: a subgraph uses '%s', which no enclosing graph defines "
                               "before this node", lb, key);
                goto done;
            }
            if (k && !(key = xnames[nxnames++] = kiln__strdup(key))) { rc = KILN_ENOMEM; goto done; }
            if (ti.kind == KILN_NET_TENSOR_CONSTANT) {
                if ((rc = kiln__imp_strset_add(&copy, key)) < 0) goto done;
                rc = 0;
            } else {
                kiln__imp_describe_outer(sc, key, &extras[nextra++]);
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
        kiln__imp_describe_outer(sc, n->input[0], &lead[0]);
        snprintf(lead_name, sizeof lead_name, "kiln.if_cond#%d", im->layer_seq);
        lead[0].name = lead_name;
        nlead = 1;
    }

    /* Sequence values expand into their parts (see "sequences"). */
    int nx = 0, nreal = 0;
    for (size_t i = 0; i < n->n_input; i++) nx += n->input[i][0] ? kiln__imp_parts_of(im, n->input[i]) : 1;
    for (size_t i = 0; i < n->n_output; i++) nreal += n->output[i][0] ? kiln__imp_out_parts(im, n, i) : 1;
    int nin = nx + nextra;
    int nout = nreal;
    if (op->num_outputs > nout) nout = op->num_outputs;
    ins = kiln__calloc((size_t)(nin ? nin : 1), sizeof *ins);
    outs = kiln__calloc((size_t)(nout ? nout : 1), sizeof *outs);
    gen = kiln__calloc((size_t)(nin + nout + 1), sizeof *gen);
    if (!ins || !outs || !gen) { rc = kiln__err(KILN_ENOMEM, "out of memory"); goto done; }
    for (size_t i = 0, k = 0; i < n->n_input; i++) {
        const char *x = n->input[i];
        if (x[0] && !kiln__imp_net_tensor(sc->net, x, NULL)) {
            rc = kiln__err(KILN_ENOTFOUND, "%s: input %zu '%s' is not defined before this node (no "
                           "graph input, initializer or earlier node output has that name)", lb, i, x);
            goto done;
        }
        int p = x[0] ? kiln__imp_parts_of(im, x) : 1;
        if (p > 1 && kiln__imp_is_str(im, x) && strcmp(n->op_type, "StringNormalizer")) {
            rc = kiln__err(KILN_EUNSUPPORTED, "%s: input %zu '%s' is a string tensor; in kiln only Cast, CastLike, "
                           "Identity and StringNormalizer take strings", lb, i, x);
            goto done;
        }
        if (p > 1 && !kiln__imp_is_str(im, x) && !kiln__imp_takes_sequences(n->op_type)) {
            rc = kiln__err(KILN_EUNSUPPORTED, "%s: input %zu '%s' is a sequence or optional value; in kiln only "
                           "the Sequence*/Optional* ops, ConcatFromSequence, Identity and If outputs handle "
                           "those%s", lb, i, x, !strcmp(n->op_type, "Loop") ? " (a Loop cannot carry one)" : "");
            goto done;
        }
        ins[k++] = x;
        for (int q = 1; q < p; q++) {
            char b[600];
            if (!(gen[ngen] = kiln__strdup(kiln__imp_part_name(im, b, sizeof b, x, q)))) { rc = KILN_ENOMEM; goto done; }
            ins[k++] = gen[ngen++];
        }
    }
    for (int i = 0; i < nextra; i++) ins[nx + i] = extras[i].name;
    for (int i = 0, oi = 0; i < nout; i++) {
        int p = oi < (int)n->n_output && n->output[oi][0] ? kiln__imp_out_parts(im, n, (size_t)oi) : 1;
        if (oi < (int)n->n_output && n->output[oi][0]) {
            outs[i] = n->output[oi];
            if (kiln__imp_out_is_str(n, (size_t)oi) && (rc = kiln__imp_set_str(im, n->output[oi]))) goto done;
            for (int q = 1; q < p && i + 1 < nout; q++) {
                char b[600];
                if (!(gen[ngen] = kiln__strdup(kiln__imp_part_name(im, b, sizeof b, n->output[oi], q)))) { rc = KILN_ENOMEM; goto done; }
                outs[++i] = gen[ngen++];
            }
            if ((rc = kiln__imp_set_parts(im, n->output[oi], p))) goto done;
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
                if (n->input[k][0]) kiln__imp_describe_outer(sc, n->input[k], &loop_hints[nh]);
                nh++;
            }
            im->in_hints = loop_hints;
            im->nhints = nh;
        }
        rc = kiln__imp_set_attr(im, l, op, lb, a, sc, lead, nlead, extras, nextra, &copy, depth);
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
    if (!rc && has_graph && !kiln__imp_find_attr(n, "num_outer"))
        for (int i = 0; i < op->nattrs; i++)
            if (!strcmp(op->attrs[i].name, "num_outer") && op->attrs[i].type == KILN_ATTR_INT) {
                rc = kiln_layer_set_int(l, "num_outer", (int64_t)nextra);
                if (rc) rc = kiln__err_prefix(rc, "%s", lb);
            }
    /* Ops taking sequences among other inputs (SequenceMap) learn which
     * node inputs are sequences from `input_parts` when their schema has it. */
    if (!rc && nx > (int)n->n_input)
        for (int i = 0; i < op->nattrs; i++)
            if (!strcmp(op->attrs[i].name, "input_parts") && op->attrs[i].type == KILN_ATTR_ARRAY) {
                int64_t pv[KILN_MAX_IO];
                int np = 0;
                for (size_t k = 0; k < n->n_input && np < KILN_MAX_IO; k++)
                    pv[np++] = n->input[k][0] ? kiln__imp_parts_of(im, n->input[k]) : 1;
                rc = kiln_layer_set_ints(l, "input_parts", pv, np);
                if (rc) rc = kiln__err_prefix(rc, "%s", lb);
            }
    /* Ops with more outputs than the node (Split: a fixed maximum) learn
     * the node's count from `num_outputs` when their schema has it. */
    if (!rc && nout > nreal && !kiln__imp_find_attr(n, "num_outputs"))
        for (int i = 0; i < op->nattrs; i++)
            if (!strcmp(op->attrs[i].name, "num_outputs") && op->attrs[i].type == KILN_ATTR_INT) {
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
    kiln__imp_strset_free(&fn);
    kiln__imp_strset_free(&copy);
    return rc;
}

int kiln__imp_import_graph(imp *im, const Onnx__GraphProto *g, const scope *parent,
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
        rc = kiln__imp_add_extra_input(net, &lead[i]);
        if (rc) rc = kiln__err_prefix(rc, "graph '%s'", gname);
    }
    if (copy_consts && outer)
        for (int i = 0; i < copy_consts->n && !rc; i++) {
            kiln_net_tensor_info t;
            if (!kiln__imp_net_tensor(outer, copy_consts->keys[i], &t) || kiln__imp_net_tensor(net, t.name, NULL)) continue;
            rc = kiln_network_add_constant(net, t.name, t.dtype, t.ndim, t.dims, t.data);
        }

    for (size_t i = 0; i < g->n_initializer && !rc; i++) {
        const Onnx__TensorProto *tp = g->initializer[i];
        if (!tp->name || !tp->name[0]) {
            rc = kiln__err(KILN_EFORMAT, "graph '%s': initializer %zu has no name", gname, i);
            break;
        }
        char where[600];
        snprintf(where, sizeof where, "initializer '%s'", tp->name);
        if (kiln__imp_is_string_tensor(tp)) {
            rc = tp->n_dims > KILN_MAX_DIMS ? kiln__err(KILN_EUNSUPPORTED, "%s: rank %zu", where, tp->n_dims)
                 : kiln__imp_add_string_const(im, net, tp->name, (int)tp->n_dims, tp->dims, tp->n_string_data,
                                    tp->string_data, where);
            if (!rc && kiln__imp_strset_add(&inits, tp->name) < 0) rc = KILN_ENOMEM;
            continue;
        }
        kiln__onnx_tensor t;
        rc = kiln__onnx_tensor_decode(tp, im->base_dir, where, &t);
        if (rc) break;
        if (depth == 0 && t.borrowed && t.data == tp->raw_data.data) {
            /* raw_data (protobuf-c's copy of the bytes) becomes the
             * network's constant: one copy of the weights less.  The
             * proto no longer holds it: the main graph is imported once
             * (a subgraph may be imported twice; it keeps the copy). */
            rc = kiln__network_add_constant_take(net, tp->name, t.dtype, t.ndim, t.dims, t.data);
            if (!rc) {
                Onnx__TensorProto *own = g->initializer[i];
                own->raw_data.data = NULL;
                own->raw_data.len = 0;
                own->has_raw_data = 0;
            }
        } else {
            rc = kiln__imp_add_tensor_const(net, tp->name, &t);
        }
        kiln__onnx_tensor_free(&t);
        if (rc) { rc = kiln__err_prefix(rc, "%s", where); break; }
        if (kiln__imp_strset_add(&inits, tp->name) < 0) rc = KILN_ENOMEM;
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
        rc = kiln__imp_add_tensor_const(net, nm, &t);
        kiln__onnx_tensor_free(&t);
        if (rc) { rc = kiln__err_prefix(rc, "%s", where); break; }
        if (kiln__imp_strset_add(&inits, nm) < 0) rc = KILN_ENOMEM;
    }

    for (size_t i = 0; i < g->n_input && !rc; i++) {
        const Onnx__ValueInfoProto *vi = g->input[i];
        const char *nm = vi->name ? vi->name : "";
        if (!nm[0]) { rc = kiln__err(KILN_EFORMAT, "graph '%s': input %zu has no name", gname, i); break; }
        if (kiln__imp_strset_has(&inits, nm)) continue; /* input with a default: a constant */
        const kiln_onnx_value *given = NULL;
        kiln_dtype pdt0;
        int pnd0, multi = kiln__imp_type_parts(vi->type, &pdt0, &pnd0);
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
        int parts = kiln__imp_type_parts(tp, &dt, &nd);
        if (parts == 1 && dt == KILN_DTYPE_STRING) {
            /* A string tensor: bytes + lengths (see lower_str_node). */
            int64_t sd[KILN_MAX_DIMS];
            const char *sn[KILN_MAX_DIMS];
            rc = kiln__imp_value_type_dims(vi, &nd, sd, sn);
            if (!rc) rc = kiln__imp_set_str(im, nm);
            char pn[600];
            const kiln_onnx_value *gv = depth == 0 ? kiln__imp_given_value(im, kiln__imp_part_name(im, pn, sizeof pn, nm, 1), 1) : NULL;
            if (!rc && gv && gv->ndim == nd)
                for (int q = 0; q < nd; q++) sd[q] = gv->dims[q], sn[q] = NULL;
            const kiln_onnx_value *gb = depth == 0 ? kiln__imp_given_value(im, nm, 1) : NULL;
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
                kiln__imp_part_name(im, pn, sizeof pn, nm, k);
                kiln_dtype pdt = k == 0 ? dt : k == 1 ? KILN_DTYPE_I64 : KILN_DTYPE_BOOL;
                int pnd = k == 0 ? 1 : k == 1 ? 2 : 0;
                int64_t pd[2] = {-1, k == 1 ? nd : -1};
                const kiln_onnx_value *pv = depth == 0 ? kiln__imp_given_value(im, pn, 0) : NULL;
                const kiln_onnx_value *ps = depth == 0 ? kiln__imp_given_value(im, pn, 1) : NULL;
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
            if (!rc) rc = kiln__imp_set_parts(im, nm, parts);
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
            rc = kiln__imp_value_type(vi, "graph input", &dt, &nd, dims, names);
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
        if (kiln__imp_net_tensor(net, extras[i].name, NULL)) continue;
        rc = kiln__imp_add_extra_input(net, &extras[i]);
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
                for (int k = 1; k < kiln__imp_parts_of(im, gn) && !found; k++) {
                    char pn[600];
                    found = !strcmp(vn, kiln__imp_part_name(im, pn, sizeof pn, gn, k));
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
        if (kiln__imp_is_constant_node(n)) rc = kiln__imp_import_constant(im, net, n);
        else rc = import_node(im, n, &sc, depth);
    }
    for (size_t i = 0; i < g->n_output && !rc; i++) {
        const char *nm = g->output[i]->name ? g->output[i]->name : "";
        for (int k = 0, p = kiln__imp_parts_of(im, nm); k < p && !rc; k++) {
            char pn[600];
            kiln__imp_part_name(im, pn, sizeof pn, nm, k);
            kiln_net_tensor_info ti;
            if (depth == 0 || !kiln__imp_net_tensor(net, pn, &ti) || ti.kind != KILN_NET_TENSOR_CONSTANT) {
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
            rc = kiln_layer_set_int(cl, "to_dtype", ti.dtype);
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
    kiln__imp_strset_free(&inits);
    if (rc) {
        kiln_network_free(net);
        return rc;
    }
    *out = net;
    return 0;
}
