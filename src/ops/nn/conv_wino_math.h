/*
 * conv_wino_math.h — the Winograd transforms' arithmetic, shared by the
 * NCHW kernel (conv_winograd.c, one tile per vector lane) and the NCHW16C
 * one (conv_wino16c.c, 16 channels of one tile per vector).  The macros
 * take any arithmetic type (float, GCC vectors): the matrices and the
 * points they come from are in conv_winograd.c's opening comment.
 */
#ifndef KILN_OPS_NN_CONV_WINO_MATH_H
#define KILN_OPS_NN_CONV_WINO_MATH_H

/* B^T applied to six values (a row or a column of a tile). */
#define BT6(d0, d1, d2, d3, d4, d5, o0, o1, o2, o3, o4, o5) \
    do {                                                    \
        o0 = 4 * (d0) - 5 * (d2) + (d4);                    \
        o1 = -4 * ((d1) + (d2)) + (d3) + (d4);              \
        o2 = 4 * ((d1) - (d2)) - (d3) + (d4);               \
        o3 = 2 * ((d3) - (d1)) - (d2) + (d4);               \
        o4 = 2 * ((d1) - (d3)) - (d2) + (d4);               \
        o5 = 4 * (d1) - 5 * (d3) + (d5);                    \
    } while (0)

/* B^T of F(2x2) applied to four values. */
#define BT4(d0, d1, d2, d3, o0, o1, o2, o3) \
    do {                                    \
        o0 = (d0) - (d2);                   \
        o1 = (d1) + (d2);                   \
        o2 = (d2) - (d1);                   \
        o3 = (d1) - (d3);                   \
    } while (0)

/* A^T of F(2x2) applied to four values. */
#define AT4(m0, m1, m2, m3, o0, o1) \
    do {                            \
        o0 = (m0) + (m1) + (m2);    \
        o1 = (m1) - (m2) - (m3);    \
    } while (0)

/* A^T applied to six values. */
#define AT6(m0, m1, m2, m3, m4, m5, o0, o1, o2, o3)        \
    do {                                                   \
        o0 = (m0) + ((m1) + (m2)) + ((m3) + (m4));         \
        o1 = ((m1) - (m2)) + 2 * ((m3) - (m4));            \
        o2 = ((m1) + (m2)) + 4 * ((m3) + (m4));            \
        o3 = ((m1) - (m2)) + 8 * ((m3) - (m4)) + (m5);     \
    } while (0)

/* The transforms of a whole tile on vectors of 16 floats (16 tiles, or 16
 * channels of one tile), for a = m + 2 = 6 or 4 points a side (a constant
 * argument: the functions are inlined once per size). */
typedef float kiln__wvec __attribute__((vector_size(16 * sizeof(float))));
#define KILN__WINO_INLINE static inline __attribute__((always_inline))

/* B^T applied to the a values x[0], x[s], ... into y[0], y[s], ... */
KILN__WINO_INLINE void kiln__wino_bt(const int a, const kiln__wvec *x, int s, kiln__wvec *y) {
    if (a == 6)
        BT6(x[0], x[s], x[2 * s], x[3 * s], x[4 * s], x[5 * s], y[0], y[s], y[2 * s], y[3 * s], y[4 * s],
            y[5 * s]);
    else
        BT4(x[0], x[s], x[2 * s], x[3 * s], y[0], y[s], y[2 * s], y[3 * s]);
}

/* A^T applied to the a values x[0], x[s], ... into the m values y[0],
 * y[ys], ... */
KILN__WINO_INLINE void kiln__wino_at(const int a, const kiln__wvec *x, int s, kiln__wvec *y, int ys) {
    if (a == 6)
        AT6(x[0], x[s], x[2 * s], x[3 * s], x[4 * s], x[5 * s], y[0], y[ys], y[2 * ys], y[3 * ys]);
    else
        AT4(x[0], x[s], x[2 * s], x[3 * s], y[0], y[ys]);
}

/* v = B^T d B: the a x a input tile d (row-major) transformed. */
KILN__WINO_INLINE void kiln__wino_in_tile(const int a, const kiln__wvec *d, kiln__wvec *v) {
    kiln__wvec t[36];
    for (int k = 0; k < a; k++) kiln__wino_bt(a, d + k, a, t + k); /* columns: B^T d */
    for (int i = 0; i < a; i++) kiln__wino_bt(a, t + i * a, 1, v + i * a); /* rows: (B^T d) B */
}

/* o = A^T p A: the a x a products p into the m x m output tile o. */
KILN__WINO_INLINE void kiln__wino_out_tile(const int m, const kiln__wvec *p, kiln__wvec *o) {
    const int a = m + 2;
    kiln__wvec t[24];
    for (int k = 0; k < a; k++) kiln__wino_at(a, p + k, a, t + k, a); /* columns: A^T p */
    for (int r = 0; r < m; r++) kiln__wino_at(a, t + r * a, 1, o + r * m, 1); /* rows: (A^T p) A */
}

#endif /* KILN_OPS_NN_CONV_WINO_MATH_H */
