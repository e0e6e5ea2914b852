/*
 * ops1.h — shared helpers of the "ops1" built-in ONNX operators
 * (elementwise, activation, reduce and the tensor/generator/index ops).
 *
 * The ops are written against the public plugin API (plugin.h) only; this
 * header adds what several of them need:
 *   - dtype lists as X-macros, so one kernel body generates a variant per
 *     dtype (float16/bfloat16 are loaded into float and stored back),
 *   - bulk conversions between any dtype and double/int64 (reductions,
 *     Cast, index inputs),
 *   - reading integer inputs known at build time (Reshape shape, Slice
 *     starts, Reduce axes ...) from kiln_desc data or symbolic values,
 *   - a small broadcasting iterator for up to three operands.
 */
#ifndef KILN_OPS1_H
#define KILN_OPS1_H

#include "kiln/plugin.h"

#include <stdint.h>
#include <string.h>

#define OPS1_NS "ai.onnx"

/* Library allocator (core/alloc). */
void *kiln__malloc(size_t n);
void *kiln__calloc(size_t n, size_t size);
void kiln__free(void *p);

/* ---- element load/store for the type lists ------------------------------- */
#define OPS1_LD_ID(v) (v)
#define OPS1_ST_ID(v) (v)
#if defined(__F16C__)
/* hardware conversions (round to nearest even, as kiln_f32_to_f16) */
#include <immintrin.h>
#define OPS1_LD_H(v) _cvtsh_ss(v)
#define OPS1_ST_H(v) _cvtss_sh((float)(v), 0)
#else
#define OPS1_LD_H(v) kiln_f16_to_f32(v)
#define OPS1_ST_H(v) kiln_f32_to_f16((float)(v))
#endif
#define OPS1_LD_BF(v) kiln_bf16_to_f32(v)
#define OPS1_ST_BF(v) kiln_f32_to_bf16((float)(v))

/* X(SUFFIX, storage type, compute type, load, store, A) for each dtype of a
 * class; A is passed through (the op being generated). */
#define OPS1_TYPES_FLOAT(X, A)                                                \
    X(F32, float, float, OPS1_LD_ID, OPS1_ST_ID, A)                           \
    X(F64, double, double, OPS1_LD_ID, OPS1_ST_ID, A)                         \
    X(F16, uint16_t, float, OPS1_LD_H, OPS1_ST_H, A)                          \
    X(BF16, uint16_t, float, OPS1_LD_BF, OPS1_ST_BF, A)
#define OPS1_TYPES_SINT(X, A)                                                 \
    X(I8, int8_t, int8_t, OPS1_LD_ID, OPS1_ST_ID, A)                          \
    X(I16, int16_t, int16_t, OPS1_LD_ID, OPS1_ST_ID, A)                       \
    X(I32, int32_t, int32_t, OPS1_LD_ID, OPS1_ST_ID, A)                       \
    X(I64, int64_t, int64_t, OPS1_LD_ID, OPS1_ST_ID, A)
#define OPS1_TYPES_UINT(X, A)                                                 \
    X(U8, uint8_t, uint8_t, OPS1_LD_ID, OPS1_ST_ID, A)                        \
    X(U16, uint16_t, uint16_t, OPS1_LD_ID, OPS1_ST_ID, A)                     \
    X(U32, uint32_t, uint32_t, OPS1_LD_ID, OPS1_ST_ID, A)                     \
    X(U64, uint64_t, uint64_t, OPS1_LD_ID, OPS1_ST_ID, A)
#define OPS1_TYPES_INT(X, A) OPS1_TYPES_SINT(X, A) OPS1_TYPES_UINT(X, A)
#define OPS1_TYPES_NUM(X, A) OPS1_TYPES_FLOAT(X, A) OPS1_TYPES_INT(X, A)
#define OPS1_TYPES_BOOL(X, A) X(BOOL, uint8_t, uint8_t, OPS1_LD_ID, OPS1_ST_ID, A)

/* ---- dtype classes ------------------------------------------------------- */
static inline int kiln__ops1_is_float(kiln_dtype t) {
    return t == KILN_DTYPE_F32 || t == KILN_DTYPE_F64 || t == KILN_DTYPE_F16 ||
           t == KILN_DTYPE_BF16;
}
static inline int kiln__ops1_is_sint(kiln_dtype t) {
    return t == KILN_DTYPE_I8 || t == KILN_DTYPE_I16 || t == KILN_DTYPE_I32 ||
           t == KILN_DTYPE_I64;
}
static inline int kiln__ops1_is_uint(kiln_dtype t) {
    return t == KILN_DTYPE_U8 || t == KILN_DTYPE_U16 || t == KILN_DTYPE_U32 ||
           t == KILN_DTYPE_U64;
}
static inline int kiln__ops1_is_int(kiln_dtype t) {
    return kiln__ops1_is_sint(t) || kiln__ops1_is_uint(t);
}
static inline int kiln__ops1_is_num(kiln_dtype t) {
    return kiln__ops1_is_float(t) || kiln__ops1_is_int(t);
}
/* Any dtype with a fixed element size (everything but STRING/UNDEFINED). */
static inline int kiln__ops1_is_any(kiln_dtype t) {
    return kiln__ops1_is_num(t) || t == KILN_DTYPE_BOOL;
}

/* Check that input i of an op has a dtype of a class; else KILN_ETYPE with a
 * message naming op, input and both types.  `cls` is one of the predicates
 * above, `what` its name ("a float type"). */
int kiln__ops1_check_type(const kiln_shape_ctx *c, const char *op, int i,
                          int (*cls)(kiln_dtype), const char *what);
/* Inputs i and j must have the same dtype. */
int kiln__ops1_check_same(const kiln_shape_ctx *c, const char *op, int i, int j);

/* Check that input i has a fixed-size dtype (numeric or bool). */
static inline int kiln__ops1_check_any(const kiln_shape_ctx *c, const char *op, int i) {
    return kiln__ops1_check_type(c, op, i, kiln__ops1_is_any, "a numeric or bool type");
}

/* ---- conversions --------------------------------------------------------- */
void kiln__ops1_to_f64(const void *src, kiln_dtype t, double *dst, int64_t n);
void kiln__ops1_from_f64(const double *src, kiln_dtype t, void *dst, int64_t n);
void kiln__ops1_to_i64(const void *src, kiln_dtype t, int64_t *dst, int64_t n);
void kiln__ops1_from_i64(const int64_t *src, kiln_dtype t, void *dst, int64_t n);
/* ONNX Cast semantics between any two fixed-size dtypes (integers go
 * through int64, floats through double; NaN/out of range to int saturate
 * instead of invoking undefined behaviour). */
void kiln__ops1_cast(const void *src, kiln_dtype st, void *dst, kiln_dtype dt, int64_t n);
/* One element of a tensor as double / int64. */
double kiln__ops1_get_f64(const void *p, kiln_dtype t, int64_t i);
int64_t kiln__ops1_get_i64(const void *p, kiln_dtype t, int64_t i);

/* ---- build-time values --------------------------------------------------- */
/* numel of a desc when all dims are constant, else -1. */
int64_t kiln__ops1_desc_numel(const kiln_desc *d);
/* The integer values of desc d when known as constants (data, or values
 * that are all constant).  Returns the count (<= max) or -1 if unknown or
 * longer than max. */
int64_t kiln__ops1_const_ints(const kiln_desc *d, int64_t *v, int64_t max);
/* The values of an integer desc as expressions (symbolic values, or
 * constants from data when at most KILN_MAX_VALUES).  Count or -1. */
int kiln__ops1_value_exprs(kiln_exprs *x, const kiln_desc *d, const kiln_expr **v);
/* Like const_ints for input i, but an unknown value is an error naming the
 * op and input ("Reshape: input 1 'shape' must be known at build time ..."). */
int kiln__ops1_need_ints(const kiln_shape_ctx *c, const char *op, int i,
                         const char *iname, int64_t *v, int64_t max, int64_t *n);
/* Normalize an axis in [-rank, rank) to [0, rank); error names op/attr. */
int kiln__ops1_axis(const char *op, const char *what, int64_t axis, int rank, int *out);
/* Does the layer have input i (present, not an absent optional)? */
static inline int kiln__ops1_has_in(const kiln_shape_ctx *c, int i) {
    return i < c->nin && c->in[i].dtype != KILN_DTYPE_UNDEFINED;
}
static inline int kiln__ops1_call_has_in(const kiln_call *c, int i) {
    return i < c->nin && c->in[i].dtype != KILN_DTYPE_UNDEFINED && c->in[i].data;
}
/* All dims constant -> 1 and dims into v. */
int kiln__ops1_const_dims(const kiln_desc *d, int64_t *v);
/* Set an output desc: dtype t, nd dims d[0..nd). */
static inline void kiln__ops1_set_dims(kiln_desc *o, kiln_dtype t, int nd, const kiln_expr *const *d) {
    o->dtype = t;
    o->ndim = nd;
    for (int i = 0; i < nd; i++) o->dims[i] = d[i];
}
/* Carry the symbolic values of input `in` to output `out` (shape ops:
 * Shape -> Cast -> Reshape stays static); none when unknown. */
void kiln__ops1_copy_values(kiln_shape_ctx *c, int in, int out);
/* Kernel: output 0 = input 0 (a copy unless the builder aliased them). */
int kiln__ops1_copy_input(const kiln_call *c);

/* ---- broadcasting --------------------------------------------------------- */
/* Iteration over an output of rank nd with up to 3 operands.  Dims are
 * coalesced; the last dim is the inner loop. */
typedef struct kiln__ops1_bc {
    int nd, nop;
    int64_t dims[KILN_MAX_DIMS];
    int64_t st[3][KILN_MAX_DIMS]; /* element strides per operand (0 = broadcast) */
    int64_t rows;                 /* product of dims[0..nd-2] */
} kiln__ops1_bc;
/* Operand k of rank ndk with dims dk broadcast into out dims (rank ndo). */
void kiln__ops1_bc_init(kiln__ops1_bc *b, int ndo, const int64_t *dout, int nop,
                        const int *ndk, const int64_t *const *dk);
/* Run-time check that operand k (rank nd, dims d) broadcasts to dout:
 * symbolic dims that agreed at build time may still differ in a run. */
int kiln__ops1_bc_check(const char *op, int k, int ndo, const int64_t *dout, int nd, const int64_t *d);
/* Element offsets of each operand at the start of row r. */
void kiln__ops1_bc_row(const kiln__ops1_bc *b, int64_t r, int64_t *off);

/* Run fn over [0, n) directly when small, else split on the pool. */
void kiln__ops1_par(kiln_exec *e, int64_t n, int64_t grain, kiln_range_fn fn, void *ud);

/* dst (contiguous, dims[nd]) = src elements at sum(idx[i] * st[i]) (element
 * strides, may be negative or 0); es = element size.  Threads when large. */
void kiln__ops1_strided_copy(kiln_exec *e, void *dst, const void *src, size_t es, int nd,
                             const int64_t *dims, const int64_t *st);

/* Row-major contiguous strides check of a kernel tensor. */
int kiln__ops1_contig(const kiln_tensor *t);

#endif /* KILN_OPS1_H */
