"""kiln.plugin.SourcePlugin (torch2trt style): compiled on first use through
kiln_plugin_compile, cached by content, rebuilt on change; compiler errors
are kiln errors; the documents' interpolate sample."""
import subprocess
import sys

import numpy as np
import pytest

import kiln
import kiln.plugin as kp
from conftest import ROOT

AXPY = """
    const float *x = IN(0);
    float *y = OUT(0);
    double a = kiln_attrs_float(c->attrs, "a");
    for (int64_t i = 0; i < kiln_tensor_numel(&c->out[0]); i++) y[i] = (float)(a * x[i]) %s;
"""


def run(plugin, x, **attrs):
    b = kiln.Builder()
    net = b.create_network()
    t = net.add_input("x", kiln.float32, x.shape)
    net.mark_output(plugin.add_to_network(net, [t], [(x.shape, kiln.float32)], **attrs).get_output(0))
    eng = b.build_engine(net, b.create_builder_config())
    return eng.create_execution_context().execute({"x": x})[eng.outputs[0]]


def test_source_plugin_cache_and_rebuild(tmp_path, rng):
    p1 = kp.SourcePlugin("src::axpy1", forward=AXPY % "", attrs={"a": "float"}, directory=tmp_path)
    x = rng.standard_normal(10).astype(np.float32)
    np.testing.assert_allclose(run(p1, x, a=2.5), 2.5 * x, rtol=1e-6)
    lib1 = p1.library
    assert lib1.startswith(str(tmp_path))
    # same source again: the cached library; changed source: a new one
    assert kp.SourcePlugin("src::axpy1", forward=AXPY % "", attrs={"a": "float"}, directory=tmp_path).build() == lib1
    p2 = kp.SourcePlugin("src::axpy2", forward=AXPY % "+ 1.0f", attrs={"a": "float"}, directory=tmp_path)
    np.testing.assert_allclose(run(p2, x, a=-1.0), -x + 1, rtol=1e-6)
    assert p2.library != lib1


def test_source_plugin_errors(tmp_path):
    bad = kp.SourcePlugin("src::broken", forward="    this is not C;", directory=tmp_path)
    with pytest.raises(kiln.KilnError) as e:
        bad.build()
    assert e.value.name == "KILN_ECOMPILE" and "error" in str(e.value)
    with pytest.raises(ValueError, match="attribute 'k' has type 'complex'"):
        kp.SourcePlugin("src::x", forward="", attrs={"k": "complex"})
    p = kp.SourcePlugin("src::axpy3", forward=AXPY % "", attrs={"a": "float"}, directory=tmp_path)
    net = kiln.Builder().create_network()
    t = net.add_input("x", kiln.float32, (3,))
    with pytest.raises(TypeError, match="unknown attribute 'b'"):
        p.add_to_network(net, [t], [((3,), kiln.float32)], b=1)


@pytest.mark.parametrize("args", ["", "--mode nearest", "--align_corners", "--size 3 4"])
def test_interpolate_sample(args):
    r = subprocess.run([sys.executable, str(ROOT / "samples" / "python" / "interpolate_plugin.py"), *args.split()],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "PASS" in r.stdout, r.stdout + r.stderr
