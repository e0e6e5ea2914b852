"""kiln.plugin: register/impl/autotune/aot_impl with the tensorrt.plugin
semantics, size tensors, aliasing, array attributes, ONNX mapping, and
every bad-input path turning into a clear error."""
import os
import subprocess
import sys
import textwrap
from typing import Tuple

import numpy as np
import numpy.typing as npt
import pytest

import kiln
import kiln.plugin as kp
from conftest import FIXTURES, ROOT, build, load

# ---------------------------------------------------------------- plugins

calls = {"add": [], "inplace": []}


@kp.register("t::add")
def add_desc(a: kp.TensorDesc, b: kp.TensorDesc, scale: float = 1.0) -> kp.TensorDesc:
    return a.like()


@kp.impl("t::add")
def add_impl(a: kp.Tensor, b: kp.Tensor, scale: float, outputs: Tuple[kp.Tensor], stream: int, tactic: int) -> None:
    calls["add"].append((tactic, a.dtype))
    y = np.asarray(outputs[0])
    y[...] = (np.asarray(a) + scale * np.asarray(b)) + tactic  # the tactic shows in the result


@kp.autotune("t::add")
def add_tune(a: kp.TensorDesc, b: kp.TensorDesc, outputs) -> list:
    return [kp.AutoTuneCombination("FP32|FP16, FP32|FP16, FP32|FP16", "LINEAR", [1, 2])]


@kp.register("t::inplace_add")
def inplace_desc(x: kp.TensorDesc, delta: int = 1) -> kp.TensorDesc:
    return x.aliased()


@kp.impl("t::inplace_add")
def inplace_impl(x: kp.Tensor, delta: int, outputs, stream) -> None:
    calls["inplace"].append((x.data_ptr, outputs[0].data_ptr))
    np.asarray(outputs[0])[...] += delta


@kp.register("t::non_zero")
def nz_desc(x: kp.TensorDesc) -> Tuple[kp.TensorDesc, kp.TensorDesc]:
    upper = x.shape_expr[0] * x.shape_expr[1]
    st = kp.size_tensor(upper // 2, upper)
    return kp.from_shape_expr((st.expr(), 2), dtype=kiln.int64), st


@kp.impl("t::non_zero")
def nz_impl(x: kp.Tensor, outputs, stream) -> None:
    idx = np.argwhere(np.asarray(x) != 0)
    np.asarray(outputs[0]).reshape(-1)[: idx.size] = idx.reshape(-1)
    np.asarray(outputs[1])[...] = len(idx)


@kp.register("t::circ_pad")
def cp_desc(x: kp.TensorDesc, pads: npt.NDArray[np.int32]) -> kp.TensorDesc:
    out = x.like()
    for i in range(np.size(pads) // 2):
        out.shape_expr[x.ndim - i - 1] += int(pads[i * 2] + pads[i * 2 + 1])
    return out


@kp.impl("t::circ_pad")
def cp_impl(x: kp.Tensor, pads: npt.NDArray[np.int32], outputs, stream) -> None:
    assert pads.dtype == np.int32
    a = np.asarray(x)
    width = [(0, 0)] * a.ndim
    for i in range(len(pads) // 2):
        width[a.ndim - i - 1] = (int(pads[2 * i]), int(pads[2 * i + 1]))
    np.asarray(outputs[0])[...] = np.pad(a, width, mode="wrap")


SCALE_SRC = textwrap.dedent("""
    #include <kiln/plugin.h>
    void scale_rows(const kiln_aot_args *a, int ith, int nth) {
        const float *x = a->in[0];
        float *y = a->out[0];
        int64_t n = a->i64[0], lo, hi;
        float k = (float)a->f64[1];
        kiln_split_range(a->extent, ith, nth, &lo, &hi);
        for (int64_t r = lo; r < hi; r++)
            for (int64_t j = 0; j < n; j++) y[r * n + j] = k * x[r * n + j];
    }
""")


@kp.register("t::scale_aot")
def sa_desc(x: kp.TensorDesc, k: float = 2.0) -> kp.TensorDesc:
    return x.like()


@kp.aot_impl("t::scale_aot", signature="i64,f32")
def sa_aot(x: kp.TensorDesc, k: float, outputs, tactic: int):
    launch = kp.KernelLaunchParams()
    launch.grid_x = x.shape_expr[0]
    args = kp.SymIntExprs(2)
    args[0] = kp.SymInt64(x.shape_expr[1])
    args[1] = kp.SymFloat32(k)
    return "scale_rows", SCALE_SRC, launch, args


def pair_network(op_call_fn, shape=("N", 8)):
    net = kiln.Builder().create_network()
    a = net.add_input("a", kiln.float32, shape)
    b = net.add_input("b", kiln.float32, shape)
    layer = net.add_plugin(op_call_fn(a, b))
    net.mark_output(layer.get_output(0))
    return net


# ---------------------------------------------------------------- behaviour


def test_autotune_times_every_tactic_and_fp16(rng):
    net = pair_network(lambda a, b: kp.op.t.add(a, b, scale=0.5))
    calls["add"].clear()
    eng = load(build(net, profiles={n: ((1, 8), (4, 8), (32, 8)) for n in "ab"}, flags=kiln.BuilderFlag.FP16))
    seen = {(t, d) for t, d in calls["add"]}
    assert {(1, kiln.float32), (2, kiln.float32), (1, kiln.float16), (2, kiln.float16)} <= seen
    (tactic,) = [l["tactic"] for l in eng.layers if l["op"] == "t::add"]  # FP16 adds reformat layers
    assert tactic in (1, 2)
    a = rng.standard_normal((5, 8)).astype(np.float32)
    b = rng.standard_normal((5, 8)).astype(np.float32)
    y = eng.create_execution_context().execute({"a": a, "b": b})[eng.outputs[0]]
    fp16 = len(eng.layers) > 1  # FP16 chosen: reformat layers around the op
    tol = 1e-2 if fp16 else 1e-6
    np.testing.assert_allclose(y, a + 0.5 * b + tactic, rtol=tol, atol=tol)


def test_inplace_alias(rng):
    net = kiln.Builder().create_network()
    x = net.add_input("x", kiln.float32, (4, 5))
    w = net.add_constant("w", np.ones((4, 5), np.float32))
    s = net.add_layer("ai.onnx::Add", [x, w], version=max(
        o["version"] for o in kiln.registered_ops("ai.onnx::Add") if o["name"] == "Add"))
    l1 = net.add_plugin(kp.op.t.inplace_add(s.get_output(0), delta=3))
    l2 = net.add_plugin(kp.op.t.inplace_add(l1.get_output(0), delta=-7))
    net.mark_output(l2.get_output(0))
    eng = load(build(net))
    calls["inplace"].clear()
    xv = rng.standard_normal((4, 5)).astype(np.float32)
    y = eng.create_execution_context().execute({"x": xv})[eng.outputs[0]]
    np.testing.assert_allclose(y, xv + 1 + 3 - 7, rtol=1e-6)
    assert len(calls["inplace"]) == 2 and all(i == o for i, o in calls["inplace"])


def test_size_tensor_non_zero(rng):
    net = kiln.Builder().create_network()
    x = net.add_input("x", kiln.float32, ("R", "C"))
    layer = net.add_plugin(kp.op.t.non_zero(x))
    net.mark_output(layer.get_output(0))
    eng = load(build(net, profiles={"x": ((1, 1), (4, 8), (16, 16))}))
    out = eng.outputs[0]
    assert eng.is_shape_data_dependent(out)
    ctx = eng.create_execution_context()
    for shape in ((3, 7), (16, 16), (1, 1)):
        xv = rng.standard_normal(shape).astype(np.float32) * (rng.random(shape) < 0.4)
        y = ctx.execute({"x": xv})[out]
        np.testing.assert_array_equal(y, np.argwhere(xv != 0))


def test_array_attribute_circ_pad(rng):
    net = kiln.Builder().create_network()
    x = net.add_input("x", kiln.float32, (2, 3, 4))
    layer = net.add_plugin(kp.op.t.circ_pad(x, pads=np.array([1, 2, 2, 0], np.int32)))
    net.mark_output(layer.get_output(0))
    eng = load(build(net))
    assert eng.get_tensor_shape(eng.outputs[0]) == (2, 5, 7)
    xv = rng.standard_normal((2, 3, 4)).astype(np.float32)
    y = eng.create_execution_context().execute({"x": xv})[eng.outputs[0]]
    np.testing.assert_array_equal(y, np.pad(xv, [(0, 0), (2, 0), (1, 2)], mode="wrap"))


def test_aot_engine_runs_without_python_definitions(tmp_path, rng):
    net = kiln.Builder().create_network()
    x = net.add_input("x", kiln.float32, ("N", 6))
    layer = net.add_plugin(kp.op.t.scale_aot(x, k=-1.5), aot=True)
    net.mark_output(layer.get_output(0))
    eng = load(build(net, profiles={"x": ((1, 6), (4, 6), (9, 6))}))
    assert eng.layers[0]["aot"]
    xv = rng.standard_normal((7, 6)).astype(np.float32)
    np.testing.assert_allclose(eng.create_execution_context().execute({"x": xv})[eng.outputs[0]], -1.5 * xv,
                               rtol=1e-6)
    path = tmp_path / "aot.kiln"
    eng.save(path)
    np.save(tmp_path / "x.npy", xv)
    # a fresh interpreter that never defines t::scale_aot runs it
    code = ("import sys, numpy as np, kiln; e = kiln.Runtime().load_engine(sys.argv[1]);"
            "y = e.create_execution_context().execute({'x': np.load(sys.argv[2])})[e.outputs[0]];"
            "np.save(sys.argv[3], y)")
    subprocess.run([sys.executable, "-c", code, str(path), str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                   check=True)
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), -1.5 * xv, rtol=1e-6)
    cli = os.environ.get("KILN_CLI", str(ROOT / "build" / "kiln"))
    if os.path.exists(cli):  # and the C CLI, with no Python at all
        np.save(tmp_path / "ref.npy", -1.5 * xv)
        r = subprocess.run([cli, "run", str(path), "--input", f"x={tmp_path / 'x.npy'}", "--compare",
                            f"0={tmp_path / 'ref.npy'}"], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr


def test_onnx_node_maps_to_python_plugin(rng):
    @kp.register("test.dom::Twice")
    def twice_desc(x: kp.TensorDesc) -> kp.TensorDesc:
        return x.like()

    @kp.impl("test.dom::Twice")
    def twice_impl(x: kp.Tensor, outputs, stream) -> None:
        np.multiply(np.asarray(x), 2, out=np.asarray(outputs[0]))

    net = kiln.Builder().create_network()
    p = kiln.OnnxParser(net)
    assert p.parse_from_file(str(FIXTURES / "domain_ns.onnx")), p.errors
    eng = load(build(net))
    name = eng.inputs[0]
    shape = tuple(d if d > 0 else 3 for d in eng.get_tensor_shape(name))
    xv = rng.standard_normal(shape).astype(np.float32)
    y = eng.create_execution_context().execute({name: xv})[eng.outputs[0]]
    np.testing.assert_allclose(y, 2 * xv, rtol=1e-6)


def test_tensor_is_zero_copy_and_descs():
    t = kp.Tensor(np.zeros(1).ctypes.data, kiln.float32, (2, 3), (3, 1))
    arr = np.zeros((2, 3), np.float32)
    t = kp.Tensor(arr.ctypes.data, kiln.float32, (2, 3), (3, 1))
    v = np.asarray(t)
    v[1, 2] = 5
    assert arr[1, 2] == 5 and v.ctypes.data == arr.ctypes.data
    d = kp.from_shape_expr((2, 3), kiln.float16)
    assert d.ndim == 2 and d.dtype == kiln.float16 and int(d.shape_expr.numel()) == 6
    e = kp.ShapeExpr(("h", 0), None, "N")
    assert not (e + 1).is_constant and (kp.ShapeExpr.of(7) // 2) == 3 and int(kp.cdiv(7, 2)) == 4
    assert int(kp.max(3, 9)) == 9 and int(kp.min(3, 9)) == 3
    with pytest.raises(TypeError, match="symbolic"):
        bool(e > 2)


def test_registered_ops_lists_python_plugins():
    kp.sync()
    mine = [o for o in kiln.registered_ops("t::add") if o["name"] == "add"]
    assert mine and mine[0]["library"] == "" and mine[0]["impl"] and not mine[0]["builtin"]
    assert [a[0] for a in mine[0]["attrs"]] == ["scale"]


# ---------------------------------------------------------------- bad input


def test_wrong_attribute_type():
    net = kiln.Builder().create_network()
    x = net.add_input("x", kiln.float32, (4,))
    with pytest.raises(TypeError, match="attribute 'delta': expected int, got str"):
        net.add_plugin(kp.op.t.inplace_add(x, delta="3"))
    with pytest.raises(TypeError, match="pads"):
        net.add_plugin(kp.op.t.circ_pad(x, pads=np.ones((2, 2), np.int32)))
    with pytest.raises(kp.PluginError, match="unknown attribute 'nope'"):
        kp.op.t.inplace_add(x, nope=1)
    with pytest.raises(kp.PluginError, match="1 inputs given, the plugin takes 2"):
        kp.op.t.add(x)


def test_unknown_plugin():
    with pytest.raises(kp.PluginError, match="no plugin \"nope::thing\""):
        kp.op.nope.thing()
    with pytest.raises(kp.PluginError, match="no @kiln.plugin.register"):
        kp.impl("nope::other")(lambda: None)
    with pytest.raises(kp.PluginError, match="namespace::name"):
        kp.register("no_namespace")(lambda x: x)
    with pytest.raises(kp.PluginError, match="no annotation"):
        kp.register("t::bad_annot")(lambda x: x)


def one_input_net(call):
    net = kiln.Builder().create_network()
    x = net.add_input("x", kiln.float32, (3,))
    layer = net.add_plugin(call(x))
    net.mark_output(layer.get_output(0))
    return net


def test_register_raising_becomes_kiln_error():
    @kp.register("t::shape_raises")
    def desc(x: kp.TensorDesc) -> kp.TensorDesc:
        raise ValueError("shape says no")

    @kp.impl("t::shape_raises")
    def impl(x: kp.Tensor, outputs, stream) -> None:
        pass

    with pytest.raises(kiln.KilnError) as e:
        build(one_input_net(kp.op.t.shape_raises))
    msg = str(e.value)
    assert "ValueError: shape says no" in msg and "Traceback" in msg and "t::shape_raises" in msg
    assert "in desc" in msg  # the user's frame


def test_impl_raising_becomes_kiln_error(rng):
    @kp.register("t::impl_raises")
    def desc(x: kp.TensorDesc) -> kp.TensorDesc:
        return x.like()

    @kp.impl("t::impl_raises")
    def impl(x: kp.Tensor, outputs, stream) -> None:
        raise RuntimeError("kernel exploded")

    eng = load(build(one_input_net(kp.op.t.impl_raises)))
    ctx = eng.create_execution_context()
    for _ in range(2):  # and the process goes on
        with pytest.raises(kiln.KilnError) as e:
            ctx.execute({"x": rng.standard_normal(3).astype(np.float32)})
        assert "RuntimeError: kernel exploded" in str(e.value) and e.value.name == "KILN_EPLUGIN"


def test_bad_register_results():
    @kp.register("t::two_outs")
    def desc(x: kp.TensorDesc) -> Tuple[kp.TensorDesc, kp.TensorDesc]:
        return x.like()

    @kp.impl("t::two_outs")
    def impl(x: kp.Tensor, outputs, stream) -> None:
        pass

    net = kiln.Builder().create_network()
    x = net.add_input("x", kiln.float32, (3,))
    layer = net.add_plugin(kp.op.t.two_outs(x))
    net.mark_output(layer.get_output(0))
    with pytest.raises(kiln.KilnError, match="returned 1 outputs, its return annotation declares 2"):
        build(net)

    @kp.register("t::not_a_desc")
    def desc2(x: kp.TensorDesc) -> kp.TensorDesc:
        return 42

    @kp.impl("t::not_a_desc")
    def impl2(x: kp.Tensor, outputs, stream) -> None:
        pass

    with pytest.raises(kiln.KilnError, match="output 0 is int, expected a TensorDesc"):
        build(one_input_net(kp.op.t.not_a_desc))

    @kp.register("t::stray_size")
    def desc3(x: kp.TensorDesc) -> kp.TensorDesc:
        st = kp.size_tensor(1, 3)
        return kp.from_shape_expr((st.expr(),), kiln.float32)

    @kp.impl("t::stray_size")
    def impl3(x: kp.Tensor, outputs, stream) -> None:
        pass

    with pytest.raises(kiln.KilnError, match="size tensor that is not among the outputs"):
        build(one_input_net(kp.op.t.stray_size))


def test_autotune_errors():
    @kp.register("t::bad_tune")
    def desc(x: kp.TensorDesc) -> kp.TensorDesc:
        return x.like()

    @kp.impl("t::bad_tune")
    def impl(x: kp.Tensor, outputs, stream) -> None:
        pass

    @kp.autotune("t::bad_tune")
    def tune(x: kp.TensorDesc, outputs):
        return [kp.AutoTuneCombination("FP32, FP99")]

    with pytest.raises(kiln.KilnError, match="FP99"):
        build(one_input_net(kp.op.t.bad_tune))
    with pytest.raises(ValueError, match="tactics must be > 0"):
        kp.AutoTuneCombination("FP32").tactics([0])
    c = kp.AutoTuneCombination().pos([0, 1], "FP32|FP16").tactics([3])
    assert c._strings([kiln.float32, kiln.float32]) == ("FP32|FP16, FP32|FP16", "LINEAR, LINEAR", [3])


def test_engine_with_python_plugin_needs_its_module(tmp_path, rng):
    net = pair_network(lambda a, b: kp.op.t.add(a, b), shape=(2, 8))
    path = tmp_path / "py.kiln"
    load(build(net)).save(path)
    code = "import sys, kiln; kiln.Runtime().load_engine(sys.argv[1])"
    r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True)
    assert r.returncode != 0
    assert "KilnError" in r.stderr and "t::add" in r.stderr


def test_python_plugin_contexts_from_threads(rng):
    import threading

    net = pair_network(lambda a, b: kp.op.t.add(a, b, scale=3.0))
    eng = load(build(net, profiles={n: ((1, 8), (4, 8), (32, 8)) for n in "ab"}))
    (tactic,) = [l["tactic"] for l in eng.layers if l["op"] == "t::add"]
    bad = []

    def worker(seed):
        r = np.random.default_rng(seed)
        ctx = eng.create_execution_context(threads=1)
        for _ in range(25):
            n = int(r.integers(1, 33))
            a, b = r.standard_normal((2, n, 8)).astype(np.float32)
            y = ctx.execute({"a": a, "b": b})[eng.outputs[0]]
            if not np.allclose(y, a + 3 * b + tactic, rtol=1e-5, atol=1e-5):
                bad.append(seed)

    ts = [threading.Thread(target=worker, args=(int(rng.integers(1 << 30)),)) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not bad


def test_impl_returning_a_value_is_an_error(rng):
    """An impl writes into `outputs`; one that returns its result instead
    (torch-style) would leave the output unwritten: a KilnError that says
    so, not a silently wrong answer."""
    @kp.register("t::impl_returns")
    def desc(x: kp.TensorDesc) -> kp.TensorDesc:
        return x.like()

    @kp.impl("t::impl_returns")
    def impl(x: kp.Tensor, outputs, stream) -> None:
        return np.asarray(x) * 2

    eng = load(build(one_input_net(kp.op.t.impl_returns)))
    ctx = eng.create_execution_context()
    with pytest.raises(kiln.KilnError) as e:
        ctx.execute({"x": rng.standard_normal(3).astype(np.float32)})
    assert "t::impl_returns: impl returned ndarray, expected None" in str(e.value)
    assert "outputs" in str(e.value) and e.value.name == "KILN_EPLUGIN"
