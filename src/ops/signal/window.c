/*
 * window.c — ONNX signal windows (opset 17): HannWindow, HammingWindow,
 * BlackmanWindow.
 *
 * Input: the window length (a scalar int32/int64), whose value must be known
 * when the engine is built (a constant or a symbolic value such as a dim);
 * output: a 1-D tensor of that length, type `output_datatype` (default f32).
 * periodic = 1 (default) uses N = size, else N = size - 1 (symmetric):
 *   Hann      0.5 - 0.5 cos(2 pi n / N)
 *   Hamming   25/46 - 21/46 cos(2 pi n / N)
 *   Blackman  0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)
 *
 * MelWeightMatrix (17): the [dft_length / 2 + 1, num_mel_bins] triangular
 * filter bank mapping a spectrogram to mel bins, as the ONNX reference
 * computes it (mel = 2595 log10(1 + f / 700); num_mel_bins + 2 edges spaced
 * by (mel_hi - mel_lo) / (num_mel_bins + 2); bin = floor((dft_length + 1) f /
 * sample_rate)).  num_mel_bins and dft_length must be known at build time.
 */
#include "ops/common/ops_util.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static const kiln_attr_def win_attrs[] = {
    {"output_datatype", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "1", 0, "ONNX/kiln dtype of the output"},
    {"periodic", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "1", 0, "1 periodic, 0 symmetric"},
    {NULL, 0, 0, NULL, 0, NULL},
};

static int win_shape(kiln_shape_ctx *c) {
    const kiln_desc *s = &c->in[0];
    if ((s->dtype != KILN_DTYPE_I32 && s->dtype != KILN_DTYPE_I64) || s->ndim != 0)
        return kiln_set_error(KILN_ETYPE, "window: size must be an int32/int64 scalar, found %s rank %d",
                              kiln_dtype_name(s->dtype), s->ndim);
    const kiln_expr *len = NULL;
    if (s->data)
        len = kiln_expr_const(c->x, s->dtype == KILN_DTYPE_I32 ? *(const int32_t *)s->data
                                                               : *(const int64_t *)s->data);
    else if (s->nvalues >= 1)
        len = s->values[0];
    if (!len)
        return kiln_set_error(KILN_EUNSUPPORTED, "window: the size must be known when the engine is "
                              "built (a constant or a value computed from shapes)");
    int64_t v;
    if (kiln_expr_is_const(len, &v) && v < 0)
        return kiln_set_error(KILN_ESHAPE, "window: size %lld is negative", (long long)v);
    int64_t dt = kiln_attrs_int(c->attrs, "output_datatype");
    if (dt != KILN_DTYPE_F32 && dt != KILN_DTYPE_F64 && dt != KILN_DTYPE_F16 && dt != KILN_DTYPE_BF16)
        return kiln_set_error(KILN_EUNSUPPORTED, "window: output_datatype %lld is not a float type",
                              (long long)dt);
    c->out[0].dtype = (kiln_dtype)dt;
    c->out[0].ndim = 1;
    c->out[0].dims[0] = len;
    return 0;
}

static int win_run(const kiln_call *c, double a0, double a1, double a2) {
    kiln_tensor *y = &c->out[0];
    int64_t size = y->dims[0];
    double N = kiln_attrs_int(c->attrs, "periodic") ? (double)size : (double)(size - 1);
    const double pi = 3.14159265358979323846;
    for (int64_t n = 0; n < size; n++) {
        double w = N > 0 ? a0 - a1 * cos(2 * pi * n / N) + a2 * cos(4 * pi * n / N) : 1.0;
        kiln__ops_set_f64(y->data, y->dtype, n, w);
    }
    return 0;
}

static int hann_impl(const kiln_call *c) { return win_run(c, 0.5, 0.5, 0); }
static int hamming_impl(const kiln_call *c) { return win_run(c, 25.0 / 46.0, 21.0 / 46.0, 0); }
static int blackman_impl(const kiln_call *c) { return win_run(c, 0.42, 0.5, 0.08); }

#define WIN_OP(var, nm, fn)                                                              \
    static const kiln_quick_op var = {                                                   \
        .ns = "ai.onnx", .name = nm, .version = 17,                                      \
        .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,                              \
        .attrs = win_attrs, .shape = win_shape, .impl = fn,                              \
        .doc = "signal window of a build-time length",                                   \
    };                                                                                   \
    KILN_OP(var)

WIN_OP(hann_17, "HannWindow", hann_impl)
WIN_OP(hamming_17, "HammingWindow", hamming_impl)
WIN_OP(blackman_17, "BlackmanWindow", blackman_impl)

/* ------------------------------------------------------------ MelWeightMatrix */

static const kiln_attr_def mel_attrs[] = {
    {"output_datatype", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "1", 0, "ONNX/kiln dtype of the output"},
    {NULL, 0, 0, NULL, 0, NULL},
};

static const kiln_expr *mel_scalar(kiln_shape_ctx *c, int i) {
    const kiln_desc *d = &c->in[i];
    if (d->data)
        return kiln_expr_const(c->x, d->dtype == KILN_DTYPE_I32 ? *(const int32_t *)d->data
                                                                 : *(const int64_t *)d->data);
    if (d->nvalues >= 1 && d->values[0]) return d->values[0];
    return NULL;
}

static int mel_shape(kiln_shape_ctx *c) {
    for (int i = 0; i < 3; i++)
        if ((c->in[i].dtype != KILN_DTYPE_I32 && c->in[i].dtype != KILN_DTYPE_I64) || c->in[i].ndim != 0)
            return kiln_set_error(KILN_ETYPE, "MelWeightMatrix: input %d must be an int32/int64 scalar", i);
    const kiln_expr *bins = mel_scalar(c, 0), *dftl = mel_scalar(c, 1);
    if (!bins || !dftl)
        return kiln_set_error(KILN_EUNSUPPORTED, "MelWeightMatrix: num_mel_bins and dft_length must be known "
                              "when the engine is built");
    int64_t dt = kiln_attrs_int(c->attrs, "output_datatype");
    if (dt != KILN_DTYPE_F32 && dt != KILN_DTYPE_F64 && dt != KILN_DTYPE_F16 && dt != KILN_DTYPE_BF16)
        return kiln_set_error(KILN_EUNSUPPORTED, "MelWeightMatrix: output_datatype %lld is not a float type",
                              (long long)dt);
    c->out[0].dtype = (kiln_dtype)dt;
    c->out[0].ndim = 2;
    c->out[0].dims[0] = kiln_expr_add(c->x, kiln_expr_floordiv(c->x, dftl, kiln_expr_const(c->x, 2)),
                                      kiln_expr_const(c->x, 1));
    c->out[0].dims[1] = bins;
    return 0;
}

static int mel_impl(const kiln_call *c) {
    kiln_tensor *y = &c->out[0];
    int64_t nspec = y->dims[0], nmel = y->dims[1];
    double dftl = kiln__ops_get_f64(c->in[1].data, c->in[1].dtype, 0), sr = kiln__ops_get_f64(c->in[2].data, c->in[2].dtype, 0);
    double lo = kiln__ops_get_f64(c->in[3].data, c->in[3].dtype, 0), hi = kiln__ops_get_f64(c->in[4].data, c->in[4].dtype, 0);
    if (sr <= 0) return kiln_set_error(KILN_EINVAL, "MelWeightMatrix: sample_rate %g (expected > 0)", sr);
    for (int64_t i = 0; i < nspec * nmel; i++) kiln__ops_set_f64(y->data, y->dtype, i, 0);
    double mlo = 2595 * log10(1 + lo / 700), mhi = 2595 * log10(1 + hi / 700);
    double step = (mhi - mlo) / (double)(nmel + 2);
    int64_t *edges = kiln__malloc((size_t)(nmel + 2) * sizeof *edges);
    if (!edges) return kiln_set_error(KILN_ENOMEM, "MelWeightMatrix: out of memory for %lld bins", (long long)nmel);
    for (int64_t i = 0; i < nmel + 2; i++) {
        double f = 700 * (pow(10, (i * step + mlo) / 2595) - 1);
        double e = floor((dftl + 1) * f / sr);
        edges[i] = e > -1e15 && e < 1e15 ? (int64_t)e : -1; /* NaN/huge: no bin */
    }
    for (int64_t i = 0; i < nmel; i++) {
        int64_t l = edges[i], m = edges[i + 1], r = edges[i + 2];
        if (m - l == 0) {
            if (m >= 0 && m < nspec) kiln__ops_set_f64(y->data, y->dtype, m * nmel + i, 1);
        } else {
            for (int64_t j = l; j <= m; j++)
                if (j >= 0 && j < nspec) kiln__ops_set_f64(y->data, y->dtype, j * nmel + i, (double)(j - l) / (double)(m - l));
        }
        if (r - m > 0)
            for (int64_t j = m; j < r; j++)
                if (j >= 0 && j < nspec) kiln__ops_set_f64(y->data, y->dtype, j * nmel + i, (double)(r - j) / (double)(r - m));
    }
    kiln__free(edges);
    return 0;
}

static const kiln_quick_op mel_17 = {
    .ns = "ai.onnx", .name = "MelWeightMatrix", .version = 17,
    .min_inputs = 5, .max_inputs = 5, .num_outputs = 1,
    .attrs = mel_attrs, .shape = mel_shape, .impl = mel_impl,
    .doc = "mel filter bank matrix [dft_length / 2 + 1, num_mel_bins]",
};
KILN_OP(mel_17)
