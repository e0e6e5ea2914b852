#!/usr/bin/env python3
"""Compare kiln with ONNX Runtime on real models, same thread counts.

For every model -- each ../shared/models/<name> test folder and the
ResNet-18 / MobileNetV2 made by bench/gen_torchvision.py -- and for 1 and 2
threads: ORT (intra-op threads = N, sequential) and kiln (the `kiln` CLI:
`kiln build` with --threads N, then `kiln bench` and `kiln run` with
--threads N) run the same inputs (the model's test_data_set_0 inputs, else
seeded random ones).  Prints one table:

  model | threads | ORT median ms | kiln median ms | kiln/ORT | max abs diff | relative diff

The diff is between kiln's and ORT's outputs.  A model kiln cannot build
(an op still missing, a build-time value it needs) shows the reason instead.

    python3 bench/compare.py [--kiln build/kiln] [--threads 1,2] [--iterations 50]
                             [--models name,...] [--no-torch]

Installs numpy, onnx, onnxruntime, torch and torchvision with pip when they
are missing (--no-torch: no torch; the two CNNs are then built with the onnx
helper API in the same form).
Work files go to build-bench/ (not committed).  Keep runs short on shared
machines.
"""
import argparse
import glob
import importlib
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
WORK = os.path.join(ROOT, "build-bench")


def ensure(pkgs):
    missing = []
    for mod, pip_name in pkgs:
        try:
            importlib.import_module(mod)
        except ImportError:
            missing.append(pip_name)
    if missing:
        print("installing", " ".join(missing), file=sys.stderr)
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q"] + missing)


np = onnx = ort = numpy_helper = None
NP_OF = {}


def load_deps(no_torch):
    """Install (if missing) and import what a run needs: after argument
    parsing, so --help and usage errors install nothing."""
    global np, onnx, ort, numpy_helper, NP_OF
    ensure([("numpy", "numpy"), ("onnx", "onnx"), ("onnxruntime", "onnxruntime")])
    # ResNet-18 / MobileNetV2 come from torchvision (PyPI's torch brings ~3 GB of
    # CUDA libraries; --no-torch uses the helper-built equivalents instead).
    if not no_torch:
        ensure([("torch", "torch"), ("torchvision", "torchvision")])
    np = importlib.import_module("numpy")
    onnx = importlib.import_module("onnx")
    ort = importlib.import_module("onnxruntime")
    numpy_helper = importlib.import_module("onnx.numpy_helper")
    NP_OF = {1: np.float32, 2: np.uint8, 3: np.int8, 5: np.int16, 6: np.int32, 7: np.int64,
             9: np.bool_, 10: np.float16, 11: np.float64}


def find_kiln(arg):
    if arg:
        return arg
    rel = os.path.join(ROOT, "build", "kiln")  # scripts/test.sh's Release build
    if os.access(rel, os.X_OK):
        return rel
    for c in sorted(glob.glob(os.path.join(ROOT, "build*", "kiln")), key=os.path.getmtime, reverse=True):
        if os.access(c, os.X_OK):
            return c
    return shutil.which("kiln") or sys.exit("kiln CLI not found: build it or pass --kiln")


def models(selected):
    out = []
    for d in sorted(glob.glob(os.path.join(ROOT, "..", "shared", "models", "*"))):
        if os.path.isfile(os.path.join(d, "model.onnx")):
            out.append((os.path.basename(d), os.path.join(d, "model.onnx"), os.path.join(d, "test_data_set_0")))
    mdir = os.path.join(WORK, "models")
    want = [os.path.join(mdir, n + ".onnx") for n in ("resnet18", "mobilenet_v2")]
    extra = [os.path.join(mdir, "transformer_encoder.onnx")]  # only with torch
    if not all(os.path.isfile(p) for p in want):
        subprocess.check_call([sys.executable, os.path.join(HERE, "gen_torchvision.py"), "--out", mdir])
    for p in want + [p for p in extra if os.path.isfile(p)]:
        out.append((os.path.basename(p)[:-5], p, None))
    if selected:
        out = [m for m in out if m[0] in selected]
    return out


def inputs_for(model_path, data_dir):
    m = onnx.load(model_path, load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    real = [i for i in m.graph.input if i.name not in inits]
    feeds = {}
    rng = np.random.default_rng(1)
    for k, vi in enumerate(real):
        pb = os.path.join(data_dir, "input_%d.pb" % k) if data_dir else None
        if pb and os.path.isfile(pb):
            t = onnx.TensorProto()
            with open(pb, "rb") as f:
                t.ParseFromString(f.read())
            feeds[vi.name] = numpy_helper.to_array(t)
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.dim_value > 0 else 1 for d in tt.shape.dim]
        dt = NP_OF.get(tt.elem_type, np.float32)
        if np.issubdtype(dt, np.floating):
            feeds[vi.name] = rng.uniform(-1, 1, shape).astype(dt)
        else:
            feeds[vi.name] = rng.integers(0, 4, shape).astype(dt)
    return feeds


def ort_time(model_path, feeds, threads, iters, warmup):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    s = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
    outs = s.run(None, feeds)
    for _ in range(warmup):
        s.run(None, feeds)
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter()
        s.run(None, feeds)
        ts.append((time.perf_counter() - t0) * 1e3)
    names = [o.name for o in s.get_outputs()]
    return float(np.median(ts)), dict(zip(names, outs))


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p.returncode, p.stdout, p.stderr


def kiln_time(kiln, name, model_path, feeds, threads, iters, warmup):
    wd = os.path.join(WORK, "%s_t%d" % (name, threads))
    os.makedirs(wd, exist_ok=True)
    eng = os.path.join(wd, "model.kiln")
    # Dynamic dims take the inputs' shapes (min = opt = max).
    # Small integer inputs (a sample rate, axes) become build-time values, as
    # `kiln test-onnx` does when a model needs them; the others are inputs.
    values = {k: v for k, v in feeds.items() if v.dtype.kind in "iub" and v.size <= 64}
    feeds = {k: v for k, v in feeds.items() if k not in values}
    shapes = ",".join("%s:%s" % (k, "x".join(str(d) for d in v.shape)) for k, v in feeds.items())
    cmd = [kiln, "build", model_path, "-o", eng, "--threads", str(threads), "--shapes", shapes]
    for k, v in values.items():
        cmd += ["--values", "%s=%s" % (k, ",".join(str(int(x)) for x in v.ravel()))]
    rc, out, err = run(cmd)
    if rc:
        return None, None, "build failed: " + (err.strip().splitlines() or ["?"])[-1][:160]
    args = []
    for k, v in feeds.items():
        p = os.path.join(wd, "in_%s.npy" % re.sub(r"[^A-Za-z0-9_.-]", "_", k))
        np.save(p, v)
        args += ["--input", "%s=%s" % (k, p)]
    odir = os.path.join(wd, "out")
    os.makedirs(odir, exist_ok=True)
    rc, out, err = run([kiln, "run", eng, "--threads", str(threads), "--output-dir", odir] + args)
    if rc:
        return None, None, "run failed: " + (err.strip().splitlines() or ["?"])[-1][:160]
    outs = {}
    for f in glob.glob(os.path.join(odir, "*.npy")):
        outs[os.path.basename(f)[:-4]] = np.load(f)
    rc, out, err = run([kiln, "bench", eng, "--threads", str(threads), "--iterations", str(iters),
                        "--warmup", str(warmup)] + [])
    m = re.search(r"latency (ms|us|s)\b.*?median ([0-9.eE+-]+)", out)
    if rc or not m:
        return None, outs, "bench failed: " + (err.strip().splitlines() or ["?"])[-1][:160]
    scale = {"s": 1e3, "ms": 1.0, "us": 1e-3}[m.group(1)]
    return float(m.group(2)) * scale, outs, None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--models", default="")
    ap.add_argument("--no-torch", action="store_true",
                    help="do not install torch; ResNet-18/MobileNetV2 built with the onnx helper API")
    a = ap.parse_args()
    load_deps(a.no_torch)
    kiln = find_kiln(a.kiln)
    sel = set(x for x in a.models.split(",") if x)
    rows = []
    for name, path, data in models(sel):
        feeds = inputs_for(path, data)
        for t in [int(x) for x in a.threads.split(",")]:
            ort_ms, ref = ort_time(path, feeds, t, a.iterations, a.warmup)
            k_ms, outs, why = kiln_time(kiln, name, path, feeds, t, a.iterations, a.warmup)
            diff = rel = None
            if outs:
                ks = [k for k in ref if k in outs and outs[k].shape == ref[k].shape and ref[k].size]
                ds = [float(np.max(np.abs(outs[k].astype(np.float64) - ref[k].astype(np.float64)))) for k in ks]
                # Relative to the largest reference magnitude of that output:
                # random-weight CNNs can have tiny logits, where an absolute
                # difference says nothing.
                rs = [d / max(float(np.max(np.abs(ref[k].astype(np.float64)))), 1e-30) for d, k in zip(ds, ks)]
                diff = max(ds) if ds else None
                rel = max(rs) if rs else None
            rows.append((name, t, ort_ms, k_ms, diff, rel, why))
            print("%-16s threads %d: ORT %.3f ms, kiln %s%s" % (
                name, t, ort_ms, "%.3f ms" % k_ms if k_ms else "-", "  (" + why + ")" if why else ""),
                file=sys.stderr)
    print("| model | threads | ORT median ms | kiln median ms | kiln/ORT | max abs diff | max diff / max abs ref |")
    print("|---|---|---|---|---|---|---|")
    for name, t, o, k, d, r, why in rows:
        print("| %s | %d | %.3f | %s | %s | %s | %s |" % (
            name, t, o, "%.3f" % k if k else "n/a: " + why, "%.2f" % (k / o) if k else "-",
            "%.3g" % d if d is not None else "-", "%.3g" % r if r is not None else "-"))


if __name__ == "__main__":
    main()
