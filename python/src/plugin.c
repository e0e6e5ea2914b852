/*
 * plugin.c — quick ops defined in Python (kiln.plugin) and the C
 * trampolines that call them.
 *
 * One registration = one kiln_quick_op whose `user` is a tuple
 * (identity, shape_fn, impl_fn, formats_fn, aot_fn, cuda_impl_fn,
 * cuda_aot_fn); the CPU
 * and the CUDA impl share one trampoline body (impl_call), which passes the
 * CUDA stream (kiln_exec_stream) to the CUDA one.  The tuple is kept
 * forever: kiln keeps op definitions (also unregistered ones) for the life
 * of the process, and engines may still call them.
 *
 * Shapes cross the boundary as expression trees (python/kiln/_expr.py):
 *   int                  a constant
 *   ("h", n)             a dim of the context: input i dim d is
 *                        n = i * KILN_MAX_DIMS + d; output k dim d is
 *                        OUT_BASE + k * KILN_MAX_DIMS + d
 *   ("s", k)             the symbol of size-tensor output k
 *   (op, a, b)           kiln_expr_bin(op, a, b), op a kiln_expr_op
 *   ("?", c, a, b)       kiln_expr_select(c, a, b)
 * Expressions from kiln never outlive the callback (plugin.h).
 *
 * Every trampoline takes the GIL (kiln calls them with it released), turns
 * a Python exception into a kiln error carrying the traceback, and never
 * lets one escape into C.
 */
#include "kilnpy.h"

#include <stdlib.h>
#include <string.h>

#define OUT_BASE (KILN_MAX_IO * KILN_MAX_DIMS)

enum { U_ID, U_SHAPE, U_IMPL, U_FORMATS, U_AOT, U_CUDA_IMPL, U_CUDA_AOT, U_COUNT };

static PyObject *user_get(void *user, int k) { return PyTuple_GetItem((PyObject *)user, k); }

static const char *user_id(void *user) { return PyUnicode_AsUTF8AndSize(user_get(user, U_ID), NULL); }

/* -------------------------------------------------------------- conversions */

/* Attribute values as a dict (arrays as (bytes, elem dtype)). */
PyObject *kilnpy_attrs_dict(const kiln_attrs *a) {
    PyObject *d = PyDict_New();
    for (int i = 0; d && a && i < a->count; i++) {
        const kiln_attr_value *v = &a->v[i];
        if (!v->present) continue;
        PyObject *o = NULL;
        switch (v->type) {
        case KILN_ATTR_INT: o = PyLong_FromLongLong(v->i); break;
        case KILN_ATTR_BOOL: o = PyBool_FromLong(v->i != 0); break;
        case KILN_ATTR_FLOAT: o = PyFloat_FromDouble(v->f); break;
        case KILN_ATTR_STRING: o = PyUnicode_FromStringAndSize(v->s ? v->s : "", (Py_ssize_t)v->len); break;
        case KILN_ATTR_BYTES: o = PyBytes_FromStringAndSize(v->s ? v->s : "", (Py_ssize_t)v->len); break;
        case KILN_ATTR_ARRAY:
            o = Py_BuildValue("(y#i)", v->data ? (const char *)v->data : "",
                              (Py_ssize_t)((size_t)v->count * kiln_dtype_size(v->elem)), (int)v->elem);
            break;
        default: continue; /* tensors and graphs are not Python plugin attributes */
        }
        if (!o || PyDict_SetItemString(d, a->defs[i].name, o) < 0) Py_CLEAR(d);
        Py_XDECREF(o);
    }
    return d;
}

/* (dtype, [(handle, const or None), ...]) for each of n descs. */
PyObject *kilnpy_descs_list(const kiln_desc *descs, int n, int base) {
    PyObject *list = PyList_New(n);
    for (int i = 0; list && i < n; i++) {
        const kiln_desc *d = &descs[i];
        int nd = d->dtype == KILN_DTYPE_UNDEFINED ? 0 : d->ndim;
        PyObject *dims = PyList_New(nd);
        for (int k = 0; dims && k < nd; k++) {
            int64_t v;
            PyObject *cv = kiln_expr_is_const(d->dims[k], &v) ? PyLong_FromLongLong(v) : (Py_INCREF(Py_None), Py_None);
            char text[256];
            kiln_expr_print(d->dims[k], text, sizeof text);
            PyList_SetItem(dims, k, Py_BuildValue("(iNs)", base + i * KILN_MAX_DIMS + k, cv, text));
        }
        PyObject *t = dims ? Py_BuildValue("(iN)", (int)d->dtype, dims) : NULL;
        if (!t) Py_CLEAR(list);
        else PyList_SetItem(list, i, t);
    }
    return list;
}

/* A tree (see the top) into an expression of c's pool, or NULL with a
 * Python exception.  sym[k]: size-tensor symbol of output k (or NULL). */
static const kiln_expr *tree_expr(const kiln_shape_ctx *c, PyObject *t, const kiln_expr *const *sym) {
    if (PyLong_Check(t)) {
        long long v = PyLong_AsLongLong(t);
        if (v == -1 && PyErr_Occurred()) return NULL;
        return kiln_expr_const(c->x, v);
    }
    if (!PyTuple_Check(t) || PyTuple_Size(t) < 2) {
        PyErr_Format(PyExc_TypeError, "a shape expression must be an int or a ShapeExpr, got %R", t);
        return NULL;
    }
    PyObject *tag = PyTuple_GetItem(t, 0);
    if (PyUnicode_Check(tag)) {
        const char *s = PyUnicode_AsUTF8AndSize(tag, NULL);
        if (s[0] == '?' && PyTuple_Size(t) == 4) {
            const kiln_expr *a = tree_expr(c, PyTuple_GetItem(t, 1), sym), *b = a ? tree_expr(c, PyTuple_GetItem(t, 2), sym) : NULL,
                            *d = b ? tree_expr(c, PyTuple_GetItem(t, 3), sym) : NULL;
            return d ? kiln_expr_select(c->x, a, b, d) : NULL;
        }
        long n = PyLong_AsLong(PyTuple_GetItem(t, 1));
        if (n == -1 && PyErr_Occurred()) return NULL;
        if (s[0] == 'h') {
            int out = n >= OUT_BASE, i = (int)((out ? n - OUT_BASE : n) / KILN_MAX_DIMS), d = (int)(n % KILN_MAX_DIMS);
            const kiln_desc *desc = out ? (i < c->nout ? &c->out[i] : NULL) : (i < c->nin ? &c->in[i] : NULL);
            if (n >= 0 && desc && d < desc->ndim && desc->dims[d]) return desc->dims[d];
            PyErr_Format(PyExc_ValueError, "shape expression refers to %s %d dim %d, which this call does not have "
                         "(was it kept from another call?)", out ? "output" : "input", i, d);
            return NULL;
        }
        if (s[0] == 's') {
            if (n >= 0 && n < c->nout && sym[n]) return sym[n];
            PyErr_Format(PyExc_ValueError, "shape expression uses the size tensor of output %ld, but output %ld is "
                         "not a size tensor", n, n);
            return NULL;
        }
        PyErr_Format(PyExc_ValueError, "unknown shape expression tag %R", tag);
        return NULL;
    }
    long op = PyLong_AsLong(tag);
    if (op == -1 && PyErr_Occurred()) return NULL;
    if (op < KILN_EXPR_ADD || op > KILN_EXPR_LT || PyTuple_Size(t) != 3) {
        PyErr_Format(PyExc_ValueError, "bad shape expression %R", t);
        return NULL;
    }
    const kiln_expr *a = tree_expr(c, PyTuple_GetItem(t, 1), sym);
    const kiln_expr *b = a ? tree_expr(c, PyTuple_GetItem(t, 2), sym) : NULL;
    return b ? kiln_expr_bin(c->x, (kiln_expr_op)op, a, b) : NULL;
}

/* -------------------------------------------------------------- shape */

/* What the Python layer returns: one (dtype, dims, alias, size) per output;
 * dims a list of trees (None for a size tensor), alias the input index or
 * -1, size (opt, upper) trees for a size tensor else None. */
int kilnpy_apply_outputs(kiln_shape_ctx *c, PyObject *outs, const char *id) {
    if (!PyList_Check(outs) || PyList_Size(outs) != c->nout) {
        PyErr_Format(PyExc_ValueError, "%s: the register function returned %zd outputs, the op declares %d", id,
                     PyList_Check(outs) ? PyList_Size(outs) : (Py_ssize_t)-1, c->nout);
        return -1;
    }
    const kiln_expr *sym[KILN_MAX_IO] = {0};
    for (int k = 0; k < c->nout; k++) { /* size tensors first: others use their symbols */
        PyObject *size = PyTuple_GetItem(PyList_GetItem(outs, k), 3);
        if (size == Py_None) continue;
        const kiln_expr *opt = tree_expr(c, PyTuple_GetItem(size, 0), sym);
        const kiln_expr *up = opt ? tree_expr(c, PyTuple_GetItem(size, 1), sym) : NULL;
        if (!up) return -1;
        sym[k] = kiln_shape_size_tensor(c, k, opt, up);
        if (!sym[k]) return 1; /* kiln's message */
    }
    for (int k = 0; k < c->nout; k++) {
        PyObject *o = PyList_GetItem(outs, k);
        if (PyTuple_GetItem(o, 3) != Py_None) continue;
        long dtype = PyLong_AsLong(PyTuple_GetItem(o, 0));
        PyObject *dims = PyTuple_GetItem(o, 1);
        Py_ssize_t nd = PySequence_Size(dims);
        if (nd < 0 || nd > KILN_MAX_DIMS) {
            PyErr_Format(PyExc_ValueError, "%s: output %d has %zd dims, at most %d", id, k, nd, KILN_MAX_DIMS);
            return -1;
        }
        c->out[k].dtype = (kiln_dtype)dtype;
        c->out[k].ndim = (int)nd;
        for (Py_ssize_t d = 0; d < nd; d++) {
            PyObject *t = PySequence_GetItem(dims, d);
            c->out[k].dims[d] = t ? tree_expr(c, t, sym) : NULL;
            Py_XDECREF(t);
            if (!c->out[k].dims[d]) return -1;
        }
        long alias = PyLong_AsLong(PyTuple_GetItem(o, 2));
        if (alias >= 0 && kiln_shape_alias(c, k, (int)alias)) return 1;
    }
    return 0;
}

static int shape_trampoline(kiln_shape_ctx *c) {
    PyGILState_STATE g = PyGILState_Ensure();
    char what[300];
    snprintf(what, sizeof what, "the register function of %s", user_id(c->user));
    int rc = 0;
    PyObject *ins = kilnpy_descs_list(c->in, c->nin, 0), *attrs = ins ? kilnpy_attrs_dict(c->attrs) : NULL;
    PyObject *outs = attrs ? PyObject_CallFunction(user_get(c->user, U_SHAPE), "OO", ins, attrs) : NULL;
    if (!outs) rc = kilnpy_error_from_python(what);
    else if ((rc = kilnpy_apply_outputs(c, outs, user_id(c->user))) < 0) rc = kilnpy_error_from_python(what);
    else if (rc > 0) rc = KILN_ESHAPE;
    Py_XDECREF(ins);
    Py_XDECREF(attrs);
    Py_XDECREF(outs);
    PyGILState_Release(g);
    return rc;
}

/* -------------------------------------------------------------- impl */

PyObject *kilnpy_tensors_list(const kiln_tensor *t, int n) {
    PyObject *list = PyList_New(n);
    for (int i = 0; list && i < n; i++) {
        PyObject *o = Py_BuildValue("(KiNNii)", (unsigned long long)(uintptr_t)t[i].data, (int)t[i].dtype,
                                    kilnpy_dims(t[i].dims, t[i].ndim), kilnpy_dims(t[i].strides, t[i].ndim),
                                    (int)t[i].format, (int)t[i].device);
        if (!o) Py_CLEAR(list);
        else PyList_SetItem(list, i, o);
    }
    return list;
}

/* fn(ins, outs, attrs, tactic, workspace, stream): stream is the CUstream
 * of a CUDA call as an int, 0 on the CPU. */
static int impl_call(const kiln_call *c, int which) {
    PyGILState_STATE g = PyGILState_Ensure();
    int rc = 0;
    void *stream = c->exec ? kiln_exec_stream(c->exec) : NULL;
    PyObject *ins = kilnpy_tensors_list(c->in, c->nin), *outs = ins ? kilnpy_tensors_list(c->out, c->nout) : NULL;
    PyObject *attrs = outs ? kilnpy_attrs_dict(c->attrs) : NULL;
    PyObject *r = attrs ? PyObject_CallFunction(user_get(c->user, which), "OOOiKK", ins, outs, attrs, c->tactic,
                                                (unsigned long long)(uintptr_t)c->workspace,
                                                (unsigned long long)(uintptr_t)stream)
                        : NULL;
    if (!r) {
        char what[300];
        snprintf(what, sizeof what, "the %simpl function of %s (layer '%s')", which == U_CUDA_IMPL ? "CUDA " : "",
                 user_id(c->user), c->layer ? c->layer : "?");
        rc = kilnpy_error_from_python(what);
    }
    Py_XDECREF(ins);
    Py_XDECREF(outs);
    Py_XDECREF(attrs);
    Py_XDECREF(r);
    PyGILState_Release(g);
    return rc;
}

static int impl_trampoline(const kiln_call *c) { return impl_call(c, U_IMPL); }
static int cuda_impl_trampoline(const kiln_call *c) { return impl_call(c, U_CUDA_IMPL); }

/* -------------------------------------------------------------- autotune */

/* Strings of the last answer on this thread (kiln copies them right after
 * the call: plugin.h). */
static _Thread_local char t_combo_text[16384];

static int formats_trampoline(const kiln_shape_ctx *c, kiln_combo *out, int max) {
    PyGILState_STATE g = PyGILState_Ensure();
    char what[300];
    snprintf(what, sizeof what, "the autotune function of %s", user_id(c->user));
    int n = 0;
    size_t used = 0;
    PyObject *ins = kilnpy_descs_list(c->in, c->nin, 0), *outs = ins ? kilnpy_descs_list(c->out, c->nout, OUT_BASE) : NULL;
    PyObject *attrs = outs ? kilnpy_attrs_dict(c->attrs) : NULL;
    PyObject *r = attrs ? PyObject_CallFunction(user_get(c->user, U_FORMATS), "OOO", ins, outs, attrs) : NULL;
    if (!r) {
        n = kilnpy_error_from_python(what);
        goto done;
    }
    /* r: [(types, layouts or None, [tactics])] */
    for (Py_ssize_t k = 0; k < PyList_Size(r) && n >= 0; k++) {
        if (n == max) {
            n = kiln_set_error(KILN_EINVAL, "%s: more than %d combinations", what, max);
            break;
        }
        PyObject *t = PyList_GetItem(r, k);
        kiln_combo *cb = &out[n];
        memset(cb, 0, sizeof *cb);
        for (int s = 0; s < 2; s++) {
            PyObject *str = PyTuple_GetItem(t, s);
            if (str == Py_None) continue;
            Py_ssize_t len;
            const char *p = PyUnicode_AsUTF8AndSize(str, &len);
            if (!p || used + (size_t)len + 1 > sizeof t_combo_text) {
                PyErr_Clear();
                n = kiln_set_error(KILN_EINVAL, "%s: combination strings too long", what);
                break;
            }
            memcpy(t_combo_text + used, p, (size_t)len + 1);
            if (s == 0) cb->types = t_combo_text + used;
            else cb->layouts = t_combo_text + used;
            used += (size_t)len + 1;
        }
        PyObject *tac = PyTuple_GetItem(t, 2);
        Py_ssize_t nt = PyList_Size(tac);
        if (n >= 0 && nt > KILN_MAX_TACTICS) n = kiln_set_error(KILN_EINVAL, "%s: %zd tactics, at most %d", what, nt, KILN_MAX_TACTICS);
        for (Py_ssize_t i = 0; n >= 0 && i < nt; i++) {
            long v = PyLong_AsLong(PyList_GetItem(tac, i));
            if (v <= 0) {
                PyErr_Clear();
                n = kiln_set_error(KILN_EINVAL, "%s: tactic %ld, expected an int > 0", what, v);
            }
            cb->tactics[i] = (int)v;
        }
        if (n >= 0) n++;
    }
done:
    Py_XDECREF(ins);
    Py_XDECREF(outs);
    Py_XDECREF(attrs);
    Py_XDECREF(r);
    PyGILState_Release(g);
    return n;
}

/* -------------------------------------------------------------- aot */

/* The last answer of aot_fn on this thread: kiln copies source and entry
 * right after the call. */
static _Thread_local char *t_aot_source, *t_aot_entry;

/* A tree into *e; `opt`: None gives NULL (kiln's default).  0 or -1. */
static int aot_expr(const kiln_shape_ctx *c, PyObject *t, int opt, const kiln_expr **e) {
    static const kiln_expr *const none[KILN_MAX_IO];
    *e = NULL;
    if (opt && t == Py_None) return 0;
    *e = tree_expr(c, t, none);
    return *e ? 0 : -1;
}

/* Entry, source and scalars, common to both kinds of answer. */
static int aot_common(const kiln_shape_ctx *c, const char *entry, const char *src, PyObject *scal,
                      kiln_aot_kernel *k) {
    free(t_aot_source);
    free(t_aot_entry);
    t_aot_source = strdup(src);
    t_aot_entry = strdup(entry);
    if (!t_aot_source || !t_aot_entry) return PyErr_NoMemory(), -1;
    k->source = t_aot_source;
    k->entry = t_aot_entry;
    Py_ssize_t ns = PyList_Size(scal);
    if (ns < 0) return -1;
    if (ns > KILN_MAX_SCALARS) {
        PyErr_Format(PyExc_ValueError, "%zd scalar arguments, at most %d", ns, KILN_MAX_SCALARS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < ns; i++) {
        PyObject *s = PyList_GetItem(scal, i);
        int ty = (int)PyLong_AsLong(PyTuple_GetItem(s, 0));
        k->scalar_types[i] = (kiln_scalar_type)ty;
        if (ty == KILN_SCALAR_F32) k->fscalars[i] = PyFloat_AsDouble(PyTuple_GetItem(s, 1));
        else if (aot_expr(c, PyTuple_GetItem(s, 1), 0, &k->scalars[i])) return -1;
    }
    k->nscalars = (int)ns;
    return PyErr_Occurred() ? -1 : 0;
}

/* fn(ins, outs, attrs, io types, tactic) with the GIL; NULL with an
 * exception. */
static PyObject *aot_call(const kiln_shape_ctx *c, const kiln_io_format *io, int tactic, int which) {
    PyObject *ins = kilnpy_descs_list(c->in, c->nin, 0), *outs = ins ? kilnpy_descs_list(c->out, c->nout, OUT_BASE) : NULL;
    PyObject *attrs = outs ? kilnpy_attrs_dict(c->attrs) : NULL;
    PyObject *types = PyList_New(io->n);
    for (int p = 0; types && p < io->n; p++) PyList_SetItem(types, p, Py_BuildValue("(ii)", io->dtype[p], io->format[p]));
    PyObject *r = attrs && types ? PyObject_CallFunction(user_get(c->user, which), "OOOOi", ins, outs, attrs, types, tactic)
                                 : NULL;
    Py_XDECREF(ins);
    Py_XDECREF(outs);
    Py_XDECREF(attrs);
    Py_XDECREF(types);
    return r;
}

/* CPU: r = (entry, C source, extent tree, [(scalar type 1..3, tree or float)]) */
static int aot_trampoline(const kiln_shape_ctx *c, const kiln_io_format *io, int tactic, kiln_aot_kernel *k) {
    PyGILState_STATE g = PyGILState_Ensure();
    char what[300];
    snprintf(what, sizeof what, "the aot_impl function of %s", user_id(c->user));
    PyObject *r = aot_call(c, io, tactic, U_AOT), *extent = NULL, *scal = NULL;
    const char *entry = NULL, *src = NULL;
    int bad = !r || !PyArg_ParseTuple(r, "ssOO", &entry, &src, &extent, &scal) || aot_common(c, entry, src, scal, k) ||
              aot_expr(c, extent, 0, &k->extent);
    int rc = bad ? kilnpy_error_from_python(what) : 0;
    Py_XDECREF(r);
    PyGILState_Release(g);
    return rc;
}

/* CUDA: r = (entry, PTX or CUDA C, lang, [grid x, y, z], [block x, y, z],
 * shared memory, scalars as above, [scratch bytes per block]); a tree may
 * be None (kiln's default: 1, or 0 bytes). */
static int cuda_aot_trampoline(const kiln_shape_ctx *c, const kiln_io_format *io, int tactic, kiln_aot_kernel *k) {
    PyGILState_STATE g = PyGILState_Ensure();
    char what[300];
    snprintf(what, sizeof what, "the CUDA aot_impl function of %s", user_id(c->user));
    PyObject *r = aot_call(c, io, tactic, U_CUDA_AOT), *grid = NULL, *block = NULL, *shmem = NULL, *scal = NULL,
             *scratch = NULL;
    const char *entry = NULL, *src = NULL;
    int lang = 0;
    int bad = !r || !PyArg_ParseTuple(r, "ssiOOOOO", &entry, &src, &lang, &grid, &block, &shmem, &scal, &scratch) ||
              aot_common(c, entry, src, scal, k) || aot_expr(c, shmem, 1, &k->shared_mem);
    k->lang = lang;
    for (int d = 0; d < 3 && !bad; d++)
        bad = aot_expr(c, PyList_GetItem(grid, d), 1, &k->grid[d]) || aot_expr(c, PyList_GetItem(block, d), 1, &k->block[d]);
    Py_ssize_t nscratch = bad ? 0 : PyList_Size(scratch);
    if (!bad && (nscratch < 0 || nscratch > KILN_AOT_MAX_SCRATCH)) {
        if (nscratch > 0) PyErr_Format(PyExc_ValueError, "%zd scratch pointers, at most %d", nscratch, KILN_AOT_MAX_SCRATCH);
        bad = 1;
    }
    for (Py_ssize_t i = 0; !bad && i < nscratch; i++) {
        k->scratch_bytes[i] = PyLong_AsUnsignedLongLong(PyList_GetItem(scratch, i));
        bad = PyErr_Occurred() != NULL;
    }
    k->nscratch = (int)nscratch;
    int rc = bad ? kilnpy_error_from_python(what) : 0;
    Py_XDECREF(r);
    PyGILState_Release(g);
    return rc;
}

/* -------------------------------------------------------------- registration */

kiln_attr_def *kilnpy_split_and_defs(const char *id, char *buf, size_t size, const char **ns, const char **name,
                                     PyObject *attrs) {
    const char *sep = strstr(id, "::");
    if (!sep || sep == id || !sep[2] || strlen(id) >= size) {
        PyErr_Format(PyExc_ValueError, "plugin identity \"%s\": expected \"namespace::name\"", id);
        return NULL;
    }
    memcpy(buf, id, strlen(id) + 1);
    buf[sep - id] = '\0';
    *ns = buf;
    *name = buf + (sep - id) + 2;
    Py_ssize_t na = PyList_Size(attrs);
    if (na < 0) return NULL;
    kiln_attr_def *defs = PyMem_Calloc((size_t)na + 1, sizeof *defs);
    if (!defs) return (kiln_attr_def *)PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < na; i++) {
        int type, elem, req;
        if (!PyArg_ParseTuple(PyList_GetItem(attrs, i), "siizp", &defs[i].name, &type, &elem, &defs[i].def, &req)) {
            PyMem_Free(defs);
            return NULL;
        }
        defs[i].type = (kiln_attr_type)type;
        defs[i].elem = (kiln_dtype)elem;
        defs[i].required = req;
    }
    return defs;
}

/* register_quick_op(identity, version, min_in, max_in, nout, attrs, shape,
 *                   impl, formats, aot, aot_signature, timing_id, doc,
 *                   serialize_attrs, cuda_impl, cuda_graph_safe, cuda_aot)
 * attrs: [(name, type, elem, default text or None, required)];
 * serialize_attrs: comma-separated names stored in the engine, None: all;
 * cuda_impl: None for a CPU-only op; cuda_graph_safe: 1 lets kiln capture
 * the CUDA impl's launches into a CUDA graph (replays do not call it);
 * cuda_aot: None, or the function whose answer cuda_aot_trampoline reads. */
static PyObject *py_register_quick_op(PyObject *self, PyObject *args) {
    (void)self;
    const char *id, *aot_sig, *timing_id, *doc, *serialize_attrs = NULL;
    int version, min_in, max_in, nout, graph_safe = 0;
    PyObject *attrs, *shape, *impl, *formats, *aot, *cuda_impl = Py_None, *cuda_aot = Py_None;
    if (!PyArg_ParseTuple(args, "siiiiOOOOOzzz|zOpO", &id, &version, &min_in, &max_in, &nout, &attrs, &shape, &impl,
                          &formats, &aot, &aot_sig, &timing_id, &doc, &serialize_attrs, &cuda_impl, &graph_safe,
                          &cuda_aot))
        return NULL;
    char buf[512];
    const char *ns, *name;
    kiln_attr_def *defs = kilnpy_split_and_defs(id, buf, sizeof buf, &ns, &name, attrs);
    if (!defs) return NULL;
    PyObject *user = PyTuple_Pack(U_COUNT, PyTuple_GetItem(args, 0), shape, impl, formats, aot, cuda_impl, cuda_aot);
    if (!user) {
        PyMem_Free(defs);
        return NULL;
    }
    kiln_quick_op q = {
        .ns = ns, .name = name, .version = version, .min_inputs = min_in, .max_inputs = max_in,
        .num_outputs = nout, .attrs = defs, .shape = shape_trampoline,
        .impl = impl != Py_None ? impl_trampoline : NULL, .timing_id = timing_id,
        .aot = aot != Py_None ? aot_trampoline : NULL, .aot_signature = aot_sig, .doc = doc, .user = user,
        .formats_fn = formats != Py_None ? formats_trampoline : NULL, .serialize_attrs = serialize_attrs,
        .cuda_impl = cuda_impl != Py_None ? cuda_impl_trampoline : NULL, .cuda_graph_unsafe = !graph_safe,
        .cuda_aot = cuda_aot != Py_None ? cuda_aot_trampoline : NULL,
    };
    int rc = kiln_register_quick_op(&q); /* copies everything but `user` */
    PyMem_Free(defs);
    if (rc) {
        Py_DECREF(user);
        return kilnpy_raise(rc);
    }
    Py_RETURN_NONE; /* `user` stays referenced: kiln keeps the op for the process's life */
}

static PyObject *py_registry_unregister(PyObject *self, PyObject *args) {
    (void)self;
    const char *id;
    int version;
    if (!PyArg_ParseTuple(args, "si", &id, &version)) return NULL;
    int rc = kiln_registry_unregister(id, version);
    if (rc) return kilnpy_raise(rc);
    Py_RETURN_NONE;
}

static PyObject *py_registry_ops(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    int n = kiln_registry_count();
    PyObject *list = PyList_New(0);
    for (int i = 0; list && i < n; i++) {
        kiln_op_info o;
        if (kiln_registry_op(i, &o)) break; /* unregistered meanwhile */
        PyObject *attrs = PyList_New(o.nattrs);
        for (int k = 0; attrs && k < o.nattrs; k++)
            PyList_SetItem(attrs, k, Py_BuildValue("(siizi)", o.attrs[k].name, (int)o.attrs[k].type,
                                                   (int)o.attrs[k].elem, o.attrs[k].def, o.attrs[k].required));
        PyObject *t = attrs ? Py_BuildValue("{sssssisisisisNsssssisisisi}", "ns", o.ns, "name", o.name, "version",
                                            o.version, "min_inputs", o.min_inputs, "max_inputs", o.max_inputs,
                                            "num_outputs", o.num_outputs, "attrs", attrs, "doc", o.doc, "library",
                                            o.library, "builtin", o.builtin, "quick", o.is_quick, "impl",
                                            o.has_impl, "aot", o.has_aot)
                            : NULL;
        if (!t || PyList_Append(list, t) < 0) Py_CLEAR(list);
        Py_XDECREF(t);
    }
    return list;
}

static PyObject *py_registry_load_library(PyObject *self, PyObject *args) {
    (void)self;
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    int rc = kiln_registry_load_library(path);
    if (rc) return kilnpy_raise(rc);
    Py_RETURN_NONE;
}

/* plugin_compile(path_or_source, is_source, cflags, rebuild, load) -> .so path */
static PyObject *py_plugin_compile(PyObject *self, PyObject *args) {
    (void)self;
    const char *src, *cflags;
    int is_source, rebuild, load;
    if (!PyArg_ParseTuple(args, "spzpp", &src, &is_source, &cflags, &rebuild, &load)) return NULL;
    kiln_compile_options o = {.is_source = is_source, .cflags = cflags, .rebuild = rebuild};
    char *so = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = load ? kiln_plugin_compile_load(src, &o, &so) : kiln_plugin_compile(src, &o, &so);
    Py_END_ALLOW_THREADS
    if (rc) {
        kiln_free(so);
        return kilnpy_raise(rc);
    }
    PyObject *r = PyUnicode_FromString(so ? so : "");
    kiln_free(so);
    return r;
}

PyMethodDef kilnpy_plugin_methods[] = {
    {"register_quick_op", py_register_quick_op, METH_VARARGS, NULL},
    {"registry_unregister", py_registry_unregister, METH_VARARGS, NULL},
    {"registry_ops", py_registry_ops, METH_NOARGS, NULL},
    {"registry_load_library", py_registry_load_library, METH_VARARGS, NULL},
    {"plugin_compile", py_plugin_compile, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};
