/*
 * import_int.h — what the parts of the ONNX importer share (see import.c
 * for the map): the importer state, graph scopes, name sets, and the
 * functions one part calls in another (kiln__imp_ prefix).
 */
#ifndef KILN_ONNX_IMPORT_INT_H
#define KILN_ONNX_IMPORT_INT_H

#include "onnx_int.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct strset {
    char **keys;      /* insertion order */
    int n, cap;
    int *slots;       /* open addressing: index+1, 0 = empty */
    int nslots;
} strset;


typedef struct text {
    char *s;
    size_t len, cap;
} text;


typedef struct opset {
    const char *domain;   /* "" for ai.onnx */
    int64_t version;
} opset;

typedef struct imp {
    const char *base_dir;
    const kiln_onnx_options *opt;
    opset *opsets;
    int nopsets;
    text unsupported;
    int nunsupported;
    int layer_seq;
    int verbose;
    int pad_out;      /* outputs to add to the next imported subgraph */
    /* Types for the next imported subgraph's inputs that the model leaves
     * untyped (Loop bodies: iteration number, condition, carried values). */
    const struct extra *in_hints;
    int nhints;
    /* Sequence / optional values (see "Sequences" below): names whose
     * value travels as 2 tensors (data, :shapes) or 3 (+ :present). */
    strset seq2, seq3;
    /* String tensors: `s` (U8 bytes) and `s:lens` (I64 lengths, the
     * tensor's shape); also in seq2 (two parts). */
    strset str2;
} imp;

typedef struct scope {
    const struct scope *parent;
    kiln_network *net;
    const Onnx__GraphProto *g;
} scope;


typedef struct extra {
    const char *name;
    kiln_dtype dtype;
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
    const char *dim_names[KILN_MAX_DIMS];
} extra;


/* import_names.c */
void kiln__imp_strset_free(strset *s);
int kiln__imp_strset_has(const strset *s, const char *k);
int kiln__imp_strset_add(strset *s, const char *k);
void kiln__imp_text_add(text *t, const char *fmt, ...) KILN_PRINTF(2, 3);

/* import.c */
const char *kiln__imp_node_label(const Onnx__NodeProto *n, char *buf, size_t size);
const Onnx__AttributeProto *kiln__imp_find_attr(const Onnx__NodeProto *n, const char *name);
int kiln__imp_is_constant_node(const Onnx__NodeProto *n);
int kiln__imp_resolve_op(const imp *im, const Onnx__NodeProto *n, kiln_op_info *op, char *why, size_t wsz);
int kiln__imp_net_tensor(const kiln_network *net, const char *name, kiln_net_tensor_info *t);

/* import_scope.c */
int kiln__imp_free_names(const Onnx__GraphProto *g, strset *out, int depth);
int kiln__imp_value_type(const Onnx__ValueInfoProto *vi, const char *what, kiln_dtype *dt, int *ndim,
    int64_t *dims, const char **names);
int kiln__imp_value_type_dims(const Onnx__ValueInfoProto *vi, int *nd, int64_t *dims, const char **names);
void kiln__imp_describe_outer(const scope *sc, const char *name, extra *e);
int kiln__imp_add_extra_input(kiln_network *net, const extra *e);

/* import_sequences.c */
int kiln__imp_is_lowered_node(const Onnx__NodeProto *n);
int kiln__imp_type_parts(const Onnx__TypeProto *tp, kiln_dtype *dt, int *rank);
int kiln__imp_parts_of(const imp *im, const char *name);
int kiln__imp_is_str(const imp *im, const char *name);
int kiln__imp_set_str(imp *im, const char *name);
int kiln__imp_set_parts(imp *im, const char *name, int parts);
int kiln__imp_takes_sequences(const char *op_type);
int kiln__imp_out_is_str(const Onnx__NodeProto *n, size_t i);
int kiln__imp_out_parts(const imp *im, const Onnx__NodeProto *n, size_t i);
const char *kiln__imp_part_name(const imp *im, char *buf, size_t size, const char *name, int k);
const kiln_onnx_value *kiln__imp_given_value(const imp *im, const char *name, int shape);
int kiln__imp_lower_seq_node(imp *im, const Onnx__NodeProto *n, const scope *sc, const char *lb, int *done);
int kiln__imp_lower_str_node(imp *im, const Onnx__NodeProto *n, const scope *sc, const char *lb, int *done);

/* import_constants.c */
int kiln__imp_add_tensor_const(kiln_network *net, const char *name, const kiln__onnx_tensor *t);
int kiln__imp_add_string_const(imp *im, kiln_network *net, const char *name, int ndim, const int64_t *dims,
    size_t nstr, const ProtobufCBinaryData *strs, const char *lb);
int kiln__imp_is_string_tensor(const Onnx__TensorProto *t);
int kiln__imp_import_constant(imp *im, kiln_network *net, const Onnx__NodeProto *n);

/* import_attrs.c */
int kiln__imp_set_attr(imp *im, kiln_layer *l, const kiln_op_info *op, const char *lb,
    const Onnx__AttributeProto *a, const scope *sc, const extra *lead, int nlead,
    const extra *extras, int nextra, const strset *copy, int depth);

/* import_graph.c */
int kiln__imp_import_graph(imp *im, const Onnx__GraphProto *g, const scope *parent,
    const extra *lead, int nlead, const extra *extras, int nextra,
    const strset *copy_consts, const kiln_network *outer,
    kiln_network **out, int depth);

#endif
