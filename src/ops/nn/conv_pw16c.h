/*
 * conv_pw16c.h — a 1x1, stride-1, unpadded conv of one group whose input
 * and output (and a fused residual) are NCHW16C: Conv tactic 13
 * (ops/nn/conv.c).
 *
 * Why: in NCHW a 1x1 conv is a GEMM whose B operand (X, C x pixels) the
 * SGEMM packs or reads with a stride of a whole plane per channel.  In
 * NCHW16C the 16 channels of a pixel are one 64-byte line, so a tile of
 * pixels x 16 input channels is a few contiguous lines that each feed
 * every output channel's FMAs by broadcast, and the outputs (and the
 * residual) are whole 64-byte pixels: no packing of X, no strided stores.
 * Session 9 measured -15..-25% against the NCHW GEMM on ResNet-50's
 * 56x56 and 28x28 1x1 convs with this kernel's tiles (bench/README.md).
 *
 * Layouts: X C/16 x P x 16 per image (P pixels), Y and the residual
 * M/16 x P x 16; C and M multiples of 16.  The weights are packed once
 * (kiln__pw16c_pack): blocks of 32 output channels (the last one 16 when
 * M % 32 == 16), each C x 32 (or C x 16) floats, row c the block's
 * weights for input channel c.
 */
#ifndef KILN_OPS_NN_CONV_PW16C_H
#define KILN_OPS_NN_CONV_PW16C_H

#include "kiln/plugin.h"

#include <stdint.h>

/* The tile of the 16c conv kernels (tactics 13 and 16, conv_direct16c.c):
 * up to PT pixels x OB output channels, 2 x 12 accumulators + 2 weight
 * vectors + a broadcast fit AVX-512's 32 registers (session 9's harness
 * measured it); W is prefetched PF_W bytes ahead to L1 (8x to L2; tactic
 * 13 only where W is large: conv_pw16c.c's FAR_W_BYTES). */
#define KILN__16C_PT 12
#define KILN__16C_OB 32

#ifndef KILN__16C_PF_W
#define KILN__16C_PF_W 2048
#endif

/* Pixels of a tile whose input broadcast is a register of its own (one
 * vbroadcastss, then the FMA per weight vector); the others' FMAs take it
 * from memory ({1to16}: load and FMA one fused uop, the load once per FMA).
 * All in registers, a 12 x 32 tile issued 45 uops per input channel for 24
 * FMAs (12 broadcasts, 2 weight loads, 4 prefetches, the loop), more than
 * the 3 a cycle a core's front end gives one of two busy hyperthreads;
 * all from memory, 26 loads per 12 cycles wait on the load ports.  Half
 * each: 37 uops and 22 loads (the prefetches count as loads), 35 and 20
 * where tactic 13 leaves out the L2 prefetch.  ResNet-50's 1x1 convs in bench/pw16c_ab
 * (each round's new over base, medians) 0.92-0.97 with 6, 0.96-1.0 with 0
 * or 12; in the network (1 thread) level in the host's quiet stretches,
 * -2.8% in its slow ones (bench/README.md, session 27).  Tactics 13 and 16. */
#define KILN__16C_REG_PX 6

#if defined(__AVX512F__)
#include <immintrin.h>
/* acc + (the float at x broadcast) * w, the broadcast folded into the FMA. */
static inline __attribute__((always_inline)) __m512 kiln__16c_fma_bcast(const float *x, __m512 w, __m512 acc) {
    __asm__("vfmadd231ps %1%{1to16%}, %2, %0" : "+v"(acc) : "m"(*x), "v"(w));
    return acc;
}

/* Pixel i of a tile (input *x, i and nv constants where inlined): acc[v]
 * += *x * wv for its nv weight vectors, the broadcast in a register for
 * the first KILN__16C_REG_PX pixels of two vectors, in the FMAs otherwise
 * (one vector: no second FMA to share a register broadcast). */
static inline __attribute__((always_inline)) void kiln__16c_px(__m512 acc[2], const float *x, int i, int nv, __m512 w0,
                                                               __m512 w1) {
    if (nv == 2 && i < KILN__16C_REG_PX) {
        const __m512 a = _mm512_set1_ps(*x);
        acc[0] = _mm512_fmadd_ps(a, w0, acc[0]);
        acc[1] = _mm512_fmadd_ps(a, w1, acc[1]);
    } else {
        acc[0] = kiln__16c_fma_bcast(x, w0, acc[0]);
        if (nv == 2) acc[1] = kiln__16c_fma_bcast(x, w1, acc[1]);
    }
}
#endif

typedef struct kiln__pw16c {
    int64_t C, M, P;   /* input channels, output channels (multiples of 16), pixels of one image */
    const float *x;    /* one image: C/16 x P x 16 */
    const float *wp;   /* kiln__pw16c_pack's layout */
    const float *bias; /* M, or NULL */
    const float *res;  /* one image: M/16 x P x 16 added before the Relu, or NULL */
    float *y;          /* one image: M/16 x P x 16 */
    int relu;          /* 1: max(0, .) on store */
    int clamp;         /* 1: then clamped to [lo, hi] (NaN stays NaN) */
    float lo, hi;
    int wmajor;        /* unit order: 1 output blocks outer (W reused across pixel tiles), 0 pixel tiles outer */
    int64_t k0, k1;    /* sum input channels [k0, k1) only (multiples of 16: a K split's share); k1 0: all C */
    const char *next;  /* lines to prefetch (towards L2) spread over the units run: the next layer's */
    int64_t next_lines;/* weights (kiln_exec.next_w), this call's share; NULL / 0: none */
} kiln__pw16c;

/* Floats of W (M x C) packed, and the packing. */
int64_t kiln__pw16c_packed(int64_t M, int64_t C);
void kiln__pw16c_pack(const float *w, int64_t M, int64_t C, float *dst);

/* Work units of one image: (tile of pixels, block of 32 output channels);
 * each writes its outputs once, whatever the split, so every thread count
 * gives the same bits. */
int64_t kiln__pw16c_units(const kiln__pw16c *p);
/* Unit u's pixels [*p0, *p1) and output channels [*m0, *m1). */
void kiln__pw16c_unit(const kiln__pw16c *p, int64_t u, int64_t *p0, int64_t *p1, int64_t *m0, int64_t *m1);
/* Units [u0, u1): bias, sum over C, residual, Relu, one store. */
void kiln__pw16c_run(const kiln__pw16c *p, int64_t u0, int64_t u1);

/* N images over c->exec (image n's X at p->x + n * xs, Y and the residual
 * at + n * ys): kiln__pw16c_run on every unit; unless `fused`, c's
 * epilogue chain then per pixel of 16 channels (fused: c may be any call,
 * its epilogue is not read). */
void kiln__pw16c_exec(const kiln_call *c, const kiln__pw16c *p, int64_t N, int64_t xs, int64_t ys, int fused);

/* Conv tactic 13 on call c (ops/nn/conv.c checked the geometry: N images
 * of C -> M channels over P pixels): X, Y and a residual NCHW16C, W as
 * c->prepacked[1] in kiln__pw16c_pack's layout; the fused chain in the
 * store when it is a residual and/or Relu, else per pixel.  0 or a
 * KILN_E* code. */
int kiln__pw16c_conv(const kiln_call *c, int64_t N, int64_t C, int64_t M, int64_t P);

/* Conv tactic 20 on call c (as kiln__pw16c_conv): the input channels
 * split over the threads, each thread's share of C (the channel blocks
 * its core wrote in a layer before that split its output channels) summed
 * over every pixel and output channel into a partial of its own (the
 * first thread's into Y, the bias included), then the partials added by
 * blocks of output channels, where the fused chain runs.  Less crosses
 * between the cores than X where C is several times M (ResNet-50's
 * layer3 and layer4 1x1 convs from 1024 and 2048 channels).  The sums' order
 * depends on the thread count; at 1 thread, with fewer than 2 blocks of
 * 16 input channels a thread, or where tactic 13 would split the pixels
 * (its threads then read their own pixels: many against M), it is
 * tactic 13.  Its partials are the
 * calling thread's scratch (slot 1).  0 or a KILN_E* code. */
int kiln__pw16c_ksplit(const kiln_call *c, int64_t N, int64_t C, int64_t M, int64_t P);

/* The partial sums of a split over input channels added into p->y (which
 * holds the first share's, its bias included): nparts more, M x P floats
 * each from `part`, then p->res and Relu, or unless `fused` c's chain per
 * pixel; split over c->exec by blocks of 16 output channels.  Tactic 20
 * and kiln::mbconv tactic 6. */
void kiln__pw16c_sum_parts(const kiln_call *c, const kiln__pw16c *p, const float *part, int nparts, int fused);

/* The fused chain of a 16c Conv tactic's call c, when its store applies
 * it (none, or a residual Add and/or Relu, the residual an F32 NCHW16C
 * tensor of Y's size): 1, with *res (or NULL) and *relu; else 0 (*res
 * NULL, *relu 0: the chain runs per pixel). */
int kiln__16c_fused_chain(const kiln_call *c, const float **res, int *relu);

/* Output 0 written over the fused residual (the builder's in place,
 * kiln_quick_op.residual_inplace_tactics) is safe only where the kernel's
 * store applies the residual (`fused`: the chain is the residual Add
 * and/or Relu) and writes each pixel once (not tactic 20): 0, else
 * KILN_EUNSUPPORTED naming c's tactic.  Tactics 13-16, 18 and 19 call it. */
int kiln__16c_inplace_check(const kiln_call *c, int fused);

#endif /* KILN_OPS_NN_CONV_PW16C_H */
