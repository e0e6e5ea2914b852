#!/usr/bin/env python3
"""triton_gpu_client.py — checks a tritonserver whose kiln model `gpu_cls`
(ppocr_cls, instance_group KIND_GPU, dynamic batching) runs on the GPU
(scripts/test_gpu.sh writes the repository and starts the server).

usage: triton_gpu_client.py <http base url> <ppocr_cls folder>

HTTP (KServe v2 protocol, JSON) with the standard library; numpy and onnx
for the reference .pb files.  Checks: the served config says KIND_GPU; the
reference input answers ONNX Runtime's reference output (rtol 1e-3, atol
1e-4); a pair of concurrent requests (reference + fresh random input) is
gathered by the dynamic batcher into one execution (the server's statistics:
2 inferences, 1 execution) and each answer equals its unbatched one.  One
line per check; exit 1 if any failed."""
import concurrent.futures
import sys

import numpy as np

import triton_http
from triton_http import check, failures, pb

BASE, MODEL_DIR = sys.argv[1], sys.argv[2]
OUT = "softmax_0.tmp_0"


def call(method, path, body=None):
    return triton_http.call(BASE, method, path, body)


def infer(x):
    st, out = call("POST", "/v2/models/gpu_cls/infer",
                   {"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}]})
    if st != 200:
        return None, out.get("error")
    o = {t["name"]: t for t in out["outputs"]}[OUT]
    return np.array(o["data"], np.float32).reshape(o["shape"]), None


def stats():
    st, s = call("GET", "/v2/models/gpu_cls/stats")
    m = s.get("model_stats", [{}])[0] if st == 200 else {}
    return int(m.get("inference_count", -1)), int(m.get("execution_count", -1))


def close(a, b):
    return a is not None and a.shape == b.shape and np.allclose(a, b, rtol=1e-3, atol=1e-4)


st, cfg = call("GET", "/v2/models/gpu_cls/config")
kinds = [g.get("kind") for g in cfg.get("instance_group", [])]
check(st == 200 and kinds == ["KIND_GPU"], f"gpu_cls config: instance_group kinds {kinds}")
x = pb(f"{MODEL_DIR}/test_data_set_0/input_0.pb")
y = pb(f"{MODEL_DIR}/test_data_set_0/output_0.pb")
got, err = infer(x)
check(close(got, y), f"gpu_cls on the GPU matches ONNX Runtime's reference output"
                     f"{'' if got is None else f' (max abs diff {np.abs(got - y).max():.2e})'}{err or ''}")
seed = int.from_bytes(np.random.bytes(4), "little")
r = np.random.default_rng(seed).uniform(-1, 1, x.shape).astype(np.float32)
alone_r, err_r = infer(r)
check(alone_r is not None, f"random input (seed {seed}) answered alone {err_r or ''}")
inf0, exe0 = stats()
with concurrent.futures.ThreadPoolExecutor(2) as pool:
    fx, fr = pool.submit(infer, x), pool.submit(infer, r)
    (px, ex), (pr, er) = fx.result(), fr.result()
inf1, exe1 = stats()
check(close(px, y) and alone_r is not None and close(pr, alone_r),
      f"concurrent pair: each answer equals its unbatched one {ex or ''}{er or ''}")
check(inf1 - inf0 == 2 and exe1 - exe0 == 1,
      f"dynamic batching gathered the pair: {inf1 - inf0} inferences in {exe1 - exe0} execution(s)")
print(f"{len(failures)} check(s) failed" if failures else "triton GPU client: all checks passed")
sys.exit(1 if failures else 0)
