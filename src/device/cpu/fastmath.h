/*
 * fastmath.h — float32 exp without libm calls, branch-free so the loops
 * that use it vectorize (shared by activation.c and softmax.c).
 */
#ifndef KILN_OPS_FASTMATH_H
#define KILN_OPS_FASTMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* exp: Cody-Waite range reduction by ln 2 and the Cephes polynomial,
 * within 2 ulp on [-87, 88] (libm's expf is a scalar call). */
static inline float fexp_f32(float x0) {
    float x = x0 < -87.4f ? -87.4f : x0 > 88.75f ? 88.75f : x0;
    /* round to nearest with the 1.5 * 2^23 trick (floorf does not vectorize
     * under -ftrapping-math) */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    n = n == n ? n : 0; /* NaN: keep the conversion below defined */
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500E-4f;
    p = p * r + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    float y = p * r * r + r + 1.0f;
    /* 2^n as two factors so n in [-126, 128] stays representable */
    int32_t ni = (int32_t)n, n1 = ni >> 1, n2 = ni - n1;
    int32_t e1 = (n1 + 127) << 23, e2 = (n2 + 127) << 23;
    float s1, s2;
    memcpy(&s1, &e1, sizeof s1);
    memcpy(&s2, &e2, sizeof s2);
    y = y * s1 * s2;
    return x0 > 88.7228f ? INFINITY : x0 < -87.33f ? 0.0f : y;
}
#endif
