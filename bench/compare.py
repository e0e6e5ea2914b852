#!/usr/bin/env python3
"""Compare kiln with ONNX Runtime on real models, same thread counts.

For every model -- each ../shared/models/<name> test folder and the models
made by bench/gen_torchvision.py (ResNet-18, MobileNetV2, a small
Transformer encoder, ResNet-50 and a BERT-base-like encoder) -- and for 1
and 2 threads: ORT (intra-op threads = N, sequential) and kiln (the `kiln`
CLI: `kiln build` with --threads N, then `kiln bench` and `kiln run` with
--threads N) run the same inputs (the model's test_data_set_0 inputs, else
seeded random ones).  The timed runs alternate in --rounds rounds (ORT, then
kiln, then ORT...), so load from other work on the machine hits both; a
median is the median of the rounds' medians.  Prints, under a line with the
date, the CPU model, the ORT version and the load average, three tables:

  latency: model | threads | ORT median ms | kiln median ms | ORT/kiln
           | ORT/kiln per round (the median over rounds of ORT's round median over the kiln
             round's right after it, and its quartiles: on a host whose speed changes in
             stretches of seconds, two adjacent rounds share the stretch)
           | ORT/kiln paired (bench/paired.py's measure, after the rounds: both engines in
             this process, one inference each in turn, the median of the --pairs pairs'
             ratios and its quartiles; two inferences milliseconds apart share the host's
             speed, which a round of another process need not; at 2+ threads a 2 ms
             pause after each turn, so that ORT's spinning workers have stopped)
           | CPU ms/run ORT, kiln | ORT/kiln by CPU
           | min ms ORT, kiln | ORT/kiln by min | max abs diff | relative diff
           | load (the 1-minute load average when the row was measured)
           | core round trip ns (2+ threads: median (min-max) over kiln's rounds)
  load:    model | ORT session ms | kiln engine load ms | kiln/ORT | kiln first run ms | ORT first run ms
  profile: model | threads | GFLOP | kiln GFLOP/s | FMA peak GFLOP/s | of peak | top 5 layers

After each ORT round at 2+ threads the script waits --gap seconds (0.1) before kiln's:
ORT's intra-op workers spin for ~10-20 ms after its last run (its default
session.intra_op.allow_spinning), and at 2 threads that spinning took a
CPU from a `kiln bench` started at once (2026-11-27, Zen 5 VM: MobileNetV2
kiln 3.7-4.0 ms right after ORT's round, 1.9 ms 20 ms or more later or with
ORT's spinning off; rows of short models at 2 threads were off by up to
2x).  ORT's own timed runs keep its spinning.

ORT/kiln above 1: kiln is faster.  CPU ms/run: the user + system time each
engine used per run (ORT: this process's, around its timed runs; kiln: the
`kiln bench` child's, less that of a one-run `kiln bench`, which removes its
start, engine load and checksums).  Time slicing by other processes does not
count in it, so on a shared machine the 1-thread CPU ratio is the steadier
figure (their cache traffic still counts); with 2 threads it also counts
both engines' spinning, so it is not a latency.  min: the fastest single run
of all rounds (each engine's best case; when a slow or busy VM puts the medians
far above the minima, as on 2026-11-26 evening, the min ratio is the steadier
latency figure).  The diff is between kiln's and ORT's
outputs.  Core round trip: how far apart the host put the two CPUs, which
`kiln bench` measures after each round (tools/core_rtt.c): on the 2-vCPU
Zen 5 VM of 2026-11-27, ~70-120 ns on one die and ~430 ns across dies,
changing every few seconds to minutes; across dies kiln's ResNet-18 ran
1.45x slower at 2 threads, ORT's 1.05x, so compare 2-thread rows only at
like round trips (--round-log shows each round's).  Load: ORT's InferenceSession creation against kiln_engine_load of
the saved engine (libkiln through ctypes, same process, alternating); kiln's
first run also verifies the checksums a mapped load defers.  Profile: the
model's GFLOP (Conv, ConvTranspose, Gemm, MatMul from the ONNX shapes), kiln's
GFLOP/s at its median, the FMA peak `kiln bench --profile` measures with the
same threads (the best of the run's measurements at that thread count), and
its five slowest layers.  A model kiln cannot build (an op
still missing, a build-time value it needs) shows the reason instead.

    python3 bench/compare.py [--kiln build/kiln] [--threads 1,2] [--iterations 50] [--rounds 5] [--pairs 60]
                             [--models name,...] [--no-torch] [--no-load] [--no-profile] [--round-log] [--gap S]

Installs numpy, onnx, onnxruntime, torch and torchvision with pip when they
are missing (--no-torch: no torch; the two CNNs are then built with the onnx
helper API in the same form).
Work files go to build-bench/ (not committed).  Keep runs short on shared
machines.
"""
import argparse
import ctypes
import datetime
import glob
import importlib
import os
import re
import resource
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


np = onnx = ort = numpy_helper = paired_mod = None
NP_OF = {}


def load_deps(no_torch):
    """Install (if missing) and import what a run needs: after argument
    parsing, so --help and usage errors install nothing."""
    global np, onnx, ort, numpy_helper, paired_mod, NP_OF
    ensure([("numpy", "numpy"), ("onnx", "onnx"), ("onnxruntime", "onnxruntime")])
    # ResNet-18 / MobileNetV2 come from torchvision (PyPI's torch brings ~3 GB of
    # CUDA libraries; --no-torch uses the helper-built equivalents instead).
    if not no_torch:
        ensure([("torch", "torch"), ("torchvision", "torchvision")])
    np = importlib.import_module("numpy")
    onnx = importlib.import_module("onnx")
    ort = importlib.import_module("onnxruntime")
    numpy_helper = importlib.import_module("onnx.numpy_helper")
    paired_mod = importlib.import_module("paired")  # bench/paired.py: the paired column's loop
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
    # only with torch: the small Transformer, ResNet-50 and the BERT-base-like encoder
    extra = [os.path.join(mdir, n + ".onnx") for n in ("transformer_encoder", "resnet50", "bert_encoder")]
    if not all(os.path.isfile(p) for p in want):
        subprocess.check_call([sys.executable, os.path.join(HERE, "gen_torchvision.py"), "--out", mdir])
    if "--no-torch" not in sys.argv and not all(os.path.isfile(p) for p in extra[1:]):
        sys.path.insert(0, HERE)
        import gen_torchvision
        gen_torchvision.export_cpu_bench(mdir)
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


def ort_session(model_path, threads):
    return paired_mod.ort_session(ort, model_path, threads, None)


def split_values(feeds):
    """(build-time values, inputs): small integer inputs (a sample rate, axes)
    become build-time values, as `kiln test-onnx` does when a model needs
    them; the others stay inputs."""
    values = {k: v for k, v in feeds.items() if v.dtype.kind in "iub" and v.size <= 64}
    return values, {k: v for k, v in feeds.items() if k not in values}


def ort_round(s, feeds, iters):
    """(median ms, CPU ms per run, min ms) of iters runs, after one untimed run
    (the first after the other engine's round finds the caches cold; kiln's
    CPU figure leaves its first run out too)."""
    s.run(None, feeds)
    ts = []
    c0 = time.process_time()
    for _ in range(iters):
        t0 = time.perf_counter()
        s.run(None, feeds)
        ts.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(ts)), (time.process_time() - c0) * 1e3 / iters, float(np.min(ts))


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(cmd):
    """(exit status, stdout, stderr, CPU seconds the command used)."""
    c0 = children_cpu()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p.returncode, p.stdout, p.stderr, children_cpu() - c0


def kiln_prepare(kiln, name, model_path, feeds, threads):
    """Build the engine and run it once on feeds: (engine path, outputs, error)."""
    wd = os.path.join(WORK, "%s_t%d" % (name, threads))
    os.makedirs(wd, exist_ok=True)
    eng = os.path.join(wd, "model.kiln")
    # Dynamic dims take the inputs' shapes (min = opt = max).
    values, feeds = split_values(feeds)
    shapes = ",".join("%s:%s" % (k, "x".join(str(d) for d in v.shape)) for k, v in feeds.items())
    cmd = [kiln, "build", model_path, "-o", eng, "--threads", str(threads), "--shapes", shapes]
    for k, v in values.items():
        cmd += ["--values", "%s=%s" % (k, ",".join(str(int(x)) for x in v.ravel()))]
    rc, out, err, _ = run(cmd)
    if rc:
        return None, None, "build failed: " + (err.strip().splitlines() or ["?"])[-1][:160]
    args = []
    for k, v in feeds.items():
        p = os.path.join(wd, "in_%s.npy" % re.sub(r"[^A-Za-z0-9_.-]", "_", k))
        np.save(p, v)
        args += ["--input", "%s=%s" % (k, p)]
    odir = os.path.join(wd, "out")
    os.makedirs(odir, exist_ok=True)
    rc, out, err, _ = run([kiln, "run", eng, "--threads", str(threads), "--output-dir", odir] + args)
    if rc:
        return None, None, "run failed: " + (err.strip().splitlines() or ["?"])[-1][:160]
    outs = {}
    for f in glob.glob(os.path.join(odir, "*.npy")):
        outs[os.path.basename(f)[:-4]] = np.load(f)
    return eng, outs, None


def kiln_bench(kiln, eng, threads, iters, warmup, profile=False):
    """`kiln bench`: (median ms, its stdout, error, CPU seconds it used)."""
    rc, out, err, cpu = run([kiln, "bench", eng, "--threads", str(threads), "--iterations", str(iters),
                             "--warmup", str(warmup)] + (["--profile"] if profile else []))
    m = re.search(r"latency (ms|us|s)\b.*?median ([0-9.eE+-]+)", out)
    if rc or not m:
        return None, out, "bench failed: " + (err.strip().splitlines() or ["?"])[-1][:160], cpu
    scale = {"s": 1e3, "ms": 1.0, "us": 1e-3}[m.group(1)]
    return float(m.group(2)) * scale, out, None, cpu


def bench_rtt(out):
    """The core round trip `kiln bench` printed at 2+ threads, ns (None if absent)."""
    m = re.search(r"core round trip: ([0-9.]+) ns", out or "")
    return float(m.group(1)) if m else None


def bench_min(out):
    """The fastest run `kiln bench` printed, in ms (None if absent)."""
    m = re.search(r"latency (ms|us|s)\b.*?min ([0-9.eE+-]+)", out or "")
    return float(m.group(2)) * {"s": 1e3, "ms": 1.0, "us": 1e-3}[m.group(1)] if m else None


def libkiln(kiln):
    """libkiln beside the CLI (a build tree), else the installed one."""
    d = os.path.dirname(os.path.realpath(kiln))
    for c in sorted(glob.glob(os.path.join(d, "libkiln.so*"))) + ["libkiln.so.0", "libkiln.so"]:
        try:
            lib = ctypes.CDLL(c)
            lib.kiln_engine_load.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
            lib.kiln_engine_free.argtypes = [ctypes.c_void_p]
            lib.kiln_errmsg.restype = ctypes.c_char_p
            return lib
        except OSError:
            continue
    return None


def load_times(lib, eng, model_path, threads, feeds, rounds):
    """Alternating: ORT session creation (+ its first run) and kiln_engine_load."""
    o_ms, o_first, k_ms = [], [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        s = ort_session(model_path, threads)
        o_ms.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        s.run(None, feeds)
        o_first.append((time.perf_counter() - t0) * 1e3)
        del s
        e = ctypes.c_void_p()
        t0 = time.perf_counter()
        rc = lib.kiln_engine_load(eng.encode(), ctypes.byref(e))
        k_ms.append((time.perf_counter() - t0) * 1e3)
        if rc:
            return None, None, None, "load failed: " + lib.kiln_errmsg().decode(errors="replace")
        lib.kiln_engine_free(e)
    return float(np.median(o_ms)), float(np.median(o_first)), float(np.median(k_ms)), None


def paired(lib, eng, model_path, threads, feeds, pairs, spin_us=1000):
    """bench/paired.py's measure: kiln (libkiln, this process, the engine's
    inputs bound, outputs in context memory) and ORT alternating one
    inference each, ORT first in even pairs; ORT's workers stop spinning
    spin_us after a run at 2+ threads (paired.py says why), and there each
    turn, kiln's too, is followed by a pause of twice that: without it kiln's
    turn right after ORT's shares a CPU with ORT's spinning worker
    (MobileNetV2 at 2 threads, 2026-11-29: kiln's median 4.1-4.5 ms against
    3.2-3.5 with ORT's spinning off, which slows ORT instead; with the 2 ms
    pauses the pairs' median ratio was 1.24 in both of two runs, against
    1.03-1.11 and 1.59-1.60).  At least a second's worth of pairs, at most
    2000.  (median, q1, q3) of the per-pair ORT/kiln ratios, or an error
    string."""
    C = ctypes
    for f in ("kiln_context_create", "kiln_context_bind", "kiln_context_run", "kiln_context_free"):
        getattr(lib, f).restype = C.c_int
    lib.kiln_context_create.argtypes = [C.c_void_p, C.c_int, C.POINTER(C.c_void_p)]
    lib.kiln_context_bind.argtypes = [C.c_void_p, C.c_char_p, C.c_void_p, C.c_size_t]
    lib.kiln_context_run.argtypes = [C.c_void_p]
    lib.kiln_context_free.argtypes = [C.c_void_p]
    e, ctx = C.c_void_p(), C.c_void_p()
    if lib.kiln_engine_load(eng.encode(), C.byref(e)):
        return "load failed: " + lib.kiln_errmsg().decode(errors="replace")
    try:
        if lib.kiln_context_create(e, threads, C.byref(ctx)):
            return "context: " + lib.kiln_errmsg().decode(errors="replace")
        keep = {k: np.ascontiguousarray(v) for k, v in split_values(feeds)[1].items()}  # the engine's inputs
        for k, v in keep.items():
            if lib.kiln_context_bind(ctx, k.encode(), v.ctypes.data, v.nbytes):
                return "bind %s: %s" % (k, lib.kiln_errmsg().decode(errors="replace"))
        s = paired_mod.ort_session(ort, model_path, threads, spin_us)

        def run_kiln():
            if lib.kiln_context_run(ctx):
                raise RuntimeError(lib.kiln_errmsg().decode(errors="replace"))

        def run_ort():
            s.run(None, feeds)

        gap = 2 * spin_us / 1e6 if threads > 1 else 0.0
        to, tk = paired_mod.alternate(run_ort, run_kiln, 3, gap)
        n = min(2000, max(pairs, int(1.0 / max(to[-1] + tk[-1], 1e-6))))
        to, tk = paired_mod.alternate(run_ort, run_kiln, n, gap)
        r = np.array(to) / np.array(tk)
        q1, q2, q3 = np.percentile(r, [25, 50, 75])
        return float(q2), float(q1), float(q3)
    except RuntimeError as ex:
        return "run failed: " + str(ex)
    finally:
        if ctx:
            lib.kiln_context_free(ctx)
        lib.kiln_engine_free(e)


# FLOPs of the matrix-product ops (multiply-adds count 2), from the ONNX shapes.
def model_gflop(model_path, feeds):
    from onnx import shape_inference
    m = onnx.load(model_path)
    # Pin the graph inputs to the shapes run, so every dim is known.
    for vi in m.graph.input:
        if vi.name in feeds:
            for d, n in zip(vi.type.tensor_type.shape.dim, feeds[vi.name].shape):
                d.ClearField("dim_param")
                d.dim_value = int(n)
    m = shape_inference.infer_shapes(m)
    shp = {}
    for vi in list(m.graph.input) + list(m.graph.value_info) + list(m.graph.output):
        dims = [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
        shp[vi.name] = dims
    for t in m.graph.initializer:
        shp[t.name] = list(t.dims)

    def known(n):
        d = shp.get(n)
        return d if d is not None and all(x is not None for x in d) else None

    flops = 0
    for nd in m.graph.node:
        if nd.op_type in ("Conv", "ConvTranspose") and len(nd.input) > 1:
            w, y, x = known(nd.input[1]), known(nd.output[0]), known(nd.input[0])
            if not (w and y and x):
                continue
            if nd.op_type == "Conv":  # each output: Cin/group * kernel multiply-adds
                flops += 2 * int(np.prod(y)) * int(np.prod(w[1:]))
            else:  # each input element: Cout/group * kernel multiply-adds
                flops += 2 * int(np.prod(x)) * int(np.prod(w[1:]))
        elif nd.op_type in ("Gemm", "MatMul"):
            a, y = known(nd.input[0]), known(nd.output[0])
            if not (a and y):
                continue
            ta = any(at.name == "transA" and at.i for at in nd.attribute)
            k = a[-2] if ta else a[-1]
            flops += 2 * int(np.prod(y)) * int(k)
    return flops / 1e9


def short(name, op):
    """/layer1/layer1.0/conv1/Conv -> layer1.0/conv1 (torch exporter names)."""
    parts = name.strip("/").split("/")
    if len(parts) > 1 and parts[-1] == op:
        parts = parts[:-1]
    if len(parts) > 1 and parts[1].startswith(parts[0]):
        parts = parts[1:]
    return "/".join(parts)


def machine_line():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    load = " ".join("%.2f" % x for x in os.getloadavg())
    return "%s UTC | CPU: %s (%d logical CPUs) | ONNX Runtime %s | load average %s" % (
        datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"), cpu, os.cpu_count() or 0,
        ort.__version__, load)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--iterations", type=int, default=50, help="timed runs per engine, over all rounds")
    ap.add_argument("--rounds", type=int, default=5, help="alternating ORT/kiln rounds")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--pairs", type=int, default=60,
                    help="paired inferences after the rounds (at least a second's worth; 0: none)")
    ap.add_argument("--models", default="")
    ap.add_argument("--no-torch", action="store_true",
                    help="do not install torch; ResNet-18/MobileNetV2 built with the onnx helper API")
    ap.add_argument("--no-load", action="store_true", help="skip the load-time table")
    ap.add_argument("--no-profile", action="store_true", help="skip the profile table")
    ap.add_argument("--gap", type=float, default=0.1,
                    help="seconds idle after each 2+-thread ORT round, before kiln's (default 0.1; 0: none)")
    ap.add_argument("--round-log", action="store_true",
                    help="print each round's medians (ORT, kiln) with the time of day to stderr")
    a = ap.parse_args()
    load_deps(a.no_torch)
    kiln = find_kiln(a.kiln)
    lib = None if a.no_load and a.pairs <= 0 else libkiln(kiln)
    sel = set(x for x in a.models.split(",") if x)
    rounds = max(1, a.rounds)
    per = max(1, a.iterations // rounds)
    rows, loads, profs = [], [], []
    header = machine_line()
    for name, path, data in models(sel):
        feeds = inputs_for(path, data)
        gflop = None
        for t in [int(x) for x in a.threads.split(",")]:
            s = ort_session(path, t)
            ref = dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))
            for _ in range(a.warmup):
                s.run(None, feeds)
            eng, outs, why = kiln_prepare(kiln, name, path, feeds, t)
            o_meds, k_meds, o_cpu, k_cpu, o_mins, k_mins, rtts, bench_out = [], [], [], [], [], [], [], ""
            # each round's ORT median over the kiln round right after it: on a host whose
            # speed changes for seconds at a time (session 26's Intel VM: runs of 50 and of
            # 72 ms in stretches) two adjacent rounds share the stretch, the medians of all
            # rounds need not
            pr = []
            # a one-run bench: the CPU time of start, load and checksums
            k_base = kiln_bench(kiln, eng, t, 1, 0)[3] if eng and not why else None
            for r in range(rounds):
                om, oc, omin = ort_round(s, feeds, per)
                if t > 1:  # ORT's spinning workers go idle before kiln's round (see --gap); at 1 thread it has none
                    time.sleep(a.gap)
                o_meds.append(om)
                o_mins.append(omin)
                o_cpu.append(oc)
                if eng and not why:
                    k, bench_out, why, kc = kiln_bench(kiln, eng, t, per, a.warmup)
                    if k is not None:
                        k_meds.append(k)
                        pr.append(om / k)
                        if bench_min(bench_out) is not None:
                            k_mins.append(bench_min(bench_out))
                        if t > 1 and bench_rtt(bench_out) is not None:
                            rtts.append(bench_rtt(bench_out))
                        k_cpu.append(max(kc - k_base, 0.0) * 1e3 / max(per + a.warmup - 1, 1))
                if a.round_log:
                    print("  %s %s t%d round %d: ORT %.3f ms, kiln %s%s" % (
                        time.strftime("%H:%M:%S"), name, t, r, om,
                        "%.3f ms" % k_meds[-1] if len(k_meds) == r + 1 else "-",
                        ", core round trip %.0f ns" % rtts[-1] if len(rtts) == r + 1 else ""), file=sys.stderr)
            del s
            pp = paired(lib, eng, path, t, feeds, a.pairs) if lib and eng and not why and a.pairs > 0 else None
            ppair = "%.2f (%.2f-%.2f)" % pp if isinstance(pp, tuple) else "n/a: " + pp if pp else "-"
            ort_ms = float(np.median(o_meds))
            k_ms = float(np.median(k_meds)) if k_meds and not why else None
            ort_c = float(np.median(o_cpu))
            k_c = float(np.median(k_cpu)) if k_cpu and not why else None
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
            mins = (min(o_mins), min(k_mins)) if k_mins and not why else None
            rtt = "%.0f (%.0f-%.0f)" % (float(np.median(rtts)), min(rtts), max(rtts)) if rtts else "-"
            pair = "%.2f (%.2f-%.2f)" % (float(np.median(pr)), *np.percentile(pr, [25, 75])) if pr and not why else "-"
            rows.append((name, t, ort_ms, k_ms, diff, rel, why, os.getloadavg()[0], ort_c, k_c, mins, rtt, pair, ppair))
            print("%-16s threads %d: ORT %.3f ms, kiln %s%s" % (
                name, t, ort_ms, "%.3f ms" % k_ms if k_ms else "-", "  (" + why + ")" if why else ""),
                file=sys.stderr)
            if k_ms and not a.no_profile:
                _, pout, perr, _ = kiln_bench(kiln, eng, t, per, a.warmup, profile=True)
                peak = re.search(r"FMA peak: ([0-9.]+) GFLOP/s", pout or "")
                top = re.findall(r"^\s+\d\. (\S+)\s+(\S*)\s+[0-9.]+ us\s+([0-9.]+)%", pout or "", re.M)
                if gflop is None:
                    try:
                        gflop = model_gflop(path, feeds)
                    except Exception as ex:  # noqa: BLE001 (a model onnx cannot infer)
                        print("%s: no FLOP count (%s)" % (name, ex), file=sys.stderr)
                        gflop = 0.0
                profs.append((name, t, gflop, k_ms, float(peak.group(1)) if peak else None, top))
            if lib and eng and k_ms and t == 1 and not a.no_load:
                o_load, o_first, k_load, lwhy = load_times(lib, eng, path, t, feeds, rounds)
                first = re.search(r"first run: ([0-9.]+) ms", bench_out or "")
                loads.append((name, o_load, o_first, k_load, float(first.group(1)) if first else None, lwhy))
    print(header + " (at the start; %s at the end)" % " ".join("%.2f" % x for x in os.getloadavg()))
    print()
    print("| model | threads | ORT median ms | kiln median ms | ORT/kiln | ORT/kiln per round (quartiles) "
          "| ORT/kiln paired (quartiles) | CPU ms/run ORT, kiln | ORT/kiln by CPU "
          "| min ms ORT, kiln | ORT/kiln by min | max abs diff | max diff / max abs ref | load (1 min) "
          "| core round trip ns |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, t, o, k, d, r, why, ld, oc, kc, mins, rtt, pair, ppair in rows:
        print("| %s | %d | %.3f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.1f | %s |" % (
            name, t, o, "%.3f" % k if k else "n/a: " + why, "%.2f" % (o / k) if k else "-", pair, ppair,
            "%.3f, %s" % (oc, "%.3f" % kc if kc else "-"), "%.2f" % (oc / kc) if kc else "-",
            "%.3f, %.3f" % mins if mins else "-", "%.2f" % (mins[0] / mins[1]) if mins else "-",
            "%.3g" % d if d is not None else "-", "%.3g" % r if r is not None else "-", ld, rtt))
    if loads:
        print()
        print("| model | ORT session ms | kiln engine load ms | kiln/ORT | kiln first run ms | ORT first run ms |")
        print("|---|---|---|---|---|---|")
        for name, o, of, k, kf, why in loads:
            if why:
                print("| %s | %.1f | n/a: %s | - | - | %.1f |" % (name, o or 0, why, of or 0))
                continue
            print("| %s | %.1f | %.2f | %.3f | %s | %.1f |" % (
                name, o, k, k / o, "%.1f" % kf if kf is not None else "-", of))
    if profs:
        print()
        print("| model | threads | GFLOP | kiln GFLOP/s | FMA peak GFLOP/s | of peak | top 5 layers (share of layer time) |")
        print("|---|---|---|---|---|---|---|")
        # The machine's peak: the best measurement at that thread count
        # (a neighbour's burst lowers one measurement, never raises it).
        best = {}
        for _, t, _, _, peak, _ in profs:
            best[t] = max(best.get(t, 0), peak or 0)
        for name, t, g, k, _, top in profs:
            gs = g / (k / 1e3) if g else None
            peak = best.get(t)
            print("| %s | %d | %s | %s | %s | %s | %s |" % (
                name, t, "%.2f" % g if g else "-", "%.1f" % gs if gs else "-",
                "%.0f" % peak if peak else "-", "%.0f%%" % (100 * gs / peak) if gs and peak else "-",
                ", ".join("%s %s %s%%" % (short(n, op), op, sh) for n, op, sh in top)))


if __name__ == "__main__":
    main()
