/*
 * run.c — `kiln run ENGINE`: bind inputs (files or random), run once, print
 * every output's shape and a checksum, optionally write outputs as .npy and
 * compare them with references.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "kiln/onnx.h"

#define MAX_BINDINGS 64

typedef struct binding {
    const char *name, *path;
} binding;

static int usage(FILE *f) {
    fprintf(f,
            "usage: kiln run ENGINE [options]\n"
            "  --plugins LIB.so          load a plugin library the engine needs (repeatable)\n"
            "  --plugin-source F.c       compile a plugin source (cached) and load it (repeatable)\n"
            "  --input NAME=FILE         .npy or ONNX .pb tensor for an input (repeatable);\n"
            "                            NAME may be the input's position (0, 1, ..);\n"
            "                            a sequence/optional/string value NAME takes one\n"
            "                            ONNX .pb (SequenceProto, OptionalProto, strings)\n"
            "                            for all its tensors (NAME:shapes, NAME:lens, ..)\n"
            "                            inputs not given are random (see --seed)\n"
            "  --shapes in:1x3x224x224   shapes of dynamic inputs (default: profile opt)\n"
            "  --seed S                  seed for random inputs (default 1)\n"
            "  --output-dir DIR          write every output as DIR/<name>.npy\n"
            "  --compare NAME=REF        compare output NAME (or position) with REF (.npy/.pb;\n"
            "                            a whole sequence/optional/string value as with --input)\n"
            "  --rtol R --atol A         comparison tolerance (default 1e-4, 1e-5):\n"
            "                            |out - ref| <= atol + rtol * |ref|\n"
            "  --threads N               worker threads (default: the engine's build setting)\n"
            "  --debug                   poison layer outputs, check writes and canaries\n"
            "  --no-cuda-graph           CUDA engines: launch layer by layer (no CUDA graph replay)\n"
            "  --iterations N            run N times (outputs of the last run are reported)\n"
            "  -v, --verbose             library log (engine loading, plugin lookups)\n"
            "  ENGINE may be a MODEL.onnx: built in memory first (--shapes sets its profile;\n"
            "  dynamic dims not given are 1)\n"
            CLI_TRUST_HELP);
    return f == stdout ? 0 : 2;
}

static int split_binding(const char *verb, const char *opt, const char *s, binding *list, int *n) {
    const char *eq = strchr(s, '=');
    if (!eq || eq == s || !eq[1])
        return cli_fail(verb, "%s expects NAME=FILE, found '%s'", opt, s), -1;
    if (*n == MAX_BINDINGS) return cli_fail(verb, "too many %s (at most %d)", opt, MAX_BINDINGS), -1;
    char *name = strndup(s, (size_t)(eq - s));
    list[*n].name = name;
    list[(*n)++].path = eq + 1;
    return 0;
}

/* A binding names a tensor, or its position ("0", "1", ...: input_0.pb /
 * output_0.pb of ONNX test folders) when no tensor has that name. */
static int binding_is(const binding *b, const char *name, int index, int name_exists) {
    if (!strcmp(b->name, name)) return 1;
    if (name_exists) return 0;
    char *end;
    long k = strtol(b->name, &end, 10);
    return *b->name && !*end && k == index;
}

/* io: 0 = inputs, 1 = outputs of e. */
static int tensor_named(const kiln_engine *e, int io, const char *name) {
    int nin = kiln_engine_num_inputs(e), n = io ? kiln_engine_num_outputs(e) : nin;
    for (int i = 0; i < n; i++) {
        kiln_io_info info;
        kiln_engine_io(e, (io ? nin : 0) + i, &info);
        if (!strcmp(info.name, name)) return 1;
    }
    return 0;
}

static const char *find_binding(const kiln_engine *e, int io, const binding *list, int n,
                                const char *name, int index) {
    for (int k = 0; k < n; k++)
        if (binding_is(&list[k], name, index, tensor_named(e, io, list[k].name))) return list[k].path;
    return NULL;
}

/* Sequences, optionals and string tensors travel as several tensors
 * (kiln/onnx.h): NAME plus NAME:shapes (NAME:present) or NAME:lens.  One
 * ONNX .pb file bound to NAME (SequenceProto, OptionalProto, a TensorProto
 * of strings) fills all of them.  For input tensor `name`: *part (0 = the
 * value's main tensor) and the file bound to the value, or NULL. */
static const char *const part_suffix[] = {"", ":shapes", ":present", ":lens"};

static const char *value_binding(const kiln_engine *e, int io, const binding *list, int n, const char *name,
                                 int *part, int *is_str) {
    char base[300];
    for (int k = 0; k < 4; k++) {
        size_t nl = strlen(name), sl = strlen(part_suffix[k]);
        if (nl <= sl || strcmp(name + nl - sl, part_suffix[k]) || nl - sl >= sizeof base) continue;
        memcpy(base, name, nl - sl);
        base[nl - sl] = 0;
        char probe[320];
        int str = 0, multi = 0;
        snprintf(probe, sizeof probe, "%s:shapes", base);
        multi = tensor_named(e, io, probe);
        snprintf(probe, sizeof probe, "%s:lens", base);
        if (!multi && tensor_named(e, io, probe)) multi = str = 1;
        if (!multi || !tensor_named(e, io, base)) continue;
        for (int b = 0; b < n; b++)
            if (!strcmp(list[b].name, base)) {
                size_t pl = strlen(list[b].path);
                if (pl < 3 || strcmp(list[b].path + pl - 3, ".pb")) return NULL; /* parts bound one by one */
                *part = k == 3 ? 1 : k;
                *is_str = str;
                return list[b].path;
            }
    }
    return NULL;
}

/* Part `part` of the value in `path` as a tensor (malloc'd data). */
static int read_value_part(const char *path, int part, int is_str, cli_tensor *t, char *err, size_t esz) {
    cli_tensor all[3];
    int parts = is_str ? 2 : 3;
    if (cli_value_read(path, is_str, parts, KILN_DTYPE_F32, -1, all, err, esz)) return -1;
    *t = all[part];
    for (int k = 0; k < parts; k++)
        if (k != part) free(all[k].data);
    return 0;
}

/* The tensor for input (io 0) or reference output (io 1) `name` (position
 * i): from its own file, or from the file of the value it is a part of.
 * 1 = found and read, 0 = not bound, -1 = error (message set). */
static int read_bound(const char *verb, const kiln_engine *e, int io, const binding *list, int n, const char *name,
                      int i, cli_tensor *t, const char **file) {
    char err[600];
    int part = 0, is_str = 0;
    const char *vf = value_binding(e, io, list, n, name, &part, &is_str);
    if (vf) {
        *file = vf;
        if (read_value_part(vf, part, is_str, t, err, sizeof err)) return cli_fail(verb, "%s", err), -1;
        return 1;
    }
    *file = find_binding(e, io, list, n, name, i);
    if (!*file) return 0;
    if (cli_tensor_read(*file, t, err, sizeof err)) return cli_fail(verb, "%s", err), -1;
    return 1;
}

/* Every binding names an existing tensor (or position)?  1 if so. */
static int check_bindings(const char *verb, const char *opt, const kiln_engine *e, int io,
                          const binding *list, int n) {
    int nin = kiln_engine_num_inputs(e), count = io ? kiln_engine_num_outputs(e) : nin;
    for (int k = 0; k < n; k++) {
        int found = 0;
        for (int i = 0; i < count && !found; i++) {
            kiln_io_info info;
            kiln_engine_io(e, (io ? nin : 0) + i, &info);
            found = binding_is(&list[k], info.name, i, tensor_named(e, io, list[k].name));
        }
        if (!found) {
            char names[512] = "";
            size_t off = 0;
            for (int i = 0; i < count && off < sizeof names; i++) {
                kiln_io_info info;
                if (kiln_engine_io(e, (io ? nin : 0) + i, &info)) continue;
                off += (size_t)snprintf(names + off, sizeof names - off, "%s%d '%s'", i ? ", " : "", i,
                                        info.name);
            }
            cli_fail(verb, "%s %s: the engine has no %s of that name (or position); its %ss: %s", opt,
                     list[k].name, io ? "output" : "input", io ? "output" : "input", count ? names : "none");
            return 0;
        }
    }
    return 1;
}

static void free_bindings(binding *list, int n) {
    for (int k = 0; k < n; k++) free((char *)list[k].name);
}

static void shape_str(int ndim, const int64_t *dims, char *buf, size_t size) {
    size_t l = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && l < size; d++)
        l += (size_t)snprintf(buf + l, size - l, "%s%lld", d ? ", " : "", (long long)dims[d]);
    if (l < size) snprintf(buf + l, size - l, "]");
}

/* Compare one output with a reference file; returns 0 when within tolerance. */
/* Compare an output with its reference (ref.data is freed). */
static int compare(const char *verb, const char *name, kiln_dtype dt, int ndim, const int64_t *dims,
                   const void *data, const char *ref_path, cli_tensor ref, double rtol, double atol) {
    char a[128], b[128];
    shape_str(ndim, dims, a, sizeof a);
    shape_str(ref.ndim, ref.dims, b, sizeof b);
    size_t n = 1;
    for (int d = 0; d < ndim; d++) n *= (size_t)dims[d];
    if (ndim != ref.ndim || memcmp(dims, ref.dims, sizeof(int64_t) * (size_t)ndim)) {
        free(ref.data);
        return cli_fail(verb, "compare %s: output shape %s, reference %s has %s", name, a, ref_path, b);
    }
    size_t bad = 0, first = 0;
    double maxerr = 0;
    for (size_t i = 0; i < n; i++) {
        double x = cli_tensor_get(dt, data, i), y = cli_tensor_get(ref.dtype, ref.data, i);
        double e = fabs(x - y);
        int ok = e <= atol + rtol * fabs(y) || (isnan(x) && isnan(y)) || x == y;
        if (!ok && !bad++) first = i;
        if (!(e <= maxerr) && !isnan(y)) maxerr = e;
    }
    printf("compare %s with %s: %zu elements, max abs error %.3g, %zu outside atol %g + rtol %g\n",
           name, ref_path, n, maxerr, bad, atol, rtol);
    int rc = 0;
    if (bad)
        rc = cli_fail(verb, "output %s differs from %s: %zu of %zu elements, first at %zu (%.9g vs %.9g)",
                      name, ref_path, bad, n, first, cli_tensor_get(dt, data, first),
                      cli_tensor_get(ref.dtype, ref.data, first));
    free(ref.data);
    return rc;
}

int kiln_cli_run(int argc, char **argv) {
    const char *verb = "run", *path = NULL, *outdir = NULL, *v;
    cli_plugins plugins = {0};
    cli_shapes shapes = {0};
    binding inputs[MAX_BINDINGS], cmps[MAX_BINDINGS];
    int ninputs = 0, ncmps = 0, debug = 0, status = 2, graphs = 1;
    long threads = 0, iterations = 1;
    unsigned long long seed = 1;
    double rtol = 1e-4, atol = 1e-5;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int m = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            status = usage(stdout);
            goto out;
        } else if (!strcmp(a, "--debug")) debug = 1;
        else if (cli_verbose_opt(a)) continue;
        else if (!strcmp(a, "--no-cuda-graph")) graphs = 0;
        else if ((m = cli_plugins_opt(verb, argc, argv, &i, &plugins)) > 0) continue;
        else if (m == 0 && (m = cli_trust_opt(verb, argc, argv, &i)) > 0) continue;
        else if (m == 0 && (m = cli_opt(argc, argv, &i, "--input", &v)) > 0) {
            if (split_binding(verb, "--input", v, inputs, &ninputs)) goto out;
        } else if (m == 0 && (m = cli_opt(argc, argv, &i, "--compare", &v)) > 0) {
            if (split_binding(verb, "--compare", v, cmps, &ncmps)) goto out;
        } else if (m == 0 && (m = cli_opt(argc, argv, &i, "--shapes", &v)) > 0) {
            if (cli_shapes_parse(verb, v, &shapes)) goto out;
        } else if (m == 0 && (m = cli_opt(argc, argv, &i, "--output-dir", &v)) > 0) outdir = v;
        else if (m == 0 && (m = cli_opt(argc, argv, &i, "--threads", &v)) > 0) {
            if (cli_threads(verb, v, &threads)) goto out;
        } else if (m == 0 && (m = cli_opt(argc, argv, &i, "--iterations", &v)) > 0) {
            if (cli_int(verb, "--iterations", v, &iterations)) goto out;
            if (iterations < 1) {
                cli_fail(verb, "--iterations expects an integer >= 1, found '%s'", v);
                goto out;
            }
        } else if (m == 0 && (m = cli_opt(argc, argv, &i, "--seed", &v)) > 0) {
            char *e;
            errno = 0;
            seed = strtoull(v, &e, 0);
            if (errno || e == v || *e || *v == '-') {
                cli_fail(verb, "--seed expects a non-negative integer, found '%s'", v);
                goto out;
            }
        } else if (m == 0 && (m = cli_opt(argc, argv, &i, "--rtol", &v)) > 0) {
            if (cli_double(verb, "--rtol", v, &rtol)) goto out;
        } else if (m == 0 && (m = cli_opt(argc, argv, &i, "--atol", &v)) > 0) {
            if (cli_double(verb, "--atol", v, &atol)) goto out;
        } else if (m < 0) {
            goto out;
        } else if (a[0] == '-') {
            cli_fail(verb, "unknown option '%s'", a);
            status = usage(stderr);
            goto out;
        } else if (!path) {
            path = a;
        } else {
            cli_fail(verb, "one engine at a time (found '%s' and '%s')", path, a);
            goto out;
        }
    }
    if (!path) {
        cli_fail(verb, "expected an engine file");
        status = usage(stderr);
        goto out;
    }
    status = 1;
    if (outdir) { /* before running: create it, or find out why not */
        struct stat dst;
        if (mkdir(outdir, 0777) != 0 && errno != EEXIST) {
            cli_fail(verb, "--output-dir %s: cannot create it: %s", outdir, strerror(errno));
            goto out;
        }
        if (stat(outdir, &dst) != 0 || !S_ISDIR(dst.st_mode)) {
            cli_fail(verb, "--output-dir %s: exists and is not a directory", outdir);
            goto out;
        }
    }
    int prc = cli_plugins_load(verb, &plugins);
    cli_plugins_free(&plugins); /* the libraries stay loaded */
    if (prc) goto out;

    kiln_engine *e = NULL;
    kiln_context *ctx = NULL;
    void **bufs = NULL;
    /* A model built in memory is built for --shapes, then the shapes of the
     * --input tensor files (a file that does not read is reported below). */
    cli_shapes hints = shapes;
    for (int k = 0; cli_is_onnx(path) && k < ninputs; k++) {
        cli_tensor t;
        char err[256];
        if (cli_shapes_find(&hints, inputs[k].name) || cli_tensor_read(inputs[k].path, &t, err, sizeof err))
            continue;
        cli_shape sh;
        memset(&sh, 0, sizeof sh);
        snprintf(sh.name, sizeof sh.name, "%s", inputs[k].name);
        sh.ndim = t.ndim;
        memcpy(sh.dims, t.dims, sizeof sh.dims);
        free(t.data);
        if (cli_shapes_set(verb, &hints, &sh)) goto out;
    }
    int rc = cli_engine_open(verb, path, &hints, &e);
    if (rc) goto out;
    int nin = kiln_engine_num_inputs(e), nout = kiln_engine_num_outputs(e);
    if ((rc = kiln_context_create(e, (int)threads, &ctx))) {
        cli_fail_kiln(verb, rc, "creating a context");
        goto done;
    }
    kiln_context_set_debug(ctx, debug);
    kiln_context_set_cuda_graphs(ctx, graphs);
    if (!check_bindings(verb, "--input", e, 0, inputs, ninputs) ||
        !check_bindings(verb, "--compare", e, 1, cmps, ncmps))
        goto done;
    /* Shapes of inputs given as files come from the files. */
    for (int i = 0; i < nin; i++) {
        kiln_io_info info;
        kiln_engine_io(e, i, &info);
        const char *file = NULL;
        cli_tensor t;
        int got = read_bound(verb, e, 0, inputs, ninputs, info.name, i, &t, &file);
        if (got < 0) goto done;
        if (!got) continue;
        cli_shape sh;
        memset(&sh, 0, sizeof sh);
        snprintf(sh.name, sizeof sh.name, "%s", info.name);
        sh.ndim = t.ndim;
        memcpy(sh.dims, t.dims, sizeof sh.dims);
        free(t.data);
        const cli_shape *given = cli_shapes_find(&shapes, info.name);
        if (given && (given->ndim != sh.ndim || memcmp(given->dims, sh.dims, sizeof(int64_t) * (size_t)sh.ndim))) {
            char a[160] = "", b[160] = "";
            for (int d = 0, oa = 0, ob = 0; d < KILN_MAX_DIMS; d++) {
                if (d < given->ndim)
                    oa += snprintf(a + oa, sizeof a - (size_t)oa, "%s%lld", d ? "x" : "", (long long)given->dims[d]);
                if (d < sh.ndim)
                    ob += snprintf(b + ob, sizeof b - (size_t)ob, "%s%lld", d ? "x" : "", (long long)sh.dims[d]);
            }
            if (!given->ndim) snprintf(a, sizeof a, "[] (a scalar)");
            if (!sh.ndim) snprintf(b, sizeof b, "[] (a scalar)");
            cli_fail(verb, "input '%s': --shapes gives %s but %s holds %s", info.name, a, file, b);
            goto done;
        }
        if (cli_shapes_set(verb, &shapes, &sh)) goto done;
    }
    if (cli_context_random_inputs(verb, e, ctx, &shapes, seed, &bufs)) goto done;
    /* Overwrite the random data of inputs given as files. */
    for (int i = 0; i < nin; i++) {
        kiln_io_info info;
        kiln_engine_io(e, i, &info);
        const char *file = NULL;
        cli_tensor t;
        int got = read_bound(verb, e, 0, inputs, ninputs, info.name, i, &t, &file);
        if (got < 0) goto done;
        if (!got) continue;
        size_t n = t.bytes / (kiln_dtype_size(t.dtype) ? kiln_dtype_size(t.dtype) : 1);
        if (t.dtype != info.dtype)
            fprintf(stderr, "kiln run: note: input %s converted from %s (%s) to %s\n", info.name,
                    kiln_dtype_name(t.dtype), file, kiln_dtype_name(info.dtype));
        cli_convert(info.dtype, bufs[i], t.dtype, t.data, n);
        free(t.data);
    }
    double t0 = cli_now_ms();
    for (long it = 0; it < iterations; it++)
        if ((rc = kiln_context_run(ctx))) {
            cli_fail_kiln(verb, rc, "execution failed");
            goto done;
        }
    double ms = (cli_now_ms() - t0) / (double)iterations;
    if (outdir) mkdir(outdir, 0777);
    int bad = 0;
    for (int i = 0; i < nout; i++) {
        kiln_io_info info;
        kiln_engine_io(e, nin + i, &info);
        int ndim = 0;
        int64_t dims[KILN_MAX_DIMS];
        if ((rc = kiln_context_shape(ctx, info.name, &ndim, dims))) {
            cli_fail_kiln(verb, rc, info.name);
            goto done;
        }
        const void *data = kiln_context_output(ctx, info.name);
        size_t n = 1;
        for (int d = 0; d < ndim; d++) n *= (size_t)dims[d];
        double sum = 0, asum = 0, mn = INFINITY, mx = -INFINITY;
        for (size_t k = 0; data && k < n; k++) {
            double x = cli_tensor_get(info.dtype, data, k);
            sum += x;
            asum += fabs(x);
            if (x < mn) mn = x;
            if (x > mx) mx = x;
        }
        char s[128];
        shape_str(ndim, dims, s, sizeof s);
        printf("output %s: %s %s  sum %.6g  mean|x| %.6g  min %.6g  max %.6g\n", info.name,
               kiln_dtype_name(info.dtype), s, sum, n ? asum / (double)n : 0.0, n ? mn : 0.0,
               n ? mx : 0.0);
        if (outdir && data) {
            char file[4096];
            snprintf(file, sizeof file, "%s/%s.npy", outdir, info.name);
            for (char *p = file + strlen(outdir) + 1; *p; p++)
                if (*p == '/') *p = '_';
            if (npy_write(file, info.dtype, ndim, dims, data)) {
                cli_fail(verb, "writing %s: %s", file, strerror(errno));
                goto done;
            }
        }
        const char *ref = NULL;
        cli_tensor rt;
        int got = read_bound(verb, e, 1, cmps, ncmps, info.name, i, &rt, &ref);
        if (got < 0) bad = 1;
        else if (got && compare(verb, info.name, info.dtype, ndim, dims, data, ref, rt, rtol, atol)) bad = 1;
    }
    printf("run: %.3f ms%s\n", ms, iterations > 1 ? " (mean)" : "");
    status = bad;
done:
    if (bufs)
        for (int i = 0; i < nin; i++) free(bufs[i]);
    free(bufs);
    if (ctx) kiln_context_free(ctx);
    if (e) kiln_engine_free(e);
out:
    free_bindings(inputs, ninputs);
    free_bindings(cmps, ncmps);
    return status;
}
