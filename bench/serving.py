#!/usr/bin/env python3
"""Serving figures: kiln in Triton Inference Server, throughput and latency.

For each shared model (ppocr_cls, silero_vad_v5, ppocrv4_det) this writes a
model repository served by the kiln backend, with Triton's dynamic batcher
on and off where the engine batches, starts `tritonserver` on 127.0.0.1 and
drives it with perf_analyzer at concurrency 1, 2 and 4 (HTTP, random inputs);
then runs `kiln bench` on the same engine in-process.  Each row also shows
how many requests each kiln run held and how long the runs took inside the
server (Triton's statistics, as the backend reports them): p50 minus that is
what serving costs.  Prints the machine, then one markdown table.

perf_analyzer: PyPI's `perf-analyzer` is a 0.1.0 placeholder here, so the
binary comes from the tritonclient 2.41.0 wheel (pip download, kept in
--cache), with libb64 and libcudart from the server's wheel.  Where it finds
no stable measurement, or with --load clients, this script's closed-loop
HTTP clients (binary tensors, one keep-alive connection each) stand in.
Peer: Triton's ONNX Runtime backend is not in the tritonserver of PyPI's
nvidia-pytriton 0.7.0 (it ships only the python backend), so each kiln model
`<name>` gets a peer `<name>_ort` in the same repository and server: the
python backend running bench/serving_ort_model.py, an onnxruntime
InferenceSession on the same model.onnx with the same intra-op thread count
(--threads, also set on the kiln model) and the same batching config.  Its
stub is the server's python_backend_stubs/<this Python's X.Y> (with
LD_LIBRARY_PATH at the wheel's libraries), and model.py is written with
--ort-site (default: this Python's site-packages) first on sys.path (the
stub does not take PYTHONPATH); that folder needs onnxruntime and numpy<2
(with numpy 2.4 every response of the 2.51 stub failed: "output tensor
shape does not match size of output").  If onnxruntime is not
importable here or there, numpy there is 2.x, or the stub or the python
backend is missing, the peer is skipped with the reason and kiln is shown
alone.  Both
models get the reference input once (max abs diff of their outputs printed),
then perf_analyzer at each concurrency, kiln then ORT, and a second table
puts them side by side.

    python3 bench/serving.py --server .../tritonserver \\
        --backend build/backends/triton/libtriton_kiln.so --kiln build/kiln \\
        --models ../shared/models [--duration 4] [--concurrency 1,2,4] [--only cls]

(scripts/test_triton.sh installs the server; its venv is
build/backends/triton/triton-venv.)
"""
import argparse
import http.client
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zipfile

import numpy as np
from onnx import TensorProto, numpy_helper

# name, folder, CLI build flags, input shapes of one request, batched profile
MODELS = {
    "cls": ("ppocr_cls", ["--min-shapes", "x:1x3x48x192", "--opt-shapes", "x:1x3x48x192",
                          "--max-shapes", "x:8x3x48x192"], True),
    "vad": ("silero_vad_v5", ["--values", "sr=16000", "--shapes", "input:1x512,state:2x1x128"], False),
    "det": ("ppocrv4_det", ["--min-shapes", "x:1x3x640x640", "--opt-shapes", "x:1x3x640x640",
                            "--max-shapes", "x:2x3x640x640"], True),
}


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"model name\s*:\s*(.*)", f.read())
        return f"{m.group(1).strip()}, {os.cpu_count()} CPUs" if m else platform.processor()
    except OSError:
        return platform.processor()


def pb(path):
    t = TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def request_body(inputs):
    """The binary-data request for {name: array}: (body, header length)."""
    head = json.dumps({"inputs": [{"name": n, "shape": list(a.shape), "datatype": "FP32",
                                   "parameters": {"binary_data_size": a.nbytes}}
                                  for n, a in inputs.items()],
                       "outputs": [], "parameters": {"binary_data_output": True}}).encode()
    return head + b"".join(np.ascontiguousarray(a).tobytes() for a in inputs.values()), len(head)


def load(port, model, body, hlen, concurrency, duration):
    """Closed loop: `concurrency` clients send `body` for `duration` s.
    Returns (requests/s, latencies in ms, errors)."""
    lat, errors, lock = [], [], threading.Lock()
    stop_at = time.perf_counter() + duration

    def client():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        mine = []
        headers = {"Content-Type": "application/octet-stream",
                   "Inference-Header-Content-Length": str(hlen)}
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            conn.request("POST", f"/v2/models/{model}/infer", body, headers)
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                with lock:
                    errors.append(r.status)
                continue
            mine.append((time.perf_counter() - t0) * 1e3)
        conn.close()
        with lock:
            lat.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(lat) / (time.perf_counter() - t0), lat, errors


def perf_analyzer(server, cache):
    """(command, environment) of a perf_analyzer that runs here, or None.
    PyPI's `perf-analyzer` is a 0.1.0 placeholder here; the tritonclient
    2.41.0 wheel still carries the binary (bin/perf_analyzer), which needs
    libb64 and libcudart: the server's wheel has both, under hashed names."""
    found = shutil.which("perf_analyzer")
    if found:
        return [found], dict(os.environ)
    exe, libs = f"{cache}/perf_analyzer", f"{cache}/libs"
    if not os.path.exists(exe):
        os.makedirs(libs, exist_ok=True)
        got = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", cache,
                              "tritonclient==2.41.0"], capture_output=True, text=True)
        wheels = [f for f in os.listdir(cache) if f.startswith("tritonclient-2.41.0") and f.endswith(".whl")]
        if got.returncode or not wheels:
            print(f"note: no perf_analyzer (pip download tritonclient==2.41.0: {got.stderr.strip()[-200:]})")
            return None
        with zipfile.ZipFile(f"{cache}/{wheels[0]}") as z, open(exe, "wb") as out:
            out.write(z.read("tritonclient-2.41.0.data/data/bin/perf_analyzer"))
        os.chmod(exe, 0o755)
        have = os.path.join(os.path.dirname(os.path.realpath(server)), "..", "..", "..", "nvidia_pytriton.libs")
        for want, prefix in (("libb64.so.0d", "libb64-"), ("libcudart.so.12", "libcudart-")):
            src = [f for f in os.listdir(have) if f.startswith(prefix)] if os.path.isdir(have) else []
            if src and not os.path.exists(f"{libs}/{want}"):
                os.symlink(os.path.realpath(f"{have}/{src[0]}"), f"{libs}/{want}")
    env = dict(os.environ, LD_LIBRARY_PATH=libs + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
    ok = subprocess.run([exe, "--version"], capture_output=True, text=True, env=env)
    if ok.returncode:
        print(f"note: {exe} does not run: {(ok.stderr or ok.stdout).strip()[-200:]}")
        return None
    return [exe], env


def pa_row(pa, port, model, concurrency, duration, work):
    """perf_analyzer at one concurrency (HTTP, random inputs of the model's
    shapes): (infer/s, p50, p90, p99 ms), or None when it gave no stable
    measurement."""
    csv = f"{work}/pa-{model}-{concurrency}.csv"
    cmd, env = pa
    r = subprocess.run(cmd + ["-m", model, "-u", f"127.0.0.1:{port}", "-i", "http",
                              "--concurrency-range", f"{concurrency}:{concurrency}",
                              "--measurement-interval", str(int(duration * 1000)),
                              "--stability-percentage", "100", "--max-trials", "4", "-f", csv],
                       capture_output=True, text=True, env=env)
    if r.returncode or not os.path.exists(csv):
        print(f"note: perf_analyzer {model} c={concurrency}: {(r.stderr or r.stdout).strip()[-200:]}")
        return None
    with open(csv) as f:
        head, row = [line.strip().split(",") for line in f.readlines()[:2]]
    v = dict(zip(head, row))
    return (float(v["Inferences/Second"]), *(float(v[f"p{q} latency"]) / 1e3 for q in (50, 90, 99)))


def stats(port, model):
    """Triton's statistics for `model` so far: (successful requests, kiln
    runs, ns in those runs), the runs as the backend reported them
    (TRITONBACKEND_ModelInstanceReportBatchStatistics)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", f"/v2/models/{model}/stats")
    st = json.loads(c.getresponse().read())["model_stats"][0]
    return (int(st["inference_stats"]["success"]["count"]),
            sum(int(b["compute_infer"]["count"]) for b in st.get("batch_stats", [])),
            sum(int(b["compute_infer"]["ns"]) for b in st.get("batch_stats", [])))


def measure(pa, port, name, body, hlen, c, duration, work):
    """(infer/s, p50, p90, p99, generator) for `name` at concurrency c."""
    got = pa_row(pa, port, name, c, duration, work) if pa else None
    if got:
        return (*got, "perf_analyzer")
    tput, lat, errors = load(port, name, body, hlen, c, duration)
    if errors or not lat:
        sys.exit(f"{name}: {len(errors)} failed requests (HTTP {sorted(set(errors))})")
    return (tput, *np.percentile(lat, [50, 90, 99]), "clients")


def threads_param(n):
    return 'parameters { key: "threads" value { string_value: "%d" } }\n' % n


def ort_peer(server, work, ort_site):
    """(None, server environment, sys.path for the stub, versions) when the
    python backend can run the ORT peer, else (why not, ...).  The python
    backend and the stub for this Python's version go into
    work/backends/python."""
    import importlib.util
    import site
    no = lambda why: (why, {}, [], "")
    if importlib.util.find_spec("onnxruntime") is None:
        return no(f"onnxruntime is not importable by {sys.executable} (pip install onnxruntime)")
    paths = [os.path.abspath(ort_site)] if ort_site else site.getsitepackages()
    probe = subprocess.run([sys.executable, "-c", "import numpy, onnxruntime; "
                            "print(numpy.__version__, onnxruntime.__version__)"],
                           capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=":".join(paths)))
    if probe.returncode:
        return no(f"numpy/onnxruntime not importable from {paths}: {probe.stderr.strip()[-200:]}")
    np_ver, ort_ver = probe.stdout.split()
    if int(np_ver.split(".")[0]) >= 2:
        # seen with numpy 2.4: every output tensor of the 2.51 stub got a
        # wrong byte size ("output tensor shape does not match size of
        # output"), presumably its pybind11 predating numpy 2's dtype layout
        return no(f"numpy {np_ver} (imported with {paths} first): the 2.51 python backend stub needs numpy<2 "
                  f"(pip install --target DIR 'numpy<2' onnxruntime; --ort-site DIR)")
    root = os.path.join(os.path.dirname(os.path.realpath(server)), "..")
    ver = f"{sys.version_info[0]}.{sys.version_info[1]}"
    stub = os.path.join(root, "python_backend_stubs", ver, "triton_python_backend_stub")
    pyb = os.path.join(root, "backends", "python")
    for need in (stub, f"{pyb}/libtriton_python.so", f"{pyb}/triton_python_backend_utils.py"):
        if not os.path.exists(need):
            return f"{os.path.normpath(need)} is missing (python backend for Python {ver})", {}
    os.makedirs(f"{work}/backends/python")
    for f in (stub, f"{pyb}/libtriton_python.so", f"{pyb}/triton_python_backend_utils.py"):
        shutil.copy(f, f"{work}/backends/python/")
    # the stub's RPATH ($ORIGIN/../../../../nvidia_pytriton.libs, its libcudart)
    # does not hold from the copy
    libs = [os.path.normpath(os.path.join(root, "..", "..", "nvidia_pytriton.libs")),
            os.environ.get("LD_LIBRARY_PATH", "")]
    return (None, {"LD_LIBRARY_PATH": ":".join(p for p in libs if p)}, paths,
            f"onnxruntime {ort_ver}, numpy {np_ver}")


def write_ort_model(folder, src, key, flags, batches, db, threads, paths):
    """<name>_ort: python backend, serving_ort_model.py on the same
    model.onnx; inputs and output dims from the reference test case run
    through onnxruntime here."""
    import onnxruntime as ort
    os.makedirs(f"{folder}/1")
    shutil.copy(f"{src}/model.onnx", f"{folder}/1/model.onnx")
    # The stub's embedded interpreter (the system's libpython of the same
    # X.Y) does not take PYTHONPATH; model.py starts with this Python's
    # site-packages (or --ort-site), where numpy and onnxruntime are.
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "serving_ort_model.py")) as f:
        code = f.read()
    with open(f"{folder}/1/model.py", "w") as f:
        f.write(f"import sys\nsys.path[:0] = {paths!r}  # written by bench/serving.py\n")
        f.write(code)
    sess = ort.InferenceSession(f"{src}/model.onnx", providers=["CPUExecutionProvider"])
    d = f"{src}/test_data_set_0"
    feeds = {i.name: pb(f"{d}/input_{k}.pb") for k, i in enumerate(sess.get_inputs())}
    outs = sess.run(None, feeds)
    names = {"cls": ["x"], "det": ["x"], "vad": ["input", "state"]}[key]
    cut = 1 if batches else 0
    dims = lambda shape: ", ".join(str(x) for x in shape[cut:])
    cfg = 'backend: "python"\n' + threads_param(threads)
    if batches:
        cfg += "max_batch_size: %s\n" % flags[-1].split(":")[1].split("x")[0]
        if db:
            cfg += "dynamic_batching { max_queue_delay_microseconds: 500 }\n"
    for n in feeds:
        if n not in names:
            cfg += 'parameters { key: "const_%s" value { string_value: "%s" } }\n' % (n, feeds[n].item())
    cfg += "input [\n" + ",\n".join('  { name: "%s" data_type: TYPE_FP32 dims: [ %s ] }' % (n, dims(feeds[n].shape))
                                     for n in names) + "\n]\n"
    cfg += "output [\n" + ",\n".join('  { name: "%s" data_type: TYPE_FP32 dims: [ %s ] }' % (o.name, dims(v.shape))
                                      for o, v in zip(sess.get_outputs(), outs)) + "\n]\n"
    with open(f"{folder}/config.pbtxt", "w") as f:
        f.write(cfg)


def infer_json(port, model, inputs):
    """{output name: array} of one request with JSON outputs."""
    body, hlen = request_body(inputs)
    head = json.loads(body[:hlen])
    head["parameters"]["binary_data_output"] = False
    h = json.dumps(head).encode()
    body = h + body[hlen:]
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", f"/v2/models/{model}/infer", body,
              {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(h))})
    r = c.getresponse()
    data = r.read()
    if r.status != 200:
        sys.exit(f"{model}: HTTP {r.status}: {data[:300]!r}")
    return {o["name"]: np.array(o["data"], dtype=np.float32).reshape(o["shape"])
            for o in json.loads(data)["outputs"]}


def max_abs_diff(port, a, b, inputs):
    x, y = infer_json(port, a, inputs), infer_json(port, b, inputs)
    if set(x) != set(y):
        sys.exit(f"{a} and {b} answer different outputs: {sorted(x)} vs {sorted(y)}")
    return max(float(np.max(np.abs(x[n] - y[n]))) for n in x)


def kiln_bench(kiln, engine, duration):
    out = subprocess.run([kiln, "bench", engine, "--duration", str(duration)], capture_output=True,
                         text=True, check=True).stdout
    unit = re.search(r"latency (ms|us)", out).group(1)
    med = float(re.search(r"median ([\d.]+)", out).group(1)) / (1000 if unit == "us" else 1)
    tput = float(re.search(r"throughput: ([\d.]+)", out).group(1))
    return tput, med


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True)
    ap.add_argument("--backend", required=True)
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--duration", type=float, default=4)
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--only", default=",".join(MODELS))
    ap.add_argument("--load", choices=["perf_analyzer", "clients"], default="perf_analyzer",
                    help="load generator (perf_analyzer when it can be set up, else this "
                         "script's HTTP clients)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="intra-op threads of each kiln instance and of the ORT peer")
    ap.add_argument("--ort-site", default=None,
                    help="folder with numpy<2 and onnxruntime for the python backend's stub "
                         "(pip install --target DIR 'numpy<2' onnxruntime); default: this "
                         "Python's site-packages")
    ap.add_argument("--no-ort", action="store_true", help="skip the ONNX Runtime peer")
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/kiln-serving"),
                    help="where perf_analyzer is kept once extracted")
    a = ap.parse_args()
    conc = [int(c) for c in a.concurrency.split(",")]
    work = tempfile.mkdtemp(prefix="kiln-serving-")
    os.makedirs(f"{work}/backends/kiln")
    shutil.copy(a.backend, f"{work}/backends/kiln/libtriton_kiln.so")
    repo, variants = f"{work}/models", []
    ort_why = None if not a.no_ort else "--no-ort"
    ort_env = {}
    if not ort_why:
        ort_why, ort_env, ort_paths, ort_ver = ort_peer(a.server, work, a.ort_site)
    if ort_why:
        print(f"note: ONNX Runtime peer skipped: {ort_why}")
    for key in a.only.split(","):
        folder, flags, batches = MODELS[key]
        engine = f"{work}/{key}.kiln"
        subprocess.run([a.kiln, "build", f"{a.models}/{folder}/model.onnx", *flags, "-o", engine],
                       check=True, capture_output=True)
        # Dynamic batching on: what auto-complete gives a batching engine;
        # off: the same max_batch_size set in the config, no scheduler.
        for db in ([True, False] if batches else [False]):
            name = f"{key}_{'db' if db else 'nodb'}"
            os.makedirs(f"{repo}/{name}/1")
            shutil.copy(engine, f"{repo}/{name}/1/model.kiln")
            cfg = 'backend: "kiln"\n' + threads_param(a.threads)
            if db:
                cfg += "dynamic_batching { max_queue_delay_microseconds: 500 }\n"
            elif batches:
                cfg += "max_batch_size: %s\n" % flags[-1].split(":")[1].split("x")[0]
            with open(f"{repo}/{name}/config.pbtxt", "w") as f:
                f.write(cfg)
            if not ort_why:
                write_ort_model(f"{repo}/{name}_ort", f"{a.models}/{folder}", key, flags, batches, db,
                                a.threads, ort_paths)
            variants.append((key, folder, name, db, engine))
    pa = perf_analyzer(a.server, a.cache) if a.load == "perf_analyzer" else None
    http_port, grpc_port = free_ports(2)
    log = open(f"{work}/server.log", "w")
    server = subprocess.Popen([a.server, "--model-repository", repo, "--backend-directory",
                               f"{work}/backends", "--http-address", "127.0.0.1", "--http-port",
                               str(http_port), "--grpc-address", "127.0.0.1", "--grpc-port",
                               str(grpc_port), "--allow-metrics=false", "--log-verbose=0"],
                              stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, **ort_env))
    try:
        for _ in range(600):
            try:
                c = http.client.HTTPConnection("127.0.0.1", http_port, timeout=2)
                c.request("GET", "/v2/health/ready")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            if server.poll() is not None:
                with open(f"{work}/server.log") as f:
                    tail = f.read()[-1500:]
                sys.exit(f"tritonserver exited; log: {work}/server.log\n{tail}")
            time.sleep(0.2)
        else:
            sys.exit(f"tritonserver not ready after 120 s; log: {work}/server.log")
        gen = ("perf_analyzer 2.41 over HTTP, random inputs (rows marked 'clients': it found no "
               "stable measurement, this script's clients stood in)" if pa else
               "this script's HTTP clients, binary tensors, one keep-alive connection each")
        print(f"machine: {cpu_model()}, load average {os.getloadavg()[0]:.1f} at the start; "
              f"tritonserver 2.51 (nvidia-pytriton 0.7.0), kiln backend, 1 instance per model, "
              f"{a.threads} intra-op threads; "
              f"{'ORT peer: python backend, ' + ort_ver if not ort_why else 'no ORT peer'}; "
              f"load: {gen}, {a.duration:g} s per measurement")
        print()
        print("| model | dynamic batching | concurrency | load | infer/s | p50 ms | p90 ms | p99 ms | "
              "requests per kiln run | kiln run ms in the server (mean) | "
              "in-process kiln bench: infer/s, median ms | p50 - kiln run (concurrency 1) |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        benched, side = {}, []
        for key, folder, name, db, engine in variants:
            d = f"{a.models}/{folder}/test_data_set_0"
            names = {"cls": ["x"], "det": ["x"], "vad": ["input", "state"]}[key]
            inputs = {n: pb(f"{d}/input_{i}.pb") for i, n in enumerate(names)}
            body, hlen = request_body(inputs)
            load(http_port, name, body, hlen, 1, min(1.0, a.duration))  # warm up
            if not ort_why:
                load(http_port, f"{name}_ort", body, hlen, 1, min(1.0, a.duration))
                diff = max_abs_diff(http_port, name, f"{name}_ort", inputs)
                print(f"{name} vs {name}_ort on the reference input: max abs diff {diff:.3g}", flush=True)
            if key not in benched:
                benched[key] = kiln_bench(a.kiln, engine, a.duration)
            tput_k, med_k = benched[key]
            for c in conc:
                reqs0, runs0, ns0 = stats(http_port, name)
                tput, p50, p90, p99, by = measure(pa, http_port, name, body, hlen, c, a.duration, work)
                reqs, runs, ns = stats(http_port, name)
                if not ort_why:
                    o = measure(pa, http_port, f"{name}_ort", body, hlen, c, a.duration, work)
                    side.append((folder, db, c, (tput, p50, p99, by), (o[0], o[1], o[3], o[4])))
                runs, run_ms = runs - runs0, (ns - ns0) / max(runs - runs0, 1) / 1e6
                per_run = (reqs - reqs0) / max(runs, 1)
                print(f"| {folder} | {'on' if db else 'off'} | {c} | {by} | {tput:.1f} | {p50:.2f} | {p90:.2f} | "
                      f"{p99:.2f} | {per_run:.2f} | {run_ms:.2f} | {tput_k:.1f}, {med_k:.2f} | "
                      f"{'%+.2f ms' % (p50 - run_ms) if c == 1 else ''} |", flush=True)
        if side:
            print()
            print("| model | dynamic batching | concurrency | kiln infer/s | ORT infer/s | kiln/ORT | "
                  "kiln p50 ms | ORT p50 ms | ORT/kiln | kiln p99 ms | ORT p99 ms | ORT/kiln | load |")
            print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
            for folder, db, c, k, o in side:
                by = k[3] if k[3] == o[3] else f"{k[3]} / {o[3]}"
                print(f"| {folder} | {'on' if db else 'off'} | {c} | {k[0]:.1f} | {o[0]:.1f} | "
                      f"{k[0] / o[0]:.2f} | {k[1]:.2f} | {o[1]:.2f} | {o[1] / k[1]:.2f} | {k[2]:.2f} | "
                      f"{o[2]:.2f} | {o[2] / k[2]:.2f} | {by} |")
        print(f"\nload average at the end: {' '.join('%.1f' % x for x in os.getloadavg())}")
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
