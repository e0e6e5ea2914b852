/* config.c — see config.h. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kt_failf(char *err, size_t errsize, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errsize, fmt, ap);
    va_end(ap);
    return -1;
}

TRITONSERVER_DataType kt_triton_dtype(kiln_dtype t)
{
    switch (t) {
    case KILN_DTYPE_BOOL: return TRITONSERVER_TYPE_BOOL;
    case KILN_DTYPE_U8: return TRITONSERVER_TYPE_UINT8;
    case KILN_DTYPE_U16: return TRITONSERVER_TYPE_UINT16;
    case KILN_DTYPE_U32: return TRITONSERVER_TYPE_UINT32;
    case KILN_DTYPE_U64: return TRITONSERVER_TYPE_UINT64;
    case KILN_DTYPE_I8: return TRITONSERVER_TYPE_INT8;
    case KILN_DTYPE_I16: return TRITONSERVER_TYPE_INT16;
    case KILN_DTYPE_I32: return TRITONSERVER_TYPE_INT32;
    case KILN_DTYPE_I64: return TRITONSERVER_TYPE_INT64;
    case KILN_DTYPE_F16: return TRITONSERVER_TYPE_FP16;
    case KILN_DTYPE_F32: return TRITONSERVER_TYPE_FP32;
    case KILN_DTYPE_F64: return TRITONSERVER_TYPE_FP64;
    case KILN_DTYPE_BF16: return TRITONSERVER_TYPE_BF16;
    default: return TRITONSERVER_TYPE_INVALID; /* strings: not served yet */
    }
}

const char *kt_triton_type_name(TRITONSERVER_DataType t)
{
    static const char *const names[] = { "INVALID", "BOOL",  "UINT8", "UINT16", "UINT32",
                                         "UINT64",  "INT8",  "INT16", "INT32",  "INT64",
                                         "FP16",    "FP32",  "FP64",  "BYTES",  "BF16" };
    return (unsigned)t < sizeof names / sizeof *names ? names[t] : "?";
}

/* The config's spelling of a type: TYPE_FP32, ..., TYPE_STRING for BYTES. */
static void config_type_name(TRITONSERVER_DataType t, char *out, size_t size)
{
    snprintf(out, size, "TYPE_%s", t == TRITONSERVER_TYPE_BYTES ? "STRING" : kt_triton_type_name(t));
}

int kt_cuda_device_id(void)
{
    const char *env = getenv("KILN_CUDA_DEVICE");
    return env && *env ? atoi(env) : 0;
}

int kt_config_device(const kt_json *cfg, kiln_device_kind *device, char *err, size_t errsize)
{
    const kt_json *groups = kt_json_get(cfg, "instance_group");
    int cpu = 0, gpu = 0;
    for (int g = 0; groups && groups->type == KT_JSON_ARRAY && g < groups->n; g++) {
        const kt_json *grp = groups->items[g];
        const char *kind = kt_json_str(kt_json_get(grp, "kind"));
        const char *name = kt_json_str(kt_json_get(grp, "name"));
        if (!kind || !strcmp(kind, "KIND_CPU") || !strcmp(kind, "KIND_AUTO")) {
            cpu = 1;
            continue;
        }
        if (strcmp(kind, "KIND_GPU"))
            return kt_failf(err, errsize, "instance_group '%s': kind %s is not served by kiln "
                         "(KIND_CPU or KIND_GPU)", name ? name : "?", kind);
        gpu = 1;
        const kt_json *ids = kt_json_get(grp, "gpus");
        for (int i = 0; ids && ids->type == KT_JSON_ARRAY && i < ids->n; i++) {
            int64_t id = -1;
            if (kt_json_int(ids->items[i], &id) || id != kt_cuda_device_id())
                return kt_failf(err, errsize,
                             "instance_group '%s': KIND_GPU on GPU %s, but kiln drives one GPU per "
                             "process, GPU %d ($KILN_CUDA_DEVICE, default 0): list gpus: [ %d ] or "
                             "start the server with KILN_CUDA_DEVICE set",
                             name ? name : "?", ids->items[i]->text ? ids->items[i]->text : "?",
                             kt_cuda_device_id(), kt_cuda_device_id());
        }
    }
    if (cpu && gpu)
        return kt_failf(err, errsize, "instance_group mixes KIND_CPU and KIND_GPU: a kiln model is one "
                     "engine, built for one device; serve the other kind as a second model");
    *device = gpu ? KILN_DEVICE_CUDA : KILN_DEVICE_CPU;
    if (gpu) {
        char desc[1024];
        if (kiln_devices_describe(desc, sizeof desc) < 1) {
            const char *line = strstr(desc, "cuda");
            size_t len = line ? strcspn(line, "\n") : 0;
            return kt_failf(err, errsize, "instance_group KIND_GPU: kiln finds no usable GPU (%.*s)",
                         (int)len, line ? line : "no CUDA line in kiln_devices_describe");
        }
    }
    return 0;
}

int64_t kt_engine_max_batch(const kiln_engine *e)
{
    int nin = kiln_engine_num_inputs(e), n = nin + kiln_engine_num_outputs(e);
    int64_t batch = INT64_MAX;
    for (int i = 0; i < n; i++) {
        kiln_io_info io;
        if (kiln_engine_io(e, i, &io) || io.ndim < 1 || io.dims[0] >= 0 || io.data_dependent) return 0;
        if (i < nin && (io.min[0] > 1 || io.max[0] < 1)) return 0;
        if (i < nin && io.max[0] < batch) batch = io.max[0];
    }
    return nin && batch != INT64_MAX ? batch : 0;
}

/* The config's entry named `name` in `section`, or NULL. */
static kt_json *config_entry(const kt_json *cfg, const char *section, const char *name)
{
    const kt_json *list = kt_json_get(cfg, section);
    for (int i = 0; list && list->type == KT_JSON_ARRAY && i < list->n; i++) {
        const char *n = kt_json_str(kt_json_get(list->items[i], "name"));
        if (n && !strcmp(n, name)) return list->items[i];
    }
    return NULL;
}

static int dims_count(const kt_json *entry)
{
    const kt_json *dims = kt_json_get(entry, "dims");
    return dims && dims->type == KT_JSON_ARRAY && dims->n > 0 ? dims->n : -1;
}

int kt_config_dims_count(const kt_json *cfg, const char *section, const char *name)
{
    return dims_count(config_entry(cfg, section, name));
}

static kt_json *number(int64_t v)
{
    char text[32];
    snprintf(text, sizeof text, "%lld", (long long)v);
    return kt_json_new(KT_JSON_NUMBER, text);
}

/* Dim d of a tensor as the config states it: its size, or -1 where it
 * varies (an input whose profile pins a dynamic dim has that size). */
static int64_t fixed_dim(const kiln_io_info *io, int d)
{
    if (io->dims[d] >= 0) return io->dims[d];
    return io->is_input && io->min[d] == io->max[d] && io->max[d] > 0 ? io->max[d] : -1;
}

/* Fill data_type and dims of `entry` (where it has none) from io. */
static int complete_entry(kt_json *entry, const kiln_io_info *io, int64_t max_batch, int *changed)
{
    const char *dt = kt_json_str(kt_json_get(entry, "data_type"));
    if (!dt || !strcmp(dt, "TYPE_INVALID")) {
        char name[32];
        config_type_name(kt_triton_dtype(io->dtype), name, sizeof name);
        if (kt_json_set(entry, "data_type", kt_json_new(KT_JSON_STRING, name))) return -1;
        *changed = 1;
    }
    if (dims_count(entry) < 0 && !kt_json_get(entry, "reshape")) {
        kt_json *dims = kt_json_new(KT_JSON_ARRAY, NULL);
        for (int d = max_batch > 0; dims && d < io->ndim; d++)
            if (kt_json_append(dims, number(fixed_dim(io, d)))) return -1;
        /* A scalar without batching: Triton wants at least one dim, so [1]
         * reshaped to the scalar kiln takes. */
        if (dims && dims->n == 0) {
            kt_json *reshape = kt_json_new(KT_JSON_OBJECT, NULL);
            if (kt_json_set(entry, "reshape", reshape) ||
                kt_json_set(reshape, "shape", kt_json_new(KT_JSON_ARRAY, NULL)) ||
                kt_json_append(dims, number(1)))
                return kt_json_free(dims), -1;
        }
        if (kt_json_set(entry, "dims", dims)) return -1;
        *changed = 1;
    }
    return 0;
}

int kt_config_complete(kt_json *cfg, const kiln_engine *e, int64_t max_batch)
{
    int changed = 0, nin = kiln_engine_num_inputs(e);
    int64_t given = 0;
    if (max_batch > 0 && (kt_json_int(kt_json_get(cfg, "max_batch_size"), &given) || given == 0)) {
        if (kt_json_set(cfg, "max_batch_size", number(max_batch))) return -1;
        changed = 1;
    }
    /* Only a batch size chosen here turns the dynamic batcher on: a config
     * that sets max_batch_size itself without a scheduler keeps it off. */
    if (changed && max_batch > 1 && !kt_json_get(cfg, "dynamic_batching") &&
        !kt_json_get(cfg, "sequence_batching") && !kt_json_get(cfg, "ensemble_scheduling")) {
        if (kt_json_set(cfg, "dynamic_batching", kt_json_new(KT_JSON_OBJECT, NULL))) return -1;
        changed = 1;
    }
    for (int i = 0; i < nin + kiln_engine_num_outputs(e); i++) {
        kiln_io_info io;
        kiln_engine_io(e, i, &io);
        const char *section = i < nin ? "input" : "output";
        kt_json *entry = config_entry(cfg, section, io.name);
        if (!entry) {
            kt_json *list = (kt_json *)kt_json_get(cfg, section);
            if (!list || list->type != KT_JSON_ARRAY) {
                if (kt_json_set(cfg, section, kt_json_new(KT_JSON_ARRAY, NULL))) return -1;
                list = (kt_json *)kt_json_get(cfg, section);
            }
            if (kt_json_append(list, entry = kt_json_new(KT_JSON_OBJECT, NULL)) ||
                kt_json_set(entry, "name", kt_json_new(KT_JSON_STRING, io.name)))
                return -1;
            changed = 1;
        }
        if (complete_entry(entry, &io, max_batch, &changed)) return -1;
    }
    return changed;
}

int kt_config_check(const kt_json *cfg, const kiln_engine *e, int64_t max_batch, char *err,
                    size_t errsize)
{
    static const char *const sections[] = { "input", "output" };
    int nin = kiln_engine_num_inputs(e), nout = kiln_engine_num_outputs(e);
    for (int s = 0; s < 2; s++) {
        const kt_json *list = kt_json_get(cfg, sections[s]);
        for (int k = 0; list && list->type == KT_JSON_ARRAY && k < list->n; k++) {
            const kt_json *entry = list->items[k];
            const char *name = kt_json_str(kt_json_get(entry, "name"));
            kiln_io_info io;
            int found = 0;
            for (int i = s ? nin : 0; name && i < (s ? nin + nout : nin) && !found; i++)
                found = !kiln_engine_io(e, i, &io) && !strcmp(io.name, name);
            if (!found) {
                char names[512] = "";
                for (int i = s ? nin : 0; i < (s ? nin + nout : nin); i++) {
                    kiln_engine_io(e, i, &io);
                    snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                             names[0] ? ", " : "", io.name);
                }
                return kt_failf(err, errsize, "config.pbtxt %s '%s' is not an %s of the engine (%ss: %s)",
                             sections[s], name ? name : "?", sections[s], sections[s], names);
            }
            char want[32];
            config_type_name(kt_triton_dtype(io.dtype), want, sizeof want);
            const char *dt = kt_json_str(kt_json_get(entry, "data_type"));
            if (dt && strcmp(dt, "TYPE_INVALID") && strcmp(dt, want))
                return kt_failf(err, errsize, "config.pbtxt %s '%s': data_type %s, the engine has %s",
                             sections[s], name, dt, want);
            const kt_json *dims = kt_json_get(entry, "dims");
            int off = max_batch > 0, n = dims_count(entry);
            if (n < 0 || kt_json_get(entry, "reshape")) continue;
            if (n != io.ndim - off)
                return kt_failf(err, errsize, "config.pbtxt %s '%s': %d dims, the engine's tensor has "
                             "rank %d%s", sections[s], name, n, io.ndim,
                             off ? " (with max_batch_size > 0, dims leave out the batch dim)" : "");
            for (int d = 0; d < n; d++) {
                int64_t c = 0;
                if (kt_json_int(dims->items[d], &c))
                    return kt_failf(err, errsize, "config.pbtxt %s '%s': dim %d is not an integer",
                                 sections[s], name, d);
                if (c >= 0 && io.dims[d + off] >= 0 && c != io.dims[d + off])
                    return kt_failf(err, errsize, "config.pbtxt %s '%s': dims[%d] = %lld, the engine "
                                 "has %lld", sections[s], name, d, (long long)c,
                                 (long long)io.dims[d + off]);
            }
        }
    }
    return 0;
}
