"""kiln — an inference engine with TensorRT-style plugins, from Python.

The names mirror the ``tensorrt`` module, so code ports by changing imports:

    import kiln
    logger = kiln.Logger(kiln.Logger.WARNING)
    builder = kiln.Builder(logger)
    network = builder.create_network()
    kiln.OnnxParser(network, logger).parse_from_file("model.onnx")
    config = builder.create_builder_config()
    plan = builder.build_serialized_network(network, config)
    engine = kiln.Runtime(logger).deserialize_engine(plan)
    outputs = engine.create_execution_context().execute({"x": x})

``kiln.plugin`` is the ``tensorrt.plugin`` API (register, impl, autotune,
aot_impl).  Errors are ``kiln.KilnError`` (``.code``, ``.name``, message).
"""
import os as _os
import sys as _sys

# Plugin libraries that kiln loads (kiln_registry_load_library, compiled
# plugins) resolve kiln's symbols from this extension: load it globally.
_flags = _sys.getdlopenflags()
_sys.setdlopenflags(_flags | _os.RTLD_GLOBAL)
try:
    from . import _kiln
finally:
    _sys.setdlopenflags(_flags)

# Headers for plugins compiled at run time (aot_impl, SourcePlugin).
_include = _os.path.join(_os.path.dirname(__file__), "include")
if "KILN_INCLUDE_DIR" not in _os.environ and _os.path.isfile(_os.path.join(_include, "kiln", "plugin.h")):
    _os.environ["KILN_INCLUDE_DIR"] = _include

from ._dtypes import (DataType, TensorFormat, bfloat16, bool_, dtype_of, float16, float32, float64, int8, int16,  # noqa: E402
                      int32, int64, nptype, uint8, uint16, uint32, uint64)
from ._kiln import KilnError  # noqa: E402
from ._logger import Logger  # noqa: E402
from ._network import (Builder, BuilderFlag, IBuilderConfig, ILayer, INetworkDefinition, ITensor,  # noqa: E402
                       OnnxParser, OptimizationProfile)
from ._registry import get_plugin_registry, load_library, registered_ops  # noqa: E402
from ._runtime import Engine, ExecutionContext, Runtime, TensorIOMode  # noqa: E402
from . import plugin  # noqa: E402
from ._class_plugin import (DimensionOperation, DimsExprs, DynamicPluginTensorDesc, IExprBuilder,  # noqa: E402
                            IPluginCreator, IPluginCreatorV3One, IPluginV2DynamicExt, IPluginV3, IPluginV3OneBuild,
                            IPluginV3OneCore, IPluginV3OneRuntime,
                            PluginField, PluginFieldCollection, PluginFieldType, PluginTensorDesc, TensorRTPhase)

__version__ = _kiln.version()[0]
ICudaEngine = Engine
IExecutionContext = ExecutionContext


def cpu_signature() -> str:
    """This machine's CPU signature, as recorded in engines."""
    return _kiln.cpu_signature()
