/*
 * pool16c.h — MaxPool / AveragePool and the global pools on NCHW16C
 * activations (pool.c offers them under KILN_BUILD_CPU_BLOCKED).
 *
 * Why: in NCHW16C a pixel's 16 channels are one vector, so a window's max
 * or sum is one vector op per tap with no shuffles (ResNet's stem MaxPool
 * 3x3/2 is 9 vector maxes per 16 outputs), and a 16c region that runs
 * through the pool (the stem conv -> MaxPool -> layer1, layer4 ->
 * GlobalAveragePool) pays no reformat there.  A global pool's 1x1 output
 * in NCHW16C is byte-identical to LINEAR when C % 16 == 0, so one kernel
 * writes either.
 *
 * Results are the NCHW kernels' (pool.c): MaxPool reduces each window
 * column over its rows first, then the columns in order, with ONNX
 * Runtime's NaN rule (a NaN is skipped unless the whole window is NaN);
 * an empty window is -inf; AveragePool sums in double in row-major order
 * and divides once (count_include_pad counts the pads as pool.c does).
 */
#ifndef KILN_OPS_NN_POOL16C_H
#define KILN_OPS_NN_POOL16C_H

#include <stdint.h>

typedef struct kiln__pool16c {
    int64_t N, CB;       /* images, blocks of 16 channels */
    int64_t H, W, OH, OW; /* input and output plane */
    int64_t kh, kw, sy, sx, dy, dx;
    int64_t pt, pl, pb, pr; /* pads: top, left, bottom, right */
    int avg;             /* 0: max, 1: average */
    int count_pad;       /* average: divide by the taps inside the pads too */
    const float *x;      /* N x CB x H x W x 16 */
    float *y;            /* N x CB x OH x OW x 16 */
    /* MaxPool's Indices (LINEAR N x C x OH x OW, ONNX's NCHW numbering;
     * order 1: column major), or NULL.  With them a unit runs pool.c's
     * scalar loop per lane (its tie rule for the index): the builder times
     * MaxPool with them, a network rarely reads them. */
    int64_t *ind;
    int order;
} kiln__pool16c;

/* Valid taps [lo, hi) of a window starting at `start` along an axis of n
 * inputs, kernel k, dilation d; *cnt_pad: the taps left of n + pe (the
 * end pad), the divisor count_include_pad uses.  Shared with pool.c. */
static inline void kiln__pool_taps(int64_t start, int64_t k, int64_t d, int64_t n, int64_t pe, int64_t *lo,
                                   int64_t *hi, int64_t *cnt_pad) {
    int64_t l = start >= 0 ? 0 : (-start + d - 1) / d;
    int64_t h = n - 1 - start < 0 ? 0 : (n - 1 - start) / d + 1;
    if (h > k) h = k;
    if (l > h) l = h;
    int64_t hp = n + pe - 1 - start < 0 ? 0 : (n + pe - 1 - start) / d + 1;
    *lo = l;
    *hi = h;
    *cnt_pad = hp < k ? hp : k;
}

/* Work units: one output row of one channel block of one image. */
int64_t kiln__pool16c_units(const kiln__pool16c *p);
/* Units [u0, u1); scratch: 3 * OW int64_t (the column tap ranges). */
void kiln__pool16c_run(const kiln__pool16c *p, int64_t u0, int64_t u1, int64_t *scratch);

/* Global average (avg 1) or max over the S pixels of planes [b0, b1)
 * (plane = image * CB + block) of x (16c), into y + plane * 16. */
void kiln__gpool16c_run(const float *x, int64_t S, int avg, int64_t b0, int64_t b1, float *y);

#endif /* KILN_OPS_NN_POOL16C_H */
