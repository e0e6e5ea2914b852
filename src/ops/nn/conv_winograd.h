/*
 * conv_winograd.h — Winograd F(4x4, 3x3) for 2-D 3x3 stride-1 convs of one
 * group (Conv tactic 6, conv_winograd.c).
 *
 * Y = A^T [ U (.) V ] A per 4x4 output tile: V = B^T d B is the 6x6 input
 * tile d transformed, U = G g G^T the 3x3 filter g transformed (once, at
 * prepack), and the 36 element-wise products summed over input channels
 * are 36 GEMMs U_xi[M x C] * V_xi[C x tiles].  2.25x fewer multiplications
 * than the direct GEMM, at the cost of the two transforms; the builder
 * times it against the other Conv tactics.
 */
#ifndef KILN_OPS_NN_CONV_WINOGRAD_H
#define KILN_OPS_NN_CONV_WINOGRAD_H

#include "kiln/plugin.h"

#include <stddef.h>
#include <stdint.h>

/* Bytes of the packed transformed weights of an M x C x 3 x 3 W (a
 * 64-byte header naming the layout, then 36 packed SGEMM A operands). */
size_t kiln__wino_pack_bytes(int64_t M, int64_t C);
/* Transform and pack W (M x C x 3 x 3, dense) into dst
 * (kiln__wino_pack_bytes bytes, 64-byte aligned).  0, or KILN_ENOMEM. */
int kiln__wino_pack(const float *w, int64_t M, int64_t C, void *dst);
/* The packed operands in a prepacked buffer if it holds this layout for
 * M x C, else NULL (e.g. the GEMM tactics' packed W). */
const float *kiln__wino_packed(const void *prepacked, int64_t M, int64_t C);

/* One image of a conv the tactic runs. */
typedef struct kiln__wino {
    int64_t C, M, H, W, OH, OW, pt, pl; /* pt, pl: top and left pads */
    const float *x;                     /* C x H x W */
    const float *u;                     /* kiln__wino_packed */
    const float *bias;                  /* M values, or NULL */
    float *y;                           /* M x OH x OW */
    float *ws;                          /* kiln__wino_ws_bytes */
    const kiln_call *call;              /* fused epilogue (channel = output row) */
    kiln_exec *exec;
} kiln__wino;

/* 1 if the tactic can run this output size (at least two tiles a row). */
int kiln__wino_fits(int64_t M, int64_t OW);
/* Workspace bytes for C -> M channels at OH x OW. */
size_t kiln__wino_ws_bytes(int64_t C, int64_t M, int64_t OH, int64_t OW);
void kiln__wino_run(const kiln__wino *w);

#endif /* KILN_OPS_NN_CONV_WINOGRAD_H */
