/*
 * ops_util.h — what the built-in operators share, beside the public API.
 *
 * Ops are written against the public headers (kiln/plugin.h, kiln/kiln.h)
 * like any plugin; this one internal header adds only what many of them
 * need and the public API does not offer:
 *   - the library allocator and error helpers (core/alloc_error.h) and
 *     tensor views (core/tensor_view.h),
 *   - dtype lists as X-macros, so one kernel body generates a variant per
 *     dtype (float16/bfloat16 are loaded into float and stored back),
 *   - element and bulk conversions between any dtype and double/int64
 *     (the one place ops load and store elements of a runtime dtype),
 *   - reading integer inputs known at build time (Reshape shape, Slice
 *     starts, Reduce axes ...) from kiln_desc data or symbolic values,
 *   - a small broadcasting iterator for up to three operands, strided copy,
 *   - the float-kernel helpers: running an f32 kernel on f16/f64/bf16
 *     tensors, applying fused epilogues, pooling output dims, registering
 *     one quick op under several opset versions.
 * The CPU GEMM has its own header, device/cpu/sgemm.h.
 */
#ifndef KILN_OPS_UTIL_H
#define KILN_OPS_UTIL_H

/* Upper bound of a window geometry attribute (kernel size, stride,
 * dilation, pad, group): far above any real model, low enough that the
 * shape arithmetic on dims (at most 2^62 after load checks) cannot overflow
 * int64 whatever a crafted engine or model holds. */
#define KILN_OPS_MAX_GEOM ((int64_t)1 << 30)

#include "core/alloc_error.h"
#include "core/tensor_view.h"
#include "kiln/kiln.h"
#include "kiln/plugin.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define OPS_NS "ai.onnx"

/* ---- element load/store for the type lists ------------------------------- */
#define OPS_LD_ID(v) (v)
#define OPS_ST_ID(v) (v)
#if defined(__F16C__)
/* hardware conversions (round to nearest even, as kiln_f32_to_f16) */
#include <immintrin.h>
#define OPS_LD_H(v) _cvtsh_ss(v)
#define OPS_ST_H(v) _cvtss_sh((float)(v), 0)
#else
#define OPS_LD_H(v) kiln_f16_to_f32(v)
#define OPS_ST_H(v) kiln_f32_to_f16((float)(v))
#endif
#define OPS_LD_BF(v) kiln_bf16_to_f32(v)
#define OPS_ST_BF(v) kiln_f32_to_bf16((float)(v))

/* X(SUFFIX, storage type, compute type, load, store, A) for each dtype of a
 * class; A is passed through (the op being generated). */
#define OPS_TYPES_FLOAT(X, A)                                               \
    X(F32, float, float, OPS_LD_ID, OPS_ST_ID, A)                           \
    X(F64, double, double, OPS_LD_ID, OPS_ST_ID, A)                         \
    X(F16, uint16_t, float, OPS_LD_H, OPS_ST_H, A)                          \
    X(BF16, uint16_t, float, OPS_LD_BF, OPS_ST_BF, A)
#define OPS_TYPES_SINT(X, A)                                                \
    X(I8, int8_t, int8_t, OPS_LD_ID, OPS_ST_ID, A)                          \
    X(I16, int16_t, int16_t, OPS_LD_ID, OPS_ST_ID, A)                       \
    X(I32, int32_t, int32_t, OPS_LD_ID, OPS_ST_ID, A)                       \
    X(I64, int64_t, int64_t, OPS_LD_ID, OPS_ST_ID, A)
#define OPS_TYPES_UINT(X, A)                                                \
    X(U8, uint8_t, uint8_t, OPS_LD_ID, OPS_ST_ID, A)                        \
    X(U16, uint16_t, uint16_t, OPS_LD_ID, OPS_ST_ID, A)                     \
    X(U32, uint32_t, uint32_t, OPS_LD_ID, OPS_ST_ID, A)                     \
    X(U64, uint64_t, uint64_t, OPS_LD_ID, OPS_ST_ID, A)
#define OPS_TYPES_INT(X, A) OPS_TYPES_SINT(X, A) OPS_TYPES_UINT(X, A)
#define OPS_TYPES_NUM(X, A) OPS_TYPES_FLOAT(X, A) OPS_TYPES_INT(X, A)
#define OPS_TYPES_BOOL(X, A) X(BOOL, uint8_t, uint8_t, OPS_LD_ID, OPS_ST_ID, A)

/* ---- dtype classes ------------------------------------------------------- */
static inline int kiln__ops_is_float(kiln_dtype t) {
    return t == KILN_DTYPE_F32 || t == KILN_DTYPE_F64 || t == KILN_DTYPE_F16 ||
           t == KILN_DTYPE_BF16;
}
static inline int kiln__ops_is_sint(kiln_dtype t) {
    return t == KILN_DTYPE_I8 || t == KILN_DTYPE_I16 || t == KILN_DTYPE_I32 ||
           t == KILN_DTYPE_I64;
}
static inline int kiln__ops_is_uint(kiln_dtype t) {
    return t == KILN_DTYPE_U8 || t == KILN_DTYPE_U16 || t == KILN_DTYPE_U32 ||
           t == KILN_DTYPE_U64;
}
static inline int kiln__ops_is_int(kiln_dtype t) {
    return kiln__ops_is_sint(t) || kiln__ops_is_uint(t);
}
static inline int kiln__ops_is_num(kiln_dtype t) {
    return kiln__ops_is_float(t) || kiln__ops_is_int(t);
}
/* Any dtype with a fixed element size (everything but STRING/UNDEFINED). */
static inline int kiln__ops_is_any(kiln_dtype t) {
    return kiln__ops_is_num(t) || t == KILN_DTYPE_BOOL;
}

/* Check that input i of an op has a dtype of a class; else KILN_ETYPE with a
 * message naming op, input and both types.  `cls` is one of the predicates
 * above, `what` its name ("a float type"). */
int kiln__ops_check_type(const kiln_shape_ctx *c, const char *op, int i,
                          int (*cls)(kiln_dtype), const char *what);
/* Inputs i and j must have the same dtype. */
int kiln__ops_check_same(const kiln_shape_ctx *c, const char *op, int i, int j);
/* ONNX's one type constraint "T" over several inputs: every present input
 * whose bit is set in `mask` has input 0's dtype.  Kernels read those
 * inputs as input 0's type (an engine file's types are checked by the
 * shape function again before it runs). */
int kiln__ops_check_same_mask(const kiln_shape_ctx *c, const char *op, unsigned mask);

/* Window geometry (Conv, ConvTranspose, pools): each of v[0..n) (attribute
 * `name`, axis i) must lie in [lo, KILN_OPS_MAX_GEOM] (lo = 1 for kernel
 * sizes, strides, dilations, group; 0 for pads; -KILN_OPS_MAX_GEOM where
 * negative values mean cropping: ConvTranspose's pads, output_padding).
 * Else KILN_EATTR "op: name[i] = v is out of range [lo, 2^30]". */
int kiln__ops_check_geom(const char *op, const char *name, const int64_t *v, int n, int64_t lo);

/* A fused op's geometry attributes (kiln::mbconv, kiln::stempool): for each
 * f[k], exactly f[k].n ints of attribute f[k].name into f[k].dst, each
 * checked by kiln__ops_check_geom(op, name, ., f[k].lo).  Else KILN_EATTR
 * "op: name: expected n values, found m" or check_geom's message. */
typedef struct kiln__ops_geom_attr {
    const char *name;
    int64_t *dst;
    int n;
    int64_t lo;
} kiln__ops_geom_attr;
int kiln__ops_geom_attrs(const kiln_attrs *a, const char *op, const kiln__ops_geom_attr *f, int nf);

/* A kiln_quick_op.cuda_check by type, for ops whose slots cuda_formats
 * cannot list (variadic outputs, index and scale inputs of other types):
 * 0 when input 0 and output 0 have types in `types` (a "FP32|FP16|..."
 * list, the KILN_CU_T_* strings), else KILN_EUNSUPPORTED naming op,
 * position and type. */
int kiln__ops_cuda_types(const kiln_shape_ctx *c, const char *op, const char *types);
/* A cuda_check by window rank (Conv, pools): 0 when input 0 has lo..hi
 * spatial dims (rank - 2), else KILN_EUNSUPPORTED saying what the CUDA
 * kernels take. */
int kiln__ops_cuda_spatial(const kiln_shape_ctx *c, const char *op, int lo, int hi);

/* Check that input i has a fixed-size dtype (numeric or bool). */
static inline int kiln__ops_check_any(const kiln_shape_ctx *c, const char *op, int i) {
    return kiln__ops_check_type(c, op, i, kiln__ops_is_any, "a numeric or bool type");
}

/* ---- conversions --------------------------------------------------------- */
void kiln__ops_to_f64(const void *src, kiln_dtype t, double *dst, int64_t n);
void kiln__ops_from_f64(const double *src, kiln_dtype t, void *dst, int64_t n);
void kiln__ops_to_i64(const void *src, kiln_dtype t, int64_t *dst, int64_t n);
void kiln__ops_from_i64(const int64_t *src, kiln_dtype t, void *dst, int64_t n);
/* ONNX Cast semantics between any two fixed-size dtypes (integers go
 * through int64, floats through double; NaN/out of range to int saturate
 * instead of invoking undefined behaviour). */
void kiln__ops_cast(const void *src, kiln_dtype st, void *dst, kiln_dtype dt, int64_t n);
/* Element i of a tensor of dtype t as double / int64 (floats to int64
 * saturate, NaN -> 0), and element i set from a double (Cast semantics);
 * 0 / no-op for STRING and UNDEFINED. */
double kiln__ops_get_f64(const void *p, kiln_dtype t, int64_t i);
int64_t kiln__ops_get_i64(const void *p, kiln_dtype t, int64_t i);
void kiln__ops_set_f64(void *p, kiln_dtype t, int64_t i, double v);

/* ---- build-time values --------------------------------------------------- */
/* numel of a desc when all dims are constant, else -1. */
int64_t kiln__ops_desc_numel(const kiln_desc *d);
/* The integer values of desc d when known as constants (data, or values
 * that are all constant).  Returns the count (<= max) or -1 if unknown or
 * longer than max. */
int64_t kiln__ops_const_ints(const kiln_desc *d, int64_t *v, int64_t max);
/* The values of an integer desc as expressions (symbolic values, or
 * constants from data when at most KILN_MAX_VALUES).  Count or -1. */
int kiln__ops_value_exprs(kiln_exprs *x, const kiln_desc *d, const kiln_expr **v);
/* Like const_ints for input i, but an unknown value is an error naming the
 * op and input ("Reshape: input 1 'shape' must be known at build time ..."). */
int kiln__ops_need_ints(const kiln_shape_ctx *c, const char *op, int i,
                         const char *iname, int64_t *v, int64_t max, int64_t *n);
/* Normalize an axis in [-rank, rank) to [0, rank); error names op/attr. */
int kiln__ops_axis(const char *op, const char *what, int64_t axis, int rank, int *out);
/* Does the layer have input i (present, not an absent optional)? */
static inline int kiln__ops_has_in(const kiln_shape_ctx *c, int i) {
    return i < c->nin && c->in[i].dtype != KILN_DTYPE_UNDEFINED;
}
static inline int kiln__ops_call_has_in(const kiln_call *c, int i) {
    return i < c->nin && c->in[i].dtype != KILN_DTYPE_UNDEFINED && c->in[i].data;
}
/* All dims constant -> 1 and dims into v. */
int kiln__ops_const_dims(const kiln_desc *d, int64_t *v);
/* Set an output desc: dtype t, nd dims d[0..nd). */
static inline void kiln__ops_set_dims(kiln_desc *o, kiln_dtype t, int nd, const kiln_expr *const *d) {
    o->dtype = t;
    o->ndim = nd;
    for (int i = 0; i < nd; i++) o->dims[i] = d[i];
}
/* Carry the symbolic values of input `in` to output `out` (shape ops:
 * Shape -> Cast -> Reshape stays static); none when unknown. */
void kiln__ops_copy_values(kiln_shape_ctx *c, int in, int out);
/* Kernel: output 0 = input 0 (a copy unless the builder aliased them). */
int kiln__ops_copy_input(const kiln_call *c);

/* ---- broadcasting --------------------------------------------------------- */
/* Iteration over an output of rank nd with up to 3 operands.  Dims are
 * coalesced; the last dim is the inner loop. */
typedef struct kiln__ops_bc {
    int nd, nop;
    int64_t dims[KILN_MAX_DIMS];
    int64_t st[3][KILN_MAX_DIMS]; /* element strides per operand (0 = broadcast) */
    int64_t rows;                 /* product of dims[0..nd-2] */
} kiln__ops_bc;
/* Operand k of rank ndk with dims dk broadcast into out dims (rank ndo). */
void kiln__ops_bc_init(kiln__ops_bc *b, int ndo, const int64_t *dout, int nop,
                        const int *ndk, const int64_t *const *dk);
/* Run-time check that operand k (rank nd, dims d) broadcasts to dout:
 * symbolic dims that agreed at build time may still differ in a run. */
int kiln__ops_bc_check(const char *op, int k, int ndo, const int64_t *dout, int nd, const int64_t *d);
/* Element offsets of each operand at the start of row r. */
void kiln__ops_bc_row(const kiln__ops_bc *b, int64_t r, int64_t *off);

/* Run fn over [0, n) directly when small, else split on the pool. */
void kiln__ops_par(kiln_exec *e, int64_t n, int64_t grain, kiln_range_fn fn, void *ud);

/* The threads' split of an image-like tensor: `outer` planes of `plane`
 * items of `item` elements each (an NCHW tensor's N x C planes of H x W
 * elements, or of H rows of W), fn called on ranges [b, e) of the flat
 * items, each inside one plane, thread t taking the t-th share of every
 * plane.  That is the split
 * of a 1x1 conv's GEMM (its columns: each plane's pixels), of Winograd's
 * split mode (bands of rows) and of the depthwise rows (bands of rows):
 * a memory-bound op between them so reads what its producer wrote on its
 * own core, and its consumer what it wrote (two dies: half of every read
 * from the other die's cache otherwise).  Planes of fewer than
 * KILN__OPS_PLANE_MIN elements, or one plane, split the flat range as
 * kiln__ops_par (grain `grain` items). */
#define KILN__OPS_PLANE_MIN 4096
void kiln__ops_par_planes(kiln_exec *e, int64_t outer, int64_t plane, int64_t item, int64_t grain,
                          kiln_range_fn fn, void *ud);
/* kiln__ops_par_planes over the flat elements of a contiguous tensor of
 * rank nd, dims d: rank 3 and more, planes of its last two dims. */
void kiln__ops_par_image(kiln_exec *e, int nd, const int64_t *d, int64_t grain, kiln_range_fn fn, void *ud);

/* dst (contiguous, dims[nd]) = src elements at sum(idx[i] * st[i]) (element
 * strides, may be negative or 0); es = element size.  Threads when large. */
void kiln__ops_strided_copy(kiln_exec *e, void *dst, const void *src, size_t es, int nd,
                             const int64_t *dims, const int64_t *st);

/* Row-major contiguous strides check of a kernel tensor. */
int kiln__ops_contig(const kiln_tensor *t);

/* Dense row-major LINEAR tensor (kiln__ops_contig and no blocked layout)? */
static inline int kiln__ops_dense(const kiln_tensor *t) {
    return t->format == KILN_FORMAT_LINEAR && kiln__ops_contig(t);
}

/* ---- shape inference shared by op families ---------------------------------- */
/* numpy matmul shapes of inputs ia (A) and ib (B): rank-1 operands
 * promoted and dropped again, batch dims broadcast; output 0 gets
 * out_type.  KILN_ESHAPE naming op when ranks are 0 or constant inner
 * dims differ (MatMul, MatMulInteger, QLinearMatMul). */
int kiln__ops_matmul_shape(kiln_shape_ctx *c, const char *op, int ia, int ib, kiln_dtype out_type);

/* ---- padding outputs -------------------------------------------------------- */
/* Ops with more declared outputs than a node uses (Loop, Scan, SequenceMap,
 * OptionalGetElement on a sequence): outputs [from, nout) are unused F32
 * scalars at build time (fill) and written as 0 at run time (zero). */
void kiln__ops_fill_unused(kiln_shape_ctx *c, int from);
void kiln__ops_zero_unused(const kiln_call *c, int from);

/* ---- float kernels --------------------------------------------------------- */
/* Run an f32 implementation on a call whose float tensors may be F16, F64
 * or BF16: converts those inputs to f32 scratch, runs fn with f32 views
 * and converts outputs back.  Calls fn directly when nothing needs
 * conversion.  Non-float tensors pass through. */
int kiln__ops_as_f32(const kiln_call *c, int (*fn)(const kiln_call *c));
/* Same, also converting 8/16/32-bit integer tensors (exact in f32 for
 * 8/16-bit; ops that only compare/move values, e.g. MaxPool). */
int kiln__ops_as_f32_ints(const kiln_call *c, int (*fn)(const kiln_call *c));

/* Apply the call's fused epilogue chain (kiln_call_epilogue) to all of
 * output 0 (dense F32): whole planes of dims[2..] for rank >= 3, rows
 * (chan_len 1) for rank 2.  For ops that cannot apply it per tile. */
void kiln__ops_epilogue_all(const kiln_call *c);
/* The chain over elements [b, e) of a channel-major region: channel k of
 * it (numbered chan0 + k) starts at base + k * plane.  Partial planes at
 * either end are separate calls; whole planes go in one call. */
/* formats_fn of a CPU elementwise op whose activations all have the output's
 * dims: the default row (the shape function's types, LINEAR) and, where
 * every input is an F32 activation (no constant) of rank 4 and a static
 * channel count that is a multiple of 16, the same op in NCHW16C on every
 * position: with no padding lanes the element order is the same on all
 * sides, so the LINEAR kernel is exact.  A chain of NCHW16C convs (Conv
 * tactic 13) goes on through a Relu or a residual Add instead of two
 * reformats (fusion then folds them into the conv). */
int kiln__ops_ew16c_formats(const kiln_shape_ctx *c, kiln_combo *out, int max);
/* The layer's dtypes as a combination row's types ("FP32, FP32, ..."), in a
 * thread-local buffer (valid until the next call on this thread); NULL
 * when it has more positions than KILN_MAX_IO. */
const char *kiln__ops_types_row(const kiln_shape_ctx *c);
void kiln__ops_epilogue_span(const kiln_call *c, float *base, int64_t plane, int64_t b,
                             int64_t e, int64_t chan0);
/* The sgemm `done` hook (device/cpu/sgemm.h; done_ud: a kiln__ops_epi_rows)
 * of a GEMM whose row i is output channel chan0 + i, a plane of `plane`
 * values at y + i * plane (Conv, kiln::mbconv): the epilogue per finished
 * tile, whole planes in one call. */
typedef struct kiln__ops_epi_rows {
    const kiln_call *c;
    float *y;
    int64_t plane, chan0;
} kiln__ops_epi_rows;
void kiln__ops_epi_rows_done(void *ud, int64_t i0, int64_t i1, int64_t j0, int64_t n);

/* out = (in + pads - dil*(k-1) - 1) / stride + 1 (floor or ceil). */
const kiln_expr *kiln__ops_pool_dim(kiln_exprs *x, const kiln_expr *in, int64_t k,
                                    int64_t stride, int64_t pad_total, int64_t dil,
                                    int ceil_mode);

/* Register a quick op under several versions (copies into static storage). */
void kiln__ops_register_versions(const kiln_quick_op *op, const int *versions, int n);

#endif /* KILN_OPS_UTIL_H */
