/*
 * test_transformer_ops.c — the CPU implementations of the builder's fused
 * transformer ops (kiln::attention, kiln::add_layernorm: the references
 * test_cuda_ops compares their GPU kernels with), as layers of CPU
 * engines, against independent double references on fresh random inputs
 * with poisoned outputs; and their shape errors.  Runs everywhere.
 */
#include "kiln_int.h"
#include "test.h"
#include "encoder_nets.h"
#include "test_ops_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NB = 2, HEADS = NB * ATTN_H, N = HEADS * ATTN_S * ATTN_D };

/* kiln::attention over q, k (K [.., S, D]; or K^T when kt) and v [NB, H, S, D]. */
static kiln_engine *attn_engine(int kt, double scale) {
    kiln_network *net = kiln_network_create();
    int64_t d[4] = {NB, ATTN_H, ATTN_S, ATTN_D};
    ASSERT_OK(kiln_network_add_input(net, "q", KILN_DTYPE_F32, 4, d, NULL));
    ASSERT_OK(kiln_network_add_input(net, "k", KILN_DTYPE_F32, 4, d, NULL));
    ASSERT_OK(kiln_network_add_input(net, "v", KILN_DTYPE_F32, 4, d, NULL));
    const char *in[3] = {"q", "k", "v"}, *out[1] = {"y"};
    if (kt) { /* K^T [.., D, S] as its own input (k then unused) */
        int64_t t[4] = {NB, ATTN_H, ATTN_D, ATTN_S};
        ASSERT_OK(kiln_network_add_input(net, "kt", KILN_DTYPE_F32, 4, t, NULL));
        in[1] = "kt";
    }
    kiln_layer *l = kiln_network_add_layer(net, "kiln::attention", 1, "attn", 3, in, 1, out);
    ASSERT(l);
    ASSERT_OK(kiln_layer_set_float(l, "scale", scale));
    ASSERT_OK(kiln_layer_set_int(l, "k_trans", kt));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING, 1, NULL);
    kiln_network_free(net);
    return e;
}

/* Fresh random q, k in [-2, 2], v in [-1, 1] (N each). */
static void fill_qkv(float *q, float *k, float *v, uint64_t seed) {
    for (int i = 0; i < N; i++) {
        q[i] = test_randf(&seed, -2, 2);
        k[i] = test_randf(&seed, -2, 2);
        v[i] = test_randf(&seed, -1, 1);
    }
}

TEST_IMPL(attention_cpu_reference) {
    static float q[N], k[N], v[N], kt[N], y[N];
    static double ref[N];
    fill_qkv(q, k, v, 404);
    for (int h = 0; h < HEADS; h++) /* K^T per head */
        for (int s = 0; s < ATTN_S; s++)
            for (int d = 0; d < ATTN_D; d++)
                kt[(h * ATTN_D + d) * ATTN_S + s] = k[(h * ATTN_S + s) * ATTN_D + d];
    attn_ref(q, k, v, HEADS, 0.3, ref);
    for (int trans = 0; trans < 2; trans++) {
        kiln_engine *e = attn_engine(trans, 0.3);
        kiln_context *c = NULL;
        ASSERT_OK(kiln_context_create(e, 1, &c));
        ASSERT_OK(kiln_context_bind(c, "q", q, sizeof q));
        ASSERT_OK(kiln_context_bind(c, "k", k, sizeof k));
        if (trans) ASSERT_OK(kiln_context_bind(c, "kt", kt, sizeof kt));
        ASSERT_OK(kiln_context_bind(c, "v", v, sizeof v));
        ASSERT_OK(kiln_context_bind(c, "y", y, sizeof y));
        memset(y, 0xFF, sizeof y);
        ASSERT_OK(kiln_context_run(c));
        test_check_close("attention", y, ref, N, 1e-5);
        kiln_context_free(c);
        kiln_engine_free(e);
    }
}

/* The views of a packed projection p [S, NB, 3E] (torch's layout; E = H D):
 * Q, K, V of batch b, head h at p[s, b, {0, E, 2E} + h D + d].  K's offset
 * `koff` in units of E (1; 3 reaches past p). */
static void packed_views(int64_t *vw, int koff) {
    const int64_t E = ATTN_H * ATTN_D;
    for (int o = 0; o < 3; o++) {
        int64_t w[14] = {2, (o == 1 ? koff : o) * E,   /* offset along axis 2 */
                         1, 1, 1,                      /* B: p's dim 1, stride of axis 1 */
                         -1 - ATTN_H, 2, ATTN_D,       /* H: constant, D elements apart */
                         0, 0, 1,                      /* S: p's dim 0, stride of axis 0 */
                         -1 - ATTN_D, 2, 1};           /* D: constant, contiguous */
        memcpy(vw + 14 * o, w, sizeof w);
    }
}

/* kiln::attention on views vw (42 ints) of input p [pd], output through
 * y_perm 2 0 1 3, with a mask input [md] where md is not NULL. */
static kiln_engine *views_engine_of(const int64_t *pd, const int64_t *vw, double scale, const int64_t *md,
                                    int threads) {
    static const int64_t perm[4] = {2, 0, 1, 3};
    kiln_network *net = kiln_network_create();
    ASSERT_OK(kiln_network_add_input(net, "p", KILN_DTYPE_F32, 3, pd, NULL));
    if (md) ASSERT_OK(kiln_network_add_input(net, "mask", KILN_DTYPE_F32, 4, md, NULL));
    const char *in[4] = {"p", "p", "p", "mask"}, *out[1] = {"y"};
    kiln_layer *l = kiln_network_add_layer(net, "kiln::attention", 1, "attn", md ? 4 : 3, in, 1, out);
    ASSERT(l);
    ASSERT_OK(kiln_layer_set_float(l, "scale", scale));
    ASSERT_OK(kiln_layer_set_ints(l, "views", vw, 42));
    ASSERT_OK(kiln_layer_set_ints(l, "y_perm", perm, 4));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING, threads, NULL);
    kiln_network_free(net);
    return e;
}

static kiln_engine *views_engine(int koff) {
    const int64_t d[3] = {ATTN_S, NB, 3 * ATTN_H * ATTN_D};
    int64_t vw[42];
    packed_views(vw, koff);
    return views_engine_of(d, vw, 0.3, NULL, 1);
}

/* Views: y [S, NB, H, D] against the naive reference on Q, K, V copied out
 * of p by hand; a view reaching past its input is an error naming it. */
TEST_IMPL(attention_views_cpu) {
    enum { E = ATTN_H * ATTN_D, P = ATTN_S * NB * 3 * E };
    static float p[P], q[N], k[N], v[N], y[N];
    static double ref[N];
    uint64_t seed = 505;
    for (int i = 0; i < P; i++) p[i] = test_randf(&seed, -2, 2);
    for (int b = 0; b < NB; b++)
        for (int h = 0; h < ATTN_H; h++)
            for (int s = 0; s < ATTN_S; s++)
                for (int d = 0; d < ATTN_D; d++) {
                    int dst = ((b * ATTN_H + h) * ATTN_S + s) * ATTN_D + d, src = (s * NB + b) * 3 * E + h * ATTN_D + d;
                    q[dst] = p[src];
                    k[dst] = p[src + E];
                    v[dst] = p[src + 2 * E];
                }
    attn_ref(q, k, v, HEADS, 0.3, ref);
    static double reft[N]; /* [NB, H, S, D] -> [S, NB, H, D] */
    for (int b = 0; b < NB; b++)
        for (int h = 0; h < ATTN_H; h++)
            for (int s = 0; s < ATTN_S; s++)
                for (int d = 0; d < ATTN_D; d++)
                    reft[((s * NB + b) * ATTN_H + h) * ATTN_D + d] = ref[((b * ATTN_H + h) * ATTN_S + s) * ATTN_D + d];
    for (int koff = 1; koff <= 3; koff += 2) {
        kiln_engine *e = views_engine(koff);
        kiln_context *c = NULL;
        ASSERT_OK(kiln_context_create(e, 1, &c));
        ASSERT_OK(kiln_context_bind(c, "p", p, sizeof p));
        ASSERT_OK(kiln_context_bind(c, "y", y, sizeof y));
        memset(y, 0xFF, sizeof y);
        int rc = kiln_context_run(c);
        if (koff == 1) {
            ASSERT_OK(rc);
            test_check_close("attention views", y, reft, N, 1e-5);
        } else {
            ASSERT_EQ(rc, KILN_ESHAPE);
            ASSERT(strstr(kiln_errmsg(), "K's view reaches element"));
        }
        kiln_context_free(c);
        kiln_engine_free(e);
    }
}

/* A mask of -inf on the odd keys and c on the even ones is attention over
 * the even keys alone (the softmax is shift-invariant): the reference takes
 * them out of K and V by hand. */
TEST_IMPL(attention_mask_cpu) {
    enum { HALF = ATTN_S / 2 };
    static float q[N], k[N], v[N], mask[ATTN_S], y[N], ke[N / 2], ve[N / 2];
    static double ref[N];
    fill_qkv(q, k, v, 606);
    for (int j = 0; j < ATTN_S; j++) mask[j] = j % 2 ? -INFINITY : 1.75f;
    for (int h = 0; h < HEADS; h++)
        for (int j = 0; j < HALF; j++)
            for (int d = 0; d < ATTN_D; d++) {
                ke[(h * HALF + j) * ATTN_D + d] = k[(h * ATTN_S + 2 * j) * ATTN_D + d];
                ve[(h * HALF + j) * ATTN_D + d] = v[(h * ATTN_S + 2 * j) * ATTN_D + d];
            }
    for (int h = 0; h < HEADS; h++) /* naive, double, over the HALF even keys */
        for (int i = 0; i < ATTN_S; i++) {
            double s[HALF], m = -INFINITY, sum = 0;
            for (int j = 0; j < HALF; j++) {
                s[j] = 0;
                for (int d = 0; d < ATTN_D; d++)
                    s[j] += (double)q[(h * ATTN_S + i) * ATTN_D + d] * ke[(h * HALF + j) * ATTN_D + d];
                s[j] *= 0.3;
                m = s[j] > m ? s[j] : m;
            }
            for (int j = 0; j < HALF; j++) sum += s[j] = exp(s[j] - m);
            for (int d = 0; d < ATTN_D; d++) {
                double a = 0;
                for (int j = 0; j < HALF; j++) a += s[j] * ve[(h * HALF + j) * ATTN_D + d];
                ref[(h * ATTN_S + i) * ATTN_D + d] = a / sum;
            }
        }
    kiln_network *net = kiln_network_create();
    int64_t d[4] = {NB, ATTN_H, ATTN_S, ATTN_D}, md[1] = {ATTN_S};
    const char *in[4] = {"q", "k", "v", "mask"}, *out[1] = {"y"};
    for (int i = 0; i < 4; i++) ASSERT_OK(kiln_network_add_input(net, in[i], KILN_DTYPE_F32, i == 3 ? 1 : 4, i == 3 ? md : d, NULL));
    kiln_layer *l = kiln_network_add_layer(net, "kiln::attention", 1, "attn", 4, in, 1, out);
    ASSERT(l);
    ASSERT_OK(kiln_layer_set_float(l, "scale", 0.3));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING, 1, NULL);
    kiln_network_free(net);
    kiln_context *c = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &c));
    float *data[4] = {q, k, v, mask};
    for (int i = 0; i < 4; i++) ASSERT_OK(kiln_context_bind(c, in[i], data[i], i == 3 ? sizeof mask : sizeof q));
    ASSERT_OK(kiln_context_bind(c, "y", y, sizeof y));
    memset(y, 0xFF, sizeof y);
    ASSERT_OK(kiln_context_run(c));
    test_check_close("attention mask", y, ref, N, 1e-5);
    kiln_context_free(c);
    kiln_engine_free(e);
}

/* The CPU kernel's tactics (1: 32-row score blocks, 2: 128, 3: the
 * register-tiled kernel of attention_avx512.c) at 1 and 2 threads, on odd sizes against a naive double reference: Q [B, H, Sq, D],
 * K^T [B, H, D, Sk] (k_trans 1), V [B, H, Sk, Dv] and a [B, 1, Sq, Sk]
 * mask (broadcast over the heads) of random values with -inf on some keys
 * and on every key of query row 3 (its output: zeros).  Sizes: several
 * row blocks with a partial last one; one head (fewer heads than threads:
 * row ranges of a head split over the threads); no keys (zeros). */
static void attn_odd_ref(const float *q, const float *kt, const float *v, const float *mask, int64_t bh, int64_t nh,
                         int64_t sq, int64_t sk, int64_t d, int64_t dv, double scale, double *y) {
    double *s = malloc((size_t)(sk ? sk : 1) * sizeof *s);
    for (int64_t g = 0; g < bh; g++)
        for (int64_t i = 0; i < sq; i++) {
            double m = -INFINITY, sum = 0;
            for (int64_t j = 0; j < sk; j++) {
                double a = 0;
                for (int64_t e = 0; e < d; e++) a += (double)q[(g * sq + i) * d + e] * kt[(g * d + e) * sk + j];
                s[j] = a * scale + mask[(g / nh * sq + i) * sk + j];
                m = s[j] > m ? s[j] : m;
            }
            for (int64_t j = 0; j < sk; j++) sum += s[j] = m == -INFINITY ? 0 : exp(s[j] - m);
            for (int64_t e = 0; e < dv; e++) {
                double a = 0;
                for (int64_t j = 0; j < sk; j++) a += s[j] * v[(g * sk + j) * dv + e];
                y[(g * sq + i) * dv + e] = sum > 0 ? a / sum : 0;
            }
        }
    free(s);
}

TEST_IMPL(attention_cpu_tactics) {
    static const int64_t sizes[][6] = {/* B, H, Sq, Sk, D, Dv */
                                       {2, 3, 150, 45, 40, 24}, {1, 1, 67, 130, 17, 33}, {2, 2, 9, 0, 8, 5}};
    for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) {
        const int64_t B = sizes[z][0], H = sizes[z][1], SQ = sizes[z][2], SK = sizes[z][3], D = sizes[z][4],
                      DV = sizes[z][5], nq = B * H * SQ * D, nk = B * H * D * SK, nv = B * H * SK * DV,
                      nm = B * SQ * SK, ny = B * H * SQ * DV;
        float *q = malloc((size_t)nq * 4), *kt = malloc((size_t)(nk ? nk : 1) * 4), *v = malloc((size_t)(nv ? nv : 1) * 4),
              *mask = malloc((size_t)(nm ? nm : 1) * 4), *y = malloc((size_t)ny * 4);
        double *ref = malloc((size_t)ny * sizeof *ref);
        uint64_t seed = 707 + z;
        for (int64_t i = 0; i < nq; i++) q[i] = test_randf(&seed, -2, 2);
        for (int64_t i = 0; i < nk; i++) kt[i] = test_randf(&seed, -2, 2);
        for (int64_t i = 0; i < nv; i++) v[i] = test_randf(&seed, -1, 1);
        for (int64_t i = 0; i < nm; i++) {
            int64_t row = i / SK % SQ, key = i % SK;
            mask[i] = row == 3 || key % 7 == 5 ? -INFINITY : test_randf(&seed, -3, 1);
        }
        attn_odd_ref(q, kt, v, mask, B * H, H, SQ, SK, D, DV, 0.37, ref);
        kiln_network *net = kiln_network_create();
        const int64_t dq[4] = {B, H, SQ, D}, dk[4] = {B, H, D, SK}, dvv[4] = {B, H, SK, DV}, dm[4] = {B, 1, SQ, SK};
        const int64_t *dims[4] = {dq, dk, dvv, dm};
        const char *in[4] = {"q", "kt", "v", "mask"}, *out[1] = {"y"};
        for (int i = 0; i < 4; i++) ASSERT_OK(kiln_network_add_input(net, in[i], KILN_DTYPE_F32, 4, dims[i], NULL));
        kiln_layer *l = kiln_network_add_layer(net, "kiln::attention", 1, "attn", 4, in, 1, out);
        ASSERT(l);
        ASSERT_OK(kiln_layer_set_float(l, "scale", 0.37));
        ASSERT_OK(kiln_layer_set_int(l, "k_trans", 1));
        ASSERT_OK(kiln_network_mark_output(net, "y"));
        kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING, 2, NULL);
        kiln_network_free(net);
        for (int tactic = 1; tactic <= 3; tactic++)
            for (int threads = 1; threads <= 2; threads++) {
                ASSERT_OK(test_force_tactic(e, 0, tactic));
                kiln_context *c = NULL;
                ASSERT_OK(kiln_context_create(e, threads, &c));
                float *data[4] = {q, kt, v, mask};
                const int64_t n[4] = {nq, nk, nv, nm};
                for (int i = 0; i < 4; i++) ASSERT_OK(kiln_context_bind(c, in[i], data[i], (size_t)n[i] * 4));
                ASSERT_OK(kiln_context_bind(c, "y", y, (size_t)ny * 4));
                memset(y, 0xFF, (size_t)ny * 4);
                ASSERT_OK(kiln_context_run(c));
                char what[96];
                snprintf(what, sizeof what, "attention %lldx%lldx%lld tactic %d threads %d", (long long)SQ,
                         (long long)SK, (long long)D, tactic, threads);
                test_check_close(what, y, ref, ny, 1e-5);
                kiln_context_free(c);
            }
        kiln_engine_free(e);
        free(q), free(kt), free(v), free(mask), free(y), free(ref);
    }
}

/* Every CPU tactic on views of a packed projection p [S, B, W] as the
 * builder makes them from torch's encoder (Q, K, V heads side by side;
 * output [S, B, H, Dv] through y_perm), at sizes that are not multiples of
 * tactic 3's 6-row x 16-column tiles (S 1, 7, 45, 77, 128, 200; head dims
 * 17, 32, 64, 80, Dv != D), K's dims contiguous (its 16 x 16 transposes)
 * or 2 apart (its gathers), with and without a [B, 1, S, S] mask (random,
 * -inf on some keys, every key of row 3: zeros), at 1 and 2 threads (one
 * head: its rows split over the threads), against a naive double
 * reference within 2e-6 (+ 1e-4 relative): tactic 3's exp2 polynomial
 * with its last coefficient 6% off fails it. */
static void attn_views_ref(const float *p, const float *mask, int64_t S, int64_t B, int64_t H, int64_t D, int64_t DV,
                           int64_t ksd, double scale, double *y) {
    const int64_t W = H * (D + D * ksd + DV), ko = H * D, vo = ko + H * D * ksd;
    double *s = malloc((size_t)S * sizeof *s);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < S; i++) {
                double m = -INFINITY, sum = 0;
                const float *qi = p + (i * B + b) * W + h * D;
                for (int64_t j = 0; j < S; j++) {
                    const float *kj = p + (j * B + b) * W + ko + h * D * ksd;
                    double a = 0;
                    for (int64_t e = 0; e < D; e++) a += (double)qi[e] * kj[e * ksd];
                    s[j] = a * scale + (mask ? mask[(b * S + i) * S + j] : 0.0);
                    m = s[j] > m ? s[j] : m;
                }
                for (int64_t j = 0; j < S; j++) sum += s[j] = m == -INFINITY ? 0 : exp(s[j] - m);
                for (int64_t e = 0; e < DV; e++) {
                    double a = 0;
                    for (int64_t j = 0; j < S; j++) a += s[j] * p[(j * B + b) * W + vo + h * DV + e];
                    y[((i * B + b) * H + h) * DV + e] = sum > 0 ? a / sum : 0;
                }
            }
    free(s);
}

TEST_IMPL(attention_tiles_views_cpu) {
    static const int64_t sizes[][7] = {/* S, B, H, D, Dv, K's dim stride, mask */
                                       {1, 1, 2, 32, 32, 1, 0},   {7, 2, 3, 64, 64, 1, 1},  {77, 1, 2, 80, 80, 1, 0},
                                       {128, 1, 3, 64, 64, 1, 1}, {200, 1, 1, 32, 80, 2, 1}, {45, 2, 2, 17, 33, 2, 0}};
    for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) {
        const int64_t S = sizes[z][0], B = sizes[z][1], H = sizes[z][2], D = sizes[z][3], DV = sizes[z][4],
                      ksd = sizes[z][5], W = H * (D + D * ksd + DV), np = S * B * W, ny = S * B * H * DV,
                      nm = B * S * S;
        float *p = malloc((size_t)np * 4), *mask = sizes[z][6] ? malloc((size_t)nm * 4) : NULL,
              *y = malloc((size_t)ny * 4);
        double *ref = malloc((size_t)ny * sizeof *ref);
        uint64_t seed = 808 + z;
        for (int64_t i = 0; i < np; i++) p[i] = test_randf(&seed, -2, 2);
        for (int64_t i = 0; mask && i < nm; i++)
            mask[i] = (i / S % S == 3 && S > 3) || i % S % 5 == 2 ? -INFINITY : test_randf(&seed, -3, 1);
        attn_views_ref(p, mask, S, B, H, D, DV, ksd, 0.29, ref);
        const int64_t off[3] = {0, H * D, H * D * (1 + ksd)}, hs[3] = {D, D * ksd, DV}, ds[3] = {1, ksd, 1},
                      dd[3] = {D, D, DV}, pd[3] = {S, B, W}, md[4] = {B, 1, S, S};
        int64_t vw[42];
        for (int o = 0; o < 3; o++) {
            const int64_t w[14] = {2, off[o], 1, 1, 1, -1 - H, 2, hs[o], 0, 0, 1, -1 - dd[o], 2, ds[o]};
            memcpy(vw + 14 * o, w, sizeof w);
        }
        kiln_engine *e = views_engine_of(pd, vw, 0.29, mask ? md : NULL, 2);
        const int at = test_last_op(e, "attention");
        ASSERT(at >= 0);
        for (int tactic = 1; tactic <= 3; tactic++)
            for (int threads = 1; threads <= 2; threads++) {
                ASSERT_OK(test_force_tactic(e, at, tactic));
                kiln_context *c = NULL;
                ASSERT_OK(kiln_context_create(e, threads, &c));
                ASSERT_OK(kiln_context_bind(c, "p", p, (size_t)np * 4));
                if (mask) ASSERT_OK(kiln_context_bind(c, "mask", mask, (size_t)nm * 4));
                ASSERT_OK(kiln_context_bind(c, "y", y, (size_t)ny * 4));
                memset(y, 0xFF, (size_t)ny * 4);
                ASSERT_OK(kiln_context_run(c));
                char what[128];
                snprintf(what, sizeof what, "attention views S %lld, %lld x %lld heads of %lld/%lld%s tactic %d threads %d",
                         (long long)S, (long long)B, (long long)H, (long long)D, (long long)DV, mask ? " masked" : "",
                         tactic, threads);
                test_check_close(what, y, ref, ny, 2e-6);
                kiln_context_free(c);
            }
        kiln_engine_free(e);
        free(p), free(mask), free(y), free(ref);
    }
}

/* The builder's rewrites on a CPU build of tests/fixtures/mha_encoder.onnx
 * (torch's export, 2 layers, 4 heads of 8): two kiln::attention layers
 * reading the packed projection through views and four
 * kiln::add_layernorm, against the same file built without fusion (the
 * ONNX ops one by one), at batches 1, 3, 8 and 1 and 2 threads. */
TEST_IMPL(encoder_rewrites_cpu) {
    enum { NMAX = 8 * MHA_S * MHA_E };
    static float x[NMAX], ref[NMAX], y[NMAX];
    kiln_engine *plain = mha_engine(KILN_DEVICE_CPU, KILN_BUILD_NO_FUSION), *e = mha_engine(KILN_DEVICE_CPU, 0);
    int views = 0, addnorm = 0;
    for (int32_t l = 0; l < e->nlayers; l++) {
        kiln_attrs a = kiln__attrset_view(&e->layers[l].attrs);
        views += !strcmp(e->layers[l].op_name, "attention") && kiln_attrs_ints(&a, "views", NULL) > 0;
        addnorm += !strcmp(e->layers[l].op_name, "add_layernorm");
    }
    ASSERT_EQ(views, 2);
    ASSERT_EQ(addnorm, 4);
    const int64_t nbs[3] = {1, 3, 8};
    for (int bi = 0; bi < 3; bi++)
        for (int threads = 1; threads <= 2; threads++) {
            int64_t n = nbs[bi] * MHA_S * MHA_E;
            uint64_t seed = 900 + 7 * (uint64_t)bi + (uint64_t)threads;
            for (int64_t i = 0; i < n; i++) x[i] = test_randf(&seed, -2, 2);
            mha_run(plain, x, nbs[bi], ref, threads);
            mha_run(e, x, nbs[bi], y, threads);
            double worst = test_worst_rel(y, ref, n, 0);
            if (!(worst <= 1e-5)) TEST__FAIL("batch %lld threads %d: max |y - ref| / (1 + |ref|) = %.3g",
                                             (long long)nbs[bi], threads, worst);
        }
    kiln_engine_free(e);
    kiln_engine_free(plain);
}

/* Gelu (exact, F32: the AVX-512 rational-erf kernel and its scalar tail)
 * on 3 x 1001 values in [-7, 7] (past erf's clamp at |x| / sqrt 2 = 4) at
 * 1 and 2 threads, against 0.5 x (1 + erf(x / sqrt 2)) in double. */
TEST_IMPL(gelu_f32_reference) {
    enum { GN = 3 * 1001 };
    static float x[GN], y[GN];
    static double ref[GN];
    uint64_t seed = 808;
    for (int i = 0; i < GN; i++) {
        x[i] = test_randf(&seed, -7, 7);
        ref[i] = 0.5 * x[i] * (1 + erf(x[i] / sqrt(2.0)));
    }
    for (int threads = 1; threads <= 2; threads++) {
        const test_net_opts o = {.threads = threads};
        tio in = {.name = "x", .t = KILN_DTYPE_F32, .nd = 2, .dims = {3, 1001}, .data = x};
        tio out = {.name = "y", .t = KILN_DTYPE_F32, .nd = 2, .dims = {3, 1001}, .data = y};
        ASSERT_OK(test_net_try(&o, "ai.onnx::Gelu", 20, 1, &in, 1, &out, NULL, NULL));
        test_check_close("gelu", y, ref, GN, 2e-6);
    }
}

TEST_IMPL(attention_shape_errors) {
    kiln_network *net = kiln_network_create();
    int64_t q[3] = {2, 5, 8}, k[3] = {2, 7, 9}, v[3] = {2, 7, 4};
    ASSERT_OK(kiln_network_add_input(net, "q", KILN_DTYPE_F32, 3, q, NULL));
    ASSERT_OK(kiln_network_add_input(net, "k", KILN_DTYPE_F32, 3, k, NULL));
    ASSERT_OK(kiln_network_add_input(net, "v", KILN_DTYPE_F32, 3, v, NULL));
    const char *in[3] = {"q", "k", "v"}, *out[1] = {"y"};
    ASSERT(kiln_network_add_layer(net, "kiln::attention", 1, "attn", 3, in, 1, out));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_engine *e = NULL;
    ASSERT(test_build_net(net, KILN_BUILD_NO_TIMING, 1, &e, NULL) != 0); /* K's D 9 vs Q's 8 */
    ASSERT_CONTAINS(kiln_errmsg(), "K's dims do not match");
    kiln_network_free(net);
    /* a mask that does not broadcast to the scores [2, 5, 7] */
    net = kiln_network_create();
    int64_t k2[3] = {2, 7, 8}, m[2] = {5, 6};
    ASSERT_OK(kiln_network_add_input(net, "q", KILN_DTYPE_F32, 3, q, NULL));
    ASSERT_OK(kiln_network_add_input(net, "k", KILN_DTYPE_F32, 3, k2, NULL));
    ASSERT_OK(kiln_network_add_input(net, "v", KILN_DTYPE_F32, 3, v, NULL));
    ASSERT_OK(kiln_network_add_input(net, "mask", KILN_DTYPE_F32, 2, m, NULL));
    const char *in4[4] = {"q", "k", "v", "mask"};
    ASSERT(kiln_network_add_layer(net, "kiln::attention", 1, "attn", 4, in4, 1, out));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    ASSERT(test_build_net(net, KILN_BUILD_NO_TIMING, 1, &e, NULL) != 0);
    ASSERT_CONTAINS(kiln_errmsg(), "mask dim 1 neither 1 nor the scores' dim 2");
    kiln_network_free(net);
}

/* Rows [2, R/2, C] at 1 and 2 threads: a few rows of 40, and many rows of
 * an odd 37 (a tail past the 16-float lanes; rows split over threads). */
static void add_layernorm_case(int64_t R, int64_t C, int threads, uint64_t seed) {
    float *a = malloc((size_t)(R * C) * 4), *b = malloc((size_t)(R * C) * 4), *s = malloc((size_t)C * 4),
          *bias = malloc((size_t)C * 4), *y = malloc((size_t)(R * C) * 4);
    double *ref = malloc((size_t)(R * C) * sizeof *ref);
    for (int64_t i = 0; i < R * C; i++) a[i] = test_randf(&seed, -3, 3), b[i] = test_randf(&seed, -1, 1) + 5;
    for (int64_t i = 0; i < C; i++) s[i] = test_randf(&seed, 0.5f, 2), bias[i] = test_randf(&seed, -1, 1);
    for (int64_t r = 0; r < R; r++) {
        double m = 0, var = 0;
        for (int64_t i = 0; i < C; i++) m += (double)a[r * C + i] + b[r * C + i];
        m /= (double)C;
        for (int64_t i = 0; i < C; i++) {
            double d = (double)a[r * C + i] + b[r * C + i] - m;
            var += d * d;
        }
        double rs = 1 / sqrt(var / (double)C + 1e-3);
        for (int64_t i = 0; i < C; i++) ref[r * C + i] = ((double)a[r * C + i] + b[r * C + i] - m) * rs * s[i] + bias[i];
    }
    kiln_network *net = kiln_network_create();
    int64_t d[3] = {2, R / 2, C}, cd[1] = {C};
    ASSERT_OK(kiln_network_add_input(net, "a", KILN_DTYPE_F32, 3, d, NULL));
    ASSERT_OK(kiln_network_add_input(net, "b", KILN_DTYPE_F32, 3, d, NULL));
    ASSERT_OK(kiln_network_add_constant(net, "s", KILN_DTYPE_F32, 1, cd, s));
    ASSERT_OK(kiln_network_add_constant(net, "bias", KILN_DTYPE_F32, 1, cd, bias));
    const char *in[4] = {"a", "b", "s", "bias"}, *out[1] = {"y"};
    kiln_layer *l = kiln_network_add_layer(net, "kiln::add_layernorm", 1, "an", 4, in, 1, out);
    ASSERT(l);
    ASSERT_OK(kiln_layer_set_float(l, "epsilon", 1e-3));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING, threads, NULL);
    kiln_network_free(net);
    kiln_context *c = NULL;
    ASSERT_OK(kiln_context_create(e, threads, &c));
    ASSERT_OK(kiln_context_bind(c, "a", a, (size_t)(R * C) * 4));
    ASSERT_OK(kiln_context_bind(c, "b", b, (size_t)(R * C) * 4));
    ASSERT_OK(kiln_context_bind(c, "y", y, (size_t)(R * C) * 4));
    memset(y, 0xFF, (size_t)(R * C) * 4);
    ASSERT_OK(kiln_context_run(c));
    test_check_close("add_layernorm", y, ref, R * C, 1e-5);
    kiln_context_free(c);
    kiln_engine_free(e);
    free(a), free(b), free(s), free(bias), free(y), free(ref);
}

TEST_IMPL(add_layernorm_cpu_reference) {
    add_layernorm_case(6, 40, 1, 505);
    add_layernorm_case(6, 40, 2, 506);
    add_layernorm_case(300, 37, 1, 507);
    add_layernorm_case(300, 37, 2, 508);
}

TEST_LIST(TEST_ENTRY(attention_cpu_reference), TEST_ENTRY(attention_views_cpu), TEST_ENTRY(attention_mask_cpu), TEST_ENTRY(attention_cpu_tactics), TEST_ENTRY(attention_tiles_views_cpu), TEST_ENTRY(encoder_rewrites_cpu), TEST_ENTRY(gelu_f32_reference), TEST_ENTRY(attention_shape_errors), TEST_ENTRY(add_layernorm_cpu_reference))
