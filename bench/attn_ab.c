/*
 * attn_ab.c — kiln::attention's CPU tactics timed against each other in
 * one process on the transformer benchmarks' shapes (bench/attn_ab.sh
 * builds it against build/libkiln.a).
 *
 *     build-attn-ab/attn_ab [ROUNDS [THREADS [TACTICS]]]
 *
 * One layer as the builder makes it from torch's encoder: Q, K, V views of
 * the packed projection p [S, 1, 3E], output [S, 1, H, D] (y_perm 2 0 1
 * 3); BERT-base (E 768, 12 heads of 64) and the small encoder (E 256, 4
 * heads), S 128.  Rounds alternate the tactics (default 1,2,3); each
 * figure is the fastest run of a round of 20, then the minimum and the
 * median over rounds (ATTN_AB_COLD=1: 16 MB written before each run,
 * so that p comes from L3 or memory as in a network).  Printed: the FMA peak measured first
 * (tools/fma_peak.c), microseconds a run and GFLOP/s (4 S^2 E), and the
 * largest difference of each tactic's output from tactic 1's.
 */
#include "kiln_int.h"
#include "ab_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static kiln_engine *attn_engine(int64_t S, int64_t H, int64_t D) {
    const int64_t E = H * D, dims[3] = {S, 1, 3 * E}, perm[4] = {2, 0, 1, 3};
    int64_t vw[42];
    for (int o = 0; o < 3; o++) {
        int64_t w[14] = {2, o * E, 1, 1, 1, -1 - H, 2, D, 0, 0, 1, -1 - D, 2, 1};
        memcpy(vw + 14 * o, w, sizeof w);
    }
    kiln_network *net = kiln_network_create();
    const char *in[3] = {"p", "p", "p"}, *out[1] = {"y"};
    kiln_layer *l = NULL;
    if (kiln_network_add_input(net, "p", KILN_DTYPE_F32, 3, dims, NULL) ||
        !(l = kiln_network_add_layer(net, "kiln::attention", 1, "attn", 3, in, 1, out)) ||
        kiln_layer_set_float(l, "scale", 1.0 / sqrt((double)D)) || kiln_layer_set_ints(l, "views", vw, 42) ||
        kiln_layer_set_ints(l, "y_perm", perm, 4) || kiln_network_mark_output(net, "y")) {
        fprintf(stderr, "network: %s\n", kiln_errmsg());
        exit(1);
    }
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_flags(cfg, KILN_BUILD_NO_TIMING);
    kiln_engine *e = NULL;
    if (kiln_build(net, cfg, &e, NULL)) {
        fprintf(stderr, "build: %s\n", kiln_errmsg());
        exit(1);
    }
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    return e;
}

/* test_ops_util.h's test_force_tactic */
static void force_tactic(kiln_engine *e, int tactic) {
    kiln__elayer *L = &e->layers[0];
    L->tactic = tactic;
    L->prepack_done = 0;
    if (kiln__engine_prepare(e)) {
        fprintf(stderr, "prepare: %s\n", kiln_errmsg());
        exit(1);
    }
}

int main(int argc, char **argv) {
    const int rounds = argc > 1 ? atoi(argv[1]) : 15, threads = argc > 2 ? atoi(argv[2]) : 1;
    float *flush = getenv("ATTN_AB_COLD") ? calloc(4u << 20, sizeof(float)) : NULL;
    int tac[8], nt = 0;
    for (const char *s = argc > 3 ? argv[3] : "1,2,3"; *s && nt < 8; s += strcspn(s, ",") + (s[strcspn(s, ",")] != 0))
        tac[nt++] = atoi(s);
    printf("FMA peak %.1f GFLOP/s (%d threads); %d rounds\n", cli_fma_peak_gflops(threads), threads, rounds);
    static const int64_t shapes[][3] = {{128, 12, 64}, {128, 4, 64}};
    for (int z = 0; z < 2; z++) {
        const int64_t S = shapes[z][0], H = shapes[z][1], D = shapes[z][2], E = H * D, np = S * 3 * E, ny = S * E;
        kiln_engine *e = attn_engine(S, H, D);
        float *p = aligned_alloc(64, (size_t)np * 4), *y = aligned_alloc(64, (size_t)ny * 4),
              *y1 = aligned_alloc(64, (size_t)ny * 4);
        unsigned seed = 7;
        for (int64_t i = 0; i < np; i++) p[i] = 4.0f * ((float)rand_r(&seed) / (float)RAND_MAX - 0.5f);
        double best[8][64], diff[8] = {0};
        for (int r = 0; r < rounds && r < 64; r++)
            for (int t = 0; t < nt; t++) {
                force_tactic(e, tac[t]);
                kiln_context *c = NULL;
                if (kiln_context_create(e, threads, &c) || kiln_context_bind(c, "p", p, (size_t)np * 4) ||
                    kiln_context_bind(c, "y", t ? y : y1, (size_t)ny * 4)) {
                    fprintf(stderr, "context: %s\n", kiln_errmsg());
                    return 1;
                }
                best[t][r] = 1e9;
                for (int it = 0; it < 22; it++) {
                    for (size_t i = 0; flush && i < 4u << 20; i += 16) flush[i] += 1.0f; /* p out of L2 */
                    double t0 = ab_now();
                    kiln_context_run(c);
                    if (it >= 2 && ab_now() - t0 < best[t][r]) best[t][r] = ab_now() - t0;
                }
                kiln_context_free(c);
                for (int64_t i = 0; t && i < ny; i++)
                    diff[t] = fmax(diff[t], fabs((double)y[i] - y1[i]));
            }
        printf("S %lld, %lld heads of %lld (%.1f MFLOP):\n", (long long)S, (long long)H, (long long)D,
               4.0 * S * S * E / 1e6);
        for (int t = 0; t < nt; t++) {
            double v[64];
            int n = rounds < 64 ? rounds : 64;
            memcpy(v, best[t], (size_t)n * sizeof *v);
            qsort(v, (size_t)n, sizeof *v, ab_cmpd);
            printf("  tactic %d: min %8.1f us  median %8.1f us  %6.1f GFLOP/s (min)  max diff %.2e\n", tac[t],
                   v[0] * 1e6, v[n / 2] * 1e6, 4.0 * S * S * E / v[0] / 1e9, diff[t]);
        }
        kiln_engine_free(e);
        free(p), free(y), free(y1);
    }
    return 0;
}
