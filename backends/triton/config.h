/* config.h — Triton's model configuration (config.pbtxt, handed to the
 * backend as JSON) read against a kiln engine: Triton's names for kiln's
 * types, the device the instance groups ask for, the batch an engine can
 * take, auto-completion of what the config leaves out, and a check that
 * what it states matches the engine. */
#ifndef KILN_TRITON_CONFIG_H
#define KILN_TRITON_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "json.h"
#include "kiln/kiln.h"
#include "triton_api.h"

/* Format a message into err (truncated to errsize); returns -1. */
int kt_failf(char *err, size_t errsize, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

TRITONSERVER_DataType kt_triton_dtype(kiln_dtype t);
/* "FP32", "INT64", ... (Triton's names; the config's are "TYPE_" + name,
 * but "TYPE_STRING" for BYTES). */
const char *kt_triton_type_name(TRITONSERVER_DataType t);

/* The device the config's instance_group asks for: KILN_DEVICE_CUDA when a
 * group is KIND_GPU, else KILN_DEVICE_CPU.  Errors (-1, message in err):
 * KIND_GPU mixed with KIND_CPU (one engine serves a model), KIND_MODEL, a
 * group on a GPU other than the one kiln drives ($KILN_CUDA_DEVICE, default
 * 0), and KIND_GPU on a machine where kiln finds no usable GPU (the reason
 * kiln_devices_describe gives). */
int kt_config_device(const kt_json *cfg, kiln_device_kind *device, char *err, size_t errsize);
/* The GPU kiln runs on: $KILN_CUDA_DEVICE, default 0. */
int kt_cuda_device_id(void);

/* The largest batch along dim 0 an engine takes: every input and output has
 * a dynamic dim 0 whose profile starts at 1 (outputs: not data-dependent);
 * then the smallest profile max of dim 0 over the inputs, else 0. */
int64_t kt_engine_max_batch(const kiln_engine *e);

/* The number of dims the config's entry for `name` in `section` ("input"
 * or "output") gives, or -1 when it has no entry or an entry without dims. */
int kt_config_dims_count(const kt_json *cfg, const char *section, const char *name);

/* Complete `cfg` in place from the engine, as Triton's auto-complete asks:
 * max_batch_size (when 0 in the config and `max_batch` > 0), an entry for
 * every input and output the config leaves out, data_type and dims where an
 * entry has none (dims without the batch dim when max_batch > 0, -1 where
 * dynamic), and dynamic_batching {} when it set max_batch_size (> 1) and no
 * scheduler is set.  1 if anything changed, 0 if not, -1 when out of memory. */
int kt_config_complete(kt_json *cfg, const kiln_engine *e, int64_t max_batch);

/* Every input/output entry of the config names an engine tensor of the same
 * type and, unless it has a `reshape`, the same rank (less the batch dim
 * when max_batch > 0) with the same fixed sizes.  0, or -1 with a message
 * in err naming the entry, what the config says and what the engine has. */
int kt_config_check(const kt_json *cfg, const kiln_engine *e, int64_t max_batch, char *err,
                    size_t errsize);

#endif
