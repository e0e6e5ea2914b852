"""triton_http.py — what the Triton test clients (triton_client.py,
triton_gpu_client.py) share: one line per check with the failures kept,
KServe v2 HTTP calls with the standard library, and ONNX reference .pb
files read with onnx."""
import json
import urllib.error
import urllib.request

from onnx import TensorProto, numpy_helper

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def call(base, method, path, body=None):
    """(status, parsed JSON body) of one request; never raises for HTTP errors."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
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


def pb(path):
    t = TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)
