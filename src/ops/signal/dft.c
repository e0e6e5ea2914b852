/*
 * dft.c — ONNX DFT (17) and STFT (17).
 *
 * Signals are real ([..., 1]) or complex ([..., 2]) in the last dim; results
 * are complex ([..., 2]).  Direct O(n^2) transforms in double (twiddles
 * from a table per length), which is exact enough and simple; the lengths
 * these ops see in models (frames of a few hundred samples) keep it cheap.
 *
 * DFT:  along `axis` (not the last dim), length dft_length (input 1, known
 *       at build time; default the axis size: shorter signals are zero-padded,
 *       longer ones truncated), `inverse` (1/n scaled), `onesided` (first
 *       n/2 + 1 bins).
 * STFT: signal [B, L, 1|2], frame_step (scalar), window [W] (optional),
 *       frame_length (scalar, optional when window is given): frames
 *       F = (L - W) / step + 1 of W samples times the window, transformed;
 *       output [B, F, W/2 + 1 (onesided, default) or W, 2].
 */
#include "ops/common/ops_util.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Build-time integer scalar from an input: a constant expression or NULL. */
static const kiln_expr *dft_scalar(kiln_shape_ctx *c, int i) {
    if (i >= c->nin || c->in[i].dtype == KILN_DTYPE_UNDEFINED) return NULL;
    const kiln_desc *d = &c->in[i];
    if (d->data) {
        int64_t v = d->dtype == KILN_DTYPE_I32 ? *(const int32_t *)d->data : *(const int64_t *)d->data;
        return kiln_expr_const(c->x, v);
    }
    if (d->nvalues >= 1 && d->values[0]) return d->values[0];
    return NULL;
}

/* One transform: in (stride sin between samples, complex if cplx) of n
 * samples, as a length-len DFT; writes nout bins (re, im) to out with
 * stride sout (in elements of 2 doubles). */
typedef struct dft_plan {
    int64_t len;
    double *cs, *sn; /* len entries */
} dft_plan;

static int dft_plan_init(dft_plan *p, int64_t len, int inverse) {
    p->len = len;
    p->cs = kiln__malloc((size_t)(len ? len : 1) * 2 * sizeof(double));
    if (!p->cs) return kiln_set_error(KILN_ENOMEM, "DFT: out of memory for length %lld", (long long)len);
    p->sn = p->cs + len;
    const double two_pi = 6.28318530717958647692;
    for (int64_t k = 0; k < len; k++) {
        double a = two_pi * (double)k / (double)len;
        p->cs[k] = cos(a);
        p->sn[k] = inverse ? sin(a) : -sin(a);
    }
    return 0;
}

/* re/im: n input samples (imag NULL for real); out: nout bins. */
static void dft_one(const dft_plan *p, const double *re, const double *im, int64_t n, double *ore,
                    double *oim, int64_t nout, int inverse) {
    int64_t len = p->len, m = n < len ? n : len;
    for (int64_t k = 0; k < nout; k++) {
        double sr = 0, si = 0;
        int64_t idx = 0;
        for (int64_t t = 0; t < m; t++) {
            double c = p->cs[idx], s = p->sn[idx];
            double xr = re[t], xi = im ? im[t] : 0;
            sr += xr * c - xi * s;
            si += xr * s + xi * c;
            idx += k;
            if (idx >= len) idx %= len;
        }
        if (inverse) {
            sr /= (double)len;
            si /= (double)len;
        }
        ore[k] = sr;
        oim[k] = si;
    }
}

/* ------------------------------------------------------------ DFT */

/* n complex values into y (float, interleaved re/im): value k at element
 * base + k * stride (re), + 1 (im). */
static void put_complex(kiln_tensor *y, int64_t base, int64_t stride, const double *re, const double *im,
                        int64_t n) {
    for (int64_t k = 0; k < n; k++) {
        kiln__ops_set_f64(y->data, y->dtype, base + k * stride, re[k]);
        kiln__ops_set_f64(y->data, y->dtype, base + k * stride + 1, im[k]);
    }
}

static const kiln_attr_def dft_attrs[] = {
    {"axis", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "1", 0, "signal axis (not the last dim)"},
    {"inverse", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "0", 0, "1: inverse transform (scaled by 1/n)"},
    {"onesided", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "0", 0, "1: only bins 0 .. n/2"},
    {NULL, 0, 0, NULL, 0, NULL},
};

static int dft_axis(int64_t a, int ndim, int *out) {
    if (a < 0) a += ndim;
    if (a < 0 || a >= ndim - 1)
        return kiln_set_error(KILN_EATTR, "DFT: axis %lld must name a signal dim (not the last of rank %d)",
                              (long long)a, ndim);
    *out = (int)a;
    return 0;
}

static int dft_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    if (!kiln__ops_is_float(x->dtype))
        return kiln_set_error(KILN_ETYPE, "DFT: expected a float tensor, found %s", kiln_dtype_name(x->dtype));
    if (x->ndim < 2) return kiln_set_error(KILN_ESHAPE, "DFT: rank %d (expected >= 2)", x->ndim);
    int64_t last;
    if (!kiln_expr_is_const(x->dims[x->ndim - 1], &last) || (last != 1 && last != 2))
        return kiln_set_error(KILN_ESHAPE, "DFT: the last dim must be 1 (real) or 2 (complex)");
    int axis = 0;
    int rc = dft_axis(kiln_attrs_int(c->attrs, "axis"), x->ndim, &axis);
    if (rc) return rc;
    const kiln_expr *len = x->dims[axis];
    if (c->nin > 1 && c->in[1].dtype != KILN_DTYPE_UNDEFINED) {
        len = dft_scalar(c, 1);
        if (!len)
            return kiln_set_error(KILN_EUNSUPPORTED, "DFT: dft_length must be known when the engine is built");
    }
    if (kiln_attrs_int(c->attrs, "onesided"))
        len = kiln_expr_add(c->x, kiln_expr_floordiv(c->x, len, kiln_expr_const(c->x, 2)), kiln_expr_const(c->x, 1));
    c->out[0].dtype = x->dtype;
    c->out[0].ndim = x->ndim;
    for (int i = 0; i < x->ndim; i++) c->out[0].dims[i] = x->dims[i];
    c->out[0].dims[axis] = len;
    c->out[0].dims[x->ndim - 1] = kiln_expr_const(c->x, 2);
    return 0;
}

static int dft_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    int axis = 0;
    int rc = dft_axis(kiln_attrs_int(c->attrs, "axis"), x->ndim, &axis);
    if (rc) return rc;
    int inverse = kiln_attrs_int(c->attrs, "inverse") != 0;
    int64_t comp = x->dims[x->ndim - 1], n = x->dims[axis];
    int64_t len = c->nin > 1 && c->in[1].data ? kiln__ops_get_i64(c->in[1].data, c->in[1].dtype, 0) : n;
    int64_t nout = y->dims[axis];
    if (len <= 0) return kiln_set_error(KILN_EINVAL, "DFT: dft_length %lld (expected > 0)", (long long)len);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < axis; i++) outer *= x->dims[i];
    for (int i = axis + 1; i < x->ndim - 1; i++) inner *= x->dims[i];
    dft_plan p;
    if ((rc = dft_plan_init(&p, len, inverse))) return rc;
    double *buf = kiln__malloc((size_t)(2 * (n > nout ? n : nout) + 2 * nout + 2) * sizeof(double));
    if (!buf) {
        kiln__free(p.cs);
        return kiln_set_error(KILN_ENOMEM, "DFT: out of memory");
    }
    double *re = buf, *im = buf + n, *ore = buf + 2 * (n > nout ? n : nout), *oim = ore + nout;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++) {
            for (int64_t t = 0; t < n; t++) {
                int64_t base = ((o * n + t) * inner + in) * comp;
                re[t] = kiln__ops_get_f64(x->data, x->dtype, base);
                im[t] = comp == 2 ? kiln__ops_get_f64(x->data, x->dtype, base + 1) : 0;
            }
            dft_one(&p, re, comp == 2 ? im : NULL, n, ore, oim, nout, inverse);
            put_complex(y, (o * nout * inner + in) * 2, inner * 2, ore, oim, nout);
        }
    kiln__free(buf);
    kiln__free(p.cs);
    return 0;
}

/* ------------------------------------------------------------ STFT */

static const kiln_attr_def stft_attrs[] = {
    {"onesided", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "1", 0, "1: only bins 0 .. n/2"},
    {NULL, 0, 0, NULL, 0, NULL},
};

static int stft_shape(kiln_shape_ctx *c) {
    const kiln_desc *s = &c->in[0];
    if (!kiln__ops_is_float(s->dtype) || s->ndim != 3)
        return kiln_set_error(KILN_ESHAPE, "STFT: expected a float signal [B, L, 1|2], found %s rank %d",
                              kiln_dtype_name(s->dtype), s->ndim);
    const kiln_expr *step = dft_scalar(c, 1), *flen = dft_scalar(c, 3);
    if (!step)
        return kiln_set_error(KILN_EUNSUPPORTED, "STFT: frame_step must be known when the engine is built");
    int has_win = c->nin > 2 && c->in[2].dtype != KILN_DTYPE_UNDEFINED;
    if (has_win) {
        if (c->in[2].ndim != 1) return kiln_set_error(KILN_ESHAPE, "STFT: window must be 1-D");
        if (!flen) flen = c->in[2].dims[0];
    }
    if (!flen)
        return kiln_set_error(KILN_EUNSUPPORTED, "STFT: frame_length (or a window) must be known when the "
                              "engine is built");
    const kiln_expr *frames = kiln_expr_add(
        c->x, kiln_expr_floordiv(c->x, kiln_expr_sub(c->x, s->dims[1], flen), step), kiln_expr_const(c->x, 1));
    const kiln_expr *bins = flen;
    if (kiln_attrs_int(c->attrs, "onesided"))
        bins = kiln_expr_add(c->x, kiln_expr_floordiv(c->x, flen, kiln_expr_const(c->x, 2)), kiln_expr_const(c->x, 1));
    c->out[0].dtype = s->dtype;
    c->out[0].ndim = 4;
    c->out[0].dims[0] = s->dims[0];
    c->out[0].dims[1] = frames;
    c->out[0].dims[2] = bins;
    c->out[0].dims[3] = kiln_expr_const(c->x, 2);
    return 0;
}

static int stft_impl(const kiln_call *c) {
    const kiln_tensor *s = &c->in[0];
    const kiln_tensor *win = c->nin > 2 && c->in[2].data ? &c->in[2] : NULL;
    kiln_tensor *y = &c->out[0];
    int64_t B = s->dims[0], L = s->dims[1], comp = s->dims[2];
    int64_t step = kiln__ops_get_i64(c->in[1].data, c->in[1].dtype, 0);
    int64_t W = c->nin > 3 && c->in[3].data ? kiln__ops_get_i64(c->in[3].data, c->in[3].dtype, 0) : win->dims[0];
    int64_t F = y->dims[1], nout = y->dims[2];
    if (step <= 0 || W <= 0 || W > L || (win && win->dims[0] != W))
        return kiln_set_error(KILN_EINVAL, "STFT: frame_step %lld, frame_length %lld, window %lld "
                              "(expected positive, frame_length at most the signal length %lld)",
                              (long long)step, (long long)W, (long long)(win ? win->dims[0] : -1),
                              (long long)L);
    dft_plan p;
    int rc = dft_plan_init(&p, W, 0);
    if (rc) return rc;
    double *buf = kiln__malloc((size_t)(2 * W + 2 * nout) * sizeof(double));
    if (!buf) {
        kiln__free(p.cs);
        return kiln_set_error(KILN_ENOMEM, "STFT: out of memory");
    }
    double *re = buf, *im = buf + W, *ore = buf + 2 * W, *oim = ore + nout;
    for (int64_t b = 0; b < B; b++)
        for (int64_t f = 0; f < F; f++) {
            for (int64_t t = 0; t < W; t++) {
                int64_t at = f * step + t;
                double w = win ? kiln__ops_get_f64(win->data, win->dtype, t) : 1.0;
                int ok = at < L;
                re[t] = ok ? w * kiln__ops_get_f64(s->data, s->dtype, (b * L + at) * comp) : 0;
                im[t] = ok && comp == 2 ? w * kiln__ops_get_f64(s->data, s->dtype, (b * L + at) * comp + 1) : 0;
            }
            dft_one(&p, re, comp == 2 ? im : NULL, W, ore, oim, nout, 0);
            put_complex(y, (b * F + f) * nout * 2, 2, ore, oim, nout);
        }
    kiln__free(buf);
    kiln__free(p.cs);
    return 0;
}

static const kiln_quick_op dft_17 = {
    .ns = "ai.onnx", .name = "DFT", .version = 17,
    .min_inputs = 1, .max_inputs = 2, .num_outputs = 1,
    .attrs = dft_attrs, .shape = dft_shape, .impl = dft_impl,
    .doc = "discrete Fourier transform along one axis (real or complex input)",
};
KILN_OP(dft_17)

static const kiln_quick_op stft_17 = {
    .ns = "ai.onnx", .name = "STFT", .version = 17,
    .min_inputs = 2, .max_inputs = 4, .num_outputs = 1,
    .attrs = stft_attrs, .shape = stft_shape, .impl = stft_impl,
    .doc = "short-time Fourier transform",
};
KILN_OP(stft_17)
