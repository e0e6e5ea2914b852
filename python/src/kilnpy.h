/*
 * kilnpy.h — the C half of the `kiln` Python package (module `kiln._kiln`).
 *
 * A thin layer over the public C API (include/kiln/): it converts
 * arguments, calls kiln, and turns a failing status into kiln.KilnError
 * carrying the code and kiln_errmsg().  The Python half (python/kiln/)
 * builds the tensorrt-style classes on top.  Handles travel as capsules:
 *   "kiln.network", "kiln.layer" (owned by its network), "kiln.config",
 *   "kiln.engine", "kiln.context".
 * The Python wrappers keep owners alive (a layer its network, a context its
 * engine).  Built against the stable ABI (Py_LIMITED_API, 3.11).
 */
#ifndef KILNPY_H
#define KILNPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "kiln/kiln.h"
#include "kiln/onnx.h"
#include "kiln/plugin.h"

/* kiln.KilnError (module.c). */
extern PyObject *kilnpy_error;

/* Raise KilnError for status rc with kiln_errmsg(); returns NULL. */
PyObject *kilnpy_raise(int rc);
/* The pointer in capsule o named `name`, or NULL with TypeError. */
void *kilnpy_ptr(PyObject *o, const char *name);
/* A tuple of ints from dims[0..n). */
PyObject *kilnpy_dims(const int64_t *dims, int n);
/* Fill dims (at most KILN_MAX_DIMS) from a sequence of ints; returns the
 * count or -1 with an exception. */
int kilnpy_parse_dims(PyObject *seq, int64_t *dims, const char *what);
/* The current Python exception, with its traceback, as a kiln error:
 * kiln_set_error(KILN_EPLUGIN, "<what>: <traceback>"); clears it. */
int kilnpy_error_from_python(const char *what);

/* (name, (ns, name), version, inputs, outputs, tactic, aot, ms) (network.c). */
PyObject *kilnpy_layer_tuple(const kiln_layer_info *li);

/* plugin.c, shared with class_plugin.c: attribute values as a dict;
 * descriptors as [(dtype, [(handle, const, text)])] (handles from `base`);
 * tensors as [(address, dtype, dims, strides, format, device)]; a shape answer
 * [(dtype, dims trees, alias, size)] applied to c (0, 1 with a kiln error,
 * -1 with a Python exception); an identity split into buf and an attribute
 * schema from [(name, type, elem, default, required)] (PyMem_Free it). */
PyObject *kilnpy_attrs_dict(const kiln_attrs *a);
PyObject *kilnpy_descs_list(const kiln_desc *descs, int n, int base);
PyObject *kilnpy_tensors_list(const kiln_tensor *t, int n);
int kilnpy_apply_outputs(kiln_shape_ctx *c, PyObject *outs, const char *id);
kiln_attr_def *kilnpy_split_and_defs(const char *id, char *buf, size_t size, const char **ns, const char **name,
                                     PyObject *attrs);

/* Method tables of the parts (network.c, engine.c, plugin.c,
 * class_plugin.c, dlpack.c). */
extern PyMethodDef kilnpy_network_methods[];
extern PyMethodDef kilnpy_engine_methods[];
extern PyMethodDef kilnpy_plugin_methods[];
extern PyMethodDef kilnpy_class_plugin_methods[];
extern PyMethodDef kilnpy_dlpack_methods[];

#endif
