/* backend.c — libtriton_kiln.so: the TRITONBACKEND entry points.
 *
 * Lifecycle (Triton calls these): TRITONBACKEND_Initialize once per process
 * (API version check); TRITONBACKEND_ModelInitialize per model version
 * (model.c: plugins, engine load or ONNX build + cache); one
 * TRITONBACKEND_ModelInstanceInitialize per instance of instance_group (a
 * kiln context on the shared engine; KIND_CPU only for now);
 * TRITONBACKEND_ModelInstanceExecute with the requests Triton's scheduler
 * (dynamic batcher or not) gathered for that instance.  Each request is
 * run on its own: its shape, batch included, is checked against the
 * engine's profile by kiln, and every failure becomes that request's error
 * response — a bad request never affects its neighbours or the server. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "model.h"
#include "triton_api.h"

typedef struct kt_instance {
    kt_model *model;
    kiln_context *ctx;
} kt_instance;

static TRITONSERVER_Error *errorf(TRITONSERVER_Error_Code code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static TRITONSERVER_Error *errorf(TRITONSERVER_Error_Code code, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return TRITONSERVER_ErrorNew(code, msg);
}

#define TRY(call)                                                                                  \
    do {                                                                                           \
        TRITONSERVER_Error *e_ = (call);                                                           \
        if (e_) return e_;                                                                         \
    } while (0)

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Live models and instances of this process, logged at each load and
 * unload so that a test (or an operator) can see that unloading a model
 * releases what loading it took. */
static _Atomic int live_models, live_instances;

static void log_counts(const char *what, const char *name)
{
    char msg[512];
    snprintf(msg, sizeof msg, "kiln backend: %s '%s' (live: %d models, %d instances)", what, name,
             live_models, live_instances);
    TRITONSERVER_Error *e = TRITONSERVER_LogMessage(TRITONSERVER_LOG_INFO, __FILE__, __LINE__, msg);
    if (e) TRITONSERVER_ErrorDelete(e);
}

/* Triton's default-max-batch-size (--backend-config=default-max-batch-size=N,
 * default 4): the batch auto-complete gives an ONNX model that batches. */
static int64_t default_max_batch = 4;

KILN_TRITON_EXPORT TRITONSERVER_Error *TRITONBACKEND_Initialize(TRITONBACKEND_Backend *backend)
{
    uint32_t major = 0, minor = 0;
    TRY(TRITONBACKEND_ApiVersion(&major, &minor));
    if (major != KILN_TRITON_API_MAJOR || minor < KILN_TRITON_API_MINOR)
        return errorf(TRITONSERVER_ERROR_UNSUPPORTED,
                      "kiln backend needs TRITONBACKEND API %u.%u or a later %u.x, server has %u.%u",
                      KILN_TRITON_API_MAJOR, KILN_TRITON_API_MINOR, KILN_TRITON_API_MAJOR, major,
                      minor);
    /* {"cmdline": {"default-max-batch-size": "4", ...}}; the message is Triton's. */
    TRITONSERVER_Message *msg = NULL;
    const char *json = NULL;
    size_t size = 0;
    TRY(TRITONBACKEND_BackendConfig(backend, &msg));
    TRITONSERVER_Error *e = TRITONSERVER_MessageSerializeToJson(msg, &json, &size);
    char err[256];
    kt_json *cfg = e ? NULL : kt_json_parse(json, size, err, sizeof err);
    int64_t n = 0;
    if (!e && !kt_json_int(kt_json_get(kt_json_get(cfg, "cmdline"), "default-max-batch-size"), &n))
        default_max_batch = n;
    kt_json_free(cfg);
    return e;
}

KILN_TRITON_EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model *model)
{
    const char *name = NULL, *dir = NULL, *json = NULL;
    uint64_t version = 0;
    TRITONBACKEND_ArtifactType art;
    TRY(TRITONBACKEND_ModelName(model, &name));
    TRY(TRITONBACKEND_ModelVersion(model, &version));
    TRY(TRITONBACKEND_ModelRepository(model, &art, &dir));
    if (art != TRITONBACKEND_ARTIFACT_FILESYSTEM)
        return errorf(TRITONSERVER_ERROR_UNSUPPORTED,
                      "model '%s': kiln loads models from a file system repository only", name);
    TRITONSERVER_Message *msg = NULL;
    size_t size = 0;
    kt_load_options opt = { 0, default_max_batch };
    bool complete = false;
    TRY(TRITONBACKEND_ModelAutoCompleteConfig(model, &complete));
    opt.auto_complete = complete;
    TRY(TRITONBACKEND_ModelConfig(model, 1, &msg));
    TRITONSERVER_Error *e = TRITONSERVER_MessageSerializeToJson(msg, &json, &size);
    kt_model *m = e ? NULL : calloc(1, sizeof *m);
    char *completed = NULL;
    size_t completed_size = 0;
    if (!e && !m) e = errorf(TRITONSERVER_ERROR_INTERNAL, "model '%s': out of memory", name);
    if (!e) {
        char err[2048];
        snprintf(m->name, sizeof m->name, "%s", name);
        if (kt_model_load(m, dir, version, json, size, &opt, &completed, &completed_size, err,
                          sizeof err))
            e = errorf(TRITONSERVER_ERROR_INVALID_ARG, "kiln model '%s': %s", name, err);
    }
    TRITONSERVER_MessageDelete(msg);
    if (!e && completed) { /* auto-complete filled in what config.pbtxt left out */
        TRITONSERVER_Message *done = NULL;
        e = TRITONSERVER_MessageNewFromSerializedJson(&done, completed, completed_size);
        if (!e) e = TRITONBACKEND_ModelSetConfig(model, 1, done);
        if (done) TRITONSERVER_MessageDelete(done);
    }
    free(completed);
    if (!e) e = TRITONBACKEND_ModelSetState(model, m);
    if (e && m) {
        kt_model_free(m);
        free(m);
    } else if (!e) {
        live_models++;
        log_counts("loaded model", name);
    }
    return e;
}

KILN_TRITON_EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model *model)
{
    void *state = NULL;
    TRY(TRITONBACKEND_ModelState(model, &state));
    if (state) {
        kt_model *m = state;
        live_models--;
        log_counts("unloaded model", m->name);
        kt_model_free(m);
        free(m);
    }
    return NULL;
}

KILN_TRITON_EXPORT TRITONSERVER_Error *
TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance *instance)
{
    TRITONBACKEND_Model *model = NULL;
    TRITONSERVER_InstanceGroupKind kind;
    const char *iname = NULL;
    void *state = NULL;
    TRY(TRITONBACKEND_ModelInstanceName(instance, &iname));
    TRY(TRITONBACKEND_ModelInstanceKind(instance, &kind));
    TRY(TRITONBACKEND_ModelInstanceModel(instance, &model));
    TRY(TRITONBACKEND_ModelState(model, &state));
    kt_model *m = state;
    /* The engine was built for the device the config's groups ask for
     * (model.c); each instance must be of that kind, and a GPU instance on
     * the one GPU kiln drives (its own context, hence its own stream). */
    TRITONSERVER_InstanceGroupKind want = m->device == KILN_DEVICE_CUDA ? TRITONSERVER_INSTANCEGROUPKIND_GPU
                                                                         : TRITONSERVER_INSTANCEGROUPKIND_CPU;
    if (kind != want)
        return errorf(TRITONSERVER_ERROR_UNSUPPORTED,
                      "instance '%s': kind %d, but model '%s' is built for %s", iname, (int)kind,
                      m->name, m->device == KILN_DEVICE_CUDA ? "KIND_GPU" : "KIND_CPU");
    if (kind == TRITONSERVER_INSTANCEGROUPKIND_GPU) {
        int32_t id = -1;
        TRY(TRITONBACKEND_ModelInstanceDeviceId(instance, &id));
        if (id != kt_cuda_device_id())
            return errorf(TRITONSERVER_ERROR_UNSUPPORTED,
                          "instance '%s': on GPU %d, but kiln drives GPU %d ($KILN_CUDA_DEVICE)", iname,
                          (int)id, kt_cuda_device_id());
    }
    kt_instance *inst = calloc(1, sizeof *inst);
    if (!inst) return errorf(TRITONSERVER_ERROR_INTERNAL, "instance '%s': out of memory", iname);
    inst->model = m;
    if (kiln_context_create(m->engine, m->threads, &inst->ctx)) {
        TRITONSERVER_Error *e = errorf(TRITONSERVER_ERROR_INTERNAL, "instance '%s': %s", iname,
                                       kiln_errmsg());
        free(inst);
        return e;
    }
    TRITONSERVER_Error *e = TRITONBACKEND_ModelInstanceSetState(instance, inst);
    if (e) {
        kiln_context_free(inst->ctx);
        free(inst);
    } else {
        live_instances++;
        log_counts("started instance", iname);
    }
    return e;
}

KILN_TRITON_EXPORT TRITONSERVER_Error *
TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance *instance)
{
    void *state = NULL;
    TRY(TRITONBACKEND_ModelInstanceState(instance, &state));
    kt_instance *inst = state;
    if (inst) {
        const char *iname = "?";
        TRITONSERVER_Error *e = TRITONBACKEND_ModelInstanceName(instance, &iname);
        if (e) TRITONSERVER_ErrorDelete(e);
        kiln_context_free(inst->ctx);
        free(inst);
        live_instances--;
        log_counts("stopped instance", iname);
    }
    return NULL;
}

/* ---- execution ----------------------------------------------------------
 * Requests are read and checked first (read_request), then consecutive ones
 * whose inputs agree on every dim but the batch dim are concatenated into
 * one kiln run, up to the engine profile's largest batch: this is where
 * Triton's dynamic batcher pays off.  If a gathered run fails, its requests
 * are run again one by one, so every error is the request's own. */

typedef struct req_info {
    TRITONBACKEND_Input *in[KILN_MAX_IO];
    int64_t dims[KILN_MAX_IO][KILN_MAX_DIMS];
    int rank[KILN_MAX_IO];
    uint64_t bytes[KILN_MAX_IO];
    uint32_t nbuf[KILN_MAX_IO];
} req_info;

/* Check a request's inputs against the engine's (names, dtypes, ranks,
 * byte sizes) and record them in *ri; the profile is checked by kiln when
 * the shapes are set. */
static TRITONSERVER_Error *read_request(const kt_instance *inst, TRITONBACKEND_Request *req,
                                        req_info *ri)
{
    const kiln_engine *e = inst->model->engine;
    int nin = kiln_engine_num_inputs(e);
    uint32_t given = 0;
    TRY(TRITONBACKEND_RequestInputCount(req, &given));
    if ((int)given != nin)
        return errorf(TRITONSERVER_ERROR_INVALID_ARG, "model '%s' takes %d inputs, request has %u",
                      inst->model->name, nin, given);
    for (int i = 0; i < nin; i++) {
        kiln_io_info io;
        kiln_engine_io(e, i, &io);
        TRITONBACKEND_Input *in = NULL;
        if (TRITONBACKEND_RequestInput(req, io.name, &in) || !in)
            return errorf(TRITONSERVER_ERROR_INVALID_ARG, "request has no input '%s'", io.name);
        TRITONSERVER_DataType dt;
        const int64_t *shape = NULL;
        uint32_t ndim = 0;
        TRY(TRITONBACKEND_InputProperties(in, NULL, &dt, &shape, &ndim, &ri->bytes[i], &ri->nbuf[i]));
        if (dt != kt_triton_dtype(io.dtype))
            return errorf(TRITONSERVER_ERROR_INVALID_ARG, "input '%s': expected %s, found %s",
                          io.name, kt_triton_type_name(kt_triton_dtype(io.dtype)), kt_triton_type_name(dt));
        /* A config `reshape` may give a fixed-shape input as e.g. [1] for a
         * scalar: accepted when the element counts agree. */
        int fixed = 1;
        int64_t n = 1, want = 1;
        for (int d = 0; d < io.ndim; d++) fixed &= io.dims[d] >= 0, want *= io.dims[d];
        for (uint32_t d = 0; d < ndim; d++) n *= shape[d];
        if ((int)ndim != io.ndim && !(fixed && n == want))
            return errorf(TRITONSERVER_ERROR_INVALID_ARG, "input '%s': expected rank %d, found %u",
                          io.name, io.ndim, ndim);
        ri->in[i] = in;
        ri->rank[i] = io.ndim;
        memcpy(ri->dims[i], (int)ndim == io.ndim ? shape : io.dims, (size_t)io.ndim * sizeof(int64_t));
        uint64_t need = (uint64_t)n * kiln_dtype_size(io.dtype);
        if (ri->bytes[i] != need)
            return errorf(TRITONSERVER_ERROR_INVALID_ARG,
                          "input '%s': its shape needs %llu bytes, the request holds %llu", io.name,
                          (unsigned long long)need, (unsigned long long)ri->bytes[i]);
    }
    return NULL;
}

/* Copy input i of a request (all its buffers) to dst. */
static TRITONSERVER_Error *gather(const req_info *ri, int i, char *dst)
{
    uint64_t at = 0;
    for (uint32_t b = 0; b < ri->nbuf[i]; b++) {
        const void *buf = NULL;
        uint64_t size = 0;
        TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
        int64_t mid = 0;
        TRY(TRITONBACKEND_InputBuffer(ri->in[i], b, &buf, &size, &mt, &mid));
        if (mt == TRITONSERVER_MEMORY_GPU)
            return errorf(TRITONSERVER_ERROR_UNSUPPORTED,
                          "input %d: GPU memory is bound only to unbatched requests", i);
        if (size > ri->bytes[i] - at)
            return errorf(TRITONSERVER_ERROR_INVALID_ARG, "input %d: buffers exceed %llu bytes", i,
                          (unsigned long long)ri->bytes[i]);
        memcpy(dst + at, buf, size);
        at += size;
    }
    if (at != ri->bytes[i])
        return errorf(TRITONSERVER_ERROR_INVALID_ARG, "input %d: buffers hold %llu of %llu bytes", i,
                      (unsigned long long)at, (unsigned long long)ri->bytes[i]);
    return NULL;
}

/* May request b join a run started by request a: same dims but dim 0. */
static int same_inner(const req_info *a, const req_info *b, int nin)
{
    for (int i = 0; i < nin; i++)
        if (a->rank[i] < 1 || memcmp(a->dims[i] + 1, b->dims[i] + 1, (size_t)(a->rank[i] - 1) * sizeof(int64_t)))
            return 0;
    return 1;
}

static int requested(TRITONBACKEND_Request *req, const char *name)
{
    uint32_t n = 0;
    if (TRITONBACKEND_RequestOutputCount(req, &n) || n == 0) return 1;
    for (uint32_t i = 0; i < n; i++) {
        const char *o = NULL;
        if (!TRITONBACKEND_RequestOutputName(req, i, &o) && o && !strcmp(o, name)) return 1;
    }
    return 0;
}

/* Rows [row, row + rows) of every requested output (dim 0; a run of one
 * request: row 0, rows = the whole batch) into the response. */
static TRITONSERVER_Error *write_outputs(kt_instance *inst, TRITONBACKEND_Request *req,
                                         TRITONBACKEND_Response *resp, int64_t row, int64_t rows,
                                         int64_t total)
{
    const kiln_engine *e = inst->model->engine;
    int nin = kiln_engine_num_inputs(e);
    for (int i = 0; i < kiln_engine_num_outputs(e); i++) {
        kiln_io_info io;
        kiln_engine_io(e, nin + i, &io);
        if (!requested(req, io.name)) continue;
        int ndim = 0;
        int64_t dims[KILN_MAX_DIMS];
        if (kiln_context_shape(inst->ctx, io.name, &ndim, dims))
            return errorf(TRITONSERVER_ERROR_INTERNAL, "%s", kiln_errmsg());
        if (rows != total && (ndim < 1 || dims[0] != total))
            return errorf(TRITONSERVER_ERROR_INTERNAL,
                          "output '%s': dim 0 is not the batch (%lld rows for batch %lld)", io.name,
                          ndim ? (long long)dims[0] : 0LL, (long long)total);
        uint64_t bytes = kiln_dtype_size(io.dtype);
        for (int d = 0; d < ndim; d++) bytes *= (uint64_t)dims[d];
        uint64_t offset = 0;
        if (rows != total) {
            bytes = bytes / (uint64_t)total;
            offset = bytes * (uint64_t)row;
            bytes *= (uint64_t)rows;
            dims[0] = rows;
        }
        TRITONBACKEND_Output *out = NULL;
        void *buf = NULL;
        TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
        int64_t mid = 0;
        TRY(TRITONBACKEND_ResponseOutput(resp, &out, io.name, kt_triton_dtype(io.dtype), dims,
                                         (uint32_t)ndim));
        TRY(TRITONBACKEND_OutputBuffer(out, &buf, bytes, &mt, &mid));
        if (mt == TRITONSERVER_MEMORY_GPU)
            return errorf(TRITONSERVER_ERROR_UNSUPPORTED, "output '%s': GPU memory not supported",
                          io.name);
        if (bytes) memcpy(buf, (const char *)kiln_context_output(inst->ctx, io.name) + offset, bytes);
    }
    return NULL;
}

/* One kiln run over requests [0, n) (n > 1: concatenated along dim 0).
 * A failure of the run itself is returned (nothing answered); otherwise
 * errs[k] gets each request's own outcome of writing its outputs. */
static TRITONSERVER_Error *run_group(kt_instance *inst, TRITONBACKEND_Request **reqs,
                                     TRITONBACKEND_Response **resps, const req_info *ri, int n,
                                     TRITONSERVER_Error **errs, uint64_t *cs, uint64_t *ce)
{
    const kiln_engine *e = inst->model->engine;
    int nin = kiln_engine_num_inputs(e);
    void *owned[KILN_MAX_IO] = { 0 };
    int64_t total = n > 1 ? 0 : (ri[0].rank[0] ? ri[0].dims[0][0] : 1);
    for (int k = 0; n > 1 && k < n; k++) total += ri[k].dims[0][0];
    TRITONSERVER_Error *err = NULL;
    for (int i = 0; i < nin && !err; i++) {
        kiln_io_info io;
        kiln_engine_io(e, i, &io);
        int64_t dims[KILN_MAX_DIMS];
        memcpy(dims, ri[0].dims[i], sizeof dims);
        uint64_t bytes = 0;
        for (int k = 0; k < n; k++) bytes += ri[k].bytes[i];
        if (n > 1) dims[0] = total;
        if (kiln_context_set_input_shape(inst->ctx, io.name, ri[0].rank[i], dims)) {
            err = errorf(TRITONSERVER_ERROR_INVALID_ARG, "%s", kiln_errmsg());
            break;
        }
        const void *data = NULL;
        if (n == 1 && ri[0].nbuf[i] == 1) { /* bind Triton's buffer in place */
            uint64_t size;
            TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
            int64_t mid = 0;
            err = TRITONBACKEND_InputBuffer(ri[0].in[i], 0, &data, &size, &mt, &mid);
            /* A CUDA engine takes device pointers as inputs (unified addressing). */
            int gpu_ok = inst->model->device == KILN_DEVICE_CUDA;
            if (!err && ((mt == TRITONSERVER_MEMORY_GPU && !gpu_ok) || size != bytes))
                err = errorf(TRITONSERVER_ERROR_INVALID_ARG, "input '%s': %s", io.name,
                             size != bytes ? "buffer size differs from the input's"
                                           : "GPU memory is served by KIND_GPU models only");
        } else if (!(data = owned[i] = malloc(bytes ? bytes : 1))) {
            err = errorf(TRITONSERVER_ERROR_INTERNAL, "input '%s': out of memory", io.name);
        } else {
            uint64_t at = 0;
            for (int k = 0; k < n && !err; k++) {
                err = gather(&ri[k], i, (char *)owned[i] + at);
                at += ri[k].bytes[i];
            }
        }
        /* kiln only reads inputs; the binding is not const because outputs share it. */
        if (!err && kiln_context_bind(inst->ctx, io.name, (void *)data, bytes))
            err = errorf(TRITONSERVER_ERROR_INTERNAL, "%s", kiln_errmsg());
    }
    *cs = now_ns();
    if (!err && kiln_context_run(inst->ctx))
        err = errorf(TRITONSERVER_ERROR_INVALID_ARG, "%s", kiln_errmsg());
    *ce = now_ns();
    /* Rows can be handed back only if every output's dim 0 is the batch
     * (not so for e.g. a data-dependent output): otherwise run alone. */
    for (int i = 0; !err && n > 1 && i < kiln_engine_num_outputs(e); i++) {
        kiln_io_info io;
        int ndim = 0;
        int64_t dims[KILN_MAX_DIMS];
        kiln_engine_io(e, nin + i, &io);
        if (kiln_context_shape(inst->ctx, io.name, &ndim, dims) || ndim < 1 || dims[0] != total)
            err = errorf(TRITONSERVER_ERROR_INTERNAL, "output '%s': dim 0 is not the batch", io.name);
    }
    for (int k = 0, row = 0; !err && k < n; row += (int)(n > 1 ? ri[k].dims[0][0] : 0), k++)
        errs[k] = write_outputs(inst, reqs[k], resps[k], row, n > 1 ? ri[k].dims[0][0] : total, total);
    for (int i = 0; i < nin; i++) free(owned[i]);
    return err;
}

/* Send request k's response (with its error, if any), report its
 * statistics and release it. */
static void finish(TRITONBACKEND_ModelInstance *instance, TRITONBACKEND_Request *req,
                   TRITONBACKEND_Response *resp, TRITONSERVER_Error *err, uint64_t exec_start,
                   uint64_t cs, uint64_t ce)
{
    if (resp) {
        TRITONSERVER_Error *se = TRITONBACKEND_ResponseSend(resp, TRITONSERVER_RESPONSE_COMPLETE_FINAL, err);
        if (se) TRITONSERVER_ErrorDelete(se);
    }
    TRITONSERVER_Error *st = TRITONBACKEND_ModelInstanceReportStatistics(
        instance, req, err == NULL, exec_start, cs < exec_start ? exec_start : cs, ce < cs ? cs : ce,
        now_ns());
    if (st) TRITONSERVER_ErrorDelete(st);
    if (err) TRITONSERVER_ErrorDelete(err);
    TRITONSERVER_Error *re = TRITONBACKEND_RequestRelease(req, TRITONSERVER_REQUEST_RELEASE_ALL);
    if (re) TRITONSERVER_ErrorDelete(re);
}

KILN_TRITON_EXPORT TRITONSERVER_Error *
TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance *instance,
                                   TRITONBACKEND_Request **requests, const uint32_t count)
{
    void *state = NULL;
    TRY(TRITONBACKEND_ModelInstanceState(instance, &state));
    kt_instance *inst = state;
    uint64_t exec_start = now_ns();
    const kiln_engine *e = inst->model->engine;
    int nin = kiln_engine_num_inputs(e);
    req_info *ri = calloc(count ? count : 1, sizeof *ri);
    TRITONBACKEND_Response **resps = calloc(count ? count : 1, sizeof *resps);
    TRITONSERVER_Error **errs = calloc(count ? count : 1, sizeof *errs);
    if (!ri || !resps || !errs) {
        free(ri), free(resps), free(errs);
        return errorf(TRITONSERVER_ERROR_INTERNAL, "kiln backend: out of memory for %u requests", count);
    }
    /* The largest batch one run may take: the engine profile's dim-0 max. */
    int64_t max_rows = inst->model->max_batch > 0 ? INT64_MAX : 0;
    for (int i = 0; i < nin && max_rows; i++) {
        kiln_io_info io;
        kiln_engine_io(e, i, &io);
        int64_t cap = io.ndim < 1 ? 0 : io.dims[0] >= 0 ? io.dims[0] : io.max[0];
        if (cap < max_rows) max_rows = cap;
    }
    for (uint32_t r = 0; r < count; r++) {
        errs[r] = TRITONBACKEND_ResponseNew(&resps[r], requests[r]);
        if (!errs[r]) errs[r] = read_request(inst, requests[r], &ri[r]);
    }
    for (uint32_t r = 0; r < count;) {
        if (errs[r]) {
            finish(instance, requests[r], resps[r], errs[r], exec_start, exec_start, exec_start);
            r++;
            continue;
        }
        uint32_t n = 1;
        int64_t rows = max_rows ? ri[r].dims[0][0] : 0;
        while (max_rows && r + n < count && !errs[r + n] && same_inner(&ri[r], &ri[r + n], nin) &&
               rows + ri[r + n].dims[0][0] <= max_rows)
            rows += ri[r + n++].dims[0][0];
        uint64_t cs = 0, ce = 0;
        TRITONSERVER_Error *gerr = run_group(inst, requests + r, resps + r, ri + r, (int)n, errs + r, &cs, &ce);
        if (gerr && n > 1) { /* retry alone: each request gets its own answer */
            TRITONSERVER_ErrorDelete(gerr);
            for (uint32_t k = r; k < r + n; k++) {
                TRITONSERVER_Error *one = run_group(inst, requests + k, resps + k, ri + k, 1, errs + k, &cs, &ce);
                if (one) errs[k] = one;
                finish(instance, requests[k], resps[k], errs[k], exec_start, cs, ce);
            }
        } else {
            for (uint32_t k = r; k < r + n; k++)
                finish(instance, requests[k], resps[k], k == r && gerr ? gerr : errs[k], exec_start, cs, ce);
            if (!gerr) {
                TRITONSERVER_Error *st = TRITONBACKEND_ModelInstanceReportBatchStatistics(
                    instance, (uint64_t)(rows ? rows : 1), exec_start, cs, ce, now_ns());
                if (st) TRITONSERVER_ErrorDelete(st);
            }
        }
        r += n;
    }
    free(ri), free(resps), free(errs);
    return NULL;
}
