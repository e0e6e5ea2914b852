#!/usr/bin/env python3
"""kiln on the GPU against PyTorch: eager, a captured CUDA graph, torch.compile.

For ResNet-50 (torchvision, random seeded weights), a BERT-base-like encoder
(torch.nn.TransformerEncoder, 12 layers, d_model 768, 12 heads, seq 128)
and PP-OCRv4 det at 640x640 (../shared/models/ppocrv4_det, made a torch
module by onnx2torch), at batch 1 and 32, FP32 (TF32 off on both sides)
and FP16, this prints one table row per (model, batch, precision):

  kiln     `kiln build --device cuda [--fp16]` of the ONNX file (autotuned),
           run through libkiln's C API (ctypes) with the input and output
           bound to torch CUDA tensors (no host copies; CUDA graphs on);
  kiln h   the same engine bound to host numpy arrays (H2D/D2H included);
  eager    the torch module under inference_mode (FP16: module.half());
  graph    that module captured once in a torch.cuda.CUDAGraph, replayed;
  compile  torch.compile(module) (and mode="max-autotune" with
           --modes ...,max-autotune);

each the median latency of --iterations timed runs after --warmup (wall
clock from the call to the end of a device synchronize, the same for all),
then kiln's ratio to eager and to the best torch mode (< 1: kiln faster).
A second table has p90s, throughput (samples/s at the median), engine build
and load times, and the outputs checked: kiln against torch FP32 eager, and
(FP16 rows) torch FP16 against torch FP32, as max abs difference and that
over max |reference|.  The GPU, driver, CUDA, torch and kiln versions head
the report.  The ONNX files for ResNet-50 and the encoder are exported here
by bench/gen_torchvision.py from the same seeded modules torch runs.

    python3 bench/gpu_compare.py [--kiln build/kiln] [--lib build/libkiln.so.0]
        [--models resnet50,bert_encoder,ppocrv4_det] [--batches 1,32]
        [--precisions fp32,fp16] [--modes eager,graph,compile]
        [--iterations 100] [--warmup 10] [--budget SECONDS] [--work DIR]
        [--onnx-dir DIR] [--ppocr MODEL.onnx] [--json FILE] [--device cuda|cpu] [--dry-run]
        [--profile N]

Each row's lines of both tables are printed ("row: | ... |") as soon as the
row is measured, and --json FILE is rewritten then with the rows so far
("complete": false until the last), so a run that is cut short (a timeout's
SIGTERM, Ctrl-C) keeps what it measured; the full tables follow at the end,
or when the run is stopped, over the rows finished by then.

--profile N: after each row's lines, kiln's host time for
kiln_context_enqueue alone and with the wait, and a CUPTI kernel timeline
(torch.profiler, which records libkiln's kernels too: same process) of N
runs of kiln and of torch's CUDA graph: kernels, copies and memsets per run,
the host launches (a replayed CUDA graph makes none), GPU busy time against
the span (the gaps), and the kernels by time.  A run whose enqueue is close
to its whole time is host-bound; one whose GPU is busy through the span is
device-bound.

--budget: rows not started by then are listed as skipped (batch 1 rows come
first, torch.compile is left out of a row that would not fit).  --device
cpu --dry-run runs the same code path on the CPU (kiln CPU engines, torch
CPU, no graphs or compile, batch 1, 3 iterations): a check of the script
where no GPU is.  Needs torch, onnx, numpy; onnxruntime for the ORT
references of gen_torchvision --test-data; onnx2torch for PP-OCR (a pure
Python wheel: put its unzipped folder on PYTHONPATH).
"""
import argparse
import copy
import ctypes
import json
import os
import platform
import signal
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
import gen_torchvision  # noqa: E402

LABEL = {"resnet50": "ResNet-50", "bert_encoder": "BERT-base encoder (seq 128)",
         "ppocrv4_det": "PP-OCRv4 det 640"}


# ---------------------------------------------------------------- kiln (ctypes)

class IoInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("dims", ctypes.c_int64 * 8), ("min", ctypes.c_int64 * 8), ("opt", ctypes.c_int64 * 8),
                ("max", ctypes.c_int64 * 8), ("is_input", ctypes.c_int), ("data_dependent", ctypes.c_int)]


class Kiln:
    """The few calls of libkiln's public C API a benchmark needs."""

    def __init__(self, path):
        L = self.L = ctypes.CDLL(path)
        vp, P = ctypes.c_void_p, ctypes.POINTER
        L.kiln_version.restype = ctypes.c_char_p
        L.kiln_errmsg.restype = ctypes.c_char_p
        L.kiln_engine_load.argtypes = [ctypes.c_char_p, P(vp)]
        L.kiln_engine_free.argtypes = [vp]
        L.kiln_engine_num_inputs.argtypes = [vp]
        L.kiln_engine_num_outputs.argtypes = [vp]
        L.kiln_engine_io.argtypes = [vp, ctypes.c_int, P(IoInfo)]
        L.kiln_engine_placement.argtypes = [vp, P(ctypes.c_int), P(ctypes.c_int)]
        L.kiln_context_create.argtypes = [vp, ctypes.c_int, P(vp)]
        L.kiln_context_free.argtypes = [vp]
        L.kiln_context_bind.argtypes = [vp, ctypes.c_char_p, vp, ctypes.c_size_t]
        L.kiln_context_run.argtypes = [vp]
        L.kiln_context_enqueue.argtypes = [vp, vp]
        L.kiln_context_synchronize.argtypes = [vp]

    def check(self, rc, what):
        if rc:
            raise RuntimeError("%s: %s" % (what, self.L.kiln_errmsg().decode()))

    def version(self):
        return self.L.kiln_version().decode()

    def load(self, path):
        """(engine, context, io names in order: inputs then outputs, placement)"""
        e, c = ctypes.c_void_p(), ctypes.c_void_p()
        self.check(self.L.kiln_engine_load(path.encode(), ctypes.byref(e)), "loading " + path)
        self.check(self.L.kiln_context_create(e, 0, ctypes.byref(c)), "creating a context")
        names = []
        for i in range(self.L.kiln_engine_num_inputs(e) + self.L.kiln_engine_num_outputs(e)):
            info = IoInfo()
            self.check(self.L.kiln_engine_io(e, i, ctypes.byref(info)), "engine io")
            names.append(info.name.decode())
        gpu, cpu = ctypes.c_int(), ctypes.c_int()
        self.L.kiln_engine_placement(e, ctypes.byref(gpu), ctypes.byref(cpu))
        return e, c, names, (gpu.value, cpu.value)

    def bind(self, ctx, name, addr, nbytes):
        self.check(self.L.kiln_context_bind(ctx, name.encode(), ctypes.c_void_p(addr), nbytes), "bind " + name)

    def run(self, ctx):
        self.check(self.L.kiln_context_run(ctx), "run")

    def enqueue(self, ctx):
        self.check(self.L.kiln_context_enqueue(ctx, None), "enqueue")

    def synchronize(self, ctx):
        self.check(self.L.kiln_context_synchronize(ctx), "synchronize")

    def free(self, e, c):
        self.L.kiln_context_free(c)
        self.L.kiln_engine_free(e)


# ---------------------------------------------------------------- models

def ppocr_module(onnx_path):
    """PP-OCR det as a torch module: Paddle exports its weights as Constant
    nodes, which onnx2torch would keep as per-call constants; move them into
    initializers (parameters) first."""
    import onnx
    import onnx2torch
    m = onnx.load(onnx_path)
    g = m.graph
    keep = []
    for node in g.node:
        if node.op_type == "Constant" and len(node.attribute) == 1 and node.attribute[0].name == "value":
            t = onnx.TensorProto()
            t.CopyFrom(node.attribute[0].t)
            t.name = node.output[0]
            g.initializer.append(t)
        else:
            keep.append(node)
    del g.node[:]
    g.node.extend(keep)
    return onnx2torch.convert(m).eval()


def model_set(names, work, onnx_dir, ppocr):
    """name -> (onnx path, torch module (CPU, FP32), per-sample input shape, input name)"""
    out = {}
    gen = [n for n in names if n in gen_torchvision.GPU_SET]
    if onnx_dir:  # written in this session by gen_torchvision.py --gpu-set (same seeded modules)
        paths = {n: os.path.join(onnx_dir, n, "model.onnx") for n in gen}
    else:
        paths = gen_torchvision.export_gpu_set(work, gen) if gen else {}
    for n in gen:
        ctor, shape, iname, _ = gen_torchvision.GPU_SET[n]
        out[n] = (paths[n], ctor(), shape, iname)
    if "ppocrv4_det" in names:
        out["ppocrv4_det"] = (ppocr, ppocr_module(ppocr), (3, 640, 640), "x")
    return out


# ---------------------------------------------------------------- timing

def timed(fn, sync, warmup, iterations, max_s):
    """Latencies in ms of fn() + sync(), after warmup calls; stops early
    after max_s seconds (at least 5 runs)."""
    for _ in range(warmup):
        fn()
    sync()
    lat = []
    t_end = time.perf_counter() + max_s
    for i in range(iterations):
        t0 = time.perf_counter()
        fn()
        sync()
        lat.append((time.perf_counter() - t0) * 1e3)
        if i >= 4 and time.perf_counter() > t_end:
            break
    return np.array(lat)


def stats(lat, batch):
    if lat is None or not len(lat):
        return None
    med = float(np.median(lat))
    return {"median_ms": med, "p90_ms": float(np.percentile(lat, 90)), "runs": int(len(lat)),
            "samples_per_s": batch * 1e3 / med}


def first_line(ex):
    t = str(ex).strip()
    return "%s: %s" % (type(ex).__name__, t.splitlines()[0][:160] if t else "")


def err(out, ref):
    d = float(np.max(np.abs(out.astype(np.float64) - ref.astype(np.float64))))
    scale = float(np.max(np.abs(ref)))
    return {"max_abs": d, "rel": d / scale if scale else float("inf")}


# ---------------------------------------------------------------- timeline

def host_enqueue_us(fn_enqueue, fn_sync, n=50):
    """Median host time of an enqueue alone (the run is not waited for inside
    it), and of enqueue + wait: a replayed run whose enqueue is close to the
    whole is host-bound."""
    enq, tot = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        fn_enqueue()
        t1 = time.perf_counter()
        fn_sync()
        t2 = time.perf_counter()
        enq.append((t1 - t0) * 1e6)
        tot.append((t2 - t0) * 1e6)
    return float(np.median(enq)), float(np.median(tot))


def timeline(torch, fn, sync, runs, trace_path=None):
    """A CUPTI kernel timeline (torch.profiler) of `runs` calls of fn() +
    sync(), each inside its own host range: per run the GPU kernels, copies
    and memsets, the launches the host made (cuLaunchKernel vs
    cuGraphLaunch), the device busy time (union of kernel/copy intervals),
    the span from the first GPU activity to the last and the host range;
    then the kernels by total time."""
    from torch.profiler import ProfilerActivity, profile, record_function
    fn()
    sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(runs):
            with record_function("run%d" % i):
                fn()
                sync()
    import tempfile
    path = trace_path or tempfile.mktemp(suffix=".json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        ev = json.load(f)["traceEvents"]
    ranges = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev
                    if e.get("ph") == "X" and str(e.get("name", "")).startswith("run")
                    and e.get("cat") == "user_annotation")
    gpu = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    api = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver")]
    per = []
    for (a, b) in ranges:
        g = sorted((e for e in gpu if a <= e["ts"] < b), key=lambda e: e["ts"])
        busy, end = 0.0, -1e30
        for e in g:
            s0, s1 = e["ts"], e["ts"] + e["dur"]
            if s1 > end:
                busy += s1 - max(s0, end)
                end = s1
        calls = {}
        for e in api:
            if a <= e["ts"] < b:
                calls[e["name"]] = calls.get(e["name"], 0) + 1
        per.append({"host_us": b - a, "kernels": sum(e["cat"] == "kernel" for e in g),
                    "memcpy": sum(e["cat"] == "gpu_memcpy" for e in g),
                    "memset": sum(e["cat"] == "gpu_memset" for e in g),
                    "busy_us": busy, "span_us": (g[-1]["ts"] + g[-1]["dur"] - g[0]["ts"]) if g else 0.0,
                    "first_gpu_after_us": (g[0]["ts"] - a) if g else 0.0, "api": calls})
    top = {}
    for e in gpu:
        if ranges and ranges[0][0] <= e["ts"] < ranges[-1][1]:
            t = top.setdefault(e["name"][:90], [0, 0.0])
            t[0] += 1
            t[1] += e["dur"]
    if not trace_path:
        os.unlink(path)
    med = (lambda k: float(np.median([p[k] for p in per])) if per else 0.0)
    return {"runs": len(per), "host_us": med("host_us"), "busy_us": med("busy_us"), "span_us": med("span_us"),
            "first_gpu_after_us": med("first_gpu_after_us"),
            "kernels": med("kernels"), "memcpy": med("memcpy"), "memset": med("memset"),
            "api": per[len(per) // 2]["api"] if per else {},
            "top": sorted(([n, c / max(len(per), 1), t / max(len(per), 1)] for n, (c, t) in top.items()),
                          key=lambda r: -r[2])[:25]}


def timeline_text(label, t):
    lines = ["%s: %d runs; per run (median): host range %.1f us, GPU span %.1f us, GPU busy %.1f us "
             "(gaps %.1f us), first GPU activity %.1f us after the call; %g kernels, %g memcpy, %g memset; "
             "API calls of the middle run: %s" % (
                 label, t["runs"], t["host_us"], t["span_us"], t["busy_us"], t["span_us"] - t["busy_us"],
                 t["first_gpu_after_us"], t["kernels"], t["memcpy"], t["memset"],
                 ", ".join("%s x%d" % kv for kv in sorted(t["api"].items(), key=lambda kv: -kv[1])))]
    lines += ["    %6.1f x %8.2f us  %s" % (c, us, n) for n, c, us in t["top"]]
    return "\n".join(lines)


# ---------------------------------------------------------------- one row

def kiln_row(a, K, name, onnx_path, iname, x, ref, prec, torch, dev):
    """Build, load, time (device and host I/O), check.  Returns a dict."""
    r = {}
    eng = os.path.join(a.work, "%s_b%d_%s_%s.kiln" % (name, x.shape[0], prec, a.device))
    cmd = [a.kiln, "build", onnx_path, "--device", a.device, "--shapes",
           "%s:%s" % (iname, "x".join(str(d) for d in x.shape)), "-o", eng]
    if prec == "fp16":
        cmd.insert(2, "--fp16")
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.build_timeout)
    except subprocess.TimeoutExpired:
        r["error"] = "kiln build: still building after %.0f s (--build-timeout)" % a.build_timeout
        return r
    r["build_s"] = time.perf_counter() - t0
    if p.returncode:
        said = (p.stderr.strip() or p.stdout.strip()).splitlines()
        # a build killed by a signal (negative code: a crash) may say nothing
        how = "killed by signal %d" % -p.returncode if p.returncode < 0 else "exit code %d" % p.returncode
        r["error"] = "kiln build (%s): %s" % (how, said[-1][:300] if said else "no output: " + " ".join(cmd))
        return r
    t0 = time.perf_counter()
    e, c, names, placement = K.load(eng)
    r["load_ms"] = (time.perf_counter() - t0) * 1e3
    r["placement"] = {"gpu_layers": placement[0], "cpu_layers": placement[1]}
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    try:
        if len(names) != 2:
            raise RuntimeError("expected one input and one output, the engine has %s" % names)
        # device I/O: torch tensors (FP32, the ONNX model's logical type)
        xd = torch.from_numpy(x).to(dev)
        yd = torch.empty(ref.shape, dtype=torch.float32, device=dev)
        yd.fill_(float("nan"))  # poison: a row that writes nothing fails the check
        sync()  # torch's stream is not kiln's: the input copy and the poison land first
        K.bind(c, names[0], xd.data_ptr(), xd.numel() * 4)
        K.bind(c, names[1], yd.data_ptr(), yd.numel() * 4)
        K.run(c)
        sync()
        r["check"] = err(yd.cpu().numpy(), ref)
        r["kiln"] = stats(timed(lambda: K.run(c), sync, a.warmup, a.iterations, a.max_s), x.shape[0])
        if a.profile and dev == "cuda":
            enq, tot = host_enqueue_us(lambda: K.enqueue(c), lambda: K.synchronize(c))
            r["enqueue_us"], r["enqueue_sync_us"] = enq, tot
            r["timeline"] = timeline(torch, lambda: K.run(c), sync, a.profile)
        # host I/O: pageable numpy arrays, the copies inside the timed run
        yh = np.full(ref.shape, np.nan, np.float32)
        K.bind(c, names[0], x.ctypes.data, x.nbytes)
        K.bind(c, names[1], yh.ctypes.data, yh.nbytes)
        r["kiln_host"] = stats(timed(lambda: K.run(c), sync, a.warmup, a.iterations, a.max_s), x.shape[0])
        r["check_host"] = err(yh, ref)
    except RuntimeError as ex:
        r["error"] = str(ex)[:300]
    finally:
        K.free(e, c)
    return r


def torch_rows(a, torch, module, x, prec, dev, t_left):
    """{mode: stats or {"error"}}, output of eager (numpy), compile times."""
    res = {}
    m = copy.deepcopy(module).to(dev)
    xt = torch.from_numpy(x).to(dev)
    if prec == "fp16":
        m, xt = m.half(), xt.half()
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    with torch.inference_mode():
        y = m(xt)
        sync()
        out = y.float().cpu().numpy()
        if "eager" in a.modes:
            res["eager"] = stats(timed(lambda: m(xt), sync, a.warmup, a.iterations, a.max_s), x.shape[0])
        if "graph" in a.modes and dev == "cuda":
            try:
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(3):
                        m(xt)
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    m(xt)
                res["graph"] = stats(timed(g.replay, sync, a.warmup, a.iterations, a.max_s), x.shape[0])
                if a.profile:
                    res["graph"]["timeline"] = timeline(torch, g.replay, sync, a.profile)
            except Exception as ex:  # e.g. a host read of a device value inside the module
                res["graph"] = {"error": "capture failed: " + first_line(ex)}
                try:
                    torch.cuda.synchronize()
                except Exception:
                    pass
    for mode in ("compile", "max-autotune"):
        if mode not in a.modes:
            continue
        if dev != "cuda" and not a.cpu_compile:
            res[mode] = {"error": "not on the CPU dry run"}
            continue
        if t_left() < a.compile_reserve:
            res[mode] = {"error": "skipped: time budget"}
            continue
        try:
            t0 = time.perf_counter()
            mc = torch.compile(m) if mode == "compile" else torch.compile(m, mode="max-autotune")
            with torch.inference_mode():
                mc(xt)
                sync()
                ct = time.perf_counter() - t0
                st = stats(timed(lambda: mc(xt), sync, a.warmup, a.iterations, a.max_s), x.shape[0])
            st["compile_s"] = ct
            res[mode] = st
        except Exception as ex:
            res[mode] = {"error": first_line(ex)}
    return res, out


# ---------------------------------------------------------------- report

def ms(s):
    if s is None:
        return "-"
    if "error" in s:
        return "n/a"
    return "%.3f" % s["median_ms"]


HEAD1 = ["| model | batch | prec | kiln ms | kiln host-I/O ms | eager ms | CUDA graph ms | compile ms | "
         "kiln/eager | kiln/best torch |",
         "|---|---|---|---|---|---|---|---|---|---|"]
HEAD2 = ["| model | batch | prec | kiln p90 ms | eager p90 ms | kiln samples/s | best torch samples/s | "
         "kiln build s | kiln load ms | torch.compile s | kiln vs torch FP32: max abs / rel | "
         "torch FP16 vs FP32: max abs / rel | GPU / CPU layers |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]


def row_lines(r):
    """A finished row's line of each table (the second None for a skipped
    row) and its notes (errors)."""
    k = r.get("kiln_res", {})
    t = r.get("torch", {})
    if "skipped" in r:
        return ("| %s | %d | %s | %s |  |  |  |  |  |  |" % (LABEL[r["model"]], r["batch"], r["prec"], r["skipped"]),
                None, [])
    best = [v["median_ms"] for v in t.values() if v and "median_ms" in v]
    kmed = k.get("kiln", {}).get("median_ms") if k.get("kiln") else None
    ratio_e = "%.2f" % (kmed / t["eager"]["median_ms"]) if kmed and t.get("eager") else "-"
    ratio_b = "%.2f" % (kmed / min(best)) if kmed and best else "-"
    cols = [ms(k.get("kiln")) if "error" not in k else "failed", ms(k.get("kiln_host")), ms(t.get("eager")),
            ms(t.get("graph")), ms(t.get("compile"))]
    if "max-autotune" in t:
        cols[-1] += " / " + ms(t.get("max-autotune"))
    line1 = "| %s | %d | %s | %s | %s | %s |" % (LABEL[r["model"]], r["batch"], r["prec"], " | ".join(cols),
                                                ratio_e, ratio_b)
    notes = []
    for mode, v in list(t.items()) + [("kiln", {"error": k["error"]} if "error" in k else None)]:
        if v and "error" in v:
            notes.append("%s b%d %s %s: %s" % (r["model"], r["batch"], r["prec"], mode, v["error"]))
    good = [v for v in t.values() if v and "median_ms" in v]
    bt = max((v["samples_per_s"] for v in good), default=None)
    kc, tc = k.get("check"), r.get("torch16_check")
    f = (lambda c: "%.2e / %.2e" % (c["max_abs"], c["rel"]) if c else "-")
    cs = t.get("compile", {}).get("compile_s") if t.get("compile") else None
    line2 = "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        LABEL[r["model"]], r["batch"], r["prec"],
        "%.3f" % k["kiln"]["p90_ms"] if k.get("kiln") else "-",
        "%.3f" % t["eager"]["p90_ms"] if t.get("eager") and "p90_ms" in t["eager"] else "-",
        "%.1f" % k["kiln"]["samples_per_s"] if k.get("kiln") else "-",
        "%.1f" % bt if bt else "-",
        "%.1f" % k["build_s"] if "build_s" in k else "-",
        "%.1f" % k["load_ms"] if "load_ms" in k else "-",
        "%.1f" % cs if cs else "-", f(kc), f(tc),
        "%d / %d" % (k["placement"]["gpu_layers"], k["placement"]["cpu_layers"]) if "placement" in k else "-")
    return line1, line2, notes


def report(rows, head):
    lines, lines2, notes = [head, ""] + HEAD1, [""] + HEAD2, []
    for r in rows:
        l1, l2, n = row_lines(r)
        lines.append(l1)
        if l2:
            lines2.append(l2)
        notes += n
    lines += lines2
    if notes:
        lines += ["", "Notes:"] + ["- " + n for n in notes]
    return "\n".join(lines)


def profile_text(r):
    """--profile's text of a finished row ("" without timelines)."""
    k, t = r.get("kiln_res", {}), r.get("torch", {})
    tag = "%s b%d %s" % (r["model"], r["batch"], r["prec"])
    out = []
    if "timeline" in k:
        out.append("%s kiln: enqueue alone %.1f us, enqueue + wait %.1f us (median of 50)" % (
            tag, k["enqueue_us"], k["enqueue_sync_us"]))
        out.append(timeline_text(tag + " kiln", k["timeline"]))
    if t.get("graph") and "timeline" in t["graph"]:
        out.append(timeline_text(tag + " torch CUDA graph", t["graph"]["timeline"]))
    return "\n".join(out)


def write_json(path, head, rows, done):
    """--json with the rows finished so far (rewritten after each row, via a
    temporary file, so a killed run leaves a complete file)."""
    if not path:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"head": head, "complete": done,
                   "rows": [{k: v for k, v in r.items() if k != "ref"} for r in rows]}, f, indent=1)
    os.replace(tmp, path)


def torch_cudnn_dir():
    """Point kiln (its `kiln build` subprocesses too) at the cuDNN torch's wheels bring, unless KILN_CUDNN
    is set: cuDNN is an optional conv tactic of kiln's (docs/CUDA.md, "Convolutions")."""
    if "KILN_CUDNN" not in os.environ:
        try:
            import nvidia.cudnn
            d = os.path.join(list(nvidia.cudnn.__path__)[0], "lib")
            if os.path.exists(os.path.join(d, "libcudnn.so.9")):
                os.environ["KILN_CUDNN"] = d
        except ImportError:
            pass
    return os.environ.get("KILN_CUDNN")


def machine(torch, dev):
    if dev == "cuda":
        p = torch.cuda.get_device_properties(0)
        try:
            drv = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True).stdout.strip().splitlines()[0]
        except (OSError, IndexError):
            drv = "?"
        return "%s (sm_%d%d, %.0f GiB), driver %s, CUDA %s" % (p.name, p.major, p.minor, p.total_memory / 2**30,
                                                                drv, torch.version.cuda)
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return "CPU %s (%d cores)" % (cpu, os.cpu_count())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--lib", default=None, help="libkiln.so.0 (default: beside --kiln)")
    ap.add_argument("--models", default="resnet50,bert_encoder,ppocrv4_det")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--precisions", default="fp32,fp16")
    ap.add_argument("--modes", default="eager,graph,compile",
                    help="torch modes to time (none: kiln only; the FP32 eager output is the reference anyway)")
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--max-s", type=float, default=3.0, help="stop timing a mode after this many seconds")
    ap.add_argument("--budget", type=float, default=0, help="seconds for the whole run (0: no limit)")
    ap.add_argument("--compile-reserve", type=float, default=60,
                    help="torch.compile only while this many seconds of --budget remain")
    ap.add_argument("--work", default=os.path.join(ROOT, "build-bench", "gpu"))
    ap.add_argument("--onnx-dir", default=None,
                    help="take DIR/<model>/model.onnx written by gen_torchvision.py --gpu-set (else export)")
    ap.add_argument("--ppocr", default=os.path.join(ROOT, "..", "shared", "models", "ppocrv4_det", "model.onnx"))
    ap.add_argument("--build-timeout", type=float, default=120, help="seconds for one kiln build")
    ap.add_argument("--json", default=None)
    ap.add_argument("--profile", type=int, default=0,
                    help="N: also a kernel timeline (torch.profiler/CUPTI) of N runs of kiln and of torch's CUDA "
                         "graph per row, and kiln's host enqueue time; printed after the tables")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--cpu-compile", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.dry_run:
        a.batches, a.iterations, a.warmup, a.max_s = "1", 3, 1, 1.0
    a.modes = a.modes.split(",")
    t_start = time.perf_counter()
    t_left = (lambda: a.budget - (time.perf_counter() - t_start)) if a.budget else (lambda: float("inf"))
    a.t_left = t_left
    os.makedirs(a.work, exist_ok=True)
    import torch
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_compare: torch sees no CUDA device (use --device cpu --dry-run to check the script here)")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    if a.device == "cuda":
        torch_cudnn_dir()
    K = Kiln(a.lib or os.path.join(os.path.dirname(os.path.abspath(a.kiln)), "libkiln.so.0"))
    head = "%s UTC; %s; torch %s; kiln %s; Python %s; TF32 off; median of up to %d runs after %d warm-up" % (
        time.strftime("%Y-%m-%d %H:%M", time.gmtime()), machine(torch, a.device), torch.__version__, K.version(),
        platform.python_version(), a.iterations, a.warmup)
    if a.device == "cuda":
        head += "; kiln's cuDNN (conv tactics): %s" % (os.environ.get("KILN_CUDNN") or "loader path only")
    print(head, flush=True)
    names = a.models.split(",")
    t0 = time.perf_counter()
    models = model_set(names, a.work, a.onnx_dir, a.ppocr)
    print("models ready in %.1f s" % (time.perf_counter() - t0), flush=True)
    plan = [(n, int(b), p) for b in a.batches.split(",") for n in names for p in a.precisions.split(",")]
    rows, done = [], []  # done: the finished rows (a row is in rows while it runs)
    # killed (timeout sends SIGTERM): the finally below still prints the table of the finished rows
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        for name, batch, prec in plan:
            row = {"model": name, "batch": batch, "prec": prec}
            rows.append(row)
            if t_left() < 15:
                row["skipped"] = "skipped: time budget"
            else:
                run_row(a, K, torch, models, rows, row)
            done.append(row)
            # the row's lines now, so a run cut short keeps what it measured
            l1, l2, notes = row_lines(row)
            print("row: " + l1, flush=True)
            if l2:
                print("row: " + l2, flush=True)
            for n in notes:
                print("row note: " + n, flush=True)
            if a.profile and profile_text(row):
                print(profile_text(row), flush=True)
            write_json(a.json, head, done, False)
    finally:
        for r in rows:
            r.pop("ref", None)
        print()
        if len(done) < len(plan):
            print("(stopped after %d of %d rows)" % (len(done), len(plan)))
        print(report(done, head), flush=True)
        write_json(a.json, head, done, len(done) == len(plan))


def run_row(a, K, torch, models, rows, row):
    """Measure one row (model, batch, precision) into `row`."""
    name, batch, prec = row["model"], row["batch"], row["prec"]
    onnx_path, module, shape, iname = models[name]
    x = np.random.default_rng(batch).standard_normal((batch,) + shape).astype(np.float32)
    t0 = time.perf_counter()
    t_left = a.t_left
    # the reference: torch FP32 eager (its timings are this row's eager column in FP32 rows)
    if prec == "fp32":
        row["torch"], ref = torch_rows(a, torch, module, x, prec, a.device, t_left)
        row["ref"] = ref
    else:
        ref = next((r["ref"] for r in rows if r["model"] == name and r["batch"] == batch and "ref" in r), None)
        if ref is None:
            _, ref = torch_rows(argparse.Namespace(**{**vars(a), "modes": ["eager"], "iterations": 1}),
                                torch, module, x, "fp32", a.device, t_left)
        row["torch"], out16 = torch_rows(a, torch, module, x, prec, a.device, t_left)
        row["torch16_check"] = err(out16, ref)
    row["kiln_res"] = kiln_row(a, K, name, onnx_path, iname, x, ref, prec, torch, a.device)
    print("%-13s b%-3d %s: %.1f s  kiln %s  eager %s  graph %s  compile %s  %s" % (
        name, batch, prec, time.perf_counter() - t0, ms(row["kiln_res"].get("kiln")),
        ms(row["torch"].get("eager")), ms(row["torch"].get("graph")), ms(row["torch"].get("compile")),
        row["kiln_res"].get("error", "")), flush=True)

if __name__ == "__main__":
    main()
