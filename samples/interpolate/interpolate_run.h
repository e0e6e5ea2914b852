/*
 * interpolate_run.h — the body of `kiln-samples interpolate`.
 *
 * Compiles samples/interpolate/interpolate.c through the compile cache
 * (kiln_plugin_compile_load), builds a one-layer network with symbolic H and
 * W, runs it in debug mode on fresh random inputs and checks every output
 * element against a naive reference written here.  With verbose != 0 the
 * compile cache logs at KILN_LOG_INFO (set the log level with kiln_log_set,
 * e.g. on -v): the first run shows "compile cache miss", the next
 * "compile cache hit <key> (<path>)".
 */
#ifndef KILN_SAMPLES_INTERPOLATE_RUN_H
#define KILN_SAMPLES_INTERPOLATE_RUN_H

#include <stdint.h>

typedef struct kiln_interpolate_opts {
    const char *source_dir;  /* kiln source tree (holds samples/interpolate/interpolate.c) */
    const char *mode;        /* "nearest" (default when NULL) or "bilinear" */
    double scale;            /* 0: 2.0 */
    int64_t n, c, h, w;      /* input dims; 0: 2, 3, 13, 17 */
    int threads;             /* 0: engine default */
    uint64_t seed;           /* input seed (0: 1) */
    int verbose;             /* compile cache messages at INFO (else VERBOSE) */
    int rebuild;             /* compile even on a cache hit */
    int cuda;                /* build for the GPU (KILN_BUILD_STRICT_DEVICE: on its CUDA kernel) */
} kiln_interpolate_opts;

/* Prints what it does and PASS or FAIL; returns 0 only on PASS. */
int kiln_sample_interpolate(const kiln_interpolate_opts *o);

#endif
