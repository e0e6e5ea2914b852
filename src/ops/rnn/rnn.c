/*
 * rnn.c — ONNX LSTM, GRU and RNN (opset 7 semantics plus the opset 14
 * `layout` attribute): forward/reverse/bidirectional, sequence_lens,
 * initial_h/initial_c, peepholes, clip, the activations attribute with
 * activation_alpha/beta, input_forget, linear_before_reset.
 *
 * Per direction, the input projection of all time steps is one GEMM
 * (X * W^T + Wb + Rb, rows = (time, batch)); each step then adds
 * H_{t-1} * R^T (a matrix-vector product for batch 1) and applies the gate
 * math.  Scratch lives in the workspace.
 */
#include "device/cpu/fastmath.h"
#include "device/cpu/sgemm.h"
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"

#include <math.h>
#include <string.h>

enum { CELL_RNN, CELL_GRU, CELL_LSTM };

static const kiln_attr_def rnn_attrs[] = {
    {"activation_alpha", KILN_ATTR_ARRAY, KILN_DTYPE_F32, NULL, 0, "alpha per activation"},
    {"activation_beta", KILN_ATTR_ARRAY, KILN_DTYPE_F32, NULL, 0, "beta per activation"},
    {"activations", KILN_ATTR_STRING, 0, NULL, 0, "comma-separated activation names"},
    {"clip", KILN_ATTR_FLOAT, 0, NULL, 0, "clip gate inputs to [-clip, clip]"},
    {"direction", KILN_ATTR_STRING, 0, "forward", 0, "forward, reverse or bidirectional"},
    {"hidden_size", KILN_ATTR_INT, 0, NULL, 0, "hidden size (else from R)"},
    {"input_forget", KILN_ATTR_INT, 0, "0", 0, "LSTM: couple input and forget gates"},
    {"layout", KILN_ATTR_INT, 0, "0", 0, "0: [seq, batch, ...], 1: [batch, seq, ...]"},
    {"linear_before_reset", KILN_ATTR_INT, 0, "0", 0, "GRU: apply reset after the R product"},
    {NULL, 0, 0, NULL, 0, NULL},
};

/* ------------------------------------------------------------ activations */

enum { A_SIGMOID, A_TANH, A_RELU, A_AFFINE, A_LEAKYRELU, A_THRESHOLDEDRELU, A_SCALEDTANH,
       A_HARDSIGMOID, A_ELU, A_SOFTSIGN, A_SOFTPLUS };

typedef struct act {
    int kind;
    float alpha, beta;
} act;

static const struct {
    const char *name;
    int kind;
    float alpha, beta;
} g_acts[] = {
    {"sigmoid", A_SIGMOID, 0, 0},        {"tanh", A_TANH, 0, 0},
    {"relu", A_RELU, 0, 0},              {"affine", A_AFFINE, 1.0f, 0.0f},
    {"leakyrelu", A_LEAKYRELU, 0.01f, 0}, {"thresholdedrelu", A_THRESHOLDEDRELU, 1.0f, 0},
    {"scaledtanh", A_SCALEDTANH, 1.0f, 1.0f}, {"hardsigmoid", A_HARDSIGMOID, 0.2f, 0.5f},
    {"elu", A_ELU, 1.0f, 0},             {"softsign", A_SOFTSIGN, 0, 0},
    {"softplus", A_SOFTPLUS, 0, 0},
};

static inline float act_apply(const act *a, float x) {
    switch (a->kind) {
    case A_SIGMOID: return 1.0f / (1.0f + fexp_f32(-x));
    case A_TANH: return ftanh_f32(x);
    case A_RELU: return x < 0 ? 0 : x; /* NaN stays NaN */
    case A_AFFINE: return a->alpha * x + a->beta;
    case A_LEAKYRELU: return x >= 0 ? x : a->alpha * x;
    case A_THRESHOLDEDRELU: return x > a->alpha ? x : 0;
    case A_SCALEDTANH: return a->alpha * tanhf(a->beta * x);
    case A_HARDSIGMOID: {
        float v = a->alpha * x + a->beta;
        return v < 0 ? 0 : v > 1 ? 1 : v;
    }
    case A_ELU: return x >= 0 ? x : a->alpha * (expf(x) - 1);
    case A_SOFTSIGN: return x / (1 + fabsf(x));
    case A_SOFTPLUS: return x > 20 ? x : log1pf(expf(x));
    default: return x;
    }
}

/* a applied to x[0..n) in place: sigmoid and tanh vectorized (fastmath.h;
 * libm's expf and tanhf are scalar calls, 640 of them per step made half
 * of silero's LSTM layer), the rest element by element. */
static void act_n(const act *a, float *x, int64_t n) {
    if (a->kind == A_SIGMOID) fsigmoid_f32_n(x, n);
    else if (a->kind == A_TANH) ftanh_f32_n(x, n);
    else
        for (int64_t k = 0; k < n; k++) x[k] = act_apply(a, x[k]);
}

static void clip_n(float *x, int64_t n, float clip) {
    for (int64_t k = 0; clip > 0 && k < n; k++) x[k] = x[k] < -clip ? -clip : x[k] > clip ? clip : x[k];
}

/* One LSTM step of one batch row, a gate at a time over arrays: g (4H,
 * gates i, o, f, c as ONNX orders them) holds h * R^T and becomes the
 * pre-activations (+ x W^T + biases from xr, peepholes p, clip), then the
 * activations; c and h are updated in place. */
static void lstm_step(const float *xr, float *g, float *h, float *c, int64_t H, const float *p, const act *fa,
                      float clip, int input_forget) {
    float *gi = g, *go = g + H, *gf = g + 2 * H, *gc = g + 3 * H;
    for (int64_t j = 0; j < 4 * H; j++) g[j] += xr[j];
    for (int64_t k = 0; p && k < H; k++) {
        gi[k] += p[k] * c[k];
        gf[k] += p[2 * H + k] * c[k];
    }
    clip_n(gi, H, clip);
    act_n(&fa[0], gi, H);
    if (!input_forget) {
        clip_n(gf, H, clip);
        act_n(&fa[0], gf, H);
    }
    clip_n(gc, H, clip);
    act_n(&fa[1], gc, H);
    for (int64_t k = 0; k < H; k++) c[k] = (input_forget ? 1 - gi[k] : gf[k]) * c[k] + gi[k] * gc[k];
    for (int64_t k = 0; p && k < H; k++) go[k] += p[H + k] * c[k];
    clip_n(go, H, clip);
    act_n(&fa[0], go, H);
    memcpy(gf, c, (size_t)H * sizeof *gf); /* the forget gate is spent: scratch for act(c) */
    act_n(&fa[2], gf, H);
    for (int64_t k = 0; k < H; k++) h[k] = go[k] * gf[k];
}

static int cell_nacts(int cell) { return cell == CELL_LSTM ? 3 : cell == CELL_GRU ? 2 : 1; }
static int cell_gates(int cell) { return cell == CELL_LSTM ? 4 : cell == CELL_GRU ? 3 : 1; }

static int lower_eq(const char *a, const char *b) {
    for (; *a && *b; a++, b++) {
        char x = *a >= 'A' && *a <= 'Z' ? (char)(*a + 32) : *a;
        if (x != *b) return 0;
    }
    return *a == *b;
}

/* Activations for ndir directions: acts[dir * nacts + k]. */
static int read_acts(const kiln_attrs *a, int cell, int ndir, act *acts) {
    int na = cell_nacts(cell);
    static const int defs[3][3] = {{A_TANH}, {A_SIGMOID, A_TANH}, {A_SIGMOID, A_TANH, A_TANH}};
    for (int d = 0; d < ndir; d++)
        for (int k = 0; k < na; k++) {
            act *x = &acts[d * na + k];
            x->kind = defs[cell][k];
            x->alpha = x->beta = 0;
        }
    const kiln_attr_value *v = kiln_attrs_get(a, "activations");
    if (!v || !v->present || !v->s || !*v->s) return 0;
    const float *al = NULL, *be = NULL;
    int64_t nal = kiln_attrs_floats(a, "activation_alpha", &al);
    int64_t nbe = kiln_attrs_floats(a, "activation_beta", &be);
    const char *p = v->s;
    int i = 0, ia = 0, ib = 0;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char name[32];
        if (len >= sizeof name) len = sizeof name - 1;
        memcpy(name, p, len);
        name[len] = 0;
        if (i >= na * ndir)
            return kiln_set_error(KILN_EATTR, "activations: expected %d names (%d per direction), "
                                  "found more in '%s'", na * ndir, na, v->s);
        int found = 0;
        for (size_t j = 0; j < sizeof g_acts / sizeof g_acts[0]; j++)
            if (lower_eq(name, g_acts[j].name)) {
                /* alpha/beta lists are consumed in order by the
                 * activations that take them */
                int k = g_acts[j].kind;
                int has_a = k == A_AFFINE || k == A_LEAKYRELU || k == A_THRESHOLDEDRELU ||
                            k == A_SCALEDTANH || k == A_HARDSIGMOID || k == A_ELU;
                int has_b = k == A_AFFINE || k == A_SCALEDTANH || k == A_HARDSIGMOID;
                acts[i].kind = k;
                acts[i].alpha = has_a && nal > ia ? al[ia++] : g_acts[j].alpha;
                acts[i].beta = has_b && nbe > ib ? be[ib++] : g_acts[j].beta;
                found = 1;
            }
        if (!found) return kiln_set_error(KILN_EATTR, "activations: unknown activation '%s'", name);
        i++;
        p = e ? e + 1 : p + strlen(p);
    }
    if (i != na * ndir)
        return kiln_set_error(KILN_EATTR, "activations: expected %d names (%d per direction), "
                              "found %d in '%s'", na * ndir, na, i, v->s);
    return 0;
}

static int read_dir(const kiln_attrs *a, int *ndir, int *reverse_only) {
    const char *d = kiln_attrs_string(a, "direction");
    *reverse_only = 0;
    if (!d || !strcmp(d, "forward")) *ndir = 1;
    else if (!strcmp(d, "reverse")) { *ndir = 1; *reverse_only = 1; }
    else if (!strcmp(d, "bidirectional")) *ndir = 2;
    else
        return kiln_set_error(KILN_EATTR, "direction must be forward, reverse or bidirectional, "
                              "found '%s'", d);
    return 0;
}

/* ------------------------------------------------------------ shape */

static int rnn_shape(kiln_shape_ctx *c, int cell) {
    const kiln_desc *x = &c->in[0], *w = &c->in[1], *r = &c->in[2];
    if (x->ndim != 3 || w->ndim != 3 || r->ndim != 3)
        return kiln_set_error(KILN_ESHAPE, "X, W and R must be 3-D, found ranks %d, %d, %d", x->ndim,
                              w->ndim, r->ndim);
    if (!kiln__ops_is_float(x->dtype))
        return kiln_set_error(KILN_ETYPE, "X must be a float tensor, found %s",
                              kiln_dtype_name(x->dtype));
    /* ONNX: one type T for all inputs but sequence_lens (int32); the
     * kernel reads them as floats */
    int rc = kiln__ops_check_same_mask(c, cell == CELL_LSTM ? "LSTM" : cell == CELL_GRU ? "GRU" : "RNN", ~(1u << 4));
    if (rc) return rc;
    if (c->nin > 4 && c->in[4].dtype != KILN_DTYPE_UNDEFINED && !kiln__ops_is_int(c->in[4].dtype))
        return kiln_set_error(KILN_ETYPE, "sequence_lens must be an integer tensor, found %s",
                              kiln_dtype_name(c->in[4].dtype));
    int ndir = 1, rev = 0;
    rc = read_dir(c->attrs, &ndir, &rev);
    if (rc) return rc;
    act acts[6];
    if ((rc = read_acts(c->attrs, cell, ndir, acts))) return rc;
    int layout = kiln_attrs_int(c->attrs, "layout") != 0;
    const kiln_expr *seq = x->dims[layout ? 1 : 0], *batch = x->dims[layout ? 0 : 1];
    const kiln_attr_value *hv = kiln_attrs_get(c->attrs, "hidden_size");
    const kiln_expr *H = hv && hv->present ? kiln_expr_const(c->x, hv->i) : r->dims[2];
    int64_t wd, gh, hh;
    if (kiln_expr_is_const(H, &hh) && (hh <= 0 || hh > ((int64_t)1 << 40)))
        return kiln_set_error(KILN_ESHAPE, "hidden_size %lld is out of range (expected 1 .. 2^40)", (long long)hh);
    if (kiln_expr_is_const(w->dims[0], &wd) && wd != ndir)
        return kiln_set_error(KILN_ESHAPE, "W has %lld directions, direction attribute needs %d",
                              (long long)wd, ndir);
    if (kiln_expr_is_const(w->dims[1], &gh) && kiln_expr_is_const(H, &hh) &&
        gh != cell_gates(cell) * hh)
        return kiln_set_error(KILN_ESHAPE, "W has %lld rows, expected %d gates x hidden %lld",
                              (long long)gh, cell_gates(cell), (long long)hh);
    const kiln_expr *D = kiln_expr_const(c->x, ndir);
    for (int o = 0; o < c->nout; o++) {
        kiln_desc *y = &c->out[o];
        y->dtype = x->dtype;
        if (o == 0) {
            y->ndim = 4;
            if (layout) { y->dims[0] = batch; y->dims[1] = seq; y->dims[2] = D; }
            else { y->dims[0] = seq; y->dims[1] = D; y->dims[2] = batch; }
            y->dims[3] = H;
        } else {
            y->ndim = 3;
            if (layout) { y->dims[0] = batch; y->dims[1] = D; }
            else { y->dims[0] = D; y->dims[1] = batch; }
            y->dims[2] = H;
        }
    }
    return 0;
}

/* ------------------------------------------------------------ impl */

static size_t rnn_ws(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0], *r = &c->in[2];
    if (x->ndim != 3 || r->ndim != 3) return 0;
    int64_t seq_batch = x->dims[0] * x->dims[1], GH = r->dims[1], H = r->dims[2];
    int64_t B = x->dims[1] > x->dims[0] ? x->dims[1] : x->dims[0];
    return (size_t)(seq_batch * GH + B * GH + 4 * B * H + GH + 64) * sizeof(float);
}

static int rnn_run(const kiln_call *c, int cell) {
    for (int i = 0; i < c->nin; i++)
        if (c->in[i].data && !kiln__ops_dense(&c->in[i]))
            return kiln_set_error(KILN_EUNSUPPORTED, "input %d is not dense", i);
    const kiln_tensor *X = &c->in[0], *W = &c->in[1], *R = &c->in[2];
    const kiln_tensor *Bt = c->nin > 3 && c->in[3].data ? &c->in[3] : NULL;
    const kiln_tensor *SL = c->nin > 4 && c->in[4].data ? &c->in[4] : NULL;
    const kiln_tensor *H0 = c->nin > 5 && c->in[5].data ? &c->in[5] : NULL;
    const kiln_tensor *C0 = cell == CELL_LSTM && c->nin > 6 && c->in[6].data ? &c->in[6] : NULL;
    const kiln_tensor *P = cell == CELL_LSTM && c->nin > 7 && c->in[7].data ? &c->in[7] : NULL;
    int ndir = 1, rev_only = 0, rc;
    if ((rc = read_dir(c->attrs, &ndir, &rev_only))) return rc;
    act acts[6];
    if ((rc = read_acts(c->attrs, cell, ndir, acts))) return rc;
    int layout = kiln_attrs_int(c->attrs, "layout") != 0;
    int lbr = cell == CELL_GRU && kiln_attrs_int(c->attrs, "linear_before_reset") != 0;
    int input_forget = cell == CELL_LSTM && kiln_attrs_int(c->attrs, "input_forget") != 0;
    const kiln_attr_value *cv = kiln_attrs_get(c->attrs, "clip");
    float clip = cv && cv->present ? (float)cv->f : 0.0f;
    int64_t S = X->dims[layout ? 1 : 0], Bn = X->dims[layout ? 0 : 1], I = X->dims[2];
    int64_t H = R->dims[2], G = cell_gates(cell), GH = G * H;
    if (W->dims[0] != ndir || W->dims[1] != GH || W->dims[2] != I || R->dims[0] != ndir ||
        R->dims[1] != GH)
        return kiln_set_error(KILN_ESHAPE, "W is [%lld, %lld, %lld] and R [%lld, %lld, %lld]; expected "
                              "[%d, %lld, %lld] and [%d, %lld, %lld]",
                              (long long)W->dims[0], (long long)W->dims[1], (long long)W->dims[2],
                              (long long)R->dims[0], (long long)R->dims[1], (long long)R->dims[2],
                              ndir, (long long)GH, (long long)I, ndir, (long long)GH, (long long)H);
    if (Bt && kiln_tensor_numel(Bt) != ndir * 2 * GH)
        return kiln_set_error(KILN_ESHAPE, "B has %lld elements, expected %lld",
                              (long long)kiln_tensor_numel(Bt), (long long)(ndir * 2 * GH));
    if (P && kiln_tensor_numel(P) != ndir * 3 * H)
        return kiln_set_error(KILN_ESHAPE, "P has %lld elements, expected %lld",
                              (long long)kiln_tensor_numel(P), (long long)(ndir * 3 * H));
    if ((H0 && kiln_tensor_numel(H0) != ndir * Bn * H) || (C0 && kiln_tensor_numel(C0) != ndir * Bn * H))
        return kiln_set_error(KILN_ESHAPE, "initial_h/initial_c must have %lld elements",
                              (long long)(ndir * Bn * H));
    if (SL && kiln_tensor_numel(SL) != Bn)
        return kiln_set_error(KILN_ESHAPE, "sequence_lens has %lld elements, expected %lld",
                              (long long)kiln_tensor_numel(SL), (long long)Bn);
    if (c->workspace_size < rnn_ws(c))
        return kiln_set_error(KILN_EINTERNAL, "workspace of %zu bytes, need %zu", c->workspace_size,
                              rnn_ws(c));
    float *xw = c->workspace, *hr = xw + S * Bn * GH, *h = hr + Bn * GH, *cs = h + Bn * H;
    float *bsum = cs + Bn * H;
    float *Y = c->nout > 0 ? c->out[0].data : NULL;
    float *Yh = c->nout > 1 ? c->out[1].data : NULL;
    float *Yc = c->nout > 2 && cell == CELL_LSTM ? c->out[2].data : NULL;
    const float *x = X->data;
    if (Y) memset(Y, 0, (size_t)(S * ndir * Bn * H) * sizeof(float));
    for (int dir = 0; dir < ndir; dir++) {
        int reverse = rev_only || dir == 1;
        const float *w = (const float *)W->data + dir * GH * I;
        const float *rr = (const float *)R->data + dir * GH * H;
        const float *wb = Bt ? (const float *)Bt->data + dir * 2 * GH : NULL;
        const float *rb = wb ? wb + GH : NULL;
        const float *p = P ? (const float *)P->data + dir * 3 * H : NULL;
        const act *fa = &acts[dir * cell_nacts(cell)];
        /* bias folded into the input projection (GRU with linear_before_reset
         * keeps Rb of the h gate separate) */
        for (int64_t j = 0; j < GH; j++) {
            float v = wb ? wb[j] : 0.0f;
            if (rb && !(lbr && j >= 2 * H)) v += rb[j];
            bsum[j] = v;
        }
        /* xw[row, :] = x[row, :] * W^T + bsum; rows in X's own order */
        kiln__gemm gx = {.M = S * Bn, .N = GH, .K = I, .a = x, .a_rs = I, .a_cs = 1, .alpha = 1.0f,
                         .b = w, .b_rs = 1, .b_cs = I, .c = xw, .ldc = GH};
        for (int64_t i = 0; i < S * Bn; i++) memcpy(xw + i * GH, bsum, (size_t)GH * sizeof(float));
        gx.accumulate = 1;
        kiln__sgemm(&gx, c->exec);
        for (int64_t b = 0; b < Bn; b++)
            for (int64_t k = 0; k < H; k++) {
                h[b * H + k] = H0 ? ((const float *)H0->data)[(dir * Bn + b) * H + k] : 0.0f;
                cs[b * H + k] = C0 ? ((const float *)C0->data)[(dir * Bn + b) * H + k] : 0.0f;
            }
        for (int64_t step = 0; step < S; step++) {
            /* hr = h * R^T */
            kiln__gemm gh = {.M = Bn, .N = GH, .K = H, .a = h, .a_rs = H, .a_cs = 1, .alpha = 1.0f,
                             .b = rr, .b_rs = 1, .b_cs = H, .c = hr, .ldc = GH};
            kiln__sgemm(&gh, c->exec);
            for (int64_t b = 0; b < Bn; b++) {
                int64_t len = SL ? kiln__ops_get_i64(SL->data, SL->dtype, b) : S;
                if (len > S) len = S;
                if (step >= len) continue;
                int64_t t = reverse ? len - 1 - step : step;
                const float *xr = xw + (layout ? b * S + t : t * Bn + b) * GH;
                const float *hrb = hr + b * GH;
                float *hb = h + b * H, *cb = cs + b * H;
                if (cell == CELL_LSTM) lstm_step(xr, hr + b * GH, hb, cb, H, p, fa, clip, input_forget);
                for (int64_t k = 0; k < H && cell != CELL_LSTM; k++) {
#define CLIP(v) (clip > 0 ? ((v) < -clip ? -clip : (v) > clip ? clip : (v)) : (v))
                    if (cell == CELL_RNN) {
                        float v = xr[k] + hrb[k];
                        hb[k] = act_apply(&fa[0], CLIP(v));
                    } else if (cell == CELL_GRU) {
                        float z = act_apply(&fa[0], CLIP(xr[k] + hrb[k]));
                        float r = act_apply(&fa[0], CLIP(xr[H + k] + hrb[H + k]));
                        float hh;
                        if (lbr)
                            hh = xr[2 * H + k] + r * (hrb[2 * H + k] + (rb ? rb[2 * H + k] : 0.0f));
                        else
                            hh = xr[2 * H + k]; /* + (r .* h) R_h^T, below */
                        hr[b * GH + 2 * H + k] = r; /* stash r */
                        if (lbr) {
                            float n = act_apply(&fa[1], CLIP(hh));
                            hb[k] = (1 - z) * n + z * hb[k];
                        } else {
                            bsum[k] = z; /* stash z: bsum is not needed after the projection */
                        }
                    }
                }
                if (cell == CELL_GRU && !lbr) {
                    /* h~ = g(x Wh + (r .* h) Rh^T + Wbh + Rbh) */
                    const float *rh = rr + 2 * H * H;
                    float *rhv = hr + b * GH + 2 * H; /* r, overwritten by the products below */
                    float *rxh = bsum + GH; /* H floats of workspace */
                    for (int64_t k = 0; k < H; k++) rxh[k] = rhv[k] * hb[k];
                    for (int64_t k = 0; k < H; k++) {
                        const float *row = rh + k * H;
                        float s = 0;
                        for (int64_t q = 0; q < H; q++) s += rxh[q] * row[q];
                        float n = act_apply(&fa[1], CLIP(xr[2 * H + k] + s));
                        float z = bsum[k];
                        rhv[k] = (1 - z) * n + z * hb[k];
                    }
                    memcpy(hb, rhv, (size_t)H * sizeof(float));
                }
#undef CLIP
                if (Y) {
                    float *yd = layout ? Y + ((b * S + t) * ndir + dir) * H
                                       : Y + ((t * ndir + dir) * Bn + b) * H;
                    memcpy(yd, hb, (size_t)H * sizeof(float));
                }
            }
        }
        for (int64_t b = 0; b < Bn; b++) {
            float *yh = Yh ? (layout ? Yh + (b * ndir + dir) * H : Yh + (dir * Bn + b) * H) : NULL;
            float *yc = Yc ? (layout ? Yc + (b * ndir + dir) * H : Yc + (dir * Bn + b) * H) : NULL;
            if (yh) memcpy(yh, h + b * H, (size_t)H * sizeof(float));
            if (yc) memcpy(yc, cs + b * H, (size_t)H * sizeof(float));
        }
    }
    return 0;
}

static int lstm_shape(kiln_shape_ctx *c) { return rnn_shape(c, CELL_LSTM); }
static int gru_shape(kiln_shape_ctx *c) { return rnn_shape(c, CELL_GRU); }
static int rnn1_shape(kiln_shape_ctx *c) { return rnn_shape(c, CELL_RNN); }
static int lstm_f32(const kiln_call *c) { return rnn_run(c, CELL_LSTM); }
static int gru_f32(const kiln_call *c) { return rnn_run(c, CELL_GRU); }
static int rnn_f32(const kiln_call *c) { return rnn_run(c, CELL_RNN); }
static int lstm_impl(const kiln_call *c) { return kiln__ops_as_f32(c, lstm_f32); }
static int gru_impl(const kiln_call *c) { return kiln__ops_as_f32(c, gru_f32); }
static int rnn_impl(const kiln_call *c) { return kiln__ops_as_f32(c, rnn_f32); }

/* CUDA (rnn_cuda.c): the attributes resolved here, FP32 in every slot but
 * sequence_lens (INT32); a layer of other types stays on the CPU (a check,
 * not cuda_formats: the slot count varies with the optional inputs). */
static int rnn_cuda(const kiln_call *c, int cell) {
    kiln_cu_rnn p;
    memset(&p, 0, sizeof p);
    p.cell = cell == CELL_LSTM ? 2 : cell == CELL_GRU ? 1 : 0;
    int ndir = 1, rev_only = 0, rc;
    act acts[6];
    if ((rc = read_dir(c->attrs, &ndir, &rev_only)) || (rc = read_acts(c->attrs, cell, ndir, acts))) return rc;
    p.ndir = ndir;
    p.rev_only = rev_only;
    p.nacts = cell_nacts(cell);
    for (int i = 0; i < ndir * p.nacts; i++) p.act[i] = acts[i].kind, p.alpha[i] = acts[i].alpha, p.beta[i] = acts[i].beta;
    p.layout = kiln_attrs_int(c->attrs, "layout") != 0;
    p.lbr = cell == CELL_GRU && kiln_attrs_int(c->attrs, "linear_before_reset") != 0;
    p.input_forget = cell == CELL_LSTM && kiln_attrs_int(c->attrs, "input_forget") != 0;
    const kiln_attr_value *cv = kiln_attrs_get(c->attrs, "clip");
    p.clip = cv && cv->present ? (float)cv->f : 0.0f;
    return kiln__cu_rnn(c, &p);
}
static int lstm_cuda(const kiln_call *c) { return rnn_cuda(c, CELL_LSTM); }
static int gru_cuda(const kiln_call *c) { return rnn_cuda(c, CELL_GRU); }
static int rnn1_cuda(const kiln_call *c) { return rnn_cuda(c, CELL_RNN); }
static int rnn_cuda_check(const kiln_shape_ctx *c) {
    for (int i = 0; i < c->nin + c->nout; i++) {
        kiln_dtype t = i < c->nin ? c->in[i].dtype : c->out[i - c->nin].dtype;
        if (t != KILN_DTYPE_UNDEFINED && t != (i == 4 && i < c->nin ? KILN_DTYPE_I32 : KILN_DTYPE_F32))
            return kiln_set_error(KILN_EUNSUPPORTED, "the CUDA kernel takes FP32 (sequence_lens INT32), found %s at "
                                  "position %d", kiln_dtype_name(t), i);
    }
    /* its state (6 H floats) lives in the 48 KiB of shared memory a block
     * gets without opting in */
    int64_t H;
    if (c->nin > 2 && c->in[2].ndim == 3 && kiln_expr_is_const(c->in[2].dims[2], &H) && H * 6 * 4 > 48 * 1024)
        return kiln_set_error(KILN_EUNSUPPORTED, "hidden size %lld: the CUDA kernel holds at most 2048", (long long)H);
    return 0;
}

static const kiln_quick_op lstm_op = {
    .ns = "ai.onnx", .name = "LSTM", .version = 7,
    .min_inputs = 3, .max_inputs = 8, .num_outputs = 3,
    .attrs = rnn_attrs, .shape = lstm_shape, .impl = lstm_impl, .workspace = rnn_ws,
    .doc = "LSTM (peepholes, sequence_lens, bidirectional, layout)",
    .cuda_impl = lstm_cuda, .cuda_check = rnn_cuda_check,
};
static const kiln_quick_op gru_op = {
    .ns = "ai.onnx", .name = "GRU", .version = 7,
    .min_inputs = 3, .max_inputs = 6, .num_outputs = 2,
    .attrs = rnn_attrs, .shape = gru_shape, .impl = gru_impl, .workspace = rnn_ws,
    .doc = "GRU (linear_before_reset, sequence_lens, bidirectional, layout)",
    .cuda_impl = gru_cuda, .cuda_check = rnn_cuda_check,
};
static const kiln_quick_op rnn_op = {
    .ns = "ai.onnx", .name = "RNN", .version = 7,
    .min_inputs = 3, .max_inputs = 6, .num_outputs = 2,
    .attrs = rnn_attrs, .shape = rnn1_shape, .impl = rnn_impl, .workspace = rnn_ws,
    .doc = "simple RNN (sequence_lens, bidirectional, layout)",
    .cuda_impl = rnn1_cuda, .cuda_check = rnn_cuda_check,
};

__attribute__((constructor)) static void rnn_register(void) {
    /* 14 adds `layout` (already in the schema above) */
    static const int v[] = {7, 14};
    kiln__ops_register_versions(&lstm_op, v, 2);
    kiln__ops_register_versions(&gru_op, v, 2);
    kiln__ops_register_versions(&rnn_op, v, 2);
}
