/*
 * dlpack.c — DLPack capsules for kiln.plugin.Tensor.__dlpack__, so that
 * torch.from_dlpack, cupy.from_dlpack, numpy.from_dlpack and friends view
 * an impl's tensors (host or device memory) without a copy.
 *
 * The structs below are the DLPack ABI (dlpack.h, version 0.8 and later:
 * the unversioned "dltensor" capsule every consumer accepts), written out
 * here rather than vendored.  The memory belongs to kiln (the engine's
 * activations, valid during the impl call): the capsule owns only the
 * DLManagedTensor and its shape/stride arrays, one malloc'ed block that the
 * deleter frees.  The deleter needs no GIL, so consumers may call it from
 * any thread.
 */
#include "kilnpy.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t device_type; /* kDLCPU 1, kDLCUDA 2 */
    int32_t device_id;
} dl_device;

typedef struct {
    uint8_t code; /* kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6 */
    uint8_t bits;
    uint16_t lanes;
} dl_dtype;

typedef struct {
    void *data;
    dl_device device;
    int32_t ndim;
    dl_dtype dtype;
    int64_t *shape;
    int64_t *strides; /* in elements */
    uint64_t byte_offset;
} dl_tensor;

typedef struct dl_managed {
    dl_tensor t;
    void *manager_ctx;
    void (*deleter)(struct dl_managed *self);
    int64_t dims[2 * KILN_MAX_DIMS]; /* shape then strides */
} dl_managed;

static void managed_free(dl_managed *m) { free(m); }

/* A capsule a consumer never took still owns its tensor. */
static void capsule_free(PyObject *cap) {
    if (!PyCapsule_IsValid(cap, "dltensor")) return; /* consumed: renamed "used_dltensor" */
    dl_managed *m = PyCapsule_GetPointer(cap, "dltensor");
    if (m && m->deleter) m->deleter(m);
}

/* dlpack(address, shape, strides, code, bits, device_type, device_id) */
static PyObject *py_dlpack(PyObject *self, PyObject *args) {
    (void)self;
    unsigned long long addr;
    PyObject *shape, *strides;
    int code, bits, dev_type, dev_id;
    if (!PyArg_ParseTuple(args, "KOOiiii", &addr, &shape, &strides, &code, &bits, &dev_type, &dev_id)) return NULL;
    int64_t dims[KILN_MAX_DIMS], st[KILN_MAX_DIMS];
    int nd = kilnpy_parse_dims(shape, dims, "shape");
    if (nd < 0) return NULL;
    int ns = kilnpy_parse_dims(strides, st, "strides");
    if (ns < 0) return NULL;
    if (ns != nd) return PyErr_Format(PyExc_ValueError, "dlpack: %d dims but %d strides", nd, ns);
    dl_managed *m = calloc(1, sizeof *m);
    if (!m) return PyErr_NoMemory();
    memcpy(m->dims, dims, sizeof(int64_t) * (size_t)nd);
    memcpy(m->dims + KILN_MAX_DIMS, st, sizeof(int64_t) * (size_t)nd);
    m->t = (dl_tensor){.data = (void *)(uintptr_t)addr, .device = {dev_type, dev_id}, .ndim = nd,
                       .dtype = {(uint8_t)code, (uint8_t)bits, 1}, .shape = m->dims,
                       .strides = m->dims + KILN_MAX_DIMS};
    m->deleter = managed_free;
    PyObject *cap = PyCapsule_New(m, "dltensor", capsule_free);
    if (!cap) free(m);
    return cap;
}

/* dlpack_address(capsule) -> (address, bytes, device_type, contiguous,
 * type code, bits) of a producer's unversioned "dltensor" capsule, without
 * consuming it: the caller keeps the capsule alive while it uses the
 * memory, and its destructor releases the producer's tensor. */
static PyObject *py_dlpack_address(PyObject *self, PyObject *cap) {
    (void)self;
    if (!PyCapsule_IsValid(cap, "dltensor"))
        return PyErr_Format(PyExc_TypeError, "expected an unused DLPack capsule named \"dltensor\" (DLPack < 1.0)");
    const dl_managed *m = PyCapsule_GetPointer(cap, "dltensor");
    if (!m) return NULL;
    const dl_tensor *t = &m->t;
    if (t->ndim < 0 || t->ndim > KILN_MAX_DIMS || t->dtype.lanes != 1 || t->dtype.bits % 8)
        return PyErr_Format(PyExc_ValueError, "DLPack tensor: %d dims, %d-bit x %d lanes: not a plain array",
                            (int)t->ndim, (int)t->dtype.bits, (int)t->dtype.lanes);
    unsigned long long n = t->dtype.bits / 8, expect = n;
    int contiguous = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->strides && t->shape[d] > 1 && (unsigned long long)t->strides[d] * (t->dtype.bits / 8) != expect)
            contiguous = 0;
        expect *= (unsigned long long)t->shape[d];
        n *= (unsigned long long)t->shape[d];
    }
    return Py_BuildValue("(KKiiii)", (unsigned long long)(uintptr_t)((const char *)t->data + t->byte_offset), n,
                         (int)t->device.device_type, contiguous, (int)t->dtype.code, (int)t->dtype.bits);
}

PyMethodDef kilnpy_dlpack_methods[] = {
    {"dlpack", py_dlpack, METH_VARARGS, "dlpack(address, shape, strides, code, bits, device_type, device_id)"},
    {"dlpack_address", py_dlpack_address, METH_O, "dlpack_address(capsule) -> (address, bytes, device, contiguous, type code, bits)"},
    {NULL, NULL, 0, NULL},
};
