"""Class plugins (IPluginV3 style): creator registration, shapes through the
expression builder, tactics timed (per format), serialization through an
engine file, errors in methods as kiln errors."""
import re
import subprocess
import sys

import numpy as np
import pytest

import kiln
from conftest import ROOT, load

sys.path.insert(0, str(ROOT / "samples" / "python"))
import circ_pad_plugin as cpp  # noqa: E402

kiln.get_plugin_registry().register_creator(cpp.CircularPaddingPluginCreator(), "sample")


def network(pads, raise_in_enqueue=False):
    b = kiln.Builder()
    net = b.create_network()
    x = net.add_input("X", kiln.float32, (2, 3, 5, 6))
    fc = kiln.PluginFieldCollection([kiln.PluginField("pads", pads, kiln.PluginFieldType.INT32)])
    plugin = cpp.CircularPaddingPluginCreator().create_plugin("CircularPaddingPlugin", fc, kiln.TensorRTPhase.BUILD)
    net.mark_output(net.add_plugin_v3([x], [], plugin).get_output(0))
    cfg = b.create_builder_config()
    cfg.threads, cfg.timing_reps = 1, 1
    return b, net, cfg


def test_class_plugin_build_save_load(tmp_path, rng):
    pads = np.array([2, 1, 0, 3], np.int32)
    b, net, cfg = network(pads)
    cpp.CircularPaddingPlugin.log.clear()
    eng = b.build_engine(net, cfg)
    assert {t for t, _ in cpp.CircularPaddingPlugin.log} == {1, 2}  # both tactics timed
    assert eng.get_tensor_shape(eng.outputs[0]) == (2, 3, 8, 9)
    path = tmp_path / "cp.kiln"
    eng.save(path)
    eng2 = kiln.Runtime().load_engine(str(path))  # fields deserialized into a new plugin
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    for e in (eng, eng2):
        tactic = e.layers[0]["tactic"]
        cpp.CircularPaddingPlugin.log.clear()
        y = e.create_execution_context().execute({"X": x})[e.outputs[0]]
        np.testing.assert_array_equal(y, cpp.reference(x, pads))
        assert cpp.CircularPaddingPlugin.log == [(tactic, kiln.float32)]
    assert any(o["name"] == "CircularPaddingPlugin" and not o["quick"] for o in kiln.registered_ops("sample::"))


def test_class_plugin_errors(rng):
    class Broken(cpp.CircularPaddingPlugin):
        def enqueue(self, *a):
            raise ZeroDivisionError("enqueue broke")

        def clone(self):
            c = Broken()
            c.__dict__.update(self.__dict__)
            return c

    class BrokenCreator(cpp.CircularPaddingPluginCreator):
        name = "BrokenPad"

        def create_plugin(self, name, fc, phase):
            p = Broken(fc)
            p.plugin_name = "BrokenPad"
            return p

    kiln.get_plugin_registry().register_creator(BrokenCreator(), "sample")
    b = kiln.Builder()
    net = b.create_network()
    x = net.add_input("X", kiln.float32, (4,))
    fc = kiln.PluginFieldCollection([kiln.PluginField("pads", [1, 1], kiln.PluginFieldType.INT32)])
    net.mark_output(net.add_plugin_v3([x], [], BrokenCreator().create_plugin("BrokenPad", fc, 0)).get_output(0))
    cfg = b.create_builder_config()
    cfg.set_flag(kiln.BuilderFlag.NO_TIMING)
    eng = b.build_engine(net, cfg)
    with pytest.raises(kiln.KilnError, match="ZeroDivisionError: enqueue broke"):
        eng.create_execution_context().execute({"X": rng.standard_normal(4).astype(np.float32)})
    class NoNamespace(BrokenCreator):
        plugin_namespace = ""

    with pytest.raises(ValueError, match="namespace"):
        kiln.get_plugin_registry().register_creator(NoNamespace(), "")
    with pytest.raises(kiln.KilnError, match="already registered"):
        kiln.get_plugin_registry().register_creator(BrokenCreator(), "sample")


@pytest.mark.parametrize("args", ["", "--precision fp16 --per-format-tactics"])
def test_circ_pad_plugin_sample(args):
    r = subprocess.run([sys.executable, str(ROOT / "samples" / "python" / "circ_pad_plugin.py"), *args.split()],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "PASS" in r.stdout, r.stdout + r.stderr
    # both circ_pad layers listed, on the CPU, with the tactic timing chose
    placed = re.findall(r"^  layer \S+ +sample::CircularPaddingPlugin v1 on cpu, JIT impl tactic [12]$", r.stdout, re.M)
    assert len(placed) == 2, r.stdout


def test_v2_style_plugin_and_failing_tactics_warn(rng, monkeypatch):
    # the V2 style (serialize / deserialize_plugin) through an engine file
    v2 = cpp.CircPadPluginV2Creator()
    kiln.get_plugin_registry().register_creator(v2, "sample")
    pads = np.array([1, 2, 3, 0], np.int32)
    b = kiln.Builder()
    net = b.create_network()
    x = net.add_input("X", kiln.float32, (2, 3, 5, 6))
    fc = kiln.PluginFieldCollection([kiln.PluginField("pads", pads, kiln.PluginFieldType.INT32)])
    net.mark_output(net.add_plugin_v2([x], v2.create_plugin(v2.name, fc)).get_output(0))
    cfg = b.create_builder_config()
    cfg.timing_reps = 1
    eng = kiln.Runtime().deserialize_engine(b.build_serialized_network(net, cfg))
    xv = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    np.testing.assert_array_equal(eng.create_execution_context().execute({"X": xv})[eng.outputs[0]],
                                  cpp.reference(xv, pads))
    # a get_valid_tactics that raises is not silently ignored
    monkeypatch.setattr(cpp.CircPadPluginV2, "get_valid_tactics", lambda self: 1 / 0)
    with pytest.warns(RuntimeWarning, match="get_valid_tactics raised ZeroDivisionError"):
        b.build_serialized_network(net, cfg)
