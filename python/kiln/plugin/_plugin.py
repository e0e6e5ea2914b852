"""The decorators of kiln.plugin (register, impl, autotune, aot_impl) and
the bridge to kiln's registry.

A plugin is registered with kiln (a quick op whose callbacks are the
trampolines of python/src/plugin.c) the first time something needs it: a
network's add_plugin, the ONNX parser, a build or an engine load all call
``sync()``.  A later decorator (say @autotune after a build) re-registers
the op: kiln keeps the old definition for engines already made with it.
"""
from __future__ import annotations

import inspect
import re
import threading
import typing
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import numpy.typing as npt

from .. import _kiln
from .._dtypes import DataType, TensorFormat, dtype_of
from ._autotune import AutoTuneCombination, KernelLaunchParams, _scalar
from ._desc import SizeTensorDesc, Tensor, TensorDesc
from ._expr import ShapeExpr, ShapeExprs, resolve

# kiln_attr_type
_A_INT, _A_FLOAT, _A_STRING, _A_BOOL, _A_BYTES, _A_ARRAY = 1, 2, 3, 4, 5, 6
# kiln_aot_lang
_LANG_CUDA, _LANG_PTX = 1, 2


def _ptx_params(ptx: str, entry: str) -> int:
    """How many parameters the PTX .entry `entry` declares (0 if absent)."""
    m = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\((.*?)\)", ptx, re.S)
    return m.group(1).count(".param") if m else 0


class PluginError(Exception):
    """A plugin definition kiln cannot accept (what, where, expected)."""


def _is_ndarray(ann: Any, origin: Any) -> bool:
    return ann is np.ndarray or origin is np.ndarray or (origin is not None and origin is npt.NDArray)


def _ndarray_elem(ann: Any, origin: Any) -> Any:
    """The element type of an array annotation, or None.

    numpy.typing.NDArray[T] is ndarray[Any, dtype[T]] with older numpy; with
    numpy >= 2.2 on Python >= 3.12, NDArray is a type alias (PEP 695) and
    NDArray[T] keeps T as its only argument."""
    args = typing.get_args(ann)
    if origin is not None and origin is npt.NDArray:
        return args[0] if args else None
    return typing.get_args(args[1])[0] if len(args) == 2 and typing.get_args(args[1]) else None


class _Attr:
    def __init__(self, name: str, ann: Any, default: Any):
        self.name = name
        self.default = default
        self.elem = 0
        self.np = None
        origin = typing.get_origin(ann)
        if ann is bool:
            self.type = _A_BOOL
        elif ann is int:
            self.type = _A_INT
        elif ann is float:
            self.type = _A_FLOAT
        elif ann is str:
            self.type = _A_STRING
        elif ann is bytes:
            self.type = _A_BYTES
        elif _is_ndarray(ann, origin):
            dt = _ndarray_elem(ann, origin)
            if dt is None or dt is typing.Any:
                raise PluginError(f"attribute '{name}': annotate arrays with their element type, "
                                  "e.g. numpy.typing.NDArray[numpy.int32]")
            self.type = _A_ARRAY
            self.np = np.dtype(dt)
            self.elem = int(dtype_of(self.np))
        else:
            raise PluginError(f"attribute '{name}': annotation {ann!r} is not an attribute type (int, float, str, "
                              "bool, bytes, numpy.typing.NDArray[dtype]) nor TensorDesc")

    def default_text(self) -> Optional[str]:
        d = self.default
        if d is inspect.Parameter.empty or d is None:
            return None
        if self.type == _A_BOOL:
            return "true" if d else "false"
        if self.type == _A_ARRAY:
            return "[" + ", ".join(str(x) for x in np.asarray(d, dtype=self.np).tolist()) + "]"
        if self.type == _A_BYTES:
            return None  # no text form: required unless given
        return repr(float(d)) if self.type == _A_FLOAT else str(d)

    def to_python(self, v: Any) -> Any:
        if self.type == _A_ARRAY:
            data, elem = v
            return np.frombuffer(data, dtype=self.np).copy()
        return v

    def to_kiln(self, v: Any) -> Tuple[Any, int]:
        """(value, elem) for _kiln.layer_set; checks the type."""
        t = self.type
        ok = (t == _A_BOOL and isinstance(v, (bool, np.bool_))) or \
             (t == _A_INT and isinstance(v, (int, np.integer)) and not isinstance(v, bool)) or \
             (t == _A_FLOAT and isinstance(v, (int, float, np.floating, np.integer)) and not isinstance(v, bool)) or \
             (t == _A_STRING and isinstance(v, str)) or (t == _A_BYTES and isinstance(v, (bytes, bytearray)))
        if t == _A_ARRAY:
            a = np.asarray(v)
            if a.ndim != 1:
                raise TypeError(f"attribute '{self.name}': expected a 1-D array of {self.np}, got {a.ndim}-D")
            if a.dtype != self.np and not np.can_cast(a.dtype, self.np, "same_kind"):
                raise TypeError(f"attribute '{self.name}': expected an array of {self.np}, got {a.dtype}")
            return np.ascontiguousarray(a, dtype=self.np).tobytes(), self.elem
        if not ok:
            want = {_A_BOOL: "bool", _A_INT: "int", _A_FLOAT: "float", _A_STRING: "str", _A_BYTES: "bytes"}[t]
            raise TypeError(f"attribute '{self.name}': expected {want}, got {type(v).__name__} {v!r}")
        if t == _A_FLOAT:
            v = float(v)
        elif t in (_A_INT, _A_BOOL):
            v = bool(v) if t == _A_BOOL else int(v)
        return v, -1


class PluginDef:
    """Everything known about one ``ns::name`` plugin."""

    def __init__(self, op_name: str, fn: Callable):
        if op_name.count("::") != 1 or op_name.startswith("::") or op_name.endswith("::"):
            raise PluginError(f'plugin name "{op_name}": expected "namespace::name"')
        self.op_name = op_name
        self.register_fn = fn
        self.impl_fn: Optional[Callable] = None
        self.cuda_impl_fn: Optional[Callable] = None
        self.cuda_graph_safe = False
        self.autotune_fn: Optional[Callable] = None
        self.aot_fn: Optional[Callable] = None
        self.cuda_aot_fn: Optional[Callable] = None
        self.aot_signature: Optional[str] = None
        self.registered = False  # with kiln, as currently defined
        self.ever_registered = False
        hints = typing.get_type_hints(fn)
        self.inputs: List[str] = []
        self.attrs: Dict[str, _Attr] = {}
        for name, p in inspect.signature(fn).parameters.items():
            ann = hints.get(name, p.annotation)
            if ann is TensorDesc:
                if self.attrs:
                    raise PluginError(f"{op_name}: input '{name}' comes after attributes; declare the "
                                      "TensorDesc inputs first")
                self.inputs.append(name)
            elif ann is inspect.Parameter.empty:
                raise PluginError(f"{op_name}: argument '{name}' has no annotation (TensorDesc for an input, "
                                  "int/float/str/bool/bytes/NDArray for an attribute)")
            else:
                self.attrs[name] = _Attr(name, ann, p.default)
        ret = hints.get("return", inspect.Signature.empty)
        if typing.get_origin(ret) in (tuple, Tuple):
            self.num_outputs = len(typing.get_args(ret))
        else:
            self.num_outputs = 1

    # ---------------------------------------------------------- callbacks

    _params_cache: Dict[Callable, frozenset] = {}

    @staticmethod
    def _params(fn: Callable) -> frozenset:
        # inspect.signature costs ~10 µs: once per function, not per call
        p = PluginDef._params_cache.get(fn)
        if p is None:
            p = PluginDef._params_cache[fn] = frozenset(inspect.signature(fn).parameters)
        return p

    def _attrs_for(self, fn: Callable, attrs: Dict[str, Any]) -> Dict[str, Any]:
        names = self._params(fn)
        return {k: self.attrs[k].to_python(v) for k, v in attrs.items() if k in names and k in self.attrs}

    @staticmethod
    def _descs(items, base_index: bool) -> List[TensorDesc]:
        out = []
        for i, (dtype, dims) in enumerate(items):
            d = TensorDesc((), DataType(dtype) if dtype else DataType.FLOAT)
            d.shape_expr = ShapeExprs(ShapeExpr(("h", h), c, text) for h, c, text in dims)
            if base_index:
                d._index = i
            out.append(d)
        return out

    def _shape(self, ins, attrs):
        descs = self._descs(ins, True)
        r = self.register_fn(*descs, **self._attrs_for(self.register_fn, attrs))
        outs = r if isinstance(r, (tuple, list)) else (r,)
        if len(outs) != self.num_outputs:
            raise PluginError(f"{self.op_name}: the register function returned {len(outs)} outputs, its return "
                              f"annotation declares {self.num_outputs}")
        size_idx = {}
        for k, o in enumerate(outs):
            if not isinstance(o, TensorDesc):
                raise PluginError(f"{self.op_name}: output {k} is {type(o).__name__}, expected a TensorDesc")
            if isinstance(o, SizeTensorDesc):
                size_idx[id(o)] = k

        def index(desc):
            if id(desc) not in size_idx:
                raise PluginError(f"{self.op_name}: a shape uses a size tensor that is not among the outputs")
            return size_idx[id(desc)]

        res = []
        for o in outs:
            if isinstance(o, SizeTensorDesc):
                res.append((int(DataType.INT64), None, -1,
                            (resolve(o.opt._tree, index), resolve(o.upper_bound._tree, index))))
            else:
                res.append((int(o.dtype), [resolve(e._tree, index) for e in o.shape_expr], o._alias, None))
        return res

    def _call_impl(self, fn, ins, outs, attrs, tactic, stream):
        tin = [Tensor(*t, stream) for t in ins]
        tout = tuple(Tensor(*t, stream) for t in outs)
        kw = self._attrs_for(fn, attrs) if attrs else {}
        params = self._params(fn)
        if "outputs" in params:
            kw["outputs"] = tout
        if "stream" in params:
            kw["stream"] = stream
        if "tactic" in params:
            kw["tactic"] = tactic
        r = fn(*tin, **kw)
        if r is not None:  # the outputs would stay unwritten: a silently wrong result
            raise PluginError(f"{self.op_name}: impl returned {type(r).__name__}, expected None: an impl writes "
                              "its results into `outputs` (e.g. np.copyto(np.asarray(outputs[0]), result))")

    def _impl(self, ins, outs, attrs, tactic, workspace, stream):
        if self.impl_fn is None:
            raise PluginError(f"{self.op_name}: this layer runs on the CPU, but the plugin has only a CUDA impl "
                              "(@impl(..., device=\"cuda\")): build with config.device = \"cuda\", or add a CPU "
                              "@impl")
        self._call_impl(self.impl_fn, ins, outs, attrs, tactic, 0)

    def _cuda_impl(self, ins, outs, attrs, tactic, workspace, stream):
        self._call_impl(self.cuda_impl_fn, ins, outs, attrs, tactic, stream)

    def _formats(self, ins, outs, attrs):
        din = self._descs(ins, True)
        dout = tuple(self._descs(outs, False))
        kw = self._attrs_for(self.autotune_fn, attrs)
        if "outputs" in self._params(self.autotune_fn):
            kw["outputs"] = dout
        combos = self.autotune_fn(*din, **kw)
        defaults = [d.dtype for d in din] + [d.dtype for d in dout]
        res = []
        for c in combos or ():
            if not isinstance(c, AutoTuneCombination):
                raise PluginError(f"{self.op_name}: autotune returned {type(c).__name__}, expected "
                                  "AutoTuneCombination")
            res.append(c._strings(defaults))
        return res

    def _aot_answer(self, fn, ins, outs, attrs, io, tactic):
        """What fn (an aot_impl) returns, checked: (name, code, launch,
        scalars, inputs, outputs)."""
        din = self._descs(ins, True)
        dout = tuple(self._descs(outs, False))
        for d, (dt, fmt) in zip(list(din) + list(dout), io):
            if dt:
                d.dtype = DataType(dt)
            d.format = TensorFormat(fmt)
        kw = self._attrs_for(fn, attrs)
        params = self._params(fn)
        if "outputs" in params:
            kw["outputs"] = dout
        if "tactic" in params:
            kw["tactic"] = tactic
        r = fn(*din, **kw)
        if not isinstance(r, tuple) or len(r) != 4:
            raise PluginError(f"{self.op_name}: aot_impl must return (kernel_name, code, KernelLaunchParams, "
                              "SymIntExprs)")
        name, code, launch, args = r
        name = name.decode() if isinstance(name, bytes) else name
        code = code.decode() if isinstance(code, bytes) else code
        if not isinstance(launch, KernelLaunchParams):
            raise PluginError(f"{self.op_name}: aot_impl's third value must be a KernelLaunchParams")
        scalars = [_scalar(x, i) for i, x in enumerate(args or ())]
        return name, code, launch, scalars, din, dout

    def _aot(self, ins, outs, attrs, io, tactic):
        name, code, launch, scalars, _, _ = self._aot_answer(self.aot_fn, ins, outs, attrs, io, tactic)
        return name, code, launch.extent()._tree, scalars

    def _cuda_aot(self, ins, outs, attrs, io, tactic):
        name, code, launch, scalars, din, dout = self._aot_answer(self.cuda_aot_fn, ins, outs, attrs, io, tactic)
        lang = _LANG_PTX if ".entry" in code else _LANG_CUDA
        scratch = launch.scratch
        if scratch is None:
            n = _ptx_params(code, name) - (len(din) + len(dout) + len(scalars)) if lang == _LANG_PTX else 0
            scratch = [0] * max(n, 0)
        dims = lambda *xs: [None if x is None else ShapeExpr.of(x)._tree for x in xs]  # noqa: E731
        return (name, code, lang, dims(launch.grid_x, launch.grid_y, launch.grid_z),
                dims(launch.block_x, launch.block_y, launch.block_z), ShapeExpr.of(launch.shared_mem)._tree, scalars,
                [int(b) for b in scratch])

    # ---------------------------------------------------------- kiln

    def sync(self) -> None:
        """Register (or re-register) this op with kiln."""
        if self.registered:
            return
        if self.impl_fn is None and self.cuda_impl_fn is None and self.aot_fn is None and self.cuda_aot_fn is None:
            raise PluginError(f"{self.op_name}: no @kiln.plugin.impl nor @kiln.plugin.aot_impl defined")
        if self.ever_registered:
            _kiln.registry_unregister(self.op_name, 1)
        attrs = [(a.name, a.type, a.elem, a.default_text(),
                  a.default is inspect.Parameter.empty) for a in self.attrs.values()]
        doc = (inspect.getdoc(self.register_fn) or "").split("\n")[0] or "Python plugin"
        # As in tensorrt.plugin, the engine stores only the attributes impl
        # (and aot_impl) take; the others reach register/autotune at build
        # time only.
        taken = set()
        for fn in (self.impl_fn, self.cuda_impl_fn, self.aot_fn, self.cuda_aot_fn):
            if fn is not None:
                taken |= self._params(fn)
        # None (all stored) keeps the engine's load-time re-check of shapes,
        # which kiln skips for ops that store only some attributes
        stored = None if taken >= set(self.attrs) else ",".join(a for a in self.attrs if a in taken)
        _kiln.register_quick_op(
            self.op_name, 1, len(self.inputs), len(self.inputs), self.num_outputs, attrs, self._shape,
            # a CUDA-only plugin keeps a CPU impl that says why it cannot run
            self._impl if self.impl_fn or (self.cuda_impl_fn and not self.aot_fn) else None,
            self._formats if self.autotune_fn else None,
            self._aot if self.aot_fn else None,
            self.aot_signature if self.aot_signature is not None else "*", None, doc, stored,
            self._cuda_impl if self.cuda_impl_fn else None, self.cuda_graph_safe,
            self._cuda_aot if self.cuda_aot_fn else None)
        self.registered = self.ever_registered = True


_lock = threading.Lock()
_defs: Dict[str, PluginDef] = {}


def _get(op_name: str, what: str) -> PluginDef:
    d = _defs.get(op_name)
    if d is None:
        raise PluginError(f'@{what}("{op_name}"): no @kiln.plugin.register("{op_name}") before it')
    return d


def sync() -> None:
    """Register every plugin defined so far with kiln (done for you by
    add_plugin, the ONNX parser, builds and engine loads)."""
    with _lock:
        for d in _defs.values():
            if any(f is not None for f in (d.impl_fn, d.cuda_impl_fn, d.aot_fn, d.cuda_aot_fn)):
                d.sync()


def register(op_name: str) -> Callable:
    """Define plugin ``op_name`` ("namespace::name") by its shape function.

    Arguments annotated ``TensorDesc`` are the inputs (first); all others
    are attributes (int, float, str, bool, bytes, numpy.typing.NDArray[dt]),
    with their Python defaults.  Returns one TensorDesc per output (a tuple
    for several; the return annotation says how many): ``inp.like()``,
    ``inp.aliased()`` (in-place), ``from_shape_expr(dims, dtype)``,
    ``size_tensor(opt, upper)``.
    """

    def deco(fn):
        with _lock:
            if op_name in _defs:
                old = _defs[op_name]
                d = PluginDef(op_name, fn)
                d.ever_registered = old.ever_registered
                _defs[op_name] = d
            else:
                _defs[op_name] = PluginDef(op_name, fn)
        return fn

    return deco


def _attach(op_name: str, what: str, field: str) -> Callable:
    def deco(fn):
        with _lock:
            d = _get(op_name, what)
            setattr(d, field, fn)
            d.registered = False
        return fn

    return deco


_IMPL_DEVICES = ("cpu", "cuda")


def impl(op_name: str, device="cpu", graph_safe: bool = False) -> Callable:
    """The computation of ``op_name``: ``fn(*inputs: Tensor, <attrs it names>,
    outputs: Tuple[Tensor], stream: int[, tactic: int])``.  Only the
    attributes it names are passed, and only those are stored in the
    engine (register and autotune see the others while building only).
    Write the outputs in place.

    ``device`` says where this function runs: "cpu" (the default: Tensors in
    host memory, ``numpy.asarray(t)`` views one, ``stream`` is 0), "cuda"
    (Tensors in GPU memory with ``__cuda_array_interface__`` and
    ``__dlpack__``, ``stream`` the CUstream to launch on, as an int), or
    both ("cpu", "cuda") for a function that handles either.  One op may
    have one function per device; a build for ``device = "cuda"`` runs the
    layer on the GPU when the op has a CUDA impl.  (tensorrt.plugin's
    ``@impl`` is a GPU impl: a ported plugin adds ``device="cuda"``.)

    ``graph_safe`` (CUDA): the function only enqueues kernels on ``stream``
    whose arguments depend on the tensors' shapes and attributes alone (no
    allocation, no host read, no sync), so kiln may capture its launches in
    a CUDA graph and replay them without calling it again."""
    devices = (device,) if isinstance(device, str) else tuple(device)
    bad = [d for d in devices if d not in _IMPL_DEVICES]
    if bad or not devices:
        raise PluginError(f'@impl("{op_name}", device={device!r}): expected "cpu", "cuda" or both')

    def deco(fn):
        with _lock:
            d = _get(op_name, "impl")
            if "cpu" in devices:
                d.impl_fn = fn
            if "cuda" in devices:
                d.cuda_impl_fn = fn
                d.cuda_graph_safe = bool(graph_safe)
            d.registered = False
        return fn

    return deco


def autotune(op_name: str) -> Callable:
    """``fn(*inputs: TensorDesc, <attrs>, outputs: Tuple[TensorDesc]) ->
    List[AutoTuneCombination]``: the type/format combinations and tactics
    the builder times for a layer."""
    return _attach(op_name, "autotune", "autotune_fn")


def aot_impl(op_name: str, signature: Optional[str] = None, device: str = "cpu") -> Callable:
    """``fn(*inputs: TensorDesc, <attrs>, outputs, tactic) -> (kernel_name,
    code, KernelLaunchParams, SymIntExprs)``: a kernel the builder compiles
    into the engine, which then runs with no Python.

    device "cpu" (default): ``code`` is C source in kiln's AOT contract
    (``void kernel_name(const kiln_aot_args *a, int ith, int nth)``, see
    include/kiln/plugin.h), launched over grid_x * grid_y * grid_z work
    items.  device "cuda" (tensorrt.plugin's aot_impl): ``code`` is PTX
    (e.g. Triton's ``compiled.asm["ptx"]``) or CUDA C source (compiled with
    NVRTC), ``kernel_name`` its entry; launched with grid, block and
    shared_mem of the KernelLaunchParams; parameters: input pointers,
    output pointers, the scalars, then hidden scratch pointers
    (``KernelLaunchParams.scratch``).

    The scalar argument types come from what the function returns
    (SymInt32 -> i32, SymInt64 or a plain shape expression -> i64,
    SymFloat32 -> f32), as in tensorrt.plugin.  ``signature``
    ("i32,i64,f32"), optional, fixes them: kiln then checks each returned
    kernel's count and types against it."""
    if device not in _IMPL_DEVICES:
        raise PluginError(f'@aot_impl("{op_name}", device={device!r}): expected "cpu" or "cuda"')

    def deco(fn):
        _attach(op_name, "aot_impl", "aot_fn" if device == "cpu" else "cuda_aot_fn")(fn)
        with _lock:  # one signature per op: a CUDA kernel's None keeps the CPU one's
            if signature is not None or device == "cpu":
                _defs[op_name].aot_signature = signature
        return fn

    return deco


def definition(op_name: str) -> PluginDef:
    return _get(op_name, "kiln.plugin.op")
