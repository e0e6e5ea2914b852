/*
 * test_reformat_blocked.c — kiln::reformat between LINEAR and the blocked
 * layouts (NCHW8C, NCHW16C) for 4-byte dtypes, which reformat.c runs as a
 * blocked transpose: against offsets computed here, channel counts on and
 * off the block (pad channels must come out zero from an output poisoned
 * with NaN), pixel counts on and off its 64-pixel units, ranks 3-5, F32 and
 * I32, both directions (the round trip bit-exact), 1-3 threads.
 */
#include "kiln/kiln.h"
#include "kiln/plugin.h"
#include "kiln_int.h"
#include "test.h"
#include "test_ops_util.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static uint64_t g_seed = 0x8EF08A7B10C4ull;

static void one(const int64_t *dims, int nd, kiln_format blocked, kiln_dtype dt, int threads) {
    const kiln__op *op = kiln__registry_find("kiln", "reformat", 1);
    ASSERT(op && op->quick && op->quick->impl);
    const int64_t N = dims[0], C = dims[1], B = blocked == KILN_FORMAT_NCHW8C ? 8 : 16, CB = (C + B - 1) / B;
    int64_t S = 1;
    for (int d = 2; d < nd; d++) S *= dims[d];
    const int64_t n = N * C * S, np = N * CB * B * S;
    float *lin = test_rnd_f32(&g_seed, n, -1.0f, 1.0f), *back = test_xmalloc((size_t)n * sizeof(float));
    float *blk = test_xmalloc((size_t)np * sizeof(float));
    kiln__pool *pool = kiln__pool_create(threads);
    kiln_exec ex = {.device = KILN_DEVICE_CPU, .pool = pool};
    kiln_tensor a = test_tensor_f32(lin, nd, dims), b = test_tensor_f32(blk, nd, dims);
    a.dtype = b.dtype = dt;
    b.format = blocked;
    for (int64_t i = 0; i < np; i++) blk[i] = NAN;
    kiln_call c = {.in = &a, .nin = 1, .out = &b, .nout = 1, .exec = &ex, .layer = "rf"};
    ASSERT_OK(op->quick->impl(&c));
    char what[120];
    snprintf(what, sizeof what, "reformat %s N%lld C%lld S%lld rank %d %s, %d threads",
             blocked == KILN_FORMAT_NCHW8C ? "8c" : "16c", (long long)N, (long long)C, (long long)S, nd,
             dt == KILN_DTYPE_I32 ? "i32" : "f32", threads);
    for (int64_t i = 0; i < N; i++)
        for (int64_t ch = 0; ch < CB * B; ch++)
            for (int64_t s = 0; s < S; s++) {
                const int64_t o = ((i * CB + ch / B) * S + s) * B + ch % B;
                const float want = ch < C ? lin[(i * C + ch) * S + s] : 0.0f;
                if (memcmp(&blk[o], &want, 4)) TEST__FAIL("%s: to blocked, element %lld differs", what, (long long)o);
            }
    /* and back */
    kiln_tensor d = test_tensor_f32(back, nd, dims);
    d.dtype = dt;
    for (int64_t i = 0; i < n; i++) back[i] = NAN;
    kiln_call c2 = {.in = &b, .nin = 1, .out = &d, .nout = 1, .exec = &ex, .layer = "rf"};
    ASSERT_OK(op->quick->impl(&c2));
    if (memcmp(back, lin, (size_t)n * sizeof(float))) TEST__FAIL("%s: back to LINEAR differs", what);
    kiln__pool_free(pool);
    free(lin); free(back); free(blk);
}

TEST_IMPL(reformat_blocked) {
    static const int64_t chans[] = {1, 5, 16, 20, 33, 64};
    static const int64_t sizes[][2] = {{1, 1}, {1, 7}, {8, 8}, {5, 13}, {1, 130}};
    int i = 0;
    for (size_t ci = 0; ci < sizeof chans / sizeof chans[0]; ci++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++, i++) {
            const int64_t d4[4] = {1 + (i % 3 == 0), chans[ci], sizes[si][0], sizes[si][1]};
            one(d4, 4, i % 2 ? KILN_FORMAT_NCHW8C : KILN_FORMAT_NCHW16C, i % 5 == 4 ? KILN_DTYPE_I32 : KILN_DTYPE_F32,
                1 + i % 3);
        }
    const int64_t d3[3] = {2, 24, 67}, d5[5] = {1, 17, 3, 4, 6};
    one(d3, 3, KILN_FORMAT_NCHW16C, KILN_DTYPE_F32, 2);
    one(d5, 5, KILN_FORMAT_NCHW16C, KILN_DTYPE_F32, 3);
    one(d5, 5, KILN_FORMAT_NCHW8C, KILN_DTYPE_I32, 1);
}

TEST_LIST(TEST_ENTRY(reformat_blocked))
