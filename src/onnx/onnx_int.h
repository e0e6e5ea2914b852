/*
 * onnx_int.h — internals of the ONNX importer (src/onnx/).
 *
 *   reader.c  files, protobuf parsing with a nesting-depth guard, TensorProto
 *             decoding (raw/typed/external data) and kiln_onnx_read_tensor
 *   import*.c ModelProto -> kiln_network (node mapping, attributes,
 *             subgraphs with outer-scope names); import.c has the map of
 *             its parts, import_int.h what they share
 *   function.c model-local functions inlined before the import
 */
#ifndef KILN_ONNX_INT_H
#define KILN_ONNX_INT_H

#include "kiln_int.h"
#include "kiln/onnx.h"
#include "onnx_min.pb-c.h"

/* Deepest message nesting accepted (protobuf-c recurses once per level). */
#define KILN__ONNX_MAX_DEPTH 64
/* Largest file read into memory (model or tensor), and largest tensor. */
#define KILN__ONNX_MAX_FILE ((size_t)1 << 34)

/* A decoded tensor: row-major little-endian host data, never NULL.
 * borrowed = 1: data points into the TensorProto's raw_data (valid while
 * the proto lives); else kiln__malloc'd. */
typedef struct kiln__onnx_tensor {
    kiln_dtype dtype;
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
    void *data;
    size_t bytes;
    int borrowed;
} kiln__onnx_tensor;

/* Read a whole file (kiln__malloc'd; at least 1 byte allocated). */
int kiln__onnx_read_file(const char *path, uint8_t **buf, size_t *size);
/* Map a whole model file read-only (kiln__onnx_unmap_file when done; an
 * empty file gives a non-NULL empty buffer).  Like a mapped engine file,
 * the file must not be truncated while it is mapped (SIGBUS). */
int kiln__onnx_map_file(const char *path, const uint8_t **buf, size_t *size);
void kiln__onnx_unmap_file(const uint8_t *buf, size_t size);
/* Check the protobuf wire format nests at most KILN__ONNX_MAX_DEPTH deep
 * (guards protobuf-c's recursion).  KILN_EFORMAT with the offset. */
int kiln__onnx_check_depth(const uint8_t *buf, size_t size);
/* protobuf-c allocator that goes through kiln__malloc. */
extern ProtobufCAllocator kiln__onnx_pb_alloc;

/* Decode a TensorProto.  base_dir: folder for external data (NULL: external
 * data refused).  `where` names the tensor in messages.  raw_data with
 * bytes > 0 is borrowed, not copied. */
int kiln__onnx_tensor_decode(const Onnx__TensorProto *t, const char *base_dir,
                             const char *where, kiln__onnx_tensor *out);
void kiln__onnx_tensor_free(kiln__onnx_tensor *t);
/* Decode a SparseTensorProto into a dense tensor (zeros elsewhere). */
int kiln__onnx_sparse_decode(const Onnx__SparseTensorProto *sp, const char *base_dir,
                             const char *where, kiln__onnx_tensor *out);
/* numel of dims with overflow check: 0 or KILN_EFORMAT. */
int kiln__onnx_numel(int ndim, const int64_t *dims, size_t elem, int64_t *numel,
                     size_t *bytes, const char *where);

/* function.c: inline model-local functions into the model's graphs (in
 * place; restore before freeing the message, also after an error). */
typedef struct kiln__onnx_inline kiln__onnx_inline;
int kiln__onnx_inline_functions(Onnx__ModelProto *m, kiln__onnx_inline **state);
void kiln__onnx_inline_restore(kiln__onnx_inline *state);

#endif
