/*
 * onnx.h — importing ONNX models into kiln networks.
 *
 * kiln_onnx_import reads a .onnx file (protobuf, parsed with kiln's own
 * minimal schema, no ONNX library needed) and returns a kiln_network:
 *
 *   - graph inputs become network inputs; a dim given by name (dim_param)
 *     becomes a symbolic dim of that name (same name = same symbol), a dim
 *     with neither value nor name becomes a symbolic dim "<input>.<i>";
 *   - initializers (raw_data or the typed fields, or external data stored
 *     in a file next to the model; sparse initializers densified) and
 *     Constant nodes become network constants; a graph input that is also
 *     an initializer is a constant;
 *   - calls of model-local functions (ModelProto.functions) are inlined
 *     (names inside a body are prefixed "<call>#<n>/"; attribute references
 *     take the call's values or the function's defaults);
 *   - every other node becomes a layer.  The op is chosen as follows:
 *       1. a node with a `plugin_namespace` attribute runs the registered op
 *          plugin_namespace::op_type at version `plugin_version` (default
 *          1), even where a built-in op of that name exists;
 *       2. else a node of domain "" or "ai.onnx" runs the built-in
 *          "ai.onnx::op_type" of the highest version <= the model's opset
 *          for that domain ("ai.onnx.ml" likewise);
 *       3. else the node's domain is taken as the namespace, at version
 *          `plugin_version`, else the domain's opset version, else 1 (the
 *          highest registered version <= that);
 *       4. else the import fails with ONE message (KILN_EUNSUPPORTED)
 *          listing every unsupported node: name, op_type, domain, opset.
 *   - attributes are converted to the op's schema types; the attributes
 *     `plugin_namespace`, `plugin_version` and `aot` (0 = JIT, 1 = AOT, see
 *     kiln_layer_set_aot) are consumed by the importer; any other attribute
 *     that the op's schema lacks is an error (KILN_EATTR) naming node and
 *     attribute;
 *   - GRAPH attributes (If/Loop bodies) are imported recursively into a
 *     kiln_network.  A subgraph may use names of the enclosing graphs
 *     (outer scope).  Outer-scope constants are copied into the subgraph as
 *     constants.  Every other outer-scope name becomes an extra input of
 *     the subgraph network AND an extra input of the layer: the layer's
 *     inputs are its ONNX inputs followed by the outer-scope names used by
 *     any of its subgraphs (sorted by first use, the same list for every
 *     graph attribute of the node); each subgraph network's inputs are its
 *     own ONNX inputs (If: a placeholder for the condition) followed by that
 *     same list.  Ops with graph attributes therefore receive outer values
 *     as trailing inputs.
 *   - If: the taken branch is inlined when the condition is known at build
 *     time.  The importer also gives each If (outer three nesting levels) a
 *     `both` graph -- both branches plus a kiln::if_select per output -- so
 *     that a condition known only at run time works when both branches
 *     produce the same dtypes and shapes (both branches then run).
 *   - sequences and optionals: kiln networks carry tensors, so a value of
 *     type sequence(tensor) named `s` becomes two tensors: `s` (the
 *     elements' data concatenated, 1-D) and `s:shapes` (I64 [count, rank],
 *     row i = the dims of element i).  An optional(tensor) is such a
 *     sequence of 0 or 1 elements; an optional(sequence) adds `s:present`
 *     (BOOL scalar).  Graph inputs and outputs of these types appear as
 *     those network inputs/outputs (bind both; kiln_onnx_read_sequence
 *     reads ONNX test data into this form).  Elements of one sequence
 *     share one rank.  Supported: SequenceEmpty/Construct/Insert/Erase/At/
 *     Length, SplitToSequence, ConcatFromSequence, Optional,
 *     OptionalHasElement/GetElement, SequenceMap (element shapes known at
 *     build), Identity, If branches returning sequences, subgraphs reading
 *     an outer sequence, and Loops carrying sequences when the trip count
 *     is known at build (the loop is unrolled).  Elements of different
 *     ranks in one sequence are KILN_EUNSUPPORTED.
 *   - string tensors: a tensor(string) `s` of shape D becomes `s` (U8, the
 *     strings' bytes concatenated) and `s:lens` (I64 of shape D, the byte
 *     length of each string).  Cast/CastLike to and from STRING,
 *     StringNormalizer and Identity take them; other ops on strings are
 *     KILN_EUNSUPPORTED.
 *   - absent optional inputs ("") stay absent, in their position; outputs
 *     the node leaves out ("" or fewer than the op declares: optional or
 *     hidden outputs such as size tensors) get private names
 *     "<node>:unused_out<i>#<n>"; an op whose schema has an int attribute
 *     `num_outputs` the node does not set receives the node's output count;
 *     an op with graph attributes whose schema has an int attribute
 *     `num_outer` receives the number of trailing outer-scope inputs.
 *
 * Errors: every function returns 0 or a negative KILN_E* code and leaves a
 * message (kiln_errmsg()) that names the file, node, attribute or tensor at
 * fault.  Malformed or hostile files are KILN_EFORMAT (never a crash): every
 * size is checked (dims product overflow, raw_data length vs dims, external
 * data ranges).  External data locations are relative to the model's folder;
 * absolute paths and paths leaving that folder ("..") are rejected.
 */
#ifndef KILN_ONNX_H
#define KILN_ONNX_H

#include "kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A value for a graph input, turning it into a constant at import (used to
 * give build-time values such as shapes, axes or a sample rate). */
typedef struct kiln_onnx_value {
    const char *name;        /* graph input name */
    kiln_dtype dtype;
    int ndim;
    const int64_t *dims;
    const void *data;        /* row-major, copied */
} kiln_onnx_value;

typedef struct kiln_onnx_options {
    /* Folder that external data paths are relative to.  NULL: the model
     * file's folder (kiln_onnx_import); the memory importer then refuses
     * external data. */
    const char *base_dir;
    /* Graph inputs replaced by constants (may be NULL / 0).  Naming an
     * input the graph lacks is KILN_ENOTFOUND. */
    const kiln_onnx_value *values;
    int nvalues;
    /* 1: print each node as it is mapped (KILN_LOG_INFO). */
    int verbose;
    /* Graph inputs whose declared dims are replaced by these (name, ndim,
     * dims; dtype and data are ignored): imports a model with symbolic dims
     * for one concrete shape, so that shape-dependent values (an If on a
     * dim) are known when the engine is built.  A rank that disagrees with
     * the model is KILN_ESHAPE; an unknown name KILN_ENOTFOUND. */
    const kiln_onnx_value *shapes;
    int nshapes;
} kiln_onnx_options;

/* Import the model at `path`.  `opt` may be NULL (defaults).  On success
 * *out is a new network (free with kiln_network_free); on failure *out is
 * NULL.  Errors: KILN_EIO (cannot read), KILN_EFORMAT (malformed file),
 * KILN_EUNSUPPORTED (unsupported nodes, all listed; sparse/string tensors),
 * KILN_EATTR (attribute not in the op's schema or not convertible),
 * KILN_ENOTFOUND (a node input that no node, input or initializer
 * defines), or what the network API returns. */
KILN_API int kiln_onnx_import(const char *path, const kiln_onnx_options *opt,
                              kiln_network **out);
/* Same from `size` bytes at `buf` (not retained). */
KILN_API int kiln_onnx_import_memory(const void *buf, size_t size,
                                     const kiln_onnx_options *opt,
                                     kiln_network **out);

/* Read a serialized TensorProto file (ONNX test data: input_0.pb).  On
 * success *dtype, *ndim, dims[0..*ndim) (room for KILN_MAX_DIMS) and *data
 * (row-major, allocated; free with kiln_free; never NULL, even for empty
 * tensors) are set.  Errors: KILN_EIO, KILN_EFORMAT, KILN_EUNSUPPORTED
 * (string/complex tensors, rank > KILN_MAX_DIMS). */
KILN_API int kiln_onnx_read_tensor(const char *pb_path, kiln_dtype *dtype, int *ndim,
                                   int64_t *dims, void **data);

/* A sequence or optional value (ONNX test data: SequenceProto or
 * OptionalProto) in kiln's packed form (see "sequences and optionals"). */
typedef struct kiln_onnx_sequence {
    kiln_dtype dtype;   /* element type; UNDEFINED when there is no element */
    int64_t count;      /* number of tensors */
    int rank;           /* their rank; -1 when count == 0 */
    int64_t *shapes;    /* count * rank dims, row-major (kiln_free; may be NULL) */
    void *data;         /* the tensors' data, concatenated (kiln_free; never NULL) */
    size_t bytes;
    int nested;         /* 1: an optional holding a sequence (elem_type 3): the
                         * sequence is read into the fields above */
    int present;        /* nested: 1 when the optional holds the sequence */
} kiln_onnx_sequence;

/* Read a serialized SequenceProto or OptionalProto of tensors.  Errors:
 * KILN_EIO, KILN_EFORMAT, KILN_EUNSUPPORTED (maps, sparse values, deeper
 * nesting, elements of different type or rank).  Free with
 * kiln_onnx_sequence_free (also after an error). */
KILN_API int kiln_onnx_read_sequence(const char *pb_path, kiln_onnx_sequence *out);
KILN_API void kiln_onnx_sequence_free(kiln_onnx_sequence *s);

/* Read a serialized TensorProto of strings in kiln's packed form (see
 * "string tensors"): *ndim / dims[] (room for KILN_MAX_DIMS) its shape,
 * *lens (numel int64 byte lengths) and *bytes (*nbytes bytes, the strings
 * concatenated); both allocated (kiln_free; never NULL on success).
 * Errors: KILN_EIO, KILN_EFORMAT, KILN_ETYPE (not a string tensor). */
KILN_API int kiln_onnx_read_strings(const char *pb_path, int *ndim, int64_t *dims, int64_t **lens, void **bytes,
                                    size_t *nbytes);

#ifdef __cplusplus
}
#endif
#endif /* KILN_ONNX_H */
