/*
 * cuda_int.h — the CUDA backend's internal interface.
 *
 * libkiln never links CUDA: the driver API (libcuda.so.1) and cuBLASLt are
 * dlopen'ed at first use, and the few types and prototypes used are declared
 * here (not the toolkit's driver header), so the library builds and runs where the toolkit is
 * absent.  One device (CUDA device 0, or $KILN_CUDA_DEVICE) and its primary
 * context serve the whole process; every entry point makes that context
 * current on the calling thread.
 *
 * For kernel authors (src/ops/<family>/<family>_cuda.c): kiln__cuda_launch
 * and kiln__cuda_gemm below, and cuda_kernel_args.h.  Nothing else.
 */
#ifndef KILN_CUDA_INT_H
#define KILN_CUDA_INT_H

#include "kiln_int.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kiln__device kiln__device;
#include <stdint.h>

/* ------------------------------------------------------------ for kernels */

/* Launch kernel `name` of libkiln's embedded fatbin on the call's stream
 * (module loaded once per process/device; function handles cached).  args:
 * pointers to the argument values, as cuLaunchKernel takes them.  Returns 0,
 * or KILN_EDEVICE with a message naming the kernel, the layer (c->layer)
 * and the CUDA error string. */
int kiln__cuda_launch(const kiln_call *c, const char *name, const unsigned grid[3], const unsigned block[3],
                      unsigned smem_bytes, void **args);

/* 1 when the engine was built with KILN_BUILD_TF32 (`--tf32`): a GEMM op
 * may set kiln_cuda_gemm.allow_tf32 from it; kiln__cuda_gemm also folds it
 * in itself, so every GEMM of a --tf32 engine gets it.  FP32 is exact by
 * default. */
static inline int kiln__cuda_allow_tf32(const kiln_call *c) {
    return c && c->exec && c->exec->device == KILN_DEVICE_CUDA && ((const kiln__cuda_exec *)c->exec)->allow_tf32;
}

/* cuBLASLt matmul (dlopen'ed): D = alpha * op(A) @ op(B) + beta * C (+
 * epilogue), batched with strides, F32/F16/BF16 in, F32 accumulate; 'algo'
 * is an index into cuBLASLt's heuristic list (a tactic). Row-major
 * arguments (the implementation maps them onto cuBLASLt's column-major).
 * c (may be NULL when beta == 0) has D's dtype.  bias: `n` values of
 * dtype, added to every row (epilogue BIAS), or NULL.  Errors:
 * KILN_EUNSUPPORTED when algo is past the heuristic list's end (the builder
 * drops that tactic), KILN_EDEVICE naming the cuBLASLt call and its status. */
typedef struct kiln_cuda_gemm {
    int trans_a, trans_b; int64_t m, n, k, batch; const void *a, *b, *c; void *d;
    int64_t lda, ldb, ldc, ldd, stride_a, stride_b, stride_c, stride_d;
    kiln_dtype dtype; float alpha, beta; const void *bias; int epilogue; /* 0 none, 1 relu, 2 gelu */
    int algo; int allow_tf32;
} kiln_cuda_gemm;
int kiln__cuda_gemm(const kiln_call *c, const kiln_cuda_gemm *g);
/* The cublasComputeType_t kiln__cuda_gemm uses for g in call c: 77
 * (CUBLAS_COMPUTE_32F_FAST_TF32) for FP32 when g->allow_tf32 or the call's
 * engine was built with --tf32 (kiln__cuda_allow_tf32), else 68
 * (CUBLAS_COMPUTE_32F: exact FP32 for FP32, FP32 accumulation for
 * FP16/BF16).  Needs no GPU. */
#define KILN_CUDA_COMPUTE_32F 68
#define KILN_CUDA_COMPUTE_32F_FAST_TF32 77
int kiln__cuda_gemm_compute(const kiln_call *c, const kiln_cuda_gemm *g);
/* The device workspace a GEMM op should ask for (its cuda_workspace):
 * cuBLASLt gets c->workspace as its own, and chooses algorithms for that
 * size. */
#define KILN_CUDA_GEMM_WORKSPACE ((size_t)4 << 20)
/* How many heuristic algorithms (tactics) cuBLASLt offers for g with a
 * KILN_CUDA_GEMM_WORKSPACE workspace (0..max; 0 also when CUDA is absent).
 * g's pointers matter only through their alignment. */
int kiln__cuda_gemm_algos(const kiln_cuda_gemm *g, int max);

/* ------------------------------------------------------------ driver API */

typedef int CUresult;
typedef int CUdevice;
typedef uint64_t CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUlinkState_st *CUlinkState;

/* The driver functions kiln uses (resolved with dlsym). */
typedef struct kiln__cu {
    CUresult (*Init)(unsigned);
    CUresult (*DriverGetVersion)(int *);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
    CUresult (*DeviceTotalMem)(size_t *, CUdevice);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*CtxSynchronize)(void);
    CUresult (*MemGetInfo)(size_t *, size_t *);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemAllocHost)(void **, size_t);
    CUresult (*MemFreeHost)(void *);
    CUresult (*MemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
    CUresult (*StreamCreate)(CUstream *, unsigned);
    CUresult (*StreamDestroy)(CUstream);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*EventCreate)(CUevent *, unsigned);
    CUresult (*EventDestroy)(CUevent);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*EventSynchronize)(CUevent);
    CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*FuncSetAttribute)(CUfunction, int, int);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
    CUresult (*StreamBeginCapture)(CUstream, int);
    CUresult (*StreamEndCapture)(CUstream, CUgraph *);
    CUresult (*GraphInstantiateWithFlags)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*GraphLaunch)(CUgraphExec, CUstream);
    CUresult (*GraphExecDestroy)(CUgraphExec);
    CUresult (*GraphDestroy)(CUgraph);
    CUresult (*GetErrorString)(CUresult, const char **);
    CUresult (*GetErrorName)(CUresult, const char **);
    CUresult (*PointerGetAttributes)(unsigned, int *, void **, CUdeviceptr);
    /* module.c: PTX -> cubin (the driver's JIT linker), modules freed */
    CUresult (*LinkCreate)(unsigned, int *, void **, CUlinkState *);
    CUresult (*LinkAddData)(CUlinkState, int, void *, size_t, const char *, unsigned, int *, void **);
    CUresult (*LinkComplete)(CUlinkState, void **, size_t *);
    CUresult (*LinkDestroy)(CUlinkState);
    CUresult (*ModuleUnload)(CUmodule);
} kiln__cu;

/* Device facts read at initialisation. */
typedef struct kiln__cuda_info {
    int ordinal;
    char name[256];
    int sm_major, sm_minor;
    size_t total_mem;
    int driver_version;          /* e.g. 13000 */
    int smem_optin;              /* max dynamic shared memory per block (opt-in) */
} kiln__cuda_info;

/* Load the driver, initialise it, retain the device's primary context and
 * make it current on this thread.  *cu and *info (each may be NULL) get the
 * table and the facts.  KILN_EDEVICE "no CUDA device (<reason>)" when
 * unusable; the outcome of the first call is remembered. */
int kiln__cuda_init(const kiln__cu **cu, const kiln__cuda_info **info);
/* Make the primary context current on this thread (cheap after the first
 * time per thread); 0 or the init error. */
int kiln__cuda_enter(void);
/* Turn a driver result into a kiln error: 0 for success, else KILN_EDEVICE
 * (KILN_ENOMEM for out of memory) "<call>: <CUDA error name>: <string>". */
int kiln__cuda_check(CUresult r, const char *call);
/* Tests without a GPU (fake.c): on = 1 makes the CUDA device a host-memory
 * stand-in whose blocks the host cannot read (PROT_NONE) outside the fake's
 * own work; owns = 1 when p lies in memory it allocated; fake_kernel runs a
 * test op's "CUDA kernel" fn(c) with the blocks readable; fake_device is
 * that device while on, else NULL. */
void kiln__cuda_fake(int on);
int kiln__cuda_fake_owns(const void *p);
int kiln__cuda_fake_kernel(int (*fn)(const kiln_call *), const kiln_call *c);
const kiln__device *kiln__cuda_fake_device(void);
/* After kiln__cuda_fake(1): on = 1 lets the fake begin graph captures
 * (ending one always fails: nothing it ran can be replayed); capturing = 1
 * while one is open (a test op refuses work then, as a CUDA call that is
 * illegal in a capture does). */
void kiln__cuda_fake_graphs(int on);
int kiln__cuda_fake_capturing(void);
/* The cuDNN version the fake's `tactic_library` names (0, the default:
 * none), as a machine with that cuDNN would: timing-cache tests.  The fake
 * takes tactics 10..17 of every op for cuDNN's (a test op stands in for
 * Conv), and counts how often it was asked about one: where a real device
 * would have loaded cuDNN (reset = 1 returns the count and zeroes it). */
void kiln__cuda_fake_cudnn(int version);
int kiln__cuda_fake_cudnn_asked(int reset);
/* The largest block the fake was asked for (whether or not it could map
 * it) since the last reset: what a real GPU would have had to find, so
 * tests can bound a plan's device memory.  reset = 1 starts over. */
size_t kiln__cuda_fake_largest(int reset);

/* nvrtc.c: compile CUDA C `source` to PTX for compute_<sm> (sm = 10 *
 * major + minor) with NVRTC (dlopen'ed).  *ptx is NUL-terminated (kiln__free),
 * *n its length.  KILN_EDEVICE when NVRTC cannot be loaded, KILN_ECOMPILE
 * with NVRTC's log; `what` prefixes messages. */
int kiln__nvrtc_ptx(const char *source, const char *what, int sm, char **ptx, size_t *n);
/* module.c: link PTX (NUL-terminated) into a cubin for this GPU with the
 * driver's JIT linker; *cubin is kiln__malloc'ed. */
int kiln__cuda_ptx_cubin(const char *ptx, const char *what, uint8_t **cubin, size_t *size);
/* module.c: launch f on `stream`, opting into more than 48 KiB of dynamic
 * shared memory when asked; errors name `name` and `layer`. */
int kiln__cuda_launch_func(CUfunction f, const char *name, const char *layer, void *stream,
                           const unsigned grid[3], const unsigned block[3], unsigned smem, void **args);

/* One entry of a dlopen'ed library's table (driver.c, cublaslt.c,
 * cudnn.c, nvrtc.c): where the address goes, its name and, if not NULL,
 * an older name to try when the first is missing. */
typedef struct kiln__dl_sym {
    void **slot;
    const char *name, *alt;
} kiln__dl_sym;
/* driver.c: dlsym every entry of syms[0..n) from h; NULL when all were
 * found, else the (first) name of the first entry h lacks. */
const char *kiln__dl_resolve(void *h, const kiln__dl_sym *syms, size_t n);

/* 1 if nvcc built kernels into this libkiln (the embedded fatbin). */
int kiln__cuda_have_kernels(void);
/* The embedded fatbin (fatbin.c); size 0 when built without nvcc. */
extern const unsigned char kiln__cuda_fatbin[];
extern const unsigned long kiln__cuda_fatbin_size;

#endif /* KILN_CUDA_INT_H */
