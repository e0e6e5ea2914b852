/*
 * conv_cuda.c — CUDA launchers of Conv and ConvTranspose (1-D and 2-D;
 * conv.cu).
 *
 * Conv tactics (cuda_formats):
 *   0 auto: direct when the window has few input channels per group
 *     (depthwise and the like), else GEMM;
 *   1 direct: conv_direct_<T>, one thread per output;
 *   3 depthwise: conv_dw<K>_<T> (conv_dw.cu), a 32 x 32 output tile per
 *     CTA from the input window staged in shared memory; only where each
 *     group has one input channel and the window fits (dw_fits), else
 *     KILN_EUNSUPPORTED (the builder drops the candidate);
 *   2 GEMM: im2col_<T> into the workspace (skipped for 1x1 stride-1
 *     unpadded convs, whose input already is the GEMM operand), then
 *     kiln__cuda_gemm (cuBLASLt, F32 accumulate): ungrouped, one strided
 *     batched call over as many images as COL_CAP bytes of im2col buffer
 *     hold (all of them for 1x1), the weights shared (batch stride 0);
 *     grouped, one image at a time, batched over the groups.  Then
 *     bias_act_<T> for the bias.
 *   5, 6 implicit GEMM on tensor cores (FP16/BF16; conv_igemm.cu):
 *     conv_igemm64_<T> / conv_igemm32_<T> (64 x 64 / 64 x 32 output
 *     tiles), bias + residual + activation applied before the one store,
 *     no workspace.  Other types answer KILN_EUNSUPPORTED (the builder
 *     drops the tactic), and so do pointwise convs while the builder
 *     times (see conv_igemm).  $KILN_CONV_IGEMM=0 turns them off: the builder
 *     does not time them and an engine that names one runs the GEMM
 *     tactic.
 *   10 + a (a = cudnnConvolutionFwdAlgo_t 0..7): cuDNN's algorithm a
 *     (device/cuda/cudnn.h), bias + residual + ReLU fused into it where
 *     cuDNN takes them, bias_act_<T> after it otherwise.  While the
 *     builder times tactics (kiln__b_timing) only the algorithms cuDNN's
 *     heuristic ranks in its first KILN_CUDNN_TOPK run (the others answer
 *     KILN_EUNSUPPORTED), and none without cuDNN.  An engine whose layer
 *     names a cuDNN tactic, loaded where cuDNN is missing, runs that layer
 *     with the GEMM tactic instead (one warning per process).
 * NHWC (x, y and the fused residual NHWC, the weights NHWC = KRSC, the
 * bias LINEAR; 2-D only; conv.c's NHWC rows, FP16/BF16): tactic 2 is one
 * cuBLASLt GEMM Y[NHW x K] = X[NHW x C] W^T for a 1x1 stride-1 unpadded
 * ungrouped conv, the bias and a ReLU in its epilogue and the residual as
 * its C (beta 1): no bias_act pass; tactics 10 + a are cuDNN's algorithm a
 * in NHWC (bias + residual + ReLU fused where cuDNN takes them).  Other
 * activations, and whatever cuDNN does not fuse, run bias_act over the
 * channel-innermost output after it.  The other tactics refuse NHWC
 * (KILN_EUNSUPPORTED: the builder drops them).
 * ConvTranspose: conv_transpose_<T> (gather form, no atomics), or
 * conv_transpose1_<T> where the kernel equals the stride (one tap), or
 * conv_transpose1c_<T> there with at most 32 input channels a group.
 * A fused activation (kiln__epi_cuda_act) is applied by conv_direct,
 * conv_transpose and bias_act before their one rounding store.  A fused
 * residual Add (kiln__epi_cuda_residual: an extra input of the output's
 * shape) is added before it: by conv_direct, or as the GEMM's C operand
 * (beta 1, so cuBLASLt reads it while it writes the output).
 */
#include "kiln_int.h"
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_cuda.h"
#include "device/cuda/cudnn.h"
#include "ops/nn/conv_dw_math.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { T_AUTO = 0, T_DIRECT = 1, T_GEMM = 2, T_DW = 3, T_IGEMM64 = 5, T_IGEMM32 = 6, T_CUDNN = KILN_CUDNN_TACTIC0 };

/* An NHWC call (conv.c's NHWC rows): x's layout decides. */
static int is_nhwc(const kiln_call *c) { return c->in[0].format == KILN_FORMAT_NHWC; }

static int is_cudnn(int tactic) { return tactic >= T_CUDNN && tactic < T_CUDNN + KILN_CUDNN_ALGOS; }

/* Tactics 5 and 6, unless $KILN_CONV_IGEMM is "0" or "off" (read once). */
static int igemm_on(void) {
    static int on = -1;
    int v = __atomic_load_n(&on, __ATOMIC_RELAXED);
    if (v < 0) {
        const char *e = getenv("KILN_CONV_IGEMM");
        v = !(e && (!strcmp(e, "0") || !strcmp(e, "off")));
        __atomic_store_n(&on, v, __ATOMIC_RELAXED);
    }
    return v;
}

/* The tactic a call runs: an implicit-GEMM one turned off runs as GEMM. */
static int run_tactic(int tactic) {
    return (tactic == T_IGEMM64 || tactic == T_IGEMM32) && !igemm_on() ? T_GEMM : tactic;
}

static void attr_arr(const kiln_call *c, const char *name, int n, int64_t *v, int64_t def) {
    const int64_t *a = NULL;
    int64_t k = kiln__cu_attr_ints(c, name, &a);
    for (int i = 0; i < n; i++) v[i] = a && k > i ? a[i] : def;
}

static int is_float(kiln_dtype t) {
    return t == KILN_DTYPE_F32 || t == KILN_DTYPE_F16 || t == KILN_DTYPE_BF16;
}

/* Geometry of a 1-D/2-D Conv or ConvTranspose call (transpose: weights
 * [C, K/g, ...]). */
static int geometry(const kiln_call *c, const char *op, int transpose, kiln_cu_conv *p) {
    const kiln_tensor *x = &c->in[0], *w = &c->in[1], *y = &c->out[0];
    int nsp = x->ndim - 2;
    if (nsp < 1 || nsp > 2) return kiln_set_error(KILN_EUNSUPPORTED, "%s: CUDA kernels take 1-D and 2-D only (%d-D)", op, nsp);
    if (!is_float(x->dtype) || w->dtype != x->dtype || y->dtype != x->dtype) return kiln__cu_type_err(op, x->dtype);
    if (is_nhwc(c)) {
        if (transpose || nsp != 2 || w->format != KILN_FORMAT_NHWC || y->format != KILN_FORMAT_NHWC)
            return kiln_set_error(KILN_EUNSUPPORTED, "%s: NHWC on CUDA takes 2-D convs with x, W and y all NHWC "
                                  "(%d-D, W %s, y %s)", op, nsp, kiln_format_name(w->format),
                                  kiln_format_name(y->format));
    } else if (!kiln__cu_contig(x) || !kiln__cu_contig(w) || !kiln__cu_contig(y)) {
        return kiln_set_error(KILN_EUNSUPPORTED, "%s: CUDA kernels need contiguous tensors", op);
    }
    int64_t s[2], d[2], pads[4], op_pad[2], in[2], out[2], k[2];
    attr_arr(c, "strides", nsp, s, 1);
    attr_arr(c, "dilations", nsp, d, 1);
    attr_arr(c, "pads", 2 * nsp, pads, 0);
    attr_arr(c, "output_padding", nsp, op_pad, 0);
    const char *ap = kiln__cu_attr_str(c, "auto_pad", "NOTSET");
    int same = !strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER"), upper = !strcmp(ap, "SAME_UPPER");
    const int64_t *os = NULL;
    int has_os = transpose && kiln__cu_attr_ints(c, "output_shape", &os) >= 0;
    int64_t pb[2];
    for (int i = 0; i < nsp; i++) {
        in[i] = x->dims[2 + i];
        out[i] = y->dims[2 + i];
        k[i] = w->dims[2 + i];
        if (!strcmp(ap, "VALID")) {
            pb[i] = 0;
        } else if (!transpose && same) {
            int64_t tot = (out[i] - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in[i];
            if (tot < 0) tot = 0;
            pb[i] = upper ? tot / 2 : tot - tot / 2;
        } else if (transpose && (same || has_os)) {
            int64_t tot = s[i] * (in[i] - 1) + op_pad[i] + (k[i] - 1) * d[i] + 1 - out[i];
            if (tot < 0) tot = 0;
            pb[i] = upper || !same ? tot / 2 : tot - tot / 2;
        } else {
            pb[i] = pads[i];
        }
    }
    memset(p, 0, sizeof *p);
    p->n = x->dims[0];
    p->c = x->dims[1];
    p->k = y->dims[1];
    p->group = (int32_t)kiln__cu_attr_int(c, "group", 1);
    if (p->group < 1) p->group = 1;
    int i0 = nsp == 2 ? 0 : -1; /* 1-D: h = kh = 1 */
    p->h = i0 < 0 ? 1 : in[0];
    p->w = in[nsp - 1];
    p->oh = i0 < 0 ? 1 : out[0];
    p->ow = out[nsp - 1];
    p->kh = (int32_t)(i0 < 0 ? 1 : k[0]);
    p->kw = (int32_t)k[nsp - 1];
    p->sh = (int32_t)(i0 < 0 ? 1 : s[0]);
    p->sw = (int32_t)s[nsp - 1];
    p->dh = (int32_t)(i0 < 0 ? 1 : d[0]);
    p->dw = (int32_t)d[nsp - 1];
    p->ph = (int32_t)(i0 < 0 ? 0 : pb[0]);
    p->pw = (int32_t)pb[nsp - 1];
    p->act = KILN_CU_ACT_NONE;
    if (p->c % p->group || p->k % p->group)
        return kiln_set_error(KILN_EATTR, "%s: channels %lld -> %lld not divisible by group %d", op, (long long)p->c,
                              (long long)p->k, p->group);
    return 0;
}

/* 1x1 stride-1 unpadded: the image itself is the GEMM's B operand. */
static int pointwise(const kiln_cu_conv *p) {
    return p->kh == 1 && p->kw == 1 && p->sh == 1 && p->sw == 1 && p->ph == 0 && p->pw == 0 && p->oh == p->h &&
           p->ow == p->w;
}

static size_t align_up(size_t n) { return (n + 255) & ~(size_t)255; }

/* im2col buffer bytes of one image for the GEMM tactic (0 for 1x1). */
static size_t col_bytes(const kiln_cu_conv *p, kiln_dtype t) {
    return pointwise(p) ? 0 : align_up((size_t)(p->c * p->kh * p->kw * p->oh * p->ow) * kiln_dtype_size(t));
}

/* Most im2col bytes for one batched GEMM: enough images per call that
 * launches stop mattering, little enough to stay a modest workspace. */
#define COL_CAP ((size_t)64 << 20)

/* Images per cuBLASLt call (grouped convs: 1). */
static int64_t images_per_call(const kiln_cu_conv *p, size_t cb) {
    if (p->group != 1) return 1;
    int64_t k = cb ? (int64_t)(COL_CAP / cb) : p->n;
    return k < 1 ? 1 : k > p->n ? p->n : k;
}

size_t kiln__cu_conv_workspace(const kiln_call *c) {
    kiln_cu_conv p;
    const int tactic = run_tactic(c->tactic);
    if (tactic == T_DIRECT || tactic == T_DW || tactic == T_IGEMM64 || tactic == T_IGEMM32 || geometry(c, "Conv", 0, &p)) return 0;
    if (is_nhwc(c) && !is_cudnn(tactic)) return KILN_CUDA_GEMM_WORKSPACE; /* the NHWC GEMM */
    if (is_cudnn(tactic) && !kiln__cudnn_load()) { /* without cuDNN: the GEMM tactic's (see above) */
        kiln_cudnn_conv q = {.geo = p, .dtype = c->in[0].dtype, .algo = tactic - T_CUDNN,
                             .tf32 = kiln__cuda_allow_tf32(c), .nhwc = is_nhwc(c)};
        size_t n = 0;
        return kiln__cudnn_conv_workspace(&q, &n) ? 0 : n;
    }
    size_t cb = col_bytes(&p, c->in[0].dtype);
    return cb * (size_t)images_per_call(&p, cb) + KILN_CUDA_GEMM_WORKSPACE;
}

static int bias_act(const kiln_call *c, const kiln_cu_conv *p, const char *suf);

static int conv_gemm(const kiln_call *c, const kiln_cu_conv *p, const void *res, const char *suf) {
    const kiln_tensor *x = &c->in[0], *w = &c->in[1];
    kiln_tensor *y = &c->out[0];
    size_t es = kiln_dtype_size(x->dtype), cb = col_bytes(p, x->dtype);
    const int64_t ipc = images_per_call(p, cb);
    if (c->workspace_size < cb * (size_t)ipc)
        return kiln_set_error(KILN_EINTERNAL, "Conv: workspace of %zu bytes, the GEMM tactic needs %zu",
                              c->workspace_size, cb * (size_t)ipc);
    kiln_call gc = *c; /* cuBLASLt gets the workspace after the im2col buffers */
    gc.workspace = (char *)c->workspace + cb * (size_t)ipc;
    gc.workspace_size = c->workspace_size - cb * (size_t)ipc;
    const int64_t G = p->group, cpg = p->c / G, kpg = p->k / G, kk = (int64_t)p->kh * p->kw;
    const int64_t osp = p->oh * p->ow, isp = p->h * p->w, col_stride = (int64_t)(cb / es);
    /* grouped: batched over the groups of one image; else over images */
    kiln_cuda_gemm g = {.m = kpg, .n = osp, .k = cpg * kk, .batch = G, .a = w->data, .lda = cpg * kk,
                        .ldb = osp, .ldd = osp, .ldc = osp, .stride_a = kpg * cpg * kk, .stride_b = cpg * kk * osp,
                        .stride_d = kpg * osp, .stride_c = kpg * osp, .dtype = x->dtype, .alpha = 1.0f,
                        .algo = 0};
    for (int64_t n = 0; n < p->n; n += ipc) {
        const int64_t nimg = p->n - n < ipc ? p->n - n : ipc;
        const char *xn = (const char *)x->data + (size_t)(n * p->c * isp) * es;
        int rc = 0;
        if (G == 1) {
            g.batch = nimg;
            g.stride_a = 0;
            g.stride_b = cb ? col_stride : p->c * isp;
        }
        if (cb) {
            void *col = c->workspace;
            int64_t ni = nimg;
            void *args[] = {(void *)p, &ni, (void *)&col_stride, &xn, &col};
            rc = kiln__cu_launch_n(c, "im2col", suf, nimg * p->c * kk * osp, args);
            g.b = col;
        } else {
            g.b = xn;
        }
        g.d = (char *)y->data + (size_t)(n * p->k * osp) * es;
        if (res) { /* D = W x col + residual */
            g.c = (const char *)res + (size_t)(n * p->k * osp) * es;
            g.beta = 1.0f;
        }
        if (!rc) rc = kiln__cuda_gemm(&gc, &g);
        if (rc) return rc;
    }
    return bias_act(c, p, suf);
}

/* The bias and the fused activation (p->act) in one pass over y. */
static int bias_act(const kiln_call *c, const kiln_cu_conv *p, const char *suf) {
    kiln_tensor *y = &c->out[0];
    const void *bias = kiln__cu_has_in(c, 2) ? c->in[2].data : NULL;
    if (!bias && p->act == KILN_CU_ACT_NONE) return 0;
    /* the channel of y[i]: (i / S) % K, S = 1 when channels are innermost (NHWC) */
    int64_t total = kiln_tensor_numel(y), K = p->k, S = is_nhwc(c) ? 1 : p->oh * p->ow;
    int act = p->act;
    float a = p->act_a, b = p->act_b;
    void *args[] = {&total, &K, &S, &y->data, (void *)&bias, &act, &a, &b};
    return kiln__cu_launch_n(c, "bias_act", suf, total, args);
}

/* cuDNN tactic; KILN_ENOTFOUND (after one warning) when cuDNN is missing
 * outside the builder, so the caller runs the GEMM tactic. */
static int conv_cudnn(const kiln_call *c, const kiln_cu_conv *p, const void *res, const char *suf) {
    if (kiln__cudnn_load()) {
        if (kiln__b_timing) {
            char why[512];
            snprintf(why, sizeof why, "%s", kiln_errmsg());
            return kiln__err(KILN_EUNSUPPORTED, "Conv: no cuDNN tactic: %s", why);
        }
        static int warned;
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            kiln__log(KILN_LOG_WARN, "layer '%s': the engine chose a cuDNN tactic, but %s; running the "
                      "im2col + GEMM tactic instead", c->layer ? c->layer : "?", kiln_errmsg());
        return KILN_ENOTFOUND;
    }
    const int relu = p->act == KILN_CU_ACT_RELU, fusable = relu || p->act == KILN_CU_ACT_NONE;
    kiln_cudnn_conv q = {.geo = *p, .dtype = c->in[0].dtype, .algo = c->tactic - T_CUDNN,
                         .tf32 = kiln__cuda_allow_tf32(c), .relu = relu, .nhwc = is_nhwc(c),
                         .x = c->in[0].data, .w = c->in[1].data, .z = res, .y = c->out[0].data,
                         /* cuDNN fuses ReLU or nothing: another activation comes after, with the bias */
                         .bias = fusable && kiln__cu_has_in(c, 2) ? c->in[2].data : NULL};
    if (kiln__b_timing && !kiln__cudnn_conv_ranked(&q))
        return kiln__err(KILN_EUNSUPPORTED, "Conv: cuDNN algorithm %d is not among its heuristic's first %d "
                         "for this shape (not timed)", q.algo, KILN_CUDNN_TOPK);
    int fused = 0, rc = kiln__cudnn_conv(c, &q, &fused);
    return rc || fused ? rc : bias_act(c, p, suf);
}

/* Does conv_dw take p: one input channel per group, the tile's input
 * window and the weights within its shared memory, 32-bit plane indices? */
static int dw_fits(const kiln_cu_conv *p) {
    int64_t in_h = (int64_t)(DW_TH - 1) * p->sh + (int64_t)(p->kh - 1) * p->dh + 1,
            in_w = (int64_t)(DW_TW - 1) * p->sw + (int64_t)(p->kw - 1) * p->dw + 1;
    return p->c == p->group && p->k % p->c == 0 && (int64_t)p->kh * p->kw <= DW_KMAX && in_h * in_w <= DW_SMEM &&
           p->h * p->w < INT32_MAX && p->oh * p->ow < INT32_MAX && p->ph < DW_SMEM && p->pw < DW_SMEM;
}

/* Tactic 3: conv_dw<K>s<S>_<T> or conv_dw0_<T>, one CTA per output tile of a plane. */
static int conv_dw(const kiln_call *c, const kiln_cu_conv *p, const void *bias, const void *res) {
    if (!dw_fits(p))
        return kiln_set_error(KILN_EUNSUPPORTED, "Conv: the depthwise tactic takes one input channel per group "
                              "and a window of at most %d inputs per %d x %d tile (group %d, %lld channels, "
                              "kernel %dx%d, strides %d,%d)", DW_SMEM, DW_TH, DW_TW, p->group, (long long)p->c,
                              p->kh, p->kw, p->sh, p->sw);
    static const char *const names[5][3] = {{"conv_dw3s1_f32", "conv_dw3s1_f16", "conv_dw3s1_bf16"},
                                            {"conv_dw3s2_f32", "conv_dw3s2_f16", "conv_dw3s2_bf16"},
                                            {"conv_dw5s1_f32", "conv_dw5s1_f16", "conv_dw5s1_bf16"},
                                            {"conv_dw5s2_f32", "conv_dw5s2_f16", "conv_dw5s2_bf16"},
                                            {"conv_dw0_f32", "conv_dw0_f16", "conv_dw0_bf16"}};
    const kiln_dtype t = c->in[0].dtype;
    const int ti = t == KILN_DTYPE_F16 ? 1 : t == KILN_DTYPE_BF16 ? 2 : 0;
    const int unrolled = p->dh == 1 && p->dw == 1 && p->kh == p->kw && (p->kh == 3 || p->kh == 5) &&
                         p->sh == p->sw && (p->sh == 1 || p->sh == 2);
    const int ki = unrolled ? (p->kh == 5) * 2 + (p->sh == 2) : 4;
    const int64_t tiles = ((p->oh + DW_TH - 1) / DW_TH) * ((p->ow + DW_TW - 1) / DW_TW), blocks = p->n * p->k * tiles;
    if (blocks > INT32_MAX)
        return kiln_set_error(KILN_EUNSUPPORTED, "Conv: %lld depthwise tiles exceed the CUDA grid", (long long)blocks);
    const unsigned grid[3] = {(unsigned)blocks, 1, 1}, block[3] = {DW_THREADS, 1, 1};
    void *args[] = {(void *)p, (void *)&c->in[0].data, (void *)&c->in[1].data, (void *)&bias, (void *)&res,
                    (void *)&c->out[0].data};
    return kiln__cuda_launch(c, names[ki][ti], grid, block, 0, args);
}

/* Tactics 5 and 6 (conv_igemm.cu): one kernel, the epilogue included. */
static int conv_igemm(const kiln_call *c, const kiln_cu_conv *p, const void *bias, const void *res, const char *suf,
                      int bn) {
    kiln_dtype t = c->in[0].dtype;
    if (t != KILN_DTYPE_F16 && t != KILN_DTYPE_BF16)
        return kiln_set_error(KILN_EUNSUPPORTED, "Conv: the implicit-GEMM tactic takes FP16 and BF16 (not %s)",
                              kiln_dtype_name(t));
    const int64_t cols = p->n * p->oh * p->ow, mt = (p->k / p->group + 63) / 64, nt = (cols + bn - 1) / bn;
    /* A pointwise conv's input already is the GEMM operand (tactic 2 runs
     * no im2col), so this kernel can only save the bias_act pass, while
     * its GEMM is much slower than cuBLASLt's.  In ResNet-50 b1 FP16
     * (H200) the builder picked it for 9 such convs, one launch timed
     * alone beating two, but in the CUDA graph it took 10-14 us each where
     * the CUPTI timeline without it suggests ~5-8 us for GEMM + bias_act.
     * So it is not timed there; an engine that names it still runs it. */
    if (kiln__b_timing && pointwise(p))
        return kiln_set_error(KILN_EUNSUPPORTED, "Conv: the implicit-GEMM tactic is not timed on 1x1 stride-1 "
                              "unpadded convs (tactic 2 runs no im2col there)");
    if (nt > INT32_MAX || mt > 65535 || p->group > 65535)
        return kiln_set_error(KILN_EUNSUPPORTED, "Conv: %lld x %lld tiles in %d groups exceed the CUDA grid",
                              (long long)nt, (long long)mt, p->group);
    if (!cols || !p->k) return 0;
    char name[32];
    snprintf(name, sizeof name, "conv_igemm%d_%s", bn, suf);
    const unsigned grid[3] = {(unsigned)nt, (unsigned)mt, (unsigned)p->group}, block[3] = {128, 1, 1};
    void *args[] = {(void *)p, (void *)&c->in[0].data, (void *)&c->in[1].data, (void *)&bias, (void *)&res,
                    (void *)&c->out[0].data};
    return kiln__cuda_launch(c, name, grid, block, 0, args);
}

/* NHWC tactic 2: Y[NHW x K] = X[NHW x C] W^T (W [K x C] row-major is
 * KRSC of a 1x1 filter) in one cuBLASLt GEMM; bias and ReLU in its
 * epilogue (another activation: bias_act after), the residual as C. */
static int conv_gemm_nhwc(const kiln_call *c, const kiln_cu_conv *p, const void *bias, const void *res,
                          const char *suf) {
    if (!pointwise(p) || p->group != 1)
        return kiln_set_error(KILN_EUNSUPPORTED, "Conv: the NHWC GEMM tactic takes 1x1 stride-1 unpadded ungrouped "
                              "convs (kernel %dx%d, strides %d,%d, group %d)", p->kh, p->kw, p->sh, p->sw, p->group);
    const int relu = p->act == KILN_CU_ACT_RELU, fused = relu || p->act == KILN_CU_ACT_NONE;
    kiln_cuda_gemm g = {.m = p->n * p->h * p->w, .n = p->k, .k = p->c, .batch = 1, .trans_b = 1,
                        .a = c->in[0].data, .b = c->in[1].data, .d = c->out[0].data, .lda = p->c, .ldb = p->c,
                        .ldd = p->k, .ldc = p->k, .dtype = c->in[0].dtype, .alpha = 1.0f,
                        .c = res, .beta = res ? 1.0f : 0.0f, .bias = fused ? bias : NULL, .epilogue = relu};
    int rc = kiln__cuda_gemm(c, &g);
    if (rc || fused) return rc;
    return bias_act(c, p, suf);
}

int kiln__cu_conv(const kiln_call *c) {
    kiln_cu_conv p;
    int rc = geometry(c, "Conv", 0, &p);
    if (rc) return rc;
    const char *suf = kiln__cu_suffix(c->in[0].dtype);
    const void *bias = kiln__cu_has_in(c, 2) ? c->in[2].data : NULL;
    if (bias && (c->in[2].dtype != c->in[0].dtype || kiln_tensor_numel(&c->in[2]) != p.k))
        return kiln_set_error(KILN_ESHAPE, "Conv: bias must hold %lld values of the input type", (long long)p.k);
    p.act = kiln__epi_cuda_act(c->epilogue, &p.act_a, &p.act_b); /* a fused activation (builder/fuse.c) */
    const int ri = kiln__epi_cuda_residual(c->epilogue);
    const void *res = NULL;
    if (ri >= 0) { /* a fused residual Add: an input of the output's type and shape */
        if (ri >= c->nin || !c->in[ri].data || c->in[ri].dtype != c->out[0].dtype ||
            kiln_tensor_numel(&c->in[ri]) != kiln_tensor_numel(&c->out[0]) ||
            (!is_nhwc(c) && !kiln__cu_contig(&c->in[ri])))
            return kiln_set_error(KILN_EINTERNAL, "Conv: the fused residual (input %d) must be a present contiguous "
                                  "tensor of the output's type and size", ri);
        res = c->in[ri].data;
    }
    int tactic = run_tactic(c->tactic);
    if (tactic != c->tactic && kiln__b_timing)
        return kiln_set_error(KILN_EUNSUPPORTED, "Conv: implicit-GEMM tactics off ($KILN_CONV_IGEMM)");
    if (is_nhwc(c)) {
        if (res && c->in[ri].format != KILN_FORMAT_NHWC)
            return kiln_set_error(KILN_EINTERNAL, "Conv: the fused residual of an NHWC conv is %s",
                                  kiln_format_name(c->in[ri].format));
        if (is_cudnn(tactic)) {
            rc = conv_cudnn(c, &p, res, suf);
            if (rc != KILN_ENOTFOUND) return rc;
            tactic = T_GEMM; /* no cuDNN here: conv_cudnn warned; pointwise convs run the GEMM */
        }
        if (tactic == T_GEMM) return conv_gemm_nhwc(c, &p, bias, res, suf);
        return kiln_set_error(KILN_EUNSUPPORTED, "Conv: tactic %d does not take NHWC (2 and cuDNN's do)", tactic);
    }
    if (tactic == T_IGEMM64 || tactic == T_IGEMM32)
        return conv_igemm(c, &p, bias, res, suf, tactic == T_IGEMM64 ? 64 : 32);
    if (is_cudnn(tactic)) {
        rc = conv_cudnn(c, &p, res, suf);
        if (rc != KILN_ENOTFOUND) return rc;
        tactic = T_GEMM; /* no cuDNN here: conv_cudnn warned */
    }
    if (tactic == T_AUTO) tactic = p.c / p.group <= 4 ? T_DIRECT : T_GEMM;
    if (tactic == T_GEMM) return conv_gemm(c, &p, res, suf);
    if (tactic == T_DW) return conv_dw(c, &p, bias, res);
    void *args[] = {&p, (void *)&c->in[0].data, (void *)&c->in[1].data, (void *)&bias, (void *)&res,
                    &c->out[0].data};
    return kiln__cu_launch_n(c, "conv_direct", suf, kiln_tensor_numel(&c->out[0]), args);
}

int kiln__cu_conv_transpose(const kiln_call *c) {
    kiln_cu_conv p;
    int rc = geometry(c, "ConvTranspose", 1, &p);
    if (rc) return rc;
    const void *bias = kiln__cu_has_in(c, 2) ? c->in[2].data : NULL;
    if (bias && (c->in[2].dtype != c->in[0].dtype || kiln_tensor_numel(&c->in[2]) != p.k))
        return kiln_set_error(KILN_ESHAPE, "ConvTranspose: bias must hold %lld values of the input type",
                              (long long)p.k);
    p.act = kiln__epi_cuda_act(c->epilogue, &p.act_a, &p.act_b);
    void *args[] = {&p, (void *)&c->in[0].data, (void *)&c->in[1].data, (void *)&bias, &c->out[0].data};
    /* kernel == stride, undilated: one tap per output (32-bit indices) */
    const int one_tap = p.kh == p.sh && p.kw == p.sw && p.dh == 1 && p.dw == 1 && p.ph >= 0 && p.pw >= 0 &&
                        kiln_tensor_numel(&c->in[0]) < INT32_MAX && kiln_tensor_numel(&c->in[1]) < INT32_MAX &&
                        kiln_tensor_numel(&c->out[0]) < INT32_MAX;
    /* one tap and at most 32 input channels a group: a thread per output
     * position, the group's inputs in registers (conv_transpose1c) */
    if (one_tap && p.c / p.group <= 32)
        return kiln__cu_launch_n(c, "conv_transpose1c", kiln__cu_suffix(c->in[0].dtype), p.n * p.oh * p.ow, args);
    return kiln__cu_launch_n(c, one_tap ? "conv_transpose1" : "conv_transpose", kiln__cu_suffix(c->in[0].dtype),
                             kiln_tensor_numel(&c->out[0]), args);
}
