/* engine.c — build, engines and execution contexts for kiln._kiln.  The
 * GIL is released around kiln_build, engine loading and kiln_context_run,
 * so several Python threads can run contexts of one engine at once
 * (Python plugins take the GIL back inside their callbacks). */
#include "kilnpy.h"

#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_) return kilnpy_raise(rc_);                                                         \
    } while (0)

static void engine_free(PyObject *cap) { kiln_engine_free(PyCapsule_GetPointer(cap, "kiln.engine")); }
static void context_free(PyObject *cap) { kiln_context_free(PyCapsule_GetPointer(cap, "kiln.context")); }

static PyObject *wrap_engine(kiln_engine *e) {
    PyObject *cap = PyCapsule_New(e, "kiln.engine", engine_free);
    if (!cap) kiln_engine_free(e);
    return cap;
}

/* build(network, config) -> (engine, stats dict) */
static PyObject *py_build(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ncap, *ccap;
    if (!PyArg_ParseTuple(args, "OO", &ncap, &ccap)) return NULL;
    kiln_network *net = kilnpy_ptr(ncap, "kiln.network");
    kiln_build_config *cfg = net ? kilnpy_ptr(ccap, "kiln.config") : NULL;
    if (!cfg) return NULL;
    kiln_engine *e = NULL;
    kiln_build_stats st = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = kiln_build(net, cfg, &e, &st);
    Py_END_ALLOW_THREADS
    CHECK(rc);
    PyObject *cap = wrap_engine(e);
    if (!cap) return NULL;
    return Py_BuildValue("(N{sisisisisisisisisisisd})", cap, "layers", st.layers, "folded", st.folded, "reformats",
                         st.reformats, "candidates", st.candidates, "timed", st.timed, "cache_hits", st.cache_hits,
                         "cache_dedup", st.cache_dedup, "fused", st.fused, "refined", st.refined, "refine_changed",
                         st.refine_changed, "build_ms", st.build_ms);
}

static PyObject *py_engine_serialize(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap;
    if (!PyArg_ParseTuple(args, "O", &cap)) return NULL;
    kiln_engine *e = kilnpy_ptr(cap, "kiln.engine");
    if (!e) return NULL;
    void *buf = NULL;
    size_t size = 0;
    CHECK(kiln_engine_serialize(e, &buf, &size));
    PyObject *b = PyBytes_FromStringAndSize(buf, (Py_ssize_t)size);
    kiln_free(buf);
    return b;
}

static PyObject *py_engine_save(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap;
    const char *path;
    if (!PyArg_ParseTuple(args, "Os", &cap, &path)) return NULL;
    kiln_engine *e = kilnpy_ptr(cap, "kiln.engine");
    if (!e) return NULL;
    CHECK(kiln_engine_save(e, path));
    Py_RETURN_NONE;
}

/* engine_load(bytes-like or path str) -> engine */
static PyObject *py_engine_load(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *src;
    if (!PyArg_ParseTuple(args, "O", &src)) return NULL;
    kiln_engine *e = NULL;
    int rc;
    if (PyUnicode_Check(src)) {
        const char *path = PyUnicode_AsUTF8AndSize(src, NULL);
        if (!path) return NULL;
        Py_BEGIN_ALLOW_THREADS rc = kiln_engine_load(path, &e);
        Py_END_ALLOW_THREADS
    } else {
        Py_buffer b;
        if (PyObject_GetBuffer(src, &b, PyBUF_SIMPLE) < 0) return NULL;
        Py_BEGIN_ALLOW_THREADS rc = kiln_engine_load_memory(b.buf, (size_t)b.len, &e);
        Py_END_ALLOW_THREADS
        PyBuffer_Release(&b);
    }
    CHECK(rc);
    return wrap_engine(e);
}

/* engine_io(engine) -> [(name, dtype, dims, is_input, data_dependent, min, opt, max)] */
static PyObject *py_engine_io(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap;
    if (!PyArg_ParseTuple(args, "O", &cap)) return NULL;
    kiln_engine *e = kilnpy_ptr(cap, "kiln.engine");
    if (!e) return NULL;
    int n = kiln_engine_num_inputs(e) + kiln_engine_num_outputs(e);
    PyObject *list = PyList_New(n);
    for (int i = 0; list && i < n; i++) {
        kiln_io_info io;
        int rc = kiln_engine_io(e, i, &io);
        if (rc) {
            Py_DECREF(list);
            return kilnpy_raise(rc);
        }
        PyList_SetItem(list, i,
                       Py_BuildValue("(siNiiNNN)", io.name, (int)io.dtype, kilnpy_dims(io.dims, io.ndim), io.is_input,
                                     io.data_dependent, kilnpy_dims(io.min, io.is_input ? io.ndim : 0),
                                     kilnpy_dims(io.opt, io.is_input ? io.ndim : 0),
                                     kilnpy_dims(io.max, io.is_input ? io.ndim : 0)));
    }
    return list;
}

static PyObject *py_engine_layers(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap;
    if (!PyArg_ParseTuple(args, "O", &cap)) return NULL;
    kiln_engine *e = kilnpy_ptr(cap, "kiln.engine");
    if (!e) return NULL;
    int n = kiln_engine_num_layers(e);
    PyObject *list = PyList_New(n);
    for (int i = 0; list && i < n; i++) {
        kiln_layer_info li;
        int rc = kiln_engine_layer_info(e, i, &li);
        if (rc) {
            Py_DECREF(list);
            return kilnpy_raise(rc);
        }
        PyList_SetItem(list, i, kilnpy_layer_tuple(&li));
    }
    return list;
}

static PyObject *py_engine_inspect(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap;
    if (!PyArg_ParseTuple(args, "O", &cap)) return NULL;
    kiln_engine *e = kilnpy_ptr(cap, "kiln.engine");
    if (!e) return NULL;
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    if (!f) return PyErr_NoMemory();
    int rc = kiln_engine_inspect(e, f);
    fclose(f);
    PyObject *s = rc ? kilnpy_raise(rc) : PyUnicode_DecodeUTF8(text, (Py_ssize_t)size, "replace");
    free(text);
    return s;
}

static PyObject *py_context_create(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap;
    int threads;
    if (!PyArg_ParseTuple(args, "Oi", &cap, &threads)) return NULL;
    kiln_engine *e = kilnpy_ptr(cap, "kiln.engine");
    if (!e) return NULL;
    kiln_context *ctx = NULL;
    CHECK(kiln_context_create(e, threads, &ctx));
    PyObject *c = PyCapsule_New(ctx, "kiln.context", context_free);
    if (!c) kiln_context_free(ctx);
    return c;
}

static PyObject *py_context_set_input_shape(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap, *dims_obj;
    const char *name;
    if (!PyArg_ParseTuple(args, "OsO", &cap, &name, &dims_obj)) return NULL;
    kiln_context *ctx = kilnpy_ptr(cap, "kiln.context");
    if (!ctx) return NULL;
    int64_t dims[KILN_MAX_DIMS];
    int nd = kilnpy_parse_dims(dims_obj, dims, name);
    if (nd < 0) return NULL;
    CHECK(kiln_context_set_input_shape(ctx, name, nd, dims));
    Py_RETURN_NONE;
}

/* context_bind(ctx, name, address, nbytes): address 0 unbinds an output. */
static PyObject *py_context_bind(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap;
    const char *name;
    unsigned long long addr, nbytes;
    if (!PyArg_ParseTuple(args, "OsKK", &cap, &name, &addr, &nbytes)) return NULL;
    kiln_context *ctx = kilnpy_ptr(cap, "kiln.context");
    if (!ctx) return NULL;
    CHECK(kiln_context_bind(ctx, name, (void *)(uintptr_t)addr, (size_t)nbytes));
    Py_RETURN_NONE;
}

/* context_run(ctx) waits for the run; context_enqueue(ctx, stream) queues
 * a CUDA engine's run on stream (an int CUstream, 0: the context's own)
 * and returns; context_synchronize(ctx) waits for it.  GIL released. */
static PyObject *context_call(PyObject *args, int what) {
    PyObject *cap;
    unsigned long long stream = 0;
    if (!PyArg_ParseTuple(args, what == 1 ? "OK" : "O", &cap, &stream)) return NULL;
    kiln_context *ctx = kilnpy_ptr(cap, "kiln.context");
    if (!ctx) return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = what == 0   ? kiln_context_run(ctx)
                                : what == 1 ? kiln_context_enqueue(ctx, (void *)(uintptr_t)stream)
                                            : kiln_context_synchronize(ctx);
    Py_END_ALLOW_THREADS
    CHECK(rc);
    Py_RETURN_NONE;
}

static PyObject *py_context_run(PyObject *self, PyObject *args) {
    (void)self;
    return context_call(args, 0);
}

static PyObject *py_context_enqueue(PyObject *self, PyObject *args) {
    (void)self;
    return context_call(args, 1);
}

static PyObject *py_context_synchronize(PyObject *self, PyObject *args) {
    (void)self;
    return context_call(args, 2);
}

/* context_set_<flag>(ctx, on) for the on/off settings of a context. */
static PyObject *context_flag(PyObject *args, void (*set)(kiln_context *, int)) {
    PyObject *cap;
    int on;
    if (!PyArg_ParseTuple(args, "Op", &cap, &on)) return NULL;
    kiln_context *ctx = kilnpy_ptr(cap, "kiln.context");
    if (!ctx) return NULL;
    set(ctx, on);
    Py_RETURN_NONE;
}

static PyObject *py_context_set_cuda_graphs(PyObject *self, PyObject *args) {
    (void)self;
    return context_flag(args, kiln_context_set_cuda_graphs);
}

/* engine_placement(engine) -> (layers on the GPU, layers on the CPU) */
static PyObject *py_engine_placement(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap;
    if (!PyArg_ParseTuple(args, "O", &cap)) return NULL;
    kiln_engine *e = kilnpy_ptr(cap, "kiln.engine");
    if (!e) return NULL;
    int gpu = 0, cpu = 0;
    kiln_engine_placement(e, &gpu, &cpu);
    return Py_BuildValue("(ii)", gpu, cpu);
}

static PyObject *py_context_shape(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap;
    const char *name;
    if (!PyArg_ParseTuple(args, "Os", &cap, &name)) return NULL;
    kiln_context *ctx = kilnpy_ptr(cap, "kiln.context");
    if (!ctx) return NULL;
    int nd = 0;
    int64_t dims[KILN_MAX_DIMS];
    CHECK(kiln_context_shape(ctx, name, &nd, dims));
    return kilnpy_dims(dims, nd);
}

/* context_output(ctx, name) -> (address or 0 before a run, capacity in bytes) */
static PyObject *py_context_output(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap;
    const char *name;
    if (!PyArg_ParseTuple(args, "Os", &cap, &name)) return NULL;
    kiln_context *ctx = kilnpy_ptr(cap, "kiln.context");
    if (!ctx) return NULL;
    size_t bytes = 0;
    CHECK(kiln_context_output_capacity(ctx, name, &bytes));
    const void *p = kiln_context_output(ctx, name);
    return Py_BuildValue("(KK)", (unsigned long long)(uintptr_t)p, (unsigned long long)bytes);
}

static PyObject *py_context_set_debug(PyObject *self, PyObject *args) {
    (void)self;
    return context_flag(args, kiln_context_set_debug);
}

PyMethodDef kilnpy_engine_methods[] = {
    {"build", py_build, METH_VARARGS, NULL},
    {"engine_serialize", py_engine_serialize, METH_VARARGS, NULL},
    {"engine_save", py_engine_save, METH_VARARGS, NULL},
    {"engine_load", py_engine_load, METH_VARARGS, NULL},
    {"engine_io", py_engine_io, METH_VARARGS, NULL},
    {"engine_layers", py_engine_layers, METH_VARARGS, NULL},
    {"engine_inspect", py_engine_inspect, METH_VARARGS, NULL},
    {"context_create", py_context_create, METH_VARARGS, NULL},
    {"context_set_input_shape", py_context_set_input_shape, METH_VARARGS, NULL},
    {"context_bind", py_context_bind, METH_VARARGS, NULL},
    {"context_run", py_context_run, METH_VARARGS, NULL},
    {"context_enqueue", py_context_enqueue, METH_VARARGS, NULL},
    {"context_synchronize", py_context_synchronize, METH_VARARGS, NULL},
    {"context_set_cuda_graphs", py_context_set_cuda_graphs, METH_VARARGS, NULL},
    {"engine_placement", py_engine_placement, METH_VARARGS, NULL},
    {"context_shape", py_context_shape, METH_VARARGS, NULL},
    {"context_output", py_context_output, METH_VARARGS, NULL},
    {"context_set_debug", py_context_set_debug, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};
