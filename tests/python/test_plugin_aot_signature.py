"""@aot_impl without signature=: the scalar types come from what the
function returns; with signature= they are checked against it."""
import textwrap

import numpy as np
import pytest

import kiln
import kiln.plugin as kp
from conftest import build, load

# y = k * x + b over rows of n: scalars n (i32 here), k (f32), b (i64 offset)
AFFINE_SRC = textwrap.dedent("""
    #include <kiln/plugin.h>
    void affine_rows(const kiln_aot_args *a, int ith, int nth) {
        const float *x = a->in[0];
        float *y = a->out[0];
        int64_t n = a->i64[0], lo, hi;
        float k = (float)a->f64[1];
        float b = (float)a->i64[2];
        kiln_split_range(a->extent, ith, nth, &lo, &hi);
        for (int64_t r = lo; r < hi; r++)
            for (int64_t j = 0; j < n; j++) y[r * n + j] = k * x[r * n + j] + b;
    }
""")


def _affine_kernel(x, k, b, first=kp.SymInt32):
    launch = kp.KernelLaunchParams()
    launch.grid_x = x.shape_expr[0]
    args = kp.SymIntExprs(3)
    args[0] = first(x.shape_expr[1])
    args[1] = kp.SymFloat32(k)
    args[2] = kp.SymInt64(b)
    return "affine_rows", AFFINE_SRC, launch, args


@kp.register("tsig::derived")
def derived_desc(x: kp.TensorDesc, k: float = 2.0, b: int = 0) -> kp.TensorDesc:
    return x.like()


@kp.aot_impl("tsig::derived")  # no signature=: i32,f32,i64 from the returned values
def derived_aot(x: kp.TensorDesc, k: float, b: int, outputs, tactic: int):
    return _affine_kernel(x, k, b)


@kp.register("tsig::fixed")
def fixed_desc(x: kp.TensorDesc, k: float = 2.0, b: int = 0) -> kp.TensorDesc:
    return x.like()


@kp.aot_impl("tsig::fixed", signature="i64,f32,i64")  # the kernel returns i32 first: refused
def fixed_aot(x: kp.TensorDesc, k: float, b: int, outputs, tactic: int):
    return _affine_kernel(x, k, b)


@kp.register("tsig::fixed_ok")
def fixed_ok_desc(x: kp.TensorDesc, k: float = 2.0, b: int = 0) -> kp.TensorDesc:
    return x.like()


@kp.aot_impl("tsig::fixed_ok", signature="i64,f32,i64")
def fixed_ok_aot(x: kp.TensorDesc, k: float, b: int, outputs, tactic: int):
    return _affine_kernel(x, k, b, first=kp.SymInt64)


def _net(call):
    net = kiln.Builder().create_network()
    x = net.add_input("x", kiln.float32, ("N", 5))
    layer = net.add_plugin(call(x), aot=True)
    net.mark_output(layer.get_output(0))
    return net


@pytest.mark.parametrize("op", ["derived", "fixed_ok"])
def test_aot_scalar_types_run(op, rng):
    fn = getattr(kp.op.tsig, op)
    eng = load(build(_net(lambda x: fn(x, k=-0.5, b=3)), profiles={"x": ((1, 5), (4, 5), (8, 5))}))
    assert eng.layers[0]["aot"]
    xv = rng.standard_normal((6, 5)).astype(np.float32)
    y = eng.create_execution_context().execute({"x": xv})[eng.outputs[0]]
    np.testing.assert_allclose(y, -0.5 * xv + 3, rtol=1e-6)


def test_aot_signature_mismatch_is_refused():
    with pytest.raises(Exception, match=r"scalar 0 is i32, signature says i64"):
        build(_net(lambda x: kp.op.tsig.fixed(x, k=1.0, b=1)), profiles={"x": ((1, 5), (4, 5), (8, 5))})
