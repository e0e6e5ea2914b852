/* module.c — kiln._kiln: errors, logging, version, and the method tables of
 * network.c / engine.c / plugin.c joined into one module. */
#include "kilnpy.h"

#include <string.h>

PyObject *kilnpy_error;

PyObject *kilnpy_raise(int rc) {
    const char *msg = kiln_errmsg();
    PyObject *exc = PyObject_CallFunction(kilnpy_error, "s", msg && *msg ? msg : kiln_strerror(rc));
    if (!exc) return NULL;
    PyObject *code = PyLong_FromLong(rc);
    PyObject *name = PyUnicode_FromString(kiln_err_name(rc));
    if (code && name) {
        PyObject_SetAttrString(exc, "code", code);
        PyObject_SetAttrString(exc, "name", name);
    }
    Py_XDECREF(code);
    Py_XDECREF(name);
    PyErr_SetObject(kilnpy_error, exc);
    Py_DECREF(exc);
    return NULL;
}

void *kilnpy_ptr(PyObject *o, const char *name) {
    void *p = PyCapsule_GetPointer(o, name);
    if (!p) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "expected a %s handle", name);
    }
    return p;
}

PyObject *kilnpy_dims(const int64_t *dims, int n) {
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t && i < n; i++) PyTuple_SetItem(t, i, PyLong_FromLongLong(dims[i]));
    return t;
}

int kilnpy_parse_dims(PyObject *seq, int64_t *dims, const char *what) {
    PyObject *fast = PySequence_Tuple(seq);
    if (!fast) return -1;
    Py_ssize_t n = PyTuple_Size(fast);
    if (n > KILN_MAX_DIMS) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "%s: %zd dims, at most %d", what, n, KILN_MAX_DIMS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        dims[i] = PyLong_AsLongLong(PyTuple_GetItem(fast, i));
        if (dims[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    return (int)n;
}

int kilnpy_error_from_python(const char *what) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *text = NULL, *mod = PyImport_ImportModule("traceback");
    if (mod) {
        PyObject *lines = PyObject_CallMethod(mod, "format_exception", "OOO", type ? type : Py_None,
                                              value ? value : Py_None, tb ? tb : Py_None);
        if (lines) {
            PyObject *sep = PyUnicode_FromString("");
            if (sep) text = PyUnicode_Join(sep, lines);
            Py_XDECREF(sep);
            Py_DECREF(lines);
        }
        Py_DECREF(mod);
    }
    PyErr_Clear();
    const char *s = text ? PyUnicode_AsUTF8AndSize(text, NULL) : NULL;
    if (!s) {
        PyErr_Clear();
        s = "(the exception could not be formatted)";
    }
    /* The message buffer holds 4 KiB and callers prefix the layer: keep
     * the end of the traceback, where the error is. */
    size_t n = strlen(s);
    int rc = kiln_set_error(KILN_EPLUGIN, "%s raised a Python exception:\n%s%s", what, n > 1800 ? "...\n" : "",
                            n > 1800 ? s + n - 1800 : s);
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return rc;
}

/* ---------------------------------------------------------------- logging */

static PyObject *g_logger; /* callable(level, msg) or NULL; never freed while set */

static void log_trampoline(void *ud, kiln_log_level level, const char *msg) {
    PyObject *fn = ud;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *r = PyObject_CallFunction(fn, "is", (int)level, msg);
    if (!r) PyErr_WriteUnraisable(fn);
    Py_XDECREF(r);
    PyGILState_Release(g);
}

static PyObject *py_set_logger(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *fn;
    int level;
    if (!PyArg_ParseTuple(args, "Oi", &fn, &level)) return NULL;
    if (level < KILN_LOG_ERROR || level > KILN_LOG_VERBOSE)
        return PyErr_Format(PyExc_ValueError, "log level %d, expected 0 (error) .. 3 (verbose)", level);
    if (fn == Py_None) {
        kiln_log_set((kiln_log_level)level, NULL, NULL);
    } else {
        if (!PyCallable_Check(fn)) return PyErr_Format(PyExc_TypeError, "logger must be callable(level, msg)");
        Py_INCREF(fn);
        kiln_log_set((kiln_log_level)level, log_trampoline, fn);
    }
    /* The old callable may still be running on another thread (kiln calls
     * it outside its lock): it is kept, not released. */
    g_logger = fn == Py_None ? NULL : fn;
    Py_RETURN_NONE;
}

static PyObject *py_version(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    return Py_BuildValue("(si)", kiln_version(), kiln_abi_version());
}

static PyObject *py_cpu_signature(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    return PyUnicode_FromString(kiln_cpu_signature());
}

static PyMethodDef module_methods[] = {
    {"set_logger", py_set_logger, METH_VARARGS, "set_logger(callable(level, msg) | None, level)"},
    {"version", py_version, METH_NOARGS, "version() -> (library version, ABI version)"},
    {"cpu_signature", py_cpu_signature, METH_NOARGS, "cpu_signature() -> str"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "kiln._kiln", "The C half of the kiln package (see kiln/__init__.py).", -1, NULL,
    NULL, NULL, NULL, NULL,
};

static int add_methods(PyObject *m, PyMethodDef *defs) {
    for (PyMethodDef *d = defs; d->ml_name; d++) {
        PyObject *f = PyCFunction_NewEx(d, NULL, NULL);
        if (!f || PyModule_AddObject(m, d->ml_name, f) < 0) {
            Py_XDECREF(f);
            return -1;
        }
    }
    return 0;
}

PyMODINIT_FUNC PyInit__kiln(void) {
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    kilnpy_error = PyErr_NewExceptionWithDoc("kiln.KilnError",
                                             "A kiln call failed; .code (negative), .name (KILN_E...) and the "
                                             "message say what, where, expected vs found.",
                                             PyExc_RuntimeError, NULL);
    if (!kilnpy_error || PyModule_AddObject(m, "KilnError", kilnpy_error) < 0) goto fail;
    Py_INCREF(kilnpy_error); /* the module holds one reference, the C code another */
    if (add_methods(m, module_methods) || add_methods(m, kilnpy_network_methods) ||
        add_methods(m, kilnpy_engine_methods) || add_methods(m, kilnpy_plugin_methods) ||
        add_methods(m, kilnpy_class_plugin_methods) || add_methods(m, kilnpy_dlpack_methods))
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
