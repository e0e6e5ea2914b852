/*
 * circ_pad — circular padding with torch.nn.CircularPad semantics.
 *
 * `pads` lists (before, after) pairs for the LAST dims, starting with the
 * last one: [left, right, top, bottom, front, back, ...], 1 to 4 padded
 * dims.  Every pad must be 0 <= pad <= size of its dim (as in torch: the
 * input wraps around at most once).  Output element o of a padded dim of
 * size n reads input element (o - before) mod n.
 *
 * Two tactics compute the same thing:
 *   1  per element: modular index arithmetic for every output element,
 *   2  per row: the last dim is copied as up to three contiguous runs
 *      (memcpy); the source row is found once per output row.
 * Tactic 0 (the default when the builder is not asked to choose) is 2.
 *
 * The op is registered in three versions that differ only in what they
 * offer the autotuner (the same shape and impl functions):
 *   v1  FP32 or FP16, the default tactic;
 *   v2  FP32 or FP16, tactics 1 and 2 timed (kiln-samples --multi-tactic);
 *   v3  FP32 with tactics 1 and 2, FP16 only with tactic 2
 *       (--per-format-tactics: a tactic list per type combination).
 * Every version also has an AOT kernel (the row tactic as C source, see
 * cp_aot) that the builder compiles into the engine when asked to.
 * timing_id = "pads": two layers with equal pads and equal IO shapes/types
 * time the same, so the builder times them once.
 */
#include <string.h>

#include <kiln/plugin.h>

#include "samples.h"

#define CP_MAX_PADDED 4

/* Validated pads: before/after per dim of the tensor (0 for unpadded dims). */
typedef struct cp_pads {
    int ndim;
    int64_t before[KILN_MAX_DIMS], after[KILN_MAX_DIMS];
} cp_pads;

static int cp_read_pads(const kiln_attrs *a, int ndim, cp_pads *p) {
    const int64_t *v;
    int64_t n = kiln_attrs_ints(a, "pads", &v);
    if (n < 2 || n > 2 * CP_MAX_PADDED || n % 2)
        return kiln_set_error(KILN_EATTR,
                              "circ_pad: expected 'pads' with 2, 4, 6 or 8 values "
                              "(pairs for the last 1-4 dims), found %lld values",
                              (long long)n);
    if (n / 2 > ndim)
        return kiln_set_error(KILN_EATTR, "circ_pad: 'pads' pads %lld dims but the input has rank %d",
                              (long long)(n / 2), ndim);
    memset(p, 0, sizeof *p);
    p->ndim = ndim;
    for (int64_t j = 0; j < n / 2; j++) {
        int d = ndim - 1 - (int)j;
        p->before[d] = v[2 * j];
        p->after[d] = v[2 * j + 1];
        if (p->before[d] < 0 || p->after[d] < 0)
            return kiln_set_error(KILN_EATTR, "circ_pad: expected pads >= 0, found %lld, %lld for dim %d",
                                  (long long)p->before[d], (long long)p->after[d], d);
    }
    return 0;
}

static int cp_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    cp_pads p;
    int rc = cp_read_pads(c->attrs, x->ndim, &p);
    if (rc) return rc;
    c->out[0].dtype = x->dtype;
    c->out[0].ndim = x->ndim;
    for (int d = 0; d < x->ndim; d++) {
        int64_t size;
        if (kiln_expr_is_const(x->dims[d], &size) && (p.before[d] > size || p.after[d] > size))
            return kiln_set_error(KILN_EATTR,
                                  "circ_pad: pads (%lld, %lld) of dim %d exceed its size %lld "
                                  "(circular padding wraps around at most once)",
                                  (long long)p.before[d], (long long)p.after[d], d, (long long)size);
        c->out[0].dims[d] = kiln_expr_add(c->x, x->dims[d],
                                          kiln_expr_const(c->x, p.before[d] + p.after[d]));
    }
    return 0;
}

typedef struct cp_job {
    const char *src;
    char *dst;
    size_t esize;
    int ndim;
    const int64_t *in_dims, *out_dims;
    const cp_pads *p;
} cp_job;

/* Input index of output coordinate o in dim d. */
static inline int64_t cp_src(const cp_job *j, int d, int64_t o) {
    int64_t n = j->in_dims[d], i = (o - j->p->before[d]) % n;
    return i < 0 ? i + n : i;
}

/* Tactic 1: every output element by modular arithmetic. */
static void cp_elements(void *ud, int64_t begin, int64_t end) {
    const cp_job *j = ud;
    for (int64_t e = begin; e < end; e++) {
        int64_t rem = e, src = 0, stride = 1;
        for (int d = j->ndim - 1; d >= 0; d--) {
            int64_t o = rem % j->out_dims[d];
            rem /= j->out_dims[d];
            src += cp_src(j, d, o) * stride;
            stride *= j->in_dims[d];
        }
        memcpy(j->dst + e * j->esize, j->src + src * j->esize, j->esize);
    }
}

/* Tactic 2: output rows; the last dim as three contiguous runs. */
static void cp_rows(void *ud, int64_t begin, int64_t end) {
    const cp_job *j = ud;
    int last = j->ndim - 1;
    int64_t L = j->in_dims[last], left = j->p->before[last], right = j->p->after[last];
    size_t es = j->esize;
    for (int64_t r = begin; r < end; r++) {
        int64_t rem = r, src = 0, stride = 1;
        for (int d = last - 1; d >= 0; d--) {
            int64_t o = rem % j->out_dims[d];
            rem /= j->out_dims[d];
            src += cp_src(j, d, o) * stride;
            stride *= j->in_dims[d];
        }
        const char *in = j->src + src * L * es;
        char *out = j->dst + r * j->out_dims[last] * es;
        memcpy(out, in + (L - left) * es, (size_t)left * es);
        memcpy(out + left * es, in, (size_t)L * es);
        memcpy(out + (left + L) * es, in, (size_t)right * es);
    }
}

static int cp_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    cp_pads p;
    int rc = cp_read_pads(c->attrs, x->ndim, &p);
    if (rc) return rc;
    for (int d = 0; d < x->ndim; d++)
        if (p.before[d] > x->dims[d] || p.after[d] > x->dims[d])
            return kiln_set_error(KILN_ESHAPE, "circ_pad: pads (%lld, %lld) of dim %d exceed its size %lld",
                                  (long long)p.before[d], (long long)p.after[d], d,
                                  (long long)x->dims[d]);
    cp_job j = {x->data, c->out[0].data, kiln_dtype_size(x->dtype), x->ndim,
                x->dims, c->out[0].dims, &p};
    int64_t numel = kiln_tensor_numel(&c->out[0]);
    if (numel == 0) return 0;
    int tactic = c->tactic == 0 ? 2 : c->tactic;
    kiln_samples_counters *k = kiln_samples_counters_get();
    if (c->tactic >= 0 && c->tactic <= 2) k->circ_pad_calls[c->tactic]++;
    if (tactic == 1) {
        kiln_exec_parallel_for(c->exec, numel, 4096, cp_elements, &j);
    } else if (tactic == 2) {
        int64_t row = c->out[0].dims[x->ndim - 1];
        kiln_exec_parallel_for(c->exec, numel / row, 64, cp_rows, &j);
    } else {
        return kiln_set_error(KILN_EINVAL, "circ_pad: unknown tactic %d (expected 0, 1 or 2)", c->tactic);
    }
    return 0;
}

/* ---- AOT: the row tactic as C source the builder compiles into the
 * engine, so an engine built with kiln_layer_set_aot(l, 1) (network option
 * "aot", kiln-samples --aot) runs with no plugin library loaded.  The
 * tensor is seen as rank 4 (leading dims of size 1 added); scalars: element
 * size, input dims[4], pads before[4], output dims[4] — 13 int64 values. */
static const char cp_aot_source[] =
    "#include <string.h>\n"
    "#include <kiln/plugin.h>\n"
    "void circ_pad_rows(const kiln_aot_args *a, int ith, int nth) {\n"
    "    const int64_t es = a->i64[0], *in = a->i64 + 1, *bf = a->i64 + 5, *od = a->i64 + 9;\n"
    "    const char *x = a->in[0];\n"
    "    char *y = a->out[0];\n"
    "    int64_t L = in[3], left = bf[3], right = od[3] - L - left, lo, hi;\n"
    "    kiln_split_range(a->extent, ith, nth, &lo, &hi);\n"
    "    for (int64_t r = lo; r < hi; r++) {\n"
    "        int64_t rem = r, src = 0, stride = 1;\n"
    "        for (int d = 2; d >= 0; d--) {\n"
    "            int64_t o = rem % od[d], i;\n"
    "            rem /= od[d];\n"
    "            i = (o - bf[d]) % in[d];\n"
    "            if (i < 0) i += in[d];\n"
    "            src += i * stride;\n"
    "            stride *= in[d];\n"
    "        }\n"
    "        const char *p = x + src * L * es;\n"
    "        char *q = y + r * od[3] * es;\n"
    "        memcpy(q, p + (L - left) * es, (size_t)(left * es));\n"
    "        memcpy(q + left * es, p, (size_t)(L * es));\n"
    "        memcpy(q + (left + L) * es, p, (size_t)(right * es));\n"
    "    }\n"
    "}\n";

static int cp_aot(const kiln_shape_ctx *c, const kiln_io_format *io, int tactic, kiln_aot_kernel *k) {
    (void)tactic;
    const kiln_desc *x = &c->in[0], *y = &c->out[0];
    if (x->ndim > 4)
        return kiln_set_error(KILN_EUNSUPPORTED, "circ_pad: the AOT kernel handles rank <= 4, found rank %d",
                              x->ndim);
    cp_pads p;
    int rc = cp_read_pads(c->attrs, x->ndim, &p);
    if (rc) return rc;
    const kiln_expr *one = kiln_expr_const(c->x, 1), *rows = one;
    k->source = cp_aot_source;
    k->entry = "circ_pad_rows";
    k->nscalars = 13;
    for (int i = 0; i < 13; i++) k->scalar_types[i] = KILN_SCALAR_I64;
    k->scalars[0] = kiln_expr_const(c->x, (int64_t)kiln_dtype_size(io->dtype[0]));
    for (int j = 0; j < 4; j++) {
        int d = x->ndim - 4 + j; /* < 0: an added leading dim of size 1 */
        k->scalars[1 + j] = d < 0 ? one : x->dims[d];
        k->scalars[5 + j] = kiln_expr_const(c->x, d < 0 ? 0 : p.before[d]);
        k->scalars[9 + j] = d < 0 ? one : y->dims[d];
        if (j < 3) rows = kiln_expr_mul(c->x, rows, k->scalars[9 + j]);
    }
    k->extent = rows;
    return 0;
}
#define CP_AOT_SIGNATURE "i64,i64,i64,i64,i64,i64,i64,i64,i64,i64,i64,i64,i64"

static const kiln_attr_def cp_attrs[] = {
    {"pads", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 1,
     "(before, after) pairs for the last 1-4 dims, last dim first (torch order)"},
    {NULL},
};

static const kiln_combo cp_formats_v1[] = {
    {"FP32|FP16, FP32|FP16", NULL, {0}},
    {NULL, NULL, {0}},
};
static const kiln_combo cp_formats_v2[] = {
    {"FP32|FP16, FP32|FP16", NULL, {1, 2}},
    {NULL, NULL, {0}},
};
static const kiln_combo cp_formats_v3[] = {
    {"FP32, FP32", NULL, {1, 2}},
    {"FP16, FP16", NULL, {2}},
    {NULL, NULL, {0}},
};

#define CP_OP(var, ver, fmts, text)                                           \
    static const kiln_quick_op var = {                                       \
        .ns = "sample", .name = "circ_pad", .version = ver,                  \
        .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,                  \
        .attrs = cp_attrs, .shape = cp_shape, .impl = cp_impl,               \
        .formats = fmts, .timing_id = "pads", .doc = text,                   \
        .aot = cp_aot, .aot_signature = CP_AOT_SIGNATURE,                    \
    };                                                                        \
    KILN_OP(var)

CP_OP(circ_pad_v1, 1, cp_formats_v1, "circular padding (torch CircularPad); FP32|FP16, default tactic")
CP_OP(circ_pad_v2, 2, cp_formats_v2, "circular padding; FP32|FP16, tactics 1 (per element) and 2 (per row) timed")
CP_OP(circ_pad_v3, 3, cp_formats_v3, "circular padding; FP32 with tactics 1 and 2, FP16 with tactic 2 only")
