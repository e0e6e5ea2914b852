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

#endif /* KILN_OPS_NN_CONV_WINO_MATH_H */
