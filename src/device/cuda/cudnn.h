/*
 * cudnn.h — cuDNN as an optional convolution tactic (cudnn.c).
 *
 * libkiln never needs cuDNN: libcudnn.so.9 is dlopen'ed at first use from
 * $KILN_CUDNN (a file, or a folder holding libcudnn.so.9), then the
 * loader's path, then the pip wheel layout
 * (<site-packages>/nvidia/cudnn/lib/libcudnn.so.9 under $VIRTUAL_ENV,
 * $CONDA_PREFIX, /usr/local/lib and /usr/lib python3.* trees);
 * KILN_CUDNN=0 (or off) leaves it unloaded.  Only the
 * v7-style convolution API of cuDNN 9 is used; its few types and enum
 * values are declared in cudnn.c, not taken from cudnn.h.
 *
 * One conv = one cudnnConvolutionBiasActivationForward (conv + bias +
 * residual z + ReLU/identity) where cuDNN takes it, else
 * cudnnConvolutionForward (the residual as beta = 1 over a copy of it in
 * y) and the caller applies bias and activation itself.  Descriptors are
 * made once per geometry and cached for the process (the least recently
 * used destroyed past 512 shapes); the workspace is the caller's (the
 * layer's planned workspace: no allocation per run).
 */
#ifndef KILN_CUDNN_H
#define KILN_CUDNN_H

#include "device/cuda/cuda_int.h"
#include "device/cuda/cuda_kernel_args.h"

/* cudnnConvolutionFwdAlgo_t values 0..7; a Conv tactic names one as
 * KILN_CUDNN_TACTIC0 + algo (stored in engines: the enum is stable). */
#define KILN_CUDNN_ALGOS 8
#define KILN_CUDNN_TACTIC0 10
/* Algorithms the builder times per conv shape: the first this many that
 * cuDNN's heuristic (cudnnGetConvolutionForwardAlgorithm_v7) ranks as
 * usable within KILN_CUDNN_MAX_WORKSPACE. */
#define KILN_CUDNN_TOPK 3
#define KILN_CUDNN_MAX_WORKSPACE ((size_t)256 << 20)

/* One convolution (geometry as the im2col kernels take it), NCHW, or NHWC
 * with the filter in KRSC (the weights' NHWC layout) when nhwc is 1. */
typedef struct kiln_cudnn_conv {
    kiln_cu_conv geo;
    kiln_dtype dtype;   /* F32, F16, BF16 (x, w, y, z and bias alike) */
    int algo;           /* 0..KILN_CUDNN_ALGOS-1 */
    int tf32;           /* FP32 may use TF32 tensor cores (--tf32) */
    int relu;           /* fuse ReLU (else identity) */
    int nhwc;           /* x, y, z NHWC and w KRSC (else all NCHW) */
    const void *x, *w, *bias, *z; /* bias, z (residual, y's shape): may be NULL */
    void *y;
} kiln_cudnn_conv;

/* 0 when cuDNN is loaded and its handle made, else KILN_EDEVICE with a
 * message naming what was tried ("cuDNN not found: ..."); remembered. */
int kiln__cudnn_load(void);
/* cuDNN's version (e.g. 90800), 0 when not loaded; loads it first. */
int kiln__cudnn_version(void);
/* 1 when `tactic` of op ns::op runs cuDNN (ai.onnx::Conv's tactics
 * KILN_CUDNN_TACTIC0 ..), else 0; loads nothing. */
int kiln__cudnn_tactic(const char *ns, const char *op, int tactic);
/* The timing cache's word on cuDNN, for a version as kiln__cudnn_version
 * gives it: "cudnn 9.8.0", or "cudnn none" for 0.  It keys the entries of
 * cuDNN's tactics only (kiln__device.tactic_library): a cache made where
 * cuDNN was missing holds them as failed, and another cuDNN times them
 * differently; either way they must not be reused there. */
void kiln__cudnn_signature(int version, char *buf, size_t size);
/* One line for `kiln devices`: "cudnn: 9.8.0, <file> (...)" or "cudnn:
 * <why not>". */
void kiln__cudnn_describe(char *buf, size_t size);
/* Workspace bytes of p's algorithm; KILN_EUNSUPPORTED when cuDNN does not
 * implement it for p (or wants more than KILN_CUDNN_MAX_WORKSPACE). */
int kiln__cudnn_conv_workspace(const kiln_cudnn_conv *p, size_t *bytes);
/* 1 when p's algorithm is among the heuristic's first KILN_CUDNN_TOPK
 * usable ones for p's geometry (the builder times only those), else 0. */
int kiln__cudnn_conv_ranked(const kiln_cudnn_conv *p);
/* Enqueue p on c's stream with c's workspace.  *fused = 1 when bias and
 * activation were applied (BiasActivationForward), 0 when the caller must
 * still add the bias and apply the activation to y.  KILN_EUNSUPPORTED when
 * cuDNN refuses the algorithm for p; KILN_EDEVICE naming the cuDNN call and
 * its status otherwise. */
int kiln__cudnn_conv(const kiln_call *c, const kiln_cudnn_conv *p, int *fused);

/* The descriptor cache ("plans", one per geometry/type/math): how many
 * live (at most `capacity`; past it the least recently used is destroyed),
 * how many the index reaches (= plans), made and evicted since the process
 * began (or the last kiln__cudnn_stand_in switch), and with the stand-in
 * the descriptors alive (6 per plan; -1 with the real cuDNN). */
typedef struct kiln_cudnn_plan_stats {
    int plans, indexed, capacity, descriptors;
    long made, evicted;
} kiln_cudnn_plan_stats;
void kiln__cudnn_plan_stats(kiln_cudnn_plan_stats *st);
/* Tests on machines without cuDNN: on = 1 replaces cuDNN's descriptor and
 * workspace calls by host stand-ins that count live descriptors (the
 * workspace of algorithm a is a KiB; no algorithm is ranked; nothing can
 * run), so kiln__cudnn_conv_workspace exercises the plan cache.  Switching
 * destroys every plan first. */
void kiln__cudnn_stand_in(int on);

#endif /* KILN_CUDNN_H */
