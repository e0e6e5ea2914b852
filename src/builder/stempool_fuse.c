/*
 * stempool_fuse.c — a network's stem, Conv [-> Relu] -> MaxPool, into one
 * kiln::stempool layer (ops/nn/stempool.c) on CPU builds, before selection
 * (the new layer is typed and its tactics timed like any other; the conv
 * and the Relu are dropped by the dead-code pass after it):
 *
 *   Y = MaxPool(Relu(Conv(X, W, B)))      (or without the Relu)
 *
 * The Conv: 2-D, one group, dilation 1, constant F32 W and B, at most 4
 * input channels and a kernel up to 7 x 7 (conv_fewc.c's), output channels
 * a multiple of 32.  The MaxPool: 2-D, explicit pads, no dilation, floor
 * sizes, its Indices read by nothing.  The conv's and the Relu's outputs
 * are read by the chain alone and are no network outputs.
 * KILN_BUILD_NO_FUSION turns it off.
 *
 * Why the fusion: the stem conv's output (ResNet's 3.2 MB) never leaves
 * the thread's cache; bench/README.md (session 16) has the A/B.
 */
#include "builder.h"
#include "ops/nn/stempool.h"

#include <float.h>
#include <string.h>

/* MaxPool layer li's kernel, strides and pads into k[2], s[2], p[4]: 1 if
 * stempool runs it (2-D, no dilation, no ceil_mode, NOTSET pads, Indices
 * absent or unread). */
static int pool_geo(const builder *b, int li, const int *uses, int64_t *k, int64_t *s, int64_t *p) {
    const bl *L = &b->l[li];
    if (L->nin != 1 || L->nout < 1 || L->nout > 2) return 0;
    if (L->nout == 2 && L->out[1] >= 0 && (uses[L->out[1]] || b->t[L->out[1]].is_output)) return 0;
    kiln_attrs a = kiln__attrset_view(L->attrs);
    const int64_t *v;
    if (strcmp(kiln_attrs_string(&a, "auto_pad"), "NOTSET") || kiln_attrs_int(&a, "ceil_mode")) return 0;
    if (kiln_attrs_ints(&a, "kernel_shape", &v) != 2) return 0;
    memcpy(k, v, 2 * sizeof *v);
    s[0] = s[1] = 1;
    p[0] = p[1] = p[2] = p[3] = 0;
    int64_t n;
    if ((n = kiln_attrs_ints(&a, "strides", &v)) == 2) memcpy(s, v, 2 * sizeof *v);
    else if (n >= 0) return 0;
    if ((n = kiln_attrs_ints(&a, "pads", &v)) == 4) memcpy(p, v, 4 * sizeof *v);
    else if (n >= 0) return 0;
    if ((n = kiln_attrs_ints(&a, "dilations", &v)) >= 0 && (n != 2 || v[0] != 1 || v[1] != 1)) return 0;
    return k[0] >= 1 && k[1] >= 1 && s[0] >= 1 && s[1] >= 1 && p[0] < k[0] && p[2] < k[0] && p[1] < k[1] &&
           p[3] < k[1];
}

static int64_t dim(const builder *b, int t, int d) {
    int64_t v;
    return kiln_expr_is_const(b->t[t].dims[d], &v) ? v : -1;
}

static int try_stem(builder *b, int li, const int *uses, const kiln__op *op) {
    int64_t pk[2], ps[2], pp[4], s[2], p[4], d[2], g;
    if (!kiln__b_live_onnx(b, li, "MaxPool") || !pool_geo(b, li, uses, pk, ps, pp)) return 0;
    int t = b->l[li].in[0], relu = -1;
    if (!kiln__b_private4(b, uses, t)) return 0;
    if (kiln__b_live_onnx(b, b->t[t].producer, "Relu") && b->l[b->t[t].producer].nin == 1) {
        relu = b->t[t].producer;
        t = b->l[relu].in[0];
        if (!kiln__b_private4(b, uses, t)) return 0;
    }
    const int cv = b->t[t].producer;
    if (!kiln__b_conv_geo(b, cv, s, p, d, &g) || g != 1 || d[0] != 1 || d[1] != 1) return 0;
    const bl *C = &b->l[cv];
    const int w = C->in[1], x = C->in[0];
    if (b->t[x].dtype != KILN_DTYPE_F32 || b->t[x].ndim != 4 ||
        !kiln__stempool_fits(dim(b, w, 1), dim(b, w, 2), dim(b, w, 3), dim(b, w, 0)))
        return 0;
    const float lo = relu >= 0 ? 0.0f : -FLT_MAX;
    const kiln_attr_value av[6] = {
        {.present = 1, .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64, .count = 2, .data = s},
        {.present = 1, .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64, .count = 4, .data = p},
        {.present = 1, .type = KILN_ATTR_FLOAT, .f = lo},
        {.present = 1, .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64, .count = 2, .data = pk},
        {.present = 1, .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64, .count = 2, .data = ps},
        {.present = 1, .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64, .count = 4, .data = pp}};
    const char *an[6] = {"strides", "pads", "lo", "p_kernel", "p_strides", "p_pads"};
    const int in[3] = {x, w, C->in[2]};
    char first[256];
    snprintf(first, sizeof first, "%s", C->name);
    int rc = kiln__b_rewrite(b, li, op, an, av, 6, in, 3);
    if (rc) return rc;
    b->l[li].nout = 1; /* the Indices (unread) are no longer made */
    if ((rc = kiln__b_formats(b, li))) return rc;
    b->l[cv].dead = 1;
    if (relu >= 0) b->l[relu].dead = 1;
    kiln__log(KILN_LOG_VERBOSE, "stempool: '%s' .. '%s' run as one kiln::stempool layer", first, b->l[li].name);
    if (b->st) b->st->fused++;
    return 1;
}

int kiln__b_stempool(builder *b) { return kiln__b_rewrite_each(b, "stempool", try_stem); }
