#!/usr/bin/env python3
"""Write samples/interpolate/interpolate_case/: an ONNX test case (model.onnx +
test_data_set_0) with one sample::interpolate node (mode "bilinear", scale
1.5, input [1,2,5,7] -> output [1,2,7,10]).  The expected output is computed
here with numpy, independently of kiln: half-pixel source coordinates
(o + 0.5) / scale - 0.5 clamped to [0, n - 1], then linear weights between
the two neighbouring pixels (the plugin's documented semantics).

The op comes from samples/interpolate/interpolate.c compiled at run time:
    kiln build model.onnx --plugin-source samples/interpolate/interpolate.c

Needs `onnx` and `numpy`; the outputs are committed.
"""
import math
import os
import numpy as np
import onnx
from onnx import helper, TensorProto, numpy_helper

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SCALE = 1.5
SHAPE = [1, 2, 5, 7]
N, C, H, W = SHAPE
OH, OW = int(math.floor(H * SCALE)), int(math.floor(W * SCALE))


def coords(n_out, n_in):
    f = (np.arange(n_out, dtype=np.float64) + 0.5) / SCALE - 0.5
    f = np.clip(f, 0, n_in - 1)
    i0 = np.floor(f).astype(np.int64)
    i1 = np.minimum(i0 + 1, n_in - 1)
    return i0, i1, f - i0


x = np.random.default_rng(11).uniform(-1, 1, SHAPE).astype(np.float32)
y0, y1, wy = coords(OH, H)
x0, x1, wx = coords(OW, W)
xd = x.astype(np.float64)
top = xd[:, :, y0, :][:, :, :, x0] * (1 - wx) + xd[:, :, y0, :][:, :, :, x1] * wx
bot = xd[:, :, y1, :][:, :, :, x0] * (1 - wx) + xd[:, :, y1, :][:, :, :, x1] * wx
y = (top * (1 - wy)[:, None] + bot * wy[:, None]).astype(np.float32)
assert list(y.shape) == [N, C, OH, OW]

node = helper.make_node("interpolate", ["x"], ["y"], name="interp_0", domain="sample",
                        plugin_namespace="sample", plugin_version=1, mode="bilinear",
                        scale=SCALE)
graph = helper.make_graph([node], "interpolate",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(y.shape))])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("sample", 1)])
model.ir_version = 8
case = os.path.join(ROOT, "samples", "interpolate", "interpolate_case")
os.makedirs(os.path.join(case, "test_data_set_0"), exist_ok=True)
onnx.save(model, os.path.join(case, "model.onnx"))
for name, arr in (("input_0.pb", x), ("output_0.pb", y)):
    with open(os.path.join(case, "test_data_set_0", name), "wb") as f:
        f.write(numpy_helper.from_array(arr, name.split(".")[0]).SerializeToString())
print("wrote", os.path.relpath(case, ROOT))
