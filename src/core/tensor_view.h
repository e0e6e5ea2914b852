/*
 * tensor_view.h — kiln_tensor views and byte sizes (tensor_view.c), for
 * every module that makes views: builder, engine, contexts and the ops'
 * own scratch views (through ops/common/ops_util.h).
 */
#ifndef KILN_CORE_TENSOR_VIEW_H
#define KILN_CORE_TENSOR_VIEW_H

#include "kiln/kiln.h"
#include "kiln/plugin.h"

#include <stdint.h>

/* The one builder of kiln_tensor views (builder, engine and contexts all
 * use it).  kiln__tensor_view: v gets data, dtype, format, device and dims,
 * and strides from the format (LINEAR and blocked: row-major over the
 * logical dims; NHWC at rank >= 3: channels last); a dim < 0 (not known
 * yet) counts as 1 in the strides.  kiln__tensor_strides recomputes the
 * strides of v from its dims and format (after its dims changed). */
void kiln__tensor_view(kiln_tensor *v, void *data, kiln_dtype dtype, kiln_format format,
                       kiln_device_kind device, int ndim, const int64_t *dims);
void kiln__tensor_strides(kiln_tensor *v);
/* Bytes of a dense tensor with these logical dims; blocked layouts
 * (NCHW8C/NCHW16C, rank >= 3) pad C up to the block.  KILN_ESHAPE for a
 * negative dim or more than 2^48 bytes, the message naming the dim (the
 * caller prefixes the tensor's name). */
int kiln__tensor_bytes(kiln_dtype dtype, kiln_format format, int ndim, const int64_t *dims,
                       uint64_t *bytes);

#endif /* KILN_CORE_TENSOR_VIEW_H */
