/*
 * cuda_kernel_args.h — tensor metadata passed by value to libkiln's CUDA
 * kernels.  Included by the .cu files (nvcc) and by the host launchers
 * (plain C, src/ops/<family>/<family>_cuda.c), so it holds only C types from
 * <stdint.h>: both compilers lay the structs out identically.
 */
#ifndef KILN_CUDA_KERNEL_ARGS_H
#define KILN_CUDA_KERNEL_ARGS_H

#include <stdint.h>

#define KILN_CU_MAX_DIMS 8

/* Dims and strides (in elements) of one tensor, up to 8-D. */
typedef struct kiln_cu_shape {
    int32_t ndim;
    int64_t dims[KILN_CU_MAX_DIMS];
    int64_t strides[KILN_CU_MAX_DIMS];
} kiln_cu_shape;

#endif /* KILN_CUDA_KERNEL_ARGS_H */
