"""Data types and tensor formats: kiln's values (ONNX TensorProto numbering)
with the names the ``tensorrt`` module uses (``kiln.float32`` ...)."""
from __future__ import annotations

import enum

import numpy as np


class DataType(enum.IntEnum):
    """A tensor element type; values match kiln_dtype (and ONNX)."""

    FLOAT = 1
    UINT8 = 2
    INT8 = 3
    UINT16 = 4
    INT16 = 5
    INT32 = 6
    INT64 = 7
    BOOL = 9
    HALF = 10
    DOUBLE = 11
    UINT32 = 12
    UINT64 = 13
    BF16 = 16

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]


float32 = DataType.FLOAT
float16 = DataType.HALF
float64 = DataType.DOUBLE
bfloat16 = DataType.BF16
int8 = DataType.INT8
int16 = DataType.INT16
int32 = DataType.INT32
int64 = DataType.INT64
uint8 = DataType.UINT8
uint16 = DataType.UINT16
uint32 = DataType.UINT32
uint64 = DataType.UINT64
bool_ = DataType.BOOL

_TO_NP = {
    DataType.FLOAT: np.float32, DataType.HALF: np.float16, DataType.DOUBLE: np.float64,
    DataType.INT8: np.int8, DataType.INT16: np.int16, DataType.INT32: np.int32, DataType.INT64: np.int64,
    DataType.UINT8: np.uint8, DataType.UINT16: np.uint16, DataType.UINT32: np.uint32,
    DataType.UINT64: np.uint64, DataType.BOOL: np.bool_,
}
_FROM_NP = {np.dtype(v): k for k, v in _TO_NP.items()}
_ITEMSIZE = {**{k: np.dtype(v).itemsize for k, v in _TO_NP.items()}, DataType.BF16: 2}
# Names in the autotune combination grammar (kiln_combo_expand).
_COMBO_NAME = {
    DataType.FLOAT: "FP32", DataType.HALF: "FP16", DataType.DOUBLE: "FP64", DataType.BF16: "BF16",
    DataType.INT8: "INT8", DataType.INT16: "INT16", DataType.INT32: "INT32", DataType.INT64: "INT64",
    DataType.UINT8: "UINT8", DataType.UINT16: "UINT16", DataType.UINT32: "UINT32", DataType.UINT64: "UINT64",
    DataType.BOOL: "BOOL",
}


def nptype(t: DataType | int) -> type:
    """The numpy scalar type of a kiln data type (``kiln.nptype(kiln.float32)``)."""
    try:
        return _TO_NP[DataType(t)]
    except (KeyError, ValueError):
        raise TypeError(f"kiln data type {t!r} has no numpy equivalent") from None


def dtype_of(x) -> DataType:
    """The kiln data type of a numpy dtype, numpy type or kiln DataType."""
    if isinstance(x, DataType):
        return x
    try:
        return _FROM_NP[np.dtype(x)]
    except (KeyError, TypeError):
        raise TypeError(f"{x!r} is not a data type kiln supports") from None


def combo_name(t: DataType) -> str:
    return _COMBO_NAME[DataType(t)]


class TensorFormat(enum.IntEnum):
    """Memory layout (kiln_format)."""

    LINEAR = 0
    NHWC = 1
    CHW8 = 2   # kiln's NCHW8C
    CHW16 = 3  # kiln's NCHW16C


_FORMAT_NAME = {TensorFormat.LINEAR: "LINEAR", TensorFormat.NHWC: "NHWC", TensorFormat.CHW8: "NCHW8C",
                TensorFormat.CHW16: "NCHW16C"}


def format_name(f: TensorFormat) -> str:
    return _FORMAT_NAME[TensorFormat(f)]
