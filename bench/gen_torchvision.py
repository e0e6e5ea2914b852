#!/usr/bin/env python3
"""Write build-bench/models/resnet18.onnx and mobilenet_v2.onnx (not committed) with
random weights (seeded), for bench/compare.py; with torch also
transformer_encoder.onnx (torch.nn.TransformerEncoder, 4 layers, d_model 256) and
the CPU benchmark's larger models (export_cpu_bench): resnet50.onnx and
bert_encoder.onnx (a BERT-base-like torch.nn.TransformerEncoder: 12 layers,
d_model 768, 12 heads, feed-forward 3072, GELU, sequence 128).

If torch and torchvision are importable, the models are torchvision's
resnet18() / mobilenet_v2() (random init, eval mode) exported with
torch.onnx.export (opset 17; `pip install torch torchvision` brings them,
about 3 GB with the CUDA dependencies PyPI's wheel pulls in).  Otherwise
the same architectures are built layer by layer with the onnx helper API, in
the form torch's exporter produces for them in eval mode: Conv (+ bias-free)
-> BatchNormalization -> Relu / Clip(0, 6), MaxPool, residual Add,
GlobalAveragePool, Flatten, Gemm.  Weights are random (He-style scale) and
BatchNorm statistics are random but sane, so activations stay bounded.

    python3 bench/gen_torchvision.py [--out DIR] [--force-helper]

The GPU benchmark's models (bench/gpu_compare.py, scripts/test_gpu.sh) need
torch: torchvision's resnet50() and a BERT-base-like encoder
(torch.nn.TransformerEncoder, 12 layers, d_model 768, 12 heads, feed-forward
3072, GELU, sequence 128), batch dimension dynamic:

    python3 bench/gen_torchvision.py --gpu-set [--test-data] [--out DIR]

writes DIR/resnet50/model.onnx and DIR/bert_encoder/model.onnx (about 100
and 340 MB: generate them where they are used); --test-data adds an ONNX
test folder test_data_set_0 (a seeded random batch-1 input and ONNX Runtime's
CPU FP32 output) beside each, so `kiln test-onnx` can check them.
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def export(m, x, path, input_name, output_name, dynamic_batch=False):
    """torch.onnx.export of module m (eval mode) at example input x, opset 17."""
    import torch
    kw = dict(opset_version=17, input_names=[input_name], output_names=[output_name])
    if dynamic_batch:
        kw["dynamic_axes"] = {input_name: {0: "batch"}, output_name: {0: "batch"}}
    # (not under no_grad: TransformerEncoder would take its fused fast path,
    # aten::_transformer_encoder_layer_fwd, which has no ONNX form)
    try:
        # The TorchScript exporter needs no onnxscript (torch >= 2.9
        # defaults to the torch.export one, which does).
        torch.onnx.export(m, x, path, dynamo=False, **kw)
    except TypeError:  # torch < 2.5: no `dynamo` argument
        torch.onnx.export(m, x, path, **kw)


def export_torch(out):
    import torch
    import torchvision
    torch.manual_seed(0)
    for name, ctor in (("resnet18", torchvision.models.resnet18),
                       ("mobilenet_v2", torchvision.models.mobilenet_v2)):
        m = ctor(weights=None).eval()
        export(m, torch.randn(1, 3, 224, 224), os.path.join(out, name + ".onnx"), "input", "logits")
        print("exported", name, "with torch", torch.__version__)
    # A transformer: torch.nn.TransformerEncoder, 4 layers, d_model 256, 4 heads,
    # feed-forward 1024 (GELU), sequence 128 (MatMul/Gemm, Softmax,
    # LayerNormalization, Erf, Reshape/Transpose, as BERT-style exports have).
    layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024, dropout=0.0,
                                             activation="gelu", batch_first=True)
    m = torch.nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False).eval()
    export(m, torch.randn(1, 128, 256), os.path.join(out, "transformer_encoder.onnx"), "x", "y")
    print("exported transformer_encoder with torch", torch.__version__)
    export_cpu_bench(out)


def export_cpu_bench(out):
    """The CPU comparison's larger models (issue 15), the GPU benchmark's
    modules (GPU_SET below): ResNet-50 (1x3x224x224) and the BERT-base-like
    encoder (1x128x768), skipped when already written (the encoder's file is
    ~340 MB)."""
    import torch
    for name in ("resnet50", "bert_encoder"):  # compare.py has its own MobileNetV2
        ctor, shape, inp, outp = GPU_SET[name]
        path = os.path.join(out, name + ".onnx")
        if not os.path.isfile(path):
            export(ctor(), torch.randn(1, *shape), path, inp, outp)
            print("exported", name, "with torch", torch.__version__)


# The GPU benchmark's models: name -> (module constructor, example input
# shape without the batch, input name, output name).  Weights are seeded, so
# gpu_compare.py's torch module and the exported ONNX file are the same model.
def resnet50_module():
    import torch
    import torchvision
    torch.manual_seed(50)
    return torchvision.models.resnet50(weights=None).eval()


def mobilenetv2_module():
    import torch
    import torchvision
    torch.manual_seed(2)
    return torchvision.models.mobilenet_v2(weights=None).eval()


def bert_encoder_module():
    import torch
    torch.manual_seed(768)
    layer = torch.nn.TransformerEncoderLayer(d_model=768, nhead=12, dim_feedforward=3072, dropout=0.0,
                                             activation="gelu", batch_first=True)
    m = torch.nn.TransformerEncoder(layer, num_layers=12, enable_nested_tensor=False).eval()
    # the 12 layers start as copies of one: give each its own weights
    for p in m.parameters():
        if p.dim() > 1:
            torch.nn.init.xavier_uniform_(p)
    return m


GPU_SET = {
    "resnet50": (resnet50_module, (3, 224, 224), "input", "logits"),
    "bert_encoder": (bert_encoder_module, (128, 768), "x", "y"),
    "mobilenetv2": (mobilenetv2_module, (3, 224, 224), "input", "logits"),
}


def write_test_data(folder, input_name, x):
    """test_data_set_0 of an ONNX test folder: input x (numpy) and ONNX
    Runtime's CPU output for it (the reference kiln test-onnx compares to)."""
    import onnxruntime as ort
    from onnx import numpy_helper
    sess = ort.InferenceSession(os.path.join(folder, "model.onnx"), providers=["CPUExecutionProvider"])
    outs = sess.run(None, {input_name: x})
    d = os.path.join(folder, "test_data_set_0")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(x, input_name).SerializeToString())
    for i, (o, meta) in enumerate(zip(outs, sess.get_outputs())):
        with open(os.path.join(d, "output_%d.pb" % i), "wb") as f:
            f.write(numpy_helper.from_array(o, meta.name).SerializeToString())


def export_gpu_set(out, names=None, test_data=False):
    """Write out/<name>/model.onnx (batch dynamic) for the GPU benchmark's
    models; returns {name: path}."""
    import torch
    paths = {}
    for name in names or GPU_SET:
        ctor, shape, iname, oname = GPU_SET[name]
        folder = os.path.join(out, name)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "model.onnx")
        # always exported: a file left by an older version of the module
        # would not hold the weights the caller's module has
        export(ctor(), torch.randn(1, *shape), path, iname, oname, dynamic_batch=True)
        print("exported", name, "with torch", torch.__version__)
        if test_data:
            x = np.random.default_rng(1).standard_normal((1,) + shape).astype(np.float32)
            write_test_data(folder, iname, x)
        paths[name] = path
    return paths


class G:
    """Tiny graph builder over onnx.helper."""

    def __init__(self, seed):
        from onnx import helper
        self.h = helper
        self.nodes, self.inits = [], []
        self.rng = np.random.default_rng(seed)
        self.n = 0

    def name(self, p):
        self.n += 1
        return "%s_%d" % (p, self.n)

    def init(self, p, arr):
        from onnx import numpy_helper
        nm = self.name(p)
        self.inits.append(numpy_helper.from_array(arr.astype(np.float32), nm))
        return nm

    def node(self, op, ins, **attrs):
        out = self.name(op.lower())
        self.nodes.append(self.h.make_node(op, ins, [out], name=out, **attrs))
        return out

    def conv_bn(self, x, cin, cout, k, s=1, group=1, act="relu"):
        w = self.rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / (cin // group * k * k))
        y = self.node("Conv", [x, self.init("w", w)], kernel_shape=[k, k], strides=[s, s],
                      pads=[k // 2] * 4, group=group)
        scale = self.init("bn_s", 1 + 0.1 * self.rng.standard_normal(cout))
        bias = self.init("bn_b", 0.1 * self.rng.standard_normal(cout))
        mean = self.init("bn_m", 0.1 * self.rng.standard_normal(cout))
        var = self.init("bn_v", 1 + 0.1 * self.rng.random(cout))
        y = self.node("BatchNormalization", [y, scale, bias, mean, var], epsilon=1e-5)
        if act == "relu":
            y = self.node("Relu", [y])
        elif act == "relu6":
            y = self.node("Clip", [y, self.init("c0", np.array(0.0)), self.init("c6", np.array(6.0))])
        return y

    def head(self, x, c, classes=1000):
        y = self.node("GlobalAveragePool", [x])
        y = self.node("Flatten", [y], axis=1)
        w = self.rng.standard_normal((classes, c)) * np.sqrt(1.0 / c)
        return self.node("Gemm", [y, self.init("fc_w", w), self.init("fc_b", np.zeros(classes))],
                         alpha=1.0, beta=1.0, transB=1)

    def model(self, out, name):
        from onnx import TensorProto, helper
        import onnx
        g = helper.make_graph(self.nodes, name,
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 1000])],
                              self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="kiln bench/gen_torchvision.py (onnx helper)")
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


def resnet18():
    g = G(18)
    x = g.conv_bn("input", 3, 64, 7, 2)
    x = g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for b in range(2):
            s = stride if b == 0 else 1
            y = g.conv_bn(x, cin, cout, 3, s)
            y = g.conv_bn(y, cout, cout, 3, 1, act=None)
            sc = x if (s == 1 and cin == cout) else g.conv_bn(x, cin, cout, 1, s, act=None)
            x = g.node("Relu", [g.node("Add", [y, sc])])
            cin = cout
    return g.model(g.head(x, 512), "resnet18")


def mobilenet_v2():
    g = G(2)
    x = g.conv_bn("input", 3, 32, 3, 2, act="relu6")
    cin = 32
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            stride = s if i == 0 else 1
            hid = cin * t
            y = x if t == 1 else g.conv_bn(x, cin, hid, 1, 1, act="relu6")
            y = g.conv_bn(y, hid, hid, 3, stride, group=hid, act="relu6")
            y = g.conv_bn(y, hid, c, 1, 1, act=None)
            x = g.node("Add", [x, y]) if (stride == 1 and cin == c) else y
            cin = c
    x = g.conv_bn(x, cin, 1280, 1, 1, act="relu6")
    return g.model(g.head(x, 1280), "mobilenet_v2")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "..", "build-bench", "models"))
    ap.add_argument("--force-helper", action="store_true")
    ap.add_argument("--gpu-set", action="store_true", help="ResNet-50 and the BERT-base encoder (needs torch)")
    ap.add_argument("--test-data", action="store_true", help="with --gpu-set: ONNX Runtime reference outputs")
    ap.add_argument("--only", default=None, help="with --gpu-set: these models (comma-separated: %s)" %
                    ",".join(GPU_SET))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.gpu_set:
        export_gpu_set(a.out, a.only.split(",") if a.only else None, test_data=a.test_data)
        return
    if not a.force_helper:
        try:
            export_torch(a.out)
            return
        except ImportError as e:
            print("torch/torchvision not usable (%s): building the same architectures with the onnx "
                  "helper API (random weights)" % e, file=sys.stderr)
    import onnx
    for name, fn in (("resnet18", resnet18), ("mobilenet_v2", mobilenet_v2)):
        onnx.save(fn(), os.path.join(a.out, name + ".onnx"))
        print("wrote", os.path.join(a.out, name + ".onnx"))


if __name__ == "__main__":
    main()
