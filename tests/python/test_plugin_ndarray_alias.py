"""Array attribute annotations in both forms numpy gives NDArray[T]:
ndarray[Any, dtype[T]] (numpy < 2.2, or Python < 3.12) and a PEP 695 type
alias whose subscription keeps T as its only argument (numpy >= 2.2 on
Python >= 3.12, as on the GPU machine: Python 3.12, numpy 2.5)."""
import types

import numpy as np
import numpy.typing as npt
import pytest

from kiln.plugin import _plugin


def test_ndarray_form():
    a = _plugin._Attr("pads", npt.NDArray[np.int32], None)
    assert a.type == _plugin._A_ARRAY and a.np == np.dtype(np.int32)


def test_type_alias_form(monkeypatch):
    alias = object()  # stands for numpy.typing.NDArray as a TypeAliasType
    monkeypatch.setattr(_plugin, "npt", types.SimpleNamespace(NDArray=alias))
    a = _plugin._Attr("pads", types.GenericAlias(alias, (np.int64,)), None)
    assert a.type == _plugin._A_ARRAY and a.np == np.dtype(np.int64)
    with pytest.raises(_plugin.PluginError, match="element type"):
        _plugin._Attr("pads", types.GenericAlias(alias, ()), None)


def test_not_an_attribute_type():
    with pytest.raises(_plugin.PluginError, match="not an attribute type"):
        _plugin._Attr("pads", list, None)
