/*
 * cli.h — shared pieces of the `kiln` command-line tool.
 *
 * One file per verb (build.c, run.c, bench.c, inspect.c, plugins.c;
 * test_onnx.c belongs to the ONNX importer), plus args.c (option parsing,
 * shapes, plugin loading, random inputs) and npy.c (.npy files).  Each verb
 * is `int kiln_cli_<verb>(int argc, char **argv)` with argv[0] = the verb
 * name; it returns the process exit status: 0 success, 1 failure (one line
 * "kiln <verb>: <message>" on stderr), 2 usage error.
 */
#ifndef KILN_CLI_H
#define KILN_CLI_H

#include <stddef.h>
#include <stdint.h>

#include <kiln/kiln.h>

int kiln_cli_build(int argc, char **argv);
int kiln_cli_run(int argc, char **argv);
int kiln_cli_bench(int argc, char **argv);
int kiln_cli_inspect(int argc, char **argv);
int kiln_cli_plugins(int argc, char **argv);
int kiln_cli_devices(int argc, char **argv);
/* `kiln plugins compile FILE.c ...` (plugins.c). */
int kiln_cli_plugins_compile(int argc, char **argv);
/* `kiln test-onnx`: the ONNX conformance runner (tools/test_onnx.c). */
int kiln_cli_test_onnx(int argc, char **argv);

/* ------------------------------------------------------------ args.c */

/* Print "kiln <verb>: <message>\n" to stderr; returns 1. */
int cli_fail(const char *verb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Same with kiln_errmsg() (or kiln_strerror(status) when empty) appended
 * after "<what>: "; returns 1. */
int cli_fail_kiln(const char *verb, int status, const char *what);
/* kiln_engine_load_ex with cli_load_opts and the CLI's error message (1 on failure). */
int cli_engine_load(const char *verb, const char *path, kiln_engine **e);

/* -v / --verbose (every verb): the library logs at KILN_LOG_VERBOSE
 * (engine loading, plugin lookups, the builder's timings); 1 if matched. */
int cli_verbose_opt(const char *arg);

/* ------------------------------------------------------------ sign.c */

/* `kiln keygen NAME`. */
int kiln_cli_keygen(int argc, char **argv);
/* The trust options of verbs that load engines (--allow-code, --no-code,
 * --verify PUBKEY): 1 consumed, 0 no match, -1 error (message printed). */
int cli_trust_opt(const char *verb, int argc, char **argv, int *i);
extern kiln_load_options cli_load_opts;
/* A hex key file of n bytes; 0 or 1 (message printed). */
int cli_key_read(const char *verb, const char *path, unsigned char *out, size_t n);
/* Help lines for the trust options. */
#define CLI_TRUST_HELP                                                                          \
    "  --allow-code              load native code (AOT kernels, embedded plugins) from an\n"    \
    "                            engine built on another machine (default: only from this one)\n" \
    "  --no-code                 refuse native code unless --verify checks a signature\n"       \
    "  --verify PUBKEY           require a valid signature by PUBKEY (kiln keygen; kiln build\n" \
    "                            --sign): a verified engine may carry code\n"

/* The verb being run ("build", ...), for messages; set by main. */
extern const char *cli_verb_name;

/* Option matching: if argv[*i] is `name` ("--out") or "--out=V", store the
 * value in *val (the next argument or V) and return 1; a missing value
 * prints an error and returns -1; no match returns 0. */
int cli_opt(int argc, char **argv, int *i, const char *name, const char **val);
/* Parse a non-negative int / a double; -1 on error (message printed). */
int cli_int(const char *verb, const char *opt, const char *s, long *out);
/* --threads N: 0 (the engine's setting) to CLI_MAX_THREADS (the thread pool's limit). */
#define CLI_MAX_THREADS 1024
int cli_threads(const char *verb, const char *s, long *out);
/* The measured single-precision FMA peak of `threads` threads, GFLOP/s
 * (fma_peak.c; takes ~0.1-0.5 s). */
double cli_fma_peak_gflops(int threads);
/* The round trip of a cache line between the first two CPUs this process
 * may run on, ns (core_rtt.c; ~5-20 ms): 0, or -1 where there are fewer
 * than two or one cannot be pinned. */
int cli_core_rtt(double *ns, int *cpu_a, int *cpu_b);
int cli_double(const char *verb, const char *opt, const char *s, double *out);
/* --device cpu|cuda; -1 on error (message printed). */
int cli_device(const char *verb, const char *s, kiln_device_kind *out);

/* "name:1x3x224x224,other:4" (also accepts several options concatenated). */
#define CLI_MAX_SHAPES 32
typedef struct cli_shape {
    char name[128];
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
} cli_shape;
typedef struct cli_shapes {
    int n;
    cli_shape s[CLI_MAX_SHAPES];
} cli_shapes;
/* Adds to `out`; later entries for a name replace earlier ones.  0 or -1
 * (message printed). */
int cli_shapes_parse(const char *verb, const char *spec, cli_shapes *out);
const cli_shape *cli_shapes_find(const cli_shapes *s, const char *name);
/* Add or replace one entry; 0 or -1 (message printed). */
int cli_shapes_set(const char *verb, cli_shapes *out, const cli_shape *sh);

/* ------------------------------------------------------------ model.c */

/* kiln_engine_load, or for a path ending in .onnx: import and build in
 * memory (profiles from `shapes` (may be NULL), dynamic dims otherwise at
 * 1, said on stderr).  0 or 1 (message printed). */
int cli_engine_open(const char *verb, const char *path, const cli_shapes *shapes, kiln_engine **e);
int cli_is_onnx(const char *path); /* ends in .onnx */
/* For every input of net with dynamic dims that no list in given[] names:
 * an entry in `out` with those dims at 1 (said on stderr).  0 or -1. */
int cli_default_shapes(const char *verb, const kiln_network *net, const cli_shapes *const *given,
                       int ngiven, cli_shapes *out);

/* Plugin libraries (--plugins LIB.so) and plugin sources compiled through
 * the compile cache (--plugin-source FILE.c), in command-line order. */
#define CLI_MAX_PLUGINS 16
typedef struct cli_plugins {
    int n;
    const char *path[CLI_MAX_PLUGINS]; /* as given on the command line */
    int source[CLI_MAX_PLUGINS];       /* 1: a C source (--plugin-source) */
    char *so[CLI_MAX_PLUGINS];         /* sources: the cached library (after load) */
} cli_plugins;
int cli_plugins_add(const char *verb, cli_plugins *p, const char *path);
int cli_plugins_add_source(const char *verb, cli_plugins *p, const char *path);
/* Match --plugins or --plugin-source at argv[*i] (like cli_opt): 1 taken,
 * 0 not a plugin option, -1 error (message printed). */
int cli_plugins_opt(const char *verb, int argc, char **argv, int *i, cli_plugins *p);
/* Compile (or find in the cache) every source, then load every library in
 * order; 0 or 1 (message printed: compiler diagnostics, then one summary
 * line "kiln <verb>: FILE.c: ..."). */
int cli_plugins_load(const char *verb, cli_plugins *p);
/* The library path of entry k (the cached .so for sources). */
const char *cli_plugins_library(const cli_plugins *p, int k);
void cli_plugins_free(cli_plugins *p);
/* Report a failed kiln_plugin_compile*: the compiler's messages (with
 * their file:line) on stderr, then one summary line; returns 1. */
int cli_fail_compile(const char *verb, int status, const char *source);

/* Fill `n` elements of `dtype` with random values from *seed (floats in
 * [-1, 1), integers in [0, 4), bools 0/1). */
void cli_fill_random(void *data, kiln_dtype dtype, size_t n, uint64_t *seed);

/* Context with every input shaped (from `shapes`, else the profile's opt)
 * and bound to random data (or files, see run.c).  Used by run and bench:
 * bind inputs from `bufs` (allocated here, nin entries, free with free()). */
int cli_context_random_inputs(const char *verb, const kiln_engine *e, kiln_context *ctx,
                              const cli_shapes *shapes, uint64_t seed, void ***bufs);

/* Monotonic milliseconds. */
double cli_now_ms(void);

/* ------------------------------------------------------------ npy.c */

/* A host tensor read from / written to a file. */
typedef struct cli_tensor {
    kiln_dtype dtype;
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
    void *data;  /* malloc'd (npy_read) */
    size_t bytes;
} cli_tensor;

/* Read a .npy file (format versions 1, 2 and 3; dtypes f2 f4 f8 i1 i2 i4
 * i8 u1 u2 u4 u8 b1; little-endian; C order).  0, or -1 with a message in
 * err (what was expected, what was found). */
int npy_read(const char *path, cli_tensor *t, char *err, size_t errsize);
/* Write a .npy file (version 1 when the header fits, else 2).  0 or -1
 * (errno set). */
int npy_write(const char *path, kiln_dtype dtype, int ndim, const int64_t *dims,
              const void *data);
/* Read .npy or (by extension .pb) an ONNX TensorProto file. */
int cli_tensor_read(const char *path, cli_tensor *t, char *err, size_t errsize);
/* A sequence/optional value (is_str 0: SequenceProto/OptionalProto) or a
 * string tensor (is_str 1) from an ONNX .pb file, as the tensors kiln
 * carries it in (kiln/onnx.h): out[0] data, out[1] shapes, out[2] present
 * (parts 3), or out[0] bytes, out[1] lengths.  `want`: the element type of
 * an empty sequence, `rank`: its rank (-1: 0).  Each out[k].data is
 * malloc'd.  0, or a negative status with a message in err (the reader's
 * KILN_E* code, else -1). */
int cli_value_read(const char *path, int is_str, int parts, kiln_dtype want, int64_t rank, cli_tensor *out,
                   char *err, size_t errsize);
/* Value of element i as double (any numeric dtype). */
double cli_tensor_get(kiln_dtype dtype, const void *data, size_t i);
/* Convert n elements between numeric dtypes (through double; f16 rounded). */
void cli_convert(kiln_dtype to, void *dst, kiln_dtype from, const void *src, size_t n);

#endif /* KILN_CLI_H */
