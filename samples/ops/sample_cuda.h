/*
 * sample_cuda.h — how the sample ops run on the GPU.
 *
 * Each sample op's CUDA implementation (kiln_quick_op.cuda_impl) holds its
 * kernels as CUDA C source in the same file as its CPU code.  kiln compiles
 * a source with NVRTC for the GPU in use the first time it is launched
 * (kiln_cuda_module_get; a module per source and process) and launches it
 * on the call's stream (kiln_cuda_launch): the sample library links no CUDA
 * library and builds where no CUDA toolkit is installed.  Kernels are
 * extern "C" so their names are the entry names.  FP16 is handled as raw
 * 16-bit values converted with the PTX cvt instructions (KS_CUDA_HALF), so
 * no CUDA header is needed either.
 */
#ifndef KILN_SAMPLE_CUDA_H
#define KILN_SAMPLE_CUDA_H

#include <kiln/plugin.h>

/* CUDA C helpers prepended to kernels that handle FP16. */
#define KS_CUDA_HALF                                                                          \
    "__device__ float ks_h2f(unsigned short h) { float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h));" \
    " return f; }\n"                                                                          \
    "__device__ unsigned short ks_f2h(float f) { unsigned short h;"                          \
    " asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); return h; }\n"

/* The module of CUDA C `source`, compiled at its first use and kept in
 * *slot (a static of the caller).  what names it in messages. */
int ks_cuda_module(const char *source, const char *what, kiln_cuda_module **slot, kiln_cuda_module **m);

/* Launch `entry` with one thread per item of [0, n): ceil(n / 256) blocks of
 * 256 threads (nothing when n == 0). */
int ks_cuda_launch_1d(const kiln_call *c, kiln_cuda_module *m, const char *entry, int64_t n, void **args);

/* z = x + y on the GPU (FP32 or FP16, by out[0].dtype): elemwise_add and
 * inplace_add (z may alias x: each element is read before it is written). */
int ks_cuda_add(const kiln_call *c);

#endif
