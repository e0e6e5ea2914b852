#!/usr/bin/env python3
"""Per-call cost of a plugin layer on the GPU: kiln running a chain of
tiny layers (y = -x over 256 floats) against the same kernel launched
directly by its library, for

    C      kiln's built-in Neg (a C quick op with a CUDA impl); the direct
           peer is the same kernel source launched with cuLaunchKernel
    AOT    that kernel source as an @aot_impl(device="cuda") baked into the
           engine (no Python at run time); same direct peer
    torch, triton, cupy, numba, cuda-python
           a Python @impl(device="cuda", graph_safe=True) that launches the
           library's kernel on kiln's stream; the peer launches it on a
           stream of its own

The C and AOT rows' peer is kiln-bench-launch (bench/launch_peer.c, built
with the project): the same kernel source compiled with NVRTC and launched
with cuLaunchKernel from a C loop, eagerly and captured into a CUDA graph, so
those rows compare kiln with the cheapest launch C can make (without it,
found next to $KILN_CLI, in build/ or as $KILN_BENCH_LAUNCH, they fall back
to cuda-python's launch and say so).

Marginal cost per layer: (time of a run with 2 + N layers - time with 2) /
N, N = 16, so the copies in and out and the final sync cancel; likewise per
direct launch.  kiln is measured eager (CUDA graphs off: every layer calls
its impl) and with CUDA graphs (graph-safe impls are captured once and
replayed: Python is not called).  "graph/peer" divides by the peer's graph
figure where it has one (the C peer), else by its eager one.  Prints one
table with ratios and the GPU.

    python3 bench/plugin_overhead.py [--reps 200] [--only torch,cupy]
"""
from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import time
from typing import Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "samples", "python"))

import kiln  # noqa: E402
import kiln.plugin as kp  # noqa: E402
from circ_pad_cuda import Streams  # noqa: E402

N_ELEMS = 256
CHAIN = 16
NEG_SRC = r"""
extern "C" __global__ void neg_f32(const float *x, float *y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = -x[i];
}
"""


# ------------------------------------------------------------------ the libraries: (launch(x, y, stream), setup)


class Torch:
    def __init__(self):
        import torch

        self.torch = torch

    def launch(self, x, y, stream):  # x, y: kiln Tensors or torch tensors
        th = self.torch
        xv = x if isinstance(x, th.Tensor) else th.as_tensor(x, device="cuda")
        yv = y if isinstance(y, th.Tensor) else th.as_tensor(y, device="cuda")
        th.neg(xv, out=yv)


class Triton:
    def __init__(self):
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def neg_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            m = offs < n
            tl.store(y_ptr + offs, -tl.load(x_ptr + offs, mask=m), mask=m)

        self.torch, self.kernel = torch, neg_kernel

    def launch(self, x, y, stream):
        th = self.torch
        xv = x if isinstance(x, th.Tensor) else th.as_tensor(x, device="cuda")
        yv = y if isinstance(y, th.Tensor) else th.as_tensor(y, device="cuda")
        self.kernel[(1,)](xv, yv, N_ELEMS, BLOCK=N_ELEMS)


class CuPy:
    def __init__(self):
        import cupy

        self.cp = cupy
        self.fn = cupy.RawKernel(NEG_SRC, "neg_f32")

    def launch(self, x, y, stream):
        cp = self.cp
        xv = x if isinstance(x, cp.ndarray) else cp.from_dlpack(x)
        yv = y if isinstance(y, cp.ndarray) else cp.from_dlpack(y)
        self.fn((1,), (N_ELEMS,), (xv, yv, cp.int64(N_ELEMS)))


class Numba:
    def __init__(self):
        from circ_pad_cuda import numba_cuda

        cuda = numba_cuda()

        @cuda.jit
        def neg(x, y):
            i = cuda.grid(1)
            if i < x.shape[0]:
                y[i] = -x[i]

        self.cuda, self.kernel, self.streams = cuda, neg, Streams(cuda.external_stream)

    def launch(self, x, y, stream):
        cuda = self.cuda
        s = self.streams(stream)
        xv = cuda.as_cuda_array(x, sync=False)
        yv = cuda.as_cuda_array(y, sync=False)
        self.kernel[1, N_ELEMS, s](xv.reshape(N_ELEMS), yv.reshape(N_ELEMS))


class CudaPython:
    def __init__(self):
        from cuda.bindings import driver, nvrtc

        self.driver = driver
        err, dev = driver.cuCtxGetDevice()
        A = driver.CUdevice_attribute
        _, major = driver.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        _, minor = driver.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
        _, prog = nvrtc.nvrtcCreateProgram(NEG_SRC.encode(), b"neg.cu", 0, [], [])
        opts = [f"--gpu-architecture=compute_{major}{minor}".encode()]
        err, = nvrtc.nvrtcCompileProgram(prog, 1, opts)
        assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, err
        _, size = nvrtc.nvrtcGetPTXSize(prog)
        ptx = b" " * size
        nvrtc.nvrtcGetPTX(prog, ptx)
        _, self.module = driver.cuModuleLoadData(ptx)
        _, self.fn = driver.cuModuleGetFunction(self.module, b"neg_f32")
        self.types = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong)

    def ptr(self, t):
        return t.data_ptr if isinstance(t, kp.Tensor) else t.data_ptr()

    def launch(self, x, y, stream):
        err, = self.driver.cuLaunchKernel(self.fn, 1, 1, 1, N_ELEMS, 1, 1, 0, self.driver.CUstream(stream),
                                          ((self.ptr(x), self.ptr(y), N_ELEMS), self.types), 0)
        if err:
            raise RuntimeError(f"cuLaunchKernel: {err}")


LIBS = {"torch": Torch, "triton": Triton, "cupy": CuPy, "numba": Numba, "cuda-python": CudaPython}


def register_python_op(name: str, lib) -> str:
    op = f"bench::neg_{name.replace('-', '_')}"

    @kp.register(op)
    def desc(x: kp.TensorDesc) -> kp.TensorDesc:
        return x.like()

    if name in ("torch", "triton"):
        import torch

        streams = Streams(torch.cuda.ExternalStream)

        def impl(x: kp.Tensor, outputs: Tuple[kp.Tensor], stream: int) -> None:
            with torch.cuda.stream(streams(stream)):
                lib.launch(x, outputs[0], stream)
    elif name == "cupy":
        import cupy

        streams = Streams(cupy.cuda.ExternalStream)

        def impl(x: kp.Tensor, outputs: Tuple[kp.Tensor], stream: int) -> None:
            with streams(stream):
                lib.launch(x, outputs[0], stream)
    else:
        def impl(x: kp.Tensor, outputs: Tuple[kp.Tensor], stream: int) -> None:
            lib.launch(x, outputs[0], stream)

    kp.impl(op, device="cuda", graph_safe=True)(impl)
    return op


def register_aot_op():
    """bench::neg_aot: NEG_SRC as an AOT CUDA kernel (@aot_impl(device=
    "cuda"), CUDA C compiled by the builder); the layer adder."""
    op = "bench::neg_aot"

    @kp.register(op)
    def desc(x: kp.TensorDesc) -> kp.TensorDesc:
        return x.like()

    @kp.aot_impl(op, device="cuda")
    def aot(x: kp.TensorDesc, outputs: Tuple[kp.TensorDesc], tactic: int):
        n = x.shape_expr.numel()
        launch = kp.KernelLaunchParams()
        launch.grid_x = kp.cdiv(n, N_ELEMS)
        launch.block_x = N_ELEMS
        args = kp.SymIntExprs(1)
        args[0] = kp.SymInt64(n)
        return "neg_f32", NEG_SRC, launch, args

    def add(net, t):
        return net.add_plugin(kp.op.bench.neg_aot(t), aot=True).get_output(0)

    return add


# ------------------------------------------------------------------ timing


def engine_of(add_layer, layers: int):
    b = kiln.Builder()
    net = b.create_network()
    t = net.add_input("x", kiln.float32, (N_ELEMS,))
    for _ in range(layers):
        t = add_layer(net, t)
    net.mark_output(t)
    cfg = b.create_builder_config()
    cfg.device = "cuda"
    eng = kiln.Runtime().deserialize_engine(b.build_serialized_network(net, cfg))
    assert eng.num_gpu_layers == layers and eng.num_cpu_layers == 0, (eng.num_gpu_layers, eng.num_cpu_layers)
    return eng


def time_engine(eng, graphs: bool, reps: int, x, y) -> float:
    ctx = eng.create_execution_context()
    ctx.cuda_graphs = graphs
    ctx.set_tensor_address("x", x)
    ctx.set_tensor_address(eng.outputs[0], y)
    for _ in range(5):
        ctx.execute_async()
    ctx.synchronize()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            ctx.execute_async()
        ctx.synchronize()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def per_layer(add_layer, graphs, reps, x, y, check) -> float:
    # 2 layers at least: kiln captures runs of two or more GPU layers
    e1, en = engine_of(add_layer, 2), engine_of(add_layer, 2 + CHAIN)
    t1 = time_engine(e1, graphs, reps, x, y)
    check(2)
    tn = time_engine(en, graphs, reps, x, y)
    check(2 + CHAIN)
    return (tn - t1) / CHAIN


def per_direct(launch, sync, reps) -> float:
    def run(k):
        for _ in range(5):
            launch()
        sync()
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(reps):
                for _ in range(k):
                    launch()
                sync()
            best = min(best, (time.perf_counter() - t0) / reps)
        return best

    return (run(1 + CHAIN) - run(1)) / CHAIN


def c_peer(reps: int):
    """(eager, graph) seconds per raw cuLaunchKernel of NEG_SRC from C, or
    None when kiln-bench-launch is not found."""
    cands = [os.environ.get("KILN_BENCH_LAUNCH", "")]
    if os.environ.get("KILN_CLI"):
        cands.append(os.path.join(os.path.dirname(os.environ["KILN_CLI"]), "kiln-bench-launch"))
    cands.append(os.path.join(HERE, "..", "build", "kiln-bench-launch"))
    exe = next((c for c in cands if c and os.access(c, os.X_OK)), None)
    if not exe:
        return None
    with tempfile.NamedTemporaryFile("w", suffix=".cu") as f:
        f.write(NEG_SRC)
        f.flush()
        r = subprocess.run([exe, f.name, "neg_f32", str(N_ELEMS), str(N_ELEMS), str(CHAIN), str(reps)],
                           capture_output=True, text=True, timeout=300)
    if r.returncode:  # said, and the rows fall back to the Python peer
        print(f"kiln-bench-launch failed: {r.stderr.strip()}", file=sys.stderr)
        return None
    words = r.stdout.split()
    return float(words[1]) * 1e-6, float(words[3]) * 1e-6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--only", default="", help="comma-separated: C,torch,triton,cupy,numba,cuda-python,aot")
    args = ap.parse_args(argv)
    import torch

    only = set(filter(None, args.only.split(",")))
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    x = torch.as_tensor(rng.standard_normal(N_ELEMS).astype(np.float32), device="cuda")
    y = torch.empty_like(x)
    xh = x.cpu().numpy()

    def check(layers):
        want = -xh if layers % 2 else xh
        got = y.cpu().numpy()
        if not np.array_equal(got, want):
            raise SystemExit(f"wrong output after {layers} layers")

    stream = torch.cuda.Stream()
    rows = []  # (name, peer, peer eager, kiln eager, peer graph or None, kiln graph)
    cp = CudaPython()
    raw = c_peer(args.reps) if not only or only & {"C", "aot"} else None

    def peer_c():
        """The C and AOT rows' peer: the C loop, else cuda-python's launch."""
        if raw:
            return "C cuLaunchKernel", raw[0], raw[1]
        return "cuda-python launch", per_direct(lambda: cp.launch(x, y, stream.cuda_stream), stream.synchronize,
                                                args.reps), None

    if not only or "C" in only:
        def add_neg(net, t):
            return net.add_layer("ai.onnx::Neg", [t], 1, version=13).get_output(0)

        pname, pe, pg = peer_c()
        rows.append(("C (built-in Neg)", pname, pe, per_layer(add_neg, False, args.reps, x, y, check), pg,
                     per_layer(add_neg, True, args.reps, x, y, check)))
    for name, cls in LIBS.items():
        if only and name not in only:
            continue
        try:
            rows.append(measure_python(name, cls, cp, stream, x, y, check, args.reps))
        except Exception as e:  # one library failing leaves the others' figures
            rows.append((f"Python {name}", f"failed: {type(e).__name__}: {e}"[:200], None, None, None, None))
    if not only or "aot" in only:
        try:
            add_aot = register_aot_op()
            pname, pe, pg = peer_c()
            rows.append(("AOT CUDA kernel", pname, pe, per_layer(add_aot, False, args.reps, x, y, check), pg,
                         per_layer(add_aot, True, args.reps, x, y, check)))
        except Exception as e:
            rows.append(("AOT CUDA kernel", f"failed: {type(e).__name__}: {e}"[:200], None, None, None, None))
    gpu = torch.cuda.get_device_name()
    print(f"plugin overhead on {gpu}: marginal cost per layer / per launch, {N_ELEMS} floats, y = -x, "
          f"chain of {CHAIN} layers, best of 3 x {args.reps} runs")
    print(f"{'implementation':<20}{'peer':<20}{'peer us':>9}{'kiln eager us':>15}{'eager/peer':>12}"
          f"{'peer graph us':>15}{'kiln graph us':>15}{'graph/peer':>12}")
    for name, peer, pe, e, pg, g in rows:
        if pe is None:
            print(f"{name:<20}{peer}")
            continue
        pgs = f"{pg * 1e6:>15.2f}" if pg is not None else f"{'-':>15}"
        print(f"{name:<20}{peer:<20}{pe * 1e6:>9.2f}{e * 1e6:>15.2f}{e / pe:>12.2f}"
              f"{pgs}{g * 1e6:>15.2f}{g / (pg if pg else pe):>12.2f}")
    return 0


def measure_python(name, cls, cp, stream, x, y, check, reps):
    """(row name, direct, kiln eager, kiln graph) seconds per call of one library."""
    import torch

    lib = cp if name == "cuda-python" else cls()
    op = register_python_op(name, lib)

    def add_py(net, t, op=op):
        ns, name_ = op.split("::")
        return net.add_plugin(getattr(getattr(kp.op, ns), name_)(t)).get_output(0)

    if name in ("torch", "triton"):
        def direct(lib=lib):
            with torch.cuda.stream(stream):
                lib.launch(x, y, stream.cuda_stream)
    elif name == "cupy":
        import cupy

        cstream = cupy.cuda.ExternalStream(stream.cuda_stream)
        xc, yc = cupy.from_dlpack(x), cupy.from_dlpack(y)

        def direct(lib=lib):
            with cstream:
                lib.launch(xc, yc, stream.cuda_stream)
    else:
        def direct(lib=lib):
            lib.launch(x, y, stream.cuda_stream)
    return (f"Python {name}", f"{name} launch", per_direct(direct, stream.synchronize, reps),
            per_layer(add_py, False, reps, x, y, check), None, per_layer(add_py, True, reps, x, y, check))


if __name__ == "__main__":
    sys.exit(main())
