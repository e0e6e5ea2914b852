/*
 * kiln_int.h — internal declarations shared by the modules of libkiln.
 * Nothing here is public.  Internal names start with kiln__ (or are static).
 *
 * Modules and who calls whom (the data path reads one way):
 *   core/    alloc, errors+log, dtype, fp16, expr pool, tensor views
 *   device/  cpu/: thread pool, sgemm, fast math
 *   plugin/  registry, attribute codec, format grammar, quick-op adapter,
 *            library loading
 *   builder/ network API, shape inference + folding, format/tactic
 *            selection (timing + timing cache), memory planning -> engine
 *   engine/  engine file (save/load/mmap/verify), inspect, runtime contexts
 *   onnx/    ONNX reader -> network (uses only the public network API)
 *   ops/     built-in ops, written with plugin.h + ops/common/ops_util.h only
 */
#ifndef KILN_INT_H
#define KILN_INT_H

#include "kiln/kiln.h"
#include "kiln/plugin.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------ core/alloc, core/error */
#include "core/alloc_error.h"

/* ------------------------------------------------------------ core/error: misuse */
/* Public entry points check their arguments with KILN__ARG: misuse returns
 * `ret` with a KILN_EINVAL message naming the function, never an abort.
 * KILN__ASSERT is for internal invariants that no input can reach. */
#define KILN__ARG(c, ret)                                                      \
    do {                                                                       \
        if (!(c)) {                                                            \
            kiln__err(KILN_EINVAL, "%s: invalid argument, expected %s", __func__, #c); \
            return ret;                                                        \
        }                                                                      \
    } while (0)
/* Misuse inside a plugin callback by a call that cannot return a status
 * (kiln_attrs_*, kiln_expr_*, kiln_exec_*): recorded per thread, and the
 * builder/runtime fail the callback with it (kiln__misuse_take(rc) after the
 * callback returns; kiln__misuse_clear() before it). */
#define KILN__CB_ARG(c, ret)                                                   \
    do {                                                                       \
        if (!(c)) {                                                            \
            kiln__misuse("%s: invalid argument, expected %s", __func__, #c);   \
            return ret;                                                        \
        }                                                                      \
    } while (0)
void kiln__misuse(const char *fmt, ...) KILN_PRINTF(1, 2);
void kiln__misuse_push(const char *msg);
int kiln__misuse_pop(char *buf, size_t size); /* 1 and the message if pending (clears it) */
void kiln__misuse_clear(void);
int kiln__misuse_take(int rc);
#define KILN__ASSERT(c)                                                        \
    do {                                                                       \
        if (!(c)) kiln__assert_fail(#c, __FILE__, __LINE__);                  \
    } while (0)
_Noreturn void kiln__assert_fail(const char *what, const char *file, int line);
double kiln__now_ms(void); /* monotonic clock */

/* Longest tensor, layer or dim name in bytes the network API accepts.  The
 * builder makes names from them without truncation (sub-network prefixes,
 * ":const"...), all far below the 1 MiB an engine file's reader allows, so
 * a build never writes an engine its loader rejects. */
#define KILN__MAX_NAME 4096u

/* ------------------------------------------------------------ core/expr */
struct kiln_expr {
    kiln_expr_op op;
    uint32_t id;            /* index in the pool; children have smaller ids */
    int64_t v;              /* CONST value */
    const char *name;       /* SYM name (owned by the pool) */
    const kiln_expr *a, *b, *c;
    uint64_t hash;
    int64_t lo;             /* a lower bound of its value (INT64_MIN: none known) */
};
kiln_exprs *kiln__exprs_create(void);
/* Declare symbol `sym` >= lo (an input dim: its profile's min; a size: 0).
 * Expressions built on it then fold what the bound decides, e.g. Reshape's
 * (dim == -1) ? inferred : dim, (dim == 0) ? copied : dim and
 * (dim * k) // max(dim * k', 1).  Call before building on the symbol. */
void kiln__expr_assume_min(const kiln_expr *sym, int64_t lo);
void kiln__exprs_free(kiln_exprs *x);
uint32_t kiln__exprs_count(const kiln_exprs *x);
const kiln_expr *kiln__exprs_at(const kiln_exprs *x, uint32_t id);
/* Evaluate one expression given symbol values (lookup by name through cb). */
typedef int (*kiln__sym_lookup)(void *ud, const char *name, int64_t *v);
int kiln__expr_eval(const kiln_expr *e, kiln__sym_lookup cb, void *ud, int64_t *out);

/* ------------------------------------------------------------ core/tensor_view */
#include "core/tensor_view.h"

/* ------------------------------------------------------------ device/cpu/threadpool */
typedef struct kiln__pool kiln__pool;
kiln__pool *kiln__pool_create(int threads);   /* threads >= 1; 1 = no workers */
void kiln__pool_free(kiln__pool *p);
int kiln__pool_threads(const kiln__pool *p);
void kiln__pool_run(kiln__pool *p, int n_tasks, kiln_task_fn fn, void *ud);
/* on = 1 while an inference runs: idle workers yield instead of sleeping */
void kiln__pool_hold(kiln__pool *p, int on);
/* Owned shares of `items` work items (< 2^32) among `n` tasks (at most
 * KILN__SHARES; tasks i and i + n share one): share s holds items
 * [s items / n, (s + 1) items / n).  kiln__shares_take gives a task the
 * next item of its own share from the front, then what is left of the
 * others' from their backs; -1 when none is left.  A split that gives a
 * thread the same items at every inference keeps what it writes in its
 * own cache for whoever reads it next on the same core (kiln_exec_parallel_for,
 * the SGEMM's column runs). */
#define KILN__SHARES 64
typedef struct kiln__shares {
    int n;
    _Atomic uint64_t s[KILN__SHARES]; /* next from the front (low 32 bits), one past the last not taken (high 32) */
} kiln__shares;
void kiln__shares_init(kiln__shares *sh, int64_t items, int tasks);
int64_t kiln__shares_take(kiln__shares *sh, int task);
/* The CPU execution handle used by ops (wraps a pool). */
struct kiln_exec {
    kiln_device_kind device;
    kiln__pool *pool;
    void *stream;           /* CUDA */
    int depth;              /* nesting guard for kiln_exec_parallel */
    /* The first failure of a fused epilogue (kiln_call_epilogue) in the
     * layer running on this handle, from any of its threads (0: none), and
     * that thread's message: the context fails the layer with it even when
     * the kernel drops the return code (engine/epilogue.c). */
    int epi_rc;
    char epi_msg[256];
    /* The next layer's largest packed weights when it runs on the CPU and
     * they are KILN__NEXT_W_MIN bytes or more, in an engine whose packed
     * weights outgrow the L3 (so each inference reads them from memory;
     * the context sets them per layer), else NULL: a compute-bound kernel
     * may prefetch them while it runs, so that the next layer reads them
     * from cache (conv_pw16c.c; a Winograd conv's U after ResNet-50's 1x1
     * convs: -1% on a 32 MB L3; on a 300 MB one, where they stay in L3,
     * +1-2%). */
    const char *next_w;
    size_t next_w_bytes;
};
#define KILN__NEXT_W_MIN ((size_t)1 << 20)
/* A CUDA execution handle: the kiln_exec kernels see (device CUDA, the
 * stream) plus what the build chose for them. */
typedef struct kiln__cuda_exec {
    kiln_exec base;
    int allow_tf32;         /* FP32 GEMMs may use TF32 (KILN_BUILD_TF32) */
    void *fault;            /* the context's kiln_cu_fault record (mapped host memory), NULL: none */
} kiln__cuda_exec;
int kiln__cpu_count(void);
/* The L3 cache this CPU reads, in bytes (Linux sysfs; cached), 0 when not
 * known; kiln__parse_cache_size reads sysfs's "32768K" form (0: not one). */
size_t kiln__cpu_l3_bytes(void);
size_t kiln__parse_cache_size(const char *s);
/* 1 on a thread while the builder times a candidate (builder/select.c):
 * an op may refuse tactics it deems not worth timing there
 * (KILN_EUNSUPPORTED) that it still runs when an engine names them. */
extern _Thread_local int kiln__b_timing;

/* ------------------------------------------------------------ plugin/registry */
typedef struct kiln__op {
    char *ns, *name;
    int version;
    int min_inputs, max_inputs, num_outputs;
    const kiln_attr_def *attr_defs;  /* schema (the registry's copy) */
    int nattrs;
    kiln_attr_value *attr_defaults;  /* parsed defaults, nattrs entries */
    const kiln_plugin_vtable *vt;    /* quick ops: the adapter's vtable */
    const kiln_quick_op *quick;      /* NULL for full plugins */
    const kiln_plugin_def *plugin;   /* NULL for quick ops */
    char *library;                   /* path of the .so that defined it, NULL = libkiln or none */
    int builtin;                     /* defined inside libkiln */
    /* registry.c: the struct registration was given (to recognise the same
     * definition registered twice) and the memory of the registry's copy
     * of it (quick, plugin, attr_defs point into it). */
    const void *origin;
    void *defmem;
} kiln__op;

/* Exact (ns, name, version). NULL if absent (no message set). */
const kiln__op *kiln__registry_find(const char *ns, const char *name, int version);
/* Highest version <= max_version (ONNX opset resolution).  NULL if none. */
const kiln__op *kiln__registry_resolve(const char *ns, const char *name, int max_version);
/* "ns::name" split; returns 0 or KILN_EINVAL. ns/name point into buf. */
int kiln__split_identity(const char *id, char *buf, size_t size, const char **ns, const char **name);
/* List registered versions of ns::name into buf (for messages). */
void kiln__registry_versions(const char *ns, const char *name, char *buf, size_t size);
/* Iterate all ops (stable order); returns NULL past the end. */
const kiln__op *kiln__registry_at(int i);

/* Instance of an op for a layer (quick ops: the adapter's state holding a
 * copy of the attributes; plugins: vt->create).  Errors name the op. */
int kiln__op_create(const kiln__op *op, const kiln_attrs *attrs, void **state);
/* Instance from an engine blob (quick ops: attribute codec; plugins:
 * vt->deserialize). */
int kiln__op_deserialize(const kiln__op *op, const void *blob, size_t size, void **state);
/* Blob for the engine (quick ops: attribute codec; plugins: vt->serialize).
 * *blob is kiln__malloc'd. */
int kiln__op_serialize(const kiln__op *op, const void *state, uint8_t **blob, size_t *size);
/* Packed form of constant input `input` (kiln_quick_op.prepack; see
 * plugin.h for what c holds).  dst NULL: *size gets the bytes needed, 0 =
 * none (always 0 for full plugins and ops without prepack).  Errors name
 * the op. */
/* The type/format combinations a quick-op instance offers ({NULL}-
 * terminated): the op's `formats`, or what its formats_fn answered for this
 * layer at shape time.  NULL: the default (shape's types, LINEAR, tactic 0);
 * always NULL for full plugins. */
const kiln_combo *kiln__op_formats(const kiln__op *op, const void *state);
/* Run a quick op's formats_fn on c alone (no shape call; engine
 * validation) and keep its answer for kiln__op_formats.  0 for ops without. */
int kiln__op_formats_fn(const kiln__op *op, void *state, kiln_shape_ctx *c);
int kiln__op_prepack(const kiln__op *op, const void *state, const kiln_call *c, int input,
                     void *dst, size_t *size);

/* Per-device implementations (plugin/quick_op.c).  has_device: the op has
 * an implementation there (the CPU always).  host_inputs: bit k = input k
 * of the device implementation stays in host memory
 * (kiln_quick_op.cuda_host_inputs).  graph_unsafe: a CUDA graph must not
 * capture it.  enqueue_fn / workspace_fn: the vtable entries for device d
 * (NULL: none). */
typedef int (*kiln__enqueue_fn)(void *state, const kiln_call *c);
typedef size_t (*kiln__workspace_fn)(void *state, const kiln_call *c);
int kiln__op_has_device(const kiln__op *op, kiln_device_kind d);
unsigned kiln__op_host_inputs(const kiln__op *op, kiln_device_kind d);
/* Nonzero when the op's CUDA implementation does not cover this instance
 * beyond its type combinations: its kiln_quick_op.cuda_check refused it at
 * the last shape call (types, ranks or attributes), or it is a built-in op
 * that states its CUDA types neither by cuda_formats nor by cuda_check;
 * *why says which.  0 otherwise, and for full plugins (their
 * supports_format decides). */
int kiln__op_cuda_check(const kiln__op *op, const void *state, const char **why);
int kiln__op_graph_unsafe(const kiln__op *op);
kiln__enqueue_fn kiln__op_enqueue_fn(const kiln__op *op, kiln_device_kind d);
kiln__workspace_fn kiln__op_workspace_fn(const kiln__op *op, kiln_device_kind d);

/* ------------------------------------------------------------ plugin/attrs */
/* A layer's attribute values (owning): values[i] belongs to op->attr_defs[i]. */
typedef struct kiln__attrset {
    int count;
    const kiln_attr_def *defs;
    kiln_attr_value *v;         /* owned deep copies */
} kiln__attrset;
int kiln__attrset_init(kiln__attrset *s, const kiln__op *op); /* defaults filled */
void kiln__attrset_free(kiln__attrset *s);
/* The present values as text for people, "pads=[1, 2, 2, 1] mode=\"wrap\""
 * (arrays past 16 elements end in "..."); always NUL-terminated. */
void kiln__attrset_describe(const kiln__attrset *s, char *buf, size_t size);
int kiln__attrset_copy(kiln__attrset *dst, const kiln__attrset *src);
/* Set from a value (type-checked, converted losslessly); message names attr. */
int kiln__attrset_set(kiln__attrset *s, const char *name, const kiln_attr_value *val);
/* First required attribute not present, or NULL. */
const char *kiln__attrset_missing(const kiln__attrset *s);
kiln_attrs kiln__attrset_view(const kiln__attrset *s);
/* Binary codec (little-endian, self-describing by name+type; GRAPH not
 * serializable).  serialize: buf NULL asks for the size. */
int kiln__attrs_serialize(const kiln__attrset *s, void *buf, size_t *size);
int kiln__attrs_deserialize(kiln__attrset *s, const kiln__op *op, const void *buf, size_t size);
/* Parse a text default into a value of the given def (used at registration). */
int kiln__attr_parse_default(const kiln_attr_def *d, kiln_attr_value *out);
void kiln__attr_value_free(kiln_attr_value *v);

/* ------------------------------------------------------------ builder/network */
typedef enum kiln__tkind {
    KILN__T_INPUT = 1,
    KILN__T_CONST,
    KILN__T_LAYER        /* produced by a layer */
} kiln__tkind;

typedef struct kiln__ntensor {
    char *name;
    kiln__tkind kind;
    kiln_dtype dtype;        /* inputs/consts; layer outputs: inferred */
    int ndim;
    int64_t dims[KILN_MAX_DIMS];   /* -1 dynamic (inputs) */
    char *dim_names[KILN_MAX_DIMS];
    void *data;              /* consts: owned copy */
    size_t bytes;
    int producer;            /* layer index for KILN__T_LAYER, -1 else */
    int is_output;
} kiln__ntensor;

struct kiln_layer {
    kiln_network *net;
    char *name;
    const kiln__op *op;
    int nin, nout;
    int *in;                 /* tensor indices, -1 = absent */
    int *out;
    kiln__attrset attrs;
    kiln_network **graphs;   /* owned graph attributes */
    int ngraphs;
    int aot;                 /* -1 default, 0 JIT, 1 AOT */
};

struct kiln_network {
    kiln__ntensor *tensors;
    int ntensors, cap_tensors;
    kiln_layer **layers;
    int nlayers, cap_layers;
    int *inputs, ninputs;    /* tensor indices */
    int *outputs, noutputs;
    /* builder/network.c: name -> index hash tables (open addressing, -1 empty) */
    int *tensor_hash, tensor_hash_cap;
    int *layer_hash, layer_hash_cap;
};
int kiln__network_find_tensor(const kiln_network *net, const char *name); /* -1 */
/* kiln_network_add_constant without the copy: on success the network owns
 * data (kiln__malloc'd, bytes > 0); on failure the caller still does. */
int kiln__network_add_constant_take(kiln_network *net, const char *name, kiln_dtype dtype, int ndim,
                                    const int64_t *dims, void *data);

/* ------------------------------------------------------------ builder/memplan */
/* Offsets for n buffers of sizes[i] bytes alive from layer first[i] to
 * last[i] inclusive (alias[i] >= 0: shares buffer alias[i], which then
 * lives as long as either).  Offsets are 64-byte aligned; *total is the
 * arena size.  Used by the builder (plan at opt) and by contexts (plan at
 * actual shapes). */
int kiln__memplan(int n, const uint64_t *sizes, const int32_t *first, const int32_t *last,
                  const int32_t *alias, uint64_t *offsets, uint64_t *total);

/* ------------------------------------------------------------ engine plan */
/* The built engine, in memory exactly as serialized (engine/file.c) and
 * as run (engine/context.c).  Shapes are expressions in a flat program:
 * node i only refers to nodes < i, so one forward pass evaluates all. */
typedef enum kiln__symkind {
    KILN__SYM_INPUT_DIM = 1, /* a = input tensor index, b = dim */
    KILN__SYM_SIZE,          /* a = size tensor index (value read after its producer ran) */
    KILN__SYM_VALUE          /* a = input tensor index, b = element (int input read at run) */
} kiln__symkind;
/* In all three kinds `a` is an index into engine->tensors (not
 * into engine->inputs).  kiln__etensor.upper: for a size tensor (is_size)
 * the node of the largest value it may hold; for a tensor whose dims use
 * SIZE symbols the node of its largest numel; else -1.  The loader checks
 * these (INPUT_DIM/VALUE: a is a KILN__ET_INPUT tensor; SIZE: is_size). */

typedef struct kiln__enode {
    uint8_t op;              /* kiln_expr_op */
    uint8_t symkind;         /* SYM: kiln__symkind */
    int32_t a, b, c;         /* children (node indices) or, for SYM, binding */
    int64_t v;               /* CONST */
} kiln__enode;

typedef enum kiln__etkind {
    KILN__ET_INPUT = 1,
    KILN__ET_CONST,          /* weights: data in the weights blob */
    KILN__ET_ACT,            /* activation, planned memory */
    KILN__ET_OUTPUT          /* network output (user buffer or context memory) */
} kiln__etkind;

typedef struct kiln__etensor {
    char *name;
    uint8_t kind;            /* kiln__etkind */
    uint8_t dtype, format;
    uint8_t ndim;
    int32_t dims[KILN_MAX_DIMS];   /* expression node indices */
    int32_t upper;           /* node index: upper bound of numel (size tensors), -1 */
    uint64_t const_off, const_bytes; /* KILN__ET_CONST: in weights blob */
    int32_t alias_of;        /* shares the buffer of this tensor (in-place), -1 */
    int32_t first, last;     /* first producing / last consuming layer index */
    int32_t is_size;         /* 1 if a size tensor (0-D I64) */
    uint64_t plan_off, plan_bytes; /* memory plan at opt shapes (for inspect) */
    uint8_t loc;             /* memory space: kiln_device_kind (file section DEVICE) */
    /* A constant read only through its layers' stored packed forms
     * (engine/packed_only.c): the file keeps no raw copy.  Loaded from a
     * file, const_off is KILN__CONST_PACKED_ONLY and its data is
     * kiln_engine.unread. */
    uint8_t packed_only;
} kiln__etensor;
#define KILN__CONST_PACKED_ONLY UINT64_MAX

typedef struct kiln__elayer {
    char *name;
    const kiln__op *op;      /* resolved at load; NULL only for AOT layers */
    char *op_ns, *op_name;
    int32_t op_version;
    int32_t nin, nout;
    int32_t *in, *out;       /* tensor indices, -1 absent */
    kiln_io_format io;
    int32_t tactic;
    int32_t aot_kernel;      /* index into engine aot kernels, -1 = JIT */
    uint8_t *blob;           /* serialized attributes / plugin state */
    uint64_t blob_size;
    double time_ms;          /* timed at opt (0 if not timed) */
    uint8_t device;          /* kiln_device_kind it runs on (file section DEVICE) */
    /* runtime (not serialized): */
    kiln__attrset attrs;     /* quick ops */
    void *state;             /* plugin instance */
    /* Epilogue chain fused into this layer (engine file section
     * FUSION), applied to output 0; nepi = 0: none. */
    int32_t nepi;
    struct kiln__eepi *epi;
    void *epi_rt;            /* runtime chain for kiln_call.epilogue (engine/epilogue.c) */
    /* Per input, the packed form of a constant input from
     * kiln_quick_op.prepack, or NULL; the array itself is NULL when no input
     * has one.  kiln_call.prepacked.  Built-in ops' packed forms are stored
     * in the engine file (section PACKED) and point into the engine's
     * packed block (bit k of prepacked_stored set: not owned); the others
     * are packed at load (kiln__aligned_alloc'd). */
    void **prepacked;
    uint64_t *prepacked_size; /* bytes of each (allocated with prepacked) */
    uint64_t prepacked_stored; /* bit k: prepacked[k] points into kiln_engine.packed */
    int32_t prepack_done;    /* kiln__engine_prepare computed them */
    uint64_t prepacked_bytes; /* their total size (kiln inspect) */
} kiln__elayer;

/* One fused epilogue op: identity, attributes and inputs (engine
 * tensor indices of constants; in[x] = -1 is the fused activation). */
#define KILN__MAX_EPI 8       /* ops per chain */
#define KILN__EPI_MAX_IN 8    /* inputs of an epilogue op */
typedef struct kiln__eepi {
    char *op_ns, *op_name;
    int32_t op_version;
    int32_t nin, x;
    int32_t in[KILN__EPI_MAX_IN];
    uint8_t *blob;           /* attribute codec (kiln__attrs_serialize) */
    uint64_t blob_size;
    /* runtime: */
    const kiln__op *op;
    kiln__attrset attrs;
} kiln__eepi;
/* engine/epilogue.c: resolve the chain's ops, decode attributes, build
 * el->epi_rt (errors name the layer and the op); free all of it. */
int kiln__epi_prepare(kiln_engine *e, kiln__elayer *el);
/* After a layer's kernel returned rc on x: rc if nonzero, else the first
 * failure of its fused epilogue (an error naming it), else 0; clears it. */
int kiln__epi_failure(kiln_exec *x, int rc);
void kiln__epi_free(kiln__elayer *el);
/* A GPU layer's fused activation (kiln_call.epilogue): its kiln_cu_act code
 * (KILN_CU_ACT_NONE without one) and parameters. */
int kiln__epi_cuda_act(const void *epilogue, float *a, float *b);
/* ... and the index of the input to add to it first (a residual Add fused
 * into a Conv, builder/fuse.c), -1 when none. */
int kiln__epi_cuda_residual(const void *epilogue);
/* A host chain that is only a residual Add and/or a Relu after it: 1,
 * with *res the input index of the residual (-1: none; the kernel checks
 * it has output 0's shape, not a vector added by column) and *relu; else
 * 0.  A CPU kernel that adds the
 * residual and clamps itself (the SGEMM's store) then skips
 * kiln_call_epilogue. */
int kiln__epi_residual_relu(const void *epilogue, int *res, int *relu);
/* A GPU MatMul's fused bias (builder/fuse.c): the device pointer of the
 * constant (one value per column, the output's type) and *n its length;
 * NULL and 0 without one. */
const void *kiln__epi_cuda_bias(const void *epilogue, int64_t *n);
/* 1 if the chain is GPU data (residual, bias, activation), not host callbacks. */
int kiln__epi_is_cuda(const void *epilogue);
/* Short name list " + BatchNormalization + Clip" for inspect ("" if none). */
void kiln__epi_describe(const kiln__elayer *el, char *buf, size_t size);

typedef struct kiln__aot {
    char *entry;
    uint8_t *so;             /* shared object bytes */
    uint64_t so_size;
    char *cpu_sig;
    int32_t extent;          /* node index */
    int32_t nscalars;
    uint8_t scalar_types[KILN_MAX_SCALARS];
    int32_t scalars[KILN_MAX_SCALARS];  /* node index (I32/I64) */
    double fscalars[KILN_MAX_SCALARS];
    void *handle, *fn;       /* runtime: dlopen handle and entry */
} kiln__aot;

/* An AOT CUDA kernel (plugin/aot_cuda.c; engine section AOTCUDA). */
typedef struct kiln__aot_cuda {
    char *entry;
    uint8_t lang;            /* KILN_AOT_LANG_CUDA / _PTX (what the op gave) */
    int32_t sm;              /* cubin's GPU, 10 * major + minor; 0: no cubin */
    int32_t nptr;            /* pointer parameters: the layer's inputs + outputs */
    int32_t grid[3], block[3], smem; /* node indices; -1: 1 (grid, block), 0 (smem) */
    int32_t nscalars;
    uint8_t scalar_types[KILN_MAX_SCALARS];
    int32_t scalars[KILN_MAX_SCALARS];  /* node index; -1: F32 constant fscalars[i] */
    double fscalars[KILN_MAX_SCALARS];
    int32_t nscratch;
    uint64_t scratch_bytes[KILN_AOT_MAX_SCRATCH]; /* per block */
    char *ptx;               /* NUL-terminated; ptx_size excludes the NUL */
    uint64_t ptx_size;
    uint8_t *cubin;
    uint64_t cubin_size;
    /* runtime: the loaded module and function, and which image it came from */
    void *module, *fn;
    int from_ptx;
} kiln__aot_cuda;

typedef struct kiln__plugin_ref {
    char *ns, *name;
    int32_t version;
    char *library;           /* where it was loaded from at build ("" = unknown) */
    uint8_t *so;             /* embedded .so bytes (EMBED_PLUGINS), NULL */
    uint64_t so_size;
} kiln__plugin_ref;

struct kiln_engine {
    kiln__enode *nodes;      int32_t nnodes;
    kiln__etensor *tensors;  int32_t ntensors;
    kiln__elayer *layers;    int32_t nlayers;
    int32_t *inputs;         int32_t ninputs;  /* tensor indices */
    int32_t *outputs;        int32_t noutputs;
    int64_t (*prof)[3][KILN_MAX_DIMS];         /* per input: min/opt/max */
    uint8_t *weights;        uint64_t weights_size; /* 64-byte aligned */
    kiln__aot *aot;          int32_t naot;
    kiln__aot_cuda *acu;     int32_t nacu;     /* AOT CUDA kernels (section AOTCUDA) */
    kiln__plugin_ref *plugins; int32_t nplugins;
    /* Names of input-dim symbol nodes given by the network (ONNX
     * dim_param, kiln_network_add_input's dim_names): what inspect prints
     * for them; file section DIMNAMES (optional). */
    struct kiln__edimname { int32_t node; char *name; } *dimnames; int32_t ndimnames;
    char *device_sig;
    int32_t threads;         /* build setting */
    kiln_device_kind device; /* the build's device (CUDA: some layers or tensors live on the GPU) */
    /* CUDA engines (file section DEVICE): the GPU signature built for, and
     * KILN_BUILD_TF32; runtime: the weights uploaded once (engine/device_weights.c,
     * shared by all contexts). */
    char *cuda_sig;
    int32_t allow_tf32;
    void *dweights;
    int dweights_state;      /* 0 not yet, 1 uploaded, < 0 the KILN_E* of a failed upload */
    uint64_t host_id;        /* build host (kiln__host_id), 0 until saved/loaded */
    int signature;           /* 0 unsigned, 1 signed (not checked), 2 signature verified */
    /* Packed forms of constant inputs read from section PACKED (layers'
     * prepacked[k] point here): in the map, or owned (packed_owned) when
     * loaded from memory; NULL when the file has none or they were packed
     * for another kernel layout (then packed at load). */
    uint8_t *packed;         uint64_t packed_size;
    int packed_owned;
    /* What a packed-only constant's data points at (kiln__etensor_const):
     * a read-only mapping of zero pages (no memory behind it), so the code
     * that asks "is it a constant" still sees one; NULL when none. */
    uint8_t *unread;         size_t unread_size;
    /* During the builder's check only: packed-only constant t reads at
     * unread + unread_at[t] (each on its own pages; packed_only.c). */
    const uint64_t *unread_at;
    /* Checksums of the bulk sections (WEIGHTS, PACKED) of a mapped file,
     * checked at the first run instead of at load (engine/data_check.c);
     * NULL when load checked them. */
    struct kiln__data_check *data_check;
    /* memory: */
    void *map; size_t map_size;  /* mmap of the file, or NULL */
    int weights_owned;       /* weights allocated (not in the map) */
};

/* engine/packed_only.c: constants stored only in packed form.
 * kiln__engine_packed_only_refs (ops resolved): cand[t] = 1 for each host constant read
 * by layers only as packed inputs that the file stores (CPU, built-in op,
 * all dims static), else 0; returns how many.
 * kiln__etensor_const: the bytes of constant t (kiln_engine.unread for a
 * packed-only one loaded from a file).
 * kiln__engine_map_unread: maps kiln_engine.unread for the largest
 * packed-only constant (0 or KILN_ENOMEM).
 * kiln__engine_mark_packed_only (called by kiln_build): marks packed_only each candidate
 * of a built CPU engine whose raw bytes a run leaves untouched (logged). */
int kiln__engine_packed_only_refs(const kiln_engine *e, uint8_t *cand);
const uint8_t *kiln__etensor_const(const kiln_engine *e, const kiln__etensor *t);
int kiln__engine_map_unread(kiln_engine *e);
/* After kiln__engine_prepare of a loaded engine: every packed-only
 * constant is still read only through stored packed forms (else KILN_EFORMAT). */
int kiln__engine_check_packed_only(const kiln_engine *e);
/* Sets input i of c's engine to its fixed dims, its profile's opt for
 * dynamic ones; *io describes it, *bytes its size (0 or a KILN_E*). */
int kiln__context_opt_input(kiln_context *c, const kiln_engine *e, int i, kiln_io_info *io, size_t *bytes);
/* known_good: the verdict of an earlier check of the same plan by the same
 * binary (the builder keeps it in the timing cache): mark without the two
 * check runs.  Returns 1 when the candidates were marked, else 0. */
int kiln__engine_mark_packed_only(kiln_engine *e, int known_good);
/* engine/file.c: a digest of everything the engine's file would say except
 * the contents of its bulk pieces (weights, packed weights: only their
 * sizes count): the plan, which decides the kernels' paths. */
int kiln__engine_plan_digest(const kiln_engine *e, uint64_t *digest);
/* core/build_id.c: the running libkiln's GNU build id in hex, or NULL. */
const char *kiln__build_id(void);

/* engine/data_check.c: sections whose checksums a mapped load defers to
 * the first run (a large engine then loads without reading its weights).
 * kiln__data_check_add records one (the bytes, the expected checksum, the
 * section name and file offset for the message); kiln__engine_check_data
 * verifies them once per engine (thread-safe; the chunks on exec's threads,
 * exec may be NULL) and returns 0 or the KILN_ECHECKSUM that every later
 * call repeats. */
int kiln__data_check_add(kiln_engine *e, const uint8_t *p, uint64_t n, uint64_t ck, const char *section,
                         uint64_t off);
int kiln__engine_check_data(const kiln_engine *e, kiln_exec *exec);
/* engine/file.c, for tests and the fuzzer, which patch engine images on
 * purpose: the checksum of a section, and kiln__file_reseal, which
 * recomputes every section checksum the table lets it reach and then the
 * header's (as a deliberate tamperer would; what a broken header or table
 * hides is left as it is). */
uint64_t kiln__file_checksum(const void *p, size_t n);
void kiln__file_reseal(uint8_t *p, size_t n);
void kiln__data_check_free(kiln_engine *e);
/* The layout of the packed forms built-in ops write (kernel geometry of
 * this build of the CPU kernels): stored in section PACKED, whose bytes
 * are used only by a kiln that packs the same way. */
const char *kiln__prepack_layout(void);

/* engine/device_weights.c: the engine's weights in GPU memory, uploaded
 * on the first call (thread-safe; one copy shared by every context), and
 * the check that this machine's GPU is the one the engine was built for:
 * KILN_EDEVICE "engine built for CUDA (<sig>): no CUDA device (<why>)" or
 * "... this GPU is <sig>: rebuild the engine here". */
int kiln__engine_device_check(const kiln_engine *e);
int kiln__engine_device_weights(kiln_engine *e, uint8_t **dweights);
void kiln__engine_device_free(kiln_engine *e);

/* Where the memory of engine tensor t lives (its memory space, chosen by
 * the builder: kiln__etensor.loc). */
static inline kiln_device_kind kiln__etensor_device(const kiln_engine *e, int32_t t) {
    return (kiln_device_kind)e->tensors[t].loc;
}

/* engine/engine.c: the value of shape-program node n when it is a constant
 * (returns 1), else 0. */
int kiln__enode_const(const kiln_engine *e, int32_t n, int64_t *v);
/* dims of t where static, -1 elsewhere; returns the first non-static dim,
 * or -1 when all are static. */
int kiln__etensor_static_dims(const kiln_engine *e, const kiln__etensor *t, int64_t *dims);
/* engine/engine.c: free everything (also runtime layer states). */
void kiln__engine_destroy(kiln_engine *e);
/* Instantiate layer states after build/load (attrs decoded, plugin
 * deserialize); errors name the layer and, for a missing op, its identity. */
int kiln__engine_prepare(kiln_engine *e);
/* engine/validate.c: cross-checks of a loaded engine's parts (lifetimes,
 * constants, aliases), and per shape change of one layer's output views
 * against its op's shape function.  KILN_EFORMAT naming layer and tensor. */
int kiln__engine_validate(const kiln_engine *e);
/* builder/shape.c: run op's shape function outside the builder (engine
 * validation, concrete input dims): a size tensor's symbol stands for its
 * upper bound, and kiln_shape_numel_bound's bounds land in numel[out]. */
typedef struct kiln__shape_bounds {
    const kiln_expr *numel[KILN_MAX_IO];
} kiln__shape_bounds;
int kiln__shape_run_bounds(const kiln__op *op, void *state, kiln_shape_ctx *c,
                           kiln__shape_bounds *bounds);
/* 1 when the builder runs this shape call (its formats_fn answer lists the
 * candidates it times), 0 at engine load and run (the answer judges a
 * stored tactic): a built-in formats_fn may leave out, only when 1, a
 * tactic that runs the same kernel as another it lists. */
int kiln__shape_ctx_building(const kiln_shape_ctx *c);
/* The threads the builder times with (its config's), when building; 0 at
 * engine load and run.  A tactic that only differs from another at >= 2
 * threads may be left out of a 1-thread build's candidates. */
int kiln__shape_ctx_build_threads(const kiln_shape_ctx *c);
/* Should a built-in CPU op list its NCHW16C rows?  1 at engine load and
 * run (a stored choice is checked against every row); when building, only
 * with KILN_BUILD_CPU_BLOCKED (or the tests' $KILN_CPU_BLOCKED=force). */
int kiln__shape_ctx_cpu_blocked(const kiln_shape_ctx *c);
/* engine/file.c: the engine file format version this kiln writes and reads. */
unsigned kiln__file_version(void);
int kiln__layer_check_shapes(const kiln_engine *e, int32_t l, void *state, const kiln_attrs *attrs,
                             const kiln_tensor *in, const kiln_tensor *out, const uint8_t *size_dep,
                             const uint64_t *capacity);
/* Layer l's tensors' dtypes/layouts and its tactic are a combination its
 * op accepts on the layer's device (the quick op's formats, or the
 * plugin's supports_format/valid_tactics), and its stored io record says
 * the same.  at_load: combinations made by formats_fn are not known yet
 * (checked again after the shape function ran). */
int kiln__layer_check_formats(const kiln_engine *e, int32_t l, void *state, int at_load);


/* ------------------------------------------------------------ plugin/so_load, compile, aot */
/* Load a shared object from bytes without writing where the user did not
 * choose: memfd_create + dlopen("/proc/self/fd/N"); fallback: a private
 * mkdtemp dir in $XDG_RUNTIME_DIR or $TMPDIR, unlinked right after dlopen.
 * The ELF header is checked first (class, machine, type, header bounds).
 * `what` names the object in messages.  Errors: KILN_EFORMAT (not a shared
 * object for this machine), KILN_EIO (dlopen's message). */
int kiln__so_load_bytes(const void *bytes, size_t n, const char *what, void **handle);
void kiln__so_unload(void *handle);
/* SHA-256 of n bytes (compile cache keys). */
void kiln__sha256(const void *data, size_t n, uint8_t out[32]);
/* Run the system C compiler ($CC, split on spaces, or cc) with args
 * (NULL-terminated).  *log (kiln__malloc'd, may be NULL) gets its stdout +
 * stderr.  Returns 0, KILN_ECOMPILE "no C compiler found (set CC)", or
 * KILN_ECOMPILE "<what>: compiler failed (exit N):\n<its messages>". */
int kiln__cc_run(const char *what, const char *const *args, char **log);
/* The compiler's version line ("cc (Debian 12.2.0-14) 12.2.0"), cached. */
int kiln__cc_version(char *buf, size_t size);
/* Directory holding kiln/plugin.h ($KILN_INCLUDE_DIR, the source tree's
 * include/, the installed includedir), or NULL. */
const char *kiln__include_dir(void);
/* The compile cache directory (created, mode 0700); KILN_EIO if none. */
int kiln__cache_dir(char *buf, size_t size);
/* Write a file through a temporary in the same directory + rename; -1 and
 * errno on failure. */
int kiln__write_atomic(const char *path, const void *data, size_t n);
/* A whole file, NUL-terminated (kiln__free); -1 and errno on failure. */
int kiln__read_file(const char *path, char **data, size_t *n);

/* AOT kernels.  Compile C source into shared-object bytes (system cc,
 * -O2 -fPIC -shared, self-contained: -z defs); the entry symbol must be
 * defined.  *flags_used (kiln__malloc'd) records the command line. */
int kiln__aot_compile(const char *source, const char *entry, uint8_t **so, size_t *n,
                      char **flags_used);
/* Check what op->quick->aot returned against op->quick->aot_signature
 * (count and types, entry/source/extent set).  KILN_EINVAL naming op and
 * argument: "op sample::circ_pad v1: aot kernel scalar 2 is f32, signature says i64". */
int kiln__aot_check(const kiln__op *op, const kiln_aot_kernel *k);
/* Builder: check + compile k into *out, mapping its expressions (extent,
 * I32/I64 scalars) to engine node indices with node_of (return < 0 on
 * failure, message set).  *out is zeroed first; free with kiln__aot_free. */
typedef int32_t (*kiln__aot_node_fn)(void *ud, const kiln_expr *e);
int kiln__aot_from_kernel(const kiln__op *op, const kiln_aot_kernel *k,
                          kiln__aot_node_fn node_of, void *ud, kiln__aot *out);
/* Load k->so (kiln__so_load_bytes) and resolve k->entry into k->handle/fn.
 * KILN_EDEVICE if k->cpu_sig is not this CPU's.  Idempotent, thread-safe. */
int kiln__aot_load(kiln__aot *k);
/* Free the fields of k (unloads it); not k itself. */
void kiln__aot_free(kiln__aot *k);
/* Engine file record of one kernel (little-endian).  serialize: buf NULL
 * asks the size.  deserialize checks every length and node index against
 * nnodes (KILN_EFORMAT naming the field); the .so bytes are copied. */
int kiln__aot_serialize(const kiln__aot *k, uint8_t *buf, size_t *size);
int kiln__aot_deserialize(kiln__aot *k, const uint8_t *buf, size_t size, int32_t nnodes);
/* Runtime: evaluate extent/scalars from node_values (one int64 per engine
 * node) and call entry(args, ith, nth) through kiln_exec_parallel.  Loads k
 * if needed. */
/* "i32", "i64", "f32" ("?" otherwise). */
const char *kiln__aot_scalar_name(int t);
/* plugin/aot_cuda.c: check and compile what cuda_aot returned (nptr: the
 * layer's inputs + outputs); *out zeroed first, freed with
 * kiln__aot_cuda_free.  Load its module (once; thread-safe), the
 * workspace its scratch pointers need at these node values, launch it for
 * call c (in/out device pointers, workspace, stream). */
int kiln__aot_cuda_from_kernel(const kiln__op *op, const kiln_aot_kernel *k, int nptr, kiln__aot_node_fn node_of,
                               void *ud, kiln__aot_cuda *out);
void kiln__aot_cuda_free(kiln__aot_cuda *k);
int kiln__aot_cuda_load(kiln__aot_cuda *k);
int kiln__aot_cuda_scratch(const kiln__aot_cuda *k, const int64_t *vals, size_t *bytes);
int kiln__aot_cuda_launch(kiln__aot_cuda *k, const kiln_call *c, const int64_t *vals);
/* How many AOT kernels layer l's aot_kernel may index: those of its device. */
static inline int32_t kiln__layer_aot_count(const kiln_engine *e, const kiln__elayer *l) {
    return l->device == KILN_DEVICE_CUDA ? e->nacu : e->naot;
}
int kiln__aot_launch(kiln__aot *k, kiln_exec *ex, void *const *in, void *const *out,
                     const int64_t *node_values);

#endif /* KILN_INT_H */
