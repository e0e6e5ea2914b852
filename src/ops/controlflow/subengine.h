/*
 * subengine.h — the body sub-engine shared by Loop (loop.c), Scan (scan.c)
 * and SequenceMap (sequence/seqmap.c): built from a body network at shape
 * time with the public build API, serialized inside the layer's state, run
 * per iteration through a kiln_context of its own per outer context.
 *
 * Life of a body: kiln__body_build (shape) -> kiln__body_serialize (engine
 * save) / kiln__body_deserialize (engine load) -> per outer context a
 * kiln__subctx (attach_to_context), whose kiln_context per body is opened
 * on first use and bound with kiln__body_bind_in/_out for every run.
 * Errors are KILN_E* codes with the message set; `what` names the op.
 */
#ifndef KILN_OPS_SUBENGINE_H
#define KILN_OPS_SUBENGINE_H

#include "ops/common/ops_util.h"

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

/* The op's "body" graph attribute (borrowed from the layer, valid while
 * the network is built), NULL when absent. */
const kiln_network *kiln__body_graph(const kiln_attrs *a);
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

/* The per-context side of a sub-engine op: what attach_to_context makes,
 * one kiln_context per body (n of them), each opened on first use.  The
 * op's instance state must start with a uint32_t tag other than
 * KILN__SUBCTX_TAG: enqueue receives either. */
#define KILN__SUBCTX_TAG 0x43425553u /* "SUBC" */
typedef struct kiln__subctx {
    uint32_t tag;
    void *st;            /* the op's instance state */
    int n, temp;         /* bodies; temp: made by kiln__subctx_get, closed by _put */
    kiln_context **sub;  /* n, NULL until opened */
} kiln__subctx;
/* attach_to_context / detach_from_context of an op with n bodies. */
int kiln__subctx_attach(void *state, int n, void **ctx_state, const char *what);
void kiln__subctx_detach(void *state, void *ctx_state);
/* In enqueue: *out = the attached kiln__subctx when `state` is one, else
 * *tmp set up as a temporary one for instance state `state` with n bodies
 * (a layer run without a context: the builder folding constants).  Call
 * kiln__subctx_put(*out) when done. */
int kiln__subctx_get(void *state, int n, kiln__subctx *tmp, kiln__subctx **out, const char *what);
/* Body i's context (opened with kiln__body_ctx_open on first use). */
int kiln__subctx_open(kiln__subctx *x, int i, const kiln__body *b, kiln_exec *exec, kiln_context **out);
/* Frees the contexts of a temporary kiln__subctx; an attached one keeps them. */
void kiln__subctx_put(kiln__subctx *x);

#endif /* KILN_OPS_SUBENGINE_H */
