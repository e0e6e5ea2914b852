/*
 * sgemm.h — the CPU's single-precision GEMM (sgemm.c), used by Conv,
 * ConvTranspose, Gemm/MatMul, RNNs and the other float kernels that reduce
 * to matrix products, plus the per-thread scratch those kernels share.
 *
 * C[M,N] (row-major, ldc) = A[M,K] * B[K,N] (+ bias), GotoBLAS style: B is
 * packed into NR-wide column strips by a callback (a plain matrix, or an
 * implicit im2col gather for convolutions), A into MR-tall row strips, and
 * a register-tiled AVX-512/AVX2 micro-kernel does the work.  The call
 * splits M or N over the thread pool itself; pack buffers are per-thread
 * scratch kept between calls (no allocation in the steady state).
 */
#ifndef KILN_DEVICE_CPU_SGEMM_H
#define KILN_DEVICE_CPU_SGEMM_H

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
    /* 1: pack the shifted rows into NR-wide strips before use (a memcpy of
     * NR floats per row) instead of reading them in place: where many row
     * tiles reuse a strip, aligned loads from a packed strip in L1 beat
     * unaligned ones spread over three lines per row. */
    int b_shift_pack;
    /* C: element (i, j) at c[i * ldc + j]. */
    float *c;
    int64_t ldc;
    int accumulate;           /* 1: C += A*B (C holds beta*C already) */
    const float *bias_row;    /* per-row (M) bias added on store, or NULL */
    int relu;                 /* clamp at 0 after bias (and res) (fusion hook) */
    /* A residual of C's shape added on store, before relu: element (i, j)
     * at res[i * ldr + j] (a Conv's fused residual Add), or NULL. */
    const float *res;
    int64_t ldr;
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
    /* 1: with several threads, split K (whole KC blocks) instead of C's
     * rows (where the GEMM would split rows): each thread multiplies its own range of K (the first thread
     * the first, as a row-split producer wrote those rows of B) into a
     * partial C of its own, then the threads sum the partials by rows and
     * apply bias, residual, relu and `done` there.  Each thread reads only
     * its share of B (from its own L2 when the layer before split its
     * output rows the same way) and of A; the sums' order then depends on
     * the thread count.  Taken only with B a matrix or shifted rows, not
     * prepacked, and no accumulate; otherwise the usual split. */
    int split_k;
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

/* Run the GEMM, splitting the work over exec (may be NULL: serial). */
void kiln__sgemm(const kiln__gemm *g, kiln_exec *exec);
/* Serial GEMM on a sub-range (used inside already parallel kernels). */
void kiln__sgemm_serial(const kiln__gemm *g);
/* Per-thread scratch of at least `floats` floats (64-byte aligned), kept
 * between calls and freed when the thread exits; NULL when out of memory.
 * Slot 0 belongs to the SGEMM; kernels use slots 1.. for their own data
 * (a kernel may call the SGEMM while holding slot 1); slot 3 holds the
 * SGEMM's K-split partials (split_k) or, in each thread, the A it packs
 * once for a column split of a prepacked B (dyn_task). */
#define KILN__CPU_SCRATCH_SLOTS 4
float *kiln__cpu_scratch(int slot, size_t floats);
/* kiln__cpu_scratch for a kernel that cannot run without it: out of
 * memory it also records the failure (naming `what`) for the running
 * layer, which then fails with it (kiln__misuse; a worker's reaches the
 * caller through the pool), so the output is never left unwritten with a
 * success status.  A kernel with a fallback calls kiln__cpu_scratch. */
float *kiln__cpu_scratch_or_fail(int slot, size_t floats, const char *what);

/* Micro-kernel geometry (for packers that want to know). */
int kiln__sgemm_nr(void);
int kiln__sgemm_kc(void); /* depth of a K block (split_k splits whole ones) */

#endif /* KILN_DEVICE_CPU_SGEMM_H */
