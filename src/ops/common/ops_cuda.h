/*
 * ops_cuda.h — helpers of the built-in ops' CUDA launchers
 * (src/ops/<family>/<family>_cuda.c: plain C, no CUDA headers).
 *
 * A launcher reads the kiln_call (device pointers in c->in/out, dims,
 * attributes), fills the by-value argument structs of
 * device/cuda/cuda_kernel_args.h, picks the kernel variant by name
 * ("<kernel>_<dtype suffix>") and enqueues it with kiln__cuda_launch on
 * the call's stream.  It never synchronizes and never reads device memory;
 * small integer inputs it needs on the host (Clip bounds, Pad pads, ...)
 * are declared host inputs of the op (kiln_quick_op.cuda_host_inputs).
 */
#ifndef KILN_OPS_CUDA_H
#define KILN_OPS_CUDA_H

#include "device/cuda/cuda_int.h"
#include "device/cuda/cuda_kernel_args.h"
#include "kiln/plugin.h"

#include <stdint.h>

/* Row-major contiguous (strides as dims imply; dims of 1 ignored) or empty? */
int kiln__cu_contig(const kiln_tensor *t);
/* Is input i present (not an absent optional)? */
int kiln__cu_has_in(const kiln_call *c, int i);
/* Element i of a host tensor (a cuda_host_inputs input) of any numeric
 * dtype, as double / int64. */
double kiln__cu_host_f64(const kiln_tensor *t, int64_t i);
int64_t kiln__cu_host_i64(const kiln_tensor *t, int64_t i);

/* Attribute values by name, or `def` when the op's schema lacks the name
 * or the value is absent (the public accessors assert the name exists;
 * launchers serving several op versions ask for names some lack). */
int64_t kiln__cu_attr_int(const kiln_call *c, const char *name, int64_t def);
double kiln__cu_attr_float(const kiln_call *c, const char *name, double def);
const char *kiln__cu_attr_str(const kiln_call *c, const char *name, const char *def);
/* Integer array: its count, or -1 (and *v NULL) when absent. */
int64_t kiln__cu_attr_ints(const kiln_call *c, const char *name, const int64_t **v);

/* Kernel-name suffix of dtype t ("f32", "f16", "bf16", "f64", "i8", "i16",
 * "i32", "i64", "u8", "u16", "u32", "u64", "bool"), or NULL for the types no
 * GPU kernel takes (each launcher checks the types its kernels have). */
const char *kiln__cu_suffix(kiln_dtype t);
/* Element-size suffix for the byte-moving kernels ("1", "2", "4", "8") or
 * NULL. */
const char *kiln__cu_size_suffix(kiln_dtype t);

/* Where a kernel that checks its data (indices) reports what it finds:
 * the context's fault record and this launch's tag (c->layer, the
 * engine's name string of the layer), read back by the
 * context at its next sync (engine/context.c).  No record outside a
 * context run. */
kiln_cu_check kiln__cu_check(const kiln_call *c);

/* "<op>: no CUDA kernel for type <t>" as KILN_EUNSUPPORTED. */
int kiln__cu_type_err(const char *op, kiln_dtype t);

/* Launch `base`_`suffix` (suffix NULL: base as is) with a 1-D grid of
 * 256-thread blocks covering n elements (grid-stride kernels: the grid is
 * capped, each thread loops).  n == 0 launches nothing. */
int kiln__cu_launch_n(const kiln_call *c, const char *base, const char *suffix, int64_t n, void **args);
/* Launch `base`_`suffix` with `blocks` blocks of `threads` threads (one
 * block per row/plane/output kernels).  blocks == 0 launches nothing. */
int kiln__cu_launch_blocks(const kiln_call *c, const char *base, const char *suffix, int64_t blocks,
                           unsigned threads, void **args);
/* Threads per block for a block reducing n elements: a multiple of 32
 * between 32 and 256. */
unsigned kiln__cu_block_for(int64_t n);

/* Iteration space of rank ndo (dims dout) with nop (<= 3) operands whose
 * element strides in it are st[k] (0 = broadcast); coalesces contiguous
 * dims, drops dims of 1 and sets `small`. */
void kiln__cu_iter_init(kiln_cu_iter *it, int ndo, const int64_t *dout, int nop, const int64_t *const *st);
/* Strides of a tensor of rank nd (dims d) broadcast into rank ndo (dims
 * dout), from its own element strides s: 0 where it broadcasts.  Returns
 * KILN_ESHAPE (naming op and the dim) when d does not broadcast to dout:
 * symbolic dims that agreed at build may differ in a run. */
int kiln__cu_bcast_strides(const char *op, int ndo, const int64_t *dout, int nd, const int64_t *d, const int64_t *s,
                           int64_t *out);
/* Row-major contiguous element strides of dims. */
void kiln__cu_contig_strides(int nd, const int64_t *dims, int64_t *st);

/* Strided copy of elements (kernel copy_<size>): dst (element strides
 * dst_st) = src (src_st) over dims.  Pointers may be offset views. */
int kiln__cu_copy(const kiln_call *c, kiln_dtype t, int nd, const int64_t *dims, const void *src,
                  const int64_t *src_st, void *dst, const int64_t *dst_st);

/* Epilogue activation of a fused chain or an activation op: the
 * kiln_cu_act code for an ONNX op name, with its float parameters from
 * attributes a (defaults as ONNX); -1 if the op is no unary activation. */
int kiln__cu_act_of(const char *op, const kiln_attrs *a, float *pa, float *pb);
/* 1 if kiln_cu_act code act takes no parameters (a, b unused): such an
 * activation may carry a scale and shift after it (KILN_CU_ACT_THEN_AFFINE). */
int kiln__cu_act_plain(int act);
/* The fused activation of a GPU layer (c->epilogue: engine/epilogue.c):
 * its kiln_cu_act code and parameters; KILN_CU_ACT_NONE when none. */
int kiln__epi_cuda_act(const void *epilogue, float *a, float *b);
/* A GPU MatMul's fused bias (builder/fuse.c): the device pointer of the
 * constant (one value per column, the output's type) and *n its length;
 * NULL and 0 without one. */
const void *kiln__epi_cuda_bias(const void *epilogue, int64_t *n);
/* 1 if the chain is GPU data (bias and/or activation), not host callbacks. */
int kiln__epi_is_cuda(const void *epilogue);

#endif /* KILN_OPS_CUDA_H */
