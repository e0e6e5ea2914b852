/*
 * conv_direct16c.h — a direct 2-D conv of one group whose input and output
 * (and a fused residual) are NCHW16C: Conv tactic 16 (ops/nn/conv.c), for
 * the convs tactics 13-15 do not cover (strided ones above all: ResNet's
 * 3x3/2 convs and 1x1/2 downsamples that open each stage).
 *
 * Why: without it a 16c region of the network stops at each such conv and
 * pays a reformat out and back in.  In NCHW16C a direct conv needs no
 * im2col: the 16 channels of an input pixel are one 64-byte line whose
 * values are broadcast into the FMAs of every output channel, for each
 * kernel tap, as the 1x1 kernel (conv_pw16c.c, its special case) does
 * for its single tap (oneDNN's "jit direct" nChw16c convolution).
 *
 * Layouts: X C/16 x H x W x 16 per image, Y and the residual
 * M/16 x OH x OW x 16; C and M multiples of 16.  W (M x C x KH x KW) is
 * packed once (kiln__d16c_pack): blocks of 32 output channels (the last
 * one 16 when M % 32 == 16), each [C/16][KH][KW][16][32 or 16] — for a
 * 1x1 kernel tactic 13's layout (kiln__pw16c_pack is this packing).
 */
#ifndef KILN_OPS_NN_CONV_DIRECT16C_H
#define KILN_OPS_NN_CONV_DIRECT16C_H

#include "kiln/plugin.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kiln__d16c {
    int64_t C, M, H, W;     /* input channels, output channels (multiples of 16), input rows, columns */
    int64_t OH, OW, KH, KW; /* output rows, columns; kernel */
    int64_t sh, sw, pt, pl; /* strides; top and left pads (the bottom and right ones follow from OH, OW) */
    const float *x;         /* one image: C/16 x H x W x 16 */
    const float *wp;        /* kiln__d16c_pack's layout */
    const float *bias;      /* M, or NULL */
    const float *res;       /* one image: M/16 x OH x OW x 16 added before the Relu, or NULL */
    float *y;               /* one image: M/16 x OH x OW x 16 */
    int relu;               /* 1: max(0, .) on store */
    int wmajor;             /* unit order: 1 output blocks outer (W reused across pixels), 0 output rows outer */
} kiln__d16c;

/* Floats of W (M x C x taps) packed, and the packing (taps = KH * KW). */
int64_t kiln__d16c_packed(int64_t M, int64_t C, int64_t taps);
void kiln__d16c_pack(const float *w, int64_t M, int64_t C, int64_t taps, float *dst);

/* Work units of one image: (a tile of up to 12 output pixels, a block of
 * 32 output channels); each writes its outputs once, whatever the split,
 * so every thread count gives the same bits. */
typedef struct kiln__d16c_tile {
    int64_t oy, ox, rows, cols; /* output rows [oy, oy + rows) x columns [ox, ox + cols) */
    int64_t m0, m1;             /* output channels [m0, m1) */
    const char *pf;             /* output blocks outer: this tile's share of the next block's W, */
    int64_t pf_lines;           /* pf_lines lines fetched to L2 while it runs (or 0) */
} kiln__d16c_tile;
int64_t kiln__d16c_units(const kiln__d16c *p);
void kiln__d16c_unit(const kiln__d16c *p, int64_t u, kiln__d16c_tile *q);
/* Units [u0, u1): bias, the sum over C and the taps, residual, Relu, one store. */
void kiln__d16c_run(const kiln__d16c *p, int64_t u0, int64_t u1);

/* The unit order for a conv of C -> M channels, taps taps, P output pixels at
 * `threads` threads (tactics 13 and 16 share it). */
int kiln__d16c_wmajor(int64_t C, int64_t M, int64_t taps, int64_t P, int threads);

/* Workspace bytes of Conv tactic 16 on N images (a strided 1x1 conv's
 * pixels, gathered). */
size_t kiln__d16c_ws(const kiln__d16c *geom, int64_t N);

/* Conv tactic 16 on call c (ops/nn/conv.c checked the geometry in p: its
 * pointers are ignored): N images, X, Y and a residual NCHW16C, W as
 * c->prepacked[1] in kiln__d16c_pack's layout; the fused chain in the store
 * when it is a residual and/or Relu, else per pixel.  0 or a KILN_E* code. */
int kiln__d16c_conv(const kiln_call *c, int64_t N, const kiln__d16c *geom);

#endif /* KILN_OPS_NN_CONV_DIRECT16C_H */
