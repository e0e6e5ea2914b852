"""triton_client.py — checks a running tritonserver that serves kiln models
(scripts/test_triton.sh writes the repository and starts the server).

usage: triton_client.py <http base url> <shared models folder> [<grpc host:port>]

HTTP, KServe v2 protocol (JSON, and binary tensors for PP-OCRv4 det),
standard library + numpy/onnx only (the reference .pb files); gRPC through
tritonclient when it is installed.  Besides the served models it checks the
configs the backend completed, and unloads/reloads a model under load
(explicit model control), reading the backend's live counters from the
server log (KILN_TRITON_LOG) and the server's RSS (KILN_TRITON_PID).
Every check prints one line; exit 1 if any failed."""
import concurrent.futures
import json
import os
import re
import sys
import threading
import time
import urllib.error
import urllib.request

import numpy as np

import triton_http
from triton_http import check, failures, pb

BASE, MODELS = sys.argv[1], sys.argv[2]
GRPC = sys.argv[3] if len(sys.argv) > 3 else None


def call(method, path, body=None):
    return triton_http.call(BASE, method, path, body)


def infer(model, inputs, dtypes=None):
    """inputs: {name: ndarray}; returns (status, {output name: ndarray} or error text)."""
    body = {"inputs": [{"name": n, "shape": list(a.shape),
                        "datatype": (dtypes or {}).get(n, "FP32"),
                        "data": a.ravel().tolist()} for n, a in inputs.items()]}
    status, out = call("POST", f"/v2/models/{model}/infer", body)
    if status != 200:
        return status, out.get("error", str(out))
    return status, {o["name"]: np.array(o["data"], np.float32).reshape(o["shape"])
                    for o in out["outputs"]}


def infer_binary(model, inputs):
    """Like infer, with tensors as raw bytes (the protocol's binary data
    extension): for large tensors, which JSON would make slow."""
    head = {"inputs": [{"name": n, "shape": list(a.shape), "datatype": "FP32",
                        "parameters": {"binary_data_size": a.nbytes}} for n, a in inputs.items()],
            "outputs": [], "parameters": {"binary_data_output": True}}
    hb = json.dumps(head).encode()
    body = hb + b"".join(np.ascontiguousarray(a, np.float32).tobytes() for a in inputs.values())
    req = urllib.request.Request(BASE + f"/v2/models/{model}/infer", data=body, method="POST",
                                 headers={"Content-Type": "application/octet-stream",
                                          "Inference-Header-Content-Length": str(len(hb))})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            n = int(r.headers.get("Inference-Header-Content-Length", 0))
            raw = r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    meta, at, outs = json.loads(raw[:n] if n else raw), n, {}
    for o in meta["outputs"]:
        size = o.get("parameters", {}).get("binary_data_size")
        if size is None:
            outs[o["name"]] = np.array(o["data"], np.float32).reshape(o["shape"])
            continue
        outs[o["name"]] = np.frombuffer(raw[at:at + size], np.float32).reshape(o["shape"])
        at += size
    return 200, outs


def close(got, want):
    return got.shape == want.shape and np.allclose(got, want, rtol=1e-3, atol=1e-4)


rng = np.random.default_rng()

# ---- ppocr_cls: built by the backend from model.onnx ----------------------
check(call("GET", "/v2/models/cls/ready")[0] == 200, "cls is ready (model.onnx built on load)")
x = pb(f"{MODELS}/ppocr_cls/test_data_set_0/input_0.pb")
y = pb(f"{MODELS}/ppocr_cls/test_data_set_0/output_0.pb")
st, out = infer("cls", {"x": x})
check(st == 200 and close(out["softmax_0.tmp_0"], y), f"cls matches ONNX Runtime's output ({st})")

rand = rng.uniform(-1, 1, (6, 3, 48, 192)).astype(np.float32)
alone = []
for i in range(6):
    st, out = infer("cls", {"x": rand[i:i + 1]})
    alone.append(out["softmax_0.tmp_0"] if st == 200 else None)
check(all(a is not None for a in alone), "cls: 6 random single requests answered")
st, out = infer("cls", {"x": np.concatenate([x, rand[:1]])})
check(st == 200 and close(out["softmax_0.tmp_0"][:1], y) and close(out["softmax_0.tmp_0"][1:], alone[0]),
      "cls: a batch of 2 = the reference row + the same random row run alone")

# Concurrent requests: the dynamic batcher gathers them, 2 instances serve.
with concurrent.futures.ThreadPoolExecutor(8) as pool:
    results = list(pool.map(lambda i: infer("cls", {"x": rand[i % 6:i % 6 + 1]}), range(24)))
check(all(st == 200 and alone[i % 6] is not None and close(o["softmax_0.tmp_0"], alone[i % 6])
          for i, (st, o) in enumerate(results)),
      "cls: 24 concurrent requests, each answered with its own input's result")

# Malformed requests: error responses, the server keeps serving.
st, err = infer("cls", {"x": rand[:1, :, :, :100]})
check(st == 400 and "x" in err, f"cls: wrong shape is an error ({st}: {err[:100]})")
st, err = infer("cls", {"x": rand[:1].astype(np.int32)}, {"x": "INT32"})
check(st == 400, f"cls: wrong dtype is an error ({st}: {err[:100]})")
st, err = infer("cls", {})
check(st == 400, f"cls: missing input is an error ({st}: {err[:100]})")
st, err = infer("cls", {"x": rng.uniform(-1, 1, (5, 3, 48, 192)).astype(np.float32)})
check(st == 400, f"cls: batch 5 > max_batch_size 4 is an error ({st}: {err[:100]})")
st, out = infer("cls", {"x": x})
check(st == 200 and close(out["softmax_0.tmp_0"], y), "cls still correct after the bad requests")

# Statistics reported by the backend show in Triton's statistics extension.
st, stats = call("GET", "/v2/models/cls/stats")
s = stats.get("model_stats", [{}])[0].get("inference_stats", {}) if st == 200 else {}
ok = int(s.get("success", {}).get("count", 0))
check(ok >= 33 and int(s.get("compute_infer", {}).get("ns", 0)) > 0,
      f"cls statistics: {ok} successful requests with compute time reported")

# Informational (depends on timing, so not a check): the kiln runs Triton
# saw, by batch size; sizes > 1 are requests the backend gathered.
sizes = {b.get("batch_size"): b.get("compute_infer", {}).get("count")
         for b in stats.get("model_stats", [{}])[0].get("batch_stats", [])} if st == 200 else {}
print(f"info cls runs by batch size: {sizes}")

# ---- silero_vad_v5: a model.kiln built by the CLI -------------------------
vin = {"input": pb(f"{MODELS}/silero_vad_v5/test_data_set_0/input_0.pb"),
       "state": pb(f"{MODELS}/silero_vad_v5/test_data_set_0/input_1.pb")}
st, out = infer("vad", vin)
check(st == 200 and close(out["output"], pb(f"{MODELS}/silero_vad_v5/test_data_set_0/output_0.pb"))
      and close(out["stateN"], pb(f"{MODELS}/silero_vad_v5/test_data_set_0/output_1.pb")),
      f"vad (model.kiln) matches ONNX Runtime's outputs ({st})")

# ---- a model whose op comes from a plugin library named in parameters ----
xc = rng.uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)
st, out = infer("circ_pad", {"x": xc})
# pads [1, 2, 2, 1] = (left, right) of W, then (top, bottom) of H, torch order
want = np.pad(xc, ((0, 0), (0, 0), (2, 1), (1, 2)), mode="wrap")
check(st == 200 and close(out["y"], want), f"circ_pad (plugin library) matches numpy's wrap pad ({st})")

# ---- a model whose plugin library is missing: a clean load failure --------
st, index = call("POST", "/v2/repository/index", {})
broken = [m for m in index if m.get("name") == "broken"] if st == 200 else []
reason = broken[0].get("reason", "") if broken else ""
check(bool(broken) and broken[0].get("state") != "READY" and "libnope_plugin.so" in reason,
      f"broken: load failure names the missing plugin ({reason[:120]})")
check(call("GET", "/v2/health/live")[0] == 200, "the server is alive at the end")

# ---- auto-complete: configs that name only the backend -------------------
st, cfg = call("GET", "/v2/models/auto/config")
ins, outs = cfg.get("input", [{}]), cfg.get("output", [{}])
check(st == 200 and cfg.get("max_batch_size") == 8 and "dynamic_batching" in cfg
      and [(i.get("name"), i.get("data_type"), [int(d) for d in i.get("dims", [])]) for i in ins]
      == [("x", "TYPE_FP32", [3, 48, 192])]
      and [(o.get("name"), o.get("data_type"), [int(d) for d in o.get("dims", [])]) for o in outs]
      == [("softmax_0.tmp_0", "TYPE_FP32", [2])],
      f"auto: config completed from model.kiln (max_batch_size 8 from its profile): "
      f"{st} {json.dumps({k: cfg.get(k) for k in ('max_batch_size', 'input', 'output')})[:300]}")
st, out = infer("auto", {"x": np.concatenate([x, rand[:2]])})
check(st == 200 and close(out["softmax_0.tmp_0"][:1], y) and close(out["softmax_0.tmp_0"][1:], np.concatenate(alone[:2])),
      f"auto: a batch of 3 matches ONNX Runtime / the rows run alone ({st})")
st, cfg = call("GET", "/v2/models/auto_vad/config")
check(st == 200 and cfg.get("max_batch_size") == 0 and
      sorted((i["name"], [int(d) for d in i["dims"]]) for i in cfg.get("input", []))
      == [("input", [1, 512]), ("state", [2, 1, 128])],
      f"auto_vad: config completed, no batching (fixed shapes): {st}")
st, out = infer("auto_vad", vin)
check(st == 200 and close(out["stateN"], pb(f"{MODELS}/silero_vad_v5/test_data_set_0/output_1.pb")),
      f"auto_vad matches ONNX Runtime's outputs ({st})")

# ---- PP-OCRv4 det: model.onnx built on load, 1.2 M floats each way ---------
xd = pb(f"{MODELS}/ppocrv4_det/test_data_set_0/input_0.pb")
yd = pb(f"{MODELS}/ppocrv4_det/test_data_set_0/output_0.pb")
st, cfg = call("GET", "/v2/models/det/config")
det_out = [(o.get("name"), o.get("data_type"), [int(d) for d in o.get("dims", [])]) for o in cfg.get("output", [])]
check(st == 200 and det_out in ([("sigmoid_0.tmp_0", "TYPE_FP32", [1, 640, 640])],
                                [("sigmoid_0.tmp_0", "TYPE_FP32", [1, -1, -1])]),
      f"det: output completed from the engine: {det_out}")
st, out = infer_binary("det", {"x": xd})
ok = st == 200 and close(out["sigmoid_0.tmp_0"], yd)
err = "" if ok or st != 200 else f"max |diff| {np.abs(out['sigmoid_0.tmp_0'] - yd).max():.2e}"
check(ok, f"det (PP-OCRv4, binary HTTP) matches ONNX Runtime's output ({st} {err or str(out)[:100] if not ok else ''})")

# ---- unload/reload under load ---------------------------------------------
# 4 client threads send single rows while the model is unloaded and loaded
# again 4 times: every answer is the right one for its own input, or a
# clean error naming the model; nothing else (no 500, no dropped
# connection); afterwards it serves again, and the backend's live counters
# (server log) return to the same values after every unload.
churn_alone = []
for i in range(6):
    st, out = infer("churn", {"x": rand[i:i + 1]})
    churn_alone.append(out["softmax_0.tmp_0"] if st == 200 else None)
check(all(a is not None for a in churn_alone), "churn: serves before the reloads")
counts = {"ok": 0, "clean": 0, "wrong": [], "bad": []}
lock, stop = threading.Lock(), threading.Event()


def hammer(seed):
    r = np.random.default_rng(seed)
    while not stop.is_set():
        i = int(r.integers(6))
        try:
            st, out = infer("churn", {"x": rand[i:i + 1]})
        except Exception as e:  # a dropped connection is a failure
            st, out = -1, repr(e)
        with lock:
            if st == 200 and close(out["softmax_0.tmp_0"], churn_alone[i]):
                counts["ok"] += 1
            elif st == 200:
                counts["wrong"].append(i)
            elif st in (400, 404, 503) and "churn" in str(out):
                counts["clean"] += 1
            else:
                counts["bad"].append(f"{st}: {str(out)[:120]}")


def rss_kb():
    try:
        with open(f"/proc/{os.environ['KILN_TRITON_PID']}/status") as f:
            return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
    except (KeyError, OSError, AttributeError):
        return None


threads = [threading.Thread(target=hammer, args=(k,)) for k in range(4)]
for t in threads:
    t.start()
cycles, reload_ok, rss = 6, True, []
for c in range(cycles):
    time.sleep(0.3)
    st_u = call("POST", "/v2/repository/models/churn/unload")[0]
    time.sleep(0.3)
    st_l = call("POST", "/v2/repository/models/churn/load")[0]
    reload_ok &= st_u == 200 and st_l == 200
    rss.append(rss_kb())
time.sleep(0.3)
stop.set()
for t in threads:
    t.join()
check(reload_ok, f"churn: {cycles} unloads and loads under load answered 200")
check(counts["ok"] > 0 and not counts["wrong"] and not counts["bad"],
      f"churn under load: {counts['ok']} right answers, {counts['clean']} clean errors naming the model, "
      f"{len(counts['wrong'])} wrong answers, {len(counts['bad'])} other failures {counts['bad'][:3]}")
st, out = infer("churn", {"x": rand[:1]})
check(st == 200 and close(out["softmax_0.tmp_0"], churn_alone[0]), f"churn serves after the reloads ({st})")
log = os.environ.get("KILN_TRITON_LOG")
if log:
    with open(log, errors="replace") as f:
        text = f.read()
    after_unload = re.findall(r"unloaded model 'churn' \(live: (\d+) models, (\d+) instances\)", text)
    check(len(after_unload) == cycles and len(set(after_unload)) == 1,
          f"churn: the backend's live counts after each of {len(after_unload)} unloads: {sorted(set(after_unload))}")
if rss[0] and rss[-1]:
    grow = (rss[-1] - rss[0]) / 1024
    # A leaked engine + 2 contexts per cycle would add several MB each time.
    check(grow < 48, f"churn: server RSS {rss[0] / 1024:.0f} MB after the first reload, "
          f"{rss[-1] / 1024:.0f} MB after the last ({grow:+.1f} MB over {cycles - 1} cycles)")

# ---- the same over gRPC (tritonclient, when the venv has it) --------------
try:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException
except ImportError:
    grpcclient = None
if GRPC and grpcclient:
    client = grpcclient.InferenceServerClient(GRPC)

    def ginfer(model, inputs):
        ins = []
        for n, a in inputs.items():
            t = grpcclient.InferInput(n, list(a.shape), "FP32")
            t.set_data_from_numpy(a)
            ins.append(t)
        return client.infer(model, ins, client_timeout=60)

    r = ginfer("cls", {"x": x})
    check(close(r.as_numpy("softmax_0.tmp_0"), y), "gRPC: cls matches ONNX Runtime's output")
    r = ginfer("vad", vin)
    check(close(r.as_numpy("stateN"), pb(f"{MODELS}/silero_vad_v5/test_data_set_0/output_1.pb")),
          "gRPC: vad matches ONNX Runtime's outputs")
    try:
        ginfer("cls", {"x": rand[:1, :, :, :100]})
        check(False, "gRPC: wrong shape is an error")
    except InferenceServerException as e:
        check("x" in str(e), f"gRPC: wrong shape is an error ({str(e)[:80]})")
else:
    print("skip gRPC: " + ("no port given" if not GRPC else "tritonclient not installed"))

print(f"{len(failures)} failed" if failures else "all Triton checks passed")
sys.exit(1 if failures else 0)
