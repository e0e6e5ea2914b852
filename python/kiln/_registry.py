"""The op registry as data, plugin libraries, and the class-plugin registry."""
from __future__ import annotations

from typing import List, Optional

from . import _kiln


def registered_ops(filter: Optional[str] = None) -> List[dict]:
    """Every registered op (built-in and plugins) as a dict: ns, name,
    version, inputs/outputs counts, attrs [(name, type, elem, default,
    required)], doc, library, builtin, quick, impl, aot."""
    ops = _kiln.registry_ops()
    if filter:
        ops = [o for o in ops if filter in f"{o['ns']}::{o['name']}"]
    return ops


def load_library(path: str) -> None:
    """Load a plugin library (its ops register themselves)."""
    _kiln.registry_load_library(str(path))


class PluginRegistry:
    """``kiln.get_plugin_registry()``: the process-wide registry."""

    def load_library(self, path: str) -> None:
        load_library(path)

    @property
    def all_ops(self) -> List[dict]:
        return registered_ops()

    def deregister(self, op_name: str, version: int = 1) -> None:
        _kiln.registry_unregister(op_name, version)

    def register_creator(self, creator, namespace: str = "") -> bool:
        """Register a class-plugin creator (IPluginCreatorV3One) under
        ``namespace::creator.name``."""
        from ._class_plugin import register_creator

        return register_creator(creator, namespace)


_registry = PluginRegistry()


def get_plugin_registry() -> PluginRegistry:
    return _registry
