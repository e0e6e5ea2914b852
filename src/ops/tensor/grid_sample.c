/*
 * grid_sample.c — ONNX GridSample (16), 2-D: X [N, C, H, W] sampled at
 * grid [N, Hout, Wout, 2] (x, y normalized to [-1, 1]) -> [N, C, Hout, Wout].
 *
 * Semantics of torch.nn.functional.grid_sample (which the ONNX operator was
 * specified from):
 *   unnormalize  align_corners: (g + 1) / 2 * (size - 1)
 *                else:          ((g + 1) * size - 1) / 2
 *   padding      zeros: taps outside read 0; border: coordinates clipped to
 *                [0, size - 1]; reflection: coordinates reflected at the
 *                borders (pixel centers with align_corners, else pixel
 *                edges), then clipped.
 *   mode         nearest (round half to even), bilinear, bicubic (A = -0.75,
 *                4x4 taps, padding applied per tap).
 * f32, any layout-free LINEAR tensors; threads split the (n, c) planes.
 * The sampling arithmetic is grid_sample_math.h, shared with the GPU
 * kernel (grid_sample.cu, launched by grid_sample_cuda.c).
 */
#include "kiln/plugin.h"
#include "ops/common/cuda_impls.h"
#include "ops/tensor/grid_sample_math.h"

#include <string.h>

static const kiln_attr_def gs_attrs[] = {
    {"align_corners", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "0", 0, "1: -1/1 are the corner pixels' centers"},
    {"mode", KILN_ATTR_STRING, KILN_DTYPE_UNDEFINED, "bilinear", 0, "bilinear, nearest or bicubic"},
    {"padding_mode", KILN_ATTR_STRING, KILN_DTYPE_UNDEFINED, "zeros", 0, "zeros, border or reflection"},
    {NULL, 0, 0, NULL, 0, NULL},
};

static int gs_modes(const kiln_attrs *a, int *mode, int *pad) {
    const char *m = kiln_attrs_string(a, "mode"), *p = kiln_attrs_string(a, "padding_mode");
    if (!strcmp(m, "bilinear") || !strcmp(m, "linear")) *mode = GS_BILINEAR;
    else if (!strcmp(m, "nearest")) *mode = GS_NEAREST;
    else if (!strcmp(m, "bicubic") || !strcmp(m, "cubic")) *mode = GS_BICUBIC;
    else return kiln_set_error(KILN_EATTR, "GridSample: mode '%s' (expected bilinear, nearest or bicubic)", m);
    if (!strcmp(p, "zeros")) *pad = GS_ZEROS;
    else if (!strcmp(p, "border")) *pad = GS_BORDER;
    else if (!strcmp(p, "reflection")) *pad = GS_REFLECTION;
    else return kiln_set_error(KILN_EATTR, "GridSample: padding_mode '%s' (expected zeros, border or "
                               "reflection)", p);
    return 0;
}

static int gs_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0], *g = &c->in[1];
    int mode, pad;
    int rc = gs_modes(c->attrs, &mode, &pad);
    if (rc) return rc;
    if (x->dtype != KILN_DTYPE_F32 || g->dtype != KILN_DTYPE_F32)
        return kiln_set_error(KILN_ETYPE, "GridSample: X and grid must be f32, found %s and %s",
                              kiln_dtype_name(x->dtype), kiln_dtype_name(g->dtype));
    if (x->ndim != 4 || g->ndim != 4)
        return kiln_set_error(KILN_EUNSUPPORTED, "GridSample: only 2-D sampling (X [N, C, H, W], grid "
                              "[N, Hout, Wout, 2]); found ranks %d and %d", x->ndim, g->ndim);
    int64_t two;
    if (kiln_expr_is_const(g->dims[3], &two) && two != 2)
        return kiln_set_error(KILN_ESHAPE, "GridSample: grid dim 3 is %lld, expected 2", (long long)two);
    c->out[0].dtype = KILN_DTYPE_F32;
    c->out[0].ndim = 4;
    c->out[0].dims[0] = x->dims[0];
    c->out[0].dims[1] = x->dims[1];
    c->out[0].dims[2] = g->dims[1];
    c->out[0].dims[3] = g->dims[2];
    return 0;
}

typedef struct gs_job {
    const float *x, *grid;
    float *y;
    int64_t N, C, Ho, Wo;
    kiln_cu_grid_sample geo;
} gs_job;

static void gs_range(void *ud, int64_t b, int64_t e) {
    const gs_job *j = ud;
    for (int64_t p = b; p < e; p++) {
        int64_t n = p / j->C;
        const float *plane = j->x + p * j->geo.H * j->geo.W;
        const float *g = j->grid + n * j->Ho * j->Wo * 2;
        float *y = j->y + p * j->Ho * j->Wo;
        for (int64_t o = 0; o < j->Ho * j->Wo; o++) y[o] = gs_sample(&j->geo, plane, g[2 * o], g[2 * o + 1]);
    }
}

/* The geometry both devices sample with. */
static int gs_geo(const kiln_call *c, kiln_cu_grid_sample *geo) {
    int mode, pad;
    int rc = gs_modes(c->attrs, &mode, &pad);
    if (rc) return rc;
    const kiln_tensor *x = &c->in[0], *g = &c->in[1];
    if (g->dims[0] != x->dims[0])
        return kiln_set_error(KILN_ESHAPE, "GridSample: grid batch %lld differs from X batch %lld",
                              (long long)g->dims[0], (long long)x->dims[0]);
    geo->H = x->dims[2];
    geo->W = x->dims[3];
    geo->mode = mode;
    geo->pad = pad;
    geo->align = kiln_attrs_int(c->attrs, "align_corners") != 0;
    return 0;
}

static int gs_impl(const kiln_call *c) {
    gs_job j;
    int rc = gs_geo(c, &j.geo);
    if (rc) return rc;
    const kiln_tensor *x = &c->in[0], *g = &c->in[1];
    j.x = x->data;
    j.grid = g->data;
    j.y = c->out[0].data;
    j.N = x->dims[0];
    j.C = x->dims[1];
    j.Ho = g->dims[1];
    j.Wo = g->dims[2];
    kiln_exec_parallel_for(c->exec, j.N * j.C, 1, gs_range, &j);
    return 0;
}

static int gs_cuda(const kiln_call *c) {
    kiln_cu_grid_sample geo;
    int rc = gs_geo(c, &geo);
    return rc ? rc : kiln__cu_grid_sample(c, &geo);
}
static const kiln_combo gs_cuda_formats[] = {{.types = "FP32"}, {0}};

static const kiln_quick_op gs_16 = {
    .ns = "ai.onnx", .name = "GridSample", .version = 16,
    .min_inputs = 2, .max_inputs = 2, .num_outputs = 1,
    .attrs = gs_attrs, .shape = gs_shape, .impl = gs_impl,
    .doc = "2-D grid sampling (nearest/bilinear/bicubic; zeros/border/reflection padding)",
    .cuda_impl = gs_cuda, .cuda_formats = gs_cuda_formats,
};
KILN_OP(gs_16)
