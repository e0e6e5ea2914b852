/*
 * copy_plan.h — how the CUDA strided copy (kiln__cu_copy, copy.cu) moves a
 * copy: plain C, no CUDA, so CI checks it without a GPU (tests/test_copy_plan.c).
 *
 * kiln__cu_copy_plan reduces "dst (element strides dst_st) = src (src_st)
 * over dims" to the cheapest equivalent form:
 *   1. dims of 1 dropped, dims contiguous in both operands merged
 *      (kiln__cu_iter_init);
 *   2. when the innermost dim is contiguous in both operands, the copy is
 *      re-expressed in units of up to 16 bytes: the widest unit w that
 *      divides the row's byte length, both base addresses and every outer
 *      stride in bytes (so each unit is one aligned load and store);
 *   3. otherwise, when the innermost destination dim is strided in the
 *      source and some other dim is contiguous there (a real transpose,
 *      e.g. NCHW <-> NHWC) and both dims have at least KILN__CU_TILE_MIN
 *      elements, the tiled transpose (kiln_cu_transpose) is chosen.
 * The iterator's `small` flag (32-bit index math) is set when the element
 * count and every offset fit in int32.
 */
#ifndef KILN_OPS_COPY_PLAN_H
#define KILN_OPS_COPY_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "device/cuda/cuda_kernel_args.h"

#define KILN__CU_TILE_MIN 16 /* smaller transposed dims waste most of a 32 x 32 tile */

typedef struct kiln__cu_copy_plan {
    int unit;              /* bytes per moved unit: 1, 2, 4, 8 or 16 */
    int transpose;         /* 1: kernel transpose_<unit> over tr; 0: copy_<unit> over it */
    kiln_cu_iter it;       /* the copy in units (transpose == 0) */
    kiln_cu_transpose tr;  /* transpose == 1 */
} kiln__cu_copy_plan;

/* Fills *p for a copy of es-byte elements (es 1, 2, 4 or 8) over nd <=
 * KILN_CU_MAX_DIMS dims; src and dst are the base addresses (only their
 * alignment matters here). */
void kiln__cu_copy_plan_make(int nd, const int64_t *dims, size_t es, uintptr_t src, const int64_t *src_st,
                             uintptr_t dst, const int64_t *dst_st, kiln__cu_copy_plan *p);

#endif /* KILN_OPS_COPY_PLAN_H */
