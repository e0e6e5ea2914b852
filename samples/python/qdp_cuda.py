"""CUDA impls of the qdp_runner samples (``qdp_runner.py ... --device
cuda`` imports this module): the Triton kernels of qdp_kernels.py launched
on the stream kiln gives each impl.  circ_pad has two tactics with
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
from qdp_kernels import (add_delta_kernel, add_kernel, circ_pad_torch, circ_pad_triton, non_zero_kernel, on,
                         view)

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
