/*
 * import_constants.c — initializers and Constant nodes to network
 * constants (string tensors as bytes + lengths).
 */
#include "import_int.h"

/* ------------------------------------------------------------ constants */

int kiln__imp_add_tensor_const(kiln_network *net, const char *name, const kiln__onnx_tensor *t) {
    return kiln_network_add_constant(net, name, t->dtype, t->ndim, t->dims, t->data);
}

/* Constant node -> network constant. */
/* A string constant: `name` (U8 bytes) and `name:lens` (I64, its shape). */
int kiln__imp_add_string_const(imp *im, kiln_network *net, const char *name, int ndim, const int64_t *dims,
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
    if (!rc) rc = kiln__imp_set_str(im, name);
    if (!rc) rc = kiln_network_add_constant(net, name, KILN_DTYPE_U8, 1, bd, b);
    if (!rc) rc = kiln_network_add_constant(net, kiln__imp_part_name(im, pn, sizeof pn, name, 1), KILN_DTYPE_I64, ndim, dims, lens);
    kiln__free(b);
    kiln__free(lens);
    return rc;
}

int kiln__imp_is_string_tensor(const Onnx__TensorProto *t) {
    return t && t->has_data_type && t->data_type == KILN_DTYPE_STRING;
}

int kiln__imp_import_constant(imp *im, kiln_network *net, const Onnx__NodeProto *n) {
    char lb[512];
    kiln__imp_node_label(n, lb, sizeof lb);
    if (n->n_output != 1 || !n->output[0][0])
        return kiln__err(KILN_EFORMAT, "%s: Constant needs exactly one output", lb);
    if (n->n_attribute != 1)
        return kiln__err(KILN_EFORMAT, "%s: Constant needs exactly one value attribute (has %zu)", lb,
                         n->n_attribute);
    const Onnx__AttributeProto *a = n->attribute[0];
    const char *an = a->name ? a->name : "";
    const char *out = n->output[0];
    int rc;
    if (!strcmp(an, "value") && kiln__imp_is_string_tensor(a->t)) {
        if (a->t->n_dims > KILN_MAX_DIMS) return kiln__err(KILN_EUNSUPPORTED, "%s: rank %zu", lb, a->t->n_dims);
        rc = kiln__imp_add_string_const(im, net, out, (int)a->t->n_dims, a->t->dims, a->t->n_string_data, a->t->string_data, lb);
    } else if (!strcmp(an, "value_string") && a->has_s) {
        rc = kiln__imp_add_string_const(im, net, out, 0, NULL, 1, &a->s, lb);
    } else if (!strcmp(an, "value_strings")) {
        int64_t d = (int64_t)a->n_strings;
        rc = kiln__imp_add_string_const(im, net, out, 1, &d, a->n_strings, a->strings, lb);
    } else if (!strcmp(an, "value") && a->t) {
        kiln__onnx_tensor t;
        rc = kiln__onnx_tensor_decode(a->t, im->base_dir, lb, &t);
        if (rc) return rc;
        rc = kiln__imp_add_tensor_const(net, out, &t);
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
        rc = kiln__imp_add_tensor_const(net, out, &t);
        kiln__onnx_tensor_free(&t);
    } else {
        return kiln__err(KILN_EFORMAT, "%s: Constant attribute '%s' is unknown or has no value", lb, an);
    }
    if (rc) return kiln__err_prefix(rc, "%s", lb);
    return 0;
}
