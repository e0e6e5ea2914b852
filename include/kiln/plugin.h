/*
 * plugin.h — authoring ops for kiln.
 *
 * Every operator kiln runs — the built-in ONNX operators and your plugins —
 * is an *op*: an identity "namespace::name" + version, an attribute schema,
 * a shape function and implementations.  There are two ways to write one:
 *
 * 1. Quick ops (most ops): fill a kiln_quick_op and register it with
 *    KILN_OP(var).  Registration runs when the library loads (a C
 *    constructor).  A quick op gives
 *      - attrs:   the attribute schema (name, type, default),
 *      - shape:   output dtypes and symbolic dims from input descriptors and
 *                 attribute values; may alias an output to an input
 *                 (in-place) and declare size tensors for data-dependent
 *                 dims.  No side effects.
 *      - impl:    the computation, on kiln_tensor views, with the chosen
 *                 tactic, a workspace and an execution handle,
 *      - formats: (optional, the autotune part) the type/layout
 *                 combinations and tactics the builder may pick from, by
 *                 timing,
 *      - timing_id: which attributes make two instances time differently,
 *      - aot:     (optional) kernel source the builder compiles and embeds.
 *
 *      static int add_shape(kiln_shape_ctx *c) {
 *          c->out[0] = c->in[0];             // same dtype and dims
 *          return 0;
 *      }
 *      static int add_impl(const kiln_call *c) {
 *          const float *a = c->in[0].data, *b = c->in[1].data;
 *          float *y = c->out[0].data;
 *          for (int64_t i = 0, n = kiln_tensor_numel(&c->out[0]); i < n; i++)
 *              y[i] = a[i] + b[i];
 *          return 0;
 *      }
 *      static const kiln_quick_op add = {
 *          .ns = "sample", .name = "elemwise_add", .version = 1,
 *          .min_inputs = 2, .max_inputs = 2, .num_outputs = 1,
 *          .shape = add_shape, .impl = add_impl,
 *      };
 *      KILN_OP(add)
 *
 * 2. Full plugins: a versioned vtable (kiln_plugin_vtable) for stateful or
 *    unusual ops, registered with KILN_PLUGIN(var).  Quick ops are an
 *    adapter onto the same vtable: the runtime knows one mechanism.
 *
 * Threading: shape functions may be called from any thread; impl/enqueue of
 * one layer instance is never called concurrently for the same context, but
 * two contexts may run the same op concurrently (keep state per context:
 * see attach_to_context).
 *
 * Errors: shape/impl return 0 or a negative KILN_E* code; they may describe
 * the problem with kiln_set_error() (the builder/runtime prefixes the layer
 * name).
 */
#ifndef KILN_PLUGIN_H
#define KILN_PLUGIN_H

#include "kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Record a message for kiln_errmsg() and return `status` (for
 * `return kiln_set_error(KILN_EINVAL, "...")`). */
KILN_API int kiln_set_error(int status, const char *fmt, ...) KILN_PRINTF(2, 3);

/* ------------------------------------------------- symbolic expressions */

/* Shapes are expressions over input dims and size-tensor symbols.  They are
 * hash-consed (structurally equal expressions are the same pointer, so ==
 * compares them) and constant-folded.  They live in a pool owned by the
 * builder.  Constructors never return NULL: on misuse (a NULL argument) or
 * out-of-memory they return an invalid expression (which every expression
 * built from it stays), and the shape function that called them fails with
 * the message once it returns, whatever it returned.
 * Lifetime: an expression is valid only during the callback that received
 * the pool (shape, aot, formats_fn); bindings must not keep the pointer. */
typedef struct kiln_exprs kiln_exprs;
typedef struct kiln_expr kiln_expr;

typedef enum kiln_expr_op {
    KILN_EXPR_CONST = 0,
    KILN_EXPR_SYM,      /* a named symbol: input dim, size tensor, shape value */
    KILN_EXPR_ADD,
    KILN_EXPR_SUB,
    KILN_EXPR_MUL,
    KILN_EXPR_FLOORDIV, /* floor(a / b), b != 0 */
    KILN_EXPR_CEILDIV,  /* ceil(a / b), b != 0 */
    KILN_EXPR_MOD,      /* a - b * floordiv(a, b) */
    KILN_EXPR_MIN,
    KILN_EXPR_MAX,
    KILN_EXPR_EQ,       /* 1 if a == b else 0 */
    KILN_EXPR_LT,       /* 1 if a < b else 0 */
    KILN_EXPR_SELECT_,  /* internal: cond ? a : b (see kiln_expr_select) */
    KILN_EXPR_OP_COUNT_
} kiln_expr_op;

KILN_API const kiln_expr *kiln_expr_const(kiln_exprs *x, int64_t v);
KILN_API const kiln_expr *kiln_expr_sym(kiln_exprs *x, const char *name);
KILN_API const kiln_expr *kiln_expr_bin(kiln_exprs *x, kiln_expr_op op,
                                        const kiln_expr *a, const kiln_expr *b);
KILN_API const kiln_expr *kiln_expr_add(kiln_exprs *x, const kiln_expr *a, const kiln_expr *b);
KILN_API const kiln_expr *kiln_expr_sub(kiln_exprs *x, const kiln_expr *a, const kiln_expr *b);
KILN_API const kiln_expr *kiln_expr_mul(kiln_exprs *x, const kiln_expr *a, const kiln_expr *b);
KILN_API const kiln_expr *kiln_expr_floordiv(kiln_exprs *x, const kiln_expr *a, const kiln_expr *b);
KILN_API const kiln_expr *kiln_expr_ceildiv(kiln_exprs *x, const kiln_expr *a, const kiln_expr *b);
KILN_API const kiln_expr *kiln_expr_min(kiln_exprs *x, const kiln_expr *a, const kiln_expr *b);
KILN_API const kiln_expr *kiln_expr_max(kiln_exprs *x, const kiln_expr *a, const kiln_expr *b);
KILN_API const kiln_expr *kiln_expr_eq(kiln_exprs *x, const kiln_expr *a, const kiln_expr *b);
KILN_API const kiln_expr *kiln_expr_lt(kiln_exprs *x, const kiln_expr *a, const kiln_expr *b);
/* cond != 0 ? a : b */
KILN_API const kiln_expr *kiln_expr_select(kiln_exprs *x, const kiln_expr *cond,
                                           const kiln_expr *a, const kiln_expr *b);
/* 1 and *v set if e is a constant, else 0. */
KILN_API int kiln_expr_is_const(const kiln_expr *e, int64_t *v);
/* Text form, e.g. "max(N, 1) * 3", into buf (always NUL-terminated).
 * Returns the length of the full text (as snprintf); an expression whose
 * tree form has more than 4096 nodes prints as its first ones and "...". */
KILN_API int kiln_expr_print(const kiln_expr *e, char *buf, size_t size);

/* ------------------------------------------------- attributes */

typedef enum kiln_attr_type {
    KILN_ATTR_INT = 1,    /* int64 */
    KILN_ATTR_FLOAT,      /* stored as double */
    KILN_ATTR_STRING,     /* NUL-terminated */
    KILN_ATTR_BOOL,
    KILN_ATTR_BYTES,
    KILN_ATTR_ARRAY,      /* 1-D array of `elem` (I8..I64, U8.., F16/F32/F64, BOOL) */
    KILN_ATTR_TENSOR,     /* dtype + dims + data (ONNX TENSOR) */
    KILN_ATTR_GRAPH       /* a kiln_network (ONNX GRAPH) */
} kiln_attr_type;
/* "int", "float", "string", "bool", "bytes", "array", "tensor", "graph";
 * "?" for a value outside the enum.  Static storage, never NULL. */
KILN_API const char *kiln_attr_type_name(kiln_attr_type t);

/* One attribute of an op's schema.  `def` is the default in text form
 * ("0", "0.5", "nearest", "[1, 2, 3]", "true"), parsed at registration
 * (a bad default is a registration error).  required=1: must be set.
 * def == NULL and required == 0: optional without default (check
 * kiln_attr_value.present). */
typedef struct kiln_attr_def {
    const char *name;
    kiln_attr_type type;
    kiln_dtype elem;   /* KILN_ATTR_ARRAY: element type (default I64) */
    const char *def;
    int required;
    const char *doc;   /* one line for `kiln plugins` */
} kiln_attr_def;

typedef struct kiln_attr_value {
    int present;       /* set by the user, or has a default */
    kiln_attr_type type;
    kiln_dtype elem;   /* ARRAY element type, TENSOR dtype */
    int64_t i;         /* INT, BOOL */
    double f;          /* FLOAT */
    const char *s;     /* STRING (NUL-terminated), BYTES */
    size_t len;        /* STRING/BYTES length in bytes */
    int64_t count;     /* ARRAY element count, TENSOR numel */
    const void *data;  /* ARRAY/TENSOR elements */
    int ndim;          /* TENSOR */
    int64_t dims[KILN_MAX_DIMS];
    const kiln_network *graph; /* GRAPH */
} kiln_attr_value;

/* Attribute values of one layer, in schema order: v[i] belongs to
 * defs[i].  Transparent for speed (`a->v[0].i`); the accessors below look
 * up by name and check the schema type.
 *
 * Misuse of an accessor (a name not in the op's schema, an accessor of
 * another type, a NULL argument) cannot be returned as a status: the
 * accessor returns "absent" (0, 0.0, "", or -1 with a zeroed array) and the
 * callback it was called from (shape, impl, workspace, aot, prepack, on any
 * thread of kiln_exec_parallel) fails with KILN_EINVAL and a message naming
 * the attribute and the schema's attributes, whatever it returned: the
 * build or run reports it and the program goes on. */
typedef struct kiln_attrs {
    int count;
    const kiln_attr_def *defs;
    const kiln_attr_value *v;
} kiln_attrs;

KILN_API const kiln_attr_value *kiln_attrs_get(const kiln_attrs *a, const char *name);
KILN_API int64_t kiln_attrs_int(const kiln_attrs *a, const char *name);
KILN_API double kiln_attrs_float(const kiln_attrs *a, const char *name);
KILN_API const char *kiln_attrs_string(const kiln_attrs *a, const char *name);
/* Array as int64 in *v: an I64 array returns its own data; another integer
 * elem type (at most 256 elements) is widened into a per-thread buffer that
 * stays valid for the next 7 calls on this thread (copy it if you keep it
 * longer; kiln_attrs_get gives the stored array without a copy).  Returns the count, or -1
 * if absent (*v = NULL).  kiln_attrs_floats: the same for F32. */
KILN_API int64_t kiln_attrs_ints(const kiln_attrs *a, const char *name, const int64_t **v);
KILN_API int64_t kiln_attrs_floats(const kiln_attrs *a, const char *name, const float **v);

/* ------------------------------------------------- tensors */

/* A view of a tensor as kernels see it.  dims are logical; strides are in
 * elements and describe LINEAR and NHWC layouts (blocked layouts: see
 * `format`).  `data` is host memory on the CPU device and device memory on
 * CUDA. */
typedef struct kiln_tensor {
    void *data;
    kiln_dtype dtype;
    kiln_format format;
    kiln_device_kind device;
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
    int64_t strides[KILN_MAX_DIMS];
} kiln_tensor;

static inline int64_t kiln_tensor_numel(const kiln_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->dims[i];
    return n;
}

/* ------------------------------------------------- shape functions */

/* Symbolic values kept for small integer tensors (shape tensors). */
#define KILN_MAX_VALUES 16

/* What a shape function knows about a tensor. */
typedef struct kiln_desc {
    kiln_dtype dtype;
    int ndim;
    const kiln_expr *dims[KILN_MAX_DIMS];
    /* Inputs only: the tensor's contents when known at build time (a
     * constant or folded value), row-major, else NULL. */
    const void *data;
    /* For integer tensors of at most KILN_MAX_VALUES elements: the value of
     * each element as an expression (e.g. the output of Shape), else
     * nvalues = -1.  A shape function may set these on outputs to let
     * shape computations (Shape -> Gather -> Concat -> Reshape) stay
     * symbolic. */
    int nvalues;
    const kiln_expr *values[KILN_MAX_VALUES];
} kiln_desc;

typedef struct kiln_shape_ctx kiln_shape_ctx;
struct kiln_shape_ctx {
    kiln_exprs *x;          /* the expression pool */
    const kiln_desc *in;    /* nin inputs; an absent optional input has dtype UNDEFINED */
    int nin;
    kiln_desc *out;         /* nout outputs, to be filled (nvalues preset to -1) */
    int nout;
    const kiln_attrs *attrs;
    void *priv_;            /* the builder's */
    /* The op's kiln_quick_op.user (bindings find their callable with it). */
    void *user;
};

/* Output `out` shares its buffer with input `in` (in-place op).  The
 * output must have the same byte size.  The builder inserts a copy only if
 * the input is still needed afterwards or is a network input/constant. */
KILN_API int kiln_shape_alias(kiln_shape_ctx *c, int out, int in);
/* Declare output `out` a size tensor: a 0-D I64 tensor whose value,
 * written by impl, is a dim of other outputs.  Returns the symbol to use in
 * those dims.  `opt` is the value assumed when timing; `upper` bounds it
 * (memory is planned for it; a kernel writing a larger value is an error).
 * The impl of this layer sees those outputs with their dims at the upper
 * bound (the room it may fill, as in TensorRT); later layers see the
 * actual dims. */
KILN_API const kiln_expr *kiln_shape_size_tensor(kiln_shape_ctx *c, int out,
                                                 const kiln_expr *opt,
                                                 const kiln_expr *upper);
/* Output `out`, whose dims are data-dependent (size tensors), holds at most
 * `upper` elements: the runtime reserves memory for the smaller of that
 * and the product of its dims' bounds (SequenceAt: each dim is bounded by
 * the sequence's length, their product only by that length).  A kernel
 * writing more is an error. */
KILN_API int kiln_shape_numel_bound(kiln_shape_ctx *c, int out, const kiln_expr *upper);
/* Numpy broadcast of dims a (na) and b (nb) into out; returns the rank or
 * KILN_ESHAPE (message set) when static dims disagree. */
KILN_API int kiln_shape_broadcast(kiln_shape_ctx *c, const kiln_expr *const *a, int na,
                                  const kiln_expr *const *b, int nb,
                                  const kiln_expr **out);
/* Replace this layer by a sub-network (e.g. the taken branch of an If whose
 * condition is known at build time).  The sub-network's inputs are bound,
 * in order, to this layer's inputs and its outputs to this layer's
 * outputs.  The network is borrowed and must outlive the build. */
KILN_API int kiln_shape_inline(kiln_shape_ctx *c, const kiln_network *sub);
/* Same with a network made for this purpose (e.g. kiln_network_append of a
 * loop body): the builder takes ownership and frees it after the build;
 * on any error, also when c is not the builder's, it is freed at once. */
KILN_API int kiln_shape_inline_owned(kiln_shape_ctx *c, kiln_network *sub);

/* ------------------------------------------------- execution */

/* The execution handle: a thread pool on the CPU, a stream on CUDA. */
typedef struct kiln_exec kiln_exec;

KILN_API kiln_device_kind kiln_exec_device(const kiln_exec *e);
/* CUDA stream (cudaStream_t) or NULL on the CPU. */
KILN_API void *kiln_exec_stream(const kiln_exec *e);
/* Number of threads kernels may split work over (>= 1). */
KILN_API int kiln_exec_threads(const kiln_exec *e);
/* Run fn(ud, ith, nth) for ith in [0, nth) on the pool and wait; nth =
 * min(n_tasks, threads).  The caller's thread takes part.  Calling it from
 * inside fn runs the inner call serially. */
typedef void (*kiln_task_fn)(void *ud, int ith, int nth);
KILN_API void kiln_exec_parallel(kiln_exec *e, int n_tasks, kiln_task_fn fn, void *ud);
/* Split [0, n) into nth nearly equal parts; part ith is [*b, *e). */
static inline void kiln_split_range(int64_t n, int ith, int nth, int64_t *b, int64_t *e) {
    int64_t q = n / nth, r = n % nth;
    *b = ith * q + (ith < r ? ith : r);
    *e = *b + q + (ith < r ? 1 : 0);
}
/* Run fn(ud, begin, end) over [0, n) in chunks of at least `grain`. */
typedef void (*kiln_range_fn)(void *ud, int64_t begin, int64_t end);
KILN_API void kiln_exec_parallel_for(kiln_exec *e, int64_t n, int64_t grain,
                                     kiln_range_fn fn, void *ud);

/* One invocation of an op. */
typedef struct kiln_call {
    const kiln_tensor *in;   /* nin inputs (absent optional: data NULL, dtype UNDEFINED) */
    int nin;
    kiln_tensor *out;        /* nout outputs; data points at planned memory */
    int nout;
    const kiln_attrs *attrs;
    int tactic;              /* the chosen tactic (0 = default) */
    void *workspace;         /* workspace_size bytes, 64-byte aligned */
    size_t workspace_size;
    kiln_exec *exec;
    void *state;             /* full plugins: the instance state */
    const char *layer;       /* layer name, for messages */
    /* Epilogue chain fused into this layer by the builder (opaque; NULL:
     * none).  Ops that set accepts_epilogue apply it with
     * kiln_call_epilogue; see "epilogue fusion" below. */
    const void *epilogue;
    /* Per input (nin entries): the packed form of a build-time constant
     * input that the op's kiln_quick_op.prepack wrote once when the engine
     * was prepared (64-byte aligned, read-only, shared by every context),
     * or NULL (no prepack, not a constant, or a call from outside an
     * engine such as constant folding).  NULL as a whole: none at all.
     * An op must still work from in[i].data when its entry is NULL. */
    const void *const *prepacked;
    /* The op's kiln_quick_op.user (NULL for full plugins). */
    void *user;
} kiln_call;

/* ------------------------------------------------- epilogue fusion
 *
 * The builder fuses a chain of elementwise layers into the layer that
 * produces their input (Conv -> BatchNormalization -> Clip runs as one
 * Conv layer whose kernel applies BN and Clip to each output tile while it
 * is still in cache).  Two declarations make this work, none of them
 * naming an op:
 *
 *  - a *consumer* op L sets kiln_quick_op.epilogue: "apply me in place to a
 *    run of f32 values of my single non-constant input";
 *  - a *producer* op P sets accepts_epilogue = 1: "my impl calls
 *    kiln_call_epilogue on every output element it writes, once, after the
 *    element holds its final value".
 *
 * The builder fuses L into P when, after shape inference, folding and
 * type/format selection: P, L and the tensor between them are F32 LINEAR;
 * the tensor is P's output 0, of rank >= 1, with the same dims as L's
 * output, consumed by L alone and not a network output; every other
 * present input of L is a build-time constant; P and L run without AOT
 * kernels; and L's epilogue_check (when set) accepts the constants.  L
 * then disappears: P writes L's output, and the engine records the chain
 * (op identity, attributes, constant inputs) in its file.  `kiln inspect`
 * shows it as "conv_2 (ai.onnx::Conv v11) + BatchNormalization + Clip".
 *
 * Channels.  A run of n values handed to an epilogue carries the index
 * along dim 1 of the tensor ("channel"; 0 for rank < 2) of its first value
 * and chan_len, the number of consecutive values per channel: value i lies
 * in channel + i / chan_len, and chan_len = 0 means all n values lie in
 * `channel`.  So a part of one NCHW plane is (channel, 0), several whole
 * planes are (first channel, H*W), a row of a rank-2 [N, C] tensor (a Gemm
 * output) is (first column, 1).  Epilogues with per-channel constants
 * index them with that; epilogues without may ignore both, which lets a
 * producer hand over large runs. */

/* What an epilogue sees: the fused layer's attributes and inputs. */
typedef struct kiln_epilogue_args {
    /* Scalars epilogue_check may precompute (attribute values, constant
     * scalars) for the epilogue, which runs many times per inference:
     * the runtime keeps what check stored. */
    double p[8];
    const kiln_attrs *attrs;
    const kiln_tensor *in;   /* nin inputs: constants with data; in[x] (the
                              * fused activation) has data NULL, its rank and
                              * dims (-1 where not static at build) */
    int nin;
    int x;                   /* index of the activation input */
    int64_t channels;        /* dims[1] of the activation (1 for rank < 2) */
} kiln_epilogue_args;

/* Apply output `out`'s epilogue chain (if any) in place to n f32 values
 * at x, the first in `channel`, chan_len values per channel (see above).
 * Returns 0 or the first error of an epilogue.  Cheap when c->epilogue is
 * NULL.  An error also fails the layer's run in a context (with the
 * epilogue's message, from whichever thread called this), even where the
 * kernel does not pass the code on. */
KILN_API int kiln_call_epilogue(const kiln_call *c, int out, float *x, int64_t n,
                                int64_t channel, int64_t chan_len);
/* For epilogue_check: 1 if constant input `i` is a scalar (one element), 2
 * if it holds one value per channel (dims[1] of the activation) laid out
 * to broadcast along dim 1 only (e.g. [C] for a rank-2 activation,
 * [C, 1, 1] or [1, C, 1, 1] for NCHW), else 0. */
KILN_API int kiln_epilogue_param_kind(const kiln_epilogue_args *a, int i);

/* ------------------------------------------------- formats / autotune */

/* One autotune combination, in TensorRT's combination grammar:
 *   types:   one slot per input then per output, comma-separated; a slot is
 *            a type ("FP32", "FP16", "INT64", "BOOL", ...) or alternatives:
 *            "A|B" tied (all tied slots take their k-th alternative
 *            together; their counts must agree) or "A*B" independent (each
 *            alternative combined with every other choice).  A single slot
 *            applies to every position.
 *   layouts: same grammar over LINEAR, NHWC, NCHW8C, NCHW16C; NULL = LINEAR.
 *   tactics: the tactics valid for these combinations (0-terminated; an
 *            empty list means the single default tactic 0).
 * Example: {"FP32|FP16, FP32|FP16, FP32|FP16", NULL, {1, 2}}
 * An op with optional inputs may list rows for several input counts: a row
 * whose slot count is neither 1 nor the layer's inputs + outputs is
 * skipped when another row fits (when none fits, the builder reports the
 * mismatch). */
#define KILN_MAX_TACTICS 16
typedef struct kiln_combo {
    const char *types;
    const char *layouts;
    int tactics[KILN_MAX_TACTICS];
} kiln_combo;

/* One expanded choice: a dtype and layout per position (inputs, then outputs). */
typedef struct kiln_io_format {
    int n;
    kiln_dtype dtype[KILN_MAX_IO];
    kiln_format format[KILN_MAX_IO];
} kiln_io_format;

/* Expand the combination strings for `nio` positions into `out` (at most
 * `max`).  Returns the number of expanded choices or KILN_EINVAL with a
 * message pointing at the offending column of the string. */
KILN_API int kiln_combo_expand(const char *types, const char *layouts, int nio,
                               kiln_io_format *out, int max);

/* ------------------------------------------------- AOT kernels */

/* What an op's `aot` function returns: C source compiled by the builder
 * into a shared object embedded in the engine (`cuda_aot`: a CUDA kernel,
 * see the CUDA fields of kiln_aot_kernel).  The entry point has the
 * signature
 *   void entry(const kiln_aot_args *a, int ith, int nth);
 * and is launched over `extent` work items split by the thread pool. */
typedef enum kiln_scalar_type {
    KILN_SCALAR_I32 = 1,
    KILN_SCALAR_I64,
    KILN_SCALAR_F32
} kiln_scalar_type;

#define KILN_MAX_SCALARS 16
#define KILN_AOT_SIGNATURE_DERIVED "*" /* kiln_quick_op.aot_signature: see there */
typedef struct kiln_aot_args {
    void *const *in;     /* input data pointers, in order */
    void *const *out;    /* output data pointers */
    const int64_t *i64;  /* scalar i, as int64 (I32/I64 scalars) */
    const double *f64;   /* scalar i, as double (F32 scalars) */
    int64_t extent;      /* number of work items */
} kiln_aot_args;

typedef struct kiln_aot_kernel {
    const char *source;          /* C source (the builder copies it) */
    const char *entry;           /* entry point symbol */
    const kiln_expr *extent;     /* work items */
    int nscalars;
    kiln_scalar_type scalar_types[KILN_MAX_SCALARS];
    const kiln_expr *scalars[KILN_MAX_SCALARS]; /* I32/I64 scalars; F32: optional (below) */
    double fscalars[KILN_MAX_SCALARS];          /* F32 scalars (constants) */
    /* ---- CUDA kernels (what kiln_quick_op.cuda_aot returns) ----
     * lang: KILN_AOT_LANG_CUDA (`source` is CUDA C, compiled by the builder
     * with NVRTC for the build GPU: declare the entry extern "C"
     * __global__) or KILN_AOT_LANG_PTX (`source` is PTX text, e.g. Triton's
     * `compiled.asm["ptx"]`, used as is).  `entry` is the kernel's name
     * (the PTX .entry).  The builder stores the PTX and the cubin it links
     * for the build GPU; the runtime loads them with cuModuleLoadData (the
     * cubin on the build GPU's architecture, else the PTX, which the driver
     * compiles) and launches with cuLaunchKernel on the context's stream.
     *
     * Kernel parameters, in this order (checked at build against the
     * kernel's PTX parameter list: count and width/type of each):
     *   1. one pointer per input, then one per output (device memory; an
     *      absent optional input is NULL);
     *   2. the nscalars scalars, passed by value as their type
     *      (i32 = int, i64 = long long, f32 = float);
     *   3. nscratch hidden pointers (Triton's compiled kernels take two:
     *      global and profile scratch): scratch_bytes[i] == 0 passes NULL,
     *      else a device buffer of scratch_bytes[i] bytes per block
     *      (times gridX*gridY*gridZ, 256-byte aligned, contents undefined),
     *      taken from the layer's workspace.
     * `extent` is unused: the launch is grid x block.  An F32 scalar whose
     * scalars[i] is set is that integer expression converted to float
     * (per run); else fscalars[i]. */
    int lang;                        /* kiln_aot_lang; 0 (C) for kiln_quick_op.aot */
    const kiln_expr *grid[3];        /* blocks per grid (x, y, z); NULL = 1 */
    const kiln_expr *block[3];       /* threads per block (x, y, z); NULL = 1 */
    const kiln_expr *shared_mem;     /* dynamic shared memory in bytes; NULL = 0 */
    int nscratch;                    /* 0..KILN_AOT_MAX_SCRATCH hidden trailing pointers */
    uint64_t scratch_bytes[2];       /* per block; 0 = NULL */
} kiln_aot_kernel;

typedef enum kiln_aot_lang {
    KILN_AOT_LANG_C = 0,    /* C source for the CPU (kiln_quick_op.aot) */
    KILN_AOT_LANG_CUDA = 1, /* CUDA C source, compiled with NVRTC at build */
    KILN_AOT_LANG_PTX = 2   /* PTX text, used as is */
} kiln_aot_lang;
#define KILN_AOT_MAX_SCRATCH 2

/* ------------------------------------------------- CUDA kernels for plugins
 *
 * A plugin's cuda_impl may launch its own kernels without linking the CUDA
 * toolkit: kiln compiles CUDA C source with NVRTC (dlopen'ed, as the
 * driver) or takes PTX, loads the module into kiln's CUDA context and
 * launches on the call's stream.  Modules are compiled once per process
 * (cached by their text) and live until the process exits. */
typedef struct kiln_cuda_module kiln_cuda_module;
/* Compile (lang KILN_AOT_LANG_CUDA: CUDA C, NVRTC for this GPU) or take
 * (KILN_AOT_LANG_PTX) `source` and load it; the same text returns the same
 * module.  `what` names it in messages (may be NULL).  Errors: KILN_EINVAL
 * (NULL source/m, bad lang), KILN_EDEVICE (no GPU, no libnvrtc, a load
 * failure), KILN_ECOMPILE (NVRTC's log, lines counted from the source's
 * first line). */
KILN_API int kiln_cuda_module_get(const char *source, int lang, const char *what,
                                  kiln_cuda_module **m);
/* Launch kernel `entry` of m on c's stream (kiln_exec_stream(c->exec)).
 * args: pointers to the argument values, as cuLaunchKernel takes them.  A
 * grid with a zero extent launches nothing.  Errors: KILN_EINVAL (NULL
 * arguments, c not a CUDA call), KILN_EDEVICE naming the kernel, the layer
 * and the CUDA error. */
KILN_API int kiln_cuda_launch(const kiln_call *c, kiln_cuda_module *m, const char *entry,
                              const unsigned grid[3], const unsigned block[3],
                              unsigned shared_mem, void **args);

/* ------------------------------------------------- quick ops */

typedef struct kiln_quick_op {
    const char *ns;          /* namespace, e.g. "sample" */
    const char *name;        /* e.g. "circ_pad" */
    int version;             /* >= 1 */
    int min_inputs, max_inputs;
    int num_outputs;
    const kiln_attr_def *attrs;   /* schema, terminated by {NULL} (may be NULL) */
    int (*shape)(kiln_shape_ctx *c);
    int (*impl)(const kiln_call *c);
    /* Autotune: combinations terminated by {NULL}.  NULL: the types the
     * shape function produced, LINEAR, tactic 0. */
    const kiln_combo *formats;
    /* Comma-separated attribute names that change timing ("pads").  NULL:
     * all attributes. */
    const char *timing_id;
    /* Workspace bytes for a call (NULL: none).  in/out hold final dims. */
    size_t (*workspace)(const kiln_call *c);
    /* AOT: fill k for the chosen types/formats/tactic (shapes symbolic in
     * c->in/out descs).  `signature` lists the scalar types the kernel
     * takes, e.g. "i64,i64,f32"; the builder checks what aot returns
     * against it (count and types) and fails naming op and argument.
     * KILN_AOT_SIGNATURE_DERIVED ("*"): no fixed signature; each kernel's
     * own scalar_types are its signature (still checked: known types, an
     * expression for every integer scalar, at most KILN_MAX_SCALARS). */
    int (*aot)(const kiln_shape_ctx *c, const kiln_io_format *io, int tactic,
               kiln_aot_kernel *k);
    const char *aot_signature;
    const char *doc;         /* one line for `kiln plugins` */
    int nondeterministic;    /* 1 for random ops: never folded into constants */
    /* Epilogue fusion (see "epilogue fusion" above).  epilogue: apply the
     * op in place to n f32 values of its activation input; must not fail
     * once epilogue_check (NULL: accept) returned 0 for these args.
     * epilogue_check runs at build and again when an engine is loaded;
     * it returns 0 to allow the fusion, any other value to refuse it (no
     * message needed), and may fill a->p. */
    int (*epilogue)(const kiln_epilogue_args *a, float *x, int64_t n, int64_t channel,
                    int64_t chan_len);
    int (*epilogue_check)(kiln_epilogue_args *a);
    /* 1: impl calls kiln_call_epilogue on everything it writes to output 0
     * (F32 LINEAR), so elementwise consumers may be fused into it.  2: also
     * where output 0 is F32 NCHW16C (impl calls it on each pixel's run of
     * 16 channels, with the run's first channel; a fused residual arrives
     * in NCHW16C too). */
    int accepts_epilogue;
    /* Bit k set: output k is optional to compute; when nothing reads it
     * (no layer, not a network output) impl gets it with data NULL (e.g.
     * MaxPool's Indices).  Dims are still set. */
    unsigned optional_outputs;
    /* Weight prepacking (optional): input `input` is a build-time constant
     * (c->in[input].data holds it; read-only, it may be mapped from the
     * engine file).  With dst NULL, set *size to the bytes of its packed
     * form, 0 for "nothing to prepack"; else *size holds that answer: write
     * that many bytes into dst (64-byte aligned) and leave *size as is.
     * The runtime calls it once per layer and constant input when an
     * engine is built, and again when it is loaded for plugin ops
     * (built-in ops' packed forms are stored in the engine file, a
     * plugin's are not; never per run), and hands the result to impl as
     * c->prepacked[input]; the builder also packs for each candidate it
     * times, so timing measures the packed path.  What prepack sees:
     * attrs, the chosen tactic, every input's dtype/format/ndim/dims (-1
     * where not static at build; data only for constants), outputs
     * likewise without data, exec NULL.  The packed form may depend only on
     * those.  Returns 0 or a KILN_E* code (with kiln_set_error), which
     * fails the build or load. */
    int (*prepack)(const kiln_call *c, int input, void *dst, size_t *size);
    /* For bindings (the Python package) and generated ops: `user` reaches
     * every callback of this op as kiln_shape_ctx.user / kiln_call.user
     * (shape, impl, workspace, prepack, aot, formats_fn), so one trampoline
     * serves many ops.  kiln never frees it; it must outlive every network
     * and engine using the op (see kiln_registry_unregister). */
    void *user;
    /* Autotune as a function of the inputs and attributes (TensorRT's
     * @autotune), used instead of `formats` when set: called once per layer
     * after a successful shape call, with the same context (input dtypes
     * and dims, attributes, user).  Writes up to `max` combinations into
     * `out` and returns their count (0: the default, as formats == NULL) or
     * a negative KILN_E* code.  kiln copies the strings right after it
     * returns: they must stay valid until the next formats_fn call on this
     * thread (static or thread-local buffers do).  Checked like `formats`. */
    int (*formats_fn)(const kiln_shape_ctx *c, kiln_combo *out, int max);
    /* CUDA implementation (NULL: CPU only).  Same identity, schema and shape
     * function as the CPU impl; its own combinations and tactics, timed on
     * the GPU with CUDA events.  cuda_impl gets device pointers in c->in/out
     * (device == KILN_DEVICE_CUDA), a device workspace, and
     * kiln_exec_stream(c->exec) (a CUstream): it only enqueues work on that
     * stream and never synchronizes.  NULL cuda_formats: same as formats. */
    int (*cuda_impl)(const kiln_call *c);
    const kiln_combo *cuda_formats;
    size_t (*cuda_workspace)(const kiln_call *c);
    int cuda_graph_unsafe;   /* 1: the run is not captured into a CUDA graph around this layer */
    /* Bit k set: input k of cuda_impl stays in host memory (small integer
     * tensors the launcher reads to size its grid: pads, axes, repeats...);
     * c->in[k].device is then KILN_DEVICE_CPU.  A host input produced on
     * the GPU costs a device-to-host copy and a stream sync per run. */
    unsigned cuda_host_inputs;
    /* Comma-separated attribute names stored in the engine ("pads,mode";
     * "" none).  NULL: all attributes.  The others are build-time only:
     * shape, formats_fn, aot, workspace and timing see them while the
     * engine is built; the engine file does not hold them, so after a load
     * impl sees their schema default (absent when required).  Set (non-NULL),
     * loading skips this op's layers in its re-check of output shapes
     * (the shape function may need what is not stored).  TensorRT's
     * Python plugins store only the attributes their impl takes; the
     * Python package sets this to those when they are not all. */
    const char *serialize_attrs;
    /* AOT CUDA kernel (NULL: none): as `aot`, for a layer placed on the
     * GPU; fills k with lang KILN_AOT_LANG_CUDA or KILN_AOT_LANG_PTX, entry,
     * grid/block/shared_mem expressions, scalars (checked against
     * aot_signature) and hidden scratch pointers (see kiln_aot_kernel).  A
     * CUDA build runs the layer on this kernel when it is chosen by
     * kiln_layer_set_aot(l, 1) / ONNX `aot=1`, KILN_BUILD_PREFER_AOT, or
     * when the op has no cuda_impl; the engine then needs no plugin
     * library for that layer (docs/AOT.md, "AOT CUDA kernels"). */
    int (*cuda_aot)(const kiln_shape_ctx *c, const kiln_io_format *io, int tactic,
                    kiln_aot_kernel *k);
    /* What cuda_impl covers beyond types (NULL: every layer whose types
     * cuda_formats accept).  Called after each successful shape call, with
     * its context (input dtypes, ranks and dims, attribute values): returns
     * 0 when cuda_impl runs this layer, else a KILN_E* code with a
     * kiln_set_error message saying why (a rank or attribute value its
     * kernels do not take).  A CUDA build places a refused layer on the CPU
     * (the message is logged at KILN_LOG_VERBOSE; --strict-device lists the
     * layer), so a kernel never refuses at run time what the build placed
     * on the GPU.  Only with cuda_impl. */
    int (*cuda_check)(const kiln_shape_ctx *c);
    /* Bit t set (t < 64): on CPU tactic t, where a residual Add is fused
     * into the layer alone or followed by ai.onnx Relu, impl reads each
     * element of the residual input just before it writes that element of
     * output 0, and writes nothing of output 0 before.  The builder then
     * lets output 0 take the residual's buffer (in place: `kiln inspect`
     * says so) when no later layer reads the residual and it is an
     * activation of output 0's type, layout and dims, neither of them a
     * network output: one buffer less to stream through the caches (the
     * residual's lines read and written, not read beside a second buffer
     * written; ResNet-50's 1x1 convs with a residual, alone: -7..-12% on
     * an Intel Xeon, bench/pw16c_ab.c).  0: never. */
    uint64_t residual_inplace_tactics;
} kiln_quick_op;

/* ------------------------------------------------- full plugins */

#define KILN_PLUGIN_VTABLE_VERSION 2

typedef struct kiln_plugin_vtable {
    int version;   /* KILN_PLUGIN_VTABLE_VERSION this plugin was written against */
    /* Instance lifecycle (one instance per layer). */
    int (*create)(const kiln_attrs *attrs, void **state);
    int (*clone)(const void *state, void **out);
    void (*destroy)(void *state);
    /* Shapes and types (as kiln_quick_op.shape). */
    int (*shape)(void *state, kiln_shape_ctx *c);
    /* Can position `pos` (inputs then outputs) have io->dtype[pos] and
     * io->format[pos], given positions < pos as in io?  1 yes, 0 no. */
    int (*supports_format)(void *state, int pos, const kiln_io_format *io);
    /* Final types/formats chosen (descs hold symbolic dims). */
    int (*configure)(void *state, const kiln_io_format *io, const kiln_desc *in, int nin,
                     const kiln_desc *out, int nout);
    size_t (*workspace_size)(void *state, const kiln_call *c);
    /* Tactics valid for the configured formats; returns the count (<= max). */
    int (*valid_tactics)(void *state, int *tactics, int max);
    /* Text that, with op identity and IO types/formats/shapes, keys timing.
     * NULL: serialize() output is used. */
    int (*timing_id)(void *state, char *buf, size_t size);
    int (*set_tactic)(void *state, int tactic);
    /* Actual dims changed (before the next enqueue). */
    int (*on_shape_change)(void *state, const kiln_tensor *in, int nin,
                           const kiln_tensor *out, int nout);
    int (*enqueue)(void *state, const kiln_call *c);
    /* Serialize the state (attributes) into buf (size in/out; buf NULL: ask size). */
    int (*serialize)(const void *state, void *buf, size_t *size);
    int (*deserialize)(const void *buf, size_t size, void **state);
    /* Per-context state (scratch, handles); NULL callbacks: none.  When
     * attach_to_context sets *ctx_state != NULL, that context passes
     * ctx_state instead of state to workspace_size, on_shape_change and
     * enqueue (kiln_call.state too): a per-context instance, like a clone.
     * detach_from_context(state, ctx_state) runs when the context is freed. */
    int (*attach_to_context)(void *state, void **ctx_state);
    void (*detach_from_context)(void *state, void *ctx_state);
    /* Version 2: the CUDA implementation (NULL: CPU only).  enqueue_cuda is
     * enqueue with device pointers, a device workspace of
     * workspace_size_cuda bytes (NULL: none) and kiln_exec_stream(c->exec):
     * it only enqueues work on that stream.  supports_format, configure and
     * valid_tactics are shared with the CPU side.  Vtables of version 1 end
     * before these fields and are CPU only. */
    int (*enqueue_cuda)(void *state, const kiln_call *c);
    size_t (*workspace_size_cuda)(void *state, const kiln_call *c);
} kiln_plugin_vtable;

typedef struct kiln_plugin_def {
    const char *ns, *name;
    int version;
    int min_inputs, max_inputs, num_outputs;
    const kiln_attr_def *attrs;   /* terminated by {NULL} */
    const kiln_plugin_vtable *vt;
    const char *doc;
    /* For bindings (class plugins of the Python package): when set, these
     * replace vt->create / vt->deserialize and receive `user`, so one
     * vtable serves many plugin classes (vt->create and vt->deserialize
     * may then be NULL).  Instances carry their own state afterwards. */
    void *user;
    int (*create_user)(const kiln_attrs *attrs, void *user, void **state);
    int (*deserialize_user)(const void *buf, size_t size, void *user, void **state);
    /* 1: enqueue_cuda is never captured into a CUDA graph (as
     * kiln_quick_op.cuda_graph_unsafe): for plugins whose enqueue does
     * host work per call (allocations, host reads, a Python callback that
     * may change what it launches). */
    int cuda_graph_unsafe;
} kiln_plugin_def;

/* Register an op.  The registry copies the definition (identity, doc,
 * attribute schema, format strings, vtable): the caller's structs may be
 * freed or reused once the call returns; `user` and the callbacks are
 * kept as given.  Which library defined the op is found from the address
 * of the struct passed in: a definition that lives in no shared object
 * file (heap memory, a binding) or in the main program has no library, so
 * engines can neither embed nor reload it; they need it registered again
 * before they load (KILN_EPLUGIN names it otherwise).
 * Errors: KILN_EEXISTS (message names the existing
 * definition's library and the new one), KILN_EINVAL (reserved namespace
 * "ai.onnx*"/"kiln" from outside libkiln, bad schema default, bad format
 * string), KILN_ENOMEM. */
KILN_API int kiln_register_quick_op(const kiln_quick_op *op);
KILN_API int kiln_register_plugin(const kiln_plugin_def *def);
/* What KILN_OP / KILN_PLUGIN call: `size` is sizeof the struct as the
 * plugin was compiled.  A plugin built against an older plugin.h (a shorter
 * struct) still registers, the fields it does not know taken as zero (their
 * defaults); a longer struct (a newer kiln's plugin) is KILN_EVERSION. */
KILN_API int kiln_register_quick_op_sized(const kiln_quick_op *op, size_t size);
KILN_API int kiln_register_plugin_sized(const kiln_plugin_def *def, size_t size);

/* Remove op `identity` ("ns::name") at `version`: later lookups (new
 * layers, builds, engine loads) no longer find it and the identity may be
 * registered again.  Networks and engines that already use the old
 * definition keep working: kiln keeps it (and its `user`) alive until the
 * process exits.  Errors: KILN_ENOTFOUND, KILN_EINVAL (malformed identity,
 * or a built-in op). */
KILN_API int kiln_registry_unregister(const char *identity, int version);

/* One registered op, as data (kiln_registry_dump prints the same).  The
 * strings and arrays belong to the registry and stay valid for the life of
 * the process (also after kiln_registry_unregister). */
typedef struct kiln_op_info {
    const char *ns, *name;
    int version;
    int min_inputs, max_inputs, num_outputs;
    int nattrs;
    const kiln_attr_def *attrs;      /* nattrs entries (the registry's copy) */
    const char *doc;                 /* "" if none */
    const char *library;             /* defining library path, "" = libkiln or none */
    int builtin;                     /* defined inside libkiln */
    int is_quick;                    /* quick op (else full plugin) */
    int has_impl, has_aot;           /* quick ops: JIT / AOT implementations */
} kiln_op_info;

/* Number of registered ops; kiln_registry_op fills `info` for op i (stable
 * order: registration order).  KILN_EINVAL if i is out of range. */
KILN_API int kiln_registry_count(void);
KILN_API int kiln_registry_op(int i, kiln_op_info *info);
/* The op ns::name at exactly `version` (kiln_registry_find), or at the
 * highest registered version <= max_version (kiln_registry_resolve: how an
 * ONNX opset picks its op).  info may be NULL (an existence test).
 * KILN_ENOTFOUND if there is none; the message names the op and lists the
 * registered versions. */
KILN_API int kiln_registry_find(const char *ns, const char *name, int version, kiln_op_info *info);
KILN_API int kiln_registry_resolve(const char *ns, const char *name, int max_version,
                                   kiln_op_info *info);
/* The registered versions of ns::name, ascending, as "1, 13" ("none"),
 * into buf (always NUL-terminated when size > 0). */
KILN_API void kiln_registry_versions(const char *ns, const char *name, char *buf, size_t size);

/* Registration at load time.  A failure is logged (KILN_LOG_ERROR) and
 * remembered: kiln_registry_load_library reports it. */
#define KILN_OP(var)                                                          \
    __attribute__((constructor)) static void kiln__reg_##var(void) {         \
        kiln_register_quick_op_sized(&(var), sizeof(var));                    \
    }
#define KILN_PLUGIN(var)                                                      \
    __attribute__((constructor)) static void kiln__regp_##var(void) {        \
        kiln_register_plugin_sized(&(var), sizeof(var));                      \
    }

/* ------------------------------------------------- plugins compiled from source */

/* Options for kiln_plugin_compile (zero-initialize; NULL = all defaults). */
typedef struct kiln_compile_options {
    int is_source;       /* path_or_source is C source text, not a file path */
    const char *cflags;  /* extra compiler flags, space-separated ("-DFOO -O3") */
    int rebuild;         /* compile even when the cache has the result */
    int verbose;         /* print cache hits/misses (INFO, whatever the log level; else at VERBOSE) */
} kiln_compile_options;

/* Compile a C file defining ops (it includes <kiln/plugin.h>) into a shared
 * library in the compile cache: $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln,
 * else ~/.cache/kiln.  The cache key hashes the source bytes, the flags,
 * the compiler's version line and KILN_ABI_VERSION; a hit compiles
 * nothing.  The compiler is $CC or cc.  *so_path_out (may be NULL) gets
 * the library's path (free with kiln_free).  Errors: KILN_ECOMPILE "no C
 * compiler found (set CC)", KILN_ECOMPILE with the compiler's file:line
 * messages, KILN_EIO (source unreadable, cache dir not writable). */
KILN_API int kiln_plugin_compile(const char *path_or_source, const kiln_compile_options *opt,
                                 char **so_path_out);
/* kiln_plugin_compile then kiln_registry_load_library on the result. */
KILN_API int kiln_plugin_compile_load(const char *path_or_source,
                                      const kiln_compile_options *opt, char **so_path_out);
/* The compile cache directory (created if missing) into buf: compiled
 * plugin sources (<stem>-<key>.so) and AOT kernels (aot-<entry>-<key>.bin)
 * live there; `kiln plugins cache --list/--clean` lists or removes them.
 * Errors: KILN_EINVAL (NULL buf), KILN_EIO (no HOME, path too long, not
 * creatable). */
KILN_API int kiln_compile_cache_dir(char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif /* KILN_PLUGIN_H */
