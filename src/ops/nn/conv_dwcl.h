/*
 * conv_dwcl.h — a depthwise 2-D conv over channels-last data (one image:
 * pixel (iy, ix) holds its C channels contiguous), for kiln::mbconv's
 * tactic 4 (ops/nn/mbconv.c), which keeps its expanded tensor that way.
 *
 * Why: on 14x14 and 7x7 planes the row kernel (conv_dwrows.c) fills 14
 * or 7 of a vector's 16 lanes and pays its per-plane setup for 49
 * outputs; here the lanes run over channels (MobileNetV2's 96..960, all
 * multiples of 16), every load is a plain contiguous one and the padding
 * is skipped tap by tap, whatever the plane's size.
 */
#ifndef KILN_OPS_NN_CONV_DWCL_H
#define KILN_OPS_NN_CONV_DWCL_H

#include <stdint.h>

/* The most taps (KH * KW) a kernel may have. */
enum { KILN__DWCL_TAPS = 64 };

typedef struct kiln__dwcl {
    int64_t C, H, W, OH, OW, KH, KW, sy, sx, dy, dx, pt, pl;
    const float *x;     /* pixel (iy, ix), channel c at x[(iy * W + ix) * ldx + c] */
    const float *w;     /* tap (ky, kx), channel c at w[(ky * KW + kx) * C + c] (kiln__dwcl_pack) */
    const float *bias;  /* C floats, or NULL */
    float *y;           /* output pixel (oy, ox), channel c at y[(oy * OW + ox) * ldy + c] */
    int64_t ldx, ldy;   /* floats between pixels (>= C) */
    float lo, hi;       /* every output clamped to [lo, hi] (NaN stays NaN) */
} kiln__dwcl;

/* Weights C x KH x KW (as ONNX stores them, C x 1 x KH x KW) into the
 * tap-major layout above (C * KH * KW floats at dst). */
void kiln__dwcl_pack(const float *w, int64_t C, int64_t KH, int64_t KW, float *dst);
/* Output rows [oy0, oy1) (every column and channel) on this thread;
 * KH * KW <= KILN__DWCL_TAPS. */
void kiln__dwcl_rows(const kiln__dwcl *p, int64_t oy0, int64_t oy1);

#endif /* KILN_OPS_NN_CONV_DWCL_H */
