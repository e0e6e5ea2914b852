#!/usr/bin/env python3
"""Write samples/circ_pad.onnx: one node op_type "circ_pad", domain "sample",
with plugin_namespace "sample" (so kiln maps it to the sample::circ_pad plugin
from libkiln_samples_ops.so) and attribute pads (torch CircularPad order:
left, right, top, bottom).

The node sets aot = 0 (the plugin's JIT implementation; sample::circ_pad also
has an AOT kernel and kiln asks for a choice).

Also writes tests/fixtures/circ_pad_case/ and circ_pad_aot_case/ (aot = 1):
ONNX test cases whose expected output is numpy's np.pad(mode="wrap"), run by
`kiln test-onnx --plugins libkiln_samples_ops.so` in ctest.

Needs `onnx` and `numpy`; the outputs are committed.
"""
import os
import numpy as np
import onnx
from onnx import helper, TensorProto, numpy_helper

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PADS = [1, 2, 2, 1]  # left, right, top, bottom
SHAPE = [1, 3, 8, 8]
OUT_SHAPE = [1, 3, 8 + PADS[2] + PADS[3], 8 + PADS[0] + PADS[1]]

def circ_pad_model(aot):
    # aot = 0 picks the plugin's JIT implementation, 1 its AOT kernel
    # (sample::circ_pad has both; unforced, kiln times both).
    node = helper.make_node("circ_pad", ["x"], ["y"], name="circ_pad_0", domain="sample",
                            plugin_namespace="sample", plugin_version=1, pads=PADS, aot=aot)
    graph = helper.make_graph([node], "circ_pad",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, OUT_SHAPE)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("sample", 1)])
    m.ir_version = 8
    return m


model = circ_pad_model(0)
onnx.save(model, os.path.join(ROOT, "samples", "circ_pad.onnx"))

x = np.random.default_rng(7).uniform(-1, 1, SHAPE).astype(np.float32)
y = np.pad(x, [(0, 0), (0, 0), (PADS[2], PADS[3]), (PADS[0], PADS[1])], mode="wrap")
assert list(y.shape) == OUT_SHAPE
for dirname, aot in (("circ_pad_case", 0), ("circ_pad_aot_case", 1)):
    case = os.path.join(ROOT, "tests", "fixtures", dirname)
    os.makedirs(os.path.join(case, "test_data_set_0"), exist_ok=True)
    onnx.save(circ_pad_model(aot), os.path.join(case, "model.onnx"))
    for name, arr in (("input_0.pb", x), ("output_0.pb", y)):
        with open(os.path.join(case, "test_data_set_0", name), "wb") as f:
            f.write(numpy_helper.from_array(arr, name.split(".")[0]).SerializeToString())
print("wrote samples/circ_pad.onnx and tests/fixtures/circ_pad_case, circ_pad_aot_case")
