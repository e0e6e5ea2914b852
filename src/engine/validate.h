/*
 * validate.h — what the runtime (context.c) asks of validate.c beyond the
 * load and shape checks declared in kiln_int.h.
 */
#ifndef KILN_ENGINE_VALIDATE_H
#define KILN_ENGINE_VALIDATE_H

#include "kiln_int.h"

/* "dims 2, 3 of input 'x'": the network-input dims that the dims of the n
 * tensors depend on, for messages about shapes the caller chose (dynamic
 * dims left at 1, say); returns how many (0: none). */
int kiln__input_dims_of(const kiln_engine *e, const int32_t *tensors, int n, char *buf, size_t size);

#endif
