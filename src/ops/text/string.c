/*
 * string.c — ONNX string tensors on kiln's packed form: Cast to and from
 * STRING, and StringNormalizer.
 *
 * kiln tensors hold fixed-size elements, so the ONNX importer represents a
 * string tensor `s` of shape D by two tensors (see kiln/onnx.h):
 *
 *   s        U8 [total bytes]: the strings' bytes, concatenated (no NULs
 *            added; a string may contain any byte);
 *   s:lens   I64 of shape D: the byte length of each string.
 *
 *   kiln::cast_to_string(x)              -> (s, lens, total)
 *   kiln::cast_from_string(s, lens[, like])  attr to (0: like's type) -> y
 *   ai.onnx::StringNormalizer(s, lens)   -> (s, lens, total, count)
 *
 * Numbers are written the way NumPy's str() writes them (the ONNX
 * reference implementation casts with NumPy): the shortest decimal that
 * reads back to the same float32/float64, "1.0" for integral values,
 * "nan", "inf", "-inf"; integers in decimal; bools as "True"/"False".
 * Reading accepts what strtod/strtoll accept ("INF", "NaN", exponents),
 * and surrounding spaces; anything else is an error naming the element.
 * Case changes (StringNormalizer) are ASCII-only.
 */
#include "kiln/plugin.h"
#include "ops/common/ops_util.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STR_MAX_NUM 32 /* bytes one number takes at most */

static void set_desc(kiln_desc *d, kiln_dtype t, int nd, const kiln_expr *const *dims) {
    d->dtype = t;
    d->ndim = nd;
    for (int i = 0; i < nd; i++) d->dims[i] = dims[i];
}

/* inputs i, i+1 must be a packed string tensor */
static int str_check(const kiln_shape_ctx *c, int i, const char *op) {
    if (i + 1 >= c->nin || c->in[i].dtype != KILN_DTYPE_U8 || c->in[i].ndim != 1 ||
        c->in[i + 1].dtype != KILN_DTYPE_I64)
        return kiln_set_error(KILN_EINVAL, "%s: inputs %d and %d must be a string tensor (bytes U8 [n], lengths I64 "
                              "[shape]); the ONNX importer makes these from a tensor(string)", op, i, i + 1);
    return 0;
}

/* Offsets of the strings: *total = sum of lens; errors on negative lengths
 * or lengths past the data. */
static int str_total(const kiln_call *c, int i, int64_t *total, const char *op) {
    const int64_t *len = c->in[i + 1].data;
    int64_t n = kiln_tensor_numel(&c->in[i + 1]), t = 0, have = kiln_tensor_numel(&c->in[i]);
    for (int64_t k = 0; k < n; k++) {
        if (len[k] < 0 || len[k] > have - t)
            return kiln_set_error(KILN_EINVAL, "%s: string %lld has length %lld, past the %lld bytes of data", op,
                                  (long long)k, (long long)len[k], (long long)have);
        t += len[k];
    }
    *total = t;
    return 0;
}

/* ------------------------------------------------------------ to string */

static int fmt_number(char *b, kiln_dtype t, const void *p, int64_t i) {
    if (t == KILN_DTYPE_BOOL) return snprintf(b, STR_MAX_NUM, "%s", ((const uint8_t *)p)[i] ? "True" : "False");
    if (kiln__ops_is_int(t)) {
        if (kiln__ops_is_uint(t) && t == KILN_DTYPE_U64)
            return snprintf(b, STR_MAX_NUM, "%llu", (unsigned long long)((const uint64_t *)p)[i]);
        return snprintf(b, STR_MAX_NUM, "%lld", (long long)kiln__ops_get_i64(p, t, i));
    }
    double v = kiln__ops_get_f64(p, t, i);
    if (isnan(v)) return snprintf(b, STR_MAX_NUM, "nan");
    if (isinf(v)) return snprintf(b, STR_MAX_NUM, "%sinf", v < 0 ? "-" : "");
    int is64 = t == KILN_DTYPE_F64, n = 0;
    for (int prec = 1; prec <= 17; prec++) { /* the shortest text that reads back */
        n = snprintf(b, STR_MAX_NUM, "%.*g", prec, v);
        if (is64 ? strtod(b, NULL) == v : (float)strtod(b, NULL) == (float)v) break;
    }
    if (!strpbrk(b, ".enf") && n + 2 < STR_MAX_NUM) n += snprintf(b + n, STR_MAX_NUM - (size_t)n, ".0");
    return n;
}

static int to_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    if (!kiln__ops_is_num(x->dtype) && x->dtype != KILN_DTYPE_BOOL)
        return kiln_set_error(KILN_ETYPE, "Cast to string: %s is not supported", kiln_dtype_name(x->dtype));
    const kiln_expr *n = kiln_expr_const(c->x, STR_MAX_NUM);
    for (int d = 0; d < x->ndim; d++) n = kiln_expr_mul(c->x, n, x->dims[d]);
    set_desc(&c->out[1], KILN_DTYPE_I64, x->ndim, x->dims);
    const kiln_expr *total = kiln_shape_size_tensor(c, 2, n, n);
    set_desc(&c->out[0], KILN_DTYPE_U8, 1, &total);
    return 0;
}

static int to_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    int64_t n = kiln_tensor_numel(x), off = 0;
    uint8_t *y = c->out[0].data;
    int64_t *len = c->out[1].data;
    for (int64_t i = 0; i < n; i++) {
        char b[STR_MAX_NUM];
        int k = fmt_number(b, x->dtype, x->data, i);
        memcpy(y + off, b, (size_t)k);
        len[i] = k;
        off += k;
    }
    *(int64_t *)c->out[2].data = off;
    return 0;
}

static const kiln_quick_op to_string_op = {
    .ns = "kiln", .name = "cast_to_string", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 3, .shape = to_shape, .impl = to_impl,
    .doc = "Cast to STRING (packed: bytes, lengths; output 2: the byte count)",
};
KILN_OP(to_string_op)

/* ------------------------------------------------------------ from string */

static const kiln_attr_def from_attrs[] = {
    {"to", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "0", 0, "target type (ONNX TensorProto type; 0: input 2's type)"},
    {NULL, 0, 0, NULL, 0, NULL},
};

static int from_shape(kiln_shape_ctx *c) {
    int rc = str_check(c, 0, "Cast from string");
    if (rc) return rc;
    int64_t to = kiln_attrs_int(c->attrs, "to");
    if (!to && c->nin > 2) to = c->in[2].dtype;
    kiln_dtype t = (kiln_dtype)to;
    if (to <= 0 || to >= KILN_DTYPE_COUNT_ || (!kiln__ops_is_num(t) && t != KILN_DTYPE_BOOL))
        return kiln_set_error(KILN_ETYPE, "Cast from string: target type %lld is not supported", (long long)to);
    set_desc(&c->out[0], t, c->in[1].ndim, c->in[1].dims);
    return 0;
}

static int from_impl(const kiln_call *c) {
    int64_t total;
    int rc = str_total(c, 0, &total, "Cast from string");
    if (rc) return rc;
    const uint8_t *s = c->in[0].data;
    const int64_t *len = c->in[1].data;
    kiln_tensor *y = &c->out[0];
    int64_t n = kiln_tensor_numel(y), off = 0;
    for (int64_t i = 0; i < n; i++) {
        char b[128];
        if (len[i] >= (int64_t)sizeof b)
            return kiln_set_error(KILN_EINVAL, "Cast from string: element %lld is %lld bytes long, not a number",
                                  (long long)i, (long long)len[i]);
        memcpy(b, s + off, (size_t)len[i]);
        b[len[i]] = 0;
        off += len[i];
        char *end = NULL;
        errno = 0;
        if (y->dtype == KILN_DTYPE_BOOL) {
            int v = !strcmp(b, "True") || !strcmp(b, "true") ? 1 : !strcmp(b, "False") || !strcmp(b, "false") ? 0
                                                                                                              : -1;
            if (v < 0) v = strtod(b, &end) != 0, v = end && end != b ? v : -1;
            if (v < 0) return kiln_set_error(KILN_EINVAL, "Cast from string: element %lld '%s' is not a bool",
                                             (long long)i, b);
            ((uint8_t *)y->data)[i] = (uint8_t)v;
            continue;
        }
        if (kiln__ops_is_int(y->dtype)) {
            int64_t v = strtoll(b, &end, 10);
            while (end && isspace((unsigned char)*end)) end++;
            if (end == b || (end && *end) || errno == ERANGE)
                return kiln_set_error(KILN_EINVAL, "Cast from string: element %lld '%s' is not an integer",
                                      (long long)i, b);
            kiln__ops_from_i64(&v, y->dtype, (uint8_t *)y->data + (size_t)i * kiln_dtype_size(y->dtype), 1);
            continue;
        }
        double v = strtod(b, &end);
        while (end && isspace((unsigned char)*end)) end++;
        if (end == b || (end && *end))
            return kiln_set_error(KILN_EINVAL, "Cast from string: element %lld '%s' is not a number", (long long)i, b);
        kiln__ops_from_f64(&v, y->dtype, (uint8_t *)y->data + (size_t)i * kiln_dtype_size(y->dtype), 1);
    }
    return 0;
}

static const kiln_quick_op from_string_op = {
    .ns = "kiln", .name = "cast_from_string", .version = 1, .min_inputs = 2, .max_inputs = 3,
    .num_outputs = 1, .attrs = from_attrs, .shape = from_shape, .impl = from_impl,
    .doc = "Cast from STRING (packed: bytes, lengths) to a number type",
};
KILN_OP(from_string_op)

/* ------------------------------------------------------------ StringNormalizer */

static const kiln_attr_def norm_attrs[] = {
    {"case_change_action", KILN_ATTR_STRING, KILN_DTYPE_UNDEFINED, "NONE", 0, "LOWER, UPPER or NONE"},
    {"is_case_sensitive", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "0", 0, "stopword matching is case-sensitive"},
    {"locale", KILN_ATTR_STRING, KILN_DTYPE_UNDEFINED, "", 0, "ignored: case changes are ASCII"},
    {"stopwords", KILN_ATTR_BYTES, KILN_DTYPE_UNDEFINED, NULL, 0,
     "words removed (the importer joins the ONNX string list with NUL bytes)"},
    {NULL, 0, 0, NULL, 0, NULL},
};

static int norm_shape(kiln_shape_ctx *c) {
    int rc = str_check(c, 0, "StringNormalizer");
    if (rc) return rc;
    const kiln_desc *l = &c->in[1];
    int64_t one;
    if (!(l->ndim == 1 || (l->ndim == 2 && kiln_expr_is_const(l->dims[0], &one) && one == 1)))
        return kiln_set_error(KILN_ESHAPE, "StringNormalizer: the input must be [C] or [1, C]");
    const char *a = kiln_attrs_string(c->attrs, "case_change_action");
    if (strcmp(a, "NONE") && strcmp(a, "LOWER") && strcmp(a, "UPPER"))
        return kiln_set_error(KILN_EATTR, "StringNormalizer: case_change_action '%s' (NONE, LOWER or UPPER)", a);
    const kiln_expr *C = l->dims[l->ndim - 1];
    const kiln_expr *upper = kiln_expr_max(c->x, C, kiln_expr_const(c->x, 1));
    const kiln_expr *bytes = c->in[0].dims[0];
    const kiln_expr *tot = kiln_shape_size_tensor(c, 2, bytes, bytes);
    const kiln_expr *cnt = kiln_shape_size_tensor(c, 3, upper, upper);
    set_desc(&c->out[0], KILN_DTYPE_U8, 1, &tot);
    const kiln_expr *d[2] = {l->ndim == 2 ? l->dims[0] : cnt, cnt};
    set_desc(&c->out[1], KILN_DTYPE_I64, l->ndim, d);
    return 0;
}

static int word_eq(const uint8_t *a, size_t la, const char *b, size_t lb, int cs) {
    if (la != lb) return 0;
    for (size_t i = 0; i < la; i++) {
        int x = a[i], y = (unsigned char)b[i];
        if (!cs) x = tolower(x), y = tolower(y);
        if (x != y) return 0;
    }
    return 1;
}

static int norm_impl(const kiln_call *c) {
    int64_t total;
    int rc = str_total(c, 0, &total, "StringNormalizer");
    if (rc) return rc;
    const uint8_t *s = c->in[0].data;
    const int64_t *len = c->in[1].data;
    int64_t n = kiln_tensor_numel(&c->in[1]), off = 0, k = 0, yoff = 0;
    const char *act = kiln_attrs_string(c->attrs, "case_change_action");
    int up = !strcmp(act, "UPPER"), lo = !strcmp(act, "LOWER");
    int cs = kiln_attrs_int(c->attrs, "is_case_sensitive") != 0;
    const kiln_attr_value *sw = kiln_attrs_get(c->attrs, "stopwords");
    uint8_t *y = c->out[0].data;
    int64_t *ylen = c->out[1].data;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *w = s + off;
        size_t wl = (size_t)len[i];
        off += len[i];
        int stop = 0;
        if (sw && sw->present && sw->s)
            for (size_t p = 0; p < sw->len && !stop;) { /* NUL-separated words */
                const char *word = sw->s + p;
                size_t l = strnlen(word, sw->len - p);
                stop = word_eq(w, wl, word, l, cs);
                p += l + 1;
            }
        if (stop) continue;
        for (size_t q = 0; q < wl; q++) y[yoff + (int64_t)q] = (uint8_t)(up ? toupper(w[q]) : lo ? tolower(w[q]) : w[q]);
        ylen[k++] = (int64_t)wl;
        yoff += (int64_t)wl;
    }
    if (k == 0) ylen[k++] = 0; /* everything removed: one empty string */
    *(int64_t *)c->out[2].data = yoff;
    *(int64_t *)c->out[3].data = k;
    return 0;
}

static const kiln_quick_op norm_op = {
    .ns = "ai.onnx", .name = "StringNormalizer", .version = 10, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 4, .attrs = norm_attrs, .shape = norm_shape, .impl = norm_impl,
    .doc = "remove stopwords and change case (packed strings; outputs 2, 3: byte and string counts)",
};
KILN_OP(norm_op)
