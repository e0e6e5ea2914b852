"""The Triton kernels of the qdp_runner samples (qdp_cuda.py registers them
as CUDA impls; circ_pad_cuda.py and bench/plugin_overhead.py reuse them),
and the two helpers every impl uses: ``view(t)``, a torch view of a kiln
tensor made without a copy (``torch.as_tensor(t, device="cuda")`` reads
``__cuda_array_interface__``), and ``with on(stream):``, which makes kiln's
stream torch's current one, so torch ops and Triton launches go there.

Needs torch and triton (the GPU machine has both).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import kiln.plugin as kp
from circ_pad_cuda import Streams, geometry as circ_pad_geometry

_streams = Streams(torch.cuda.ExternalStream)


def on(stream: int):
    """``with on(stream):`` runs torch and Triton work on kiln's stream."""
    return torch.cuda.stream(_streams(stream))


def view(t: kp.Tensor) -> torch.Tensor:
    return torch.as_tensor(t, device="cuda")


# ------------------------------------------------------------------ add: Y = X + 1

@triton.jit
def add_kernel(x_ptr, n_elements, y_ptr, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, x + 1, mask=mask)



@triton.jit
def add_aot_kernel(x_ptr, y_ptr, n_elements, block_size, BLOCK_SIZE: tl.constexpr):
    # the AOT form: kiln passes inputs, outputs, then the scalars (the CPU
    # kernel's two, "i64,i64": block_size is BLOCK_SIZE at run time)
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)


def compile_ptx(kernel, signature: dict, constexprs: dict):
    """A Triton kernel compiled ahead of time for this GPU (no launch):
    (entry name, PTX, threads per block, shared memory bytes, [global and
    profile scratch bytes per block])."""
    from triton.compiler import ASTSource

    c = triton.compile(ASTSource(fn=kernel, signature={**signature, **{k: "constexpr" for k in constexprs}},
                                 constexprs=constexprs))
    md = c.metadata
    scratch = [int(getattr(md, "global_scratch_size", 0) or 0), int(getattr(md, "profile_scratch_size", 0) or 0)]
    return md.name, c.asm["ptx"], md.num_warps * 32, md.shared, scratch


TRITON_PTR = {"FLOAT": "*fp32", "HALF": "*fp16"}


# ------------------------------------------------------------------ inplace_add: X += delta

@triton.jit
def add_delta_kernel(x_ptr, y_ptr, n_elements, delta, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, x + delta, mask=mask)



# ------------------------------------------------------------------ non_zero

@triton.jit
def non_zero_kernel(x_ptr, idx_ptr, count_ptr, n, cols, BLOCK: tl.constexpr):
    # one program: a prefix sum over the non-zero flags gives each index its
    # row-major slot (as numpy.argwhere orders them)
    offs = tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x_ptr + offs, mask=m, other=0)
    nz = ((v != 0) & m).to(tl.int32)
    pos = tl.cumsum(nz, 0) - nz
    keep = nz != 0
    tl.store(idx_ptr + pos * 2, (offs // cols).to(tl.int32), mask=keep)
    tl.store(idx_ptr + pos * 2 + 1, (offs % cols).to(tl.int32), mask=keep)
    tl.store(count_ptr, tl.sum(nz, 0).to(tl.int64))



# ------------------------------------------------------------------ circ_pad

@triton.jit
def circ_pad_kernel(x_ptr, y_ptr, n_out, i0, i1, i2, i3, b0, b1, b2, b3, o0, o1, o2, o3,
                    BLOCK: tl.constexpr):
    # one output element per lane; 4-D (lower ranks get leading 1s)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n_out
    r = offs
    c3 = r % o3
    r = r // o3
    c2 = r % o2
    r = r // o2
    c1 = r % o1
    c0 = r // o1
    s0 = ((c0 - b0) % i0 + i0) % i0
    s1 = ((c1 - b1) % i1 + i1) % i1
    s2 = ((c2 - b2) % i2 + i2) % i2
    s3 = ((c3 - b3) % i3 + i3) % i3
    src = ((s0 * i1 + s1) * i2 + s2) * i3 + s3
    tl.store(y_ptr + offs, tl.load(x_ptr + src, mask=m), mask=m)


def circ_pad_triton(x: torch.Tensor, y: torch.Tensor, pads) -> None:
    i, b, o = circ_pad_geometry(x.shape, y.shape, pads)
    n = y.numel()
    circ_pad_kernel[(triton.cdiv(n, 256),)](x, y, n, *i, *b, *o, BLOCK=256)


def circ_pad_torch(x: torch.Tensor, y: torch.Tensor, pads) -> None:
    # F.pad's circular mode pads the last dims, pads in (last-before,
    # last-after, ...) order as the plugin's attribute
    y.copy_(F.pad(x, [int(p) for p in pads], mode="circular"))
