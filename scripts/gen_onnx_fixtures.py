#!/usr/bin/env python3
"""Write the small ONNX fixtures used by tests/test_onnx.c into tests/fixtures/.

Needs the `onnx` package (pip install onnx).  The fixtures are committed, so
building and testing kiln never needs Python; rerun this only to change them.
Expected values are NOT stored here: tests/test_onnx.c computes them with
naive reference code.
"""
import os
import numpy as np
import onnx
from onnx import helper, TensorProto, numpy_helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")
os.makedirs(OUT, exist_ok=True)
F = TensorProto.FLOAT


def save(model, name, check=True):
    if check:
        onnx.checker.check_model(model)
    onnx.save(model, os.path.join(OUT, name))


def model(graph, opsets=(("", 17),)):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    m.ir_version = 8
    return m


# add_relu: y = Relu(x + W) * c, W typed float_data initializer, c a Constant node
W = helper.make_tensor("W", F, [3], [0.5, -1.0, 2.0])  # float_data, not raw
g = helper.make_graph(
    [helper.make_node("Add", ["x", "W"], ["t"], name="add0"),
     helper.make_node("Relu", ["t"], ["r"], name="relu0"),
     helper.make_node("Constant", [], ["c"], value_float=3.0),
     helper.make_node("Mul", ["r", "c"], ["y"], name="mul0")],
    "add_relu", [helper.make_tensor_value_info("x", F, [2, 3])],
    [helper.make_tensor_value_info("y", F, [2, 3])], [W])
save(model(g), "add_relu.onnx")

# dynamic: dim_param "N" and an unnamed dim; y = x + x
g = helper.make_graph(
    [helper.make_node("Add", ["x", "x"], ["y"], name="dbl")],
    "dynamic", [helper.make_tensor_value_info("x", F, ["N", None])],
    [helper.make_tensor_value_info("y", F, ["N", None])])
save(model(g), "dynamic.onnx")

# unsupported: two unknown nodes in two domains (one inside an If branch)
then_g = helper.make_graph([helper.make_node("Bar", ["x"], ["b"], name="bar_in_then", domain="acme")],
                           "then", [], [helper.make_tensor_value_info("b", F, [2])])
else_g = helper.make_graph([helper.make_node("Relu", ["x"], ["e"], name="relu_else")],
                           "else", [], [helper.make_tensor_value_info("e", F, [2])])
g = helper.make_graph(
    [helper.make_node("FooOp", ["x"], ["f"], name="foo1"),
     helper.make_node("Constant", [], ["cond"], value=helper.make_tensor("cv", TensorProto.BOOL, [], [1])),
     helper.make_node("If", ["cond"], ["y"], name="if0", then_branch=then_g, else_branch=else_g)],
    "unsupported", [helper.make_tensor_value_info("x", F, [2])],
    [helper.make_tensor_value_info("f", F, [2]), helper.make_tensor_value_info("y", F, [2])])
save(model(g, (("", 17), ("acme", 1))), "unsupported.onnx", check=False)

# bad_attr: Relu with an attribute its schema lacks
g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu_bogus", bogus=7)],
                      "bad_attr", [helper.make_tensor_value_info("x", F, [4])],
                      [helper.make_tensor_value_info("y", F, [4])])
save(model(g), "bad_attr.onnx", check=False)

# override: op_type Relu with plugin_namespace "test" -> test::Relu v1 (x*2+1)
g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu_override",
                                        plugin_namespace="test", plugin_version=1)],
                      "override", [helper.make_tensor_value_info("x", F, [5])],
                      [helper.make_tensor_value_info("y", F, [5])])
save(model(g), "override.onnx", check=False)

# domain_ns: op Twice in domain test.dom, opset 3 -> test.dom::Twice v2
g = helper.make_graph([helper.make_node("Twice", ["x"], ["y"], name="twice0", domain="test.dom")],
                      "domain_ns", [helper.make_tensor_value_info("x", F, [5])],
                      [helper.make_tensor_value_info("y", F, [5])])
save(model(g, (("", 17), ("test.dom", 3))), "domain_ns.onnx", check=False)


def if_model(cond_node, cond_input, name):
    # then: x + W (W an outer initializer, x an outer input); else: x - W
    then_g = helper.make_graph([helper.make_node("Add", ["x", "W"], ["ta"], name="then_add")],
                               "then", [], [helper.make_tensor_value_info("ta", F, [2, 3])])
    else_g = helper.make_graph([helper.make_node("Sub", ["x", "W"], ["eb"], name="else_sub")],
                               "else", [], [helper.make_tensor_value_info("eb", F, [2, 3])])
    nodes = ([cond_node] if cond_node else []) + [
        helper.make_node("Relu", ["x"], ["xr"], name="relu_outer"),
        helper.make_node("If", ["cond"], ["y"], name="if0", then_branch=then_g, else_branch=else_g)]
    inputs = [helper.make_tensor_value_info("x", F, [2, 3])]
    if cond_input:
        inputs.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    g = helper.make_graph(nodes, name, inputs, [helper.make_tensor_value_info("y", F, [2, 3])],
                          [helper.make_tensor("W", F, [3], [1.0, 2.0, 3.0])])
    return model(g)


save(if_model(helper.make_node("Constant", [], ["cond"],
                               value=helper.make_tensor("cv", TensorProto.BOOL, [], [1])), False, "if_true"),
     "if_true.onnx")
save(if_model(helper.make_node("Constant", [], ["cond"],
                               value=helper.make_tensor("cv", TensorProto.BOOL, [1], [0])), False, "if_false"),
     "if_false.onnx")
save(if_model(None, True, "if_runtime"), "if_runtime.onnx")

# If using an outer value computed by a layer (not a constant): extra input.
then_g = helper.make_graph([helper.make_node("Add", ["xr", "xr"], ["ta"], name="then_add")],
                           "then", [], [helper.make_tensor_value_info("ta", F, [2, 3])])
else_g = helper.make_graph([helper.make_node("Relu", ["xr"], ["eb"], name="else_relu")],
                           "else", [], [helper.make_tensor_value_info("eb", F, [2, 3])])
g = helper.make_graph(
    [helper.make_node("Relu", ["x"], ["xr"], name="relu_outer"),
     helper.make_node("Constant", [], ["cond"], value=helper.make_tensor("cv", TensorProto.BOOL, [], [1])),
     helper.make_node("If", ["cond"], ["y"], name="if0", then_branch=then_g, else_branch=else_g)],
    "if_outer_layer", [helper.make_tensor_value_info("x", F, [2, 3])],
    [helper.make_tensor_value_info("y", F, [2, 3])])
save(model(g), "if_outer_layer.onnx")

# input that is also an initializer (a constant with a default): y = x * b
g = helper.make_graph([helper.make_node("Mul", ["x", "b"], ["y"], name="mul0")],
                      "input_init", [helper.make_tensor_value_info("x", F, [3]),
                                     helper.make_tensor_value_info("b", F, [3])],
                      [helper.make_tensor_value_info("y", F, [3])],
                      [numpy_helper.from_array(np.array([2.0, 3.0, 4.0], np.float32), "b")])
save(model(g), "input_init.onnx")


# external data: W's 3 floats live in ext.bin at offset 8
def ext_model(location, offset=8, length=12):
    t = TensorProto()
    t.name = "W"
    t.data_type = F
    t.dims.append(3)
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
        e = t.external_data.add()
        e.key, e.value = k, v
    g = helper.make_graph([helper.make_node("Add", ["x", "W"], ["y"], name="add_ext")],
                          "ext", [helper.make_tensor_value_info("x", F, [3])],
                          [helper.make_tensor_value_info("y", F, [3])], [t])
    return model(g)


with open(os.path.join(OUT, "ext.bin"), "wb") as f:
    f.write(b"\xde\xad\xbe\xef\x00\x00\x00\x00" + np.array([10.0, 20.0, 30.0], np.float32).tobytes())
save(ext_model("ext.bin"), "ext_ok.onnx", check=False)
save(ext_model("/etc/hostname"), "ext_abs.onnx", check=False)
save(ext_model("../fixtures/ext.bin"), "ext_escape.onnx", check=False)
save(ext_model("ext.bin", offset=16), "ext_short.onnx", check=False)


# TensorProto files (read_tensor): typed fields of every kind + malformed ones
def tsave(t, name):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(t.SerializeToString())


t = TensorProto(); t.name = "f16"; t.data_type = TensorProto.FLOAT16; t.dims.extend([2, 2])
t.int32_data.extend(np.array([1.5, -2.0, 0.25, 65504], np.float16).view(np.uint16).astype(np.int32).tolist())
tsave(t, "t_f16.pb")  # int32_data holds the f16 bit patterns
tsave(helper.make_tensor("b", TensorProto.BOOL, [3], [1, 0, 1]), "t_bool.pb")
tsave(helper.make_tensor("i8", TensorProto.INT8, [4], [-128, -1, 0, 127]), "t_i8.pb")
tsave(helper.make_tensor("u16", TensorProto.UINT16, [2], [0, 65535]), "t_u16.pb")
tsave(helper.make_tensor("i64", TensorProto.INT64, [2], [-(2 ** 40), 7]), "t_i64.pb")
tsave(helper.make_tensor("f64", TensorProto.DOUBLE, [2], [0.1, -1e300]), "t_f64.pb")
tsave(helper.make_tensor("u64", TensorProto.UINT64, [1], [2 ** 63 + 5]), "t_u64.pb")
tsave(helper.make_tensor("u32", TensorProto.UINT32, [2], [7, 2 ** 32 - 1]), "t_u32.pb")
tsave(numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5, "raw"), "t_raw_f32.pb")
tsave(numpy_helper.from_array(np.zeros((0, 3), np.float32), "empty"), "t_empty.pb")
bad = TensorProto(); bad.name = "bad"; bad.data_type = F; bad.dims.extend([2, 3])
bad.raw_data = np.zeros(5, np.float32).tobytes()
tsave(bad, "t_bad_rawlen.pb")
bad = TensorProto(); bad.name = "huge"; bad.data_type = F; bad.dims.extend([2 ** 40, 2 ** 40]); bad.raw_data = b""
tsave(bad, "t_bad_overflow.pb")
bad = TensorProto(); bad.name = "neg"; bad.data_type = F; bad.dims.extend([-3]); bad.raw_data = b""
tsave(bad, "t_bad_negdim.pb")
bad = TensorProto(); bad.name = "fd"; bad.data_type = F; bad.dims.extend([4]); bad.float_data.extend([1.0, 2.0])
tsave(bad, "t_bad_count.pb")
bad = TensorProto(); bad.name = "r9"; bad.data_type = F; bad.dims.extend([1] * 9); bad.raw_data = b"\0\0\0\0"
tsave(bad, "t_bad_rank.pb")
s = helper.make_tensor("s", TensorProto.STRING, [1], [b"hi"])
tsave(s, "t_string.pb")
print("fixtures written to", os.path.normpath(OUT))

# If whose condition is computed from a shape (Silero VAD's pattern):
# cond = Equal(Gather(Shape(x), 0), 2); then: x + x, else: x
then_g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["ta"], name="then_add")],
                           "then", [], [helper.make_tensor_value_info("ta", F, [2, 3])])
else_g = helper.make_graph([helper.make_node("Relu", ["x"], ["eb"], name="else_relu")],
                           "else", [], [helper.make_tensor_value_info("eb", F, [2, 3])])
g = helper.make_graph(
    [helper.make_node("Shape", ["x"], ["s"], name="shape0"),
     helper.make_node("Constant", [], ["i0"], value=helper.make_tensor("i0v", TensorProto.INT64, [], [0])),
     helper.make_node("Gather", ["s", "i0"], ["d0"], name="gather0", axis=0),
     helper.make_node("Constant", [], ["two"], value=helper.make_tensor("twov", TensorProto.INT64, [], [2])),
     helper.make_node("Equal", ["d0", "two"], ["cond"], name="eq0"),
     helper.make_node("If", ["cond"], ["y"], name="if0", then_branch=then_g, else_branch=else_g)],
    "if_shape_cond", [helper.make_tensor_value_info("x", F, [2, 3])],
    [helper.make_tensor_value_info("y", F, [2, 3])])
save(model(g), "if_shape_cond.onnx")

# sparse: y = (x + S) + C; S a sparse initializer with linear indices,
# C a Constant sparse_value with [NNZ, rank] coordinates.
S = helper.make_sparse_tensor(helper.make_tensor("S", F, [2], [1.5, -4.0]),
                              helper.make_tensor("S_idx", TensorProto.INT64, [2], [1, 5]), [2, 3])
Cs = helper.make_sparse_tensor(helper.make_tensor("Cv", F, [1], [10.0]),
                               helper.make_tensor("C_idx", TensorProto.INT64, [1, 2], [1, 0]), [2, 3])
g = helper.make_graph(
    [helper.make_node("Add", ["x", "S"], ["t"], name="add_s"),
     helper.make_node("Constant", [], ["C"], sparse_value=Cs),
     helper.make_node("Add", ["t", "C"], ["y"], name="add_c")],
    "sparse", [helper.make_tensor_value_info("x", F, [2, 3])],
    [helper.make_tensor_value_info("y", F, [2, 3])], sparse_initializer=[S])
save(model(g), "sparse.onnx")

# attrs: every attribute kind converted to a schema type (test::AllAttrs,
# registered by tests/test_onnx.c), an absent optional input in the middle,
# fewer outputs than the op declares, and the aot attribute.
node = helper.make_node(
    "AllAttrs", ["x", "", "x"], ["y"], name="all_attrs", domain="test",
    i=-7, f=0.25, s="nearest", b=1, ints=[3, -1, 4], floats=[0.5, 1.5],
    t=helper.make_tensor("tv", TensorProto.INT32, [2, 2], [1, 2, 3, 4]),
    strs=["Sigmoid", "Tanh"], aot=1)
g = helper.make_graph([node], "attrs", [helper.make_tensor_value_info("x", F, [4])],
                      [helper.make_tensor_value_info("y", F, [4])])
save(model(g, (("", 17), ("test", 1))), "attrs.onnx", check=False)

# If with a runtime condition whose branches produce different shapes:
# then x + W ([2, 3]), else a constant [3] -> kiln cannot run both.
then_g = helper.make_graph([helper.make_node("Add", ["x", "W"], ["ta"], name="then_add")],
                           "then", [], [helper.make_tensor_value_info("ta", F, [2, 3])])
else_g = helper.make_graph([helper.make_node("Constant", [], ["eb"],
                                             value=helper.make_tensor("ev", F, [3], [7.0, 8.0, 9.0]))],
                           "else", [], [helper.make_tensor_value_info("eb", F, [3])])
g = helper.make_graph(
    [helper.make_node("If", ["cond"], ["y"], name="if_mismatch", then_branch=then_g, else_branch=else_g)],
    "if_runtime_mismatch", [helper.make_tensor_value_info("x", F, [2, 3]),
                            helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
    [helper.make_tensor_value_info("y", F, None)],
    [helper.make_tensor("W", F, [3], [1.0, 2.0, 3.0])])
save(model(g), "if_runtime_mismatch.onnx", check=False)

# Model-local function: custom.fn::LeakyPlus(X; alpha) = LeakyRelu(X, alpha) + X,
# called with alpha = 0.3 and with the default (0.1).
fn = helper.make_function(
    "custom.fn", "LeakyPlus", ["X"], ["Y"],
    [helper.make_node("LeakyRelu", ["X"], ["T"], alpha=0.0),
     helper.make_node("Add", ["T", "X"], ["Y"])],
    [helper.make_opsetid("", 17)], attributes=[])
# alpha refers to the function attribute
ref = helper.make_attribute_ref("alpha", TensorProto.FLOAT if False else onnx.AttributeProto.FLOAT)
fn.node[0].ClearField("attribute")
fn.node[0].attribute.append(ref)
fn.attribute_proto.append(helper.make_attribute("alpha", 0.1))
g = helper.make_graph(
    [helper.make_node("LeakyPlus", ["x"], ["y1"], name="call_a", domain="custom.fn", alpha=0.3),
     helper.make_node("LeakyPlus", ["x"], ["y2"], name="call_b", domain="custom.fn")],
    "functions", [helper.make_tensor_value_info("x", F, [5])],
    [helper.make_tensor_value_info("y1", F, [5]), helper.make_tensor_value_info("y2", F, [5])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom.fn", 1)],
                      functions=[fn])
m.ir_version = 8
save(m, "functions.onnx")
