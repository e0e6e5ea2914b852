"""Class plugins, the documents' second style (IPluginV3): subclass the
base classes, write a creator, ``kiln.get_plugin_registry().register_creator
(creator, "ns")``, and add layers with ``network.add_plugin_v3``.

kiln calls the plugin object's methods through one dispatcher (this
module's ``_dispatch``, set in python/src/class_plugin.c):

    get_output_data_types(input_types)          -> [DataType]
    get_output_shapes(inputs, shape_inputs, expr_builder) -> [DimsExprs]
    supports_format_combination(pos, in_out, num_inputs) -> bool
    configure_plugin(inp, out), on_shape_change(inp, out)
    get_valid_tactics() -> [int > 0], set_tactic(t), get_timing_cache_id() -> str
    get_workspace_size(inp, out) -> int
    enqueue(input_desc, output_desc, inputs, outputs, workspace, stream)
    clone(), get_fields_to_serialize() -> PluginFieldCollection, attach_to_context(ctx)

``inputs``/``outputs`` of enqueue are kiln.plugin.Tensor objects: ``int(t)``
is the data pointer (as tensorrt passes), ``numpy.asarray(t)`` a view.
"""
from __future__ import annotations

import enum
import io
import warnings
from typing import Any, List, Optional, Sequence

import numpy as np

from . import _kiln
from ._dtypes import DataType, TensorFormat, dtype_of
from .plugin._desc import Tensor
from .plugin._expr import ShapeExpr, ShapeExprs


class PluginFieldType(enum.IntEnum):
    FLOAT16 = 0
    FLOAT32 = 1
    FLOAT64 = 2
    INT8 = 3
    INT16 = 4
    INT32 = 5
    CHAR = 6
    DIMS = 7
    UNKNOWN = 8
    BF16 = 9
    INT64 = 10


_FIELD_ELEM = {PluginFieldType.FLOAT16: np.float16, PluginFieldType.FLOAT32: np.float32,
               PluginFieldType.FLOAT64: np.float64, PluginFieldType.INT8: np.int8, PluginFieldType.INT16: np.int16,
               PluginFieldType.INT32: np.int32, PluginFieldType.INT64: np.int64}


class PluginField:
    """One named field (an attribute): ``data`` a numpy array (or str/bytes for CHAR/UNKNOWN)."""

    def __init__(self, name: str, data: Any = None, type: PluginFieldType = PluginFieldType.UNKNOWN):
        self.name = name
        self.type = PluginFieldType(type)
        if self.type in _FIELD_ELEM:
            data = np.asarray([] if data is None else data, dtype=_FIELD_ELEM[self.type]).reshape(-1)
        self.data = data

    @property
    def size(self) -> int:
        return len(self.data) if self.data is not None else 0

    def __repr__(self) -> str:
        return f"PluginField({self.name!r}, {self.data!r}, {self.type.name})"


class PluginFieldCollection(list):
    """A list of PluginField; ``fc["name"]`` finds one by name."""

    def __getitem__(self, k):
        if isinstance(k, str):
            for f in self:
                if f.name == k:
                    return f
            raise KeyError(k)
        return super().__getitem__(k)


class TensorRTPhase(enum.IntEnum):
    BUILD = 0
    RUNTIME = 1


class DimensionOperation(enum.IntEnum):
    SUM = 0
    PROD = 1
    MAX = 2
    MIN = 3
    SUB = 4
    EQUAL = 5
    LESS = 6
    FLOOR_DIV = 7
    CEIL_DIV = 8


class IExprBuilder:
    """Builds dims in get_output_shapes: ``constant(v)``, ``operation(op, a, b)``."""

    def constant(self, v: int) -> ShapeExpr:
        return ShapeExpr.of(int(v))

    def operation(self, op: DimensionOperation, a, b) -> ShapeExpr:
        from .plugin import _expr as e

        a = ShapeExpr.of(a)
        return {DimensionOperation.SUM: lambda: a + b, DimensionOperation.PROD: lambda: a * b,
                DimensionOperation.MAX: lambda: e.max(a, b), DimensionOperation.MIN: lambda: e.min(a, b),
                DimensionOperation.SUB: lambda: a - b, DimensionOperation.FLOOR_DIV: lambda: a // b,
                DimensionOperation.CEIL_DIV: lambda: e.cdiv(a, b),
                DimensionOperation.EQUAL: lambda: a._bin(e._EQ, b), DimensionOperation.LESS: lambda: a._bin(e._LT, b),
                }[DimensionOperation(op)]()


DimsExprs = ShapeExprs


class PluginTensorDesc:
    def __init__(self, type: DataType = DataType.FLOAT, format: TensorFormat = TensorFormat.LINEAR, dims=()):
        self.type = DataType(type)
        self.format = TensorFormat(format)
        self.dims = tuple(dims)


class DynamicPluginTensorDesc:
    def __init__(self, desc: PluginTensorDesc):
        self.desc = desc


class IPluginV3:
    """Base of class plugins.  Set ``plugin_name``, ``plugin_namespace``,
    ``plugin_version`` and ``num_outputs``."""

    plugin_name = ""
    plugin_namespace = ""
    plugin_version = "1"
    num_outputs = 1

    def get_capability_interface(self, type):  # the documents' plumbing: one object does all
        return self


class IPluginV3OneCore:
    pass


class IPluginV3OneBuild:
    def get_valid_tactics(self) -> List[int]:
        return []

    def get_timing_cache_id(self) -> str:
        return ""

    def get_workspace_size(self, inp, out) -> int:
        return 0

    def configure_plugin(self, inp, out) -> None:
        pass


class IPluginV3OneRuntime:
    def set_tactic(self, tactic: int) -> None:
        pass

    def on_shape_change(self, inp, out) -> None:
        pass

    def attach_to_context(self, context):
        return self.clone()


class _Creator:
    """What both creator styles declare."""

    name = ""
    plugin_namespace = ""
    plugin_version = "1"
    field_names = PluginFieldCollection()
    # kiln: where the plugins' enqueue runs: ("cpu",) host memory (numpy),
    # ("cuda",) device memory and a CUDA stream (tensorrt's plugins; a CUDA
    # build places the layers on the GPU), or both.  graph_safe: enqueue
    # only launches on `stream`, always the same kernels for the same
    # shapes, so kiln may capture it in a CUDA graph.
    devices = ("cpu",)
    graph_safe = False


class IPluginCreatorV3One(_Creator):
    """Creator: ``name``, ``plugin_namespace``, ``plugin_version``,
    ``field_names`` (PluginFieldCollection of the fields' types),
    ``create_plugin(name, fc, phase)``; optional ``num_inputs`` (default
    1..8) and ``num_outputs`` (default 1); kiln's ``devices`` and
    ``graph_safe`` (above)."""


# The one attribute of a V2-style layer: what the plugin's serialize() wrote.
_V2_STATE = "kiln_v2_state"


class IPluginV2DynamicExt(IPluginV3, IPluginV3OneCore, IPluginV3OneBuild, IPluginV3OneRuntime):
    """TensorRT's older class-plugin style, run through the same machinery
    as IPluginV3: ``plugin_type`` (the name), ``get_output_datatype(index,
    input_types)``, ``get_output_dimensions(index, inputs, expr_builder)``,
    ``serialize() -> bytes`` (the creator's ``deserialize_plugin`` reads it
    back), ``supports_format_combination``, ``configure_plugin``,
    ``get_workspace_size``, ``enqueue``, ``clone`` as in IPluginV3.  Add
    layers with ``network.add_plugin_v2(inputs, plugin)``."""

    plugin_type = ""

    @property
    def plugin_name(self) -> str:
        return self.plugin_type

    def get_output_data_types(self, input_types):
        return [self.get_output_datatype(i, input_types) for i in range(int(self.num_outputs))]

    def get_output_shapes(self, inputs, shape_inputs, expr_builder):
        return [self.get_output_dimensions(i, inputs, expr_builder) for i in range(int(self.num_outputs))]

    def serialize(self) -> bytes:
        return b""

    def get_fields_to_serialize(self):
        return PluginFieldCollection([PluginField(_V2_STATE, bytes(self.serialize()), PluginFieldType.UNKNOWN)])

    def initialize(self) -> int:
        return 0

    def terminate(self) -> None:
        pass


class IPluginCreator(_Creator):
    """Creator of V2-style plugins: ``name``, ``plugin_namespace``,
    ``plugin_version``, ``field_names``, ``create_plugin(name, fc)`` and
    ``deserialize_plugin(name, data)``; ``devices`` / ``graph_safe`` as in
    IPluginCreatorV3One."""


_KIND = {PluginFieldType.CHAR: (3, 0), PluginFieldType.UNKNOWN: (5, 0)}  # STRING, BYTES


def _schema(fields: Sequence[PluginField]):
    out = []
    for f in fields:
        if f.type in _KIND:
            t, e = _KIND[f.type]
        elif f.type in _FIELD_ELEM:
            t, e = 6, int(dtype_of(_FIELD_ELEM[f.type]))
        else:
            raise TypeError(f"plugin field '{f.name}': type {f.type.name} is not supported")
        out.append((f.name, t, e, None, False))
    return out


class _Entry:
    def __init__(self, creator, identity: str, fields, nin: int):
        self.creator = creator
        self.identity = identity
        self.fields = {f.name: f.type for f in fields}
        self.nin = nin

    def fc_from_attrs(self, attrs: dict) -> PluginFieldCollection:
        fc = PluginFieldCollection()
        for name, v in attrs.items():
            t = self.fields.get(name, PluginFieldType.UNKNOWN)
            if t in _FIELD_ELEM:
                v = np.frombuffer(v[0], dtype=_FIELD_ELEM[t]).copy()
            fc.append(PluginField(name, v, t))
        return fc

    def create(self, fc, phase):
        name = self.identity.split("::")[1]
        if isinstance(self.creator, IPluginCreator):  # V2 style: the state is serialize()'s bytes
            state = next((f.data for f in fc if f.name == _V2_STATE), None)
            obj = self.creator.deserialize_plugin(name, state) if state else self.creator.create_plugin(name, fc)
        else:
            obj = self.creator.create_plugin(name, fc, phase)
        if obj is None:
            raise ValueError(f"{self.identity}: create_plugin returned None")
        obj._kiln_nin = self.nin
        obj._kiln_cpu = self.cpu
        return obj


def _encode(fc: Sequence[PluginField]) -> bytes:
    buf = io.BytesIO()
    arrays = {}
    for f in fc:
        if f.type in _FIELD_ELEM:
            arrays[f"a:{f.name}"] = np.asarray(f.data, _FIELD_ELEM[f.type])
        else:
            data = f.data.encode() if isinstance(f.data, str) else bytes(f.data or b"")
            arrays[f"{'s' if f.type == PluginFieldType.CHAR else 'b'}:{f.name}"] = np.frombuffer(data, np.uint8)
    np.savez(buf, **arrays)
    return buf.getvalue()


def _decode(blob: bytes) -> PluginFieldCollection:
    fc = PluginFieldCollection()
    with np.load(io.BytesIO(blob), allow_pickle=False) as z:
        for k in z.files:
            kind, name = k.split(":", 1)
            a = z[k]
            if kind == "a":
                t = {v: k2 for k2, v in _FIELD_ELEM.items()}[a.dtype.type]
                fc.append(PluginField(name, a, t))
            else:
                raw = a.tobytes()
                fc.append(PluginField(name, raw.decode() if kind == "s" else raw,
                                      PluginFieldType.CHAR if kind == "s" else PluginFieldType.UNKNOWN))
    return fc


def _descs(ins):
    return [ShapeExprs(ShapeExpr(("h", h), c, t) for h, c, t in dims) for _, dims in ins]


def _tdescs(ts):
    return [PluginTensorDesc(dt, fmt, shape) for _, dt, shape, _, fmt, _ in ts]


def _dispatch(method: str, obj, *args):
    if method == "create":
        return obj.create(obj.fc_from_attrs(args[0]), TensorRTPhase.BUILD)
    if method == "deserialize":
        return obj.create(_decode(args[0]), TensorRTPhase.RUNTIME)
    if method == "clone":
        c = obj.clone()
        c._kiln_nin, c._kiln_cpu = obj._kiln_nin, obj._kiln_cpu
        return c
    if method == "shape":
        ins, nout = args
        types = obj.get_output_data_types([DataType(dt or 1) for dt, _ in ins])
        shapes = obj.get_output_shapes(_descs(ins), [], IExprBuilder())
        if len(types) != nout or len(shapes) != nout:
            raise ValueError(f"{obj.plugin_name}: {len(types)} output types and {len(shapes)} shapes, "
                             f"the layer has {nout} outputs")
        return [(int(dtype_of(t)), [ShapeExpr.of(d)._tree for d in s], -1, None) for t, s in zip(types, shapes)]
    if method == "supports":
        pos, io_ = args
        in_out = [DynamicPluginTensorDesc(PluginTensorDesc(dt or 1, f)) for dt, f in io_]
        return bool(obj.supports_format_combination(pos, in_out, obj._kiln_nin))
    if method == "configure":
        io_, ins, outs = args
        d = [DynamicPluginTensorDesc(PluginTensorDesc(dt or 1, f)) for dt, f in io_]
        return obj.configure_plugin(d[:len(ins)], d[len(ins):])
    if method == "workspace":
        return int(obj.get_workspace_size(_tdescs(args[0]), _tdescs(args[1])) or 0)
    if method == "tactics":
        try:
            return list(obj.get_valid_tactics() or [])
        except Exception as e:  # kiln then times tactic 0 alone: say why
            warnings.warn(f"{obj.plugin_namespace}::{obj.plugin_name}: get_valid_tactics raised "
                          f"{type(e).__name__}: {e}; only the default tactic is timed", RuntimeWarning, stacklevel=1)
            return []
    if method == "timing_id":
        return str(obj.get_timing_cache_id() or "")
    if method == "set_tactic":
        return obj.set_tactic(args[0])
    if method == "shape_change":
        return obj.on_shape_change(_tdescs(args[0]), _tdescs(args[1]))
    if method == "enqueue":
        ins, outs, ws, _, stream = args
        if not obj._kiln_cpu and not any(t[5] for t in outs):  # t[5]: kiln_device_kind
            raise RuntimeError(f"{obj.plugin_namespace}::{obj.plugin_name}: this layer runs on the CPU, but the "
                               "creator's devices are ('cuda',): build with config.device = \"cuda\"")
        return obj.enqueue(_tdescs(ins), _tdescs(outs), [Tensor(*t, stream) for t in ins],
                           [Tensor(*t, stream) for t in outs], ws, stream)
    if method == "serialize":
        return _encode(obj.get_fields_to_serialize())
    if method == "attach":
        c = obj.attach_to_context(None)
        if c is not None:
            c._kiln_nin, c._kiln_cpu = obj._kiln_nin, obj._kiln_cpu
        return c
    raise ValueError(f"unknown class plugin method {method}")


_kiln.set_class_dispatcher(_dispatch)


def register_creator(creator, namespace: Optional[str] = None) -> bool:
    ns = namespace or getattr(creator, "plugin_namespace", "") or ""
    if not ns:
        raise ValueError(f"plugin creator {creator.name!r}: kiln needs a namespace (register_creator(c, \"ns\"))")
    identity = f"{ns}::{creator.name}"
    fields = list(getattr(creator, "field_names", []) or [])
    if isinstance(creator, IPluginCreator):
        fields.append(PluginField(_V2_STATE, b"", PluginFieldType.UNKNOWN))
    _NAMESPACE[creator.name] = ns
    nin = getattr(creator, "num_inputs", None)
    devices = getattr(creator, "devices", ("cpu",))
    devices = (devices,) if isinstance(devices, str) else tuple(devices)
    if not devices or any(d not in ("cpu", "cuda") for d in devices):
        raise ValueError(f"plugin creator {creator.name!r}: devices {devices!r}, expected \"cpu\", \"cuda\" or both")
    entry = _Entry(creator, identity, fields, nin or 1)
    entry.cpu = "cpu" in devices
    _kiln.register_plugin(identity, int(creator.plugin_version or 1), nin or 1, nin or 8,
                          int(getattr(creator, "num_outputs", 1)), _schema(fields), entry,
                          (creator.__doc__ or "Python class plugin").strip().split("\n")[0], "cuda" in devices,
                          bool(getattr(creator, "graph_safe", False)))
    return True


_NAMESPACE = {}  # plugin name -> the namespace its creator was registered with


def add_plugin_v3(network, inputs, shape_inputs, plugin, namespace: Optional[str] = None):
    """A layer running a class plugin instance: its identity, output count
    and get_fields_to_serialize() become the layer."""
    ns = namespace or plugin.plugin_namespace or _NAMESPACE.get(plugin.plugin_name, "")
    layer = network.add_layer(f"{ns}::{plugin.plugin_name}", list(inputs), int(plugin.num_outputs),
                              version=int(plugin.plugin_version or 1))
    for f in plugin.get_fields_to_serialize():
        if f.type in _FIELD_ELEM:
            layer.set_attribute(f.name, np.asarray(f.data, _FIELD_ELEM[f.type]))
        else:
            layer.set_attribute(f.name, f.data if f.type == PluginFieldType.CHAR else bytes(f.data))
    return layer
