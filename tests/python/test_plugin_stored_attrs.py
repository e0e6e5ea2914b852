"""Only the attributes @impl (or @aot_impl) takes are stored in the engine,
as in tensorrt.plugin; register still sees every attribute while building."""
import re

import numpy as np

import kiln
import kiln.plugin as kp
from conftest import build, load


@kp.register("tattr::padded_scale")
def ps_desc(x: kp.TensorDesc, k: float = 1.0, build_only_rows: int = 0) -> kp.TensorDesc:
    out = x.like()
    out.shape_expr[0] = x.shape_expr[0] + build_only_rows
    return out


@kp.impl("tattr::padded_scale")
def ps_impl(x: kp.Tensor, k: float, outputs, stream) -> None:
    # the extra rows come from the output's shape, not from the attribute
    a, y = np.asarray(x), np.asarray(outputs[0])
    y[: a.shape[0]] = k * a
    y[a.shape[0]:] = k


kp.register("tattr::takes_all")(ps_desc)  # the same shape function


@kp.impl("tattr::takes_all")
def ta_impl(x: kp.Tensor, k: float, build_only_rows: int, outputs, stream) -> None:
    a, y = np.asarray(x), np.asarray(outputs[0])
    y[: a.shape[0]] = k * a
    y[a.shape[0]:] = k + 0 * build_only_rows


def _plan(call):
    net = kiln.Builder().create_network()
    x = net.add_input("x", kiln.float32, ("N", 4))
    layer = net.add_plugin(call(x))
    net.mark_output(layer.get_output(0))
    return build(net, profiles={"x": ((1, 4), (3, 4), (8, 4))})


def _layer_attrs(eng):
    return re.findall(r"^\s*attrs (.*)$", eng.inspect(), re.M)


def test_attribute_impl_does_not_take_is_not_stored(rng):
    plan = _plan(lambda x: kp.op.tattr.padded_scale(x, k=-1.5, build_only_rows=3))
    assert b"build_only_rows" not in bytes(plan)
    eng = load(plan)
    (attrs,) = _layer_attrs(eng)
    # after load the unstored attribute holds its schema default, not the 3 it was built with
    assert re.search(r"\bk=-1\.5\b", attrs) and "build_only_rows=3" not in attrs, attrs
    xv = rng.standard_normal((5, 4)).astype(np.float32)
    y = eng.create_execution_context().execute({"x": xv})[eng.outputs[0]]
    ref = np.concatenate([-1.5 * xv, np.full((3, 4), -1.5, np.float32)])
    assert y.shape == (8, 4)  # register's use of the attribute lives on in the shape program
    np.testing.assert_allclose(y, ref, rtol=1e-6)


def test_attribute_impl_takes_is_stored(rng):
    plan = _plan(lambda x: kp.op.tattr.takes_all(x, k=2.0, build_only_rows=2))
    assert b"build_only_rows" in bytes(plan)
    (attrs,) = _layer_attrs(load(plan))
    assert "build_only_rows=2" in attrs and re.search(r"\bk=2\b", attrs), attrs
    eng = load(plan)
    xv = rng.standard_normal((3, 4)).astype(np.float32)
    y = eng.create_execution_context().execute({"x": xv})[eng.outputs[0]]
    np.testing.assert_allclose(y, np.concatenate([2 * xv, np.full((2, 4), 2, np.float32)]), rtol=1e-6)

