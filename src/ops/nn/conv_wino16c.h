/*
 * conv_wino16c.h — Winograd F(4x4, 3x3) and F(2x2, 3x3) with X, Y and a
 * fused residual in NCHW16C (Conv tactics 14, 15 and, tiles split over the threads, 18, 19;
 * conv_wino16c.c).
 *
 * Tactic 6's (and 10's) algorithm (conv_winograd.h) with the roles of the GEMM's
 * operands swapped: in NCHW16C one pixel's 16 channels are one vector, so
 * the input transform reads whole 64-byte pixels (no gathers, no masks)
 * and writes the transformed tile's 16 channels as one row segment of
 * V^T (tiles x C), and the 36 GEMMs compute P^T = V^T U^T (tiles x M),
 * whose rows the output transform reads as 16 output channels of one
 * tile and writes as contiguous 64-byte output pixels.  U^T is packed once
 * at build as the SGEMM's B operand (this file's packed form), V^T is
 * packed by the GEMM as its A (rows of 12 tiles).  No transposes.
 */
#ifndef KILN_OPS_NN_CONV_WINO16C_H
#define KILN_OPS_NN_CONV_WINO16C_H

#include "ops/nn/conv_winograd.h"

/* Bytes of the packed form for an M x C x 3 x 3 W and tile size m (4 or
 * 2): a header, then NX = (m + 2)^2 packed SGEMM B operands U_xi^T, C x M. */
size_t kiln__wino16c_pack_bytes(int m, int64_t M, int64_t C);
/* Transform and pack W (dense) into dst (kiln__wino16c_pack_bytes bytes,
 * 64-byte aligned).  0, or KILN_ENOMEM. */
int kiln__wino16c_pack(int m, const float *w, int64_t M, int64_t C, void *dst);
/* The packed operands in a prepacked buffer if it holds this form for
 * tile size m and M x C, else NULL. */
const float *kiln__wino16c_packed(const void *prepacked, int m, int64_t M, int64_t C);

/* One image: w as for tactics 6 and 10 (m = 4 or 2; C and M multiples of
 * 16; x C/16 x H x W x 16, y M/16 x OH x OW x 16, u kiln__wino16c_packed,
 * ws kiln__wino_ws_bytes(m, ...)), plus what the kernel applies itself:
 * res (Y's layout, or NULL) added and then Relu (relu), after the bias.
 * w.call, when not NULL, is a fused epilogue chain run on each output
 * pixel after that (16 values, one channel each). */
typedef struct kiln__wino16c {
    kiln__wino w;
    const float *res;
    int relu;
    /* 0: the phases split over the threads one after another (transforms
     * by channel block, the GEMMs by point), data crossing between cores
     * at each step (tactics 14, 15).  1: each thread runs all three on its
     * own share of the tiles, in its own rows of the workspace, no barrier
     * between them; its V^T and products stay in its caches, and its
     * input and output pixels are the rows its share covers (tactics 18,
     * 19).  Each thread then reads all of U instead of its points' share. */
    int split;
} kiln__wino16c;

/* Any output size (a lone tile is run as two). */
void kiln__wino16c_run(const kiln__wino16c *p);
/* 1 if p (split set) runs its first block in split mode at `threads`
 * (enough tiles a thread: conv_wino16c.c's SPLIT_TILES), else 0: for the
 * tests. */
int kiln__wino16c_splits(const kiln__wino16c *p, int threads);

#endif /* KILN_OPS_NN_CONV_WINO16C_H */
