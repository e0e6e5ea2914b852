/*
 * conv_dw_math.h — the tile of the depthwise Conv kernels (conv_dw.cu), shared
 * with their launcher (conv_cuda.c), which checks that a layer's window
 * fits before it runs tactic 3.  (Headers named like this one are
 * dependencies of the fatbin in cmake/cuda_kernels.cmake.)
 */
#ifndef KILN_OPS_CONV_DW_MATH_H
#define KILN_OPS_CONV_DW_MATH_H

#define DW_TW 32               /* output tile: DW_TH rows x DW_TW columns of one plane */
#define DW_TH 32
#define DW_R 4                 /* outputs per thread: 256 threads = DW_TW x DW_TH / DW_R */
#define DW_THREADS 256
#define DW_SMEM (69 * 69)      /* floats of input window: a 7x7 stride-2 window of the tile */
#define DW_KMAX 49             /* weights of one plane */

#endif
