/*
 * ops2.h — shared helpers of the "ops2" built-in operator family (gemm,
 * conv, conv_transpose, norm, pool, resize, pad, softmax, rnn).
 *
 * The ops are written against the public plugin API (plugin.h) only; this
 * header adds the packed SGEMM they share and small utilities.
 *
 * SGEMM: C[M,N] (row-major, ldc) = A[M,K] * B[K,N] (+ bias), GotoBLAS style:
 * B is packed into NR-wide column strips by a callback (a plain matrix, or
 * an implicit im2col gather for convolutions), A into MR-tall row strips,
 * and a register-tiled AVX-512/AVX2 micro-kernel does the work.  The call
 * splits M or N over the thread pool itself; pack buffers are per-thread
 * scratch kept between calls (no allocation in the steady state).
 */
#ifndef KILN_OPS2_H
#define KILN_OPS2_H

#include "kiln/plugin.h"

#include <stddef.h>
#include <stdint.h>

/* Fill dst with columns [n0, n0+nc) and rows [k0, k0+kc) of B, packed in
 * strips of nr columns: dst[(j / nr) * kc * nr + k * nr + j % nr]; the
 * last strip is zero-padded to nr columns. */
typedef void (*kiln__packb_fn)(const void *ud, int64_t k0, int64_t kc, int64_t n0,
                               int64_t nc, int nr, float *dst);

typedef struct kiln__gemm {
    int64_t M, N, K;
    /* A: element (i, k) at a[i * a_rs + k * a_cs] (transposition = strides). */
    const float *a;
    int64_t a_rs, a_cs;
    float alpha;              /* folded into packed A */
    /* B: either a matrix (element (k, j) at b[k * b_rs + j * b_cs]) or a
     * packing callback (packb != NULL). */
    const float *b;
    int64_t b_rs, b_cs;
    kiln__packb_fn packb;
    const void *packb_ud;
    /* Or a "shifted rows" B: element (k, j) at b_shift[b_off[k] + j] (a
     * convolution over a padded input).  The micro-kernel then reads B in
     * place, without packing; b_shift must stay readable NR floats past
     * the last element. */
    const float *b_shift;
    const int64_t *b_off;
    /* C: element (i, j) at c[i * ldc + j]. */
    float *c;
    int64_t ldc;
    int accumulate;           /* 1: C += A*B (C holds beta*C already) */
    const float *bias_row;    /* per-row (M) bias added on store, or NULL */
    int relu;                 /* clamp at 0 after bias (fusion hook) */
    /* Called once for every finished block of C (rows [i0, i1), columns
     * [j0, j0 + n)), while it is still in cache: epilogue fusion.  NULL:
     * none. */
    void (*done)(void *ud, int64_t i0, int64_t i1, int64_t j0, int64_t n);
    void *done_ud;
    /* A already packed by kiln__sgemm_pack_a (alpha folded in; a, a_rs,
     * a_cs still describe it for the matrix-vector paths): the GEMM reads
     * its panels instead of packing A on every call.  NULL: pack as usual. */
    const float *a_packed;
    /* B (a matrix) already packed by kiln__sgemm_pack_b: the GEMM reads its
     * panels instead of packing B.  b, b_rs, b_cs still describe it (the
     * matrix-vector paths read B in place).  NULL: pack as usual. */
    const float *b_packed;
} kiln__gemm;

/* Packed A for M x K (floats; a multiple of 16), and the packing itself:
 * all of g->a (M, K, a_rs, a_cs, alpha) into dst, in the layout the GEMM
 * reads (K blocks, MR-tall strips, zero-padded rows).  Done once for a
 * constant A (kiln_quick_op.prepack); valid only for this build of the
 * library (the layout follows its micro-kernel). */
size_t kiln__sgemm_pack_a_floats(int64_t M, int64_t K);
void kiln__sgemm_pack_a(const kiln__gemm *g, float *dst);
/* The same for a constant B matrix (K x N: b, b_rs, b_cs): K blocks,
 * NR-wide column strips, zero-padded columns. */
size_t kiln__sgemm_pack_b_floats(int64_t K, int64_t N);
void kiln__sgemm_pack_b(const kiln__gemm *g, float *dst);

/* Apply the call's fused epilogue chain (kiln_call_epilogue) to all of
 * output 0 (dense F32): whole planes of dims[2..] for rank >= 3, rows
 * (chan_len 1) for rank 2.  For ops that cannot apply it per tile. */
void kiln__ops2_epilogue_all(const kiln_call *c);
/* The chain over elements [b, e) of a channel-major region: channel k of
 * it (numbered chan0 + k) starts at base + k * plane.  Partial planes at
 * either end are separate calls; whole planes go in one call. */
void kiln__ops2_epilogue_span(const kiln_call *c, float *base, int64_t plane, int64_t b,
                              int64_t e, int64_t chan0);

/* Run the GEMM, splitting the work over exec (may be NULL: serial). */
void kiln__sgemm(const kiln__gemm *g, kiln_exec *exec);
/* Serial GEMM on a sub-range (used inside already parallel kernels). */
void kiln__sgemm_serial(const kiln__gemm *g);
/* Per-thread scratch of at least `floats` floats (64-byte aligned), kept
 * between calls and freed when the thread exits; NULL when out of memory.
 * Slot 0 belongs to the SGEMM; kernels use slots 1.. for their own data
 * (a kernel may call the SGEMM while holding slot 1). */
#define KILN__OPS2_SCRATCH_SLOTS 3
float *kiln__ops2_scratch(int slot, size_t floats);

/* Micro-kernel geometry (for packers that want to know). */
int kiln__sgemm_nr(void);

/* Float tensor element as double / store double (F32, F16, F64, BF16). */
double kiln__ops2_getf(const void *p, kiln_dtype t, int64_t i);
void kiln__ops2_setf(void *p, kiln_dtype t, int64_t i, double v);
/* Integer tensor element (I32/I64/...) as int64. */
int64_t kiln__ops2_geti(const void *p, kiln_dtype t, int64_t i);
/* 1 for F32/F16/F64/BF16. */
int kiln__ops2_is_float(kiln_dtype t);

/* Run an f32 implementation on a call whose float tensors may be F16, F64
 * or BF16: converts those inputs to f32 scratch, runs fn with f32 views
 * and converts outputs back.  Calls fn directly when nothing needs
 * conversion.  Non-float tensors pass through. */
int kiln__ops2_as_f32(const kiln_call *c, int (*fn)(const kiln_call *c));

/* Same, also converting 8/16/32-bit integer tensors (exact in f32 for
 * 8/16-bit; ops that only compare/move values, e.g. MaxPool). */
int kiln__ops2_as_f32_ints(const kiln_call *c, int (*fn)(const kiln_call *c));

/* Tensor is dense row-major (strides match dims, LINEAR)? */
int kiln__ops2_dense(const kiln_tensor *t);

/* Shape helpers. */
/* out = (in + pads - dil*(k-1) - 1) / stride + 1 (floor or ceil). */
const kiln_expr *kiln__ops2_pool_dim(kiln_exprs *x, const kiln_expr *in, int64_t k,
                                     int64_t stride, int64_t pad_total, int64_t dil,
                                     int ceil_mode);

/* Register a quick op under several versions (copies into static storage). */
void kiln__ops2_register_versions(const kiln_quick_op *op, const int *versions, int n);

#endif /* KILN_OPS2_H */
