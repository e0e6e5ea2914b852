/*
 * resize.c — ONNX Resize (opset 10, 11/13, 18/19) and Upsample (7, 9).
 *
 * Modes nearest (round_prefer_floor, round_prefer_ceil, floor, ceil; opset
 * 10 and Upsample: floor when upsampling, ceil when downsampling), linear
 * (n-linear) and cubic (cubic_coeff_a, exclude_outside); every
 * coordinate_transformation_mode incl. tf_crop_and_resize with
 * extrapolation_value and half_pixel_symmetric; sizes or scales inputs with
 * axes and keep_aspect_ratio_policy (18).
 *
 * The op is separable: for every axis and output index a small table of
 * taps (source index, weight) is built once per call, in the workspace.
 * Output rows (all dims but the innermost) combine the taps of the outer
 * axes into a list of (source row, weight); the innermost loop then sums
 * rows x innermost taps.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"


#include <math.h>
#include <string.h>

enum { R_NEAREST, R_LINEAR, R_CUBIC };
enum { CT_HALF_PIXEL, CT_PYTORCH_HALF_PIXEL, CT_ALIGN_CORNERS, CT_ASYMMETRIC,
       CT_TF_HALF_PIXEL_FOR_NN, CT_TF_CROP_AND_RESIZE, CT_HALF_PIXEL_SYMMETRIC };
enum { NM_ROUND_PREFER_FLOOR, NM_ROUND_PREFER_CEIL, NM_FLOOR, NM_CEIL, NM_SIMPLE };
enum { KA_STRETCH, KA_NOT_LARGER, KA_NOT_SMALLER };

/* Which ONNX flavour an op instance follows. */
enum { V_UPSAMPLE7, V_UPSAMPLE9, V_RESIZE10, V_RESIZE11, V_RESIZE18 };

#define RESIZE11_ATTRS                                                                   \
    {"coordinate_transformation_mode", KILN_ATTR_STRING, 0, "half_pixel", 0,              \
     "half_pixel, pytorch_half_pixel, align_corners, asymmetric, tf_half_pixel_for_nn, "  \
     "tf_crop_and_resize, half_pixel_symmetric"},                                          \
    {"cubic_coeff_a", KILN_ATTR_FLOAT, 0, "-0.75", 0, "cubic kernel parameter"},          \
    {"exclude_outside", KILN_ATTR_INT, 0, "0", 0, "zero the weights of taps outside"},    \
    {"extrapolation_value", KILN_ATTR_FLOAT, 0, "0", 0, "tf_crop_and_resize fill value"}, \
    {"mode", KILN_ATTR_STRING, 0, "nearest", 0, "nearest, linear or cubic"},              \
    {"nearest_mode", KILN_ATTR_STRING, 0, "round_prefer_floor", 0,                        \
     "round_prefer_floor, round_prefer_ceil, floor, ceil"}

static const kiln_attr_def resize11_attrs[] = {RESIZE11_ATTRS, {NULL, 0, 0, NULL, 0, NULL}};
static const kiln_attr_def resize18_attrs[] = {
    RESIZE11_ATTRS,
    {"antialias", KILN_ATTR_INT, 0, "0", 0, "antialiasing when downsampling (0 only)"},
    {"axes", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "axes scales/sizes refer to"},
    {"keep_aspect_ratio_policy", KILN_ATTR_STRING, 0, "stretch", 0,
     "stretch, not_larger or not_smaller (with sizes)"},
    {NULL, 0, 0, NULL, 0, NULL},
};
static const kiln_attr_def resize10_attrs[] = {
    {"mode", KILN_ATTR_STRING, 0, "nearest", 0, "nearest or linear"},
    {NULL, 0, 0, NULL, 0, NULL},
};
static const kiln_attr_def upsample7_attrs[] = {
    {"mode", KILN_ATTR_STRING, 0, "nearest", 0, "nearest or linear"},
    {"scales", KILN_ATTR_ARRAY, KILN_DTYPE_F32, NULL, 1, "scale per dim"},
    {NULL, 0, 0, NULL, 0, NULL},
};

typedef struct rparams {
    int flavour, mode, ct, nm, exclude, ka;
    double cubic_a, extrap;
    int r;
    int have_sizes;
    double scale[KILN_MAX_DIMS];   /* scale used by the coordinate transform */
    int64_t size[KILN_MAX_DIMS];   /* output dims (when computable) */
    double roi_s[KILN_MAX_DIMS], roi_e[KILN_MAX_DIMS];
} rparams;

static int lookup(const char *s, const char *const *names, int n, int *out, const char *what) {
    for (int i = 0; i < n; i++)
        if (!strcmp(s, names[i])) { *out = i; return 0; }
    return kiln_set_error(KILN_EATTR, "Resize: unknown %s '%s'", what, s);
}

static int read_attrs(const kiln_attrs *a, int flavour, rparams *p) {
    static const char *const modes[] = {"nearest", "linear", "cubic"};
    static const char *const cts[] = {"half_pixel", "pytorch_half_pixel", "align_corners",
                                      "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize",
                                      "half_pixel_symmetric"};
    static const char *const nms[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
    static const char *const kas[] = {"stretch", "not_larger", "not_smaller"};
    memset(p, 0, sizeof *p);
    p->flavour = flavour;
    int rc;
    const char *m = kiln_attrs_string(a, "mode");
    if (flavour < V_RESIZE11 && m && !strcmp(m, "bilinear")) m = "linear";
    if ((rc = lookup(m ? m : "nearest", modes, 3, &p->mode, "mode"))) return rc;
    if (flavour < V_RESIZE11) {
        if (p->mode == R_CUBIC) return kiln_set_error(KILN_EATTR, "Resize: cubic needs opset >= 11");
        p->ct = CT_ASYMMETRIC;
        p->nm = NM_SIMPLE;
        return 0;
    }
    if ((rc = lookup(kiln_attrs_string(a, "coordinate_transformation_mode"), cts, 7, &p->ct,
                     "coordinate_transformation_mode")))
        return rc;
    if ((rc = lookup(kiln_attrs_string(a, "nearest_mode"), nms, 4, &p->nm, "nearest_mode")))
        return rc;
    p->cubic_a = kiln_attrs_float(a, "cubic_coeff_a");
    p->exclude = kiln_attrs_int(a, "exclude_outside") != 0;
    p->extrap = kiln_attrs_float(a, "extrapolation_value");
    if (flavour == V_RESIZE18) {
        if ((rc = lookup(kiln_attrs_string(a, "keep_aspect_ratio_policy"), kas, 3, &p->ka,
                         "keep_aspect_ratio_policy")))
            return rc;
        if (kiln_attrs_int(a, "antialias") != 0)
            return kiln_set_error(KILN_EUNSUPPORTED, "Resize: antialias=1 is not supported");
    }
    return 0;
}

/* Fill p->scale/size/roi from the scales/sizes/roi values (host arrays) for
 * input dims `in` (entries < 0: unknown).  `scales`, `sizes`, `roi` may be
 * NULL; counts refer to axes (or all dims). */
static int resolve(rparams *p, int r, const int64_t *in, const kiln_attrs *a, const double *scales,
                   int64_t nscales, const int64_t *sizes, int64_t nsizes, const double *roi,
                   int64_t nroi) {
    p->r = r;
    int64_t axes[KILN_MAX_DIMS], naxes = r;
    for (int i = 0; i < r; i++) axes[i] = i;
    if (p->flavour == V_RESIZE18) {
        const int64_t *v;
        int64_t n = kiln_attrs_ints(a, "axes", &v);
        if (n >= 0) {
            if (n > r) return kiln_set_error(KILN_EATTR, "Resize: %lld axes for rank %d", (long long)n, r);
            naxes = n;
            for (int64_t i = 0; i < n; i++) {
                axes[i] = v[i] < 0 ? v[i] + r : v[i];
                if (axes[i] < 0 || axes[i] >= r)
                    return kiln_set_error(KILN_EATTR, "Resize: axis %lld out of range", (long long)v[i]);
            }
        }
    }
    for (int i = 0; i < r; i++) {
        p->scale[i] = 1.0;
        p->size[i] = in[i];
        p->roi_s[i] = 0.0;
        p->roi_e[i] = 1.0;
    }
    if (roi && nroi == 2 * naxes)
        for (int64_t i = 0; i < naxes; i++) {
            p->roi_s[axes[i]] = roi[i];
            p->roi_e[axes[i]] = roi[naxes + i];
        }
    if (sizes && nsizes > 0) {
        if (nsizes != naxes)
            return kiln_set_error(KILN_ESHAPE, "Resize: sizes has %lld values, expected %lld",
                                  (long long)nsizes, (long long)naxes);
        p->have_sizes = 1;
        if (p->ka != KA_STRETCH) {
            double sc = p->ka == KA_NOT_LARGER ? INFINITY : 0.0;
            for (int64_t i = 0; i < naxes; i++) {
                int64_t d = in[axes[i]];
                if (d <= 0) return kiln_set_error(KILN_ESHAPE, "Resize: keep_aspect_ratio_policy needs known input dims");
                double s = (double)sizes[i] / (double)d;
                sc = p->ka == KA_NOT_LARGER ? fmin(sc, s) : fmax(sc, s);
            }
            for (int64_t i = 0; i < naxes; i++) {
                p->scale[axes[i]] = sc;
                p->size[axes[i]] = (int64_t)floor((double)in[axes[i]] * sc + 0.5);
            }
        } else {
            for (int64_t i = 0; i < naxes; i++) {
                int64_t ax = axes[i];
                p->size[ax] = sizes[i];
                p->scale[ax] = in[ax] > 0 ? (double)sizes[i] / (double)in[ax] : 1.0;
            }
        }
    } else if (scales && nscales > 0) {
        if (nscales != naxes)
            return kiln_set_error(KILN_ESHAPE, "Resize: scales has %lld values, expected %lld",
                                  (long long)nscales, (long long)naxes);
        for (int64_t i = 0; i < naxes; i++) {
            int64_t ax = axes[i];
            if (!(scales[i] > 0))
                return kiln_set_error(KILN_EATTR, "Resize: scale %g for axis %lld must be > 0",
                                      scales[i], (long long)ax);
            p->scale[ax] = scales[i];
            p->size[ax] = in[ax] < 0 ? -1 : (int64_t)floor((double)in[ax] * scales[i] + 1e-9);
        }
    } else {
        return kiln_set_error(KILN_EINVAL, "Resize: one of scales or sizes must be given");
    }
    return 0;
}

static int flavour_of(const kiln_attrs *a, int nin, int version_hint) {
    (void)a;
    (void)nin;
    return version_hint;
}

/* Values of a small constant input as doubles / int64. */
static int64_t desc_count(const kiln_desc *d) {
    int64_t n = 1, v;
    for (int i = 0; i < d->ndim; i++) {
        if (!kiln_expr_is_const(d->dims[i], &v)) return -1;
        n *= v;
    }
    return n;
}

static int resize_shape_common(kiln_shape_ctx *c, int flavour) {
    const kiln_desc *x = &c->in[0];
    int r = x->ndim;
    rparams p;
    int rc = read_attrs(c->attrs, flavour, &p);
    if (rc) return rc;
    int64_t in[KILN_MAX_DIMS];
    for (int i = 0; i < r; i++)
        if (!kiln_expr_is_const(x->dims[i], &in[i])) in[i] = -1;
    double scales[KILN_MAX_DIMS];
    int64_t sizes[KILN_MAX_DIMS], nscales = 0, nsizes = 0;
    const kiln_desc *ds = NULL, *dz = NULL;
    if (flavour == V_UPSAMPLE7) {
        const float *v;
        nscales = kiln_attrs_floats(c->attrs, "scales", &v);
        if (nscales > KILN_MAX_DIMS) nscales = KILN_MAX_DIMS + 1;
        for (int64_t i = 0; i < nscales && i < KILN_MAX_DIMS; i++) scales[i] = v[i];
    } else if (flavour == V_UPSAMPLE9 || flavour == V_RESIZE10) {
        ds = &c->in[1];
    } else {
        if (c->nin > 2 && c->in[2].dtype != KILN_DTYPE_UNDEFINED) ds = &c->in[2];
        if (c->nin > 3 && c->in[3].dtype != KILN_DTYPE_UNDEFINED) dz = &c->in[3];
    }
    if (dz && desc_count(dz) > 0) {
        nsizes = desc_count(dz);
        if (nsizes > KILN_MAX_DIMS) return kiln_set_error(KILN_ESHAPE, "Resize: too many sizes");
        if (dz->data) {
            for (int64_t i = 0; i < nsizes; i++) sizes[i] = kiln__ops_get_i64(dz->data, dz->dtype, i);
        } else if (dz->nvalues == nsizes && flavour != V_RESIZE18) {
            /* symbolic sizes: output dims are the values themselves */
            if (nsizes != r) return kiln_set_error(KILN_ESHAPE, "Resize: sizes must have %d values", r);
            c->out[0] = *x;
            c->out[0].data = NULL;
            c->out[0].nvalues = -1;
            for (int i = 0; i < r; i++) c->out[0].dims[i] = dz->values[i];
            return 0;
        } else {
            return kiln_set_error(KILN_EUNSUPPORTED, "Resize: sizes must be known at build time");
        }
        ds = NULL;
    } else if (ds && desc_count(ds) > 0) {
        nscales = desc_count(ds);
        if (nscales > KILN_MAX_DIMS) return kiln_set_error(KILN_ESHAPE, "Resize: too many scales");
        if (!ds->data) return kiln_set_error(KILN_EUNSUPPORTED, "Resize: scales must be a constant");
        for (int64_t i = 0; i < nscales; i++) scales[i] = kiln__ops_get_f64(ds->data, ds->dtype, i);
    }
    rc = resolve(&p, r, in, c->attrs, nscales ? scales : NULL, nscales, nsizes ? sizes : NULL,
                 nsizes, NULL, 0);
    if (rc) return rc;
    c->out[0] = *x;
    c->out[0].data = NULL;
    c->out[0].nvalues = -1;
    for (int i = 0; i < r; i++) {
        if (p.size[i] >= 0) {
            c->out[0].dims[i] = kiln_expr_const(c->x, p.size[i]);
        } else if (p.scale[i] == 1.0) {
            c->out[0].dims[i] = x->dims[i];
        } else if (p.scale[i] == floor(p.scale[i])) {
            c->out[0].dims[i] = kiln_expr_mul(c->x, x->dims[i], kiln_expr_const(c->x, (int64_t)p.scale[i]));
        } else if (1.0 / p.scale[i] == floor(1.0 / p.scale[i])) {
            c->out[0].dims[i] =
                kiln_expr_floordiv(c->x, x->dims[i], kiln_expr_const(c->x, (int64_t)(1.0 / p.scale[i])));
        } else {
            return kiln_set_error(KILN_EUNSUPPORTED, "Resize: non-integer scale %g on dynamic dim %d",
                                  p.scale[i], i);
        }
    }
    return 0;
}

/* ------------------------------------------------------------ taps */

/* Source coordinate of output index o along axis ax, in double precision
 * with float32 scales, like the ONNX reference.  The roi start term is a
 * float32 product there (roi is a float32 tensor); reproduce it so that
 * nearest rounding at exact .5 ties agrees. */
static double to_source(const rparams *p, int ax, int64_t o, int64_t in, int64_t out_int) {
    double s = p->scale[ax], x = (double)o;
    /* With scales, the resized length in the formulas is in * scale (not
     * floored), as in the ONNX reference; with sizes it is the size. */
    double out = p->have_sizes ? (double)out_int : s * (double)in;
    switch (p->ct) {
    case CT_HALF_PIXEL: return (x + 0.5) / s - 0.5;
    case CT_PYTORCH_HALF_PIXEL: return out > 1 ? (x + 0.5) / s - 0.5 : 0.0;
    case CT_ALIGN_CORNERS: return out == 1 ? 0.0 : x * (double)(in - 1) / (out - 1);
    case CT_ASYMMETRIC: return x / s;
    case CT_TF_HALF_PIXEL_FOR_NN: return (x + 0.5) / s;
    case CT_TF_CROP_AND_RESIZE: {
        double st = p->roi_s[ax], en = p->roi_e[ax];
        double start = (double)((float)st * (float)(in - 1));
        if (out > 1) return start + x * (double)((float)en - (float)st) * (double)(in - 1) / (out - 1);
        return start + (double)((float)en - (float)st) * (double)(in - 1) / 2;
    }
    case CT_HALF_PIXEL_SYMMETRIC: {
        double ow = s * (double)in, adj = (double)out_int / ow;
        double center = (double)in / 2.0, off = center * (1.0 - adj);
        return off + (x + 0.5) / s - 0.5;
    }
    default: return x / s;
    }
}

static int64_t nearest_index(const rparams *p, double x, double scale) {
    double f = floor(x);
    switch (p->nm) {
    case NM_ROUND_PREFER_FLOOR: return (int64_t)(x - f == 0.5 ? f : floor(x + 0.5));
    case NM_ROUND_PREFER_CEIL: return (int64_t)(x - f == 0.5 ? f + 1 : floor(x + 0.5));
    case NM_FLOOR: return (int64_t)f;
    case NM_CEIL: return (int64_t)ceil(x);
    default: return (int64_t)(scale < 1.0 ? ceil(x) : f);
    }
}

static inline int64_t clampi(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

static void cubic_w(double t, double a, double w[4]) {
    double x;
    x = t + 1; w[0] = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
    x = t;     w[1] = ((a + 2) * x - (a + 3)) * x * x + 1;
    x = 1 - t; w[2] = ((a + 2) * x - (a + 3)) * x * x + 1;
    x = 2 - t; w[3] = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
}

/* Taps of one axis: idx/w[o*T + t]; outside[o] = 1 when extrapolated. */
static void axis_taps(const rparams *p, int ax, int64_t in, int64_t out, int T, int64_t *idx,
                      float *w, uint8_t *outside) {
    for (int64_t o = 0; o < out; o++) {
        int64_t *ii = idx + o * T;
        float *ww = w + o * T;
        for (int t = 0; t < T; t++) { ii[t] = 0; ww[t] = 0; }
        outside[o] = 0;
        if (T == 1 && in == out && p->scale[ax] == 1.0 && p->ct != CT_TF_CROP_AND_RESIZE) {
            ii[0] = o;
            ww[0] = 1;
            continue;
        }
        double x = to_source(p, ax, o, in, out);
        if (p->ct == CT_TF_CROP_AND_RESIZE && (x < 0 || x > (double)(in - 1))) {
            outside[o] = 1;
            continue;
        }
        if (p->mode == R_NEAREST) {
            ii[0] = clampi(nearest_index(p, x, p->scale[ax]), 0, in - 1);
            ww[0] = 1;
        } else if (p->mode == R_LINEAR) {
            if (x < 0) x = 0;
            if (x > (double)(in - 1)) x = (double)(in - 1);
            int64_t x0 = (int64_t)floor(x), x1 = x0 + 1 < in ? x0 + 1 : in - 1;
            double f = x - (double)x0;
            ii[0] = x0; ww[0] = (float)(1 - f);
            ii[1] = x1; ww[1] = (float)f;
        } else {
            int64_t x0 = (int64_t)floor(x);
            double cw[4], sum = 0;
            cubic_w(x - (double)x0, p->cubic_a, cw);
            for (int t = 0; t < 4; t++) {
                int64_t s = x0 - 1 + t;
                if (p->exclude && (s < 0 || s >= in)) cw[t] = 0;
                sum += cw[t];
                ii[t] = clampi(s, 0, in - 1);
            }
            for (int t = 0; t < 4; t++) ww[t] = (float)(p->exclude && sum != 0 ? cw[t] / sum : cw[t]);
        }
    }
}

/* ------------------------------------------------------------ impl */

#define MAX_COMBOS 1024

typedef struct rtask {
    const rparams *p;
    const float *x;
    float *y;
    int r, T;
    int64_t in[KILN_MAX_DIMS], out[KILN_MAX_DIMS];
    int64_t *idx[KILN_MAX_DIMS];
    float *w[KILN_MAX_DIMS];
    uint8_t *outside[KILN_MAX_DIMS];
    int taps[KILN_MAX_DIMS]; /* taps in use per axis (1 for identity axes) */
} rtask;

static void resize_rows(void *ud, int64_t lo, int64_t hi) {
    const rtask *t = ud;
    const int r = t->r, T = t->T, L = r - 1;
    const int64_t OW = t->out[L], IW = t->in[L];
    const int TL = t->taps[L];
    const float extrap = (float)t->p->extrap;
    int64_t coff[MAX_COMBOS];
    float cw[MAX_COMBOS];
    int64_t prev_src = -1; /* nearest: source row of the previous output row */
    for (int64_t row = lo; row < hi; row++) {
        float *y = t->y + row * OW;
        int64_t o[KILN_MAX_DIMS], rem = row;
        int out_flag = 0;
        for (int d = L - 1; d >= 0; d--) {
            o[d] = rem % t->out[d];
            rem /= t->out[d];
            out_flag |= t->outside[d][o[d]];
        }
        if (out_flag) {
            for (int64_t j = 0; j < OW; j++) y[j] = extrap;
            prev_src = -1;
            continue;
        }
        /* combine outer-axis taps into source rows */
        int nc = 1;
        coff[0] = 0;
        cw[0] = 1;
        for (int d = 0; d < L; d++) {
            int td = t->taps[d], n2 = 0;
            const int64_t *ii = t->idx[d] + o[d] * T;
            const float *ww = t->w[d] + o[d] * T;
            int64_t keep_off[MAX_COMBOS];
            float keep_w[MAX_COMBOS];
            for (int k = 0; k < nc; k++)
                for (int q = 0; q < td; q++) {
                    if (ww[q] == 0.0f && td > 1) continue;
                    keep_off[n2] = coff[k] * t->in[d] + ii[q];
                    keep_w[n2] = cw[k] * ww[q];
                    n2++;
                }
            if (n2 == 0) { keep_off[0] = coff[0] * t->in[d]; keep_w[0] = 0; n2 = 1; }
            memcpy(coff, keep_off, (size_t)n2 * sizeof *coff);
            memcpy(cw, keep_w, (size_t)n2 * sizeof *cw);
            nc = n2;
        }
        const int64_t *il = t->idx[L];
        const float *wl = t->w[L];
        const uint8_t *ol = t->outside[L];
        if (nc == 1 && TL == 1 && cw[0] == 1.0f) {
            if (row > lo && coff[0] == prev_src) {
                /* same source row as the previous output row (upsampling) */
                memcpy(y, y - OW, (size_t)OW * sizeof(float));
                continue;
            }
            prev_src = coff[0];
            const float *src = t->x + coff[0] * IW;
            for (int64_t j = 0; j < OW; j++) y[j] = ol[j] ? extrap : src[il[j * T]];
            continue;
        }
        prev_src = -1;
        for (int64_t j = 0; j < OW; j++) {
            if (ol[j]) { y[j] = extrap; continue; }
            float acc = 0;
            for (int k = 0; k < nc; k++) {
                const float *src = t->x + coff[k] * IW;
                float s = 0;
                for (int q = 0; q < TL; q++) s += wl[j * T + q] * src[il[j * T + q]];
                acc += cw[k] * s;
            }
            y[j] = acc;
        }
    }
}

static size_t ws_bytes(const kiln_tensor *y) {
    int64_t s = 0;
    for (int i = 0; i < y->ndim; i++) s += y->dims[i];
    return (size_t)s * 4 * (sizeof(int64_t) + sizeof(float) + 1) + 256;
}
static size_t resize_ws(const kiln_call *c) { return ws_bytes(&c->out[0]); }

/* The resolved parameters of a call (both devices): attributes, then the
 * scales/sizes/roi values, checked against the output dims. */
static int resize_params(const kiln_call *c, int flavour, rparams *pp) {
    const kiln_tensor *X = &c->in[0];
    kiln_tensor *Y = &c->out[0];
    rparams p;
    int rc = read_attrs(c->attrs, flavour, &p);
    if (rc) return rc;
    int r = X->ndim;
    if (r == 0) return kiln_set_error(KILN_ESHAPE, "Resize: X must have rank >= 1");
    double scales[KILN_MAX_DIMS], roi[2 * KILN_MAX_DIMS];
    int64_t sizes[KILN_MAX_DIMS], nscales = 0, nsizes = 0, nroi = 0;
    const kiln_tensor *ts = NULL, *tz = NULL, *tr = NULL;
    if (flavour == V_UPSAMPLE7) {
        const float *v;
        nscales = kiln_attrs_floats(c->attrs, "scales", &v);
        if (nscales > KILN_MAX_DIMS) return kiln_set_error(KILN_ESHAPE, "Upsample: too many scales");
        for (int64_t i = 0; i < nscales; i++) scales[i] = v[i];
    } else if (flavour == V_UPSAMPLE9 || flavour == V_RESIZE10) {
        ts = &c->in[1];
    } else {
        if (c->nin > 1 && c->in[1].data) tr = &c->in[1];
        if (c->nin > 2 && c->in[2].data) ts = &c->in[2];
        if (c->nin > 3 && c->in[3].data) tz = &c->in[3];
    }
    if (tz && kiln_tensor_numel(tz) > 0) {
        nsizes = kiln_tensor_numel(tz);
        if (nsizes > KILN_MAX_DIMS) return kiln_set_error(KILN_ESHAPE, "Resize: too many sizes");
        for (int64_t i = 0; i < nsizes; i++) sizes[i] = kiln__ops_get_i64(tz->data, tz->dtype, i);
    } else if (ts && kiln_tensor_numel(ts) > 0) {
        nscales = kiln_tensor_numel(ts);
        if (nscales > KILN_MAX_DIMS) return kiln_set_error(KILN_ESHAPE, "Resize: too many scales");
        for (int64_t i = 0; i < nscales; i++) scales[i] = kiln__ops_get_f64(ts->data, ts->dtype, i);
    }
    if (tr) {
        nroi = kiln_tensor_numel(tr);
        if (nroi > 2 * KILN_MAX_DIMS) nroi = 0;
        for (int64_t i = 0; i < nroi; i++) roi[i] = kiln__ops_get_f64(tr->data, tr->dtype, i);
    }
    int64_t in[KILN_MAX_DIMS];
    for (int i = 0; i < r; i++) in[i] = X->dims[i];
    rc = resolve(&p, r, in, c->attrs, nscales ? scales : NULL, nscales, nsizes ? sizes : NULL,
                 nsizes, nroi ? roi : NULL, nroi);
    if (rc) return rc;
    for (int i = 0; i < r; i++) {
        if (p.size[i] != Y->dims[i])
            return kiln_set_error(KILN_ESHAPE, "Resize: output dim %d is %lld, scales/sizes give %lld",
                                  i, (long long)Y->dims[i], (long long)p.size[i]);
        if (in[i] == 0 && Y->dims[i] > 0)
            return kiln_set_error(KILN_ESHAPE, "Resize: cannot resize empty dim %d", i);
    }
    *pp = p;
    return 0;
}

static int resize_run(const kiln_call *c, int flavour) {
    const kiln_tensor *X = &c->in[0];
    kiln_tensor *Y = &c->out[0];
    if (!kiln__ops_dense(X) || !kiln__ops_dense(Y))
        return kiln_set_error(KILN_EUNSUPPORTED, "Resize: strided tensors not supported");
    rparams p;
    int rc = resize_params(c, flavour, &p);
    if (rc) return rc;
    int r = X->ndim;
    rtask t;
    memset(&t, 0, sizeof t);
    t.r = r;
    for (int i = 0; i < r; i++) {
        t.in[i] = X->dims[i];
        t.out[i] = Y->dims[i];
    }
    if (kiln_tensor_numel(Y) == 0) return 0;
    t.T = p.mode == R_NEAREST ? 1 : p.mode == R_LINEAR ? 2 : 4;
    if (c->workspace_size < ws_bytes(Y))
        return kiln_set_error(KILN_EINTERNAL, "Resize: workspace of %zu bytes, need %zu",
                              c->workspace_size, ws_bytes(Y));
    uint8_t *ws = c->workspace;
    int64_t tot = 0;
    for (int i = 0; i < r; i++) tot += t.out[i];
    int64_t *ibase = (int64_t *)ws;
    float *wbase = (float *)(ibase + tot * 4);
    uint8_t *obase = (uint8_t *)(wbase + tot * 4);
    int64_t combos = 1;
    for (int i = 0, off = 0; i < r; off += (int)t.out[i], i++) {
        t.idx[i] = ibase + (int64_t)off * 4;
        t.w[i] = wbase + (int64_t)off * 4;
        t.outside[i] = obase + off;
        axis_taps(&p, i, t.in[i], t.out[i], t.T, t.idx[i], t.w[i], t.outside[i]);
        int identity = t.in[i] == t.out[i] && p.scale[i] == 1.0 && p.ct != CT_TF_CROP_AND_RESIZE;
        t.taps[i] = (t.T == 1 || identity) ? 1 : t.T;
        if (identity && t.T > 1)
            for (int64_t o = 0; o < t.out[i]; o++) {
                t.idx[i][o * t.T] = o;
                t.w[i][o * t.T] = 1;
            }
        if (i < r - 1) combos *= t.taps[i];
    }
    if (combos > MAX_COMBOS)
        return kiln_set_error(KILN_EUNSUPPORTED, "Resize: %lld interpolated axes too many",
                              (long long)combos);
    t.p = &p;
    t.x = X->data;
    t.y = Y->data;
    /* an image: each plane's rows split over the threads, as the convs
     * around it split theirs (kiln__ops_par_planes) */
    const int64_t rows = kiln_tensor_numel(Y) / t.out[r - 1], plane = r >= 2 ? t.out[r - 2] : rows;
    kiln__ops_par_planes(c->exec, rows / plane, plane, t.out[r - 1], 1 + 8192 / t.out[r - 1], resize_rows, &t);
    return 0;
}

/* CUDA: the same parameters as kernel arguments (resize.cu, launched by
 * resize_cuda.c). */
static int resize_cuda(const kiln_call *c, int flavour) {
    rparams p;
    int rc = resize_params(c, flavour, &p);
    if (rc) return rc;
    kiln_cu_resize a;
    memset(&a, 0, sizeof a);
    a.ndim = c->in[0].ndim;
    a.mode = p.mode;
    a.nearest = p.nm;
    a.coord = p.ct;
    a.have_sizes = p.have_sizes;
    a.exclude_outside = p.exclude;
    a.cubic_a = p.cubic_a;
    a.extrapolation = p.extrap;
    for (int i = 0; i < a.ndim; i++) {
        a.in_dims[i] = c->in[0].dims[i];
        a.out_dims[i] = c->out[0].dims[i];
        a.scale[i] = p.scale[i];
        a.roi_start[i] = (float)p.roi_s[i];
        a.roi_end[i] = (float)p.roi_e[i];
    }
    return kiln__cu_resize(c, &a);
}

#define RZ(fname, fl)                                                                    \
    static int fname##_shape(kiln_shape_ctx *c) { return resize_shape_common(c, flavour_of(c->attrs, c->nin, fl)); } \
    static int fname##_f32(const kiln_call *c) { return resize_run(c, fl); }            \
    static int fname##_impl(const kiln_call *c) { return kiln__ops_as_f32(c, fname##_f32); } \
    static int fname##_cuda(const kiln_call *c) { return resize_cuda(c, fl); }
RZ(up7, V_UPSAMPLE7)
RZ(up9, V_UPSAMPLE9)
RZ(rz10, V_RESIZE10)
RZ(rz11, V_RESIZE11)
RZ(rz18, V_RESIZE18)

/* CUDA (resize_cuda.c): the float types; roi/scales/sizes are host inputs */
static int resize_cuda_check(const kiln_shape_ctx *c) { return kiln__ops_cuda_types(c, "Resize", KILN_CU_T_FLOAT); }
/* X and Y in one float type, so an --fp16 engine's Resize runs in FP16
 * between FP16 layers (with no cuda_formats only the logical FP32 was a
 * candidate: PP-OCRv4's FPN had 12 casts around its 6 Resizes); roi in its
 * own type (T2; builder/select.c keeps host inputs in their logical type),
 * scales FP32, sizes INT64.  A layer with fewer inputs takes the row's
 * first slots and its output slot (select.c). */
#define RZ_T KILN_CU_T_FLOAT
static const kiln_combo rz_cuda_t[] = {{.types = RZ_T}, {0}};                 /* Upsample-7 */
static const kiln_combo rz_cuda_ts[] = {{.types = RZ_T ", FP32, " RZ_T}, {0}}; /* x, scales */
static const kiln_combo rz_cuda_full[] = {{.types = RZ_T ", FP32*FP16*FP64, FP32, INT64, " RZ_T}, {0}};

#define RZ_OP(var, nm, ver, mini, maxi, at, fname, cf, dc)                               \
    static const kiln_quick_op var = {                                                   \
        .ns = "ai.onnx", .name = nm, .version = ver,                                     \
        .min_inputs = mini, .max_inputs = maxi, .num_outputs = 1,                        \
        .attrs = at, .shape = fname##_shape, .impl = fname##_impl,                       \
        .workspace = resize_ws, .doc = dc,                                               \
        .cuda_impl = fname##_cuda, .cuda_host_inputs = 0xe, /* roi scales sizes */      \
        .cuda_check = resize_cuda_check, .cuda_formats = cf,                             \
    };                                                                                   \
    KILN_OP(var)

RZ_OP(upsample_7, "Upsample", 7, 1, 1, upsample7_attrs, up7, rz_cuda_t, "nearest/linear upsampling (scales attribute)")
RZ_OP(upsample_9, "Upsample", 9, 2, 2, resize10_attrs, up9, rz_cuda_ts, "nearest/linear upsampling (scales input)")
RZ_OP(resize_10, "Resize", 10, 2, 2, resize10_attrs, rz10, rz_cuda_ts, "nearest/linear resize, asymmetric coordinates")
RZ_OP(resize_11, "Resize", 11, 1, 4, resize11_attrs, rz11, rz_cuda_full,
      "nearest/linear/cubic resize with roi, scales or sizes")
RZ_OP(resize_18, "Resize", 18, 1, 4, resize18_attrs, rz18, rz_cuda_full,
      "resize with axes and keep_aspect_ratio_policy")
