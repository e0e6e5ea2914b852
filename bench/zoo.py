#!/usr/bin/env python3
"""Check kiln on a zoo of torchvision models and time it against ONNX Runtime.

    python3 bench/zoo.py [--kiln build/kiln] [--models a,b] [--threads 1] [--iterations 10]

For each model: torchvision's architecture with random weights (seeded, eval
mode), exported with torch's TorchScript exporter (opset 17) into
build-bench/zoo/<model>/model.onnx, with torch's own output on a random input
as test_data_set_0 (so the reference is independent of both engines).  Then:
`kiln test-onnx` against torch's output (rtol 1e-3, atol 1e-4), and the
median latency of kiln (`kiln bench`) and ONNX Runtime on the same model and
thread count.  Prints one table row per model.  Installs torch, torchvision,
onnx and onnxruntime with pip when missing (torch is large: ~3 GB).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
WORK = os.path.join(ROOT, "build-bench", "zoo")
MODELS = ["squeezenet1_1", "shufflenet_v2_x1_0", "mnasnet1_0", "efficientnet_b0", "regnet_y_400mf",
          "googlenet", "densenet121", "convnext_tiny", "vit_b_16", "swin_t"]


def ensure(pkgs):
    missing = []
    for mod, pip_name in pkgs:
        try:
            __import__(mod)
        except ImportError:
            missing.append(pip_name)
    if missing:
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q"] + missing)


def export(name, d):
    import numpy as np
    import torch
    import torchvision
    from onnx import numpy_helper
    torch.manual_seed(0)
    m = getattr(torchvision.models, name)(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, x, os.path.join(d, "model.onnx"), dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"])
    with torch.no_grad():
        y = m(x)
    if isinstance(y, (tuple, list)):
        y = y[0]
    for fn, arr in (("input_0.pb", x.numpy()), ("output_0.pb", np.asarray(y.numpy()))):
        with open(os.path.join(d, "test_data_set_0", fn), "wb") as f:
            f.write(numpy_helper.from_array(arr).SerializeToString())


def ort_median(model, threads, iters):
    import numpy as np
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    x = {"x": np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)}
    s.run(None, x)
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter()
        s.run(None, x)
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts)) * 1e3


def kiln_median(kiln, model, threads, iters):
    eng = model[:-5] + ".kiln"
    subprocess.check_call([kiln, "build", model, "--threads", str(threads), "-o", eng], stdout=subprocess.DEVNULL)
    out = subprocess.check_output([kiln, "bench", eng, "--threads", str(threads), "--iterations", str(iters)],
                                  text=True)
    m = re.search(r"median ([0-9.]+)", out)
    return float(m.group(1)) if m else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=10)
    a = ap.parse_args()
    kiln = a.kiln if os.path.isfile(a.kiln) else shutil.which("kiln")
    if not kiln:
        sys.exit("kiln CLI not found: build it or pass --kiln")
    ensure([("numpy", "numpy"), ("onnx", "onnx"), ("onnxruntime", "onnxruntime"), ("torch", "torch"),
            ("torchvision", "torchvision")])
    rows = []
    for name in a.models.split(","):
        d = os.path.join(WORK, name)
        model = os.path.join(d, "model.onnx")
        if not os.path.isfile(model):
            export(name, d)
        r = subprocess.run([kiln, "test-onnx", "--rtol", "1e-3", "--atol", "1e-4", d], capture_output=True, text=True)
        verdict = (r.stdout.splitlines() or ["?"])[0].split(" ")[0]
        k = kiln_median(kiln, model, a.threads, a.iterations) if verdict == "PASS" else float("nan")
        o = ort_median(model, a.threads, a.iterations)
        rows.append((name, verdict, o, k))
        print("%s: %s, ORT %.2f ms, kiln %.2f ms" % (name, verdict, o, k), flush=True)
    print("\n| model | vs torch | threads | ORT median ms | kiln median ms | kiln/ORT |")
    print("|---|---|---|---|---|---|")
    for name, v, o, k in rows:
        print("| %s | %s | %d | %.2f | %.2f | %.2f |" % (name, v, a.threads, o, k, k / o))


if __name__ == "__main__":
    main()
