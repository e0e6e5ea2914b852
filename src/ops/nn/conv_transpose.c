/*
 * conv_transpose.c — ONNX ConvTranspose (1-D/2-D/3-D, groups, dilations,
 * strides, pads, auto_pad, output_padding, output_shape, bias).
 *
 * Per image and group: col[Mg*k, HWin] = W_g^T * X_g on the packed SGEMM
 * (the transposition is a stride choice, no copy), then col2im scatters
 * the columns into the output, split over output channels so threads never
 * write the same element (where kernel = stride, e.g. 2x2 upsampling, over
 * output rows: each has one contribution).  The col buffer lives in the
 * workspace.
 */
#include "device/cpu/sgemm.h"
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"


#include <stdlib.h>
#include <string.h>

static const kiln_attr_def ct_attrs[] = {
    {"auto_pad", KILN_ATTR_STRING, 0, "NOTSET", 0, "NOTSET, SAME_UPPER, SAME_LOWER or VALID"},
    {"dilations", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "dilation per spatial axis"},
    {"group", KILN_ATTR_INT, 0, "1", 0, "number of groups"},
    {"kernel_shape", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "kernel dims (else from W)"},
    {"output_padding", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "extra size at the end"},
    {"output_shape", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "spatial output shape"},
    {"pads", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "begin pads then end pads"},
    {"strides", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "stride per spatial axis"},
    {NULL, 0, 0, NULL, 0, NULL},
};

typedef struct ctgeom {
    int nsp;
    int64_t N, C, M, G, Cg, Mg;
    int64_t id[3], k[3], s[3], d[3], pb[3], pe[3], op[3], o[3];
} ctgeom;

static int get_arr(const kiln_attrs *a, const char *name, int n, int64_t *out, int64_t def) {
    const int64_t *v;
    int64_t cnt = kiln_attrs_ints(a, name, &v);
    for (int i = 0; i < n; i++) out[i] = def;
    if (cnt < 0) return 0;
    if (cnt != n)
        return kiln_set_error(KILN_EATTR, "ConvTranspose: %s: expected %d values, found %lld", name,
                              n, (long long)cnt);
    for (int i = 0; i < n; i++) out[i] = v[i];
    return 0;
}

/* in[i] < 0: unknown (shape time; then o[i] = -1 unless output_shape). */
static int ct_geom(const kiln_attrs *a, int nsp, const int64_t *in, const int64_t *wk, ctgeom *g) {
    int rc;
    memset(g, 0, sizeof *g);
    g->nsp = nsp;
    int64_t pads[6];
    if ((rc = get_arr(a, "strides", nsp, g->s, 1))) return rc;
    if ((rc = get_arr(a, "dilations", nsp, g->d, 1))) return rc;
    if ((rc = get_arr(a, "output_padding", nsp, g->op, 0))) return rc;
    if ((rc = get_arr(a, "pads", 2 * nsp, pads, 0))) return rc;
    if ((rc = get_arr(a, "kernel_shape", nsp, g->k, -1))) return rc;
    if ((rc = kiln__ops_check_geom("ConvTranspose", "strides", g->s, nsp, 1)) ||
        (rc = kiln__ops_check_geom("ConvTranspose", "dilations", g->d, nsp, 1)) ||
        (rc = kiln__ops_check_geom("ConvTranspose", "pads", pads, 2 * nsp, -KILN_OPS_MAX_GEOM)) ||
        (rc = kiln__ops_check_geom("ConvTranspose", "output_padding", g->op, nsp, -KILN_OPS_MAX_GEOM)))
        return rc;
    for (int i = 0; i < nsp; i++) {
        if (g->k[i] < 0) g->k[i] = wk[i];
        if (g->k[i] != wk[i])
            return kiln_set_error(KILN_EATTR, "ConvTranspose: kernel_shape[%d] = %lld but W has %lld",
                                  i, (long long)g->k[i], (long long)wk[i]);
        g->pb[i] = pads[i];
        g->pe[i] = pads[nsp + i];
        g->id[i] = in[i];
    }
    const int64_t *os;
    int64_t nos = kiln_attrs_ints(a, "output_shape", &os);
    if (nos >= 0 && nos != nsp && nos != nsp + 2)
        return kiln_set_error(KILN_EATTR, "ConvTranspose: output_shape: expected %d values, found %lld",
                              nsp, (long long)nos);
    if (nos == nsp + 2) os += 2;
    const char *ap = kiln_attrs_string(a, "auto_pad");
    int same = ap && (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER"));
    int upper = ap && !strcmp(ap, "SAME_UPPER");
    if (ap && !strcmp(ap, "VALID"))
        for (int i = 0; i < nsp; i++) g->pb[i] = g->pe[i] = 0;
    for (int i = 0; i < nsp; i++) {
        int64_t full = in[i] < 0 ? -1 : g->s[i] * (in[i] - 1) + g->op[i] + (g->k[i] - 1) * g->d[i] + 1;
        if (nos >= 0 || same) {
            int64_t want = nos >= 0 ? os[i] : (in[i] < 0 ? -1 : in[i] * g->s[i]);
            g->o[i] = want;
            if (full < 0) continue;
            int64_t tot = full - want;
            if (tot < 0) tot = 0;
            if (upper || !same) {
                g->pb[i] = tot / 2;
                g->pe[i] = tot - tot / 2;
            } else {
                g->pb[i] = tot - tot / 2;
                g->pe[i] = tot / 2;
            }
        } else {
            g->o[i] = full < 0 ? -1 : full - g->pb[i] - g->pe[i];
        }
    }
    return 0;
}

static int ct_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0], *w = &c->in[1];
    if (x->ndim < 3 || x->ndim > 5 || w->ndim != x->ndim)
        return kiln_set_error(KILN_ESHAPE, "ConvTranspose: X and W must have rank 3..5, found %d and %d",
                              x->ndim, w->ndim);
    if (x->dtype != w->dtype || !kiln__ops_is_float(x->dtype))
        return kiln_set_error(KILN_ETYPE, "ConvTranspose: X and W must share a float type");
    int nsp = x->ndim - 2;
    int64_t in[3], wk[3], G = kiln_attrs_int(c->attrs, "group"), wm;
    for (int i = 0; i < nsp; i++) {
        if (!kiln_expr_is_const(x->dims[2 + i], &in[i])) in[i] = -1;
        if (!kiln_expr_is_const(w->dims[2 + i], &wk[i]))
            return kiln_set_error(KILN_ESHAPE, "ConvTranspose: kernel dims of W must be static");
    }
    int rc = kiln__ops_check_geom("ConvTranspose", "group", &G, 1, 1);
    if (rc) return rc;
    ctgeom g;
    if ((rc = ct_geom(c->attrs, nsp, in, wk, &g))) return rc;
    kiln_desc *y = &c->out[0];
    y->dtype = x->dtype;
    y->ndim = x->ndim;
    y->dims[0] = x->dims[0];
    int64_t wmg;
    if (kiln_expr_is_const(w->dims[1], &wm)) {
        if (__builtin_mul_overflow(wm, G, &wmg))
            return kiln_set_error(KILN_ESHAPE, "ConvTranspose: W dim 1 (%lld) x group (%lld) overflows",
                                  (long long)wm, (long long)G);
        y->dims[1] = kiln_expr_const(c->x, wmg);
    } else {
        y->dims[1] = kiln_expr_mul(c->x, w->dims[1], kiln_expr_const(c->x, G));
    }
    for (int i = 0; i < nsp; i++) {
        if (g.o[i] >= 0) {
            y->dims[2 + i] = kiln_expr_const(c->x, g.o[i]);
            continue;
        }
        const char *ap = kiln_attrs_string(c->attrs, "auto_pad");
        const kiln_expr *xi = x->dims[2 + i];
        if (ap && (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER"))) {
            y->dims[2 + i] = kiln_expr_mul(c->x, xi, kiln_expr_const(c->x, g.s[i]));
        } else {
            int64_t extra = -g.s[i] + g.op[i] + (g.k[i] - 1) * g.d[i] + 1 - g.pb[i] - g.pe[i];
            y->dims[2 + i] = kiln_expr_add(c->x, kiln_expr_mul(c->x, xi, kiln_expr_const(c->x, g.s[i])),
                                           kiln_expr_const(c->x, extra));
        }
    }
    return 0;
}

static int full_geom(const kiln_call *c, ctgeom *g) {
    const kiln_tensor *x = &c->in[0], *w = &c->in[1];
    int nsp = x->ndim - 2;
    int64_t in[3], wk[3];
    for (int i = 0; i < nsp; i++) { in[i] = x->dims[2 + i]; wk[i] = w->dims[2 + i]; }
    ctgeom lg;
    int rc = ct_geom(c->attrs, nsp, in, wk, &lg);
    if (rc) return rc;
    memset(g, 0, sizeof *g);
    g->nsp = nsp;
    g->N = x->dims[0];
    g->C = x->dims[1];
    g->G = kiln_attrs_int(c->attrs, "group");
    if (g->G < 1 || g->C % g->G || w->dims[0] != g->C)
        return kiln_set_error(KILN_ESHAPE, "ConvTranspose: X has %lld channels, W has %lld, group %lld",
                              (long long)g->C, (long long)w->dims[0], (long long)g->G);
    g->Cg = g->C / g->G;
    g->Mg = w->dims[1];
    g->M = g->Mg * g->G;
    int off = 3 - nsp;
    for (int i = 0; i < 3; i++) {
        g->id[i] = g->k[i] = g->s[i] = g->d[i] = g->o[i] = 1;
        g->pb[i] = g->pe[i] = 0;
    }
    for (int i = 0; i < nsp; i++) {
        int j = off + i;
        g->id[j] = lg.id[i];
        g->k[j] = lg.k[i];
        g->s[j] = lg.s[i];
        g->d[j] = lg.d[i];
        g->pb[j] = lg.pb[i];
        g->o[j] = c->out[0].dims[2 + i];
        if (lg.o[i] != g->o[j])
            return kiln_set_error(KILN_ESHAPE, "ConvTranspose: output dim %d is %lld, expected %lld",
                                  2 + i, (long long)g->o[j], (long long)lg.o[i]);
    }
    if (c->out[0].dims[1] != g->M)
        return kiln_set_error(KILN_ESHAPE, "ConvTranspose: output has %lld channels, expected %lld",
                              (long long)c->out[0].dims[1], (long long)g->M);
    if (c->nin > 2 && c->in[2].data && kiln_tensor_numel(&c->in[2]) != g->M)
        return kiln_set_error(KILN_ESHAPE, "ConvTranspose: bias has %lld elements, expected %lld",
                              (long long)kiln_tensor_numel(&c->in[2]), (long long)g->M);
    return 0;
}

static size_t ct_ws_bytes(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0], *w = &c->in[1];
    int64_t n = w->ndim >= 2 ? w->dims[1] : 1;
    for (int i = 2; i < w->ndim; i++) n *= w->dims[i];
    for (int i = 2; i < x->ndim; i++) n *= x->dims[i];
    return (size_t)n * sizeof(float) + 64;
}

typedef struct col2im {
    const ctgeom *g;
    const float *col;
    float *y;   /* the group's first output channel */
    const float *bias;
    const kiln_call *call; /* fused epilogue (kiln_call_epilogue) */
    int64_t chan0;         /* channel of the group's first output */
} col2im;

/* Kernel == stride, no padding, no dilation (2x2/stride-2 upsampling): every
 * output element gets exactly one contribution, so rows are written once. */
static int tiling(const ctgeom *g) {
    for (int i = 0; i < 3; i++)
        if (g->k[i] != g->s[i] || g->d[i] != 1 || g->pb[i] != 0 || g->o[i] != g->id[i] * g->s[i])
            return 0;
    return g->id[0] == 1;
}

/* Tiled col2im over units [b, e) of (channel m, input row iy), m * IH +
 * iy: a unit writes its channel's output rows iy * KH .. iy * KH + KH - 1
 * and nothing else, so a unit's output is the flat span [u, u + 1) times
 * KH * OW, and threads can split a single channel (PP-OCR det's last
 * ConvTranspose has one: split by channel, it ran on one thread).  The
 * threads split each channel's rows (kiln__ops_par_planes): the GEMM
 * before split its columns, the input's pixels, so each reads the part of
 * col its core wrote. */
static void col2im_tiled(void *ud, int64_t b, int64_t e) {
    const col2im *t = ud;
    const ctgeom *g = t->g;
    const int64_t IH = g->id[1], IW = g->id[2], OW = g->o[2], KH = g->k[1], KW = g->k[2];
    const int64_t isp = IH * IW;
    for (int64_t u = b; u < e; u++) {
        const int64_t m = u / IH, iy = u % IH;
        float bv = t->bias ? t->bias[m] : 0.0f;
        for (int64_t ky = 0; ky < KH; ky++) {
            float *yr = t->y + (u * KH + ky) * OW;
            const float *c0 = t->col + ((m * KH + ky) * KW) * isp + iy * IW;
            if (KW == 2) {
                const float *c1 = c0 + isp;
                for (int64_t ix = 0; ix < IW; ix++) {
                    yr[2 * ix] = c0[ix] + bv;
                    yr[2 * ix + 1] = c1[ix] + bv;
                }
            } else {
                for (int64_t kx = 0; kx < KW; kx++)
                    for (int64_t ix = 0; ix < IW; ix++) yr[ix * KW + kx] = c0[kx * isp + ix] + bv;
            }
        }
    }
    if (t->call && t->call->epilogue) /* the units' rows, while hot */
        kiln__ops_epilogue_span(t->call, t->y, g->o[1] * OW, b * KH * OW, e * KH * OW, t->chan0);
}

static void col2im_range_raw(void *ud, int64_t b, int64_t e);

/* Channels [b, e) of the group, then their fused epilogue while hot. */
static void col2im_range(void *ud, int64_t b, int64_t e) {
    const col2im *t = ud;
    col2im_range_raw(ud, b, e);
    if (!t->call || !t->call->epilogue) return;
    const int64_t osp = t->g->o[0] * t->g->o[1] * t->g->o[2];
    kiln__ops_epilogue_span(t->call, t->y, osp, b * osp, e * osp, t->chan0);
}

static void col2im_range_raw(void *ud, int64_t b, int64_t e) {
    const col2im *t = ud;
    const ctgeom *g = t->g;
    const int64_t ID = g->id[0], IH = g->id[1], IW = g->id[2];
    const int64_t OD = g->o[0], OH = g->o[1], OW = g->o[2];
    const int64_t KD = g->k[0], KH = g->k[1], KW = g->k[2];
    const int64_t isp = ID * IH * IW, osp = OD * OH * OW;
    for (int64_t m = b; m < e; m++) {
        float *y = t->y + m * osp;
        float bv = t->bias ? t->bias[m] : 0.0f;
        for (int64_t i = 0; i < osp; i++) y[i] = bv;
        for (int64_t kz = 0; kz < KD; kz++)
        for (int64_t ky = 0; ky < KH; ky++)
        for (int64_t kx = 0; kx < KW; kx++) {
            const float *col = t->col + (((m * KD + kz) * KH + ky) * KW + kx) * isp;
            for (int64_t iz = 0; iz < ID; iz++) {
                int64_t oz = iz * g->s[0] - g->pb[0] + kz * g->d[0];
                if (oz < 0 || oz >= OD) continue;
                for (int64_t iy = 0; iy < IH; iy++) {
                    int64_t oy = iy * g->s[1] - g->pb[1] + ky * g->d[1];
                    if (oy < 0 || oy >= OH) continue;
                    const float *cr = col + (iz * IH + iy) * IW;
                    float *yr = y + (oz * OH + oy) * OW;
                    int64_t off = kx * g->d[2] - g->pb[2], sx = g->s[2];
                    /* valid ix: 0 <= ix*sx + off < OW */
                    int64_t lo = off >= 0 ? 0 : (-off + sx - 1) / sx;
                    int64_t hi = OW - 1 - off < 0 ? 0 : (OW - 1 - off) / sx + 1;
                    if (hi > IW) hi = IW;
                    if (sx == 1)
                        for (int64_t ix = lo; ix < hi; ix++) yr[ix + off] += cr[ix];
                    else
                        for (int64_t ix = lo; ix < hi; ix++) yr[ix * sx + off] += cr[ix];
                }
            }
        }
    }
}

static int ct_impl_f32(const kiln_call *c) {
    for (int i = 0; i < c->nin && i < 3; i++)
        if (c->in[i].data && !kiln__ops_dense(&c->in[i]))
            return kiln_set_error(KILN_EUNSUPPORTED, "ConvTranspose: input %d is not dense", i);
    ctgeom g;
    int rc = full_geom(c, &g);
    if (rc) return rc;
    size_t need = ct_ws_bytes(c);
    if (c->workspace_size < need)
        return kiln_set_error(KILN_EINTERNAL, "ConvTranspose: workspace of %zu bytes, need %zu",
                              c->workspace_size, need);
    float *col = c->workspace;
    const float *x = c->in[0].data, *w = c->in[1].data;
    const float *bias = c->nin > 2 && c->in[2].data ? c->in[2].data : NULL;
    float *y = c->out[0].data;
    int64_t isp = g.id[0] * g.id[1] * g.id[2], osp = g.o[0] * g.o[1] * g.o[2];
    int64_t ksp = g.k[0] * g.k[1] * g.k[2], R = g.Mg * ksp;
    for (int64_t n = 0; n < g.N; n++)
        for (int64_t gi = 0; gi < g.G; gi++) {
            const float *wg = w + gi * g.Cg * R;
            kiln__gemm gm = {.M = R, .N = isp, .K = g.Cg, .a = wg, .a_rs = 1, .a_cs = R,
                             .alpha = 1.0f, .b = x + (n * g.C + gi * g.Cg) * isp, .b_rs = isp,
                             .b_cs = 1, .c = col, .ldc = isp};
            kiln__sgemm(&gm, c->exec);
            col2im t = {.g = &g, .col = col, .y = y + (n * g.M + gi * g.Mg) * osp,
                        .bias = bias ? bias + gi * g.Mg : NULL, .call = c, .chan0 = gi * g.Mg};
            if (tiling(&g)) /* each channel's rows split (its plane: the GEMM's columns were the pixels) */
                kiln__ops_par_planes(c->exec, g.Mg, g.id[1], g.k[1] * g.o[2], 1, col2im_tiled, &t);
            else
                kiln_exec_parallel_for(c->exec, g.Mg, 1, col2im_range, &t);
        }
    return 0;
}

static int ct_impl(const kiln_call *c) { return kiln__ops_as_f32(c, ct_impl_f32); }

static const kiln_combo ct_cuda_formats[] = {{.types = KILN_CU_T_FLOAT}, {0}};
static int ct_cuda_check(const kiln_shape_ctx *c) { return kiln__ops_cuda_spatial(c, "ConvTranspose", 1, 3); }
/* 1-D/2-D: conv_cuda.c; 3-D: direct (conv3d_cuda.c) with this file's
 * geometry (output_shape, output_padding, auto_pad resolved as on the CPU). */
static int ct_cuda(const kiln_call *c) {
    if (c->in[0].ndim != 5) return kiln__cu_conv_transpose(c);
    ctgeom g;
    int rc = full_geom(c, &g);
    if (rc) return rc;
    kiln_cu_conv3d p = kiln__cu_conv3d_geo(g.N, g.C, g.M, g.G, g.id, g.o, g.k, g.s, g.d, g.pb, 1);
    return kiln__cu_conv3d(c, &p);
}
static const kiln_quick_op ct_op = {
    .ns = "ai.onnx", .name = "ConvTranspose", .version = 1,
    .min_inputs = 2, .max_inputs = 3, .num_outputs = 1,
    .attrs = ct_attrs, .shape = ct_shape, .impl = ct_impl, .workspace = ct_ws_bytes,
    .cuda_impl = ct_cuda, .cuda_formats = ct_cuda_formats, .cuda_check = ct_cuda_check,
    .accepts_epilogue = 1, /* applied per finished output channel */
    .doc = "transposed convolution: packed GEMM + col2im",
};
KILN_OP(ct_op)
