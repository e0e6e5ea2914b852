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
 */
#include "kiln/plugin.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

enum { GS_BILINEAR, GS_NEAREST, GS_BICUBIC };
enum { GS_ZEROS, GS_BORDER, GS_REFLECTION };

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
    int64_t N, C, H, W, Ho, Wo;
    int mode, pad, align;
} gs_job;

static double gs_unnorm(double g, int64_t size, int align) {
    return align ? (g + 1) / 2 * (double)(size - 1) : ((g + 1) * (double)size - 1) / 2;
}

static double gs_reflect(double v, double twice_lo, double twice_hi) {
    if (twice_lo == twice_hi) return 0;
    double mn = twice_lo / 2, span = (twice_hi - twice_lo) / 2;
    v = fabs(v - mn);
    double extra = fmod(v, span);
    double flips = floor(v / span);
    return fmod(flips, 2.0) == 0 ? extra + mn : span - extra + mn;
}

static double gs_clip(double v, int64_t size) {
    return v < 0 ? 0 : v > (double)(size - 1) ? (double)(size - 1) : v;
}

/* Padding applied to a coordinate (border / reflection). */
static double gs_coord(const gs_job *j, double v, int64_t size) {
    if (j->pad == GS_BORDER) return gs_clip(v, size);
    if (j->pad == GS_REFLECTION) {
        v = j->align ? gs_reflect(v, 0, 2.0 * (double)(size - 1)) : gs_reflect(v, -1, 2.0 * (double)size - 1);
        return gs_clip(v, size);
    }
    return v;
}

/* Float coordinate -> index without undefined conversions (NaN and huge
 * values land outside the image). */
static int64_t gs_idx(double v) {
    if (!(v > -1e15 && v < 1e15)) return -1000000000000000LL;
    return (int64_t)v;
}

static float gs_at(const gs_job *j, const float *plane, int64_t yy, int64_t xx) {
    return yy >= 0 && yy < j->H && xx >= 0 && xx < j->W ? plane[yy * j->W + xx] : 0.0f;
}

static double gs_cubic1(double x, double A) { return ((A + 2) * x - (A + 3)) * x * x + 1; }
static double gs_cubic2(double x, double A) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; }
static void gs_coeffs(double t, double *w) {
    const double A = -0.75;
    w[0] = gs_cubic2(t + 1, A);
    w[1] = gs_cubic1(t, A);
    w[2] = gs_cubic1(1 - t, A);
    w[3] = gs_cubic2(2 - t, A);
}

static float gs_sample(const gs_job *j, const float *plane, double gx, double gy) {
    double ix = gs_unnorm(gx, j->W, j->align), iy = gs_unnorm(gy, j->H, j->align);
    if (j->mode == GS_BICUBIC) {
        double fx = floor(ix), fy = floor(iy), wx[4], wy[4];
        gs_coeffs(ix - fx, wx);
        gs_coeffs(iy - fy, wy);
        double acc = 0;
        for (int r = 0; r < 4; r++) {
            double row = 0;
            for (int k = 0; k < 4; k++) {
                double tx = gs_coord(j, fx - 1 + k, j->W), ty = gs_coord(j, fy - 1 + r, j->H);
                row += wx[k] * gs_at(j, plane, gs_idx(ty), gs_idx(tx));
            }
            acc += wy[r] * row;
        }
        return (float)acc;
    }
    ix = gs_coord(j, ix, j->W);
    iy = gs_coord(j, iy, j->H);
    if (j->mode == GS_NEAREST)
        return gs_at(j, plane, gs_idx(nearbyint(iy)), gs_idx(nearbyint(ix)));
    double x0 = floor(ix), y0 = floor(iy), tx = ix - x0, ty = iy - y0;
    int64_t X0 = gs_idx(x0), Y0 = gs_idx(y0);
    return (float)((1 - ty) * ((1 - tx) * gs_at(j, plane, Y0, X0) + tx * gs_at(j, plane, Y0, X0 + 1)) +
                   ty * ((1 - tx) * gs_at(j, plane, Y0 + 1, X0) + tx * gs_at(j, plane, Y0 + 1, X0 + 1)));
}

static void gs_range(void *ud, int64_t b, int64_t e) {
    const gs_job *j = ud;
    for (int64_t p = b; p < e; p++) {
        int64_t n = p / j->C;
        const float *plane = j->x + p * j->H * j->W;
        const float *g = j->grid + n * j->Ho * j->Wo * 2;
        float *y = j->y + p * j->Ho * j->Wo;
        for (int64_t o = 0; o < j->Ho * j->Wo; o++) y[o] = gs_sample(j, plane, g[2 * o], g[2 * o + 1]);
    }
}

static int gs_impl(const kiln_call *c) {
    gs_job j;
    int rc = gs_modes(c->attrs, &j.mode, &j.pad);
    if (rc) return rc;
    const kiln_tensor *x = &c->in[0], *g = &c->in[1];
    if (g->dims[0] != x->dims[0])
        return kiln_set_error(KILN_ESHAPE, "GridSample: grid batch %lld differs from X batch %lld",
                              (long long)g->dims[0], (long long)x->dims[0]);
    j.x = x->data;
    j.grid = g->data;
    j.y = c->out[0].data;
    j.N = x->dims[0];
    j.C = x->dims[1];
    j.H = x->dims[2];
    j.W = x->dims[3];
    j.Ho = g->dims[1];
    j.Wo = g->dims[2];
    j.align = kiln_attrs_int(c->attrs, "align_corners") != 0;
    kiln_exec_parallel_for(c->exec, j.N * j.C, 1, gs_range, &j);
    return 0;
}

static const kiln_quick_op gs_16 = {
    .ns = "ai.onnx", .name = "GridSample", .version = 16,
    .min_inputs = 2, .max_inputs = 2, .num_outputs = 1,
    .attrs = gs_attrs, .shape = gs_shape, .impl = gs_impl,
    .doc = "2-D grid sampling (nearest/bilinear/bicubic; zeros/border/reflection padding)",
};
KILN_OP(gs_16)
