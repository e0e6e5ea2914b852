/*
 * function.c — inlining ONNX model-local functions (ModelProto.functions).
 *
 * A node whose (domain, op_type[, overload]) names a function of the model
 * (and that has no plugin_namespace attribute: a plugin wins) is replaced by
 * the function's nodes: formal inputs/outputs renamed to the call's actual
 * names, names internal to the body prefixed with "<call>#<n>/", attributes
 * that refer to the function's attributes (ref_attr_name) replaced by the
 * call's values or the function's defaults.  Calls inside function bodies
 * are inlined too (at most 16 deep).  Function bodies with subgraph
 * attributes are not supported (their outer-scope names would need
 * renaming).  The inlined nodes are resolved with the model's opset imports.
 *
 * The rewrite works on the unpacked protobuf: graphs get new node arrays
 * whose new nodes share strings and attributes with the originals; the
 * state records every replaced array so that restore puts the originals
 * back before protobuf-c frees the message.
 */
#include "onnx_int.h"

#include <stdio.h>
#include <string.h>

#define FN_MAX_DEPTH 16

typedef struct fn_saved {
    Onnx__GraphProto *g;
    Onnx__NodeProto **node;
    size_t n_node;
} fn_saved;

struct kiln__onnx_inline {
    void **allocs;
    size_t nallocs, cap_allocs;
    fn_saved *saved;
    size_t nsaved, cap_saved;
    int seq;
};

static void *fn_alloc(kiln__onnx_inline *st, size_t n) {
    if (st->nallocs == st->cap_allocs) {
        size_t nc = st->cap_allocs ? st->cap_allocs * 2 : 64;
        void **a = kiln__realloc(st->allocs, nc * sizeof *a);
        if (!a) return NULL;
        st->allocs = a;
        st->cap_allocs = nc;
    }
    void *p = kiln__calloc(1, n ? n : 1);
    if (p) st->allocs[st->nallocs++] = p;
    return p;
}

static char *fn_strdup(kiln__onnx_inline *st, const char *a, const char *b) {
    size_t la = strlen(a), lb = b ? strlen(b) : 0;
    char *s = fn_alloc(st, la + lb + 1);
    if (!s) return NULL;
    memcpy(s, a, la);
    if (lb) memcpy(s + la, b, lb);
    s[la + lb] = 0;
    return s;
}

void kiln__onnx_inline_restore(kiln__onnx_inline *st) {
    if (!st) return;
    for (size_t i = st->nsaved; i-- > 0;) {
        st->saved[i].g->node = st->saved[i].node;
        st->saved[i].g->n_node = st->saved[i].n_node;
    }
    for (size_t i = 0; i < st->nallocs; i++) kiln__free(st->allocs[i]);
    kiln__free(st->allocs);
    kiln__free(st->saved);
    kiln__free(st);
}

static const Onnx__FunctionProto *fn_find(const Onnx__ModelProto *m, const Onnx__NodeProto *n) {
    const char *dom = n->domain ? n->domain : "";
    for (size_t i = 0; i < m->n_functions; i++) {
        const Onnx__FunctionProto *f = m->functions[i];
        const char *fd = f->domain ? f->domain : "";
        if (!f->name || !n->op_type || strcmp(f->name, n->op_type) || strcmp(fd, dom)) continue;
        const char *fo = f->overload ? f->overload : "", *no = n->overload ? n->overload : "";
        if (strcmp(fo, no)) continue;
        for (size_t k = 0; k < n->n_attribute; k++)
            if (n->attribute[k]->name && !strcmp(n->attribute[k]->name, "plugin_namespace")) return NULL;
        return f;
    }
    return NULL;
}

typedef struct fn_list {
    Onnx__NodeProto **v;
    size_t n, cap;
} fn_list;

static int fn_push(kiln__onnx_inline *st, fn_list *l, Onnx__NodeProto *n) {
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 32;
        Onnx__NodeProto **v = fn_alloc(st, nc * sizeof *v);
        if (!v) return kiln__err(KILN_ENOMEM, "out of memory inlining functions");
        if (l->n) memcpy(v, l->v, l->n * sizeof *v);
        l->v = v;
        l->cap = nc;
    }
    l->v[l->n++] = n;
    return 0;
}

static int fn_expand_nodes(const Onnx__ModelProto *m, kiln__onnx_inline *st, Onnx__NodeProto **nodes,
                           size_t n, fn_list *out, int depth);

/* Actual name of body name `nm` in this call. */
static const char *fn_rename(kiln__onnx_inline *st, const Onnx__FunctionProto *f, const Onnx__NodeProto *call,
                             const char *prefix, const char *nm) {
    if (!nm[0]) return nm;
    for (size_t i = 0; i < f->n_input; i++)
        if (!strcmp(f->input[i], nm)) return i < call->n_input ? call->input[i] : "";
    for (size_t i = 0; i < f->n_output; i++)
        if (!strcmp(f->output[i], nm)) {
            if (i < call->n_output && call->output[i][0]) return call->output[i];
            break;
        }
    return fn_strdup(st, prefix, nm);
}

static int fn_inline_call(const Onnx__ModelProto *m, kiln__onnx_inline *st, const Onnx__FunctionProto *f,
                          const Onnx__NodeProto *call, fn_list *out, int depth) {
    const char *fname = f->name ? f->name : "?";
    if (depth >= FN_MAX_DEPTH)
        return kiln__err(KILN_EFORMAT, "function '%s': calls nested more than %d deep (recursive?)", fname,
                         FN_MAX_DEPTH);
    if (call->n_input > f->n_input || call->n_output > f->n_output)
        return kiln__err(KILN_EFORMAT, "node calling function '%s': %zu inputs / %zu outputs, the function "
                         "has %zu / %zu", fname, call->n_input, call->n_output, f->n_input, f->n_output);
    char pb[300];
    snprintf(pb, sizeof pb, "%s#%d/", call->name && call->name[0] ? call->name : fname, st->seq++);
    char *prefix = fn_strdup(st, pb, NULL);
    if (!prefix) return kiln__err(KILN_ENOMEM, "out of memory inlining functions");
    Onnx__NodeProto **body = fn_alloc(st, (f->n_node ? f->n_node : 1) * sizeof *body);
    if (!body) return kiln__err(KILN_ENOMEM, "out of memory inlining functions");
    for (size_t i = 0; i < f->n_node; i++) {
        const Onnx__NodeProto *bn = f->node[i];
        Onnx__NodeProto *nn = fn_alloc(st, sizeof *nn);
        char **ins = fn_alloc(st, (bn->n_input ? bn->n_input : 1) * sizeof *ins);
        char **outs = fn_alloc(st, (bn->n_output ? bn->n_output : 1) * sizeof *outs);
        Onnx__AttributeProto **attrs = fn_alloc(st, (bn->n_attribute ? bn->n_attribute : 1) * sizeof *attrs);
        if (!nn || !ins || !outs || !attrs) return kiln__err(KILN_ENOMEM, "out of memory inlining functions");
        *nn = *bn;
        for (size_t k = 0; k < bn->n_input; k++) {
            ins[k] = (char *)fn_rename(st, f, call, prefix, bn->input[k]);
            if (!ins[k]) return kiln__err(KILN_ENOMEM, "out of memory inlining functions");
        }
        for (size_t k = 0; k < bn->n_output; k++) {
            outs[k] = (char *)fn_rename(st, f, call, prefix, bn->output[k]);
            if (!outs[k]) return kiln__err(KILN_ENOMEM, "out of memory inlining functions");
        }
        nn->input = ins;
        nn->output = outs;
        char nb[160];
        if (bn->name && bn->name[0]) snprintf(nb, sizeof nb, "%s", bn->name);
        else snprintf(nb, sizeof nb, "%s_%zu", bn->op_type ? bn->op_type : "node", i);
        nn->name = fn_strdup(st, prefix, nb);
        if (!nn->name) return kiln__err(KILN_ENOMEM, "out of memory inlining functions");
        size_t na = 0;
        for (size_t k = 0; k < bn->n_attribute; k++) {
            Onnx__AttributeProto *a = bn->attribute[k];
            if (a->g || a->n_graphs)
                return kiln__err(KILN_EUNSUPPORTED, "function '%s': node '%s' has a subgraph attribute "
                                 "(not supported in inlined functions)", fname, bn->name ? bn->name : "");
            if (!a->ref_attr_name || !a->ref_attr_name[0]) {
                attrs[na++] = a;
                continue;
            }
            const Onnx__AttributeProto *v = NULL;
            for (size_t q = 0; q < call->n_attribute && !v; q++)
                if (call->attribute[q]->name && !strcmp(call->attribute[q]->name, a->ref_attr_name))
                    v = call->attribute[q];
            for (size_t q = 0; q < f->n_attribute_proto && !v; q++)
                if (f->attribute_proto[q]->name && !strcmp(f->attribute_proto[q]->name, a->ref_attr_name))
                    v = f->attribute_proto[q];
            if (!v) continue; /* not given, no default: the attribute is absent */
            Onnx__AttributeProto *c = fn_alloc(st, sizeof *c);
            if (!c) return kiln__err(KILN_ENOMEM, "out of memory inlining functions");
            *c = *v;
            c->name = a->name;
            c->ref_attr_name = NULL;
            attrs[na++] = c;
        }
        nn->attribute = attrs;
        nn->n_attribute = na;
        body[i] = nn;
    }
    /* Calls inside the body. */
    return fn_expand_nodes(m, st, body, f->n_node, out, depth + 1);
}

static int fn_expand_graph(const Onnx__ModelProto *m, kiln__onnx_inline *st, Onnx__GraphProto *g, int depth);

static int fn_expand_nodes(const Onnx__ModelProto *m, kiln__onnx_inline *st, Onnx__NodeProto **nodes,
                           size_t n, fn_list *out, int depth) {
    for (size_t i = 0; i < n; i++) {
        Onnx__NodeProto *nd = nodes[i];
        const Onnx__FunctionProto *f = fn_find(m, nd);
        int rc;
        if (f) {
            rc = fn_inline_call(m, st, f, nd, out, depth);
            if (rc) return kiln__err_prefix(rc, "inlining function '%s'", f->name);
            continue;
        }
        for (size_t k = 0; k < nd->n_attribute; k++) {
            Onnx__AttributeProto *a = nd->attribute[k];
            if (a->g && (rc = fn_expand_graph(m, st, a->g, depth + 1))) return rc;
            for (size_t q = 0; q < a->n_graphs; q++)
                if ((rc = fn_expand_graph(m, st, a->graphs[q], depth + 1))) return rc;
        }
        if ((rc = fn_push(st, out, nd))) return rc;
    }
    return 0;
}

static int fn_expand_graph(const Onnx__ModelProto *m, kiln__onnx_inline *st, Onnx__GraphProto *g, int depth) {
    if (depth > 64) return kiln__err(KILN_EFORMAT, "subgraphs nested too deep");
    fn_list out = {0};
    int rc = fn_expand_nodes(m, st, g->node, g->n_node, &out, depth);
    if (rc) return rc;
    if (out.n == g->n_node) {
        int same = 1;
        for (size_t i = 0; i < out.n && same; i++) same = out.v[i] == g->node[i];
        if (same) return 0;
    }
    if (st->nsaved == st->cap_saved) {
        size_t nc = st->cap_saved ? st->cap_saved * 2 : 8;
        fn_saved *s = kiln__realloc(st->saved, nc * sizeof *s);
        if (!s) return kiln__err(KILN_ENOMEM, "out of memory inlining functions");
        st->saved = s;
        st->cap_saved = nc;
    }
    st->saved[st->nsaved++] = (fn_saved){g, g->node, g->n_node};
    g->node = out.v;
    g->n_node = out.n;
    return 0;
}

int kiln__onnx_inline_functions(Onnx__ModelProto *m, kiln__onnx_inline **state) {
    *state = NULL;
    if (!m->n_functions || !m->graph) return 0;
    kiln__onnx_inline *st = kiln__calloc(1, sizeof *st);
    if (!st) return kiln__err(KILN_ENOMEM, "out of memory inlining functions");
    *state = st;
    return fn_expand_graph(m, st, m->graph, 0);
}
