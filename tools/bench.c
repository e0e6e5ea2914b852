/*
 * bench.c — `kiln bench ENGINE`: latency distribution and throughput on
 * random inputs; optionally per-layer times from the context profiler, or
 * (--profile) the layers that take the most time and the machine's
 * measured FMA peak, to set the run against what the hardware can do.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static int usage(FILE *f) {
    fprintf(f,
            "usage: kiln bench ENGINE [options]\n"
            "  --plugins LIB.so        load a plugin library the engine needs (repeatable)\n"
            "  --plugin-source F.c     compile a plugin source (cached) and load it (repeatable)\n"
            "  --warmup N              untimed runs first (default 10)\n"
            "  --iterations N          timed runs (default 200)\n"
            "  --duration S            run for S seconds instead of --iterations\n"
            "  --threads N             worker threads (default: the engine's build setting)\n"
            "  --shapes in:1x3x224x224 shapes of dynamic inputs (default: profile opt)\n"
            "  --per-layer             also profile each layer (separate runs)\n"
            "  --profile               the 5 layers taking the most time (separate runs) and the\n"
            "                          measured FMA peak of --threads N threads (GFLOP/s)\n"
            "  --no-cuda-graph         CUDA engines: launch layer by layer (no CUDA graph replay)\n"
            "  -v, --verbose           library log (engine loading, plugin lookups)\n"
            "  ENGINE may be a MODEL.onnx: built in memory first (--shapes sets its profile)\n"
            "  Unless --threads 1, it also prints the round trip of a cache line between the\n"
            "  first two CPUs it may use (\"core round trip\"): on a VM the host may put them on\n"
            "  one die (~50-150 ns) or two (~400 ns), which changes 2-thread latencies\n"
            CLI_TRUST_HELP);
    return f == stdout ? 0 : 2;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(const double *s, size_t n, double p) {
    size_t k = (size_t)(p * (double)(n - 1) + 0.5);
    return s[k < n ? k : n - 1];
}

/* --profile: the 5 layers with the largest mean time (acc: summed ms of
 * `reps` profiled runs per layer) and the measured FMA peak. */
static void print_profile(const kiln_engine *e, const kiln_context *ctx, const double *acc, int nl, int reps,
                          int threads) {
    double total = 0;
    for (int l = 0; l < nl; l++) total += acc[l];
    printf("top layers by time (mean of %d profiled runs, %.3f ms in all layers):\n", reps, total / reps);
    int top[5], ntop = 0;
    for (int r = 0; r < 5 && r < nl; r++) {
        int best = -1;
        for (int l = 0; l < nl; l++) {
            int taken = 0;
            for (int k = 0; k < ntop; k++) taken |= top[k] == l;
            if (!taken && (best < 0 || acc[l] > acc[best])) best = l;
        }
        top[ntop++] = best;
        const char *name = "?";
        double ms;
        kiln_context_profile(ctx, best, &name, &ms);
        kiln_layer_info li;
        int have = !kiln_engine_layer_info(e, best, &li) && li.name && !strcmp(li.name, name);
        printf("  %d. %-36s %-24s %10.3f us  %5.1f%%\n", r + 1, name,
               have && li.op_name ? li.op_name : "", acc[best] * 1e3 / reps,
               total > 0 ? 100.0 * acc[best] / total : 0.0);
    }
    printf("FMA peak: %.1f GFLOP/s (measured, %d thread%s)\n", cli_fma_peak_gflops(threads), threads,
           threads == 1 ? "" : "s");
}

int kiln_cli_bench(int argc, char **argv) {
    const char *verb = "bench", *path = NULL, *v;
    cli_plugins plugins = {0};
    cli_shapes shapes = {0};
    long warmup = 10, iterations = 200, threads = 0;
    double duration = 0;
    int per_layer = 0, profile = 0, graphs = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int m = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(stdout);
        else if (!strcmp(a, "--per-layer")) per_layer = 1;
        else if (!strcmp(a, "--profile")) profile = 1;
        else if (cli_verbose_opt(a)) continue;
        else if (!strcmp(a, "--no-cuda-graph")) graphs = 0;
        else if ((m = cli_plugins_opt(verb, argc, argv, &i, &plugins)) > 0) continue;
        else if (m == 0 && (m = cli_trust_opt(verb, argc, argv, &i)) > 0) continue;
        else if (m == 0 && (m = cli_opt(argc, argv, &i, "--warmup", &v)) > 0) {
            if (cli_int(verb, "--warmup", v, &warmup)) return 2;
        } else if (m == 0 && (m = cli_opt(argc, argv, &i, "--iterations", &v)) > 0) {
            if (cli_int(verb, "--iterations", v, &iterations)) return 2;
            if (iterations < 1 || iterations > 100000000) {
                cli_fail(verb, "--iterations expects an integer from 1 to 100000000, found '%s'", v);
                return 2;
            }
        } else if (m == 0 && (m = cli_opt(argc, argv, &i, "--duration", &v)) > 0) {
            if (cli_double(verb, "--duration", v, &duration)) return 2;
        } else if (m == 0 && (m = cli_opt(argc, argv, &i, "--threads", &v)) > 0) {
            if (cli_threads(verb, v, &threads)) return 2;
        } else if (m == 0 && (m = cli_opt(argc, argv, &i, "--shapes", &v)) > 0) {
            if (cli_shapes_parse(verb, v, &shapes)) return 2;
        } else if (m < 0) {
            return 2;
        } else if (a[0] == '-') {
            cli_fail(verb, "unknown option '%s'", a);
            return usage(stderr);
        } else if (!path) {
            path = a;
        } else {
            cli_fail(verb, "one engine at a time (found '%s' and '%s')", path, a);
            return 2;
        }
    }
    if (!path) {
        cli_fail(verb, "expected an engine file");
        return usage(stderr);
    }
    int prc = cli_plugins_load(verb, &plugins);
    cli_plugins_free(&plugins); /* the libraries stay loaded */
    if (prc) return 1;
    kiln_engine *e = NULL;
    kiln_context *ctx = NULL;
    void **bufs = NULL;
    double *lat = NULL;
    double t_load = cli_now_ms();
    int status = 1, rc = cli_engine_open(verb, path, &shapes, &e);
    if (rc) return 1;
    t_load = cli_now_ms() - t_load;
    int nin = kiln_engine_num_inputs(e);
    if ((rc = kiln_context_create(e, (int)threads, &ctx))) {
        cli_fail_kiln(verb, rc, "creating a context");
        goto done;
    }
    kiln_context_set_cuda_graphs(ctx, graphs);
    if (cli_context_random_inputs(verb, e, ctx, &shapes, 1, &bufs)) goto done;
    /* The first run also verifies the checksums a mapped load defers. */
    double t_first = cli_now_ms();
    for (long k = 0; k < warmup; k++) {
        if (k == 1) t_first = cli_now_ms() - t_first;
        if ((rc = kiln_context_run(ctx))) {
            cli_fail_kiln(verb, rc, "execution failed");
            goto done;
        }
    }
    if (warmup == 1) t_first = cli_now_ms() - t_first;
    size_t cap = 1024, n = 0;
    lat = malloc(cap * sizeof *lat);
    if (!lat) {
        cli_fail(verb, "out of memory");
        goto done;
    }
    double start = cli_now_ms();
    while (duration > 0 ? cli_now_ms() - start < duration * 1e3 : n < (size_t)iterations) {
        if (n == cap) {
            double *nl = realloc(lat, cap * 2 * sizeof *lat);
            if (!nl) {
                cli_fail(verb, "out of memory recording %zu latencies", cap * 2);
                goto done;
            }
            lat = nl;
            cap *= 2;
        }
        double t0 = cli_now_ms();
        if ((rc = kiln_context_run(ctx))) {
            cli_fail_kiln(verb, rc, "execution failed");
            goto done;
        }
        lat[n++] = cli_now_ms() - t0;
    }
    double total = cli_now_ms() - start;
    qsort(lat, n, sizeof *lat, cmp_double);
    double med = pct(lat, n, 0.5);
    /* microseconds for fast engines, milliseconds otherwise */
    double u = med < 1.0 ? 1e3 : 1.0;
    printf("%s: %zu runs, latency %s: min %.3f  median %.3f  p90 %.3f  p99 %.3f  max %.3f\n",
           path, n, u > 1 ? "us" : "ms", lat[0] * u, med * u, pct(lat, n, 0.9) * u,
           pct(lat, n, 0.99) * u, lat[n - 1] * u);
    /* Where the host put two of our CPUs, right after the timed runs: a
     * 2-thread latency depends on it (core_rtt.c). */
    double rtt;
    int ca, cb;
    if (threads != 1 && !cli_core_rtt(&rtt, &ca, &cb))
        printf("core round trip: %.0f ns (CPUs %d and %d, after the timed runs)\n", rtt, ca, cb);
    printf("throughput: %.1f runs/s\n", (double)n / (total / 1e3));
    printf("engine load: %.3f ms%s\n", t_load, cli_is_onnx(path) ? " (import and build in memory)" : "");
    if (warmup > 0) printf("first run: %.3f ms\n", t_first);

    /* Layer count (and, with --per-layer, mean times) from the profiler. */
    kiln_context_set_profiling(ctx, 1);
    int reps = per_layer || profile ? (int)(n < 50 ? n : 50) : 1, nl = 0;
    double *acc = NULL;
    for (int r = 0; r < reps; r++) {
        if ((rc = kiln_context_run(ctx))) {
            cli_fail_kiln(verb, rc, "profiled run");
            goto done;
        }
        for (int l = 0;; l++) {
            const char *name;
            double ms;
            if (kiln_context_profile(ctx, l, &name, &ms)) break;
            if (l >= nl) {
                acc = realloc(acc, (size_t)(l + 1) * sizeof *acc);
                acc[l] = 0;
                nl = l + 1;
            }
            acc[l] += ms;
        }
    }
    if (nl > 0)
        printf("per layer: %.3f us (median latency / %d layers)\n", med * 1e3 / nl, nl);
    if (per_layer && nl > 0) {
        printf("%-40s %12s\n", "layer", "mean us");
        for (int l = 0; l < nl; l++) {
            const char *name = "?";
            double ms;
            kiln_context_profile(ctx, l, &name, &ms);
            printf("%-40s %12.3f\n", name, acc[l] * 1e3 / reps);
        }
    }
    if (profile && nl > 0) print_profile(e, ctx, acc, nl, reps, (int)(threads ? threads : 1));
    free(acc);
    status = 0;
done:
    free(lat);
    if (bufs)
        for (int i = 0; i < nin; i++) free(bufs[i]);
    free(bufs);
    if (ctx) kiln_context_free(ctx);
    kiln_engine_free(e);
    return status;
}
