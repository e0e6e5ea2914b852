/*
 * mbconv.c — kiln::mbconv: a MobileNetV2 inverted-residual block (without
 * its residual Add, which the builder fuses as an epilogue) as one layer,
 *
 *   E = clamp(Conv1x1(X, We, Be), e_lo, e_hi)      (with inputs 5, 6; else E = X)
 *       or clamp(Conv(X, We, Be), e_lo, e_hi): a dense KxK conv of few input
 *       channels (e_strides, e_pads; the network's stem, conv_fewc.c)
 *   D = clamp(DepthwiseConv(E, Wd, Bd), d_lo, d_hi)
 *   Y = Conv1x1(D, Wp, Bp)                         (then the fused epilogue chain)
 *
 * inputs X [N, C, H, W], Wd [Ce, 1, KH, KW], Bd [Ce], Wp [M, Ce, 1, 1],
 * Bp [M], optionally We [Ce, C, 1, 1] and Be [Ce]; attributes strides,
 * pads (top, left, bottom, right) and dilations of the depthwise conv and
 * the two clamps (ReLU: [0, inf), ReLU6: [0, 6]).  The builder makes it
 * from Conv -> Clip/Relu -> depthwise Conv -> Clip/Relu -> 1x1 Conv chains
 * on CPU builds (builder/mbconv_fuse.c), and from a stem conv (3 colour
 * channels) -> Clip/Relu followed by a depthwise block without expand conv
 * (MobileNetV2's features.0 and .1): the stem's output, 32 x 112 x 112 in
 * MobileNetV2, then never leaves the cache either.
 *
 * Why: the expanded tensor E (MobileNetV2's 96 x 112 x 112 is 4.8 MB) and
 * D are written to memory and read back by the next layer; beyond the L2
 * cache that traffic, not the arithmetic, is what the three convs cost.
 *
 * Tactics (the builder times them; `kiln inspect` shows the choice):
 *   1 whole tensors: the same three steps as the separate layers (E and D
 *     in the workspace, each step split over the threads);
 *   2 row tiles: a band of output rows at a time, on one thread each: the
 *     expand GEMM of the input rows the band needs, the depthwise rows
 *     (conv_dwrows.c), then the project GEMM into Y; E and D stay in the
 *     thread's cache.  Bands overlap by KH - stride input rows, which are
 *     expanded twice;
 *   3 row bands as tactic 2, the 1x1 expand conv computed by conv_fewc.c's
 *     pointwise kernel (offered for up to DIRECT_MAX_C input channels):
 *     E is clamped before its one store, where the GEMM stores a block of
 *     E and its `done` hook reads and writes it again to clamp it (for
 *     MobileNetV2's K = 16..32 expands that pass costs a quarter of the
 *     GEMM), and X is read in place, unpacked.  Before a depthwise conv
 *     of x stride 2 over rows of even width it stores E's rows split by
 *     column parity (two permutes per 32 outputs), so that every tap of
 *     the depthwise rows is one load (conv_dwrows.h `phase`);
 *   4 whole tensors channels-last (offered for a 1x1 expand conv over
 *     small planes: CL_MAX_HW, CL_MAX_OHW): E^T = X^T We^T and Y^T = D^T
 *     Wp^T are GEMMs whose rows are the pixels and whose columns are the
 *     channels, and the depthwise step runs over channels-last E^T
 *     (conv_dwcl.c).  On 14x14 and 7x7 planes the GEMMs' columns are then
 *     whole vectors (channel counts in multiples of 16, where 49 or 196
 *     pixels as columns leave 1- and 4-wide tails) and the depthwise lanes
 *     are all used; the transposition back to Y's planes is folded into
 *     the project GEMM's `done` hook, tile by tile while it is in cache,
 *     with Bp and the epilogue.  Its We, Wp are packed as the GEMMs' B
 *     and Wd tap-major (kiln__dwcl_pack);
 *   5 whole tensors in NCHW16C (X and Y NCHW16C: its own combination
 *     row, for a 1x1 expand conv with C, Ce and M multiples of 16, on
 *     AVX-512 builds): the two 1x1 convs run Conv tactic 13's kernel
 *     (conv_pw16c.c: 12 pixels x 32 channels of accumulators, X's 16
 *     channels of a pixel one line, no packing, no tails: 49 or 196 pixels
 *     are tiles of 9-12) with the expand's clamp and the project's bias,
 *     residual and Relu in their stores, and the depthwise step runs
 *     conv_dwcl.c on each block of 16 channels of E (channels-last within
 *     the block).  E and D (Ce/16 x pixels x 16) are in the workspace;
 *     each step is split over the threads by pixels (rows for the
 *     depthwise step: each thread reads what it wrote, run_16c).  On
 *     MobileNetV2's 14x14 and 7x7 blocks, where the GEMMs of 1-4 run 49
 *     or 196 columns (tails of 1-17), in the network's 16c region.
 *   6 tactic 5 with the hidden channels split over the threads (offered
 *     in builds of 2 threads or more): each thread its share of E's
 *     channels (multiples of 32) through all three steps, the expand over
 *     every pixel into them (its share of We), the depthwise step on them,
 *     the project summed over them only (its share of Wp) into a partial
 *     of its own (the first thread's into Y, with Bp), then the partials
 *     added with the residual and Relu (conv_pw16c.h
 *     kiln__pw16c_sum_parts, as Conv tactic 20).  Where tactic 5's
 *     threads split the pixels, each reads all of We and Wp: on
 *     MobileNetV2's 7x7 blocks (1.2 MB of weights for 49 pixels) they
 *     scaled 1.41-1.49x at 2 threads.  No barrier between the steps.
 * Results are the same in all up to the GEMM's summation order, which
 * does not depend on the band (each output element sums over the same K);
 * tactic 6's sum over the hidden channels is in shares (its order follows
 * the thread count).
 */
#include "kiln_int.h"
#include "device/cpu/sgemm.h"
#include "ops/common/ops_util.h"
#include "ops/nn/conv_direct16c.h"
#include "ops/nn/conv_dwcl.h"
#include "ops/nn/conv_dwrows.h"
#include "ops/nn/conv_fewc.h"
#include "ops/nn/conv_pw16c.h"

#include <float.h>
#include <math.h>
#include <string.h>

enum { T_WHOLE = 1, T_ROWS = 2, T_DIRECT = 3, T_CL = 4, T_16C = 5, T_16CH = 6 };

/* Tactic 4 is offered where E's plane has at most CL_MAX_HW pixels and
 * Y's at most CL_MAX_OHW: MobileNetV2's 7x7 blocks (and the 14x14 -> 7x7
 * one).  On 14x14 outputs it measured no faster than tactics 1-3 at 1
 * thread and slower at 2, so it is not a candidate there (one noisy
 * timing fewer); on larger planes the row bands keep E in cache. */
#define CL_MAX_HW 1024
#define CL_MAX_OHW 64

/* Tactic 3 is offered where the 1x1 expand conv has at most this many input
 * channels: in MobileNetV2 (1 thread, builder timings) it wins at 16..32,
 * ties at 64, loses at 160 (the GEMM's register tile reuses more). */
#define DIRECT_MAX_C 64
enum { IN_X, IN_WD, IN_BD, IN_WP, IN_BP, IN_WE, IN_BE };

static const kiln_attr_def mbconv_attrs[] = {
    {"strides", KILN_ATTR_ARRAY, KILN_DTYPE_I64, "[1, 1]", 0, "depthwise conv strides (y, x)"},
    {"pads", KILN_ATTR_ARRAY, KILN_DTYPE_I64, "[0, 0, 0, 0]", 0, "depthwise conv pads (top, left, bottom, right)"},
    {"dilations", KILN_ATTR_ARRAY, KILN_DTYPE_I64, "[1, 1]", 0, "depthwise conv dilations (y, x)"},
    {"e_lo", KILN_ATTR_FLOAT, 0, "-3.4028235e38", 0, "expand output clamped below"},
    {"e_hi", KILN_ATTR_FLOAT, 0, "3.4028235e38", 0, "expand output clamped above"},
    {"d_lo", KILN_ATTR_FLOAT, 0, "-3.4028235e38", 0, "depthwise output clamped below"},
    {"d_hi", KILN_ATTR_FLOAT, 0, "3.4028235e38", 0, "depthwise output clamped above"},
    {"e_strides", KILN_ATTR_ARRAY, KILN_DTYPE_I64, "[1, 1]", 0, "expand conv strides (y, x)"},
    {"e_pads", KILN_ATTR_ARRAY, KILN_DTYPE_I64, "[0, 0, 0, 0]", 0, "expand conv pads (top, left, bottom, right)"},
    {NULL, 0, 0, NULL, 0, NULL},
};

/* strides, pads, dilations into s[2], p[4], d[2], the expand conv's
 * strides and pads into es[2], ep[4], checked. */
static int read_geo(const kiln_attrs *a, int64_t *s, int64_t *p, int64_t *d, int64_t *es, int64_t *ep) {
    const kiln__ops_geom_attr f[5] = {
        {"strides", s, 2, 1}, {"pads", p, 4, 0}, {"dilations", d, 2, 1}, {"e_strides", es, 2, 1}, {"e_pads", ep, 4, 0}};
    return kiln__ops_geom_attrs(a, "kiln::mbconv", f, 5);
}

/* A dense expand conv (not 1x1 at stride 1 without pads) runs conv_fewc.c:
 * few input channels, a small kernel. */
static int fewc_fits(int64_t C, int64_t kh, int64_t kw) {
    if (C <= KILN__FEWC_CMAX && kh <= KILN__FEWC_KMAX && kw <= KILN__FEWC_KMAX) return 0;
    return kiln_set_error(KILN_EUNSUPPORTED, "kiln::mbconv: a %lld x %lld expand conv of %lld input channels; one "
                          "other than 1x1 at stride 1 without pads takes at most %d channels and a kernel up to "
                          "%d x %d", (long long)kh, (long long)kw, (long long)C, KILN__FEWC_CMAX, KILN__FEWC_KMAX,
                          KILN__FEWC_KMAX);
}

/* Dim d of input i must be the constant want (want < 0: any). */
static int check_dim(const kiln_shape_ctx *c, int i, int d, int64_t want, const char *what) {
    int64_t v;
    if (!kiln_expr_is_const(c->in[i].dims[d], &v) || (want >= 0 && v != want))
        return kiln_set_error(KILN_ESHAPE, "kiln::mbconv: %s dim %d: expected %lld, found %s%lld", what, d,
                              (long long)want, kiln_expr_is_const(c->in[i].dims[d], &v) ? "" : "a dynamic dim ",
                              (long long)(kiln_expr_is_const(c->in[i].dims[d], &v) ? v : -1));
    return 0;
}

static int mbconv_shape(kiln_shape_ctx *c) {
    static const char *const names[] = {"X", "Wd", "Bd", "Wp", "Bp", "We", "Be"};
    static const int ranks[] = {4, 4, 1, 4, 1, 4, 1};
    /* 5 inputs, 7 with the expand conv; a fused residual may follow them */
    const int nin = c->nin >= 7 && c->in[IN_WE].dtype != KILN_DTYPE_UNDEFINED ? 7 : 5;
    if (c->nin < 5)
        return kiln_set_error(KILN_EINVAL, "kiln::mbconv: expected 5 or 7 inputs, found %d", c->nin);
    for (int i = 0; i < nin; i++) {
        if (c->in[i].dtype != KILN_DTYPE_F32 || c->in[i].ndim != ranks[i])
            return kiln_set_error(KILN_ETYPE, "kiln::mbconv: %s must be a rank-%d float32 tensor, found rank %d %s",
                                  names[i], ranks[i], c->in[i].ndim, kiln_dtype_name(c->in[i].dtype));
    }
    int64_t s[2], p[4], d[2], es[2], ep[4], Ce, M, KH, KW, C = -1;
    int rc = read_geo(c->attrs, s, p, d, es, ep);
    if (rc) return rc;
    if ((rc = check_dim(c, IN_WD, 0, -1, "Wd"))) return rc;
    kiln_expr_is_const(c->in[IN_WD].dims[0], &Ce);
    kiln_expr_is_const(c->in[IN_WD].dims[2], &KH);
    kiln_expr_is_const(c->in[IN_WD].dims[3], &KW);
    if ((rc = check_dim(c, IN_WD, 1, 1, "Wd")) || (rc = check_dim(c, IN_WD, 2, -1, "Wd")) ||
        (rc = check_dim(c, IN_WD, 3, -1, "Wd")) || (rc = check_dim(c, IN_BD, 0, Ce, "Bd")) ||
        (rc = check_dim(c, IN_WP, 0, -1, "Wp")) || (rc = check_dim(c, IN_WP, 1, Ce, "Wp")) ||
        (rc = check_dim(c, IN_WP, 2, 1, "Wp")) || (rc = check_dim(c, IN_WP, 3, 1, "Wp")))
        return rc;
    kiln_expr_is_const(c->in[IN_WD].dims[2], &KH);
    kiln_expr_is_const(c->in[IN_WD].dims[3], &KW);
    if (KH < 1 || KW < 1 || KH > 64 || KW > 64)
        return kiln_set_error(KILN_ESHAPE, "kiln::mbconv: depthwise kernel %lld x %lld, expected 1..64 each",
                              (long long)KH, (long long)KW);
    kiln_expr_is_const(c->in[IN_WP].dims[0], &M);
    if ((rc = check_dim(c, IN_BP, 0, M, "Bp"))) return rc;
    if (nin == 7) {
        if ((rc = check_dim(c, IN_WE, 0, Ce, "We")) || (rc = check_dim(c, IN_WE, 1, -1, "We")) ||
            (rc = check_dim(c, IN_WE, 2, -1, "We")) || (rc = check_dim(c, IN_WE, 3, -1, "We")) ||
            (rc = check_dim(c, IN_BE, 0, Ce, "Be")))
            return rc;
        kiln_expr_is_const(c->in[IN_WE].dims[1], &C);
    } else {
        C = Ce;
        if (es[0] != 1 || es[1] != 1 || ep[0] | ep[1] | ep[2] | ep[3])
            return kiln_set_error(KILN_EATTR, "kiln::mbconv: e_strides / e_pads given without an expand conv (We)");
    }
    int64_t xc;
    if (kiln_expr_is_const(c->in[IN_X].dims[1], &xc) && xc != C)
        return kiln_set_error(KILN_ESHAPE, "kiln::mbconv: X has %lld channels, the %s expects %lld", (long long)xc,
                              nin == 7 ? "expand conv (We)" : "depthwise conv (Wd)", (long long)C);
    kiln_desc *y = &c->out[0];
    y->dtype = KILN_DTYPE_F32;
    y->ndim = 4;
    y->dims[0] = c->in[IN_X].dims[0];
    y->dims[1] = c->in[IN_WP].dims[0];
    const kiln_expr *eh = c->in[IN_X].dims[2], *ew = c->in[IN_X].dims[3]; /* E's height and width */
    if (nin == 7) {
        int64_t kh, kw;
        kiln_expr_is_const(c->in[IN_WE].dims[2], &kh);
        kiln_expr_is_const(c->in[IN_WE].dims[3], &kw);
        if ((kh != 1 || kw != 1 || es[0] != 1 || es[1] != 1 || (ep[0] | ep[1] | ep[2] | ep[3]) != 0) &&
            (rc = fewc_fits(C, kh, kw)))
            return rc;
        eh = kiln__ops_pool_dim(c->x, eh, kh, es[0], ep[0] + ep[2], 1, 0);
        ew = kiln__ops_pool_dim(c->x, ew, kw, es[1], ep[1] + ep[3], 1, 0);
    }
    y->dims[2] = kiln__ops_pool_dim(c->x, eh, KH, s[0], p[0] + p[2], d[0], 0);
    y->dims[3] = kiln__ops_pool_dim(c->x, ew, KW, s[1], p[1] + p[3], d[1], 0);
    return 0;
}

/* One call's geometry and operands. */
typedef struct mb {
    int64_t N, C, Ce, M, H, W, OH, OW, KH, KW, s[2], p[4], d[2];
    int expand;
    float e_lo, e_hi, d_lo, d_hi;
    const float *x, *we, *be, *wd, *bd, *wp, *bp;
    const float *we_packed, *wp_packed;
    float *y;
    const kiln_call *c;
    int64_t rows; /* tactic 2: output rows per band */
    /* X's height and width (H, W are E's); fewc: the expand conv is a
     * dense KxK one (conv_fewc.h; fc.x is set per image) */
    int64_t XH, XW;
    int fewc;
    kiln__fewc fc;
    int direct; /* tactic 3: the 1x1 expand conv by kiln__fewc_pointwise */
    int split;  /* tactic 3 at x stride 2 over E rows of even width: E stored by column parity */
    /* tactic 4's packed weights (We, Wp as the GEMMs' B; Wd tap-major) */
    const float *we_b, *wp_b, *wd_cl;
} mb;

static const float *prepacked(const kiln_call *c, int i) {
    return c->prepacked && c->nin > i ? c->prepacked[i] : NULL;
}

static int make_mb(const kiln_call *c, mb *g) {
    memset(g, 0, sizeof *g);
    if (c->nin < 5) return kiln_set_error(KILN_EINVAL, "kiln::mbconv: %d inputs, expected 5 or 7", c->nin);
    int64_t es[2], ep[4];
    int rc = read_geo(c->attrs, g->s, g->p, g->d, es, ep);
    if (rc) return rc;
    const kiln_tensor *x = &c->in[IN_X], *wd = &c->in[IN_WD], *y = &c->out[0];
    g->expand = c->nin >= 7 && c->in[IN_WE].dtype != KILN_DTYPE_UNDEFINED;
    g->N = x->dims[0];
    g->C = x->dims[1];
    g->H = g->XH = x->dims[2];
    g->W = g->XW = x->dims[3];
    if (g->expand && c->in[IN_WE].ndim == 4) {
        const int64_t *k = c->in[IN_WE].dims + 2;
        g->fewc = k[0] != 1 || k[1] != 1 || es[0] != 1 || es[1] != 1 || (ep[0] | ep[1] | ep[2] | ep[3]) != 0;
        if (g->fewc && (rc = fewc_fits(g->C, k[0], k[1]))) return rc;
        if (g->fewc) {
            g->H = (g->XH + ep[0] + ep[2] - k[0]) / es[0] + 1;
            g->W = (g->XW + ep[1] + ep[3] - k[1]) / es[1] + 1;
            if (g->XH + ep[0] + ep[2] < k[0] || g->XW + ep[1] + ep[3] < k[1])
                return kiln_set_error(KILN_ESHAPE, "kiln::mbconv: input %lld x %lld is smaller than the expand "
                                      "kernel %lld x %lld with its pads", (long long)g->XH, (long long)g->XW,
                                      (long long)k[0], (long long)k[1]);
        }
    }
    g->Ce = wd->dims[0];
    g->KH = wd->dims[2];
    g->KW = wd->dims[3];
    g->M = c->in[IN_WP].dims[0];
    g->OH = y->dims[2];
    g->OW = y->dims[3];
    if (g->Ce != (g->expand ? c->in[IN_WE].dims[0] : g->C) || (g->expand && c->in[IN_WE].dims[1] != g->C) ||
        c->in[IN_WP].dims[1] != g->Ce || y->dims[1] != g->M)
        return kiln_set_error(KILN_ESHAPE, "kiln::mbconv: X has %lld channels, Wd %lld, Wp %lld x %lld, Y %lld",
                              (long long)g->C, (long long)g->Ce, (long long)g->M,
                              (long long)c->in[IN_WP].dims[1], (long long)y->dims[1]);
    if (g->KH < 1 || g->KH > 64 || g->N < 0 || g->H < 0 || g->W < 0 || g->OH < 1 || g->OW < 1)
        return kiln_set_error(KILN_ESHAPE, "kiln::mbconv: kernel height %lld, input %lld x %lld, output %lld x %lld",
                              (long long)g->KH, (long long)g->H, (long long)g->W, (long long)g->OH, (long long)g->OW);
    if (!kiln__dwrows_fits(g->s[1], g->KW))
        return kiln_set_error(KILN_EUNSUPPORTED, "kiln::mbconv: the depthwise rows kernel does not run here "
                              "(an AVX-512 build, x stride 1 or 2 and a kernel up to 32 wide)");
    g->e_lo = (float)kiln_attrs_float(c->attrs, "e_lo");
    g->e_hi = (float)kiln_attrs_float(c->attrs, "e_hi");
    g->d_lo = (float)kiln_attrs_float(c->attrs, "d_lo");
    g->d_hi = (float)kiln_attrs_float(c->attrs, "d_hi");
    g->x = x->data;
    g->wd = wd->data;
    g->bd = c->in[IN_BD].data;
    g->wp = c->in[IN_WP].data;
    g->bp = c->in[IN_BP].data;
    g->we = g->expand ? c->in[IN_WE].data : NULL;
    g->be = g->expand ? c->in[IN_BE].data : NULL;
    g->wp_packed = prepacked(c, IN_WP);
    g->we_packed = g->expand ? prepacked(c, IN_WE) : NULL;
    g->y = y->data;
    g->c = c;
    if (g->fewc) {
        const int64_t *k = c->in[IN_WE].dims + 2;
        kiln__fewc fc = {.C = g->C, .H = g->XH, .W = g->XW, .M = g->Ce, .OH = g->H, .OW = g->W, .KH = k[0],
                         .KW = k[1], .sy = es[0], .sx = es[1], .pt = ep[0], .pl = ep[1], .w = g->we, .bias = g->be,
                         .lo = g->e_lo, .hi = g->e_hi};
        g->fc = fc;
    }
    return 0;
}

/* sgemm `done` hook of the expand GEMM: clamp a finished block of E
 * (tactic 4: of E^T, adding Be by column first). */
typedef struct clamp_ud {
    float *e;
    int64_t ld;
    float lo, hi;
    const float *col_bias; /* NULL, or Be (tactic 4: the columns are channels) */
} clamp_ud;
static void clamp_done(void *ud, int64_t i0, int64_t i1, int64_t j0, int64_t n) {
    const clamp_ud *u = ud;
    const float *b = u->col_bias ? u->col_bias + j0 : NULL;
    for (int64_t i = i0; i < i1; i++) {
        float *r = u->e + i * u->ld + j0;
        for (int64_t j = 0; j < n; j++) { /* compares, not fminf: they vectorize */
            float v = b ? r[j] + b[j] : r[j];
            v = v < u->lo ? u->lo : v;
            r[j] = v > u->hi ? u->hi : v;
        }
    }
}

/* E rows [0, K) x n columns at e (row pitch ld) = clamp(We X + Be) for the
 * X columns at x (row pitch xld); serial or over exec. */
static void expand_gemm(const mb *g, const float *x, int64_t xld, int64_t n, float *e, int64_t ld, kiln_exec *exec) {
    clamp_ud cu = {e, ld, g->e_lo, g->e_hi, NULL};
    kiln__gemm gm = {.M = g->Ce, .N = n, .K = g->C, .a = g->we, .a_rs = g->C, .a_cs = 1, .alpha = 1.0f,
                     .b = x, .b_rs = xld, .b_cs = 1, .c = e, .ldc = ld, .bias_row = g->be,
                     .a_packed = g->we_packed};
    if (g->e_lo > -FLT_MAX || g->e_hi < FLT_MAX) {
        gm.done = clamp_done;
        gm.done_ud = &cu;
    }
    if (exec)
        kiln__sgemm(&gm, exec);
    else
        kiln__sgemm_serial(&gm);
}

/* The dense conv's rows: a row range of E at a time, per-thread scratch. */
typedef struct fewc_job {
    const kiln__fewc *fc;
    float *e;         /* E row iy0 */
    int64_t ld, iy0;
} fewc_job;
static void fewc_part(void *ud, int64_t b, int64_t e) {
    const fewc_job *j = ud;
    float *scratch = kiln__cpu_scratch(2, (size_t)kiln__fewc_scratch(j->fc));
    if (!scratch) {
        kiln__misuse("kiln::mbconv: out of memory for the expand conv's scratch");
        return;
    }
    kiln__fewc_rows(j->fc, j->iy0 + b, j->iy0 + e, j->e + b * j->fc->OW, j->ld, scratch);
}

/* E rows [iy0, iy1) of image xn into e (channel pitch ld): the 1x1 expand
 * GEMM or the dense conv; serial or over exec. */
static void expand_rows(const mb *g, const float *xn, int64_t iy0, int64_t iy1, float *e, int64_t ld,
                        kiln_exec *exec) {
    if (iy1 <= iy0) return;
    if (g->direct) { /* bands only: serial */
        kiln__fewc fc = {.C = g->C, .M = g->Ce, .bias = g->be, .lo = g->e_lo, .hi = g->e_hi,
                         .split = g->split ? (iy1 - iy0) * g->W / 2 : 0};
        kiln__fewc_pointwise(&fc, g->we_packed, xn + iy0 * g->W, g->XH * g->XW, (iy1 - iy0) * g->W, e, ld);
        return;
    }
    if (!g->fewc) {
        expand_gemm(g, xn + iy0 * g->W, g->H * g->W, (iy1 - iy0) * g->W, e, ld, exec);
        return;
    }
    kiln__fewc fc = g->fc;
    fc.x = xn;
    fewc_job j = {&fc, e, ld, iy0};
    if (exec)
        kiln_exec_parallel_for(exec, iy1 - iy0, 1, fewc_part, &j);
    else
        fewc_part(&j, 0, iy1 - iy0);
}

/* Y columns [0, n) at y (channel pitch plane) = Wp D + Bp, D's rows at d
 * (pitch ld; readable NR floats past its end), then the epilogue.  Few
 * output rows read D in place (b_off: K offsets, or NULL), as Conv does. */
static void project_gemm(const mb *g, const float *d, int64_t ld, int64_t n, float *y, int64_t plane,
                         int64_t *b_off, kiln_exec *exec) {
    kiln__ops_epi_rows eu = {g->c, y, plane, 0}; /* row i: output channel i */
    kiln__gemm gm = {.M = g->M, .N = n, .K = g->Ce, .a = g->wp, .a_rs = g->Ce, .a_cs = 1, .alpha = 1.0f,
                     .c = y, .ldc = plane, .bias_row = g->bp, .a_packed = g->wp_packed};
    if (b_off && g->M <= 64 && n >= 2 * kiln__sgemm_nr()) {
        for (int64_t k = 0; k < g->Ce; k++) b_off[k] = k * ld;
        gm.b_shift = d;
        gm.b_off = b_off;
    } else {
        gm.b = d;
        gm.b_rs = ld;
        gm.b_cs = 1;
    }
    if (g->c->epilogue) {
        gm.done = kiln__ops_epi_rows_done;
        gm.done_ud = &eu;
    }
    if (exec)
        kiln__sgemm(&gm, exec);
    else
        kiln__sgemm_serial(&gm);
}

/* The depthwise step reading planes of H rows at x (pitch xs; the rows'
 * first is input row iy0) into output rows [oy0, oy1) at y (pitch ys). */
static kiln__dwrows dw_params(const mb *g, const float *x, int64_t H, int64_t xs, int64_t iy0, float *y,
                              int64_t ys, int64_t oy0) {
    kiln__dwrows p = {.N = 1, .C = g->Ce, .mult = 1, .H = H, .W = g->W, .OH = g->OH, .OW = g->OW,
                      .KH = g->KH, .KW = g->KW, .sy = g->s[0], .sx = g->s[1], .dy = g->d[0], .dx = g->d[1],
                      .pt = g->p[0] + iy0, .pl = g->p[1], .x = x, .w = g->wd, .bias = g->bd, .y = y,
                      .xs = xs, .ys = ys, .oy_base = oy0, .clamp = g->d_lo > -FLT_MAX || g->d_hi < FLT_MAX,
                      .lo = g->d_lo, .hi = g->d_hi};
    return p;
}

/* ------------------------------------------------------------ tactic 1 */

/* Floats from the start of D to the project GEMM's offsets (D, the NR
 * floats the in-place GEMM may read past it, rounded up to int64_t). */
static int64_t offsets_at(int64_t d_floats) { return (d_floats + kiln__sgemm_nr() + 1) & ~(int64_t)1; }

/* Floats E takes before D (D starts 64-byte aligned like the scratch). */
static int64_t e_floats(const mb *g, int64_t cols) { return g->expand ? (g->Ce * cols + 15) & ~(int64_t)15 : 0; }

static size_t whole_floats(const mb *g) {
    return (size_t)(e_floats(g, g->H * g->W) + offsets_at(g->Ce * g->OH * g->OW) + 2 * g->Ce);
}

static void dw_planes(void *ud, int64_t b, int64_t e) {
    const kiln__dwrows *p = ud;
    kiln__dwrows_band(p, 0, b, e, 0, p->OH);
}

static int run_whole(const mb *g, float *ws) {
    float *e = ws, *d = ws + e_floats(g, g->H * g->W);
    int64_t *b_off = (int64_t *)(d + offsets_at(g->Ce * g->OH * g->OW));
    int64_t isp = g->H * g->W, osp = g->OH * g->OW;
    for (int64_t n = 0; n < g->N; n++) {
        const float *xn = g->x + n * g->C * g->XH * g->XW;
        if (g->expand) expand_rows(g, xn, 0, g->H, e, isp, g->c->exec);
        kiln__dwrows p = dw_params(g, g->expand ? e : xn, g->H, isp, 0, d, osp, 0);
        kiln_exec_parallel_for(g->c->exec, g->Ce, 1, dw_planes, &p);
        project_gemm(g, d, osp, osp, g->y + n * g->M * osp, osp, b_off, g->c->exec);
    }
    return 0;
}

/* ------------------------------------------------------------ tactic 4 */

/* E^T, D^T and Y^T, each 64-byte aligned. */
static size_t cl_floats(const mb *g) {
    return (size_t)(((g->H * g->W * g->Ce + 15) & ~(int64_t)15) + ((g->OH * g->OW * g->Ce + 15) & ~(int64_t)15) +
                    g->OH * g->OW * g->M);
}

/* The project GEMM's `done` hook: a finished block of Y^T (rows: pixels,
 * columns: output channels) into Y's planes with Bp, then the epilogue on
 * those channels' pixels. */
typedef struct cl_y_ud {
    const float *yt, *bias;
    int64_t ld;
    kiln__ops_epi_rows eu; /* y, plane */
} cl_y_ud;
static void cl_y_done(void *ud, int64_t i0, int64_t i1, int64_t j0, int64_t n) {
    const cl_y_ud *u = ud;
    for (int64_t j = j0; j < j0 + n; j++) {
        float *yr = u->eu.y + j * u->eu.plane;
        const float *t = u->yt + j, b = u->bias[j];
        for (int64_t i = i0; i < i1; i++) yr[i] = t[i * u->ld] + b;
    }
    if (u->eu.c->epilogue) kiln__ops_epi_rows_done((void *)&u->eu, j0, j0 + n, i0, i1 - i0);
}

typedef struct cl_dw_job {
    const kiln__dwcl *p;
} cl_dw_job;
static void cl_dw_rows(void *ud, int64_t b, int64_t e) { kiln__dwcl_rows(((const cl_dw_job *)ud)->p, b, e); }

static int run_cl(const mb *g, float *ws) {
    const int64_t isp = g->H * g->W, osp = g->OH * g->OW;
    float *et = ws, *dt = et + ((isp * g->Ce + 15) & ~(int64_t)15), *yt = dt + ((osp * g->Ce + 15) & ~(int64_t)15);
    kiln_exec *exec = g->c->exec;
    for (int64_t n = 0; n < g->N; n++) {
        const float *xn = g->x + n * g->C * isp;
        clamp_ud eu = {et, g->Ce, g->e_lo, g->e_hi, g->be};
        kiln__gemm ge = {.M = isp, .N = g->Ce, .K = g->C, .a = xn, .a_rs = 1, .a_cs = isp, .alpha = 1.0f,
                         .b = g->we, .b_rs = 1, .b_cs = g->C, .b_packed = g->we_b, .c = et, .ldc = g->Ce,
                         .done = clamp_done, .done_ud = &eu};
        kiln__sgemm(&ge, exec);
        kiln__dwcl p = {.C = g->Ce, .H = g->H, .W = g->W, .OH = g->OH, .OW = g->OW, .KH = g->KH, .KW = g->KW,
                        .sy = g->s[0], .sx = g->s[1], .dy = g->d[0], .dx = g->d[1], .pt = g->p[0], .pl = g->p[1],
                        .x = et, .w = g->wd_cl, .bias = g->bd, .y = dt, .ldx = g->Ce, .ldy = g->Ce, .lo = g->d_lo,
                        .hi = g->d_hi};
        cl_dw_job j = {&p};
        kiln_exec_parallel_for(exec, g->OH, 1, cl_dw_rows, &j);
        cl_y_ud yu = {yt, g->bp, g->M, {g->c, g->y + n * g->M * osp, osp, 0}};
        kiln__gemm gp = {.M = osp, .N = g->M, .K = g->Ce, .a = dt, .a_rs = g->Ce, .a_cs = 1, .alpha = 1.0f,
                         .b = g->wp, .b_rs = 1, .b_cs = g->Ce, .b_packed = g->wp_b, .c = yt, .ldc = g->M,
                         .done = cl_y_done, .done_ud = &yu};
        kiln__sgemm(&gp, exec);
    }
    return 0;
}

/* ------------------------------------------------------------ tactic 5 */

/* E and D in NCHW16C, E's start and D's 64-byte aligned. */
static int64_t e16_floats(const mb *g) { return (g->Ce * g->H * g->W + 15) & ~(int64_t)15; }
static size_t b16_floats(const mb *g) { return (size_t)(e16_floats(g) + g->Ce * g->OH * g->OW); }

/* The depthwise step over E's blocks of 16 channels. */
typedef struct dw16_job {
    kiln__dwcl p; /* block 0's pointers */
    int64_t xs, ys, ws; /* floats per block of E, D and the packed Wd */
    int64_t nblk;       /* E's blocks of 16 channels */
} dw16_job;
/* Output rows [oy0, oy1) of E's block k. */
static void dw16_block(const dw16_job *j, int64_t k, int64_t oy0, int64_t oy1) {
    kiln__dwcl p = j->p;
    p.x += k * j->xs;
    p.y += k * j->ys;
    p.w += k * j->ws;
    p.bias += k * 16;
    kiln__dwcl_rows(&p, oy0, oy1);
}

static void dw16_blocks(void *ud, int64_t b, int64_t e) {
    const dw16_job *j = ud;
    for (int64_t k = b; k < e; k++) dw16_block(j, k, 0, j->p.OH);
}

/* The depthwise step by output rows [b, e), all of E's blocks in each
 * (with several threads: each thread's rows are the pixels its expand
 * share wrote, and the pixels its project share reads). */
static void dw16_rowunits(void *ud, int64_t b, int64_t e) {
    const dw16_job *j = ud;
    for (int64_t k = 0; k < j->nblk; k++) dw16_block(j, k, b, e);
}

/* The depthwise step of E (wd16: Wd packed per block) into D. */
static dw16_job dw16_make(const mb *g, const float *e, const float *wd16, float *d) {
    const int64_t isp = g->H * g->W, osp = g->OH * g->OW;
    return (dw16_job){{.C = 16, .H = g->H, .W = g->W, .OH = g->OH, .OW = g->OW, .KH = g->KH, .KW = g->KW,
                       .sy = g->s[0], .sx = g->s[1], .dy = g->d[0], .dx = g->d[1], .pt = g->p[0], .pl = g->p[1],
                       .x = e, .w = wd16, .bias = g->bd, .y = d, .ldx = 16, .ldy = 16, .lo = g->d_lo, .hi = g->d_hi},
                      16 * isp, 16 * osp, 16 * g->KH * g->KW, g->Ce / 16};
}

static int run_16c(const mb *g, const float *wd16, float *ws) {
    const kiln_call *c = g->c;
    const int64_t isp = g->H * g->W, osp = g->OH * g->OW;
    const int threads = c->exec ? kiln_exec_threads(c->exec) : 1;
    /* With several threads all three steps split the pixels (the
     * GEMMs' pixel tiles outer, the depthwise step by rows): a thread then
     * reads the X, E and D pixels it wrote itself (all of E's channels
     * for its rows, plus one halo row), and every thread reads all of We
     * and Wp.  Split by channel blocks (the GEMMs' rule where M > P, and
     * the depthwise step by blocks), the project read half of D, and the
     * next block's expand half of X, from the other core: on the 2-vCPU
     * VM with its vCPUs on two dies (core round trip ~400 ns) MobileNetV2
     * at 2 threads -4.2..-4.9% (run minima, ab_libs both orders), the
     * 14x14 blocks -6..-9%; on one die (~90 ns) +1.3% (the weights read
     * twice). */
    const int bypix = threads > 1;
    float *e = ws, *d = ws + e16_floats(g);
    kiln__pw16c pp = {.C = g->Ce, .M = g->M, .P = osp, .x = d, .wp = g->wp_packed, .bias = g->bp,
                      .wmajor = bypix ? 0 : kiln__d16c_wmajor(g->Ce, g->M, 1, osp, threads)};
    const int fused = kiln__16c_fused_chain(c, &pp.res, &pp.relu);
    const float *res = pp.res;
    for (int64_t n = 0; n < g->N; n++) {
        kiln__pw16c pe = {.C = g->C, .M = g->Ce, .P = isp, .x = g->x + n * g->C * isp, .wp = g->we_packed,
                          .bias = g->be, .y = e, .clamp = g->e_lo > -FLT_MAX || g->e_hi < FLT_MAX, .lo = g->e_lo,
                          .hi = g->e_hi, .wmajor = bypix ? 0 : kiln__d16c_wmajor(g->C, g->Ce, 1, isp, threads)};
        kiln__pw16c_exec(c, &pe, 1, 0, 0, 1);
        dw16_job j = dw16_make(g, e, wd16, d);
        if (bypix)
            kiln_exec_parallel_for(c->exec, g->OH, 1, dw16_rowunits, &j);
        else
            kiln_exec_parallel_for(c->exec, g->Ce / 16, 1, dw16_blocks, &j);
        pp.y = g->y + n * g->M * osp;
        pp.res = res ? res + n * g->M * osp : NULL;
        kiln__pw16c_exec(c, &pp, 1, 0, 0, fused);
    }
    return 0;
}

/* Tactic 6: thread ith's share of the hidden channels (in blocks of 32,
 * We's packing) through the three steps, its project into Y (ith 0) or
 * its partial. */
typedef struct hid_job {
    const mb *g;
    const float *x, *wd16; /* this image's X */
    float *e, *d, *y, *part;
    int nth;
} hid_job;

static void hid_share(const hid_job *h, int t) {
    const mb *g = h->g;
    const int64_t isp = g->H * g->W, osp = g->OH * g->OW, nb = (g->Ce + 31) / 32;
    /* (h->nth <= nb: no share is empty) */
    const int64_t m0 = t * nb / h->nth * 32, e1 = (t + 1) * nb / h->nth * 32, m1 = e1 < g->Ce ? e1 : g->Ce;
    kiln__pw16c pe = {.C = g->C, .M = m1 - m0, .P = isp, .x = h->x, .wp = g->we_packed + m0 * g->C,
                      .bias = g->be ? g->be + m0 : NULL, .y = h->e + m0 * isp,
                      .clamp = g->e_lo > -FLT_MAX || g->e_hi < FLT_MAX, .lo = g->e_lo, .hi = g->e_hi,
                      .wmajor = kiln__d16c_wmajor(g->C, m1 - m0, 1, isp, 1)};
    kiln__pw16c_run(&pe, 0, kiln__pw16c_units(&pe));
    const dw16_job j = dw16_make(g, h->e, h->wd16, h->d);
    for (int64_t k = m0 / 16; k < m1 / 16; k++) dw16_block(&j, k, 0, g->OH);
    kiln__pw16c pp = {.C = g->Ce, .M = g->M, .P = osp, .x = h->d, .wp = g->wp_packed, .k0 = m0, .k1 = m1,
                      .bias = t ? NULL : g->bp, .y = t ? h->part + (t - 1) * g->M * osp : h->y,
                      .wmajor = kiln__d16c_wmajor(m1 - m0, g->M, 1, osp, 1)};
    kiln__pw16c_run(&pp, 0, kiln__pw16c_units(&pp));
}

/* Task ith of ntasks: shares ith, ith + ntasks, ... (one each, unless the
 * pool ran the job serially). */
static void hid_task(void *ud, int ith, int ntasks) {
    const hid_job *h = ud;
    for (int t = ith; t < h->nth; t += ntasks) hid_share(h, t);
}

static int run_16ch(const mb *g, const float *wd16, float *ws) {
    const kiln_call *c = g->c;
    const int64_t nb = (g->Ce + 31) / 32, osp = g->OH * g->OW;
    int nth = c->exec ? kiln_exec_threads(c->exec) : 1;
    if (nth > nb) nth = (int)nb;
    if (nth < 2) return run_16c(g, wd16, ws); /* (the same steps, unsplit) */
    float *part = kiln__cpu_scratch(1, (size_t)(nth - 1) * (size_t)(g->M * osp));
    if (!part) return kiln_set_error(KILN_ENOMEM, "kiln::mbconv tactic 6: out of memory for its partial sums");
    kiln__pw16c sum = {.M = g->M, .P = osp};
    const int fused = kiln__16c_fused_chain(c, &sum.res, &sum.relu);
    const float *res = sum.res;
    for (int64_t n = 0; n < g->N; n++) {
        hid_job h = {.g = g, .x = g->x + n * g->C * g->H * g->W, .wd16 = wd16, .e = ws, .d = ws + e16_floats(g),
                     .y = g->y + n * g->M * osp, .part = part, .nth = nth};
        kiln_exec_parallel(c->exec, nth, hid_task, &h);
        sum.y = h.y;
        sum.res = res ? res + n * g->M * osp : NULL;
        kiln__pw16c_sum_parts(c, &sum, part, nth - 1, fused);
    }
    return 0;
}

/* Does call c fit tactic 5 or 6 (formats_fn offers them; an engine may
 * name them anywhere)? */
static int fits_16c(const kiln_call *c, const mb *g) {
    return g->expand && !g->fewc && g->C % 16 == 0 && g->Ce % 16 == 0 && g->M % 16 == 0 &&
           g->KH * g->KW <= KILN__DWCL_TAPS && c->in[IN_X].format == KILN_FORMAT_NCHW16C &&
           c->out[0].format == KILN_FORMAT_NCHW16C && g->we_packed && g->wp_packed && prepacked(c, IN_WD);
}

/* ------------------------------------------------------------ tactic 2 */

/* Input rows [*iy0, *iy1) that output rows [oy0, oy1) read. */
static void band_inputs(const mb *g, int64_t oy0, int64_t oy1, int64_t *iy0, int64_t *iy1) {
    int64_t a = oy0 * g->s[0] - g->p[0], b = (oy1 - 1) * g->s[0] - g->p[0] + (g->KH - 1) * g->d[0] + 1;
    *iy0 = a < 0 ? 0 : a > g->H ? g->H : a;
    *iy1 = b > g->H ? g->H : b < *iy0 ? *iy0 : b;
}

/* Floats of one band's scratch: E rows, D rows, slack and the offsets. */
static size_t band_floats(const mb *g, int64_t rows) {
    int64_t in_rows = (rows - 1) * g->s[0] + (g->KH - 1) * g->d[0] + 1;
    return (size_t)(e_floats(g, in_rows * g->W) + offsets_at(g->Ce * rows * g->OW) + 2 * g->Ce);
}

/* Output rows per band: the fewest bands whose E and D fit in ~1 MB (one
 * core's L2 holds them beside the weights), in a multiple of the thread
 * count when there is more than one image row to share (the threads then
 * get equal work: 3 bands on 2 threads leave one idle a third of the time).
 * A whole plane is one band up to WHOLE_BAND bytes: no input rows expanded
 * twice and one project GEMM over the plane.  MobileNetV2's 28x28 blocks
 * (features.5-6, E + D 1.25 MB) at 1 thread: -0.015..-0.020 ms a block
 * against two bands of 14 rows (in-network A/B, both orders); a 1.5 MB
 * bound for every band instead lost on features.2 (+0.06..+0.08 ms with 14
 * output rows a band for 8). */
#define WHOLE_BAND ((size_t)3 << 19)
static int64_t band_rows(const mb *g, int threads) {
    int64_t step = g->N % threads == 0 ? 1 : threads, nb = step, r = g->OH;
    if (step == 1 && band_floats(g, g->OH) * sizeof(float) <= WHOLE_BAND) return g->OH;
    for (; nb < g->OH; nb += step) {
        r = (g->OH + nb - 1) / nb;
        if (band_floats(g, r) * sizeof(float) <= ((size_t)1 << 20)) break;
    }
    return nb < g->OH ? r : 1;
}

static void bands(void *ud, int64_t b, int64_t e) {
    const mb *g = ud;
    int64_t nb = (g->OH + g->rows - 1) / g->rows, osp = g->OH * g->OW;
    float *ws = kiln__cpu_scratch(1, band_floats(g, g->rows));
    if (!ws) {
        kiln__misuse("kiln::mbconv: out of memory for a band's scratch (%zu floats)", band_floats(g, g->rows));
        return;
    }
    for (int64_t u = b; u < e; u++) {
        int64_t n = u / nb, oy0 = u % nb * g->rows, oy1 = oy0 + g->rows < g->OH ? oy0 + g->rows : g->OH;
        int64_t iy0, iy1;
        band_inputs(g, oy0, oy1, &iy0, &iy1);
        const float *xn = g->x + n * g->C * g->XH * g->XW;
        int64_t in = (iy1 - iy0) * g->W, out = (oy1 - oy0) * g->OW;
        float *eb = ws, *d = ws + e_floats(g, in);
        int64_t *b_off = (int64_t *)(d + offsets_at(g->Ce * out));
        kiln__dwrows p;
        if (g->expand) {
            expand_rows(g, xn, iy0, iy1, eb, in, NULL);
            p = dw_params(g, eb, iy1 - iy0, in, iy0, d, out, oy0);
            p.phase = g->split ? in / 2 : 0;
        } else {
            p = dw_params(g, xn, g->H, g->H * g->W, 0, d, out, oy0);
        }
        kiln__dwrows_band(&p, 0, 0, g->Ce, oy0, oy1);
        project_gemm(g, d, out, out, g->y + n * g->M * osp + oy0 * g->OW, osp, b_off, NULL);
    }
}

/* Thread ith runs the ith contiguous share of the bands (kiln_exec_parallel
 * binds task i to thread i), not bands claimed in turn: a thread then
 * reads the rows of X that it wrote as the previous row-band layer's same
 * share of the image, in its own L2, where bands claimed in turn
 * alternate cores and read X's rows from the other core's cache. */
static void bands_task(void *ud, int ith, int nth) {
    const mb *g = ud;
    int64_t b, e;
    kiln_split_range(g->N * ((g->OH + g->rows - 1) / g->rows), ith, nth, &b, &e);
    if (e > b) bands(ud, b, e);
}

/* ------------------------------------------------------------ the op */

/* The tactic a call runs: auto (0) takes row bands where there are at
 * least two per thread, else whole tensors. */
static int pick(const kiln_call *c, const mb *g) {
    if (c->tactic >= T_WHOLE && c->tactic <= T_16CH) return c->tactic;
    int threads = kiln_exec_threads(c->exec);
    int64_t r = band_rows(g, threads);
    return g->N * ((g->OH + r - 1) / r) >= 2 * (int64_t)threads ? T_ROWS : T_WHOLE;
}

/* Tactic 1's workspace (auto may take it at run time: the thread count is
 * not known here). */
static size_t mbconv_ws(const kiln_call *c) {
    mb g;
    if (c->tactic == T_ROWS || c->tactic == T_DIRECT || make_mb(c, &g)) return 0;
    if (c->tactic == T_16C || c->tactic == T_16CH) return b16_floats(&g) * sizeof(float);
    size_t f = whole_floats(&g);
    if (c->tactic == T_CL && cl_floats(&g) > f) f = cl_floats(&g); /* tactic 1 runs where 4 cannot */
    return f * sizeof(float);
}

static int mbconv_impl(const kiln_call *c) {
    mb g;
    if (kiln_tensor_numel(&c->out[0]) == 0) return 0;
    int rc = make_mb(c, &g);
    if (rc) return rc;
    int t = pick(c, &g);
    if (t == T_16C || t == T_16CH) {
        if (!fits_16c(c, &g))
            return kiln_set_error(KILN_EUNSUPPORTED, "kiln::mbconv tactic %d: needs X and Y in NCHW16C, a 1x1 expand "
                                  "conv, C, Ce and M multiples of 16 (found %lld, %lld, %lld) and weights packed at "
                                  "build", t, (long long)g.C, (long long)g.Ce, (long long)g.M);
        if (!c->workspace || c->workspace_size < b16_floats(&g) * sizeof(float))
            return kiln_set_error(KILN_EINTERNAL, "kiln::mbconv: workspace of %zu bytes, expected %zu",
                                  c->workspace_size, b16_floats(&g) * sizeof(float));
        return t == T_16C ? run_16c(&g, prepacked(c, IN_WD), c->workspace)
                          : run_16ch(&g, prepacked(c, IN_WD), c->workspace);
    }
    if (t == T_CL) {
        /* its packed weights are B panels, not the A panels the others read */
        g.we_b = g.we_packed;
        g.wp_b = g.wp_packed;
        g.wd_cl = prepacked(c, IN_WD);
        g.we_packed = g.wp_packed = NULL;
        if (g.expand && !g.fewc && g.we_b && g.wp_b && g.wd_cl && g.KH * g.KW <= KILN__DWCL_TAPS) {
            if (!c->workspace || c->workspace_size < cl_floats(&g) * sizeof(float))
                return kiln_set_error(KILN_EINTERNAL, "kiln::mbconv: workspace of %zu bytes, expected %zu",
                                      c->workspace_size, cl_floats(&g) * sizeof(float));
            return run_cl(&g, c->workspace);
        }
        t = T_WHOLE; /* weights not packed (not constant): tactic 1, packing as it goes */
    }
    if (t == T_WHOLE) {
        if (!c->workspace || c->workspace_size < whole_floats(&g) * sizeof(float))
            return kiln_set_error(KILN_EINTERNAL, "kiln::mbconv: workspace of %zu bytes, expected %zu",
                                  c->workspace_size, whole_floats(&g) * sizeof(float));
        return run_whole(&g, c->workspace);
    }
    /* tactic 3 where formats_fn offers it; elsewhere it runs as tactic 2 */
    g.direct = t == T_DIRECT && g.expand && !g.fewc && g.C <= DIRECT_MAX_C && g.we_packed;
    g.split = g.direct && g.s[1] == 2 && g.W % 2 == 0;
    const int threads = kiln_exec_threads(c->exec);
    g.rows = band_rows(&g, threads);
    kiln_exec_parallel(c->exec, threads, bands_task, &g);
    return 0;
}

/* Input `input` of c as a weight the prepacks read (a build-time constant,
 * F32, rank 4, dense), or NULL. */
static const kiln_tensor *const_w(const kiln_call *c, int input) {
    const kiln_tensor *w = input < c->nin ? &c->in[input] : NULL;
    return w && w->data && w->dtype == KILN_DTYPE_F32 && w->ndim == 4 && kiln__ops_dense(w) ? w : NULL;
}

/* Tactic 4's packed weights: We (Ce x C) and Wp (M x Ce) transposed, as
 * the GEMMs' B operands, and Wd tap-major. */
static int prepack_cl(const kiln_call *c, int input, void *dst, size_t want, size_t *size) {
    const kiln_tensor *w = input == IN_WP || input == IN_WE || input == IN_WD ? const_w(c, input) : NULL;
    if (!w) return 0;
    const int64_t rows = w->dims[0], cols = w->dims[1] * w->dims[2] * w->dims[3];
    if (input != IN_WD && cols != w->dims[1]) return 0; /* a KxK expand conv runs conv_fewc.c */
    size_t bytes = (size_t)(input == IN_WD ? rows * cols : (int64_t)kiln__sgemm_pack_b_floats(cols, rows)) *
                   sizeof(float);
    if (!dst) {
        *size = bytes;
        return 0;
    }
    if (want != bytes)
        return kiln_set_error(KILN_EINTERNAL, "kiln::mbconv prepack: %zu bytes asked, %zu given", bytes, want);
    if (input == IN_WD) {
        kiln__dwcl_pack(w->data, rows, w->dims[2], w->dims[3], dst);
    } else { /* B (k, j) = W[j][k]: K = W's columns, N = its rows */
        kiln__gemm gm = {.K = cols, .N = rows, .b = w->data, .b_rs = 1, .b_cs = cols, .alpha = 1.0f};
        kiln__sgemm_pack_b(&gm, dst);
    }
    *size = bytes;
    return 0;
}

/* Tactic 5's packed weights: We and Wp in Conv tactic 13's layout
 * (kiln__pw16c_pack), Wd per block of 16 channels tap-major. */
static int prepack_16c(const kiln_call *c, int input, void *dst, size_t want, size_t *size) {
    const kiln_tensor *w = input == IN_WP || input == IN_WE || input == IN_WD ? const_w(c, input) : NULL;
    if (!w || w->dims[0] % 16) return 0;
    const int64_t rows = w->dims[0], cols = w->dims[1], taps = w->dims[2] * w->dims[3];
    if (input != IN_WD && (taps != 1 || cols % 16)) return 0;
    size_t bytes = (size_t)(input == IN_WD ? rows * taps : kiln__pw16c_packed(rows, cols)) * sizeof(float);
    if (!dst) {
        *size = bytes;
        return 0;
    }
    if (want != bytes)
        return kiln_set_error(KILN_EINTERNAL, "kiln::mbconv prepack: %zu bytes asked, %zu given", bytes, want);
    if (input == IN_WD)
        for (int64_t b = 0; b < rows / 16; b++)
            kiln__dwcl_pack((const float *)w->data + b * 16 * taps, 16, w->dims[2], w->dims[3],
                            (float *)dst + b * 16 * taps);
    else
        kiln__pw16c_pack(w->data, rows, cols, dst);
    *size = bytes;
    return 0;
}

/* kiln_quick_op.prepack: We and Wp as the SGEMM's packed A operand; We
 * for tactic 3 in kiln__fewc_pointwise's layout instead. */
static int mbconv_prepack(const kiln_call *c, int input, void *dst, size_t *size) {
    size_t want = *size;
    *size = 0;
    if (c->tactic == T_CL) return prepack_cl(c, input, dst, want, size);
    if (c->tactic == T_16C || c->tactic == T_16CH) return prepack_16c(c, input, dst, want, size);
    const kiln_tensor *w = input == IN_WP || input == IN_WE ? const_w(c, input) : NULL;
    if (!w || w->dims[2] * w->dims[3] != 1) return 0; /* a KxK expand conv runs conv_fewc.c */
    const int direct = input == IN_WE && c->tactic == T_DIRECT && w->dims[1] <= DIRECT_MAX_C; /* as impl's */
    size_t bytes = (size_t)(direct ? kiln__fewc_pointwise_packed(w->dims[0], w->dims[1])
                                   : (int64_t)kiln__sgemm_pack_a_floats(w->dims[0], w->dims[1])) * sizeof(float);
    if (!dst) {
        *size = bytes;
        return 0;
    }
    if (want != bytes)
        return kiln_set_error(KILN_EINTERNAL, "kiln::mbconv prepack: %zu bytes asked, %zu given", bytes, want);
    kiln__gemm gm = {.M = w->dims[0], .K = w->dims[1], .a = w->data, .a_rs = w->dims[1], .a_cs = 1, .alpha = 1.0f};
    if (direct)
        kiln__fewc_pointwise_pack(w->data, w->dims[0], w->dims[1], dst);
    else
        kiln__sgemm_pack_a(&gm, dst);
    *size = bytes;
    return 0;
}

/* kiln_quick_op.formats_fn: tactics 1 and 2, 3 where the block has a
 * 1x1 expand conv of at most DIRECT_MAX_C input channels, 4 where it has
 * one over a constant plane of at most CL_MAX_HW pixels whose output
 * plane has at most CL_MAX_OHW; in a row of its own (X and Y NCHW16C)
 * tactic 5, and 6 in builds of several threads.
 *
 * Where the block has an expand conv, builds leave tactic 1 out (engines
 * that chose it still load and run it), except where tactic 4 competes
 * with it (small planes, more than DIRECT_MAX_C input channels).  Per-
 * tactic minima of repeated MobileNetV2 builds: tactic 1 lost to tactic 3
 * in every block that has both (and in ppocr_cls), at 1 thread by 1-45%
 * and at 2 threads by 25-100%; to tactic 2 on the stem block by 20% / 40%
 * and on the 96-channel 14x14 blocks by 0% / 13%.  Against tactic 4 on
 * the 7x7 blocks (features.15-17) it now wins, by 0.02-0.04 ms a block at 1
 * and 2 threads (session 10, forced-tactic A/B both ways round), and ties
 * on the 14x14 -> 7x7 one.  So where tactic 4 competes with tactic 1
 * (small planes, a wide expand) builds offer one candidate: at stride 1
 * (7x7 in, 7x7 out) tactic 1, which in the network beat tactic 4 there by
 * 0.00-0.04 ms a block at 1 and 2 threads and tactic 2 (one band at 1
 * thread: the same steps) by 0.02-0.04 at 2 threads, tied at 1; at stride 2
 * (14x14 -> 7x7) tactic 2, ahead of tactic 4 by 0.01-0.02 ms at 1 thread
 * in six runs of six and level or ahead at 2, and of tactic 1 by 0.01-0.03
 * (session 11, forced-tactic A/B both ways round).  The builder's isolated
 * timings put tactic 4 ahead of both by 5-12% at 1 thread (at load 2-4;
 * perhaps because its samples find the block's 1-2 MB of packed weights in
 * L2, where the network's layers do not: not verified), so it picked
 * tactic 4 there in most builds.  Elsewhere tactic 1 stays out because a
 * 2-thread build on a loaded machine times each candidate with about one
 * core, where the whole-tensor steps come within noise of the bands:
 * main's builds at load 1.5-2.5 picked tactic 1 for the stem
 * block, features.5-6, 8-11 or 12-13 in most runs.  Without an expand conv
 * it stays a candidate: it won PP-OCR det's first block at 1 thread. */
static int mbconv_formats_fn(const kiln_shape_ctx *c, kiln_combo *out, int max) {
    int64_t s[2], p[4], d[2], es[2] = {0, 0}, ep[4] = {0, 0, 0, 0}, C = -1, kh = -1, kw = -1;
    if (max < 1) return 0;
    kiln_combo k = {"FP32", NULL, {T_WHOLE, T_ROWS}};
    const int expand = c->nin >= 7 && c->in[IN_WE].dtype == KILN_DTYPE_F32 && c->in[IN_WE].ndim == 4 &&
                       !read_geo(c->attrs, s, p, d, es, ep) && kiln_expr_is_const(c->in[IN_WE].dims[1], &C) &&
                       kiln_expr_is_const(c->in[IN_WE].dims[2], &kh) && kiln_expr_is_const(c->in[IN_WE].dims[3], &kw);
    /* a 1x1 expand conv (not a stem's), a depthwise kernel conv_dwcl.c takes */
    const int pw = expand && kh == 1 && kw == 1 && es[0] == 1 && es[1] == 1 && !(ep[0] | ep[1] | ep[2] | ep[3]);
    int64_t h, w, KH, KW;
    const int dwcl = kiln_expr_is_const(c->in[IN_WD].dims[2], &KH) && kiln_expr_is_const(c->in[IN_WD].dims[3], &KW) &&
                     KH * KW <= KILN__DWCL_TAPS;
    if (pw && C <= DIRECT_MAX_C) k.tactics[2] = T_DIRECT;
    int cl = 0;
    if (pw && dwcl && kiln_expr_is_const(c->in[IN_X].dims[2], &h) && kiln_expr_is_const(c->in[IN_X].dims[3], &w) &&
        h * w <= CL_MAX_HW) {
        int64_t oh = h + p[0] + p[2] - d[0] * (KH - 1) - 1, ow = w + p[1] + p[3] - d[1] * (KW - 1) - 1;
        if ((cl = oh >= 0 && ow >= 0 && (oh / s[0] + 1) * (ow / s[1] + 1) <= CL_MAX_OHW))
            k.tactics[k.tactics[2] ? 3 : 2] = T_CL;
    }
    if (expand && !(cl && C > DIRECT_MAX_C) && kiln__shape_ctx_building(c)) /* tactic 1 out: see above */
        memmove(k.tactics, k.tactics + 1, sizeof k.tactics - sizeof k.tactics[0]);
    if (cl && C > DIRECT_MAX_C && kiln__shape_ctx_building(c)) { /* one candidate: see above */
        memset(k.tactics, 0, sizeof k.tactics);
        k.tactics[0] = s[0] == 1 && s[1] == 1 ? T_WHOLE : T_ROWS;
    }
    out[0] = k;
    int64_t Ce, M;
    if (max > 1 && pw && dwcl && kiln_expr_is_const(c->in[IN_WD].dims[0], &Ce) &&
        kiln_expr_is_const(c->in[IN_WP].dims[0], &M) && C % 16 == 0 && Ce % 16 == 0 && M % 16 == 0 &&
        kiln__dwrows_fits(1, 3) && kiln__shape_ctx_cpu_blocked(c)) { /* tactic 5's row: X and Y NCHW16C */
        kiln_combo row = {"FP32", "NCHW16C, LINEAR, LINEAR, LINEAR, LINEAR, LINEAR, LINEAR, NCHW16C", {T_16C}};
        if (kiln__shape_ctx_build_threads(c) != 1) row.tactics[1] = T_16CH; /* (at 1 thread 6 is 5) */
        out[1] = row;
        return 2;
    }
    return 1;
}

static const kiln_quick_op mbconv_op = {
    .ns = "kiln", .name = "mbconv", .version = 1, .min_inputs = 5, .max_inputs = 7, .num_outputs = 1,
    .attrs = mbconv_attrs, .shape = mbconv_shape, .impl = mbconv_impl, .formats_fn = mbconv_formats_fn,
    .workspace = mbconv_ws, .prepack = mbconv_prepack,
    .accepts_epilogue = 2, /* the project GEMM per finished tile; tactic 5 per pixel (16c) */
    .doc = "MobileNetV2 block: 1x1 expand + clamp, depthwise + clamp, 1x1 project (row bands in cache)",
};
KILN_OP(mbconv_op)
