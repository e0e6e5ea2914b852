/*
 * attention_avx512.h — kiln::attention's register-blocked CPU kernel
 * (tactic 3, attention.c): one head's query rows with both products as
 * 6-row x 64-column AVX-512 tiles over K^T and V copied once per head into
 * contiguous, 64-byte aligned scratch, the softmax on the score rows in L1
 * between them.  No SGEMM call and no SGEMM packing per head: through the
 * SGEMM (tactics 1, 2) BERT-base's heads (128 x 128 x 64) ran at ~55% of
 * the FMA peak, these tiles run at ~95% of it (bench/attn_ab.sh).
 */
#ifndef KILN_OPS_ATTENTION_AVX512_H
#define KILN_OPS_ATTENTION_AVX512_H

#include "device/cuda/cuda_kernel_args.h"

#include <stddef.h>

/* 1 where the kernel is built (an AVX-512 target), else 0 (the op then
 * runs tactic 3 as tactic 1). */
int kiln__attn_tile_available(void);

/* Floats of scratch (64-byte aligned) that kiln__attn_tile_head needs for
 * p's shapes with blocks of `rows` query rows. */
size_t kiln__attn_tile_scratch(const kiln_cu_flash *p, int64_t rows);

/* One (batch, head)'s operands: Q [Sq, D], K, V [Sk, Dv], Y [Sq, Dv]
 * (strides from the kiln_cu_flash: qs[2], ks[2] and kd, vs[2], ys[2];
 * Q's, V's and Y's columns contiguous) and its [Sq, Sk] mask (strides
 * ms[2], ms[3]) or NULL. */
typedef struct kiln__attn_head {
    const float *q, *k, *v, *mask;
    float *y;
} kiln__attn_head;

/* Y rows [i0, i1) of head h (Sk >= 1). */
void kiln__attn_tile_head(const kiln_cu_flash *p, const kiln__attn_head *h, float scale,
                          int64_t i0, int64_t i1, int64_t rows, float *scratch);

#endif
