/*
 * loop_body.h — the body sub-engine shared by Loop (loop.c) and Scan
 * (scan.c): build from a body network at shape time, serialize inside the
 * layer's state, run per iteration through a kiln_context.
 */
#ifndef KILN_OPS_LOOP_BODY_H
#define KILN_OPS_LOOP_BODY_H

#include "kiln_int.h"

typedef struct kiln__body_io {
    char *name;
    int present;              /* inputs: the body engine has it (unused ones are dropped) */
    kiln_dtype dtype;
    int ndim;
    int64_t dims[KILN_MAX_DIMS];  /* -1 where the engine has a dynamic dim (outputs) */
    int dyn;                  /* outputs: the engine's shape is dynamic; checked after every run */
} kiln__body_io;

typedef struct kiln__body {
    kiln_engine *eng;
    int nin, nout;
    kiln__body_io *in, *out;  /* body network inputs/outputs, in order */
} kiln__body;

/* Build `body` for the fixed shapes in in[0..nin) (all dims constant, else
 * KILN_EUNSUPPORTED); `what` prefixes messages. */
int kiln__body_build(kiln__body *b, const kiln_network *body, const kiln_desc *in, int nin, const char *what);
void kiln__body_free(kiln__body *b);
int kiln__body_clone(const kiln__body *src, kiln__body *dst);
/* Blob = header ints (the op's counts) + body description + sub-engine. */
int kiln__body_serialize(const kiln__body *b, const int64_t *ints, int nints, void *buf, size_t *size);
int kiln__body_deserialize(kiln__body *b, int64_t *ints, int nints, const void *buf, size_t size);
/* Outputs [first, first+count) left dynamic by the engine whose dims its
 * shape program computes from the fixed input shapes (not data-dependent):
 * dims filled, dyn = 2 (known; still checked after every run). */
int kiln__body_resolve_dims(kiln__body *b, int first, int count);
/* KILN_EUNSUPPORTED when one of outputs [first, first+count) has dims
 * known only at run time (dyn 1). */
int kiln__body_check_static(const kiln__body *b, int first, int count, const char *what);
/* After a run: every dyn output must have the shape in b (KILN_ESHAPE). */
int kiln__body_check_shapes(const kiln_context *ctx, const kiln__body *b, const char *what);
size_t kiln__body_io_bytes(const kiln__body_io *t);
/* "<op> body=<hash of the body engine>" (timing cache key part). */
int kiln__body_timing_id(const kiln__body *b, const char *op, char *buf, size_t size);
int kiln__body_ctx_open(const kiln__body *b, kiln_exec *exec, kiln_context **out);
int kiln__body_bind_in(kiln_context *ctx, const kiln__body *b, int i, const void *data);
int kiln__body_bind_out(kiln_context *ctx, const kiln__body *b, int k, void *data);
/* 1 and dims filled when every dim of d is a constant. */
int kiln__desc_static(const kiln_desc *d, int64_t *dims);
/* Unused (padding) outputs from `from` on: F32 scalars, written as 0. */
void kiln__fill_unused(kiln_shape_ctx *c, int from);
void kiln__zero_unused(const kiln_call *c, int from);

#endif
