/*
 * stempool.h — kiln::stempool (stempool.c): a network's stem conv of few
 * input channels, its Relu and the MaxPool after it as one layer, which
 * builder/stempool_fuse.c makes from such chains.
 */
#ifndef KILN_OPS_NN_STEMPOOL_H
#define KILN_OPS_NN_STEMPOOL_H

#include <stdint.h>

/* 1 if kiln::stempool runs a conv of C input channels, a KH x KW kernel
 * and M output channels (conv_fewc.c's limits, M % 32 == 0; AVX-512
 * builds), else 0. */
int kiln__stempool_fits(int64_t C, int64_t KH, int64_t KW, int64_t M);

#endif /* KILN_OPS_NN_STEMPOOL_H */
