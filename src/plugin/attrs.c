/*
 * attrs.c — attribute values: owning sets, lossless conversion, text
 * defaults, the binary codec stored in engines, and the accessors ops use.
 *
 * A kiln__attrset holds one value per schema entry (values[i] belongs to
 * defs[i]).  Values are converted to the schema's type when the conversion
 * loses nothing (int -> float, integral float -> int, 0/1 -> bool, array
 * elements between numeric types when every value fits) and rejected with
 * KILN_EATTR otherwise.
 *
 * Codec (little-endian):  u8 version(=1)  u32 count
 *   per attribute: u16 name_len, name, u8 type, u8 elem, payload
 *     INT/BOOL i64 | FLOAT f64 | STRING/BYTES u64 len + bytes |
 *     ARRAY u64 count + elements | TENSOR u8 ndim, i64 dims[ndim], u64 bytes, data
 * Only present attributes are written.  The decoder reads untrusted engine
 * bytes: every length is checked against what is left of the buffer.
 */
#include "kiln_int.h"
#include "core/bytes.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#define CODEC_VERSION 1

static kiln_dtype schema_elem(const kiln_attr_def *d) {
    return d->elem == KILN_DTYPE_UNDEFINED ? KILN_DTYPE_I64 : d->elem;
}

const char *kiln_attr_type_name(kiln_attr_type t) {
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

static int is_int_dtype(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_U8: case KILN_DTYPE_I8: case KILN_DTYPE_U16: case KILN_DTYPE_I16:
    case KILN_DTYPE_I32: case KILN_DTYPE_I64: case KILN_DTYPE_U32: case KILN_DTYPE_U64:
    case KILN_DTYPE_BOOL: return 1;
    default: return 0;
    }
}
static int is_float_dtype(kiln_dtype t) {
    return t == KILN_DTYPE_F32 || t == KILN_DTYPE_F64 || t == KILN_DTYPE_F16 || t == KILN_DTYPE_BF16;
}
static int is_array_elem(kiln_dtype t) { return is_int_dtype(t) || is_float_dtype(t); }

/* One numeric element, read exactly. */
typedef struct num {
    int is_float;
    int64_t i;     /* integers (U64 above INT64_MAX: big = 1, u holds it) */
    uint64_t u;
    int big;
    double d;
} num;

static num elem_read(kiln_dtype t, const void *data, int64_t k) {
    num n = {0};
    const uint8_t *p = (const uint8_t *)data + (size_t)k * kiln_dtype_size(t);
    switch (t) {
    case KILN_DTYPE_U8: n.i = *p; break;
    case KILN_DTYPE_BOOL: n.i = *p != 0; break;
    case KILN_DTYPE_I8: { int8_t v; memcpy(&v, p, 1); n.i = v; break; }
    case KILN_DTYPE_U16: { uint16_t v; memcpy(&v, p, 2); n.i = v; break; }
    case KILN_DTYPE_I16: { int16_t v; memcpy(&v, p, 2); n.i = v; break; }
    case KILN_DTYPE_I32: { int32_t v; memcpy(&v, p, 4); n.i = v; break; }
    case KILN_DTYPE_U32: { uint32_t v; memcpy(&v, p, 4); n.i = v; break; }
    case KILN_DTYPE_I64: memcpy(&n.i, p, 8); break;
    case KILN_DTYPE_U64: {
        memcpy(&n.u, p, 8);
        if (n.u > (uint64_t)INT64_MAX) n.big = 1; else n.i = (int64_t)n.u;
        break;
    }
    case KILN_DTYPE_F32: { float v; memcpy(&v, p, 4); n.is_float = 1; n.d = v; break; }
    case KILN_DTYPE_F64: memcpy(&n.d, p, 8); n.is_float = 1; break;
    case KILN_DTYPE_F16: { uint16_t v; memcpy(&v, p, 2); n.is_float = 1; n.d = kiln_f16_to_f32(v); break; }
    case KILN_DTYPE_BF16: { uint16_t v; memcpy(&v, p, 2); n.is_float = 1; n.d = kiln_bf16_to_f32(v); break; }
    default: break;
    }
    return n;
}

/* Write n as type t into data[k] if that loses nothing; returns 0 or -1. */
static int elem_write(kiln_dtype t, void *data, int64_t k, num n) {
    uint8_t *p = (uint8_t *)data + (size_t)k * kiln_dtype_size(t);
    if (is_int_dtype(t)) {
        int64_t v;
        if (n.is_float) {
            if (!(n.d == floor(n.d)) || n.d < -9223372036854775808.0 || n.d >= 9223372036854775808.0)
                return -1;
            v = (int64_t)n.d;
        } else if (n.big) {
            if (t != KILN_DTYPE_U64) return -1;
            memcpy(p, &n.u, 8);
            return 0;
        } else {
            v = n.i;
        }
        switch (t) {
        case KILN_DTYPE_BOOL: if (v != 0 && v != 1) return -1; *p = (uint8_t)v; return 0;
        case KILN_DTYPE_U8: if (v < 0 || v > UINT8_MAX) return -1; *p = (uint8_t)v; return 0;
        case KILN_DTYPE_I8: { if (v < INT8_MIN || v > INT8_MAX) return -1; int8_t w = (int8_t)v; memcpy(p, &w, 1); return 0; }
        case KILN_DTYPE_U16: { if (v < 0 || v > UINT16_MAX) return -1; uint16_t w = (uint16_t)v; memcpy(p, &w, 2); return 0; }
        case KILN_DTYPE_I16: { if (v < INT16_MIN || v > INT16_MAX) return -1; int16_t w = (int16_t)v; memcpy(p, &w, 2); return 0; }
        case KILN_DTYPE_I32: { if (v < INT32_MIN || v > INT32_MAX) return -1; int32_t w = (int32_t)v; memcpy(p, &w, 4); return 0; }
        case KILN_DTYPE_U32: { if (v < 0 || v > (int64_t)UINT32_MAX) return -1; uint32_t w = (uint32_t)v; memcpy(p, &w, 4); return 0; }
        case KILN_DTYPE_I64: memcpy(p, &v, 8); return 0;
        case KILN_DTYPE_U64: { if (v < 0) return -1; uint64_t w = (uint64_t)v; memcpy(p, &w, 8); return 0; }
        default: return -1;
        }
    }
    double d;
    if (n.is_float) {
        d = n.d;
    } else if (n.big) {
        d = (double)n.u;
        if (d >= 18446744073709551616.0 || (uint64_t)d != n.u) return -1;
    } else {
        d = (double)n.i;
        if (d >= 9223372036854775808.0 || (int64_t)d != n.i) return -1;
    }
    int nan = d != d;
    switch (t) {
    case KILN_DTYPE_F64: memcpy(p, &d, 8); return 0;
    case KILN_DTYPE_F32: {
        float f = (float)d;
        if (!nan && (double)f != d) return -1;
        memcpy(p, &f, 4);
        return 0;
    }
    case KILN_DTYPE_F16: {
        uint16_t h = kiln_f32_to_f16((float)d);
        if (!nan && (double)kiln_f16_to_f32(h) != d) return -1;
        memcpy(p, &h, 2);
        return 0;
    }
    case KILN_DTYPE_BF16: {
        uint16_t h = kiln_f32_to_bf16((float)d);
        if (!nan && (double)kiln_bf16_to_f32(h) != d) return -1;
        memcpy(p, &h, 2);
        return 0;
    }
    default: return -1;
    }
}

/* ---------------------------------------------------------------- values */

void kiln__attr_value_free(kiln_attr_value *v) {
    if (!v) return;
    kiln__free((void *)v->s);
    kiln__free((void *)v->data);
    kiln_attr_type t = v->type;
    kiln_dtype e = v->elem;
    memset(v, 0, sizeof *v);
    v->type = t;
    v->elem = e;
}

/* Deep copy (graph pointers are borrowed). */
static int value_copy(kiln_attr_value *dst, const kiln_attr_value *src) {
    *dst = *src;
    dst->s = NULL;
    dst->data = NULL;
    if (src->s) {
        char *s = kiln__malloc(src->len + 1);
        if (!s) return kiln__err(KILN_ENOMEM, "attribute copy: out of memory");
        memcpy(s, src->s, src->len);
        s[src->len] = '\0';
        dst->s = s;
    }
    if (src->data) {
        size_t bytes = (size_t)src->count * kiln_dtype_size(src->elem);
        void *d = kiln__malloc(bytes);
        if (!d) {
            kiln__free((void *)dst->s);
            dst->s = NULL;
            return kiln__err(KILN_ENOMEM, "attribute copy: out of memory");
        }
        if (bytes) memcpy(d, src->data, bytes);
        dst->data = d;
    }
    return 0;
}

/* ---------------------------------------------------------------- sets */

int kiln__attrset_init(kiln__attrset *s, const kiln__op *op) {
    KILN__ASSERT(s && op);
    memset(s, 0, sizeof *s);
    s->count = op->nattrs;
    s->defs = op->attr_defs;
    if (!op->nattrs) return 0;
    s->v = kiln__calloc((size_t)op->nattrs, sizeof *s->v);
    if (!s->v) return kiln__err(KILN_ENOMEM, "attributes of %s::%s: out of memory", op->ns, op->name);
    for (int i = 0; i < op->nattrs; i++) {
        const kiln_attr_def *d = &op->attr_defs[i];
        if (op->attr_defaults && op->attr_defaults[i].present) {
            int rc = value_copy(&s->v[i], &op->attr_defaults[i]);
            if (rc) {
                kiln__attrset_free(s);
                return rc;
            }
        } else {
            s->v[i].type = d->type;
            s->v[i].elem = d->type == KILN_ATTR_ARRAY ? schema_elem(d) : KILN_DTYPE_UNDEFINED;
        }
    }
    return 0;
}

void kiln__attrset_free(kiln__attrset *s) {
    if (!s) return;
    for (int i = 0; i < s->count && s->v; i++) kiln__attr_value_free(&s->v[i]);
    kiln__free(s->v);
    memset(s, 0, sizeof *s);
}

int kiln__attrset_copy(kiln__attrset *dst, const kiln__attrset *src) {
    KILN__ASSERT(dst && src);
    memset(dst, 0, sizeof *dst);
    dst->count = src->count;
    dst->defs = src->defs;
    if (!src->count) return 0;
    dst->v = kiln__calloc((size_t)src->count, sizeof *dst->v);
    if (!dst->v) return kiln__err(KILN_ENOMEM, "attribute copy: out of memory");
    for (int i = 0; i < src->count; i++) {
        int rc = value_copy(&dst->v[i], &src->v[i]);
        if (rc) {
            kiln__attrset_free(dst);
            return rc;
        }
    }
    return 0;
}

static int find_def(const kiln_attr_def *defs, int count, const char *name) {
    for (int i = 0; i < count; i++)
        if (strcmp(defs[i].name, name) == 0) return i;
    return -1;
}

static void list_names(const kiln_attr_def *defs, int count, char *buf, size_t size) {
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < count && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%s", i ? ", " : "", defs[i].name);
    if (!count) snprintf(buf, size, "none");
}

static void describe(const kiln_attr_value *v, char *buf, size_t size) {
    if (v->type == KILN_ATTR_ARRAY || v->type == KILN_ATTR_TENSOR)
        snprintf(buf, size, "%s of %s", kiln_attr_type_name(v->type), kiln_dtype_name(v->elem));
    else
        snprintf(buf, size, "%s", kiln_attr_type_name(v->type));
}

/* Convert val to the schema type of d into out (deep, owning). */
static int convert(const kiln_attr_def *d, const kiln_attr_value *val, kiln_attr_value *out) {
    char found[64], want[64];
    kiln_attr_value w = {0};
    w.type = d->type;
    w.elem = d->type == KILN_ATTR_ARRAY ? schema_elem(d) : KILN_DTYPE_UNDEFINED;
    describe(val, found, sizeof found);
    describe(&w, want, sizeof want);
    memset(out, 0, sizeof *out);
    out->present = 1;
    out->type = d->type;
    out->elem = w.elem;
    switch (d->type) {
    case KILN_ATTR_INT:
        if (val->type == KILN_ATTR_INT || val->type == KILN_ATTR_BOOL) {
            out->i = val->i;
            return 0;
        }
        if (val->type == KILN_ATTR_FLOAT) {
            if (val->f == floor(val->f) && val->f >= -9223372036854775808.0 && val->f < 9223372036854775808.0) {
                out->i = (int64_t)val->f;
                return 0;
            }
            return kiln__err(KILN_EATTR, "attribute '%s': expected int, found float %g (not integral)",
                             d->name, val->f);
        }
        break;
    case KILN_ATTR_FLOAT:
        if (val->type == KILN_ATTR_FLOAT) {
            out->f = val->f;
            return 0;
        }
        if (val->type == KILN_ATTR_INT) {
            out->f = (double)val->i;
            return 0;
        }
        break;
    case KILN_ATTR_BOOL:
        if (val->type == KILN_ATTR_BOOL || val->type == KILN_ATTR_INT) {
            if (val->i != 0 && val->i != 1)
                return kiln__err(KILN_EATTR, "attribute '%s': expected bool (0 or 1), found %lld", d->name,
                                 (long long)val->i);
            out->i = val->i;
            return 0;
        }
        break;
    case KILN_ATTR_STRING:
    case KILN_ATTR_BYTES:
        if (val->type == KILN_ATTR_STRING || val->type == KILN_ATTR_BYTES) {
            size_t len = val->len;
            if (val->type == KILN_ATTR_STRING && val->s && !len) len = strlen(val->s);
            if (d->type == KILN_ATTR_STRING && val->s && memchr(val->s, 0, len))
                return kiln__err(KILN_EATTR, "attribute '%s': string contains a NUL byte", d->name);
            char *s = kiln__malloc(len + 1);
            if (!s) return kiln__err(KILN_ENOMEM, "attribute '%s': out of memory", d->name);
            if (len) memcpy(s, val->s, len);
            s[len] = '\0';
            out->s = s;
            out->len = len;
            return 0;
        }
        break;
    case KILN_ATTR_ARRAY:
        if (val->type == KILN_ATTR_ARRAY) {
            if (!is_array_elem(val->elem))
                return kiln__err(KILN_EATTR, "attribute '%s': array element type %s is not numeric", d->name,
                                 kiln_dtype_name(val->elem));
            if (val->count < 0 || (val->count > 0 && !val->data))
                return kiln__err(KILN_EATTR, "attribute '%s': array of %lld elements without data", d->name,
                                 (long long)val->count);
            size_t es = kiln_dtype_size(w.elem);
            if ((uint64_t)val->count > SIZE_MAX / 8)
                return kiln__err(KILN_EATTR, "attribute '%s': array too long", d->name);
            void *data = kiln__malloc((size_t)val->count * es);
            if (!data) return kiln__err(KILN_ENOMEM, "attribute '%s': out of memory", d->name);
            for (int64_t k = 0; k < val->count; k++) {
                num n = elem_read(val->elem, val->data, k);
                if (elem_write(w.elem, data, k, n) != 0) {
                    kiln__free(data);
                    char txt[64];
                    if (n.is_float) snprintf(txt, sizeof txt, "%g", n.d);
                    else if (n.big) snprintf(txt, sizeof txt, "%llu", (unsigned long long)n.u);
                    else snprintf(txt, sizeof txt, "%lld", (long long)n.i);
                    return kiln__err(KILN_EATTR,
                                     "attribute '%s': element %lld (%s) of the %s array does not fit %s",
                                     d->name, (long long)k, txt, kiln_dtype_name(val->elem),
                                     kiln_dtype_name(w.elem));
                }
            }
            out->data = data;
            out->count = val->count;
            return 0;
        }
        break;
    case KILN_ATTR_TENSOR:
        if (val->type == KILN_ATTR_TENSOR) {
            if (val->ndim < 0 || val->ndim > KILN_MAX_DIMS)
                return kiln__err(KILN_EATTR, "attribute '%s': tensor rank %d, expected 0..%d", d->name,
                                 val->ndim, KILN_MAX_DIMS);
            int64_t numel = 1;
            for (int k = 0; k < val->ndim; k++) {
                if (val->dims[k] < 0 || (val->dims[k] && numel > INT64_MAX / val->dims[k]))
                    return kiln__err(KILN_EATTR, "attribute '%s': bad tensor dim %lld", d->name,
                                     (long long)val->dims[k]);
                numel *= val->dims[k];
            }
            size_t es = kiln_dtype_size(val->elem);
            if (!es) return kiln__err(KILN_EATTR, "attribute '%s': tensor dtype %s has no size", d->name,
                                      kiln_dtype_name(val->elem));
            if (numel > 0 && !val->data)
                return kiln__err(KILN_EATTR, "attribute '%s': tensor without data", d->name);
            if ((uint64_t)numel > SIZE_MAX / es)
                return kiln__err(KILN_EATTR, "attribute '%s': tensor too large", d->name);
            void *data = kiln__malloc((size_t)numel * es);
            if (!data) return kiln__err(KILN_ENOMEM, "attribute '%s': out of memory", d->name);
            if (numel) memcpy(data, val->data, (size_t)numel * es);
            out->elem = val->elem;
            out->ndim = val->ndim;
            memcpy(out->dims, val->dims, sizeof out->dims);
            out->count = numel;
            out->data = data;
            return 0;
        }
        break;
    case KILN_ATTR_GRAPH:
        if (val->type == KILN_ATTR_GRAPH) {
            out->graph = val->graph;
            return 0;
        }
        break;
    default: break;
    }
    return kiln__err(KILN_EATTR, "attribute '%s': expected %s, found %s", d->name, want, found);
}

int kiln__attrset_set(kiln__attrset *s, const char *name, const kiln_attr_value *val) {
    KILN__ASSERT(s && name && val);
    int i = find_def(s->defs, s->count, name);
    if (i < 0) {
        char names[512];
        list_names(s->defs, s->count, names, sizeof names);
        return kiln__err(KILN_EATTR, "unknown attribute '%s' (the op's attributes: %s)", name, names);
    }
    kiln_attr_value nv;
    int rc = convert(&s->defs[i], val, &nv);
    if (rc) return rc;
    kiln__attr_value_free(&s->v[i]);
    s->v[i] = nv;
    return 0;
}

const char *kiln__attrset_missing(const kiln__attrset *s) {
    for (int i = 0; i < s->count; i++)
        if (s->defs[i].required && !s->v[i].present) return s->defs[i].name;
    return NULL;
}

kiln_attrs kiln__attrset_view(const kiln__attrset *s) {
    kiln_attrs a = {s->count, s->defs, s->v};
    return a;
}

/* ---------------------------------------------------------------- text defaults */

static const char *skip_ws(const char *p) {
    while (isspace((unsigned char)*p)) p++;
    return p;
}

/* Parse one number token [p, end) into n; 0 or -1. */
static int parse_num(const char *p, const char *end, num *n) {
    char tok[128];
    while (p < end && isspace((unsigned char)*p)) p++;
    while (end > p && isspace((unsigned char)end[-1])) end--;
    size_t len = (size_t)(end - p);
    if (!len || len >= sizeof tok) return -1;
    memcpy(tok, p, len);
    tok[len] = '\0';
    memset(n, 0, sizeof *n);
    if (strcasecmp(tok, "true") == 0) { n->i = 1; return 0; }
    if (strcasecmp(tok, "false") == 0) { n->i = 0; return 0; }
    char *e;
    errno = 0;
    long long v = strtoll(tok, &e, 10);
    if (*e == '\0' && errno == 0) {
        n->i = v;
        return 0;
    }
    errno = 0;
    double d = strtod(tok, &e);
    if (*e != '\0') return -1;
    n->is_float = 1;
    n->d = d;
    return 0;
}

int kiln__attr_parse_default(const kiln_attr_def *d, kiln_attr_value *out) {
    KILN__ASSERT(d && out);
    memset(out, 0, sizeof *out);
    out->type = d->type;
    out->elem = d->type == KILN_ATTR_ARRAY ? schema_elem(d) : KILN_DTYPE_UNDEFINED;
    if (!d->def) return 0;
    const char *text = d->def;
    kiln_attr_value v = {0};
    v.present = 1;
    num n;
    switch (d->type) {
    case KILN_ATTR_INT:
    case KILN_ATTR_FLOAT:
    case KILN_ATTR_BOOL:
        if (parse_num(text, text + strlen(text), &n) != 0)
            return kiln__err(KILN_EINVAL, "attribute '%s': default \"%s\" is not a %s", d->name, text,
                             kiln_attr_type_name(d->type));
        if (n.is_float) {
            v.type = KILN_ATTR_FLOAT;
            v.f = n.d;
        } else {
            v.type = KILN_ATTR_INT;
            v.i = n.i;
        }
        break;
    case KILN_ATTR_STRING:
    case KILN_ATTR_BYTES: {
        size_t len = strlen(text);
        v.type = d->type;
        v.s = text;
        v.len = len;
        char *unq = NULL;
        if (len >= 2 && text[0] == '"' && text[len - 1] == '"') {
            unq = kiln__malloc(len);
            if (!unq) return kiln__err(KILN_ENOMEM, "out of memory");
            memcpy(unq, text + 1, len - 2);
            unq[len - 2] = '\0';
            v.s = unq;
            v.len = len - 2;
        }
        int rc = convert(d, &v, out);
        kiln__free(unq);
        if (rc) return kiln__err_prefix(rc, "default \"%s\"", text);
        return 0;
    }
    case KILN_ATTR_ARRAY: {
        const char *p = skip_ws(text), *end = p + strlen(p);
        while (end > p && isspace((unsigned char)end[-1])) end--;
        if (p < end && *p == '[') {
            if (end[-1] != ']')
                return kiln__err(KILN_EINVAL, "attribute '%s': default \"%s\" lacks a closing ']'", d->name,
                                 text);
            p++;
            end--;
        }
        int64_t cnt = 0;
        const char *q = skip_ws(p);
        if (q < end) {
            cnt = 1;
            for (const char *c = p; c < end; c++) cnt += *c == ',';
        }
        double *vals = kiln__calloc((size_t)(cnt ? cnt : 1), sizeof(double));
        int64_t *ivals = kiln__calloc((size_t)(cnt ? cnt : 1), sizeof(int64_t));
        if (!vals || !ivals) {
            kiln__free(vals);
            kiln__free(ivals);
            return kiln__err(KILN_ENOMEM, "out of memory");
        }
        int any_float = 0;
        const char *b = p;
        for (int64_t k = 0; k < cnt; k++) {
            const char *c = b;
            while (c < end && *c != ',') c++;
            if (parse_num(b, c, &n) != 0) {
                kiln__free(vals);
                kiln__free(ivals);
                return kiln__err(KILN_EINVAL, "attribute '%s': default \"%s\": element %lld is not a number",
                                 d->name, text, (long long)k);
            }
            if (n.is_float) any_float = 1;
            vals[k] = n.is_float ? n.d : (double)n.i;
            ivals[k] = n.i;
            b = c + 1;
        }
        v.type = KILN_ATTR_ARRAY;
        v.count = cnt;
        if (any_float) {
            v.elem = KILN_DTYPE_F64;
            v.data = vals;
        } else {
            v.elem = KILN_DTYPE_I64;
            v.data = ivals;
        }
        int rc = convert(d, &v, out);
        kiln__free(vals);
        kiln__free(ivals);
        if (rc) return kiln__err_prefix(rc, "default \"%s\"", text);
        return 0;
    }
    default:
        return kiln__err(KILN_EINVAL, "attribute '%s': a %s attribute cannot have a text default", d->name,
                         kiln_attr_type_name(d->type));
    }
    int rc = convert(d, &v, out);
    if (rc) return kiln__err_prefix(rc, "default \"%s\"", text);
    return 0;
}

/* ---------------------------------------------------------------- codec */
/* Blob (core/bytes.h, little-endian): u8 version, u32 count, then per
 * present attribute: u16 name length + name, u8 type, u8 elem, and
 *   INT/BOOL: i64; FLOAT: f64; STRING/BYTES: u64 length + bytes;
 *   ARRAY: u64 count + elements; TENSOR: u8 rank, u64 dims, u64 bytes +
 *   elements. */

int kiln__attrs_serialize(const kiln__attrset *s, void *buf, size_t *size) {
    KILN__ASSERT(s && size);
    kiln__wbuf w;
    kiln__w_init_fixed(&w, buf, *size);
    uint32_t count = 0;
    for (int i = 0; i < s->count; i++) count += s->v[i].present != 0;
    kiln__w_u8(&w, CODEC_VERSION);
    kiln__w_u32(&w, count);
    for (int i = 0; i < s->count; i++) {
        const kiln_attr_value *v = &s->v[i];
        const kiln_attr_def *d = &s->defs[i];
        if (!v->present) continue;
        if (strlen(d->name) > UINT16_MAX)
            return kiln__err(KILN_EINVAL, "attribute name '%.32s...' too long", d->name);
        kiln__w_str(&w, d->name, 2);
        kiln__w_u8(&w, (uint8_t)v->type);
        kiln__w_u8(&w, (uint8_t)v->elem);
        switch (v->type) {
        case KILN_ATTR_INT:
        case KILN_ATTR_BOOL: kiln__w_i64(&w, v->i); break;
        case KILN_ATTR_FLOAT: kiln__w_f64(&w, v->f); break;
        case KILN_ATTR_STRING:
        case KILN_ATTR_BYTES:
            kiln__w_u64(&w, v->len);
            kiln__w_bytes(&w, v->s, v->len);
            break;
        case KILN_ATTR_ARRAY:
            kiln__w_u64(&w, (uint64_t)v->count);
            kiln__w_elems(&w, v->data, (size_t)v->count, kiln_dtype_size(v->elem));
            break;
        case KILN_ATTR_TENSOR: {
            kiln__w_u8(&w, (uint8_t)v->ndim);
            for (int k = 0; k < v->ndim; k++) kiln__w_i64(&w, v->dims[k]);
            size_t es = kiln_dtype_size(v->elem);
            kiln__w_u64(&w, (uint64_t)v->count * es);
            kiln__w_elems(&w, v->data, (size_t)v->count, es);
            break;
        }
        default:
            return kiln__err(KILN_EUNSUPPORTED, "attribute '%s': %s attributes cannot be serialized", d->name,
                             kiln_attr_type_name(v->type));
        }
    }
    if (buf && w.n > *size) {
        size_t have = *size;
        *size = w.n;
        return kiln__err(KILN_EINVAL, "attribute serialization: buffer of %zu bytes, %zu needed", have, w.n);
    }
    *size = w.n;
    return 0;
}

static int decode_one(kiln__rbuf *r, kiln__attrset *s, const kiln__op *op, uint8_t *seen) {
    size_t name_off = r->at + 2;
    char *name = kiln__r_str(r, 2, 255, "attribute name");
    kiln_attr_type type = (kiln_attr_type)kiln__r_u8(r, "attribute type");
    kiln_dtype elem = (kiln_dtype)kiln__r_u8(r, "attribute element type");
    if (r->err) {
        kiln__free(name);
        return r->err;
    }
    int i = name ? find_def(s->defs, s->count, name) : -1;
    if (i < 0) {
        kiln__r_fail_at(r, name_off, KILN_EFORMAT, "unknown attribute '%s' for op %s::%s v%d",
                        name ? name : "", op->ns, op->name, op->version);
        kiln__free(name);
        return r->err;
    }
    kiln__free(name);
    const kiln_attr_def *d = &s->defs[i];
    if (seen[i]) return kiln__r_fail_at(r, name_off, KILN_EFORMAT, "'%s' stored twice", d->name);
    seen[i] = 1;
    if (type != d->type || (type == KILN_ATTR_ARRAY && elem != schema_elem(d)))
        return kiln__r_fail_at(r, name_off, KILN_EFORMAT, "'%s' stored as %s (elem %s), schema says %s",
                               d->name, kiln_attr_type_name(type), kiln_dtype_name(elem), kiln_attr_type_name(d->type));
    kiln_attr_value v = {0};
    v.present = 1;
    v.type = type;
    switch (type) {
    case KILN_ATTR_INT:
    case KILN_ATTR_BOOL:
        v.i = kiln__r_i64(r, d->name);
        if (!r->err && type == KILN_ATTR_BOOL && v.i != 0 && v.i != 1)
            return kiln__r_fail_at(r, r->at - 8, KILN_EFORMAT, "bool '%s' has value %lld", d->name,
                                   (long long)v.i);
        break;
    case KILN_ATTR_FLOAT: v.f = kiln__r_f64(r, d->name); break;
    case KILN_ATTR_STRING:
    case KILN_ATTR_BYTES: {
        uint64_t len = kiln__r_u64(r, d->name);
        const uint8_t *src = kiln__r_span(r, len, d->name);
        if (r->err) return r->err;
        if (type == KILN_ATTR_STRING && len && memchr(src, 0, (size_t)len))
            return kiln__r_fail_at(r, r->at - (size_t)len, KILN_EFORMAT, "string '%s' contains a NUL byte",
                                   d->name);
        char *str = kiln__malloc((size_t)len + 1);
        if (!str) return kiln__err(KILN_ENOMEM, "out of memory");
        if (len) memcpy(str, src, (size_t)len);
        str[len] = '\0';
        v.s = str;
        v.len = (size_t)len;
        break;
    }
    case KILN_ATTR_ARRAY: {
        uint64_t cnt = kiln__r_u64(r, d->name);
        size_t es = kiln_dtype_size(elem);
        if (r->err) return r->err;
        if (!es || !is_array_elem(elem))
            return kiln__r_fail(r, KILN_EFORMAT, "array '%s' has element type %d", d->name, (int)elem);
        if (cnt > kiln__r_left(r) / es)
            return kiln__r_fail(r, KILN_EFORMAT, "array '%s' of %llu elements exceeds the %zu bytes left",
                                d->name, (unsigned long long)cnt, kiln__r_left(r));
        void *data = kiln__malloc(cnt ? (size_t)cnt * es : 1);
        if (!data) return kiln__err(KILN_ENOMEM, "out of memory");
        kiln__r_elems(r, data, cnt, es, d->name);
        v.elem = elem;
        v.count = (int64_t)cnt;
        v.data = data;
        break;
    }
    case KILN_ATTR_TENSOR: {
        int ndim = kiln__r_u8(r, d->name);
        if (r->err) return r->err;
        if (ndim > KILN_MAX_DIMS)
            return kiln__r_fail(r, KILN_EFORMAT, "tensor '%s' has rank %d (max %d)", d->name, ndim,
                                KILN_MAX_DIMS);
        size_t es = kiln_dtype_size(elem);
        if (!es) return kiln__r_fail(r, KILN_EFORMAT, "tensor '%s' has dtype %d", d->name, (int)elem);
        uint64_t numel = 1;
        for (int k = 0; k < ndim; k++) {
            uint64_t dk = kiln__r_u64(r, d->name);
            if (r->err) return r->err;
            if (dk > (uint64_t)INT64_MAX || (dk && numel > UINT64_MAX / dk))
                return kiln__r_fail(r, KILN_EFORMAT, "tensor '%s' dim %d is %llu", d->name, k,
                                    (unsigned long long)dk);
            v.dims[k] = (int64_t)dk;
            numel *= dk;
        }
        uint64_t bytes = kiln__r_u64(r, d->name);
        if (r->err) return r->err;
        if (numel > UINT64_MAX / es || numel * es != bytes || bytes > kiln__r_left(r))
            return kiln__r_fail(r, KILN_EFORMAT, "tensor '%s' claims %llu bytes (%llu elements), %zu left",
                                d->name, (unsigned long long)bytes, (unsigned long long)numel,
                                kiln__r_left(r));
        void *data = kiln__malloc(bytes ? (size_t)bytes : 1);
        if (!data) return kiln__err(KILN_ENOMEM, "out of memory");
        kiln__r_elems(r, data, numel, es, d->name);
        v.elem = elem;
        v.ndim = ndim;
        v.count = (int64_t)numel;
        v.data = data;
        break;
    }
    default:
        return kiln__r_fail_at(r, name_off, KILN_EFORMAT, "'%s' has type %d, which cannot be stored", d->name,
                               (int)type);
    }
    if (r->err) return r->err;
    kiln__attr_value_free(&s->v[i]);
    s->v[i] = v;
    return 0;
}

int kiln__attrs_deserialize(kiln__attrset *s, const kiln__op *op, const void *buf, size_t size) {
    KILN__ASSERT(s && op);
    int rc = kiln__attrset_init(s, op);
    if (rc) return rc;
    kiln__rbuf r;
    kiln__r_init(&r, buf, size, "attribute blob");
    int version = kiln__r_u8(&r, "codec version");
    uint32_t count = kiln__r_u32(&r, "attribute count");
    if ((rc = r.err)) goto fail;
    if (version != CODEC_VERSION) {
        rc = kiln__r_fail_at(&r, 0, KILN_EVERSION, "codec version %d, expected %d", version, CODEC_VERSION);
        goto fail;
    }
    if (count > (uint32_t)s->count) {
        rc = kiln__r_fail_at(&r, 1, KILN_EFORMAT, "%u attributes, the op %s::%s has %d", count, op->ns,
                             op->name, s->count);
        goto fail;
    }
    uint8_t *seen = kiln__calloc((size_t)(s->count ? s->count : 1), 1);
    if (!seen) {
        rc = kiln__err(KILN_ENOMEM, "out of memory");
        goto fail;
    }
    for (uint32_t k = 0; k < count && !rc; k++) rc = decode_one(&r, s, op, seen);
    kiln__free(seen);
    if (rc || (rc = kiln__r_end(&r))) goto fail;
    return 0;
fail:
    kiln__attrset_free(s);
    return rc;
}

/* ---------------------------------------------------------------- for people */

void kiln__attrset_describe(const kiln__attrset *s, char *buf, size_t size) {
    size_t off = 0;
#define PUT(...)                                                                                   \
    do {                                                                                           \
        if (off < size) off += (size_t)snprintf(buf + off, size - off, __VA_ARGS__);               \
    } while (0)
    if (size) buf[0] = 0;
    for (int i = 0; i < s->count; i++) {
        const kiln_attr_value *v = &s->v[i];
        if (!v->present) continue;
        PUT("%s%s=", off ? " " : "", s->defs[i].name);
        switch (v->type) {
        case KILN_ATTR_INT:
        case KILN_ATTR_BOOL: PUT("%lld", (long long)v->i); break;
        case KILN_ATTR_FLOAT: PUT("%g", v->f); break;
        case KILN_ATTR_STRING: PUT("\"%.80s%s\"", v->s ? v->s : "", v->s && strlen(v->s) > 80 ? "..." : ""); break;
        case KILN_ATTR_BYTES: PUT("<%zu bytes>", v->len); break;
        case KILN_ATTR_ARRAY:
            PUT("[");
            for (int64_t k = 0; k < v->count && k < 16; k++) {
                num n = elem_read(v->elem, v->data, k);
                if (n.is_float) PUT("%s%g", k ? ", " : "", n.d);
                else if (n.big) PUT("%s%llu", k ? ", " : "", (unsigned long long)n.u);
                else PUT("%s%lld", k ? ", " : "", (long long)n.i);
            }
            PUT("%s]", v->count > 16 ? ", ..." : "");
            break;
        case KILN_ATTR_TENSOR:
            PUT("%s[", kiln_dtype_name(v->elem));
            for (int k = 0; k < v->ndim; k++) PUT("%s%lld", k ? "x" : "", (long long)v->dims[k]);
            PUT("] tensor");
            break;
        case KILN_ATTR_GRAPH: PUT("<graph>"); break;
        }
    }
#undef PUT
}

/* ---------------------------------------------------------------- accessors */

/* What a misused accessor returns: absent, so the kernel's own "not set"
 * path runs; the call is failed anyway once the callback returns
 * (kiln__misuse_take).  Array readers get a zeroed buffer, never NULL. */
static const int64_t k_zeros[256];
static const kiln_attr_value k_absent = {.present = 0, .s = "", .data = k_zeros};

/* The schema's attribute names, for "no such attribute" messages. */
static void names_of(const kiln_attrs *a, char *buf, size_t size) {
    size_t off = 0;
    buf[0] = 0;
    for (int i = 0; i < a->count && off < size; i++)
        off += (size_t)snprintf(buf + off, size - off, "%s%s", i ? ", " : "", a->defs[i].name);
    if (!a->count) snprintf(buf, size, "none");
}

static const kiln_attr_value *get_checked(const kiln_attrs *a, const char *name, kiln_attr_type t1,
                                          kiln_attr_type t2, const char *fn) {
    if (!a || !name) {
        kiln__misuse("%s: invalid argument, expected %s", fn, !a ? "an attribute set, found NULL"
                                                                  : "an attribute name, found NULL");
        return &k_absent;
    }
    for (int i = 0; i < a->count; i++) {
        if (strcmp(a->defs[i].name, name) != 0) continue;
        if (a->defs[i].type != t1 && a->defs[i].type != t2) {
            kiln__misuse("%s(\"%s\"): the schema declares a %s attribute, this accessor reads %s", fn, name,
                         kiln_attr_type_name(a->defs[i].type), kiln_attr_type_name(t1));
            return &k_absent;
        }
        return &a->v[i];
    }
    char names[512];
    names_of(a, names, sizeof names);
    kiln__misuse("%s(\"%s\"): no such attribute in the op's schema (its attributes: %s)", fn, name, names);
    return &k_absent;
}

const kiln_attr_value *kiln_attrs_get(const kiln_attrs *a, const char *name) {
    if (!a || !name) {
        kiln__misuse("kiln_attrs_get: invalid argument, expected an attribute set and a name, found NULL");
        return NULL;
    }
    for (int i = 0; i < a->count; i++)
        if (strcmp(a->defs[i].name, name) == 0) return &a->v[i];
    return NULL;
}

int64_t kiln_attrs_int(const kiln_attrs *a, const char *name) {
    const kiln_attr_value *v = get_checked(a, name, KILN_ATTR_INT, KILN_ATTR_BOOL, "kiln_attrs_int");
    return v->present ? v->i : 0;
}

double kiln_attrs_float(const kiln_attrs *a, const char *name) {
    const kiln_attr_value *v = get_checked(a, name, KILN_ATTR_FLOAT, KILN_ATTR_FLOAT, "kiln_attrs_float");
    return v->present ? v->f : 0.0;
}

const char *kiln_attrs_string(const kiln_attrs *a, const char *name) {
    const kiln_attr_value *v = get_checked(a, name, KILN_ATTR_STRING, KILN_ATTR_BYTES, "kiln_attrs_string");
    return v == &k_absent ? "" : v->present ? v->s : NULL;
}

/* Widened copies of short arrays live in a small per-thread ring so a kernel
 * can hold a few at once. */
#define RING 8
#define RING_LEN 256
static _Thread_local int64_t t_iring[RING][RING_LEN];
static _Thread_local float t_fring[RING][RING_LEN];
static _Thread_local unsigned t_iring_pos, t_fring_pos;

/* Absent (or misused: then *v is a zeroed buffer): -1. */
static int64_t absent_array(const kiln_attr_value *val, const void **v) {
    if (v) *v = val == &k_absent ? k_zeros : NULL;
    return -1;
}

int64_t kiln_attrs_ints(const kiln_attrs *a, const char *name, const int64_t **v) {
    const kiln_attr_value *val = get_checked(a, name, KILN_ATTR_ARRAY, KILN_ATTR_ARRAY, "kiln_attrs_ints");
    if (!val->present) return absent_array(val, (const void **)v);
    if (val->elem == KILN_DTYPE_I64) {
        if (v) *v = val->data;
        return val->count;
    }
    if (!is_int_dtype(val->elem) || val->count > RING_LEN) {
        kiln__misuse("kiln_attrs_ints(\"%s\"): %lld elements of %s cannot be widened to int64 (an integer "
                     "array of at most %d elements, or I64, expected; read it with kiln_attrs_get)",
                     name, (long long)val->count, kiln_dtype_name(val->elem), RING_LEN);
        return absent_array(&k_absent, (const void **)v);
    }
    int64_t *buf = t_iring[t_iring_pos++ % RING];
    for (int64_t k = 0; k < val->count; k++) {
        num n = elem_read(val->elem, val->data, k);
        buf[k] = n.big ? (int64_t)n.u : n.i;
    }
    if (v) *v = buf;
    return val->count;
}

int64_t kiln_attrs_floats(const kiln_attrs *a, const char *name, const float **v) {
    const kiln_attr_value *val = get_checked(a, name, KILN_ATTR_ARRAY, KILN_ATTR_ARRAY, "kiln_attrs_floats");
    if (!val->present) return absent_array(val, (const void **)v);
    if (val->elem == KILN_DTYPE_F32) {
        if (v) *v = val->data;
        return val->count;
    }
    if (val->count > RING_LEN) {
        kiln__misuse("kiln_attrs_floats(\"%s\"): %lld elements of %s cannot be converted to float (an F32 "
                     "array, or one of at most %d elements, expected; read it with kiln_attrs_get)",
                     name, (long long)val->count, kiln_dtype_name(val->elem), RING_LEN);
        return absent_array(&k_absent, (const void **)v);
    }
    float *buf = t_fring[t_fring_pos++ % RING];
    for (int64_t k = 0; k < val->count; k++) {
        num n = elem_read(val->elem, val->data, k);
        buf[k] = n.is_float ? (float)n.d : n.big ? (float)n.u : (float)n.i;
    }
    if (v) *v = buf;
    return val->count;
}
