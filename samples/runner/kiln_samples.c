/*
 * kiln-samples — build, run and check the reference plugin samples.
 *
 *   kiln-samples NAME [--autotune] [--multi-tactic] [--per-format-tactics]
 *                [--precision fp32|fp16] [--save-engine] [--load-engine]
 *                [--artifacts-dir DIR] [--threads N] [--seed S] [--pads a,b,..]
 *                [--shape AxBx..] [-v] [--mode network|onnx] [--device cpu|cuda]
 *   kiln-samples interpolate [--mode nearest|bilinear] [--scale F] [--shape NxCxHxW]
 *                [--rebuild] [-v] [--device cpu|cuda]
 *
 * NAME: elemwise_add, inplace_add, non_zero, circ_pad, chain100, interpolate.
 * interpolate compiles samples/interpolate/interpolate.c through the compile
 * cache at first use (see samples/interpolate/interpolate_run.h).
 * The sample ops live in a plugin library (KILN_SAMPLES_LIB) loaded with
 * kiln_registry_load_library(); the networks come from the same library
 * (kiln_samples_network, see samples.h).  Every run uses fresh random inputs
 * (the seed is printed), poisons the output buffers, and checks the outputs
 * against a naive reference written here, independently of the ops.
 * With --device cuda the engine is built for the GPU with
 * KILN_BUILD_STRICT_DEVICE: every sample layer runs on its CUDA kernel
 * (cuda_impl, or the AOT CUDA kernel with --aot), never on a CPU fallback,
 * and the runner prints where each layer runs.
 * Prints PASS or FAIL; exits 0 only on PASS.
 */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <kiln/kiln.h>

#include "interpolate/interpolate_run.h"
#include "runner/placement.h"
#include "samples.h"

#if defined(__has_include)
#if __has_include(<kiln/onnx.h>)
#include <kiln/onnx.h>
#define HAVE_ONNX 1
#endif
#endif

#ifndef KILN_SAMPLES_LIB
#define KILN_SAMPLES_LIB "libkiln_samples_ops.so"
#endif
#ifndef KILN_SOURCE_DIR
#define KILN_SOURCE_DIR "."
#endif

/* Where the build put them, unless $KILN_SAMPLES_LIB / $KILN_SOURCE_DIR say
 * otherwise (a copy of the programs run on another machine: test_gpu.sh). */
static const char *samples_lib(void) {
    const char *v = getenv("KILN_SAMPLES_LIB");
    return v && *v ? v : KILN_SAMPLES_LIB;
}
static const char *source_dir(void) {
    const char *v = getenv("KILN_SOURCE_DIR");
    return v && *v ? v : KILN_SOURCE_DIR;
}

typedef struct opts {
    const char *name;
    int autotune, multi_tactic, per_format, fp16, save, load, verbose, threads, aot, rebuild, cuda;
    int device_given; /* --device named: a loaded engine's layers are checked against it */
    const char *artifacts, *mode, *pads, *shape;
    double scale;
    uint64_t seed;
} opts;

typedef struct lib {
    kiln_samples_network_fn network;
    kiln_samples_counters *(*counters)(void);
    kiln_samples_inplace_log *(*inplace)(void);
} lib;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static uint64_t rng_next(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}
/* Uniform in [lo, hi). */
static float rng_float(uint64_t *s, float lo, float hi) {
    return lo + (hi - lo) * (float)((rng_next(s) >> 40) / (double)(1ull << 24));
}

static int usage(FILE *f) {
    fprintf(f,
            "usage: kiln-samples NAME [options]\n"
            "  NAME: elemwise_add | inplace_add | non_zero | circ_pad | chain100 | interpolate\n"
            "  --autotune            elemwise_add, inplace_add: FP32|FP16 candidates timed (enables FP16)\n"
            "  --multi-tactic        circ_pad: tactics 1 and 2 timed\n"
            "  --per-format-tactics  circ_pad: FP32 with tactics 1,2; FP16 with tactic 2 only\n"
            "  --aot                 circ_pad: bake the AOT kernel into the engine (else the\n"
            "                        build prefers JIT: KILN_BUILD_PREFER_JIT)\n"
            "  --precision fp32|fp16 allow FP16 kernels (KILN_BUILD_FP16)\n"
            "  --save-engine         save the engine to DIR/NAME.kiln (+ inputs/outputs)\n"
            "  --load-engine         load DIR/NAME.kiln instead of building; outputs must\n"
            "                        match the saved run's bit for bit\n"
            "  --artifacts-dir DIR   default $ARTIFACTS_DIR or ./artifacts\n"
            "  --threads N           worker threads (default: all CPUs)\n"
            "  --seed S              input seed (default: fresh)\n"
            "  --pads a,b,...        circ_pad pads (torch order, default 1,2,2,1)\n"
            "  --shape AxBx...       circ_pad / non_zero input shape\n"
            "  --mode network|onnx   circ_pad from the C API (default) or samples/circ_pad.onnx\n"
            "  --mode nearest|bilinear  interpolate: resize mode (default nearest)\n"
            "  --scale F             interpolate: factor for H and W (default 2)\n"
            "  --shape NxCxHxW       interpolate: input shape (default 2x3x13x17)\n"
            "  --rebuild             interpolate: compile the plugin even on a cache hit\n"
            "  --device cpu|cuda     build for the CPU (default) or the GPU (every sample layer\n"
            "                        on its CUDA kernel: KILN_BUILD_STRICT_DEVICE); with\n"
            "                        --load-engine, the device the sample layers must be on\n"
            "  -v                    verbose builder log\n");
    return f == stderr ? 2 : 0;
}

static int fail_kiln(const char *what) {
    fprintf(stderr, "kiln-samples: %s: %s\n", what, kiln_errmsg());
    printf("FAIL\n");
    return 1;
}

/* ------------------------------------------------------------ references */

static size_t numel_of(int ndim, const int64_t *dims) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)dims[i];
    return n;
}

/* torch.nn.CircularPad as concatenation, one dim at a time:
 * pad(x, d) = cat(x[.., n-before:n, ..], x, x[.., 0:after, ..]) along d. */
static float *ref_circ_pad(const float *x, int ndim, const int64_t *dims, const int64_t *pads,
                           int npads, int64_t *odims) {
    int64_t cur[KILN_MAX_DIMS];
    memcpy(cur, dims, sizeof(int64_t) * ndim);
    float *a = malloc(numel_of(ndim, cur) * sizeof(float));
    memcpy(a, x, numel_of(ndim, cur) * sizeof(float));
    for (int j = 0; j < npads / 2; j++) {
        int d = ndim - 1 - j;
        int64_t before = pads[2 * j], after = pads[2 * j + 1], n = cur[d];
        int64_t outer = 1, inner = 1;
        for (int i = 0; i < d; i++) outer *= cur[i];
        for (int i = d + 1; i < ndim; i++) inner *= cur[i];
        int64_t m = n + before + after;
        float *b = malloc((size_t)(outer * m * inner) * sizeof(float));
        for (int64_t o = 0; o < outer; o++) {
            float *dst = b + o * m * inner;
            const float *src = a + o * n * inner;
            memcpy(dst, src + (n - before) * inner, (size_t)(before * inner) * sizeof(float));
            memcpy(dst + before * inner, src, (size_t)(n * inner) * sizeof(float));
            memcpy(dst + (before + n) * inner, src, (size_t)(after * inner) * sizeof(float));
        }
        free(a);
        a = b;
        cur[d] = m;
    }
    memcpy(odims, cur, sizeof(int64_t) * ndim);
    return a;
}

/* Compare; prints the first mismatch.  Returns the number of mismatches. */
static size_t compare_f32(const char *name, const float *got, const float *want, size_t n,
                          double atol, double rtol) {
    size_t bad = 0;
    double maxerr = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        if (!(e <= atol + rtol * fabs(want[i]))) {
            if (!bad)
                fprintf(stderr, "  %s[%zu] = %.9g, reference %.9g\n", name, i, got[i], want[i]);
            bad++;
        }
        if (e > maxerr || e != e) maxerr = e;
    }
    printf("  check %-8s %zu elements, max abs error %.3g (atol %g, rtol %g): %s\n", name, n,
           maxerr, atol, rtol, bad ? "MISMATCH" : "ok");
    return bad;
}

/* ------------------------------------------------------------ helpers */

static int parse_ints(const char *s, int64_t *v, int max, char sep) {
    int n = 0;
    while (*s) {
        char *end;
        long long x = strtoll(s, &end, 10);
        if (end == s || n == max) return -1;
        v[n++] = x;
        s = end;
        if (*s == sep) s++;
        else if (*s) return -1;
    }
    return n;
}

static int write_file(const char *path, const void *a, size_t na, const void *b, size_t nb) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(a, 1, na, f) == na && fwrite(b, 1, nb, f) == nb;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

static int read_file(const char *path, void *a, size_t na, void *b, size_t nb) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    int ok = fread(a, 1, na, f) == na && fread(b, 1, nb, f) == nb && fgetc(f) == EOF;
    fclose(f);
    return ok ? 0 : -1;
}

/* mkdir -p */
static void make_dirs(const char *path) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(buf, 0777);
            *p = '/';
        }
    mkdir(buf, 0777);
}

/* Bind a poisoned output buffer of the output's capacity. */
static void *bind_output(kiln_context *ctx, const char *name) {
    size_t cap = 0;
    if (kiln_context_output_capacity(ctx, name, &cap)) return NULL;
    void *p = malloc(cap ? cap : 1);
    memset(p, 0xFF, cap); /* NaN pattern for floats, -1 for integers */
    if (kiln_context_bind(ctx, name, p, cap)) {
        free(p);
        return NULL;
    }
    return p;
}

static void print_stats(const kiln_build_stats *s) {
    printf("build: %.1f ms, %d layers, %d candidates, %d timed, %d cache hits "
           "(%d identical instances deduplicated)\n",
           s->build_ms, s->layers, s->candidates, s->timed, s->cache_hits, s->cache_dedup);
}

/* ------------------------------------------------------------ checks */

/* What one run produced, for the per-sample checks. */
typedef struct sample_run {
    const opts *o;
    const kiln_engine *eng;
    const kiln_context *ctx;
    int nin, nout;
    float **in;                       /* inputs (f32) */
    int64_t (*in_dims)[KILN_MAX_DIMS];
    int *in_ndim;
    size_t *in_n;
    void **out;                       /* bound output buffers */
    kiln_samples_counters build_cnt;  /* impl calls during the build */
    kiln_samples_counters run_cnt;    /* ... during the first run */
    kiln_samples_inplace_log run_log; /* inplace_add calls of the first run */
    kiln_build_stats st;
    const float *x_before;            /* input 0 before the run */
    const float *saved_out;           /* --load-engine: the saved run's outputs */
    size_t saved_out_bytes;
    const char *io_path;
} sample_run;

/* elemwise_add and chain100: z = x + y (+ y ...). */
static size_t check_add(const sample_run *r) {
    int steps = !strcmp(r->o->name, "chain100") ? 100 : 1;
    double tol = r->o->autotune ? 2e-3 : 1e-6; /* fp16 rounds to 11 bits */
    size_t n = r->in_n[0], bad = 0;
    float *ref = malloc(n * sizeof(float));
    for (size_t k = 0; k < n; k++) {
        float acc = r->in[0][k]; /* the chain's order of float additions */
        for (int s = 0; s < steps; s++) acc += r->in[1][k];
        ref[k] = acc;
    }
    bad += compare_f32("z", r->out[0], ref, n, tol * 8, tol);
    free(ref);
    long f32 = r->build_cnt.add_f32, f16 = r->build_cnt.add_f16;
    long runs = r->run_cnt.add_f32 + r->run_cnt.add_f16;
    printf("  elemwise_add impl calls: build FP32 %ld, FP16 %ld; inference %ld\n", f32, f16, runs);
    if (runs != steps) {
        fprintf(stderr, "  expected impl to run %d time(s) at inference\n", steps);
        bad++;
    }
    if (r->o->autotune && (f32 == 0 || f16 == 0)) {
        fprintf(stderr, "  expected both FP32 and FP16 candidates timed during the build\n");
        bad++;
    }
    if (!r->o->autotune && f32 + f16 != 0) {
        fprintf(stderr, "  expected no impl call during the build (no autotune)\n");
        bad++;
    }
    return bad;
}

/* inplace_add: z = (x + y) + y, both ops writing over their input 0, and
 * the network input x left untouched (the builder copied it once). */
static size_t check_inplace(const sample_run *r) {
    size_t n = r->in_n[0], bad = 0;
    float *ref = malloc(n * sizeof(float));
    for (size_t k = 0; k < n; k++) ref[k] = (r->x_before[k] + r->in[1][k]) + r->in[1][k];
    double tol = r->o->autotune ? 2e-3 : 1e-6; /* fp16 rounds to 11 bits */
    bad += compare_f32("z", r->out[0], ref, n, tol * 8, tol);
    free(ref);
    const kiln_samples_inplace_log *log = &r->run_log;
    printf("  inplace_add calls: %d\n", log->n);
    if (log->n != 2) {
        fprintf(stderr, "  expected 2 inplace_add calls, found %d\n", log->n);
        return bad + 1;
    }
    for (int k = 0; k < 2; k++) {
        int same = log->in0[k] == log->out[k];
        printf("  call %d: input 0 %p, output %p: %s\n", k + 1, log->in0[k], log->out[k],
               same ? "in place" : "NOT in place");
        if (!same) bad++;
    }
    /* One buffer for both ops, unless the builder put a type conversion
     * between them (timing chose FP32 for one and FP16 for the other: the
     * second then works in place on the converted tensor). */
    const char *t1 = NULL, *t2 = NULL;
    for (int i = 0; i < kiln_engine_num_layers(r->eng); i++) {
        kiln_layer_info li;
        if (kiln_engine_layer_info(r->eng, i, &li)) continue;
        if (!strcmp(li.name, "add1")) t1 = li.outputs[0];
        if (!strcmp(li.name, "add2")) t2 = li.inputs[0];
    }
    if (t1 && t2 && strcmp(t1, t2)) {
        printf("  a conversion between the ops ('%s' -> '%s'): each in place on its own buffer\n", t1, t2);
    } else if (log->out[1] != log->out[0]) {
        fprintf(stderr, "  expected both ops to share one buffer\n");
        bad++;
    }
    if (memcmp(r->x_before, r->in[0], n * sizeof(float))) {
        fprintf(stderr, "  the network input x was overwritten\n");
        bad++;
    }
    return bad;
}

/* non_zero: N and the [N, 2] indices, in row-major order. */
static size_t check_non_zero(const sample_run *r) {
    int nd = 0;
    int64_t dims[KILN_MAX_DIMS];
    kiln_io_info i0, i1;
    kiln_engine_io(r->eng, r->nin, &i0);
    kiln_engine_io(r->eng, r->nin + 1, &i1);
    const char *idx_name = i0.ndim == 2 ? i0.name : i1.name;
    const char *cnt_name = i0.ndim == 2 ? i1.name : i0.name;
    const int32_t *idx = kiln_context_output(r->ctx, idx_name);
    const int64_t *count = kiln_context_output(r->ctx, cnt_name);
    kiln_context_shape(r->ctx, idx_name, &nd, dims);
    const float *x = r->in[0];
    int64_t want = 0, cols = r->in_dims[0][1], n = 0;
    for (size_t k = 0; k < r->in_n[0]; k++) want += x[k] != 0.0f;
    printf("  nonzero: %lld found (output shape [%lld, %lld]), reference %lld\n",
           count ? (long long)*count : -1LL, nd > 0 ? (long long)dims[0] : -1LL,
           nd > 1 ? (long long)dims[1] : -1LL, (long long)want);
    if (!idx || !count || *count != want || nd != 2 || dims[0] != want || dims[1] != 2) {
        fprintf(stderr, "  count/shape mismatch\n");
        return 1;
    }
    for (size_t k = 0; k < r->in_n[0]; k++) {
        if (x[k] == 0.0f) continue;
        if (idx[2 * n] != (int32_t)(k / cols) || idx[2 * n + 1] != (int32_t)(k % cols)) {
            fprintf(stderr, "  index %lld: (%d, %d), reference (%lld, %lld)\n", (long long)n,
                    idx[2 * n], idx[2 * n + 1], (long long)(k / cols), (long long)(k % cols));
            printf("  check indices: MISMATCH\n");
            return 1;
        }
        n++;
    }
    printf("  check indices: ok\n");
    return 0;
}

/* circ_pad: each output against the reference; tactics and deduplication
 * seen during the build; save/load: the io file. */
static size_t check_circ_pad(const sample_run *r) {
    const opts *o = r->o;
    int64_t pads[8] = {1, 2, 2, 1};
    int npads = o->pads ? parse_ints(o->pads, pads, 8, ',') : 4;
    size_t bad = 0;
    for (int i = 0; i < r->nin && i < 2; i++) {
        int64_t odims[KILN_MAX_DIMS], dims[KILN_MAX_DIMS];
        float *ref = ref_circ_pad(r->in[i], r->in_ndim[i], r->in_dims[i], pads, npads, odims);
        kiln_io_info info;
        kiln_engine_io(r->eng, r->nin + i, &info);
        int nd = 0;
        kiln_context_shape(r->ctx, info.name, &nd, dims);
        if (nd != r->in_ndim[i] || memcmp(dims, odims, sizeof(int64_t) * nd)) {
            fprintf(stderr, "  %s: output shape differs from the reference\n", info.name);
            bad++;
        } else {
            bad += compare_f32(info.name, r->out[i], ref, numel_of(nd, odims), o->fp16 ? 1e-2 : 0,
                               o->fp16 ? 1e-3 : 0);
        }
        free(ref);
    }
    if (!o->load) {
        const long *calls = r->build_cnt.circ_pad_calls;
        printf("  circ_pad impl calls during the build: tactic 1: %ld, tactic 2: %ld, default: %ld\n",
               calls[1], calls[2], calls[0]);
        /* (AOT CUDA layers are not timed: their kernel is compiled once, at build) */
        if ((o->multi_tactic || o->per_format) && !(o->aot && o->cuda) && (calls[1] == 0 || calls[2] == 0)) {
            fprintf(stderr, "  expected tactics 1 and 2 both timed\n");
            bad++;
        }
        if (r->nin == 2 && r->st.timed > 0 && r->st.cache_dedup == 0) {
            fprintf(stderr, "  expected the second circ_pad layer answered by deduplication\n");
            bad++;
        }
    }
    if (r->nin != 2 || r->nout != 2) return bad;
    size_t ib = r->in_n[0] * sizeof(float), ob = r->saved_out_bytes / 2;
    if (o->save) { /* inputs a, b then outputs pa, pb */
        kiln_io_info info;
        kiln_engine_io(r->eng, r->nin, &info);
        ob = numel_of(info.ndim, info.dims) * sizeof(float);
        char *both_in = malloc(2 * ib), *both_out = malloc(2 * ob);
        memcpy(both_in, r->in[0], ib);
        memcpy(both_in + ib, r->in[1], ib);
        memcpy(both_out, r->out[0], ob);
        memcpy(both_out + ob, r->out[1], ob);
        if (write_file(r->io_path, both_in, 2 * ib, both_out, 2 * ob)) {
            fprintf(stderr, "kiln-samples: writing %s: %s\n", r->io_path, strerror(errno));
            bad++;
        }
        free(both_in);
        free(both_out);
    }
    if (r->saved_out) {
        int same = !memcmp(r->saved_out, r->out[0], ob) &&
                   !memcmp((const char *)r->saved_out + ob, r->out[1], ob);
        printf("  outputs vs the saved run: %s\n", same ? "identical" : "DIFFERENT");
        if (!same) bad++;
    }
    return bad;
}

/* ------------------------------------------------------------ main */

static int parse_args(int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    o->artifacts = getenv("ARTIFACTS_DIR") ? getenv("ARTIFACTS_DIR") : "artifacts";
    o->seed = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)getpid() << 16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
#define VALUE()                                                                 \
    (next ? (i++, next)                                                        \
          : (fprintf(stderr, "kiln-samples: %s expects a value\n", a), (const char *)NULL))
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) exit(usage(stdout));
        else if (!strcmp(a, "--autotune")) o->autotune = 1;
        else if (!strcmp(a, "--multi-tactic")) o->multi_tactic = 1;
        else if (!strcmp(a, "--aot")) o->aot = 1;
        else if (!strcmp(a, "--per-format-tactics")) o->per_format = 1;
        else if (!strcmp(a, "--save-engine")) o->save = 1;
        else if (!strcmp(a, "--load-engine")) o->load = 1;
        else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) o->verbose = 1;
        else if (!strcmp(a, "--precision")) {
            const char *v = VALUE();
            if (!v) return -1;
            if (!strcmp(v, "fp16")) o->fp16 = 1;
            else if (strcmp(v, "fp32")) {
                fprintf(stderr, "kiln-samples: --precision expects fp32 or fp16, found '%s'\n", v);
                return -1;
            }
        } else if (!strcmp(a, "--device")) {
            const char *v = VALUE();
            if (!v) return -1;
            o->device_given = 1;
            if (!strcmp(v, "cuda")) o->cuda = 1;
            else if (strcmp(v, "cpu")) {
                fprintf(stderr, "kiln-samples: --device expects cpu or cuda, found '%s'\n", v);
                return -1;
            }
        } else if (!strcmp(a, "--artifacts-dir")) {
            if (!(o->artifacts = VALUE())) return -1;
        } else if (!strcmp(a, "--mode")) {
            if (!(o->mode = VALUE())) return -1;
        } else if (!strcmp(a, "--rebuild")) {
            o->rebuild = 1;
        } else if (!strcmp(a, "--scale")) {
            const char *v = VALUE();
            if (!v) return -1;
            char *end;
            o->scale = strtod(v, &end);
            if (end == v || *end || !(o->scale > 0)) {
                fprintf(stderr, "kiln-samples: --scale expects a number > 0, found '%s'\n", v);
                return -1;
            }
        } else if (!strcmp(a, "--threads")) {
            const char *v = VALUE();
            if (!v) return -1;
            char *end;
            long t = strtol(v, &end, 10);
            if (end == v || *end || t < 0 || t > 1024) {
                fprintf(stderr, "kiln-samples: --threads expects 0 (default) to 1024, found '%s'\n", v);
                return -1;
            }
            o->threads = (int)t;
        } else if (!strcmp(a, "--seed")) {
            const char *v = VALUE();
            if (!v) return -1;
            char *end;
            errno = 0;
            o->seed = strtoull(v, &end, 0);
            if (errno || end == v || *end || *v == '-') {
                fprintf(stderr, "kiln-samples: --seed expects a non-negative integer, found '%s'\n", v);
                return -1;
            }
        } else if (!strcmp(a, "--pads")) {
            if (!(o->pads = VALUE())) return -1;
        } else if (!strcmp(a, "--shape")) {
            if (!(o->shape = VALUE())) return -1;
        } else if (a[0] == '-') {
            fprintf(stderr, "kiln-samples: unknown option '%s'\n", a);
            return -1;
        } else if (!o->name) o->name = a;
        else {
            fprintf(stderr, "kiln-samples: one sample at a time (found '%s' and '%s')\n", o->name, a);
            return -1;
        }
#undef VALUE
    }
    if (!o->name) {
        fprintf(stderr, "kiln-samples: expected a sample name\n");
        return -1;
    }
    int circ = !strcmp(o->name, "circ_pad"), interp = !strcmp(o->name, "interpolate");
    if (interp) {
        if (o->mode && strcmp(o->mode, "nearest") && strcmp(o->mode, "bilinear")) {
            fprintf(stderr, "kiln-samples: interpolate: --mode expects nearest or bilinear, found '%s'\n",
                    o->mode);
            return -1;
        }
    } else {
        if (!o->mode) o->mode = "network";
        if (strcmp(o->mode, "network") && strcmp(o->mode, "onnx")) {
            fprintf(stderr, "kiln-samples: --mode expects network or onnx, found '%s'\n", o->mode);
            return -1;
        }
    }
    /* Options that do not apply to the sample are mistakes: say so. */
    const char *bad = o->autotune && strcmp(o->name, "elemwise_add") && strcmp(o->name, "inplace_add")
                          ? "--autotune (elemwise_add, inplace_add)"
                      : (o->multi_tactic || o->per_format || o->pads || o->aot) && !circ
                          ? "--multi-tactic/--per-format-tactics/--pads/--aot (circ_pad)"
                      : (o->save || o->load) && !circ ? "--save-engine/--load-engine (circ_pad)"
                      : o->shape && !circ && !interp && strcmp(o->name, "non_zero")
                          ? "--shape (circ_pad, non_zero, interpolate)"
                      : (o->scale > 0 || o->rebuild) && !interp ? "--scale/--rebuild (interpolate)"
                      : o->fp16 && interp ? "--precision (not interpolate)"
                      : !interp && !strcmp(o->mode, "onnx") && (o->multi_tactic || o->per_format || o->pads ||
                                                     o->shape)
                          ? "--multi-tactic/--per-format-tactics/--pads/--shape (network mode)"
                      : NULL;
    if (bad) {
        fprintf(stderr, "kiln-samples: %s does not apply to sample '%s'\n", bad, o->name);
        return -1;
    }
    int64_t pads[8];
    int np = o->pads ? parse_ints(o->pads, pads, 8, ',') : 2;
    if (np < 2 || np % 2) {
        fprintf(stderr, "kiln-samples: --pads expects 2, 4, 6 or 8 integers a,b,..., found '%s'\n", o->pads);
        return -1;
    }
    if (o->seed == 0) o->seed = 1;
    return 0;
}

static int load_lib(lib *l) {
    if (kiln_registry_load_library(samples_lib())) return fail_kiln("loading the sample ops");
    void *h = dlopen(samples_lib(), RTLD_NOW | RTLD_NOLOAD);
    if (!h) h = dlopen(samples_lib(), RTLD_NOW);
    if (!h) {
        fprintf(stderr, "kiln-samples: dlopen %s: %s\n", samples_lib(), dlerror());
        return 1;
    }
    *(void **)&l->network = dlsym(h, KILN_SAMPLES_NETWORK_SYMBOL);
    *(void **)&l->counters = dlsym(h, "kiln_samples_counters_get");
    *(void **)&l->inplace = dlsym(h, "kiln_samples_inplace_log_get");
    if (!l->network || !l->counters || !l->inplace) {
        fprintf(stderr, "kiln-samples: %s lacks the samples.h functions\n", samples_lib());
        return 1;
    }
    return 0;
}

/* Build the engine (network or ONNX mode). */
static int build_engine(const opts *o, const lib *l, kiln_engine **eng, kiln_build_stats *st) {
    char sopts[256];
    snprintf(sopts, sizeof sopts, "%s%s%s", o->autotune ? "autotune," : "",
             o->per_format ? "per-format-tactics," : o->multi_tactic ? "multi-tactic," : "",
             o->aot ? "aot," : "");
    size_t len = strlen(sopts);
    if (o->pads) {
        len += (size_t)snprintf(sopts + len, sizeof sopts - len, "pads=");
        for (const char *p = o->pads; *p && len + 1 < sizeof sopts; p++)
            sopts[len++] = *p == ',' ? ':' : *p;
        sopts[len++] = ',';
        sopts[len] = 0;
    }
    if (o->shape) snprintf(sopts + len, sizeof sopts - len, "shape=%s", o->shape);

    kiln_network *net = NULL;
    if (!strcmp(o->mode, "onnx")) {
        if (strcmp(o->name, "circ_pad")) {
            fprintf(stderr, "kiln-samples: --mode onnx exists for circ_pad only\n");
            return 1;
        }
#ifdef HAVE_ONNX
        /* --aot: the same model with the node attribute aot = 1 (made by
         * scripts/gen_circ_pad_aot_onnx.py). */
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", source_dir(),
                 o->aot ? "tests/fixtures/circ_pad_aot1.onnx" : "samples/circ_pad.onnx");
        if (access(path, R_OK)) {
            fprintf(stderr, "kiln-samples: --mode onnx: %s not found (generate it with the ONNX "
                            "fixture script)\n", path);
            return 1;
        }
        if (kiln_onnx_import(path, NULL, &net)) return fail_kiln(path);
        printf("imported %s\n", path);
#else
        fprintf(stderr, "kiln-samples: --mode onnx: this kiln was built without the ONNX importer "
                        "(include/kiln/onnx.h)\n");
        return 1;
#endif
    } else if (l->network(o->name, sopts, &net)) {
        return fail_kiln("building the network");
    }

    kiln_build_config *cfg = kiln_build_config_create();
    unsigned flags = 0;
    if (o->fp16 || o->autotune) flags |= KILN_BUILD_FP16;
    /* circ_pad has both a JIT impl and an AOT kernel; unforced, a build
     * times both and takes the faster.  This sample forces one, so its
     * output says which ran: --aot sets each layer's choice in the
     * network; otherwise it takes JIT. */
    if (!o->aot) flags |= KILN_BUILD_PREFER_JIT;
    if (o->cuda) { /* on the GPU's kernels, or an error listing the layers left on the CPU */
        kiln_build_config_set_device(cfg, KILN_DEVICE_CUDA);
        flags |= KILN_BUILD_STRICT_DEVICE;
    }
    kiln_build_config_set_flags(cfg, flags);
    if (o->threads > 0) kiln_build_config_set_threads(cfg, o->threads);
    int rc = kiln_build(net, cfg, eng, st);
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    if (rc) return fail_kiln("kiln_build");
    print_stats(st);
    return 0;
}

/* interpolate: its own runner (samples/interpolate/interpolate_run.c). */
static int run_interpolate(const opts *o) {
    kiln_interpolate_opts io;
    memset(&io, 0, sizeof io);
    io.source_dir = source_dir();
    io.mode = o->mode;
    io.scale = o->scale;
    io.threads = o->threads;
    io.seed = o->seed;
    io.verbose = o->verbose;
    io.rebuild = o->rebuild;
    io.cuda = o->cuda;
    if (o->shape) {
        int64_t d[4];
        if (parse_ints(o->shape, d, 4, 'x') != 4 || d[0] < 1 || d[1] < 1 || d[2] < 1 || d[3] < 1) {
            fprintf(stderr, "kiln-samples: interpolate: --shape expects NxCxHxW (each >= 1), found '%s'\n",
                    o->shape);
            return 2;
        }
        io.n = d[0], io.c = d[1], io.h = d[2], io.w = d[3];
    }
    printf("sample interpolate (seed %llu)\n", (unsigned long long)o->seed);
    return kiln_sample_interpolate(&io) ? 1 : 0;
}

int main(int argc, char **argv) {
    opts o;
    if (parse_args(argc, argv, &o)) return usage(stderr);
    kiln_log_set(o.verbose ? KILN_LOG_VERBOSE : KILN_LOG_WARN, NULL, NULL);
    if (!strcmp(o.name, "interpolate")) return run_interpolate(&o);
    lib l = {0};
    /* An AOT engine needs no plugin code: loading one, the runner does not
     * load the sample library at all, which proves the engine self-contained. */
    int no_lib = o.load && o.aot;
    static kiln_samples_counters no_counters;
    static kiln_samples_inplace_log no_log;
    if (no_lib) {
        printf("AOT engine: the sample plugin library is not loaded\n");
    } else if (load_lib(&l)) {
        return 1;
    }
    kiln_samples_counters *cnt = no_lib ? &no_counters : l.counters();
    int is_circ = !strcmp(o.name, "circ_pad");
    char engine_path[1024], io_path[1024];
    snprintf(engine_path, sizeof engine_path, "%s/%s.kiln", o.artifacts, o.name);
    snprintf(io_path, sizeof io_path, "%s/%s.io", o.artifacts, o.name);
    printf("sample %s (seed %llu)\n", o.name, (unsigned long long)o.seed);

    /* ---- engine: build or load */
    kiln_engine *eng = NULL;
    kiln_build_stats st;
    memset(&st, 0, sizeof st);
    double t0 = now_ms();
    if (o.load) {
        if (kiln_engine_load(engine_path, &eng)) return fail_kiln(engine_path);
        printf("loaded %s in %.2f ms\n", engine_path, now_ms() - t0);
    } else if (build_engine(&o, &l, &eng, &st)) {
        return 1;
    }
    /* where each layer runs; a sample layer off the device asked for fails
     * (a loaded engine runs where it was built unless --device names one) */
    int want = o.load && !o.device_given ? -1 : o.cuda ? KILN_DEVICE_CUDA : KILN_DEVICE_CPU;
    int misplaced = kiln_samples_print_placement(eng, want);
    kiln_samples_counters build_cnt = *cnt;
    memset(cnt, 0, sizeof *cnt);
    if (o.save) {
        make_dirs(o.artifacts);
        if (kiln_engine_save(eng, engine_path)) {
            kiln_engine_free(eng);
            return fail_kiln(engine_path);
        }
        printf("saved %s\n", engine_path);
    }

    /* ---- inputs */
    int nin = kiln_engine_num_inputs(eng), nout = kiln_engine_num_outputs(eng);
    kiln_context *ctx = NULL;
    if (kiln_context_create(eng, o.threads, &ctx)) {
        kiln_engine_free(eng);
        return fail_kiln("kiln_context_create");
    }
    float *in[4] = {0};
    int64_t in_dims[4][KILN_MAX_DIMS];
    int in_ndim[4] = {0};
    size_t in_n[4] = {0};
    void *out[4] = {0};
    uint64_t seed = o.seed;
    int failed = 0;
    size_t saved_out_bytes = 0;
    float *saved_out = NULL, *x_before = NULL;
    if (nin > 4 || nout > 4) {
        fprintf(stderr, "kiln-samples: unexpected engine IO (%d inputs, %d outputs)\n", nin, nout);
        failed = 1;
        goto done;
    }
    for (int i = 0; i < nin; i++) {
        kiln_io_info info;
        kiln_engine_io(eng, i, &info);
        in_ndim[i] = info.ndim;
        memcpy(in_dims[i], info.dims, sizeof info.dims);
        in_n[i] = numel_of(info.ndim, info.dims);
        in[i] = malloc(in_n[i] * sizeof(float) + 1);
        for (size_t k = 0; k < in_n[i]; k++) {
            float v = rng_float(&seed, -4.0f, 4.0f);
            /* non_zero: about a third zeros, so N comes from the data. */
            if (!strcmp(o.name, "non_zero") && (rng_next(&seed) % 3 == 0)) v = 0.0f;
            in[i][k] = v;
        }
        if (kiln_context_bind(ctx, info.name, in[i], in_n[i] * sizeof(float))) {
            failed = fail_kiln(info.name);
            goto done;
        }
    }
    /* Load mode: the saved run's inputs, so outputs can be compared bit for bit. */
    if (o.load && nin == 2) {
        kiln_io_info info;
        kiln_engine_io(eng, nin, &info);
        saved_out_bytes = 2 * numel_of(info.ndim, info.dims) * sizeof(float);
        saved_out = malloc(saved_out_bytes);
        float *both = malloc((in_n[0] + in_n[1]) * sizeof(float));
        if (read_file(io_path, both, (in_n[0] + in_n[1]) * sizeof(float), saved_out,
                      saved_out_bytes)) {
            fprintf(stderr, "kiln-samples: %s missing or of the wrong size (run --save-engine first)\n",
                    io_path);
            free(both);
            failed = 1;
            goto done;
        }
        memcpy(in[0], both, in_n[0] * sizeof(float));
        memcpy(in[1], both + in_n[0], in_n[1] * sizeof(float));
        free(both);
        printf("inputs: the saved run's (%s)\n", io_path);
    }
    for (int i = 0; i < nout; i++) {
        kiln_io_info info;
        kiln_engine_io(eng, nin + i, &info);
        if (!(out[i] = bind_output(ctx, info.name))) {
            failed = fail_kiln(info.name);
            goto done;
        }
    }
    x_before = malloc(in_n[0] * sizeof(float) + 1);
    if (nin > 0) memcpy(x_before, in[0], in_n[0] * sizeof(float));
    kiln_samples_inplace_log *ilog = no_lib ? &no_log : l.inplace();
    memset(ilog, 0, sizeof *ilog);

    /* ---- run once (checked), then time a few more runs */
    t0 = now_ms();
    if (kiln_context_run(ctx)) {
        failed = fail_kiln("kiln_context_run");
        goto done;
    }
    double first_ms = now_ms() - t0;
    kiln_samples_counters run_cnt = *cnt;
    kiln_samples_inplace_log run_log = *ilog;

    sample_run r = {&o, eng, ctx, nin, nout, in, in_dims, in_ndim, in_n, out,
                    build_cnt, run_cnt, run_log, st, x_before, saved_out, saved_out_bytes, io_path};
    size_t bad = 0;
    if (!strcmp(o.name, "elemwise_add") || !strcmp(o.name, "chain100")) bad = check_add(&r);
    else if (!strcmp(o.name, "inplace_add")) bad = check_inplace(&r);
    else if (!strcmp(o.name, "non_zero")) bad = check_non_zero(&r);
    else if (is_circ) bad = check_circ_pad(&r);

    /* ---- timing */
    int iters = 20;
    t0 = now_ms();
    for (int i = 0; i < iters; i++)
        if (kiln_context_run(ctx)) {
            failed = fail_kiln("kiln_context_run");
            goto done;
        }
    double avg = (now_ms() - t0) / iters;
    printf("inference: first run %.3f ms, mean of %d runs %.4f ms\n", first_ms, iters, avg);
    if (bad || misplaced) failed = 1;
    printf("%s\n", failed ? "FAIL" : "PASS");

done:
    if (no_lib) {
        /* The proof: after loading and running the engine, the sample
         * library is still not mapped into this process. */
        void *h = dlopen(samples_lib(), RTLD_NOW | RTLD_NOLOAD);
        printf("sample plugin library in this process after the run: %s\n", h ? "LOADED" : "absent");
        if (h) {
            dlclose(h);
            failed = 1;
        }
    }
    free(saved_out);
    free(x_before);
    for (int i = 0; i < 4; i++) {
        free(in[i]);
        free(out[i]);
    }
    kiln_context_free(ctx);
    kiln_engine_free(eng);
    return failed;
}
