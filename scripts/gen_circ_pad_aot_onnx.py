#!/usr/bin/env python3
"""Write tests/fixtures/circ_pad_aot1.onnx and circ_pad_aot0.onnx: the model of
scripts/gen_circ_pad_onnx.py (one sample::circ_pad node, pads 1,2,2,1, input
[1,3,8,8]) with the node attribute `aot` = 1 (bake the plugin's AOT kernel
into the engine: it runs with no plugin library) or 0 (the JIT impl: the
engine needs libkiln_samples_ops.so at run time).  Same input/output as
tests/fixtures/circ_pad_case, so its test_data_set_0 (numpy np.pad wrap)
checks both engines.

Needs `onnx`; the outputs are committed.
"""
import os
import onnx
from onnx import helper, TensorProto

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PADS = [1, 2, 2, 1]  # left, right, top, bottom
SHAPE = [1, 3, 8, 8]
OUT_SHAPE = [1, 3, 8 + PADS[2] + PADS[3], 8 + PADS[0] + PADS[1]]

for aot in (0, 1):
    node = helper.make_node("circ_pad", ["x"], ["y"], name="circ_pad_0", domain="sample",
                            plugin_namespace="sample", plugin_version=1, pads=PADS, aot=aot)
    graph = helper.make_graph([node], "circ_pad_aot%d" % aot,
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, OUT_SHAPE)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("sample", 1)])
    model.ir_version = 8
    path = os.path.join(ROOT, "tests", "fixtures", "circ_pad_aot%d.onnx" % aot)
    onnx.save(model, path)
    print("wrote", os.path.relpath(path, ROOT))
