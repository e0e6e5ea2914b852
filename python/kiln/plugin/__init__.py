"""kiln.plugin — quickly deployable plugins, the ``tensorrt.plugin`` API.

    import kiln.plugin as kp

    @kp.register("sample::elemwise_add")
    def add_desc(inp0: kp.TensorDesc, inp1: kp.TensorDesc) -> kp.TensorDesc:
        return inp0.like()

    @kp.impl("sample::elemwise_add")
    def add_impl(inp0: kp.Tensor, inp1: kp.Tensor, outputs, stream: int) -> None:
        np.add(np.asarray(inp0), np.asarray(inp1), out=np.asarray(outputs[0]))

    layer = network.add_plugin(kp.op.sample.elemwise_add(x, y))

Errors raised inside these functions fail the build or run with a
kiln.KilnError carrying the Python traceback.  Engines using Python plugins
need the module defining them imported before they load.
"""
from ._autotune import AutoTuneCombination, KernelLaunchParams, SymExprs, SymFloat32, SymInt32, SymInt64, SymIntExprs
from ._desc import SizeTensorDesc, Tensor, TensorDesc, from_shape_expr, size_tensor
from ._expr import ShapeExpr, ShapeExprs, cdiv, max, min, select
from ._op import PluginCall, op
from ._plugin import PluginError, aot_impl, autotune, impl, register, sync
from ._source import SourcePlugin

__all__ = [
    "AutoTuneCombination", "KernelLaunchParams", "SymExprs", "SymFloat32", "SymInt32", "SymInt64", "SymIntExprs",
    "SizeTensorDesc", "Tensor", "TensorDesc", "from_shape_expr", "size_tensor", "ShapeExpr", "ShapeExprs", "cdiv",
    "max", "min", "select", "PluginCall", "op", "PluginError", "aot_impl", "autotune", "impl", "register", "sync",
    "SourcePlugin",
]
