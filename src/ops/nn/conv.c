/*
 * conv.c — ONNX Conv (1-D, 2-D, 3-D; groups incl. depthwise; dilations,
 * strides, pads, auto_pad; optional bias).
 *
 * Tactics (the builder times them; 0/1 pick by heuristic):
 *   1 auto:   depthwise 2-D convs -> 5, tiny-channel ones -> direct, else
 *             padded GEMM
 *   2 GEMM:   Y[g] = W[g] * im2col(X[g]) + bias on the packed SGEMM.  The
 *             im2col matrix is never materialized: the GEMM's B-packing
 *             callback gathers the patches straight into packed panels
 *             (a 1x1/stride-1/unpadded conv packs X as a plain matrix,
 *             never reads it in place: tactic 4 does, auto up to 64
 *             output channels).
 *   3 direct: per output row, axpy of shifted input rows (vectorizes over
 *             the output width); the dedicated path for depthwise convs.
 *             2-D (and 1-D) only; 3-D convs run the GEMM.
 *   4 padded GEMM: 2-D convs.  The input is copied once into zero-padded
 *             phase planes (space-to-depth by the stride); computed on an
 *             output grid a few columns wider than Y, B(k = (c, ky, kx), j)
 *             is then Xp[off(k) + j], which the AVX-512 micro-kernel reads
 *             in place (no im2col, no packing of B).  The junk columns of
 *             the grid are dropped when the result is compacted into Y.
 *             3-D convs fall back to tactic 2.
 *   5 depthwise (one input channel per group): phase-split padded rows,
 *             a 1-D sum of shifted runs over a grid a few columns wider
 *             than Y (no per-row vector tails), 3x3 unrolled; rows split
 *             over threads.  Auto picks it for depthwise convs; elsewhere
 *             (grouped convs, 3-D) it falls back to direct / GEMM.
 *   6 Winograd F(4x4, 3x3) (conv_winograd.c): offered only on 2-D 3x3
 *             stride-1 undilated convs of one group with a constant W
 *             (prepacked in its transformed layout; conv_formats_fn); an
 *             engine naming it elsewhere fails to load.  Outputs under 5
 *             columns wide (known per call) run the padded GEMM (4).
 *             Never picked by auto: only where the builder timed it faster.
 *  10 Winograd F(2x2, 3x3): tactic 6 with 2x2 output tiles (16 GEMMs,
 *             transformed weights 16/9 of W instead of 4x): offered and
 *             packed where 6 is; outputs under 3 columns run the padded
 *             GEMM.  Wins where 6 has too few tiles (7x7 outputs).
 *   7 depthwise rows (conv_dwrows.c, AVX-512): depthwise 2-D convs of
 *             column stride 1 or 2, read straight from X's rows with
 *             masked loads (no padded copy); elsewhere what 5 runs.
 *             Offered only on the depthwise convs it fits; never picked
 *             by auto either.
 *   8 padded GEMM, B packed: tactic 4's phase planes, but each strip of
 *             the grid's columns is copied (NR floats per row) into a
 *             packed panel before its row tiles use it, instead of read in
 *             place.  Offered only on 2-D convs of one group where 4 runs
 *             the padded GEMM (not a plain 1x1 stride-1 conv); never
 *             picked by auto.
 *   9 padded GEMM, compact: tactic 4's phase planes, B packed with only
 *             the output's own columns (no junk grid columns: 49 of 63 on
 *             a 7x7 output), so the GEMM writes Y in place; offered where
 *             8 is, never picked by auto; a strided 1x1 conv's builds offer
 *             it alone, and so do those of a strided conv with K >= 256
 *             and a fixed output of <= 64 pixels (conv_formats_fn).  On
 *             such an output with K of >= 8 SGEMM blocks the threads split
 *             K (kiln__gemm.split_k) instead of C's rows.
 *  11 pointwise GEMM split over K: a 1x1 stride-1 unpadded conv of one
 *             group with at least two of the SGEMM's K blocks, run as auto
 *             runs it but with the threads splitting the input channels
 *             (kiln__gemm.split_k): each reads the channels it wrote in a
 *             row-split layer before, from its own L2, instead of all of
 *             them.  Elsewhere (and at 1 thread) what auto runs; offered
 *             only where it applies, and not to a 1-thread build.
 *  12 few channels (conv_fewc.c, AVX-512): a 2-D undilated conv of one
 *             group with at most 4 input channels and kernels up to 7x7
 *             (a network's stem: ResNet's 7x7/2 from 3 channels), computed
 *             from phase-split input rows, 16 output channels x 16
 *             columns per tap load, no im2col; bands of output rows split
 *             over threads; W prepacked in 16-channel blocks (stored in
 *             the engine file).  Offered only where it applies; never
 *             picked by auto.
 *  13 pointwise in NCHW16C (conv_pw16c.c): a 1x1 stride-1 unpadded conv
 *             of one group, C and M multiples of 16, a constant W (packed
 *             at build), X, Y and a fused residual NCHW16C: its own
 *             combination row (conv_formats_fn), on AVX-512 builds.
 *             Relu and a residual in its store, other chains per pixel.
 *  14 Winograd F(4x4, 3x3) in NCHW16C (conv_wino16c.c): tactic 6's
 *             convs with C and M multiples of 16, X, Y (and a fused
 *             residual) NCHW16C, W and B LINEAR; its own packed W (U^T as
 *             the GEMM's B).  Any output size.  Offered only there, in a
 *             row of its own (conv_formats_fn); never picked by auto.
 *  15 Winograd F(2x2, 3x3) in NCHW16C: tactic 14 with 2x2 tiles (10's
 *             against 6), offered and packed where 14 is.
 *  16 direct in NCHW16C (conv_direct16c.c): a 2-D undilated conv of one
 *             group, C and M multiples of 16, a constant W (packed at
 *             build), X, Y and a fused residual NCHW16C, any kernel, pads
 *             and stride; offered (its own row, on AVX-512 builds) where
 *             13-15 do not apply (d16c_offered).  Relu and a residual in
 *             its store, other chains per pixel.
 *  17 few channels into NCHW16C: tactic 12 with Y in NCHW16C (X LINEAR:
 *             the image), M a multiple of 16, so that a 16c region can
 *             start at the stem; W packed and stored as 12's; its own row.
 *  18 tactic 14 with the image's tiles split over the threads, each
 *             running all three phases on its share (kiln__wino16c.split):
 *             no V^T or product crosses between cores, each reads all of
 *             U.  Offered to a build of 2+ threads in 14's place where it
 *             runs split at the build's thread count, and only there
 *             (wino16c_split_runs); never to a 1-thread build (where it
 *             is 14).  An engine may name either.
 *  19 the same for tactic 15.
 *  20 tactic 13 with the input channels split over the threads
 *             (kiln__pw16c_ksplit: each sums its own share of C over all
 *             of Y into a partial, then the partials are added by output
 *             channel blocks), as tactic 11 is to 1 in NCHW.  Offered in
 *             13's row, in its place, where C >= 4 M and C >= 256, to
 *             builds of 2+ threads (at 1 thread it runs 13).  ResNet-50's
 *             1024 -> 256 convs at 2 threads: 0.24 against 0.34 ms when
 *             the vCPUs sat on two dies, 0.23 against 0.22 on one, the
 *             whole network level on one die and -4..-6% across: a build
 *             on one die timed 13 ahead and its engine lost across dies
 *             (bench/README.md).
 *  21 tactic 6 with the image's tile rows split over the threads, each
 *             running all three phases on its band (kiln__wino.split):
 *             no V or product crosses between cores, each reads all of
 *             U.  Offered with 6, not to a 1-thread build (where it is
 *             6); in 6's place when building where the image's V and
 *             products outweigh U (conv_formats_fn: the timing on one die
 *             cannot see what 6 loses across two).
 *  22 the same for tactic 10.
 * Where several tactics run the same kernel on a conv (kernel_key), the
 * builder is offered one of them (conv_formats_fn); the others stay valid
 * in engine files.  A fused residual Add and/or Relu is applied in the
 * SGEMM's store where the GEMM writes Y directly (gemm_epilogue).
 * Spatial dims are normalized to 3 (D, H, W) by prepending 1s.
 */
#include "device/cpu/sgemm.h"
#include "kiln_int.h"
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"
#include "ops/nn/conv_direct16c.h"
#include "ops/nn/conv_dwrows.h"
#include "ops/nn/conv_fewc.h"
#include "ops/nn/conv_pw16c.h"
#include "ops/nn/conv_wino16c.h"
#include "ops/nn/conv_winograd.h"


#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

enum { T_AUTO = 1, T_GEMM = 2, T_DIRECT = 3, T_PADGEMM = 4, T_DW = 5, T_WINO = 6, T_DWROWS = 7, T_PADPACK = 8,
       T_PADCOMPACT = 9, T_WINO2 = 10, T_KSPLIT = 11, T_FEWC = 12, T_PW16C = 13, T_WINO16C = 14,
       T_WINO16C2 = 15, T_D16C = 16, T_FEWC16C = 17, T_WINO16CS = 18, T_WINO16C2S = 19, T_PW16CK = 20,
       T_WINOS = 21, T_WINO2S = 22 };

/* The Winograd output tile size of a tactic (6: 4x4, 10: 2x2), else 0. */
static int wino_m(int t) { return t == T_WINO || t == T_WINOS ? 4 : t == T_WINO2 || t == T_WINO2S ? 2 : 0; }
/* The same for the NCHW16C tactics (14, 18: 4x4; 15, 19: 2x2). */
static int wino16c_m(int t) {
    return t == T_WINO16C || t == T_WINO16CS ? 4 : t == T_WINO16C2 || t == T_WINO16C2S ? 2 : 0;
}

static const kiln_attr_def conv_attrs[] = {
    {"auto_pad", KILN_ATTR_STRING, 0, "NOTSET", 0, "NOTSET, SAME_UPPER, SAME_LOWER or VALID"},
    {"dilations", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "dilation per spatial axis"},
    {"group", KILN_ATTR_INT, 0, "1", 0, "number of groups"},
    {"kernel_shape", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "kernel dims (else from W)"},
    {"pads", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "begin pads then end pads"},
    {"strides", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "stride per spatial axis"},
    {NULL, 0, 0, NULL, 0, NULL},
};

/* Resolved geometry of one call. */
typedef struct geom {
    int64_t N, C, M, G, Cg, Mg;
    int64_t id[3], k[3], o[3], s[3], d[3], pb[3], pe[3];
    int nsp;
} geom;

typedef enum { AP_NOTSET, AP_SAME_UPPER, AP_SAME_LOWER, AP_VALID } autopad;

static int parse_autopad(const kiln_attrs *a, autopad *ap) {
    const char *s = kiln_attrs_string(a, "auto_pad");
    if (!s || !strcmp(s, "NOTSET") || !*s) *ap = AP_NOTSET;
    else if (!strcmp(s, "SAME_UPPER")) *ap = AP_SAME_UPPER;
    else if (!strcmp(s, "SAME_LOWER")) *ap = AP_SAME_LOWER;
    else if (!strcmp(s, "VALID")) *ap = AP_VALID;
    else
        return kiln_set_error(KILN_EATTR,
                              "auto_pad: expected NOTSET, SAME_UPPER, SAME_LOWER or VALID, found '%s'",
                              s);
    return 0;
}

/* Reads strides/dilations/pads/kernel_shape for nsp spatial axes. */
static int read_attrs(const kiln_attrs *a, int nsp, const int64_t *wk, int64_t *k, int64_t *s,
                      int64_t *d, int64_t *pb, int64_t *pe) {
    const int64_t *v;
    int64_t n;
    for (int i = 0; i < nsp; i++) { k[i] = wk[i]; s[i] = 1; d[i] = 1; pb[i] = pe[i] = 0; }
    if ((n = kiln_attrs_ints(a, "kernel_shape", &v)) >= 0) {
        if (n != nsp)
            return kiln_set_error(KILN_EATTR, "kernel_shape: expected %d values, found %lld", nsp,
                                  (long long)n);
        for (int i = 0; i < nsp; i++)
            if (wk[i] >= 0 && v[i] != wk[i])
                return kiln_set_error(KILN_EATTR, "kernel_shape[%d] = %lld but W has %lld", i,
                                      (long long)v[i], (long long)wk[i]);
    }
    if ((n = kiln_attrs_ints(a, "strides", &v)) >= 0) {
        if (n != nsp)
            return kiln_set_error(KILN_EATTR, "strides: expected %d values, found %lld", nsp,
                                  (long long)n);
        for (int i = 0; i < nsp; i++) s[i] = v[i];
    }
    if ((n = kiln_attrs_ints(a, "dilations", &v)) >= 0) {
        if (n != nsp)
            return kiln_set_error(KILN_EATTR, "dilations: expected %d values, found %lld", nsp,
                                  (long long)n);
        for (int i = 0; i < nsp; i++) d[i] = v[i];
    }
    if ((n = kiln_attrs_ints(a, "pads", &v)) >= 0) {
        if (n != 2 * nsp)
            return kiln_set_error(KILN_EATTR, "pads: expected %d values, found %lld", 2 * nsp,
                                  (long long)n);
        for (int i = 0; i < nsp; i++) { pb[i] = v[i]; pe[i] = v[nsp + i]; }
    }
    int rc;
    if ((rc = kiln__ops_check_geom("Conv", "strides", s, nsp, 1)) ||
        (rc = kiln__ops_check_geom("Conv", "dilations", d, nsp, 1)) ||
        (rc = kiln__ops_check_geom("Conv", "pads (begin)", pb, nsp, 0)) ||
        (rc = kiln__ops_check_geom("Conv", "pads (end)", pe, nsp, 0)))
        return rc;
    return 0;
}

static int conv_dims(kiln_shape_ctx *c, kiln_dtype out_type);

static int conv_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0], *w = &c->in[1];
    if (w->dtype != x->dtype || !kiln__ops_is_float(x->dtype))
        return kiln_set_error(KILN_ETYPE, "Conv: X and W must share a float type, found %s and %s",
                              kiln_dtype_name(x->dtype), kiln_dtype_name(w->dtype));
    return conv_dims(c, x->dtype);
}

static int is_int8(kiln_dtype t) { return t == KILN_DTYPE_U8 || t == KILN_DTYPE_I8; }

static int convint_shape(kiln_shape_ctx *c) {
    if (!is_int8(c->in[0].dtype) || !is_int8(c->in[1].dtype))
        return kiln_set_error(KILN_ETYPE, "ConvInteger: x and w must be u8/i8, found %s and %s",
                              kiln_dtype_name(c->in[0].dtype), kiln_dtype_name(c->in[1].dtype));
    return conv_dims(c, KILN_DTYPE_I32);
}

static int conv_dims(kiln_shape_ctx *c, kiln_dtype out_type) {
    const kiln_desc *x = &c->in[0], *w = &c->in[1];
    if (x->ndim < 3 || x->ndim > 5)
        return kiln_set_error(KILN_ESHAPE, "Conv: X must have rank 3..5 (N, C, spatial...), found %d",
                              x->ndim);
    if (w->ndim != x->ndim)
        return kiln_set_error(KILN_ESHAPE, "Conv: W must have rank %d like X, found %d", x->ndim,
                              w->ndim);
    int nsp = x->ndim - 2;
    int64_t wk[3], k[3], s[3], d[3], pb[3], pe[3];
    for (int i = 0; i < nsp; i++)
        if (!kiln_expr_is_const(w->dims[2 + i], &wk[i]))
            return kiln_set_error(KILN_ESHAPE, "Conv: kernel dims of W must be static");
    int rc = read_attrs(c->attrs, nsp, wk, k, s, d, pb, pe);
    if (rc) return rc;
    autopad ap;
    if ((rc = parse_autopad(c->attrs, &ap))) return rc;
    int64_t G = kiln_attrs_int(c->attrs, "group"), C, Wc, M;
    if ((rc = kiln__ops_check_geom("Conv", "group", &G, 1, 1))) return rc;
    if (kiln_expr_is_const(x->dims[1], &C) && kiln_expr_is_const(w->dims[1], &Wc) && C != Wc * G)
        return kiln_set_error(KILN_ESHAPE,
                              "Conv: X has %lld channels but W expects %lld x group %lld = %lld",
                              (long long)C, (long long)Wc, (long long)G, (long long)(Wc * G));
    if (kiln_expr_is_const(w->dims[0], &M) && M % G != 0)
        return kiln_set_error(KILN_ESHAPE, "Conv: %lld output channels not divisible by group %lld",
                              (long long)M, (long long)G);
    kiln_desc *y = &c->out[0];
    y->dtype = out_type;
    y->ndim = x->ndim;
    y->dims[0] = x->dims[0];
    y->dims[1] = w->dims[0];
    kiln_exprs *X = c->x;
    for (int i = 0; i < nsp; i++) {
        const kiln_expr *in = x->dims[2 + i];
        if (ap == AP_SAME_UPPER || ap == AP_SAME_LOWER)
            y->dims[2 + i] = kiln_expr_ceildiv(X, in, kiln_expr_const(X, s[i]));
        else if (ap == AP_VALID)
            y->dims[2 + i] = kiln__ops_pool_dim(X, in, k[i], s[i], 0, d[i], 0);
        else
            y->dims[2 + i] = kiln__ops_pool_dim(X, in, k[i], s[i], pb[i] + pe[i], d[i], 0);
    }
    return 0;
}

static int make_geom(const kiln_call *c, geom *g) {
    const kiln_tensor *x = &c->in[0], *w = &c->in[1], *y = &c->out[0];
    int nsp = x->ndim - 2;
    int64_t wk[3], k[3], s[3], d[3], pb[3], pe[3];
    for (int i = 0; i < nsp; i++) wk[i] = w->dims[2 + i];
    int rc = read_attrs(c->attrs, nsp, wk, k, s, d, pb, pe);
    if (rc) return rc;
    autopad ap;
    if ((rc = parse_autopad(c->attrs, &ap))) return rc;
    memset(g, 0, sizeof *g);
    g->nsp = nsp;
    g->N = x->dims[0];
    g->C = x->dims[1];
    g->M = w->dims[0];
    g->G = kiln_attrs_int(c->attrs, "group");
    if (g->G < 1 || g->C % g->G || g->M % g->G || w->dims[1] * g->G != g->C)
        return kiln_set_error(KILN_ESHAPE, "Conv: X has %lld channels, W is %lld x %lld, group %lld",
                              (long long)g->C, (long long)g->M, (long long)w->dims[1],
                              (long long)g->G);
    g->Cg = g->C / g->G;
    g->Mg = g->M / g->G;
    int off = 3 - nsp;
    for (int i = 0; i < 3; i++) {
        g->id[i] = g->k[i] = g->o[i] = g->s[i] = g->d[i] = 1;
        g->pb[i] = g->pe[i] = 0;
    }
    for (int i = 0; i < nsp; i++) {
        int j = off + i;
        g->id[j] = x->dims[2 + i];
        g->k[j] = k[i];
        g->s[j] = s[i];
        g->d[j] = d[i];
        g->o[j] = y->dims[2 + i];
        if (ap == AP_SAME_UPPER || ap == AP_SAME_LOWER) {
            int64_t tot = (g->o[j] - 1) * s[i] + (k[i] - 1) * d[i] + 1 - g->id[j];
            if (tot < 0) tot = 0;
            g->pb[j] = ap == AP_SAME_UPPER ? tot / 2 : tot - tot / 2;
            g->pe[j] = tot - g->pb[j];
        } else if (ap == AP_NOTSET) {
            g->pb[j] = pb[i];
            g->pe[j] = pe[i];
        }
    }
    if (c->nin > 2 && c->in[2].data && kiln_tensor_numel(&c->in[2]) != g->M)
        return kiln_set_error(KILN_ESHAPE, "Conv: bias has %lld elements, expected %lld",
                              (long long)kiln_tensor_numel(&c->in[2]), (long long)g->M);
    return 0;
}

/* ------------------------------------------------------------ GEMM tactic */

/* W prepacked (conv_prepack): group gi's Mg x K weight matrix as the
 * SGEMM's packed A, or NULL (not prepacked: the GEMM packs it per call). */
static const float *packed_w(const kiln_call *c, const geom *g, int64_t gi) {
    if (!c->prepacked || c->nin < 2 || !c->prepacked[1]) return NULL;
    if (kiln__wino_packed(c->prepacked[1], 0, g->Mg, g->Cg)) return NULL; /* tactic 6's or 10's layout */
    int64_t K = g->Cg * g->k[0] * g->k[1] * g->k[2];
    return (const float *)c->prepacked[1] + (size_t)gi * kiln__sgemm_pack_a_floats(g->Mg, K);
}

typedef struct im2col {
    const geom *g;
    const float *x; /* the group's first input channel */
} im2col;

/* pr[j] = sp[2j] for j in [jlo, jhi), reading at most `avail` floats of sp. */
static void deinterleave2(float *pr, const float *sp, int64_t jlo, int64_t jhi, int64_t avail);

/* Columns [j, j + cols) of an output (oz, oy, ox; cols <= 64) as runs
 * inside one output row: run r is output row (z[r], y[r]) from column
 * x0[r], len[r] long, at offset off[r] of the strip.  Returns the count. */
typedef struct col_runs {
    int64_t z[64], y[64], x0[64], len[64], off[64];
} col_runs;
static int col_runs_of(col_runs *r, int64_t j, int64_t cols, int64_t OH, int64_t OW) {
    int n = 0;
    for (int64_t left = cols, off = 0; left > 0; n++) {
        int64_t ox = j % OW, t = j / OW, len = OW - ox < left ? OW - ox : left;
        r->z[n] = t / OH;
        r->y[n] = t % OH;
        r->x0[n] = ox;
        r->len[n] = len;
        r->off[n] = off;
        j += len, left -= len, off += len;
    }
    return n;
}

/* Gather patches into packed B strips (see kiln__packb_fn). Rows are
 * (ci, kz, ky, kx), columns (oz, oy, ox). */
static void im2col_pack(const void *ud, int64_t k0, int64_t kc, int64_t n0, int64_t nc, int nr,
                        float *dst) {
    const im2col *ic = ud;
    const geom *g = ic->g;
    const int64_t OD = g->o[0], OH = g->o[1], OW = g->o[2];
    const int64_t ID = g->id[0], IH = g->id[1], IW = g->id[2];
    const int64_t KD = g->k[0], KH = g->k[1], KW = g->k[2];
    (void)OD;
    col_runs cr;
    for (int64_t s0 = 0; s0 < nc; s0 += nr) {
        int64_t cols = nc - s0 < nr ? nc - s0 : nr;
        float *d = dst + s0 * kc;
        int nrun = col_runs_of(&cr, n0 + s0, cols, OH, OW);
        const int64_t *run_z = cr.z, *run_y = cr.y, *run_x0 = cr.x0, *run_len = cr.len, *run_off = cr.off;
        int64_t kx = k0 % KW, t = k0 / KW, ky = t % KH, t2 = t / KH, kz = t2 % KD, ci = t2 / KD;
        for (int64_t kk = 0; kk < kc; kk++) {
            float *row = d + kk * nr;
            for (int r = 0; r < nrun; r++) {
                float *o = row + run_off[r];
                int64_t len = run_len[r];
                int64_t iz = run_z[r] * g->s[0] - g->pb[0] + kz * g->d[0];
                int64_t iy = run_y[r] * g->s[1] - g->pb[1] + ky * g->d[1];
                if (iz < 0 || iz >= ID || iy < 0 || iy >= IH) {
                    memset(o, 0, (size_t)len * sizeof(float));
                    continue;
                }
                const float *src = ic->x + ((ci * ID + iz) * IH + iy) * IW;
                int64_t sx = g->s[2], ix0 = run_x0[r] * sx - g->pb[2] + kx * g->d[2];
                if (sx == 1 && ix0 >= 0 && ix0 + len <= IW) {
                    memcpy(o, src + ix0, (size_t)len * sizeof(float));
                } else if (sx == 2) { /* zeros, the even columns from ix0 (AVX-512 where it can), zeros */
                    int64_t qlo = ix0 >= 0 ? 0 : (1 - ix0) / 2;
                    int64_t qhi = IW - 1 - ix0 < 0 ? 0 : (IW - 1 - ix0) / 2 + 1;
                    if (qhi > len) qhi = len;
                    if (qlo > qhi) qlo = qhi;
                    memset(o, 0, (size_t)qlo * sizeof(float));
                    deinterleave2(o, src + ix0, qlo, qhi, IW - ix0);
                    memset(o + qhi, 0, (size_t)(len - qhi) * sizeof(float));
                } else {
                    for (int64_t q = 0; q < len; q++) {
                        int64_t ix = ix0 + q * sx;
                        o[q] = (ix >= 0 && ix < IW) ? src[ix] : 0.0f;
                    }
                }
            }
            if (cols < nr) memset(row + cols, 0, (size_t)(nr - cols) * sizeof(float));
            if (++kx == KW) {
                kx = 0;
                if (++ky == KH) {
                    ky = 0;
                    if (++kz == KD) { kz = 0; ci++; }
                }
            }
        }
    }
}

/* Geometry of the padded-GEMM tactic; 0 if it does not apply.  The input
 * of each channel is split into sy*sx phase planes (space-to-depth):
 * plane (phy, phx) row r, column q holds X[r*sy + phy - pt][q*sx + phx - pl]
 * (zero outside), PH x PW each.  Tap (ky, kx) of output (oy, ox) is then
 * plane ((ky*dy) % sy, (kx*dx) % sx) at row oy + ky*dy/sy, column
 * ox + kx*dx/sx: linear in j = oy*PW + ox for every stride.  Where every
 * tap lands in phase (0, 0) (a strided 1x1 conv: ResNet's downsamples)
 * only that plane is made (nph 1; a quarter of the copying at stride 2). */
typedef struct padgeom {
    int64_t PH, PW, xp_floats, y_floats, off_count;
    int64_t nph; /* phase planes per channel: sy * sx, or 1 */
    int64_t nb;  /* grid columns per block (all of them: one block) */
} padgeom;
#define PADGEMM_BYTES(pg) ((size_t)((pg).xp_floats + (pg).y_floats) * sizeof(float) + \
                           (size_t)(pg).off_count * sizeof(int64_t) + 64)
/* tactic 9: the planes and offsets, no grid */
#define PADCOMPACT_BYTES(pg) ((size_t)(pg).xp_floats * sizeof(float) + (size_t)(pg).off_count * sizeof(int64_t) + 64)

/* The padded GEMM runs on this conv (static: ranks, kernel, strides). */
static int padgemm_applies(const geom *g) {
    if (g->id[0] != 1 || g->k[0] != 1) return 0;
    if (g->k[1] * g->k[2] == 1 && g->s[1] * g->s[2] == 1) return 0; /* already a plain GEMM */
    return g->s[1] <= 4 && g->s[2] <= 4;
}

static int padgemm_geom(const geom *g, padgeom *pg) {
    if (!padgemm_applies(g)) return 0;
    const int64_t sy = g->s[1], sx = g->s[2];
    pg->PH = g->o[1] + ((g->k[1] - 1) * g->d[1]) / sy;
    pg->PW = g->o[2] + ((g->k[2] - 1) * g->d[2]) / sx;
    pg->nph = (g->k[1] == 1 || g->d[1] % sy == 0) && (g->k[2] == 1 || g->d[2] % sx == 0) ? 1 : sy * sx;
    pg->xp_floats = g->Cg * pg->nph * pg->PH * pg->PW + (g->k[2] - 1) * g->d[2] + 64;
    pg->xp_floats = (pg->xp_floats + 15) / 16 * 16;
    /* A large grid is computed in blocks of nb columns (~128 KB of
     * results, a multiple of the GEMM's strip width), the blocks spread
     * over the threads, each into a per-thread buffer copied into Y from
     * L2, instead of a grid the size of Y written out to memory first
     * (ResNet's stem: 3.3 MB); a small one (up to two blocks) is one GEMM
     * the threads share, into the workspace. */
    const int64_t ng = g->o[1] * pg->PW, nr = kiln__sgemm_nr();
    pg->nb = (32768 / g->Mg) / nr * nr;
    if (pg->nb < 4 * nr) pg->nb = 4 * nr;
    if (2 * pg->nb >= ng) pg->nb = ng;
    pg->y_floats = pg->nb == ng ? (g->Mg * ng + 15) / 16 * 16 : 0;
    pg->off_count = g->Cg * g->k[1] * g->k[2];
    return 1;
}

/* A fused chain the SGEMM applies on store (kiln__gemm.res, .relu): a
 * residual of Y's shape and/or a Relu.  Returns 1 (and sets them) when
 * the chain is that; `with_res` 0: only a lone Relu qualifies (a grid
 * wider than Y has no residual to add in step). */
static int gemm_epilogue(const kiln_call *c, int with_res, const float **res, int *relu) {
    int ri;
    *res = NULL;
    if (!c->epilogue || !kiln__epi_residual_relu(c->epilogue, &ri, relu)) return *relu = 0;
    if (ri < 0) return 1;
    if (!with_res || ri >= c->nin || !c->in[ri].data || c->in[ri].dtype != KILN_DTYPE_F32 ||
        !kiln__ops_dense(&c->in[ri]) || kiln_tensor_numel(&c->in[ri]) != kiln_tensor_numel(&c->out[0]))
        return *relu = 0;
    *res = c->in[ri].data;
    return 1;
}

typedef struct padctx {
    const geom *g;
    const padgeom *pg;
    const float *x; /* the group's first channel */
    float *xp;
    const float *yt; /* grid block result: grid column jbase + j at yt[i * nb + j] */
    int64_t jbase;
    const kiln__gemm *gm; /* the group's GEMM over the whole grid (blocks: a copy per block) */
    float *y;
    const kiln_call *call; /* fused epilogue (kiln_call_epilogue); NULL: the GEMM applied it */
    int64_t chan0;         /* channel of the group's first output row */
} padctx;

/* The columns [*qlo, *qhi) of a phase plane PW wide that come from the
 * input (0 <= q * sx + o < IW, o = phx - pad_left); the others are zero. */
static void phase_cols(int64_t o, int64_t sx, int64_t IW, int64_t PW, int64_t *qlo, int64_t *qhi) {
    int64_t lo = o >= 0 ? 0 : (-o + sx - 1) / sx;
    int64_t hi = IW - 1 - o < 0 ? 0 : (IW - 1 - o) / sx + 1;
    if (hi > PW) hi = PW;
    if (lo > hi) lo = hi;
    *qlo = lo;
    *qhi = hi;
}

#if defined(__AVX512F__)
/* Both column phases of one input row x (IW floats) at stride 2: d0[q] =
 * x[2q + o], d1[q] = x[2q + o + 1] for q < PW, zero where that is outside
 * the row.  The row is read once, 32 floats a step, for the two phase
 * planes' rows (one permute each), where phase by phase read it twice and
 * wrote the zero borders apart: the copy was ~13% of ResNet-50's
 * layer2.0/conv2 (perf, 1 thread).  Loads are masked only where a step
 * reaches past the row's ends (a zero-masked load costs an ALU slot). */
static void deinterleave2_both(float *d0, float *d1, const float *x, int64_t o, int64_t IW, int64_t PW) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (int64_t q = 0; q < PW; q += 16) {
        int64_t e0 = 2 * q + o; /* x index of lane 0 of the first load */
        int64_t lo = e0 < 0 ? (-e0 < 32 ? -e0 : 32) : 0, hi = IW - e0 < 32 ? IW - e0 : 32;
        __m512 a, b;
        if (lo == 0 && hi == 32) {
            a = _mm512_loadu_ps(x + e0);
            b = _mm512_loadu_ps(x + e0 + 16);
        } else {
            uint64_t m = hi > lo ? ((1ull << hi) - 1) & ~((1ull << lo) - 1) : 0;
            /* masked lanes are not read: the pointers may lie outside x */
            a = _mm512_maskz_loadu_ps((__mmask16)m, x + e0);
            b = _mm512_maskz_loadu_ps((__mmask16)(m >> 16), x + e0 + 16);
        }
        __m512 v0 = _mm512_permutex2var_ps(a, even, b), v1 = _mm512_permutex2var_ps(a, odd, b);
        if (PW - q >= 16) {
            _mm512_storeu_ps(d0 + q, v0);
            _mm512_storeu_ps(d1 + q, v1);
        } else {
            __mmask16 sm = (__mmask16)((1u << (PW - q)) - 1u);
            _mm512_mask_storeu_ps(d0 + q, sm, v0);
            _mm512_mask_storeu_ps(d1 + q, sm, v1);
        }
    }
}
#endif

/* Phase planes [b, e) of the group: plane = (c * sy + phy) * sx + phx
 * (nph 1: plane = c, phase (0, 0)). */
static void pad_channels(void *ud, int64_t b, int64_t e) {
    const padctx *p = ud;
    const geom *g = p->g;
    const int64_t IH = g->id[1], IW = g->id[2], PH = p->pg->PH, PW = p->pg->PW;
    const int64_t pt = g->pb[1], pl = g->pb[2], sy = g->s[1], sx = g->s[2];
    for (int64_t pi = b; pi < e; pi++) {
        int64_t phx = pi % sx, t = pi / sx, phy = t % sy, ch = t / sy;
        if (p->pg->nph == 1) phx = phy = 0, ch = pi;
        float *d = p->xp + pi * PH * PW;
        const float *src = p->x + ch * IH * IW;
#if defined(__AVX512F__)
        if (sx == 2 && p->pg->nph > 1 && phx == 0 && pi + 1 < e) { /* both column phases at once */
            for (int64_t r = 0; r < PH; r++) {
                int64_t iy = r * sy + phy - pt;
                if (iy < 0 || iy >= IH) {
                    memset(d + r * PW, 0, (size_t)PW * sizeof(float));
                    memset(d + (PH + r) * PW, 0, (size_t)PW * sizeof(float));
                } else
                    deinterleave2_both(d + r * PW, d + (PH + r) * PW, src + iy * IW, -pl, IW, PW);
            }
            pi++;
            continue;
        }
#endif
        int64_t o = phx - pl, qlo, qhi;
        phase_cols(o, sx, IW, PW, &qlo, &qhi);
        for (int64_t r = 0; r < PH; r++) {
            float *dr = d + r * PW;
            int64_t iy = r * sy + phy - pt;
            if (iy < 0 || iy >= IH) {
                memset(dr, 0, (size_t)PW * sizeof(float));
                continue;
            }
            const float *sr = src + iy * IW + o;
            memset(dr, 0, (size_t)qlo * sizeof(float));
            if (sx == 1)
                memcpy(dr + qlo, sr + qlo, (size_t)(qhi - qlo) * sizeof(float));
            else if (sx == 2) /* (scalar, ~15% of ResNet-50's stride-2 3x3 convs) */
                deinterleave2(dr, sr, qlo, qhi, IW - o);
            else
                for (int64_t q = qlo; q < qhi; q++) dr[q] = sr[q * sx];
            memset(dr + qhi, 0, (size_t)(PW - qhi) * sizeof(float));
        }
    }
}

/* sgemm `done` hook: grid block rows [i0, i1) x columns [j0, j0 + n) is
 * final; copy its valid columns (ox < OW) into Y and run the fused
 * epilogue on them while the block is still in cache (a separate pass
 * over the whole grid read it back from memory).  The Y elements of one
 * grid row's column range are contiguous: one epilogue call per row. */
static void padgemm_done(void *ud, int64_t i0, int64_t i1, int64_t j0, int64_t n) {
    const padctx *p = ud;
    const int64_t OW = p->g->o[2], PW = p->pg->PW, osp = p->g->o[1] * OW, ldc = p->pg->nb;
    const int64_t ja = p->jbase + j0, jb = ja + n; /* grid columns */
    const int64_t ya = ja / PW * OW + (ja % PW < OW ? ja % PW : OW);
    const int64_t yb = jb / PW * OW + (jb % PW < OW ? jb % PW : OW);
    if (yb <= ya) return;
    for (int64_t i = i0; i < i1; i++) {
        const float *src = p->yt + i * ldc;
        float *dst = p->y + i * osp;
        for (int64_t oy = ja / PW; oy * PW < jb; oy++) {
            int64_t c0 = ja - oy * PW > 0 ? ja - oy * PW : 0;
            int64_t c1 = jb - oy * PW < OW ? jb - oy * PW : OW;
            if (c1 > c0)
                memcpy(dst + oy * OW + c0, src + (oy * PW + c0 - p->jbase), (size_t)(c1 - c0) * sizeof(float));
        }
        kiln_call_epilogue(p->call, 0, dst + ya, yb - ya, p->chan0 + i, 0);
    }
}

/* Column blocks [b, e) of the grid (parallel_for over blocks), each a
 * serial GEMM into this thread's buffer, copied into Y by its done hook. */
static void padgemm_blocks(void *ud, int64_t b, int64_t e) {
    const padctx *p0 = ud;
    const int64_t ng = p0->g->o[1] * p0->pg->PW, nb = p0->pg->nb;
    float *buf = kiln__cpu_scratch_or_fail(1, (size_t)(p0->g->Mg * nb) + 16, "Conv (padded GEMM)");
    if (!buf) return;
    for (int64_t blk = b; blk < e; blk++) {
        padctx p = *p0;
        p.jbase = blk * nb;
        p.yt = buf;
        kiln__gemm gm = *p0->gm;
        gm.N = ng - p.jbase < nb ? ng - p.jbase : nb;
        gm.b_shift += p.jbase;
        gm.c = buf;
        gm.ldc = nb;
        gm.done_ud = &p;
        kiln__sgemm_serial(&gm);
    }
}

/* B(k, grid column j) = xp[off[k] + j]: tap k's phase plane, row and
 * column; and the zeros past the planes that the last taps read. */
static void padgemm_offsets(const geom *g, const padgeom *pg, float *xp, int64_t *off) {
    const int64_t sy = g->s[1], sx = g->s[2], planes = g->Cg * pg->nph, taps = g->k[1] * g->k[2];
    /* channel 0's taps, then each channel's the same a channel's planes on
     * (the divisions per K row were ~1.4% of ResNet-50's layer3.0/conv2,
     * K 2304, at every run) */
    for (int64_t ky = 0, k = 0; ky < g->k[1]; ky++)
        for (int64_t kx = 0; kx < g->k[2]; kx++) {
            int64_t oy = ky * g->d[1], ox = kx * g->d[2];
            int64_t plane = pg->nph == 1 ? 0 : (oy % sy) * sx + ox % sx;
            off[k++] = plane * pg->PH * pg->PW + (oy / sy) * pg->PW + ox / sx;
        }
    for (int64_t ci = 1, step = pg->nph * pg->PH * pg->PW; ci < g->Cg; ci++)
        for (int64_t t = 0; t < taps; t++) off[ci * taps + t] = off[t] + ci * step;
    memset(xp + planes * pg->PH * pg->PW, 0, (size_t)(pg->xp_floats - planes * pg->PH * pg->PW) * sizeof(float));
}

/* Returns 0, or 1 when the tactic does not apply / has no workspace.
 * pack: B packed a strip at a time (tactic 8), else read in place. */
static int conv_padgemm(const kiln_call *c, const geom *g, int pack) {
    padgeom pg;
    if (!padgemm_geom(g, &pg)) return 1;
    if (!c->workspace || c->workspace_size < PADGEMM_BYTES(pg)) return 1;
    const float *x = c->in[0].data, *w = c->in[1].data;
    const float *bias = c->nin > 2 && c->in[2].data ? c->in[2].data : NULL;
    float *xp = c->workspace, *yt = xp + pg.xp_floats;
    int64_t *off = (int64_t *)(yt + pg.y_floats);
    int64_t isp = g->id[1] * g->id[2], osp = g->o[1] * g->o[2];
    int64_t K = g->Cg * g->k[1] * g->k[2];
    const int64_t planes = g->Cg * pg.nph, ng = g->o[1] * pg.PW;
    /* Blocks of whole strips, as many for each thread (parallel_for hands
     * each a contiguous run): 256 + 256 + 256 + 44 columns (ResNet-50's
     * layer2.0/conv2) gave one thread 512 of the 812, 1.5x at 2 threads.
     * Smaller blocks only: the per-thread buffers are sized per call. */
    const int threads = c->exec ? kiln_exec_threads(c->exec) : 1;
    if (pg.nb < ng && threads > 1) {
        const int64_t nr = kiln__sgemm_nr(), strips = (ng + nr - 1) / nr;
        int64_t nblk = (ng + pg.nb - 1) / pg.nb;
        nblk = (nblk + threads - 1) / threads * threads;
        pg.nb = (strips + nblk - 1) / nblk * nr;
    }
    padgemm_offsets(g, &pg, xp, off);
    /* a lone fused Relu in the GEMM's store (the grid's junk columns too,
     * never read); other chains run on the rows copied into Y */
    const float *res;
    int relu = 0, in_gemm = gemm_epilogue(c, 0, &res, &relu);
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t gi = 0; gi < g->G; gi++) {
            padctx p = {.g = g, .pg = &pg, .x = x + (n * g->C + gi * g->Cg) * isp, .xp = xp,
                        .yt = yt, .y = c->out[0].data, .call = in_gemm ? NULL : c, .chan0 = gi * g->Mg};
            p.y = (float *)c->out[0].data + (n * g->M + gi * g->Mg) * osp;
            kiln_exec_parallel_for(c->exec, planes, 1, pad_channels, &p);
            kiln__gemm gm = {.M = g->Mg, .N = ng, .K = K, .a = w + gi * g->Mg * K,
                             .a_rs = K, .a_cs = 1, .alpha = 1.0f, .c = yt, .ldc = ng,
                             .bias_row = bias ? bias + gi * g->Mg : NULL, .b_shift = xp,
                             .b_off = off, .a_packed = packed_w(c, g, gi),
                             .done = padgemm_done, .done_ud = &p, .b_shift_pack = pack, .relu = relu};
            p.gm = &gm;
            if (pg.nb == ng)
                kiln__sgemm(&gm, c->exec);
            else
                kiln_exec_parallel_for(c->exec, (ng + pg.nb - 1) / pg.nb, 1, padgemm_blocks, &p);
        }
    return 0;
}

static int pick_tactic(int tactic, int direct_ok, const geom *g);
static int d16c_applies(const geom *g);
static kiln__d16c d16c_geom(const geom *g);

static size_t conv_ws(const kiln_call *c) {
    geom g;
    padgeom pg;
    if (c->nin < 2 || c->in[0].ndim < 3 || c->in[0].ndim != c->in[1].ndim || c->tactic == T_GEMM) return 0;
    if (make_geom(c, &g)) return 0;
    if (wino16c_m(c->tactic)) return kiln__wino_ws_bytes(wino16c_m(c->tactic), g.C, g.M, g.o[1], g.o[2]);
    if (c->tactic == T_D16C) {
        const kiln__d16c p = d16c_geom(&g);
        return d16c_applies(&g) ? kiln__d16c_ws(&p, g.N) : 0;
    }
    /* the padded GEMM (tactic 4, or what auto/3 run, or 6 falls back to)
     * and Winograd */
    int t = pick_tactic(c->tactic, g.id[0] == 1 && g.k[0] == 1, &g);
    const int wm = wino_m(t);
    size_t ws = (t == T_PADGEMM || t == T_PADPACK || wm) && padgemm_geom(&g, &pg) ? PADGEMM_BYTES(pg) : 0;
    if (t == T_PADCOMPACT && padgemm_geom(&g, &pg)) ws = PADCOMPACT_BYTES(pg);
    if (wm && kiln__wino_fits(wm, g.M, g.o[2])) {
        size_t ww = kiln__wino_ws_bytes(wm, g.C, g.M, g.o[1], g.o[2]);
        if (ww > ws) ws = ww;
    }
    return ws;
}

/* Tactic 6 (m = 4) or 10 (m = 2) on every image; 1 when it does not
 * apply here (W not in its packed layout, too narrow an output, no
 * workspace): run another. */
static int conv_wino(const kiln_call *c, const geom *g, int m) {
    const float *u = c->prepacked && c->prepacked[1] ? kiln__wino_packed(c->prepacked[1], m, g->M, g->C) : NULL;
    const int64_t isp = g->id[1] * g->id[2], osp = g->o[1] * g->o[2];
    /* (gathers and scatters index a plane with int32) */
    if (!u || !kiln__wino_fits(m, g->M, g->o[2]) || isp > INT32_MAX || osp > INT32_MAX || !c->workspace ||
        c->workspace_size < kiln__wino_ws_bytes(m, g->C, g->M, g->o[1], g->o[2]))
        return 1;
    for (int64_t n = 0; n < g->N; n++) {
        kiln__wino w = {.m = m, .C = g->C, .M = g->M, .H = g->id[1], .W = g->id[2], .OH = g->o[1], .OW = g->o[2],
                        .pt = g->pb[1], .pl = g->pb[2], .x = (const float *)c->in[0].data + n * g->C * isp,
                        .u = u, .bias = c->nin > 2 ? c->in[2].data : NULL,
                        .y = (float *)c->out[0].data + n * g->M * osp, .ws = c->workspace, .call = c,
                        .exec = c->exec, .split = c->tactic == T_WINOS || c->tactic == T_WINO2S};
        kiln__wino_run(&w);
    }
    return 0;
}

static int wino_applies(int nsp, int64_t G, int64_t M, const int64_t *k, const int64_t *s, const int64_t *d);

/* Tactic 14 or 18 (m = 4), 15 or 19 (m = 2) on every image (its formats and W's
 * packing checked here: an engine names it only where conv_formats_fn
 * offered it). */
static int conv_wino16c(const kiln_call *c, int m) {
    geom g;
    int rc = make_geom(c, &g);
    if (rc) return rc;
    const kiln_tensor *x = &c->in[0], *y = &c->out[0];
    const float *u = c->prepacked && c->prepacked[1] ? kiln__wino16c_packed(c->prepacked[1], m, g.M, g.C) : NULL;
    if (x->format != KILN_FORMAT_NCHW16C || y->format != KILN_FORMAT_NCHW16C || x->dtype != KILN_DTYPE_F32 ||
        g.C % 16 || g.M % 16 || !wino_applies(g.nsp, g.G, g.M, g.k + 1, g.s + 1, g.d + 1) || !u ||
        !c->workspace || c->workspace_size < kiln__wino_ws_bytes(m, g.C, g.M, g.o[1], g.o[2]))
        return kiln_set_error(KILN_EUNSUPPORTED, "Conv tactic %d: needs X and Y NCHW16C F32, C and M multiples "
                              "of 16 (found %lld, %lld), a 3x3 stride-1 conv, its packed W and workspace",
                              c->tactic, (long long)g.C, (long long)g.M);
    /* a residual and/or Relu in the kernel; another chain per pixel */
    int ri, relu = 0;
    const int fast = c->epilogue && kiln__epi_residual_relu(c->epilogue, &ri, &relu);
    const kiln_tensor *r = fast && ri >= 0 && ri < c->nin ? &c->in[ri] : NULL;
    if (fast && ri >= 0 && (!r || !r->data || r->format != KILN_FORMAT_NCHW16C || r->dtype != KILN_DTYPE_F32 ||
                            kiln_tensor_numel(r) != kiln_tensor_numel(y)))
        return kiln_set_error(KILN_EUNSUPPORTED, "Conv tactic %d: the fused residual (input %d) is not an "
                              "F32 NCHW16C tensor of Y's shape", c->tactic, ri);
    if ((rc = kiln__16c_inplace_check(c, fast))) return rc;
    const int64_t isp = g.id[1] * g.id[2], osp = g.o[1] * g.o[2];
    for (int64_t n = 0; n < g.N; n++) {
        kiln__wino16c p = {.w = {.m = m, .C = g.C, .M = g.M, .H = g.id[1], .W = g.id[2], .OH = g.o[1], .OW = g.o[2],
                                 .pt = g.pb[1], .pl = g.pb[2], .x = (const float *)x->data + n * g.C * isp, .u = u,
                                 .bias = c->nin > 2 ? c->in[2].data : NULL,
                                 .y = (float *)y->data + n * g.M * osp, .ws = c->workspace,
                                 .call = c->epilogue && !fast ? c : NULL, .exec = c->exec},
                           .res = r ? (const float *)r->data + n * g.M * osp : NULL, .relu = relu};
        p.split = c->tactic == T_WINO16CS || c->tactic == T_WINO16C2S;
        kiln__wino16c_run(&p);
    }
    return 0;
}

/* gm (group gi of image n) writes Y directly: the fused epilogue in its
 * store (res: gemm_epilogue's answer, NULL when it declined) or by the hook
 * on finished rows (ge, which must live as long as gm). */
static void gemm_y_epilogue(const kiln_call *c, const geom *g, kiln__gemm *gm, kiln__ops_epi_rows *ge, int64_t n,
                            int64_t gi, const float *const *res, int relu) {
    const int64_t osp = g->o[0] * g->o[1] * g->o[2];
    *ge = (kiln__ops_epi_rows){c, gm->c, osp, gi * g->Mg}; /* row i is output channel gi * Mg + i */
    if (res) {
        gm->relu = relu;
        gm->res = *res ? *res + (n * g->M + gi * g->Mg) * osp : NULL;
        gm->ldr = osp;
    } else if (c->epilogue) {
        gm->done = kiln__ops_epi_rows_done;
        gm->done_ud = ge;
    }
}

/* A 1x1, stride-1, unpadded conv: Y = W * X, X read as a plain matrix. */
static int is_pointwise(const geom *g) {
    int pointwise = g->k[0] * g->k[1] * g->k[2] == 1 && g->s[0] * g->s[1] * g->s[2] == 1;
    for (int i = 0; i < 3; i++) pointwise &= g->pb[i] == 0 && g->pe[i] == 0;
    return pointwise;
}

/* conv_gemm on a pointwise conv: X read in place (1) or packed (0), by
 * the tactic asked for (see conv_gemm). */
static int pointwise_in_place(int tactic, int64_t Mg) {
    return tactic == T_PADGEMM ? 1 : tactic == T_GEMM ? 0 : Mg <= 64;
}

static void conv_gemm(const kiln_call *c, const geom *g) {
    const float *x = c->in[0].data, *w = c->in[1].data;
    const float *bias = c->nin > 2 && c->in[2].data ? c->in[2].data : NULL;
    float *y = c->out[0].data;
    int64_t isp = g->id[0] * g->id[1] * g->id[2], osp = g->o[0] * g->o[1] * g->o[2];
    int64_t K = g->Cg * g->k[0] * g->k[1] * g->k[2];
    int pointwise = is_pointwise(g);
    /* A pointwise conv with few output channels reads X (B, row k = input
     * channel k) in place: packing B costs more than it saves when only a
     * few A strips reuse each packed panel (MobileNetV2's 1x1 projections
     * to 24..64 channels: 8-20% faster; from 96 rows on, packing wins).
     * b_off NULL: B is packed as a matrix (also when out of memory).
     * Where it matters the builder decides: tactic 2 always packs X, 4
     * always reads it in place (ResNet-50's 256->64 1x1 convs at 56x56 sit
     * between the two), the others follow the 64-row rule. */
    int64_t *b_off = NULL;
    int in_place = pointwise_in_place(c->tactic, g->Mg);
    if (pointwise && in_place && g->Mg > 1 && osp >= 2 * kiln__sgemm_nr())
        b_off = (int64_t *)kiln__cpu_scratch(1, (size_t)K * 2 + 16);
    for (int64_t k = 0; b_off && k < K; k++) b_off[k] = k * isp;
    /* the residual Add and Relu in the GEMM's store, from registers (a
     * separate pass read Y back and the residual without prefetch) */
    const float *res;
    int relu, in_gemm = gemm_epilogue(c, 1, &res, &relu);
    for (int64_t n = 0; n < g->N; n++) {
        for (int64_t gi = 0; gi < g->G; gi++) {
            const float *xg = x + (n * g->C + gi * g->Cg) * isp;
            im2col ic = {.g = g, .x = xg};
            kiln__gemm gm = {.M = g->Mg, .N = osp, .K = K, .a = w + gi * g->Mg * K, .a_rs = K,
                             .a_cs = 1, .alpha = 1.0f, .c = y + (n * g->M + gi * g->Mg) * osp,
                             .ldc = osp, .bias_row = bias ? bias + gi * g->Mg : NULL,
                             .a_packed = packed_w(c, g, gi), .split_k = c->tactic == T_KSPLIT};
            kiln__ops_epi_rows ge;
            gemm_y_epilogue(c, g, &gm, &ge, n, gi, in_gemm ? &res : NULL, relu);
            if (pointwise && b_off) {
                /* row k of B is input channel k: the micro-kernel reads it in place */
                gm.b_shift = xg;
                gm.b_off = b_off;
            } else if (pointwise) {
                gm.b = xg;
                gm.b_rs = isp;
                gm.b_cs = 1;
            } else {
                gm.packb = im2col_pack;
                gm.packb_ud = &ic;
            }
            kiln__sgemm(&gm, c->exec);
        }
    }
}

/* ------------------------------------------------------------ direct tactic */

typedef struct direct {
    const geom *g;
    const float *x, *w, *bias;
    float *y;
    const kiln_call *call; /* fused epilogue */
} direct;

/* The direct kernel works on a zero-padded copy of one input channel, split
 * by column phase (x mod stride), so that every tap of every output row is
 * a contiguous, unit-stride run: output index ox with tap offset
 * off = kx*dx reads phase off % sx at column ox + off / sx.  Outputs are
 * computed 16 at a time in a vector register, summing all taps before one
 * store. */
#if defined(__AVX512F__)
#define VW 16
#elif defined(__AVX__)
#define VW 8
#else
#define VW 4
#endif
typedef float v16 __attribute__((vector_size(VW * 4))); /* VW floats */

typedef struct padded {
    int64_t PH, PWs, sx;  /* rows, floats per phase row, phases */
} padded;

/* Copy n floats; short rows are common (small feature maps), where a libc
 * call per row costs more than the copy: vectors, and (AVX-512) one
 * masked vector for the tail. */
static inline void copy_floats(float *d, const float *s, int64_t n) {
    if (n >= 64) {
        memcpy(d, s, (size_t)n * sizeof(float));
        return;
    }
    int64_t i = 0;
    for (; i + VW <= n; i += VW) {
        v16 v;
        memcpy(&v, s + i, sizeof v);
        memcpy(d + i, &v, sizeof v);
    }
#if defined(__AVX512F__)
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(d + i, k, _mm512_maskz_loadu_ps(k, s + i));
    }
#else
    for (; i < n; i++) d[i] = s[i];
#endif
}

/* pr[j] = sp[2 * j] for j in [jlo, jhi); sp[k] is readable for k < avail
 * (the rest of the input row).  The scalar strided loop was most of the
 * time of stride-2 depthwise convs; AVX-512 picks the even lanes of two
 * loads with one permute, and the last 1..15 outputs the same way from
 * loads masked to the row's end (rows of 14..56 floats, ResNet's stride-2
 * convs' phase planes, were half or wholly that tail). */
static void deinterleave2(float *pr, const float *sp, int64_t jlo, int64_t jhi, int64_t avail) {
    int64_t j = jlo;
#if defined(__AVX512F__)
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    for (; j + 16 <= jhi && 2 * j + 32 <= avail; j += 16) {
        __m512 a = _mm512_loadu_ps(sp + 2 * j), b = _mm512_loadu_ps(sp + 2 * j + 16);
        _mm512_storeu_ps(pr + j, _mm512_permutex2var_ps(a, even, b));
    }
    for (; j < jhi; j += 16) {
        int64_t n = jhi - j < 16 ? jhi - j : 16, left = avail - 2 * j; /* left >= 2n - 1 */
        __mmask16 ma = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
        __mmask16 mb = left >= 32 ? (__mmask16)0xFFFF : left <= 16 ? 0 : (__mmask16)((1u << (left - 16)) - 1u);
        __m512 a = _mm512_maskz_loadu_ps(ma, sp + 2 * j), b = _mm512_maskz_loadu_ps(mb, sp + 2 * j + 16);
        _mm512_mask_storeu_ps(pr + j, (__mmask16)((1u << n) - 1u), _mm512_permutex2var_ps(a, even, b));
    }
#else
    (void)avail;
    for (; j < jhi; j++) pr[j] = sp[2 * j];
#endif
}

/* Fill the padded, phase-split copy of one input channel.  interior_only:
 * the buffer already holds this geometry's zero border (an earlier plane of
 * the same call), only the input's own elements are rewritten. */
static void pad_plane(const geom *g, const float *x, float *dst, const padded *pp,
                      int interior_only) {
    const int64_t IH = g->id[1], IW = g->id[2], py = g->pb[1], px = g->pb[2], sx = pp->sx;
    for (int64_t r = 0; r < pp->PH; r++) {
        int64_t iy = r - py;
        float *row = dst + r * sx * pp->PWs;
        if (iy < 0 || iy >= IH) {
            if (!interior_only)
                for (int64_t j = 0; j < sx * pp->PWs; j++) row[j] = 0.0f;
            continue;
        }
        const float *src = x + iy * IW;
        for (int64_t ph = 0; ph < sx; ph++) {
            float *pr = row + ph * pp->PWs;
            /* columns j with 0 <= j*sx + ph - px < IW */
            int64_t o = ph - px;
            int64_t jlo = o >= 0 ? 0 : (-o + sx - 1) / sx;
            int64_t jhi = IW - 1 - o < 0 ? 0 : (IW - 1 - o) / sx + 1;
            if (jhi > pp->PWs) jhi = pp->PWs;
            if (jlo > jhi) jlo = jhi;
            if (!interior_only)
                for (int64_t j = 0; j < jlo; j++) pr[j] = 0.0f;
            const float *sp = src + o;
            if (sx == 1)
                copy_floats(pr + jlo, sp + jlo, jhi - jlo);
            else if (sx == 2)
                deinterleave2(pr, sp, jlo, jhi, IW - o);
            else
                for (int64_t j = jlo; j < jhi; j++) pr[j] = sp[j * sx];
            if (!interior_only)
                for (int64_t j = jhi; j < pp->PWs; j++) pr[j] = 0.0f;
        }
    }
}

/* One tap row of the direct kernel for 4 output rows at once: an input row
 * loaded once feeds every output row it is a tap row of. */
#define DIRECT_MB 8 /* output channels per work unit (share the padded input) */

static inline __attribute__((always_inline)) v16 load16(const float *p) {
    v16 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline __attribute__((always_inline)) void store16(float *y, v16 acc, int64_t nv, float bv, int first) {
    if (nv == VW) {
        v16 r = first ? acc + bv : acc + load16(y);
        memcpy(y, &r, sizeof r);
        return;
    }
    if (first)
        for (int64_t q = 0; q < nv; q++) y[q] = acc[q] + bv;
    else
        for (int64_t q = 0; q < nv; q++) y[q] += acc[q];
}

/* Output rows of one channel plane from one padded input channel. */
static void direct_plane(const geom *g, const padded *pp, const int64_t *toff, const float *xp,
                         const float *wc, float *yp, float bv, int first) {
    const int64_t OH = g->o[1], OW = g->o[2], KH = g->k[1], KW = g->k[2];
    const int64_t sy = g->s[1], dy = g->d[1], rowstride = pp->sx * pp->PWs;
    int64_t oy = 0;
    if (dy == 1) {
        /* 4 output rows share the input rows they read: input row r (from
         * row oy*sy) is tap row r - j*sy of output row oy + j */
        const int64_t R = 3 * sy + KH;
        for (; oy + 4 <= OH; oy += 4) {
            for (int64_t ox = 0; ox < OW; ox += VW) {
                v16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
                for (int64_t r = 0; r < R; r++) {
                    const float *xr = xp + (oy * sy + r) * rowstride + ox;
                    const int64_t k0 = r, k1 = r - sy, k2 = r - 2 * sy, k3 = r - 3 * sy;
                    for (int64_t kx = 0; kx < KW; kx++) {
                        v16 v = load16(xr + toff[kx]);
                        if (k0 < KH) a0 += wc[k0 * KW + kx] * v;
                        if (k1 >= 0 && k1 < KH) a1 += wc[k1 * KW + kx] * v;
                        if (k2 >= 0 && k2 < KH) a2 += wc[k2 * KW + kx] * v;
                        if (k3 >= 0) a3 += wc[k3 * KW + kx] * v;
                    }
                }
                int64_t nv = OW - ox < VW ? OW - ox : VW;
                store16(yp + oy * OW + ox, a0, nv, bv, first);
                store16(yp + (oy + 1) * OW + ox, a1, nv, bv, first);
                store16(yp + (oy + 2) * OW + ox, a2, nv, bv, first);
                store16(yp + (oy + 3) * OW + ox, a3, nv, bv, first);
            }
        }
    }
    for (; oy < OH; oy++) {
        for (int64_t ox = 0; ox < OW; ox += VW) {
            /* two accumulators: the FMA latency chain is the limit here */
            v16 a0 = {0}, a1 = {0};
            for (int64_t ky = 0; ky < KH; ky++) {
                const float *xr = xp + (oy * sy + ky * dy) * rowstride + ox;
                const float *wr = wc + ky * KW;
                int64_t kx = 0;
                for (; kx + 2 <= KW; kx += 2) {
                    a0 += wr[kx] * load16(xr + toff[kx]);
                    a1 += wr[kx + 1] * load16(xr + toff[kx + 1]);
                }
                if (kx < KW) a0 += wr[kx] * load16(xr + toff[kx]);
            }
            int64_t nv = OW - ox < VW ? OW - ox : VW;
            store16(yp + oy * OW + ox, a0 + a1, nv, bv, first);
        }
    }
}

/* Work units [b, e): (n, group, block of DIRECT_MB output channels); each
 * pads every input channel of its group once for the whole block. */
static void direct_range(void *ud, int64_t b, int64_t e) {
    const direct *dc = ud;
    const geom *g = dc->g;
    const int64_t IH = g->id[1], IW = g->id[2], OH = g->o[1], OW = g->o[2];
    const int64_t KH = g->k[1], KW = g->k[2], sy = g->s[1], sx = g->s[2];
    const int64_t dy = g->d[1], dx = g->d[2];
    padded pp = {.PH = (OH - 1) * sy + (KH - 1) * dy + 1 + 3 * sy, .sx = sx};
    pp.PWs = OW + ((KW - 1) * dx) / sx + VW + 1;
    float *xp = kiln__cpu_scratch_or_fail(1, (size_t)(pp.PH * sx * pp.PWs) + VW, "Conv (direct)");
    int64_t *toff = xp ? (int64_t *)kiln__cpu_scratch_or_fail(2, (size_t)KW * 2 + 16, "Conv (direct)") : NULL;
    if (!xp || !toff) return;
    for (int64_t kx = 0; kx < KW; kx++) {
        int64_t off = kx * dx;
        toff[kx] = (off % sx) * pp.PWs + off / sx;
    }
    const int64_t nblk = (g->Mg + DIRECT_MB - 1) / DIRECT_MB;
    for (int64_t u = b; u < e; u++) {
        int64_t blk = u % nblk, t = u / nblk, gi = t % g->G, n = t / g->G;
        int64_t m0 = gi * g->Mg + blk * DIRECT_MB;
        int64_t m1 = m0 + DIRECT_MB < (gi + 1) * g->Mg ? m0 + DIRECT_MB : (gi + 1) * g->Mg;
        const float *xg = dc->x + (n * g->C + gi * g->Cg) * IH * IW;
        for (int64_t ci = 0; ci < g->Cg; ci++) {
            pad_plane(g, xg + ci * IH * IW, xp, &pp, u > b || ci > 0);
            for (int64_t m = m0; m < m1; m++)
                direct_plane(g, &pp, toff, xp, dc->w + (m * g->Cg + ci) * KH * KW,
                             dc->y + (n * g->M + m) * OH * OW, dc->bias ? dc->bias[m] : 0.0f,
                             ci == 0);
        }
        if (g->Cg == 0)
            for (int64_t m = m0; m < m1; m++)
                for (int64_t i = 0; i < OH * OW; i++)
                    dc->y[(n * g->M + m) * OH * OW + i] = dc->bias ? dc->bias[m] : 0.0f;
        kiln__ops_epilogue_span(dc->call, dc->y + n * g->M * OH * OW, OH * OW, m0 * OH * OW,
                                 m1 * OH * OW, 0);
    }
}

static void conv_direct(const kiln_call *c, const geom *g) {
    direct dc = {.g = g, .x = c->in[0].data, .w = c->in[1].data,
                 .bias = c->nin > 2 && c->in[2].data ? c->in[2].data : NULL, .y = c->out[0].data,
                 .call = c};
    int64_t units = g->N * g->G * ((g->Mg + DIRECT_MB - 1) / DIRECT_MB);
    kiln_exec_parallel_for(c->exec, units, 1, direct_range, &dc);
}

/* ------------------------------------------------------------ few-channel tactic */

/* Tactic 12's static conditions (conv_fewc.h's limits; AVX-512 builds). */
static int fewc_applies(const geom *g) {
#if defined(__AVX512F__)
    return g->nsp == 2 && g->G == 1 && g->Cg <= KILN__FEWC_CMAX && g->k[1] <= KILN__FEWC_KMAX &&
           g->k[2] <= KILN__FEWC_KMAX && g->d[1] == 1 && g->d[2] == 1;
#else
    (void)g;
    return 0;
#endif
}

/* Output rows per work unit: conv_fewc.c splits them in one chunk, and
 * the band's 64 channels (229 KB on ResNet's stem) are still in L2 when
 * the epilogue runs over them. */
#define FEWC_ROWS 8

typedef struct fewcctx {
    const kiln_call *c;
    const geom *g;
    const float *bias, *wp; /* wp: the weights packed by kiln__fewc_pack_w */
    float lo;  /* the kernel's clamp: 0 for a fused lone Relu */
    int fused; /* the epilogue is that clamp (or none) */
    int b16;   /* tactic 17: Y NCHW16C */
} fewcctx;

/* Work units [b, e): (image, band of FEWC_ROWS output rows). */
static void fewc_range(void *ud, int64_t b, int64_t e) {
    const fewcctx *f = ud;
    const geom *g = f->g;
    const int64_t OH = g->o[1], OW = g->o[2], osp = OH * OW, nb = (OH + FEWC_ROWS - 1) / FEWC_ROWS;
    kiln__fewc p = {.C = g->C, .H = g->id[1], .W = g->id[2], .M = g->M, .OH = OH, .OW = OW, .KH = g->k[1],
                    .KW = g->k[2], .sy = g->s[1], .sx = g->s[2], .pt = g->pb[1], .pl = g->pb[2],
                    .w = f->c->in[1].data, .bias = f->bias, .lo = f->lo, .hi = INFINITY, .wp = f->wp,
                    .nchw16c = f->b16};
    float *scratch = kiln__cpu_scratch_or_fail(1, (size_t)kiln__fewc_scratch(&p), "Conv (few channels)");
    if (!scratch) return;
    for (int64_t u = b; u < e; u++) {
        const int64_t n = u / nb, oy0 = u % nb * FEWC_ROWS, oy1 = oy0 + FEWC_ROWS < OH ? oy0 + FEWC_ROWS : OH;
        float *y = (float *)f->c->out[0].data + n * g->M * osp;
        p.x = (const float *)f->c->in[0].data + n * g->C * g->id[1] * g->id[2];
        if (f->b16) { /* a chain the clamp is not: per pixel, 16 channels (as tactic 13) */
            kiln__fewc_rows(&p, oy0, oy1, y + oy0 * OW * 16, osp * 16, scratch);
            for (int64_t m = 0; m < g->M && !f->fused; m += 16)
                for (int64_t q = oy0 * OW; q < oy1 * OW; q++) kiln_call_epilogue(f->c, 0, y + (m * osp + q * 16), 16, m, 1);
            continue;
        }
        kiln__fewc_rows(&p, oy0, oy1, y + oy0 * OW, osp, scratch);
        for (int64_t m = 0; m < g->M && !f->fused; m++)
            kiln__ops_epilogue_span(f->c, y, osp, m * osp + oy0 * OW, m * osp + oy1 * OW, 0);
    }
}

/* Returns 0 (out of scratch memory: the run fails with a message). */
static int conv_fewc(const kiln_call *c, const geom *g, int b16) {
    const float *bias = c->nin > 2 && c->in[2].data ? c->in[2].data : NULL;
    kiln__fewc p = {.C = g->C, .M = g->M, .KH = g->k[1], .KW = g->k[2], .w = c->in[1].data};
    const float *pre = c->prepacked && c->prepacked[1] ? c->prepacked[1] : NULL; /* conv_prepack's */
    const int64_t nw = pre ? 0 : kiln__fewc_packed_w(&p);
    /* the weights packed for every band (and thread) where the engine
     * holds no packed form (W not constant), then a zero bias where there
     * is none (the kernel reads one) */
    float *wp = nw || !bias ? kiln__cpu_scratch_or_fail(2, (size_t)(nw + g->M), "Conv (few channels)") : NULL;
    if ((nw || !bias) && !wp) return 0; /* the run fails (no fallback: a GEMM would misread W's packing) */
    if (nw) kiln__fewc_pack_w(&p, wp);
    if (!bias) {
        memset(wp + nw, 0, (size_t)g->M * sizeof(float));
        bias = wp + nw;
    }
    if (pre) wp = (float *)pre;
    const float *res;
    int relu, fused = gemm_epilogue(c, 0, &res, &relu); /* a Relu in the kernel's store, not a second pass */
    fewcctx f = {.c = c, .g = g, .bias = bias, .wp = wp, .lo = fused && relu ? 0.0f : -INFINITY, .fused = fused,
                 .b16 = b16};
    kiln_exec_parallel_for(c->exec, g->N * ((g->o[1] + FEWC_ROWS - 1) / FEWC_ROWS), 1, fewc_range, &f);
    return 0;
}

/* ------------------------------------------------------------ NCHW16C pointwise tactic */

/* Tactic 13's static conditions (conv_pw16c.h's layouts). */
static int pw16c_applies(const geom *g) {
    return g->nsp == 2 && g->G == 1 && g->C % 16 == 0 && g->M % 16 == 0 && is_pointwise(g);
}

static int conv_pw16c(const kiln_call *c) {
    geom g;
    int rc = make_geom(c, &g);
    if (rc) return rc;
    if (!pw16c_applies(&g))
        return kiln_set_error(KILN_EUNSUPPORTED, "Conv tactic 13: needs a 1x1 stride-1 unpadded conv of one group, "
                              "C and M multiples of 16");
    return c->tactic == T_PW16CK ? kiln__pw16c_ksplit(c, g.N, g.C, g.M, g.o[1] * g.o[2])
                                 : kiln__pw16c_conv(c, g.N, g.C, g.M, g.o[1] * g.o[2]);
}

/* Tactic 17: tactic 12 writing Y in NCHW16C (its row: X LINEAR, Y NCHW16C). */
static int conv_fewc16c(const kiln_call *c) {
    geom g;
    int rc = make_geom(c, &g);
    if (rc) return rc;
    const kiln_tensor *x = &c->in[0], *y = &c->out[0];
    if (!fewc_applies(&g) || g.M % 16 || !kiln__ops_dense(x) || x->dtype != KILN_DTYPE_F32 ||
        y->format != KILN_FORMAT_NCHW16C || y->dtype != KILN_DTYPE_F32 || (c->nin > 2 && c->in[2].data && !kiln__ops_dense(&c->in[2])))
        return kiln_set_error(KILN_EUNSUPPORTED, "Conv tactic 17: needs tactic 12's conv (AVX-512) with M %% 16 == 0, "
                              "F32 X LINEAR and Y NCHW16C");
    if (g.N * g.M * g.o[1] * g.o[2] != 0) conv_fewc(c, &g, 1);
    return 0;
}

/* Tactic 16's static conditions (conv_direct16c.h's layouts). */
static int d16c_applies(const geom *g) {
    return g->nsp == 2 && g->G == 1 && g->C % 16 == 0 && g->M % 16 == 0 && g->d[1] == 1 && g->d[2] == 1;
}

static kiln__d16c d16c_geom(const geom *g) {
    return (kiln__d16c){.C = g->C, .M = g->M, .H = g->id[1], .W = g->id[2], .OH = g->o[1], .OW = g->o[2],
                        .KH = g->k[1], .KW = g->k[2], .sh = g->s[1], .sw = g->s[2], .pt = g->pb[1], .pl = g->pb[2]};
}

static int conv_d16c(const kiln_call *c) {
    geom g;
    int rc = make_geom(c, &g);
    if (rc) return rc;
    if (!d16c_applies(&g))
        return kiln_set_error(KILN_EUNSUPPORTED, "Conv tactic 16: needs an undilated 2-D conv of one group, C and M "
                              "multiples of 16");
    const kiln__d16c p = d16c_geom(&g);
    return kiln__d16c_conv(c, g.N, &p);
}

/* ------------------------------------------------------------ depthwise tactic */

/* Tactic 5, for depthwise convs (one input channel per group, Cg == 1):
 * per output channel and block of output rows, the input rows the block
 * reads are copied into sy*sx zero-padded phase planes (the padded GEMM's
 * space-to-depth), PW = OW + (KW-1)*dx/sx wide, so that tap (ky, kx) of
 * output (oy, ox) is xp[off[tap] + oy * PW + ox] for every stride and
 * dilation.  The block is then one 1-D sum of KH*KW shifted runs over a
 * grid PW wide (the PW - OW extra columns per row are junk): no per-row
 * vector tails, so the narrow planes late in a network (7x7, 14x14) keep
 * the lanes full.  The grid is compacted into Y and the fused epilogue
 * runs on the rows while they are in cache.  DW_CH independent vectors per
 * step hide the FMA latency (9 dependent FMAs per output vector). */
#if defined(__AVX512F__)
#define DW_CH 8
#else
#define DW_CH 4
#endif
#define DW_GRID 4096 /* target grid floats per work unit (stays in L1/L2) */

typedef struct dwctx {
    const geom *g;
    const float *x, *w, *bias;
    float *y;
    const kiln_call *call;
    int64_t PW, rb, nrb; /* grid width, output rows per unit, units per plane */
    int64_t cb, ncb;     /* output channels per unit, channel blocks per image */
    int64_t xp_floats, t_floats;
    int failed; /* a thread got no scratch (atomic) */
} dwctx;

/* Per-unit grid: t[j] = bias + sum_k w[k] * xp[off[k] + j], j < len (a
 * multiple of VW): DW_CH vectors per step, single vectors for the rest (a
 * 7x7 plane's grid is 63 floats).  Inlined with ntaps = 9 for 3x3. */
static inline __attribute__((always_inline)) void dw_grid(const float *xp, const int64_t *off,
                                                          const float *w, int64_t ntaps, float *t,
                                                          int64_t len, float bias) {
    int64_t j = 0;
    for (; j + DW_CH * VW <= len; j += DW_CH * VW) {
        v16 a[DW_CH];
        for (int c = 0; c < DW_CH; c++) a[c] = (v16){0} + bias;
        for (int64_t k = 0; k < ntaps; k++) {
            const float *p = xp + off[k] + j;
            const float wk = w[k];
            for (int c = 0; c < DW_CH; c++) a[c] += wk * load16(p + c * VW);
        }
        for (int c = 0; c < DW_CH; c++) memcpy(t + j + c * VW, &a[c], sizeof a[c]);
    }
    for (; j < len; j += VW) {
        v16 a = (v16){0} + bias, a2 = {0};
        int64_t k = 0;
        for (; k + 2 <= ntaps; k += 2) {
            a += w[k] * load16(xp + off[k] + j);
            a2 += w[k + 1] * load16(xp + off[k + 1] + j);
        }
        if (k < ntaps) a += w[k] * load16(xp + off[k] + j);
        a += a2;
        memcpy(t + j, &a, sizeof a);
    }
}

static void dw_grid9(const float *xp, const int64_t *off, const float *w, float *t, int64_t len,
                     float bias) {
    dw_grid(xp, off, w, 9, t, len, bias);
}

static void dw_grid_any(const float *xp, const int64_t *off, const float *w, int64_t ntaps,
                        float *t, int64_t len, float bias) {
    dw_grid(xp, off, w, ntaps, t, len, bias);
}

/* Phase planes of input channel x for output rows [oy0, oy0 + R): plane
 * (phy, phx) row r, column q = X[(oy0 + r) * sy + phy - pt][q * sx + phx - pl]
 * (0 outside X), PHb x PW each.  interior_only: xp already holds the zero
 * border of this row block (an earlier channel), only X's elements are
 * copied (small planes: the border was most of the work). */
static void dw_fill(const geom *g, const float *x, float *xp, int64_t oy0, int64_t PHb,
                    int64_t PW, int interior_only) {
    const int64_t IH = g->id[1], IW = g->id[2], pt = g->pb[1], pl = g->pb[2];
    const int64_t sy = g->s[1], sx = g->s[2];
    for (int64_t phy = 0; phy < sy; phy++)
        for (int64_t phx = 0; phx < sx; phx++) {
            float *d = xp + (phy * sx + phx) * PHb * PW;
            int64_t o = phx - pl, qlo, qhi;
            phase_cols(o, sx, IW, PW, &qlo, &qhi);
            for (int64_t r = 0; r < PHb; r++) {
                float *dr = d + r * PW;
                int64_t iy = (oy0 + r) * sy + phy - pt;
                if (iy < 0 || iy >= IH) {
                    if (!interior_only) memset(dr, 0, (size_t)PW * sizeof(float));
                    continue;
                }
                const float *sr = x + iy * IW + o;
                if (!interior_only) {
                    memset(dr, 0, (size_t)qlo * sizeof(float));
                    memset(dr + qhi, 0, (size_t)(PW - qhi) * sizeof(float));
                }
                if (sx == 1)
                    copy_floats(dr + qlo, sr + qlo, qhi - qlo);
                else if (sx == 2)
                    deinterleave2(dr, sr, qlo, qhi, IW - o);
                else
                    for (int64_t q = qlo; q < qhi; q++) dr[q] = sr[q * sx];
            }
        }
}

/* Work units [b, e): (n, block of cb output channels, block of rb output
 * rows); small planes take several channels per unit (one epilogue call
 * for all of them), large ones several units per plane (cb = 1). */
static void dw_range(void *ud, int64_t b, int64_t e) {
    dwctx *dc = ud;
    const geom *g = dc->g;
    const int64_t OH = g->o[1], OW = g->o[2], KH = g->k[1], KW = g->k[2];
    const int64_t sy = g->s[1], sx = g->s[2], dy = g->d[1], dx = g->d[2], PW = dc->PW;
    const int64_t ntaps = KH * KW, planes = sy * sx;
    float *xp = kiln__cpu_scratch(1, (size_t)dc->xp_floats);
    float *t = kiln__cpu_scratch(2, (size_t)(dc->t_floats + 2 * ntaps + 16));
    if (!xp || !t) {
        __atomic_store_n(&dc->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    int64_t *off = (int64_t *)(t + dc->t_floats);
    int64_t PHb_prev = -1, fill_oy0 = -1, fill_PHb = -1; /* geometry xp's border is for */
    for (int64_t u = b; u < e; u++) {
        int64_t rbk = u % dc->nrb, q = u / dc->nrb, mb = q % dc->ncb, n = q / dc->ncb;
        int64_t oy0 = rbk * dc->rb, R = OH - oy0 < dc->rb ? OH - oy0 : dc->rb;
        int64_t m0 = mb * dc->cb, m1 = m0 + dc->cb < g->M ? m0 + dc->cb : g->M;
        int64_t PHb = R + ((KH - 1) * dy) / sy;
        if (PHb != PHb_prev) { /* tap offsets and the zeroed slack follow the plane height */
            for (int64_t ky = 0, k = 0; ky < KH; ky++)
                for (int64_t kx = 0; kx < KW; kx++, k++) {
                    int64_t oyk = ky * dy, oxk = kx * dx;
                    off[k] = ((oyk % sy) * sx + oxk % sx) * PHb * PW + (oyk / sy) * PW + oxk / sx;
                }
            int64_t used = planes * PHb * PW;
            memset(xp + used, 0, (size_t)(dc->xp_floats - used) * sizeof(float));
            PHb_prev = PHb;
        }
        int64_t len = (R * PW + VW - 1) / VW * VW;
        float *yn = dc->y + n * g->M * OH * OW;
        for (int64_t m = m0; m < m1; m++) {
            dw_fill(g, dc->x + (n * g->C + m / g->Mg) * g->id[1] * g->id[2], xp, oy0, PHb, PW,
                    oy0 == fill_oy0 && PHb == fill_PHb);
            fill_oy0 = oy0;
            fill_PHb = PHb;
            const float *wm = dc->w + m * ntaps;
            float bv = dc->bias ? dc->bias[m] : 0.0f;
            if (ntaps == 9)
                dw_grid9(xp, off, wm, t, len, bv);
            else
                dw_grid_any(xp, off, wm, ntaps, t, len, bv);
            float *ym = yn + m * OH * OW + oy0 * OW;
            for (int64_t r = 0; r < R; r++) copy_floats(ym + r * OW, t + r * PW, OW);
        }
        if (R == OH) /* whole planes: one call */
            kiln__ops_epilogue_span(dc->call, yn, OH * OW, m0 * OH * OW, m1 * OH * OW, 0);
        else
            for (int64_t m = m0; m < m1; m++)
                kiln__ops_epilogue_span(dc->call, yn, OH * OW, m * OH * OW + oy0 * OW,
                                         m * OH * OW + (oy0 + R) * OW, 0);
    }
}

/* The work units of the depthwise tactics: blocks of *rb output rows
 * (*nrb per plane) of *cb output channels (*ncb per image), for rows PW
 * floats wide.  Row blocks of about DW_GRID outputs, and enough units for
 * every thread; whole small planes take channels per unit up to about
 * DW_GRID outputs, keeping 4 units per thread. */
static void dw_split(const kiln_call *c, const geom *g, int64_t PW, int64_t *rb, int64_t *nrb, int64_t *cb,
                     int64_t *ncb) {
    const int64_t OH = g->o[1];
    int64_t n = (OH * PW + DW_GRID - 1) / DW_GRID;
    int threads = c->exec ? kiln_exec_threads(c->exec) : 1;
    while (n < OH && g->N * g->M * n < 4 * threads) n++;
    *rb = (OH + n - 1) / n;
    *nrb = (OH + *rb - 1) / *rb;
    *cb = 1;
    if (*nrb == 1) {
        int64_t k = DW_GRID / (OH * PW);
        while (k > 1 && g->N * ((g->M + k - 1) / k) < 4 * threads) k--;
        *cb = k > 1 ? k : 1;
    }
    *ncb = (g->M + *cb - 1) / *cb;
}

/* Tactic 7 (conv_dwrows.c); 1 when it does not apply here. */
static int conv_dwrows(const kiln_call *c, const geom *g) {
    if (!kiln__dwrows_fits(g->s[2], g->k[2])) return 1;
    kiln__dwrows p = {.N = g->N, .C = g->C, .mult = g->Mg, .H = g->id[1], .W = g->id[2], .OH = g->o[1],
                      .OW = g->o[2], .KH = g->k[1], .KW = g->k[2], .sy = g->s[1], .sx = g->s[2],
                      .dy = g->d[1], .dx = g->d[2], .pt = g->pb[1], .pl = g->pb[2], .x = c->in[0].data,
                      .w = c->in[1].data, .bias = c->nin > 2 && c->in[2].data ? c->in[2].data : NULL,
                      .y = c->out[0].data, .call = c, .exec = c->exec};
    dw_split(c, g, g->o[2], &p.rb, &p.nrb, &p.cb, &p.ncb);
    kiln__dwrows_run(&p);
    return 0;
}

/* 0, or an error when a thread could not get its scratch memory. */
static int conv_dw(const kiln_call *c, const geom *g) {
    dwctx dc = {.g = g, .x = c->in[0].data, .w = c->in[1].data,
                .bias = c->nin > 2 && c->in[2].data ? c->in[2].data : NULL, .y = c->out[0].data,
                .call = c};
    const int64_t sy = g->s[1], sx = g->s[2];
    dc.PW = g->o[2] + ((g->k[2] - 1) * g->d[2]) / sx;
    dw_split(c, g, dc.PW, &dc.rb, &dc.nrb, &dc.cb, &dc.ncb);
    int64_t PHb = dc.rb + ((g->k[1] - 1) * g->d[1]) / sy;
    int64_t grid = (dc.rb * dc.PW + DW_CH * VW - 1) / (DW_CH * VW) * (DW_CH * VW);
    dc.t_floats = (grid + 15) / 16 * 16;
    dc.xp_floats = sy * sx * PHb * dc.PW + dc.PW + DW_CH * VW + VW; /* see dw_range's reads */
    kiln_exec_parallel_for(c->exec, g->N * dc.ncb * dc.nrb, 1, dw_range, &dc);
    if (__atomic_load_n(&dc.failed, __ATOMIC_RELAXED))
        return kiln_set_error(KILN_ENOMEM, "Conv (depthwise): no memory for %lld floats of "
                              "per-thread scratch", (long long)(dc.xp_floats + dc.t_floats));
    return 0;
}

/* ------------------------------------------------------------ impl */

/* ------------------------------------------------------------ compact padded GEMM */

/* Tactic 9: the padded GEMM's phase planes, B packed with the output's
 * own columns only: column j = (oy, ox) of tap k is xp[off[k] + oy * PW +
 * ox], copied a run of one output row at a time. */
typedef struct compact {
    const float *xp;
    const int64_t *off;
    int64_t OH, OW, PW;
} compact;

#if defined(__AVX512F__)
/* A strip of 32 columns in runs, k rows [k0, k0 + kc): each row is put
 * together in two registers by one masked load per run and half (lane i
 * of run r reads xp + off[k] + src[r] + i, the lanes outside the run
 * masked off and left zero), then stored whole: 2-4 loads a row instead
 * of a copy call per run (ResNet-50's stride-2 3x3 conv at 28x28 spent
 * 14% of its time in those calls). */
static void compact_strip32(const compact *cp, const col_runs *cr, int nrun, int64_t k0, int64_t kc, float *d) {
    int64_t src[64];
    __mmask16 lo[64], hi[64];
    for (int r = 0; r < nrun; r++) {
        uint32_t m = (uint32_t)(((1ull << cr->len[r]) - 1) << cr->off[r]);
        lo[r] = (__mmask16)m;
        hi[r] = (__mmask16)(m >> 16);
        src[r] = cr->x0[r] - cr->off[r]; /* lane i reads src + i */
    }
    for (int64_t kk = 0; kk < kc; kk++) {
        const float *row = cp->xp + cp->off[k0 + kk];
        __m512 v0 = _mm512_setzero_ps(), v1 = _mm512_setzero_ps();
        for (int r = 0; r < nrun; r++) {
            v0 = _mm512_mask_loadu_ps(v0, lo[r], row + src[r]);
            v1 = _mm512_mask_loadu_ps(v1, hi[r], row + src[r] + 16);
        }
        _mm512_store_ps(d + kk * 32, v0);
        _mm512_store_ps(d + kk * 32 + 16, v1);
    }
}
#endif

static void compact_pack(const void *ud, int64_t k0, int64_t kc, int64_t n0, int64_t nc, int nr, float *dst) {
    const compact *cp = ud;
    col_runs cr;
    for (int64_t s0 = 0; s0 < nc; s0 += nr) {
        int64_t cols = nc - s0 < nr ? nc - s0 : nr;
        float *d = dst + s0 * kc;
        int nrun = col_runs_of(&cr, n0 + s0, cols, cp->OH, cp->OW);
        for (int r = 0; r < nrun; r++) cr.x0[r] += cr.y[r] * cp->PW; /* grid column of the run */
#if defined(__AVX512F__)
        if (nr == 32) {
            compact_strip32(cp, &cr, nrun, k0, kc, d);
            continue;
        }
#endif
        for (int64_t kk = 0; kk < kc; kk++) {
            float *row = d + kk * nr;
            const float *src = cp->xp + cp->off[k0 + kk];
            for (int r = 0; r < nrun; r++) copy_floats(row + cr.off[r], src + cr.x0[r], cr.len[r]);
            if (cols < nr) memset(row + cols, 0, (size_t)(nr - cols) * sizeof(float));
        }
    }
}

/* Returns 0, or 1 when the tactic does not apply / has no workspace. */
static int conv_padcompact(const kiln_call *c, const geom *g) {
    padgeom pg;
    if (!padgemm_geom(g, &pg) || !c->workspace || c->workspace_size < PADCOMPACT_BYTES(pg)) return 1;
    const float *x = c->in[0].data, *w = c->in[1].data;
    const float *bias = c->nin > 2 && c->in[2].data ? c->in[2].data : NULL;
    float *xp = c->workspace, *y = c->out[0].data;
    int64_t *off = (int64_t *)(xp + pg.xp_floats);
    const int64_t isp = g->id[1] * g->id[2], osp = g->o[1] * g->o[2], K = g->Cg * g->k[1] * g->k[2];
    padgemm_offsets(g, &pg, xp, off);
    const float *res;
    int relu, in_gemm = gemm_epilogue(c, 1, &res, &relu);
    compact cp = {.xp = xp, .off = off, .OH = g->o[1], .OW = g->o[2], .PW = pg.PW};
    /* A small output over a long K (ResNet-50's layer4.0/conv2: 49 columns,
     * K 4608) is split over K at >= 2 threads: split by rows (the strips
     * of 32 + 17 columns leave nothing else) every thread packed all of B
     * and the 2 threads scaled 1.4-1.6x.  In the network at 2 threads
     * (5 runs, both orders, session 12) -0.08..-0.19 ms of 1.1-1.3; on its
     * downsample (K 1024, a partial sum of 2048 x 49) +0.03..+0.06 in 4 of
     * 5: hence K of 8 blocks or more.  The sums' order then depends on
     * the thread count (as tactic 11's). */
    const int ksplit = osp <= 64 && K >= 8 * kiln__sgemm_kc();
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t gi = 0; gi < g->G; gi++) {
            padctx p = {.g = g, .pg = &pg, .x = x + (n * g->C + gi * g->Cg) * isp, .xp = xp};
            kiln_exec_parallel_for(c->exec, g->Cg * pg.nph, 1, pad_channels, &p);
            kiln__gemm gm = {.M = g->Mg, .N = osp, .K = K, .a = w + gi * g->Mg * K, .a_rs = K, .a_cs = 1,
                             .alpha = 1.0f, .c = y + (n * g->M + gi * g->Mg) * osp, .ldc = osp,
                             .bias_row = bias ? bias + gi * g->Mg : NULL, .a_packed = packed_w(c, g, gi),
                             .packb = compact_pack, .packb_ud = &cp, .split_k = ksplit};
            kiln__ops_epi_rows ge;
            gemm_y_epilogue(c, g, &gm, &ge, n, gi, in_gemm ? &res : NULL, relu);
            kiln__sgemm(&gm, c->exec);
        }
    return 0;
}

/* Tactic 6's static conditions (2-D, one group, at least 2 output
 * channels, 3x3 taps, stride 1, undilated; k, s, d: the 2 spatial axes).
 * The one dynamic condition, an output at least 5 columns wide
 * (kiln__wino_fits), is checked per call: narrower outputs run the padded
 * GEMM. */
static int wino_applies(int nsp, int64_t G, int64_t M, const int64_t *k, const int64_t *s, const int64_t *d) {
    return nsp == 2 && G == 1 && M >= 2 && k[0] == 3 && k[1] == 3 && s[0] == 1 && s[1] == 1 && d[0] == 1 &&
           d[1] == 1;
}


/* The kernel a call runs: the chosen tactic, or (auto) direct for
 * depthwise-like convs, which have too little reuse for a GEMM.  direct_ok:
 * the conv is 1-D/2-D (no depth to convolve).  The direct kernel runs only
 * where it can win (at most 16 products per output, or at most 4 output
 * channels per group, as auto picks it); elsewhere tactic 3 (and 5 and 7,
 * which are 3 on a conv that is not depthwise) runs the padded GEMM: on
 * ResNet-50's convs the direct kernel timed at 10-500x the GEMMs and its
 * candidates took ~90% of a cold build, for a kernel that never won there;
 * with up to 64 products (MobileNetV2's first conv and its 1x1 convs from
 * 16..64 channels, ResNet-50's from 64) it timed at 3-20x the GEMM. */
static int pick_tactic(int tactic, int direct_ok, const geom *g) {
    if (wino16c_m(tactic)) return tactic; /* its own layouts: no fallback */
    if (wino_m(tactic)) /* where conv_formats_fn did not offer it: a forced tactic */
        return wino_applies(g->nsp, g->G, g->M, g->k + 1, g->s + 1, g->d + 1) ? tactic : T_PADGEMM;
    if (tactic == T_DWROWS)
        tactic = direct_ok && g->Cg == 1 && kiln__dwrows_fits(g->s[2], g->k[2]) ? T_DWROWS : T_DW;
    if (tactic == T_DW && !(direct_ok && g->Cg == 1)) tactic = T_DIRECT;
    if (tactic == T_DIRECT && direct_ok && g->Cg * g->k[0] * g->k[1] * g->k[2] > 16 && g->Mg > 4)
        return T_PADGEMM;
    if (tactic == T_DIRECT && !direct_ok) return T_GEMM;
    if (tactic == T_KSPLIT) return is_pointwise(g) && g->G == 1 ? T_KSPLIT : T_GEMM;
    if (tactic == T_FEWC) return fewc_applies(g) ? T_FEWC : T_PADGEMM;
    if (tactic == T_FEWC16C) return tactic; /* its own layouts: no fallback */
    if (tactic == T_PW16C || tactic == T_PW16CK) /* (LINEAR: conv_formats_fn never offers them) */
        return pw16c_applies(g) ? T_PW16C : T_GEMM;
    if (tactic == T_D16C) return T_GEMM; /* LINEAR (never offered); NCHW16C runs conv_d16c */
    if (tactic == T_GEMM || tactic == T_DIRECT || tactic == T_PADGEMM || tactic == T_DW || tactic == T_DWROWS ||
        tactic == T_PADPACK || tactic == T_PADCOMPACT)
        return tactic;
    if (direct_ok && g->Cg == 1) return T_DW;
    return direct_ok && (g->Cg * g->k[1] * g->k[2] <= 16 || g->Mg == 1) ? T_DIRECT : T_PADGEMM;
}

/* The code tactic `tactic` runs on this conv, from what is static in every
 * engine (kernel, strides, pads, groups): tactics with equal keys run the
 * same kernel.  The padded GEMM (4) is what auto, direct and depthwise
 * (1/3/5) run on a dense conv (ResNet's), and on a pointwise conv it is
 * conv_gemm with X read in place or packed (2) by the same 64-row rule. */
static int kernel_key(int tactic, const geom *g) {
    int t = pick_tactic(tactic, g->id[0] == 1 && g->k[0] == 1, g);
    if ((t == T_PADGEMM || t == T_PADPACK || t == T_PADCOMPACT) && padgemm_applies(g)) return t;
    if (t != T_GEMM && t != T_PADGEMM && t != T_PADPACK && t != T_PADCOMPACT) return t; /* direct, depthwise, Winograd */
    if (!is_pointwise(g)) return T_GEMM;                          /* im2col packing */
    return pointwise_in_place(tactic, g->Mg) ? T_PADGEMM : T_GEMM;
}

/* kiln_quick_op.prepack: a constant F32 W packed once, per group, as the
 * SGEMM's A operand, for the tactics that run a GEMM (all but direct and
 * the depthwise ones); for Winograd transformed, for tactic 12 in
 * conv_fewc.c's 16-channel blocks.  Everything it depends on is static:
 * W's dims, group, the tactic. */
static int conv_prepack(const kiln_call *c, int input, void *dst, size_t *size) {
    const kiln_tensor *x = &c->in[0], *w = &c->in[1];
    size_t want = *size;
    *size = 0;
    if (input != 1 || w->dtype != KILN_DTYPE_F32 || x->dtype != KILN_DTYPE_F32 || !w->data ||
        w->ndim < 3 || w->ndim > 5 || !kiln__ops_dense(w))
        return 0;
    int nsp = w->ndim - 2;
    geom g;
    memset(&g, 0, sizeof g);
    g.nsp = nsp;
    for (int i = 0; i < 3; i++) g.k[i] = g.s[i] = g.d[i] = 1;
    for (int i = 0; i < nsp; i++) g.k[3 - nsp + i] = w->dims[2 + i];
    g.M = w->dims[0];
    g.Cg = w->dims[1];
    g.G = kiln_attrs_int(c->attrs, "group");
    if (g.G < 1 || g.M % g.G) return 0; /* impl reports it */
    g.Mg = g.M / g.G;
    int64_t wk[3], pads[6];
    for (int i = 0; i < nsp; i++) wk[i] = w->dims[2 + i];
    if (read_attrs(c->attrs, nsp, wk, g.k + 3 - nsp, g.s + 3 - nsp, g.d + 3 - nsp, pads, pads + 3))
        return 0; /* impl reports it */
    /* a 3-D conv runs direct only on a depth-1 input and kernel */
    int direct_ok = nsp < 3 || (x->ndim == 5 && x->dims[2] == 1 && g.k[0] == 1);
    int t = pick_tactic(c->tactic, direct_ok, &g);
    if (t == T_DIRECT || t == T_DW || t == T_DWROWS) return 0;
    if (t == T_FEWC || t == T_FEWC16C) { /* (17: the same packing) */
        kiln__fewc p = {.C = g.Cg, .M = g.M, .KH = g.k[1], .KW = g.k[2], .w = w->data};
        const size_t fb = (size_t)kiln__fewc_packed_w(&p) * sizeof(float);
        if (dst && want != fb)
            return kiln_set_error(KILN_EINTERNAL, "Conv prepack: %zu bytes asked, %zu given", fb, want);
        if (dst) kiln__fewc_pack_w(&p, dst);
        *size = fb;
        return 0;
    }
    g.C = g.Cg * g.G;
    for (int i = 0; i < nsp; i++) g.pb[3 - nsp + i] = pads[i], g.pe[3 - nsp + i] = pads[3 + i];
    if ((t == T_PW16C || t == T_PW16CK) && x->format == KILN_FORMAT_NCHW16C && pw16c_applies(&g)) {
        const size_t b16 = (size_t)kiln__pw16c_packed(g.M, g.C) * sizeof(float);
        *size = b16;
        if (dst && want != b16)
            return kiln_set_error(KILN_EINTERNAL, "Conv prepack: %zu bytes asked, %zu given", b16, want);
        if (dst) kiln__pw16c_pack(w->data, g.M, g.C, dst);
        return 0;
    }
    if (c->tactic == T_D16C && x->format == KILN_FORMAT_NCHW16C && d16c_applies(&g)) {
        const int64_t taps = g.k[1] * g.k[2];
        *size = (size_t)kiln__d16c_packed(g.M, g.C, taps) * sizeof(float);
        if (dst && want != *size)
            return kiln_set_error(KILN_EINTERNAL, "Conv prepack: %zu bytes asked, %zu given", *size, want);
        if (dst) kiln__d16c_pack(w->data, g.M, g.C, taps, dst);
        return 0;
    }
    if (wino16c_m(t)) {
        if (g.G != 1 || g.k[1] != 3 || g.k[2] != 3) return 0; /* impl reports it */
        *size = kiln__wino16c_pack_bytes(wino16c_m(t), g.M, g.Cg);
        if (!dst) return 0;
        if (want != *size)
            return kiln_set_error(KILN_EINTERNAL, "Conv prepack: %zu bytes asked, %zu given", *size, want);
        return kiln__wino16c_pack(wino16c_m(t), w->data, g.M, g.Cg, dst);
    }
    /* an output known too narrow for Winograd runs the padded GEMM */
    const int wm = wino_m(t);
    if (wm && c->nout > 0 && c->out[0].ndim == 4 && c->out[0].dims[3] >= 0 &&
        !kiln__wino_fits(wm, g.M, c->out[0].dims[3]))
        t = T_PADGEMM;
    int64_t K = g.Cg * g.k[0] * g.k[1] * g.k[2];
    size_t per = kiln__sgemm_pack_a_floats(g.Mg, K);
    size_t bytes = wino_m(t) ? kiln__wino_pack_bytes(wm, g.M, g.Cg) : (size_t)g.G * per * sizeof(float);
    if (!dst) {
        *size = bytes;
        return 0;
    }
    if (want != bytes)
        return kiln_set_error(KILN_EINTERNAL, "Conv prepack: %zu bytes asked, %zu given", bytes, want);
    if (wino_m(t)) {
        *size = bytes;
        return kiln__wino_pack(wm, w->data, g.M, g.Cg, dst);
    }
    for (int64_t gi = 0; gi < g.G; gi++) {
        kiln__gemm gm = {.M = g.Mg, .K = K, .a = (const float *)w->data + gi * g.Mg * K, .a_rs = K,
                         .a_cs = 1, .alpha = 1.0f};
        kiln__sgemm_pack_a(&gm, (float *)dst + (size_t)gi * per);
    }
    *size = bytes;
    return 0;
}

static int conv_impl_f32(const kiln_call *c) {
    if (wino16c_m(c->tactic)) return conv_wino16c(c, wino16c_m(c->tactic));
    for (int i = 0; i < c->nin && i < 3; i++)
        if (c->in[i].data && !kiln__ops_dense(&c->in[i]))
            return kiln_set_error(KILN_EUNSUPPORTED, "Conv: input %d is not dense LINEAR", i);
    geom g;
    int rc = make_geom(c, &g);
    if (rc) return rc;
    if (g.N * g.M * g.o[0] * g.o[1] * g.o[2] == 0) return 0;
    int tactic = pick_tactic(c->tactic, g.id[0] == 1 && g.k[0] == 1, &g);
    if (tactic == T_DWROWS && !conv_dwrows(c, &g)) return 0;
    if (tactic == T_DW || tactic == T_DWROWS) return conv_dw(c, &g);
    if (wino_m(tactic)) {
        if (!conv_wino(c, &g, wino_m(tactic))) return 0;
        tactic = T_PADGEMM; /* an output too narrow for it (documented above; it ran im2col) */
    }
    if (tactic == T_PADCOMPACT && !conv_padcompact(c, &g)) return 0;
    if (tactic == T_FEWC && !conv_fewc(c, &g, 0)) return 0;
    if (tactic == T_DIRECT)
        conv_direct(c, &g);
    else if ((tactic != T_PADGEMM && tactic != T_PADPACK) || conv_padgemm(c, &g, tactic == T_PADPACK))
        conv_gemm(c, &g);
    return 0;
}

static int conv_impl(const kiln_call *c) {
    if ((c->tactic == T_PW16C || c->tactic == T_PW16CK) && c->in[0].format == KILN_FORMAT_NCHW16C)
        return conv_pw16c(c);
    if (c->tactic == T_FEWC16C) return conv_fewc16c(c);
    if (c->tactic == T_D16C && c->in[0].format == KILN_FORMAT_NCHW16C) return conv_d16c(c);
    return kiln__ops_as_f32(c, conv_impl_f32);
}

/* ------------------------------------------------------------ ConvInteger */

/* Exact int32 reference loops with zero points (x: per tensor, w: per
 * tensor or per output channel). */
static int convint_impl(const kiln_call *c) {
    for (int i = 0; i < c->nin; i++)
        if (c->in[i].data && !kiln__ops_dense(&c->in[i]))
            return kiln_set_error(KILN_EUNSUPPORTED, "ConvInteger: input %d is not dense", i);
    geom g;
    kiln_call c2 = *c;
    c2.nin = 2; /* make_geom would read input 2 as a bias */
    int rc = make_geom(&c2, &g);
    if (rc) return rc;
    const kiln_tensor *X = &c->in[0], *W = &c->in[1];
    const kiln_tensor *zx = c->nin > 2 && c->in[2].data ? &c->in[2] : NULL;
    const kiln_tensor *zw = c->nin > 3 && c->in[3].data ? &c->in[3] : NULL;
    int64_t nzw = zw ? kiln_tensor_numel(zw) : 0;
    if (zw && nzw != 1 && nzw != g.M)
        return kiln_set_error(KILN_ESHAPE, "ConvInteger: w_zero_point has %lld elements, expected 1 "
                              "or %lld", (long long)nzw, (long long)g.M);
    int32_t x0 = zx ? (int32_t)kiln__ops_get_i64(zx->data, zx->dtype, 0) : 0;
    int32_t *y = c->out[0].data;
    for (int64_t n = 0; n < g.N; n++)
    for (int64_t m = 0; m < g.M; m++) {
        int32_t w0 = zw ? (int32_t)kiln__ops_get_i64(zw->data, zw->dtype, nzw == 1 ? 0 : m) : 0;
        int64_t gi = m / g.Mg;
        for (int64_t oz = 0; oz < g.o[0]; oz++)
        for (int64_t oy = 0; oy < g.o[1]; oy++)
        for (int64_t ox = 0; ox < g.o[2]; ox++) {
            int32_t acc = 0;
            for (int64_t ci = 0; ci < g.Cg; ci++)
            for (int64_t kz = 0; kz < g.k[0]; kz++)
            for (int64_t ky = 0; ky < g.k[1]; ky++)
            for (int64_t kx = 0; kx < g.k[2]; kx++) {
                int64_t iz = oz * g.s[0] - g.pb[0] + kz * g.d[0];
                int64_t iy = oy * g.s[1] - g.pb[1] + ky * g.d[1];
                int64_t ix = ox * g.s[2] - g.pb[2] + kx * g.d[2];
                int32_t xv = x0; /* padding holds the zero point: contributes 0 */
                if (iz >= 0 && iz < g.id[0] && iy >= 0 && iy < g.id[1] && ix >= 0 && ix < g.id[2])
                    xv = (int32_t)kiln__ops_get_i64(X->data, X->dtype,
                        (((n * g.C + gi * g.Cg + ci) * g.id[0] + iz) * g.id[1] + iy) * g.id[2] + ix);
                int32_t wv = (int32_t)kiln__ops_get_i64(W->data, W->dtype,
                    (((m * g.Cg + ci) * g.k[0] + kz) * g.k[1] + ky) * g.k[2] + kx);
                acc += (xv - x0) * (wv - w0);
            }
            y[(((n * g.M + m) * g.o[0] + oz) * g.o[1] + oy) * g.o[2] + ox] = acc;
        }
    }
    return 0;
}

static const kiln_quick_op convint_op = {
    .ns = "ai.onnx", .name = "ConvInteger", .version = 10,
    .min_inputs = 2, .max_inputs = 4, .num_outputs = 1,
    .attrs = conv_attrs, .shape = convint_shape, .impl = convint_impl,
    .doc = "u8/i8 convolution with zero points into i32 (exact reference loops)",
};
KILN_OP(convint_op)

static const kiln_combo conv_formats[] = {
    {"FP32", NULL, {T_AUTO, T_GEMM, T_DIRECT, T_PADGEMM, T_DW}},
    {"FP16|FP64", NULL, {T_AUTO}},
};

/* Output pixels of a 2-D conv whose input has constant spatial dims (a
 * fixed-shape build), else -1. */
static int64_t out_pixels(const kiln_desc *x, const int64_t *k, const int64_t *s, const int64_t *d,
                          const int64_t *pb, const int64_t *pe, autopad ap, int64_t *hw) {
    int64_t pix = 1;
    for (int i = 0; i < 2; i++) {
        int64_t n, o;
        if (!kiln_expr_is_const(x->dims[2 + i], &n) || s[i] < 1) return -1;
        if (ap == AP_SAME_UPPER || ap == AP_SAME_LOWER)
            o = (n + s[i] - 1) / s[i];
        else {
            int64_t span = n + (ap == AP_VALID ? 0 : pb[i] + pe[i]) - d[i] * (k[i] - 1) - 1;
            o = span < 0 ? 0 : span / s[i] + 1;
        }
        pix *= o;
        if (hw) hw[i] = o;
    }
    return pix;
}

/* Does tactic 18 (m = 4) or 19 (m = 2) run split on a C -> M conv of output
 * hw[0] x hw[1] at `threads`?  Where it does, a build at 2+ threads offers
 * it in place of 14 (15), elsewhere 14 (15): there the two are one kernel,
 * timed twice and chosen between on noise.  Where split mode runs (the
 * plane's V^T and products outweigh U: ResNet's 56x56 and 28x28 convs),
 * its tiles never cross between the cores, which isolated timing does not
 * show: ResNet-50's 28x28 convs at 2 threads took 0.35 ms with 18 against
 * 0.40-0.43 with 14 in the network (bench/README.md, session 30) where the
 * builder had timed them level, and picked either. */
static int wino16c_split_runs(int m, int64_t C, int64_t M, const int64_t *hw, int threads) {
    const kiln__wino16c p = {.w = {.m = m, .C = C, .M = M, .OH = hw[0], .OW = hw[1]}, .split = 1};
    return kiln__wino16c_splits(&p, threads);
}

/* The NCHW16C rows (tactics 13-15, 17) are left out of a build without
 * KILN_BUILD_CPU_BLOCKED (a load checks every row). */
static int no_16c(const kiln_shape_ctx *c) { return !kiln__shape_ctx_cpu_blocked(c); }

/* Where tactic 16 is offered (a build with KILN_BUILD_CPU_BLOCKED, an
 * AVX-512 kernel): d16c_applies's convs that tactics 13-15 do not run (a
 * 1x1 stride-1 unpadded conv, a 3x3 stride-1 one). */
static int d16c_offered(const kiln_shape_ctx *c, int64_t G, int64_t Cg, int64_t M, const int64_t *k,
                        const int64_t *s, const int64_t *d, const int64_t *pb, const int64_t *pe) {
    if (no_16c(c) || !kiln__dwrows_fits(1, 3) || G != 1 || Cg < 16 || Cg % 16 || M % 16 || d[0] != 1 || d[1] != 1)
        return 0;
    if (k[0] * k[1] * s[0] * s[1] == 1 && pb[0] + pb[1] + pe[0] + pe[1] == 0) return 0; /* tactic 13's */
    return !(k[0] == 3 && k[1] == 3 && s[0] == 1 && s[1] == 1);                       /* 14 / 15's */
}

/* kiln_quick_op.formats_fn: conv_formats, plus Winograd (6, 10) where it runs
 * (a constant W for its transformed packing, and wino_applies) and depthwise
 * rows (7) on depthwise convs it fits.  It reads only
 * what is static in every engine (ranks, W, attributes), so the engine's
 * check of the stored tactic at load and per shape agrees with the build. */
static int conv_formats_fn(const kiln_shape_ctx *c, kiln_combo *out, int max) {
    int n = (int)(sizeof conv_formats / sizeof conv_formats[0]);
    if (max < n) return kiln_set_error(KILN_EINTERNAL, "Conv formats_fn: room for %d combinations, needs %d", max, n);
    memcpy(out, conv_formats, sizeof conv_formats);
    const kiln_desc *x = &c->in[0], *w = &c->in[1];
    int64_t wk[2], M, k[2], s[2], d[2], pb[2], pe[2];
    if (x->ndim != 4 || w->ndim != 4 || !w->data || !kiln_expr_is_const(w->dims[0], &M) ||
        !kiln_expr_is_const(w->dims[2], &wk[0]) || !kiln_expr_is_const(w->dims[3], &wk[1]) ||
        read_attrs(c->attrs, 2, wk, k, s, d, pb, pe))
        return n;
    int64_t G = kiln_attrs_int(c->attrs, "group"), Cg;
    int t = 0, have_cg = kiln_expr_is_const(w->dims[1], &Cg);
    while (out[0].tactics[t]) t++;
    if (wino_applies(2, G, M, k, s, d)) {
        /* 21 and 22 (at 1 thread 6 and 10) in place of 6 and 10 when
         * building, where V and the products outweigh U: the builder's
         * timing runs where the build runs, and an engine wherever the
         * host puts its threads; across two dies 6's phases move half of V
         * and the products between them (PP-OCRv4 det's 96 -> 24 convs at
         * 160x160: 2.6 against 1.85 ms with 21, where one die runs 6 a few
         * percent faster; bench/README.md).  Elsewhere both are timed. */
        const int bt = kiln__shape_ctx_build_threads(c), many = bt != 1;
        autopad ap;
        int64_t ohw[2];
        int64_t opix = have_cg && many && kiln__shape_ctx_building(c) && !parse_autopad(c->attrs, &ap)
                           ? out_pixels(x, k, s, d, pb, pe, ap, ohw) : -1;
        if (opix < 0 || opix / 16 * (Cg + M) < Cg * M) { /* 4x4 tiles' V and products against U */
            out[0].tactics[t++] = T_WINO;
            out[0].tactics[t++] = T_WINO2;
        }
        if (many) {
            out[0].tactics[t++] = T_WINOS;
            out[0].tactics[t++] = T_WINO2S;
        }
        if (have_cg && Cg % 16 == 0 && M % 16 == 0 && n < max && !no_16c(c)) { /* the 16c row (X, W, B, Y; a residual: Y's) */
            kiln_combo row = {"FP32, FP32, FP32, FP32", "NCHW16C, LINEAR, LINEAR, NCHW16C", {T_WINO16C, T_WINO16C2}};
            if (opix >= 0) { /* building at 2+ threads: of 14 and 18 (15 and 19) the one that runs there */
                row.tactics[0] = wino16c_split_runs(4, Cg, M, ohw, bt) ? T_WINO16CS : T_WINO16C;
                row.tactics[1] = wino16c_split_runs(2, Cg, M, ohw, bt) ? T_WINO16C2S : T_WINO16C2;
            } else if (many) /* (at 1 thread 18 and 19 are 14 and 15) */
                row.tactics[2] = T_WINO16CS, row.tactics[3] = T_WINO16C2S;
            out[n++] = row;
        }
    }
    if (have_cg && Cg == 1 && kiln__dwrows_fits(s[1], k[1])) out[0].tactics[t++] = T_DWROWS;
    if (G == 1 && k[0] * k[1] * s[0] * s[1] > 1 && s[0] <= 4 && s[1] <= 4) { /* padgemm_geom applies */
        out[0].tactics[t++] = T_PADPACK;
        out[0].tactics[t++] = T_PADCOMPACT;
    }
    /* 11 runs what auto runs at 1 thread: a 1-thread build timed the same
     * kernel twice and took either on noise (its in-network refinement
     * "chose" between them by up to 0.2 ms of noise on ResNet-50) */
    if (G == 1 && have_cg && Cg >= 2 * kiln__sgemm_kc() && k[0] * k[1] * s[0] * s[1] == 1 &&
        pb[0] + pb[1] + pe[0] + pe[1] == 0 && kiln__shape_ctx_build_threads(c) != 1)
        out[0].tactics[t++] = T_KSPLIT;
    if (have_cg && fewc_applies(&(geom){.nsp = 2, .G = G, .Cg = Cg, .k = {1, k[0], k[1]}, .d = {1, d[0], d[1]}})) {
        out[0].tactics[t++] = T_FEWC;
        if (M % 16 == 0 && n < max && !no_16c(c)) /* tactic 17's row: the image LINEAR, Y NCHW16C */
            out[n++] = (kiln_combo){"FP32, FP32, FP32, FP32", "LINEAR, LINEAR, LINEAR, NCHW16C", {T_FEWC16C}};
    }
    if (have_cg && G == 1 && Cg % 16 == 0 && M % 16 == 0 && k[0] * k[1] * s[0] * s[1] == 1 &&
        pb[0] + pb[1] + pe[0] + pe[1] == 0 && kiln__dwrows_fits(1, 3) && max > n) {
        /* tactic 13's own row (its 4 slots fit 2 inputs too), NCHW16C
         * through; an AVX-512 kernel (the portable one runs an engine that
         * names it elsewhere); only with KILN_BUILD_CPU_BLOCKED (no_16c);
         * tests force blocked candidates with $KILN_CPU_BLOCKED=force
         * (builder/select.c) */
        static const kiln_combo row = {"FP32, FP32, FP32, FP32", "NCHW16C, LINEAR, LINEAR, NCHW16C", {T_PW16C}};
        if (!no_16c(c)) {
            out[n] = row;
            /* 20 in 13's place when building: the builder's timing runs
             * where the build runs, but an engine runs wherever the host
             * puts its threads, and only 20 holds up across two dies (see
             * the list above).  At load both (engines that chose 13). */
            if (Cg >= 4 * M && Cg >= 256 && kiln__shape_ctx_build_threads(c) != 1)
                out[n].tactics[kiln__shape_ctx_building(c) ? 0 : 1] = T_PW16CK;
            n++;
        }
    }
    if (d16c_offered(c, G, have_cg ? Cg : 0, M, k, s, d, pb, pe) && max > n)
        out[n++] = (kiln_combo){"FP32, FP32, FP32, FP32", "NCHW16C, LINEAR, LINEAR, NCHW16C", {T_D16C}};
    autopad ap;
    if (!kiln__shape_ctx_building(c) || !have_cg || G < 1 || M % G || parse_autopad(c->attrs, &ap)) return n;
    /* A strided 1x1 conv (ResNet's downsamples) is offered tactic 9 alone.
     * Its phase plane is then the output's grid itself (PW = OW, no junk
     * columns), so 4 and 8 are 9 plus a grid buffer copied into Y, and 2
     * packs the same B by a slower gather.  In ResNet-50 (forced tactics,
     * per-layer minima in one process, session 11) 9 beat 1 (= 4) on all
     * three by 0.11-0.33 ms at 1 thread and 0.16-0.27 at 2, 8 by 0.07-0.19,
     * 2 by 0.01-0.16 at 1 thread and 0.21-0.47 at 2; the builder's samples
     * on a loaded VM put them within noise and took 1 or 8 in 3 of 12
     * picks (4 cold builds). */
    /* So is a strided conv of a larger kernel whose output is at most 64
     * pixels (a fixed input shape): ResNet's layer4.0 3x3/2 convs, 7x7
     * outputs, where 9's 49 columns beat the grid tactics' 63 (7 rows of 9)
     * and 2's gather.  ResNet-50's layer4.0/conv2 in the network (forced
     * tactics, per-layer minima in one process): 9 ahead of 1, 8 and 2 by
     * 0.26-0.31 ms at 1 thread and of 8 by 0.11-0.34 at 2 (sessions 11-12);
     * ResNet-18's layer4.0/conv1 9 ahead of 1 and 8 by 0.13 at 1 thread
     * and 0.03-0.05 at 2.  Builds on a loaded VM still took 8 (2 threads,
     * session 12) or 1.  At 14x14 and 28x28 outputs the grid tactics tie
     * with 9 or win by ~5%: those stay timed, as do small convs (K under
     * 256), where nothing was measured. */
    int64_t opix = out_pixels(x, k, s, d, pb, pe, ap, NULL);
    int small_out = opix > 0 && opix <= 64 && Cg * k[0] * k[1] >= 256;
    if (G == 1 && s[0] * s[1] > 1 && s[0] <= 4 && s[1] <= 4 && (k[0] * k[1] == 1 || small_out)) {
        memset(out[0].tactics, 0, sizeof out[0].tactics);
        out[0].tactics[0] = T_PADCOMPACT;
        return n;
    }
    /* The builder times each kernel once: a tactic that runs the same code
     * as another is left out (at load and run it stays valid, so engines
     * that chose it still load).  Of equal ones auto is kept (the first
     * candidate: what a build without timing runs), then the named kernel
     * over a fallback to it. */
    geom g = {.G = G, .M = M, .Cg = Cg, .Mg = M / G, .nsp = 2, .id = {1, 1, 1}, .k = {1, k[0], k[1]},
              .s = {1, s[0], s[1]}, .d = {1, d[0], d[1]}, .pb = {0, pb[0], pb[1]}, .pe = {0, pe[0], pe[1]}};
    if (ap != AP_NOTSET) /* (read only by is_pointwise, where SAME/VALID pad nothing) */
        memset(g.pb, 0, sizeof g.pb), memset(g.pe, 0, sizeof g.pe);
    static const int pref[] = {T_AUTO,  T_GEMM,  T_PADGEMM, T_PADPACK, T_PADCOMPACT, T_WINO,  T_WINO2,
                               T_WINOS, T_WINO2S, T_KSPLIT, T_DWROWS,  T_DW,      T_DIRECT, T_FEWC};
    int keep[KILN_MAX_TACTICS] = {0}, key[KILN_MAX_TACTICS];
    for (int i = 0; i < t; i++) key[i] = kernel_key(out[0].tactics[i], &g);
    for (size_t r = 0; r < sizeof pref / sizeof pref[0]; r++)
        for (int i = 0; i < t; i++) {
            if (out[0].tactics[i] != pref[r]) continue;
            keep[i] = 1;
            for (size_t q = 0; q < r && keep[i]; q++) /* a preferred tactic with the same kernel */
                for (int j = 0; j < t; j++)
                    if (out[0].tactics[j] == pref[q] && key[j] == key[i]) keep[i] = 0;
        }
    int m = 0;
    for (int i = 0; i < t; i++)
        if (keep[i]) out[0].tactics[m++] = out[0].tactics[i];
    while (m < t) out[0].tactics[m++] = 0;
    return n;
}

/* CUDA tactics (conv_cuda.c): 1 direct, 2 im2col + cuBLASLt GEMM, 3
 * depthwise tiles (where they apply), 5 and 6 implicit GEMM on tensor cores
 * (FP16/BF16), 10..17 cuDNN's algorithms 0..7 (when cuDNN is found).
 * FP16/BF16 also in NHWC: x and y NHWC, W NHWC (= KRSC, converted once at
 * build), the bias LINEAR (a fused residual Add's input takes y's layout);
 * tactics 2 (1x1 convs as one GEMM) and cuDNN's. */
static const kiln_combo conv_cuda_formats[] = {
    {.types = KILN_CU_T_FLOAT, .tactics = {1, 3, 2, 5, 6, 10, 11, 12, 13, 14, 15, 16, 17}},
    {KILN_CU_T_NHWC ", " KILN_CU_T_NHWC ", " KILN_CU_T_NHWC ", " KILN_CU_T_NHWC, "NHWC, NHWC, LINEAR, NHWC",
     {2, 10, 11, 12, 13, 14, 15, 16, 17}},
    {0}};
static int conv_cuda_check(const kiln_shape_ctx *c) { return kiln__ops_cuda_spatial(c, "Conv", 1, 3); }
/* 1-D/2-D: conv_cuda.c's tactics; 3-D: direct (conv3d_cuda.c), either
 * tactic, with this file's geometry. */
static int conv_cuda(const kiln_call *c) {
    if (c->in[0].ndim != 5) return kiln__cu_conv(c);
    geom g;
    int rc = make_geom(c, &g);
    if (rc) return rc;
    kiln_cu_conv3d p = kiln__cu_conv3d_geo(g.N, g.C, g.M, g.G, g.id, g.o, g.k, g.s, g.d, g.pb, 0);
    return kiln__cu_conv3d(c, &p);
}

static const kiln_quick_op conv_op = {
    .ns = "ai.onnx", .name = "Conv", .version = 1,
    .min_inputs = 2, .max_inputs = 3, .num_outputs = 1,
    .attrs = conv_attrs, .shape = conv_shape, .impl = conv_impl,
    .formats_fn = conv_formats_fn, .workspace = conv_ws, .prepack = conv_prepack,
    .accepts_epilogue = 2, /* every tactic applies it per finished row/plane (16c: per pixel) */
    .doc = "convolution: implicit-im2col packed GEMM, direct/depthwise kernel",
    .cuda_impl = conv_cuda, .cuda_formats = conv_cuda_formats, .cuda_workspace = kiln__cu_conv_workspace,
    .cuda_check = conv_cuda_check,
    /* the NCHW16C kernels' stores add the residual of the pixels they
     * write, once each (conv_pw16c.c, conv_direct16c.c, conv_wino16c.c's
     * output tiles); not 20 (its shares write Y before the sum) */
    .residual_inplace_tactics = 1ull << T_PW16C | 1ull << T_WINO16C | 1ull << T_WINO16C2 | 1ull << T_D16C |
                                1ull << T_WINO16CS | 1ull << T_WINO16C2S,
};
KILN_OP(conv_op)
