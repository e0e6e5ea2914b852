/*
 * test_ops_common.c — the ops' one shared element access
 * (src/ops/common/ops_util.c: kiln__ops_get_f64 / get_i64 / set_f64 and the
 * bulk kiln__ops_cast behind them), against values written out here for
 * every dtype: exact round trips, float16/bfloat16 rounding as the public
 * converters do it, and saturation where a C cast would be undefined.
 */
#include "ops/common/ops_util.h"
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static uint64_t seed = 0x0b5e55edc0ffee11ull;

/* Every fixed-size dtype: a value representable in all of them reads back
 * as itself, as double and as int64, element by element. */
TEST_IMPL(get_set_every_dtype) {
    static const kiln_dtype all[] = {KILN_DTYPE_F32, KILN_DTYPE_F64, KILN_DTYPE_F16, KILN_DTYPE_BF16,
                                     KILN_DTYPE_I8,  KILN_DTYPE_I16, KILN_DTYPE_I32, KILN_DTYPE_I64,
                                     KILN_DTYPE_U8,  KILN_DTYPE_U16, KILN_DTYPE_U32, KILN_DTYPE_U64};
    for (size_t t = 0; t < sizeof all / sizeof all[0]; t++) {
        kiln_dtype dt = all[t];
        uint64_t buf[16];
        memset(buf, 0xa5, sizeof buf); /* poison */
        int sgn = kiln__ops_is_uint(dt) ? 0 : 1;
        double want[16];
        for (int i = 0; i < 16; i++) {
            /* integers in [-100, 100) (or [0, 100)): exact in bf16 (8 bits) and every int type */
            want[i] = (double)(int)test_randf(&seed, sgn ? -100.0f : 0.0f, 100.0f);
            kiln__ops_set_f64(buf, dt, i, want[i]);
        }
        for (int i = 0; i < 16; i++) {
            ASSERT_NEAR(kiln__ops_get_f64(buf, dt, i), want[i], 0);
            ASSERT_EQ(kiln__ops_get_i64(buf, dt, i), (int64_t)want[i]);
        }
        /* the element size is the dtype's: element 16 is untouched */
        if (kiln_dtype_size(dt) < 8) {
            uint8_t *p = (uint8_t *)buf + 16 * kiln_dtype_size(dt);
            ASSERT_EQ(p[0], 0xa5);
        }
    }
}

/* float16 / bfloat16 stores round like the public converters; loads are exact. */
TEST_IMPL(half_rounding) {
    for (int i = 0; i < 1000; i++) {
        float v = test_randf(&seed, -65000.0f, 65000.0f) * (i % 2 ? 1e-4f : 1.0f);
        uint16_t h = 0x7e00, b = 0x7fc0;
        kiln__ops_set_f64(&h, KILN_DTYPE_F16, 0, v);
        kiln__ops_set_f64(&b, KILN_DTYPE_BF16, 0, v);
        ASSERT_EQ(h, kiln_f32_to_f16(v));
        ASSERT_EQ(b, kiln_f32_to_bf16(v));
        ASSERT_NEAR(kiln__ops_get_f64(&h, KILN_DTYPE_F16, 0), kiln_f16_to_f32(h), 0);
        ASSERT_NEAR(kiln__ops_get_f64(&b, KILN_DTYPE_BF16, 0), kiln_bf16_to_f32(b), 0);
    }
}

/* Float -> integer never invokes undefined behaviour: NaN -> 0, out of the
 * int64 range saturates; in range truncates toward zero (ONNX Cast). */
TEST_IMPL(float_to_int_saturates) {
    float f[6] = {NAN, INFINITY, -INFINITY, 3e19f, -2.75f, 7.9f};
    int64_t want[6] = {0, INT64_MAX, INT64_MIN, INT64_MAX, -2, 7};
    for (int i = 0; i < 6; i++) ASSERT_EQ(kiln__ops_get_i64(f, KILN_DTYPE_F32, i), want[i]);
    uint16_t h = kiln_f32_to_f16(-300.5f); /* F16 to int64 converts (not 0) */
    ASSERT_EQ(kiln__ops_get_i64(&h, KILN_DTYPE_F16, 0), -300);
    int64_t big;
    kiln__ops_set_f64(&big, KILN_DTYPE_I64, 0, 1e30);
    ASSERT_EQ(big, INT64_MAX);
    uint64_t ubig;
    kiln__ops_set_f64(&ubig, KILN_DTYPE_U64, 0, 1.5e19); /* above INT64_MAX, inside uint64 */
    ASSERT(ubig == (uint64_t)1.5e19);
}

/* The bulk conversion agrees with element-wise access for every pair of
 * float and integer types (the f32 wrappers of the float kernels use it). */
TEST_IMPL(cast_matches_elements) {
    static const kiln_dtype ts[] = {KILN_DTYPE_F32, KILN_DTYPE_F64, KILN_DTYPE_F16, KILN_DTYPE_BF16,
                                    KILN_DTYPE_I8, KILN_DTYPE_I32, KILN_DTYPE_U8, KILN_DTYPE_I64};
    enum { N = 700 }; /* more than one conversion block */
    static double src_d[N];
    for (int i = 0; i < N; i++) src_d[i] = (double)(int)test_randf(&seed, 0.0f, 120.0f) + (i % 3) * 0.25;
    for (size_t a = 0; a < sizeof ts / sizeof ts[0]; a++)
        for (size_t b = 0; b < sizeof ts / sizeof ts[0]; b++) {
            static uint64_t src[N], dst[N];
            kiln__ops_from_f64(src_d, ts[a], src, N);
            memset(dst, 0x5a, sizeof dst);
            kiln__ops_cast(src, ts[a], dst, ts[b], N);
            for (int i = 0; i < N; i++) {
                uint64_t one = 0;
                kiln__ops_set_f64(&one, ts[b], 0, kiln__ops_get_f64(src, ts[a], i));
                ASSERT_EQ(memcmp((const char *)dst + i * kiln_dtype_size(ts[b]), &one, kiln_dtype_size(ts[b])), 0);
            }
        }
}

TEST_LIST(TEST_ENTRY(get_set_every_dtype), TEST_ENTRY(half_rounding), TEST_ENTRY(float_to_int_saturates),
          TEST_ENTRY(cast_matches_elements))
