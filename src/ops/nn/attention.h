/*
 * attention.h — kiln::attention's geometry, shared by its CPU reference
 * (attention.c), its CUDA launcher (attention_cuda.c) and the builder
 * rewrite that makes Q, K, V strided views of the projections
 * (builder/attn_views.c).
 *
 * Views (attribute `views`, 3 x KILN_ATTN_VIEW_INTS ints, for Q, K, V):
 * input o is any contiguous tensor and the operand is the 4-D view
 * [B, H, S, D] into it.  Per operand:
 *   [0], [1]            element offset = [1] * stride of input axis [0]
 *   [2 + 3a]            dim a: >= 0 the input's dim of that axis, else the
 *                       constant -1 - value
 *   [3 + 3a], [4 + 3a]  element stride of dim a = [4 + 3a] * stride of input axis [3 + 3a]
 * (a = 0..3: B, H, S, D; K's view is K, not K^T; Q's and V's D stride is
 * 1).  `y_perm` (4 ints, with views): the output is [B, H, Sq, Dv]
 * transposed by it (ONNX Transpose's perm), so the op writes the layout
 * the next layer reads.
 *
 * Input 3 (optional): an additive mask, rank <= 4, broadcast (aligned
 * right) to the scores [B, H, Sq, Sk], added after the scale.
 */
#ifndef KILN_OPS_ATTENTION_H
#define KILN_OPS_ATTENTION_H

#include "device/cuda/cuda_kernel_args.h"
#include "kiln/plugin.h"

#define KILN_ATTN_VIEW_INTS 14

/* The call as the kernels see it: p (all but scale_log2 and vec) and each
 * input's element offset off[3].  Checks dims and strides against each
 * other; returns 0 or a KILN_E* code with a message. */
int kiln__attn_geometry(const kiln_call *c, kiln_cu_flash *p, int64_t off[3]);

#endif
