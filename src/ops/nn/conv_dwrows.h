/*
 * conv_dwrows.h — depthwise 2-D convs read straight from the input rows
 * (Conv tactic 7, conv_dwrows.c).
 *
 * Each output row is computed in vectors of 16 outputs: for every tap
 * (ky, kx) one masked load of the input row (stride 1) or two masked
 * loads and a permute that picks the even lanes (stride 2) give the 16
 * inputs that tap multiplies, with the lanes that fall into the padding
 * masked to zero.  No padded copy of the input (tactic 5's phase planes)
 * and no grid to compact: one pass over X and one over Y, eight output rows
 * at a time as independent accumulators.  MobileNet's 3x3 pads-1 convs
 * (stride 1, and stride 2 on phase-split rows) instead walk each pair of
 * column chunks down the whole band, every input row loaded once for the
 * up to three output rows it feeds (conv_dwrows.c, "rolling rows").  The
 * builder times it against tactic 5 (on 7x7 and 14x14 planes the copies
 * were most of tactic 5's time).
 */
#ifndef KILN_OPS_NN_CONV_DWROWS_H
#define KILN_OPS_NN_CONV_DWROWS_H

#include "kiln/plugin.h"

#include <stdint.h>

/* A depthwise conv: input channel m / mult feeds output channel m. */
typedef struct kiln__dwrows {
    int64_t N, C, mult, H, W, OH, OW, KH, KW, sy, sx, dy, dx, pt, pl;
    const float *x, *w, *bias; /* w: C * mult x KH x KW; bias: NULL or C * mult */
    float *y;
    const kiln_call *call;     /* fused epilogue (channel = output channel) */
    kiln_exec *exec;
    /* the work split: units of cb output channels x rb output rows */
    int64_t rb, nrb, cb, ncb;
    /* Optional (0: a dense NCHW tensor): the distance between channel
     * planes of x and of y in floats, and the output row that y's planes
     * start with -- a band of rows [oy_base, ...) of each output plane, as
     * kiln::mbconv's row tiles hold them (ops/nn/mbconv.c). */
    int64_t xs, ys, oy_base;
    /* clamp != 0: every output is clamped to [lo, hi] before it is stored
     * (a ReLU / ReLU6 that runs before anything else reads the rows). */
    int clamp;
    float lo, hi;
    /* Optional (0: off): x holds each row split by column parity (x
     * stride 2, W even): the even columns of row iy at x + iy * W / 2 of
     * the channel's plane, the odd ones `phase` floats further (kiln::mbconv
     * tactic 3 stores them so; conv_fewc.h's split).  Every tap is then one
     * plain load, where the interleaved rows take two and a permute. */
    int64_t phase;
} kiln__dwrows;

/* 1 if the tactic runs a conv of this column stride and kernel width
 * (an AVX-512 build, sx 1 or 2, KW <= 32), else 0. */
int kiln__dwrows_fits(int64_t sx, int64_t KW);
/* Runs it over exec (kiln__dwrows_fits must hold). */
void kiln__dwrows_run(const kiln__dwrows *p);
/* Output channels [m0, m1) and rows [oy0, oy1) of image n on this thread,
 * without the epilogue (p->call is not read). */
void kiln__dwrows_band(const kiln__dwrows *p, int64_t n, int64_t m0, int64_t m1, int64_t oy0, int64_t oy1);

#endif /* KILN_OPS_NN_CONV_DWROWS_H */
