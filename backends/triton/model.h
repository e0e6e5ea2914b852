/* model.h — a kiln model as the Triton backend holds it: the engine shared
 * by every instance, plus what config.pbtxt says about batching. */
#ifndef KILN_TRITON_MODEL_H
#define KILN_TRITON_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/kiln.h"

typedef struct kt_model {
    kiln_engine *engine;
    int64_t max_batch;       /* config max_batch_size: > 0 means requests carry a batch dim 0 */
    int threads;             /* parameters.threads: worker threads per instance (0 = engine's) */
    kiln_device_kind device; /* CUDA when instance_group is KIND_GPU */
    char name[128];
} kt_model;

typedef struct kt_load_options {
    int auto_complete;         /* Triton asks the backend to complete the config */
    int64_t default_max_batch; /* Triton's default-max-batch-size (ONNX models that batch) */
} kt_load_options;

/* Load the model at `dir` (the model's folder in the repository), version
 * `version`, configured by `config_json` (Triton's model config as JSON):
 * plugin libraries named in parameters.plugins are loaded, then
 * <dir>/<version>/model.kiln is loaded, or else <dir>/<version>/model.onnx is
 * imported, built for the instance groups' device with a profile from the
 * config's dims (or the model's own fixed dims) and max_batch_size, and
 * cached as model.kiln beside it (rebuilt when model.onnx is newer than the
 * cache or the cache was built for the other device).
 *
 * With opt->auto_complete, what the config leaves out is taken from the
 * engine (config.h, kt_config_complete): max_batch_size from the engine's
 * profile (model.kiln) or opt->default_max_batch (model.onnx whose inputs
 * all have a dynamic dim 0), inputs, outputs, dtypes, dims.  If that changed
 * the config, *completed gets the new JSON (malloc'd, *completed_size its
 * length), else NULL.  The config is then checked against the engine.
 * 0, or -1 with a message in err. */
int kt_model_load(kt_model *m, const char *dir, uint64_t version, const char *config_json,
                  size_t config_size, const kt_load_options *opt, char **completed,
                  size_t *completed_size, char *err, size_t errsize);
void kt_model_free(kt_model *m);

#endif
