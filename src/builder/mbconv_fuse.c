/*
 * mbconv_fuse.c — MobileNet inverted-residual blocks into kiln::mbconv
 * layers (ops/nn/mbconv.c), on CPU builds, before selection (so the new
 * layer is typed and its tactics timed like any other; the dead chain is
 * dropped by the dead-code pass after it):
 *
 *   [E = act(Conv1x1(X, We, Be))]  D = act(Conv_dw(E, Wd, Bd))  Y = Conv1x1(D, Wp, Bp)
 *
 * or, where the block has no 1x1 expand conv and E comes from a dense conv
 * of at most 4 input channels (a network's stem: 3x3 at stride 2 on the
 * image), that conv as the block's expand step (conv_fewc.h):
 *
 *   E = act(Conv_KxK(X, We, Be))  D = ...                    (e_strides, e_pads)
 *
 * act: Relu, Clip with constant (or absent) min/max, or none.  Every Conv
 * is 2-D F32 with constant weights and bias; the depthwise one has group =
 * channels, one input channel per group, explicit pads (auto_pad NOTSET)
 * and a geometry the depthwise rows kernel runs (conv_dwrows.h); the 1x1
 * convs have stride 1 and no pads.  Each intermediate is read by the chain
 * alone and is no network output.  The block's residual Add is fused later
 * as an epilogue (fuse.c), as for a Conv.  Tactic 1 of the new layer runs
 * the three steps as the separate layers would, so the timing decides
 * between the unfused chain and the row bands that keep E and D in cache.
 * KILN_BUILD_NO_FUSION turns it off.
 */
#include "builder.h"
#include "ops/common/ops_util.h"
#include "ops/nn/conv_dwrows.h"
#include "ops/nn/conv_fewc.h"

#include <float.h>
#include <string.h>

/* Tensor t: rank-4 F32 activation read once (by the chain), no output. */
static int private4(const builder *b, const int *uses, int t) {
    return t >= 0 && uses[t] == 1 && !b->t[t].is_output && !b->t[t].is_size && b->t[t].kind == BT_ACT &&
           b->t[t].dtype == KILN_DTYPE_F32 && b->t[t].ndim == 4;
}

static int const_f32(const builder *b, int t, int ndim) {
    return t >= 0 && b->t[t].kind == BT_CONST && b->t[t].data && b->t[t].dtype == KILN_DTYPE_F32 &&
           b->t[t].ndim == ndim;
}

static int64_t dim(const builder *b, int t, int d) {
    int64_t v;
    return kiln_expr_is_const(b->t[t].dims[d], &v) ? v : -1;
}

/* Conv layer li: 2-D, constant W and B, explicit pads; its attributes in
 * s[2], p[4], d[2] and group *g.  0 if it is not such a conv. */
static int conv_geo(const builder *b, int li, int64_t *s, int64_t *p, int64_t *d, int64_t *g) {
    if (!kiln__b_live_onnx(b, li, "Conv")) return 0;
    const bl *L = &b->l[li];
    if (L->nin != 3 || L->nout != 1 || L->aot == 1 || !const_f32(b, L->in[1], 4) || !const_f32(b, L->in[2], 1))
        return 0;
    kiln_attrs a = kiln__attrset_view(L->attrs);
    const int64_t *v;
    s[0] = s[1] = d[0] = d[1] = 1;
    p[0] = p[1] = p[2] = p[3] = 0;
    if (strcmp(kiln_attrs_string(&a, "auto_pad"), "NOTSET")) return 0;
    int64_t n;
    if ((n = kiln_attrs_ints(&a, "strides", &v)) == 2) memcpy(s, v, 2 * sizeof *v);
    else if (n >= 0) return 0;
    if ((n = kiln_attrs_ints(&a, "dilations", &v)) == 2) memcpy(d, v, 2 * sizeof *v);
    else if (n >= 0) return 0;
    if ((n = kiln_attrs_ints(&a, "pads", &v)) == 4) memcpy(p, v, 4 * sizeof *v);
    else if (n >= 0) return 0;
    if ((n = kiln_attrs_ints(&a, "kernel_shape", &v)) >= 0 &&
        (n != 2 || v[0] != dim(b, L->in[1], 2) || v[1] != dim(b, L->in[1], 3)))
        return 0;
    *g = kiln_attrs_int(&a, "group");
    return 1;
}

/* A 1x1 conv with stride 1, no pads, one group. */
static int pointwise(const builder *b, int li) {
    int64_t s[2], p[4], d[2], g;
    return conv_geo(b, li, s, p, d, &g) && g == 1 && s[0] == 1 && s[1] == 1 && !(p[0] | p[1] | p[2] | p[3]) &&
           dim(b, b->l[li].in[1], 2) == 1 && dim(b, b->l[li].in[1], 3) == 1;
}

/* A dense conv of at most 4 input channels and Ce outputs with a kernel
 * up to 7 x 7 (a stem), dilation 1; its strides and pads into es, ep. */
static int stem_conv(const builder *b, int li, int64_t Ce, int64_t *es, int64_t *ep) {
    int64_t s[2], p[4], d[2], g;
    if (!conv_geo(b, li, s, p, d, &g) || g != 1 || d[0] != 1 || d[1] != 1) return 0;
    int w = b->l[li].in[1];
    int64_t C = dim(b, w, 1), kh = dim(b, w, 2), kw = dim(b, w, 3);
    if (dim(b, w, 0) != Ce || C < 1 || C > KILN__FEWC_CMAX || kh < 1 || kh > KILN__FEWC_KMAX || kw < 1 ||
        kw > KILN__FEWC_KMAX || s[0] > 4 || s[1] > 4)
        return 0;
    memcpy(es, s, 2 * sizeof *s);
    memcpy(ep, p, 4 * sizeof *p);
    return 1;
}

/* Scalar F32 constant t (or t < 0: keep *v). */
static int scalar(const builder *b, int t, float *v) {
    if (t < 0) return 1;
    if (b->t[t].kind != BT_CONST || !b->t[t].data || b->t[t].dtype != KILN_DTYPE_F32) return 0;
    for (int k = 0; k < b->t[t].ndim; k++)
        if (dim(b, t, k) != 1) return 0;
    *v = *(const float *)b->t[t].data;
    return 1;
}

/* If tensor *t comes from a Relu or Clip (constant bounds) of a private
 * tensor: step *t back to that tensor and set the bounds; 1 if so, 0 if
 * not (bounds then none), -1 if it comes from a clamp the block cannot
 * take (Clip with attributes or non-constant bounds). */
static int strip_act(const builder *b, const int *uses, int *t, float *lo, float *hi) {
    *lo = -FLT_MAX;
    *hi = FLT_MAX;
    int li = b->t[*t].producer;
    if (kiln__b_live_onnx(b, li, "Relu") && b->l[li].nin == 1 && private4(b, uses, b->l[li].in[0])) {
        *lo = 0.0f;
        *t = b->l[li].in[0];
        return 1;
    }
    if (!kiln__b_live_onnx(b, li, "Clip")) return 0;
    const bl *L = &b->l[li];
    if (L->op->version < 11 || L->nin < 1 || !private4(b, uses, L->in[0]) ||
        !scalar(b, L->nin > 1 ? L->in[1] : -1, lo) || !scalar(b, L->nin > 2 ? L->in[2] : -1, hi) || !(*lo <= *hi))
        return -1;
    *t = L->in[0];
    return 1;
}

static int try_block(builder *b, int li, const int *uses, const kiln__op *op) {
    if (!pointwise(b, li) || b->t[b->l[li].out[0]].dtype != KILN_DTYPE_F32) return 0;
    const bl *P = &b->l[li];
    int D = P->in[0];
    float d_lo, d_hi, e_lo = -FLT_MAX, e_hi = FLT_MAX;
    if (!private4(b, uses, D) || strip_act(b, uses, &D, &d_lo, &d_hi) < 0 || !private4(b, uses, D)) return 0;
    int dw = b->t[D].producer;
    int64_t s[2], p[4], d[2], g;
    if (!conv_geo(b, dw, s, p, d, &g)) return 0;
    const bl *W = &b->l[dw];
    int wd = W->in[1], E = W->in[0];
    int64_t Ce = dim(b, wd, 0);
    if (Ce < 1 || g != Ce || dim(b, wd, 1) != 1 || dim(b, E, 1) != Ce || dim(b, P->in[1], 1) != Ce ||
        b->t[E].dtype != KILN_DTYPE_F32 || b->t[E].ndim != 4 || !kiln__dwrows_fits(s[1], dim(b, wd, 3)))
        return 0;
    int ex = -1, X = E;
    int e = X;
    int64_t es[2] = {1, 1}, ep[4] = {0, 0, 0, 0};
    if (private4(b, uses, E) && strip_act(b, uses, &e, &e_lo, &e_hi) >= 0 && private4(b, uses, e) &&
        (pointwise(b, b->t[e].producer) || stem_conv(b, b->t[e].producer, Ce, es, ep))) {
        ex = b->t[e].producer;
        X = b->l[ex].in[0];
    } else {
        e_lo = -FLT_MAX;
        e_hi = FLT_MAX;
    }
    if (b->t[X].dtype != KILN_DTYPE_F32 || b->t[X].ndim != 4) return 0;
    const kiln_attr_value av[9] = {
        {.present = 1, .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64, .count = 2, .data = s},
        {.present = 1, .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64, .count = 4, .data = p},
        {.present = 1, .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64, .count = 2, .data = d},
        {.present = 1, .type = KILN_ATTR_FLOAT, .f = e_lo},
        {.present = 1, .type = KILN_ATTR_FLOAT, .f = e_hi},
        {.present = 1, .type = KILN_ATTR_FLOAT, .f = d_lo},
        {.present = 1, .type = KILN_ATTR_FLOAT, .f = d_hi},
        {.present = 1, .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64, .count = 2, .data = es},
        {.present = 1, .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64, .count = 4, .data = ep}};
    const char *an[9] = {"strides", "pads", "dilations", "e_lo", "e_hi", "d_lo", "d_hi", "e_strides", "e_pads"};
    int in[7] = {X, wd, W->in[2], P->in[1], P->in[2], ex >= 0 ? b->l[ex].in[1] : -1, ex >= 0 ? b->l[ex].in[2] : -1};
    /* the chain's layers: nothing reads their outputs after the rewrite */
    const int chain[4] = {b->t[P->in[0]].producer, dw, ex >= 0 ? b->t[E].producer : -1, ex};
    char first[256];
    snprintf(first, sizeof first, "%s", b->l[ex >= 0 ? ex : dw].name);
    int rc = kiln__b_rewrite(b, li, op, an, av, 9, in, ex >= 0 ? 7 : 5);
    if (rc) return rc;
    /* the new layer's tactics (its formats_fn), as its shape call makes them */
    if ((rc = kiln__b_formats(b, li))) return rc;
    for (int k = 0; k < 4; k++)
        if (chain[k] >= 0) b->l[chain[k]].dead = 1;
    kiln__log(KILN_LOG_VERBOSE, "mbconv: '%s' .. '%s' run as one kiln::mbconv layer (%s)", first, b->l[li].name,
              ex < 0 ? "depthwise, project" : es[0] * es[1] > 1 || dim(b, b->l[ex].in[1], 2) > 1
                                                ? "stem conv, depthwise, project" : "expand, depthwise, project");
    if (b->st) b->st->fused++;
    return 1;
}

int kiln__b_rewrite_each(builder *b, const char *name, kiln__b_try_fn try_fn) {
    if ((b->cfg->flags & KILN_BUILD_NO_FUSION) || b->cuda) return 0;
    const kiln__op *op = kiln__registry_find("kiln", name, 1);
    if (!op) return 0;
    int *uses = kiln__malloc(((size_t)b->nt + 1) * sizeof *uses);
    if (!uses) return kiln__err(KILN_ENOMEM, "build: out of memory");
    int rc = 0;
    for (;;) { /* a rewrite changes who reads what: recount, go on after it */
        kiln__b_count_uses(b, uses);
        rc = 0;
        for (int li = 0; li < b->nl && !rc; li++) rc = try_fn(b, li, uses, op);
        if (rc <= 0) break;
    }
    kiln__free(uses);
    return rc < 0 ? rc : 0;
}

int kiln__b_mbconv(builder *b) { return kiln__b_rewrite_each(b, "mbconv", try_block); }

/* For stempool_fuse.c (builder.h). */
int kiln__b_conv_geo(const builder *b, int li, int64_t *s, int64_t *p, int64_t *d, int64_t *g) {
    return conv_geo(b, li, s, p, d, g);
}

int kiln__b_private4(const builder *b, const int *uses, int t) { return private4(b, uses, t); }
