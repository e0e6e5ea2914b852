/*
 * roi_align.c — ONNX RoiAlign (10, 16).
 *
 * X [N, C, H, W], rois [R, 4] (x1, y1, x2, y2 in input coordinates before
 * spatial_scale), batch_indices [R] -> Y [R, C, output_height, output_width].
 * Each output bin averages (mode "avg") or maxes (mode "max") a grid of
 * bilinear samples: sampling_ratio per side, or ceil(roi size / bins) when
 * 0.  coordinate_transformation_mode "half_pixel" (opset 16 default) shifts
 * by -0.5 pixel; "output_half_pixel" (opset 10) does not and makes rois at
 * least 1 pixel.  Samples more than one pixel outside read 0.  "max" takes
 * the largest weighted corner term, as ONNX Runtime and the ONNX reference
 * do.  f32, f64 and f16 (computed in double).
 */
#include "ops/common/ops_util.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static const kiln_attr_def roi_attrs_10[] = {
    {"mode", KILN_ATTR_STRING, KILN_DTYPE_UNDEFINED, "avg", 0, "avg or max"},
    {"output_height", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "1", 0, NULL},
    {"output_width", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "1", 0, NULL},
    {"sampling_ratio", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "0", 0, "samples per bin side (0: adaptive)"},
    {"spatial_scale", KILN_ATTR_FLOAT, KILN_DTYPE_UNDEFINED, "1.0", 0, "roi coordinates scale"},
    {"coordinate_transformation_mode", KILN_ATTR_STRING, KILN_DTYPE_UNDEFINED, "output_half_pixel", 0,
     "half_pixel or output_half_pixel"},
    {NULL, 0, 0, NULL, 0, NULL},
};
static const kiln_attr_def roi_attrs_16[] = {
    {"mode", KILN_ATTR_STRING, KILN_DTYPE_UNDEFINED, "avg", 0, "avg or max"},
    {"output_height", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "1", 0, NULL},
    {"output_width", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "1", 0, NULL},
    {"sampling_ratio", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "0", 0, "samples per bin side (0: adaptive)"},
    {"spatial_scale", KILN_ATTR_FLOAT, KILN_DTYPE_UNDEFINED, "1.0", 0, "roi coordinates scale"},
    {"coordinate_transformation_mode", KILN_ATTR_STRING, KILN_DTYPE_UNDEFINED, "half_pixel", 0,
     "half_pixel or output_half_pixel"},
    {NULL, 0, 0, NULL, 0, NULL},
};

static int roi_float(kiln_dtype t) {
    return t == KILN_DTYPE_F32 || t == KILN_DTYPE_F64 || t == KILN_DTYPE_F16;
}

static int roi_check(const kiln_attrs *a, int *max_mode, int *half) {
    const char *m = kiln_attrs_string(a, "mode"), *t = kiln_attrs_string(a, "coordinate_transformation_mode");
    if (!strcmp(m, "avg")) *max_mode = 0;
    else if (!strcmp(m, "max")) *max_mode = 1;
    else return kiln_set_error(KILN_EATTR, "RoiAlign: mode '%s' (expected avg or max)", m);
    if (!strcmp(t, "half_pixel")) *half = 1;
    else if (!strcmp(t, "output_half_pixel")) *half = 0;
    else return kiln_set_error(KILN_EATTR, "RoiAlign: coordinate_transformation_mode '%s' (expected "
                               "half_pixel or output_half_pixel)", t);
    if (kiln_attrs_int(a, "output_height") < 1 || kiln_attrs_int(a, "output_width") < 1 ||
        kiln_attrs_int(a, "sampling_ratio") < 0)
        return kiln_set_error(KILN_EATTR, "RoiAlign: output_height/width must be >= 1 and sampling_ratio >= 0");
    return 0;
}

static int roi_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0], *r = &c->in[1], *b = &c->in[2];
    int mm, hp, rc = roi_check(c->attrs, &mm, &hp);
    if (rc) return rc;
    if (!roi_float(x->dtype) || r->dtype != x->dtype)
        return kiln_set_error(KILN_ETYPE, "RoiAlign: X and rois must be the same float type, found %s and %s",
                              kiln_dtype_name(x->dtype), kiln_dtype_name(r->dtype));
    if (b->dtype != KILN_DTYPE_I64 && b->dtype != KILN_DTYPE_I32)
        return kiln_set_error(KILN_ETYPE, "RoiAlign: batch_indices must be int64, found %s", kiln_dtype_name(b->dtype));
    if (x->ndim != 4 || r->ndim != 2 || b->ndim != 1)
        return kiln_set_error(KILN_ESHAPE, "RoiAlign: expected X [N, C, H, W], rois [R, 4], batch_indices [R]; "
                              "found ranks %d, %d, %d", x->ndim, r->ndim, b->ndim);
    c->out[0].dtype = x->dtype;
    c->out[0].ndim = 4;
    c->out[0].dims[0] = r->dims[0];
    c->out[0].dims[1] = x->dims[1];
    c->out[0].dims[2] = kiln_expr_const(c->x, kiln_attrs_int(c->attrs, "output_height"));
    c->out[0].dims[3] = kiln_expr_const(c->x, kiln_attrs_int(c->attrs, "output_width"));
    return 0;
}

/* One bilinear sample: the four corners and weights (w = 0: outside). */
typedef struct roi_tap {
    int64_t p[4];
    double w[4];
} roi_tap;

static roi_tap roi_sample(double y, double x, int64_t H, int64_t W) {
    roi_tap t;
    memset(&t, 0, sizeof t);
    if (!(y >= -1.0 && y <= (double)H && x >= -1.0 && x <= (double)W)) return t; /* also NaN */
    if (y < 0) y = 0;
    if (x < 0) x = 0;
    int64_t y0 = (int64_t)y, x0 = (int64_t)x, y1, x1;
    if (y0 >= H - 1) { y1 = y0 = H - 1; y = (double)y0; } else y1 = y0 + 1;
    if (x0 >= W - 1) { x1 = x0 = W - 1; x = (double)x0; } else x1 = x0 + 1;
    double ly = y - (double)y0, lx = x - (double)x0, hy = 1 - ly, hx = 1 - lx;
    t.p[0] = y0 * W + x0;
    t.p[1] = y0 * W + x1;
    t.p[2] = y1 * W + x0;
    t.p[3] = y1 * W + x1;
    t.w[0] = hy * hx;
    t.w[1] = hy * lx;
    t.w[2] = ly * hx;
    t.w[3] = ly * lx;
    return t;
}

static int roi_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0], *r = &c->in[1], *bi = &c->in[2];
    kiln_tensor *y = &c->out[0];
    int max_mode, half, rc = roi_check(c->attrs, &max_mode, &half);
    if (rc) return rc;
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3], R = r->dims[0];
    int64_t PH = y->dims[2], PW = y->dims[3], sr = kiln_attrs_int(c->attrs, "sampling_ratio");
    double scale = kiln_attrs_float(c->attrs, "spatial_scale"), off = half ? 0.5 : 0.0;
    if (r->dims[1] != 4 || bi->dims[0] != R)
        return kiln_set_error(KILN_ESHAPE, "RoiAlign: rois must be [R, 4] and batch_indices [R]");
    for (int64_t n = 0; n < R; n++) {
        int64_t b = bi->dtype == KILN_DTYPE_I64 ? ((const int64_t *)bi->data)[n] : ((const int32_t *)bi->data)[n];
        if (b < 0 || b >= N)
            return kiln_set_error(KILN_EINVAL, "RoiAlign: batch index %lld of roi %lld outside [0, %lld)",
                                  (long long)b, (long long)n, (long long)N);
        double x1 = kiln__ops_get_f64(r->data, r->dtype, 4 * n) * scale - off, y1 = kiln__ops_get_f64(r->data, r->dtype, 4 * n + 1) * scale - off;
        double x2 = kiln__ops_get_f64(r->data, r->dtype, 4 * n + 2) * scale - off, y2 = kiln__ops_get_f64(r->data, r->dtype, 4 * n + 3) * scale - off;
        double rw = x2 - x1, rh = y2 - y1;
        if (!half) {
            if (rw < 1) rw = 1;
            if (rh < 1) rh = 1;
        }
        if (!isfinite(rw) || !isfinite(rh))
            return kiln_set_error(KILN_EINVAL, "RoiAlign: roi %lld has non-finite coordinates", (long long)n);
        double bh = rh / (double)PH, bw = rw / (double)PW;
        double dgh = sr > 0 ? (double)sr : ceil(rh / (double)PH), dgw = sr > 0 ? (double)sr : ceil(rw / (double)PW);
        if (dgh < 0) dgh = 0;
        if (dgw < 0) dgw = 0;
        if (dgh * dgw > (double)(1 << 24))
            return kiln_set_error(KILN_EINVAL, "RoiAlign: roi %lld needs %.0f x %.0f samples per bin (limit 2^24)",
                                  (long long)n, dgh, dgw);
        int64_t gh = (int64_t)dgh, gw = (int64_t)dgw;
        double count = gh * gw > 1 ? (double)(gh * gw) : 1.0;
        for (int64_t ch = 0; ch < C; ch++) {
            int64_t base = (b * C + ch) * H * W;
            for (int64_t ph = 0; ph < PH; ph++)
                for (int64_t pw = 0; pw < PW; pw++) {
                    double acc = 0;
                    int first = 1;
                    for (int64_t iy = 0; iy < gh; iy++) {
                        double yy = y1 + (double)ph * bh + ((double)iy + 0.5) * bh / (double)gh;
                        for (int64_t ix = 0; ix < gw; ix++) {
                            double xx = x1 + (double)pw * bw + ((double)ix + 0.5) * bw / (double)gw;
                            roi_tap t = roi_sample(yy, xx, H, W);
                            if (!max_mode) {
                                for (int k = 0; k < 4; k++) acc += t.w[k] * kiln__ops_get_f64(x->data, x->dtype, base + t.p[k]);
                            } else {
                                for (int k = 0; k < 4; k++) {
                                    double v = t.w[k] * kiln__ops_get_f64(x->data, x->dtype, base + t.p[k]);
                                    if (first || v > acc) acc = v;
                                    first = 0;
                                }
                            }
                        }
                    }
                    if (!max_mode) acc /= count;
                    kiln__ops_set_f64(y->data, y->dtype, ((n * C + ch) * PH + ph) * PW + pw, acc);
                }
        }
    }
    return 0;
}

static const kiln_quick_op roi_10 = {
    .ns = "ai.onnx", .name = "RoiAlign", .version = 10,
    .min_inputs = 3, .max_inputs = 3, .num_outputs = 1,
    .attrs = roi_attrs_10, .shape = roi_shape, .impl = roi_impl,
    .doc = "region of interest align (avg/max of bilinear samples per bin)",
};
KILN_OP(roi_10)

static const kiln_quick_op roi_16 = {
    .ns = "ai.onnx", .name = "RoiAlign", .version = 16,
    .min_inputs = 3, .max_inputs = 3, .num_outputs = 1,
    .attrs = roi_attrs_16, .shape = roi_shape, .impl = roi_impl,
    .doc = "region of interest align (avg/max of bilinear samples per bin)",
};
KILN_OP(roi_16)
