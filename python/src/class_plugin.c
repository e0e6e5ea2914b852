/*
 * class_plugin.c — class plugins (the IPluginV3 style, kiln/_class_plugin.py):
 * one kiln_plugin_vtable whose entries hand every call to a Python
 * dispatcher, dispatcher(method, obj, *args), which converts and calls the
 * plugin object's methods.  An instance's state is the Python plugin object
 * (a strong reference); the def's `user` is the creator entry, kept forever
 * like quick ops' (plugin.c).  Shapes come back in the quick-op form and go
 * through kilnpy_apply_outputs.
 */
#include "kilnpy.h"

#include <string.h>

static PyObject *g_dispatch; /* set by set_class_dispatcher, kept */

/* dispatcher(method, obj, *args) with the GIL held; NULL with the Python
 * error turned into a kiln error naming the method. */
static PyObject *dispatch(const char *method, PyObject *obj, const char *fmt, ...) {
    PyObject *args = NULL;
    if (fmt && *fmt) {
        va_list ap;
        va_start(ap, fmt);
        args = Py_VaBuildValue(fmt, ap);
        va_end(ap);
    } else {
        args = PyTuple_New(0);
    }
    PyObject *r = NULL;
    if (args && !PyTuple_Check(args)) {
        PyObject *t = PyTuple_Pack(1, args);
        Py_DECREF(args);
        args = t;
    }
    if (args && g_dispatch) {
        PyObject *head = Py_BuildValue("(sO)", method, obj ? obj : Py_None);
        PyObject *all = head ? PySequence_Concat(head, args) : NULL;
        r = all ? PyObject_CallObject(g_dispatch, all) : NULL;
        Py_XDECREF(head);
        Py_XDECREF(all);
    } else if (!g_dispatch) {
        PyErr_SetString(PyExc_RuntimeError, "class plugins: no dispatcher set (import kiln)");
    }
    Py_XDECREF(args);
    if (!r) {
        char what[128];
        snprintf(what, sizeof what, "class plugin method %s", method);
        kilnpy_error_from_python(what);
    }
    return r;
}


static int cp_create(const kiln_attrs *attrs, void *user, void **state) {
    PyGILState_STATE g_ = PyGILState_Ensure();
    int rc = 0;
    {
        PyObject *d = kilnpy_attrs_dict(attrs);
        PyObject *o = d ? dispatch("create", user, "(O)", d) : NULL;
        if (!d && !o) rc = kilnpy_error_from_python("class plugin attributes");
        else if (!o) rc = KILN_EPLUGIN;
        *state = o;
        Py_XDECREF(d);
    }
    PyGILState_Release(g_);
    return rc;
}

static int cp_deserialize(const void *buf, size_t size, void *user, void **state) {
    PyGILState_STATE g_ = PyGILState_Ensure();
    int rc = 0;
    {
        PyObject *o = dispatch("deserialize", user, "(y#)", (const char *)buf, (Py_ssize_t)size);
        if (!o) rc = KILN_EPLUGIN;
        *state = o;
    }
    PyGILState_Release(g_);
    return rc;
}

static int cp_clone(const void *state, void **out) {
    PyGILState_STATE g_ = PyGILState_Ensure();
    int rc = 0;
    {
        PyObject *o = dispatch("clone", (PyObject *)state, NULL);
        if (!o) rc = KILN_EPLUGIN;
        *out = o;
    }
    PyGILState_Release(g_);
    return rc;
}

static void cp_destroy(void *state) {
    if (!state) return;
    PyGILState_STATE g_ = PyGILState_Ensure();
    Py_DECREF((PyObject *)state);
    PyGILState_Release(g_);
}

static int cp_shape(void *state, kiln_shape_ctx *c) {
    PyGILState_STATE g_ = PyGILState_Ensure();
    int rc = 0;
    {
        PyObject *ins = kilnpy_descs_list(c->in, c->nin, 0);
        PyObject *outs = ins ? dispatch("shape", state, "(Oi)", ins, c->nout) : NULL;
        if (!ins && !outs) rc = kilnpy_error_from_python("class plugin shapes");
        else if (!outs) rc = KILN_EPLUGIN;
        else if ((rc = kilnpy_apply_outputs(c, outs, "class plugin")) < 0) rc = kilnpy_error_from_python("get_output_shapes");
        else if (rc > 0) rc = KILN_ESHAPE;
        Py_XDECREF(ins);
        Py_XDECREF(outs);
    }
    PyGILState_Release(g_);
    return rc;
}

static PyObject *io_list(const kiln_io_format *io, int upto) {
    PyObject *l = PyList_New(upto);
    for (int p = 0; l && p < upto; p++) PyList_SetItem(l, p, Py_BuildValue("(ii)", io->dtype[p], io->format[p]));
    return l;
}

static int cp_supports_format(void *state, int pos, const kiln_io_format *io) {
    PyGILState_STATE g_ = PyGILState_Ensure();
    int yes = 0;
    {
        PyObject *l = io_list(io, io->n);
        PyObject *r = l ? dispatch("supports", state, "(iO)", pos, l) : NULL;
        if (r) yes = PyObject_IsTrue(r) == 1;
        else PyErr_Clear();
        Py_XDECREF(l);
        Py_XDECREF(r);
    }
    PyGILState_Release(g_);
    return yes;
}

static int cp_configure(void *state, const kiln_io_format *io, const kiln_desc *in, int nin, const kiln_desc *out,
                        int nout) {
    PyGILState_STATE g_ = PyGILState_Ensure();
    int rc = 0;
    {
        PyObject *l = io_list(io, io->n), *di = kilnpy_descs_list(in, nin, 0), *dout = kilnpy_descs_list(out, nout, 0);
        PyObject *r = l && di && dout ? dispatch("configure", state, "(OOO)", l, di, dout) : NULL;
        if (!r) rc = KILN_EPLUGIN;
        Py_XDECREF(l);
        Py_XDECREF(di);
        Py_XDECREF(dout);
        Py_XDECREF(r);
    }
    PyGILState_Release(g_);
    return rc;
}

static size_t cp_workspace(void *state, const kiln_call *c) {
    PyGILState_STATE g_ = PyGILState_Ensure();
    size_t n = 0;
    {
        PyObject *ti = kilnpy_tensors_list(c->in, c->nin), *to = kilnpy_tensors_list(c->out, c->nout);
        PyObject *r = ti && to ? dispatch("workspace", state, "(OO)", ti, to) : NULL;
        if (r) n = (size_t)PyLong_AsSize_t(r);
        if (PyErr_Occurred()) {
            PyErr_Clear();
            n = 0;
        }
        Py_XDECREF(ti);
        Py_XDECREF(to);
        Py_XDECREF(r);
    }
    PyGILState_Release(g_);
    return n;
}

static int cp_valid_tactics(void *state, int *tactics, int max) {
    PyGILState_STATE g_ = PyGILState_Ensure();
    int n = 0;
    {
        PyObject *r = dispatch("tactics", state, NULL);
        Py_ssize_t k = r ? PySequence_Size(r) : -1;
        for (Py_ssize_t i = 0; i < k && n < max; i++) {
            PyObject *t = PySequence_GetItem(r, i);
            long v = t ? PyLong_AsLong(t) : -1;
            Py_XDECREF(t);
            if (v > 0) tactics[n++] = (int)v;
        }
        PyErr_Clear();
        Py_XDECREF(r);
        if (!n) tactics[n++] = 0;
    }
    PyGILState_Release(g_);
    return n;
}

static int cp_timing_id(void *state, char *buf, size_t size) {
    PyGILState_STATE g_ = PyGILState_Ensure();
    int rc = 0;
    {
        PyObject *r = dispatch("timing_id", state, NULL);
        const char *s = r && PyUnicode_Check(r) ? PyUnicode_AsUTF8AndSize(r, NULL) : "";
        if (!r) rc = KILN_EPLUGIN;
        else if (strlen(s) + 1 > size) rc = kiln_set_error(KILN_EINVAL, "get_timing_cache_id: longer than %zu", size);
        else snprintf(buf, size, "%s", s);
        PyErr_Clear();
        Py_XDECREF(r);
    }
    PyGILState_Release(g_);
    return rc;
}

static int cp_set_tactic(void *state, int tactic) {
    PyGILState_STATE g_ = PyGILState_Ensure();
    int rc = 0;
    {
        PyObject *r = dispatch("set_tactic", state, "(i)", tactic);
        if (!r) rc = KILN_EPLUGIN;
        Py_XDECREF(r);
    }
    PyGILState_Release(g_);
    return rc;
}

static int cp_on_shape_change(void *state, const kiln_tensor *in, int nin, const kiln_tensor *out, int nout) {
    PyGILState_STATE g_ = PyGILState_Ensure();
    int rc = 0;
    {
        PyObject *ti = kilnpy_tensors_list(in, nin), *to = kilnpy_tensors_list(out, nout);
        PyObject *r = ti && to ? dispatch("shape_change", state, "(OO)", ti, to) : NULL;
        if (!r) rc = KILN_EPLUGIN;
        Py_XDECREF(ti);
        Py_XDECREF(to);
        Py_XDECREF(r);
    }
    PyGILState_Release(g_);
    return rc;
}

/* enqueue on either device: the CUDA one passes its stream (an int), the
 * CPU one 0. */
static int cp_enqueue(void *state, const kiln_call *c) {
    PyGILState_STATE g_ = PyGILState_Ensure();
    int rc = 0;
    {
        void *stream = c->exec ? kiln_exec_stream(c->exec) : NULL;
        PyObject *ti = kilnpy_tensors_list(c->in, c->nin), *to = kilnpy_tensors_list(c->out, c->nout);
        PyObject *r = ti && to ? dispatch("enqueue", c->state ? c->state : state, "(OOKKK)", ti, to,
                                          (unsigned long long)(uintptr_t)c->workspace,
                                          (unsigned long long)c->workspace_size,
                                          (unsigned long long)(uintptr_t)stream)
                               : NULL;
        if (!r) rc = kiln_set_error(KILN_EPLUGIN, "layer '%s': %s", c->layer ? c->layer : "?", kiln_errmsg());
        Py_XDECREF(ti);
        Py_XDECREF(to);
        Py_XDECREF(r);
    }
    PyGILState_Release(g_);
    return rc;
}

static int cp_serialize(const void *state, void *buf, size_t *size) {
    PyGILState_STATE g_ = PyGILState_Ensure();
    int rc = 0;
    {
        PyObject *r = dispatch("serialize", (PyObject *)state, NULL);
        char *p = NULL;
        Py_ssize_t n = 0;
        if (!r || PyBytes_AsStringAndSize(r, &p, &n) < 0) {
            rc = r ? kilnpy_error_from_python("get_fields_to_serialize") : KILN_EPLUGIN;
        } else if (buf && (size_t)n > *size) {
            rc = kiln_set_error(KILN_EPLUGIN, "serialize: %zd bytes, %zu asked for", n, *size);
        } else {
            if (buf) memcpy(buf, p, (size_t)n);
            *size = (size_t)n;
        }
        Py_XDECREF(r);
    }
    PyGILState_Release(g_);
    return rc;
}

static int cp_attach(void *state, void **ctx_state) {
    PyGILState_STATE g_ = PyGILState_Ensure();
    int rc = 0;
    {
        PyObject *r = dispatch("attach", state, NULL);
        if (!r) rc = KILN_EPLUGIN;
        else if (r == Py_None) {
            Py_DECREF(r);
            *ctx_state = NULL;
        } else {
            *ctx_state = r;
        }
    }
    PyGILState_Release(g_);
    return rc;
}

static void cp_detach(void *state, void *ctx_state) {
    (void)state;
    if (!ctx_state) return;
    PyGILState_STATE g_ = PyGILState_Ensure();
    Py_DECREF((PyObject *)ctx_state);
    PyGILState_Release(g_);
}

/* Plugins whose creator lists "cuda" in `devices` get class_vt_cuda: the
 * same methods, and enqueue also as enqueue_cuda with device pointers. */
#define CLASS_VT_METHODS \
    .version = KILN_PLUGIN_VTABLE_VERSION, \
    .clone = cp_clone, \
    .destroy = cp_destroy, \
    .shape = cp_shape, \
    .supports_format = cp_supports_format, \
    .configure = cp_configure, \
    .workspace_size = cp_workspace, \
    .valid_tactics = cp_valid_tactics, \
    .timing_id = cp_timing_id, \
    .set_tactic = cp_set_tactic, \
    .on_shape_change = cp_on_shape_change, \
    .enqueue = cp_enqueue, \
    .serialize = cp_serialize, \
    .attach_to_context = cp_attach, \
    .detach_from_context = cp_detach,
static const kiln_plugin_vtable class_vt = {CLASS_VT_METHODS};
static const kiln_plugin_vtable class_vt_cuda = {CLASS_VT_METHODS .enqueue_cuda = cp_enqueue,
                                                  .workspace_size_cuda = cp_workspace};

static PyObject *py_set_class_dispatcher(PyObject *self, PyObject *fn) {
    (void)self;
    Py_INCREF(fn);
    g_dispatch = fn; /* the old one may still run on another thread: kept */
    Py_RETURN_NONE;
}

/* register_plugin(identity, version, min_in, max_in, nout, attrs, entry, doc,
 *                 cuda, graph_safe): cuda 1 also runs enqueue on the GPU;
 * graph_safe 1 lets kiln capture its launches in a CUDA graph */
static PyObject *py_register_plugin(PyObject *self, PyObject *args) {
    (void)self;
    const char *id, *doc;
    int version, min_in, max_in, nout, cuda = 0, graph_safe = 0;
    PyObject *attrs, *entry;
    if (!PyArg_ParseTuple(args, "siiiiOOz|pp", &id, &version, &min_in, &max_in, &nout, &attrs, &entry, &doc, &cuda,
                          &graph_safe))
        return NULL;
    char buf[512];
    const char *ns, *name;
    kiln_attr_def *defs = kilnpy_split_and_defs(id, buf, sizeof buf, &ns, &name, attrs);
    if (!defs) return NULL;
    Py_INCREF(entry); /* kept: kiln keeps the op for the process's life */
    kiln_plugin_def d = {.ns = ns, .name = name, .version = version, .min_inputs = min_in, .max_inputs = max_in,
                         .num_outputs = nout, .attrs = defs, .vt = cuda ? &class_vt_cuda : &class_vt, .doc = doc, .user = entry,
                         .create_user = cp_create, .deserialize_user = cp_deserialize,
                         .cuda_graph_unsafe = !graph_safe};
    int rc = kiln_register_plugin(&d);
    PyMem_Free(defs);
    if (rc) {
        Py_DECREF(entry);
        return kilnpy_raise(rc);
    }
    Py_RETURN_NONE;
}

PyMethodDef kilnpy_class_plugin_methods[] = {
    {"set_class_dispatcher", py_set_class_dispatcher, METH_O, NULL},
    {"register_plugin", py_register_plugin, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};
