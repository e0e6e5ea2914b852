"""triton_client.py — checks a running tritonserver that serves kiln models
(scripts/test_triton.sh writes the repository and starts the server).

usage: triton_client.py <http base url> <shared models folder> [<grpc host:port>]

HTTP, KServe v2 JSON protocol, standard library + numpy/onnx only (the
reference .pb files).  Every check prints one line; exit 1 if any failed."""
import concurrent.futures
import json
import sys
import urllib.error
import urllib.request

import numpy as np
from onnx import TensorProto, numpy_helper

BASE, MODELS = sys.argv[1], sys.argv[2]
GRPC = sys.argv[3] if len(sys.argv) > 3 else None
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def call(method, path, body=None):
    """(status, parsed JSON body) of one request; never raises for HTTP errors."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status, text = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read()
    try:
        return status, json.loads(text or b"{}")
    except ValueError:
        return status, {"raw": text.decode(errors="replace")}


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


def pb(path):
    t = TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


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
