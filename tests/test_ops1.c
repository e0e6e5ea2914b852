/*
 * test_ops1.c — the ops1 built-in ONNX operators (elementwise, activation,
 * reduce, tensor, index) against naive reference code, test-backend-ops
 * style: each case builds a one-layer network through the public API,
 * feeds fresh random inputs, poisons the output buffer, runs in debug mode
 * (every element must be written) and compares with a reference computed
 * here, independently of the kernels.
 */
#include "kiln/kiln.h"
#include "test.h"
#include "test_ops_util.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

static uint64_t g_seed = 0x1234567887654321ull;

/* The attributes of ops1 layers need no user data: attr_fn's ud carries
 * the function itself. */
typedef void (*attr1_fn)(kiln_layer *l);
typedef struct attr1 {
    attr1_fn fn;
} attr1;
static void attr1_call(kiln_layer *l, const void *ud) { ((const attr1 *)ud)->fn(l); }

/* Build (no timing, `threads` threads) + run a one-layer network; outputs
 * are checked for shape and returned in out[i].data (caller-allocated,
 * poisoned by the harness).  Returns 0 or the first error. */
static int run1(const char *op, int ver, int nin, const tio *in, int nout, tio *out, attr1_fn attrs,
                int threads) {
    test_net_opts o = {KILN_BUILD_NO_TIMING, threads, 0};
    attr1 a = {attrs};
    return test_net_try(&o, op, ver, nin, in, nout, out, attrs ? attr1_call : NULL, &a);
}

static void fill_f32(float *p, int64_t n, float lo, float hi) { test_fill_f32(&g_seed, p, n, lo, hi); }
static void fill_i32(int32_t *p, int64_t n, int lo, int hi) { /* [lo, hi) */
    for (int64_t i = 0; i < n; i++) p[i] = (int32_t)test_rnd_int(&g_seed, lo, hi - 1);
}

/* Offset of output index o (dims od, rank on) in an operand broadcast to it. */
static int64_t bc_off(int64_t o, int on, const int64_t *od, int nd, const int64_t *d) {
    int64_t off = 0, s = 1;
    for (int i = on - 1; i >= 0; i--) {
        int64_t ix = o % od[i];
        o /= od[i];
        int j = i - (on - nd);
        if (j < 0) continue;
        off += (d[j] == 1 ? 0 : ix) * s;
        s *= d[j];
    }
    return off;
}

/* ---- elementwise ---------------------------------------------------------- */

TEST_IMPL(add_broadcast) {
    tio a = {"a", KILN_DTYPE_F32, 4, {2, 3, 4, 5}}, b = {"b", KILN_DTYPE_F32, 3, {3, 1, 5}};
    float A[120], B[15], Y[120];
    fill_f32(A, 120, -2, 2);
    fill_f32(B, 15, -2, 2);
    a.data = A;
    b.data = B;
    tio in[2] = {a, b}, out = {"y", KILN_DTYPE_F32, 4, {2, 3, 4, 5}, Y};
    ASSERT_OK(run1("ai.onnx::Add", 7, 2, in, 1, &out, NULL, 1));
    for (int64_t o = 0; o < 120; o++)
        ASSERT_NEAR(Y[o], A[o] + B[bc_off(o, 4, out.dims, 3, b.dims)], 1e-6);
}

TEST_IMPL(mul_large_threaded) {
    /* big enough for the threaded path; channel broadcast [C, 1] */
    enum { R = 64, C = 2048 };
    float *A = malloc(sizeof(float) * R * C), *B = malloc(sizeof(float) * R), *Y = malloc(sizeof(float) * R * C);
    fill_f32(A, R * C, -3, 3);
    fill_f32(B, R, -3, 3);
    tio in[2] = {{"a", KILN_DTYPE_F32, 2, {R, C}, A}, {"b", KILN_DTYPE_F32, 2, {R, 1}, B}};
    tio out = {"y", KILN_DTYPE_F32, 2, {R, C}, Y};
    ASSERT_OK(run1("ai.onnx::Mul", 7, 2, in, 1, &out, NULL, 2));
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) ASSERT_NEAR(Y[r * C + c], A[r * C + c] * B[r], 1e-6);
    free(A), free(B), free(Y);
}

/* Images of planes of >= 4096 elements at 1-3 threads: each plane split
 * between the threads (kiln__ops_par_planes), shares that end inside a
 * row of 71: a gate per channel, a plane per image, a value per row (runs
 * of 71 across the shares' ends), two images of the same shape, and a
 * unary op. */
TEST_IMPL(image_planes_threaded) {
    enum { N = 2, C = 6, H = 67, W = 71, T = N * C * H * W };
    static const int64_t yd[4] = {N, C, H, W};
    static const int64_t bds[4][4] = {{1, C, 1, 1}, {1, 1, H, W}, {1, C, H, 1}, {N, C, H, W}};
    float *A = malloc(sizeof(float) * T), *B = malloc(sizeof(float) * T), *Y = malloc(sizeof(float) * T);
    ASSERT(A && B && Y);
    fill_f32(A, T, -3, 3);
    fill_f32(B, T, -3, 3);
    for (int threads = 1; threads <= 3; threads++) {
        for (int k = 0; k < 4; k++) {
            tio in[2] = {{"a", KILN_DTYPE_F32, 4, {N, C, H, W}, A}, {"b", KILN_DTYPE_F32, 4, {0}, B}};
            memcpy(in[1].dims, bds[k], sizeof bds[k]);
            tio out = {"y", KILN_DTYPE_F32, 4, {N, C, H, W}, Y};
            ASSERT_OK(run1(k == 3 ? "ai.onnx::Add" : "ai.onnx::Mul", 7, 2, in, 1, &out, NULL, threads));
            for (int64_t o = 0; o < T; o++) {
                const float b = B[bc_off(o, 4, yd, 4, bds[k])], want = k == 3 ? A[o] + b : A[o] * b;
                if (!(fabsf(Y[o] - want) <= 1e-6f * (1 + fabsf(want))))
                    TEST__FAIL("%d threads, operand %d: element %lld is %g, expected %g", threads, k, (long long)o,
                               Y[o], want);
            }
        }
        tio in = {"x", KILN_DTYPE_F32, 4, {N, C, H, W}, A}, out = {"y", KILN_DTYPE_F32, 4, {N, C, H, W}, Y};
        ASSERT_OK(run1("ai.onnx::Sigmoid", 6, 1, &in, 1, &out, NULL, threads));
        for (int64_t o = 0; o < T; o++) ASSERT_NEAR(Y[o], 1.0 / (1.0 + exp(-(double)A[o])), 1e-6);
    }
    free(A), free(B), free(Y);
}

TEST_IMPL(div_int_and_compare) {
    int32_t A[24], B[24], Y[24];
    fill_i32(A, 24, -50, 50);
    fill_i32(B, 24, -7, 8);
    B[3] = 0; /* division by zero must not trap: defined as 0 */
    tio in[2] = {{"a", KILN_DTYPE_I32, 2, {4, 6}, A}, {"b", KILN_DTYPE_I32, 2, {4, 6}, B}};
    tio out = {"y", KILN_DTYPE_I32, 2, {4, 6}, Y};
    ASSERT_OK(run1("ai.onnx::Div", 7, 2, in, 1, &out, NULL, 1));
    for (int i = 0; i < 24; i++) ASSERT_EQ(Y[i], B[i] ? A[i] / B[i] : 0);

    float F[24], G[6];
    uint8_t L[24];
    fill_f32(F, 24, -1, 1);
    fill_f32(G, 6, -1, 1);
    tio in2[2] = {{"a", KILN_DTYPE_F32, 2, {4, 6}, F}, {"b", KILN_DTYPE_F32, 1, {6}, G}};
    tio out2 = {"y", KILN_DTYPE_BOOL, 2, {4, 6}, L};
    ASSERT_OK(run1("ai.onnx::Less", 7, 2, in2, 1, &out2, NULL, 1));
    for (int i = 0; i < 24; i++) ASSERT_EQ(L[i], F[i] < G[i % 6]);
}

/* Pow: by 2 (any exponent type, an exponent of higher rank) bit for bit
 * what pow() gives; another exponent still pow(). */
TEST_IMPL(pow_square_and_general) {
    enum { N = 105 };
    float A[N], Y[4 * N];
    fill_f32(A, N, -3, 3);
    A[0] = 0.0f, A[1] = -0.0f, A[2] = 1e-30f, A[3] = 3e30f; /* signed zero, underflow, overflow */
    const float two = 2.0f, e25 = 2.5f;
    const int64_t two_i = 2;
    struct {
        kiln_dtype t;
        int nd;
        const void *b;
        double e;
    } cases[] = {{KILN_DTYPE_F32, 0, &two, 2}, {KILN_DTYPE_I64, 0, &two_i, 2}, {KILN_DTYPE_F32, 4, &two, 2},
                 {KILN_DTYPE_F32, 0, &e25, 2.5}};
    for (int k = 0; k < 4; k++) {
        tio in[2] = {{"a", KILN_DTYPE_F32, 3, {3, 5, 7}, A}, {"b", cases[k].t, cases[k].nd, {1, 1, 1, 1}, (void *)cases[k].b}};
        tio out = {"y", KILN_DTYPE_F32, cases[k].nd == 4 ? 4 : 3, {3, 5, 7}, Y};
        if (cases[k].nd == 4) {
            out.dims[0] = 1, out.dims[1] = 3, out.dims[2] = 5, out.dims[3] = 7;
        }
        ASSERT_OK(run1("ai.onnx::Pow", 15, 2, in, 1, &out, NULL, 1));
        for (int i = 0; i < N; i++) {
            float want = (float)pow((double)A[i], cases[k].e);
            if (memcmp(&Y[i], &want, 4) && !(isnan(want) && isnan(Y[i])))
                TEST__FAIL("case %d: %g ^ %g = %.9g, pow() gives %.9g", k, A[i], cases[k].e, Y[i], want);
        }
    }
}

TEST_IMPL(where_and_sum_variadic) {
    uint8_t C[12];
    float X[12], Y[4], Z[12], S[12];
    for (int i = 0; i < 12; i++) C[i] = test_rand_u64(&g_seed) & 1;
    fill_f32(X, 12, -1, 1);
    fill_f32(Y, 4, -1, 1);
    tio in[3] = {{"c", KILN_DTYPE_BOOL, 2, {3, 4}, C}, {"x", KILN_DTYPE_F32, 2, {3, 4}, X},
                 {"y", KILN_DTYPE_F32, 1, {4}, Y}};
    tio out = {"z", KILN_DTYPE_F32, 2, {3, 4}, Z};
    ASSERT_OK(run1("ai.onnx::Where", 9, 3, in, 1, &out, NULL, 1));
    for (int i = 0; i < 12; i++) ASSERT_EQ(Z[i] == (C[i] ? X[i] : Y[i % 4]), 1);

    tio in3[3] = {{"a", KILN_DTYPE_F32, 2, {3, 4}, X}, {"b", KILN_DTYPE_F32, 1, {4}, Y},
                  {"c", KILN_DTYPE_F32, 2, {3, 4}, Z}};
    tio out3 = {"s", KILN_DTYPE_F32, 2, {3, 4}, S};
    ASSERT_OK(run1("ai.onnx::Sum", 8, 3, in3, 1, &out3, NULL, 1));
    for (int i = 0; i < 12; i++) ASSERT_NEAR(S[i], X[i] + Y[i % 4] + Z[i], 1e-6);
}

static void leaky_attrs(kiln_layer *l) { ASSERT_OK(kiln_layer_set_float(l, "alpha", 0.25)); }

TEST_IMPL(unary_float_and_f16) {
    enum { N = 1000 };
    float X[N], Y[N];
    fill_f32(X, N, -6, 6);
    tio in = {"x", KILN_DTYPE_F32, 1, {N}, X}, out = {"y", KILN_DTYPE_F32, 1, {N}, Y};
    ASSERT_OK(run1("ai.onnx::Sigmoid", 6, 1, &in, 1, &out, NULL, 1));
    for (int i = 0; i < N; i++) ASSERT_NEAR(Y[i], 1.0 / (1.0 + exp(-(double)X[i])), 1e-6);
    ASSERT_OK(run1("ai.onnx::LeakyRelu", 6, 1, &in, 1, &out, leaky_attrs, 1));
    for (int i = 0; i < N; i++) ASSERT_NEAR(Y[i], X[i] >= 0 ? X[i] : 0.25 * X[i], 1e-6);

    uint16_t H[N], HY[N];
    for (int i = 0; i < N; i++) H[i] = kiln_f32_to_f16(X[i]);
    tio hin = {"x", KILN_DTYPE_F16, 1, {N}, H}, hout = {"y", KILN_DTYPE_F16, 1, {N}, HY};
    ASSERT_OK(run1("ai.onnx::Tanh", 6, 1, &hin, 1, &hout, NULL, 1));
    for (int i = 0; i < N; i++)
        ASSERT_NEAR(kiln_f16_to_f32(HY[i]), tanh(kiln_f16_to_f32(H[i])), 1e-3);
}

/* ---- reduce ----------------------------------------------------------------- */

static void red_axes1(kiln_layer *l) {
    int64_t ax[1] = {1};
    ASSERT_OK(kiln_layer_set_ints(l, "axes", ax, 1));
    ASSERT_OK(kiln_layer_set_int(l, "keepdims", 0));
}

TEST_IMPL(reduce_sum_max_mean) {
    enum { A = 3, B = 4, C = 5 };
    float X[A * B * C], Y[A * C], M[B];
    fill_f32(X, A * B * C, -5, 5);
    tio in = {"x", KILN_DTYPE_F32, 3, {A, B, C}, X};
    tio out = {"y", KILN_DTYPE_F32, 2, {A, C}, Y};
    ASSERT_OK(run1("ai.onnx::ReduceSum", 1, 1, &in, 1, &out, red_axes1, 1));
    for (int a = 0; a < A; a++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int b = 0; b < B; b++) s += X[(a * B + b) * C + c];
            ASSERT_NEAR(Y[a * C + c], s, 1e-4);
        }
    /* ReduceMax-18 with axes [0, 2] as a constant input, keepdims = 1 */
    int64_t axes[2] = {0, -1};
    tio in2[2] = {in, {"axes", KILN_DTYPE_I64, 1, {2}, axes, 1}};
    tio out2 = {"m", KILN_DTYPE_F32, 3, {1, B, 1}, M};
    ASSERT_OK(run1("ai.onnx::ReduceMax", 18, 2, in2, 1, &out2, NULL, 1));
    for (int b = 0; b < B; b++) {
        float m = -INFINITY;
        for (int a = 0; a < A; a++)
            for (int c = 0; c < C; c++) m = fmaxf(m, X[(a * B + b) * C + c]);
        ASSERT_EQ(M[b] == m, 1);
    }
    /* ReduceMean-18 without axes: everything */
    float Mean[1];
    tio out3 = {"mean", KILN_DTYPE_F32, 3, {1, 1, 1}, Mean};
    ASSERT_OK(run1("ai.onnx::ReduceMean", 18, 1, &in, 1, &out3, NULL, 1));
    double s = 0;
    for (int i = 0; i < A * B * C; i++) s += X[i];
    ASSERT_NEAR(Mean[0], s / (A * B * C), 1e-5);
}

static void argmax_attrs(kiln_layer *l) {
    ASSERT_OK(kiln_layer_set_int(l, "axis", 1));
    ASSERT_OK(kiln_layer_set_int(l, "keepdims", 0));
}

TEST_IMPL(argmax) {
    float X[4 * 7];
    int64_t Y[4];
    fill_f32(X, 28, -1, 1);
    tio in = {"x", KILN_DTYPE_F32, 2, {4, 7}, X}, out = {"y", KILN_DTYPE_I64, 1, {4}, Y};
    ASSERT_OK(run1("ai.onnx::ArgMax", 1, 1, &in, 1, &out, argmax_attrs, 1));
    for (int r = 0; r < 4; r++) {
        int best = 0;
        for (int c = 1; c < 7; c++)
            if (X[r * 7 + c] > X[r * 7 + best]) best = c;
        ASSERT_EQ(Y[r], best);
    }
}

/* ---- tensor ------------------------------------------------------------------- */

static void perm_attrs(kiln_layer *l) {
    int64_t p[3] = {2, 0, 1};
    ASSERT_OK(kiln_layer_set_ints(l, "perm", p, 3));
}

TEST_IMPL(transpose) {
    enum { A = 3, B = 40, C = 700 }; /* large enough to split over threads */
    float *X = malloc(sizeof(float) * A * B * C), *Y = malloc(sizeof(float) * A * B * C);
    fill_f32(X, A * B * C, -1, 1);
    tio in = {"x", KILN_DTYPE_F32, 3, {A, B, C}, X}, out = {"y", KILN_DTYPE_F32, 3, {C, A, B}, Y};
    ASSERT_OK(run1("ai.onnx::Transpose", 1, 1, &in, 1, &out, perm_attrs, 2));
    for (int c = 0; c < C; c++)
        for (int a = 0; a < A; a++)
            for (int b = 0; b < B; b++) ASSERT_EQ(Y[(c * A + a) * B + b] == X[(a * B + b) * C + c], 1);
    free(X), free(Y);
    /* 2-D with ragged tiles (37 = 16 + 16 + 5 rows, 29 = 3 * 8 + 5 columns) */
    {
        static float P[37 * 29], Q[37 * 29];
        fill_f32(P, 37 * 29, -1, 1);
        tio pin = {"x", KILN_DTYPE_F32, 2, {37, 29}, P}, pout = {"y", KILN_DTYPE_F32, 2, {29, 37}, Q};
        ASSERT_OK(run1("ai.onnx::Transpose", 1, 1, &pin, 1, &pout, NULL, 1));
        for (int r = 0; r < 29; r++)
            for (int c = 0; c < 37; c++) ASSERT_EQ(Q[r * 37 + c] == P[c * 29 + r], 1);
    }
    /* one-byte elements */
    uint8_t U[24], V[24];
    for (int i = 0; i < 24; i++) U[i] = (uint8_t)test_rand_u64(&g_seed);
    tio uin = {"x", KILN_DTYPE_U8, 3, {2, 3, 4}, U}, uout = {"y", KILN_DTYPE_U8, 3, {4, 2, 3}, V};
    ASSERT_OK(run1("ai.onnx::Transpose", 1, 1, &uin, 1, &uout, perm_attrs, 1));
    for (int c = 0; c < 4; c++)
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 3; b++) ASSERT_EQ(V[(c * 2 + a) * 3 + b], U[(a * 3 + b) * 4 + c]);
}

TEST_IMPL(slice_negative_steps) {
    enum { R = 7, C = 9 };
    float X[R * C], Y[R * C];
    fill_f32(X, R * C, -1, 1);
    int64_t st[2] = {-1, 1}, en[2] = {0, 100}, ax[2] = {0, 1}, sp[2] = {-2, 3};
    tio in[5] = {{"x", KILN_DTYPE_F32, 2, {R, C}, X},
                 {"s", KILN_DTYPE_I64, 1, {2}, st, 1},
                 {"e", KILN_DTYPE_I64, 1, {2}, en, 1},
                 {"a", KILN_DTYPE_I64, 1, {2}, ax, 1},
                 {"p", KILN_DTYPE_I64, 1, {2}, sp, 1}};
    /* rows 6, 4, 2 (end 0 exclusive); cols 1, 4, 7 */
    tio out = {"y", KILN_DTYPE_F32, 2, {3, 3}, Y};
    ASSERT_OK(run1("ai.onnx::Slice", 10, 5, in, 1, &out, NULL, 1));
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) ASSERT_EQ(Y[i * 3 + j] == X[(6 - 2 * i) * C + 1 + 3 * j], 1);
}

static void axis1(kiln_layer *l) { ASSERT_OK(kiln_layer_set_int(l, "axis", 1)); }

TEST_IMPL(gather_negative_indices) {
    float X[3 * 5 * 2], Y[3 * 4 * 2];
    fill_f32(X, 30, -1, 1);
    int64_t I[4] = {0, -1, 2, -5};
    tio in[2] = {{"x", KILN_DTYPE_F32, 3, {3, 5, 2}, X}, {"i", KILN_DTYPE_I64, 1, {4}, I}};
    tio out = {"y", KILN_DTYPE_F32, 3, {3, 4, 2}, Y};
    ASSERT_OK(run1("ai.onnx::Gather", 1, 2, in, 1, &out, axis1, 1));
    for (int a = 0; a < 3; a++)
        for (int k = 0; k < 4; k++)
            for (int c = 0; c < 2; c++) {
                int64_t j = I[k] < 0 ? I[k] + 5 : I[k];
                ASSERT_EQ(Y[(a * 4 + k) * 2 + c] == X[(a * 5 + j) * 2 + c], 1);
            }
    /* an index out of range is a run-time error naming the op, not a crash */
    I[2] = 5;
    ASSERT_EQ(run1("ai.onnx::Gather", 1, 2, in, 1, &out, axis1, 1), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "out of range");
}

TEST_IMPL(concat_three) {
    float A[2 * 1 * 3], B[2 * 4 * 3], C[2 * 2 * 3], Y[2 * 7 * 3];
    fill_f32(A, 6, -1, 1);
    fill_f32(B, 24, -1, 1);
    fill_f32(C, 12, -1, 1);
    tio in[3] = {{"a", KILN_DTYPE_F32, 3, {2, 1, 3}, A}, {"b", KILN_DTYPE_F32, 3, {2, 4, 3}, B},
                 {"c", KILN_DTYPE_F32, 3, {2, 2, 3}, C}};
    tio out = {"y", KILN_DTYPE_F32, 3, {2, 7, 3}, Y};
    ASSERT_OK(run1("ai.onnx::Concat", 4, 3, in, 1, &out, axis1, 1));
    for (int n = 0; n < 2; n++)
        for (int r = 0; r < 7; r++)
            for (int k = 0; k < 3; k++) {
                float ref = r < 1 ? A[(n * 1 + r) * 3 + k] : r < 5 ? B[(n * 4 + r - 1) * 3 + k]
                                                                    : C[(n * 2 + r - 5) * 3 + k];
                ASSERT_EQ(Y[(n * 7 + r) * 3 + k] == ref, 1);
            }
}

/* Concat copies in slices over the threads (concat_split.c): inputs of
 * 3 x {37, 64, 5} x 997 floats along axis 1 (slices that cut inside rows)
 * and a 4-D one along axis 1 with outer 1 (PP-OCR det's), at 1, 2 and 3
 * threads, every element in place. */
TEST_IMPL(concat_threads) {
    enum { O = 3, I = 997, NA = 37, NB = 64, NC = 5, NY = NA + NB + NC };
    float *A = malloc(sizeof(float) * O * NA * I), *B = malloc(sizeof(float) * O * NB * I),
          *C = malloc(sizeof(float) * O * NC * I), *Y = malloc(sizeof(float) * O * NY * I);
    ASSERT(A && B && C && Y);
    fill_f32(A, O * NA * I, -1, 1);
    fill_f32(B, O * NB * I, -1, 1);
    fill_f32(C, O * NC * I, -1, 1);
    for (int threads = 1; threads <= 3; threads++) {
        tio in[3] = {{"a", KILN_DTYPE_F32, 3, {O, NA, I}, A}, {"b", KILN_DTYPE_F32, 3, {O, NB, I}, B},
                     {"c", KILN_DTYPE_F32, 3, {O, NC, I}, C}};
        tio out = {"y", KILN_DTYPE_F32, 3, {O, NY, I}, Y};
        ASSERT_OK(run1("ai.onnx::Concat", 4, 3, in, 1, &out, axis1, threads));
        for (int n = 0; n < O; n++)
            for (int r = 0; r < NY; r++) {
                const float *src = r < NA ? A + (n * NA + r) * I : r < NA + NB ? B + (n * NB + r - NA) * I
                                                                                : C + (n * NC + r - NA - NB) * I;
                if (memcmp(Y + (n * NY + r) * I, src, sizeof(float) * I))
                    TEST__FAIL("%d threads: row %d of image %d differs", threads, r, n);
            }
        /* outer 1: four [1, 24, 40, 40] maps into [1, 96, 40, 40] */
        tio in4[4] = {{"a", KILN_DTYPE_F32, 4, {1, 24, 40, 40}, A},
                      {"b", KILN_DTYPE_F32, 4, {1, 24, 40, 40}, B},
                      {"c", KILN_DTYPE_F32, 4, {1, 24, 40, 40}, A + 24 * 1600},
                      {"d", KILN_DTYPE_F32, 4, {1, 24, 40, 40}, B + 24 * 1600}};
        tio out4 = {"y", KILN_DTYPE_F32, 4, {1, 96, 40, 40}, Y};
        ASSERT_OK(run1("ai.onnx::Concat", 4, 4, in4, 1, &out4, axis1, threads));
        for (int k = 0; k < 4; k++)
            if (memcmp(Y + k * 24 * 1600, (const float *)in4[k].data, sizeof(float) * 24 * 1600))
                TEST__FAIL("%d threads: input %d of the 4-D concat differs", threads, k);
        /* planes of 67 x 71 (>= 4096): each plane split between the
         * threads, shares ending inside rows; two images, three inputs */
        tio inp[3] = {{"a", KILN_DTYPE_F32, 4, {2, 5, 67, 71}, A}, {"b", KILN_DTYPE_F32, 4, {2, 1, 67, 71}, B},
                      {"c", KILN_DTYPE_F32, 4, {2, 3, 67, 71}, A + 2 * 5 * 67 * 71}};
        tio outp = {"y", KILN_DTYPE_F32, 4, {2, 9, 67, 71}, Y};
        ASSERT_OK(run1("ai.onnx::Concat", 4, 3, inp, 1, &outp, axis1, threads));
        for (int n = 0; n < 2; n++)
            for (int k = 0, ch = 0; k < 3; ch += (int)inp[k].dims[1], k++) {
                const int64_t part = inp[k].dims[1] * 67 * 71;
                if (memcmp(Y + (n * 9 + ch) * 67 * 71, (const float *)inp[k].data + n * part, sizeof(float) * part))
                    TEST__FAIL("%d threads: input %d of image %d of the planes' concat differs", threads, k, n);
            }
    }
    free(A);
    free(B);
    free(C);
    free(Y);
}

/* Shape -> Gather -> Reshape: the shape computation is folded/propagated at
 * build time, so Reshape sees a known shape. */
TEST_IMPL(shape_values_propagate) {
    kiln_network *net = kiln_network_create();
    int64_t dims[3] = {2, 3, 4};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 3, dims, NULL));
    int64_t idx[3] = {2, 1, 0}, idims[1] = {3};
    ASSERT_OK(kiln_network_add_constant(net, "idx", KILN_DTYPE_I64, 1, idims, idx));
    const char *i1[1] = {"x"}, *o1[1] = {"s"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Shape", 1, "shape", 1, i1, 1, o1));
    const char *i2[2] = {"s", "idx"}, *o2[1] = {"g"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Gather", 1, "gather", 2, i2, 1, o2));
    const char *i3[2] = {"x", "g"}, *o3[1] = {"y"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Reshape", 5, "reshape", 2, i3, 1, o3));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_engine *e = test_build_profiled(net, KILN_BUILD_NO_TIMING, 0, NULL, 0, NULL, NULL, NULL);
    kiln_io_info info;
    ASSERT_OK(kiln_engine_io(e, 1, &info));
    ASSERT_EQ(info.ndim, 3);
    ASSERT_EQ(info.dims[0], 4);
    ASSERT_EQ(info.dims[1], 3);
    ASSERT_EQ(info.dims[2], 2);
    kiln_engine_free(e);
}


/* NonZero: the output length is data-dependent (a size tensor). */
TEST_IMPL(nonzero_dds) {
    float X[3 * 4];
    int64_t Y[2 * 12];
    int cnt = 0;
    for (int i = 0; i < 12; i++) {
        X[i] = (test_rand_u64(&g_seed) % 3 == 0) ? 0.0f : test_randf(&g_seed, 0.5f, 1.0f);
        cnt += X[i] != 0;
    }
    tio in = {"x", KILN_DTYPE_F32, 2, {3, 4}, X};
    tio out = {"y", KILN_DTYPE_I64, 2, {2, cnt}, Y};
    out.cap = sizeof Y;
    ASSERT_OK(run1("ai.onnx::NonZero", 9, 1, &in, 1, &out, NULL, 1));
    int k = 0;
    for (int i = 0; i < 12; i++) {
        if (X[i] == 0) continue;
        ASSERT_EQ(Y[k], i / 4);
        ASSERT_EQ(Y[cnt + k], i % 4);
        k++;
    }
}

static void cast_to_i32(kiln_layer *l) { ASSERT_OK(kiln_layer_set_int(l, "to", KILN_DTYPE_I32)); }

TEST_IMPL(cast_and_expand) {
    float X[16];
    int32_t Y[16];
    fill_f32(X, 16, -100, 100);
    X[3] = NAN; /* must not trap; any value is acceptable for NaN */
    tio in = {"x", KILN_DTYPE_F32, 1, {16}, X}, out = {"y", KILN_DTYPE_I32, 1, {16}, Y};
    ASSERT_OK(run1("ai.onnx::Cast", 6, 1, &in, 1, &out, cast_to_i32, 1));
    for (int i = 0; i < 16; i++)
        if (i != 3) ASSERT_EQ(Y[i], (int32_t)X[i]);

    float A[3], E[2 * 4 * 3];
    fill_f32(A, 3, -1, 1);
    int64_t shp[3] = {2, 4, 1};
    tio ein[2] = {{"a", KILN_DTYPE_F32, 2, {1, 3}, A}, {"s", KILN_DTYPE_I64, 1, {3}, shp, 1}};
    tio eout = {"y", KILN_DTYPE_F32, 3, {2, 4, 3}, E};
    ASSERT_OK(run1("ai.onnx::Expand", 8, 2, ein, 1, &eout, NULL, 1));
    for (int i = 0; i < 24; i++) ASSERT_EQ(E[i] == A[i % 3], 1);
}

static void einsum_eq(kiln_layer *l) { ASSERT_OK(kiln_layer_set_string(l, "equation", "bij,bjk->bik")); }

TEST_IMPL(einsum_batch_matmul) {
    enum { B = 2, I = 3, J = 5, K = 4 };
    float X[B * I * J], W[B * J * K], Y[B * I * K];
    fill_f32(X, B * I * J, -1, 1);
    fill_f32(W, B * J * K, -1, 1);
    tio in[2] = {{"x", KILN_DTYPE_F32, 3, {B, I, J}, X}, {"w", KILN_DTYPE_F32, 3, {B, J, K}, W}};
    tio out = {"y", KILN_DTYPE_F32, 3, {B, I, K}, Y};
    ASSERT_OK(run1("ai.onnx::Einsum", 12, 2, in, 1, &out, einsum_eq, 1));
    for (int b = 0; b < B; b++)
        for (int i = 0; i < I; i++)
            for (int k = 0; k < K; k++) {
                double s = 0;
                for (int j = 0; j < J; j++) s += X[(b * I + i) * J + j] * W[(b * J + j) * K + k];
                ASSERT_NEAR(Y[(b * I + i) * K + k], s, 1e-5);
            }
}

static void split_attrs(kiln_layer *l) {
    ASSERT_OK(kiln_layer_set_int(l, "axis", 1));
    ASSERT_OK(kiln_layer_set_int(l, "num_outputs", 3));
}

TEST_IMPL(split_uneven) {
    /* opset-18 style: 3 parts of 7 -> 3, 3, 1 */
    float X[2 * 7], P0[6], P1[6], P2[2];
    fill_f32(X, 14, -1, 1);
    tio in = {"x", KILN_DTYPE_F32, 2, {2, 7}, X};
    tio out[3] = {{"p0", KILN_DTYPE_F32, 2, {2, 3}, P0}, {"p1", KILN_DTYPE_F32, 2, {2, 3}, P1},
                  {"p2", KILN_DTYPE_F32, 2, {2, 1}, P2}};
    ASSERT_OK(run1("ai.onnx::Split", 13, 1, &in, 3, out, split_attrs, 1));
    for (int r = 0; r < 2; r++) {
        for (int c = 0; c < 3; c++) ASSERT_EQ(P0[r * 3 + c] == X[r * 7 + c], 1);
        for (int c = 0; c < 3; c++) ASSERT_EQ(P1[r * 3 + c] == X[r * 7 + 3 + c], 1);
        ASSERT_EQ(P2[r] == X[r * 7 + 6], 1);
    }
}

/* Dynamic batch: Shape -> Gather -> Unsqueeze -> Concat -> Reshape and a
 * Slice over the dynamic dim stay symbolic; run at two batch sizes. */
TEST_IMPL(dynamic_shape_chain) {
    kiln_network *net = kiln_network_create();
    int64_t dims[3] = {-1, 3, 4};
    const char *dn[3] = {"N", NULL, NULL};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 3, dims, dn));
    int64_t zero = 0, minus1 = -1, one = 1, big = INT64_MAX, d1[1] = {1};
    ASSERT_OK(kiln_network_add_constant(net, "i0", KILN_DTYPE_I64, 0, NULL, &zero));
    ASSERT_OK(kiln_network_add_constant(net, "ax0", KILN_DTYPE_I64, 1, d1, &zero));
    ASSERT_OK(kiln_network_add_constant(net, "m1", KILN_DTYPE_I64, 1, d1, &minus1));
    ASSERT_OK(kiln_network_add_constant(net, "one", KILN_DTYPE_I64, 1, d1, &one));
    ASSERT_OK(kiln_network_add_constant(net, "big", KILN_DTYPE_I64, 1, d1, &big));
    const char *a1[1] = {"x"}, *o1[1] = {"s"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Shape", 1, "shape", 1, a1, 1, o1));
    const char *a2[2] = {"s", "i0"}, *o2[1] = {"n"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Gather", 1, "gather", 2, a2, 1, o2));
    const char *a3[2] = {"n", "ax0"}, *o3[1] = {"n1"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Unsqueeze", 13, "unsq", 2, a3, 1, o3));
    const char *a4[2] = {"n1", "m1"}, *o4[1] = {"shp"};
    kiln_layer *cat = kiln_network_add_layer(net, "ai.onnx::Concat", 4, "cat", 2, a4, 1, o4);
    ASSERT(cat);
    ASSERT_OK(kiln_layer_set_int(cat, "axis", 0));
    const char *a5[2] = {"x", "shp"}, *o5[1] = {"y"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Reshape", 5, "reshape", 2, a5, 1, o5));
    const char *a6[4] = {"y", "one", "big", "ax0"}, *o6[1] = {"z"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Slice", 10, "slice", 4, a6, 1, o6));
    ASSERT_OK(kiln_network_mark_output(net, "z"));
    int64_t mn[3] = {2, 3, 4}, op[3] = {4, 3, 4}, mx[3] = {8, 3, 4};
    kiln_engine *e = test_build_profiled(net, KILN_BUILD_NO_TIMING, 0, "x", 3, mn, op, mx);
    kiln_context *ctx;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    for (int64_t N = 3; N <= 7; N += 4) {
        float X[8 * 12], Z[8 * 12];
        fill_f32(X, N * 12, -1, 1);
        int64_t xd[3] = {N, 3, 4};
        ASSERT_OK(kiln_context_set_input_shape(ctx, "x", 3, xd));
        ASSERT_OK(kiln_context_bind(ctx, "x", X, (size_t)N * 12 * 4));
        memset(Z, 0xA5, sizeof Z);
        ASSERT_OK(kiln_context_bind(ctx, "z", Z, (size_t)(N - 1) * 12 * 4));
        ASSERT_OK(kiln_context_run(ctx));
        int nd;
        int64_t zd[KILN_MAX_DIMS];
        ASSERT_OK(kiln_context_shape(ctx, "z", &nd, zd));
        ASSERT_EQ(nd, 2);
        ASSERT_EQ(zd[0], N - 1);
        ASSERT_EQ(zd[1], 12);
        for (int64_t i = 0; i < (N - 1) * 12; i++) ASSERT_EQ(Z[i] == X[12 + i], 1);
    }
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

static void topk_small(kiln_layer *l) { ASSERT_OK(kiln_layer_set_int(l, "largest", 0)); }

/* TopK, largest and smallest, with ties (lower index first) vs a naive
 * selection; K small enough for the heap path. */
TEST_IMPL(topk_ties) {
    enum { R = 3, A = 100, K = 5 };
    float X[R * A], V[R * K];
    int64_t I[R * K], k = K;
    for (int i = 0; i < R * A; i++) X[i] = (float)(test_rand_u64(&g_seed) % 20); /* many ties */
    for (int mode = 0; mode < 2; mode++) {
        tio in[2] = {{"x", KILN_DTYPE_F32, 2, {R, A}, X}, {"k", KILN_DTYPE_I64, 1, {1}, &k, 1}};
        tio out[2] = {{"v", KILN_DTYPE_F32, 2, {R, K}, V}, {"i", KILN_DTYPE_I64, 2, {R, K}, I}};
        ASSERT_OK(run1("ai.onnx::TopK", 10, 2, in, 2, out, mode ? topk_small : NULL, 1));
        for (int r = 0; r < R; r++) {
            int used[A] = {0};
            for (int j = 0; j < K; j++) {
                int best = -1;
                for (int a = 0; a < A; a++) {
                    if (used[a]) continue;
                    float xa = X[r * A + a];
                    if (best < 0 || (mode ? xa < X[r * A + best] : xa > X[r * A + best])) best = a;
                }
                used[best] = 1;
                ASSERT_EQ(I[r * K + j], best);
                ASSERT_EQ(V[r * K + j] == X[r * A + best], 1);
            }
        }
    }
}

static void bad_perm(kiln_layer *l) {
    int64_t p[3] = {0, 0, 1};
    ASSERT_OK(kiln_layer_set_ints(l, "perm", p, 3));
}

/* Bad graphs fail at build with a message naming the op and the problem. */
TEST_IMPL(errors_are_clear) {
    float X[24], Y[24];
    fill_f32(X, 24, -1, 1);
    tio x = {"x", KILN_DTYPE_F32, 3, {2, 3, 4}, X};
    tio y = {"y", KILN_DTYPE_F32, 3, {2, 3, 4}, Y};
    ASSERT_EQ(run1("ai.onnx::Transpose", 1, 1, &x, 1, &y, bad_perm, 1), KILN_EATTR);
    ASSERT_CONTAINS(kiln_errmsg(), "perm");

    int64_t shp[2] = {5, 5};
    tio rin[2] = {x, {"s", KILN_DTYPE_I64, 1, {2}, shp, 1}};
    tio rout = {"y", KILN_DTYPE_F32, 2, {5, 5}, Y};
    ASSERT_EQ(run1("ai.onnx::Reshape", 5, 2, rin, 1, &rout, NULL, 1), KILN_ESHAPE);
    ASSERT_CONTAINS(kiln_errmsg(), "24 elements");

    float fi[2] = {0, 1};
    tio gin[2] = {x, {"i", KILN_DTYPE_F32, 1, {2}, fi}};
    ASSERT_EQ(run1("ai.onnx::Gather", 1, 2, gin, 1, &y, NULL, 1), KILN_ETYPE);
    ASSERT_CONTAINS(kiln_errmsg(), "int32 or int64");

    int64_t st[1] = {0}, en[1] = {2}, ax[1] = {0}, sp[1] = {0};
    tio sin[5] = {x, {"s", KILN_DTYPE_I64, 1, {1}, st, 1}, {"e", KILN_DTYPE_I64, 1, {1}, en, 1},
                  {"a", KILN_DTYPE_I64, 1, {1}, ax, 1}, {"p", KILN_DTYPE_I64, 1, {1}, sp, 1}};
    ASSERT_EQ(run1("ai.onnx::Slice", 10, 5, sin, 1, &y, NULL, 1), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "step");

    tio ain[2] = {x, {"b", KILN_DTYPE_F32, 1, {5}, X}};
    ASSERT(run1("ai.onnx::Add", 7, 2, ain, 1, &y, NULL, 1) < 0); /* 4 vs 5 do not broadcast */

    int32_t I[24];
    tio min[2] = {x, {"b", KILN_DTYPE_I32, 3, {2, 3, 4}, I}};
    ASSERT_EQ(run1("ai.onnx::Mul", 7, 2, min, 1, &y, NULL, 1), KILN_ETYPE);
}

/* Range over a dynamic dim (position ids): the length stays symbolic. */
TEST_IMPL(dynamic_range) {
    kiln_network *net = kiln_network_create();
    int64_t dims[2] = {1, -1};
    const char *dn[2] = {NULL, "S"};
    ASSERT_OK(kiln_network_add_input(net, "ids", KILN_DTYPE_I64, 2, dims, dn));
    int64_t zero = 0, one = 1;
    ASSERT_OK(kiln_network_add_constant(net, "zero", KILN_DTYPE_I64, 0, NULL, &zero));
    ASSERT_OK(kiln_network_add_constant(net, "one", KILN_DTYPE_I64, 0, NULL, &one));
    const char *a1[1] = {"ids"}, *o1[1] = {"s"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Shape", 1, "shape", 1, a1, 1, o1));
    const char *a2[2] = {"s", "one"}, *o2[1] = {"len"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Gather", 1, "gather", 2, a2, 1, o2));
    const char *a3[3] = {"zero", "len", "one"}, *o3[1] = {"pos"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Range", 11, "range", 3, a3, 1, o3));
    const char *a4[2] = {"ids", "pos"}, *o4[1] = {"y"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Add", 7, "add", 2, a4, 1, o4));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    int64_t mn[2] = {1, 1}, op[2] = {1, 8}, mx[2] = {1, 32};
    kiln_engine *e = test_build_profiled(net, KILN_BUILD_NO_TIMING, 0, "ids", 2, mn, op, mx);
    kiln_context *ctx;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    int64_t ids[32], y[32];
    for (int i = 0; i < 32; i++) ids[i] = (int64_t)(test_rand_u64(&g_seed) % 1000);
    int64_t xd[2] = {1, 13};
    ASSERT_OK(kiln_context_set_input_shape(ctx, "ids", 2, xd));
    ASSERT_OK(kiln_context_bind(ctx, "ids", ids, 13 * 8));
    memset(y, 0xA5, sizeof y);
    ASSERT_OK(kiln_context_bind(ctx, "y", y, 13 * 8));
    ASSERT_OK(kiln_context_run(ctx));
    for (int i = 0; i < 13; i++) ASSERT_EQ(y[i], ids[i] + i);
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

static void gelu_tanh_attr(kiln_layer *l) { ASSERT_OK(kiln_layer_set_string(l, "approximate", "tanh")); }

static double ref_softplus(double x) { return log1p(exp(x)); }

/* Float32 activations (some computed with kiln's own vectorized exp/erf/
 * tanh) against double-precision libm references, over a wide range. */
TEST_IMPL(activation_accuracy) {
    enum { N = 4096 };
    static float X[N], Y[N];
    fill_f32(X, N, -12, 12);
    X[0] = 0; X[1] = 1e-6f; X[2] = -1e-6f; X[3] = 80; X[4] = -80; X[5] = 0.49f; X[6] = 0.51f;
    struct { const char *op; int ver; attr1_fn attrs; int kind; } cases[] = {
        {"ai.onnx::Erf", 9, NULL, 0},      {"ai.onnx::Gelu", 20, NULL, 1},
        {"ai.onnx::Gelu", 20, gelu_tanh_attr, 2}, {"ai.onnx::Tanh", 6, NULL, 3},
        {"ai.onnx::Sigmoid", 6, NULL, 4},  {"ai.onnx::HardSwish", 14, NULL, 5},
        {"ai.onnx::Softplus", 1, NULL, 6}, {"ai.onnx::Elu", 6, NULL, 7},
        {"ai.onnx::Mish", 18, NULL, 8},
    };
    tio in = {"x", KILN_DTYPE_F32, 1, {N}, X}, out = {"y", KILN_DTYPE_F32, 1, {N}, Y};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ASSERT_OK(run1(cases[k].op, cases[k].ver, 1, &in, 1, &out, cases[k].attrs, 1));
        for (int i = 0; i < N; i++) {
            double x = X[i], r;
            switch (cases[k].kind) {
            case 0: r = erf(x); break;
            case 1: r = 0.5 * x * (1 + erf(x / sqrt(2.0))); break;
            case 2: r = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); break;
            case 3: r = tanh(x); break;
            case 4: r = 1 / (1 + exp(-x)); break;
            case 5: r = x * fmax(0, fmin(1, x / 6 + 0.5)); break;
            case 6: r = ref_softplus(x); break;
            case 7: r = x >= 0 ? x : exp(x) - 1; break;
            default: r = x * tanh(ref_softplus(x)); break;
            }
            double tol = 2e-6 * fabs(r) + 1e-6;
            if (!(fabs(Y[i] - r) <= tol))
                TEST__FAIL("%s(%.9g) = %.9g, expected %.9g", cases[k].op, x, Y[i], r);
        }
    }
    /* Log over many magnitudes, including denormals */
    for (int i = 0; i < N; i++) X[i] = expf(test_randf(&g_seed, -100, 80));
    X[0] = 1e-40f;
    X[1] = 1;
    ASSERT_OK(run1("ai.onnx::Log", 6, 1, &in, 1, &out, NULL, 1));
    for (int i = 0; i < N; i++) ASSERT_NEAR(Y[i], log((double)X[i]), 2e-6 * fabs(log((double)X[i])) + 1e-6);
}

static void selu_attrs(kiln_layer *l) {
    ASSERT_OK(kiln_layer_set_float(l, "alpha", 1.5f));
    ASSERT_OK(kiln_layer_set_float(l, "gamma", 1.25f));
}
static void celu_attrs(kiln_layer *l) { ASSERT_OK(kiln_layer_set_float(l, "alpha", 0.75f)); }

/* The float32 ops with a 16-lane form (activation.c VEC_OPS) over
 * magnitudes from denormals to 3e38 with both signs, the specials, and
 * every length of a partial last vector (1..15 elements after 256), with
 * threads splitting the array: each output against a double reference
 * of the float input (relative 3e-6 plus 1e-6 absolute; Exp relative
 * only, where it is finite and normal), and the output past n untouched. */
TEST_IMPL(activation_vector_forms) {
    enum { NMAX = 256 + 15 };
    static float X[NMAX], Y[NMAX + 16];
    struct { const char *op; int ver; attr1_fn attrs; int kind; } cases[] = {
        {"ai.onnx::Sigmoid", 6, NULL, 0}, {"ai.onnx::Tanh", 6, NULL, 1},
        {"ai.onnx::Erf", 9, NULL, 2},     {"ai.onnx::Gelu", 20, NULL, 3},
        {"ai.onnx::Gelu", 20, gelu_tanh_attr, 4}, {"ai.onnx::Elu", 6, NULL, 5},
        {"ai.onnx::Selu", 6, selu_attrs, 6}, {"ai.onnx::Celu", 12, celu_attrs, 7},
        {"ai.onnx::Exp", 6, NULL, 8},     {"ai.onnx::Softplus", 1, NULL, 9},
        {"ai.onnx::Mish", 18, NULL, 10},
    };
    for (int len = 257; len <= NMAX; len += 7) {
        for (int i = 0; i < len; i++) { /* sign * 10^[-40, 38.5] */
            double e = -40 + 78.5 * test_randf(&g_seed, 0, 1);
            X[i] = (float)((test_rand_u64(&g_seed) & 1 ? -1 : 1) * pow(10.0, e));
        }
        for (int i = 0; i < 40; i++) X[16 + i] = test_randf(&g_seed, -9, 9); /* where the functions bend */
        const float spec[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-45f, -1e-45f, 88.7f, -87.3f, 89, -104};
        for (size_t i = 0; i < sizeof spec / sizeof *spec; i++) X[100 + 3 * i] = spec[i];
        tio in = {"x", KILN_DTYPE_F32, 1, {len}, X}, out = {"y", KILN_DTYPE_F32, 1, {len}, Y};
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            memset(Y + len, 0x5A, 16 * sizeof *Y);
            ASSERT_OK(run1(cases[k].op, cases[k].ver, 1, &in, 1, &out, cases[k].attrs, 2));
            for (int i = len; i < len + 16; i++) ASSERT_EQ(((uint32_t *)Y)[i], 0x5A5A5A5Au);
            for (int i = 0; i < len; i++) {
                const double x = X[i];
                double r;
                switch (cases[k].kind) {
                case 0: r = 1 / (1 + exp(-x)); break;
                case 1: r = tanh(x); break;
                case 2: r = erf(x); break;
                case 3: r = 0.5 * x * (1 + erf(x / sqrt(2.0))); break;
                /* the tanh form's limits where x^3 overflows float: x, or 0 (as computed in float); at
                 * -inf the formula's -inf * 0, NaN (so the erf form, and numpy) */
                case 4: r = isinf(x) ? (x > 0 ? x : NAN) : fabs(x) > 1e12 ? (x > 0 ? x : 0)
                                     : 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); break;
                case 5: r = x >= 0 ? x : exp(x) - 1; break;
                case 6: r = x > 0 ? 1.25 * x : 1.25 * (1.5 * exp(x) - 1.5); break;
                case 7: r = (x > 0 ? x : 0) + (x > 0 ? 0 : 0.75 * (exp(x / 0.75) - 1)); break;
                case 8: r = exp(x); break;
                case 9: r = x > 30 ? x + log1p(exp(-x)) : log1p(exp(x)); break;
                /* -inf: -inf * tanh(0), NaN (the formula, as the scalar form) */
                default: r = isinf(x) && x < 0 ? NAN : x * tanh(x > 30 ? x : log1p(exp(x))); break;
                }
                const double y = Y[i];
                int ok;
                if (isnan(r) || isnan(x)) ok = isnan(y);
                else if (isinf(r) || fabs(r) > 3.4028234663852886e38) ok = y == (r > 0 ? INFINITY : -INFINITY);
                else if (cases[k].kind == 8) ok = fabs(r) < 1.1754944e-38 ? fabs(y - r) <= 1.5e-38 : fabs(y - r) <= 3e-6 * r;
                else ok = fabs(y - r) <= 3e-6 * fabs(r) + 1e-6;
                if (!ok) TEST__FAIL("%s (len %d, element %d): f(%.9g) = %.9g, expected %.9g", cases[k].op, len, i, x, y, r);
            }
        }
    }
    /* Softplus relative to its value where that is tiny (log1p of a tiny
     * exp: 1 + t rounds, the t / (u - 1) factor gives it back) */
    for (int i = 0; i < NMAX; i++) X[i] = test_randf(&g_seed, -80, 20);
    tio in = {"x", KILN_DTYPE_F32, 1, {NMAX}, X}, out = {"y", KILN_DTYPE_F32, 1, {NMAX}, Y};
    ASSERT_OK(run1("ai.onnx::Softplus", 1, 1, &in, 1, &out, NULL, 1));
    for (int i = 0; i < NMAX; i++) {
        const double x = X[i], r = x > 30 ? x + log1p(exp(-x)) : log1p(exp(x));
        if (!(fabs(Y[i] - r) <= 4e-6 * r))
            TEST__FAIL("Softplus(%.9g) = %.9g, expected %.9g (relative %.2g)", x, Y[i], r, fabs(Y[i] - r) / r);
    }
}

static void legacy_bc_axis1(kiln_layer *l) {
    ASSERT_OK(kiln_layer_set_int(l, "broadcast", 1));
    ASSERT_OK(kiln_layer_set_int(l, "axis", 1));
}

/* Opset-6 Add: B [3, 4] broadcast into A [2, 3, 4, 5] at axis 1. */
TEST_IMPL(legacy_broadcast_axis) {
    float A[120], B[12], Y[120];
    fill_f32(A, 120, -1, 1);
    fill_f32(B, 12, -1, 1);
    tio in[2] = {{"a", KILN_DTYPE_F32, 4, {2, 3, 4, 5}, A}, {"b", KILN_DTYPE_F32, 2, {3, 4}, B}};
    tio out = {"y", KILN_DTYPE_F32, 4, {2, 3, 4, 5}, Y};
    ASSERT_OK(run1("ai.onnx::Add", 6, 2, in, 1, &out, legacy_bc_axis1, 1));
    for (int n = 0; n < 2; n++)
        for (int c = 0; c < 3; c++)
            for (int h = 0; h < 4; h++)
                for (int w = 0; w < 5; w++) {
                    int i = ((n * 3 + c) * 4 + h) * 5 + w;
                    ASSERT_NEAR(Y[i], A[i] + B[c * 4 + h], 1e-6);
                }
}

/* Two dynamic dims that the build had to assume compatible, then disagree
 * at run time: an error naming the op, never an out-of-bounds read. */
TEST_IMPL(runtime_broadcast_mismatch) {
    kiln_network *net = kiln_network_create();
    int64_t d[1] = {-1};
    const char *na[1] = {"N"}, *nb[1] = {"M"};
    ASSERT_OK(kiln_network_add_input(net, "a", KILN_DTYPE_F32, 1, d, na));
    ASSERT_OK(kiln_network_add_input(net, "b", KILN_DTYPE_F32, 1, d, nb));
    const char *in[2] = {"a", "b"}, *out[1] = {"y"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Add", 7, "add", 2, in, 1, out));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_flags(cfg, KILN_BUILD_NO_TIMING);
    int64_t mn[1] = {1}, op[1] = {4}, mx[1] = {8};
    ASSERT_OK(kiln_build_config_set_profile(cfg, "a", 1, mn, op, mx));
    ASSERT_OK(kiln_build_config_set_profile(cfg, "b", 1, mn, op, mx));
    kiln_engine *e = NULL;
    int rc = kiln_build(net, cfg, &e, NULL);
    if (rc == 0) {
        kiln_context *ctx;
        ASSERT_OK(kiln_context_create(e, 1, &ctx));
        float A[8] = {0}, B[8] = {0}, Y[8];
        int64_t da[1] = {3}, db[1] = {5};
        ASSERT_OK(kiln_context_set_input_shape(ctx, "a", 1, da));
        ASSERT_OK(kiln_context_set_input_shape(ctx, "b", 1, db));
        ASSERT_OK(kiln_context_bind(ctx, "a", A, 3 * 4));
        ASSERT_OK(kiln_context_bind(ctx, "b", B, 5 * 4));
        kiln_context_bind(ctx, "y", Y, sizeof Y);
        rc = kiln_context_run(ctx);
        ASSERT(rc < 0);
        kiln_context_free(ctx);
        kiln_engine_free(e);
    }
    ASSERT(rc < 0);
    kiln_build_config_free(cfg);
    kiln_network_free(net);
}

static int64_t rnd(int64_t n) { return (int64_t)(test_rand_u64(&g_seed) % (uint64_t)n); }
static int64_t g_perm[KILN_MAX_DIMS];
static int g_perm_n;
static void set_perm(kiln_layer *l) { ASSERT_OK(kiln_layer_set_ints(l, "perm", g_perm, g_perm_n)); }

/* Random shapes: broadcasting binary ops, transposes and reductions against
 * the naive references (a small property test over ranks 0..5). */
TEST_IMPL(random_shapes) {
    static float A[1024], B[1024], Y[1024];
    for (int iter = 0; iter < 40; iter++) {
        /* broadcast: output dims, then each operand drops leading dims and
         * sets some dims to 1 */
        int nd = (int)rnd(6);
        int64_t od[KILN_MAX_DIMS], on = 1;
        for (int i = 0; i < nd; i++) { od[i] = 1 + rnd(4); on *= od[i]; }
        tio in[2];
        for (int k = 0; k < 2; k++) {
            int r = nd ? (int)rnd(nd + 1) : 0;
            in[k] = (tio){k ? "b" : "a", KILN_DTYPE_F32, r, {0}, k ? B : A};
            for (int i = 0; i < r; i++) in[k].dims[i] = rnd(3) == 0 ? 1 : od[nd - r + i];
        }
        /* the output is the broadcast of the operands, which may be smaller than od */
        int ond = in[0].nd > in[1].nd ? in[0].nd : in[1].nd;
        tio out = {"y", KILN_DTYPE_F32, ond, {0}, Y};
        on = 1;
        for (int i = 0; i < ond; i++) {
            int64_t d = 1;
            for (int k = 0; k < 2; k++) {
                int j = i - (ond - in[k].nd);
                if (j >= 0 && in[k].dims[j] != 1) d = in[k].dims[j];
            }
            out.dims[i] = d;
            on *= d;
        }
        fill_f32(A, tio_numel(&in[0]), -2, 2);
        fill_f32(B, tio_numel(&in[1]), 0.5f, 2);
        const char *ops[3] = {"ai.onnx::Sub", "ai.onnx::Div", "ai.onnx::Max"};
        int which = (int)rnd(3);
        ASSERT_OK(run1(ops[which], which == 2 ? 8 : 7, 2, in, 1, &out, NULL, 1));
        for (int64_t o = 0; o < on; o++) {
            float a = A[bc_off(o, ond, out.dims, in[0].nd, in[0].dims)];
            float b = B[bc_off(o, ond, out.dims, in[1].nd, in[1].dims)];
            float r = which == 0 ? a - b : which == 1 ? a / b : (a > b ? a : b);
            ASSERT_EQ(Y[o] == r, 1);
        }

        /* transpose of a random permutation */
        int tr = 1 + (int)rnd(5);
        int64_t perm[KILN_MAX_DIMS];
        tio tin = {"x", KILN_DTYPE_F32, tr, {0}, A}, tout = {"y", KILN_DTYPE_F32, tr, {0}, Y};
        for (int i = 0; i < tr; i++) { tin.dims[i] = 1 + rnd(4); perm[i] = i; }
        for (int i = tr - 1; i > 0; i--) {
            int j = (int)rnd(i + 1);
            int64_t t = perm[i]; perm[i] = perm[j]; perm[j] = t;
        }
        for (int i = 0; i < tr; i++) tout.dims[i] = tin.dims[perm[i]];
        fill_f32(A, tio_numel(&tin), -1, 1);
        for (int i = 0; i < tr; i++) g_perm[i] = perm[i]; /* for the attr callback */
        g_perm_n = tr;
        ASSERT_OK(run1("ai.onnx::Transpose", 1, 1, &tin, 1, &tout, set_perm, 1));
        int64_t xs[KILN_MAX_DIMS], s = 1;
        for (int i = tr - 1; i >= 0; i--) { xs[i] = s; s *= tin.dims[i]; }
        for (int64_t o = 0, n = tio_numel(&tout); o < n; o++) {
            int64_t rem = o, off = 0;
            for (int i = tr - 1; i >= 0; i--) {
                off += (rem % tout.dims[i]) * xs[perm[i]];
                rem /= tout.dims[i];
            }
            ASSERT_EQ(Y[o] == A[off], 1);
        }

        /* ReduceSum-13 over a random axis subset, keepdims 1 */
        int rr = 1 + (int)rnd(4);
        tio rin[2] = {{"x", KILN_DTYPE_F32, rr, {0}, A}, {"axes", KILN_DTYPE_I64, 1, {0}, NULL, 1}};
        int64_t axes[KILN_MAX_DIMS];
        int na = 0;
        for (int i = 0; i < rr; i++) {
            rin[0].dims[i] = 1 + rnd(5);
            if (rnd(2)) axes[na++] = rnd(2) ? i : i - rr; /* negative axes too */
        }
        if (na == 0) axes[na++] = 0;
        rin[1].dims[0] = na;
        rin[1].data = axes;
        tio rout = {"y", KILN_DTYPE_F32, rr, {0}, Y};
        int red[KILN_MAX_DIMS] = {0};
        for (int k = 0; k < na; k++) red[axes[k] < 0 ? axes[k] + rr : axes[k]] = 1;
        for (int i = 0; i < rr; i++) rout.dims[i] = red[i] ? 1 : rin[0].dims[i];
        fill_f32(A, tio_numel(&rin[0]), -1, 1);
        ASSERT_OK(run1("ai.onnx::ReduceSum", 13, 2, rin, 1, &rout, NULL, 1));
        static double ref[1024];
        int64_t rn = tio_numel(&rout);
        for (int64_t o = 0; o < rn; o++) ref[o] = 0;
        for (int64_t i = 0, n = tio_numel(&rin[0]); i < n; i++) {
            int64_t rem = i, o = 0, so = 1;
            for (int d = rr - 1; d >= 0; d--) {
                int64_t c = rem % rin[0].dims[d];
                rem /= rin[0].dims[d];
                o += (red[d] ? 0 : c) * so;
                so *= rout.dims[d];
            }
            ref[o] += A[i];
        }
        for (int64_t o = 0; o < rn; o++) ASSERT_NEAR(Y[o], ref[o], 1e-5);
    }
}

/* Reshape with the shape as a runtime input: the element count must match
 * and at most one -1 may appear, checked per run (it used to return rc 0
 * with the output padded from stale arena memory). */
TEST_IMPL(reshape_runtime_shape) {
    kiln_network *net = kiln_network_create();
    int64_t xd[2] = {2, 3}, sd[1] = {2};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 2, xd, NULL));
    ASSERT_OK(kiln_network_add_input(net, "s", KILN_DTYPE_I64, 1, sd, NULL));
    const char *in[2] = {"x", "s"}, *out[1] = {"y"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Reshape", 14, "reshape", 2, in, 1, out));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_engine *e = test_build_ok(net, 0, 1, NULL);
    kiln_network_free(net);
    kiln_context *ctx;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    float X[6];
    fill_f32(X, 6, -1, 1);
    ASSERT_OK(kiln_context_bind(ctx, "x", X, sizeof X));
    static const struct {
        int64_t s[2];
        const char *err;
    } cases[] = {
        {{5, 7}, "Reshape: input has 6 elements, shape [5, 7] asks for 35"},
        {{1000, 1000}, "Reshape: input has 6 elements, shape [1000, 1000] asks for 1000000"},
        {{-1, -1}, "Reshape: shape has more than one -1 (at 0 and 1)"},
        {{-2, 3}, "dim 0 = -2 (negative)"}, /* found evaluating the output dims */
        {{3, 2}, NULL},
        {{-1, 2}, NULL},
        {{6, 0}, "input has 6 elements, shape [6, 3] asks for 18"}, /* 0 copies input dim 1 */
        {{2, 0}, NULL},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int64_t S[2] = {cases[k].s[0], cases[k].s[1]};
        ASSERT_OK(kiln_context_bind(ctx, "s", S, sizeof S));
        int rc = kiln_context_run(ctx);
        if (cases[k].err) {
            ASSERT(rc < 0);
            ASSERT_CONTAINS(kiln_errmsg(), cases[k].err);
            continue;
        }
        ASSERT_OK(rc);
        int nd;
        int64_t d[KILN_MAX_DIMS];
        ASSERT_OK(kiln_context_shape(ctx, "y", &nd, d));
        ASSERT_EQ(nd, 2);
        ASSERT_EQ(d[0] * d[1], 6);
        for (int i = 0; i < 2; i++) ASSERT_EQ(d[i], S[i] > 0 ? S[i] : S[i] == 0 ? xd[i] : 6 / (S[1 - i] ? S[1 - i] : xd[1 - i]));
        const float *Y = kiln_context_output(ctx, "y");
        for (int i = 0; i < 6; i++) ASSERT_EQ(Y[i], X[i]);
    }
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

TEST_LIST(TEST_ENTRY(add_broadcast), TEST_ENTRY(mul_large_threaded), TEST_ENTRY(div_int_and_compare), TEST_ENTRY(pow_square_and_general),
          TEST_ENTRY(where_and_sum_variadic), TEST_ENTRY(unary_float_and_f16),
          TEST_ENTRY(reduce_sum_max_mean), TEST_ENTRY(argmax), TEST_ENTRY(transpose),
          TEST_ENTRY(slice_negative_steps), TEST_ENTRY(gather_negative_indices),
          TEST_ENTRY(concat_three), TEST_ENTRY(concat_threads), TEST_ENTRY(image_planes_threaded), TEST_ENTRY(shape_values_propagate),
          TEST_ENTRY(nonzero_dds), TEST_ENTRY(cast_and_expand), TEST_ENTRY(einsum_batch_matmul),
          TEST_ENTRY(split_uneven), TEST_ENTRY(dynamic_shape_chain),
          TEST_ENTRY(topk_ties), TEST_ENTRY(errors_are_clear),
          TEST_ENTRY(dynamic_range), TEST_ENTRY(activation_accuracy), TEST_ENTRY(activation_vector_forms),
          TEST_ENTRY(legacy_broadcast_axis), TEST_ENTRY(runtime_broadcast_mismatch),
          TEST_ENTRY(random_shapes), TEST_ENTRY(reshape_runtime_shape))
