"""``kiln.plugin.op.<namespace>.<name>(*inputs, **attrs)``: a plugin call to
hand to ``network.add_plugin``."""
from __future__ import annotations

from typing import Any, Dict, Tuple

from ._plugin import PluginError, _defs, _lock


class PluginCall:
    """An op identity, its input tensors and attribute values."""

    def __init__(self, op_name: str, inputs: Tuple[Any, ...], attrs: Dict[str, Any]):
        self.op_name = op_name
        self.inputs = inputs
        self.attrs = attrs

    def __repr__(self) -> str:
        return f"PluginCall({self.op_name}, {len(self.inputs)} inputs, {self.attrs})"


class _Namespace:
    def __init__(self, ns: str):
        self._ns = ns

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        op_name = f"{self._ns}::{name}"

        def call(*inputs, **attrs) -> PluginCall:
            with _lock:
                d = _defs.get(op_name)
            if d is None:
                raise PluginError(f"kiln.plugin.op.{self._ns}.{name}: no plugin \"{op_name}\" is defined in Python "
                                  "(import the module that defines it)")
            if len(inputs) != len(d.inputs):
                raise PluginError(f"{op_name}: {len(inputs)} inputs given, the plugin takes {len(d.inputs)} "
                                  f"({', '.join(d.inputs)})")
            unknown = [k for k in attrs if k not in d.attrs]
            if unknown:
                raise PluginError(f"{op_name}: unknown attribute '{unknown[0]}' (attributes: "
                                  f"{', '.join(d.attrs) or 'none'})")
            return PluginCall(op_name, inputs, attrs)

        call.__name__ = name
        return call


class _Ops:
    def __getattr__(self, ns: str) -> _Namespace:
        if ns.startswith("__"):
            raise AttributeError(ns)
        return _Namespace(ns)


op = _Ops()
