/* model.c — model loading for the Triton backend (see model.h). */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "json.h"
#include "kiln/onnx.h"

/* parameters { key: "K" value { string_value: "V" } } → "V" or NULL. */
static const char *param(const kt_json *cfg, const char *key)
{
    return kt_json_str(kt_json_get(kt_json_get(kt_json_get(cfg, "parameters"), key),
                                   "string_value"));
}

/* parameters.plugins: libraries separated by ',' or ':'; relative paths are
 * relative to the model's folder. */
static int load_plugins(const char *list, const char *dir, char *err, size_t errsize)
{
    char *copy = strdup(list), *save = NULL;
    if (!copy) return kt_failf(err, errsize, "out of memory");
    int rc = 0;
    for (char *p = strtok_r(copy, ",:", &save); p && !rc; p = strtok_r(NULL, ",:", &save)) {
        while (*p == ' ') p++;
        if (!*p) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s%s%s", *p == '/' ? "" : dir, *p == '/' ? "" : "/", p);
        if (kiln_registry_load_library(path))
            rc = kt_failf(err, errsize, "plugin library '%s' (parameters.plugins) failed to load: %s",
                       path, kiln_errmsg());
    }
    free(copy);
    return rc;
}

/* The config's entry for input `name`, or NULL. */
static const kt_json *config_input(const kt_json *cfg, const char *name)
{
    const kt_json *ins = kt_json_get(cfg, "input");
    for (int i = 0; ins && ins->type == KT_JSON_ARRAY && i < ins->n; i++)
        if (kt_json_str(kt_json_get(ins->items[i], "name")) &&
            !strcmp(kt_json_str(kt_json_get(ins->items[i], "name")), name))
            return ins->items[i];
    return NULL;
}

/* May input `io` carry a batch dim 0: it has a dynamic dim 0 and the
 * config does not give it its full rank as dims. */
static int batch_ok(const kt_json *cfg, const kiln_io_info *io)
{
    return io->ndim >= 1 && io->dims[0] < 0 && kt_config_dims_count(cfg, "input", io->name) != io->ndim;
}

/* A profile for every network input with a dynamic dim: dim 0 spans
 * 1..max_batch when the model batches; the other dims come from the
 * config's `dims` where the model leaves them dynamic (fixed there, since
 * one engine serves one shape). */
static int set_profiles(const kiln_network *net, const kt_json *cfg, int64_t max_batch,
                        kiln_build_config *bc, char *err, size_t errsize)
{
    for (int i = 0; i < kiln_network_num_inputs(net); i++) {
        kiln_io_info io;
        if (kiln_network_input_info(net, i, &io))
            return kt_failf(err, errsize, "model.onnx input %d: %s", i, kiln_errmsg());
        int dynamic = 0, off = max_batch > 0;
        for (int d = off; d < io.ndim; d++) dynamic |= io.dims[d] < 0;
        if (!dynamic && !(off && io.ndim && io.dims[0] < 0)) continue;
        const kt_json *dims = kt_json_get(config_input(cfg, io.name), "dims");
        int given = dims && dims->type == KT_JSON_ARRAY && dims->n > 0;
        if (given ? dims->n + off != io.ndim : dynamic)
            return kt_failf(err, errsize,
                         "input '%s' has dynamic dims in model.onnx: config.pbtxt must give it "
                         "%d dims (rank %d%s), found %d",
                         io.name, io.ndim - off, io.ndim,
                         off ? " less the batch dim" : "", given ? dims->n : 0);
        int64_t mn[KILN_MAX_DIMS], mx[KILN_MAX_DIMS];
        for (int d = 0; d < io.ndim; d++) {
            int64_t v = io.dims[d], c = v;
            if (off && d == 0) {
                mn[d] = 1;
                mx[d] = max_batch;
                continue;
            }
            if (given && (kt_json_int(dims->items[d - off], &c) || (c <= 0 && v < 0)))
                return kt_failf(err, errsize,
                             "input '%s' dim %d: config.pbtxt must give a fixed size > 0 "
                             "(kiln builds one shape per engine), found %s",
                             io.name, d, dims->items[d - off]->text ? dims->items[d - off]->text : "?");
            if (c < 0) c = v; /* -1 in the config where the model is fixed */
            if (v >= 0 && v != c)
                return kt_failf(err, errsize, "input '%s' dim %d: model.onnx says %lld, config.pbtxt %lld",
                             io.name, d, (long long)v, (long long)c);
            mn[d] = mx[d] = c;
        }
        if (kiln_build_config_set_profile(bc, io.name, io.ndim, mn, mn, mx))
            return kt_failf(err, errsize, "profile for input '%s': %s", io.name, kiln_errmsg());
    }
    return 0;
}

/* Import model.onnx and build it for m->device.  With auto-complete, a
 * config without max_batch_size gets `default_max_batch` when every input
 * has a dynamic dim 0 (the ONNX convention for a batch). */
static int build_onnx(kt_model *m, const char *onnx, const char *kiln_path, const kt_json *cfg,
                      const kt_load_options *opt, char *err, size_t errsize)
{
    kiln_network *net = NULL;
    kiln_build_config *bc = NULL;
    int rc = -1;
    if (kiln_onnx_import(onnx, NULL, &net)) {
        kt_failf(err, errsize, "%s: %s", onnx, kiln_errmsg());
        goto done;
    }
    if (!(bc = kiln_build_config_create())) {
        kt_failf(err, errsize, "out of memory");
        goto done;
    }
    if (opt->auto_complete && m->max_batch == 0 && opt->default_max_batch > 0) {
        int batches = kiln_network_num_inputs(net) > 0;
        for (int i = 0; batches && i < kiln_network_num_inputs(net); i++) {
            kiln_io_info io;
            batches = !kiln_network_input_info(net, i, &io) && batch_ok(cfg, &io);
        }
        if (batches) m->max_batch = opt->default_max_batch;
    }
    if (set_profiles(net, cfg, m->max_batch, bc, err, errsize)) goto done;
    kiln_build_config_set_device(bc, m->device);
    if (kiln_build(net, bc, &m->engine, NULL)) {
        kt_failf(err, errsize, "building %s%s: %s", onnx, m->device == KILN_DEVICE_CUDA ? " for CUDA" : "",
              kiln_errmsg());
        goto done;
    }
    /* The cache is an optimisation: a read-only repository still serves. */
    if (kiln_engine_save(m->engine, kiln_path))
        fprintf(stderr, "kiln backend: model '%s': could not cache %s: %s\n", m->name, kiln_path,
                kiln_errmsg());
    rc = 0;
done:
    kiln_build_config_free(bc);
    kiln_network_free(net);
    return rc;
}

/* Does the engine run on `device` (a CUDA engine has GPU layers). */
static int engine_on(const kiln_engine *e, kiln_device_kind device)
{
    int gpu = 0;
    kiln_engine_placement(e, &gpu, NULL);
    return (gpu > 0) == (device == KILN_DEVICE_CUDA);
}

static const char *device_name(kiln_device_kind d)
{
    return d == KILN_DEVICE_CUDA ? "CUDA (instance_group KIND_GPU)" : "the CPU (instance_group KIND_CPU)";
}

int kt_model_load(kt_model *m, const char *dir, uint64_t version, const char *config_json,
                  size_t config_size, const kt_load_options *opt, char **completed,
                  size_t *completed_size, char *err, size_t errsize)
{
    *completed = NULL;
    kt_json *cfg = kt_json_parse(config_json, config_size, err, errsize);
    if (!cfg) return -1;
    int rc = -1;
    const char *threads = param(cfg, "threads"), *plugins = param(cfg, "plugins");
    if (kt_json_int(kt_json_get(cfg, "max_batch_size"), &m->max_batch)) m->max_batch = 0;
    m->threads = threads ? atoi(threads) : 0;
    if (m->threads < 0 || m->threads > 1024) {
        kt_failf(err, errsize, "parameters.threads: expected 0..1024, found '%s'", threads);
        goto done;
    }
    if (kt_config_device(cfg, &m->device, err, errsize)) goto done;
    if (plugins && load_plugins(plugins, dir, err, errsize)) goto done;

    char kiln_path[4096], onnx[4096];
    snprintf(kiln_path, sizeof kiln_path, "%s/%llu/model.kiln", dir, (unsigned long long)version);
    snprintf(onnx, sizeof onnx, "%s/%llu/model.onnx", dir, (unsigned long long)version);
    /* The cached engine serves unless model.onnx is newer than it. */
    struct stat ks, os;
    int have_kiln = stat(kiln_path, &ks) == 0, have_onnx = stat(onnx, &os) == 0;
    if (have_kiln && have_onnx && os.st_mtime > ks.st_mtime) have_kiln = 0;
    if (have_kiln) {
        if (kiln_engine_load(kiln_path, &m->engine)) {
            kt_failf(err, errsize, "%s: %s", kiln_path, kiln_errmsg());
            goto done;
        }
        if (!engine_on(m->engine, m->device)) {
            kiln_engine_free(m->engine);
            m->engine = NULL;
            have_kiln = 0;
            if (!have_onnx) {
                kt_failf(err, errsize, "%s was built for %s, but the model is served on %s: rebuild it "
                      "(kiln build%s) or change instance_group", kiln_path,
                      m->device == KILN_DEVICE_CUDA ? "the CPU" : "CUDA", device_name(m->device),
                      m->device == KILN_DEVICE_CUDA ? " --device cuda" : "");
                goto done;
            }
        }
    }
    if (have_kiln) {
        if (opt->auto_complete && m->max_batch == 0) {
            int64_t batch = kt_engine_max_batch(m->engine);
            for (int i = 0; batch && i < kiln_engine_num_inputs(m->engine); i++) {
                kiln_io_info io;
                kiln_engine_io(m->engine, i, &io);
                if (!batch_ok(cfg, &io)) batch = 0;
            }
            m->max_batch = batch;
        }
    } else if (have_onnx) {
        if (build_onnx(m, onnx, kiln_path, cfg, opt, err, errsize)) goto done;
    } else {
        kt_failf(err, errsize, "model '%s' version %llu: neither %s nor %s exists", m->name,
              (unsigned long long)version, kiln_path, onnx);
        goto done;
    }
    for (int i = 0; m->max_batch > 0 && i < kiln_engine_num_inputs(m->engine); i++) {
        kiln_io_info io;
        kiln_engine_io(m->engine, i, &io);
        if (io.ndim == 0) {
            kt_failf(err, errsize, "max_batch_size %lld needs a batch dim, but input '%s' is a scalar",
                  (long long)m->max_batch, io.name);
            goto done;
        }
    }
    int changed = opt->auto_complete ? kt_config_complete(cfg, m->engine, m->max_batch) : 0;
    if (changed > 0 && !(*completed = kt_json_write(cfg, completed_size))) changed = -1;
    if (changed < 0) {
        kt_failf(err, errsize, "out of memory completing the config");
        goto done;
    }
    if (kt_config_check(cfg, m->engine, m->max_batch, err, errsize)) goto done;
    rc = 0;
done:
    if (rc) {
        kiln_engine_free(m->engine);
        m->engine = NULL;
        free(*completed);
        *completed = NULL;
    }
    kt_json_free(cfg);
    return rc;
}

void kt_model_free(kt_model *m)
{
    kiln_engine_free(m->engine);
    m->engine = NULL;
}
