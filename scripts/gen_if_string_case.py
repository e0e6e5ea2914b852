#!/usr/bin/env python3
"""Write tests/fixtures/if_string_case: an If on a run-time condition whose
branches return string constants of different lengths (["yes", "sir"] /
["no", "madam!"]), followed by StringNormalizer (UPPER, stopword "sir").
Two data sets (cond true, cond false); the expected outputs are written
here by hand from the ONNX semantics, not by kiln.

Needs `onnx` and numpy; the outputs are committed.
"""
import os
import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "if_string_case")


def const_branch(name, words):
    t = numpy_helper.from_array(np.array(words, dtype=object))
    return helper.make_graph([helper.make_node("Constant", [], [name], value=t)], name + "_branch", [],
                             [helper.make_tensor_value_info(name, TensorProto.STRING, [len(words)])])


g = helper.make_graph(
    [helper.make_node("If", ["c"], ["w"], then_branch=const_branch("a", ["yes", "sir"]),
                      else_branch=const_branch("b", ["no", "madam!"])),
     helper.make_node("StringNormalizer", ["w"], ["y"], case_change_action="UPPER", stopwords=["sir"],
                      is_case_sensitive=0)],
    "if_string", [helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
    [helper.make_tensor_value_info("y", TensorProto.STRING, [None])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
onnx.checker.check_model(m)
os.makedirs(OUT, exist_ok=True)
onnx.save(m, os.path.join(OUT, "model.onnx"))
for k, (cond, want) in enumerate([(True, ["YES"]), (False, ["NO", "MADAM!"])]):
    d = os.path.join(OUT, "test_data_set_%d" % k)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(np.array(cond)).SerializeToString())
    with open(os.path.join(d, "output_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(np.array(want, dtype=object)).SerializeToString())
print("wrote", OUT)
