/*
 * build.c — `kiln build`: ONNX model or plugin-library network -> engine.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <kiln/onnx.h>

#include "cli.h"

/* The ONNX importer may be absent from a partial build: weak reference. */
#pragma weak kiln_onnx_import

/* Plugin libraries that can construct networks by name export this. */
typedef int (*network_fn)(const char *name, const char *opts, kiln_network **out);
#define NETWORK_SYMBOL "kiln_samples_network"

static int usage(FILE *f) {
    fprintf(f,
            "usage: kiln build (MODEL.onnx | --network NAME) -o ENGINE [options]\n"
            "  --network NAME        a network from a --plugins library that exports\n"
            "                        " NETWORK_SYMBOL "() (e.g. the samples: circ_pad, chain100)\n"
            "  --network-opts OPTS   options for that network (e.g. multi-tactic,autotune)\n"
            "  --plugins LIB.so      load a plugin library (repeatable)\n"
            "  --plugin-source F.c   compile a plugin source (cached) and load it (repeatable)\n"
            "  --fp16                allow FP16 kernels\n"
            "  --bf16                allow BF16 kernels\n"
            "  --device cpu|cuda     where layers run (cuda: each layer with a CUDA\n"
            "                        implementation for its types; the rest on the CPU)\n"
            "  --strict-device       cuda: fail (listing them) if any layer stays on the CPU\n"
            "  --tf32                cuda: FP32 GEMMs may use TF32 (default: exact FP32)\n"
            "  --shapes in:1x3x224x224[,in2:..]   fixed shapes (min = opt = max)\n"
            "  --min-shapes/--opt-shapes/--max-shapes SPEC   optimization profile\n"
            "  --values NAME=V[,V..] ONNX: give a small graph input a build-time value\n"
            "                        (a constant in the engine), e.g. --values sr=16000\n"
            "                        (repeatable; converted to the input's dtype)\n"
            "  --timing-cache FILE   read before the build, written after\n"
            "  --threads N           build threads (default: all CPUs)\n"
            "  --no-timing           take the first candidate, time nothing\n"
            "  --refine              CPU: tactics within 10%% of the chosen one in isolation run\n"
            "                        again in the whole engine (paired rounds, a time budget);\n"
            "                        a runner-up clearly faster there is kept\n"
            "  --no-cpu-16c          CPU: LINEAR kernels only.  By default the NCHW16C kernels\n"
            "                        (1x1, Winograd, strided and stem convs, pools,\n"
            "                        activations, Add) are timed too, connected layers switch\n"
            "                        into NCHW16C where that times faster, and a switch is\n"
            "                        kept only where the whole engine runs faster with it\n"
            "                        (paired rounds); --cpu-16c: the default, accepted\n"
            "  --prefer-aot | --prefer-jit   ops with both implementations: force one\n"
            "                        (default: time both, take the faster)\n"
            "  --embed-plugins       store the needed plugin .so files in the engine\n"
            "  -o, --output ENGINE   engine file to write (required)\n"
            "  --sign KEY            sign the engine with KEY.key (kiln keygen): kiln run\n"
            "                        --verify KEY.pub then refuses any other or changed file\n"
            "  -v, --verbose         builder log (every timed candidate)\n");
    return f == stdout ? 0 : 2;
}

static network_fn find_network_fn(const cli_plugins *p) {
    for (int k = 0; k < p->n; k++) {
        void *h = dlopen(cli_plugins_library(p, k), RTLD_NOW | RTLD_NOLOAD);
        if (!h) continue;
        network_fn fn;
        *(void **)&fn = dlsym(h, NETWORK_SYMBOL);
        dlclose(h); /* drops the NOLOAD reference; the registry keeps its own */
        if (fn) return fn;
    }
    return NULL;
}

/* Profiles from --shapes/--min/--opt/--max for every input named there. */
static int set_profiles(const char *verb, kiln_build_config *cfg, const cli_shapes *all,
                        const cli_shapes *mn, const cli_shapes *opt, const cli_shapes *mx) {
    const cli_shapes *lists[4] = {all, mn, opt, mx};
    for (int l = 0; l < 4; l++)
        for (int k = 0; k < lists[l]->n; k++) {
            const char *name = lists[l]->s[k].name;
            const cli_shape *a = cli_shapes_find(all, name), *b = cli_shapes_find(mn, name),
                            *c = cli_shapes_find(opt, name), *d = cli_shapes_find(mx, name);
            /* A range without --shapes needs all three bounds: quietly
             * pinning the missing ones to the given one would build an
             * engine for a range the user did not ask for. */
            if (!a && (!b || !c || !d))
                return cli_fail(verb, "input '%s': give --min-shapes, --opt-shapes and --max-shapes together "
                                "(missing %s%s%s), or --shapes for one fixed shape", name, b ? "" : "min ",
                                c ? "" : "opt ", d ? "" : "max");
            const cli_shape *o = c ? c : a;
            if (!o) o = b ? b : d;
            if (!b) b = a ? a : o;
            if (!d) d = a ? a : o;
            if (b->ndim != o->ndim || d->ndim != o->ndim)
                return cli_fail(verb, "input '%s': min/opt/max shapes differ in rank (%d/%d/%d)",
                                name, b->ndim, o->ndim, d->ndim);
            int rc = kiln_build_config_set_profile(cfg, name, o->ndim, b->dims, o->dims, d->dims);
            if (rc) return cli_fail_kiln(verb, rc, name);
        }
    return 0;
}

/* --values NAME=V[,V..]: build-time values for graph inputs. */
#define MAX_VALUES 16
#define MAX_VALUE_ELEMS 64
typedef struct value_spec {
    const char *spec;        /* as given */
    char name[128];
    int count;
    double v[MAX_VALUE_ELEMS];
    int64_t dims[KILN_MAX_DIMS];
    void *data;              /* converted to the input's dtype */
} value_spec;

static int value_parse(const char *verb, const char *spec, value_spec *out) {
    const char *eq = strchr(spec, '=');
    if (!eq || eq == spec || (size_t)(eq - spec) >= sizeof out->name)
        return cli_fail(verb, "--values '%s': expected NAME=V[,V..]", spec);
    memset(out, 0, sizeof *out);
    out->spec = spec;
    memcpy(out->name, spec, (size_t)(eq - spec));
    const char *p = eq + 1;
    while (*p) {
        if (out->count == MAX_VALUE_ELEMS)
            return cli_fail(verb, "--values '%s': at most %d values", spec, MAX_VALUE_ELEMS);
        char *end;
        double d = strtod(p, &end);
        if (end == p || (*end && *end != ','))
            return cli_fail(verb, "--values '%s': '%s' is not a number", spec, p);
        out->v[out->count++] = d;
        p = *end ? end + 1 : end;
    }
    if (!out->count) return cli_fail(verb, "--values '%s': no value after '='", spec);
    return 0;
}

/* Shape and dtype from the model's declaration of the input; data converted. */
static int value_resolve(const char *verb, const kiln_network *net, value_spec *vs, kiln_onnx_value *ov) {
    kiln_io_info info;
    int found = 0;
    for (int i = 0; i < kiln_network_num_inputs(net) && !found; i++)
        if (!kiln_network_input_info(net, i, &info) && !strcmp(info.name, vs->name)) found = 1;
    if (!found) return cli_fail(verb, "--values %s: the model has no graph input '%s'", vs->spec, vs->name);
    int64_t n = 1;
    int fixed = 1;
    for (int k = 0; k < info.ndim; k++) {
        if (info.dims[k] < 0) fixed = 0;
        else n *= info.dims[k];
    }
    int ndim;
    if (fixed && n == vs->count) {
        ndim = info.ndim;
        for (int k = 0; k < ndim; k++) vs->dims[k] = info.dims[k];
    } else if (info.ndim == 1) {
        ndim = 1;
        vs->dims[0] = vs->count;
    } else {
        return cli_fail(verb, "--values %s: input '%s' has rank %d%s; %d value(s) do not fill it", vs->spec,
                        vs->name, info.ndim, fixed ? "" : " with dynamic dims", vs->count);
    }
    size_t es = kiln_dtype_size(info.dtype);
    if (!es || info.dtype == KILN_DTYPE_STRING)
        return cli_fail(verb, "--values %s: input '%s' has type %s", vs->spec, vs->name,
                        kiln_dtype_name(info.dtype));
    vs->data = calloc((size_t)vs->count, es);
    if (!vs->data) return cli_fail(verb, "out of memory");
    for (int i = 0; i < vs->count; i++) {
        double d = vs->v[i];
        unsigned char *p = (unsigned char *)vs->data + (size_t)i * es;
        switch (info.dtype) {
        case KILN_DTYPE_F32: { float f = (float)d; memcpy(p, &f, 4); break; }
        case KILN_DTYPE_F64: memcpy(p, &d, 8); break;
        case KILN_DTYPE_F16: { uint16_t h = kiln_f32_to_f16((float)d); memcpy(p, &h, 2); break; }
        case KILN_DTYPE_BF16: { uint16_t h = kiln_f32_to_bf16((float)d); memcpy(p, &h, 2); break; }
        case KILN_DTYPE_BOOL: *p = d != 0; break;
        default: {
            int64_t iv = (int64_t)d;
            if ((double)iv != d)
                return cli_fail(verb, "--values %s: %g is not an integer (input '%s' is %s)", vs->spec, d,
                                vs->name, kiln_dtype_name(info.dtype));
            memcpy(p, &iv, es); /* little-endian: the low bytes */
        }
        }
    }
    ov->name = vs->name;
    ov->dtype = info.dtype;
    ov->ndim = ndim;
    ov->dims = vs->dims;
    ov->data = vs->data;
    return 0;
}

/* The verb; `plugins` is the caller's, so the cached library paths of
 * --plugin-source entries are freed on every return path. */
static int build_main(int argc, char **argv, cli_plugins *plugins) {
    const char *verb = "build", *model = NULL, *network = NULL, *netopts = NULL, *out = NULL,
               *cache = NULL, *v;
    cli_shapes shapes = {0}, mn = {0}, opt = {0}, mx = {0};
    const char *value_specs[MAX_VALUES];
    int nvalue_specs = 0;
    unsigned flags = 0;
    kiln_device_kind device = KILN_DEVICE_CPU;
    long threads = 0;
    int verbose = 0, sign = 0;
    unsigned char sk[64];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int m = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(stdout);
        else if (!strcmp(a, "--fp16")) flags |= KILN_BUILD_FP16;
        else if (!strcmp(a, "--bf16")) flags |= KILN_BUILD_BF16;
        else if (!strcmp(a, "--tf32")) flags |= KILN_BUILD_TF32;
        else if (!strcmp(a, "--strict-device")) flags |= KILN_BUILD_STRICT_DEVICE;
        else if (m == 0 && (m = cli_opt(argc, argv, &i, "--device", &v)) > 0) {
            if (cli_device(verb, v, &device)) return 2;
        }
        else if (!strcmp(a, "--no-timing")) flags |= KILN_BUILD_NO_TIMING;
        else if (!strcmp(a, "--refine")) flags |= KILN_BUILD_REFINE;
        else if (!strcmp(a, "--cpu-16c")) flags |= KILN_BUILD_CPU_BLOCKED; /* the default (no effect) */
        else if (!strcmp(a, "--no-cpu-16c")) flags |= KILN_BUILD_CPU_LINEAR;
        else if (!strcmp(a, "--prefer-aot")) flags |= KILN_BUILD_PREFER_AOT;
        else if (!strcmp(a, "--prefer-jit")) flags |= KILN_BUILD_PREFER_JIT;
        else if (!strcmp(a, "--embed-plugins")) flags |= KILN_BUILD_EMBED_PLUGINS;
        else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) verbose = 1;
        else if ((m = cli_plugins_opt(verb, argc, argv, &i, plugins)) > 0) continue;
        else if (m == 0 && (m = cli_opt(argc, argv, &i, "--network", &v)) > 0) network = v;
        else if (m == 0 && (m = cli_opt(argc, argv, &i, "--network-opts", &v)) > 0) netopts = v;
        else if (m == 0 && ((m = cli_opt(argc, argv, &i, "-o", &v)) > 0 ||
                            (m == 0 && (m = cli_opt(argc, argv, &i, "--output", &v)) > 0)))
            out = v;
        else if (m == 0 && (m = cli_opt(argc, argv, &i, "--timing-cache", &v)) > 0) cache = v;
        else if (m == 0 && (m = cli_opt(argc, argv, &i, "--sign", &v)) > 0) {
            if (cli_key_read(verb, v, sk, sizeof sk)) return 2;
            sign = 1;
        }
        else if (m == 0 && (m = cli_opt(argc, argv, &i, "--threads", &v)) > 0) {
            if (cli_threads(verb, v, &threads)) return 2;
        } else if (m == 0 && (m = cli_opt(argc, argv, &i, "--shapes", &v)) > 0) {
            if (cli_shapes_parse(verb, v, &shapes)) return 2;
        } else if (m == 0 && (m = cli_opt(argc, argv, &i, "--values", &v)) > 0) {
            if (nvalue_specs == MAX_VALUES) {
                cli_fail(verb, "--values: at most %d inputs", MAX_VALUES);
                return 2;
            }
            value_specs[nvalue_specs++] = v;
        } else if (m == 0 && (m = cli_opt(argc, argv, &i, "--min-shapes", &v)) > 0) {
            if (cli_shapes_parse(verb, v, &mn)) return 2;
        } else if (m == 0 && (m = cli_opt(argc, argv, &i, "--opt-shapes", &v)) > 0) {
            if (cli_shapes_parse(verb, v, &opt)) return 2;
        } else if (m == 0 && (m = cli_opt(argc, argv, &i, "--max-shapes", &v)) > 0) {
            if (cli_shapes_parse(verb, v, &mx)) return 2;
        } else if (m < 0) {
            return 2;
        } else if (a[0] == '-') {
            cli_fail(verb, "unknown option '%s'", a);
            return usage(stderr);
        } else if (!model) {
            model = a;
        } else {
            cli_fail(verb, "one model at a time (found '%s' and '%s')", model, a);
            return 2;
        }
    }
    if (!!model == !!network) {
        cli_fail(verb, "expected either MODEL.onnx or --network NAME");
        return usage(stderr);
    }
    if (!out) {
        cli_fail(verb, "expected -o ENGINE (the engine file to write)");
        return usage(stderr);
    }
    if (network && nvalue_specs) {
        cli_fail(verb, "--values applies to ONNX models (graph inputs), not to --network %s", network);
        return 2;
    }
    if ((flags & KILN_BUILD_PREFER_AOT) && (flags & KILN_BUILD_PREFER_JIT)) {
        cli_fail(verb, "--prefer-aot and --prefer-jit exclude each other: pass one");
        return 2;
    }
    struct stat ost;
    if (stat(out, &ost) == 0 && S_ISDIR(ost.st_mode)) /* before a long build */
        return cli_fail(verb, "-o %s: is a directory, expected the engine file to write", out);
    struct stat mst;
    if (model && stat(out, &ost) == 0 && stat(model, &mst) == 0 && ost.st_dev == mst.st_dev &&
        ost.st_ino == mst.st_ino)
        return cli_fail(verb, "-o %s is the model itself: choose another engine file name", out);
    if (cache && stat(cache, &ost) == 0 && S_ISDIR(ost.st_mode))
        return cli_fail(verb, "--timing-cache %s: is a directory, expected a timing cache file", cache);
    kiln_log_set(verbose ? KILN_LOG_VERBOSE : KILN_LOG_WARN, NULL, NULL);
    if (cli_plugins_load(verb, plugins)) return 1;

    kiln_network *net = NULL;
    int rc;
    /* phase times (ms) for -v: import, build, save, free */
    double t_phase = cli_now_ms(), t_import = 0, t_build = 0, t_save = 0;
    if (network) {
        network_fn fn = find_network_fn(plugins);
        if (!fn)
            return cli_fail(verb, "--network %s: no --plugins library exports %s()", network,
                            NETWORK_SYMBOL);
        if ((rc = fn(network, netopts, &net))) return cli_fail_kiln(verb, rc, network);
    } else {
        if (!kiln_onnx_import) return cli_fail(verb, "%s: this kiln has no ONNX importer", model);
        kiln_onnx_options o = {0};
        o.verbose = verbose;
        /* --shapes fixes an input's shape (min = opt = max): import it with
         * those dims, so that values computed from them (an If on a dim, a
         * Reshape target) are known when the engine is built. */
        kiln_onnx_value fixed[CLI_MAX_SHAPES];
        int nfixed = 0;
        for (int k = 0; k < shapes.n; k++) {
            const char *nm = shapes.s[k].name;
            if (cli_shapes_find(&mn, nm) || cli_shapes_find(&opt, nm) || cli_shapes_find(&mx, nm)) continue;
            memset(&fixed[nfixed], 0, sizeof fixed[nfixed]);
            fixed[nfixed].name = nm;
            fixed[nfixed].ndim = shapes.s[k].ndim;
            fixed[nfixed].dims = shapes.s[k].dims;
            nfixed++;
        }
        o.shapes = fixed;
        o.nshapes = nfixed;
        if ((rc = kiln_onnx_import(model, &o, &net))) return cli_fail_kiln(verb, rc, model);
        if (nvalue_specs) {
            /* Import again with the inputs given values replaced by constants
             * (shape and dtype as the model declares them). */
            value_spec vs[MAX_VALUES];
            kiln_onnx_value ov[MAX_VALUES];
            int nv = 0, bad = 0;
            for (; nv < nvalue_specs && !bad; nv++)
                bad = value_parse(verb, value_specs[nv], &vs[nv]) || value_resolve(verb, net, &vs[nv], &ov[nv]);
            kiln_network_free(net);
            net = NULL;
            if (!bad) {
                o.values = ov;
                o.nvalues = nv;
                if ((rc = kiln_onnx_import(model, &o, &net))) bad = cli_fail_kiln(verb, rc, model);
            }
            for (int k = 0; k < nv; k++) free(vs[k].data);
            if (bad) return 1;
        }
    }

    t_import = cli_now_ms() - t_phase;
    kiln_build_config *cfg = kiln_build_config_create();
    if (!cfg) {
        kiln_network_free(net);
        return cli_fail(verb, "out of memory");
    }
    kiln_build_config_set_flags(cfg, flags);
    kiln_build_config_set_device(cfg, device);
    if (threads > 0) kiln_build_config_set_threads(cfg, (int)threads);
    int status = 1;
    kiln_engine *e = NULL;
    kiln_build_stats st;
    memset(&st, 0, sizeof st);
    if (cache && (rc = kiln_build_config_set_timing_cache(cfg, cache))) {
        cli_fail_kiln(verb, rc, cache);
        goto done;
    }
    const cli_shapes *given[4] = {&shapes, &mn, &opt, &mx};
    if (cli_default_shapes(verb, net, given, 4, &shapes)) goto done;
    if (set_profiles(verb, cfg, &shapes, &mn, &opt, &mx)) goto done;
    t_phase = cli_now_ms();
    if ((rc = kiln_build(net, cfg, &e, &st))) {
        cli_fail_kiln(verb, rc, model ? model : network);
        goto done;
    }
    t_build = cli_now_ms() - t_phase;
    t_phase = cli_now_ms();
    rc = sign ? kiln_engine_save_signed(e, out, sk) : kiln_engine_save(e, out);
    memset(sk, 0, sizeof sk);
    if (rc) {
        cli_fail_kiln(verb, rc, out);
        goto done;
    }
    t_save = cli_now_ms() - t_phase;
    printf("built %s in %.1f ms: %d layers (%d folded, %d reformats), %d candidates, %d timed, "
           "%d timing-cache hits (%d identical instances)\n",
           out, st.build_ms, st.layers, st.folded, st.reformats, st.candidates, st.timed,
           st.cache_hits, st.cache_dedup);
    status = 0;
done:
    t_phase = cli_now_ms();
    kiln_engine_free(e);
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    if (verbose && !status)
        fprintf(stderr, "kiln build: phases: %s %.1f ms, build %.1f ms, save %.1f ms, free %.1f ms\n",
                network ? "network" : "import", t_import, t_build, t_save, cli_now_ms() - t_phase);
    return status;
}

int kiln_cli_build(int argc, char **argv) {
    cli_plugins plugins = {0};
    int rc = build_main(argc, argv, &plugins);
    cli_plugins_free(&plugins);
    return rc;
}
