/*
 * conv_winograd.h — Winograd F(mxm, 3x3), m = 4 or 2, for 2-D 3x3 stride-1
 * convs of one group (Conv tactics 6 and 10, conv_winograd.c).
 *
 * Y = A^T [ U (.) V ] A per m x m output tile: V = B^T d B is the
 * (m+2)x(m+2) input tile d transformed, U = G g G^T the 3x3 filter g
 * transformed (once, at prepack), and the NX = (m+2)^2 element-wise
 * products summed over input channels are NX GEMMs U_xi[M x C] *
 * V_xi[C x tiles].  The direct sum's 9 multiplications per output become
 * 2.25 (m = 4) or 4 (m = 2), at the cost of the two transforms; the
 * builder times both against the other Conv tactics.
 */
#ifndef KILN_OPS_NN_CONV_WINOGRAD_H
#define KILN_OPS_NN_CONV_WINOGRAD_H

#include "kiln/plugin.h"

#include <stddef.h>
#include <stdint.h>

/* Floats of a packed form's header (it keeps the operands 64-byte aligned). */
#define KILN__WINO_HEAD_FLOATS 16

/* W (M x C x 3 x 3, dense) transformed for tile size m: U_xi = G g G^T as
 * an NX x M x C array (kiln__malloc'd, the caller frees it), or NULL with
 * the error set (out of memory).  Both packed forms (this file's and
 * conv_wino16c.h's) pack it. */
float *kiln__wino_transform_w(int m, const float *w, int64_t M, int64_t C);

/* Bytes of the packed transformed weights of an M x C x 3 x 3 W for tile
 * size m (a 64-byte header naming the layout, then NX packed SGEMM A
 * operands). */
size_t kiln__wino_pack_bytes(int m, int64_t M, int64_t C);
/* Transform and pack W (M x C x 3 x 3, dense) for tile size m into dst
 * (kiln__wino_pack_bytes bytes, 64-byte aligned).  0, or KILN_ENOMEM. */
int kiln__wino_pack(int m, const float *w, int64_t M, int64_t C, void *dst);
/* The packed operands in a prepacked buffer if it holds the layout of tile
 * size m (0: either) for M x C, else NULL (e.g. the GEMM tactics' packed W). */
const float *kiln__wino_packed(const void *prepacked, int m, int64_t M, int64_t C);

/* One image of a conv the tactic runs. */
typedef struct kiln__wino {
    int m;                              /* output tile size: 4 or 2 */
    int64_t C, M, H, W, OH, OW, pt, pl; /* pt, pl: top and left pads */
    const float *x;                     /* C x H x W */
    const float *u;                     /* kiln__wino_packed */
    const float *bias;                  /* M values, or NULL */
    float *y;                           /* M x OH x OW */
    float *ws;                          /* kiln__wino_ws_bytes */
    const kiln_call *call;              /* fused epilogue (channel = output row) */
    kiln_exec *exec;
    int split;                          /* tactics 21, 22: each thread a band of tile rows (split_band) */
} kiln__wino;

/* An image is done in blocks of whole tile rows: TH x TW tiles, `rows`
 * tile rows a block (its V and products stay within a few MB), and ld the
 * stride, in tiles, of one of the NX points' V or products (a block's
 * tiles rounded up to 16). */
typedef struct kiln__wino_blocks {
    int64_t TH, TW, rows, ld;
} kiln__wino_blocks;
kiln__wino_blocks kiln__wino_block_geom(int m, int64_t C, int64_t M, int64_t OH, int64_t OW);

/* 1 if tile size m can run this output size (at least two tiles a row). */
int kiln__wino_fits(int m, int64_t M, int64_t OW);
/* Workspace bytes for tile size m, C -> M channels at OH x OW. */
size_t kiln__wino_ws_bytes(int m, int64_t C, int64_t M, int64_t OH, int64_t OW);
void kiln__wino_run(const kiln__wino *w);

#endif /* KILN_OPS_NN_CONV_WINOGRAD_H */
