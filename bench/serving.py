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
Peer: Triton's ONNX Runtime backend would be the natural one, but the
tritonserver of PyPI's nvidia-pytriton 0.7.0 ships only the python backend,
so kiln is shown alone, with its in-process figure.

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
    ap.add_argument("--concurrency", default="1,2,4")
    ap.add_argument("--only", default=",".join(MODELS))
    ap.add_argument("--load", choices=["perf_analyzer", "clients"], default="perf_analyzer",
                    help="load generator (perf_analyzer when it can be set up, else this "
                         "script's HTTP clients)")
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/kiln-serving"),
                    help="where perf_analyzer is kept once extracted")
    a = ap.parse_args()
    conc = [int(c) for c in a.concurrency.split(",")]
    work = tempfile.mkdtemp(prefix="kiln-serving-")
    os.makedirs(f"{work}/backends/kiln")
    shutil.copy(a.backend, f"{work}/backends/kiln/libtriton_kiln.so")
    repo, variants = f"{work}/models", []
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
            cfg = 'backend: "kiln"\n'
            if db:
                cfg += "dynamic_batching { max_queue_delay_microseconds: 500 }\n"
            elif batches:
                cfg += "max_batch_size: %s\n" % flags[-1].split(":")[1].split("x")[0]
            with open(f"{repo}/{name}/config.pbtxt", "w") as f:
                f.write(cfg)
            variants.append((key, folder, name, db, engine))
    pa = perf_analyzer(a.server, a.cache) if a.load == "perf_analyzer" else None
    http_port, grpc_port = free_ports(2)
    log = open(f"{work}/server.log", "w")
    server = subprocess.Popen([a.server, "--model-repository", repo, "--backend-directory",
                               f"{work}/backends", "--http-address", "127.0.0.1", "--http-port",
                               str(http_port), "--grpc-address", "127.0.0.1", "--grpc-port",
                               str(grpc_port), "--allow-metrics=false", "--log-verbose=0"],
                              stdout=log, stderr=subprocess.STDOUT)
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
                sys.exit(f"tritonserver exited; log: {work}/server.log")
            time.sleep(0.2)
        gen = ("perf_analyzer 2.41 over HTTP, random inputs (rows marked 'clients': it found no "
               "stable measurement, this script's clients stood in)" if pa else
               "this script's HTTP clients, binary tensors, one keep-alive connection each")
        print(f"machine: {cpu_model()}, load average {os.getloadavg()[0]:.1f} at the start; "
              f"tritonserver 2.51 (nvidia-pytriton 0.7.0), kiln backend, 1 instance per model; "
              f"load: {gen}, {a.duration:g} s per measurement")
        print()
        print("| model | dynamic batching | concurrency | load | infer/s | p50 ms | p90 ms | p99 ms | "
              "requests per kiln run | kiln run ms in the server (mean) | "
              "in-process kiln bench: infer/s, median ms | p50 - kiln run (concurrency 1) |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        benched = {}
        for key, folder, name, db, engine in variants:
            d = f"{a.models}/{folder}/test_data_set_0"
            names = {"cls": ["x"], "det": ["x"], "vad": ["input", "state"]}[key]
            inputs = {n: pb(f"{d}/input_{i}.pb") for i, n in enumerate(names)}
            body, hlen = request_body(inputs)
            load(http_port, name, body, hlen, 1, min(1.0, a.duration))  # warm up
            if key not in benched:
                benched[key] = kiln_bench(a.kiln, engine, a.duration)
            tput_k, med_k = benched[key]
            for c in conc:
                reqs0, runs0, ns0 = stats(http_port, name)
                got = pa_row(pa, http_port, name, c, a.duration, work) if pa else None
                if got:
                    tput, p50, p90, p99 = got
                    by = "perf_analyzer"
                else:
                    tput, lat, errors = load(http_port, name, body, hlen, c, a.duration)
                    if errors or not lat:
                        sys.exit(f"{name}: {len(errors)} failed requests (HTTP {sorted(set(errors))})")
                    p50, p90, p99 = np.percentile(lat, [50, 90, 99])
                    by = "clients"
                reqs, runs, ns = stats(http_port, name)
                runs, run_ms = runs - runs0, (ns - ns0) / max(runs - runs0, 1) / 1e6
                per_run = (reqs - reqs0) / max(runs, 1)
                print(f"| {folder} | {'on' if db else 'off'} | {c} | {by} | {tput:.1f} | {p50:.2f} | {p90:.2f} | "
                      f"{p99:.2f} | {per_run:.2f} | {run_ms:.2f} | {tput_k:.1f}, {med_k:.2f} | "
                      f"{'%+.2f ms' % (p50 - run_ms) if c == 1 else ''} |", flush=True)
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
