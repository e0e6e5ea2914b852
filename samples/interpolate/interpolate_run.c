/*
 * interpolate_run.c — `kiln-samples interpolate`: a plugin compiled from
 * source at first use, cached, and checked against a naive reference.
 * Uses only the public API (kiln.h, plugin.h).
 */
#include "interpolate_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kiln/kiln.h>
#include <kiln/plugin.h>

#include "../runner/placement.h"

static uint64_t ir_next(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static float ir_float(uint64_t *s, float lo, float hi) {
    return lo + (hi - lo) * (float)((ir_next(s) >> 40) / (double)(1ull << 24));
}

/* The definition from interpolate.c's header comment, written again. */
static float ir_ref(const float *x, int64_t H, int64_t W, int64_t oy, int64_t ox, double s,
                    int bilinear) {
    if (!bilinear) {
        int64_t sy = (int64_t)floor(oy / s), sx = (int64_t)floor(ox / s);
        if (sy > H - 1) sy = H - 1;
        if (sx > W - 1) sx = W - 1;
        return x[sy * W + sx];
    }
    double fy = (oy + 0.5) / s - 0.5, fx = (ox + 0.5) / s - 0.5;
    fy = fy < 0 ? 0 : fy > H - 1 ? H - 1 : fy;
    fx = fx < 0 ? 0 : fx > W - 1 ? W - 1 : fx;
    int64_t y0 = (int64_t)fy, x0 = (int64_t)fx;
    int64_t y1 = y0 + 1 < H ? y0 + 1 : H - 1, x1 = x0 + 1 < W ? x0 + 1 : W - 1;
    double wy = fy - y0, wx = fx - x0;
    return (float)((1 - wy) * ((1 - wx) * x[y0 * W + x0] + wx * x[y0 * W + x1]) +
                   wy * ((1 - wx) * x[y1 * W + x0] + wx * x[y1 * W + x1]));
}

#define IR_CHECK(call)                                                                    \
    do {                                                                                  \
        int rc_ = (call);                                                                 \
        if (rc_ != 0) {                                                                   \
            fprintf(stderr, "interpolate: %s failed: %s (%s)\n", #call, kiln_errmsg(),    \
                    kiln_err_name(rc_));                                                  \
            goto done;                                                                    \
        }                                                                                 \
    } while (0)

int kiln_sample_interpolate(const kiln_interpolate_opts *o) {
    const char *mode = o->mode ? o->mode : "nearest";
    double scale = o->scale > 0 ? o->scale : 2.0;
    int64_t N = o->n > 0 ? o->n : 2, C = o->c > 0 ? o->c : 3;
    int64_t H = o->h > 0 ? o->h : 13, W = o->w > 0 ? o->w : 17;
    uint64_t seed = o->seed ? o->seed : 1;
    int ok = 0;
    kiln_network *net = NULL;
    kiln_build_config *cfg = NULL;
    kiln_engine *e = NULL;
    kiln_context *ctx = NULL;
    float *x = NULL, *y = NULL;
    char *so = NULL;

    char src[4096];
    snprintf(src, sizeof src, "%s/samples/interpolate/interpolate.c",
             o->source_dir ? o->source_dir : ".");
    kiln_compile_options co = {.verbose = o->verbose, .rebuild = o->rebuild};
    IR_CHECK(kiln_plugin_compile_load(src, &co, &so));
    printf("interpolate: plugin %s\n", so);

    net = kiln_network_create();
    int64_t dims[4] = {N, C, -1, -1};
    const char *names[4] = {NULL, NULL, "H", "W"};
    IR_CHECK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 4, dims, names));
    const char *ins[1] = {"x"}, *outs[1] = {"y"};
    kiln_layer *l = kiln_network_add_layer(net, "sample::interpolate", 1, "interpolate", 1, ins,
                                           1, outs);
    if (!l) {
        fprintf(stderr, "interpolate: add_layer failed: %s\n", kiln_errmsg());
        goto done;
    }
    IR_CHECK(kiln_layer_set_float(l, "scale", scale));
    IR_CHECK(kiln_layer_set_string(l, "mode", mode));
    IR_CHECK(kiln_network_mark_output(net, "y"));
    cfg = kiln_build_config_create();
    if (o->threads > 0) kiln_build_config_set_threads(cfg, o->threads);
    if (o->cuda) {
        kiln_build_config_set_device(cfg, KILN_DEVICE_CUDA);
        kiln_build_config_set_flags(cfg, KILN_BUILD_STRICT_DEVICE);
    }
    int64_t mn[4] = {N, C, 1, 1}, opt[4] = {N, C, H, W}, mx[4] = {N, C, 4 * H, 4 * W};
    IR_CHECK(kiln_build_config_set_profile(cfg, "x", 4, mn, opt, mx));
    IR_CHECK(kiln_build(net, cfg, &e, NULL));
    if (kiln_samples_print_placement(e, o->cuda ? KILN_DEVICE_CUDA : KILN_DEVICE_CPU)) {
        fprintf(stderr, "interpolate: the plugin layer is not on the device asked for\n");
        goto done;
    }
    IR_CHECK(kiln_context_create(e, o->threads, &ctx));
    int64_t xd[4] = {N, C, H, W};
    IR_CHECK(kiln_context_set_input_shape(ctx, "x", 4, xd));
    int ndim = 0;
    int64_t yd[8];
    IR_CHECK(kiln_context_shape(ctx, "y", &ndim, yd));
    int64_t nin = N * C * H * W, nout = yd[0] * yd[1] * yd[2] * yd[3];
    x = malloc((size_t)nin * sizeof *x);
    y = malloc((size_t)(nout ? nout : 1) * sizeof *y);
    if (!x || !y) goto done;
    for (int64_t i = 0; i < nin; i++) x[i] = ir_float(&seed, -1, 1);
    memset(y, 0xff, (size_t)nout * sizeof *y); /* NaN poison */
    IR_CHECK(kiln_context_bind(ctx, "x", x, (size_t)nin * sizeof *x));
    IR_CHECK(kiln_context_bind(ctx, "y", y, (size_t)nout * sizeof *y));
    kiln_context_set_debug(ctx, 1);
    IR_CHECK(kiln_context_run(ctx));
    printf("interpolate: %s x%g, [%lld,%lld,%lld,%lld] -> [%lld,%lld,%lld,%lld], seed %llu\n",
           mode, scale, (long long)N, (long long)C, (long long)H, (long long)W,
           (long long)yd[0], (long long)yd[1], (long long)yd[2], (long long)yd[3],
           (unsigned long long)(o->seed ? o->seed : 1));
    if (ndim != 4 || yd[2] != (int64_t)floor(H * scale) || yd[3] != (int64_t)floor(W * scale)) {
        fprintf(stderr, "interpolate: output dims differ from floor(in * scale)\n");
        goto done;
    }
    int bil = strcmp(mode, "bilinear") == 0;
    double max_err = 0;
    for (int64_t p = 0; p < N * C; p++)
        for (int64_t oy = 0; oy < yd[2]; oy++)
            for (int64_t ox = 0; ox < yd[3]; ox++) {
                float got = y[(p * yd[2] + oy) * yd[3] + ox];
                float want = ir_ref(x + p * H * W, H, W, oy, ox, scale, bil);
                double err = fabs((double)got - want);
                if (!(err <= 1e-5)) {
                    fprintf(stderr, "interpolate: y[%lld,%lld,%lld] = %g, expected %g\n",
                            (long long)p, (long long)oy, (long long)ox, got, want);
                    goto done;
                }
                if (err > max_err) max_err = err;
            }
    printf("interpolate: max abs error %.3g\n", max_err);
    ok = 1;
done:
    kiln_context_free(ctx);
    kiln_engine_free(e);
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    kiln_free(so);
    free(x);
    free(y);
    printf("%s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
