"""CUDA impls of the qdp_runner samples (``qdp_runner.py ... --device
cuda`` imports this module): the Triton kernels of qdp_kernels.py launched
on the stream kiln gives each impl, and (--aot) the same kernels compiled
ahead of time with triton.compiler, whose PTX kiln bakes into the engine:
it then runs with no Python (``kiln run``).  circ_pad has two tactics with
--multi_tactic: 1 = torch (``F.pad(mode="circular")``), 2 = Triton.  The
impls that only launch one kernel are graph_safe: kiln may capture them in
a CUDA graph; circ_pad's torch tactic allocates, so it is not.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np
import numpy.typing as npt
import triton

import kiln.plugin as kp
from qdp_kernels import (TRITON_PTR, add_aot_kernel, add_delta_kernel, add_kernel, circ_pad_geometry,
                         circ_pad_kernel, circ_pad_torch, circ_pad_triton, compile_ptx, non_zero_kernel, on, view)

@kp.impl("sample::elemwise_add_plugin", device="cuda", graph_safe=True)
def add_plugin_impl_cuda(inp0: kp.Tensor, block_size: int, outputs: Tuple[kp.Tensor], stream: int) -> None:
    x, y = view(inp0), view(outputs[0])
    n = x.numel()
    with on(stream):
        add_kernel[(triton.cdiv(n, block_size),)](x, n, y, BLOCK_SIZE=block_size)

@kp.impl("sample::elemwise_add_plugin_", device="cuda", graph_safe=True)
def add_plugin_impl_cuda_(inp0: kp.Tensor, delta: int, outputs: Tuple[kp.Tensor], stream: int) -> None:
    # in place when kiln aliases the buffers (at run time); the builder
    # times candidates on separate buffers, which this handles too
    x, y = view(inp0), view(outputs[0])
    n = x.numel()
    with on(stream):
        add_delta_kernel[(triton.cdiv(n, 256),)](x, y, n, delta, BLOCK_SIZE=256)

@kp.impl("sample::non_zero_plugin", device="cuda", graph_safe=True)
def non_zero_plugin_impl_cuda(inp0: kp.Tensor, outputs: Tuple[kp.Tensor], stream: int) -> None:
    x, idx, count = view(inp0), view(outputs[0]), view(outputs[1])
    n = x.numel()
    if n > 1 << 16:
        raise ValueError(f"non_zero sample kernel: {n} elements, at most 65536 (one Triton program)")
    with on(stream):
        non_zero_kernel[(1,)](x, idx, count, n, x.shape[1], BLOCK=triton.next_power_of_2(max(n, 16)))

@kp.impl("sample::circ_pad_plugin", device="cuda")
def circ_pad_plugin_impl_cuda(inp0: kp.Tensor, pads: npt.NDArray[np.int32], outputs: Tuple[kp.Tensor],
                              stream: int, tactic: int) -> None:
    x, y = view(inp0), view(outputs[0])
    with on(stream):
        (circ_pad_torch if tactic == 1 else circ_pad_triton)(x, y, pads)


# ------------------------------------------------------------------ AOT: Triton PTX in the engine

@kp.aot_impl("sample::elemwise_add_plugin", device="cuda")
def add_plugin_aot_impl_cuda(inp0: kp.TensorDesc, block_size: int, outputs: Tuple[kp.TensorDesc], tactic: int):
    t = TRITON_PTR[inp0.dtype.name]
    name, ptx, threads, shared, scratch = compile_ptx(
        add_aot_kernel, {"x_ptr": t, "y_ptr": t, "n_elements": "i64", "block_size": "i64"}, {"BLOCK_SIZE": block_size})
    n = inp0.shape_expr.numel()
    launch = kp.KernelLaunchParams()
    launch.grid_x = kp.cdiv(n, block_size)
    launch.block_x = threads
    launch.shared_mem = shared
    launch.scratch = scratch
    # the scalars of the CPU kernel (one signature per op: "i64,i64")
    args = kp.SymIntExprs(2)
    args[0] = kp.SymInt64(n)
    args[1] = kp.SymInt64(block_size)
    return name, ptx, launch, args


@kp.aot_impl("sample::circ_pad_plugin", device="cuda")
def circ_pad_plugin_aot_impl_cuda(inp0: kp.TensorDesc, pads: npt.NDArray[np.int32], outputs: Tuple[kp.TensorDesc],
                                  tactic: int):
    t = TRITON_PTR[inp0.dtype.name]
    ints = ["n_out", "i0", "i1", "i2", "i3", "b0", "b1", "b2", "b3", "o0", "o1", "o2", "o3"]
    name, ptx, threads, shared, scratch = compile_ptx(
        circ_pad_kernel, {"x_ptr": t, "y_ptr": t, **{k: "i64" for k in ints}}, {"BLOCK": 256})
    i, b, o = circ_pad_geometry(list(inp0.shape_expr), list(outputs[0].shape_expr), pads)
    n = outputs[0].shape_expr.numel()
    launch = kp.KernelLaunchParams()
    launch.grid_x = kp.cdiv(n, 256)
    launch.block_x = threads
    launch.shared_mem = shared
    launch.scratch = scratch
    # 13 i64 scalars, as the CPU kernel's signature
    args = kp.SymIntExprs.from_tuple([kp.SymInt64(x) for x in [n, *i, *b, *o]])
    return name, ptx, launch, args
