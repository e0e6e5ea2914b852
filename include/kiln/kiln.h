/*
 * kiln.h — the kiln inference engine: networks, builder, engines, contexts.
 *
 * The data path reads in one direction:
 *
 *   network (graph under construction)  --kiln_build-->  engine (immutable)
 *   engine  --kiln_engine_save / kiln_engine_load (mmap)-->  engine
 *   engine  --kiln_context_create-->  context  --kiln_context_run-->  outputs
 *
 * A network holds named tensors: inputs (dtype + dims, some dims symbolic),
 * constants (weights, copied in), and the outputs of layers.  A layer is an
 * instance of a registered op (see plugin.h) with attribute values.  Tensors
 * are referred to by name; the empty string "" stands for an absent optional
 * input.
 *
 * The builder infers shapes and types, folds constants, picks a type/format
 * combination and a tactic for every layer by timing the candidates (results
 * go to a timing cache that can persist in a file), plans activation memory
 * and returns an engine.  An engine may be saved to a versioned, checksummed
 * file and loaded back with mmap.  Contexts run an engine; many contexts of
 * one engine may run concurrently on different threads.
 *
 * Errors: every function that can fail returns an int status, 0 (KILN_OK) on
 * success and a negative KILN_E* code on failure, or NULL for constructors.
 * The failing call also leaves a human-readable message (what was expected,
 * what was found, where) that kiln_errmsg() returns in the same thread until
 * the next failing call.  Misuse (NULL where a handle or pointer is
 * required) is an error too: KILN_EINVAL (NULL, 0 or nothing for functions
 * without a status) and a message naming the function.  kiln never aborts
 * the program that embeds it.
 *
 * Ownership: objects come in _create/_free (or _load/_free) pairs.  Data
 * passed in (names, dims, constant contents, attribute values) is copied
 * unless a function says otherwise.  Strings returned by kiln are owned by
 * the object they came from and live as long as it does.
 */
#ifndef KILN_KILN_H
#define KILN_KILN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 1
#define KILN_VERSION_PATCH 0
/* Bumped whenever plugin.h structs or kiln.h signatures change incompatibly;
 * plugin libraries and the compile cache are keyed by it. */
#define KILN_ABI_VERSION 2

#if defined(__GNUC__)
#define KILN_API __attribute__((visibility("default")))
#define KILN_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define KILN_API
#define KILN_PRINTF(f, a)
#endif

#define KILN_MAX_DIMS 8
/* Most inputs + outputs of one layer. */
#define KILN_MAX_IO 64

/* "0.1.0": the library's version (may differ from the KILN_VERSION_* of
 * the headers a program was compiled with), and its KILN_ABI_VERSION. */
KILN_API const char *kiln_version(void);
KILN_API int kiln_abi_version(void);

/* ---------------------------------------------------------------- errors */

/* X(NAME, code, description) — one list for codes, names and messages. */
#define KILN_ERRNO_MAP(X)                                                      \
    X(OK, 0, "success")                                                       \
    X(INVAL, -1, "invalid argument")                                          \
    X(NOMEM, -2, "out of memory")                                             \
    X(IO, -3, "i/o error")                                                    \
    X(FORMAT, -4, "malformed input")                                          \
    X(VERSION, -5, "unsupported version")                                     \
    X(CHECKSUM, -6, "checksum mismatch")                                      \
    X(NOTFOUND, -7, "not found")                                              \
    X(EXISTS, -8, "already exists")                                           \
    X(UNSUPPORTED, -9, "unsupported")                                         \
    X(SHAPE, -10, "shape mismatch")                                           \
    X(TYPE, -11, "type mismatch")                                             \
    X(ATTR, -12, "invalid attribute")                                         \
    X(PROFILE, -13, "shape outside the optimization profile")                 \
    X(PLUGIN, -14, "required plugin not registered")                          \
    X(DEVICE, -15, "device error")                                            \
    X(KERNEL, -16, "kernel failed")                                           \
    X(DEBUG, -17, "debug check failed")                                       \
    X(COMPILE, -18, "compilation failed")                                     \
    X(INTERNAL, -19, "internal error")                                        \
    X(TRUST, -20, "engine not trusted")

typedef enum kiln_status {
#define KILN__ERR_ENUM(name, code, desc) KILN_E##name = (code),
    KILN_ERRNO_MAP(KILN__ERR_ENUM)
#undef KILN__ERR_ENUM
} kiln_status;
#define KILN_OK KILN_EOK

/* "invalid argument" etc. for a code; never NULL. */
KILN_API const char *kiln_strerror(int status);
/* "KILN_EINVAL" etc. for a code; never NULL. */
KILN_API const char *kiln_err_name(int status);
/* The message left by the last failing kiln call in this thread ("" if none).
 * Valid until the next kiln call in this thread. */
KILN_API const char *kiln_errmsg(void);

/* ---------------------------------------------------------------- logging */

typedef enum kiln_log_level {
    KILN_LOG_ERROR = 0,
    KILN_LOG_WARN = 1,
    KILN_LOG_INFO = 2,
    KILN_LOG_VERBOSE = 3
} kiln_log_level;

typedef void (*kiln_log_fn)(void *ud, kiln_log_level level, const char *msg);
/* Messages at or below `level` go to fn (default: stderr, level WARN).
 * fn == NULL restores the stderr logger.  Thread-safe.  fn runs on the
 * thread that logs, outside kiln's locks (it may take its own, such as
 * Python's GIL, and may call kiln), possibly concurrently from several
 * threads, and possibly once more with the old `ud` just after
 * kiln_log_set replaced it: keep `ud` valid a while or forever. */
KILN_API void kiln_log_set(kiln_log_level level, kiln_log_fn fn, void *ud);
KILN_API kiln_log_level kiln_log_get_level(void);

/* ---------------------------------------------------------------- allocator */

/* Replace the allocator used for every kiln allocation.  Call before any
 * other kiln function; all three must be given.  Blocks kiln needs aligned
 * (packed weights, a context's activations and scratch) come from
 * malloc_fn with room to align them; those of 2 MiB and more start on a
 * 2 MiB boundary and, on Linux, their whole 2 MiB pages are advised as
 * huge pages (madvise MADV_HUGEPAGE, a hint the kernel may ignore). */
KILN_API void kiln_set_allocator(void *(*malloc_fn)(size_t),
                                 void *(*realloc_fn)(void *, size_t),
                                 void (*free_fn)(void *));

/* ---------------------------------------------------------------- dtypes */

/* Values match ONNX TensorProto.DataType so importers map them 1:1. */
typedef enum kiln_dtype {
    KILN_DTYPE_UNDEFINED = 0,
    KILN_DTYPE_F32 = 1,
    KILN_DTYPE_U8 = 2,
    KILN_DTYPE_I8 = 3,
    KILN_DTYPE_U16 = 4,
    KILN_DTYPE_I16 = 5,
    KILN_DTYPE_I32 = 6,
    KILN_DTYPE_I64 = 7,
    KILN_DTYPE_STRING = 8,
    KILN_DTYPE_BOOL = 9,
    KILN_DTYPE_F16 = 10,
    KILN_DTYPE_F64 = 11,
    KILN_DTYPE_U32 = 12,
    KILN_DTYPE_U64 = 13,
    KILN_DTYPE_BF16 = 16,
    KILN_DTYPE_COUNT_ = 17
} kiln_dtype;

/* Size in bytes of one element (0 for UNDEFINED/STRING). */
KILN_API size_t kiln_dtype_size(kiln_dtype t);
/* "f32", "f16", "i64", "bool", ...; "?" for unknown values. */
KILN_API const char *kiln_dtype_name(kiln_dtype t);
/* Inverse of kiln_dtype_name; also accepts "FP32", "FP16", "float32",
 * "float16", "int64" ...  Returns KILN_DTYPE_UNDEFINED when unknown. */
KILN_API kiln_dtype kiln_dtype_parse(const char *s);

/* IEEE half <-> float (round to nearest even). */
KILN_API float kiln_f16_to_f32(uint16_t h);
KILN_API uint16_t kiln_f32_to_f16(float f);
KILN_API float kiln_bf16_to_f32(uint16_t h);
KILN_API uint16_t kiln_f32_to_bf16(float f);

/* ---------------------------------------------------------------- formats */

/* Memory layout of a tensor.  Dims are always given in logical order
 * (N, C, H, W, ...); the layout says how elements sit in memory.  LINEAR is
 * row-major.  NHWC is channels-last (expressible with strides).  NCHW8C and
 * NCHW16C are blocked: C is split into blocks of 8/16 channels that are
 * innermost, C padded up to the block with zeros (not expressible with
 * strides; kernels that accept them know the layout). */
typedef enum kiln_format {
    KILN_FORMAT_LINEAR = 0,
    KILN_FORMAT_NHWC = 1,
    KILN_FORMAT_NCHW8C = 2,
    KILN_FORMAT_NCHW16C = 3,
    KILN_FORMAT_COUNT_ = 4
} kiln_format;

KILN_API const char *kiln_format_name(kiln_format f); /* "LINEAR", ... */
KILN_API int kiln_format_parse(const char *s, kiln_format *out); /* 0 or KILN_EINVAL */

/* ---------------------------------------------------------------- devices */

typedef enum kiln_device_kind {
    KILN_DEVICE_CPU = 0,
    KILN_DEVICE_CUDA = 1
} kiln_device_kind;

/* Describe the devices kiln can use into buf (NUL-terminated, truncated to
 * size), one per line: "cpu: <signature>", then "cuda 0: <name>, sm_XY,
 * <memory> GiB, driver X.Y" or "cuda: no CUDA device (<reason>)", then
 * whether this libkiln holds CUDA kernels ("built without CUDA kernels
 * (nvcc not found at build)" if not).  Returns the number of usable CUDA
 * devices (0 or 1: kiln uses device $KILN_CUDA_DEVICE, default 0).  The CUDA
 * driver is loaded with dlopen on first use; no GPU is never an error. */
KILN_API int kiln_devices_describe(char *buf, size_t size);

/* ---------------------------------------------------------------- network */

typedef struct kiln_network kiln_network;
typedef struct kiln_layer kiln_layer;

/* A new, empty network.  NULL on allocation failure. */
KILN_API kiln_network *kiln_network_create(void);
/* Frees the network, its layers and its copied constants.  NULL is a no-op. */
KILN_API void kiln_network_free(kiln_network *net);

/* Declare a network input.  dims[i] >= 0 is a fixed size; dims[i] < 0 is a
 * dynamic dim named dim_names[i] (dim_names may be NULL or hold NULLs; the
 * name then defaults to "<input>.<i>").  Two dims with the same name are the
 * same symbol, also across inputs.  Errors: KILN_EEXISTS (name taken),
 * KILN_EINVAL (ndim out of range, bad dtype). */
KILN_API int kiln_network_add_input(kiln_network *net, const char *name,
                                    kiln_dtype dtype, int ndim,
                                    const int64_t *dims,
                                    const char *const *dim_names);

/* Add a constant (weights).  `data` holds product(dims) elements, row-major;
 * it is copied.  Errors: KILN_EEXISTS, KILN_EINVAL, KILN_ENOMEM. */
KILN_API int kiln_network_add_constant(kiln_network *net, const char *name,
                                       kiln_dtype dtype, int ndim,
                                       const int64_t *dims, const void *data);

/* Add a layer running op `op` ("namespace::name") at `version`.  Built-in
 * ONNX ops (namespaces "ai.onnx...") follow the opset rule: the highest
 * registered version <= `version` is taken (ai.onnx::Relu at 13 runs Relu
 * v6; 0, or a version below every registered one, fails and lists them);
 * other namespaces (plugins) need the exact version.  inputs
 * name existing tensors ("" = absent optional input); outputs name new
 * tensors.  `layer_name` may be NULL (a name is generated).  The op must be
 * registered when the layer is added.  Returns the layer (owned by the
 * network) or NULL: unknown op (the message names op and version and lists
 * registered versions), wrong input/output count, unknown input tensor,
 * output name taken. */
KILN_API kiln_layer *kiln_network_add_layer(kiln_network *net, const char *op,
                                            int version, const char *layer_name,
                                            int nin, const char *const *inputs,
                                            int nout,
                                            const char *const *outputs);

/* Attribute values, checked against the op's schema at once: an unknown
 * attribute or a wrong type is KILN_EATTR with a message naming the layer
 * and the attribute.  Values are copied.  A missing required attribute is
 * reported by kiln_build. */
KILN_API int kiln_layer_set_int(kiln_layer *l, const char *name, int64_t v);
KILN_API int kiln_layer_set_float(kiln_layer *l, const char *name, double v);
KILN_API int kiln_layer_set_bool(kiln_layer *l, const char *name, int v);
KILN_API int kiln_layer_set_string(kiln_layer *l, const char *name, const char *v);
KILN_API int kiln_layer_set_bytes(kiln_layer *l, const char *name,
                                  const void *data, size_t n);
/* 1-D array of `count` elements of `elem` (any numeric dtype or BOOL).  The
 * value is converted to the schema's element type when lossless (e.g. I64
 * values into an I32 array), else KILN_EATTR. */
KILN_API int kiln_layer_set_array(kiln_layer *l, const char *name,
                                  kiln_dtype elem, int64_t count,
                                  const void *data);
KILN_API int kiln_layer_set_ints(kiln_layer *l, const char *name,
                                 const int64_t *v, int64_t count);
KILN_API int kiln_layer_set_floats(kiln_layer *l, const char *name,
                                   const float *v, int64_t count);
/* A tensor-valued attribute (ONNX TENSOR), copied. */
KILN_API int kiln_layer_set_tensor(kiln_layer *l, const char *name,
                                   kiln_dtype dtype, int ndim,
                                   const int64_t *dims, const void *data);
/* A graph-valued attribute (ONNX GRAPH: If/Loop bodies).  The layer takes
 * ownership of `g` also on failure: never use or free `g` after the call. */
KILN_API int kiln_layer_set_graph(kiln_layer *l, const char *name,
                                  kiln_network *g);

/* Per-layer choice between the op's JIT (impl) and AOT implementation:
 * -1 = the build's KILN_BUILD_PREFER_JIT/AOT flag, 0 = JIT, 1 = AOT.  A
 * layer whose op has both, with no choice here and neither flag, gets the
 * faster of the two as timed by kiln_build (the JIT impl under
 * KILN_BUILD_NO_TIMING). */
KILN_API int kiln_layer_set_aot(kiln_layer *l, int aot);
KILN_API const char *kiln_layer_name(const kiln_layer *l);

/* Mark a tensor as a network output.  Errors: KILN_ENOTFOUND. */
KILN_API int kiln_network_mark_output(kiln_network *net, const char *name);

KILN_API int kiln_network_num_layers(const kiln_network *net);
KILN_API int kiln_network_num_inputs(const kiln_network *net);
KILN_API int kiln_network_num_outputs(const kiln_network *net);
KILN_API const char *kiln_network_input_name(const kiln_network *net, int i);
KILN_API const char *kiln_network_output_name(const kiln_network *net, int i);
/* Input i's name, dtype and dims (dims[k] = -1 where dynamic); is_input = 1.
 * KILN_EINVAL if i is out of range. */
typedef struct kiln_io_info kiln_io_info;
KILN_API int kiln_network_input_info(const kiln_network *net, int i, kiln_io_info *info);
/* Append src's constants and layers to dst (e.g. a loop body unrolled k
 * times): every tensor and layer name of src gets `prefix`; src input i
 * reads dst's tensor in_names[i] ("" or NULL: an absent optional input);
 * src output k is named out_names[k] in dst.  Attribute values are copied;
 * graph-valued attributes are borrowed from src, which must outlive dst.
 * in_names has kiln_network_num_inputs(src) entries, out_names
 * kiln_network_num_outputs(src) (may be NULL when that is 0).  Errors:
 * KILN_EINVAL (NULL argument or out name, dst == src, a layer dst refuses),
 * KILN_ENOMEM; on error dst may hold part of src. */
KILN_API int kiln_network_append(kiln_network *dst, const kiln_network *src, const char *prefix,
                                 const char *const *in_names, const char *const *out_names);

/* A network tensor by name, as data.  kind: what made it.  dtype, ndim,
 * dims and dim_names: as given for inputs and constants (dims[k] < 0 where
 * dynamic, dim_names[k] its symbol or NULL); a layer output's type is known
 * only to the builder (dtype UNDEFINED, ndim -1).  data/bytes: a constant's
 * values (the network's copy, valid while the network lives), else NULL/0.
 * info may be NULL (an existence test).  KILN_ENOTFOUND if no tensor has
 * that name. */
typedef enum kiln_net_tensor_kind {
    KILN_NET_TENSOR_INPUT = 1,
    KILN_NET_TENSOR_CONSTANT,
    KILN_NET_TENSOR_LAYER_OUTPUT
} kiln_net_tensor_kind;
typedef struct kiln_net_tensor_info {
    const char *name;
    kiln_net_tensor_kind kind;
    kiln_dtype dtype;
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
    const char *dim_names[KILN_MAX_DIMS];
    const void *data;
    size_t bytes;
    int is_output;      /* marked with kiln_network_mark_output */
} kiln_net_tensor_info;
KILN_API int kiln_network_tensor_info(const kiln_network *net, const char *name,
                                      kiln_net_tensor_info *info);

/* One layer as data, for a network or an engine.  Strings belong to the
 * network/engine and live as long as it does (the op strings of a network
 * layer: as long as the process).  inputs[k] is "" for an absent optional
 * input.  tactic, aot and time_ms: engine layers only (network layers: 0,
 * the layer's aot choice -1/0/1, 0). */
typedef struct kiln_layer_info {
    const char *name;
    const char *op_ns, *op_name;
    int op_version;
    int nin, nout;
    const char *inputs[KILN_MAX_IO];
    const char *outputs[KILN_MAX_IO];
    int tactic;
    int aot;
    double time_ms;
    kiln_device_kind device; /* engine layers: where it runs (network layers: CPU) */
} kiln_layer_info;

/* Layer i of the network (0 <= i < kiln_network_num_layers).  KILN_EINVAL
 * if out of range. */
KILN_API int kiln_network_layer_info(const kiln_network *net, int i, kiln_layer_info *info);

/* ---------------------------------------------------------------- builder */

typedef struct kiln_build_config kiln_build_config;

typedef enum kiln_build_flag {
    KILN_BUILD_FP16 = 1 << 0,        /* allow FP16 where an op offers it */
    KILN_BUILD_PREFER_AOT = 1 << 1,  /* ops with both: take AOT */
    KILN_BUILD_PREFER_JIT = 1 << 2,  /* ops with both: take JIT */
    KILN_BUILD_NO_TIMING = 1 << 3,   /* take the first candidate, time nothing */
    KILN_BUILD_PROGRESS = 1 << 4,    /* progress line on stderr (if a tty) */
    KILN_BUILD_EMBED_PLUGINS = 1 << 5, /* store needed plugin .so files in the engine */
    KILN_BUILD_NO_FUSION = 1 << 6,   /* keep every layer: no epilogue fusion (plugin.h) */
    KILN_BUILD_BF16 = 1 << 7,        /* allow BF16 where an op offers it */
    KILN_BUILD_TF32 = 1 << 8,        /* CUDA: FP32 GEMMs may round inputs to TF32 (off: exact FP32) */
    KILN_BUILD_STRICT_DEVICE = 1 << 9, /* CUDA: a layer left on the CPU is an error listing them all */
    KILN_BUILD_REFINE = 1 << 10,     /* CPU: close tactics rerun in the network (see below) */
    KILN_BUILD_CPU_BLOCKED = 1 << 11, /* (the default since engine files of session 15; no effect) */
    KILN_BUILD_CPU_LINEAR = 1 << 12  /* CPU: no built-in NCHW16C kernels, LINEAR only (see below) */
} kiln_build_flag;

/* Defaults: CPU, FP32, threads = number of CPUs, no timing cache file,
 * 5 timing repetitions (on the GPU the median is taken; on the CPU the
 * fastest, and each candidate of a layer gets a second look once all of
 * them ran, so load from other processes does not decide the choice).
 * KILN_BUILD_REFINE (CPU builds that time): layers whose runner-up tactic
 * (same types and formats) came within 10% of the chosen one in isolation
 * then run inside the whole engine, chosen and runner-up tactics in
 * alternate engines at the config's threads, and take the runner-up when
 * their stretch of the network (the layer and its next two; identical
 * layers together) is faster in most paired rounds (a sign test) and by
 * over 3% in the median; within a time budget (40 runs of the engine, at
 * most 2 s; an engine that runs in under 1 ms is not refined) what it
 * leaves undecided keeps the isolated choice.  The timing cache keeps the
 * verdicts, read back only by builds with the flag.  Off by default: on a
 * shared 2-core VM it changed almost no choice of the benchmark models
 * (bench/README.md, sessions 12-13). */
/* NCHW16C on the CPU: a CPU build's built-in ops also offer their NCHW16C
 * kernels (Conv tactics 13-17: 1x1, Winograd 3x3, direct strided and stem
 * convs with C and M multiples of 16; the pools; Add and the unary
 * activations), which the builder times.  The greedy choice never enters
 * NCHW16C on its own; the region pass switches connected layers into it
 * where their isolated timings plus the reformats at the region's border
 * beat the LINEAR choice by 3%, and a switched region is kept only where
 * the whole engine runs faster with it in paired rounds (else reverted;
 * verdicts in the timing cache).  ResNet-50 on a 2-core Xeon: -6..-8.5% at
 * 1 thread (bench/README.md, session 15); where no region wins
 * in the network the engine is the LINEAR one.  KILN_BUILD_CPU_LINEAR
 * leaves the NCHW16C kernels out (the builds of sessions before 15: fewer
 * candidates, a shorter build).  Engines with NCHW16C layers load and run
 * whatever the flag. */
KILN_API kiln_build_config *kiln_build_config_create(void);
KILN_API void kiln_build_config_free(kiln_build_config *cfg);
KILN_API void kiln_build_config_set_flags(kiln_build_config *cfg, unsigned flags);
KILN_API unsigned kiln_build_config_get_flags(const kiln_build_config *cfg);
KILN_API void kiln_build_config_set_threads(kiln_build_config *cfg, int n);
KILN_API void kiln_build_config_set_timing_reps(kiln_build_config *cfg, int reps);
/* KILN_DEVICE_CUDA: each layer whose op has a CUDA implementation for its
 * types runs on the GPU, the rest on the CPU, with copies between them
 * (docs/CUDA.md).  kiln_build then fails with KILN_EDEVICE "no CUDA device
 * (<reason>)" on a machine without a usable GPU. */
KILN_API void kiln_build_config_set_device(kiln_build_config *cfg, kiln_device_kind d);
/* Timing cache file: read (if it exists) before the build, written after.
 * Entries with another device signature are ignored (logged).  NULL = none. */
KILN_API int kiln_build_config_set_timing_cache(kiln_build_config *cfg, const char *path);
/* Optimization profile for one input: min/opt/max for every dim.  Fixed
 * dims must be equal in all three.  Tactics are timed at `opt`.  Inputs with
 * dynamic dims and no profile use the same value for all three, given by
 * `opt` only if set with this call: an input with a dynamic dim and no
 * profile is a build error naming the input. */
KILN_API int kiln_build_config_set_profile(kiln_build_config *cfg,
                                           const char *input, int ndim,
                                           const int64_t *min,
                                           const int64_t *opt,
                                           const int64_t *max);

/* Counters filled by kiln_build (for tests, tools and logs). */
typedef struct kiln_build_stats {
    int layers;             /* layers in the engine (after folding, reformats incl.) */
    int folded;             /* layers folded into constants */
    int reformats;          /* reformat layers inserted */
    int candidates;         /* (layer, combination, tactic) candidates considered */
    int timed;              /* candidates actually timed (run on random inputs) */
    int cache_hits;         /* candidates answered by the timing cache */
    int cache_dedup;        /* of which: identical instances within this build */
    double build_ms;        /* wall time of the build */
    int fused;              /* layers fused into their producer as epilogues */
    int refined;            /* layers whose close tactics ran in the network (refinement) */
    int refine_changed;     /* of which: took a runner-up tactic */
} kiln_build_stats;

typedef struct kiln_engine kiln_engine;

/* Build an engine.  `stats` may be NULL.  The network is not modified and
 * may be freed afterwards.  Errors name the layer/tensor at fault: shape
 * function failures, missing required attributes, missing profiles,
 * KILN_EUNSUPPORTED for type combinations no op implementation accepts,
 * KILN_EINVAL for both PREFER_AOT and PREFER_JIT set. */
KILN_API int kiln_build(const kiln_network *net, const kiln_build_config *cfg,
                        kiln_engine **out, kiln_build_stats *stats);

/* ---------------------------------------------------------------- engine */

/* Save to `path` (written to a temporary file then renamed: an existing file
 * is replaced only on success). */
KILN_API int kiln_engine_save(const kiln_engine *e, const char *path);
/* Serialize into a malloc'd buffer (free with kiln_free). */
KILN_API int kiln_engine_serialize(const kiln_engine *e, void **buf, size_t *size);
/* Load with mmap; weights and packed weights are used in place, read-only
 * (shared by every context and every process that maps the file).  Every
 * offset, size and checksum is verified: KILN_EFORMAT, KILN_EVERSION,
 * KILN_ECHECKSUM with a message naming the section and offset (the
 * checksums of the weights sections of 1 MiB and more are verified at the
 * first kiln_context_run of the engine instead, so a load does not read
 * them: a damaged file fails that run and every later one with
 * KILN_ECHECKSUM); KILN_EPLUGIN naming the missing
 * plugin's namespace, name and version; KILN_EDEVICE for an engine built for
 * another CPU/GPU; KILN_EVERSION naming the file's and this kiln's format
 * versions; KILN_ETRUST for native code from another machine (the default
 * policy, KILN_CODE_LOCAL: see kiln_load_options below).  The parts are
 * cross-checked, so an engine without native code cannot cause an access
 * outside its tensors (errors: KILN_EFORMAT "engine is inconsistent", at
 * load or at the run where the shapes it claims disagree with its ops). */
KILN_API int kiln_engine_load(const char *path, kiln_engine **out);
/* Same from memory; `buf` is copied. */
KILN_API int kiln_engine_load_memory(const void *buf, size_t size, kiln_engine **out);

/* Trust.  An engine without native code is data: loading and running it
 * cannot execute code from the file or access memory out of bounds,
 * whatever its bytes (every dim, offset and index is checked at load and,
 * where shapes are dynamic, at each run).  An engine *with* native code
 * (AOT kernels, embedded plugin libraries: kiln_engine_has_code) runs that
 * code in this process, so loading one is a decision of the caller:
 *
 *   KILN_CODE_LOCAL (the default, used by kiln_engine_load): allowed when
 *     the engine records this machine as its build host (META holds a hash
 *     of /etc/machine-id, else of the host name).  A convenience, not a
 *     security boundary: whoever can write the file can forge it.
 *   KILN_CODE_DENY: refused (KILN_ETRUST) unless verified by `verify_key`.
 *   KILN_CODE_ALLOW: the caller trusts the file.
 *
 * verify_key (32-byte Ed25519 public key, kiln_sign_keypair): the engine
 * must carry a valid signature by that key (KILN_ETRUST otherwise), and a
 * verified engine may carry code under LOCAL and DENY.  Signatures need
 * kiln built with libsodium (kiln_sign_available); without it, a load that
 * asks for verification fails with KILN_EUNSUPPORTED. */
typedef enum kiln_code_policy {
    KILN_CODE_LOCAL = 0,
    KILN_CODE_DENY = 1,
    KILN_CODE_ALLOW = 2
} kiln_code_policy;

typedef struct kiln_load_options {
    kiln_code_policy code;
    const unsigned char *verify_key; /* 32 bytes, or NULL: no signature required */
} kiln_load_options;

/* kiln_engine_load / _load_memory with options (NULL: the defaults; a `code`
 * outside kiln_code_policy: KILN_EINVAL, nothing read). */
KILN_API int kiln_engine_load_ex(const char *path, const kiln_load_options *opt, kiln_engine **out);
KILN_API int kiln_engine_load_memory_ex(const void *buf, size_t size, const kiln_load_options *opt,
                                        kiln_engine **out);
/* 1 if the engine carries native code (AOT kernels or embedded plugin
 * libraries), else 0. */
KILN_API int kiln_engine_has_code(const kiln_engine *e);

/* Ed25519 signing (libsodium).  1 if this kiln was built with it. */
KILN_API int kiln_sign_available(void);
/* A fresh key pair: pk 32 bytes, sk 64 bytes.  KILN_EUNSUPPORTED without
 * libsodium. */
KILN_API int kiln_sign_keypair(unsigned char pk[32], unsigned char sk[64]);
/* Save / serialize with a signature by `sk` (64 bytes) over the whole file
 * (header, section table and every section but the signature itself).
 * KILN_EUNSUPPORTED without libsodium. */
KILN_API int kiln_engine_save_signed(const kiln_engine *e, const char *path, const unsigned char sk[64]);
KILN_API int kiln_engine_serialize_signed(const kiln_engine *e, const unsigned char sk[64], void **buf,
                                          size_t *size);
KILN_API void kiln_engine_free(kiln_engine *e);

struct kiln_io_info {
    const char *name;
    kiln_dtype dtype;
    int ndim;
    int64_t dims[KILN_MAX_DIMS]; /* -1 where dynamic */
    int64_t min[KILN_MAX_DIMS], opt[KILN_MAX_DIMS], max[KILN_MAX_DIMS]; /* profile (inputs) */
    int is_input;
    int data_dependent; /* output whose shape is known only after a run */
};

KILN_API int kiln_engine_num_inputs(const kiln_engine *e);
KILN_API int kiln_engine_num_outputs(const kiln_engine *e);
/* i < num_inputs: input i; else output i - num_inputs.  KILN_EINVAL if out of range. */
KILN_API int kiln_engine_io(const kiln_engine *e, int i, kiln_io_info *info);
/* Layers of the engine as data (kiln_engine_inspect prints them). */
KILN_API int kiln_engine_num_layers(const kiln_engine *e);
KILN_API int kiln_engine_layer_info(const kiln_engine *e, int i, kiln_layer_info *info);
/* Human-readable description: layers with op identity, chosen types,
 * formats, tactic and timing, memory plan, weights size, AOT kernels,
 * embedded and required plugins. */
KILN_API int kiln_engine_inspect(const kiln_engine *e, FILE *out);
/* Where an engine's op layers run: *gpu and *cpu (each may be NULL) get the
 * number of layers on each device, not counting the type conversions and
 * copies the builder inserted (kiln::reformat).  A CPU engine has gpu 0. */
KILN_API void kiln_engine_placement(const kiln_engine *e, int *gpu, int *cpu);

/* ---------------------------------------------------------------- context */

typedef struct kiln_context kiln_context;

/* A context owns activation memory and a CPU thread pool of `threads`
 * workers (0 = the engine's build setting).  Contexts of one engine are
 * independent and may run concurrently.  A CUDA engine's first context
 * uploads the weights (shared by all); KILN_EDEVICE when this machine has no
 * GPU or another GPU model than the engine was built for. */
KILN_API int kiln_context_create(const kiln_engine *e, int threads, kiln_context **out);
KILN_API void kiln_context_free(kiln_context *ctx);

/* Set the actual dims of an input (required for dynamic inputs; fixed
 * inputs default to their dims).  KILN_EPROFILE if outside min..max,
 * naming input, dim and bounds. */
KILN_API int kiln_context_set_input_shape(kiln_context *ctx, const char *name,
                                          int ndim, const int64_t *dims);
/* Bind a user buffer to an input or output (host memory for the CPU
 * device).  The buffer is borrowed; it must stay valid during runs.
 * `bytes` is checked against the tensor's size at run time (for
 * data-dependent outputs: against the upper bound).  Unbound outputs are
 * written to context-owned memory, see kiln_context_output.  (NULL, 0)
 * binds a zero-size input (a valid binding) and unbinds an output; NULL
 * with bytes > 0 is KILN_EINVAL. */
KILN_API int kiln_context_bind(kiln_context *ctx, const char *name, void *data, size_t bytes);
/* Run the engine once.  Errors name the layer at fault. */
KILN_API int kiln_context_run(kiln_context *ctx);
/* CUDA engines.  kiln_context_enqueue: the run of kiln_context_run without
 * waiting for the GPU at the end: work is queued on `stream` (a CUstream;
 * NULL: the context's stream, see kiln_context_set_stream) and outputs are
 * ready once the stream reaches that point (kiln_context_synchronize, or
 * the caller's own sync on its stream).  The host still waits inside a run
 * where it must read GPU results (size tensors, a layer left on the CPU),
 * and at the start of the next run.  On a CPU engine it equals
 * kiln_context_run (stream must be NULL).  Input/output buffers may be host
 * memory (pageable, staged by the driver) or device pointers (unified
 * addressing: the copy layers move them on the GPU; an output produced on
 * the GPU and read by no CPU layer is written straight into a device
 * buffer, zero copy).  An input bound to device memory that a CPU layer
 * reads fails the run with KILN_EINVAL naming the input and the layer. */
KILN_API int kiln_context_enqueue(kiln_context *ctx, void *stream);
/* Run later enqueues on `stream` (NULL: the context's own stream, created
 * with the context).  Waits for work queued on the previous stream.
 * KILN_EINVAL for a non-NULL stream on a CPU-only engine. */
KILN_API int kiln_context_set_stream(kiln_context *ctx, void *stream);
/* Wait for the context's queued GPU work; 0 or KILN_EDEVICE (naming the CUDA
 * error).  No-op on CPU engines. */
KILN_API int kiln_context_synchronize(kiln_context *ctx);
/* CUDA graphs (default on): from the second run at the same input shapes and
 * buffer pointers, each stretch of GPU layers between host steps is
 * captured once and replayed; a shape or binding change re-captures.  Off:
 * every layer is launched one by one.  Profiling and debug runs never use
 * graphs. */
KILN_API void kiln_context_set_cuda_graphs(kiln_context *ctx, int on);
/* Shape of an input or output after set_input_shape (outputs with
 * data-dependent shape: after a run). */
KILN_API int kiln_context_shape(const kiln_context *ctx, const char *name,
                                int *ndim, int64_t *dims);
/* Data of an output after a run (the bound buffer or context memory). */
KILN_API const void *kiln_context_output(const kiln_context *ctx, const char *name);
/* Bytes needed for an output (the upper bound for data-dependent ones). */
KILN_API int kiln_context_output_capacity(const kiln_context *ctx, const char *name, size_t *bytes);

/* Debug mode: outputs of every layer are poisoned before it runs and
 * guarded by canary bytes; after it runs, every element must have been
 * written and the canaries intact, else KILN_EDEBUG naming the layer,
 * tensor and first unwritten element or overrun. */
KILN_API void kiln_context_set_debug(kiln_context *ctx, int on);

/* Per-layer profile of the last run (filled when profiling is on). */
KILN_API void kiln_context_set_profiling(kiln_context *ctx, int on);
KILN_API int kiln_context_profile(const kiln_context *ctx, int layer,
                                  const char **name, double *ms);

/* ---------------------------------------------------------------- registry */

/* Load a plugin library: dlopen it; its ops register themselves through
 * KILN_OP / KILN_PLUGIN constructors.  Loading the same path twice is a
 * no-op.  Errors: KILN_EIO (dlopen message), KILN_EEXISTS (an op it defines
 * is already registered: both definitions named), KILN_EINVAL (an op it
 * defines is invalid, or it registers no op at all: not a kiln plugin
 * library). */
KILN_API int kiln_registry_load_library(const char *path);
/* Print every registered op with its schema (attributes, defaults,
 * formats, tactics, AOT).  `filter` NULL or a substring of "ns::name". */
KILN_API void kiln_registry_dump(FILE *out, const char *filter);

/* ---------------------------------------------------------------- misc */

KILN_API void kiln_free(void *p);
/* Short signature of this machine's CPU ("x86_64:avx2,fma,avx512f"). */
KILN_API const char *kiln_cpu_signature(void);

#ifdef __cplusplus
}
#endif
#endif /* KILN_KILN_H */
