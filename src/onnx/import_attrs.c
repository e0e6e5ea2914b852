/*
 * import_attrs.c — ONNX attributes to values of the op's schema type
 * (graph attributes are imported as sub-networks).
 */
#include "import_int.h"

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

/* Set one ONNX attribute on a layer, converted to the schema type. */
int kiln__imp_set_attr(imp *im, kiln_layer *l, const kiln_op_info *op, const char *lb,
                    const Onnx__AttributeProto *a, const scope *sc, const extra *lead, int nlead,
                    const extra *extras, int nextra, const strset *copy, int depth) {
    const char *an = a->name ? a->name : "";
    const kiln_attr_def *def = NULL;
    for (int i = 0; i < op->nattrs; i++)
        if (!strcmp(op->attrs[i].name, an)) def = &op->attrs[i];
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
        rc = kiln__imp_import_graph(im, a->g, sc, lead, nlead, extras, nextra, copy, sc->net, &sub, depth + 1);
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
                         kiln_attr_type_name(def->type));
    if (rc) return kiln__err_prefix(rc, "%s", lb);
    return 0;
}
