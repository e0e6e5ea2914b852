"""A minimal ONNX model writer for the samples (protobuf wire format by
hand: one graph of nodes, float/int inputs, plugin attributes), so the
samples need no `onnx` package."""
from __future__ import annotations

import struct
from typing import Dict, List, Sequence, Tuple, Union

import numpy as np


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _int(field: int, v: int) -> bytes:
    return _key(field, 0) + _varint(v)


def _bytes(field: int, v: Union[bytes, str]) -> bytes:
    b = v.encode() if isinstance(v, str) else v
    return _key(field, 2) + _varint(len(b)) + b


def _attr(name: str, v) -> bytes:
    # AttributeProto: name 1, f 2, i 3, s 4, floats 7, ints 8, type 20
    if isinstance(v, (bool, int, np.integer)):
        return _bytes(1, name) + _int(3, int(v)) + _int(20, 2)
    if isinstance(v, float):
        return _bytes(1, name) + _key(2, 5) + struct.pack("<f", v) + _int(20, 1)
    if isinstance(v, str):
        return _bytes(1, name) + _bytes(4, v) + _int(20, 3)
    a = np.asarray(v)
    if a.dtype.kind in "iu":
        return _bytes(1, name) + b"".join(_int(8, int(x)) for x in a) + _int(20, 7)
    return _bytes(1, name) + b"".join(_key(7, 5) + struct.pack("<f", float(x)) for x in a) + _int(20, 6)


def _value_info(name: str, elem: int, dims: Sequence[Union[int, str]]) -> bytes:
    shape = b"".join(_bytes(1, _int(1, d) if isinstance(d, int) else _bytes(2, d)) for d in dims)
    tensor = _int(1, elem) + _bytes(2, shape)
    return _bytes(1, name) + _bytes(2, _bytes(1, tensor))


Node = Tuple[str, str, List[str], List[str], Dict[str, object]]  # (op_type, domain, inputs, outputs, attrs)


def model(nodes: Sequence[Node], inputs: Sequence[Tuple[str, int, Sequence]],
          outputs: Sequence[Tuple[str, int, Sequence]], opsets: Dict[str, int]) -> bytes:
    """ModelProto bytes: elem types are ONNX TensorProto values (1 = float)."""
    graph = b""
    for i, (op, domain, ins, outs, attrs) in enumerate(nodes):
        n = b"".join(_bytes(1, x) for x in ins) + b"".join(_bytes(2, x) for x in outs)
        n += _bytes(3, f"{op}_{i}") + _bytes(4, op) + _bytes(7, domain)
        n += b"".join(_bytes(5, _attr(k, v)) for k, v in attrs.items())
        graph += _bytes(1, n)
    graph += _bytes(2, "sample_graph")
    graph += b"".join(_bytes(11, _value_info(*x)) for x in inputs)
    graph += b"".join(_bytes(12, _value_info(*x)) for x in outputs)
    m = _int(1, 8)
    m += b"".join(_bytes(8, _bytes(1, d) + _int(2, v)) for d, v in opsets.items())
    m += _bytes(7, graph)
    return m
