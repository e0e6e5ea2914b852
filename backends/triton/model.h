/* model.h — a kiln model as the Triton backend holds it: the engine shared
 * by every instance, plus what config.pbtxt says about batching. */
#ifndef KILN_TRITON_MODEL_H
#define KILN_TRITON_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/kiln.h"

typedef struct kt_model {
    kiln_engine *engine;
    int64_t max_batch; /* config max_batch_size: > 0 means requests carry a batch dim 0 */
    int threads;       /* parameters.threads: worker threads per instance (0 = engine's) */
    char name[128];
} kt_model;

/* Load the model at `dir` (the model's folder in the repository), version
 * `version`, configured by `config_json` (Triton's model config as JSON):
 * plugin libraries named in parameters.plugins are loaded, then
 * <dir>/<version>/model.kiln is loaded, or else <dir>/<version>/model.onnx is
 * imported, built with a profile from the config's dims and max_batch_size,
 * and cached as model.kiln beside it (rebuilt when model.onnx is newer than
 * the cache).  0, or -1 with a message in err. */
int kt_model_load(kt_model *m, const char *dir, uint64_t version, const char *config_json,
                  size_t config_size, char *err, size_t errsize);
void kt_model_free(kt_model *m);

#endif
