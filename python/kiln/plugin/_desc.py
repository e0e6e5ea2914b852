"""Tensor descriptors (shape time) and tensors (run time) of kiln.plugin."""
from __future__ import annotations

from typing import Tuple

import numpy as np

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


class Tensor:
    """A tensor as an impl function sees it: ``data_ptr``, ``shape``,
    ``dtype``, ``strides`` (elements), ``format``.  ``numpy.asarray(t)`` is
    a zero-copy view (``__array_interface__``); CUDA tensors will offer
    ``__cuda_array_interface__`` instead."""

    __slots__ = ("data_ptr", "dtype", "shape", "strides", "format", "device")

    def __init__(self, data_ptr: int, dtype: DataType, shape: Tuple[int, ...], strides: Tuple[int, ...],
                 format: TensorFormat = TensorFormat.LINEAR, device: str = "cpu"):
        # called per tensor per impl call: plain stores, enum lookups by value
        self.data_ptr = data_ptr
        self.dtype = _DTYPES[dtype]
        self.shape = shape
        self.strides = strides
        self.format = _FORMATS[format]
        self.device = device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    def _iface(self) -> dict:
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
            raise AttributeError("a CUDA tensor has no __array_interface__ (use __cuda_array_interface__)")
        return self._iface()

    @property
    def __cuda_array_interface__(self) -> dict:
        if self.device != "cuda":
            raise AttributeError("a CPU tensor has no __cuda_array_interface__ (use numpy.asarray)")
        return {**self._iface(), "stream": None}

    def __int__(self) -> int:  # class plugins' enqueue: tensorrt passes pointers
        return self.data_ptr

    __index__ = __int__

    def numpy(self) -> np.ndarray:
        """Zero-copy numpy view (CPU tensors)."""
        return np.asarray(self)

    def __repr__(self) -> str:
        return f"Tensor(shape={self.shape}, dtype={self.dtype.name}, data_ptr={self.data_ptr:#x})"
