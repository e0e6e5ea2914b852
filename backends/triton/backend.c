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

static TRITONSERVER_DataType to_triton(kiln_dtype t)
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

/* Triton's names for its types, for error messages. */
static const char *triton_type_name(TRITONSERVER_DataType t)
{
    static const char *const names[] = { "INVALID", "BOOL",  "UINT8", "UINT16", "UINT32",
                                         "UINT64",  "INT8",  "INT16", "INT32",  "INT64",
                                         "FP16",    "FP32",  "FP64",  "BYTES",  "BF16" };
    return (unsigned)t < sizeof names / sizeof *names ? names[t] : "?";
}

KILN_TRITON_EXPORT TRITONSERVER_Error *TRITONBACKEND_Initialize(TRITONBACKEND_Backend *backend)
{
    (void)backend;
    uint32_t major = 0, minor = 0;
    TRY(TRITONBACKEND_ApiVersion(&major, &minor));
    if (major != KILN_TRITON_API_MAJOR || minor < KILN_TRITON_API_MINOR)
        return errorf(TRITONSERVER_ERROR_UNSUPPORTED,
                      "kiln backend needs TRITONBACKEND API %u.%u or a later %u.x, server has %u.%u",
                      KILN_TRITON_API_MAJOR, KILN_TRITON_API_MINOR, KILN_TRITON_API_MAJOR, major,
                      minor);
    return NULL;
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
    TRY(TRITONBACKEND_ModelConfig(model, 1, &msg));
    TRITONSERVER_Error *e = TRITONSERVER_MessageSerializeToJson(msg, &json, &size);
    kt_model *m = e ? NULL : calloc(1, sizeof *m);
    if (!e && !m) e = errorf(TRITONSERVER_ERROR_INTERNAL, "model '%s': out of memory", name);
    if (!e) {
        char err[2048];
        snprintf(m->name, sizeof m->name, "%s", name);
        if (kt_model_load(m, dir, version, json, size, err, sizeof err))
            e = errorf(TRITONSERVER_ERROR_INVALID_ARG, "kiln model '%s': %s", name, err);
    }
    TRITONSERVER_MessageDelete(msg);
    if (!e) e = TRITONBACKEND_ModelSetState(model, m);
    if (e && m) {
        kt_model_free(m);
        free(m);
    }
    return e;
}

KILN_TRITON_EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model *model)
{
    void *state = NULL;
    TRY(TRITONBACKEND_ModelState(model, &state));
    if (state) {
        kt_model_free(state);
        free(state);
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
    if (kind != TRITONSERVER_INSTANCEGROUPKIND_CPU)
        return errorf(TRITONSERVER_ERROR_UNSUPPORTED,
                      "instance '%s': the kiln backend serves instance_group kind KIND_CPU only "
                      "(found kind %d)", iname, (int)kind);
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
        kiln_context_free(inst->ctx);
        free(inst);
    }
    return NULL;
}

/* Bind one engine input from the request.  A tensor that arrives in several
 * buffers is gathered into `*gathered` (freed by the caller). */
static TRITONSERVER_Error *bind_input(kt_instance *inst, TRITONBACKEND_Request *req,
                                      const kiln_io_info *io, void **gathered)
{
    TRITONBACKEND_Input *in = NULL;
    if (TRITONBACKEND_RequestInput(req, io->name, &in) || !in)
        return errorf(TRITONSERVER_ERROR_INVALID_ARG, "request has no input '%s'", io->name);
    TRITONSERVER_DataType dt;
    const int64_t *shape = NULL;
    uint32_t ndim = 0, nbuf = 0;
    uint64_t bytes = 0;
    TRY(TRITONBACKEND_InputProperties(in, NULL, &dt, &shape, &ndim, &bytes, &nbuf));
    if (dt != to_triton(io->dtype))
        return errorf(TRITONSERVER_ERROR_INVALID_ARG, "input '%s': expected %s, found %s",
                      io->name, triton_type_name(to_triton(io->dtype)), triton_type_name(dt));
    /* A config `reshape` may give a fixed-shape input as e.g. [1] for a scalar:
     * accepted when the element counts agree. */
    int64_t dims[KILN_MAX_DIMS];
    int rank = (int)ndim, fixed = 1;
    int64_t n = 1, want = 1;
    for (int d = 0; d < io->ndim; d++) fixed &= io->dims[d] >= 0, want *= io->dims[d];
    for (uint32_t d = 0; d < ndim; d++) n *= shape[d];
    if (rank != io->ndim && fixed && n == want) {
        rank = io->ndim;
        memcpy(dims, io->dims, sizeof dims);
    } else if (rank != io->ndim) {
        return errorf(TRITONSERVER_ERROR_INVALID_ARG, "input '%s': expected rank %d, found %d",
                      io->name, io->ndim, rank);
    } else {
        memcpy(dims, shape, (size_t)rank * sizeof *dims);
    }
    if (kiln_context_set_input_shape(inst->ctx, io->name, rank, dims))
        return errorf(TRITONSERVER_ERROR_INVALID_ARG, "%s", kiln_errmsg());
    uint64_t need = (uint64_t)n * kiln_dtype_size(io->dtype);
    if (bytes != need)
        return errorf(TRITONSERVER_ERROR_INVALID_ARG,
                      "input '%s': its shape needs %llu bytes, the request holds %llu", io->name,
                      (unsigned long long)need, (unsigned long long)bytes);
    const void *data = NULL;
    if (nbuf > 1 && !(data = *gathered = malloc(bytes ? bytes : 1)))
        return errorf(TRITONSERVER_ERROR_INTERNAL, "input '%s': out of memory", io->name);
    uint64_t at = 0;
    for (uint32_t b = 0; b < nbuf; b++) {
        const void *buf = NULL;
        uint64_t size = 0;
        TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
        int64_t mid = 0;
        TRY(TRITONBACKEND_InputBuffer(in, b, &buf, &size, &mt, &mid));
        if (mt == TRITONSERVER_MEMORY_GPU)
            return errorf(TRITONSERVER_ERROR_UNSUPPORTED, "input '%s': GPU memory not supported",
                          io->name);
        if (size > bytes - at)
            return errorf(TRITONSERVER_ERROR_INVALID_ARG, "input '%s': buffers exceed %llu bytes",
                          io->name, (unsigned long long)bytes);
        if (nbuf == 1) data = buf;
        else memcpy((char *)*gathered + at, buf, size);
        at += size;
    }
    /* kiln only reads inputs; the binding is not const because outputs share it. */
    if (kiln_context_bind(inst->ctx, io->name, (void *)data, bytes))
        return errorf(TRITONSERVER_ERROR_INTERNAL, "%s", kiln_errmsg());
    return NULL;
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

static TRITONSERVER_Error *write_outputs(kt_instance *inst, TRITONBACKEND_Request *req,
                                         TRITONBACKEND_Response *resp)
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
        uint64_t bytes = kiln_dtype_size(io.dtype);
        for (int d = 0; d < ndim; d++) bytes *= (uint64_t)dims[d];
        TRITONBACKEND_Output *out = NULL;
        void *buf = NULL;
        TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
        int64_t mid = 0;
        TRY(TRITONBACKEND_ResponseOutput(resp, &out, io.name, to_triton(io.dtype), dims,
                                         (uint32_t)ndim));
        TRY(TRITONBACKEND_OutputBuffer(out, &buf, bytes, &mt, &mid));
        if (mt == TRITONSERVER_MEMORY_GPU)
            return errorf(TRITONSERVER_ERROR_UNSUPPORTED, "output '%s': GPU memory not supported",
                          io.name);
        if (bytes) memcpy(buf, kiln_context_output(inst->ctx, io.name), bytes);
    }
    return NULL;
}

/* One request: bind, run, write the response's outputs. */
static TRITONSERVER_Error *run_request(kt_instance *inst, TRITONBACKEND_Request *req,
                                       TRITONBACKEND_Response *resp, uint64_t *compute_start,
                                       uint64_t *compute_end)
{
    const kiln_engine *e = inst->model->engine;
    int nin = kiln_engine_num_inputs(e);
    uint32_t given = 0;
    TRY(TRITONBACKEND_RequestInputCount(req, &given));
    if ((int)given != nin)
        return errorf(TRITONSERVER_ERROR_INVALID_ARG, "model '%s' takes %d inputs, request has %u",
                      inst->model->name, nin, given);
    void *gathered[KILN_MAX_IO] = { 0 };
    TRITONSERVER_Error *err = NULL;
    for (int i = 0; i < nin && !err; i++) {
        kiln_io_info io;
        kiln_engine_io(e, i, &io);
        err = bind_input(inst, req, &io, &gathered[i]);
    }
    *compute_start = now_ns();
    if (!err && kiln_context_run(inst->ctx))
        err = errorf(TRITONSERVER_ERROR_INVALID_ARG, "%s", kiln_errmsg());
    *compute_end = now_ns();
    if (!err) err = write_outputs(inst, req, resp);
    for (int i = 0; i < nin; i++) free(gathered[i]);
    return err;
}

KILN_TRITON_EXPORT TRITONSERVER_Error *
TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance *instance,
                                   TRITONBACKEND_Request **requests, const uint32_t count)
{
    void *state = NULL;
    TRY(TRITONBACKEND_ModelInstanceState(instance, &state));
    kt_instance *inst = state;
    uint64_t exec_start = now_ns(), first_compute = 0, last_compute = 0;
    uint64_t done = 0;
    for (uint32_t r = 0; r < count; r++) {
        TRITONBACKEND_Request *req = requests[r];
        TRITONBACKEND_Response *resp = NULL;
        uint64_t cs = now_ns(), ce = cs;
        TRITONSERVER_Error *err = TRITONBACKEND_ResponseNew(&resp, req);
        if (!err) err = run_request(inst, req, resp, &cs, &ce);
        if (!first_compute) first_compute = cs;
        last_compute = ce;
        if (resp) {
            TRITONSERVER_Error *se = TRITONBACKEND_ResponseSend(resp, TRITONSERVER_RESPONSE_COMPLETE_FINAL, err);
            if (se) TRITONSERVER_ErrorDelete(se);
        }
        TRITONSERVER_Error *st = TRITONBACKEND_ModelInstanceReportStatistics(
            instance, req, err == NULL, exec_start, cs, ce, now_ns());
        if (st) TRITONSERVER_ErrorDelete(st);
        done += err == NULL;
        if (err) TRITONSERVER_ErrorDelete(err);
        TRITONSERVER_Error *re = TRITONBACKEND_RequestRelease(req, TRITONSERVER_REQUEST_RELEASE_ALL);
        if (re) TRITONSERVER_ErrorDelete(re);
    }
    if (done) {
        TRITONSERVER_Error *st = TRITONBACKEND_ModelInstanceReportBatchStatistics(
            instance, done, exec_start, first_compute, last_compute, now_ns());
        if (st) TRITONSERVER_ErrorDelete(st);
    }
    return NULL;
}
