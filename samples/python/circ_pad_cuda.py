"""circ_pad on the GPU in five implementations, for the class-plugin
sample (circ_pad_plugin.py --device cuda --impl NAME) and the plugin
overhead benchmark.  Each backend's ``run(x, y, pads, tactic, stream)``
writes y = circular pad of x (kiln.plugin.Tensor views of device memory,
same dtype, rank <= 4) on ``stream`` (an int CUstream) and never waits for
the GPU:

    cuda-python  the CUDA C kernel below, compiled with NVRTC, launched with
                 cuLaunchKernel (cuda.bindings)
    cupy         the same source as a cupy.RawKernel
    triton       a Triton kernel (qdp_cuda.circ_pad_kernel) on torch views
    numba        a numba.cuda.jit kernel on numba views (as_cuda_array)
    torch        torch.nn.functional.pad(mode="circular") (tactic 1) or an
                 index gather (tactic 2)

Tactics of the kernel backends: 1 = 256 threads per block, 2 = 128.  The
kernels copy elements by size (2 or 4 bytes), so FP16 and FP32 share them.
Libraries are imported when a backend is made: each needs only its own.
"""
from __future__ import annotations

import ctypes

CUDA_SRC = r"""
// One output element per thread; 4-D (lower ranks get leading 1s).
#define CIRC_PAD(NAME, T)                                                          \
extern "C" __global__ void NAME(const T *x, T *y, long long n, int i0, int i1,    \
                                int i2, int i3, int b0, int b1, int b2, int b3,  \
                                int o0, int o1, int o2, int o3) {                \
    long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;               \
    if (k >= n) return;                                                           \
    long long r = k;                                                              \
    int c3 = (int)(r % o3); r /= o3;                                              \
    int c2 = (int)(r % o2); r /= o2;                                              \
    int c1 = (int)(r % o1); int c0 = (int)(r / o1);                               \
    int s0 = ((c0 - b0) % i0 + i0) % i0, s1 = ((c1 - b1) % i1 + i1) % i1;         \
    int s2 = ((c2 - b2) % i2 + i2) % i2, s3 = ((c3 - b3) % i3 + i3) % i3;         \
    y[k] = x[(((long long)s0 * i1 + s1) * i2 + s2) * i3 + s3];                    \
}
CIRC_PAD(circ_pad_b4, unsigned int)
CIRC_PAD(circ_pad_b2, unsigned short)
"""

IMPLS = ("cuda-python", "cupy", "triton", "numba", "torch")


def geometry(in_shape, out_shape, pads):
    """(input dims, pads before, output dims), each padded to 4-D."""
    nd = len(in_shape)
    if nd > 4:
        raise ValueError(f"circ_pad GPU kernels: rank {nd}, at most 4")
    before = [0] * nd
    for i in range(len(pads) // 2):
        before[nd - 1 - i] = int(pads[2 * i])
    lead = [1] * (4 - nd)
    return lead + list(in_shape), [0] * (4 - nd) + before, lead + list(out_shape)


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def numba_cuda():
    """numba.cuda, usable with numpy >= 2.5: numba-cuda 0.30 still refers
    to numpy.row_stack (removed in numpy 2.5; an alias of vstack) when it
    compiles its first kernel, so every kernel fails with AttributeError.
    Restore the alias for it (checked on the GPU machine: numpy 2.5,
    numba-cuda 0.30)."""
    import numpy as np

    if not hasattr(np, "row_stack"):
        def row_stack(tup, *, dtype=None, casting="same_kind"):  # its own object: numba overloads it apart
            return np.vstack(tup, dtype=dtype, casting=casting)

        np.row_stack = row_stack
    from numba import cuda

    return cuda


def launch_shape(x, y, pads, tactic):
    """(input dims, pads before, output dims, output elements, threads per
    block) of a launch of the circ_pad kernels."""
    i, b, o = geometry(x.shape, y.shape, pads)
    return i, b, o, _numel(y.shape), 128 if tactic == 2 else 256


class Streams:
    """The library's object for each CUstream kiln hands over, made once."""

    def __init__(self, make):
        self.make, self.made = make, {}

    def __call__(self, stream: int):
        s = self.made.get(stream)
        if s is None:
            s = self.made[stream] = self.make(stream)
        return s


class CudaPython:
    """NVRTC + cuModuleLoadData + cuLaunchKernel through cuda.bindings."""

    def __init__(self):
        from cuda.bindings import driver, nvrtc

        self.driver = driver
        err, = driver.cuInit(0)
        self._check(err, "cuInit")
        # No current context yet: take the primary one, as kiln does.  (Asked
        # with cuCtxGetCurrent, which answers NULL; cuCtxGetDevice would fail
        # with CUDA_ERROR_INVALID_CONTEXT, an API error compute-sanitizer reports.)
        err, ctx = driver.cuCtxGetCurrent()
        self._check(err, "cuCtxGetCurrent")
        if not int(ctx):
            err, dev = driver.cuDeviceGet(0)
            self._check(err, "cuDeviceGet")
            err, ctx = driver.cuDevicePrimaryCtxRetain(dev)
            self._check(err, "cuDevicePrimaryCtxRetain")
            self._check(driver.cuCtxSetCurrent(ctx)[0], "cuCtxSetCurrent")
        err, dev = driver.cuCtxGetDevice()
        self._check(err, "cuCtxGetDevice")
        A = driver.CUdevice_attribute
        err, major = driver.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        self._check(err, "cuDeviceGetAttribute")
        err, minor = driver.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
        err, prog = nvrtc.nvrtcCreateProgram(CUDA_SRC.encode(), b"circ_pad.cu", 0, [], [])
        opts = [f"--gpu-architecture=compute_{major}{minor}".encode()]
        err, = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise RuntimeError(f"NVRTC: {log.decode(errors='replace')}")
        _, size = nvrtc.nvrtcGetPTXSize(prog)
        ptx = b" " * size
        nvrtc.nvrtcGetPTX(prog, ptx)
        err, self.module = driver.cuModuleLoadData(ptx)
        self._check(err, "cuModuleLoadData")
        self.fn = {}
        for item, name in ((4, b"circ_pad_b4"), (2, b"circ_pad_b2")):
            err, self.fn[item] = driver.cuModuleGetFunction(self.module, name)
            self._check(err, "cuModuleGetFunction")

    def _check(self, err, what):
        if err != self.driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"{what}: {err}")

    def run(self, x, y, pads, tactic, stream):
        i, b, o, n, bs = launch_shape(x, y, pads, tactic)
        args = ((x.data_ptr, y.data_ptr, n, *i, *b, *o),
                (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong) + (ctypes.c_int,) * 12)
        err, = self.driver.cuLaunchKernel(self.fn[x.dtype.itemsize], (n + bs - 1) // bs, 1, 1, bs, 1, 1, 0,
                                          self.driver.CUstream(stream), args, 0)
        self._check(err, "cuLaunchKernel")


class CuPy:
    """cupy.RawKernel over views made with cupy.from_dlpack (no stream
    wait: the views are made on kiln's stream)."""

    def __init__(self):
        import cupy

        self.cp = cupy
        mod = cupy.RawModule(code=CUDA_SRC)
        self.fn = {4: mod.get_function("circ_pad_b4"), 2: mod.get_function("circ_pad_b2")}
        self.streams = Streams(cupy.cuda.ExternalStream)

    def run(self, x, y, pads, tactic, stream):
        cp = self.cp
        i, b, o, n, bs = launch_shape(x, y, pads, tactic)
        with self.streams(stream):
            xv, yv = cp.from_dlpack(x), cp.from_dlpack(y)
            ints = [cp.int32(v) for v in (*i, *b, *o)]
            self.fn[x.dtype.itemsize](((n + bs - 1) // bs,), (bs,), (xv, yv, cp.int64(n), *ints))


class Triton:
    """The Triton kernel of qdp_cuda on torch views."""

    def __init__(self):
        import torch
        import triton

        from qdp_kernels import circ_pad_kernel

        self.torch, self.triton, self.kernel = torch, triton, circ_pad_kernel
        self.streams = Streams(torch.cuda.ExternalStream)

    def run(self, x, y, pads, tactic, stream):
        torch = self.torch
        i, b, o, n, bs = launch_shape(x, y, pads, tactic)
        with torch.cuda.stream(self.streams(stream)):
            xv, yv = torch.as_tensor(x, device="cuda"), torch.as_tensor(y, device="cuda")
            self.kernel[(self.triton.cdiv(n, bs),)](xv, yv, n, *i, *b, *o, BLOCK=bs)


class Numba:
    """A numba.cuda.jit kernel on numba views (as_cuda_array, sync=False:
    the kernel runs on kiln's stream, after the writes it reads)."""

    def __init__(self):
        cuda = numba_cuda()
        self.cuda = cuda

        @cuda.jit
        def circ_pad_numba(x, y, n, i0, i1, i2, i3, b0, b1, b2, b3, o0, o1, o2, o3):
            k = cuda.grid(1)
            if k >= n:
                return
            r = k
            c3 = r % o3
            r //= o3
            c2 = r % o2
            r //= o2
            c1 = r % o1
            c0 = r // o1
            # Python's % is already non-negative for a positive divisor
            s0, s1, s2, s3 = (c0 - b0) % i0, (c1 - b1) % i1, (c2 - b2) % i2, (c3 - b3) % i3
            y[k] = x[((s0 * i1 + s1) * i2 + s2) * i3 + s3]

        self.kernel = circ_pad_numba
        self.streams = Streams(cuda.external_stream)

    def run(self, x, y, pads, tactic, stream):
        cuda = self.cuda
        i, b, o, n, bs = launch_shape(x, y, pads, tactic)
        xv = cuda.as_cuda_array(x, sync=False).reshape(_numel(x.shape))
        yv = cuda.as_cuda_array(y, sync=False).reshape(n)
        self.kernel[(n + bs - 1) // bs, bs, self.streams(stream)](xv, yv, n, *i, *b, *o)


class Torch:
    """torch: F.pad(mode="circular") (tactic 1) or a gather by index (2)."""

    def __init__(self):
        import torch
        import torch.nn.functional as F

        self.torch, self.F = torch, F
        self.streams = Streams(torch.cuda.ExternalStream)

    def run(self, x, y, pads, tactic, stream):
        torch = self.torch
        with torch.cuda.stream(self.streams(stream)):
            xv, yv = torch.from_dlpack(x), torch.from_dlpack(y)
            if tactic == 2:
                idx = []
                nd = xv.dim()
                for d in range(nd):
                    k = nd - 1 - d
                    before = int(pads[2 * k]) if 2 * k < len(pads) else 0
                    idx.append((torch.arange(yv.shape[d], device=yv.device) - before) % xv.shape[d])
                yv.copy_(xv[torch.meshgrid(*idx, indexing="ij")])
            else:
                yv.copy_(self.F.pad(xv, [int(p) for p in pads], mode="circular"))


_BACKENDS = {"cuda-python": CudaPython, "cupy": CuPy, "triton": Triton, "numba": Numba, "torch": Torch}
_made = {}


def backend(name: str):
    """The backend called ``name`` (one of IMPLS), made once."""
    if name not in _BACKENDS:
        raise ValueError(f"circ_pad GPU implementation '{name}': expected one of {', '.join(IMPLS)}")
    if name not in _made:
        _made[name] = _BACKENDS[name]()
    return _made[name]
