/* network.c — networks, layers, the ONNX importer and build configs for
 * kiln._kiln.  Each function converts, calls the C API, raises on error. */
#include "kilnpy.h"

#include <string.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_) return kilnpy_raise(rc_);                                                         \
    } while (0)

static void network_free(PyObject *cap) { kiln_network_free(PyCapsule_GetPointer(cap, "kiln.network")); }
static void config_free(PyObject *cap) { kiln_build_config_free(PyCapsule_GetPointer(cap, "kiln.config")); }

static PyObject *wrap_network(kiln_network *net) {
    PyObject *cap = PyCapsule_New(net, "kiln.network", network_free);
    if (!cap) kiln_network_free(net);
    return cap;
}

static PyObject *py_network_create(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    kiln_network *net = kiln_network_create();
    if (!net) return PyErr_NoMemory();
    return wrap_network(net);
}

/* add_input(net, name, dtype, dims): dims hold ints (fixed) or str/None
 * (dynamic: the name of the dim's symbol, or a generated one). */
static PyObject *py_network_add_input(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap, *dims_obj;
    const char *name;
    int dtype;
    if (!PyArg_ParseTuple(args, "OsiO", &cap, &name, &dtype, &dims_obj)) return NULL;
    kiln_network *net = kilnpy_ptr(cap, "kiln.network");
    if (!net) return NULL;
    PyObject *t = PySequence_Tuple(dims_obj);
    if (!t) return NULL;
    Py_ssize_t n = PyTuple_Size(t);
    if (n > KILN_MAX_DIMS) {
        Py_DECREF(t);
        return PyErr_Format(PyExc_ValueError, "input '%s': %zd dims, at most %d", name, n, KILN_MAX_DIMS);
    }
    int64_t dims[KILN_MAX_DIMS];
    const char *names[KILN_MAX_DIMS] = {0};
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PyTuple_GetItem(t, i);
        if (PyUnicode_Check(d)) {
            dims[i] = -1;
            names[i] = PyUnicode_AsUTF8AndSize(d, NULL);
        } else if (d == Py_None) {
            dims[i] = -1;
        } else {
            dims[i] = PyLong_AsLongLong(d);
            if (dims[i] == -1 && PyErr_Occurred()) {
                Py_DECREF(t);
                return NULL;
            }
        }
    }
    int rc = kiln_network_add_input(net, name, (kiln_dtype)dtype, (int)n, dims, names);
    Py_DECREF(t);
    CHECK(rc);
    Py_RETURN_NONE;
}

static PyObject *py_network_add_constant(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap, *dims_obj, *data;
    const char *name;
    int dtype;
    if (!PyArg_ParseTuple(args, "OsiOO", &cap, &name, &dtype, &dims_obj, &data)) return NULL;
    kiln_network *net = kilnpy_ptr(cap, "kiln.network");
    if (!net) return NULL;
    int64_t dims[KILN_MAX_DIMS];
    int nd = kilnpy_parse_dims(dims_obj, dims, name);
    if (nd < 0) return NULL;
    Py_buffer b;
    if (PyObject_GetBuffer(data, &b, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    size_t want = kiln_dtype_size((kiln_dtype)dtype);
    for (int i = 0; i < nd; i++) want *= (size_t)(dims[i] < 0 ? 0 : dims[i]);
    int rc = 0;
    if ((size_t)b.len != want)
        PyErr_Format(PyExc_ValueError, "constant '%s': %zd bytes given, its dtype and dims need %zu", name, b.len,
                     want);
    else
        rc = kiln_network_add_constant(net, name, (kiln_dtype)dtype, nd, dims, b.buf);
    PyBuffer_Release(&b);
    if (PyErr_Occurred()) return NULL;
    CHECK(rc);
    Py_RETURN_NONE;
}

/* Strings of a sequence into names[] (borrowed from the tuple *keep). */
static int parse_names(PyObject *seq, const char **names, int max, PyObject **keep, const char *what) {
    *keep = PySequence_Tuple(seq);
    if (!*keep) return -1;
    Py_ssize_t n = PyTuple_Size(*keep);
    if (n > max) {
        PyErr_Format(PyExc_ValueError, "%zd %s, at most %d", n, what, max);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PyTuple_GetItem(*keep, i);
        names[i] = PyUnicode_Check(s) ? PyUnicode_AsUTF8AndSize(s, NULL) : NULL;
        if (!names[i]) {
            PyErr_Format(PyExc_TypeError, "%s must be tensor names (str)", what);
            return -1;
        }
    }
    return (int)n;
}

static PyObject *py_network_add_layer(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap, *ins, *outs, *keep_in = NULL, *keep_out = NULL;
    const char *op, *lname;
    int version;
    if (!PyArg_ParseTuple(args, "OsizOO", &cap, &op, &version, &lname, &ins, &outs)) return NULL;
    kiln_network *net = kilnpy_ptr(cap, "kiln.network");
    if (!net) return NULL;
    const char *in[KILN_MAX_IO], *out[KILN_MAX_IO];
    int nin = parse_names(ins, in, KILN_MAX_IO, &keep_in, "inputs");
    int nout = nin < 0 ? -1 : parse_names(outs, out, KILN_MAX_IO, &keep_out, "outputs");
    kiln_layer *l = nout < 0 ? NULL : kiln_network_add_layer(net, op, version, lname, nin, in, nout, out);
    Py_XDECREF(keep_in);
    Py_XDECREF(keep_out);
    if (nout < 0) return NULL;
    if (!l) return kilnpy_raise(KILN_EINVAL);
    return PyCapsule_New(l, "kiln.layer", NULL);
}

/* layer_set(layer, name, value, elem): the value's Python type picks the
 * setter: bool, int, float, str, bytes; an array is given as (bytes, elem
 * dtype, count) through elem >= 0. */
static PyObject *py_layer_set(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap, *v;
    const char *name;
    int elem;
    if (!PyArg_ParseTuple(args, "OsOi", &cap, &name, &v, &elem)) return NULL;
    kiln_layer *l = kilnpy_ptr(cap, "kiln.layer");
    if (!l) return NULL;
    int rc;
    if (elem >= 0) {
        Py_buffer b;
        if (PyObject_GetBuffer(v, &b, PyBUF_C_CONTIGUOUS) < 0) return NULL;
        size_t es = kiln_dtype_size((kiln_dtype)elem);
        if (!es) {
            PyBuffer_Release(&b);
            return PyErr_Format(PyExc_ValueError, "attribute '%s': array element dtype %d has no size", name, elem);
        }
        rc = kiln_layer_set_array(l, name, (kiln_dtype)elem, (int64_t)((size_t)b.len / es), b.buf);
        PyBuffer_Release(&b);
    } else if (PyBool_Check(v)) {
        rc = kiln_layer_set_bool(l, name, v == Py_True);
    } else if (PyLong_Check(v)) {
        long long x = PyLong_AsLongLong(v);
        if (x == -1 && PyErr_Occurred()) return NULL;
        rc = kiln_layer_set_int(l, name, x);
    } else if (PyFloat_Check(v)) {
        rc = kiln_layer_set_float(l, name, PyFloat_AsDouble(v));
    } else if (PyUnicode_Check(v)) {
        rc = kiln_layer_set_string(l, name, PyUnicode_AsUTF8AndSize(v, NULL));
    } else if (PyBytes_Check(v)) {
        char *p;
        Py_ssize_t n;
        if (PyBytes_AsStringAndSize(v, &p, &n) < 0) return NULL;
        rc = kiln_layer_set_bytes(l, name, p, (size_t)n);
    } else {
        PyObject *tn = PyObject_GetAttrString((PyObject *)Py_TYPE(v), "__name__");
        PyErr_Format(PyExc_TypeError, "attribute '%s': a value of type %S is not an attribute (int, float, str, "
                     "bool, bytes, 1-D numpy array)", name, tn ? tn : Py_None);
        Py_XDECREF(tn);
        return NULL;
    }
    CHECK(rc);
    Py_RETURN_NONE;
}

static PyObject *py_layer_set_aot(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap;
    int aot;
    if (!PyArg_ParseTuple(args, "Oi", &cap, &aot)) return NULL;
    kiln_layer *l = kilnpy_ptr(cap, "kiln.layer");
    if (!l) return NULL;
    CHECK(kiln_layer_set_aot(l, aot));
    Py_RETURN_NONE;
}

static PyObject *py_layer_name(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap;
    if (!PyArg_ParseTuple(args, "O", &cap)) return NULL;
    kiln_layer *l = kilnpy_ptr(cap, "kiln.layer");
    return l ? PyUnicode_FromString(kiln_layer_name(l)) : NULL;
}

static PyObject *py_network_mark_output(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap;
    const char *name;
    if (!PyArg_ParseTuple(args, "Os", &cap, &name)) return NULL;
    kiln_network *net = kilnpy_ptr(cap, "kiln.network");
    if (!net) return NULL;
    CHECK(kiln_network_mark_output(net, name));
    Py_RETURN_NONE;
}

/* A layer as (name, ("ns", "name"), version, inputs, outputs, tactic, aot, ms,
 * device: "cpu" or "cuda"). */
PyObject *kilnpy_layer_tuple(const kiln_layer_info *li) {
    PyObject *ins = PyTuple_New(li->nin), *outs = PyTuple_New(li->nout);
    for (int k = 0; ins && k < li->nin; k++) PyTuple_SetItem(ins, k, PyUnicode_FromString(li->inputs[k]));
    for (int k = 0; outs && k < li->nout; k++) PyTuple_SetItem(outs, k, PyUnicode_FromString(li->outputs[k]));
    if (!ins || !outs) {
        Py_XDECREF(ins);
        Py_XDECREF(outs);
        return NULL;
    }
    return Py_BuildValue("(s(ss)iNNiids)", li->name, li->op_ns, li->op_name, li->op_version, ins, outs, li->tactic,
                         li->aot, li->time_ms, li->device == KILN_DEVICE_CUDA ? "cuda" : "cpu");
}

static PyObject *py_network_info(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap;
    if (!PyArg_ParseTuple(args, "O", &cap)) return NULL;
    kiln_network *net = kilnpy_ptr(cap, "kiln.network");
    if (!net) return NULL;
    int ni = kiln_network_num_inputs(net), no = kiln_network_num_outputs(net), nl = kiln_network_num_layers(net);
    PyObject *ins = PyList_New(0), *outs = PyList_New(0), *layers = PyList_New(0);
    for (int i = 0; ins && i < ni; i++) {
        kiln_io_info io;
        if (kiln_network_input_info(net, i, &io)) break;
        PyObject *t = Py_BuildValue("(siN)", io.name, (int)io.dtype, kilnpy_dims(io.dims, io.ndim));
        if (!t || PyList_Append(ins, t) < 0) Py_CLEAR(ins);
        Py_XDECREF(t);
    }
    for (int i = 0; outs && i < no; i++) {
        PyObject *s = PyUnicode_FromString(kiln_network_output_name(net, i));
        if (!s || PyList_Append(outs, s) < 0) Py_CLEAR(outs);
        Py_XDECREF(s);
    }
    for (int i = 0; layers && i < nl; i++) {
        kiln_layer_info li;
        if (kiln_network_layer_info(net, i, &li)) break;
        PyObject *t = kilnpy_layer_tuple(&li);
        if (!t || PyList_Append(layers, t) < 0) Py_CLEAR(layers);
        Py_XDECREF(t);
    }
    if (!ins || !outs || !layers) {
        Py_XDECREF(ins);
        Py_XDECREF(outs);
        Py_XDECREF(layers);
        return NULL;
    }
    return Py_BuildValue("(NNN)", ins, outs, layers);
}

/* onnx_import(path_or_bytes, verbose) -> network */
static PyObject *py_onnx_import(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *src;
    int verbose;
    if (!PyArg_ParseTuple(args, "Op", &src, &verbose)) return NULL;
    kiln_onnx_options opt = {0};
    opt.verbose = verbose;
    kiln_network *net = NULL;
    int rc;
    if (PyUnicode_Check(src)) {
        const char *path = PyUnicode_AsUTF8AndSize(src, NULL);
        if (!path) return NULL;
        Py_BEGIN_ALLOW_THREADS rc = kiln_onnx_import(path, &opt, &net);
        Py_END_ALLOW_THREADS
    } else {
        Py_buffer b;
        if (PyObject_GetBuffer(src, &b, PyBUF_SIMPLE) < 0) return NULL;
        Py_BEGIN_ALLOW_THREADS rc = kiln_onnx_import_memory(b.buf, (size_t)b.len, &opt, &net);
        Py_END_ALLOW_THREADS
        PyBuffer_Release(&b);
    }
    CHECK(rc);
    return wrap_network(net);
}

static PyObject *py_config_create(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    kiln_build_config *cfg = kiln_build_config_create();
    if (!cfg) return PyErr_NoMemory();
    PyObject *cap = PyCapsule_New(cfg, "kiln.config", config_free);
    if (!cap) kiln_build_config_free(cfg);
    return cap;
}

/* config_set(cfg, flags, threads, reps, device): threads/reps <= 0 keep
 * the default. */
static PyObject *py_config_set(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap;
    unsigned flags;
    int threads, reps, device;
    if (!PyArg_ParseTuple(args, "OIiii", &cap, &flags, &threads, &reps, &device)) return NULL;
    kiln_build_config *cfg = kilnpy_ptr(cap, "kiln.config");
    if (!cfg) return NULL;
    kiln_build_config_set_flags(cfg, flags);
    if (threads > 0) kiln_build_config_set_threads(cfg, threads);
    if (reps > 0) kiln_build_config_set_timing_reps(cfg, reps);
    kiln_build_config_set_device(cfg, (kiln_device_kind)device);
    Py_RETURN_NONE;
}

static PyObject *py_config_timing_cache(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap;
    const char *path;
    if (!PyArg_ParseTuple(args, "Oz", &cap, &path)) return NULL;
    kiln_build_config *cfg = kilnpy_ptr(cap, "kiln.config");
    if (!cfg) return NULL;
    CHECK(kiln_build_config_set_timing_cache(cfg, path));
    Py_RETURN_NONE;
}

static PyObject *py_config_profile(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap, *mn, *op, *mx;
    const char *input;
    if (!PyArg_ParseTuple(args, "OsOOO", &cap, &input, &mn, &op, &mx)) return NULL;
    kiln_build_config *cfg = kilnpy_ptr(cap, "kiln.config");
    if (!cfg) return NULL;
    int64_t a[KILN_MAX_DIMS], b[KILN_MAX_DIMS], c[KILN_MAX_DIMS];
    int na = kilnpy_parse_dims(mn, a, input), nb = na < 0 ? -1 : kilnpy_parse_dims(op, b, input),
        nc = nb < 0 ? -1 : kilnpy_parse_dims(mx, c, input);
    if (nc < 0) return NULL;
    if (na != nb || nb != nc)
        return PyErr_Format(PyExc_ValueError, "profile of '%s': min/opt/max have %d/%d/%d dims, expected equal",
                            input, na, nb, nc);
    CHECK(kiln_build_config_set_profile(cfg, input, na, a, b, c));
    Py_RETURN_NONE;
}

PyMethodDef kilnpy_network_methods[] = {
    {"network_create", py_network_create, METH_NOARGS, NULL},
    {"network_add_input", py_network_add_input, METH_VARARGS, NULL},
    {"network_add_constant", py_network_add_constant, METH_VARARGS, NULL},
    {"network_add_layer", py_network_add_layer, METH_VARARGS, NULL},
    {"network_mark_output", py_network_mark_output, METH_VARARGS, NULL},
    {"network_info", py_network_info, METH_VARARGS, NULL},
    {"layer_set", py_layer_set, METH_VARARGS, NULL},
    {"layer_set_aot", py_layer_set_aot, METH_VARARGS, NULL},
    {"layer_name", py_layer_name, METH_VARARGS, NULL},
    {"onnx_import", py_onnx_import, METH_VARARGS, NULL},
    {"config_create", py_config_create, METH_NOARGS, NULL},
    {"config_set", py_config_set, METH_VARARGS, NULL},
    {"config_timing_cache", py_config_timing_cache, METH_VARARGS, NULL},
    {"config_profile", py_config_profile, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};
