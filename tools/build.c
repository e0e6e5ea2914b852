/*
 * build.c — `kiln build`: ONNX model or plugin-library network -> engine.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
            "  --shapes in:1x3x224x224[,in2:..]   fixed shapes (min = opt = max)\n"
            "  --min-shapes/--opt-shapes/--max-shapes SPEC   optimization profile\n"
            "  --timing-cache FILE   read before the build, written after\n"
            "  --threads N           build threads (default: all CPUs)\n"
            "  --no-timing           take the first candidate, time nothing\n"
            "  --prefer-aot | --prefer-jit   ops with both implementations\n"
            "  --embed-plugins       store the needed plugin .so files in the engine\n"
            "  -o, --output ENGINE   engine file to write (required)\n"
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

/* The verb; `plugins` is the caller's, so the cached library paths of
 * --plugin-source entries are freed on every return path. */
static int build_main(int argc, char **argv, cli_plugins *plugins) {
    const char *verb = "build", *model = NULL, *network = NULL, *netopts = NULL, *out = NULL,
               *cache = NULL, *v;
    cli_shapes shapes = {0}, mn = {0}, opt = {0}, mx = {0};
    unsigned flags = 0;
    long threads = 0;
    int verbose = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int m = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(stdout);
        else if (!strcmp(a, "--fp16")) flags |= KILN_BUILD_FP16;
        else if (!strcmp(a, "--no-timing")) flags |= KILN_BUILD_NO_TIMING;
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
        else if (m == 0 && (m = cli_opt(argc, argv, &i, "--threads", &v)) > 0) {
            if (cli_int(verb, "--threads", v, &threads)) return 2;
        } else if (m == 0 && (m = cli_opt(argc, argv, &i, "--shapes", &v)) > 0) {
            if (cli_shapes_parse(verb, v, &shapes)) return 2;
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
    if ((flags & KILN_BUILD_PREFER_AOT) && (flags & KILN_BUILD_PREFER_JIT)) {
        cli_fail(verb, "--prefer-aot and --prefer-jit exclude each other: pass one");
        return 2;
    }
    kiln_log_set(verbose ? KILN_LOG_VERBOSE : KILN_LOG_WARN, NULL, NULL);
    if (cli_plugins_load(verb, plugins)) return 1;

    kiln_network *net = NULL;
    int rc;
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
        if ((rc = kiln_onnx_import(model, &o, &net))) return cli_fail_kiln(verb, rc, model);
    }

    kiln_build_config *cfg = kiln_build_config_create();
    if (!cfg) {
        kiln_network_free(net);
        return cli_fail(verb, "out of memory");
    }
    kiln_build_config_set_flags(cfg, flags);
    if (threads > 0) kiln_build_config_set_threads(cfg, (int)threads);
    int status = 1;
    kiln_engine *e = NULL;
    kiln_build_stats st;
    memset(&st, 0, sizeof st);
    if (cache && (rc = kiln_build_config_set_timing_cache(cfg, cache))) {
        cli_fail_kiln(verb, rc, cache);
        goto done;
    }
    if (set_profiles(verb, cfg, &shapes, &mn, &opt, &mx)) goto done;
    if ((rc = kiln_build(net, cfg, &e, &st))) {
        cli_fail_kiln(verb, rc, model ? model : network);
        goto done;
    }
    if ((rc = kiln_engine_save(e, out))) {
        cli_fail_kiln(verb, rc, out);
        goto done;
    }
    printf("built %s in %.1f ms: %d layers (%d folded, %d reformats), %d candidates, %d timed, "
           "%d timing-cache hits (%d identical instances)\n",
           out, st.build_ms, st.layers, st.folded, st.reformats, st.candidates, st.timed,
           st.cache_hits, st.cache_dedup);
    status = 0;
done:
    kiln_engine_free(e);
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    return status;
}

int kiln_cli_build(int argc, char **argv) {
    cli_plugins plugins = {0};
    int rc = build_main(argc, argv, &plugins);
    cli_plugins_free(&plugins);
    return rc;
}
