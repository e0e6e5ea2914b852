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
 *
 * On the GPU the same tactics exist as CUDA kernels (cuda_impl, the same
 * combinations and tactic lists, timed with CUDA events): tactic 1 one
 * thread per output element, tactic 2 one block per output row.  Padding
 * only moves elements, so FP16 is the 2-byte variant of each kernel.  The
 * AOT variant for the GPU (cuda_aot) is a CUDA C kernel the builder
 * compiles with NVRTC into the engine (cp_cuda_aot).
 */
#include <string.h>

#include <kiln/plugin.h>

#include "sample_cuda.h"
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

/* ---- CUDA: both tactics, for 4- and 2-byte elements.  The dims travel
 * by value in ks_cp (rank <= KILN_MAX_DIMS = 8). */
typedef struct cp_cuda_dims {
    int nd;
    long long in[8], out[8], bf[8];
} cp_cuda_dims;

static const char cp_cuda_src[] =
    "struct ks_cp { int nd; long long in[8], out[8], bf[8]; };\n"
    "__device__ long long ks_cp_src(const ks_cp &p, int last, long long rem) {\n"
    "    long long src = 0, stride = 1;\n"
    "    for (int d = last; d >= 0; d--) {\n"
    "        long long o = rem % p.out[d], i;\n"
    "        rem /= p.out[d];\n"
    "        i = (o - p.bf[d]) % p.in[d];\n"
    "        if (i < 0) i += p.in[d];\n"
    "        src += i * stride;\n"
    "        stride *= p.in[d];\n"
    "    }\n"
    "    return src;\n"
    "}\n"
    "template <typename T> __device__ void ks_cp_elements(const T *x, T *y, const ks_cp &p, long long n) {\n"
    "    long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "    if (e < n) y[e] = x[ks_cp_src(p, p.nd - 1, e)];\n"
    "}\n"
    "template <typename T> __device__ void ks_cp_rows(const T *x, T *y, const ks_cp &p, long long rows) {\n"
    "    const int last = p.nd - 1;\n"
    "    const long long L = p.in[last], left = p.bf[last], W = p.out[last];\n"
    "    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {\n"
    "        const T *in = x + ks_cp_src(p, last - 1, r) * L;\n"
    "        T *out = y + r * W;\n"
    "        for (long long k = threadIdx.x; k < W; k += blockDim.x) {\n"
    "            long long s = k - left;\n"
    "            s = s < 0 ? s + L : s >= L ? s - L : s;\n"
    "            out[k] = in[s];\n"
    "        }\n"
    "    }\n"
    "}\n"
    "#define KS_CP(T, sfx) \\\n"
    "extern \"C\" __global__ void ks_cp_elements_##sfx(const T *x, T *y, ks_cp p, long long n) \\\n"
    "{ ks_cp_elements(x, y, p, n); } \\\n"
    "extern \"C\" __global__ void ks_cp_rows_##sfx(const T *x, T *y, ks_cp p, long long rows) \\\n"
    "{ ks_cp_rows(x, y, p, rows); }\n"
    "KS_CP(unsigned int, b4)\n"
    "KS_CP(unsigned short, b2)\n";

static int cp_cuda(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    cp_pads p;
    int rc = cp_read_pads(c->attrs, x->ndim, &p);
    if (rc) return rc;
    cp_cuda_dims d = {.nd = x->ndim};
    for (int i = 0; i < x->ndim; i++) {
        if (p.before[i] > x->dims[i] || p.after[i] > x->dims[i])
            return kiln_set_error(KILN_ESHAPE, "circ_pad: pads (%lld, %lld) of dim %d exceed its size %lld",
                                  (long long)p.before[i], (long long)p.after[i], i, (long long)x->dims[i]);
        d.in[i] = x->dims[i];
        d.out[i] = c->out[0].dims[i];
        d.bf[i] = p.before[i];
    }
    size_t es = kiln_dtype_size(x->dtype);
    if (es != 4 && es != 2)
        return kiln_set_error(KILN_ETYPE, "circ_pad: %s on the GPU, expected a 4- or 2-byte type",
                              kiln_dtype_name(x->dtype));
    kiln_samples_counters *k = kiln_samples_counters_get();
    if (c->tactic >= 0 && c->tactic <= 2) k->circ_pad_calls[c->tactic]++;
    static kiln_cuda_module *slot;
    kiln_cuda_module *m;
    if ((rc = ks_cuda_module(cp_cuda_src, "sample::circ_pad kernels", &slot, &m))) return rc;
    long long n = kiln_tensor_numel(&c->out[0]);
    if (n == 0) return 0;
    void *xp = x->data, *yp = c->out[0].data;
    int tactic = c->tactic == 0 ? 2 : c->tactic;
    if (tactic == 1) {
        void *args[] = {&xp, &yp, &d, &n};
        return ks_cuda_launch_1d(c, m, es == 4 ? "ks_cp_elements_b4" : "ks_cp_elements_b2", n, args);
    }
    if (tactic != 2)
        return kiln_set_error(KILN_EINVAL, "circ_pad: unknown tactic %d (expected 0, 1 or 2)", c->tactic);
    long long rows = n / d.out[x->ndim - 1];
    unsigned grid[3] = {(unsigned)(rows < 65536 ? rows : 65536), 1, 1}, block[3] = {128, 1, 1};
    void *args[] = {&xp, &yp, &d, &rows};
    return kiln_cuda_launch(c, m, es == 4 ? "ks_cp_rows_b4" : "ks_cp_rows_b2", grid, block, 0, args);
}

/* ---- AOT: the row tactic as C source the builder compiles into the
 * engine, so an engine built with kiln_layer_set_aot(l, 1) (network option
 * "aot", kiln-samples --aot) runs with no plugin library loaded.  The
 * tensor is seen as rank 4 (leading dims of size 1 added); scalars: element
 * size, input dims[4], pads before[4], output dims[4] — 13 int64 values. */
/* The source offset `src` of item `rem` over dims first..0 (C and CUDA C
 * alike: both AOT kernels below expand it). */
#define CP_AOT_SRC_INDEX(first)                                    \
    "        long long src = 0, stride = 1;\n"                      \
    "        for (int d = " first "; d >= 0; d--) {\n"              \
    "            long long o = rem % od[d], i;\n"                   \
    "            rem /= od[d];\n"                                   \
    "            i = (o - bf[d]) % in[d];\n"                        \
    "            if (i < 0) i += in[d];\n"                          \
    "            src += i * stride;\n"                              \
    "            stride *= in[d];\n"                                \
    "        }\n"

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
    "        long long rem = r;\n"
    CP_AOT_SRC_INDEX("2")
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

/* ---- AOT CUDA: the same 13 scalars after the pointers x, y; one thread
 * per output element (grid = ceil(numel / 256) blocks of 256), copying
 * `es` bytes.  The builder compiles it with NVRTC and stores PTX + cubin in
 * the engine; the engine then runs on the GPU with no plugin library. */
static const char cp_cuda_aot_source[] =
    "extern \"C\" __global__ void circ_pad_cuda(const char *x, char *y, long long es, long long i0,\n"
    "        long long i1, long long i2, long long i3, long long b0, long long b1, long long b2,\n"
    "        long long b3, long long o0, long long o1, long long o2, long long o3) {\n"
    "    const long long in[4] = {i0, i1, i2, i3}, bf[4] = {b0, b1, b2, b3}, od[4] = {o0, o1, o2, o3};\n"
    "    long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "    if (e >= o0 * o1 * o2 * o3) return;\n"
    "    long long rem = e;\n"
    CP_AOT_SRC_INDEX("3")
    "    if (es == 4) ((unsigned *)y)[e] = ((const unsigned *)x)[src];\n"
    "    else ((unsigned short *)y)[e] = ((const unsigned short *)x)[src];\n"
    "}\n";

static int cp_cuda_aot(const kiln_shape_ctx *c, const kiln_io_format *io, int tactic, kiln_aot_kernel *k) {
    int rc = cp_aot(c, io, tactic, k); /* the same 13 scalars */
    if (rc) return rc;
    const kiln_expr *numel = kiln_expr_mul(c->x, k->extent, k->scalars[12]);
    k->lang = KILN_AOT_LANG_CUDA;
    k->source = cp_cuda_aot_source;
    k->entry = "circ_pad_cuda";
    k->extent = NULL;
    k->grid[0] = kiln_expr_ceildiv(c->x, numel, kiln_expr_const(c->x, 256));
    k->block[0] = kiln_expr_const(c->x, 256);
    return 0;
}

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
        .cuda_impl = cp_cuda, .cuda_aot = cp_cuda_aot,                       \
    };                                                                        \
    KILN_OP(var)

CP_OP(circ_pad_v1, 1, cp_formats_v1, "circular padding (torch CircularPad); FP32|FP16, default tactic")
CP_OP(circ_pad_v2, 2, cp_formats_v2, "circular padding; FP32|FP16, tactics 1 (per element) and 2 (per row) timed")
CP_OP(circ_pad_v3, 3, cp_formats_v3, "circular padding; FP32 with tactics 1 and 2, FP16 with tactic 2 only")
