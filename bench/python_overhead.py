#!/usr/bin/env python3
"""Per-call cost of the Python layer (issue 11's target: a few µs).

  1. a Python ``impl`` (a numpy no-op) vs the same network with a built-in
     C op, per layer: a chain of K layers on a 16-element tensor, run with
     bound buffers (``execute_async``), so the difference per layer is what
     calling into Python costs;
  2. ``context.execute({name: array})`` (binds, allocates outputs) vs
     ``execute_async`` on bound buffers (one C call: kiln_context_run).

    build/venv/bin/python bench/python_overhead.py [--layers 32] [--runs 2000]
"""
import argparse
import time

import numpy as np

import kiln
import kiln.plugin as kp


@kp.register("bench::noop")
def noop_desc(x: kp.TensorDesc) -> kp.TensorDesc:
    return x.like()


@kp.impl("bench::noop")
def noop_impl(x: kp.Tensor, outputs, stream) -> None:
    np.asarray(outputs[0])  # touch it as an impl would


def chain(op, k, version=1):
    b = kiln.Builder()
    net = b.create_network()
    t = net.add_input("x", kiln.float32, (16,))
    for _ in range(k):
        t = (net.add_plugin(kp.op.bench.noop(t)) if op is None else
             net.add_layer(op, [t], version=version)).get_output(0)
    net.mark_output(t)
    cfg = b.create_builder_config()
    cfg.threads = 1
    cfg.set_flag(kiln.BuilderFlag.NO_TIMING | kiln.BuilderFlag.NO_FUSION)
    return b.build_engine(net, cfg)


def per_run(fn, runs):
    for _ in range(runs // 10):
        fn()
    best = float("inf")
    for _ in range(5):  # best of 5 batches: the least disturbed by other load
        t0 = time.perf_counter()
        for _ in range(runs):
            fn()
        best = min(best, (time.perf_counter() - t0) / runs)
    return best * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--runs", type=int, default=2000)
    a = ap.parse_args()
    relu_v = max(o["version"] for o in kiln.registered_ops("ai.onnx::Relu") if o["name"] == "Relu")
    x = np.random.default_rng(0).standard_normal(16).astype(np.float32)
    res = {}
    for label, op in (("python impl", None), ("C op (Relu)", "ai.onnx::Relu")):
        eng = chain(op, a.layers, relu_v)
        ctx = eng.create_execution_context(threads=1)
        y = np.empty(16, np.float32)
        ctx.set_tensor_address("x", x)
        ctx.set_tensor_address(eng.outputs[0], y)
        res[label] = per_run(ctx.execute_async, a.runs // 10)
        print(f"{label:12s}: {res[label]:9.2f} µs per run of {a.layers} layers")
    per_layer = (res["python impl"] - res["C op (Relu)"]) / a.layers
    print(f"Python impl call: {per_layer:.2f} µs per layer (over a built-in C op)")

    eng = chain("ai.onnx::Relu", 1, relu_v)
    ctx = eng.create_execution_context(threads=1)
    y = np.empty(16, np.float32)
    t_exec = per_run(lambda: ctx.execute({"x": x}), a.runs)
    ctx.set_tensor_address("x", x)
    ctx.set_tensor_address(eng.outputs[0], y)
    t_async = per_run(ctx.execute_async, a.runs)
    print(f"context.execute(dict): {t_exec:.2f} µs; execute_async on bound buffers (the C run): {t_async:.2f} µs; "
          f"overhead {t_exec - t_async:.2f} µs")


if __name__ == "__main__":
    main()
