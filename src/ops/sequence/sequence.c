/*
 * sequence.c — ONNX sequence and optional operators on kiln's packed
 * sequence form.
 *
 * kiln networks carry tensors only.  The ONNX importer (src/onnx/import_sequences.c)
 * therefore represents an ONNX sequence value `s` by two tensors:
 *
 *   s         the elements' data, concatenated, 1-D, of the element type;
 *   s:shapes  I64 [count, rank]: row i holds the dims of element i.
 *
 * All elements share one rank (ONNX allows mixed ranks; kiln refuses them
 * with a clear error).  An optional tensor is a sequence of 0 or 1 elements;
 * an optional sequence adds `s:present` (BOOL scalar).  The layers below
 * therefore take each sequence argument as two consecutive inputs (data,
 * shapes) and produce sequences as two consecutive outputs.
 *
 * Shapes stay symbolic where the ONNX graph allows: the shapes tensor
 * carries its rows as symbolic values (kiln_desc.values, up to
 * KILN_MAX_VALUES entries), so SequenceAt / ConcatFromSequence on a
 * sequence built from known tensors get static dims.  Otherwise their
 * dims are data-dependent, each through a size tensor (hidden outputs
 * 1..rank) bounded by the sequence's data length.
 *
 *   SequenceEmpty()                      -> (d, s)   attr elem_rank: kiln's
 *                                                     (set by the importer)
 *   SequenceConstruct(x0..xk)            -> (d, s)
 *   SequenceInsert(d, s, t[, pos])       -> (d, s)
 *   SequenceErase(d, s[, pos])           -> (d, s, len)
 *   SequenceAt(d, s, pos)                -> (y, dims...)
 *   SequenceLength(d, s)                 -> n
 *   SplitToSequence(x[, split])          -> (d, s)
 *   ConcatFromSequence(d, s)             -> (y, dims...)
 *   OptionalHasElement(d, s[, present]) / (x)          -> bool
 *   OptionalGetElement(d, s) -> (y, dims...);  (d, s, present) -> (d, s)
 */
#include "ops/common/ops_util.h"

#include <stdio.h>
#include <string.h>

#define SEQ_NS "ai.onnx"
#define SEQ_TENSOR_OUT (1 + KILN_MAX_DIMS) /* y + one size tensor per dim */

/* ------------------------------------------------------------ run time */

/* A packed sequence as a kernel sees it. */
typedef struct seqv {
    const uint8_t *data;
    const int64_t *shp;  /* n rows of r dims */
    int64_t n;
    int r;
    size_t es;
    int64_t total;       /* elements in data */
} seqv;

/* The first element of an i32 or i64 tensor (a caller's buffer may be
 * unaligned). */
static int64_t ld_index(kiln_dtype dt, const void *p) {
    if (dt == KILN_DTYPE_I32) {
        int32_t w;
        memcpy(&w, p, 4);
        return w;
    }
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Elements of row k; -1 if its dims overflow (shapes are run-time data). */
static int64_t row_numel(const seqv *s, int64_t k) {
    int64_t m = 1;
    for (int d = 0; d < s->r; d++)
        if (__builtin_mul_overflow(m, s->shp[k * s->r + d], &m)) return -1;
    return m;
}

static int64_t row_offset(const seqv *s, int64_t k) {
    int64_t off = 0;
    for (int64_t i = 0; i < k; i++) off += row_numel(s, i);
    return off;
}

/* in[i] = data, in[i+1] = shapes; checks that the two agree. */
static int seq_view(const kiln_call *c, int i, seqv *s, const char *op) {
    const kiln_tensor *d = &c->in[i], *sh = &c->in[i + 1];
    s->data = d->data;
    s->shp = sh->data;
    s->n = sh->dims[0];
    s->r = (int)sh->dims[1];
    s->es = kiln_dtype_size(d->dtype);
    s->total = kiln_tensor_numel(d);
    int64_t sum = 0;
    for (int64_t k = 0; k < s->n; k++) {
        for (int q = 0; q < s->r; q++)
            if (s->shp[k * s->r + q] < 0)
                return kiln_set_error(KILN_EINVAL, "%s: sequence element %lld has a negative dim", op, (long long)k);
        int64_t m = row_numel(s, k);
        if (m < 0 || __builtin_add_overflow(sum, m, &sum))
            return kiln_set_error(KILN_EINVAL, "%s: the sequence's shapes overflow at element %lld", op,
                                  (long long)k);
    }
    if (sum != s->total)
        return kiln_set_error(KILN_EINVAL, "%s: the sequence's shapes describe %lld elements, its data holds %lld",
                              op, (long long)sum, (long long)s->total);
    return 0;
}

/* Position argument `pi` (absent: dflt), in [-n, n + extra). */
static int seq_pos(const kiln_call *c, int pi, int64_t n, int64_t extra, int64_t dflt, int64_t *pos,
                   const char *op) {
    if (pi >= c->nin || !c->in[pi].data) { *pos = dflt; return 0; }
    const kiln_tensor *p = &c->in[pi];
    if (kiln_tensor_numel(p) != 1)
        return kiln_set_error(KILN_ESHAPE, "%s: the position must hold one element", op);
    int64_t v = ld_index(p->dtype, p->data);
    if (v < -n || v >= n + extra)
        return kiln_set_error(KILN_EINVAL, "%s: position %lld is out of range [%lld, %lld] for a sequence of %lld",
                              op, (long long)v, (long long)-n, (long long)(n + extra - 1), (long long)n);
    *pos = v < 0 ? v + n : v;
    return 0;
}

/* Write a tensor output `o` with dims `dims` (rank r) and its size tensors
 * (outputs o+1..o+r when they exist), copying `bytes` from src. */
static void put_tensor(const kiln_call *c, int o, const void *src, size_t bytes, const int64_t *dims, int r) {
    if (bytes) memcpy(c->out[o].data, src, bytes);
    for (int d = 0; d < r && o + 1 + d < c->nout; d++)
        if (c->out[o + 1 + d].data && c->out[o + 1 + d].dtype == KILN_DTYPE_I64)
            *(int64_t *)c->out[o + 1 + d].data = dims[d];
}

/* ------------------------------------------------------------ shape time */

static const kiln_expr *K(kiln_shape_ctx *c, int64_t v) { return kiln_expr_const(c->x, v); }

/* in[i], in[i+1] must be a packed sequence. */
static int seq_check(const kiln_shape_ctx *c, int i, const char *op) {
    if (i + 1 >= c->nin || c->in[i].dtype == KILN_DTYPE_UNDEFINED || c->in[i + 1].dtype != KILN_DTYPE_I64 ||
        c->in[i].ndim != 1 || c->in[i + 1].ndim != 2)
        return kiln_set_error(KILN_EINVAL, "%s: inputs %d and %d must be a sequence (data [len], shapes I64 "
                              "[count, rank]); the ONNX importer makes these from a sequence value", op, i, i + 1);
    return 0;
}

/* Static facts about a sequence argument. */
typedef struct seqd {
    const kiln_expr *len, *n;
    int r;              /* element rank, -1 when not known at build */
    int64_t nk;         /* count when constant, else -1 */
    int rows;           /* 1: row dims known as expressions (row[k*r + d]) */
    const kiln_expr *row[KILN_MAX_VALUES];
} seqd;

static void seq_desc(const kiln_shape_ctx *c, int i, seqd *s) {
    memset(s, 0, sizeof *s);
    s->len = c->in[i].dims[0];
    s->n = c->in[i + 1].dims[0];
    int64_t v;
    s->r = kiln_expr_is_const(c->in[i + 1].dims[1], &v) ? (int)v : -1;
    s->nk = kiln_expr_is_const(s->n, &v) ? v : -1;
    const kiln_desc *sh = &c->in[i + 1];
    if (s->r >= 0 && s->nk >= 0 && s->nk * s->r <= KILN_MAX_VALUES) {
        if (s->nk * s->r == 0) {
            s->rows = 1;
        } else if (sh->nvalues == s->nk * s->r) {
            s->rows = 1;
            for (int k = 0; k < sh->nvalues; k++) s->row[k] = sh->values[k];
        } else if (sh->data) {
            s->rows = 1;
            for (int k = 0; k < s->nk * s->r; k++) s->row[k] = kiln_expr_const(c->x, ((const int64_t *)sh->data)[k]);
        }
    }
}

/* Outputs o (data) and o+1 (shapes) describe a sequence. */
static void seq_out(kiln_shape_ctx *c, int o, kiln_dtype dt, const kiln_expr *len, const kiln_expr *n, int r,
                    const kiln_expr *const *rows) {
    kiln_desc *d = &c->out[o], *s = &c->out[o + 1];
    d->dtype = dt;
    d->ndim = 1;
    d->dims[0] = len;
    s->dtype = KILN_DTYPE_I64;
    s->ndim = 2;
    s->dims[0] = n;
    s->dims[1] = K(c, r < 0 ? 0 : r);
    int64_t nk;
    if (rows && kiln_expr_is_const(n, &nk) && nk * r <= KILN_MAX_VALUES) {
        s->nvalues = (int)(nk * r);
        for (int k = 0; k < s->nvalues; k++) s->values[k] = rows[k];
    }
}

/* A build-time position argument, or 0 when known only at run time. */
static int pos_const(const kiln_shape_ctx *c, int pi, int64_t *v) {
    if (pi < 0 || pi >= c->nin || c->in[pi].dtype == KILN_DTYPE_UNDEFINED) return 0;
    const kiln_desc *p = &c->in[pi];
    if (p->data) {
        *v = ld_index(p->dtype, p->data);
        return 1;
    }
    if (p->nvalues == 1 && kiln_expr_is_const(p->values[0], v)) return 1;
    return 0;
}

static int pos_type(const kiln_shape_ctx *c, int pi, const char *op) {
    if (pi < 0 || pi >= c->nin || c->in[pi].dtype == KILN_DTYPE_UNDEFINED) return 0;
    kiln_dtype t = c->in[pi].dtype;
    if (t != KILN_DTYPE_I64 && t != KILN_DTYPE_I32)
        return kiln_set_error(KILN_ETYPE, "%s: the position must be int32 or int64, not %s", op, kiln_dtype_name(t));
    return 0;
}

/* Output o: a tensor of rank r; dims[d] taken from `known` when non-NULL,
 * else data-dependent through size tensor o+1+d bounded by `upper`.
 * Remaining outputs are unused scalars. */
static void tensor_out(kiln_shape_ctx *c, int o, kiln_dtype dt, int r, const kiln_expr *const *known,
                       const kiln_expr *upper) {
    for (int k = o + 1; k < c->nout; k++) {
        memset(&c->out[k], 0, sizeof c->out[k]);
        c->out[k].dtype = KILN_DTYPE_I64;
        c->out[k].nvalues = -1;
    }
    kiln_desc *y = &c->out[o];
    y->dtype = dt;
    y->ndim = r;
    for (int d = 0; d < r; d++)
        y->dims[d] = known ? known[d] : kiln_shape_size_tensor(c, o + 1 + d, upper, upper);
    /* each dim is bounded by the sequence's length, and so is their product */
    if (!known && r > 1) kiln_shape_numel_bound(c, o, upper);
}

/* ------------------------------------------------------------ SequenceEmpty */

static const kiln_attr_def empty_attrs[] = {
    {"dtype", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "1", 0, "element type (ONNX TensorProto type)"},
    {"elem_rank", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "-1", 0,
     "kiln: element rank when the model declares it (-1: taken from the first insert)"},
    {NULL, 0, 0, NULL, 0, NULL},
};

static int empty_shape(kiln_shape_ctx *c) {
    int64_t dt = kiln_attrs_int(c->attrs, "dtype"), r = kiln_attrs_int(c->attrs, "elem_rank");
    if (dt <= 0 || dt >= KILN_DTYPE_COUNT_ || kiln_dtype_size((kiln_dtype)dt) == 0)
        return kiln_set_error(KILN_ETYPE, "SequenceEmpty: element type %lld is not supported", (long long)dt);
    if (r > KILN_MAX_DIMS) return kiln_set_error(KILN_ESHAPE, "SequenceEmpty: elem_rank %lld", (long long)r);
    seq_out(c, 0, (kiln_dtype)dt, K(c, 0), K(c, 0), (int)r, NULL);
    c->out[1].nvalues = 0;
    return 0;
}
static int empty_impl(const kiln_call *c) {
    (void)c;
    return 0;
}
static const kiln_quick_op seq_empty_op = {
    .ns = SEQ_NS, .name = "SequenceEmpty", .version = 11, .min_inputs = 0, .max_inputs = 0,
    .num_outputs = 2, .attrs = empty_attrs, .shape = empty_shape, .impl = empty_impl,
    .doc = "an empty sequence (packed: data [0], shapes [0, rank])",
};
KILN_OP(seq_empty_op)

/* ------------------------------------------------------------ SequenceConstruct */

static int construct_shape(kiln_shape_ctx *c) {
    if (c->nin < 1) return kiln_set_error(KILN_EINVAL, "SequenceConstruct: needs at least one input");
    const kiln_desc *x0 = &c->in[0];
    const kiln_expr *len = K(c, 0), *rows[KILN_MAX_VALUES];
    int nr = 0;
    for (int i = 0; i < c->nin; i++) {
        const kiln_desc *x = &c->in[i];
        if (x->dtype != x0->dtype)
            return kiln_set_error(KILN_ETYPE, "SequenceConstruct: input %d is %s, input 0 is %s (one element "
                                  "type per sequence)", i, kiln_dtype_name(x->dtype), kiln_dtype_name(x0->dtype));
        if (x->ndim != x0->ndim)
            return kiln_set_error(KILN_EUNSUPPORTED, "SequenceConstruct: input %d has rank %d, input 0 rank %d; "
                                  "kiln sequences hold elements of one rank", i, x->ndim, x0->ndim);
        const kiln_expr *m = K(c, 1);
        for (int d = 0; d < x->ndim; d++) {
            m = kiln_expr_mul(c->x, m, x->dims[d]);
            if (nr < KILN_MAX_VALUES) rows[nr] = x->dims[d];
            nr++;
        }
        len = kiln_expr_add(c->x, len, m);
    }
    seq_out(c, 0, x0->dtype, len, K(c, c->nin), x0->ndim, nr <= KILN_MAX_VALUES ? rows : NULL);
    return 0;
}
static int construct_impl(const kiln_call *c) {
    uint8_t *y = c->out[0].data;
    int64_t *shp = c->out[1].data;
    size_t es = kiln_dtype_size(c->out[0].dtype);
    for (int i = 0; i < c->nin; i++) {
        const kiln_tensor *x = &c->in[i];
        size_t b = (size_t)kiln_tensor_numel(x) * es;
        if (b) memcpy(y, x->data, b);
        y += b;
        for (int d = 0; d < x->ndim; d++) *shp++ = x->dims[d];
    }
    return 0;
}
static const kiln_quick_op seq_construct_op = {
    .ns = SEQ_NS, .name = "SequenceConstruct", .version = 11, .min_inputs = 1, .max_inputs = KILN_MAX_IO - 2,
    .num_outputs = 2, .shape = construct_shape, .impl = construct_impl,
    .doc = "a sequence of the inputs (packed: data, shapes)",
};
KILN_OP(seq_construct_op)

/* ------------------------------------------------------------ SequenceInsert */

static int insert_shape(kiln_shape_ctx *c) {
    int rc = seq_check(c, 0, "SequenceInsert");
    if (rc || (rc = pos_type(c, 3, "SequenceInsert"))) return rc;
    seqd s;
    seq_desc(c, 0, &s);
    const kiln_desc *t = &c->in[2];
    if (t->dtype != c->in[0].dtype)
        return kiln_set_error(KILN_ETYPE, "SequenceInsert: the tensor is %s, the sequence holds %s",
                              kiln_dtype_name(t->dtype), kiln_dtype_name(c->in[0].dtype));
    int empty_any = s.nk == 0; /* an empty sequence takes the tensor's rank */
    if (!empty_any && s.r >= 0 && s.r != t->ndim)
        return kiln_set_error(KILN_EUNSUPPORTED, "SequenceInsert: the tensor has rank %d, the sequence's elements "
                              "rank %d; kiln sequences hold elements of one rank", t->ndim, s.r);
    const kiln_expr *m = K(c, 1);
    for (int d = 0; d < t->ndim; d++) m = kiln_expr_mul(c->x, m, t->dims[d]);
    const kiln_expr *rows[KILN_MAX_VALUES];
    int64_t pos = s.nk;
    int known = s.rows && s.nk >= 0 && (s.nk + 1) * t->ndim <= KILN_MAX_VALUES &&
                (c->nin < 4 || c->in[3].dtype == KILN_DTYPE_UNDEFINED || pos_const(c, 3, &pos));
    if (known) {
        if (pos < 0) pos += s.nk;
        if (pos < 0 || pos > s.nk)
            return kiln_set_error(KILN_EINVAL, "SequenceInsert: position %lld is out of range for a sequence of %lld",
                                  (long long)pos, (long long)s.nk);
        int k = 0, r = t->ndim;
        for (int64_t e = 0; e <= s.nk; e++)
            for (int d = 0; d < r; d++)
                rows[k++] = e == pos ? t->dims[d] : s.row[(e < pos ? e : e - 1) * r + d];
    }
    seq_out(c, 0, t->dtype, kiln_expr_add(c->x, s.len, m), kiln_expr_add(c->x, s.n, K(c, 1)), t->ndim,
            known ? rows : NULL);
    return 0;
}
static int insert_impl(const kiln_call *c) {
    seqv s;
    int rc = seq_view(c, 0, &s, "SequenceInsert");
    if (rc) return rc;
    const kiln_tensor *t = &c->in[2];
    if (s.n > 0 && s.r != t->ndim)
        return kiln_set_error(KILN_EINVAL, "SequenceInsert: the tensor has rank %d, the sequence's elements rank %d",
                              t->ndim, s.r);
    int64_t pos;
    if ((rc = seq_pos(c, 3, s.n, 1, s.n, &pos, "SequenceInsert"))) return rc;
    int64_t off = row_offset(&s, pos), tn = kiln_tensor_numel(t);
    uint8_t *y = c->out[0].data;
    int64_t *shp = c->out[1].data;
    int r = t->ndim;
    memcpy(y, s.data, (size_t)off * s.es);
    memcpy(y + off * s.es, t->data, (size_t)tn * s.es);
    memcpy(y + (off + tn) * s.es, s.data + off * s.es, (size_t)(s.total - off) * s.es);
    for (int64_t e = 0, k = 0; e <= s.n; e++)
        for (int d = 0; d < r; d++) shp[k++] = e == pos ? t->dims[d] : s.shp[(e < pos ? e : e - 1) * r + d];
    return 0;
}
static const kiln_quick_op seq_insert_op = {
    .ns = SEQ_NS, .name = "SequenceInsert", .version = 11, .min_inputs = 3, .max_inputs = 4,
    .num_outputs = 2, .shape = insert_shape, .impl = insert_impl,
    .doc = "insert a tensor into a sequence at a position (default: the end)",
};
KILN_OP(seq_insert_op)

/* ------------------------------------------------------------ SequenceErase */

static int erase_shape(kiln_shape_ctx *c) {
    int rc = seq_check(c, 0, "SequenceErase");
    if (rc || (rc = pos_type(c, 2, "SequenceErase"))) return rc;
    seqd s;
    seq_desc(c, 0, &s);
    if (s.nk == 0) return kiln_set_error(KILN_EINVAL, "SequenceErase: the sequence is empty");
    int64_t pos = s.nk - 1;
    int known = s.rows && s.nk > 0 && s.r >= 0 &&
                (c->nin < 3 || c->in[2].dtype == KILN_DTYPE_UNDEFINED || pos_const(c, 2, &pos));
    const kiln_expr *rows[KILN_MAX_VALUES], *len;
    if (known) {
        if (pos < 0) pos += s.nk;
        if (pos < 0 || pos >= s.nk)
            return kiln_set_error(KILN_EINVAL, "SequenceErase: position %lld is out of range for a sequence of %lld",
                                  (long long)pos, (long long)s.nk);
        int k = 0;
        len = K(c, 0);
        for (int64_t e = 0; e < s.nk; e++) {
            const kiln_expr *m = K(c, 1);
            for (int d = 0; d < s.r; d++) {
                if (e != pos) rows[k++] = s.row[e * s.r + d];
                m = kiln_expr_mul(c->x, m, s.row[e * s.r + d]);
            }
            if (e != pos) len = kiln_expr_add(c->x, len, m);
        }
        /* output 2 stays a plain scalar holding the length */
        c->out[2].dtype = KILN_DTYPE_I64;
        c->out[2].ndim = 0;
    } else {
        len = kiln_shape_size_tensor(c, 2, s.len, s.len);
    }
    seq_out(c, 0, c->in[0].dtype, len, kiln_expr_sub(c->x, s.n, K(c, 1)), s.r, known ? rows : NULL);
    return 0;
}
static int erase_impl(const kiln_call *c) {
    seqv s;
    int rc = seq_view(c, 0, &s, "SequenceErase");
    if (rc) return rc;
    if (s.n == 0) return kiln_set_error(KILN_EINVAL, "SequenceErase: the sequence is empty");
    int64_t pos;
    if ((rc = seq_pos(c, 2, s.n, 0, s.n - 1, &pos, "SequenceErase"))) return rc;
    int64_t off = row_offset(&s, pos), m = row_numel(&s, pos);
    uint8_t *y = c->out[0].data;
    memcpy(y, s.data, (size_t)off * s.es);
    memcpy(y + off * s.es, s.data + (off + m) * s.es, (size_t)(s.total - off - m) * s.es);
    int64_t *shp = c->out[1].data;
    for (int64_t e = 0, k = 0; e < s.n; e++)
        for (int d = 0; d < s.r && e != pos; d++) shp[k++] = s.shp[e * s.r + d];
    if (c->out[2].data) *(int64_t *)c->out[2].data = s.total - m;
    return 0;
}
static const kiln_quick_op seq_erase_op = {
    .ns = SEQ_NS, .name = "SequenceErase", .version = 11, .min_inputs = 2, .max_inputs = 3,
    .num_outputs = 3, .shape = erase_shape, .impl = erase_impl,
    .doc = "remove the element at a position (default: the last); output 2: the data length",
};
KILN_OP(seq_erase_op)

/* ------------------------------------------------------------ SequenceAt / OptionalGetElement */

/* Element `pos` (build-time) of s as expressions, or NULL. */
static const kiln_expr *const *row_of(const seqd *s, int64_t pos) {
    if (!s->rows || s->nk <= 0 || s->r < 0) return NULL;
    if (pos < 0) pos += s->nk;
    if (pos < 0 || pos >= s->nk) return NULL;
    return s->r ? &s->row[pos * s->r] : s->row;
}

static int at_shape_common(kiln_shape_ctx *c, int pi, const char *op) {
    int rc = seq_check(c, 0, op);
    if (rc || (rc = pos_type(c, pi, op))) return rc;
    seqd s;
    seq_desc(c, 0, &s);
    if (s.r < 0)
        return kiln_set_error(KILN_EUNSUPPORTED, "%s: the sequence's element rank is known only at run time; "
                              "declare the element shape in the model (or fix it with --shapes)", op);
    if (s.r > KILN_MAX_DIMS) return kiln_set_error(KILN_ESHAPE, "%s: element rank %d", op, s.r);
    int64_t pos = 0;
    const kiln_expr *const *known = (pi < 0 || pos_const(c, pi, &pos)) ? row_of(&s, pos) : NULL;
    if (s.nk == 0) return kiln_set_error(KILN_EINVAL, "%s: the sequence is empty", op);
    tensor_out(c, 0, c->in[0].dtype, s.r, known, s.len);
    return 0;
}
static int at_impl_common(const kiln_call *c, int pi, const char *op) {
    seqv s;
    int rc = seq_view(c, 0, &s, op);
    if (rc) return rc;
    if (s.n == 0)
        return kiln_set_error(KILN_EINVAL, "%s: the %s is empty", op, pi < 0 ? "optional" : "sequence");
    int64_t pos = 0;
    if (pi >= 0 && (rc = seq_pos(c, pi, s.n, 0, 0, &pos, op))) return rc;
    int64_t off = row_offset(&s, pos), m = row_numel(&s, pos);
    put_tensor(c, 0, s.data + off * s.es, (size_t)m * s.es, &s.shp[pos * s.r], s.r);
    return 0;
}

static int at_shape(kiln_shape_ctx *c) { return at_shape_common(c, 2, "SequenceAt"); }
static int at_impl(const kiln_call *c) { return at_impl_common(c, 2, "SequenceAt"); }
static const kiln_quick_op seq_at_op = {
    .ns = SEQ_NS, .name = "SequenceAt", .version = 11, .min_inputs = 3, .max_inputs = 3,
    .num_outputs = SEQ_TENSOR_OUT, .shape = at_shape, .impl = at_impl,
    .doc = "the element at a position (outputs 1..rank: its dims when data-dependent)",
};
KILN_OP(seq_at_op)

static int get_shape(kiln_shape_ctx *c) {
    if (c->nin == 1) { /* a plain tensor (opset 18): itself */
        tensor_out(c, 0, c->in[0].dtype, c->in[0].ndim, c->in[0].dims, NULL);
        return 0;
    }
    if (c->nin == 3) { /* optional sequence: the sequence */
        int rc = seq_check(c, 0, "OptionalGetElement");
        if (rc) return rc;
        for (int k = 0; k < 2; k++) {
            c->out[k] = c->in[k];
            c->out[k].data = NULL;
        }
        kiln__ops_fill_unused(c, 2);
        return 0;
    }
    return at_shape_common(c, -1, "OptionalGetElement");
}
static int get_impl(const kiln_call *c) {
    if (c->nin == 1) {
        put_tensor(c, 0, c->in[0].data, (size_t)kiln_tensor_numel(&c->in[0]) * kiln_dtype_size(c->in[0].dtype),
                   c->in[0].dims, c->in[0].ndim);
        return 0;
    }
    if (c->nin == 3) {
        if (!*(const uint8_t *)c->in[2].data)
            return kiln_set_error(KILN_EINVAL, "OptionalGetElement: the optional is empty");
        for (int k = 0; k < 2; k++)
            memcpy(c->out[k].data, c->in[k].data,
                   (size_t)kiln_tensor_numel(&c->in[k]) * kiln_dtype_size(c->in[k].dtype));
        kiln__ops_zero_unused(c, 2);
        return 0;
    }
    return at_impl_common(c, -1, "OptionalGetElement");
}
static const kiln_quick_op opt_get_op = {
    .ns = SEQ_NS, .name = "OptionalGetElement", .version = 15, .min_inputs = 1, .max_inputs = 3,
    .num_outputs = SEQ_TENSOR_OUT, .shape = get_shape, .impl = get_impl,
    .doc = "the value of an optional (an error when empty)",
};
KILN_OP(opt_get_op)

/* ------------------------------------------------------------ SequenceLength / OptionalHasElement */

static int length_shape(kiln_shape_ctx *c) {
    int rc = seq_check(c, 0, "SequenceLength");
    if (rc) return rc;
    kiln_desc *y = &c->out[0];
    y->dtype = KILN_DTYPE_I64;
    y->ndim = 0;
    y->nvalues = 1;
    y->values[0] = c->in[1].dims[0];
    return 0;
}
static int length_impl(const kiln_call *c) {
    *(int64_t *)c->out[0].data = c->in[1].dims[0];
    return 0;
}
static const kiln_quick_op seq_length_op = {
    .ns = SEQ_NS, .name = "SequenceLength", .version = 11, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .shape = length_shape, .impl = length_impl,
    .doc = "the number of elements of a sequence",
};
KILN_OP(seq_length_op)

static int has_shape(kiln_shape_ctx *c) {
    if (c->nin >= 2) {
        int rc = seq_check(c, 0, "OptionalHasElement");
        if (rc) return rc;
    }
    kiln_desc *y = &c->out[0];
    y->dtype = KILN_DTYPE_BOOL;
    y->ndim = 0;
    return 0;
}
static int has_impl(const kiln_call *c) {
    uint8_t v = 1;
    if (c->nin == 3) v = *(const uint8_t *)c->in[2].data != 0;
    else if (c->nin == 2) v = c->in[1].dims[0] > 0;
    else v = c->in[0].data != NULL;
    *(uint8_t *)c->out[0].data = v;
    return 0;
}
static const kiln_quick_op opt_has_op = {
    .ns = SEQ_NS, .name = "OptionalHasElement", .version = 15, .min_inputs = 0, .max_inputs = 3,
    .num_outputs = 1, .shape = has_shape, .impl = has_impl,
    .doc = "whether an optional holds a value",
};
KILN_OP(opt_has_op)

/* ------------------------------------------------------------ SplitToSequence */

static const kiln_attr_def split_attrs[] = {
    {"axis", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "0", 0, "axis to split"},
    {"keepdims", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "1", 0, "keep the split axis when split is absent"},
    {NULL, 0, 0, NULL, 0, NULL},
};

static int split_axis(int64_t a, int r, int *ax) {
    if (a < -r || a >= r)
        return kiln_set_error(KILN_EINVAL, "SplitToSequence: axis %lld is out of range for rank %d", (long long)a, r);
    *ax = (int)(a < 0 ? a + r : a);
    return 0;
}

static int split_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    if (x->ndim < 1) return kiln_set_error(KILN_ESHAPE, "SplitToSequence: the input must have rank >= 1");
    int ax = 0, rc = split_axis(kiln_attrs_int(c->attrs, "axis"), x->ndim, &ax);
    if (rc) return rc;
    const kiln_expr *len = K(c, 1), *n, *rows[KILN_MAX_VALUES];
    for (int d = 0; d < x->ndim; d++) len = kiln_expr_mul(c->x, len, x->dims[d]);
    int has_split = c->nin > 1 && c->in[1].dtype != KILN_DTYPE_UNDEFINED;
    int r = x->ndim, known = 0;
    if (!has_split) {
        n = x->dims[ax];
        if (!kiln_attrs_int(c->attrs, "keepdims")) r--;
        int64_t nk;
        if (kiln_expr_is_const(n, &nk) && nk * r <= KILN_MAX_VALUES) {
            known = 1;
            for (int64_t e = 0, k = 0; e < nk; e++)
                for (int d = 0; d < x->ndim; d++)
                    if (d != ax) rows[k++] = x->dims[d];
                    else if (r == x->ndim) rows[k++] = K(c, 1);
        }
    } else {
        const kiln_desc *sp = &c->in[1];
        if (sp->dtype != KILN_DTYPE_I64 && sp->dtype != KILN_DTYPE_I32)
            return kiln_set_error(KILN_ETYPE, "SplitToSequence: split must be int32 or int64");
        if (sp->ndim > 1) return kiln_set_error(KILN_ESHAPE, "SplitToSequence: split must be a scalar or 1-D");
        int64_t sv;
        if (sp->ndim == 1) {
            n = sp->dims[0];
        } else if (pos_const(c, 1, &sv)) {
            if (sv <= 0) return kiln_set_error(KILN_EINVAL, "SplitToSequence: split %lld must be > 0", (long long)sv);
            n = kiln_expr_ceildiv(c->x, x->dims[ax], K(c, sv));
        } else {
            return kiln_set_error(KILN_EUNSUPPORTED, "SplitToSequence: a scalar split must be known at build time "
                                  "(it decides the number of elements)");
        }
        int64_t nk;
        if (sp->ndim == 1 && sp->data && kiln_expr_is_const(n, &nk) && nk * r <= KILN_MAX_VALUES) {
            known = 1;
            for (int64_t e = 0, k = 0; e < nk; e++)
                for (int d = 0; d < r; d++) {
                    int64_t v = sp->dtype == KILN_DTYPE_I32 ? ((const int32_t *)sp->data)[e]
                                                           : ((const int64_t *)sp->data)[e];
                    rows[k++] = d == ax ? K(c, v) : x->dims[d];
                }
        }
    }
    seq_out(c, 0, x->dtype, len, n, r, known ? rows : NULL);
    return 0;
}
static int split_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    int ax = 0;
    int rc = split_axis(kiln_attrs_int(c->attrs, "axis"), x->ndim, &ax);
    if (rc) return rc;
    int64_t outer = 1, inner = 1, A = x->dims[ax];
    for (int d = 0; d < ax; d++) outer *= x->dims[d];
    for (int d = ax + 1; d < x->ndim; d++) inner *= x->dims[d];
    size_t es = kiln_dtype_size(x->dtype);
    int64_t n = c->out[1].dims[0];
    int r = (int)c->out[1].dims[1];
    const kiln_tensor *sp = c->nin > 1 && c->in[1].data ? &c->in[1] : NULL;
    int64_t scalar = sp && sp->ndim == 0 ? ld_index(sp->dtype, sp->data) : 0;
    uint8_t *y = c->out[0].data;
    int64_t *shp = c->out[1].data, start = 0;
    for (int64_t e = 0; e < n; e++) {
        int64_t sz = 1;
        if (sp && sp->ndim == 1)
            sz = sp->dtype == KILN_DTYPE_I32 ? ((const int32_t *)sp->data)[e] : ((const int64_t *)sp->data)[e];
        else if (sp)
            sz = A - start < scalar ? A - start : scalar;
        if (sz < 0 || start + sz > A)
            return kiln_set_error(KILN_EINVAL, "SplitToSequence: the split sizes exceed the axis length %lld",
                                  (long long)A);
        for (int64_t o = 0; o < outer; o++) {
            size_t b = (size_t)(sz * inner) * es;
            memcpy(y, (const uint8_t *)x->data + (size_t)((o * A + start) * inner) * es, b);
            y += b;
        }
        for (int d = 0, k = 0; d < x->ndim; d++)
            if (d != ax) shp[e * r + k++] = x->dims[d];
            else if (r == x->ndim) shp[e * r + k++] = sz;
        start += sz;
    }
    if (start != A)
        return kiln_set_error(KILN_EINVAL, "SplitToSequence: the split sizes sum to %lld, the axis has %lld",
                              (long long)start, (long long)A);
    return 0;
}
static const kiln_quick_op split_op = {
    .ns = SEQ_NS, .name = "SplitToSequence", .version = 11, .min_inputs = 1, .max_inputs = 2,
    .num_outputs = 2, .attrs = split_attrs, .shape = split_shape, .impl = split_impl,
    .doc = "split a tensor along an axis into a sequence",
};
KILN_OP(split_op)

/* ------------------------------------------------------------ ConcatFromSequence */

static const kiln_attr_def concat_attrs[] = {
    {"axis", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, NULL, 1, "concatenation axis"},
    {"new_axis", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "0", 0, "1: stack along a new axis"},
    {NULL, 0, 0, NULL, 0, NULL},
};

static int concat_axis(const kiln_attrs *a, int r, int *ax, int *na) {
    int64_t v = kiln_attrs_int(a, "axis");
    *na = kiln_attrs_int(a, "new_axis") != 0;
    int orank = r + *na;
    if (v < -orank || v >= orank)
        return kiln_set_error(KILN_EINVAL, "ConcatFromSequence: axis %lld is out of range for rank %d",
                              (long long)v, orank);
    *ax = (int)(v < 0 ? v + orank : v);
    return 0;
}

static int concat_shape(kiln_shape_ctx *c) {
    int rc = seq_check(c, 0, "ConcatFromSequence");
    if (rc) return rc;
    seqd s;
    seq_desc(c, 0, &s);
    if (s.r < 0)
        return kiln_set_error(KILN_EUNSUPPORTED, "ConcatFromSequence: the element rank is known only at run time");
    int ax = 0, na = 0;
    if ((rc = concat_axis(c->attrs, s.r, &ax, &na))) return rc;
    if (!na && s.r == 0) return kiln_set_error(KILN_ESHAPE, "ConcatFromSequence: scalars need new_axis=1");
    if (s.nk == 0) return kiln_set_error(KILN_EINVAL, "ConcatFromSequence: the sequence is empty");
    const kiln_expr *dims[KILN_MAX_DIMS];
    int known = s.rows && s.nk > 0;
    if (known) {
        for (int d = 0; d < s.r + na; d++) {
            if (na && d == ax) { dims[d] = K(c, s.nk); continue; }
            int src = na && d > ax ? d - 1 : d;
            const kiln_expr *v = s.row[src];
            for (int64_t e = 1; e < s.nk; e++) {
                const kiln_expr *w = s.row[e * s.r + src];
                if (!na && d == ax) v = kiln_expr_add(c->x, v, w);
                else if (w != v) known = 0; /* not provably equal: check at run time */
            }
            dims[d] = v;
        }
    }
    tensor_out(c, 0, c->in[0].dtype, s.r + na, known ? dims : NULL, s.len);
    return 0;
}
static int concat_impl(const kiln_call *c) {
    seqv s;
    int rc = seq_view(c, 0, &s, "ConcatFromSequence");
    if (rc) return rc;
    int ax = 0, na = 0;
    if ((rc = concat_axis(c->attrs, s.r, &ax, &na))) return rc;
    if (s.n == 0) return kiln_set_error(KILN_EINVAL, "ConcatFromSequence: the sequence is empty");
    /* Element dims must agree except along the axis (new_axis: everywhere). */
    int64_t dims[KILN_MAX_DIMS], A = 0;
    int eax = na ? -1 : ax; /* the element axis that varies */
    for (int64_t e = 0; e < s.n; e++)
        for (int d = 0; d < s.r; d++)
            if (d != eax && s.shp[e * s.r + d] != s.shp[d])
                return kiln_set_error(KILN_ESHAPE, "ConcatFromSequence: element %lld has dim %d = %lld, element 0 "
                                      "has %lld", (long long)e, d, (long long)s.shp[e * s.r + d],
                                      (long long)s.shp[d]);
    for (int64_t e = 0; e < s.n; e++) A += na ? 1 : s.shp[e * s.r + ax];
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < ax; d++) outer *= s.shp[d];
    for (int d = na ? ax : ax + 1; d < s.r; d++) inner *= s.shp[d];
    for (int d = 0; d < s.r + na; d++) dims[d] = d == ax ? A : s.shp[na && d > ax ? d - 1 : d];
    uint8_t *y = c->out[0].data;
    int64_t at = 0;
    for (int64_t e = 0; e < s.n; e++) {
        int64_t a = na ? 1 : s.shp[e * s.r + ax], off = row_offset(&s, e);
        for (int64_t o = 0; o < outer; o++)
            memcpy(y + (size_t)((o * A + at) * inner) * s.es, s.data + (size_t)(off + o * a * inner) * s.es,
                   (size_t)(a * inner) * s.es);
        at += a;
    }
    put_tensor(c, 0, NULL, 0, dims, s.r + na);
    return 0;
}
static const kiln_quick_op concat_op = {
    .ns = SEQ_NS, .name = "ConcatFromSequence", .version = 11, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = SEQ_TENSOR_OUT, .attrs = concat_attrs, .shape = concat_shape, .impl = concat_impl,
    .doc = "concatenate (or stack, new_axis=1) the elements of a sequence",
};
KILN_OP(concat_op)
