/*
 * conv_fewc.h — a dense 2-D conv of few input channels (a network's stem:
 * 3 colour channels, 3x3 at stride 2) computed directly from the input
 * rows, for kiln::mbconv's expand step when the block starts at the image
 * (ops/nn/mbconv.c, builder/mbconv_fuse.c) and for Conv tactic 12 (a plain
 * stem conv: ResNet's 7x7/2, PP-OCR det's 3x3/2; ops/nn/conv.c), and 17
 * (the same writing Y in NCHW16C, where a 16c region starts at the stem).
 *
 * Why: as a GEMM such a conv has K = C * KH * KW = 27, and building its
 * B operand (an im2col of strided, padded columns) costs about as much as
 * the product.  Here each input row is split once into its stride phases
 * (zero-padded), after which every tap of 16 output columns is one plain
 * vector load that feeds 16 output channels' FMAs.
 */
#ifndef KILN_OPS_NN_CONV_FEWC_H
#define KILN_OPS_NN_CONV_FEWC_H

#include <stdint.h>

/* The largest input channel count and kernel size it takes. */
enum { KILN__FEWC_CMAX = 4, KILN__FEWC_KMAX = 7 };

typedef struct kiln__fewc {
    int64_t C, H, W;      /* input channels, rows, columns (one image) */
    int64_t M, OH, OW;    /* output channels, rows, columns */
    int64_t KH, KW, sy, sx, pt, pl;
    const float *x;       /* C x H x W */
    const float *w, *bias; /* M x C x KH x KW; bias: M */
    float lo, hi;         /* every output clamped to [lo, hi] */
    /* kiln__fewc_pointwise only: 0, or the outputs split by the parity of
     * their index: output i of channel m at y + m * ys + i / 2, plus
     * `split` floats for odd i (the stride-2 phases of rows of even width,
     * which a stride-2 depthwise conv then reads without shuffles). */
    int64_t split;
    /* kiln__fewc_rows only: the weights packed by kiln__fewc_pack_w, or
     * NULL: it packs them into its scratch on every call (a caller that
     * runs many bands of one conv packs them once: 64 x 147 floats for
     * ResNet's stem, scattered 16 apart, cost ~8% of a band). */
    const float *wp;
    /* kiln__fewc_rows only: Y in NCHW16C (M % 16 == 0; Conv tactic 17):
     * channel block m / 16, row oy at y[m / 16 * ys + (oy - oy0) * OW * 16] */
    int nchw16c;
} kiln__fewc;

/* Floats of per-thread scratch kiln__fewc_rows needs (C <= FEWC_CMAX,
 * KH and KW <= FEWC_KMAX). */
int64_t kiln__fewc_scratch(const kiln__fewc *p);
/* Floats of p's weights packed for kiln__fewc_rows, and the packing. */
int64_t kiln__fewc_packed_w(const kiln__fewc *p);
void kiln__fewc_pack_w(const kiln__fewc *p, float *wp);
/* Output rows [oy0, oy1) of every channel into y (channel m, row oy at
 * y[m * ys + (oy - oy0) * OW]), using scratch (kiln__fewc_scratch floats).
 * AVX-512 builds only (kiln__dwrows_fits); elsewhere it does nothing. */
void kiln__fewc_rows(const kiln__fewc *p, int64_t oy0, int64_t oy1, float *y, int64_t ys, float *scratch);

/* The same for a 1x1 conv at stride 1 (p: C, M, bias, lo, hi; the other
 * fields unread), its weights packed once by kiln__fewc_pointwise_pack
 * (kiln__fewc_pointwise_packed floats): outputs [0, n) of every channel
 * from the inputs at x (channel c at x + c * xs) into y (channel m at
 * y + m * ys).  Each weight feeds 32 outputs; the clamp is applied before
 * the one store (a GEMM with a separate clamp pass writes twice). */
int64_t kiln__fewc_pointwise_packed(int64_t M, int64_t C);
void kiln__fewc_pointwise_pack(const float *w, int64_t M, int64_t C, float *dst);
void kiln__fewc_pointwise(const kiln__fewc *p, const float *wpk, const float *x, int64_t xs, int64_t n, float *y,
                          int64_t ys);

#endif /* KILN_OPS_NN_CONV_FEWC_H */
