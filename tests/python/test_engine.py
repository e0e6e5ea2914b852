"""The engine API: networks, ONNX parser, builder config, engines,
contexts (execute, zero-copy, threads), introspection, logging."""
import threading

import numpy as np
import pytest

import kiln
from conftest import FIXTURES, build, load


def op_version(ns, name):
    vs = [o["version"] for o in kiln.registered_ops(f"{ns}::{name}") if o["name"] == name and o["ns"] == ns]
    assert vs, f"{ns}::{name} not registered"
    return max(vs)


class DL:
    """Only __dlpack__, as a torch CPU tensor offers (no array interface)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def relu_add_network(dynamic=True):
    net = kiln.Builder().create_network()
    x = net.add_input("x", kiln.float32, ("N", 6) if dynamic else (3, 6))
    w = net.add_constant("w", np.linspace(-1, 1, 6, dtype=np.float32))
    add = net.add_layer("ai.onnx::Add", [x, w], version=op_version("ai.onnx", "Add"), name="add")
    relu = net.add_layer("ai.onnx::Relu", [add.get_output(0)], version=op_version("ai.onnx", "Relu"))
    net.mark_output(relu.get_output(0))
    return net


def test_version_and_registry():
    assert kiln.__version__.count(".") == 2
    ops = kiln.registered_ops()
    relu = [o for o in ops if o["ns"] == "ai.onnx" and o["name"] == "Relu"]
    assert relu and relu[0]["builtin"] and relu[0]["quick"]


def test_build_execute_dynamic(rng):
    net = relu_add_network()
    assert net.num_inputs == 1 and net.num_outputs == 1 and net.num_layers == 2
    assert net.layers[0]["op"] == "ai.onnx::Add" and net.layers[0]["inputs"] == ["x", "w"]
    eng = load(build(net, profiles={"x": ((1, 6), (4, 6), (16, 6))}))
    assert eng.num_io_tensors == 2
    assert eng.get_tensor_mode("x") == kiln.TensorIOMode.INPUT
    out_name = eng.outputs[0]
    assert eng.get_tensor_mode(out_name) == kiln.TensorIOMode.OUTPUT
    assert eng.get_tensor_shape("x") == (-1, 6)
    assert eng.get_tensor_profile_shape("x") == ((1, 6), (4, 6), (16, 6))
    assert eng.get_tensor_dtype("x") == kiln.float32
    ctx = eng.create_execution_context()
    w = np.linspace(-1, 1, 6, dtype=np.float32)
    for n in (1, 7, 16):
        x = rng.standard_normal((n, 6)).astype(np.float32)
        y = ctx.execute({"x": x})[out_name]
        assert y.shape == (n, 6)
        np.testing.assert_allclose(y, np.maximum(x + w, 0), rtol=1e-6)
    with pytest.raises(kiln.KilnError) as e:
        ctx.execute({"x": np.zeros((17, 6), np.float32)})
    assert e.value.name == "KILN_EPROFILE" and "x" in str(e.value)
    with pytest.raises(KeyError, match="missing"):
        ctx.execute({})
    assert "Relu" in eng.inspect()
    assert [l["op"] for l in eng.layers][-1] == "ai.onnx::Relu"


def test_zero_copy_execute_async(rng):
    eng = load(build(relu_add_network(dynamic=False)))
    ctx = eng.create_execution_context()
    x = rng.standard_normal((3, 6)).astype(np.float32)
    y = np.full((3, 6), np.nan, np.float32)  # poisoned
    ctx.set_tensor_address("x", x)
    ctx.set_tensor_address(eng.outputs[0], y.ctypes.data)
    assert ctx.execute_async(0)
    np.testing.assert_allclose(y, np.maximum(x + np.linspace(-1, 1, 6, dtype=np.float32), 0), rtol=1e-6)
    x[:] = rng.standard_normal((3, 6))  # same buffers, new values
    ctx.execute_async_v3(0)
    np.testing.assert_allclose(y, np.maximum(x + np.linspace(-1, 1, 6, dtype=np.float32), 0), rtol=1e-6)


def test_engine_file_roundtrip(tmp_path, rng):
    plan = build(relu_add_network(dynamic=False))
    eng = load(plan)
    path = tmp_path / "m.kiln"
    eng.save(path)
    eng2 = kiln.Runtime().load_engine(str(path))
    x = rng.standard_normal((3, 6)).astype(np.float32)
    a = eng.create_execution_context().execute({"x": x})
    b = eng2.create_execution_context().execute({"x": x})
    np.testing.assert_array_equal(a[eng.outputs[0]], b[eng2.outputs[0]])
    with pytest.raises(kiln.KilnError) as e:
        kiln.Runtime().deserialize_engine(plan[:100])
    assert e.value.code < 0 and str(e.value)


def test_concurrent_contexts_from_threads(rng):
    eng = load(build(relu_add_network(), profiles={"x": ((1, 6), (8, 6), (64, 6))}))
    w = np.linspace(-1, 1, 6, dtype=np.float32)
    errors = []

    def worker(seed):
        r = np.random.default_rng(seed)
        ctx = eng.create_execution_context(threads=1)
        for _ in range(30):
            x = r.standard_normal((int(r.integers(1, 65)), 6)).astype(np.float32)
            y = ctx.execute({"x": x})[eng.outputs[0]]
            if not np.allclose(y, np.maximum(x + w, 0)):
                errors.append(seed)

    ts = [threading.Thread(target=worker, args=(int(rng.integers(1 << 30)),)) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors


def test_onnx_parser(rng):
    net = kiln.Builder().create_network()
    p = kiln.OnnxParser(net)
    assert p.parse_from_file(str(FIXTURES / "add_relu.onnx")), p.errors
    eng = load(build(net))
    x = rng.standard_normal((2, 3)).astype(np.float32)
    assert set(eng.create_execution_context().execute({"x": x})) == {"y"}
    # from bytes, and the errors of a bad model listed
    net2 = kiln.Builder().create_network()
    p2 = kiln.OnnxParser(net2)
    assert p2.parse((FIXTURES / "dynamic.onnx").read_bytes())
    assert not p2.parse(b"\x08\x07garbage")
    assert p2.num_errors >= 1 and p2.get_error(0)
    p3 = kiln.OnnxParser(kiln.Builder().create_network())
    assert not p3.parse_from_file(str(FIXTURES / "circ_pad_aot0.onnx")) or any(
        o["ns"] == "sample" for o in kiln.registered_ops())
    assert not p3.parse_from_file("/nonexistent.onnx")
    assert "nonexistent" in p3.get_error(0)


def test_builder_config_options(tmp_path, rng):
    net = relu_add_network(dynamic=False)
    b = kiln.Builder()
    cfg = b.create_builder_config()
    cfg.set_flag(kiln.BuilderFlag.FP16)
    assert cfg.get_flag(kiln.BuilderFlag.FP16)
    cfg.clear_flag(kiln.BuilderFlag.FP16)
    cfg.threads, cfg.timing_reps = 2, 1
    cfg.set_timing_cache_file(str(tmp_path / "tc.bin"))
    b.build_serialized_network(net, cfg)
    assert (tmp_path / "tc.bin").exists()
    assert set(b.last_stats) >= {"layers", "timed", "cache_hits", "candidates", "build_ms"}
    cfg.device = "gpu"
    with pytest.raises(ValueError, match="device"):
        b.build_serialized_network(net, cfg)


def test_refine_flag(rng):
    """BuilderFlag.REFINE: the close tactic choices rerun inside the whole
    engine (last_stats counts them); the refined engine computes what the
    unrefined one does."""
    x = rng.standard_normal((1, 10, 32)).astype(np.float32)
    ys, stats = [], []
    for flags in (0, kiln.BuilderFlag.REFINE):
        net = kiln.Builder().create_network()
        assert kiln.OnnxParser(net).parse_from_file(str(FIXTURES / "mha_encoder.onnx"))
        b = kiln.Builder()
        cfg = b.create_builder_config()
        cfg.flags = kiln.BuilderFlag(flags)
        assert cfg.get_flag(kiln.BuilderFlag.REFINE) == bool(flags)
        cfg.threads, cfg.timing_reps = 2, 1
        prof = b.create_optimization_profile()
        prof.set_shape("x", x.shape, x.shape, x.shape)
        cfg.add_optimization_profile(prof)
        eng = load(b.build_serialized_network(net, cfg))
        stats.append(b.last_stats)
        ys.append(eng.create_execution_context().execute({"x": x})["y"])
    assert stats[0]["refined"] == 0 and stats[0]["refine_changed"] == 0
    assert 0 <= stats[1]["refine_changed"] <= stats[1]["refined"], stats[1]
    np.testing.assert_allclose(ys[1], ys[0], rtol=1e-5, atol=1e-5)


def test_cpu_linear_flag(rng, monkeypatch):
    """BuilderFlag.CPU_LINEAR leaves the NCHW16C kernels out, even where the
    tests' $KILN_CPU_BLOCKED=force ranks them first: forced, the default
    build runs the conv + Relu in NCHW16C between reformats; with the flag
    it has none; both compute the same."""
    monkeypatch.setenv("KILN_CPU_BLOCKED", "force")
    x = rng.standard_normal((1, 32, 14, 14)).astype(np.float32)
    w = rng.standard_normal((32, 32, 1, 1)).astype(np.float32)
    ys, stats = [], []
    for flags in (0, kiln.BuilderFlag.CPU_LINEAR):
        b = kiln.Builder()
        net = b.create_network()
        xi = net.add_input("x", kiln.float32, x.shape)
        conv = net.add_layer("ai.onnx::Conv", [xi, net.add_constant("w", w)], version=op_version("ai.onnx", "Conv"))
        relu = net.add_layer("ai.onnx::Relu", [conv.get_output(0)], version=op_version("ai.onnx", "Relu"))
        net.mark_output(relu.get_output(0))
        cfg = b.create_builder_config()
        cfg.flags = kiln.BuilderFlag(flags)
        cfg.threads, cfg.timing_reps = 1, 1
        eng = load(b.build_serialized_network(net, cfg))
        stats.append(b.last_stats)
        (y,) = eng.create_execution_context().execute({"x": x}).values()
        ys.append(y)
    assert stats[0]["reformats"] >= 2, stats[0]
    assert stats[1]["reformats"] == 0, stats[1]
    ref = np.maximum(np.einsum("mc,nchw->nmhw", w[:, :, 0, 0], x), 0)
    for y in ys:
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


def test_network_errors():
    net = kiln.Builder().create_network()
    net.add_input("x", kiln.float32, (2,))
    with pytest.raises(kiln.KilnError) as e:
        net.add_input("x", kiln.float32, (2,))
    assert e.value.name == "KILN_EEXISTS"
    with pytest.raises(kiln.KilnError, match="nope::Missing"):
        net.add_layer("nope::Missing", ["x"])
    with pytest.raises(kiln.KilnError, match="no tensor named 'y'"):
        net.mark_output("y")
    with pytest.raises(TypeError):
        net.add_input("z", "not a dtype", (1,))
    # a network with no profile for a dynamic input: the build names it
    n2 = kiln.Builder().create_network()
    n2.add_input("d", kiln.float32, ("N",))
    r = n2.add_layer("ai.onnx::Relu", ["d"], version=op_version("ai.onnx", "Relu"))
    n2.mark_output(r.get_output(0))
    with pytest.raises(kiln.KilnError, match="'d'"):
        build(n2)


def test_logger_receives_messages():
    got = []

    class L(kiln.Logger):
        def log(self, severity, msg):
            got.append((severity, msg))

    import kiln.plugin as kp

    @kp.register("logtest::ident")
    def desc(x: kp.TensorDesc) -> kp.TensorDesc:
        return x.like()

    @kp.impl("logtest::ident")
    def impl(x: kp.Tensor, outputs, stream) -> None:
        np.copyto(np.asarray(outputs[0]), np.asarray(x))

    L(kiln.Logger.VERBOSE)
    try:
        kp.sync()  # registering logs at VERBOSE
    finally:
        kiln.Logger(kiln.Logger.WARNING)
    assert any(s == kiln.Logger.VERBOSE and "logtest::ident" in m for s, m in got), got


def test_execute_shape_mismatch_is_an_error(rng):
    eng = load(build(relu_add_network(dynamic=False)))
    ctx = eng.create_execution_context()
    for bad in (np.zeros((3, 7), np.float32), np.zeros((6,), np.float32)):
        with pytest.raises(kiln.KilnError) as e:
            ctx.execute({"x": bad})
        assert "'x'" in str(e.value) or "x" in str(e.value)
    # a good run still works afterwards
    x = rng.standard_normal((3, 6)).astype(np.float32)
    np.testing.assert_allclose(ctx.execute({"x": x})[eng.outputs[0]],
                               np.maximum(x + np.linspace(-1, 1, 6, dtype=np.float32), 0), rtol=1e-6)
    # too small a buffer for set_tensor_address
    small = np.zeros(2, np.float32)
    ctx.set_tensor_address("x", x)
    ctx.set_tensor_address(eng.outputs[0], small)
    with pytest.raises(kiln.KilnError):
        ctx.execute_async(0)


def test_set_tensor_address_dlpack(rng):
    eng = load(build(relu_add_network(dynamic=False)))
    ctx = eng.create_execution_context()
    x = rng.standard_normal((3, 6)).astype(np.float32)
    y = np.full((3, 6), np.nan, np.float32)
    ctx.set_tensor_address("x", DL(x))
    ctx.set_tensor_address(eng.outputs[0], DL(y))
    ctx.execute_async(0)
    np.testing.assert_allclose(y, np.maximum(x + np.linspace(-1, 1, 6, dtype=np.float32), 0), rtol=1e-6)


def int_add_network():
    net = kiln.Builder().create_network()
    i = net.add_input("i", kiln.int64, (4,))
    w = net.add_constant("w", np.array([10, -20, 30, -40], np.int64))
    add = net.add_layer("ai.onnx::Add", [i, w], version=op_version("ai.onnx", "Add"))
    net.mark_output(add.get_output(0))
    return net


def test_execute_converts_only_within_a_kind(rng):
    """execute converts inputs where numpy casts within a kind of value
    (float64 -> float32, int32 -> int64, a list of ints -> int64); float ->
    int would truncate, strings and objects have no value: those are a
    TypeError naming the input, never a silently different input."""
    eng = load(build(relu_add_network(dynamic=False)))
    ctx = eng.create_execution_context()
    w = np.linspace(-1, 1, 6, dtype=np.float32)
    x = rng.standard_normal((3, 6))  # float64
    np.testing.assert_allclose(ctx.execute({"x": x})[eng.outputs[0]], np.maximum(x.astype(np.float32) + w, 0),
                               rtol=1e-6)
    for bad, found in ((np.full((3, 6), "a"), "<U1"), (np.full((3, 6), None), "object")):
        with pytest.raises(TypeError, match=f"input 'x' is {found}, the engine takes float32"):
            ctx.execute({"x": bad})

    ieng = load(build(int_add_network()))
    ictx = ieng.create_execution_context()
    out = ieng.outputs[0]
    ref = np.array([1, 2, 3, 4]) + np.array([10, -20, 30, -40])
    np.testing.assert_array_equal(ictx.execute({"i": [1, 2, 3, 4]})[out], ref)
    np.testing.assert_array_equal(ictx.execute({"i": np.array([1, 2, 3, 4], np.int32)})[out], ref)
    with pytest.raises(TypeError, match="input 'i' is float64, the engine takes int64.*explicitly"):
        ictx.execute({"i": np.array([1.7, 2.2, 3.9, 4.5])})


def test_set_tensor_address_checks_the_type(rng):
    """An array bound without a copy must hold the engine's type (kiln
    would read a float64 array's bytes as float32 values): TypeError, for
    numpy arrays and DLPack producers alike; an int address is taken as is."""
    eng = load(build(relu_add_network(dynamic=False)))
    ctx = eng.create_execution_context()
    out = eng.outputs[0]
    x64 = rng.standard_normal((3, 6))
    for bad in (x64, DL(x64)):
        with pytest.raises(TypeError, match="'x' is float32 in the engine, the array holds float64"):
            ctx.set_tensor_address("x", bad)
    with pytest.raises(TypeError, match=f"'{out}' is float32 in the engine, the array holds int32"):
        ctx.set_tensor_address(out, np.zeros((3, 6), np.int32))
    with pytest.raises(KeyError, match="no input or output 'nope'"):
        ctx.set_tensor_address("nope", np.zeros((3, 6), np.float32))
    # the right types (and a raw address) still bind and run
    x = x64.astype(np.float32)
    y = np.full((3, 6), np.nan, np.float32)
    ctx.set_tensor_address("x", DL(x))
    ctx.set_tensor_address(out, y.ctypes.data)
    ctx.execute_async(0)
    np.testing.assert_allclose(y, np.maximum(x + np.linspace(-1, 1, 6, dtype=np.float32), 0), rtol=1e-6)
