/*
 * interpolate.c — sample::interpolate, a plugin compiled from this source
 * file at first use and cached (see kiln_plugin_compile_load).
 *
 * It is not part of any prebuilt library: a program hands the path of this
 * file to kiln_plugin_compile_load(), which compiles it with the system C
 * compiler into the compile cache ($KILN_CACHE_DIR, $XDG_CACHE_HOME/kiln or
 * ~/.cache/kiln) and loads it.  The next run finds it in the cache (with
 * verbose logging on: "compile cache hit <key> (<path>)") and compiles
 * nothing; editing this file, the flags or the compiler makes a new entry.
 *
 * The op: resize an NCHW f32 tensor by `scale` in H and W.
 *   out H = floor(H * scale), out W = floor(W * scale)
 *   mode "nearest":  src = min(floor(dst / scale), size - 1)
 *   mode "bilinear": src = (dst + 0.5) / scale - 0.5 clamped to [0, size - 1]
 *                    (half-pixel centres, torch align_corners=False)
 */
#include <kiln/plugin.h>

#include <math.h>
#include <string.h>

static const kiln_attr_def interp_attrs[] = {
    {.name = "scale", .type = KILN_ATTR_FLOAT, .def = "2.0",
     .doc = "factor for H and W (> 0): out = floor(in * scale)"},
    {.name = "mode", .type = KILN_ATTR_STRING, .def = "nearest",
     .doc = "\"nearest\" or \"bilinear\" (half-pixel centres)"},
    {NULL},
};

static int interp_params(const kiln_attrs *a, double *scale, int *bilinear) {
    *scale = kiln_attrs_float(a, "scale");
    if (!(*scale > 0.0) || !isfinite(*scale))
        return kiln_set_error(KILN_EATTR, "sample::interpolate: scale must be > 0, got %g",
                              *scale);
    const char *m = kiln_attrs_string(a, "mode");
    if (strcmp(m, "nearest") == 0) *bilinear = 0;
    else if (strcmp(m, "bilinear") == 0) *bilinear = 1;
    else
        return kiln_set_error(KILN_EATTR,
                              "sample::interpolate: mode \"%s\", expected \"nearest\" or "
                              "\"bilinear\"", m);
    return 0;
}

/* floor(d * scale).  Symbolic dims need the scale as a fraction num/den
 * with a power-of-two den (exact for scales such as 0.5, 1.5, 2, 0.75). */
static const kiln_expr *scaled_dim(kiln_exprs *x, const kiln_expr *d, double scale) {
    int64_t v;
    if (kiln_expr_is_const(d, &v)) return kiln_expr_const(x, (int64_t)floor((double)v * scale));
    int64_t den = 1;
    while (den < (1 << 20) && scale * (double)den != floor(scale * (double)den)) den *= 2;
    int64_t num = (int64_t)llround(scale * (double)den);
    return kiln_expr_floordiv(x, kiln_expr_mul(x, d, kiln_expr_const(x, num)),
                              kiln_expr_const(x, den));
}

static int interp_shape(kiln_shape_ctx *c) {
    const kiln_desc *in = &c->in[0];
    if (in->dtype != KILN_DTYPE_F32)
        return kiln_set_error(KILN_ETYPE, "sample::interpolate: input is %s, expected f32",
                              kiln_dtype_name(in->dtype));
    if (in->ndim != 4)
        return kiln_set_error(KILN_ESHAPE,
                              "sample::interpolate: input has rank %d, expected 4 (NCHW)",
                              in->ndim);
    double scale;
    int bilinear;
    int rc = interp_params(c->attrs, &scale, &bilinear);
    if (rc) return rc;
    c->out[0].dtype = KILN_DTYPE_F32;
    c->out[0].ndim = 4;
    c->out[0].dims[0] = in->dims[0];
    c->out[0].dims[1] = in->dims[1];
    c->out[0].dims[2] = scaled_dim(c->x, in->dims[2], scale);
    c->out[0].dims[3] = scaled_dim(c->x, in->dims[3], scale);
    return 0;
}

typedef struct interp_job {
    const kiln_tensor *in;
    kiln_tensor *out;
    double scale;
    int bilinear;
} interp_job;

static inline int64_t clampi(int64_t v, int64_t lo, int64_t hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* Source coordinate and weight of the upper neighbour for bilinear. */
static inline void bil_coord(int64_t o, double scale, int64_t size, int64_t *i0, int64_t *i1,
                             float *w) {
    double s = ((double)o + 0.5) / scale - 0.5;
    if (s < 0) s = 0;
    if (s > (double)(size - 1)) s = (double)(size - 1);
    *i0 = (int64_t)s;
    *i1 = *i0 + 1 < size ? *i0 + 1 : size - 1;
    *w = (float)(s - (double)*i0);
}

/* Planes [b, e) of N*C. */
static void interp_planes(void *ud, int64_t b, int64_t e) {
    const interp_job *j = ud;
    const kiln_tensor *in = j->in;
    kiln_tensor *out = j->out;
    const int64_t C = in->dims[1], H = in->dims[2], W = in->dims[3];
    const int64_t OH = out->dims[2], OW = out->dims[3];
    const float *x = in->data;
    float *y = out->data;
    for (int64_t p = b; p < e; p++) {
        int64_t n = p / C, ch = p % C;
        const float *xp = x + n * in->strides[0] + ch * in->strides[1];
        float *yp = y + n * out->strides[0] + ch * out->strides[1];
        for (int64_t oy = 0; oy < OH; oy++) {
            float *yr = yp + oy * out->strides[2];
            if (!j->bilinear) {
                int64_t sy = clampi((int64_t)floor((double)oy / j->scale), 0, H - 1);
                const float *xr = xp + sy * in->strides[2];
                for (int64_t ox = 0; ox < OW; ox++) {
                    int64_t sx = clampi((int64_t)floor((double)ox / j->scale), 0, W - 1);
                    yr[ox * out->strides[3]] = xr[sx * in->strides[3]];
                }
            } else {
                int64_t y0, y1;
                float wy;
                bil_coord(oy, j->scale, H, &y0, &y1, &wy);
                const float *r0 = xp + y0 * in->strides[2], *r1 = xp + y1 * in->strides[2];
                for (int64_t ox = 0; ox < OW; ox++) {
                    int64_t x0, x1;
                    float wx;
                    bil_coord(ox, j->scale, W, &x0, &x1, &wx);
                    int64_t s0 = x0 * in->strides[3], s1 = x1 * in->strides[3];
                    float top = r0[s0] + (r0[s1] - r0[s0]) * wx;
                    float bot = r1[s0] + (r1[s1] - r1[s0]) * wx;
                    yr[ox * out->strides[3]] = top + (bot - top) * wy;
                }
            }
        }
    }
}

static int interp_impl(const kiln_call *c) {
    interp_job j = {&c->in[0], &c->out[0], 0, 0};
    int rc = interp_params(c->attrs, &j.scale, &j.bilinear);
    if (rc) return rc;
    int64_t planes = c->in[0].dims[0] * c->in[0].dims[1];
    if (planes == 0 || c->out[0].dims[2] == 0 || c->out[0].dims[3] == 0) return 0;
    if (c->in[0].dims[2] == 0 || c->in[0].dims[3] == 0)
        return kiln_set_error(KILN_ESHAPE, "sample::interpolate: empty input plane (%lldx%lld)",
                              (long long)c->in[0].dims[2], (long long)c->in[0].dims[3]);
    kiln_exec_parallel_for(c->exec, planes, 1, interp_planes, &j);
    return 0;
}

/* ---- the GPU side: the same arithmetic (coordinates in double, weights
 * in float) as CUDA C, one thread per output element of the contiguous
 * NCHW tensors a CUDA layer gets.  kiln compiles it with NVRTC the first
 * time it runs (kiln_cuda_module_get): compiling this file from source
 * compiles its GPU part too, at first use on the GPU. */
static const char interp_cuda_src[] =
    "__device__ long long ks_clampi(long long v, long long lo, long long hi) {\n"
    "    return v < lo ? lo : v > hi ? hi : v;\n"
    "}\n"
    "__device__ void ks_bil(long long o, double scale, long long size, long long *i0, long long *i1, float *w) {\n"
    "    double s = ((double)o + 0.5) / scale - 0.5;\n"
    "    if (s < 0) s = 0;\n"
    "    if (s > (double)(size - 1)) s = (double)(size - 1);\n"
    "    *i0 = (long long)s;\n"
    "    *i1 = *i0 + 1 < size ? *i0 + 1 : size - 1;\n"
    "    *w = (float)(s - (double)*i0);\n"
    "}\n"
    "extern \"C\" __global__ void ks_interpolate(const float *x, float *y, long long planes, long long H,\n"
    "        long long W, long long OH, long long OW, double scale, int bilinear) {\n"
    "    long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "    if (e >= planes * OH * OW) return;\n"
    "    long long ox = e % OW, oy = e / OW % OH, p = e / (OW * OH);\n"
    "    const float *xp = x + p * H * W;\n"
    "    if (!bilinear) {\n"
    "        long long sy = ks_clampi((long long)floor((double)oy / scale), 0, H - 1);\n"
    "        long long sx = ks_clampi((long long)floor((double)ox / scale), 0, W - 1);\n"
    "        y[e] = xp[sy * W + sx];\n"
    "        return;\n"
    "    }\n"
    "    long long y0, y1, x0, x1;\n"
    "    float wy, wx;\n"
    "    ks_bil(oy, scale, H, &y0, &y1, &wy);\n"
    "    ks_bil(ox, scale, W, &x0, &x1, &wx);\n"
    "    const float *r0 = xp + y0 * W, *r1 = xp + y1 * W;\n"
    "    float top = r0[x0] + (r0[x1] - r0[x0]) * wx;\n"
    "    float bot = r1[x0] + (r1[x1] - r1[x0]) * wx;\n"
    "    y[e] = top + (bot - top) * wy;\n"
    "}\n";

static int interp_cuda(const kiln_call *c) {
    static kiln_cuda_module *mod;
    double scale;
    int bilinear;
    int rc = interp_params(c->attrs, &scale, &bilinear);
    if (rc) return rc;
    long long planes = c->in[0].dims[0] * c->in[0].dims[1], H = c->in[0].dims[2], W = c->in[0].dims[3];
    long long OH = c->out[0].dims[2], OW = c->out[0].dims[3], n = planes * OH * OW;
    if (n == 0) return 0;
    if (H == 0 || W == 0)
        return kiln_set_error(KILN_ESHAPE, "sample::interpolate: empty input plane (%lldx%lld)", H, W);
    kiln_cuda_module *m = __atomic_load_n(&mod, __ATOMIC_ACQUIRE);
    if (!m && (rc = kiln_cuda_module_get(interp_cuda_src, KILN_AOT_LANG_CUDA, "sample::interpolate kernel", &m)))
        return rc;
    __atomic_store_n(&mod, m, __ATOMIC_RELEASE);
    void *x = c->in[0].data, *y = c->out[0].data;
    void *args[] = {&x, &y, &planes, &H, &W, &OH, &OW, &scale, &bilinear};
    unsigned grid[3] = {(unsigned)((n + 255) / 256), 1, 1}, block[3] = {256, 1, 1};
    return kiln_cuda_launch(c, m, "ks_interpolate", grid, block, 0, args);
}

static const kiln_quick_op interpolate_op = {
    .ns = "sample", .name = "interpolate", .version = 1,
    .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
    .attrs = interp_attrs,
    .shape = interp_shape,
    .impl = interp_impl,
    .cuda_impl = interp_cuda,
    .timing_id = "scale,mode",
    .doc = "resize NCHW f32 by `scale` (nearest or bilinear); compiled from source at first use",
};
KILN_OP(interpolate_op)
