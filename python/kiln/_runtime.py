"""Engines and execution contexts: ``Runtime.deserialize_engine``,
``engine.create_execution_context()``, ``context.execute({name: array})``."""
from __future__ import annotations

import enum
import threading
from typing import Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from . import _kiln
from ._dtypes import DataType, nptype
from ._logger import Logger
from .plugin import _plugin


class TensorIOMode(enum.IntEnum):
    NONE = 0
    INPUT = 1
    OUTPUT = 2


class _Memory:
    """A read-only view of memory kiln owns, for numpy to copy from."""

    def __init__(self, addr: int, shape: Tuple[int, ...], npt: type):
        self.__array_interface__ = {"shape": shape, "typestr": np.dtype(npt).str,
                                    "data": (addr, True), "version": 3}


def _stream_int(stream) -> int:
    """A CUDA stream as an int: an int, or torch.cuda.Stream (cuda_stream),
    cupy.cuda.Stream (ptr), numba's stream (handle.value)."""
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr"):
        v = getattr(stream, attr, None)
        if isinstance(v, int):
            return v
    h = getattr(stream, "handle", None)
    v = getattr(h, "value", h)
    if isinstance(v, int):
        return v
    raise TypeError(f"expected a CUDA stream (int, torch/cupy/numba stream), got {type(stream).__name__}")


# DLPack's type codes (DLDataTypeCode) by numpy kind; bfloat16 is code 4.
_DL_CODE = {"i": 0, "u": 1, "f": 2, "b": 6}
_DL_NAME = {0: "int{}", 1: "uint{}", 2: "float{}", 4: "bfloat{}", 6: "bool"}


def _dl_type(t: DataType) -> Tuple[int, int]:
    """(DLPack type code, bits) of a kiln data type."""
    if t == DataType.BF16:
        return 4, 16
    d = np.dtype(nptype(t))
    return _DL_CODE[d.kind], d.itemsize * 8


def _np_dl_type(typestr: str) -> Tuple[int, int]:
    """(DLPack type code, bits) of an array interface's typestr; code -1 for
    kinds kiln has no type of (bfloat16 arrays of ml_dtypes say "V2")."""
    d = np.dtype(typestr)
    return _DL_CODE.get(d.kind, 4 if (d.kind, d.itemsize) == ("V", 2) else -1), d.itemsize * 8


def _address(x) -> Tuple[int, Optional[int], object, Optional[Tuple[int, int]]]:
    """(address, bytes or None, what to keep alive, (DLPack type code, bits)
    or None) of an int, a numpy array or anything with __array_interface__ /
    __cuda_array_interface__ / __dlpack__ (host or CUDA memory)."""
    if isinstance(x, int):
        return x, None, x, None
    if not hasattr(x, "__array_interface__") and not hasattr(x, "__cuda_array_interface__") \
            and hasattr(x, "__dlpack__"):
        cap = x.__dlpack__()  # not consumed: kept alive with the binding, released with it
        addr, n, _, contiguous, code, bits = _kiln.dlpack_address(cap)
        if not contiguous:
            raise ValueError("tensor address: the DLPack tensor must be C-contiguous")
        return addr, n, (x, cap), (code, bits)
    for attr in ("__array_interface__", "__cuda_array_interface__"):
        iface = getattr(x, attr, None)
        if iface is not None:
            if iface.get("strides") is not None and not (isinstance(x, np.ndarray) and x.flags.c_contiguous):
                raise ValueError("tensor address: the array must be C-contiguous")
            n = int(np.prod(iface["shape"], dtype=np.int64)) * np.dtype(iface["typestr"]).itemsize
            return int(iface["data"][0]), n, x, _np_dl_type(iface["typestr"])
    raise TypeError(f"expected an address (int) or an array, got {type(x).__name__}")


def _check_bound_type(name: str, want: DataType, got: Tuple[int, int]) -> None:
    """An array bound without a copy must hold the engine's type: kiln would
    read its bytes as that type.  BF16 tensors also take 16-bit integers
    (raw bfloat16 bits)."""
    w = _dl_type(want)
    if got == w or (want == DataType.BF16 and got in ((0, 16), (1, 16))):
        return
    name_of = lambda t: _DL_NAME.get(t[0], "an unsupported {}-bit type").format(t[1])  # noqa: E731
    raise TypeError(f"set_tensor_address: '{name}' is {name_of(w)} in the engine, the array holds {name_of(got)}: "
                    f"pass an array of the engine's type (kiln would read its bytes as {name_of(w)})")


def _input_array(name: str, value, npt: type) -> np.ndarray:
    """value as a C-contiguous array of npt, converted where numpy casts
    without changing the kind of values (float64 -> float32, int -> float);
    a lossy conversion (float -> int, anything -> bool, strings, objects)
    must be the caller's explicit choice."""
    a = np.asarray(value)
    if a.dtype != npt and not np.can_cast(a.dtype, npt, casting="same_kind"):
        raise TypeError(f"execute: input '{name}' is {a.dtype}, the engine takes {np.dtype(npt)}; numpy would "
                        f"not convert it without changing its values: convert it explicitly (.astype)")
    return np.ascontiguousarray(a, dtype=npt)


class Engine:
    """An immutable built engine (kiln_engine); ``ICudaEngine`` in tensorrt."""

    def __init__(self, handle):
        self._handle = handle
        self._io = _kiln.engine_io(handle)
        self._by_name = {t[0]: t for t in self._io}
        self._inputs = [t[0] for t in self._io if t[3]]
        self._outputs = [t[0] for t in self._io if not t[3]]
        # (name, numpy type, data-dependent) for execute()
        self._in_np = [(t[0], nptype(DataType(t[1]))) for t in self._io if t[3]]
        self._out_np = [(t[0], nptype(DataType(t[1])), bool(t[4])) for t in self._io if not t[3]]
        self._placement = _kiln.engine_placement(handle)

    # tensorrt-style I/O queries
    @property
    def num_io_tensors(self) -> int:
        return len(self._io)

    def get_tensor_name(self, i: int) -> str:
        return self._io[i][0]

    def _t(self, name: str):
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"engine has no input or output '{name}' (it has: {', '.join(self._by_name)})") from None

    def get_tensor_mode(self, name: str) -> TensorIOMode:
        return TensorIOMode.INPUT if self._t(name)[3] else TensorIOMode.OUTPUT

    def get_tensor_dtype(self, name: str) -> DataType:
        return DataType(self._t(name)[1])

    def get_tensor_shape(self, name: str) -> Tuple[int, ...]:
        """Dims, -1 where dynamic (or data-dependent)."""
        return self._t(name)[2]

    def get_tensor_profile_shape(self, name: str, profile_index: int = 0):
        t = self._t(name)
        return t[5], t[6], t[7]

    def is_shape_data_dependent(self, name: str) -> bool:
        return bool(self._t(name)[4])

    @property
    def inputs(self) -> List[str]:
        return list(self._inputs)

    @property
    def outputs(self) -> List[str]:
        return list(self._outputs)

    @property
    def layers(self) -> List[dict]:
        """Each layer: name, op, version, inputs, outputs, tactic, aot, time_ms
        and device ("cpu" or "cuda": where it runs; the copies and type
        conversions the builder inserted are layers too)."""
        return [dict(name=n, op=f"{ns}::{op}", version=v, inputs=list(i), outputs=list(o), tactic=t, aot=bool(a),
                     time_ms=ms, device=d) for n, (ns, op), v, i, o, t, a, ms, d in _kiln.engine_layers(self._handle)]

    @property
    def num_gpu_layers(self) -> int:
        """Op layers placed on the GPU (copies and conversions not counted)."""
        return self._placement[0]

    @property
    def num_cpu_layers(self) -> int:
        return self._placement[1]

    def inspect(self) -> str:
        """What ``kiln inspect`` prints."""
        return _kiln.engine_inspect(self._handle)

    def serialize(self) -> bytes:
        return _kiln.engine_serialize(self._handle)

    def save(self, path: str) -> None:
        _kiln.engine_save(self._handle, str(path))

    def create_execution_context(self, threads: int = 0) -> "ExecutionContext":
        """A context with its own activation memory (``threads`` = 0: the
        build setting).  Contexts of one engine may run on several threads."""
        return ExecutionContext(self, threads)


class ExecutionContext:
    """Runs an engine (kiln_context).  One thread at a time per context;
    use one context per thread to run an engine concurrently."""

    def __init__(self, engine: Engine, threads: int = 0):
        self.engine = engine  # keeps the engine alive
        self._handle = _kiln.context_create(engine._handle, int(threads))
        self._lock = threading.Lock()
        self._keep: Dict[str, object] = {}
        self.debug = False

    @property
    def debug(self) -> bool:
        return self._debug

    @debug.setter
    def debug(self, on: bool) -> None:
        self._debug = bool(on)
        _kiln.context_set_debug(self._handle, self._debug)

    def set_input_shape(self, name: str, shape) -> None:
        _kiln.context_set_input_shape(self._handle, name, tuple(int(d) for d in shape))

    def get_tensor_shape(self, name: str) -> Tuple[int, ...]:
        """Actual dims (outputs of data-dependent shape: after a run)."""
        return _kiln.context_shape(self._handle, name)

    def set_tensor_address(self, name: str, address) -> None:
        """Bind memory (an int address or an array, kept alive here) to an
        input or output for execute_async: zero copy."""
        addr, n, keep, dl = _address(address)
        if dl is not None:
            _check_bound_type(name, self.engine.get_tensor_dtype(name), dl)
        if n is None:
            if self.engine.get_tensor_mode(name) == TensorIOMode.INPUT:
                dims = self.get_tensor_shape(name)
                n = int(np.prod(dims, dtype=np.int64)) * self.engine.get_tensor_dtype(name).itemsize
            else:
                n = _kiln.context_output(self._handle, name)[1]
        _kiln.context_bind(self._handle, name, addr, n)
        self._keep[name] = keep

    def execute_async(self, stream: int = 0) -> bool:
        """Run with the bound addresses (host or device memory: arrays with
        ``__cuda_array_interface__``, e.g. torch or CuPy tensors, bind
        device memory without a copy).  On the CPU this returns when the run
        is done.  A CUDA engine's run is queued on ``stream`` (an int
        CUstream, or an object with ``cuda_stream`` / ``ptr`` such as
        ``torch.cuda.Stream``; 0: the context's own stream) and outputs are
        ready when that stream reaches this point (``synchronize()``)."""
        s = _stream_int(stream)
        with self._lock:
            if self.engine.num_gpu_layers:
                _kiln.context_enqueue(self._handle, s)
            elif s:
                raise ValueError("execute_async: a stream was given, but the engine runs on the CPU only")
            else:
                _kiln.context_run(self._handle)
        return True

    def synchronize(self) -> None:
        """Wait for the runs queued by execute_async (CUDA engines)."""
        _kiln.context_synchronize(self._handle)

    @property
    def cuda_graphs(self) -> bool:
        return getattr(self, "_graphs", True)

    @cuda_graphs.setter
    def cuda_graphs(self, on: bool) -> None:
        """CUDA engines: capture stretches of GPU layers into CUDA graphs
        from the second run on (default True)."""
        self._graphs = bool(on)
        _kiln.context_set_cuda_graphs(self._handle, self._graphs)

    execute_async_v3 = execute_async

    def execute(self, feed: Mapping[str, object]) -> Dict[str, np.ndarray]:
        """Run on {input name: array} and return {output name: new array}.
        Inputs are converted to the engine's dtype (a copy only if needed)
        where numpy does so within a kind (float64 -> float32, int ->
        float); others (float -> int, strings) are a TypeError."""
        eng, h = self.engine, self._handle
        if len(feed) != len(eng._inputs) or any(n not in feed for n in eng._inputs):
            missing = [n for n in eng._inputs if n not in feed]
            unknown = [n for n in feed if n not in eng._inputs]
            raise KeyError(f"execute: inputs {eng._inputs}; missing {missing}, unknown {unknown}")
        with self._lock:
            arrays = []  # alive until the run is over
            for name, npt in eng._in_np:
                a = _input_array(name, feed[name], npt)
                arrays.append(a)
                _kiln.context_set_input_shape(h, name, a.shape)
                _kiln.context_bind(h, name, a.ctypes.data, a.nbytes)
            out = {}
            for name, npt, dep in eng._out_np:
                if dep:
                    _kiln.context_bind(h, name, 0, 0)
                    continue
                o = np.empty(_kiln.context_shape(h, name), dtype=npt)
                _kiln.context_bind(h, name, o.ctypes.data, o.nbytes)
                out[name] = o
            _kiln.context_run(h)
            for name, npt, dep in eng._out_np:
                if dep:
                    shape = _kiln.context_shape(h, name)
                    addr = _kiln.context_output(h, name)[0]
                    out[name] = np.array(_Memory(addr, shape, npt)) if addr else np.empty(shape, npt)
            self._keep.clear()
            return {name: out[name] for name, _, _ in eng._out_np}


class Runtime:
    """Loads engines (kiln_engine_load_memory / kiln_engine_load)."""

    def __init__(self, logger: Optional[Logger] = None):
        self.logger = logger

    def deserialize_engine(self, data: Union[bytes, bytearray, memoryview]) -> Engine:
        """An engine from bytes.  Python plugins it uses must be defined
        (their module imported) first, else KilnError names them."""
        _plugin.sync()
        return Engine(_kiln.engine_load(bytes(data)))

    deserialize_cuda_engine = deserialize_engine

    def load_engine(self, path: str) -> Engine:
        """An engine from a file, mapped (weights used in place)."""
        _plugin.sync()
        return Engine(_kiln.engine_load(str(path)))
