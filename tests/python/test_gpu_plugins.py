"""Python plugins on the GPU: CUDA impls get device tensors that torch,
CuPy, Numba and Triton view without a copy, and kiln's stream; class
plugins' enqueue likewise; the GPU samples check themselves against numpy;
device memory binds to engine inputs and outputs; graph-safe impls are
replayed from a CUDA graph without calling Python.

The tests marked `gpu` skip (visibly, with the reason) without torch and a
CUDA GPU; scripts/test_gpu.sh runs them on the GPU machine.  The first
tests (array interfaces, DLPack on the CPU, a CUDA-only plugin in a CPU
build) run everywhere.
"""
import ctypes
import os
import re
import subprocess
import sys
from typing import Tuple

import numpy as np
import pytest

import kiln
import kiln.plugin as kp
from conftest import ROOT, load

SAMPLES = ROOT / "samples" / "python"
sys.path.insert(0, str(SAMPLES))


def _torch_cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


torch = _torch_cuda()
gpu = pytest.mark.skipif(torch is None, reason="needs torch and a CUDA GPU (scripts/test_gpu.sh runs these on the "
                                                 "GPU machine)")


def build_cuda(network, reps=1):
    b = kiln.Builder()
    cfg = b.create_builder_config()
    cfg.device = "cuda"
    cfg.timing_reps = reps
    return b.build_serialized_network(network, cfg)


# ---------------------------------------------------------------- everywhere


def test_cuda_tensor_interfaces():
    t = kp.Tensor(0x7F0000001000, kiln.float16, (2, 3), (3, 1), 0, 1, 0x5555)
    assert t.device == "cuda" and t.stream == 0x5555
    cai = t.__cuda_array_interface__
    assert cai == {"shape": (2, 3), "typestr": "<f2", "data": (0x7F0000001000, False), "strides": (6, 2),
                   "version": 3, "stream": 0x5555}
    assert t.__dlpack_device__() == (2, int(os.environ.get("KILN_CUDA_DEVICE", "0") or 0))
    with pytest.raises(AttributeError, match="__cuda_array_interface__"):
        t.__array_interface__
    cap = t.__dlpack__(stream=0x5555)  # kiln's own stream: no wait, no driver call
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    assert get_name(cap) == b"dltensor"
    cpu = kp.Tensor(0x1000, kiln.float32, (4,), (1,))
    assert cpu.device == "cpu" and cpu.stream == 0
    with pytest.raises(AttributeError, match="numpy.asarray"):
        cpu.__cuda_array_interface__
    with pytest.raises(BufferError, match="copy"):
        cpu.__dlpack__(copy=True)


def test_cpu_tensor_dlpack_is_zero_copy(rng):
    for dt in (np.float32, np.float16, np.int64, np.int8, np.bool_, np.uint16):
        a = (rng.standard_normal((3, 5)) * 10).astype(dt)
        t = kp.Tensor(a.ctypes.data, kiln.dtype_of(dt), a.shape, (5, 1))
        v = np.from_dlpack(t)
        assert v.dtype == a.dtype and v.shape == a.shape and v.ctypes.data == a.ctypes.data
        np.testing.assert_array_equal(v, a)
    # strided: a transposed view
    a = rng.standard_normal((4, 6)).astype(np.float32)
    t = kp.Tensor(a.ctypes.data, kiln.float32, (6, 4), (1, 6))
    np.testing.assert_array_equal(np.from_dlpack(t), a.T)


@kp.register("tg::scale")
def scale_desc(x: kp.TensorDesc, k: float = 2.0) -> kp.TensorDesc:
    return x.like()


def _scale_cuda(x: kp.Tensor, k: float, outputs: Tuple[kp.Tensor], stream: int) -> None:
    import torch as th

    calls.append(("scale", x.device, stream, x.data_ptr, outputs[0].data_ptr))
    xv, yv = th.as_tensor(x, device="cuda"), th.as_tensor(outputs[0], device="cuda")
    with th.cuda.stream(th.cuda.ExternalStream(stream)):
        th.mul(xv, k, out=yv)


calls = []
kp.impl("tg::scale", device="cuda")(_scale_cuda)


def test_cuda_only_plugin_in_a_cpu_build_says_so(rng):
    net = kiln.Builder().create_network()
    x = net.add_input("x", kiln.float32, (4,))
    net.mark_output(net.add_plugin(kp.op.tg.scale(x, k=3.0)).get_output(0))
    b = kiln.Builder()
    eng = load(b.build_serialized_network(net, b.create_builder_config()))
    with pytest.raises(kiln.KilnError, match='only a CUDA impl.*device = "cuda"'):
        eng.create_execution_context().execute({"x": rng.standard_normal(4).astype(np.float32)})


def test_impl_device_is_checked():
    with pytest.raises(kp.PluginError, match='expected "cpu", "cuda" or both'):
        kp.impl("tg::scale", device="gpu")


# ---------------------------------------------------------------- GPU


@gpu
def test_cuda_impl_runs_on_the_gpu_with_kiln_stream(rng):
    calls.clear()
    net = kiln.Builder().create_network()
    x = net.add_input("x", kiln.float32, (3, 7))
    net.mark_output(net.add_plugin(kp.op.tg.scale(x, k=-1.5)).get_output(0))
    eng = load(build_cuda(net))
    assert eng.num_gpu_layers == 1 and eng.num_cpu_layers == 0
    xv = rng.standard_normal((3, 7)).astype(np.float32)
    y = eng.create_execution_context().execute({"x": xv})[eng.outputs[0]]
    np.testing.assert_allclose(y, xv * -1.5, rtol=1e-6)
    assert calls and all(c[1] == "cuda" and c[2] != 0 for c in calls)


# one op whose impl checks every consumer library's view
@kp.register("tg::views")
def views_desc(x: kp.TensorDesc) -> kp.TensorDesc:
    return x.like()


seen = {}


@kp.impl("tg::views", device="cuda")
def views_impl(x: kp.Tensor, outputs: Tuple[kp.Tensor], stream: int) -> None:
    import cupy
    import torch as th
    from circ_pad_cuda import numba_cuda

    ncuda = numba_cuda()

    y = outputs[0]
    ext = th.cuda.ExternalStream(stream)
    with th.cuda.stream(ext):
        seen["torch.as_tensor"] = th.as_tensor(x, device="cuda").data_ptr() == x.data_ptr
        seen["torch.from_dlpack"] = th.from_dlpack(x).data_ptr() == x.data_ptr
    with cupy.cuda.ExternalStream(stream):
        seen["cupy.asarray"] = cupy.asarray(x).data.ptr == x.data_ptr
        seen["cupy.from_dlpack"] = cupy.from_dlpack(x).data.ptr == x.data_ptr
    nv = ncuda.as_cuda_array(x, sync=False)
    seen["numba.as_cuda_array"] = nv.__cuda_array_interface__["data"][0] == x.data_ptr
    # the write goes through numba (a kernel on kiln's stream) and torch reads it back
    yv = ncuda.as_cuda_array(y, sync=False)
    _negate[(x.numel() + 127) // 128, 128, ncuda.external_stream(stream)](nv.reshape(x.numel()),
                                                                           yv.reshape(y.numel()))


def _negate_kernel():
    from circ_pad_cuda import numba_cuda

    ncuda = numba_cuda()

    @ncuda.jit
    def negate(a, b):
        i = ncuda.grid(1)
        if i < a.shape[0]:
            b[i] = -a[i]

    return negate


_negate = _negate_kernel() if torch is not None else None


@gpu
def test_every_library_views_kiln_tensors_zero_copy(rng):
    net = kiln.Builder().create_network()
    x = net.add_input("x", kiln.float32, (5, 9))
    net.mark_output(net.add_plugin(kp.op.tg.views(x)).get_output(0))
    eng = load(build_cuda(net))
    xv = rng.standard_normal((5, 9)).astype(np.float32)
    y = eng.create_execution_context().execute({"x": xv})[eng.outputs[0]]
    np.testing.assert_array_equal(y, -xv)
    assert seen and all(seen.values()), seen


@gpu
def test_device_memory_bindings_and_execute_async(rng):
    net = kiln.Builder().create_network()
    x = net.add_input("x", kiln.float32, (64,))
    net.mark_output(net.add_plugin(kp.op.tg.scale(x, k=4.0)).get_output(0))
    eng = load(build_cuda(net))
    ctx = eng.create_execution_context()
    xt = torch.as_tensor(rng.standard_normal(64).astype(np.float32), device="cuda")
    yt = torch.full((64,), float("nan"), device="cuda")  # poisoned
    ctx.set_tensor_address("x", xt)                      # __cuda_array_interface__ of torch
    ctx.set_tensor_address(eng.outputs[0], yt)
    s = torch.cuda.Stream()
    ctx.execute_async(s)
    s.synchronize()
    np.testing.assert_allclose(yt.cpu().numpy(), xt.cpu().numpy() * 4.0, rtol=1e-6)
    import cupy

    xc = cupy.asarray(rng.standard_normal(64).astype(np.float32))
    yc = cupy.full(64, cupy.nan, cupy.float32)
    ctx.set_tensor_address("x", xc)
    ctx.set_tensor_address(eng.outputs[0], yc)
    ctx.execute_async(0)
    ctx.synchronize()
    np.testing.assert_allclose(cupy.asnumpy(yc), cupy.asnumpy(xc) * 4.0, rtol=1e-6)


    class DL:  # device memory offered through DLPack alone (as JAX arrays do)
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, stream=None):
            return self.t.__dlpack__()

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    xt = torch.as_tensor(rng.standard_normal(64).astype(np.float32), device="cuda")
    yt = torch.full((64,), float("nan"), device="cuda")
    ctx.set_tensor_address("x", DL(xt))
    ctx.set_tensor_address(eng.outputs[0], DL(yt))
    ctx.execute_async(0)
    ctx.synchronize()
    np.testing.assert_allclose(yt.cpu().numpy(), xt.cpu().numpy() * 4.0, rtol=1e-6)


# a chain of graph-safe layers: captured once, replayed without Python
@kp.register("tg::axpb")
def axpb_desc(x: kp.TensorDesc, a: float = 1.0, b: float = 0.0) -> kp.TensorDesc:
    return x.like()


axpb_calls = []


def _axpb(x: kp.Tensor, a: float, b: float, outputs: Tuple[kp.Tensor], stream: int) -> None:
    import torch as th
    import triton

    axpb_calls.append(1)
    xv, yv = th.as_tensor(x, device="cuda"), th.as_tensor(outputs[0], device="cuda")
    n = xv.numel()
    with th.cuda.stream(th.cuda.ExternalStream(stream)):
        _axpb_kernel[(triton.cdiv(n, 256),)](xv, yv, n, a, b, BLOCK=256)


def _make_axpb_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def axpb(x_ptr, y_ptr, n, a, b, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * a + b, mask=m)

    return axpb


_axpb_kernel = None


@pytest.mark.parametrize("graph_safe", [True, False])
@gpu
def test_graph_safe_impls_replay_without_python(rng, graph_safe):
    global _axpb_kernel
    _axpb_kernel = _axpb_kernel or _make_axpb_kernel()
    kp.impl("tg::axpb", device="cuda", graph_safe=graph_safe)(_axpb)
    net = kiln.Builder().create_network()
    t = net.add_input("x", kiln.float32, (1000,))
    for a, b in ((2.0, 1.0), (0.5, -3.0), (-1.0, 0.25)):
        t = net.add_plugin(kp.op.tg.axpb(t, a=a, b=b)).get_output(0)
    net.mark_output(t)
    eng = load(build_cuda(net))
    assert eng.num_gpu_layers == 3
    ctx = eng.create_execution_context()
    xh = np.empty(1000, np.float32)
    yh = np.empty(1000, np.float32)
    ctx.set_tensor_address("x", xh)
    ctx.set_tensor_address(eng.outputs[0], yh)
    per_run = []
    for _ in range(5):
        xh[...] = rng.standard_normal(1000)
        yh[...] = np.nan
        before = len(axpb_calls)
        ctx.execute_async()
        ctx.synchronize()
        per_run.append(len(axpb_calls) - before)
        np.testing.assert_allclose(yh, ((xh * 2 + 1) * 0.5 - 3) * -1 + 0.25, rtol=1e-5, atol=1e-5)
    if graph_safe:  # run 1 eager, run 2 captured, then replays
        assert per_run == [3, 3, 0, 0, 0], per_run
    else:
        assert per_run == [3] * 5, per_run


QDP_CUDA = ["add", "add --autotune -v", "add --mode onnx", "inplace_add", "inplace_add --autotune", "non_zero",
            "non_zero --mode onnx", "circ_pad", "circ_pad --multi_tactic -v", "circ_pad --mode onnx"]
CLASS_IMPLS = ["cuda-python", "cupy", "triton", "numba", "torch"]
PLUGIN_LAYER_ON = re.compile(r"^  layer \S+ +sample::\S+ v\d+ on cuda, (JIT impl|AOT kernel) tactic \d+$", re.M)


def _run_all(cmds):
    """Run the sample commands concurrently (each imports torch and
    compiles its kernels: seconds apiece); {cmd: (rc, stdout + stderr)}."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs = {}
    for c in cmds:
        script, *args = c.split()
        procs[c] = subprocess.Popen([sys.executable, str(SAMPLES / script), *args], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, env=env)
    return {c: (p.wait(timeout=600), p.stdout.read()) for c, p in procs.items()}


def _check_all(results, extra=lambda cmd, out: None):
    bad = []
    for cmd, (rc, out) in results.items():
        ok = rc == 0 and "PASS" in out and "on the GPU, 0 on the CPU" in out
        why = None if ok else "did not PASS on the GPU"
        # the runner's line per layer: every plugin layer on the GPU
        if not why and (not PLUGIN_LAYER_ON.search(out) or re.search(r"sample::\S+ v\d+ on cpu", out)):
            why = "a plugin layer not listed on cuda"
        why = why or extra(cmd, out)
        if why:
            bad.append(f"--- {cmd}: {why}\n{out[-3000:]}")
    assert not bad, "\n".join(bad)


@gpu
def test_qdp_runner_cuda(tmp_path):
    # every sample and flag of the documents with --device cuda (Triton)
    cmds = [f"qdp_runner.py {a} --device cuda" for a in QDP_CUDA]
    cmds.append(f"qdp_runner.py circ_pad --multi_tactic --device cuda --save_engine --artifacts_dir {tmp_path}")
    _check_all(_run_all(cmds))
    # the saved engine in a fresh process (the impls' module imported again)
    _check_all(_run_all([f"qdp_runner.py circ_pad --multi_tactic --device cuda --load_engine "
                         f"--artifacts_dir {tmp_path}"]))


@gpu
def test_qdp_runner_cuda_aot(tmp_path, rng):
    # @aot_impl(device="cuda"): Triton kernels compiled with triton.compiler,
    # their PTX baked into the engine
    cmds = [f"qdp_runner.py {a} --aot --device cuda" for a in ("add", "circ_pad", "add --mode onnx")]
    cmds.append(f"qdp_runner.py add --aot --device cuda --save_engine --artifacts_dir {tmp_path}")

    def aot(cmd, out):
        return None if re.search(r"sample::\S+ v\d+ on cuda, AOT kernel", out) else "no layer ran its AOT kernel"

    _check_all(_run_all(cmds), aot)
    # the saved engine under the C CLI: no Python, no plugin library
    cli = os.environ.get("KILN_CLI", str(ROOT / "build" / "kiln"))
    x = rng.standard_normal((10, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "ref.npy", x + 1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    r = subprocess.run([cli, "run", str(tmp_path / "add_aot.kiln"), "--input", f"X={tmp_path / 'x.npy'}",
                        "--compare", f"0={tmp_path / 'ref.npy'}"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout + r.stderr


@gpu
def test_class_circ_pad_cuda():
    # five implementations x (V3, V2) x (FP32 both tactics, FP16 per-format tactics)
    cmds = []
    for impl in CLASS_IMPLS:
        for style in ("v3", "v2"):
            cmds.append(f"circ_pad_plugin.py --device cuda --impl {impl} --style {style}")
            cmds.append(f"circ_pad_plugin.py --device cuda --impl {impl} --style {style} --precision fp16 "
                        "--per-format-tactics")

    def tactics(cmd, out):
        if "fp16" in cmd:
            return None if "(1, 'HALF')" not in out and "(2, 'HALF')" in out else "per-format tactics not honoured"
        return None if "(1, 'FLOAT')" in out and "(2, 'FLOAT')" in out else "both tactics not timed"

    _check_all(_run_all(cmds), tactics)


# ---------------------------------------------------------------- AOT CUDA kernels (answer checked everywhere)

FAKE_PTX = """
.version 8.7
.target sm_90
.visible .entry neg_k(
	.param .u64 .ptr .global .align 1 neg_k_param_0,
	.param .u64 .ptr .global .align 1 neg_k_param_1,
	.param .u32 neg_k_param_2,
	.param .u64 .ptr .global .align 1 neg_k_param_3,
	.param .u64 .ptr .global .align 1 neg_k_param_4
)
{ ret; }
"""


@kp.register("tg::neg_aot")
def neg_aot_desc(x: kp.TensorDesc) -> kp.TensorDesc:
    return x.like()


@kp.aot_impl("tg::neg_aot", device="cuda")
def neg_aot_cuda(x: kp.TensorDesc, outputs, tactic: int):
    n = x.shape_expr.numel()
    launch = kp.KernelLaunchParams()
    launch.grid_x = kp.cdiv(n, 128)
    launch.block_x = 128
    launch.shared_mem = 64
    args = kp.SymIntExprs(1)
    args[0] = kp.SymInt32(n)
    return "neg_k", FAKE_PTX, launch, args


def test_cuda_aot_answer():
    from kiln.plugin._plugin import definition

    kp.sync()  # registers with kiln: a CUDA AOT kernel alone is an implementation
    d = definition("tg::neg_aot")
    ins = [(1, [(0, 6, "6"), (1, 5, "5")])]
    outs = [(1, [(16 * 8, None, "?"), (16 * 8 + 1, None, "?")])]
    name, code, lang, grid, block, shmem, scalars, scratch = d._cuda_aot(ins, outs, {}, [(1, 0), (1, 0)], 0)
    assert (name, code, lang) == ("neg_k", FAKE_PTX, 2)  # PTX
    assert scratch == [0, 0]  # 5 PTX parameters: input, output, one scalar, two hidden scratch pointers
    assert block == [128, 1, 1] and shmem == 64 and grid[1:] == [1, 1]
    assert scalars and scalars[0][0] == 1  # i32
    # CUDA C (no .entry) declares no hidden pointers
    src = 'extern "C" __global__ void neg_k(const float *x, float *y, int n) {}'
    neg_aot_cuda_c = lambda x, outputs, tactic: ("neg_k", src, *neg_aot_cuda(x, outputs, tactic)[2:])  # noqa: E731
    d.cuda_aot_fn = neg_aot_cuda_c
    assert d._cuda_aot(ins, outs, {}, [(1, 0), (1, 0)], 0)[2:3] == (1,) and \
        d._cuda_aot(ins, outs, {}, [(1, 0), (1, 0)], 0)[-1] == []
    d.cuda_aot_fn = neg_aot_cuda
    with pytest.raises(kp.PluginError, match='expected "cpu" or "cuda"'):
        kp.aot_impl("tg::neg_aot", device="gpu")
