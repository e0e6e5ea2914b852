"""Networks, the ONNX parser and the builder: the ``tensorrt`` names over
kiln's C API (kiln_network_*, kiln_onnx_import, kiln_build)."""
from __future__ import annotations

import enum
import itertools
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _kiln
from ._dtypes import DataType, dtype_of
from ._logger import Logger
from .plugin import _plugin
from .plugin._op import PluginCall

Shape = Sequence[Union[int, str, None]]


class ITensor:
    """A named tensor of a network (input, constant or layer output)."""

    def __init__(self, network: "INetworkDefinition", name: str):
        self._network = network
        self.name = name

    def __repr__(self) -> str:
        return f"ITensor({self.name!r})"


class ILayer:
    """A layer of a network: an instance of a registered op."""

    def __init__(self, network: "INetworkDefinition", handle, outputs: List[str]):
        self._network = network
        self._handle = handle  # owned by the network
        self._outputs = outputs

    @property
    def name(self) -> str:
        return _kiln.layer_name(self._handle)

    @property
    def num_outputs(self) -> int:
        return len(self._outputs)

    def get_output(self, i: int) -> ITensor:
        if not 0 <= i < len(self._outputs):
            raise IndexError(f"layer '{self.name}' has {len(self._outputs)} outputs, asked for {i}")
        return ITensor(self._network, self._outputs[i])

    def set_attribute(self, name: str, value, elem: int = -1) -> None:
        if isinstance(value, np.ndarray):
            value, elem = np.ascontiguousarray(value).tobytes(), int(dtype_of(value.dtype))
        _kiln.layer_set(self._handle, name, value, elem)


def _name(t: Union[ITensor, str]) -> str:
    if isinstance(t, ITensor):
        return t.name
    if isinstance(t, str):
        return t
    raise TypeError(f"expected an ITensor or tensor name, got {type(t).__name__}")


class INetworkDefinition:
    """A graph under construction (kiln_network)."""

    _ids = itertools.count()

    def __init__(self, handle=None):
        self._handle = handle if handle is not None else _kiln.network_create()
        self._n = next(self._ids)
        self._auto = itertools.count()

    def add_input(self, name: str, dtype, shape: Shape) -> ITensor:
        """An input; a dim given as a str (or -1 / None) is dynamic (the same
        name is the same size everywhere)."""
        dims = [None if (isinstance(d, int) and d < 0) else d for d in shape]
        _kiln.network_add_input(self._handle, name, int(dtype_of(dtype)), dims)
        return ITensor(self, name)

    def add_constant(self, name: str, array: np.ndarray) -> ITensor:
        a = np.ascontiguousarray(array)
        _kiln.network_add_constant(self._handle, name, int(dtype_of(a.dtype)), a.shape, a)
        return ITensor(self, name)

    def add_layer(self, op: str, inputs: Sequence[Union[ITensor, str]], num_outputs: int = 1,
                  version: int = 1, name: Optional[str] = None, attrs: Optional[dict] = None) -> ILayer:
        """A layer of any registered op ("ns::name"), e.g. "ai.onnx::Relu"
        at its opset version."""
        base = name or f"{op.split('::')[-1]}_{next(self._auto)}"
        outs = [f"{base}:{k}" for k in range(num_outputs)]
        h = _kiln.network_add_layer(self._handle, op, version, name, [_name(t) for t in inputs], outs)
        layer = ILayer(self, h, outs)
        for k, v in (attrs or {}).items():
            layer.set_attribute(k, v)
        return layer

    def add_plugin(self, call: PluginCall, aot: Optional[bool] = None, name: Optional[str] = None) -> ILayer:
        """A layer running a kiln.plugin op: ``add_plugin(kiln.plugin.op.ns.name(x, k=2))``.
        ``aot``: True for the aot_impl, False for impl, None when the op has one."""
        if not isinstance(call, PluginCall):
            raise TypeError("add_plugin takes kiln.plugin.op.<ns>.<name>(...) (a PluginCall)")
        _plugin.sync()
        d = _plugin.definition(call.op_name)
        layer = self.add_layer(call.op_name, call.inputs, d.num_outputs, name=name)
        for k, v in call.attrs.items():
            value, elem = d.attrs[k].to_kiln(v)
            _kiln.layer_set(layer._handle, k, value, elem)
        if aot is not None:
            _kiln.layer_set_aot(layer._handle, 1 if aot else 0)
        return layer

    def add_plugin_v3(self, inputs: Sequence[Union[ITensor, str]], shape_inputs, plugin,
                      namespace: Optional[str] = None) -> ILayer:
        """A layer running a class plugin (kiln.IPluginV3 subclass) whose
        creator is registered."""
        from ._class_plugin import add_plugin_v3

        return add_plugin_v3(self, inputs, shape_inputs, plugin, namespace)

    def add_plugin_v2(self, inputs: Sequence[Union[ITensor, str]], plugin, namespace: Optional[str] = None) -> ILayer:
        """A layer running a V2-style class plugin (kiln.IPluginV2DynamicExt
        subclass) whose creator (kiln.IPluginCreator) is registered."""
        from ._class_plugin import add_plugin_v3

        return add_plugin_v3(self, inputs, [], plugin, namespace)

    def mark_output(self, tensor: Union[ITensor, str]) -> None:
        _kiln.network_mark_output(self._handle, _name(tensor))

    def _info(self):
        return _kiln.network_info(self._handle)

    @property
    def num_inputs(self) -> int:
        return len(self._info()[0])

    @property
    def num_outputs(self) -> int:
        return len(self._info()[1])

    @property
    def num_layers(self) -> int:
        return len(self._info()[2])

    def get_input(self, i: int) -> ITensor:
        return ITensor(self, self._info()[0][i][0])

    def get_output(self, i: int) -> ITensor:
        return ITensor(self, self._info()[1][i])

    @property
    def layers(self) -> List[dict]:
        """Each layer as data: name, op ("ns::name"), version, inputs, outputs."""
        return [dict(name=n, op=f"{ns}::{op}", version=v, inputs=list(i), outputs=list(o))
                for n, (ns, op), v, i, o, *_ in self._info()[2]]


class OnnxParser:
    """Fills a network from an ONNX model (kiln_onnx_import).  Errors are
    listed in ``errors`` / ``get_error(i)`` after a failed parse."""

    def __init__(self, network: INetworkDefinition, logger: Optional[Logger] = None):
        self._network = network
        self._logger = logger
        self.errors: List[str] = []

    def _parse(self, src) -> bool:
        _plugin.sync()
        self.errors = []
        verbose = self._logger is not None and self._logger.min_severity >= Logger.VERBOSE
        try:
            handle = _kiln.onnx_import(src, verbose)
        except _kiln.KilnError as e:
            self.errors = [line for line in str(e).split("\n") if line.strip()]
            return False
        self._network._handle = handle
        return True

    def parse(self, model: bytes) -> bool:
        return self._parse(bytes(model))

    def parse_from_file(self, path: str) -> bool:
        return self._parse(str(path))

    @property
    def num_errors(self) -> int:
        return len(self.errors)

    def get_error(self, i: int) -> str:
        return self.errors[i]


class BuilderFlag(enum.IntFlag):
    """kiln_build_flag."""

    FP16 = 1 << 0
    PREFER_AOT = 1 << 1
    PREFER_JIT = 1 << 2
    NO_TIMING = 1 << 3
    EMBED_PLUGINS = 1 << 5
    NO_FUSION = 1 << 6
    REFINE = 1 << 10
    CPU_BLOCKED = 1 << 11  # the default now (no effect): the built-in NCHW16C kernels are timed
    CPU_LINEAR = 1 << 12  # CPU: LINEAR kernels only, no NCHW16C (kiln build --no-cpu-16c)


class OptimizationProfile:
    """min/opt/max dims per dynamic input; tactics are timed at opt."""

    def __init__(self):
        self._shapes: Dict[str, Tuple[Tuple[int, ...], Tuple[int, ...], Tuple[int, ...]]] = {}

    def set_shape(self, input: str, min: Sequence[int], opt: Sequence[int], max: Sequence[int]) -> None:
        self._shapes[input] = (tuple(min), tuple(opt), tuple(max))

    def get_shape(self, input: str):
        return self._shapes[input]


class IBuilderConfig:
    """Build options (kiln_build_config)."""

    def __init__(self):
        self.flags = BuilderFlag(0)
        self.threads = 0          # 0: number of CPUs
        self.timing_reps = 0      # 0: kiln's default (5)
        self.device = "cpu"
        self.timing_cache_path: Optional[str] = None
        self._profiles: List[OptimizationProfile] = []

    def set_flag(self, f: BuilderFlag) -> None:
        self.flags |= f

    def clear_flag(self, f: BuilderFlag) -> None:
        self.flags &= ~f

    def get_flag(self, f: BuilderFlag) -> bool:
        return bool(self.flags & f)

    def add_optimization_profile(self, p: OptimizationProfile) -> int:
        self._profiles.append(p)
        return len(self._profiles) - 1

    def set_timing_cache_file(self, path: Optional[str]) -> None:
        """A timing cache file read before and written after each build."""
        self.timing_cache_path = path

    def _handle(self):
        h = _kiln.config_create()
        dev = {"cpu": 0, "cuda": 1}.get(self.device)
        if dev is None:
            raise ValueError(f"device '{self.device}': expected 'cpu' or 'cuda'")
        _kiln.config_set(h, int(self.flags), int(self.threads), int(self.timing_reps), dev)
        if self.timing_cache_path:
            _kiln.config_timing_cache(h, str(self.timing_cache_path))
        for p in self._profiles:
            for name, (mn, op, mx) in p._shapes.items():
                _kiln.config_profile(h, name, mn, op, mx)
        return h


class Builder:
    """Turns a network + config into a serialized engine."""

    def __init__(self, logger: Optional[Logger] = None):
        self.logger = logger
        self.last_stats: dict = {}

    def create_network(self, flags: int = 0) -> INetworkDefinition:
        return INetworkDefinition()

    def create_builder_config(self) -> IBuilderConfig:
        return IBuilderConfig()

    def create_optimization_profile(self) -> OptimizationProfile:
        return OptimizationProfile()

    def build_engine(self, network: INetworkDefinition, config: IBuilderConfig):
        """The engine itself (an ICudaEngine-like kiln.Engine)."""
        from ._runtime import Engine

        _plugin.sync()
        handle, self.last_stats = _kiln.build(network._handle, config._handle())
        return Engine(handle)

    def build_serialized_network(self, network: INetworkDefinition, config: IBuilderConfig) -> bytes:
        """The engine as bytes (save them, or Runtime.deserialize_engine)."""
        return self.build_engine(network, config).serialize()
