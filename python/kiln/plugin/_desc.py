"""Tensor descriptors (shape time) and tensors (run time) of kiln.plugin."""
from __future__ import annotations

import os
from typing import Tuple

import numpy as np

from .. import _kiln
from .._dtypes import DataType, TensorFormat, dtype_of, nptype
from ._expr import ShapeExpr, ShapeExprs, ShapeLike


_TYPESTR = {d: np.dtype(nptype(d)).str for d in DataType if d != DataType.BF16}


class TensorDesc:
    """What a register / autotune / aot_impl function knows about a tensor:
    ``dtype``, symbolic ``shape_expr``, ``format`` and ``ndim``."""

    def __init__(self, shape_expr=(), dtype: DataType = DataType.FLOAT, format: TensorFormat = TensorFormat.LINEAR):
        self.shape_expr = ShapeExprs(shape_expr)
        self.dtype = dtype_of(dtype)
        self.format = TensorFormat(format)
        self._alias = -1   # input index this output shares its buffer with
        self._index = -1   # input index (descriptors kiln made)

    @property
    def ndim(self) -> int:
        return len(self.shape_expr)

    @property
    def is_size_tensor(self) -> bool:
        return False

    def like(self) -> "TensorDesc":
        """A new descriptor with this one's dtype, dims and format."""
        return TensorDesc(list(self.shape_expr), self.dtype, self.format)

    def aliased(self) -> "TensorDesc":
        """Like like(), and the output shares this input's buffer (in-place)."""
        if self._index < 0:
            raise ValueError("aliased() applies to the descriptor of an input")
        d = self.like()
        d._alias = self._index
        return d

    def __repr__(self) -> str:
        return f"TensorDesc(shape_expr={list(self.shape_expr)}, dtype={self.dtype.name}, format={self.format.name})"


class SizeTensorDesc(TensorDesc):
    """A size tensor: a 0-D INT64 output whose value, written by impl, is a
    data-dependent dim of other outputs (use ``expr()`` in their shapes)."""

    def __init__(self, opt: ShapeLike, upper_bound: ShapeLike):
        super().__init__((), DataType.INT64)
        self.opt = ShapeExpr.of(opt)
        self.upper_bound = ShapeExpr.of(upper_bound)

    @property
    def is_size_tensor(self) -> bool:
        return True

    def expr(self) -> ShapeExpr:
        return ShapeExpr(("st", self), text="size_tensor")


def from_shape_expr(shape_expr, dtype: DataType = DataType.FLOAT) -> TensorDesc:
    """A descriptor of the given dims (ShapeExprs or ints) and dtype."""
    return TensorDesc(shape_expr, dtype)


def size_tensor(opt: ShapeLike, upper_bound: ShapeLike) -> SizeTensorDesc:
    """A size tensor with ``opt`` (value assumed when timing) and
    ``upper_bound`` (memory is planned for it)."""
    return SizeTensorDesc(opt, upper_bound)


_DTYPES = {int(d): d for d in DataType}
_FORMATS = {int(f): f for f in TensorFormat}
_DEVICES = {0: "cpu", 1: "cuda", "cpu": "cpu", "cuda": "cuda"}
# DLPack (code, bits) of each dtype: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6
_DL_DTYPE = {d: ({"f": 2, "i": 0, "u": 1, "b": 6}[np.dtype(nptype(d)).kind], 8 * d.itemsize)
             for d in DataType if d != DataType.BF16}
_DL_DTYPE[DataType.BF16] = (4, 16)
_KDLCPU, _KDLCUDA = 1, 2


def cuda_device_id() -> int:
    """The GPU kiln runs on ($KILN_CUDA_DEVICE, default 0)."""
    try:
        return int(os.environ.get("KILN_CUDA_DEVICE", "0") or 0)
    except ValueError:
        return 0


class Tensor:
    """A tensor as an impl function sees it: ``data_ptr``, ``shape``,
    ``dtype``, ``strides`` (elements), ``format``, ``device`` ("cpu" or
    "cuda").  Zero-copy views:

    - CPU: ``numpy.asarray(t)`` (``__array_interface__``),
      ``torch.from_dlpack(t)``;
    - CUDA: ``__cuda_array_interface__`` (version 3; its ``stream`` is the
      stream the data was written on, the one the impl received) for
      ``torch.as_tensor(t, device="cuda")``, ``cupy.asarray(t)``,
      ``numba.cuda.as_cuda_array(t)``; and ``__dlpack__`` /
      ``__dlpack_device__`` (kDLCUDA) for ``torch.from_dlpack(t)``,
      ``cupy.from_dlpack(t)``.  Triton kernels take the torch view.

    Consumers of ``__cuda_array_interface__`` that see a stream synchronize
    on it (CuPy, Numba): correct but a host wait per call, and not allowed
    while kiln captures a CUDA graph.  An impl that launches on ``stream``
    needs no wait: use ``cupy.from_dlpack(t)`` / ``torch.from_dlpack(t)``
    inside ``with <lib>.ExternalStream(stream)`` (DLPack: the consumer names
    its stream, kiln waits only if it is another one) or
    ``numba.cuda.as_cuda_array(t, sync=False)``."""

    __slots__ = ("data_ptr", "dtype", "shape", "strides", "format", "device", "stream")

    def __init__(self, data_ptr: int, dtype: DataType, shape: Tuple[int, ...], strides: Tuple[int, ...],
                 format: TensorFormat = TensorFormat.LINEAR, device="cpu", stream: int = 0):
        # called per tensor per impl call: plain stores, enum lookups by value
        self.data_ptr = data_ptr
        self.dtype = _DTYPES[dtype]
        self.shape = shape
        self.strides = strides
        self.format = _FORMATS[format]
        self.device = _DEVICES[device]
        self.stream = stream if self.device == "cuda" else 0

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    def _iface(self) -> dict:
        if self.dtype == DataType.BF16:
            raise TypeError("a BF16 tensor has no array interface typestr: use __dlpack__ (torch.from_dlpack)")
        item = self.dtype.itemsize
        return {
            "shape": self.shape,
            "typestr": _TYPESTR[self.dtype],
            "data": (self.data_ptr, False),
            "strides": tuple(s * item for s in self.strides) if self.shape else None,
            "version": 3,
        }

    @property
    def __array_interface__(self) -> dict:
        if self.device != "cpu":
            raise AttributeError("a CUDA tensor has no __array_interface__ (use __cuda_array_interface__ or "
                                 "__dlpack__: torch.as_tensor(t, device='cuda'), cupy.asarray(t))")
        return self._iface()

    @property
    def __cuda_array_interface__(self) -> dict:
        if self.device != "cuda":
            raise AttributeError("a CPU tensor has no __cuda_array_interface__ (use numpy.asarray)")
        # CAI v3: 0 is not a valid stream value (the legacy default stream is 1)
        return {**self._iface(), "stream": self.stream or None}

    def __dlpack_device__(self) -> Tuple[int, int]:
        return (_KDLCUDA, cuda_device_id()) if self.device == "cuda" else (_KDLCPU, 0)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule viewing this tensor (valid during the impl
        call).  ``stream``: the consumer's CUDA stream (None or -1: no
        ordering asked); if it is not the stream kiln wrote the data on,
        kiln waits for that stream first."""
        if copy:
            raise BufferError("kiln tensors are exported without a copy (copy=True asked)")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"kiln tensor is on {self.__dlpack_device__()}, {tuple(dl_device)} asked")
        if self.device == "cuda" and stream not in (None, -1) and stream != self.stream:
            _sync_stream(self.stream)
        code, bits = _DL_DTYPE[self.dtype]
        dev, dev_id = self.__dlpack_device__()
        return _kiln.dlpack(self.data_ptr, self.shape, self.strides, code, bits, dev, dev_id)

    def __int__(self) -> int:  # class plugins' enqueue: tensorrt passes pointers
        return self.data_ptr

    __index__ = __int__

    def numpy(self) -> np.ndarray:
        """Zero-copy numpy view (CPU tensors)."""
        return np.asarray(self)

    def __repr__(self) -> str:
        dev = "" if self.device == "cpu" else f", device={self.device}"
        return f"Tensor(shape={self.shape}, dtype={self.dtype.name}, data_ptr={self.data_ptr:#x}{dev})"


_cuda_lib = None


def _sync_stream(stream: int) -> None:
    """cuStreamSynchronize(stream) through the driver (libcuda), for a
    DLPack consumer on another stream than kiln's."""
    global _cuda_lib
    if _cuda_lib is None:
        import ctypes

        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
        lib.cuStreamSynchronize.restype = ctypes.c_int
        _cuda_lib = lib
    rc = _cuda_lib.cuStreamSynchronize(stream or None)
    if rc:
        raise BufferError(f"__dlpack__: cuStreamSynchronize failed (CUresult {rc})")
